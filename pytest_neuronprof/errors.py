"""The project's own exception types.

Every error a user can cause (a bad option, a bad marker argument, a broken baseline file)
is one of these, with a message that names the culprit and says how to fix it.
"""

from __future__ import annotations


class NeuronProfError(Exception):
    """Base class of every error pytest-neuronprof raises on purpose."""


class ConfigError(NeuronProfError, ValueError):
    """A bad NeuronConfig field, profiler argument, option or marker argument."""


class HardwareProfileError(ConfigError):
    """An unknown hardware profile name, or a broken hardware profile file."""


class BaselineError(NeuronProfError):
    """A baseline file that cannot be read, validated or written."""


class CostRegistrationError(NeuronProfError, ValueError):
    """A cost formula registered for something that is not an op, or for an op that has one."""


class CostFormulaError(NeuronProfError, RuntimeError):
    """A cost formula raised: a bug in the formula (or a call form it does not handle), named
    with the op and the formula; the formula's own exception is its cause."""
