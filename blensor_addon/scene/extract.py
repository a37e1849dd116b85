"""Evaluated depsgraph -> :class:`SceneSnapshot` (geometry, materials, object ids).

Owns the scene's arrays: the :class:`SceneExtractor` (meshes read with ``foreach_get``
and cached by content, Geometry Nodes instances as arrays) and the handlers that note
geometry edits. What a material means for a ray (node trees, textures, images) is
:mod:`.shading`'s; object ids, labels and the sensor's pose are :mod:`.objects`'.

Modifiers, Geometry Nodes and instances are included because everything is read from
the evaluated depsgraph; nothing is applied to or written into the user's objects.
Arrays are copied with ``foreach_get`` (no per-vertex Python).

An unchanged scene is read once: the process's :class:`SceneCache` keeps static meshes
and the latest snapshots (read-only) across ``scan()`` calls, the packets of a run and
the time samples of a packet, while the depsgraph reports no update (the handlers below)
and what it does not report (object table, materials' evaluations) is the same.
"""
from __future__ import annotations

import collections
import itertools
import sys
from dataclasses import dataclass, field, replace

import numpy as np

from .. import compat
from ..core.materials import DEFAULT_REFLECTIVITY, MaterialTable, Texture
from ..core.sensors.ambient import Lights
from ..raycast.base import MeshData, SceneGeometry
from .lights import read_lights
from .objects import GEOMETRY_TYPES, ObjectTable, instance_index, sensor_pose
from .shading import ImageCache, MaterialEval, evaluate_material, linear_to_srgb_u8, triangle_uvs

#: mesh ``session_uid`` -> geometry updates seen by :func:`note_geometry_edits`
_geometry_edits: dict[int, int] = {}


class SceneCache:
    """What the scans of one process keep of the scene between ``scan()`` calls, range
    packets and time samples, while Blender reports nothing changed (one instance,
    :data:`SCENE_CACHE`; every :class:`SceneExtractor` shares it).

    Attributes:
        edits: evaluations that reported any update (:func:`note_geometry_edits`: an edit,
            a transform, an object added, removed or hidden, a material, an animated
            object at a frame change); a kept snapshot is reused only while it is unchanged.
        epoch: files loaded, undo and redo steps (:func:`note_reload`); part of every key.
        static_meshes: mesh session_uid -> (:func:`static_mesh_key`, (MeshData, triangle
            material slots, triangles dropped, triangles kept)): a static mesh's arrays and
            content key, read once (one entry per mesh of the latest extraction).
        static_uvs: (mesh session_uid, UV map) -> (static_mesh_key, (T, 3, 2) UVs).
        last: the latest extraction, kept for the next one (:meth:`SceneExtractor.extract_many`):
            (key, materials and their evaluations, the snapshots), or None.
    """

    def __init__(self) -> None:
        self.edits = 0
        self.epoch = 0
        self.static_meshes: dict = {}
        self.static_uvs: dict = {}
        self.last: tuple | None = None
        #: (the meshes' triangle material slot arrays, their concatenation) of the latest snapshot
        self.tri_material: tuple | None = None
        #: the latest snapshot's MaterialTable (its row table is shared when the next one's
        #: rows are the same: MaterialTable.share_rows)
        self.material_table = None

    def forget(self) -> None:
        """Drop everything kept and start a new epoch (every key made before differs)."""
        self.epoch += 1
        self.edits += 1
        self.static_meshes.clear()
        self.static_uvs.clear()
        self.last = self.tri_material = self.material_table = None

    def tri_material_of(self, parts: list) -> np.ndarray:
        """(T,) int32 concatenation of the meshes' triangle material slots ``parts``: the
        latest one again (read-only) when ``parts`` are the very arrays it was made of
        (static meshes' entries are the same arrays from sample to sample)."""
        kept = self.tri_material
        if kept is not None and len(kept[0]) == len(parts) and all(a is b for a, b in zip(kept[0], parts)):
            return kept[1]
        out = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        out.flags.writeable = False
        self.tri_material = (list(parts), out)
        return out


#: the process's :class:`SceneCache`
SCENE_CACHE = SceneCache()


def forget_scene(*_args) -> None:
    """Drop every array, key and snapshot kept of the scene (:meth:`SceneCache.forget`):
    the next scan reads the scene as a first one does."""
    SCENE_CACHE.forget()


def note_reload(*_args) -> None:
    """``load_pre``, ``load_post``, ``undo_post`` and ``redo_post`` handler (registered with
    the add-on): another file or an undo step may give a datablock other data under the
    same ``session_uid`` (undo keeps them), so nothing kept before is used again."""
    SCENE_CACHE.forget()


def note_geometry_edits(_scene, depsgraph=None) -> None:
    """``depsgraph_update_post`` and ``frame_change_post`` handler (both registered with
    the add-on): count the geometry updates of every mesh, and every evaluation that
    updated anything (:attr:`SceneCache.edits`). An edit, an undo, a modifier added, and
    a frame-change script that changes vertices or swaps an object's mesh all show up
    here (the frame change's own update lists the latter)."""
    import bpy
    if depsgraph is None:
        return
    updates = depsgraph.updates
    if len(updates):
        SCENE_CACHE.edits += 1
    for u in updates:
        if not u.is_updated_geometry:
            continue
        idb = getattr(u.id, "original", u.id)
        if isinstance(idb, bpy.types.Object):
            idb = idb.data if idb.type == "MESH" else None
        if isinstance(idb, bpy.types.Mesh):
            uid = idb.session_uid
            _geometry_edits[uid] = _geometry_edits.get(uid, 0) + 1


#: the handler lists :func:`note_geometry_edits` must be in for meshes to be cached
EDIT_HANDLERS = ("depsgraph_update_post", "frame_change_post")
#: ... and those :func:`note_reload` must be in
RELOAD_HANDLERS = ("load_pre", "load_post", "undo_post", "redo_post")


def edits_noted() -> bool:
    """Whether the add-on's handlers note every change (:data:`EDIT_HANDLERS`,
    :data:`RELOAD_HANDLERS`): without them nothing may be kept between samples."""
    import bpy
    h = bpy.app.handlers
    return (all(note_geometry_edits in getattr(h, k) for k in EDIT_HANDLERS)
            and all(note_reload in getattr(h, k) for k in RELOAD_HANDLERS))


def static_mesh_key(orig, scene) -> tuple | None:
    """Cache key of a mesh object whose evaluated geometry cannot change from one time
    sample to the next: no modifiers, no deformation by its parent (an armature or
    lattice parent deforms through a modifier Blender adds itself:
    ``is_deform_modified``), no shape keys, no animation data on the mesh, in object
    mode. Its evaluated mesh is its mesh datablock, read once per scan
    (:class:`SceneExtractor`) instead of once per sample. The key is the mesh's
    ``session_uid`` (unique in the session, unlike a pointer), its sizes, its count of
    geometry updates (:func:`note_geometry_edits`) and the cache's epoch (files loaded,
    undo steps: :func:`note_reload`). None for every other object, and when the handlers
    are not registered (nothing would notice a change)."""
    if not edits_noted():
        return None
    data = orig.data
    if (orig.type != "MESH" or orig.modifiers or data is None or data.shape_keys is not None
            or data.animation_data is not None or orig.mode != "OBJECT" or data.is_editmode
            or (orig.parent is not None and orig.parent_type in ("ARMATURE", "LATTICE"))
            or orig.is_deform_modified(scene, "RENDER") or orig.is_deform_modified(scene, "PREVIEW")):
        return None
    uid = data.session_uid
    return (uid, len(data.vertices), len(data.loops), len(data.polygons), _geometry_edits.get(uid, 0),
            SCENE_CACHE.epoch)


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
        if nt == npoly:  # every polygon a triangle (scans, photogrammetry, imports): its corners in order
            t = corner_vert.reshape(-1, 3)
            if "material_index" in attrs:
                m = np.empty(npoly, np.int32)
                attrs["material_index"].data.foreach_get("value", m)
            else:
                m = np.zeros(nt, np.int32)
            return v.reshape(-1, 3), t, m
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
        dropped: object name -> number of triangles (with a NaN/inf vertex) or instances
            (with a NaN/inf transform) left out of this snapshot.
        bad_transforms: object name -> number of its instances left out for a NaN/inf
            transform (also counted in ``dropped``); continuous time refuses them.
        warnings: (key, line) of the materials whose node tree, image or UV map could not
            be used (the extractor prints each key's line once per scan).
        lights: the scene's ambient light (:func:`~blensor_addon.scene.lights.read_lights`,
            read with the geometry, kept with it), or None (not read).
    """

    geometry: SceneGeometry
    materials: MaterialTable
    instance_object_id: np.ndarray
    instance_instancer_id: np.ndarray
    instance_index: np.ndarray
    objects: list
    sensor_to_world: np.ndarray
    origin: np.ndarray
    dropped: dict = field(default_factory=dict)
    bad_transforms: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    lights: Lights | None = None

    def labels(self, instance: np.ndarray, semantic: np.ndarray) -> tuple:
        """Ground-truth labels of hits on ``instance`` (N,) int32 (-1: a miss):
        (object_id, instancer_id, instance_id, semantic), (N,) uint32 x 3 and (N,)
        uint16, 0 for misses. ``semantic`` (objects + 1,) uint16 is the class of each
        object id (:func:`~blensor_addon.core.classes.semantic_of_objects`); an
        instance takes its source object's class, else its instancer's."""
        inst = np.asarray(instance)
        got = inst >= 0
        ids = []
        for a in (self.instance_object_id, self.instance_instancer_id, self.instance_index):
            v = np.zeros(inst.shape[0], np.uint32)
            v[got] = np.asarray(a, np.uint32)[inst[got]]
            ids.append(v)
        cls = np.where(semantic[ids[0]] > 0, semantic[ids[0]], semantic[ids[1]]).astype(np.uint16)
        return ids[0], ids[1], ids[2], cls


class SceneExtractor:
    """Reads evaluated frames into :class:`SceneSnapshot`. Object ids come from
    :class:`ObjectTable` (built once, from ``bpy.data.objects``); acceleration
    structures are reused by the ray caster through the meshes' content keys.

    What does not change is kept in the process's :class:`SceneCache` (shared by every
    extractor, so by every ``scan()`` call and every packet of a run): static meshes'
    arrays and content keys, and the latest snapshots, which the next extraction returns
    again (the same objects) while no depsgraph update was reported since, the sensors'
    poses, the object table and every material's evaluation are the same and no material
    is textured (:meth:`extract_many`)."""

    def __init__(self, objects=None) -> None:
        if objects is None:
            import bpy
            objects = bpy.data.objects
        self.table = ObjectTable(objects)
        #: mesh session_uid -> (static_mesh_key, (MeshData, triangle material slots,
        #: triangles dropped)): meshes that cannot change between samples, read once; an
        #: entry is replaced when its key changes (one entry per mesh of the scene)
        self.static_meshes: dict = SCENE_CACHE.static_meshes
        self.warned: set = set()  # objects named in a non-finite-geometry warning already
        self.images = ImageCache()  # textured materials' images, read once per scan
        #: mesh session_uid, UV map -> (static_mesh_key, (T, 3, 2) UVs) of static textured meshes
        self.static_uvs: dict = SCENE_CACHE.static_uvs
        self.warned_materials: set = set()  # materials named in a warning already
        #: material name -> MaterialEval of the materials without animation (evaluated once per scan)
        self.material_evals: dict = {}

    def extract(self, depsgraph, sensor_object, render: bool = True) -> SceneSnapshot:
        """Snapshot of the evaluated scene, without ``sensor_object``; with
        ``render=True`` also without objects hidden from render (``hide_render``; for
        instances, the instancer's). The depsgraph decides everything else (see
        :mod:`blensor_addon.scene.visibility`).

        Geometry Nodes instances are read as arrays where Blender exposes them
        (``bpy.types.GeometrySet``, Blender 4.3+; :meth:`_gn_plan`): 10^6 instances cost
        about as much as iterating them once, instead of a Python loop body per instance.

        Raises:
            SettingsError (``camera``): the sensor's world matrix has no rigid pose.
        """
        return self.extract_many(depsgraph, [sensor_object], render)[0]

    def extract_many(self, depsgraph, sensor_objects, render: bool = True) -> list:
        """One :class:`SceneSnapshot` per object of ``sensor_objects`` (a rig's cameras,
        scene/rig.py) from one walk over the evaluated scene: the same geometry, each with
        its own sensor pose and its transforms relative to its own sensor position, so
        each snapshot is byte for byte the one :meth:`extract` gives for that sensor
        alone. None of the sensor objects is scanned (cameras have no geometry).

        An extraction that Blender reports nothing changed for since the latest
        (:meth:`_kept`) returns that one's snapshots again, the same objects.

        Raises:
            SettingsError (``camera``): a sensor's world matrix has no rigid pose.
        """
        key = self._key(depsgraph, sensor_objects, render)
        snaps = self._kept(key)
        if snaps is None:
            snaps = b = None
            if self.vectorize and compat.GeometrySet is not None:
                try:
                    snaps, b = self._extract(depsgraph, sensor_objects, render, True)
                except _PlanMismatch:  # Blender listed the instances otherwise: loop over them
                    pass
            if snaps is None:
                snaps, b = self._extract(depsgraph, sensor_objects, render, False)
            self._keep(key, b, snaps)
        snap = snaps[0]
        for name, n in sorted(snap.dropped.items()):
            if name not in self.warned:
                self.warned.add(name)
                from ..core.text import printable  # the name from the .blend, escaped
                line = (f"blensor: warning: object '{name}' has non-finite (NaN/inf) coordinates; {n} of its "
                        "triangles or instances are left out of the scan")
                print(printable(line), file=sys.stderr)
        for key, line in snap.warnings:
            if key not in self.warned_materials:
                self.warned_materials.add(key)
                from ..core.text import printable
                print(printable(line), file=sys.stderr)
        return snaps

    #: read Geometry Nodes instances as arrays where possible (tests turn it off to compare)
    vectorize = True

    def _key(self, depsgraph, sensor_objects, render: bool) -> tuple | None:
        """What an extraction depends on that the depsgraph updates may not tell: the
        updates and files seen (:class:`SceneCache`), the scene and view layer, the
        visibility, the sensors and their poses (also checks each pose first). None where
        the handlers that note the changes are not registered."""
        poses = []
        for ob in sensor_objects:
            cam = ob.evaluated_get(depsgraph) if not ob.is_evaluated else ob
            poses.append(sensor_pose(cam.matrix_world).tobytes())
        if not edits_noted():
            return None
        names = tuple(ob.original.name_full if ob.is_evaluated else ob.name_full for ob in sensor_objects)
        return (SCENE_CACHE.epoch, SCENE_CACHE.edits, depsgraph.scene.session_uid, depsgraph.view_layer.name,
                render, self.vectorize, names, tuple(poses))

    def _kept(self, key) -> list | None:
        """The kept snapshots if ``key`` is the latest extraction's and what no depsgraph
        update reports is the same: the object table (names, types, labels: an ID
        property set from Python updates nothing) and every material's evaluation (its
        BlenSor settings neither)."""
        last = SCENE_CACHE.last
        if key is None or last is None or last[0] != key:
            return None
        _, materials, snaps = last
        if self.table.table != snaps[0].objects:
            return None
        try:
            for mo, ev in materials:
                if evaluate_material(mo) != ev:
                    return None
        except (ReferenceError, ValueError):  # a material removed meanwhile; arrays compared
            return None
        return snaps

    def _keep(self, key, b, snaps: list) -> None:
        """Keep ``snaps`` (the extraction ``key`` made with the builder ``b``) for the next
        extraction; not with a textured material (an image's pixels change without an
        update, and an image that could not be read may be there next time). Static
        meshes the extraction did not use are dropped."""
        used = {k[0] for k in b.mesh_keys if k is not None}
        for uid in [u for u in self.static_meshes if u not in used]:
            del self.static_meshes[uid]
        for uid_map in [k for k in self.static_uvs if k[0] not in used]:
            del self.static_uvs[uid_map]
        keep = key is not None and not any(ev.texture is not None for _, ev in b.material_ids)
        SCENE_CACHE.last = (key, list(b.material_ids), snaps) if keep else None

    def _extract(self, depsgraph, sensor_objects, render: bool, vectorize: bool) -> tuple[list, "_Builder"]:
        b = _Builder(self.table, self.static_meshes, self.images, self.static_uvs, self.material_evals)
        sensor_names = set()
        poses = []
        for sensor_object in sensor_objects:
            sensor_names.add(
                sensor_object.original.name if sensor_object.is_evaluated else sensor_object.name
            )
            cam = sensor_object.evaluated_get(depsgraph) if not sensor_object.is_evaluated else sensor_object
            poses.append(sensor_pose(cam.matrix_world))
        plans: dict = {}
        entries = None
        if vectorize:
            # Geometry Nodes instances as arrays; if nothing else instances (collection
            # instances, vertex/face instancing, particles), the depsgraph's objects are
            # all the rest and its per-instance list is never walked.
            objects = list(depsgraph.objects)
            simple = True
            for ob in objects:
                if ob.is_instancer:
                    simple = False
                elif any(md.type == "NODES" for md in ob.original.modifiers):
                    plan = _gn_plan(ob, b)
                    if plan is _UNSUPPORTED:
                        simple = False
                    elif plan is not None:
                        plans[ob.original.name_full] = plan
            if simple:
                entries = ((ob, None, ob.matrix_world, None) for ob in objects)
        if entries is None:
            entries = self._instances(depsgraph, plans)
        for ob, parent, matrix_world, pid in entries:
            orig = ob.original
            if orig.name in sensor_names:
                continue
            if render and (parent.hide_render if parent is not None else orig.hide_render):
                continue
            if not render and not (parent if parent is not None else orig).visible_get():
                continue  # viewport: hidden by its own or a collection's eye in this view layer
            plan = plans.get(orig.name_full) if parent is None else None
            if plan is not None:
                b.add_block(plan, orig)
            if ob.type not in GEOMETRY_TYPES:
                continue
            if ob.type == "MESH":
                mi = b.mesh_of(ob.data, orig.name, lambda: static_mesh_key(orig, depsgraph.scene))
                if b.meshes[mi].triangles.shape[0] == 0:
                    continue
                rows = [b.material_row(slot.material) for slot in ob.material_slots]
                b.add_uvs(mi, ob.data, rows, orig.name)
            else:
                data = ob.to_mesh()
                try:
                    mi = b.add_mesh(*mesh_arrays(data), orig.name)
                    if b.meshes[mi].triangles.shape[0] == 0:
                        continue
                    rows = [b.material_row(slot.material) for slot in ob.material_slots]
                    b.add_uvs(mi, data, rows, orig.name)
                finally:
                    ob.to_mesh_clear()
            b.add_instance(mi, matrix_world, rows, orig, parent, pid)
        snaps = [b.snapshot(pose, pose[:3, 3].copy()) for pose in poses]
        lights = read_lights(depsgraph, render)
        for snap in snaps:
            snap.lights = lights
        return snaps, b

    @staticmethod
    def _instances(depsgraph, plans: dict):
        """Walk ``depsgraph.object_instances``: yields (evaluated object, original
        instancer or None, world matrix, persistent id); the instances of objects with a
        plan are skipped over (their plan adds them as one block)."""
        it = iter(depsgraph.object_instances)
        for inst in it:
            parent = inst.parent if inst.is_instance else None
            if parent is not None:
                plan = plans.get(parent.original.name_full)
                if plan is not None:
                    plan.consume(inst, it)
                    continue
                yield inst.object, parent.original, inst.matrix_world, inst.persistent_id
            else:
                yield inst.object, None, inst.matrix_world, None


class _PlanMismatch(Exception):
    """The depsgraph did not list a Geometry Nodes object's instances in the order of
    its instance arrays; the extraction falls back to the per-instance loop."""


class _Builder:
    """Accumulates meshes, materials and instances of one snapshot."""

    def __init__(self, table: ObjectTable, static_meshes: dict, images: ImageCache | None = None,
                 static_uvs: dict | None = None, evals: dict | None = None) -> None:
        self.table = table
        self.static_meshes = static_meshes
        self.images = images if images is not None else ImageCache()
        self.static_uvs = static_uvs if static_uvs is not None else {}
        self.evals = evals if evals is not None else {}
        self.meshes: list[MeshData] = []
        self.tri_mats: list[np.ndarray] = []
        self.keeps: list = []  # per mesh: (T0,) bool triangles kept (None: all)
        self.mesh_keys: list = []  # per mesh: its static_mesh_key or None
        self._mesh_index: dict = {}
        self._mat_rows: dict = {}
        self.materials = [("", DEFAULT_REFLECTIVITY, False, (0.8, 0.8, 0.8), MaterialEval())]
        #: (original material, its evaluation) of every row after the first
        self.material_ids: list = []
        self.textures: dict = {}  # material row -> Texture
        self.spectra: dict = {}  # material row -> LibraryEntry
        self.uvs: dict = {}  # (mesh index, UV map) -> (T, 3, 2) float32
        self.warnings: list = []  # (key, line): material warnings of this snapshot
        # one instance at a time (Python lists) ...
        self.mesh, self.matrix, self.slots, self.obj, self.parent, self.index = [], [], [], [], [], []
        # ... and whole blocks of Geometry Nodes instances (arrays)
        self.blocks: list[dict] = []
        #: object name -> triangles or instances left out for non-finite coordinates
        self.dropped: dict = {}
        self.bad_transforms: dict = {}  # object name -> instances with a non-finite transform

    @staticmethod
    def mesh_entry(v, t, m) -> tuple:
        """(MeshData, material slots, triangles dropped, (T,) bool triangles kept or None
        for all) of a mesh (V,3) float32, (T,3) int32, (T,) int32; triangles with a
        non-finite vertex are left out."""
        bad_v = ~np.isfinite(v).all(axis=1)
        dropped = 0
        ok = None
        if bad_v.any():
            ok = ~bad_v[t].any(axis=1)
            dropped = int((~ok).sum())
            t, m = t[ok], m[ok]
        return MeshData(v, t), m, dropped, ok

    def add_entry(self, entry: tuple, owner: str, key=None) -> int:
        """Add a :meth:`mesh_entry`; its dropped triangles are counted for ``owner``."""
        mesh, m, dropped, keep = entry
        if dropped:
            self.dropped[owner] = self.dropped.get(owner, 0) + dropped
        self.meshes.append(mesh)
        self.tri_mats.append(m)
        self.keeps.append(keep)
        self.mesh_keys.append(key)
        return len(self.meshes) - 1

    def add_mesh(self, v, t, m, owner: str) -> int:
        """Add a mesh (V,3) float32, (T,3) int32, (T,) int32; triangles with a
        non-finite vertex are left out (and ``owner`` is named once)."""
        return self.add_entry(self.mesh_entry(v, t, m), owner)

    def mesh_of(self, data, owner: str, static_key=None) -> int:
        """Mesh index of a Blender mesh datablock, extracted once per snapshot, or once
        per scan when ``static_key()`` (:func:`static_mesh_key`, asked only when the
        snapshot has not read the mesh yet) gives a key."""
        ptr = data.as_pointer()
        if ptr not in self._mesh_index:
            key = static_key() if static_key is not None else None
            cached = self.static_meshes.get(key[0]) if key is not None else None
            if cached is not None and cached[0] == key:
                entry = cached[1]
            else:
                entry = self.mesh_entry(*mesh_arrays(data))
                if key is not None:
                    self.static_meshes[key[0]] = (key, entry)
            self._mesh_index[ptr] = self.add_entry(entry, owner, key)
        return self._mesh_index[ptr]

    def material_row(self, mat) -> int:
        """Row of a material in the table (0: none), evaluated once per snapshot
        (:func:`evaluate_material`); its image is read through the scan's cache."""
        if mat is None:
            return 0
        mo = mat.original
        row = self._mat_rows.get(mo.name_full)
        if row is None:
            ev = self.evals.get(mo.name_full)
            if ev is None:
                ev = evaluate_material(mo)
                tree = mo.node_tree
                if mo.animation_data is None and (tree is None or tree.animation_data is None):
                    self.evals[mo.name_full] = ev  # nothing can change it during the scan
            self.material_ids.append((mo, ev))
            ev = replace(ev)  # a copy: the row's image and texture are its own
            row = len(self.materials)
            why = [ev.warning] if ev.warning else []
            if ev.texture is not None:
                img = ev.texture["image"]
                lum = self.images.get(img)
                if lum is None:
                    why.append(f"image '{img.name}' cannot be read (missing file?)")
                    ev.texture = None
                else:
                    n_bad = self.images.replaced.get(img.name_full, 0)
                    if n_bad:  # once per image (the key), whichever material uses it
                        self.warnings.append((("image", img.name_full),
                                              f"blensor: warning: image '{img.name_full}': {n_bad} texels "
                                              "were NaN, infinite, negative or above 10; replaced (NaN: 0, "
                                              "else clipped to [0, 10])"))
                    tex = ev.texture
                    self.textures[row] = Texture(lum, tex["uv_map"], float(tex["scale"]),
                                                 float(tex["offset"]), tex["mapping"], tex["interpolation"],
                                                 tex["extension"], img.name)
                    ev.reflectivity = float(tex["offset"] + tex["scale"] * float(lum.mean(dtype=np.float64)))
            if ev.entry is not None:
                self.spectra[row] = ev.entry
            if why:
                used = {"override": "its reflectivity setting", "library": "its library entry",
                        "default": "the default"}.get(ev.source, "the rest of its node tree")
                self.warnings.append((mo.name_full, f"blensor: warning: material '{mo.name_full}': "
                                      f"{'; '.join(why)}; reflectivity {ev.reflectivity:.3f} from {used}"))
            self.materials.append((mo.name_full, ev.reflectivity, ev.mirror, ev.color, ev))
            self._mat_rows[mo.name_full] = row
        return row

    def add_uvs(self, mi: int, data, rows, owner: str) -> None:
        """Read the UVs of mesh ``mi`` (Blender mesh ``data``) for the textured materials
        among ``rows`` (once per mesh and UV map; a static mesh's once per scan)."""
        for row in set(rows):
            tex = self.textures.get(row)
            if tex is None or (mi, tex.uv_map) in self.uvs:
                continue
            key = self.mesh_keys[mi]
            cached = self.static_uvs.get((key[0], tex.uv_map)) if key is not None else None
            if cached is not None and cached[0] == key:
                uv = cached[1]
            else:
                uv = triangle_uvs(data, tex.uv_map)
                if uv is not None and self.keeps[mi] is not None:
                    uv = uv[self.keeps[mi]]
                if uv is not None and uv.shape[0] != self.meshes[mi].triangles.shape[0]:
                    uv = None
                if key is not None and uv is not None:
                    self.static_uvs[(key[0], tex.uv_map)] = (key, uv)
            if uv is None:
                what = f"UV map '{tex.uv_map}'" if tex.uv_map else "UV map"
                name, refl = self.materials[row][0], self.materials[row][1]
                self.warnings.append(((owner, tex.uv_map),
                                      f"blensor: warning: object '{owner}' has no {what} for the texture of "
                                      f"material '{name}'; its reflectivity {refl:.3f} is used"))
                continue
            self.uvs[(mi, tex.uv_map)] = uv

    def add_instance(self, mi, matrix_world, rows, orig, parent, persistent_id) -> None:
        matrix = np.array(matrix_world, dtype=np.float64)
        if not np.isfinite(matrix).all():  # a NaN/inf transform: the instance is left out
            name = orig.name if parent is None else parent.name
            self.dropped[name] = self.dropped.get(name, 0) + 1
            self.bad_transforms[name] = self.bad_transforms.get(name, 0) + 1
            return
        self.mesh.append(mi)
        self.matrix.append(matrix)
        self.slots.append(list(rows))
        self.obj.append(self.table.id_of(orig))
        if parent is not None:
            self.parent.append(self.table.id_of(parent))
            self.index.append(instance_index(persistent_id))
        else:
            self.parent.append(0)
            self.index.append(0)

    def add_block(self, plan, parent) -> None:
        keep = plan.nonempty & plan.finite()
        if not keep.all():
            bad = int((plan.nonempty & ~keep).sum())
            self.dropped[parent.name] = self.dropped.get(parent.name, 0) + bad
            self.bad_transforms[parent.name] = self.bad_transforms.get(parent.name, 0) + bad
        n = int(keep.sum())
        if n == 0:
            return
        pid = self.table.id_of(parent)
        every = n == keep.shape[0]
        rows = np.flatnonzero(keep)
        ref = plan.ref_index if every else plan.ref_index[rows]
        self.blocks.append({
            "mesh": plan.ref_mesh[ref], "plan": plan, "rows": None if every else rows, "n": n,
            "ref": ref, "ref_rows": plan.ref_rows,
            "obj": np.full(n, pid, np.uint32), "parent": np.full(n, pid, np.uint32),
            "index": (rows % 0xFFFFFFFF + 1).astype(np.uint32)})

    def snapshot(self, pose, origin) -> SceneSnapshot:
        mesh = [np.array(self.mesh, np.int32)] + [blk["mesh"] for blk in self.blocks]
        ids = [[np.array(getattr(self, k), np.uint32)] + [blk[k] for blk in self.blocks]
               for k in ("obj", "parent", "index")]
        # material slots: per instance a run of rows in slot_material
        lens = [np.array([len(s) for s in self.slots], np.int64)]
        flat = [np.array([r for s in self.slots for r in s], np.int32)]
        for blk in self.blocks:
            ref_len = np.array([len(r) for r in blk["ref_rows"]], np.int64)
            ref_off = np.zeros(len(ref_len) + 1, np.int64)
            np.cumsum(ref_len, out=ref_off[1:])
            ref_flat = np.array([r for rows in blk["ref_rows"] for r in rows], np.int32)
            ln = ref_len[blk["ref"]]
            lens.append(ln)
            start = np.repeat(ref_off[blk["ref"]] - np.concatenate(([0], np.cumsum(ln)[:-1])), ln)
            flat.append(ref_flat[start + np.arange(int(ln.sum()))] if ln.sum() else np.zeros(0, np.int32))
        lens_all = np.concatenate(lens)
        slot_off = np.zeros(lens_all.shape[0] + 1, np.int64)
        np.cumsum(lens_all, out=slot_off[1:])
        # transforms relative to the sensor: origin subtracted in float64, then rounded to
        # float32 (precision far out); the Geometry Nodes blocks chunk by chunk
        plain = np.array(self.matrix, np.float64).reshape(-1, 4, 4)
        m = np.empty((plain.shape[0] + sum(blk["n"] for blk in self.blocks), 4, 4), np.float32)
        plain[:, :3, 3] -= origin
        m[:plain.shape[0]] = plain
        at = plain.shape[0]
        for blk in self.blocks:
            blk["plan"].write_relative(blk["rows"], origin, m[at:at + blk["n"]])
            at += blk["n"]
        instance_mesh = np.concatenate(mesh).astype(np.int32, copy=False)  # blocks' are int64
        # read-only: snapshots are kept and shared between scans (SceneCache), and a
        # backend keeps frozen arrays by reference instead of copying them
        # (SceneGeometry.content)
        instance_mesh.flags.writeable = m.flags.writeable = False
        geometry = SceneGeometry(self.meshes, instance_mesh, m)
        tri_off = np.zeros(len(self.meshes) + 1, np.int64)
        tri_off[1:] = np.cumsum([t.shape[0] for t in self.tri_mats]) if self.tri_mats else []
        evals = [x[4] for x in self.materials]
        transmission = np.array([e.transmission for e in evals], np.float32)
        alpha = np.array([e.alpha for e in evals], np.float32)
        optics = bool((transmission > 0).any() or (alpha < 1).any())
        lobe = np.array([getattr(e, "lobe", (0.0,) * 4) for e in evals], np.float32).reshape(-1, 4)
        extra = {}
        if self.textures:
            extra["textures"], extra["uv"] = dict(self.textures), dict(self.uvs)
        if self.spectra:
            extra["spectra"] = dict(self.spectra)
        mtable = MaterialTable(
            reflectivity=np.array([x[1] for x in self.materials], np.float32),
            mirror=np.array([x[2] for x in self.materials], bool),
            color=linear_to_srgb_u8([x[3] for x in self.materials]).reshape(-1, 3),
            names=[x[0] for x in self.materials],
            mesh_tri_offset=tri_off,
            tri_material=SCENE_CACHE.tri_material_of(self.tri_mats),
            inst_mesh=geometry.instance_mesh,
            inst_slot_offset=slot_off,
            slot_material=np.concatenate(flat),
            transmission=transmission if optics else None,
            ior=np.array([e.ior for e in evals], np.float32) if optics else None,
            alpha=alpha if optics else None,
            lobe=lobe if lobe.any() else None,
            extra=extra,
        )
        mtable.share_rows(SCENE_CACHE.material_table)
        SCENE_CACHE.material_table = mtable
        return SceneSnapshot(geometry, mtable, *(np.concatenate(x) for x in ids), self.table.table, pose, origin,
                             dict(self.dropped), dict(self.bad_transforms), list(self.warnings))


class _GNPlan:
    """The Geometry Nodes instances of one evaluated object, as arrays.

    Attributes:
        stored (N, 4, 4) float32: every instance's transform relative to its instancer,
        as Blender stores it (column-major: ``stored[n]`` is the matrix transposed);
        parent (4, 4) float64: the instancer's object-to-world matrix; ref_index (N,)
        int64 reference of every instance; ref_mesh (R,) int64 mesh index of every
        reference; ref_rows: material rows of every reference's slots; nonempty (N,)
        bool: the instance's mesh has triangles.

    World matrices (float64) are made :data:`CHUNK` instances at a time (:meth:`world`),
    never for all at once: a float64 copy of 10^6 transforms is 128 MB of fresh memory,
    and each sample of the scene made three of them.
    """

    CHUNK = 1 << 16

    def __init__(self, stored, parent, ref_index, ref_mesh, ref_rows, nonempty) -> None:
        self.stored, self.parent, self.ref_index, self.ref_mesh = stored, parent, ref_index, ref_mesh
        self.ref_rows, self.nonempty = ref_rows, nonempty

    def __len__(self) -> int:
        return self.stored.shape[0]

    def world(self, rows) -> np.ndarray:
        """(K, 4, 4) float64 object-to-world matrices of the instances ``rows`` (a slice
        or an index array): parent @ local, as one (4K, 4) x (4, 4) product (row 4n + k
        of the stored array is column k of instance n's matrix)."""
        return self._columns(rows).reshape(-1, 4, 4).transpose(0, 2, 1)

    def _columns(self, rows) -> np.ndarray:
        """(4K, 4) float64: the columns of the instances' world matrices, one per row."""
        return self.stored[rows].reshape(-1, 4).astype(np.float64) @ self.parent.T

    def _chunks(self, count: int):
        for a in range(0, count, self.CHUNK):
            yield a, min(count, a + self.CHUNK)

    def finite(self) -> np.ndarray:
        """(N,) bool: the instance's world matrix is finite."""
        out = np.empty(len(self), bool)
        for a, b in self._chunks(len(self)):  # on the contiguous columns: no transposed view
            out[a:b] = np.isfinite(self._columns(slice(a, b))).all(axis=1).reshape(-1, 4).all(axis=1)
        return out

    def write_relative(self, rows, origin, out: np.ndarray) -> None:
        """Write the world matrices of the instances ``rows`` (index array; None: all)
        with ``origin`` (3,) float64 subtracted from their translations, in float64, into
        ``out`` (K, 4, 4) float32."""
        for a, b in self._chunks(out.shape[0]):
            w = self.world(slice(a, b) if rows is None else rows[a:b])
            w[:, :3, 3] -= origin
            out[a:b] = w

    def _check(self, inst, i: int) -> None:
        pid = [int(x) for x in inst.persistent_id if int(x) != 0x7FFFFFFF]
        world = self.world(slice(i, i + 1))[0]
        close = np.allclose(np.array(inst.matrix_world, np.float64), world, rtol=1e-5, atol=1e-4)
        if pid != [0, i] or not close:
            raise _PlanMismatch

    def consume(self, first, it) -> None:
        """Advance the depsgraph's instance iterator ``it`` past this object's
        instances (``first`` is the first of them), checking the first and the last
        against the arrays.

        Raises:
            _PlanMismatch: they do not match (the caller starts over, per instance).
        """
        n = len(self)
        self._check(first, 0)
        if n > 1:
            collections.deque(itertools.islice(it, n - 2), maxlen=0)
            last = next(it, None)
            if last is None:
                raise _PlanMismatch
            self._check(last, n - 1)


#: :func:`_gn_plan`'s answer for instances that cannot be read as arrays
_UNSUPPORTED = object()


def _gn_plan(parent, b: _Builder):
    """A :class:`_GNPlan` for the Geometry Nodes instances of the evaluated object
    ``parent``; None if it has none; :data:`_UNSUPPORTED` where they cannot be read as
    arrays (Blender before 4.3, a reference that is not a plain mesh: nested
    instances, curves, volumes)."""
    GeometrySet = compat.GeometrySet
    if GeometrySet is None:
        return _UNSUPPORTED
    if parent.type not in GEOMETRY_TYPES:
        return None
    try:
        gs = GeometrySet.from_evaluated_object(parent)
    except (RuntimeError, TypeError):
        return _UNSUPPORTED
    pc = gs.instances_pointcloud()
    if pc is None or len(pc.points) == 0:
        return None
    refs = gs.instance_references()
    ref_mesh, ref_rows = [], []
    for ref in refs:
        if not isinstance(ref, GeometrySet) or ref.instances_pointcloud() is not None or ref.mesh is None \
                or any(getattr(ref, k, None) is not None for k in ("curves", "pointcloud", "volume")):
            return _UNSUPPORTED
        mi = b.mesh_of(ref.mesh, parent.original.name)
        rows = [b.material_row(m) for m in ref.mesh.materials]
        b.add_uvs(mi, ref.mesh, rows, parent.original.name)
        ref_mesh.append(mi)
        ref_rows.append(rows)
    n = len(pc.points)
    xf = np.empty(n * 16, np.float32)
    pc.attributes["instance_transform"].data.foreach_get("value", xf)
    ref_index = np.zeros(n, np.int32)
    if ".reference_index" in pc.attributes:
        pc.attributes[".reference_index"].data.foreach_get("value", ref_index)
    P = np.array(parent.matrix_world, np.float64)
    ref_mesh = np.array(ref_mesh, np.int64)
    ntri = np.array([b.meshes[i].triangles.shape[0] for i in ref_mesh], np.int64)
    ref_index = ref_index.astype(np.int64)
    return _GNPlan(xf.reshape(n, 4, 4), P, ref_index, ref_mesh, ref_rows, ntri[ref_index] > 0)
