"""A failure points at the right place (issue 11, items 13 and 14).

Per-module breakdown: an op's time is kept per module in the baseline, and the failure names the
modules whose time changed (not the one with the most time); renaming a module alone fails nothing.
Real module paths: they are attribute paths (``layers.0.proj``, valid for ``get_submodule``),
also through containers that are never called; under activation checkpointing the recomputed
forward ops are credited to the module they recompute and marked as recomputation.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytest_neuronprof import NeuronConfig, NeuronProfiler

pytest_plugins = ["pytester"]


pytestmark = pytest.mark.usefixtures("lean_inner_runs")


# --- per-module breakdown --------------------------------------------------------------------

TWO_LINEARS = '''
import json, pathlib, pytest, torch
from torch import nn

HERE = pathlib.Path(__file__).parent


class Net(nn.Module):
    def __init__(self, width, big="big"):
        super().__init__()
        setattr(self, big, nn.Linear(1024, 1024))
        self.small = nn.Linear(1024, width)
        self.names = (big, "small")

    def forward(self, x):
        return getattr(self, self.names[0])(x), self.small(x)


@pytest.mark.neuron_profile
def test_net():
    knobs = json.loads((HERE / "knobs.json").read_text())
    net = Net(knobs["width"], knobs.get("big", "big"))
    with torch.no_grad():
        net(torch.randn(64, 1024))
'''


def test_the_failure_names_the_module_whose_time_changed(pytester: pytest.Pytester):
    pytester.makepyfile(test_net=TWO_LINEARS)
    (pytester.path / "knobs.json").write_text(json.dumps({"width": 128}))
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "baselines" / "test_net.json").read_text())
    modules = entry["tests"]["test_net.py::test_net"]["simulated:trn2"]["ops"]["aten::addmm"]["modules"]
    assert list(modules) == ["big", "small"] and modules["big"] > modules["small"]
    (pytester.path / "knobs.json").write_text(json.dumps({"width": 1024}))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    row = next(line for line in result.stdout.lines if line.startswith("aten::addmm"))
    assert row.split()[1] == "small" and "big" not in row, row


def test_renaming_a_module_fails_nothing(pytester: pytest.Pytester):
    pytester.makepyfile(test_net=TWO_LINEARS)
    (pytester.path / "knobs.json").write_text(json.dumps({"width": 128}))
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    (pytester.path / "knobs.json").write_text(json.dumps({"width": 128, "big": "large"}))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_net.py::test_net *+0.0%*pass"])


# --- real module paths ------------------------------------------------------------------------

class Layer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attention = nn.ModuleDict({"query": nn.Linear(d, d), "key": nn.Linear(d, d)})
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention["query"](x) * self.attention["key"](x)
        return x + self.mlp(x)


class Encoder(nn.Module):
    """Like a Hugging Face encoder: a ModuleList indexed in forward, never called itself."""

    def __init__(self, d: int, n: int, checkpointed: bool = False) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(d) for _ in range(n))
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed else layer(x)
        return x


class Model(nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.encoder = Encoder(16, 2, checkpointed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


def test_paths_are_attribute_paths_through_containers():
    model = Model()
    with torch.no_grad(), NeuronProfiler(NeuronConfig()) as prof:
        model(torch.randn(4, 16))
    paths = {r.module_path for r in prof.result.records if r.name == "aten::addmm"}
    assert paths == {f"encoder.layer.{i}.{leaf}" for i in range(2)
                     for leaf in ("attention.query", "attention.key", "mlp.0", "mlp.2")}
    for path in paths:
        model.get_submodule(path)  # valid paths


@pytest.mark.parametrize("reentrant", [False, True])
def test_recomputation_is_credited_to_the_module_it_recomputes(reentrant):
    model = Model(checkpointed=True)
    if reentrant:
        model.encoder.forward = lambda x: _reentrant(model.encoder, x)
    x = torch.randn(4, 16, requires_grad=True)
    with NeuronProfiler(NeuronConfig()) as prof:
        model(x).sum().backward()
    recomputed = [r for r in prof.result.records if r.phase == "recompute"]
    # non-reentrant checkpointing stops recomputing once backward has what it needs: the last
    # Linear's output is not needed, so mlp.2 is not run again
    leaves = ("attention.query", "attention.key", "mlp.0") + (("mlp.2",) if reentrant else ())
    assert sorted(r.module_path for r in recomputed if r.name == "aten::addmm") == sorted(
        f"encoder.layer.{i}.{leaf}" for i in range(2) for leaf in leaves)
    assert {r.module_path for r in recomputed if r.name == "aten::gelu"} == {
        "encoder.layer.0.mlp.1", "encoder.layer.1.mlp.1"}
    forward = [r for r in prof.result.records if r.phase == "forward" and r.name == "aten::addmm"]
    assert len(forward) == 8  # the forward pass itself is unchanged


def _reentrant(encoder: Encoder, x: torch.Tensor) -> torch.Tensor:
    for layer in encoder.layer:
        x = checkpoint(layer, x, use_reentrant=True)
    return x


CHECKPOINTED = '''
import json, pathlib, pytest, torch
from torch import nn
from torch.utils.checkpoint import checkpoint

HERE = pathlib.Path(__file__).parent


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Block()

    def forward(self, x):
        if json.loads((HERE / "knobs.json").read_text())["checkpoint"]:
            return checkpoint(self.mlp, x, use_reentrant=False)
        return self.mlp(x)


@pytest.mark.neuron_profile
def test_train():
    net = Net()
    net(torch.randn(32, 64, requires_grad=True)).sum().backward()
'''


def test_the_failure_says_recomputation_not_a_lost_fusion(pytester: pytest.Pytester):
    pytester.makepyfile(test_train=CHECKPOINTED)
    (pytester.path / "knobs.json").write_text(json.dumps({"checkpoint": False}))
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    (pytester.path / "knobs.json").write_text(json.dumps({"checkpoint": True}))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "same total work" not in text
    result.stdout.fnmatch_lines(["aten::addmm *mlp.up (+*more calls (2 -> 3): 1 recomputed in backward "
                                 "(activation checkpointing)*"])


def test_hugging_face_paths_when_transformers_is_installed():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100)
    with torch.device("meta"):
        model = transformers.BertModel(config).eval()
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    with torch.inference_mode(), NeuronProfiler(NeuronConfig()) as prof:
        model(input_ids=ids)
    paths = {r.module_path for r in prof.result.records if r.module_path}
    assert "encoder.layer.0.attention.self.query" in paths and "encoder.layer.1.output.dense" in paths
    assert not any("BertLayer" in p for p in paths)
    for path in paths - {"BertModel"}:
        model.get_submodule(path)
