"""The `neuronprof` command (also `python -m pytest_neuronprof`): compare, show, merge and report
baselines and --neuron-report files outside pytest."""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
