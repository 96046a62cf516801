"""BaselineStore: per-op device-time baselines as JSON files users commit.

One file per test module, mirroring its path (``tests/test_mlp.py`` ->
``baselines/tests/test_mlp.json``), keyed by test node id, then by variant
(``"simulated:trn2"``), so numbers of different backends or chips never meet.

Files are deterministic (sorted keys, fixed rounding, no timestamps): re-recording unchanged
code leaves them byte-identical.

Schema versions: 1 holds exact (simulated) entries, each op with the one module where it spent
most of its time; 2 adds the optional per-round ``samples`` of measured backends (cpu, cuda,
neuron); 3 replaces each op's ``module`` by ``modules``, its device time per module path (so a
failure names the modules whose time changed), and adds the optional ``recomputed`` (calls that
activation checkpointing re-ran) and ``uncosted`` (costed by the fallback); 4 adds each op's
``bound`` (what limits the calls that carry most of its time) and ``dtype`` (its first tensor
input's), and an entry's optional ``auto_cast`` (neuronx-cc's --auto-cast, when not the
default; also in the variant: "simulated:trn2:graph:auto-cast=matmult"); 5 adds an entry's
device ``memory`` and ``reason``; 6 the ``reason_for`` digest of the numbers a reason was given
for, and what is live at the memory peak by origin; 7 an entry's ``policy``, the marker
arguments that decide its verdicts (left out when the marker sets none), a collective's
``ranks``, ``link_bytes`` and ``algorithm``, in its own op entries only, and the compiled
graphs that ran (``graphs``: torch.compile's executables, runs and breaks; left out when none). Files are written as
version 7; older versions are read as they are (their ops' time all in their one module before
3, their bound and dtype unknown before 4, their policy unknown before 7) and become version 7
when written again. A pytest-neuronprof that predates a version refuses (rather than misreads)
a file that has it. Writes hold a file lock while they re-read, merge and replace
the file atomically, so parallel writers (xdist, sharded CI jobs) never lose or half-write an
entry. A file that does not validate (duplicate keys and unknown keys included, at every level)
stops the run with an error naming it; it is never overwritten.

Only baseline files are baselines: a ``--neuron-report`` or a Chrome trace left in the directory
(an output path inside it is refused up front) is not read as one.

Baseline files come from pull requests, so they are untrusted: only regular files are read (a
FIFO, a device, a socket, or a link to one, is an error naming it, never a hang or an endless
read), none larger than a limit (``defaults.DEFAULT_MAX_FILE_BYTES``, raised by
``--neuron-baseline-max-size``); folder links are not followed when listing, and nothing is
written through a folder link that leads out of the directory. A test key must name a test file
inside the directory (``key_problem``: the one rule of every reader and writer).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping

from ..defaults import DEFAULT_MAX_FILE_BYTES
from ..errors import BaselineError
from ..files import atomic_write_text, os_reason, show_path
from ..formatting import format_si, record_command
from ..jsontext import Deferred, gc_paused, iterdumps
from ..safetext import quoted
from .decode import Decoder, DuplicateKeyError, json_decoder, load_json
from .summary import COLLECTIVE_OP_KEYS, ProfileSummary

SCHEMA_VERSION = 7  # the newest this module reads, and the one it writes
SAMPLES_SCHEMA_VERSION = 2  # the first with per-round samples (measured backends)
MODULES_SCHEMA_VERSION = 3  # the first with each op's time per module
MEMORY_SCHEMA_VERSION = 5  # the first with device memory and reasons (older entries: time only)
REASON_FOR_SCHEMA_VERSION = 6  # the first whose reasons name the numbers they were given for
POLICY_SCHEMA_VERSION = 7  # the first whose entries keep their marker's policy (none: none given)
COLLECTIVES_SCHEMA_VERSION = 7  # the first whose collectives keep ranks, link_bytes, algorithm
GRAPHS_SCHEMA_VERSION = 7  # the first whose entries keep their compiled graphs (torch.compile)
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
TRACE_SUFFIX = ".trace.json"  # a test's Chrome trace (outputs.trace_files names them): never a baseline
LOCK_TIMEOUT_S = 60.0
_FIX = ("restore it from version control (`git checkout -- {path}`), or delete it and re-record "
        f"with `{record_command()}`")
PLUGIN_SIZE_OPTION = "--neuron-baseline-max-size (ini neuron_baseline_max_size)"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))
# Where a key's file part cannot name a test file inside the baseline directory.
_BAD_FILE_PART = re.compile("[\x00-\x1f\x7f]")


def key_problem(nodeid: str) -> str | None:
    """Why a test key cannot be stored (None when it can): its file part (before ``::``) must be
    a relative path to a test file inside the baseline directory. The one rule for every
    reader and writer, so the plugin, `show`, `compare` and `merge` accept the same keys."""
    module = nodeid.split("::", 1)[0]
    parts = module.replace("\\", "/").split("/")
    if not module:
        return "it names no test file"
    if _BAD_FILE_PART.search(module):
        return "its test file's name has a control character"
    if module.startswith(("/", "\\")) or re.match("[A-Za-z]:", module):
        return "its test file's path is absolute"
    if any(part in ("", ".", "..") for part in parts):
        return "its test file's path has an empty, '.' or '..' part"
    return None


def baseline_path(baseline_dir: Path, nodeid: str) -> Path:
    """The file holding ``nodeid``'s entries: the test module's path with .json."""
    module = nodeid.split("::", 1)[0]
    relative = Path(module).with_suffix(".json")
    if relative.is_absolute() or ".." in relative.parts:
        relative = Path(*[p for p in relative.parts if p not in ("..", relative.anchor)])
    return baseline_dir / relative


def lock_path(path: Path) -> Path:
    """The lock guarding ``path``: in the temp folder, so no lock files land among the baselines
    users commit. An OS lock (fcntl / msvcrt) is freed when its holder dies: no stale locks."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / "pytest-neuronprof-locks"
    folder.mkdir(exist_ok=True)
    return folder / f"{digest}.lock"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid number in a baseline")


def _not_regular(path: Path, mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    link = f" (a link to {quoted(os.path.realpath(path))})" if os.path.islink(path) else ""
    return f"it is {kind}{link}, and only regular files are read; remove it, or replace it with a regular file"


def read_regular_bytes(path: Path, max_bytes: int, fail: Callable[[str], Exception],
                       size_option: str) -> bytearray | None:
    """The content of ``path`` (None when it does not exist), read only if it is a regular
    file of at most ``max_bytes``: a FIFO, a device, a socket (or a link to one) is refused
    without blocking on it, and no more than ``max_bytes + 1`` bytes are ever read.
    ``fail(problem)`` makes the caller's error; ``size_option`` is the option that raises the limit."""
    # O_NONBLOCK: opening a FIFO with no writer would block forever; fstat then tells it apart.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ENXIO: a socket; ELOOP: a link loop; EACCES
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise fail(_not_regular(path, mode)) from None
        raise fail(f"cannot be read ({os_reason(exc)})") from None
    too_large = (f"it is larger than the limit of {format_si(max_bytes, 'B')} ({max_bytes:,} bytes); if "
                 f"it is meant to be this big, raise the limit with {size_option}, e.g. "
                 f"{size_option.split()[0]}=1GB")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise fail(_not_regular(path, info.st_mode))
        if info.st_size > max_bytes:  # refused unread
            raise fail(too_large)
        # Read into one buffer of the size fstat gives, plus one byte that finds the end (no
        # chunks to join: a large file is in memory once); st_size may lie (/proc) or the file
        # grow, so the buffer grows as needed and what is read is counted against the limit.
        data, size = bytearray(min(info.st_size, max_bytes) + 1), 0
        with io.FileIO(fd, "rb", closefd=False) as raw:
            while size <= max_bytes:
                if size == len(data):
                    data.extend(bytes(min(1 << 20, max_bytes + 1 - size)))
                with memoryview(data) as view:
                    got = raw.readinto(view[size:])
                if not got:
                    break
                size += got
    except OSError as exc:
        raise fail(f"cannot be read ({os_reason(exc)})") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise fail(too_large)
    del data[size:]  # in place
    return data


def _fail(path: Path, problem: str) -> BaselineError:
    shown = show_path(path)
    return BaselineError(f"broken baseline file {shown}: {problem}; {_FIX.format(path=shown)}")


def _parse_summary(check: Decoder, where: str, data: Any, version: int) -> ProfileSummary:
    if isinstance(data, dict) and "samples" in data and version < SAMPLES_SCHEMA_VERSION:
        raise check.fail(f"{where} has per-round samples, which need schema_version "
                         f"{SAMPLES_SCHEMA_VERSION} (the file says {version})")
    for key, what in (("memory", "device memory"), ("reason", "a reason")):
        if isinstance(data, dict) and key in data and version < MEMORY_SCHEMA_VERSION:
            raise check.fail(f"{where} has {what}, which needs schema_version "
                             f"{MEMORY_SCHEMA_VERSION} (the file says {version})")
    for key, needs in (("reason_for", REASON_FOR_SCHEMA_VERSION), ("policy", POLICY_SCHEMA_VERSION),
                       ("graphs", GRAPHS_SCHEMA_VERSION)):
        if isinstance(data, dict) and key in data and version < needs:
            raise check.fail(f"{where} has {key}, which needs schema_version {needs} (the file "
                             f"says {version})")
    if version < COLLECTIVES_SCHEMA_VERSION and isinstance(data, dict) and isinstance(data.get("ops"), dict):
        for name, op in data["ops"].items():
            if isinstance(op, dict) and not COLLECTIVE_OP_KEYS.isdisjoint(op):
                raise check.fail(f"{where}.ops[{name!r}] has a collective's "
                                 f"{', '.join(sorted(COLLECTIVE_OP_KEYS & set(op)))}, which needs "
                                 f"schema_version {COLLECTIVES_SCHEMA_VERSION} (the file says {version})")
    from .memory import LIVE_KEY, LIVE_SCHEMA_VERSION

    memory = data.get("memory") if isinstance(data, dict) else None
    if isinstance(memory, dict) and LIVE_KEY in memory and version < LIVE_SCHEMA_VERSION:
        raise check.fail(f"{where}.memory has {LIVE_KEY} (what is live at the peak by origin), "
                         f"which needs schema_version {LIVE_SCHEMA_VERSION} (the file says {version})")
    return ProfileSummary.from_json(data, check, where, legacy=version < MODULES_SCHEMA_VERSION,
                                    policy_known=version >= POLICY_SCHEMA_VERSION)


def _load(path: Path, text: str) -> Any:
    if not text.strip():
        raise _fail(path, "the file is empty")
    try:
        return load_json(text, parse_constant=_reject_constant)
    except DuplicateKeyError as exc:
        raise _fail(path, f"{exc} (two entries where one belongs, as a merge that kept both sides "
                          "leaves them: the last one would win unseen)") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise _fail(path, f"not valid JSON ({exc})") from None
    except RecursionError:  # json's C decoder on deeply nested arrays (fuzzing found it)
        raise _fail(path, "not valid JSON (nested too deeply)") from None


def is_other_output(path: Path, data: Any) -> bool:
    """A file of the plugin's other outputs (a --neuron-report, a Chrome trace) that was left in
    a baseline directory: not a baseline file, so not read as one."""
    if path.name.endswith(TRACE_SUFFIX):
        return True
    return isinstance(data, dict) and "schema_version" not in data and (
        "report_version" in data or "traceEvents" in data)


def parse_baseline_text(path: Path, text: str) -> dict[str, dict[str, ProfileSummary]]:
    """Validate a baseline file's text: {nodeid: {variant: ProfileSummary}}."""
    parsed = _parse_text(path, text, False)
    assert parsed is not None
    return parsed


def _parse_text(path: Path, text: str, others: bool,
                drop: Collection[tuple[str, str]] = ()) -> dict[str, dict[str, ProfileSummary]] | None:
    """The records of a file's text (None: ``others`` and it is another output's file). Every
    parse of a baseline file's text goes through here: test by test (``parse_streamed``), or,
    where that declines, decoded whole and validated (the errors are always this path's).
    ``drop``: (test, variant) entries validated, then not kept."""
    if not (others and path.name.endswith(TRACE_SUFFIX)):
        parsed = parse_streamed(path, text, drop)
        if parsed is not None:
            return parsed
    with gc_paused():
        data = _load(path, text)
        if others and is_other_output(path, data):
            return None
        parsed = _parse_document(path, data)
    for nodeid, variants in parsed.items() if drop else ():
        _drop(nodeid, variants, drop)
    return parsed


def _drop(nodeid: str, variants: dict[str, ProfileSummary], drop: Collection[tuple[str, str]]) -> None:
    for variant in [variant for variant in variants if (nodeid, variant) in drop]:
        del variants[variant]


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json's decoder skips it


def parse_streamed(path: Path, text: str,
                   drop: Collection[tuple[str, str]] = ()) -> dict[str, dict[str, ProfileSummary]] | None:
    """The records of a baseline file's text, decoded and validated one test entry at a time, so
    the decoded tree of a large file (700 MB for a million ops) never exists whole; or None, and
    the caller decodes the whole text (``_load``, ``_parse_document``), whose result or error is
    the one to give. Only a file shaped as the plugin writes it is read here: an object whose
    first key is a readable ``schema_version`` and whose only other key is ``tests``, an object;
    anything else (another shape, a duplicate key, bad JSON, a value that does not validate)
    returns None, so a file read here is one the whole-text path reads to the same records
    (the same decoder decodes each entry, and each entry is validated by the same code).
    ``drop``: (test, variant) entries validated, then not kept."""
    decoder = json_decoder(parse_constant=_reject_constant)  # load_json's, as _load calls it
    scan, skip = decoder.raw_decode, _SPACE.match

    def space(source: str, at: int = 0) -> int:  # past the whitespace at ``at`` (always a match)
        return skip(source, at).end()  # type: ignore[union-attr]

    def token(at: int, expected: str) -> int:  # the position after ``expected`` and the space after it
        if text[at:at + 1] != expected:
            raise ValueError(f"expected {expected!r}")
        return space(text, at + 1)

    def key(at: int) -> tuple[str, int]:
        if text[at:at + 1] != '"':
            raise ValueError("expected a key")
        name, at = scan(text, at)
        return name, token(space(text, at), ":")

    try:
        with gc_paused():
            at = token(space(text), "{")
            name, at = key(at)
            version, at = scan(text, at)
            if name != "schema_version" or type(version) is not int or version not in READABLE_VERSIONS:
                return None
            name, at = key(token(space(text, at), ","))
            if name != "tests":
                return None
            at = token(at, "{")
            check = Decoder(lambda problem: _fail(path, problem))
            parsed: dict[str, dict[str, ProfileSummary]] = {}
            while text[at:at + 1] != "}":
                if parsed:
                    at = token(at, ",")
                nodeid, at = key(at)
                if nodeid in parsed:
                    return None  # a duplicate: the whole-text path names it
                variants, at = scan(text, at)
                parsed[nodeid] = entry = _parse_test(check, nodeid, variants, version)
                if drop:
                    _drop(nodeid, entry, drop)
                at = space(text, at)
            at = token(token(at, "}"), "}")
            return parsed if at == len(text) else None
    except Exception:  # whatever it is, the whole-text path meets it too, and says it its way
        return None


def _parse_test(check: Decoder, nodeid: str, variants: Any, version: int) -> dict[str, ProfileSummary]:
    """One test's entry of a file (``tests[nodeid]``), validated."""
    where = f"tests[{quoted(nodeid)}]"
    problem = key_problem(nodeid)
    if problem:
        raise check.fail(f"the test key {quoted(nodeid)} is not a test's node id ({problem})")
    check.mapping(where, variants)
    return {variant: _parse_summary(check, f"{where}[{quoted(variant)}]", entry, version)
            for variant, entry in variants.items()}


def parse_baseline_document(path: Path, data: Any) -> dict[str, dict[str, ProfileSummary]]:
    """Validate a baseline file already decoded (as ``load_json`` decodes it, with no NaN or
    Infinity in it): what ``parse_baseline_text`` gives for its text. Consumes ``data``."""
    with gc_paused():
        return _parse_document(path, data)


def _parse_document(path: Path, data: Any) -> dict[str, dict[str, ProfileSummary]]:
    """The records of a decoded file. Consumes ``data``: each test's decoded entry is dropped once
    its records are made, so a large file's tree and its records never all exist at once."""
    check = Decoder(lambda problem: _fail(path, problem))
    check.mapping("the top level", data)
    version = data.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise BaselineError(
            f"baseline file {show_path(path)} has schema_version {version!r}; this "
            f"pytest-neuronprof reads schema_version {SCHEMA_VERSION} and older "
            f"({', '.join(map(str, READABLE_VERSIONS))}): upgrade pytest-neuronprof "
            f"if the file is newer, or {_FIX.format(path=show_path(path))}")
    check.known_keys("the top level", data, ("schema_version", "tests"))
    tests = check.mapping("tests", data.get("tests"))
    parsed: dict[str, dict[str, ProfileSummary]] = {}
    for nodeid in list(tests):
        parsed[nodeid] = _parse_test(check, nodeid, tests.pop(nodeid), version)
    return parsed


def render_baseline_pieces(tests: Mapping[str, Mapping[str, ProfileSummary]]) -> Iterator[str]:
    """A baseline file's text in pieces (about one per test entry), each made as it is asked
    for: a large file is written or compared without ever existing whole."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "tests": {nodeid: {variant: Deferred(summary.to_write)
                           for variant, summary in sorted(variants.items())}
                  for nodeid, variants in sorted(tests.items())},
    }
    yield from iterdumps(document)  # json.dumps(indent=2, sort_keys=True)'s bytes, faster
    yield "\n"


def render_baseline(tests: Mapping[str, Mapping[str, ProfileSummary]]) -> str:
    return "".join(render_baseline_pieces(tests))


_SLICE_CHARS = 1 << 20


def _changed_pieces(old_text: str | None, pieces: Iterable[str]) -> Iterator[str] | None:
    """None when ``pieces`` joined are ``old_text``, else the pieces of the new text. Compared
    piece by piece as they are made: the new text is never whole in memory (a file of a million
    ops is 190 MB), and once a piece differs, what matched so far is taken from ``old_text``."""
    if old_text is None:
        return iter(pieces)
    pieces = iter(pieces)
    matched = 0
    for piece in pieces:
        if not old_text.startswith(piece, matched):
            return chain(_slices(old_text, matched), (piece,), pieces)
        matched += len(piece)
    return None if matched == len(old_text) else _slices(old_text, matched)


def _slices(text: str, end: int) -> Iterator[str]:
    """``text[:end]`` in slices of at most _SLICE_CHARS characters."""
    for start in range(0, end, _SLICE_CHARS):
        yield text[start:min(start + _SLICE_CHARS, end)]


def _decode(path: Path, data: bytearray) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text") from None


def _fingerprint(text: str) -> tuple[int, int]:
    """Tells a text read again from the one read before (str's hash: keyed per process, so a
    file cannot be made to collide with another on purpose)."""
    return len(text), hash(text)


@dataclass(frozen=True)
class ValidFile:
    """A baseline file's bytes that validated as a baseline file (an input of `neuronprof merge`):
    any file of the same bytes (not named as a Chrome trace, which is never read as a baseline)
    validates to the same entries, since what a file's text validates to never depends on its
    name otherwise. ``digest``: blake2b of the bytes (collision-resistant, the same in every
    process); ``nodeids``: its tests, in file order; ``keys``: its (test, variant) entries."""

    size: int
    digest: bytes
    nodeids: tuple[str, ...]
    keys: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, size: int, digest: bytes, parsed: Mapping[str, Mapping[str, ProfileSummary]]) -> "ValidFile":
        """The file of ``size`` bytes whose digest is ``digest``, which validated to ``parsed``."""
        return cls(size, digest, tuple(parsed),
                   frozenset((nodeid, variant) for nodeid, variants in parsed.items() for variant in variants))


def content_digest(data: bytes | bytearray) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def _same_valid_file(path: Path, data: bytearray, drop: Collection[tuple[str, str]],
                     known: Collection[ValidFile]) -> ValidFile | None:
    """The file of ``known`` whose bytes ``data`` (of ``path``) are, when each of its entries is in
    ``drop``: parsing ``data`` with ``drop`` would validate and keep only its tests' names. None
    (parse it) when there is no such file, or ``path`` is named as a trace (never parsed)."""
    if not drop or not known or path.name.endswith(TRACE_SUFFIX):
        return None
    candidates = [file for file in known if file.size == len(data) and file.keys.issubset(drop)]
    if not candidates:
        return None
    digest = content_digest(data)  # hashed only when a file of its size could be the same
    return next((file for file in candidates if file.digest == digest), None)


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _stale_temp_files(folders: Iterable[Path]) -> dict[Path, list[Path]]:
    """Temp files atomic_write_text left behind in ``folders`` (a writer killed mid-write),
    by the file they were to replace. Each folder is listed once per save."""
    pattern = re.compile(r"\.(.+\.json)\.[^.]+\.tmp")
    stale: dict[Path, list[Path]] = {}
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = pattern.fullmatch(name)
            if match:
                stale.setdefault(folder / match.group(1), []).append(folder / name)
    return stale


class BaselineStore:
    """Reads and writes the baseline files under one directory."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 size_option: str = PLUGIN_SIZE_OPTION) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes  # a larger file is refused unread
        self.size_option = size_option  # the option that raises it, named in that error
        self._cache: dict[Path, dict[str, dict[str, ProfileSummary]]] = {}
        self._read_texts: dict[Path, tuple[int, int]] = {}  # fingerprints of the texts cached
        # validate_all(replaced=...): per file, its entries but the replaced ones, and those
        self._kept: dict[Path, tuple[dict[str, dict[str, ProfileSummary]], set[tuple[str, str]]]] = {}

    def path_for(self, nodeid: str) -> Path:
        return baseline_path(self.directory, nodeid)

    def _read_text(self, path: Path) -> str | None:
        data = self._read_bytes(path)
        return None if data is None else _decode(path, data)

    def _read_bytes(self, path: Path) -> bytearray | None:
        if path.is_dir():
            raise BaselineError(f"baseline path {path} is a directory, expected a JSON file")
        return read_regular_bytes(path, self.max_bytes,
                                  lambda problem: BaselineError(f"baseline file {show_path(path)}: {problem}"),
                                  self.size_option)

    def files(self) -> list[Path]:
        """Every *.json file under the directory, sorted; folders that are links are not entered
        (one pointing at an ancestor would loop, one pointing elsewhere is not the project's)."""
        found: list[Path] = []
        for folder, _, names in os.walk(self.directory):  # followlinks=False
            found.extend(Path(folder) / name for name in names if name.endswith(".json"))
        return sorted(found)

    def _check_inside(self, path: Path) -> None:
        """BaselineError naming the link when ``path`` would be written outside the directory
        through a folder that is a symbolic link (planted by a pull request, say)."""
        root, folder = self.directory.resolve(), self.directory
        # Shown below the directory as named, not resolved: show_path would follow the link.
        below = Path(show_path(self.directory))
        for part in path.parent.relative_to(self.directory).parts:
            folder = folder / part
            if folder.is_symlink() and not _within(folder.resolve(), root):
                link = below / folder.relative_to(self.directory)
                raise BaselineError(
                    f"cannot write baseline file {below / path.relative_to(self.directory)}: {link} "
                    f"is a symbolic link to {quoted(str(folder.resolve()))}, outside the baseline "
                    f"directory {below}; replace the link with a real folder (`rm {link}`), or point "
                    "--neuron-baseline-dir at the folder you mean")

    def read_file(self, path: Path, drop: Collection[tuple[str, str]] = (), known: Collection[ValidFile] = (),
                  valid: list[ValidFile] | None = None) -> dict[str, dict[str, ProfileSummary]]:
        """The entries of one file ({} when it does not exist, or is another output's file), but
        those in ``drop`` (validated, not kept). ``known``: files already validated (merge's
        inputs); a file of the same bytes as one of them whose entries are all in ``drop`` is not
        parsed again (what parsing it gives is known: its tests, each with no entry left).
        ``valid``: the file's ValidFile is added to it when the file validated as a baseline."""
        data = self._read_bytes(path)
        if data is None:
            return {}
        same = _same_valid_file(path, data, drop, known)
        record = same is None and valid is not None and not drop and not path.name.endswith(TRACE_SUFFIX)
        size, digest = len(data), content_digest(data) if record else b""
        text = _decode(path, data)
        del data  # the file is in memory once while it is parsed
        fingerprint = _fingerprint(text)
        if same is not None:  # every entry replaced: its tests, each with no entry left
            self._read_texts[path] = fingerprint
            return {nodeid: {} for nodeid in same.nodeids}
        parsed = _parse_text(path, text, True, drop)
        if parsed is None:
            return {}
        if record:
            assert valid is not None
            valid.append(ValidFile.of(size, digest, parsed))
        self._read_texts[path] = fingerprint
        return parsed

    def _parsed_again(self, path: Path, text: str,
                      items: list[tuple[str, ProfileSummary]]) -> dict[str, dict[str, ProfileSummary]]:
        """``text`` of ``path`` parsed, before ``items`` are put in it: what the cache holds when
        it is the text read before (`neuronprof merge` validates OUT, then re-reads it under the
        lock), a fresh parse else. Entries validate_all did not keep are ones ``items`` replace."""
        cached = self._cache.get(path)
        kept, replaced = self._kept.pop(path, (None, set()))
        if cached is None and kept is not None and replaced.issubset(
                (nodeid, summary.variant) for nodeid, summary in items):
            cached = kept
        if cached is not None and self._read_texts.get(path) == _fingerprint(text):
            return {nodeid: dict(variants) for nodeid, variants in cached.items()}
        return parse_baseline_text(path, text)

    def validate_all(self, replaced: Collection[tuple[str, str]] = (), known: Collection[ValidFile] = ()) -> int:
        """Read every baseline file under the directory; a broken one raises BaselineError.
        Returns how many files were read. ``replaced``: (test, variant) entries the next
        ``save`` writes (`neuronprof merge`), validated but not kept (OUT's copy of a large
        merge's entries doubled its memory); ``load`` reads a file that had them afresh.
        ``known``: files validated already (merge's inputs); a file with the bytes of one of
        them, all of whose entries are replaced, is not parsed again (see ``read_file``)."""
        if not self.directory.is_dir():
            # A file in its place (or above it) stopped the run only when a test read or wrote
            # a baseline, as an INTERNALERROR; say so up front, naming it.
            for above in (self.directory, *self.directory.parents):
                if above.exists():
                    if not above.is_dir():
                        raise BaselineError(
                            f"baseline directory {show_path(self.directory)}: "
                            f"{show_path(above)} is a file, not a directory; point "
                            "--neuron-baseline-dir (ini neuron_baseline_dir) at a directory")
                    break
            return 0
        files = self.files()
        by_file: dict[Path, set[tuple[str, str]]] = {}
        for nodeid, variant in replaced:
            by_file.setdefault(self.path_for(nodeid), set()).add((nodeid, variant))
        for path in files:
            drop = by_file.get(path, set())  # dropped as each test is read
            parsed = self.read_file(path, drop, known)
            if drop:
                self._kept[path] = (parsed, drop)
            else:
                self._cache[path] = parsed
        return len(files)

    def load(self, nodeid: str, variant: str) -> ProfileSummary | None:
        """The stored summary of ``nodeid`` for ``variant``, or None. Files are read once."""
        path = self.path_for(nodeid)
        if path not in self._cache:
            self._cache[path] = self.read_file(path)
        return self._cache[path].get(nodeid, {}).get(variant)

    def save(self, entries: Iterable[tuple[str, ProfileSummary]],
             remove: Iterable[tuple[str, str]] = ()) -> list[Path]:
        """Record entries, merging with what each file holds now, and drop the (test, variant)
        entries of ``remove`` (a file left with none is deleted); returns files changed."""
        from filelock import FileLock, Timeout

        by_file: dict[Path, list[tuple[str, ProfileSummary]]] = {}
        for nodeid, summary in entries:
            problem = key_problem(nodeid)
            if problem:  # it would be written where no reader accepts it
                raise BaselineError(f"cannot record the test {quoted(nodeid)}: {problem}")
            by_file.setdefault(self.path_for(nodeid), []).append((nodeid, summary))
        removals: dict[Path, list[tuple[str, str]]] = {}
        for nodeid, variant in remove:
            removals.setdefault(self.path_for(nodeid), []).append((nodeid, variant))
            by_file.setdefault(self.path_for(nodeid), [])
        changed = []
        stale = _stale_temp_files({path.parent for path in by_file})
        for path, items in sorted(by_file.items()):
            self._check_inside(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BaselineError(f"cannot create baseline directory {path.parent}: "
                                    f"{os_reason(exc)}") from None
            try:
                lock = FileLock(str(lock_path(path)), timeout=LOCK_TIMEOUT_S)
                with lock:
                    # Every live writer of path holds this lock while its temp file exists:
                    # those still here were left by a writer killed mid-write (kill -9).
                    for leftover in stale.get(path, ()):
                        try:
                            leftover.unlink()
                        except FileNotFoundError:
                            pass
                    # Re-read under the lock: another process may have written since we loaded.
                    old_text = self._read_text(path)
                    tests = {} if old_text is None else self._parsed_again(path, old_text, items)
                    for nodeid, summary in items:
                        tests.setdefault(nodeid, {})[summary.variant] = summary
                    for nodeid, variant in removals.get(path, ()):
                        tests.get(nodeid, {}).pop(variant, None)
                        if not tests.get(nodeid, True):
                            del tests[nodeid]
                    if not tests:  # every entry removed (or none there): no empty file
                        if old_text is not None:
                            path.unlink()
                            changed.append(path)
                        pieces = None
                    else:
                        # Compared with the old text as it is made, written only if it differs.
                        pieces = _changed_pieces(old_text, render_baseline_pieces(tests))
                    if pieces is not None:
                        atomic_write_text(path, pieces)
                        changed.append(path)
                    # A later load reads what the file now says (rounded) afresh; parsing the
                    # text just written here doubled the time to record or merge a large file.
                    self._cache.pop(path, None)
                    self._kept.pop(path, None)
                    self._read_texts.pop(path, None)
            except Timeout:
                raise BaselineError(f"timed out after {LOCK_TIMEOUT_S:.0f} s waiting for the lock "
                                    f"{lock_path(path)} (guarding {path}) held by another process") from None
            except OSError as exc:
                raise BaselineError(f"cannot write baseline file {path}: {os_reason(exc)}") from None
        return changed
