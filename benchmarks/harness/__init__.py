"""The published-figure harness: AWS's published Trainium / Inferentia figures against the
simulated NeuronCore, shaped like the library it measures.

* ``rows``: the data files (``benchmarks/data``), a row's label, category, hardware profile,
  compiler flags and the rows the methodology drops (with their reasons);
* ``workloads``: one module per family of workloads (``encoders``, ``vision``, ``decoders``,
  ``training``, ``kernels``; ``parallel`` holds the tensor-parallel collectives), each rebuilding
  the model a row ran on ``meta`` tensors, with the host inputs and outputs the published
  harness transfers;
* ``compare``: the one place that turns a row into a comparison: what the published figure
  counts (``Figure``: one request's whole time, a per-core time with requests in flight, an
  optimizer step, a device time) and the simulated figure that counts the same;
* ``report``: the tables, summaries, regression-size pairs and targets.

``benchmarks/published.py`` is its command line; ``benchmarks/fit_trn.py`` fits on it.
"""
