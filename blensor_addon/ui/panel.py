"""Panels: sensor settings in the camera data tab, LiDAR properties in the material tab.

The sensor panel draws a sensor type's settings by section (``Meta.group``,
:func:`setting_groups`): its own settings first, then each section (such as "Return
physics") in a collapsible sub-panel of its own (a box where Blender has no layout panels);
each setting labelled with its unit (:func:`setting_label`), shown only where its
``show_if`` holds."""
from __future__ import annotations

import bpy

from .props import format_options


def calibration_label(text: str) -> str:
    """The panel's line for a ``calibration`` setting: the imported unit's model, laser
    count and file, or that the preset's table is in use (or that the stored text is
    not a laser table)."""
    if not text:
        return "Laser table: the preset's"
    from ..core.errors import SettingsError
    from ..core.sensors.calibration import LaserTable
    try:
        t = LaserTable.from_json(text)
    except SettingsError:
        return "Laser table: invalid calibration (clear or import again)"
    return "Laser table: " + t.summary()


def setting_groups(settings_cls, skip=()) -> list[tuple[str, list]]:
    """The settings of ``settings_cls`` (a settings dataclass) by panel section
    (``Meta.group``): ``[(group, [dataclass fields])]``, the sensor's own settings (group
    ``""``) first, then each group in the order its first setting is declared; the names in
    ``skip`` left out. The panel and ``blensor sensors`` draw them so."""
    import dataclasses
    groups: dict[str, list] = {"": []}
    for f in dataclasses.fields(settings_cls):
        if f.name not in skip:
            groups.setdefault(f.metadata["blensor"].group, []).append(f)
    return [(g, fs) for g, fs in groups.items() if fs or g == ""]


def setting_label(meta) -> str:
    """The panel's label of a setting: its label and unit, e.g. ``"Beam divergence (rad)"``."""
    return f"{meta.label} ({meta.unit})" if meta.unit else meta.label


def shown(meta, group) -> bool:
    """The setting is drawn: it has no ``show_if`` or the setting it names has that value."""
    return meta.show_if is None or getattr(group, meta.show_if[0]) == meta.show_if[1]


def _draw_settings(layout, group, fields) -> None:
    col = layout.column(align=True)
    for f in fields:
        meta = f.metadata["blensor"]
        if shown(meta, group):
            col.prop(group, f.name, text=setting_label(meta))


class BLENSOR_PT_sensor(bpy.types.Panel):
    """BlenSor panel of a camera (Properties editor, Object Data tab)."""

    bl_label = "BlenSor"
    bl_idname = "BLENSOR_PT_sensor"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "data"

    @classmethod
    def poll(cls, context):
        return context.camera is not None and hasattr(context.camera, "blensor")

    def draw(self, context):
        import dataclasses
        from ..core.sensors import COMMON, SENSORS
        s = context.camera.blensor
        layout = self.layout
        layout.use_property_split = True
        layout.prop(s, "sensor_type")
        sensor = SENSORS[s.sensor_type]
        group = getattr(s, sensor.storage) if sensor.storage else s
        groups = setting_groups(sensor.Settings, COMMON)
        _draw_settings(layout, group, groups[0][1])  # the sensor's own settings first
        for name, fields in groups[1:]:  # then each section, collapsible where Blender can (4.1+)
            if hasattr(layout, "panel"):
                idname = "BLENSOR_PT_" + name.lower().replace(" ", "_")
                header, body = layout.panel(idname, default_closed=False)
                header.label(text=name)
            else:
                body = layout.box()
                body.label(text=name)
            if body is not None:
                _draw_settings(body, group, fields)
        if any(f.name == "calibration" for f in dataclasses.fields(sensor.Settings)):  # laser table in use
            row = layout.row(align=True)
            row.label(text=calibration_label(group.calibration), icon="PRESET")
            row.operator("blensor.import_calibration", text="", icon="IMPORT")
            if group.calibration:
                row.operator("blensor.clear_calibration", text="", icon="X")
        col = layout.column(align=True)
        for name in COMMON:
            col.prop(s, name)
        box = layout.box()
        box.label(text="Output")
        box.prop(s, "frame_of_reference")
        box.prop(s, "axes")
        row = box.row(align=True)
        row.prop(s, "add_scan_mesh")
        row.prop(s, "add_noisy_scan_mesh")
        box.prop(s, "output_dir")
        box.prop(s, "overwrite")
        box.prop(s, "start_time")
        box.prop(s, "formats")
        for prop, (fmt, _opt, _f) in format_options().items():  # the ticked formats' options
            if fmt in s.formats:
                box.prop(s, prop)
        if sensor.uses_camera:
            box.prop(s, "depth_formats")
        row = layout.row(align=True)
        row.operator("blensor.scan", icon="OUTLINER_OB_POINTCLOUD")
        row.operator("blensor.scan_range", icon="RENDER_ANIMATION")
        if sensor.uses_camera:
            layout.operator("blensor.export_depth_map", icon="IMAGE_ZDEPTH")
        row = layout.row(align=True)
        row.prop(s, "motion_formats", text="")
        row.operator("blensor.export_motion", icon="ANIM")
        layout.operator("blensor.delete_scans", icon="TRASH")


class BLENSOR_PT_material(bpy.types.Panel):
    """LiDAR properties of a material (Properties editor, Material tab)."""

    bl_label = "BlenSor"
    bl_idname = "BLENSOR_PT_material"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "material"

    @classmethod
    def poll(cls, context):
        return context.material is not None and hasattr(context.material, "blensor")

    def draw(self, context):
        from ..scene.shading import material_source
        mat = context.material
        m = mat.blensor
        layout = self.layout
        layout.use_property_split = True
        row = layout.row(align=True)
        row.prop(m, "reflectivity")
        if m.is_property_set("reflectivity"):
            row.operator("blensor.material_unset", text="", icon="X").prop = "reflectivity"
        layout.prop(m, "library")
        layout.prop(m, "retroreflection")
        row = layout.row(align=True)
        row.prop(m, "mirror")
        if m.is_property_set("mirror"):
            row.operator("blensor.material_unset", text="", icon="X").prop = "mirror"
        layout.label(text=material_source(mat), icon="INFO")


class BLENSOR_OT_material_unset(bpy.types.Operator):
    """Forget the material's explicit setting: the library entry or the node tree decides again."""

    bl_idname = "blensor.material_unset"
    bl_label = "Use library or node tree"
    bl_options = {"REGISTER", "UNDO"}

    prop: bpy.props.StringProperty(options={"HIDDEN"})

    @classmethod
    def poll(cls, context):
        return getattr(context, "material", None) is not None and hasattr(context.material, "blensor")

    def execute(self, context):
        if self.prop not in ("reflectivity", "mirror"):
            return {"CANCELLED"}
        context.material.blensor.property_unset(self.prop)
        return {"FINISHED"}


CLASSES = (BLENSOR_PT_sensor, BLENSOR_PT_material, BLENSOR_OT_material_unset)
