"""The local stack's S3-compatible server, for job state on an object store (`--state-uri s3://...`).

s3s-fs (crates.io, Apache-2.0; built into `.cache/s3s-fs` by `make setup`) serves buckets as
directories of `<state>/s3/data`, on 127.0.0.1, with a key pair made at its first start and kept
0600 under `<state>/secrets/s3.json`. Jobs and tools reach it through the AWS SDK's standard
variables (`env()`: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), which
pyarrow's S3 filesystem reads, so the same URIs work against a public cloud's S3.

With `log_requests`, the server logs every request it routes (`resolved route, op: PutObject`):
`request_counts` reads them back, how tests and benchmarks count the requests a job makes.
"""

from __future__ import annotations

import collections
import json
import os
import re
import secrets
import shutil
import signal
from pathlib import Path

from stack_procs import (
    CACHE,
    HOST,
    STATE,
    StackError,
    log,
    pid_alive,
    port_open,
    require_free_port,
    spawn,
    stop,
    wait_healthy,
)
from stack_secrets import write_private_once

from ballast.options import settings

BINARY = CACHE / "s3s-fs" / "bin" / "s3s-fs"
REGION = "us-east-1"
_OP = re.compile(r"resolved route, op: (\w+)")


class S3Server:
    """One s3s-fs server for the state dir `root` (data under `root/<name>/data`), on `port`."""

    def __init__(self, root: Path, port: int, name: str = "s3", log_requests: bool = False) -> None:
        self.root, self.port, self.name, self.log_requests = root, port, name, log_requests
        self.data = root / name / "data"
        self.pidfile = root / f"{name}.pid"
        self.logfile = root / "logs" / f"{name}.log"
        self.keys_file = root / "secrets" / f"{name}.json"

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def keys(self) -> dict[str, str]:
        """The server's access key pair: made once (0600), read back after."""
        write_private_once(self.keys_file, {"access_key": f"ballast-{secrets.token_hex(4)}",
                                            "secret_key": secrets.token_urlsafe(30)})
        return dict(json.loads(self.keys_file.read_text()))

    def env(self) -> dict[str, str]:
        """The AWS SDK variables a client (a job, its executors, pyarrow) needs to reach this server."""
        k = self.keys()
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": k["access_key"],
                "AWS_SECRET_ACCESS_KEY": k["secret_key"], "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}

    def alive(self) -> bool:
        return pid_alive(self.pidfile) is not None

    def up(self, buckets: tuple[str, ...] = ("ballast",)) -> None:
        """Start the server (a no-op when it runs) with `buckets` made."""
        for b in buckets:  # s3s-fs: a bucket is a top-level directory of its root
            (self.data / b).mkdir(parents=True, exist_ok=True)
        if self.alive() and port_open(self.port):
            log(f"{self.name}: already running at {self.endpoint}")
            return
        if not BINARY.exists():
            raise StackError(f"{BINARY} is missing: run `make setup` (it builds s3s-fs with cargo)")
        require_free_port(self.port, "BALLAST_S3_PORT")
        k = self.keys()
        env = {**os.environ, "RUST_LOG": "s3s::ops=debug" if self.log_requests else "info", "NO_COLOR": "1"}
        # `--opt=value`: a URL-safe secret may begin with '-', which the parser would take for an option
        spawn([str(BINARY), f"--host={HOST}", f"--port={self.port}", f"--access-key={k['access_key']}",
               f"--secret-key={k['secret_key']}", "--", str(self.data)], self.logfile, self.pidfile, env)
        wait_healthy(lambda: port_open(self.port), "the S3 server (s3s-fs)", 30, self.logfile, self.pidfile)
        log(f"{self.name}: healthy at {self.endpoint} (buckets: {', '.join(buckets)}; "
            f"credentials: `python scripts/stack.py s3-env`)")

    def down(self) -> None:
        stop(self.name, self.pidfile, timeout=10)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it (tests of an outage)."""
        stop(self.name, self.pidfile, timeout=10, sig=signal.SIGKILL)

    def clean(self) -> None:
        """After `down`: remove its objects."""
        if (self.root / self.name).exists():
            shutil.rmtree(self.root / self.name)
            log(f"{self.name}: removed {self.root / self.name}")

    def request_counts(self) -> collections.Counter[str]:
        """Requests by S3 operation (PutObject, GetObject, ListObjectsV2, ...) since the log began
        (with `log_requests`)."""
        text = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
        return collections.Counter(_OP.findall(text))


def default_s3() -> S3Server:
    return S3Server(STATE, settings().s3_port)


S3_PID = STATE / "s3.pid"


def s3_up() -> None:
    """Start the stack's S3-compatible server (bucket `ballast`)."""
    default_s3().up()


def s3_down() -> None:
    default_s3().down()


def s3_clean() -> None:
    default_s3().clean()
