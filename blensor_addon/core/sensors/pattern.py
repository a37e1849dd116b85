"""Pattern-file LiDARs: a sensor whose rays come from a file (MEMS and solid-state units,
hybrid solid-state units, custom laser configurations, 2D scanners; seed 004 "Scan
Patterns", "Custom Laser Configuration").

The file (CSV or .npy, layout in :mod:`.pattern_file`) gives per firing its azimuth,
elevation, time offset within the period and channel, optionally the ray's origin. The
pattern repeats every period P (``pattern_period`` when > 0, else the file's ``#
period_s`` line): firing i of repetition k fires at ``k P + time_i`` s.

- Timing ``sweep`` with period P: a ``sweep`` packet is one repetition, a ``frame``
  packet every firing whose time falls in the scene frame (frames tile time exactly, as
  the line scanner's), a single scan one repetition from the frame's time.
- Grid (channels, firings per channel) when every channel 0..L-1 fires equally often,
  ``ray_index = channel * cols + k`` (k: the firing's rank among its channel's in the
  packet, in firing order); else no grid (``ray_index`` is then the firing's place in the
  packet). A pattern of one channel at elevation 0 with evenly spaced azimuths and
  evenly spaced firing times (a 2D scanner: ``time_i = t0 + i dt``, any first offset t0
  and step dt) declares ``column_angles``, and ``column_time`` (t0, dt) unless the
  firings fill the period from 0 (``dt = P / N``): ROS ``LaserScan`` is written, with
  ``time_increment`` dt.
- Returns: the return physics of :mod:`.returns` (beam divergence, echoes, weather,
  intensity) as the other LiDARs; the reflectivity limit of seed 000 Eq. 1
  (``ref_dist``, ``ref_limit``, ``ref_slope``); range noise ``N(noise_mu, noise_sigma)``
  per ray (seed 000 section 3.2); ``min_range`` on the measured range.
- A ``//`` path is relative to the .blend (resolved by the scene layer before the
  settings are made); any other relative path is relative to the current directory.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..capabilities import Capabilities
from ..errors import SettingsError
from ..ndtypes import F64, I64, Bool
from ..settings import Preset, setting
from .budget import CHUNK_RAYS, ray_limit, refuse_rays
from .pattern_file import MAX_PERIOD, MIN_PERIOD, PatternFile, channel_positions, check_period, load
from .protocols import Hits
from .raypattern import CameraFrame, RayPattern
from .physics import (
    check_min_range,
    min_range_setting,
    noise_mu_setting,
    noise_sigma_setting,
    ref_dist_setting,
    ref_limit_setting,
    ref_slope_setting,
    returns_mask,
)
from .returns import ReturnSettings
from .sensor import Sensor

PRESETS = {
    "file": Preset("Pattern file", {}, "the rays of the file named by pattern_file (docs/formats.md)"),
}


@dataclass(frozen=True)
class PatternSettings(ReturnSettings):
    """Settings of a pattern-file LiDAR.

    Attributes: preset; pattern_file (path of a .csv or .npy pattern; ``//``: relative to
    the .blend); pattern_period (s, the pattern repeats every period; 0: the file's own
    period; else in [:data:`~.pattern_file.MIN_PERIOD`, 3600]); max_range, min_range (m);
    noise_mu, noise_sigma (m); ref_dist (m), ref_limit (1), ref_slope (1/m): the
    reflectivity limit (seed 000 Eq. 1).
    """

    preset: str = setting("file", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    pattern_file: str = setting("", "Pattern file", "A .csv or .npy file of firings (azimuth, elevation, "
                                "time, channel)", kind="text")
    pattern_period: float = setting(0.0, "Pattern period", "Seconds after which the pattern repeats (0: "
                                    f"the file's own; else at least {MIN_PERIOD:g} s)", "s", lo=0.0,
                                    hi=MAX_PERIOD)
    max_range: float = setting(100.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.0)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.01)

    def check(self) -> None:
        """Raises SettingsError: ``min_range`` not below ``max_range``; ``pattern_period``
        in (0, :data:`~.pattern_file.MIN_PERIOD`) (a floor: 10 kHz repetition, see
        :mod:`.pattern_file`)."""
        check_min_range(self)
        if 0.0 < self.pattern_period < MIN_PERIOD:
            raise SettingsError("pattern_period", f"0 (the file's own period) or in [{MIN_PERIOD:g}, "
                                f"{MAX_PERIOD:g}] s", self.pattern_period)


@dataclass(frozen=True)
class Loaded:
    """A settings' pattern: the parsed file and its period (s)."""

    file: PatternFile
    period: float


def loaded(s: PatternSettings) -> Loaded:
    """The pattern of ``s`` (:func:`.pattern_file.load`, cached) and its period:
    ``pattern_period`` when > 0, else the file's.

    Raises:
        SettingsError: ``pattern_file`` (bad file, named row and column; a firing time
        not below the period), ``pattern_period`` (0 and the file gives none).
    """
    pf = load(s.pattern_file)
    period = float(s.pattern_period) if s.pattern_period > 0 else pf.period
    if period is None:
        raise SettingsError("pattern_period", f"greater than 0 s: {pf.path} gives no period (a CSV's "
                            "'# period_s: P' line; a .npy file has none)", s.pattern_period)
    check_period(pf, period)
    return Loaded(pf, period)


def firings(pf: PatternFile, period: float, frame: int, frame_time: float, mode: str
            ) -> tuple[I64, F64]:
    """The firings of a scan in firing order: indices into ``pf`` (time-sorted) and their
    absolute times ``k P + time_i`` (s).

    ``mode="single"``: one repetition from ``frame * frame_time``. ``mode="range"``: every
    firing whose time falls in ``[frame, frame + 1) * frame_time`` (the same test for
    both neighbouring frames, so frames tile time; a ``sweep`` packet, frame_time = P, is
    repetition ``frame``).

    Returns:
        index (F,) int64, time (F,) float64 s.
    """
    n = len(pf)
    if mode != "range":
        return np.arange(n, dtype=np.int64), frame * frame_time + pf.time_s
    lo, hi = frame * frame_time, (frame + 1) * frame_time
    k = np.arange(int(math.floor(lo / period)) - 1, int(math.floor(hi / period)) + 1, dtype=np.int64)
    t = (k[:, None] * period + pf.time_s[None, :]).ravel()
    tol = 1e-9 * period / n + 8 * np.spacing(abs(hi))  # far below a firing interval, above t's rounding
    keep = np.flatnonzero((t >= lo - tol) & (t < hi - tol))
    return keep % n, t[keep]


def firing_count(pf: PatternFile, period: float, frame: int, frame_time: float, mode: str) -> int:
    """How many firings :func:`firings` returns, counted without making them (the
    repetitions in the frame times the pattern's firings, the partial ones at both ends
    by binary search of the sorted offsets); at most about ``frame_time / period + 2``
    repetitions are looked at, and a frame of more repetitions than the ray budget holds
    is counted from the repetitions alone."""
    n = len(pf)
    if mode != "range":
        return n
    whole = frame_time / period
    if whole > ray_limit():  # every repetition fires at least once: more rays than the budget anyway
        return int(math.ceil(whole)) * n
    lo, hi = frame * frame_time, (frame + 1) * frame_time
    k = np.arange(int(math.floor(lo / period)) - 1, int(math.floor(hi / period)) + 1, dtype=np.int64)
    tol = 1e-9 * period / n + 8 * np.spacing(abs(hi))
    a = np.searchsorted(pf.time_s, lo - tol - k * period, side="left")
    b = np.searchsorted(pf.time_s, hi - tol - k * period, side="left")
    return int(np.sum(b - a))


class Pattern(Sensor[PatternSettings]):
    """Pattern-file LiDAR (see the module docstring)."""

    name = "pattern"
    label = "Pattern-file LiDAR"
    description = "Rays from a file: MEMS and solid-state patterns, custom laser configurations"
    Settings = PatternSettings
    presets = PRESETS
    storage = "pattern"
    number = 8
    period_setting = "pattern_period"
    #: settings holding a file path: the scene layer makes a ``//`` (relative to the .blend) path absolute
    path_settings = ("pattern_file",)

    def sweep_period(self, s: PatternSettings) -> float | None:
        return loaded(s).period

    def channel_elevations(self, s: PatternSettings) -> F64:
        return loaded(s).file.channel_elevations()

    def _scan_shape(self, s: PatternSettings, frame: int, frame_time: float,
                    mode: str) -> tuple[int, I64, F64]:
        """(rays, index, time) of a scan (:func:`firings`)."""
        ld = loaded(s)
        idx, t = firings(ld.file, ld.period, frame, frame_time, mode)
        return idx.shape[0], idx, t

    def grid_shape(self, s: PatternSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        """(channels, the most firings of one channel in the scan) for a pattern with a
        grid; () without one."""
        ld = loaded(s)
        if ld.file.grid is None:
            return ()
        if mode != "range":
            return ld.file.grid
        idx, _ = firings(ld.file, ld.period, frame, frame_time, mode)
        counts = np.bincount(ld.file.channel[idx], minlength=ld.file.channels)
        return (ld.file.channels, int(counts.max()) if counts.size else 0)

    def check_budget(self, s: PatternSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        """Refuse a scan of more rays than :func:`~.budget.ray_limit` (``pattern_period``:
        a frame that holds many repetitions), before anything is cast; returns the rays
        (:func:`firing_count`)."""
        ld = loaded(s)
        rays = firing_count(ld.file, ld.period, frame, frame_time, mode)
        if rays > ray_limit():
            refuse_rays(rays, "pattern_period", ld.period, unit="s")
        return rays

    def capabilities(self, s: PatternSettings, camera: CameraFrame | None = None) -> Capabilities:
        """Timing ``sweep`` over the pattern's period; grid (channels, firings per
        channel) or None; ``column_angles`` and ``column_time`` for a one-plane pattern
        (:meth:`.pattern_file.PatternFile.column_angles`, ``column_time``)."""
        ld = loaded(s)
        caps = super().capabilities(s, camera)
        return dataclasses.replace(caps, grid=ld.file.grid, column_angles=ld.file.column_angles(ld.period),
                                   column_time=ld.file.column_time(ld.period))

    def patterns(self, s: PatternSettings, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        """The scan's firings in firing order (:func:`firings`), in chunks of
        :data:`~.budget.CHUNK_RAYS`: directions and origins from the file, azimuth and
        elevation as :func:`~.raypattern.angles_of` reports them, ``ray_index = channel *
        cols + rank`` (grid) or the firing's place in the scan (no grid)."""
        pf = loaded(s).file
        n, idx, stamp = self._scan_shape(s, frame, frame_time, mode)
        ch = pf.channel[idx]
        if pf.grid is not None:
            cols = int(np.bincount(ch, minlength=pf.channels).max()) if n else 0
            ray_index = ch * cols + channel_positions(ch)
        else:
            ray_index = np.arange(n, dtype=np.int64)
        az, el = pf.angles
        d = pf.directions
        o = pf.origins
        for i in range(0, max(1, n), CHUNK_RAYS):
            j = idx[i:i + CHUNK_RAYS]
            yield RayPattern(directions=d[j].astype(np.float32), azimuth=az[j], elevation=el[j],
                             channel=ch[i:i + CHUNK_RAYS].astype(np.uint16),
                             ray_index=ray_index[i:i + CHUNK_RAYS], timestamp=stamp[i:i + CHUNK_RAYS],
                             origins=None if o is None else o[j])

    def returns(self, s: PatternSettings, pattern: RayPattern, hits: Hits) -> Bool:
        return returns_mask(hits, s)

    def measure(self, s: PatternSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        """``r + N(noise_mu, noise_sigma)`` per ray (seed 000 section 3.2)."""
        if s.noise_sigma > 0:
            return r + rng.normal(s.noise_mu, s.noise_sigma, r.shape[0])
        return r + s.noise_mu


SENSOR = Pattern()
