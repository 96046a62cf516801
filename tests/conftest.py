"""Shared fixtures of the project's own tests. Keep it small: helpers used by one file live there."""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.fixture
def profile() -> Callable[..., Any]:
    """``profile(fn, **config)``: run ``fn()`` under a NeuronProfiler, return its ProfileResult."""
    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    def run(fn: Callable[[], Any], **config: Any):
        with NeuronProfiler(NeuronConfig(**config)) as prof:
            fn()
        return prof.result

    return run
