package io.ballast.sink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * A committed (epoch, worker) of one durable store: its outputs are visible to read_committed. The
 * same bytes as spark_jobs.txn_slots.Marker (JSON with sorted keys, key `w<worker>`), which the
 * driver and the tests read.
 */
final class Marker {
  private static final ObjectMapper JSON = new ObjectMapper();

  final String store;
  final long epoch;
  final int worker;

  Marker(String store, long epoch, int worker) {
    this.store = store;
    this.epoch = epoch;
    this.worker = worker;
  }

  byte[] key() {
    return ("w" + worker).getBytes(StandardCharsets.US_ASCII);
  }

  byte[] value() {
    return ("{\"epoch\":" + epoch + ",\"store\":" + quote(store) + ",\"worker\":" + worker + "}")
        .getBytes(StandardCharsets.UTF_8);
  }

  /** Whether this being the slot's last marker means (epoch, this worker) of `store` is committed. */
  boolean covers(String store, long epoch) {
    return this.store.equals(store) && this.epoch >= epoch;
  }

  /** A marker from its value; null for anything else (a tombstone, another format). */
  static Marker decode(byte[] raw) {
    if (raw == null || raw.length == 0) {
      return null;
    }
    try {
      JsonNode d = JSON.readTree(raw);
      if (!d.hasNonNull("store") || !d.hasNonNull("epoch") || !d.hasNonNull("worker")) {
        return null;
      }
      return new Marker(d.get("store").asText(), d.get("epoch").asLong(), d.get("worker").asInt());
    } catch (java.io.IOException | RuntimeException e) {
      return null;
    }
  }

  /**
   * The last committed marker on partition `worker` of the marker topic (the consumer reads
   * read_committed), null if there is none. Reads a window before the end, widened while it holds
   * no committed marker (aborted attempts leave records only a read_uncommitted reader sees). Called
   * after the slot's initTransactions, which completes a transaction of the id that was just
   * committed: Kafka writes a commit's markers after the commit call returns, so an earlier read
   * could miss a marker of a moment ago.
   */
  static Marker readLast(KafkaConsumer<byte[], byte[]> c, String topic, int worker, long timeoutMs) {
    TopicPartition tp = new TopicPartition(topic, worker);
    List<TopicPartition> tps = List.of(tp);
    c.assign(tps);
    long end = c.endOffsets(tps).get(tp);
    long begin = c.beginningOffsets(tps).get(tp);
    long window = 16;
    long deadline = System.currentTimeMillis() + timeoutMs;
    while (true) {
      long lo = Math.max(begin, end - window);
      c.seek(tp, lo);
      Marker last = null;
      while (c.position(tp) < end) {
        if (System.currentTimeMillis() > deadline) {
          throw new org.apache.kafka.common.errors.TimeoutException(
              "reading " + topic + "[" + worker + "] did not reach offset " + end);
        }
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
          if (r.offset() < end) {
            Marker m = decode(r.value());
            last = m != null ? m : last;
          }
        }
      }
      if (last != null || lo <= begin) {
        return last;
      }
      window *= 8;
    }
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      if (ch == '"' || ch == '\\') {
        b.append('\\').append(ch);
      } else if (ch < 0x20 || ch > 0x7e) {
        b.append(String.format("\\u%04x", (int) ch)); // as Python's json.dumps (ensure_ascii)
      } else {
        b.append(ch);
      }
    }
    return b.append('"').toString();
  }

}
