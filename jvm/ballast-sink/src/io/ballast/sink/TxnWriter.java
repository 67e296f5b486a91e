package io.ballast.sink;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's transactional output (docs/dataplane.md, "Transactional output"): the epoch's
 * outputs and dead letters of worker slot w (the task's partition: the keyed stage's tasks are
 * its workers), in one Kafka transaction together with the marker (store, epoch, w) on partition
 * w of the marker topic, so a read_committed consumer sees every output exactly once.
 *
 * The slot's producer comes from Slots (made at the task's start, in the background). At the
 * first row: if the slot's last marker covers (store, epoch), the outputs are visible already (a
 * replay after a crash between the Kafka commit and the manifest) and the task writes nothing;
 * else it begins the transaction and sends each row as it comes. At the task's commit: the
 * marker, a flush, and commitTransaction only if every send was acknowledged. Any failure
 * (fenced by a newer producer of the id, broker away, a commit of unknown outcome) starts over
 * with a new producer, whose init aborts the open transaction and whose marker read says whether
 * an attempt committed meanwhile, until `outage.ms` has passed; the rows are kept for that.
 * A task with no rows writes nothing: no transaction, no marker (its replay has none either).
 */
final class TxnWriter implements DataWriter<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger("ballast.txn_output");
  private static final java.util.concurrent.ConcurrentHashMap<String, java.util.concurrent.atomic.AtomicLong> STATS =
      new java.util.concurrent.ConcurrentHashMap<>();

  static void count(String what) {
    STATS.computeIfAbsent(what, k -> new java.util.concurrent.atomic.AtomicLong()).incrementAndGet();
  }

  static java.util.Map<String, Long> stats() {
    java.util.Map<String, Long> m = new java.util.TreeMap<>();
    for (String k : List.of("inits", "commits", "skips", "retries", "fenced")) {
      java.util.concurrent.atomic.AtomicLong v = STATS.get(k);
      m.put(k, v == null ? 0L : v.get());
    }
    return m;
  }

  private final TxnTarget t;
  private final int worker;
  private final Cols c;
  private final List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
  private CompletableFuture<Slots.Slot> pending;
  private Slots.Slot slot;
  private boolean skip, open, done;
  private volatile Exception failed;
  private volatile int attempt; // a send's callback counts only for the attempt that made it
  private Callback callback = callbackOf(0);

  /** Where the rows' columns are: topic, key, value, headers (spark_jobs.output.kafka_arrow_schema). */
  static final class Cols implements java.io.Serializable {
    final int topic, key, value, headers;

    Cols(StructType s) {
      topic = Columns.required(s, "topic", DataTypes.StringType);
      key = Columns.required(s, "key", DataTypes.BinaryType);
      value = Columns.required(s, "value", DataTypes.BinaryType);
      headers = Columns.required(s, "headers", null);
      if (!(s.fields()[headers].dataType() instanceof ArrayType)) {
        throw new IllegalArgumentException("column headers must be an array of (key string, value binary)");
      }
    }
  }

  static final class Factory implements DataWriterFactory {
    private final TxnTarget target;
    private final Cols cols;

    Factory(TxnTarget target, Cols cols) {
      this.target = target;
      this.cols = cols;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new TxnWriter(target, partitionId, cols);
    }
  }

  TxnWriter(TxnTarget t, int worker, Cols c) {
    this.t = t;
    this.worker = worker;
    this.c = c;
    this.pending = Slots.take(t, worker); // a head start for the init and the marker read
  }

  /** The callback of attempt `a`'s sends: a late failure of an attempt given up (its producer
   *  closed, its batches aborted) must not fail the next one. */
  private Callback callbackOf(int a) {
    return (RecordMetadata m, Exception e) -> {
      if (e != null && a == attempt && failed == null) {
        failed = e;
      }
    };
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (t.warm) {
      return;
    }
    ProducerRecord<byte[], byte[]> r = record(row);
    records.add(r);
    if (records.size() == 1) {
      begin();
    }
    if (open && failed == null) {
      try {
        slot.producer.send(r, callback);
      } catch (KafkaException e) {
        failed = e;
      }
    }
  }

  private ProducerRecord<byte[], byte[]> record(InternalRow row) {
    List<Header> headers = new ArrayList<>(1);
    if (!row.isNullAt(c.headers)) {
      ArrayData hs = row.getArray(c.headers);
      for (int i = 0; i < hs.numElements(); i++) {
        InternalRow h = hs.getStruct(i, 2);
        headers.add(new RecordHeader(h.getUTF8String(0).toString(), h.isNullAt(1) ? null : h.getBinary(1)));
      }
    }
    return new ProducerRecord<>(row.getUTF8String(c.topic).toString(), null, null,
        row.isNullAt(c.key) ? null : row.getBinary(c.key), row.isNullAt(c.value) ? null : row.getBinary(c.value),
        headers);
  }

  /** The first row: the slot (waiting for its init and marker read), then skip or begin. */
  private void begin() {
    try {
      slot = pending.get(t.timeoutMs + 30_000, TimeUnit.MILLISECONDS);
      pending = null;
      if (slot.last != null && slot.last.covers(t.store, t.epoch)) {
        skip = true;
        count("skips");
        return;
      }
      slot.producer.beginTransaction();
      open = true;
    } catch (Exception e) {
      failed = cause(e);
    }
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    done = true;
    if (t.warm) { // the job's warm-up: the slot's producer open (and the marker read) before epoch 1
      try {
        slot = pending.get(t.timeoutMs + 30_000, TimeUnit.MILLISECONDS);
        pending = null;
        release();
      } catch (Exception e) {
        LOG.info("warming the transactional producer of worker {} failed ({}); the first epoch opens it", worker,
            cause(e).toString());
        discard();
      }
      return null;
    }
    if (records.isEmpty()) {
      release();
      return null;
    }
    if (skip) {
      LOG.info("transactional output of epoch {} worker {}: committed by an earlier attempt; {} records not sent again",
          t.epoch, worker, records.size());
      release();
      return null;
    }
    // the outage budget counts from here: an outage that made the flush wait began before it ended
    long deadline = System.currentTimeMillis() + t.outageMs;
    if (open && failed == null) {
      try {
        finish(slot.producer, deadline);
        return null;
      } catch (Exception e) {
        failed = e;
      }
    }
    retry(failed, deadline);
    return null;
  }

  /** The marker, a flush, every send acknowledged, then the commit (the fault points around it).
   *  The flush waits at most the client's blocking bound, and not past the outage budget. */
  private void finish(KafkaProducer<byte[], byte[]> p, long deadline) throws Exception {
    Marker mark = new Marker(t.store, t.epoch, worker);
    Future<RecordMetadata> last = p.send(new ProducerRecord<>(t.commitsTopic, worker, mark.key(), mark.value()), callback);
    Slots.flush(p, Math.min(t.timeoutMs, Math.max(deadline - System.currentTimeMillis(), 1_000)));
    last.get(0, TimeUnit.MILLISECONDS);
    if (failed != null) { // a commit now would show the marker without a record that failed
      throw failed;
    }
    Faults.hit(Faults.BEFORE_COMMIT); // records in the log, the transaction open
    p.commitTransaction();
    count("commits");
    slot.last = mark;
    open = false;
    release();
    Faults.hit(Faults.AFTER_COMMIT);
  }

  /** Starts over with a new producer until the outputs are committed (by this or another attempt)
   *  or the outage budget, counted from the commit's start, is spent. */
  private void retry(Exception first, long deadline) throws IOException {
    long backoff = 200;
    boolean wasFenced = false;
    Exception e = first;
    while (true) {
      e = cause(e);
      discard();
      if (e instanceof AuthorizationException || e instanceof AuthenticationException || e instanceof ConfigException) {
        throw new IOException("transactional output of epoch " + t.epoch + " worker " + worker + ": " + e, e);
      }
      boolean fenced = fenced(e);
      if (fenced) { // a zombie's late commit, a losing copy, or a slot another executor took since: say so
        LOG.warn("transactional output of epoch {} worker {}: this attempt was fenced ({}); its transaction "
            + "stays aborted, a new producer reads the slot's marker", t.epoch, worker, e.getClass().getSimpleName());
      } else {
        LOG.warn("transactional output of epoch {} worker {}: {}; retrying with a new producer", t.epoch, worker,
            e.toString());
      }
      count(fenced ? "fenced" : "retries");
      // a first fence is mostly a kept producer whose slot another executor ran since (that task is
      // done): start over at once; a fence after that is a live rival (a speculative copy), and both
      // must not keep fencing each other: a random moment
      long wait = fenced ? (wasFenced ? ThreadLocalRandom.current().nextLong(100) : 0) : backoff;
      wasFenced |= fenced;
      if (System.currentTimeMillis() + wait > deadline) {
        throw new IOException("transactional output of epoch " + t.epoch + " worker " + worker + " failed for "
            + t.outageMs / 1000 + " s (the job's Kafka outage budget): " + e, e);
      }
      sleep(wait);
      if (!fenced) {
        backoff = Math.min(backoff * 2, 5_000);
      }
      attempt++;
      callback = callbackOf(attempt);
      failed = null;
      try {
        slot = Slots.fresh(t, worker); // a new init: it fences, aborts, and the marker read says what is committed
        if (slot.last != null && slot.last.covers(t.store, t.epoch)) {
          count("skips");
          if (wasFenced) {
            LOG.warn("transactional output of epoch {} worker {}: this attempt was fenced and another attempt "
                + "committed the epoch; its {} records stay aborted", t.epoch, worker, records.size());
          }
          release();
          return;
        }
        KafkaProducer<byte[], byte[]> p = slot.producer;
        p.beginTransaction();
        open = true;
        for (ProducerRecord<byte[], byte[]> r : records) {
          p.send(r, callback);
        }
        finish(p, deadline);
        return;
      } catch (Exception next) {
        e = next;
      }
    }
  }

  /** The exception inside a future's ExecutionException (what the client or the slot's opener threw). */
  private static Exception cause(Exception e) {
    return e instanceof ExecutionException && e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
  }

  static boolean fenced(Throwable e) {
    for (Throwable x = e; x != null; x = x.getCause()) {
      if (x instanceof ProducerFencedException || x instanceof InvalidProducerEpochException) {
        return true;
      }
    }
    return false;
  }

  private static void sleep(long ms) throws IOException {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while retrying the transactional output", e);
    }
  }

  private void release() {
    if (slot != null) {
      Slots.release(slot);
      slot = null;
    }
    if (pending != null) { // no row came: keep the slot once it is ready
      pending.whenComplete((s, e) -> {
        if (s != null) {
          Slots.release(s);
        }
      });
      pending = null;
    }
  }

  private void discard() {
    if (slot != null) {
      Slots.discard(slot);
      slot = null;
    }
    if (pending != null) {
      pending.whenComplete((s, e) -> {
        if (s != null) {
          Slots.discard(s);
        }
      });
      pending = null;
    }
    open = false;
  }

  @Override
  public void abort() {
    discard(); // the slot's next init aborts a transaction left open
  }

  @Override
  public void close() {
    if (!done) {
      discard();
    }
  }
}
