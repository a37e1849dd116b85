"""PCD (PCL point cloud format 0.7) writer, binary or ASCII.

Files: ``clean/scan<frame:05d>.pcd`` (ground truth) and ``noisy/scan<frame:05d>.pcd``
(what a real sensor gives), in two folders so a folder loader never mixes them.
Fields: ``x y z intensity ring time label semantic rgb``:
x, y, z float32 m (result frame); intensity float32 (reflectivity x |cos incidence|);
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
The original wrote ASCII only, with fields ``x y z rgb label`` (reference section 10.2);
clean and ``_noisy`` files are kept. World coordinates are float32: a world-frame scan
far from the origin (float32 rounding over 1 mm, from 32 km) is warned about once per run.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from ...core.axes import quaternion_xyzw
from ...core.result import ScanResult
from ...core.settings import setting
from ._base import Float32Warning, Writer, clean_and_noisy

PCD_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"),
                      ("ring", "<u2"), ("time", "<f4"), ("label", "<u4"), ("semantic", "<u2"), ("rgb", "<f4")])


def pcd_records(result: ScanResult, noisy: bool = False) -> np.ndarray:
    """Structured (N,) array of dtype :data:`PCD_DTYPE`."""
    rec = np.empty(len(result), dtype=PCD_DTYPE)
    pts = result.xyz_noisy if noisy else result.xyz
    rec["x"], rec["y"], rec["z"] = pts[:, 0], pts[:, 1], pts[:, 2]
    rec["intensity"] = result.intensity
    rec["ring"] = result.ring
    rec["time"] = result.timestamp - result.frame * result.frame_time
    rec["label"] = result.object_id
    rec["semantic"] = result.semantic
    c = result.color.astype(np.uint32)
    rec["rgb"] = ((c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]).view(np.float32)
    if result.is_organized:
        rows, cols = result.grid_shape
        full = np.zeros(rows * cols, dtype=PCD_DTYPE)
        for k in ("x", "y", "z", "intensity"):
            full[k] = np.nan
        full[result.ray_index.astype(np.int64)] = rec
        return full
    return rec


def pcd_bytes(result: ScanResult, noisy: bool = False, binary: bool = True) -> bytes:
    """The whole PCD file as bytes."""
    rec = pcd_records(result, noisy)
    if result.frame_of_reference == "world":
        T = result.sensor_to_world
        x, y, z, w = quaternion_xyzw(T[:3, :3])
        vp = (*(float(v) for v in T[:3, 3]), w, x, y, z)  # PCD VIEWPOINT: tx ty tz qw qx qy qz
    else:
        vp = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    n = len(rec)
    width, height = (result.grid_shape[1], result.grid_shape[0]) if result.is_organized else (n, 1)
    header = (
        "# .PCD v0.7 - Point Cloud Data file format\n"
        "VERSION 0.7\n"
        "FIELDS x y z intensity ring time label semantic rgb\n"
        "SIZE 4 4 4 4 2 4 4 2 4\n"
        "TYPE F F F F U F U U F\n"
        "COUNT 1 1 1 1 1 1 1 1 1\n"
        f"WIDTH {width}\n"
        f"HEIGHT {height}\n"
        "VIEWPOINT " + " ".join(f"{v:.9g}" for v in vp) + "\n"
        f"POINTS {n}\n"
        f"DATA {'binary' if binary else 'ascii'}\n"
    ).encode("ascii")
    if binary:
        return header + rec.tobytes()
    buf = io.StringIO()
    rgb_bits = rec["rgb"].view(np.uint32)
    cols = [rec["x"], rec["y"], rec["z"], rec["intensity"], rec["ring"], rec["time"], rec["label"],
            rec["semantic"]]
    # floats with 9 significant digits round-trip float32 exactly; rgb as its float value
    for row in zip(*(c.tolist() for c in cols), rgb_bits.view(np.float32).tolist()):
        buf.write("%.9g %.9g %.9g %.9g %d %.9g %d %d %.9g\n" % row)
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

    def __init__(self, folder, options=None, run=None) -> None:
        super().__init__(folder, options, run)
        self._float32 = Float32Warning(self.name)

    def frame_files(self, result):
        self._float32.check(result)
        return clean_and_noisy(result, "pcd", lambda noisy: pcd_bytes(result, noisy, not self.options.ascii))


WRITER = PcdWriter
