"""Profiling a test: the ``neuron_profile`` fixture's regions, and the rounds a measured backend
runs a test body for."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..defaults import DEFAULT_BACKEND
from .marker import TestPlan


def stop_on_chips(profiler: Any, chips: Sequence[str] = ()) -> dict[str, Any]:
    """Stop ``profiler``: its region's result on each chip, by hardware name, its own first.
    ``chips`` beyond the first are costed from the same capture (``result_for``), so a second
    chip costs no second run of the code; () or one chip: its own result alone."""
    first = profiler.stop()
    results = {first.hardware: first}
    for chip in chips[1:]:
        results.setdefault(chip, profiler.result_for(chip))
    return results


class ProfileRegion:
    """The ``neuron_profile`` fixture: ``with neuron_profile:`` profiles that region only.

    Several regions in one invocation of the test are concatenated into one result: one round.
    Under a measured backend the plugin invokes the test body once per round (warmup rounds
    included), and ``result`` is the current round's. ``backend`` names the session's backend,
    so that a test can skip what a measured backend cannot time (meta tensors). ``chips``
    gives the chips to cost each region on (several: ``--neuron-hardware trn2,h200``); ``result``
    is the first chip's, ``results_by_chip()`` every chip's."""

    def __init__(self, make_profiler: Callable[[], Any], backend: str = DEFAULT_BACKEND,
                 chips: Callable[[], Sequence[str]] = tuple) -> None:
        self._make_profiler = make_profiler
        self._chips = chips
        self._profiler: Any = None
        self._results: list[dict[str, Any]] = []  # per region: its result on each chip
        self.backend_version = ""
        self.backend = backend

    def begin_round(self) -> None:
        """Forget the regions of the previous round (the plugin calls this before each one)."""
        if self._profiler is not None:
            raise RuntimeError("neuron_profile: a region is still open at the start of a round")
        self._results = []

    def __enter__(self) -> "ProfileRegion":
        __tracebackhide__ = True  # the error points at the test's `with`, not at this frame
        if self._profiler is not None:
            raise RuntimeError("neuron_profile regions cannot be nested: one `with neuron_profile:` "
                               "is already open; close it first (several regions one after another "
                               "make one profile)")
        self._profiler = self._make_profiler()
        self._profiler.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        profiler, self._profiler = self._profiler, None
        self._results.append(stop_on_chips(profiler, self._chips()))
        self.backend_version = profiler.backend_version

    @property
    def entered(self) -> bool:
        return bool(self._results)

    @property
    def result(self) -> Any:
        """The ProfileResult of the regions so far (on the first chip)."""
        __tracebackhide__ = True  # the error points at the test's line, not at this frame
        return next(iter(self.results_by_chip().values()))

    def results_by_chip(self) -> dict[str, Any]:
        """The ProfileResult of the regions so far on each chip, the first chip first."""
        __tracebackhide__ = True
        from ..profiler.result import ProfileResult

        if not self._results:
            raise RuntimeError("neuron_profile.result: no region has run yet; "
                               "use `with neuron_profile:` around the code to profile")
        return {chip: ProfileResult.concatenate([r[chip] for r in self._results])
                for chip in self._results[0]}


class Rounds:
    """Runs one profiled test for ``plan.warmup + plan.rounds`` invocations of its body and
    keeps the profile of each measured round (warmup rounds are profiled too, so that the
    profiler's own start-up is warm, and the result is dropped).

    Without the fixture each invocation is profiled whole; with it, each invocation's
    ``with neuron_profile:`` regions make that round (an invocation that enters none adds no
    round). ``begin()`` / ``end()`` go around each invocation; ``end()`` also runs when the body
    raises."""

    def __init__(self, plan: TestPlan, make_profiler: Callable[[], Any],
                 region: ProfileRegion | None = None) -> None:
        self.plan = plan
        self.total = plan.warmup + plan.rounds
        self._make_profiler = make_profiler
        self._region = region
        self._profiler: Any = None
        self.index = 0  # invocations begun
        self.results: list[Any] = []  # each measured round's result (on the first chip)
        # each chip's results, one per round, the first chip first (its list is ``results``)
        self.by_chip: dict[str, list[Any]] = {}
        self.backend_version = ""

    def begin(self) -> None:
        if self._region is not None:
            self._region.begin_round()
        else:
            self._profiler = self._make_profiler()
            self._profiler.start()
        self.index += 1

    def end(self) -> None:
        keep = self.index > self.plan.warmup
        if self._region is not None:
            if not self._region.entered:
                return
            chips, version = self._region.results_by_chip(), self._region.backend_version
        else:
            profiler, self._profiler = self._profiler, None
            if profiler is None:
                return
            chips, version = stop_on_chips(profiler, self.plan.chips), profiler.backend_version
        if keep:
            for chip, result in chips.items():
                self.by_chip.setdefault(chip, []).append(result)
            self.results = next(iter(self.by_chip.values()))
            self.backend_version = version


def representative(results: list[Any]) -> Any:
    """The round whose total device time is the (lower) median: what traces show."""
    order = sorted(range(len(results)), key=lambda i: (results[i].total_device_time_us, i))
    return results[order[(len(order) - 1) // 2]]
