"""Settings of the rotating LiDAR, validated.

Names, meanings and defaults follow the original BlenSor Velodyne sensor
(``shared/reference/blensor-original.md`` sections 6.1 and 7; seed 000 sections 3.2 and
3.5). Units: degrees for angles a user types, metres, hertz.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .errors import SettingsError
from .presets import PRESETS, preset_bias_m, preset_elevations_deg

BIAS_DISTRIBUTIONS = ("table", "gaussian", "laplace")
VISIBILITIES = ("render", "viewport")
#: Seeds are stored in a Blender integer property (signed 32-bit).
MAX_SEED = 2**31 - 1
FRAMES_OF_REFERENCE = ("sensor", "world")
MAX_LASERS = 1024


def parse_elevations(text: str) -> tuple[float, ...]:
    """Parse a comma-separated list of laser elevations in degrees.

    Returns:
        tuple of floats (deg), in the order given (the order defines the channel numbers).
    Raises:
        SettingsError (setting ``elevations``) on an empty list, a value that is not a
        number, or a value outside [-90, 90] deg.
    """
    allowed = "a comma-separated list of 1 to 1024 numbers in [-90, 90] deg"
    parts = [p.strip() for p in str(text).replace(";", ",").split(",") if p.strip()]
    if not parts or len(parts) > MAX_LASERS:
        raise SettingsError("elevations", allowed, text)
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise SettingsError("elevations", allowed, text) from None
    if not all(math.isfinite(v) and -90.0 <= v <= 90.0 for v in values):
        raise SettingsError("elevations", allowed, text)
    return values


@dataclass(frozen=True)
class LidarSettings:
    """Settings of one rotating LiDAR (seed 000 section 3.2; reference section 6.1).

    Attributes (units):
        preset: ``"hdl64e_s2"``, ``"hdl32e"``, ``"vlp16"`` or ``"generic"``.
        elevations: laser elevations (deg) for ``generic``; ignored by the other presets.
        angle_resolution: azimuth step between columns (deg), in (0, 360].
        rotation_speed: spin rate (Hz), in (0, 1000].
        max_range: farthest accumulated path that returns (m), in (0, 100000].
        start_angle, end_angle: azimuth sector (deg); start < end, end - start <= 360.
        noise_mu, noise_sigma: per-ray Gaussian range noise (m), sigma >= 0.
        bias_distribution: per-laser distance bias: ``"table"`` (the preset's calibrated
            table; presets without one draw Gaussian biases), ``"gaussian"`` or
            ``"laplace"`` (scale ``bias_sigma``), drawn from ``seed``.
        bias_sigma: spread of the per-laser bias (m), >= 0 (original 0.078).
        ref_dist, ref_limit, ref_slope: reflectivity limit (seed 000 Eq. 1): a hit at
            accumulated range d returns iff reflectivity > r_min(d), r_min = -1 for
            d < ref_dist, else ref_limit + ref_slope (d - ref_dist). Units m, 1, 1/m.
        seed: seed of every random draw, integer in [0, 2**31 - 1] (the range of the
            Blender property that stores it).
        max_bounces: mirror reflections followed per ray, in [0, 64].
        visibility: ``"render"`` (default: scan what renders, as the original, reference
            section 3.2) or ``"viewport"`` (what the viewport shows).
    """

    preset: str = "hdl64e_s2"
    elevations: tuple[float, ...] = (0.0,)
    angle_resolution: float = 0.1728
    rotation_speed: float = 10.0
    max_range: float = 120.0
    start_angle: float = 0.0
    end_angle: float = 360.0
    noise_mu: float = 0.0
    noise_sigma: float = 0.01
    bias_distribution: str = "table"
    bias_sigma: float = 0.078
    ref_dist: float = 50.0
    ref_limit: float = 0.1
    ref_slope: float = 0.01
    seed: int = 0
    max_bounces: int = 8
    visibility: str = "render"

    def validate(self) -> "LidarSettings":
        """Check every setting; return self.

        Raises:
            SettingsError naming the first bad setting and its allowed range.
        """
        def finite(name: str, value: float, allowed: str, lo=-math.inf, hi=math.inf,
                   lo_open=False) -> None:
            ok = isinstance(value, (int, float)) and math.isfinite(value)
            ok = ok and (value > lo if lo_open else value >= lo) and value <= hi
            if not ok:
                raise SettingsError(name, allowed, value)

        if self.preset not in PRESETS:
            raise SettingsError("preset", "one of " + ", ".join(PRESETS), self.preset)
        if self.preset == "generic":
            if not self.elevations or len(self.elevations) > MAX_LASERS or not all(
                    isinstance(v, (int, float)) and math.isfinite(v) and -90 <= v <= 90
                    for v in self.elevations):
                raise SettingsError("elevations", "1 to 1024 angles in [-90, 90] deg",
                                    self.elevations)
        finite("angle_resolution", self.angle_resolution, "in (0, 360] deg", 0.0, 360.0, True)
        finite("rotation_speed", self.rotation_speed, "in (0, 1000] Hz", 0.0, 1000.0, True)
        finite("max_range", self.max_range, "in (0, 100000] m", 0.0, 1e5, True)
        finite("start_angle", self.start_angle, "in [-360, 360] deg", -360.0, 360.0)
        finite("end_angle", self.end_angle, "in [-360, 720] deg and greater than start_angle",
               -360.0, 720.0)
        if not (self.start_angle < self.end_angle <= self.start_angle + 360.0):
            raise SettingsError("end_angle", f"in ({self.start_angle}, {self.start_angle + 360.0}] deg"
                                " (greater than start_angle, at most one turn)", self.end_angle)
        finite("noise_mu", self.noise_mu, "a finite number of metres")
        finite("noise_sigma", self.noise_sigma, "a finite number >= 0 m", 0.0)
        if self.bias_distribution not in BIAS_DISTRIBUTIONS:
            raise SettingsError("bias_distribution", "one of " + ", ".join(BIAS_DISTRIBUTIONS),
                                self.bias_distribution)
        finite("bias_sigma", self.bias_sigma, "a finite number >= 0 m", 0.0)
        finite("ref_dist", self.ref_dist, "a finite number >= 0 m", 0.0)
        finite("ref_limit", self.ref_limit, "a finite number")
        finite("ref_slope", self.ref_slope, "a finite number (1/m)")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) \
                or not 0 <= int(self.seed) <= MAX_SEED:
            raise SettingsError("seed", f"an integer in [0, {MAX_SEED}]", self.seed)
        if not isinstance(self.max_bounces, (int, np.integer)) or not 0 <= int(self.max_bounces) <= 64:
            raise SettingsError("max_bounces", "an integer in [0, 64]", self.max_bounces)
        if self.visibility not in VISIBILITIES:
            raise SettingsError("visibility", "one of " + ", ".join(VISIBILITIES), self.visibility)
        return self

    def replace(self, **changes) -> "LidarSettings":
        """Copy with some fields changed (not validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def elevations_deg(self) -> np.ndarray:
        """(L,) float64 laser elevations in degrees; channel k is row k."""
        e = preset_elevations_deg(self.preset)
        return np.asarray(self.elevations, dtype=np.float64) if e is None else e

    @property
    def num_lasers(self) -> int:
        """Number of lasers (channels) L."""
        return int(self.elevations_deg.shape[0])

    def laser_bias(self) -> np.ndarray:
        """Per-laser distance bias eps_bias,i of seed 000 Eq. 2: (L,) float64 metres.

        ``table`` uses the preset's calibrated table where it has one (HDL-64E S2);
        otherwise biases are drawn from ``N(0, bias_sigma)`` or ``Laplace(0, bias_sigma)``
        with a generator seeded by ``seed`` alone, so they stay the same in every frame
        ("This bias remains the same in each rotation", seed 000 section 3.2). The
        original drew a shared, unseeded table and gave the HDL-32E the first 32 HDL-64E
        entries (reference section 14.13); both are fixed here.
        """
        table = preset_bias_m(self.preset)
        if self.bias_distribution == "table" and table is not None:
            return table.copy()
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(self.seed), 0xB1A5])))
        if self.bias_distribution == "laplace":
            return rng.laplace(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
                else np.zeros(self.num_lasers)
        return rng.normal(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
            else np.zeros(self.num_lasers)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of every setting plus the resolved elevation table."""
        d = dataclasses.asdict(self)
        d["elevations"] = [float(v) for v in self.elevations_deg]
        return d
