"""The writer interface: one module of :mod:`blensor_addon.io.formats` per file format.

A format module defines a :class:`Writer` subclass named ``WRITER``. Its life cycle in a
range scan (the runner, :mod:`blensor_addon.jobs.range_scan`, drives it; writers never
import bpy):

- ``Writer(folder, options, run)``: open (create subfolders, multi-frame files);
- per frame, :meth:`Writer.frame_files` returns the frame's files as (relative name,
  bytes); the runner stages every writer's files, then calls :meth:`Writer.append`
  (multi-frame files such as EVD), then renames them all, so a frame's files appear
  together or not at all;
- :meth:`Writer.close` with the run's status (``complete``, ``cancelled``, ``failed``)
  finishes multi-frame files (finished frames are kept); :meth:`Writer.discard` removes
  them when nothing was scanned.

A writer declares its ``name``, a one-line ``description``, the ``files`` it writes (a
human-readable pattern), ``outputs`` (regular expressions of the names it leaves, so a
folder holding an earlier run's files is recognised) and its ``Options`` (a frozen
dataclass whose fields carry :func:`~blensor_addon.core.settings.setting`
metadata; given on the command line as ``--option NAME.OPTION=VALUE``), and what it
``needs`` from the scan (:class:`~blensor_addon.core.capabilities.WriterNeeds`: per-frame
packets, a ray grid, an image sensor), from which the range job plans and refuses.

A writer never reads the sensor's settings nor tests its type: what it needs about the
sensor comes from the result (``result.capabilities``, :func:`capabilities_of`;
``result.grid_shape``).
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from ...core.capabilities import Capabilities, Timing, WriterNeeds
from ...core.ndtypes import Array
from ...core.result import ScanResult
from ...core.timebase import parse_start_time


@dataclass(frozen=True)
class NoOptions:
    """A format without options."""


@dataclass
class RunInfo:
    """What a writer may need to know about the run.

    Attributes:
        camera: camera object name; sensor_type; sensor: settings dict; seed;
        frame_time (s): seconds per packet (the frame time, or the sweep period with
        ``packets = sweep``); frames: the packets scanned (frame or sweep numbers: a list or
        range of int); start_ns: the time base, UNIX ns of scene time 0
        (:mod:`blensor_addon.core.timebase`; default 2020-01-01T00:00:00Z), which every
        writer that stamps absolute times adds to the result's scene times.
    ``sensor_type`` and ``sensor`` describe the run (the manifest's record); no writer
    reads them: what a writer needs about the sensor is on the result
    (:func:`capabilities_of`).
    """

    camera: str = ""
    sensor_type: str = "rotating"
    sensor: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    frame_time: float = 1.0 / 24.0
    frames: Sequence[int] = dataclasses.field(default_factory=list)
    start_ns: int = dataclasses.field(default_factory=lambda: parse_start_time(None))


def clean_and_noisy(result: ScanResult, suffix: str,
                    encode: Callable[[bool], bytes]) -> list[tuple[str, bytes]]:
    """The frame's two clouds, ground truth and what a real sensor gives, in folders a
    loader cannot mix: ``clean/scan<frame:05d>.<suffix>`` = ``encode(False)`` and
    ``noisy/...`` = ``encode(True)``."""
    return [(f"{kind}/scan{result.frame:05d}.{suffix}", encode(kind == "noisy")) for kind in ("clean", "noisy")]


def capabilities_of(result: ScanResult) -> Capabilities:
    """``result.capabilities`` (every sensor sets them); for a result assembled without
    a sensor (by hand, in a plug-in's tests), what the result itself shows: its grid,
    its ``organized`` flag, timing ``exposure``, no range limit and no column angles.
    Never the sensor's settings nor its type name."""
    if result.capabilities is not None:
        return result.capabilities
    grid = cast("tuple[int, int]", tuple(result.grid_shape)) if result.has_grid else None
    return Capabilities(timing=Timing("exposure"), grid=grid, organized=bool(result.organized))


#: a structured array: one record per point (or block), its dtype's fields named
Records = NDArray[np.void]


class _WriteArray(Protocol):
    def __call__(self, fp: BinaryIO, array: Array, version: tuple[int, int] | None = None,
                 allow_pickle: bool = True) -> None: ...


#: :func:`numpy.lib.format.write_array` (numpy 1.26's stub declares no types): writes the
#: ``.npy`` bytes of ``array`` (header, then the data) to the binary file ``fp``
write_array: _WriteArray = np.lib.format.write_array


class Float32Warning:
    """Warns once (per writer, so once per run) on stderr when a format stores world
    coordinates in float32 that round them by more than ``tolerance`` m (1 mm).

    The coordinates are kept in float64 by the result (``ScanResult.xyz64``) only where
    float32 would round them by more than 61 um; LAS writes those at 0.1 mm, the
    float32 formats (npz, PCD, PLY) warn with the error figure."""

    tolerance = 1e-3

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.warned = False

    def check(self, result: ScanResult) -> None:
        """Warn if ``result``'s float32 coordinates round its float64 ones by more than
        :attr:`tolerance` (and no warning was given yet)."""
        if self.warned or not result.xyz64:
            return
        err = result.float32_rounding()
        if err > self.tolerance:
            self.warned = True
            reach = max(float(np.max(np.abs(a))) for a in result.xyz64.values())
            print(f"blensor: warning: world coordinates up to {reach:.3g} m: float32 rounds them by up to "
                  f"{err:.3g} m in {self.fmt} (las keeps 0.1 mm; --frame-of-reference sensor keeps float32 "
                  "exact)", file=sys.stderr)


class Writer:
    """A file format (see the module docstring). Subclasses set the class attributes
    and override :meth:`frame_files` and, for multi-frame files, :meth:`append`,
    :meth:`close` and :meth:`discard`."""

    name = ""
    description = ""
    files = ""
    outputs: tuple[str, ...] = ()
    #: the options' frozen dataclass (a subclass narrows :attr:`options` to it)
    Options: type[Any] = NoOptions
    #: the validated options, an instance of :attr:`Options`
    options: object
    #: what the format needs from the scan (:class:`WriterNeeds`); the range job plans
    #: from it and refuses a sensor that cannot serve it
    needs: WriterNeeds = WriterNeeds()
    #: the writer keeps a file across frames (EVD, KITTI's poses, rosbag2): a resumed run
    #: rescans every frame
    multi_frame = False
    #: importable modules the writer needs (imported only when it writes)
    requires: tuple[str, ...] = ()
    #: how to install what :attr:`requires` names, said when one is missing (an optional
    #: extra such as ``pip install 'blensor[preview]'``); "": pip install blensor's dependencies
    install = ""
    #: a plug-in writer's flag bit (in ``io.formats.PLUGIN_BITS``: the bit Blender stores
    #: for it); None: derived from its name (``io.formats.plugin_bit``)
    flag_bit: int | None = None
    #: the writer may run on the range scan's writer thread (constructed on the main
    #: thread, then every call on that one thread); False for a writer that calls bpy or
    #: holds an object bound to the thread that made it (sqlite3): a run with such a
    #: writer writes on the main thread
    threaded = True

    @classmethod
    def check_folder(cls, folder: Path) -> None:
        """Refuse the output ``folder`` before anything in it is touched (earlier runs'
        files are deleted only after every format has accepted it).

        Raises:
            SettingsError (``out``): the format cannot write there. Default: accepts.
        """

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        self.folder = Path(folder)
        self.options = options if options is not None else self.Options()
        self.run = run or RunInfo()

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        """The files of one frame: (name relative to the folder, bytes)."""
        return []

    def append(self, result: ScanResult) -> None:
        """Add the frame to the writer's multi-frame files (default: none).

        Raises:
            OSError: the multi-frame file is rolled back to the frames before.
        """

    def close(self, status: str) -> None:
        """Finish the multi-frame files (default: none).

        Raises:
            OSError: finishing failed.
        """

    def discard(self) -> None:
        """Remove unfinished multi-frame files (default: none)."""
