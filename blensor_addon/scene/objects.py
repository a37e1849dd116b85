"""The scene's objects as a scan sees them: ids and labels (:class:`ObjectTable`), the
instance index of Blender's persistent ids (:func:`instance_index`) and the sensor's rigid
pose (:func:`sensor_pose`). The ids and labels are the ground truth every scan result
carries (reference section 3.5 for the original's colliding ids).
"""
from __future__ import annotations

import numpy as np

from ..core.errors import SettingsError

GEOMETRY_TYPES = {"MESH", "CURVE", "SURFACE", "FONT", "META"}
LABEL_PROPERTY = "blensor_label"
#: object property marking the point meshes BlenSor made (scene/meshes.py)
SCAN_OUTPUT_PROPERTY = "blensor_scan"


class ObjectTable:
    """Object ids derived from the file, not from the frames scanned.

    Every object of ``bpy.data.objects`` gets id ``1 + rank`` of its full name
    (``name_full``, which includes the library of linked objects) in sorted order, so
    the same .blend gives the same ids in every process, whichever frames it scans:
    frame ranges split over processes or hosts give identical files. An instance is
    identified by three numbers: the id of its source object (the mesh that was hit,
    whose ``blensor_label`` is its label), the id of its instancer and its index there.
    The original used the first four characters of the object name (reference 3.5),
    which collided ("Cube" and "Cube.001"); these ids never do. Point meshes of earlier
    scans (objects marked ``blensor_scan``) are left out, so a single scan in the GUI
    does not change the ids of later scans.
    """

    def __init__(self, objects) -> None:
        # the point meshes BlenSor itself made (``blensor_scan``) are no scene content:
        # numbering them would shift the ids of every object sorted after them
        obs = sorted((o for o in objects if not o.get(SCAN_OUTPUT_PROPERTY)), key=lambda o: o.name_full)
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
    """Instance id in 1..2**32-1 from Blender's persistent id (its used levels l_0..l_k;
    unused levels hold INT_MAX): ``1 + (h mod (2**32 - 1))`` with ``h = fold(l)``,
    ``h <- h * 1000003 + l_j``. Collection and vertex instances (one level i) and
    Geometry Nodes instances (levels 0, i) get ``i + 1``, the index in their instancer;
    deeper nesting mixes the levels."""
    h = 0
    for x in persistent_id:
        if int(x) != 0x7FFFFFFF:
            h = (h * 1000003 + int(x)) & 0xFFFFFFFFFFFFFFFF
    return h % 0xFFFFFFFF + 1


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
