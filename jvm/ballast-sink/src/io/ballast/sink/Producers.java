package io.ballast.sink;

import java.time.Duration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The executor's producers, one per producer configuration, shared by its tasks (a producer's
 * start costs a metadata round trip and threads, too much per task and epoch). A producer no task
 * has used for IDLE_MS is closed when the next one is acquired, so a job that went on to another
 * broker leaves no client retrying a gone one for the JVM's life (Spark's own pool does the same).
 */
final class Producers {
  static final long IDLE_MS = 60_000;

  private static final class Entry {
    final KafkaProducer<byte[], byte[]> producer;
    int users;
    long lastUsed;

    Entry(KafkaProducer<byte[], byte[]> producer) {
      this.producer = producer;
    }
  }

  private static final Map<Map<String, String>, Entry> ENTRIES = new HashMap<>();

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      synchronized (Producers.class) {
        for (Entry e : ENTRIES.values()) {
          e.producer.close(Duration.ofSeconds(1));
        }
        ENTRIES.clear();
      }
    }, "ballast-id-sink-producers"));
  }

  private Producers() {}

  /**
   * Ballast's writers batch more than Kafka's defaults (16 KiB, no wait): a partition's batch takes up
   * to 512 KiB and waits up to 5 ms to fill. An epoch's task sends thousands of small records in a
   * burst, and each request costs the producer's sender and the broker per batch, not per byte:
   * with these, a write of 400 000 Q1-sized records took 0.71-0.74 of the wall time and 0.79-0.85 of
   * the CPU it took with the defaults, through this writer or Spark's sink (bench/sink_headers.py,
   * variants ballast against ballast_unbatched, value_batched against value). A task's commit
   * flushes, so the wait never holds an epoch. A write's own `kafka.batch.size` / `kafka.linger.ms` win.
   */
  static final Map<String, String> BATCHING = Map.of("batch.size", Integer.toString(512 * 1024), "linger.ms", "5");

  /** Kafka's producer settings among the write's options (`kafka.` removed), bytes in and out, over BATCHING. */
  static Map<String, String> config(Map<String, String> options) {
    Map<String, String> conf = new HashMap<>();
    for (Map.Entry<String, String> o : options.entrySet()) {
      if (o.getKey().startsWith("kafka.")) {
        conf.put(o.getKey().substring("kafka.".length()), o.getValue());
      }
    }
    for (Map.Entry<String, String> b : BATCHING.entrySet()) {
      conf.putIfAbsent(b.getKey(), b.getValue());
    }
    if (!conf.containsKey("bootstrap.servers")) {
      throw new IllegalArgumentException("the Ballast id sink needs the `kafka.bootstrap.servers` option");
    }
    return conf;
  }

  static synchronized KafkaProducer<byte[], byte[]> acquire(Map<String, String> conf) {
    long now = System.currentTimeMillis();
    for (Iterator<Map.Entry<Map<String, String>, Entry>> it = ENTRIES.entrySet().iterator(); it.hasNext(); ) {
      Map.Entry<Map<String, String>, Entry> e = it.next();
      Entry v = e.getValue();
      if (v.users == 0 && now - v.lastUsed > IDLE_MS && !e.getKey().equals(conf)) {
        v.producer.close(Duration.ZERO); // flushed by its last task's commit: nothing is pending
        it.remove();
      }
    }
    Entry e = ENTRIES.get(conf);
    if (e == null) {
      Properties props = new Properties();
      props.putAll(conf);
      e = new Entry(new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer()));
      ENTRIES.put(conf, e);
    }
    e.users++;
    e.lastUsed = now;
    return e.producer;
  }

  static synchronized void release(Map<String, String> conf) {
    Entry e = ENTRIES.get(conf);
    if (e != null) {
      e.users = Math.max(0, e.users - 1);
      e.lastUsed = System.currentTimeMillis();
    }
  }
}
