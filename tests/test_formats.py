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
from blensor_addon.core.classes import THING_CLASSES, asprs_classes
from blensor_addon.core.errors import SettingsError
from blensor_addon.core.timebase import las_gps_time, parse_start_time
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
            # adjusted standard GPS time of the default time base plus the timestamp (bit 0 set)
            assert np.array_equal(las.gps_time, las_gps_time(parse_start_time(None), z["timestamp"]))
            assert las.header.global_encoding.value & 1 == 1
            # issue 21, section 3: ASPRS classes (road surface 11, ground 2, building 6, ...)
            assert np.array_equal(las.classification, asprs_classes(z["semantic"]))
            assert {11, 2, 6} <= set(np.unique(las.classification))
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
        # every car of the demo drives: moving-car (issue 21, section 3; tests/test_driver_layouts.py
        # checks cars in view), the rest as labelled
        assert np.array_equal(label & 0xFFFF, np.where(z["semantic"] == 10, 252, z["semantic"]))
        # things carry their object id as instance; stuff (road, building, trees) 0
        direct = z["instancer_id"] == 0
        thing = np.isin(z["semantic"], list(THING_CLASSES))
        assert np.array_equal((label >> 16)[direct & thing], z["object_id"][direct & thing])
        assert ((label >> 16)[~thing] == 0).all() and (~thing).sum() > 0.9 * len(label)
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
    a = blensor_addon.scan(velodyne, frame=6, frame_of_reference=frame_of_reference, axes="blensor")
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
    assert man["axes"] == "ros" and man["options"]["kitti"] == {"points": "clean", "poses": "start"}
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
    # (formats with a check of their own, laserscan: tests/test_laserscan.py)
    formats = tuple(k for k, w in WRITERS.items()
                    if not w.needs.image and not w.needs.device and w.needs.check is None)
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


# -- the result model and the writers' needs (issue 20 section 2) ------------------------------

def synthetic(n=6, *, grid=(2, 3), world_offset=None, extra=None, capabilities=None, frame=1, axes="blensor"):
    """A hand-made ScanResult of ``n`` returns on a ``grid`` (None: no grid, no ray_index);
    with ``world_offset`` (3,) m a world-frame result whose float64 points lie there."""
    from blensor_addon.core.result import ScanResult
    rng = np.random.default_rng(5)
    xyz = rng.uniform(-20.0, 20.0, (n, 3))
    meta = {}
    if world_offset is not None:
        xyz = xyz + np.asarray(world_offset, dtype=np.float64)
        pose = np.eye(4)
        pose[:3, 3] = world_offset
        meta = {"frame_of_reference": "world", "sensor_to_world": pose}
    return ScanResult(
        timestamp=frame / 24.0 + np.arange(n) * 1e-5, azimuth=np.linspace(0, 1, n), elevation=np.zeros(n),
        range=np.full(n, 10.0), range_noisy=np.full(n, 10.01), xyz=xyz, xyz_noisy=xyz + 0.01,
        object_id=np.arange(1, n + 1), semantic=np.full(n, 40), instancer_id=np.zeros(n),
        instance_id=np.zeros(n),
        channel=np.arange(n) % 2, ring=np.arange(n) % 2, ray_index=None if grid is None else np.arange(n),
        reflectivity=np.full(n, 0.5), intensity=np.full(n, 0.25), color=np.full((n, 3), 200),
        normal=np.tile([0.0, 0.0, 1.0], (n, 1)), grid_shape=grid, frame=frame, extra=extra or {},
        capabilities=capabilities, axes=axes, **meta)


def test_a_result_with_no_grid_has_no_ray_index_and_organized_outputs_refuse_it(tmp_path):
    import plyfile

    from blensor_addon.io.formats import WRITERS
    from blensor_addon.io.formats.npz import npz_bytes
    from blensor_addon.io.formats.pcd import pcd_bytes
    from blensor_addon.io.formats.ply import ply_bytes
    r = synthetic(grid=None)
    assert r.ray_index is None and not r.has_grid and "ray_index" not in r.arrays()
    with pytest.raises(ValueError, match="needs a sensor with a ray grid; sensor type 'rotating' has none"):
        r.image("range")
    # writers that need a grid say so (the job plans from it), and refuse in one line
    assert WRITERS["range_image"].needs.grid and not WRITERS["npz"].needs.grid
    w = WRITERS["range_image"](tmp_path, None)
    with pytest.raises(ValueError) as e:
        w.frame_files(r)
    assert str(e.value) == ("range_image needs a sensor with a ray grid; sensor type 'rotating' has none "
                            "(a pattern with no grid)")
    # the unorganized formats write it: every field but ray_index
    (tmp_path / "a.npz").write_bytes(npz_bytes(r))
    z = np.load(tmp_path / "a.npz")
    assert "ray_index" not in z.files and np.array_equal(z["xyz"], r.xyz) and z["grid_shape"].shape == (0,)
    (tmp_path / "a.ply").write_bytes(ply_bytes(r))
    v = plyfile.PlyData.read(str(tmp_path / "a.ply"))["vertex"].data
    assert "ray_index" not in v.dtype.names and np.array_equal(v["object_id"], r.object_id)
    head = pcd_bytes(r).split(b"DATA binary\n")[0].decode()
    assert "WIDTH 6\nHEIGHT 1\n" in head
    # a grid needs its ray_index
    import dataclasses
    with pytest.raises(ValueError, match="ray_index is None, but the result has a grid"):
        dataclasses.replace(synthetic(grid=(2, 3)), ray_index=None)


def test_several_returns_per_ray_reach_las_npz_and_ply(tmp_path):
    import io

    import laspy
    import plyfile

    from blensor_addon.core.result import FIELDS
    from blensor_addon.io.formats.las import las_bytes
    from blensor_addon.io.formats.npz import npz_bytes
    from blensor_addon.io.formats.ply import ply_bytes
    one = synthetic()
    assert np.array_equal(one.return_number, np.ones(6, np.uint8)) and one.number_of_returns.dtype == np.uint8
    assert "return_number" not in np.load(io.BytesIO(npz_bytes(one))).files  # one return: not stored
    rn, nr = np.array([1, 2, 1, 1, 2, 3]), np.array([2, 2, 1, 3, 3, 3])
    r = synthetic(extra={"return_number": rn, "number_of_returns": nr})
    assert r.return_number.dtype == np.uint8 and np.array_equal(r.number_of_returns, nr)
    (tmp_path / "m.las").write_bytes(las_bytes(r))
    las = laspy.read(tmp_path / "m.las")
    order = np.argsort(r.ring, kind="stable")  # LAS: by ring
    assert np.array_equal(np.asarray(las.return_number), rn[order])
    assert np.array_equal(np.asarray(las.number_of_returns), nr[order])
    assert list(las.header.number_of_points_by_return[:3]) == [3, 2, 1]
    (tmp_path / "m.npz").write_bytes(npz_bytes(r))
    z = np.load(tmp_path / "m.npz")
    assert z.files[:18] == list(FIELDS)  # today's fields first, in their order
    assert z["return_number"].dtype == np.uint8 and np.array_equal(z["number_of_returns"], nr)
    (tmp_path / "m.ply").write_bytes(ply_bytes(r))
    v = plyfile.PlyData.read(str(tmp_path / "m.ply"))["vertex"].data
    assert np.array_equal(v["return_number"], rn) and v.dtype["number_of_returns"] == np.uint8
    with pytest.raises(ValueError, match="extra\\['return_number'\\] has shape"):
        synthetic(extra={"return_number": rn[:3]})


def test_a_field_a_sensor_registers_reaches_every_writer_of_every_field(tmp_path):
    import plyfile

    from blensor_addon.core.result import EXTRA_FIELDS, register_field
    from blensor_addon.io.formats.npz import npz_bytes
    from blensor_addon.io.formats.ply import ply_bytes
    with pytest.raises(ValueError, match="not a registered field"):
        synthetic(extra={"snr_test": np.ones(6)})
    register_field("snr_test", "<f4")
    register_field("beam_test", "<f4", (3,))
    try:
        with pytest.raises(ValueError, match="registered already"):
            register_field("snr_test", "<u2")
        with pytest.raises(ValueError, match="not a ScanResult field"):
            register_field("range", "<f4")
        r = synthetic(extra={"snr_test": np.arange(6.0), "beam_test": np.ones((6, 3))})
        assert r.extra["snr_test"].dtype == np.float32
        (tmp_path / "a.npz").write_bytes(npz_bytes(r))
        z = np.load(tmp_path / "a.npz")
        assert np.array_equal(z["snr_test"], np.arange(6.0)) and z["beam_test"].shape == (6, 3)
        (tmp_path / "a.ply").write_bytes(ply_bytes(r))
        v = plyfile.PlyData.read(str(tmp_path / "a.ply"))["vertex"].data
        assert np.array_equal(v["snr_test"], np.arange(6.0)) and np.array_equal(v["beam_test_y"], np.ones(6))
        from blensor_addon.scene.meshes import mesh_attributes
        attrs = mesh_attributes(r)
        assert attrs["snr_test"] == "FLOAT" and attrs["beam_test"] == "FLOAT_VECTOR"
    finally:
        EXTRA_FIELDS.pop("snr_test", None)
        EXTRA_FIELDS.pop("beam_test", None)


def test_point_meshes_carry_every_field_and_the_noisy_mesh_the_noisy_cloud(velodyne, bpy_mod):
    from blensor_addon.core.result import FIELDS
    from blensor_addon.scene.meshes import add_scan_mesh
    r = blensor_addon.scan(velodyne, frame=4)
    clean, noisy = add_scan_mesh(r, noisy=False), add_scan_mesh(r, noisy=True)
    n = len(r)
    for obj, key in ((clean, "xyz"), (noisy, "xyz_noisy")):
        mesh = obj.data
        names = {a.name for a in mesh.attributes if not a.name.startswith(".")} - {"position"}
        assert names == set(FIELDS) - {"xyz", "xyz_noisy"}  # every field, the positions as positions
        co = np.empty(3 * n, np.float32)
        mesh.vertices.foreach_get("co", co)
        assert np.array_equal(co.reshape(-1, 3), getattr(r, key))
        for name in ("range", "range_noisy", "intensity", "timestamp"):
            got = np.empty(n, np.float32)
            mesh.attributes[name].data.foreach_get("value", got)
            assert np.array_equal(got, getattr(r, name).astype(np.float32)), name
        for name in ("object_id", "semantic", "ring", "ray_index", "instance_id"):
            got = np.empty(n, np.int32)
            mesh.attributes[name].data.foreach_get("value", got)
            assert np.array_equal(got, getattr(r, name).astype(np.int32)), name
        got = np.empty(3 * n, np.float32)
        mesh.attributes["normal"].data.foreach_get("vector", got)
        assert np.array_equal(got.reshape(-1, 3), r.normal)
    assert not np.array_equal(r.xyz, r.xyz_noisy)  # the two meshes differ where the clouds do


def test_npz_is_compressed_by_default_and_stored_on_request_with_the_same_arrays(velodyne, tmp_path):
    import zipfile
    for name, opts in (("deflated", None), ("stored", {"npz.compress": "false"})):
        assert scan_range(velodyne, [3], tmp_path / name, ("npz",), seed=1, options=opts).status == "complete"
    a, b = (tmp_path / n / "scan00003.npz" for n in ("deflated", "stored"))
    za, zb = np.load(a), np.load(b)
    assert za.files == zb.files and len(za.files) > 25
    for k in za.files:
        assert za[k].dtype == zb[k].dtype and np.array_equal(za[k], zb[k]), k
    for path, method in ((a, zipfile.ZIP_DEFLATED), (b, zipfile.ZIP_STORED)):
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            assert {i.compress_type for i in infos} == {method}
            assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}  # reproducible bytes
    assert a.stat().st_size < 0.5 * b.stat().st_size
    man = json.loads((tmp_path / "stored" / "manifest.json").read_text())
    assert man["options"]["npz"] == {"compress": False}
    from blensor_addon.io.formats.npz import npz_bytes
    r = blensor_addon.scan(velodyne, frame=3)
    assert npz_bytes(r) == npz_bytes(r) and npz_bytes(r, False) != npz_bytes(r)


def test_poses_are_written_without_float_noise(bpy_mod, crossing, tmp_path):
    from blensor_addon.io.trajectory import ZERO_TOLERANCE, tum_line, zero_noise
    T = np.eye(4)
    T[0, 1], T[1, 0], T[2, 0], T[0, 3], T[1, 3], T[2, 3] = 2.808163629e-46, -0.0, 8.8e-25, 10.0, -5e-9, -3e-13
    Z = zero_noise(T)
    assert Z[0, 1] == Z[2, 0] == 0.0 and not np.signbit(Z[1, 0])
    assert Z[1, 3] == -5e-9  # 5 nm is a position, not noise
    assert Z[2, 3] == 0.0  # 3e-13 m beside 10 m: float64 noise of that pose
    far = np.eye(4)
    far[0, 3], far[1, 3] = 1e4, 5e-9
    assert zero_noise(far)[1, 3] == 0.0  # beside 10 km, 5 nm is below the 1e-12 relative resolution
    assert ZERO_TOLERANCE == 1e-12 and "-0.000000000" not in tum_line(0.0, np.diag([1.0, -1.0, -1.0, 1.0]))
    cam = bpy_mod.data.objects["Velodyne"]
    # frames 1-6 (0.042-0.29 s) overlap sweeps 0, 1 and 2 of the 10 Hz head
    assert scan_range(cam, range(1, 7), tmp_path, ("kitti",)).status == "complete"
    text = (tmp_path / "poses.txt").read_text()
    poses = np.loadtxt(tmp_path / "poses.txt").reshape(-1, 3, 4)
    assert len(poses) == 3 and "-0.000000000e+00" not in text
    v = poses.ravel()
    assert not ((v != 0) & (np.abs(v) < 1e-12)).any()  # the car drives straight: 2.8e-46 was noise
    np.testing.assert_array_equal(poses[0], np.eye(4)[:3])
    assert 0 < poses[1][0, 3] < poses[2][0, 3] and poses[2][0, 3] > 0.1  # driving ahead, speeding up
    assert poses[2][0, 1] == poses[2][1, 0] == 0.0
    for line in (tmp_path / "trajectory.tum").read_text().splitlines():
        assert not any(f.startswith("-0.000000000") for f in line.split())


def test_evd_keeps_blensors_frame_whatever_the_axes(velodyne, tmp_path):
    from blensor_addon.io.formats.evd import read_evd
    for axes in ("blensor", "ros"):
        job = scan_range(velodyne, [2, 3], tmp_path / axes, ("evd", "npz"), seed=3, axes=axes)
        assert job.status == "complete"
    assert (tmp_path / "ros" / "scan.evd").read_bytes() == (tmp_path / "blensor" / "scan.evd").read_bytes()
    blocks = read_evd(tmp_path / "ros" / "scan.evd")
    z = np.load(tmp_path / "ros" / "scan00003.npz")
    assert str(z["axes"]) == "ros"
    xyz = np.stack([blocks[1][k] for k in "xyz"], 1)
    np.testing.assert_array_equal(xyz, z["xyz"].astype(np.float64) @ ROS_FROM_BLENSOR)  # BlenSor = M^T ros
    assert np.abs(xyz - z["xyz"]).max() > 1.0  # it is not the REP-103 cloud


def test_far_world_coordinates_keep_float64_for_las_and_the_float32_formats_warn(tmp_path, capsys):
    import laspy

    from blensor_addon.io.formats import WRITERS
    from blensor_addon.io.formats.kitti import kitti_scan
    off = np.array([1.0e7, -2.0e6, 30.0])
    rs = [synthetic(world_offset=off, frame=f) for f in (1, 2)]
    r = rs[0]
    assert set(r.xyz64) == {"xyz", "xyz_noisy"} and r.xyz.dtype == np.float32
    assert 0.4 < r.float32_rounding() <= 0.5  # float32 spacing is 1 m at 1e7 m
    assert np.abs(r.xyz.astype(np.float64) - r.points()).max() > 0.01
    ws = {f: WRITERS[f](tmp_path / f, None) for f in ("npz", "pcd", "ply", "las")}
    for f, w in ws.items():
        (tmp_path / f).mkdir()
        for x in rs:
            for name, data in w.frame_files(x):
                (tmp_path / f / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / f / name).write_bytes(data)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"blensor: warning: world coordinates up to 1e+07 m: float32 rounds them by up to 0.5 m "
                   f"in {f} (las keeps 0.1 mm; --frame-of-reference sensor keeps float32 exact)"
                   for f in ("npz", "pcd", "ply")]
    for kind, key in (("clean", "xyz"), ("noisy", "xyz_noisy")):
        las = laspy.read(tmp_path / "las" / kind / "scan00001.las")
        order = np.argsort(r.ring, kind="stable")
        got = np.stack([las.x, las.y, las.z], 1)
        assert np.abs(got - r.xyz64[key][order]).max() <= 0.5e-4 + 1e-9  # 0.05 mm at 1e7 m
    # sensor-frame outputs from far world points: exact (KITTI: x forward, y left, z up)
    pts = np.frombuffer(kitti_scan(r)[0], np.float32).reshape(-1, 4)[:, :3]
    np.testing.assert_allclose(pts, (r.xyz64["xyz_noisy"] - off) @ ROS_FROM_BLENSOR.T, atol=1e-5)
    # near the origin nothing is kept: today's float32 bytes
    assert not synthetic(world_offset=(500.0, 0.0, 0.0)).xyz64


def test_a_world_scan_far_from_the_origin_keeps_mm_in_las(bpy_mod, empty_scene, tmp_path):
    import laspy
    X = 2.0e6  # float32 spacing 0.125 m here
    add_mesh(bpy_mod, "Wall", [(-50, 6, -50), (50, 6, -50), (50, 6, 50), (-50, 6, 50)], [(0, 1, 2, 3)],
             location=(X, 0, 0))
    cam = add_camera(bpy_mod, location=(X, 0, 0), rotation=(np.pi / 2, 0.0, 0.0))
    cam.data.blensor.time_model = "frame"
    job = scan_range(cam, [1], tmp_path, ("npz", "las"), sensor_type="tof", noise_sigma=0.0,
                     frame_of_reference="world")
    assert job.status == "complete"
    las = laspy.read(tmp_path / "clean" / "scan00001.las")
    z = np.load(tmp_path / "scan00001.npz")
    assert len(las.points) == len(z["range"]) > 10_000
    np.testing.assert_allclose(np.asarray(las.y), 6.0, atol=1e-4)  # the wall, at 0.1 mm
    xs = np.unique(np.round(np.asarray(las.x) - X, 4))
    assert len(xs) >= 170  # the 176 pixel columns 2.7 cm apart; float32 (0.125 m steps) merges them
    assert len(np.unique(z["xyz"][:, 0])) <= 40


def test_writers_read_capabilities_not_settings():
    import re

    from blensor_addon.io.formats import WRITERS, _base
    assert WRITERS["evd"].needs.packets == "frame" and WRITERS["range_image"].needs.grid
    assert all(WRITERS[f].needs.image for f in ("exr", "npy", "pfm", "dmap"))
    assert not any(w.needs.image for k, w in WRITERS.items() if k not in ("exr", "npy", "pfm", "dmap"))
    folder = Path(_base.__file__).parent
    for name in ("npz", "evd", "pcd", "las", "ply", "kitti", "range_image", "rosbag2"):
        src = (folder / f"{name}.py").read_text()
        assert not re.search(r"sensor_type\s*==|\.run\.sensor\b|sweep_columns|\.organized\b", src), name
