"""Per-hit material lookup: which material did a ray end on, and what are its properties.

The scene layer fills a :class:`MaterialTable` from Blender materials; everything here
is numpy so the lookup is one vectorised gather per scan.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Reflectivity of a surface without a BlenSor material setting: the original's Blender
#: Internal default diffuse intensity (reference section 3.4, index 11).
DEFAULT_REFLECTIVITY = 0.8


@dataclass
class MaterialTable:
    """Materials of a scene and how triangles of instances map to them.

    Attributes:
        reflectivity (M,) float32 in [0, 1]; row 0 is the default material.
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
    Texture and wavelength (issue 22, section 1) are filled in by the scene layer; see
    :meth:`reflectivity_at`.
    """

    reflectivity: np.ndarray
    mirror: np.ndarray
    color: np.ndarray
    names: list
    mesh_tri_offset: np.ndarray
    tri_material: np.ndarray
    inst_mesh: np.ndarray
    inst_slot_offset: np.ndarray
    slot_material: np.ndarray
    transmission: np.ndarray | None = None
    ior: np.ndarray | None = None
    alpha: np.ndarray | None = None
    #: extra per-material data of the material evaluator (textures, UVs, spectra)
    extra: dict = field(default_factory=dict)

    def reflectivity_at(self, rows: np.ndarray, instance: np.ndarray, primitive: np.ndarray, bary: np.ndarray,
                        wavelength: float | None = None) -> np.ndarray:
        """(N,) float32 reflectivity of each hit: material rows ``rows`` (N,) int32 (from
        :meth:`lookup`) of the hits on (instance, primitive) (N,) int32 at barycentrics
        ``bary`` (N, 2) float32; ``wavelength`` nm picks a library entry's reflectance
        (None: the material's own). CONTRACT STUB: ``reflectivity[rows]``."""
        return self.reflectivity[rows]

    def has_optics(self) -> bool:
        """Some material is glass (``transmission`` > 0) or not fully opaque (``alpha`` < 1)."""
        return bool((self.transmission is not None and (self.transmission > 0).any())
                    or (self.alpha is not None and (self.alpha < 1).any()))

    def optics(self, instance: np.ndarray, primitive: np.ndarray) -> tuple:
        """(transmission, ior, alpha) (H,) float32 of the hits (instance, primitive) (H,)
        int32 >= 0 (see the attributes)."""
        rows = self.lookup(instance, primitive)
        n = rows.shape[0]
        t = np.zeros(n, np.float32) if self.transmission is None else self.transmission[rows]
        ior = np.full(n, 1.45, np.float32) if self.ior is None else self.ior[rows]
        a = np.ones(n, np.float32) if self.alpha is None else self.alpha[rows]
        return t, ior, a

    def lookup(self, instance: np.ndarray, primitive: np.ndarray) -> np.ndarray:
        """Material row for each hit.

        Args:
            instance (N,) int32 instance index (negative = miss), primitive (N,) int32
            triangle index within the instance's mesh.
        Returns:
            (N,) int32 material rows; misses and empty slots give 0 (the default).
        """
        instance = np.asarray(instance)
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

    def is_mirror(self, instance: np.ndarray, primitive: np.ndarray) -> np.ndarray:
        """(N,) bool: the hits (instance (N,) int32 >= 0, primitive (N,) int32) are on a
        mirror material. Only hits on instances that have a mirror slot at all are looked
        up, so a scene with one shop window does not pay a full lookup per bounce."""
        instance = np.asarray(instance)
        out = np.zeros(instance.shape, bool)
        cand = np.flatnonzero(self._instance_has_mirror()[instance]) if instance.size else instance[:0]
        if cand.size:
            out[cand] = self.mirror[self.lookup(instance[cand], np.asarray(primitive)[cand])]
        return out

    def _instance_has_mirror(self) -> np.ndarray:
        """(I,) bool, computed once: some material slot of the instance is a mirror."""
        has = getattr(self, "_has_mirror", None)
        if has is None:
            n = self.inst_slot_offset.shape[0] - 1
            owner = np.repeat(np.arange(n), np.diff(self.inst_slot_offset))
            flags = self.mirror[self.slot_material].astype(np.float64) if self.slot_material.size else np.zeros(0)
            has = np.bincount(owner, weights=flags, minlength=n) > 0
            self._has_mirror = has
        return has
