"""benchmarks/published.py and published_workloads.py: the op-level rows (their data file, the
workloads on meta, the fixed costs a simulated figure includes), the compiler flag of each row,
the regression-size pairs and the targets of issue 17. No transformers needed: only the op-level
workloads run."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
OPLEVEL_CSV = BENCH / "data" / "trn_oplevel_calibration.csv"
SHARED_CSV = ROOT.parent / "shared" / "data" / "trn_oplevel_calibration.csv"

OPLEVEL_IDS = ["g512", "g1024", "g1536", "g2048", "g2560", "g3072", "g3584", "g4096", "g4608", "g5120",
               "n1_mm_best", "n1_silu", "n1_adamw", "ar2_1k", "ar2_1m", "ar2_16m", "ar2_256m", "ar2_1g"]
FIT_IDS = {"g512", "g1024", "g1536", "g2048", "ar2_1k", "ar2_1m", "ar2_16m", "n1_silu"}


@pytest.fixture(scope="module")
def pub() -> Iterator[ModuleType]:
    """benchmarks/published.py (benchmarks/ is not a package: its scripts import each other by
    name from their folder, also lazily, so the folder stays on the path while these tests run)."""
    sys.path.insert(0, str(BENCH))
    try:
        import published  # type: ignore[import-not-found]  # benchmarks/ is on the path, not a package

        yield published
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def pw(pub: ModuleType) -> ModuleType:
    import published_workloads  # type: ignore[import-not-found]

    return published_workloads


# --- the data file ------------------------------------------------------------------------------

def test_oplevel_file_has_the_18_rows_with_their_columns() -> None:
    with open(OPLEVEL_CSV, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["id", "hardware_profile", "workload", "params", "dtype", "published_us",
                                 "kind", "source"]
    assert [r["id"] for r in rows] == OPLEVEL_IDS
    assert {r["workload"] for r in rows} == {"mm_t", "silu", "adamw", "all_reduce"}
    assert {r["kind"] for r in rows} == {"best_kernel", "collective"}
    assert all(r["source"] for r in rows)
    by_id = {r["id"]: r for r in rows}
    assert (by_id["g512"]["published_us"], by_id["g4096"]["published_us"]) == ("54", "1823")
    assert by_id["n1_silu"]["params"] == "4096;7168" and by_id["n1_silu"]["dtype"] == "fp32"
    assert "--auto-cast=none" in by_id["n1_adamw"]["source"]


def test_oplevel_file_is_the_design_data_unchanged() -> None:
    if not SHARED_CSV.exists():
        pytest.skip("the project's design data (../shared/data) is not beside this checkout")
    assert OPLEVEL_CSV.read_bytes() == SHARED_CSV.read_bytes()


def test_oplevel_rows_load_as_a_third_set_with_labels_and_split(pub: ModuleType, pw: ModuleType) -> None:
    rows = pub.load_rows("oplevel")
    assert [r["id"] for r in rows] == OPLEVEL_IDS
    assert len(pub.load_rows("all")) == 18 + 40 + 18
    by_id = {r["id"]: r for r in rows}
    assert by_id["g2048"]["config"] == "M=2048;K=2048;N=2048;dtype=bf16;unit=us"
    assert by_id["ar2_1g"]["config"] == "ranks=2;bytes=1073741824;dtype=fp32;unit=us"
    assert float(by_id["n1_adamw"]["published_value"]) == 1888.0
    labels = {r["id"]: pub.row_label(r, pw.parse_config(r["config"])) for r in rows}
    assert labels["g2048"] == "O g2048 mm_t 2048^3"
    assert labels["n1_mm_best"] == "O n1_mm_best mm_t 4096x8192x8192"
    assert labels["n1_silu"] == "O n1_silu silu 4096x7168"
    assert labels["ar2_16m"] == "O ar2_16m all_reduce 2 ranks 16 MiB"
    # the split by whole shape ranges
    assert pub.OPLEVEL_FIT_IDS == FIT_IDS
    assert [r["id"] for r in pub.oplevel_rows("fit")] == [i for i in OPLEVEL_IDS if i in FIT_IDS]
    assert [r["id"] for r in pub.oplevel_rows("holdout")] == [i for i in OPLEVEL_IDS if i not in FIT_IDS]


def test_oplevel_config_checks_the_number_of_params(pw: ModuleType) -> None:
    assert pw.oplevel_config("silu", "4096;7168", "fp32") == "M=4096;N=7168;dtype=fp32;unit=us"
    with pytest.raises(ValueError, match="expected 3 fields"):
        pw.oplevel_config("mm_t", "512;512", "bf16")
    with pytest.raises(KeyError, match="unknown op-level workload"):
        pw.oplevel_config("conv", "1", "bf16")


# --- the workloads on meta ----------------------------------------------------------------------

def _capture(pub: ModuleType, row_id: str, params: str | None = None) -> Any:
    row = dict(next(r for r in pub.load_rows("oplevel") if r["id"] == row_id))
    if params is not None:  # a smaller shape of the same row, to keep the test fast
        row["config"] = sys.modules["published_workloads"].oplevel_config(row["workload"], params, row["dtype"])
    return pub.capture_row(row)


def _records(pub: ModuleType, capture: Any, execution: str = "graph") -> list[Any]:
    from pytest_neuronprof.costmodel.profiles import load_hardware

    hw = load_hardware(pub.row_hardware(capture.row, capture.cfg))
    return [r for _, _, c in capture.phases for r in c.retime(hw, execution, capture.auto_cast)
            if r.engine != "-"]


def test_mm_t_is_one_matrix_product_of_a_transposed_operand(pub: ModuleType) -> None:
    capture = _capture(pub, "g512")
    [mm] = _records(pub, capture)
    assert mm.name == "aten::mm"
    assert mm.input_shapes == [[512, 512], [512, 512]]
    assert mm.flops == 2 * 512**3
    assert mm.bytes_written == 512 * 512 * 2  # bf16 output
    assert mm.bytes_read >= 2 * 512 * 512 * 2  # both operands come from HBM (region inputs)
    assert capture.auto_cast == "none" and capture.workload.unit == "us"
    rect = _capture(pub, "n1_mm_best", "256;512;128")
    [mm] = _records(pub, rect)
    assert mm.input_shapes == [[256, 512], [512, 128]] and mm.flops == 2 * 256 * 512 * 128


def test_silu_reads_and_writes_its_tensor_once(pub: ModuleType) -> None:
    [silu] = _records(pub, _capture(pub, "n1_silu", "256;512"))
    assert silu.name == "aten::silu"
    assert (silu.bytes_read, silu.bytes_written) == (256 * 512 * 4, 256 * 512 * 4)
    assert silu.input_dtypes[0] == "float32" and silu.engine == "Scalar"


def test_adamw_is_one_fused_update_over_param_grad_and_moments(pub: ModuleType) -> None:
    capture = _capture(pub, "n1_adamw", "128;256")
    [update] = _records(pub, capture)
    elements = 128 * 256
    assert update.name == "aten::_fused_adamw_"
    # param, grad, m and v read (and the 4-byte step), param, m and v written
    assert update.bytes_read == 4 * elements * 4 + 4
    assert update.bytes_written == 3 * elements * 4
    assert any("_fused_adamw_" in note for note in capture.workload.notes)


def test_all_reduce_is_one_collective_over_the_fake_group(pub: ModuleType, pw: ModuleType) -> None:
    import torch.distributed as dist

    try:
        capture = _capture(pub, "ar2_1m")
        assert dist.get_world_size() == 2  # the workload's fake group, made in its warm-up
    finally:  # leave no process group to the other tests
        if dist.is_initialized():
            dist.destroy_process_group()
    records = _records(pub, capture)
    [reduce] = [r for r in records if r.engine == "Collective"]
    assert reduce.name == "_c10d_functional::all_reduce"
    assert reduce.input_shapes[0] == [2**20 // 4]
    assert reduce.device_time_us > 0
    with pytest.raises(ValueError, match="whole number"):
        pw.build("all_reduce", "ranks=2;bytes=6;dtype=fp32;unit=us")


# --- what a simulated figure includes -----------------------------------------------------------

def test_each_graph_execution_pays_the_floor_and_host_latencies_the_launch_on_top(pub: ModuleType) -> None:
    from pytest_neuronprof.costmodel.profiles import load_hardware

    capture = _capture(pub, "g512")
    hw = dataclasses.replace(load_hardware("trn2-lnc1"), graph_floor_us=50.0, graph_execution_us=100.0)
    ops = sum(r.device_time_us for r in _records(pub, capture))
    total, phases, _ = pub.time_row(capture, hw, "graph")
    assert total == pytest.approx(ops + 50.0) and phases == {"graph": pytest.approx(ops + 50.0)}
    # a host-measured latency (a model row in ms) pays the host's launch as well
    host = dataclasses.replace(capture, row={"set": "calibration", "workload": "encoder_fwd"},
                               cfg={"unit": "ms"})
    assert pub.time_row(host, hw, "graph")[0] == pytest.approx(ops + 150.0)
    # eager execution: each op pays its own launch, no graph's
    eager_ops = sum(r.device_time_us for r in _records(pub, capture, "eager"))
    assert pub.time_row(capture, hw, "eager")[0] == pytest.approx(eager_ops)
    # a phase weighted 1/accum (a training row's optimizer step) pays its fixed costs with that weight
    phases = [dataclasses.replace(p, weight=0.25) for p in capture.workload.phases]
    quarter = dataclasses.replace(capture, workload=dataclasses.replace(capture.workload, phases=phases))
    assert pub.time_row(quarter, hw, "graph")[0] == pytest.approx(0.25 * (ops + 50.0))
    assert pub.per_execution_us(capture, hw, "graph") == 50.0
    assert pub.per_execution_us(host, hw, "graph") == 150.0


# --- compiler flags per row ---------------------------------------------------------------------

def _row(notes: str, workload: str = "encoder_fwd", set_: str = "holdout") -> dict[str, Any]:
    return {"set": set_, "workload": workload, "notes": notes}


@pytest.mark.parametrize("notes, expected", [
    ("transformers-neuronx (Neuron 2.18.0), TP=24", "matmult"),  # before 2.27: the old default
    ("vLLM Neuron DLC sdk2.26.1, NxD Inference, BF16", "matmult"),
    ("SDK version not stated (... i.e. Neuron 2.21-2.23)", "matmult"),
    ("FP32, LAMB, Neuron 2.28.0, PyTorch/XLA", "none"),  # from 2.27: none
    ("trn2.48xlarge, Neuron SDK 2.32 or later", "none"),
    ("trn1.2xlarge, Neuron 2.27.0, published model FP32 with --auto-cast matmult to BF16", "matmult"),
    ("FP32 model with matmult autocast BF16", "matmult"),
    ("Neuron 2.18, compiled with --auto-cast=none", "none"),
    ("no version given", "none"),
])
def test_row_auto_cast_follows_the_notes_and_the_sdk_version(pub: ModuleType, notes: str, expected: str) -> None:
    assert pub.row_auto_cast(_row(notes), {}) == expected


def test_time_row_costs_a_float32_product_with_the_rows_auto_cast(pub: ModuleType) -> None:
    from pytest_neuronprof.costmodel.profiles import load_hardware

    row = dict(next(r for r in pub.load_rows("oplevel") if r["id"] == "n1_mm_best"))
    row["config"] = "M=1024;K=1024;N=1024;dtype=fp32;unit=us"
    capture = pub.capture_row(row)
    hw = load_hardware("trn1")
    as_compiled = pub.time_row(capture, hw, "graph")[0]  # the row's own: --auto-cast=none
    assert capture.auto_cast == "none"
    assert pub.time_row(capture, hw, "graph", "none")[0] == as_compiled
    # matmult: the fp32 product runs at the bf16 rate (4x), the fixed costs stay
    cast = pub.time_row(capture, hw, "graph", "matmult")[0]
    assert cast < as_compiled
    bf16 = dict(row, config="M=1024;K=1024;N=1024;dtype=bf16;unit=us")
    assert pub.time_row(pub.capture_row(bf16), hw, "graph", "matmult")[0] < as_compiled


def test_row_auto_cast_config_key_kernels_and_the_published_rows(pub: ModuleType, pw: ModuleType) -> None:
    assert pub.row_auto_cast(_row("Neuron 2.18.0"), {"auto_cast": "all"}) == "all"
    assert pub.row_auto_cast(_row("Neuron 2.20", "mamba_fused"), {}) == "none"
    assert pub.row_auto_cast(_row("", "mm_t", "oplevel"), {}) == "none"
    casts = {f"{r['set'][0]}{r['index']}": pub.row_auto_cast(r, pw.parse_config(r["config"]))
             for r in pub.load_rows("all")}
    assert casts["c15"] == "matmult"  # transformers-neuronx, Neuron 2.18
    assert casts["c17"] == "none"  # Autocast BF16 training, Neuron 2.28
    assert casts["h33"] == "none"  # the FP32 LAMB row, Neuron 2.28
    assert casts["c18"] == "none"  # an NKI kernel
    assert casts["o12"] == "none"  # the fp32 SiLU, --auto-cast=none
    assert casts["h30"] == "none"  # Neuron SDK 2.32


# --- regression-size pairs ----------------------------------------------------------------------

def _result(label: str, config: str, published_time: float, simulated_time: float, hw: str = "inf2",
            workload: str = "vision_fwd", set_: str = "holdout", **extra: Any) -> dict[str, Any]:
    ratio = simulated_time / published_time
    return {"label": label, "config": config, "hardware_profile": hw, "workload": workload, "set": set_,
            "device_time_us": simulated_time, "time_ratio": ratio, "ratio": ratio, "error": None,
            "category": "b1-latency", **extra}


def test_find_pairs_keeps_rows_that_differ_only_in_batch_arch_or_depth(pub: ModuleType) -> None:
    rows = [
        _result("r18", "arch=resnet18;batch=1;unit=ms", 1, 1),
        _result("r152", "arch=resnet152;batch=1;unit=ms", 1, 1),
        _result("r18b8", "arch=resnet18;batch=8;unit=ms", 1, 1),
        _result("r18s", "arch=resnet18;batch=1;image=299;unit=ms", 1, 1),  # image differs
        _result("r18trn1", "arch=resnet18;batch=1;unit=ms", 1, 1, hw="trn1"),  # other chip
        _result("r18tput", "arch=resnet18;batch=1;cores=2;unit=per_s", 1, 1),  # other unit, cores
        _result("op", "arch=resnet18;batch=1;unit=ms", 1, 1, set_="oplevel"),
        _result("vgg", "arch=vgg11;batch=1;unit=ms", 1, 1),  # another family: not a size of ResNet
        _result("vgg16", "arch=vgg16;batch=1;unit=ms", 1, 1),
    ]
    pairs = [(a["label"], b["label"], d) for a, b, d in pub.find_pairs(rows)]
    assert pairs == [("r18", "r152", ("arch",)), ("r18", "r18b8", ("batch",)),
                     ("r152", "r18b8", ("arch", "batch")), ("vgg", "vgg16", ("arch",))]


def test_model_family_is_the_architecture_at_another_size(pw: ModuleType) -> None:
    assert pw.model_family("resnet18") == pw.model_family("resnet152") == "resnet"
    assert pw.model_family("bert-base-uncased") == pw.model_family("bert-large-uncased")
    assert pw.model_family("llama-2-7b") == pw.model_family("llama-2-70b") == "llama/32000"
    assert pw.model_family("llama-3.3-70b") == pw.model_family("llama-3.1-405b")
    assert pw.model_family("llama-3-70b") != pw.model_family("llama-2-70b")  # 4x the vocabulary
    assert pw.model_family("albert-base-v2") != pw.model_family("bert-base-uncased")
    assert pw.model_family("distilbert-base-uncased") != pw.model_family("bert-base-uncased")
    assert pw.model_family("vit-base-patch16-224") == "vit-base-patch16-224"


def test_find_pairs_on_the_published_rows(pub: ModuleType, pw: ModuleType) -> None:
    rows = pub.load_rows("all")
    for r in rows:
        r["label"] = pub.row_label(r, pw.parse_config(r["config"]))
    pairs = {(a["label"], b["label"]) for a, b, _ in pub.find_pairs(rows)}
    assert len(pairs) == 33
    assert ("H11 resnet18 b1", "H12 resnet152 b1") in pairs  # the worst case
    assert ("C01 bert-base-uncased b1 s128", "C07 bert-base-uncased b8 s128") in pairs
    assert ("H26 llama-3.3-70b b1 ctx12800 tp64", "H28 llama-3.1-405b b1 ctx12800 tp64") in pairs
    assert ("H24 llama-2-70b b1 ctx640 tp32", "H25 llama-3-70b b1 ctx640 tp32") not in pairs
    assert not any("albert" in a and "albert" not in b for a, b in pairs)
    assert not any(a.startswith("O") or b.startswith("O") for a, b in pairs)
    # mamba rows differ in channels or seq, the train_step rows in accum, seq or cores: no pair
    assert not any("mamba" in a or "pretrain" in a for a, _ in pairs)


def test_pair_growth_is_in_time_per_execution_smaller_first(pub: ModuleType) -> None:
    results = [
        _result("big", "arch=resnet152;batch=1;unit=ms", published_time=3000, simulated_time=9000),
        _result("small", "arch=resnet18;batch=1;unit=ms", published_time=1000, simulated_time=1500),
        _result("failed", "arch=resnet50;batch=1;unit=ms", 1, 1),
    ]
    results[2].update(time_ratio=None, ratio=None, error="boom")
    growths = pub.pair_growths(results)
    measured = [g for g in growths if g["ratio"] is not None]
    assert len(growths) == 3 and len(measured) == 1
    [g] = measured
    assert g["rows"] == ["small", "big"]
    assert g["published_growth"] == pytest.approx(3.0)
    assert g["simulated_growth"] == pytest.approx(6.0)
    assert g["ratio"] == pytest.approx(2.0)


# --- targets ------------------------------------------------------------------------------------

def _oplevel_results(pub: ModuleType, ratios: dict[str, float]) -> list[dict[str, Any]]:
    out = []
    for row in pub.load_rows("oplevel"):
        ratio = ratios.get(row["id"], 1.0)
        published = float(row["published_value"])
        out.append(_result(row["id"], row["config"], published, published * ratio, hw=row["hardware_profile"],
                           workload=row["workload"], set_="oplevel", id=row["id"]))
    return out


def _by_name(goals: list[Any]) -> dict[str, Any]:
    return {f"{g.level}: {g.name}": g for g in goals}


def test_targets_pass_on_exact_figures_and_fail_on_a_bad_ratio(pub: ModuleType) -> None:
    model = [_result(f"h{i}", f"arch=resnet{depth};batch=1;unit=ms", 1000 * (i + 1), 1100 * (i + 1),
                     category="batch" if i < 2 else "b1-latency") for i, depth in enumerate((18, 50, 101, 152))]
    exact = _oplevel_results(pub, {})
    results = exact + model
    goals = pub.targets(results, pub.pair_growths(results))
    assert all(g.passed for g in goals), [g.line() for g in goals if not g.passed]
    named = _by_name(goals)
    assert named["sizes: median pair's growth sim / published, either way"].rows == "6 pairs"
    assert named["model: held-out median |sim/published - 1|"].value == pytest.approx(0.1)
    assert named["op-level: GEMM growth 512^3 -> 4096^3, sim / published"].value == pytest.approx(1.0)

    # one op-level row 1.6x slow: the median holds, "all within 1.5x" fails
    slow = _by_name(pub.targets(_oplevel_results(pub, {"ar2_1g": 1.6}), []))
    assert slow["op-level: median |sim/published - 1|"].passed is True
    worst = slow["op-level: worst time ratio, either way (all within 1.5x)"]
    assert worst.value == pytest.approx(1.6) and worst.passed is False and worst.status == "FAIL"
    # the 512^3 GEMM 0.21x of published (the figure): the sweep's growth is off 4.8x
    growth = _by_name(pub.targets(_oplevel_results(pub, {"g512": 0.21}), []))[
        "op-level: GEMM growth 512^3 -> 4096^3, sim / published"]
    assert growth.value == pytest.approx(1 / 0.21) and growth.passed is False
    # too fast counts as much as too slow
    fast = _by_name(pub.targets(_oplevel_results(pub, {"g4096": 0.6}), []))
    assert fast["op-level: worst time ratio, either way (all within 1.5x)"].value == pytest.approx(1 / 0.6)
    assert fast["op-level: GEMM growth 512^3 -> 4096^3, sim / published"].passed is False  # 0.6 < 1/1.3

def test_size_and_model_targets_fail_on_overstated_growth(pub: ModuleType) -> None:
    # a batch-1 pair whose growth the simulator overstates 2.9x (ResNet-18 -> ResNet-152 today)
    results = [_result("r18", "arch=resnet18;batch=1;unit=ms", 596, 596),
               _result("r152", "arch=resnet152;batch=1;unit=ms", 1185, 1185 * 2.9)]
    named = _by_name(pub.targets(results, pub.pair_growths(results)))
    assert named["sizes: worst pair's growth sim / published, either way"].value == pytest.approx(2.9)
    assert named["sizes: worst pair's growth sim / published, either way"].passed is False
    assert named["sizes: median pair's growth sim / published, either way"].passed is False
    assert named["model: worst time ratio, either way (all within 2x)"].passed is False
    # no op-level row ran: those targets are not judged
    assert named["op-level: median |sim/published - 1|"].passed is None
    assert named["op-level: median |sim/published - 1|"].status == "n/a"


# --- the command --------------------------------------------------------------------------------

def test_command_runs_op_level_rows_and_writes_them_with_targets(pub: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])  # main() puts the repository on it
    out = tmp_path / "out.json"
    assert pub.main(["--rows", "oplevel", "--only", "O g512 ", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Op level" in printed and "Targets (issue 17)" in printed
    assert "g512" in printed and "g1024" not in printed
    payload = json.loads(out.read_text(encoding="utf-8"))
    [row] = payload["results"]
    assert row["id"] == "g512" and row["split"] == "fit" and row["error"] is None
    assert row["device_time_us"] > 0 and row["dominant"]["name"] == "aten::mm"
    assert {t["name"] for t in payload["targets"]} >= {"median |sim/published - 1|"}
    assert payload["pairs"] == []


def test_strict_exits_1_when_a_target_fails(pub: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])  # main() puts the repository on it
    args = ["--rows", "oplevel", "--only", "O g512 ", "--strict"]
    assert pub.main(args) == 0  # one GEMM row: nothing fails, the rest is n/a
    failing = pub.Target("op-level", "a target", 2.0, None, 1.5, "1 row")
    monkeypatch.setattr(pub, "targets", lambda results, pairs: [failing])
    assert pub.main(args) == 1
    assert pub.main(args[:-1]) == 0  # without --strict a failed target is printed, not fatal
    assert "a target" in capsys.readouterr().out and failing.status == "FAIL"
