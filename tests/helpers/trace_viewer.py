"""Open an exported trace (Chrome trace-event JSON) in a real trace viewer in a real browser.

The viewer is speedscope's web app (npm: speedscope, fetched into `.cache/speedscope` by `make
setup`), served with the trace from 127.0.0.1 and loaded through its `#profileURL=` parameter.
Why not Perfetto's UI or chrome://tracing: Perfetto's UI is a web page on ui.perfetto.dev that no
registry this machine reaches serves, and Chromium 156 has no chrome://tracing. speedscope reads the
same format (one profile per thread: per timeline here).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ballast.options import settings

VIEWER = settings().cache_dir / "speedscope"


def open_trace(drv: Any, trace_json: Path, job: str, timeout: float = 30.0) -> tuple[str, int]:
    """Load `trace_json` (job `job`'s export) into speedscope in `drv`; (the page's text, how many
    timelines it shows).
    Fails with what to do when the viewer is missing or the page reports an import error."""
    if not (VIEWER / "index.html").exists():
        raise AssertionError(f"{VIEWER} is missing: run `make setup` (it fetches speedscope with npm)")
    root = trace_json.parent / "viewer"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(VIEWER, root)
    shutil.copy(trace_json, root / "trace.json")
    handler = functools.partial(_Quiet, directory=str(root))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        drv.get(f"http://127.0.0.1:{srv.server_port}/index.html#profileURL=trace.json")
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = _text(drv)
            if m := re.search(rf"ballast job {re.escape(job)} \(pid 1\), .* \(\d+/(\d+)\)", text):
                return text, int(m.group(1))
            if "Something went wrong" in text or "Unrecognized format" in text:
                raise AssertionError(f"speedscope could not import {trace_json}: {text[:500]}")
            time.sleep(0.3)
        raise AssertionError(f"speedscope showed no profile of {trace_json} in {timeout:.0f} s: {text[:500]}")
    finally:
        srv.shutdown()
        srv.server_close()


def show_timeline(drv: Any, name: str, limit: int = 64) -> str:
    """Step speedscope to the profile of timeline `name` (its `n` key: the next thread); the
    toolbar's text once there."""
    from selenium.webdriver.common.action_chains import ActionChains

    for _ in range(limit):
        text = _text(drv)
        if f", {name} (tid " in text:
            return text
        ActionChains(drv).send_keys("n").perform()
        time.sleep(0.3)
    raise AssertionError(f"speedscope shows no timeline {name!r}: {_text(drv)[:300]}")


def _text(drv: Any) -> str:
    return str(drv.execute_script("return document.body ? document.body.innerText : ''"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass
