"""The names of the bundled hardware profiles, without loading them: the plugin checks an option's
chip against this list in every session, profiled tests or not, and profiles.py (the profiles
themselves) loads only when a test is costed."""

from __future__ import annotations

from importlib import resources


def available_hardware() -> list[str]:
    """Names of the bundled hardware profiles."""
    folder = resources.files(__package__).joinpath("hardware")
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))
