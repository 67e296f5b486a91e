package io.ballast.sink;

import java.util.Map;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.types.StructType;

/**
 * Ballast's transactional Kafka writer for a keyed epoch (spark_jobs/txn_output.py, TxnWriter):
 * each task writes its worker slot's outputs and dead letters with the slot's commit marker in
 * one Kafka transaction. Why in the JVM: from the Python worker every record was a kafka-python
 * send (~17 µs, thousands per task in a saturated epoch), and the task's commit waited for them;
 * here the Java client batches them as Spark's own sink does.
 *
 * Rows: topic (string), key (binary), value (binary), headers (array of key string, value
 * binary), as spark_jobs.output.kafka_rows makes them. Options: `job`, `operator`, `store`,
 * `epoch`, `commits.topic`, `outage.ms`, and Kafka's settings as `kafka.*`.
 */
public final class TxnKafkaSink extends KafkaSinkProvider {

  @Override
  protected String name() {
    return "ballast-txn-kafka";
  }

  @Override
  protected DataWriterFactory factory(Map<String, String> options, StructType schema) {
    return new TxnWriter.Factory(new TxnTarget(options), new TxnWriter.Cols(schema));
  }

  /** Closes the producers and marker readers this JVM keeps for idle slots (a job's stop: in local
   *  mode the JVM outlives the job, and a kept client retries a broker that went away for good). */
  public static void closeClients() {
    Slots.closeAll();
  }

  /** What this JVM's writers did, counted since it started: `inits` (new slot producers), `commits`,
   *  `skips` (an attempt found its epoch committed), `retries`, `fenced` (an attempt fenced). */
  public static java.util.Map<String, Long> stats() {
    return TxnWriter.stats();
  }
}
