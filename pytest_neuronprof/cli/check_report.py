"""`neuronprof check-report REPORT [--base REF]`: whether a file is the plugin's own JSON report
of this run, for a CI job to check after pytest, instead of trusting that a file is there.

A pull request's configuration can stop the plugin from gating anything and leave a file where
the report should be: ``addopts = -p no:neuronprof`` (no report), ``--junitxml`` pointed at the
report's path (an XML file there), a report committed into the tree. The check passes only for
a ``--neuron-report`` file that

- reads as a report of this version's format, every test validated as `neuronprof` reads it;
- was written by this pytest-neuronprof (its ``plugin`` block: name and version);
- belongs to this CI run, where the job has an identity (``defaults.run_identity``:
  ``NEURONPROF_RUN_ID``, else GitHub Actions' run id and attempt, in pytest's environment and
  this command's);
- with ``--base REF``: was gated against REF, at the commit REF names now, in every test;

and it exits 1 when that report holds a failed test (a regression, or a test that does not fit),
whatever pytest's exit status said: a change can make pytest exit 0 over a failure (a
non-strict ``xfail`` marker around a slower test).

What it cannot tell: code a pull request runs (a conftest.py) can write anything, this file
included; that is the threat model's boundary (docs/guarantees.md).
"""

from __future__ import annotations

from pathlib import Path
from ..defaults import RUN_ID_VARIABLE, run_identity
from ..errors import NeuronProfError
from ..gate.compare import FAILED, Status
from ..gate.outcome import status_counts
from ..outputs.json_report import PLUGIN_NAME, REPORT_VERSION, plugin_version
from ..safetext import MAX_VALUE_CHARS, clip, quoted
from .inputs import REPORT, InputError, load


class ReportFailed(NeuronProfError):
    """The report is the plugin's own, and it holds a failed test: exit 1, as pytest's should."""


def check_report(path: Path, base: str | None, max_bytes: int, repo: Path) -> str:
    """The line that says what ``path`` is, when it is the plugin's own report of this run;
    InputError naming what is wrong otherwise."""
    def wrong(problem: str) -> InputError:
        return InputError(f"{path} is not the plugin's report of this run: {problem}; the plugin did "
                          "not gate this run (is it loaded? `-p no:neuronprof`, a --junitxml or "
                          "another output written to the same path, in addopts?)")

    if not path.is_file():
        raise wrong("there is no such file")
    try:
        loaded = load(path, max_bytes)
    except InputError as exc:
        raise wrong(str(exc)) from None
    if loaded.kind != REPORT:
        raise wrong("it is a baseline file")
    document = loaded.header
    version = document.get("report_version")
    if version != REPORT_VERSION:
        raise wrong(f"its report_version is {quoted(version)}, this pytest-neuronprof writes "
                    f"{REPORT_VERSION}")
    plugin = document.get("plugin")
    if not isinstance(plugin, dict) or plugin.get("name") != PLUGIN_NAME:
        raise wrong("it does not say pytest-neuronprof wrote it")
    if plugin.get("version") != plugin_version():
        raise wrong(f"pytest-neuronprof {quoted(plugin.get('version'))} wrote it, this is "
                    f"{plugin_version()}")
    run = run_identity()
    if run and plugin.get("run") != run:
        raise wrong(f"it was written in run {quoted(plugin.get('run'))}, this is run {run} "
                    f"({RUN_ID_VARIABLE}, or GitHub Actions' run id and attempt)")
    outcomes = loaded.outcomes
    where = ""
    if base is not None:
        from ..gate.gitref import find_repository, resolve_commit

        commit = resolve_commit(find_repository(repo, option="--base"), base, option="--base")
        for outcome in outcomes:
            if outcome.base_ref != base or outcome.base_commit != commit:
                gated = (f"{quoted(outcome.base_ref)} ({outcome.base_commit[:12]})" if outcome.base_ref
                         else "its working tree's baseline files")
                raise wrong(f"{quoted(outcome.nodeid)} was gated against {gated}, not {base} "
                            f"({commit[:12]})")
        where = f", gated against {base} ({commit[:12]})"
    counts = status_counts(outcomes)
    failed = counts.get(Status.REGRESSION, 0) + counts.get(Status.DOES_NOT_FIT, 0)
    if failed:  # whatever pytest's exit status said (an xfail marker, pytest.exit(0), ...)
        names = ", ".join(quoted(o.nodeid) for o in outcomes if o.verdict.status in FAILED)
        raise ReportFailed(f"{path}: the plugin's report of this run{where} holds {failed} failed "
                           f"test{'s' * (failed != 1)}: {clip(names, MAX_VALUE_CHARS)}")
    tests = len({o.nodeid for o in outcomes if o.verdict.status != Status.NOT_GATED})
    not_gated = counts.get(Status.NOT_GATED, 0)
    return (f"{path}: {PLUGIN_NAME} {plugin_version()}'s report of this run"
            + (f" ({run})" if run else "") + f": {tests} profiled test{'s' * (tests != 1)}{where}; "
            f"{failed} failed" + (f", {not_gated} base entr{'y' if not_gated == 1 else 'ies'} not gated"
                                   if not_gated else ""))

