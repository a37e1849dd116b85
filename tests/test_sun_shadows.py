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

from blensor_addon.scene.context import TimelineContext

SKY = 0.5
SUN_LIT = photons(0.5, SUN_100KLX * math.sin(math.radians(45.0)) + math.pi * SKY)
SKY_ONLY = photons(0.5, math.pi * SKY)
#: m: rows this close to the shadow's edges (x = 4 and x = 8) are not classified
MARGIN = 0.05


def build(bpy, wall=True, elevation=45.0, azimuth=0.0):
    """The module docstring's scene (``wall``: with the wall); returns the sensor."""
    grey = material(bpy, "Grey", 0.5)
    add_mesh(bpy, "Floor", *quad(-30, 30, -30, 30, -10.0), grey)
    if wall:
        add_mesh(bpy, "Wall", [(8, -30, -10), (8, 30, -10), (8, 30, -6), (8, -30, -6)], [(0, 1, 2, 3)], grey)
    set_world(bpy, SKY)
    add_sun(bpy, elevation, azimuth)
    return sensor(bpy)


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


def floor_rows(res):
    """(shadowed, lit) bool masks of the floor returns of ``res`` (world frame), by the
    module docstring's geometry, ``MARGIN`` away from the shadow's edges."""
    floor = on(res, "Floor")
    x = res.xyz[:, 0].astype(np.float64)
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


def test_a_return_seen_in_a_mirror_is_not_shadow_tested(bpy_mod, empty_scene, shadow_rays):
    """A vertical mirror at x = -8 m (facing +X) in front of the floor (x >= -8 m), no
    wall: a floor return seen in the mirror is reported at its virtual point behind the
    mirror (x < -8 m), from which a shadow ray toward the sun would meet the mirror; its
    path left the cast ray, so it is not tested and reads sunlit (its true point, on the
    open floor, is sunlit too). No shadow ray is cast for it."""
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
    assert sum(shadow_rays) <= floor.sum() - virtual.sum()
