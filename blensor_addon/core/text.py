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


#: the source documents the code cites by file number (docs/physics.md, "Sources"), by the
#: names a reader finds them under
SOURCE_NAMES = {
    "000": "Gschwandtner et al. 2011",
    "001": "Raj & Hashim",
    "002": "Jansen et al.",
    "003": "the Project AirSim lidar docs",
    "004": "the Unity lidar docs",
}

#: the original add-on's files (BlenSor 1.0.18) behind the section numbers "reference N"
#: (docs/physics.md, "Sources")
ORIGINAL_FILES = {
    "2": "blendodyne.py", "3.3": "blensor_native_code.c", "6.1": "blendodyne.py", "6.2": "ibeo.py",
    "6.3": "generic_lidar.py", "6.4": "tof.py", "6.5": "kinect.py", "6.6": "depthmap.py",
    "7": "blensor_native_code.c", "9": "__init__.py", "10.1": "evd.py", "10.5": "depthmap.py",
    "10.6": "mesh_utils.py", "10.7": "exportmotion.py",
}


def cite(text: str) -> str:
    """``text`` with the code's source numbers named for a reader: "seed 000" as
    "Gschwandtner et al. 2011" (:data:`SOURCE_NAMES`; "seed 003's" as "... docs'") and
    "reference 6.1" as "BlenSor 1.0.18's blendodyne.py" (:data:`ORIGINAL_FILES`); other
    text unchanged. Used where settings and presets are listed for users
    (``blensor sensors``)."""
    import re

    def seed(m: re.Match[str]) -> str:
        name = SOURCE_NAMES.get(m.group(1), m.group(0))
        if not m.group(2):
            return name
        return name + ("'" if name.endswith("s") else "'s")

    def reference(m: re.Match[str]) -> str:
        f = ORIGINAL_FILES.get(m.group(1))
        return f"BlenSor 1.0.18's {f}" if f else m.group(0)

    text = re.sub(r"\bseed (\d{3})('s)?", seed, str(text))
    return re.sub(r"\breference (\d+(?:\.\d+)?)\b", reference, text)
