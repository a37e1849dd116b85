"""Point meshes of a scan (``Scan.<frame>`` / ``NoisyScan.<frame>``) with every result
field as a point attribute (reference section 10.6, without the original's duplicated
layers and per-vertex bmesh loop). The attributes derive from the result's field
registry (:data:`~blensor_addon.core.result.FIELDS` and the ``extra`` fields it holds,
:func:`mesh_attributes`), so a field a sensor adds appears without an edit here."""
from __future__ import annotations

import bpy
import numpy as np

from ..core.result import ScanResult
from .objects import SCAN_OUTPUT_PROPERTY

SCAN_PREFIXES = ("Scan.", "NoisyScan.")
#: fields that are the vertex positions themselves (the clean or the noisy cloud)
POSITION_FIELDS = ("xyz", "xyz_noisy")


def mesh_attributes(result: ScanResult) -> dict[str, str]:
    """Result field -> Blender attribute type of every per-point field of ``result``
    but the positions (:data:`POSITION_FIELDS`): (N,) floats ``FLOAT`` (float32; a
    float64 ``timestamp`` loses resolution), (N,) integers ``INT`` (int32), ``color``
    ``FLOAT_COLOR``, other (N, 3) fields ``FLOAT_VECTOR``."""
    out = {}
    for name, arr in result.all_fields().items():
        if name in POSITION_FIELDS:
            continue
        if name == "color":
            out[name] = "FLOAT_COLOR"
        elif arr.ndim == 2 and arr.shape[1] == 3:
            out[name] = "FLOAT_VECTOR"
        elif arr.ndim == 1:
            out[name] = "INT" if arr.dtype.kind in "iub" else "FLOAT"
    return out


def add_scan_mesh(result: ScanResult, noisy: bool = False, collection=None, camera_object=None):
    """Create a vertex-only mesh object of the returns and link it to ``collection``
    (default: the scene collection).

    Points are in the result's frame of reference (``xyz``, or ``xyz_noisy`` for the
    noisy mesh); with ``"sensor"`` the object is placed at the sensor pose
    (``result.sensor_to_world``) so it lines up with the scene. Attributes: one per
    result field, named as the field (:func:`mesh_attributes`: ``timestamp`` is stored as
    float32 seconds, so its resolution is coarser than the float64 in the files; integer
    ids as int32; ``color`` as linear float colour); both meshes carry ``range`` and
    ``range_noisy``. Returns the new object.
    """
    name = ("NoisyScan." if noisy else "Scan.") + str(result.frame)
    mesh = bpy.data.meshes.new(name)
    n = len(result)
    pts = result.xyz_noisy if noisy else result.xyz
    mesh.vertices.add(n)
    mesh.vertices.foreach_set("co", np.ascontiguousarray(pts, np.float32).reshape(-1))
    fields = result.all_fields()
    for field, kind in mesh_attributes(result).items():
        attr = mesh.attributes.new(field, kind, "POINT")
        arr = fields[field]
        if kind == "FLOAT_VECTOR":
            attr.data.foreach_set("vector", np.ascontiguousarray(arr, np.float32).reshape(-1))
        elif kind == "FLOAT_COLOR":
            c = np.ones((n, 4), np.float32)
            srgb = arr.astype(np.float32) / 255.0
            c[:, :3] = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
            attr.data.foreach_set("color", c.reshape(-1))
        elif kind == "INT":
            attr.data.foreach_set("value", arr.astype(np.int32))
        else:
            attr.data.foreach_set("value", arr.astype(np.float32))
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    if result.frame_of_reference == "sensor":
        from mathutils import Matrix
        obj.matrix_world = Matrix(result.sensor_to_world.tolist())
    (collection or bpy.context.scene.collection).objects.link(obj)
    obj[SCAN_OUTPUT_PROPERTY] = True
    return obj


def delete_scan_meshes() -> int:
    """Delete every object made by :func:`add_scan_mesh` (and its mesh). Returns the count."""
    doomed = [o for o in bpy.data.objects
              if o.get(SCAN_OUTPUT_PROPERTY) and o.name.startswith(SCAN_PREFIXES)]
    meshes = [o.data for o in doomed]
    for o in doomed:
        bpy.data.objects.remove(o, do_unlink=True)
    for m in meshes:
        if m is not None and m.users == 0:
            bpy.data.meshes.remove(m)
    return len(doomed)
