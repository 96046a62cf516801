"""Writing files users keep (baselines, reports, traces, pages): atomically, with errors that
name the file. One implementation for every writer of the project."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Iterable

from .errors import NeuronProfError


def show_path(path: Path) -> str:
    """A path as users typed it: relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:  # not below it; or a name no file system holds (UnicodeEncodeError)
        return str(path)


# How every text file is encoded: UTF-8, and a character UTF-8 cannot encode (a lone surrogate,
# which each output's escaping already shows as ``\udfff``) written as that escape rather than
# failing the write. In a JSON string the escape reads back as the same character.
ENCODING, ENCODE_ERRORS = "utf-8", "backslashreplace"


def unnameable(path: Path) -> str | None:
    """Why no file can have this path (a NUL, or a lone surrogate the file system's encoding
    cannot write), or None: ``open`` raises ValueError for them, not OSError."""
    text = str(path)
    if "\0" in text:
        return "its name holds a NUL character"
    try:
        os.fsencode(text)
    except UnicodeEncodeError as exc:
        return f"its name holds {exc.object[exc.start]!r}, which no file name can hold"
    return None


# What a bare strerror leaves unsaid: "No space left on device" read as a bug of the tool, and
# the summary said "all unchanged" above it.
_CAUSES = {errno.ENOSPC: "the disk is full: free some space, then run again",
           getattr(errno, "EDQUOT", -1): "the disk quota is used up: free some space, then run again"}


def os_reason(exc: OSError) -> str:
    """Why an OS call failed, for a message: its strerror, with the cause spelled out where
    the strerror leaves it unsaid (ENOSPC: the disk is full)."""
    reason = exc.strerror or str(exc)
    cause = _CAUSES.get(exc.errno) if exc.errno is not None else None
    return f"{reason} ({cause})" if cause and cause not in reason else reason


class OutputError(NeuronProfError, OSError):
    """A file that could not be written (disk full, read-only, a file in the way of its
    folder), named in the message. A NeuronProfError, so the plugin reports it as one line
    (a --neuron-report that could not be written was an INTERNALERROR traceback), and still an
    OSError for callers that handle those."""

    def __init__(self, path: Path, reason: str, errno: int | None = None) -> None:
        super().__init__(errno, reason, str(path))
        self.path = path

    def __str__(self) -> str:
        return f"cannot write {show_path(self.path)}: {self.strerror}"


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def current_umask() -> int:
    """The process's umask, read without changing it where the OS tells it (Linux), else by
    setting it and putting it back."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def creation_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the umask (0o644 under 022)."""
    return 0o666 & ~current_umask()


def atomic_write_text(path: Path, text: str | Iterable[str]) -> None:
    """Write via a temporary file in the same folder and os.replace: readers see the old
    content or the new, never a mix. ``text`` is a str or an iterable of str pieces, written as
    they come (a large document need never exist whole); an exception raised while making a
    piece is a failure like any other. The file gets the mode a file created with ``open`` gets
    (mkstemp's temporary file is 0o600 whatever the umask). Raises OutputError naming ``path``;
    on any failure the temporary file is removed and ``path`` is untouched."""
    problem = unnameable(path)
    if problem is not None:
        raise OutputError(path, problem)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(path, f"cannot create its folder {show_path(path.parent)} "
                                f"({os_reason(exc)})", exc.errno) from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(path, os_reason(exc), exc.errno) from None
    try:
        with os.fdopen(fd, "w", encoding=ENCODING, errors=ENCODE_ERRORS) as handle:
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), creation_mode())
            if isinstance(text, str):
                handle.write(text)
            else:
                for piece in text:
                    handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(path, os_reason(exc), exc.errno) from None
        raise
