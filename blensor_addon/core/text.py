"""Text shown on a terminal: names from a .blend (objects, cameras, scenes, paths) may
hold escape sequences and newlines; :func:`printable` is the one place that escapes
them before anything BlenSor prints reaches a terminal."""
from __future__ import annotations


def printable(text: object) -> str:
    """``str(text)`` with every character that is not printable (control characters such
    as ESC and newline, DEL, C1 controls, Unicode format characters such as the
    right-to-left override) written as a Python escape (``\\x1b``, ``\\n``,
    ``\\u202e``); printable text, accented letters and other scripts included, is
    unchanged."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for c in s:
        if c.isprintable():
            out.append(c)
        else:
            o = ord(c)
            out.append(repr(c)[1:-1] if o < 0x80 else f"\\x{o:02x}" if o < 0x100
                       else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)
