"""Baseline schema version 4 (issue 17, items 5-6): each op's ``bound`` and ``dtype``, an entry's
``auto_cast`` and the variant that names it; older files read without a false regression."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate.baseline import (SCHEMA_VERSION, BaselineStore, parse_baseline_text,
                                             render_baseline)
from pytest_neuronprof.gate.compare import GatePolicy, Status, compare
from pytest_neuronprof.gate.decode import Decoder
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary, summarize, variant
from pytest_neuronprof.jsontext import encode_at

NODE = "tests/test_mlp.py::test_forward"


def make_summary(auto_cast: str = "none", execution: str = "graph") -> ProfileSummary:
    mm = OpSummary(2, 7.8036, "Tensor", 67108864, 1378816, 0.741, "up", bound="TensorE",
                   dtype="bfloat16")
    gelu = OpSummary(1, 2.7232, "Scalar", 0, 262144, 0.259, "MLP", bound="fixed cost",
                     dtype="float32")
    return ProfileSummary("simulated", "trn2", "3", "2.13", 10.5268,
                          {"aten::addmm": mm, "aten::gelu": gelu}, execution=execution,
                          auto_cast=auto_cast)


def test_schema_4_writes_bound_and_dtype_and_reads_them_back_byte_for_byte(tmp_path):
    summary = make_summary(auto_cast="matmult")
    text = render_baseline({NODE: {summary.variant: summary}})
    doc = json.loads(text)
    assert doc["schema_version"] == SCHEMA_VERSION >= 4
    entry = doc["tests"][NODE]["simulated:trn2:graph:auto-cast=matmult"]
    assert (entry["execution"], entry["auto_cast"]) == ("graph", "matmult")
    assert {name: (op["bound"], op["dtype"]) for name, op in entry["ops"].items()} == {
        "aten::addmm": ("TensorE", "bfloat16"), "aten::gelu": ("fixed cost", "float32")}
    parsed = parse_baseline_text(tmp_path / "b.json", text)
    back = parsed[NODE]["simulated:trn2:graph:auto-cast=matmult"]
    assert back == summary and back.ops["aten::gelu"].bound == "fixed cost"
    assert render_baseline(parsed) == text  # stable from then on


@pytest.mark.parametrize("op", [
    OpSummary(1, 1.5, "Tensor", 2, 3, 1.0, "m", bound="HBM", dtype="float8_e4m3fn"),
    OpSummary(1, 1.5, "Tensor", 2, 3, 1.0, "m"),  # migrated from schema 3: unknown
    OpSummary(1, 1.5, "Tensor", 2, 3, 1.0, "m", bound="fixed cost", dtype="caf\u00e9\"\\"),
    OpSummary(3, 0.0, "Vector", 0, 0, 0.0, "", bound="VectorE", dtype="", recomputed=1, uncosted=True),
])
def test_rendered_op_is_what_to_json_and_dumps_write(op):
    for pad in ("", "      "):
        assert op.rendered(pad) == encode_at(op.to_json(), pad)


def test_auto_cast_is_written_only_when_not_the_default():
    default = make_summary()
    assert default.variant == "simulated:trn2:graph"
    assert "auto_cast" not in default.to_json()
    assert make_summary(auto_cast="all").to_json()["auto_cast"] == "all"


def test_variant_names_auto_cast_after_the_execution():
    assert variant("simulated", "trn2") == "simulated:trn2"
    assert variant("simulated", "trn2", "graph") == "simulated:trn2:graph"
    assert variant("simulated", "trn2", "graph", "none") == "simulated:trn2:graph"
    assert variant("simulated", "trn2", "graph", "matmult") == "simulated:trn2:graph:auto-cast=matmult"
    assert variant("simulated", "trn1", "eager", "all") == "simulated:trn1:auto-cast=all"
    assert make_summary(auto_cast="all", execution="eager").variant == "simulated:trn2:auto-cast=all"


def test_summarize_takes_auto_cast_from_the_result():
    record = SimpleNamespace(name="aten::mm", device_time_us=2.0, module_path="", engine="Tensor",
                             flops=8, bytes_read=4, bytes_written=4, phase="forward", costed=True,
                             bound="TensorE", input_dtypes=["float32", "float32"])
    result = SimpleNamespace(backend="simulated", hardware="trn2", records=[record],
                             execution="graph", auto_cast="matmult")
    summary = summarize(result, "3", "2.13.0")
    assert summary.auto_cast == "matmult" and summary.variant.endswith(":graph:auto-cast=matmult")
    del result.auto_cast  # a result made before auto-cast existed: the compiler's default
    assert summarize(result, "3", "2.13.0").variant == "simulated:trn2:graph"


def test_a_bad_auto_cast_in_a_file_is_named(tmp_path):
    doc = json.loads(render_baseline({NODE: {"simulated:trn2": make_summary(execution="eager")}}))
    doc["tests"][NODE]["simulated:trn2"]["auto_cast"] = "bf16"
    with pytest.raises(BaselineError, match=r"auto_cast is 'bf16', expected one of none, matmult, all"):
        parse_baseline_text(tmp_path / "b.json", json.dumps(doc))


@pytest.mark.parametrize("key,value", [("bound", 3), ("dtype", None), ("bound", ["TensorE"])])
def test_a_bad_bound_or_dtype_is_named(tmp_path, key, value):
    doc = json.loads(render_baseline({NODE: {"simulated:trn2": make_summary(execution="eager")}}))
    doc["tests"][NODE]["simulated:trn2"]["ops"]["aten::addmm"][key] = value
    with pytest.raises(BaselineError, match=rf"aten::addmm'\]\.{key} should be str"):
        parse_baseline_text(tmp_path / "b.json", json.dumps(doc))


# --- schema 3 files: read, gated, migrated -----------------------------------------------------------

V3 = {"schema_version": 3, "tests": {NODE: {"simulated:trn2": {
    "backend": "simulated", "hardware": "trn2", "cost_model_version": "3", "torch_version": "2.13",
    "total_device_time_us": 10.5268, "ops": {
        "aten::addmm": {"bytes": 1378816, "count": 2, "device_time_us": 7.8036, "engine": "Tensor",
                        "flops": 67108864, "modules": {"up": 7.8036}, "share": 0.741},
        "aten::gelu": {"bytes": 262144, "count": 1, "device_time_us": 2.7232, "engine": "Scalar",
                       "flops": 0, "modules": {"MLP": 2.7232}, "share": 0.259}}}}}}


def test_a_schema_3_file_reads_with_unknown_bound_and_gates_without_a_false_regression(tmp_path):
    path = tmp_path / "tests" / "test_mlp.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(V3, indent=2, sort_keys=True))
    store = BaselineStore(tmp_path)
    old = store.load(NODE, "simulated:trn2")
    assert old is not None
    assert {name: (op.bound, op.dtype) for name, op in old.ops.items()} == {
        "aten::addmm": ("", ""), "aten::gelu": ("", "")}
    current = make_summary(execution="eager")
    verdict = compare(old, current, GatePolicy())
    assert (verdict.status, verdict.regressions, verdict.improvements) == (Status.PASS, (), ())
    # Written again (another test recorded into the file): version 4, the unknowns kept unknown.
    store.save([("tests/test_mlp.py::test_other", current)])
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["tests"][NODE]["simulated:trn2"]["ops"]["aten::gelu"]["bound"] == ""
    assert doc["tests"]["tests/test_mlp.py::test_other"]["simulated:trn2"]["ops"]["aten::gelu"]["bound"] == "fixed cost"
    assert BaselineStore(tmp_path).load(NODE, "simulated:trn2") == old


def test_each_op_of_a_file_may_have_bound_and_dtype_or_not(tmp_path):
    """The test-by-test reader and the whole-file reader agree on ops with and without them."""
    doc = json.loads(json.dumps(V3))
    doc["schema_version"] = 4
    doc["tests"][NODE]["simulated:trn2"]["ops"]["aten::addmm"].update(bound="TensorE", dtype="bfloat16")
    streamed = parse_baseline_text(Path("b.json"), json.dumps(doc))
    spaced = parse_baseline_text(Path("b.json"), json.dumps(doc, indent=3) + "  ")
    whole = {name: ProfileSummary.from_json(entry, Decoder(AssertionError), "x", policy_known=False)
             for name, entry in doc["tests"][NODE].items()}
    assert streamed[NODE] == spaced[NODE] == whole
    ops = whole["simulated:trn2"].ops
    assert (ops["aten::addmm"].bound, ops["aten::addmm"].dtype, ops["aten::gelu"].bound) == ("TensorE", "bfloat16", "")


def test_a_bound_the_cost_model_does_not_name_is_a_broken_file():
    """A baseline entry's bound is one of vocabulary.BOUNDS, or left out (files before schema 4):
    anything else is named, with the choices, by both the fast and the checked reader."""
    import json as _json
    from pathlib import Path

    from pytest_neuronprof.errors import BaselineError
    from pytest_neuronprof.gate.baseline import parse_baseline_text

    doc = {"schema_version": 4, "tests": {"t.py::t": {"simulated:trn2": {
        "backend": "simulated", "hardware": "trn2", "cost_model_version": "3", "torch_version": "2.13",
        "total_device_time_us": 1.0, "ops": {"aten::mm": {
            "bound": "compute", "bytes": 1, "count": 1, "device_time_us": 1.0, "dtype": "float32",
            "engine": "Tensor", "flops": 2, "modules": {"": 1.0}, "share": 1.0}}}}}}
    with pytest.raises(BaselineError, match=r"bound is 'compute', expected one of TensorE, .*collective, none"):
        parse_baseline_text(Path("b.json"), _json.dumps(doc))
    doc["tests"]["t.py::t"]["simulated:trn2"]["ops"]["aten::mm"]["bound"] = "TensorE"
    parse_baseline_text(Path("b.json"), _json.dumps(doc))
