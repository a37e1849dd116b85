"""What a sensor produces and what a writer needs, declared instead of tested by name.

Sensors declare their :class:`Capabilities` (timing, grid, fields); writers declare their
:class:`WriterNeeds`. The range job plans from both (``jobs/plan.py``) and refuses a job
whose writers the sensor cannot serve, in one line. No writer reads a settings dict or
tests ``sensor_type``.
"""
from __future__ import annotations

from dataclasses import dataclass

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
    """

    kind: str
    period: float | None = None
    exposure: float = 0.0


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
    """

    timing: Timing
    grid: tuple | None = None
    organized: bool = False
    fields: tuple = ()


@dataclass(frozen=True)
class WriterNeeds:
    """What a file format needs from the scan.

    Attributes:
        packets: ``"frame"`` when the format holds per-scene-frame packets (EVD, as the
            original wrote it), ``"sweep"`` when it needs whole sweeps, None for either.
        grid: the sensor must have a ray grid (range images).
        image: the sensor must be an image sensor (depth maps, organized image outputs).
    """

    packets: str | None = None
    grid: bool = False
    image: bool = False


__all__ = ["TIMING_KINDS", "Timing", "Capabilities", "WriterNeeds"]
