"""Range scans on a Dask cluster: ``blensor scan --workers N`` (a local cluster of
N worker processes) or ``--scheduler ADDRESS`` (an existing ``dask.distributed`` cluster).

The original BlenSor split frame ranges over hosts by hand (seed 000, section 5.2); here the
packets of one run are tasks of a Dask cluster, and the files are the bytes a one-process
run writes, whatever the number of workers and the order in which they finish:

- **Workers scan and encode.** Each worker process opens the client's .blend once (as
  soon as the cluster is up, :meth:`Cluster.preload`, while the client validates; else in
  its first task: the same file at the same absolute path, the same ``--sensor`` configs
  applied, the same settings) and keeps the scene, its :class:`Scanner` and the per-frame
  writers for the run. A task scans one packet and encodes its per-frame files
  (npz, pcd, las, ...: writers that are not ``multi_frame``) with their size and sha256,
  so the client does no encoding work for them. Scans do not depend on the packets
  scanned before: noise is seeded per packet and object ids derive from the file
  (:class:`~blensor_addon.scene.objects.ObjectTable`; a scene that creates objects while
  it plays is refused, their ids would depend on the frames a process saw). Every answer
  is checked for the client's BlenSor and Blender versions and ray-casting backend.
- **The client writes, in order.** :class:`RemoteScanner` stands in for the scanner of
  the range job's :class:`~blensor_addon.jobs.pipeline.Pipeline`: it keeps a window of
  packets submitted ahead (two per worker), hands their results to the pipeline in plan
  order, and the pipeline's one writer thread commits every packet's files, the
  multi-frame files (EVD, KITTI's poses, rosbag2, pcap: encoded on the client from the
  full result the worker sends back), the trajectory and the manifest, exactly as in one
  process. A worker that sees the output folder (a local cluster's always do; another
  host's do where the folder is shared at the same path: the client writes a probe file
  with the run's key into a staging folder there, :data:`STAGING_PREFIX`) writes each
  packet's per-frame files into that staging folder under temporary names and sends the
  client only their names, sizes and sha256; the client checks them and renames them into
  place with the packet's other files (:class:`~blensor_addon.io.atomic.Staged`, the same
  staged-then-renamed group as one process writes), instead of receiving their bytes
  (3.2 MB of npz a sweep of the drive scene). Workers that do not see it send the bytes,
  so the output folder needs no shared file system; only the .blend (with its linked
  libraries and textures) must be readable at the same path on every worker.
- **Consecutive packets per worker.** Packets go to the workers in blocks of
  :data:`BLOCK` consecutive ones (a loose Dask restriction: another worker takes them
  if that one is gone or idle work is stolen), so a worker's next packet mostly starts
  where its last ended and the scene sample at that time is kept, not taken again.
- **Faults.** A worker that dies (killed, out of memory) loses its tasks; Dask runs them
  again on another worker (a local cluster's nanny also restarts the process) and the
  run's files are the same. A packet that kills its workers (Dask's ``allowed-failures``)
  ends the run as ``failed`` (:class:`ClusterError`), finished packets kept, and so does
  any other worker error, a lost scheduler or a cluster without workers for
  :data:`WAIT_FOR_WORKERS` s. SIGINT/SIGTERM of the client
  stop the run as in one process (:class:`~blensor_addon.jobs.signals.Signals`: the
  packet awaited is finished, the rest cancelled, the manifest says ``cancelled``,
  ``--resume`` completes it); workers of a local cluster ignore SIGINT (a Ctrl-C in the
  terminal reaches the whole process group) and stop with the client.
- **Threads.** The native kernel of each worker uses ``cores / workers`` threads of its
  host (at least one), so N workers on one machine do not oversubscribe it.

Dask is optional (``pip install 'blensor[dask]'``); ``--workers 1`` never imports it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, cast

from ..core.errors import BlensorError, SettingsError

if TYPE_CHECKING:
    import bpy

    from ..core.ndtypes import F64
    from ..core.packets import Packet, PacketRecord
    from ..core.result import ScanResult
    from ..io.formats import RunInfo, Writer
    from ..scene.scanner import Scanner
    from .pipeline import Encoded, PacketResult

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class _Future(Protocol[_T_co]):
    """What the client uses of a ``distributed.Future`` whose task returns a ``_T_co``
    (distributed's own annotations leave these methods untyped)."""

    def done(self) -> bool: ...

    def result(self) -> _T_co: ...

    def release(self) -> None: ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


class _Client(Protocol):
    """What the range scan uses of a ``distributed.Client``."""

    def submit(self, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _Future[_T]: ...

    def run(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> dict[str, _T]: ...

    def scheduler_info(self, n_workers: int = 5) -> dict[str, Any]: ...

    def wait_for_workers(self, n_workers: int, timeout: float | None = None) -> None: ...

    def register_worker_callbacks(self, setup: Callable[..., object]) -> object: ...

    def cancel(self, futures: list[_Future[Any]]) -> object: ...

    def close(self, timeout: float | None = None) -> object: ...


class _LocalCluster(Protocol):
    """What the range scan uses of a ``distributed.LocalCluster``."""

    def close(self) -> object: ...


class _Backend(Protocol):
    """What :func:`check_address` uses of a Dask comm backend."""

    def get_connector(self) -> object: ...


class _Security(Protocol):
    """What :func:`check_address` uses of ``distributed.security.Security``."""

    def get_connection_args(self, role: str) -> dict[str, Any]: ...

#: what to install for more than one worker (one line, in the refusal)
DASK_HINT = "pip install 'blensor[dask]' (dask[distributed])"
#: the largest --workers of a local cluster
MAX_WORKERS = 256
#: packets submitted ahead of the one the pipeline waits for, per worker and block
AHEAD_PER_WORKER = 2
#: consecutive packets given to one worker: its scanner keeps the scene's samples of the
#: recent scene frames (:class:`~blensor_addon.scene.timeline.Timeline`), so a packet that
#: starts where its last one ended samples the scene once instead of twice
BLOCK = 8
#: the staging folder's name in the output folder (then the run's key): workers that see
#: it write the packets' per-frame files there, the client renames them into place
STAGING_PREFIX = ".blensor-staging-"
#: the file in the staging folder holding the run's key (a worker that reads it sees the folder);
#: the files go into its subfolder :data:`STAGED` (a format's names cannot meet the probe's)
PROBE = "probe"
STAGED = "files"
#: Dask settings of a local cluster's processes: no statistical profiler in the workers (a
#: thread sampling every 10 ms for Dask's dashboard, which a local cluster does not serve), and
#: the event loop's health check and the system monitor less often (every 20 ms and 500 ms by
#: default in each process: their warnings are silenced here and no memory limit is set)
LOCAL_DASK = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
              "distributed.admin.system-monitor.interval": "5s"}
#: at most this many packets in flight (their results wait in memory until written in order)
MAX_AHEAD = 128
#: seconds ``--scheduler FILE.json`` waits for the file to appear
WAIT_FOR_FILE = 20
#: seconds ``--scheduler`` waits for a first worker
WAIT_FOR_WORKERS = 60
#: seconds between two looks at the cluster while a packet is awaited
POLL_S = 1.0
#: the address schemes this client connects with (Dask's ucx:// needs UCX packages Dask no
#: longer ships; inproc:// reaches only this process)
SCHEMES = ("tcp", "tls", "ws", "wss")
#: largest scheduler file read (bytes; ``dask scheduler --scheduler-file`` writes about 1 KiB)
MAX_SCHEDULER_FILE = 1 << 20
#: seconds a scheduler file that cannot be read as one may still be being written (after
#: its last change)
FRESH_S = 2.0
#: what ``--scheduler`` allows (the refusals' wording)
SCHEDULER_ALLOWED = ("a scheduler address such as tcp://HOST:8786 (tcp, tls, ws or wss) or the scheduler "
                     "file that dask scheduler --scheduler-file wrote")


class ClusterError(BlensorError, RuntimeError):
    """The cluster could not run the scan: no scheduler at the address, workers of another
    BlenSor or Blender version, a packet that killed its workers (the run ends ``failed``,
    finished packets kept)."""


def dask_available() -> bool:
    """Whether ``dask.distributed`` can be imported (without importing it)."""
    import importlib.util
    return importlib.util.find_spec("distributed") is not None


def check_workers(workers: int, scheduler: str | None = None, option: str = "--workers") -> int:
    """Validate ``--workers`` (an int in 1..:data:`MAX_WORKERS`) and ``--scheduler``
    (``HOST:PORT``, ``SCHEME://HOST:PORT`` or a scheduler file; then ``workers`` must be 1:
    the cluster has its own); refuse more than one worker, or a scheduler, without Dask, in
    one line. A scheduler file's contents are read when the cluster starts
    (:func:`read_scheduler_file`: it may not be written yet); a path that exists and is not
    a regular file is refused now.

    Returns:
        the number of local workers (1: no Dask).
    Raises:
        SettingsError (``--workers`` / ``--scheduler``): out of range, both given, Dask
        missing (naming what to install), an address Dask cannot reach from here
        (:func:`check_address`), or a FIFO, device or folder given as the scheduler file.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise SettingsError(option, f"an integer in [1, {MAX_WORKERS}]", workers)
    if scheduler is not None:
        if workers != 1:
            raise SettingsError(option, "1 with --scheduler (the cluster's workers scan)", workers)
        if not isinstance(scheduler, str) or not scheduler.strip() or " " in scheduler.strip():
            raise SettingsError("--scheduler", "a scheduler address such as tcp://HOST:8786, or a "
                                "scheduler file (.json)", scheduler)
    if (workers > 1 or scheduler is not None) and not dask_available():
        name = "--scheduler" if scheduler is not None else option
        raise SettingsError(name, f"{'none' if scheduler is not None else 1} without Dask ({DASK_HINT})",
                            scheduler if scheduler is not None else workers)
    if scheduler is not None:
        if is_scheduler_file(scheduler):
            if os.path.exists(scheduler):  # (a FIFO would be waited for, then block the reader)
                from ..core.files import check_regular_file
                check_regular_file("--scheduler", scheduler, SCHEDULER_ALLOWED)
        else:
            check_address(scheduler)
    return workers


def is_scheduler_file(scheduler: str) -> bool:
    """Whether ``--scheduler`` names a scheduler file: no ``SCHEME://``, and a ``.json``
    name or a path that exists."""
    return "://" not in scheduler and (scheduler.endswith(".json") or os.path.lexists(scheduler))


def check_address(address: str, shown: str | None = None) -> str:
    """Check a scheduler address before Dask connects to it (Dask takes 20 s to give up on
    an address it cannot use, and prints a traceback for an unknown scheme): a scheme of
    :data:`SCHEMES` (none: tcp) whose Dask backend works here (tls and wss: with Dask's TLS
    settings), ``HOST:PORT`` with a port in 1..65535. Returns ``address``.

    Raises:
        SettingsError (``--scheduler``): naming ``shown`` (default ``address``) and why."""
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port
    why = None
    try:
        scheme, loc = parse_address(address)
        if scheme not in SCHEMES:
            why = f"{scheme}:// is not among {', '.join(SCHEMES)}"
        else:
            backend: _Backend = registry.get_backend(scheme)
            backend.get_connector()  # (a backend whose packages are missing)
            port = parse_host_port(loc)[1]
            if not 1 <= int(port) <= 65535:
                why = f"port {port} is not in 1..65535"
            elif scheme in ("tls", "wss"):
                from distributed.security import Security
                new_security: Callable[[], _Security] = Security
                if new_security().get_connection_args("client").get("ssl_context") is None:
                    why = (f"{scheme}:// needs Dask's TLS settings: distributed.comm.tls.ca-file and "
                           "client.cert in the Dask configuration")
    except (ValueError, TypeError, ImportError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if why is not None:
        raise SettingsError("--scheduler", SCHEDULER_ALLOWED, f"{shown or address} ({why})")
    return address


def read_scheduler_file(path: str) -> str:
    """The scheduler's address from a scheduler file (JSON with an ``"address"``, as
    ``dask scheduler --scheduler-file`` writes it), checked (:func:`check_address`). The
    file is opened without blocking and must be a regular file of at most
    :data:`MAX_SCHEDULER_FILE` bytes; one that cannot be read as a scheduler file is read
    again while it may still be being written (:data:`FRESH_S` s after its last change).

    Raises:
        SettingsError (``--scheduler``): gone, not a regular file, too large, not JSON,
        not an object, no address or not a text one, or an address Dask cannot use."""
    import stat
    import time

    from ..io.safeload import load_json
    give_up = time.monotonic() + FRESH_S  # (an mtime in the future, a clock ahead, ends too)
    while True:
        why = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise SettingsError("--scheduler", SCHEDULER_ALLOWED, f"{path} ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                from ..core.files import file_kind
                raise SettingsError("--scheduler", f"{SCHEDULER_ALLOWED} (a regular file)",
                                    f"{path} ({file_kind(st.st_mode)})")
            data = f.read(MAX_SCHEDULER_FILE + 1)
        info: Any = None  # (the file's JSON: any value, checked below)
        if len(data) > MAX_SCHEDULER_FILE:
            why = f"larger than {MAX_SCHEDULER_FILE} bytes"
        elif not data.strip():
            why = "empty"
        else:
            try:
                info = load_json(data, path, max_bytes=MAX_SCHEDULER_FILE)
            except ValueError as exc:  # (SettingsError, bounded nesting and digits, is one too)
                why = f"not JSON: {str(exc).splitlines()[0][:80]}"
        if why is None:
            if not isinstance(info, dict):
                why = f"JSON {type(info).__name__}, not an object with an address"
            elif "address" not in info:
                why = "no address in it"
            elif not isinstance(info["address"], str) or not info["address"].strip():
                why = f"its address {str(info['address'])[:40]!r} is not an address"
        if why is None:
            return check_address(info["address"], shown=f"{path}: {info['address']}")
        if (time.time() - st.st_mtime > FRESH_S or len(data) > MAX_SCHEDULER_FILE
                or time.monotonic() > give_up):
            raise SettingsError("--scheduler", SCHEDULER_ALLOWED, f"{path} ({why})")
        time.sleep(0.05)  # (being written: the scheduler writes it once it listens)


class Cluster:
    """A Dask client for range scans: a local cluster of ``workers`` processes (one thread
    each: a worker runs one task at a time), or the cluster at ``scheduler``.
    :meth:`start` starts or reaches it; :meth:`close` stops a local cluster.

    A local cluster is started before this process imports ``bpy``: Blender's module adds
    its own script folders to ``sys.path``, and a worker process started from a process
    that has them would find Blender's inner ``bpy`` package instead of the module. Its
    worker processes come from a fork server (POSIX) started then; one restarted later
    (after a crash) still gets this process's ``sys.path`` of that time, so it drops the
    folders added since (:meth:`added_paths`) before it imports bpy.

    Args:
        workers: local worker processes (>= 2), or 1 with ``scheduler``.
        scheduler: address of an existing scheduler (or its scheduler file, ``*.json``), or
            None for a local cluster.
    Raises:
        SettingsError: bad ``workers``/``scheduler``, or Dask missing.
    """

    def __init__(self, workers: int = 2, scheduler: str | None = None) -> None:
        self.workers = check_workers(workers, scheduler)
        self.scheduler = scheduler
        self._client: _Client | None = None
        self._local: _LocalCluster | None = None
        self._preloads: list[_Future[None]] = []
        #: the run's token for the workers' scene cache (the CLI's ``worker_scene``)
        self.token = ""
        self._counted: tuple[float, list[str]] | None = None  # (monotonic s, workers) of the last look
        self._path: list[str] = []  # sys.path when a local cluster started (before bpy)

    @property
    def local(self) -> bool:
        """Whether this is a local cluster (no ``scheduler``)."""
        return self.scheduler is None

    def start(self) -> "Cluster":
        """Start the local cluster (its workers up) or connect to the scheduler; returns self.

        Raises:
            ClusterError: starting or reaching the cluster failed."""
        if self._client is not None:
            return self
        if self.local and "bpy" in sys.modules:
            raise ClusterError("a local cluster starts before bpy is imported (Blender's module puts its "
                               "script folders on sys.path, which worker processes would inherit): make the "
                               "Cluster first")
        import logging

        address = self.scheduler
        # (a scheduler's cluster; a bad scheduler file is a SettingsError: bad input, exit 2)
        if self.scheduler is not None and is_scheduler_file(self.scheduler):
            self._wait_for_file(self.scheduler)
            address = read_scheduler_file(self.scheduler)
        self._path = list(sys.path)
        import dask
        from distributed import Client, LocalCluster
        new_client: Callable[..., _Client] = Client
        new_cluster: Callable[..., _LocalCluster] = LocalCluster
        try:
            if self.local:
                method = "spawn" if sys.platform == "win32" else "forkserver"
                with dask.config.set({"distributed.worker.multiprocessing-method": method, **LOCAL_DASK}):
                    self._local = new_cluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                               dashboard_address=None, worker_dashboard_address=None,
                                               memory_limit=0, silence_logs=logging.CRITICAL,
                                               # the scheduler's HTTP server (health, metrics) on a
                                               # free loopback port: by default it takes 8787 and,
                                               # where that is in use, warns on stderr (--quiet)
                                               scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
                self._client = new_client(self._local, set_as_default=False)
            else:  # (the address of a scheduler file read above: Dask reads nothing)
                self._client = new_client(address, timeout="20s", set_as_default=False)
                self._client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
            # every worker imports the tasks' modules before its first task (a local one also
            # leaves SIGINT to the client; a hand-started worker keeps its own terminal's)
            self._client.register_worker_callbacks(_prepare_worker if self.local else _import_task_modules)
        # (TypeError: Dask's connection set-up, e.g. TLS settings of the wrong kind)
        except (OSError, TimeoutError, RuntimeError, ValueError, TypeError) as exc:
            self.close()
            where = f"the scheduler at {self.scheduler}" if self.scheduler else "a local Dask cluster"
            raise ClusterError(f"could not start or reach {where}: {exc}") from None
        return self

    def _wait_for_file(self, path: str) -> None:
        """Wait up to :data:`WAIT_FOR_FILE` s for the scheduler file (a scheduler started
        just before writes it once it listens); Dask's own wait has no end.

        Raises:
            SettingsError (``--scheduler``): no such file by then."""
        import time
        end = time.monotonic() + WAIT_FOR_FILE
        while not os.path.exists(path):
            if time.monotonic() > end:
                raise SettingsError("--scheduler", "an existing scheduler file (dask scheduler "
                                    "--scheduler-file FILE.json) or an address such as tcp://HOST:8786",
                                    f"{path} (none after {WAIT_FOR_FILE} s)")
            time.sleep(0.05)

    def preload(self, opener: Callable[[], object]) -> None:
        """Run ``opener()`` once on each worker now, ahead of the scan's tasks (the CLI's:
        open the .blend while this process opens and validates it; the worker keeps it
        open for the run). Nothing waits for it: a failure shows again in the first scan
        task, which opens the scene itself if it is not open."""
        for addr in self.client.scheduler_info(n_workers=-1)["workers"]:
            self._preloads.append(self.client.submit(_warm, opener, workers=[addr], allow_other_workers=False,
                                                     pure=False, priority=1))

    def added_paths(self) -> tuple[str, ...]:
        """Entries of ``sys.path`` added since a local cluster started (Blender's script
        folders, once bpy is imported): a worker that its nanny restarts later (after a
        crash) is a fork server child that gets this process's ``sys.path``, and there
        Blender's inner ``bpy`` package would shadow the module; :func:`scan_packet` drops
        them before it imports bpy. Empty for a scheduler's cluster."""
        if not self.local or not self._path:
            return ()
        return tuple(p for p in sys.path if p not in self._path)

    @property
    def client(self) -> _Client:
        """The ``distributed.Client`` (:meth:`start` first)."""
        client = self.start()._client
        assert client is not None  # (made by start())
        return client

    def threads_by_host(self) -> dict[str, int]:
        """Native threads per worker for each host: its cores / its workers (>= 1)."""
        cores = self.client.run(usable_cores)  # worker address -> the cores it may use
        hosts: dict[str, tuple[int, int]] = {}
        for addr, n in cores.items():
            count, most = hosts.get(_host_of(addr), (0, 0))
            hosts[_host_of(addr)] = (count + 1, max(most, int(n or 1)))
        return {h: max(1, most // count) for h, (count, most) in hosts.items()}

    def size(self) -> int:
        """Workers of the cluster now (at least 1)."""
        return max(1, self.workers_now())

    def workers_now(self) -> int:
        """Workers of the cluster now (0: none). A round trip to the scheduler that lists
        every worker, so asked at most once a second (the range job asks per packet)."""
        return len(self.addresses())

    def addresses(self) -> list[str]:
        """The sorted addresses of the cluster's workers now (asked of the scheduler at
        most once a second, as :meth:`workers_now`)."""
        import time
        now = time.monotonic()
        if self._counted is None or now - self._counted[0] >= 1.0:
            self._counted = (now, sorted(self.client.scheduler_info(n_workers=-1)["workers"]))
        return self._counted[1]

    def close(self) -> None:
        """Close the client, and the local cluster's workers (idempotent)."""
        self._preloads = []
        client, local = self._client, self._local
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=10)
        if local is not None:
            with contextlib.suppress(Exception):
                local.close()
        self._client = self._local = None


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def _host_of(address: str) -> str:
    """``tcp://10.0.0.5:4321`` -> ``10.0.0.5``."""
    return address.split("://", 1)[-1].rsplit(":", 1)[0]


def _prepare_worker(dask_worker: object = None) -> None:
    """On a local cluster's worker process (run once by the client when the cluster starts,
    before any task): :func:`_ignore_sigint`, and import the modules whose objects the
    tasks carry (the writers' RunInfo, packets, the CLI's scene loader). Unpickled later,
    a task's first import ran on the worker's event loop while the preload task
    (:meth:`Cluster.preload`) imported the add-on on the task thread; two threads that
    import modules of one import cycle at once get a partly imported package from Python
    (its deadlock avoidance), and the task failed to unpickle (``KeyError:
    'blensor_addon.core.sensors'`` from ``io.formats``' writer discovery), its worker lost."""
    _ignore_sigint(dask_worker)
    _import_task_modules(dask_worker)


def _import_task_modules(dask_worker: object = None) -> None:
    """On any worker process, local or started by hand (run once by the client when it
    connects, before any task): import the modules whose objects the tasks carry, for the
    reason :func:`_prepare_worker` gives. A worker that cannot import them (no blensor or
    bpy there) is left as it is: its first task fails with the import's own error, named
    in one line by the client."""
    import importlib
    with contextlib.suppress(Exception):
        for name in ("..core.sensors", "..core.packets", "..io.formats", "..cli"):
            importlib.import_module(name, __package__)


def _ignore_sigint(dask_worker: object = None) -> None:
    """On a worker process (run once by the client when the cluster starts): ignore SIGINT
    (a Ctrl-C in the terminal reaches the client's whole process group; the client decides
    what stops)."""
    import signal
    with contextlib.suppress(ValueError):  # not the main thread: nothing to do
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# -- the worker's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerTask:
    """What a worker needs to scan the run's packets as the client would.

    Attributes:
        key: the run's key (a worker keeps one run's scene and scanner).
        open_scene: picklable callable () -> the camera object, with the .blend open and
            the add-on registered (the command line's own loader).
        scanner: keyword arguments of :class:`~blensor_addon.scene.scanner.Scanner`.
        encode: formats whose per-frame files the worker encodes, with their options.
        run: the writers' :class:`~blensor_addon.io.formats.RunInfo`. folder: the output
            folder's path (for the writers; a worker writes nothing).
        full: send the whole result back (the client's multi-frame writers need it).
        threads: host -> native threads of a worker there.
        versions: (blensor, Blender) versions of the client.
        drop_paths: ``sys.path`` entries a worker removes before it imports bpy
            (:meth:`Cluster.added_paths`).
        staging: the staging folder in the output folder (:data:`STAGING_PREFIX`) that a
            worker which sees it writes the per-frame files to; "": none (send the bytes).
        sync_staged: the worker makes its staged files durable (one ``syncfs``); False on
            a local cluster, whose client syncs the file system they share with each
            packet's group of files.
    """

    key: str
    open_scene: Callable[[], bpy.types.Object]
    scanner: dict[str, Any]
    encode: dict[str, object]
    run: RunInfo | None
    folder: str
    full: bool
    threads: dict[str, int] = field(default_factory=dict)
    versions: tuple[str, ...] = ()
    drop_paths: tuple[str, ...] = ()
    staging: str = ""
    sync_staged: bool = True


@dataclass
class Scanned:
    """A worker's answer for one packet: the packet's record and numbers, its per-frame
    files (format -> [(name, bytes)]) with their records (name -> size, sha256), the
    whole :class:`ScanResult` if ``full``, the object table when it grew past the
    client's, what the scan printed on stderr, and the worker's versions and backend.
    ``staged``: format -> [(name, absolute path, size)] of the files the worker wrote
    into the staging folder instead of sending them (``synced``: it made them durable);
    their records are in ``checks`` too."""

    record: PacketRecord
    frame: int
    points: int
    rays: int
    sensor_to_world: F64
    files: dict[str, list[tuple[str, bytes]]]
    checks: dict[str, dict[str, Any]]
    result: ScanResult | None = None
    objects: list[dict[str, Any]] | None = None
    stderr: str = ""
    versions: tuple[str, ...] = ()
    backend: str = ""
    staged: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    synced: bool = False


class _WorkerState(TypedDict):
    """A worker's state for one run (:func:`_worker_state`)."""

    key: str
    scanner: Scanner
    writers: list[Writer]
    versions: tuple[str, str]
    table: int  # objects in the scanner's table when it was made
    shared: bool  # the worker sees the client's staging folder (:func:`_sees_staging`)


#: the worker's :class:`_WorkerState`, or empty (a plain dict: cleared when a run's state is dropped)
_STATE: dict[str, Any] = {}
_LOCK = threading.Lock()  # one scan at a time per worker process (bpy is not thread-safe)


def _worker_state(task: WorkerTask) -> _WorkerState:
    """The worker's scene, scanner and writers for ``task.key`` (made by the first task)."""
    if _STATE.get("key") == task.key:
        return cast(_WorkerState, _STATE)
    old = _STATE.get("scanner")
    _STATE.clear()
    if old is not None:
        old.close()
    if "bpy" not in sys.modules and task.drop_paths:  # a worker restarted after the client imported bpy
        drop = set(task.drop_paths)
        sys.path[:] = [p for p in sys.path if p not in drop]
    import bpy

    from ..core.version import __version__
    from ..io.formats import WRITERS
    from ..scene.scanner import Scanner
    camera = task.open_scene()
    threads = task.threads.get(_host_of(_worker_address()), 0) or usable_cores()
    scanner = Scanner(camera, packet_hashes=True, threads=threads, **task.scanner)
    from pathlib import Path
    writers = [WRITERS[f](Path(task.folder), options, task.run) for f, options in task.encode.items()]
    state: _WorkerState = {"key": task.key, "scanner": scanner, "writers": writers,
                           "versions": (__version__, bpy.app.version_string),
                           "table": len(scanner.extractor.table.table), "shared": _sees_staging(task)}
    _STATE.update(state)
    return cast(_WorkerState, _STATE)  # (the one dict: a change by a task stays for the run)


def _sees_staging(task: WorkerTask) -> bool:
    """Whether this worker sees the client's staging folder: the probe file there holds
    the run's key (another host's folder at the same path does not)."""
    if not task.staging:
        return False
    try:
        with open(os.path.join(task.staging, PROBE), "rb") as f:
            return f.read(len(task.key) + 1) == task.key.encode()
    except OSError:
        return False


def _stage(task: WorkerTask,
           files: dict[str, list[tuple[str, bytes]]]) -> dict[str, list[tuple[str, str, int]]]:
    """Write ``files`` (format -> [(name, bytes)]) into the staging folder's :data:`STAGED`
    subfolder under temporary names (:func:`~blensor_addon.io.atomic.stage_bytes`: created
    exclusively, so a packet scanned twice never shares one) and, if ``task.sync_staged``,
    make them durable.
    Subfolders are made below the staging folder only: once the client removed it (the
    run ended), nothing is written. Returns format -> [(name, absolute path, size)].

    Raises:
        OSError: a write or the sync failed (the files written are removed)."""
    from pathlib import Path

    from ..io.atomic import remove_quietly, stage_bytes, sync_file_systems
    root = Path(task.staging) / STAGED
    out: dict[str, list[tuple[str, str, int]]] = {}
    written: list[Path] = []
    try:
        for fmt, items in files.items():
            for name, data in items:
                target = root / name
                for folder in reversed(target.relative_to(root).parents[:-1]):
                    (root / folder).mkdir(exist_ok=True)  # (no parents: the staging folder must be there)
                written.append(stage_bytes(target, data, sync=False))
                out.setdefault(fmt, []).append((name, str(written[-1]), len(data)))
        if task.sync_staged and written:
            sync_file_systems(written)
    except BaseException:
        for tmp in written:
            remove_quietly(tmp)
        raise
    return out


def _worker_address() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except Exception:  # not in a worker (tests call scan_packet directly)
        return socket.gethostname()


def _warm(opener: Callable[[], object]) -> None:
    """A worker's warm-up task (:meth:`Cluster.preload`): ``opener()``, one task at a time."""
    with _LOCK:
        opener()


def scan_packet(task: WorkerTask, packet: Packet) -> Scanned:
    """Scan ``packet`` on this worker (the task of :class:`RemoteScanner`): the packet's
    result, its per-frame files encoded (the bytes the client's writers would make), and
    what the client needs for the manifest and the trajectory.

    Raises:
        what :meth:`Scanner.scan` raises (SettingsError: bad input found while scanning),
        sent back to the client, which ends the run as one process would; the error
        carries this worker's traceback as text in ``worker_traceback`` (printed by the
        client with ``BLENSOR_DEBUG=1``: Dask sends the traceback object itself only
        when it pickles and is short enough)."""
    try:
        return _scan_packet(task, packet)
    except Exception as exc:
        import traceback
        with contextlib.suppress(AttributeError, TypeError):  # (an exception without a __dict__)
            setattr(exc, "worker_traceback", traceback.format_exc())  # (Exception declares no such attribute)
        raise


def _scan_packet(task: WorkerTask, packet: Packet) -> Scanned:
    """:func:`scan_packet` without its error's traceback text."""
    from ..io.outdir import file_record
    from ..process.blas import single_blas_thread
    with _LOCK:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            state = _worker_state(task)
            result, record = state["scanner"].scan(packet)
            with single_blas_thread():
                files = {w.name: w.frame_files(result) for w in state["writers"]}
        checks = {n: file_record(data) for items in files.values() for n, data in items}
        staged: dict[str, list[tuple[str, str, int]]] = {}
        if state["shared"]:  # the files go into the shared folder, not to the client
            try:
                staged, files = _stage(task, files), {}
            except OSError:  # (a folder this worker sees but cannot write: read-only, full)
                state["shared"] = False  # its bytes go to the client, which writes them or fails the run
        table = state["scanner"].extractor.table.table
        grown = list(table) if len(table) != state["table"] else None
        return Scanned(record=record, frame=int(result.frame), points=len(result), rays=result.num_rays,
                       sensor_to_world=result.sensor_to_world, files=files, checks=checks,
                       result=result if task.full else None, objects=grown, stderr=err.getvalue(),
                       versions=state["versions"], backend=state["scanner"].backend.name,
                       staged=staged, synced=task.sync_staged)


# -- the client's side ------------------------------------------------------------------------


class PacketSummary:
    """The :class:`~blensor_addon.jobs.pipeline.PacketResult` of a packet scanned by a
    worker when no format needs the whole result: ``frame``, ``sensor_to_world``,
    ``num_rays``, ``len()`` and every format's pre-encoded ``encoded`` files (bytes, or
    staged by the worker) with their ``file_checks``; ``whole`` is None."""

    whole = None

    def __init__(self, scanned: Scanned) -> None:
        self.frame = scanned.frame
        self.sensor_to_world = scanned.sensor_to_world
        self.num_rays = scanned.rays
        self._points = scanned.points
        self.encoded = encoded_files(scanned)
        self.file_checks = scanned.checks

    def __len__(self) -> int:
        return self._points


def encoded_files(scanned: Scanned) -> dict[str, Encoded]:
    """A worker's per-frame files as the pipeline takes them: format -> [(name, bytes)]
    for the files sent, [(name, :class:`~blensor_addon.io.atomic.Staged`)] for those it
    wrote into the staging folder."""
    from pathlib import Path

    from ..io.atomic import Staged
    out: dict[str, Encoded] = {fmt: list(items) for fmt, items in scanned.files.items()}
    for fmt, staged in scanned.staged.items():
        out[fmt] = [(name, Staged(Path(path), size, scanned.synced)) for name, path, size in staged]
    return out


class RemoteScanner:
    """The range job's scanner when a cluster scans (see the module docstring): packets
    are submitted ahead (:meth:`expect`, :attr:`lookahead` of them) and :meth:`scan` returns
    them in the order asked; :meth:`packet_hash` is the client's own scanner's (resume).

    Args:
        cluster: a started :class:`Cluster`.
        local: the client's :class:`~blensor_addon.scene.scanner.Scanner` (validation,
            packet hashes, the object table it starts from).
        task: the run's :class:`WorkerTask` (``threads`` and ``staging`` filled in here:
            the staging folder is made in ``task.folder``, the output folder, locked by
            this run; staging folders of a killed run found there are removed).
    """

    def __init__(self, cluster: Cluster, local: Scanner, task: WorkerTask) -> None:
        self.cluster, self.local = cluster, local
        self.client = cluster.client
        threads, drop = cluster.threads_by_host(), cluster.added_paths()
        self.staging = _make_staging(task.folder, task.key)
        self.task = dataclasses.replace(task, threads=threads, drop_paths=drop, staging=self.staging,
                                        sync_staged=not cluster.local)
        self.lookahead = min(MAX_AHEAD, AHEAD_PER_WORKER * BLOCK * cluster.size())
        self._futures: dict[tuple[str, int], _Future[Scanned]] = {}
        self._printed: set[str] = set()
        self._table = len(local.extractor.table.table)
        self._size = cluster.size()

    def expect(self, packets: Iterable[Packet]) -> None:
        """Submit the packets not submitted yet (in the order given: earlier ones first),
        each block of :data:`BLOCK` consecutive packet indices to one worker, the blocks
        to the workers in turn (a loose restriction: any worker runs it if that one is
        gone); the look-ahead, and the native threads of a worker that starts on the run,
        follow the workers now in the cluster (a ``--scheduler`` cluster's may join later)."""
        size = self.cluster.size()
        if size != self._size:  # workers joined or left: threads per worker on each host anew
            self._size = size
            self.task = dataclasses.replace(self.task, threads=self.cluster.threads_by_host())
        self.lookahead = min(MAX_AHEAD, AHEAD_PER_WORKER * BLOCK * size)
        workers = self.cluster.addresses()
        for p in packets:
            if (p.kind, p.index) not in self._futures:
                where: dict[str, Any] = {}
                if len(workers) > 1:
                    where = {"workers": [workers[int(p.index) // BLOCK % len(workers)]],
                             "allow_other_workers": True}
                self._futures[(p.kind, p.index)] = self.client.submit(
                    scan_packet, self.task, p, key=f"blensor-{self.task.key}-{p.kind}-{p.index}",
                    priority=-int(p.index), pure=False, retries=0, **where)

    def scan(self, packet: Packet) -> tuple[PacketResult, PacketRecord]:
        """The result of ``packet`` (submitted now if it was not): a
        :class:`~blensor_addon.jobs.pipeline.WholeResult` with the ``encoded`` per-frame
        files when the client's writers need the whole result, else a
        :class:`PacketSummary`; and the packet's record.

        Raises:
            SettingsError and what else the worker's scan raised; ClusterError: the packet
            killed its workers, or a worker runs another BlenSor or Blender."""
        self.expect([packet])
        fut = self._futures.pop((packet.kind, packet.index))
        try:
            scanned: Scanned = self._result(fut, packet)
        except BlensorError:
            raise
        except Exception as exc:
            from concurrent.futures import CancelledError

            from distributed import KilledWorker
            if isinstance(exc, KilledWorker):
                raise ClusterError(f"packet {packet.index} ended the worker processes that scanned it "
                                   "(Dask's allowed-failures); finished packets are kept") from None
            if isinstance(exc, (CancelledError, OSError)):  # (a CommClosedError is an OSError)
                raise ClusterError(f"the cluster dropped packet {packet.index} (the scheduler went away?); "
                                   "finished packets are kept") from None
            # (a worker without blensor or bpy, of another blensor, a bug): one line, not a traceback
            raise ClusterError(f"packet {packet.index} failed on a worker: {type(exc).__name__}: {exc}; "
                               "finished packets are kept") from exc
        finally:
            fut.release()
        self._check(scanned)
        if scanned.objects is not None:
            # (one process numbers them in the order it meets them: each worker meets other ones)
            from ..core.errors import SettingsError
            raise SettingsError("--workers", "1 for a scene that creates objects while it plays (a frame "
                                "handler or driver: their ids depend on the frames one process saw)",
                                f"{len(scanned.objects) - self._table} new at packet {packet.index}")
        for line in scanned.stderr.splitlines():
            if line.strip() and line not in self._printed:  # each worker warns once; say it once
                self._printed.add(line)
                print(line, file=sys.stderr)
        if scanned.result is not None:
            from .pipeline import WholeResult
            return WholeResult(scanned.result, encoded_files(scanned), scanned.checks), scanned.record
        return PacketSummary(scanned), scanned.record

    def _result(self, fut: _Future[Scanned], packet: Packet) -> Scanned:
        """Wait for ``fut`` to finish, looking at the cluster every :data:`POLL_S` s, then
        fetch its result with no time limit; a cluster that has had no worker for
        :data:`WAIT_FOR_WORKERS` s meanwhile (a ``--scheduler`` cluster whose jobs ended)
        ends the wait.

        The wait is a done callback, never ``Future.result(timeout)``: one that times out
        while the result is being transferred cancels the client's gather, which the client
        shares with later gathers, and each of them then ends in ``UnboundLocalError:
        cannot access local variable 'result'`` (``distributed.utils.sync`` lets the
        ``CancelledError``, a BaseException, through; distributed 2026.8). A transfer that
        took longer than the poll (the whole result of a packet, on loaded cores) ended the
        run ``failed``.

        Raises:
            what the task raised (sent back by the worker); ClusterError: no worker for
            :data:`WAIT_FOR_WORKERS` s."""
        import time
        if not fut.done():
            ready = threading.Event()
            fut.add_done_callback(lambda _: ready.set())
            alone: float | None = None
            while not ready.wait(POLL_S):
                if self.cluster.workers_now():
                    alone = None
                    continue
                alone = alone or time.monotonic()
                if time.monotonic() - alone > WAIT_FOR_WORKERS:
                    raise ClusterError(f"the cluster has had no worker for {WAIT_FOR_WORKERS} s (packet "
                                       f"{packet.index} waits); finished packets are kept") from None
        return fut.result()

    def _check(self, scanned: Scanned) -> None:
        """Every answer: the worker runs the client's versions and backend, and each file it
        staged lies in this run's staging folder (:data:`STAGED`), whose files alone the
        client renames into the output folder or removes."""
        if scanned.staged:
            import os
            root = os.path.realpath(os.path.join(self.staging, STAGED)) if self.staging else ""
            for items in scanned.staged.values():
                for name, path, _size in items:
                    real = os.path.realpath(path)
                    if not root or real == root or os.path.commonpath([real, root]) != root:
                        raise ClusterError(f"a worker staged {name} at {path}, outside this run's staging "
                                           f"folder {root or '(none)'}: finished packets are kept")
        if scanned.versions != self.task.versions:
            theirs, mine = scanned.versions, self.task.versions
            raise ClusterError(f"a worker runs blensor {theirs[0]} with Blender {theirs[1]}, the client "
                               f"blensor {mine[0]} with Blender {mine[1]}: every worker needs the client's "
                               "versions (the files record them)")
        if scanned.backend != self.local.backend.name:
            raise ClusterError(f"a worker casts rays with the {scanned.backend} backend, the client with "
                               f"{self.local.backend.name}: install the native library on every worker or "
                               "choose --backend")

    def packet_hash(self, packet: Packet) -> str:
        """The client's scanner's :meth:`~blensor_addon.scene.scanner.Scanner.packet_hash`."""
        return self.local.packet_hash(packet)

    def objects(self) -> list[dict[str, Any]]:
        """The object table (the client's: a run whose table grows is refused)."""
        table: list[dict[str, Any]] = self.local.extractor.table.table
        return table

    def close(self) -> None:
        """Cancel the packets still submitted (a stopped run) and remove the staging
        folder with the files of packets not committed, idempotent.

        A cancelled task already running goes on until its packet is written, so the
        folder is first renamed (:func:`_retire_staging`): from then on a worker's writes
        under its path fail (nothing creates the folder again), and no file can appear in
        the renamed one while it is removed (removing it in place raced with a worker
        still writing, and left its part files in the output folder)."""
        futures, self._futures = list(self._futures.values()), {}
        if futures:
            with contextlib.suppress(Exception):
                self.client.cancel(futures)
        staging, self.staging = self.staging, ""
        if staging:
            _retire_staging(staging)


def _retire_staging(staging: str) -> None:
    """Rename the staging folder ``staging`` to a sibling of the same prefix (a later run
    into the folder removes what is left of it) and remove that, retrying while a file
    still being closed in it makes the removal fail."""
    import os
    import shutil
    import time
    gone = f"{staging}.closed"
    try:
        os.replace(staging, gone)
    except OSError:
        gone = staging
    for _ in range(20):
        shutil.rmtree(gone, ignore_errors=True)
        if not os.path.lexists(gone):
            return
        time.sleep(0.05)


def _make_staging(folder: str, key: str) -> str:
    """The run's staging folder in the output folder ``folder`` (:data:`STAGING_PREFIX`
    and ``key``) with the :data:`PROBE` file holding ``key``, made now; staging folders of
    a killed run (the folder is locked by this run) are removed first. Returns its path,
    or "" when it cannot be made (the workers send the files' bytes then)."""
    if not folder:
        return ""
    import shutil
    from pathlib import Path

    from ..io.atomic import atomic_write_bytes
    root = Path(folder)
    with contextlib.suppress(OSError):
        for old in root.glob(STAGING_PREFIX + "*"):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
    staging = root / f"{STAGING_PREFIX}{key}"
    try:
        staging.mkdir()
        (staging / STAGED).mkdir()
        atomic_write_bytes(staging / PROBE, key.encode())
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return ""
    return str(staging)


__all__ = ["Cluster", "ClusterError", "RemoteScanner", "WorkerTask", "Scanned", "scan_packet",
           "check_workers", "dask_available", "DASK_HINT", "MAX_WORKERS"]
