"""Geometric optics of a glass surface (issue 22, section 3): the Fresnel reflectance of
unpolarized light and Snell's refraction.

CONTRACT STUB: signatures only.
"""
from __future__ import annotations

import numpy as np


def fresnel_unpolarized(cos_i: np.ndarray, n1: np.ndarray | float, n2: np.ndarray | float) -> np.ndarray:
    """(N,) float64 reflectance R in [0, 1] of unpolarized light meeting the boundary from
    index ``n1`` into ``n2`` at incidence cosine ``cos_i`` (N,) in [0, 1]; 1 under total
    internal reflection."""
    raise NotImplementedError


def refract(d: np.ndarray, n: np.ndarray, eta: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Snell's law: (N, 3) float64 unit refracted directions of unit directions ``d``
    (N, 3) through a surface of unit normals ``n`` (N, 3) facing the incoming rays, with
    ``eta = n1 / n2``; and (N,) bool total internal reflection (no refracted ray)."""
    raise NotImplementedError
