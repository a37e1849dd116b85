"""Bounded reading of the JSON, YAML and XML files a user hands BlenSor (config files,
calibration files, the manifests of an output folder). No bpy.

Python's ``json`` decoder recurses once per nested array or object (``RecursionError``
past about a thousand levels), its integers are limited to 4300 digits (``ValueError``)
and a 400-digit one overflows a float (``OverflowError``); ruamel.yaml's composer recurses
per level too (its C extension overflows the C stack: the process dies of SIGSEGV), and
code walking an ElementTree usually recurses per element. So every such file is read
here with three bounds, each refused as one :class:`~..core.errors.SettingsError` line
naming the file, and the line and column where the bound was passed:

- its size: at most ``max_bytes`` (:data:`MAX_BYTES` unless the caller says otherwise);
- its nesting: at most ``max_depth`` arrays/objects (JSON), collections (YAML) or
  elements (XML) inside one another (:data:`MAX_DEPTH`), measured by a linear scan
  BEFORE the document is built (a regular expression and numpy for JSON, ruamel.yaml's
  pure-Python event parser, which keeps its own state stack, for YAML, expat's element
  events for XML), so no parser ever recurses deeper;
- its integers: at most ``max_digits`` digits (:data:`MAX_INT_DIGITS`; JSON through the
  decoder's ``parse_int`` hook, YAML by its plain scalars), which every float holds.

Syntax errors are not turned into SettingsError here: :func:`load_json` raises
``json.JSONDecodeError`` (a ValueError), :func:`load_yaml` ``ruamel.yaml.YAMLError``,
:func:`load_xml` ``xml.etree.ElementTree.ParseError``, so each reader keeps its own
wording for them.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ..core.errors import SettingsError

if TYPE_CHECKING:
    import xml.etree.ElementTree

    from .atomic import StrPath

#: what the loaders read: a :class:`~pathlib.Path` (the file is read), bytes (UTF-8) or the text
Source: TypeAlias = "Path | bytes | bytearray | memoryview | str"

#: deepest nesting read (arrays/objects, collections, elements); the deepest real file
#: BlenSor reads (a Project AirSim config, an Ouster metadata file) nests 5 levels
MAX_DEPTH = 64
#: most digits of an integer (a 64-bit seed has 20; 10^64 still fits a float)
MAX_INT_DIGITS = 64
#: largest file read (bytes) unless the caller gives its own bound
MAX_BYTES = 16 * 1024 * 1024

# a JSON string (an unterminated one runs to the end), and a string or bracket token
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)', re.S)
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)|[\[\]{}]', re.S)
# a YAML 1.2 plain scalar the safe loader reads as an integer
_YAML_INT = re.compile(r"[-+]?(?:[0-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+)\Z")


def _where(what: str, text: str, pos: int) -> str:
    """``"WHAT line L column C"`` of character offset ``pos`` of ``text`` (1-based)."""
    line = text.count("\n", 0, pos) + 1
    return f"{what} line {line} column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def read_bytes(path: StrPath, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them.

    Raises:
        SettingsError (``what``): no such file, not a regular file, unreadable, or
            larger than ``max_bytes`` (read no further than one byte past it).
    """
    p = Path(path)
    if not p.is_file():
        raise SettingsError(what, "an existing file", str(path))
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise SettingsError(what, f"a readable file ({exc.strerror})", str(path)) from None
    if len(data) > max_bytes:
        raise SettingsError(what, f"a file of at most {_mib(max_bytes)}", f"{str(path)} (larger)")
    return data


def _text(source: Source, what: str, max_bytes: int) -> str:
    """``source`` as text: a :class:`~pathlib.Path` is read (:func:`read_bytes`), bytes
    are decoded (UTF-8, a BOM allowed), a str is the text itself."""
    if isinstance(source, Path):
        source = read_bytes(source, what, max_bytes)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if len(data) > max_bytes:
            raise SettingsError(what, f"a file of at most {_mib(max_bytes)}", f"{len(data):,} bytes")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SettingsError(what, f"UTF-8 text (byte {exc.start})",
                                f"byte {data[exc.start]:#04x}") from None
    if not isinstance(source, str):
        raise TypeError(f"a Path, bytes or str, not {type(source).__name__}")
    if len(source) > max_bytes:
        raise SettingsError(what, f"a file of at most {_mib(max_bytes)}", f"{len(source):,} characters")
    return source[1:] if source.startswith("\ufeff") else source


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in JSON ``text`` (0: a bare value), brackets
    inside strings not counted; linear in ``len(text)``, valid JSON or not."""
    flat = _JSON_STRING.sub('""', text).encode("utf-8", "surrogatepass")
    a = np.frombuffer(flat, np.uint8)
    idx = np.flatnonzero((a == 0x5B) | (a == 0x7B) | (a == 0x5D) | (a == 0x7D))
    if idx.size == 0:
        return 0
    b = a[idx]
    step = np.where((b == 0x5B) | (b == 0x7B), 1, -1).astype(np.int64)
    return int(np.cumsum(step).max(initial=0))


def check_json_depth(text: str, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse JSON ``text`` nesting more than ``max_depth`` arrays/objects.

    Raises:
        SettingsError (``WHAT line L column C``, at the first bracket past the bound):
            ``"JSON nested at most N deep"``, got the file's depth.
    """
    depth = json_depth(text)
    if depth <= max_depth:
        return
    d = 0
    for m in _JSON_TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            d += 1
            if d > max_depth:
                raise SettingsError(_where(what, text, m.start()), f"JSON nested at most {max_depth} deep",
                                    depth)
        elif c in "]}":
            d -= 1
    raise SettingsError(what, f"JSON nested at most {max_depth} deep", depth)  # (not reached)


def load_json(source: Source, what: str, *, max_depth: int = MAX_DEPTH, max_digits: int = MAX_INT_DIGITS,
              max_bytes: int = MAX_BYTES,
              object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The JSON document of ``source``: a :class:`~pathlib.Path` (the file is read), bytes
    (UTF-8, a BOM allowed) or the text (str). ``what`` names the file in errors (its
    path, or the setting that gave it); ``object_pairs_hook`` as :func:`json.loads`.

    Returns the document as :func:`json.loads` builds it (dict, list, str, int, float,
    bool, None), nested at most ``max_depth`` deep, integers of at most ``max_digits``
    digits.

    Raises:
        SettingsError: the file is missing, unreadable, not UTF-8, larger than
            ``max_bytes``, nested deeper than ``max_depth`` or holds an integer of more
            than ``max_digits`` digits (``WHAT line L column C`` where the text shows it).
        json.JSONDecodeError: not JSON (its ``lineno``/``colno`` are the file's).
    """
    text = _text(source, what, max_bytes)
    check_json_depth(text, what, max_depth)

    def parse_int(s: str) -> int:
        if len(s) - (s[0] == "-") > max_digits:
            m = re.search(r"(?<![0-9.eE+\-])" + re.escape(s) + r"(?![0-9.eE])", text)
            where = _where(what, text, m.start()) if m else what
            raise SettingsError(where, f"an integer of at most {max_digits} digits", s)
        return int(s)

    return json.loads(text, parse_int=parse_int, object_pairs_hook=object_pairs_hook)


def check_yaml(text: str, what: str, max_depth: int = MAX_DEPTH,
               max_digits: int = MAX_INT_DIGITS) -> None:
    """Refuse YAML ``text`` nesting more than ``max_depth`` collections or holding a plain
    integer of more than ``max_digits`` digits, from ruamel.yaml's pure-Python event
    parser (a state machine: no recursion, linear in the text), stopping at the first
    event past a bound.

    Raises:
        SettingsError (``WHAT line L column C``): a bound passed.
        ruamel.yaml.YAMLError: not YAML (up to the first bound passed).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent, ScalarEvent
    depth = 0
    for ev in YAML(typ="safe", pure=True).parse(text):
        if isinstance(ev, CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                m = ev.start_mark
                raise SettingsError(f"{what} line {m.line + 1} column {m.column + 1}",
                                    f"YAML nested at most {max_depth} deep", f"more than {max_depth} levels")
        elif isinstance(ev, CollectionEndEvent):
            depth -= 1
        elif (isinstance(ev, ScalarEvent) and ev.style is None and ev.tag is None
              and _YAML_INT.match(ev.value)):
            digits = ev.value.lstrip("+-")
            digits = digits[2:] if digits[:2] in ("0x", "0o", "0b") else digits
            if len(digits.replace("_", "")) > max_digits:
                m = ev.start_mark
                raise SettingsError(f"{what} line {m.line + 1} column {m.column + 1}",
                                    f"an integer of at most {max_digits} digits", ev.value)


def load_yaml(source: Source, what: str, *, max_depth: int = MAX_DEPTH, max_digits: int = MAX_INT_DIGITS,
              max_bytes: int = MAX_BYTES, allow_duplicate_keys: bool = False) -> Any:
    """The YAML document of ``source`` (a :class:`~pathlib.Path`, bytes or text, as
    :func:`load_json`) built by ruamel.yaml's safe loader (dict, list, str, int, float,
    bool, None, dates) once :func:`check_yaml` passed it.

    Raises:
        SettingsError: as :func:`load_json` (size, nesting, integer digits).
        ruamel.yaml.YAMLError: not YAML, or a key twice in a mapping unless
            ``allow_duplicate_keys``.
    """
    from ruamel.yaml import YAML
    text = _text(source, what, max_bytes)
    check_yaml(text, what, max_depth, max_digits)
    y = YAML(typ="safe", pure=True)
    y.allow_duplicate_keys = allow_duplicate_keys
    return y.load(text)


def check_xml(text: str, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse XML ``text`` nesting more than ``max_depth`` elements, from expat's start
    and end events (no recursion, linear); a syntax error ends the check silently (the
    parser that follows names it).

    Raises:
        SettingsError (``WHAT line L column C``): the first element past the bound.
    """
    import xml.parsers.expat as expat
    p = expat.ParserCreate()
    depth = 0

    def start(_name: str, _attrs: dict[str, str]) -> None:
        nonlocal depth
        depth += 1
        if depth > max_depth:
            raise SettingsError(f"{what} line {p.CurrentLineNumber} column {p.CurrentColumnNumber + 1}",
                                f"XML nested at most {max_depth} elements deep",
                                f"more than {max_depth} levels")

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    p.StartElementHandler = start
    p.EndElementHandler = end
    try:
        p.Parse(text, True)
    except expat.ExpatError:
        pass


def load_xml(source: Source, what: str, *, max_depth: int = MAX_DEPTH,
             max_bytes: int = MAX_BYTES) -> xml.etree.ElementTree.Element:
    """The root :class:`xml.etree.ElementTree.Element` of ``source`` (a
    :class:`~pathlib.Path`, bytes or text, as :func:`load_json`) once :func:`check_xml`
    passed it: at most ``max_depth`` elements deep.

    Raises:
        SettingsError: as :func:`load_json` (size, nesting).
        xml.etree.ElementTree.ParseError: not XML.
    """
    import xml.etree.ElementTree as ET
    text = _text(source, what, max_bytes)
    check_xml(text, what, max_depth)
    return ET.fromstring(text)


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_BYTES", "read_bytes", "json_depth", "check_json_depth",
           "load_json", "check_yaml", "load_yaml", "check_xml", "load_xml"]
