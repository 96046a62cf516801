"""``@pytest.mark.neuron_profile(...)``: its arguments, validated, and the plan of one profiled
test they make together with the session's options."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping

from ..costmodel.profiles import available_hardware
from ..defaults import DEFAULT_EXECUTION, DEFAULT_ROUNDS
from ..errors import ConfigError
from ..gate.compare import GatePolicy
from ..gate.stats import min_rounds
from ..values import parse_count, parse_fraction, validate_choice
from ..vocabulary import EXECUTIONS
from .options import Options

MARKER = "neuron_profile"
MARKER_ARGS = ("threshold", "hardware", "execution", "hotspots", "min_share", "ops", "allow",
               "rounds", "warmup")
MARKER_SIGNATURE = (f"{MARKER}(threshold=None, hardware=None, execution=None, hotspots=None, "
                    "min_share=None, ops=None, allow=None, rounds=None, warmup=None)")


@dataclass
class TestPlan:
    """What to do for one profiled test, decided from its marker and the options."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    hardware: str
    policy: GatePolicy
    execution: str = DEFAULT_EXECUTION  # the simulated backend's: eager or graph
    rounds: int = 1  # measured rounds: the test body runs warmup + rounds times
    warmup: int = 0
    measured: bool = False  # a measured backend: per-round samples and the significance test


def policy_from_marker(base: GatePolicy, kwargs: Mapping[str, Any]) -> GatePolicy:
    """Apply ``@pytest.mark.neuron_profile(...)`` arguments to the session's policy, each read by
    the parser of its kind (values.py), as options and ini values are.

    Raises ConfigError naming the argument when one is unknown or has a wrong type."""
    unknown = sorted(set(kwargs) - set(MARKER_ARGS))
    if unknown:
        raise ConfigError(f"neuron_profile: unknown argument(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(MARKER_ARGS)}")
    changes: dict[str, Any] = {}
    if "threshold" in kwargs:
        changes["threshold"] = parse_fraction("neuron_profile threshold", kwargs["threshold"])
    if "min_share" in kwargs:
        changes["min_share"] = parse_fraction("neuron_profile min_share", kwargs["min_share"], high=1.0)
    if "hotspots" in kwargs:
        changes["hotspots"] = parse_count("neuron_profile hotspots", kwargs["hotspots"], 0)
    if "ops" in kwargs:
        ops = kwargs["ops"]
        if not isinstance(ops, Mapping):
            raise ConfigError(f"neuron_profile ops={ops!r}: expected a dict of per-op thresholds, "
                              "e.g. ops={'aten::mm': 0.02}")
        changes["ops"] = {str(op): parse_fraction(f"neuron_profile ops[{op!r}]", t) for op, t in ops.items()}
    if "allow" in kwargs:
        allow = kwargs["allow"]
        if not isinstance(allow, Mapping) or not all(
                isinstance(reason, str) and reason.strip() for reason in allow.values()):
            raise ConfigError(f"neuron_profile allow={allow!r}: expected a dict of op -> reason, "
                              "e.g. allow={'aten::cat': 'new KV cache layout, see #123'}")
        changes["allow"] = {str(op): reason for op, reason in allow.items()}
    for name, minimum in (("rounds", 1), ("warmup", 0)):
        if name in kwargs:
            parse_count(f"neuron_profile {name}", kwargs[name], minimum)
    if "hardware" in kwargs:
        validate_choice("neuron_profile hardware", kwargs["hardware"], available_hardware())
    if "execution" in kwargs:
        validate_choice("neuron_profile execution", kwargs["execution"], EXECUTIONS)
    return replace(base, **changes)


def unknown_op_names(kwargs: Mapping[str, Any], known: Collection[str]) -> str | None:
    """The marker's ``ops=`` and ``allow=`` must name ops of the test's profile or baseline: a
    name that names nothing (``"mm"`` for ``"aten::mm"``) would silently never apply. The problem,
    naming the argument and the closest op names, or None."""
    import difflib

    for argument in ("ops", "allow"):
        for name in kwargs.get(argument) or {}:
            name = str(name)
            if name in known:
                continue
            close = sorted(k for k in known if k.split("::")[-1] == name.split("::")[-1])
            close += [k for k in difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
                      if k not in close]
            hint = f"; did you mean {' or '.join(map(repr, close[:3]))}?" if close else \
                f"; its ops are {', '.join(sorted(known)[:8]) or 'none'}"
            return f"neuron_profile {argument}: {name!r} names no op of this test's profile or baseline{hint}"
    return None


def make_plan(options: Options, marker_kwargs: Mapping[str, Any]) -> TestPlan:
    """The plan of a test with these marker arguments. Raises ConfigError naming a bad one."""
    policy = policy_from_marker(options.policy, marker_kwargs)
    hardware = marker_kwargs.get("hardware", options.hardware)
    execution = marker_kwargs.get("execution", options.execution)
    if not options.measured:  # exact: one round, no warmup
        return TestPlan(hardware=hardware, policy=policy, execution=execution)
    default_rounds, default_warmup = DEFAULT_ROUNDS[options.backend]
    rounds = parse_count("neuron_profile rounds", marker_kwargs["rounds"], 1) \
        if "rounds" in marker_kwargs else options.rounds or default_rounds
    warmup = parse_count("neuron_profile warmup", marker_kwargs["warmup"], 0) \
        if "warmup" in marker_kwargs else options.warmup if options.warmup is not None else default_warmup
    fewest = min_rounds(policy.alpha)
    if rounds < fewest:
        source = "neuron_profile rounds" if "rounds" in marker_kwargs else "--neuron-rounds"
        raise ConfigError(
            f"{source}={rounds}: the {options.backend} backend needs at least {fewest} "
            f"rounds for a change to be significant at alpha={policy.alpha:g} (with {rounds}, "
            "no regression could ever be called)")
    return TestPlan(hardware=hardware, policy=policy, execution=execution, rounds=rounds,
                    warmup=warmup, measured=True)
