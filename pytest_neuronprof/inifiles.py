"""pytest's config files, read the way pytest reads them: which file a run in a folder uses
(``find_ini``) and its pytest settings as strings (``parse_ini``). The plugin reads the base's
file at a git ref with these (plugin/base_config.py), and ``neuronprof`` finds the baseline
directory a project's file names (cli/refs.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path, PurePosixPath
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# In the order pytest looks for them in each folder, each with the table or section that must
# be there for a shared file to count (_pytest/config/findpaths.py, locate_config).
INI_FILES = (("pytest.toml", ""), (".pytest.toml", ""), ("pytest.ini", ""), (".pytest.ini", ""),
             ("pyproject.toml", "[tool.pytest"), ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))


def find_ini(start: Path) -> Path | None:
    """The config file pytest would read for a run in ``start``."""
    for folder in (start, *start.parents):
        for name, section in INI_FILES:
            path = folder / name
            try:
                if path.is_file() and (not section or section in path.read_text(encoding="utf-8")):
                    return path
            except (OSError, UnicodeDecodeError):
                continue
    return None


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    return str(value)


def parse_ini(name: str, text: str) -> dict[str, str] | None:
    """The pytest settings of a config file's text (``name`` says its kind), as strings; None
    when the file has no pytest section (pytest would not read it). Raises ValueError (or the
    ini parser's error) for a file that is not valid."""
    base = PurePosixPath(name).name
    if base.endswith(".toml"):
        data = tomllib.loads(text)
        if base == "pyproject.toml":
            tool = data.get("tool", {}).get("pytest")
            if not isinstance(tool, dict):
                return None
            table = tool.get("ini_options", tool)
        else:
            table = data.get("pytest", data)
        return {key: _text(value) for key, value in table.items() if not isinstance(value, dict)}
    import iniconfig  # pytest's own ini parser (one of pytest's dependencies)

    section = "tool:pytest" if base == "setup.cfg" else "pytest"
    parsed = iniconfig.IniConfig(name, data=text)
    if section not in parsed:
        return None
    return {key: value for key, value in parsed[section].items()}
