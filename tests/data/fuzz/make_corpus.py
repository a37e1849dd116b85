"""The fuzz corpus of the ``blensor`` command: hostile input files, each with the command
that reads it and the exit codes allowed (stdlib and numpy only; no Blender).

Each :class:`Entry` writes its files into its own folder (``Entry.make``) and names the
command line run there (``Entry.command``): 2 for bad input (one line
``blensor: error: ...`` on stderr), 0 where the input is valid after all, 1 only where a
real run failure is the right answer. ``tests/test_fuzz_corpus.py`` runs every entry
through the real command with a time and a memory bound.

What the corpus holds (what hostile testers tried):

- Project AirSim JSON (``scan --sensor``, ``config import airsim``): integers of 400 and
  5000 digits, nesting 5,000 and 100,000 deep, 200,000 keys in one object, a rotation
  frequency of 1e-300 Hz, sensor names that collide once made safe (``a-b``/``a_b``,
  ``éé``/``üü``), names with terminal escape sequences, a 300-character name, poses at
  1e300 m and at 1e30 m (the latter with ``--overwrite`` over an earlier run, which must
  stay), NaN, garbage, a FIFO.
- Unity XML: nesting 3,000 and 100,000 deep, an external entity (XXE), entity expansion
  ("billion laughs"), a MEMS pattern path to a missing file and to ``/etc/passwd``.
- Calibration files (``calib import``): Velodyne YAML (nesting 100,000 deep, a 400-digit
  ``num_lasers``, YAML tags that would run code, an alias bomb), db.xml (XXE, billion
  laughs, deep nesting, a 400-digit id), Ouster JSON (400- and 5000-digit integers, deep
  nesting), Hesai CSV (garbage, NaN, huge numbers), a FIFO.
- Pattern files (``--set sensor_type=pattern``): a CSV with a UTF-8 BOM and CRLF lines
  (valid: exit 0), bad columns, NaN, absurd periods, 10,000 firings in the shortest
  period (1e8 rays a second: 20,000 packets in the demo's 2 s), a huge channel, a FIFO;
  .npy of object dtype (a pickle that would run code), of the wrong shape, truncated.
- .blend files (``info``): truncated, garbage, byte-flipped, header only, and zstd and
  gzip bombs that expand to 2 GiB of zeros, as empty blocks or as one well-formed block
  (written as streams of repeated compressed blocks: 65 KB and 2 MB on disk, generated
  in about a second).
- ``--scheduler``: files holding garbage, ``{}``, a number, an array, no address, a FIFO;
  a ``ucx://`` address.
- ``--set`` values: ``rotation_speed`` 1e-9, NaN, inf, 1e308; ``angle_resolution``
  1e-6; a 22-digit seed.
- Output folders: ``manifest.json``, ``motion.json`` and ``rig.json`` nested 100,000
  deep planted in ``--out``; a manifest that lists an absolute path outside the folder
  (that file must stay); files of BlenSor's names that the planted manifest does not
  list, with ``--overwrite`` (they must stay); FIFOs at ``manifest.json``, ``motion.json``
  and as ``--out`` itself; ``--out`` in an operating system's folder; a FIFO as the
  target of ``config export``, a device node too; FIFOs where a motion export and a depth
  export write.

Run as a script to write the whole corpus (or the named entries) into a folder, with
``corpus.json`` listing each entry's folder, command line and allowed exit codes::

    python tests/data/fuzz/make_corpus.py OUT_DIR [NAME ...]
"""
from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import stat
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[3]
SCENES = REPO / "scenes"
CALIB = REPO / "tests" / "data" / "calib"
#: bytes a decompression bomb expands to
BOMB_SIZE = 2 << 30


@dataclass(frozen=True)
class Entry:
    """One corpus case.

    name: a short identifier (a folder name). args: the ``blensor`` arguments, with
    ``{dir}`` for the entry's folder and ``{scenes}`` for the repository's ``scenes/``.
    make: writes the entry's files into its (existing, empty) folder. exits: the exit
    codes allowed. says: text the error line must contain ("" for none). keep: paths
    (relative to the folder) that must be unchanged whatever the exit code (with exit 2
    every file of the folder must be).
    """
    name: str
    args: str
    make: Callable[[Path], None]
    exits: tuple[int, ...] = (2,)
    says: str = ""
    keep: tuple[str, ...] = field(default=())

    def command(self, folder: Path) -> list[str]:
        """The argument list (after ``blensor``) for the entry written in ``folder``."""
        return [a.format(dir=folder, scenes=SCENES) for a in shlex.split(self.args)]


ENTRIES: list[Entry] = []


def _add(name: str, args: str, *makers: Callable[[Path], None], exits=(2,), says: str = "",
         keep=()) -> None:
    def make(folder: Path) -> None:
        for m in makers:
            m(folder)
    ENTRIES.append(Entry(name, args, make, tuple(exits), says, tuple(keep)))


# -- writers of the entries' files ----------------------------------------------------------


def put(name: str, data: bytes | str | Callable[[Path], bytes | str]) -> Callable[[Path], None]:
    """A maker writing ``data`` (or ``data(folder)``) to ``folder/name`` (str: UTF-8)."""
    def make(folder: Path) -> None:
        d = data(folder) if callable(data) else data
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(d.encode("utf-8") if isinstance(d, str) else d)
    return make


def fifo(name: str) -> Callable[[Path], None]:
    """A maker of a FIFO at ``folder/name`` (nobody ever writes to it)."""
    def make(folder: Path) -> None:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(folder / name)
    return make


def device(name: str) -> Callable[[Path], None]:
    """A maker of a character device like ``/dev/null`` (1, 3) at ``folder/name``; where
    the process may not make device nodes (not root), a FIFO stands in for it."""
    def make(folder: Path) -> None:
        try:
            os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            os.mkfifo(folder / name)
    return make


def scene_copy(folder: Path) -> None:
    """The demo scene as ``folder/scene.blend`` (commands that save the .blend in place)."""
    shutil.copyfile(SCENES / "crossing.blend", folder / "scene.blend")


def garbage(n: int, seed: int) -> bytes:
    """``n`` seeded random bytes."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def digits(n: int) -> str:
    """A positive integer of ``n`` decimal digits."""
    return "9" * n


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "") -> str:
    """``inner`` nested ``depth`` deep."""
    return open_ * depth + inner + close * depth


def planted_run(folder: Path, out: str = "out") -> None:
    """An earlier (complete) range scan in ``folder/out``: a manifest of one frame and its
    file, as ``--overwrite`` would delete them once the new run can start."""
    o = folder / out
    o.mkdir(parents=True, exist_ok=True)
    np.savez(o / "scan00000.npz", x=np.arange(3.0))
    (o / "trajectory.tum").write_text("0.0 0 0 0 0 0 0 1\n")
    man = {"blensor_version": "0.1.0", "status": "complete", "formats": ["npz"], "files": [],
           "camera": "lidar1", "frames": [{"frame": 0, "files": ["scan00000.npz"]}]}
    (o / "manifest.json").write_text(json.dumps(man))


# -- Project AirSim JSON ----------------------------------------------------------------


def airsim(*sensors: dict, **top) -> str:
    """A Project AirSim config of ``sensors`` (each a generic cylindrical lidar updated by
    the dict given) and ``top`` (more top-level keys)."""
    base = {"type": "lidar", "lidar-type": "generic_cylindrical", "number-of-channels": 4,
            "range": 50, "points-per-second": 20000, "horizontal-rotation-frequency": 10,
            "origin": {"xyz": "0 0 -2", "rpy-deg": "0 0 0"}}
    return json.dumps({"sensors": [{**base, "id": f"l{i}", **s} for i, s in enumerate(sensors)], **top},
                      ensure_ascii=False)


def airsim_text(replace: dict[str, str], *sensors: dict) -> Callable[[Path], str]:
    """:func:`airsim` text with placeholders replaced by raw JSON text (numbers json.dumps
    cannot write: 400 digits, nesting)."""
    def text(_folder: Path) -> str:
        t = airsim(*sensors)
        for k, v in replace.items():
            t = t.replace(json.dumps(k), v)
        return t
    return text


SENSOR = "scan {scenes}/crossing.blend --sensor {dir}/%s --frames 1 --out {dir}/out"
IMPORT = "config import %s {dir}/%s {dir}/scene.blend"

_add("airsim_int_400_digits", SENSOR % "s.json",
     put("s.json", airsim_text({"@N": digits(400)}, {"number-of-channels": "@N"})))
_add("airsim_int_400_digits_range", IMPORT % ("airsim", "s.json"), scene_copy,
     put("s.json", airsim_text({"@R": digits(400)}, {"range": "@R"})))
_add("airsim_int_5000_digits", SENSOR % "s.json",
     put("s.json", airsim_text({"@N": digits(5000)}, {"points-per-second": "@N"})))
_add("airsim_int_5000_digits_import", IMPORT % ("airsim", "s.json"), scene_copy,
     put("s.json", airsim_text({"@N": digits(5000)}, {"number-of-channels": "@N"})))
_add("airsim_nested_5000", SENSOR % "s.json",
     put("s.json", airsim_text({"@D": nested(5000)}, {"radial-scaling": "@D"})))
_add("airsim_nested_100000_import", IMPORT % ("airsim", "s.json"), scene_copy,
     put("s.json", nested(100_000, "{\"a\":", "}", "1")))
_add("airsim_nested_100000_sensor", SENSOR % "s.json", put("s.json", nested(100_000)))
_add("airsim_200000_keys", SENSOR % "s.json",
     put("s.json", "{" + ",".join(f'"k{i}":0' for i in range(200_000)) + "}"))
_add("airsim_rotation_1e-300", SENSOR % "s.json",
     put("s.json", airsim({"horizontal-rotation-frequency": 1e-300})), says="horizontal-rotation-frequency")
_add("airsim_names_collide_ascii", SENSOR % "s.json", put("s.json", airsim({"id": "a-b"}, {"id": "a_b"})))
_add("airsim_names_collide_unicode", SENSOR % "s.json", put("s.json", airsim({"id": "éé"}, {"id": "üü"})))
_add("airsim_names_escapes", SENSOR % "s.json",
     put("s.json", airsim({"id": "\x1b]0;owned\x07\x1b[31mred\r\nline"})), exits=(0, 2))
_add("airsim_pose_1e300", SENSOR % "s.json", put("s.json", airsim({"origin": {"xyz": "1e300 0 0"}})))
_add("airsim_pose_1e30_overwrite", (SENSOR + " --overwrite") % "s.json",
     put("s.json", airsim({"id": "lidar1", "origin": {"xyz": "1e30 0 0", "rpy-deg": "0 0 0"}})),
     planted_run)
_add("airsim_nan_range", SENSOR % "s.json", put("s.json", airsim({"range": float("nan")})))
_add("airsim_garbage", SENSOR % "s.json", put("s.json", garbage(4096, 1)))
_add("airsim_number", SENSOR % "s.json", put("s.json", "1e999"))
_add("airsim_array_import", IMPORT % ("airsim", "s.json"), scene_copy, put("s.json", "[]"))
_add("airsim_empty_file", SENSOR % "s.json", put("s.json", ""))
_add("airsim_fifo", SENSOR % "s.json", fifo("s.json"))
_add("airsim_long_name", SENSOR % "s.json", put("s.json", airsim({"id": "n" * 300})), exits=(0, 2))

# -- Unity XML ----------------------------------------------------------------------------


def unity(body: str, doctype: str = "") -> str:
    """A Unity lidar (raytraced) whose ``<ray>`` is ``body``."""
    return (f'<?xml version="1.0"?>{doctype}<sensor type="raytracedlidar" name="l"><update_rate>10'
            f"</update_rate>{body}</sensor>")


UNITY_RAY = ("<ray><scan><horizontal><samples>{n}</samples><min_angle>-1.57</min_angle><max_angle>1.57"
             "</max_angle></horizontal><vertical><samples>1</samples><min_angle>0</min_angle><max_angle>0"
             "</max_angle></vertical></scan><range><min>0.1</min><max>{r}</max></range></ray>")
LAUGHS = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
LAUGHS = '<!DOCTYPE s [<!ENTITY l0 "lol">' + LAUGHS + "]>"


def mems(path: str) -> str:
    """A Unity MEMS lidar whose pattern file is ``path``."""
    return unity("<movement_technology>MEMS</movement_technology><ray><scan><pattern><file>" + path
                 + "</file><period>0.1</period></pattern></scan><range><max>50</max></range></ray>")


_add("unity_nested_3000", SENSOR % "s.xml", put("s.xml", unity(nested(3000, "<a>", "</a>"))))
_add("unity_nested_100000_import", IMPORT % ("unity", "s.xml"), scene_copy,
     put("s.xml", unity(nested(100_000, "<a>", "</a>"))))
_add("unity_xxe", SENSOR % "s.xml",
     put("s.xml", unity(UNITY_RAY.format(n="&x;", r=15),
                        '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]>')), exits=(2,))
_add("unity_billion_laughs", IMPORT % ("unity", "s.xml"), scene_copy,
     put("s.xml", unity(UNITY_RAY.format(n=15, r=15) + "<topic>&l9;</topic>", LAUGHS)))
_add("unity_mems_missing_pattern", SENSOR % "s.xml", put("s.xml", mems("/nonexistent/pattern.csv")))
_add("unity_mems_etc_passwd", SENSOR % "s.xml", put("s.xml", mems("/etc/passwd")))
_add("unity_int_400_digits", SENSOR % "s.xml", put("s.xml", unity(UNITY_RAY.format(n=digits(400), r=15))))
_add("unity_garbage", SENSOR % "s.xml", put("s.xml", garbage(4096, 2)))

# -- calibration files ------------------------------------------------------------------------

CALIB_IMPORT = "calib import {dir}/%s {dir}/scene.blend"


def velodyne_yaml(n: int = 2, extra: str = "") -> str:
    """A Velodyne ROS calibration of ``n`` lasers, ``extra`` appended (top-level keys)."""
    lasers = "".join(f"- {{laser_id: {i}, rot_correction: 0.0, vert_correction: {0.01 * i}}}\n"
                     for i in range(n))
    return f"lasers:\n{lasers}num_lasers: {n}\n{extra}"


_add("yaml_nested_100000", CALIB_IMPORT % "c.yaml", scene_copy, put("c.yaml", nested(100_000)))
_add("yaml_nested_100000_mapping", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", nested(100_000, "{a: ", "}", "1")))
_add("yaml_num_lasers_400_digits", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", velodyne_yaml().replace("num_lasers: 2", "num_lasers: " + digits(400))))
_add("yaml_python_tag", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", lambda d: velodyne_yaml(
         extra=f'x: !!python/object/apply:os.system ["touch {d}/owned"]\n')))
_add("yaml_unknown_tag", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", velodyne_yaml().replace("lasers:\n", "lasers: !custom\n")))
_add("yaml_alias_bomb", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
         + velodyne_yaml()), exits=(0, 2))
_add("yaml_nan", CALIB_IMPORT % "c.yaml", scene_copy,
     put("c.yaml", velodyne_yaml().replace("vert_correction: 0.0", "vert_correction: .nan")))
_add("yaml_garbage", CALIB_IMPORT % "c.yaml", scene_copy, put("c.yaml", garbage(4096, 3)))


def dbxml(body_of_id: str = "0", doctype: str = "") -> str:
    """A two-laser Velodyne db.xml, the first laser's ``id_`` text ``body_of_id``."""
    items = "".join(f"<item><px><id_>{body_of_id if i == 0 else i}</id_><rotCorrection_>0</rotCorrection_>"
                    f"<vertCorrection_>{i}</vertCorrection_></px></item>" for i in range(2))
    return (f'<?xml version="1.0"?>{doctype}<boost_serialization><DB><distLSB_>0.2</distLSB_>'
            f"<points_><count>2</count>{items}</points_></DB></boost_serialization>")


_add("dbxml_xxe", CALIB_IMPORT % "db.xml", scene_copy,
     put("db.xml", dbxml("&x;", '<!DOCTYPE b [<!ENTITY x SYSTEM "file:///etc/passwd">]>')))
_add("dbxml_billion_laughs", CALIB_IMPORT % "db.xml", scene_copy, put("db.xml", dbxml("&l9;", LAUGHS)))
_add("dbxml_nested_100000", CALIB_IMPORT % "db.xml", scene_copy,
     put("db.xml", dbxml("0" + nested(100_000, "<a>", "</a>"))), exits=(0, 2))
_add("dbxml_id_400_digits", CALIB_IMPORT % "db.xml", scene_copy, put("db.xml", dbxml(digits(400))))


def ouster(old: str, new: str) -> Callable[[Path], str]:
    """The repository's OS1-64 metadata with the first ``old`` replaced by ``new``."""
    def text(_folder: Path) -> str:
        t = (CALIB / "2_1_2_os1-991913000010-64.json").read_text()
        assert old in t, old
        return t.replace(old, new, 1)
    return text


_add("ouster_int_400_digits", CALIB_IMPORT % "m.json", scene_copy,
     put("m.json", ouster("16.729", digits(400))))
_add("ouster_int_5000_digits", CALIB_IMPORT % "m.json", scene_copy,
     put("m.json", ouster("16.729", digits(5000))))
_add("ouster_nested_100000", CALIB_IMPORT % "m.json", scene_copy,
     put("m.json", ouster("16.729", nested(100_000))))
_add("hesai_garbage", CALIB_IMPORT % "h.csv", scene_copy, put("h.csv", garbage(4096, 4)))
_add("hesai_nan_inf", CALIB_IMPORT % "h.csv", scene_copy,
     put("h.csv", "Channel,Elevation,Azimuth\n1,nan,0\n2,inf,-inf\n"))
_add("hesai_huge_numbers", CALIB_IMPORT % "h.csv", scene_copy,
     put("h.csv", f"Channel,Elevation,Azimuth\n{digits(400)},1e308,0\n2,{digits(5000)},0\n"))
_add("calib_fifo", CALIB_IMPORT % "h.csv", scene_copy, fifo("h.csv"))

# -- pattern files ------------------------------------------------------------------------------

PATTERN = ("scan {scenes}/crossing.blend --frames 1 --set sensor_type=pattern "
           "--set pattern_file={dir}/%s --out {dir}/out")
PATTERN_ROWS = "".join(f"{a},0,{0.001 * i},0\n" for i, a in enumerate(range(-40, 41, 2)))


def pattern_csv(period: str = "0.1", header: str = "azimuth_deg,elevation_deg,time_s,channel",
                rows: str = PATTERN_ROWS) -> str:
    """A pattern CSV: the ``# period_s`` line, the header and ``rows``."""
    return f"# period_s: {period}\n{header}\n{rows}"


_add("pattern_bom_crlf", PATTERN % "p.csv",
     put("p.csv", b"\xef\xbb\xbf" + pattern_csv().replace("\n", "\r\n").encode()), exits=(0,))
_add("pattern_bad_columns", PATTERN % "p.csv",
     put("p.csv", pattern_csv(header="azimuth_deg,elevation_deg,time_s,channel,bogus")))
_add("pattern_nan", PATTERN % "p.csv", put("p.csv", pattern_csv(rows="nan,0,0,0\n1,inf,0.01,0\n")))
_add("pattern_period_1e-300", PATTERN % "p.csv", put("p.csv", pattern_csv(period="1e-300")))
_add("pattern_period_400_digits", PATTERN % "p.csv", put("p.csv", pattern_csv(period=digits(400))))
_add("pattern_channel_400_digits", PATTERN % "p.csv",
     put("p.csv", pattern_csv(rows=f"0,0,0,{digits(400)}\n")))
# 10,000 firings in the shortest period (1e-4 s): 1e8 rays a second (40 times the fastest
# real units' 2.6 million points a second), 20,000 packets in the demo's 2 s: about 5 minutes
# of scanning on 2 cores, though every packet is within the ray budget
_add("pattern_many_periods", PATTERN.replace("--frames 1", "--frames 1-48") % "p.csv",
     put("p.csv", pattern_csv(period="0.0001", rows="".join(f"{i % 360 - 180},0,{i * 1e-8:.8f},0\n"
                                                             for i in range(10_000)))), exits=(2,),
     says="rays a second")
_add("pattern_fifo", PATTERN % "p.csv", fifo("p.csv"))


class _Owned:
    """Pickled as a call of ``os.system`` (what loading an object .npy with pickles would run)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(self.path)}",)


def npy_object(folder: Path) -> bytes:
    """An object-dtype .npy whose pickle, if loaded, creates ``folder/owned``."""
    arr = np.empty((1, 4), dtype=object)
    arr[0, 0] = _Owned(str(folder / "owned"))
    path = folder / "tmp_object.npy"
    np.save(path, arr, allow_pickle=True)
    data = path.read_bytes()
    path.unlink()
    return data


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as the bytes of a .npy file."""
    import io
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


PATTERN_NPY = PATTERN.replace("--set pattern_file", "--set pattern_period=0.1 --set pattern_file")
_add("npy_object_dtype", PATTERN_NPY % "p.npy", put("p.npy", npy_object))
_add("npy_wrong_shape", PATTERN_NPY % "p.npy", put("p.npy", npy_bytes(np.zeros((4, 5)))))
_add("npy_truncated", PATTERN_NPY % "p.npy", put("p.npy", npy_bytes(np.zeros((100, 4)))[:200]))

# -- .blend files -------------------------------------------------------------------------------

BLEND_HEADER = b"BLENDER17-01v0500"  # Blender 5.0's header: 64-bit block headers follow
INFO = "info {dir}/%s"


def zstd_bomb(prefix: bytes, size: int = BOMB_SIZE, suffix: bytes = b"") -> bytes:
    """One zstd frame (RFC 8878) of ``prefix``, ``size`` zero bytes and ``suffix``: raw
    blocks around RLE blocks of 128 KiB (4 bytes each on disk), without a content size
    or checksum."""
    def block(last: int, kind: int, n: int) -> bytes:  # 3-byte block header: last, type, size
        return struct.pack("<I", (n << 3) | (kind << 1) | last)[:3]
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out += bytes([0x00, 0x38])  # frame header: no content size; window descriptor 2^17 bytes
    out += block(0, 0, len(prefix)) + prefix
    step = 1 << 17
    n = size // step
    for i in range(n):
        out += block(int(i == n - 1 and not suffix), 1, step) + b"\0"
    if suffix:
        out += block(1, 0, len(suffix)) + suffix
    return bytes(out)


def gzip_bomb(prefix: bytes, size: int = BOMB_SIZE, suffix: bytes = b"") -> bytes:
    """A gzip member (RFC 1952) of ``prefix``, ``size`` zero bytes (a multiple of 1 MiB)
    and ``suffix``: the deflate output of 1 MiB of zeros after a full flush is the same
    bytes every time, so it is made once and repeated (about 1 KB per MiB)."""
    mib = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    chunk = c.compress(bytes(mib)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(suffix) + c.flush()
    crc = zlib.crc32(prefix)
    zeros = bytes(16 * mib)
    for _ in range(size // len(zeros)):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(bytes(size % len(zeros)), crc)
    crc = zlib.crc32(suffix, crc)
    trailer = struct.pack("<II", crc, (len(prefix) + size + len(suffix)) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head + chunk * (size // mib) + tail + trailer


def block_header(code: bytes, length: int) -> bytes:
    """A Blender 5.0 block header (code, SDNA index, old address, length, count)."""
    return struct.pack("<4siQqq", code, 0, 0, length, 1)


#: a .blend whose one DATA block holds the bomb's zeros, then ENDB: a well-formed chain
#: of 2 GiB (what a check that walks the blocks must stream through or refuse by size)
BLOCK_BOMB = (BLEND_HEADER + block_header(b"DATA", BOMB_SIZE), block_header(b"ENDB", 0))


def flipped(seed: int, n: int) -> Callable[[Path], bytes]:
    """BlenSor 0.1's saved scene (``tests/data/v01_scene.blend``, uncompressed: the
    flips reach Blender's reader, not a decompressor) with ``n`` seeded bytes past its
    header replaced at random."""
    def data(_folder: Path) -> bytes:
        blob = bytearray((REPO / "tests" / "data" / "v01_scene.blend").read_bytes())
        rng = random.Random(seed)
        for _ in range(n):
            blob[rng.randrange(12, len(blob))] = rng.randrange(256)
        return bytes(blob)
    return data


_add("blend_truncated", INFO % "t.blend",
     put("t.blend", lambda _d: (SCENES / "crossing.blend").read_bytes()[:50_000]))
_add("blend_garbage", INFO % "g.blend", put("g.blend", garbage(65536, 5)))
_add("blend_garbage_after_header", INFO % "g.blend", put("g.blend", BLEND_HEADER + garbage(65536, 6)))
_add("blend_header_only", INFO % "h.blend", put("h.blend", BLEND_HEADER))
_add("blend_header_only_old", INFO % "h.blend", put("h.blend", b"BLENDER-v405"))
for _seed, _n in ((1, 1), (2, 1), (3, 8)):
    _add(f"blend_flipped_{_seed}_{_n}", INFO % "f.blend", put("f.blend", flipped(_seed, _n)), exits=(0, 2))
_add("blend_zstd_bomb", INFO % "z.blend", put("z.blend", lambda _d: zstd_bomb(BLEND_HEADER)))
_add("blend_zstd_bomb_one_block", INFO % "z.blend",
     put("z.blend", lambda _d: zstd_bomb(BLOCK_BOMB[0], suffix=BLOCK_BOMB[1])))
_add("blend_gzip_bomb_one_block", INFO % "z.blend",
     put("z.blend", lambda _d: gzip_bomb(BLOCK_BOMB[0], suffix=BLOCK_BOMB[1])))
_add("blend_zstd_bomb_scan", "scan {dir}/z.blend --frames 1 --out {dir}/out",
     put("z.blend", lambda _d: zstd_bomb(BLOCK_BOMB[0], suffix=BLOCK_BOMB[1])))

# -- --scheduler ------------------------------------------------------------------------------

SCHED = "scan {scenes}/crossing.blend --scheduler %s --frames 1 --out {dir}/out"
_add("scheduler_garbage", SCHED % "{dir}/s.json", put("s.json", garbage(2048, 7)))
_add("scheduler_empty_object", SCHED % "{dir}/s.json", put("s.json", "{}"))
_add("scheduler_number", SCHED % "{dir}/s.json", put("s.json", "8786"))
_add("scheduler_array", SCHED % "{dir}/s.json", put("s.json", '["tcp://127.0.0.1:1"]'))
_add("scheduler_no_address", SCHED % "{dir}/s.json", put("s.json", '{"type": "Scheduler", "id": "x"}'))
_add("scheduler_fifo", SCHED % "{dir}/s.json", fifo("s.json"))
_add("scheduler_ucx", SCHED % "ucx://127.0.0.1:1", lambda _d: None)

# -- --set values ---------------------------------------------------------------------------------

SET = "scan {scenes}/crossing.blend --frames 1 --set %s --out {dir}/out"
for _name, _value in (("rotation_speed", "1e-9"), ("rotation_speed", "nan"), ("rotation_speed", "inf"),
                      ("rotation_speed", "1e308"), ("angle_resolution", "1e-6"),
                      ("seed", digits(22))):
    _add(f"set_{_name}_{_value[:8]}", SET % f"{_name}={_value}", lambda _d: None, says=_name)

# -- output folders -------------------------------------------------------------------------------

SCAN_OUT = "scan {scenes}/crossing.blend --frames 1 --out {dir}/out"
_add("out_nested_manifest", SCAN_OUT + " --overwrite", put("out/manifest.json", nested(100_000)),
     exits=(0, 2))
_add("out_nested_manifest_resume", SCAN_OUT + " --resume",
     put("out/manifest.json", '{"blensor_version": "0.1.0", "frames": ' + nested(100_000) + "}"),
     exits=(0, 2))
_add("out_nested_motion", "motion {scenes}/crossing.blend --frames 1 --out {dir}/out --overwrite",
     put("out/motion.json", nested(100_000, "{\"a\":", "}", "1")), exits=(0, 2))
_add("out_nested_rig", "scan {scenes}/crossing_rig.blend --all-sensors --frames 1 --out {dir}/out "
     "--overwrite", put("out/rig.json", nested(100_000)), exits=(0, 2))


def manifest_outside(folder: Path) -> str:
    """A complete run's manifest listing ``folder/outside.txt`` (outside ``folder/out``)."""
    return json.dumps({"blensor_version": "0.1.0", "status": "complete", "formats": ["npz"],
                       "files": [str(folder / "outside.txt")], "frames": []})


_add("out_manifest_absolute_path", SCAN_OUT + " --overwrite", put("outside.txt", "not BlenSor's\n"),
     put("out/manifest.json", manifest_outside), exits=(0, 2), keep=("outside.txt",))
_add("out_fifo_manifest_resume", SCAN_OUT + " --resume", fifo("out/manifest.json"))
_add("out_is_fifo", SCAN_OUT, fifo("out"))
# an operating system's folder is refused by rule (one where nothing can be made, should
# the rule be lost: the root or /etc would be written as root)
_add("out_system_folder", "scan {scenes}/crossing.blend --frames 1 --out /proc/blensor_fuzz", lambda _d: None)
_add("out_overwrite_foreign_files", SCAN_OUT + " --overwrite", planted_run,
     put("out/scan00099.npz", b"not listed in the manifest"), put("out/clean/scan77777.pcd", b"nor this"))
_add("out_fifo_motion_overwrite", "motion {scenes}/crossing.blend --frames 1 --out {dir}/out --overwrite",
     fifo("out/motion.json"))
_add("config_export_to_fifo", "config export unity {scenes}/crossing.blend {dir}/c.xml", fifo("c.xml"))
_add("config_export_to_device", "config export unity {scenes}/crossing.blend {dir}/c.sdf", device("c.sdf"))
_add("motion_target_fifo", "motion {scenes}/crossing.blend --frames 1 --out {dir}/out",
     fifo("out/motion.txt"))
_add("depth_target_fifo", "depth {scenes}/crossing_rig.blend --camera Kinect --frames 1 --formats npy "
     "--out {dir}/out", fifo("out/depth00001_range.npy"))


def write_corpus(folder: Path, names=None) -> list[dict]:
    """Write the entries named (default: all) into ``folder/<name>/`` and
    ``folder/corpus.json`` (a list of ``{"name", "dir", "args", "exits", "says", "keep"}``);
    returns that list. Raises KeyError for an unknown name."""
    by_name = {e.name: e for e in ENTRIES}
    chosen = [by_name[n] for n in names] if names else ENTRIES
    out = []
    for e in chosen:
        d = folder / e.name
        d.mkdir(parents=True)
        e.make(d)
        out.append({"name": e.name, "dir": str(d), "args": e.command(d), "exits": list(e.exits),
                    "says": e.says, "keep": list(e.keep)})
    (folder / "corpus.json").write_text(json.dumps(out, indent=1, ensure_ascii=False))
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: make_corpus.py OUT_DIR [NAME ...]")
    write_corpus(Path(sys.argv[1]), sys.argv[2:])
