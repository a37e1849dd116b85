"""``sensor_msgs/LaserScan`` as files: per packet ``laserscan/scan<frame:05d>.npz`` (or
``.csv`` with option ``laserscan.format=csv``), the scans that rosbag2's ``/blensor/scan``
holds (:mod:`blensor_addon.io.laserscan_msg`: seed 004's "Laser-Scan Output" schema, +inf
where a ray returned nothing as REP-117 says), for sensors with one scan plane (a planar
scanner with one elevation; a rotating LiDAR with one laser at elevation 0 over a whole
turn). A sensor without ``column_angles`` is refused when the job is planned, in one line.

A packet holds S scans: one per sweep, or per part of a sweep in the packet (with
``packets=sweep``, S = 1 and every scan is a whole sweep).

npz (``numpy.load``; deflated, byte-reproducible as the npz writer's):

- ``stamp`` (S,) float64 s: the firing time of each scan's first ray (the header stamp);
- ``angle_min``, ``angle_max``, ``angle_increment`` (rad), ``time_increment``,
  ``scan_time`` (s), ``range_min``, ``range_max`` (m): (S,) float32, the message's
  fields (a clockwise head's ``angle_increment`` is negative);
- ``count`` (S,) int64: rays of each scan; ``first_column`` (S,) int64: the sweep
  column of its first ray (column c looks at ``column_angles`` first + c step);
- ``ranges`` (S, N) float32 m, N = the largest count: row s holds scan s's
  ``count[s]`` ranges (+inf: no return), then NaN (no ray; rows are padded);
- ``intensities`` (S, N) float32 (0..255, 0 where nothing returned), padded with NaN;
- ``frame`` int64, ``frame_time`` float64 s: the packet (scene frame or sweep number,
  and its length).

So ``ranges[s, :count[s]]`` is scan s's ``ranges`` and ``angle_min[s] + i *
angle_increment[s]`` the angle of its ray i.

CSV (``numpy.genfromtxt(path, delimiter=",", names=True)`` or pandas): a header line, then
one row per ray, in time order::

    scan,ray,stamp,time,angle,range,intensity,angle_min,angle_max,angle_increment,
    time_increment,scan_time,range_min,range_max

(one line in the file). ``scan`` and ``ray`` count from 0 within the packet and scan;
``stamp`` (s) the scan's header stamp; ``time`` = stamp + ray * time_increment (s) and
``angle`` = angle_min + ray * angle_increment (rad), from the float32 fields; ``range``
(m, ``inf`` where nothing returned), ``intensity``; the scan's fields repeated on each of
its rows. float32 values written with 9 significant digits (they read back exactly),
float64 values as Python's shortest round-trip decimal.

Option ``ranges``: ``noisy`` (default: measured) or ``clean`` (true ranges).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.capabilities import WriterNeeds
from ...core.ndtypes import Array
from ...core.result import ScanResult
from ...core.settings import setting
from ..laserscan_msg import SCALARS, LaserScan, check_laserscan, laser_scans
from ._base import Writer, capabilities_of
from .npz import npz_bytes_of

CSV_COLUMNS = ("scan", "ray", "stamp", "time", "angle", "range", "intensity", *SCALARS)


def laserscan_arrays(scans: Sequence[LaserScan], frame: int, frame_time: float) -> dict[str, Array]:
    """The npz members (module docstring) of ``scans`` (:class:`~blensor_addon.io.laserscan_msg.LaserScan`)."""
    S = len(scans)
    N = max((s.ranges.shape[0] for s in scans), default=0)
    ranges = np.full((S, N), np.nan, np.float32)
    inten = np.full((S, N), np.nan, np.float32)
    for k, s in enumerate(scans):
        ranges[k, :s.ranges.shape[0]] = s.ranges
        inten[k, :s.intensities.shape[0]] = s.intensities
    out: dict[str, Array] = {"stamp": np.array([s.stamp for s in scans], np.float64).reshape(S)}
    for name in SCALARS:
        out[name] = np.array([getattr(s, name) for s in scans], np.float32).reshape(S)
    out["count"] = np.array([s.ranges.shape[0] for s in scans], np.int64).reshape(S)
    out["first_column"] = np.array([s.first_column for s in scans], np.int64).reshape(S)
    out["ranges"] = ranges
    out["intensities"] = inten
    out["frame"] = np.array(frame, np.int64)
    out["frame_time"] = np.array(frame_time, np.float64)
    return out


def _f32(v: float | np.floating[Any]) -> str:
    return "%.9g" % float(v)


def laserscan_csv(scans: Sequence[LaserScan]) -> bytes:
    """The CSV (module docstring) of ``scans``."""
    lines = [",".join(CSV_COLUMNS)]
    for k, s in enumerate(scans):
        f32 = {name: np.float32(getattr(s, name)) for name in SCALARS}
        fixed = ",".join(_f32(f32[name]) for name in SCALARS)
        i = np.arange(s.ranges.shape[0], dtype=np.float64)
        times = s.stamp + i * np.float64(f32["time_increment"])
        angles = np.float64(f32["angle_min"]) + i * np.float64(f32["angle_increment"])
        stamp = repr(float(s.stamp))
        for j in range(s.ranges.shape[0]):
            lines.append(f"{k},{j},{stamp},{float(times[j])!r},{float(angles[j])!r},{_f32(s.ranges[j])},"
                         f"{_f32(s.intensities[j])},{fixed}")
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class LaserScanOptions:
    """Options of the laserscan writer: ``format`` (``npz`` or ``csv``), ``ranges``
    (``noisy`` or ``clean``)."""

    format: str = setting("npz", "LaserScan file", "LaserScan layout: npz (arrays per packet) or csv (one "
                          "row per ray)", choices=("npz", "csv"))
    ranges: str = setting("noisy", "LaserScan ranges", "Measured (noisy) or true (clean) ranges",
                          choices=("noisy", "clean"))


class LaserScanWriter(Writer):
    """``laserscan/scan<frame:05d>.npz`` or ``.csv`` per packet (see the module docstring)."""

    name = "laserscan"
    description = "sensor_msgs/LaserScan of one-plane scanners as npz or CSV (inf where nothing returned)"
    files = "laserscan/scan<frame:05d>.npz (or .csv)"
    outputs = (r"laserscan/scan\d+\.(npz|csv)",)
    Options = LaserScanOptions
    options: LaserScanOptions
    needs = WriterNeeds(grid=True, check=check_laserscan)

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        scans = laser_scans(result, capabilities_of(result), self.options.ranges == "noisy")
        name = f"laserscan/scan{result.frame:05d}.{self.options.format}"
        if self.options.format == "csv":
            return [(name, laserscan_csv(scans))]
        return [(name, npz_bytes_of(laserscan_arrays(scans, result.frame, result.frame_time), compress=True))]


WRITER = LaserScanWriter
