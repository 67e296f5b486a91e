"""How a split or a merge step renumbers the bin map: the one rule both sides apply.

The controller plans with it (ballast.control.plan) and the job applies it (spark_jobs.control),
so a plan's target map and the job's map after the step cannot differ. Pure Python.
"""

from __future__ import annotations


def split_assignment(assignment: list[int] | tuple[int, ...], bins: int) -> list[int]:
    """The map after a split step to `bins` (a power of two above the current count): bin b at the
    new k is a sub-range of bin b >> d at the old one and stays on its worker, so no key moves."""
    d = (bins // len(assignment)).bit_length() - 1
    return [assignment[b >> d] for b in range(bins)]


def merge_assignment(assignment: list[int] | tuple[int, ...], bins: int) -> list[int]:
    """The map after a merge step to `bins` (a power of two below the current count): bin b at the
    new k is the key range of bins b·2^d .. (b+1)·2^d − 1 at the old one, which must share a worker
    (`unmerged_siblings`): they stay there, so no key moves."""
    d = (len(assignment) // bins).bit_length() - 1
    return [assignment[b << d] for b in range(bins)]


def unmerged_siblings(assignment: list[int] | tuple[int, ...], bins: int) -> list[tuple[int, list[int]]]:
    """The bins at the new count whose parts sit on more than one worker (a merge to `bins` needs
    none): (bin at the new count, the workers of its parts in order)."""
    d = (len(assignment) // bins).bit_length() - 1
    out = []
    for b in range(bins):
        ws = list(assignment[b << d:(b + 1) << d])
        if len(set(ws)) > 1:
            out.append((b, ws))
    return out
