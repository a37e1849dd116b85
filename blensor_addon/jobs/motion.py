"""Motion-data export (``blensor motion``, operator ``blensor.export_motion``): the poses of
objects and of the sensor camera over a frame range, and per frame the 3D boxes of every
labelled object.

Formats (files in the output folder):

- ``blensor``: ``motion.txt``, the original's text (reference 10.7), byte-compatible:
  per frame and object ``timestamp: %.4f object: %s x: %.10f y: %.10f z: %.10f rx: %.10f
  ry: %.10f rz: %.10f`` with timestamp = frame / fps and the translation and XYZ Euler
  angles (rad) of ``matrix_world``.
- ``tum``: ``tum/<object>.tum`` per object, ``t tx ty tz qx qy qz qw`` (TUM RGB-D), t =
  frame x frame time (s), the world pose of the object with its scale removed.
- ``kitti``: ``kitti_poses/<object>.txt``, one 3x4 row-major world pose per frame.
- ``json``: ``boxes/<frame:05d>.json``, every labelled object's 3D box (centre, size
  l x w x h in m, yaw about world +Z in rad, class name and SemanticKITTI id, instance
  id = object id, velocity of the centre in m/s by finite differences), and
  ``tracking.txt`` in the KITTI tracking label layout (frame, track id, type, truncated
  0, occluded 0, alpha -10, bbox -1 -1 -1 -1, dimensions h w l, location = the box's
  bottom centre, rotation_y = yaw) in world coordinates (Z up; KITTI's camera frame is
  not defined for a scene without cameras).

Objects: the given names, or every object of the scene (mesh, empty, camera, ...);
boxes only for objects with a ``blensor_label``. Poses are the evaluated
``matrix_world`` at each frame.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix

from ..core.classes import CLASSES
from ..core.errors import SettingsError
from ..io.atomic import commit_files
from ..io.trajectory import tum_bytes
from ..scene.extract import LABEL_PROPERTY, ObjectTable

MOTION_FORMATS = ("blensor", "tum", "kitti", "json")


def parse_motion_formats(formats) -> tuple[str, ...]:
    """``"tum,json"`` or an iterable -> tuple of motion formats.

    Raises:
        SettingsError (``format``): empty or unknown.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in MOTION_FORMATS for f in items):
        raise SettingsError("format", "a comma-separated subset of " + ",".join(MOTION_FORMATS), formats)
    return tuple(dict.fromkeys(items))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def rigid(matrix_world) -> np.ndarray:
    """(4, 4) float64 world pose with the scale removed (columns normalized)."""
    M = np.array(matrix_world, dtype=np.float64)
    R = M[:3, :3]
    n = np.linalg.norm(R, axis=0)
    T = np.eye(4)
    T[:3, :3] = R / np.where(n > 0, n, 1.0)
    T[:3, 3] = M[:3, 3]
    return T


def box_of(obj, depsgraph) -> tuple[np.ndarray, np.ndarray, float]:
    """Centre (3,) world m, size (3,) l w h m (object axes times scale) and yaw (rad,
    about world +Z) of an object's evaluated bounding box."""
    ev = obj.evaluated_get(depsgraph)
    corners = np.array([tuple(c) for c in ev.bound_box], dtype=np.float64)
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    M = np.array(ev.matrix_world, dtype=np.float64)
    scale = np.linalg.norm(M[:3, :3], axis=0)
    centre = (M @ np.append((lo + hi) / 2.0, 1.0))[:3]
    R = rigid(M)[:3, :3]
    return centre, (hi - lo) * scale, math.atan2(R[1, 0], R[0, 0])


def export_motion(frames, out_dir, formats=("blensor",), objects=None, overwrite: bool = False) -> list[str]:
    """Write the motion data of ``frames`` into ``out_dir``; returns the file names.

    Args:
        frames: scene frames (within the scene's range); out_dir: folder (created).
        formats: subset of :data:`MOTION_FORMATS`; objects: object names (default every
            object of the scene); overwrite: replace earlier motion files.
    Raises:
        SettingsError: bad frames, formats, object names, a class label not in the table,
        or a folder holding earlier motion files without ``overwrite``.
        OSError: a write failed (no partial file is left).
    """
    from .range_scan import check_frames, check_output_dir
    formats = parse_motion_formats(formats)
    scene = bpy.context.scene
    frames = check_frames(scene, frames)
    if objects is None:
        obs = sorted(scene.objects, key=lambda o: o.name)
    else:
        names = [objects] if isinstance(objects, str) else list(objects)
        missing = [n for n in names if scene.objects.get(n) is None]
        if missing or not names:
            raise SettingsError("objects", "names of objects of the scene", ", ".join(missing) or names)
        obs = [scene.objects[n] for n in names]
    labelled = [o for o in obs if o.get(LABEL_PROPERTY, "") and o.type == "MESH"]
    for o in labelled:
        if o[LABEL_PROPERTY] not in CLASSES:
            raise SettingsError("blensor_label", "a class name of the table (" + ", ".join(CLASSES) + ")",
                                f"{o[LABEL_PROPERTY]!r} on object {o.name!r}")
    out = check_output_dir(out_dir)
    names = {"blensor": ["motion.txt"], "tum": [f"tum/{_safe(o.name)}.tum" for o in obs],
             "kitti": [f"kitti_poses/{_safe(o.name)}.txt" for o in obs],
             "json": [f"boxes/{f:05d}.json" for f in frames] + ["tracking.txt"]}
    taken = [n for f in formats for n in names[f] if (out / n).exists()]
    if taken and not overwrite:
        raise SettingsError("out", "a folder without earlier motion files (use --overwrite)",
                            f"{out} holds {taken[0]}")
    ids = ObjectTable(bpy.data.objects).ids
    fps = scene.render.fps
    ft = float(scene.render.fps_base) / float(fps)
    old = scene.frame_current
    poses = {o.name: [] for o in obs}
    boxes = {o.name: [] for o in labelled}
    try:
        for f in frames:
            scene.frame_set(f)
            dg = bpy.context.evaluated_depsgraph_get()
            for o in obs:
                poses[o.name].append(np.array(o.evaluated_get(dg).matrix_world, dtype=np.float64))
            for o in labelled:
                boxes[o.name].append(box_of(o, dg))
    finally:
        if scene.frame_current != old:
            scene.frame_set(old)
    files = []
    if "blensor" in formats:
        lines = []
        for i, f in enumerate(frames):
            for o in obs:
                M = poses[o.name][i]
                e = Matrix(M.tolist()).to_euler("XYZ")
                lines.append(f"timestamp: {f / fps:.4f} object: {o.name} x: {M[0, 3]:.10f} y: {M[1, 3]:.10f} "
                             f"z: {M[2, 3]:.10f} rx: {e.x:.10f} ry: {e.y:.10f} rz: {e.z:.10f}\n")
        files.append(("motion.txt", "".join(lines).encode()))
    if "tum" in formats:
        for o in obs:
            files.append((f"tum/{_safe(o.name)}.tum",
                          tum_bytes((f * ft, rigid(M)) for f, M in zip(frames, poses[o.name]))))
    if "kitti" in formats:
        for o in obs:
            rows = [" ".join(f"{v:.9e}" for v in rigid(M)[:3].ravel()) + "\n" for M in poses[o.name]]
            files.append((f"kitti_poses/{_safe(o.name)}.txt", "".join(rows).encode()))
    if "json" in formats:
        tracking = []
        for i, f in enumerate(frames):
            doc = []
            for o in labelled:
                c, size, yaw = boxes[o.name][i]
                j0, j1 = (i - 1, i) if i > 0 else (0, min(1, len(frames) - 1))
                dt = (frames[j1] - frames[j0]) * ft
                v = (boxes[o.name][j1][0] - boxes[o.name][j0][0]) / dt if dt > 0 else np.zeros(3)
                label = o[LABEL_PROPERTY]
                doc.append({"object": o.name, "instance_id": ids[o.name_full], "class": label,
                            "class_id": CLASSES[label], "center": c.tolist(), "size": size.tolist(), "yaw": yaw,
                            "velocity": v.tolist()})
                bottom = c - np.array([0.0, 0.0, size[2] / 2.0])
                tracking.append(f"{f} {ids[o.name_full]} {label} 0 0 -10 -1 -1 -1 -1 {size[2]:.6f} {size[1]:.6f} "
                                f"{size[0]:.6f} {bottom[0]:.6f} {bottom[1]:.6f} {bottom[2]:.6f} {yaw:.6f}\n")
            files.append((f"boxes/{f:05d}.json", (json.dumps({"frame": f, "time": f * ft, "boxes": doc},
                                                              indent=1) + "\n").encode()))
        files.append(("tracking.txt", "".join(tracking).encode()))
    return [p.relative_to(out).as_posix() for p in commit_files(Path(out), files)]
