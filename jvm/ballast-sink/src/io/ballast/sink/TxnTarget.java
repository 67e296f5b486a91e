package io.ballast.sink;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

/**
 * What a task needs to write its outputs transactionally, from the write's options (the driver's
 * spark_jobs.txn_output.writer): the producer's and the marker reader's Kafka settings, the slot's
 * transactional id, the marker topic, the durable store's id, the epoch, and how long a task keeps
 * trying through broker errors and fencing (`outage.ms`).
 */
final class TxnTarget implements Serializable {
  // a task killed inside its transaction holds back read_committed readers of the partitions it
  // wrote until the slot's next producer (the epoch's replay) aborts it, or this long at most
  static final int TRANSACTION_TIMEOUT_MS = 60_000;

  final HashMap<String, String> producerConfig;
  final HashMap<String, String> consumerConfig;
  final String job, operator, store, commitsTopic;
  final long epoch, outageMs, timeoutMs;
  // a warm-up's write (`warm`): each task opens its slot's producer and keeps it, writing nothing
  final boolean warm;

  TxnTarget(Map<String, String> options) {
    job = required(options, "job");
    operator = required(options, "operator");
    store = required(options, "store");
    commitsTopic = required(options, "commits.topic");
    epoch = Long.parseLong(required(options, "epoch"));
    outageMs = Long.parseLong(options.getOrDefault("outage.ms", "300000"));
    warm = Boolean.parseBoolean(options.getOrDefault("warm", "false"));
    // what one init, flush, commit or marker read may wait for the broker
    timeoutMs = Math.max(Math.min(outageMs, 120_000), 10_000);
    Map<String, String> kafka = Producers.config(options);
    producerConfig = new HashMap<>(kafka);
    producerConfig.remove("default.api.timeout.ms"); // a consumer's setting (Spark's options share it)
    producerConfig.put("acks", "all");
    producerConfig.put("enable.idempotence", "true");
    producerConfig.put("transaction.timeout.ms", Integer.toString(TRANSACTION_TIMEOUT_MS));
    producerConfig.put("max.block.ms", Long.toString(timeoutMs));
    long request = Long.parseLong(producerConfig.getOrDefault("request.timeout.ms", "30000"));
    request = Math.min(request, timeoutMs);
    producerConfig.put("request.timeout.ms", Long.toString(request));
    producerConfig.put("delivery.timeout.ms", Long.toString(Math.max(timeoutMs, request + 1_000)));
    consumerConfig = new HashMap<>();
    for (Map.Entry<String, String> e : kafka.entrySet()) { // the connection's settings, not the producer's
      String k = e.getKey();
      if (k.equals("bootstrap.servers") || k.startsWith("security.") || k.startsWith("sasl.")
          || k.startsWith("ssl.") || k.equals("request.timeout.ms") || k.equals("default.api.timeout.ms")) {
        consumerConfig.put(k, e.getValue());
      }
    }
    consumerConfig.put("isolation.level", "read_committed");
    consumerConfig.put("enable.auto.commit", "false");
    consumerConfig.put("default.api.timeout.ms", Long.toString(timeoutMs));
    consumerConfig.put("request.timeout.ms", Long.toString(request));
  }

  /** The Kafka transactional id of worker slot `worker` (spark_jobs.txn_slots.transactional_id). */
  String transactionalId(int worker) {
    return "ballast." + job + "." + operator + ".w" + worker;
  }

  private static String required(Map<String, String> options, String name) {
    String v = options.get(name);
    if (v == null || v.isEmpty()) {
      throw new IllegalArgumentException("the Ballast transactional sink needs the `" + name + "` option");
    }
    return v;
  }
}
