"""docs/guarantees.md names, for every guarantee the docs make, the tests that would fail if it
broke. This keeps the page honest: every named test exists (its file defines that function, or
`Class::method`), every row of a guarantee table names at least one, and every link goes to an
existing page and heading. A renamed or deleted test, or a renamed heading, fails here.

Parsing only (ast and text, no imports of the tests), so it takes a fraction of a second."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "guarantees.md"
TESTED = ("guarantee", "documented in", "tests")
UNCOVERED = ("guarantee", "documented in", "what a test needs")
CODE = re.compile(r"`([^`]+)`")
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+(?:::\w+)?)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


@dataclass(frozen=True)
class Row:
    line: int
    header: tuple[str, ...]
    cells: tuple[str, ...]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (word characters, spaces and
    hyphens stay), each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a markdown text; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


def rows(text: str) -> list[Row]:
    """The body rows of every table, each with its table's header (separator rows skipped)."""
    out: list[Row] = []
    header: tuple[str, ...] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = cells(line)
        elif not re.fullmatch(r"\|[\s:|-]+\|?", line.strip()):
            out.append(Row(n, header, cells(line)))
    return out


def collected_names(tree: ast.Module) -> frozenset[str]:
    """`name` for each test function of a module and `Class::name` for each test method (nested
    classes as `Outer::Inner::name`): what pytest collects, by name."""
    found: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}::")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                found.add(prefix + node.name)

    walk(tree.body, "")
    return frozenset(found)


HEADER = re.compile(r"^([ \t]*)(?:async[ \t]+)?(?:def|class)[ \t]+\w+", re.M)


@cache
def source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def skeleton(text: str) -> str:
    """What pytest can collect from a module, as source: its module-level `def`/`class` headers and
    the ones directly inside those classes, each with `...` as its body (functions nested in
    functions are left out). Parsing that instead of every named file whole keeps this test in
    milliseconds; a header it cannot place raises SyntaxError, and the whole file is parsed."""
    out: list[str] = []
    stack: list[tuple[int, bool]] = []  # (indent, is a class) of the enclosing headers
    for m in HEADER.finditer(text):
        indent, is_class = len(m.group(1)), m.group(0).lstrip().startswith("class")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and not stack[-1][1]:
            continue  # inside a function: never collected
        if indent and not stack:
            raise SyntaxError(f"a definition under a statement at offset {m.start()}")
        depth, i = 0, m.end()
        while i < len(text) and not (depth == 0 and text[i] in ":\n"):  # the header's own colon
            depth += (text[i] in "([{") - (text[i] in ")]}")
            if depth < 0:  # a bracket inside a string: leave it to the whole file's parse
                raise SyntaxError(f"unbalanced brackets in the header at offset {m.start()}")
            i += 1
        out.append(f"{text[m.start():i]}:\n{m.group(1)}    ...")
        stack.append((indent, is_class))
    return "\n".join(out) + "\n"


@cache
def defined_tests(path: Path) -> frozenset[str]:
    """Every test a file defines, from its skeleton; from the whole file when the skeleton does not
    parse (a definition under an `if` at module level, a bracket inside a default string)."""
    text = source(path)
    try:
        return collected_names(ast.parse(skeleton(text)))
    except SyntaxError:
        return collected_names(ast.parse(text))


@cache
def page_anchors(path: Path) -> frozenset[str]:
    return frozenset(anchors(source(path)))


@cache
def check_link(target: str, base: Path) -> str | None:
    """Why a link `page.md#anchor` (relative to `base`) is broken, or None."""
    page, _, anchor = target.partition("#")
    path = (base / page).resolve() if page else PAGE
    if not path.is_file():
        return f"links to {target}: no such page"
    if anchor and anchor not in page_anchors(path):
        return f"links to {target}: {path.name} has no heading with anchor #{anchor}"
    return None


def check_test(ref: str) -> str | None:
    """Why a test reference `tests/...py::name` does not name an existing test, or None."""
    m = NODE.fullmatch(ref)
    if m is None:
        return f"`{ref}` is not a test reference (tests/<path>.py::<function> or ::<Class>::<method>)"
    path = REPO / m.group(1)
    if not path.is_file():
        return f"`{ref}`: no such file"
    if m.group(2) not in defined_tests(path):
        return f"`{ref}`: {m.group(1)} defines no test {m.group(2)}"
    return None


def check_page(text: str, base: Path) -> list[str]:
    """Every problem of a guarantees page, one line each, naming its line number."""
    problems: list[str] = []
    for row in rows(text):
        where = f"docs/guarantees.md line {row.line}"
        if row.header not in (TESTED, UNCOVERED):
            problems.append(f"{where}: a table with columns {row.header}; use {TESTED} (or {UNCOVERED})")
            continue
        if len(row.cells) != 3 or not row.cells[0]:
            problems.append(f"{where}: a row needs 3 cells (guarantee | documented in | ...), has {row.cells}")
            continue
        _guarantee, documented, last = row.cells
        links = LINK.findall(documented)
        if not links:
            problems.append(f"{where}: 'documented in' links to no doc section")
        problems += [f"{where}: {why}" for t in links if (why := check_link(t, base))]
        if row.header == TESTED:
            refs = CODE.findall(last)
            if not refs:
                problems.append(f"{where}: names no test; move it to 'Not yet covered' with what a test needs")
            problems += [f"{where}: {why}" for ref in refs if (why := check_test(ref))]
        elif not last:
            problems.append(f"{where}: say what a test would need")
    return problems


def test_every_guarantee_names_existing_tests_and_doc_sections() -> None:
    problems = check_page(PAGE.read_text(encoding="utf-8"), PAGE.parent)
    assert not problems, "docs/guarantees.md:\n" + "\n".join(problems)


def test_the_page_has_guarantee_tables_and_a_not_yet_covered_section() -> None:
    """The tables keep their rows; "Not yet covered" stays as the place for a guarantee without a
    test (empty when every guarantee has one), and any table there has its own three columns."""
    text = PAGE.read_text(encoding="utf-8")
    found = rows(text)
    assert sum(r.header == TESTED for r in found) >= 50, "the guarantee tables lost their rows"
    assert "\n## Not yet covered\n" in text, "the 'Not yet covered' section is gone"
    uncovered = rows(text.split("\n## Not yet covered\n", 1)[1].split("\n## ", 1)[0])
    assert all(r.header == UNCOVERED for r in uncovered), "a table under 'Not yet covered' lost its columns"


def test_each_doc_page_links_to_its_guarantees_and_the_links_resolve() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        if page == PAGE:
            continue
        targets = [t for t in LINK.findall(page.read_text(encoding="utf-8")) if "guarantees.md" in t]
        assert targets, f"{page.relative_to(REPO)} does not link to docs/guarantees.md"
        for t in targets:
            why = check_link(t, page.parent)
            assert why is None, f"{page.relative_to(REPO)} {why}"


def test_the_check_fails_on_a_bad_row() -> None:
    good = "[x](dataplane.md#exactly-once-under-executor-and-driver-loss)"
    real = "`tests/project/test_guarantees.py::test_the_check_fails_on_a_bad_row`"
    bad_rows = {
        "no test": f"| g | {good} | |",
        "not a test reference": f"| g | {good} | `tests/x.py` |",
        "no such file": f"| g | {good} | `tests/nowhere/test_gone.py::test_x` |",
        "defines no test": f"| g | {good} | `tests/project/test_guarantees.py::test_no_such_test` |",
        "no heading with anchor": f"| g | [x](dataplane.md#no-such-heading) | {real} |",
        "no such page": f"| g | [x](nowhere.md#a) | {real} |",
        "links to no doc section": f"| g | dataplane.md | {real} |",
        "a row needs 3 cells": f"| g | {good} |",
        "a table with columns": "| guarantee | tests |\n|---|---|\n| g | x |",
    }
    head = "| guarantee | documented in | tests |\n|---|---|---|\n"
    assert check_page(head + f"| g | {good} | {real} |\n", PAGE.parent) == []
    for why, row in bad_rows.items():
        text = row if row.startswith("| guarantee") else head + row + "\n"
        problems = check_page(text, PAGE.parent)
        assert any(why in p for p in problems), (why, problems)


def test_slugs_and_methods_are_found_as_github_and_pytest_name_them(tmp_path: Path) -> None:
    assert slug("Durable state and caches (`spark_jobs/durable.py`, `spark_jobs/cache.py`)") == \
        "durable-state-and-caches-spark_jobsdurablepy-spark_jobscachepy"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## B: c\n") == {"a", "a-1", "b-c"}
    module = (
        "class TestA:\n"
        "    x = {'a': 1}\n"
        "    def test_m(self, d=(1, ':')):\n"
        "        def test_inner():\n"
        "            pass\n"
        "    class TestB:\n"
        "        async def test_n(self) -> dict[str, int]:\n"
        "            return {}\n"
        "\n"
        "def test_f(\n"
        "    x,\n"
        ") -> None:\n"
        "    with open(x):\n"
        "        def test_nested():\n"
        "            pass\n"
        "\n"
        "def helper(): pass\n"
    )
    expected = {"TestA::test_m", "TestA::TestB::test_n", "test_f"}
    assert collected_names(ast.parse(skeleton(module))) == collected_names(ast.parse(module)) == expected
    test_file = tmp_path / "test_x.py"
    test_file.write_text(module)
    assert defined_tests(test_file) == expected
    # a definition the skeleton cannot place: the whole file is parsed instead
    test_file = tmp_path / "test_y.py"
    test_file.write_text('def test_g(x=")"):\n    pass\n')
    with pytest.raises(SyntaxError):
        skeleton(source(test_file))
    assert defined_tests(test_file) == {"test_g"}
