"""Outside tools succeed on the files the README's commands write, with no glue: the commands
run as the README spells them, the tools as their users start them, on those files as they are.

- KISS-ICP 1.3.0 (its ``kiss_icp_pipeline`` command, default configuration) on the quick
  start's KITTI folder (``velodyne/``) and on its rosbag2 bag travels the true trajectory the
  run wrote within 1 % translation drift (KITTI's relative translational error, below);
- ouster-cli (ouster-sdk 1.0.1) ``source PCAP info``, ``stats`` and ``sensor_info`` on the
  Ouster pcap of the README (``out/ouster_dual``), with the unit's metadata the run writes beside it;
- Open3D reads the quick start's PCD files and a README PLY, laspy the README's LAS files, each
  with the points of the run's npz;
- ``blensor preview`` on the quick start: the colour bar spans the data and a class pixel has
  its legend colour (tests/test_preview.py's checks, on the quick start's pictures).

KISS-ICP and ouster-cli live in the outside tools' environment (``.venv-decoders``,
tools/decoders.sh, which tools/test.sh runs: they need numpy 2, which bpy 4.2-5.0 cannot load);
their tests skip where it is absent, and fail in CI, where it is built. Open3D and laspy are test
readers of ``.venv`` (tools/setup.sh's test extra). Each rosbag2 bag the README makes, the quick
start's included, is read whole by rosbags 0.9.23 and the current rosbags in
tests/test_rosbag_readers.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_docs import COMMANDS, option
from test_docs import run as run_readme

from blensor_addon.core.timebase import parse_start_time

#: the outside tools' environment (tools/decoders.sh)
TOOLS = ROOT / ".venv-decoders" / "bin"
#: the README's quick start scan, as the README spells it (tests/test_docs.py checks it is the first)
QUICK_START = COMMANDS[0]
#: the translation drift KISS-ICP must stay within on the quick start, in % of the path
MAX_DRIFT_PCT = 1.0

_spec = importlib.util.spec_from_file_location("odometry_benchmark", ROOT / "benchmarks" / "odometry.py")
#: ``benchmarks/odometry.py`` (a script) as a module: its trajectory interpolation and KITTI drift
odometry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(odometry)


def tool(name: str) -> Path:
    """The outside tool ``name`` of ``.venv-decoders``; skips where tools/decoders.sh has not
    built it (fails in CI, where tools/test.sh builds it)."""
    exe = TOOLS / name
    if not exe.is_file():
        msg = f"{exe} is absent: bash tools/decoders.sh builds the outside tools' environment"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def tool_env() -> dict:
    """The environment an outside tool runs in: the user's, without this interpreter's
    module path and without a KISS-ICP configuration set in the environment."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "BLENSOR_NATIVE_LIB") and not k.lower().startswith("kiss_icp")}


def readme_workdir(folder: Path) -> Path:
    """``folder`` laid out as the repository for the README's commands: ``scenes/``,
    ``examples/`` and ``tests/data/`` linked, this environment as ``.venv`` (links made once)."""
    links = {"scenes": ROOT / "scenes", "examples": ROOT / "examples", "tests/data": ROOT / "tests" / "data",
             ".venv": Path(sys.prefix)}
    for name, target in links.items():
        if not (folder / name).is_symlink():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).symlink_to(target, target_is_directory=True)
    return folder


def run_readme_scan(out: str, folder: Path) -> Path:
    """Run the README's command that writes into ``out`` (its ``--out``) in a repository
    layout under ``folder``; returns its output folder."""
    command = next(c for c in COMMANDS if option(c.split(), "--out") == out)
    work = readme_workdir(folder)
    res = run_readme(command, work, timeout=900)
    assert res.returncode == 0, f"{command}\n{res.stderr[-3000:]}"
    return work / out


@pytest.fixture(scope="session")
def quick_start(readme_checkout: Path) -> Path:
    """The output folder of the README's quick start scan, run once a session as the README
    spells it (conftest's ``readme_checkout``)."""
    argv = QUICK_START.split()
    assert argv[:2] == [".venv/bin/blensor", "scan"], QUICK_START
    out = readme_checkout / option(argv, "--out")
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    return out


def quick_start_formats() -> list[str]:
    return option(QUICK_START.split(), "--formats").split(",")


# --------------------------------------------------------------------------- KISS-ICP


def true_poses(folder: Path, times) -> np.ndarray:
    """The sensor's true poses (K, 4, 4), float64, world frame, REP-103 axes, at the scene
    times ``times`` (s): interpolated (linear position, slerp rotation) in the run's own
    trajectory, every packet's start pose (``trajectory.tum``, ``poses.txt``) and end pose
    (continuous time) from ``manifest.json``."""
    ts, Ts = odometry.manifest_trajectory(folder)
    _, first = np.unique(np.round(ts, 9), return_index=True)  # a packet's end is the next's start
    traj = odometry.Trajectory(np.asarray(ts)[first], np.asarray(Ts)[first])
    times = np.asarray(times, dtype=np.float64)
    assert np.all((times > traj.t[0] - 1e-6) & (times < traj.t[-1] + 1e-6)), (times.min(), times.max())
    return np.array([traj.at(t) for t in np.clip(times, traj.t[0], traj.t[-1])])


def packet_starts(man: dict) -> np.ndarray:
    """The scene time (s) of each packet's start in the manifest ``man``: its ``time``, or for
    frame packets frame x packet time (as ``benchmarks/odometry.manifest_trajectory`` reads it)."""
    return np.array([e.get("time", e["frame"] * man["packet_time"]) for e in man["frames"]], dtype=np.float64)


def translation_drift(est: np.ndarray, gt: np.ndarray) -> dict:
    """KISS-ICP's poses ``est`` against the true ones ``gt`` (K, 4, 4), both made relative to
    their first. ``drift_pct``: KITTI's relative translational error (Geiger, Lenz, Urtasun,
    CVPR 2012; the odometry devkit's ``calcSequenceErrors``): the translation error of the
    relative pose over segments of ground-truth path starting every 10th pose, divided by the
    segment's length, averaged, in %; KITTI's 8 segment lengths of 100-800 m (sequences of
    km) scaled to 10-80 % of this run's path (``benchmarks/odometry.relative_drift``).
    ``end_pct``: the last pose's position error over the whole path, in %."""
    G = np.linalg.inv(gt[0]) @ gt
    E = np.linalg.inv(est[0]) @ est
    path = float(np.linalg.norm(np.diff(G[:, :3, 3], axis=0), axis=1).sum())
    drift, rot, segments = odometry.relative_drift(E, G, tuple(path * k / 10 for k in range(1, 9)), step=10)
    end = float(np.linalg.norm(E[-1, :3, 3] - G[-1, :3, 3]))
    return {"drift_pct": round(drift, 3), "rot_deg_per_100m": round(rot, 3), "segments": segments,
            "end_pct": round(100.0 * end / path, 3), "path_m": round(path, 1), "poses": len(G)}


def kiss_icp(source: Path, work: Path) -> tuple[np.ndarray, np.ndarray]:
    """Run ``kiss_icp_pipeline SOURCE`` in ``work`` (its results go to ``work/results``, its
    default); returns its poses (K, 4, 4) and the times its TUM file gives them."""
    res = subprocess.run([str(tool("kiss_icp_pipeline")), str(source)], cwd=work, capture_output=True,
                         text=True, env=tool_env(), timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    latest = work / "results" / "latest"
    poses = np.load(next(latest.glob("*_poses.npy")))
    times = np.loadtxt(next(latest.glob("*_poses_tum.txt")), ndmin=2)[:, 0]
    return poses, times


@pytest.mark.slow
def test_kiss_icp_on_the_quick_starts_kitti_folder_drifts_at_most_one_percent(quick_start, tmp_path):
    assert "kitti" in quick_start_formats()
    est, _ = kiss_icp(quick_start / "velodyne", tmp_path)
    man = json.loads((quick_start / "manifest.json").read_text())
    assert len(est) == len(man["frames"]) == len(list((quick_start / "velodyne").glob("*.bin")))
    # a KITTI .bin holds no point times: KISS-ICP registers each sweep as it is (no deskew), so its
    # pose is the sensor's over the sweep: at the sweep's middle in continuous time, at the frame's
    # pose where each frame is frozen (time_model = frame: every point taken from that one pose)
    frozen = man.get("time_model") == "frame"
    times = packet_starts(man) + (0.0 if frozen else 0.5 * man["packet_time"])
    res = translation_drift(est, true_poses(quick_start, times))
    assert res["segments"] > 0 and res["drift_pct"] <= MAX_DRIFT_PCT, res


@pytest.mark.slow
def test_kiss_icp_on_the_quick_starts_bag_drifts_at_most_one_percent(quick_start, tmp_path):
    assert "rosbag2" in quick_start_formats(), f"the quick start writes no bag: {QUICK_START}"
    est, stamps = kiss_icp(quick_start / "rosbag2", tmp_path)
    man = json.loads((quick_start / "manifest.json").read_text())
    assert len(est) == len(man["frames"])
    # KISS-ICP's TUM file stamps each pose with its cloud's log time in the bag (UNIX s: the run's
    # time base + scene time): in continuous time the sweep's end, the time KISS-ICP deskews each
    # sweep to (its last point); a frozen frame's start, the time of the one pose it was taken from
    times = stamps - parse_start_time(man["start_time"]) / 1e9
    starts = packet_starts(man)
    assert np.all((times >= starts - 1e-6) & (times <= starts + man["packet_time"] + 1e-6)), times - starts
    res = translation_drift(est, true_poses(quick_start, times))
    assert res["segments"] > 0 and res["drift_pct"] <= MAX_DRIFT_PCT, res


# --------------------------------------------------------------------------- ouster-cli


@pytest.fixture(scope="module")
def ouster_pcap(tmp_path_factory) -> Iterator[Path]:
    """The README's Ouster pcap (``out/ouster_dual``): the folder, its pcap and metadata JSON."""
    d = tmp_path_factory.mktemp("ouster")
    yield run_readme_scan("out/ouster_dual", d)
    shutil.rmtree(d, ignore_errors=True)  # not kept to the session's end


def ouster_cli(pcap: Path, *command: str) -> subprocess.CompletedProcess:
    res = subprocess.run([str(tool("ouster-cli")), "source", str(pcap), *command], cwd=pcap.parent,
                         capture_output=True, text=True, env=tool_env(), timeout=300)
    what = f"ouster-cli source {pcap.name} {' '.join(command)}"
    assert res.returncode == 0, f"{what}:\n{res.stdout}{res.stderr}"
    return res


def test_ouster_cli_reads_the_readmes_ouster_pcap_with_its_metadata(ouster_pcap):
    pcaps = sorted(ouster_pcap.glob("*.pcap"))
    assert len(pcaps) == 1
    pcap = pcaps[0]
    meta = json.loads(pcap.with_suffix(".json").read_text())  # the unit's metadata, beside the pcap
    man = json.loads((ouster_pcap / "manifest.json").read_text())
    fmt = meta["data_format"]
    columns, beams = fmt["columns_per_frame"], fmt["pixels_per_column"]
    packets = len(man["frames"]) * columns // fmt["columns_per_packet"]
    info = ouster_cli(pcap, "info").stdout
    assert re.search(rf"Packets read:\s+{packets}\b", info), info
    assert re.search(r"Capture start:\s+2020-01-01 00:00:00", info), info  # the run's time base
    stats = ouster_cli(pcap, "stats").stdout
    assert re.search(rf"Count: {len(man['frames'])}\b", stats), stats
    assert f"Sizes: {columns}x{beams}" in stats and "Incomplete Frames: 0," in stats, stats
    assert "0 missing lidar packets, 0 missing lidar columns" in stats, stats
    # the metadata ouster-cli found for the pcap is the unit's JSON the run wrote
    shown = json.loads(ouster_cli(pcap, "sensor_info").stdout.strip().splitlines()[-1])
    assert shown["sensor_info"]["prod_sn"] == meta["prod_sn"]
    assert shown["lidar_data_format"]["udp_profile_lidar"] == fmt["udp_profile_lidar"]
    assert shown["beam_intrinsics"]["beam_altitude_angles"] == meta["beam_altitude_angles"]


# --------------------------------------------------------------------------- Open3D, laspy


def npz_points(path: Path, kind: str = "noisy") -> np.ndarray:
    """The points (N, 3), float64, of a BlenSor npz: ``kind`` ``noisy`` or ``clean`` (the
    point formats' two folders)."""
    with np.load(path) as z:
        return z["xyz_noisy" if kind == "noisy" else "xyz"].astype(np.float64)


def written_points(folder: Path, suffixes: tuple[str, ...]) -> list[tuple[Path, Path, str]]:
    """(file, its npz, clean or noisy) of every point file in ``folder`` ending in ``suffixes``."""
    files = sorted(p for p in folder.rglob("*") if p.suffix in suffixes)
    assert files, f"no {suffixes} files in {folder}"
    assert {p.parent.name for p in files} == {"clean", "noisy"}, files
    return [(p, folder / p.with_suffix(".npz").name, p.parent.name) for p in files]


def assert_same_points(got: np.ndarray, want: np.ndarray, atol: float, what: object) -> None:
    """``got`` (N, 3) holds the points ``want`` (N, 3), each within ``atol`` (m) of its nearest
    in the other set, in any order (an organized cloud keeps the driver's pixel order)."""
    import open3d as o3d
    assert got.shape == want.shape, (what, got.shape, want.shape)
    a, b = (o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.ascontiguousarray(x))) for x in (got, want))
    far = max(np.max(a.compute_point_cloud_distance(b), initial=0.0),
              np.max(b.compute_point_cloud_distance(a), initial=0.0))
    assert far <= atol, (what, far)


@pytest.mark.slow
def test_open3d_reads_the_quick_starts_pcd_files_with_the_npz_points(quick_start):
    o3d = pytest.importorskip("open3d")
    assert "pcd" in quick_start_formats()
    scans = sorted(quick_start.glob("scan*.npz"))
    assert scans
    for i, npz in enumerate(scans):
        for kind in ("clean", "noisy"):
            pcd = o3d.io.read_point_cloud(str(quick_start / kind / npz.with_suffix(".pcd").name))
            got = np.asarray(pcd.points)
            got = got[~np.isnan(got).any(axis=1)]  # an organized cloud's cells without a return (PCL's NaN)
            want = npz_points(npz, kind)
            assert len(got) == len(want), (npz.name, kind, len(got), len(want))
            if i in (0, len(scans) // 2, len(scans) - 1):  # the points themselves, on three sweeps
                assert_same_points(got, want, 1e-6, (npz.name, kind))


@pytest.fixture(scope="module")
def readme_points(tmp_path_factory) -> Iterator[dict]:
    """The README's LAS and PLY scans: out/dual (las, npz), out/mems (npz, las), out/glass (npz, ply)."""
    work = tmp_path_factory.mktemp("readme_points")
    yield {out: run_readme_scan(out, work) for out in ("out/dual", "out/mems", "out/glass")}
    shutil.rmtree(work, ignore_errors=True)  # not kept to the session's end


@pytest.mark.slow
def test_open3d_reads_the_readmes_ply_with_the_npz_points(readme_points):
    o3d = pytest.importorskip("open3d")
    for ply, npz, kind in written_points(readme_points["out/glass"], (".ply",)):
        got = np.asarray(o3d.io.read_point_cloud(str(ply)).points)
        assert_same_points(got, npz_points(npz, kind), 1e-6, ply)


@pytest.mark.slow
@pytest.mark.parametrize("out", ["out/dual", "out/mems"])
def test_laspy_reads_the_readmes_las_with_the_npz_points(readme_points, out):
    laspy = pytest.importorskip("laspy")
    pytest.importorskip("open3d")
    for path, npz, kind in written_points(readme_points[out], (".las", ".laz")):
        las = laspy.read(path)
        got = np.column_stack([las.x, las.y, las.z])
        # each coordinate within half its scale (0.1 mm: the 3D distance within sqrt(3) times that), and
        # the npz's float32
        atol = np.sqrt(3.0) * float(np.max(las.header.scales)) / 2 + 1e-5
        assert_same_points(got, npz_points(npz, kind), atol, path)


# --------------------------------------------------------------------------- pictures


@pytest.fixture(scope="session")
def quick_start_pictures(quick_start, tmp_path_factory) -> Path:
    """``blensor preview OUT`` on the quick start, laid out as tests/test_preview.py reads a
    run with ``--formats preview``: a folder with the run's first npz files and ``preview/``."""
    pytest.importorskip("matplotlib")
    res = subprocess.run([str(Path(sys.prefix) / "bin" / "blensor"), "preview", str(quick_start)],
                         capture_output=True, text=True, env=tool_env(), timeout=900)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    pictures = quick_start / "pictures"
    scans = sorted(quick_start.glob("scan*.npz"))
    assert res.stdout.splitlines() == [f"blensor: {3 * len(scans) + 1} pictures -> {pictures}"]
    view = tmp_path_factory.mktemp("quick_start_pictures")
    (view / "preview").symlink_to(pictures, target_is_directory=True)
    for npz in scans[:2]:
        (view / npz.name).symlink_to(npz)
    return view


@pytest.mark.slow
@pytest.mark.parametrize("check", [
    "test_range_colour_bar_spans_the_data_range_and_its_ends_are_the_extreme_pixels",
    "test_intensity_picture_bar_is_zero_to_one",
    "test_a_class_pixel_of_the_birds_eye_view_has_its_legend_colour"])
def test_the_quick_starts_pictures_pass_the_preview_checks(quick_start_pictures, check):
    import test_preview
    getattr(test_preview, check)(quick_start_pictures)
