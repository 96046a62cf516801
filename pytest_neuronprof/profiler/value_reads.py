"""Reading a value of a tensor that has none: one error, ``ValueReadError``, that names the line
that read and says what to do instead.

Tensors on ``meta`` and on the simulated ``neuron`` device (neuron_device.py) have shapes,
dtypes and strides, never values: ``.item()``, ``.tolist()``, ``bool(t)``, ``print(t)``,
``.numpy()``, ``torch.equal`` and ops whose output shape depends on values (``nonzero``,
``masked_select``, ``unique``) cannot run on them. torch says so in words of its own
("Tensor.item() cannot be called on meta tensors"), from deep inside torch, and a library that
reads a value (transformers checking an attention mask) leaves the user to find which of their
lines led there. Here the same reads raise ``ValueReadError``:

* neuron tensors raise it themselves, at the read (neuron_device.py);
* a meta tensor's read raises torch's error, which ``explain`` turns into this one after the
  fact; ``explained_value_reads()`` does that around a block of code (the plugin wraps each
  test call in it), so it costs nothing until a read fails.

The message names the line that read (the innermost frame outside torch and this package), the
test's own line that led there when the read happened inside a library, and what to change.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import types
from pathlib import Path
from typing import Iterator

from ..errors import NeuronProfError

# Where the reading line is not: torch itself, this package, the Python standard library and
# the plugins that run tests (pytest, pluggy). Paths as os.path.realpath gives them.
_PACKAGE = os.path.realpath(Path(__file__).resolve().parents[1])


@functools.cache
def _site_paths() -> tuple[tuple[str, ...], str]:
    """(the site-packages folders, the standard library's), made on the first explained read:
    sysconfig's look-up costs every pytest run's start a few milliseconds."""
    paths = sysconfig.get_paths()
    libraries = tuple(sorted({os.path.realpath(p) for p in (paths.get("purelib", ""),
                                                             paths.get("platlib", "")) if p}))
    return libraries, os.path.realpath(paths.get("stdlib", os.path.dirname(os.__file__)))


_NOT_THE_READER = ("torch", "_pytest", "pluggy", "pytest")

# The guide's section on each case (relative to the docs site).
META_GUIDE = "docs/guide/meta-tensors.md#reading-values"
TRANSFORMERS_GUIDE = "docs/guide/meta-tensors.md#transformers-models-on-meta"
ALIAS_GUIDE = "docs/guide/hardware-and-devices.md#models-on-cpu-or-meta-not-on-neuron"

# torch's own words for a value read on meta (the message's start), and what each one read.
# Kept to the reads that cannot succeed on any meta tensor, so that no other error is renamed.
_META_READS = (
    ("Tensor.item() cannot be called on meta tensors", "a value (.item(), bool(), int(), float())"),
    ("Cannot copy out of meta tensor; no data!", "the values (.tolist(), .cpu())"),
    ("can't convert meta device type tensor to numpy", "the values (.numpy())"),
    ("aten::equal: attempted to run this operator with Meta tensors", "the values (torch.equal)"),
    ("aten::nonzero: attempted to run this operator with Meta tensors",
     "the values (nonzero: its output's shape depends on them)"),
    ("The register_meta function for torch.nonzero()",
     "the values (nonzero: its output's shape depends on them)"),
    ("aten::masked_select: attempted to run this operator with Meta tensors",
     "the values (masked_select: its output's shape depends on them)"),
    ("aten::_unique2: attempted to run this operator with Meta tensors",
     "the values (unique: its output's shape depends on them)"),
    ("cannot repeat_interleave a meta tensor without output_size",
     "the values (repeat_interleave without output_size)"),
)


class ValueReadError(NeuronProfError, RuntimeError):
    """Code read a value of a tensor that has none (meta, or the simulated neuron device): the
    message names the line that read and what to do instead. A RuntimeError, as torch's own
    error for the same read is, so code that catches that one catches this one."""


def _is_reader(filename: str) -> bool:
    """A frame of the code that read: not torch, this package, the standard library or the
    test runner."""
    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    if path.startswith(_PACKAGE + os.sep):
        return False
    libraries, stdlib = _site_paths()
    for library in libraries:
        if path.startswith(library + os.sep):
            first = path[len(library) + 1:].split(os.sep, 1)[0]
            return first.split(".")[0] not in _NOT_THE_READER
    return not path.startswith(stdlib + os.sep)


def _in_library(filename: str) -> bool:
    path = os.path.realpath(filename)
    return any(path.startswith(library + os.sep) for library in _site_paths()[0])


def _shown(filename: str, line: int) -> str:
    """``filename:line`` relative to the working directory (or to its site-packages)."""
    path = os.path.realpath(filename)
    for library in _site_paths()[0]:
        if path.startswith(library + os.sep):
            return f"{path[len(library) + 1:]}:{line}"
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        relative = path
    return f"{path if relative.startswith('..') else relative}:{line}"


def _frames_outermost_first(start: types.FrameType | None) -> list[tuple[str, int]]:
    found = []
    frame = start
    while frame is not None:
        found.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return found[::-1]


def _traceback_frames(tb: types.TracebackType | None) -> list[tuple[str, int]]:
    found = []
    while tb is not None:
        found.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return found


def where(frames: list[tuple[str, int]]) -> tuple[str, str]:
    """The line that read, among ``frames`` (outermost first), as shown: the innermost frame of
    the reading code, and, where that is a library's, the innermost line of the user's own code
    that led to it ("transformers/masking_utils.py:761, called from tests/test_x.py:12"); and
    the reading frame's file ("" where none was found)."""
    readers = [(f, n) for f, n in frames if _is_reader(f)]
    if not readers:
        return "code outside the test (no frame of the reading code was found)", ""
    filename, line = readers[-1]
    shown = _shown(filename, line)
    if _in_library(filename):
        own = [(f, n) for f, n in readers if not _in_library(f)]
        if own:
            shown += f", called from {_shown(*own[-1])}"
    return shown, filename


def _in_transformers(filename: str) -> bool:
    return f"{os.sep}transformers{os.sep}" in os.path.realpath(filename)


def _advice(device: str, reader: str) -> str:
    """What to do instead, for a read on ``device`` by code in the file ``reader``."""
    parts = ["assert on shapes and dtypes, not values (assert out.shape == (8, 10)); keep values "
             "on the device as tensor ops (torch.argmax(logits, dim=-1) instead of a Python int, "
             "torch.where instead of an if)"]
    if _in_transformers(reader):
        parts.append("transformers reads the values of an attention mask, and of the positions "
                     "when there is no cache: pass no attention_mask, a cache (use_cache=True, or "
                     f"a fresh DynamicCache) and logits_to_keep=1 ({TRANSFORMERS_GUIDE})")
    if device == "neuron":
        parts.append("or run the test where values exist: without --neuron-device-alias, on a "
                     f"Trainium instance (TorchNeuron's real neuron device). See {ALIAS_GUIDE}")
    else:
        parts.append(f"or build the tensors this test reads on cpu. See {META_GUIDE}")
    return "; ".join(parts)


def value_read_error(what: str, device: str, frames: list[tuple[str, int]] | None = None
                     ) -> ValueReadError:
    """The error for code that read ``what`` ("a value (.item())") of a tensor on ``device``
    ("neuron" or "meta"); ``frames`` (outermost first) default to the caller's stack."""
    if frames is None:
        frames = _frames_outermost_first(sys._getframe(1))
    shown, reader = where(frames)
    kind = ("a tensor of the simulated neuron device (--neuron-device-alias)" if device == "neuron"
            else "a meta tensor")
    return ValueReadError(
        f"{shown} reads {what} of {kind}, which has shapes, dtypes and strides but no values: "
        f"nothing is computed. Instead: {_advice(device, reader)}")


def meta_read(exc: BaseException) -> str | None:
    """What ``exc`` says was read, when it is torch's error for a value read on meta ("a value
    (.item(), bool(), int(), float())"); None for any other exception."""
    if isinstance(exc, ValueReadError) or not isinstance(exc, (RuntimeError, NotImplementedError,
                                                               TypeError)):
        return None
    text = str(exc)
    for start, what in _META_READS:
        if text.startswith(start):
            return what
    return None


def _trimmed(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` up to the reading code's innermost frame: torch's frames below it are left out,
    so the traceback ends at the line that read."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    readers = [k for k, entry in enumerate(entries) if _is_reader(entry.tb_frame.f_code.co_filename)]
    if not readers:
        return entries[0] if entries else None
    trimmed = None
    for entry in reversed(entries[:readers[-1] + 1]):
        trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def explain(exc: BaseException) -> ValueReadError | None:
    """``exc`` as a ValueReadError naming the line that read (its traceback's), when it is
    torch's error for a value read on meta; None for any other exception."""
    what = meta_read(exc)
    if what is None:
        return None
    return value_read_error(what, "meta", _traceback_frames(exc.__traceback__))


@contextlib.contextmanager
def explained_value_reads() -> Iterator[None]:
    """Run the block; torch's error for a value read on meta leaves it as a ValueReadError
    naming the line (explain), with the original traceback and no chained torch error. Costs a
    try block: nothing runs unless the block raises."""
    __tracebackhide__ = True
    try:
        yield
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        explained = explain(exc)
        if explained is None:
            raise
        raise explained.with_traceback(_trimmed(exc.__traceback__)) from None
