"""Range scans on a Dask cluster (issue 24, :mod:`blensor_addon.jobs.cluster`): the ``blensor``
command with ``--workers N`` and ``--scheduler ADDRESS``, in subprocesses (a local cluster
starts before the command imports bpy, so it never runs in this process).

What is checked: the files of 2 and 3 workers are the bytes of one process for every
registered format (sweeps and frame packets, a planar scanner, depth maps); a worker
killed mid-run (the run completes with the same bytes); SIGINT/SIGTERM of the client
(exit 130, ``cancelled``, finished packets kept, ``--resume --workers 2`` completes it with
the bytes of an uninterrupted run, no process left; Ctrl-C to the process group, SIGKILL, a
signal while the cluster starts, a second one while it stops); the output folder's lock; one
progress bar and a silent ``--quiet --quiet``; bad ``--workers``/``--scheduler`` input and a
missing Dask in one line; a cluster started by hand (``dask scheduler`` + ``dask worker``
on loopback), and one whose worker cannot read the .blend (no shared filesystem);
``--workers 1`` without Dask.

The scene is the demo crossing with extra cameras (made once per module in a Blender
subprocess): ``VLP`` (Velodyne VLP-16: pcap needs a unit with a packet encoder), ``Plane``
(a one-plane planar scanner: laserscan), ``Depth`` (96 x 64 depth camera), ``Slow`` and
``Slower`` (32 lasers at 0.05 and 0.01 deg, one packet a frame: about 0.08 and 0.4 s a
packet on one core, 48 packets: time for kills and signals mid-run).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CROSSING, ROOT

BIN = Path(sys.executable).parent
BLENSOR = str(BIN / "blensor")
DASK = str(BIN / "dask")

needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="needs Dask: pip install 'blensor[dask]'")


def dask_cluster(test):
    """A test that starts or reaches a Dask cluster: skipped without Dask, marked
    ``cluster`` (``pytest -m "not cluster"`` leaves it out)."""
    return pytest.mark.cluster(needs_dask(test))

#: the formats of a rotating LiDAR's range scan (evd needs frame packets: added there)
LIDAR_FORMATS = "npz,pcd,las,laz,ply,kitti,rosbag2,pcap,range_image"
#: one-process runs whose files the cluster must reproduce: (command, arguments)
RUNS = {
    # continuous time, one packet per sweep (10 Hz: frames 1-6 = 3 sweeps)
    "sweeps": ("scan", ["--camera", "VLP", "--frames", "1-6", "--formats", LIDAR_FORMATS]),
    # one packet per scene frame; the multi-frame EVD beside kitti, rosbag2 and pcap
    "frames": ("scan", ["--camera", "VLP", "--frames", "1-4", "--set", "packets=frame",
                        "--formats", LIDAR_FORMATS + ",evd"]),
    "laserscan": ("scan", ["--camera", "Plane", "--frames", "1-6", "--formats", "laserscan,npz"]),
    # noise on: seeded per frame, wherever the frame is scanned
    "depth": ("depth", ["--camera", "Depth", "--frames", "1-3", "--formats", "exr,npy,pfm,dmap",
                        "--set", "noise_sigma=0.01"]),
    # 48 packets of ~0.08 s: for the faults below
    "slow": ("scan", ["--camera", "Slow", "--frames", "1-48", "--formats", "npz,pcd"]),
    "slow_evd": ("scan", ["--camera", "Slow", "--frames", "1-48", "--formats", "npz,evd"]),
}

SCENE_SCRIPT = """
import sys, bpy, blensor_addon
blensor_addon.register()
bpy.ops.wm.open_mainfile(filepath={crossing!r})
velo = bpy.data.objects["Velodyne"]
def clone(name):  # the demo's sensor on its vehicle, with its own camera data
    o = velo.copy()
    o.data = velo.data.copy()
    o.name = name
    for c in velo.users_collection:
        c.objects.link(o)
    return o.data.blensor
clone("VLP").preset = "vlp16"
s = clone("Plane")
s.sensor_type = "planar"
s.preset = "generic"
clone("Depth").sensor_type = "depth"
for name, step in (("Slow", 0.05), ("Slower", 0.01)):
    s = clone(name)
    s.preset = "generic"
    s.elevations = ",".join(str(-24 + 0.75 * i) for i in range(32))
    s.angle_resolution = step
    s.packets = "frame"
r = bpy.context.scene.render
r.resolution_x, r.resolution_y, r.resolution_percentage = 96, 64, 100
bpy.ops.wm.save_as_mainfile(filepath={path!r})
blensor_addon.unregister()
"""


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    """The demo scene with the cameras of the module docstring (one Blender subprocess)."""
    path = tmp_path_factory.mktemp("cluster_scene") / "cameras.blend"
    code = SCENE_SCRIPT.format(crossing=str(CROSSING), path=str(path))
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def reference(scene, tmp_path_factory):
    """``reference(name)``: the folder of the one-process run ``RUNS[name]`` (made once)."""
    base = tmp_path_factory.mktemp("cluster_ref")
    made: dict = {}

    def get(name: str) -> Path:
        if name not in made:
            cmd, args = RUNS[name]
            out = base / name
            res = cli(cmd, scene, *args, "--out", out, "--quiet")
            assert res.returncode == 0, res.stderr
            made[name] = out
        return made[name]
    yield get
    shutil.rmtree(base, ignore_errors=True)  # 1 GB: not kept to the session's end


def cli(*args, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)


def popen(*args, session=False) -> subprocess.Popen:
    """The command in the background (in a session and process group of its own if ``session``)."""
    return subprocess.Popen([BLENSOR, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=session)


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def tree(folder: Path) -> dict:
    """Relative path -> bytes of every file below ``folder`` (hidden ones included)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_same_files(ref: Path, out: Path, skip=()) -> None:
    """Same file names below both folders, and the same bytes (but for ``skip``)."""
    a, b = tree(ref), tree(out)
    assert sorted(a) == sorted(b)
    differ = [n for n in a if n not in skip and a[n] != b[n]]
    assert differ == [], f"files that differ from the one-process run: {differ}"


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def finished(folder: Path) -> int:
    """Packets the manifest lists as finished (0 while there is none or it is being replaced)."""
    try:
        return len(manifest(folder)["frames"])
    except (OSError, ValueError, KeyError):
        return 0


def wait_finished(folder: Path, proc, n: int, timeout=180.0) -> None:
    t0 = time.monotonic()
    while finished(folder) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, f"{n} packets never finished"
        time.sleep(0.02)


def family(pid: int) -> list:
    """The processes below ``pid`` (psutil), now."""
    import psutil
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def worker_processes(pid: int) -> list:
    """The Dask worker processes of the command ``pid``: children of its multiprocessing
    fork server (POSIX; not the fork server itself, a child of ``pid``), or spawned
    children (``spawn_main``, Windows); named ``dask worker [...]`` where setproctitle is
    installed (mutmut brings it into the test venv)."""
    import psutil
    out = []
    for p in family(pid):
        try:
            cmd, parent = " ".join(p.cmdline()), p.ppid()
        except psutil.Error:
            continue
        # distributed renames its workers "dask worker [ADDRESS]" where setproctitle is installed
        if ("multiprocessing.forkserver" in cmd and parent != pid) or "spawn_main" in cmd \
                or cmd.startswith("dask worker"):
            out.append(p)
    return out


def assert_gone(procs, grace=15.0) -> None:
    """Every process of ``procs`` has ended (within ``grace`` s); any left is killed and named."""
    import psutil
    _, alive = psutil.wait_procs(procs, timeout=grace)
    left = []
    for p in alive:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append((p.pid, " ".join(p.cmdline())[:120]))
                p.kill()
        except psutil.Error:
            pass
    assert left == [], f"processes left behind: {left}"


def run_watched(*args, timeout=300.0):
    """Run the command; returns (CompletedProcess, every process seen below it while it ran)."""
    proc = popen(*args)
    seen: dict = {}
    t0 = time.monotonic()
    while proc.poll() is None:
        for p in family(proc.pid):
            seen.setdefault(p.pid, p)
        assert time.monotonic() - t0 < timeout, "the command did not end"
        time.sleep(0.05)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), list(seen.values())


# -- 1. the same bytes ------------------------------------------------------------------------


def test_the_same_bytes_runs_cover_each_way_the_cluster_handles_a_writer():
    """The runs below name registered formats and cover both ways a writer goes through a
    cluster: per-frame files encoded on the workers, multi-frame files written on the
    client from the whole result (range scans and depth maps). A format added later
    needs no entry here: the cluster path takes every registered writer the same way
    (:func:`test_a_writer_registered_from_a_test_goes_through_the_cluster_path`)."""
    from blensor_addon.io.formats import WRITERS
    covered = set()
    for _, args in RUNS.values():
        covered |= set(args[args.index("--formats") + 1].split(","))
    assert covered <= set(WRITERS), covered - set(WRITERS)
    assert {WRITERS[f].multi_frame for f in covered} == {False, True}
    assert {"depth", "scan"} == {cmd for cmd, _ in RUNS.values()}


class _InProcessCluster:
    """A cluster of one 'worker' in this process: ``client.submit`` runs the task at once
    (what :class:`~blensor_addon.jobs.cluster.RemoteScanner` asks of a Dask client)."""

    workers = 1
    local = True

    def __init__(self):
        from types import SimpleNamespace
        self.client = SimpleNamespace(submit=self._submit, cancel=lambda futures: None)
        self.submitted = []
        self.answers = []

    def _submit(self, fn, *args, key=None, priority=0, pure=True, retries=0, **where):
        self.submitted.append(key)
        try:
            self.answers.append(fn(*args))
            return _FakeFuture(self.answers[-1])
        except Exception as exc:  # sent back as the worker's error
            return _FakeFuture(error=exc)

    def size(self):
        return 1

    def workers_now(self):
        return 1

    def addresses(self):
        return ["inproc"]

    def threads_by_host(self):
        return {}

    def added_paths(self):
        return ()


def test_a_writer_registered_from_a_test_goes_through_the_cluster_path(bpy_mod, crossing, tmp_path):
    """A writer registered from outside the package (``register_writer``, as a plug-in
    does) is taken by the cluster path as the built-in ones are: its per-frame files are
    encoded by the worker task (:func:`~blensor_addon.jobs.cluster.scan_packet`) and
    committed by the client with the bytes of a one-process run, beside a built-in
    per-frame format (npz) and a multi-frame one (KITTI's poses, from the whole result)."""
    from blensor_addon.io.formats import FLAG_BITS, WRITERS, Writer, register_writer
    from blensor_addon.jobs import cluster as cluster_mod
    from blensor_addon.jobs.range_scan import scan_range

    class ProbeWriter(Writer):
        name = "clusterprobe"
        description = "test: points, rays and the first range of a packet"
        outputs = (r"probe/\d{5}\.txt",)

        def frame_files(self, result):
            first = f"{float(result.range[0]):.6f}" if len(result) else "-"
            return [(f"probe/{result.frame:05d}.txt", f"{len(result)} {result.num_rays} {first}\n".encode())]

    register_writer(ProbeWriter)
    cam = bpy_mod.data.objects["Velodyne"]
    formats = ("npz", "kitti", "clusterprobe")
    try:
        scan_range(cam, [1, 2, 3], tmp_path / "one", formats, seed=4)
        fake = _InProcessCluster()
        job = scan_range(cam, [1, 2, 3], tmp_path / "cluster", formats, seed=4, cluster=fake,
                         open_scene=lambda: cam)
    finally:
        del WRITERS["clusterprobe"], FLAG_BITS["clusterprobe"]
        state = cluster_mod._STATE.pop("scanner", None)
        cluster_mod._STATE.clear()
        if state is not None:
            state.close()
    assert job.status == "complete" and len(fake.submitted) == len(job.done) >= 2
    one, two = tree(tmp_path / "one"), tree(tmp_path / "cluster")
    assert one.keys() == two.keys() and len([n for n in one if n.startswith("probe/")]) == len(job.done)
    for name in one:
        if name != "manifest.json":
            assert one[name] == two[name], name


@dask_cluster
@pytest.mark.parametrize("name", ["sweeps", "frames", "laserscan", "depth"])
def test_two_and_three_workers_write_the_bytes_of_one_process(scene, reference, tmp_path, name):
    from blensor_addon.io.formats import WRITERS
    ref = reference(name)
    man = manifest(ref)
    assert man["status"] == "complete" and len(man["frames"]) >= 3
    if name in ("sweeps", "frames"):
        assert man["packets"] == name[:-1]
    files = tree(ref)
    assert "manifest.json" in files and "trajectory.tum" in files
    cmd, args = RUNS[name]
    for f in args[args.index("--formats") + 1].split(","):  # each format wrote something
        assert any(re.fullmatch(p, n) for p in WRITERS[f].outputs for n in files), f
    for workers in (2, 3):
        out = tmp_path / f"w{workers}"
        res = cli(cmd, scene, *args, "--out", out, "--workers", workers, "--quiet", "--quiet")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "" and res.stderr == ""
        assert_same_files(ref, out)


# -- 2. a worker killed -----------------------------------------------------------------------


@dask_cluster
def test_a_worker_killed_mid_run_is_replaced_and_the_files_are_the_same(scene, reference, tmp_path):
    ref = reference("slow_evd")
    cmd, args = RUNS["slow_evd"]
    out = tmp_path / "o"
    proc = popen(cmd, scene, *args, "--out", out, "--workers", 2, "--quiet")
    try:
        wait_finished(out, proc, 3)
        workers = worker_processes(proc.pid)
        assert len(workers) == 2, [" ".join(p.cmdline())[:100] for p in family(proc.pid)]
        workers[0].kill()  # SIGKILL: its packet in hand is lost
        assert_gone(workers[:1], grace=5)
        assert proc.poll() is None and finished(out) < 48  # mid-run
        seen = {}
        t0 = time.monotonic()
        while proc.poll() is None:  # the processes below it, the replacement worker among them
            seen.update((p.pid, p) for p in family(proc.pid))
            assert time.monotonic() - t0 < 300
            time.sleep(0.05)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert_gone(list(seen.values()))
    # before the fix, the restarted worker found Blender's inner bpy package (the client's
    # sys.path) and the run ended 'failed' with a traceback
    assert proc.returncode == 0, err
    assert err == ""
    assert manifest(out)["status"] == "complete"
    assert_same_files(ref, out)


# -- 3. signals of the client -----------------------------------------------------------------


@dask_cluster
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "Ctrl-C", "SIGKILL"])
def test_a_signal_stops_the_cluster_run_and_resume_on_the_cluster_completes_it(scene, reference, tmp_path,
                                                                                how):
    # Ctrl-C: SIGINT to the command's whole process group, as a terminal sends it (the fork
    # server and the workers get it too, and ignore it: the client decides what stops);
    # SIGKILL: the client dies at once (out of memory): its workers must not outlive it
    ref = reference("slow")
    cmd, args = RUNS["slow"]
    out = tmp_path / "o"
    proc = popen(cmd, scene, *args, "--out", out, "--workers", 2, "--quiet", session=how == "Ctrl-C")
    try:
        wait_finished(out, proc, 2)
        assert len(worker_processes(proc.pid)) == 2
        procs = family(proc.pid)
        sig = signal.SIGINT if how == "Ctrl-C" else getattr(signal, how)
        if how == "Ctrl-C":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert_gone(procs)  # the fork server and the workers end with the client
    man = manifest(out)
    done = [f["frame"] for f in man["frames"]]
    assert 2 <= len(done) < 48 and done == list(range(1, len(done) + 1))
    kept = {n: b for n, b in tree(out).items() if re.fullmatch(r"(noisy|clean)/scan\d+\.pcd|scan\d+\.npz", n)}
    assert kept == {n: b for n, b in tree(ref).items() if n in kept}  # finished packets: the same bytes
    if how == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL and man["status"] == "running"
    else:
        # as for one process (tests/test_faults.py): exit 130, one line naming the signal
        assert proc.returncode == 130, err
        line = one_error_line(err)
        assert f"interrupted by {sig.name}" in line and "finished frames kept" in line, line
        assert man["status"] == "cancelled"
        # finished packets kept, nothing else (no lock, no temporary file)
        assert set(tree(out)) == {n for f in man["frames"] for n in f["files"]} | {"manifest.json",
                                                                                  "trajectory.tum"}
    if how in ("SIGINT", "Ctrl-C"):
        return  # the resume of a cancelled run is checked after SIGTERM (the same folder state)
    res, procs = run_watched(cmd, scene, *args, "--out", out, "--resume", "--workers", 2)
    assert res.returncode == 0, res.stderr
    assert f"{len(done)} reused" in res.stdout, res.stdout
    assert_gone(procs)
    # the resumed folder: the uninterrupted run's files and bytes; its manifest lists the same frames
    assert_same_files(ref, out, skip={"manifest.json"})
    a, b = manifest(ref), manifest(out)
    assert a["frames"] == b["frames"] and b["status"] == "complete"


@dask_cluster
def test_a_signal_while_the_local_cluster_starts_is_one_line_and_leaves_no_process(scene, tmp_path):
    # SIGTERM once the fork server has started worker processes, before Blender has loaded
    # or any packet is finished: the one line of one process, no worker left
    cmd, args = RUNS["slow"]
    proc = popen(cmd, scene, *args, "--out", tmp_path / "o", "--workers", 2, "--quiet")
    seen: dict = {}
    try:
        t0 = time.monotonic()
        while not worker_processes(proc.pid):
            assert proc.poll() is None and time.monotonic() - t0 < 120, proc.communicate()
            time.sleep(0.01)
        seen.update((p.pid, p) for p in family(proc.pid))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    line = one_error_line(err)
    assert line.startswith("blensor: interrupted by SIGTERM"), line
    if "nothing written" in line:
        assert not (tmp_path / "o").exists()
    else:  # (a slow start on a loaded machine: the workers were up and scanning)
        assert manifest(tmp_path / "o")["status"] == "cancelled"
    assert_gone(list(seen.values()))


@dask_cluster
def test_a_second_signal_while_the_cluster_stops_is_only_noted(scene, tmp_path):
    # the first SIGTERM ends the run (its line printed); a second one while the local cluster
    # stops interrupted the stop: a second line and the resource tracker's warning about
    # leaked semaphores
    cmd, args = RUNS["slow"]
    proc = popen(cmd, scene, *args, "--out", tmp_path, "--workers", 2, "--quiet")
    try:
        wait_finished(tmp_path, proc, 2)
        procs = family(proc.pid)
        proc.send_signal(signal.SIGTERM)
        first = proc.stderr.readline()  # printed once the run has stopped, before the cluster stops
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert first.startswith("blensor: interrupted by SIGTERM after "), first
    assert proc.returncode == 130 and rest == "", rest
    assert_gone(procs)
    assert manifest(tmp_path)["status"] == "cancelled"


# -- 4. the folder lock -----------------------------------------------------------------------


@dask_cluster
def test_a_second_cluster_run_into_a_busy_folder_is_refused_in_one_line(scene, tmp_path):
    first = popen("scan", scene, "--camera", "Slower", "--frames", "1-48", "--formats", "npz",
                  "--out", tmp_path, "--workers", 2, "--quiet")
    try:
        wait_finished(tmp_path, first, 1)
        res, procs = run_watched("scan", scene, "--camera", "VLP", "--frames", "1-2", "--out", tmp_path,
                                 "--overwrite", "--workers", 2)
        assert first.poll() is None  # still running: the refusal was the lock's
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert res.returncode == 2, res.stderr
    # the line of one process (tests/test_faults.py)
    assert "--out must be a folder no other BlenSor run is writing to" in one_error_line(res.stderr)
    assert_gone(procs)
    assert first.returncode == 130, err
    man = manifest(tmp_path)
    assert man["status"] == "cancelled" and man["frames"][0]["files"] == ["scan00001.npz"]


# -- 5. progress ------------------------------------------------------------------------------


@dask_cluster
def test_one_progress_bar_over_all_workers_and_quiet_prints_nothing(scene, tmp_path):
    res = cli("scan", scene, "--camera", "VLP", "--frames", "1-6", "--formats", "npz",
              "--out", tmp_path / "bar", "--workers", 2)
    assert res.returncode == 0, res.stderr
    total = len(manifest(tmp_path / "bar")["frames"])
    assert total == 3
    # stderr is no terminal here: one plain line per tenth of the total, no carriage return, the
    # count over all workers going up to the total
    assert "\r" not in res.stderr
    counts = []
    for p in res.stderr.splitlines():
        m = re.fullmatch(r"blensor: (\d+)/(\d+) scans, \d+ points", p)
        assert m is not None and int(m.group(2)) == total, p
        counts.append(int(m.group(1)))
    assert counts == list(range(1, total + 1))
    points = sum(f["points"] for f in manifest(tmp_path / "bar")["frames"])
    assert res.stdout.splitlines()[-1].startswith(f"blensor: 3 sweeps, {points} points")
    # --quiet twice: nothing at all, even where another program holds the port 8787 (distributed's
    # scheduler took it for its HTTP server and warned on stderr when it was in use)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8787))
            s.listen()
        except OSError:
            pass  # already in use: what the check needs
        res = cli("scan", scene, "--camera", "VLP", "--frames", "1-3", "--formats", "npz",
                  "--out", tmp_path / "quiet", "--workers", 2, "--quiet", "--quiet")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "", res.stderr


# -- 6. bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("args,needle", [
    (["scan", "--workers", "0"], "--workers must be an integer in [1, 256], got 0"),
    (["scan", "--workers", "-1"], "--workers must be an integer in [1, 256], got -1"),
    (["scan", "--workers", "300"], "--workers must be an integer in [1, 256], got 300"),
    (["depth", "--workers", "0"], "--workers must be an integer in [1, 256], got 0"),
    (["scan", "--workers", "two"], "argument --workers: invalid int value: 'two'"),
    (["scan", "--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"],
     "--workers must be 1 with --scheduler"),
    (["scan", "--scheduler", "tcp://a b"], "--scheduler must be a scheduler address such as tcp://HOST:8786"),
    # (waited forever for the file: review of issue 24; about 20 s here)
    pytest.param(["scan", "--scheduler", "no_such_scheduler.json"],
                 "--scheduler must be an existing scheduler file", marks=pytest.mark.slow),
    # a rig is refused once the file names its cameras (after the local cluster started)
    pytest.param(["scan", "--camera", "VLP,Plane", "--workers", "2"], "--workers must be 1 for a rig",
                 marks=pytest.mark.cluster),
])
def test_bad_cluster_options_exit_2_in_one_line_and_write_nothing(scene, tmp_path, args, needle):
    if "VLP,Plane" in args and importlib.util.find_spec("distributed") is None:
        pytest.skip("needs Dask (the local cluster starts before the rig is known)")
    res, procs = run_watched(args[0], scene, *args[1:], "--frames", "1-2", "--out", tmp_path / "o")
    assert res.returncode == 2
    assert needle in one_error_line(res.stderr)
    assert list(tmp_path.iterdir()) == []
    assert_gone(procs)


def test_without_dask_more_than_one_worker_is_refused(monkeypatch):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs import cluster
    monkeypatch.setattr(cluster, "dask_available", lambda: pytest.fail("--workers 1 asked for Dask"))
    assert cluster.check_workers(1) == 1
    monkeypatch.setattr(cluster, "dask_available", lambda: False)
    with pytest.raises(SettingsError) as e:
        cluster.check_workers(2)
    assert e.value.setting == "--workers" and cluster.DASK_HINT in str(e.value)
    with pytest.raises(SettingsError) as e:
        cluster.check_workers(1, "tcp://127.0.0.1:8786")
    assert e.value.setting == "--scheduler" and cluster.DASK_HINT in str(e.value)
    # a module that cannot be imported (None in sys.modules): find_spec says None, not an error
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert cluster.dask_available() is False


#: the command line's main() in a Python where ``distributed`` cannot be imported
NO_DASK = """
import sys
sys.modules["distributed"] = None
from blensor_addon.cli import main
sys.exit(main({args!r}))
"""


@pytest.mark.parametrize("cmd", [["scan", "--workers", "2"], ["depth", "--workers", "3"],
                                 ["scan", "--scheduler", "tcp://127.0.0.1:8786"]])
def test_without_dask_the_command_says_what_to_install(scene, tmp_path, cmd):
    args = [cmd[0], str(scene), *cmd[1:], "--frames", "1-2", "--out", str(tmp_path / "o")]
    res = subprocess.run([sys.executable, "-c", NO_DASK.format(args=args)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    line = one_error_line(res.stderr)
    assert line.startswith(f"blensor: error: {cmd[1]} must be"), line
    assert "pip install 'blensor[dask]'" in line, line
    assert list(tmp_path.iterdir()) == []


# -- 7. a cluster started by hand -------------------------------------------------------------


@contextlib.contextmanager
def hand_started_cluster(folder: Path, workers):
    """``dask scheduler`` on a free loopback port and one ``dask worker`` per item of
    ``workers`` (address -> argv), logs in ``folder``; yields the scheduler's address once
    every worker has registered (None where a worker ended first: its log says why); stops
    the workers, then the scheduler."""
    info = folder / "scheduler.json"
    names = ["scheduler", *(f"worker{i}" for i in range(len(workers)))]
    logs = [open(folder / f"{n}.log", "w") for n in names]
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(info)], stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        t0 = time.monotonic()
        while not (info.exists() and info.stat().st_size):
            assert procs[0].poll() is None, (folder / "scheduler.log").read_text()
            assert time.monotonic() - t0 < 120, "the scheduler did not start"
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for argv, log in zip(workers, logs[1:]):
            procs.append(subprocess.Popen(argv(address), stdout=log, stderr=subprocess.STDOUT))
        for i, p in enumerate(procs[1:]):  # all registered: the run gets them all from the start
            while "Registered to" not in (folder / f"worker{i}.log").read_text():
                if p.poll() is not None:
                    address = None
                    break
                assert time.monotonic() - t0 < 180, (folder / f"worker{i}.log").read_text()
                time.sleep(0.1)
        yield address
    finally:
        for p in reversed(procs):  # the workers first, then the scheduler
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def dask_worker(address: str) -> list:
    return [DASK, "worker", address, "--nthreads", "1", "--no-dashboard"]


@dask_cluster
def test_a_cluster_started_by_hand_on_loopback_writes_the_same_bytes(scene, reference, tmp_path):
    # the README's example: dask scheduler + two dask worker processes, then blensor --scheduler
    ref = reference("sweeps")
    with hand_started_cluster(tmp_path, [dask_worker, dask_worker]) as address:
        assert address is not None, "a worker did not start"
        cmd, args = RUNS["sweeps"]
        res = cli(cmd, scene, *args, "--out", tmp_path / "o", "--scheduler", address, "--quiet", "--quiet")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and res.stderr == ""
    assert_same_files(ref, tmp_path / "o")


@dask_cluster
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare (a worker in a mount namespace of its own)")
def test_workers_that_cannot_read_the_blend_are_named_in_one_line(scene, tmp_path):
    # no shared filesystem: the worker runs in a mount namespace where a tmpfs hides the
    # folder of the .blend, which the client reads
    shared = tmp_path / "shared"
    shared.mkdir()
    blend = shared / "cameras.blend"
    blend.write_bytes(scene.read_bytes())

    def hidden(address):
        return ["unshare", "-m", "sh", "-c",
                f"mount -t tmpfs none '{shared}' && exec {' '.join(dask_worker(address))}"]
    with hand_started_cluster(tmp_path, [hidden]) as address:
        if address is None:
            pytest.skip("no mount namespace here: " + (tmp_path / "worker0.log").read_text()[-200:])
        res = cli("scan", blend, "--camera", "VLP", "--frames", "1-6", "--out", tmp_path / "o",
                  "--scheduler", address, "--quiet")
    assert res.returncode == 2, res.stderr
    line = one_error_line(res.stderr)
    assert line == ("blensor: error: --scheduler must be workers that can read the .blend at the client's "
                    f"path (a shared filesystem), got '{blend}'"), line
    assert not (tmp_path / "o").exists()


# -- 8. one worker: no Dask -------------------------------------------------------------------


ONE_WORKER = """
import sys
from blensor_addon.cli import main
rc = main({args!r})
print(rc, sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")))
"""


def test_one_worker_runs_in_this_process_without_importing_dask(scene, tmp_path):
    args = ["scan", str(scene), "--camera", "VLP", "--frames", "1-3", "--formats", "npz", "--out",
            str(tmp_path / "o"), "--workers", "1", "--quiet"]
    res = subprocess.run([sys.executable, "-c", ONE_WORKER.format(args=args)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "0 []"
    assert manifest(tmp_path / "o")["status"] == "complete"


# -- review of issue 24: the client's side without a cluster (fakes) ---------------------------


class _FakeFuture:
    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def done(self):
        return True

    def result(self, timeout=None):
        if self.error is not None:
            raise self.error
        return self.value

    def release(self):
        pass


class _FakeCluster:
    def size(self):
        return 2

    def workers_now(self):
        return 2

    def addresses(self):
        return ["tcp://a:1", "tcp://b:2"]


def _remote(answers):
    """A RemoteScanner whose 'client' hands out ``answers`` (futures) in order."""
    from types import SimpleNamespace

    from blensor_addon.jobs.cluster import RemoteScanner, WorkerTask
    r = RemoteScanner.__new__(RemoteScanner)
    queue = list(answers)
    r.cluster = _FakeCluster()
    r.client = SimpleNamespace(submit=lambda *a, **k: queue.pop(0))
    r.local = SimpleNamespace(backend=SimpleNamespace(name="native"),
                              extractor=SimpleNamespace(table=SimpleNamespace(table=[{"id": 1}])))
    r.task = WorkerTask(key="k", open_scene=None, scanner={}, encode={}, run=None, folder="", full=False,
                        versions=("1", "5.0"))
    r.lookahead, r._futures, r._printed, r._table, r._size = 4, {}, set(), 1, 2
    r.staging = ""
    return r


def _scanned(**kw):
    from blensor_addon.jobs.cluster import Scanned
    base = dict(record="rec", frame=0, points=3, rays=5, sensor_to_world=None, files={}, checks={},
                versions=("1", "5.0"), backend="native")
    return Scanned(**{**base, **kw})


def test_every_worker_answer_is_checked_for_versions_and_backend():
    from blensor_addon.core.packets import Packet
    from blensor_addon.jobs.cluster import ClusterError
    r = _remote([_FakeFuture(_scanned()), _FakeFuture(_scanned(versions=("1", "4.2")))])
    result, rec = r.scan(Packet("sweep", 0))
    assert len(result) == 3 and result.num_rays == 5 and rec == "rec"
    with pytest.raises(ClusterError, match="a worker runs blensor 1 with Blender 4.2"):
        r.scan(Packet("sweep", 1))  # the second answer (a worker that joined later) is checked too
    r = _remote([_FakeFuture(_scanned(backend="bvhtree"))])
    with pytest.raises(ClusterError, match="bvhtree backend"):
        r.scan(Packet("sweep", 0))


def test_earlier_packets_are_submitted_with_the_higher_dask_priority():
    """Dask runs a higher ``priority`` first: a packet is submitted with priority minus its
    index, so the packet the pipeline waits for is scanned before those submitted ahead of
    it (a reversed priority would scan the look-ahead first and stall the writer); each
    packet is submitted once, under its own key."""
    from types import SimpleNamespace

    from blensor_addon.core.packets import Packet
    from blensor_addon.jobs.cluster import scan_packet
    r = _remote([])
    calls = []
    r.client = SimpleNamespace(submit=lambda fn, *a, **k: calls.append((fn, a, k)) or _FakeFuture(_scanned()))
    r.expect([Packet("sweep", 3), Packet("sweep", 4), Packet("sweep", 10)])
    r.expect([Packet("sweep", 4), Packet("sweep", 11)])  # 4 is out already
    assert [k["priority"] for _, _, k in calls] == [-3, -4, -10, -11]
    assert [a[1].index for _, a, _ in calls] == [3, 4, 10, 11]
    assert all(fn is scan_packet and a[0] is r.task and k["pure"] is False for fn, a, k in calls)
    assert [k["key"] for _, _, k in calls] == [f"blensor-k-sweep-{i}" for i in (3, 4, 10, 11)]


def test_a_worker_error_ends_the_run_in_one_line_and_bad_input_stays_bad_input():
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.packets import Packet
    from blensor_addon.jobs.cluster import ClusterError
    r = _remote([_FakeFuture(error=ModuleNotFoundError("No module named 'blensor_addon'"))])
    with pytest.raises(ClusterError, match="packet 4 failed on a worker: ModuleNotFoundError"):
        r.scan(Packet("sweep", 4))
    r = _remote([_FakeFuture(error=ConnectionResetError("gone"))])
    with pytest.raises(ClusterError, match="the scheduler went away"):
        r.scan(Packet("sweep", 4))
    r = _remote([_FakeFuture(error=SettingsError("max_range", "in [0, 1]", 5))])
    with pytest.raises(SettingsError, match="max_range"):
        r.scan(Packet("sweep", 4))


def test_a_scene_whose_object_table_grows_is_refused_on_a_cluster():
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.packets import Packet
    r = _remote([_FakeFuture(_scanned(objects=[{"id": 1}, {"id": 2}, {"id": 3}]))])
    with pytest.raises(SettingsError, match="--workers must be 1 for a scene that creates objects.*2 new"):
        r.scan(Packet("sweep", 7))


def test_the_pipeline_hands_each_packet_ahead_once_and_skips_reused_ones():
    from types import SimpleNamespace

    from blensor_addon.core.packets import Packet
    from blensor_addon.jobs.pipeline import Pipeline
    p = Pipeline.__new__(Pipeline)
    p.plan = SimpleNamespace(packets=[Packet("sweep", i) for i in range(20)])
    reused = {3, 4, 5, 11}
    p._checked = {i: ({"frame": i} if i in reused else None) for i in range(20)}
    p._reuse, p.writers = {}, []
    p._ahead, p._cursor, p._next = __import__("collections").deque(), 0, 0
    handed = []
    for p._next in range(20):
        handed += [q.index for q in p._upcoming(3)]
        live = [i for i in p._ahead if i >= p._next]
        want = [i for i in range(p._next, 20) if i not in reused][:3]
        assert live == want, (p._next, live, want)
    assert handed == [i for i in range(20) if i not in reused]  # each once, in order


# -- a result that arrives slowly, runs under CPU contention -----------------------------------


#: a local cluster whose tasks return 64 MiB each, waited for by RemoteScanner's wait with a
#: poll far shorter than a transfer: distributed's Future.result(timeout) timed out in the
#: middle of a transfer, which cancelled the client's shared gather, and every later result
#: then raised "UnboundLocalError: cannot access local variable 'result'" (distributed.utils.sync)
SLOW_TRANSFER = """
from blensor_addon.core.packets import Packet
from blensor_addon.jobs import cluster as C
C.POLL_S = 0.005
def big(i):
    return bytes([i]) * (64 * 2**20)
if __name__ == "__main__":
    cl = C.Cluster(2).start()
    try:
        r = C.RemoteScanner.__new__(C.RemoteScanner)
        r.cluster = cl
        futures = [cl.client.submit(big, i, pure=False) for i in range(4)]
        for i, f in enumerate(futures):
            out = r._result(f, Packet("sweep", i))
            assert len(out) == 64 * 2**20 and out[:1] == bytes([i]), (i, len(out))
        print("ok")
    finally:
        cl.close()
"""


@dask_cluster
def test_results_that_take_longer_than_the_poll_to_arrive_are_all_received():
    res = subprocess.run([sys.executable, "-c", SLOW_TRANSFER], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


@contextlib.contextmanager
def cpu_burners(n: int):
    """``n`` processes spinning on a core each (CPU contention), ended by their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)


@dask_cluster
@pytest.mark.slow
def test_cluster_runs_under_cpu_contention_write_the_bytes_of_one_process(scene, tmp_path):
    # the tester's failure: a --workers 2 run of the drive scene with kitti and rosbag2 (the
    # whole result comes back from the worker) on 2 loaded cores ended 'failed' once, with
    # "packet 51 failed on a worker: UnboundLocalError" (see SLOW_TRANSFER)
    args = ["--camera", "VLP", "--frames", "1-4", "--formats", "npz,kitti,rosbag2", "--quiet"]
    res = cli("scan", scene, *args, "--out", tmp_path / "ref")
    assert res.returncode == 0, res.stderr
    with cpu_burners(2 * (os.cpu_count() or 1)):
        for i in range(3):
            out = tmp_path / f"o{i}"
            res = cli("scan", scene, *args, "--out", out, "--workers", 2, timeout=300)
            assert res.returncode == 0, res.stderr
            assert res.stderr == ""
            assert_same_files(tmp_path / "ref", out)


# -- hostile --scheduler values: refused at once ----------------------------------------------


#: scheduler files (``dask scheduler --scheduler-file``) that hold no usable address
SCHEDULER_FILES = {
    "garbage": b"\x00\xffnot json {",
    "empty": b"",
    "empty_object": b"{}",
    "no_address": b'{"type": "Scheduler", "id": "Scheduler-1"}',
    "number": b"8786",
    "array": b'["tcp://127.0.0.1:8786"]',
    "address_not_text": b'{"address": 8786}',
    "ucx_address": b'{"address": "ucx://127.0.0.1:1"}',
    "deep": b"[" * 100000,
}


@dask_cluster
@pytest.mark.parametrize("case", [*SCHEDULER_FILES, "fifo", "fifo.json", "device", "folder", "ucx",
                                  "inproc", "no_port", "port_out_of_range", "tls_without_settings"])
def test_a_hostile_scheduler_is_refused_at_once_in_one_line(tmp_path, case):
    if case in SCHEDULER_FILES:
        value = tmp_path / "scheduler.json"
        value.write_bytes(SCHEDULER_FILES[case])
        old = time.time() - 60  # (a file being written now gets a moment to be complete)
        os.utime(value, (old, old))
    elif case.startswith("fifo"):
        value = tmp_path / case
        os.mkfifo(value)
    else:
        value = {"device": os.devnull, "folder": str(tmp_path), "ucx": "ucx://127.0.0.1:1",
                 "inproc": "inproc://127.0.0.1/1/1", "no_port": "tcp://127.0.0.1",
                 "port_out_of_range": "tcp://127.0.0.1:99999",
                 "tls_without_settings": "tls://127.0.0.1:1"}[case]
    # the bound: under the 20 s the command waits for a scheduler file to appear (a FIFO
    # waited that long) and Dask's connection timeout (a bad file: a traceback after 45 s)
    res = cli("scan", CROSSING, "--frames", "1-2", "--out", tmp_path / "o", "--scheduler", value, timeout=19)
    assert res.returncode == 2, res.stderr
    line = one_error_line(res.stderr)  # (no "Exception ignored in Client.__del__" either)
    assert line.startswith("blensor: error: --scheduler must be "), line
    assert str(value) in line, line
    assert not (tmp_path / "o").exists()


# -- BLENSOR_DEBUG: the traceback after the line ----------------------------------------------


#: a Dask worker preload (``distributed.worker.preload``) whose worker fails every scan task
FAILING_WORKER = '''
def dask_setup(worker):
    from blensor_addon.jobs import cluster

    def injected_worker_fault(task):
        raise RuntimeError("injected worker fault")
    cluster._worker_state = injected_worker_fault
'''


def debug_env(on: bool, **extra) -> dict:
    env = dict(os.environ, **extra)
    env.pop("BLENSOR_DEBUG", None)
    if on:
        env["BLENSOR_DEBUG"] = "1"
    return env


def test_blensor_debug_prints_the_traceback_of_a_local_error_after_its_line(tmp_path):
    args = ("scan", CROSSING, "--frames", "1-2", "--out", tmp_path / "o", "--workers", "0")
    res = cli(*args, env=debug_env(False))
    assert res.returncode == 2
    line = one_error_line(res.stderr)
    assert line == "blensor: error: --workers must be an integer in [1, 256], got 0"
    res = cli(*args, env=debug_env(True))
    assert res.returncode == 2
    first, rest = res.stderr.split("\n", 1)
    assert first == line
    assert rest.startswith("Traceback (most recent call last):\n"), rest
    assert "in check_workers" in rest and rest.rstrip().endswith(line.split("error: ", 1)[1]), rest
    assert not (tmp_path / "o").exists()


@dask_cluster
def test_blensor_debug_prints_the_workers_traceback_of_a_worker_failure(scene, tmp_path):
    preload = tmp_path / "failing_worker.py"
    preload.write_text(FAILING_WORKER)
    args = ("scan", scene, "--camera", "VLP", "--frames", "1-2", "--formats", "npz", "--workers", "2",
            "--quiet")
    extra = {"DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    res = cli(*args, "--out", tmp_path / "a", env=debug_env(False, **extra))
    assert res.returncode == 1, res.stderr
    line = one_error_line(res.stderr)
    assert re.fullmatch(r"blensor: error: packet \d+ failed on a worker: RuntimeError: injected worker "
                        r"fault; finished packets are kept", line), line
    assert manifest(tmp_path / "a")["status"] == "failed"
    res = cli(*args, "--out", tmp_path / "b", env=debug_env(True, **extra))
    assert res.returncode == 1, res.stderr
    first, rest = res.stderr.split("\n", 1)
    assert first == line
    assert rest.startswith("Traceback (most recent call last):\n"), rest
    # the worker's own frames: the task, and the preload's function that raised
    assert "in scan_packet" in rest and f'{preload.name}", line 6, in injected_worker_fault' in rest, rest
    assert rest.rstrip().endswith("RuntimeError: injected worker fault"), rest


@needs_dask
def test_a_scheduler_file_being_written_is_read_once_complete(tmp_path):
    import threading

    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.cluster import read_scheduler_file
    path = tmp_path / "scheduler.json"
    path.write_text('{"type": "Scheduler", "addr')  # (dask scheduler writes it once it listens)
    done = threading.Timer(0.3, path.write_text, ['{"type": "Scheduler", "address": "tcp://127.0.0.1:8786"}'])
    done.start()
    try:
        assert read_scheduler_file(str(path)) == "tcp://127.0.0.1:8786"
    finally:
        done.join()
    path.write_text('{"address": ')  # never completed: refused once it is no longer fresh
    with pytest.raises(SettingsError, match=r"--scheduler must be .*scheduler\.json \(not JSON"):
        read_scheduler_file(str(path))


@dask_cluster
def test_a_scheduler_file_written_by_dask_scheduler_reaches_the_cluster(scene, tmp_path):
    with hand_started_cluster(tmp_path, [dask_worker]) as address:
        assert address is not None, "the worker did not start"
        res = cli("scan", scene, "--camera", "VLP", "--frames", "1-2", "--formats", "npz", "--out",
                  tmp_path / "o", "--scheduler", tmp_path / "scheduler.json", "--quiet")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert manifest(tmp_path / "o")["status"] == "complete"


@dask_cluster
def test_hand_started_workers_that_loaded_blender_stop_without_a_crash(tmp_path):
    # a `dask worker` process (multiprocessing "spawn") ended with Python's full teardown, and
    # Blender's teardown in it crashed: the nanny logged "Worker process ... was killed by signal 11"
    with hand_started_cluster(tmp_path, [dask_worker]) as address:
        assert address is not None, "the worker did not start"
        res = cli("scan", CROSSING, "--frames", "1", "--formats", "npz", "--out", tmp_path / "o",
                  "--scheduler", address, "--quiet", "--quiet")
        assert res.returncode == 0, res.stderr
    log = (tmp_path / "worker0.log").read_text()
    assert "Worker closed" in log and "End worker" in log, log[-3000:]  # (it stopped, and said so)
    assert "killed by signal" not in log and "Traceback" not in log, log[-3000:]


def test_a_scheduler_file_dated_in_the_future_is_refused_after_the_wait(tmp_path):
    # a scheduler host whose clock runs ahead: the file's age never passed FRESH_S, the
    # client re-read an empty file every 50 ms for ever
    import threading

    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.cluster import read_scheduler_file
    path = tmp_path / "scheduler.json"
    path.write_text("")
    ahead = time.time() + 3600
    os.utime(path, (ahead, ahead))
    out = {}

    def read():
        try:
            read_scheduler_file(str(path))
        except SettingsError as exc:
            out["error"] = str(exc)
    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(60)  # (a hang bound, not a timing: the wait is FRESH_S)
    assert not t.is_alive() and out["error"].endswith(f"got '{path} (empty)'"), out


# -- the cluster's CPU: files staged in the shared output folder, consecutive packets per worker ----


def _scan_in_process(cam, out, formats, sees=True):
    """``scan_range`` of frames 1-4 through :class:`_InProcessCluster`; ``sees``: the worker
    sees the staging folder (else it is told it does not and sends the bytes). Returns the
    job and the cluster (its ``answers``: the worker's Scanned of each packet)."""
    from blensor_addon.jobs import cluster as cluster_mod
    from blensor_addon.jobs.range_scan import scan_range
    fake = _InProcessCluster()
    seen = cluster_mod._sees_staging
    if not sees:
        cluster_mod._sees_staging = lambda task: False
    try:
        job = scan_range(cam, [1, 2, 3, 4], out, formats, seed=4, cluster=fake, open_scene=lambda: cam)
    finally:
        cluster_mod._sees_staging = seen
        state = cluster_mod._STATE.pop("scanner", None)
        cluster_mod._STATE.clear()
        if state is not None:
            state.close()
    return job, fake


def test_a_worker_that_sees_the_output_folder_sends_names_sizes_and_hashes_not_bytes(bpy_mod, crossing,
                                                                                        tmp_path):
    """A worker that sees the client's output folder (the probe in the staging folder)
    writes each packet's per-frame files there and answers with their names, sizes and
    sha256 only: the pickled answer stays under 4 KiB a packet (a worker that does not see
    it sends every file's bytes, tens of KB a packet here); the client renames the staged
    files into place, the bytes of one process, and removes the staging folder."""
    import pickle

    from blensor_addon.jobs.cluster import STAGING_PREFIX
    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    formats = ("npz", "pcd")  # (a multi-frame format would have the whole result sent as well)
    scan_range(cam, [1, 2, 3, 4], tmp_path / "one", formats, seed=4)
    job, fake = _scan_in_process(cam, tmp_path / "staged", formats)
    sent, sent_bytes = _scan_in_process(cam, tmp_path / "sent", formats, sees=False)
    assert job.status == sent.status == "complete" and len(fake.answers) == len(job.done) >= 2
    one = tree(tmp_path / "one")
    for name in ("staged", "sent"):
        other = tree(tmp_path / name)
        assert other.keys() == one.keys(), set(other) ^ set(one)  # (no staging folder left)
        assert all(one[n] == other[n] for n in one if n != "manifest.json")
    assert not list((tmp_path / "staged").glob(STAGING_PREFIX + "*"))
    for staged, plain in zip(fake.answers, sent_bytes.answers):
        files = sum(size for items in staged.staged.values() for _, _, size in items)
        assert staged.files == {} and set(staged.staged) == {"npz", "pcd"} and files > 20_000
        assert plain.staged == {} and set(plain.files) == {"npz", "pcd"}
        assert len(pickle.dumps(staged)) < 4096 < files < len(pickle.dumps(plain))
        assert {n for items in staged.staged.values() for n, _, _ in items} == set(staged.checks)


def test_a_worker_gets_blocks_of_consecutive_packets():
    """Packets go to the workers in blocks of BLOCK consecutive indices, the blocks to the
    workers in turn, as loose restrictions (another worker may take them): a worker's next
    packet starts where its last one ended (its timeline keeps that scene sample)."""
    from types import SimpleNamespace

    from blensor_addon.core.packets import Packet
    from blensor_addon.jobs.cluster import AHEAD_PER_WORKER, BLOCK
    r = _remote([])
    calls = []
    r.client = SimpleNamespace(submit=lambda fn, *a, **k: calls.append((a[1].index, k))
                               or _FakeFuture(_scanned()))
    r.expect([Packet("sweep", i) for i in range(4 * BLOCK)])
    assert all(k["allow_other_workers"] is True for _, k in calls)
    by_worker = {}
    for index, k in calls:
        by_worker.setdefault(k["workers"][0], []).append(index)
    a, b = r.cluster.addresses()
    assert by_worker == {a: [*range(0, BLOCK), *range(2 * BLOCK, 3 * BLOCK)],
                         b: [*range(BLOCK, 2 * BLOCK), *range(3 * BLOCK, 4 * BLOCK)]}
    assert r.lookahead == AHEAD_PER_WORKER * BLOCK * 2  # (both workers have a block ahead)


def test_a_staged_file_of_another_size_fails_the_packet_and_nothing_is_left(tmp_path):
    """The client checks each staged file (a regular file of the size the worker wrote)
    before it renames the packet's files: a mismatch is a write error, nothing of the
    packet appears and the staged files are removed."""
    from blensor_addon.io.atomic import Staged, commit_files, stage_bytes
    (tmp_path / "s").mkdir()
    (tmp_path / "out").mkdir()
    part = stage_bytes(tmp_path / "s" / "a.npz", b"12345")
    with pytest.raises(OSError, match="not the regular file of 6 bytes"):
        commit_files(tmp_path / "out", [("a.npz", Staged(part, 6)), ("t.txt", b"x")])
    assert not part.exists() and not (tmp_path / "out" / "a.npz").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
    part = stage_bytes(tmp_path / "s" / "a.npz", b"12345")
    written = commit_files(tmp_path / "out", [("a.npz", Staged(part, 5)), ("t.txt", b"x")])
    assert [p.name for p in written] == ["a.npz", "t.txt"]
    assert (tmp_path / "out" / "a.npz").read_bytes() == b"12345"


def test_staging_folders_of_a_killed_run_are_removed_when_the_next_run_starts(tmp_path):
    from blensor_addon.jobs.cluster import PROBE, STAGED, STAGING_PREFIX, _make_staging
    old = tmp_path / f"{STAGING_PREFIX}dead" / STAGED
    old.mkdir(parents=True)
    (old / ".a.npz.1.0123456789abcdef.part").write_bytes(b"x")
    made = Path(_make_staging(str(tmp_path), "k1"))
    assert [p.name for p in tmp_path.iterdir()] == [f"{STAGING_PREFIX}k1"] and made.parent == tmp_path
    assert (made / PROBE).read_bytes() == b"k1" and (made / STAGED).is_dir()


UNPICKLE_AFTER_PREPARE = """
import pickle, sys
from blensor_addon.jobs import cluster
cluster._prepare_worker()
before = {m for m in sys.modules if m.startswith("blensor_addon")}
task, packet = pickle.loads(bytes.fromhex(sys.argv[1]))
print(sorted({m for m in sys.modules if m.startswith("blensor_addon")} - before))
"""


def test_a_prepared_worker_unpickles_scan_tasks_without_importing_the_add_on():
    """A local cluster's worker imports, once and before any task, the modules a scan task
    carries objects of: unpickling a task later (on the worker's event loop, while the
    preload task imports the add-on on the task thread) imports nothing more, so the two
    threads never import one package at once (a partly imported package failed the task:
    ``KeyError: 'blensor_addon.core.sensors'``, the run failed: now and then on 2 cores)."""
    import functools
    import pickle

    from blensor_addon import cli
    from blensor_addon.core.packets import Packet
    from blensor_addon.io.formats import RunInfo
    from blensor_addon.jobs.cluster import WorkerTask
    task = WorkerTask(key="k", open_scene=functools.partial(cli.worker_scene, "/x.blend", "Lidar", None, "t"),
                      scanner={"seed": 1}, encode={"npz": {}}, run=RunInfo(camera="Lidar", frames=[0, 1]),
                      folder="/tmp/o", full=False)
    data = pickle.dumps((task, Packet("sweep", 3))).hex()
    res = subprocess.run([sys.executable, "-c", UNPICKLE_AFTER_PREPARE, data], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]", res.stdout


def test_a_worker_that_cannot_write_the_staging_folder_sends_the_bytes(bpy_mod, crossing, tmp_path):
    """A worker that sees the staging folder but cannot write there (a read-only mount, a
    full disk) sends the files' bytes from then on: the run completes with the bytes of
    one process, as if it had not seen the folder."""
    from blensor_addon.jobs import cluster as cluster_mod
    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    calls = []

    def full(task, files):
        calls.append(task.staging)
        raise OSError(28, "No space left on device")
    scan_range(cam, [1, 2, 3, 4], tmp_path / "one", ("npz",), seed=4)
    stage, cluster_mod._stage = cluster_mod._stage, full
    try:
        job, fake = _scan_in_process(cam, tmp_path / "cluster", ("npz",))
    finally:
        cluster_mod._stage = stage
    assert job.status == "complete" and len(calls) == 1  # (tried once, then the bytes)
    assert all(a.staged == {} and set(a.files) == {"npz"} for a in fake.answers)
    one, two = tree(tmp_path / "one"), tree(tmp_path / "cluster")
    assert one.keys() == two.keys() and all(one[n] == two[n] for n in one if n != "manifest.json")


LOCAL_SETTINGS = """
import dask, distributed, json
from blensor_addon.jobs import cluster
seen = {}
class FakeLocalCluster:
    def __init__(self, **kw):
        seen.update({k: dask.config.get(k) for k in cluster.LOCAL_DASK})
    def close(self):
        pass
class FakeClient:
    def __init__(self, *a, **k):
        pass
    def register_worker_callbacks(self, fn):
        pass
    def close(self, timeout=None):
        pass
distributed.LocalCluster, distributed.Client = FakeLocalCluster, FakeClient
c = cluster.Cluster(2).start()
c.close()
print(json.dumps([seen, dask.config.get("distributed.worker.profile.enabled")]))
"""


@dask_cluster
def test_a_local_cluster_starts_without_dasks_profiler_and_with_slower_health_checks():
    """A local cluster's processes are made with the worker's statistical profiler off and
    the event loop's health check and system monitor at 1 s and 5 s (Dask's periodic work
    in every process); the settings are the cluster's only, not left in this process."""
    res = subprocess.run([sys.executable, "-c", LOCAL_SETTINGS], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    seen, after = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen == {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                    "distributed.admin.system-monitor.interval": "5s"}
    assert after is True


def test_a_staged_path_outside_the_staging_folder_is_refused_and_left_alone(bpy_mod, crossing, tmp_path):
    """The client renames or removes only files inside this run's staging folder: a worker
    whose answer names a staged file elsewhere (a mount that differs from the client's, or
    a bad worker) stops the run with one ClusterError line, the file named is neither moved
    into the output folder nor deleted, and the packets finished before stay."""
    from blensor_addon.jobs.cluster import ClusterError
    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    victim = tmp_path / "elsewhere" / "keep.npz"
    victim.parent.mkdir()

    class Tampering(_InProcessCluster):
        def _submit(self, fn, *args, **kw):
            fut = super()._submit(fn, *args, **kw)
            answer = self.answers[-1]
            if len(self.answers) == 3 and answer.staged:
                items = answer.staged["npz"]
                name, path, size = items[0]
                os.replace(path, victim)
                items[0] = (name, str(victim), size)
            return fut

    from blensor_addon.jobs import cluster as cluster_mod
    try:
        with pytest.raises(ClusterError, match="outside this run's staging folder"):
            scan_range(cam, [1, 2, 3, 4], tmp_path / "out", ("npz",), seed=4, cluster=Tampering(),
                       open_scene=lambda: cam)
    finally:
        state = cluster_mod._STATE.pop("scanner", None)
        cluster_mod._STATE.clear()
        if state is not None:
            state.close()
    assert victim.exists() and victim.stat().st_size > 1000
    kept = sorted(p.name for p in (tmp_path / "out").glob("scan*.npz"))
    assert kept and "keep.npz" not in kept and len(kept) < 4


@dask_cluster
def test_a_hand_started_worker_imports_the_tasks_modules_before_its_first_task(tmp_path):
    """A worker of a ``--scheduler`` cluster imports the modules the scan tasks carry when
    the client connects, before any task: unpickled later, a task's first import on the
    worker's event loop met the preload's import on the task thread, and the worker was
    lost to ``KeyError: 'blensor_addon.core.sensors'`` (seen on hand-started workers after
    other cluster tests); its SIGINT is left as its own terminal set it."""
    from blensor_addon.jobs import cluster as C
    with hand_started_cluster(tmp_path, [dask_worker]) as address:
        assert address is not None, "the worker did not start"
        c = C.Cluster(1, scheduler=address).start()
        try:
            names = ("blensor_addon.cli", "blensor_addon.core.sensors", "blensor_addon.io.formats")
            seen = c.client.run(lambda: [m for m in names if m in sys.modules])
        finally:
            c.close()
    assert list(seen.values()) == [list(names)]
