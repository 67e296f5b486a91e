package io.ballast.sink;

import java.util.Map;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.types.StructType;

/**
 * Ballast's Kafka writer for a stateless query's epoch (spark_jobs/id_sink.py): the records Spark's
 * own Kafka sink would write, with their headers made here from the row's id columns instead of
 * an array of header structs the query projects per row. Why: Spark's sink with one header per
 * record cost 1.57-1.82x its write without one (the header array's projection, its strings, Scala
 * collections per row); made here from the id's numbers, 1.23-1.27x (bench/sink_headers.py).
 *
 * Rows: value (binary), __p (int), __o (bigint), optional topic (string; else the `topic` option,
 * or `dead-letter-topic` for a row with a __reason), key (binary), __reason / __detail / __source
 * (string: a dead letter's). Options: `epoch`, `topic`, `dead-letter-topic`, and Kafka's producer
 * settings as `kafka.*`, as Spark's sink takes them. A data-plane epoch's rows have no topic column:
 * a per-row topic cost ~10 % of the write (bench/sink_headers.py, variant ballast_topic).
 */
public final class IdKafkaSink extends KafkaSinkProvider {

  @Override
  protected String name() {
    return "ballast-id-kafka";
  }

  @Override
  protected DataWriterFactory factory(Map<String, String> options, StructType schema) {
    return new RecordWriter.Factory(options, Columns.of(schema, options.containsKey("topic"),
        options.containsKey(RecordWriter.DEAD_LETTER_TOPIC)));
  }
}
