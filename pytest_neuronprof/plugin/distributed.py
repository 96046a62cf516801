"""The marker's ``world_size=``: the test runs as rank 0 of a simulated process group of that
many ranks (profiler/distributed.py), made before its fixtures are set up and destroyed after
they are torn down, subgroups included. Profiled or not (``--neuron-disable`` runs the test
unprofiled, in its group all the same); a bad value, a measured backend, or a group that exists
already fails the test with a message that says so."""

from __future__ import annotations

from typing import Any, Callable, Generator

import pytest

from ..errors import NeuronProfError
from ..profiler.distributed import DOUBLE_INIT, simulated_group
from .marker import MARKER, parse_world_size

_group_key = pytest.StashKey[Any]()  # the open group's context manager


class DistributedPlugin:
    """Opens and closes each test's simulated process group. ``backend``: the run's backend
    (None under --neuron-disable: nothing is measured)."""

    def __init__(self, backend: Callable[[], str | None]) -> None:
        self.backend = backend

    def world_size(self, item: pytest.Item) -> int | None:
        marker = item.get_closest_marker(MARKER)
        if marker is None or "world_size" not in marker.kwargs:
            return None
        try:
            return parse_world_size(marker.kwargs, self.backend() or "simulated")
        except NeuronProfError as exc:
            problem = f"{item.nodeid}: {exc}"
        pytest.fail(problem, pytrace=False)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """The group, before the fixtures are set up (pytest's own setup, which sets them up,
        runs inside every wrapper; this one is the innermost, so that a failure here leaves the
        other plugins' wrappers as they expect)."""
        ranks = self.world_size(item)
        if ranks is not None:
            group = simulated_group(ranks, where=f"{item.nodeid}: neuron_profile")
            try:
                group.__enter__()
            except NeuronProfError as exc:
                pytest.fail(str(exc), pytrace=False)
            item.stash[_group_key] = (group, ranks)
        with _explained(item, "a fixture it uses"):
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        with _explained(pyfuncitem, "the test"):
            return (yield)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        try:
            return (yield)  # the fixtures' teardown: they may still use the group
        finally:
            opened = item.stash.get(_group_key, None)
            if opened is not None:
                del item.stash[_group_key]
                opened[0].__exit__(None, None, None)


class _explained:
    """torch's error for a second default group, raised by ``who`` while the marker's group is
    open, made a failure that names both (any other error passes through)."""

    def __init__(self, item: pytest.Item, who: str) -> None:
        self.item, self.who = item, who

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        opened = self.item.stash.get(_group_key, None)
        if opened is not None and isinstance(exc, ValueError) and DOUBLE_INIT in str(exc):
            raise pytest.fail.Exception(
                f"{self.item.nodeid}: {self.who} calls torch.distributed.init_process_group, but "
                f"the marker's world_size={opened[1]} made the default process group already: "
                "remove world_size= (and keep the test's own group), or remove the test's "
                "init_process_group (and use the marker's)", pytrace=False) from None
