"""ballast.launch: the detached launcher runs exactly the spark-submit the supervisor described in
BALLAST_SUBMIT (never in argv), exits 0 when it ends well, 1 when it fails and 2 when started by
hand without a request. Fast: a stand-in for the provider's SparkSubmitHook (the real launch:
tests/ballast/test_supervisor.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ballast import launch

pytestmark = pytest.mark.controlplane


class FakeHook:
    """The provider's SparkSubmitHook as the launcher uses it: built from kwargs, submit(app)."""

    made: list[FakeHook] = []
    fail: Exception | None = None

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.submitted: list[str] = []
        FakeHook.made.append(self)

    def submit(self, application: str) -> None:
        self.submitted.append(application)
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> type[FakeHook]:
    from airflow.providers.apache.spark.hooks import spark_submit

    monkeypatch.setattr(spark_submit, "SparkSubmitHook", FakeHook)
    FakeHook.made, FakeHook.fail = [], None
    return FakeHook


def _request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(launch.ENV_SUBMIT, json.dumps({"hook": {"conn_id": "spark_x", "name": "j"},
                                                      "application": "/app/main.py"}))


def test_runs_the_described_submit_once_and_exits_0(hook: type[FakeHook], monkeypatch: pytest.MonkeyPatch) -> None:
    _request(monkeypatch)
    assert launch.main(["--job", "j"]) == 0
    [h] = hook.made
    assert h.kwargs == {"conn_id": "spark_x", "name": "j"} and h.submitted == ["/app/main.py"]


def test_a_failed_submit_exits_1_and_logs_why(hook: type[FakeHook], monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    _request(monkeypatch)
    hook.fail = RuntimeError("spark-submit exited 1: no master")
    assert launch.main(["--job", "j"]) == 1
    assert "job j: spark-submit failed: spark-submit exited 1: no master" in caplog.text


def test_started_by_hand_without_a_request_exits_2_and_says_who_starts_it(
        hook: type[FakeHook], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(launch.ENV_SUBMIT, raising=False)
    assert launch.main(["--job", "j"]) == 2
    assert "$BALLAST_SUBMIT is not set" in capsys.readouterr().err and hook.made == []


def test_the_job_name_is_required(hook: type[FakeHook], monkeypatch: pytest.MonkeyPatch) -> None:
    _request(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        launch.main([])
    assert exc.value.code == 2 and hook.made == []
