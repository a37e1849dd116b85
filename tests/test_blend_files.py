"""Hostile .blend files and the files they name, as the ``blensor`` command meets them:
decompression bombs refused in one line within seconds and bounded memory, image
textures whose file is a FIFO refused before Blender opens them."""
from __future__ import annotations

import gzip
import json
import os
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



#: a copy of the demo scene whose materials all take their base colour from one image
#: texture, ``//textures/paint.png`` (relative to the .blend), their reflectivity
#: overrides unset
TEXTURED = """
import bpy, os, sys
import blensor_addon
blensor_addon.register()
bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
img = bpy.data.images.new("Paint", 4, 4)
img.source = "FILE"
img.filepath = "//textures/paint.png"
for mat in bpy.data.materials:
    mat.use_nodes = True
    bsdf = next((n for n in mat.node_tree.nodes if n.type == "BSDF_PRINCIPLED"), None)
    if bsdf is None:
        continue
    mat.blensor.property_unset("reflectivity")
    tex = mat.node_tree.nodes.new("ShaderNodeTexImage")
    tex.image = img
    mat.node_tree.links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[2], relative_remap=False)
os._exit(0)
"""


def test_an_image_texture_whose_file_is_a_fifo_is_refused_before_blender_opens_it(tmp_path):
    # Blender's image reader blocked forever in open() on a FIFO (SIGINT had no effect
    # there); the image's file is checked as other inputs are: a regular file, or missing
    blend = tmp_path / "textured.blend"
    subprocess.run([sys.executable, "-c", TEXTURED, str(CROSSING), str(blend)], check=True, capture_output=True,
                   timeout=120)
    (tmp_path / "textures").mkdir()
    fifo = tmp_path / "textures" / "paint.png"
    os.mkfifo(fifo)
    out = tmp_path / "o"
    res = subprocess.run([BLENSOR, "scan", str(blend), "--frames", "1", "--out", str(out), "--formats", "npz"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == "", (res.returncode, res.stderr)
    assert one_error_line(res) == (f"blensor: error: image 'Paint' must be an image file that is a regular file "
                                   f"(or missing), got '{fifo} (a FIFO)'")
    assert not out.exists()
    res = subprocess.run([BLENSOR, "info", str(blend)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and one_error_line(res).endswith(f"got '{fifo} (a FIFO)'"), res.stderr
    # a folder in its place is refused alike; a missing file is the warning it was
    fifo.unlink()
    fifo.mkdir()
    res = subprocess.run([BLENSOR, "scan", str(blend), "--frames", "1", "--out", str(out), "--formats", "npz"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and one_error_line(res).endswith(f"got '{fifo} (a folder)'"), res.stderr
    fifo.rmdir()
    res = subprocess.run([BLENSOR, "scan", str(blend), "--frames", "1", "--out", str(out), "--formats", "npz",
                          "--quiet"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "image 'Paint' cannot be read (missing file?)" in res.stderr


#: a plane displaced by an image texture (a Displace modifier) whose file is argv[2]:
#: Blender loads that image while it opens the .blend
DISPLACED = """
import bpy, os, sys
bpy.ops.mesh.primitive_plane_add()
img = bpy.data.images.new("Height", 4, 4)
img.source = "FILE"
img.filepath = sys.argv[2]
tex = bpy.data.textures.new("Height", "IMAGE")
tex.image = img
bpy.context.object.modifiers.new("Displace", "DISPLACE").texture = tex
bpy.ops.wm.save_as_mainfile(filepath=sys.argv[1], relative_remap=False)
os._exit(0)
"""


def test_a_modifier_image_whose_file_is_a_fifo_is_refused_before_blender_opens_the_blend(tmp_path):
    # Blender reads a Displace modifier's image while it opens the .blend: a FIFO there
    # blocked open_mainfile itself, so the .blend's images are checked before it is opened
    blend, fifo = tmp_path / "displaced.blend", tmp_path / "height.png"
    subprocess.run([sys.executable, "-c", DISPLACED, str(blend), str(fifo)], check=True, capture_output=True,
                   timeout=120)
    os.mkfifo(fifo)
    for cmd in (["info"], ["scan", "--frames", "1", "--out", str(tmp_path / "o")]):
        res = subprocess.run([BLENSOR, cmd[0], str(blend), *cmd[1:]], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stdout == "", (cmd, res.returncode, res.stderr)
        assert one_error_line(res) == (f"blensor: error: image 'Height' must be an image file that is a regular "
                                       f"file (or missing), got '{fifo} (a FIFO)'")
    assert not (tmp_path / "o").exists()


#: the scene layer's own check, for a scan started from Python or Blender's UI (no
#: command checked the .blend): an image whose file is argv[1]
IMAGE_CACHE = """
import bpy, sys
from blensor_addon.core.errors import SettingsError
from blensor_addon.scene.shading import ImageCache
img = bpy.data.images.new("Paint", 4, 4)
img.source = "FILE"
img.filepath = sys.argv[1]
try:
    print(ImageCache().get(img))
except SettingsError as exc:
    print(exc)
"""


def test_the_image_cache_refuses_a_fifo_before_blender_opens_it(tmp_path):
    fifo = tmp_path / "paint.png"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-c", IMAGE_CACHE, str(fifo)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == (f"image 'Paint' must be an image file that is a regular file (or "
                                           f"missing), got '{fifo} (a FIFO)'")
    fifo.unlink()  # missing: no pixels, the caller's warning
    res = subprocess.run([sys.executable, "-c", IMAGE_CACHE, str(fifo)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and res.stdout.splitlines()[-1] == "None", (res.stdout, res.stderr)
