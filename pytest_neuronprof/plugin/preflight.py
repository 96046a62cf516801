"""The session's output paths, checked before any test runs (``outputs/registry.py`` lists the
outputs): none inside a baseline directory (only baseline files are baselines), folders created,
each writable. A path that cannot be written is a usage error at the start, not a lost output
after the whole run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import ConfigError
from ..files import OutputError, os_reason, show_path
from ..outputs import registry
from ..outputs.registry import SessionOutput
from .options import Options


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _probe(folder: Path, path: Path, option: str) -> None:
    """OutputError naming ``path`` when no file can be created in ``folder`` (read-only, full)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".neuronprof-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(path, f"{option}: cannot create a file in {show_path(folder)} "
                                f"({os_reason(exc)})", exc.errno) from None
    os.close(fd)
    os.unlink(probe)


def output_paths(options: Options, outputs: Sequence[SessionOutput] | None = None
                 ) -> dict[SessionOutput, Path]:
    """The outputs this session writes to a path (their option is given), each with its path,
    in the order of ``outputs`` (default: the registry's)."""
    given = options.output_paths
    return {output: given[output.flag]
            for output in (registry.SESSION_OUTPUTS if outputs is None else outputs)
            if output.flag is not None and output.flag in given}


def _check_folder(folder: Path, option: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(folder, f"cannot create the {option} folder "
                                  f"({os_reason(exc)})", exc.errno) from None
    _probe(folder, folder, option)


def _check_file(path: Path, output: SessionOutput) -> None:
    if path.is_dir():
        raise OutputError(path, f"it is a directory; give {output.flag} (ini {output.ini}) a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(path, f"cannot create its folder {show_path(path.parent)} "
                                f"({os_reason(exc)})", exc.errno) from None
    _probe(path.parent, path, str(output.flag))


def check_outputs(outputs: dict[SessionOutput, Path], baseline_dirs: Iterable[Path]) -> None:
    """ConfigError or OutputError naming the option whose path cannot be written: first every
    path (``output_paths``) against the baseline directories, then the folders, then the files."""
    paths, directories = list(outputs.items()), list(baseline_dirs)
    for output, path in paths:
        for directory in directories:
            if _inside(path, directory):
                raise ConfigError(f"{output.flag} {show_path(path)} is inside the baseline directory "
                                  f"{show_path(directory)}, where only baseline files belong; "
                                  "write it elsewhere")
    for output, path in paths:
        if output.folder:
            _check_folder(path, str(output.flag))
    for output, path in paths:
        if not output.folder:
            _check_file(path, output)
