"""``sensor_msgs/LaserScan`` from a scan result: the math both LaserScan writers share
(rosbag2's ``/blensor/scan`` topic and the ``laserscan`` npz/CSV writer). numpy only.

The message is seed 004's "Laser-Scan Output" schema (ROS ``sensor_msgs/LaserScan``):
``angle_min``, ``angle_max``, ``angle_increment`` (rad, about the sensor's up axis,
counter-clockwise from ahead: REP-103 x ahead, y left, z up), ``time_increment`` (s
between measurements), ``scan_time`` (s between scans), ``range_min``, ``range_max``
(m), ``ranges`` (m, float32, one value for every angle step: "a value for every single
ray including those that did not hit", stored as +inf, as seed 004 says and REP-117
prescribes for "no return within range_max") and ``intensities``; the header stamp is
"the acquisition time of the first ray in the scan".

Which sensors: those whose :class:`~blensor_addon.core.capabilities.Capabilities` give
``column_angles`` with a grid of one row and a ``sweep`` timing: a planar scanner with one
scan plane, a rotating LiDAR with one laser at elevation 0 over a whole turn (see
:meth:`blensor_addon.core.sensors.rotating.Rotating.capabilities`), a pattern file of one
plane (:meth:`blensor_addon.core.sensors.pattern_file.PatternFile.column_angles`). A
clockwise head's azimuth falls with time, so its ``angle_increment`` is negative (legal in
ROS: ``angle_max < angle_min``; the n-th range is at ``angle_min + n * angle_increment``
either way).

The columns of a packet: sweep column ``c`` looks at ``first + c * step`` rad
(``column_angles``); a range scan's packet (a scene frame or a sweep) holds the global
columns ``g0 .. g0 + C - 1`` in firing order, ``g0`` the first column that fires at or
after the packet's start, global column ``g`` being column ``c = g % count`` of sweep
``k = g // count``. It fires at ``g * period / count`` s
(:meth:`~blensor_addon.core.capabilities.Timing.first_column`; ``time_increment = period /
count``) unless the sensor declares ``Capabilities.column_time`` (t0, dt): then at ``k *
period + t0 + c * dt`` (:func:`first_timed_column`; ``time_increment = dt``; a pattern
file of a 2D scanner that fires its sector in part of the period). The planar and line
scanners spread a sector's columns over the whole period (their model, reference 6.3:
"one FOV sweep takes 1/rps"), so ``period / count`` is their own timing. One LaserScan
per sweep, or per part of a sweep in the packet (a packet is cut where a new sweep
starts); its stamp is its first ray's firing time. ``range_min`` is the sensor's
``Capabilities.min_range`` (ranges below it are never reported, so never appear);
``range_max`` its ``max_range``. Intensities: the result's 0..1 intensity x 255, rounded
(the units of the PointCloud2 intensity field that BlenSor writes for a generic sensor).

Several returns a beam (``returns`` dual, dual_ouster or all): a LaserScan has
one range a ray, the beam's strongest return (largest received power,
:func:`~blensor_addon.io.packets.strongest_per_beam`, the nearer on a tie), as the
single-return packets and the ouster-ros cloud keep; its intensity goes with it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.capabilities import Capabilities
from ..core.errors import SettingsError
from .packets import strongest_per_beam

if TYPE_CHECKING:
    from ..core.ndtypes import F32, F64
    from ..core.result import ScanResult

#: the scalar fields of a LaserScan, in the message's order (float32 in the message)
SCALARS = ("angle_min", "angle_max", "angle_increment", "time_increment", "scan_time", "range_min",
           "range_max")


@dataclass(frozen=True)
class LaserScan:
    """One ``sensor_msgs/LaserScan`` (seed 004, "Laser-Scan Output").

    Attributes:
        stamp: float s, the firing time of its first ray (the header stamp).
        angle_min, angle_max, angle_increment: float rad (``angle_max = angle_min + (n -
            1) * angle_increment``; the increment is negative for a clockwise head).
        time_increment: float s between consecutive rays; scan_time: float s, the sweep
            period.
        range_min, range_max: float m, the ranges the sensor reports.
        ranges: (n,) float32 m, +inf where the ray returned nothing (REP-117).
        intensities: (n,) float32, 0..255 (0 where nothing returned).
        first_column: int, the sweep column of the first ray (0 = ``column_angles``'s
            first angle).
    """

    stamp: float
    angle_min: float
    angle_max: float
    angle_increment: float
    time_increment: float
    scan_time: float
    range_min: float
    range_max: float
    ranges: F32
    intensities: F32
    first_column: int = 0

    @property
    def angles(self) -> F64:
        """(n,) float64 rad, the angle of each range (``angle_min + i * angle_increment``)."""
        return self.angle_min + self.angle_increment * np.arange(self.ranges.shape[0], dtype=np.float64)


def writes_laserscan(caps: Capabilities) -> bool:
    """Whether a sensor with capabilities ``caps`` gives LaserScans: ``column_angles``
    declared, a ray grid of one row and ``sweep`` timing with a period."""
    return (caps.column_angles is not None and caps.grid is not None and caps.grid[0] == 1
            and caps.timing.kind == "sweep" and caps.timing.period is not None)


def check_laserscan(caps: Capabilities, fmt: str = "laserscan") -> None:
    """Refuse (when the job is planned) a sensor that gives no LaserScan.

    Raises:
        SettingsError (``formats``): ``caps`` has no ``column_angles`` (or not one grid
        row / no sweep), naming the format and which sensors write it.
    """
    if not writes_laserscan(caps):
        rows = f"{caps.grid[0]} ray grid rows" if caps.grid is not None else "no ray grid"
        raise SettingsError(
            "formats",
            f"formats the sensor can serve ({fmt} needs one scan plane swept at "
            "even angle steps: a planar scanner with one elevation, or a rotating LiDAR with one "
            "laser at elevation 0 over a whole turn)",
            f"{fmt} with a sensor of {rows}"
            f"{'' if caps.column_angles is not None else ' and no column angles'}",
        )


def laser_scans(result: ScanResult, caps: Capabilities, noisy: bool = True, first_column: int | None = None
                ) -> list[LaserScan]:
    """The LaserScans of one packet (see the module docstring); [] for a sensor that
    gives none (:func:`writes_laserscan`) or a packet without columns.

    Args:
        result: a :class:`~blensor_addon.core.result.ScanResult` with a grid of one row
            (``ray_index`` = the column in the packet, in firing order).
        caps: its :class:`Capabilities` (``column_angles``, ``grid`` (1, count),
            ``timing.period``, ``min_range``, ``max_range``).
        noisy: ranges measured (``range_noisy``, default) or true (``range``).
        first_column: the global column of the packet's first column; None: the first
            that fires at or after ``result.frame * result.frame_time`` (a range scan's
            scene frame or sweep packet). A single scan (``blensor_addon.scan``) is
            sweep columns ``0 .. count - 1`` fired from its frame's time: pass 0.
    Returns:
        list of :class:`LaserScan`, in time order.
    """
    if not writes_laserscan(caps) or not result.has_grid:
        return []
    grid, column_angles, sweep_period = caps.grid, caps.column_angles, caps.timing.period
    assert grid is not None and column_angles is not None and sweep_period is not None  # writes_laserscan
    count, period = int(grid[1]), float(sweep_period)
    cols = result.grid_shape[1]  # the packet's columns, in firing order
    if not cols or not count:
        return []
    start = result.frame * result.frame_time
    if caps.column_time is None:  # columns spread over the whole period (the planar model)
        if first_column is None:
            first_column = caps.timing.first_column(count, start)
        g = int(first_column) + np.arange(cols, dtype=np.int64)
        col, stamps = g % count, g / (count / period)
        time_increment = period / count
    else:  # column c of sweep k at k P + t0 + c dt
        t0, time_increment = (float(v) for v in caps.column_time)
        if first_column is None:
            first_column = first_timed_column(count, period, t0, time_increment, start)
        g = int(first_column) + np.arange(cols, dtype=np.int64)
        col = g % count
        stamps = (g // count) * period + (t0 + col * time_increment)
    ranges = np.full(cols, np.inf, np.float32)
    inten = np.zeros(cols, np.float32)
    keep = strongest_per_beam(result)  # each beam's strongest return (every row: one return a beam)
    ray_index = result.ray_index
    assert ray_index is not None  # a result with a grid has one (ScanResult's construction checks it)
    local = ray_index.astype(np.int64)[keep] % cols
    ranges[local] = (result.range_noisy if noisy else result.range)[keep]
    inten[local] = np.round(np.clip(result.intensity[keep], 0, 1) * 255)
    cut = np.flatnonzero(np.diff(col) < 0) + 1  # a new sweep starts
    first, step = column_angles
    range_max = float(caps.max_range) if caps.max_range is not None else float("inf")
    range_min = float(caps.min_range or 0.0)
    out: list[LaserScan] = []
    for seg in np.split(np.arange(cols), cut):
        a0 = first + col[seg[0]] * step
        out.append(
            LaserScan(
                stamp=float(stamps[seg[0]]),
                angle_min=float(a0),
                angle_max=float(a0 + step * (seg.size - 1)),
                angle_increment=float(step),
                time_increment=float(time_increment),
                scan_time=float(period),
                range_min=range_min,
                range_max=range_max,
                ranges=ranges[seg],
                intensities=inten[seg],
                first_column=int(col[seg[0]]),
            )
        )
    return out


def first_timed_column(count: int, period: float, t0: float, dt: float, start: float) -> int:
    """Global index ``g = k * count + c`` of the first column that fires at or after
    ``start`` s (to 1e-9 of a step) for columns fired at ``k * period + t0 + c * dt``
    (``Capabilities.column_time``; c in [0, count), t0 + (count - 1) dt < period)."""
    k = math.floor((start - t0) / period)
    for kk in (k - 1, k, k + 1):  # k - 1: start - t0 a rounding below a sweep's start
        c = max(0, math.ceil((start - kk * period - t0) / dt - 1e-9))
        if c < count:
            return kk * count + c
    return (k + 2) * count


__all__ = ["SCALARS", "LaserScan", "writes_laserscan", "check_laserscan", "laser_scans", "first_timed_column"]
