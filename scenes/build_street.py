"""Build ``scenes/street.blend``: the quick start's demo street, 20 s of driving through a
few town blocks, reproducibly.

The streets (world +Z up, metres): a main street along y = 0 crossed by three streets
(x = -70, 0, 70) in four-way junctions; blocks of about 70 x 95 m between them. Each road
is 12 m of asphalt (two 3.5 m lanes, a 2.5 m parking strip on each side) with a 2 %
crossfall (camber: the crown on the centre line 12 cm above the gutters), granite kerbs
(2 m stones) and 3.5 m pavements 12 cm above the gutter. The ground is one 1 m grid over
280 x 190 m: a gentle slope and one long wave (:func:`terrain`, grades within 0.6 %) plus
a seeded roughness (1.5 cm sigma on roads and pavements, 3 cm on the lawns).

Along every street: buildings of 2-8 floors (ground floor 3.5 m, upper floors 3 m), 9-20 m
wide, with setbacks of 0.5-5 m and gaps, each with facade relief on its street side: piers
between window bays and floor bands (window recesses 0.3 m deep), a door in the ground
floor, a cornice, and on some buildings balconies (slab and railing) on every upper floor;
front gardens with bushes where the setback allows. One building on the main street has a
glass shop front (one pane with a Glass BSDF, a room with a counter behind it: the scanner
follows the glass) and one a mirror-like curtain wall (the library's ``shop_window``, a
mirror, behind metal mullions). Street furniture at town densities: street lights about
every 28 m (alternating sides), signs (retroreflective faces) about every 45 m, bollard
rows at the junctions, benches and bins; trees on the pavements every 9-15 m (two
prototypes in a collection, instanced by empties, scaled and turned); parked cars in the
parking strips.

Motion (Bezier keys on every frame, :data:`KEY_PAD` frames beyond both ends): the ego car
drives east on the main street's right-hand lane from x = :data:`EGO_X0` at 7 m/s (up to
8.5 m/s), turns left at the x = 70 junction (10 m radius, about 5 m/s) and drives north;
155 m in 20 s, rolling with the camber and its turn and pitching with the grade and its
acceleration (``build_drive.poses_along`` on :func:`terrain`). Other cars: one ahead on
its lane, two oncoming, one crossing the main street at x = 0 and one that comes down the
x = 70 street and stops at the junction; a cyclist rides west on the main street and eight
pedestrians walk along the pavements (two stand). Every moving object stays on the road or
pavement surface (camber included).

The sensor is the camera ``Lidar``: an Ouster OS1-128 (preset ``os1_128``) in its 512x10
lidar mode (128 beams 0.35 deg apart over 43 deg, 512 columns, 10 Hz: 65,536 rays a
sweep), continuous time (every ray at its own firing time), the reflectivity limit by
range as return model (``return_model = limit``), parented to the ego car 2.4 m
above the ground, high enough that the lowest beam clears the car's bonnet, roof and
tailgate; camera convention (local +Y = up, looking down -Z = the driving direction).
KISS-ICP tilts on sparse rings (docs/performance.md, *Odometry benchmark*): the HDL-32E and
the VLP-16 drift 2-6 % here, the OS1-128's dense rings stay within 1 %. Scene: 10 fps, frames
0-199 (t = frame / 10 s: 0-20 s, 200 sweeps). Materials come from
``blensor_addon/core/tables/reflectance.json`` (``build_crossing.make_materials``; the shop
pane ``build_crossing.glass_material``), every object carries a ``blensor_label``
(SemanticKITTI class names), the camera too (``unlabeled``). Every random draw comes from
``numpy.random.default_rng(SEED)``: the same script gives the same scene.

Usage: ``python scenes/build_street.py [OUT.blend]`` (pip ``bpy``; the committed file is built
with bpy 4.2.23, ``.venv-bpy4.2.23/bin/python``, so that Blender 4.2 opens it; bpy 5.0 builds
the same geometry, ``tests/test_street.py``), default ``scenes/street.blend`` (committed: the
quick start scans it).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import bpy
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_crossing import glass_material, make_materials  # noqa: E402
from build_drive import (  # noqa: E402  (the drive's terrain, mesh and motion helpers)
    Builder,
    Path2D,
    car_meshes,
    car_object,
    drive,
    ego_car_with_lidar,
    grid_mesh,
    key_object,
    keyed_scene,
    poses_along,
    resample,
    road_distance,
    save_and_report,
    triangle_count,
)

SEED = 20342
FPS = 10
DURATION = 20.0                      # s of scene (frames 0..199)
FRAME_END = int(round(DURATION * FPS)) - 1   # 200 sweeps at 10 Hz: t = 0 .. 20 s
EGO_X0 = -65.0                       # the ego car starts here on the main street
EGO_V = (7.0, 8.5)                    # the ego car: speed at the start, top speed (m/s)
KEY_PAD = 10                         # keys this many frames beyond both ends (smooth subframes)
SENSOR_HEIGHT = 2.4                  # m above the ground under the car

ROAD_HALF = 6.0                      # asphalt half width
LANE = 1.75                          # lane centre offset from the road's centre line
PARK = 4.75                          # parking strip centre offset
WALK = 9.5                           # outer edge of the pavement
KERB_UP = 0.12                       # pavement and lawn above the gutter
CROSSFALL = 0.02                     # road camber: 2 % from the crown down to the gutters
X_EXT, Y_EXT = 140.0, 95.0           # ground extent (half sizes)
CROSS_X = (-70.0, 0.0, 70.0)         # the cross streets
TURN_X, TURN_R = 70.0, 10.0          # the ego car turns left here, on this radius
GROUND_FLOOR, FLOOR = 3.5, 3.0       # storey heights (m)
RELIEF = 0.3                         # depth of the window recesses (m)


def terrain(x, y):
    """Smooth ground height (m) at world (x, y): a gentle slope (0.4 % east, 0.2 % north) and
    one long, low wave (grades within +-0.6 %)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return 0.004 * x + 0.002 * y + 0.08 * np.sin(2 * np.pi * x / 150.0 + 0.5) * np.cos(2 * np.pi * y / 200.0)


def _segments():
    segs = [(-X_EXT - 10, 0.0, X_EXT + 10, 0.0)]
    segs += [(x, -Y_EXT - 10, x, Y_EXT + 10) for x in CROSS_X]
    return np.array(segs, dtype=np.float64)


SEGMENTS = _segments()


def road_d(xy):
    """Distance (m) of points (N, 2) to the nearest centre line of this street network."""
    return road_distance(xy, SEGMENTS)


def camber(x, y):
    """Height (m) of the road surface above ``height`` at (x, y): the crossfall, 0 at the
    gutters (``ROAD_HALF`` from the centre line) and beyond."""
    d = road_d(np.column_stack([np.ravel(x), np.ravel(y)]))
    return (CROSSFALL * np.clip(ROAD_HALF - d, 0.0, None)).reshape(np.shape(x))


def ground_z(x, y):
    """Height (m) of the surface an object stands on: road (with camber) or pavement."""
    d = road_d(np.column_stack([np.atleast_1d(x), np.atleast_1d(y)]))
    z = terrain(x, y) + np.where(d > ROAD_HALF + 0.3, KERB_UP, CROSSFALL * np.clip(ROAD_HALF - d, 0.0, None))
    return float(z[0]) if np.ndim(x) == 0 else z


def straights():
    """Street pieces between junctions: (start (2,), end (2,), trim at start, trim at end),
    the trims (m) keeping buildings and furniture out of the junctions."""
    xs = (-X_EXT,) + CROSS_X + (X_EXT,)
    j = WALK + 2.0
    out = [((a, 0.0), (b, 0.0), 0.0 if a == -X_EXT else j, 0.0 if b == X_EXT else j)
           for a, b in zip(xs[:-1], xs[1:])]
    for x in CROSS_X:
        out += [((x, -Y_EXT), (x, 0.0), 0.0, j), ((x, 0.0), (x, Y_EXT), j, 0.0)]
    return out


def lbox(b, o, u, side, a0, a1, b0, b1, z0, z1):
    """A box in a street's frame: ``a0..a1`` along the street direction ``u`` from ``o``,
    ``b0..b1`` away from the centre line on ``side`` (+1 left of ``u``, -1 right), ``z0..z1``
    up (m), added to the :class:`Builder` ``b``."""
    n = np.array([-u[1], u[0]]) * side
    c = o + u * (a0 + a1) / 2 + n * (b0 + b1) / 2
    b.box(float(c[0]), float(c[1]), z0, a1 - a0, abs(b1 - b0), z1 - z0, math.atan2(u[1], u[0]))


def lquad(b, o, u, side, a0, a1, bb, z0, z1):
    """One vertical face at distance ``bb`` from the centre line (street frame as :func:`lbox`)."""
    n = np.array([-u[1], u[0]]) * side
    p0, p1 = o + u * a0 + n * bb, o + u * a1 + n * bb
    k = len(b.verts)
    b.verts += [(p0[0], p0[1], z0), (p1[0], p1[1], z0), (p1[0], p1[1], z1), (p0[0], p0[1], z1)]
    b.faces.append((k, k + 1, k + 2, k + 3))


# --------------------------------------------------------------------------- buildings


class Facades:
    """Builders of the buildings' parts, one mesh object each at the end."""

    def __init__(self):
        self.walls, self.relief, self.balconies = Builder(), Builder(), Builder()
        self.mirror, self.mullions, self.glass, self.counter = Builder(), Builder(), Builder(), Builder()


def building(F, rng, o, u, side, a0, a1, bf, depth, floors, zg, z0, kind):
    """One building in a street's frame (:func:`lbox`): the front ``bf`` m from the centre
    line, ``a0..a1`` along the street, ``depth`` m deep, ``floors`` storeys from the ground
    height ``zg`` (foundations from ``z0``). ``kind``: ``"plain"`` (piers, floor bands,
    door, cornice, maybe balconies), ``"shop"`` (plain with a glass shop front in the
    ground floor's middle bays: a room 4 m deep behind one Glass BSDF pane) or
    ``"mirror"`` (upper floors a mirror-like curtain wall behind mullions)."""
    zt = zg + GROUND_FLOOR + FLOOR * (floors - 1) + 0.6
    bc, bb = bf + RELIEF, bf + depth
    width = a1 - a0
    n_bay = max(2, int(round(width / float(rng.uniform(2.4, 3.2)))))
    pitch = width / n_bay
    door = int(rng.integers(0, n_bay))
    shop = (n_bay // 2 - 1, n_bay // 2 + 1) if kind == "shop" else (-1, -1)
    if kind == "shop":
        door = 0 if shop[0] > 0 else n_bay - 1
        sa0, sa1, sz1 = a0 + shop[0] * pitch + 0.3, a0 + (shop[1] + 1) * pitch - 0.3, zg + GROUND_FLOOR - 0.3
        room = bc + 4.0
        W = F.walls
        lbox(W, o, u, side, a0, a1, room, bb, z0, zt)               # behind the room
        lbox(W, o, u, side, a0, sa0, bc, room, z0, zt)              # beside it
        lbox(W, o, u, side, sa1, a1, bc, room, z0, zt)
        lbox(W, o, u, side, sa0, sa1, bc, room, sz1, zt)            # above it
        lbox(W, o, u, side, sa0, sa1, bc, room, z0, zg)             # its floor
        lquad(F.glass, o, u, side, sa0, sa1, bc, zg, sz1)
        lbox(F.counter, o, u, side, (sa0 + sa1) / 2 - 2.0, (sa0 + sa1) / 2 + 2.0, bc + 1.5, bc + 2.3,
             zg, zg + 0.9)
    else:
        lbox(F.walls, o, u, side, a0, a1, bc, bb, z0, zt)
    R = F.relief
    top_relief = zg + GROUND_FLOOR if kind == "mirror" else zt
    for k in range(n_bay + 1):  # piers between the bays
        pa = a0 + k * pitch
        h0 = max(a0, pa - 0.35)
        h1 = min(a1, pa + 0.35)
        in_shop = shop[0] < k <= shop[1]
        lbox(R, o, u, side, h0, h1, bf, bc, zg + GROUND_FLOOR - 0.3 if in_shop else z0, top_relief)
    for f in range(1, floors):  # floor bands (slab and parapet below the windows)
        zf = zg + GROUND_FLOOR + FLOOR * (f - 1)
        if kind == "mirror":
            break
        lbox(R, o, u, side, a0, a1, bf, bc, zf - 0.3, zf + 0.6)
    lbox(R, o, u, side, a0, a1, bf, bc, zg + GROUND_FLOOR - 0.3, zg + GROUND_FLOOR + 0.2)
    for k in range(n_bay):  # the ground floor's plinth under the windows (not at the door)
        if k != door and not (shop[0] <= k <= shop[1]):
            lbox(R, o, u, side, a0 + k * pitch, a0 + (k + 1) * pitch, bf, bc, z0, zg + 0.8)
    lbox(R, o, u, side, a0 - 0.1, a1 + 0.1, bf - 0.25, bc, zt - 0.6, zt + 0.2)  # cornice
    if kind == "mirror":  # curtain wall: the mirror in the facade plane, mullions before it
        zf = zg + GROUND_FLOOR + 0.2
        lbox(F.mirror, o, u, side, a0, a1, bf + 0.05, bf + 0.1, zf, zt - 0.6)
        for k in range(int(width / 1.5) + 1):
            a = min(a1 - 0.05, a0 + 0.05 + 1.5 * k)
            lbox(F.mullions, o, u, side, a - 0.05, a + 0.05, bf - 0.1, bf + 0.05, zf, zt - 0.6)
    elif floors >= 3 and rng.random() < 0.4:  # balconies on every upper floor, every other bay
        for f in range(1, floors):
            zf = zg + GROUND_FLOOR + FLOOR * (f - 1)
            for k in range(1, n_bay, 2):
                ba0, ba1 = a0 + k * pitch + 0.2, a0 + (k + 1) * pitch - 0.2
                lbox(F.balconies, o, u, side, ba0, ba1, bf - 1.2, bf, zf - 0.3, zf - 0.12)
                lbox(F.balconies, o, u, side, ba0, ba1, bf - 1.2, bf - 1.15, zf - 0.12, zf + 0.9)
    return zt


# --------------------------------------------------------------------------- people


def person_mesh(M):
    """A walking person (1.75 m, origin between the feet, +X ahead): legs and arms in dark
    fabric, torso in light fabric, head in skin; one shared mesh."""
    b = Builder()
    b.box(0.0, -0.11, 0.0, 0.16, 0.14, 0.85)
    b.box(0.0, 0.11, 0.0, 0.16, 0.14, 0.85)
    b.box(0.0, -0.27, 0.85, 0.1, 0.09, 0.6)
    b.box(0.0, 0.27, 0.85, 0.1, 0.09, 0.6)
    n_dark = len(b.faces)
    b.box(0.0, 0.0, 0.85, 0.25, 0.42, 0.62)
    n_torso = len(b.faces)
    b.sphere(0.0, 0.0, 1.62, 0.12, rings=5, seg=8)
    return b.mesh("PersonMesh", [M[m] for m in ("fabric_dark", "fabric_cotton", "skin")], (n_dark, n_torso))


def cyclist_mesh(M):
    """A cyclist on a bicycle (1.8 m long, origin on the ground between the wheels, +X ahead):
    wheels and frame in black plastic and metal, the rider in fabric and skin."""
    b = Builder()
    for wx in (-0.55, 0.55):
        b.box(wx, 0.0, 0.0, 0.68, 0.05, 0.68)
    b.box(0.0, 0.0, 0.45, 1.1, 0.05, 0.06)
    b.box(0.45, 0.0, 0.45, 0.06, 0.06, 0.6)
    b.box(0.45, 0.0, 1.02, 0.06, 0.6, 0.04)
    n_bike = len(b.faces)
    b.box(-0.15, 0.0, 0.9, 0.3, 0.35, 0.12)
    b.box(-0.05, -0.1, 0.4, 0.12, 0.12, 0.5)
    b.box(0.05, 0.1, 0.35, 0.12, 0.12, 0.55)
    b.box(0.0, 0.0, 1.0, 0.25, 0.38, 0.6)
    n_body = len(b.faces)
    b.sphere(0.15, 0.0, 1.72, 0.12, rings=5, seg=8)
    return b.mesh("CyclistMesh", [M[m] for m in ("plastic_black", "fabric_dark", "skin")], (n_bike, n_body))


def poses_on_road(path, s_t, times):
    """:func:`build_drive.poses_along` on this street's surface: the camber's height added
    to the location and its slope to the roll and pitch (smoothed over one second, as the
    tyres bridge the crown's kink)."""
    loc, rot, v = poses_along(path, s_t, times, h=terrain)
    x, y, yaw = loc[:, 0], loc[:, 1], rot[:, 2]
    e = 0.3
    c = camber(x, y)
    c_, s_ = np.cos(yaw), np.sin(yaw)
    gl = (camber(x - e * s_, y + e * c_) - camber(x + e * s_, y - e * c_)) / (2 * e)  # slope to the left
    gf = (camber(x + e * c_, y + e * s_) - camber(x - e * c_, y - e * s_)) / (2 * e)  # slope ahead
    w = np.ones(FPS + 1) / (FPS + 1)

    def smooth(a):
        return np.convolve(np.pad(a, FPS // 2, mode="edge"), w, mode="valid")

    loc = loc.copy()
    rot = rot.copy()
    loc[:, 2] += smooth(c)
    rot[:, 0] += np.arctan(smooth(gl))
    rot[:, 1] -= np.arctan(smooth(gf))
    return loc, rot, v


def key_linear(obj, frames, locs, yaw):
    """Location keys at ``frames`` (linear between them, extrapolated flat) and a fixed yaw."""
    obj.rotation_euler = (0.0, 0.0, yaw)
    for f, p in zip(frames, locs):
        obj.location = tuple(float(c) for c in p)
        obj.keyframe_insert("location", frame=int(f))
    act = obj.animation_data.action
    curves = act.fcurves if hasattr(act, "fcurves") else [
        c for layer in act.layers for strip in layer.strips for bag in strip.channelbags for c in bag.fcurves]
    for fc in curves:
        for kp in fc.keyframe_points:
            kp.interpolation = "LINEAR"


# --------------------------------------------------------------------------- scene


def build(out: Path) -> dict:
    """Build the street and save it (compressed) to ``out``; returns its statistics (counts,
    route length, speeds)."""
    rng = np.random.default_rng(SEED)
    registered, scene = keyed_scene("Street", FPS, FRAME_END)
    M = make_materials(registered)
    M["glass"] = glass_material("shop_glass")

    # ---- ground: one 1 m grid, split by surface into road / pavement / lawn
    xs = np.arange(-X_EXT, X_EXT + 0.5, 1.0)
    ys = np.arange(-Y_EXT, Y_EXT + 0.5, 1.0)
    gx, gy = np.meshgrid(xs, ys, indexing="xy")
    d_v = road_d(np.column_stack([gx.ravel(), gy.ravel()]))
    rough = np.where(d_v > WALK + 0.5, 0.03, 0.015)
    z = terrain(gx.ravel(), gy.ravel()) + (rng.normal(0.0, 1.0, gx.size) * rough).clip(-0.06, 0.06)
    z += np.where(d_v > ROAD_HALF + 0.3, KERB_UP, CROSSFALL * np.clip(ROAD_HALF - d_v, 0.0, None))
    verts = np.column_stack([gx.ravel(), gy.ravel(), z])
    nx = len(xs)
    i, j = np.meshgrid(np.arange(len(xs) - 1), np.arange(len(ys) - 1), indexing="xy")
    v0 = (j * nx + i).ravel()
    faces = np.column_stack([v0, v0 + 1, v0 + nx + 1, v0 + nx])
    d_f = road_d(verts[faces, :2].mean(1))
    road_f, walk_f = d_f <= ROAD_HALF, (d_f > ROAD_HALF) & (d_f <= WALK)
    grid_mesh("Road", verts, faces[road_f], M["asphalt"], "road")
    grid_mesh("Pavement", verts, faces[walk_f], M["concrete"], "sidewalk")
    grid_mesh("Lawn", verts, faces[~(road_f | walk_f)], M["grass"], "terrain")

    # ---- kerbs along every road edge (2 m stones), none across junctions
    kerb = Builder()
    for x0, y0, x1, y1 in SEGMENTS:
        dense = resample(np.array([(x0, y0), (x1, y1)]), 2.0)
        hd = math.atan2(y1 - y0, x1 - x0)
        for side in (-1, 1):
            c = dense + np.array([-math.sin(hd), math.cos(hd)]) * side * (ROAD_HALF + 0.12)
            ok = ((road_d(c) > ROAD_HALF + 0.05) & (np.abs(c[:, 0]) < X_EXT - 1)
                  & (np.abs(c[:, 1]) < Y_EXT - 1))
            for (cx, cy), good in zip(c, ok):
                if good:
                    kerb.box(cx, cy, float(terrain(cx, cy)) - 0.1, 2.0, 0.24, 0.1 + KERB_UP + 0.04, hd)
    kerb.build("Kerbs", M["kerb_granite"], "sidewalk")

    # ---- buildings with facade relief along both sides of every street piece
    F = Facades()
    footprints, gardens = [], []
    n_build, special = 0, {}
    for k, (p, q, t0, t1) in enumerate(straights()):
        p, q = np.array(p), np.array(q)
        L = float(np.linalg.norm(q - p))
        u = (q - p) / L
        for side in (-1, 1):
            s = t0 + float(rng.uniform(0, 3))
            while s < L - t1 - 6:
                width = min(float(rng.uniform(9, 20)), L - t1 - s)
                setback = float(rng.uniform(0.5, 5.0))
                depth = float(rng.uniform(10, 16))
                r = rng.random()
                floors = int(rng.integers(2, 4) if r < 0.3 else rng.integers(3, 6) if r < 0.8
                             else rng.integers(6, 9))
                bf = WALK + setback
                nrm = np.array([-u[1], u[0]]) * side
                corners = np.array([p + u * a + nrm * b for a in (s, s + width) for b in (bf, bf + depth)])
                box = (*corners.min(0), *corners.max(0))
                gx_, gy_ = np.meshgrid(np.linspace(box[0], box[2], 6), np.linspace(box[1], box[3], 6))
                inside = abs(box[0]) < X_EXT - 2 and abs(box[2]) < X_EXT - 2 and abs(box[1]) < Y_EXT - 2 \
                    and abs(box[3]) < Y_EXT - 2
                clear = inside and road_d(np.column_stack([gx_.ravel(), gy_.ravel()])).min() > WALK + 0.4
                clear = clear and not any(box[0] < f[2] + 1.0 and f[0] < box[2] + 1.0 and box[1] < f[3] + 1.0
                                          and f[1] < box[3] + 1.0 for f in footprints)
                if clear and width >= 6:
                    kind = "plain"
                    # the glass shop on the main street's north side, the mirror on its south side,
                    # both on the ego car's way (x between -70 and 0)
                    if k == 1 and side == 1 and "shop" not in special and width >= 12:
                        kind = "shop"
                    elif k == 1 and side == -1 and "mirror" not in special and width >= 12 and s > 15:
                        kind = "mirror"
                        floors = max(floors, 5)
                    if kind != "plain":
                        special[kind] = (n_build, float(s), side)
                    zg = float(terrain(gx_, gy_).max()) + KERB_UP
                    z0 = float(terrain(gx_, gy_).min()) - 0.5
                    building(F, rng, p, u, side, s, s + width, bf, depth, floors, zg, z0, kind)
                    footprints.append(box)
                    if setback > 2.5:
                        gardens.append((p, u, side, s, s + width, WALK, bf))
                    n_build += 1
                s += width
                if rng.random() < 0.4:
                    s += float(rng.uniform(3, 10))
    F.walls.build("Buildings", M["plaster_white"], "building")
    F.relief.build("FacadeRelief", M["brick"], "building")
    F.balconies.build("Balconies", M["concrete"], "building")
    F.mirror.build("MirrorFacade", M["shop_window"], "building")
    F.mullions.build("Mullions", M["metal_pole"], "building")
    F.glass.build("ShopGlass", M["glass"], "building")
    F.counter.build("ShopCounter", M["wood"], "other-structure")

    # ---- vegetation: tree and bush prototypes in a collection, instanced by empties
    proto = bpy.data.collections.new("Prototypes")
    scene.collection.children.link(proto)
    protos = {}
    for kind in ("TreeRound", "TreeCone", "Bush"):
        col = bpy.data.collections.new(kind)
        proto.children.link(col)
        c = Builder()
        if kind == "Bush":
            c.sphere(0.0, 0.0, 0.45, 0.6, rings=5, seg=8)
        else:
            t = Builder()
            t.cylinder(0.0, 0.0, -0.2, 0.16, 2.9, seg=8)
            t.build(f"{kind}Trunk", M["tree_bark"], "trunk", collection=col)
            if kind == "TreeRound":
                c.sphere(0.0, 0.0, 4.2, 1.8)
            else:
                c.cylinder(0.0, 0.0, 2.2, 1.7, 5.0, seg=12, r_top=0.0)
        c.build(f"{kind}Crown", M["vegetation"], "vegetation", collection=col)
        protos[kind] = col
    bpy.context.view_layer.layer_collection.children["Prototypes"].exclude = True
    plants = []

    def plant(kind, x, y, scale):
        e = bpy.data.objects.new(f"{kind}.{len(plants):03d}", None)
        e.instance_type = "COLLECTION"
        e.instance_collection = protos[kind]
        e.scale = (scale, scale, scale * float(rng.uniform(0.9, 1.15)))
        e.rotation_euler = (0.0, 0.0, float(rng.uniform(0, 2 * math.pi)))
        e.location = (x, y, float(ground_z(x, y)))
        e["blensor_label"] = "vegetation"
        scene.collection.objects.link(e)
        plants.append((x, y))

    # ---- street furniture and parked cars along every street piece
    lights, bollards, benches, bins, sign_poles, sign_plates = (Builder() for _ in range(6))
    parked = []
    for k, (p, q, t0, t1) in enumerate(straights()):
        p, q = np.array(p), np.array(q)
        L = float(np.linalg.norm(q - p))
        u = (q - p) / L
        yaw = math.atan2(u[1], u[0])

        def spot(s, off, side):
            xy = p + u * s + np.array([-u[1], u[0]]) * side * off
            ok = abs(xy[0]) < X_EXT - 2 and abs(xy[1]) < Y_EXT - 2 and road_d(xy[None])[0] > off - 0.05
            return xy if ok else None

        side = 1
        s = t0 + float(rng.uniform(2, 10))
        while s < L - t1:  # street lights, alternating sides
            xy = spot(s, 6.7, side)
            if xy is not None:
                z0 = float(ground_z(*xy))
                lights.cylinder(xy[0], xy[1], z0 - 0.2, 0.11, 7.2, seg=8, r_top=0.07)
                arm = xy - np.array([-u[1], u[0]]) * side * 0.9
                lights.box(arm[0], arm[1], z0 + 6.8, 1.8, 0.25, 0.18, yaw + math.pi / 2)
            s += float(rng.uniform(24, 32))
            side = -side
        for side in (-1, 1):
            s = t0 + float(rng.uniform(2, 8))
            while s < L - t1:  # trees on the pavement
                if rng.random() < 0.8:
                    xy = spot(s, 8.4, side)
                    if xy is not None and all(math.dist(xy, t) > 3.0 for t in plants):
                        plant("TreeRound" if rng.random() < 0.65 else "TreeCone", float(xy[0]), float(xy[1]),
                              float(rng.uniform(0.75, 1.3)))
                s += float(rng.uniform(9, 15))
            s = t0 + float(rng.uniform(5, 20))
            while s < L - t1:  # signs, benches, bins
                r = rng.random()
                if r < 0.45:
                    xy = spot(s, 6.6, side)
                    if xy is not None:
                        z0 = float(ground_z(*xy))
                        sign_poles.cylinder(xy[0], xy[1], z0 - 0.2, 0.04, 2.9, seg=6)
                        c = xy - np.array([-u[1], u[0]]) * side * 0.06
                        sign_plates.box(c[0], c[1], z0 + 2.0, 0.7, 0.04, 0.7, yaw)
                elif r < 0.75:
                    xy = spot(s, 9.0, side)
                    if xy is not None:
                        z0 = float(ground_z(*xy))
                        benches.box(xy[0], xy[1], z0 + 0.4, 1.9, 0.5, 0.08, yaw)
                        back = xy + np.array([-u[1], u[0]]) * side * 0.25
                        benches.box(back[0], back[1], z0 + 0.45, 1.9, 0.06, 0.5, yaw)
                        for e in (-0.8, 0.8):
                            leg = xy + u * e
                            benches.box(leg[0], leg[1], z0 - 0.05, 0.08, 0.45, 0.47, yaw)
                        xy = spot(s + 1.8, 9.0, side)
                        if xy is not None:
                            bins.cylinder(xy[0], xy[1], float(ground_z(*xy)) - 0.05, 0.3, 1.05, seg=10)
                else:
                    xy = spot(s, 7.2, side)
                    if xy is not None:
                        bins.cylinder(xy[0], xy[1], float(ground_z(*xy)) - 0.05, 0.3, 1.05, seg=10)
                s += float(rng.uniform(18, 40))
            for trim, end, sign in ((t0, t0, 1), (t1, L - t1, -1)):  # bollards at the junction corners
                if trim > 0:
                    for b in range(int(rng.integers(3, 6))):
                        xy = spot(end + sign * (1.0 + 1.5 * b), 6.55, side)
                        if xy is not None:
                            bollards.cylinder(xy[0], xy[1], float(ground_z(*xy)) - 0.1, 0.1, 1.0, seg=8)
            s = t0 + float(rng.uniform(4, 14))
            while s < L - t1 - 5:  # parked cars in groups
                if rng.random() < 0.55:
                    for c in range(int(rng.integers(1, 4))):
                        xy = spot(s + 6.0 * c, PARK, side)
                        if xy is not None and s + 6.0 * c < L - t1 - 3:
                            parked.append((float(xy[0]), float(xy[1]), yaw + (math.pi if side < 0 else 0.0)))
                    s += 20.0
                s += float(rng.uniform(8, 22))
    for (p, u, side, a0, a1, b0, b1) in gardens:  # bushes in the front gardens
        for _ in range(int(rng.integers(1, 4))):
            a, b = float(rng.uniform(a0 + 1, a1 - 1)), float(rng.uniform(b0 + 1.0, b1 - 0.8))
            xy = p + u * a + np.array([-u[1], u[0]]) * side * b
            if all(math.dist(xy, t) > 1.5 for t in plants):
                plant("Bush", float(xy[0]), float(xy[1]), float(rng.uniform(0.6, 1.2)))
    lights.build("StreetLights", M["metal_pole"], "pole")
    bollards.build("Bollards", M["metal_pole"], "pole")
    benches.build("Benches", M["wood"], "other-object")
    bins.build("Bins", M["car_paint_black"], "other-object")
    sign_poles.build("SignPoles", M["metal_pole"], "pole")
    sign_plates.build("SignPlates", M["retroreflective_sheeting"], "traffic-sign")

    cars = car_meshes(M)
    paints = ["car_paint_red", "car_paint_white", "car_paint_black", "car_paint_silver", "car_paint_blue"]
    for n, (x, y, yaw) in enumerate(parked):
        kind = "Van" if rng.random() < 0.25 else "Sedan"
        car = car_object(f"Parked.{n:03d}", cars[kind], paints[int(rng.integers(0, len(paints)))], M)
        loc, rot, _ = poses_on_road(Path2D(resample([(x, y), (x + math.cos(yaw), y + math.sin(yaw))]), False),
                                    np.zeros(FPS + 1), np.arange(FPS + 1) / FPS)
        car.location = tuple(float(c) for c in loc[0])
        car.rotation_euler = tuple(float(c) for c in rot[0])

    # ---- moving cars, the cyclist, pedestrians and the ego car
    frames = np.arange(-KEY_PAD, FRAME_END + KEY_PAD + 1)
    times = frames / FPS
    xl = TURN_X + LANE
    route = resample([(-X_EXT + 5, -LANE), (xl - TURN_R, -LANE)])
    arc = [(xl - TURN_R + TURN_R * math.sin(a), -LANE + TURN_R - TURN_R * math.cos(a))
           for a in np.linspace(0, math.pi / 2, 80)]
    route = np.vstack([route, arc, resample([(xl, -LANE + TURN_R), (xl, Y_EXT + 10)])[1:]])
    ego_path = Path2D(route, False)
    start = EGO_X0 - (-X_EXT + 5)
    ego_s = drive(ego_path, EGO_V[1], EGO_V[0], times, s0=start)
    ego_loc, ego_rot, ego_v = poses_on_road(ego_path, ego_s, times)
    lead = drive(ego_path, EGO_V[1], EGO_V[0], times + 2.5, s0=start)  # the ego car's profile, 2.5 s ahead
    movers = {"Car.Lead": ("Sedan", "car_paint_blue", ego_path, lead)}
    west = Path2D(resample([(X_EXT + 10, LANE), (-X_EXT - 10, LANE)]), False)
    movers["Car.Oncoming1"] = ("Van", "car_paint_white", west, drive(west, 10.0, 9.0, times, s0=40.0))
    movers["Car.Oncoming2"] = ("Sedan", "car_paint_red", west, drive(west, 11.0, 9.0, times, s0=5.0))
    north = Path2D(resample([(LANE, -Y_EXT - 10), (LANE, Y_EXT + 10)]), False)
    movers["Car.Crossing"] = ("Sedan", "car_paint_silver", north, drive(north, 9.0, 8.5, times, s0=55.0))
    south = Path2D(resample([(TURN_X - LANE, Y_EXT + 10), (TURN_X - LANE, ROAD_HALF + 6.0)]), False)
    movers["Car.Stopping"] = ("Van", "car_paint_black", south,
                              drive(south, 9.0, 8.0, times, v_end=0.0, s0=10.0))
    ego_xy = ego_loc[:, :2]
    min_gap = {}
    for name, (kind, paint, path, s_t) in movers.items():
        loc, rot, _ = poses_on_road(path, s_t, times)
        car = car_object(name, cars[kind], paint, M)
        key_object(car, frames, loc, rot)
        min_gap[name] = float(np.hypot(*(loc[:, :2] - ego_xy).T).min())
    bike_path = Path2D(resample([(75.0, 3.3), (-X_EXT - 10, 3.3)]), False)
    bike_s = drive(bike_path, 5.5, 5.0, times, s0=0.0, a_acc=0.5)
    loc, rot, _ = poses_on_road(bike_path, bike_s, times)
    cyclist = bpy.data.objects.new("Cyclist", cyclist_mesh(M))
    scene.collection.objects.link(cyclist)
    cyclist["blensor_label"] = "bicyclist"
    key_object(cyclist, frames, loc, rot)
    min_gap["Cyclist"] = float(np.hypot(*(loc[:, :2] - ego_xy).T).min())
    pm = person_mesh(M)
    walkers = 0
    for n in range(8):
        x0 = float(rng.uniform(-110, 60))
        side = 1 if n % 2 else -1
        y = side * float(rng.uniform(7.2, 9.0))
        v = 0.0 if n >= 6 else float(rng.uniform(1.1, 1.6)) * (1 if rng.random() < 0.5 else -1)
        ped = bpy.data.objects.new(f"Pedestrian.{n}", pm)
        scene.collection.objects.link(ped)
        ped["blensor_label"] = "person"
        t = times[[0, -1]]
        xs_ = x0 + v * t
        key_linear(ped, frames[[0, -1]], [(x, y, float(ground_z(x, y))) for x in xs_],
                   0.0 if v >= 0 else math.pi)
        walkers += v != 0.0

    # the ego car: a low hatchback; the sensor on a mast 2.4 m above the ground
    cam = ego_car_with_lidar(scene, M, frames, ego_loc, ego_rot, SENSOR_HEIGHT, 0.15)
    cam["blensor_label"] = "unlabeled"
    cam_data = cam.data
    if registered:
        s = cam_data.blensor
        s.preset = "os1_128"
        s.angle_resolution = 360.0 / 512  # the 512x10 lidar mode
        s.time_model = "continuous"  # every ray at its own time while the cars move
        # the reflectivity limit by range (every surface within 50 m returns): Jansen et al.'s
        # linear model, the Ouster presets' default, loses the dark asphalt (0.09) at grazing
        # incidence beyond about 4 m, where real OS1 scans show the road
        s.return_model = "limit"
        s.axes = "ros"
        s.formats = {"npz"}

    # ---- statistics
    tris = triangle_count()
    sel = (frames >= 0) & (frames <= FRAME_END)
    stats = {
        "objects": len(bpy.data.objects), "triangles": tris, "buildings": n_build,
        "plants": len(plants), "parked_cars": len(parked), "moving_cars": len(movers),
        "pedestrians": 8, "walking": int(walkers), "fps": FPS, "frames": [0, FRAME_END],
        "duration_s": (FRAME_END + 1) / FPS,
        "route_m": round(float(np.linalg.norm(np.diff(ego_loc[sel], axis=0), axis=1).sum()), 1),
        "speed_m_s": [round(float(ego_v[sel].min()), 2), round(float(ego_v[sel].max()), 2)],
        "max_pitch_deg": round(math.degrees(float(np.abs(ego_rot[sel, 1]).max())), 2),
        "max_roll_deg": round(math.degrees(float(np.abs(ego_rot[sel, 0]).max())), 2),
        "special": special,
        "min_distance_to_ego_m": {k: round(v, 1) for k, v in min_gap.items()},
    }
    return save_and_report(out, registered, stats)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "scenes" / "street.blend")
