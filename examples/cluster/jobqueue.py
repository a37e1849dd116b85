"""A range scan on a SLURM or PBS cluster: Dask workers as batch jobs (dask-jobqueue), then
``blensor scan BLEND --scheduler ADDRESS ...`` against them (docs/architecture.md, "Scale-out").

Usage (in the shared venv that has BlenSor with ``pip install 'blensor[dask]' dask-jobqueue==0.9.0``,
or this checkout's ``.venv`` made by ``BLENSOR_EXTRAS=test bash tools/setup.sh``)::

    python examples/cluster/jobqueue.py --queue-system slurm --jobs 8 --cores 16 --memory 16GB \\
        --walltime 02:00:00 --queue batch --account proj42 --python /shared/venv/bin/python \\
        /shared/scenes/drive.blend --time 0-60 --formats npz,evd --out /home/me/out/drive
    python examples/cluster/jobqueue.py --queue-system local --jobs 2 scenes/crossing.blend \\
        --frames 1-6 --out out/jobqueue                      # jobs as local processes (testing)
    python examples/cluster/jobqueue.py --queue-system slurm --print-job-script --cores 16 ...

What it does:

1. Starts a Dask scheduler in this process and a ``SLURMCluster`` or ``PBSCluster``
   (``--queue-system local``: dask-jobqueue's ``LocalCluster``, whose "jobs" are local
   processes, for testing the script without a queue). Each job runs ONE ``dask worker``
   process with ``--nthreads 1``: a worker scans one packet at a time and BlenSor's native
   kernel uses the job's cores itself. The job asks for ``--cores`` CPUs (SLURM
   ``--cpus-per-task``, PBS ``select=1:ncpus=``), ``--memory`` (the worker's memory limit
   too), ``--walltime``, ``--queue`` and ``--account``; ``--python`` is the shared venv's
   Python the jobs start the worker with; ``--interface`` the network interface the
   scheduler and workers talk on (e.g. ``ib0``); ``--job-extra`` adds directives.
2. Scales to ``--jobs`` jobs and waits (``--wait`` seconds, default 3600: queues can be slow)
   until every worker has registered.
3. Runs ``blensor scan BLEND --scheduler <the scheduler's address> ...`` with the rest of
   this command line passed through unchanged (``--time``/``--frames``, ``--formats``,
   ``--out``, ``--quiet``, ...; not ``--workers``/``--scheduler``), as a subprocess of this
   Python, and returns its exit status (0 done, 1 failed, 2 bad input, 130 interrupted).
   Ctrl-C or SIGTERM stop the scan as for one process (finished frames kept, the manifest
   says ``cancelled``, ``--resume`` completes it).
4. Closes the cluster (the jobs are cancelled: ``scancel``/``qdel``).

Requirements:

- **The scene on a shared filesystem.** Every worker opens the .blend at the client's
  absolute path (the path is made absolute here), with its linked libraries and textures at
  the same paths; a worker that cannot read it ends the run with one line naming
  ``--scheduler``.
- **The output only here.** Workers write nothing: they send each packet's result (the
  per-frame files already encoded, or the whole result for container formats such as EVD,
  rosbag2, pcap) back to the client, which writes every file in frame order. ``--out`` is a
  folder of the machine running this script (it need not be shared); the network carries
  the results (an npz of a 72,000-ray HDL-32E sweep is about 1 MB).
- **The same software everywhere.** The jobs run ``--python`` (default: this Python) with
  the same blensor and Blender (bpy) versions as the client: the client refuses a worker
  of another blensor or Blender version, or one without the native library when the client
  has it (the files record the versions and the backend).
- The login node (where this script runs) must be reachable by the compute nodes on the
  scheduler's port (``--interface`` picks the network).

Threads: a worker's native kernel uses the cores its process may run on (its CPU affinity:
the job's cores where the queue binds jobs to cores, else the whole node) divided by the
BlenSor workers on that node, so two jobs on one node each use half of the larger job's
cores, and a node the queue does not bind shares its cores with other users' jobs: for the
full speed ask for whole nodes (``--cores`` = the node's cores, ``--job-extra=--exclusive``
on SLURM).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

QUEUE_SYSTEMS = ("slurm", "pbs", "local")
NOT_PASSED = ("--workers", "--scheduler")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's options and the ``blensor scan`` arguments (everything else)."""
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False,
        usage="%(prog)s [--queue-system slurm|pbs|local] [--jobs N] [--cores K] [--memory M] "
              "[--walltime T] [--queue Q] [--account A] [--python PY] BLEND [blensor scan options]")
    ap.add_argument("--queue-system", choices=QUEUE_SYSTEMS, default="slurm")
    ap.add_argument("--jobs", type=int, default=2, help="batch jobs, one Dask worker each (default 2)")
    ap.add_argument("--cores", type=int, default=1, help="CPUs per job (BlenSor's kernel uses them)")
    ap.add_argument("--memory", default="4GB", help="memory per job, e.g. 16GB (default 4GB)")
    ap.add_argument("--walltime", default="01:00:00", help="wall time per job (default 01:00:00)")
    ap.add_argument("--queue", default=None, help="queue or partition (SLURM -p, PBS -q)")
    ap.add_argument("--account", default=None, help="account to charge (SLURM -A, PBS -A)")
    ap.add_argument("--python", default=sys.executable,
                    help="the shared venv's Python the jobs run the worker with (default: this one)")
    ap.add_argument("--interface", default=None, help="network interface of scheduler and workers, e.g. ib0")
    ap.add_argument("--job-extra", action="append", default=[], metavar="DIRECTIVE",
                    help="an extra job directive, e.g. --job-extra=--exclusive (repeatable)")
    ap.add_argument("--log-directory", default=None, help="folder for the jobs' logs")
    ap.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for the workers")
    ap.add_argument("--print-job-script", action="store_true",
                    help="print the job script one job would run and exit (nothing submitted)")
    ap.add_argument("blend", nargs="?", help="the .blend (same absolute path on every node)")
    args, rest = ap.parse_known_args(argv)
    if args.jobs < 1 or args.cores < 1:
        ap.error("--jobs and --cores must be >= 1")
    if not args.print_job_script and args.blend is None:
        ap.error("the .blend to scan is missing")
    taken = [a for a in rest if a.split("=", 1)[0] in NOT_PASSED]
    if taken:
        ap.error(f"{taken[0].split('=', 1)[0]} is this script's business (the cluster's scheduler)")
    return args, rest


def make_cluster(args):
    """The dask-jobqueue cluster of ``args.queue_system`` (no job submitted yet): one worker
    process per job with one thread, the job asking for ``args.cores`` CPUs."""
    import dask_jobqueue
    # cores=1: dask-jobqueue gives the worker --nthreads = cores / processes, and a BlenSor worker
    # runs one packet at a time; the job's CPUs are asked for separately (job_cpu, resource_spec)
    common = dict(cores=1, processes=1, memory=args.memory, python=args.python, nanny=True,
                  interface=args.interface, log_directory=args.log_directory,
                  scheduler_options={"dashboard_address": ":0"}, death_timeout=120)  # a free port
    if args.queue_system == "slurm":
        return dask_jobqueue.SLURMCluster(queue=args.queue, account=args.account, walltime=args.walltime,
                                          job_cpu=args.cores, job_extra_directives=args.job_extra, **common)
    if args.queue_system == "pbs":
        from dask.utils import parse_bytes
        from dask_jobqueue.pbs import pbs_format_bytes_ceil
        spec = f"select=1:ncpus={args.cores}:mem={pbs_format_bytes_ceil(parse_bytes(args.memory))}"
        return dask_jobqueue.PBSCluster(queue=args.queue, account=args.account, walltime=args.walltime,
                                        resource_spec=spec, job_extra_directives=args.job_extra, **common)
    # local "jobs": processes of this machine, the scheduler on loopback
    common["scheduler_options"] = {"dashboard_address": ":0", "host": "127.0.0.1"}
    common.pop("interface")
    from dask_jobqueue.local import LocalCluster  # not exported by the package
    return LocalCluster(**common)


def run_scan(python: str, blend: str, address: str, rest: list[str]) -> int:
    """``blensor scan BLEND --scheduler ADDRESS REST...`` as a subprocess; its exit status.
    SIGTERM is passed on to it; Ctrl-C reaches it through the terminal's process group."""
    cmd = [python, "-m", "blensor_addon.cli", "scan", str(Path(blend).resolve()), "--scheduler", address,
           *rest]
    proc = subprocess.Popen(cmd)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the scan got it too: let it stop and keep its frames
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    try:
        import dask_jobqueue  # noqa: F401
        from distributed import Client
    except ImportError as exc:
        print(f"jobqueue: {exc.name} is missing: pip install 'blensor[dask]' dask-jobqueue==0.9.0",
              file=sys.stderr)
        return 2
    cluster = make_cluster(args)
    try:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            workers = f"{args.jobs} worker{'s' * (args.jobs != 1)}"
            print(f"jobqueue: waiting for {workers} ({args.queue_system}) at {cluster.scheduler_address} "
                  f"(dashboard: {cluster.dashboard_link})", file=sys.stderr, flush=True)
            try:
                client.wait_for_workers(args.jobs, timeout=args.wait)
            except TimeoutError:
                print(f"jobqueue: {len(client.scheduler_info()['workers'])} of {args.jobs} workers after "
                      f"{args.wait:g} s (jobs still queued?); stopping", file=sys.stderr)
                return 1
            # the client of the scan runs the same Python as this script (the shared venv)
            return run_scan(sys.executable, args.blend, cluster.scheduler_address, rest)
    finally:
        cluster.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
