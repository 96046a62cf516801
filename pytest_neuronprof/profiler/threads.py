"""A region's capture on the threads its code hands work to, and the threads it cannot reach.

A TorchDispatchMode is thread-local: a capture sees the ops of the thread that started it only.
A model run through ``concurrent.futures.ThreadPoolExecutor`` recorded none of its ops, and a
regression inside it passed at +0.0 %. While a region is open, ``RegionThreads`` carries its
capture along with the work its thread hands over:

- a callable given to ``ThreadPoolExecutor.submit`` (and so ``map``, ``asyncio``'s
  ``run_in_executor``), whether the pool's threads are new or already running;
- the ``run`` of a ``threading.Thread`` started in the region.

That work runs under a *branch*: a capture of its own, opened by the backend on the thread that
runs it, with its own module paths and scopes. ``splice`` puts each branch's ops into the region
where its work was handed over, as if it had run there and then: threads interleave differently
from run to run, this order does not, so baselines stay byte-identical. A branch still running
when the region ends is sealed (it records nothing more); work that had not started yet runs
unprofiled, as any code after the region.

What cannot be carried is detected and said: an ``nn.Module`` that runs during the region on a
thread under no capture (a thread started before the region, ``multiprocessing.pool.ThreadPool``,
a pool task submitted before it) lands in ``uncaptured``, and the test is reported as not fully
profiled. Tensor ops outside any module on such a thread are not seen: nothing cheaper than a
profiler of every thread (which would slow the region's own ops) sees them.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol

_get_ident = threading.get_ident


class Capture(Protocol):
    """What a region or a branch captures into: its raw ops, in the order its thread ran them."""

    raw: list[Any]


class Branch(Capture, Protocol):
    """A capture opened on the thread that runs handed-over work: entered before the work,
    exited after it (on that thread); ``seal`` (from the region's thread) stops it recording."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...

    def seal(self) -> None: ...


@dataclass
class _Handoff:
    parent: Capture  # the capture of the thread that handed the work over
    position: int  # how many ops the parent had captured then: where the branch's ops go
    branch: Branch | None = None  # set once the work starts (None: it never ran in the region)
    running: bool = False


class _Local(threading.local):
    # (region, capture) of the work running on this thread; None outside any region
    current: tuple["RegionThreads", Capture] | None = None
    submitting = False  # inside a patched submit: the pool's own thread is not a handoff


_LOCAL = _Local()


class RegionThreads:
    """The threads of one region: ``open`` on the region's thread once its capture ``main``
    runs, ``close`` there when it has stopped, then ``splice`` its ops. ``open_branch`` makes a
    branch; it is called on the thread that runs the work."""

    def __init__(self, main: Capture, open_branch: Callable[[], Branch]) -> None:
        self._main = main
        self._open_branch = open_branch
        self._lock = threading.Lock()
        self._handoffs: list[_Handoff] = []
        self._open = False
        self._previous: tuple[RegionThreads, Capture] | None = None
        self._uncaptured: dict[int, str] = {}  # thread ident -> what ran there

    def open(self) -> None:
        self._previous, _LOCAL.current = _LOCAL.current, (self, self._main)
        self._open = True
        _patch()

    def close(self) -> None:
        with self._lock:
            self._open = False
            for handoff in self._handoffs:
                if handoff.running and handoff.branch is not None:
                    handoff.branch.seal()  # its thread outlives the region
        _LOCAL.current = self._previous
        _unpatch()

    @property
    def uncaptured(self) -> list[str]:
        """The threads on which modules ran, uncaptured, during the region: "'name' ran Type"."""
        with self._lock:
            return sorted(self._uncaptured.values())

    def other_thread_module(self, module: Any) -> None:
        """A module's forward began on a thread other than the region's (ModuleTracker calls
        this): uncaptured unless that thread runs under a capture (a branch, another region)."""
        if _LOCAL.current is not None or not self._open or _get_ident() in self._uncaptured:
            return  # under a capture, after the region, or this thread is already reported
        thread = threading.current_thread()
        with self._lock:
            self._uncaptured.setdefault(thread.ident or 0,
                                        f"{thread.name!r} ran {type(module).__name__}")

    def hand_off(self, parent: Capture, work: Callable[..., Any]) -> Callable[..., Any]:
        """``work`` wrapped to run under a branch of this region (on whichever thread runs it);
        ``work`` itself once the region has ended. Called on ``parent``'s thread."""
        with self._lock:
            if not self._open:
                return work
            handoff = _Handoff(parent, len(parent.raw))
            self._handoffs.append(handoff)

        @functools.wraps(work)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if self._open:
                    handoff.branch = self._open_branch()
                    handoff.running = True
            branch = handoff.branch
            if branch is None:  # the region ended before the work started
                return work(*args, **kwargs)
            previous, _LOCAL.current = _LOCAL.current, (self, branch)
            branch.__enter__()
            try:
                return work(*args, **kwargs)
            finally:
                with self._lock:
                    handoff.running = False
                branch.__exit__(None, None, None)
                _LOCAL.current = previous
        return run

    def splice(self, adopt: Callable[[int, Any, list[Any]], list[Any]] | None = None
               ) -> tuple[list[Any], list[int] | None]:
        """The region's ops as one sequence: each branch's ops at the op where its work was
        handed over (see the module); and which ran each op (0: the region's thread, k: the
        k-th branch), None when no branch ran. ``adopt(k, branch, ops)`` is told each branch
        that ran (k from 1, in this order) and may rewrite its ops, one for one. Call after
        ``close``."""
        with self._lock:
            handoffs = [h for h in self._handoffs if h.branch is not None]
        if not handoffs:
            return self._main.raw, None
        children: dict[int, list[_Handoff]] = {}
        for handoff in handoffs:
            children.setdefault(id(handoff.parent), []).append(handoff)
        spliced: list[Any] = []
        owners: list[int] = []
        count = 0

        def walk(ops: list[Any], capture: Capture, owner: int) -> None:
            nonlocal count
            done = 0
            for handoff in sorted(children.get(id(capture), ()), key=lambda h: h.position):
                branch = handoff.branch
                assert branch is not None
                spliced.extend(ops[done:handoff.position])
                owners.extend([owner] * (handoff.position - done))
                done = handoff.position
                count += 1
                mine = list(branch.raw)  # a snapshot: a sealed branch's thread may still run
                walk(adopt(count, branch, mine) if adopt is not None else mine, branch, count)
            spliced.extend(ops[done:])
            owners.extend([owner] * (len(ops) - done))
        walk(self._main.raw, self._main, 0)
        return spliced, owners


def not_fully_profiled(uncaptured: list[str]) -> str:
    """What a result with uncaptured threads is reported as, in every output."""
    return ("not fully profiled: modules ran on other threads during the region, outside its "
            f"capture ({'; '.join(uncaptured)}); start the thread or submit the work "
            "(ThreadPoolExecutor.submit, threading.Thread.start) inside the region, or run it "
            "on the test's thread")


# -- the patches, installed while any region is open ----------------------------------------------

_original_submit = ThreadPoolExecutor.submit
_original_start = threading.Thread.start
_patch_lock = threading.Lock()
_patch_users = 0


def _submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    current = _LOCAL.current
    if current is None:
        return _original_submit(self, fn, *args, **kwargs)
    region, capture = current
    _LOCAL.submitting = True  # a worker thread the pool starts now: its tasks are handed off
    try:
        return _original_submit(self, region.hand_off(capture, fn), *args, **kwargs)
    finally:
        _LOCAL.submitting = False


def _start(self: threading.Thread) -> None:
    current = _LOCAL.current
    if current is not None and not _LOCAL.submitting:
        region, capture = current
        work = region.hand_off(capture, self.run)

        def run() -> None:
            try:
                work()
            finally:  # the Thread object, kept by its caller, does not keep the region's ops
                self.__dict__.pop("run", None)
        self.run = run  # type: ignore[method-assign]
    _original_start(self)


def _patch() -> None:
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            ThreadPoolExecutor.submit = _submit  # type: ignore[method-assign, assignment]
            threading.Thread.start = _start  # type: ignore[method-assign]
        _patch_users += 1


def _unpatch() -> None:
    global _patch_users
    with _patch_lock:
        _patch_users -= 1
        if _patch_users == 0:
            ThreadPoolExecutor.submit = _original_submit  # type: ignore[method-assign]
            threading.Thread.start = _original_start  # type: ignore[method-assign]
