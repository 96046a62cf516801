"""Shared fixtures of the project's own tests. Keep it small: helpers used by one file live there."""

from __future__ import annotations

from typing import Any, Callable

import pandas  # noqa: F401
import pytest
import torch  # noqa: F401
import torch._dynamo  # noqa: F401

import pytest_neuronprof.plugin  # noqa: F401
import pytest_neuronprof.profiler.backends.simulated  # noqa: F401
import pytest_neuronprof.profiler.profiler  # noqa: F401

# Imported here, in the outer process, before any in-process pytester run: pytester drops every
# module a run imported when the run ends, and torch's C extension does not survive being
# imported a second time (segfault). pandas and the plugin's lazy imports likewise, and
# torch._dynamo, which the first op on meta tensors imports (torch._disable_dynamo): imported
# again after a run dropped it, its torch.distributed._functional_collectives registers its
# operator library a second time ("Only a single TORCH_LIBRARY can be used to register the
# namespace c10d_functional"), which failed every later test that imports transformers.


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: a test that starts a subprocess (a pytest run, xdist, kill -9, a fresh "
        "interpreter, a browser); runs in CI, deselect locally with -m 'not slow'")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection imported (torch, and torch._inductor, which torch.profiler's first
    start imports: ~800 modules) out of the cyclic GC: every in-process pytester run ends with
    pytest's gc.collect() calls, which otherwise walk that heap (~0.4 s a run)."""
    import gc

    gc.freeze()


@pytest.fixture
def profile() -> Callable[..., Any]:
    """``profile(fn, **config)``: run ``fn()`` under a NeuronProfiler, return its ProfileResult."""
    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    def run(fn: Callable[[], Any], **config: Any):
        with NeuronProfiler(NeuronConfig(**config)) as prof:
            fn()
        return prof.result

    return run


@pytest.fixture(autouse=True)
def _outside_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process pytester runs must not write annotations or step summaries into the real
    GitHub Actions job that runs this suite; tests of that output set the variables again."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def lean_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """For pytester suites: inner runs skip hypothesis' plugin (its terminal summary re-imports
    hypothesis on every in-process run) and the cache, and write no GitHub Actions output."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider")
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
