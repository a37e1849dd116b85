"""Per-hit material lookup: which material did a ray end on, and what are its properties.

Owns the :class:`MaterialTable` (filled by the scene layer from Blender materials), the
per-hit reflectivity (:meth:`MaterialTable.reflectivity_at`: constant per material, a
library entry's reflectance at the sensor's wavelength, or an image texture sampled at
the hit's UV), image sampling (:func:`sample_image`) and the packaged reflectance library
(:func:`library`, ``tables/reflectance.json``). Everything here is numpy, so each lookup is
a few vectorised gathers per chunk of rays.
"""
from __future__ import annotations

import functools
import math
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

import numpy as np
from numpy.typing import ArrayLike

from .ndtypes import F32, F64, I32, I64, U8, Bool, Floating, Integer

#: Reflectivity of a surface without a BlenSor material setting: the original's Blender
#: Internal default diffuse intensity (reference section 3.4, index 11). Blender's default
#: material (Principled BSDF, base colour 0.8 grey) evaluates to the same value
#: (:func:`luminance` of (0.8, 0.8, 0.8) = 0.8).
DEFAULT_REFLECTIVITY = 0.8

#: Rec. 709 / sRGB luminance weights of linear RGB (ITU-R BT.709-6, item 3.2); they sum to 1,
#: so a grey colour's luminance is its value.
LUMINANCE_WEIGHTS = (0.2126, 0.7152, 0.0722)

#: the packaged reflectance library (read-only; inside the add-on so an installed extension
#: finds it)
LIBRARY_PATH = Path(__file__).resolve().parent / "tables" / "reflectance.json"
#: library entry giving the diffuse reflectivity of glass materials without an override
GLASS_ENTRY = "glass"
#: wavelength (nm) the entries' plain ``reflectivity`` is given at, and the sensors' default
DEFAULT_WAVELENGTH = 905.0


def luminance(rgb: ArrayLike) -> F64:
    """Rec. 709 luminance of linear RGB ``rgb`` (..., 3) (any float array) -> (...) float64.
    BlenSor's estimate of a colour's diffuse reflectivity at the laser wavelength: an
    approximation (a paint's near-infrared reflectance need not follow its visible colour),
    library entries (:func:`library`) are the accurate path."""
    c = np.asarray(rgb, dtype=np.float64)
    wr, wg, wb = LUMINANCE_WEIGHTS
    return cast(F64, c[..., 0] * wr + c[..., 1] * wg + c[..., 2] * wb)


@dataclass(frozen=True)
class LibraryEntry:
    """One material of the reflectance library.

    Attributes:
        name: the entry's key.
        wavelengths (K,) float64 nm, increasing; reflectance (K,) float64: Lambertian
            (diffuse) reflectance at normal incidence at each wavelength (> 1 for
            retro-reflectors: the Lambertian target that returns as much).
        color: linear RGB base colour (for building scenes); mirror: total reflection.
        source: where each value comes from.
    """

    name: str
    wavelengths: F64
    reflectance: F64
    color: tuple[float, ...]
    mirror: bool
    source: str
    #: coefficient of retroreflection R_A (cd lx^-1 m^-2 = sr^-1) at entrance 0 and 30 deg
    #: (:func:`retro_lobe`); (0, 0): not a retroreflector
    retro: tuple[float, float] = (0.0, 0.0)

    def at(self, wavelength: float | None) -> float:
        """Reflectance at ``wavelength`` nm (None: :data:`DEFAULT_WAVELENGTH`), linear
        between the listed wavelengths, clamped to the first/last value outside them."""
        wl = DEFAULT_WAVELENGTH if wavelength is None else float(wavelength)
        return float(np.interp(wl, self.wavelengths, self.reflectance))


@functools.lru_cache(maxsize=4)
def library(path: str | None = None) -> dict[str, LibraryEntry]:
    """The reflectance library: entry name -> :class:`LibraryEntry`, read once from
    ``path`` (default :data:`LIBRARY_PATH`). Keys starting with ``_`` are comments.

    Raises:
        ValueError: an entry lacks ``reflectance`` or its values are not finite >= 0.
    """
    raw = json.loads(Path(path or LIBRARY_PATH).read_text(encoding="utf-8"))
    out: dict[str, LibraryEntry] = {}
    for name, spec in raw.items():
        if name.startswith("_"):
            continue
        pairs = sorted((float(k), float(v)) for k, v in spec["reflectance"].items())
        wl = np.array([p[0] for p in pairs])
        r = np.array([p[1] for p in pairs])
        if not (np.isfinite(r).all() and (r >= 0).all() and r.size):
            raise ValueError(f"reflectance library entry {name!r}: reflectance must be finite values >= 0")
        out[name] = LibraryEntry(name, wl, r, tuple(spec.get("color", (0.8, 0.8, 0.8))),
                                 bool(spec.get("mirror", False)), str(spec.get("source", "")),
                                 _retro_of(name, spec.get("retroreflection")))
    return out


def _retro_of(name: str, spec: dict[str, float] | None) -> tuple[float, float]:
    """(R_A at 0 deg, R_A at 30 deg) sr^-1 of a library entry's ``retroreflection``:
    ``{"R_A_0": .., "R_A_30": ..}`` (sheeting, cd lx^-1 m^-2) or ``{"R_L": ..}`` (road
    markings, cd m^-2 lx^-1, converted by :func:`retro_from_rl`); (0, 0) without one."""
    if not spec:
        return (0.0, 0.0)
    if "R_L" in spec:
        return retro_from_rl(float(spec["R_L"]))
    ra0, ra30 = float(spec["R_A_0"]), float(spec["R_A_30"])
    if not (0.0 <= ra30 <= ra0 < 1e6):
        raise ValueError(f"reflectance library entry {name!r}: retroreflection needs 0 <= R_A_30 <= R_A_0")
    return (ra0, ra30)


#: entrance angle (deg from the marking's normal) of EN 1436's 30 m geometry: the light
#: arrives 1.24 deg above the road surface
RL_ENTRANCE_DEG = 88.76


def retro_from_rl(r_l: float) -> tuple[float, float]:
    """(R_A at 0 deg, at 30 deg) sr^-1 of a road marking's coefficient of retroreflected
    luminance ``r_l`` (cd m^-2 lx^-1, EN 1436 / ASTM E1710, the 30 m geometry). R_L is the
    luminance over the illuminance on a plane perpendicular to the incident light (CIE
    54.2's definitions), so the BRDF at the measuring entrance angle beta_L
    (:data:`RL_ENTRANCE_DEG`) is ``f = R_L / cos beta_L`` (the illuminance on the marking's
    plane is ``E_perp cos beta_L``); :func:`retro_lobe`'s BRDF is ``R_A(beta) / cos^2 beta``,
    so a BRDF constant in the entrance angle is ``R_A(beta) = f cos^2 beta``: (f, 0.75 f);
    R_L 0.15 gives f = 6.93. DERIVED: R_L is measured at entrance 88.76 deg and observation
    1.05 deg; BlenSor uses that BRDF at every entrance angle and at the lidar's observation
    angle of about 0 deg.

    Raises:
        ValueError: ``r_l`` not finite or outside [0, 1e6)."""
    if not (math.isfinite(r_l) and 0.0 <= r_l < 1e6):
        raise ValueError(f"retroreflection R_L must be in [0, 1e6) cd m^-2 lx^-1, got {r_l}")
    f = float(r_l) / math.cos(math.radians(RL_ENTRANCE_DEG))
    return (f, f * 0.75)


#: R_A at 30 deg over R_A at 0 deg of a retroreflector given by one coefficient (the material
#: setting): ASTM D4956-01 Type III white's 150 / 250 (DERIVED: one sheeting's shape for all)
RETRO_RATIO_30 = 0.6


def retro_from_ra(r_a: float) -> tuple[float, float]:
    """(R_A at 0 deg, at 30 deg) sr^-1 of a retroreflector given by its coefficient of
    retroreflection ``r_a`` (cd lx^-1 m^-2) at entrance 0 deg: (r_a, :data:`RETRO_RATIO_30` r_a)."""
    return (float(r_a), float(r_a) * RETRO_RATIO_30)


#: Schlick's Fresnel reflectance at normal incidence of a dielectric coat of IOR 1.5 (0.04),
#: the Principled BSDF's default (Specular IOR Level 0.5)
DIELECTRIC_F0 = 0.04


def specular_lobe(cos_theta: Floating, f0: Floating, alpha: Floating) -> F64:
    """(N,) float64 equivalent reflectance ``pi f_s(theta)`` of a microfacet specular lobe
    seen in backscatter (source and receiver in one direction, so the half vector is the
    ray: theta_h = theta_i = theta_o = theta) at ``cos_theta`` (N,) in (0, 1], for Fresnel
    reflectance at normal incidence ``f0`` (N,) and GGX roughness ``alpha`` (N,) > 0
    (Blender's Roughness squared). Cook-Torrance (Cook and Torrance, ACM TOG 1(1), 1982,
    Eq. 'R_s = F D G / (pi (N.L)(N.V))' written with the 1/4 of Walter et al.,
    'Microfacet models for refraction through rough surfaces', EGSR 2007, Eq. 20):
    ``f_s = F(theta) D(theta) G(theta) / (4 cos^2 theta)`` with the GGX distribution
    ``D = alpha^2 / (pi (cos^2 theta (alpha^2 - 1) + 1)^2)`` (Walter et al. Eq. 33), Smith's
    separable masking ``G = G1^2``, ``G1 = 2 / (1 + sqrt(1 + alpha^2 tan^2 theta))``
    (Walter et al. Eq. 34) and Schlick's Fresnel ``F = f0 + (1 - f0)(1 - cos theta)^5``
    (Schlick, Computer Graphics Forum 13(3), 1994, Eq. 24). Multiplied by ``cos theta`` as
    the Lambertian ``rho`` is, it is the received power's material term."""
    c = np.clip(np.asarray(cos_theta, dtype=np.float64), 1e-6, 1.0)
    return _specular(c, schlick(c, f0), alpha)


def _specular(c: F64, fresnel: F64, alpha: Floating) -> F64:
    """:func:`specular_lobe` at cosines ``c`` (clipped already) with Fresnel ``fresnel``."""
    a2 = np.square(np.maximum(np.asarray(alpha, dtype=np.float64), 1e-4))
    c2 = c * c
    k = c2 * (a2 - 1.0) + 1.0
    g1 = 2.0 / (1.0 + np.sqrt(1.0 + a2 * (1.0 - c2) / c2))
    # pi F D G / (4 c^2) with D = a2 / (pi k^2): the pi cancels
    out: F64 = fresnel * a2 * g1 * g1 / (4.0 * c2 * k * k)
    return out


def schlick(cos_theta: Floating, f0: Floating) -> F64:
    """(N,) float64 Schlick's Fresnel reflectance ``f0 + (1 - f0)(1 - cos theta)^5``
    (Schlick 1994, Eq. 24) at ``cos_theta`` (N,) for ``f0`` (N,)."""
    f0 = np.asarray(f0, dtype=np.float64)
    m = 1.0 - np.asarray(cos_theta, dtype=np.float64)
    m2 = m * m
    out: F64 = f0 + (1.0 - f0) * (m2 * m2 * m)
    return out


def retro_lobe(cos_beta: Floating, ra0: Floating, ra30: Floating) -> F64:
    """(N,) float64 equivalent reflectance ``pi f_r(beta)`` of a retroreflector at entrance
    angle beta (``cos_beta`` (N,) in (0, 1]) seen from its source (observation 0 deg), from
    its coefficient of retroreflection R_A (sr^-1) at entrance 0 deg ``ra0`` (N,) and 30 deg
    ``ra30`` (N,). CIE 54.2-2001 section 2: ``R_A = I / (E_perp A)`` (returned intensity
    over the illuminance normal to the beam and the sample's area); with the radiance
    ``L = I / (A cos beta)`` and the illuminance on the surface ``E_perp cos beta`` the
    BRDF is ``f_r = R_A / cos^2 beta``. ``R_A(beta)`` is linear in beta from ``ra0`` to
    ``ra30`` at 30 deg (the two entrance angles ASTM D4956 tabulates, -4 deg read as 0),
    and beyond 30 deg ``ra30 cos^2 beta / cos^2 30 deg`` (a constant BRDF). DERIVED: the
    standards tabulate R_A at observation 0.2 deg; the lidar's observation angle is about
    0 deg (a few cm between emitter and receiver at tens of m), and the 0.2 deg value is
    used there (a retroreflector's R_A grows towards 0 deg, so this is a lower bound); the
    shape beyond 30 deg is an assumption, not a standard's figure."""
    c = np.clip(np.asarray(cos_beta, dtype=np.float64), 1e-6, 1.0)
    beta = np.degrees(np.arccos(c))
    r0 = np.asarray(ra0, dtype=np.float64)
    r30 = np.asarray(ra30, dtype=np.float64)
    ra = np.where(beta <= 30.0, r0 + (r30 - r0) * beta / 30.0, r30 * c * c / 0.75)
    out: F64 = np.pi * ra / (c * c)
    return out


def lobe_reflectance(rho: Floating, cos_theta: Floating, lobe: Floating) -> F32:
    """(N,) float32 equivalent reflectance of hits whose diffuse reflectivity is ``rho``
    (N,) at incidence ``cos_theta`` (N,) on materials of lobe rows ``lobe`` (N, 4) float32
    (:attr:`MaterialTable.lobe`: f0, GGX alpha, R_A at 0 deg, R_A at 30 deg): what
    multiplies ``cos theta`` in the received power in place of the Lambertian ``rho``.
    With a specular coat (f0 > 0): the diffuse base seen through the coat twice,
    ``rho (1 - F(theta))^2``, plus :func:`specular_lobe` (a layered dielectric: the light
    the coat reflects does not reach the base; Weidlich and Wilkie, 'Arbitrarily layered
    micro-facet surfaces', GRAPHITE 2007, section 4); with R_A > 0 :func:`retro_lobe`
    added. Rows without either keep ``rho``: a Lambertian surface."""
    r = np.asarray(rho, dtype=np.float64)
    c = np.asarray(cos_theta, dtype=np.float64)
    lb = np.asarray(lobe, dtype=np.float64).reshape(-1, 4)
    f0, alpha, ra0, ra30 = lb[:, 0], lb[:, 1], lb[:, 2], lb[:, 3]
    coat = f0 > 0.0
    out = r.copy()
    if coat.any():
        cc = np.clip(c[coat], 1e-6, 1.0)
        f = schlick(cc, f0[coat])
        out[coat] = r[coat] * np.square(1.0 - f) + _specular(cc, f, alpha[coat])
    retro = ra0 > 0.0
    if retro.any():
        out[retro] += retro_lobe(c[retro], ra0[retro], ra30[retro])
    return out.astype(np.float32)


#: the largest reflectivity BlenSor accepts (retro-reflectors are > 1: equivalent Lambertian
#: reflectance; the material setting's and the texels' upper bound)
MAX_REFLECTIVITY = 10.0


def sanitize_texels(pixels: ArrayLike) -> tuple[F32, int]:
    """Texel values made usable as reflectivity (float/EXR images may hold
    NaN, inf or negative values): NaN -> 0, then clipped to [0, :data:`MAX_REFLECTIVITY`]
    (+inf -> 10, -inf -> 0).

    Args:
        pixels (H, W) or (H, W, C) float: texels (C channels each).
    Returns:
        (the sanitized values, float32, same shape; the number of texels (H x W positions)
        with at least one value replaced).
    """
    a = np.asarray(pixels, dtype=np.float32)
    bad = ~((a >= 0.0) & (a <= MAX_REFLECTIVITY))  # NaN compares False
    if not bad.any():
        return a, 0
    n = int((bad.reshape(a.shape[0], a.shape[1], -1).any(axis=2)).sum()) if a.ndim >= 2 else int(bad.sum())
    return np.clip(np.nan_to_num(a, nan=0.0, posinf=MAX_REFLECTIVITY, neginf=0.0), 0.0,
                   MAX_REFLECTIVITY).astype(np.float32), n


@dataclass
class Texture:
    """An image texture feeding a material's base colour (the scene layer's evaluation).

    Attributes:
        luminance (H, W) float32: Rec. 709 luminance of the image's linear RGB; row 0 is
            the image's bottom (v = 0), as Blender stores pixels. Finite, in [0,
            :data:`MAX_REFLECTIVITY`] (the scene layer applies :func:`sanitize_texels`).
        uv_map: name of the mesh UV map ("" = the mesh's active render UV map).
        scale, offset: the hit's reflectivity is ``offset + scale * texel`` (a Mix Shader
            of the textured shader with constant ones makes scale < 1, offset > 0).
        mapping (2, 3) float64: affine map of (u, v, 1) before sampling (a Mapping node;
            identity without one).
        interpolation: ``"closest"`` (nearest texel) or ``"linear"`` (bilinear).
        extension: ``"REPEAT"`` (Blender's default), ``"EXTEND"``, ``"CLIP"`` (outside
            [0, 1]: black) or ``"MIRROR"``.
        name: the image's name (for messages).
    """

    luminance: F32
    uv_map: str = ""
    scale: float = 1.0
    offset: float = 0.0
    mapping: F64 = field(default_factory=lambda: np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    interpolation: str = "linear"
    extension: str = "REPEAT"
    name: str = ""


def _wrap(i: I64, n: int, extension: str) -> tuple[I64, Bool | None]:
    """Texel indices ``i`` (int64) -> (index in [0, n), inside mask or None)."""
    if extension == "EXTEND":
        return np.clip(i, 0, n - 1), None
    if extension == "CLIP":
        inside = (i >= 0) & (i < n)
        return np.clip(i, 0, n - 1), inside
    if extension == "MIRROR":
        k = np.mod(i, 2 * n)
        return np.where(k < n, k, 2 * n - 1 - k), None
    return np.mod(i, n), None


def sample_image(image: F32, uv: Floating, interpolation: str = "linear",
                 extension: str = "REPEAT") -> F32:
    """Sample a single-channel image at texture coordinates.

    Args:
        image (H, W) float32, row 0 at v = 0, finite (:func:`sanitize_texels`: a NaN
            texel would spread to its bilinear neighbours); uv (N, 2) float (u right, v up; texel
            (i, j) covers [i/W, (i+1)/W) x [j/H, (j+1)/H), its centre at (i + 0.5) / W, as
            Blender's Image Texture node).
        interpolation: ``"closest"`` (nearest texel) or anything else (bilinear between
            the four nearest texel centres).
        extension: ``"REPEAT"``, ``"EXTEND"``, ``"CLIP"`` or ``"MIRROR"``.
    Returns:
        (N,) float32 texel values.
    """
    h, w = image.shape
    uv = np.asarray(uv, dtype=np.float64)
    x = uv[:, 0] * w
    y = uv[:, 1] * h
    if interpolation == "closest":
        i, ai = _wrap(np.floor(x).astype(np.int64), w, extension)
        j, aj = _wrap(np.floor(y).astype(np.int64), h, extension)
        out = image[j, i]
        if ai is not None and aj is not None:  # (CLIP: both masks, else neither)
            out = np.where(ai & aj, out, np.float32(0))
        return out.astype(np.float32, copy=False)
    x = x - 0.5
    y = y - 0.5
    x0 = np.floor(x)
    y0 = np.floor(y)
    fx = x - x0
    fy = y - y0
    x0 = x0.astype(np.int64)
    y0 = y0.astype(np.int64)
    out = np.zeros(uv.shape[0], np.float64)
    for dj, wy in ((0, 1.0 - fy), (1, fy)):
        j, aj = _wrap(y0 + dj, h, extension)
        for di, wx in ((0, 1.0 - fx), (1, fx)):
            i, ai = _wrap(x0 + di, w, extension)
            v = image[j, i].astype(np.float64)
            if ai is not None and aj is not None:  # (CLIP: both masks, else neither)
                v = np.where(ai & aj, v, 0.0)
            out += wx * wy * v
    return out.astype(np.float32)


class MaterialExtra(TypedDict, total=False):
    """:attr:`MaterialTable.extra`: the material evaluator's data, every key optional
    (see :class:`MaterialTable`)."""

    spectra: dict[int, LibraryEntry]
    textures: dict[int, Texture]
    uv: dict[tuple[int, str], F32]


@dataclass
class MaterialTable:
    """Materials of a scene and how triangles of instances map to them.

    Attributes:
        reflectivity (M,) float32 in [0, :data:`MAX_REFLECTIVITY`] (> 1: retro-reflectors); row 0
            is the default material.
        mirror (M,) bool: total reflection (seed 000 section 3.5).
        color (M, 3) uint8 base colour.
        names: list of M material names ("" for the default).
        mesh_tri_offset (K+1,) int64: first row of each mesh in ``tri_material``.
        tri_material (T,) int32: material slot index of every triangle of every mesh.
        inst_mesh (I,) int32: mesh of each instance.
        inst_slot_offset (I+1,) int64: first row of each instance in ``slot_material``.
        slot_material (S,) int32: material row of each slot of each instance.
        transmission (M,) float32 in [0, 1]: glass share (Glass BSDF: 1; Principled BSDF:
            its Transmission Weight); 0: opaque. None: every material opaque.
        ior (M,) float32 >= 1: index of refraction of a glass material (1.45 default).
        alpha (M,) float32 in [0, 1]: coverage; a path passes a surface with probability
            1 - alpha (drawn, seeded). None: every material 1.
        extra: texture and wavelength data of the material evaluator (docs/physics.md),
            filled by the scene layer; every key optional:
            ``"spectra"``: {row: :class:`LibraryEntry`} materials naming a library entry
            (their reflectance at the sensor's wavelength replaces ``reflectivity``);
            ``"textures"``: {row: :class:`Texture`} materials whose base colour is an
            image texture; ``"uv"``: {(mesh index, UV map name): (T, 3, 2) float32} UVs of
            the three corners of every triangle of the meshes textured materials are on
            (the triangles of ``mesh_tri_offset``, in that order).
    A textured material's ``reflectivity`` row holds ``offset + scale * mean texel``: the
    value used where a hit cannot be sampled (a mesh without that UV map).
    """

    reflectivity: F32
    mirror: Bool
    color: U8
    names: list[str]
    mesh_tri_offset: I64
    tri_material: I32
    inst_mesh: I32
    inst_slot_offset: I64
    slot_material: I32
    transmission: F32 | None = None
    ior: F32 | None = None
    alpha: F32 | None = None
    #: (M, 4) float32 per material: specular coat f0, its GGX alpha, R_A (sr^-1) at entrance
    #: 0 and 30 deg (:func:`lobe_reflectance`; zeros: Lambertian); None: every material
    #: Lambertian. Applied under the radiometric return model only.
    lobe: F32 | None = None
    #: extra per-material data of the material evaluator (textures, UVs, spectra)
    extra: MaterialExtra = field(default_factory=lambda: MaterialExtra())
    #: (I,) bool cache of :meth:`_instance_has_mirror` (None until first asked)
    _has_mirror: Bool | None = field(default=None, init=False, repr=False, compare=False)
    #: :meth:`_row_table`'s answer once made (empty until then); shared with the tables
    #: of the same rows (:meth:`share_rows`)
    _rows_slot: list[tuple[I32, I64] | None] = field(default_factory=list, init=False, repr=False,
                                                       compare=False)

    def reflectivity_at(self, rows: Integer, instance: Integer, primitive: Integer, bary: Floating,
                        wavelength: float | None = None) -> F32:
        """(N,) float32 reflectivity of each hit: material rows ``rows`` (N,) int32 (from
        :meth:`lookup`) of the hits on (instance, primitive) (N,) int32 at barycentrics
        ``bary`` (N, 2) float32; ``wavelength`` nm picks a library entry's reflectance
        (None: :data:`DEFAULT_WAVELENGTH`).

        Materials naming a library entry give its reflectance at ``wavelength`` (linear
        between listed wavelengths, clamped outside); textured materials sample their
        image at the hit's UV, interpolated from the corners' UVs with the kernel's
        barycentrics, ``uv = (1 - b1 - b2) uv0 + b1 uv1 + b2 uv2`` (raycast/base.py
        ``ClosestHits``); every other material its ``reflectivity``. Without textures
        this is one gather, ``table[rows]``, as in the single-return model.
        """
        rows = np.asarray(rows)
        out = self._reflectivity_for(wavelength)[rows]
        textures = self.extra.get("textures")
        if not textures or rows.size == 0:
            return out
        sel = np.flatnonzero(self._textured()[rows])
        if sel.size == 0:
            return out
        r = rows[sel]
        inst = np.asarray(instance)[sel]
        mesh = self.inst_mesh[inst].astype(np.int64)
        prim = np.asarray(primitive)[sel].astype(np.int64)
        b = np.asarray(bary, dtype=np.float64).reshape(-1, 2)[sel]
        uvs = self.extra.get("uv", {})
        key = r.astype(np.int64) * (int(mesh.max()) + 1) + mesh
        order = np.argsort(key, kind="stable")
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        for grp in np.split(order, bounds):
            row, m = int(r[grp[0]]), int(mesh[grp[0]])
            tex = textures[row]
            corner = uvs.get((m, tex.uv_map))
            if corner is None:
                continue  # no such UV map on this mesh: the row's constant
            c = corner[prim[grp]].astype(np.float64)  # (G, 3, 2)
            b1, b2 = b[grp, 0:1], b[grp, 1:2]
            uv = (1.0 - b1 - b2) * c[:, 0] + b1 * c[:, 1] + b2 * c[:, 2]
            uv = uv @ tex.mapping[:, :2].T + tex.mapping[:, 2]
            texel = sample_image(tex.luminance, uv, tex.interpolation, tex.extension)
            out[sel[grp]] = np.float32(tex.offset) + np.float32(tex.scale) * texel
        return out

    def lobed(self, refl: Floating, weight: Floating, rows: Integer, normal: Floating,
              direction: Floating) -> tuple[F32, F32]:
        """(reflectivity, weight) (N,) float32 of hits on material rows ``rows`` (N,) int32 with
        their materials' lobes at each hit's incidence ``|normal . direction|`` (unit normals
        (N, 3), final ray segments' unit directions (N, 3)): the equivalent reflectance ``q``
        (:func:`lobe_reflectance`) enters the received power through the path weight, ``weight
        x sqrt(q / refl)`` (the energy is ``share x weight^2 x refl x cos``, core/sensors/beam.py),
        so ``refl`` stays the material's reflectivity (the result's ``reflectivity`` field);
        a hit of reflectivity 0 whose lobe returns light takes ``q`` as its reflectivity.
        ``refl`` and ``weight`` (``refl`` (N,), ``weight`` (N,) in [0, 1], the path's one-way
        transmission) themselves where no material has a lobe. Only the hits on lobed
        materials are computed."""
        out = np.asarray(refl, dtype=np.float32)
        w = np.asarray(weight, dtype=np.float32)
        lobe = self.lobe
        if lobe is None or out.size == 0:
            return out, w
        has: Bool | None = self.__dict__.get("_has_lobe")
        if has is None:
            has = self._has_lobe = lobe.any(axis=1)
        rows = np.asarray(rows)
        sel = np.flatnonzero(has[rows])
        if sel.size == 0:
            return out, w
        n = np.asarray(normal)[sel].astype(np.float64)
        d = np.asarray(direction)[sel].astype(np.float64)
        cos = np.abs(np.einsum("ij,ij->i", n, d))
        r = out[sel].astype(np.float64)
        q = lobe_reflectance(r, cos, lobe[rows[sel]]).astype(np.float64)
        pos = r > 0.0
        gain = np.where(pos, np.sqrt(q / np.where(pos, r, 1.0)), 1.0)
        out, w = out.copy(), w.copy()
        w[sel] = (w[sel] * gain).astype(np.float32)
        out[sel] = np.where(pos, r, q).astype(np.float32)
        return out, w

    def _reflectivity_for(self, wavelength: float | None) -> F32:
        """(M,) float32 reflectivity per material at ``wavelength`` nm (cached per value):
        ``reflectivity`` with the library materials' rows at that wavelength."""
        spectra = self.extra.get("spectra")
        if not spectra:
            return self.reflectivity
        cache: dict[float, F32] = self.__dict__.setdefault("_refl_at", {})
        key = DEFAULT_WAVELENGTH if wavelength is None else float(wavelength)
        table = cache.get(key)
        if table is None:
            table = self.reflectivity.copy()
            for row, entry in spectra.items():
                table[row] = entry.at(key)
            cache[key] = table
        return table

    def _textured(self) -> Bool:
        """(M,) bool, computed once: the material has a :class:`Texture`."""
        has = self.__dict__.get("_has_texture")
        if has is None:
            has = np.zeros(self.reflectivity.shape[0], bool)
            has[list(self.extra.get("textures", {}))] = True
            self._has_texture = has
        return has

    def has_optics(self) -> bool:
        """Some material is glass (``transmission`` > 0) or not fully opaque (``alpha`` < 1)."""
        return bool((self.transmission is not None and (self.transmission > 0).any())
                    or (self.alpha is not None and (self.alpha < 1).any()))

    def optics(self, instance: Integer, primitive: Integer,
               rows: Integer | None = None) -> tuple[F32, F32, F32]:
        """(transmission, ior, alpha) (H,) float32 of the hits (instance, primitive) (H,)
        int32 >= 0 (see the attributes); ``rows`` (H,) int32: their material rows
        (:meth:`lookup`) when the caller has them already (then ``instance`` and
        ``primitive`` are not read)."""
        if rows is None:
            rows = self.lookup(instance, primitive)
        n = rows.shape[0]
        t = np.zeros(n, np.float32) if self.transmission is None else self.transmission[rows]
        ior = np.full(n, 1.45, np.float32) if self.ior is None else self.ior[rows]
        a = np.ones(n, np.float32) if self.alpha is None else self.alpha[rows]
        return t, ior, a

    def lookup(self, instance: Integer, primitive: Integer) -> I32:
        """Material row for each hit.

        Args:
            instance (N,) int32 instance index (negative = miss), primitive (N,) int32
            triangle index within the instance's mesh.
        Returns:
            (N,) int32 material rows; misses and empty slots give 0 (the default).
        """
        instance = np.asarray(instance)
        table = self._row_table()
        if table is not None and instance.size:
            # one gather per hit from the per-instance rows (for speed);
            # a miss reads the table's last entry, 0
            rows, start = table
            ok = instance >= 0
            # a miss reads start's last entry (the zero row) plus 0
            at = start[np.where(ok, instance, -1)]
            at += np.where(ok, primitive, 0)
            return cast(I32, rows[at])
        out = np.zeros(instance.shape, dtype=np.int32)
        ok = instance >= 0
        if not ok.any():
            return out
        inst = instance[ok]
        mesh = self.inst_mesh[inst]
        slot = self.tri_material[self.mesh_tri_offset[mesh] + np.asarray(primitive)[ok]]
        start = self.inst_slot_offset[inst]
        nslots = self.inst_slot_offset[inst + 1] - start
        has = nslots > 0
        slot = np.clip(slot, 0, np.maximum(nslots - 1, 0))
        rows = np.zeros(inst.shape, dtype=np.int32)
        rows[has] = self.slot_material[(start + slot)[has]]
        out[ok] = rows
        return out

    #: instances above which :meth:`lookup` goes through the slots per hit instead of a
    #: table of rows per triangle of every distinct (mesh, slots) pair
    ROW_TABLE_MAX_INSTANCES = 4096

    def _row_table(self) -> tuple[I32, I64] | None:
        """(rows (T + 1,) int32, start (I + 1,) int64), made once: the material row of
        every triangle of each distinct (mesh, slot materials) of the instances
        (instances that share both share the rows), the zero row last, and where
        instance i's rows start (``start[I]``: the zero row). None with more than
        :attr:`ROW_TABLE_MAX_INSTANCES` instances. The rows are those of the per-hit
        lookup: slot clipped to the instance's slots, 0 without slots."""
        if self._rows_slot:
            return self._rows_slot[0]
        n_inst = self.inst_slot_offset.shape[0] - 1
        table = None
        if 0 < n_inst <= self.ROW_TABLE_MAX_INSTANCES and self.inst_mesh.shape[0] >= n_inst:
            seen: dict[tuple[int, bytes], int] = {}
            parts, at = [], 0
            start = np.empty(n_inst + 1, np.int64)
            for i in range(n_inst):
                m = int(self.inst_mesh[i])
                s0, s1 = int(self.inst_slot_offset[i]), int(self.inst_slot_offset[i + 1])
                key = (m, self.slot_material[s0:s1].tobytes())
                o = seen.get(key)
                if o is None:
                    slot = self.tri_material[int(self.mesh_tri_offset[m]):int(self.mesh_tri_offset[m + 1])]
                    if s1 > s0:
                        r = self.slot_material[s0 + np.clip(slot, 0, s1 - s0 - 1)].astype(np.int32)
                    else:
                        r = np.zeros(slot.shape[0], np.int32)
                    o = seen[key] = at
                    parts.append(r)
                    at += r.shape[0]
                start[i] = o
            start[n_inst] = at
            parts.append(np.zeros(1, np.int32))
            table = (np.concatenate(parts), start)
        self._rows_slot.append(table)
        return table

    def share_rows(self, other: MaterialTable | None) -> bool:
        """Use ``other``'s row table (:meth:`_row_table`, made already or when either
        table first needs it) if it is this table's: the same ``tri_material`` and
        ``mesh_tri_offset`` (the very arrays, or equal ones) and equal ``inst_mesh``,
        ``inst_slot_offset`` and ``slot_material``. The snapshots of a scene whose meshes
        do not change (an object moving elsewhere) then table their triangles' rows once,
        not once per sample (10^7 triangles: 0.1 s each). Returns whether it does."""
        if other is None or other is self or other._rows_slot is self._rows_slot:
            return other is not None
        if self._rows_slot or self.inst_slot_offset.shape[0] - 1 > self.ROW_TABLE_MAX_INSTANCES:
            return False  # made already, or none to make
        if not all(a is b or (a.shape == b.shape and np.array_equal(a, b)) for a, b in (
                (self.inst_mesh, other.inst_mesh), (self.inst_slot_offset, other.inst_slot_offset),
                (self.slot_material, other.slot_material), (self.mesh_tri_offset, other.mesh_tri_offset),
                (self.tri_material, other.tri_material))):
            return False
        self._rows_slot = other._rows_slot
        return True

    def is_mirror(self, instance: Integer, primitive: Integer) -> Bool:
        """(N,) bool: the hits (instance (N,) int32 >= 0, primitive (N,) int32) are on a
        mirror material. Only hits on instances that have a mirror slot at all are looked
        up, so a scene with one shop window does not pay a full lookup per bounce."""
        instance = np.asarray(instance)
        out = np.zeros(instance.shape, bool)
        cand = np.flatnonzero(self._instance_has_mirror()[instance]) if instance.size else instance[:0]
        if cand.size:
            out[cand] = self.mirror[self.lookup(instance[cand], np.asarray(primitive)[cand])]
        return out

    def _instance_has_mirror(self) -> Bool:
        """(I,) bool, computed once: some material slot of the instance is a mirror."""
        has = self._has_mirror
        if has is None:
            n = self.inst_slot_offset.shape[0] - 1
            owner = np.repeat(np.arange(n), np.diff(self.inst_slot_offset))
            flags = self.mirror[self.slot_material].astype(np.float64) if self.slot_material.size else np.zeros(0)
            has = np.bincount(owner, weights=flags, minlength=n) > 0
            self._has_mirror = has
        return has
