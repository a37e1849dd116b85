"""Geometric optics of a glass surface (docs/physics.md, "Glass and alpha"): the Fresnel reflectance of
unpolarized light (:func:`fresnel_sp`, :func:`fresnel_unpolarized`), Snell's refraction
in vector form (:func:`refract`) and a thin pane's reflectance and transmittance with
its internal reflections summed (:func:`thin_slab`). Numpy only; the tracer that uses
them is :mod:`blensor_addon.raycast.trace`.

Sources:
    E. Hecht, *Optics*, 5th ed., section 4.6 (Fresnel equations, reflectance and
    transmittance, total internal reflection); M. Born and E. Wolf, *Principles of
    Optics*, 7th ed., section 1.5.2 (Fresnel formulae); M. Pharr, W. Jakob and
    G. Humphreys, *Physically Based Rendering*, 3rd ed., section 8.2 (``FrDielectric``,
    8.2.1, and ``Refract``, 8.2.3: the vector form of Snell's law used here).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .ndtypes import F64, Bool, Floating


def _cosines(cos_i: ArrayLike, n1: ArrayLike, n2: ArrayLike) -> tuple[F64, F64, Bool, F64, F64]:
    """(cos_i, cos_t, tir) float64 arrays broadcast together: Snell's law
    ``n1 sin(theta_i) = n2 sin(theta_t)``; ``tir`` where ``sin(theta_t) >= 1``."""
    ci = np.clip(np.asarray(cos_i, dtype=np.float64), 0.0, 1.0)
    n1 = np.asarray(n1, dtype=np.float64)
    n2 = np.asarray(n2, dtype=np.float64)
    sin2_t = (n1 / n2) ** 2 * (1.0 - ci * ci)
    tir = sin2_t >= 1.0
    ct = np.sqrt(np.maximum(0.0, 1.0 - sin2_t))
    return ci, ct, tir, n1, n2


def fresnel_sp(cos_i: Floating, n1: Floating | float, n2: Floating | float) -> tuple[F64, F64]:
    """Fresnel reflectances (R_s, R_p), each (N,) float64 in [0, 1], of light polarized
    perpendicular (s) and parallel (p) to the plane of incidence, meeting the boundary
    from index ``n1`` into ``n2`` (> 0) at incidence cosine ``cos_i`` (N,) (clipped to
    [0, 1]); both 1 under total internal reflection and at grazing incidence.

    ``r_s = (n1 cos_i - n2 cos_t) / (n1 cos_i + n2 cos_t)``,
    ``r_p = (n2 cos_i - n1 cos_t) / (n2 cos_i + n1 cos_t)``, ``R = r^2``
    (Hecht section 4.6.2; Born and Wolf section 1.5.2). ``R_p`` is 0 at Brewster's angle
    ``tan(theta_B) = n2 / n1``.
    """
    ci, ct, tir, m1, m2 = _cosines(cos_i, n1, n2)
    with np.errstate(divide="ignore", invalid="ignore"):
        r_s = (m1 * ci - m2 * ct) / (m1 * ci + m2 * ct)
        r_p = (m2 * ci - m1 * ct) / (m2 * ci + m1 * ct)
    rs = np.where(tir | ~np.isfinite(r_s), 1.0, r_s * r_s)
    rp = np.where(tir | ~np.isfinite(r_p), 1.0, r_p * r_p)
    return np.minimum(rs, 1.0), np.minimum(rp, 1.0)


def fresnel_unpolarized(cos_i: Floating, n1: Floating | float, n2: Floating | float) -> F64:
    """(N,) float64 reflectance R in [0, 1] of unpolarized light meeting the boundary from
    index ``n1`` into ``n2`` at incidence cosine ``cos_i`` (N,) in [0, 1]; 1 under total
    internal reflection.

    ``R = (R_s + R_p) / 2`` (:func:`fresnel_sp`; Hecht section 4.6.3, PBRT section 8.2.1):
    at normal incidence ``((n2 - n1) / (n2 + n1))^2`` (0.04 for glass of IOR 1.5 in air),
    rising to 1 at grazing incidence.
    """
    rs, rp = fresnel_sp(cos_i, n1, n2)
    return 0.5 * (rs + rp)


def refract(d: Floating, n: Floating, eta: Floating | float) -> tuple[F64, Bool]:
    """Snell's law: (N, 3) float64 unit refracted directions of unit directions ``d``
    (N, 3) through a surface of unit normals ``n`` (N, 3) facing the incoming rays, with
    ``eta = n1 / n2``; and (N,) bool total internal reflection (no refracted ray).

    ``t = eta d + (eta cos_i - cos_t) n`` with ``cos_i = -d . n`` and
    ``cos_t = sqrt(1 - eta^2 (1 - cos_i^2))`` (PBRT section 8.2.3). Rows under total
    internal reflection get the mirror direction ``d + 2 cos_i n`` (where the light goes).
    """
    d = np.asarray(d, dtype=np.float64).reshape(-1, 3)
    n = np.asarray(n, dtype=np.float64).reshape(-1, 3)
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (d.shape[0],))
    cos_i = np.clip(-np.einsum("ij,ij->i", d, n), 0.0, 1.0)
    sin2_t = eta * eta * (1.0 - cos_i * cos_i)
    tir = sin2_t > 1.0
    cos_t = np.sqrt(np.maximum(0.0, 1.0 - sin2_t))
    t = eta[:, None] * d + (eta * cos_i - cos_t)[:, None] * n
    if tir.any():
        t[tir] = d[tir] + 2.0 * cos_i[tir, None] * n[tir]
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    return t, tir


def thin_slab(cos_i: Floating, n: Floating | float) -> tuple[F64, F64]:
    """Reflectance and transmittance (R, T), each (N,) float64 with R + T = 1, of a thin
    lossless pane of index ``n`` in air, at incidence cosine ``cos_i`` (N,), for
    unpolarized light with every internal reflection summed incoherently.

    Per polarization with the single-surface reflectance r (:func:`fresnel_sp`; the back
    surface reflects the same r, by reciprocity), the geometric series of the rays
    bouncing inside the pane gives ``R = r + (1 - r)^2 r / (1 - r^2) = 2 r / (1 + r)`` and
    ``T = (1 - r)^2 / (1 - r^2) = (1 - r) / (1 + r)``; the two polarizations are averaged
    (the incoherent limit of the multiple-beam sum of a plane-parallel plate, Born and Wolf
    section 7.6.1: the pane is many wavelengths thick, so the phases average out). At
    normal incidence for n = 1.5: R = 0.0769, T = 0.9231, against (1 - 0.04)^2 = 0.9216
    for two surfaces without the internal reflections.
    """
    rs, rp = fresnel_sp(cos_i, 1.0, n)
    R = 0.5 * (2.0 * rs / (1.0 + rs) + 2.0 * rp / (1.0 + rp))
    T = 0.5 * ((1.0 - rs) / (1.0 + rs) + (1.0 - rp) / (1.0 + rp))
    return R, T


__all__ = ["fresnel_sp", "fresnel_unpolarized", "refract", "thin_slab"]
