"""Baselines and the gate: per-op summaries of a profile, the baseline files that store them,
the comparison that decides a verdict, and the record of each profiled test's outcome.

Plain data and pure functions (the baseline store aside, which reads and writes files); no torch,
no pytest.
"""
