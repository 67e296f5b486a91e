"""`python -m spark_jobs.relocate --checkpoint-dir D --to URI [--from URI]`: move a job's state on purpose.

Why a command and not a flag edit: the checkpoint records where its state lives
(spark_jobs.binding), so a start with another `--state-uri` is refused — a typo must not throw the
state away. Moving the state is this command, with the job stopped:

1. marks the move in the checkpoint (`ballast/relocate.json`; a start is refused while it exists);
2. copies every file of the store to the new location (atomic writes), skipping files already
   there byte for byte — so re-running after an interruption finishes the job;
3. checks the copy: the source did not change meanwhile (a running job would change it), every
   file is byte-identical at the destination, and the copy opens as the same store;
4. re-binds the checkpoint to the new location and removes the mark.

The old copy is left where it was (delete it when the job runs well on the new one); a start that
still names it is refused, since the checkpoint now names the new location.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs

from ballast.errors import BallastError
from spark_jobs import faults
from spark_jobs.binding import BINDING, RELOCATION, same_location
from spark_jobs.durable import DurableState
from spark_jobs.storage import Location


class RelocateError(BallastError, RuntimeError):
    """The relocation cannot start or cannot be checked; nothing of the job's state was lost."""


def files(loc: Location) -> list[str]:
    """Every file under `loc`, as paths relative to it (sorted; temporaries of a write left out)."""
    sel = pafs.FileSelector(loc.path, allow_not_found=True, recursive=True)
    base = loc.path.rstrip("/") + "/"
    return sorted(i.path[len(base):] for i in loc.fs.get_file_info(sel)
                  if i.type == pafs.FileType.File and ".tmp-" not in i.base_name)


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def relocate(checkpoint_dir: str, to: str, source: str | None = None) -> dict[str, Any]:
    """Move the state of the job at `checkpoint_dir` to `to`; returns what was done."""
    ballast = Location.of(checkpoint_dir) / "ballast"
    binding = (ballast / BINDING).read_json()
    if binding is None:
        raise RelocateError(f"checkpoint {checkpoint_dir} records no state location (no ballast/{BINDING}): start "
                            "the job once with its current --state-uri (that binds it), stop it, then relocate")
    marker = ballast / RELOCATION
    pending = marker.read_json()
    bound = str(binding["state_uri"])
    if pending is not None and not same_location(pending["to"], to):
        raise RelocateError(f"an unfinished relocation of this job's state to {pending['to']} is under way, this "
                            f"run asks for {to}: finish that one first (re-run with --to {pending['to']})")
    if source is not None and not same_location(source, bound):
        raise RelocateError(f"checkpoint {checkpoint_dir} keeps its state at {bound}, not at {source}: "
                            f"run with --from {bound} (or without --from)")
    if same_location(to, bound):
        return {"from": bound, "to": bound, "copied": 0, "skipped": 0, "note": "the state already lives there"}
    src, dst = Location.of(bound), Location.of(to)
    a, b = src.path.rstrip("/") + "/", dst.path.rstrip("/") + "/"
    if src.fs.type_name == dst.fs.type_name and (a.startswith(b) or b.startswith(a)):
        raise RelocateError(f"{dst.uri} and {src.uri} lie one inside the other: relocate to a location outside "
                            "the current one")
    store = (src / "store.json").read_json()
    if store is None or store.get("store_id") != binding["store_id"]:
        raise RelocateError(f"the checkpoint's store {binding['store_id']} is not at {src.uri} (found "
                            f"{(store or {}).get('store_id')}): restore it there before relocating")
    theirs = (dst / "store.json").read_json()
    if theirs is not None and theirs.get("store_id") != binding["store_id"]:
        raise RelocateError(f"{dst.uri} already holds store {theirs.get('store_id')} of job {theirs.get('job')!r}, "
                            f"not this job's {binding['store_id']}: choose an empty location")
    if pending is None:
        if files(dst):
            raise RelocateError(f"{dst.uri} is not empty: relocate to a new, empty location")
        marker.write_json({"from": src.uri, "to": dst.uri, "store_id": binding["store_id"],
                           "started_at": datetime.now(UTC).isoformat()})
    names = sorted(files(src), key=lambda n: (n == "store.json", n))  # the store's own file last
    copied = skipped = 0
    for rel in names:
        data = (src / rel).read_bytes()
        target = dst / rel
        if target.read_bytes() == data:
            skipped += 1  # copied by an interrupted run
            continue
        target.write_bytes(data or b"")
        copied += 1
        faults.hit("relocate_copied")
    _check_copy(src, dst, names, binding)
    (ballast / BINDING).write_json({**binding, "state_uri": dst.uri})
    marker.delete()
    return {"from": src.uri, "to": dst.uri, "store_id": binding["store_id"], "files": len(names), "copied": copied,
            "skipped": skipped}


def _check_copy(src: Location, dst: Location, names: list[str], binding: dict[str, Any]) -> None:
    """The copy is the store: same files, same bytes, same epochs; the source did not move meanwhile."""
    if files(src) != names:
        raise RelocateError(f"the state at {src.uri} changed during the copy: is the job still running? Stop it "
                            "(python -m spark_jobs.cli stop --checkpoint-dir ...) and re-run this command")
    extra = sorted(set(files(dst)) - set(names))
    if extra:
        raise RelocateError(f"{dst.uri} holds files the source does not ({extra[:5]}): they are not this store's; "
                            "remove them (or relocate to a new, empty location) and re-run")
    bad = [n for n in names if _digest((src / n).read_bytes()) != _digest((dst / n).read_bytes())]
    if bad:
        raise RelocateError(f"{len(bad)} file(s) differ after the copy to {dst.uri} ({bad[:5]}): re-run this "
                            "command to copy them again")
    a = DurableState(src.uri, str(binding["job"]), int(binding["bins"]))
    b = DurableState(dst.uri, str(binding["job"]), int(binding["bins"]))
    if (a.store_id, a.last_epoch) != (b.store_id, b.last_epoch):
        raise RelocateError(f"the copy at {dst.uri} reads as store {b.store_id} up to epoch {b.last_epoch}, the "
                            f"source as {a.store_id} up to {a.last_epoch}: re-run this command")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_jobs.relocate",
                                 description="move a stopped job's state to a new location, checked and resumable")
    ap.add_argument("--checkpoint-dir", required=True, help="the job's checkpoint dir (it records the state location)")
    ap.add_argument("--to", required=True, help="the new state location (empty, or a relocation's unfinished copy)")
    ap.add_argument("--from", dest="source", default=None,
                    help="the current location (optional: checked against the checkpoint's record)")
    a = ap.parse_args(argv)
    try:
        done = relocate(a.checkpoint_dir, a.to, a.source)
    except BallastError as exc:
        print(f"relocate: refused: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(done, sort_keys=True))
    print(f"relocated; start the job with --state-uri {done['to']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
