"""Every writer of the registry, read back with tools nobody here wrote: laspy (LAS,
LAZ), plyfile and Open3D's tensor API (PLY), numpy with SemanticKITTI's layout (KITTI);
REP-103 axes; semantic classes; bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.axes import ROS_FROM_BLENSOR, ros_pose
from blensor_addon.core.errors import SettingsError
from blensor_addon.jobs.range_scan import scan_range
from conftest import CROSSING, add_camera, add_mesh

BLENSOR = str(Path(sys.executable).parent / "blensor")


@pytest.fixture
def velodyne(bpy_mod, crossing):
    """The demo's HDL-64E in the frozen-frame model (one file per scene frame: these tests
    check file layouts per frame; tests/test_continuous.py covers sweeps)."""
    cam = bpy_mod.data.objects["Velodyne"]
    cam.data.blensor.time_model = "frame"
    return cam


@pytest.fixture
def run(velodyne, tmp_path):
    job = scan_range(velodyne, range(2, 5), tmp_path, ("npz", "las", "laz", "ply", "kitti"), seed=4,
                     axes="blensor")
    assert job.status == "complete"
    return tmp_path


def test_las_and_laz_read_back_with_laspy(run):
    import laspy
    for fmt in ("las", "laz"):
        for kind, key in (("clean", "xyz"), ("noisy", "xyz_noisy")):
            npz = np.load(run / "scan00003.npz")
            las = laspy.read(run / kind / f"scan00003.{fmt}")
            assert las.header.version.major == 1 and las.header.version.minor == 4
            assert las.header.point_format.id == 7 and len(las.points) == len(npz["range"]) > 50_000
            # points by ring (elevation rank), each ring in firing order: the npz's points
            # in that order
            order = np.argsort(npz["ring"], kind="stable")
            assert not np.array_equal(order, np.arange(len(order)))  # the order is not the npz's
            z = {k: npz[k][order] for k in npz.files if npz[k].shape[:1] == order.shape}
            assert (np.diff(las.ring.astype(int)) >= 0).all()
            ring_start = np.r_[True, np.diff(las.ring.astype(int)) > 0]
            assert (np.diff(las.gps_time)[~ring_start[1:]] >= 0).all()
            xyz = np.stack([las.x, las.y, las.z], 1)
            assert np.abs(xyz - z[key].astype(np.float64)).max() <= 1e-4  # 0.1 mm
            assert np.array_equal(las.gps_time, z["timestamp"])
            assert np.array_equal(las.classification, np.minimum(z["semantic"], 255))
            assert np.array_equal(las.semantic, z["semantic"]) and np.array_equal(las.ring, z["ring"])
            assert np.array_equal(las.object_id, z["object_id"])
            assert np.array_equal(las.instancer_id, z["instancer_id"])
            assert np.array_equal(las.point_source_id, z["instance_id"] & 0xFFFF)
            assert np.array_equal(las.reflectivity, z["reflectivity"])
            assert np.array_equal(np.stack([las.red, las.green, las.blue], 1), z["color"].astype(np.uint16) * 257)
            assert np.array_equal(las["range"], z["range_noisy" if kind == "noisy" else "range"])
            assert np.array_equal(las.intensity, np.round(z["intensity"] * 65535).astype(np.uint16))
            # one return per pulse: LAS 1.4 wants return numbers 1..15
            assert (np.asarray(las.return_number) == 1).all()
            assert (np.asarray(las.number_of_returns) == 1).all()
            assert list(las.header.number_of_points_by_return[:2]) == [len(las.points), 0]
            assert set(np.unique(las.semantic)) >= {40, 48, 50}  # road, sidewalk, building


def test_laz_holds_the_las_records_in_equal_variable_size_chunks(run):
    import laspy
    import lazrs

    from blensor_addon.io.formats.las import laz_chunks
    assert laz_chunks(52_000) == [26_000] * 2 and laz_chunks(100_001) == [25_000, 25_000, 25_000, 25_001]
    assert laz_chunks(1) == [1] and laz_chunks(0) == [] and sum(laz_chunks(124_109)) == 124_109
    for kind in ("clean", "noisy"):
        las, laz = (laspy.read(run / kind / f"scan00003.{fmt}") for fmt in ("las", "laz"))
        assert np.asarray(laz.points.array).tobytes() == np.asarray(las.points.array).tobytes()
        with open(run / kind / "scan00003.laz", "rb") as f:
            header = laspy.LasHeader.read_from(f)  # the reader drops the laszip VLR; this keeps it
            vlr = lazrs.LazVlr(header.vlrs.get("LasZipVlr")[0].record_data)
            assert vlr.uses_variable_size_chunks()
            f.seek(header.offset_to_point_data)
            table = lazrs.read_chunk_table(f, vlr)
        assert [n for n, _ in table] == laz_chunks(len(las.points)) and len(table) >= 2


def test_ply_reads_back_with_plyfile_and_open3d(run):
    import open3d as o3d
    from plyfile import PlyData
    z = np.load(run / "scan00004.npz")
    ply = PlyData.read(str(run / "clean" / "scan00004.ply"))
    assert not ply.text and ply.byte_order == "<"
    v = ply["vertex"].data
    assert len(v) == len(z["range"])
    for k in ("intensity", "timestamp", "ring", "semantic", "object_id", "ray_index", "range"):
        assert np.array_equal(v[k], z[k]), k
    assert np.array_equal(np.stack([v["x"], v["y"], v["z"]], 1), z["xyz"])
    pc = o3d.t.io.read_point_cloud(str(run / "noisy" / "scan00004.ply"))
    np.testing.assert_array_equal(pc.point.positions.numpy(), z["xyz_noisy"])
    np.testing.assert_allclose(pc.point.normals.numpy(), z["normal"])
    # Open3D's tensor API reads every field (it skips unsigned 16- and 32-bit properties)
    for k in ("intensity", "reflectivity", "timestamp", "azimuth", "elevation", "channel", "ring", "semantic",
              "object_id", "instancer_id", "instance_id", "ray_index"):
        assert k in pc.point, k
        assert np.array_equal(pc.point[k].numpy().ravel(), z[k]), k
    assert np.array_equal(pc.point["range"].numpy().ravel(), z["range_noisy"])


def test_kitti_sequence_as_semantickitti_loads_it(run):
    # SemanticKITTI's own conventions: np.fromfile(float32).reshape(-1, 4); labels uint32,
    # semantic = label & 0xFFFF, instance = label >> 16; poses 12 floats a line
    zs = [np.load(run / f"scan{f:05d}.npz") for f in (2, 3, 4)]
    for i, z in enumerate(zs):
        scan = np.fromfile(run / "velodyne" / f"{i:06d}.bin", dtype=np.float32).reshape(-1, 4)
        label = np.fromfile(run / "labels" / f"{i:06d}.label", dtype=np.uint32)
        assert scan.shape[0] == label.shape[0] == len(z["range"])
        # KITTI axes (x forward, y left, z up) = the documented rotation of BlenSor's sensor frame
        np.testing.assert_allclose(scan[:, :3], z["xyz_noisy"].astype(np.float64) @ ROS_FROM_BLENSOR.T, atol=1e-5)
        assert np.array_equal(scan[:, 3], z["intensity"])
        assert np.array_equal(label & 0xFFFF, z["semantic"])
        direct = z["instancer_id"] == 0
        assert np.array_equal((label >> 16)[direct], z["object_id"][direct])
    poses = np.loadtxt(run / "poses.txt").reshape(-1, 3, 4)
    assert poses.shape[0] == 3
    np.testing.assert_allclose(poses[0], np.eye(4)[:3], atol=1e-12)
    T0 = ros_pose(zs[0]["sensor_to_world"])
    for i, z in enumerate(zs):
        np.testing.assert_allclose(poses[i], (np.linalg.inv(T0) @ ros_pose(z["sensor_to_world"]))[:3], atol=1e-6)
    times = np.loadtxt(run / "times.txt")
    np.testing.assert_allclose(times, [0.0, 1 / 24, 2 / 24], atol=1e-9)
    calib = dict(line.split(":", 1) for line in (run / "calib.txt").read_text().splitlines())
    assert set(calib) == {"P0", "P1", "P2", "P3", "Tr"}
    np.testing.assert_array_equal(np.array(calib["Tr"].split(), float).reshape(3, 4), np.eye(4)[:3])


@pytest.mark.parametrize("frame_of_reference", ["sensor", "world"])
def test_ros_axes_are_the_documented_rotation(velodyne, frame_of_reference):
    a = blensor_addon.scan(velodyne, frame=6, frame_of_reference=frame_of_reference)
    b = blensor_addon.scan(velodyne, frame=6, frame_of_reference=frame_of_reference, axes="ros")
    assert a.axes == "blensor" and b.axes == "ros"
    M = ROS_FROM_BLENSOR
    if frame_of_reference == "sensor":
        np.testing.assert_allclose(b.xyz, a.xyz.astype(np.float64) @ M.T, atol=1e-6)
        np.testing.assert_allclose(b.normal, a.normal.astype(np.float64) @ M.T, atol=1e-6)
    else:  # world points do not change; the pose now describes the REP-103 sensor frame
        assert np.array_equal(a.xyz, b.xyz)
    np.testing.assert_allclose(b.sensor_to_world, ros_pose(a.sensor_to_world), atol=1e-12)
    # REP-103: the sensor looks along +x; the HDL-64E's lasers point below the horizon (-z)
    assert np.median(np.arctan2(b.xyz[:, 2], np.hypot(b.xyz[:, 0], b.xyz[:, 1]))) < 0 or frame_of_reference == "world"


def test_unknown_class_name_is_refused_naming_the_object(bpy_mod, empty_scene, tmp_path):
    add_mesh(bpy_mod, "Box", [(-1, -1, -5), (1, -1, -5), (1, 1, -5), (-1, 1, -5)], [(0, 1, 2, 3)])
    bpy_mod.data.objects["Box"]["blensor_label"] = "crate"
    cam = add_camera(bpy_mod)
    with pytest.raises(SettingsError, match="blensor_label must be a class name of the table .*'crate' on "
                                            "object 'Box'"):
        blensor_addon.scan(cam)
    # a range scan refused the same way leaves nothing behind: no failed manifest that
    # would make the corrected rerun refuse the folder, no folder it made
    cam.data.blensor.time_model = "frame"  # one output for scene frame 1
    for out in (tmp_path / "made", tmp_path / "there"):
        if out.name == "there":
            out.mkdir()
        with pytest.raises(SettingsError, match="'crate' on object 'Box'"):
            scan_range(cam, [1], out, ("npz",))
        assert not out.exists() if out.name == "made" else not any(out.iterdir())
    bpy_mod.data.objects["Box"]["blensor_label"] = "other-object"
    assert set(np.unique(blensor_addon.scan(cam).semantic)) == {99}
    assert scan_range(cam, [1], tmp_path / "there", ("npz",)).status == "complete"


@pytest.mark.parametrize("args, needle", [
    (["--formats", "npz,xyz"], "formats must be a comma-separated subset of npz,evd,pcd,las,laz,ply,kitti"),
    (["--formats", "npz", "--option", "kitti.points=clean"], "kitti.points must be an option of a format being"),
    (["--formats", "npz", "--pcd-ascii"], "--pcd-ascii must be given with pcd among --formats, got 'npz'"),
    (["--formats", "kitti", "--option", "kitti.points=both"], "kitti.points must be one of noisy, clean"),
    (["--formats", "kitti", "--option", "kitti.color=1"], "kitti.color must be one of the options of kitti"),
    (["--formats", "exr"], "formats must be formats for image sensors"),
    (["--axes", "enu"], "--axes must be one of blensor, ros"),
])
def test_bad_format_input_is_one_line_and_writes_nothing(tmp_path, args, needle):
    out = tmp_path / "o"
    res = subprocess.run([BLENSOR, "scan", CROSSING, "--frames", "2", "--out", out, *args], capture_output=True,
                         text=True)
    assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_cli_axes_and_manifest(tmp_path):
    res = subprocess.run([BLENSOR, "scan", CROSSING, "--frames", "2", "--out", tmp_path, "--formats", "npz,kitti",
                          "--axes", "ros", "--option", "kitti.points=clean", "--quiet"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["axes"] == "ros" and man["options"]["kitti"] == {"points": "clean"}
    # continuous time (the demo's setting): frame 2 spans [2/24, 3/24) s, which sweeps 0 and 1 overlap
    assert man["packets"] == "sweep" and [e["frame"] for e in man["frames"]] == [0, 1]
    z = np.load(tmp_path / "scan00000.npz")
    assert str(z["axes"]) == "ros"
    scan = np.fromfile(tmp_path / "velodyne" / "000000.bin", np.float32).reshape(-1, 4)
    np.testing.assert_allclose(scan[:, :3], z["xyz"], atol=1e-6)  # clean points, already REP-103


def test_range_image_rows_by_elevation_and_png(velodyne, tmp_path):
    from PIL import Image
    scan_range(velodyne, [3], tmp_path, ("npz", "range_image"))
    z = np.load(tmp_path / "scan00003.npz")
    im = np.load(tmp_path / "range_image" / "range00003.npz")
    rows, cols = z["grid_shape"]
    assert im["range"].shape == (64, cols) and np.isfinite(im["range"]).sum() == len(z["range"])
    elev = im["elevation"]
    assert np.all(np.diff(elev[np.isfinite(elev)]) < 0)  # highest laser on top
    # every return sits in its laser's row (by elevation) and its column
    row = 63 - z["ring"].astype(int)
    col = z["ray_index"].astype(int) % cols
    assert np.array_equal(im["range"][row, col], z["range"])
    assert np.array_equal(im["semantic"][row, col], z["semantic"])
    png = Image.open(tmp_path / "range_image" / "range00003.png")
    assert png.mode == "L" and png.size == (cols, 2 * 64 * 2)
    assert np.asarray(png).max() > 100


def test_every_format_is_byte_reproducible(velodyne, tmp_path):
    from blensor_addon.io.formats import WRITERS
    formats = tuple(k for k, w in WRITERS.items() if not w.needs_image)
    for d in ("a", "b"):
        assert scan_range(velodyne, [7, 8], tmp_path / d, formats, seed=2).status == "complete"
    files = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert "rosbag2/rosbag2.mcap" in files and "clean/scan00007.laz" in files and len(files) > 20
    for n in files:
        if n != "manifest.json":
            assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes(), n


def test_pcd_converts_with_pcl_tools(velodyne, tmp_path):
    import shutil
    tool = shutil.which("pcl_convert_pcd_ascii_binary")
    if tool is None:
        pytest.skip("pcl-tools not installed (apt-get install pcl-tools)")
    scan_range(velodyne, [5], tmp_path, ("npz", "pcd"))
    z = np.load(tmp_path / "scan00005.npz")
    # PCL reads our binary PCD and writes it as ASCII (mode 0); our reader of that is numpy
    res = subprocess.run([tool, tmp_path / "clean" / "scan00005.pcd", tmp_path / "pcl.pcd", "0"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = (tmp_path / "pcl.pcd").read_text().splitlines()
    head = {ln.split()[0]: ln.split()[1:] for ln in lines[:11]}
    assert head["FIELDS"] == ["x", "y", "z", "intensity", "ring", "time", "label", "semantic", "rgb"]
    assert head["POINTS"] == [str(len(z["range"]))] and head["DATA"] == ["ascii"]
    data = np.loadtxt(lines[11:])
    np.testing.assert_allclose(data[:, :3], z["xyz"], atol=1e-5)
    assert np.array_equal(data[:, 6].astype(np.uint32), z["object_id"])
    assert np.array_equal(data[:, 7].astype(np.uint16), z["semantic"])


@pytest.mark.parametrize("axes", ["blensor", "ros"])
def test_kitti_and_ros_points_do_not_depend_on_the_frame_of_reference(bpy_mod, crossing, tmp_path, axes):
    # in continuous time the ego car moves 0.16 m during a sweep: a world-frame scan's
    # KITTI and PointCloud2 points are the sensor-frame points at each ray's time, as a
    # sensor-frame scan's (they were re-expressed in the sweep's start frame, deskewed)
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore
    cam = bpy_mod.data.objects["Velodyne"]
    clouds = {}
    for frame in ("sensor", "world"):
        out = tmp_path / frame
        scan_range(cam, range(1, 7), out, ("npz", "kitti", "rosbag2"), frame_of_reference=frame, axes=axes)
        with AnyReader([out / "rosbag2"], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
            conns = [c for c in reader.connections if c.topic == "/blensor/points"]
            clouds[frame] = [bytes(reader.deserialize(raw, c.msgtype).data)
                             for c, _, raw in reader.messages(conns)]
    # frames 1-6 span [1/24, 7/24) s: sweeps 0, 1 and 2 overlap them
    assert len(clouds["sensor"]) == 3 and clouds["sensor"] == clouds["world"]
    for k in (0, 1, 2):
        a, b = ((tmp_path / f / "velodyne" / f"{k:06d}.bin").read_bytes() for f in ("sensor", "world"))
        assert a == b
    with np.load(tmp_path / "world" / "scan00001.npz") as w:
        with np.load(tmp_path / "sensor" / "scan00001.npz") as z:
            assert np.array_equal(w["xyz_noisy_sensor"], z["xyz_noisy"])
            assert not np.array_equal(w["xyz"], z["xyz"])
