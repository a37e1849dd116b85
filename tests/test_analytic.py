"""Scans of real Blender geometry against closed-form ranges (seed 001 Eq. 1 and 9),
mirrors (seed 000 section 3.5), the reflectivity limit (seed 000 Eq. 1) and intensity
(seed 002 Eq. 4)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from conftest import add_camera, add_mesh, cylinder_mesh, generic_sensor, quad

BACKENDS = ["native", "bvhtree"]


def column_azimuth_deg(result, start, res):
    """Exact (float64) column azimuths, recovered from the float32 output."""
    k = np.round(np.mod(np.rad2deg(result.azimuth.astype(np.float64)) - start, 360.0) / res)
    return start + k * res


@pytest.mark.parametrize("backend", BACKENDS)
def test_wall_range_is_h_sec_theta(bpy_mod, empty_scene, backend):
    # seed 001 Eq. 1: a wall at perpendicular distance H gives r(theta) = H sec(theta);
    # the sensor looks down -Z, so the wall is the plane z = -H.
    H = 10.0
    v, f = quad(-200, 200, -50, 50, -H)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.25, max_range=50.0)
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    assert len(r) == r.num_rays == 480
    theta = np.deg2rad(column_azimuth_deg(r, -60.0, 0.25))
    np.testing.assert_allclose(r.range, H / np.cos(theta), atol=1e-4, rtol=0)
    # points lie on the wall, noise off: noisy == clean
    np.testing.assert_allclose(r.xyz[:, 2], -H, atol=1e-4)
    assert np.array_equal(r.range_noisy, r.range)
    # intensity = reflectivity (0.8 default) x cos(incidence) (seed 002 Eq. 4)
    np.testing.assert_allclose(r.intensity, 0.8 * np.cos(theta), atol=1e-5)
    # normals face the sensor whatever the winding: flip the wall and scan again
    np.testing.assert_allclose(r.normal, np.tile([0.0, 0.0, 1.0], (len(r), 1)), atol=1e-6)
    wall = bpy_mod.data.objects["Wall"]
    wall.data.flip_normals()
    again = blensor_addon.scan(cam, axes="blensor", backend=backend)
    np.testing.assert_allclose(again.normal, r.normal, atol=1e-6)
    names = {o["id"]: o["name"] for o in r.objects}
    assert {names[i] for i in np.unique(r.object_id)} == {"Wall"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_floor_range_per_elevation(bpy_mod, empty_scene, backend):
    # a plane 2 m below the sensor (sensor +Y is up): r = h / sin(-elevation) for every azimuth
    h = 2.0
    add_mesh(bpy_mod, "Floor", [(-300, -h, -300), (300, -h, -300), (300, -h, 300), (-300, -h, 300)],
             [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "-5, -10, -30, 10", angle_resolution=1.0, max_range=100.0)
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    assert r.num_rays == 360 * 4
    assert len(r) == 360 * 3  # the upward laser never returns
    el = r.elevation.astype(np.float64)
    exact = np.deg2rad(np.array([-5.0, -10.0, -30.0]))[r.channel]
    np.testing.assert_allclose(el, exact, atol=1e-7)
    np.testing.assert_allclose(r.range, h / np.sin(-exact), atol=1e-4, rtol=0)
    np.testing.assert_allclose(r.xyz[:, 1], -h, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cylinder_around_sensor_gives_radius(bpy_mod, empty_scene, backend):
    # seed 001 Eq. 9: inside a circle of radius r1 centred on the scanner, r(theta) = r1.
    # The cylinder axis is the spin axis (sensor +Y); 720 facets deviate < 5e-5 m at R = 5.
    R = 5.0
    v, f = cylinder_mesh(R, -3.0, 3.0)
    obj = add_mesh(bpy_mod, "Tube", v, f)
    obj.rotation_euler = (math.pi / 2, 0, 0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=0.5)
    r = blensor_addon.scan(cam, backend=backend)
    assert len(r) == 720
    assert np.abs(r.range - R).max() < 1e-4
    # the camera's own pose does not matter: move and turn the whole rig
    obj.location = cam.location = (3.0, -1.0, 7.0)
    r2 = blensor_addon.scan(cam, backend=backend, frame_of_reference="world")
    assert np.abs(r2.range - R).max() < 1e-4
    np.testing.assert_allclose(np.linalg.norm(r2.xyz[:, [0, 2]] - [3.0, 7.0], axis=1), R, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mirror_makes_virtual_points_at_accumulated_distance(bpy_mod, empty_scene, backend):
    # a mirror 4 m ahead (plane x + z = -4, normal (1, 0, 1)/sqrt2) sends rays toward +X
    # onto a wall x = 6; the points appear behind the mirror at 4 + 6 = 10 m along the ray
    mat = bpy_mod.data.materials.new("Mirror")
    mat.blensor.mirror = True
    d = 1.0
    add_mesh(bpy_mod, "Mirror", [(-d, -d, -4 + d), (d, -d, -4 - d), (d, d, -4 - d), (-d, d, -4 + d)],
             [(0, 1, 2, 3)], mat)
    add_mesh(bpy_mod, "Wall", [(6, -50, -50), (6, 50, -50), (6, 50, 50), (6, -50, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-0.5, end_angle=0.5, angle_resolution=0.25)
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    assert len(r) == 4
    assert {o["name"] for o in r.objects if o["id"] in set(r.object_id.tolist())} == {"Wall"}
    theta = np.deg2rad(column_azimuth_deg(r, -0.5, 0.25))
    # ray (-sin t, 0, -cos t) meets x + z = -4 after s1 = 4 / (sin t + cos t); reflected about
    # n = (1, 0, 1)/sqrt2 it runs along (cos t, 0, sin t) and meets x = 6 after s2
    s1 = 4.0 / (np.cos(theta) + np.sin(theta))
    hit_x = -np.sin(theta) * s1
    s2 = (6.0 - hit_x) / np.cos(theta)
    np.testing.assert_allclose(r.range, s1 + s2, atol=1e-4)
    # the virtual point is along the original ray, behind the mirror
    assert np.all(r.xyz[:, 2] < -9.9)
    mat.blensor.mirror = False
    r3 = blensor_addon.scan(cam, axes="blensor", backend=backend)
    np.testing.assert_allclose(r3.range, s1, atol=1e-4)
    cam.data.blensor.max_bounces = 0
    mat.blensor.mirror = True
    assert len(blensor_addon.scan(cam, backend=backend)) == 0


def test_reflectivity_limit_drops_dark_far_surfaces(bpy_mod, empty_scene):
    # seed 000 Eq. 1 with 10 % at 50 m and 80 % at 120 m: at 80 m the limit is 0.4
    dark = bpy_mod.data.materials.new("Dark")
    dark.blensor.reflectivity = 0.3
    bright = bpy_mod.data.materials.new("Bright")
    bright.blensor.reflectivity = 0.5
    v, f = quad(-100, 0, -50, 50, -80)
    add_mesh(bpy_mod, "DarkWall", v, f, dark)
    v, f = quad(0, 100, -50, 50, -80)
    add_mesh(bpy_mod, "BrightWall", v, f, bright)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-10.25, end_angle=9.75, angle_resolution=0.5,
                   ref_dist=50.0, ref_limit=0.1, ref_slope=0.01)
    r = blensor_addon.scan(cam)
    names = {o["id"]: o["name"] for o in r.objects}
    assert {names[i] for i in np.unique(r.object_id)} == {"BrightWall"}
    # of 40 columns (the head turns clockwise, issue 21: 9.75 deg down to -9.75 deg), the 20
    # at -0.25..-9.75 deg look at the bright wall (+X); counter-clockwise (-10.25..9.25): 21
    assert len(r) == 20
    assert len(blensor_addon.scan(cam, rotation_direction="ccw")) == 21
    np.testing.assert_allclose(r.reflectivity, 0.5)
    cam.data.blensor.ref_limit = -1.0  # no cut-off
    assert len(blensor_addon.scan(cam)) == 40


@pytest.mark.parametrize("backend", BACKENDS)
def test_precision_100_km_from_the_origin(bpy_mod, empty_scene, backend):
    # the same wall and sensor at the origin and 100 km away: the sensor position is
    # subtracted in float64 before the float32 rounding, so ranges agree within 1e-4 m
    H = 10.0
    v, f = quad(-200, 200, -50, 50, -H)
    wall = add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "-10, 0, 10", start_angle=-60.0, end_angle=60.0, angle_resolution=0.5, max_range=60.0)
    near = blensor_addon.scan(cam, backend=backend)
    far = (100_000.0, 70_000.0, 1_000.0)
    wall.location = far
    cam.location = far
    bpy_mod.context.view_layer.update()
    r = blensor_addon.scan(cam, backend=backend, frame_of_reference="world")
    assert len(r) == len(near) == near.num_rays
    np.testing.assert_allclose(r.range, near.range, atol=1e-4, rtol=0)
    theta = np.deg2rad(column_azimuth_deg(r, -60.0, 0.5))
    np.testing.assert_allclose(r.range, H / np.cos(theta) / np.cos(r.elevation.astype(np.float64)),
                               atol=1e-4, rtol=0)
    # world coordinates are float32: far from the origin only their spacing (8 mm) limits them
    np.testing.assert_allclose(r.xyz[:, 2], far[2] - H, atol=1e-4)


def test_chunked_casting_gives_the_same_result(bpy_mod, crossing, monkeypatch):
    from blensor_addon.core.sensors import rotating
    cam = bpy_mod.data.objects["Velodyne"]
    whole = blensor_addon.scan(cam, frame=12)
    monkeypatch.setattr(rotating, "CHUNK_RAYS", 1000)  # 139 chunks of 15 columns x 64 lasers
    parts = blensor_addon.scan(cam, frame=12)
    assert whole.num_rays == parts.num_rays == 2083 * 64 and len(whole) > 100_000
    for name, a in whole.arrays().items():
        assert np.array_equal(a, getattr(parts, name)), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_geometry_is_left_out_with_one_warning(bpy_mod, empty_scene, backend, capsys):
    # a wall of a quad and a triangle with a NaN vertex; an object with a NaN location; the
    # scan keeps the finite quad (analytic ranges) and names each object once
    H = 10.0
    verts = [(-20, -5, -H), (0, -5, -H), (0, 5, -H), (-20, 5, -H), (20, -5, -H), (20, 5, -H)]
    wall = add_mesh(bpy_mod, "Wall", verts, [(0, 1, 2, 3), (1, 4, 2)])
    wall.data.vertices[4].co = (float("nan"), -5.0, -H)
    lost = add_mesh(bpy_mod, "Lost", *quad(-50, 50, -50, 50, -5.0))
    lost.location = (float("nan"), 0.0, 0.0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.5, max_range=50.0,
                   time_model="frame")
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    az = column_azimuth_deg(r, -60.0, 0.5)
    # only the finite quad (x <= 0) returns: the triangle with the NaN vertex is gone
    assert len(r) > 0 and np.all(r.xyz[:, 0] <= 1e-4)
    np.testing.assert_allclose(r.range, H / np.cos(np.deg2rad(az)), atol=1e-4, rtol=0)
    err = capsys.readouterr().err
    assert err.count("object 'Wall' has non-finite") == 1 and err.count("object 'Lost' has non-finite") == 1
    # continuous time interpolates transforms: a NaN one is refused, naming the object
    with pytest.raises(SettingsError, match="transform of object 'Lost' must be finite at every time scanned"):
        blensor_addon.scan(cam, axes="blensor", backend=backend, time_model="continuous")


def test_flat_object_scaled_to_zero_on_one_axis_returns_on_both_backends(bpy_mod, empty_scene):
    # a 2 m cube scaled (1, 1, 0) at z = -6: flat, yet it renders; the native library
    # bakes it into world space, so both backends see the square at range 6 m
    cube = add_mesh(bpy_mod, "Flat", [(x, y, z) for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)],
                    [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)])
    cube.location = (0.0, 0.0, -6.0)
    cube.scale = (1.0, 1.0, 0.0)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-5.0, end_angle=5.0, angle_resolution=1.0)
    res = {b: blensor_addon.scan(cam, backend=b) for b in BACKENDS}
    theta = np.deg2rad(column_azimuth_deg(res["native"], -5.0, 1.0))
    assert len(res["native"]) == len(res["bvhtree"]) == 10
    np.testing.assert_allclose(res["native"].range, 6.0 / np.cos(theta), atol=1e-4, rtol=0)
    np.testing.assert_allclose(res["native"].range, res["bvhtree"].range, atol=1e-4, rtol=0)


def test_memory_grows_with_returns_not_with_rays(bpy_mod, empty_scene):
    # 2.3 M rays (64 lasers at 0.01 deg) at a small wall: rays are made and cast in chunks,
    # so the peak of numpy's allocations stays far below what 2.3 M rays at once would take
    import tracemalloc
    add_mesh(bpy_mod, "Small", *quad(-1, 1, -1, 1, -10.0))
    cam = add_camera(bpy_mod)
    generic_sensor(cam, ",".join(str(-30 + i) for i in range(64)), angle_resolution=0.01)
    tracemalloc.start()
    try:
        r = blensor_addon.scan(cam)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.num_rays == 36000 * 64 and 0 < len(r) < 20000
    assert peak < 120e6, f"peak {peak / 1e6:.0f} MB"  # measured: 56 MB; all rays at once: 372 MB


def test_scan_casts_with_one_blas_thread(bpy_mod, empty_scene, monkeypatch):
    # OpenBLAS's spinning workers would take a core from the ray caster (process/blas.py)
    from threadpoolctl import threadpool_info, threadpool_limits

    from blensor_addon.core.packets import Packet
    from blensor_addon.scene.scanner import Scanner
    v, f = quad(-200, 200, -50, 50, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.25, max_range=50.0)
    seen = []
    with threadpool_limits(limits=2, user_api="blas"):
        outside = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        sc = Scanner(cam, backend="native")
        scan = sc.sensor.scan

        def recording(*a, **kw):
            seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
            return scan(*a, **kw)

        monkeypatch.setattr(sc.sensor, "scan", recording)
        assert len(sc.scan(Packet("single", 1))[0]) == 480
        sc.close()
        assert seen and set(seen) == {1}
        assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == outside
