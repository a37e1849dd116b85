"""Hostile .blend files and the files they name, as the ``blensor`` command meets them:
decompression bombs refused in one line within seconds and bounded memory, image
textures whose file is a FIFO refused before Blender opens them."""
from __future__ import annotations

import gzip
import json
import re
import struct
import subprocess
import sys
import time

import pytest

from conftest import CROSSING
from test_faults import BLENSOR, one_error_line

zstandard = pytest.importorskip("zstandard")

GIB = 1 << 30
#: a process that runs ``blensor ARGS...`` and prints its exit code, stderr and the peak
#: resident memory of the command (ru_maxrss of its children, KiB on Linux) as JSON
MEASURED = ("import json, resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(json.dumps({'rc': r.returncode, 'stderr': r.stderr, 'stdout': r.stdout,\n"
            "                  'peak_kib': peak}))\n")


def measured(*args) -> tuple[subprocess.CompletedProcess, float, int]:
    """(result, seconds, peak resident bytes) of ``blensor ARGS`` run in a fresh process
    (so the peak is this command's alone)."""
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", MEASURED, BLENSOR, *map(str, args)], capture_output=True,
                         text=True, timeout=120)
    seconds = time.monotonic() - t
    assert out.returncode == 0, out.stderr  # (the wrapper itself; a timeout is its traceback)
    r = json.loads(out.stdout)
    res = subprocess.CompletedProcess(args, r["rc"], r["stdout"], r["stderr"])
    return res, seconds, r["peak_kib"] * 1024


def bomb(path, kind: str, prefix: bytes, unit: bytes, size: int) -> None:
    """``prefix`` then ``unit`` repeated to about ``size`` bytes, written to ``path`` as a
    compressed stream (``kind`` zstd or gzip): ``unit`` is compressed once as a frame
    (zstd) or member (gzip) and the frame repeated, so the file is made in well under a
    second while it expands to ``size`` bytes."""
    if kind == "zstd":
        def pack(b):
            return zstandard.ZstdCompressor(level=3).compress(b)
    else:
        def pack(b):
            return gzip.compress(b, compresslevel=9, mtime=0)
    head, frame = pack(prefix), pack(unit)
    with open(path, "wb") as fh:
        fh.write(head)
        for _ in range(size // len(unit)):
            fh.write(frame)


#: a Blender 4.5 header (8-byte pointers, little-endian) and a block header of the
#: 12-byte header's files: code, length, old address, SDNA index, count
HEADER = b"BLENDER-v405"


def block(code: bytes, length: int) -> bytes:
    return struct.pack("<4siQii", code, length, 0, 0, 1)


ZEROS = bytes(64 << 20)
#: (kind, prefix, unit, what the one line says)
BOMBS = {
    # 2 GiB of zeros: a 65 KB zstd file, a 2 MB gzip one
    "zstd_zeros": ("zstd", b"", ZEROS, "no BLENDER header"),
    "gzip_zeros": ("gzip", b"", ZEROS, "no BLENDER header"),
    # a header, then zeros: every 24 bytes an empty block of code 0 (89 million of them)
    "zstd_header_zeros": ("zstd", HEADER, ZEROS, r"the block at byte 12 has no block code \(it reads "
                                                 r"b'\\x00\\x00\\x00\\x00'\)"),
    # a header and a DATA block of 2 GiB - 1 byte of zeros: sound until it expands too far
    "zstd_one_block": ("zstd", HEADER + block(b"DATA", 2 ** 31 - 1), ZEROS,
                       r"its zstd stream expands past 536,870,912 bytes, over 100 times the file's "
                       r"[0-9,]+ bytes on disk: a decompression bomb"),
    "gzip_one_block": ("gzip", HEADER + block(b"DATA", 2 ** 31 - 1), ZEROS,
                       r"its gzip stream expands past 536,870,912 bytes, over 100 times the file's [0-9,]+ "
                       r"bytes on disk: a decompression bomb"),
    # a header and 89 million empty DATA blocks: a sound chain, one block per 24 bytes
    "zstd_empty_blocks": ("zstd", HEADER, block(b"DATA", 0) * (2 << 20),
                          r"over 1,048,576 blocks, more than one per byte of the file's [0-9,]+ on disk: a "
                          r"decompression bomb"),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_decompression_bomb_is_refused_in_one_line_within_seconds_and_bounded_memory(tmp_path, name):
    # a 65 KB zstd .blend (or a 2 MB gzip one) expanding to 2 GiB of zeros took 2 min 20 s
    # and 17.6 GB of memory before its exit 2: the check decompressed the whole file and
    # listed every block in memory; it now streams, with bounds on the expansion and the
    # number of blocks
    kind, prefix, unit, says = BOMBS[name]
    path = tmp_path / f"{name}.blend"
    bomb(path, kind, prefix, unit, 2 * GIB)
    assert path.stat().st_size < 3_000_000
    res, seconds, peak = measured("info", path)
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stderr)
    line = one_error_line(res)
    assert re.fullmatch(rf"blensor: error: SCENE.blend must be a readable .blend file \({says}\), got "
                        rf"'{re.escape(str(path))}'", line), line
    assert seconds < 60 and peak < GIB, (seconds, peak)


def test_the_bounds_leave_blenders_own_files_alone(tmp_path):
    # the demo scene, raw, zstd (as saved) and gzip, and one with a 300 MB block of zeros
    # (under the 512 MiB any compressed file may expand to): each walks to its ENDB
    from blensor_addon.io.blendfile import MIN_EXPANDED, blocks, check_blend, read_blend_bytes
    raw = read_blend_bytes(CROSSING)
    n = len(list(blocks(raw)))
    (tmp_path / "raw.blend").write_bytes(raw)
    (tmp_path / "gzip.blend").write_bytes(gzip.compress(raw))
    for p in (CROSSING, tmp_path / "raw.blend", tmp_path / "gzip.blend"):
        assert check_blend(p) == [], p
    end = raw.rindex(b"ENDB")
    big = 300 << 20
    assert big < MIN_EXPANDED
    with open(tmp_path / "big.blend", "wb") as fh:
        fh.write(zstandard.ZstdCompressor().compress(raw[:end] + block(b"DATA", big)))
        fh.write(zstandard.ZstdCompressor().compress(bytes(big)))
        fh.write(zstandard.ZstdCompressor().compress(raw[end:]))
    assert (tmp_path / "big.blend").stat().st_size < 200_000
    assert check_blend(tmp_path / "big.blend") == []
    assert n > 2000

