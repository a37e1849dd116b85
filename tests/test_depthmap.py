"""Depth-map export (``blensor depth``, ``blensor.export_depth_map``): EXR read back with the
OpenEXR package, npy, PFM and the original's .dmap layout, against the closed form of a
wall, and the CLI's --set/--formats refusals."""
from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blensor_addon
from conftest import add_camera, add_mesh

BLENSOR = str(Path(sys.executable).parent / "blensor")
W, H, D = 64, 48, 6.0


def run(*args):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def wall_blend(bpy_mod, empty_scene, tmp_path):
    """A wall D m ahead filling the left half of a 64 x 48 view, nothing on the right."""
    add_mesh(bpy_mod, "Wall", [(-50, D, -50), (0, D, -50), (0, D, 50), (-50, D, 50)], [(0, 1, 2, 3)])
    cam = add_camera(bpy_mod, "Cam", rotation=(math.pi / 2, 0.0, 0.0))
    cam.data.lens = 30.0
    cam.data.shift_x = 0.05
    scene = bpy_mod.context.scene
    scene.render.resolution_x, scene.render.resolution_y = W, H
    scene.frame_start, scene.frame_end = 1, 2
    path = tmp_path / "wall.blend"
    bpy_mod.ops.wm.save_as_mainfile(filepath=str(path))
    return path, cam


def expected(cam, scene):
    """Closed form of the wall: z = D where the pixel's ray goes left of x = 0, and the
    radial range D |d| / |d_z|; NaN elsewhere. (H, W) float64 each."""
    frame = [tuple(v) for v in cam.data.view_frame(scene=scene)]
    xs, ys = [c[0] for c in frame], [c[1] for c in frame]
    zf = frame[0][2]
    x = min(xs) + (np.arange(W) + 0.5) / W * (max(xs) - min(xs))
    y = max(ys) - (np.arange(H) + 0.5) / H * (max(ys) - min(ys))
    dx, dy = np.meshgrid(x, y)
    hit = dx < 0
    z = np.where(hit, D, np.nan)
    rng = np.where(hit, D * np.sqrt(dx * dx + dy * dy + zf * zf) / abs(zf), np.nan)
    return z, rng


def test_depth_cli_writes_every_format(bpy_mod, wall_blend, tmp_path):
    import OpenEXR
    path, cam = wall_blend
    z_exp, r_exp = expected(cam, bpy_mod.context.scene)
    out = tmp_path / "d"
    res = run("depth", path, "--frames", "1-2", "--out", out, "--formats", "exr,npy,pfm,dmap")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        [f"depth{f:05d}{s}" for f in (1, 2) for s in (".exr", "_z.npy", "_range.npy", "_object_id.npy", ".pfm",
                                                      ".dmap")] + ["manifest.json", "trajectory.tum"])
    z = np.load(out / "depth00001_z.npy")
    rng = np.load(out / "depth00001_range.npy")
    oid = np.load(out / "depth00001_object_id.npy")
    assert z.shape == (H, W) and z.dtype == np.float32 and oid.dtype == np.uint32
    assert np.array_equal(np.isnan(z), np.isnan(z_exp)) and 0 < np.isnan(z).sum() < H * W
    np.testing.assert_allclose(z, z_exp, atol=1e-4)
    np.testing.assert_allclose(rng, r_exp, atol=1e-4)
    assert set(np.unique(oid)) == {0, int(oid.max())} and oid.max() > 0
    # EXR, read back with the OpenEXR package: R = z, G = range, B = object id, A = returned
    with OpenEXR.File(str(out / "depth00001.exr")) as f:
        px = f.channels()["RGBA"].pixels
    assert px.shape == (H, W, 4) and px.dtype == np.float32
    assert np.array_equal(px[..., 0], z, equal_nan=True) and np.array_equal(px[..., 1], rng, equal_nan=True)
    assert np.array_equal(px[..., 2], oid.astype(np.float32)) and np.array_equal(px[..., 3], np.isfinite(z))
    # PFM: header, little-endian scale, rows bottom to top
    data = (out / "depth00001.pfm").read_bytes()
    head = f"Pf\n{W} {H}\n-1.0\n".encode()
    assert data.startswith(head) and len(data) == len(head) + 4 * W * H
    assert np.array_equal(np.frombuffer(data[len(head):], "<f4").reshape(H, W)[::-1], z, equal_nan=True)
    # .dmap (reference 10.5): int32 width, int32 height, float64 radial distances, bottom row first
    raw = (out / "depth00001.dmap").read_bytes()
    assert struct.unpack("<ii", raw[:8]) == (W, H) and len(raw) == 8 + 8 * W * H
    assert np.array_equal(np.frombuffer(raw[8:], "<f8").reshape(H, W)[::-1], rng.astype(np.float64),
                          equal_nan=True)
    # a second export into the same folder is refused unless --overwrite
    again = run("depth", path, "--frames", "1", "--out", out)
    assert again.returncode == 2 and "--out must be an empty folder or one without BlenSor output" in again.stderr
    assert run("depth", path, "--frames", "1", "--out", out, "--formats", "npy", "--overwrite").returncode == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "depth00001_object_id.npy", "depth00001_range.npy", "depth00001_z.npy", "manifest.json", "trajectory.tum"]


@pytest.mark.parametrize("args, needle", [
    (("--formats", "tiff"), "formats must be a comma-separated subset of exr,npy,pfm,dmap"),
    (("--set", "max_range=-3"), "max_range must be in (0, 1e+06] m"),
    (("--set", "backfolding=true"), "backfolding must be a setting of sensor type 'depth'"),
    (("--set", "sensor_type=tof"), "sensor_type must be depth"),
    (("--set", "noise_sigma"), "--set must be NAME=VALUE"),
])
def test_depth_cli_refuses_bad_input(wall_blend, tmp_path, args, needle):
    path, _ = wall_blend
    res = run("depth", path, "--out", tmp_path / "bad", *args)
    assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())


def test_export_depth_map_operator(bpy_mod, wall_blend, tmp_path):
    _, cam = wall_blend
    s = cam.data.blensor
    s.sensor_type = "depth"
    s.output_dir = str(tmp_path / "op")
    s.depth_formats = {"npy", "pfm"}
    bpy_mod.context.view_layer.objects.active = cam
    assert bpy_mod.ops.blensor.export_depth_map() == {"FINISHED"}
    op = tmp_path / "op" / "depth"  # the panel's depth export writes into its own subfolder
    assert (op / "depth00002_z.npy").is_file() and (op / "depth00001.pfm").is_file()
    z_exp, _ = expected(cam, bpy_mod.context.scene)
    np.testing.assert_allclose(np.load(op / "depth00001_z.npy"), z_exp, atol=1e-4)
    # and a single scan of the same camera gives the same image
    r = blensor_addon.scan(cam)
    np.testing.assert_allclose(r.image("range")[:, :W // 2], expected(cam, bpy_mod.context.scene)[1][:, :W // 2],
                               atol=1e-4)
