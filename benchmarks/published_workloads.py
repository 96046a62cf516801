"""The published-figure workloads under their old module name, for the scripts that import it
(``overhead.py``'s Llama forward, ``probe_collectives.py``'s Megatron f / g). They live in
``benchmarks/harness/workloads/``, one module per family; new code imports from there."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from harness.workloads import *  # noqa: E402,F401,F403
from harness.workloads import build, model_family, oplevel_config, parse_config  # noqa: E402,F401
from harness.workloads.decoders import DECODERS, cache_kwarg as _cache_kwarg, decoder_model  # noqa: E402,F401
from harness.workloads.encoders import ENCODERS, encoder_model  # noqa: E402,F401
from harness.workloads.parallel import (_CopyToTP, _ReduceFromTP, all_gather, all_reduce,  # noqa: E402,F401
                                        ensure_tp_group)
from harness.workloads.vision import RESNETS, VGG_CFGS, vision_model  # noqa: E402,F401
