"""PCD (PCL point cloud format 0.7) writer, binary or ASCII.

Files: ``clean/scan<frame:05d>.pcd`` (ground truth) and ``noisy/scan<frame:05d>.pcd``
(what a real sensor gives), in two folders so a folder loader never mixes them.
Fields: ``x y z intensity ring time label semantic rgb``:
x, y, z float32 m (result frame); intensity float32 (reflectivity x |cos incidence|, 0..1 for
diffuse targets, above 1 for retro-reflectors (reflectivity up to 10);
a Velodyne unit's: the calibrated reflectivity byte its packets carry and
velodyne_pointcloud publishes, ``round(100 x reflectivity)``, :func:`._layouts.xyzirt_intensity`);
ring uint16 elevation rank of the laser, 0 = lowest (as velodyne_pointcloud publishes
it; the npz keeps ``channel``, the calibration index); semantic uint16 class id;
time float32 s since the frame's time ``frame * frame_time``
(float32 cannot hold absolute times to the microsecond; absolute float64 times are in
the npz and EVD files); label uint32 object id; rgb float32 whose bits are the packed
uint32 ``R << 16 | G << 8 | B`` (PCL's convention). ``VIEWPOINT`` holds the sensor pose
when points are in world coordinates. Results of image sensors (ToF, depth camera: the
capabilities' ``organized``, :attr:`ScanResult.is_organized`) give organized clouds:
WIDTH x HEIGHT = the image, row-major from the top row, NaN points where nothing
returned (PCL's convention); other results (and sensors with no grid) unorganized ones.
A result with several returns per beam (settings ``returns`` dual, dual_ouster or
all) adds ``return_number number_of_returns`` (uint8, SIZE 1, TYPE U: the return's 1-based
rank along its beam, nearest first, and the beam's returns, LAS's terms) after ``rgb``;
every return is a point. A result of the radiometric return model adds ``signal`` (float32,
SIZE 4, TYPE F: the received power, 1 = a 100 % Lambertian target at normal incidence at 1 m)
after them, and a Hesai unit's intensity is then its Reflectivity byte, as its driver
publishes it (:func:`._layouts.unit_intensity`). Without them the file is as before (9
fields, 32 bytes a point).
Ouster units (``capabilities.device.vendor == "ouster"``) write ouster-ros's point
layout instead (:mod:`._layouts`: ``x y z intensity t reflectivity ring ambient range``,
packed; then ``label semantic``), organized as the driver publishes it: WIDTH = the
packet's columns (destaggered when the packet is one whole turn), HEIGHT = beams, row u =
beam u (the top beam first), NaN x, y, z where nothing returned; ``t`` uint32 ns since the
packet's start (a sweep's first column). PCL reads it into ``ouster_ros::Point``. A
multi-return Ouster result keeps one return a cell, each beam's strongest, as ouster-ros's
first-return cloud (its second returns go to a cloud of their own, ``points2``, which a PCD
file does not hold; the npz, PLY and LAS hold every return).
The original wrote ASCII only, with fields ``x y z rgb label`` (reference section 10.2);
clean and ``_noisy`` files are kept. World coordinates are float32: a world-frame scan
far from the origin (float32 rounding over 1 mm, from 32 km) is warned about once per run.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.axes import quaternion_xyzw
from ...core.result import ScanResult
from ...core.settings import setting
from ._base import Float32Warning, Records, RunInfo, Writer, clean_and_noisy
from ..packets import has_returns
from ._layouts import is_ouster, ouster_cloud, unit_intensity

PCD_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"),
                      ("ring", "<u2"), ("time", "<f4"), ("label", "<u4"), ("semantic", "<u2"), ("rgb", "<f4")])
#: :data:`PCD_DTYPE` with the return fields of a multi-return result (34 bytes a point)
PCD_RETURNS_DTYPE = np.dtype(PCD_DTYPE.descr + [("return_number", "u1"), ("number_of_returns", "u1")])


def pcd_records(result: ScanResult, noisy: bool = False) -> Records:
    """Structured (N,) array of dtype :data:`PCD_DTYPE` (:data:`PCD_RETURNS_DTYPE` for a
    result with several returns per beam)."""
    returns = has_returns(result)
    signal = result.extra.get("signal")
    dtype = PCD_RETURNS_DTYPE if returns else PCD_DTYPE
    if signal is not None:
        dtype = np.dtype(dtype.descr + [("signal", "<f4")])
    rec = np.empty(len(result), dtype=dtype)
    if returns:
        rec["return_number"] = result.return_number
        rec["number_of_returns"] = result.number_of_returns
    if signal is not None:
        rec["signal"] = signal
    pts = result.xyz_noisy if noisy else result.xyz
    rec["x"], rec["y"], rec["z"] = pts[:, 0], pts[:, 1], pts[:, 2]
    unit = unit_intensity(result)
    rec["intensity"] = unit if unit is not None else result.intensity
    rec["ring"] = result.ring
    rec["time"] = result.timestamp - result.frame * result.frame_time
    rec["label"] = result.object_id
    rec["semantic"] = result.semantic
    c = result.color.astype(np.uint32)
    rec["rgb"] = ((c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]).view(np.float32)
    if result.is_organized:
        rows, cols = result.grid_shape
        full = np.zeros(rows * cols, dtype=rec.dtype)
        for k in ("x", "y", "z", "intensity"):
            full[k] = np.nan
        assert result.ray_index is not None  # an organized result has a grid
        full[result.ray_index.astype(np.int64)] = rec
        return full
    return rec


#: the PCD fields of an Ouster unit's cloud: ouster-ros's Point, then the labels
OUSTER_PCD = (("x", "F", 4), ("y", "F", 4), ("z", "F", 4), ("intensity", "F", 4), ("t", "U", 4),
              ("reflectivity", "U", 2), ("ring", "U", 2), ("ambient", "U", 2), ("range", "U", 4),
              ("label", "U", 4), ("semantic", "U", 2))


def ouster_records(result: ScanResult, noisy: bool = False) -> Records:
    """(H * W,) packed records of :data:`OUSTER_PCD` (see the module docstring): the
    ouster-ros cloud of the result's points (its frame and axes)."""
    pts = result.xyz_noisy if noisy else result.xyz
    start = float(result.frame * result.frame_time)
    _, rec, _, _ = ouster_cloud(result, np.asarray(pts, dtype=np.float64), start, noisy, labels=True)
    dtype = np.dtype([(n, "<f4" if t == "F" else f"<u{size}") for n, t, size in OUSTER_PCD])
    out = np.empty(rec.shape[0], dtype)
    for n, _, _ in OUSTER_PCD:
        out[n] = rec[{"label": "object_id"}.get(n, n)]
    return out


def pcd_bytes(result: ScanResult, noisy: bool = False, binary: bool = True) -> bytes:
    """The whole PCD file as bytes."""
    ouster = is_ouster(result)
    if ouster:
        rec = ouster_records(result, noisy)
        names = [f[0] for f in OUSTER_PCD]
        sizes, types = [str(f[2]) for f in OUSTER_PCD], [f[1] for f in OUSTER_PCD]
        height, width = result.grid_shape
    else:
        rec = pcd_records(result, noisy)
        names = ["x", "y", "z", "intensity", "ring", "time", "label", "semantic", "rgb"]
        sizes, types = "4 4 4 4 2 4 4 2 4".split(), "F F F F U F U U F".split()
        if has_returns(result):
            names += ["return_number", "number_of_returns"]
            sizes, types = sizes + ["1", "1"], types + ["U", "U"]
        if "signal" in result.extra:
            names, sizes, types = names + ["signal"], sizes + ["4"], types + ["F"]
        width, height = (result.grid_shape[1], result.grid_shape[0]) if result.is_organized else (len(rec), 1)
    if result.frame_of_reference == "world":
        T = result.sensor_to_world
        x, y, z, w = quaternion_xyzw(T[:3, :3])
        vp = (*(float(v) for v in T[:3, 3]), w, x, y, z)  # PCD VIEWPOINT: tx ty tz qw qx qy qz
    else:
        vp = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    n = len(rec)
    header = (
        "# .PCD v0.7 - Point Cloud Data file format\n"
        "VERSION 0.7\n"
        f"FIELDS {' '.join(names)}\n"
        f"SIZE {' '.join(sizes)}\n"
        f"TYPE {' '.join(types)}\n"
        f"COUNT {' '.join('1' for _ in names)}\n"
        f"WIDTH {width}\n"
        f"HEIGHT {height}\n"
        "VIEWPOINT " + " ".join(f"{v:.9g}" for v in vp) + "\n"
        f"POINTS {n}\n"
        f"DATA {'binary' if binary else 'ascii'}\n"
    ).encode("ascii")
    if binary:
        return header + rec.tobytes()
    buf = io.StringIO()
    if ouster:
        # floats with 9 significant digits round-trip float32 exactly
        fmt = " ".join("%.9g" if t == "F" else "%d" for t in types) + "\n"
        for row in zip(*(rec[k].tolist() for k in names)):
            buf.write(fmt % row)
        return header + buf.getvalue().encode("ascii")
    rgb_bits = rec["rgb"].view(np.uint32)
    cols = [rec["x"], rec["y"], rec["z"], rec["intensity"], rec["ring"], rec["time"], rec["label"],
            rec["semantic"]]
    # floats with 9 significant digits round-trip float32 exactly; rgb as its float value
    fmt = "%.9g %.9g %.9g %.9g %d %.9g %d %d %.9g"
    more = []
    if "return_number" in (rec.dtype.names or ()):
        fmt += " %d %d"
        more = [rec["return_number"].tolist(), rec["number_of_returns"].tolist()]
    if "signal" in (rec.dtype.names or ()):
        fmt += " %.9g"
        more.append(rec["signal"].tolist())
    fmt += "\n"
    for row in zip(*(c.tolist() for c in cols), rgb_bits.view(np.float32).tolist(), *more):
        buf.write(fmt % row)
    return header + buf.getvalue().encode("ascii")


@dataclass(frozen=True)
class PcdOptions:
    """Options of the PCD writer: ``ascii`` (ASCII instead of binary data)."""

    ascii: bool = setting(False, "ASCII PCD", "Write ASCII instead of binary PCD data")


class PcdWriter(Writer):
    """``clean/scan<frame>.pcd`` and ``noisy/scan<frame>.pcd`` per frame (:func:`pcd_bytes`)."""

    name = "pcd"
    description = "PCL point clouds (binary or ASCII), clean and noisy in two folders"
    files = "clean/scan<frame:05d>.pcd, noisy/scan<frame:05d>.pcd"
    outputs = (r"(clean|noisy)/scan\d+\.pcd",)
    Options = PcdOptions
    options: PcdOptions

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._float32 = Float32Warning(self.name)

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        self._float32.check(result)
        return clean_and_noisy(result, "pcd", lambda noisy: pcd_bytes(result, noisy, not self.options.ascii))


WRITER = PcdWriter
