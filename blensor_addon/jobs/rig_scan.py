"""Rigs: several sensor cameras scanned in one pass over time (docs/architecture.md, "Rigs").

A rig is a list of cameras of one scene (a roof HDL-64E, two side VLP-16s, a Kinect...)
scanned over the same frames (or time interval) by ``blensor scan --camera A,B,C``,
``--all-sensors``, ``--sensor FILE`` with several sensors, or :func:`scan_rig`:

- **One scene evaluation per time for all sensors.** Every member is a
  :class:`~.range_scan.RangeScanJob` of its own (its own plan, subfolder, writers,
  manifest, ``--resume``), but their scanners share one
  :class:`~blensor_addon.scene.rig.RigSampler` (Blender's ``frame_set`` and one walk over
  the evaluated scene per distinct time give every camera its snapshot). Each member keeps
  its own ray caster: its snapshots are relative to its own sensor's position, so its
  top-level BVH is its own, and a caster shared by all was rebuilt at every switch of
  sensor (3 LiDARs over 90,000 instances: 14.6 s with one caster each, 17.2 s with one
  shared, 16.2 s as separate runs); each member's files are byte for byte those of a run
  of that camera alone. The members' packets are scanned in the order of their start
  times (ties: the cameras' order), so each time is evaluated while every sensor that
  needs it is near.
- **Folders.** ``OUT/<camera>/`` holds the camera's files and ``manifest.json`` as a
  single run writes them; ``OUT/rig.json`` lists the rig (every sensor, its subfolder,
  type and extrinsics, the run's status); ``OUT/calib_rig.txt`` (KITTI-style) and
  ``OUT/extrinsics.json`` give each sensor's pose in the rig base's frame
  (:mod:`blensor_addon.io.extrinsics`).
- **One bag.** With ``rosbag2`` among the formats, every member's messages go into one
  bag, ``OUT/rosbag2``, on its own topics (``/blensor/<sensor>/points``, ...), with the
  extrinsics in ``/tf_static`` (:class:`~blensor_addon.io.formats.rosbag2.RigBag`); the
  members' packets are written by one writer thread in the order they were scanned, so
  the bag has the same bytes in every run.
- **The base.** ``base`` (``--rig-base``) names the object whose frame the extrinsics are
  given in; default: the cameras' common parent (a vehicle), else the first camera. A
  camera as the base gives its REP-103 sensor frame (x ahead, y left, z up); any other
  object its own local axes (Blender's convention for a vehicle: x ahead, z up). The
  extrinsics are taken at the first time scanned (a sensor that moves on its vehicle
  keeps its own per-packet poses in its files).

Faults: everything of every member is validated before anything of an earlier run is
deleted; a member that fails stops the rig, every finished packet of every member is
kept and each manifest (and ``rig.json``) says ``failed`` or ``cancelled``.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import bpy
import numpy as np

from ..core.axes import ros_pose
from ..core.errors import SettingsError
from ..core.version import __version__
from ..io.atomic import commit_files
from ..io.formats import parse_formats
from ..io.outdir import OutputFolder
from ..raycast import BACKENDS
from ..scene.objects import sensor_pose
from ..scene.rig import RigSampler
from ..scene.scanner import check_camera, read_sensor
from .failures import writer_failure
from .pipeline import Pipeline, WriterThread
from .plan import Plan
from .range_scan import Progress, RangeScanJob, RangeScanSpec, RigMember, SteppedJob, output_path, run_job
from .run_files import Entry

if TYPE_CHECKING:
    from ..core.ndtypes import F64
    from ..io.formats import RunInfo, Writer
    from ..io.formats.rosbag2 import RigBag, Rosbag2Options, RigSensorWriter
    from ..io.outdir import Listing

RIG_MANIFEST = "rig.json"
CALIB_FILES = ("calib_rig.txt", "extrinsics.json")
#: files a rig run leaves in its folder besides the members' subfolders
RIG_PATTERNS = (r"rig\.json", r"calib_rig\.txt", r"extrinsics\.json", r"rosbag2/metadata\.yaml",
                r"rosbag2/rosbag2\.(mcap|db3)")


def member_name(camera_name: str) -> str:
    """The subfolder of a rig member: the camera's name
    with every character other than ASCII letters, digits and ``_`` turned into ``_``,
    and ``_`` before a leading digit (a ROS name must not start with one).

    Raises:
        SettingsError (``camera``): a name with none of those characters."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(camera_name))
    if not name.strip("_"):
        raise SettingsError(
            "camera", "a camera name with a letter or digit (it names the sensor's subfolder)", camera_name
        )
    return "_" + name if name[0].isdigit() else name


def rig_files(man: dict[str, Any]) -> Listing:
    """Relative paths a rig run of manifest ``man`` wrote at the rig's level (its members'
    files are their own folders' business): ``rig.json``, the calibration files and the
    bag."""
    out = {RIG_MANIFEST, *CALIB_FILES}
    if "rosbag2" in (man.get("formats") or []):
        return {"files": out, "pattern": [p for p in RIG_PATTERNS if p.startswith("rosbag2")]}
    return out


class _naming:
    """Context: a SettingsError raised for one member names its camera in the value
    (``got 'laserscan ...' (camera 'spin3d')``), so a rig's refusal says which sensor."""

    def __init__(self, camera: str) -> None:
        self.camera = camera

    def __enter__(self) -> _naming:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if isinstance(exc, SettingsError) and "(camera '" not in str(exc.value):
            raise SettingsError(exc.setting, exc.allowed, f"{exc.value} (camera '{self.camera}')") from None
        return False


def _common_parent(cameras: Sequence[Any]) -> Any:
    parents = {c.parent.name if c.parent is not None else None for c in cameras}
    if len(parents) == 1 and None not in parents:
        return cameras[0].parent
    return None


def base_frame_pose(base: Any, cameras: Sequence[Any]) -> F64:
    """(4, 4) float64 world pose of the rig base's frame now: a camera's REP-103 sensor
    frame, or any other object's local axes, scale removed.

    Raises:
        SettingsError (``--rig-base``): a base whose world matrix has no rigid pose."""
    try:
        pose = sensor_pose(base.matrix_world)
    except SettingsError as exc:
        raise SettingsError("--rig-base", exc.allowed.replace("a camera", "an object"), exc.value) from None
    return ros_pose(pose) if base in cameras else pose


@dataclass
class RigJob(SteppedJob):
    """A rig's range scan advanced one packet at a time (see the module docstring).

    Args:
        cameras: camera objects of the scene (at least one, each once).
        base: name of the rig base object, or None (see the module docstring).
        overrides: camera name -> setting overrides of that camera's sensor.
        axes: ``"ros"``/``"blensor"`` for every member, or camera name -> axes.
        The others: as :func:`~.range_scan.scan_range`, for every member.
    Attributes:
        members: the :class:`~.range_scan.RangeScanJob` of every camera, in order.
        names: each member's subfolder. frame_ids: each member's tf frame, topic namespace
        and calibration name (:func:`~blensor_addon.io.formats.rosbag2.ros_names`: ``VLP16
        Left`` -> ``vlp16_left``). extrinsics: frame id -> (4, 4) float64 base_to_sensor
        (REP-103). sampler: the shared :class:`RigSampler`.
    Raises (on construction; nothing is written and nothing of an earlier run is deleted
    on bad input): SettingsError, OutputError as :class:`~.range_scan.RangeScanJob`.
    """

    cameras: list[Any]
    frames: Iterable[int] | None
    out_dir: str | os.PathLike[str]
    formats: Sequence[str] = ("npz",)
    seed: int | None = None
    base: str | None = None
    backend: str = "auto"
    frame_of_reference: str = "sensor"
    pcd_ascii: bool = False
    overwrite: bool = False
    resume: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    axes: str | dict[str, str] = "ros"
    time: tuple[float, float] | None = None
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: the time base of every member and the bag (see :func:`~.range_scan.scan_range`)
    start_time: str | float | None = None

    def __post_init__(self) -> None:
        self.scene = bpy.context.scene
        self.members: list[RangeScanJob] = []
        self.folder: OutputFolder | None = None
        self._dropped: list[OutputFolder] = []  # folders of the earlier rig's members left out
        self.bag: RigBag | None = None
        self.sampler: RigSampler | None = None
        self.writing: WriterThread | None = None
        self.signal = None
        self.status = "running"
        self._made_out: Path | None = None  # the rig's folder if this run made it (removed if set-up fails)
        self._bag_closed = False  # the rig's bag was finished (its files are listed in rig.json)
        self._bag_suffix = ""  # the bag's file suffix (mcap or db3)
        self._last: RangeScanJob | None = None  # the member scanned last (see step)
        try:
            self._setup()
        except BaseException:
            self._undo()
            raise

    # -- set-up --------------------------------------------------------------------------
    def _check(self) -> None:
        cams = list(self.cameras) if isinstance(self.cameras, (list, tuple)) else None
        if not cams:
            raise SettingsError("camera", "a list of one or more camera objects", self.cameras)
        for c in cams:
            check_camera(c)
        names = [c.name for c in cams]
        if len(set(names)) != len(names):
            raise SettingsError("camera", "each camera once in a rig", ", ".join(names))
        self.cameras = cams
        self.names = [member_name(n) for n in names]
        if len(set(self.names)) != len(self.names):
            raise SettingsError(
                "camera",
                "cameras whose names stay distinct as folder names (letters, digits, _)",
                ", ".join(names),
            )
        from ..io.formats.rosbag2 import ros_names
        self.frame_ids = ros_names(names)  # tf frames, bag topics and calibration names
        self.formats = parse_formats(self.formats)
        if self.backend not in BACKENDS:
            raise SettingsError("backend", "one of " + ", ".join(BACKENDS), self.backend)
        if self.base is not None:
            obj = self.scene.objects.get(self.base)
            if obj is None:
                raise SettingsError("--rig-base", "an object of the scene", self.base)
            self._base = obj
        else:
            self._base = _common_parent(cams) or cams[0]
        output_path(self.out_dir)

    def _setup(self) -> None:
        self._check()
        out = output_path(self.out_dir)
        self._made_out = None if out.exists() else out  # removed again if set-up fails and it stays empty
        _, first = read_sensor(self.cameras[0], self.seed, self.overrides.get(self.cameras[0].name))
        sampler = self.sampler = RigSampler(self.scene, self.cameras, render=first.visibility == "render")
        sqlite_bag = "rosbag2" in self.formats and (self.options or {}).get("rosbag2.storage") == "sqlite3"
        self.writing = None if sqlite_bag else WriterThread(depth=len(self.cameras))
        factories: dict[str, Callable[..., Writer]] = {}
        if "rosbag2" in self.formats:
            factories["rosbag2"] = self._bag_writer
        member = RigMember(sampler, factories, self.writing)
        for cam, name in zip(self.cameras, self.names):
            axes = self.axes.get(cam.name, "ros") if isinstance(self.axes, dict) else self.axes
            with _naming(cam.name):
                self._add_member(cam, name, out, axes, member)
        self._after_members(out)

    def _add_member(self, cam: Any, name: str, out: Path, axes: str, member: RigMember) -> None:
        spec = RangeScanSpec(cam, self.frames, out / name, formats=self.formats, seed=self.seed,
                             backend=self.backend, frame_of_reference=self.frame_of_reference,
                             pcd_ascii=self.pcd_ascii, overwrite=self.overwrite, resume=self.resume,
                             overrides=dict(self.overrides.get(cam.name) or {}),
                             options=dict(self.options or {}), axes=axes, time=self.time,
                             start_time=self.start_time)
        self.members.append(RangeScanJob(spec, member=member))

    def _after_members(self, out: Path) -> None:
        # every camera's and object's transform at every frame, in one pass (a member in
        # continuous time also refuses an object's NaN/inf transform, which frozen frames leave out)
        frames = sorted({f for m in self.members for f in m.plan.scene_frames()})
        checker = next((m for m in self.members if m.scanner.continuous), self.members[0])
        checker.scanner.check_transforms(frames, self.cameras)
        self.extrinsics = self._extrinsics()
        from ..io.extrinsics import rig_calibration_files
        calib = rig_calibration_files(self._base.name, [(n, self.extrinsics[n]) for n in self.frame_ids])
        bag_options: Rosbag2Options | None = None
        if "rosbag2" in self.formats:
            from ..io.formats import make_options
            from ..io.formats.rosbag2 import Rosbag2Options
            made = make_options(("rosbag2",), {k: v for k, v in (self.options or {}).items()
                                               if k.startswith("rosbag2.")})["rosbag2"]
            assert isinstance(made, Rosbag2Options)  # (the rosbag2 writer's Options)
            bag_options = made
        folder = self.folder = OutputFolder(out, manifest=RIG_MANIFEST, patterns=RIG_PATTERNS,
                                            listed=rig_files)
        folder.open()
        folder.check(overwrite=self.overwrite, resume=self.resume)
        self._check_dropped(out)
        # everything is validated: only now is anything of an earlier run deleted
        folder.prepare()
        for folder in self._dropped:  # the earlier rig's members this one leaves out
            folder.prepare()
            folder.release()
            try:
                folder.path.rmdir()  # only if empty: files of other names stay, with their folder
            except OSError:
                pass
        if bag_options is not None:
            from ..io.formats.rosbag2 import RigBag
            self.bag = RigBag(out, bag_options, [(n, self.extrinsics[n]) for n in self.frame_ids],
                              self.members[0].spec.start_ns)
            self._bag_suffix = "mcap" if bag_options.storage == "mcap" else "db3"
        for m in self.members:
            m.start()
        commit_files(out, calib)
        self._write_manifest()

    def _check_dropped(self, out: Path) -> None:
        """The members of the earlier rig (its ``rig.json``'s ``sensors``) that this rig
        leaves out, so that ``rig.json`` lists what the folder holds: ``resume`` refuses
        them; ``overwrite`` locks and checks each one's folder as a run's
        (:class:`OutputFolder`: only the files its manifest lists are deleted, by
        :meth:`_after_members`, and a folder holding other files of BlenSor's names is
        refused), before anything is deleted.

        Raises:
            SettingsError (``camera``): ``resume`` with a member of the earlier rig left
            out. SettingsError (``out``): a left-out member's folder refused as above.
        """
        from ..io.formats import output_patterns
        from ..io.outdir import range_run_files
        old = self._open().earlier
        if old is None or not (self.overwrite or self.resume):
            return
        earlier = [(str(s.get("camera", s["folder"])), s["folder"]) for s in old.get("sensors") or []
                   if isinstance(s, dict) and isinstance(s.get("folder"), str)
                   and re.fullmatch(r"[A-Za-z0-9_]+", s["folder"])]  # a member's folder name, never a path
        dropped = [(c, n) for c, n in earlier if n not in self.names]
        if dropped and self.resume:
            raise SettingsError("camera", f"the cameras of the earlier rig with --resume (its folder holds "
                                f"{', '.join(c for c, _ in earlier)}; use --overwrite to replace the rig)",
                                f"{', '.join(c.name for c in self.cameras)} "
                                f"({', '.join(c for c, _ in dropped)} dropped)")
        for _, name in dropped:
            path = out / name
            if path.is_symlink() or not path.is_dir():
                continue
            folder = OutputFolder(path, manifest="manifest.json", patterns=output_patterns(),
                                  listed=range_run_files)
            self._dropped.append(folder)
            folder.open()
            folder.check(overwrite=True, resume=False)

    def _open(self) -> OutputFolder:
        """The rig's folder (open once the rig is validated)."""
        assert self.folder is not None, "the rig's folder is open once it is validated"
        return self.folder

    def _bag_writer(self, folder: Path, options: object, run: RunInfo) -> RigSensorWriter:
        """The rosbag2 'writer' of a member: its messages go into the rig's one bag."""
        name = self.frame_ids[[c.name for c in self.cameras].index(run.camera)]
        assert self.bag is not None, "the members' writers are made once the rig's bag is"
        return self.bag.writer(name)

    def _extrinsics(self) -> dict[str, F64]:
        """frame id -> (4, 4) float64 pose of each sensor (REP-103 frame) in the base frame,
        at the first time any member scans."""
        t0 = min(m.plan.span(m.plan.packets[0])[0] for m in self.members)
        ft = float(self.scene.render.fps_base) / float(self.scene.render.fps)
        frame = int(np.floor(t0 / ft + 1e-9))
        old, old_sub = self.scene.frame_current, self.scene.frame_subframe
        try:
            self.scene.frame_set(frame)
            base = base_frame_pose(self._base, self.cameras)
            inv = np.linalg.inv(base)
            return {
                n: inv @ ros_pose(sensor_pose(c.matrix_world)) for c, n in zip(self.cameras, self.frame_ids)
            }
        finally:
            self.scene.frame_set(old, subframe=old_sub)

    def _write_manifest(self) -> None:
        assert self.sampler is not None, "the rig's manifest is written once its sampler is made"
        doc = {
            "blensor_version": __version__,
            "blender_version": bpy.app.version_string,
            "blend_file": bpy.data.filepath,
            "status": self.status,
            "base": self._base.name,
            "formats": list(self.formats),
            "sensors": [
                {
                    "camera": c.name,
                    "folder": n,
                    "frame_id": f,
                    "sensor_type": m.scanner.sensor_type,
                    "packets": m.packets,
                    "planned": len(m.plan),
                    "done": len(m.done) if m.pipeline else 0,
                    "base_to_sensor": [float(v) for v in self.extrinsics[f].ravel()],
                }
                for c, n, f, m in zip(self.cameras, self.names, self.frame_ids, self.members)
            ],
            "scene_evaluations": self.sampler.evaluations,
            "files": [RIG_MANIFEST, *CALIB_FILES]
            + (
                ["rosbag2/metadata.yaml", f"rosbag2/rosbag2.{self._bag_suffix}"]
                if self._bag_closed
                else []
            ),
        }
        commit_files(self._open().path, [(RIG_MANIFEST, (json.dumps(doc, indent=2) + "\n").encode())])

    def _undo(self) -> None:
        """A set-up that failed: members abandoned, the bag discarded, everything freed."""
        for m in self.members:
            try:
                m.abandon()
            except Exception:  # noqa: BLE001 - undoing as much as possible
                pass
        if self.writing is not None:
            self.writing.drain()
        if self.bag is not None:
            self.bag.discard()
        self._release()
        made = self._made_out
        if made is not None and made.is_dir() and not any(made.iterdir()):
            made.rmdir()

    def _release(self) -> None:
        for folder in self._dropped:
            folder.release()
        if self.folder is not None:
            self.folder.release()
        if self.sampler is not None:
            self.sampler.close()

    # -- progress (SteppedJob: out, done, points, reused, remaining, scanned, total, every member) --
    def _pipelines(self) -> list[Pipeline]:
        return [m._started() for m in self.members]

    @property
    def plans(self) -> list[Plan]:
        """Every member's packet plan."""
        return [m.plan for m in self.members]

    @property
    def backend_name(self) -> str:
        """The ray caster's name (``native`` or ``bvhtree``)."""
        return self.members[0].scanner.backend.name

    def step(self) -> Entry:
        """Scan the next member packet; returns its manifest entry with ``camera`` added.

        The order: the member packet that starts first (ties: the cameras' order), except
        that the member scanned last goes on while its next packet starts within one
        packet length (the longest member's) of that: consecutive packets of one sensor
        share the scene step at their boundary, whose top-level BVH the member's ray caster
        then keeps, and the samples of the scene it needs are still in the
        :class:`RigSampler`'s cache when the others get there."""
        pending = [m for m in self.members if m.remaining]
        start = {id(m): m.plan.span(m.plan.packets[m.scanned])[0] for m in pending}
        first = min(pending, key=lambda m: start[id(m)])  # min keeps the first of equal starts
        best = first
        last = self._last
        if last is not None and last.remaining and start[id(last)] < start[id(first)] + self._horizon - 1e-12:
            best = last
        self._last = best
        entry = best.step()
        return dict(entry, camera=best.camera_object.name)

    @property
    def _horizon(self) -> float:
        return max(m.plan.packet_time for m in self.members)

    def finish(self, status: str = "complete", bad_input: bool = False, error: BaseException | None = None,
               stopped: Callable[[], bool] | None = None) -> Path | None:
        """Finish every member (see :meth:`RangeScanJob.finish`), close the bag, write
        ``rig.json`` with the run's status, release everything. Raises what the first
        member raised (RunFailed, RunInterrupted), after all are finished. Returns the
        path of ``rig.json``. ``stopped`` is not asked: :func:`~.range_scan.run_job` ends
        a rig with the status the signals left."""
        raised = None
        try:
            if self.writing is not None:
                try:
                    self.writing.drain()
                except KeyboardInterrupt as exc:
                    error = error or exc
            for m in self.members:
                try:
                    m.finish(status, bad_input, error)
                except BaseException as exc:  # the first is raised once every member is finished
                    raised = raised or exc
            if raised is not None and status == "complete":
                status = "failed"
            dropped: list[str] = []
            if isinstance(raised, KeyboardInterrupt) or isinstance(error, KeyboardInterrupt):
                status = "cancelled"
            if self.bag is not None:
                if any(m.done for m in self.members):
                    try:
                        try:
                            self.bag.close(status)
                        except Exception as exc:  # sqlite3's 'database or disk is full': a write error
                            failure = writer_failure(exc, "rosbag2", self._open().path)
                            if failure is None or failure is exc:
                                raise
                            raise failure from exc
                        self._bag_closed = True
                    except OSError as exc:
                        try:
                            self.bag.discard()
                        except Exception:  # (it is dropped either way)
                            pass
                        dropped.append("rosbag2")
                        status, raised = "failed", raised or exc
                else:
                    self.bag.discard()
                    if raised is not None:
                        dropped.append("rosbag2")
                self.bag = None
            self.status = status
            written = True
            try:
                self._write_manifest()
            except OSError as exc:
                written, raised = False, raised or exc
        finally:
            self._release()
        if isinstance(raised, OSError):  # the rig's totals, not the first member's
            from .failures import RunFailed
            cause = raised.cause if isinstance(raised, RunFailed) else raised
            members = list(raised.dropped_formats) if isinstance(raised, RunFailed) else []
            raise RunFailed(
                cause,
                finished_frames=len(self.done),
                manifest_path=self._open().path / RIG_MANIFEST,
                manifest_status="failed" if written else "stale",
                dropped_formats=sorted(set(members + dropped)),
            ) from cause
        if raised is not None:
            raise raised
        return self._open().path / RIG_MANIFEST


def scan_rig(cameras: Iterable[Any], frames: Iterable[int] | None, out_dir: str | os.PathLike[str],
             formats: Sequence[str] = ("npz",), seed: int | None = None, *, base: str | None = None,
             backend: str = "auto", frame_of_reference: str = "sensor", pcd_ascii: bool = False,
             overwrite: bool = False, resume: bool = False, progress: Progress | None = None,
             should_cancel: Callable[[], bool] | None = None, options: Mapping[str, Any] | None = None,
             axes: str | dict[str, str] = "ros", time: tuple[float, float] | None = None,
             overrides: Mapping[str, Mapping[str, Any]] | None = None,
             start_time: str | float | None = None) -> RigJob:
    """Scan ``cameras`` as one rig into ``out_dir`` (see the module docstring).

    Args: as :func:`~.range_scan.scan_range`, plus ``base`` (the rig base object's name),
    ``overrides`` (camera name -> setting overrides), ``axes`` (one value or camera
    name -> value) and ``start_time`` (the time base of every member and the bag).
    ``progress(scanned, total, entry)`` counts every member's packets.
    Returns:
        the finished :class:`RigJob`.
    Raises:
        as :func:`~.range_scan.scan_range`.
    """
    def make() -> RigJob:
        return RigJob(list(cameras), frames, out_dir, formats, seed=seed, base=base, backend=backend,
                      frame_of_reference=frame_of_reference, pcd_ascii=pcd_ascii, overwrite=overwrite,
                      resume=resume, options=dict(options or {}), axes=axes, time=time,
                      overrides=dict(overrides or {}), start_time=start_time)
    return run_job(make, progress, should_cancel)


__all__ = ["RigJob", "scan_rig", "member_name", "RIG_MANIFEST"]
