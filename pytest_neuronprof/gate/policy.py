"""The gate policy a test is judged by, resolved in one place: its backend's defaults
(``defaults.BACKEND_TABLE``), then overrides on top, in order. The plugin's options, the marker
and `neuronprof compare` all ask here (the command per entry, from the entry's backend: a
directory may hold several), so the same numbers get the same verdict wherever they are judged.

Overrides are already parsed (each caller parses its own inputs, so that an error names the
option, marker argument or command-line flag it came from).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Mapping

from ..defaults import BACKEND_TABLE, DEFAULT_THRESHOLD
from ..formatting import format_bytes
from .compare import POLICY_PREFIX, Finding, GatePolicy, Kind

POLICY_FIELDS = tuple(f.name for f in fields(GatePolicy))


def resolve_policy(backend: str, *overrides: Mapping[str, Any]) -> GatePolicy:
    """The policy of a test on ``backend``: the backend's default threshold, then each mapping
    of ``overrides`` (GatePolicy field -> value; None: not given), later ones winning (the
    options', then the marker's). A backend this version does not know (a file written by a
    newer one) gets the common default threshold."""
    facts = BACKEND_TABLE.get(backend)
    policy = GatePolicy(threshold=facts.threshold if facts else DEFAULT_THRESHOLD)
    for layer in overrides:
        unknown = sorted(set(layer) - set(POLICY_FIELDS))
        if unknown:  # a caller's bug, not a user's: the callers pass field names
            raise TypeError(f"resolve_policy: not GatePolicy fields: {', '.join(unknown)}")
        policy = replace(policy, **{name: value for name, value in layer.items() if value is not None})
    return policy


def describe_policies(policies: Mapping[str, GatePolicy]) -> str:
    """Policies by backend in a line: one policy's description when they agree, else each
    backend's (``"simulated: threshold 10%, ...; cpu: threshold 15%, ..."``)."""
    first = next(iter(policies.values()), GatePolicy())
    if all(policy == first for policy in policies.values()):  # GatePolicy holds dicts: no set()
        return first.describe()
    return "; ".join(f"{backend}: {policy.describe()}" for backend, policy in sorted(policies.items()))


def marker_layer(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A marker's policy as a summary keeps it (``ProfileSummary.policy``) made into
    ``resolve_policy``'s overrides (GatePolicy field -> value): its memory limit labelled as the
    marker gives it."""
    layer = dict(policy)
    if "memory_limit" in layer:
        layer["memory_limit_label"] = f"memory_limit={format_bytes(layer['memory_limit'])}"
    return layer


def loosened(before: GatePolicy, after: GatePolicy) -> tuple[Finding, ...]:
    """The settings in which ``after`` gates less than ``before`` (a higher threshold, fewer
    hotspots, an op newly allowed, a higher or no memory limit, ...), as Kind.POLICY findings:
    the two values and, for an allowance, its reason. Tighter settings are not listed: they only
    gate more."""
    found: list[Finding] = []

    def add(name: str, old: float, new: float, note: str = "") -> None:
        found.append(Finding(Kind.POLICY, POLICY_PREFIX + name, "", old, new, 0.0,
                             "gates less than the baseline entry's" + (f" ({note})" if note else "")))

    for name in ("threshold", "min_share", "memory_threshold"):
        if getattr(after, name) > getattr(before, name):
            add(name, getattr(before, name), getattr(after, name))
    if after.hotspots < before.hotspots:
        add("hotspots", before.hotspots, after.hotspots)
    if before.memory_limit is not None and (after.memory_limit is None
                                            or after.memory_limit > before.memory_limit):
        add("memory_limit", before.memory_limit, after.memory_limit or 0)
    for op in sorted(set(before.ops) | set(after.ops)):
        if after.threshold_for(op) > before.threshold_for(op) and op in after.ops:
            add(f"ops[{op!r}]", before.threshold_for(op), after.threshold_for(op))
        elif op in before.ops and op not in after.ops and after.threshold > before.ops[op]:
            add(f"ops[{op!r}]", before.ops[op], after.threshold, "removed: the test's threshold applies")
    for op in sorted(set(after.allow) - set(before.allow)):
        add(f"allow[{op!r}]", 0, 1, f"newly allowed: {after.allow[op]}")
    return tuple(found)


def strictest(before: GatePolicy, after: GatePolicy) -> GatePolicy:
    """``after`` with each setting that gates less than ``before``'s taken from ``before``: what
    a run is gated by when a change loosened its marker without a reason (``loosened``)."""
    if before.memory_limit is None or (after.memory_limit is not None
                                       and after.memory_limit <= before.memory_limit):
        limit, label = after.memory_limit, after.memory_limit_label
    else:
        limit, label = before.memory_limit, before.memory_limit_label
    return replace(after,
                   threshold=min(before.threshold, after.threshold),
                   hotspots=max(before.hotspots, after.hotspots),
                   min_share=min(before.min_share, after.min_share),
                   memory_threshold=min(before.memory_threshold, after.memory_threshold),
                   memory_limit=limit, memory_limit_label=label,
                   ops={op: min(before.threshold_for(op), after.threshold_for(op))
                        for op in set(before.ops) | set(after.ops)},
                   allow={op: why for op, why in after.allow.items() if op in before.allow})
