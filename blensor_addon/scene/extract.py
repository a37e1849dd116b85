"""Evaluated depsgraph -> :class:`SceneSnapshot` (geometry, materials, object ids).

Modifiers, Geometry Nodes and instances are included because everything is read from
the evaluated depsgraph; nothing is applied to or written into the user's objects.
Arrays are copied with ``foreach_get`` (no per-vertex Python).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from ..core.errors import SettingsError
from ..core.materials import DEFAULT_REFLECTIVITY, MaterialTable
from ..raycast.base import MeshData, SceneGeometry

GEOMETRY_TYPES = {"MESH", "CURVE", "SURFACE", "FONT", "META"}
LABEL_PROPERTY = "blensor_label"


def linear_to_srgb_u8(rgb) -> np.ndarray:
    """Linear RGB in [0, 1] -> sRGB-encoded uint8 (IEC 61966-2-1 transfer function)."""
    c = np.clip(np.asarray(rgb, dtype=np.float64), 0.0, 1.0)
    s = np.where(c <= 0.0031308, 12.92 * c, 1.055 * np.power(c, 1.0 / 2.4) - 0.055)
    return np.round(s * 255.0).astype(np.uint8)


def material_color(mat) -> tuple[float, float, float]:
    """Base colour of a material (linear RGB): the Principled BSDF's Base Color input if
    the node tree has one, else the viewport ``diffuse_color``."""
    if mat.node_tree is not None:
        for node in mat.node_tree.nodes:
            if node.type == "BSDF_PRINCIPLED":
                c = node.inputs["Base Color"].default_value
                return (c[0], c[1], c[2])
    c = mat.diffuse_color
    return (c[0], c[1], c[2])


def material_properties(mat) -> tuple[float, bool]:
    """(reflectivity, mirror) of a material from its ``blensor`` settings (defaults
    0.8 / False when the add-on's properties are absent)."""
    props = getattr(mat, "blensor", None)
    if props is None:
        return DEFAULT_REFLECTIVITY, False
    return float(props.reflectivity), bool(props.mirror)


def mesh_arrays(mesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertices (V,3) float32, triangles (T,3) int32 and triangle material slots (T,)
    int32 of a mesh, in Blender's loop-triangle order.

    Fast path (Blender 4.x/5.x attribute arrays): positions, corner vertices and the
    polygon of each loop triangle are copied with ``foreach_get``; triangles and quads
    are split as Blender splits them ((0,1,2), (0,2,3)), so the result equals
    ``mesh.loop_triangles``. Meshes with n-gons (more than 4 corners) take the slower
    ``loop_triangles`` path, which follows Blender's n-gon fill exactly.
    """
    attrs = mesh.attributes
    nv = len(mesh.vertices)
    v = np.empty(nv * 3, np.float32)
    if "position" in attrs:
        attrs["position"].data.foreach_get("vector", v)
    else:
        mesh.vertices.foreach_get("co", v)
    tri_poly = None
    if hasattr(mesh, "loop_triangle_polygons") and ".corner_vert" in attrs:
        nt = len(mesh.loop_triangle_polygons)
        tri_poly = np.empty(nt, np.int32)
        mesh.loop_triangle_polygons.foreach_get("value", tri_poly)
        npoly = len(mesh.polygons)
        per_poly = np.bincount(tri_poly, minlength=npoly)
        if nt and per_poly.max() > 2:
            tri_poly = None  # n-gons present
    if tri_poly is not None:
        corner_vert = np.empty(len(mesh.loops), np.int32)
        attrs[".corner_vert"].data.foreach_get("value", corner_vert)
        corners = per_poly + 2
        loop_start = np.zeros(npoly, np.int64)
        np.cumsum(corners[:-1], out=loop_start[1:])
        first_tri = np.zeros(npoly, np.int64)
        np.cumsum(per_poly[:-1], out=first_tri[1:])
        k = np.arange(nt, dtype=np.int64) - first_tri[tri_poly]  # triangle k of its polygon
        s = loop_start[tri_poly]
        t = np.stack([corner_vert[s], corner_vert[s + k + 1], corner_vert[s + k + 2]], 1)
        if "material_index" in attrs:
            pm = np.empty(npoly, np.int32)
            attrs["material_index"].data.foreach_get("value", pm)
            m = pm[tri_poly]
        else:
            m = np.zeros(nt, np.int32)
        return v.reshape(-1, 3), np.ascontiguousarray(t, np.int32), m
    tris = mesh.loop_triangles
    nt = len(tris)
    t = np.empty(nt * 3, np.int32)
    tris.foreach_get("vertices", t)
    m = np.empty(nt, np.int32)
    tris.foreach_get("material_index", m)
    return v.reshape(-1, 3), t.reshape(-1, 3), m


@dataclass
class SceneSnapshot:
    """Everything a scan needs from one evaluated frame.

    Geometry is stored relative to the sensor position (``origin``): instance transforms
    are made in float64, the sensor position is subtracted, and only then are they
    rounded to float32. Far from the world origin (100 km) ranges therefore keep
    sub-0.1 mm precision; the ray caster works in this shifted world frame, rays start
    at (0, 0, 0).

    Attributes:
        geometry: meshes and instances (transforms: world minus ``origin``).
        materials: material table and per-triangle mapping.
        instance_object_id (I,) uint32: object id of each instance's source object.
        instance_instancer_id (I,) uint32: object id of the instancer (0: drawn directly).
        instance_index (I,) uint32: index of the instance within its instancer, + 1
            (0: drawn directly).
        objects: the object table, list of {"id", "name", "label", "type"}.
        sensor_to_world (4, 4) float64 rigid pose of the sensor (scale removed).
        origin (3,) float64 m: world position subtracted from the geometry.
    """

    geometry: SceneGeometry
    materials: MaterialTable
    instance_object_id: np.ndarray
    instance_instancer_id: np.ndarray
    instance_index: np.ndarray
    objects: list
    sensor_to_world: np.ndarray
    origin: np.ndarray


class ObjectTable:
    """Object ids derived from the file, not from the frames scanned.

    Every object of ``bpy.data.objects`` gets id ``1 + rank`` of its full name
    (``name_full``, which includes the library of linked objects) in sorted order, so
    the same .blend gives the same ids in every process, whichever frames it scans:
    frame ranges split over processes or hosts give identical files. An instance is
    identified by three numbers: the id of its source object (the mesh that was hit,
    whose ``blensor_label`` is its label), the id of its instancer and its index there.
    The original used the first four characters of the object name (reference 3.5),
    which collided ("Cube" and "Cube.001"); these ids never do.
    """

    def __init__(self, objects) -> None:
        obs = sorted(objects, key=lambda o: o.name_full)
        self.ids = {o.name_full: i + 1 for i, o in enumerate(obs)}
        self.table = [{"id": i + 1, "name": o.name_full, "type": o.type,
                       "label": str(o.get(LABEL_PROPERTY, ""))} for i, o in enumerate(obs)]

    def id_of(self, ob) -> int:
        """Id of an (original) object; objects created after the table get new ids."""
        name = ob.name_full
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.table) + 1
            self.table.append({"id": i, "name": name, "type": ob.type,
                               "label": str(ob.get(LABEL_PROPERTY, ""))})
        return i


def instance_index(persistent_id) -> int:
    """Index of an instance within its instancer, + 1, from Blender's persistent id
    (unused levels hold INT_MAX). One level: the index itself + 1; nested instancing:
    a CRC-32 of the used levels (never 0)."""
    levels = [int(x) for x in persistent_id if int(x) != 0x7FFFFFFF]
    if len(levels) <= 1:
        return (levels[0] if levels else 0) + 1
    return (zlib.crc32(np.asarray(levels, np.int64).tobytes()) & 0xFFFFFFFF) or 1


def sensor_pose(matrix_world) -> np.ndarray:
    """Rigid (4, 4) float64 pose from an object's world matrix, scale removed.

    Raises:
        SettingsError (``camera``): the matrix is not finite, or its scale is zero or
        negative on some axis (a mirrored sensor frame has no rigid pose).
    """
    M = np.array(matrix_world, dtype=np.float64)
    R = M[:3, :3]
    norms = np.linalg.norm(R, axis=0)
    if not np.isfinite(M).all() or not (norms > 1e-12).all() or np.linalg.det(R) <= 0:
        scale = tuple(round(float(x), 6) for x in norms * np.sign(np.linalg.det(R) or 1.0))
        raise SettingsError("camera", "a camera whose world matrix is finite with a positive scale on "
                            "every axis", f"scale {scale}" if np.isfinite(M).all() else "a non-finite matrix")
    out = np.eye(4)
    out[:3, :3] = R / norms
    out[:3, 3] = M[:3, 3]
    return out


class SceneExtractor:
    """Reads evaluated frames into :class:`SceneSnapshot`. Object ids come from
    :class:`ObjectTable` (built once, from ``bpy.data.objects``); acceleration
    structures are reused by the ray caster through the meshes' content keys."""

    def __init__(self, objects=None) -> None:
        if objects is None:
            import bpy
            objects = bpy.data.objects
        self.table = ObjectTable(objects)

    def extract(self, depsgraph, sensor_object, render: bool = True) -> SceneSnapshot:
        """Snapshot of the evaluated scene, without ``sensor_object``; with
        ``render=True`` also without objects hidden from render (``hide_render``; for
        instances, the instancer's). The depsgraph decides everything else (see
        :mod:`blensor_addon.scene.visibility`)."""
        meshes: list[MeshData] = []
        mesh_index: dict = {}
        tri_mats: list[np.ndarray] = []
        inst_mesh, inst_mat, slots = [], [], []
        inst_obj, inst_parent, inst_idx = [], [], []
        mat_rows: dict = {}
        materials = [("", DEFAULT_REFLECTIVITY, False, (0.8, 0.8, 0.8))]
        sensor_name = sensor_object.original.name if sensor_object.is_evaluated else sensor_object.name
        cam = sensor_object.evaluated_get(depsgraph) if not sensor_object.is_evaluated else sensor_object
        pose = sensor_pose(cam.matrix_world)
        origin = pose[:3, 3].copy()
        table = self.table
        for inst in depsgraph.object_instances:
            ob = inst.object
            if ob.type not in GEOMETRY_TYPES:
                continue
            orig = ob.original
            parent = inst.parent.original if inst.is_instance and inst.parent is not None else None
            if orig.name == sensor_name:
                continue
            if render and (parent.hide_render if parent is not None else orig.hide_render):
                continue
            if ob.type == "MESH":
                data = ob.data
                ptr = data.as_pointer()
                if ptr not in mesh_index:
                    v, t, m = mesh_arrays(data)
                    mesh_index[ptr] = self._add_mesh(meshes, tri_mats, v, t, m)
                mi = mesh_index[ptr]
            else:
                data = ob.to_mesh()
                try:
                    v, t, m = mesh_arrays(data)
                finally:
                    ob.to_mesh_clear()
                mi = self._add_mesh(meshes, tri_mats, v, t, m)
            if meshes[mi].triangles.shape[0] == 0:
                continue
            rows = []
            for slot in ob.material_slots:
                mat = slot.material
                if mat is None:
                    rows.append(0)
                    continue
                mo = mat.original
                if mo.name_full not in mat_rows:
                    refl, mirror = material_properties(mo)
                    materials.append((mo.name_full, refl, mirror, material_color(mo)))
                    mat_rows[mo.name_full] = len(materials) - 1
                rows.append(mat_rows[mo.name_full])
            inst_mesh.append(mi)
            inst_mat.append(np.array(inst.matrix_world, dtype=np.float64))
            slots.append(rows)
            inst_obj.append(table.id_of(orig))
            if parent is not None:
                inst_parent.append(table.id_of(parent))
                inst_idx.append(instance_index(inst.persistent_id))
            else:
                inst_parent.append(0)
                inst_idx.append(0)
        mats = np.array(inst_mat, np.float64).reshape(-1, 4, 4)
        mats[:, :3, 3] -= origin  # float64 before the float32 rounding (precision far out)
        geometry = SceneGeometry(meshes, np.array(inst_mesh, np.int32), mats.astype(np.float32))
        tri_off = np.zeros(len(meshes) + 1, np.int64)
        tri_off[1:] = np.cumsum([t.shape[0] for t in tri_mats]) if tri_mats else []
        slot_off = np.zeros(len(slots) + 1, np.int64)
        slot_off[1:] = np.cumsum([len(s) for s in slots]) if slots else []
        mtable = MaterialTable(
            reflectivity=np.array([m[1] for m in materials], np.float32),
            mirror=np.array([m[2] for m in materials], bool),
            color=linear_to_srgb_u8([m[3] for m in materials]).reshape(-1, 3),
            names=[m[0] for m in materials],
            mesh_tri_offset=tri_off,
            tri_material=np.concatenate(tri_mats) if tri_mats else np.zeros(0, np.int32),
            inst_mesh=geometry.instance_mesh,
            inst_slot_offset=slot_off,
            slot_material=np.array([r for s in slots for r in s], np.int32),
        )
        return SceneSnapshot(geometry, mtable, np.array(inst_obj, np.uint32),
                             np.array(inst_parent, np.uint32), np.array(inst_idx, np.uint32),
                             table.table, pose, origin)

    @staticmethod
    def _add_mesh(meshes, tri_mats, v, t, m) -> int:
        meshes.append(MeshData(v, t))
        tri_mats.append(m)
        return len(meshes) - 1
