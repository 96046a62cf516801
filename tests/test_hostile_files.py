"""Baseline and report files from a pull request, tried as an attacker would (issue 15, items
6-8 and the input side of item 5): a folder link that leads writes out of the baseline
directory, special files (a FIFO, /dev/zero, a socket) and oversized files among the baselines,
test keys that name no test file, and a 50 MB key. Each is one named error, never a hang, an
unbounded read, a traceback or a write outside the directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from pytest_neuronprof.errors import BaselineError, ConfigError
from pytest_neuronprof.gate.baseline import BaselineStore, key_problem
from pytest_neuronprof.gate.decode import Decoder
from pytest_neuronprof.gate.summary import ProfileSummary
from pytest_neuronprof.safetext import quoted
from pytest_neuronprof.values import parse_size
from test_cli import assert_one_line_error, run  # the command's own test helpers

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("lean_inner_runs")  # inner runs: no hypothesis, cache, CI output

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and sockets are POSIX")
HANG_S = 20  # a read that blocks fails the test after this long instead of hanging the suite

NODE = "tests/test_mlp.py::test_forward"
OP = {"count": 1, "device_time_us": 10.0, "engine": "tensor", "flops": 100, "bytes": 64,
      "share": 1.0, "modules": {"": 10.0}}
ENTRY = {"backend": "simulated", "hardware": "trn2", "cost_model_version": "1",
         "torch_version": "2.13", "total_device_time_us": 10.0, "ops": {"aten::mm": OP}}

TEST = '''
import pytest
import torch


@pytest.mark.neuron_profile
def test_add():
    torch.ones(4) + 1
'''


class Hung(BaseException):
    """Not an OSError (nor an Exception): no handler in the code under test swallows it."""


def project(pytester: pytest.Pytester, ini: str = "", test: str = "test_a.py") -> None:
    """An ini file (so baselines/ sits next to it) and tests/``test`` with one profiled test."""
    pytester.makeini(f"[pytest]\n{ini}")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / test).write_text(TEST)


@contextmanager
def hang_guard() -> Iterator[None]:
    """Fails (Hung) instead of hanging when what runs inside blocks."""
    def alarm(signum: int, frame: object) -> None:
        raise Hung(f"blocked for {HANG_S} s: a special file was opened or read as a baseline")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def document(tests: dict) -> dict:
    return {"schema_version": 3, "tests": {key: {"simulated:trn2": ENTRY} for key in tests}}


def write_baseline(directory: Path, keys: tuple[str, ...] = (NODE,), name: str = "tests/test_mlp.json") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(dict.fromkeys(keys)), indent=2))
    return path


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # paths in messages are shown relative to the working directory
    return tmp_path


# --- item 7: special files, in every command ------------------------------------------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(os.path.relpath(path))  # relative: AF_UNIX paths are short (108 bytes on Linux)
    _SOCKETS.append(server)


_SOCKETS: list[socket.socket] = []  # bound for the test's length, closed after it


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    while _SOCKETS:
        _SOCKETS.pop().close()


SPECIAL = {"fifo": (_fifo, "a FIFO"), "zero": (_zero, "a character device (a link to '/dev/zero')"),
           "socket": (_socket, "a socket")}


@posix_only
@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("command", ["show-dir", "show-file", "compare", "merge"])
def test_special_files_are_named_errors_in_every_command(in_tmp, capsys, kind, command):
    make, said = SPECIAL[kind]
    good = write_baseline(in_tmp / "base")
    special = in_tmp / "base" / "tests" / f"{kind}.json"
    make(special)
    args = {"show-dir": ("show", "base"), "show-file": ("show", special),
            "compare": ("compare", good, "base"), "merge": ("merge", in_tmp / "out", "base")}[command]
    with hang_guard():
        code, out, err = run(capsys, *args)
    assert code == 2
    assert_one_line_error(err, f"base/tests/{kind}.json", said)
    assert out == ""


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_special_files_are_named_errors_in_the_plugin(pytester: pytest.Pytester, kind):
    project(pytester)
    (pytester.path / "baselines" / "tests").mkdir(parents=True)
    SPECIAL[kind][0](pytester.path / "baselines" / "tests" / f"{kind}.json")
    with hang_guard():
        result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"baselines/tests/{kind}.json" in err and SPECIAL[kind][1] in err
    assert "Traceback" not in err and "MemoryError" not in err


def test_a_file_above_the_size_limit_is_refused_unread(in_tmp, capsys):
    path = write_baseline(in_tmp / "base")
    code, _, err = run(capsys, "show", path, "--max-size", "100")
    assert code == 2
    assert_one_line_error(err, "base/tests/test_mlp.json", "larger than the limit of 100 B", "--max-size")
    code, out, _ = run(capsys, "show", path, "--max-size", "1MiB")
    assert code == 0 and "aten::mm" in out
    code, _, err = run(capsys, "show", path, "--max-size", "lots")
    assert code == 2
    assert_one_line_error(err, "--max-size='lots'", "512MB")


def test_the_plugin_size_limit_has_an_option(pytester: pytest.Pytester):
    project(pytester, "neuron_baseline_max_size = 200\n")
    write_baseline(pytester.path / "baselines", ("tests/test_a.py::test_add",), "tests/test_a.json")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "baselines/tests/test_a.json" in err and "larger than the limit of 200 B" in err
    assert "--neuron-baseline-max-size (ini neuron_baseline_max_size)" in err
    result = pytester.runpytest("--neuron-baseline-max-size=2 MB")
    assert result.ret != pytest.ExitCode.USAGE_ERROR and "limit" not in result.stderr.str()
    result = pytester.runpytest("--neuron-baseline-max-size=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--neuron-baseline-max-size (ini neuron_baseline_max_size)='-1'" in result.stderr.str()


def test_sizes_read_as_people_write_them():
    assert parse_size("--x", "512MB") == 512 * 10**6
    assert parse_size("--x", "256MiB") == 256 * 2**20
    assert parse_size("--x", " 1.5 GB ") == 1_500_000_000
    assert parse_size("--x", "1000") == parse_size("--x", 1000) == 1000
    for bad in ("", "0", "-5", "1e9", "5 parsecs", True, None, 1.5):
        with pytest.raises(ConfigError, match="--x="):
            parse_size("--x", bad)


# --- item 6: a folder link that leads out of the baseline directory -------------------------------

@posix_only
def test_recording_refuses_to_write_through_a_folder_link(pytester: pytest.Pytester, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    project(pytester, test="test_evil.py")
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "tests").symlink_to(outside, target_is_directory=True)
    result = pytester.runpytest("--neuron-baseline")
    assert result.ret != 0
    err = result.stderr.str() + result.stdout.str()
    assert "baselines/tests is a symbolic link" in err and "outside the baseline directory" in err
    assert list(outside.iterdir()) == []  # nothing written through the link


@posix_only
def test_a_folder_link_inside_the_directory_still_records(tmp_path):
    store = BaselineStore(tmp_path / "baselines")
    summary = ProfileSummary.from_json(ENTRY, Decoder(AssertionError), "entry")
    (tmp_path / "baselines" / "real").mkdir(parents=True)
    (tmp_path / "baselines" / "tests").symlink_to(tmp_path / "baselines" / "real")
    assert store.save([(NODE, summary)]) == [tmp_path / "baselines" / "tests" / "test_mlp.json"]
    assert (tmp_path / "baselines" / "real" / "test_mlp.json").is_file()


@posix_only
def test_listing_does_not_follow_a_folder_link_that_loops(in_tmp, capsys):
    write_baseline(in_tmp / "base")
    (in_tmp / "base" / "tests" / "loop").symlink_to(in_tmp / "base", target_is_directory=True)
    with hang_guard():
        code, out, err = run(capsys, "show", "base")
    assert code == 0, err
    assert out.count("test_forward") == 1  # read once, not again through the link


# --- item 8: keys that name no test file ------------------------------------------------------------

BAD_KEYS = ["", "::t", ".::t", "/::t", "a\u0000b.py::t", "/etc/passwd::t", "../up.py::t",
            "a/../../b.py::t", "C:/x.py::t", "a//b.py::t", "tests/\x1b[2J.py::t"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_key_that_names_no_test_file_is_one_error_in_every_command(in_tmp, capsys, key):
    path = write_baseline(in_tmp / "bad", (key,), "tests/test_x.json")
    good = write_baseline(in_tmp / "good")
    for args in (("merge", in_tmp / "out", "bad"), ("show", "bad"), ("show", path),
                 ("compare", good, path), ("compare", path, "good")):
        code, out, err = run(capsys, *args)
        assert code == 2, (args, out, err)
        assert_one_line_error(err, "bad/tests/test_x.json", "is not a test's node id")
        assert quoted(key) in err and "\x00" not in err and "\x1b" not in err
    assert not (in_tmp / "out").exists()


def test_a_key_that_names_no_test_file_stops_the_plugin(pytester: pytest.Pytester):
    project(pytester)
    write_baseline(pytester.path / "baselines", ("/::t",), "tests/test_other.json")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "baselines/tests/test_other.json" in err and "'/::t'" in err and "Traceback" not in err


def test_keys_that_name_test_files_are_kept():
    for key in (NODE, "test_a.py", "a/b/test_c.py::TestX::test_y[../..]", "t.py::t\n::error::x"):
        assert key_problem(key) is None, key
    for key in BAD_KEYS:
        assert key_problem(key), key


def test_no_writer_records_a_key_no_reader_accepts(tmp_path):
    summary = ProfileSummary.from_json(ENTRY, Decoder(AssertionError), "entry")
    with pytest.raises(BaselineError, match="cannot record the test '../up.py::t'"):
        BaselineStore(tmp_path).save([("../up.py::t", summary)])
    assert list(tmp_path.iterdir()) == []


# --- item 5, input side: every echoed value capped ----------------------------------------------------

def test_a_50_mb_unknown_key_gives_a_short_error(in_tmp, capsys):
    doc = document({NODE: None})
    doc["tests"][NODE]["simulated:trn2"] = dict(ENTRY, **{"k" * 50_000_000: 1})
    (in_tmp / "big.json").write_text(json.dumps(doc))
    code, _, err = run(capsys, "show", "big.json")
    assert code == 2
    assert_one_line_error(err, "big.json", "unknown key(s) 'kkk", "(50,000,000 characters)")
    assert len(err) < 1_000


def test_many_unknown_keys_are_counted_not_listed(in_tmp, capsys):
    doc = document({NODE: None})
    doc["tests"][NODE]["simulated:trn2"] = dict(ENTRY, **{f"x{i}": 1 for i in range(10_000)})
    (in_tmp / "many.json").write_text(json.dumps(doc))
    code, _, err = run(capsys, "show", "many.json")
    assert code == 2
    assert_one_line_error(err, "and 9,995 more")
    assert len(err) < 1_000


def test_a_duplicate_key_is_echoed_capped_and_inert(in_tmp, capsys):
    key = "\n::error::dup" + "d" * 1_000_000
    (in_tmp / "dup.json").write_text('{"schema_version": 3, "tests": {%s: {}, %s: {}}}'
                                     % (json.dumps(key), json.dumps(key)))
    code, _, err = run(capsys, "show", "dup.json")
    assert code == 2
    assert_one_line_error(err, "dup.json", "duplicate key", "\\n::error::dup")
    assert len(err) < 1_000


@posix_only
def test_the_refusal_names_the_link_not_its_target(in_tmp):
    (in_tmp / "elsewhere").mkdir()
    (in_tmp / "baselines").mkdir()
    (in_tmp / "baselines" / "tests").symlink_to(in_tmp / "elsewhere", target_is_directory=True)
    summary = ProfileSummary.from_json(ENTRY, Decoder(AssertionError), "entry")
    with pytest.raises(BaselineError) as refused:
        BaselineStore(in_tmp / "baselines").save([(NODE, summary)])
    assert str(refused.value).startswith("cannot write baseline file baselines/tests/test_mlp.json: "
                                         "baselines/tests is a symbolic link to ")
    assert "`rm baselines/tests`" in str(refused.value)
    assert list((in_tmp / "elsewhere").iterdir()) == []


def test_a_huge_op_name_in_an_error_keeps_where_and_what(in_tmp, capsys):
    name = "\n::error::op" + "o" * 5_000_000
    doc = document({NODE: None})
    doc["tests"][NODE]["simulated:trn2"] = dict(ENTRY, ops={name: dict(OP, count="1")})
    (in_tmp / "op.json").write_text(json.dumps(doc))
    code, _, err = run(capsys, "show", "op.json")
    assert code == 2
    assert_one_line_error(err, "op.json: tests['tests/test_mlp.py::test_forward']", ".ops['\\n::error::op",
                          "characters) \u2026", "'].count should be int or float, got str", "git checkout")
    assert len(err) < 1_000
