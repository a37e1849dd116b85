"""The scene over time: Blender sampled at scene frames and cut into time steps, each with
the sensor's pose over it (seed 000 section 3.2: the head turns while it fires).
The scan context that casts rays through these steps is
:class:`blensor_addon.scene.context.TimelineContext`.

Blender is sampled at scene frames (``frame_set``); between two samples the sensor's
pose and every instance's transform are interpolated (translation linear, rotation
slerp, scale/shear linear: :mod:`blensor_addon.raycast.motion`), and the ray caster
intersects every ray with the instances at the ray's own time, so rigid motion needs no
rebuilt mesh BVH and no finer sampling. Meshes that deform between two frames
(armatures, shape keys, simulations: their content changes) are re-evaluated every
``time_step`` seconds (``frame_set`` with subframes) and held in between.

With ``time_model="frame"`` the same machinery holds the scene and the sensor still for
each scene frame (the original's model), which is how a full sweep is assembled from the
frames it spans in that model; a frozen packet (one frame) is cast in the one step
:meth:`Timeline.held` gives.

Times: scene frame ``f`` starts at ``f * frame_time`` s (as the original's timestamps).

Which objects move during a packet (:meth:`Timeline.moving_ids`, for the SemanticKITTI
moving-* classes) is read from the same steps: an instance whose transform changes over
the packet by more than :data:`MOVING_M` (translation) or :data:`MOVING_ROT` (any entry
of its 3 x 3 part) moves.
"""
from __future__ import annotations

import collections
import hashlib
import math

import numpy as np

from ..core.axes import rotation_vector
from ..core.errors import SettingsError
from ..raycast.base import SceneGeometry


def _rodrigues(axis: np.ndarray, angle: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``v`` (N, 3) rotated by ``angle`` (N,) rad about the unit ``axis`` (3,):
    ``v cos + (axis x v) sin + axis (axis . v)(1 - cos)``, written out per component
    (np.cross and np.outer took 60% longer)."""
    return rodrigues_cs(axis, np.cos(angle), np.sin(angle), v)


def rodrigues_cs(axis: np.ndarray, c: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`_rodrigues` from the angles' cosines ``c`` and sines ``s`` (N,) float64: vectors
    ``v`` (N, 3) rotated about the unit ``axis`` (3,); (N, 3) float64. For callers that share
    one angle among several rows (the sub-rays of a beam)."""
    a0, a1, a2 = (float(a) for a in axis)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    d = (x * a0 + y * a1 + z * a2) * (1.0 - c)
    out = np.empty(v.shape, np.float64)
    out[:, 0] = x * c + (a1 * z - a2 * y) * s + d * a0
    out[:, 1] = y * c + (a2 * x - a0 * z) * s + d * a1
    out[:, 2] = z * c + (a0 * y - a1 * x) * s + d * a2
    return out


class PoseSegment:
    """The sensor's rigid pose over ``[t0, t1)``: ``pose0`` and ``pose1`` (4, 4) float64
    at the ends; in between the position moves linearly and the orientation turns about
    the fixed axis of ``R0^T R1`` at a constant rate: ``R(s) = R0 exp(s theta [u]x)``, the
    slerp of :func:`blensor_addon.raycast.motion.interpolate` (applied to vectors with
    Rodrigues' formula, no matrix per ray).

    ``still``: the pose is ``pose0`` throughout (a held frame, ``pose1`` ignored):
    rotations are ``R0`` exactly and the position is ``p0`` exactly at every fraction."""

    def __init__(self, t0: float, t1: float, pose0, pose1, still: bool = False) -> None:
        self.t0, self.t1, self.still = t0, t1, still
        self.R0 = np.asarray(pose0, dtype=np.float64)[:3, :3]
        self.p0 = np.asarray(pose0, dtype=np.float64)[:3, 3]
        if still:
            self.p1, self.theta, self.axis = self.p0, 0.0, np.zeros(3)
            return
        self.p1 = np.asarray(pose1, dtype=np.float64)[:3, 3]
        rv = rotation_vector(self.R0.T @ np.asarray(pose1, dtype=np.float64)[:3, :3])
        self.theta = float(np.linalg.norm(rv))
        self.axis = rv / self.theta if self.theta > 0 else np.zeros(3)

    def fraction(self, t: np.ndarray) -> np.ndarray:
        """(N,) float64 in [0, 1]: where times ``t`` fall in the segment."""
        return np.clip((np.asarray(t, dtype=np.float64) - self.t0) / (self.t1 - self.t0), 0.0, 1.0)

    def turn(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The cosines and sines (N,) float64 of the angles ``theta * s`` (rad) the
        orientation has turned by at fractions ``s`` (N,); None when it does not turn
        (``theta == 0``). Taken once for the rays of a step, they serve every set of
        vectors rotated at those fractions (:meth:`rotate`'s ``turn``)."""
        if self.theta == 0:
            return None
        angle = self.theta * s
        return np.cos(angle), np.sin(angle)

    def rotate(self, s: np.ndarray, v: np.ndarray, inverse: bool = False,
               turn: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """``R(s) v`` (or ``R(s)^T v``) for fractions ``s`` (N,) and vectors ``v`` (N, 3),
        (N, 3) float64. ``turn``: :meth:`turn` of the same ``s``, when the caller has it
        already (forward rotations only): the same values, not taken again."""
        v = np.asarray(v, dtype=np.float64)
        if self.theta == 0:
            return v @ self.R0 if inverse else v @ self.R0.T
        if inverse:
            v = v @ self.R0  # (the rows given are not held while they are turned)
            return _rodrigues(self.axis, -self.theta * s, v)
        c, sn = self.turn(s) if turn is None else turn
        return rodrigues_cs(self.axis, c, sn, v) @ self.R0.T

    def position(self, s: np.ndarray) -> np.ndarray:
        """(N, 3) float64 sensor position (world, m) at fractions ``s``."""
        if self.still:
            return np.broadcast_to(self.p0, (np.shape(s)[0], 3))
        return (1.0 - s)[:, None] * self.p0 + s[:, None] * self.p1


class Step:
    """One time step ``[t0, t1)`` of the scene.

    Attributes:
        t0, t1: float s. snap: the snapshot at ``t0`` (meshes, materials, ids of the
        instances). geometry: its :class:`SceneGeometry`, with ``instance_matrix_end``
        (transforms at ``t1`` relative to the same origin) when something moves.
        pose: :class:`PoseSegment` of the sensor from ``pose0`` to ``pose1`` ((4, 4)
        float64 at ``t0`` and ``t1``; it keeps no snapshot alive). moving: any instance
        transform differs between the ends. still: a held frame (see :class:`PoseSegment`).
    """

    def __init__(self, t0: float, t1: float, snap, geometry: SceneGeometry, pose0, pose1, moving: bool,
                 still: bool = False):
        self.t0, self.t1, self.snap, self.geometry, self.moving = t0, t1, snap, geometry, moving
        self.pose = PoseSegment(t0, t1, pose0, pose1, still)


def _keys(snap) -> np.ndarray:
    """(I, 3) uint32 identity of every instance: (object id, instancer id, index)."""
    return np.stack([np.asarray(snap.instance_object_id, np.uint32), np.asarray(snap.instance_instancer_id, np.uint32),
                     np.asarray(snap.instance_index, np.uint32)], 1)


def match_instances(a, b) -> np.ndarray:
    """(Ia,) int64: the instance of snapshot ``b`` that is instance i of ``a`` (same
    object, instancer and index), -1 where ``b`` has none."""
    ka, kb = _keys(a), _keys(b)
    if ka.shape == kb.shape and np.array_equal(ka, kb):
        return np.arange(ka.shape[0], dtype=np.int64)
    where = {tuple(k): i for i, k in enumerate(kb.tolist())}
    return np.array([where.get(tuple(k), -1) for k in ka.tolist()], dtype=np.int64)


def non_finite_transform(name: str, t: float, frame: int) -> SettingsError:
    """The refusal of object ``name``'s NaN/inf transform at time ``t`` (s), scene frame
    ``frame``, in continuous time (where transforms are interpolated)."""
    return SettingsError(f"transform of object '{name}'", "finite at every time scanned",
                         f"NaN/inf at t = {t:.6g} s (frame {frame})")


def groups(keys: np.ndarray):
    """Yield (key, rows) for each distinct value of ``keys`` (N,) in ascending order,
    ``rows`` (int64) ascending: what ``np.unique`` and ``flatnonzero(keys == key)`` give,
    from one stable sort instead of a pass over every ray per key (a deforming sweep has
    hundreds of steps)."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    cuts = np.flatnonzero(sk[1:] != sk[:-1]) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, sk.size]):
        yield sk[a], order[a:b]


#: an instance whose translation changes by more than this (m) over a packet moves
#: (1 mm: 1 cm/s over a 0.1 s sweep)
MOVING_M = 1e-3
#: ... or any entry of its rotation-and-scale part by more than this (about 0.006 deg)
MOVING_ROT = 1e-4


def moved(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(I,) bool: the instance transforms (I, 4, 4) ``start`` -> ``end`` (same origin)
    move by more than :data:`MOVING_M` / :data:`MOVING_ROT`."""
    d = np.asarray(end, dtype=np.float64) - np.asarray(start, dtype=np.float64)
    if not d.shape[0]:
        return np.zeros(0, bool)
    return ((np.linalg.norm(d[:, :3, 3], axis=1) > MOVING_M)
            | (np.abs(d[:, :3, :3]).max(axis=(1, 2)) > MOVING_ROT))


def moving_keys(step: "Step") -> set:
    """Ids of what moves in ``step`` (see :meth:`Timeline.moving_ids`)."""
    g = step.geometry
    if g.instance_matrix_end is None:
        return set()
    rows = np.flatnonzero(moved(g.instance_matrix, g.instance_matrix_end))
    snap = step.snap
    direct = np.asarray(snap.instance_object_id, np.int64)[rows]
    parent = np.asarray(snap.instance_instancer_id, np.int64)[rows]
    return set(np.where(parent == 0, direct, parent).tolist())


class Timeline:
    """Samples of the scene at scene frames (and subframes where meshes deform), cut
    into :class:`Step` s.

    Args:
        sample: ``sample(frame, subframe)`` -> snapshot of the evaluated scene there.
        frame_time: s per scene frame. continuous: interpolate (else hold each frame).
        time_step: s, the step for deforming meshes (<= frame_time).
    """

    def __init__(self, sample, frame_time: float, continuous: bool, time_step: float) -> None:
        self._sample = sample
        self.frame_time = float(frame_time)
        self.continuous = continuous
        self.substeps_deforming = max(1, math.ceil(self.frame_time / time_step - 1e-9))
        self._snaps: collections.OrderedDict = collections.OrderedDict()
        self._steps: collections.OrderedDict = collections.OrderedDict()
        # frame -> {j: geometry hash} of the deforming frames' steps, kept longer than the
        # steps themselves: a packet's hash, asked after its scan, never resamples a frame
        # whose steps were dropped meanwhile (a 10 Hz sweep at 24 fps spans 4 frames)
        self._step_hashes: collections.OrderedDict = collections.OrderedDict()

    def held(self, frame: int) -> Step:
        """Scene frame ``frame`` held still, sampled now: one step over the frame whose
        snapshot is taken at the frame and whose pose is that snapshot's throughout
        (``still``), casting every ray of a frozen packet whatever its time. A NaN/inf
        instance transform is left out with a warning (the extractor's), not refused, as
        frozen frames are."""
        ft = self.frame_time
        a = self._sample(frame, 0.0)
        return Step(frame * ft, (frame + 1) * ft, a, a.geometry, a.sensor_to_world, a.sensor_to_world, False,
                    still=True)

    def frame_of(self, t: np.ndarray) -> np.ndarray:
        """(N,) int64 scene frame of times ``t`` (s)."""
        return np.floor(np.asarray(t, dtype=np.float64) / self.frame_time + 1e-9).astype(np.int64)

    def snapshot(self, frame: int, sub: int = 0, n: int = 1):
        """The snapshot at ``frame + sub / n`` (a few are kept: consecutive steps share
        their ends).

        Raises:
            SettingsError (``transform of object 'NAME'``): continuous time and an
            instance transform is NaN/inf there."""
        if sub == n:
            frame, sub = frame + 1, 0
        key = (frame, 0, 1) if sub == 0 else (frame, sub, n)
        snap = self._snaps.get(key)
        if snap is None:
            snap = self._sample(frame, sub / n)
            if self.continuous and snap.bad_transforms:
                raise non_finite_transform(sorted(snap.bad_transforms)[0], (frame + sub / n) * self.frame_time, frame)
            self._snaps[key] = snap
            while len(self._snaps) > 6:
                self._snaps.popitem(last=False)
        return snap

    def steps(self, frame: int) -> list[Step]:
        """The steps of scene frame ``frame``: one, or ``ceil(frame_time / time_step)``
        when a mesh deforms during it."""
        steps = self._steps.get(frame)
        if steps is not None:
            return steps
        ft = self.frame_time
        a = self.snapshot(frame)
        if not self.continuous:
            steps = [Step(frame * ft, (frame + 1) * ft, a, a.geometry, a.sensor_to_world, a.sensor_to_world, False)]
        else:
            b = self.snapshot(frame + 1)
            step, deforming = self._step(a, b, frame * ft, (frame + 1) * ft)
            if deforming:
                hashes = self._step_hashes.setdefault(frame, {})
                while len(self._step_hashes) > 64:
                    self._step_hashes.popitem(last=False)
                steps = _SubSteps(self, frame, self.substeps_deforming, hashes)
            else:
                steps = [step]
        self._steps[frame] = steps
        while len(self._steps) > 3:
            self._steps.popitem(last=False)
        return steps

    @staticmethod
    def _step(a, b, t0: float, t1: float) -> tuple[Step, bool]:
        """The step from snapshot ``a`` to ``b``, and whether a mesh deforms between them."""
        ga, gb = a.geometry, b.geometry
        if a is b:  # the extractor's one snapshot of a scene unchanged in between: nothing moves
            return Step(t0, t1, a, ga, a.sensor_to_world, b.sensor_to_world, False), False
        ib = match_instances(a, b)
        ok = ib >= 0
        codes: dict = {}  # mesh key -> small int, so instances compare as integers
        code_a = np.array([codes.setdefault(m.key, len(codes)) for m in ga.meshes], np.int64)
        code_b = np.array([codes.setdefault(m.key, len(codes)) for m in gb.meshes], np.int64)
        mesh_a, mesh_b = code_a[ga.instance_mesh[ok]], code_b[gb.instance_mesh[ib[ok]]]
        deforming = bool(ok.any() and (mesh_a != mesh_b).any())
        same = (np.array_equal(ib, np.arange(ib.shape[0])) and np.array_equal(a.origin, b.origin)
                and np.array_equal(ga.instance_matrix, gb.instance_matrix))
        if same:  # nothing moved (10^6 static instances: no float64 copies of every transform)
            end32, moving = ga.instance_matrix, False
        else:
            end = ga.instance_matrix.astype(np.float64)
            if ok.any():
                mb = gb.instance_matrix[ib[ok]].astype(np.float64)
                mb[:, :3, 3] += b.origin - a.origin  # b's transforms relative to a's origin
                end[ok] = mb
            end32 = end.astype(np.float32)
            moving = not np.array_equal(end32, ga.instance_matrix)
        geometry = SceneGeometry(ga.meshes, ga.instance_mesh, ga.instance_matrix,
                                 instance_matrix_end=end32 if moving else None)
        return Step(t0, t1, a, geometry, a.sensor_to_world, b.sensor_to_world, moving), deforming

    def moving_ids(self, t0: float, t1: float) -> set:
        """Object ids that move in the scene frames overlapping ``[t0, t1)`` s: an object
        drawn directly whose transform changes from the frame to the next
        (:func:`moved`), or an instancer one of whose instances does (its instances are
        told apart by the instancer only). In continuous time that is the step a rigid
        frame is cast in (nothing sampled again); with frozen frames (``time_model =
        frame``) and deforming frames the snapshots of the frame and the next (one more
        scene sample per frozen packet, kept for the next packet)."""
        f0, f1 = (int(v) for v in self.frame_of(np.array([t0, max(t0, t1 - 1e-12)])))
        out: set = set()
        ft = self.frame_time
        for f in range(f0, f1 + 1):
            steps = self.steps(f) if self.continuous else None
            if isinstance(steps, list):
                step = steps[0]
            else:
                step = self._step(self.snapshot(f), self.snapshot(f + 1), f * ft, (f + 1) * ft)[0]
            if step.moving:
                out |= moving_keys(step)
        return out

    def geometry_hash(self, t0: float, t1: float) -> str:
        """sha256 (hex) of the geometry of every step overlapping ``[t0, t1)``, in time
        order (each step's :meth:`SceneGeometry.hash`: meshes, start and end transforms)."""
        h = hashlib.sha256()
        f0, f1 = (int(v) for v in self.frame_of(np.array([t0, max(t0, t1 - 1e-12)])))
        for f in range(f0, f1 + 1):
            steps = self.steps(f)
            n = len(steps)
            for j in range(n):
                a = (f + j / n) * self.frame_time
                b = (f + (j + 1) / n) * self.frame_time
                if b > t0 and a < t1:
                    h.update((steps.hash_of(j) if isinstance(steps, _SubSteps) else steps[j].geometry.hash()).encode())
        return h.hexdigest()

    def step_at(self, t: float) -> Step:
        """The step holding time ``t``."""
        f = int(self.frame_of(np.array([t]))[0])
        steps = self.steps(f)
        j = min(len(steps) - 1, max(0, int((t - f * self.frame_time) / self.frame_time * len(steps))))
        return steps[j]

    def pose_at(self, t: float) -> np.ndarray:
        """(4, 4) float64 sensor pose at time ``t`` (s)."""
        pose = self.step_at(t).pose
        s = pose.fraction(np.array([t]))
        out = np.eye(4)
        out[:3, :3] = pose.rotate(np.repeat(s, 3), np.eye(3)).T  # columns: R e_k
        out[:3, 3] = pose.position(s)[0]
        return out


class _SubSteps:
    """The ``n`` steps of a scene frame in which a mesh deforms, made when first asked
    for and only the last two kept (rays arrive in time order; 139 steps a frame by
    default, each with its own snapshot, would otherwise all stay in memory)."""

    def __init__(self, timeline: Timeline, frame: int, n: int, hashes: dict) -> None:
        self.timeline, self.frame, self.n = timeline, frame, n
        self._made: collections.OrderedDict = collections.OrderedDict()
        self._hashes = hashes  # j -> geometry hash of every step made (small; the timeline's)

    def hash_of(self, j: int) -> str:
        """Geometry hash of step ``j`` (made again only if it never was)."""
        h = self._hashes.get(j)
        return h if h is not None else self[j].geometry.hash()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int) -> Step:
        j = int(j) if j >= 0 else self.n + int(j)
        step = self._made.get(j)
        if step is None:
            tl, f, n, ft = self.timeline, self.frame, self.n, self.timeline.frame_time
            a, b = tl.snapshot(f, j, n), tl.snapshot(f, j + 1, n)
            step = tl._step(a, b, (f + j / n) * ft, (f + (j + 1) / n) * ft)[0]
            self._made[j] = step
            self._hashes[j] = step.geometry.hash()
            while len(self._made) > 2:
                self._made.popitem(last=False)
        return step
