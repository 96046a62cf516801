"""ProfileSummary: the per-op numbers of one profiled test that baselines store and the gate
compares. Built from a ProfileResult; plain data, no torch, no I/O."""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from json.encoder import encode_basestring_ascii

from ..defaults import DEFAULT_AUTO_CAST, MAX_ENTRY_REASON_CHARS
from ..jsontext import Rendered, encode_at
from ..profiler.result import heaviest, tally
from ..safetext import quoted
from ..vocabulary import (AUTO_CASTS, BOUND_NONE, BOUNDS, EAGER, EXECUTIONS, RECOMPUTE, SIMULATED,
                          Engine)
from .decode import FLOAT_MAX, Decoder
from .graphs import GraphSummary, summarize_graphs
from .memory import MemorySummary, summarize_memory

# Fixed rounding, so re-recording unchanged code gives byte-identical baseline files.
TIME_DECIMALS = 4
SHARE_DECIMALS = 6
SAMPLE_DECIMALS = 3  # per-round samples of measured backends: a nanosecond is plenty


_ALL_IN_MODULE: Mapping[str, float] = {}  # shared, never changed: all of an op's time in ``module``


@dataclass(frozen=True, slots=True)  # slots: a million ops of a large baseline, 90 bytes each
class OpSummary:
    count: int
    device_time_us: float
    engine: str
    flops: int
    bytes: int
    share: float
    module: str = ""  # the module path where this op spent most of its device time
    # Device time per module path ("" outside any module). Left empty, only ``module`` is known
    # (a baseline recorded before schema version 3): all of the time is taken to be there.
    # Read it through ``breakdown()``: all of the time in one module is kept as no breakdown.
    modules: Mapping[str, float] = field(default_factory=dict)
    recomputed: int = 0  # calls that recomputed a checkpointed forward during backward
    uncosted: bool = False  # costed by the fallback: the cost model does not know this op
    # What bounds the calls that carry most of its device time (one of vocabulary.BOUNDS), and
    # the dtype of its calls' first tensor input, most time-weighted ("" without one). Both ""
    # when unknown: a baseline recorded before schema version 4.
    bound: str = ""
    dtype: str = ""
    # A collective's (schema 7; 0, 0 and "" for other ops, and their entries have no such keys):
    # the ranks of the group of the calls that carry most of its time, the bytes its calls sent
    # over the links (not HBM), and the algorithm the runtime picked for those calls.
    ranks: int = 0
    link_bytes: int = 0
    algorithm: str = ""

    def __post_init__(self) -> None:
        modules = self.modules
        if len(modules) == 1:
            ((path, us),) = modules.items()
            if us == self.device_time_us and self.module in ("", path):
                # Most ops: a dict per op was 40 % of a large baseline's memory.
                object.__setattr__(self, "module", path)
                modules = {}
        if not modules:
            object.__setattr__(self, "modules", _ALL_IN_MODULE)
        elif not self.module:
            object.__setattr__(self, "module", top_module(modules))

    def breakdown(self) -> Mapping[str, float]:
        """Device time per module path."""
        return self.modules or {self.module: self.device_time_us}

    def where(self, limit: int = 3) -> str:
        """Every module the op ran in, most time first ("mlp.up, mlp.down"; "+N more" past
        ``limit``; "" outside modules): the one attribution every table shows, not only the
        module with the most time."""
        if not self.modules:
            return self.module
        paths = [path or "-" for path, _ in sorted(self.modules.items(), key=lambda m: (-m[1], m[0]))]
        return ", ".join(paths[:limit]) + (f", +{len(paths) - limit} more" if len(paths) > limit else "")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "count": self.count,
            "device_time_us": round(self.device_time_us, TIME_DECIMALS),
            "engine": self.engine,
            "flops": self.flops,
            "bytes": self.bytes,
            "share": round(self.share, SHARE_DECIMALS),
            "modules": {path: round(us, TIME_DECIMALS) for path, us in sorted(self.breakdown().items())},
            "bound": self.bound,
            "dtype": self.dtype,
        }
        if self.recomputed:
            data["recomputed"] = self.recomputed
        if self.uncosted:
            data["uncosted"] = True
        if self.collective:
            data["ranks"], data["link_bytes"], data["algorithm"] = (self.ranks, self.link_bytes,
                                                                    self.algorithm)
        return data

    @property
    def collective(self) -> bool:
        """A collective (its entry keeps ranks, link_bytes and algorithm)."""
        return bool(self.ranks or self.link_bytes or self.algorithm)

    def rendered(self, pad: str) -> str:
        """``to_json()`` as ``jsontext.dumps`` writes it at the indentation ``pad``, without the
        dict (a large baseline file has a million ops); anything but the plain types the file
        holds (exact ints, finite floats, strings) goes through ``to_json`` and ``dumps``."""
        time_us, share = round(self.device_time_us, TIME_DECIMALS), round(self.share, SHARE_DECIMALS)
        modules = [(path, round(us, TIME_DECIMALS)) for path, us in sorted(self.breakdown().items())]
        if not (type(self.count) is int and type(self.flops) is int and type(self.bytes) is int
                and type(self.recomputed) is int and type(self.engine) is str
                and type(self.bound) is str and type(self.dtype) is str
                and type(time_us) is float and time_us - time_us == 0.0
                and type(share) is float and share - share == 0.0
                and (self.uncosted is True or self.uncosted is False)
                and all(type(path) is str and type(us) is float and us - us == 0.0 for path, us in modules)
                and not self.collective):  # a collective's few entries: the general path
            return encode_at(self.to_json(), pad)
        inner = pad + "  "
        deeper = inner + "  "
        lines = (f'"bound": {encode_basestring_ascii(self.bound)}',
                 f'"bytes": {int.__repr__(self.bytes)}',
                 f'"count": {int.__repr__(self.count)}',
                 f'"device_time_us": {float.__repr__(time_us)}',
                 f'"dtype": {encode_basestring_ascii(self.dtype)}',
                 f'"engine": {encode_basestring_ascii(self.engine)}',
                 f'"flops": {int.__repr__(self.flops)}',
                 '"modules": {\n' + deeper + (",\n" + deeper).join(
                     f"{encode_basestring_ascii(path)}: {float.__repr__(us)}" for path, us in modules)
                 + "\n" + inner + "}",
                 *((f'"recomputed": {int.__repr__(self.recomputed)}',) if self.recomputed else ()),
                 f'"share": {float.__repr__(share)}',
                 *(('"uncosted": true',) if self.uncosted else ()))
        return "{\n" + inner + (",\n" + inner).join(lines) + "\n" + pad + "}"

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str, legacy: bool = False) -> "OpSummary":
        """``legacy``: the form before schema version 3, with one ``module`` and no breakdown."""
        fast = _op_fast(data, legacy)
        if fast is not None:
            return fast
        check.mapping(where, data)
        check.known_keys(where, data, _LEGACY_OP_KEYS if legacy
                         else _OP_KEYS | _OPTIONAL_OP_KEYS | COLLECTIVE_OP_KEYS)
        if legacy:
            module, modules = check.string(f"{where}.module", data.get("module")), {}
        else:
            module = ""
            modules = {check.string(f"{where}.modules key", path): check.number(f"{where}.modules[{path!r}]", us)
                       for path, us in check.mapping(f"{where}.modules", data.get("modules")).items()}
        uncosted = data.get("uncosted", False)
        if uncosted is not False and uncosted is not True:
            raise check.fail(f"{where}.uncosted should be true or left out, got {uncosted!r:.40}")
        # Left out before schema version 4: unknown ("").
        bound = sys.intern(check.string(f"{where}.bound", data.get("bound", "")))
        if bound not in _READABLE_BOUNDS:
            raise check.fail(f"{where}.bound is {quoted(bound)}, expected one of "
                             f"{', '.join(BOUNDS)} (or left out)")
        dtype = sys.intern(check.string(f"{where}.dtype", data.get("dtype", "")))
        algorithm = check.string(f"{where}.algorithm", data.get("algorithm", ""))
        if algorithm and not _ALGORITHM.fullmatch(algorithm):
            raise check.fail(f"{where}.algorithm is {quoted(algorithm)}, expected one of "
                             f"{', '.join(ALGORITHMS)}, or two joined by '+' (within and between "
                             "instances)")
        return cls(
            count=check.whole(f"{where}.count", data.get("count")),
            device_time_us=check.number(f"{where}.device_time_us", data.get("device_time_us")),
            engine=check.string(f"{where}.engine", data.get("engine")),
            flops=check.whole(f"{where}.flops", data.get("flops")),
            bytes=check.whole(f"{where}.bytes", data.get("bytes")),
            share=check.number(f"{where}.share", data.get("share")),
            module=module,
            modules=modules,
            recomputed=check.whole(f"{where}.recomputed", data.get("recomputed", 0)),
            uncosted=uncosted,
            bound=bound,
            dtype=dtype,
            ranks=check.whole(f"{where}.ranks", data.get("ranks", 0)),
            link_bytes=check.whole(f"{where}.link_bytes", data.get("link_bytes", 0)),
            algorithm=sys.intern(algorithm),
        )


def top_module(modules: Mapping[str, float]) -> str:
    """The module with the most time; ties by name, so the choice is deterministic."""
    if len(modules) == 1:  # most ops: no key function to call
        return next(iter(modules))
    return min(modules.items(), key=lambda m: (-m[1], m[0]))[0] if modules else ""


_OP_KEYS = frozenset({"count", "device_time_us", "engine", "flops", "bytes", "share", "modules"})
# bound and dtype: written since schema version 4, optional when reading (older files); a
# collective's ranks, link_bytes and algorithm since 7, only in its own entries.
_OPTIONAL_OP_KEYS = frozenset({"recomputed", "uncosted", "bound", "dtype"})
COLLECTIVE_OP_KEYS = frozenset({"ranks", "link_bytes", "algorithm"})
# The algorithms the runtime picks (costmodel/profiles.Collectives.algorithm_of), "none" for no
# ranks within an instance, "p2p" for a point-to-point transfer; across instances two of them.
ALGORITHMS = ("mesh", "rdh", "ring", "none", "p2p")
_ALGORITHM = re.compile(rf"(?:{'|'.join(ALGORITHMS)})(?:\+(?:{'|'.join(ALGORITHMS)}))?")
_READABLE_BOUNDS = frozenset((*BOUNDS, ""))  # "": unknown (written so from an older file)
_TYPED_OP_KEYS = _OP_KEYS | {"bound", "dtype"}  # as schema version 4 writes most ops
_LEGACY_OP_KEYS = frozenset({"count", "device_time_us", "engine", "flops", "bytes", "share", "module"})


def _op_fast(op: Any, legacy: bool) -> OpSummary | None:
    """The common, valid case without per-field error bookkeeping (2,000 tests x 30 ops parse in
    a fraction of a second); None sends the entry to the checks that explain what is wrong."""
    if type(op) is not dict:
        return None
    keys = op.keys()
    if legacy:
        if keys != _LEGACY_OP_KEYS:
            return None
        bound = dtype = ""
    elif keys == _TYPED_OP_KEYS:
        bound, dtype = op["bound"], op["dtype"]
        if type(bound) is not str or type(dtype) is not str or bound not in _READABLE_BOUNDS:
            return None
        bound, dtype = sys.intern(bound), sys.intern(dtype)  # a handful of names each
    elif keys == _OP_KEYS:
        bound = dtype = ""
    else:
        return None
    count, time_us, flops, nbytes, share = (op["count"], op["device_time_us"], op["flops"],
                                            op["bytes"], op["share"])
    if not (type(count) is int and type(flops) is int and type(nbytes) is int
            and type(time_us) in (int, float) and type(share) in (int, float)
            and type(op["engine"]) is str
            and 0 <= count <= FLOAT_MAX and 0 <= flops <= FLOAT_MAX and 0 <= nbytes <= FLOAT_MAX
            and 0 <= time_us <= FLOAT_MAX and 0 <= share <= FLOAT_MAX):
        return None
    engine = sys.intern(op["engine"])  # a handful of names, once each rather than once per op
    if legacy:
        if type(op["module"]) is not str:
            return None
        return OpSummary(count, float(time_us), engine, flops, nbytes, float(share), op["module"])
    modules = op["modules"]
    if type(modules) is not dict:
        return None
    # The decoded dict itself when it holds floats only (as files are written): nothing else
    # refers to it. Whole numbers are valid too, stored as floats.
    if not all(type(us) is float and 0 <= us <= FLOAT_MAX for us in modules.values()):
        if not all(type(us) in (int, float) and 0 <= us <= FLOAT_MAX for us in modules.values()):
            return None
        modules = {path: float(us) for path, us in modules.items()}
    return OpSummary(count, float(time_us), engine, flops, nbytes, float(share), modules=modules,
                     bound=bound, dtype=dtype)


@dataclass(frozen=True)
class RoundSamples:
    """Per-round times of a measured test, for the gate's significance test: the total of each
    round, and each round's time of the ops that matter (the hotspots when it was made).
    Rounds are in the order they ran."""

    total: tuple[float, ...]
    ops: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.total)

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "total_device_time_us": [round(v, SAMPLE_DECIMALS) for v in self.total],
            "ops": {name: [round(v, SAMPLE_DECIMALS) for v in values]
                    for name, values in sorted(self.ops.items())},
        }

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str,
                  ops: Mapping[str, "OpSummary"]) -> "RoundSamples":
        check.mapping(where, data)
        if data.keys() != _SAMPLES_KEYS:
            raise check.fail(f"{where} should have exactly the keys {', '.join(sorted(_SAMPLES_KEYS))}, "
                             f"got {', '.join(sorted(map(str, data))) or 'none'}")
        rounds = check.whole(f"{where}.rounds", data["rounds"])
        if rounds < 1:
            raise check.fail(f"{where}.rounds is {rounds}, expected at least 1")
        total = _series(check, f"{where}.total_device_time_us", data["total_device_time_us"], rounds)
        samples = {}
        for name, values in check.mapping(f"{where}.ops", data["ops"]).items():
            if name not in ops:
                raise check.fail(f"{where}.ops has samples of {name!r}, which is not among the "
                                 "entry's ops")
            samples[name] = _series(check, f"{where}.ops[{name!r}]", values, rounds)
        return cls(total, samples)


_SAMPLES_KEYS = frozenset({"rounds", "total_device_time_us", "ops"})


def _series(check: Decoder, where: str, value: Any, rounds: int) -> tuple[float, ...]:
    values = check.items(where, value)
    if len(values) != rounds:
        raise check.fail(f"{where} has {len(values)} values, expected one per round ({rounds})")
    return tuple(check.number(f"{where}[{i}]", v) for i, v in enumerate(values))


@dataclass(frozen=True)
class ProfileSummary:
    backend: str
    hardware: str
    cost_model_version: str
    torch_version: str
    total_device_time_us: float
    ops: dict[str, OpSummary] = field(default_factory=dict)
    # Measured backends only: the rounds behind the medians above. None for the simulated
    # backend, whose numbers are exact (and whose baselines stay as they were).
    samples: RoundSamples | None = None
    execution: str = EAGER  # the simulated backend's execution mode: eager or graph
    auto_cast: str = DEFAULT_AUTO_CAST  # neuronx-cc's --auto-cast the profile modelled
    # Device memory (the simulated backend; baseline schema 5); None: not measured.
    memory: MemorySummary | None = None
    # Why this entry's numbers were accepted (``--neuron-reason`` when recording; schema 5): what
    # a reviewer reads in the diff, and what covers a regression gated against a git ref
    # (gate/accepted.py). "" when none was given.
    reason: str = ""
    # The digest (``numbers_digest``) of the numbers the reason was given for (schema 6): the
    # reason counts only while the entry still holds them. "" with no reason, or a schema-5 one.
    reason_for: str = ""
    # The test's marker arguments that decide verdicts (``MARKER_POLICY_KEYS``), as parsed, that
    # the numbers were recorded under (schema 7): a change that loosens them against a base's
    # entry changes what is gated (gate/judge.py). {} none given (left out of the file); None
    # unknown: an entry recorded before schema 7 (written as null when its file is rewritten).
    policy: Mapping[str, Any] | None = field(default_factory=dict)
    # Compiled graphs (torch.compile(backend="neuron"), gate/graphs.py); None: none ran, and the
    # entry is written as it was before compiled graphs were profiled.
    graphs: GraphSummary | None = None

    @property
    def variant(self) -> str:
        """Baselines keep one entry per backend, hardware, execution mode (eager, the
        default, unnamed) and auto-cast (the default unnamed); never compared across them."""
        return variant(self.backend, self.hardware, self.execution, self.auto_cast)

    def ranked(self) -> list[tuple[str, OpSummary]]:
        """Ops by device time, largest first; ties by name so the order is deterministic."""
        return sorted(self.ops.items(), key=lambda item: (-item[1].device_time_us, item[0]))

    def to_json(self) -> dict[str, Any]:
        return self._json

    def to_json_once(self) -> dict[str, Any]:
        """``to_json()`` without keeping it (unless it is kept already): a large baseline's
        documents, written one after another, need not all exist at once."""
        return self.__dict__["_json"] if "_json" in self.__dict__ else self._document()

    def to_write(self) -> dict[str, Any]:
        """``to_json_once()`` for ``jsontext.dumps`` to write (the same text): its ops written by
        ``OpSummary.rendered``, with no dict per op (the time of writing a large baseline file)."""
        if "_json" in self.__dict__:
            return self.__dict__["_json"]
        return self._document(Rendered(self._ops_text))

    def _ops_text(self, pad: str) -> str:
        if not self.ops or any(type(name) is not str for name in self.ops):
            return encode_at({name: op.to_json() for name, op in sorted(self.ops.items())}, pad)
        inner = pad + "  "
        return "{\n" + inner + (",\n" + inner).join(
            f"{encode_basestring_ascii(name)}: {op.rendered(inner)}" for name, op in sorted(self.ops.items())
        ) + "\n" + pad + "}"

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        # Computed once: a summary is serialized for xdist, the report and the baseline file.
        return self._document()

    def _document(self, ops: Rendered | None = None) -> dict[str, Any]:
        """``ops``: the ops' value as written, in place of their dicts (``to_write``)."""
        data = {
            "backend": self.backend,
            "hardware": self.hardware,
            "cost_model_version": self.cost_model_version,
            "torch_version": self.torch_version,
            "total_device_time_us": round(self.total_device_time_us, TIME_DECIMALS),
            "ops": ops if ops is not None else {name: op.to_json() for name, op in sorted(self.ops.items())},
        }
        if self.samples is not None:
            data["samples"] = self.samples.to_json()
        if self.execution != EAGER:  # eager entries stay as they were before graph execution
            data["execution"] = self.execution
        if self.auto_cast != DEFAULT_AUTO_CAST:  # likewise entries of the compiler's default
            data["auto_cast"] = self.auto_cast
        if self.memory is not None:
            data["memory"] = self.memory.to_json()
        if self.graphs is not None:
            data["graphs"] = self.graphs.to_json()
        if self.reason:
            data["reason"] = self.reason
            if self.reason_for:
                data["reason_for"] = self.reason_for
        if self.policy:  # entries of tests whose marker sets none stay as they were
            data["policy"] = policy_json(self.policy)
        elif self.policy is None:  # unknown (an entry of a file before schema 7), kept so when
            data["policy"] = None  # written again: "none" would judge the marker against nothing
        return data

    def uncosted(self) -> list[tuple[str, OpSummary]]:
        """The ops costed by the fallback (the cost model does not know them), largest first."""
        return [(name, op) for name, op in self.ranked() if op.uncosted]

    def uncosted_share(self) -> float:
        return sum(op.share for _, op in self.uncosted())

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str, legacy: bool = False,
                  policy_known: bool = True) -> "ProfileSummary":
        """A summary as ``to_json`` wrote it, every field checked: ``check.fail`` names the
        first bad one. ``legacy``: ops in the form before baseline schema version 3;
        ``policy_known``: written by a version that records the marker's policy (baseline
        schema 7, report version 6), so an entry without one had none (else: unknown)."""
        check.mapping(where, data)
        check.known_keys(where, data, _SUMMARY_KEYS)
        ops_data = check.mapping(f"{where}.ops", data.get("ops"))
        ops = {name: OpSummary.from_json(op, check, f"{where}.ops[{name!r}]", legacy)
               for name, op in ops_data.items()}
        execution = check.string(f"{where}.execution", data.get("execution", EAGER))
        if execution not in EXECUTIONS:
            raise check.fail(f"{where}.execution is {execution!r}, expected one of "
                             f"{', '.join(EXECUTIONS)}")
        auto_cast = check.string(f"{where}.auto_cast", data.get("auto_cast", DEFAULT_AUTO_CAST))
        if auto_cast not in AUTO_CASTS:
            raise check.fail(f"{where}.auto_cast is {auto_cast!r:.40}, expected one of "
                             f"{', '.join(AUTO_CASTS)} (neuronx-cc's --auto-cast)")
        return cls(
            backend=check.string(f"{where}.backend", data.get("backend")),
            hardware=check.string(f"{where}.hardware", data.get("hardware")),
            cost_model_version=check.string(f"{where}.cost_model_version",
                                            data.get("cost_model_version")),
            torch_version=check.string(f"{where}.torch_version", data.get("torch_version")),
            total_device_time_us=check.number(f"{where}.total_device_time_us",
                                              data.get("total_device_time_us")),
            ops=ops,
            samples=RoundSamples.from_json(data["samples"], check, f"{where}.samples", ops)
            if "samples" in data else None,
            execution=execution,
            auto_cast=auto_cast,
            memory=MemorySummary.from_json(data["memory"], check, f"{where}.memory")
            if "memory" in data else None,
            reason=_reason(check, f"{where}.reason", data.get("reason", "")),
            reason_for=_reason_for(check, f"{where}.reason_for", data.get("reason_for", "")),
            policy=(None if data["policy"] is None else parse_policy(check, f"{where}.policy", data["policy"]))
            if "policy" in data else {} if policy_known else None,
            graphs=GraphSummary.from_json(data["graphs"], check, f"{where}.graphs")
            if "graphs" in data else None,
        )

    @property
    def reason_given_for_these_numbers(self) -> bool | None:
        """Whether the reason was given for the numbers the entry holds: None when there is no
        reason, or it names no numbers (schema 5: it counts only when new against the base)."""
        if not self.reason or not self.reason_for:
            return None
        return self.reason_for == numbers_digest(self)


_DIGEST_BYTES = 8  # 16 hex digits: a reason is bound to its numbers, not a secret


def numbers_digest(summary: ProfileSummary, policy: bool = True) -> str:
    """A digest of what the gate judges in an entry: its total, each op's device time and calls
    (at the precision files keep), its peak and (``policy``) the marker's policy it was recorded
    under. Equal numbers give equal digests on every machine."""
    import hashlib

    peak = summary.memory.peak_bytes if summary.memory is not None else None
    parts = [f"total={round(summary.total_device_time_us, TIME_DECIMALS)!r}", f"peak={peak!r}"]
    parts += [f"{name!r}={op.count}x{round(op.device_time_us, TIME_DECIMALS)!r}"
              for name, op in sorted(summary.ops.items())]
    if policy and summary.policy:  # the marker's policy the numbers were accepted under (schema 7; none:
        # the digest of older entries, so their reasons still hold)
        parts.append(f"policy={json.dumps(policy_json(summary.policy), sort_keys=True)}")
    if summary.graphs is not None:  # only where graphs ran: other entries' digests as before
        parts.append(summary.graphs.digest_part())
    text = "\n".join(parts).encode("utf-8", "backslashreplace")
    return hashlib.blake2b(text, digest_size=_DIGEST_BYTES).hexdigest()


def _reason_for(check: Decoder, where: str, value: Any) -> str:
    digest = check.string(where, value)
    if digest and (len(digest) != 2 * _DIGEST_BYTES or digest.strip("0123456789abcdef")):
        raise check.fail(f"{where} is {quoted(digest)}, expected {2 * _DIGEST_BYTES} lowercase hex "
                         "digits (written by --neuron-reason)")
    return digest


def _reason(check: Decoder, where: str, value: Any) -> str:
    reason = check.string(where, value)
    if len(reason) > MAX_ENTRY_REASON_CHARS:
        raise check.fail(f"{where} has {len(reason)} characters; at most {MAX_ENTRY_REASON_CHARS}")
    return reason


_SUMMARY_KEYS = frozenset({"backend", "hardware", "cost_model_version", "torch_version",
                           "total_device_time_us", "ops", "samples", "execution", "auto_cast",
                           "memory", "reason", "reason_for", "policy", "graphs"})

# The marker arguments that decide verdicts, as ProfileSummary.policy keeps them: fractions,
# whole numbers, a size in bytes, op -> fraction and op -> reason.
_FRACTIONS = ("threshold", "min_share", "memory_threshold")
MARKER_POLICY_KEYS = (*_FRACTIONS, "hotspots", "memory_limit", "ops", "allow")


def policy_json(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A marker's policy as files keep it: its keys sorted, numbers as they are."""
    return {key: dict(sorted(value.items())) if isinstance(value, Mapping) else value
            for key, value in sorted(policy.items())}


def parse_policy(check: Decoder, where: str, data: Any) -> dict[str, Any]:
    """A summary's ``policy``, every value checked as the marker's parser would give it."""
    check.mapping(where, data)
    check.known_keys(where, data, MARKER_POLICY_KEYS)
    policy: dict[str, Any] = {}
    for key, value in data.items():
        at = f"{where}.{key}"
        if key in _FRACTIONS:
            policy[key] = check.number(at, value)
        elif key in ("hotspots", "memory_limit"):
            policy[key] = check.whole(at, value)
        elif key == "ops":
            policy[key] = {check.string(f"{at} key", op): check.number(f"{at}[{op!r}]", t)
                           for op, t in check.mapping(at, value).items()}
        else:  # allow: op -> reason
            policy[key] = {check.string(f"{at} key", op): _reason(check, f"{at}[{op!r}]", reason)
                           for op, reason in check.mapping(at, value).items()}
    return policy
AUTO_CAST_PREFIX = "auto-cast="  # the variant's last part when it is not the default


def variant(backend: str, hardware: str, execution: str = EAGER,
            auto_cast: str = DEFAULT_AUTO_CAST) -> str:
    """The key of a baseline entry: "simulated:trn2", "simulated:trn2:graph",
    "simulated:trn2:graph:auto-cast=matmult" (defaults unnamed)."""
    return (f"{backend}:{hardware}" + ("" if execution == EAGER else f":{execution}")
            + ("" if auto_cast == DEFAULT_AUTO_CAST else f":{AUTO_CAST_PREFIX}{auto_cast}"))


def torch_minor_version(version: str) -> str:
    """'2.13.0+cpu' -> '2.13': patch releases and build flavours do not change op sequences."""
    return ".".join(version.split("+")[0].split(".")[:2])


_FREE = Engine.NONE.value


def _heaviest_part(kinds: Mapping[tuple[Any, ...], list[float]], part: int) -> Any:
    """The bound (``part`` 0), dtype (1), ranks (2) or algorithm (3) of the calls with most
    device time, from the [time, calls] of each (bound, dtype, ranks, algorithm) of an op's
    calls."""
    if len(kinds) == 1:
        found = next(iter(kinds))[part]
    else:
        weights: dict[Any, list[float]] = {}
        for kind, (us, calls) in kinds.items():
            weight = weights.setdefault(kind[part], [0.0, 0.0])
            weight[0] += us
            weight[1] += calls
        found = heaviest(weights)
    return sys.intern(found) if type(found) is str else found


def summarize(result: Any, cost_model_version: str, torch_version: str,
              root: str | None = None) -> ProfileSummary:
    """Aggregate a ProfileResult per op name, with each op's device time per module. Free ops
    (engine "-": views, allocations) are left out; every other call counts, also one whose
    graph charge is 0 (hidden behind other engines' work), so a count never depends on how a
    schedule hid it. Measured backends: a record with no device time did not run on the
    device, and is left out. Compiled graphs name their files relative to ``root``
    (summarize_graphs)."""
    simulated = result.backend == SIMULATED
    totals: dict[str, dict[str, Any]] = {}
    for r in result.records:
        if r.device_time_us <= 0 and (r.engine == _FREE or not simulated):
            continue
        entry = totals.get(r.name)
        if entry is None:
            entry = totals[r.name] = {"count": 0, "time": 0.0, "flops": 0, "bytes": 0,
                                      "engine": r.engine, "modules": {}, "recomputed": 0,
                                      "uncosted": False, "kinds": {}, "link_bytes": 0}
        us = r.device_time_us
        entry["count"] += 1
        entry["time"] += us
        # (bound, dtype, ranks, algorithm) -> [time, calls]: one lookup per call (most ops have
        # one kind; ranks and algorithm are a collective's, 0 and "" elsewhere)
        tally(entry["kinds"], (r.bound, r.input_dtypes[0] if r.input_dtypes else "",
                               getattr(r, "ranks", 0), getattr(r, "algorithm", "")), us)
        entry["link_bytes"] += getattr(r, "link_bytes", 0)
        entry["flops"] += r.flops
        entry["bytes"] += r.bytes_read + r.bytes_written
        modules = entry["modules"]
        modules[r.module_path] = modules.get(r.module_path, 0.0) + us
        if r.phase == RECOMPUTE:
            entry["recomputed"] += 1
        if not r.costed:
            entry["uncosted"] = True
    total = sum(e["time"] for e in totals.values())
    ops = {
        name: OpSummary(
            count=e["count"],
            device_time_us=e["time"],
            engine=e["engine"],
            flops=e["flops"],
            bytes=e["bytes"],
            share=e["time"] / total if total else 0.0,
            modules=e["modules"],
            recomputed=e["recomputed"],
            uncosted=e["uncosted"],
            bound=_heaviest_part(e["kinds"], 0) or BOUND_NONE,
            dtype=_heaviest_part(e["kinds"], 1),
            ranks=_heaviest_part(e["kinds"], 2),
            link_bytes=e["link_bytes"],
            algorithm=_heaviest_part(e["kinds"], 3),
        )
        for name, e in totals.items()
    }
    return ProfileSummary(result.backend, result.hardware, cost_model_version,
                          torch_minor_version(torch_version), total, ops,
                          execution=getattr(result, "execution", EAGER),
                          auto_cast=getattr(result, "auto_cast", DEFAULT_AUTO_CAST),
                          memory=summarize_memory(getattr(result, "memory", None)),
                          graphs=summarize_graphs(getattr(result, "graphs", None), root))


def summarize_rounds(results: Sequence[Any], cost_model_version: str, torch_version: str,
                     sample_ops: Callable[[ProfileSummary], Iterable[str]] | None = None,
                     root: str | None = None) -> ProfileSummary:
    """One summary of several rounds of the same test (measured backends).

    Timing noise on a shared machine (preemption, cache and memory-bandwidth contention, page
    faults) only ever adds time, so each op's number is its *best* round: the minimum of its
    per-round device time over the rounds it ran in ("best of N", as ``timeit`` advises). An op
    that ran in fewer than half of the rounds is left out (one-time work: lazy init). Its
    calls are the lower median of its per-round calls. The total is the sum of the ops' best
    rounds: for the examples on 2 shared cores it varied 4-13 % across 8 processes, where the
    fastest round's total varied 8-22 % and the median round's 10-41 %.

    With ``sample_ops``, the summary keeps every round's total and the per-round times of the
    ops ``sample_ops(summary)`` names (the hotspots), for the gate's significance test. One
    round without ``sample_ops`` is ``summarize`` itself (the simulated backend's path).
    """
    from .stats import median_low

    if not results:
        raise ValueError("summarize_rounds needs at least one round")
    if len(results) == 1 and sample_ops is None:
        return summarize(results[0], cost_model_version, torch_version, root)
    rounds = [summarize(r, cost_model_version, torch_version, root) for r in results]
    first = rounds[0]
    totals = [s.total_device_time_us for s in rounds]
    per_op: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    for name in sorted({name for s in rounds for name in s.ops}):
        present = [s.ops[name].device_time_us for s in rounds if name in s.ops]
        per_op[name] = [s.ops[name].device_time_us if name in s.ops else 0.0 for s in rounds]
        if 2 * len(present) >= len(rounds) and min(present) > 0:
            best[name] = min(present)
    total = sum(best.values())
    ops: dict[str, OpSummary] = {}
    for name, value in best.items():
        present_ops = [s.ops[name] for s in rounds if name in s.ops]
        fastest = min(present_ops, key=lambda op: op.device_time_us)  # its best round
        ops[name] = OpSummary(
            count=median_low([s.ops[name].count if name in s.ops else 0 for s in rounds]),
            device_time_us=value,
            engine=present_ops[0].engine,
            flops=median_low([op.flops for op in present_ops]),
            bytes=median_low([op.bytes for op in present_ops]),
            share=value / total if total else 0.0,
            modules=fastest.breakdown(),  # the module times of the round whose time is kept
            recomputed=median_low([op.recomputed for op in present_ops]),
            uncosted=any(op.uncosted for op in present_ops),
            bound=fastest.bound,
            dtype=fastest.dtype,
            ranks=fastest.ranks,
            link_bytes=median_low([op.link_bytes for op in present_ops]),
            algorithm=fastest.algorithm,
        )
    summary = ProfileSummary(first.backend, first.hardware, cost_model_version,
                             first.torch_version, total, ops, execution=first.execution,
                             auto_cast=first.auto_cast, memory=first.memory)
    if sample_ops is None:
        return summary
    chosen = sorted(set(sample_ops(summary)) & set(ops))
    samples = RoundSamples(tuple(totals), {name: tuple(per_op[name]) for name in chosen})
    return ProfileSummary(summary.backend, summary.hardware, cost_model_version,
                          summary.torch_version, summary.total_device_time_us, ops, samples,
                          summary.execution, summary.auto_cast, summary.memory)
