"""LiDAR odometry on a simulated drive: KISS-ICP on BlenSor sweeps against the true
trajectory, in continuous time and with the scene frozen per frame.

    .venv/bin/python benchmarks/odometry.py [--time 0-60] [--modes continuous,frame]
                                            [--points noisy|clean] [--work out/odometry]
                                            [--preset hdl64e_s2]

Steps (each skipped when its result is already there):

1. ``scenes/drive.blend`` is built by ``scenes/build_drive.py`` (with ``.venv``'s pip
   ``bpy``) if missing.
2. One range scan per time model (:func:`scan_command`, the only place that spells the
   ``blensor scan`` command line): the camera ``Lidar`` with the HDL-64E S2 preset
   (``--preset``; the camera's own HDL-32E with ``--preset camera``), 10 Hz, one npz per
   full revolution (``packets=sweep``), points in the sensor frame in REP-103 axes
   (``--axes ros``), into ``WORK/scan_<mode>/``; a folder whose ``manifest.json`` says
   ``complete`` for the same time model and interval is reused, an unfinished one resumed.
3. The ground truth: the sensor's pose sampled from the .blend at 100 Hz
   (``scene.frame_set(frame, subframe)``, the camera's world matrix in REP-103 axes),
   ``WORK/gt_100hz.tum``; checked against the poses in the scan manifests.
4. KISS-ICP (pip ``kiss-icp==1.3.0``, in the outside tools' environment ``.venv-decoders``,
   the one tests/test_outside_tools.py uses, which tools/decoders.sh builds from
   tools/decoders.txt, run when it lacks KISS-ICP; ``BLENSOR_ODOMETRY_VENV`` names another
   environment) runs on each scan through
   its Python pipeline (``kiss_icp.pipeline.OdometryPipeline``) with its default
   configuration: ``deskew=True``, voxel size = max_range / 100; only the ranges are
   set, ``max_range`` = the sensor's (100 m) and ``min_range`` = 3 m, the ego-vehicle
   mask (the car's bonnet and tailgate are within 2.5 m of the sensor; the ground is
   3.7 m away at the lowest laser). Its poses go to ``WORK/kiss_icp/<mode>/``.
5. The table (printed) and ``WORK/results_P.json`` for preset P (``scan_P_<mode>/``;
   ``--preset camera``: ``WORK/results.json``, ``scan_<mode>/``).
   After changing the scene, delete ``WORK``: scans are reused by their manifests.

KISS-ICP's time convention (kiss-icp 1.3.0, ``Preprocessor::Preprocess``): each scan's
per-point timestamps are normalised to [0, 1] by the scan's own min and max, and every
point p is moved by ``exp((s - 1) log(delta)) p``, delta being the last estimated motion
between consecutive scans (constant velocity over one scan). A point with s = 1 stays:
the scan is deskewed into the sensor frame at its LAST point's time, and the pose it
estimates is the sensor pose at that time, t_end = max(timestamp) of the sweep (about
the sweep start + 0.1 s). The ground truth is therefore taken at t_end of each sweep
(interpolated in the 100 Hz samples), not at the sweep start the manifest gives; the
first scan's pose is the origin.

Metrics: ATE = RMSE of the position after the best rigid (SE(3), no scale, Umeyama)
alignment of the estimate to the ground truth (m). Drift = KITTI's relative
translational error: for start sweeps every 1 s and segment lengths of 50, 100, ...,
400 m of ground-truth path (KITTI uses 100-800 m on drives of several km; these are
scaled to a 0.55 km drive), the translation error of the relative pose over the segment
divided by its length, averaged (%); rotational drift likewise (deg / 100 m); the same
in the ground plane (poses projected to x, y, yaw: ``drift_xy_pct``, ``ate_xy_rmse_m``),
which keeps KISS-ICP's tilt drift with sparse lasers apart. KISS-ICP's
own metrics (its ``sequence_error`` with 100-800 m segments, and its ATE) are kept in the
JSON as a cross-check.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLENSOR_PY = ROOT / ".venv" / "bin" / "python"
ODOMETRY_VENV = Path(os.environ.get("BLENSOR_ODOMETRY_VENV", ROOT / ".venv-decoders"))
KISS_ICP = "kiss-icp==1.3.0"  # pinned in tools/decoders.txt
MODES = ("continuous", "frame")
CAMERA = "Lidar"
EGO_MASK_M = 3.0            # KISS-ICP min_range: the ego car (bonnet, tailgate) is within 2.5 m
SEGMENTS_M = (50, 100, 150, 200, 250, 300, 350, 400)
GT_RATE = 100.0             # Hz of the ground-truth samples
#: REP-103 sensor axes from BlenSor's (x = -z, y = -x, z = y)
ROS_FROM_BLENSOR = ((0.0, 0.0, -1.0), (-1.0, 0.0, 0.0), (0.0, 1.0, 0.0))


# --------------------------------------------------------------------------- scans


def scan_command(blend: Path, out: Path, mode: str, t0: float, t1: float, resume: bool = False,
                 preset: str | None = None) -> list[str]:
    """The ``blensor scan`` command line of one run: sweeps of ``[t0, t1]`` s in time
    model ``mode`` (``continuous`` or ``frame``), npz, REP-103 axes; ``preset``: another
    sensor preset than the camera's."""
    return [str(BLENSOR_PY), "-m", "blensor_addon.cli", "scan", str(blend), "--camera", CAMERA,
            "--time", f"{t0:g}-{t1:g}", "--formats", "npz", "--axes", "ros",
            "--set", f"time_model={mode}", "--set", "packets=sweep", "--out", str(out),
            *(["--set", f"preset={preset}"] if preset else []), "--resume" if resume else "--overwrite"]


def legacy_scan_command(blend: Path, out: Path, t0: float, t1: float, fps: float,
                        preset: str | None = None) -> list[str]:
    """A CLI without ``--time``/``time_model`` (per-frame sectors, the scene frozen per
    frame): the frames covering ``[t0, t1)``; the loader joins the sectors into sweeps."""
    f0, f1 = int(round(t0 * fps)), int(round(t1 * fps)) - 1
    return [str(BLENSOR_PY), "-m", "blensor_addon.cli", "scan", str(blend), "--camera", CAMERA,
            "--frames", f"{f0}-{f1}", "--formats", "npz", "--axes", "ros", "--out", str(out),
            *(["--set", f"preset={preset}"] if preset else []), "--overwrite"]


def cli_has_time_model() -> bool:
    """Whether ``blensor scan`` takes ``--time`` (and so ``time_model``/``packets``)."""
    res = subprocess.run([str(BLENSOR_PY), "-m", "blensor_addon.cli", "scan", "--help"], capture_output=True,
                         text=True, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"odometry: 'blensor scan --help' failed:\n{res.stderr.strip()}")
    return "--time" in res.stdout


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def same_run(man: dict, mode: str, t0: float, t1: float, legacy: bool, preset: str | None = None) -> bool:
    """Whether the manifest ``man`` is of the run asked for (time model, interval, axes,
    sensor preset)."""
    if man.get("time_model", "frame") != mode or man.get("axes") != "ros":
        return False
    if preset and man.get("sensor", {}).get("preset") != preset:
        return False
    if legacy:
        return man.get("frames_requested") == [int(round(t0 * 24)), int(round(t1 * 24)) - 1]
    return man.get("packets") == "sweep" and man.get("frames_requested") == {"time": [t0, t1]}


def ensure_scan(blend: Path, out: Path, mode: str, t0: float, t1: float, legacy: bool,
                preset: str | None = None) -> dict:
    """Run the scan unless ``out`` holds a complete one of the same kind; returns
    {"status": "reused"|"scanned"|"unavailable", "scan_s": seconds}."""
    if legacy and mode != "frame":
        return {"status": "unavailable", "why": "this blensor CLI has no time_model=continuous / --time"}
    man = read_manifest(out)
    if man is not None and same_run(man, mode, t0, t1, legacy, preset) and man.get("status") == "complete":
        return {"status": "reused"}
    resume = man is not None and same_run(man, mode, t0, t1, legacy, preset) and not legacy
    cmd = (legacy_scan_command(blend, out, t0, t1, 24.0, preset) if legacy
           else scan_command(blend, out, mode, t0, t1, resume, preset))
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT)
    if res.returncode == 2 and resume:  # the earlier run cannot be resumed: start again
        cmd = scan_command(blend, out, mode, t0, t1, False, preset)
        res = subprocess.run(cmd, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"odometry: the scan failed (exit {res.returncode}): {' '.join(cmd)}")
    return {"status": "scanned", "scan_s": round(time.perf_counter() - start, 1)}


def ensure_scene(blend: Path) -> None:
    if blend.is_file():
        return
    cmd = [str(BLENSOR_PY), str(ROOT / "scenes" / "build_drive.py"), str(blend)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def ensure_odometry_python() -> Path:
    """The python of the environment with KISS-ICP, :data:`ODOMETRY_VENV`: the outside tools'
    (``.venv-decoders``), built or brought up to tools/decoders.txt by tools/decoders.sh when
    it lacks KISS-ICP; a ``BLENSOR_ODOMETRY_VENV`` of the user's must have it."""
    py = ODOMETRY_VENV / "bin" / "python"
    check = [str(py), "-c", "import kiss_icp.pipeline"]
    if py.is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    if "BLENSOR_ODOMETRY_VENV" in os.environ:
        raise SystemExit(f"odometry: {py} cannot import kiss_icp (BLENSOR_ODOMETRY_VENV): "
                         f"pip install {KISS_ICP}")
    print(f"odometry: bash tools/decoders.sh ({KISS_ICP} into {ODOMETRY_VENV})", flush=True)
    subprocess.run(["bash", str(ROOT / "tools" / "decoders.sh")], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(check, check=True)
    return py


# --------------------------------------------------------------------------- ground truth (bpy)


def sample_ground_truth(blend: Path, t0: float, t1: float, rate: float, out: Path) -> None:
    """Write the sensor's world pose (REP-103 axes) every 1 / rate s over [t0, t1] as TUM
    (``t tx ty tz qx qy qz qw``). Runs in ``.venv`` (pip ``bpy``)."""
    import bpy
    import numpy as np
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    scene = bpy.context.scene
    fps = scene.render.fps / scene.render.fps_base
    cam = bpy.data.objects[CAMERA]
    M = np.array(ROS_FROM_BLENSOR)
    lines = []
    for i in range(int(np.floor((t1 - t0) * rate + 1e-9)) + 1):
        t = t0 + i / rate
        f = t * fps
        fi = int(np.floor(f + 1e-9))
        scene.frame_set(fi, subframe=max(0.0, f - fi))
        T = np.array(cam.evaluated_get(bpy.context.evaluated_depsgraph_get()).matrix_world, dtype=np.float64)
        R = T[:3, :3] / np.linalg.norm(T[:3, :3], axis=0)  # without the camera's scale
        q = quat_from_matrix(R @ M.T)
        lines.append(f"{t:.6f} {T[0, 3]:.6f} {T[1, 3]:.6f} {T[2, 3]:.6f} {q[0]:.9f} {q[1]:.9f} {q[2]:.9f} {q[3]:.9f}")
    out.write_text("\n".join(lines) + "\n")


def ensure_ground_truth(blend: Path, work: Path, t0: float, t1: float) -> Path:
    out = work / "gt_100hz.tum"
    meta = work / "gt_100hz.json"
    want = {"blend": str(blend), "mtime": blend.stat().st_mtime, "t": [t0, t1], "rate": GT_RATE}
    try:
        if json.loads(meta.read_text()) == want and out.is_file():
            return out
    except (OSError, ValueError):
        pass
    lo, hi = max(0.0, t0 - 0.2), t1 + 0.2
    subprocess.run([str(BLENSOR_PY), __file__, "--sample-gt", str(blend), f"{lo:g}", f"{hi:g}", str(out)],
                   cwd=ROOT, check=True)
    meta.write_text(json.dumps(want))
    return out


# --------------------------------------------------------------------------- poses (numpy)


def quat_from_matrix(R):
    """(x, y, z, w) unit quaternion of a rotation matrix, w >= 0."""
    import numpy as np
    R = np.asarray(R, dtype=np.float64)
    t = np.trace(R)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = np.array([(R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s])
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = np.zeros(4)
        q[i] = 0.25 * s
        q[j] = (R[j, i] + R[i, j]) / s
        q[k] = (R[k, i] + R[i, k]) / s
        q[3] = (R[k, j] - R[j, k]) / s
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def matrix_from_quat(q):
    import numpy as np
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class Trajectory:
    """Poses (4, 4) at increasing times; :meth:`at` interpolates (linear position,
    slerp rotation)."""

    def __init__(self, times, poses):
        import numpy as np
        order = np.argsort(times)
        self.t = np.asarray(times, dtype=np.float64)[order]
        self.T = np.asarray(poses, dtype=np.float64)[order]
        self.q = np.array([quat_from_matrix(T[:3, :3]) for T in self.T])

    @classmethod
    def from_tum(cls, path):
        import numpy as np
        d = np.loadtxt(path, ndmin=2)
        T = np.tile(np.eye(4), (len(d), 1, 1))
        T[:, :3, 3] = d[:, 1:4]
        for i, q in enumerate(d[:, 4:8]):
            T[i, :3, :3] = matrix_from_quat(q)
        return cls(d[:, 0], T)

    def covers(self, t) -> bool:
        return self.t[0] - 1e-9 <= t <= self.t[-1] + 1e-9

    def at(self, t):
        import numpy as np
        i = int(np.clip(np.searchsorted(self.t, t) - 1, 0, len(self.t) - 2))
        u = (t - self.t[i]) / (self.t[i + 1] - self.t[i])
        q0, q1 = self.q[i], self.q[i + 1]
        if np.dot(q0, q1) < 0:
            q1 = -q1
        ang = np.arccos(np.clip(np.dot(q0, q1), -1.0, 1.0))
        q = q0 + u * (q1 - q0) if ang < 1e-9 else (np.sin((1 - u) * ang) * q0 + np.sin(u * ang) * q1) / np.sin(ang)
        out = np.eye(4)
        out[:3, :3] = matrix_from_quat(q)
        out[:3, 3] = (1 - u) * self.T[i, :3, 3] + u * self.T[i + 1, :3, 3]
        return out


def umeyama_rigid(src, dst):
    """(R, t) minimising sum |R src_i + t - dst_i|^2 (no scale)."""
    import numpy as np
    ms, md = src.mean(0), dst.mean(0)
    U, _, Vt = np.linalg.svd((dst - md).T @ (src - ms))
    S = np.eye(3)
    S[2, 2] = np.sign(np.linalg.det(U @ Vt))
    R = U @ S @ Vt
    return R, md - R @ ms


def ate_rmse(est, gt) -> float:
    import numpy as np
    R, t = umeyama_rigid(est[:, :3, 3], gt[:, :3, 3])
    return float(np.sqrt((((est[:, :3, 3] @ R.T + t) - gt[:, :3, 3]) ** 2).sum(1).mean()))


def planar(T):
    """Poses (K, 4, 4) projected onto the horizontal plane: (x, y, yaw) as 4x4 matrices."""
    import numpy as np
    yaw = np.arctan2(T[:, 1, 0], T[:, 0, 0])
    out = np.tile(np.eye(4), (len(T), 1, 1))
    out[:, 0, 0] = out[:, 1, 1] = np.cos(yaw)
    out[:, 1, 0] = np.sin(yaw)
    out[:, 0, 1] = -np.sin(yaw)
    out[:, :2, 3] = T[:, :2, 3]
    return out


def relative_drift(est, gt, lengths=SEGMENTS_M, step: int = 10) -> tuple[float, float, int]:
    """KITTI-style drift: mean translational error (%) and rotational error (deg / 100 m)
    over segments of ``lengths`` m of ground-truth path, starting every ``step`` poses;
    returns (t %, r deg/100m, number of segments)."""
    import numpy as np
    dist = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(gt[:, :3, 3], axis=0), axis=1))])
    t_err, r_err = [], []
    for first in range(0, len(gt), step):
        for L in lengths:
            last = int(np.searchsorted(dist, dist[first] + L, side="right"))
            if last >= len(gt):
                continue
            d_gt = np.linalg.inv(gt[first]) @ gt[last]
            d_est = np.linalg.inv(est[first]) @ est[last]
            E = np.linalg.inv(d_est) @ d_gt
            t_err.append(np.linalg.norm(E[:3, 3]) / L)
            r_err.append(np.arccos(np.clip((np.trace(E[:3, :3]) - 1) / 2, -1, 1)) / L)
    if not t_err:
        return float("nan"), float("nan"), 0
    return 100.0 * float(np.mean(t_err)), float(np.degrees(np.mean(r_err)) * 100.0), len(t_err)


# --------------------------------------------------------------------------- KISS-ICP (its venv)


class BlensorSweeps:
    """A KISS-ICP dataset over a BlenSor range-scan folder: item k = (points (N, 3) float64
    in the sensor frame, REP-103 axes; timestamps (N,) float64 normalised to [0, 1] over
    the sweep). One npz per sweep (``packets=sweep``), or per-frame sectors (an older
    CLI) joined into the sweeps ``[k P, (k + 1) P)`` they belong to. ``pose_times[k]`` is
    the time KISS-ICP's pose of item k refers to (the sweep's last point)."""

    def __init__(self, folder: Path, key: str = "xyz_noisy"):
        import numpy as np
        self.data_dir = str(folder)
        self.sequence_id = folder.name
        self.key = key
        man = json.loads((folder / "manifest.json").read_text())
        if man.get("frame_of_reference", "sensor") != "sensor":
            raise SystemExit(f"{folder}: points must be in the sensor frame")
        self.axes = man.get("axes", "blensor")
        self.period = 1.0 / float(man["sensor"]["rotation_speed"])
        entries = sorted(man["frames"], key=lambda e: e["frame"])
        self.packets = man.get("packets", "frame")
        npz = [f for f in entries[0]["files"] if f.endswith(".npz")][0]
        with np.load(folder / npz) as z:
            self.frame_time = float(z["frame_time"])
        if self.packets == "sweep":
            self.items = [([folder / f for f in e["files"] if f.endswith(".npz")], None) for e in entries]
        else:  # sectors of frames f: [f ft, (f + 1) ft); complete sweeps only
            ft, P = self.frame_time, self.period
            spans = [(e["frame"] * ft, (e["frame"] + 1) * ft,
                      [folder / f for f in e["files"] if f.endswith(".npz")][0]) for e in entries]
            k0 = int(np.ceil(spans[0][0] / P - 1e-9))
            k1 = int(np.floor(spans[-1][1] / P + 1e-9))
            self.items = [([p for a, b, p in spans if a < (k + 1) * P - 1e-9 and b > k * P + 1e-9],
                           (k * P, (k + 1) * P)) for k in range(k0, k1)]
        self.pose_times = np.full(len(self.items), np.nan)
        self.points = np.zeros(len(self.items), dtype=np.int64)
        self._cache = {}

    def _load(self, path):
        import numpy as np
        if path not in self._cache:
            if len(self._cache) > 4:
                self._cache.pop(next(iter(self._cache)))
            with np.load(path) as z:
                xyz = z[self.key].astype(np.float64)
                ts = z["timestamp"].astype(np.float64)
                axes = str(z["axes"]) if "axes" in z.files else self.axes
            if axes == "blensor":
                xyz = xyz @ np.array(ROS_FROM_BLENSOR).T
            self._cache[path] = (xyz, ts)
        return self._cache[path]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        import numpy as np
        files, window = self.items[idx]
        parts = [self._load(p) for p in files]
        xyz = np.concatenate([p[0] for p in parts])
        ts = np.concatenate([p[1] for p in parts])
        if window is not None:
            keep = (ts >= window[0] - 1e-9) & (ts < window[1] - 1e-9)
            xyz, ts = xyz[keep], ts[keep]
        lo, hi = float(ts.min()), float(ts.max())
        self.pose_times[idx] = hi
        self.points[idx] = len(ts)
        stamps = (ts - lo) / (hi - lo) if hi > lo else np.array([])  # no spread: no deskew
        return xyz, stamps

    def get_frames_timestamps(self):
        return self.pose_times


def manifest_trajectory(folder: Path):
    """The scan's own poses (sweep start, and end where given) in REP-103 axes."""
    import numpy as np
    man = json.loads((folder / "manifest.json").read_text())
    pt = float(man.get("packet_time", 0.0)) or None
    ts, Ts = [], []
    M = np.array(ROS_FROM_BLENSOR)
    for e in man["frames"]:
        for key, dt in (("pose", 0.0), ("pose_end", 1.0)):
            if key in e and ("time" in e or pt):
                T = np.reshape(e[key], (4, 4)).astype(np.float64)
                if man.get("axes", "blensor") == "blensor":
                    T[:3, :3] = T[:3, :3] @ M.T
                ts.append(e.get("time", e["frame"] * (pt or 0.0)) + dt * (pt or 0.0))
                Ts.append(T)
    return ts, Ts


def evaluate(folder: Path, gt_tum: Path, out_dir: Path, key: str) -> dict:
    """Run KISS-ICP on the sweeps of ``folder``; compare with the ground truth."""
    import numpy as np
    from kiss_icp.kiss_icp import KissICP
    from kiss_icp.metrics import absolute_trajectory_error, sequence_error
    from kiss_icp.pipeline import OdometryPipeline
    man = json.loads((folder / "manifest.json").read_text())
    data = BlensorSweeps(folder, key)
    pipe = OdometryPipeline(dataset=data)  # KISS-ICP's default configuration ...
    pipe.config.data.max_range = float(man["sensor"]["max_range"])  # ... with the sensor's range
    pipe.config.data.min_range = EGO_MASK_M  # and the ego-vehicle mask
    pipe.config.mapping.voxel_size = pipe.config.data.max_range / 100.0  # its default rule
    pipe.config.out_dir = str(out_dir)
    pipe.odometry = KissICP(config=pipe.config)
    pipe.run()
    est = np.array(pipe.poses)
    gt_all = Trajectory.from_tum(gt_tum)
    ok = np.array([gt_all.covers(t) for t in data.pose_times])
    G = np.array([gt_all.at(t) for t in data.pose_times[ok]])
    G = np.linalg.inv(G[0]) @ G
    E = np.linalg.inv(est[ok][0]) @ est[ok]
    drift, rot, nseg = relative_drift(E, G)
    drift_xy, rot_xy, _ = relative_drift(planar(E), planar(G))  # bird's eye: x, y, yaw only
    kiss_t, kiss_r = sequence_error(G, E) if nseg else (float("nan"), float("nan"))
    _, kiss_ate = absolute_trajectory_error(G, E)
    # the scan's own poses against the sampled ground truth (a check of both)
    ts, Ts = manifest_trajectory(folder)
    gap = max((float(np.linalg.norm(gt_all.at(t)[:3, 3] - T[:3, 3])) for t, T in zip(ts, Ts) if gt_all.covers(t)),
              default=float("nan"))
    final = E[-1] @ np.linalg.inv(G[-1])
    return {
        "sweeps": int(len(data)), "evaluated": int(ok.sum()), "packets": data.packets,
        "time_model": man.get("time_model", "frame"), "points": key,
        "points_per_sweep": int(np.mean(data.points)),
        "path_m": round(float(np.linalg.norm(np.diff(G[:, :3, 3], axis=0), axis=1).sum()), 1),
        "ate_rmse_m": round(ate_rmse(E, G), 3),
        "drift_pct": round(drift, 3), "rot_drift_deg_per_100m": round(rot, 4), "segments": nseg,
        "drift_xy_pct": round(drift_xy, 3), "yaw_drift_deg_per_100m": round(rot_xy, 4),
        "ate_xy_rmse_m": round(ate_rmse(planar(E), planar(G)), 3),
        "final_position_error_m": round(float(np.linalg.norm(final[:3, 3])), 3),
        "kiss_sequence_error_pct": round(float(kiss_t), 3), "kiss_ate_m": round(float(kiss_ate), 3),
        "kiss_icp_s": round(float(np.sum(pipe.times)) * 1e-9, 2),
        "pose_time": "last point of each sweep (KISS-ICP deskews to the scan's end)",
        "manifest_pose_vs_gt_max_m": round(gap, 4),
    }


# --------------------------------------------------------------------------- main


def run_benchmark(args) -> dict:
    t0, t1 = (float(v) for v in args.time.split("-", 1))
    blend = Path(args.blend).resolve()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not BLENSOR_PY.is_file():
        raise SystemExit(f"odometry: {BLENSOR_PY} missing: run tools/setup.sh first")
    ensure_scene(blend)
    legacy = not cli_has_time_model()
    if legacy:
        print("odometry: this blensor CLI has no --time / time_model: frame mode from per-frame sectors only")
    tag = f"{args.preset}_" if args.preset else ""
    scans = {m: ensure_scan(blend, work / f"scan_{tag}{m}", m, t0, t1, legacy, args.preset) for m in args.modes}
    gt = ensure_ground_truth(blend, work, t0, t1)
    py = ensure_odometry_python()
    rows = {}
    for mode, scan in scans.items():
        if scan["status"] == "unavailable":
            rows[mode] = scan
            continue
        res_json = work / f"kiss_{tag}{mode}.json"
        subprocess.run([str(py), __file__, "--evaluate", str(work / f"scan_{tag}{mode}"), str(gt),
                        str(work / "kiss_icp" / f"{tag}{mode}"), args.points, str(res_json)], cwd=ROOT, check=True)
        rows[mode] = {**json.loads(res_json.read_text()), **scan}
    doc = {"blend": str(blend), "time_s": [t0, t1], "preset": args.preset or "the camera's",
           "kiss_icp": KISS_ICP, "points": args.points, "min_range_m": EGO_MASK_M,
           "segments_m": list(SEGMENTS_M), "modes": rows}
    out = work / f"results{'_' + args.preset if args.preset else ''}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(rows))
    print(f"-> {out}")
    return doc


def fmt(v, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: dict) -> str:
    head = ("| mode | sweeps | path m | ATE RMSE m | drift % | rot. drift deg/100 m | ATE xy m | drift xy % | "
            "KISS-ICP s |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in rows.items():
        if "ate_rmse_m" not in r:
            lines.append(f"| {mode} | - | - | - | - | - | - | - | - ({r.get('why', r.get('status'))}) |")
            continue
        lines.append(f"| {mode} | {r['sweeps']} | {r['path_m']:.1f} | {r['ate_rmse_m']:.3f} | {fmt(r['drift_pct'], 2)} | "
                     f"{fmt(r['rot_drift_deg_per_100m'], 3)} | {r['ate_xy_rmse_m']:.3f} | {fmt(r['drift_xy_pct'], 2)} | "
                     f"{r['kiss_icp_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sample-gt"]:  # inside .venv (bpy)
        blend, lo, hi, out = argv[1:5]
        sample_ground_truth(Path(blend), float(lo), float(hi), GT_RATE, Path(out))
        return 0
    if argv[:1] == ["--evaluate"]:  # inside the KISS-ICP venv
        folder, gt, out_dir, points, res = argv[1:6]
        key = {"noisy": "xyz_noisy", "clean": "xyz"}[points]
        res_doc = evaluate(Path(folder), Path(gt), Path(out_dir), key)
        res_doc = {k: (None if isinstance(v, float) and v != v else v) for k, v in res_doc.items()}  # NaN: null
        Path(res).write_text(json.dumps(res_doc, indent=2) + "\n")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time", default="0-60", help="scan interval T0-T1 in seconds (default 0-60)")
    ap.add_argument("--modes", default=",".join(MODES), help="time models to run (default continuous,frame)")
    ap.add_argument("--points", default="noisy", choices=("noisy", "clean"), help="noisy (default) or clean points")
    ap.add_argument("--blend", default=str(ROOT / "scenes" / "drive.blend"), help="the scene (built when missing)")
    ap.add_argument("--work", default=str(ROOT / "out" / "odometry"), help="work folder (default out/odometry)")
    ap.add_argument("--preset", default="hdl64e_s2", help="sensor preset scanned (default hdl64e_s2; 'camera': the "
                    "camera's own HDL-32E) (folders scan_<preset>_<mode>, results_<preset>.json)")
    args = ap.parse_args(argv)
    if args.preset == "camera":
        args.preset = None
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in MODES for m in args.modes):
        ap.error(f"--modes: a subset of {','.join(MODES)}")
    run_benchmark(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
