"""A simulated process group: this process plays rank 0 of ``world_size`` ranks without the
other processes, so distributed code (tensor-parallel layers, FSDP-style gathers, gradient
all-reduces) runs, and is costed, on one CI runner.

``simulated_group(world_size)`` makes torch.distributed's default process group on torch's fake
backend (``torch.testing._internal.distributed.fake_pg``: collectives return at once and
exchange nothing), after loading the meta kernels of the functional collectives (without them an
all-gather on meta tensors raises NotImplementedError), and destroys it, with every subgroup
made from it (``dist.new_group``), when the block ends. The simulated backend costs each
collective for the ranks of the group it names. The marker's ``world_size=`` runs a test inside
one (plugin/distributed.py); from Python::

    with simulated_group(8), NeuronProfiler() as prof:
        layer(x)        # its all-reduces costed over 8 ranks
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ..errors import ConfigError

# What torch raises when a default group is made while one exists
DOUBLE_INIT = "default process group twice"


def existing_group() -> str | None:
    """The default process group made before, in words ("fake, 4 ranks"), or None when there is
    none (or torch.distributed is not built)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return f"{dist.get_backend()}, {dist.get_world_size()} rank{'s' if dist.get_world_size() != 1 else ''}"


@contextlib.contextmanager
def simulated_group(world_size: int, where: str = "simulated_group") -> Iterator[Any]:
    """The default process group of ``world_size`` ranks on torch's fake backend, this process
    rank 0, for the block (the group is yielded); ``where`` names the caller in errors.

    Raises ConfigError when ``world_size`` is not a whole number of at least 1, when
    torch.distributed is not built, and when a default process group exists already."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"{where}: world_size={world_size!r}: expected a whole number >= 1 "
                          "(the ranks of the simulated process group)")
    import torch.distributed as dist

    if not dist.is_available():
        raise ConfigError(f"{where}: world_size={world_size} needs torch.distributed, which this "
                          "torch build does not have (torch.distributed.is_available() is False)")
    found = existing_group()
    if found is not None:
        raise ConfigError(
            f"{where}: world_size={world_size} makes the default process group, but one exists "
            f"already ({found}), made before the test (a fixture, conftest.py, or an earlier "
            "test that did not destroy it): remove world_size= and use that group, or destroy it "
            "where it is made (torch.distributed.destroy_process_group())")
    # The functional collectives' meta kernels, and the fake backend (registered on import)
    import torch.distributed._functional_collectives  # noqa: F401
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        if dist.is_initialized():  # the block may have destroyed it itself
            dist.destroy_process_group()
