"""``@pytest.mark.neuron_profile(...)``: its arguments, validated, and the plan of one profiled
test they make together with the session's options."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Collection, Mapping

from ..defaults import DEFAULT_AUTO_CAST, DEFAULT_EXECUTION
from ..errors import ConfigError
from ..safetext import quoted
from ..values import parse_count, parse_fraction, parse_size, reason_problem, validate_choice
from ..vocabulary import AUTO_CASTS, EXECUTIONS, SIMULATED
from .options import Options, parse_chips

if TYPE_CHECKING:  # the gate loads when a test's plan is made: a session without one never does
    from ..gate.compare import GatePolicy

MARKER = "neuron_profile"
MARKER_ARGS = ("threshold", "hardware", "execution", "auto_cast", "hotspots", "min_share", "ops",
               "allow", "rounds", "warmup", "memory_threshold", "memory_limit", "world_size")
MARKER_SIGNATURE = (f"{MARKER}(threshold=None, hardware=None, execution=None, auto_cast=None, "
                    "hotspots=None, min_share=None, ops=None, allow=None, rounds=None, warmup=None, "
                    "memory_threshold=None, memory_limit=None, world_size=None)")


@dataclass
class TestPlan:
    """What to do for one profiled test, decided from its marker and the options."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    hardware: str
    policy: GatePolicy
    execution: str = DEFAULT_EXECUTION  # the simulated backend's: eager or graph
    auto_cast: str = DEFAULT_AUTO_CAST  # neuronx-cc's --auto-cast, for graph execution
    rounds: int = 1  # measured rounds: the test body runs warmup + rounds times
    warmup: int = 0
    measured: bool = False  # a measured backend: per-round samples and the significance test
    # Several chips (simulated backend): every chip the test is costed and gated on, hardware
    # first, from one capture; () for one chip.
    chips: tuple[str, ...] = ()
    # The marker's arguments that decide verdicts, as parsed: recorded with the numbers
    # (ProfileSummary.policy), so a change that loosens them is seen against a base.
    marker_policy: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MarkerArgs:
    """A marker's arguments, each parsed once (None: not given)."""

    policy: Mapping[str, Any]  # GatePolicy field -> value: resolve_policy's overrides
    hardware: str | None = None
    chips: tuple[str, ...] = ()  # hardware="trn2,h200" or a list: every chip, hardware first
    execution: str | None = None
    auto_cast: str | None = None
    rounds: int | None = None
    warmup: int | None = None
    world_size: int | None = None  # the simulated process group the test runs in (distributed.py)


def parse_world_size(kwargs: Mapping[str, Any], backend: str = SIMULATED) -> int | None:
    """The marker's ``world_size=``: the ranks of the simulated process group the test runs in
    as rank 0 (plugin/distributed.py); None when not given. Raises ConfigError naming it."""
    if "world_size" not in kwargs:
        return None
    ranks = parse_count("neuron_profile world_size", kwargs["world_size"], 1)
    if backend != SIMULATED:
        raise ConfigError(
            f"neuron_profile world_size={ranks}: a simulated process group needs the simulated "
            f"backend (the {backend} backend measures what runs here, and the group's "
            "collectives exchange nothing); profile the test with --neuron-backend simulated, or "
            "make a real process group in the test (torchrun, gloo) without world_size=")
    return ranks


def parse_marker(kwargs: Mapping[str, Any], backend: str = SIMULATED) -> MarkerArgs:
    """``@pytest.mark.neuron_profile(...)`` arguments, each read by the parser of its kind
    (values.py), as options and ini values are.

    Raises ConfigError naming the argument when one is unknown or has a wrong type."""
    unknown = sorted(set(kwargs) - set(MARKER_ARGS))
    if unknown:
        raise ConfigError(f"neuron_profile: unknown argument(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(MARKER_ARGS)}")
    policy: dict[str, Any] = {}
    if "threshold" in kwargs:
        policy["threshold"] = parse_fraction("neuron_profile threshold", kwargs["threshold"])
    if "min_share" in kwargs:
        policy["min_share"] = parse_fraction("neuron_profile min_share", kwargs["min_share"], high=1.0)
    if "hotspots" in kwargs:
        policy["hotspots"] = parse_count("neuron_profile hotspots", kwargs["hotspots"], 0)
    if "memory_threshold" in kwargs:
        policy["memory_threshold"] = parse_fraction("neuron_profile memory_threshold",
                                                    kwargs["memory_threshold"])
    if "memory_limit" in kwargs:  # as pytest-memray's limit_memory("16 GiB")
        policy["memory_limit"] = parse_size("neuron_profile memory_limit", kwargs["memory_limit"])
    if "ops" in kwargs:
        ops = kwargs["ops"]
        if not isinstance(ops, Mapping):
            raise ConfigError(f"neuron_profile ops={ops!r}: expected a dict of per-op thresholds, "
                              "e.g. ops={'aten::mm': 0.02}")
        policy["ops"] = {str(op): parse_fraction(f"neuron_profile ops[{op!r}]", t) for op, t in ops.items()}
    if "allow" in kwargs:
        allow = kwargs["allow"]
        if not isinstance(allow, Mapping) or not all(isinstance(reason, str) for reason in allow.values()):
            raise ConfigError(f"neuron_profile allow={allow!r}: expected a dict of op -> reason, "
                              "e.g. allow={'aten::cat': 'new KV cache layout, see #123'}")
        for op, reason in allow.items():
            problem = reason_problem(reason)
            if problem:
                raise ConfigError(f"neuron_profile allow[{op!r}]={quoted(reason)}: no reason a person "
                                  f"can read ({problem}); say why the op may change, e.g. "
                                  "allow={'aten::cat': 'new KV cache layout, see #123'}")
        policy["allow"] = {str(op): reason for op, reason in allow.items()}
    counts = {name: parse_count(f"neuron_profile {name}", kwargs[name], minimum)
              for name, minimum in (("rounds", 1), ("warmup", 0)) if name in kwargs}
    chips = parse_chips("neuron_profile hardware", kwargs["hardware"], backend) if "hardware" in kwargs else ()
    return MarkerArgs(
        policy=policy,
        hardware=chips[0] if chips else None,
        chips=chips if len(chips) > 1 else (),
        execution=validate_choice("neuron_profile execution", kwargs["execution"], EXECUTIONS)
        if "execution" in kwargs else None,
        auto_cast=validate_choice("neuron_profile auto_cast", kwargs["auto_cast"], AUTO_CASTS)
        if "auto_cast" in kwargs else None,
        world_size=parse_world_size(kwargs, backend),
        **counts)


def policy_from_marker(base: GatePolicy, kwargs: Mapping[str, Any]) -> GatePolicy:
    """``base`` with a marker's policy arguments on top (the plugin resolves a test's policy with
    ``resolve_policy``; this is the same step on a given policy). Raises ConfigError as
    ``parse_marker`` does."""
    from ..gate.policy import marker_layer

    return replace(base, **marker_layer(parse_marker(kwargs).policy))


def unknown_op_names(kwargs: Mapping[str, Any], known: Collection[str]) -> str | None:
    """The marker's ``ops=`` and ``allow=`` must name ops of the test's profile or baseline: a
    name that names nothing (``"mm"`` for ``"aten::mm"``) would silently never apply. The problem,
    naming the argument and the closest op names, or None."""
    import difflib

    from ..gate.compare import PEAK

    for argument in ("ops", "allow"):
        for name in kwargs.get(argument) or {}:
            name = str(name)
            if name in known or (argument == "allow" and name == PEAK):  # the peak's own allowance
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
    from ..gate.policy import marker_layer, resolve_policy
    from ..gate.stats import min_rounds

    marker = parse_marker(marker_kwargs, options.backend)
    policy = resolve_policy(options.backend, options.policy_overrides, marker_layer(marker.policy))
    hardware = marker.hardware or options.hardware
    chips = marker.chips if marker.hardware else options.chips  # the marker's list replaces the option's
    execution = marker.execution or options.execution
    auto_cast = marker.auto_cast or options.auto_cast
    facts = options.facts
    recorded = dict(marker.policy)
    if not facts.measured:  # exact: one round, no warmup
        return TestPlan(hardware=hardware, policy=policy, execution=execution, auto_cast=auto_cast,
                        chips=chips, marker_policy=recorded)
    rounds = marker.rounds or options.rounds or facts.rounds
    warmup = next(w for w in (marker.warmup, options.warmup, facts.warmup) if w is not None)
    fewest = min_rounds(policy.alpha)
    if rounds < fewest:
        source = "neuron_profile rounds" if marker.rounds else "--neuron-rounds"
        raise ConfigError(
            f"{source}={rounds}: the {options.backend} backend needs at least {fewest} "
            f"rounds for a change to be significant at alpha={policy.alpha:g} (with {rounds}, "
            "no regression could ever be called)")
    return TestPlan(hardware=hardware, policy=policy, execution=execution, auto_cast=auto_cast,
                    rounds=rounds, warmup=warmup, measured=True, marker_policy=recorded)
