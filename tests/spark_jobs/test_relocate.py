"""spark_jobs.relocate without Spark: a store bound by the start-up path, moved and checked, and
every refusal (the end-to-end run on a real job, interrupted by a real kill, is in
tests/system/test_state_binding.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.binding import BINDING, RELOCATION, BindingMismatch, bind_state
from spark_jobs.durable import StateGap, read_state
from spark_jobs.journal import Journal
from spark_jobs.objects import ObjectWriter, epoch_name, object_name
from spark_jobs.operators import KeyCount
from spark_jobs.relocate import RelocateError, files, relocate
from spark_jobs.run_config import RunConfig
from spark_jobs.storage import Location
from tests.helpers.kill_runs import cli_env

pytestmark = pytest.mark.dataplane
REPO = Path(__file__).resolve().parents[2]


def bound_store(root: Path, epochs: int = 3) -> RunConfig:
    """A job's checkpoint bound to a store with `epochs` committed epochs of one worker."""
    cfg = RunConfig(job="j", input_topic="t", checkpoint_dir=str(root / "ckpt"), bootstrap="-", db_url="-", bins=8,
                    workers=1, state_uri=str(root / "old"))
    ds = bind_state(cfg, KeyCount(), Journal(cfg.checkpoint_dir))
    ds.record_map(0, [0] * 8)
    for e in range(epochs):
        w = ObjectWriter({"worker": 0, "epoch": e, "metrics": {}})
        w.add_bin(e % 8, [b"key-%d" % e], [b"v%d" % e])
        (Location.of(ds.uri) / "changelog" / epoch_name(e) / object_name(0, f"a{e}")).write_bytes(w.to_bytes())
        ds.commit_epoch(e, 0, 1, snapshot=False)
    return cfg


def binding(cfg: RunConfig) -> dict[str, str]:
    return json.loads((Path(cfg.checkpoint_dir) / "ballast" / BINDING).read_text())  # type: ignore[no-any-return]


def test_relocate_copies_checks_and_rebinds(tmp_path: Path) -> None:
    cfg = bound_store(tmp_path)
    new = tmp_path / "new"
    done = relocate(cfg.checkpoint_dir, str(new))
    assert done["copied"] == done["files"] == len(files(Location.of(str(tmp_path / "old")))) and done["skipped"] == 0
    assert read_state(str(new)) == read_state(str(tmp_path / "old")) != {}
    assert binding(cfg)["state_uri"] == str(new)
    assert not (Path(cfg.checkpoint_dir) / "ballast" / RELOCATION).exists()
    with pytest.raises(BindingMismatch, match="--state-uri " + str(new)):
        bind_state(cfg, KeyCount(), Journal(cfg.checkpoint_dir))  # the old location is no longer the job's
    cfg.state_uri = str(new)
    # the new location is accepted; the next check compares the store with Spark's checkpoint, which
    # this Spark-less test does not have (so the store's epochs are "ahead")
    with pytest.raises(StateGap, match="epochs \\[1, 2\\] beyond"):
        bind_state(cfg, KeyCount(), Journal(cfg.checkpoint_dir))
    assert relocate(cfg.checkpoint_dir, str(new))["copied"] == 0, "relocating to where it is: nothing to do"


def test_a_killed_relocation_is_finished_by_running_it_again(tmp_path: Path) -> None:
    cfg = bound_store(tmp_path, epochs=6)
    new, faults = tmp_path / "new", tmp_path / "faults"
    faults.write_text("relocate_copied 4\n")
    cmd = [sys.executable, "-m", "spark_jobs.relocate", "--checkpoint-dir", cfg.checkpoint_dir, "--to", str(new)]
    first = subprocess.run(cmd, cwd=REPO, env=cli_env(faults), capture_output=True, text=True, timeout=120,
                           start_new_session=True)
    assert first.returncode == -9 and len(files(Location.of(str(new)))) == 4, first.stderr
    with pytest.raises(BindingMismatch, match="unfinished"):
        bind_state(cfg, KeyCount(), Journal(cfg.checkpoint_dir))
    second = subprocess.run(cmd, cwd=REPO, env=cli_env(faults), capture_output=True, text=True, timeout=120,
                            start_new_session=True)
    assert second.returncode == 0, second.stderr
    done = json.loads(second.stdout)
    assert done["skipped"] == 4 and done["copied"] == done["files"] - 4
    assert read_state(str(new)) == read_state(str(tmp_path / "old"))


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(RelocateError, match="start the job once"):
        relocate(str(tmp_path / "nothing"), str(tmp_path / "x"))
    cfg = bound_store(tmp_path)
    with pytest.raises(RelocateError, match=f"run with --from {tmp_path / 'old'}"):
        relocate(cfg.checkpoint_dir, str(tmp_path / "new"), source=str(tmp_path / "elsewhere"))
    with pytest.raises(RelocateError, match="one inside the other"):
        relocate(cfg.checkpoint_dir, str(tmp_path / "old" / "sub"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "someone-else.txt").write_text("x")
    with pytest.raises(RelocateError, match="not empty"):
        relocate(cfg.checkpoint_dir, str(tmp_path / "full"))
    other = bound_store(tmp_path / "other")
    with pytest.raises(RelocateError, match="already holds store"):
        relocate(cfg.checkpoint_dir, str(tmp_path / "other" / "old"))
    assert binding(other)["state_uri"] == str(tmp_path / "other" / "old")
    (Path(cfg.checkpoint_dir) / "ballast" / RELOCATION).write_text(json.dumps({"from": "a", "to": "/b"}))
    with pytest.raises(RelocateError, match="re-run with --to /b"):
        relocate(cfg.checkpoint_dir, str(tmp_path / "new"))
    assert binding(cfg)["state_uri"] == str(tmp_path / "old"), "a refused relocation changes nothing"
