package io.ballast.sink;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The executor's transactional producers, one per worker slot (transactional id), kept between
 * the slot's tasks, and its read_committed consumers for marker reads.
 *
 * A new slot's producer calls initTransactions, which fences every earlier producer of the id (a
 * zombie or speculative attempt can no longer commit) and completes or aborts its open
 * transaction; then it reads the slot's last marker. A kept producer skips both: while no other
 * producer has initialised the id, none can have committed for the slot, so the marker this JVM
 * wrote last is the slot's state; if another one has, the broker refuses this producer's next
 * transaction and the writer starts over with a new slot. Why keep them: a new slot costs the init
 * and the marker read (tens of ms), every epoch otherwise. A slot is used by one task at a time
 * (taken, then released or discarded); one unused for IDLE_MS is closed at the next take.
 */
final class Slots {
  static final long IDLE_MS = 120_000;

  /** A producer for one transactional id and the last marker this JVM knows for its slot. */
  static final class Slot {
    final List<Object> key;
    final KafkaProducer<byte[], byte[]> producer;
    Marker last;
    long lastUsed;

    Slot(List<Object> key, KafkaProducer<byte[], byte[]> producer) {
      this.key = key;
      this.producer = producer;
    }
  }

  private static final Map<List<Object>, Slot> IDLE = new HashMap<>();
  private static final Map<Map<String, String>, Deque<KafkaConsumer<byte[], byte[]>>> CONSUMERS = new HashMap<>();
  private static final ExecutorService OPENER = Executors.newCachedThreadPool(r -> {
    Thread t = new Thread(r, "ballast-txn-slot");
    t.setDaemon(true);
    return t;
  });

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(Slots::closeAll, "ballast-txn-slots"));
  }

  private Slots() {}

  /** The slot's producer, ready for a transaction, made in the background (a task starts its
   *  reads meanwhile; the writer waits for it at its first row). */
  static CompletableFuture<Slot> take(TxnTarget t, int worker) {
    return CompletableFuture.supplyAsync(() -> takeNow(t, worker), OPENER);
  }

  private static List<Object> key(TxnTarget t, int worker) {
    return List.of(t.transactionalId(worker), t.producerConfig);
  }

  static Slot takeNow(TxnTarget t, int worker) {
    List<Object> key = key(t, worker);
    synchronized (Slots.class) {
      closeIdle(key);
      Slot s = IDLE.remove(key);
      if (s != null) {
        return s;
      }
    }
    return open(t, worker, key);
  }

  /**
   * The producer's flush, bounded: a transactional producer whose broker went away while it was
   * adding a partition to its transaction never expires its batches (its sender waits for the
   * transactional request first), so KafkaProducer.flush can wait forever. Past `timeoutMs` this
   * throws TimeoutException; the caller discards the producer, whose close aborts the batches and
   * ends the flush left waiting. A flush that failed throws its ExecutionException, which the
   * writer's retry unwraps as it does the slot opener's.
   */
  static void flush(KafkaProducer<byte[], byte[]> p, long timeoutMs) throws Exception {
    try {
      CompletableFuture.runAsync(p::flush, OPENER).get(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (java.util.concurrent.TimeoutException e) {
      throw new org.apache.kafka.common.errors.TimeoutException(
          "the producer's records were not acknowledged within " + timeoutMs + " ms");
    }
  }

  /** A new producer for the slot, whatever this JVM kept (a retry's: the kept one failed). */
  static Slot fresh(TxnTarget t, int worker) {
    return open(t, worker, key(t, worker));
  }

  /** A new producer for the slot: its init fences every earlier one; then the slot's last marker. */
  static Slot open(TxnTarget t, int worker, List<Object> key) {
    Properties props = new Properties();
    props.putAll(t.producerConfig);
    props.put("transactional.id", t.transactionalId(worker));
    KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    Slot s = new Slot(key, p);
    try {
      p.initTransactions();
      TxnWriter.count("inits");
      s.last = readMarker(t, worker);
      return s;
    } catch (RuntimeException e) {
      discard(s);
      throw e;
    }
  }

  private static Marker readMarker(TxnTarget t, int worker) {
    KafkaConsumer<byte[], byte[]> c;
    synchronized (Slots.class) {
      c = CONSUMERS.computeIfAbsent(t.consumerConfig, k -> new ArrayDeque<>()).poll();
    }
    if (c == null) {
      Properties props = new Properties();
      props.putAll(t.consumerConfig);
      c = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }
    try {
      Marker m = Marker.readLast(c, t.commitsTopic, worker, t.timeoutMs);
      c.unsubscribe();
      synchronized (Slots.class) {
        CONSUMERS.computeIfAbsent(t.consumerConfig, k -> new ArrayDeque<>()).push(c);
      }
      return m;
    } catch (RuntimeException e) { // a consumer that failed a read is not trusted with the next one
      c.close(Duration.ZERO);
      throw e;
    }
  }

  /** Keeps a slot whose last transaction committed (or that began none) for the slot's next task. */
  static void release(Slot s) {
    s.lastUsed = System.currentTimeMillis();
    Slot before;
    synchronized (Slots.class) {
      before = IDLE.put(s.key, s);
    }
    if (before != null && before != s) {
      discard(before);
    }
  }

  /** Closes a slot's producer without waiting: a transaction it left open is aborted by the slot's
   *  next init (or by the broker after transaction.timeout.ms). */
  static void discard(Slot s) {
    try {
      s.producer.close(Duration.ZERO);
    } catch (RuntimeException e) {
      // a client that cannot say goodbye is gone all the same
    }
  }

  private static void closeIdle(List<Object> keep) {
    long now = System.currentTimeMillis();
    for (Iterator<Map.Entry<List<Object>, Slot>> it = IDLE.entrySet().iterator(); it.hasNext(); ) {
      Slot s = it.next().getValue();
      if (now - s.lastUsed > IDLE_MS && !s.key.equals(keep)) {
        discard(s);
        it.remove();
      }
    }
  }

  /** Closes every kept producer and consumer (the JVM's end; a test between brokers). */
  static void closeAll() {
    List<Slot> slots;
    List<KafkaConsumer<byte[], byte[]>> consumers = new ArrayList<>();
    synchronized (Slots.class) {
      slots = new ArrayList<>(IDLE.values());
      IDLE.clear();
      CONSUMERS.values().forEach(consumers::addAll);
      CONSUMERS.clear();
    }
    slots.forEach(Slots::discard);
    for (KafkaConsumer<byte[], byte[]> c : consumers) {
      try {
        c.close(Duration.ZERO);
      } catch (RuntimeException e) {
        // see discard
      }
    }
  }
}
