"""``examples/cluster/jobqueue.py``: a range scan on Dask workers started as
dask-jobqueue jobs, then ``blensor scan --scheduler``. Its local mode (dask-jobqueue's
``LocalCluster``: the jobs are processes of this machine) runs here and must give the bytes
of a one-process run; the SLURM and PBS job scripts it would submit are checked line by
line (no queue here)."""
from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest

from conftest import CROSSING, ROOT

pytest.importorskip("dask_jobqueue")

EXAMPLE = ROOT / "examples" / "cluster" / "jobqueue.py"
JOB = ["--cores", "16", "--memory", "16GB", "--walltime", "02:00:00", "--queue", "batch", "--account",
       "proj42", "--python", "/shared/venv/bin/python"]


def _hashes(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_local_jobs_give_the_bytes_of_one_process(tmp_path):
    scan = ["--frames", "1-4", "--formats", "npz,evd", "--set", "packets=frame", "--quiet"]
    res = subprocess.run([sys.executable, str(EXAMPLE), "--queue-system", "local", "--jobs", "2",
                          "--wait", "60", str(CROSSING), *scan, "--out", str(tmp_path / "jobs")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    # the scan ran against the jobs' scheduler on loopback
    assert re.search(r"waiting for 2 workers \(local\) at tcp://127\.0\.0\.1:\d+", res.stderr), res.stderr
    one = subprocess.run([sys.executable, "-m", "blensor_addon.cli", "scan", str(CROSSING), *scan,
                          "--workers", "1", "--out", str(tmp_path / "one")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert one.returncode == 0, one.stderr
    jobs, ref = _hashes(tmp_path / "jobs"), _hashes(tmp_path / "one")
    # four per-frame npz files written from the workers' encodings, the EVD container
    # written by the client from the full results, the trajectory and the manifest
    assert sorted(ref) == ["manifest.json", "scan.evd", "scan00001.npz", "scan00002.npz", "scan00003.npz",
                           "scan00004.npz", "trajectory.tum"]
    assert jobs == ref


def test_slurm_job_script_asks_for_the_cores_and_runs_one_single_threaded_worker():
    res = subprocess.run([sys.executable, str(EXAMPLE), "--queue-system", "slurm", "--print-job-script", *JOB,
                          "--job-extra=--exclusive"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for want in ("#SBATCH -p batch", "#SBATCH -A proj42", "#SBATCH -n 1", "#SBATCH --cpus-per-task=16",
                 "#SBATCH --mem=15G", "#SBATCH -t 02:00:00", "#SBATCH --exclusive"):  # 16 GB = 14.9 GiB
        assert want in lines, res.stdout
    worker = [ln for ln in lines if "dask_worker" in ln]
    assert len(worker) == 1, res.stdout
    argv = worker[0].split()
    assert argv[:3] == ["/shared/venv/bin/python", "-m", "distributed.cli.dask_worker"]
    assert re.fullmatch(r"tcp://.+:\d+", argv[3])
    assert argv[argv.index("--nthreads") + 1] == "1" and "--nworkers" not in argv and "--nanny" in argv
    assert argv[argv.index("--memory-limit") + 1] == "14.90GiB"


def test_pbs_job_script_selects_the_cores_and_memory():
    res = subprocess.run([sys.executable, str(EXAMPLE), "--queue-system", "pbs", "--print-job-script", *JOB],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for want in ("#PBS -q batch", "#PBS -A proj42", "#PBS -l select=1:ncpus=16:mem=15GB",
                 "#PBS -l walltime=02:00:00"):
        assert want in lines, res.stdout
    argv = next(ln for ln in lines if "dask_worker" in ln).split()
    assert argv[0] == "/shared/venv/bin/python" and argv[argv.index("--nthreads") + 1] == "1"


@pytest.mark.parametrize("option", ["--workers", "--scheduler"])
def test_the_cluster_options_of_the_scan_are_refused(option, tmp_path):
    res = subprocess.run([sys.executable, str(EXAMPLE), "--queue-system", "local", str(CROSSING), option, "2",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert f"error: {option} is this script's business" in res.stderr
    assert not (tmp_path / "out").exists()



def test_the_scan_exit_status_comes_back(tmp_path):
    # a frame outside the scene: blensor scan refuses it in one line (exit 2, nothing written)
    # and the script returns that status once its cluster is closed
    res = subprocess.run([sys.executable, str(EXAMPLE), "--queue-system", "local", "--jobs", "1",
                          "--wait", "60", str(CROSSING), "--frames", "100000",
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("blensor: error: ")]
    assert len(errors) == 1 and "frames" in errors[0], res.stderr
    assert not (tmp_path / "out").exists()
