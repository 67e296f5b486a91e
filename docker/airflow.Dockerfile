# Airflow 3.3 with Ballast's pinned Python dependencies (same constraints as the local venv) and
# the Spark Kafka connector jars: the Spark drivers run in this image (client mode, launched by
# the supervise DAG from the scheduler), so the driver needs the connector as much as the executors.
FROM maven:3.9-eclipse-temurin-17 AS jars
COPY jvm /jvm
RUN cd /jvm/spark-kafka && mvn -q -B -s ../settings.xml dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=/jars

# Ballast's Kafka writer (jvm/ballast-sink; spark_jobs/id_sink.py), built against this Spark's jars
# and the connector's kafka-clients by the script `make setup` uses
FROM python:3.11-slim-bookworm AS sink
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --no-deps "pyspark==4.2.0"
COPY --from=jars /jars/ /connector/
COPY jvm/ballast-sink /src/jvm/ballast-sink
COPY scripts/build_sink.sh /src/scripts/build_sink.sh
RUN bash /src/scripts/build_sink.sh "$(python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))')/jars" \
      /connector /ballast-sink.jar python

FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl \
    && rm -rf /var/lib/apt/lists/*
# BALLAST_CACHE_DIR: the connector jars (passed to spark-submit as --jars) and the executors' code
# archive (spark_jobs/ship.py writes it to <cache>/dist, hence writable by the airflow user)
COPY --from=jars /jars/ /opt/ballast-cache/jars/spark-kafka/
COPY --from=sink /ballast-sink.jar /opt/ballast-cache/jars/ballast-sink/
RUN mkdir -p /opt/ballast-cache/dist /var/lib/ballast && chown -R airflow:0 /opt/ballast-cache /var/lib/ballast
USER airflow
COPY requirements.txt constraints.txt /tmp/ballast/
RUN pip install --no-cache-dir -r /tmp/ballast/requirements.txt -c /tmp/ballast/constraints.txt \
    && pip install --no-cache-dir --no-deps --force-reinstall pyspark==4.2.0
ENV BALLAST_CACHE_DIR=/opt/ballast-cache PYSPARK_PYTHON=python3
