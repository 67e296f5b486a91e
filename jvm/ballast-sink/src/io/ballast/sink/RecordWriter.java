package io.ballast.sink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's writer: a record per row, sent on the executor's shared producer for the options;
 * `commit` flushes and fails the task if any send failed (Spark then retries it or fails the epoch,
 * whose replay re-sends the same ids: at least once, exactly once for a consumer that drops
 * repeated ids, as with Spark's own sink).
 */
final class RecordWriter implements DataWriter<InternalRow> {
  static final String ID = "ballast-id";
  /** the option naming the dead letters' topic, for rows without a topic column */
  static final String DEAD_LETTER_TOPIC = "dead-letter-topic";
  // a dead letter's headers after the id, as spark_jobs.records names them
  static final String REASON = "ballast-reason", ERROR = "ballast-error", EPOCH = "ballast-epoch",
      SOURCE = "ballast-source";

  private final Map<String, String> producerConfig;
  private final KafkaProducer<byte[], byte[]> producer;
  private final Columns c;
  private final String topic;
  private final String deadLetterTopic; // where a dead letter goes when the rows carry no topic
  private final byte[] epochPrefix; // "<epoch>:"
  private final byte[] epochText;
  private volatile Exception failed;
  private final Callback callback = (metadata, e) -> {
    if (e != null && failed == null) {
      failed = e;
    }
  };

  static final class Factory implements DataWriterFactory {
    private final HashMap<String, String> options;
    private final Columns columns;

    Factory(Map<String, String> options, Columns columns) {
      this.options = new HashMap<>(options);
      this.columns = columns;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new RecordWriter(options, columns);
    }
  }

  RecordWriter(Map<String, String> options, Columns columns) {
    String epoch = options.get("epoch");
    if (epoch == null) {
      throw new IllegalArgumentException("the Ballast id sink needs the `epoch` option (the ids' first part)");
    }
    this.c = columns;
    this.topic = options.get("topic");
    this.deadLetterTopic = options.get(DEAD_LETTER_TOPIC);
    String e = Long.toString(Long.parseLong(epoch));
    this.epochText = e.getBytes(StandardCharsets.US_ASCII);
    this.epochPrefix = (e + ":").getBytes(StandardCharsets.US_ASCII);
    this.producerConfig = Producers.config(options);
    this.producer = Producers.acquire(producerConfig);
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (failed != null) {
      throw new IOException("a send of this task failed", failed);
    }
    boolean dead = c.reason >= 0 && !row.isNullAt(c.reason);
    String t = c.topic >= 0 && !row.isNullAt(c.topic) ? row.getUTF8String(c.topic).toString()
        : dead ? deadLetterTopic : topic;
    if (t == null) {
      throw new IOException(dead ? "a dead letter has no topic and the write no `" + DEAD_LETTER_TOPIC + "` option"
          : "a row has no topic and the write no `topic` option");
    }
    byte[] key = c.key >= 0 ? row.getBinary(c.key) : null;
    List<Header> headers = new ArrayList<>(1);
    headers.add(new RecordHeader(ID, id(row.getInt(c.partition), row.getLong(c.offset))));
    if (dead) { // a dead letter: why, and where it came from
      headers.add(new RecordHeader(REASON, text(row, c.reason)));
      headers.add(new RecordHeader(ERROR, text(row, c.detail)));
      headers.add(new RecordHeader(EPOCH, epochText));
      headers.add(new RecordHeader(SOURCE, text(row, c.source)));
    }
    producer.send(new ProducerRecord<>(t, null, null, key, row.getBinary(c.value), headers), callback);
  }

  /** `<epoch>:<p>:<o>` as ASCII, what spark_jobs.stateless.record_id_sql made in SQL. */
  private byte[] id(int partition, long offset) {
    byte[] p = Integer.toString(partition).getBytes(StandardCharsets.US_ASCII);
    byte[] o = Long.toString(offset).getBytes(StandardCharsets.US_ASCII);
    byte[] id = new byte[epochPrefix.length + p.length + 1 + o.length];
    System.arraycopy(epochPrefix, 0, id, 0, epochPrefix.length);
    System.arraycopy(p, 0, id, epochPrefix.length, p.length);
    id[epochPrefix.length + p.length] = ':';
    System.arraycopy(o, 0, id, epochPrefix.length + p.length + 1, o.length);
    return id;
  }

  private static byte[] text(InternalRow row, int i) {
    if (i < 0 || row.isNullAt(i)) {
      return null;
    }
    UTF8String s = row.getUTF8String(i);
    return s.getBytes();
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    producer.flush();
    if (failed != null) {
      throw new IOException("a send of this task failed", failed);
    }
    return null;
  }

  @Override
  public void abort() {}

  @Override
  public void close() {
    Producers.release(producerConfig);
  }
}
