"""Sun shadows of the ambient light (core/sensors/ambient.py, 1.; scene/context.py,
``TimelineContext.sun_visible``; docs/physics.md, "Ambient light"): real Blender scenes
scanned by the OS1-64 preset (radiometric), the sensor at the world origin looking down
world -Z and spinning about world Y (tests/test_ambient.py's conventions and helpers).

The scene: a 50 % floor at z = -10 m and a 50 % wall in the plane x = 8 m, 4 m high
(z from -10 to -6 m, |y| <= 30 m), a sun of 100 klx toward +X at 45 deg elevation and a
white sky of strength 0.5. A shadow ray from the floor point (x, y, -10) rises 1 m per m
toward +X and meets the wall where -10 + (8 - x) <= -6: the floor for 4 <= x < 8 m lies in
the wall's shadow and reads the sky alone, the rest of the floor the sun plus the sky; the
wall's face seen by the sensor faces -X, away from the sun (the sky alone, no ray cast).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import add_mesh, quad
from test_ambient import SUN_100KLX, add_sun, material, on, photons, sensor, set_world

from blensor_addon.core.sensors import ambient
from blensor_addon.scene.context import TimelineContext

SKY = 0.5
SUN_LIT = photons(0.5, SUN_100KLX * math.sin(math.radians(45.0)) + math.pi * SKY)
SKY_ONLY = photons(0.5, math.pi * SKY)
#: m: rows this close to the shadow's edges (x = 4 and x = 8) are not classified
MARGIN = 0.05


def build(bpy, wall=True, elevation=45.0, azimuth=0.0, at=(0.0, 0.0, 0.0), sun=True):
    """The module docstring's scene (``wall``: with the wall; ``sun``: with the sun), all of
    it moved by ``at`` (m, world); returns the sensor."""
    grey = material(bpy, "Grey", 0.5)
    add_mesh(bpy, "Floor", *quad(-30, 30, -30, 30, -10.0), grey, location=at)
    if wall:
        add_mesh(bpy, "Wall", [(8, -30, -10), (8, 30, -10), (8, 30, -6), (8, -30, -6)], [(0, 1, 2, 3)], grey,
                 location=at)
    set_world(bpy, SKY)
    if sun:
        add_sun(bpy, elevation, azimuth)
    cam = sensor(bpy)
    cam.location = at
    return cam


@pytest.fixture
def shadow_rays(monkeypatch):
    """The shadow rays cast (a list of ray counts, one per backend call of
    :meth:`TimelineContext.sun_visible`)."""
    real = TimelineContext.sun_visible
    counts: list[int] = []

    def spy(self, *args, **kwargs):
        inner = self.backend.intersect

        def counting(origins, directions, tmax, time=None, **kw):
            counts.append(int(np.shape(origins)[0]))
            return inner(origins, directions, tmax, time=time, **kw)

        self.backend.intersect = counting
        try:
            return real(self, *args, **kwargs)
        finally:
            del self.backend.intersect

    monkeypatch.setattr(TimelineContext, "sun_visible", spy)
    return counts


@pytest.fixture
def shadow_asks(monkeypatch):
    """What :meth:`TimelineContext.sun_visible` is asked, before detection: a list of
    (need (N, K) bool, x (N,) float64 m) per call, ``x`` the world X of each row's point
    along its cast ray at its range, for a still sensor at the world origin."""
    real = TimelineContext.sun_visible
    asks: list = []

    def spy(self, hits, origins, directions, sun_dirs, need):
        rot = np.asarray(self.sensor_to_world)[:3, :3]
        d = np.asarray(directions, dtype=np.float64) @ rot.T
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        asks.append((np.array(need, bool), d[:, 0] * np.asarray(hits.range, dtype=np.float64)))
        return real(self, hits, origins, directions, sun_dirs, need)

    monkeypatch.setattr(TimelineContext, "sun_visible", spy)
    return asks


def floor_rows(res, x0=0.0):
    """(shadowed, lit) bool masks of the floor returns of ``res`` (world frame), by the
    module docstring's geometry moved by ``x0`` m along X, ``MARGIN`` away from the
    shadow's edges."""
    floor = on(res, "Floor")
    x = res.xyz[:, 0].astype(np.float64) - x0
    shadowed = floor & (x > 4.0 + MARGIN) & (x < 8.0 - MARGIN)
    lit = floor & ((x < 4.0 - MARGIN) | (x > 8.0 + MARGIN))
    return shadowed, lit


@pytest.mark.parametrize("backend, time_model", [("native", "continuous"), ("bvhtree", "continuous"),
                                                 ("native", "frame")])
def test_the_floor_in_a_walls_shadow_reads_the_sky_alone(bpy_mod, empty_scene, backend, time_model,
                                                         shadow_rays):
    """Floor returns in the wall's shadow read the sky's NEAR_IR, the others the sunlit
    value; the wall's face (away from the sun) reads the sky. The native library and the
    BVHTree fallback give the same answers, in continuous time (each row in its own time
    step) and with the frame held; one shadow ray per floor return at most."""
    import blensor_addon
    cam = build(bpy_mod)
    res = blensor_addon.scan(cam, seed=1, backend=backend, frame_of_reference="world", time_model=time_model)
    near = res.extra["near_ir"]
    shadowed, lit = floor_rows(res)
    wall = on(res, "Wall")
    assert shadowed.sum() > 500 and lit.sum() > 1000 and wall.sum() > 500
    np.testing.assert_allclose(near[shadowed], SKY_ONLY, rtol=1e-5)
    np.testing.assert_allclose(near[lit], SUN_LIT, rtol=1e-5)
    np.testing.assert_allclose(near[wall], SKY_ONLY, rtol=1e-5)
    # the rows before detection get the shadow rays: no more than the scan's rays, and
    # none for the wall's face
    assert on(res, "Floor").sum() <= sum(shadow_rays) <= res.num_rays - wall.sum()


def test_without_the_wall_the_whole_floor_is_sunlit(bpy_mod, empty_scene):
    """The same scene without the wall: every floor return reads the sunlit value (the
    shadow rays escape to the sun)."""
    import blensor_addon
    cam = build(bpy_mod, wall=False)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    floor = on(res, "Floor")
    assert floor.sum() > 2000 and floor.all()
    np.testing.assert_allclose(res.extra["near_ir"], SUN_LIT, rtol=1e-5)


@pytest.mark.parametrize("elevation", [-30.0, 0.0])
def test_a_sun_at_or_below_the_horizon_casts_no_shadow_ray(bpy_mod, empty_scene, shadow_rays, elevation):
    """A sun at or below the horizon faces neither the floor (its normal up) nor the wall's
    face (-X, the sun toward +X): the sky alone everywhere, and no shadow ray cast."""
    import blensor_addon
    cam = build(bpy_mod, elevation=elevation)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert len(res) > 2000
    np.testing.assert_allclose(res.extra["near_ir"], SKY_ONLY, rtol=1e-5)
    assert sum(shadow_rays) == 0


@pytest.mark.parametrize("backend", ["native", "bvhtree"])
def test_a_moving_wall_shadows_the_floor_where_it_stands_at_each_returns_time(bpy_mod, empty_scene, backend):
    """Continuous time: the wall slides along +X at 50 m/s (a driver, exact at subframes),
    standing at x_w(t) = 8 + 50 t m; a floor return fired at t lies in its shadow when
    x_w(t) - 4 <= x < x_w(t). The wall moves 2 m while the sensor sees the floor, so the shadow
    taken at the time steps' starts would misplace many of these returns."""
    import blensor_addon
    from test_continuous import drive
    v = 50.0
    cam = build(bpy_mod, wall=False)
    grey = bpy_mod.data.materials["Grey"]
    wall = add_mesh(bpy_mod, "Wall", [(0, -30, -10), (0, 30, -10), (0, 30, -6), (0, -30, -6)], [(0, 1, 2, 3)],
                    grey)
    drive(wall, "location", 0, f"8 + {v} * frame / 24")  # 24 fps: x_w = 8 + v t
    res = blensor_addon.scan(cam, seed=1, frame=0, backend=backend, frame_of_reference="world")
    t = res.timestamp.astype(np.float64)
    assert t.min() >= 0.0 and t.max() - t.min() > 0.03  # the floor: 40 ms of the sweep
    floor, x = on(res, "Floor"), res.xyz[:, 0].astype(np.float64)
    x_w = 8.0 + v * t
    shadowed = floor & (x > x_w - 4.0 + MARGIN) & (x < x_w - MARGIN)
    lit = floor & ((x < x_w - 4.0 - MARGIN) | (x > x_w + MARGIN))
    assert shadowed.sum() > 500 and lit.sum() > 1000
    near = res.extra["near_ir"]
    np.testing.assert_allclose(near[shadowed], SKY_ONLY, rtol=1e-5)
    np.testing.assert_allclose(near[lit], SUN_LIT, rtol=1e-5)
    # the wall where it stood at the first step's start (t = 0) would shadow other rows
    x_0 = 8.0
    moved = shadowed & ~((x >= x_0 - 4.0) & (x < x_0))
    assert moved.sum() > 100


def test_a_return_seen_in_a_mirror_is_not_shadow_tested(bpy_mod, empty_scene, shadow_asks, shadow_rays):
    """A vertical mirror at x = -8 m (facing +X) in front of the floor (x >= -8 m), no
    wall: a floor return seen in the mirror is reported at its virtual point behind the
    mirror (x < -8 m), from which a shadow ray toward the sun would meet the mirror; its
    path left the cast ray, so it is not tested and reads sunlit (its true point, on the
    open floor, is sunlit too). No shadow ray is cast for it: of the rows before detection,
    the rays cast are those of the rows on the floor in front of the mirror."""
    import blensor_addon
    grey = material(bpy_mod, "Grey", 0.5)
    add_mesh(bpy_mod, "Floor", *quad(-8, 30, -30, 30, -10.0), grey)
    glass = bpy_mod.data.materials.new("Mirror")
    glass.blensor.mirror = True
    add_mesh(bpy_mod, "Mirror", [(-8, -30, -10), (-8, 30, -10), (-8, 30, 20), (-8, -30, 20)], [(0, 1, 2, 3)],
             glass)
    set_world(bpy_mod, SKY)
    add_sun(bpy_mod, 45.0)
    res = blensor_addon.scan(sensor(bpy_mod), seed=1, frame_of_reference="world")
    floor = on(res, "Floor")
    virtual = floor & (res.xyz[:, 0] < -8.0 - MARGIN)
    assert virtual.sum() > 500 and (floor & ~virtual).sum() > 1000
    np.testing.assert_allclose(res.extra["near_ir"][floor], SUN_LIT, rtol=1e-5)
    need = np.concatenate([a[0] for a in shadow_asks])
    x = np.concatenate([a[1] for a in shadow_asks])
    assert need[x < -8.0 - MARGIN].sum() > 500  # asked for the rows seen in the mirror too
    # (the rows at the mirror's foot, within a few mm of it, are either)
    assert need[x > -8.0 + MARGIN].sum() <= sum(shadow_rays) <= need[x > -8.0 - MARGIN].sum()


# -- numpy-only units of core/sensors/ambient.py (no Blender) --------------------------------

UP, DOWN = (0.0, 0.0, 1.0), (0.0, 0.0, -1.0)
S45 = math.sqrt(0.5)


def lights_of(dirs, irradiance, sky=0.0):
    return ambient.Lights(np.array(dirs, float).reshape(-1, 3), np.array(irradiance, float), sky)


def test_sun_cosines_turn_the_normal_to_the_rays_side():
    """A floor's normal either way up, seen from above, gives the upper side's cosine; seen
    from below (a ray going up), the lower side's."""
    lights = lights_of([(S45, 0.0, S45), (0.0, 0.0, 1.0)], [100.0, 50.0])
    n = np.array([UP, DOWN, UP, DOWN])
    d = np.array([DOWN, DOWN, UP, UP])
    np.testing.assert_allclose(ambient.sun_cosines(lights, n, d),
                               [[S45, 1.0], [S45, 1.0], [-S45, -1.0], [-S45, -1.0]], atol=1e-15)


def test_sun_candidates_are_the_suns_of_positive_strength_facing_the_surface():
    lights = lights_of([(S45, 0.0, S45), (0.0, 0.0, 1.0), (0.0, S45, -S45)], [100.0, 0.0, 80.0])
    n = np.array([UP, DOWN, (0.0, 1.0, 0.0)])
    d = np.array([DOWN, UP, (0.0, -1.0, 0.0)])  # the wall (normal +Y) seen from +Y
    got = ambient.sun_candidates(lights, n, d)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, [[True, False, False], [False, False, True], [False, False, True]])


def test_irradiance_drops_each_hidden_sun_alone():
    lights = lights_of([(S45, 0.0, S45), (-S45, 0.0, S45)], [100.0, 40.0], sky=2.0)
    n, d = np.array([UP] * 4), np.array([DOWN] * 4)
    visible = np.array([[True, True], [False, True], [True, False], [False, False]])
    sky = math.pi * 2.0
    want = [sky + 140.0 * S45, sky + 40.0 * S45, sky + 100.0 * S45, sky]
    np.testing.assert_allclose(ambient.irradiance(lights, n, d, visible=visible), want, rtol=1e-12)
    np.testing.assert_allclose(ambient.irradiance(lights, n, d), [want[0]] * 4, rtol=1e-12)


class FakeShadowContext:
    """A context with ``sun_visible``: records its arguments, answers ``answer``."""

    def __init__(self, answer=None):
        self.calls: list = []
        self.answer = answer

    def sun_visible(self, hits, origins, directions, sun_dirs, need):
        self.calls.append((hits, origins, directions, sun_dirs, need))
        return self.answer if self.answer is not None else np.ones(need.shape, bool)


def test_shadows_asks_the_context_for_the_candidate_pairs_only():
    from types import SimpleNamespace
    lights = lights_of([(S45, 0.0, S45), (0.0, 0.0, 1.0)], [100.0, 0.0])
    hits = SimpleNamespace(normal=np.array([UP, DOWN, (1.0, 0.0, 0.0)], np.float32))
    ray = np.array([DOWN, DOWN, (1.0, 0.0, 0.0)])  # the third: a wall facing -X, away from the sun
    pattern = SimpleNamespace(origins=None, directions=np.array([DOWN, DOWN, (1.0, 0.0, 0.0)], np.float32))
    answer = np.array([[False, True], [True, True], [True, True]])
    ctx = FakeShadowContext(answer)
    assert ambient.shadows(ctx, hits, pattern, lights, ray) is answer
    (_, origins, directions, sun_dirs, need), = ctx.calls
    assert origins is None and directions.dtype == np.float64 and sun_dirs is lights.sun_dirs
    np.testing.assert_array_equal(need, [[True, False], [True, False], [False, False]])
    # no sun_visible, no sun of positive strength, or no pair facing a sun: no call, None
    assert ambient.shadows(object(), hits, pattern, lights, ray) is None
    ctx = FakeShadowContext()
    assert ambient.shadows(ctx, hits, pattern, lights_of([(S45, 0.0, S45)], [0.0]), ray) is None
    assert ambient.shadows(ctx, hits, pattern, lights_of([(0.0, 0.0, -1.0)], [100.0]), ray) is None
    assert ctx.calls == []


# -- real scenes ---------------------------------------------------------------------------


@pytest.fixture
def contexts(monkeypatch):
    """Every TimelineContext a scan makes (a list)."""
    made: list = []
    real = TimelineContext.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(TimelineContext, "__init__", spy)
    return made


@pytest.mark.parametrize("strength", [None, 0.0])
def test_without_a_sun_of_positive_strength_no_step_is_kept_and_no_shadow_ray_cast(
        bpy_mod, empty_scene, contexts, shadow_rays, strength):
    """A scene without a Sun light, or with one of strength 0, in continuous time: the
    contexts keep none of the time steps they cast (a step holds its snapshot and geometry;
    only the small pose segments are kept), and no shadow ray is cast; under a sun of
    positive strength the steps are kept for the shadow rays."""
    import blensor_addon
    cam = build(bpy_mod, sun=False)
    if strength is not None:
        add_sun(bpy_mod, 45.0, strength=strength)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert len(res) > 2000 and contexts
    np.testing.assert_allclose(res.extra["near_ir"][on(res, "Floor")], SKY_ONLY, rtol=1e-5)
    assert sum(len(c._segments) for c in contexts) > 0
    assert all(len(c._steps) == 0 for c in contexts)
    assert sum(shadow_rays) == 0
    contexts.clear()
    add_sun(bpy_mod, 45.0)
    blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert all(len(c._steps) == len(c._segments) for c in contexts)
    assert sum(len(c._steps) for c in contexts) > 0 and sum(shadow_rays) > 0


def test_a_sensor_far_from_the_world_origin_casts_its_shadow_rays_from_its_points(bpy_mod, empty_scene):
    """The whole scene and the sensor at (1000, -500, 3) m: the shadow band lies where it
    lies at the origin, moved with them (the points taken from the sensor's position, the
    shadow rays cast relative to the step's geometry origin)."""
    import blensor_addon
    at = (1000.0, -500.0, 3.0)
    cam = build(bpy_mod, at=at)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    shadowed, lit = floor_rows(res, x0=at[0])
    assert shadowed.sum() > 500 and lit.sum() > 1000
    near = res.extra["near_ir"]
    np.testing.assert_allclose(near[shadowed], SKY_ONLY, rtol=1e-5)
    np.testing.assert_allclose(near[lit], SUN_LIT, rtol=1e-5)


def test_a_moving_and_turning_sensor_tests_each_point_in_its_own_pose(bpy_mod, empty_scene):
    """Continuous time: the sensor moves along +Y at 20 m/s and turns about world Z at
    3 rad/s (drivers, exact at subframes); each return's point is taken with the pose at
    its own firing time (the pose at the packet's start would misplace the points by up to
    the turn over the packet), so the band behind the fixed wall reads the sky alone."""
    import blensor_addon
    from test_continuous import drive
    cam = build(bpy_mod)
    drive(cam, "location", 1, "20.0 * frame / 24")
    drive(cam, "rotation_euler", 2, "3.0 * frame / 24")
    res = blensor_addon.scan(cam, seed=1, frame=0, frame_of_reference="world")
    t = res.timestamp.astype(np.float64)
    assert t.max() - t.min() > 0.03
    shadowed, lit = floor_rows(res)
    assert shadowed.sum() > 500 and lit.sum() > 1000
    near = res.extra["near_ir"]
    np.testing.assert_allclose(near[shadowed], SKY_ONLY, rtol=1e-5)
    np.testing.assert_allclose(near[lit], SUN_LIT, rtol=1e-5)


@pytest.mark.parametrize("hidden_first", [True, False])
def test_of_two_suns_only_the_one_the_wall_hides_is_dropped(bpy_mod, empty_scene, hidden_first):
    """Two suns: the module docstring's (hidden by the wall from the band 4 <= x < 8 m) and
    one of half its strength toward -X at 45 deg (nothing hides it), added in either order:
    the band reads the sky and the second sun; the rest of the floor both suns; the wall's
    face (toward -X) the sky and the second sun at 45 deg."""
    import blensor_addon
    cam = build(bpy_mod, sun=False)
    suns = [(45.0, 0.0, SUN_100KLX), (45.0, 180.0, SUN_100KLX / 2)]
    for e, a, w in suns if hidden_first else suns[::-1]:
        add_sun(bpy_mod, e, a, strength=w)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    near = res.extra["near_ir"]
    shadowed, lit = floor_rows(res)
    wall = on(res, "Wall")
    assert shadowed.sum() > 500 and lit.sum() > 1000 and wall.sum() > 500
    s, sky = math.sin(math.radians(45.0)), math.pi * SKY
    np.testing.assert_allclose(near[shadowed], photons(0.5, SUN_100KLX / 2 * s + sky), rtol=1e-5)
    np.testing.assert_allclose(near[lit], photons(0.5, 1.5 * SUN_100KLX * s + sky), rtol=1e-5)
    np.testing.assert_allclose(near[wall], photons(0.5, SUN_100KLX / 2 * s + sky), rtol=1e-5)


def test_a_floor_wound_the_other_way_does_not_shadow_itself(bpy_mod, empty_scene):
    """The floor's faces wound the other way (its normal points down, away from the sensor
    and the sun): the shadow ray leaves on the sensor's side all the same and the open
    floor reads sunlit."""
    import blensor_addon
    grey = material(bpy_mod, "Grey", 0.5)
    v, f = quad(-30, 30, -30, 30, -10.0)
    add_mesh(bpy_mod, "Floor", v, [tuple(reversed(f[0]))], grey)
    set_world(bpy_mod, SKY)
    add_sun(bpy_mod, 45.0)
    res = blensor_addon.scan(sensor(bpy_mod), seed=1, frame_of_reference="world")
    floor = on(res, "Floor")
    assert floor.sum() > 2000 and floor.all()
    np.testing.assert_allclose(res.extra["near_ir"], SUN_LIT, rtol=1e-5)


def test_beam_footprints_on_an_open_floor_do_not_shadow_themselves(bpy_mod, empty_scene):
    """Seven sub-rays per beam at about 1 deg of divergence: every floor return (an echo
    mixed from its footprint) reads sunlit."""
    import blensor_addon
    cam = build(bpy_mod, wall=False)
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world", samples_per_beam=7,
                             beam_divergence=0.017, beam_divergence_vertical=0.017)
    floor = on(res, "Floor")
    assert floor.sum() > 2000 and floor.all()
    np.testing.assert_allclose(res.extra["near_ir"], SUN_LIT, rtol=1e-5)


def test_a_floor_seen_through_a_solid_glass_slab_is_not_shadow_tested(bpy_mod, empty_scene, shadow_rays):
    """A closed glass box 1 m thick (z from -6 to -5 m, |x|, |y| <= 3 m) between the sensor
    and the floor, a sun at 20 deg toward +X: a floor return through it left the box
    parallel to its entry, and its range (the path, ``ior`` times inside the glass) puts
    its point about 0.5 m under the floor, from where a shadow ray would meet the floor. Its
    path passed glass, so it is not tested and reads sunlit (its true point is: the shadow
    ray from it rises 4 m over 11 m, past the box)."""
    import blensor_addon
    grey = material(bpy_mod, "Grey", 0.5)
    add_mesh(bpy_mod, "Floor", *quad(-30, 30, -30, 30, -10.0), grey)
    glass = bpy_mod.data.materials.new("Glass")
    if bpy_mod.app.version < (5, 0, 0):
        glass.use_nodes = True
    bsdf = next(n for n in glass.node_tree.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    bsdf.inputs["Transmission Weight"].default_value = 1.0
    bsdf.inputs["IOR"].default_value = 1.5
    v = [(x, y, z) for x in (-3, 3) for y in (-3, 3) for z in (-6, -5)]
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    add_mesh(bpy_mod, "Glass", v, faces, glass)
    set_world(bpy_mod, SKY)
    add_sun(bpy_mod, 20.0)
    res = blensor_addon.scan(sensor(bpy_mod), seed=1, frame_of_reference="world")
    floor = on(res, "Floor")
    xyz = res.xyz.astype(np.float64)
    through = floor & (np.abs(xyz[:, 0]) < 2.0) & (np.abs(xyz[:, 1]) < 2.0)
    assert through.sum() > 100 and (xyz[through, 2] < -10.3).all()  # the virtual points
    sunlit = photons(0.5, SUN_100KLX * math.sin(math.radians(20.0)) + math.pi * SKY)
    np.testing.assert_allclose(res.extra["near_ir"][through], sunlit, rtol=1e-5)


def test_the_shadow_rays_start_in_the_step_the_backend_holds(bpy_mod, empty_scene, monkeypatch):
    """Continuous time, a packet cast in several time steps: :meth:`TimelineContext.sun_visible`
    casts first the shadow rays of the step whose geometry the backend already holds (the
    last one the packet cast), so it gives the backend only the other steps' geometry."""
    import blensor_addon
    from mathutils import Matrix
    real = TimelineContext.sun_visible
    calls: list = []  # per call: (steps intersected in order, the step held at entry, set_geometry calls)

    def spy(self, *args, **kwargs):
        held, steps, sets = self._current, [], [0]
        inner_set, inner_hit = self.backend.set_geometry, self.backend.intersect

        def counting_set(geometry):
            sets[0] += 1
            return inner_set(geometry)

        def recording_hit(*a, **kw):
            steps.append(self._current)
            return inner_hit(*a, **kw)
        monkeypatch.setattr(self.backend, "set_geometry", counting_set)
        monkeypatch.setattr(self.backend, "intersect", recording_hit)
        try:
            return real(self, *args, **kwargs)
        finally:
            monkeypatch.setattr(self.backend, "set_geometry", inner_set)
            monkeypatch.setattr(self.backend, "intersect", inner_hit)
            calls.append((steps, held, sets[0]))

    monkeypatch.setattr(TimelineContext, "sun_visible", spy)
    cam = build(bpy_mod)
    # the sweep turned half a revolution about its axis (world Y): its last step sees the floor
    cam.rotation_euler = (Matrix.Rotation(math.pi, 3, "Y") @ cam.rotation_euler.to_matrix()).to_euler()
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert len(res) > 2000
    several = [c for c in calls if len(c[0]) > 1 and any(s is c[1] for s in c[0])]
    assert several  # a packet whose shadow rays lie in several steps, the held one among them
    for steps, held, sets in calls:
        assert len(set(map(id, steps))) == len(steps)  # each step once
        tested = any(s is held for s in steps)
        if tested:
            assert steps[0] is held
        assert sets == len(steps) - tested


@pytest.fixture
def casts(monkeypatch):
    """The hits of every step of every cast a scan makes (a list of CastHits)."""
    made: list = []
    real = TimelineContext._cast_step

    def spy(self, *args, **kwargs):
        hits = real(self, *args, **kwargs)
        made.append(hits)
        return hits

    monkeypatch.setattr(TimelineContext, "_cast_step", spy)
    return made


def test_the_cast_rays_pose_is_kept_only_under_a_sun_and_one_ray_per_beam(bpy_mod, empty_scene, casts):
    """``CastHits.POSE`` (the cast rays' world pose, for the shadow rays) holds nothing
    without a sun, nor for beam footprints (their echoes are tested at the beam's axis);
    under a sun with one ray per beam it holds each row's ray."""
    import blensor_addon
    from blensor_addon.scene.context import CastHits
    cam = build(bpy_mod, sun=False)
    blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert casts and all(getattr(h, k) is None for h in casts for k in CastHits.POSE)
    add_sun(bpy_mod, 45.0)
    casts.clear()
    blensor_addon.scan(cam, seed=1, frame_of_reference="world", samples_per_beam=7,
                       beam_divergence=0.017, beam_divergence_vertical=0.017)
    assert casts and all(getattr(h, k) is None for h in casts for k in CastHits.POSE)
    casts.clear()
    blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert casts
    for h in casts:
        n = h.range.shape[0]
        assert h.ray_position.shape == h.ray_direction.shape == (n, 3)
        assert h.ray_position.dtype == h.ray_direction.dtype == np.float64


def test_the_kept_pose_is_the_pose_the_shadow_rays_took_from_the_timeline(bpy_mod, empty_scene, monkeypatch):
    """Under a sun, the rows :meth:`TimelineContext.sun_visible` is given carry their cast
    ray's world pose, bit for bit what the context's ``position`` and ``rotate`` give at the
    rows' times (the values the shadow rays start from; a moving, turning sensor)."""
    import blensor_addon
    from test_continuous import drive
    real = TimelineContext.sun_visible
    seen: list = []

    def spy(self, hits, origins, directions, sun_dirs, need):
        rows = np.flatnonzero(np.asarray(need).any(axis=1) & (np.asarray(hits.bounces) == 0))
        sub = hits.take(rows)
        seen.append(rows.size)
        np.testing.assert_array_equal(sub.ray_position, self.position(sub))
        np.testing.assert_array_equal(sub.ray_direction, self.rotate(sub, np.asarray(directions)[rows]))
        if origins is None:
            assert sub.ray_offset is None
        else:
            np.testing.assert_array_equal(sub.ray_offset, self.rotate(sub, np.asarray(origins)[rows]))
        return real(self, hits, origins, directions, sun_dirs, need)

    monkeypatch.setattr(TimelineContext, "sun_visible", spy)
    cam = build(bpy_mod)
    drive(cam, "location", 0, "3 * frame / 24")  # 3 m/s along X
    drive(cam, "rotation_euler", 2, "0.5 * frame / 24")  # turning about Z
    res = blensor_addon.scan(cam, seed=1, frame_of_reference="world")
    assert len(res) > 2000 and sum(seen) > 2000
