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
from .compare import GatePolicy

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
