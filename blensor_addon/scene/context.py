"""The scan context over a :class:`~blensor_addon.scene.timeline.Timeline` and the hits
it returns: the one implementation of the sensors'
:class:`~blensor_addon.core.sensors.protocols.ScanContext` and
:class:`~blensor_addon.core.sensors.protocols.Hits` protocols.

A packet (:mod:`blensor_addon.core.packets`) is scanned in one :class:`TimelineContext`.
In continuous time every ray is cast at its own firing time in the time step that holds
it (seed 000 section 3.2: the head turns while it fires; the pose and the instances are
interpolated within the step). A frozen packet (``time_model = frame``, or a sensor
that fires all its rays at once) is the one-step case: the step of its scene frame,
held still, casts every ray whatever its timestamp, as the original did.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..raycast import trace
from ..raycast.trace import SPECULAR_ACCEPTANCE, facing_normals
from .timeline import Step, Timeline, rodrigues_cs, groups


class CastHits:
    """What :meth:`TimelineContext.cast` returns for N rays: the
    :class:`~blensor_addon.core.sensors.protocols.Hits` protocol's implementation.

    Attributes (N rows each; N + E with split paths, see
    :class:`~blensor_addon.core.sensors.protocols.Hits`): range (float64 m), hit (bool),
    reflectivity (float32; a glass surface's effective one: the diffuse share of its
    material's plus its specular return, :class:`~blensor_addon.raycast.trace.TraceResult`),
    normal, last_dir (N, 3) float32 world, color (N, 3) uint8, object_id, instancer_id,
    instance_id (uint32), semantic (uint16), time (float64 s): the ray's firing time,
    segment (int32): the step it was cast in (index into the context's pose segments,
    so its pose is taken from the very step that cast it), ray (int64): the cast ray the
    row belongs to, weight (float32): the path's one-way transmission (see
    :class:`~blensor_addon.core.sensors.protocols.Hits`), bounces (uint8): the path's
    reflections and glass passes (:class:`~blensor_addon.raycast.trace.TraceResult`; 0: the
    row's point lies on its cast ray, which :meth:`TimelineContext.sun_visible` needs).

    Hits made by :meth:`scatter` (rays cast in several steps) are put in ray order only
    when asked: a field is scattered when first read (a sensor reads a few, such as
    ``hit``, ``range`` and ``reflectivity``, to choose its returns).

    :meth:`take` of a boolean mask or of row indices copies nothing: it gives a view of
    the hits it was taken from, its rows those hits' rows ``idx`` (a take of a view takes
    from the same hits, the indices composed), and a field is read through the indices
    when first read, from the parts of a scatter straight to its places. A sensor's chain
    of takes (its echoes, the returns kept, the detected, the returns mode) so copies each
    field it reads once, at the rows it ends with, and no other field. A field set or
    changed on a view (an echo's range) is that view's and taken with its rows.

    The labels and the colour (:data:`LAZY`) are made from each row's instance and
    material (``source``, a :class:`_Labels`) when first read, of the rows read: a scan
    labels only the rows that become returns (for speed).
    """

    FIELDS = ("range", "hit", "reflectivity", "normal", "last_dir", "color", "object_id", "instancer_id",
              "instance_id", "semantic", "time", "segment", "ray", "weight", "bounces")
    #: the world pose of each row's cast ray, kept only for the shadow rays of
    #: :meth:`TimelineContext.sun_visible` (a context under a sun, one row per cast ray: no
    #: beam footprint; None otherwise, no memory held): ray_position (N, 3) float64 the
    #: sensor's position (world, m) at the ray's time, ray_direction (N, 3) float64 its
    #: direction turned to the world (as cast, not normalized), ray_offset (N, 3) float64
    #: its origin offset turned to the world (None: the rays had no origins). Taken with the
    #: rows like :data:`FIELDS`.
    POSE = ("ray_position", "ray_direction", "ray_offset")
    #: the fields a :class:`_Labels` source makes on demand
    LAZY = ("color", "object_id", "instancer_id", "instance_id", "semantic")
    #: an echo's returned reflectivity and energy: set on the echo hits
    #: (:func:`~blensor_addon.core.sensors.sensor.echo_hits`), None on a cast's hits
    returned: np.ndarray | None = None
    energy: np.ndarray | None = None

    def __init__(self, source: "_Labels | None" = None, **arrays) -> None:
        self._scatter = None
        self._source = source
        for k in self.FIELDS:
            if k in arrays or source is None or k not in self.LAZY:
                setattr(self, k, arrays[k])
        for k in self.POSE:
            setattr(self, k, arrays.get(k))

    def _rows(self, name: str, sel) -> np.ndarray:
        """Field ``name`` at rows ``sel`` (index array, mask or slice), from the source
        when the field has not been made."""
        v = self.__dict__.get(name)
        if v is None:
            src = self.__dict__.get("_source")
            if src is not None and name in CastHits.LAZY:
                return src.field(name, sel)
            v = getattr(self, name)
            if v is None:  # a POSE field not kept
                return None
        return _rows_of(v, sel)

    def take(self, idx) -> "CastHits":
        """The rows ``idx`` (index array, boolean mask or slice) of every field: a view
        (class docstring) for an index array or a mask, fields of their own for a slice
        (views of the arrays)."""
        if isinstance(idx, slice):
            return self._take_rows(idx)
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        base = self.__dict__.get("_base")
        if base is None:  # a copy of the indices: the view owns them (its labels are made for them)
            return CastHits._view(self, np.array(idx, dtype=np.int64), {})
        # the fields this view made or was given are taken with its rows; the others read later
        made = {k: _rows_of(v, idx) for k, v in self.__dict__.items()
                if v is not None and (k in CastHits.FIELDS or k in CastHits.POSE)}
        return CastHits._view(base, self._idx.take(idx), made)

    @classmethod
    def _view(cls, base: "CastHits", rows: np.ndarray, made: dict) -> "CastHits":
        """Rows ``rows`` (K,) int64 of ``base`` (hits that are no view), with the fields
        ``made`` (K rows each) of their own."""
        hits = cls.__new__(cls)
        hits._source = None
        hits._scatter = None
        hits._base = base
        hits._idx = rows
        hits.__dict__.update(made)
        return hits

    def _from_base(self, name: str) -> np.ndarray:
        """Field ``name`` of a view: its base's field at the view's rows (from the parts
        of a scatter by one plan, made when first needed; the labels from the base's
        source, made once for these rows)."""
        base, rows = self._base, self._idx
        sc = base.__dict__.get("_scatter")
        if sc is not None and name not in base.__dict__:
            plan = self.__dict__.get("_plan")
            if plan is None:
                plan = self._plan = sc.locate(rows)
            return sc.gather(name, plan, rows.shape[0])
        return base._rows(name, rows)

    def _take_rows(self, idx: slice) -> "CastHits":
        """:meth:`take` of a slice: every field's rows ``idx`` (numpy views), the labels'
        source sliced alike."""
        src = self.__dict__.get("_source")
        have = self.__dict__
        pose = {k: getattr(self, k) for k in self.POSE}
        pose = {k: None if v is None else v[idx] for k, v in pose.items()}
        if src is not None and any(k not in have for k in self.LAZY):
            own = {k: have[k][idx] for k in self.FIELDS if k in have}
            return CastHits(source=src.take(idx), **own, **pose)
        return CastHits(**{k: getattr(self, k)[idx] for k in self.FIELDS}, **pose)

    @classmethod
    def concat(cls, parts: list["CastHits"]) -> "CastHits":
        """The rows of ``parts`` one after the other."""
        pose = {k: None if any(getattr(p, k) is None for p in parts)
                else np.concatenate([getattr(p, k) for p in parts]) for k in cls.POSE}
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in cls.FIELDS}, **pose)

    @classmethod
    def scatter(cls, parts: list["CastHits"], rows: list, n: int) -> "CastHits":
        """The N = ``n`` rays of ``parts``, part i going to rows ``rows[i]`` (int arrays
        that together cover 0..n-1 once); nothing is copied until a field is read or
        rows are taken."""
        hits = cls.__new__(cls)
        hits._source = None
        hits._scatter = _Scatter(parts, rows, n)
        return hits

    @property
    def cos_incidence(self) -> np.ndarray:
        """(N,) float64 in [0, 1]: |cos| of the angle between the final ray segment and
        the surface normal (:func:`~..raycast.trace.facing_normals`)."""
        return facing_normals(self.normal, self.last_dir)[1]

    def __getattr__(self, name):  # only for attributes not set: a view's, a lazy or a lazily scattered field
        if name not in CastHits.FIELDS and name not in CastHits.POSE:
            raise AttributeError(name)
        if self.__dict__.get("_base") is not None:
            value = self._from_base(name)
            setattr(self, name, value)
            return value
        src = self.__dict__.get("_source")
        if src is not None and name in CastHits.LAZY:
            for k, v in src.fields(slice(None)).items():
                if k not in self.__dict__:
                    setattr(self, k, v)
            return self.__dict__[name]
        sc = self.__dict__.get("_scatter")
        if sc is None:
            raise AttributeError(name)
        value = sc.field(name)
        setattr(self, name, value)
        sc.release(name)
        return value


def _rows_of(v: np.ndarray, sel) -> np.ndarray:
    """``v[sel]``: with an integer index array through ``take`` (the same rows; about 4x
    faster for an (N, 3) array than fancy indexing)."""
    if isinstance(sel, np.ndarray) and sel.dtype.kind in "iu" and sel.ndim == 1:
        return v.take(sel, axis=0)
    return v[sel]


class _Labels:
    """The labels and colour of hits, made on demand (:attr:`CastHits.LAZY`): from
    ``instance`` (R,) int32 (-1: a miss) and material rows ``material`` (R,) int32 of a
    step's snapshot ``snap`` (its :meth:`~.extract.SceneSnapshot.labels`), the class per
    object id ``semantic`` and the material colours ``color`` (M, 3) uint8."""

    def __init__(self, snap, semantic: np.ndarray, color: np.ndarray, instance: np.ndarray,
                 material: np.ndarray) -> None:
        self.snap, self.semantic, self.color = snap, semantic, color
        self.instance, self.material = instance, material
        self._made: dict = {}  # id(rows) -> (rows, fields): the fields are read one by one

    def take(self, idx) -> "_Labels":
        """The rows ``idx`` of the source."""
        return _Labels(self.snap, self.semantic, self.color, self.instance[idx], self.material[idx])

    def fields(self, sel) -> dict:
        """The :attr:`CastHits.LAZY` fields of rows ``sel`` (slice, index array or mask)."""
        made = self._made.get(id(sel))
        if made is not None and made[0] is sel:
            return made[1]
        object_id, instancer_id, instance_id, semantic = self.snap.labels(self.instance[sel], self.semantic)
        out = {"color": _rows_of(self.color, _rows_of(self.material, sel)), "object_id": object_id,
               "instancer_id": instancer_id,
               "instance_id": instance_id, "semantic": semantic}
        if len(self._made) >= 256:
            self._made.clear()
        self._made[id(sel)] = (sel, out)  # holds sel: its id is not reused meanwhile
        return out

    def field(self, name: str, sel) -> np.ndarray:
        """One :attr:`CastHits.LAZY` field of rows ``sel``."""
        return self.fields(sel)[name]


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


class _Scatter:
    """Where the rays of ``parts`` go in ray order (part i holds rows ``rows[i]``): the
    plan behind :meth:`CastHits.scatter`. A sweep's steps hold runs of consecutive rays
    (they interleave only where the firing offsets overlap a step's end), which are
    moved as slices."""

    def __init__(self, parts: list[CastHits], rows: list, n: int) -> None:
        self.parts = [_alias(p) for p in parts]  # its own: :meth:`release` drops fields from them
        self.rows, self.n = rows, n
        self.runs = [_runs(np.asarray(r)) for r in rows]

    def field(self, name: str) -> np.ndarray:
        """Field ``name`` scattered to ray order."""
        out = None
        for p, r, runs in zip(self.parts, self.rows, self.runs):
            v = getattr(p, name)
            if v is None:  # a POSE field not kept
                return None
            if out is None:
                out = np.empty((self.n, *v.shape[1:]), v.dtype)
            if runs is None:
                out[r] = v
            else:
                for a, b, d in runs:
                    out[d:d + b - a] = v[a:b]
        if out is None:  # no part
            v = self.parts[0]._rows(name, slice(0, 0))
            out = np.empty((self.n, *v.shape[1:]), v.dtype)
        return out

    def release(self, name: str) -> None:
        """Drop field ``name`` from the parts: the hits hold it in ray order now (and
        views read it from there), so the parts' rows of it are not read again."""
        for p in self.parts:
            p.__dict__.pop(name, None)

    @staticmethod
    def _put(out, m: int, dst, v: np.ndarray) -> np.ndarray:
        """``out[dst] = v``, ``out`` made (m rows, like ``v``) on the first call."""
        if out is None:
            out = np.empty((m, *v.shape[1:]), v.dtype)
        out[dst] = v
        return out

    def locate(self, idx: np.ndarray) -> list:
        """Per part, (places in ``idx``, rows of the part) of the rays ``idx`` (K,) int:
        the plan of :meth:`gather`."""
        where = self.__dict__.get("_where")
        if where is None:  # part and row within it of every ray, made once
            part = np.empty(self.n, np.int32)
            local = np.empty(self.n, np.int64)
            for i, (r, runs) in enumerate(zip(self.rows, self.runs)):
                if runs is None:
                    part[r] = i
                    local[r] = np.arange(len(r))
                else:
                    for a, b, d in runs:
                        part[d:d + b - a] = i
                        local[d:d + b - a] = np.arange(a, b)
            where = self._where = (part, local)
        part, local = where
        pi, li = part[idx], local[idx]
        plan = []
        for i in range(len(self.parts)):
            at = np.flatnonzero(pi == i)
            # a sweep's rays of one part are mostly consecutive: slices (views, block copies)
            plan.append((_as_slice(at), _as_slice(li.take(at))))
        return plan

    def gather(self, name: str, plan: list, k: int) -> np.ndarray:
        """Field ``name`` of the K rays planned by :meth:`locate`."""
        out = None
        for p, (at, src) in zip(self.parts, plan):
            v = p._rows(name, src)
            if v is None:  # a POSE field not kept
                return None
            out = self._put(out, k, at, v)
        if out is None:
            v = self.parts[0]._rows(name, slice(0, 0))
            out = np.empty((k, *v.shape[1:]), v.dtype)
        return out


def _alias(hits: CastHits) -> CastHits:
    """Another :class:`CastHits` holding the same arrays (and labels' source) as ``hits``."""
    out = CastHits.__new__(CastHits)
    out.__dict__.update(hits.__dict__)
    return out


def _as_slice(idx):
    """``idx`` (int array, ascending) as the slice it equals when its values are
    consecutive, else ``idx``."""
    if isinstance(idx, slice) or idx.size == 0:
        return idx
    a, b = int(idx[0]), int(idx[-1]) + 1
    if idx.ndim == 1 and b - a == idx.size and bool((np.diff(idx) == 1).all()):
        return slice(a, b)
    return idx


def _rotate_bundled(pose, sb: np.ndarray, v: np.ndarray, b: int) -> np.ndarray:
    """``pose.rotate(np.repeat(sb, b), v)`` (:meth:`.timeline.PoseSegment.rotate`) with
    the cosine and sine of the angle taken once per group of ``b`` rows (fractions ``sb``
    (N / b,), vectors ``v`` (N, 3) float64): the same formula, operation for operation
    (:func:`.timeline._rodrigues`), so the same bytes; tests/test_bundle.py checks it."""
    if pose.theta == 0:
        return pose.rotate(None, v)
    angle = pose.theta * sb
    c, s = np.repeat(np.cos(angle), b), np.repeat(np.sin(angle), b)
    return rodrigues_cs(pose.axis, c, s, v) @ pose.R0.T


@dataclass(frozen=True)
class CastOptions:
    """How one :meth:`TimelineContext.cast` traces its rays: made once per cast from its
    keywords (:meth:`of`) and handed to the cast of every time step explicitly.

    Attributes:
        split: follow glass and alpha where the scene's materials have them
            (:func:`~blensor_addon.raycast.trace.trace` with ``optics``).
        rng: the generator of the alpha draws (numpy ``Generator``), or None.
        wavelength: nm, the laser wavelength the reflectivity is read at; None: the
            materials' plain ``reflectivity``.
        bundle: sub-rays per beam (>= 1): consecutive rows of one beam share its time.
        acceptance: rad, the half-angle within which glass reflects back into the sensor.
        lobes: each hit's path weight carries its material's lobe at the hit's incidence
            (:meth:`~blensor_addon.core.materials.MaterialTable.lobed`: glossy coats,
            retroreflectors), so its energy is that of the equivalent reflectance; False:
            Lambertian.
    """

    split: bool = False
    rng: np.random.Generator | None = None
    wavelength: float | None = None
    bundle: int = 1
    acceptance: float = SPECULAR_ACCEPTANCE
    lobes: bool = False

    @classmethod
    def of(cls, split: bool = False, rng: np.random.Generator | None = None,
           wavelength: float | None = None, bundle: int = 1,
           acceptance: float | None = None, lobes: bool = False) -> CastOptions:
        """The options of :meth:`TimelineContext.cast`'s keywords: ``split`` as a bool,
        ``bundle`` an int of at least 1, ``acceptance`` None for
        :data:`~blensor_addon.raycast.trace.SPECULAR_ACCEPTANCE`."""
        return cls(split=bool(split), rng=rng, wavelength=wavelength, bundle=max(1, int(bundle)),
                   acceptance=SPECULAR_ACCEPTANCE if acceptance is None else float(acceptance),
                   lobes=bool(lobes))


#: m per m of range (at least 1 m): a shadow ray starts this far off its surface, along the
#: normal on the sun's side, so the surface does not shadow itself: 1e-4 x max(1, r) is
#: about 1000 x the float32 rounding of a point at range r (the hits' ranges and directions
#: are float32: 6e-8 relative), 0.1 mm within 1 m, 1 cm at 100 m
SHADOW_OFFSET = 1e-4
#: m: how far a shadow ray is followed toward the sun (the sun is at infinity; a finite
#: bound, since the native backend counts a ray of infinite tmax as a miss)
SHADOW_RANGE = 1e6


class TimelineContext:
    """:class:`~blensor_addon.core.sensors.protocols.ScanContext` for a packet over
    ``[t_start, t_end)`` s of ``timeline``.

    Args:
        backend: the ray caster (:mod:`blensor_addon.raycast`).
        timeline: the scene over time.
        t_start, t_end: float s, the packet's interval.
        frame_of_reference: ``"sensor"`` or ``"world"``.
        camera: :class:`~blensor_addon.core.sensors.raypattern.CameraFrame` or None.
        semantic: (objects + 1,) uint16 class id per object id.
        held: a frozen packet's one step (:meth:`Timeline.held`), which casts every ray
            whatever its time; None: each ray in the step holding its time.

    ``sensor_to_world`` is the pose at ``t_start``; ``sensor_to_world_end`` the pose at
    ``t_end`` in continuous time (None for a held step or a frozen timeline). ``lights``:
    the scene's ambient light at ``t_start`` (:class:`~blensor_addon.core.sensors.ambient.Lights`,
    read with that step's snapshot), which the radiometric receiver reads, with the shadow
    rays of :meth:`sun_visible`.
    """

    def __init__(self, backend, timeline: Timeline, t_start: float, t_end: float, frame_of_reference: str,
                 camera, semantic: np.ndarray, held: Step | None = None) -> None:
        self.backend = backend
        self.timeline = timeline
        self.frame_of_reference = frame_of_reference
        self.camera = camera
        self.semantic = semantic
        self.t_start = float(t_start)
        self.held = held
        if held is not None:
            self.objects = held.snap.objects
            self.sensor_to_world = held.snap.sensor_to_world
            self.sensor_to_world_end = None  # the scene is frozen: one pose
        else:
            self.objects = timeline.step_at(t_start).snap.objects
            self.sensor_to_world = timeline.pose_at(t_start)
            self.sensor_to_world_end = timeline.pose_at(t_end) if timeline.continuous else None
        self.lights = (held if held is not None else timeline.step_at(t_start)).snap.lights
        self._current = None  # the step whose geometry the backend holds
        self._segments: list = []  # PoseSegment of every step cast so far
        # the Step of each segment (its geometry, for the shadow rays of sun_visible): kept
        # only under a sun of positive strength; otherwise only the small PoseSegments are
        self._sunlit = bool((np.asarray(self.lights.sun_irradiance) > 0.0).any())
        self._steps: list = []
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
            if self._sunlit:
                self._steps.append(step)
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

    def cast(self, origins, directions, max_range, max_bounces, times=None, split=False, rng=None,
             wavelength=None, bundle=1, acceptance=None, lobes=False) -> CastHits:
        """:meth:`ScanContext.cast <blensor_addon.core.sensors.protocols.ScanContext.cast>`
        with ``times`` (N,) float64 s: the firing time of each ray (default: the packet's
        start); each ray is cast in the step holding its time (the held step: all), from
        the sensor pose then. ``split``, ``rng``, ``wavelength``: see the protocol: with
        ``split`` and a scene whose materials have glass or alpha
        (:meth:`~blensor_addon.core.materials.MaterialTable.has_optics`), the trace follows
        them (:func:`~blensor_addon.raycast.trace.trace` with ``optics``, the alpha draws
        from ``rng``, step after step) and the extra path ends come after the N rays'
        rows, in ray order. Without glass or alpha the hits are those of ``split=False``,
        byte for byte. ``acceptance``: rad, the half-angle within which glass reflects back
        into the sensor (None: :data:`~blensor_addon.raycast.trace.SPECULAR_ACCEPTANCE`).
        ``lobes``: see :class:`CastOptions`."""
        opts = CastOptions.of(split, rng, wavelength, bundle, acceptance, lobes)
        d_s = np.asarray(directions, dtype=np.float64).reshape(-1, 3)
        n = d_s.shape[0]
        t = np.full(n, self.t_start) if times is None else np.asarray(times, dtype=np.float64)
        if self.held is not None:
            return self._cast_step(self.held, slice(None), origins, d_s, t, max_range, max_bounces, opts)
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
                parts.append(self._cast_step(steps[int(k)], idx, origins, d_s, t, max_range, max_bounces,
                                              opts))
                order.append(idx)
        if not parts:
            return self._cast_step(tl.step_at(self.t_start), np.zeros(0, np.int64), origins, d_s, t,
                                   max_range, max_bounces, opts)
        if len(parts) == 1 and np.array_equal(order[0], np.arange(n)):
            return parts[0]
        sizes = [len(r) for r in order]
        if all(p.range.shape[0] == m for p, m in zip(parts, sizes)):
            return CastHits.scatter(parts, order, n)
        # split paths: the rays' rows scattered as always, the extra rows after them in ray
        # order (a stable sort of the parts' extra rows one after the other); each part's
        # rays and extra rows are two parts of the scatter (views, nothing copied)
        extra_ray = np.concatenate([p.ray[m:] for p, m in zip(parts, sizes)])
        place = np.empty(extra_ray.shape[0], np.int64)
        place[np.argsort(extra_ray, kind="stable")] = n + np.arange(extra_ray.shape[0])
        views, rows, at = [], [], 0
        for p, m, r in zip(parts, sizes, order):
            e = p.range.shape[0] - m
            views += [p.take(slice(0, m)), p.take(slice(m, None))]
            rows += [r, place[at:at + e]]
            at += e
        return CastHits.scatter(views, rows, n + extra_ray.shape[0])

    def _cast_step(self, step: Step, idx, origins, d_s, t, max_range, max_bounces,
                   opts: CastOptions) -> CastHits:
        """The rays ``idx`` cast in ``step`` with the cast's options ``opts``."""
        seg = self._use(step)
        snap = step.snap
        pose = step.pose
        kept = None  # the rays' world pose (CastHits.POSE) for the shadow rays: one row per ray, under a sun
        if pose.still:  # a held frame: its geometry is relative to the sensor, at the origin
            dirs = pose.rotate(None, d_s[idx])
            orig = (np.zeros(dirs.shape, np.float32) if origins is None
                    else pose.rotate(None, np.asarray(origins, dtype=np.float64).reshape(-1, 3)[idx]))
            s = None
        else:
            rows = _as_slice(idx)  # a step's rays are mostly one run: views, not copies
            tt = t[rows]
            b = opts.bundle
            if b > 1 and tt.shape[0] % b == 0 and (tt.reshape(-1, b) == tt[::b, None]).all():
                # the sub-rays of a beam share its time: the pose once per beam (the same
                # values, element by element, as per row)
                sb = pose.fraction(tt[::b])
                s = np.repeat(sb, b)
                dirs = _rotate_bundled(pose, sb, _rows_of(d_s, rows), b)
                orig = pose.position(sb) - snap.origin
                per_beam = origins is None
                if origins is not None:
                    ob = np.asarray(origins, dtype=np.float64).reshape(-1, 3)
                    ob = np.ascontiguousarray(_rows_of(ob, rows))
                    bits = ob.view(np.int64)
                    # one origin per beam (bit for bit): rotated once per beam, the same
                    # values as row by row (tests/test_bundle.py checks it)
                    per_beam = bool((bits.reshape(-1, b, 3) == bits[::b, None, :]).all())
                    if per_beam:
                        orig = orig + pose.rotate(sb, ob[::b])
                    else:
                        orig = np.repeat(orig, b, axis=0) + pose.rotate(s, ob)
                if per_beam:  # rounded to float32 (as trace does) before it is repeated
                    orig = np.repeat(orig.astype(np.float32), b, axis=0)
            else:
                s = pose.fraction(tt)
                turn = pose.turn(s)  # each ray's cosine and sine once, for directions and origins
                dirs = pose.rotate(s, _rows_of(d_s, idx), turn=turn)
                position = pose.position(s)
                orig = position - snap.origin
                offset = None
                if origins is not None:
                    ob = np.asarray(origins, dtype=np.float64).reshape(-1, 3)
                    offset = pose.rotate(s, _rows_of(ob, idx), turn=turn)
                    orig = orig + offset
                if self._sunlit and b == 1:
                    kept = (position, dirs, offset)
        mats = snap.materials
        mirror = mats.is_mirror if mats.mirror.any() else None
        optics = opts.split and mats.has_optics()
        tr = trace(self.backend, orig, dirs, max_range, mirror, max_bounces,
                   time=s.astype(np.float32) if step.moving else None,
                   optics=mats.optics if optics else None,
                   rng=opts.rng if optics else None, bundle=opts.bundle,
                   material=mats.lookup if optics else None, acceptance=opts.acceptance)
        del dirs, orig
        mat = tr.material if tr.material is not None else mats.lookup(tr.instance, tr.primitive)
        time = t[idx]
        if time.shape[0] != tr.ray.shape[0]:  # extra rows of split paths: their ray's time
            time = time[tr.ray]
            if kept is not None:  # and their ray's pose
                kept = tuple(None if v is None else _rows_of(v, tr.ray) for v in kept)
        pose_rows = {} if kept is None else dict(zip(CastHits.POSE, kept))
        refl = mats.reflectivity_at(mat, tr.instance, tr.primitive, tr.bary, opts.wavelength)
        if optics:  # glass: the diffuse share of the surface's reflectivity plus its specular return
            refl = np.multiply(np.asarray(refl, dtype=np.float32), tr.diffuse)  # float32, as before
            refl += tr.specular
        weight = tr.weight
        if opts.lobes and mats.lobe is not None and tr.last_dir is not None:
            refl, weight = mats.lobed(refl, weight, mat, tr.normal, tr.last_dir)
        # labels and colour when read, of the rows read (most sub-rays never become returns)
        return CastHits(source=_Labels(snap, self.semantic, mats.color, tr.instance, mat),
                        range=tr.range, hit=tr.hit, reflectivity=refl, normal=tr.normal,
                        last_dir=tr.last_dir, time=time, segment=np.full(time.shape[0], seg, np.int32),
                        ray=tr.ray if isinstance(idx, slice) else np.asarray(idx)[tr.ray], weight=weight,
                        bounces=tr.bounces, **pose_rows)

    def sun_visible(self, hits, origins, directions, sun_dirs, need) -> np.ndarray:
        """:meth:`ScanContext.sun_visible <blensor_addon.core.sensors.protocols.ScanContext>`:
        (N, K) bool, sun k seen from the surface point of row i of ``hits`` (N rows of
        :meth:`cast`), by a shadow ray for each pair of ``need`` (N, K) bool (True
        elsewhere). ``origins`` (N, 3) or None and ``directions`` (N, 3) float64, sensor
        frame: the rows' cast rays; ``sun_dirs`` (K, 3) float64 world, toward each sun.

        The point is the cast ray at the row's range, ``o(t) + d(t) r``, with the sensor's
        pose at the row's firing time (what the output reports as the clean point); a row
        whose path was reflected or passed glass (``bounces`` > 0: a mirror, glass of either
        kind, thin panes too; the range is the accumulated path, the point may be a virtual
        one) is not tested (True). The shadow ray starts :data:`SHADOW_OFFSET` x max(1, r)
        off the surface along its normal on the sun's side (which is the sensor's: the
        pair faces the sun) and is cast through the backend (native or BVHTree, the same
        answers) in the time step that cast the row (``segment``), at the row's time
        within it (moving objects where they were then), up to :data:`SHADOW_RANGE`; any
        surface it meets hides the sun (glass and alpha too). A row of a beam footprint
        (several sub-rays) is tested at the beam's axis at the echo's mixed range, which
        may lie off a sloped surface by more than the offset (docs/physics.md, "Ambient
        light"). The steps' geometry is kept for this only under a sun of positive
        strength; the shadow rays of the step the backend holds are cast first, and a step
        other than that one is given to it again (a deforming mesh's BVH is built again:
        docs/performance.md). Rows cast one per beam carry their cast ray's world pose
        (:attr:`CastHits.POSE`, kept under a sun), which gives the point without turning the
        rays again (the same values); a footprint's rows take the pose at their time."""
        need = np.asarray(need, dtype=bool)
        visible = np.ones(need.shape, bool)
        if hits.last_dir is None or len(self._steps) != len(self._segments):  # (no step kept: untested)
            return visible
        rows = np.flatnonzero(need.any(axis=1) & (np.asarray(hits.bounces) == 0))
        if rows.size == 0:
            return visible
        sub = hits.take(rows)
        m = rows.size
        segment, time = np.asarray(sub.segment), np.asarray(sub.time)
        r = np.asarray(sub.range, dtype=np.float64)
        d = sub.ray_direction
        kept = d is not None and (origins is None) == (sub.ray_offset is None)
        if kept:  # the cast's own values (CastHits.POSE): what position() and rotate() give
            pos, ov = sub.ray_position, sub.ray_offset
            d = d / np.linalg.norm(d, axis=1, keepdims=True)
        else:  # the sensor's pose at each row's time, one fraction and turn per step (a footprint's
            # rows: the beam's axis)
            v = np.asarray(directions, dtype=np.float64)[rows]
            ov = None if origins is None else np.asarray(origins, dtype=np.float64)[rows]
            pos, d = np.empty((m, 3)), np.empty((m, 3))
            for g, at in groups(segment):
                at = _as_slice(at)
                sg = self._segments[int(g)]
                s = sg.fraction(time[at])
                turn = sg.turn(s)
                pos[at] = sg.position(s)
                d[at] = sg.rotate(s, v[at], turn=turn)
                if ov is not None:
                    ov[at] = sg.rotate(s, ov[at], turn=turn)
            d /= np.linalg.norm(d, axis=1, keepdims=True)
        # p = position + (d / |d|) r (+ the turned origin), in place: the same values
        d *= r[:, None]
        p = pos + d
        if ov is not None:
            p += ov
        # the normal toward the sensor (the sun's side of the pairs tested) times the offset,
        # in place (the sign flip of facing_normals is exact: the same values)
        normal = facing_normals(sub.normal, sub.last_dir)[0]
        normal *= (SHADOW_OFFSET * np.maximum(1.0, r))[:, None]
        p += normal
        del d, normal, ov
        sun = np.asarray(sun_dirs, dtype=np.float32)
        i, k = np.nonzero(need[rows])  # every (row, sun) pair to test, row-major
        segment, time = segment[i], time[i]
        # the step the backend holds first (the packet's last cast): its geometry is not given again
        held = None if self._current is None else self._segment_of.get(self._current.t0)
        for g, at in sorted(((int(g), at) for g, at in groups(segment)), key=lambda st: st[0] != held):
            step = self._steps[g]
            self._use(step)
            o = (p[i[at]] - step.snap.origin).astype(np.float32)
            frac = step.pose.fraction(time[at]).astype(np.float32) if step.moving else None
            h = self.backend.intersect(o, sun[k[at]], np.float32(SHADOW_RANGE), time=frac)
            visible[rows[i[at]], k[at]] = np.asarray(h.instance) < 0
        return visible

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
        ``world`` when given; a held step's points are there already)."""
        if frame != "world" and self.held is not None:
            return np.asarray(xyz, dtype=np.float64)
        w = self.rotate(hits, xyz) + self.position(hits) if world is None else world
        if frame == "world":
            return w
        P0 = self.sensor_to_world
        return (w - P0[:3, 3]) @ P0[:3, :3]


__all__ = ["CastHits", "CastOptions", "TimelineContext"]
