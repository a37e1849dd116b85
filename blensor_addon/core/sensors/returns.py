"""Return physics shared by the LiDAR sensors (docs/physics.md): the settings every beam-casting
sensor has (:class:`ReturnSettings`), the returns one chunk of beams gives
(:class:`Returns`), and the random streams of the stages that draw.

A sensor whose settings class derives from :class:`ReturnSettings` (the rotating LiDAR,
the line scanner, the planar scanner) is traced beam by beam by
:meth:`~.sensor.Sensor.trace`:

1. the beam's footprint is sampled by sub-rays (:func:`~.beam.footprint`; one sub-ray,
   the beam's axis, when ``samples_per_beam`` is 1 or the divergence 0);
2. the scene layer casts them with ``split=True``: glass splits a path into its
   reflected and transmitted parts, a material's alpha lets a path pass on
   (:mod:`blensor_addon.raycast.trace`), every path end is a candidate return with its
   one-way transmission ``weight``;
3. the candidates are grouped into echoes along each beam (:func:`~.beam.form_returns`:
   ``divergence_algorithm``, ``echo_separation``);
4. the atmosphere attenuates them and adds its own returns (:func:`~.weather.apply`);
5. the sensor's detection model decides at the effective reflectivity that comes back
   (``Returns.returned``: seed 000 Eq. 1's limit, or seed 002 Eq. 4-5); among the echoes
   detected, the returns mode chooses by received power (:func:`~.beam.select_returns`:
   ``returns``, ``max_returns``), so an undetectable strongest echo does not hide a
   detectable one;
6. the intensity is the chosen model's (:func:`~.intensity.intensity`).

With every new setting at its default (one sub-ray, ``strongest``, ``lambert``,
``weather = none``) and a scene without glass or alpha, the returns, their order and
every output byte are those of the one-ray-per-beam (single-return) model the sensors had before.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Self, TypedDict, cast

import numpy as np

from ..errors import SettingsError
from ..ndtypes import F32, F64, I64, U8, Array, Bool
from ..settings import SensorSettings, setting

#: how a beam's sub-rays become its returns: ``echoes`` groups them along the beam
#: (the ``returns`` modes); seed 004's ``first`` (the nearest sub-ray's hit), ``average``
#: (one mixed range: the energy-weighted mean of every sub-ray's range, seed 000
#: section 6's mixed pixels) and ``random`` (one sub-ray drawn with probability
#: proportional to its energy)
DIVERGENCE_ALGORITHMS = ("echoes", "first", "average", "random")
#: which echoes a beam reports: Velodyne's single-return modes (``strongest``, ``last``),
#: ``first``, Velodyne's ``dual`` (strongest and last; the second strongest when they
#: coincide), Ouster's ``dual_ouster`` (strongest and second strongest), ``all`` (up to
#: ``max_returns``, nearest first)
RETURN_MODES = ("strongest", "last", "first", "dual", "dual_ouster", "all")
#: the modes that can give more than one return per beam
MULTI_RETURN_MODES = ("dual", "dual_ouster", "all")
#: ``lambert``: seed 002 Eq. 4 (R0 cos theta, what the single-return model gave);
#: ``radar``: the laser radar equation's received power (rho cos theta / r^2 times the
#: atmosphere's two-way transmission), scaled to the device's output
INTENSITY_MODELS = ("lambert", "radar")
WEATHERS = ("none", "fog", "rain")
#: largest full divergence angle (rad): 1 deg, Unity's cap (seed 004, Divergence Angle)
MAX_DIVERGENCE = float(np.radians(1.0))
#: most sub-rays per beam
MAX_SAMPLES_PER_BEAM = 64
#: most returns per beam (LAS's 4-bit return number)
MAX_RETURNS = 15

GROUP = "Return physics"


@dataclass(frozen=True)
class ReturnSettings(SensorSettings):
    """Settings of the return physics (module docstring), shared by the LiDAR sensors;
    shown in the panel's "Return physics" section.

    Attributes (units):
        wavelength: nm, in [300, 2000]: picks a material library entry's reflectance
            (seed 002 section on material reflectance; Velodyne 903, Ouster 865, 1550 for
            the units that use it).
        beam_divergence: rad, full angle (apex), in [0, 1 deg] (seed 004 Divergence Angle;
            seed 001 gives 4 mrad for its scanner); the horizontal one where the datasheet
            gives two.
        beam_divergence_vertical: rad, full angle, in [0, 1 deg]; 0: the same as
            ``beam_divergence`` (a round beam).
        focus_distance: m, in [0, 1e5]: where the beam is narrowest (seed 004 Focus
            Distance); 0: at the aperture.
        samples_per_beam: sub-rays sampling the footprint, in [1, 64] (seed 004 Samples
            Per Beam); 1: the beam's axis only.
        divergence_algorithm: one of :data:`DIVERGENCE_ALGORITHMS`.
        returns: one of :data:`RETURN_MODES`.
        max_returns: returns per beam reported by ``all``, in [1, 15].
        echo_separation: m, in [0, 100]: two candidates along a beam closer than this are
            one echo (the pulse's resolution, c tau / 2 for a pulse of length tau).
        intensity_model: one of :data:`INTENSITY_MODELS`.
        weather: one of :data:`WEATHERS`.
        fog_visibility: m, meteorological optical range, in [10, 1e5] (weather = fog;
            Hahner et al. 2021); not ``visibility``, which picks render or viewport
            geometry.
        rain_rate: mm/h, in [0, 500] (weather = rain).
    """

    wavelength: float = setting(905.0, "Wavelength", "Laser wavelength: picks the material library's "
                                "reflectance", "nm", lo=300.0, hi=2000.0, precision=0, group=GROUP)
    beam_divergence: float = setting(0.0, "Beam divergence", "Full angle of the beam (horizontal where the "
                                     "datasheet gives two); 0: an infinitely thin beam", "rad",
                                     lo=0.0, hi=MAX_DIVERGENCE, precision=5, group=GROUP)
    beam_divergence_vertical: float = setting(0.0, "Vertical divergence", "Full vertical angle of the beam; "
                                              "0: the same as Beam divergence", "rad",
                                              lo=0.0, hi=MAX_DIVERGENCE, precision=5, group=GROUP)
    focus_distance: float = setting(0.0, "Focus distance", "Range where the beam is narrowest (0: at the "
                                    "aperture)", "m", lo=0.0, hi=1e5, group=GROUP)
    samples_per_beam: int = setting(1, "Samples per beam", "Sub-rays sampling the beam's footprint "
                                    "(1: the beam's axis only)", lo=1, hi=MAX_SAMPLES_PER_BEAM, group=GROUP)
    divergence_algorithm: str = setting("echoes", "Divergence algorithm", "How sub-rays become returns: "
                                        "echoes along the beam (the Returns mode), the first hit, one "
                                        "averaged range, or a random sub-ray", choices=DIVERGENCE_ALGORITHMS,
                                        group=GROUP)
    returns: str = setting("strongest", "Returns", "Echoes reported per beam", choices=RETURN_MODES,
                           group=GROUP)
    max_returns: int = setting(3, "Max returns", "Returns per beam in mode all", lo=1, hi=MAX_RETURNS,
                               show_if=("returns", "all"), group=GROUP)
    echo_separation: float = setting(1.0, "Echo separation", "Nearest distance between two echoes of one "
                                     "beam (pulse resolution)", "m", lo=0.0, hi=100.0, group=GROUP)
    intensity_model: str = setting("lambert", "Intensity", "lambert: R0 cos(theta) (seed 002 Eq. 4); radar: "
                                   "received power of the laser radar equation in the device's units",
                                   choices=INTENSITY_MODELS, group=GROUP)
    weather: str = setting("none", "Weather", "Atmosphere between the sensor and the scene", choices=WEATHERS,
                           group=GROUP)
    fog_visibility: float = setting(1000.0, "Fog visibility", "Meteorological optical range of the fog",
                                    "m", lo=10.0, hi=1e5, show_if=("weather", "fog"), group=GROUP)
    rain_rate: float = setting(10.0, "Rain rate", "Rainfall rate", "mm/h", lo=0.0, hi=500.0,
                               show_if=("weather", "rain"), group=GROUP)

    def validate(self) -> Self:
        """:meth:`SensorSettings.validate`, then the rules between return settings
        (:meth:`check_returns`)."""
        super().validate()
        self.check_returns()
        return self

    def check_returns(self) -> None:
        """Refuse (SettingsError) ``samples_per_beam`` above 1 with no divergence to
        sample (every sub-ray would be the axis), and a multi-return ``returns`` mode with
        a ``divergence_algorithm`` that gives one return per beam."""
        if self.samples_per_beam > 1 and self.beam_divergence == 0.0 and self.beam_divergence_vertical == 0.0:
            raise SettingsError("samples_per_beam", "1 while beam_divergence is 0 (nothing to sample)",
                                self.samples_per_beam)
        if self.returns in MULTI_RETURN_MODES and self.divergence_algorithm != "echoes":
            raise SettingsError("returns", f"one of strongest, last, first while divergence_algorithm is "
                                f"{self.divergence_algorithm} (one return per beam; echoes gives several)",
                                self.returns)

    @property
    def multi_return(self) -> bool:
        """The settings can give more than one return per beam (``returns`` is one of
        :data:`MULTI_RETURN_MODES` and ``divergence_algorithm`` is ``echoes``)."""
        return self.divergence_algorithm == "echoes" and self.returns in MULTI_RETURN_MODES


#: the settings :class:`ReturnSettings` adds
RETURN_SETTINGS = tuple(f.name for f in fields(ReturnSettings) if f.metadata["blensor"].group == GROUP)


class ReturnCapabilities(TypedDict, total=False):
    """What :func:`return_capabilities` gives: :class:`~blensor_addon.core.capabilities.Capabilities`
    keyword arguments (each a setting's value)."""

    returns: str
    divergence_algorithm: str
    intensity_model: str


def return_capabilities(s: SensorSettings) -> ReturnCapabilities:
    """The :class:`~blensor_addon.core.capabilities.Capabilities` fields that settings
    ``s`` give of their return physics, for writers and packet encoders (which never read
    the settings): ``returns``, ``divergence_algorithm`` and ``intensity_model`` (str) of
    a :class:`ReturnSettings`; ``{}`` for settings without the return physics (the
    Capabilities' defaults: ``strongest``, ``echoes``, ``lambert``)."""
    if not isinstance(s, ReturnSettings):
        return {}
    return {"returns": s.returns, "divergence_algorithm": s.divergence_algorithm,
            "intensity_model": s.intensity_model}


@dataclass
class Returns:
    """The returns of one chunk of B beams (K rows), before detection.

    Attributes:
        beam (K,) int64: the beam (row of the chunk's :class:`~.patterns.RayPattern`).
        row (K,) int64: the cast row (of the chunk's hits) that stands for the return:
            its surface's labels, normal, colour and time are the return's (the
            strongest candidate of an echo; a weather return takes its beam's first row
            and is relabelled, ``weather``).
        range (K,) float64 m: the return's range along the beam (accumulated path).
        reflectivity (K,) float32: the representing surface's reflectivity (ground truth).
        returned (K,) float64: effective reflectivity that comes back, sum over the echo's
            sub-rays of share x path transmission^2 x reflectivity x atmosphere's two-way
            transmission (what the detection model tests; equals ``reflectivity`` for one
            sub-ray through clear air without glass).
        energy (K,) float64: ``returned`` with each sub-ray's cos(incidence) (seed 002
            Eq. 4's R0 cos theta summed over the footprint): the lambert intensity and the
            linear return model's test value.
        return_number, number_of_returns (K,) uint8: 1-based rank of the return along its
            beam (nearest first, LAS's convention) and the beam's returns.
        weather (K,) bool: a return from the atmosphere (fog backscatter, a rain drop).
        range_noise (K,) float64 m or None: extra range noise the atmosphere adds to the
            measured range (rain), None: none.
        transmission (K,) float64 or None: the atmosphere's two-way transmission at the
            return's range (None: 1, clear air).
    """

    beam: I64
    row: I64
    range: F64
    reflectivity: F32
    returned: F64
    energy: F64
    return_number: U8
    number_of_returns: U8
    weather: Bool
    range_noise: F64 | None = None
    transmission: F64 | None = None

    _ARRAYS = ("beam", "row", "range", "reflectivity", "returned", "energy", "return_number",
               "number_of_returns", "weather")
    _OPTIONAL = ("range_noise", "transmission")

    def __len__(self) -> int:
        return int(self.beam.shape[0])

    def take(self, idx: Array) -> Returns:
        """The rows ``idx`` (int array or bool mask), in order (a mask as its indices,
        copied by ``ndarray.take``: the same rows, faster)."""
        rows = np.asarray(idx)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        opt: dict[str, Any] = {k: (None if getattr(self, k) is None else getattr(self, k).take(rows, axis=0))
                               for k in self._OPTIONAL}
        return Returns(*(getattr(self, k).take(rows, axis=0) for k in self._ARRAYS), **opt)

    @classmethod
    def concat(cls, parts: list[Returns], beam_offsets: list[int], row_offsets: list[int]) -> Returns:
        """The rows of ``parts`` one after the other, each part's ``beam`` and ``row``
        shifted by its offset (the beams and rows of the chunks before it)."""
        def cat(k: str) -> Array | None:
            vals = [getattr(p, k) for p in parts]
            if k in cls._OPTIONAL:
                if all(v is None for v in vals):
                    return None
                fill = 0.0 if k == "range_noise" else 1.0
                vals = [np.full(len(p), fill) if v is None else v for p, v in zip(parts, vals)]
            if k == "beam":
                vals = [v + o for v, o in zip(vals, beam_offsets)]
            elif k == "row":
                vals = [v + o for v, o in zip(vals, row_offsets)]
            return cast(Array, np.concatenate(vals))
        kw: dict[str, Any] = {k: cat(k) for k in (*cls._ARRAYS, *cls._OPTIONAL)}  # every field, by name
        return cls(**kw)


def stage_rng(seed: int, frame: int, chunk: int, stage: int) -> np.random.Generator:
    """The generator of one stage's draws for one chunk of beams of one frame: seeded by
    (seed, frame, chunk, stage), a stream apart from the range noise's
    (:func:`~.physics.frame_rng`), so a stage that draws (alpha, ``random``, weather)
    leaves the noise of every return unchanged, and a frame's draws do not depend on other
    frames (seed 000 section 5.2). ``stage``: :data:`STAGE_CAST`, :data:`STAGE_BEAM`,
    :data:`STAGE_WEATHER`."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), 0x2E7A, int(frame) & 0xFFFFFFFF, (int(frame) >> 32) & 0xFFFFFFFF, int(chunk),
         int(stage)])))


STAGE_CAST, STAGE_BEAM, STAGE_WEATHER = 1, 2, 3


__all__ = ["ReturnSettings", "Returns", "RETURN_SETTINGS", "DIVERGENCE_ALGORITHMS", "RETURN_MODES",
           "MULTI_RETURN_MODES", "INTENSITY_MODELS", "WEATHERS", "MAX_DIVERGENCE", "MAX_SAMPLES_PER_BEAM",
           "MAX_RETURNS", "stage_rng", "STAGE_CAST", "STAGE_BEAM", "STAGE_WEATHER", "return_capabilities"]
