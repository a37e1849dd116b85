"""A .blend file's block structure, read without Blender: the checks the ``blensor``
command makes before Blender's reader sees a file (a broken one is refused in one line,
not left to crash or hang that reader).

A .blend is a header (``BLENDER`` + pointer size + endianness + version in 12 bytes;
since Blender 5.0 ``BLENDER17-01v0500``, 17 bytes, with 32-byte block headers), then
blocks, each a block header (code, length, old address, SDNA struct index, count) and
its data, up to the ``ENDB`` block; the ``DNA1`` block describes every struct. Blender
saves it raw, zstd-compressed (seekable multi-frame, since 3.0) or gzip-compressed
(before). :func:`check_blend` walks the chain and refuses a file whose header, block
lengths, ``ENDB`` or ``DNA1`` are broken, and a linked library (``LI`` block) whose
path is not a regular file (a FIFO would block Blender's reader forever). It reads the
whole (decompressed) file once: about 2 ms for the demo scene. A broken file that keeps
its structure can still crash Blender's reader: the command opens it in a child process
first for that (:mod:`blensor_addon.cli`).
"""
from __future__ import annotations

import gzip
import os
import re
import stat
import struct
import zlib
from pathlib import Path

from ..core.errors import SettingsError

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


class BlendStructureError(ValueError):
    """The bytes are not a well-formed .blend (the message says where)."""


def read_blend_bytes(path) -> bytes | None:
    """The file's bytes, decompressed if it is zstd or gzip; None for a zstd file where
    the ``zstandard`` package (a dependency of bpy, and bundled with Blender) is missing.

    Raises:
        OSError: unreadable; BlendStructureError: the compressed stream is broken.
    """
    with open(path, "rb") as fh:
        head = fh.read(4)
        fh.seek(0)
        if head == _ZSTD_MAGIC:
            try:
                import zstandard
            except ImportError:
                return None
            try:
                with zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True) as r:
                    return r.read()
            except zstandard.ZstdError as exc:
                raise BlendStructureError(f"zstd stream broken ({exc})") from None
        if head[:2] == _GZIP_MAGIC:
            try:
                return gzip.GzipFile(fileobj=fh).read()
            except (OSError, EOFError, zlib.error) as exc:
                raise BlendStructureError(f"gzip stream broken ({exc})") from None
        return fh.read()


def _header(data: bytes) -> tuple[int, str, int, str]:
    """(pointer size, struct byte order ``<``/``>``, header size, block header format)."""
    if not data.startswith(b"BLENDER"):
        raise BlendStructureError("no BLENDER header")
    m = re.match(rb"BLENDER(\d\d)-(\d\d)([vV])(\d{4})", data[:17])
    if m:  # Blender 5.0+: header size, file format version 1 = 64-bit block headers
        if int(m.group(1)) != 17 or int(m.group(2)) != 1:
            raise BlendStructureError(f"unknown .blend header {data[:17]!r}")
        return 8, "<" if m.group(3) == b"v" else ">", 17, "large"
    m = re.match(rb"BLENDER([_-])([vV])(\d{3})", data[:12])
    if not m:
        raise BlendStructureError(f"unknown .blend header {data[:12]!r}")
    return 4 if m.group(1) == b"_" else 8, "<" if m.group(2) == b"v" else ">", 12, "small"


def blocks(data: bytes):
    """Yield (code, data offset, length, SDNA index, count) of every block up to and
    without ``ENDB``.

    Raises:
        BlendStructureError: a bad header, a block running past the end of the file or
        with a negative length or count, or no ``ENDB`` block.
    """
    ptr, order, pos, kind = _header(data)
    if kind == "large":
        fmt = order + "4siQqq"  # code, SDNAnr, old, len, nr
    else:
        fmt = order + "4si" + ("I" if ptr == 4 else "Q") + "ii"  # code, len, old, SDNAnr, nr
    size = struct.calcsize(fmt)
    n = len(data)
    while True:
        if pos + size > n:
            raise BlendStructureError(f"no ENDB block (the block chain ends at byte {pos} of {n})")
        if kind == "large":
            code, sdna, _old, length, count = struct.unpack_from(fmt, data, pos)
        else:
            code, length, _old, sdna, count = struct.unpack_from(fmt, data, pos)
        if code == b"ENDB":
            return
        start = pos + size
        if length < 0 or count < 0 or start + length > n:
            raise BlendStructureError(f"block {code!r} at byte {pos} has length {length} and count {count} "
                                      f"(the file has {n} bytes)")
        yield code, start, length, sdna, count
        pos = start + length


def _sdna(block: bytes, order: str, ptr: int) -> dict:
    """Struct index -> (struct name, [(field name, offset, size)]) from a ``DNA1`` block."""
    pos = 0

    def tag(name: bytes) -> None:
        nonlocal pos
        pos = (pos + 3) & ~3
        if block[pos:pos + 4] != name:
            raise BlendStructureError(f"DNA1 block: no {name.decode()} section")
        pos += 4

    def count() -> int:
        nonlocal pos
        (c,) = struct.unpack_from(order + "i", block, pos)
        pos += 4
        if c < 0 or c > len(block):
            raise BlendStructureError("DNA1 block: a bad count")
        return c

    def strings(c: int) -> list[str]:
        nonlocal pos
        out = []
        for _ in range(c):
            end = block.index(b"\0", pos)
            out.append(block[pos:end].decode("latin-1"))
            pos = end + 1
        return out

    try:
        if block[:4] != b"SDNA":
            raise BlendStructureError("DNA1 block does not start with SDNA")
        pos = 4
        tag(b"NAME")
        names = strings(count())
        tag(b"TYPE")
        types = strings(count())
        tag(b"TLEN")
        tlen = struct.unpack_from(f"{order}{len(types)}h", block, pos)
        pos += 2 * len(types)
        tag(b"STRC")
        out = {}
        for i in range(count()):
            t, nf = struct.unpack_from(order + "hh", block, pos)
            pos += 4
            fields, off = [], 0
            for _ in range(nf):
                ft, fn = struct.unpack_from(order + "hh", block, pos)
                pos += 4
                name = names[fn]
                dims = 1
                for d in re.findall(r"\[(\d+)\]", name):
                    dims *= int(d)
                size = (ptr if name.startswith("*") or name.startswith("(*") else tlen[ft]) * dims
                fields.append((name, off, size))
                off += size
            out[i] = (types[t], fields)
        return out
    except (struct.error, ValueError, IndexError) as exc:
        if isinstance(exc, BlendStructureError):
            raise
        raise BlendStructureError(f"DNA1 block unreadable ({exc})") from None


def library_paths(data: bytes) -> list[str]:
    """Paths of the linked libraries (``LI`` blocks) as stored (``//`` = relative to the
    .blend).

    Raises:
        BlendStructureError: the structure is broken (see :func:`blocks`), or no ``DNA1``.
    """
    ptr, order, _, _ = _header(data)
    found = list(blocks(data))
    dna = [(s, n) for code, s, n, _, _ in found if code == b"DNA1"]
    if not dna:
        raise BlendStructureError("no DNA1 block")
    libs = [(s, n, sdna) for code, s, n, sdna, _ in found if code == b"LI\0\0"]
    if not libs:
        return []
    structs = _sdna(data[dna[0][0]:dna[0][0] + dna[0][1]], order, ptr)
    out = []
    for start, length, sdna in libs:
        name, fields = structs.get(sdna, ("", []))
        spot = [(o, z) for f, o, z in fields if f.startswith("filepath[") or f.startswith("name[")]
        if name != "Library" or not spot or spot[0][0] + spot[0][1] > length:
            raise BlendStructureError(f"LI block at byte {start} is not a Library")
        o, z = spot[0]
        raw = data[start + o:start + o + z]
        out.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
    return out


def check_regular_file(setting: str, path, what: str = "an existing .blend file") -> Path:
    """``path`` if it is a regular file (after symbolic links).

    Raises:
        SettingsError (``setting``): missing, a folder, a FIFO, a device or a socket
        (reading a FIFO blocks until someone writes to it).
    """
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        raise SettingsError(setting, what, str(path)) from None
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise SettingsError(setting, f"{what} (a regular file)", f"{path} ({kind})")
    return p


def check_blend(path) -> list[str]:
    """Check the .blend at ``path`` before Blender reads it: a regular file, a sound block
    chain (header, block lengths, ``ENDB``, ``DNA1``; compressed files decompressed), and
    every linked library a regular file or missing (Blender reports a missing one).
    Returns the libraries' absolute paths ([] unchecked: a zstd file without the
    ``zstandard`` package).

    Raises:
        SettingsError (``SCENE.blend``): naming what is wrong.
    """
    p = check_regular_file("SCENE.blend", path)
    try:
        data = read_blend_bytes(p)
        if data is None:  # (no zstd decoder: Blender's reader alone judges the file)
            return []
        paths = library_paths(data)
    except BlendStructureError as exc:
        raise SettingsError("SCENE.blend", f"a readable .blend file ({exc})", str(path)) from None
    except OSError as exc:
        raise SettingsError("SCENE.blend", f"a readable .blend file ({exc.strerror})", str(path)) from None
    out = []
    for lib in paths:
        full = p.resolve().parent / lib[2:] if lib.startswith("//") else Path(lib)
        out.append(str(full))
        if os.path.lexists(full):
            try:
                check_regular_file("library", full)
            except SettingsError as exc:
                raise SettingsError("SCENE.blend", "a .blend whose linked libraries are regular files",
                                    f"{path} (library {exc.value})") from None
    return out
