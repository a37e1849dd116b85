"""Rotating LiDAR presets: laser elevation tables, per-laser distance biases, defaults.

Sources:
- Velodyne HDL-64E S2: the 64 calibrated elevations and 64 per-laser distance biases of
  the original BlenSor (``shared/reference/blensor-original.md`` section 6.1, taken from
  a Velodyne calibration file; seed 000, section 5: "the pitch angle of the laser
  sensors used by Velodyne is not evenly spaced"). The bias table is the original's
  "fixed randomized array for reproducibility" (seed 000 Eq. 2, eps_bias,i).
- Velodyne HDL-32E: the original's 32-entry elevation table (reference section 6.1);
  10 Hz, 0.16 deg azimuth step at 10 Hz and 100 m from the HDL-32E datasheet.
- Velodyne VLP-16: 16 lasers from -15 to +15 deg in 2 deg steps, in the datasheet's
  firing order (laser id 0 = -15, 1 = +1, 2 = -13, ...); 0.2 deg at 10 Hz, 100 m.

All angles in degrees here; callers convert to radians.
"""
from __future__ import annotations

import numpy as np

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

#: preset id -> (label, elevations in deg or None for user-defined, calibrated bias table or
#: None, defaults applied when the preset is chosen in the UI)
PRESETS: dict[str, dict] = {
    "hdl64e_s2": {
        "label": "Velodyne HDL-64E S2",
        "elevations": HDL64E_S2_ELEVATIONS_DEG,
        "bias": HDL64E_S2_BIAS_M,
        "defaults": {"angle_resolution": 0.1728, "rotation_speed": 10.0, "max_range": 120.0},
    },
    "hdl32e": {
        "label": "Velodyne HDL-32E",
        "elevations": HDL32E_ELEVATIONS_DEG,
        "bias": None,
        "defaults": {"angle_resolution": 0.16, "rotation_speed": 10.0, "max_range": 100.0},
    },
    "vlp16": {
        "label": "Velodyne VLP-16",
        "elevations": VLP16_ELEVATIONS_DEG,
        "bias": None,
        "defaults": {"angle_resolution": 0.2, "rotation_speed": 10.0, "max_range": 100.0},
    },
    "generic": {
        "label": "Generic rotating LiDAR",
        "elevations": None,
        "bias": None,
        "defaults": {},
    },
}


def preset_elevations_deg(preset: str) -> np.ndarray | None:
    """Elevation table of a preset: (L,) float64 degrees, or None for ``generic``."""
    e = PRESETS[preset]["elevations"]
    return None if e is None else np.asarray(e, dtype=np.float64)


def preset_bias_m(preset: str) -> np.ndarray | None:
    """Calibrated per-laser distance bias of a preset: (L,) float64 metres, or None."""
    b = PRESETS[preset]["bias"]
    return None if b is None else np.asarray(b, dtype=np.float64)
