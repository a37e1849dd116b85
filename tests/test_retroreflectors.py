"""Retroreflectors, saturation and blooming, and the glossy lobe of the radiometric return
model (core/materials.py lobes and library entries, core/sensors/bloom.py, the receiver in
core/sensors/rotating.py): the lobes' shapes against incidence, the halo's rows on a grid, and
real Blender scans of a sign plate 20 m ahead of an Ouster and a Velodyne preset."""
from __future__ import annotations

import math

import numpy as np
import pytest

from blensor_addon.core import materials
from blensor_addon.core.materials import lobe_reflectance, library, retro_lobe, specular_lobe
from blensor_addon.core.sensors import bloom

ANGLES = np.radians(np.arange(0.0, 86.0, 5.0))


def test_a_lambertian_material_keeps_rho_at_every_incidence():
    """No lobe (zeros): the equivalent reflectance is rho, so the received power's material
    term rho cos(theta) follows cos(theta) exactly."""
    cos = np.cos(ANGLES)
    q = lobe_reflectance(np.full(cos.shape, 0.5), cos, np.zeros((cos.size, 4)))
    np.testing.assert_allclose(q * cos, 0.5 * cos, rtol=1e-6)


def test_a_glossy_coat_is_brighter_than_lambertian_near_normal_and_darker_at_grazing():
    """Principled-like coat (f0 0.04, roughness 0.3): more than the Lambertian rho at normal
    incidence, less at 80 deg (the coat's Fresnel takes the light at grazing and the narrow
    lobe points elsewhere); the lobe alone falls monotonically with incidence up to 45 deg
    (beyond, the Cook-Torrance backscatter's Fresnel and 1 / cos^2 lift its small tail)."""
    cos = np.cos(ANGLES)
    lobe = np.tile([0.04, 0.3 ** 2, 0.0, 0.0], (cos.size, 1))
    q = lobe_reflectance(np.full(cos.size, 0.5), cos, lobe)
    assert q[0] > 1.5 * 0.5
    assert q[ANGLES.size - 2] < 0.5 * 0.9  # 80 deg
    spec = specular_lobe(cos, np.full(cos.size, 0.04), np.full(cos.size, 0.09))
    assert (np.diff(spec[:10]) < 0).all()
    # a rougher coat: a lower, wider lobe
    rough = specular_lobe(cos, np.full(cos.size, 0.04), np.full(cos.size, 0.49))
    assert rough[0] < spec[0] and rough[6] > spec[6]


def test_the_retro_lobe_is_pi_ra_at_normal_entrance_and_falls_with_entrance_angle():
    """R_A 250 / 150 cd/lx/m^2 (ASTM D4956 Type III white): pi x 250 equivalent reflectance at
    0 deg (the BRDF R_A / cos^2 beta times pi), pi x 150 / cos^2 30 at 30 deg, falling with
    the entrance angle in received power (q cos beta)."""
    cos = np.cos(ANGLES)
    q = retro_lobe(cos, np.full(cos.size, 250.0), np.full(cos.size, 150.0))
    assert q[0] == pytest.approx(math.pi * 250.0)
    assert q[6] == pytest.approx(math.pi * 150.0 / math.cos(math.radians(30)) ** 2)
    assert (np.diff(q * cos) < 0).all()


def test_the_library_has_retroreflective_entries_citing_their_standard():
    lib = library()
    for name in ("retroreflective_sheeting_type_i", "retroreflective_sheeting_type_iii", "licence_plate",
                 "road_marking_beads"):
        e = lib[name]
        assert e.retro[0] > 0 and 0 < e.retro[1] <= e.retro[0]
        assert "ASTM D4956" in e.source or "EN 1436" in e.source
    assert lib["retroreflective_sheeting_type_iii"].retro == (250.0, 150.0)
    # R_L = L / E_perp at entrance 88.76 deg: BRDF 0.15 / cos(88.76 deg) = 6.93 sr^-1, R_A(30) = 0.75 of it
    assert lib["road_marking_beads"].retro == pytest.approx((6.9315, 5.1986), rel=1e-4)
    assert "DERIVED" in lib["licence_plate"].source
    # the plain entries stay Lambertian
    assert lib["asphalt"].retro == (0.0, 0.0) and lib["retroreflective_sheeting"].retro == (0.0, 0.0)


def test_the_halo_covers_the_configured_width_around_a_saturated_return_only():
    """A 10 x 40 grid of weak returns with one saturated return at (5, 20): the rows within
    1 beam and 2 columns take it (8 + 6 = 14 rays), no other; a return as strong as the bloom
    power keeps its own echo; no saturated return: no halo."""
    ch, col = np.meshgrid(np.arange(10), np.arange(40), indexing="ij")
    ch, col = ch.ravel(), col.ravel()
    sig = np.full(ch.size, 1e-5)
    src = 5 * 40 + 20
    sig[src] = 3.0
    sig[6 * 40 + 22] = 0.01  # stronger than the bloom power (3e-3): its own
    got = bloom.bloom_sources(ch, col, sig, 1, 2)
    halo = np.flatnonzero(got >= 0)
    assert (got[halo] == src).all()
    assert set(halo.tolist()) == {c * 40 + k for c in (4, 5, 6) for k in range(18, 23)} - {src, 6 * 40 + 22}
    assert (bloom.bloom_signal(sig, got)[halo] == pytest.approx(3e-3))
    assert (bloom.bloom_sources(ch, col, np.full(ch.size, 0.5), 1, 2) == -1).all()
    assert (bloom.bloom_sources(ch, col, sig, 0, 0) == -1).all()
    # a full turn wraps: a source in column 0 reaches column 39
    sig2 = np.full(ch.size, 1e-5)
    sig2[5 * 40] = 3.0
    assert bloom.bloom_sources(ch, col, sig2, 0, 1, turn_columns=40)[5 * 40 + 39] == 5 * 40


# -- through a real scan ---------------------------------------------------------------------------

def _sign_scene(bpy, flag: bool):
    """A 1.0 x 0.8 m sign 20 m ahead of the sensor (looking down -z, y up) in front of a 10 %
    wall 40 m away: the sign's material names the Type III sheeting entry (``flag``) or has
    the same diffuse reflectivity set without it."""
    from conftest import add_camera, add_mesh, quad
    sign = bpy.data.materials.new("Sign")
    if flag:
        sign.blensor.library = "retroreflective_sheeting_type_iii"
    else:
        sign.blensor.reflectivity = 0.3
    wall = bpy.data.materials.new("Wall")
    wall.blensor.reflectivity = 0.1
    v, f = quad(-0.5, 0.5, -0.4, 0.4, -20.0)
    add_mesh(bpy, "Sign", v, f, sign)
    v, f = quad(-40, 40, -6, 6, -40.0)
    add_mesh(bpy, "Wall", v, f, wall)
    return add_camera(bpy)


def _scan(bpy_mod, empty_scene, preset, flag, **kw):
    import blensor_addon
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)  # a fresh file for each scene
    cam = _sign_scene(bpy_mod, flag)
    return blensor_addon.scan(cam, preset=preset, seed=1, **{"return_model": "radiometric", **kw})


@pytest.mark.parametrize("preset", ["os1_64", "vlp16"])
def test_a_retroreflective_sign_saturates_and_blooms_within_the_configured_width(bpy_mod, empty_scene,
                                                                                 preset):
    """Real Blender, the preset's radiometric model: the flagged sign's returns report the
    unit's maximum byte (255: Velodyne's retroreflective top, Ouster REFLECTIVITY's), a halo
    of bloom returns at the sign's range lies around it within bloom_beams x bloom_columns
    (their clean range is the wall's), and the same plate without the flag: no saturated
    byte, no halo."""
    from blensor_addon.io.packets.ouster import ouster_reflectivity
    from blensor_addon.io.packets.reported import unit_reflectivity, velodyne_full_scale
    from blensor_addon.io.packets.velodyne import velodyne_reflectivity_byte
    res = _scan(bpy_mod, empty_scene, preset, True, bloom_beams=1, bloom_columns=2)
    r = np.asarray(res.range)
    on_sign = np.abs(r - 20.0) < 0.5
    halo = res.extra["bloom"].astype(bool)
    sign = on_sign & ~halo
    assert sign.sum() >= 4
    # the unit's own byte: Ouster REFLECTIVITY, or Velodyne's calibrated reflectivity byte
    velodyne = preset.startswith("vlp")
    byte = (velodyne_reflectivity_byte(unit_reflectivity(res), velodyne_full_scale("VLP-16", True))
            if velodyne else ouster_reflectivity(unit_reflectivity(res)))
    assert (byte[sign] == 255).all()
    # a bloom return reports its own (weak) power at the range it measured, the sign's: not saturated
    assert (byte[halo] < 255).all()
    # the float reflectivity stays the material's diffuse 0.3 (the lobe is in the received power)
    np.testing.assert_allclose(np.asarray(res.reflectivity)[sign], 0.3, rtol=1e-6)
    assert halo.sum() > 0
    # the halo: clean range on the wall, measured at the sign
    assert (np.abs(r[halo] - 40.0) < 2.0).all()
    assert (np.abs(np.asarray(res.range_noisy)[halo] - 20.0) < 0.5).all()
    # within 1 beam (ring: by elevation, Ouster's beam index) and 2 columns (the reported azimuth's
    # column, as the unit's image shows it) of a sign return, and reaching that width
    ring = np.asarray(res.ring).astype(np.int64)
    cols = res.grid_shape[1]
    col = np.round(np.asarray(res.azimuth, dtype=np.float64) * cols / (2 * math.pi)).astype(np.int64) % cols
    d_beam = np.abs(ring[sign][None, :] - ring[halo][:, None])
    d_col = np.abs((col[sign][None, :] - col[halo][:, None] + cols // 2) % cols - cols // 2)
    near = (d_beam <= 1) & (d_col <= 2)
    assert near.any(axis=1).all()
    reach = np.where(near, np.maximum(d_beam, d_col), 99).min(axis=1)
    assert reach.max() == 2 and set(np.where(near, d_beam, 0).max(axis=1).tolist()) >= {1}
    plain = _scan(bpy_mod, empty_scene, preset, False, bloom_beams=1, bloom_columns=2)
    assert not plain.extra["bloom"].any()
    pr = np.asarray(plain.range)
    pb = (velodyne_reflectivity_byte(unit_reflectivity(plain)) if velodyne
          else ouster_reflectivity(unit_reflectivity(plain)))
    assert (np.abs(pr - 20.0) < 0.5).sum() >= 1 and (pb < 255).all()


def test_no_halo_when_its_width_is_zero(bpy_mod, empty_scene):
    """bloom_beams = bloom_columns = 0: the flagged sign still saturates (its range-compensated
    reflectivity above the bytes' 255 %), no return blooms."""
    res = _scan(bpy_mod, empty_scene, "vlp16", True, bloom_beams=0, bloom_columns=0)
    assert not res.extra["bloom"].any()
    on_sign = np.abs(np.asarray(res.range) - 20.0) < 0.5
    refl = np.asarray(res.extra["signal"], np.float64) * np.asarray(res.range, np.float64) ** 2
    assert on_sign.sum() >= 4 and refl[on_sign].min() > 2.55


def test_limit_and_linear_scans_of_the_sign_have_no_signal_nor_bloom(bpy_mod, empty_scene):
    """The papers' models ignore the lobes: the flagged sign reports its diffuse 0.3 and no
    per-return bloom or signal field is added."""
    for model in ("limit", "linear"):
        res = _scan(bpy_mod, empty_scene, "vlp16", True, return_model=model)
        assert "bloom" not in res.extra and "signal" not in res.extra
        on_sign = np.abs(np.asarray(res.range) - 20.0) < 0.5
        assert on_sign.any() and np.allclose(np.asarray(res.reflectivity)[on_sign], 0.3)


def test_a_glossy_principled_plate_shows_its_lobe_and_a_lambertian_one_the_cosine(bpy_mod, empty_scene):
    """Real Blender, radiometric VLP-16: a plate of a Principled BSDF (base 0.5 grey, Roughness
    0.3) 10 m ahead returns more than the same plate with its reflectivity set (Lambertian) near
    normal incidence, less at grazing (76 deg and more); the Lambertian plate's range-compensated
    reflectivity is 0.5 cos(theta) within 2 %."""
    import blensor_addon
    from conftest import add_camera, add_mesh
    out = {}
    for glossy in (True, False):
        bpy_mod.ops.wm.read_factory_settings(use_empty=True)
        mat = bpy_mod.data.materials.new("Plate")
        if glossy:
            if not mat.node_tree:
                mat.use_nodes = True
            bsdf = mat.node_tree.nodes["Principled BSDF"]
            bsdf.inputs["Base Color"].default_value = (0.5, 0.5, 0.5, 1.0)
            bsdf.inputs["Roughness"].default_value = 0.3
        else:
            mat.blensor.reflectivity = 0.5
        # a wall 10 m ahead, 300 m wide: incidence from normal (ahead) to grazing (aside), cos = 10 / r
        v = [(-150, -3, -10), (150, -3, -10), (150, 3, -10), (-150, 3, -10)]
        add_mesh(bpy_mod, "Wall", v, [(0, 1, 2, 3)], mat)
        cam = add_camera(bpy_mod)
        res = blensor_addon.scan(cam, preset="vlp16", seed=1, return_model="radiometric")
        r = np.asarray(res.range, np.float64)
        xyz = np.asarray(res.xyz, np.float64)  # ros axes: x ahead
        cos = 10.0 / r
        keep = np.abs(xyz[:, 0] - 10.0) < 0.05
        out[glossy] = (cos[keep], np.asarray(res.extra["signal"], np.float64)[keep] * r[keep] ** 2)
    cl, ql = out[False]
    np.testing.assert_allclose(ql, 0.5 * cl, rtol=0.02)
    cg, qg = out[True]
    near = cg > 0.998  # within 3.6 deg of normal: the coat's lobe (GGX alpha 0.09)
    assert qg[near].size >= 4 and qg[cg < 0.25].size > 10
    assert np.median(qg[near] / cg[near]) > 0.5 * 1.5
    assert np.median(qg[cg < 0.25] / cg[cg < 0.25]) < 0.5 * 0.9


def test_the_material_setting_makes_any_material_a_retroreflector(bpy_mod, empty_scene):
    """``Material.blensor.retroreflection`` (R_A at entrance 0 deg, cd/lx/m^2; 0: none) flags a
    material whatever its reflectivity source: the node tree's or an override's; its lobe at
    30 deg is the Type III sheeting's ratio (150 / 250, derived) of it; unset, the material
    keeps its own lobes."""
    from blensor_addon.scene.shading import evaluate_material
    m = bpy_mod.data.materials.new("Plate")
    m.blensor.reflectivity = 0.3
    assert evaluate_material(m).lobe == (0.0, 0.0, 0.0, 0.0)
    m.blensor.retroreflection = 500.0
    ev = evaluate_material(m)
    assert ev.reflectivity == pytest.approx(0.3)
    assert ev.lobe[2:] == pytest.approx((500.0, 300.0))
    m.blensor.library = "retroreflective_sheeting_type_i"
    m.blensor.property_unset("reflectivity")
    assert evaluate_material(m).lobe[2:] == pytest.approx((500.0, 300.0))  # the setting wins
    m.blensor.retroreflection = 0.0
    assert evaluate_material(m).lobe[2:] == (70.0, 30.0)  # the entry's


def test_a_sign_flagged_by_its_material_setting_saturates(bpy_mod, empty_scene):
    import blensor_addon
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    cam = _sign_scene(bpy_mod, False)
    bpy_mod.data.materials["Sign"].blensor.retroreflection = 250.0
    res = blensor_addon.scan(cam, preset="vlp16", seed=1)
    assert res.sensor["return_model"] == "radiometric"
    on_sign = np.abs(np.asarray(res.range) - 20.0) < 0.5
    refl = np.asarray(res.extra["signal"], np.float64) * np.asarray(res.range, np.float64) ** 2
    assert on_sign.sum() >= 4 and refl[on_sign & ~res.extra["bloom"].astype(bool)].min() > 2.55
    assert res.extra["bloom"].any()
