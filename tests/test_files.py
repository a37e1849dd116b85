"""Range scans of the demo scene into files, read back with our reader and the ecosystem's
(numpy, Open3D, pypcd4); byte layouts; byte-identical reruns; failed/cancelled scans."""
from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest

import blensor_addon
from blensor_addon.core.errors import SettingsError
from blensor_addon.io.formats.evd import EVD_DTYPE, read_evd
from blensor_addon.jobs.range_scan import scan_range
from conftest import CROSSING, point_norm


@pytest.fixture
def velodyne(bpy_mod, crossing):
    """The demo's HDL-64E in the frozen-frame model (one file per scene frame: these tests
    check file layouts per frame; tests/test_continuous.py covers sweeps)."""
    cam = bpy_mod.data.objects["Velodyne"]
    cam.data.blensor.time_model = "frame"
    return cam


def files_of(d):
    """Files below ``d`` (relative paths), sorted."""
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


def test_range_scan_writes_all_formats(velodyne, tmp_path):
    # EVD keeps the original BlenSor frame: the npz in the same axes to compare with it
    job = scan_range(velodyne, range(1, 4), tmp_path, ("npz", "evd", "pcd"), seed=3, axes="blensor")
    assert job.status == "complete"
    assert files_of(tmp_path) == ["clean/scan00001.pcd", "clean/scan00002.pcd", "clean/scan00003.pcd",
                                  "manifest.json", "noisy/scan00001.pcd", "noisy/scan00002.pcd",
                                  "noisy/scan00003.pcd", "scan.evd", "scan00001.npz", "scan00002.npz",
                                  "scan00003.npz", "trajectory.tum"]
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["status"] == "complete" and man["seed"] == 3 and man["camera"] == "Velodyne"
    assert [f["frame"] for f in man["frames"]] == [1, 2, 3]
    assert man["sensor"]["preset"] == "hdl64e_s2" and len(man["sensor"]["elevations"]) == 64
    assert man["blend_file"].endswith("crossing.blend")

    # npz: every field, 150 deg of the turn per frame at 10 Hz / 24 fps
    z = np.load(tmp_path / "scan00002.npz")
    n = len(z["range"])
    assert man["frames"][1]["points"] == n and man["frames"][1]["rays"] == 868 * 64
    assert z["xyz"].shape == (n, 3) and z["xyz"].dtype == np.float32
    assert z["timestamp"].dtype == np.float64 and z["object_id"].dtype == np.uint32
    assert z["timestamp"].min() >= 2 / 24 and z["timestamp"].max() < 3 / 24
    np.testing.assert_allclose(np.linalg.norm(z["xyz"], axis=1), point_norm(z["range"], z["channel"]), rtol=1e-5)
    assert "objects" not in z.files  # the object table is written once, in the manifest
    names = {o["id"]: o["name"] for o in man["objects"]}
    seen = {names[i] for f in (1, 2, 3) for i in np.unique(np.load(tmp_path / f"scan{f:05d}.npz")["object_id"])}
    assert seen >= {"Road", "Pavement", "Car.1", "TreeCrown"}
    assert json.loads(str(z["sensor"]))["seed"] == 3

    # EVD: int32 N + N * 120-byte '<14dQ' records per frame, int32 -1 at the end
    raw = (tmp_path / "scan.evd").read_bytes()
    sizes = [f["points"] for f in man["frames"]]
    assert len(raw) == sum(4 + 120 * s for s in sizes) + 4
    assert struct.unpack_from("<i", raw, 0)[0] == sizes[0]
    assert struct.unpack_from("<i", raw, len(raw) - 4)[0] == -1
    first = struct.unpack_from("<14dQ", raw, 4)
    z1 = np.load(tmp_path / "scan00001.npz")
    assert first[0] == z1["timestamp"][0] and first[3] == pytest.approx(z1["range"][0])
    assert first[5:8] == pytest.approx(tuple(z1["xyz"][0]), abs=1e-6)
    assert first[11:14] == tuple(float(c) for c in z1["color"][0])
    assert first[14] == z1["object_id"][0]
    blocks = read_evd(tmp_path / "scan.evd")
    assert [len(b) for b in blocks] == sizes and blocks[0].dtype == EVD_DTYPE


def test_pcd_opens_in_open3d_and_pypcd4(velodyne, tmp_path):
    import open3d as o3d
    from pypcd4 import PointCloud
    scan_range(velodyne, [5], tmp_path, "pcd,npz")
    z = np.load(tmp_path / "scan00005.npz")
    n = len(z["range"])
    for name, key in (("clean/scan00005.pcd", "xyz"), ("noisy/scan00005.pcd", "xyz_noisy")):
        pc = o3d.io.read_point_cloud(str(tmp_path / name))
        assert len(pc.points) == n
        np.testing.assert_allclose(np.asarray(pc.points), z[key], atol=1e-6)
        p4 = PointCloud.from_path(tmp_path / name)
        assert p4.points == n
        assert list(p4.fields) == ["x", "y", "z", "intensity", "ring", "time", "label", "semantic", "rgb"]
        arr = p4.pc_data
        np.testing.assert_array_equal(arr["label"], z["object_id"])
        np.testing.assert_array_equal(arr["ring"], z["ring"])
        np.testing.assert_array_equal(arr["semantic"], z["semantic"])
        # ring is the elevation rank (0 = lowest laser), channel the calibration index
        order = np.argsort(np.asarray(json.loads(str(z["sensor"]))["elevations"]), kind="stable")
        assert np.array_equal(arr["ring"], np.argsort(order)[z["channel"]])
        # a Velodyne unit's intensity is its calibrated reflectivity byte, as in its packets and as
        # velodyne_pointcloud publishes it (issue 21 review: the PCD had the 0..1 intensity)
        np.testing.assert_array_equal(arr["intensity"], np.round(100 * z["reflectivity"].astype(np.float64)))
    # colours survive Open3D's rgb unpacking
    pc = o3d.io.read_point_cloud(str(tmp_path / "clean" / "scan00005.pcd"))
    np.testing.assert_allclose(np.asarray(pc.colors) * 255, z["color"], atol=0.51)
    # ASCII variant carries the same values
    scan_range(velodyne, [5], tmp_path / "ascii", "pcd", pcd_ascii=True)
    pa = o3d.io.read_point_cloud(str(tmp_path / "ascii" / "clean" / "scan00005.pcd"))
    np.testing.assert_allclose(np.asarray(pa.points), z["xyz"], atol=1e-6)
    assert (tmp_path / "ascii" / "clean" / "scan00005.pcd").read_bytes().split(b"\n")[10] == b"DATA ascii"


def test_same_seed_same_bytes_other_seed_other_noise(velodyne, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, 11), (b, 11), (c, 12)):
        scan_range(velodyne, [7, 8], d, ("npz", "evd", "pcd"), seed=seed)
    for name in files_of(a):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    za, zc = np.load(a / "scan00007.npz"), np.load(c / "scan00007.npz")
    assert np.array_equal(za["range"], zc["range"])
    assert not np.array_equal(za["range_noisy"], zc["range_noisy"])
    # a frame's noise does not depend on which frames were scanned before it
    scan_range(velodyne, [8], tmp_path / "d", "npz", seed=11)
    assert (tmp_path / "d" / "scan00008.npz").read_bytes() == (a / "scan00008.npz").read_bytes()


def test_failed_and_cancelled_scans_keep_finished_frames(velodyne, tmp_path, monkeypatch):
    from blensor_addon.scene import scanner as scanner_mod
    real = scanner_mod.Scanner.scan

    def flaky(self, packet):
        if packet.index == 3:
            raise RuntimeError("disk on fire")
        return real(self, packet)

    monkeypatch.setattr(scanner_mod.Scanner, "scan", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        scan_range(velodyne, [1, 2, 3, 4], tmp_path, ("npz", "evd"))
    assert files_of(tmp_path) == ["manifest.json", "scan.evd", "scan00001.npz", "scan00002.npz", "trajectory.tum"]
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["status"] == "failed" and [f["frame"] for f in man["frames"]] == [1, 2]
    assert [len(b) for b in read_evd(tmp_path / "scan.evd")] == [f["points"] for f in man["frames"]]
    monkeypatch.setattr(scanner_mod.Scanner, "scan", real)

    calls = []
    job = scan_range(velodyne, [1, 2, 3, 4], tmp_path / "c", ("npz", "evd"),
                     should_cancel=lambda: len(calls) >= 1, progress=lambda d, t, e: e and calls.append(e))
    assert job.status == "cancelled" and len(job.done) == 1
    assert files_of(tmp_path / "c") == ["manifest.json", "scan.evd", "scan00001.npz", "trajectory.tum"]
    assert len(read_evd(tmp_path / "c" / "scan.evd")) == 1
    # cancelled before the first frame: only the manifest, no empty EVD
    job = scan_range(velodyne, [1, 2], tmp_path / "z", ("npz", "evd"), should_cancel=lambda: True)
    assert job.status == "cancelled" and files_of(tmp_path / "z") == ["manifest.json"]
    assert json.loads((tmp_path / "z" / "manifest.json").read_text())["frames"] == []


def test_a_write_error_on_the_writer_thread_stops_the_run_and_keeps_the_frames_before(velodyne, tmp_path,
                                                                                     monkeypatch):
    """Frames are written on a background thread while the next is scanned: an error
    there reaches the caller once, the failed frame leaves nothing, later frames are not
    written, and the manifest lists exactly the frames on disk."""
    from blensor_addon.io.formats.npz import NpzWriter
    real = NpzWriter.frame_files

    def full(self, result):
        if result.frame == 3:
            raise OSError(28, "No space left on device")
        return real(self, result)

    monkeypatch.setattr(NpzWriter, "frame_files", full)
    with pytest.raises(OSError, match="No space left"):
        scan_range(velodyne, [1, 2, 3, 4, 5], tmp_path, ("npz", "evd"))
    assert files_of(tmp_path) == ["manifest.json", "scan.evd", "scan00001.npz", "scan00002.npz", "trajectory.tum"]
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["status"] == "failed" and [f["frame"] for f in man["frames"]] == [1, 2]
    assert [len(b) for b in read_evd(tmp_path / "scan.evd")] == [f["points"] for f in man["frames"]]
    assert man["frames"][1]["files"] == ["scan00002.npz"]


@pytest.mark.slow  # about a minute (65 s on 2 loaded cores): 6,000 sweeps
def test_manifest_is_rewritten_log_n_times_in_a_long_run(tmp_path, monkeypatch):
    """A 6,000-sweep run rewrites its manifest ~100 times, not 6,000 (each rewrite
    lists every frame), after every one of the first 31 frames, and never lists fewer
    than 15/16 of the frames done (what SIGKILL + resume would rescan). The real
    manifest writer and output folder, counting the files actually written."""
    from blensor_addon.io import atomic
    from blensor_addon.io.outdir import OutputFolder
    from blensor_addon.jobs.run_files import ManifestWriter
    clock = [0.0]
    folder = OutputFolder(tmp_path, manifest="manifest.json", patterns=[], listed=lambda m: None).open()
    folder.clock = lambda: clock[0]
    writes, real = [], atomic.atomic_write_bytes

    def counting(path, data):
        writes.append(len(json.loads(data)["frames"]))
        real(path, data)

    monkeypatch.setattr(atomic, "atomic_write_bytes", counting)
    man = ManifestWriter(folder, {"blensor_version": "x", "formats": []}, lambda: [])
    man.start()
    assert writes == [0]
    for frame in range(1, 6001):
        clock[0] += 0.01  # 10 ms a frame: the time rule never fires
        man.finished({"frame": frame, "points": 1, "geometry_hash": "h", "files": []})
        assert frame - writes[-1] <= frame // 16
        # O(log n): each rewrite waits for 1/16 more frames (fails at once if rewritten after every frame)
        assert len(writes) <= 36 + 17 * math.log(max(frame, 32) / 32)
        assert json.loads((tmp_path / "manifest.json").read_text())["frames"][-1]["frame"] == writes[-1]
    assert writes[1:32] == list(range(1, 32)) and 60 <= len(writes) <= 130, len(writes)
    clock[0] += 5.0  # slow frames: at least every 5 s
    n = len(writes)
    man.finished({"frame": 6001, "points": 1, "geometry_hash": "h", "files": []})
    assert len(writes) == n + 1
    man.close("complete")  # the final manifest lists every frame
    assert writes[-1] == 6001 and json.loads((tmp_path / "manifest.json").read_text())["status"] == "complete"
    folder.release()


def test_writer_thread_runs_jobs_in_order_and_raises_a_failure_once():
    from blensor_addon.jobs.pipeline import WriterThread
    w, seen = WriterThread(), []
    for i in range(5):
        w.submit(lambda i=i: seen.append(i))
    assert w.drain() is None and seen == [0, 1, 2, 3, 4]

    def boom():
        raise OSError("full")

    w, seen = WriterThread(), []
    w.submit(lambda: seen.append(0))
    w.submit(boom)
    refused = False
    try:  # queued behind the failure (then dropped) or refused, whichever comes first
        w.submit(lambda: seen.append(1))
    except OSError:
        refused = True
    err = w.drain()
    assert seen == [0]
    if refused:  # raised once already: drain and check raise it no more
        assert err is None and w.raised
    else:
        assert isinstance(err, OSError)
        with pytest.raises(OSError):
            w.check()
    w.check()


def test_writer_thread_drain_outlasts_an_interrupt_and_runs_bpy_writers_on_the_main_thread(velodyne, tmp_path):
    """A second Ctrl-C while the last frames are written: drain still waits for the
    frame being written, then raises. Writers bound to their thread (EXR through bpy,
    rosbag2 on sqlite3) make the run write on the main thread."""
    import signal
    import threading
    import time

    from blensor_addon.jobs.pipeline import Pipeline, WriterThread
    w, done = WriterThread(), []
    w.submit(lambda: (time.sleep(0.5), done.append(1)))

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            w.drain()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert done == [1] and w._ended.is_set()  # the job finished before the interrupt was raised

    threads = []
    real = Pipeline._write_frame

    def spy(self, *a):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(self, *a)

    Pipeline._write_frame = spy
    try:
        scan_range(velodyne, [1, 2], tmp_path / "sq", ("npz", "rosbag2"), options={"rosbag2.storage": "sqlite3"})
        scan_range(velodyne, [1, 2], tmp_path / "mc", ("npz", "rosbag2"))
    finally:
        Pipeline._write_frame = real
    assert threads == [True, True, False, False]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(frames=[0, 1]), "frames must be integers within the scene's frame range 1-48"),
    (dict(frames=[]), "frames"),
    (dict(formats="npz,xyz"), "formats must be a comma-separated subset of npz,evd,pcd,las"),
    (dict(backend="optix"), "backend must be one of auto, native, bvhtree"),
    (dict(frame_of_reference="ecef"), "frame_of_reference must be one of sensor, world"),
])
def test_bad_range_input_writes_nothing(velodyne, tmp_path, kwargs, needle):
    args = dict(frames=[1, 2], formats="npz")
    args.update(kwargs)
    frames, formats = args.pop("frames"), args.pop("formats")
    out = tmp_path / "out"
    with pytest.raises(SettingsError) as ei:
        scan_range(velodyne, frames, out, formats, **args)
    assert needle in str(ei.value)
    assert not out.exists() or files_of(out) == []


def test_bad_sensor_settings_and_camera(velodyne, bpy_mod, tmp_path):
    velodyne.data.blensor.angle_resolution = 0.0
    with pytest.raises(SettingsError, match=r"angle_resolution must be in \(0, 360\] deg"):
        scan_range(velodyne, [1], tmp_path / "o")
    velodyne.data.blensor.angle_resolution = float("nan")
    with pytest.raises(SettingsError, match="angle_resolution"):
        blensor_addon.scan(velodyne)
    velodyne.data.blensor.angle_resolution = 0.1728
    velodyne.data.blensor.max_range = -5.0
    with pytest.raises(SettingsError, match="max_range"):
        blensor_addon.scan(velodyne)
    with pytest.raises(SettingsError, match="camera must be a camera object"):
        blensor_addon.scan(bpy_mod.data.objects["Road"])
    assert not (tmp_path / "o").exists()
    unwritable = tmp_path / "file"
    unwritable.write_text("x")
    velodyne.data.blensor.max_range = 120.0
    with pytest.raises(SettingsError, match="out must be a writable folder"):
        scan_range(velodyne, [1], unwritable / "sub")


def test_backends_agree_on_demo_scene(velodyne):
    a = blensor_addon.scan(velodyne, backend="native", frame=12)
    b = blensor_addon.scan(velodyne, backend="bvhtree", frame=12)
    assert a.num_rays == b.num_rays == 133312
    ka = set(zip(a.timestamp.tolist(), a.channel.tolist()))
    kb = set(zip(b.timestamp.tolist(), b.channel.tolist()))
    assert len(ka ^ kb) <= a.num_rays / 1e4
    both = np.array(sorted(ka & kb))
    ia = {k: i for i, k in enumerate(zip(a.timestamp.tolist(), a.channel.tolist()))}
    ib = {k: i for i, k in enumerate(zip(b.timestamp.tolist(), b.channel.tolist()))}
    sa = np.array([ia[tuple(k)] for k in both.tolist()])
    sb = np.array([ib[(k[0], int(k[1]))] for k in both.tolist()])
    assert np.abs(a.range[sa] - b.range[sb]).max() <= 1e-4
    assert np.mean(a.object_id[sa] != b.object_id[sb]) <= 1e-4


def test_world_frame_pcd_viewpoint_is_the_sensor_pose(velodyne, tmp_path):
    from mathutils import Matrix
    from pypcd4 import PointCloud
    job = scan_range(velodyne, [6], tmp_path, ("npz", "pcd"), frame_of_reference="world")
    assert job.status == "complete"
    z = np.load(tmp_path / "scan00006.npz")
    pose = z["sensor_to_world"]
    vp = np.array(PointCloud.from_path(tmp_path / "clean" / "scan00006.pcd").metadata.viewpoint, float)
    np.testing.assert_allclose(vp[:3], pose[:3, 3], atol=1e-5)
    q = np.array(tuple(Matrix(pose[:3, :3].tolist()).to_quaternion()))
    assert np.allclose(vp[3:], q, atol=1e-5) or np.allclose(vp[3:], -q, atol=1e-5)
    # world points: the sensor sits 2.5 m above the road, so the pose's z is 2.5
    assert pose[2, 3] == pytest.approx(2.5, abs=1e-5)


def test_repeated_single_scans_reuse_mesh_bvhs_until_a_file_is_loaded(velodyne, bpy_mod):
    from blensor_addon import raycast
    raycast.release_shared()
    first = blensor_addon.scan(velodyne, frame=12, backend="native")
    be = raycast.shared_backend("native")
    builds = be.blas_builds
    assert builds > 0
    again = blensor_addon.scan(velodyne, frame=12, backend="native")
    assert be.blas_builds == builds  # nothing rebuilt: same meshes, same content keys
    for name, a in first.arrays().items():
        assert np.array_equal(a, getattr(again, name)), name
    blensor_addon.scan(velodyne, frame=30, backend="native")  # cars moved: transforms only
    assert be.blas_builds == builds
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))  # a file load frees the shared caster
    assert raycast._shared == {}


def test_api_misuse_is_a_settings_error(velodyne, tmp_path):
    # a None where frames or the folder go: the setting is named (TypeError tracebacks before)
    from blensor_addon.core.errors import SettingsError
    with pytest.raises(SettingsError, match="out must be a folder path, got None"):
        scan_range(velodyne, [2], None)
    with pytest.raises(SettingsError, match="frames must be integers within the scene's frame range"):
        scan_range(velodyne, None, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def snapshot(d):
    """{relative path: bytes} of every file below ``d``."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_overwrite_validates_everything_before_deleting_the_earlier_run(velodyne, bpy_mod, tmp_path):
    """Issue 20 section 7.1: an unknown class label refused the rerun after --overwrite had
    deleted the earlier run."""
    scan_range(velodyne, [1, 2], tmp_path, ("npz", "pcd"))
    before = snapshot(tmp_path)
    bpy_mod.data.objects["Car.1"]["blensor_label"] = "CAR"
    with pytest.raises(SettingsError, match="blensor_label must be a class name of the table.*'CAR' on obj"):
        scan_range(velodyne, [1, 2, 3], tmp_path, ("npz",), overwrite=True)
    assert snapshot(tmp_path) == before
    # the other refusals found after the folder is locked delete nothing either
    with pytest.raises(SettingsError, match="frames must be"):
        scan_range(velodyne, [1, 99], tmp_path, ("npz",), overwrite=True)
    assert snapshot(tmp_path) == before


def test_overwrite_deletes_exactly_the_files_the_manifest_lists(velodyne, tmp_path):
    """Section 7.2: files of a listed format's names that no run wrote were deleted; and
    section 5: format folders the overwrite emptied stayed behind."""
    scan_range(velodyne, [1, 2, 3], tmp_path, ("npz", "pcd"))
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["files"] == ["trajectory.tum"]  # the run-level files no frame lists
    (tmp_path / "scan00099.npz").write_bytes(b"not BlenSor's")
    (tmp_path / "clean" / "scan77777.pcd").write_bytes(b"not BlenSor's either")
    before = snapshot(tmp_path)
    with pytest.raises(SettingsError, match=r"holds clean/scan77777\.pcd and more, not written by the run"):
        scan_range(velodyne, [2], tmp_path, ("npz",), overwrite=True)
    assert snapshot(tmp_path) == before
    (tmp_path / "scan00099.npz").unlink()
    (tmp_path / "clean" / "scan77777.pcd").unlink()
    scan_range(velodyne, [2], tmp_path, ("npz",), overwrite=True)
    # the pcd run's clean/ and noisy/ folders went with their files
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "manifest.json", "scan00002.npz", "trajectory.tum"]
    # a killed run (manifest still "running") may have finished frames its manifest does not
    # list yet: every file of its formats' names counts as its own
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["status"] = "running"
    del man["files"]
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    (tmp_path / "scan00003.npz").write_bytes(b"finished after the last manifest")
    scan_range(velodyne, [1], tmp_path, ("npz",), overwrite=True)
    assert files_of(tmp_path) == ["manifest.json", "scan00001.npz", "trajectory.tum"]


def test_a_fifo_where_a_manifest_is_expected_is_refused_not_opened(velodyne, bpy_mod, tmp_path):
    """Section 7.12: a FIFO at manifest.json (or motion.json) hung --resume/--overwrite."""
    import os
    import signal

    from blensor_addon.jobs.motion_export import export_motion

    def hung(*_):
        raise TimeoutError("blocked on the FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        for kw in ({"overwrite": True}, {"resume": True}):
            out = tmp_path / next(iter(kw))
            out.mkdir()
            os.mkfifo(out / "manifest.json")
            with pytest.raises(SettingsError, match="out must be a folder whose manifest.json is a regular"):
                scan_range(velodyne, [1], out, ("npz",), **kw)
        out = tmp_path / "motion"
        out.mkdir()
        os.mkfifo(out / "motion.json")
        with pytest.raises(SettingsError, match="out must be a folder whose motion.json is a regular file"):
            export_motion([1, 2], out, "tum", overwrite=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_resume_verifies_finished_files_and_refuses_a_range_without_the_earlier_frames(velodyne, tmp_path):
    """Section 7.13: --resume kept a truncated frame and reported complete; with another
    range the earlier frames stayed on disk but left the manifest (then were deleted, or
    overwritten where KITTI numbers files by their place in the run): now refused."""
    ref = tmp_path / "ref"
    scan_range(velodyne, [1, 2, 3], ref, ("npz", "pcd"))
    part = tmp_path / "part"
    scan_range(velodyne, [1, 2, 3], part, ("npz", "pcd"))
    man = json.loads((part / "manifest.json").read_text())
    checks = man["frames"][1]["file_checks"]
    assert sorted(checks) == ["clean/scan00002.pcd", "noisy/scan00002.pcd", "scan00002.npz"]
    data = (part / "scan00002.npz").read_bytes()
    import hashlib
    assert checks["scan00002.npz"] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (part / "scan00002.npz").write_bytes(data[:1000])  # truncated
    job = scan_range(velodyne, [1, 2, 3], part, ("npz", "pcd"), resume=True)
    assert job.status == "complete" and job.reused == 2  # frame 2 scanned again
    assert snapshot(part).keys() == snapshot(ref).keys()
    for n, b in snapshot(ref).items():
        if n != "manifest.json":
            assert snapshot(part)[n] == b, n
    # a resume with frames 2-4 would drop frame 1: refused, the folder as it was (resume
    # never deletes nor overwrites a finished packet)
    before = snapshot(part)
    with pytest.raises(SettingsError, match=r"frames must be a range holding the earlier run's finished "
                       r"packets \(--resume keeps them: this folder holds frames 1-3 of --frames 1-3; "
                       r".*got '2-4'"):
        scan_range(velodyne, [2, 3, 4], part, ("npz", "pcd"), resume=True)
    assert snapshot(part) == before
    # frames 1-4 hold them: 1-3 are reused, 4 is scanned
    job = scan_range(velodyne, [1, 2, 3, 4], part, ("npz", "pcd"), resume=True)
    assert job.reused == 3 and [e["frame"] for e in job.done] == [1, 2, 3, 4]
    assert files_of(part) == ["clean/scan00001.pcd", "clean/scan00002.pcd", "clean/scan00003.pcd",
                              "clean/scan00004.pcd", "manifest.json", "noisy/scan00001.pcd",
                              "noisy/scan00002.pcd", "noisy/scan00003.pcd", "noisy/scan00004.pcd",
                              "scan00001.npz", "scan00002.npz", "scan00003.npz", "scan00004.npz",
                              "trajectory.tum"]
    assert len((part / "trajectory.tum").read_text().splitlines()) == 4


def test_failures_are_typed_with_declared_attributes(velodyne, tmp_path, monkeypatch):
    from blensor_addon.io.formats.npz import NpzWriter
    from blensor_addon.jobs.failures import RunFailed
    real = NpzWriter.frame_files

    def full(self, result):
        if result.frame == 2:
            raise OSError(28, "No space left on device", "scan00002.npz")
        return real(self, result)

    monkeypatch.setattr(NpzWriter, "frame_files", full)
    with pytest.raises(RunFailed) as e:
        scan_range(velodyne, [1, 2, 3], tmp_path, ("npz",))
    err = e.value
    assert isinstance(err, OSError) and err.errno == 28 and err.strerror == "No space left on device"
    assert err.finished_frames == 1 and err.manifest_status == "failed" and err.dropped_formats == []
    assert err.manifest_path == tmp_path / "manifest.json" and isinstance(err.cause, OSError)
    assert "1 finished frames and the manifest (status failed) are kept" == err.kept()
    assert json.loads(err.manifest_path.read_text())["status"] == "failed"


def test_full_disk_with_kitti_and_rosbag2_says_failed(tmp_path):
    """Section 7.7: a full disk with kitti + rosbag2 left the manifest at ``running``
    with the generic message: the final manifest now has a reserve in the lock file."""
    import subprocess
    import sys
    from pathlib import Path

    from test_faults import small_disk
    blensor = str(Path(sys.executable).parent / "blensor")
    for size in ("12m", "20m"):
        with small_disk(tmp_path / f"disk{size}", size) as disk:
            res = subprocess.run([blensor, "scan", str(CROSSING), "--frames", "1-48", "--out", str(disk),
                                  "--formats", "kitti,rosbag2", "--quiet"], capture_output=True, text=True)
            assert res.returncode == 1, res.stderr
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and "writing failed: No space left on device" in lines[0], res.stderr
            assert "finished frames and the manifest (status failed) are kept" in lines[0], lines[0]
            man = json.loads((disk / "manifest.json").read_text())
            assert man["status"] == "failed" and len(man["frames"]) >= 1
            assert not (disk / ".blensor.lock").exists()


def test_an_interrupt_is_typed_and_keeps_the_finished_frames(velodyne, tmp_path):
    from blensor_addon.jobs.failures import RunInterrupted
    calls = []

    def cancel():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # a second Ctrl-C while frame 3 is about to be scanned
        return False

    with pytest.raises(RunInterrupted) as e:
        scan_range(velodyne, [1, 2, 3, 4], tmp_path, ("npz",), should_cancel=cancel)
    assert isinstance(e.value, KeyboardInterrupt) and e.value.finished_frames == 2
    man = json.loads(e.value.manifest_path.read_text())
    assert man["status"] == "cancelled" and [f["frame"] for f in man["frames"]] == [1, 2]
    assert files_of(tmp_path) == ["manifest.json", "scan00001.npz", "scan00002.npz", "trajectory.tum"]


def test_the_lock_file_holds_a_reserve_given_back_for_the_final_manifest(tmp_path, monkeypatch):
    import errno
    import os

    from blensor_addon.io import atomic
    from blensor_addon.io.outdir import LOCK_NAME, FolderLock, OutputFolder
    pid = str(os.getpid()).encode()
    folder = OutputFolder(tmp_path, manifest="manifest.json", patterns=[], listed=lambda m: None).open()
    lock = tmp_path / LOCK_NAME
    assert lock.stat().st_size == len(pid) + OutputFolder.RESERVE_BYTES
    with pytest.raises(SettingsError, match=f"in use by process {os.getpid()}"):  # the pid still reads
        FolderLock(tmp_path)
    # a disk full at the final manifest: the reserve goes, the manifest is written
    calls, real = [], atomic.atomic_write_bytes

    def full_once(path, data):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(atomic, "atomic_write_bytes", full_once)
    folder.write_manifest({"status": "failed"}, 0, final=True)
    assert len(calls) == 2 and lock.read_bytes() == pid
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"status": "failed"}
    # not final: the error is the caller's
    calls.clear()
    with pytest.raises(OSError, match="No space"):
        folder.write_manifest({"status": "running"}, 0)
    # where the OS has no posix_fallocate (macOS, Windows), zeros are written
    monkeypatch.delattr(os, "posix_fallocate", raising=False)
    assert folder.lock.reserve(5000) and lock.read_bytes() == pid + b"\0" * 5000
    folder.release()
    assert not lock.exists()


def test_resume_rescans_a_finished_file_changed_at_the_same_size(velodyne, tmp_path):
    """--resume trusts a finished file only if its sha256 is the manifest's: one byte of
    frame 2's npz flipped (the size unchanged) is scanned and written again, the other
    frames are reused, and the folder ends with the bytes of an uninterrupted run."""
    ref, part = tmp_path / "ref", tmp_path / "part"
    scan_range(velodyne, [1, 2, 3], ref, ("npz", "pcd"))
    scan_range(velodyne, [1, 2, 3], part, ("npz", "pcd"))
    data = bytearray((part / "scan00002.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (part / "scan00002.npz").write_bytes(bytes(data))
    assert (part / "scan00002.npz").stat().st_size == (ref / "scan00002.npz").stat().st_size
    job = scan_range(velodyne, [1, 2, 3], part, ("npz", "pcd"), resume=True)
    assert job.status == "complete" and job.reused == 2
    after, want = snapshot(part), snapshot(ref)
    assert after.keys() == want.keys()
    for name, data in want.items():
        if name != "manifest.json":
            assert after[name] == data, name


def test_the_manifest_lists_an_object_a_frame_handler_creates_mid_run(velodyne, bpy_mod, tmp_path):
    """An object created by a frame-change handler while the run plays (a box around the
    sensor, after frame 1 is scanned) gets the next id of the object table, and the
    manifest's ``objects`` lists it with that id: the points of frame 3 that hit it carry
    an id the manifest names."""
    corners = [(x, y, z) for x in (-3.0, 3.0) for y in (-3.0, 3.0) for z in (-3.0, 3.0)]
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]

    visits = []

    def create(scene, *_args):  # a 6 m box around the sensor, once frame 3 is set again
        visits.append(scene.frame_current)  # (the first time: the job's check of the transforms)
        if visits.count(3) == 2 and "AddedMidRun" not in bpy_mod.data.objects:
            me = bpy_mod.data.meshes.new("AddedMidRun")
            me.from_pydata(corners, [], faces)
            ob = bpy_mod.data.objects.new("AddedMidRun", me)
            ob.location = velodyne.matrix_world.translation
            scene.collection.objects.link(ob)

    start = {o.name_full for o in bpy_mod.data.objects}
    bpy_mod.app.handlers.frame_change_pre.append(create)
    try:
        scan_range(velodyne, [1, 2, 3], tmp_path, ("npz",))
    finally:
        bpy_mod.app.handlers.frame_change_pre.remove(create)
    man = json.loads((tmp_path / "manifest.json").read_text())
    names = {o["id"]: o["name"] for o in man["objects"]}
    assert set(names.values()) >= start | {"AddedMidRun"}
    added = {i for i, n in names.items() if n == "AddedMidRun"}
    assert added == {len(start) + 1}  # the next id: the ids of the file's objects are unchanged
    hit = {f: set(np.unique(np.load(tmp_path / f"scan{f:05d}.npz")["object_id"]).tolist()) for f in (1, 2, 3)}
    assert not hit[1] & added and hit[3] & added
    assert set().union(*hit.values()) - {0} <= set(names)
