"""BaselineStore (baseline.py): validation of broken files, deterministic rendering, locked merges."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from pytest_neuronprof.files import OutputError, atomic_write_text, show_path
from pytest_neuronprof.gate.baseline import (SCHEMA_VERSION, BaselineStore, baseline_path,
                                             lock_path, parse_baseline_text, render_baseline)
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

NODE = "tests/test_mlp.py::test_forward"


def make_summary(scale: float = 1.0, hardware: str = "trn2") -> ProfileSummary:
    mm = OpSummary(2, 7.8036 * scale, "Tensor", 67108864, 1378816, 0.616654, "up")
    gelu = OpSummary(1, 2.7232, "Scalar", 0, 262144, 0.215188, "MLP")
    return ProfileSummary("simulated", hardware, "1", "2.13", 7.8036 * scale + 2.7232,
                          {"aten::gelu": gelu, "aten::addmm": mm})


def good_document() -> dict:
    return json.loads(render_baseline({NODE: {"simulated:trn2": make_summary()}}))


def entry(doc: dict) -> dict:
    return doc["tests"][NODE]["simulated:trn2"]


# --- paths --------------------------------------------------------------------------------------

def test_one_file_per_module_mirroring_its_path(tmp_path):
    assert baseline_path(tmp_path, NODE) == tmp_path / "tests" / "test_mlp.json"
    assert baseline_path(tmp_path, "test_a.py::TestX::test_y[1-2]") == tmp_path / "test_a.json"
    assert baseline_path(tmp_path, "sub/dir/test_b.py") == tmp_path / "sub" / "dir" / "test_b.json"
    # node ids that climb out of the rootdir still land inside the baseline directory
    assert baseline_path(tmp_path, "../other/test_c.py::test") == tmp_path / "other" / "test_c.json"


def test_lock_lives_outside_the_baseline_directory(tmp_path):
    path = tmp_path / "baselines" / "test_a.json"
    lock = lock_path(path)
    assert lock == lock_path(path)  # stable, so every process agrees on it
    assert tmp_path not in lock.parents
    assert lock_path(tmp_path / "baselines" / "test_b.json") != lock


# --- broken files ---------------------------------------------------------------------------------

def _mutate(fn):
    doc = good_document()
    fn(doc)
    return json.dumps(doc)


BROKEN = {
    "not-json": ("this is not json {", "not valid JSON"),
    "truncated": (render_baseline({NODE: {"simulated:trn2": make_summary()}})[:150], "not valid JSON"),
    "empty": ("", "the file is empty"),
    "whitespace": ("  \n\n", "the file is empty"),
    "nan": (render_baseline({NODE: {"simulated:trn2": make_summary()}})
            .replace('"device_time_us": 2.7232', '"device_time_us": NaN'), "NaN is not a valid number"),
    "infinity": (render_baseline({NODE: {"simulated:trn2": make_summary()}})
                 .replace('"total_device_time_us": 10.5268', '"total_device_time_us": Infinity'),
                 "Infinity is not a valid number"),
    "overflow": (render_baseline({NODE: {"simulated:trn2": make_summary()}})
                 .replace('"total_device_time_us": 10.5268', '"total_device_time_us": 1e999'),
                 "total_device_time_us is inf"),
    "top-level-list": ("[1, 2]", "the top level should be dict, got list"),
    "tests-missing": (json.dumps({"schema_version": 1}), "tests should be dict, got NoneType"),
    "variants-list": (json.dumps({"schema_version": 1, "tests": {NODE: []}}), "should be dict, got list"),
    "count-string": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].update(count="1")),
                     "['aten::gelu'].count should be int or float, got str"),
    "count-fraction": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].update(count=1.5)),
                       "count should be a whole number, got 1.5"),
    "count-bool": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].update(count=True)),
                   "count should be int or float, got bool"),
    "negative-time": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].update(device_time_us=-1.0)),
                      "device_time_us is negative"),
    "engine-number": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].update(engine=3)),
                      "engine should be str, got int"),
    "op-missing-field": (_mutate(lambda d: entry(d)["ops"]["aten::gelu"].pop("modules")),
                         "modules should be dict, got NoneType"),
    "ops-list": (_mutate(lambda d: entry(d).update(ops=[])), ".ops should be dict, got list"),
    "hardware-missing": (_mutate(lambda d: entry(d).pop("hardware")), "hardware should be str"),
    "total-string": (_mutate(lambda d: entry(d).update(total_device_time_us="10")),
                     "total_device_time_us should be int or float, got str"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_file_names_the_file_and_the_fix(tmp_path, kind):
    text, problem = BROKEN[kind]
    path = tmp_path / "baselines" / "tests" / "test_mlp.json"
    with pytest.raises(BaselineError) as info:
        parse_baseline_text(path, text)
    message = str(info.value)
    assert message.startswith(f"broken baseline file {path}: ")
    assert problem in message
    assert f"`git checkout -- {path}`" in message
    assert "re-record with `pytest --neuron-baseline`" in message


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1", True, None])
def test_unknown_schema_version(tmp_path, version):
    doc = good_document()
    if version is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = version
    path = tmp_path / "test_mlp.json"
    with pytest.raises(BaselineError) as info:
        parse_baseline_text(path, json.dumps(doc))
    message = str(info.value)
    assert f"baseline file {path} has schema_version {version!r}" in message
    assert f"reads schema_version {SCHEMA_VERSION}" in message
    assert "upgrade pytest-neuronprof" in message and "git checkout --" in message


def test_non_utf8_file_and_directory_in_place_of_a_file(tmp_path):
    path = tmp_path / "test_mlp.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BaselineError, match="not UTF-8 text"):
        BaselineStore(tmp_path).read_file(path)
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(BaselineError, match="is a directory"):
        BaselineStore(tmp_path).read_file(folder)


def test_validate_all_finds_a_broken_file_anywhere_below(tmp_path):
    store = BaselineStore(tmp_path)
    assert store.validate_all() == 0
    store.save([(NODE, make_summary()), ("test_top.py::test", make_summary())])
    assert BaselineStore(tmp_path).validate_all() == 2
    broken = tmp_path / "deep" / "er" / "test_z.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{")
    with pytest.raises(BaselineError, match="test_z.json"):
        BaselineStore(tmp_path).validate_all()
    assert BaselineStore(tmp_path / "missing").validate_all() == 0


def test_save_never_overwrites_a_broken_file(tmp_path):
    store = BaselineStore(tmp_path)
    path = store.path_for(NODE)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema_version": 1, "tests": ')
    with pytest.raises(BaselineError, match="not valid JSON"):
        store.save([(NODE, make_summary())])
    assert path.read_bytes() == b'{"schema_version": 1, "tests": '
    assert sorted(p.name for p in path.parent.iterdir()) == ["test_mlp.json"]


# --- older schema versions -----------------------------------------------------------------------

V1 = {"schema_version": 1, "tests": {NODE: {"simulated:trn2": {
    "backend": "simulated", "hardware": "trn2", "cost_model_version": "1", "torch_version": "2.13",
    "total_device_time_us": 10.0, "ops": {"aten::addmm": {
        "bytes": 1, "count": 2, "device_time_us": 10.0, "engine": "Tensor", "flops": 3,
        "module": "up", "share": 1.0}}}}}}


def test_version_1_files_are_read_and_rewritten_as_the_current_version(tmp_path):
    """Item 13: files keep working; re-recording writes the breakdown (one module: all of it)."""
    path = tmp_path / "tests" / "test_mlp.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(V1))
    store = BaselineStore(tmp_path)
    op = store.load(NODE, "simulated:trn2").ops["aten::addmm"]
    assert (op.module, dict(op.breakdown())) == ("up", {"up": 10.0})
    text = render_baseline(store.read_file(path))
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION == 7
    # its marker's policy stays unknown (null), not "none": it was recorded before schema 7
    assert json.loads(text)["tests"][NODE]["simulated:trn2"]["policy"] is None
    assert json.loads(text)["tests"][NODE]["simulated:trn2"]["ops"]["aten::addmm"]["modules"] == {"up": 10.0}
    assert render_baseline(parse_baseline_text(path, text)) == text  # stable from then on


@pytest.mark.parametrize("version,mutate,problem", [
    (1, lambda op: op.update(modules={"up": 1.0}), "unknown key(s) 'modules'"),
    (3, lambda op: op.update(module="up"), "unknown key(s) 'module'"),
])
def test_each_version_has_its_own_op_form(tmp_path, version, mutate, problem):
    doc = json.loads(json.dumps(V1)) if version == 1 else good_document()
    op = next(iter(doc["tests"][NODE]["simulated:trn2"]["ops"].values()))
    mutate(op)
    with pytest.raises(BaselineError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_baseline_text(tmp_path / "test_mlp.json", json.dumps(doc))


# --- rendering ------------------------------------------------------------------------------------

def test_render_is_deterministic_sorted_and_rounded():
    a = make_summary()
    b = make_summary(hardware="trn1")
    one = render_baseline({NODE: {"simulated:trn2": a, "simulated:trn1": b}, "tests/test_mlp.py::a": {"simulated:trn2": a}})
    two = render_baseline({"tests/test_mlp.py::a": {"simulated:trn2": a}, NODE: {"simulated:trn1": b, "simulated:trn2": a}})
    assert one == two
    assert one.endswith("}\n")
    doc = json.loads(one)
    assert list(doc) == ["schema_version", "tests"]
    assert doc["schema_version"] == 7  # 7: the marker's policy (issue 34), a collective's ranks, link bytes, algorithm (issue 37); 6: reasons bound to numbers (issue 26); 5: memory (issue 18); each op's bound and dtype (issue 17); 3: time per module
    assert list(doc["tests"]) == ["tests/test_mlp.py::a", NODE]
    assert list(doc["tests"][NODE]) == ["simulated:trn1", "simulated:trn2"]
    assert list(doc["tests"][NODE]["simulated:trn2"]["ops"]) == ["aten::addmm", "aten::gelu"]
    assert list(doc["tests"][NODE]["simulated:trn2"]) == sorted(doc["tests"][NODE]["simulated:trn2"])
    # fixed number formatting: 4 decimals of a microsecond, 6 of a share
    odd = ProfileSummary("simulated", "trn2", "1", "2.13", 1 / 3,
                         {"aten::mm": OpSummary(1, 1 / 3, "Tensor", 1, 2, 1 / 7, "")})
    text = render_baseline({NODE: {"simulated:trn2": odd}})
    assert '"device_time_us": 0.3333,' in text
    assert '"total_device_time_us": 0.3333\n' in text
    assert '"share": 0.142857\n' in text
    assert "time" not in text.replace("device_time_us", "")  # no timestamps


def test_render_parse_round_trip(tmp_path):
    tests = {NODE: {"simulated:trn2": make_summary(), "simulated:trn1": make_summary(hardware="trn1")}}
    text = render_baseline(tests)
    parsed = parse_baseline_text(tmp_path / "x.json", text)
    assert parsed == tests
    assert render_baseline(parsed) == text


def test_round_trip_of_unrounded_numbers_is_stable(tmp_path):
    odd = ProfileSummary("simulated", "trn2", "1", "2.13", 2 / 3,
                         {"aten::mm": OpSummary(1, 2 / 3, "Tensor", 1, 2, 1.0, "")})
    text = render_baseline({NODE: {"simulated:trn2": odd}})
    assert render_baseline(parse_baseline_text(tmp_path / "x.json", text)) == text


# --- saving -------------------------------------------------------------------------------------------

def test_save_creates_merges_and_reports_changed_files(tmp_path):
    store = BaselineStore(tmp_path / "baselines")
    path = store.path_for(NODE)
    assert store.save([(NODE, make_summary())]) == [path]
    first = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    # the same numbers again: nothing written
    assert BaselineStore(tmp_path / "baselines").save([(NODE, make_summary())]) == []
    assert path.read_bytes() == first and path.stat().st_mtime_ns == mtime
    # another hardware gets its own entry; the first is left alone
    assert store.save([(NODE, make_summary(2.0, hardware="trn1"))]) == [path]
    doc = json.loads(path.read_text())
    assert sorted(doc["tests"][NODE]) == ["simulated:trn1", "simulated:trn2"]
    assert doc["tests"][NODE]["simulated:trn2"] == entry(json.loads(first))
    # another test of the same module: merged into the same file
    other = "tests/test_mlp.py::test_backward"
    store.save([(other, make_summary(3.0))])
    doc = json.loads(path.read_text())
    assert sorted(doc["tests"]) == [other, NODE]
    stored = parse_baseline_text(path, path.read_text())[other]["simulated:trn2"]
    assert BaselineStore(tmp_path / "baselines").load(other, "simulated:trn2") == stored
    assert store.load(other, "simulated:trn2").to_json() == stored.to_json()
    assert store.load(NODE, "simulated:trn3") is None
    assert store.load("tests/test_none.py::test", "simulated:trn2") is None
    assert sorted(p.name for p in path.parent.iterdir()) == ["test_mlp.json"]  # no temp or lock files


def test_save_re_reads_the_file_under_the_lock(tmp_path):
    """A store that read the file earlier must not drop entries another writer added since."""
    early = BaselineStore(tmp_path)
    assert early.load(NODE, "simulated:trn2") is None  # caches an empty file
    BaselineStore(tmp_path).save([("tests/test_mlp.py::test_other", make_summary(2.0))])
    early.save([(NODE, make_summary())])
    doc = json.loads(early.path_for(NODE).read_text())
    assert sorted(doc["tests"]) == [NODE, "tests/test_mlp.py::test_other"]


def _writer(directory: str, tag: str, count: int, start) -> None:
    start.wait(30)
    for i in range(count):
        summary = make_summary(1.0 + i / 100)
        BaselineStore(directory).save([(f"tests/test_mlp.py::test_{tag}_{i}", summary)])


def test_concurrent_writers_in_processes_lose_no_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    per_process = 12
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), tag, per_process, start))
             for tag in ("a", "b", "c")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    path = baseline_path(tmp_path, NODE)
    tests = parse_baseline_text(path, path.read_text())
    assert sorted(tests) == sorted(f"tests/test_mlp.py::test_{tag}_{i}"
                                   for tag in "abc" for i in range(per_process))
    assert [p.name for p in path.parent.iterdir()] == ["test_mlp.json"]


def test_atomic_write_keeps_the_old_file_when_replace_fails(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    atomic_write_text(path, "old\n")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # the temp file was removed


def test_save_reports_an_unwritable_directory(tmp_path):
    blocker = tmp_path / "baselines"
    blocker.write_text("a file where the directory should be")
    with pytest.raises(BaselineError, match="cannot create baseline directory"):
        BaselineStore(blocker).save([(NODE, make_summary())])
    assert Path(blocker).read_text() == "a file where the directory should be"
