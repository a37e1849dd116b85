"""Motion-data export (``blensor motion``, operator ``blensor.export_motion``): the poses of
objects and of the sensor camera over a frame range, and per frame the 3D boxes of every
labelled object.

Formats (files in the output folder; every export also writes ``motion.json``: its
frames, formats, objects and the files it wrote, so that ``--overwrite`` replaces an
earlier export's files and never files no export listed):

- ``blensor``: ``motion.txt``, the original's text (reference 10.7), byte-compatible:
  per frame and object ``timestamp: %.4f object: %s x: %.10f y: %.10f z: %.10f rx: %.10f
  ry: %.10f rz: %.10f`` with timestamp = frame / fps and the translation and XYZ Euler
  angles (rad) of ``matrix_world``. A line break in an object's name is written as
  ``\\n`` (``\\r``), so every record stays one line.
- ``tum``: ``tum/<object>.tum`` per object (file names: :func:`file_stems`),
  ``t tx ty tz qx qy qz qw`` (TUM RGB-D), t =
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
boxes only for objects with a ``blensor_label`` that render at that frame, as the scan
sees them (render visibility, :mod:`~blensor_addon.scene.visibility`; objects of a
collection excluded from the view layer, such as the prototypes of collection instances,
get none). A labelled instancer (an empty instancing a collection: a tree) gets one box
around every instance it draws, in its own axes; instances of an unlabelled instancer
(Geometry Nodes scatters) get none. Poses are the evaluated ``matrix_world`` at each
frame.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import bpy
import numpy as np
from mathutils import Matrix
from numpy.typing import ArrayLike

from ..core.classes import CLASSES
from ..core.errors import SettingsError, did_you_mean
from ..core.ndtypes import F64
from ..io.atomic import commit_files
from ..io.formats import MOTION_FORMATS  # the registry's motion formats (name -> MotionFormat)
from ..io.outdir import OutputFolder
from ..io.trajectory import tum_bytes
from ..scene.objects import GEOMETRY_TYPES, LABEL_PROPERTY, ObjectTable
from ..scene.visibility import apply_render_visibility

#: the files an export leaves (relative paths, regular expressions); it refuses a folder
#: holding them unless told to overwrite (a range scan's files may be there)
MOTION_OUTPUTS = (r"motion\.txt", r"tum/[^/]+\.tum", r"kitti_poses/[^/]+\.txt", r"boxes/\d+\.json",
                  r"tracking\.txt", r"motion\.json")
#: the export's own list of what it wrote: an ``--overwrite`` deletes just those files
MOTION_MANIFEST = "motion.json"
#: a 3D box (:func:`box_in`): centre (3,) float64 world m, size (3,) float64 l w h m, yaw rad
Box = tuple[F64, F64, float]


def _listed(man: dict[str, Any]) -> set[str] | None:
    """The files the export of motion manifest ``man`` wrote (and the manifest)."""
    files = man.get("files")
    if not isinstance(files, list):
        return None
    return {f for f in files if isinstance(f, str)} | {MOTION_MANIFEST}


def motion_folder(path: Path) -> OutputFolder:
    """The output-folder policy of a motion export (:class:`OutputFolder`): its own files
    (:data:`MOTION_OUTPUTS`) listed in ``motion.json``; a range scan's files may sit beside."""
    return OutputFolder(path, manifest=MOTION_MANIFEST, patterns=MOTION_OUTPUTS, listed=_listed,
                        what="export")


def check_pose(name: str, M: F64, frame: int) -> None:
    """Refuse a world matrix that has no pose: not finite (NaN/inf), or a scale of 0
    along an axis (no rotation can be read from it; a quaternion would be made up).

    Raises:
        SettingsError (``transform of object 'NAME'``): naming the frame.
    """
    what = f"transform of object {name!r}"
    if not np.isfinite(M).all():
        raise SettingsError(what, "finite (no NaN or inf) at every frame exported", f"frame {frame}")
    n = np.linalg.norm(M[:3, :3], axis=0)
    if not (n > 1e-12 * max(1.0, float(n.max()))).all() or abs(np.linalg.det(M[:3, :3])) <= 1e-30:
        raise SettingsError(what, "of non-zero scale on every axis at every frame exported (a pose needs a "
                            "rotation)", f"scale {' '.join(f'{v:g}' for v in n)} at frame {frame}")


def parse_motion_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    """``"tum,json"`` or an iterable -> tuple of motion formats.

    Raises:
        SettingsError (``format``): empty or unknown.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in MOTION_FORMATS for f in items):
        unknown = [f for f in items if f not in MOTION_FORMATS]
        raise SettingsError("format", "a comma-separated subset of " + ",".join(MOTION_FORMATS), formats,
                            did_you_mean(unknown[0], MOTION_FORMATS, formats) if unknown else "")
    return tuple(dict.fromkeys(items))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


#: longest file-name stem (bytes): the stem, a clash suffix and ``.tum`` stay within
#: the 255 bytes of a file name
MAX_STEM_BYTES = 240


def file_stems(objects: Iterable[bpy.types.Object]) -> dict[str, str]:
    """``name_full`` -> the file name stem of each object's pose files: its name with
    every character other than letters, digits and ``._-`` replaced by ``_``. Objects
    whose stems would be equal, ignoring case (``A B``, ``A/B`` and ``A_B``; ``Car``
    and ``car`` on a case-insensitive file system), get the first 8 hex digits of the
    SHA-1 of their full name appended (``A_B-1f3c...``), so no trajectory overwrites
    another. A stem over :data:`MAX_STEM_BYTES` bytes (Blender allows names of 255) is
    cut and gets that hash too, so the file name fits the file system's 255 bytes."""
    import hashlib

    def tag(k: str) -> str:
        return hashlib.sha1(k.encode(errors="surrogateescape")).hexdigest()[:8]

    stems: dict[str, str] = {}
    for o in objects:
        stem = _safe(o.name)
        if len(stem.encode()) > MAX_STEM_BYTES:
            stem = stem.encode()[:MAX_STEM_BYTES - 9].decode(errors="ignore") + "-" + tag(o.name_full)
        stems[o.name_full] = stem
    count: dict[str, int] = {}
    for stem in stems.values():
        count[stem.casefold()] = count.get(stem.casefold(), 0) + 1
    out: dict[str, str] = {}
    for k, v in stems.items():
        if count[v.casefold()] > 1:
            v = v.encode()[:MAX_STEM_BYTES - 9].decode(errors="ignore") + "-" + tag(k)
        out[k] = v
    return out


def _one_line(name: str) -> str:
    """``name`` for a line of ``motion.txt``: line breaks written as ``\\n`` / ``\\r``."""
    return name.replace("\n", "\\n").replace("\r", "\\r")


def rigid(matrix_world: ArrayLike) -> F64:
    """(4, 4) float64 world pose with the scale removed (columns normalized)."""
    M = np.array(matrix_world, dtype=np.float64)
    R = M[:3, :3]
    n = np.linalg.norm(R, axis=0)
    T = np.eye(4)
    T[:3, :3] = R / np.where(n > 0, n, 1.0)
    T[:3, 3] = M[:3, 3]
    return T


def box_in(corners: F64, frame_matrix: ArrayLike) -> Box:
    """The box of world points ``corners`` (N, 3) m in the axes of ``frame_matrix``
    (4, 4; scale removed): centre (3,) world m, size (3,) l w h m along those axes, yaw
    (rad, about world +Z)."""
    T = rigid(frame_matrix)
    R, t = T[:3, :3], T[:3, 3]
    local = (corners - t) @ R
    lo, hi = local.min(axis=0), local.max(axis=0)
    return t + R @ ((lo + hi) / 2.0), hi - lo, math.atan2(R[1, 0], R[0, 0])


def labelled_boxes(depsgraph: bpy.types.Depsgraph, wanted: set[str]) -> dict[str, Box]:
    """name_full -> box (:func:`box_in`) of every object named in ``wanted`` that the
    depsgraph draws: its own evaluated geometry, and for an instancer every instance it
    draws, in the object's axes. Objects hidden from render are left out, as the scan
    leaves them out."""
    pts: dict[str, list[F64]] = {}
    frame_of: dict[str, Matrix] = {}

    def add(key: bpy.types.Object, ob: bpy.types.Object, matrix_world: Matrix) -> None:
        bb = np.array([tuple(c) for c in ob.bound_box], dtype=np.float64)
        M = np.array(matrix_world, dtype=np.float64)
        pts.setdefault(key.name_full, []).append(bb @ M[:3, :3].T + M[:3, 3])

    objects = [ob for ob in depsgraph.objects
               if ob.original.name_full in wanted and not ob.original.hide_render]
    for ob in objects:
        frame_of[ob.original.name_full] = ob.matrix_world
    if any(ob.is_instancer for ob in objects):  # walk the instances (only then: there may be millions)
        for inst in depsgraph.object_instances:
            key = inst.parent.original if inst.is_instance else inst.object.original
            if key.name_full in frame_of and inst.object.type in GEOMETRY_TYPES:
                add(key, inst.object, inst.matrix_world)
    else:
        for ob in objects:
            if ob.type in GEOMETRY_TYPES:
                add(ob.original, ob, ob.matrix_world)
    return {k: box_in(np.concatenate(v), frame_of[k]) for k, v in pts.items()}


def export_motion(frames: Iterable[int], out_dir: str | os.PathLike[str],
                  formats: str | Iterable[str] = ("blensor",), objects: str | Iterable[str] | None = None,
                  overwrite: bool = False) -> list[str]:
    """Write the motion data of ``frames`` into ``out_dir``; returns the file names.

    Args:
        frames: scene frames (within the scene's range); out_dir: folder (created).
        formats: subset of :data:`MOTION_FORMATS`; objects: object names (default every
            object of the scene); overwrite: replace earlier motion files.
    Raises:
        SettingsError: bad frames, formats, object names, a class label not in the table,
        or a folder holding an earlier export's motion files without ``overwrite`` (a
        range scan's files may be there: motion data goes beside its scan).
        OSError: a write failed (no partial file is left).
    """
    from .range_scan import check_frames, output_path
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
    labelled = [o for o in obs if o.get(LABEL_PROPERTY, "")]
    for o in labelled:
        if o[LABEL_PROPERTY] not in CLASSES:
            raise SettingsError("blensor_label", "a class name of the table (" + ", ".join(CLASSES) + ")",
                                f"{o[LABEL_PROPERTY]!r} on object {o.name!r}")
    folder = motion_folder(output_path(out_dir))
    written: list[str] = []
    try:
        folder.open()
        folder.check(overwrite=overwrite, resume=False)  # refusals only: nothing deleted yet
        written = _export(folder, frames, formats, obs, labelled)
    finally:
        folder.release()
        if not written:
            _remove_empty(folder.path)
            folder.remove_if_created_and_empty()
    return written


def _remove_empty(out: Path) -> None:
    for sub in ("tum", "kitti_poses", "boxes"):  # an export's folders, once empty
        d = out / sub
        if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
            d.rmdir()


def _export(folder: OutputFolder, frames: list[int], formats: tuple[str, ...],
            obs: list[bpy.types.Object], labelled: list[bpy.types.Object]) -> list[str]:
    """Evaluate the frames, check every pose, write the files, then delete the earlier
    export's files that were not rewritten (exactly those its motion.json listed)."""
    scene = bpy.context.scene
    out = folder.path
    ids = ObjectTable(bpy.data.objects).ids
    fps = scene.render.fps
    ft = float(scene.render.fps_base) / float(fps)
    old = scene.frame_current
    poses: dict[str, list[F64]] = {o.name_full: [] for o in obs}
    # name_full -> {frame index -> box}, at the frames it renders
    boxes: dict[str, dict[int, Box]] = {o.name_full: {} for o in labelled}
    wanted = {o.name_full for o in labelled}
    sw = apply_render_visibility(scene, bpy.context.view_layer)  # what renders, as the scan
    try:
        for i, f in enumerate(frames):
            scene.frame_set(f)
            dg = bpy.context.evaluated_depsgraph_get()
            for o in obs:
                poses[o.name_full].append(np.array(o.evaluated_get(dg).matrix_world, dtype=np.float64))
            for key, box in labelled_boxes(dg, wanted).items():
                boxes[key][i] = box
    finally:
        sw.restore()
        if scene.frame_current != old:
            scene.frame_set(old)
    for o in obs:  # a NaN pose or a scale of 0 is refused, as the scan refuses them
        for f, M in zip(frames, poses[o.name_full]):
            check_pose(o.name, M, f)
    files = []
    if "blensor" in formats:
        lines = []
        for i, f in enumerate(frames):
            for o in obs:
                M = poses[o.name_full][i]
                e = Matrix(M.tolist()).to_euler("XYZ")
                lines.append(f"timestamp: {f / fps:.4f} object: {_one_line(o.name)} x: {M[0, 3]:.10f} "
                             f"y: {M[1, 3]:.10f} z: {M[2, 3]:.10f} rx: {e.x:.10f} ry: {e.y:.10f} rz: {e.z:.10f}\n")
        files.append(("motion.txt", "".join(lines).encode()))
    stems = file_stems(obs)
    if "tum" in formats:
        for o in obs:
            files.append((f"tum/{stems[o.name_full]}.tum",
                          tum_bytes((f * ft, rigid(M)) for f, M in zip(frames, poses[o.name_full]))))
    if "kitti" in formats:
        for o in obs:
            rows = [" ".join(f"{v:.9e}" for v in rigid(M)[:3].ravel()) + "\n" for M in poses[o.name_full]]
            files.append((f"kitti_poses/{stems[o.name_full]}.txt", "".join(rows).encode()))
    if "json" in formats:
        tracking = []
        for i, f in enumerate(frames):
            doc = []
            for o in labelled:
                b = boxes[o.name_full]
                if i not in b:  # not rendered at this frame
                    continue
                c, size, yaw = b[i]
                # velocity of the centre: since the frame before, else to the frame after
                j0, j1 = (i - 1, i) if i - 1 in b else (i, i + 1) if i + 1 in b else (i, i)
                dt = (frames[j1] - frames[j0]) * ft
                v = (b[j1][0] - b[j0][0]) / dt if dt > 0 else np.zeros(3)
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
    from ..core.version import __version__
    names = [name for name, _ in files]
    files.append((MOTION_MANIFEST, (json.dumps({
        "blensor_version": __version__, "blend_file": bpy.data.filepath,
        "frames": [frames[0], frames[-1]] if frames == list(range(frames[0], frames[-1] + 1)) else frames,
        "formats": list(formats), "objects": [o.name for o in obs], "files": names},
        indent=1) + "\n").encode()))
    written = [p.relative_to(out).as_posix() for p in commit_files(Path(out), files)]
    folder.prepare(keep=written)  # the earlier export's files this one did not rewrite, and emptied folders
    return written
