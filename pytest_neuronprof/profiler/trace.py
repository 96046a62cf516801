"""Chrome / Perfetto trace writer (Trace Event Format JSON).

Two processes: the host, with record_function ranges and the ATen ops at their real host times
(work the region handed to other threads on a track of its own each), and the NeuronCore, with
one track per engine. Device ops run one at a time in issue order, each starting when both the
device is free and its host launch has happened; flow arrows link each launch to its execution.
Where the result has device memory (the simulated backend), a counter track on the NeuronCore,
"device memory", gives the live bytes after each op that changes them, where the op starts on the
device.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..files import atomic_write_text
from ..vocabulary import ENGINES, GRAPH, SIMULATED
from .result import ProfileResult

HOST_PID, DEVICE_PID = 1, 2


def _us(value: float) -> float:
    return round(value, 3)


def _span(start: float, duration: float) -> dict[str, float]:
    """ts and dur of an X slice, rounded to the nanosecond. The end is rounded, not the
    duration: rounding both ts and dur could push a slice's end 1 ns past the start of the
    next one on the same track, a partial overlap that breaks nesting in trace viewers."""
    ts = _us(start)
    return {"ts": ts, "dur": _us(_us(start + duration) - ts)}


def engine_tracks(result: ProfileResult) -> list[str]:
    """The device tracks: the NeuronCore's engines, then any other engine the records name
    (a measured backend's "CPU", "CUDA" or "Neuron")."""
    extra = sorted({r.engine for r in result.records} - set(ENGINES) - {"-"})
    return list(ENGINES) + extra


def trace_events(result: ProfileResult, host: bool = True, device: bool = True) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    tracks = engine_tracks(result)
    if host:
        events += [
            {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0,
             "args": {"name": f"Host (PyTorch, {result.backend} backend)"}},
            {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 1, "args": {"name": "main"}},
        ]
        # Work handed to other threads (threads.py): a track each, as its ops overlap the main's.
        events += [{"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 1 + thread,
                    "args": {"name": f"handed-over work {thread}"}}
                   for thread in sorted({r.thread for r in result.records} - {0})]
        for scope in result.scopes:
            events.append({"ph": "X", "cat": "user_annotation", "name": scope.name, "pid": HOST_PID,
                           "tid": 1, **_span(scope.start_us, scope.end_us - scope.start_us)})
    if device:
        events.append({"ph": "M", "name": "process_name", "pid": DEVICE_PID, "tid": 0,
                       "args": {"name": f"NeuronCore {result.core} ({result.hardware}, simulated)"
                                if result.backend == SIMULATED else f"Device ({result.backend})"}})
        for tid, engine in enumerate(tracks, start=1):
            events.append({"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": tid,
                           "args": {"name": engine}})
    graph = result.execution == GRAPH
    # A graph runs once its region has been traced: its schedule starts after the last host op.
    graph_start = max((r.host_start_us + r.cpu_time_us for r in result.records), default=0.0)
    device_free = 0.0
    memory = result.memory if device else None
    changes = dict(memory.timeline) if memory is not None else {}
    counters: list[dict[str, Any]] = []
    if memory is not None:  # the resident bytes, alive before the region's first op
        counters.append(_memory_counter(graph_start if graph else 0.0, memory.resident_bytes))
    runs = result.graphs
    blocks: dict[int, float] = {}  # compiled graph run -> where its block starts on the device
    for r in result.records:
        if not graph and r.graph >= 0 and r.graph not in blocks and r.graph < len(runs):
            # a compiled graph (eager execution): one block on the device, once launched
            blocks[r.graph] = max(device_free, r.host_start_us)
            device_free = blocks[r.graph] + runs[r.graph].device_time_us
        if r.index in changes:  # where the op starts on the device, as its slice below
            at = graph_start + r.device_start_us if graph else max(device_free, r.host_start_us)
            counters.append(_memory_counter(at, changes[r.index]))
        if host:
            events.append({"ph": "X", "cat": "cpu_op", "name": r.name, "pid": HOST_PID,
                           "tid": 1 + r.thread,
                           **_span(r.host_start_us, r.cpu_time_us),
                           "args": {"module": r.module_path, "phase": r.phase,
                                    "input_shapes": r.input_shapes, "op_index": r.index}})
        if r.engine not in tracks or (r.device_time_us <= 0 and not graph):
            continue
        if graph:  # where the schedule put it, as long as its own engine worked on it
            start = graph_start + r.device_start_us
            duration = r.memory_us if r.engine == "DMA" else r.compute_us
        elif r.graph in blocks:  # in its compiled graph's block, where the graph's schedule put it
            start = blocks[r.graph] + r.device_start_us - runs[r.graph].device_start_us
            duration = r.memory_us if r.engine == "DMA" else r.compute_us
        else:  # one kernel after the other, each once the device is free and it was launched
            start = max(device_free, r.host_start_us)
            duration = r.device_time_us
            device_free = start + duration
        if duration <= 0:
            continue
        tid = tracks.index(r.engine) + 1
        if device:
            events.append({"ph": "X", "cat": "kernel", "name": r.name, "pid": DEVICE_PID, "tid": tid,
                           **_span(start, duration),
                           "args": {"module": r.module_path, "flops": r.flops, "bytes": r.bytes,
                                    "bound": r.bound, "peak_fraction": round(r.peak_fraction, 4),
                                    "compute_us": r.compute_us,
                                    "memory_us": r.memory_us, "device_time_us": r.device_time_us,
                                    "op_index": r.index, **({"group": r.group} if r.group >= 0 else {}),
                                    **_moved(r)}})
        if host and device and not graph and r.graph < 0:
            events.append({"ph": "s", "cat": "launch", "name": "launch", "id": r.index,
                           "pid": HOST_PID, "tid": 1 + r.thread, "ts": _us(r.host_start_us)})
            events.append({"ph": "f", "cat": "launch", "name": "launch", "id": r.index, "bp": "e",
                           "pid": DEVICE_PID, "tid": tid, "ts": _us(start)})
    if graph and device:
        queue = _transfer_events(result, graph_start, tid=len(tracks) + 1)
        events += queue + _group_events(result, graph_start, first_tid=len(tracks) + 1 + bool(queue))
    elif blocks and device:
        events += _graph_blocks(result, blocks, tid=len(tracks) + 1)
    return events + counters


def _transfer_events(result: ProfileResult, offset: float, tid: int) -> list[dict[str, Any]]:
    """Graph execution: the DMA queue's transfers (weight and input loads, spills, results), one
    slice each on a "DMA queue" track, named by the op they are for: what the engines wait on
    where their tracks are idle (the schedule's, costmodel/activity.py)."""
    transfers = result.utilisation.transfers if result.utilisation is not None else []
    if not transfers:
        return []
    names = {r.index: r.name for r in result.records}
    events: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": tid,
                                     "args": {"name": "DMA queue"}}]
    end = float("-inf")
    for start, stop, index in transfers:
        start = max(start, end)  # back to back on one queue: no slice overlaps the last
        if stop <= start:
            continue
        events.append({"ph": "X", "cat": "dma", "name": f"DMA for {names.get(index, '?')}", "pid": DEVICE_PID,
                       "tid": tid, **_span(offset + start, stop - start), "args": {"op_index": index}})
        end = stop
    return events


def _moved(r: Any) -> dict[str, Any]:
    """A collective's group, bytes over the links, algorithm and dtype (OpRecord); {} for an op
    that is not one."""
    if not getattr(r, "ranks", 0):
        return {}
    return {"ranks": r.ranks, "link_bytes": r.link_bytes, "algorithm": r.algorithm,
            "dtype": r.input_dtypes[0] if r.input_dtypes else ""}


def _graph_blocks(result: ProfileResult, blocks: dict[int, float], tid: int) -> list[dict[str, Any]]:
    """Eager execution with compiled graphs (torch.compile(backend="neuron")): each graph run as
    one block on a "compiled graphs" track, as Neuron Explorer shows an executable, its ops on
    the engine tracks under it."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": DEVICE_PID,
                                     "tid": tid, "args": {"name": "compiled graphs"}}]
    for number, start in sorted(blocks.items()):
        run = result.graphs[number]
        events.append({"ph": "X", "cat": "graph", "name": run.where, "pid": DEVICE_PID, "tid": tid,
                       **_span(start, run.device_time_us),
                       "args": {"graph": number, "inputs": run.inputs, "ops": [run.first, run.end],
                                "device_time_us": run.device_time_us,
                                **({"breaks": [f"{at}: {why}" for at, why in run.breaks]}
                                   if run.breaks else {})}})
    return events


def _memory_counter(at: float, live: int) -> dict[str, Any]:
    """A sample of the "device memory" counter track: ``live`` bytes from ``at`` on."""
    return {"ph": "C", "name": "device memory", "pid": DEVICE_PID, "ts": _us(at),
            "args": {"bytes": live}}


def _group_events(result: ProfileResult, offset: float, first_tid: int) -> list[dict[str, Any]]:
    """Graph execution: one slice per fused group, spanning its ops, on "fused groups" tracks (as
    many as groups overlap in time)."""
    members: dict[int, list[Any]] = {}
    for r in result.records:
        if r.group >= 0:
            members.setdefault(r.group, []).append(r)
    lanes: list[float] = []  # the end of the last slice on each track
    events: list[dict[str, Any]] = []
    for group, ops in sorted(members.items(), key=lambda item: min(r.device_start_us for r in item[1])):
        start = offset + min(r.device_start_us for r in ops)
        end = offset + max(r.device_start_us + max(r.compute_us, r.memory_us) for r in ops)
        lane = next((i for i, free in enumerate(lanes) if free <= start), len(lanes))
        if lane == len(lanes):
            lanes.append(0.0)
            events.append({"ph": "M", "name": "thread_name", "pid": DEVICE_PID,
                           "tid": first_tid + lane, "args": {"name": "fused groups"}})
        lanes[lane] = end
        events.append({"ph": "X", "cat": "fused", "name": " + ".join(r.name for r in ops),
                       "pid": DEVICE_PID, "tid": first_tid + lane, **_span(start, end - start),
                       "args": {"group": group, "ops": [r.index for r in ops],
                                "device_time_us": sum(r.device_time_us for r in ops)}})
    return events


def write_chrome_trace(result: ProfileResult, path: str | os.PathLike[str], host: bool = True,
                       device: bool = True) -> None:
    document = {"traceEvents": trace_events(result, host, device), "displayTimeUnit": "ns",
                "otherData": {"backend": result.backend, "hardware": result.hardware,
                              "execution": result.execution,
                              "total_device_time_us": result.total_device_time_us}}
    atomic_write_text(Path(path), json.dumps(document))
