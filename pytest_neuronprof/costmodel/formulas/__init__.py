"""The built-in cost formulas: which NeuronCore engine runs each ATen op, and how much work and
traffic it has, one module per op family. ``registry.py`` registers them all when it is imported
(in the manner of ``torch.utils.flop_counter``); ``roofline.py`` turns an OpCost into device
time for a hardware profile. To add a formula, open the module of its family:

- ``matmul``: matrix products and convolutions (TensorE), products with a sparse operand
- ``attention``: fused scaled dot-product attention and the fused transformer inference paths
- ``pointwise``: activations, elementwise arithmetic, reductions, softmax, norms, optimizer steps
- ``indexing``: gathers, scatters, masks, sort, iota, random numbers (GpSimd)
- ``copies``: copies, padding, materialized views (DMA), and the free ops
- ``pooling``: pooling, resampling and FFT
- ``collectives``: torch.distributed's collectives
- ``foreach``: the ``_foreach_*`` ops, as their single op on each element (registered last)

and declare it there with ``@FAMILY.cost(ops)`` (``FAMILY.free(ops)`` for an op that costs
nothing); ``common`` holds what the families share. A family module registers nothing itself, so
what is registered does not depend on what was imported first.

Formulas receive the op's arguments by schema name (tensors as TensorMeta) and ``outputs``; the
generic ones (``**args``) take every tensor argument as read, in schema order.
"""
