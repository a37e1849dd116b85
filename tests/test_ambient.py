"""Ambient light of the radiometric return model (core/sensors/ambient.py, scene/lights.py;
docs/physics.md, "Ambient light"): real Blender scenes with Lambertian plates, Sun lights and
a world background, scanned by the OS1-64 preset (its default model is the radiometric one).
The sensor camera is not rotated: it looks down world -Z, spins about world Y; world Z is up,
so a plate at z = -10 m is horizontal and a Sun's elevation is measured from the XY plane.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import add_camera, add_mesh, quad

from blensor_addon.core.sensors import ambient

#: W/m^2 of a Blender sun giving the datasheets' 100 klx (core/sensors/ambient.py, 2.)
SUN_100KLX = 100e3 / ambient.LUMINOUS_EFFICACY


def photons(rho: float, irradiance_w: float) -> float:
    """The ambient photons of a ``rho`` surface under ``irradiance_w`` W/m^2 (the module's
    formula written out: 720 photons for 100 % at the OS1's 100 klx)."""
    return ambient.NEAR_IR_PHOTONS * rho * irradiance_w * ambient.LUMINOUS_EFFICACY / 1000.0 / 100.0


def material(bpy, name, rho):
    m = bpy.data.materials.new(name)
    m.blensor.reflectivity = rho
    return m


def set_world(bpy, strength):
    """The scene's world: none for ``strength`` None, else a white constant Background."""
    scene = bpy.context.scene
    if strength is None:
        scene.world = None
        return
    world = bpy.data.worlds.new("Sky")
    if world.node_tree is None:
        world.use_nodes = True
    bg = next(n for n in world.node_tree.nodes if n.bl_idname == "ShaderNodeBackground")
    bg.inputs["Color"].default_value = (1.0, 1.0, 1.0, 1.0)
    bg.inputs["Strength"].default_value = strength
    scene.world = world


def add_sun(bpy, elevation_deg, azimuth_deg=0.0, strength=SUN_100KLX):
    """A Sun light toward (cos e cos a, cos e sin a, sin e) (its local +Z points there)."""
    from mathutils import Vector
    e, a = math.radians(elevation_deg), math.radians(azimuth_deg)
    toward = Vector((math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)))
    light = bpy.data.lights.new("Sun", "SUN")
    light.energy = strength
    ob = bpy.data.objects.new("Sun", light)
    ob.rotation_mode = "QUATERNION"
    ob.rotation_quaternion = toward.to_track_quat("Z", "Y")
    bpy.context.scene.collection.objects.link(ob)
    return ob


def sensor(bpy):
    cam = add_camera(bpy)
    cam.data.blensor.preset = "os1_64"
    assert cam.data.blensor.return_model == "radiometric"
    return cam


def on(result, name):
    """(N,) bool: the returns on object ``name``."""
    ids = [o["id"] for o in result.objects if o["name"] == name]
    return np.isin(result.object_id, ids)


def test_a_scene_without_light_reads_near_ir_0(bpy_mod, empty_scene):
    """No Sun light and no world, or a world of strength 0: night, NEAR_IR 0 exactly."""
    import blensor_addon
    add_mesh(bpy_mod, "Floor", *quad(-30, 30, -30, 30, -10.0), material(bpy_mod, "Grey", 0.5))
    cam = sensor(bpy_mod)
    for strength in (None, 0.0):
        set_world(bpy_mod, strength)
        res = blensor_addon.scan(cam, seed=1)
        near = res.extra["near_ir"]
        assert near.dtype == np.float32 and near.shape[0] > 1000
        assert (near == 0.0).all()


def test_a_sun_the_scan_does_not_see_does_not_light(bpy_mod, empty_scene):
    """A Sun hidden from render lights nothing in a render-visibility scan (the default) and
    lights in a viewport one; a Sun hidden in the viewport the other way round."""
    import blensor_addon
    add_mesh(bpy_mod, "Floor", *quad(-30, 30, -30, 30, -10.0), material(bpy_mod, "Grey", 0.5))
    set_world(bpy_mod, None)
    sun = add_sun(bpy_mod, 90.0)
    cam = sensor(bpy_mod)
    lit = photons(0.5, SUN_100KLX)
    sun.hide_render = True
    assert (blensor_addon.scan(cam, seed=1).extra["near_ir"] == 0.0).all()
    np.testing.assert_allclose(blensor_addon.scan(cam, seed=1, visibility="viewport").extra["near_ir"], lit,
                               rtol=1e-5)
    sun.hide_render = False
    sun.hide_set(True)
    np.testing.assert_allclose(blensor_addon.scan(cam, seed=1).extra["near_ir"], lit, rtol=1e-5)
    assert (blensor_addon.scan(cam, seed=1, visibility="viewport").extra["near_ir"] == 0.0).all()


def test_near_ir_on_a_sunlit_plate_follows_the_sine_of_the_sun_elevation(bpy_mod, empty_scene):
    """A horizontal 50 % plate under a sun of 100 klx at 10-90 deg elevation, no sky: NEAR_IR
    = 720 x 0.5 x sin(elevation) on every return, to float32 rounding (a flat plate's normal
    is exact; nothing else lights it)."""
    import blensor_addon
    add_mesh(bpy_mod, "Floor", *quad(-30, 30, -30, 30, -10.0), material(bpy_mod, "Grey", 0.5))
    set_world(bpy_mod, None)
    cam = sensor(bpy_mod)
    medians = []
    for elevation in (10, 30, 50, 70, 90):
        sun = add_sun(bpy_mod, elevation)
        near = blensor_addon.scan(cam, seed=1).extra["near_ir"]
        assert near.shape[0] > 1000
        expected = photons(0.5, SUN_100KLX * math.sin(math.radians(elevation)))
        np.testing.assert_allclose(near, expected, rtol=1e-5)
        medians.append(float(np.median(near)))
        bpy_mod.data.objects.remove(sun)
    assert np.all(np.diff(medians) > 0)
    assert medians[-1] == pytest.approx(360.0, rel=1e-5)


def test_a_plate_facing_away_from_the_sun_reads_the_sky_alone(bpy_mod, empty_scene):
    """A wall 10 m along +X facing the sensor (-X), the sun beyond it and to its side (30 deg
    up, azimuth 80 deg from +X: the wall's shadow falls beside the floor's returns), a white
    sky of strength 0.5: the wall reads the sky term (pi x 0.5 W/m^2), the floor the sun's
    sin(30 deg) share plus the sky."""
    import blensor_addon
    grey = material(bpy_mod, "Grey", 0.5)
    add_mesh(bpy_mod, "Floor", *quad(-30, 5, -30, 30, -10.0), grey)
    wall = [(10, -20, -9), (10, 20, -9), (10, 20, 20), (10, -20, 20)]
    add_mesh(bpy_mod, "Wall", wall, [(0, 1, 2, 3)], grey)
    set_world(bpy_mod, 0.5)
    add_sun(bpy_mod, 30.0, 80.0)
    res = blensor_addon.scan(sensor(bpy_mod), seed=1)
    near = res.extra["near_ir"]
    wall, floor = on(res, "Wall"), on(res, "Floor")
    assert wall.sum() > 100 and floor.sum() > 100
    np.testing.assert_allclose(near[wall], photons(0.5, math.pi * 0.5), rtol=1e-5)
    np.testing.assert_allclose(near[floor], photons(0.5, SUN_100KLX * 0.5 + math.pi * 0.5), rtol=1e-5)


def near_normal_count(bpy, rho, distance, day, seeds=(1, 2, 3)):
    """Returns within 5 deg of normal incidence on a ``rho`` plate ``distance`` m ahead,
    summed over ``seeds``, lit by a 100 klx sun along its normal (``day``) or by nothing."""
    import blensor_addon
    bpy.ops.wm.read_factory_settings(use_empty=True)
    add_mesh(bpy, "Plate", *quad(-20, 20, -20, 20, -distance), material(bpy, "P", rho))
    set_world(bpy, None)
    if day:
        add_sun(bpy, 90.0)
    cam = sensor(bpy)
    n = 0
    for seed in seeds:
        res = blensor_addon.scan(cam, seed=seed)
        cos = np.cos(res.elevation.astype(np.float64)) * np.cos(res.azimuth.astype(np.float64))
        n += int((cos > math.cos(math.radians(5.0))).sum())
    return n


def test_a_10_percent_plate_is_seen_farther_at_night_and_as_the_datasheet_says_at_100_klx(bpy_mod):
    """The OS1-64's datasheet (core/tables/radiometry.json, ``os1_64``: 10 % at 40 m, 100 klx):
    at 100 klx on the plate, >= 90 % of the near-normal rays return at 0.9 x 40 m and <= 20 %
    at 1.2 x 40 m (the count of a 100 % plate at the same range is every ray's); at night
    the 1.2 x plate returns more than twice as often (the dark noise alone: SNR x 1.41)."""
    rays = near_normal_count(bpy_mod, 1.0, 48.0, True)
    assert rays > 500
    assert near_normal_count(bpy_mod, 1.0, 36.0, True) == rays  # the same rays at 0.9 x
    day_near = near_normal_count(bpy_mod, 0.1, 36.0, True) / rays
    day_far = near_normal_count(bpy_mod, 0.1, 48.0, True) / rays
    night_far = near_normal_count(bpy_mod, 0.1, 48.0, False) / rays
    assert day_near >= 0.9
    assert day_far <= 0.2
    assert night_far > 2.0 * day_far and night_far > 0.5


def test_the_same_seed_gives_the_same_bytes_and_the_lights_are_read_once(bpy_mod, empty_scene, monkeypatch):
    """Two scans of an unchanged lit scene give the same bytes from one reading of its
    lights (kept with the scene's snapshot); a changed sun strength is read again."""
    import blensor_addon
    from blensor_addon.scene import extract
    calls = []
    real = extract.read_lights
    monkeypatch.setattr(extract, "read_lights", lambda *a: calls.append(1) or real(*a))
    add_mesh(bpy_mod, "Floor", *quad(-30, 30, -30, 30, -10.0), material(bpy_mod, "Grey", 0.3))
    set_world(bpy_mod, 0.2)
    sun = add_sun(bpy_mod, 40.0)
    cam = sensor(bpy_mod)
    a, b = (blensor_addon.scan(cam, seed=5) for _ in range(2))
    assert len(calls) == 1
    for k in ("range_noisy", "xyz_noisy"):
        assert getattr(a, k).tobytes() == getattr(b, k).tobytes()
    assert a.extra["near_ir"].tobytes() == b.extra["near_ir"].tobytes()
    sun.data.energy = SUN_100KLX / 2
    c = blensor_addon.scan(cam, seed=5)
    assert len(calls) == 2
    sin40 = math.sin(math.radians(40.0))
    np.testing.assert_allclose(c.extra["near_ir"], photons(0.3, SUN_100KLX / 2 * sin40 + math.pi * 0.2),
                               rtol=1e-5)
