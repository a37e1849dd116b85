"""Presets of the rotating LiDAR and their per-laser tables: real units, each citing its source.

This module owns :data:`PRESETS` (setting values of each unit: rotation rate, azimuth step,
ranges, noise, return model) and :func:`preset_table` (the unit's per-laser
:class:`~.calibration.LaserTable`, read from ``tables/<preset>.json``). The sensor's
mechanics are in :mod:`.rotating`; it reads every per-laser fact through
:func:`preset_table` or a camera's imported ``calibration`` (:mod:`blensor_addon.io.calib`).

Tables (``tables/*.json``, converted from the vendors' published files; the JSON's
``source`` names repository, commit and path):

- ``vlp16``, ``vlp32c``, ``hdl32e``, ``hdl64e_s2``, ``vls128``: ros-drivers/velodyne
  ``velodyne_pointcloud/params/`` ``VLP16db.yaml``, ``VeloView-VLP-32C.yaml``, ``32db.yaml``,
  ``64e_s2.1-sztaki.yaml`` (a calibrated HDL-64E S2.1: azimuth corrections -9.62..+8.79 deg
  in this table's sign, i.e. ``rot_correction`` -8.79..+9.62 deg; beam origin offsets
  0.105..0.213 m vertical, +-0.026 m horizontal; distance corrections 1.24..1.55 m),
  ``VLS128.yaml``.
- ``os0_128``, ``os1_64``, ``os1_128``, ``os2_128``: sensor metadata of real units in
  ouster-lidar/ouster-sdk ``tests/`` (OS0-128: ``tests/pcaps/OS-0-128-U1_v2.3.0_1024x10.json``,
  elevations +45.75..-46.26 deg, azimuth offsets -11.35..+11.24 deg, beam origin 27.67 mm).
- ``pandar64``: HesaiTechnology/HesaiLidar_General_ROS ``config/Pandar64.csv``;
  ``pandarxt32``: tier4/nebula ``calibration/PandarXT32.csv`` (a unit's angle correction;
  the Hesai driver ships only the design angles for it).

Vertical beam-origin offsets (``vert_offset_m``, a shift up the spin axis: ``extra["vert_offset_axis"] =
"z"``; setting ``vertical_offsets``): VLP-16 from its User Manual 63-9243 Rev D, Table 9-1 (11.2 mm at
-15 deg .. -11.2 mm at +15 deg), HDL-32E from Velodyne's envelope drawing 86-0106 Rev B, page 2 (17.17 mm
at -30.67 deg .. -5.45 mm at +10.67 deg; read through valgur/velodyne_decoder src/calib_db.cpp). The
VLP-32C's are published in no source found (velodyne_decoder derives them from a 42.4 mm focal distance
it does not cite): its table has none. The ROS YAMLs hold zeros for all three.

Firing times within a cycle (``firing_s``, ``cycle_s``): VLP-16 manual and velodyne_pointcloud
``rawdata.cc`` (2.304 us apart, 55.296 us); VLP-32C from the driver's table (pairs, 2.304 us,
55.296 us); HDL-32E from the HDL-32E manual (1.152 us apart, 46.08 us; the driver's table fires
pairs, a copy of its VLP-32C table); HDL-64E S2 manual appendix G (0.728 us, blocks in unison);
VLS-128 from the driver (``rawdata.h``: 2.665 us per group of 8, 53.3 us); Ouster: a column
fires at once; Hesai from the drivers' offset tables (Pandar64 ``laser64Offset_``, 55.56 us;
PandarXT-32 ``laserXTOffset``, 50 us).

Preset values: a Velodyne's azimuth step is one firing cycle at the preset's rate
(``cycle_s * 360 deg * rotation_speed``: HDL-32E 46.08 us -> 0.165888 deg at 10 Hz, 2170
columns, 69,440 points per turn, instead of the datasheet's rounded 0.16 deg); Hesai's are the
datasheets' horizontal resolutions at 10 Hz (Pandar64 0.2 deg, PandarXT-32 0.18 deg); Ouster's
is 360 deg / 1024 columns (lidar mode 1024x10; :data:`OUSTER_LIDAR_MODES` lists the others
a user may choose). Only the preset's step is the unit's: a user may change it (the grid
cast is then ``360 / angle_resolution`` columns a turn), except with an Ouster table, whose
grid must be a lidar mode. Velodyne presets sweep the full turn 0..360 deg, Ouster's
-180..180 deg. ``max_range`` from the datasheets;
``min_range``: Velodyne's datasheets give none, so the ROS driver's default (0.4 m,
velodyne_pointcloud ``launch/VLP16_points.launch``, ``32e_points.launch``,
``VLP-32C_points.launch``, ``VLS128_points.launch``, ``64e_S3.launch``); Ouster 0.3 m (the
minimum range of Rev 6 and earlier sensors, Ouster firmware user manual, "Minimum Range
Threshold"); Hesai: tier4/nebula ``pandar_64.hpp`` (0.3 m), ``pandar_xt32.hpp`` (0.05 m).
Every real preset detects with the radiometric return model (:mod:`.radiometry`: received
power, detection probability and range noise from the unit's figures in
``core/tables/radiometry.json``). The older models stay selectable with the preset's values:
Ouster and Hesai presets carry seed 002's linear model (Eq. 4-5: ``R0 cos(theta) >= ref_max *
d / max_range``): OS0-128 50 m at 80 % (seed 002 section III, OS0 datasheet rev05), OS1 120 m at
80 % (OS1 datasheet), OS2 240 m at 80 % (OS2 datasheet); their ``ref_dist``, ``ref_limit``,
``ref_slope`` give the same threshold under the limit model (without the cosine). Velodyne
presets carry seed 000's limit model (Eq. 1: 10 % at 50 m, +0.01 per metre).

Azimuth sign of the tables (:mod:`blensor_addon.io.calib`): ``azimuth_deg[k]`` is the column's
yaw minus laser k's yaw (deg, counter-clockwise seen from above): Velodyne ``-rot_correction``,
Ouster ``beam_azimuth_angles``, Hesai ``Azimuth``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..settings import Preset

if TYPE_CHECKING:
    from .calibration import LaserTable

#: Per-laser distance bias eps_bias,i of seed 000 Eq. 2 (the original's "fixed randomized
#: array for reproducibility"), m; ``bias_distribution="table"`` of ``hdl64e_s2`` draws it.
HDL64E_S2_BIAS_M = (
    0.023188431056485468, 0.018160539830319688, -0.082857233607375583, -0.064524698320918547,
    -0.093271246114693618, 0.043527643100361682, 0.02964170651252759, 0.022130151884228375,
    0.057142456134798118, -0.0022902380317122851, 0.0067235936679492184, -0.036271973173879445,
    0.017223035592365758, -0.077567037832670549, -0.045212530018321921, -0.071407355488847954,
    -0.044010545427414234, -0.13100196824243787, 0.06562213285464942, 0.072876545417746588,
    0.02948486101287804, -0.0549980634164711, 0.0017215074797752329, 0.011024793340907989,
    -0.031627028532767984, -0.0015734962901194415, -0.036013321659115423, 0.10758083132777119,
    -0.08155406184051478, 0.042643613869132221, -0.0084507159317202072, -0.13509680354593059,
    -0.011626407663142539, -0.016650248443238872, -0.089390919093335297, 0.058944202109090765,
    -0.0017922326055001933, 0.17981608947109032, -0.08508532554265108, 0.073143736372048768,
    -0.048115410987441362, -0.042704861239692658, 0.035086496817459518, 0.064943607611183743,
    0.010321640735410247, -0.088027285788537329, 0.064927912617182712, -0.0063073544055394313,
    0.0094236036091259051, -0.012188267349634907, -0.030570059320519608, -0.022883795755219431,
    -0.01536736072143652, 0.091570972465821771, -0.09083766812058082, 0.14380982060713934,
    0.01373428104250375, -0.014464880110123654, -0.031761209027541266, -0.01571113598069827,
    -0.14107381715154735, -0.064936750764770235, 0.034911820770082327, 0.065682492298063416,
)

#: the full turn 0..360 deg: choosing a Velodyne preset after an Ouster one (-180..180) resets the sector
_VELODYNE = {"noise_mu": 0.0, "noise_sigma": 0.01, "bias_distribution": "table", "bias_sigma": 0.078,
             "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.01, "rotation_direction": "cw",
             "min_range": 0.4, "return_model": "radiometric", "start_angle": 0.0, "end_angle": 360.0,
             "wavelength": 903.0, "returns": "strongest"}
_VELODYNE_SOURCE = ("min_range: velodyne_pointcloud launch default (the datasheet gives none); "
                    "noise: seed 000; return modes: strongest, last, dual (the user manuals' Laser Return "
                    "Modes)")


def _step(cycle_s: float, hz: float = 10.0) -> float:
    """Azimuth step (deg) of one firing cycle ``cycle_s`` (s) at ``hz``."""
    return round(cycle_s * 360.0 * hz, 7)


def _linear(max_range: float, ref_max: float, min_range: float, noise_sigma: float) -> dict[str, object]:
    """The unit's values with the radiometric return model, and those of seed 002's linear
    return model (Eq. 5) for a unit that sees ``ref_max`` at ``max_range`` (used when
    ``return_model=linear`` is chosen); the limit model's values give the same threshold
    (without cos)."""
    return {"max_range": max_range, "min_range": min_range, "return_model": "radiometric", "ref_max": ref_max,
            "ref_dist": 0.0, "ref_limit": 0.0, "ref_slope": round(ref_max / max_range, 9),
            "noise_mu": 0.0, "noise_sigma": noise_sigma, "bias_distribution": "gaussian", "bias_sigma": 0.0,
            "rotation_direction": "cw", "start_angle": 0.0, "end_angle": 360.0}


#: Ouster's lidar modes (columns per turn, Hz): ouster-lidar/ouster-sdk ``lidar_mode``
#: (ouster_client/include/ouster/types.h: MODE_512x10 .. MODE_4096x5, "4096x5 only available on
#: select sensors"); a rotating sensor with an Ouster table is held to them (rotating.check_ouster_mode)
OUSTER_LIDAR_MODES = ((512, 10), (512, 20), (1024, 10), (1024, 20), (2048, 10), (4096, 5))

#: Ouster's column order: with a cw spin, column m of a turn from -180 to 180 deg sits at psi =
#: 180 - m 360 / W, Ouster's encoder angle 2 pi (1 - m / W) in its lidar frame (turned 180 deg
#: from the sensor frame by lidar_to_sensor_transform): ouster-ros's column m
_OUSTER_SECTOR = {"start_angle": -180.0, "end_angle": 180.0, "wavelength": 865.0, "returns": "strongest"}
_OUSTER_MIN = 0.3  # Ouster firmware user manual, "Minimum Range Threshold": the Rev 6 and earlier minimum
_OUSTER = "Ouster firmware user manual (minimum range 0.3 m of Rev 6 and earlier sensors)"

#: The VLS-128's firing sequence (s; 20 firing groups of 8 lasers, 16 firing and 4 recharging) by
#: firmware (setting ``vls128_firmware``): ``old`` (before 5.2.3.0) 53.3 us, 2.665 us per group (VLS-128
#: User Manual 63-9483 Rev A, section 9.5: "the 53.3 us firing sequence"; velodyne_pointcloud
#: rawdata.h); ``new`` (5.2.3.0 and later) 57.8 us, 2.89 us per group (the manual's Rev 4, as
#: valgur/velodyne_decoder src/packet_decoder.cpp quotes it from VeloView's VelodynePlugin: "2.66 usec in
#: firmware v5.1.7.1 (Rev3 of the manual), 2.89 usec since firmware v5.2.3.0 (Rev4 of the manual)"; Rev 4
#: itself not read). The unit's step at 10 Hz is one sequence: 0.19188 deg (1876.2 columns a turn) or
#: 0.20808 deg (1730.1); the preset keeps the old firmware's.
VLS128_SEQUENCE_S = {"old": 53.3e-6, "new": 57.8e-6}

#: Hesai units: 905 nm (assumed: the manuals' laser section not checked)
_HESAI = {"wavelength": 905.0, "returns": "strongest"}

#: the order is the order of the stored enum (v0.1 files): append only
PRESETS: dict[str, Preset] = {
    "hdl64e_s2": Preset("Velodyne HDL-64E S2", {
        "angle_resolution": 0.1728, "rotation_speed": 10.0, "max_range": 120.0, **_VELODYNE},
        "ros-drivers/velodyne velodyne_pointcloud/params/64e_s2.1-sztaki.yaml (a calibrated unit); "
        "0.1728 deg at 10 Hz, 120 m, bias table: reference 6.1; " + _VELODYNE_SOURCE),
    "hdl32e": Preset("Velodyne HDL-32E", {
        "angle_resolution": _step(46.08e-6), "rotation_speed": 10.0, "max_range": 100.0, **_VELODYNE,
        "vertical_offsets": True},
        "ros-drivers/velodyne velodyne_pointcloud/params/32db.yaml; HDL-32E manual (46.08 us firing cycle: "
        "0.165888 deg at 10 Hz; 1.152 us per laser); vertical beam offsets: HDL-32E envelope drawing 86-0106 "
        "Rev B, page 2, as valgur/velodyne_decoder src/calib_db.cpp lists them; HDL-32E datasheet (100 m); "
        + _VELODYNE_SOURCE),
    "vlp16": Preset("Velodyne VLP-16", {
        "angle_resolution": _step(55.296e-6), "rotation_speed": 10.0, "max_range": 100.0, **_VELODYNE,
        "vertical_offsets": True},
        "ros-drivers/velodyne velodyne_pointcloud/params/VLP16db.yaml; VLP-16 User Manual 63-9243 Rev D "
        "(55.296 us firing sequence: 0.199066 deg at 10 Hz; vertical beam offsets: Table 9-1); VLP-16 "
        "datasheet (100 m); " + _VELODYNE_SOURCE),
    "generic": Preset("Generic rotating LiDAR", {}, "elevations typed by the user"),
    "os0_128": Preset("Ouster OS0-128", {
        "angle_resolution": 360.0 / 1024.0, "rotation_speed": 10.0,
        **_linear(50.0, 0.8, _OUSTER_MIN, 0.01), **_OUSTER_SECTOR},
        "ouster-lidar/ouster-sdk tests/pcaps/OS-0-128-U1_v2.3.0_1024x10.json (unit 122150000150); "
        "seed 002 section III and the OS0 datasheet rev05 it cites (50 m at 80 %); " + _OUSTER),
    # -- real units appended later (the stored enum index is the position here) -------------
    "vlp32c": Preset("Velodyne VLP-32C", {
        "angle_resolution": _step(55.296e-6), "rotation_speed": 10.0, "max_range": 200.0, **_VELODYNE},
        "ros-drivers/velodyne velodyne_pointcloud/params/VeloView-VLP-32C.yaml; firing: velodyne_pointcloud "
        "rawdata.cc (55.296 us: 0.199066 deg at 10 Hz); VLP-32C datasheet (200 m); " + _VELODYNE_SOURCE),
    "vls128": Preset("Velodyne VLS-128", {
        "angle_resolution": _step(53.3e-6), "rotation_speed": 10.0, "max_range": 245.0, **_VELODYNE,
        "beam_divergence": 0.003, "beam_divergence_vertical": 0.0015, "vls128_firmware": "old"},
        "ros-drivers/velodyne velodyne_pointcloud/params/VLS128.yaml; firing: velodyne_pointcloud rawdata.h "
        "(53.3 us: 0.19188 deg at 10 Hz, firmware before 5.2.3.0; vls128_firmware=new: 57.8 us, VLS-128 "
        "User Manual Rev 4 as valgur/velodyne_decoder src/packet_decoder.cpp quotes it); Alpha Prime "
        "(VLS-128) datasheet (245 m); beam divergence 3.0 mrad horizontal, 1.5 mrad vertical: VLS-128 User "
        "Manual, Appendix F, Table F-1; " + _VELODYNE_SOURCE),
    "os1_64": Preset("Ouster OS1-64", {
        "angle_resolution": 360.0 / 1024.0, "rotation_speed": 10.0,
        **_linear(120.0, 0.8, _OUSTER_MIN, 0.015), **_OUSTER_SECTOR},
        "ouster-lidar/ouster-sdk tests/metadata/2_1_2_os1-991913000010-64.json (unit 991913000010); OS1 "
        "datasheet (120 m at 80 %, repeatability +-1.5 cm at SNR > 250); " + _OUSTER),
    "os1_128": Preset("Ouster OS1-128", {
        "angle_resolution": 360.0 / 1024.0, "rotation_speed": 10.0,
        **_linear(120.0, 0.8, _OUSTER_MIN, 0.015), **_OUSTER_SECTOR},
        "ouster-lidar/ouster-sdk tests/pcaps/OS-1-128_v2.3.0_1024x10.json (unit 122201000998); OS1 datasheet "
        "(120 m at 80 %, repeatability +-1.5 cm at SNR > 250); " + _OUSTER),
    "os2_128": Preset("Ouster OS2-128", {
        "angle_resolution": 360.0 / 1024.0, "rotation_speed": 10.0,
        **_linear(240.0, 0.8, _OUSTER_MIN, 0.01), **_OUSTER_SECTOR},
        "ouster-lidar/ouster-sdk tests/pcaps/OS-2-128-U1_v2.3.0_1024x10.json (unit 992210000957); OS2 "
        "datasheet rev06 (240 m at 80 %); " + _OUSTER),
    # Hesai steps: the datasheets' horizontal resolutions at 10 Hz (Pandar64 0.2 deg, PandarXT-32
    # 0.18 deg); the firing blocks give 0.200016 deg (55.56 us) and 0.18 deg (50 us)
    "pandar64": Preset("Hesai Pandar64", {
        "angle_resolution": 0.2, "rotation_speed": 10.0, **_linear(200.0, 0.1, 0.3, 0.02), **_HESAI},
        "HesaiTechnology/HesaiLidar_General_ROS config/Pandar64.csv, firing times from "
        "pandarGeneral_internal.cc (55.56 us blocks: 0.200016 deg at 10 Hz); 0.2 deg: the Pandar64 "
        "datasheet's horizontal resolution at 10 Hz; ranges 0.3-200 m: tier4/nebula "
        "pandar_64.hpp; 200 m at 10 % as the Pandar40 family's channel table gives its middle channels (the "
        "Pandar64 manual's own figure not checked), noise +-2 cm"),
    "pandarxt32": Preset("Hesai PandarXT-32", {
        "angle_resolution": 0.18, "rotation_speed": 10.0, **_linear(120.0, 0.15, 0.05, 0.01), **_HESAI},
        "tier4/nebula calibration/PandarXT32.csv, firing times from HesaiLidar_General_ROS pandarXT.h (50 us "
        "blocks: 0.18 deg at 10 Hz, the PandarXT-32 datasheet's horizontal resolution at 10 Hz); 120 m "
        "instrument range, 80 m at 10 % for the central channels as the PandarXT-16 manual's channel "
        "table gives them (ref_max 0.15 at 120 m), +-1 cm; min_range: tier4/nebula pandar_xt32.hpp"),
}


#: The return modes (:data:`~.returns.RETURN_MODES`) each unit offers, its default first (documentation:
#: the settings do not refuse another mode). Velodyne: the user manuals' "Laser Return Modes" (strongest,
#: last, dual; VLP-16 User Manual 63-9243 Rev D and VLP-32C User Manual 63-9325 Rev C, chapter 9: in dual
#: mode the strongest and the last, the second strongest when the strongest is the last; HDL-64E S3 manual
#: 63-HDL64ES3 Rev K, status byte "Multiple Return Status": strongest, last, both); Ouster: firmware user
#: manual, "Return Order" (the sensor keeps the two strongest returns of each beam; the single return
#: profile reports the strongest, RNG19_RFL8_SIG16_NIR16_DUAL both); Hesai: PandarXT user manual,
#: section 3 (strongest, last, dual = last and strongest, the second strongest when they coincide; the
#: PandarXT-16 manual adds first and the last-and-first and first-and-strongest pairs, which
#: :data:`~.returns.RETURN_MODES` has no single name for).
RETURN_MODES_OF = {
    **{k: ("strongest", "last", "dual") for k in ("hdl64e_s2", "hdl32e", "vlp16", "vlp32c", "vls128")},
    **{k: ("strongest", "dual_ouster") for k in ("os0_128", "os1_64", "os1_128", "os2_128")},
    "pandar64": ("strongest", "last", "dual"),
    "pandarxt32": ("strongest", "last", "first", "dual"),
    "generic": ("strongest", "last", "first", "dual", "dual_ouster", "all"),
}


def preset_table(preset: str, elevations: tuple[float, ...] = ()) -> LaserTable:
    """The :class:`~.calibration.LaserTable` of preset ``preset``: the packaged
    ``tables/<preset>.json`` (cached), or for ``generic`` one built from the typed
    ``elevations`` (deg; no azimuth offsets, all lasers firing at once). The rotating
    sensor reads every per-laser fact through this function (or the camera's imported
    ``calibration``).

    Raises:
        SettingsError (``preset``): not a preset of the rotating LiDAR;
        (``elevations``) generic with no elevation.
    """
    from ..errors import SettingsError, did_you_mean
    from .calibration import LaserTable, packaged_table
    if preset not in PRESETS:
        raise SettingsError("preset", "one of " + ", ".join(PRESETS), preset, did_you_mean(preset, PRESETS))
    if preset == "generic":
        if not len(elevations):
            raise SettingsError("elevations", "at least one laser elevation (deg)", tuple(elevations))
        return LaserTable(vendor="generic", model=PRESETS[preset].label, source=PRESETS[preset].source,
                          elevation_deg=tuple(float(e) for e in elevations))
    return packaged_table(preset)


def preset_bias_table(preset: str) -> tuple[float, ...] | None:
    """The preset's calibrated per-laser distance bias (m, seed 000 Eq. 2), used by
    ``bias_distribution="table"``: :data:`HDL64E_S2_BIAS_M` for ``hdl64e_s2``, else None."""
    return HDL64E_S2_BIAS_M if preset == "hdl64e_s2" else None


__all__ = ["PRESETS", "RETURN_MODES_OF", "OUSTER_LIDAR_MODES", "preset_table", "preset_bias_table",
           "HDL64E_S2_BIAS_M", "VLS128_SEQUENCE_S"]
