"""ballast.protocol: a control step survives its JSON round trip; a message is judged by its shape
alone (size first, then JSON, schema, types, bounds, steps, moves), and anything malformed is one
ProtocolError whose reason is safe to store, log and echo. Fast: no services."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ballast.protocol import (
    MAX_INT,
    MAX_REPORTED_CHARS,
    ControlStep,
    Move,
    ProtocolError,
    acks_topic,
    brief,
    clip,
    control_topic,
    describe_error,
    message_key,
    message_size,
    parse_control,
    parse_document,
    step_from_document,
)
from tests.helpers.control import control_step as _step

pytestmark = pytest.mark.controlplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)




def _split(bins, version=0, workers=2, plan="s"):
    return dataclasses.replace(_step(plan=plan, moves=(), workers=workers, version=version), kind="split", bins=bins)


def _good(**kw) -> dict:
    d = ControlStep(job="j", operator="keycount", plan_id="p", step=1, steps=1, kind="moves",
                    moves=(Move(0, 0, 1),), workers=2, map_version=0, issued_at=NOW, effective_at=NOW).to_dict()
    d.update(kw)
    return d


# ----------------------------------------------------------------------------- round trips


def test_a_step_round_trips_through_its_message() -> None:
    for s in (_step(moves=((0, 0, 1), (7, 1, 0)), steps=3, step=2, version=4, eff=NOW + timedelta(seconds=5)),
              _step(moves=()), _split(64)):
        assert parse_control(s.to_json()) == s
        assert step_from_document(json.loads(s.to_json())) == s
    d = _step().to_dict()
    assert d["schema"] == "ballast.control/v1" and d["moves"] == [{"bin": 0, "from": 0, "to": 1}]
    assert d["issued_at"] == "2026-11-21T12:00:00Z" and "bins" not in d


def test_timestamps_must_be_aware_and_are_read_back_in_utc() -> None:
    with pytest.raises(ProtocolError, match="timezone-aware UTC"):
        dataclasses.replace(_step(), issued_at=datetime(2026, 1, 1)).to_dict()
    got = parse_control(json.dumps(_good(effective_at="2026-11-21T17:00:00+05:00")))
    assert got.effective_at == NOW and got.effective_at.tzinfo == UTC


def test_topics_and_key_of_a_job() -> None:
    assert (control_topic("clicks"), acks_topic("clicks")) == ("clicks.control", "clicks.control.acks")
    assert message_key("clicks", "keycount") == b"clicks/keycount" != message_key("clicks", "wordcount")


# ----------------------------------------------------------------------------- refusals


def test_a_merge_step_round_trips_and_goes_down_to_one_bin() -> None:
    m = dataclasses.replace(_split(16), kind="merge", bins=4)
    assert parse_control(m.to_json()) == m and m.to_dict()["bins"] == 4
    assert parse_control(dataclasses.replace(m, bins=1).to_json()).bins == 1
    for bad, why in ((3, "power of two in 1"), (0, "power of two in 1"), (1 << 17, "power of two")):
        with pytest.raises(ProtocolError, match=why):
            parse_control(json.dumps({**m.to_dict(), "bins": bad}))
    with pytest.raises(ProtocolError, match="a merge step carries no moves"):
        parse_control(json.dumps({**m.to_dict(), "moves": [{"bin": 0, "from": 0, "to": 1}]}))


def test_a_split_may_go_to_any_power_of_two_from_2_to_max_bins() -> None:
    assert parse_control(_split(2).to_json()).bins == 2 and parse_control(_split(1 << 16).to_json()).bins == 1 << 16


@pytest.mark.parametrize("doc, why", [
    ({"bins": 12}, "power of two"),
    ({"bins": 1 << 17}, "power of two"),
    ({"bins": True}, "must be int"),
    ({}, "missing field 'bins'"),
    ({"moves": [{"bin": 0, "from": 0, "to": 1}]}, "carries no moves"),
])
def test_split_message_shape_is_checked(doc, why):
    from ballast.protocol import ProtocolError, parse_control

    msg = {k: v for k, v in json.loads(_split(16).to_json()).items() if k != "bins"}
    with pytest.raises(ProtocolError, match=why):
        parse_control(json.dumps({**msg, **doc}))
    assert parse_control(_split(16).to_json()).bins == 16
    moves = json.loads(_step().to_json())
    with pytest.raises(ProtocolError, match="split and merge steps only"):
        parse_control(json.dumps({**moves, "bins": 16}))


def test_precopy_flag_round_trips_and_must_be_a_boolean():
    import dataclasses

    from ballast.protocol import ProtocolError, parse_control

    s = dataclasses.replace(_step(), precopy=True)
    assert parse_control(s.to_json()).precopy is True
    assert "precopy" not in json.loads(_step().to_json())  # old messages are unchanged
    bad = json.loads(s.to_json())
    bad["precopy"] = "yes"
    with pytest.raises(ProtocolError, match="precopy"):
        parse_control(json.dumps(bad))


@pytest.mark.security
def test_bounds_are_the_db_columns():
    parse_control(json.dumps(_good(step=MAX_INT, steps=MAX_INT)).encode())
    with pytest.raises(ProtocolError, match="must be in 0..2147483647"):
        parse_control(json.dumps(_good(map_version=MAX_INT + 1)).encode())
    with pytest.raises(ProtocolError, match="must be in 0"):
        parse_control(json.dumps(_good(moves=[{"bin": -1, "from": 0, "to": 1}])).encode())


@pytest.mark.parametrize("change, why", [
    ({"schema": "ballast.control/v2"}, "unknown schema 'ballast.control/v2'; expected 'ballast.control/v1'"),
    ({"kind": "teleport"}, "unknown kind 'teleport'"),
    ({"step": 0}, r"step 0 of 1 is out of range \(steps are numbered 1..steps\)"),
    ({"step": 3, "steps": 2}, "step 3 of 2 is out of range"),
    ({"workers": 0}, "workers after the step must be >= 1, got 0"),
    ({"workers": True}, "field 'workers' must be int, got bool"),
    ({"workers": "2"}, "field 'workers' must be int, got str"),
    ({"map_version": None}, "field 'map_version' must be int, got NoneType"),
    ({"moves": {"bin": 0}}, "field 'moves' must be list, got dict"),
    ({"moves": [{"bin": 0, "from": 1, "to": 1}]}, "moves bin 0 from worker 1 to itself"),
    ({"moves": [{"bin": 2, "from": 0, "to": 1}, {"bin": 2, "from": 1, "to": 0}]}, "bin 2 appears twice in one step"),
    ({"moves": [{"bin": 2, "from": 0}]}, "missing field 'to'"),
    ({"kind": "noop"}, "a noop step carries no moves"),
    ({"plan_id": ""}, "plan_id must not be empty"),
    ({"job": "j" * 201}, "field 'job' is longer than 200 characters"),
    ({"reason": "r" * 2001}, "field 'reason' is longer than 2000 characters"),
    ({"effective_at": "2026-11-21T12:00:00"}, "effective_at must carry a UTC offset"),
    ({"effective_at": 1700000000}, "field 'effective_at' must be str, got int"),
    ({"issued_at": "yesterday"}, "issued_at is not ISO-8601 UTC: 'yesterday'"),
    ({"issued_at": "2026-11-21T12:00:00Z" + " " * 60}, "issued_at is not ISO-8601"),
])
def test_a_malformed_step_is_refused_with_what_is_wrong(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ProtocolError, match=why) as exc:
        parse_control(json.dumps(_good(**change)))
    assert exc.value.reason == str(exc.value) and isinstance(exc.value, ValueError)


def test_missing_fields_are_named() -> None:
    for name in ("kind", "step", "steps", "workers", "map_version", "moves", "plan_id", "job", "operator",
                 "issued_at", "effective_at"):
        doc = {k: v for k, v in _good().items() if k != name}
        with pytest.raises(ProtocolError, match=f"missing field '{name}'"):
            step_from_document(doc)


@pytest.mark.parametrize("raw, why", [
    (None, "empty message"),
    (b"", "empty message"),
    (b"[1, 2]", "message must be a JSON object, got list"),
    (b'"text"', "message must be a JSON object, got str"),
    (b"{oops", "not JSON: JSONDecodeError"),
    ("x" * 101, "larger than the 100-byte limit"),
    ("é" * 51, r"larger than the 100-byte limit \(102 bytes\)"),
])
def test_a_record_that_is_not_one_json_object_within_the_size_bound_is_refused(raw: Any, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        parse_document(raw, max_bytes=100)


def test_sizes_count_the_bytes_that_travel() -> None:
    assert message_size(b"abc") == 3 and message_size(bytearray(b"ab")) == 2
    assert message_size("é") == 2 and message_size("\ud800") == 3  # a lone surrogate still has a size


# ----------------------------------------------------------------------------- safe reasons


def test_clip_makes_text_safe_to_store_log_and_echo() -> None:
    assert clip("a\x00b") == "a\\x00b"
    assert clip("bad \ud800 char") == "bad \\ud800 char"
    long = clip("x" * 1000)
    assert len(long) == MAX_REPORTED_CHARS and long.endswith("…")
    assert clip("short", 10) == "short" and clip("0123456789A", 10) == "012345678…"


def test_brief_renders_an_untrusted_value_without_its_bulk() -> None:
    assert brief("abc") == "'abc'" and brief("a" * 100, 5) == repr("aaaaa…")
    assert (brief(None), brief(True), brief(1.5), brief(42)) == ("None", "True", "1.5", "42")
    assert brief(10**40) == "<int of 41 digits>"
    assert (brief([1, 2, 3]), brief({"a": 1}), brief(b"x")) == ("<list of 3>", "<dict of 1>", "<bytes>")


def test_describe_error_gives_a_reason_for_anything_a_record_raised() -> None:
    assert describe_error(ProtocolError("plan_id must not be empty")) == "plan_id must not be empty"
    assert describe_error(RecursionError()) == "nested too deeply to parse"
    assert describe_error(KeyError("x")) == "KeyError: 'x'"
    assert len(describe_error(ValueError("v" * 5000))) == MAX_REPORTED_CHARS


def test_an_offset_far_from_utc_is_still_one_instant() -> None:
    east = datetime(2026, 11, 21, 23, 0, tzinfo=timezone(timedelta(hours=11)))
    s = dataclasses.replace(_step(), issued_at=east)
    assert parse_control(s.to_json()).issued_at == east


# ----------------------------------------------------------------------------- settings steps


def _settings_step(**settings: int) -> ControlStep:
    from ballast.protocol import Settings

    return dataclasses.replace(_step(moves=()), kind="settings", settings=Settings(**settings))


def test_a_settings_step_round_trips_with_only_what_it_changes() -> None:
    from ballast.protocol import Settings

    step = _settings_step(max_records_per_epoch=500)
    doc = json.loads(step.to_json())
    assert doc["settings"] == {"max_records_per_epoch": 500}, "an unchanged setting is not sent"
    back = parse_control(step.to_json())
    assert back == step and back.settings == Settings(trigger_ms=None, max_records_per_epoch=500)
    both = parse_control(_settings_step(trigger_ms=0, max_records_per_epoch=0).to_json())
    assert both.settings == Settings(0, 0), "0 is a value (no wait, no cap), not 'unchanged'"


def test_settings_compose_newest_first_and_keep_what_a_step_leaves_alone() -> None:
    from ballast.protocol import Settings

    first = Settings(trigger_ms=200, max_records_per_epoch=1000)
    assert Settings(max_records_per_epoch=50).over(first) == Settings(200, 50)
    assert Settings().over(first) == first


@pytest.mark.parametrize("settings, why", [
    ({}, "at least one"),
    ({"trigger": 5}, "unknown setting"),
    ({"trigger_ms": -1}, "must be in 0"),
    ({"trigger_ms": 3_600_001}, "must be in 0..3600000"),
    ({"trigger_ms": "500"}, "must be int"),
    ({"max_records_per_epoch": True}, "must be int, got bool"),
    ({"max_records_per_epoch": MAX_INT + 1}, "must be in 0"),
    ([500], "must be dict"),
])
def test_a_settings_steps_shape_is_checked(settings: Any, why: str) -> None:
    doc = json.loads(_settings_step(trigger_ms=100).to_json())
    with pytest.raises(ProtocolError, match=why):
        parse_control(json.dumps({**doc, "settings": settings}))


def test_settings_belong_to_settings_steps_and_a_settings_step_moves_nothing() -> None:
    doc = json.loads(_settings_step(trigger_ms=100).to_json())
    with pytest.raises(ProtocolError, match="carries no moves"):
        parse_control(json.dumps({**doc, "moves": [{"bin": 0, "from": 0, "to": 1}]}))
    with pytest.raises(ProtocolError, match="missing field 'settings'"):
        parse_control(json.dumps({k: v for k, v in doc.items() if k != "settings"}))
    moves = json.loads(_step().to_json())
    with pytest.raises(ProtocolError, match="settings steps only"):
        parse_control(json.dumps({**moves, "settings": {"trigger_ms": 100}}))


# ----------------------------------------------------------------------------- upgrade steps


def _upgrade_step(**code: Any) -> ControlStep:
    from ballast.code_version import CodeVersion

    return dataclasses.replace(_step(moves=()), kind="upgrade",
                               code=CodeVersion(**{"ref": "pkg.mod:Counter", "version": "2", **code}))


def test_an_upgrade_step_round_trips_with_its_code() -> None:
    from ballast.code_version import CodeVersion

    step = _upgrade_step(py_files=("/tmp/v2/counter.py",))
    doc = json.loads(step.to_json())
    assert doc["kind"] == "upgrade" and doc["moves"] == []
    assert doc["code"] == {"ref": "pkg.mod:Counter", "version": "2", "py_files": ["/tmp/v2/counter.py"]}
    back = parse_control(step.to_json())
    assert back == step and back.code == CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2/counter.py",))
    assert parse_control(_upgrade_step().to_json()).code == CodeVersion("pkg.mod:Counter", "2")
    assert "code" not in _step().to_dict(), "a step of another kind sends no code field"


def test_code_belongs_to_upgrade_steps_only_and_an_upgrade_step_moves_nothing() -> None:
    doc = json.loads(_upgrade_step().to_json())
    with pytest.raises(ProtocolError, match="an upgrade step carries field 'code'"):
        parse_control(json.dumps({k: v for k, v in doc.items() if k != "code"}))
    noop = json.loads(_step(moves=()).to_json())
    assert parse_control(json.dumps(noop)).kind == "noop"
    with pytest.raises(ProtocolError, match="and only an upgrade step does"):
        parse_control(json.dumps({**noop, "code": doc["code"]}))
    with pytest.raises(ProtocolError, match="upgrade step carries no moves"):
        parse_control(json.dumps({**doc, "moves": [{"bin": 0, "from": 0, "to": 1}]}))


@pytest.mark.parametrize("code, why", [
    ({"ref": "pkg.mod.Counter", "version": "2"}, "code ref must be package.module:Class"),
    ({"ref": "pkg.mod:Counter", "version": "2/3"}, "code version must be a label"),
    ({"ref": "pkg.mod:Counter", "version": "2", "py_files": ["v2.jar"]}, "each py_file must be a path ending in"),
    ({"ref": "pkg.mod:Counter", "version": "2", "sha": "abc"}, r"unknown field\(s\) \['sha'\] in 'code'"),
    ("pkg.mod:Counter", "field 'code' must be an object, got str"),
])
def test_a_bad_code_field_is_a_protocol_error_with_the_reason(code: Any, why: str) -> None:
    doc = json.loads(_upgrade_step().to_json())
    with pytest.raises(ProtocolError, match=why) as caught:
        parse_control(json.dumps({**doc, "code": code}))
    assert caught.value.reason == str(caught.value) and describe_error(caught.value) == caught.value.reason
