"""Chrome / Perfetto traces: the processes and tracks, slice nesting, flow arrows, and export()."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_neuronprof import NeuronConfig, NeuronProfiler, ProfileMode
from pytest_neuronprof.profiler.result import OpRecord, ProfileResult, ScopeRecord
from pytest_neuronprof.profiler.trace import DEVICE_PID, HOST_PID, trace_events

ENGINES = ["Tensor", "Vector", "Scalar", "GpSimd", "DMA"]


def workload(device: str = "cpu", dim: int = 32) -> None:
    """Touches every engine, with a record_function scope and a backward pass."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(dim, dim, device=device)
    table = torch.randn(100, dim, device=device)
    idx = torch.zeros(8, dtype=torch.long, device=device)
    with torch.profiler.record_function("step"):
        x = F.embedding(idx, table)  # GpSimd
        y = F.gelu(lin(x))  # Tensor, Scalar
        z = torch.cat([y, y]).to(torch.bfloat16).float()  # DMA
        z.sum().backward()  # Vector, and backward ops


def profiled(fn, **config) -> NeuronProfiler:
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof


def load(path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["traceEvents"]


def ns(value: float) -> int:
    """Trace viewers read ts / dur in microseconds and keep integer nanoseconds."""
    return round(value * 1000)


def assert_slices_nest(events: list[dict]) -> None:
    """On every (pid, tid), any two X slices are disjoint or one contains the other."""
    tracks: dict[tuple, list[tuple[int, int, str]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            start = ns(e["ts"])
            tracks[(e["pid"], e["tid"])].append((start, start + ns(e["dur"]), e["name"]))
    for track, slices in tracks.items():
        # Sorted by start, longest first: nesting holds iff each slice ends within the innermost
        # open slice that contains its start.
        open_ends: list[int] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"{name} on {track} partially overlaps its parent"
            open_ends.append(end)


@pytest.fixture(scope="module")
def cpu_prof() -> NeuronProfiler:
    return profiled(workload)


@pytest.fixture
def trace(cpu_prof, tmp_path) -> list[dict]:
    path = tmp_path / "sub" / "trace.json"
    cpu_prof.export_chrome_trace(path)
    assert not list(path.parent.glob("*.tmp"))  # written atomically, no leftovers
    return load(path)


def test_the_trace_is_json_with_totals(cpu_prof, tmp_path):
    path = tmp_path / "t.json"
    cpu_prof.export_chrome_trace(str(path))
    document = json.loads(path.read_text("utf-8"))
    assert document["otherData"] == {"backend": "simulated", "hardware": "trn2", "execution": "eager",
                                     "total_device_time_us": cpu_prof.total_device_time_us}
    assert document["traceEvents"]


def test_a_host_process_and_a_neuroncore_process_with_one_track_per_engine(trace):
    processes = {e["pid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {HOST_PID: "Host (PyTorch, simulated backend)", DEVICE_PID: "NeuronCore 0 (trn2, simulated)"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(name for (pid, _), name in threads.items() if pid == DEVICE_PID) == sorted(ENGINES)
    assert [name for (pid, _), name in threads.items() if pid == HOST_PID] == ["main"]
    # Every X slice is on a named track.
    assert {(e["pid"], e["tid"]) for e in trace if e["ph"] == "X"} <= set(threads)


def test_every_costed_op_is_one_slice_on_its_engine_track(cpu_prof, trace):
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["pid"] == DEVICE_PID and e["name"] == "thread_name"}
    kernels = [e for e in trace if e["ph"] == "X" and e["pid"] == DEVICE_PID]
    costed = [r for r in cpu_prof.result.records if r.device_time_us > 0]
    assert [(e["name"], tracks[e["tid"]], e["args"]["op_index"]) for e in kernels] == \
        [(r.name, r.engine, r.index) for r in costed]
    assert {tracks[e["tid"]] for e in kernels} == set(ENGINES)  # the workload touches all five
    for e, r in zip(kernels, costed):
        assert e["dur"] == pytest.approx(r.device_time_us, abs=1e-3)
        assert (e["args"]["flops"], e["args"]["bytes"], e["args"]["bound"]) == (r.flops, r.bytes, r.bound)
    host_ops = [e for e in trace if e["ph"] == "X" and e["pid"] == HOST_PID and e["cat"] == "cpu_op"]
    assert len(host_ops) == len(cpu_prof.result.records)  # free ops too, on the host only
    scopes = [e["name"] for e in trace if e["ph"] == "X" and e.get("cat") == "user_annotation"]
    assert scopes == ["step"]


def test_the_device_runs_one_op_at_a_time_after_its_launch(cpu_prof, trace):
    kernels = sorted((e for e in trace if e["ph"] == "X" and e["pid"] == DEVICE_PID), key=lambda e: e["ts"])
    for before, after in zip(kernels, kernels[1:]):
        assert ns(before["ts"]) + ns(before["dur"]) <= ns(after["ts"])
    host = {r.index: r.host_start_us for r in cpu_prof.result.records}
    assert all(ns(e["ts"]) >= ns(host[e["args"]["op_index"]]) for e in kernels)


def test_slices_nest_on_every_track(trace):
    assert_slices_nest(trace)


def test_flow_events_pair_launches_with_kernels(trace):
    starts = {e["id"]: e for e in trace if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace if e["ph"] == "f"}
    kernels = {e["args"]["op_index"]: e for e in trace if e["ph"] == "X" and e["pid"] == DEVICE_PID}
    host_ops = {e["args"]["op_index"]: e for e in trace if e["ph"] == "X" and e.get("cat") == "cpu_op"}
    assert len(starts) == sum(1 for e in trace if e["ph"] == "s")  # ids are unique
    assert set(starts) == set(finishes) == set(kernels)
    for op, s in starts.items():
        f = finishes[op]
        assert (s["pid"], f["pid"]) == (HOST_PID, DEVICE_PID)
        assert s["name"] == f["name"] and s["cat"] == f["cat"]
        assert (s["tid"], s["ts"]) == (host_ops[op]["tid"], host_ops[op]["ts"])  # from the launch
        assert (f["tid"], f["ts"]) == (kernels[op]["tid"], kernels[op]["ts"])  # to the kernel
        assert f["bp"] == "e"


def test_a_device_bound_region_keeps_slices_nested():
    """Big ops on meta tensors: the device falls behind the host, so kernels run back to back and
    every start is a sum of earlier unrounded durations (where rounding errors show)."""
    def fn():
        x = torch.empty(4096, 4096, device="meta")
        for _ in range(20):  # back to back on one track
            x = x @ x
        for _ in range(20):
            x = x.exp()

    prof = profiled(fn)
    events = trace_events(prof.result)
    kernels = [e for e in events if e["ph"] == "X" and e["pid"] == DEVICE_PID]
    assert len(kernels) == 40
    assert_slices_nest(events)
    last = max(kernels, key=lambda e: e["ts"])
    assert ns(last["ts"]) + ns(last["dur"]) >= ns(prof.total_device_time_us)


def _record(index: int, host_start: float, cpu: float, device: float, engine: str) -> OpRecord:
    return OpRecord(index=index, name=f"op{index}", overload="default", input_shapes=[], input_dtypes=[],
                    engine=engine, flops=0, bytes_read=0, bytes_written=0, launch_us=0.0, compute_us=0.0,
                    memory_us=0.0, device_time_us=device, bound="memory", costed=True, module_path="",
                    scope="", phase="forward", host_start_us=host_start, cpu_time_us=cpu)


def test_rounding_never_makes_neighbouring_slices_overlap():
    # Regression: ts and dur were rounded separately, so [1.0007, +2.0007] became [1.001, 3.002]
    # and overlapped the next op, which starts at 3.0014 -> 3.001.
    records = [_record(0, 1.0007, 2.0007, 2.0007, "Vector"), _record(1, 3.0014, 1.0, 1.0, "Vector")]
    events = trace_events(ProfileResult(records, "simulated", "trn2"))
    assert_slices_nest(events)
    a, b = [e for e in events if e["ph"] == "X" and e["pid"] == DEVICE_PID]
    assert ns(a["ts"]) + ns(a["dur"]) == ns(b["ts"]) == 3001


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 50_000).map(lambda t: t / 10_000)] * 3,  # 0.1 ns steps
                          st.sampled_from(ENGINES + ["-"])), max_size=30))
def test_any_sequence_of_ops_gives_nested_slices(ops):
    records, host = [], 0.0
    for index, (gap, cpu, device, engine) in enumerate(ops):
        host += gap
        records.append(_record(index, host, cpu, 0.0 if engine == "-" else device, engine))
        host += cpu
    scopes = [ScopeRecord("all", 0.0, host)]
    events = trace_events(ProfileResult(records, "simulated", "trn2", scopes=scopes))
    assert_slices_nest(events)
    assert len([e for e in events if e["ph"] == "s"]) == len([e for e in events if e["ph"] == "f"])


# --- export() -------------------------------------------------------------------------------------


def test_export_writes_one_trace_per_selected_stream(tmp_path):
    prof = profiled(workload, profile_output_dir=tmp_path / "out")
    written = prof.export()
    assert [p.name for p in written] == ["framework_trace.json", "device_trace.json"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["device_trace.json", "framework_trace.json"]
    framework, device = load(written[0]), load(written[1])
    assert {e["pid"] for e in framework} == {HOST_PID}
    assert {e["pid"] for e in device} == {DEVICE_PID}
    assert not [e for e in framework + device if e["ph"] in ("s", "f")]  # flows need both processes
    assert len([e for e in framework if e.get("cat") == "cpu_op"]) == len(prof.result.records)
    kernels = [e for e in device if e["ph"] == "X"]
    assert len(kernels) == sum(1 for r in prof.result.records if r.device_time_us > 0)
    assert_slices_nest(framework)
    assert_slices_nest(device)


@pytest.mark.parametrize("mode, name", [(ProfileMode.DEVICE, "device_trace.json"),
                                        (ProfileMode.RUNTIME, "framework_trace.json")])
def test_export_writes_only_the_selected_stream(tmp_path, mode, name):
    prof = profiled(lambda: torch.ones(4) + 1, modes=[mode], profile_output_dir=str(tmp_path))
    assert [p.name for p in prof.export()] == [name]
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_export_without_an_output_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prof = profiled(lambda: torch.ones(4) + 1, profile_output_dir=None)
    assert prof.export() == []
    assert list(tmp_path.iterdir()) == []


# --- device memory --------------------------------------------------------------------------------


def test_device_memory_is_a_counter_track_of_the_timeline(tmp_path):
    x, w = torch.empty(128, 256, device="meta"), torch.empty(256, 512, device="meta")

    def work():
        a = x @ w  # 256 KiB
        b = a.relu()  # 256 KiB
        del a
        b.sum()

    prof = profiled(work)
    memory = prof.result.memory
    events = trace_events(prof.result)
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"device memory"}
    assert {e["pid"] for e in counters} == {DEVICE_PID}
    # one sample per timeline entry: the resident bytes at the start, then each change
    assert [e["args"]["bytes"] for e in counters] == [live for _, live in memory.timeline]
    resident = (128 * 256 + 256 * 512) * 4
    assert counters[0] == {"ph": "C", "name": "device memory", "pid": DEVICE_PID, "ts": 0.0,
                           "args": {"bytes": resident}}
    assert counters[2]["args"]["bytes"] == resident + 2 * 128 * 512 * 4  # a and b
    # each sample where its op's kernel starts on the device
    kernels = {e["args"]["op_index"]: e["ts"] for e in events if e.get("cat") == "kernel"}
    for (index, _), sample in zip(memory.timeline[1:], counters[1:]):
        assert sample["ts"] == kernels[index]
    # no memory, no counter
    off = profiled(work, profile_memory=False).result
    assert not [e for e in trace_events(off) if e["ph"] == "C"]
    assert not [e for e in trace_events(prof.result, device=False) if e["ph"] == "C"]
