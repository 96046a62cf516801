"""Baselines are byte-identical across runs, test orders, hash seeds, thread counts and xdist, in
both execution modes. Graph execution follows tensors by capture-local storage numbers
(profiler/backends/dataflow.py): a storage's address is reused once it is freed, and graph
baselines followed addresses, so their bytes changed with the allocator's history."""

from __future__ import annotations

import gc
import shutil
import weakref
from pathlib import Path

import pytest
import torch

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.profiler.backends.dataflow import StorageIdentity

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_storages_are_numbered_in_the_order_the_capture_first_sees_them():
    identity = StorageIdentity()
    a, b = torch.zeros(4), torch.zeros(4)
    assert [identity(b), identity(a), identity(b)] == [0, 1, 0]
    # views, .data and detach() live in their base's storage
    assert identity(a[1:]) == identity(a.view(2, 2)) == identity(a.detach()) == 1
    # what an op reads (arguments, lists one level deep, then keyword arguments) and writes
    assert identity.flow([a, (b, 3), "x", None], {"out": a[2:]}, (b, a)) == ([1, 0, 1], [0, 1])
    sparse = torch.zeros(3, 3).to_sparse()
    assert identity(sparse) == 2 and identity(sparse) == 2


def test_a_storage_at_a_freed_storages_address_gets_a_number_of_its_own():
    identity = StorageIdentity()
    old = torch.zeros(16)
    number, address = identity(old), old.untyped_storage()._cdata
    kept = weakref.ref(old.untyped_storage())
    del old
    gc.collect()
    assert kept() is None and identity.alive() == 0  # the identity kept nothing alive
    held = []  # allocations elsewhere, kept so that the next one may land on the address
    for _ in range(200):
        new = torch.zeros(16)
        if new.untyped_storage()._cdata == address:
            break
        held.append(new)
    else:
        pytest.skip("the allocator never reused the freed storage's address")
    assert identity(new) != number


def _region_reading_a_fresh_tensor_where_an_intermediate_lived(x: torch.Tensor) -> bool:
    """a = x * 2 is read by a + 1 and freed; a tensor c made from Python data lands on its
    address (no recorded op writes c) and is read by c + 1. True when the address was reused."""
    a = x * 2
    address = a.untyped_storage()._cdata
    _ = a + 1
    del a
    held = []
    for _ in range(1000):
        c = torch.tensor([1.0, 2.0])
        if c.untyped_storage()._cdata == address:
            break
        held.append(c)
    else:
        return False
    _ = c + 1
    return True


def test_graph_execution_does_not_take_a_new_tensor_for_a_freed_one_at_its_address():
    x = torch.randn(1024)
    for _ in range(20):  # the allocator reuses the address in most regions, not all
        with NeuronProfiler(NeuronConfig(execution="graph")) as prof:
            reused = _region_reading_a_fresh_tensor_where_an_intermediate_lived(x)
        if reused:
            break
    else:
        pytest.skip("the allocator never reused the freed storage's address")
    mul, first_add, second_add = [r for r in prof.result.records if r.costed]
    assert (mul.name, first_add.name, second_add.name) == ("aten::mul", "aten::add", "aten::add")
    assert first_add.group == mul.group != -1  # a + 1 is mul's epilogue, on its tiles
    # c came from outside the dataflow: read from HBM, in no group of mul's. Followed by its
    # address, c was mul's output: fused into mul's group, its read on chip (0 bytes).
    assert second_add.group != mul.group
    assert second_add.bytes_read == 8


# Shuffles collected items by SHUFFLE_SEED (0: the default order) and sets torch's thread count:
# the variations a baseline must not depend on.
VARY = '''
import os
import random

import torch


def pytest_configure(config):
    torch.set_num_threads(int(os.environ["TORCH_THREADS"]))


def pytest_collection_modifyitems(session, config, items):
    seed = int(os.environ["SHUFFLE_SEED"])
    if seed:
        random.Random(seed).shuffle(items)
'''

# (SHUFFLE_SEED, PYTHONHASHSEED, TORCH_THREADS, extra arguments): each run records every example.
RUNS = [(0, "0", "1", []), (1, "1", "2", []), (2, "2", "1", ["-n", "2"])]


@pytest.mark.slow
@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_recorded_baselines_are_byte_identical_whatever_the_order_seed_threads_and_xdist(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, lean_inner_runs: None,
        execution: str):
    shutil.copytree(EXAMPLES, pytester.path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pytester.path / "examples" / "conftest.py").write_text(VARY)
    pytester.makeini("[pytest]\n")  # the rootdir, so tests are named examples/test_x.py::...
    recorded = []
    for shuffle, hashseed, threads, extra in RUNS:
        monkeypatch.setenv("SHUFFLE_SEED", str(shuffle))
        monkeypatch.setenv("PYTHONHASHSEED", hashseed)
        monkeypatch.setenv("TORCH_THREADS", threads)
        out = pytester.path / f"baselines-{shuffle}"
        result = pytester.runpytest_subprocess(
            "examples", "--neuron-device-alias", "--neuron-execution", execution, "--neuron-baseline",
            "--neuron-baseline-dir", str(out), *extra)
        assert result.ret == 0, result.stdout.str()
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.json"))}
        assert len(files) == len(list(EXAMPLES.glob("test_*.py")))  # the Trainium-style one too
        recorded.append(files)
    for files, (shuffle, hashseed, threads, extra) in zip(recorded[1:], RUNS[1:]):
        changed = sorted(name for name in files if files[name] != recorded[0][name])
        assert not changed, (f"{execution}: shuffle seed {shuffle}, PYTHONHASHSEED={hashseed}, "
                             f"{threads} threads {extra} recorded other bytes than the default run "
                             f"in {changed}")
