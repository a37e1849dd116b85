"""What a sensor produces and what a writer needs, declared instead of tested by name.

Sensors declare their :class:`Capabilities` (timing, grid, fields, the return
settings that shape its results); writers declare their :class:`WriterNeeds`. The range
job plans from both (``jobs/plan.py``) and refuses a job whose writers the sensor cannot
serve, in one line. No writer or packet encoder looks a setting up in a settings dict or
tests ``sensor_type`` (``tests/test_writer_capabilities.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from .sensors.calibration import LaserTable

#: ``sweep``: the sensor sweeps its field of view once every ``period`` s (rotating,
#: line, planar); ``exposure``: one image per scene frame, read out over ``exposure`` s
#: (ToF, Kinect, depth camera); ``stream``: a pattern that never repeats (no sweep, no
#: grid; e.g. Livox rosettes), cut into packets of ``period`` s
TIMING_KINDS = ("sweep", "exposure", "stream")


@dataclass(frozen=True)
class Timing:
    """How a sensor's rays are spread over time.

    Attributes:
        kind: one of :data:`TIMING_KINDS`.
        period: float s, the sweep period (``sweep``) or packet length (``stream``);
            None for ``exposure``.
        exposure: float s, an image's readout time (``exposure``; 0 = instantaneous).
        setting: the name of the setting that sets ``period`` (``rotation_speed``,
            ``pattern_period``, ``report_frequency``), for messages (a plan of too many
            packets names it); ``""`` when none does.
    """

    kind: str
    period: float | None = None
    exposure: float = 0.0
    setting: str = ""

    def first_column(self, columns: int, start: float) -> int:
        """Global index of the first column that fires at or after ``start`` s, for a
        ``sweep`` of ``columns`` columns evenly spaced over ``period`` (global column g
        fires at ``g * period / columns``; column ``g % columns`` of sweep
        ``g // columns``), as the swept sensors fire them in a range scan."""
        per_s = columns / cast(float, self.period)  # a swept timing has a period
        return int(math.ceil(start * per_s - 1e-9))


@dataclass(frozen=True)
class Device:
    """The real unit a sensor's settings model, for writers that write what its vendor's
    driver or firmware would (driver point layouts, raw packets).

    Attributes:
        vendor: ``"velodyne"``, ``"ouster"``, ``"hesai"`` or ``"generic"``.
        model: the unit, as the vendor names it (``"VLP-16"``, ``"HDL-32E"``,
            ``"OS1-64"``); ``""`` for a generic sensor.
        table: the :class:`~blensor_addon.core.sensors.calibration.LaserTable` in use
            (the preset's packaged one or the camera's imported calibration).
        rotation_speed: spin rate (Hz); direction: ``"cw"`` or ``"ccw"`` seen from above.
        columns: columns per full turn of the grid cast, ``360 / angle_resolution`` (float:
            the HDL-32E preset's one 46.08 us cycle at 10 Hz, 0.165888 deg, gives 2170.14).
        min_range, max_range: m, the ranges the unit reports.
    """

    vendor: str
    model: str
    table: LaserTable
    rotation_speed: float
    direction: str = "cw"
    columns: float = 0.0
    min_range: float = 0.0
    max_range: float = 0.0


@dataclass(frozen=True)
class Capabilities:
    """What a sensor with given settings produces.

    Attributes:
        timing: :class:`Timing`.
        grid: (rows, cols) of its ray grid (laser x column, or image row x column, row 0
            at the top), or None for a pattern with no grid (no ``ray_index``; organized
            outputs are refused).
        organized: an image sensor whose organized outputs hold every pixel of the grid.
        fields: names of the per-point fields of its results (``ScanResult`` fields).
        max_range: float m, the longest range the sensor reports (range-image scales,
            ROS ``LaserScan.range_max``), or None.
        min_range: float m, the shortest range the sensor reports (ROS
            ``LaserScan.range_min``; 0: none).
        column_angles: (first, step) float rad for a sensor whose grid columns are
            evenly spaced in azimuth over a sweep of ``grid[1]`` columns and whose
            single grid row is a scan plane (planar scanners): the angle of column 0
            and the step, about the sensor's up axis, counter-clockwise from ahead
            (ROS ``LaserScan`` angles; BlenSor's azimuth psi); None otherwise (no
            ``LaserScan`` is written).
        column_time: (t0, dt) float s for a sensor with ``column_angles`` whose columns
            do not fill the period evenly from its start: column ``c`` of sweep ``k``
            fires at ``k * period + t0 + c * dt`` (``dt``: ROS ``LaserScan.time_increment``;
            a 2D scanner that fires its 270 deg in 3/4 of the period); None: at ``(k *
            grid[1] + c) * period / grid[1]``, the columns spread over the whole period
            (the planar and line scanners' model, reference 6.3: "one FOV sweep takes
            1/rps"; a rotating head's whole turn).
        device: :class:`Device` for a sensor that models a real unit whose driver
            layout or packets writers can reproduce; None otherwise.
        returns: which echoes a beam reports (the setting ``returns``, one of
            ``core/sensors/returns.py``'s ``RETURN_MODES``): the packet encoders' return
            mode (Velodyne's last and dual return bytes, ``io/packets/velodyne.py``);
            ``"strongest"`` for a sensor without the return physics (one return a ray).
        divergence_algorithm: how a beam's sub-rays become its returns (the setting,
            one of ``DIVERGENCE_ALGORITHMS``; only ``"echoes"`` gives the ``returns``
            modes); ``"echoes"`` for a sensor without the return physics.
        intensity_model: the model that gave the results' ``intensity`` (the setting, one
            of ``INTENSITY_MODELS``: ``"lambert"`` or ``"radar"``), from which the
            encoders rank a beam's returns by received power
            (``core/sensors/intensity.py: received_power``); ``"lambert"`` for a sensor
            without the return physics.
    """

    timing: Timing
    grid: tuple[int, int] | None = None
    organized: bool = False
    fields: tuple[str, ...] = ()
    max_range: float | None = None
    min_range: float = 0.0
    column_angles: tuple[float, float] | None = None
    device: Device | None = None
    column_time: tuple[float, float] | None = None
    returns: str = "strongest"
    divergence_algorithm: str = "echoes"
    intensity_model: str = "lambert"


@dataclass(frozen=True)
class WriterNeeds:
    """What a file format needs from the scan.

    Attributes:
        packets: ``"frame"`` when the format holds per-scene-frame packets (EVD, as the
            original wrote it), ``"sweep"`` when it needs whole sweeps, None for either.
        grid: the sensor must have a ray grid (range images).
        image: the sensor must be an image sensor (depth maps, organized image outputs).
        device: the sensor must model a real unit (``Capabilities.device``; raw packets).
        check: None, or a function of the sensor's :class:`Capabilities` that raises
            SettingsError for a sensor the format cannot serve (called when the job is
            planned, before anything is scanned).
    """

    packets: str | None = None
    grid: bool = False
    image: bool = False
    device: bool = False
    check: Callable[[Capabilities], None] | None = None


__all__ = ["TIMING_KINDS", "Timing", "Device", "Capabilities", "WriterNeeds"]
