"""Point meshes of a single scan (``Scan.<frame>`` / ``NoisyScan.<frame>``), made through
the public path (the *Single scan* operator, real bpy, the demo crossing): vertex positions
and every attribute's values against the ``ScanResult`` of the same scan.

The clean mesh's vertices are ``xyz``, the noisy mesh's ``xyz_noisy``; an attribute named
after a result field holds that field on both meshes (``range`` the clean range,
``range_noisy`` the noisy one), converted to Blender's attribute types: float32, int32,
3-vectors, and colours as linear floats from the sRGB bytes.
"""
from __future__ import annotations

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.result import FIELDS
from conftest import point_norm

#: Fields that a point mesh must carry as attributes (at least; every other result field
#: present as an attribute is checked the same way).
REQUIRED = {"timestamp", "azimuth", "elevation", "range", "range_noisy", "object_id", "channel",
            "reflectivity", "intensity", "normal", "color"}


def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    """(N, 3) uint8 sRGB -> (N, 3) float32 linear, the IEC 61966-2-1 transfer function."""
    s = c.astype(np.float32) / 255.0
    return np.where(s <= 0.04045, s / 12.92, ((s + 0.055) / 1.055) ** 2.4).astype(np.float32)


def attribute_values(attr, n: int) -> np.ndarray:
    """The values of a POINT attribute of ``n`` points as a numpy array."""
    kind = attr.data_type
    if kind in ("FLOAT", "INT", "INT8", "BOOLEAN"):
        dtype = {"FLOAT": np.float32, "INT": np.int32, "INT8": np.int32, "BOOLEAN": bool}[kind]
        out = np.empty(n, dtype)
        attr.data.foreach_get("value", out)
        return out
    if kind == "FLOAT_VECTOR":
        out = np.empty(n * 3, np.float32)
        attr.data.foreach_get("vector", out)
        return out.reshape(n, 3)
    if kind in ("FLOAT_COLOR", "BYTE_COLOR"):
        out = np.empty(n * 4, np.float32)
        attr.data.foreach_get("color", out)
        return out.reshape(n, 4)
    raise AssertionError(f"attribute {attr.name!r} has type {kind}, which this test cannot read")


def check_mesh(obj, result, noisy: bool) -> set:
    """Assert that ``obj``'s vertices and attributes are ``result``'s values; returns the
    names of the result fields found as attributes."""
    mesh = obj.data
    n = len(result)
    assert len(mesh.vertices) == n
    co = np.empty(n * 3, np.float32)
    mesh.vertices.foreach_get("co", co)
    co = co.reshape(n, 3)
    expected = result.xyz_noisy if noisy else result.xyz
    assert np.array_equal(co, expected), f"{obj.name}: vertices are not {'xyz_noisy' if noisy else 'xyz'}"
    seen = set()
    unknown = []
    if hasattr(result, "all_fields"):  # every per-point field, registered extras included
        fields = {k: np.asarray(v) for k, v in result.all_fields().items()}
    else:
        fields = {k: getattr(result, k) for k in FIELDS}
        fields.update((k, np.asarray(v)) for k, v in result.extra.items())
    for attr in mesh.attributes:
        name = attr.name
        if name == "position" or name.startswith("."):
            continue  # Blender's own: the vertex positions (checked above) and internal flags
        assert attr.domain == "POINT", (obj.name, name, attr.domain)
        if name not in fields:
            unknown.append(name)
            continue
        ref = fields[name]
        got = attribute_values(attr, n)
        if attr.data_type in ("FLOAT_COLOR", "BYTE_COLOR"):
            assert ref.dtype == np.uint8 and ref.shape == (n, 3), name
            np.testing.assert_allclose(got[:, :3], srgb_to_linear(ref), atol=1e-6 if attr.data_type ==
                                       "FLOAT_COLOR" else 3e-3, err_msg=f"{obj.name}.{name}")
            assert (got[:, 3] == 1.0).all(), name
        elif attr.data_type == "FLOAT" or attr.data_type == "FLOAT_VECTOR":
            # float32 in Blender: the float32 fields bit for bit, timestamp rounded to float32
            assert np.array_equal(got, ref.astype(np.float32)), f"{obj.name}.{name} differs from the result"
        else:
            assert np.array_equal(got, ref.astype(got.dtype)), f"{obj.name}.{name} differs from the result"
            assert ref.max(initial=0) <= np.iinfo(np.int32).max, name  # no wrap-around in int32
        seen.add(name)
    assert not unknown, f"{obj.name}: attributes that are no result field: {unknown}"
    return seen


@pytest.mark.parametrize("frame_of_reference", ["sensor", "world"])
def test_scan_operator_meshes_hold_the_results_values(bpy_mod, crossing, frame_of_reference):
    cam = bpy_mod.data.objects["Velodyne"]
    s = cam.data.blensor
    s.add_scan_mesh = True
    s.add_noisy_scan_mesh = True
    s.frame_of_reference = frame_of_reference
    bpy_mod.context.scene.frame_set(7)
    # the same scan through the Python API (same camera settings, seed and frame)
    result = blensor_addon.scan(cam, frame_of_reference=frame_of_reference, axes=s.axes)
    assert bpy_mod.ops.blensor.scan() == {"FINISHED"}
    assert result.frame == 7 and len(result) > 100_000
    clean, noisy = bpy_mod.data.objects["Scan.7"], bpy_mod.data.objects["NoisyScan.7"]
    # the noise is there to be told apart: every point moves along its ray, most by > 1 mm
    moved = np.linalg.norm(result.xyz_noisy - result.xyz, axis=1)
    assert np.median(moved) > 1e-3 and not np.array_equal(result.range, result.range_noisy)
    seen_clean = check_mesh(clean, result, noisy=False)
    seen_noisy = check_mesh(noisy, result, noisy=True)
    assert seen_clean == seen_noisy, seen_clean ^ seen_noisy
    assert REQUIRED <= seen_clean, REQUIRED - seen_clean
    if frame_of_reference == "sensor":
        # placed at the sensor; the rays start at their beam origins: |point| is the (noisy)
        # range with the origin offset across the beam (point_norm)
        for obj in (clean, noisy):
            np.testing.assert_allclose(np.array(obj.matrix_world), result.sensor_to_world, atol=1e-6)
        co = np.empty(len(result) * 3, np.float32)
        noisy.data.vertices.foreach_get("co", co)
        np.testing.assert_allclose(np.linalg.norm(co.reshape(-1, 3), axis=1),
                                   point_norm(np.abs(result.range_noisy), result.channel), rtol=2e-5, atol=1e-5)
    else:
        for obj in (clean, noisy):
            np.testing.assert_allclose(np.array(obj.matrix_world), np.eye(4), atol=0)
    assert bpy_mod.ops.blensor.delete_scans() == {"FINISHED"}


def test_point_meshes_of_a_scan_do_not_shift_later_object_ids(bpy_mod, crossing):
    """Object ids rank the file's objects by name; the point meshes a Single scan adds
    (``Scan.7``, ``NoisyScan.7``, named between capitals and lower case) are left out of
    that ranking, so a scan after them labels every point with the same ids and table."""
    cam = bpy_mod.data.objects["Velodyne"]
    s = cam.data.blensor
    s.add_scan_mesh = True
    s.add_noisy_scan_mesh = True
    bpy_mod.context.scene.frame_set(7)
    before = blensor_addon.scan(cam)
    assert bpy_mod.ops.blensor.scan() == {"FINISHED"}
    assert "Scan.7" in bpy_mod.data.objects and "NoisyScan.7" in bpy_mod.data.objects
    after = blensor_addon.scan(cam)
    assert bpy_mod.ops.blensor.delete_scans() == {"FINISHED"}
    assert len(set(before.object_id.tolist())) > 3
    assert np.array_equal(before.object_id, after.object_id)
    assert before.objects == after.objects
    assert not any(o["name"].startswith(("Scan.", "NoisyScan.")) for o in after.objects)
