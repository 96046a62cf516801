"""Text that came from files (node ids, op and module names, torch versions, keys) made safe for
each kind of output, in one place.

Baseline and report files come from pull requests in CI, so every value read from them is
untrusted. Printed as it is, a value can start a GitHub Actions workflow command (the runner
parses ``::command::`` at the start of any line of the job log, after whitespace, and the legacy
``##[command]`` anywhere in a line), inject Markdown or HTML into a step summary, drive the
terminal with escape sequences, or flood the log. A lone surrogate (``"\\udfff"`` in a JSON file
reads as one) is a character no UTF-8 file or stream can hold: written as it is, it raised
UnicodeEncodeError and lost every output. One function per kind of output, each showing such a
character as its escape (``\\udfff``):

- ``plain``: a value in terminal or log text (tables, failure text, notices);
- ``quoted``: a value named in an error message (its repr, so an empty or odd name is visible);
- ``md_text`` / ``md_code``: a value in Markdown (a table cell, a list item, a code span);
- ``html_text``: a value in HTML: the HTML page, and raw HTML inside Markdown (a
  ``<details><summary>`` line is an HTML block, where Markdown's backslash escapes are text);
- ``json_text``: a JSON document that is printed (values stay exactly what they were: a
  surrogate as JSON's ``\\udfff`` escape, which reads back as the same value);
- ``guard_lines``: a whole text on its way to stdout or stderr, the last line of defence.

Every value is capped (``MAX_VALUE_CHARS``): a readable prefix, then ``… (N characters)``.
"""

from __future__ import annotations

import html
import re
from typing import Iterable, Iterator

MAX_VALUE_CHARS = 200  # one value echoed in a table cell, a line or an error
MAX_MESSAGE_CHARS = 600  # a whole message built around such values (a verdict's message)

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators (which some
# terminals and log viewers treat as line breaks); the bidi controls that reorder what is shown;
# the surrogates, which UTF-8 cannot encode (a str holds one alone: from a JSON escape, or an
# undecodable byte of a file name).
_SURROGATES = "\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069{_SURROGATES}]")
# Everything but the line break, for whole texts (guard_lines).
_CONTROL_IN_TEXT = re.compile(
    f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069{_SURROGATES}]")
_SURROGATE = re.compile(f"[{_SURROGATES}]")
_LEGACY_COMMAND = "##["
# `::` after any whitespace at the start of a line (the runner trims Unicode whitespace too),
# found after a line break: a `^` under re.M is tried at every position (10x slower).
_LINE_COMMAND = re.compile(r"\n([^\S\n]*)::")
# Inline Markdown and HTML syntax: code spans, emphasis, strike-through, links and images
# (``[``), tags, entities and autolinks (``<``, ``&``), table cells (``|``). Block syntax (``#``,
# ``-``, ``>``) only acts at the start of a line, where no output puts a value; ``:`` and ``.``
# only where they would make a bare URL a link.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<&|~])|:(?=//)|(?<=www)\.", re.I)
# ``@``: cmark-gfm finds email autolinks after escapes are resolved (``user\@x.com`` is still a
# mailto link) and GitHub mentions in the rendered text: a word joiner (U+2060, invisible) after
# it leaves neither a domain nor a name to match.
_AT, _INERT_AT = "@", "@\u2060"


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def visible(text: str) -> str:
    """Control characters and surrogates shown as escapes (``\\n``, ``\\x1b``, ``\\udfff``): one
    value stays on one line, cannot drive the terminal, and can be written as UTF-8."""
    # isprintable() is False for every character _CONTROL matches: most values skip the regex.
    return text if text.isprintable() else _CONTROL.sub(_escape_char, text)


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
    text = value if type(value) is str else str(value)
    if (len(text) <= limit and text.isprintable() and _LEGACY_COMMAND not in text
            and not text.lstrip().startswith("::")):
        return text  # the common case, without four calls: a million-row table has 8 M cells
    return no_commands(visible(clip(text, limit)))


def quoted(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value named in an error message: its repr (capped), with no workflow command."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and text.isprintable() and _LEGACY_COMMAND not in text:
        # Nothing to cap or escape (the common case; readers name every op this way): the
        # repr of printable text has no control character and starts with a quote, not `::`.
        return repr(text)
    return no_commands(visible(repr(clip(text, limit))))


def md_text(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as Markdown text (a table cell, a list item): HTML and Markdown syntax escaped,
    so a name shows as the characters it has and never as markup, a link or an image."""
    text = visible(clip(str(value), limit))
    text = _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(), text).replace(_AT, _INERT_AT)
    return text.replace(_LEGACY_COMMAND, "##\\[")


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
    """A JSON document about to be printed or written: ``##[`` can only be inside a string
    there, where ``\\u005b`` is the same ``[`` to any JSON reader; likewise a lone surrogate,
    written as its ``\\udfff`` escape. (json.dumps already escapes newlines and control
    characters, and surrogates unless told ``ensure_ascii=False``.)"""
    if not document.isascii():  # O(1) on a str: what json.dumps writes skips the regex
        document = _SURROGATE.sub(_escape_char, document)
    return document.replace(_LEGACY_COMMAND, "##\\u005b")


def guard_lines(text: str) -> str:
    """A whole text for stdout or stderr, line by line: the last guard against a value that
    reached it without its kind's escaping (control characters but the line break shown as
    escapes, no workflow command). Whole-text passes, each skipped when it has nothing to do:
    a million-line table takes about a second."""
    if not text.replace("\n", "").isprintable():
        text = _CONTROL_IN_TEXT.sub(_escape_char, text)
    if _LEGACY_COMMAND in text:
        text = text.replace(_LEGACY_COMMAND, "##\\[")
    return _LINE_COMMAND.sub("\n\\1\\\\::", "\n" + text)[1:] if "::" in text else text


def line_blocks(pieces: Iterable[str], size: int = 1 << 20) -> Iterator[str]:
    """``pieces`` joined, cut again into blocks of about ``size`` characters that each end at a
    line break (the last ends where the text does): ``guard_lines`` and ``json_text`` work a
    line at a time, so applied to each block they give what they give on the whole text, which
    need never exist at once."""
    pending: list[str] = []
    held = 0
    for piece in pieces:
        pending.append(piece)
        held += len(piece)
        if held >= size:
            block = "".join(pending)
            cut = block.rfind("\n") + 1
            if cut:
                yield block[:cut]
                block = block[cut:]
            pending, held = [block], len(block)
    block = "".join(pending)
    if block:
        yield block
