"""Ambient light of the radiometric return model (docs/physics.md, "Ambient light"): the
scene's sun and sky light the surfaces a unit sees; the reflected light sets each return's
ambient photons (Ouster NEAR_IR) and the ambient shot noise of its detection.

1. **Irradiance at the hit** (W/m^2, Blender's units): each Sun light of strength ``E_k``
   (Blender's sun ``energy``: irradiance at normal incidence, W/m^2) from the unit vector
   ``l_k`` toward it lights a surface of normal ``n`` (turned to face the sensor) with
   ``E_k max(0, n . l_k)``; the world's uniform background of radiance ``L_sky``
   (strength x the colour's mean, W/m^2/sr) adds ``pi L_sky`` (a uniform radiance over the
   hemisphere; Blender's world has no ground, so every orientation sees the whole
   hemisphere). **Sun shadows**: a sun another object hides from the return's surface
   point adds nothing there (``visible`` of :func:`irradiance`): the scene layer casts a
   shadow ray from that point toward each sun that faces the surface
   (``ScanContext.sun_visible``, core/sensors/protocols.py; scene/context.py), against
   the scene at the ray's own time; every surface blocks it (glass and alpha surfaces
   too: no light passes them). The sky term has no occlusion (a wall's foot or a room's
   inside sees the whole sky), and a return whose path was reflected or passed glass (a
   mirror, solid glass, a thin pane: its range is the accumulated path, its point may be a
   virtual one) is not shadow-tested (lit as if nothing stood between).
2. **Illuminance**: ``E_klx = E x K / 1000`` with ``K`` = :data:`LUMINOUS_EFFICACY` lm/W,
   the global luminous efficacy of clear-sky daylight (Littlefair 1985, "The luminous
   efficacy of daylight: a review", Lighting Research & Technology 17(4), 162-182: about
   105 lm/W for clear skies; direct sunlight 70-105 lm/W with solar altitude): Blender's
   sun of 952 W/m^2 is the datasheets' 100 klx.
3. **Noise**: the noise variance relative to the datasheet's condition (the ``noise_ratio``
   of :meth:`~.radiometry.Calibration.snr`) is ``(1 - a) + a E_klx / E_ref`` with ``E_ref``
   the unit's datasheet illuminance (``ambient_klx`` of ``core/tables/radiometry.json``;
   :data:`DEFAULT_KLX`, derived, where the datasheet states none: its figures are taken to
   hold in the same daylight) and ``a`` = :data:`AMBIENT_SHARE`, the ambient shot noise's
   share of the noise variance at that condition. No datasheet gives ``a``: 0.5 is a
   derived choice. Its effect is bounded: in the dark the SNR grows by ``1 / sqrt(1 - a)``
   (1.41), the range of a target by at most ``(1 - a)^-1/4`` = 1.19 (received power
   ~ 1/r^2) and less where the fitted threshold grows with range (HDL-64E S2:
   ``(1 - a)^-1/(2 x 2.37)`` = 1.16). The calibration fits each figure's noise with that
   figure's target in the datasheet's light, so the ratio compares the illuminance alone
   (a target's own reflected light is inside its fitted threshold).
4. **Ambient photons** (NEAR_IR): the reflected radiance ``rho E / pi`` seen by the
   receiver, which for a target filling the pixel does not depend on range, counted as
   ``near_ir = P rho E_klx / E_ref`` with ``P`` = :data:`NEAR_IR_PHOTONS` (derived): at
   the datasheet condition the ambient shot variance (photons) of the OS1's weakest figure
   (10 % at its lowest SNR, 12: 144 signal photons, io/packets/reported.py) is ``a`` x its
   noise variance (144), so a 10 % target there reads 72 photons and a 100 % one 720. A
   scene without light reads 0 exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ndtypes import F64, Bool, Floating
from .protocols import Hits
from .raypattern import RayPattern

#: lm/W: global luminous efficacy of clear-sky daylight (Littlefair 1985, module docstring)
LUMINOUS_EFFICACY = 105.0
#: klx: the ambient condition of a datasheet that states none (derived: the Ouster
#: datasheets' "100 klx sunlight", core/tables/radiometry.json)
DEFAULT_KLX = 100.0
#: the ambient shot noise's share of the noise variance at the datasheet's condition
#: (derived, not published; module docstring, 3.)
AMBIENT_SHARE = 0.5
#: ambient photons of a 100 % Lambertian surface at the datasheet's illuminance (derived:
#: AMBIENT_SHARE x 12^2 photons for a 10 % target, module docstring, 4.)
NEAR_IR_PHOTONS = AMBIENT_SHARE * 12.0 ** 2 / 0.1


@dataclass(frozen=True)
class Lights:
    """The scene's ambient light (read by ``scene/lights.py``), world frame.

    Attributes:
        sun_dirs: (K, 3) float64 unit vectors from a surface toward each Sun light.
        sun_irradiance: (K,) float64 W/m^2 at normal incidence (strength x the colour's mean).
        sky_radiance: W/m^2/sr, the world's uniform background (strength x the colour's
            mean; 0 where the world is not a plain Background node).
        notes: what of the scene's light was left out (text).
    """

    sun_dirs: F64
    sun_irradiance: F64
    sky_radiance: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def dark(self) -> bool:
        """No sun of positive strength and no sky: night."""
        return not (self.sky_radiance > 0.0 or bool((self.sun_irradiance > 0.0).any()))


#: a scene without light
NIGHT = Lights(np.zeros((0, 3)), np.zeros(0))


def sun_cosines(lights: Lights, normal: Floating, ray_dir: Floating) -> F64:
    """(N, K) float64 cosine between each of the K suns' directions and the normal
    ``normal`` (N, 3) world (either orientation) turned to face the origin of the ray of
    direction ``ray_dir`` (N, 3) world: positive where sun k lights that side of surface i
    (module docstring, 1.)."""
    n = np.asarray(normal, dtype=np.float64)
    d = np.asarray(ray_dir, dtype=np.float64)
    facing = np.where(np.einsum("ij,ij->i", n, d) > 0.0, -1.0, 1.0)
    out: F64 = (n @ lights.sun_dirs.T) * facing[:, None]
    return out


def sun_candidates(lights: Lights, normal: Floating, ray_dir: Floating) -> Bool:
    """(N, K) bool: sun k of positive irradiance faces surface i (:func:`sun_cosines`
    above 0): the pairs a shadow ray is cast for; elsewhere the sun adds nothing anyway."""
    out: Bool = (sun_cosines(lights, normal, ray_dir) > 0.0) & (lights.sun_irradiance > 0.0)[None, :]
    return out


def irradiance(lights: Lights, normal: Floating, ray_dir: Floating, visible: Bool | None = None) -> F64:
    """(N,) float64 ambient irradiance (W/m^2) of surfaces of normal ``normal`` (N, 3)
    world (either orientation) hit by rays of direction ``ray_dir`` (N, 3) world (module
    docstring, 1.): the normal is turned to face the ray's origin. ``visible`` (N, K)
    bool: sun k is seen from surface i (False: in another object's shadow, that sun adds
    nothing); None: every sun is seen (no shadows)."""
    n = np.asarray(normal, dtype=np.float64)
    out = np.full(n.shape[0], math.pi * float(lights.sky_radiance))
    if lights.sun_irradiance.shape[0]:
        lit = np.maximum(sun_cosines(lights, n, ray_dir), 0.0)  # (N, K)
        if visible is not None:
            lit = np.where(visible, lit, 0.0)
        out += lit @ lights.sun_irradiance
    return out


def shadows(ctx: object, hits: Hits, pattern: RayPattern, lights: Lights, ray: Floating) -> Bool | None:
    """(N, K) bool: each of the K suns of ``lights`` is seen from the surface of each of
    the N rows of ``hits`` (cast rays ``pattern``, sensor frame; final ray directions
    ``ray`` (N, 3) world), by the shadow rays of ``ctx.sun_visible``
    (:class:`~.protocols.ScanContext`) for the pairs of :func:`sun_candidates` (no ray
    where no sun faces the surface); None (no shadows) for a context without it or where
    no pair needs a ray."""
    cast_shadows = getattr(ctx, "sun_visible", None)
    if cast_shadows is None:
        return None
    need = sun_candidates(lights, hits.normal, ray)
    if not need.any():
        return None
    origins = None if pattern.origins is None else np.asarray(pattern.origins, dtype=np.float64)
    visible: Bool = cast_shadows(hits, origins, np.asarray(pattern.directions, dtype=np.float64),
                                 lights.sun_dirs, need)
    return visible


def klx(irradiance_w: Floating) -> F64:
    """(N,) float64 illuminance (klx) of irradiance ``irradiance_w`` (N,) W/m^2
    (:data:`LUMINOUS_EFFICACY`)."""
    out: F64 = np.asarray(irradiance_w, dtype=np.float64) * (LUMINOUS_EFFICACY / 1000.0)
    return out


def noise_ratio(e_klx: Floating, reference_klx: float | None) -> F64:
    """(N,) float64 noise variance relative to the datasheet's condition at illuminance
    ``e_klx`` (N,) klx, the unit's datasheet illuminance ``reference_klx`` (None:
    :data:`DEFAULT_KLX`): ``(1 - a) + a E / E_ref`` (module docstring, 3.)."""
    ref = DEFAULT_KLX if reference_klx is None else float(reference_klx)
    out: F64 = (1.0 - AMBIENT_SHARE) + AMBIENT_SHARE * np.asarray(e_klx, dtype=np.float64) / ref
    return out


def near_ir(reflectivity: Floating, e_klx: Floating, reference_klx: float | None) -> F64:
    """(N,) float64 ambient photons of surfaces of ``reflectivity`` (N,) (clipped to
    [0, 1]: the diffuse part) lit with ``e_klx`` (N,) klx (module docstring, 4.); 0 where
    either is 0."""
    ref = DEFAULT_KLX if reference_klx is None else float(reference_klx)
    rho = np.clip(np.asarray(reflectivity, dtype=np.float64), 0.0, 1.0)
    out: F64 = NEAR_IR_PHOTONS * rho * np.asarray(e_klx, dtype=np.float64) / ref
    return out


__all__ = ["LUMINOUS_EFFICACY", "DEFAULT_KLX", "AMBIENT_SHARE", "NEAR_IR_PHOTONS", "Lights", "NIGHT",
           "sun_cosines", "sun_candidates", "shadows", "irradiance", "klx", "noise_ratio", "near_ir"]
