"""The one exception base every Ballast error derives from.

A caller that drives Ballast (a DAG task, the CLI, a test harness, a script) can catch
`BallastError` to tell "Ballast refused or failed, here is why" apart from a bug or a framework
error, without importing the module that raised it. Each concrete error keeps its built-in base
too (`ValueError` for bad input, `RuntimeError` for a failure at run time), so code that catches
those goes on working:

    class ConfigError(BallastError, ValueError): ...

Pure Python: the data plane, the control plane and the scripts all import it.
"""

from __future__ import annotations

__all__ = ["BallastError"]


class BallastError(Exception):
    """Base of every error Ballast raises on purpose; the message says what to do about it."""
