"""ballast.code_version: an upgrade step's code (ref, version, py_files) is checked where it is built,
survives its JSON round trip (py_files left out when there are none), and anything malformed is one
CodeVersionError (a ValueError) that says which part and why; so is a shadow upgrade's spec
(`ShadowSpec`), which the history's `entry` leaves out. Fast: no services."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ballast.code_version import (
    MAX_PATH_CHARS,
    MAX_PY_FILES,
    MAX_REF_CHARS,
    MAX_SHADOW_EPOCHS,
    MAX_VERSION_CHARS,
    CodeVersion,
    CodeVersionError,
    ShadowSpec,
)
from ballast.errors import BallastError

pytestmark = pytest.mark.controlplane


def test_a_valid_code_version_keeps_what_it_was_given() -> None:
    c = CodeVersion("pkg.sub_mod:Counter2", "2.1+build-3_x", ("/opt/v2/counter.py", "s3a://b/v2.zip", "x.EGG"))
    assert (c.ref, c.version, c.py_files) == ("pkg.sub_mod:Counter2", "2.1+build-3_x",
                                              ("/opt/v2/counter.py", "s3a://b/v2.zip", "x.EGG"))
    assert CodeVersion("m:C", "1").py_files == ()
    assert CodeVersion("_m:_C", "a").ref == "_m:_C"
    assert len(CodeVersion("m:C", "1", ("f.py",) * MAX_PY_FILES).py_files) == MAX_PY_FILES


def test_the_limits_are_inclusive() -> None:
    ref = "m" * (MAX_REF_CHARS - 2) + ":C"
    path = "/" + "p" * (MAX_PATH_CHARS - 4) + ".py"
    c = CodeVersion(ref, "9" * MAX_VERSION_CHARS, (path,))
    assert len(c.ref) == MAX_REF_CHARS and len(c.version) == MAX_VERSION_CHARS and len(c.py_files[0]) == MAX_PATH_CHARS


def test_it_round_trips_through_its_dict_and_leaves_out_empty_py_files() -> None:
    bare = CodeVersion("pkg.mod:Counter", "2")
    assert bare.to_dict() == {"ref": "pkg.mod:Counter", "version": "2"}, "no py_files key when there are none"
    assert CodeVersion.from_dict(bare.to_dict()) == bare
    shipped = CodeVersion("pkg.mod:Counter", "3", ("/tmp/v3/pkg.zip", "/tmp/v3/extra.py"))
    assert shipped.to_dict() == {"ref": "pkg.mod:Counter", "version": "3",
                                 "py_files": ["/tmp/v3/pkg.zip", "/tmp/v3/extra.py"]}
    assert CodeVersion.from_dict(shipped.to_dict()) == shipped
    assert CodeVersion.from_dict({"ref": "pkg.mod:Counter", "version": "2", "py_files": []}) == bare


def test_describe_names_the_version_and_its_class() -> None:
    assert CodeVersion("pkg.mod:Counter", "2").describe() == "version 2 (pkg.mod:Counter)"


@pytest.mark.parametrize("ref", [
    "pkg.mod.Counter",  # no ':'
    "pkg.mod:",
    ":Counter",
    "pkg.mod:Coun ter",
    "pkg mod:Counter",
    " pkg.mod:Counter",
    "pkg.mod:Counter\n",  # a trailing newline is not part of a class name
    "pkg.mod:A:B",
    "1pkg:Counter",
    "pkg.mod:1Counter",
    "m" * (MAX_REF_CHARS - 1) + ":C",  # one over
    "",
])
def test_a_ref_that_is_not_package_module_class_is_refused(ref: str) -> None:
    with pytest.raises(CodeVersionError, match="code ref must be package.module:Class"):
        CodeVersion(ref, "2")


@pytest.mark.parametrize("version", [
    "", "2/1", "v 2", " 2", "2 ", "-2", ".2", "2\n", "2\x00", "9" * (MAX_VERSION_CHARS + 1),
])
def test_a_version_that_is_not_a_short_label_is_refused(version: str) -> None:
    with pytest.raises(CodeVersionError, match="code version must be a label"):
        CodeVersion("pkg.mod:Counter", version)


@pytest.mark.parametrize("py_file", [
    "counter.txt", "counter", "counter.py.bak", "dir/", "", "ok\x00.py", "/" + "p" * MAX_PATH_CHARS + ".py",
])
def test_a_py_file_that_spark_cannot_ship_is_refused(py_file: str) -> None:
    with pytest.raises(CodeVersionError, match=r"each py_file must be a path ending in \.py/\.zip/\.egg"):
        CodeVersion("pkg.mod:Counter", "2", ("good.py", py_file))


def test_at_most_max_py_files() -> None:
    with pytest.raises(CodeVersionError, match=f"at most {MAX_PY_FILES} py_files, got {MAX_PY_FILES + 1}"):
        CodeVersion("pkg.mod:Counter", "2", ("f.py",) * (MAX_PY_FILES + 1))


@pytest.mark.parametrize("doc, why", [
    (["pkg.mod:Counter", "2"], "field 'code' must be an object, got list"),
    ("pkg.mod:Counter", "field 'code' must be an object, got str"),
    (None, "field 'code' must be an object, got NoneType"),
    ({"ref": "pkg.mod:Counter", "version": "2", "files": []}, r"unknown field\(s\) \['files'\] in 'code'"),
    ({"ref": "pkg.mod:Counter", "version": "2", "b": 1, "a": 2}, r"unknown field\(s\) \['a', 'b'\]"),
    ({"ref": "pkg.mod:Counter", "version": "2", "py_files": "v2.zip"},
     "code.py_files must be a list of paths, got str"),
    ({"ref": "pkg.mod:Counter", "version": "2", "py_files": {"a": "b.py"}}, "must be a list of paths, got dict"),
    ({"ref": "pkg.mod:Counter", "version": "2", "py_files": [7]}, "each py_file must be a path"),
    ({"version": "2"}, "code ref must be"),
    ({"ref": "pkg.mod:Counter"}, "code version must be"),
    ({"ref": "pkg.mod:Counter", "version": 2}, "code version must be"),
    ({"ref": ["pkg.mod:Counter"], "version": "2"}, "code ref must be"),
])
def test_a_code_object_is_parsed_strictly(doc: Any, why: str) -> None:
    with pytest.raises(CodeVersionError, match=why):
        CodeVersion.from_dict(doc)


def test_a_code_version_error_is_a_ballast_value_error() -> None:
    with pytest.raises(CodeVersionError) as caught:
        CodeVersion("nope", "2")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, BallastError)


# ------------------------------------------------------------------ shadow (ShadowSpec) -----------


def test_a_shadow_spec_keeps_what_it_was_given_and_has_defaults() -> None:
    assert ShadowSpec() == ShadowSpec(3, 0.0, ())
    spec = ShadowSpec(epochs=MAX_SHADOW_EPOCHS, tolerance=1.0, fields=("user", "_n2", "A" * 100))
    assert (spec.epochs, spec.tolerance, spec.fields) == (MAX_SHADOW_EPOCHS, 1.0, ("user", "_n2", "A" * 100))
    assert ShadowSpec(1, 0.0).epochs == 1 and ShadowSpec(2, 0.05).tolerance == 0.05
    assert len(ShadowSpec(fields=tuple(f"f{i}" for i in range(50))).fields) == 50


@pytest.mark.parametrize("epochs", [0, -1, MAX_SHADOW_EPOCHS + 1, True, False, 2.0, "3", None])
def test_shadow_epochs_must_be_an_integer_in_range(epochs: Any) -> None:
    with pytest.raises(CodeVersionError, match=f"shadow.epochs must be an integer in 1..{MAX_SHADOW_EPOCHS}"):
        ShadowSpec(epochs=epochs)


@pytest.mark.parametrize("tolerance", [-0.01, 1.01, 2, -1, True, False, "0.1", None, float("nan"), float("inf")])
def test_shadow_tolerance_must_be_a_share(tolerance: Any) -> None:
    with pytest.raises(CodeVersionError, match="shadow.tolerance must be a share in 0..1"):
        ShadowSpec(tolerance=tolerance)


@pytest.mark.parametrize("fields", [
    ("user name",), ("1st",), ("",), ("a-b",), ("a.b",), ("ok", 7), ("x\n",), ("A" * 101,),
    tuple(f"f{i}" for i in range(51)),
])
def test_shadow_fields_must_be_at_most_50_field_names(fields: tuple) -> None:
    with pytest.raises(CodeVersionError, match="shadow.fields must be at most 50 output field names"):
        ShadowSpec(fields=fields)


def test_a_shadow_spec_from_json_takes_0_and_1_as_shares() -> None:
    zero = ShadowSpec.from_dict({"epochs": 2, "tolerance": 0})
    one = ShadowSpec.from_dict({"tolerance": 1})
    assert zero == ShadowSpec(2, 0.0) and isinstance(zero.tolerance, float)
    assert one == ShadowSpec(3, 1.0) and isinstance(one.tolerance, float)
    assert ShadowSpec.from_dict({}) == ShadowSpec(), "every field has its default"
    assert ShadowSpec.from_dict({"fields": ["a", "b"]}).fields == ("a", "b")


@pytest.mark.parametrize("doc, why", [
    ([3, 0.1], "code.shadow must be an object with epochs, tolerance and fields"),
    (None, "code.shadow must be an object"),
    ("3", "code.shadow must be an object"),
    ({"epochs": 3, "rounds": 2}, "code.shadow must be an object with epochs, tolerance and fields"),
    ({"fields": "user"}, "shadow.fields must be a list of names, got str"),
    ({"fields": {"user": 1}}, "shadow.fields must be a list of names, got dict"),
    ({"fields": [["user"]]}, "shadow.fields must be at most 50 output field names"),
    ({"epochs": 0}, "shadow.epochs must be"),
    ({"epochs": 3.0}, "shadow.epochs must be"),
    ({"epochs": True}, "shadow.epochs must be"),
    ({"tolerance": True}, "shadow.tolerance must be"),
    ({"tolerance": 2}, "shadow.tolerance must be"),
    ({"tolerance": "0"}, "shadow.tolerance must be"),
])
def test_a_shadow_object_is_parsed_strictly(doc: Any, why: str) -> None:
    with pytest.raises(CodeVersionError, match=why):
        ShadowSpec.from_dict(doc)
    with pytest.raises(CodeVersionError, match=why):
        CodeVersion.from_dict({"ref": "pkg.mod:Counter", "version": "2", "shadow": doc})


def test_a_code_version_with_a_shadow_round_trips_and_its_entry_drops_it() -> None:
    spec = ShadowSpec(epochs=5, tolerance=0.25, fields=("user", "count"))
    c = CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2.zip",), shadow=spec)
    assert c.to_dict() == {"ref": "pkg.mod:Counter", "version": "2", "py_files": ["/tmp/v2.zip"],
                           "shadow": {"epochs": 5, "tolerance": 0.25, "fields": ["user", "count"]}}
    assert CodeVersion.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    whole = CodeVersion("pkg.mod:Counter", "2", shadow=ShadowSpec(epochs=1))
    assert whole.to_dict() == {"ref": "pkg.mod:Counter", "version": "2",
                               "shadow": {"epochs": 1, "tolerance": 0.0}}, "no fields key: whole rows"
    assert CodeVersion.from_dict(whole.to_dict()) == whole
    assert CodeVersion.from_dict({"ref": "m:C", "version": "2", "shadow": {"tolerance": 0}}).shadow == ShadowSpec()
    assert c.entry == CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2.zip",)) and c.entry.shadow is None
    assert "shadow" not in c.entry.to_dict() and c.shadow == spec, "the entry is a new version, c keeps its spec"
    bare = CodeVersion("pkg.mod:Counter", "2")
    assert bare.shadow is None and bare.entry == bare and "shadow" not in bare.to_dict()
