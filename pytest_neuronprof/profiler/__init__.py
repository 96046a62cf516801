"""Profiling a region of PyTorch code: NeuronConfig, NeuronProfiler, the backends that capture or
measure each op, ProfileResult and its views (torch's tables, pandas, Chrome traces).

Nothing here knows about baselines or pytest.
"""
