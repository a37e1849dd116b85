"""Operators: single scan into point meshes, range scan to files, depth-map and motion
exports, delete scans, import and clear a rotating LiDAR's calibration.

The three exports write into their own subfolder of the camera's output folder
(:func:`job_folder`: ``<out>/scan``, ``<out>/depth``, ``<out>/motion``), so one never
finds the other's files there. Errors reach the user through
``self.report({'ERROR'}, ...)``; called from a script through ``bpy.ops`` they surface
as ``RuntimeError`` with the same one-line message.
"""
from __future__ import annotations

import bpy

from ..core.errors import BlensorError, SettingsError
from .props import format_option_values, ordered_formats, stored_start_time


#: the one line every operator reports when there is no camera to work on
_NO_CAMERA = "camera must be a camera object: make a camera active or set the scene camera"


def _camera(context):
    obj = context.active_object
    if obj is not None and obj.type == "CAMERA":
        return obj
    return context.scene.camera


#: each export's subfolder of the camera's output folder
JOB_FOLDERS = {"scan": "scan", "depth": "depth", "motion": "motion"}


def job_folder(output_dir: str, job: str) -> str:
    """The folder export ``job`` (``scan``, ``depth``, ``motion``) writes into: its
    subfolder of ``output_dir`` (``//`` paths stay relative to the .blend)."""
    base = str(output_dir)
    if not base.strip():
        return base  # refused as it is ("out must be a folder path")
    sep = "" if base.endswith(("/", "\\")) else "/"
    return f"{base}{sep}{JOB_FOLDERS[job]}"


def _formats(s) -> tuple:
    from ..io.formats import WRITERS
    return tuple(f for f in WRITERS if f in s.formats)


class BLENSOR_OT_scan(bpy.types.Operator):
    """Scan the current frame with the active camera (or the scene camera) into point meshes"""

    bl_idname = "blensor.scan"
    bl_label = "Single scan"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        from ..scene.meshes import add_scan_mesh
        from ..scene.scanner import scan
        cam = _camera(context)
        if cam is None:
            self.report({"ERROR"}, _NO_CAMERA)
            return {"CANCELLED"}
        s = cam.data.blensor
        try:
            result = scan(cam, frame_of_reference=s.frame_of_reference, axes=s.axes)
        except BlensorError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if s.add_scan_mesh:
            add_scan_mesh(result, noisy=False)
        if s.add_noisy_scan_mesh:
            add_scan_mesh(result, noisy=True)
        self.report({"INFO"}, f"BlenSor: {len(result)} returns of {result.num_rays} rays at frame {result.frame}")
        return {"FINISHED"}


class BLENSOR_OT_scan_range(bpy.types.Operator):
    """Scan the scene's frame range into files (ESC cancels; finished frames are kept)"""

    bl_idname = "blensor.scan_range"
    bl_label = "Scan range"

    _timer = None
    _job = None

    def _start(self, context):
        from ..jobs.range_scan import RangeScanJob, RangeScanSpec
        cam = _camera(context)
        if cam is None:
            raise BlensorError(_NO_CAMERA)
        s = cam.data.blensor
        scene = context.scene
        if not _formats(s):
            raise SettingsError("formats", "at least one format ticked in the Output box", "none")
        return RangeScanJob(RangeScanSpec(
            cam, range(scene.frame_start, scene.frame_end + 1), job_folder(s.output_dir, "scan"),
            formats=_formats(s), frame_of_reference=s.frame_of_reference, overwrite=s.overwrite,
            options=format_option_values(s, _formats(s)), axes=s.axes, start_time=stored_start_time(s)))

    def execute(self, context):
        """Synchronous path (also what runs under ``--background``): the range job's own
        loop (:func:`~blensor_addon.jobs.range_scan.run_job`), whose SIGINT/SIGTERM
        handling finishes the packet being scanned and keeps the finished ones (the
        manifest says ``cancelled``); the interrupt is raised again afterwards."""
        from ..jobs.range_scan import run_job
        made = []

        def make():
            made.append(self._start(context))
            return made[0]
        try:
            job = run_job(make)
        except BlensorError as exc:
            if not made:  # refused before anything was written
                self.report({"ERROR"}, str(exc))
            else:  # finished frames stay on disk
                self.report({"ERROR"}, f"BlenSor: range scan failed after {len(made[0].done)} frames: {exc}")
            return {"CANCELLED"}
        except OSError as exc:  # RunFailed: what was kept is in its attributes
            self.report({"ERROR"}, f"BlenSor: range scan failed after {len(made[0].done)} frames: {exc}")
            return {"CANCELLED"}
        if job.signal is not None:  # Ctrl-C under --background: finished frames kept, manifest cancelled
            raise KeyboardInterrupt
        self.report({"INFO"}, f"BlenSor: {len(job.done)} frames, {job.points} points -> {job.out}")
        return {"FINISHED"}

    def invoke(self, context, event):
        if bpy.app.background:
            return self.execute(context)
        try:
            self._job = self._start(context)
        except BlensorError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        wm = context.window_manager
        wm.progress_begin(0, len(self._job.plan))
        self._timer = wm.event_timer_add(0.01, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            return self._end(context, "cancelled")
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        try:
            entry = self._job.step()
        except Exception as exc:  # keep finished frames, then report
            self.report({"ERROR"}, f"BlenSor: range scan failed: {exc}")
            return self._end(context, "failed", isinstance(exc, SettingsError), exc)
        context.window_manager.progress_update(self._job.scanned)
        done = 100.0 * self._job.scanned / len(self._job.plan)
        self.report({"INFO"}, f"Scanned {self._job.packets} {entry['frame']} ({done:.1f} %)")
        if not self._job.remaining:
            return self._end(context, "complete")
        return {"RUNNING_MODAL"}

    def _end(self, context, status, bad_input=False, error=None):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        try:
            self._job.finish(status, bad_input, error)  # waits for the frames being written
        except Exception as exc:  # a write error of the last frames: finished frames stay
            self.report({"ERROR"}, f"BlenSor: range scan failed after {len(self._job.done)} frames: {exc}")
            return {"CANCELLED"}
        level = "INFO" if status == "complete" else "WARNING"
        self.report({level}, f"BlenSor: range scan {status}: {len(self._job.done)} frames -> {self._job.out}")
        return {"FINISHED"} if status == "complete" else {"CANCELLED"}


class BLENSOR_OT_export_depth_map(bpy.types.Operator):
    """Export float depth maps of the scene's frame range through this camera's own projection"""

    bl_idname = "blensor.export_depth_map"
    bl_label = "Export depth maps"

    def execute(self, context):
        from ..jobs.depth_export import export_depth
        cam = _camera(context)
        if cam is None:
            self.report({"ERROR"}, _NO_CAMERA)
            return {"CANCELLED"}
        s = cam.data.blensor
        scene = context.scene
        from ..io.formats import WRITERS
        try:
            job = export_depth(cam, range(scene.frame_start, scene.frame_end + 1),
                               job_folder(s.output_dir, "depth"), ordered_formats(s.depth_formats, WRITERS),
                               overwrite=s.overwrite)
        except (BlensorError, OSError) as exc:
            self.report({"ERROR"}, f"BlenSor: depth export failed: {exc}")
            return {"CANCELLED"}
        self.report({"INFO"}, f"BlenSor: {len(job.done)} depth maps -> {job.out}")
        return {"FINISHED"}


class BLENSOR_OT_export_motion(bpy.types.Operator):
    """Export the poses of the selected objects (or all) and the sensor, and labelled 3D boxes, over the frame range"""

    bl_idname = "blensor.export_motion"
    bl_label = "Export motion"

    def execute(self, context):
        from ..io.formats import MOTION_FORMATS
        from ..jobs.motion_export import export_motion
        cam = _camera(context)
        s = cam.data.blensor if cam is not None else None
        scene = context.scene
        selected = [o.name for o in context.selected_objects] if context.selected_objects else None
        if selected is not None and cam is not None and cam.name not in selected:
            selected.append(cam.name)
        out = job_folder(s.output_dir if s is not None else "//blensor_out/", "motion")
        try:
            formats = ordered_formats(s.motion_formats, MOTION_FORMATS) if s is not None else "blensor"
            files = export_motion(range(scene.frame_start, scene.frame_end + 1), out, formats, selected,
                                  overwrite=bool(s and s.overwrite))
        except (BlensorError, OSError) as exc:
            self.report({"ERROR"}, f"BlenSor: motion export failed: {exc}")
            return {"CANCELLED"}
        self.report({"INFO"}, f"BlenSor: {len(files)} motion files -> {out}")
        return {"FINISHED"}


class BLENSOR_OT_delete_scans(bpy.types.Operator):
    """Delete every point mesh made by BlenSor scans"""

    bl_idname = "blensor.delete_scans"
    bl_label = "Delete scans"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        from ..scene.meshes import delete_scan_meshes
        n = delete_scan_meshes()
        self.report({"INFO"}, f"BlenSor: deleted {n} scan objects")
        return {"FINISHED"}



class BLENSOR_OT_import_calibration(bpy.types.Operator):
    """Use a unit's calibration file (Velodyne .yaml or db.xml, Ouster .json, Hesai .csv) for this LiDAR"""

    bl_idname = "blensor.import_calibration"
    bl_label = "Import calibration"
    bl_options = {"REGISTER", "UNDO"}

    filepath: bpy.props.StringProperty(subtype="FILE_PATH")
    filter_glob: bpy.props.StringProperty(default="*.yaml;*.yml;*.xml;*.json;*.csv", options={"HIDDEN"})

    def invoke(self, context, _event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        from ..jobs.calib_import import import_calibration
        cam = _camera(context)
        if cam is None:
            self.report({"ERROR"}, _NO_CAMERA)
            return {"CANCELLED"}
        try:
            table = import_calibration(cam, bpy.path.abspath(self.filepath))
        except BlensorError as exc:  # a bad file: the camera keeps its table
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        self.report({"INFO"}, f"BlenSor: calibration {table.summary()} in use")
        return {"FINISHED"}


class BLENSOR_OT_clear_calibration(bpy.types.Operator):
    """Drop the imported calibration: the preset's laser table is used again"""

    bl_idname = "blensor.clear_calibration"
    bl_label = "Clear calibration"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        from ..jobs.calib_import import store_calibration
        cam = _camera(context)
        if cam is None:
            self.report({"ERROR"}, _NO_CAMERA)
            return {"CANCELLED"}
        try:
            store_calibration(cam, None)
        except BlensorError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        return {"FINISHED"}


CLASSES = (BLENSOR_OT_scan, BLENSOR_OT_scan_range, BLENSOR_OT_export_depth_map, BLENSOR_OT_export_motion,
           BLENSOR_OT_delete_scans, BLENSOR_OT_import_calibration, BLENSOR_OT_clear_calibration)
