"""What one worker does in one epoch: the function `mapInArrow` runs for each routed partition.

Partition p *is* worker p (`repartitionById(W, worker)`), so the task opens store p, checks every
row was routed to it, and then either
* applies the epoch: groups rows by key (sorted by hash, key, Kafka partition, offset, so the fold
  sees records in a deterministic order), folds each key, and commits — in ONE LMDB transaction —
  the state updates, the per-bin counters, the outbox of this epoch's outputs, the worker's
  metrics and `last_applied = epoch`; or
* if the store already applied this epoch (a replay after a crash), re-emits the outbox instead.
Outputs are yielded only after the commit, with the id `epoch:worker:seq` in a header, so the
output topic may hold duplicates of a replayed epoch but never a different value under one id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

OUTPUT_SCHEMA = "key binary, value binary, headers array<struct<key:string,value:binary>>"
ID_HEADER = "ballast-id"


@dataclass(frozen=True)
class ApplyConfig:
    epoch: int
    state_dir: str
    operator: str
    bins_bits: int
    workers: int
    keep_outbox: int = 2


def output_id(epoch: int, worker: int, seq: int) -> bytes:
    return b"%d:%d:%d" % (epoch, worker, seq)


def _to_arrow(epoch: int, worker: int, outputs: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    """Outputs as Kafka-writer rows; the header column is built columnar (no per-row dicts)."""
    import pyarrow as pa

    import numpy as np
    import pyarrow.compute as pc

    n = len(outputs)
    seq = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    ids = pc.binary_join_element_wise(f"{epoch}:{worker}:", seq, "").cast(pa.binary())
    names = pa.repeat(ID_HEADER, n).cast(pa.string())
    hdr = pa.StructArray.from_arrays([names, ids], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), hdr)
    keys, vals = zip(*outputs) if n else ((), ())
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(vals, pa.binary()), headers], names=["key", "value", "headers"])


def make_apply_fn(cfg: ApplyConfig) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def apply_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from spark_jobs import faults
        from spark_jobs.operators import get_operator
        from spark_jobs.state import WorkerStore

        t_task = time.perf_counter()
        worker = TaskContext.get().partitionId()  # type: ignore[union-attr]
        rbs = list(batches)  # waiting on the shuffle: not useful time
        table = pa.Table.from_batches(rbs) if rbs else None
        t_useful = time.perf_counter()
        n = table.num_rows if table is not None else 0
        if n and not pc.all(pc.equal(table.column("worker"), worker)).as_py():
            raise RuntimeError(f"routing bug: a row for another worker reached worker {worker} at epoch {cfg.epoch}")
        store = WorkerStore(cfg.state_dir, worker)
        try:
            with store.env.begin() as rtxn:
                replay = store.last_applied(rtxn) >= cfg.epoch
                outputs = store.read_outbox(rtxn, cfg.epoch) if replay else []
            if not replay:
                # one writer per worker store (one task per partition), so the check above holds
                with store.env.begin(write=True) as txn:
                    outputs = _apply(cfg, store, txn, worker, table, n, t_task, t_useful, get_operator)
                    faults.hit("worker_before_commit")
        finally:
            store.close()
        if outputs:
            yield _to_arrow(cfg.epoch, worker, outputs)

    return apply_partition


def _apply(cfg, store, txn, worker, table, n, t_task, t_useful, get_operator):  # type: ignore[no-untyped-def]
    import pyarrow.compute as pc

    op = get_operator(cfg.operator)
    outputs: list[tuple[bytes, bytes]] = []
    bin_records: dict[int, int] = {}
    bin_delta: dict[int, list[int]] = {}
    if n:
        import numpy as np
        import pyarrow as pa

        table = table.sort_by([("h", "ascending"), ("key", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        counts = pc.value_counts(table.column("bin")).to_pylist()
        bin_records = {int(c["values"]): int(c["counts"]) for c in counts}
        h_np = table.column("h").to_numpy()
        key_col = table.column("key").combine_chunks()
        # group starts: (hash, key) differs from the previous row (vectorised)
        new_group = np.ones(n, dtype=bool)
        if n > 1:
            same_h = h_np[1:] == h_np[:-1]
            same_k = pc.equal(key_col.slice(1), key_col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
            new_group[1:] = ~(same_h & same_k)
        starts = np.flatnonzero(new_group).tolist() + [n]
        # store keys = 8-byte big-endian unsigned hash + key, built columnar
        hb = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(8), n, [None, pa.py_buffer(h_np.astype(">u8").tobytes())]).cast(pa.binary())
        sks = pc.binary_join_element_wise(hb, key_col, b"").to_pylist()
        bs = table.column("bin").to_pylist()
        keys = key_col.to_pylist()
        vals = table.column("value").to_pylist()
        data = store.data
        get, put, delete = txn.get, txn.put, txn.delete
        fold = op.fold
        for gi in range(len(starts) - 1):
            i, j = starts[gi], starts[gi + 1]
            sk = sks[i]
            old = get(sk, db=data)
            new, outs = fold(keys[i], old, vals[i:j])
            b = bs[i]
            d = bin_delta.get(b)
            if d is None:
                d = bin_delta[b] = [0, 0]
            if new is None:
                if old is not None:
                    delete(sk, db=data)
                    d[0] -= 1
                    d[1] -= len(sk) + len(old)
            else:
                put(sk, new, db=data)
                if old is None:
                    d[0] += 1
                    d[1] += len(sk) + len(new)
                else:
                    d[1] += len(new) - len(old)
            outputs.extend(outs)
    bins: dict[str, list[int]] = {}
    for b, rec in bin_records.items():
        dk, db = bin_delta.get(b, (0, 0))
        keys_b, bytes_b = store.add_bin_counter(txn, b, dk, db) if (dk or db) else store.bin_counter(txn, b)
        bins[str(b)] = [rec, keys_b, bytes_b]
    store.put_outbox(txn, cfg.epoch, outputs)
    store.gc(txn, cfg.epoch, keep_outbox=cfg.keep_outbox)
    store.set_last_applied(txn, cfg.epoch)
    tot_keys, tot_bytes = store.totals(txn)
    now = time.perf_counter()
    store.put_metrics(txn, cfg.epoch, {
        "worker": worker, "records_in": n, "records_out": len(outputs),
        "useful_ms": (now - t_useful) * 1000, "wall_ms": (now - t_task) * 1000,
        "state_keys": tot_keys, "state_bytes": tot_bytes, "bins": bins,
    })
    return outputs
