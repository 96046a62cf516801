"""``@pytest.mark.neuron_profile(...)``: its arguments, validated, and the plan of one profiled
test they make together with the session's options."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..costmodel.profiles import available_hardware
from ..defaults import DEFAULT_ROUNDS
from ..errors import ConfigError
from ..gate.compare import GatePolicy
from ..gate.stats import min_rounds
from ..values import validate_choice
from .options import Options

MARKER = "neuron_profile"
MARKER_ARGS = ("threshold", "hardware", "hotspots", "min_share", "ops", "allow", "rounds", "warmup")
MARKER_SIGNATURE = (f"{MARKER}(threshold=None, hardware=None, hotspots=None, min_share=None, "
                    "ops=None, allow=None, rounds=None, warmup=None)")


@dataclass
class TestPlan:
    """What to do for one profiled test, decided from its marker and the options."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    hardware: str
    policy: GatePolicy
    rounds: int = 1  # measured rounds: the test body runs warmup + rounds times
    warmup: int = 0
    measured: bool = False  # a measured backend: per-round samples and the significance test


def _fraction(name: str, value: Any, low: float = 0.0, high: float = math.inf) -> float:
    try:  # float() first: an int too large for a float (10**400) raises OverflowError
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number) or not low <= number <= high:
        raise ConfigError(f"{name}={value!r}: expected a number between {low} and {high} "
                          "(a relative change: 0.05 means 5 %)")
    return number


def policy_from_marker(base: GatePolicy, kwargs: Mapping[str, Any]) -> GatePolicy:
    """Apply ``@pytest.mark.neuron_profile(...)`` arguments to the session's policy.

    Raises ConfigError naming the argument when one is unknown or has a wrong type."""
    unknown = sorted(set(kwargs) - set(MARKER_ARGS))
    if unknown:
        raise ConfigError(f"neuron_profile: unknown argument(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(MARKER_ARGS)}")
    changes: dict[str, Any] = {}
    if "threshold" in kwargs:
        changes["threshold"] = _fraction("neuron_profile threshold", kwargs["threshold"])
    if "min_share" in kwargs:
        changes["min_share"] = _fraction("neuron_profile min_share", kwargs["min_share"], high=1.0)
    if "hotspots" in kwargs:
        value = kwargs["hotspots"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"neuron_profile hotspots={value!r}: expected a whole number >= 0 "
                              "(how many of the top ops are gated)")
        changes["hotspots"] = value
    if "ops" in kwargs:
        ops = kwargs["ops"]
        if not isinstance(ops, Mapping):
            raise ConfigError(f"neuron_profile ops={ops!r}: expected a dict of per-op thresholds, "
                              "e.g. ops={'aten::mm': 0.02}")
        changes["ops"] = {str(op): _fraction(f"neuron_profile ops[{op!r}]", t) for op, t in ops.items()}
    if "allow" in kwargs:
        allow = kwargs["allow"]
        if not isinstance(allow, Mapping) or not all(
                isinstance(reason, str) and reason.strip() for reason in allow.values()):
            raise ConfigError(f"neuron_profile allow={allow!r}: expected a dict of op -> reason, "
                              "e.g. allow={'aten::cat': 'new KV cache layout, see #123'}")
        changes["allow"] = {str(op): reason for op, reason in allow.items()}
    for name in ("rounds", "warmup"):
        if name in kwargs:
            value = kwargs[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "rounds" else 0):
                raise ConfigError(f"neuron_profile {name}={value!r}: expected a whole number "
                                  f">= {1 if name == 'rounds' else 0}")
    if "hardware" in kwargs and not isinstance(kwargs["hardware"], str):
        raise ConfigError(f"neuron_profile hardware={kwargs['hardware']!r}: expected a profile name")
    return replace(base, **changes)


def make_plan(options: Options, marker_kwargs: Mapping[str, Any]) -> TestPlan:
    """The plan of a test with these marker arguments. Raises ConfigError naming a bad one."""
    policy = policy_from_marker(options.policy, marker_kwargs)
    hardware = marker_kwargs.get("hardware", options.hardware)
    validate_choice("neuron_profile hardware", hardware, available_hardware())
    if not options.measured:
        return TestPlan(hardware=hardware, policy=policy)  # exact: one round, no warmup
    default_rounds, default_warmup = DEFAULT_ROUNDS[options.backend]
    rounds = marker_kwargs.get("rounds", options.rounds or default_rounds)
    warmup = marker_kwargs.get("warmup", options.warmup if options.warmup is not None
                               else default_warmup)
    fewest = min_rounds(policy.alpha)
    if rounds < fewest:
        source = "neuron_profile rounds" if "rounds" in marker_kwargs else "--neuron-rounds"
        raise ConfigError(
            f"{source}={rounds}: the {options.backend} backend needs at least {fewest} "
            f"rounds for a change to be significant at alpha={policy.alpha:g} (with {rounds}, "
            "no regression could ever be called)")
    return TestPlan(hardware=hardware, policy=policy, rounds=rounds, warmup=warmup, measured=True)
