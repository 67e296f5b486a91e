"""README's glossary is the source for names: every code name it lists must exist, so a rename
that forgets the glossary (or a glossary entry for code that went) fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from migrations_db.models import Base

pytestmark = pytest.mark.foundation
README = Path(__file__).resolve().parents[2] / "README.md"
DOTTED = re.compile(r"`((?:ballast|spark_jobs|migrations_db)(?:\.\w+)+)`")
TABLE = re.compile(r"`(\w+)` table")


def glossary() -> dict[str, str]:
    """word -> its row's "in code" cell, from the table under README's `## Glossary`."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| **")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        out[cells[0]] = cells[2]
    return out


def resolve(dotted: str) -> Any:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)  # AttributeError: the name is gone
        return obj
    raise ModuleNotFoundError(dotted)


def test_glossary_is_there_with_the_settled_words() -> None:
    words = " ".join(glossary())
    for word in ("job", "operator", "on-call", "bin", "epoch", "step checkpoint", "checkpoint dir", "plan",
                 "decision", "strategy", "stage", "metrics store", "console"):
        assert f"**{word}**" in words, f"README's glossary lost the word {word!r}"


@pytest.mark.parametrize("word", sorted(glossary()))
def test_glossary_code_names_exist(word: str) -> None:
    cell = glossary()[word]
    names, tables = DOTTED.findall(cell), TABLE.findall(cell)
    assert names or tables or cell == "—", f"{word}: the 'in code' cell names nothing checkable: {cell!r}"
    for name in names:
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            pytest.fail(f"glossary word {word} names {name}, which does not exist ({exc}): fix README's glossary")
    for table in tables:
        assert table in Base.metadata.tables, f"glossary word {word} names table {table!r}, not in migrations_db.models"


def test_the_check_fails_for_a_missing_name() -> None:
    with pytest.raises(AttributeError):
        resolve("ballast.protocol.NoSuchClass")
    with pytest.raises(ModuleNotFoundError):
        resolve("ballast_nothing.x")


def words_of(rows: list[str]) -> list[str]:
    """Each bold word of the glossary's first column (a row may name several: `**plan** / **open plan**`)."""
    return [w.lower() for row in rows for w in re.findall(r"\*\*([^*]+)\*\*", row)]


def test_each_word_has_one_meaning() -> None:
    """One word per concept: a word the glossary defines twice (the autotuner's "epoch tail" beside
    the driver's, once) means two things to a newcomer."""
    words = words_of(list(glossary()))
    twice = sorted({w for w in words if words.count(w) > 1})
    assert not twice, f"README's glossary defines {twice} more than once: rename one of each"


def test_the_one_meaning_check_fails_for_a_word_defined_twice() -> None:
    assert words_of(["**epoch tail**", "**slow-epoch factor** / **epoch tail**"]).count("epoch tail") == 2
