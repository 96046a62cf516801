"""Scaled dot-product attention on ``meta`` tensors, as the fused kernel a device runs for it.

On meta, torch picks SDPA's unfused math path (bmm, an fp32 softmax and their backward), because
no fused kernel is registered for the meta device; a NeuronCore runs one fused kernel, and so
does the simulation. The fused kernel is recorded as the flash-attention op
(``_scaled_dot_product_flash_attention_for_cpu`` and its backward, costed by
costmodel/formulas/attention.py), forward and backward, in every grad mode.

What the region computes stays what the bare run computes: the tensors SDPA returns (and the
gradients its backward returns) have exactly the shape, dtype and strides torch's own SDPA gives
them on meta, whatever its arguments: a value head dimension different from the query's (timm's
differential attention), grouped-query attention, masks, causal, dropout, scale, non-contiguous
inputs. The flash op's own meta kernel cannot promise that (``empty_like(query)``: the query's
head dimension and layout), so it does not run: the record is made by calling the op through the
dispatcher with its outputs given (``given_outputs``), which the capture's hot path returns in
place of running the op. The outputs' metadata is torch's: its composite SDPA run once per
distinct call on fresh meta tensors of the same metadata, outside the capture, and cached.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import torch

from .. import neuron_device

_DispatchKey = torch._C.DispatchKey
_COMPOSITE_KEY = _DispatchKey.CompositeImplicitAutograd
_SDPA = torch.ops.aten.scaled_dot_product_attention.default
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
_no_dispatch = torch._C._DisableTorchDispatch  # no Python dispatch (modes): not captured

# A tensor's metadata: (shape, strides, dtype); an argument's: (shape, strides, dtype,
# requires_grad), or None for an absent one (no mask).
_Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]
_Spec = Optional[tuple[tuple[int, ...], tuple[int, ...], torch.dtype, bool]]


class GivenOutputs:
    """The capture's ``call`` for the flash ops: the op itself, unless outputs were given for
    this thread's next call of it (``given_outputs``), which it returns without running the op.
    So a record of the fused kernel is made by the capture's own hot path (its arguments as
    torch's Python dispatch passes them, storage lifetimes, dataflow), with the outputs the
    simulation computed."""

    __slots__ = ("_op", "_local")

    def __init__(self, op: Any) -> None:
        self._op = op
        self._local = threading.local()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        given = getattr(self._local, "outputs", None)
        if given is None:
            return self._op(*args, **kwargs)
        self._local.outputs = None
        return given

    def given(self, outputs: tuple, run: Callable[[], Any]) -> Any:
        """``run()`` (which calls the op once) with the op returning ``outputs``."""
        self._local.outputs = outputs
        try:
            return run()
        finally:
            self._local.outputs = None


GIVEN = {id(FLASH): GivenOutputs(FLASH._op), id(FLASH_BACKWARD): GivenOutputs(FLASH_BACKWARD._op)}


def _spec(tensor: Any) -> _Spec:
    if not isinstance(tensor, torch.Tensor):
        return None
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.requires_grad)


def _layout(tensor: torch.Tensor) -> _Layout:
    return (tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def _made(layout: _Layout, device: Any = "meta") -> torch.Tensor:
    """A tensor of this metadata on ``device``, meta or the simulated neuron device (no memory
    either way), under _no_dispatch: no op the capture sees."""
    shape, strides, dtype = layout
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


def _fresh(spec: _Spec, requires_grad: bool = False) -> Any:
    """A leaf of an argument's metadata, needing a gradient if asked (None for None)."""
    if spec is None:
        return None
    tensor = _made(spec[:3])
    if requires_grad and (spec[2].is_floating_point or spec[2].is_complex):
        tensor.requires_grad_()
    return tensor


# (argument metadata, options, grad enabled) -> the output's metadata; with the gradient's
# metadata and which inputs need one: -> each input's gradient's metadata (None: not needed).
_FORWARD: dict[tuple, _Layout] = {}
_BACKWARD: dict[tuple, tuple[Optional[_Layout], ...]] = {}
_CACHE_MAX = 4096


def _torch_sdpa(q: Any, k: Any, v: Any, mask: Any, options: tuple) -> Any:
    """torch's own SDPA (its composite kernel: what eager PyTorch runs for it on meta)."""
    dropout_p, is_causal, scale, enable_gqa = options
    return _SDPA._op_dk(_COMPOSITE_KEY, q, k, v, mask, dropout_p, is_causal, scale=scale,
                        enable_gqa=enable_gqa)


def _remember(cache: dict, key: tuple, value: Any) -> Any:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def bare_output(specs: tuple[_Spec, ...], options: tuple, grad: bool) -> _Layout:
    """The metadata of what torch's SDPA returns on meta tensors of these ``specs`` (query, key,
    value, mask), with these ``options`` (dropout_p, is_causal, scale, enable_gqa), with grad
    enabled or not."""
    key = (specs, options, grad)
    found = _FORWARD.get(key)
    if found is not None:
        return found
    with _no_dispatch(), torch.inference_mode(False), torch.set_grad_enabled(grad):
        q, k, v, mask = (_fresh(spec, spec is not None and spec[3]) for spec in specs)
        return _remember(_FORWARD, key, _layout(_torch_sdpa(q, k, v, mask, options)))


def bare_gradients(specs: tuple[_Spec, ...], options: tuple, grad_out: _Layout,
                   needs: tuple[bool, ...]) -> tuple[Optional[_Layout], ...]:
    """The metadata of the gradients torch's SDPA backward gives its query, key and value (None
    where not ``needs``) on meta tensors of these ``specs`` for a gradient of ``grad_out``'s
    metadata."""
    key = (specs, options, grad_out, needs)
    found = _BACKWARD.get(key)
    if found is not None:
        return found
    with _no_dispatch(), torch.inference_mode(False), torch.enable_grad():
        q, k, v = (_fresh(spec, need) for spec, need in zip(specs[:3], needs))
        out = _torch_sdpa(q, k, v, _fresh(specs[3]), options)
        wanted = [t for t, need in zip((q, k, v), needs) if need]
        grads = iter(torch.autograd.grad(out, wanted, _made(grad_out), allow_unused=True))
        found = tuple(_layout(next(grads)) if need else None for need in needs)
    return _remember(_BACKWARD, key, found)


class _FusedAttention(torch.autograd.Function):
    """SDPA on meta as one fused kernel, forward and backward, each recorded as the flash op,
    returning exactly torch's metadata (bare_output, bare_gradients)."""

    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, mask: Any, options: tuple,
                grad: bool) -> Any:
        specs = (_spec(q), _spec(k), _spec(v), _spec(mask))
        with _no_dispatch():
            out = _made(bare_output(specs, options, grad), q.device)
            # The kernel's row statistics (its logsumexp), kept for the backward.
            lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        dropout_p, is_causal, scale, _ = options
        GIVEN[id(FLASH)].given((out, lse), lambda: FLASH(
            q, k, v, dropout_p, is_causal, attn_mask=mask, scale=scale))
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.specs, ctx.options = specs, options
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Any:
        q, k, v, mask, out, lse = ctx.saved_tensors
        needs = tuple(ctx.needs_input_grad[:3])
        layouts = bare_gradients(ctx.specs, ctx.options, _layout(grad_out), needs)
        with _no_dispatch():  # the kernel gives all three; those not needed as their inputs
            grads = tuple(_made(layout if layout is not None else _layout(t), q.device)
                          for layout, t in zip(layouts, (q, k, v)))
        dropout_p, is_causal, scale, _ = ctx.options
        GIVEN[id(FLASH_BACKWARD)].given(grads, lambda: FLASH_BACKWARD(
            grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask=mask, scale=scale))
        return (*(g if need else None for g, need in zip(grads, needs)), None, None, None)


def fused_attention_on_meta(query: Any, key: Any, value: Any, attn_mask: Any = None,
                            dropout_p: float = 0.0, is_causal: bool = False, *,
                            scale: float | None = None, enable_gqa: bool = False) -> Any:
    """scaled_dot_product_attention on meta tensors, as the fused kernel a device runs for it
    (see the module). Where the fused kernel cannot stand for torch's result (a mask that
    needs a gradient, which the kernel does not give), torch's own path runs."""
    if attn_mask is not None and attn_mask.requires_grad and torch.is_grad_enabled():
        return _torch_sdpa(query, key, value, attn_mask,
                           (dropout_p, is_causal, scale, enable_gqa))
    return _FusedAttention.apply(query, key, value, attn_mask,
                                 (float(dropout_p), bool(is_causal), scale, bool(enable_gqa)),
                                 torch.is_grad_enabled())


class FusedAttentionOnMeta:
    """While a simulated profiler runs, SDPA on meta tensors under autograd (grad or no_grad)
    runs as the fused kernel (see fused_attention_on_meta): an AutogradMeta kernel registered
    for the op, before autograd decomposes it. Removed when the last profiler stops. Only a
    capture's own thread records it: on other threads (and with no capture running there) the
    kernel runs torch's own path."""

    def __init__(self, captures: Callable[[], bool]) -> None:
        self._users = 0
        self._library: Any = None
        self._captures = captures

    def _kernel(self, *args: Any, **kwargs: Any) -> Any:
        if self._captures():
            return fused_attention_on_meta(*args, **kwargs)
        return _SDPA._op_dk(_COMPOSITE_KEY, *args, **kwargs)

    def acquire(self) -> None:
        if self._users == 0:
            library = torch.library.Library("aten", "IMPL")
            library.impl("scaled_dot_product_attention", self._kernel, "AutogradMeta")
            if neuron_device.is_enabled():  # the simulated neuron device: no values either
                library.impl("scaled_dot_product_attention", self._kernel, "AutogradPrivateUse1")
            self._library = library
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._library is not None:
            self._library._destroy()
            self._library = None
