"""Tracing: a job's activities and their dependencies, and what holds its epochs back.

`graph` (the program activity graph and its snapshot over a window), `cp` (Snailtrail's critical
participation over it), `chrome` (the Chrome/Perfetto trace-event export). Pure Python, part of
the framework-free core: the data plane records traces, the console and the policy read them.
"""

from ballast.tracing.chrome import chrome_trace
from ballast.tracing.cp import Participation, critical_participation, epochs_participation, per_epoch
from ballast.tracing.graph import Activity, Edge, Message, Trace, snapshot

__all__ = ["Activity", "Edge", "Message", "Participation", "Trace", "chrome_trace", "critical_participation",
           "epochs_participation", "per_epoch", "snapshot"]
