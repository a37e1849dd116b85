"""Rotating multi-laser LiDAR (Velodyne, Ouster, generic): the mechanics and the return
physics; the presets and their per-laser tables are in :mod:`.rotating_presets` and
``tables/`` (:class:`~.calibration.LaserTable`).

Seed 000 section 3.2 and reference section 6.1: L lasers at fixed elevations spin about
the sensor's up axis (+Y in BlenSor's sensor frame, +Z in REP-103); a column fires every
laser once. Column azimuth psi (deg) = 0 looks down -Z and grows toward -X
(counter-clockwise seen from above; REP-103 yaw = psi).

Spin (``rotation_direction``): real Velodyne and Ouster heads turn clockwise seen from
above (velodyne_pointcloud puts a point of encoder azimuth a at yaw -a: ``y = -r sin a``;
Ouster's encoder angle of column m is ``2 pi (1 - m / W)``), so with ``cw`` (the default)
psi DEcreases with time at ``360 * rotation_speed`` deg/s; ``ccw`` is BlenSor's spin before
settings version 2 (old scenes keep it). A single scan sweeps the sector
``start_angle..end_angle``: ``ccw`` from the start (columns ``start + k res``), ``cw`` from
the end (columns ``end - k res``), column k fired ``k res / (360 rotation_speed)`` s after
the scan's start. A range scan's global column k fires at ``k res / (360 rotation_speed)``
s at psi ``k res`` (ccw, the original's) or ``end - k res`` (cw: every turn is a single
scan's sweep), mod 360; the sector keeps ``[start, end)`` (ccw) or ``(start, end]`` (cw)
of it. An Ouster's column m has encoder angle ``2 pi (1 - m / W)`` in its lidar frame,
which is its sensor frame turned 180 deg (``lidar_to_sensor_transform``): with the
sector ``-180..180`` column m is at psi ``180 - m 360 / W``, the driver's column order.

Per-laser calibration (the :class:`~.calibration.LaserTable` of the preset,
:func:`~.rotating_presets.preset_table`, or the camera's imported ``calibration``), applied
as the vendor's driver places a point (so the points are where the driver would put
them for the same raw data):
- ``elevation_deg`` p_k and ``azimuth_deg`` a_k: laser k fires along
  ``(cos p sin th, sin p, cos p cos th)``, ``th = psi - a_k + 180 deg``.
- ``firing_s`` (continuous time): laser k fires ``firing_s[k]`` after its column while
  the head keeps turning, along ``psi - a_k -+ 360 rotation_speed firing_s[k]`` (cw: -).
- ``vert_offset_m`` vo and ``horiz_offset_m`` ho (Velodyne ``vert_offset_correction``,
  ``horiz_offset_correction``): the beam leaves from ``vo * e_up + ho * e_left``, e_up the
  unit vector at elevation p + 90 deg in the beam's vertical plane, e_left the horizontal
  unit vector 90 deg counter-clockwise of the beam: velodyne_pointcloud's
  ``RawData::unpack`` (rawdata.cc) computes ``xy = d cos v - vo sin v``, ``x' = xy sin a -
  ho cos a``, ``y' = xy cos a + ho sin a``, ``z = d sin v + vo cos v`` and publishes
  ``(y', -x', z)``, which is that origin plus d times the beam's direction. A table whose
  ``extra`` has ``"vert_offset_axis": "z"`` (the VLP-16 and HDL-32E presets: their offsets are
  the manuals', "after computing X,Y,Z, apply the vertical correction", VLP-16 User Manual
  63-9243 Rev D section 9.2) raises the beam origin by vo along the spin axis instead, as
  velodyne-decoder (src/packet_decoder.cpp: ``z = d sin v + vert_offset``) places the point.
- ``beam_origin_m`` n (Ouster ``lidar_origin_to_beam_origin_mm``): the beam leaves from n
  out from the axis along the head's (encoder) azimuth; Ouster's range-to-XYZ places the
  point at ``n (cos th_enc, sin th_enc, 0) + (r - n) dir``, so the range r Ouster reports
  is the path from the beam origin plus n: ``range`` and ``range_noisy`` here are that r
  (:meth:`Rotating.range_offset`), the points stay on the path.
- ``distance_m`` (Velodyne ``dist_correction``): the driver adds it to the raw distance
  in the packet. ``range`` holds the true range (path from the beam origin),
  ``range_noisy`` the measured one, both as the driver reports them after its correction,
  and the points are the true geometry plus noise; the raw distance a unit would put in
  its packet is ``range_noisy - distance_m`` (:func:`raw_distance`).
- ``ring``: the table's (ouster-ros: the beam index, 0 = top) where given, else for an
  Ouster table the beam index, else the elevation rank, 0 = lowest (velodyne_pointcloud).
- ``cycle_s``: the firing cycle (the presets' ``angle_resolution`` is one cycle at their
  rate). The grid cast has ``360 / angle_resolution`` columns a turn, whatever the table
  (:class:`~..capabilities.Device` ``columns``).

Not modelled: Velodyne's two-point distance correction (``dist_correction_x``,
``dist_correction_y``; the HDL-64E S2 tables have it). Where ``two_pt_correction_available``,
velodyne_pointcloud (rawdata.cc) corrects x and y apart, each interpolated linearly from
``dist_correction_x`` at |x| = 2.4 m (``dist_correction_y`` at |y| = 1.93 m) to
``dist_correction`` at 25.04 m, so it changes points nearer than about 25 m along x or y
(the hdl64e_s2 table: by up to 0.12 m near the sensor). BlenSor places every point
with ``distance_m`` alone; the imported fields are kept in the table's ``extra``.

Azimuth step and the unit (:meth:`LidarSettings.check`): a Velodyne or Hesai preset's
``angle_resolution`` is one firing cycle of the unit at its rate; another step is accepted
(the grid is the user's), but then the sensor is no longer the unit (a VLP-16 fires every
55.296 us whatever the step). A table of an Ouster is held to Ouster's lidar modes
(:data:`~.rotating_presets.OUSTER_LIDAR_MODES`): ``360 / angle_resolution`` columns at
``rotation_speed`` must be one of them (the firmware has no other grid).

Returns (seed 000 Eq. 1-2; seed 002 section II-D, Eq. 4-5): ``return_model="limit"``
drops hits whose reflectivity is below the limit at the clean range (Eq. 1);
``"linear"`` keeps a hit iff ``R0 cos(theta) >= ref_max * d / max_range`` and
``d <= max_range`` at the measured (noisy) depth d. Either way a surface of reflectivity
0 never returns, and a measured range below ``min_range`` is not reported. Range noise:
``d + eps_bias[laser] + N(noise_mu, noise_sigma)`` (Eq. 2). Intensity ``R0 cos(theta)``.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..capabilities import Capabilities, Device
from ..errors import SettingsError
from ..ndtypes import F64, I64, U16, Bool, Floating, Integer
from ..settings import MIN_SWEEP_RATE, setting
from .budget import CHUNK_RAYS, ray_limit
from .calibration import MAX_LASERS, LaserTable
from .raypattern import ROTATION_DIRECTIONS, CameraFrame, RayPattern, sweep_column_count
from .physics import (NOISE_LIMIT, check_min_range, elevation_rank, frame_rng, linear_return_mask,
                      min_range_mask, min_range_setting, noise_mu_setting, noise_sigma_setting,
                      ref_dist_setting, ref_limit_setting, ref_slope_setting, returns_mask)
from . import ambient, bloom, radiometry
from .protocols import Hits, ScanContext
from .returns import ReturnSettings
from .rotating_presets import OUSTER_LIDAR_MODES, PRESETS, VLS128_SEQUENCE_S, preset_bias_table, preset_table
from .sensor import Sensor, Traced

BIAS_DISTRIBUTIONS = ("table", "gaussian", "laplace")
#: ``limit``: seed 000 Eq. 1; ``linear``: seed 002 Eq. 4-5; ``radiometric``: the signal chain of
#: :mod:`.radiometry` (received power, SNR, detection and range noise per unit)
RETURN_MODELS = ("limit", "linear", "radiometric")
#: VLS-128 firmware: ``old`` before 5.2.3.0 (53.3 us firing sequence), ``new`` 5.2.3.0 and later (57.8 us)
VLS128_FIRMWARES = tuple(VLS128_SEQUENCE_S)


@dataclass(frozen=True)
class LidarSettings(ReturnSettings):
    """Settings of one rotating LiDAR (seed 000 section 3.2; reference section 6.1).

    Attributes (units):
        preset: one of :data:`PRESETS`; sets the laser tables (and, when chosen in the
            panel or with ``preset=``, the values of the preset).
        elevations: laser elevations (deg) for ``generic``; ignored by the other presets.
        angle_resolution: azimuth step between columns (deg), in (0, 360]; a Velodyne or
            Hesai preset's is one firing cycle of the unit at its rate (another step is
            accepted but is not the unit's); with an Ouster table ``360 / angle_resolution``
            and ``rotation_speed`` must be a lidar mode (:meth:`check`).
        rotation_speed: spin rate (Hz), in [0.01, 1000] (:data:`~..settings.MIN_SWEEP_RATE`).
        max_range: farthest accumulated path that returns (m), in (0, 100000].
        start_angle, end_angle: azimuth sector (deg); start < end, end - start <= 360; a
            ``cw`` head sweeps it from the end, a ``ccw`` head from the start.
        noise_mu, noise_sigma: per-ray Gaussian range noise (m), sigma >= 0.
        bias_distribution: per-laser distance bias: ``"table"`` (the preset's calibrated
            table; presets without one draw Gaussian biases), ``"gaussian"`` or
            ``"laplace"`` (scale ``bias_sigma``), drawn from ``seed``.
        bias_sigma: spread of the per-laser bias (m), >= 0 (original 0.078).
        ref_dist, ref_limit, ref_slope: reflectivity limit (seed 000 Eq. 1): a hit at
            accumulated range d returns iff reflectivity > r_min(d), r_min = -1 for
            d < ref_dist, else ref_limit + ref_slope (d - ref_dist). Units m, 1, 1/m.
        rotation_direction: ``cw`` (Velodyne, Ouster, Hesai; psi falls with time) or
            ``ccw`` (BlenSor before settings version 2).
        min_range: nearest measured range reported (m), in [0, max_range).
        return_model: ``limit`` (seed 000 Eq. 1 above), ``linear`` (seed 002 Eq. 4-5:
            ``R0 cos(theta) >= ref_max * d / max_range`` at the measured depth d) or
            ``radiometric`` (:mod:`.radiometry`: received power, detection with a probability
            rising through the unit's threshold, range noise from the SNR, calibrated from
            ``core/tables/radiometry.json``; ``noise_sigma`` is then the floor of a unit whose
            figures give none, ``ref_*`` are not used; the real presets' default).
        ref_max: R_L,max of seed 002 Eq. 5, in (0, 1].
        calibration: an imported :class:`~.calibration.LaserTable` as JSON; empty: the
            preset's table (:attr:`table`).
        vertical_offsets: apply a table's manual vertical beam-origin offsets (those with
            ``extra["vert_offset_axis"] == "z"``: the VLP-16 and HDL-32E presets); off (what
            cameras stored before settings version 3 keep): every beam from the origin.
        vls128_firmware: ``old`` (before 5.2.3.0) or ``new`` (5.2.3.0 and later): the
            firing sequence of a VLS-128 table, 53.3 or 57.8 us
            (:data:`~.rotating_presets.VLS128_SEQUENCE_S`); its firing times scale with it.
            Other tables ignore it. The grid stays ``angle_resolution`` (the unit's at 10 Hz:
            0.19188 or 0.20808 deg).
        seed, max_bounces, visibility: see :class:`~..settings.SensorSettings`; the return
            physics (wavelength, divergence, returns, weather): :class:`~.returns.ReturnSettings`.
    """

    preset: str = setting("hdl64e_s2", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    elevations: tuple[float, ...] = setting((0.0,), "Elevations",
                                            "Generic sensor: comma-separated laser elevations", "deg",
                                            lo=-90.0, hi=90.0, count=(1, MAX_LASERS),
                                            show_if=("preset", "generic"))
    angle_resolution: float = setting(0.1728, "Angle resolution", "Azimuth step between columns", "deg",
                                      lo=0.0, hi=360.0, lo_open=True, precision=4)
    rotation_speed: float = setting(10.0, "Rotation speed", "Spin rate (a sweep lasts at most 100 s)", "Hz",
                                    lo=MIN_SWEEP_RATE, hi=1000.0)
    max_range: float = setting(120.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    start_angle: float = setting(0.0, "Start angle", "Sector start (azimuth)", "deg", lo=-360.0, hi=360.0)
    end_angle: float = setting(360.0, "End angle", "Sector end (azimuth), at most one turn after the start",
                               "deg", lo=-360.0, hi=720.0)
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.01)
    bias_distribution: str = setting("table", "Laser bias", "Per-laser distance bias: the preset's calibrated "
                                     "table, Gaussian or Laplace (drawn from the seed)",
                                     choices=BIAS_DISTRIBUTIONS)
    bias_sigma: float = setting(0.078, "Bias sigma", "Per-laser bias spread", "m",
                                lo=0.0, hi=NOISE_LIMIT, precision=4)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.01)
    # -- device truth: the real units' behaviour, implemented in this module --------------------
    rotation_direction: str = setting("cw", "Rotation", "Spin direction seen from above: cw (Velodyne, "
                                      "Ouster, Hesai) or ccw (BlenSor before settings version 2)",
                                      choices=ROTATION_DIRECTIONS)
    min_range: float = min_range_setting()
    return_model: str = setting("limit", "Return model", "Which returns are detected: limit (seed 000 Eq. 1, "
                                "reflectivity limit by range), linear (seed 002 Eq. 4-5: R0 cos(theta) >= "
                                "ref_max * d / max_range at the measured range) or radiometric (received "
                                "power, SNR and range noise calibrated from the unit's datasheet)",
                                choices=RETURN_MODELS)
    ref_max: float = setting(0.8, "Reflectance at max range", "Linear return model: the target reflectance "
                             "detected at max_range (seed 002 Eq. 5 R_L,max)", lo=0.0, hi=1.0, lo_open=True)
    calibration: str = setting("", "Calibration", "A unit's imported calibration (LaserTable JSON; blensor "
                               "calib import); empty: the preset's table", kind="text",
                               show_if=("calibration", "\0never"))
    vertical_offsets: bool = setting(True, "Vertical beam offsets", "VLP-16, HDL-32E: each beam leaves "
                                     "from its laser's vertical offset up the spin axis (the manual's "
                                     "vertical correction); off: from the origin (before settings version 3)")
    bloom_beams: int = setting(1, "Bloom beams", "Radiometric return model: the halo of a saturated "
                               "return (a retroreflector) reaches this many lasers above and below "
                               "(core/sensors/bloom.py; derived default, no datasheet figure); 0: none",
                               lo=0, hi=16, show_if=("return_model", "radiometric"))
    bloom_columns: int = setting(2, "Bloom columns", "Radiometric return model: the halo of a saturated "
                                 "return reaches this many columns left and right (derived default); 0: none",
                                 lo=0, hi=64, show_if=("return_model", "radiometric"))
    vls128_firmware: str = setting("old", "VLS-128 firmware", "old: before 5.2.3.0 (53.3 us firing sequence, "
                                   "0.19188 deg at 10 Hz); new: 5.2.3.0 and later (57.8 us, 0.20808 deg)",
                                   choices=VLS128_FIRMWARES, show_if=("preset", "vls128"))

    def check(self) -> None:
        """Refuse (SettingsError, one line naming the setting): a sector that is empty or
        more than one turn (``end_angle``); ``min_range`` not below ``max_range``; a stored
        ``calibration`` that is not a valid table; with an Ouster table, a grid that is not
        one of Ouster's lidar modes (:func:`check_ouster_mode`). A Velodyne or Hesai table
        takes any step (only the preset's is the unit's: see the module docstring)."""
        if not (self.start_angle < self.end_angle <= self.start_angle + 360.0):
            raise SettingsError("end_angle", f"in ({self.start_angle:g}, {self.start_angle + 360.0:g}] deg"
                                " (greater than start_angle, at most one turn)", self.end_angle)
        check_min_range(self)
        if self.table.vendor == "ouster":  # (a stored calibration that is not a valid table: refused here)
            check_ouster_mode(self.angle_resolution, self.rotation_speed)

    @property
    def table(self) -> LaserTable:
        """The per-laser calibration in use: the camera's imported ``calibration``
        (LaserTable JSON) when not empty, else the preset's
        (:func:`~.rotating_presets.preset_table`; ``generic``: from ``elevations``).

        Raises:
            SettingsError (``calibration``): the stored text is not a valid table.
        """
        return _table_of(self.preset, tuple(self.elevations), self.calibration, self.vls128_firmware,
                         self.vertical_offsets)

    @property
    def spin(self) -> float:
        """+1 for ``ccw`` (psi grows with time), -1 for ``cw`` (psi falls with time)."""
        return -1.0 if self.rotation_direction == "cw" else 1.0

    @property
    def elevations_deg(self) -> F64:
        """(L,) float64 laser elevations in degrees; channel k is row k."""
        return np.asarray(self.table.elevation_deg, dtype=np.float64)

    @property
    def azimuth_offsets_deg(self) -> F64:
        """(L,) float64 per-laser azimuth corrections a_k (deg; laser k fires along psi - a_k),
        zeros where the table has none."""
        return self.table.per_laser("azimuth_deg")

    @property
    def beam_origin(self) -> float:
        """Distance of the beam origin from the spin axis (m): Ouster's
        ``lidar_origin_to_beam_origin_mm`` / 1000, 0 for the Velodyne tables."""
        return float(self.table.beam_origin_m)

    @property
    def num_lasers(self) -> int:
        """Number of lasers (channels) L."""
        return int(self.table.lasers)

    def laser_bias(self) -> F64:
        """Per-laser distance bias eps_bias,i of seed 000 Eq. 2: (L,) float64 metres.

        ``table`` uses the preset's calibrated bias table where it has one with one entry
        per laser (HDL-64E S2: the original's "fixed randomized array for
        reproducibility", ``rotating_presets.preset_bias_table(preset)``); otherwise biases
        are drawn from ``N(0, bias_sigma)`` or ``Laplace(0, bias_sigma)`` with a generator
        seeded by ``seed`` alone, so they stay the same in every frame ("This bias remains
        the same in each rotation", seed 000 section 3.2). The original drew a shared,
        unseeded table and gave the HDL-32E the first 32 HDL-64E entries (reference
        section 14.13); both are fixed here.
        """
        table = preset_bias_table(self.preset)
        if self.bias_distribution == "table" and table is not None and len(table) == self.num_lasers:
            return np.asarray(table, dtype=np.float64)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(self.seed), 0xB1A5])))
        if self.bias_distribution == "laplace":
            return rng.laplace(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
                else np.zeros(self.num_lasers)
        return rng.normal(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
            else np.zeros(self.num_lasers)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every setting, with the resolved elevation table."""
        d = super().to_dict()
        d["elevations"] = [float(v) for v in self.elevations_deg]
        return d


def check_ouster_mode(angle_resolution: float, rotation_speed: float) -> str:
    """The Ouster lidar mode (``"1024x10"``) of ``360 / angle_resolution`` columns (deg
    step) at ``rotation_speed`` (Hz), within 1e-6 relative (a float32 setting holds 360 /
    1024 exactly).

    Raises:
        SettingsError: ``rotation_speed`` (the columns are a mode's, the rate is not one of
        its rates) or ``angle_resolution`` (no mode has these columns), listing the modes
        (:data:`~.rotating_presets.OUSTER_LIDAR_MODES`: ouster-sdk ``lidar_mode``).
    """
    columns = 360.0 / float(angle_resolution)
    modes = ", ".join(f"{w}x{hz}" for w, hz in OUSTER_LIDAR_MODES)
    rates = [hz for w, hz in OUSTER_LIDAR_MODES if math.isclose(columns, w, rel_tol=1e-6)]
    for hz in rates:
        if math.isclose(float(rotation_speed), hz, rel_tol=1e-6):
            return f"{round(columns)}x{hz}"
    if rates:
        raise SettingsError("rotation_speed", f"{' or '.join(f'{hz:g}' for hz in rates)} Hz with "
                            f"{round(columns)} columns (Ouster lidar modes, columns x Hz: {modes})",
                            rotation_speed)
    steps = ", ".join(f"{360.0 / w:.10g}" for w in sorted({w for w, _ in OUSTER_LIDAR_MODES}))
    raise SettingsError("angle_resolution", f"360 deg / the columns of an Ouster lidar mode ({steps} deg; "
                        f"modes, columns x Hz: {modes})", angle_resolution)


@functools.lru_cache(maxsize=32)
def _table_of(preset: str, elevations: tuple[float, ...], calibration: str, firmware: str = "old",
              vertical_offsets: bool = True) -> LaserTable:
    """The :class:`LaserTable` of :attr:`LidarSettings.table` (kept: tables are immutable):
    a VLS-128 table's firing times and cycle for ``firmware`` (:func:`vls128_timing`); without
    ``vertical_offsets``, a table's manual offsets (``extra["vert_offset_axis"] == "z"``) dropped."""
    table = LaserTable.from_json(calibration) if calibration else preset_table(preset, elevations)
    if not vertical_offsets and table.extra.get("vert_offset_axis") == "z" and table.vert_offset_m:
        table = dataclasses.replace(table, vert_offset_m=())
    return vls128_timing(table, firmware)


def vls128_timing(table: LaserTable, firmware: str) -> LaserTable:
    """``table`` with the firing sequence of VLS-128 ``firmware`` (``old``/``new``,
    :data:`~.rotating_presets.VLS128_SEQUENCE_S`): a VLS-128 table (model ``VLS-128``,
    ``cycle_s`` one of the two sequences) gets that ``cycle_s`` and its ``firing_s`` scaled
    by the ratio (2.665 -> 2.89 us per firing group); any other table is returned as it is."""
    want = VLS128_SEQUENCE_S[firmware]
    if table.model != "VLS-128" or not table.cycle_s or table.cycle_s == want or not any(
            math.isclose(table.cycle_s, c, rel_tol=1e-9) for c in VLS128_SEQUENCE_S.values()):
        return table
    k = want / table.cycle_s
    return dataclasses.replace(table, cycle_s=want, firing_s=tuple(f * k for f in table.firing_s))


def raw_distance(table: LaserTable, channel: Integer, range_m: Floating) -> F64:
    """(N,) float64 m: the raw distance a Velodyne would put in its packet for reported
    ranges ``range_m`` (N,) float64 m of lasers ``channel`` (N,) int: the driver adds the
    laser's ``dist_correction`` to the raw distance (velodyne_pointcloud rawdata.cc:
    ``distance += corrections.dist_correction``), so the raw distance is ``range -
    distance_m[channel]``."""
    correction = table.per_laser("distance_m")[np.asarray(channel, np.int64)]
    return np.asarray(range_m, dtype=np.float64) - correction


def check_ray_budget(s: LidarSettings, columns: int, mode: str) -> int:
    """Refuse a scan whose ray count exceeds the limit (:func:`~.budget.ray_limit`)
    before anything is allocated. ``columns`` is the scan's column count; returns the
    ray count.

    Raises:
        SettingsError naming the setting that made the scan too large:
        ``rotation_speed`` when a range-scan frame sweeps more than one turn, else
        ``angle_resolution``, with the value that fits.
    """
    rays = int(columns) * s.num_lasers
    limit = ray_limit()
    if rays <= limit:
        return rays
    factor = rays / limit
    turns = (columns - 1) * s.angle_resolution / 360.0  # a full sweep (packets=sweep) is one turn, not more
    if mode == "range" and turns > 1.0:
        raise SettingsError("rotation_speed", f"at most {s.rotation_speed / factor:.6g} Hz at these settings "
                            f"({rays:,} rays per frame; the limit is {limit:,})", s.rotation_speed)
    raise SettingsError("angle_resolution", f"at least {s.angle_resolution * factor:.6g} deg at these settings "
                        f"({rays:,} rays per scan; the limit is {limit:,})", s.angle_resolution)


def single_scan_count(s: LidarSettings) -> int:
    """Number of columns of a single scan (:func:`~.raypattern.sweep_column_count`)."""
    return sweep_column_count(s.start_angle, s.end_angle, s.angle_resolution)


def wrap360(deg: Floating) -> F64:
    """Angles (deg) wrapped into [0, 360) (float64; also when ``np.mod`` rounds a tiny
    negative angle up to 360.0)."""
    a = np.mod(np.asarray(deg, dtype=np.float64), 360.0)
    a[a >= 360.0] -= 360.0
    return a


def single_scan_columns(s: LidarSettings) -> F64:
    """Azimuths (deg) of the columns of a single scan in firing order: ``start + k * res``
    (``ccw``) or ``end - k * res`` (``cw``: the head enters the sector at its end), for
    ``k < single_scan_count(s)``. Returns (C,) float64.

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    n = single_scan_count(s)
    check_ray_budget(s, n, "single")
    k = np.arange(n, dtype=np.float64) * s.angle_resolution
    return s.end_angle - k if s.rotation_direction == "cw" else s.start_angle + k


def range_scan_columns(s: LidarSettings, frame: int, frame_time: float) -> I64:
    """Global column indices swept during scene frame ``frame`` of a range scan.

    The head turns ``360 * rotation_speed * frame_time`` degrees per frame (seed 000
    section 3.2; reference section 9); frame f covers the columns k with
    ``k * res`` in ``[f * D, (f + 1) * D)``; column k looks at psi = ``k * res`` (``ccw``,
    the original's) or ``end_angle - k * res`` (``cw``: each turn starts where a single
    scan does, at the sector's end), mod 360. Unlike the original (which truncated each
    frame's count with ``int()`` and lost columns), consecutive frames tile the
    rotation exactly. Columns outside the sector are dropped (the original ignored the
    sector here): a ``ccw`` head keeps psi in ``[start_angle, end_angle)``, a ``cw`` head
    the first ``end - start`` deg of each turn, psi in ``(start_angle, end_angle]``, mod
    360. Returns (C,) int64.

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    sweep = 360.0 * s.rotation_speed * frame_time
    res = s.angle_resolution

    def first_column(f: int) -> int:
        return int(math.ceil(f * sweep / res - 1e-9))

    a, b = first_column(frame), first_column(frame + 1)
    check_ray_budget(s, b - a, "range")
    k = np.arange(a, b, dtype=np.int64)
    width = s.end_angle - s.start_angle
    if width < 360.0:
        if s.rotation_direction == "cw":
            keep = wrap360(k * res) < width  # psi = end - k res: the first ``width`` deg of each turn
        else:
            keep = np.mod(np.mod(k * res, 360.0) - np.mod(s.start_angle, 360.0), 360.0) < width
        k = k[keep]
    return k


def firing_offsets(s: LidarSettings) -> F64:
    """(L,) float64 s: when each laser fires after its column's time (the table's
    ``firing_s``; zeros for a table without a firing sequence)."""
    return s.table.per_laser("firing_s")


#: the last few patterns made (:func:`make_pattern`), by their inputs: a scan repeated on
#: the same frame (the panel's scan button, ``blensor_addon.scan`` in a loop) reuses its
#: rays instead of making 133k directions again; arrays are read-only
_PatternKey = tuple[LidarSettings, int, int | None, bytes, bytes, bytes | None]
_PATTERNS: collections.OrderedDict[_PatternKey, RayPattern] = collections.OrderedDict()
_PATTERNS_KEPT = 2
_PATTERNS_LOCK = threading.Lock()


def make_pattern(s: LidarSettings, azimuth_deg: Floating, timestamp: Floating,
                 column0: int = 0, columns: int | None = None, firing: Floating | None = None) -> RayPattern:
    """Ray directions for the given columns (the same inputs give the same, shared,
    read-only pattern: :data:`_PATTERNS`).

    Args:
        azimuth_deg (C,) float64 column azimuths psi in degrees.
        timestamp (C,) float64 absolute firing time of each column (s).
        column0: index of the first of these columns in the scan; columns: the scan's
            column count (default C), for ``ray_index = channel * columns + column``.
        firing: (L,) float64 s, per-laser firing offsets (continuous time,
            :func:`firing_offsets`), or None: every laser of a column fires at the
            column's time along the column's azimuth (the original). With offsets, laser k
            fires at ``t + firing[k]`` while the head keeps turning, so its azimuth is
            ``psi - a_k -+ 360 * rotation_speed * firing[k]`` deg (cw: -, ccw: +).
    Returns:
        RayPattern with C * L rays, ray ``c * L + k`` = column c, laser k.
    """
    az = np.ascontiguousarray(azimuth_deg, dtype=np.float64)
    ts = np.ascontiguousarray(timestamp, dtype=np.float64)
    fi = None if firing is None else np.ascontiguousarray(firing, dtype=np.float64)
    key = (s, int(column0), columns, az.tobytes(), ts.tobytes(), None if fi is None else fi.tobytes())
    with _PATTERNS_LOCK:
        p = _PATTERNS.get(key)
        if p is not None:
            _PATTERNS.move_to_end(key)
            return p
    p = _make_pattern(s, az, ts, column0, columns, fi)
    for name in (*RayPattern._FIELDS, "origins"):
        a = getattr(p, name)
        if a is not None:
            a.flags.writeable = False
    with _PATTERNS_LOCK:
        _PATTERNS[key] = p
        while len(_PATTERNS) > _PATTERNS_KEPT:
            _PATTERNS.popitem(last=False)
    return p


def _make_pattern(s: LidarSettings, azimuth_deg: F64, timestamp: F64, column0: int,
                  columns: int | None, firing: F64 | None) -> RayPattern:
    table = s.table
    elev = np.deg2rad(np.asarray(table.elevation_deg, dtype=np.float64))
    L = elev.shape[0]
    C = azimuth_deg.shape[0]
    offsets = table.per_laser("azimuth_deg")  # a_k: laser k fires along psi - a_k
    turned = None
    if firing is not None and np.any(firing):
        # deg the head turned when laser k fires, in the spin direction
        turned = s.spin * 360.0 * s.rotation_speed * np.asarray(firing, dtype=np.float64)
        offsets = offsets - turned
    # th = psi - offset + 180 deg per (column, laser): its sine and cosine from the
    # columns' and the lasers' by the angle-difference identities (C + L trigonometric
    # calls instead of C * L; the same angles within 1e-15 rad)
    a = np.deg2rad(np.asarray(azimuth_deg, dtype=np.float64) + 180.0)[:, None]
    o = np.deg2rad(np.asarray(offsets, dtype=np.float64))[None, :]
    sin_a, cos_a, sin_o, cos_o = np.sin(a), np.cos(a), np.sin(o), np.cos(o)
    sin_th = sin_a * cos_o - cos_a * sin_o
    cos_th = cos_a * cos_o + sin_a * sin_o
    cp, sp = np.cos(elev)[None, :], np.sin(elev)[None, :]
    d = np.empty((C, L, 3), dtype=np.float64)
    d[..., 0] = cp * sin_th
    d[..., 1] = np.broadcast_to(sp, (C, L))
    d[..., 2] = cp * cos_th
    col = np.arange(column0, column0 + C, dtype=np.int64)
    total = C if columns is None else int(columns)
    origins = None
    n = float(table.beam_origin_m)
    vo, ho = table.per_laser("vert_offset_m")[None, :], table.per_laser("horiz_offset_m")[None, :]
    if n or vo.any() or ho.any():
        org = np.zeros((C, L, 3))
        if n:  # Ouster: n out from the axis along the head's azimuth psi (+ what it turned)
            if turned is None:
                org[..., 0] += n * sin_a
                org[..., 2] += n * cos_a
            else:
                u = np.deg2rad(turned)[None, :]
                org[..., 0] += n * (sin_a * np.cos(u) + cos_a * np.sin(u))
                org[..., 2] += n * (cos_a * np.cos(u) - sin_a * np.sin(u))
        if vo.any() and table.extra.get("vert_offset_axis") == "z":  # the manuals': up the spin axis
            org[..., 1] += vo
        elif vo.any():  # velodyne_pointcloud: vo along e_up = (sin p sin y, cos p, sin p cos y), y = th - 180
            org[..., 0] -= vo * sp * sin_th
            org[..., 1] += vo * cp
            org[..., 2] -= vo * sp * cos_th
        if ho.any():  # ... and ho along e_left = (-cos y, 0, sin y), 90 deg counter-clockwise of the beam
            org[..., 0] += ho * cos_th
            org[..., 2] -= ho * sin_th
        origins = org.reshape(-1, 3).astype(np.float32)
    if offsets.any():
        azimuth = np.mod(np.deg2rad(azimuth_deg[:, None] - offsets[None, :]), 2.0 * np.pi).ravel()
    else:
        azimuth = np.repeat(np.mod(np.deg2rad(azimuth_deg), 2.0 * np.pi), L)
    return RayPattern(
        directions=d.reshape(-1, 3).astype(np.float32),
        azimuth=azimuth,
        elevation=np.tile(elev, C),
        channel=np.tile(np.arange(L, dtype=np.uint16), C),
        ray_index=(np.arange(L, dtype=np.int64)[None, :] * total + col[:, None]).ravel(),
        timestamp=(np.repeat(np.asarray(timestamp, dtype=np.float64), L) if turned is None else
                   (np.asarray(timestamp, dtype=np.float64)[:, None] + np.asarray(firing)[None, :]).ravel()),
        origins=origins,
    )


def scan_columns(s: LidarSettings, frame: int, frame_time: float, mode: str = "single"
                 ) -> tuple[F64, F64]:
    """Column azimuths (C,) float64 deg and their absolute firing times (C,) float64 s, in
    firing order, of a single scan (``mode="single"``: the sector at frame ``frame``,
    :func:`single_scan_columns`, column k at ``frame * frame_time + k * res / (360 *
    rotation_speed)``) or of frame ``frame`` of a range scan (``mode="range"``, see
    :func:`range_scan_columns`: global column k at psi ``k * res`` (ccw) or ``end_angle -
    k * res`` (cw), mod 360, in [0, 360), time ``k * res / (360 * rotation_speed)``). With
    ``cw`` psi falls with time.

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    if mode == "range":
        psi = range_scan_columns(s, frame, frame_time) * s.angle_resolution
        t = psi / (360.0 * s.rotation_speed)
        return (wrap360(s.end_angle - psi) if s.rotation_direction == "cw" else np.mod(psi, 360.0)), t
    psi = single_scan_columns(s)
    k = np.arange(psi.shape[0], dtype=np.float64) * s.angle_resolution
    if s.rotation_direction != "cw":  # the original's arithmetic (the same times)
        k = psi - s.start_angle
    return psi, frame * frame_time + k / (360.0 * s.rotation_speed)


def chunk_columns(s: LidarSettings, chunk_rays: int | None = None) -> int:
    """Columns per chunk of :func:`iter_patterns`: about ``chunk_rays`` (default
    :data:`~.budget.CHUNK_RAYS`) rays, at least one column."""
    return max(1, (chunk_rays or CHUNK_RAYS) // s.num_lasers)


def iter_patterns(s: LidarSettings, azimuth_deg: Floating, timestamp: Floating,
                  chunk_rays: int | None = None, firing: Floating | None = None) -> Iterator[RayPattern]:
    """:func:`make_pattern` over consecutive column chunks of about ``chunk_rays`` rays,
    so the rays of a scan never exist all at once. Yields RayPattern (one empty
    pattern if there are no columns)."""
    step = chunk_columns(s, chunk_rays)
    n = azimuth_deg.shape[0]
    for i in range(0, max(1, n), step):
        yield make_pattern(s, azimuth_deg[i:i + step], timestamp[i:i + step], i, n, firing)


def noisy_range(rng: np.random.Generator, rng_clean: Floating, channel: Integer,
                s: LidarSettings) -> F64:
    """seed 000 Eq. 2: ``d + eps_bias[channel] + N(noise_mu, noise_sigma)``, float64 m."""
    bias = s.laser_bias()
    per_ray: F64 = rng.normal(s.noise_mu, s.noise_sigma, rng_clean.shape[0]) if s.noise_sigma > 0 \
        else np.full(rng_clean.shape[0], s.noise_mu)
    return rng_clean.astype(np.float64) + bias[channel.astype(np.int64)] + per_ray


def laser_scan_angles(s: LidarSettings) -> tuple[float, float] | None:
    """``Capabilities.column_angles`` (first, step rad) of a head that is a 2D laser
    scanner (ROS ``LaserScan``, seed 004's laser-scan output), else None: the ``generic``
    table with one laser at elevation 0, a whole turn (``end_angle - start_angle`` = 360:
    a range scan keeps every column) of a whole number of columns (``360 /
    angle_resolution``, so sweep column c looks at the same angle in every turn). A ``cw``
    head's global column k looks at ``end_angle - k res`` (:func:`scan_columns`): first =
    ``end_angle`` wrapped into (-180, 180] deg, step ``-res`` (psi falls with time); a
    ``ccw`` head's at ``k res``: first 0, step ``res``, when ``start_angle`` is a whole turn
    (0; a single scan then starts there too; other starts: None)."""
    table = s.table
    if table.lasers != 1 or float(table.elevation_deg[0]) != 0.0 or s.end_angle - s.start_angle != 360.0:
        return None
    count = 360.0 / s.angle_resolution
    if abs(count - round(count)) > 1e-9 * count:
        return None
    if s.rotation_direction == "cw":
        first = -float(wrap360(180.0 - np.array([s.end_angle]))[0]) + 180.0  # (-180, 180]
        return float(np.deg2rad(first)), -float(np.deg2rad(s.angle_resolution))
    if float(wrap360(np.array([s.start_angle]))[0]) != 0.0:
        return None
    return 0.0, float(np.deg2rad(s.angle_resolution))


class Rotating(Sensor[LidarSettings]):
    """The rotating LiDAR sensor type (see the module docstring)."""

    name = "rotating"
    label = "Rotating LiDAR"
    description = "Spinning multi-laser LiDAR (Velodyne, Ouster, generic)"
    Settings = LidarSettings
    presets = PRESETS
    storage = ""  # v0.1 kept these settings on Camera.blensor itself
    number = 0  # stored value of sensor_type (saved files keep it)
    period_setting = "rotation_speed"

    def grid_shape(self, s: LidarSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        if mode == "range":
            return (s.num_lasers, range_scan_columns(s, frame, frame_time).shape[0])
        return (s.num_lasers, single_scan_count(s))

    def check_budget(self, s: LidarSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        return scan_columns(s, frame, frame_time, mode)[0].shape[0] * s.num_lasers

    def patterns(self, s: LidarSettings, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        firing = firing_offsets(s) if s.time_model == "continuous" else None
        return iter_patterns(s, *scan_columns(s, frame, frame_time, mode), firing=firing)

    def sweep_period(self, s: LidarSettings) -> float | None:
        return 1.0 / s.rotation_speed

    def channel_elevations(self, s: LidarSettings) -> F64:
        return s.elevations_deg

    def channel_rings(self, s: LidarSettings) -> U16:
        """The table's ``ring`` where given (ouster-ros: beam index, 0 = top); an Ouster
        table without one: the beam index; else the elevation rank, 0 = lowest
        (velodyne_pointcloud's ``laser_ring``)."""
        table = s.table
        if table.ring:
            return np.asarray(table.ring, dtype=np.uint16)
        if table.vendor == "ouster":
            return np.arange(table.lasers, dtype=np.uint16)
        return elevation_rank(s.elevations_deg)

    def range_offset(self, s: LidarSettings) -> float:
        """The beam origin's distance from the axis n (m): Ouster reports the path from
        the beam origin plus n (see the module docstring); 0 without a beam origin."""
        return s.beam_origin

    def returns(self, s: LidarSettings, pattern: RayPattern, hits: Hits) -> Bool:
        return returns_mask(hits, s)

    def measure(self, s: LidarSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        return noisy_range(rng, r, pattern.channel, s)

    def detected(self, s: LidarSettings, pattern: RayPattern, hits: Hits, r_noisy: F64) -> Bool | None:
        """``min_range`` on the measured range; with ``return_model="linear"`` also seed
        002 Eq. 4-5 at the measured depth (:func:`~.physics.linear_return_mask`, theta from
        ``hits.cos_incidence``)."""
        keep = min_range_mask(s, r_noisy)
        if s.return_model == "linear":
            energy = hits.energy  # an echo's R0 cos(theta) over its footprint (EchoHits), else None
            returned = hits.returned
            lin = linear_return_mask(hits.reflectivity if returned is None else returned,
                                     hits.cos_incidence if energy is None else None, r_noisy, s.ref_max,
                                     s.max_range, lam=energy)
            keep = lin if keep is None else keep & lin
        return keep

    def calibration(self, s: LidarSettings) -> radiometry.Calibration:
        """The unit's :class:`~.radiometry.Calibration` for ``return_model="radiometric"``:
        the preset's figures in ``core/tables/radiometry.json`` within the preset's own
        ``max_range`` (the unit's datasheet range), else 80 % at ``max_range``
        (:func:`~.radiometry.unit_calibration`; ``noise_sigma`` the floor where the figures
        give none)."""
        preset = PRESETS.get(s.preset)
        reach = preset.values.get("max_range") if preset is not None else None
        return radiometry.unit_calibration(s.preset, float(s.max_range), float(s.noise_sigma),
                                           reach=None if reach is None else float(reach))

    def bloom(self, s: LidarSettings, traced: Traced, signal: F64) -> I64 | None:
        """The halo source of each of the N returns of ``traced`` of received power
        ``signal`` (N,) (:func:`~.bloom.bloom_sources`, -1: none) within ``bloom_beams`` x
        ``bloom_columns`` of a saturated return, on the scan's grid (beams by elevation rank,
        the column of the reported azimuth, as the units' images show it, Ouster's
        destaggered, wrapping around a full turn); None when nothing saturates or the
        halo is off (no allocation: the common case)."""
        if not (signal >= bloom.SATURATION_SIGNAL).any() or (s.bloom_beams <= 0 and s.bloom_columns <= 0):
            return None
        cols = int(round(360.0 / float(s.angle_resolution)))
        az = np.asarray(traced.pattern.azimuth, dtype=np.float64)
        column = np.round(az * (cols / (2.0 * np.pi))).astype(np.int64) % cols
        full = abs(float(s.end_angle) - float(s.start_angle)) >= 360.0
        rank = elevation_rank(s.elevations_deg)[np.asarray(traced.pattern.channel, dtype=np.int64)]
        return bloom.bloom_sources(rank, column, signal, int(s.bloom_beams),
                                   int(s.bloom_columns), cols if full else 0)

    def receive(self, s: LidarSettings, traced: Traced, frame: int, ctx: ScanContext | None = None) -> Traced:
        """With ``return_model="radiometric"`` (else ``traced`` itself), the first stage of
        :meth:`~.sensor.Sensor.detect_and_assemble`: the receiver (:mod:`.radiometry`) on the
        N returns of ``traced``:
        ``signal`` (N,) = ``energy xi(r) / r^2`` (the return's ``energy``: rho cos(theta)
        over the footprint with the paths' and the atmosphere's transmission), its SNR at
        the clean range under :meth:`calibration`, the measured range ``r + bias[laser] +
        noise_mu + sigma(SNR) z1`` (seed 000 Eq. 2 with the SNR's sigma; the per-laser
        bias table stays) and the detection ``SNR + z2 >= tau``; z1, z2 (N,) standard
        normal draws, in that order, from the frame's generator
        (:func:`~.physics.frame_rng`: the same seed gives the same returns). Returns the
        detected rows with ``measured`` set and ``extra["signal"]`` (float32); the
        returns mode then chooses among them (:meth:`Sensor.detect_and_assemble`).
        Saturation and blooming (:meth:`bloom`, no draws): a return in a saturated return's
        halo takes its measured range, ``fraction`` x its signal and is detected;
        ``extra["bloom"]`` (uint8) marks it.
        Where ``ctx`` carries the scene's light (``ctx.lights``, :mod:`.ambient`; a context
        without it scans at the datasheet's condition), the SNR's noise variance follows
        the ambient illuminance at each hit and ``extra["near_ir"]`` (float32, ambient
        photons) is added; the draws are the same. A sun another object hides from a
        return's surface adds nothing there (:func:`~.ambient.shadows`)."""
        if s.return_model != "radiometric" or traced.measured is not None:
            return traced
        hits, ret = traced.hits, traced.returns
        r = np.asarray(hits.range, dtype=np.float64)
        if ret is not None:
            energy = np.asarray(ret.energy, dtype=np.float64)
        else:
            energy = np.asarray(hits.reflectivity, np.float64) * np.asarray(hits.cos_incidence, np.float64)
        cal = self.calibration(s)
        signal = radiometry.received_power(energy, r)
        lights = getattr(ctx, "lights", None)  # the scene layer's contexts carry it
        near: F64 | None = None
        if isinstance(lights, ambient.Lights) and ctx is not None:
            unit = radiometry.load_table().get(s.preset)
            ref = None if unit is None else unit.ambient_klx
            if lights.dark:
                ratio: float | F64 = 1.0 - ambient.AMBIENT_SHARE
                near = np.zeros(r.shape[0])
            else:
                ray: Floating = hits.last_dir if hits.last_dir is not None else (
                    traced.pattern.directions @ np.asarray(ctx.sensor_to_world)[:3, :3].T)
                visible = ambient.shadows(ctx, hits, traced.pattern, lights, ray)  # None: no sun to test
                e_klx = ambient.klx(ambient.irradiance(lights, hits.normal, ray, visible=visible))
                ratio, near = ambient.noise_ratio(e_klx, ref), ambient.near_ir(hits.reflectivity, e_klx, ref)
            snr = cal.snr(signal, r, ratio)
        else:
            snr = cal.snr(signal, r)
        rng = frame_rng(s.seed, frame)
        n = r.shape[0]
        noise = rng.standard_normal(n) * cal.sigma(snr) + s.noise_mu
        measured = r + s.laser_bias()[traced.pattern.channel.astype(np.int64)] + noise
        seen = radiometry.detect(snr, rng.standard_normal(n))
        halo = self.bloom(s, traced, signal)
        if halo is not None:  # saturated returns' halos: at their range, detected (module bloom)
            b = halo >= 0
            signal, seen[b], measured[b] = bloom.bloom_signal(signal, halo), True, measured[halo[b]]
        rows = np.flatnonzero(seen)
        extra = {k: v[rows] for k, v in traced.extra.items()}
        extra["bloom"] = (np.zeros(rows.shape[0], np.uint8) if halo is None
                          else (halo[rows] >= 0).astype(np.uint8))
        extra["signal"] = signal[rows].astype(np.float32)
        if near is not None:
            extra["near_ir"] = near[rows].astype(np.float32)
        return dataclasses.replace(traced, pattern=traced.pattern.take(rows), hits=hits.take(rows),
                                   returns=None if ret is None else ret.take(rows), measured=measured[rows],
                                   extra=extra)

    def capabilities(self, s: LidarSettings, camera: CameraFrame | None = None) -> Capabilities:
        """The sensor's capabilities with :class:`~..capabilities.Device` for a table of a
        real unit's vendor (None for ``generic``): ``columns`` is the grid actually cast,
        ``360 / angle_resolution`` columns a turn (float; 2170.14 for the HDL-32E preset's
        0.165888 deg), whatever the table's ``cycle_s``."""
        caps = super().capabilities(s, camera)
        if s.return_model == "radiometric":
            caps = dataclasses.replace(caps, fields=(*caps.fields, "signal", "bloom"))
        table = s.table
        if table.vendor == "generic":
            return dataclasses.replace(caps, column_angles=laser_scan_angles(s))
        columns = 360.0 / s.angle_resolution
        device = Device(vendor=table.vendor, model=table.model, table=table,
                        rotation_speed=float(s.rotation_speed), direction=s.rotation_direction,
                        columns=float(columns), min_range=float(s.min_range), max_range=float(s.max_range))
        return dataclasses.replace(caps, device=device)


SENSOR = Rotating()
