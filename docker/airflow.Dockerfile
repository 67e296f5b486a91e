# Airflow 3.3 with Ballast's pinned Python dependencies (same constraints as the local venv).
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl \
    && rm -rf /var/lib/apt/lists/*
USER airflow
COPY requirements.txt constraints.txt /tmp/ballast/
RUN pip install --no-cache-dir -r /tmp/ballast/requirements.txt -c /tmp/ballast/constraints.txt \
    && pip install --no-cache-dir --no-deps --force-reinstall pyspark==4.2.0
ENV PYSPARK_PYTHON=/home/airflow/.local/bin/python
