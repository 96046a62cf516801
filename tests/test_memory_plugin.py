"""Device memory gated like time, in pytest runs (issue 18, item 1): each kind of memory
regression (activation checkpointing removed, a KV cache grown, fp32 master weights added, a
tensor kept alive too long) fails with the peak's finding; harmless changes pass; a test that
does not fit its device fails on its first run; memory_limit= and the memory threshold's option,
ini key and marker argument."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.checkpoint import checkpoint

pytest_plugins = ["pytester"]

# Non-reentrant checkpointing imports torch._dynamo's operators on first use; pytester's
# in-process runs drop modules imported during them, and a second import registers the same
# operator library twice. Imported here, once, outside them.
checkpoint(torch.nn.Linear(2, 2), torch.ones(1, 2, requires_grad=True), use_reentrant=False).sum().backward()

SUITE = '''
import json, pathlib

import pytest, torch
from torch.utils.checkpoint import checkpoint

KNOBS = json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())
KEPT = []


def mlp(width=1024, depth=8):
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(depth)]
    return torch.nn.Sequential(*layers).to("meta")


@pytest.mark.neuron_profile
def test_training_step():
    model = mlp()
    x = torch.randn(4096, 1024, device="meta")  # activations, not weights, make the peak
    h = x.requires_grad_()
    for block in model:
        if KNOBS.get("checkpoint", True):
            h = checkpoint(block, h, use_reentrant=False)
        else:
            h = block(h)
    h.sum().backward()


@pytest.mark.neuron_profile
def test_decode_step():
    length = KNOBS.get("cache", 1024)
    cache_k = torch.zeros(1, 32, length, 128, device="meta", dtype=torch.bfloat16)
    cache_v = torch.zeros(1, 32, length, 128, device="meta", dtype=torch.bfloat16)
    q = torch.randn(1, 32, 1, 128, device="meta", dtype=torch.bfloat16)
    torch.nn.functional.scaled_dot_product_attention(q, cache_k, cache_v)


@pytest.mark.neuron_profile
def test_optimizer_step():
    weights = [torch.randn(2048, 2048, device="meta", dtype=torch.bfloat16) for _ in range(4)]
    grads = [torch.randn_like(w) for w in weights]
    if KNOBS.get("master", False):  # fp32 master weights, kept beside the bf16 ones
        masters = [w.float() for w in weights]
        for m, g in zip(masters, grads):
            m.add_(g.float(), alpha=-1e-3)
        for w, m in zip(weights, masters):
            w.copy_(m)
        KEPT.append(masters)
    else:
        for w, g in zip(weights, grads):
            w.add_(g, alpha=-1e-3)


@pytest.mark.neuron_profile
def test_forward():
    x = torch.randn(512, 2048, device="meta")
    first = torch.nn.functional.gelu(x @ torch.randn(2048, 4096, device="meta"))
    if KNOBS.get("keep", False):
        KEPT.append(first)  # kept alive past its last use
    second = first @ torch.randn(4096, 2048, device="meta")
    del first
    third = torch.relu(second) @ torch.randn(2048, 8192, device="meta")
    if KNOBS.get("swap", False):  # the same independent ops, the other way round
        b, a = third.sum(), second.sum()
    else:
        a, b = second.sum(), third.sum()
    renamed = a + b
    del renamed
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, lean_inner_runs: None) -> pytest.Pytester:
    pytester.makepyfile(test_mem=SUITE)
    (pytester.path / "knobs.json").write_text("{}")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=4)
    return pytester


def run(suite: pytest.Pytester, knobs: dict, test: str, *args: str) -> tuple[pytest.RunResult, dict]:
    (suite.path / "knobs.json").write_text(json.dumps(knobs))
    result = suite.runpytest("--neuron-report", "report.json", f"test_mem.py::{test}", *args)
    report = json.loads((suite.path / "report.json").read_text())
    return result, report["tests"][f"test_mem.py::{test}"]


def memory_findings(entry: dict) -> list[dict]:
    return [f for f in entry["verdict"]["regressions"] if f["kind"] == "memory"]


def test_the_baseline_keeps_each_tests_peak_and_resident_bytes(suite):
    doc = json.loads((suite.path / "baselines" / "test_mem.json").read_text())
    assert doc["schema_version"] == 7
    memory = doc["tests"]["test_mem.py::test_decode_step"]["simulated:trn2"]["memory"]
    # two bf16 caches of 1 x 32 x 1024 x 128 made in the region, the query, the output
    assert memory["peak_bytes"] >= 2 * 32 * 1024 * 128 * 2
    assert memory["resident_bytes"] == 0


@pytest.mark.parametrize("test, knobs, grows", [
    ("test_training_step", {"checkpoint": False}, "allocated +"),
    ("test_decode_step", {"cache": 2048}, "allocated +"),
    ("test_optimizer_step", {"master": True}, "allocated +"),
    ("test_forward", {"keep": True}, "allocated +"),
])
def test_each_kind_of_memory_regression_fails_naming_the_peak(suite, test, knobs, grows):
    result, entry = run(suite, knobs, test)
    result.assert_outcomes(failed=1)
    (finding,) = memory_findings(entry)
    assert finding["op"] == "(peak memory)" and finding["current"] > finding["baseline"] * 1.05
    assert finding["reason"].startswith(grows)
    result.stdout.fnmatch_lines(["*(peak memory)*"])


@pytest.mark.parametrize("knobs", [{}, {"swap": True}])
def test_harmless_changes_are_not_memory_regressions(suite, knobs):
    result, entry = run(suite, knobs, "test_forward")
    result.assert_outcomes(passed=1)
    assert memory_findings(entry) == []


def test_the_memory_threshold_is_an_option_an_ini_key_and_a_marker_argument(suite):
    # the KV cache +6 %: under the default 5 %? no: 1024 -> 1088 positions is +6.25 % of the caches
    result, entry = run(suite, {"cache": 1088}, "test_decode_step", "--neuron-memory-threshold", "20%")
    result.assert_outcomes(passed=1)
    result, entry = run(suite, {"cache": 1088}, "test_decode_step")
    result.assert_outcomes(failed=1)
    suite.makeini("[pytest]\nneuron_memory_threshold = 0.2\n")
    result, entry = run(suite, {"cache": 1088}, "test_decode_step")
    result.assert_outcomes(passed=1)
    suite.makeini("[pytest]\nneuron_memory_threshold = nope\n")
    result = suite.runpytest("test_mem.py::test_decode_step")
    result.stderr.fnmatch_lines(["*--neuron-memory-threshold (ini neuron_memory_threshold)*nope*"])


def test_a_test_that_does_not_fit_fails_on_its_first_run(pytester, lean_inner_runs):
    pytester.makepyfile(test_big='''
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_big():
            torch.empty(40 * 2**30, device="meta", dtype=torch.uint8) + 1

        @pytest.mark.neuron_profile(memory_limit="1 GiB")
        def test_limited():
            torch.empty(2 * 2**30, device="meta", dtype=torch.uint8) + 1

        @pytest.mark.neuron_profile(hardware="h200")
        def test_big_fits_h200():
            torch.empty(40 * 2**30, device="meta", dtype=torch.uint8) + 1
    ''')
    result = pytester.runpytest("--neuron-report", "report.json")
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(["*does not fit on trn2: 80 GiB peak, 24 GiB per NeuronCore*",
                                 "*does not fit on trn2: 4 GiB peak, memory_limit=1 GiB*"])
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["tests"]["test_big.py::test_big"]["verdict"]["status"] == "does-not-fit"
    assert report["does_not_fit"] == 2 and report["regressions"] == 0
    # recording writes the entry, and still fails
    result = pytester.runpytest("--neuron-baseline", "test_big.py::test_big")
    result.assert_outcomes(failed=1)
    doc = json.loads((pytester.path / "baselines" / "test_big.json").read_text())
    assert "test_big.py::test_big" in doc["tests"]


@pytest.mark.parametrize("value", ["lots", "0", -5])
def test_a_bad_memory_limit_names_the_marker_argument(pytester, lean_inner_runs, value):
    pytester.makepyfile(test_bad=f'''
        import pytest

        @pytest.mark.neuron_profile(memory_limit={value!r})
        def test_it():
            pass
    ''')
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neuron_profile memory_limit=*expected a size*"])
