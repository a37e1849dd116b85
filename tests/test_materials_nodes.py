"""Reflectivity from the material the user already has (docs/physics.md): node-tree
evaluation (Principled, Diffuse, Glass, Mix, Image Texture), the explicit override, the
wavelength library, textures sampled at the hit's UV, unknown shaders."""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.materials import (DEFAULT_REFLECTIVITY, LIBRARY_PATH, MaterialTable, Texture, library,
                                          luminance, sample_image)
from conftest import add_camera, add_mesh, generic_sensor, quad

BACKENDS = ["native", "bvhtree"]
H = 10.0  # the wall z = -H below the sensor (axes "blensor": the sensor looks down -Z)


def _bsdf(mat):
    return next(n for n in mat.node_tree.nodes if n.type == "BSDF_PRINCIPLED")


def _material(bpy, name, color=None):
    mat = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        mat.use_nodes = True
    if color is not None:
        _bsdf(mat).inputs["Base Color"].default_value = (*color, 1.0)
    return mat


def _replace_surface(mat, bl_idname):
    """Material output's Surface fed by a new node ``bl_idname`` (the Principled removed)."""
    nt = mat.node_tree
    nt.nodes.remove(_bsdf(mat))
    node = nt.nodes.new(bl_idname)
    out = nt.get_output_node("ALL")
    nt.links.new(node.outputs[0], out.inputs["Surface"])
    return node


def _wall(bpy, mat, x0=-20.0, x1=20.0, uv=True):
    """The wall [x0, x1] x [-50, 50] at z = -H with a UV map u = (x - x0) / (x1 - x0),
    v = (y + 50) / 100."""
    v, f = quad(x0, x1, -50, 50, -H)
    ob = add_mesh(bpy, "Wall", v, f, mat)
    if uv:
        me = ob.data
        layer = me.uv_layers.new(name="UVMap")
        co = np.array([me.vertices[lp.vertex_index].co[:] for lp in me.loops])
        uvs = np.stack([(co[:, 0] - x0) / (x1 - x0), (co[:, 1] + 50.0) / 100.0], 1).astype(np.float32)
        layer.data.foreach_set("uv", uvs.ravel())
    return ob


def _scan_wall(bpy, backend="native", res=0.25, **kw):
    cam = add_camera(bpy)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=res, max_range=60.0,
                   ref_limit=-1.0, **kw)
    return cam, blensor_addon.scan(cam, axes="blensor", backend=backend)


#: linear grey values of the 8 stripes (each 5 m of the 40 m wall)
STRIPES = np.array([0.1, 0.9, 0.3, 0.7, 0.2, 0.6, 0.45, 0.8], np.float32)


def _striped_material(bpy, interpolation="Closest"):
    img = bpy.data.images.new("Stripes", len(STRIPES), 2, float_buffer=True)
    px = np.repeat(STRIPES[None, :, None], 2, 0) * np.array([1, 1, 1, 0], np.float32) + [0, 0, 0, 1]
    img.pixels.foreach_set(px.astype(np.float32).ravel())
    mat = _material(bpy, "Striped")
    nt = mat.node_tree
    tex = nt.nodes.new("ShaderNodeTexImage")
    tex.image = img
    tex.interpolation = interpolation
    nt.links.new(tex.outputs["Color"], _bsdf(mat).inputs["Base Color"])
    return mat


@pytest.mark.parametrize("backend", BACKENDS)
def test_texture_stripes_give_the_reflectivity_of_each_stripe(bpy_mod, empty_scene, backend):
    # issue 22, section 1: an image texture of known stripes on the wall; nearest texel
    # sampling gives exactly each stripe's value (grey: luminance = value) where the ray meets
    # it. Before issue 22 every point had the material's constant 0.8.
    _wall(bpy_mod, _striped_material(bpy_mod))
    _, r = _scan_wall(bpy_mod, backend)
    assert len(r) == 480
    x = r.xyz[:, 0].astype(np.float64)
    # hit x = -H tan(azimuth) for the known column azimuths (clockwise head, issue 21)
    stripe = np.floor((x + 20.0) / 5.0).astype(int)
    inner = (np.abs((x + 20.0) / 5.0 - np.round((x + 20.0) / 5.0)) > 0.01) & (stripe >= 0) & (stripe < 8)
    assert inner.sum() > 300
    np.testing.assert_array_equal(r.reflectivity[inner], STRIPES[stripe[inner]])
    assert set(np.unique(r.reflectivity[inner]).tolist()) == set(STRIPES.tolist())
    # seed 002 Eq. 4: intensity = reflectivity x cos(incidence), per texel
    cos_inc = H / r.range.astype(np.float64)
    np.testing.assert_allclose(r.intensity[inner], STRIPES[stripe[inner]] * cos_inc[inner], atol=1e-5)


def test_both_backends_agree_on_bilinear_texture(bpy_mod, empty_scene):
    # the UV comes from the kernel's barycentrics: both backends give the same texel blend
    _wall(bpy_mod, _striped_material(bpy_mod, "Linear"))
    _, a = _scan_wall(bpy_mod, "native", res=0.1)
    cam = bpy_mod.context.scene.camera
    b = blensor_addon.scan(cam, axes="blensor", backend="bvhtree")
    assert len(a) == len(b) > 1000
    np.testing.assert_allclose(a.reflectivity, b.reflectivity, atol=2e-5)
    # bilinear: values between the stripes occur, and a ray at a stripe's centre
    # (x = -17.5 m + 5 k) gives the stripe's value
    assert len(np.unique(a.reflectivity)) > 50
    x = a.xyz[:, 0].astype(np.float64)
    u = (x + 20.0) / 40.0 * 8 - 0.5
    i0 = np.floor(u).astype(int)
    f = u - i0
    ok = (i0 >= 0) & (i0 < 7)
    want = (1 - f[ok]) * STRIPES[i0[ok]] + f[ok] * STRIPES[i0[ok] + 1]
    np.testing.assert_allclose(a.reflectivity[ok], want, atol=2e-4)


def test_principled_base_colour_gives_its_luminance(bpy_mod, empty_scene):
    # Rec. 709 luminance of the linear base colour; Blender's default grey 0.8 gives 0.8
    c = (0.2, 0.5, 0.1)
    _wall(bpy_mod, _material(bpy_mod, "Green", c), uv=False)
    _, r = _scan_wall(bpy_mod)
    want = np.float32(0.2126 * 0.2 + 0.7152 * 0.5 + 0.0722 * 0.1)
    assert len(r) == 480 and np.all(r.reflectivity == want)
    assert math.isclose(float(luminance((0.8, 0.8, 0.8))), DEFAULT_REFLECTIVITY, abs_tol=1e-12)
    bpy_mod.data.objects["Wall"].data.materials[0] = _material(bpy_mod, "Untouched")
    assert np.all(blensor_addon.scan(bpy_mod.context.scene.camera).reflectivity == np.float32(0.8))


def test_explicit_override_wins_and_can_be_unset(bpy_mod, empty_scene):
    mat = _material(bpy_mod, "Red", (0.8, 0.05, 0.05))
    mat.blensor.library = "snow"
    _wall(bpy_mod, mat, uv=False)
    mat.blensor.reflectivity = 0.3
    cam, r = _scan_wall(bpy_mod)
    assert np.all(r.reflectivity == np.float32(0.3))
    # set to the default value explicitly: still an override (is_property_set)
    mat.blensor.reflectivity = 0.8
    assert np.all(blensor_addon.scan(cam).reflectivity == np.float32(0.8))
    mat.blensor.property_unset("reflectivity")
    assert np.all(blensor_addon.scan(cam).reflectivity == np.float32(library()["snow"].at(905)))
    mat.blensor.library = ""
    want = np.float32(0.2126 * 0.8 + 0.7152 * 0.05 + 0.0722 * 0.05)
    assert np.all(blensor_addon.scan(cam).reflectivity == want)


def test_library_entry_follows_the_sensor_wavelength(bpy_mod, empty_scene):
    lib = library()
    snow = lib["snow"]
    mat = _material(bpy_mod, "Snow")
    mat.blensor.library = "snow"
    _wall(bpy_mod, mat, uv=False)
    cam, r = _scan_wall(bpy_mod)  # default wavelength 905 nm
    assert np.all(r.reflectivity == np.float32(0.88))
    for wl, want in ((1550.0, 0.10), (865.0, 0.90), (2000.0, 0.10), (400.0, 0.90),
                     (1227.5, 0.88 + (0.10 - 0.88) * (1227.5 - 905) / (1550 - 905))):
        cam.data.blensor.wavelength = wl
        got = blensor_addon.scan(cam).reflectivity
        assert np.allclose(got, want, atol=1e-6), (wl, got[:3])
        assert math.isclose(snow.at(wl), want, abs_tol=1e-9)


def test_library_file_has_sources_and_the_issue_materials():
    import json
    raw = json.loads(LIBRARY_PATH.read_text())
    lib = library()
    for name in ("asphalt", "concrete", "brick", "car_paint_white", "car_paint_black", "car_paint_red",
                 "car_paint_silver", "glass", "vegetation", "grass", "tree_bark", "road_marking",
                 "retroreflective_sheeting", "skin", "fabric_cotton", "plastic_white", "wood", "snow",
                 "water", "soil", "sand"):
        e = lib[name]
        assert set(e.wavelengths.tolist()) >= {865.0, 905.0, 1550.0}
        assert e.source
        # the scene scripts' plain reflectivity is the 905 nm value
        assert raw[name]["reflectivity"] == e.at(905)
    assert lib["retroreflective_sheeting"].at(905) > 1.0  # brighter than any diffuse target
    assert lib["vegetation"].at(1550) < lib["vegetation"].at(905)  # leaf water absorbs at 1550 nm


def test_metallic_makes_a_mirror(bpy_mod, empty_scene):
    # the mirror of tests/test_analytic.py, as a Principled BSDF with Metallic 1 (no
    # BlenSor setting): rays reflect onto the wall x = 6 (range s1 + s2 > 4 m)
    mat = _material(bpy_mod, "Chrome")
    _bsdf(mat).inputs["Metallic"].default_value = 1.0
    d = 1.0
    add_mesh(bpy_mod, "Mirror", [(-d, -d, -4 + d), (d, -d, -4 - d), (d, d, -4 - d), (-d, d, -4 + d)],
             [(0, 1, 2, 3)], mat)
    add_mesh(bpy_mod, "Wall", [(6, -50, -50), (6, 50, -50), (6, 50, 50), (6, -50, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-0.5, end_angle=0.5, angle_resolution=0.25)
    r = blensor_addon.scan(cam, axes="blensor")
    assert len(r) == 4 and np.all(r.range > 9.9)
    _bsdf(mat).inputs["Metallic"].default_value = 0.4  # below the 0.5 threshold: a diffuse surface
    r = blensor_addon.scan(cam, axes="blensor")
    assert len(r) == 4 and np.all(r.range < 4.1)
    mat.blensor.mirror = True  # an explicit setting wins over the node tree
    assert np.all(blensor_addon.scan(cam, axes="blensor").range > 9.9)


def _snapshot(bpy):
    from blensor_addon.scene.extract import SceneExtractor
    cam = bpy.context.scene.camera
    return SceneExtractor().extract(bpy.context.evaluated_depsgraph_get(), cam)


def _row(snap, name):
    return snap.materials.names.index(name)


def test_glass_transmission_and_ior_in_the_table(bpy_mod, empty_scene):
    glass = _material(bpy_mod, "Glass")
    _replace_surface(glass, "ShaderNodeBsdfGlass").inputs["IOR"].default_value = 1.52
    half = _material(bpy_mod, "Half", (0.5, 0.5, 0.5))
    _bsdf(half).inputs["Transmission Weight"].default_value = 0.5
    _bsdf(half).inputs["IOR"].default_value = 1.33
    leaf = _material(bpy_mod, "Leaf")
    _bsdf(leaf).inputs["Alpha"].default_value = 0.25
    for i, m in enumerate((glass, half, leaf)):
        v, f = quad(-1, 1, -1, 1, -5 - i)
        add_mesh(bpy_mod, m.name, v, f, m, location=(3 * i, 0, 0))
    add_camera(bpy_mod)
    mt = _snapshot(bpy_mod).materials
    g, h, lf = _row_all(mt, "Glass", "Half", "Leaf")
    assert mt.transmission[g] == 1.0 and mt.ior[g] == np.float32(1.52)
    g_refl = library()["glass"].at(905)
    assert mt.reflectivity[g] == np.float32(g_refl) and g_refl < 0.1  # the glass entry, not a colour
    assert mt.transmission[h] == 0.5 and mt.ior[h] == np.float32(1.33)
    # issue 22 review: the opaque part's own reflectivity (the tracer applies the shares); was
    # 0.5 x 0.5 + 0.5 x 0.02, counting the transmission twice
    assert mt.reflectivity[h] == np.float32(0.5)
    assert mt.alpha[lf] == 0.25 and mt.transmission[lf] == 0 and mt.reflectivity[lf] == np.float32(0.8)
    assert mt.has_optics()


def _row_all(mt, *names):
    return [mt.names.index(n) for n in names]


def test_mix_shader_weights_its_shaders(bpy_mod, empty_scene):
    mat = _material(bpy_mod, "Mixed", (0.8, 0.8, 0.8))
    nt = mat.node_tree
    mix = nt.nodes.new("ShaderNodeMixShader")
    diffuse = nt.nodes.new("ShaderNodeBsdfDiffuse")
    diffuse.inputs["Color"].default_value = (0.2, 0.2, 0.2, 1.0)
    mix.inputs[0].default_value = 0.25
    nt.links.new(diffuse.outputs[0], mix.inputs[1])
    nt.links.new(_bsdf(mat).outputs[0], mix.inputs[2])
    nt.links.new(mix.outputs[0], nt.get_output_node("ALL").inputs["Surface"])
    cutout = _material(bpy_mod, "Cutout")
    nt = cutout.node_tree
    mix = nt.nodes.new("ShaderNodeMixShader")
    transparent = nt.nodes.new("ShaderNodeBsdfTransparent")
    mix.inputs[0].default_value = 0.7
    nt.links.new(transparent.outputs[0], mix.inputs[1])
    nt.links.new(_bsdf(cutout).outputs[0], mix.inputs[2])
    nt.links.new(mix.outputs[0], nt.get_output_node("ALL").inputs["Surface"])
    for i, m in enumerate((mat, cutout)):
        v, f = quad(-1, 1, -1, 1, -5)
        add_mesh(bpy_mod, m.name, v, f, m, location=(3 * i, 0, 0))
    add_camera(bpy_mod)
    mt = _snapshot(bpy_mod).materials
    m, c = _row_all(mt, "Mixed", "Cutout")
    assert math.isclose(mt.reflectivity[m], 0.75 * 0.2 + 0.25 * 0.8, rel_tol=1e-6)
    # a Transparent BSDF mixed in is coverage, not a darker surface
    assert math.isclose(mt.alpha[c], 0.7, rel_tol=1e-6) and mt.reflectivity[c] == np.float32(0.8)


def test_unknown_shader_warns_once_and_uses_the_default(bpy_mod, empty_scene, capfd):
    mat = _material(bpy_mod, "Glowing", (0.1, 0.1, 0.1))
    _replace_surface(mat, "ShaderNodeEmission")
    _wall(bpy_mod, mat, uv=False)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-60.0, end_angle=60.0, angle_resolution=0.25, max_range=60.0)
    capfd.readouterr()
    r = blensor_addon.scan(cam, axes="blensor")
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "Glowing" in ln]
    assert len(lines) == 1, err
    assert "Emission" in lines[0] and "warning" in lines[0]
    assert len(r) == 480 and np.all(r.reflectivity == np.float32(DEFAULT_REFLECTIVITY))
    # with an override the override is used (and named)
    mat.blensor.reflectivity = 0.4
    r = blensor_addon.scan(cam, axes="blensor")
    assert np.all(r.reflectivity == np.float32(0.4))
    assert "reflectivity setting" in capfd.readouterr().err


def test_missing_image_warns_and_falls_back(bpy_mod, empty_scene, capfd, tmp_path):
    mat = _material(bpy_mod, "Lost")
    nt = mat.node_tree
    tex = nt.nodes.new("ShaderNodeTexImage")
    tex.image = bpy_mod.data.images.new("Nope", 4, 4)
    tex.image.source = "FILE"
    tex.image.filepath = str(tmp_path / "missing.png")
    nt.links.new(tex.outputs["Color"], _bsdf(mat).inputs["Base Color"])
    _wall(bpy_mod, mat)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-10.0, end_angle=10.0, angle_resolution=1.0)
    capfd.readouterr()
    r = blensor_addon.scan(cam)
    err = capfd.readouterr().err
    assert "Nope" in err and "Lost" in err
    assert len(r) == 20 and np.all(r.reflectivity == np.float32(0.8))


def test_srgb_byte_image_is_decoded_to_linear(bpy_mod, empty_scene, tmp_path):
    # an 8-bit sRGB PNG: the texel's reflectivity is the luminance of its linear value
    from blensor_addon.scene.shading import ImageCache
    img = bpy_mod.data.images.new("Bytes", 2, 1)
    img.pixels.foreach_set(np.array([0.5, 0.5, 0.5, 1, 1.0, 0.0, 0.0, 1], np.float32))
    path = tmp_path / "bytes.png"
    img.filepath_raw = str(path)
    img.file_format = "PNG"
    img.save()
    loaded = bpy_mod.data.images.load(str(path))
    lum = ImageCache().get(loaded)
    s = np.array([128 / 255, 1.0])
    lin = ((s + 0.055) / 1.055) ** 2.4
    np.testing.assert_allclose(lum[0], [lin[0], 0.2126 * lin[1]], rtol=1e-5)


def test_sample_image_nearest_bilinear_and_wrap():
    img = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    uv = np.array([[0.1, 0.5], [0.3, 0.5], [1.1, 0.5], [-0.1, 0.5]])
    np.testing.assert_array_equal(sample_image(img, uv, "closest"), [0.0, 1.0, 0.0, 3.0])
    np.testing.assert_array_equal(sample_image(img, uv, "closest", "EXTEND"), [0.0, 1.0, 3.0, 0.0])
    np.testing.assert_array_equal(sample_image(img, uv, "closest", "CLIP"), [0.0, 1.0, 0.0, 0.0])
    # bilinear between texel centres (i + 0.5) / 4; repeat wraps 3 -> 0
    got = sample_image(img, np.array([[0.25, 0.5], [0.5, 0.5], [0.0, 0.5]]))
    np.testing.assert_allclose(got, [0.5, 1.5, 1.5], atol=1e-6)


def test_untextured_lookup_is_the_plain_gather():
    # the fast path: no textures, no library entries -> reflectivity[rows], the same array
    mt = MaterialTable(reflectivity=np.array([0.8, 0.3], np.float32), mirror=np.zeros(2, bool),
                       color=np.zeros((2, 3), np.uint8), names=["", "a"], mesh_tri_offset=np.array([0, 2]),
                       tri_material=np.zeros(2, np.int32), inst_mesh=np.zeros(1, np.int32),
                       inst_slot_offset=np.array([0, 1]), slot_material=np.array([1], np.int32))
    rows = np.array([1, 0, 1], np.int32)
    zeros = np.zeros(3, np.int32)
    got = mt.reflectivity_at(rows, zeros, zeros, np.zeros((3, 2), np.float32), 1550)
    np.testing.assert_array_equal(got, np.float32([0.3, 0.8, 0.3]))
    # a texture on row 1 with UVs of mesh 0: sampled at the barycentric UV
    mt.extra = {"textures": {1: Texture(np.array([[0.1, 0.9]], np.float32), interpolation="closest")},
                "uv": {(0, ""): np.array([[[0, 0], [1, 0], [0, 1]], [[0, 0], [1, 0], [0, 1]]], np.float32)}}
    got = mt.reflectivity_at(rows, np.zeros(3, np.int32), np.array([0, 0, 1], np.int32),
                             np.array([[0.2, 0.1], [0.0, 0.0], [0.7, 0.1]], np.float32), None)
    np.testing.assert_allclose(got, [0.1, 0.8, 0.9])


def test_panel_source_line_unset_operator_and_library_search(bpy_mod, empty_scene):
    from blensor_addon.scene.shading import material_source
    from blensor_addon.ui.props import _library_names
    mat = _material(bpy_mod, "Paint", (0.5, 0.5, 0.5))
    assert material_source(mat) == "Node tree: 0.500 (base colour luminance)"
    mat.blensor.library = "asphalt"
    assert material_source(mat) == "Library entry 'asphalt': 0.100 at 905 nm"
    mat.blensor.reflectivity = 0.25
    assert material_source(mat) == "Reflectivity set: 0.250"
    with bpy_mod.context.temp_override(material=mat):
        assert bpy_mod.ops.blensor.material_unset(prop="reflectivity") == {"FINISHED"}
    assert not mat.blensor.is_property_set("reflectivity")
    assert material_source(mat).startswith("Library entry 'asphalt'")
    assert _library_names(None, None, "paint_") == ["car_paint_black", "car_paint_blue", "car_paint_red",
                                                    "car_paint_silver", "car_paint_white"]


def test_override_and_library_survive_save_and_reload(bpy_mod, empty_scene, tmp_path):
    # is_property_set is what a fresh process sees in the saved file (Blender 5.0 keeps
    # add-on properties apart from custom properties)
    import json
    import subprocess
    import sys
    import textwrap
    set_ = _material(bpy_mod, "Set", (0.1, 0.1, 0.1))
    set_.blensor.reflectivity = 0.8  # the default value, but set
    lib = _material(bpy_mod, "Lib")
    lib.blensor.library = "water"
    nodes = _material(bpy_mod, "Nodes", (0.3, 0.3, 0.3))
    for m in (set_, lib, nodes):
        m.use_fake_user = True
    path = tmp_path / "mats.blend"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(path))
    code = textwrap.dedent(f"""
        import json, bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(path)!r})
        from blensor_addon.scene.shading import evaluate_material
        out = {{}}
        for n in ("Set", "Lib", "Nodes"):
            ev = evaluate_material(bpy.data.materials[n])
            out[n] = [ev.source, ev.reflectivity]
        print(json.dumps(out))
        blensor_addon.unregister()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["Set"] == ["override", pytest.approx(0.8)]
    assert got["Lib"] == ["library", pytest.approx(0.02)]
    assert got["Nodes"] == ["nodes", pytest.approx(0.3, abs=1e-6)]


def test_uv_map_node_and_mapping_scale(bpy_mod, empty_scene):
    # a second UV map with u reversed, picked by a UV Map node, through a Mapping node
    # scaling u by 2: the stripes run backwards and twice (Blender's default repeat)
    mat = _striped_material(bpy_mod)
    ob = _wall(bpy_mod, mat)
    me = ob.data
    flipped = me.uv_layers.new(name="Flipped")
    uv = np.empty(len(me.loops) * 2, np.float32)
    me.uv_layers["UVMap"].data.foreach_get("uv", uv)
    uv = uv.reshape(-1, 2)
    uv[:, 0] = 1.0 - uv[:, 0]
    flipped.data.foreach_set("uv", uv.ravel())
    nt = mat.node_tree
    tex = next(n for n in nt.nodes if n.type == "TEX_IMAGE")
    uvnode = nt.nodes.new("ShaderNodeUVMap")
    uvnode.uv_map = "Flipped"
    mapping = nt.nodes.new("ShaderNodeMapping")
    mapping.inputs["Scale"].default_value = (2.0, 1.0, 1.0)
    nt.links.new(uvnode.outputs["UV"], mapping.inputs["Vector"])
    nt.links.new(mapping.outputs["Vector"], tex.inputs["Vector"])
    _, r = _scan_wall(bpy_mod)
    x = r.xyz[:, 0].astype(np.float64)
    u = 2.0 * (1.0 - (x + 20.0) / 40.0) * 8  # texel coordinate before the wrap
    inner = (np.abs(u - np.round(u)) > 0.02) & (np.abs(x) < 20.0)
    assert inner.sum() > 300
    np.testing.assert_array_equal(r.reflectivity[inner], STRIPES[np.floor(u[inner]).astype(int) % 8])


def test_material_without_nodes_uses_its_viewport_colour(bpy_mod, empty_scene):
    # Blender 4.2/4.5: use_nodes off renders the viewport colour and metallic (5.0 always
    # uses the node tree: compat.material_uses_nodes)
    if bpy_mod.app.version >= (5, 0, 0):
        pytest.skip("Blender 5.0 materials always use their node tree")
    mat = bpy_mod.data.materials.new("Plain")
    mat.use_nodes = False
    mat.diffuse_color = (0.1, 0.6, 0.2, 1.0)
    from blensor_addon.scene.shading import evaluate_material
    ev = evaluate_material(mat)
    assert ev.source == "nodes"
    assert math.isclose(ev.reflectivity, float(luminance((0.1, 0.6, 0.2))), rel_tol=1e-6)
    mat.metallic = 1.0
    assert evaluate_material(mat).mirror


def test_unknown_library_entry_warns_and_uses_the_node_tree(bpy_mod, empty_scene, capfd):
    mat = _material(bpy_mod, "Typo", (0.5, 0.5, 0.5))
    mat.blensor.library = "asphalt_typo"
    _wall(bpy_mod, mat, uv=False)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", start_angle=-10.0, end_angle=10.0, angle_resolution=1.0)
    capfd.readouterr()
    r = blensor_addon.scan(cam)
    err = capfd.readouterr().err
    assert "asphalt_typo" in err and "Typo" in err
    assert len(r) == 20 and np.all(r.reflectivity == np.float32(0.5))


def test_library_entry_marked_mirror_reflects(bpy_mod, empty_scene):
    from blensor_addon.scene.shading import evaluate_material
    mat = _material(bpy_mod, "Window")
    mat.blensor.library = "shop_window"
    ev = evaluate_material(mat)
    assert ev.mirror and ev.source == "library" and ev.reflectivity == library()["shop_window"].at(905)
    mat.blensor.mirror = False
    assert not evaluate_material(mat).mirror


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
    from blensor_addon.scene.shading import ImageCache
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
