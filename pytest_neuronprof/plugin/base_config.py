"""Configuration is part of the change (``--neuron-baseline-ref``): the settings that decide
verdicts come from the base, not from the pull request's own files.

A pull request controls its ini file (``pyproject.toml``, ``pytest.ini``, ...), so it could set
``neuron_threshold = 1000%`` or ``addopts = --neuron-hardware h200`` (a chip with no baselines)
and pass its own gate. When a run is gated against a ref, each verdict-deciding setting is taken
from the command line (or ``PYTEST_ADDOPTS``: the CI job's, not the tree's) when given there,
else from the base's ini file at the ref (its key, or its ``addopts``), read from git like the
baseline files. A setting the pull request changes against the base is a change of this pull
request: listed in the summary with both values, not applied, and the run fails unless the ini
file gives a reason new in this change (``neuron_config_reason``), as a re-recorded regression
needs one.

The off switch is such a setting: against a ref, ``neuron_disable`` comes from the command line,
``NEURONPROF_DISABLE`` or the base (``disabled_at_base``), never from the pull request's ini file.

What stays the pull request's (``CHANGE_SETTINGS``, each with why that is harmless): settings
that decide no verdict (outputs, paths of reports), and pytest's own options in ``addopts``
(``-p no:neuronprof`` turns the plugin off, ``--junitxml`` can write over the report: the
shipped workflow fails unless ``neuronprof check-report`` finds the plugin's own report of the
run). Every ini key the plugin registers is in one of the two (tests/test_gate_judges_the_run.py).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

import pytest

from ..errors import ConfigError
from ..gate.gitref import Repository, resolve_commit
from ..inifiles import INI_FILES, parse_ini
from ..safetext import plain
from ..values import reason_problem
from .options import OPTIONS, REASON_KEY, read_options

# The ini names of the settings that decide verdicts: whether the gate runs at all, which tests
# are compared with what (backend, chips, execution, baseline directory), how (thresholds,
# rounds) and whether a test without a baseline fails. Against a ref they come from the command
# line or the base.
VERDICT_SETTINGS = ("neuron_disable", "neuron_backend", "neuron_hardware", "neuron_execution",
                    "neuron_auto_cast", "neuron_threshold", "neuron_floor_us", "neuron_memory_threshold",
                    "neuron_strict", "neuron_rounds", "neuron_warmup", "neuron_cpu_threads",
                    "neuron_baseline_dir")
# The other ini keys the plugin registers, which a pull request's ini file may set, and why
# that cannot pass a change the base's settings would fail.
CHANGE_SETTINGS = {
    "neuron_baseline": "recording: refused with --neuron-baseline-ref (an error fails the run)",
    "neuron_reason": "taken only with --neuron-baseline (otherwise an error fails the run)",
    "neuron_baseline_ref": "the ref itself: the CI job gives it on its command line, which wins",
    "neuron_baseline_max_size": "a limit on what is read: a file over it is an error, never skipped",
    "neuron_device_alias": "whether tests may make `neuron` tensors: off, such a test errors; an "
                           "op costs the same on the alias as on meta or cpu tensors",
    "neuron_report": "where an output goes: the job names the report it checks on its command line, "
                     "which wins, and neuronprof check-report validates it",
    "neuron_trace_dir": "where an output goes (traces): decides no verdict",
    "neuron_html": "where an output goes (the HTML page): decides no verdict",
    "neuron_comment": "where an output goes: the job names the comment it uploads on its command line",
    REASON_KEY: "the change's reason for a setting it changes: read only when new against the base",
}
_TRUE = ("1", "true", "yes", "on")
Source = Callable[[str], "tuple[Any, Path]"]  # ini name -> (value or None, folder a path is relative to)


@dataclass(frozen=True)
class SettingChange:
    """A verdict-deciding setting this change sets otherwise than the base."""

    name: str  # the ini name
    base: str  # "" not set
    proposed: str

    def describe(self) -> str:
        def shown(value: str) -> str:
            return repr(plain(value)) if value else "(not set)"
        return f"{self.name} {shown(self.base)} -> {shown(self.proposed)}"


@dataclass(frozen=True)
class BaseConfiguration:
    """The base's settings and what this change changes of them."""

    ref: str
    commit: str
    subject: str  # the commit's subject: untrusted text, escaped where shown
    ini_name: str  # the ini file read at the base, relative to the repository ("" none)
    changes: tuple[SettingChange, ...]
    reason: str  # neuron_config_reason, when new in this change; else ""
    unreadable: bool = False  # the change's neuron_config_reason has nothing a person can read

    @property
    def unexplained(self) -> bool:
        return bool(self.changes) and not self.reason

    def summary_lines(self) -> list[str]:
        if not self.changes:
            return []
        where = f" ({self.ini_name})" if self.ini_name else ""
        lines = [f"this change sets {len(self.changes)} verdict-deciding setting(s) otherwise than "
                 f"{plain(self.ref)} ({self.commit[:12]}){where}; gated with the base's:"]
        lines += [f"  {change.describe()}" for change in self.changes]
        if self.reason:
            lines.append(f"  accepted in this change, reason: {plain(self.reason)}")
        else:
            if self.unreadable:
                lines.append(f"  the ini file's {REASON_KEY} has nothing a person can read: it is no reason")
            lines.append(f"  give a reason in the ini file ({REASON_KEY} = why), or leave the "
                         "settings as the base has them")
        return lines


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def option_in(args: list[str], name: str, boolean: bool) -> str | None:
    """The value ``args`` give the option of ini ``name`` (the last one; "true" for a flag
    without a value), or None."""
    flag, found = _flag(name), None
    for i, arg in enumerate(args):
        if arg == flag:
            found = "true" if boolean else (args[i + 1] if i + 1 < len(args) else None)
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1:]
    return found


def _blob(repository: Repository, commit: str, path: str) -> str | None:
    found = repository.git("cat-file", "blob", f"{commit}:{path}", check=False)
    return found.stdout.decode("utf-8", "replace") if found.returncode == 0 else None


def base_ini(repository: Repository, commit: str, start: Path) -> tuple[str, dict[str, str]]:
    """(path, settings) of the config file pytest would read at ``commit`` for a run started in
    ``start`` (the folder of the working tree's ini file, or the rootdir): ("", {}) none."""
    folder = repository.relative(start)
    for candidate in (folder, *folder.parents):
        for name, section in INI_FILES:
            path = str(candidate / name) if str(candidate) != "." else name
            text = _blob(repository, commit, path)
            if text is None or (section and section not in text):
                continue
            try:
                settings = parse_ini(path, text)
            except Exception:  # a file pytest could not read at the base either: no settings
                settings = None
            if settings is not None:
                return path, settings
    return "", {}


def _setting(settings: Mapping[str, str], name: str, boolean: bool) -> str:
    """A setting as a file gives it: its ``addopts`` option (which pytest puts on the command
    line, ahead of the ini key) or its key; "" not set."""
    from_addopts = option_in(shlex.split(settings.get("addopts", "")), name, boolean)
    return (from_addopts if from_addopts is not None else settings.get(name, "")).strip()


def command_line(config: pytest.Config) -> list[str]:
    """The arguments the CI job gave: the command line and PYTEST_ADDOPTS, not the ini file's
    addopts (which pytest merges into the same options)."""
    return [*map(str, config.invocation_params.args), *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]


def trusted_source(config: pytest.Config, repository: Repository, ref: str,
                   booleans: set[str]) -> tuple[Source, BaseConfiguration]:
    """(the source of option values to read the session's options from: the command line's,
    else the base's; what this change changes). ``booleans``: the ini names of flags."""
    commit = resolve_commit(repository, ref)
    start = config.inipath.parent if config.inipath else config.rootpath
    ini_name, base = base_ini(repository, commit, start)
    own_path = config.inipath
    own: dict[str, str] = {}
    if own_path is not None:
        try:  # read as the base's is, so that both sides compare alike
            own = parse_ini(own_path.name, own_path.read_text(encoding="utf-8")) or {}
        except Exception:  # pytest itself read it; an odd file counts as setting nothing
            own = {}
    args = command_line(config)
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    # a path the base's file gives is relative to that file's folder
    base_dir = repository.work_tree / PurePosixPath(ini_name).parent if ini_name else ini_dir
    changes = []
    for name in VERDICT_SETTINGS:
        boolean = name in booleans
        if option_in(args, name, boolean) is not None:
            continue  # the job's own: neither side's file decides it
        before, after = _setting(base, name, boolean), _setting(own, name, boolean)
        if before != after:
            changes.append(SettingChange(name, before, after))
    own_reason, base_reason = own.get(REASON_KEY, "").strip(), base.get(REASON_KEY, "").strip()
    # one rule for every reason (values.reason_problem): one nobody can read is none
    unreadable = bool(own_reason) and reason_problem(own_reason) is not None
    reason = own_reason if own_reason and own_reason != base_reason and not unreadable else ""

    def source(name: str) -> tuple[Any, Path]:
        if name not in VERDICT_SETTINGS or option_in(args, name, name in booleans) is not None:
            value = config.getoption(name)
            if value is not None:
                return value, config.invocation_params.dir
            return config.getini(name), ini_dir
        value = _setting(base, name, name in booleans)
        if name in booleans:
            return value.lower() in _TRUE, base_dir
        return value or None, base_dir

    subject = repository.git("log", "-1", "--no-show-signature", "--format=%s", commit,
                             check=False).stdout.decode("utf-8", "replace").strip()
    return source, BaseConfiguration(ref, commit, subject, ini_name, tuple(changes), reason, unreadable)


def options_at_base(config: pytest.Config, options: Any) -> tuple[Any, Repository, BaseConfiguration]:
    """The session's options under --neuron-baseline-ref (``options`` read as pytest gives
    them): the verdict-deciding ones from the command line or the base; the project's
    repository (found once, from the rootdir); what this change changes of the base's."""
    from ..gate.gitref import find_repository

    repository = find_repository(options.rootdir)
    booleans = {ini for _, ini, kind, _ in OPTIONS if kind == "bool"}
    source, base = trusted_source(config, repository, options.baseline_ref, booleans)
    return read_options(config, source), repository, base



def disabled_at_base(config: pytest.Config, ref: str) -> bool:
    """The off switch of a run gated against ``ref``: the command line's --neuron-disable, else
    the base's ini file (NEURONPROF_DISABLE is the caller's to read). A pull request that turns
    the gate off in its own ini file is gated all the same, and the summary lists the setting as
    a change (``trusted_source``)."""
    if option_in(command_line(config), "neuron_disable", True) is not None:
        return True
    from ..gate.gitref import check_ref, find_repository

    check_ref(ref)  # refused before git runs, and before any output echoes it
    repository = find_repository(config.rootpath)
    start = config.inipath.parent if config.inipath else config.rootpath
    _, base = base_ini(repository, resolve_commit(repository, ref), start)
    return _setting(base, "neuron_disable", True).lower() in _TRUE


# pytest's options that run no test body: gated against a ref, nothing would be gated, and every
# entry of the base would read as a test renamed or removed
_RUNS_NOTHING = (("collectonly", "--collect-only"), ("setuponly", "--setup-only"),
                 ("setupplan", "--setup-plan"))


def refuse_runs_of_nothing(config: pytest.Config) -> None:
    """ConfigError for a run gated against a ref with an option that runs no test (from the
    command line or the ini file's addopts, which a change controls)."""
    for dest, flag in _RUNS_NOTHING:
        if config.getoption(dest, False):
            raise ConfigError(f"{flag} runs no test, so nothing is gated against "
                              f"{plain(str(config.getoption('neuron_baseline_ref') or config.getini('neuron_baseline_ref')))}: "
                              f"drop {flag} (from addopts in the ini file?) or --neuron-baseline-ref")
