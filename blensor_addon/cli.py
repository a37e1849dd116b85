"""The ``blensor`` command: headless scans with pip ``bpy`` (or inside Blender).

    blensor scan SCENE.blend [--camera NAME] [--frames A-B | --time T0-T1] [--out DIR]
                 [--formats npz,evd,pcd] [--seed N] [--backend auto|native|bvhtree]
                 [--frame-of-reference sensor|world] [--pcd-ascii] [--axes blensor|ros]
                 [--option FORMAT.OPTION=VALUE ...] [--overwrite | --resume]
                 [--set NAME=VALUE ...] [--quiet]
    blensor info SCENE.blend [--json]
    blensor depth SCENE.blend [--camera NAME] [--frames A-B] [--out DIR]
                  [--formats exr,npy,pfm,dmap] [--backend auto|native|bvhtree]
                  [--set NAME=VALUE ...] [--overwrite] [--quiet]
    blensor motion SCENE.blend [--frames A-B] [--out DIR] [--formats blensor,tum,kitti,json]
                   [--objects NAME,...] [--overwrite] [--quiet]
    blensor sensors [--json]
    blensor calib import FILE [--camera NAME] SCENE.blend
    blensor preview OUT [--to DIR [--overwrite]]
    blensor --version

``--set NAME=VALUE`` (repeatable) overrides a setting of the camera's sensor for this run
(``--set sensor_type=tof --set preset=sr4000 --set backfolding=true``); the .blend is
not changed. ``blensor sensors`` lists every sensor type, its presets (each with its source)
and its settings with unit, allowed range and default; ``blensor scan --help`` lists every
``--option``. ``blensor calib import`` stores a unit's calibration file (Velodyne ROS YAML or
db.xml, Ouster metadata JSON, Hesai angle-correction CSV) in a camera of the .blend and saves
it atomically; a bad file changes nothing. Every command that writes scans, maps or poses
takes ``--formats`` (motion also ``--format``). stdout holds the command's
output only (Blender's "Read blend" line is dropped; ``--json``: one JSON document);
names from the .blend are printed escaped (:func:`~.core.text.printable`).

Exit status and the one line printed on stderr:

- 0: done.
- 2, ``blensor: error: <setting> must be <allowed>, got <value>``: bad input (missing,
  unreadable, corrupt or not a regular file, a file that crashes Blender's reader, a
  linked library that is a FIFO, no such camera, frames outside the scene, bad sensor settings, too
  many rays, an unwritable folder, a folder in use by another run or holding another
  run's files); nothing is written.
- 1, ``blensor: error: ...``: the scan failed (a write error such as a full disk, the
  native library missing with ``--backend native``); finished frames and the manifest
  (status ``failed``) are kept.
- 130, ``blensor: interrupted ...``: SIGINT or SIGTERM; the current frame is finished
  (a second signal drops it), finished frames, a terminated EVD and the manifest
  (status ``cancelled``) are kept. A signal while Blender loads is acted on once it has
  loaded: nothing is written. A signal inside one of Blender's Python callbacks (a
  frame-change handler) is acted on when it returns (:mod:`.jobs.signals`). A signal
  before the first frame leaves nothing (no manifest, no lock); one during the last frame
  still cancels the run. While Blender is stuck in a C call (a FIFO or hung file it opens
  again after the signal), the native library's watchdog ends the run after 5 s the same
  way (the manifest as last written, with status ``cancelled``; the lock removed).

``BLENSOR_DEBUG=1`` in the environment prints the traceback after an error's line
(:func:`debug_traceback`).

The console command ends its process with ``os._exit`` once done (:func:`end_process`):
bpy 4.2 crashes in its teardown after some files.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
_OPTION_NAMES = {"frames", "out", "formats", "backend", "camera", "frame_of_reference", "seed", "resume",
                 "format", "objects", "axes", "time", "overwrite"}


class _Spelled(argparse.Action):
    """Store the value and the option's spelling as typed (``--formats`` or its alias
    ``--format``) in ``<dest>_option``, so an error names the option the user wrote."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_option", option_string)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"blensor: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    from .core.version import __version__
    ap = _Parser(prog="blensor", description="BlenSor: LiDAR simulation of Blender scenes")
    ap.add_argument("--version", action="version", version=f"blensor {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    from .io.formats import WRITERS
    sc = sub.add_parser("scan", help="scan frames of a .blend into files", epilog=option_help(),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sc.set_defaults(sensor_notes=())  # what the --sensor file says of its sensors, printed as the run starts
    sc.add_argument("blend", help="the .blend file")
    sc.add_argument("--camera", help="camera object, or several comma-separated (a rig: scanned in one pass "
                    "over time, one subfolder each; default: the scene camera)")
    sc.add_argument("--all-sensors", action="store_true", help="scan every camera of the scene with BlenSor "
                    "settings as one rig")
    sc.add_argument("--sensor", metavar="FILE", help="a sensor config file (" + _config_help() + ") whose "
                    "sensors are scanned instead of the .blend's cameras (the .blend is not changed)")
    sc.add_argument("--rig-base", metavar="OBJECT", help="a rig's base object: the extrinsics are relative "
                    "to it (default: the cameras' common parent, else the first camera)")
    sc.add_argument("--frames", help="A-B or A (default: the scene's frame range)")
    sc.add_argument("--time", help="T0-T1: a time interval in seconds instead of --frames: every packet "
                    "(sweep or frame) that starts within it, scanned whole")
    sc.add_argument("--start-time", metavar="WHEN", default=None,
                    help="the absolute time of scene time 0 in rosbag2, pcap, LAS gps_time and the npz: "
                    "ISO 8601 (2020-01-01T00:00:00Z; no offset: UTC) or UNIX seconds (default: "
                    "2020-01-01T00:00:00Z, every run the same; see docs/formats.md)")
    sc.add_argument("--out", default="out", help="output folder (default: out)")
    sc.add_argument("--formats", default="npz", help="comma-separated subset of " + ",".join(WRITERS))
    sc.add_argument("--option", action="append", default=[], metavar="FORMAT.OPTION=VALUE", dest="option",
                    help="a format's option, e.g. pcd.ascii=true (repeatable; listed below)")
    sc.add_argument("--seed", type=int, default=None, help="seed (default: the camera's seed setting)")
    sc.add_argument("--backend", default="auto", help="auto, native or bvhtree")
    sc.add_argument("--frame-of-reference", default="sensor", help="sensor or world")
    sc.add_argument("--pcd-ascii", action="store_true", help="ASCII instead of binary PCD")
    sc.add_argument("--axes", default=None, help="blensor (x right, y up, -z ahead) or ros (REP-103: x "
                    "ahead, y left, z up) for sensor-frame outputs (default: the camera's stored choice, the "
                    "panel's Axes: ros for new cameras, blensor in scenes saved by BlenSor 0.1)")
    mode = sc.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true",
                      help="replace the files of an earlier run in --out (else refused)")
    mode.add_argument("--resume", action="store_true",
                      help="keep the finished frames of an earlier run in --out with the same settings")
    sc.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="set",
                    help="override a sensor setting for this run (repeatable; see 'blensor sensors')")
    _cluster_options(sc)
    sc.add_argument("--quiet", action="count", default=0,
                    help="no progress or notes: the one-line summary and errors only; twice: "
                    "errors only")
    dp = sub.add_parser("depth", help="export float depth maps of frames (the camera's own intrinsics)")
    dp.add_argument("blend", help="the .blend file")
    dp.add_argument("--camera", help="camera object (default: the scene camera)")
    dp.add_argument("--frames", help="A-B or A (default: the scene's frame range)")
    dp.add_argument("--out", default="out", help="output folder (default: out)")
    dp.add_argument("--formats", default="exr", help="comma-separated subset of " +
                    ",".join(k for k, w in WRITERS.items() if w.needs.image))
    dp.add_argument("--backend", default="auto", help="auto, native or bvhtree")
    import dataclasses
    from .core.sensors import get_sensor
    depth_settings = sorted(f.name for f in dataclasses.fields(get_sensor("depth").Settings))
    dp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="set",
                    help="override a depth-camera setting (" + ", ".join(depth_settings) + ")")
    dp.add_argument("--overwrite", action="store_true", help="replace earlier depth maps in --out")
    _cluster_options(dp)
    dp.add_argument("--quiet", action="count", default=0,
                    help="no progress or notes: the one-line summary and errors only; twice: "
                    "errors only")
    mo = sub.add_parser("motion", help="export object and sensor poses and labelled 3D boxes of frames",
                        description="Export object and sensor poses and labelled 3D boxes of frames. It "
                        "takes no --workers: it reads transforms and bounding boxes only (no ray casting), "
                        "a few milliseconds per frame, less than starting one worker.")
    mo.add_argument("blend", help="the .blend file")
    mo.add_argument("--frames", help="A-B or A (default: the scene's frame range)")
    mo.add_argument("--out", default="out", help="output folder (default: out)")
    mo.add_argument("--formats", "--format", default="blensor", dest="formats", action=_Spelled,
                    help="comma-separated subset of blensor,tum,kitti,json (--format: the same)")
    mo.set_defaults(formats_option="--formats")  # the spelling typed (_Spelled), for errors
    mo.add_argument("--objects", default=None, help="comma-separated object names (default: every object)")
    mo.add_argument("--overwrite", action="store_true",
                    help="replace earlier motion files in --out (a scan's files there stay)")
    mo.add_argument("--quiet", action="count", default=0,
                    help="no progress or notes: the one-line summary and errors only; twice: "
                    "errors only")
    sens = sub.add_parser("sensors", help="list sensor types, presets and settings")
    sens.add_argument("--json", action="store_true", help="print one JSON document")
    cal = sub.add_parser("calib", help="import a rotating LiDAR unit's calibration into a camera")
    cal_sub = cal.add_subparsers(dest="calib_command", metavar="import", required=True, parser_class=_Parser)
    ci = cal_sub.add_parser("import", help="store a calibration file in a camera of a .blend (saved)",
                            description="Read a unit's calibration (Velodyne ROS .yaml or db.xml, Ouster "
                            "metadata .json, Hesai angle-correction .csv) and store it in the camera's "
                            "calibration setting; the .blend is saved atomically. A bad file changes "
                            "nothing.")
    ci.add_argument("file", metavar="FILE", help="the calibration file")
    ci.add_argument("--camera", help="camera object (default: the scene camera)")
    ci.add_argument("blend", metavar="SCENE.blend", help="the .blend file (saved in place)")
    cfg = sub.add_parser("config", help="import or export sensor config files (" + _config_help() + ")")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="import|export", required=True,
                                 parser_class=_Parser)
    cim = cfg_sub.add_parser("import", help="create or update cameras of a .blend from a config file (saved)")
    cim.add_argument("format", metavar="FORMAT", help="the file's format: " + _config_names())
    cim.add_argument("file", metavar="FILE", help="the config file")
    cim.add_argument("blend", metavar="SCENE.blend", help="the .blend file (saved in place)")
    cex = cfg_sub.add_parser("export", help="write cameras' sensors to a config file")
    cex.add_argument("format", metavar="FORMAT", help="the file's format: " + _config_names())
    cex.add_argument("blend", metavar="SCENE.blend", help="the .blend file")
    cex.add_argument("file", metavar="FILE", help="the config file to write")
    cex.add_argument("--camera", help="comma-separated cameras (default: every camera with BlenSor settings)")
    pv = sub.add_parser("preview", help="PNG pictures of an output folder's npz scans (as --formats preview)",
                        description="Draw the range, intensity and bird's-eye pictures of every "
                        "scan<frame>.npz in OUT and the run's trajectory (docs/formats.md#pictures); needs "
                        "matplotlib (pip install 'blensor[preview]').")
    pv.add_argument("out", metavar="OUT", help="a blensor scan output folder with npz files")
    pv.add_argument("--to", metavar="DIR", default=None, help="where the PNGs go (default OUT/pictures)")
    pv.add_argument("--overwrite", action="store_true",
                    help="replace pictures of the same names already in --to DIR")
    info = sub.add_parser("info", help="list cameras and their sensor settings")
    info.add_argument("blend")
    info.add_argument("--json", action="store_true", help="print one JSON document")
    return ap


def _cluster_options(parser) -> None:
    """``--workers`` and ``--scheduler``: scans on a Dask cluster (:mod:`~blensor_addon.jobs.cluster`)."""
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="scan on a local Dask cluster of N worker processes (default 1: this process, "
                        "no Dask); the files are the same bytes; needs pip install 'blensor[dask]'")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="scan on the Dask cluster at ADDRESS (tcp://HOST:8786, or a scheduler file "
                        "*.json); its workers open "
                        "the .blend at the same absolute path (shared filesystem) and send the results "
                        "here, where the files are written")


def _start_cluster(args, configs=None):
    """A started :class:`~blensor_addon.jobs.cluster.Cluster` for ``--workers N`` (N > 1)
    or ``--scheduler``, else None (Dask is not imported). Started before this process
    imports bpy (see :class:`~blensor_addon.jobs.cluster.Cluster`); each worker then opens
    the .blend (with the ``--sensor`` ``configs``) while this process opens and validates
    it.

    Raises:
        SettingsError (``--workers``/``--scheduler``): out of range, Dask missing, or
        not a .blend (checked before the workers are asked to open it)."""
    if type(args.workers) is int and args.workers == 1 and args.scheduler is None:
        return None  # the default: one process (jobs.cluster not imported, as check_workers would say)
    from .jobs.cluster import Cluster, check_workers
    if check_workers(args.workers, args.scheduler) == 1 and args.scheduler is None:
        return None
    from .io.blendfile import check_blend
    check_blend(Path(args.blend))  # (no bpy) a file the workers may open
    cluster = Cluster(args.workers, args.scheduler)
    if args.scheduler is not None and _SIGNALS is not None:
        _SIGNALS.live()  # reaching a scheduler may wait (20 s, 60 s for a first worker): a signal stops it
        try:
            cluster.start()
        finally:
            _SIGNALS.mode = "note"  # (until Blender is loaded)
    cluster.start()
    import functools
    import uuid
    cluster.token = uuid.uuid4().hex  # this run's scene in the workers (worker_scene)
    cluster.preload(functools.partial(worker_scene, str(Path(args.blend).resolve()), None, configs,
                                      cluster.token))
    return cluster


#: (path, run token, configs) of the scene :func:`worker_scene` has open in this process
_WORKER_SCENE = None


def worker_scene(blend: str, camera: str | None, configs=None, token: str = ""):
    """On a Dask worker (:mod:`~blensor_addon.jobs.cluster`): the .blend at ``blend``
    opened as the command opens it (the add-on registered, Blender's lines dropped), the
    ``--sensor`` ``configs`` applied; returns the camera object named ``camera`` (None:
    only open it, the warm-up :meth:`~.jobs.cluster.Cluster.preload` runs while the
    client validates). The file is opened once per run (``token``, made by the command
    that started the cluster) and process: a long-lived worker of a ``--scheduler``
    cluster opens it again for the next run (the file, its libraries or textures may
    have changed).

    Raises:
        SettingsError: the file cannot be read there, or has no such camera."""
    global _WORKER_SCENE
    from .core.errors import SettingsError
    unreadable = SettingsError("--scheduler", "workers that can read the .blend at the client's path "
                               "(a shared filesystem)", blend)
    key = (blend, token, repr(configs))
    with _stdout_dropped():
        import bpy
        _remove_session_folder_at_exit()
        from .ui import register
        register()
        if _WORKER_SCENE != key:
            _WORKER_SCENE = None
            try:
                with _stderr_held(keep=False):  # (the client says what Blender said of the file)
                    bpy.ops.wm.open_mainfile(filepath=blend)
            except RuntimeError:
                raise unreadable from None
            if configs is not None:
                from .jobs.configs import apply_configs
                apply_configs(configs, bpy.context.scene)
            _WORKER_SCENE = key
    if camera is None:
        return None
    cam = bpy.context.scene.objects.get(camera)
    if cam is None:
        raise SettingsError("--scheduler", "workers that read the client's .blend (it has no camera "
                            f"'{camera}' there)", blend)
    return cam


def _remove_session_folder_at_exit() -> None:
    """In a Dask worker (a ``multiprocessing`` child, which ends with ``os._exit`` and
    skips Blender's teardown): remove Blender's session folder when the process ends
    (:func:`remove_blender_session_folder`, registered once as a ``multiprocessing``
    finalizer, which such a child runs as it exits normally)."""
    global _SESSION_FOLDER_FINALIZER
    if _SESSION_FOLDER_FINALIZER is None:
        import atexit
        import multiprocessing.util
        _SESSION_FOLDER_FINALIZER = multiprocessing.util.Finalize(None, remove_blender_session_folder,
                                                                  exitpriority=0)
        atexit.register(_end_closed_worker)  # (after bpy's import: it runs before Blender's own)


def _end_closed_worker() -> None:
    """At the exit of a Dask worker process that loaded Blender (an ``atexit`` handler,
    registered after ``import bpy``, so it runs before Blender's): a worker process that
    ``dask worker`` started (``multiprocessing`` "spawn": it ends with ``sys.exit`` and
    Python's full teardown) crashed in Blender's teardown with SIGSEGV after its worker had
    closed (the nanny logged "Worker process ... was killed by signal 11"). Once every Dask
    worker of the process has closed (``Status.closed``), the process ends here with exit
    status 0, Blender's session folder removed, as :func:`end_process` ends the command; a
    worker not closed (an error) gets the normal teardown and its own status."""
    try:
        from distributed.core import Status
        from distributed.worker import Worker
        workers = list(Worker._instances)
    except (ImportError, AttributeError):
        return
    if not workers or any(w.status != Status.closed for w in workers):
        return
    end_process(0)


_SESSION_FOLDER_FINALIZER = None


def _config_names() -> str:
    from .io.configs import CONFIG_FORMATS
    return ", ".join(CONFIG_FORMATS) or "(none)"


def _config_help() -> str:
    from .io.configs import CONFIG_FORMATS
    return ", ".join(f"{f.name}: {'/'.join(f.suffixes)}" for f in CONFIG_FORMATS.values()) or "none"


def option_help() -> str:
    """The ``--option FORMAT.KEY=VALUE`` list for ``blensor scan --help``: every option of
    every writer of the registry, from its ``Options`` metadata (meaning, allowed values,
    default)."""
    import dataclasses
    from .io.formats import WRITERS
    lines = ["format options (--option FORMAT.KEY=VALUE):"]
    for name, writer in WRITERS.items():
        for f in dataclasses.fields(writer.Options):
            m = f.metadata["blensor"]
            lines.append(f"  {name}.{f.name}: {m.description}; {m.allowed()} (default {m.format(f.default)})")
    if len(lines) == 1:
        lines.append("  (none)")
    return "\n".join(lines)


def parse_time(text: str) -> tuple[float, float]:
    """``"T0-T1"`` (seconds) -> (t0, t1).

    Raises:
        SettingsError (``--time``) on a malformed interval.
    """
    from .core.errors import SettingsError
    for i in range(1, len(text)):  # the "-" between the two numbers (not an exponent's sign)
        if text[i] == "-" and text[i - 1] not in "eE":
            try:
                return float(text[:i]), float(text[i + 1:])
            except ValueError:
                break
    raise SettingsError("--time", "T0-T1 with times in seconds", text)


def parse_frames(text: str | None, scene) -> range:
    """``"A-B"`` or ``"A"`` -> range of frames (no list is built before the range is
    checked against the scene); None -> the scene's range.

    Raises:
        SettingsError (``--frames``) on a malformed range.
    """
    from .core.errors import SettingsError
    if text is None:
        return range(scene.frame_start, scene.frame_end + 1)
    try:
        if "-" in text.strip()[1:]:
            i = text.index("-", 1)
            a, b = int(text[:i]), int(text[i + 1:])
        else:
            a = b = int(text)
    except ValueError:
        raise SettingsError("--frames", "A-B or A with integer frames", text) from None
    if b < a:
        raise SettingsError("--frames", "A-B with A <= B", text)
    return range(a, b + 1)


@contextmanager
def _stdout_dropped():
    """File descriptor 1 sent to the null device for the block: Blender's C code prints
    "Read blend: ..." there while it loads, past Python's sys.stdout, and stdout is the
    command's output (pure JSON with ``--json``); stderr holds one line on an error
    (the command reports what Blender's warnings said, such as a missing library)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


@contextmanager
def _stderr_held(keep: bool = True):
    """File descriptor 2 sent to a temporary file for the block: Blender's C code prints
    there while it reads, past Python's sys.stderr, and on a file it refuses that may be
    several lines ("Attempt to free nullptr pointer") besides its reason, which comes back
    in the RuntimeError and makes the command's one line. What it printed is passed on
    to stderr when the block ends normally, dropped when it raises. (The crash message of
    :func:`~.raycast.native.crash_message`, set before, goes to the stderr of then.)"""
    import tempfile
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:  # an exception goes on from here, and what was held is dropped
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        text = held.read(1 << 16)
    if text.strip() and keep:  # names from the .blend escaped (process.messages.escape_lines)
        from .process.messages import escape_lines
        sys.stderr.write(escape_lines(text).decode())
        sys.stderr.flush()


#: run in a child process by :func:`_probe_blend`: Blender's reader on the file, then an
#: exit that skips Blender's teardown (bpy 4.2 crashes there on some files, see main())
_PROBE = ("import os, re, shutil, sys\n"
          "import bpy\n"
          "def end(code):\n"  # as remove_blender_session_folder() (this package may not be importable)
          "    d = bpy.app.tempdir.rstrip(os.sep)\n"
          "    if re.fullmatch(r'blender_\\w{6}', os.path.basename(d)) and not os.path.islink(d):\n"
          "        shutil.rmtree(d, ignore_errors=True)\n"
          "    os._exit(code)\n"
          "try:\n"
          "    bpy.ops.wm.open_mainfile(filepath=sys.argv[1])\n"  # as _open_blend opens it
          "except Exception:\n"
          "    end(3)\n"
          "end(0)\n")


def _probe_blend(path: Path) -> None:
    """Open the .blend in a child Blender first (where the crash message of
    :func:`_open_blend` cannot be set): a file that crashes Blender's reader (some
    byte-flipped files do, past every structural check) then crashes the child, not the
    command. About 0.4 s (the child's ``import bpy`` and read) on the demo scene.

    Raises:
        SettingsError (``SCENE.blend``): the child died of a signal other than SIGINT or
            SIGTERM (SIGSEGV, SIGBUS, SIGABRT).
        KeyboardInterrupt: the command got SIGINT or SIGTERM meanwhile.
    """
    import subprocess
    from .core.errors import SettingsError
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if _SIGNALS is not None and _SIGNALS.signum is not None:
        raise KeyboardInterrupt
    if proc.returncode < 0 and -proc.returncode not in (signal.SIGINT, signal.SIGTERM):
        raise SettingsError("SCENE.blend", "a .blend file Blender can read (its reader crashed on this one: "
                            f"{signal.Signals(-proc.returncode).name})", str(path))


_SIGNALS = None  # the command's jobs.signals.Signals while main() runs
#: the console command's process.messages.EscapedStderr (started once Blender has loaded
#: the .blend: Blender's own messages on stderr then come out escaped, as the command's)
_BLENDER_STDERR = None


def say(line: str, err: bool = False) -> None:
    """Print one line of the command's output (``err``: on stderr), names from the .blend
    escaped (:func:`~.core.text.printable`: an escape sequence or newline in an object
    name must not reach the terminal raw)."""
    from .core.text import printable
    print(printable(line), file=sys.stderr if err else sys.stdout)


def _writing_begins() -> None:
    """Note that the command has finished a frame, kept whatever comes next (for the
    interrupt message)."""
    if _SIGNALS is not None:
        _SIGNALS.writing = True


def _open_blend(path: str, libraries: bool = True):
    """Blender with the .blend at ``path`` open (the add-on registered). Blender's own
    lines ("Read blend: ...") are dropped: stdout is the command's output.

    A file that crashes Blender's reader (some corrupt files do, past every structural
    check, and not always the same way) ends the process with exit 2 and the one line
    of a SettingsError (:func:`~.raycast.native.crash_message` while Blender reads it);
    where that cannot be set (no native library, Windows) the file is opened in a child
    Blender first (:func:`_probe_blend`, about 0.4 s).

    Raises:
        SettingsError (``SCENE.blend``): no such file, not a regular file (a FIFO), a
            broken block structure (:func:`~.io.blendfile.check_blend`), a file that
            crashed the child Blender, unreadable, a linked library that is not a
            regular file, or (``libraries``) one that cannot be found: its objects would
            be missing from the scan without a word.
    """
    from .core.errors import SettingsError
    from .core.text import printable
    from .io.blendfile import check_blend
    from .raycast import native
    p = Path(path)
    check_blend(p)  # a regular file, its block structure, its libraries regular files (no FIFO)
    on_crash = native.available() and sys.platform != "win32"
    if not on_crash and "bpy" not in sys.modules:  # (in Blender or after bpy loaded: no child to ask)
        _probe_blend(p.resolve())
    crashed = "a .blend file Blender can read (its reader crashed on this one: \0)"  # \0: the signal
    before, _, after = str(SettingsError("SCENE.blend", crashed, str(path))).partition("\0")
    with _stdout_dropped():
        import bpy
        from .ui import register
        register()
        armed = on_crash and native.crash_message(printable(f"blensor: error: {before}"),
                                                  printable(after) + "\n", EXIT_BAD_INPUT)
        try:
            with _stderr_held():
                bpy.ops.wm.open_mainfile(filepath=str(p.resolve()))
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unreadable"
            # Blender's reason in the allowed text: quoted inside the value, it came out escaped
            raise SettingsError("SCENE.blend", f"a readable .blend file ({msg})", path) from None
        finally:
            if armed:
                native.crash_message(None)
    if _SIGNALS is not None:
        _SIGNALS.live()
    if _BLENDER_STDERR is not None:
        _BLENDER_STDERR.start()
    missing = [lib.filepath for lib in bpy.data.libraries if lib.is_missing] if libraries else []
    if missing:
        raise SettingsError("SCENE.blend", "a .blend whose linked libraries are all found",
                            f"{path} (missing: {', '.join(missing)})")
    return bpy


def _out_dir(args) -> str:
    """``--out`` as an absolute path.

    Raises:
        SettingsError (``--out``): empty (it would be the current folder without a word).
    """
    from .core.errors import SettingsError
    if not args.out.strip():
        raise SettingsError("--out", "a folder path", args.out)
    return os.path.abspath(args.out)


def _camera(bpy, name: str | None):
    from .core.errors import SettingsError, did_you_mean
    scene = bpy.context.scene
    if name is None:
        if scene.camera is None:
            raise SettingsError("--camera", "a camera object (the scene has no scene camera)", None)
        return scene.camera
    obj = scene.objects.get(name)
    cams = sorted(o.name for o in scene.objects if o.type == "CAMERA")
    if obj is None or obj.type != "CAMERA":
        raise SettingsError("--camera", "one of the scene's cameras: " + (", ".join(cams) or "(none)"), name,
                            did_you_mean(name, cams))
    return obj


def camera_axes(cam) -> str:
    """The camera's stored axes choice (the panel's Axes, ``camera.data.blensor.axes``):
    the default of ``--axes``.

    Raises:
        SettingsError (``axes``): a stored value that is not one of the axes.
    """
    from .core.axes import AXES
    from .core.errors import SettingsError
    from .scene.scanner import sensor_props
    props = sensor_props(cam)
    axes = props.axes if props is not None else AXES[0]
    if axes not in AXES:
        raise SettingsError("axes", "one of " + ", ".join(AXES), axes)
    return axes


def split_sets(pairs: list[str], option: str = "--set") -> dict[str, str]:
    """``["NAME=VALUE", ...]`` -> {NAME: VALUE} (text values, parsed later by the
    sensor's metadata).

    Raises:
        SettingsError (``--set``): an item without ``=`` or a name given twice.
    """
    from .core.errors import SettingsError
    out: dict[str, str] = {}
    for item in pairs:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise SettingsError(option, "NAME=VALUE (see 'blensor sensors' for the names)", item)
        if name in out:
            raise SettingsError(option, f"each name once ({name} is given twice)", item)
        out[name] = value.strip()
    return out


def parse_sets(texts: dict[str, str], cam) -> dict:
    """Typed overrides of the camera's sensor (or of ``sensor_type`` if set) from text.

    Raises:
        SettingsError: unknown sensor type, setting name or preset, or a value that is
        not of the setting's kind or out of its range (named, with unit and range).
    """
    import dataclasses
    from .core.errors import SettingsError, did_you_mean
    from .core.sensors import DEFAULT_TYPE, get_sensor
    from .scene.scanner import sensor_props
    props = sensor_props(cam)
    stype = (texts["sensor_type"].strip() if "sensor_type" in texts
             else props.sensor_type if props is not None else DEFAULT_TYPE)
    sensor = get_sensor(stype)
    metas = {f.name: f.metadata["blensor"] for f in dataclasses.fields(sensor.Settings)}
    out: dict = {}
    for name, text in texts.items():
        if name == "sensor_type":
            out[name] = stype
        elif name == "preset" and "preset" in metas:
            sensor.preset_values(text)  # refuses a preset of another type
            out[name] = text
        elif name in metas:
            try:
                out[name] = metas[name].parse(name, text)
            except SettingsError as exc:
                if name in _OPTION_NAMES:  # --set seed=... is not --seed: name what was typed
                    raise SettingsError(f"--set {name}", exc.allowed, exc.value, exc.hint) from None
                raise
        else:  # the name typed is what is wrong: shown, with the closest name
            raise SettingsError(f"--set {name}", f"a setting of sensor type '{stype}': "
                                + ", ".join(sorted(metas)), name, did_you_mean(name, metas))
    return out


def cmd_sensors(args) -> int:
    """``blensor sensors``: every sensor type, its presets and settings (unit, allowed
    range, default), under the heading of their section (``Meta.group``: the sensor's own
    settings first, then each section in declaration order, e.g. "Return physics");
    ``--json``: the same as one JSON document (each setting with its ``group``). Sources are
    named as a reader finds them (:func:`~.core.text.cite`: "Gschwandtner et al. 2011", not
    the code's "seed 000"); a setting no panel shows (``show_if`` on a sentinel value, such
    as ``calibration``, which ``blensor calib import`` sets) has no "used with"."""
    import dataclasses
    from .core.sensors import SENSORS
    from .core.text import cite
    doc = []
    for name, sensor in SENSORS.items():
        by_group: dict[str, list] = {"": []}
        for f in dataclasses.fields(sensor.Settings):
            by_group.setdefault(f.metadata["blensor"].group, []).append(f)
        settings = []
        for f in (f for fs in by_group.values() for f in fs):
            m = f.metadata["blensor"]
            shown = m.show_if and not str(m.show_if[1]).startswith("\0")  # "\0never": set by a command
            settings.append({"name": f.name, "label": m.label, "description": cite(m.description),
                             "unit": m.unit, "kind": m.kind, "allowed": m.allowed(),
                             "default": m.format(f.default), "group": m.group,
                             "used_if": f"{m.show_if[0]}={m.show_if[1]}" if shown else ""})
        doc.append({"type": name, "label": sensor.label, "description": cite(sensor.description),
                    "presets": {k: {"label": p.label, "values": p.values, "source": cite(p.source)}
                                for k, p in sensor.presets.items()},
                    "settings": settings})
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for entry in doc:
        say(f"{entry['type']}: {entry['label']} - {entry['description']}")
        for k, p in entry["presets"].items():  # every preset names its source (datasheet, driver file)
            say(f"  preset {k} ({p['label']})" + (f": {p['source']}" if p["source"] else ""))
        group = ""
        for st in entry["settings"]:
            if st["group"] != group:  # a section's heading
                group = st["group"]
                say(f"  {group}:")
            indent = "    " if group else "  "
            unit = f" [{st['unit']}]" if st["unit"] else ""
            show = f" (used with {st['used_if']})" if st["used_if"] else ""
            say(f"{indent}{st['name']}{unit} = {st['default']}: {st['description']}; {st['allowed']}{show}")
    return 0


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``"1 sweep"``, ``"3 sweeps"``, ``"0 sweeps"``: ``n`` and ``word`` in the singular only
    for exactly one (``plural``: a plural that is not ``word + "s"``)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def info_value(v):
    """A setting's value as ``blensor info`` prints it: a float that a 32-bit float property
    stores (Blender's FloatProperty) as the shortest decimal that gives that float32 back
    (``0.075``, not ``0.07500000298023224``), a list or tuple element by element, anything
    else unchanged."""
    import numpy as np
    if isinstance(v, float) and np.isfinite(v) and float(np.float32(v)) == v:
        return float(np.format_float_positional(np.float32(v), unique=True, trim="0"))
    if isinstance(v, (list, tuple)):
        return type(v)(info_value(x) for x in v)
    return v


def _interrupted(job) -> bool:
    """True (and the one line on stderr) if a signal cancelled the range-scan ``job``."""
    if job.status == "cancelled" and job.signal is not None:
        if _SIGNALS is not None:  # the run is over: a further signal (a local cluster still stops) is noted
            _SIGNALS.quiet()
        total, unit = job.total, job.packets  # a rig's: "packet" (its members' may differ)
        say(f"blensor: interrupted by {signal.Signals(job.signal).name} after {len(job.done)} of "
            f"{counted(total, unit)}; finished {unit}s kept in {job.out} (manifest: cancelled)", err=True)
        return True
    return False


def cmd_depth(args) -> int:
    """``blensor depth``: depth maps of frames (see :mod:`blensor_addon.jobs.depth_export`)."""
    cluster = _start_cluster(args)  # (before anything imports bpy)
    try:
        return _depth(args, cluster)
    finally:
        _close_cluster(cluster)


def _depth(args, cluster) -> int:
    """:func:`cmd_depth` with the cluster started (or None)."""
    from .core.errors import SettingsError
    from .jobs.depth_export import export_depth, parse_depth_formats
    from .raycast import BACKENDS
    formats = parse_depth_formats(args.formats)
    if args.backend not in BACKENDS:
        raise SettingsError("--backend", "one of " + ", ".join(BACKENDS), args.backend)
    texts = split_sets(args.set)
    if texts.get("sensor_type", "depth") != "depth":
        raise SettingsError("sensor_type", "depth (blensor depth always uses the depth camera)",
                            texts["sensor_type"])
    texts["sensor_type"] = "depth"
    bpy = _open_blend(args.blend)
    cam = _camera(bpy, args.camera)
    overrides = parse_sets(texts, cam)
    frames = parse_frames(args.frames, bpy.context.scene)
    t0 = time.perf_counter()
    job = export_depth(cam, frames, _out_dir(args), formats, backend=args.backend,
                       overwrite=args.overwrite, progress=lambda done, total, entry: entry is not None
                       and _writing_begins(), **_cluster_kwargs(cluster, args, cam), **overrides)
    if _interrupted(job):
        return EXIT_INTERRUPTED
    if args.quiet < 2:  # the summary stays with one --quiet
        say(f"blensor: {counted(len(job.done), 'depth map')} ({','.join(formats)}), "
            f"{time.perf_counter() - t0:.2f} s "
            f"-> {_out_dir(args)}")
    return 0


def cmd_motion(args) -> int:
    """``blensor motion``: poses and boxes of frames (see :mod:`blensor_addon.jobs.motion_export`)."""
    from .core.errors import SettingsError
    from .jobs.motion_export import parse_motion_formats
    try:
        formats = parse_motion_formats(args.formats)
    except SettingsError as exc:  # (named "format" there) say it the way the user spelled it
        raise SettingsError(args.formats_option, exc.allowed, exc.value, exc.hint) from None
    bpy = _open_blend(args.blend)
    frames = parse_frames(args.frames, bpy.context.scene)
    from .jobs.motion_export import export_motion
    objects = [n.strip() for n in args.objects.split(",") if n.strip()] if args.objects else None
    files = export_motion(frames, _out_dir(args), formats, objects, overwrite=args.overwrite)
    if args.quiet < 2:  # the summary stays with one --quiet
        say(f"blensor: motion of {counted(len(frames), 'frame')}, {counted(len(files), 'file')} -> "
            f"{_out_dir(args)}")
    return 0


def cmd_scan(args) -> int:
    """``blensor scan``: validate, open the file, run the range scan; returns 0.

    Raises:
        SettingsError: bad option or setting (the caller prints it and exits 2).
    """
    from .core.settings import FRAMES_OF_REFERENCE
    from .core.errors import SettingsError
    from .io.formats import parse_formats
    from .raycast import BACKENDS
    # cheap checks first, before Blender loads the file
    formats = parse_formats(args.formats)
    if args.backend not in BACKENDS:
        raise SettingsError("--backend", "one of " + ", ".join(BACKENDS), args.backend)
    if args.frame_of_reference not in FRAMES_OF_REFERENCE:
        raise SettingsError("--frame-of-reference", "one of " + ", ".join(FRAMES_OF_REFERENCE),
                            args.frame_of_reference)
    if args.seed is not None and args.seed < 0:
        raise SettingsError("--seed", "an integer >= 0", args.seed)
    from .core.axes import AXES
    if args.axes is not None and args.axes not in AXES:
        raise SettingsError("--axes", "one of " + ", ".join(AXES), args.axes)
    texts = split_sets(args.set)
    interval = None
    if args.time is not None:
        if args.frames is not None:
            raise SettingsError("--time", "either --time or --frames, not both", args.time)
        interval = parse_time(args.time)
    from .io.formats import make_options
    format_options = split_sets(args.option, "--option")
    from .core.timebase import iso, run_start_time
    given = args.start_time is not None or "pcap.start_time" in format_options  # (its alias)
    start, format_options = run_start_time(args.start_time, format_options)
    args.start_time = iso(start) if given else None  # None: the camera's stored one, or the default
    if args.pcd_ascii and "pcd" not in formats:
        raise SettingsError("--pcd-ascii", "given with pcd among --formats", ",".join(formats))
    if args.pcd_ascii and "pcd.ascii" in format_options:
        raise SettingsError("--pcd-ascii", "not given with --option pcd.ascii (one or the other)",
                            f"--pcd-ascii --option pcd.ascii={format_options['pcd.ascii']}")
    make_options(formats, {**format_options, **({"pcd.ascii": True} if args.pcd_ascii
                                                 else {})})  # refuse bad options before loading
    configs = None
    if args.sensor is not None:  # read before Blender loads: a bad file is refused first
        if args.camera is not None or args.all_sensors:
            raise SettingsError("--sensor", "given without --camera and --all-sensors (the file names the "
                                "sensors)", args.sensor)
        from .io.configs import format_of_file
        configs = format_of_file(args.sensor).read(args.sensor)
        skipped = [c for c in configs if not c.enabled]
        # a switched-off sensor (enabled false) is not scanned, and says so when the run starts
        args.sensor_notes = [f"{c.name}: enabled false; not scanned" for c in skipped]
        if len(skipped) == len(configs):
            raise SettingsError("--sensor", "a config file with at least one enabled sensor", args.sensor)
        configs = [c for c in configs if c.enabled]
    elif args.camera is not None and args.all_sensors:
        raise SettingsError("--all-sensors", "given without --camera (one or the other)", args.camera)
    cluster = _start_cluster(args, configs)
    try:
        return _scan(args, formats, texts, interval, format_options, configs, cluster)
    finally:
        _close_cluster(cluster)


def _close_cluster(cluster) -> None:
    """Stop ``cluster`` (a local one's workers; None: nothing) once the job is over, with
    signals only noted meanwhile: a second Ctrl-C during the stop interrupted it, printed a
    second line and left the local cluster's semaphores to the resource tracker."""
    if cluster is None:
        return
    if _SIGNALS is not None:
        _SIGNALS.quiet()
    cluster.close()


def _cluster_kwargs(cluster, args, cam, configs=None) -> dict:
    """``cluster`` and ``open_scene`` for the range job (nothing without a cluster)."""
    if cluster is None:
        return {}
    import functools
    return {"cluster": cluster,
            "open_scene": functools.partial(worker_scene, str(Path(args.blend).resolve()), cam.name, configs,
                                            cluster.token)}


def _scan(args, formats, texts, interval, format_options, configs, cluster) -> int:
    """:func:`cmd_scan` once the options are checked: open the file, scan."""
    from .core.errors import SettingsError
    bpy = _open_blend(args.blend)
    cams = _cameras(bpy, args, configs)
    overrides = {}
    for cam in cams:  # --set applies to every camera of a rig; a refusal names the camera
        try:
            overrides[cam.name] = parse_sets(texts, cam)
        except SettingsError as exc:
            if len(cams) == 1:
                raise
            raise SettingsError(exc.setting, exc.allowed, f"{exc.value} (camera '{cam.name}')",
                                exc.hint) from None
    axes = {cam.name: args.axes if args.axes is not None else camera_axes(cam) for cam in cams}
    if args.start_time is None:  # the first camera's stored time base (the panel's Start time)
        from .ui.props import stored_start_time
        args.start_time = stored_start_time(cams[0].data.blensor)
    frames = parse_frames(args.frames, bpy.context.scene) if interval is None else None
    bar = None

    def progress(done, total, entry):
        nonlocal bar
        if entry is not None:
            _writing_begins()  # a frame is done: it is kept whatever happens next
        if args.quiet:
            return
        if bar is None:  # input validated: only now show the --sensor file's notes and the bar
            for line in args.sensor_notes:
                say(f"blensor: {args.sensor}: {line}", err=True)
            bar = progress_bar(total)
        if entry is not None:
            bar.set_postfix(points=entry["points"])
            bar.update(1)

    t0 = time.perf_counter()
    rig = len(cams) > 1 or args.rig_base is not None
    if rig and cluster is not None:
        raise SettingsError("--workers" if args.scheduler is None else "--scheduler",
                            "1 for a rig (its sensors share one scene evaluation per time: scan it in one "
                            "process, or each camera with --camera NAME on the cluster)",
                            args.scheduler or args.workers)
    try:
        if rig:
            from .jobs.rig_scan import scan_rig
            job = scan_rig(cams, frames, _out_dir(args), formats, args.seed, base=args.rig_base,
                           backend=args.backend, frame_of_reference=args.frame_of_reference,
                           pcd_ascii=args.pcd_ascii, overwrite=args.overwrite, resume=args.resume,
                           progress=progress, options=format_options, axes=axes, time=interval,
                           overrides=overrides, start_time=args.start_time)
        else:
            from .jobs.range_scan import scan_range
            cam = cams[0]
            job = scan_range(cam, frames, _out_dir(args), formats, args.seed, backend=args.backend,
                             frame_of_reference=args.frame_of_reference, pcd_ascii=args.pcd_ascii,
                             overwrite=args.overwrite, resume=args.resume, progress=progress,
                             options=format_options, axes=axes[cam.name], time=interval,
                             start_time=args.start_time, **_cluster_kwargs(cluster, args, cam, configs),
                             **overrides[cam.name])
    finally:
        if bar is not None:
            bar.close()
    dt = time.perf_counter() - t0
    if _interrupted(job):
        return EXIT_INTERRUPTED
    if args.quiet < 2:  # the summary stays with one --quiet
        reused = f", {job.reused} reused" if job.reused else ""
        if rig:
            say(f"blensor: rig of {counted(len(cams), 'sensor')}, {counted(len(job.done), 'packet')}"
                f"{reused}, {counted(job.points, 'point')}, {dt:.2f} s ({job.backend_name}) -> {job.out}")
        else:
            say(f"blensor: {counted(len(job.done), job.packets)}{reused}, {counted(job.points, 'point')}, "
                f"{dt:.2f} s ({job.scanner.backend.name}) -> {job.out}")
    return 0


class PlainProgress:
    """The progress of a run where stderr is no terminal (a log file, a pipe, CI): plain
    lines ``blensor: 3/10 scans, 12345 points`` (the points of the last scan), one each time
    the count reaches another tenth of ``total`` (at most 10 lines), never a carriage
    return; the few methods of :class:`tqdm.tqdm` the range scan uses."""

    def __init__(self, total: int, file=None) -> None:
        self.total, self.n, self.points, self.file = max(int(total), 0), 0, None, file
        self._shown = 0  # tenths printed

    def set_postfix(self, points=None) -> None:
        """Remember the last scan's point count (printed with the next line)."""
        self.points = points

    def update(self, n: int = 1) -> None:
        """Count ``n`` finished scans; print a line when another tenth is reached."""
        self.n += n
        tenth = 10 if self.total <= 0 else min(10, self.n * 10 // self.total)
        if tenth > self._shown or self.n == self.total:
            self._shown = max(tenth, self._shown)
            points = "" if self.points is None else f", {self.points} points"
            print(f"blensor: {self.n}/{self.total} scans{points}", file=self.file or sys.stderr, flush=True)
            if self.n == self.total:
                self._shown = 11  # the last line once

    def close(self) -> None:
        """Nothing to clear (for the ``tqdm`` interface)."""


def progress_bar(total: int):
    """The run's progress on stderr: a :class:`tqdm.tqdm` bar where stderr is a terminal,
    else :class:`PlainProgress` (plain lines, no carriage returns in a log)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is not None and isatty():
        from tqdm import tqdm
        return tqdm(total=total, unit="scan", desc="blensor", file=sys.stderr)
    return PlainProgress(total)


def _has_blensor_settings(obj) -> bool:
    """The camera object has stored BlenSor settings (Blender 4.x keeps them in the data's
    custom properties, 5.0 apart from them: ``bl_system_properties_get``)."""
    if obj.data.get("blensor") is not None:
        return True
    from .compat import stored_idprops
    from .scene.scanner import sensor_props
    props = sensor_props(obj)
    stored = stored_idprops(props) if props is not None else None
    return stored is not None and len(stored.keys()) > 0


def _cameras(bpy, args, configs) -> list:
    """The cameras ``blensor scan`` scans: those the ``--sensor`` file describes (made or
    updated in the open scene, never saved; what it says of them, ``args.sensor_notes``,
    is printed when the run starts), those of ``--camera A,B,C``, every camera with
    BlenSor settings (``--all-sensors``), or the scene camera.

    Raises:
        SettingsError: no such camera, a name twice, no camera with BlenSor settings."""
    from .core.errors import SettingsError
    scene = bpy.context.scene
    if configs is not None:
        from .jobs.configs import apply_configs
        cams, notes = apply_configs(configs, scene)
        args.sensor_notes = [*args.sensor_notes, *notes]  # printed once the run starts
        return cams
    if args.all_sensors:
        cams = [o for o in sorted(scene.objects, key=lambda o: o.name)
                if o.type == "CAMERA" and _has_blensor_settings(o)]
        if not cams:
            raise SettingsError("--all-sensors", "a scene with at least one camera with BlenSor settings",
                                "none in " + str(args.blend))
        return cams
    if args.camera is None or "," not in args.camera:
        return [_camera(bpy, args.camera)]
    names = [n.strip() for n in args.camera.split(",")]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise SettingsError("--camera", "comma-separated camera names, each once", args.camera)
    return [_camera(bpy, n) for n in names]


def cmd_info(args) -> int:
    """``blensor info``: print the scene's frame range and every camera's settings
    (``--json``: one JSON document with ``scene``, ``frame_start``, ``frame_end``,
    ``fps``, ``cameras`` (name, scene_camera, settings or error))."""
    bpy = _open_blend(args.blend, libraries=False)
    from .scene.scanner import read_sensor
    from .core.errors import SettingsError
    scene = bpy.context.scene
    if args.json:
        cams = []
        for obj in sorted((o for o in scene.objects if o.type == "CAMERA"), key=lambda o: o.name):
            entry = {"name": obj.name, "scene_camera": obj == scene.camera}
            try:
                sensor, st = read_sensor(obj)
                entry["sensor_type"] = sensor.name
                entry["settings"] = st.to_dict()
            except SettingsError as exc:
                entry["error"] = str(exc)
            cams.append(entry)
        doc = {"blend_file": bpy.data.filepath, "scene": scene.name, "frame_start": scene.frame_start,
               "frame_end": scene.frame_end, "fps": scene.render.fps / scene.render.fps_base, "cameras": cams}
        print(json.dumps(doc, indent=2, allow_nan=False))
        return 0
    say(f"scene '{scene.name}': frames {scene.frame_start}-{scene.frame_end} at "
        f"{scene.render.fps / scene.render.fps_base:g} fps")
    for obj in sorted((o for o in scene.objects if o.type == "CAMERA"), key=lambda o: o.name):
        mark = " (scene camera)" if obj == scene.camera else ""
        say(f"camera '{obj.name}'{mark}")
        try:
            sensor, s = read_sensor(obj)
            say(f"  sensor_type: {sensor.name}")
            d = s.to_dict()
            if "elevations" in d and len(d["elevations"]) > 4:
                d["elevations"] = f"{len(d['elevations'])} lasers, {min(d['elevations']):.2f}.." \
                                  f"{max(d['elevations']):.2f} deg"
            if d.get("calibration"):  # the imported table's JSON: what it is, not its kilobytes
                from .core.sensors.calibration import LaserTable
                d["calibration"] = "imported: " + LaserTable.from_json(d["calibration"]).summary()
            for k, v in d.items():
                say(f"  {k}: {info_value(v)}")
        except SettingsError as exc:
            say(f"  invalid settings: {exc}")
    return 0


def cmd_calib(args) -> int:
    """``blensor calib import FILE [--camera NAME] SCENE.blend``: read the calibration
    file first (a bad one: exit 2, the .blend untouched), then store its table in the
    camera's ``calibration`` setting and save the .blend atomically
    (:mod:`blensor_addon.jobs.calib_import`)."""
    from .io.calib import read_calibration
    from .jobs.calib_import import save_blend_atomically, store_calibration
    table = read_calibration(args.file)
    bpy = _open_blend(args.blend, libraries=False)
    cam = _camera(bpy, args.camera)
    table = store_calibration(cam, table)  # completed by the camera's preset (jobs.calib_import)
    with _stdout_dropped():  # (Blender prints "Info: Saved copy as ...")
        save_blend_atomically(args.blend)
    stype = cam.data.blensor.sensor_type  # registered: store_calibration refuses a camera without it
    note = "" if stype == "rotating" else f" (its sensor type is {stype}: used once it is rotating)"
    say(f"blensor: calibration {table.summary()} stored in camera '{cam.name}' of {args.blend}{note}")
    return 0


def cmd_config(args) -> int:
    """``blensor config import FORMAT FILE SCENE.blend``: read the file first (a bad one:
    exit 2, the .blend untouched), then create or update a camera per sensor and save the
    .blend atomically. ``blensor config export FORMAT SCENE.blend FILE [--camera A,B]``:
    write the cameras' sensors (each thing the format cannot express named on stderr)."""
    from .io.configs import get_format
    from .jobs.configs import apply_configs, configs_of
    fmt = get_format(args.format)
    if args.config_command == "import":
        configs = fmt.read(args.file)
        bpy = _open_blend(args.blend, libraries=False)
        cams, notes = apply_configs(configs, bpy.context.scene)
        from .jobs.calib_import import save_blend_atomically
        with _stdout_dropped():
            save_blend_atomically(args.blend)
        for line in notes:
            say(f"blensor: {args.file}: {line}", err=True)
        say(f"blensor: {len(cams)} sensors from {args.file} ({fmt.name}) stored in {args.blend}: "
            + ", ".join(c.name for c in cams))
        return 0
    bpy = _open_blend(args.blend, libraries=False)
    args.all_sensors = args.camera is None
    args.quiet = True
    cams = _cameras(bpy, args, None)
    notes = fmt.write(args.file, configs_of(cams))
    for line in notes:
        say(f"blensor: {args.file}: {line}", err=True)
    say(f"blensor: {len(cams)} sensors written to {args.file} ({fmt.name})")
    return 0


def cmd_preview(args) -> int:
    """``blensor preview OUT``: the pictures of an output folder's npz files
    (:func:`~.io.formats.preview.previews_of_folder`); one line on stdout."""
    from .io.formats.preview import previews_of_folder
    written = previews_of_folder(args.out, args.to, overwrite=args.overwrite)
    say(f"blensor: {len(written)} pictures -> {written[0].parent}")
    return 0


COMMANDS = {"scan": cmd_scan, "config": cmd_config, "depth": cmd_depth, "motion": cmd_motion,
            "info": cmd_info, "sensors": cmd_sensors, "calib": cmd_calib, "preview": cmd_preview}


#: options whose value may start with "-" (a negative frame or time): argparse takes
#: "--frames -3--1" for an option "-3--1"; such values are attached ("--frames=-3--1")
_SIGNED_VALUE_OPTIONS = ("--frames", "--time")


def _attach_signed_values(argv: list[str]) -> list[str]:
    """``argv`` with each value of :data:`_SIGNED_VALUE_OPTIONS` that starts with "-"
    and a digit or "." joined to its option, so argparse reads it as the value."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in _SIGNED_VALUE_OPTIONS and i + 1 < len(argv) and argv[i + 1][:2].rstrip("0123456789.") == "-":
            out.append(f"{a}={argv[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``blensor`` console script; returns the exit status (see the
    module docstring). The add-on is unregistered before returning: bpy 4.2 crashes and
    4.5 hangs at interpreter exit while operators or panels are registered. As the
    console command (``argv`` None) it ends the process itself once Blender was loaded
    (:func:`end_process`)."""
    global _SIGNALS, _BLENDER_STDERR
    from .jobs.signals import Signals, arm_watchdog, disarm_watchdog  # (no bpy at import)
    # first (the parser imports the writers): Blender must not see a signal while it loads
    _SIGNALS = Signals("note").install()
    if argv is None:  # the console command: a signal ends it even while Blender is stuck in C
        arm_watchdog()
    if argv is None:  # the console command: Blender's messages escaped once it has loaded
        from .process.messages import EscapedStderr
        _BLENDER_STDERR = EscapedStderr()
    try:
        code = _main(_build_parser().parse_args(_attach_signed_values(sys.argv[1:] if argv is None else
                                                                       [str(a) for a in argv])))
    finally:  # also after a SystemExit of the parser
        disarm_watchdog()
        _SIGNALS.restore()
        _SIGNALS = None
        if _BLENDER_STDERR is not None:  # what Blender printed is passed on before the process ends
            _BLENDER_STDERR.stop()
            _BLENDER_STDERR = None
    if argv is None and "bpy" in sys.modules:
        end_process(code)
    return code


def end_process(code: int) -> None:
    """End the process with ``code`` once the command is done, skipping Python's and
    Blender's teardown: bpy 4.2 crashes there (exit 139) after a complete run on a .blend
    with a Python-expression driver, plain bpy too. Every file of the command is closed
    by now (the jobs close theirs; the add-on is unregistered); stdout and stderr are
    flushed here. Only the console command does this (``main()`` without arguments);
    a caller in the same process gets the code back."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    remove_blender_session_folder()
    os._exit(code)


def remove_blender_session_folder() -> None:
    """Remove the folder Blender made for this process's session
    (``$TMPDIR/blender_XXXXXX``, ``bpy.app.tempdir``) with what it holds, as Blender's
    own exit does (``BKE_tempdir_session_purge``, in the teardown that
    :func:`end_process` skips). Only a folder of that name is removed: where Blender could
    not make one, ``bpy.app.tempdir`` is the temporary folder itself and is left. Nothing
    happens if bpy was never imported; errors are ignored."""
    import re
    import shutil
    bpy = sys.modules.get("bpy")
    try:
        folder = Path(bpy.app.tempdir) if bpy is not None else None
    except (AttributeError, TypeError, ValueError):
        return
    if folder is not None and re.fullmatch(r"blender_\w{6}", folder.name) and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def debug_traceback(exc: BaseException) -> None:
    """With ``BLENSOR_DEBUG=1`` in the environment, print the traceback of ``exc`` on
    stderr (after its one line), and that of a Dask worker where the error or its cause
    came from one (the ``worker_traceback`` text :func:`~.jobs.cluster.scan_packet` adds);
    otherwise nothing. Names from the .blend are escaped as in :func:`say`."""
    if os.environ.get("BLENSOR_DEBUG", "") in ("", "0"):
        return
    import traceback

    from .core.text import printable
    text = "".join(traceback.format_exception(exc))
    seen, e = set(), exc
    while e is not None and id(e) not in seen:  # the error and its causes
        seen.add(id(e))
        if isinstance(getattr(e, "worker_traceback", None), str):
            text += "The worker's traceback (Dask):\n" + e.worker_traceback
        e = e.__cause__ or e.__context__
    for line in text.splitlines():
        print(printable(line), file=sys.stderr)


def _main(args) -> int:
    """:func:`main` after the arguments are parsed."""
    from .core.errors import BlensorError, SettingsError
    try:
        return COMMANDS[args.command](args)
    except BlensorError as exc:
        from .jobs.failures import RunFailed
        if isinstance(exc, RunFailed):  # write errors during the scan: finished frames are kept
            where = f" ({exc.filename})" if exc.filename else ""
            say(f"blensor: error: writing failed: {exc.strerror or exc}{where}; {exc.kept()}", err=True)
            debug_traceback(exc)
            return EXIT_FAILED
        if not isinstance(exc, SettingsError):  # e.g. --backend native without the library
            say(f"blensor: error: {exc}", err=True)
            debug_traceback(exc)
            return EXIT_FAILED
        shown = exc
        if exc.setting in _OPTION_NAMES:  # say it the way the command line spells it
            shown = SettingsError("--" + exc.setting.replace("_", "-"), exc.allowed, exc.value, exc.hint)
        say(f"blensor: error: {shown}", err=True)
        debug_traceback(exc)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a write error outside a range scan's pipeline (motion export)
        where = f" ({exc.filename})" if exc.filename else ""
        say(f"blensor: error: writing failed: {exc.strerror or exc}{where}; finished files are kept",
            err=True)
        debug_traceback(exc)
        return EXIT_FAILED
    except KeyboardInterrupt:
        _SIGNALS.quiet()  # what follows (the message, the add-on's unregistration) is not interrupted
        name = signal.Signals(_SIGNALS.signum).name if _SIGNALS.signum is not None else "SIGINT"
        kept = "finished frames kept (manifest: cancelled)" if _SIGNALS.writing else "nothing written"
        say(f"blensor: interrupted by {name}; {kept}", err=True)
        return EXIT_INTERRUPTED
    finally:
        _SIGNALS.quiet()
        from .ui import unregister
        unregister()


if __name__ == "__main__":
    sys.exit(main())
