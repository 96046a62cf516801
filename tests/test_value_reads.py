"""Reading a value of a tensor that has none (issue 29, item 4; issue 30): torch's bare error for
a read on meta becomes ValueReadError, naming the line that read and what to do; and a whole
transformers model runs on meta as docs/guide/meta-tensors.md shows (its block, run as it is).

The simulated neuron device's own reads are checked in tests/test_neuron_device.py (in a process
of their own: the device cannot be turned off)."""

from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path

import pytest
import torch

from pytest_neuronprof.errors import NeuronProfError
from pytest_neuronprof.profiler import value_reads
from pytest_neuronprof.profiler.value_reads import (ValueReadError, explain, explained_value_reads,
                                                    value_read_error)

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).name


def doc_block(page: str, contains: str) -> str:
    """The ```python block of docs/guide/``page`` that contains ``contains``: the code the docs
    show, to run as it is."""
    text = (ROOT / "docs" / "guide" / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [b for b in blocks if contains in b]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {contains!r}"
    return found[0]


def line_of(marker: str) -> int:
    """The line of this file that carries ``marker`` in a comment."""
    lines = Path(__file__).read_text().splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(found) == 1, marker
    return found[0]


def meta_scalar() -> torch.Tensor:
    return torch.ones((), device="meta")


@pytest.mark.parametrize("read, what", [
    (lambda x: x.item(), "a value (.item(), bool(), int(), float())"),
    (lambda x: bool(x), "a value (.item(), bool(), int(), float())"),
    (lambda x: float(x), "a value (.item(), bool(), int(), float())"),
    (lambda x: x.reshape(1).tolist(), "the values (.tolist(), .cpu())"),
    (lambda x: x.cpu(), "the values (.tolist(), .cpu())"),
    (lambda x: x.numpy(), "the values (.numpy())"),
    (lambda x: torch.equal(x, x), "the values (torch.equal)"),
    (lambda x: torch.allclose(x, x), "a value (.item(), bool(), int(), float())"),
    (lambda x: x.reshape(1).nonzero(), "nonzero: its output's shape depends on them"),
    (lambda x: x.reshape(1).masked_select(x.reshape(1) > 0), "masked_select"),
], ids=["item", "bool", "float", "tolist", "cpu", "numpy", "equal", "allclose", "nonzero",
        "masked_select"])
def test_a_read_on_meta_names_the_line_and_what_to_do(read, what):
    x = meta_scalar()
    with pytest.raises(ValueReadError) as info:
        with explained_value_reads():
            read(x)
    line = read.__code__.co_firstlineno  # the lambda's line reads: the innermost of the test's
    message = str(info.value)
    assert message.startswith(f"{value_reads._shown(__file__, line)} reads "), message
    assert what in message and "of a meta tensor" in message
    assert "assert on shapes and dtypes, not values" in message
    assert "docs/guide/meta-tensors.md#reading-values" in message
    assert "transformers" not in message  # the hint for transformers only where it read
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, NeuronProfError)
    # no chained torch error, and the traceback ends at the line that read
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.traceback[-1].lineno + 1 == line
    assert Path(info.traceback[-1].path).name == HERE


def test_other_errors_pass_through_unchanged():
    with pytest.raises(RuntimeError, match="must have same reduction dim") as info:
        with explained_value_reads():
            torch.ones(2, 3, device="meta") @ torch.ones(2, 3, device="meta")
    assert type(info.value) is RuntimeError
    with pytest.raises(KeyError):
        with explained_value_reads():
            raise KeyError("x")
    # the same words from anywhere but torch's read are still torch's read: renamed
    assert explain(RuntimeError("Tensor.item() cannot be called on meta tensors")) is not None
    assert explain(RuntimeError("something else")) is None
    assert explain(ValueError("Tensor.item() cannot be called on meta tensors")) is None


def test_a_read_in_a_library_names_its_line_and_the_tests():
    """Where the reading line is a library's (site-packages), the message names it and the
    innermost line of the user's own code that called it; torch's and the test runner's frames
    are never the reader."""
    library = os.path.join(sysconfig.get_paths()["purelib"], "somelib", "reader.py")
    frames = [("/elsewhere/test_user.py", 12), (pytest.__file__, 5), (library, 761),
              (torch.__file__, 3)]
    shown, reader = value_reads.where(frames)
    assert shown == "somelib/reader.py:761, called from /elsewhere/test_user.py:12"
    assert reader == library


def test_a_read_with_no_reading_frame_says_so():
    error = value_read_error("a value (.item())", "meta", frames=[(torch.__file__, 1)])
    assert str(error).startswith("code outside the test (no frame of the reading code was found) reads")


transformers = pytest.importorskip("transformers")


def test_the_guides_transformers_model_on_meta_runs_as_shown():
    """docs/guide/meta-tensors.md's block, run as it is: a full Llama-2-7B-shaped
    LlamaForCausalLM on meta, profiled, with the numbers the page gives."""
    namespace: dict = {}
    exec(compile(doc_block("meta-tensors.md", "LlamaForCausalLM(config)"),  # noqa: S102
                 "meta-tensors.md", "exec"), namespace)
    result = namespace["prof"].result
    assert round(result.total_device_time_us / 1e3) == 283  # "283 ms of device time"
    assert round(result.memory.peak_bytes / 2**30, 1) == 13.7  # "a 13.7 GiB peak"
    assert {"aten::mm", "aten::_scaled_dot_product_flash_attention"} <= {r.name for r in result.records}


def test_transformers_reading_on_meta_is_explained_with_the_way_around_it():
    """issue 29, item 4: without a cache, transformers reads the positions' values on meta; the
    error names transformers' line, this test's line, and the three choices that avoid it."""
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, vocab_size=128)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    with pytest.raises(ValueReadError) as info:
        with explained_value_reads(), torch.no_grad():
            model(input_ids=ids, use_cache=False)  # NO CACHE
    message = str(info.value)
    shown = re.escape(value_reads._shown(__file__, line_of("NO CACHE")))
    assert re.match(rf"transformers/\S+\.py:\d+, called from {shown} reads a value", message), message
    assert ("pass no attention_mask, a cache (use_cache=True, or a fresh DynamicCache) and "
            "logits_to_keep=1 (docs/guide/meta-tensors.md#transformers-models-on-meta)") in message
