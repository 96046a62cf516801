"""The session's outputs as a registry (outputs/registry.py): an output registered once gets its
option and ini twin, is checked before the run, written (per test or at the end), said in the summary when it fails, and
asked for its part of the summary, with no other change to the plugin. Also the pieces the
session hands off to: the path preflight, the baseline-matching check, the terminal summary."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronprof.errors import ConfigError, NeuronProfError
from pytest_neuronprof.files import OutputError
from pytest_neuronprof.gate.compare import Status, Verdict
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import registry
from pytest_neuronprof.outputs.registry import SESSION_OUTPUTS, SessionOutput
from pytest_neuronprof.outputs.terminal import WriteLog, write_summary
from pytest_neuronprof.plugin.locate import BaselineLocator
from pytest_neuronprof.plugin.options import OPTIONS, Options, all_options, read_options
from pytest_neuronprof.plugin.preflight import check_outputs, output_paths
from pytest_neuronprof.plugin.session import NeuronSession

SUMMARY = ProfileSummary("simulated", "trn2", "1", "2.13", 10.0,
                         {"aten::mm": OpSummary(1, 10.0, "Tensor", 100, 200, 1.0, "model")})


def outcome(nodeid: str, status: Status = Status.NO_BASELINE, key: str = "", directory: str = "") -> TestOutcome:
    return TestOutcome(nodeid, ("tests/test_m.py", 3), Verdict(status, message="no baseline for simulated:trn2"),
                       SUMMARY, None, key, directory)


FLAGS = {"report": "--neuron-report", "trace_dir": "--neuron-trace-dir", "html": "--neuron-html"}


def options(tmp_path: Path, **paths: Path) -> Options:
    return Options(record=False, baseline_dir=tmp_path / "baselines", backend="simulated", hardware="trn2",
                   strict=False, output_paths={FLAGS[name]: path for name, path in paths.items()},
                   rootdir=tmp_path, test_paths=(tmp_path,))


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"{sep * 3} {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def count_lines(path: Path, outcomes: Any, paths: Any) -> None:
    path.write_text(f"{len(outcomes)} tests\n")


def refuse(*args: Any) -> None:
    raise OSError(28, "No space left on device")


def test_every_registered_output_brings_its_own_option():
    # The registration is the option's only declaration: flag, ini twin, help, a path.
    flagged = [o for o in SESSION_OUTPUTS if o.flag is not None]
    assert [(o.flag, o.ini) for o in flagged] == [("--neuron-report", "neuron_report"),
                                                  ("--neuron-trace-dir", "neuron_trace_dir"),
                                                  ("--neuron-html", "neuron_html"),
                                                  ("--neuron-comment", "neuron_comment")]
    assert not {o.flag for o in flagged} & {flag for flag, *_ in OPTIONS}
    assert all_options()[-4:] == tuple((o.flag, o.ini, "string", o.help) for o in flagged)
    assert "output_paths" in {f.name for f in dataclasses.fields(Options)}


def test_an_output_registered_with_one_entry_gets_its_option_ini_key_and_preflight(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SessionOutput("fake page", "--neuron-fake", "write a fake page into this directory",
                         folder=True, write=lambda folder, *args: count_lines(folder / "fake.txt", *args))
    monkeypatch.setattr(registry, "SESSION_OUTPUTS", (*SESSION_OUTPUTS, fake))
    help_text = pytester.runpytest_inprocess("--help").stdout.str()
    assert "--neuron-fake=VALUE" in help_text and "write a fake page into this directory" in help_text
    assert "neuron_fake (string):" in help_text
    # the option, relative to the working directory, wins over the ini key
    pytester.makeini("[pytest]\nneuron_fake = from_ini\n")
    from_option = read_options(pytester.parseconfig("--neuron-fake=from_option"))
    assert from_option.output_paths == {"--neuron-fake": pytester.path / "from_option"}
    # the ini key, relative to the ini file's folder
    (pytester.path / "sub").mkdir()
    monkeypatch.chdir(pytester.path / "sub")
    opts = read_options(pytester.parseconfig(str(pytester.path)))
    assert opts.output_paths == {"--neuron-fake": pytester.path / "from_ini"}
    paths = output_paths(opts)
    assert paths == {fake: pytester.path / "from_ini"}
    check_outputs(paths, [])  # preflight: the folder is created
    assert (pytester.path / "from_ini").is_dir()
    with pytest.raises(ConfigError, match=r"--neuron-fake .*from_ini is inside the baseline directory"):
        check_outputs(paths, [pytester.path])
    session = NeuronSession(opts)  # and the session writes it at its end
    session.outcomes = {"t1": outcome("t1", directory=str(pytester.path / "baselines"))}
    session.finish()
    assert (pytester.path / "from_ini" / "fake.txt").read_text() == "1 tests\n"


def test_an_output_registered_once_is_checked_written_and_summarized(tmp_path):
    def publish(outcomes: Any, write_line: Any, rootdir: Path) -> None:
        write_line(f"published {len(outcomes)} from {rootdir.name}")

    def snapshot(result: Any, path: Path) -> None:
        path.write_text(result)

    registered = (SessionOutput("count", "--neuron-report", write=count_lines),
                  SessionOutput("snapshot", "--neuron-trace-dir", folder=True,
                                test_file=lambda folder, nodeid: folder / f"{nodeid}.txt", write_test=snapshot),
                  SessionOutput("publisher", summary=publish))
    opts = options(tmp_path, report=tmp_path / "new" / "count.txt", trace_dir=tmp_path / "snaps")
    session = NeuronSession(opts, outputs=registered)
    session.start()  # preflight creates the file's folder and the per-test folder
    assert (tmp_path / "new").is_dir() and (tmp_path / "snaps").is_dir()
    session.write_test_files("t1", "first")
    session.outcomes = {n: outcome(n, directory=str(tmp_path / "baselines")) for n in ("t1", "t2")}
    session.finish()
    assert (tmp_path / "new" / "count.txt").read_text() == "2 tests\n"
    assert (tmp_path / "snaps" / "t1.txt").read_text() == "first"
    terminal = Terminal()
    session.terminal_summary(terminal, tmp_path)
    assert terminal.lines[-1] == f"published 2 from {tmp_path.name}"
    assert session.end_errors() == []


def test_a_registered_output_that_fails_costs_only_itself(tmp_path):
    registered = (SessionOutput("broken", "--neuron-html", folder=True, write=refuse),
                  SessionOutput("count", "--neuron-report", write=count_lines),
                  SessionOutput("snapshot", "--neuron-trace-dir", folder=True,
                                test_file=lambda folder, nodeid: folder / nodeid, write_test=refuse))
    opts = options(tmp_path, html=tmp_path / "page", report=tmp_path / "count.txt", trace_dir=tmp_path / "s")
    session = NeuronSession(opts, outputs=registered)
    session.start()
    with pytest.warns(UserWarning, match="could not write the snapshot"):
        session.write_test_files("t1", None)
        session.write_test_files("t2", None)
    session.outcomes = {"t1": outcome("t1", directory=str(tmp_path / "baselines"))}
    session.finish()
    assert (tmp_path / "count.txt").read_text() == "1 tests\n"  # written although the one before failed
    terminal = Terminal()
    session.terminal_summary(terminal, tmp_path)
    assert terminal.lines[-2:] == [
        "NOT written: [Errno 28] No space left on device",
        f"NOT written: could not write the snapshot {tmp_path / 's' / 't1'}: No space left on device "
        "(the disk is full: free some space, then run again) (and 1 more snapshots)"]
    assert session.end_errors() == ["[Errno 28] No space left on device"]


def test_preflight_refuses_an_output_inside_the_baseline_directory(tmp_path):
    paths = output_paths(options(tmp_path, html=tmp_path / "baselines" / "page"))
    with pytest.raises(ConfigError, match=r"--neuron-html .*page is inside the baseline directory"):
        check_outputs(paths, [tmp_path / "baselines"])


def test_preflight_refuses_a_directory_for_a_file_output(tmp_path):
    (tmp_path / "report.json").mkdir()
    paths = output_paths(options(tmp_path, report=tmp_path / "report.json"))
    with pytest.raises(OutputError, match=r"it is a directory; give --neuron-report \(ini neuron_report\) a file name"):
        check_outputs(paths, [])


def test_preflight_checks_only_the_outputs_whose_option_is_given(tmp_path):
    paths = output_paths(options(tmp_path, trace_dir=tmp_path / "traces"))
    assert [(o.flag, p) for o, p in paths.items()] == [("--neuron-trace-dir", tmp_path / "traces")]


def test_baselines_that_no_test_matched_are_an_error_naming_the_key_looked_up(tmp_path):
    directory = tmp_path / "baselines"
    locator = BaselineLocator(directory, None, tmp_path)
    locator.store(directory).save([("tests/test_old.py::test_a", SUMMARY)])
    moved = [outcome("tests/test_m.py::test_a", key="tests/test_m.py::test_a", directory=str(directory))]
    with pytest.raises(NeuronProfError) as caught:
        locator.check_matched(moved, lambda o: True)
    message = str(caught.value)
    assert message.startswith("none of the 1 profiled tests has an entry in its baseline file")
    assert "'tests/test_old.py::test_a'" in message and "pytest --neuron-baseline 'tests/test_m.py::test_a'" in message
    # one test with an entry (of another variant, too) is a match; a compared test is one
    locator.check_matched([outcome("tests/test_old.py::test_a", key="tests/test_old.py::test_a",
                                   directory=str(directory))], lambda o: True)
    locator.check_matched([outcome("x", Status.PASS, key="x", directory=str(directory))], lambda o: True)


def test_the_summary_of_a_recording_stopped_before_any_test_finished(tmp_path):
    terminal = Terminal()
    log = WriteLog(record=True, stopped="interrupted", unfinished=[f"t{i}" for i in range(7)])
    write_summary(terminal, [], log, strict=False, rootdir=tmp_path)
    assert terminal.lines == [
        "baselines recorded: 0 tests; files changed: none (all unchanged)",
        "recording stopped early (interrupted): every test that finished and passed was recorded; "
        "profiled tests that did not finish keep their old baselines: 7 (t0, t1, t2, t3, t4, ...)"]


def test_the_summary_says_the_table_then_what_was_not_written_then_the_publishers(tmp_path):
    terminal = Terminal()
    log = WriteLog(not_written=["disk full"])
    write_summary(terminal, [outcome("t1")], log, strict=True, rootdir=tmp_path,
                  publishers=[lambda outcomes, write_line, rootdir: write_line("annotations")])
    assert terminal.lines[0] == "=== neuron device-time profile"
    assert terminal.lines[2:] == [
        "1 of 1 profiled tests was not compared (1 no-baseline)",
        "t1: no baseline for simulated:trn2 (fails under --neuron-strict); record it with "
        "pytest --neuron-baseline 't1'",
        "NOT written: disk full", "annotations"]
