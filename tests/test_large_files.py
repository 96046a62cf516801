"""Large baseline files stay fast to read, write, show, compare and merge (benchmarks/
large_baselines.py measures a million ops): the fast paths write exactly what the slow ones
wrote, and the slow machinery they replace is not used."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from pytest_neuronprof import jsontext
from pytest_neuronprof.cli import inputs, main
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate import baseline
from pytest_neuronprof.gate.baseline import BaselineStore, parse_baseline_text, render_baseline
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import tables

NODE = "tests/test_big.py::test_case"

# --- jsontext.dumps: json.dumps(indent=2, sort_keys=True)'s bytes -----------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.text(), st.sampled_from(["", "é", "\u2028", "\x00", '"\\', "::x"]),
    st.integers(), st.integers(min_value=2 ** 63, max_value=10 ** 400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e16, 1e-5, 5e-324, 1.7976931348623157e308, 0.1]))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4),
                            st.tuples(inner, inner)),
    max_leaves=25)


def _reference(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_dumps_writes_what_json_dumps_writes(value):
    assert jsontext.dumps(value) == _reference(value)


@pytest.mark.parametrize("value", [float("nan"), {"a": [float("inf")]}, {"a": {1, 2}},
                                   {"k": {1: "int key", "2": 2}}])
def test_dumps_fails_or_falls_back_as_json_does(value):
    try:
        expected: object = _reference(value)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc), match=str(exc)):
            jsontext.dumps(value)
    else:
        assert jsontext.dumps(value) == expected


def test_deferred_values_are_written_as_what_they_make():
    made = []

    def make() -> dict:
        made.append(1)
        return {"b": [1, 2.5], "a": "x"}

    value = {"k": jsontext.Deferred(make), "list": [jsontext.Deferred(lambda: None)]}
    assert jsontext.dumps(value) == _reference({"k": make(), "list": [None]})
    assert len(made) == 2  # once by dumps, once above


def test_writing_a_baseline_keeps_no_documents_of_its_summaries():
    """A million ops' dicts are 700 MB: each summary's document is dropped once written."""
    summary = big_summary(3)
    text = render_baseline({NODE: {"simulated:trn2": summary}})
    assert "_json" not in summary.__dict__
    assert text == render_baseline({NODE: {"simulated:trn2": summary}})
    summary.to_json()  # kept for xdist and the report once asked for: used, not rebuilt
    assert summary.to_json_once() is summary.to_json()


def test_dumps_leaves_the_collector_as_it_found_it():
    assert gc.isenabled()
    with pytest.raises(ValueError):
        jsontext.dumps({"a": float("nan")})
    assert gc.isenabled()
    gc.disable()
    try:
        jsontext.dumps({"a": 1})
        assert not gc.isenabled()
    finally:
        gc.enable()


def big_summary(ops: int = 50, engine_suffix: str = "") -> ProfileSummary:
    entries = {f"aten::op{i:03d}": OpSummary(i + 1, 1.5 * i + 0.25, "Vector" + engine_suffix, 10 ** 15 * i,
                                             3 * i, i / 1000, modules={f"layers.{i % 4}.mlp": 1.5 * i + 0.25})
               for i in range(ops)}
    return ProfileSummary("simulated", "trn2", "1", "2.13", sum(op.device_time_us for op in entries.values()),
                          entries)


def test_baselines_are_written_without_jsons_python_encoder(monkeypatch):
    """json.dumps with indent runs a Python generator per token (35 s for a million ops): the
    file is the same bytes without it."""
    tests = {NODE: {"simulated:trn2": big_summary()}}
    document = {"schema_version": baseline.SCHEMA_VERSION,
                "tests": {NODE: {"simulated:trn2": tests[NODE]["simulated:trn2"].to_json()}}}
    expected = _reference(document) + "\n"

    def refuse(*args, **kwargs):
        raise AssertionError("json's pure-Python encoder was used")

    monkeypatch.setattr(json.encoder, "_make_iterencode", refuse)
    assert render_baseline(tests) == expected


# --- reading: records, the collector, no second parse -------------------------------------------

def test_decoded_ops_are_slotted_and_share_their_engine_names(tmp_path):
    text = render_baseline({NODE: {"simulated:trn2": big_summary(3)}})
    ops = list(parse_baseline_text(tmp_path / "b.json", text)[NODE]["simulated:trn2"].ops.values())
    assert not hasattr(ops[0], "__dict__")  # a million ops: 90 bytes each saved
    assert ops[1].engine == ops[2].engine == "Vector"
    assert ops[1].engine is ops[2].engine  # one string, not one per op


def test_ops_all_in_one_module_keep_no_dict_of_their_own():
    """A dict per op was 40 % of a large baseline's memory; the breakdown is the same."""
    a = OpSummary(1, 2.5, "Vector", 0, 0, 0.5, modules={"layers.0.mlp": 2.5})
    b = OpSummary(1, 1.5, "Vector", 0, 0, 0.5, module="layers.1")
    split = OpSummary(1, 2.5, "Vector", 0, 0, 0.5, modules={"x": 2.0, "y": 0.5})
    assert a.modules is b.modules  # one shared empty mapping
    assert (a.module, dict(a.breakdown())) == ("layers.0.mlp", {"layers.0.mlp": 2.5})
    assert dict(b.breakdown()) == {"layers.1": 1.5}
    assert (split.module, dict(split.breakdown())) == ("x", {"x": 2.0, "y": 0.5})
    assert a == OpSummary(1, 2.5, "Vector", 0, 0, 0.5, module="layers.0.mlp")
    assert a.to_json()["modules"] == {"layers.0.mlp": 2.5}


def test_op_changes_builds_no_rows_for_unchanged_ops(monkeypatch):
    from pytest_neuronprof.gate import outcome as outcome_module
    from pytest_neuronprof.gate.compare import GatePolicy, compare

    old, new = big_summary(), big_summary()
    new.ops["aten::op007"] = OpSummary(8, 99.0, "Vector", 0, 0, 0.1, module="layers.3.mlp")
    result = outcome_module.TestOutcome(NODE, ("tests/test_big.py", 1), compare(old, new, GatePolicy()),
                                        new, old)
    built = []
    real = outcome_module.OpChange
    monkeypatch.setattr(outcome_module, "OpChange", lambda **kw: built.append(kw["op"]) or real(**kw))
    assert [c.op for c in outcome_module.op_changes(result)] == ["aten::op007"]
    assert built == ["aten::op007"]  # not one per op of the test


def test_decoding_runs_with_the_collector_paused_and_restores_it(tmp_path, monkeypatch):
    seen = []
    parse = baseline._parse_test

    def spy(*args):
        seen.append(gc.isenabled())
        return parse(*args)

    monkeypatch.setattr(baseline, "_parse_test", spy)
    text = render_baseline({NODE: {"simulated:trn2": big_summary(3)}})
    parse_baseline_text(tmp_path / "b.json", text)
    assert seen == [False]  # read test by test
    with pytest.raises(Exception):
        parse_baseline_text(tmp_path / "b.json", text.replace('"count": 1', '"count": -1'))
    assert seen == [False] * 3  # test by test, then (to say what is wrong) decoded whole
    assert gc.isenabled()


def test_save_does_not_parse_the_text_it_just_wrote(tmp_path, monkeypatch):
    calls = []
    parse = baseline._parse_text
    monkeypatch.setattr(baseline, "_parse_text", lambda path, *args: calls.append(path) or parse(path, *args))
    store = BaselineStore(tmp_path)
    summary = big_summary(3)
    [written] = store.save([(NODE, summary)])
    assert calls == []  # a new file: nothing to re-read, and what was written is not re-parsed
    # A later load still sees what the file says (rounded), read afresh.
    loaded = store.load(NODE, summary.variant)
    assert loaded is not None and loaded.to_json() == summary.to_json()
    assert calls == [written]


def test_merge_parses_each_file_once(tmp_path, monkeypatch, capsys):
    """merge validates OUT, then re-reads it under the lock: the same text is not parsed again
    (each parse of a file of a million ops took 10 s); nor is a file of OUT with an input's bytes."""
    text = render_baseline({NODE: {"simulated:trn2": big_summary(3)}})
    for side in ("in", "out"):
        (tmp_path / side / "tests").mkdir(parents=True)
        (tmp_path / side / "tests" / "test_big.json").write_text(text)
    calls = []
    parse = baseline._parse_text
    monkeypatch.setattr(baseline, "_parse_text", lambda path, *args: calls.append(path) or parse(path, *args))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "in")]) == 0
    assert "none (all unchanged)" in capsys.readouterr().out
    # OUT's file has the input's bytes and the input replaces all its entries: not parsed again.
    assert [p.parent.parent.name for p in calls] == ["in"]
    # Changed since it was read: parsed again, so no entry written meanwhile is lost.
    store = BaselineStore(tmp_path / "out")
    store.validate_all()
    other = "tests/test_big.py::test_other"
    (tmp_path / "out" / "tests" / "test_big.json").write_text(
        render_baseline({NODE: {"simulated:trn2": big_summary(3)}, other: {"simulated:trn2": big_summary(2)}}))
    store.save([(NODE, big_summary(4))])
    assert set(parse_baseline_text(tmp_path / "x.json",
                                   (tmp_path / "out" / "tests" / "test_big.json").read_text())) == {NODE, other}


# --- tables: tabulate's text without tabulate ----------------------------------------------------

_cells = st.one_of(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=8),
                   st.sampled_from(["True", "False", "None", "", "1.5", "-", "nan", "1e5", " a ", "|"]))


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(_cells, min_size=n, max_size=n), st.lists(st.lists(_cells, min_size=n, max_size=n), max_size=6))),
    st.sampled_from(["simple", "github"]))
def test_tables_are_what_tabulate_writes(headers_rows, fmt):
    headers, rows = headers_rows
    assert tables.grid(rows, headers, fmt) == tabulate(rows, headers=headers, tablefmt=fmt,
                                                        disable_numparse=True)


def test_wide_characters_still_go_to_tabulate(monkeypatch):
    calls = []
    monkeypatch.setattr(tables, "tabulate", lambda *a, **k: calls.append(a) or "tabulated")
    assert tables.grid([["数据", "x"]], ["op", "engine"], "simple") == "tabulated"
    assert tables.grid([["ab", "x"]], ["op", "engine"], "simple") != "tabulated"
    assert len(calls) == 1


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_show_of_a_large_table_does_not_call_tabulate(tmp_path, capsys, monkeypatch, fmt):
    """tabulate typed every cell: most of `neuronprof show`'s time on a large baseline."""
    path = tmp_path / "tests" / "test_big.json"
    path.parent.mkdir()
    path.write_text(render_baseline({NODE: {"simulated:trn2": big_summary()}}))
    # Every tabulate call types every cell here, whoever imported it.
    monkeypatch.setattr("tabulate._column_type", lambda *a, **k: pytest.fail("tabulate typed cells"))
    assert main(["show", str(tmp_path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "aten::op049" in out and "layers.1.mlp" in out


def test_the_benchmark_runs(tmp_path):
    """benchmarks/large_baselines.py at a tiny size: every command within its targets."""
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "large_baselines.py"
    result = subprocess.run([sys.executable, str(script), "--ops", "600", "--ops-per-test", "30",
                             "--files", "1", "--skip-pytest"], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if " CPU " in line]
    assert len(rows) == 7 and all(line.endswith("ok") or " ok (<=" in line for line in rows), result.stdout


# --- streaming: pieces written, compared and printed as they are made ---------------------------

@settings(max_examples=300, deadline=None)
@given(_values, st.integers(0, 5))
def test_iterdumps_joined_is_dumps(value, depth):
    assert "".join(jsontext.iterdumps(value, depth)) == _reference(value)


def test_iterdumps_makes_deferred_values_one_at_a_time_and_fails_as_dumps_does():
    live = []

    def make(i: int):
        def made() -> dict:
            assert not live, "made before the previous piece was written"
            live.append(i)
            return {"i": i}
        return made

    document = {"tests": {f"t{i}": {"v": jsontext.Deferred(make(i))} for i in range(3)}}
    pieces = []
    for piece in jsontext.iterdumps(document):
        pieces.append(piece)
        live.clear()
    assert "".join(pieces) == _reference({"tests": {f"t{i}": {"v": {"i": i}} for i in range(3)}})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        list(jsontext.iterdumps({"a": [1, {"b": float("nan")}]}))
    assert gc.isenabled()


class _Boom(Exception):
    pass


def test_atomic_write_of_pieces_leaves_the_old_file_when_a_piece_fails(tmp_path):
    from pytest_neuronprof.files import atomic_write_text

    path = tmp_path / "out.json"
    atomic_write_text(path, iter(["new ", "", "text\n"]))
    assert path.read_text() == "new text\n"

    def pieces():
        yield "half of "
        raise _Boom()

    with pytest.raises(_Boom):
        atomic_write_text(path, pieces())
    assert path.read_text() == "new text\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # the temp file was removed


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\n"), st.text(alphabet="ab\n"), st.lists(st.integers(0, 12), max_size=8))
def test_changed_pieces_tells_equal_texts_apart_and_keeps_the_new_one(old, new, cuts):
    bounds = sorted({min(c, len(new)) for c in cuts} | {0, len(new)})
    pieces = [new[a:b] for a, b in zip(bounds, bounds[1:])]
    result = baseline._changed_pieces(old, iter(pieces))
    if old == new:
        assert result is None
    else:
        assert result is not None and "".join(result) == new
    assert "".join(baseline._changed_pieces(None, iter(pieces))) == new


def test_changed_pieces_copies_a_long_matched_prefix_in_slices(monkeypatch):
    monkeypatch.setattr(baseline, "_SLICE_CHARS", 4)
    old = "0123456789abcdef"
    result = list(baseline._changed_pieces(old, iter(["0123456789", "abXdef"])))
    assert result == ["0123", "4567", "89", "abXdef"]
    assert list(baseline._changed_pieces(old + "tail", iter([old]))) == ["0123", "4567", "89ab", "cdef"]


def test_save_of_an_unchanged_file_writes_nothing(tmp_path, monkeypatch):
    store = BaselineStore(tmp_path)
    [path] = store.save([(NODE, big_summary(3))])
    before = path.read_bytes()
    monkeypatch.setattr(baseline, "atomic_write_text",
                        lambda *a: pytest.fail("an unchanged file was written"))
    assert BaselineStore(tmp_path).save([(NODE, big_summary(3))]) == []
    monkeypatch.undo()
    # One op changed, and a file with a stray blank line at its end (the same records): both
    # rewritten as the plugin writes them.
    assert BaselineStore(tmp_path).save([(NODE, big_summary(4))]) == [path]
    assert path.read_text() == render_baseline({NODE: {"simulated:trn2": big_summary(4)}})
    path.write_bytes(before + b"\n")
    assert BaselineStore(tmp_path).save([(NODE, big_summary(3))]) == [path]
    assert path.read_bytes() == before


_lines = st.lists(st.lists(st.sampled_from(["a", " ", ":", "::", "#", "##[", "[", "\x1b", "\u2028",
                                             "\t", "\r", "é"]), max_size=6).map("".join), max_size=8)


@settings(max_examples=300, deadline=None)
@given(_lines, st.integers(1, 12), st.lists(st.integers(0, 40), max_size=6))
def test_line_blocks_guard_as_the_whole_text_is_guarded(lines, size, cuts):
    from pytest_neuronprof.safetext import guard_lines, json_text, line_blocks

    text = "\n".join(lines)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    blocks = list(line_blocks((text[a:b] for a, b in zip(bounds, bounds[1:])), size))
    assert "".join(blocks) == text
    assert all(block.endswith("\n") for block in blocks[:-1])
    assert "".join(map(guard_lines, blocks)) == guard_lines(text)
    assert "".join(map(json_text, blocks)) == json_text(text)


@pytest.mark.parametrize("text", ["", "x", "x\n", "a\n::b\n##[c", "\n\n", "::x\n\x1b"])
def test_printing_pieces_prints_what_printing_the_text_prints(text, capsys, monkeypatch):
    from pytest_neuronprof import safetext
    from pytest_neuronprof.cli import commands

    commands._print(text)
    whole = capsys.readouterr().out
    monkeypatch.setattr(commands, "line_blocks", lambda pieces: safetext.line_blocks(pieces, 2))
    commands._print(iter(list(text)))
    assert capsys.readouterr().out == whole


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_show_and_compare_of_a_file_print_what_they_printed(tmp_path, capsys, fmt):
    """The JSON documents are printed in pieces: the same bytes as the document printed whole."""
    from pytest_neuronprof.cli.inputs import load
    from pytest_neuronprof.safetext import guard_lines, json_text

    path = tmp_path / "tests" / "test_big.json"
    path.parent.mkdir()
    path.write_text(render_baseline({NODE: {"simulated:trn2": big_summary(5)},
                                     "tests/test_big.py::test_##[x]": {"simulated:trn2": big_summary(2)}}))
    assert main(["show", str(path), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        loaded = load(path)
        document = {"kind": loaded.kind, "path": str(path), "tests": {
            nodeid: {variant: e.summary.to_json() for variant, e in variants.items()}
            for nodeid, variants in loaded.entries.items()}}
        assert out == guard_lines(json_text(_reference(document)) + "\n")
        assert "##[" not in out and "##\\u005b" in out
    assert main(["compare", str(path), str(path), "--format", fmt]) == 0
    if fmt == "json":
        document = json.loads(capsys.readouterr().out)
        assert document["exit_code"] == 0 and len(document["tests"]) == 2


# --- reading: test by test, or whole when that declines ------------------------------------------

def _whole(path: Path, text: str):
    """The whole-text path: its records, or its error."""
    try:
        with jsontext.gc_paused():
            parsed = baseline._parse_document(path, baseline._load(path, text))
    except Exception as exc:
        return type(exc), str(exc)
    return {n: {v: s.to_json() for v, s in vs.items()} for n, vs in parsed.items()}


_EDITS = [("", ""), ('"count": 1', '"count": -1'), ('"count": 1', '"count": NaN'),
          ('"schema_version": 7', '"schema_version": 2'), ('"schema_version": 7', '"schema_version": 9'),
          ('"schema_version": 7', '"schema_version": 3'), ('"bound"', '"bound": 1, "bound"'),
          ('{\n  "schema_version": 7,', '{\n  "extra": 1, "schema_version": 7,'),
          ('"tests": {', '"tests": {"tests/test_big.py::test_case": {},'),
          ('"tests": {', '"tests": {"/abs.py::t": {},'), ("}\n", "} x\n"), ("}\n", "}"),
          ('"share"', '"shares"'), ('"engine"', '"engine": "x", "engine"'),
          ('"tests": {\n', '"tests": {\n    "tests/test_big.py::test_a": [],\n'),
          ('"tests/test_big.py::test_case"', '"tests/test_big.py::test_\\u0000"'),
          ("{\n", "\ufeff{\n"), ("{\n", " \t\r\n{\n"), ('{\n  "schema_version": 7,\n  "tests": {', '{"tests": {'),
          ('"tests": {', '"tests": 1, "x": {')]


@pytest.mark.parametrize("edit", _EDITS, ids=range(len(_EDITS)))
def test_reading_test_by_test_gives_what_reading_whole_gives(tmp_path, edit):
    path = tmp_path / "b.json"
    text = render_baseline({NODE: {"simulated:trn2": big_summary(3)},
                            "tests/test_big.py::test_b": {"simulated:trn2": big_summary(2)}})
    text = text.replace(*edit, 1)
    expected = _whole(path, text)
    try:
        got = {n: {v: s.to_json() for v, s in vs.items()}
               for n, vs in parse_baseline_text(path, text).items()}
    except Exception as exc:
        got = (type(exc), str(exc))
    assert got == expected
    if edit == ("", ""):
        assert baseline.parse_streamed(path, text) is not None  # the file as written: streamed


def test_read_regular_bytes_reads_past_a_size_that_lies(tmp_path, monkeypatch):
    path = tmp_path / "b.json"
    path.write_bytes(b"x" * 5000)
    real = baseline.os.fstat

    class Small:
        def __init__(self, info):
            self.st_mode, self.st_size = info.st_mode, 10

    monkeypatch.setattr(baseline.os, "fstat", lambda fd: Small(real(fd)))
    fail = ValueError
    assert bytes(baseline.read_regular_bytes(path, 10_000, fail, "--max-size")) == b"x" * 5000
    with pytest.raises(ValueError, match="larger than the limit"):
        baseline.read_regular_bytes(path, 4999, fail, "--max-size")
    assert bytes(baseline.read_regular_bytes(path, 5000, fail, "--max-size")) == b"x" * 5000


def test_merge_keeps_no_copy_of_the_entries_it_replaces_and_loses_none_it_keeps(tmp_path, monkeypatch, capsys):
    other = "tests/test_big.py::test_other"
    old, new = big_summary(3), big_summary(4)
    (tmp_path / "in" / "tests").mkdir(parents=True)
    (tmp_path / "in" / "tests" / "test_big.json").write_text(render_baseline({NODE: {"simulated:trn2": new}}))
    BaselineStore(tmp_path / "out").save([(NODE, old), (other, big_summary(2))])
    calls = []
    parse = baseline._parse_text
    monkeypatch.setattr(baseline, "_parse_text", lambda path, *args: calls.append(path) or parse(path, *args))
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "in")]) == 0
    assert len(calls) == 2  # each file once: OUT's kept entry comes from its validation
    out = tmp_path / "out" / "tests" / "test_big.json"
    assert out.read_text() == render_baseline({NODE: {"simulated:trn2": new},
                                               other: {"simulated:trn2": big_summary(2)}})
    # A store that validated with entries replaced still loads every entry, read afresh.
    store = BaselineStore(tmp_path / "out")
    store.validate_all(replaced={(NODE, "simulated:trn2")})
    loaded = store.load(NODE, "simulated:trn2")
    assert loaded is not None and loaded.to_json() == new.to_json()
    # A save that does not write the replaced entries parses the file again: nothing is lost.
    store = BaselineStore(tmp_path / "out")
    store.validate_all(replaced={(NODE, "simulated:trn2")})
    store.save([(other, big_summary(5))])
    assert set(parse_baseline_text(out, out.read_text())) == {NODE, other}


# --- merge into an OUT that already holds the inputs' files: OUT's copy is not parsed again -----

OTHER = "tests/test_big.py::test_other"


def _merge_parsing(tmp_path, monkeypatch, out_text: str, in_text: str, *extra: str,
                   name: str = "test_big.json") -> tuple[int, list[Path]]:
    """merge OUT IN with OUT's tests/<name> and IN's tests/test_big.json as given: (exit code,
    the files parsed, in order, still counting)."""
    for side, text, file in (("out", out_text, name), ("in", in_text, "test_big.json")):
        (tmp_path / side / "tests").mkdir(parents=True, exist_ok=True)
        (tmp_path / side / "tests" / file).write_text(text)
    calls: list[Path] = []
    parse = baseline._parse_text
    monkeypatch.setattr(baseline, "_parse_text", lambda path, *args: calls.append(path) or parse(path, *args))
    code = main(["merge", str(tmp_path / "out"), str(tmp_path / "in"), *extra])
    return code, calls


def _sides(calls: list[Path]) -> list[str]:
    return [p.parent.parent.name for p in calls]


def _text(*tests: tuple[str, int]) -> str:
    return render_baseline({nodeid: {"simulated:trn2": big_summary(ops)} for nodeid, ops in tests})


def test_merge_into_an_out_with_the_inputs_bytes_does_not_parse_it(tmp_path, monkeypatch, capsys):
    text = _text((NODE, 3), (OTHER, 2))
    code, parsed = _merge_parsing(tmp_path, monkeypatch, text, text)
    assert code == 0 and _sides(parsed) == ["in"]
    assert "none (all unchanged)" in capsys.readouterr().out
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text
    # The same through a baseline file given as the input rather than a directory.
    streamed: list[Path] = []
    stream = baseline.parse_streamed
    monkeypatch.setattr(inputs, "parse_streamed", lambda path, *args: streamed.append(path) or stream(path, *args))
    code = main(["merge", str(tmp_path / "out"), str(tmp_path / "in" / "tests" / "test_big.json")])
    assert code == 0 and "none (all unchanged)" in capsys.readouterr().out
    assert _sides(streamed) == ["in"] and _sides(parsed) == ["in"]  # OUT's file: not parsed


def test_merge_into_an_out_with_the_inputs_bytes_keeps_a_test_with_no_entries(tmp_path, monkeypatch, capsys):
    """What parsing OUT's file gives with every entry replaced: its tests, one with no entry too."""
    text = render_baseline({NODE: {"simulated:trn2": big_summary(3)}, OTHER: {}})
    assert f'"{OTHER}": {{}}' in text
    code, parsed = _merge_parsing(tmp_path, monkeypatch, text, text)
    assert code == 0 and _sides(parsed) == ["in"]
    assert "none (all unchanged)" in capsys.readouterr().out
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text


def test_merge_parses_an_out_file_that_differs_from_the_input_by_one_byte(tmp_path, monkeypatch, capsys):
    text = _text((NODE, 3))
    spaced = text.replace('"tests": {', '"tests":  {', 1)  # one more space: valid, not the same bytes
    code, parsed = _merge_parsing(tmp_path, monkeypatch, spaced, text)
    assert code == 0 and _sides(parsed) == ["in", "out"]
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text  # rewritten as rendered
    # One byte that breaks it: refused, nothing written.
    broken = text.replace('"count": ', '"count": -', 1)
    assert len(broken) == len(text) + 1
    (tmp_path / "out" / "tests" / "test_big.json").write_text(broken)
    assert main(["merge", str(tmp_path / "out"), str(tmp_path / "in")]) != 0
    assert "broken baseline file" in capsys.readouterr().err
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == broken
    # The same size, one byte changed (a digit of a count): parsed and validated, not taken as the input's.
    at = text.index('"count": ') + len('"count": ')
    swapped = text[:at] + ("7" if text[at] != "7" else "8") + text[at + 1:]
    (tmp_path / "out" / "tests" / "test_big.json").write_text(swapped)
    code, parsed = _merge_parsing(tmp_path, monkeypatch, swapped, text)
    assert code == 0 and _sides(parsed) == ["in", "out"]
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text


def test_merge_parses_an_out_file_with_the_inputs_bytes_when_an_entry_is_not_replaced(tmp_path, monkeypatch):
    """OUT's file holds the input's bytes, but under another file's name: its entries are not the
    ones merge replaces there (they belong in tests/test_big.json), so it is parsed (and kept)."""
    text = _text((NODE, 3))
    code, parsed = _merge_parsing(tmp_path, monkeypatch, text, text, name="test_elsewhere.json")
    assert code == 0 and _sides(parsed) == ["in", "out"]
    assert (tmp_path / "out" / "tests" / "test_elsewhere.json").read_text() == text
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text


def test_merge_parses_an_out_file_with_the_inputs_bytes_holding_an_entry_that_belongs_elsewhere(
        tmp_path, monkeypatch):
    """The input's file (and OUT's, the same bytes) holds an entry that belongs in another file:
    merge writes it there and does not replace it in OUT's copy, so OUT's file is parsed."""
    elsewhere = "tests/test_elsewhere.py::test_case"
    text = _text((NODE, 3), (elsewhere, 2))
    code, parsed = _merge_parsing(tmp_path, monkeypatch, text, text)
    assert code == 0 and _sides(parsed) == ["in", "out"]
    assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == text  # kept there too
    assert (tmp_path / "out" / "tests" / "test_elsewhere.json").read_text() == _text((elsewhere, 2))


def test_merge_refuses_a_broken_out_file(tmp_path, monkeypatch, capsys):
    text = _text((NODE, 3))
    for broken in (text.replace('"share"', '"shares"', 1), text[:-3], "", "{}\n",
                   text.replace(NODE, "../escape.py::t")):
        code, parsed = _merge_parsing(tmp_path, monkeypatch, broken, text)
        assert code != 0 and _sides(parsed)[-1] == "out", broken[:40]
        assert "baseline file" in capsys.readouterr().err
        assert (tmp_path / "out" / "tests" / "test_big.json").read_text() == broken  # never overwritten
        monkeypatch.undo()


def test_validate_all_skips_only_a_known_file_all_of_whose_entries_are_replaced(tmp_path):
    """The rule itself: a file is not parsed when its bytes are a known valid file's and each of
    its entries is replaced; else it is (here a broken file, refused, whatever ``known`` says of
    another file: the digest is blake2b of the bytes, not a per-process hash)."""
    text = _text((NODE, 3), (OTHER, 2))
    path = tmp_path / "tests" / "test_big.json"
    path.parent.mkdir()
    path.write_text(text)
    data = text.encode()
    known = [baseline.ValidFile.of(len(data), baseline.content_digest(data),
                                   parse_baseline_text(path, text))]
    both = {(NODE, "simulated:trn2"), (OTHER, "simulated:trn2")}
    store = BaselineStore(tmp_path)
    store.validate_all(replaced=both, known=known)
    assert store._kept[path] == ({NODE: {}, OTHER: {}}, both)  # what parsing with both dropped gives
    assert store.save([(NODE, big_summary(3)), (OTHER, big_summary(2))]) == []  # unchanged
    # One entry not replaced: parsed, and that entry kept.
    store = BaselineStore(tmp_path)
    store.validate_all(replaced={(NODE, "simulated:trn2")}, known=known)
    kept, _ = store._kept[path]
    assert set(kept[OTHER]) == {"simulated:trn2"}
    # A broken file of the same size as a known one: parsed, refused.
    path.write_text(text.replace('"count": 1', '"count": x', 1))
    assert path.stat().st_size == len(data)
    with pytest.raises(BaselineError, match="broken baseline file"):
        BaselineStore(tmp_path).validate_all(replaced=both, known=known)
    # A file named as a trace is never read as a baseline, known bytes or not.
    trace = tmp_path / "tests" / "test_big.trace.json"
    path.rename(trace)
    trace.write_text(text)
    store = BaselineStore(tmp_path)
    store.validate_all(replaced=both, known=known)
    assert trace not in store._kept and store._cache[trace] == {}


# --- ops written without a dict each: the same text ----------------------------------------------

_names = st.text(max_size=6)  # escapes, non-ASCII and control characters included
_times = st.one_of(st.floats(0, 1e12, allow_nan=False), st.integers(0, 10**6), st.sampled_from(
    [0.0, 5e-5, 0.00005, 1e-7, 123.45675, 1e16, 2.5, 1.0]))
_ops = st.builds(
    OpSummary, count=st.one_of(st.integers(0, 2**70), st.just(True)), device_time_us=_times,
    engine=st.one_of(st.text(max_size=4), st.sampled_from(["Tensor", "DMA"])), flops=st.integers(0, 2**64),
    bytes=st.integers(0, 2**64), share=st.one_of(st.floats(0, 1, allow_nan=False), st.integers(0, 1)),
    module=st.one_of(st.just(""), _names),
    modules=st.dictionaries(_names, _times, max_size=3), recomputed=st.integers(0, 3),
    uncosted=st.booleans())


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_names, _ops, max_size=4), st.sampled_from(["", "  ", "          "]))
def test_ops_written_directly_are_what_dumps_writes_of_their_json(ops, pad):
    summary = ProfileSummary("simulated", "trn2", "1", "2.13", 12.5, ops)
    expected = json.dumps(summary.to_json_once(), indent=2, sort_keys=True, allow_nan=False)
    assert jsontext.dumps(summary.to_write()) == expected
    for name, op in ops.items():
        assert jsontext.encode_at(jsontext.Rendered(op.rendered), pad) == \
            json.dumps(op.to_json(), indent=2, sort_keys=True).replace("\n", "\n" + pad)
    assert render_baseline({NODE: {summary.variant: summary}}) == json.dumps(
        {"schema_version": baseline.SCHEMA_VERSION, "tests": {NODE: {summary.variant: summary.to_json()}}},
        indent=2, sort_keys=True) + "\n"
