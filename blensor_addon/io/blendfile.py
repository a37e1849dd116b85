"""A .blend file's block structure, read without Blender: the checks the ``blensor``
command makes before Blender's reader sees a file (a broken one is refused in one line,
not left to crash or hang that reader).

A .blend is a header (``BLENDER`` + pointer size + endianness + version in 12 bytes;
since Blender 5.0 ``BLENDER17-01v0500``, 17 bytes, with 32-byte block headers), then
blocks, each a block header (code, length, old address, SDNA struct index, count) and
its data, up to the ``ENDB`` block; the ``DNA1`` block describes every struct. Blender
saves it raw, zstd-compressed (seekable multi-frame, since 3.0) or gzip-compressed
(before). :func:`check_blend` walks the chain and refuses a file whose header, block
codes, block lengths, ``ENDB`` or ``DNA1`` are broken, and a linked library (``LI``
block) or an image read from a file (``IM`` block, not packed) whose path is not a
regular file (a FIFO would block Blender's reader forever).

The walk streams: the file is decompressed 1 MiB at a time, block data is skipped as it
passes, and only the ``DNA1`` block and the start of the ``LI`` and ``IM`` blocks are
kept (at most :data:`MAX_KEPT` bytes), so its memory is bounded whatever the file. A
compressed file may expand to at most :data:`MAX_RATIO` times its size (or
:data:`MIN_EXPANDED` bytes, whichever is more) and hold at most one block per byte on
disk (or :data:`MIN_BLOCKS`):
the .blend files Blender ships expand 3.5 to 15 times and hold under 0.05 blocks per
compressed byte, while a few kilobytes of zstd can expand to gigabytes of zeros or of
empty blocks (a decompression bomb), which is refused within a second or two. The walk
takes about 3 ms for the demo scene. A broken file that keeps its structure can still
crash Blender's reader: the command opens it in a child process first for that
(:mod:`blensor_addon.cli`).
"""
from __future__ import annotations

import glob
import gzip
import io
import os
import re
import stat
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeAlias

from ..core.errors import SettingsError
from ..core.files import check_regular_file, file_kind

if TYPE_CHECKING:
    from .atomic import StrPath

__all__ = ["BlendStructureError", "blocks", "check_blend", "check_regular_file", "library_paths",
           "read_blend_bytes"]

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20

#: expanded bytes a compressed .blend may hold per byte on disk (Blender's own files: 3.5
#: to 15; deflate reaches about 1030 on zeros, zstd 30,000)
MAX_RATIO = 100
#: expanded bytes any compressed .blend may hold, whatever its size on disk
MIN_EXPANDED = 512 * 1024 * 1024
#: blocks any .blend may hold, whatever its size on disk (beyond it: one per byte on disk)
MIN_BLOCKS = 1 << 20
#: the largest ``DNA1`` block, and the most ``LI`` block bytes, kept in memory (a real
#: ``DNA1`` block has about 130 KB, a ``Library`` struct about 2 KB)
MAX_KEPT = 64 * 1024 * 1024
#: the largest zstd window accepted (zstd's own default limit; Blender writes 1 MiB frames)
MAX_ZSTD_WINDOW = 1 << 27
#: a block code starts with a capital letter (``DATA``, ``DNA1``, ``ENDB``, ``GLOB``,
#: ``REND``, ``TEST``, ``USER`` and the two-letter ID codes ``OB``, ``ME``, ``LI``, ...)
_CODE = re.compile(rb"[A-Z][A-Z0-9]")


class BlendStructureError(ValueError):
    """The bytes are not a well-formed .blend (the message says where)."""


class _Reader(Protocol):
    """A binary stream read forward (a file, a decompressor's reader)."""

    def read(self, size: int = ..., /) -> bytes: ...


#: struct index -> (struct name, [(field name, offset, size)]) of a ``DNA1`` block
_Structs: TypeAlias = "dict[int, tuple[str, list[tuple[str, int, int]]]]"


class _Expanded:
    """The file's (decompressed) bytes read forward through a 1 MiB buffer, counting the
    bytes expanded against ``limit``.

    Raises (from :meth:`take` and :meth:`skip`):
        BlendStructureError: the compressed stream is broken, or it expands past ``limit``.
    """

    def __init__(self, source: _Reader, kind: str, limit: int | None, disk_size: int,
                 errors: tuple[type[BaseException], ...] = ()) -> None:
        self._src = source
        self._errors = errors  # what the decompressor raises on a broken stream
        self.kind = kind  # "zstd", "gzip" or "raw"
        self.limit = limit
        self.disk_size = disk_size
        self._buf = b""
        self._off = 0
        self.pos = 0  # bytes consumed
        self.expanded = 0  # bytes produced by the source so far
        self.eof = False

    def _chunk(self) -> bytes:
        try:
            chunk = self._src.read(_CHUNK)
        except self._errors as exc:
            raise BlendStructureError(f"{self.kind} stream broken ({exc})") from None
        if not chunk:
            self.eof = True
            return b""
        self.expanded += len(chunk)
        if self.limit is not None and self.expanded > self.limit:
            raise BlendStructureError(
                f"its {self.kind} stream expands past {self.limit:,} bytes, over {MAX_RATIO} times the "
                f"file's {self.disk_size:,} bytes on disk: a decompression bomb")
        return chunk

    def peek(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end of the file), left to be read."""
        while len(self._buf) - self._off < n and not self.eof:
            self._buf = self._buf[self._off:] + self._chunk()
            self._off = 0
        return self._buf[self._off:self._off + n]

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end of the file)."""
        avail = len(self._buf) - self._off
        if n <= avail:
            out = self._buf[self._off:self._off + n]
            self._off += n
        else:  # (collected in parts: a 64 MiB block is not copied once per chunk)
            parts, got = [self._buf[self._off:]], avail
            self._buf, self._off = b"", 0
            while got < n and not self.eof:
                chunk = self._chunk()
                use = min(len(chunk), n - got)
                parts.append(chunk[:use])
                got += use
                self._buf, self._off = chunk, use
            out = b"".join(parts)
        self.pos += len(out)
        return out

    def skip(self, n: int) -> int:
        """Pass the next ``n`` bytes without keeping them; returns how many there were."""
        left = n
        while True:
            avail = len(self._buf) - self._off
            if left <= avail:
                self._off += left
                self.pos += left
                return n
            left -= avail
            self.pos += avail
            self._buf, self._off = b"", 0
            if self.eof:
                return n - left
            self._buf = self._chunk()

    def drain(self, n: int) -> None:
        """Read up to ``n`` more bytes, for a broken stream's own error (a corrupt zstd frame
        may yield some garbage before its checksum fails)."""
        while n > 0 and not self.eof:
            n -= len(self._chunk())


def _open(fh: IO[bytes], disk_size: int) -> _Expanded | None:
    """``fh`` (binary, at 0) as an :class:`_Expanded` of its decompressed bytes; None for a
    zstd file where the ``zstandard`` package (a dependency of bpy, and bundled with
    Blender) is missing."""
    head = fh.read(4)
    fh.seek(0)
    limit = max(MIN_EXPANDED, MAX_RATIO * disk_size)
    if head == _ZSTD_MAGIC:
        try:
            import zstandard
        except ImportError:
            return None
        dctx = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW)
        return _Expanded(dctx.stream_reader(fh, read_size=_CHUNK, read_across_frames=True), "zstd", limit,
                         disk_size, (zstandard.ZstdError,))
    if head[:2] == _GZIP_MAGIC:
        return _Expanded(gzip.GzipFile(fileobj=fh), "gzip", limit, disk_size, (OSError, EOFError, zlib.error))
    return _Expanded(fh, "raw", None, disk_size)


def read_blend_bytes(path: StrPath) -> bytes | None:
    """The file's bytes, decompressed if it is zstd or gzip (within the bounds of
    :data:`MAX_RATIO` and :data:`MIN_EXPANDED`); None for a zstd file where the
    ``zstandard`` package is missing. All in memory: :func:`check_blend` streams instead.

    Raises:
        OSError: unreadable; BlendStructureError: the compressed stream is broken or
        expands past its bound.
    """
    with open(path, "rb") as fh:
        ex = _open(fh, os.fstat(fh.fileno()).st_size)
        if ex is None:
            return None
        parts = []
        while not ex.eof:
            parts.append(ex._chunk())
        return b"".join(parts)


def _header(head: bytes) -> tuple[int, str, int, str]:
    """(pointer size, struct byte order ``<``/``>``, header size, block header format) of
    the file's first 17 bytes."""
    if not head.startswith(b"BLENDER"):
        raise BlendStructureError("no BLENDER header")
    m = re.match(rb"BLENDER(\d\d)-(\d\d)([vV])(\d{4})", head[:17])
    if m:  # Blender 5.0+: header size, file format version 1 = 64-bit block headers
        if int(m.group(1)) != 17 or int(m.group(2)) != 1:
            raise BlendStructureError(f"unknown .blend header {head[:17]!r}")
        return 8, "<" if m.group(3) == b"v" else ">", 17, "large"
    m = re.match(rb"BLENDER([_-])([vV])(\d{3})", head[:12])
    if not m:
        raise BlendStructureError(f"unknown .blend header {head[:12]!r}")
    return 4 if m.group(1) == b"_" else 8, "<" if m.group(2) == b"v" else ">", 12, "small"


def _walk(ex: _Expanded, keep: Callable[[bytes], int] = lambda code: 0) -> Iterator[tuple[Any, ...]]:
    """Walk the block chain of ``ex``: yield (code, data offset, length, SDNA index,
    count, data or None) of every block up to and without ``ENDB``, with the first
    ``keep(code)`` bytes of each block's data (None where it is 0; at most
    :data:`MAX_KEPT` bytes of all blocks together), the rest skipped. The first item is
    the header's (pointer size, byte order).

    Raises:
        BlendStructureError: a bad header, a block code that is no code, a block running
        past the end of the file or with a negative length or count, more blocks than
        the bound (:data:`MIN_BLOCKS`, or one per byte on disk), more than
        :data:`MAX_KEPT` bytes to keep, or no ``ENDB`` block.
    """
    ptr, order, size0, kind = _header(ex.peek(17))
    ex.take(size0)
    yield ptr, order
    if kind == "large":
        fmt = order + "4siQqq"  # code, SDNAnr, old, len, nr
    else:
        fmt = order + "4si" + ("I" if ptr == 4 else "Q") + "ii"  # code, len, old, SDNAnr, nr
    size = struct.calcsize(fmt)
    max_blocks = max(MIN_BLOCKS, ex.disk_size)
    kept = 0
    n = 0
    while True:
        pos = ex.pos
        raw = ex.take(size)
        if len(raw) < size:
            raise BlendStructureError(f"no ENDB block (the block chain ends at byte {pos} of {ex.pos})")
        if kind == "large":
            code, sdna, _old, length, count = struct.unpack(fmt, raw)
        else:
            code, length, _old, sdna, count = struct.unpack(fmt, raw)
        if code == b"ENDB":
            return
        if not _CODE.match(code):
            raise BlendStructureError(f"the block at byte {pos} has no block code (it reads {code!r})")
        if length < 0 or count < 0:
            raise BlendStructureError(f"block {code!r} at byte {pos} has length {length} and count {count}")
        n += 1
        if n > max_blocks:
            raise BlendStructureError(f"over {max_blocks:,} blocks, more than one per byte of the file's "
                                      f"{ex.disk_size:,} on disk: a decompression bomb")
        start = ex.pos
        data = None
        want = min(keep(code), length)
        if want:
            if kept + want > MAX_KEPT:
                raise BlendStructureError(f"block {code!r} at byte {pos} has length {length:,} (at most "
                                          f"{MAX_KEPT:,} bytes of DNA1, LI and IM blocks are read)")
            data = ex.take(want)
            kept += want
            got = len(data) + (ex.skip(length - want) if len(data) == want else 0)
        else:
            got = ex.skip(length)
        if got < length:
            ex.skip(1 << 62)  # (to the end: the file's size for the message)
            raise BlendStructureError(f"block {code!r} at byte {pos} has length {length} and count {count} "
                                      f"(the file has {ex.pos} bytes)")
        yield code, start, length, sdna, count, data


def blocks(data: bytes) -> Iterator[tuple[bytes, int, int, int, int]]:
    """Yield (code, data offset, length, SDNA index, count) of every block of the
    (decompressed) .blend ``data`` up to and without ``ENDB``.

    Raises:
        BlendStructureError: see :func:`_walk`.
    """
    walk = _walk(_Expanded(io.BytesIO(data), "raw", None, len(data)))
    next(walk)
    for code, start, length, sdna, count, _ in walk:
        yield code, start, length, sdna, count


def _sdna(block: bytes, order: str, ptr: int) -> _Structs:
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
        c: int
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
        out: _Structs = {}
        for i in range(count()):
            t, nf = struct.unpack_from(order + "hh", block, pos)
            pos += 4
            fields: list[tuple[str, int, int]] = []
            off = 0
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


#: the bytes kept of each ``LI`` and ``IM`` block (a ``Library`` struct has about 2 KB, an
#: ``Image`` 1.8 KB; their path fields come first)
_STRUCT_KEPT = 64 * 1024
#: ``Image.source`` values whose pixels Blender reads from a file (``DNA_image_types.h``:
#: IMA_SRC_CHECK, FILE, SEQUENCE, MOVIE and TILED; GENERATED and VIEWER have none)
_FILE_SOURCES = (0, 1, 2, 3, 6)


def _field(structs: _Structs, struct_name: str, sdna: int | None,
           names: tuple[str, ...]) -> tuple[int, int] | None:
    """(offset, size) of the first field of struct ``sdna`` (or of the struct named
    ``struct_name``, for None) whose name starts with one of ``names``; None if none."""
    if sdna is None:
        sdna = next((i for i, (n, _) in structs.items() if n == struct_name), None)
    name, fields = structs.get(sdna, ("", [])) if sdna is not None else ("", [])
    if name != struct_name:
        return None
    return next(((o, z) for f, o, z in fields if f.startswith(names)), None)


def _text(data: bytes, spot: tuple[int, int]) -> str:
    o, z = spot
    return data[o:o + z].split(b"\0", 1)[0].decode("utf-8", "replace")


def _linked_paths(ex: _Expanded) -> tuple[list[str], list[tuple[str, str]]]:
    """(paths of the linked libraries, (name, path) of the images read from a file) of a
    stream, as stored (``//`` = relative to the .blend): the chain walked once, ``DNA1``
    kept whole and the start of every ``LI`` and ``IM`` block. A packed image (its
    ``packedfile`` or ``packedfiles`` set) or a generated one reads no file.

    Raises:
        BlendStructureError: the structure is broken (see :func:`_walk`), no ``DNA1``, an
        ``LI`` block that is no ``Library`` or an ``IM`` block that is no ``Image``.
    """
    walk = _walk(ex, keep=lambda code: MAX_KEPT if code == b"DNA1" else
                 _STRUCT_KEPT if code in (b"LI\0\0", b"IM\0\0") else 0)
    ptr, order = next(walk)
    dna = None
    found = []
    for code, start, length, sdna, _count, data in walk:
        if code == b"DNA1" and dna is None:
            dna = data
        elif code in (b"LI\0\0", b"IM\0\0"):
            found.append((code, start, length, sdna, data))
    if dna is None:
        raise BlendStructureError("no DNA1 block")
    if not found:
        return [], []
    structs = _sdna(dna, order, ptr)
    id_name = _field(structs, "ID", None, ("name[",))
    libs, images = [], []
    for code, start, length, sdna, data in found:
        kind = "Library" if code == b"LI\0\0" else "Image"
        spot = _field(structs, kind, sdna, ("filepath[", "name["))
        if spot is None or spot[0] + spot[1] > len(data):
            article = "an" if kind == "Image" else "a"
            raise BlendStructureError(f"{code[:2].decode()} block at byte {start} is not {article} {kind}")
        if kind == "Library":
            libs.append(_text(data, spot))
            continue
        source = _field(structs, "Image", sdna, ("source",))
        packed = [_field(structs, "Image", sdna, (f,)) for f in ("*packedfile", "packedfiles")]
        if source is not None and source[0] + 2 <= len(data):
            if struct.unpack_from(order + "h", data, source[0])[0] not in _FILE_SOURCES:
                continue
        if any(p is not None and p[0] + ptr <= len(data) and any(data[p[0]:p[0] + ptr]) for p in packed):
            continue
        whole = id_name is not None and id_name[0] + id_name[1] <= len(data)
        # (an ID name starts with its code, "IM")
        name = _text(data, id_name)[2:] if whole and id_name is not None else "?"
        images.append((name, _text(data, spot)))
    return libs, images


def library_paths(data: bytes) -> list[str]:
    """Paths of the linked libraries (``LI`` blocks) of the (decompressed) .blend ``data``
    as stored (``//`` = relative to the .blend).

    Raises:
        BlendStructureError: the structure is broken (see :func:`_walk`), or no ``DNA1``.
    """
    return _linked_paths(_Expanded(io.BytesIO(data), "raw", None, len(data)))[0]


def image_files(path: str) -> list[str]:
    """The files an image path names: itself, or for a UDIM path (``<UDIM>``,
    ``<UVTILE>``) the tiles that exist."""
    if "<UDIM>" not in path and "<UVTILE>" not in path:
        return [path]
    return sorted(glob.glob(glob.escape(path).replace("<UDIM>", "[0-9]" * 4).replace("<UVTILE>", "u*_v*")))


def check_blend(path: StrPath) -> list[str]:
    """Check the .blend at ``path`` before Blender reads it: a regular file, a sound block
    chain (header, block codes and lengths, ``ENDB``, ``DNA1``; compressed files
    decompressed as the walk goes, within the bounds on their expansion and block count
    in the module's docstring), every linked library a regular file or missing (Blender
    reports a missing one) and every image read from a file (not packed) a regular file
    or missing (Blender's image reader blocks in ``open()`` on a FIFO, while it loads the
    file when a modifier's texture uses the image, or later while the scan reads a
    texture). Memory stays within about :data:`MAX_KEPT` plus zstd's window, whatever the
    file. Returns the libraries' absolute paths ([] unchecked: a zstd file without the
    ``zstandard`` package).

    Raises:
        SettingsError (``SCENE.blend``): naming what is wrong; (``image 'NAME'``): the
        image's file is a FIFO, a device, a folder or a socket.
    """
    p = check_regular_file("SCENE.blend", path)
    try:
        with open(p, "rb") as fh:
            ex = _open(fh, os.fstat(fh.fileno()).st_size)
            if ex is None:  # (no zstd decoder: Blender's reader alone judges the file)
                return []
            try:
                paths, images = _linked_paths(ex)
            except BlendStructureError as exc:
                if ex.kind != "raw" and "decompression bomb" not in str(exc):
                    ex.drain(16 * _CHUNK)  # a stream error found just after is the cause
                raise
    except BlendStructureError as exc:
        raise SettingsError("SCENE.blend", f"a readable .blend file ({exc})", str(path)) from None
    except OSError as exc:
        raise SettingsError("SCENE.blend", f"a readable .blend file ({exc.strerror})", str(path)) from None
    here = p.resolve().parent
    out = []
    for lib in paths:
        full = here / lib[2:] if lib.startswith("//") else Path(lib)
        out.append(str(full))
        if os.path.lexists(full):
            try:
                check_regular_file("library", full)
            except SettingsError as exc:
                raise SettingsError("SCENE.blend", "a .blend whose linked libraries are regular files",
                                    f"{path} (library {exc.value})") from None
    for name, stored in images:
        for f in image_files(str(here / stored[2:]) if stored.startswith("//") else stored):
            try:
                mode = os.stat(f).st_mode
            except (OSError, ValueError):  # missing: the material falls back with a warning
                continue
            if not stat.S_ISREG(mode):
                raise SettingsError(f"image '{name}'", "an image file that is a regular file (or missing)",
                                    f"{f} ({file_kind(mode)})")
    return out
