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


def open_trace(drv: Any, trace_json: Path, title: str, timeout: float = 30.0) -> tuple[str, int]:
    """Load `trace_json` into speedscope in `drv`; (the page's text, how many timelines it shows).
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
        drv.get(f"http://127.0.0.1:{srv.server_port}/index.html#profileURL=trace.json&title={title}")
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = str(drv.execute_script("return document.body ? document.body.innerText : ''"))
            if m := re.search(rf"{re.escape(title)} \(\d+/(\d+)\)", text):
                return text, int(m.group(1))
            if "Something went wrong" in text or "Unrecognized format" in text:
                raise AssertionError(f"speedscope could not import {trace_json}: {text[:500]}")
            time.sleep(0.3)
        raise AssertionError(f"speedscope showed no profile of {trace_json} in {timeout:.0f} s: {text[:500]}")
    finally:
        srv.shutdown()
        srv.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass
