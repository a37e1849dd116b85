"""Range scans: scan the packets of one camera over a frame range (or time interval) into
files; the job that the CLI (``blensor scan``, ``blensor depth``), :func:`scan_range`
and the panel's modal operator run.

:class:`RangeScanJob` puts the parts together, each with one responsibility:

- the packet plan (:mod:`~blensor_addon.jobs.plan`, pure): scene frames or a time
  interval -> packets, from the sensor's capabilities and the writers' needs;
- the output folder (:class:`~blensor_addon.io.outdir.OutputFolder`): lock, refusal of
  a used folder, overwrite/resume, the manifest's schedule;
- the pipeline (:class:`~blensor_addon.jobs.pipeline.Pipeline`): scanner -> writers on
  a writer thread, the trajectory and the manifest being writers too
  (:mod:`~blensor_addon.jobs.run_files`); typed failures
  (:mod:`~blensor_addon.jobs.failures`).

Everything is validated (settings, plan, formats, frames, transforms, class labels, the
folder, resume) before anything of an earlier run is deleted. Every file appears only
complete (temporary name + rename); a cancelled or failed scan keeps every finished
packet, finished multi-frame files (a terminated ``scan.evd``) and a manifest whose
``status`` says what happened.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import bpy

from ..core.classes import semantic_of_objects
from ..core.errors import OutputError, SettingsError
from ..core.timebase import PCAP_ALIAS, iso, run_start_time
from ..core.version import __version__
from ..io.formats import WRITERS, RunInfo, make_options, output_patterns, parse_formats
from ..io.outdir import OutputFolder, range_run_files
from ..scene.scanner import Scanner, frame_time
from . import plan as planning
from .failures import RunInterrupted, writer_failure
from .pipeline import LocalScanner, PacketScanner, Pipeline, WriterThread
from .run_files import Entry, ManifestWriter, TrajectoryWriter
from .signals import Signals

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from ..io.formats import Writer
    from ..scene.rig import RigSampler
    from .cluster import Cluster, RemoteScanner


def check_frames(scene: Any, frames: Iterable[int] | None) -> list[int]:
    """Validate frame numbers against the scene's range (:func:`.plan.check_frames`).

    Raises:
        SettingsError (``frames``): empty, not integers, a frame twice, or outside
            frame_start..frame_end.
    """
    return planning.check_frames(frames, scene.frame_start, scene.frame_end)


def check_time_interval(scene: Any, interval: Iterable[float]) -> tuple[float, float]:
    """Validate a time interval ``(t0, t1)`` s against the scene's frames (frame ``f``
    spans ``[f, f + 1) * frame_time``).

    Raises:
        SettingsError (``time``): not two finite numbers t0 < t1 within the scene's frames.
    """
    ft = frame_time(scene)
    return planning.check_time_interval(interval, scene.frame_start * ft, (scene.frame_end + 1) * ft)


def output_path(out_dir: object) -> Path:
    """``out_dir`` as a path (``//``: relative to the .blend, as Blender's paths).

    Raises:
        SettingsError (``out``): not a str or path, or empty (it would be the current
            folder without a word).
    """
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir).strip():
        raise SettingsError("out", "a folder path", out_dir)
    return Path(bpy.path.abspath(str(out_dir))) if str(out_dir).startswith("//") else Path(str(out_dir))


#: ``progress(scanned, total, entry)`` of :func:`scan_range`: entry None before the first packet
Progress = Callable[[int, int, "Entry | None"], object]
_Job = TypeVar("_Job", bound="SteppedJob")

#: manifest keys that must match for ``resume`` to reuse an earlier run's packets
RESUME_KEYS = ("camera", "sensor_type", "sensor", "seed", "backend", "frame_of_reference", "axes", "formats",
               "options", "packets", "start_time")


@dataclass(frozen=True)
class RangeScanSpec:
    """What a range scan of one camera scans and writes: its input validated once, by
    this one constructor, whoever makes it (the ``blensor scan`` command through
    :func:`scan_range`, the Python API, the panel's operator, a rig for each of its
    cameras); :class:`RangeScanJob` takes it whole. Frozen: a value never changes after
    its checks.

    Args (``camera``, ``frames``, ``out_dir`` positional, the rest by keyword; as
    :func:`scan_range`):
        camera: the camera object. frames: scene frame numbers (checked against the scene
        by the job's plan), or None with ``time``. out_dir: the output folder.
        formats: format names or a comma-separated str; a tuple of names once checked.
        seed, backend, frame_of_reference, overwrite, resume, axes, time, start_time,
        resumable: as :func:`scan_range`. overrides: setting name -> value over the
        camera's stored settings. options: format options (``{"pcd.ascii": True}``).
        pcd_ascii: the same as the option ``pcd.ascii``.
        Once checked, ``options`` is a dict holding ``pcd_ascii`` as ``pcd.ascii``
        (``pcd_ascii`` then False) and without ``pcap.start_time`` (then ``start_time``),
        so the checks of a spec made again from its fields (``dataclasses.replace``) give
        the same spec.
    Attributes (made by the checks):
        start_ns: int, UNIX ns of scene time 0 (:func:`~blensor_addon.core.timebase.run_start_time`).
        format_options: format -> its validated options dataclass
        (:func:`~blensor_addon.io.formats.make_options`).
    Raises:
        SettingsError: ``formats``, ``pcd_ascii``/``overwrite``/``resume`` (not a bool),
        ``overwrite`` with ``resume``, ``options`` (not a dict; an option named
        ``FORMAT.OPTION``), ``start_time``, ``out`` (not a folder path), in this order.
        The camera, the settings, ``backend``, ``axes`` and ``frame_of_reference`` are
        checked by the job's :class:`~blensor_addon.scene.scanner.Scanner`, the frames
        by its plan.
    """

    camera: Any
    frames: Iterable[int] | None
    out_dir: str | os.PathLike[str]
    _: KW_ONLY
    formats: Sequence[str] = ("npz",)
    seed: int | None = None
    backend: str = "auto"
    frame_of_reference: str = "sensor"
    pcd_ascii: bool = False
    overwrite: bool = False
    resume: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] | None = None
    axes: str = "ros"
    time: tuple[float, float] | None = None
    #: the time base: ISO 8601 or UNIX s of scene time 0 (None: the default,
    #: :mod:`blensor_addon.core.timebase`)
    start_time: str | float | None = None
    #: whether the caller offers ``resume`` (a depth export does not): the refusal of a
    #: used folder names it only then
    resumable: bool = True
    start_ns: int = field(init=False, default=0)
    format_options: dict[str, DataclassInstance] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:  # (frozen: set once, here)
            object.__setattr__(self, name, value)
        formats = parse_formats(self.formats)
        put("formats", formats)
        for name in ("pcd_ascii", "overwrite", "resume"):
            if not isinstance(getattr(self, name), bool):
                raise SettingsError(name, "True or False", getattr(self, name))
        if self.overwrite and self.resume:
            raise SettingsError("overwrite", "False with resume=True (overwrite deletes what resume keeps)",
                                True)
        if not isinstance(self.options, (dict, type(None))):
            raise SettingsError("options", "a dict of format options, e.g. {'pcd.ascii': True}", self.options)
        start_ns, opts = run_start_time(self.start_time, self.options, "start_time")
        if self.options is not None and PCAP_ALIAS in self.options:  # the time base's other name
            put("start_time", self.options[PCAP_ALIAS])
        if self.pcd_ascii and "pcd" in formats:
            if "pcd.ascii" in opts:
                raise SettingsError("pcd_ascii", "not given with the option pcd.ascii (one or the other)",
                                    f"pcd_ascii and pcd.ascii={opts['pcd.ascii']}")
            opts["pcd.ascii"] = True
            put("pcd_ascii", False)  # (held by the option now)
        put("format_options", make_options(formats, opts))
        put("options", opts)
        put("start_ns", start_ns)
        put("overrides", dict(self.overrides or {}))
        output_path(self.out_dir)

    def scanner_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~blensor_addon.scene.scanner.Scanner` (this
        process's, and a cluster's workers')."""
        return dict(backend=self.backend, seed=self.seed, frame_of_reference=self.frame_of_reference,
                    overrides=dict(self.overrides), axes=self.axes)


@dataclass(frozen=True)
class RigMember:
    """What makes a :class:`RangeScanJob` a rig's member (:mod:`~blensor_addon.jobs.rig_scan`):
    the rig's shared :class:`~blensor_addon.scene.rig.RigSampler`, writer constructors by
    format (the rig's one bag), the writer thread shared by the rig's members (None: each
    its own). A member stops after validating (the rig calls :meth:`RangeScanJob.start`
    once every member is validated) and leaves the transforms to the rig (it checks every
    camera in one pass)."""

    sampler: RigSampler
    writer_factories: Mapping[str, Callable[..., Writer]] = field(default_factory=dict)
    writing: WriterThread | None = None


class SteppedJob:
    """A run advanced one packet at a time over one or more pipelines (a range scan's one,
    a rig's members'): the progress every such job shows, and what :func:`run_job` and
    the panel's operator drive (``step``, ``finish``). Subclasses give :meth:`_pipelines`
    (once started), ``folder`` and ``plans``."""

    folder: OutputFolder | None
    #: the signal that stopped the run (set by :func:`run_job`), or None
    signal: int | None = None
    #: what a packet is called in messages: ``"sweep"`` or ``"frame"`` (a range job's plan
    #: kind, as in its manifest), ``"packet"`` where they may differ (a rig's members)
    packets: str = "packet"

    def _pipelines(self) -> list[Pipeline]:
        raise NotImplementedError

    @property
    def plans(self) -> list[planning.Plan]:
        """The packet plans (one per pipeline)."""
        raise NotImplementedError

    @property
    def out(self) -> Path:
        """The output folder."""
        assert self.folder is not None, "the job's folder is open once it is constructed"
        return self.folder.path

    @property
    def done(self) -> list[Entry]:
        """Manifest entries of the finished packets (their files are on disk)."""
        return [e for p in self._pipelines() for e in p.done]

    @property
    def points(self) -> int:
        """Points written so far."""
        return sum(p.manifest.points for p in self._pipelines())

    @property
    def reused(self) -> int:
        """Packets reused from the earlier run (``resume``)."""
        return sum(p.reused for p in self._pipelines())

    @property
    def remaining(self) -> int:
        """Packets not scanned yet."""
        return sum(p.remaining for p in self._pipelines())

    @property
    def scanned(self) -> int:
        """Packets scanned (or reused) so far; their files may still be being written."""
        return sum(p.scanned for p in self._pipelines())

    @property
    def total(self) -> int:
        """Packets of the plans."""
        return sum(len(plan) for plan in self.plans)

    def step(self) -> Entry:
        """Scan the next packet; returns its manifest entry."""
        raise NotImplementedError

    def finish(self, status: str = "complete", bad_input: bool = False,
               error: BaseException | None = None, stopped: Callable[[], bool] | None = None) -> Path | None:
        """End the run with ``status`` (see :meth:`RangeScanJob.finish`)."""
        raise NotImplementedError


class RangeScanJob(SteppedJob):
    """A range scan advanced one packet at a time (the UI's modal operator steps it; the
    CLI and :func:`scan_range` loop over it).

    The folder is locked for the run; ``manifest.json`` is written when the job starts
    (status ``running``), after packets on the folder's schedule
    (:meth:`~blensor_addon.io.outdir.OutputFolder.manifest_due`: every packet at first,
    then O(log n) times, by packets and by time) and at the end, so even a killed
    run (SIGKILL) leaves a manifest listing finished packets, which ``resume`` reuses
    after verifying their files. A packet's files appear together after all of them were
    written, or not at all.

    Args:
        spec: the :class:`RangeScanSpec` (validated).
        member: a rig's member (:class:`RigMember`), or None.
        cluster: scale-out: a started :class:`~blensor_addon.jobs.cluster.Cluster` whose
            workers scan the packets (this process validates, writes and keeps the
            manifest), with ``open_scene``, the picklable callable with which a worker
            opens the scene (() -> the camera object).
    Attributes:
        spec: the spec. camera_object: its camera.
        plan: the :class:`~blensor_addon.jobs.plan.Plan` (``plan.packets``: what is
            scanned). packets: its kind, ``"sweep"`` or ``"frame"`` (as in the manifest).
        out: the output folder (Path). scanner: the :class:`Scanner`.
        done, points, reused, status, remaining, scanned, total: progress (properties,
        :class:`SteppedJob`).
    Raises (on construction; nothing is written and nothing of an earlier run is
    deleted on bad input):
        SettingsError: bad camera, setting, frames, formats, class label or output
        folder, a folder in use by another run, or holding another run's files.
        OutputError: the folder could not be set up (full disk).
    """

    def __init__(self, spec: RangeScanSpec, *, member: RigMember | None = None,
                 cluster: Cluster | None = None, open_scene: Callable[[], Any] | None = None) -> None:
        if not isinstance(spec, RangeScanSpec):
            raise TypeError(f"RangeScanJob takes a RangeScanSpec, not {type(spec).__name__}")
        self.spec, self.member, self.cluster, self.open_scene = spec, member, cluster, open_scene
        self.camera_object = spec.camera
        if cluster is not None and (open_scene is None or member is not None):
            raise SettingsError("workers", "1 for a rig or without a scene loader (a cluster scans one "
                                "camera of a saved .blend)", cluster.workers)
        self.scene = bpy.context.scene
        self._old_frame = self.scene.frame_current
        self.scanner = Scanner(spec.camera, backend=spec.backend, seed=spec.seed,
                               frame_of_reference=spec.frame_of_reference, overrides=dict(spec.overrides),
                               axes=spec.axes, packet_hashes=True,
                               rig=member.sampler if member is not None else None)
        self.folder: OutputFolder | None = None
        self.pipeline: Pipeline | None = None
        self.remote: RemoteScanner | None = None  # the cluster's stand-in for the scanner
        self._writers: list[Writer] = []  # made by _build_pipeline; discarded if a later one fails
        self._reuse: dict[int, Entry] = {}
        self._guard(self._validate)
        if member is None:
            self.start()

    # What the job was asked, as the Python API's callers read it (``scan_range(...).frames``):
    # the spec's, read-only.
    @property
    def frames(self) -> Iterable[int] | None:
        """The frames asked for (None: a ``time`` interval was)."""
        return self.spec.frames

    @property
    def time(self) -> tuple[float, float] | None:
        """The time interval asked for, s (None: frames were)."""
        return self.spec.time

    @property
    def out_dir(self) -> str | os.PathLike[str]:
        """The output folder as given."""
        return self.spec.out_dir

    @property
    def formats(self) -> Sequence[str]:
        """The formats written."""
        return self.spec.formats

    def _guard(self, fn: Callable[[], None]) -> None:
        """Run a set-up phase; on failure undo the set-up (nothing of the run is left)."""
        try:
            fn()
        except OSError as exc:  # setting up the folder failed: nothing of the run is left
            self._abandon_setup()
            if isinstance(exc, OutputError):
                raise
            raise OutputError(exc.errno, f"cannot set up the output ({exc.strerror})",
                              exc.filename or str(self.spec.out_dir)) from exc
        except BaseException:
            self._abandon_setup()
            raise

    def _validate(self) -> None:
        self.plan = self._plan()
        self.packets = self.plan.kind
        self._validate_scene()
        self.folder = self._open_folder()
        self._reuse = self._resumable()

    def start(self) -> None:
        """Prepare the folder (only now is anything of an earlier run deleted), build the
        pipeline and write the first manifest. Called by the constructor unless the job
        is a rig's member (the rig starts its members once all of them are validated).

        Raises:
            OutputError: the folder could not be set up (the run's set-up is undone)."""
        def begin() -> None:
            reuse = self._reuse
            self._open().prepare()
            self._note_rescan(reuse)
            self.pipeline = self._build_pipeline(reuse)
            self.pipeline.manifest.start()
        self._guard(begin)

    def _open(self) -> OutputFolder:
        """The output folder (open once the job is validated)."""
        assert self.folder is not None, "the job's folder is open once it is validated"
        return self.folder

    def abandon(self) -> None:
        """Give up a job that was validated but not started, or started and not finished
        (a rig member whose sibling failed): writers discarded, the folder released."""
        self._abandon_setup()

    # -- validation (nothing touched) ------------------------------------------------------

    def _plan(self) -> planning.Plan:
        s = self.scanner.settings
        return planning.plan_range(
            frame_start=self.scene.frame_start, frame_end=self.scene.frame_end,
            frame_time=frame_time(self.scene), caps=self.scanner.capabilities, packets=s.packets,
            continuous=s.time_model == "continuous",
            needs={f: WRITERS[f].needs for f in self.spec.formats},
            frames=self.spec.frames if self.spec.time is None else None, time=self.spec.time,
            sensor=self.scanner.sensor_type)

    def _validate_scene(self) -> None:
        """The scan's own checks, before the folder is touched: the ray budget, the
        transforms of the sensor and the scanned objects at every scene frame of the plan
        (finite and within reach: :meth:`Scanner.check_transforms`) and every object's
        class label."""
        self.scanner.check_budget(self.plan.packets[0])
        if self.member is None:  # a rig checks every camera's in one pass
            self.scanner.check_transforms(self.plan.scene_frames())
        semantic_of_objects(self.scanner.extractor.table.table)  # an unknown blensor_label

    def _open_folder(self) -> OutputFolder:
        folder = OutputFolder(output_path(self.spec.out_dir), manifest="manifest.json",
                              patterns=output_patterns(), listed=range_run_files)
        self.folder = folder
        folder.open()
        if self.member is None and (folder.path / "rig.json").exists():
            raise SettingsError("out", "a folder that is not a rig's (it holds rig.json: scan the rig again, "
                                "with --overwrite to replace it, or choose another folder)", str(folder.path))
        for f in self.spec.formats:  # before anything of an earlier run is deleted
            WRITERS[f].check_folder(folder.path)
        folder.check(overwrite=self.spec.overwrite, resume=self.spec.resume, resumable=self.spec.resumable)
        return folder

    def _static(self) -> dict[str, Any]:
        """The manifest's fields that stay the same during the run."""
        return {
            "blensor_version": __version__,
            "blender_version": bpy.app.version_string,
            "blend_file": bpy.data.filepath,
            "camera": self.camera_object.name,
            "sensor_type": self.scanner.sensor_type,
            "sensor": self.scanner.settings.to_dict(),
            "seed": int(self.scanner.settings.seed),
            "backend": self.scanner.backend.name,
            "frame_of_reference": self.spec.frame_of_reference,
            "axes": self.spec.axes,
            "formats": list(self.spec.formats),
            "options": {f: dataclasses.asdict(o) for f, o in self.spec.format_options.items()},
            "packets": self.plan.kind,  # "sweep": one output per full sweep; "frame": per scene frame
            "start_time": iso(self.spec.start_ns),  # the time base: the absolute instant of scene time 0
            "packet_time": self.plan.packet_time,  # s per packet: the sweep period or the frame time
            "time_model": self.scanner.settings.time_model,
            "frames_requested": self.plan.requested,  # [first, last], a frame list, or {"time": [t0, t1]}
        }

    def _resumable(self) -> dict[int, Entry]:
        """Entries of the earlier run's manifest by packet index, if its settings match
        (``resume``; empty otherwise).

        Raises:
            SettingsError (``resume``): earlier outputs without a readable manifest, or
                other settings (named). SettingsError (``frames`` or ``time``): a plan
                without one of the earlier run's finished packets (:meth:`_check_range`:
                resume never deletes nor overwrites them).
        """
        if not self.spec.resume:
            return {}
        folder = self._open()
        old = folder.earlier
        path = folder.path / "manifest.json"
        if old is None:
            if not folder.existing():
                return {}  # nothing to resume: a fresh run
            raise SettingsError("resume", "a folder whose manifest.json is readable", str(path))
        # as the manifest stores them (JSON: tuples are lists), so equal settings compare equal
        mine = json.loads(json.dumps(self._static()))
        for key in RESUME_KEYS:
            a, b = old.get(key), mine[key]
            if a != b:
                where = key
                while isinstance(a, dict) and isinstance(b, dict):  # name the settings that differ
                    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    if len(keys) != 1:
                        where = f"{where} ({', '.join(keys)})"
                        a, b = ({k: d.get(k) for k in keys} for d in (a, b))
                        break
                    where, a, b = f"{where}.{keys[0]}", a.get(keys[0]), b.get(keys[0])
                raise SettingsError("resume", f"a folder scanned with the same {where}",
                                    f"{a!r} in {path}, {b!r} now")
        reuse = {e["frame"]: e for e in old.get("frames") or [] if isinstance(e, dict)
                 and isinstance(e.get("frame"), int)}  # (an edited manifest's other entries: not reused)
        self._check_range(old, reuse)
        return reuse

    def _check_range(self, old: dict[str, Any], reuse: dict[int, Entry]) -> None:
        """``resume`` keeps every finished packet of the earlier run (manifest ``old``,
        its entries ``reuse`` by packet index): a plan that leaves one out is refused, as
        it would delete it or, where files are numbered by their place in the run (KITTI),
        write other packets over it.

        Raises:
            SettingsError (``frames``, or ``time`` when given): naming the packets the
            folder holds and the range the earlier run asked for.
        """
        planned = set(self.plan.indices)
        held = sorted(k for k, e in reuse.items() if e.get("files"))
        if all(k in planned for k in held):
            return
        kind = old.get("packets") if old.get("packets") in ("sweep", "frame") else "packet"
        asked = old.get("frames_requested")
        if (isinstance(asked, dict) and isinstance(asked.get("time"), list) and len(asked["time"]) == 2
                and all(isinstance(t, (int, float)) for t in asked["time"])):
            earlier = f"--time {asked['time'][0]:g}-{asked['time'][1]:g}"
        elif isinstance(asked, list) and asked and all(isinstance(f, int) for f in asked):
            # [first, last] of a range, else the frames (plan.Plan.requested)
            earlier = "--frames " + (f"{asked[0]}-{asked[1]}" if len(asked) == 2 else _ranges(sorted(asked)))
        else:
            earlier = "the earlier run"
        if self.spec.time is not None:
            now = f"{self.spec.time[0]:g}-{self.spec.time[1]:g}"
        else:
            now = _ranges(sorted({int(f) for f in self.spec.frames or ()}))
        raise SettingsError("frames" if self.spec.time is None else "time",
                            f"a range holding the earlier run's finished packets (--resume keeps them: this "
                            f"folder holds {kind}s {_ranges(held)} of {earlier}; resume with a range around "
                            "them, or use --overwrite to replace them)", now)

    def _note_rescan(self, reuse: dict[int, Entry]) -> None:
        """Say in one line (stderr) that ``resume`` rescans the earlier run's packets when
        a format writes files over the whole run (KITTI's poses and times, a bag, a
        capture, EVD: :attr:`Writer.multi_frame`), which need every packet's scan; the
        pipeline reuses none then (:meth:`Pipeline._check_reuse`)."""
        multi = [f for f in self.spec.formats if WRITERS[f].multi_frame]
        if not (self.spec.resume and reuse and multi):
            return
        import sys
        n = len(reuse)
        print(f"blensor: note: --resume rescans the {n} packet{'s' if n != 1 else ''} of the earlier run: "
              f"{', '.join(multi)} write{'s' if len(multi) == 1 else ''} files over the whole run that need "
              "every packet's scan; the files are the bytes of an uninterrupted run", file=sys.stderr)

    def _run_info(self) -> RunInfo:
        """What the writers know of the run."""
        ind = self.plan.indices
        return RunInfo(camera=self.camera_object.name, sensor_type=self.scanner.sensor_type,
                       sensor=self.scanner.settings.to_dict(), seed=int(self.scanner.settings.seed),
                       frame_time=self.plan.packet_time, start_ns=self.spec.start_ns,
                       frames=range(ind[0], ind[-1] + 1) if ind == list(range(ind[0], ind[-1] + 1)) else ind)

    def _build_pipeline(self, reuse: dict[int, Entry]) -> Pipeline:
        run = self._run_info()
        folder = self._open()
        writers: list[Writer] = []
        self._writers = writers  # discarded if a later constructor fails
        for f in self.spec.formats:
            make = self.member.writer_factories.get(f, WRITERS[f]) if self.member is not None else WRITERS[f]
            try:
                writers.append(make(folder.path, self.spec.format_options[f], run))
            except Exception as exc:  # sqlite3's 'database or disk is full' opening a bag: a write error
                failure = writer_failure(exc, f, folder.path)
                if failure is None or failure is exc:
                    raise
                raise failure from exc
        objects: Callable[[], list[dict[str, Any]]] = lambda: self.scanner.extractor.table.table  # noqa: E731
        scanner: PacketScanner = LocalScanner(self.scanner)
        if self.cluster is not None:
            scanner = self.remote = self._remote_scanner(run, self.cluster)
            objects = self.remote.objects
        manifest = ManifestWriter(folder, self._static(), objects)
        return Pipeline(scanner, self.plan, folder, writers,
                        TrajectoryWriter(folder.path, self.plan.packet_time), manifest, reuse, objects,
                        writing=self.member.writing if self.member is not None else None)

    def _remote_scanner(self, run: RunInfo, cluster: Cluster) -> RemoteScanner:
        """The cluster's stand-in for the scanner (:mod:`~blensor_addon.jobs.cluster`): workers
        scan and encode the per-frame formats; the multi-frame ones are written here."""
        import uuid

        from .cluster import RemoteScanner, WorkerTask
        assert self.open_scene is not None, "a cluster's job has a scene loader (checked on construction)"
        encode: dict[str, object] = {f: self.spec.format_options[f] for f in self.spec.formats
                                     if not WRITERS[f].multi_frame}
        task = WorkerTask(
            key=uuid.uuid4().hex, open_scene=self.open_scene,
            scanner=self.spec.scanner_options(),
            encode=encode, run=run, folder=str(self._open().path), full=len(encode) < len(self.spec.formats),
            versions=(__version__, bpy.app.version_string))
        return RemoteScanner(cluster, self.scanner, task)

    def _abandon_setup(self) -> None:
        """Undo a set-up that failed: writers discarded, the folder released, and the
        folder removed if this run made it and it is still empty."""
        if self.pipeline is not None:
            self.pipeline.abandon()
        for w in self._writers:
            w.discard()
        self._release()
        if self.folder is not None:
            self.folder.remove_if_created_and_empty()

    def _release(self) -> None:
        if self.remote is not None:
            self.remote.close()
        if self.folder is not None:
            self.folder.release()
        self.scanner.close()

    # -- progress (SteppedJob: out, done, points, reused, remaining, scanned, total) -----------

    def _started(self) -> Pipeline:
        assert self.pipeline is not None, "the job is started (its pipeline built)"
        return self.pipeline

    def _pipelines(self) -> list[Pipeline]:
        return [self._started()]

    @property
    def plans(self) -> list[planning.Plan]:
        """The one packet plan."""
        return [self.plan]

    @property
    def status(self) -> str:
        """``running``, then ``complete``, ``cancelled`` or ``failed``."""
        return self._started().manifest.status

    @property
    def dropped(self) -> list[str]:
        """Formats whose multi-frame file could not be closed (removed)."""
        return self._started().manifest.dropped

    def step(self) -> Entry:
        """Scan the next packet (see :meth:`Pipeline.step`); returns its manifest entry."""
        return self._started().step()

    def finish(self, status: str = "complete", bad_input: bool = False,
               error: BaseException | None = None, stopped: Callable[[], bool] | None = None) -> Path | None:
        """Close the writers' multi-frame files (EVD), write ``manifest.json`` with
        ``status``, release the folder, restore the scene frame and free the ray caster.
        Call once after any number of steps. Returns the manifest path.

        ``bad_input``: the run stopped on bad input found while scanning (a
        :class:`SettingsError`). If no packet was scanned (and the run does not resume
        an earlier one), nothing of the run is left: no manifest, no lock, and the folder
        itself if the run made it and it is empty; returns None then. The same holds for
        a run that a signal (``error`` a KeyboardInterrupt) stopped before its first
        packet was handed to the writers (a rig's member excepted: the rig keeps its
        members), so a later plain run into the folder is not refused.
        ``error``: what stopped the run; ``stopped``: () -> a signal asked to stop (see
        :meth:`Pipeline.finish`).

        Raises:
            RunFailed: writing failed (status ``failed`` where the manifest could be
                written). RunInterrupted: ``error`` was a KeyboardInterrupt
                (``manifest_path`` None when nothing was left).
        """
        pipeline, folder = self._started(), self._open()
        interrupted = isinstance(error, KeyboardInterrupt) and self.member is None
        forget = (bad_input or interrupted) and not self.spec.resume and pipeline.scanned == 0
        try:
            if forget:
                pipeline.abandon()
                (folder.path / "manifest.json").unlink(missing_ok=True)
                if interrupted:
                    raise RunInterrupted(0, None) from error
                return None
            pipeline.finish(status, error, stopped)
            return folder.path / "manifest.json"
        finally:
            pipeline.abandon()
            self._release()
            if forget:
                folder.remove_if_created_and_empty()
            if self.scene.frame_current != self._old_frame or self.scene.frame_subframe:
                self.scene.frame_set(self._old_frame)


def _ranges(indices: list[int]) -> str:
    """Sorted ints as compact ranges: [0, 1, 2, 5] -> ``"0-2, 5"``."""
    out: list[str] = []
    start: int | None = None
    for i, k in enumerate(indices):
        if start is None:
            start = k
        if i + 1 == len(indices) or indices[i + 1] != k + 1:
            out.append(f"{start}-{k}" if k != start else f"{k}")
            start = None
    return ", ".join(out)


def scan_range(camera_object: Any, frames: Iterable[int] | None, out_dir: str | os.PathLike[str],
               formats: Sequence[str] = ("npz",), seed: int | None = None, *,
               backend: str = "auto", frame_of_reference: str = "sensor", pcd_ascii: bool = False,
               overwrite: bool = False, resume: bool = False, progress: Progress | None = None,
               should_cancel: Callable[[], bool] | None = None, options: Mapping[str, Any] | None = None,
               axes: str = "ros", time: tuple[float, float] | None = None, cluster: Cluster | None = None,
               open_scene: Callable[[], Any] | None = None, resumable: bool = True,
               start_time: str | float | None = None, **overrides: Any) -> RangeScanJob:
    """Scan ``frames`` (or the time interval ``time``) of ``camera_object`` into ``out_dir``.

    One output ("packet") per scene frame, or per full sweep of a swept sensor (setting
    ``packets``; ``auto``: sweeps in continuous time, scene frames otherwise; see
    :mod:`~blensor_addon.jobs.plan`): sweep k holds the rays fired in ``[k P, (k + 1) P)``
    s (P = 1 / rotation_speed), is numbered k and stamped with its start ``k P``; the
    sweeps scanned are those that overlap the frames' time span (a single frame: the
    sweep that covers it), or that start within ``time``. EVD (per-frame packets) beside
    formats that would get sweeps is refused naming ``packets=frame``.

    Args:
        frames: iterable (or range) of scene frame numbers, within the scene's range
            (contiguous for sweeps); ignored when ``time`` is given.
        time: (t0, t1) seconds within the scene's frames, instead of frames: every
            packet (sweep or scene frame) that starts within ``[t0, t1)``, scanned whole.
        out_dir: folder (created if missing; ``//`` = relative to the .blend).
        formats: format names of the registry (:data:`blensor_addon.io.formats.WRITERS`:
            npz, evd, pcd, ...) or a comma-separated string.
        axes: ``"ros"`` (REP-103: x forward, y left, z up; the default) or ``"blensor"``
            (Blender's camera axes) for sensor-frame outputs; KITTI and rosbag2 always
            write REP-103.
        options: format options, ``{"pcd.ascii": True, ...}`` (``pcd_ascii`` is the
            same as ``{"pcd.ascii": True}``; ``pcap.start_time``, the pcap writer's former
            option, as ``start_time``).
        start_time: the time base, the absolute instant of scene time 0: an ISO 8601
            date-time str (``Z`` or an offset; none: UTC) or UNIX seconds; None: the
            default 2020-01-01T00:00:00Z (:mod:`blensor_addon.core.timebase`). rosbag2,
            pcap, LAS ``gps_time`` and the npz's ``start_time_ns`` use it; KITTI's
            ``times.txt``, PCD and the trajectory stay relative (docs/formats.md).
        seed: overrides the camera's seed if not None.
        overwrite: delete an earlier run's files in ``out_dir`` (exactly those its
            manifest lists, once this run is validated; else refused).
        resume: keep an earlier run's finished packets whose settings and geometry hash
            match its manifest and whose files have the size and sha256 it recorded
            (e.g. after SIGKILL) and scan the rest; the files are the bytes an
            uninterrupted run writes. A plan without one of the earlier run's finished
            packets is refused (resume never deletes nor overwrites them). Formats that
            write files over the whole run (kitti, rosbag2, pcap, evd) need every packet's
            scan: then every packet is scanned again, as one line on stderr says.
        progress: called as ``progress(0, total, None)`` once the input is validated, then
            as ``progress(scanned, total, entry)`` after each frame is scanned (its files
            are written meanwhile; ``entry["files"]`` is filled once they are).
        should_cancel: called before each frame; True stops the scan (status
            ``"cancelled"``; finished frames are kept).
        cluster: a :class:`~blensor_addon.jobs.cluster.Cluster` whose workers scan the
            packets (with ``open_scene``: a picklable callable that opens the saved .blend
            in a worker and returns the camera object); the files are the same bytes.
        overrides: setting names of the sensor type plus ``sensor_type`` and ``preset``,
            applied over the camera's stored settings (as :func:`~..scene.scanner.scan`).
        resumable: False where the caller takes no ``resume`` (a depth export): the
            refusal of a folder holding an earlier run's files then names only overwrite.
    Returns:
        the finished :class:`RangeScanJob` (``done`` entries, ``points``, ``status``;
        ``signal`` is the signal number if SIGINT/SIGTERM stopped it).
    Raises:
        SettingsError: bad input, before any file is written; or found while scanning
        (an unknown class name on an object that appears): nothing is left if no frame
        was finished, else the finished frames and a ``failed`` manifest.
        RunFailed (an OSError): a write failed (disk full, permissions): finished
        packets, the EVD up to them and the manifest (status ``"failed"``) are kept; its
        attributes say what (:class:`~blensor_addon.jobs.failures.RunFailed`).
        RunInterrupted (a KeyboardInterrupt): a second SIGINT/SIGTERM; the current
        packet is dropped and the manifest says ``"cancelled"``.
        Any other error during the scan is re-raised likewise, after status ``"failed"``.
    """
    def make() -> RangeScanJob:
        spec = RangeScanSpec(camera_object, frames, out_dir, formats=formats, seed=seed, backend=backend,
                             frame_of_reference=frame_of_reference, pcd_ascii=pcd_ascii, overwrite=overwrite,
                             resume=resume, overrides=overrides, options=options or {}, axes=axes, time=time,
                             start_time=start_time, resumable=resumable)
        return RangeScanJob(spec, cluster=cluster, open_scene=open_scene)
    return run_job(make, progress, should_cancel)


def run_job(make: Callable[[], _Job], progress: Progress | None = None,
            should_cancel: Callable[[], bool] | None = None) -> _Job:
    """Run a range-scan job made by ``make()`` (a :class:`SteppedJob`: a
    :class:`RangeScanJob` or a rig's :class:`~.rig_scan.RigJob`)
    to its end under the signal handling of :class:`Signals`: packet after packet until
    done, cancelled (``should_cancel()`` True, or a first SIGINT/SIGTERM: the current
    packet is finished) or failed; then ``job.finish`` with the status. ``progress``: as
    :func:`scan_range`. Returns the job (``job.signal``: the signal that stopped it, or
    None).

    Raises:
        what :func:`scan_range` raises."""
    with Signals.scope() as sig:  # the command line tool's, or one for this scan (headless Blender)
        job = make()
        job.signal = None
        status, bad_input = "failed", False
        error: BaseException | None = None
        with sig.finishing():  # the first signal: stop after this packet; a second: at once
            try:
                if progress is not None:
                    progress(0, job.total, None)
                while job.remaining:
                    if sig.stop_requested and not job.scanned and isinstance(job, RangeScanJob):
                        raise KeyboardInterrupt  # nothing to keep: as a second signal (nothing is left)
                    if sig.stop_requested or (should_cancel is not None and should_cancel()):
                        status = "cancelled"
                        break
                    entry = job.step()
                    if progress is not None:
                        progress(job.scanned, job.total, entry)
                else:  # every packet scanned; a signal during the last one still cancels the run
                    status = "cancelled" if sig.stop_requested else "complete"
            except KeyboardInterrupt as exc:
                status, error = "cancelled", exc
            except SettingsError as exc:
                bad_input, error = True, exc
            except BaseException as exc:
                error = exc
            # a signal while the last packets are written (the writer thread drains in finish)
            # still cancels a run that scanned every packet
            def stopped() -> bool:
                return sig.stop_requested
            try:  # (a rig ends with the status the signals left)
                job.finish(status, bad_input, error,  # raises RunFailed, RunInterrupted
                           stopped if isinstance(job, RangeScanJob) else None)
            finally:
                job.signal = sig.signum if sig.stop_requested else None
    if error is not None:
        raise error
    return job
