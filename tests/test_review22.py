"""Defects the review of issue 22 found, each with a test that fails on the merged code:
glass transmission counted twice in a partly transmitting material's reflectivity, NaN/inf/
negative texels of float images, out-of-range IOR/transmission/alpha/metallic, the material
reflectivity override capped at 1 (retro-reflectors), and range images of multi-return
results keeping the farthest return."""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import add_camera, add_mesh, generic_sensor, quad
from test_glass import record_casts
from test_materials_nodes import H, _bsdf, _material, _replace_surface, _scan_wall, _snapshot, _wall
from test_returns_output import generic_result, multi_result

import blensor_addon
from blensor_addon.core.optics import fresnel_unpolarized
from blensor_addon.raycast.trace import SPECULAR_ACCEPTANCE

BACKENDS = ["native", "bvhtree"]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_partly_transmitting_pane_counts_its_transmission_once(bpy_mod, empty_scene, monkeypatch,
                                                                backend_name):
    # issue 22 review: a Principled pane (base 0.8, transmission 0.5, IOR 1.5) 5 m ahead of a
    # wall. The pane row's reflectivity is rho (1 - t)(1 - F(theta)) = 0.8 x 0.5 x (1 - F) (plus
    # the specular share within the acceptance). Before the fix the table already held
    # (1 - t) rho + t 0.02 = 0.41, and the tracer's (1 - t)(1 - F) came on top: 0.197 at normal
    # incidence instead of 0.384.
    mat = _material(bpy_mod, "HalfGlass", (0.8, 0.8, 0.8))
    _bsdf(mat).inputs["Transmission Weight"].default_value = 0.5
    _bsdf(mat).inputs["IOR"].default_value = 1.5
    v, f = quad(-20, 20, -20, 20, -5.0)
    add_mesh(bpy_mod, "Pane", v, f, mat)
    v, f = quad(-50, 50, -50, 50, -10.0)
    add_mesh(bpy_mod, "Wall", v, f)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-30.0, end_angle=30.0, angle_resolution=0.25, ref_limit=-1.0)
    mt = _snapshot(bpy_mod).materials
    row = mt.names.index("HalfGlass")
    assert mt.reflectivity[row] == np.float32(0.8) and mt.transmission[row] == np.float32(0.5)
    seen = record_casts(monkeypatch)
    blensor_addon.scan(cam, axes="blensor", backend=backend_name)
    rng = np.concatenate([h.range for _, h in seen]).astype(np.float64)
    hit = np.concatenate([h.hit for _, h in seen])
    refl = np.concatenate([h.reflectivity for _, h in seen]).astype(np.float64)
    pane = hit & (rng < 6.0)
    assert pane.sum() == 240  # every beam meets the pane (its own row) before the wall
    cos_i = 5.0 / rng[pane]
    expected = 0.8 * 0.5 * (1.0 - fresnel_unpolarized(cos_i, 1.0, 1.5))
    off = cos_i < math.cos(SPECULAR_ACCEPTANCE)  # no specular share: the diffuse alone
    assert off.sum() >= 238
    np.testing.assert_allclose(refl[pane][off], expected[off], rtol=1e-4)
    assert refl[pane][off].max() == pytest.approx(0.8 * 0.5 * 0.96, rel=1e-3)


def test_pure_glass_keeps_the_glass_entry_and_mixes_keep_the_opaque_part(bpy_mod, empty_scene):
    # issue 22 review: a Glass BSDF (no opaque part) keeps the library's glass entry (0.02);
    # a Mix of Glass and a Diffuse 0.6 keeps 0.6 (the opaque part's), transmission 0.5
    from blensor_addon.core.materials import library
    glass = _material(bpy_mod, "Clear")
    _replace_surface(glass, "ShaderNodeBsdfGlass")
    mix = _material(bpy_mod, "Mixed")
    nt = mix.node_tree
    m = nt.nodes.new("ShaderNodeMixShader")
    g = nt.nodes.new("ShaderNodeBsdfGlass")
    d = nt.nodes.new("ShaderNodeBsdfDiffuse")
    d.inputs["Color"].default_value = (0.6, 0.6, 0.6, 1.0)
    m.inputs[0].default_value = 0.5
    nt.links.new(g.outputs[0], m.inputs[1])
    nt.links.new(d.outputs[0], m.inputs[2])
    nt.links.new(m.outputs[0], nt.get_output_node("ALL").inputs["Surface"])
    for i, mat in enumerate((glass, mix)):
        v, f = quad(-1, 1, -1, 1, -5)
        add_mesh(bpy_mod, mat.name, v, f, mat, location=(3 * i, 0, 0))
    add_camera(bpy_mod)
    mt = _snapshot(bpy_mod).materials
    c, x = mt.names.index("Clear"), mt.names.index("Mixed")
    assert mt.reflectivity[c] == np.float32(library()["glass"].at(905)) == np.float32(0.02)
    assert mt.reflectivity[x] == pytest.approx(0.6, rel=1e-6) and mt.transmission[x] == np.float32(0.5)


def _bad_image(bpy, values):
    """A float image of one row of grey texels ``values`` (NaN/inf allowed), alpha 1."""
    img = bpy.data.images.new("BadEXR", len(values), 1, float_buffer=True)
    px = np.zeros((len(values), 4), np.float32)
    px[:, :3] = np.asarray(values, np.float32)[:, None]
    px[:, 3] = 1.0
    img.pixels.foreach_set(px.ravel())
    return img


def test_nan_inf_negative_texels_are_sanitized_with_one_warning(bpy_mod, empty_scene, capfd):
    # issue 22 review: NaN, inf and negative texels of a float image went into the
    # reflectivity (NaN points, negative intensity). Now NaN -> 0, clipped to [0, 10], and one
    # warning names the image and the number of texels replaced.
    from blensor_addon.scene.extract import ImageCache
    values = [0.1, np.nan, np.inf, -1.0, 0.2, 0.6, 12.0, 0.8]
    img = _bad_image(bpy_mod, values)
    stored = np.empty(len(values) * 4, np.float32)
    img.pixels.foreach_get(stored)
    assert np.isnan(stored[4]) and np.isinf(stored[8])  # Blender keeps them: the reader must not
    cache = ImageCache()
    lum = cache.get(img)
    np.testing.assert_allclose(lum[0], [0.1, 0.0, 10.0, 0.0, 0.2, 0.6, 10.0, 0.8], rtol=1e-6)
    assert cache.replaced == {"BadEXR": 4}
    mat = _material(bpy_mod, "Bad")
    tex = mat.node_tree.nodes.new("ShaderNodeTexImage")
    tex.image = img
    tex.interpolation = "Closest"
    mat.node_tree.links.new(tex.outputs["Color"], _bsdf(mat).inputs["Base Color"])
    _wall(bpy_mod, mat)
    capfd.readouterr()
    _, r = _scan_wall(bpy_mod)
    assert len(r) > 300  # the stripes of reflectivity 0 (NaN, -1) return nothing
    assert np.isfinite(r.reflectivity).all() and np.isfinite(r.intensity).all()
    assert r.reflectivity.min() >= 0.0 and r.reflectivity.max() == np.float32(10.0)
    err = capfd.readouterr().err
    assert err.count("image 'BadEXR': 4 texels") == 1, err


def test_out_of_range_ior_transmission_alpha_metallic_are_clipped_with_a_warning(bpy_mod, empty_scene, capfd):
    # issue 22 review: IOR < 1 or NaN went into the table (the tracer clamped it silently);
    # transmission/alpha/metallic outside [0, 1] or NaN were clipped silently (NaN passed).
    # Now each is clipped (IOR to [1, 10], NaN -> 1.45) with one warning naming the material.
    low = _material(bpy_mod, "LowIOR", (0.5, 0.5, 0.5))
    b = _bsdf(low)
    b.inputs["Transmission Weight"].default_value = 1.5  # -> 1
    b.inputs["IOR"].default_value = 0.5  # -> 1
    b.inputs["Metallic"].default_value = float("nan")  # -> 0
    nan = _material(bpy_mod, "NanGlass")
    _replace_surface(nan, "ShaderNodeBsdfGlass").inputs["IOR"].default_value = float("nan")  # -> 1.45
    big = _material(bpy_mod, "BigIOR", (0.5, 0.5, 0.5))
    b = _bsdf(big)
    b.inputs["Transmission Weight"].default_value = 0.5
    b.inputs["IOR"].default_value = 50.0  # -> 10
    b.inputs["Alpha"].default_value = float("nan")  # -> 1
    for i, m in enumerate((low, nan, big)):
        v, f = quad(-1, 1, -1, 1, -5)
        add_mesh(bpy_mod, m.name, v, f, m, location=(3 * i, 0, 0))
    add_camera(bpy_mod)
    capfd.readouterr()
    mt = _snapshot(bpy_mod).materials
    lo, na, bg = (mt.names.index(n) for n in ("LowIOR", "NanGlass", "BigIOR"))
    assert np.isfinite(mt.ior).all() and np.isfinite(mt.transmission).all() and np.isfinite(mt.alpha).all()
    assert mt.ior[lo] == 1.0 and mt.transmission[lo] == 1.0 and not mt.mirror[lo]
    assert mt.ior[na] == np.float32(1.45) and mt.transmission[na] == 1.0
    assert mt.ior[bg] == 10.0 and mt.alpha[bg] == 1.0 and mt.transmission[bg] == np.float32(0.5)
    err = capfd.readouterr().err
    for name, what in (("LowIOR", "'IOR'"), ("LowIOR", "'Transmission Weight'"), ("LowIOR", "'Metallic'"),
                       ("NanGlass", "'IOR'"), ("BigIOR", "'IOR'"), ("BigIOR", "'Alpha'")):
        line = next((ln for ln in err.splitlines() if f"material '{name}'" in ln), "")
        assert what in line, (name, what, err)
    assert err.count("material 'LowIOR'") == 1


def test_reflectivity_override_above_one_survives_to_the_scan(bpy_mod, empty_scene):
    # issue 22 review: the material's reflectivity property had max 1, so a retro-reflector
    # (the library's sheeting is 2.0) could not be set: 2.0 became 1.0
    mat = _material(bpy_mod, "Retro")
    mat.blensor.reflectivity = 2.0
    assert mat.blensor.reflectivity == pytest.approx(2.0)
    _wall(bpy_mod, mat, uv=False)
    _, r = _scan_wall(bpy_mod)
    assert len(r) == 480 and np.all(r.reflectivity == np.float32(2.0))
    np.testing.assert_allclose(r.intensity, 2.0 * H / r.range.astype(np.float64), rtol=1e-5)


def test_range_image_of_a_multi_return_result_keeps_the_strongest_return():
    # issue 22 review: range_image wrote every row into its cell, so the last (farthest)
    # return of each beam won; now each beam's strongest (io.packets.strongest_per_beam)
    from blensor_addon.io.formats.range_image import range_image
    from blensor_addon.io.packets import strongest_per_beam
    base = generic_result()
    res = multi_result(base)
    assert len(res) > len(base)
    pick = strongest_per_beam(res)
    assert pick.size == len(base)
    beam = res.ray_index.astype(np.int64)
    # the data must tell the two apart: beams whose strongest is the nearer return
    nearer = [i for i in pick if (beam == beam[i]).sum() == 2 and res.return_number[i] == 1]
    assert len(nearer) >= 3
    img = range_image(res)
    rows, cols = res.grid_shape
    cell = (rows - 1 - res.ring.astype(np.int64)) * cols + beam % cols
    flat = {k: img[k].ravel() for k in ("range", "intensity", "object_id")}
    np.testing.assert_array_equal(flat["range"][cell[pick]], res.range[pick].astype(np.float32))
    np.testing.assert_array_equal(flat["intensity"][cell[pick]], res.intensity[pick].astype(np.float32))
    np.testing.assert_array_equal(flat["object_id"][cell[pick]], res.object_id[pick])
    # a single-return result is unchanged: every row its own cell
    one = range_image(base)
    cell1 = (rows - 1 - base.ring.astype(np.int64)) * cols + base.ray_index.astype(np.int64) % cols
    np.testing.assert_array_equal(one["range"].ravel()[cell1], base.range.astype(np.float32))


def test_glass_reflects_back_within_half_the_beam_divergence(bpy_mod, empty_scene):
    # issue 22 review: the specular return of a clear pane counts within half the sensor's beam
    # divergence (the reflected beam overlaps the outgoing one), the 2 mrad default without one.
    # A pane 5 m ahead; columns every 0.1 deg from -0.35 deg: 0.87, 2.62, 4.36, 6.11 mrad off normal
    mat = _material(bpy_mod, "Clear", (0.8, 0.8, 0.8))
    _bsdf(mat).inputs["Transmission Weight"].default_value = 1.0
    _bsdf(mat).inputs["IOR"].default_value = 1.5
    v, f = quad(-20, 20, -20, 20, -5.0)
    add_mesh(bpy_mod, "Pane", v, f, mat)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-0.35, end_angle=0.35, angle_resolution=0.1)

    def offsets_mrad(**kw):
        r = blensor_addon.scan(cam, axes="blensor", **kw)
        return sorted(np.round(np.abs(np.arccos(np.clip(5.0 / r.range, -1, 1))) * 1e3, 1).tolist())

    assert max(offsets_mrad()) < SPECULAR_ACCEPTANCE * 1e3  # the default: 2 mrad
    within4 = offsets_mrad(beam_divergence=0.008)  # half of 8 mrad: 4 mrad
    assert 2.0 < max(within4) < 4.0 and len(within4) > len(offsets_mrad())  # 2.62 in, 4.36 out
