"""Every sensor type on the one interface, against closed forms (seed 001 Eq. 1-9, seed 000
Eq. 3, the specular-reflection law, Blender's own camera projection), plus the registry,
overrides, bad input and the v0.1 file."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.sensors import COMMON, SENSORS
from conftest import ROOT, add_camera, add_mesh, cylinder_mesh

BACKENDS = ["native", "bvhtree"]
DATA = Path(__file__).resolve().parent / "data"
UP = (math.pi / 2, 0.0, 0.0)  # camera rotation: sensor +Y = world +Z, looking along world +Y


def use(cam, sensor_type, **values):
    """Set the camera's sensor type and that type's stored settings."""
    props = cam.data.blensor
    props.sensor_type = sensor_type
    group = getattr(props, sensor_type) if SENSORS[sensor_type].storage else props
    for k, v in values.items():
        setattr(props if k in COMMON else group, k, v)
    return group


# ---------------------------------------------------------------------------------------
# interface


def test_every_setting_has_metadata_and_every_preset_validates():
    for name, sensor in SENSORS.items():
        for f in dataclasses.fields(sensor.Settings):
            meta = f.metadata["blensor"]
            assert meta.label and meta.description and meta.allowed(), (name, f.name)
            meta.check(f.name, f.default)  # the default is allowed
        for preset in sensor.presets:
            sensor.settings(sensor.preset_values(preset))


def test_v01_file_scans_byte_identically(bpy_mod):
    bpy_mod.ops.wm.open_mainfile(filepath=str(DATA / "v01_scene.blend"))
    cam = bpy_mod.data.objects["Lidar"]
    assert cam.data.blensor.sensor_type == "rotating" and cam.data.blensor.preset == "vlp16"
    assert cam.data.blensor.time_model == "frame"  # not stored in v0.1: the frozen-frame model it had
    r = blensor_addon.scan(cam, axes="blensor", frame=2)
    base = np.load(DATA / "v01_scan_frame2.npz")
    assert len(r) == 4595
    for k in base.files:
        assert getattr(r, k).tobytes() == base[k].tobytes(), k
    assert r.grid_shape == (16, 724)
    assert np.array_equal(r.ray_index % 724, np.round(np.mod(np.rad2deg(r.azimuth.astype(np.float64)) + 90.0, 360.0)
                                                      / 0.4).astype(np.int64) % 724)


def test_overrides_do_not_touch_the_camera_and_bad_ones_are_named(bpy_mod, empty_scene):
    add_mesh(bpy_mod, "Wall", [(-50, 8, -50), (50, 8, -50), (50, 8, 50), (-50, 8, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=UP)
    r = blensor_addon.scan(cam, sensor_type="tof", preset="sr4000", backfolding=True, noise_sigma=0.0,
                           ambiguity_range=5.0)
    assert r.sensor_type == "tof" and r.grid_shape == (144, 176)
    centre = r.image("range_noisy")[72, 88]
    assert abs(centre - 3.0) < 1e-3  # 8 m folded at 5 m
    assert cam.data.blensor.sensor_type == "rotating" and cam.data.blensor.tof.backfolding is False
    cases = [({"sensor_type": "sonar"}, "sensor_type must be one of rotating"),
             ({"sensor_type": "tof", "rotation_speed": 5.0}, "rotation_speed must be a setting of sensor type 'tof'"),
             ({"sensor_type": "tof", "fov_h": 180.0}, "fov_h must be in (0, 180) deg"),
             ({"sensor_type": "tof", "width": 0}, "width must be an integer in [1, 16384] px"),
             ({"sensor_type": "tof", "height": 20000}, "height must be an integer in [1, 16384] px"),
             ({"sensor_type": "tof", "preset": "hdl64e_s2"}, "preset must be one of sr4000"),
             ({"sensor_type": "planar", "error_table": "(5,0,0.1) (2,0,0.1)"}, "error_table must be"),
             ({"sensor_type": "planar", "error_table": "(5,0,-0.1)"}, "error_table must be"),
             ({"sensor_type": "planar", "error_table": "five metres"}, "error_table must be"),
             ({"sensor_type": "planar", "start_angle": 10.0, "end_angle": 10.0}, "end_angle must be greater"),
             ({"sensor_type": "line", "max_range": -1.0}, "max_range must be in (0, 100000] m")]
    for overrides, needle in cases:
        with pytest.raises(SettingsError) as ei:
            blensor_addon.scan(cam, **overrides)
        assert needle in str(ei.value), (overrides, str(ei.value))
    for frame in (10**30, 2**21, 1.5):  # Blender's own ValueError before
        with pytest.raises(SettingsError, match="frame must be an integer frame number within"):
            blensor_addon.scan(cam, frame=frame)


def test_blensor_sensors_lists_types_presets_and_settings():
    res = subprocess.run([sys.executable, "-m", "blensor_addon.cli", "sensors", "--json"], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    doc = {e["type"]: e for e in json.loads(res.stdout)}
    assert set(doc) >= {"rotating", "line", "planar", "tof", "depth"}
    assert "os0_128" in doc["rotating"]["presets"] and "pulselight3d" in doc["planar"]["presets"]
    tof = {s["name"]: s for s in doc["tof"]["settings"]}
    assert tof["ambiguity_range"]["unit"] == "m" and tof["width"]["allowed"] == "an integer in [1, 16384] px"


# ---------------------------------------------------------------------------------------
# rotating: Ouster OS0-128


def test_os0_128_channels_fov_and_columns():
    sensor = SENSORS["rotating"]
    s = sensor.settings(sensor.preset_values("os0_128"))
    from blensor_addon.core.sensors.rotating import single_scan_count
    e = s.elevations_deg
    # issue 21, section 1: a real unit's beams (ouster-sdk OS-0-128-U1_v2.3.0_1024x10.json), not uniform +-45 deg
    assert s.num_lasers == 128 and (e[0], e[-1]) == (45.75, -46.26) and single_scan_count(s) == 1024
    assert s.max_range == 50.0 and math.isclose(s.beam_origin, 0.02767)
    # seed 002: an 80 % target returns up to 50 m, a 40 % one to 25 m
    from blensor_addon.core.sensors.physics import reflectivity_limit
    lim = reflectivity_limit(np.array([24.9, 25.1, 49.9]), s.ref_dist, s.ref_limit, s.ref_slope)
    assert 0.4 > lim[0] and 0.4 < lim[1] and 0.8 > lim[2]


# ---------------------------------------------------------------------------------------
# line scanner


def reflect(alpha_deg, pitch_deg):
    """The specular reflection of a laser fired down -Y at pitch p off a 45 deg mirror
    turned by alpha about +Y, written out independently of the add-on."""
    a, p = math.radians(alpha_deg), math.radians(pitch_deg)
    n = np.array([math.sin(a), -1.0, math.cos(a)]) / math.sqrt(2.0)
    d0 = np.array([0.0, -math.cos(p), math.sin(p)])
    return d0 - 2.0 * d0.dot(n) * n


@pytest.mark.parametrize("backend", BACKENDS)
def test_line_scanner_is_a_true_mirror_reflection(bpy_mod, empty_scene, backend):
    R = 5.0
    v, f = cylinder_mesh(R, -3.0, 3.0)
    add_mesh(bpy_mod, "Drum", v, f)
    cam = add_camera(bpy_mod, rotation=UP)
    # issue 21, section 1: the inclined 45 deg mirror of seed 000 Fig. 3 is now the
    # ibeo_lux_2011 preset's (the LUX itself keeps each layer's elevation, see
    # test_kinect_lux.py); this test keeps checking that geometry with that preset
    use(cam, "line", preset="ibeo_lux_2011", start_angle=0.0, end_angle=90.3, angle_resolution=0.25,
        noise_sigma=0.0, max_range=20.0)
    assert cam.data.blensor.line.mirror == "inclined" and cam.data.blensor.line.rotation_direction == "ccw"
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    assert r.grid_shape == (4, 360 + 1) and len(r) == 4 * 361
    xyz = r.xyz.astype(np.float64)
    np.testing.assert_allclose(np.hypot(xyz[:, 0], xyz[:, 2]), R, atol=1e-4)  # on the drum
    col = r.ray_index % r.grid_shape[1]
    for alpha in (0.0, 30.0, 60.0, 90.0):
        c = int(round(alpha / 0.25))
        for k, pitch in enumerate((1.6, 0.8, -0.8, -1.6)):
            i = np.flatnonzero((col == c) & (r.channel == k))
            assert i.size == 1
            d = reflect(alpha, pitch)
            el = math.asin(d[1])
            az = math.atan2(-d[0], -d[2]) % (2 * math.pi)
            assert abs(r.elevation[i[0]] - el) < 1e-4 and abs(r.azimuth[i[0]] - az) < 1e-4
            u = xyz[i[0]] / np.linalg.norm(xyz[i[0]])
            np.testing.assert_allclose(u, d, atol=1e-4)
    # seed 000 Fig. 3: at 0 deg the pitches stay, at 90 deg they turned into yaw
    at0 = np.rad2deg(r.elevation[col == 0])
    at90 = r.elevation[col == 360]
    np.testing.assert_allclose(np.sort(at0), [-1.6, -0.8, 0.8, 1.6], atol=1e-4)
    np.testing.assert_allclose(at90, 0.0, atol=1e-6)
    np.testing.assert_allclose(np.sort(np.rad2deg(r.azimuth[col == 360])), [88.4, 89.2, 90.8, 91.6], atol=1e-4)


# ---------------------------------------------------------------------------------------
# planar scanners (seed 001 closed forms)


def wall_quad(bpy, name, p0, p1, z0=-3.0, z1=3.0):
    """A vertical wall (world) from p0 to p1 in the XY plane."""
    (x0, y0), (x1, y1) = p0, p1
    return add_mesh(bpy, name, [(x0, y0, z0), (x1, y1, z0), (x1, y1, z1), (x0, y0, z1)], [(0, 1, 2, 3)])


def ray_line(psi, p0, p1):
    """Range along the ray at azimuth psi (rad; sensor at the world origin looking along +Y,
    psi toward -X) to the segment p0-p1 in the XY plane, or inf."""
    d = np.stack([-np.sin(psi), np.cos(psi)], 1)
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    e = p1 - p0
    den = d[:, 0] * (-e[1]) - d[:, 1] * (-e[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (p0[0] * (-e[1]) - p0[1] * (-e[0])) / den
        s = (d[:, 0] * p0[1] - d[:, 1] * p0[0]) / den
    return np.where((np.abs(den) > 1e-12) & (t > 0) & (s >= 0) & (s <= 1), t, np.inf)


SHAPES = {
    # seed 001 Eq. 1: infinite wall at H; Eq. 6-8: a rectangle (side walls at +-B0/2, back at H);
    # the triangle (an inverted V, apex ahead)
    "wall": [((-500.0, 6.0), (500.0, 6.0))],
    "rectangle": [((-3.0, 0.0), (-3.0, 7.0)), ((-3.0, 7.0), (3.0, 7.0)), ((3.0, 7.0), (3.0, 0.0))],
    "triangle": [((-6.0, 0.0), (0.0, 9.0)), ((0.0, 9.0), (6.0, 0.0))],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_pulselight3d_closed_forms(bpy_mod, empty_scene, backend, shape):
    for i, (p0, p1) in enumerate(SHAPES[shape]):
        wall_quad(bpy_mod, f"W{i}", p0, p1)
    cam = add_camera(bpy_mod, rotation=UP)
    use(cam, "planar", preset="pulselight3d")
    r = blensor_addon.scan(cam, backend=backend, noise_sigma=0.0, range_resolution=0.0)
    psi = -math.pi / 2 + np.deg2rad(0.5) * (r.ray_index % r.grid_shape[1])
    expect = np.min([ray_line(psi, *seg) for seg in SHAPES[shape]], axis=0)
    assert r.grid_shape == (1, 360) and np.isfinite(expect).sum() >= len(r) > 300
    np.testing.assert_allclose(r.range, expect, atol=1e-4, rtol=0)
    # 1 cm quantization (seed 001 Table 1): measured ranges on the grid, within half a step
    q = blensor_addon.scan(cam, backend=backend, noise_sigma=0.0)
    steps = q.range_noisy.astype(np.float64) / 0.01
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    assert np.abs(q.range_noisy.astype(np.float64) - q.range).max() <= 0.005 + 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_pulselight3d_circle_is_the_polygon_closed_form(bpy_mod, empty_scene, backend):
    # seed 001 Eq. 9: r = R around the sensor; for the 90-gon mesh r = R cos(pi/n) / cos(phi - phi_c)
    R, n = 4.0, 90
    v, f = cylinder_mesh(R, -3.0, 3.0, segments=n)
    add_mesh(bpy_mod, "Pipe", v, f)
    cam = add_camera(bpy_mod, rotation=UP)
    use(cam, "planar", preset="pulselight3d")
    r = blensor_addon.scan(cam, backend=backend, noise_sigma=0.0, range_resolution=0.0)
    psi = -math.pi / 2 + np.deg2rad(0.5) * (r.ray_index % r.grid_shape[1])
    phi = np.mod(psi + math.pi / 2, 2 * math.pi)  # world angle of the ray from +X
    facet = np.floor(phi / (2 * math.pi / n))
    centre = (facet + 0.5) * 2 * math.pi / n
    expect = R * math.cos(math.pi / n) / np.cos(phi - centre)
    assert len(r) == 360
    np.testing.assert_allclose(r.range, expect, atol=1e-4, rtol=0)


def test_error_table_sigma_is_interpolated(bpy_mod, empty_scene):
    v, f = cylinder_mesh(5.0, -3.0, 3.0, segments=2000)
    add_mesh(bpy_mod, "Drum", v, f)
    cam = add_camera(bpy_mod, rotation=UP)
    use(cam, "planar", preset="generic", start_angle=-180.0, end_angle=180.0, angle_resolution=0.0036,
        error_table="(2, 0, 0.01) (8, 0.003, 0.03)", max_range=20.0)
    r = blensor_addon.scan(cam, backend="native")
    assert len(r) == 100_000
    err = r.range_noisy.astype(np.float64) - r.range
    # at 5 m: mu = 0.0015, sigma = 0.02 (halfway between the rows)
    assert abs(err.std() / 0.02 - 1.0) < 0.03 and abs(err.mean() - 0.0015) < 3e-4


# ---------------------------------------------------------------------------------------
# ToF camera


@pytest.mark.parametrize("backend", BACKENDS)
def test_tof_backfolding_and_pixel_directions(bpy_mod, empty_scene, backend):
    add_mesh(bpy_mod, "Wall", [(-50, 12, -50), (50, 12, -50), (50, 12, 50), (-50, 12, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=UP)
    use(cam, "tof", noise_sigma=0.0, ambiguity_range=10.0)
    off = blensor_addon.scan(cam, axes="blensor", backend=backend)
    on = blensor_addon.scan(cam, axes="blensor", backend=backend, backfolding=True)
    W, H = 176, 144
    assert off.grid_shape == (H, W) and len(off) == W * H
    # the centre pixels look straight at the wall: 12 m, folded to 2 m
    img_off, img_on = off.image("range_noisy"), on.image("range_noisy")
    assert abs(img_off[72, 88] - 12.0) < 2e-3 and abs(img_on[72, 88] - 2.0) < 2e-3
    np.testing.assert_allclose(img_on, np.mod(img_off, 10.0), atol=1e-4)
    assert np.array_equal(on.range, off.range)  # ground truth is not folded
    # pixel (r, c): the pinhole direction through its centre
    tx, ty = math.tan(math.radians(43.6 / 2)), math.tan(math.radians(34.6 / 2))
    row, col = off.ray_index // W, off.ray_index % W
    d = np.stack([(col + 0.5) / W * 2 * tx - tx, ty - (row + 0.5) / H * 2 * ty, -np.ones(len(off))], 1)
    d /= np.linalg.norm(d, axis=1)[:, None]
    u = off.xyz.astype(np.float64) / np.linalg.norm(off.xyz.astype(np.float64), axis=1)[:, None]
    np.testing.assert_allclose(u, d, atol=2e-6)
    np.testing.assert_allclose(off.range, 12.0 / d[:, 2] * -1.0, atol=1e-4)


# ---------------------------------------------------------------------------------------
# Kinect


@pytest.mark.parametrize("backend", BACKENDS)
def test_kinect_depth_steps_grow_with_z_squared(bpy_mod, empty_scene, backend):
    # a floor 0.85 m below the sensor, seen from 55 deg down to 10 deg below the horizon:
    # depths 0.96 .. 4.5 m
    h = 0.85
    add_mesh(bpy_mod, "Floor", [(-40, -1, -h), (40, -1, -h), (40, 60, -h), (-40, 60, -h)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=(math.radians(57.5), 0.0, 0.0))
    use(cam, "kinect")
    r = blensor_addon.scan(cam, axes="blensor", backend=backend)
    s = SENSORS["kinect"].settings()
    fb = s.focal_px * s.baseline
    z = np.unique(-r.xyz_noisy[:, 2].astype(np.float64))
    z = z[np.concatenate([[True], np.diff(z) > 1e-5 * z[1:]])]  # one value per step (float32 output)
    assert r.grid_shape == (480, 640) and len(r) > 100_000
    for Z in (1.0, 2.0, 4.0):
        near = z[(z > Z * 0.97) & (z < Z * 1.03)]
        mid = (near[1:] + near[:-1]) / 2
        ratio = np.median(np.diff(near) / (mid * mid / (8 * fb)))  # each step against its own Z^2
        assert near.size >= 5 and abs(ratio - 1.0) < 0.05, (Z, ratio)
    # the clean points are the true projected points: on the floor
    w = blensor_addon.scan(cam, axes="blensor", backend=backend, frame_of_reference="world")
    np.testing.assert_allclose(w.xyz[:, 2], -h, atol=1e-4)


def test_kinect_shadow_band_has_the_baseline_width(bpy_mod, empty_scene):
    # a box 1.5 m ahead in front of a wall at 3 m: the projector (at +X) throws a shadow the
    # camera sees as an invalid band of f b (1 / Z_box - 1 / Z_wall) pixels beside the box
    Zb, Zw = 1.5, 3.0
    add_mesh(bpy_mod, "Wall", [(-20, Zw, -20), (20, Zw, -20), (20, Zw, 20), (-20, Zw, 20)], [(0, 1, 2, 3)])
    add_mesh(bpy_mod, "Box", [(-0.2, Zb, -0.3), (0.2, Zb, -0.3), (0.2, Zb, 0.3), (-0.2, Zb, 0.3)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=UP)
    use(cam, "kinect", dot_density=1.0)
    r = blensor_addon.scan(cam, backend="native")
    s = SENSORS["kinect"].settings()
    # plus the window's erosion: with a dot on every pixel, a pixel needs 7 of its 9 window
    # columns valid, so 2 px on each side of the band are dropped too
    expect = s.focal_px * s.baseline * (1 / Zb - 1 / Zw) + 4
    valid = np.zeros((480, 640), bool)
    valid.ravel()[r.ray_index] = True
    widths = []
    for row in range(230, 251):
        runs, n = [], 0
        for v in valid[row, 20:620]:
            if not v:
                n += 1
            elif n:
                runs.append(n)
                n = 0
        widths.append(max(runs))
    assert abs(np.median(widths) - expect) <= 1.0, (widths, expect)


# ---------------------------------------------------------------------------------------
# depth camera


def depth_camera(bpy, *, lens=35.0, fit="AUTO", shift=(0.0, 0.0), res=(1920, 1080), pct=100, aspect=(1.0, 1.0)):
    cam = add_camera(bpy, rotation=UP)
    cam.data.lens = lens
    cam.data.sensor_fit = fit
    cam.data.shift_x, cam.data.shift_y = shift
    sc = bpy.context.scene
    sc.render.resolution_x, sc.render.resolution_y = res
    sc.render.resolution_percentage = pct
    sc.render.pixel_aspect_x, sc.render.pixel_aspect_y = aspect
    use(cam, "depth")
    return cam


@pytest.mark.parametrize("variant", [
    {"lens": 35.0},
    {"lens": 18.0, "fit": "VERTICAL", "shift": (0.1, -0.05)},
    {"lens": 50.0, "fit": "HORIZONTAL", "shift": (-0.2, 0.1), "aspect": (1.0, 1.5)},
])
def test_depth_plane_and_sphere_closed_forms_and_blender_projection(bpy_mod, empty_scene, variant):
    from bpy_extras.object_utils import world_to_camera_view
    D = 8.0
    add_mesh(bpy_mod, "Wall", [(-60, D, -60), (60, D, -60), (60, D, 60), (-60, D, 60)], [(0, 1, 2, 3)])
    bpy_mod.ops.mesh.primitive_ico_sphere_add(subdivisions=8, radius=1.0, location=(0.5, 5.0, 0.3))
    cam = depth_camera(bpy_mod, **variant)
    r = blensor_addon.scan(cam, axes="blensor", backend="native")
    W, H = 1920, 1080
    assert r.grid_shape == (H, W) and len(r) == W * H
    u = r.xyz.astype(np.float64) / r.range[:, None]
    z = -r.xyz[:, 2].astype(np.float64)
    on_wall = r.object_id == r.object_id[np.argmax(r.range)]
    np.testing.assert_allclose(z[on_wall], D, atol=1e-4)  # planar depth of the wall
    np.testing.assert_allclose(r.range[on_wall], D / -u[on_wall, 2], atol=1e-4)
    # the sphere: the near root of |t u - c| = 1 (c in the sensor frame: x right, y up, -z ahead).
    # The mesh (327,680 faces) is within 2e-5 m of the sphere; that becomes a range error of
    # 2e-5 / cos(incidence), so grazing pixels (cos < 0.25, the outer 3 % of the disc) are left out
    c = np.array([0.5, 0.3, -5.0])
    b = u[~on_wall] @ c
    cos_inc = np.sqrt(np.clip(1.0 - (c @ c - b * b), 0.0, None))
    t = b - cos_inc
    front = cos_inc > 0.25
    assert front.mean() > 0.9
    np.testing.assert_allclose(r.range[~on_wall][front], t[front], atol=1e-4)
    # Blender's own projection puts 100 random returns in the same pixel, at the same depth
    w = blensor_addon.scan(cam, axes="blensor", backend="native", frame_of_reference="world")
    rng = np.random.default_rng(1)
    scene = bpy_mod.context.scene
    import mathutils
    for i in rng.choice(len(w), 100, replace=False):
        p = world_to_camera_view(scene, cam, mathutils.Vector(w.xyz[i].astype(np.float64)))
        row, col = divmod(int(w.ray_index[i]), W)
        assert abs(p.x * W - 0.5 - col) < 0.01 and abs((1.0 - p.y) * H - 0.5 - row) < 0.01
        assert abs(p.z - z[i]) < 1e-4


def test_depth_bvhtree_matches_native(bpy_mod, empty_scene):
    bpy_mod.ops.mesh.primitive_ico_sphere_add(subdivisions=4, radius=1.0, location=(0.0, 4.0, 0.0))
    cam = depth_camera(bpy_mod, res=(160, 90))
    a = blensor_addon.scan(cam, backend="native")
    b = blensor_addon.scan(cam, backend="bvhtree")
    assert np.array_equal(a.ray_index, b.ray_index) and len(a) > 1000
    np.testing.assert_allclose(a.range, b.range, atol=2e-5)


def test_depth_refuses_bad_cameras(bpy_mod, empty_scene):
    cam = depth_camera(bpy_mod, res=(20000, 10))
    with pytest.raises(SettingsError, match="resolution must be 1 to 16384 pixels"):
        blensor_addon.scan(cam)
    bpy_mod.context.scene.render.resolution_x = 64
    cam.data.type = "ORTHO"
    with pytest.raises(SettingsError, match="camera.type must be PERSP"):
        blensor_addon.scan(cam)


# ---------------------------------------------------------------------------------------
# every sensor everywhere: panel operator, range scan into npz/EVD/PCD, readers


EVERY = [
    ("rotating", {"preset": "os0_128"}),
    ("line", {}),
    ("planar", {"preset": "utm30lx"}),
    ("tof", {}),
    ("kinect", {"width": 160, "height": 120}),
    ("depth", {}),
]


@pytest.mark.parametrize("stype, values", EVERY, ids=[e[0] for e in EVERY])
def test_every_sensor_scans_from_the_panel_and_into_files(bpy_mod, empty_scene, tmp_path, stype, values):
    import open3d as o3d
    from pypcd4 import PointCloud
    from blensor_addon.io.formats.evd import read_evd
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 3
    scene.render.resolution_x, scene.render.resolution_y = 96, 64
    # a wall with a gap (sky through it), and a floor
    add_mesh(bpy_mod, "Wall", [(-30, 8, -5), (-0.5, 8, -5), (-0.5, 8, 20), (-30, 8, 20)], [(0, 1, 2, 3)])
    add_mesh(bpy_mod, "Wall2", [(1.5, 8, -5), (30, 8, -5), (30, 8, 20), (1.5, 8, 20)], [(0, 1, 2, 3)])
    add_mesh(bpy_mod, "Floor", [(-30, -30, 0), (30, -30, 0), (30, 30, 0), (-30, 30, 0)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=(math.radians(95), 0.0, 0.0), location=(0.0, 0.0, 1.5))
    use(cam, stype, **values)
    bpy_mod.context.view_layer.objects.active = cam
    # the panel's single scan: a point mesh of every return
    assert bpy_mod.ops.blensor.scan() == {"FINISHED"}
    mesh = bpy_mod.data.objects[f"Scan.{scene.frame_current}"]
    single = blensor_addon.scan(cam)
    assert len(mesh.data.vertices) == len(single) > 500 and single.sensor_type == stype
    # a range scan into every writer, read back with the ecosystem's readers
    # (EVD holds one output per scene frame: so do the other formats, packets=frame)
    job = blensor_addon.scan_range(cam, range(1, 4), tmp_path, ("npz", "evd", "pcd"), packets="frame")
    assert job.status == "complete"
    ft = 1.0 / 24.0
    for f in (1, 2, 3):
        z = np.load(tmp_path / f"scan{f:05d}.npz")
        assert str(z["sensor_type"]) == stype and len(z["range"]) > 0
        t = z["timestamp"]
        if SENSORS[stype].organized:
            assert np.all(t == f * ft)  # one image per frame
        else:  # swept sensors: each column its own time, inside its frame
            assert f * ft - 1e-9 <= t.min() < t.max() < (f + 1) * ft + 1e-9
        pc = PointCloud.from_path(tmp_path / "clean" / f"scan{f:05d}.pcd")
        o3 = o3d.io.read_point_cloud(str(tmp_path / "clean" / f"scan{f:05d}.pcd"), remove_nan_points=True)
        assert len(o3.points) == len(z["range"])
        if SENSORS[stype].organized:  # WIDTH x HEIGHT image, NaN where nothing returned
            rows, cols = z["grid_shape"]
            assert (pc.metadata.width, pc.metadata.height) == (cols, rows) and pc.points == rows * cols
            x = pc.pc_data["x"].reshape(rows, cols)
            hit = np.zeros(rows * cols, bool)
            hit[z["ray_index"]] = True
            assert np.array_equal(np.isfinite(x).ravel(), hit) and 0 < hit.sum() < rows * cols
            np.testing.assert_allclose(x.ravel()[z["ray_index"]], z["xyz"][:, 0])
        elif values.get("preset", "").startswith("os"):  # issue 21: ouster-ros's organized cloud
            assert pc.metadata.height == 128 and pc.points == 128 * pc.metadata.width
            assert np.isfinite(pc.pc_data["x"]).sum() == len(z["range"])
        else:
            assert pc.points == len(z["range"]) and pc.metadata.height == 1
    blocks = read_evd(tmp_path / "scan.evd")
    assert len(blocks) == 3 and sum(len(b) for b in blocks) == job.points


def test_cli_set_overrides_and_refuses_bad_settings(tmp_path):
    from conftest import CROSSING
    blensor = str(Path(sys.executable).parent / "blensor")
    out = tmp_path / "tof"
    res = subprocess.run([blensor, "scan", CROSSING, "--frames", "3", "--out", out, "--set", "sensor_type=tof",
                          "--set", "preset=sr4000", "--set", "backfolding=true", "--set", "ambiguity_range=7.5"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    z = np.load(out / "scan00003.npz")
    settings = json.loads(str(z["sensor"]))
    assert str(z["sensor_type"]) == "tof" and settings["backfolding"] is True and settings["ambiguity_range"] == 7.5
    assert tuple(z["grid_shape"]) == (144, 176) and z["range_noisy"].max() < 7.5
    for args, needle in [
        (["--set", "bogus=1"], "bogus must be a setting of sensor type 'rotating'"),
        (["--set", "sensor_type=tof", "--set", "width=0"], "width must be an integer in [1, 16384] px, got 0"),
        (["--set", "sensor_type=tof", "--set", "fov_v=180"], "fov_v must be in (0, 180) deg"),
        (["--set", "sensor_type=planar", "--set", "preset=sr4000"], "preset must be one of utm30lx, lms511"),
        (["--set", "sensor_type=planar", "--set", "error_table=(3,0,1)(1,0,1)"], "error_table must be a list of"),
        (["--set", "sensor_type=kinect", "--set", "min_depth=7"], "max_depth must be greater than min_depth"),
        (["--set", "sensor_type=sonar"], "sensor_type must be one of rotating, line, planar, tof, kinect, depth"),
    ]:
        bad = tmp_path / "bad"
        res = subprocess.run([blensor, "scan", CROSSING, "--frames", "3", "--out", bad, *args], capture_output=True,
                             text=True)
        assert res.returncode == 2 and needle in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1
        assert not bad.exists() or not any(bad.iterdir())


def test_choosing_a_preset_sets_its_values(bpy_mod, empty_scene):
    cam = add_camera(bpy_mod)
    p = cam.data.blensor
    p.planar.preset = "pulselight3d"
    assert (p.planar.max_range, p.planar.start_angle, p.planar.end_angle) == (40.0, -90.0, 90.0)
    assert math.isclose(p.planar.range_resolution, 0.01, rel_tol=1e-6) and p.planar.elevations == "0"
    p.preset = "os0_128"
    assert math.isclose(p.angle_resolution, 360 / 1024) and p.max_range == 50.0
    assert math.isclose(p.ref_slope, 0.016, rel_tol=1e-6) and p.ref_dist == 0.0
    p.tof.preset = "sr4000"
    assert (p.tof.width, p.tof.height) == (176, 144)


class _Layout:
    """Records what a panel draws (a stand-in for Blender's UILayout)."""

    def __init__(self):
        self.drawn = []
        self.use_property_split = False

    def prop(self, data, name, **_kw):
        assert name in data.bl_rna.properties, name  # a real property of that group
        self.drawn.append(name)

    def operator(self, idname, **_kw):
        self.drawn.append(idname)

    def column(self, **_kw):
        return self

    row = column

    def box(self):
        return self

    def label(self, **_kw):
        pass


@pytest.mark.parametrize("stype", list(SENSORS))
def test_panel_draws_every_setting_of_the_sensor(bpy_mod, empty_scene, stype):
    from types import SimpleNamespace

    from blensor_addon.ui.panel import BLENSOR_PT_sensor
    cam = add_camera(bpy_mod)
    cam.data.blensor.sensor_type = stype
    panel = SimpleNamespace(layout=_Layout())
    BLENSOR_PT_sensor.draw(panel, SimpleNamespace(camera=cam.data))
    sensor = SENSORS[stype]
    group = getattr(cam.data.blensor, sensor.storage) if sensor.storage else cam.data.blensor
    for f in dataclasses.fields(sensor.Settings):
        show = f.metadata["blensor"].show_if
        if show is None or getattr(group, show[0]) == show[1]:
            assert f.name in panel.layout.drawn, f.name
    assert "blensor.scan" in panel.layout.drawn
    assert ("blensor.export_depth_map" in panel.layout.drawn) == sensor.uses_camera


def test_every_result_carries_its_sensors_capabilities(bpy_mod, empty_scene):
    add_mesh(bpy_mod, "Wall", [(-50, 4, -50), (50, 4, -50), (50, 4, 50), (-50, 4, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, rotation=UP)
    # issue 21, section 2: the VLP-16 steps one 55.296 us firing sequence (0.1990656 deg at 10 Hz)
    for stype, values, timing, grid in [("rotating", {"preset": "vlp16"}, ("sweep", 0.1), (16, 1808)),
                                        ("planar", {}, ("sweep", 0.025), (1, 1080)),
                                        ("tof", {}, ("exposure", None), (144, 176)),
                                        ("kinect", {}, ("exposure", None), (480, 640))]:
        r = blensor_addon.scan(cam, sensor_type=stype, **values)
        c = r.capabilities
        assert c == SENSORS[stype].capabilities(SENSORS[stype].settings(
            SENSORS[stype].preset_values(values["preset"]) if values else {}), None), stype
        assert (c.timing.kind, c.timing.period) == timing and c.grid == grid == r.grid_shape, stype
        assert c.organized == r.organized == (stype in ("tof", "kinect")) and len(r) > 0


def test_each_scan_pattern_sensor_is_typed_with_its_own_settings_class():
    # Sensor is generic in its settings class (core/sensors/sensor.py): the argument a sensor
    # class names is what mypy checks its methods' ``s`` against, so it must be the class
    # its ``Settings`` attribute builds (a class line copied from another sensor would check
    # the methods against that sensor's fields and pass)
    import typing

    from blensor_addon.core.sensors.sensor import Sensor, SweptSensor
    for name in ("rotating", "line", "planar", "rosette", "cylindrical", "pattern"):
        cls = type(SENSORS[name])
        bases = [b for b in getattr(cls, "__orig_bases__", ()) if typing.get_origin(b) in (Sensor, SweptSensor)]
        assert [typing.get_args(b) for b in bases] == [(cls.Settings,)], name
        assert isinstance(SENSORS[name].settings({}), cls.Settings), name
