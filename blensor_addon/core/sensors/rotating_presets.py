"""Presets of the rotating LiDAR and their per-laser tables (facts from the vendors'
datasheets, manuals and published calibration files; each preset cites its source).

The sensor's mechanics are in :mod:`.rotating`; the per-laser tables of real units are
:class:`~.calibration.LaserTable` files in ``tables/`` (:func:`~.calibration.packaged_table`).
"""
from __future__ import annotations

from ..settings import Preset

HDL64E_S2_ELEVATIONS_DEG = (
    -7.1143909, -6.8259001, 0.33287099, 0.66078597, -6.4908152, -6.0973902, -8.5282297, -8.1613369,
    -5.8425112, -5.4713659, -7.8512449, -7.5291781, -3.049051, -2.7686839, -5.053277, -4.7975101,
    -2.382966, -2.114002, -4.4367881, -4.0757122, -1.727937, -1.447062, -3.7842851, -3.4226439,
    1.023782, 1.339875, -0.99049801, -0.69775897, 1.690992, 1.971796, -0.346425, -0.041912999,
    -22.617477, -22.217125, -11.351527, -10.776211, -21.743774, -21.196053, -24.893286, -24.263714,
    -20.664749, -20.016045, -23.745707, -23.065102, -16.414013, -16.014454, -19.424471, -19.10091,
    -15.493717, -15.014058, -18.650002, -18.154394, -14.466367, -13.827651, -17.592127, -16.994211,
    -10.334768, -9.8352394, -13.229812, -12.896399, -9.3798056, -8.8888798, -12.372269, -11.969375,
)

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

HDL32E_ELEVATIONS_DEG = (
    -30.67, -9.33, -29.33, -8.00, -28.00, -6.66, -26.66, -5.33, -25.33, -4.00, -24.00, -2.67,
    -22.67, -1.33, -21.33, 0.00, -20.00, 1.33, -18.67, 2.67, -17.33, 4.00, -16.00, 5.33,
    -14.67, 6.67, -13.33, 8.00, -12.00, 9.33, -10.67, 10.67,
)

VLP16_ELEVATIONS_DEG = (-15.0, 1.0, -13.0, 3.0, -11.0, 5.0, -9.0, 7.0,
                        -7.0, 9.0, -5.0, 11.0, -3.0, 13.0, -1.0, 15.0)

#: Ouster OS0-128: 128 beams spaced uniformly over the 90 deg vertical FOV (+45 deg first)
OS0_128_ELEVATIONS_DEG = tuple(45.0 - 90.0 * k / 127.0 for k in range(128))

OS0_128_AZIMUTH_OFFSETS_DEG = (
    2.95, 0.852, -1.245, -3.343, 2.959, 0.862, -1.236, -3.334, 2.969, 0.871, -1.227, -3.324, 2.978, 0.88, -1.217, -3.315,
    2.988, 0.89, -1.208, -3.305, 2.997, 0.899, -1.198, -3.296, 3.006, 0.909, -1.189, -3.287, 3.016, 0.918, -1.18, -3.277,
    3.025, 0.927, -1.17, -3.268, 3.034, 0.937, -1.161, -3.259, 3.044, 0.946, -1.152, -3.249, 3.053, 0.955, -1.142, -3.24,
    3.062, 0.965, -1.133, -3.23, 3.072, 0.974, -1.123, -3.221, 3.081, 0.984, -1.114, -3.212, 3.091, 0.993, -1.105, -3.202,
    3.1, 1.002, -1.095, -3.193, 3.109, 1.012, -1.086, -3.184, 3.119, 1.021, -1.077, -3.174, 3.128, 1.03, -1.067, -3.165,
    3.138, 1.04, -1.058, -3.155, 3.147, 1.049, -1.048, -3.146, 3.156, 1.059, -1.039, -3.137, 3.166, 1.068, -1.03, -3.127,
    3.175, 1.077, -1.02, -3.118, 3.184, 1.087, -1.011, -3.109, 3.194, 1.096, -1.002, -3.099, 3.203, 1.105, -0.992, -3.09,
    3.212, 1.115, -0.983, -3.08, 3.222, 1.124, -0.973, -3.071, 3.231, 1.134, -0.964, -3.062, 3.241, 1.143, -0.955, -3.052,
)

#: Firing sequences (continuous time): (time between firings s, lasers per sequence); laser
#: k fires ``(k mod group) * step`` after its column's time.
#: - VLP-16 user manual, "Firing Sequence Timing": 16 firings 2.304 us apart, recharge,
#:   55.296 us per sequence; the data point index is the laser id (our channel order).
#: - HDL-32E user manual: 32 firings 1.152 us apart, 46.08 us per sequence.
#: - HDL-64E S2 user manual, appendix G (Ethernet transit timing table): the upper block
#:   (lasers 0-31) and the lower block (32-63) fire in unison, laser k with laser 32 + k;
#:   consecutive lasers of a block are 0.728 us apart (419.30, 418.57, 417.84, ... us).
#: - Ouster OS0: every channel of a column fires at the column's time (per-beam azimuth
#:   offsets instead), so no entry.
FIRING = {"vlp16": (2.304e-6, 16), "hdl32e": (1.152e-6, 32), "hdl64e_s2": (0.728e-6, 32)}

#: preset id -> per-laser tables (elevations deg, distance bias m or None, azimuth offsets deg
#: or None, beam origin offset m)
TABLES: dict[str, dict] = {
    "hdl64e_s2": {"elevations": HDL64E_S2_ELEVATIONS_DEG, "bias": HDL64E_S2_BIAS_M},
    "hdl32e": {"elevations": HDL32E_ELEVATIONS_DEG},
    "vlp16": {"elevations": VLP16_ELEVATIONS_DEG},
    "generic": {"elevations": None},
    "os0_128": {"elevations": OS0_128_ELEVATIONS_DEG, "azimuth": OS0_128_AZIMUTH_OFFSETS_DEG,
                "beam_origin": 0.02767},
}

_VELODYNE = {"noise_mu": 0.0, "noise_sigma": 0.01, "bias_distribution": "table", "bias_sigma": 0.078,
             "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.01}

#: the order is the order of the stored enum (v0.1 files): append only
PRESETS: dict[str, Preset] = {
    "hdl64e_s2": Preset("Velodyne HDL-64E S2", {"angle_resolution": 0.1728, "rotation_speed": 10.0,
                                                "max_range": 120.0, **_VELODYNE}, "reference 6.1"),
    "hdl32e": Preset("Velodyne HDL-32E", {"angle_resolution": 0.16, "rotation_speed": 10.0, "max_range": 100.0,
                                          **_VELODYNE}, "reference 6.1; HDL-32E datasheet"),
    "vlp16": Preset("Velodyne VLP-16", {"angle_resolution": 0.2, "rotation_speed": 10.0, "max_range": 100.0,
                                        **_VELODYNE}, "VLP-16 datasheet"),
    "generic": Preset("Generic rotating LiDAR", {}, "elevations typed by the user"),
    "os0_128": Preset("Ouster OS0-128", {"angle_resolution": 360.0 / 1024.0, "rotation_speed": 10.0,
                                         "max_range": 50.0, "start_angle": 0.0, "end_angle": 360.0,
                                         "noise_mu": 0.0, "noise_sigma": 0.01, "bias_distribution": "gaussian",
                                         "bias_sigma": 0.0, "ref_dist": 0.0, "ref_limit": 0.0,
                                         "ref_slope": 0.016}, "seed 002; OS0 datasheet; Ouster metadata"),
}


def preset_table(preset: str, elevations: tuple = ()) -> "LaserTable":
    """The :class:`~.calibration.LaserTable` of preset ``preset`` (``generic``: one built
    from the typed ``elevations``, deg). The rotating sensor reads every per-laser fact
    through this function (or the camera's imported ``calibration``).

    Raises:
        SettingsError (``preset``): not a preset of the rotating LiDAR.
    """
    from ..errors import SettingsError
    from .calibration import LaserTable
    if preset not in TABLES:
        raise SettingsError("preset", "one of " + ", ".join(TABLES), preset)
    t = TABLES[preset]
    elev = tuple(elevations) if t["elevations"] is None else t["elevations"]
    step, group = FIRING.get(preset, (0.0, 1))
    vendor = "ouster" if preset.startswith("os") else "generic" if preset == "generic" else "velodyne"
    return LaserTable(vendor=vendor, model=PRESETS[preset].label, source=PRESETS[preset].source,
                      elevation_deg=elev, azimuth_deg=t.get("azimuth", ()),
                      beam_origin_m=t.get("beam_origin", 0.0),
                      firing_s=tuple((k % group) * step for k in range(len(elev))) if step else (),
                      cycle_s=step * group)
