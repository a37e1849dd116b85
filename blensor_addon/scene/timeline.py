"""Continuous time: the scene between scene frames, and a scan context whose rays each
have their own firing time (issue 8; seed 000 section 3.2: the head turns while it fires).

Blender is sampled at scene frames (``frame_set``); between two samples the sensor's
pose and every instance's transform are interpolated (translation linear, rotation
slerp, scale/shear linear: :mod:`blensor_addon.raycast.motion`), and the ray caster
intersects every ray with the instances at the ray's own time, so rigid motion needs no
rebuilt mesh BVH and no finer sampling. Meshes that deform between two frames
(armatures, shape keys, simulations: their content changes) are re-evaluated every
``time_step`` seconds (``frame_set`` with subframes) and held in between.

With ``time_model="frame"`` the same machinery holds the scene and the sensor still for
each scene frame (the original's model), which is how a full sweep is assembled from the
frames it spans in that model.

Times: scene frame ``f`` starts at ``f * frame_time`` s (as the original's timestamps).
"""
from __future__ import annotations

import collections
import hashlib
import math

import numpy as np

from ..core.axes import rotation_vector
from ..core.errors import SettingsError
from ..raycast import trace
from ..raycast.trace import facing_normals
from ..raycast.base import SceneGeometry


def _rodrigues(axis: np.ndarray, angle: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``v`` (N, 3) rotated by ``angle`` (N,) rad about the unit ``axis`` (3,):
    ``v cos + (axis x v) sin + axis (axis . v)(1 - cos)``, written out per component
    (np.cross and np.outer took 60% longer)."""
    c, s = np.cos(angle), np.sin(angle)
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
    Rodrigues' formula, no matrix per ray)."""

    def __init__(self, t0: float, t1: float, pose0, pose1) -> None:
        self.t0, self.t1 = t0, t1
        self.R0 = np.asarray(pose0, dtype=np.float64)[:3, :3]
        self.p0 = np.asarray(pose0, dtype=np.float64)[:3, 3]
        self.p1 = np.asarray(pose1, dtype=np.float64)[:3, 3]
        rv = rotation_vector(self.R0.T @ np.asarray(pose1, dtype=np.float64)[:3, :3])
        self.theta = float(np.linalg.norm(rv))
        self.axis = rv / self.theta if self.theta > 0 else np.zeros(3)

    def fraction(self, t: np.ndarray) -> np.ndarray:
        """(N,) float64 in [0, 1]: where times ``t`` fall in the segment."""
        return np.clip((np.asarray(t, dtype=np.float64) - self.t0) / (self.t1 - self.t0), 0.0, 1.0)

    def rotate(self, s: np.ndarray, v: np.ndarray, inverse: bool = False) -> np.ndarray:
        """``R(s) v`` (or ``R(s)^T v``) for fractions ``s`` (N,) and vectors ``v`` (N, 3)."""
        v = np.asarray(v, dtype=np.float64)
        if self.theta == 0:
            return v @ self.R0 if inverse else v @ self.R0.T
        if inverse:
            return _rodrigues(self.axis, -self.theta * s, v @ self.R0)
        return _rodrigues(self.axis, self.theta * s, v) @ self.R0.T

    def position(self, s: np.ndarray) -> np.ndarray:
        """(N, 3) float64 sensor position (world, m) at fractions ``s``."""
        return (1.0 - s)[:, None] * self.p0 + s[:, None] * self.p1


class Step:
    """One time step ``[t0, t1)`` of the scene.

    Attributes:
        t0, t1: float s. snap: the snapshot at ``t0`` (meshes, materials, ids of the
        instances). geometry: its :class:`SceneGeometry`, with ``instance_matrix_end``
        (transforms at ``t1`` relative to the same origin) when something moves.
        pose: :class:`PoseSegment` of the sensor from ``pose0`` to ``pose1`` ((4, 4)
        float64 at ``t0`` and ``t1``; it keeps no snapshot alive). moving: any instance
        transform differs between the ends.
    """

    def __init__(self, t0: float, t1: float, snap, geometry: SceneGeometry, pose0, pose1, moving: bool):
        self.t0, self.t1, self.snap, self.geometry, self.moving = t0, t1, snap, geometry, moving
        self.pose = PoseSegment(t0, t1, pose0, pose1)


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


class TimedHits:
    """Cast results of N rays in continuous time: the trace and every per-ray attribute
    taken from the snapshot of the ray's step.

    Attributes (N rows each): range (float64 m), hit (bool), reflectivity (float32),
    normal, last_dir (N, 3) float32 world, color (N, 3) uint8, object_id, instancer_id,
    instance_id (uint32), semantic (uint16), time (float64 s): the ray's firing time,
    segment (int32): the step it was cast in (index into the context's pose segments,
    so its pose is taken from the very step that cast it).
    """

    FIELDS = ("range", "hit", "reflectivity", "normal", "last_dir", "color", "object_id", "instancer_id",
              "instance_id", "semantic", "time", "segment")

    def __init__(self, **arrays) -> None:
        for k in self.FIELDS:
            setattr(self, k, arrays[k])

    def take(self, idx) -> "TimedHits":
        """The rows ``idx`` (index array or boolean mask) of every field."""
        return TimedHits(**{k: getattr(self, k)[idx] for k in self.FIELDS})

    @classmethod
    def concat(cls, parts: list["TimedHits"]) -> "TimedHits":
        """The rows of ``parts`` one after the other."""
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in cls.FIELDS})

    @classmethod
    def scatter(cls, parts: list["TimedHits"], rows: list, n: int) -> "TimedHits":
        """The N = ``n`` rays of ``parts``, part i going to rows ``rows[i]`` (int arrays
        that together cover 0..n-1 once), as a :class:`_Scattered`: nothing is copied
        until a field is read or rows are taken."""
        return _Scattered(parts, rows, n)


#: a part's rows that form at most this many runs of consecutive rays are moved run by
#: run (slices) instead of through an index array
MAX_RUNS = 64


def _runs(rows: np.ndarray) -> list | None:
    """The runs of consecutive values in ``rows`` (int array): list of (start, end, first
    value) with ``rows[start:end] == first + arange(end - start)``, or None when there are
    more than :data:`MAX_RUNS`."""
    if rows.size == 0:
        return []
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    if cut.size >= MAX_RUNS:
        return None
    b = [0, *cut.tolist(), rows.size]
    return [(b[i], b[i + 1], int(rows[b[i]])) for i in range(len(b) - 1)]


class _Scattered(TimedHits):
    """The rays of ``parts`` in ray order, part i holding rows ``rows[i]`` (see
    :meth:`TimedHits.scatter`), copied only when asked: a field is scattered when first
    read (a sensor reads a few, such as ``hit``, ``range`` and ``reflectivity``, to choose
    its returns), and :meth:`take` of a boolean mask moves the rows kept of every other
    field from the parts straight to their places: copied once (the rows kept), not
    twice. A sweep's steps hold runs of consecutive rays (they interleave only where
    the firing offsets overlap a step's end), which are moved as slices."""

    def __init__(self, parts: list[TimedHits], rows: list, n: int) -> None:
        self._parts, self._rows, self._n = parts, rows, n
        self._runs = [_runs(np.asarray(r)) for r in rows]

    def _field(self, name: str, moves=None, m: int = 0) -> np.ndarray:
        """Field ``name`` scattered to ray order, or with ``moves`` (per part, from
        :meth:`take`) only the ``m`` rows kept."""
        first = getattr(self._parts[0], name)
        out = np.empty((self._n if moves is None else m, *first.shape[1:]), first.dtype)
        if moves is None:
            for p, r, runs in zip(self._parts, self._rows, self._runs):
                v = getattr(p, name)
                if runs is None:
                    out[r] = v
                else:
                    for a, b, d in runs:
                        out[d:d + b - a] = v[a:b]
        else:
            for p, mv in zip(self._parts, moves):
                v = getattr(p, name)
                if isinstance(mv, list):  # runs: (start, end, kept mask, first place, count kept)
                    for a, b, keep, c, k in mv:
                        out[c:c + k] = v[a:b][keep] if k < b - a else v[a:b]
                else:
                    src, dst = mv
                    out[dst] = v[src]
        return out

    def __getattr__(self, name):
        if name not in TimedHits.FIELDS:
            raise AttributeError(name)
        value = self._field(name)
        setattr(self, name, value)
        return value

    def take(self, idx) -> TimedHits:
        idx = np.asarray(idx)
        if idx.dtype != bool or idx.shape != (self._n,):
            return super().take(idx)
        csum = np.cumsum(idx)
        m = int(csum[-1]) if self._n else 0
        pos = csum - 1  # place of each kept row among the kept
        moves = []
        for r, runs in zip(self._rows, self._runs):
            if runs is None:
                src = np.flatnonzero(idx[r])
                moves.append((src, pos[r[src]]))
            else:  # a run's kept rows land next to each other, after those kept before it
                mv = []
                for a, b, d in runs:
                    before = int(csum[d] - idx[d])  # rows kept before the run
                    mv.append((a, b, idx[d:d + b - a], before, int(csum[d + b - a - 1]) - before))
                moves.append(mv)
        read = self.__dict__  # the fields scattered already: taken from there
        return TimedHits(**{k: read[k][idx] if k in read else self._field(k, moves, m) for k in self.FIELDS})


class TimedContext:
    """:class:`~blensor_addon.core.sensors.sensor.ScanContext` for a packet starting at
    ``t_start`` (s): every ray is cast at its own time (``times``) through the
    :class:`Timeline`. ``sensor_to_world`` is the pose at ``t_start``;
    ``sensor_to_world_end`` the pose at ``t_end`` (continuous time)."""

    def __init__(self, backend, timeline: Timeline, t_start: float, t_end: float, frame_of_reference: str,
                 camera, semantic: np.ndarray, objects: list) -> None:
        self.backend = backend
        self.timeline = timeline
        self.frame_of_reference = frame_of_reference
        self.camera = camera
        self.semantic = semantic
        self.objects = objects
        self.t_start = float(t_start)
        self.sensor_to_world = timeline.pose_at(t_start)
        self.sensor_to_world_end = timeline.pose_at(t_end) if timeline.continuous else None
        self._current = None  # the step whose geometry the backend holds
        self._segments: list = []  # PoseSegment of every step cast so far
        self._segment_of: dict = {}  # step t0 -> index in _segments

    def _use(self, step: Step) -> int:
        """Give the backend ``step``'s geometry; returns the step's segment index."""
        if self._current is not step:
            self.backend.set_geometry(step.geometry)
            self._current = step
        k = self._segment_of.get(step.t0)
        if k is None:
            k = self._segment_of[step.t0] = len(self._segments)
            self._segments.append(step.pose)
        return k

    def _by_segment(self, hits, fn) -> np.ndarray:
        """(N, 3): ``fn(segment, fractions, rows)`` evaluated per segment of the rays."""
        seg = hits.segment
        if seg.size and seg[0] == seg[-1] and (seg == seg[0]).all():  # one step: no row selection
            sg = self._segments[int(seg[0])]
            return fn(sg, sg.fraction(hits.time), slice(None))
        out = np.empty((seg.shape[0], 3))
        for k, i in groups(seg):
            sg = self._segments[int(k)]
            out[i] = fn(sg, sg.fraction(hits.time[i]), i)
        return out

    def rotate(self, hits, v: np.ndarray, inverse: bool = False) -> np.ndarray:
        """Vectors (N, 3) rotated by the sensor's orientation at each ray's time
        (``inverse``: world -> sensor frame)."""
        v = np.asarray(v, dtype=np.float64)
        return self._by_segment(hits, lambda sg, s, i: sg.rotate(s, v[i], inverse))

    def position(self, hits) -> np.ndarray:
        """(N, 3) sensor position (world, m) at each ray's time."""
        return self._by_segment(hits, lambda sg, s, i: sg.position(s))

    def cast(self, origins, directions, max_range, max_bounces, times=None):
        """:meth:`ScanContext.cast <blensor_addon.core.sensors.sensor.ScanContext.cast>`
        with ``times`` (N,) float64 s: the firing time of each ray (default: the packet's
        start); each ray is cast in the step holding its time, from the sensor pose then.
        Returns :class:`TimedHits`."""
        d_s = np.asarray(directions, dtype=np.float64).reshape(-1, 3)
        n = d_s.shape[0]
        t = np.full(n, self.t_start) if times is None else np.asarray(times, dtype=np.float64)
        tl = self.timeline
        # step of every ray: (frame, substep), in time order
        frame = tl.frame_of(t)
        parts, order = [], []
        for f, in_f in groups(frame):
            steps = tl.steps(int(f))
            j = np.clip(((t[in_f] - f * tl.frame_time) / tl.frame_time * len(steps)).astype(np.int64),
                        0, len(steps) - 1)
            for k, rows in groups(j):
                idx = in_f[rows]
                parts.append(self._cast_step(steps[int(k)], idx, origins, d_s, t, max_range, max_bounces))
                order.append(idx)
        if not parts:
            return self._cast_step(tl.step_at(self.t_start), np.zeros(0, np.int64), origins, d_s, t, max_range,
                                   max_bounces)
        if len(parts) == 1 and np.array_equal(order[0], np.arange(n)):
            return parts[0]
        return TimedHits.scatter(parts, order, n)

    def _cast_step(self, step: Step, idx, origins, d_s, t, max_range, max_bounces) -> TimedHits:
        seg = self._use(step)
        snap = step.snap
        pose = step.pose
        s = pose.fraction(t[idx])
        dirs = pose.rotate(s, d_s[idx])
        orig = pose.position(s) - snap.origin
        if origins is not None:
            orig = orig + pose.rotate(s, np.asarray(origins, dtype=np.float64).reshape(-1, 3)[idx])
        mats = snap.materials
        tr = trace(self.backend, orig, dirs, max_range, mats.is_mirror if mats.mirror.any() else None, max_bounces,
                   time=s.astype(np.float32) if step.moving else None)
        del dirs, orig
        mat = mats.lookup(tr.instance, tr.primitive)
        object_id, instancer_id, instance_id, semantic = snap.labels(tr.instance, self.semantic)
        return TimedHits(range=tr.range, hit=tr.hit, reflectivity=mats.reflectivity[mat], normal=tr.normal,
                         last_dir=tr.last_dir, color=mats.color[mat], object_id=object_id, instancer_id=instancer_id,
                         instance_id=instance_id, semantic=semantic, time=t[idx],
                         segment=np.full(idx.shape[0], seg, np.int32))

    def surface(self, pattern, hits) -> dict:
        n_world, cos_inc = facing_normals(hits.normal, hits.last_dir)
        # world -> sensor frame at the ray's time: R(t)^T n
        normal = n_world if self.frame_of_reference == "world" else self.rotate(hits, n_world, inverse=True)
        return {"normal": normal, "cos_inc": cos_inc, "color": hits.color, "object_id": hits.object_id,
                "instancer_id": hits.instancer_id, "instance_id": hits.instance_id, "semantic": hits.semantic}

    def sensor_points_to(self, frame: str, xyz: np.ndarray, hits,
                         world: np.ndarray | None = None) -> np.ndarray:
        """Points in the sensor frame at each ray's time -> ``"world"`` or ``"start"``
        (the sensor frame at the packet's start: deskewed, through the world points
        ``world`` when given)."""
        w = self.rotate(hits, xyz) + self.position(hits) if world is None else world
        if frame == "world":
            return w
        P0 = self.sensor_to_world
        return (w - P0[:3, 3]) @ P0[:3, :3]
