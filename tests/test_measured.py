"""Measured backends (backends/measured.py), the summary of rounds, samples in baselines and the
statistical gate: cpu on real torch.profiler output, cuda on recorded profiler events (no GPU
here), neuron on a stand-in torch_neuronx package that mimics TorchNeuron's module layout."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch._inductor  # noqa: F401  (torch.profiler's first start imports it; here, at collection)
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from pytest_neuronprof import ConfigError, NeuronConfig, NeuronProfiler
from pytest_neuronprof.profiler.backends import make_backend
from pytest_neuronprof.profiler.backends.measured import (MEASURED_VERSION, MeasuredBackend, cpu_hardware,
                                                 records_from_events, slug)
from pytest_neuronprof.gate.baseline import BaselineStore, parse_baseline_text, render_baseline
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate.compare import GatePolicy, Status, compare
from pytest_neuronprof.gate.decode import Decoder
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.profiler.result import OpRecord, ProfileResult
from pytest_neuronprof.vocabulary import BACKENDS, MEASURED_BACKENDS as MEASURED
from pytest_neuronprof.gate.summary import (OpSummary, ProfileSummary, RoundSamples, summarize,
                                       summarize_rounds)

NODE = "tests/test_x.py::test_x"


# --- recorded profiler output: fake FunctionEvents ------------------------------------------------

_EVENT_FIELDS = frozenset(inspect.signature(FunctionEvent.__init__).parameters)


def function_event(**fields: Any) -> FunctionEvent:
    """A FunctionEvent with these fields. Those its constructor does not take on this torch
    (``linked_correlation_id`` before torch 2.12) are set as attributes: the code under test
    reads them with ``getattr``, so it sees them as on a newer torch."""
    event = FunctionEvent(**{k: v for k, v in fields.items() if k in _EVENT_FIELDS})
    for k, v in fields.items():
        if k not in _EVENT_FIELDS:
            setattr(event, k, v)
    return event


class Events:
    """Builds torch FunctionEvents the way torch.profiler hands them over: host events on a
    thread, device kernels appended to the op that launched them and listed as device events
    linked to it by correlation id."""

    def __init__(self, use_device: str | None = "cuda", device_type: DeviceType = DeviceType.CUDA) -> None:
        self.use_device, self.device_type = use_device, device_type
        self.events: list[FunctionEvent] = []
        self.next_id = 1

    def host(self, name: str, start: float, end: float, *, scope: int = 0, annotation: bool = False,
             thread: int = 1, linked: int = 0) -> FunctionEvent:
        event = function_event(id=self.next_id, name=name, thread=thread, start_us=start, end_us=end,
                               fwd_thread=thread, overload_name="", input_shapes=[], stack=[], scope=scope,
                               use_device=self.use_device, is_user_annotation=annotation,
                               linked_correlation_id=linked)
        self.next_id += 1
        self.events.append(event)
        return event

    def kernel(self, op: FunctionEvent | None, name: str, start: float, duration: float) -> None:
        if op is not None:
            op.append_kernel(name, 0, duration)
        self.events.append(function_event(
            id=self.next_id, name=name, thread=7, start_us=start, end_us=start + duration,
            input_shapes=[], stack=[], use_device=self.use_device, device_type=self.device_type,
            linked_correlation_id=op.id if op is not None else 0))
        self.next_id += 1

    def built(self) -> EventList:
        events = EventList(self.events, use_device=self.use_device)
        events._build_tree()
        return events


def mlp_step(ev: Events) -> EventList:
    """An MLP forward (linear -> addmm with a kernel, gelu) in modules, one backward mm, a view
    with no kernel, and a kernel linked to no op."""
    ev.host("nn.Module: MLP", 0, 100, scope=7, annotation=True)
    ev.host("nn.Module: up", 1, 50, scope=7, annotation=True)
    ev.host("aten::linear", 2, 48)
    addmm = ev.host("aten::addmm", 5, 40)
    ev.host("cudaLaunchKernel", 10, 15, linked=addmm.id)  # runtime call inside addmm: not an op
    ev.kernel(addmm, "void gemm_kernel<128>", 60, 30.0)
    gelu = ev.host("aten::gelu", 55, 60)
    ev.kernel(gelu, "vectorized_elementwise_kernel<gelu>", 95, 5.0)
    ev.host("autograd::engine::evaluate_function: AddmmBackward0", 200, 300)
    ev.host("AddmmBackward0", 201, 299, scope=1)
    mm = ev.host("aten::mm", 210, 290)
    ev.kernel(mm, "void gemm_kernel<64>", 300, 40.0)
    ev.host("aten::view", 300, 301)
    ev.kernel(None, "Memset (Device)", 400, 2.0)
    return ev.built()


def test_cuda_self_device_time_per_op_from_recorded_events():
    records, scopes = records_from_events(mlp_step(Events()), "cuda")
    by_name = {r.name: r for r in records}
    assert [r.name for r in records] == ["aten::linear", "aten::addmm", "aten::gelu", "aten::mm",
                                         "aten::view", "Memset (Device)"]
    assert [r.index for r in records] == list(range(6))
    # self device time: the op's own kernels; linear launched none itself (addmm did)
    assert by_name["aten::addmm"].device_time_us == 30.0 and by_name["aten::addmm"].engine == "CUDA"
    assert by_name["aten::linear"].device_time_us == 0.0 and by_name["aten::linear"].engine == "-"
    assert by_name["aten::gelu"].device_time_us == 5.0
    assert by_name["aten::mm"].device_time_us == 40.0
    assert by_name["aten::view"].device_time_us == 0.0
    assert by_name["Memset (Device)"].device_time_us == 2.0  # kept: totals hold every kernel
    assert sum(r.device_time_us for r in records) == 77.0
    # host side: self CPU time without nested ops (the runtime call stays with addmm)
    assert by_name["aten::linear"].cpu_time_us == 46 - 35 and by_name["aten::addmm"].cpu_time_us == 35
    # where: module path, phase; kernels' real device start (relative to the first event)
    assert (by_name["aten::addmm"].module_path, by_name["aten::gelu"].module_path) == ("up", "MLP")
    assert by_name["aten::mm"].phase == "backward" and by_name["aten::addmm"].phase == "forward"
    assert by_name["aten::addmm"].device_start_us == 60 - 2 and by_name["aten::addmm"].host_start_us == 5 - 2
    assert scopes == []  # module ranges are not scopes


def test_cuda_backend_end_to_end_on_a_recorded_profiler():
    class RecordedProfiler:
        started = stopped = 0

        def start(self):
            RecordedProfiler.started += 1

        def stop(self):
            RecordedProfiler.stopped += 1

        def events(self):
            return mlp_step(Events())

    synced = []
    backend = MeasuredBackend("cuda", NeuronConfig(), profiler_factory=RecordedProfiler,
                              synchronize=lambda: synced.append(1), hardware="nvidia-h200")
    backend.start()
    result = backend.stop()
    assert (RecordedProfiler.started, RecordedProfiler.stopped, len(synced)) == (1, 1, 2)
    assert (result.backend, result.hardware, backend.version) == ("cuda", "nvidia-h200", MEASURED_VERSION)
    assert result.total_device_time_us == 77.0
    table = result.key_averages().table(sort_by="self_device_time_total", row_limit=3)
    assert "Self CUDA" in table and "NEURON" not in table
    summary = summarize(result, backend.version, torch.__version__)
    assert summary.variant == "cuda:nvidia-h200"
    assert summary.ops["aten::mm"].device_time_us == 40.0 and "aten::view" not in summary.ops


def test_neuron_kernels_from_privateuse1_events_and_compiled_regions():
    ev = Events(use_device="privateuseone", device_type=DeviceType.PrivateUse1)
    add = ev.host("aten::add", 0, 10)
    ev.kernel(add, "neff_exec", 20, 12.5)
    region = ev.host("Torch-Compiled Region", 30, 60, scope=7, annotation=True)
    ev.kernel(region, "neff_exec_compiled", 70, 50.0)  # launched by a range, not an op
    ev.host("my_scope", 100, 120, scope=7, annotation=True)
    ev.host("aten::mul", 101, 110)
    records, scopes = records_from_events(ev.built(), "neuron")
    assert [(r.name, r.device_time_us, r.engine) for r in records] == [
        ("aten::add", 12.5, "Neuron"), ("Torch-Compiled Region", 50.0, "Neuron"), ("aten::mul", 0.0, "-")]
    assert records[2].scope == "my_scope"
    assert [(s.name, s.start_us, s.end_us) for s in scopes] == [("my_scope", 100, 120)]


def test_records_from_events_rejects_an_unknown_kind():
    with pytest.raises(ConfigError, match="unknown measured backend 'tpu'"):
        records_from_events([], "tpu")


# --- cpu: real torch.profiler ------------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_cpu_backend_self_time_per_op_modules_phases_and_threads():
    model, x = MLP(), torch.randn(32, 64)
    threads = torch.get_num_threads()
    with NeuronProfiler(NeuronConfig(), backend="cpu", threads=1) as prof:
        assert torch.get_num_threads() == 1
        with torch.profiler.record_function("step"):
            model(x).sum().backward()
    assert torch.get_num_threads() == threads  # restored
    result = prof.result
    assert (result.backend, prof.backend_version) == ("cpu", MEASURED_VERSION)
    assert result.hardware == cpu_hardware(1) and result.hardware.endswith("-1threads")
    names = [r.name for r in result.records]
    assert names.count("aten::addmm") == 2 and "aten::linear" in names and "aten::mm" in names
    assert all(r.engine == "CPU" and r.device_time_us == r.cpu_time_us > 0 for r in result.records)
    addmm = [r for r in result.records if r.name == "aten::addmm"]
    linear = [r for r in result.records if r.name == "aten::linear"]
    assert [r.module_path for r in addmm] == ["up", "down"]
    assert all(r.phase == "forward" and r.scope == "step" for r in addmm)
    assert {r.phase for r in result.records if r.name == "aten::mm"} == {"backward"}
    # self times: linear's own time leaves out its addmm, so nothing is counted twice. One run
    # is at the mercy of preemption (a single comparison failed under CI load): most of the
    # pairs of five more runs decide.
    def self_times() -> list[tuple[float, float]]:
        with NeuronProfiler(NeuronConfig(), backend="cpu", threads=1) as again:
            model(x).sum().backward()
        records = again.result.records
        return list(zip([r.device_time_us for r in records if r.name == "aten::linear"],
                        [r.device_time_us for r in records if r.name == "aten::addmm"]))

    pairs = [pair for _ in range(5) for pair in self_times()] + list(
        zip([r.device_time_us for r in linear], [r.device_time_us for r in addmm]))
    assert sum(lin < mm for lin, mm in pairs) > len(pairs) / 2, pairs
    assert [s.name for s in result.scopes] == ["step"]
    region = result.scopes[0].end_us - result.scopes[0].start_us
    forward_ops = sum(r.device_time_us for r in result.records if r.scope == "step")
    assert forward_ops <= region * 1.01
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    assert "Self CPU" in table and "NEURON" not in table  # CPU time is the CPU columns' already


def test_make_backend_and_the_backends_this_machine_lacks():
    assert BACKENDS == ("simulated", "cpu", "cuda", "neuron") and MEASURED == ("cpu", "cuda", "neuron")
    assert make_backend("cpu", "trn2", 0).name == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="cuda backend needs a CUDA GPU"):
            NeuronProfiler(backend="cuda")
    with pytest.raises(ConfigError) as info:
        NeuronProfiler(backend="neuron")
    assert "torch_neuronx" in str(info.value) and "not installed" in str(info.value)
    with pytest.raises(ConfigError, match="unknown backend 'tpu'"):
        NeuronProfiler(backend="tpu")


def test_slug_of_cpu_model_names():
    assert slug("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz") == "intel-xeon-platinum-8375c"
    assert slug("AMD EPYC 7763 64-Core Processor") == "amd-epyc-7763-64-core"
    assert slug("NVIDIA H200") == "nvidia-h200"
    assert slug("") == "unknown"


# --- neuron: a stand-in torch_neuronx ----------------------------------------------------------------

FAKE_INIT = '''
"""Stand-in for TorchNeuron's torch_neuronx package (tests only): no device, no registration."""
calls = []


def synchronize():
    calls.append("synchronize")
'''

FAKE_PROFILING = '''
"""Stand-in for torch_neuronx.profiling, as the Neuron docs show it: NeuronConfig (an
experimental config of torch.profiler), ProfileMode, NeuronProfiler."""
import enum

import torch

configs = []


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(torch._C._profiler._ExperimentalConfig):
    def __init__(self, modes=None, max_events_per_nc=None, capture_enabled_for_nc=None,
                 profile_output_dir=None, neff_cache_dir=None, precache_node_info=True):
        super().__init__()
        self.kwargs = dict(modes=modes, capture_enabled_for_nc=capture_enabled_for_nc,
                           profile_output_dir=profile_output_dir)
        configs.append(self)


class NeuronProfiler:
    def __init__(self, config):
        self.config = config

    def export_trace(self, prof):
        pass
'''


@pytest.fixture
def fake_torch_neuronx(tmp_path, monkeypatch):
    package = tmp_path / "site" / "torch_neuronx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_INIT))
    (package / "profiling.py").write_text(textwrap.dedent(FAKE_PROFILING))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("torch_neuronx", "torch_neuronx.profiling"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("torch_neuronx", "torch_neuronx.profiling"):
        sys.modules.pop(name, None)


@pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option")
def test_neuron_backend_follows_the_documented_torch_profiler_path(fake_torch_neuronx, tmp_path, monkeypatch):
    import torch.profiler

    seen = []
    real_profile = torch.profiler.profile

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real_profile(*args, **kwargs)

    monkeypatch.setattr(torch.profiler, "profile", spy)
    config = NeuronConfig(capture_enabled_for_nc="0-1", profile_output_dir=tmp_path / "out", hardware="trn2")
    with NeuronProfiler(config, backend="neuron") as prof:
        torch.ones(8) + 1
    import torch_neuronx
    from torch_neuronx import profiling

    (kwargs,) = seen
    assert kwargs["activities"] == [torch.profiler.ProfilerActivity.CPU,
                                    torch.profiler.ProfilerActivity.PrivateUse1]
    assert kwargs["experimental_config"] is profiling.configs[-1]
    assert profiling.configs[-1].kwargs == {
        "modes": [profiling.ProfileMode.DEVICE, profiling.ProfileMode.RUNTIME],
        "capture_enabled_for_nc": "0-1", "profile_output_dir": str(tmp_path / "out")}
    assert torch_neuronx.calls == ["synchronize", "synchronize"]  # before and after the region
    result = prof.result
    assert (result.backend, result.hardware) == ("neuron", "trn2")
    assert "aten::add" in [r.name for r in result.records]
    assert result.total_device_time_us == 0.0  # no device here: the host ops only
    # never a fake `neuron` device in this process
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


def test_neuron_backend_checks_cores_against_the_named_chip(fake_torch_neuronx):
    with pytest.raises(ConfigError, match="do not exist on trn1"):
        NeuronProfiler(NeuronConfig(capture_enabled_for_nc="0-3", hardware="trn1"), backend="neuron")


# --- the summary of rounds -------------------------------------------------------------------------

def rec(index: int, name: str, us: float, module: str = "m") -> OpRecord:
    return OpRecord(index, name, "default", [], [], "CPU", 0, 0, 0, 0.0, 0.0, 0.0, us, "none", True,
                    module, "", "forward", 0.0, us, 0.0)


def rounds_of(*times: dict[str, float | list[float]]) -> list[ProfileResult]:
    results = []
    for per_round in times:
        records = []
        for name, value in per_round.items():
            for us in value if isinstance(value, list) else [value]:
                records.append(rec(len(records), name, us))
        results.append(ProfileResult(records, "cpu", "intel-xeon-1threads"))
    return results


def test_summarize_rounds_takes_each_ops_best_round():
    results = rounds_of({"aten::mm": 100.0, "aten::add": [10.0, 10.0], "aten::lazy_init": 50.0},
                        {"aten::mm": 90.0, "aten::add": [12.0, 11.0]},
                        {"aten::mm": 130.0, "aten::add": [9.0, 9.5]},
                        {"aten::mm": 95.0, "aten::add": [30.0]})
    summary = summarize_rounds(results, MEASURED_VERSION, "2.13.0", lambda s: ["aten::mm"])
    assert summary.ops["aten::mm"].device_time_us == 90.0
    assert summary.ops["aten::add"].device_time_us == 18.5  # its fastest round: 9 + 9.5
    assert summary.ops["aten::add"].count == 2  # lower median of 2, 2, 2, 1
    assert "aten::lazy_init" not in summary.ops  # one round of four: one-time work
    assert summary.total_device_time_us == 108.5
    assert summary.ops["aten::mm"].share == pytest.approx(90 / 108.5)
    assert summary.samples == RoundSamples((170.0, 113.0, 148.5, 125.0), {"aten::mm": (100.0, 90.0, 130.0, 95.0)})
    assert summary.variant == "cpu:intel-xeon-1threads"
    # one round, no samples asked: summarize() itself (the simulated backend's path)
    one = rounds_of({"aten::mm": 100.0})
    assert summarize_rounds(one, "1", "2.13") == summarize(one[0], "1", "2.13")
    with pytest.raises(ValueError):
        summarize_rounds([], "1", "2.13")


# --- samples in baselines ------------------------------------------------------------------------------

def measured(scale: float = 1.0, noise: tuple[float, ...] = (0.0, 0.02, -0.01, 0.03, 0.01, -0.02, 0.0, 0.015),
             mm_share: float = 0.8, hardware: str = "intel-xeon-1threads") -> ProfileSummary:
    """A measured summary of 8 rounds: aten::mm (scaled) and aten::add, with round noise."""
    mm = [1000.0 * mm_share * scale * (1 + n) for n in noise]
    add = [1000.0 * (1 - mm_share) * (1 + n / 2) for n in noise]
    totals = tuple(a + b for a, b in zip(mm, add))
    total = min(mm) + min(add)
    ops = {"aten::mm": OpSummary(1, min(mm), "CPU", 0, 0, min(mm) / total, "up"),
           "aten::add": OpSummary(1, min(add), "CPU", 0, 0, min(add) / total, "")}
    return ProfileSummary("cpu", hardware, MEASURED_VERSION, "2.13", total, ops,
                          RoundSamples(totals, {"aten::mm": tuple(mm), "aten::add": tuple(add)}))


def test_baselines_with_samples_are_schema_2_and_round_trip(tmp_path):
    cpu, sim = measured(), replace(measured(), backend="simulated", hardware="trn2", samples=None)
    text = render_baseline({NODE: {"cpu:intel-xeon-1threads": cpu, "simulated:trn2": sim}})
    doc = json.loads(text)
    assert doc["schema_version"] == 7  # samples came with 2; 3 adds modules, 4 bound and dtype
    entry = doc["tests"][NODE]["cpu:intel-xeon-1threads"]
    assert entry["samples"]["rounds"] == 8 and list(entry["samples"]["ops"]) == ["aten::add", "aten::mm"]
    assert entry["samples"]["total_device_time_us"][0] == round(cpu.samples.total[0], 3)
    assert "samples" not in doc["tests"][NODE]["simulated:trn2"]
    parsed = parse_baseline_text(tmp_path / "x.json", text)
    assert render_baseline(parsed) == text
    assert parsed[NODE]["simulated:trn2"].samples is None
    assert parsed[NODE]["cpu:intel-xeon-1threads"].samples.rounds == 8
    # every file is written as the newest version, simulated entries alone too
    assert json.loads(render_baseline({NODE: {"simulated:trn2": sim}}))["schema_version"] == 7
    # the JSON report carries samples too (xdist workers -> controller)
    outcome = TestOutcome(NODE, ("tests/test_x.py", 1), compare(cpu, cpu, GatePolicy()), cpu, cpu)
    assert TestOutcome.from_json(json.loads(json.dumps(outcome.to_json()))).current.samples.rounds == 8
    assert ProfileSummary.from_json(sim.to_json(), Decoder(ValueError), "entry").samples is None


def _samples_doc(fn) -> str:
    doc = json.loads(render_baseline({NODE: {"cpu:x": measured()}}))
    fn(doc, doc["tests"][NODE]["cpu:x"])
    return json.dumps(doc)


@pytest.mark.parametrize("mutate,problem", [
    (lambda d, e: d.update(schema_version=1), "has per-round samples, which need schema_version 2"),
    (lambda d, e: e["samples"]["ops"]["aten::mm"].pop(), "['aten::mm'] has 7 values, expected one per round (8)"),
    (lambda d, e: e["samples"].update(rounds=0), "samples.rounds is 0, expected at least 1"),
    (lambda d, e: e["samples"]["ops"].update({"aten::gone": [1.0] * 8}), "samples of 'aten::gone', which is not among"),
    (lambda d, e: e["samples"]["total_device_time_us"].__setitem__(0, -1), "total_device_time_us[0] is negative"),
    (lambda d, e: e["samples"]["total_device_time_us"].__setitem__(1, "1"), "should be int or float, got str"),
    (lambda d, e: e["samples"].pop("rounds"), "should have exactly the keys ops, rounds, total_device_time_us"),
    (lambda d, e: e.update(extra=1), "has unknown key(s) 'extra'"),
])
def test_broken_samples_are_refused_naming_the_problem(tmp_path, mutate, problem):
    path = tmp_path / "baselines" / "test_x.json"
    with pytest.raises(BaselineError) as info:
        parse_baseline_text(path, _samples_doc(mutate))
    assert problem in str(info.value) and "re-record with `pytest --neuron-baseline`" in str(info.value)


def test_store_keeps_cpu_and_simulated_entries_apart(tmp_path):
    store = BaselineStore(tmp_path)
    sim = replace(measured(), backend="simulated", hardware="trn2", samples=None)
    store.save([(NODE, measured()), (NODE, sim)])
    fresh = BaselineStore(tmp_path)
    assert fresh.load(NODE, "cpu:intel-xeon-1threads").samples.rounds == 8
    assert fresh.load(NODE, "simulated:trn2").samples is None
    assert fresh.load(NODE, "cpu:intel-xeon-2threads") is None  # other hardware: no baseline


# --- the statistical gate, on controlled timings -------------------------------------------------------

POLICY = GatePolicy(threshold=0.15)


def test_noise_alone_passes_and_a_significant_slowdown_fails():
    base = measured()
    assert compare(base, measured(noise=(0.03, -0.01, 0.0, 0.02, 0.01, 0.0, -0.02, 0.01)), POLICY).status == Status.PASS
    verdict = compare(base, measured(scale=1.3), POLICY)
    assert verdict.status == Status.REGRESSION
    kinds = {f.op: f for f in verdict.regressions}
    assert set(kinds) == {"(total)", "aten::mm"}
    assert kinds["aten::mm"].current / kinds["aten::mm"].baseline == pytest.approx(1.3)
    assert kinds["aten::mm"].reason.startswith("hotspot slower (p=") and "8 vs 8 rounds" in kinds["aten::mm"].reason
    improved = compare(base, measured(scale=0.7), POLICY)
    assert improved.status == Status.IMPROVED and "p=" in improved.improvements[0].reason


def test_beyond_the_threshold_but_not_significant_passes():
    base = measured(noise=(0.0, 0.9, 0.5, 0.1, 0.7, 0.3, 0.8, 0.2))  # a very noisy baseline
    # every round 20 % slower than the baseline's best, but inside its spread: p is large
    current = measured(noise=(0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55))
    ratio = current.ops["aten::mm"].device_time_us / base.ops["aten::mm"].device_time_us
    assert ratio == pytest.approx(1.2)
    assert compare(base, current, POLICY).status == Status.PASS
    # the same numbers without samples (the simulated backend's exact rule) would fail
    exact = compare(replace(base, samples=None), replace(current, samples=None), POLICY)
    assert exact.status == Status.REGRESSION


def test_significant_but_within_the_threshold_passes():
    assert compare(measured(), measured(scale=1.08), POLICY).status == Status.PASS  # every round 8 % slower


def test_an_immaterial_op_does_not_fail_the_test():
    # aten::add is 2 % of the time; it doubles, significantly, moving the total by 2 %
    base, current = measured(mm_share=0.98), measured(mm_share=0.98)
    add = tuple(2 * v for v in current.samples.ops["aten::add"])
    ops = dict(current.ops, **{"aten::add": replace(current.ops["aten::add"], device_time_us=min(add))})
    current = replace(current, ops=ops, samples=RoundSamples(current.samples.total, dict(current.samples.ops, **{"aten::add": add})))
    assert compare(base, current, GatePolicy(threshold=0.15, min_share=0.0, coverage=1.0)).status == Status.PASS
    strict = GatePolicy(threshold=0.15, min_share=0.0, coverage=1.0, material_share=0.0)
    assert [f.op for f in compare(base, current, strict).regressions] == ["aten::add"]


def test_a_hotspot_without_samples_is_not_judged():
    base = measured()
    base = replace(base, samples=RoundSamples(base.samples.total, {}))  # recorded with fewer hotspots
    verdict = compare(base, measured(scale=1.3), POLICY)
    assert [f.op for f in verdict.regressions] == ["(total)"]  # the total still has its rounds


def test_never_compared_across_backends_or_hardware():
    cpu = measured()
    assert compare(cpu, measured(hardware="amd-epyc-2threads"), POLICY).status == Status.INCOMPARABLE
    sim = replace(cpu, backend="simulated", hardware="trn2", cost_model_version="1", samples=None)
    assert compare(sim, replace(cpu, hardware="trn2"), POLICY).status == Status.INCOMPARABLE
    assert cpu.variant != measured(hardware="intel-xeon-2threads").variant
