"""The h200 fit (``benchmarks/fit_h200.py`` is its command line), shaped like the cost model it
fits:

* ``calls``: the measured rows and the calls behind them, captured once on ``meta`` tensors;
* ``parameters``: what is fitted (with priors, bounds and meanings) and what is set;
* ``search``: predictions, the loss and the deterministic search;
* ``crossval``: error figures and the cross-validation schemes;
* ``profile_file``: writing the fitted numbers and their sources into ``h200.toml``.
"""
