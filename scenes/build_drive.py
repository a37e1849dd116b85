"""Build ``scenes/drive.blend``: a 64 s town drive for LiDAR odometry, reproducibly.

The streets (world +Z up, metres): a loop (rounded rectangle, centre line 180 x 120 m,
corner radius 18 m) crossed by a north-south through street (x = 0) and two east-west
spurs (y = 0) that end at it in T-junctions. Each road is 12 m of asphalt (two 3.5 m
lanes, a 2.5 m parking strip on each side) with kerbs and 3.5 m pavements. The ground is
one 1 m grid over 300 x 240 m: gentle slopes and waves (grades up to ~2 %, about 3 m of
relief) plus a seeded random roughness of 2.5 cm (sigma); pavements and lawns stand
12 cm above the road. Along both sides of every street: buildings of 4-30 m height with
setbacks of 0.5-7 m and gaps (some stepped), a second row of blocks (6-32 m) behind,
fences and small parks in the wide gaps, street lights, trees (a collection instanced by
empties, scaled), bollards, benches, bins, signs and parked cars.

The ego car drives the loop counter-clockwise on its right-hand lane (580 m a lap; in
64 s it drives 590 m, once round and a little further), from 3 m/s up to 12 m/s on the
straights, braking to about 7 m/s for the corners (speed planned with acceleration and
deceleration limits, then smoothed in time), pitching with the road's grade and its own
acceleration and rolling with the crossfall and in turns (pitch within 1.2 deg, roll
within 1.7 deg). Five other cars move: one ahead of the ego car on its lane, two round
the loop the other way, one along the through street and one that comes down the east
spur and stops at its junction. Every moving object has a Bezier key on every scene
frame from -24 to 1560 (the flat handles of the first and last keys lie outside the
scene's frames), so ``scene.frame_set(frame, subframe=...)`` gives smooth motion.

The sensor is the camera ``Lidar`` (Velodyne HDL-32E preset: 32 lasers, 10 Hz,
0.16 deg, 100 m; 72,000 rays per revolution), parented to the ego car 1.9 m above the
ground on a short mast over its low roof, camera convention (local +Y = up, looking
down -Z = the driving direction). The lowest lasers see the car's bonnet and tailgate
within 2.5 m of the sensor (odometry masks them with a 3 m minimum range). Scene:
24 fps, frames 0-1536 (t = frame / 24 s: 0-64 s). Materials come from
``blensor_addon/core/tables/reflectance.json`` (as ``build_crossing.py``), every object carries a
``blensor_label``. Every random draw comes from ``numpy.random.default_rng(SEED)``:
the same script gives the same scene (about 171,000 triangles).

Usage: ``python scenes/build_drive.py [OUT.blend]`` (pip ``bpy``), default
``scenes/drive.blend`` (not committed: ``benchmarks/odometry.py`` builds it when
missing).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import bpy
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_crossing import empty_file_with_addon, make_materials  # noqa: E402  (shared with the demo)

SEED = 20261
FPS = 24
DURATION = 64.0                      # s of scene (frames 0..1536)
FRAME_END = int(round(DURATION * FPS))
KEY_END = FRAME_END + FPS            # keys one second past the end: subframes there are defined
SENSOR_HEIGHT = 1.9                  # m above the ground under the car

ROAD_HALF = 6.0                      # asphalt half width
LANE = 1.75                          # lane centre offset from the road's centre line
PARK = 4.75                          # parking strip centre offset
WALK = 9.5                           # outer edge of the pavement
KERB_UP = 0.12                       # pavement and lawn above the road
LOOP_A, LOOP_B, LOOP_R = 90.0, 60.0, 18.0
X_EXT, Y_EXT = 150.0, 120.0          # ground extent (half sizes)

# --------------------------------------------------------------------------- ground


def height(x, y):
    """Smooth ground height (m) at world (x, y): slopes and long waves, grades <= ~2 %."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return (0.006 * x + 0.004 * y
            + 0.22 * np.sin(2 * np.pi * x / 170.0 + 0.4) * np.cos(2 * np.pi * y / 150.0 - 0.3)
            + 0.05 * np.sin(2 * np.pi * (x + 0.7 * y) / 60.0))


def height_grad(x, y, e=0.05, h=None):
    """Gradient (dh/dx, dh/dy) of the ground height ``h`` (default :func:`height`) at (x, y),
    central differences over ``e`` m."""
    h = height if h is None else h
    return ((h(x + e, y) - h(x - e, y)) / (2 * e), (h(x, y + e) - h(x, y - e)) / (2 * e))


def rounded_rect(a, b, r, ds=0.1):
    """Dense counter-clockwise points (M, 2) of a rounded rectangle (half sizes a, b,
    corner radius r), starting at the left end of the bottom side, not closed."""
    pts = []

    def line(p, q):
        n = max(1, int(math.ceil(math.dist(p, q) / ds)))
        for i in range(n):
            pts.append((p[0] + (q[0] - p[0]) * i / n, p[1] + (q[1] - p[1]) * i / n))

    def arc(cx, cy, a0):
        n = max(1, int(math.ceil(r * math.pi / 2 / ds)))
        for i in range(n):
            t = a0 + math.pi / 2 * i / n
            pts.append((cx + r * math.cos(t), cy + r * math.sin(t)))

    line((-a + r, -b), (a - r, -b))
    arc(a - r, -b + r, -math.pi / 2)
    line((a, -b + r), (a, b - r))
    arc(a - r, b - r, 0.0)
    line((a - r, b), (-a + r, b))
    arc(-a + r, b - r, math.pi / 2)
    line((-a, b - r), (-a, -b + r))
    arc(-a + r, -b + r, math.pi)
    return np.array(pts)


def road_polylines():
    """Centre lines of the network: (points (M, 2), closed)."""
    return [(rounded_rect(LOOP_A, LOOP_B, LOOP_R, ds=2.0), True),
            (np.array([(0.0, -Y_EXT - 10), (0.0, Y_EXT + 10)]), False),
            (np.array([(LOOP_A, 0.0), (X_EXT + 10, 0.0)]), False),
            (np.array([(-X_EXT - 10, 0.0), (-LOOP_A, 0.0)]), False)]


def _segments():
    segs = []
    for pts, closed in road_polylines():
        q = np.vstack([pts, pts[:1]]) if closed else pts
        segs.append(np.hstack([q[:-1], q[1:]]))
    return np.vstack(segs)


SEGMENTS = _segments()


def road_distance(xy, segments=None):
    """Distance (m) of points (N, 2) to the nearest road centre line: the segments
    (S, 4) ``x0 y0 x1 y1`` given, by default this town's (:data:`SEGMENTS`)."""
    xy = np.atleast_2d(np.asarray(xy, dtype=np.float64))
    out = np.full(len(xy), np.inf)
    segments = SEGMENTS if segments is None else segments
    a, b = segments[:, :2], segments[:, 2:]
    ab = b - a
    L2 = np.maximum((ab ** 2).sum(1), 1e-12)
    for i in range(0, len(xy), 4096):
        p = xy[i:i + 4096, None, :]
        t = np.clip(((p - a) * ab).sum(-1) / L2, 0.0, 1.0)
        d = np.linalg.norm(p - (a + t[..., None] * ab), axis=-1)
        out[i:i + 4096] = d.min(1)
    return out


def ground_z(x, y):
    """Height of the surface an object stands on: road, or pavement/lawn (raised)."""
    d = road_distance(np.column_stack([np.atleast_1d(x), np.atleast_1d(y)]))
    z = height(x, y) + np.where(d > ROAD_HALF + 0.3, KERB_UP, 0.0)
    return float(z[0]) if np.ndim(x) == 0 else z


# --------------------------------------------------------------------------- mesh helpers


class Builder:
    """Collects world-space boxes, cylinders and cones into one mesh object."""

    def __init__(self):
        self.verts, self.faces = [], []

    def box(self, cx, cy, z0, lx, ly, lz, yaw=0.0):
        c, s = math.cos(yaw), math.sin(yaw)
        base = len(self.verts)
        for i in range(8):
            dx = lx / 2 if i & 4 else -lx / 2
            dy = ly / 2 if i & 2 else -ly / 2
            self.verts.append((cx + c * dx - s * dy, cy + s * dx + c * dy, z0 + (lz if i & 1 else 0.0)))
        for q in ((0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)):
            self.faces.append(tuple(base + k for k in q))

    def cylinder(self, cx, cy, z0, r, h, seg=10, r_top=None):
        r_top = r if r_top is None else r_top
        base = len(self.verts)
        for i in range(seg):
            a = 2 * math.pi * i / seg
            self.verts += [(cx + r * math.cos(a), cy + r * math.sin(a), z0),
                           (cx + r_top * math.cos(a), cy + r_top * math.sin(a), z0 + h)]
        for i in range(seg):
            j = (i + 1) % seg
            self.faces.append((base + 2 * i, base + 2 * j, base + 2 * j + 1, base + 2 * i + 1))
        self.faces.append(tuple(base + 2 * i for i in reversed(range(seg))))
        if r_top > 0:
            self.faces.append(tuple(base + 2 * i + 1 for i in range(seg)))

    def sphere(self, cx, cy, cz, r, rings=7, seg=12):
        base = len(self.verts)
        self.verts.append((cx, cy, cz - r))
        for k in range(1, rings):
            th = math.pi * k / rings - math.pi / 2
            for i in range(seg):
                a = 2 * math.pi * i / seg
                self.verts.append((cx + r * math.cos(th) * math.cos(a), cy + r * math.cos(th) * math.sin(a),
                                   cz + r * math.sin(th)))
        self.verts.append((cx, cy, cz + r))
        top = len(self.verts) - 1
        for i in range(seg):
            self.faces.append((base, base + 1 + (i + 1) % seg, base + 1 + i))
        for k in range(rings - 2):
            for i in range(seg):
                a = base + 1 + k * seg + i
                b = base + 1 + k * seg + (i + 1) % seg
                self.faces.append((a, b, b + seg, a + seg))
        last = base + 1 + (rings - 2) * seg
        for i in range(seg):
            self.faces.append((last + i, last + (i + 1) % seg, top))

    def mesh(self, name, materials, starts=()):
        """A mesh of the faces added so far with material slots ``materials`` (one
        ``bpy.types.Material`` each): faces from ``starts[k - 1]`` (face index, the count of
        faces when that part began) take slot k, the faces before ``starts[0]`` slot 0."""
        mesh = bpy.data.meshes.new(name)
        mesh.from_pydata(self.verts, [], self.faces)
        for m in materials:
            mesh.materials.append(m)
        if starts:
            bounds = [0, *starts, len(self.faces)]
            mesh.polygons.foreach_set("material_index", [k for k in range(len(bounds) - 1)
                                                         for _ in range(bounds[k + 1] - bounds[k])])
        mesh.update()
        return mesh

    def build(self, name, material, label, collection=None):
        mesh = bpy.data.meshes.new(name)
        mesh.from_pydata(self.verts, [], self.faces)
        mesh.materials.append(material)
        mesh.update()
        obj = bpy.data.objects.new(name, mesh)
        (collection or bpy.context.scene.collection).objects.link(obj)
        obj["blensor_label"] = label
        return obj


def grid_mesh(name, verts, faces, material, label):
    """Mesh of the faces ``faces`` (F, 4) indexing ``verts`` (V, 3), unused vertices dropped."""
    used, inv = np.unique(faces.ravel(), return_inverse=True)
    f = inv.reshape(faces.shape)
    mesh = bpy.data.meshes.new(name)
    v = verts[used]
    mesh.vertices.add(len(v))
    mesh.vertices.foreach_set("co", v.astype(np.float32).ravel())
    mesh.loops.add(f.size)
    mesh.loops.foreach_set("vertex_index", f.astype(np.int32).ravel())
    mesh.polygons.add(len(f))
    mesh.polygons.foreach_set("loop_start", np.arange(0, f.size, 4, dtype=np.int32))
    mesh.polygons.foreach_set("loop_total", np.full(len(f), 4, np.int32))
    mesh.update()
    mesh.validate()
    mesh.materials.append(material)
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    obj["blensor_label"] = label
    return obj


# --------------------------------------------------------------------------- motion


class Path2D:
    """A dense centre line (M, 2) parametrised by arc length, laps unrolled if closed."""

    def __init__(self, pts, closed, laps=1):
        pts = np.asarray(pts, dtype=np.float64)
        if closed:
            pts = np.vstack([pts] * laps + [pts[:1]])
        seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
        keep = np.concatenate([[True], seg > 1e-9])
        self.pts = pts[keep]
        self.s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(self.pts, axis=0), axis=1))])
        d = np.gradient(self.pts, axis=0)
        self.heading = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
        k = np.gradient(self.heading) / np.maximum(np.gradient(self.s), 1e-9)
        w = np.ones(41) / 41  # ~4 m at 0.1 m spacing
        self.curvature = np.convolve(np.pad(k, 20, mode="edge"), w, mode="valid")
        self.length = float(self.s[-1])

    def at(self, s):
        s = np.clip(s, 0.0, self.length)
        return (np.interp(s, self.s, self.pts[:, 0]), np.interp(s, self.s, self.pts[:, 1]),
                np.interp(s, self.s, self.heading), np.interp(s, self.s, self.curvature))


def resample(pts, ds=0.1):
    """Points every ~ds m along a polyline."""
    pts = np.asarray(pts, dtype=np.float64)
    out = []
    for p, q in zip(pts[:-1], pts[1:]):
        n = max(1, int(math.ceil(np.linalg.norm(q - p) / ds)))
        out.append(p + (q - p) * (np.arange(n)[:, None] / n))
    out.append(pts[-1:])
    return np.vstack(out)


def plan_speed(path, v_max, v_start, v_end=None, s0=0.0, a_lat=2.5, a_acc=1.2, a_dec=1.8):
    """Speed (m/s) along ``path`` from arc length ``s0`` on: lateral-acceleration limit in
    curves, forward pass (acceleration limit, from ``v_start`` at ``s0``), backward pass
    (deceleration limit, to ``v_end`` at the end if given). Returns (s, v, t) with
    t = 0 at ``s0``."""
    i0 = min(int(np.searchsorted(path.s, s0)), len(path.s) - 2)
    s = path.s[i0:]
    v = np.minimum(v_max, np.sqrt(a_lat / np.maximum(np.abs(path.curvature[i0:]), 1e-6)))
    v[0] = min(v[0], v_start)
    ds = np.diff(s)
    for i in range(1, len(s)):
        v[i] = min(v[i], math.sqrt(v[i - 1] ** 2 + 2 * a_acc * ds[i - 1]))
    if v_end is not None:
        v[-1] = min(v[-1], v_end)
    for i in range(len(s) - 2, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2 * a_dec * ds[i]))
    vm = np.maximum(v, 0.2)
    t = np.concatenate([[0.0], np.cumsum(ds * 2.0 / (vm[:-1] + vm[1:]))])
    return s, v, t


def drive(path, v_max, v_start, times, t0=0.0, v_end=None, s0=0.0, sigma_t=0.5, **kw):
    """Arc length s(t) at ``times`` of a car that moves steadily at ``v_start`` (0: stands)
    until ``t0``, where it is at ``s0``, then follows the planned speed profile
    (:func:`plan_speed`); the speed is smoothed in time (Gaussian, ``sigma_t`` s), so
    the acceleration is continuous."""
    s, v, t = plan_speed(path, v_max, v_start, v_end, s0, **kw)
    times = np.asarray(times, dtype=np.float64)
    dt = 0.005
    tg = np.arange(min(times.min(), t0) - 4 * sigma_t - 1.0, times.max() + 4 * sigma_t + 1.0, dt)
    tq = tg - t0
    vg = np.where(tq < 0.0, v_start, np.interp(tq, t, v))
    n = int(4 * sigma_t / dt)
    k = np.exp(-0.5 * (np.arange(-n, n + 1) * dt / sigma_t) ** 2)
    vg = np.convolve(np.pad(vg, n, mode="edge"), k / k.sum(), mode="valid")
    sg = np.concatenate([[0.0], np.cumsum((vg[:-1] + vg[1:]) * dt / 2)])
    sg += s0 + v_start * tq[0]  # anchored in the steady motion before t0 (smoothing keeps distances)
    return np.interp(times, tg, np.clip(sg, 0.0, path.length))


def poses_along(path, s_t, times, k_pitch=math.radians(0.35), k_roll=math.radians(0.25), h=None):
    """Per-time location (N, 3) and Euler XYZ (roll, pitch, yaw) (N, 3) of a car whose
    origin is on the ground, +X forward, +Y left: yaw from the path, pitch and roll from
    the ground's gradient plus the body's response to longitudinal and lateral
    acceleration (nose dips when braking, body leans out of turns). ``h``: the ground height
    function (x, y) -> z (default :func:`height`)."""
    h = height if h is None else h
    x, y, yaw, kappa = path.at(s_t)
    dt = np.gradient(times)
    v = np.gradient(s_t) / dt
    a_long = np.gradient(v) / dt
    # smooth the numerical acceleration (one-second window)
    w = np.ones(FPS + 1) / (FPS + 1)
    a_long = np.convolve(np.pad(a_long, FPS // 2, mode="edge"), w, mode="valid")
    a_lat = v ** 2 * kappa
    hx, hy = height_grad(x, y, h=h)
    g_f = hx * np.cos(yaw) + hy * np.sin(yaw)
    g_l = -hx * np.sin(yaw) + hy * np.cos(yaw)
    pitch = -np.arctan(g_f) - k_pitch * a_long
    roll = np.arctan(g_l) + k_roll * a_lat
    loc = np.column_stack([x, y, h(x, y)])
    return loc, np.column_stack([roll, pitch, yaw]), v


def key_object(obj, frames, loc, rot):
    """A Bezier key on every frame for location and rotation."""
    obj.rotation_mode = "XYZ"
    for f, p, r in zip(frames, loc, rot):
        obj.location = tuple(float(c) for c in p)
        obj.rotation_euler = tuple(float(c) for c in r)
        obj.keyframe_insert("location", frame=int(f))
        obj.keyframe_insert("rotation_euler", frame=int(f))


# --------------------------------------------------------------------------- scene


def car_meshes(M):
    """Two shared car meshes (sedan, van): body in slot 0 (paint, set per object), tyres in 1."""
    out = {}
    for name, (body_h, cab) in {"Sedan": (0.8, ((-0.3, 2.4, 1.6, 0.5))), "Van": (1.3, ((-0.6, 2.9, 1.8, 0.6)))}.items():
        b = Builder()
        b.box(0.0, 0.0, 0.3, 4.5, 1.8, body_h)
        cx, cl, cw, ch = cab
        b.box(cx, 0.0, 0.3 + body_h, cl, cw, ch)
        nb = len(b.faces)
        for wx in (-1.5, 1.5):
            for wy in (-0.85, 0.85):
                b.box(wx, wy, 0.0, 0.66, 0.2, 0.66)
        out[name] = b.mesh(name + "Mesh", (M["car_paint_white"], M["tyre_rubber"]), (nb,))
    return out


def car_object(name, mesh, paint, M, label="car"):
    car = bpy.data.objects.new(name, mesh)
    car.material_slots[0].link = "OBJECT"
    car.material_slots[0].material = M[paint]
    car.material_slots[1].link = "OBJECT"
    car.material_slots[1].material = M["tyre_rubber"]
    bpy.context.scene.collection.objects.link(car)
    car["blensor_label"] = label
    return car


def straights():
    """Straight street pieces: (start (2,), end (2,)) of the centre line."""
    a, b, r = LOOP_A, LOOP_B, LOOP_R
    return [((-a + r, -b), (a - r, -b)), ((a - r, b), (-a + r, b)), ((a, -b + r), (a, b - r)),
            ((-a, b - r), (-a, -b + r)), ((0.0, -b), (0.0, b)), ((0.0, b), (0.0, Y_EXT)),
            ((0.0, -Y_EXT), (0.0, -b)), ((a, 0.0), (X_EXT, 0.0)), ((-X_EXT, 0.0), (-a, 0.0))]


def build(out: Path) -> dict:
    rng = np.random.default_rng(SEED)
    registered, scene = keyed_scene("Drive", FPS, FRAME_END)
    M = make_materials(registered)

    # ---- ground: one 1 m grid, split by surface into road / pavement / lawn
    xs = np.arange(-X_EXT, X_EXT + 0.5, 1.0)
    ys = np.arange(-Y_EXT, Y_EXT + 0.5, 1.0)
    gx, gy = np.meshgrid(xs, ys, indexing="xy")
    d_v = road_distance(np.column_stack([gx.ravel(), gy.ravel()]))
    z = height(gx.ravel(), gy.ravel()) + rng.normal(0.0, 0.025, gx.size).clip(-0.07, 0.07)
    z += np.where(d_v > ROAD_HALF + 0.3, KERB_UP, 0.0)
    verts = np.column_stack([gx.ravel(), gy.ravel(), z])
    nx = len(xs)
    i, j = np.meshgrid(np.arange(len(xs) - 1), np.arange(len(ys) - 1), indexing="xy")
    v0 = (j * nx + i).ravel()
    faces = np.column_stack([v0, v0 + 1, v0 + nx + 1, v0 + nx])
    centre = verts[faces, :2].mean(1)
    d_f = road_distance(centre)
    road_f, walk_f = d_f <= ROAD_HALF, (d_f > ROAD_HALF) & (d_f <= WALK)
    grid_mesh("Road", verts, faces[road_f], M["asphalt"], "road")
    grid_mesh("Pavement", verts, faces[walk_f], M["concrete"], "sidewalk")
    grid_mesh("Lawn", verts, faces[~(road_f | walk_f)], M["vegetation"], "terrain")

    # ---- kerbs along every road edge (2 m stones), none across junctions
    kerb = Builder()
    for pts, closed in road_polylines():
        dense = resample(np.vstack([pts, pts[:1]]) if closed else pts, 2.0)
        d = np.gradient(dense, axis=0)
        hd = np.arctan2(d[:, 1], d[:, 0])
        for side in (-1, 1):
            nrm = np.column_stack([-np.sin(hd), np.cos(hd)]) * side * (ROAD_HALF + 0.12)
            c = dense + nrm
            ok = (road_distance(c) > ROAD_HALF + 0.05) & (np.abs(c[:, 0]) < X_EXT - 1) & (np.abs(c[:, 1]) < Y_EXT - 1)
            for (cx, cy), yaw, good in zip(c, hd, ok):
                if good:
                    kerb.box(cx, cy, float(height(cx, cy)) - 0.1, 2.0, 0.24, 0.1 + KERB_UP + 0.04, yaw)
    kerb.build("Kerbs", M["kerb_granite"], "sidewalk")

    # ---- buildings, fences, parks along both sides of every straight
    buildings, roofs, fences = Builder(), Builder(), Builder()
    footprints = []  # (xmin, ymin, xmax, ymax)
    park_spots = []
    n_build = 0
    for (p, q) in straights():
        p, q = np.array(p), np.array(q)
        L = float(np.linalg.norm(q - p))
        u = (q - p) / L
        nrm = np.array([-u[1], u[0]])
        for side in (-1, 1):
            s = float(rng.uniform(0, 6))
            while s < L:
                width = float(rng.uniform(8, 24))
                setback = float(rng.uniform(0.5, 7.0))
                depth = float(rng.uniform(8, 18))
                r = rng.random()
                h = float(rng.uniform(4, 8) if r < 0.3 else rng.uniform(8, 16) if r < 0.8 else rng.uniform(16, 30))
                front = WALK + setback
                c = p + u * (s + width / 2) + nrm * side * (front + depth / 2)
                ext = np.abs(u) * width / 2 + np.abs(nrm) * depth / 2
                box = (c[0] - ext[0], c[1] - ext[1], c[0] + ext[0], c[1] + ext[1])
                gx_, gy_ = np.meshgrid(np.linspace(box[0], box[2], 6), np.linspace(box[1], box[3], 6))
                inside = (abs(box[0]) < X_EXT - 2 and abs(box[2]) < X_EXT - 2 and abs(box[1]) < Y_EXT - 2
                          and abs(box[3]) < Y_EXT - 2)
                clear = inside and road_distance(np.column_stack([gx_.ravel(), gy_.ravel()])).min() > WALK + 0.4
                clear = clear and not any(box[0] < f[2] + 1.0 and f[0] < box[2] + 1.0 and box[1] < f[3] + 1.0
                                          and f[1] < box[3] + 1.0 for f in footprints)
                if clear:
                    z0 = float(height(gx_, gy_).min()) - 0.5
                    zt = float(height(gx_, gy_).max()) + KERB_UP + h
                    buildings.box(c[0], c[1], z0, 2 * ext[0], 2 * ext[1], zt - z0)
                    if rng.random() < 0.3 and h > 7:  # a stepped top: a smaller block further back
                        sx, sy = ext * rng.uniform(0.4, 0.7)
                        cc = c + nrm * side * (depth / 2 - max(sx * abs(nrm[0]), sy * abs(nrm[1])))
                        roofs.box(cc[0], cc[1], zt - 0.2, 2 * sx, 2 * sy, float(rng.uniform(3, 9)))
                    footprints.append(box)
                    n_build += 1
                s += width
                gap = float(rng.uniform(6, 15) if rng.random() < 0.35 else rng.uniform(1, 3.5))
                if gap > 6 and s + gap < L:
                    a = p + u * s + nrm * side * (WALK + 0.5)
                    if rng.random() < 0.45:  # a fence along the pavement across the gap
                        mid = a + u * gap / 2
                        if road_distance(np.vstack([a, a + u * gap])).min() > WALK:
                            fences.box(mid[0], mid[1], float(height(*mid)) - 0.2, gap - 1.0, 0.08,
                                       float(rng.uniform(1.1, 2.0)) + 0.2 + KERB_UP,
                                       math.atan2(u[1], u[0]))
                    else:
                        park_spots.append((a + u * gap / 2 + nrm * side * 5.0, gap))
                s += gap
    # second rows: blocks further from the streets, seen through the gaps and over lower ones
    tries = 0
    while tries < 3000 and n_build < 150:
        tries += 1
        lx, ly = float(rng.uniform(8, 24)), float(rng.uniform(8, 24))
        cx, cy = float(rng.uniform(-X_EXT + 3 + lx / 2, X_EXT - 3 - lx / 2)), \
            float(rng.uniform(-Y_EXT + 3 + ly / 2, Y_EXT - 3 - ly / 2))
        box = (cx - lx / 2, cy - ly / 2, cx + lx / 2, cy + ly / 2)
        gx_, gy_ = np.meshgrid(np.linspace(box[0], box[2], 6), np.linspace(box[1], box[3], 6))
        if road_distance(np.column_stack([gx_.ravel(), gy_.ravel()])).min() < WALK + 12.0:
            continue
        if any(box[0] < f[2] + 2.0 and f[0] < box[2] + 2.0 and box[1] < f[3] + 2.0 and f[1] < box[3] + 2.0
               for f in footprints):
            continue
        h = float(rng.uniform(6, 32))
        z0 = float(height(gx_, gy_).min()) - 0.5
        buildings.box(cx, cy, z0, lx, ly, float(height(gx_, gy_).max()) + KERB_UP + h - z0)
        footprints.append(box)
        n_build += 1
    buildings.build("Buildings", M["plaster_white"], "building")
    roofs.build("BuildingTops", M["brick"], "building")
    fences.build("Fences", M["metal_pole"], "fence")

    # ---- trees: two prototypes in a collection, instanced by empties (scaled, turned)
    proto = bpy.data.collections.new("TreePrototypes")
    scene.collection.children.link(proto)
    protos = []
    for kind in ("Round", "Cone"):
        col = bpy.data.collections.new(f"Tree{kind}")
        proto.children.link(col)
        t = Builder()
        t.cylinder(0.0, 0.0, -0.2, 0.16, 2.9, seg=8)
        t.build(f"Tree{kind}Trunk", M["tree_bark"], "trunk", collection=col)
        c = Builder()
        if kind == "Round":
            c.sphere(0.0, 0.0, 4.2, 1.8)
        else:
            c.cylinder(0.0, 0.0, 2.2, 1.7, 5.0, seg=12, r_top=0.0)
        c.build(f"Tree{kind}Crown", M["vegetation"], "vegetation", collection=col)
        protos.append(col)
    bpy.context.view_layer.layer_collection.children["TreePrototypes"].exclude = True
    tree_xy = []

    def add_tree(x, y):
        e = bpy.data.objects.new(f"Tree.{len(tree_xy):03d}", None)
        e.instance_type = "COLLECTION"
        e.instance_collection = protos[int(rng.random() < 0.35)]
        sc = float(rng.uniform(0.75, 1.35))
        e.scale = (sc, sc, sc * float(rng.uniform(0.9, 1.15)))
        e.rotation_euler = (0.0, 0.0, float(rng.uniform(0, 2 * math.pi)))
        e.location = (x, y, float(ground_z(x, y)))
        e["blensor_label"] = "vegetation"
        scene.collection.objects.link(e)
        tree_xy.append((x, y))

    # ---- street furniture along every straight
    lights, bollards, benches, bins, sign_poles, sign_plates = (Builder() for _ in range(6))
    parked = []
    for k, (p, q) in enumerate(straights()):
        p, q = np.array(p), np.array(q)
        L = float(np.linalg.norm(q - p))
        u = (q - p) / L
        nrm = np.array([-u[1], u[0]])
        yaw = math.atan2(u[1], u[0])

        def spot(s, off, side, margin):
            xy = p + u * s + nrm * side * off
            if abs(xy[0]) > X_EXT - 2 or abs(xy[1]) > Y_EXT - 2:
                return None
            # keep off other roads (junction mouths): only this street may be near
            others = road_distance(xy[None])[0]
            return xy if others > off - 0.05 and _far_from_junctions(xy, margin) else None

        s = float(rng.uniform(3, 15))
        side = 1
        while s < L:  # street lights, alternating sides
            xy = spot(s, 6.7, side, 8.0)
            if xy is not None:
                z0 = float(ground_z(*xy))
                lights.cylinder(xy[0], xy[1], z0 - 0.2, 0.11, 7.2, seg=8, r_top=0.07)
                arm = xy - nrm * side * 0.9
                lights.box(arm[0], arm[1], z0 + 6.8, 0.25 if abs(u[0]) > 0.5 else 1.8,
                           1.8 if abs(u[0]) > 0.5 else 0.25, 0.18)
            s += float(rng.uniform(24, 34))
            side = -side
        for side in (-1, 1):
            s = float(rng.uniform(2, 10))
            while s < L:  # trees on the pavement
                if rng.random() < 0.7:
                    xy = spot(s, 8.4, side, 10.0)
                    if xy is not None and all(math.dist(xy, t) > 3.0 for t in tree_xy):
                        add_tree(float(xy[0]), float(xy[1]))
                s += float(rng.uniform(8, 18))
            s = float(rng.uniform(5, 40))
            while s < L:  # bollard rows, benches, bins, signs
                r = rng.random()
                if r < 0.3:
                    n = int(rng.integers(3, 7))
                    for b in range(n):
                        xy = spot(s + 1.6 * b, 6.55, side, 6.0)
                        if xy is not None:
                            bollards.cylinder(xy[0], xy[1], float(ground_z(*xy)) - 0.1, 0.1, 1.0, seg=8)
                elif r < 0.55:
                    xy = spot(s, 9.0, side, 8.0)
                    if xy is not None:
                        z0 = float(ground_z(*xy))
                        benches.box(xy[0], xy[1], z0 + 0.4, 1.9, 0.5, 0.08, yaw)
                        back = xy + nrm * side * 0.25
                        benches.box(back[0], back[1], z0 + 0.45, 1.9, 0.06, 0.5, yaw)
                        for e in (-0.8, 0.8):
                            leg = xy + u * e
                            benches.box(leg[0], leg[1], z0 - 0.05, 0.08, 0.45, 0.47, yaw)
                elif r < 0.75:
                    xy = spot(s, 7.2, side, 6.0)
                    if xy is not None:
                        bins.cylinder(xy[0], xy[1], float(ground_z(*xy)) - 0.05, 0.3, 1.05, seg=10)
                else:
                    xy = spot(s, 6.6, side, 4.0)
                    if xy is not None:
                        z0 = float(ground_z(*xy))
                        sign_poles.cylinder(xy[0], xy[1], z0 - 0.2, 0.04, 2.9, seg=6)
                        sign_plates.box(xy[0], xy[1], z0 + 2.1, 0.04 if abs(u[0]) > 0.5 else 0.7,
                                        0.7 if abs(u[0]) > 0.5 else 0.04, 0.7)
                s += float(rng.uniform(15, 45))
            s = float(rng.uniform(8, 30))
            while s < L - 5:  # parked cars in the parking strip, in groups
                if rng.random() < 0.45:
                    for c in range(int(rng.integers(1, 5))):
                        xy = spot(s + 6.0 * c, PARK, side, 14.0)
                        if xy is not None:
                            parked.append((float(xy[0]), float(xy[1]), yaw + (math.pi if side < 0 else 0.0)))
                    s += 30.0
                s += float(rng.uniform(10, 30))
    for (xy, gap) in park_spots:  # small parks in the wide gaps between buildings
        for _ in range(int(rng.integers(1, 4))):
            x, y = float(xy[0] + rng.uniform(-gap / 3, gap / 3)), float(xy[1] + rng.uniform(-gap / 3, gap / 3))
            if (road_distance(np.array([[x, y]]))[0] > WALK + 2.0 and abs(x) < X_EXT - 3 and abs(y) < Y_EXT - 3
                    and all(math.dist((x, y), t) > 3.0 for t in tree_xy)
                    and not any(f[0] - 2 < x < f[2] + 2 and f[1] - 2 < y < f[3] + 2 for f in footprints)):
                add_tree(x, y)
    lights.build("StreetLights", M["metal_pole"], "pole")
    bollards.build("Bollards", M["metal_pole"], "pole")
    benches.build("Benches", M["tree_bark"], "other-object")
    bins.build("Bins", M["car_paint_black"], "other-object")
    sign_poles.build("SignPoles", M["metal_pole"], "pole")
    sign_plates.build("SignPlates", M["road_marking"], "traffic-sign")

    cars = car_meshes(M)
    paints = ["car_paint_red", "car_paint_white", "car_paint_black"]
    for n, (x, y, yaw) in enumerate(parked):
        kind = "Van" if rng.random() < 0.25 else "Sedan"
        car = car_object(f"Parked.{n:03d}", cars[kind], paints[int(rng.integers(0, 3))], M)
        hx, hy = height_grad(x, y)
        car.location = (x, y, float(height(x, y)))
        car.rotation_euler = (float(np.arctan(-hx * math.sin(yaw) + hy * math.cos(yaw))),
                              float(-np.arctan(hx * math.cos(yaw) + hy * math.sin(yaw))), yaw)

    # ---- moving cars and the ego car
    # keys from one second before frame 0 (the motion before it extrapolated), so that
    # the flat Bezier handles of the first and last keys lie outside the scene's frames
    frames = np.arange(-FPS, KEY_END + 1)
    times = frames / FPS
    loop_out = Path2D(rounded_rect(LOOP_A + LANE, LOOP_B + LANE, LOOP_R + LANE), True, laps=3)
    inner = rounded_rect(LOOP_A - LANE, LOOP_B - LANE, LOOP_R - LANE)[::-1]
    loop_in = Path2D(inner, True, laps=3)
    start = float(np.interp(-45.0, loop_out.pts[:2000, 0], loop_out.s[:2000]))  # bottom side, x = -45
    ego_s = drive(loop_out, 12.0, 3.0, times, s0=start)
    ego_loc, ego_rot, ego_v = poses_along(loop_out, ego_s, times)
    movers = {}
    # ahead of the ego car on its lane: the same profile, 3.2 s earlier
    lead_s = drive(loop_out, 12.0, 3.0, times + 3.2, s0=start)
    movers["Car.Lead"] = ("Sedan", "car_paint_red", loop_out, lead_s)
    i0 = int(np.argmin(np.hypot(*(loop_in.pts[:len(inner)] - (60.0, 58.25)).T)))
    movers["Car.Oncoming1"] = ("Van", "car_paint_white", loop_in,
                               drive(loop_in, 11.0, 8.0, times, s0=float(loop_in.s[i0])))
    i1 = int(np.argmin(np.hypot(*(loop_in.pts[:len(inner)] - (-88.25, -10.0)).T)))
    movers["Car.Oncoming2"] = ("Sedan", "car_paint_black", loop_in,
                               drive(loop_in, 10.0, 7.0, times, s0=float(loop_in.s[i1])))
    north = Path2D(resample([(LANE, -Y_EXT + 2), (LANE, Y_EXT - 2)]), False)
    movers["Car.Crossing"] = ("Sedan", "car_paint_white", north,
                              drive(north, 9.0, 0.0, times, t0=27.0, v_end=0.0, a_lat=3.0))
    spur = Path2D(resample([(X_EXT + 20.0, LANE), (LOOP_A + ROAD_HALF + 3.0, LANE)]), False)
    movers["Car.Stopping"] = ("Van", "car_paint_red", spur, drive(spur, 9.0, 7.0, times, v_end=0.0, s0=20.0))
    ego_xy = ego_loc[:, :2]
    min_gap = {}
    for name, (kind, paint, path, s_t) in movers.items():
        loc, rot, _ = poses_along(path, s_t, times)
        car = car_object(name, cars[kind], paint, M)
        key_object(car, frames, loc, rot)
        min_gap[name] = float(np.hypot(*(loc[:, :2] - ego_xy).T).min())

    # the ego car: a low hatchback (roof at 1.4 m) with a mast, so the sensor 1.9 m above
    # the ground sees over it but for narrow sectors over the bonnet and the tailgate
    cam_data = ego_car_with_lidar(scene, M, frames, ego_loc, ego_rot, SENSOR_HEIGHT, 0.1).data
    if registered:
        s = cam_data.blensor
        s.preset = "hdl32e"
        s.formats = {"npz"}

    # ---- statistics
    tris = triangle_count()
    sel = (frames >= 0) & (frames <= FRAME_END)
    route = float(np.linalg.norm(np.diff(ego_loc[sel], axis=0), axis=1).sum())
    stats = {
        "triangles": tris, "buildings": n_build, "trees": len(tree_xy), "parked_cars": len(parked),
        "moving_cars": len(movers), "fps": FPS, "frames": [0, FRAME_END], "duration_s": FRAME_END / FPS,
        "route_m": round(route, 1), "lap_m": round(loop_out.length / 3, 1),
        "speed_m_s": [round(float(ego_v[sel].min()), 2), round(float(ego_v[sel].max()), 2)],
        "max_pitch_deg": round(math.degrees(float(np.abs(ego_rot[sel, 1]).max())), 2),
        "max_roll_deg": round(math.degrees(float(np.abs(ego_rot[sel, 0]).max())), 2),
        "min_distance_to_ego_m": {k: round(v, 1) for k, v in min_gap.items()},
    }
    return save_and_report(out, registered, stats)


def keyed_scene(name: str, fps: int, frame_end: int):
    """An empty file with the add-on (``build_crossing.empty_file_with_addon``), new keys
    Bezier with auto-clamped handles, its scene named ``name`` at ``fps`` frames/s over frames
    0..``frame_end``, at frame 0. Returns (add-on registered, scene)."""
    registered = empty_file_with_addon()
    prefs = bpy.context.preferences.edit
    prefs.keyframe_new_interpolation_type = "BEZIER"
    prefs.keyframe_new_handle_type = "AUTO_CLAMPED"
    scene = bpy.context.scene
    scene.name = name
    scene.render.fps = fps
    scene.render.fps_base = 1.0
    scene.frame_start, scene.frame_end = 0, frame_end
    scene.frame_current = 0
    return registered, scene


def ego_car_with_lidar(scene, M, frames, loc, rot, sensor_height: float, mast_gap: float):
    """The ego car (a low hatchback: body, cabin, four wheels, a mast of radius 6 cm) keyed
    along ``loc`` (F, 3) m and ``rot`` (F, 3) rad (XYZ Euler) at ``frames``, and on it the
    sensor camera ``Lidar`` ``sensor_height`` m above the ground (the mast's top ``mast_gap``
    m below it), camera convention in the car's frame (+X forward, +Z up: camera -Z looks
    forward, +Y up). Sets it as the scene's camera; returns the camera object."""
    b = Builder()
    b.box(0.0, 0.0, 0.3, 4.4, 1.8, 0.7)
    b.box(-0.2, 0.0, 1.0, 2.0, 1.4, 0.4)
    b.cylinder(0.0, 0.0, 1.4, 0.06, sensor_height - 1.4 - mast_gap, seg=8)
    nb = len(b.faces)
    for wx in (-1.45, 1.45):
        for wy in (-0.85, 0.85):
            b.box(wx, wy, 0.0, 0.66, 0.2, 0.66)
    ego_mesh = b.mesh("EgoMesh", (M["car_paint_white"], M["tyre_rubber"]), (nb,))
    ego = car_object("EgoCar", ego_mesh, "car_paint_white", M)
    key_object(ego, frames, loc, rot)
    cam = bpy.data.objects.new("Lidar", bpy.data.cameras.new("Lidar"))
    scene.collection.objects.link(cam)
    cam.parent = ego
    cam.location = (0.0, 0.0, sensor_height)
    cam.rotation_euler = (math.pi / 2, 0.0, -math.pi / 2)
    scene.camera = cam
    return cam


def triangle_count() -> int:
    """Triangles of every mesh instance of the evaluated scene (instances counted each)."""
    tris = 0
    for inst in bpy.context.evaluated_depsgraph_get().object_instances:
        ob = inst.object
        if ob.type == "MESH":
            me = ob.data
            me.calc_loop_triangles()
            tris += len(me.loop_triangles)
    return tris


def save_and_report(out: Path, registered: bool, stats: dict) -> dict:
    """Save the scene compressed to ``out``, unregister the add-on if it was registered (bpy
    4.2/4.5 crash or hang at exit while its classes are), print and return ``stats``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=str(out), compress=True)
    if registered:
        import blensor_addon
        blensor_addon.unregister()
    print(f"wrote {out}")
    for k, v in stats.items():
        print(f"  {k}: {v}")
    return stats


def _far_from_junctions(xy, margin):
    """True if ``xy`` is at least ``margin`` m (plus the road half width) from every
    junction and from the loop's curved corners."""
    a, b, r = LOOP_A, LOOP_B, LOOP_R
    junctions = [(0.0, -b), (0.0, b), (a, 0.0), (-a, 0.0)]
    near_j = min(math.dist(xy, j) for j in junctions) < margin + ROAD_HALF + 3.5
    # corner zones: beyond the straight parts of the loop in both coordinates
    near_c = (abs(xy[0]) > a - r - margin / 2 and abs(xy[1]) > b - r - margin / 2
              and abs(xy[0]) < a + WALK + 2 and abs(xy[1]) < b + WALK + 2)
    return not (near_j or near_c)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "scenes" / "drive.blend")
