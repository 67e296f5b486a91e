# Spark 4.2 standalone master/worker with the Kafka connector jars and Ballast's Python deps.
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

FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt constraints.txt /tmp/ballast/
RUN pip install --no-cache-dir "pyspark==4.2.0" pyarrow "pandas<3" lmdb rocksdict kafka-python SQLAlchemy \
      psycopg2-binary -c /tmp/ballast/constraints.txt
RUN ln -s "$(python -c 'import pyspark,os;print(os.path.dirname(pyspark.__file__))')" /opt/spark
COPY --from=jars /jars/ /opt/spark/jars/
COPY --from=sink /ballast-sink.jar /opt/spark/jars/
# the same uid as Airflow's image: driver (Airflow) and executors (here) share /var/lib/ballast
RUN useradd --uid 50000 --gid 0 --create-home ballast && mkdir -p /var/lib/ballast /tmp/spark-work \
    && chown -R 50000:0 /var/lib/ballast /tmp/spark-work
USER 50000
ENV SPARK_HOME=/opt/spark PYSPARK_PYTHON=python3 BALLAST_STATE_DIR=/var/lib/ballast SPARK_WORKER_DIR=/tmp/spark-work
