"""Module paths that exist (issue 27, item 3): every module path a record carries is the root's
type name (the root itself), "" (outside any module) or a path ``root.get_submodule`` takes,
forward and backward, whatever wraps the model's functions in modules of their own (the
``kernels`` hub's ``use_kernelized_func``, which transformers applies to a Llama's rotary
embedding when ``kernels`` is installed: modules held in globals, outside the model's tree)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler


def _paths(model: nn.Module, step) -> dict[str, set[str]]:
    with NeuronProfiler(NeuronConfig()) as prof:
        step()
    paths: dict[str, set[str]] = {}
    for record in prof.result.records:
        paths.setdefault(record.module_path, set()).add(record.phase)
    return paths


def _assert_real_paths(model: nn.Module, paths: dict[str, set[str]]) -> None:
    invalid = []
    for path in paths:
        if path in ("", type(model).__name__):
            continue
        try:
            model.get_submodule(path)
        except AttributeError as exc:
            invalid.append((path, str(exc)))
    assert not invalid


# A function made a module and kept in a global, as kernels' use_kernelized_func does, with a
# submodule of its own: neither is in any model's tree.
class _Func(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x * 2) + 1


rotate = _Func()


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(rotate(x))


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Attention(), _Attention()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_module_outside_the_model_is_transparent():
    """Its ops (and its own submodule's) belong to the module that runs it, forward and
    backward: ``layers.0``, not ``layers.0._Func`` or ``layers.0._Func.inner``."""
    model = _Model()
    x = torch.randn(4, 8, requires_grad=True)
    paths = _paths(model, lambda: model(x).sum().backward())
    _assert_real_paths(model, paths)
    assert {"layers.0", "layers.1", "layers.0.proj", "layers.1.proj"} <= set(paths)
    assert paths["layers.0"] == {"forward", "backward"}


def _model(name: str) -> nn.Module:
    t = pytest.importorskip("transformers")
    t.logging.set_verbosity_error()
    torch.manual_seed(0)
    small = dict(vocab_size=128, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                 intermediate_size=128, max_position_embeddings=64)
    if name == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(**small, num_key_value_heads=2))
    if name == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(vocab_size=128, n_embd=64, n_head=4, n_layer=2,
                                              n_positions=64))
    return t.BertForSequenceClassification(t.BertConfig(**small))


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_every_module_path_of_a_training_step_is_real(name):
    model = _model(name)
    ids = torch.randint(0, 128, (2, 12))
    labels = torch.tensor([0, 1]) if name == "bert" else ids
    paths = _paths(model, lambda: model(input_ids=ids, labels=labels).loss.backward())
    _assert_real_paths(model, paths)
    assert any("backward" in phases for path, phases in paths.items() if "layers.0" in path
               or ".h.0." in path or "layer.0." in path)


def test_a_llama_with_the_kernels_hub_keeps_its_rotary_ops_in_self_attn():
    """With ``kernels`` installed, transformers makes Llama's apply_rotary_pos_emb a module of
    the hub (``Func``), called from self_attn but held by no module of the model: its ops were
    recorded under ``model.layers.0.self_attn.Func.Func``, which get_submodule rejects. They
    belong to self_attn, as they do without ``kernels``."""
    pytest.importorskip("kernels", reason="the kernels package is not installed")
    pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    if not isinstance(modeling_llama.apply_rotary_pos_emb, nn.Module):
        pytest.skip("this transformers does not wrap apply_rotary_pos_emb in a hub module")
    model = _model("llama").eval()
    with torch.no_grad():
        paths = _paths(model, lambda: model(input_ids=torch.randint(0, 128, (1, 8))))
    _assert_real_paths(model, paths)
    assert not any("Func" in path for path in paths)
    assert "model.layers.0.self_attn" in paths
