"""ballast.options_doc: README's configuration table and docs/airflow.md's jobs-file table are what
`Settings` and the jobs-file models declare; `--check` fails on a table out of date, `--write`
rewrites only the text between the markers. Fast: no services."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ballast import options_doc
from ballast.config import JobConfig, RebalanceConfig
from ballast.options import Settings, env_var

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]
CELL = re.compile(r"(?<!\\)\|")  # a cell boundary: a pipe that is not escaped


def _rows(table: str) -> dict[str, list[str]]:
    """The table's body rows by their first cell (without backticks), each as its list of cells."""
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in CELL.split(line)[1:-1]]
        rows[cells[0].strip("`")] = cells
    return rows


def test_generated_tables_match_the_code() -> None:
    """README's configuration table and docs/airflow.md's jobs-file table equal what the code declares."""
    assert options_doc.stale() == [], "run: python -m ballast.options_doc --write"
    readme = (REPO / "README.md").read_text()
    assert all(f"`{env_var(n)}`" in readme for n in Settings.model_fields)


def test_a_table_out_of_date_is_detected(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text(f"x\n{options_doc.ENV_BEGIN}\n| old |\n{options_doc.ENV_END}\ny\n")
    new = options_doc.render(doc.read_text(), options_doc.ENV_BEGIN, options_doc.ENV_END, options_doc.env_table(), doc)
    assert new != doc.read_text() and new.startswith("x\n") and new.endswith("\ny\n")
    with pytest.raises(ValueError, match="exactly one"):
        options_doc.render("no markers", options_doc.ENV_BEGIN, options_doc.ENV_END, "t", doc)


def test_markers_twice_or_in_the_wrong_order_are_refused(tmp_path: Path) -> None:
    b, e = options_doc.ENV_BEGIN, options_doc.ENV_END
    for text in (f"{e}\n{b}\n", f"{b}\n{e}\n{b}\n{e}\n", f"{b}\n"):
        with pytest.raises(ValueError, match=re.escape(f"{tmp_path}: needs exactly one")):
            options_doc.render(text, b, e, "t", tmp_path)


def test_the_jobs_table_has_one_row_per_key_with_type_and_default() -> None:
    rows = _rows(options_doc.jobs_table())
    keys = [n for n in JobConfig.model_fields if n != "rebalance"]
    keys += [f"rebalance.{n}" for n in RebalanceConfig.model_fields]
    assert list(rows) == ["schedules.supervise", "schedules.rebalance", *keys]  # each key once, in model order
    assert all(len(r) == 4 for r in rows.values()), "a pipe in a cell split a row"
    assert rows["job"][1:3] == ["str", "required"] and rows["input_topic"][2] == "required"
    assert rows["bins"][1:3] == ["int", "`256`"] and rows["checkpoint_dir"][2] == "empty"
    assert rows["extra_args"][1:3] == ["list of str", "empty"]
    assert rows["rebalance.strategy"][1] == r"`all-at-once` \| `fluid` \| `batched` \| `auto`"
    assert rows["rebalance.step_size"][1:3] == ["int", "null"]  # optional: unset is null in YAML
    assert rows["rebalance.utilization_band"][3] == r"no change while \|utilization - target\| <= band"
    assert rows["schedules.rebalance"][1:3] == [r"cron \| null", "`*/2 * * * *`"]


def test_the_env_table_names_each_variable_with_repo_relative_paths() -> None:
    rows = _rows(options_doc.env_table())
    assert list(rows) == [env_var(n) for n in Settings.model_fields]
    assert rows["BALLAST_STATE_DIR"][1:3] == ["Path", "`.state/`"]  # a directory: trailing slash
    assert rows["BALLAST_JOBS_FILE"][2] == "`dags/ballast_jobs.yaml`"
    assert rows["BALLAST_DB_URL"][1:3] == ["str", "unset"]
    assert rows["BALLAST_FAULTS_KILL_GROUP"][1:3] == ["bool", "`0`"]
    assert rows["BALLAST_KAFKA_AUTH"][1] == r"`none` \| `scram`"


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Two docs of the test's own, each with a stale table between its markers."""
    readme, airflow = tmp_path / "README.md", tmp_path / "docs" / "airflow.md"
    airflow.parent.mkdir()
    readme.write_text(f"# R\n{options_doc.ENV_BEGIN}\n| stale |\n{options_doc.ENV_END}\ntail\n")
    airflow.write_text(f"# A\n{options_doc.JOBS_BEGIN}\n{options_doc.JOBS_END}\n")
    monkeypatch.setattr(options_doc, "REPO", tmp_path)
    monkeypatch.setattr(options_doc, "DOCS", (
        (readme, options_doc.ENV_BEGIN, options_doc.ENV_END, options_doc.env_table),
        (airflow, options_doc.JOBS_BEGIN, options_doc.JOBS_END, options_doc.jobs_table),
    ))
    return readme, airflow


def test_check_fails_on_stale_tables_and_write_fixes_them(docs: tuple[Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    readme, airflow = docs
    assert options_doc.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "README.md is out of date: run python -m ballast.options_doc --write" in err
    assert "docs/airflow.md is out of date" in err
    assert options_doc.main(["--write"]) == 0
    assert readme.read_text().startswith("# R\n") and readme.read_text().endswith(f"{options_doc.ENV_END}\ntail\n")
    assert "| stale |" not in readme.read_text() and "`BALLAST_DB_URL`" in readme.read_text()
    assert "`rebalance.strategy`" in airflow.read_text()
    assert options_doc.main(["--check"]) == 0 and capsys.readouterr().err == ""


def test_markdown_prints_both_tables_and_a_mode_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert options_doc.main(["--markdown"]) == 0
    out = capsys.readouterr().out
    assert out == f"{options_doc.env_table()}\n\n{options_doc.jobs_table()}\n"
    with pytest.raises(SystemExit):
        options_doc.main([])
