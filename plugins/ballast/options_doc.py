"""README's configuration table and docs/airflow.md's jobs-file key table, generated from the code.

Why: hand-written tables drifted (6 of 22 variables were documented). `--write` rewrites the text
between the markers; `--check` (and tests/ballast/test_options_doc.py) fails when a doc differs
from what `ballast.options.Settings` and `ballast.config.JobConfig` declare.

    python -m ballast.options_doc --write    # after adding or changing a knob
    python -m ballast.options_doc --check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ballast.config import DEFAULT_SCHEDULES, JobConfig, RebalanceConfig
from ballast.options import REPO, Settings, env_var

ENV_BEGIN, ENV_END = "<!-- options:env:begin -->", "<!-- options:env:end -->"
JOBS_BEGIN, JOBS_END = "<!-- options:jobs:begin -->", "<!-- options:jobs:end -->"


def _type(info: FieldInfo) -> str:
    """Short type name: Literal choices joined by |, Optional shown as `X or unset`."""
    ann = info.annotation
    if get_args(ann)[-1:] == (Ellipsis,):  # tuple[str, ...]
        return f"list of {get_args(ann)[0].__name__}"
    args = [a for a in get_args(ann) if a is not type(None)]
    if getattr(ann, "__origin__", None) is None and not args:
        return getattr(ann, "__name__", str(ann))
    if len(args) == 1 and get_args(args[0]):  # Optional[Literal[...]]
        args = list(get_args(args[0]))
    if all(isinstance(a, str) for a in args):
        return " \\| ".join(f"`{a}`" for a in args)
    names = [getattr(a, "__name__", str(a)) for a in args]
    return " \\| ".join(names) if names else str(ann)


def _cell(text: str | None) -> str:
    """A description safe inside a table row."""
    return (text or "").replace("|", "\\|")


def _default(info: FieldInfo, none: str = "unset") -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
        return "" if isinstance(value, BaseModel) else f"`{value!r}`"
    value = info.default
    if value is None:
        return none
    if isinstance(value, Path):
        home = Path.home()
        rel = (value.relative_to(REPO) if value.is_relative_to(REPO)
               else Path("~") / value.relative_to(home) if value.is_relative_to(home) else value)
        return f"`{rel}/`" if not rel.suffix else f"`{rel}`"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if value == () or value == "":
        return "empty"
    return f"`{value}`"


def env_table() -> str:
    """Markdown: variable | type | default | meaning, one row per Settings field."""
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        rows.append(f"| `{env_var(name)}` | {_type(info)} | {_default(info)} | {_cell(info.description)} |")
    return "\n".join(rows)


def jobs_table() -> str:
    """Markdown: key | type | default | meaning, for a job and its `rebalance:` mapping."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for dag, cron in DEFAULT_SCHEDULES.items():
        rows.append(
            f"| `schedules.{dag}` | cron \\| null | `{cron}` | when `ballast_{dag}__<job>` runs; "
            "null: manual runs only |"
        )
    for prefix, model in (("", JobConfig), ("rebalance.", RebalanceConfig)):
        for name, info in model.model_fields.items():
            if name == "rebalance":
                continue
            required = info.is_required()
            rows.append(
                f"| `{prefix}{name}` | {_type(info)} | {'required' if required else _default(info, 'null')} "
                f"| {_cell(info.description)} |"
            )
    return "\n".join(rows)


DOCS: tuple[tuple[Path, str, str, Any], ...] = (
    (REPO / "README.md", ENV_BEGIN, ENV_END, env_table),
    (REPO / "docs" / "airflow.md", JOBS_BEGIN, JOBS_END, jobs_table),
)


def render(text: str, begin: str, end: str, table: str, where: Path) -> str:
    """`text` with the part between the markers replaced by `table`."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where}: needs exactly one {begin} … {end} pair (put them where the table goes)")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{table}\n{end}{tail}"


def stale() -> list[Path]:
    """The docs whose generated table differs from the code."""
    return [p for p, b, e, make in DOCS if render(p.read_text(), b, e, make(), p) != p.read_text()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ballast.options_doc", description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the tables in README.md and docs/airflow.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when a table differs from the code")
    mode.add_argument("--markdown", action="store_true", help="print both tables")
    a = ap.parse_args(argv)
    if a.markdown:
        print(env_table(), jobs_table(), sep="\n\n")
        return 0
    if a.check:
        bad = stale()
        for p in bad:
            print(f"{p.relative_to(REPO)} is out of date: run python -m ballast.options_doc --write", file=sys.stderr)
        return 1 if bad else 0
    for p, b, e, make in DOCS:
        p.write_text(render(p.read_text(), b, e, make(), p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
