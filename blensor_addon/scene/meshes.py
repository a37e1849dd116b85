"""Point meshes of a scan (``Scan.<frame>`` / ``NoisyScan.<frame>``) with the result
fields as point attributes (reference section 10.6, without the original's duplicated
layers and per-vertex bmesh loop)."""
from __future__ import annotations

import bpy
import numpy as np

from ..core.result import ScanResult

SCAN_PREFIXES = ("Scan.", "NoisyScan.")
#: result field -> Blender attribute type
_ATTRS = {
    "timestamp": "FLOAT", "azimuth": "FLOAT", "elevation": "FLOAT", "range": "FLOAT",
    "range_noisy": "FLOAT", "object_id": "INT", "channel": "INT", "reflectivity": "FLOAT",
    "intensity": "FLOAT", "normal": "FLOAT_VECTOR", "color": "FLOAT_COLOR",
}


def add_scan_mesh(result: ScanResult, noisy: bool = False, collection=None, camera_object=None):
    """Create a vertex-only mesh object of the returns and link it to ``collection``
    (default: the scene collection).

    Points are in the result's frame of reference; with ``"sensor"`` the object is placed
    at the sensor pose (``result.sensor_to_world``) so it lines up with the scene.
    Attributes: one per result field (``timestamp`` is stored as float32 seconds, so its
    resolution is coarser than the float64 in the files; ``object_id`` as int32;
    ``color`` as linear float colour). Returns the new object.
    """
    name = ("NoisyScan." if noisy else "Scan.") + str(result.frame)
    mesh = bpy.data.meshes.new(name)
    n = len(result)
    pts = result.xyz_noisy if noisy else result.xyz
    mesh.vertices.add(n)
    mesh.vertices.foreach_set("co", np.ascontiguousarray(pts, np.float32).reshape(-1))
    for field, kind in _ATTRS.items():
        attr = mesh.attributes.new(field, kind, "POINT")
        arr = getattr(result, field)
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
    obj["blensor_scan"] = True
    return obj


def delete_scan_meshes() -> int:
    """Delete every object made by :func:`add_scan_mesh` (and its mesh). Returns the count."""
    doomed = [o for o in bpy.data.objects
              if o.get("blensor_scan") and o.name.startswith(SCAN_PREFIXES)]
    meshes = [o.data for o in doomed]
    for o in doomed:
        bpy.data.objects.remove(o, do_unlink=True)
    for m in meshes:
        if m is not None and m.users == 0:
            bpy.data.meshes.remove(m)
    return len(doomed)
