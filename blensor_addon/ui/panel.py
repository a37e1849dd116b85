"""Panels: sensor settings in the camera data tab, LiDAR properties in the material tab."""
from __future__ import annotations

import bpy


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
        s = context.camera.blensor
        layout = self.layout
        layout.use_property_split = True
        layout.prop(s, "preset")
        if s.preset == "generic":
            layout.prop(s, "elevations")
        col = layout.column(align=True)
        col.prop(s, "angle_resolution")
        col.prop(s, "rotation_speed")
        col.prop(s, "max_range")
        col = layout.column(align=True)
        col.prop(s, "start_angle")
        col.prop(s, "end_angle")
        col = layout.column(align=True, heading="Noise")
        col.prop(s, "noise_mu")
        col.prop(s, "noise_sigma")
        col.prop(s, "bias_distribution")
        col.prop(s, "bias_sigma")
        col = layout.column(align=True, heading="Reflectivity")
        col.prop(s, "ref_dist")
        col.prop(s, "ref_limit")
        col.prop(s, "ref_slope")
        layout.prop(s, "max_bounces")
        layout.prop(s, "seed")
        layout.prop(s, "visibility")
        box = layout.box()
        box.label(text="Output")
        box.prop(s, "frame_of_reference")
        row = box.row(align=True)
        row.prop(s, "add_scan_mesh")
        row.prop(s, "add_noisy_scan_mesh")
        box.prop(s, "output_dir")
        box.prop(s, "overwrite")
        row = box.row(align=True)
        row.prop(s, "write_npz")
        row.prop(s, "write_evd")
        row.prop(s, "write_pcd")
        if s.write_pcd:
            box.prop(s, "pcd_ascii")
        row = layout.row(align=True)
        row.operator("blensor.scan", icon="OUTLINER_OB_POINTCLOUD")
        row.operator("blensor.scan_range", icon="RENDER_ANIMATION")
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
        m = context.material.blensor
        layout = self.layout
        layout.use_property_split = True
        layout.prop(m, "reflectivity")
        layout.prop(m, "mirror")


CLASSES = (BLENSOR_PT_sensor, BLENSOR_PT_material)
