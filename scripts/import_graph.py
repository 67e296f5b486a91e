"""Print the import graph by layer: which layer imports which, how often, and whether it points down.

    python scripts/import_graph.py            # layer -> layer edges, frameworks per layer, scripts/
    python scripts/import_graph.py --modules  # every module -> module edge between two layers

The layers are the `layers` contract of pyproject.toml (`[tool.importlinter]`, checked by
`lint-imports` in `make lint`); the graph comes from grimp, the library lint-imports itself builds
its graph with, so this shows what the contracts see. scripts/ is not a package (its files import
each other by bare name from sys.path), so its edges are read from the source here, and a cycle
among them is reported too. Exit status 1 when an edge points up or scripts/ has a cycle.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRAMEWORKS = ("airflow", "pyspark", "kafka", "sqlalchemy", "alembic")
NAMES = ["dags", "Airflow glue", "control plane", "data plane", "metrics store", "schema", "core"]


def contracts(pyproject: Path = REPO / "pyproject.toml") -> list[dict]:
    """The import-linter contracts of pyproject.toml."""
    return list(tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"])


def layers(cfg: list[dict]) -> list[list[str]]:
    """The module names of each layer, top first, from the contract with id `layers`."""
    contract = next(c for c in cfg if c.get("id") == "layers")
    return [[m.strip() for m in line.replace("|", ":").split(":")] for line in contract["layers"]]


def _under(module: str, names: list[str]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def cut_by(importer: str, imported: str, cfg: list[dict]) -> str | None:
    """The id of a forbidden contract that forbids this direct import, if any."""
    for c in cfg:
        if c["type"] == "forbidden" and _under(importer, c["source_modules"]) and \
                _under(imported, c["forbidden_modules"]):
            return str(c.get("id", c["name"]))
    return None


def layer_of(module: str, table: list[list[str]]) -> int | None:
    """Index of the layer that holds `module` (itself or a package above it), else None."""
    for i, names in enumerate(table):
        if _under(module, names):
            return i
    return None


def package_edges(table: list[list[str]]) -> tuple[Counter[tuple[int, int]], dict[tuple[int, int], list[str]],
                                                    dict[int, set[str]]]:
    """(layer, layer) import counts, the module edges behind each ("importer -> imported"), and the
    frameworks each layer imports."""
    import grimp

    roots = sorted({n.split(".")[0] for names in table for n in names})
    graph = grimp.build_graph(*roots, include_external_packages=True)
    counts: Counter[tuple[int, int]] = Counter()
    behind: dict[tuple[int, int], list[str]] = {}
    frameworks: dict[int, set[str]] = {}
    for importer in sorted(graph.modules):
        src = layer_of(importer, table)
        if src is None:
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported.split(".")[0] in FRAMEWORKS:
                frameworks.setdefault(src, set()).add(imported.split(".")[0])
            dst = layer_of(imported, table)
            if dst is None or dst == src:
                continue
            counts[src, dst] += 1
            behind.setdefault((src, dst), []).append(f"{importer} -> {imported}")
    return counts, behind, frameworks


def script_edges(scripts: Path = REPO / "scripts") -> dict[str, set[str]]:
    """scripts/<a>.py -> the sibling scripts it imports by bare name (also inside functions and TYPE_CHECKING)."""
    stems = {p.stem for p in scripts.glob("*.py")}
    out: dict[str, set[str]] = {}
    for p in sorted(scripts.glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
        out[p.stem] = (names & stems) - {p.stem}
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", action="store_true", help="also list the module edges behind each layer edge")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(REPO / "plugins"), str(REPO)]  # the checkout's packages, as lint-imports sees them
    cfg = contracts()
    table = layers(cfg)
    names = NAMES if len(NAMES) == len(table) else [" : ".join(t) for t in table]
    counts, behind, frameworks = package_edges(table)
    bad = 0
    print("layer edges (importer -> imported: module imports)")
    for (src, dst), n in sorted(counts.items()):
        cuts = sorted({c for e in behind[src, dst] if (c := cut_by(*e.split(" -> "), cfg))})
        way = "UP: breaks the layers contract" if src > dst else f"cut by {', '.join(cuts)}" if cuts else "down"
        bad += src > dst or bool(cuts)
        print(f"  {names[src]:>13} -> {names[dst]:<13} {n:4d}  {way}")
        if args.modules or way != "down":
            print("".join(f"      {e}\n" for e in behind[src, dst]), end="")
    print("frameworks imported per layer")
    for i, fw in sorted(frameworks.items()):
        print(f"  {names[i]:>13}: {', '.join(sorted(fw))}")
    edges = script_edges()
    print("scripts/ (bare-name imports between its files)")
    for stem, deps in sorted(edges.items()):
        if deps:
            print(f"  {stem} -> {', '.join(sorted(deps))}")
    cycle = find_cycle(edges)
    print(f"  cycle: {' -> '.join(cycle)}" if cycle else "  no cycle")
    return 1 if bad or cycle else 0


if __name__ == "__main__":
    raise SystemExit(main())
