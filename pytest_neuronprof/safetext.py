"""Text that came from files (node ids, op and module names, torch versions, keys) made safe for
each kind of output, in one place.

Baseline and report files come from pull requests in CI, so every value read from them is
untrusted. Printed as it is, a value can start a GitHub Actions workflow command (the runner
parses ``::command::`` at the start of any line of the job log, after whitespace, and the legacy
``##[command]`` anywhere in a line), inject Markdown or HTML into a step summary, drive the
terminal with escape sequences, or flood the log. One function per kind of output:

- ``plain``: a value in terminal or log text (tables, failure text, notices);
- ``quoted``: a value named in an error message (its repr, so an empty or odd name is visible);
- ``md_text`` / ``md_code``: a value in Markdown (a table cell, a list item, a code span);
- ``html_text``: a value in the HTML page;
- ``json_text``: a JSON document that is printed (values stay exactly what they were);
- ``guard_lines``: a whole text on its way to stdout or stderr, the last line of defence.

Every value is capped (``MAX_VALUE_CHARS``): a readable prefix, then ``… (N characters)``.
"""

from __future__ import annotations

import html
import re

MAX_VALUE_CHARS = 200  # one value echoed in a table cell, a line or an error

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators (which some
# terminals and log viewers treat as line breaks); the bidi controls that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LEGACY_COMMAND = "##["
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>&\"':])")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def visible(text: str) -> str:
    """Control characters shown as escapes (``\\n``, ``\\x1b``): one value stays on one line
    and cannot drive the terminal."""
    return _CONTROL.sub(_escape_char, text)


def clip(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """At most ``limit`` characters of ``text`` and a note of its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 ({len(text):,} characters)"


def no_commands(text: str) -> str:
    """``::`` at the start (after whitespace) and ``##[`` anywhere made inert, visibly."""
    text = text.replace(_LEGACY_COMMAND, "##\\[")
    stripped = text.lstrip()
    if stripped.startswith("::"):
        text = text[:len(text) - len(stripped)] + "\\" + stripped
    return text


def plain(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value in terminal or log text: capped, control characters visible, no workflow command."""
    return no_commands(visible(clip(str(value), limit)))


def quoted(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value named in an error message: its repr (capped), with no workflow command."""
    text = value if isinstance(value, str) else str(value)
    return no_commands(visible(repr(clip(text, limit))))


def md_text(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as Markdown text (a table cell, a list item): HTML and Markdown syntax escaped,
    so a name shows as the characters it has and never as markup, a link or an image."""
    text = visible(clip(str(value), limit))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text).replace(_LEGACY_COMMAND, "##\\[")


def md_code(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as a Markdown code span that holds any text: the fence is one backtick longer
    than the longest run inside it, and ``|`` is escaped (GitHub ends a table cell at it even
    inside a code span)."""
    text = no_commands(visible(clip(str(value), limit))).replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if longest or text.startswith(" ") or text.endswith(" ") else text
    return f"{fence}{padded}{fence}"


def html_text(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as HTML text or an attribute value."""
    return html.escape(visible(clip(str(value), limit)), quote=True)


def json_text(document: str) -> str:
    """A JSON document about to be printed: ``##[`` can only be inside a string there, where
    ``\\u005b`` is the same ``[`` to any JSON reader. (json.dumps already escapes newlines and
    control characters.)"""
    return document.replace(_LEGACY_COMMAND, "##\\u005b")


def guard_lines(text: str) -> str:
    """A whole text for stdout or stderr, line by line: the last guard against a value that
    reached it without its kind's escaping."""
    return "\n".join(no_commands(line) for line in text.split("\n"))
