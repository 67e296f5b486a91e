"""After a test run: does anything it started still run? (`make test` runs this after pytest.)

Every process the run starts inherits `BALLAST_RUN_TAG` from it: services, Spark JVMs and Python
workers, job drivers, Airflow and its children. Once pytest has exited, a process still carrying
the run's tag is a leak (a fixture that stopped a parent but not its tree, as Airflow's scheduler
workers re-parented to init once showed). This lists each with its command line, kills it (by
pid) so it costs the machine nothing, and exits 1 so the run fails and the leak gets fixed.

`python scripts/leftovers.py --tag <tag> [--grace 30]`
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.stack_procs import tagged  # noqa: E402

RUN_TAG_VAR = "BALLAST_RUN_TAG"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def check(tag: str, grace_s: float) -> list[tuple[int, str]]:
    """The processes still under `tag` after `grace_s` (time for stopped processes to finish
    exiting), each SIGKILLed once listed."""
    deadline = time.monotonic() + grace_s
    while tagged(tag, RUN_TAG_VAR) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [(pid, _cmdline(pid)) for pid in tagged(tag, RUN_TAG_VAR)]
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", required=True, help=f"the run's {RUN_TAG_VAR} value")
    ap.add_argument("--grace", type=float, default=30.0, help="seconds to let stopping processes exit")
    args = ap.parse_args(argv)
    left = check(args.tag, args.grace)
    if not left:
        print(f"leftovers: nothing the test run started still runs ({RUN_TAG_VAR}={args.tag})")
        return 0
    print(f"leftovers: {len(left)} process(es) the test run started still ran after it ended; killed them. "
          "A fixture stopped a parent but not its whole tree: stop its process group, or stop it through "
          "scripts/stack_procs.stop, which ends the tree:")
    for pid, cmd in left:
        print(f"  pid {pid}: {cmd[:300]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
