"""Sensor settings on camera data and BlenSor settings on materials (saved in the .blend),
generated from the sensor and format registries' metadata (:mod:`blensor_addon.core.sensors`,
:mod:`blensor_addon.io.formats`), and the upgrade of settings stored by older versions.

``bpy.types.Camera.blensor`` holds ``sensor_type``, the settings common to every sensor
(seed, max bounces, visibility), the output options and, per sensor type, that type's
settings: the rotating LiDAR's on the group itself (where v0.1 stored them, so v0.1
files load unchanged), every other type's in a nested group named after it
(``blensor.tof.max_range``). ``bpy.types.Material.blensor`` holds reflectivity and the
mirror flag. Hard limits are left loose on purpose: values out of range are reported by
the scan with the setting's name and allowed range instead of being clamped silently.

Stored values: every enum item carries an explicit number, so a saved file keeps its
meaning whatever is added: ``sensor_type`` stores :attr:`Sensor.number
<blensor_addon.core.sensors.sensor.Sensor.number>`, the format sets store the formats'
flag bits (:data:`blensor_addon.io.formats.FLAG_BITS`, ``MotionFormat.bit``), a
setting's choices and presets their index in the (append-only) list.

Versions (:data:`SETTINGS_VERSION`, stored per camera as ``settings_version``): a camera
whose settings were stored before version 1 (every file saved before REP-103 became the
default axes) is upgraded when the file is loaded (:func:`upgrade_settings`): ``axes`` and
``time_model`` it never stored keep the values it scanned with then (``blensor``,
``frame``), and the typed ``depth_formats`` / ``motion_formats`` strings become sets.
Version 2 made the rotating LiDAR spin clockwise seen from above, as Velodyne and Ouster
heads do (``rotation_direction="cw"``): a camera stored before it that never stored a
``rotation_direction`` keeps the counter-clockwise spin it scanned with (``ccw``). Version 2
also made the line scanner's ``ibeo_lux`` the real unit (layers, 200 m, 4 cm steps, the
vertical mirror, cw, the mirror timing) and gave the Kinect 0.06 px of disparity noise: a
camera stored before it scans its line group as BlenSor 2011's LUX (preset
``ibeo_lux_2011``, its stored values kept, the values it never stored as that scanner had
them: :data:`LINE_BEFORE_V2`) and its Kinect group with the noise it never stored as 0 px.
Version 3 made the ToF camera's ``ambiguity_range`` 5 m (the SR4000's standard 30 MHz): a
ToF group stored before it that never stored one keeps the 10 m (15 MHz) it scanned with
(:data:`TOF_BEFORE_V3`); it also gave the VLP-16 and HDL-32E presets their manuals' vertical
beam offsets: a camera stored before it that never stored ``vertical_offsets`` keeps them off.
Version 4 gave the rotating LiDAR the radiometric return model (``return_model="radiometric"``, the
real presets' default): a camera stored before it that never stored a ``return_model`` keeps the
reflectivity limit it scanned with (``limit``).
Cameras made since are stamped with the current version when the file is saved.
"""
from __future__ import annotations

import dataclasses
import sys

import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty,
                       StringProperty)

from ..compat import stored_idprops
from ..core.sensors import COMMON, SENSORS, SensorSettings

#: version of the settings a camera stores (``settings_version``); 0 = stored before
#: versions (before REP-103 became the default axes); 1: before the rotating LiDAR spun
#: clockwise (as the real Velodyne, Ouster and Hesai units do); 2: before the ToF camera's ambiguity
#: range became the SR4000's standard 5 m (30 MHz) and the VLP-16 / HDL-32E beams had vertical offsets;
#: 3: before the radiometric return model (the real presets' default since)
SETTINGS_VERSION = 4

#: line-scanner values a camera stored before version 2 scanned with where it stored none
#: (the defaults then, BlenSor 2011's LUX: reference 6.2); its preset becomes ``ibeo_lux_2011``
LINE_BEFORE_V2 = {"max_range": 90.0, "min_range": 0.0, "range_resolution": 0.0, "mirror": "inclined",
                  "sweep_timing": "period", "rotation_direction": "ccw"}
#: Kinect values of a camera stored before version 2, where it stored none (the defaults then)
KINECT_BEFORE_V2 = {"noise_sigma": 0.0}
#: ToF values of a camera stored before version 3, where it stored none (the default then: 15 MHz)
TOF_BEFORE_V3 = {"ambiguity_range": 10.0}


def _description(meta) -> str:
    return meta.description + (f" ({meta.unit})" if meta.unit else "")


def _prop(name: str, default, meta):
    """The bpy property of one setting."""
    kw = {"name": meta.label, "description": _description(meta)}
    if meta.kind == "bool":
        return BoolProperty(default=default, **kw)
    if meta.kind == "int":
        lo = int(meta.lo) if meta.lo is not None and meta.lo >= -2**31 else None
        extra = {"min": lo} if name == "seed" and lo is not None else {}
        return IntProperty(default=default, **extra, **kw)
    if meta.kind == "float":
        extra = {}
        if meta.lo is not None:
            extra["soft_min"] = float(meta.lo)
        if meta.hi is not None:
            extra["soft_max"] = float(meta.hi)
        return FloatProperty(default=default, precision=meta.precision, **extra, **kw)
    if meta.kind == "enum":  # stored as the choice's index in the append-only list
        items = [(c, c.replace("_", " "), c, i) for i, c in enumerate(meta.choices)]
        return EnumProperty(items=items, default=default, **kw)
    if meta.kind == "floats":
        return StringProperty(default=meta.format(default), **kw)
    return StringProperty(default=default, **kw)


def _apply_preset(self, _context) -> None:
    """Update callback of every ``preset`` property: set the preset's values. One
    module-level function for every sensor type (bpy 4.2 crashes at exit when an update
    callback was a closure that is gone by then)."""
    from ..core.sensors import SENSORS
    sensor = next(s for s in SENSORS.values() if type(self).__name__ == _group_name(s))
    metas = {f.name: f.metadata["blensor"] for f in dataclasses.fields(sensor.Settings)}
    for key, value in sensor.presets[self.preset].values.items():
        setattr(self, key, metas[key].format(value) if metas[key].kind == "floats" else value)


def _group_name(sensor) -> str:
    """Class name of the property group holding ``sensor``'s own settings."""
    return f"BLENSOR_PG_{sensor.name}" if sensor.storage else "BLENSOR_PG_sensor"


def setting_property(sensor_type: str, name: str):
    """The bpy property of setting ``name`` of ``sensor_type`` (``preset`` gets the
    presets' labels and the callback that applies a chosen preset's values)."""
    from ..core.sensors import SENSORS
    sensor = SENSORS[sensor_type]
    f = next(f for f in dataclasses.fields(sensor.Settings) if f.name == name)
    meta = f.metadata["blensor"]
    if name == "preset":
        return EnumProperty(name=meta.label, description=_description(meta), default=f.default,
                            update=_apply_preset,
                            items=[(k, p.label, p.source or p.label, i)  # stored: index (append only)
                                   for i, (k, p) in enumerate(sensor.presets.items())])
    return _prop(name, f.default, meta)


def _annotations(sensor, names) -> dict:
    """Annotations of the given settings, as strings that bpy evaluates in this module
    when the class is registered. (Property objects made at import and kept by a class
    make bpy 4.2 crash at exit once an update callback is involved; string annotations,
    as ``from __future__ import annotations`` gives class bodies, do not.)"""
    return {name: f"setting_property({sensor.name!r}, {name!r})" for name in
            (f.name for f in dataclasses.fields(sensor.Settings)) if name in names}


def _own_fields(sensor) -> list[str]:
    return [f.name for f in dataclasses.fields(sensor.Settings) if f.name not in COMMON]


def _make_groups():
    """One PropertyGroup class per sensor type with a nested group, and the camera's group."""
    nested = {}
    for name, sensor in SENSORS.items():
        if sensor.storage:
            cls = type(_group_name(sensor), (bpy.types.PropertyGroup,),
                       {"__annotations__": _annotations(sensor, _own_fields(sensor)), "__module__": __name__,
                        "__doc__": f"{sensor.label} settings of a camera"})
            nested[name] = cls
    ann = {"sensor_type": "sensor_type_property()"}
    for f in dataclasses.fields(SensorSettings):
        ann[f.name] = f"common_property({f.name!r})"
    for name, sensor in SENSORS.items():
        if not sensor.storage:
            ann.update(_annotations(sensor, _own_fields(sensor)))
    output = {k: f"OUTPUT_OPTIONS[{k!r}]()" for k in OUTPUT_OPTIONS}
    for prop in format_options():  # every writer's options, from the registry
        output[prop] = f"format_option_property({prop!r})"
    for name in list(nested):
        if name in output or name in ann:  # a plug-in named like a camera property
            print(f"blensor: warning: sensor '{name}' gets no settings on cameras: '{name}' is the name of a "
                  "camera property (scan it with overrides)", file=sys.stderr)
            del nested[name]
            continue
        ann[name] = f"PointerProperty(type=NESTED_BY_TYPE[{name!r}])"
    ann.update(output)
    camera = type("BLENSOR_PG_sensor", (bpy.types.PropertyGroup,),
                  {"__annotations__": ann, "__module__": __name__,
                   "__doc__": "BlenSor sensor settings of a camera"})
    return nested, camera


def format_options() -> dict:
    """Every option of every writer of the registry as a camera property:
    ``"<format>_<option>"`` -> (format, option, dataclass field). ``pcd_ascii`` is one of
    them (the name earlier versions stored)."""
    from ..io.formats import WRITERS
    out = {}
    for name, w in WRITERS.items():
        for f in dataclasses.fields(w.Options):
            out[f"{name}_{f.name}"] = (name, f.name, f)
    return out


def format_option_property(prop: str):
    """The bpy property of the writer option ``prop`` (see :func:`format_options`)."""
    f = format_options()[prop][2]
    return _prop(prop, f.default, f.metadata["blensor"])


def format_option_values(s, formats) -> dict:
    """``{"<format>.<option>": value}`` of the camera settings ``s`` for the ticked
    ``formats`` (what :func:`blensor_addon.io.formats.make_options` takes)."""
    return {f"{fmt}.{opt}": getattr(s, prop) for prop, (fmt, opt, _) in format_options().items()
            if fmt in formats}


def formats_property():
    """The range scan's file formats (every writer of the registry), ticked like flags;
    each stored as its flag bit (:data:`blensor_addon.io.formats.FLAG_BITS`)."""
    from ..io.formats import FLAG_BITS, WRITERS
    return EnumProperty(name="Formats", description="File formats of range scans", options={"ENUM_FLAG"},
                        items=[(k, k.upper(), w.description, 1 << FLAG_BITS[k]) for k, w in WRITERS.items()],
                        default={"npz"})


def depth_formats_property():
    """The depth-map export's formats: the registry's writers that need an image sensor,
    stored with the same flag bits as in ``formats``."""
    from ..io.formats import FLAG_BITS, WRITERS
    return EnumProperty(name="Depth formats", description="Formats of the depth-map export",
                        options={"ENUM_FLAG"},
                        items=[(k, k.upper(), w.description, 1 << FLAG_BITS[k]) for k, w in WRITERS.items()
                               if w.needs.image], default={"exr"})


def motion_formats_property():
    """The motion export's formats (:data:`blensor_addon.io.formats.MOTION_FORMATS`),
    each stored as its flag bit."""
    from ..io.formats import MOTION_FORMATS
    return EnumProperty(name="Motion formats", description="Formats of the motion export",
                        options={"ENUM_FLAG"},
                        items=[(k, k.upper(), m.description, 1 << m.bit) for k, m in MOTION_FORMATS.items()],
                        default={"blensor", "tum", "json"})


def ordered_formats(ticked, registry) -> tuple:
    """The names of a flag enum's value ``ticked`` (a set) in the order of ``registry``
    (a dict: :data:`~blensor_addon.io.formats.WRITERS`, ``MOTION_FORMATS``), so a run
    does not depend on a set's order."""
    return tuple(k for k in registry if k in ticked)


def sensor_type_property():
    """The ``sensor_type`` enum (every registered sensor type, stored as its number)."""
    return EnumProperty(name="Sensor type", description="Which sensor this camera simulates",
                        items=[(k, s.label, s.description, s.number) for k, s in SENSORS.items()],
                        default="rotating")


def common_property(name: str):
    """The bpy property of a setting common to every sensor (seed, max bounces, visibility)."""
    f = next(f for f in dataclasses.fields(SensorSettings) if f.name == name)
    return _prop(name, f.default, f.metadata["blensor"])


#: output options of a camera (not sensor physics): name -> property factory
OUTPUT_OPTIONS = {
    "add_scan_mesh": lambda: BoolProperty(name="Add scan mesh", default=True),
    "add_noisy_scan_mesh": lambda: BoolProperty(name="Add noisy mesh", default=False),
    "frame_of_reference": lambda: EnumProperty(
        name="Coordinates", items=[("sensor", "Sensor", "Sensor frame (camera-local)", 0),
                                   ("world", "World", "Blender world frame", 1)], default="sensor"),
    "axes": lambda: EnumProperty(
        name="Axes", default="ros",  # before settings version 1: blensor (upgrade_camera keeps it)
        items=[("blensor", "BlenSor", "Sensor frame: x right, y up, -z ahead (the original's)", 0),
               ("ros", "ROS REP-103", "Sensor frame: x ahead, y left, z up", 1)]),
    "output_dir": lambda: StringProperty(name="Output folder", subtype="DIR_PATH", default="//blensor_out/"),
    "start_time": lambda: StringProperty(
        name="Start time", default="",
        description="Absolute time of scene time 0 in rosbag2, pcap, LAS gps_time and npz: ISO "
        "8601 (2020-01-01T00:00:00Z) or UNIX seconds; empty: 2020-01-01T00:00:00Z (--start-time "
        "overrides it)"),
    "formats": lambda: formats_property(),
    "overwrite": lambda: BoolProperty(name="Overwrite", default=False,
                                      description="Replace the files of an earlier scan in the output folder"),
    "motion_formats": lambda: motion_formats_property(),
    "depth_formats": lambda: depth_formats_property(),
    "settings_version": lambda: IntProperty(
        name="Settings version", default=0, min=0, options={"HIDDEN"},
        description="Version of the BlenSor settings stored on this camera (0: before versions)"),
}


def stored_start_time(p):
    """The time base a camera's settings ``p`` store (``start_time``; a file saved before it
    may hold the pcap writer's former ``pcap_start_time``, UNIX s, used where not 0), or
    None (the default, :data:`blensor_addon.core.timebase.DEFAULT_START_TIME`). Checked
    by the range job (SettingsError ``start_time``)."""
    text = str(getattr(p, "start_time", "") or "").strip()
    if text:
        return text
    legacy = p.get("pcap_start_time") if hasattr(p, "get") else None
    if isinstance(legacy, (int, float)) and not isinstance(legacy, bool) and legacy:
        return float(legacy)
    return None


def _library_names(_self, _context, edit_text):
    """Entry names of the reflectance library containing ``edit_text`` (the search list of
    ``Material.blensor.library``)."""
    from ..core.materials import library
    text = (edit_text or "").lower()
    return [n for n in sorted(library()) if text in n.lower()]


class BLENSOR_PG_material(bpy.types.PropertyGroup):
    """LiDAR properties of a material (seed 000 sections 3.2, 3.5; seed 002 section II-C
    on material reflectance). Where the reflectivity comes from (docs/physics.md):
    ``reflectivity`` when it was set (``is_property_set``), else the ``library`` entry, else
    the material's node tree (:func:`blensor_addon.scene.shading.evaluate_material`);
    ``mirror`` when set, else the node tree's Metallic >= 0.5; ``retroreflection`` > 0 makes it
    a retroreflector (:func:`blensor_addon.core.materials.retro_lobe`)."""

    reflectivity: FloatProperty(name="Reflectivity",
                                description="Diffuse reflectivity at the laser wavelength; once set it "
                                "overrides the library entry and the node tree. Values above 1 are "
                                "retro-reflectors (equivalent Lambertian reflectance, up to 10)",
                                default=0.8, min=0.0, max=10.0, soft_max=1.0)  # above 1: retro-reflectors
    mirror: BoolProperty(name="Mirror", description="Total reflection: rays reflect and go on; once set it "
                         "overrides the node tree's Metallic", default=False)
    library: StringProperty(name="Library entry",
                            description="Entry of the reflectance library (reflectance per laser "
                            "wavelength); empty: none. Used unless Reflectivity was set", default="",
                            search=_library_names)
    retroreflection: FloatProperty(name="Retroreflection",
                                   description="Coefficient of retroreflection R_A (cd/lx/m^2) at "
                                   "entrance 0 deg: a retroreflector (sheeting, plate) under the "
                                   "radiometric return model, e.g. 250 for ASTM D4956 Type III white; "
                                   "0: none (the library entry's, if any)",
                                   default=0.0, min=0.0, max=100000.0, soft_max=1000.0)


NESTED_BY_TYPE: dict = {}
BLENSOR_PG_sensor = None
CLASSES: tuple = ()


def build_classes() -> tuple:
    """(Re)make the property-group classes from the registries as they are now (a sensor
    or writer registered since is included); returns :data:`CLASSES`."""
    global NESTED_BY_TYPE, BLENSOR_PG_sensor, CLASSES
    NESTED_BY_TYPE, BLENSOR_PG_sensor = _make_groups()
    CLASSES = (*NESTED_BY_TYPE.values(), BLENSOR_PG_sensor, BLENSOR_PG_material)
    return CLASSES


build_classes()


# ---------------------------------------------------------------------------------------
# stored settings of older versions


def _editable_cameras():
    for cam in bpy.data.cameras:
        p = getattr(cam, "blensor", None)
        if p is None or cam.library is not None or not getattr(cam, "is_editable", True):
            continue
        yield cam, p


def _old_flags(p, name: str, registry) -> set | None:
    """The set a typed comma-separated ``name`` string (stored before version 1) names,
    keeping the registry's formats; None if no string is stored."""
    raw = stored_idprops(p)
    text = raw.get(name) if raw is not None else None
    if not isinstance(text, str):
        return None
    del raw[name]  # the string is replaced by the enum's number
    return {f.strip().lower() for f in text.split(",") if f.strip().lower() in registry}


def upgrade_camera(cam) -> bool:
    """Upgrade the BlenSor settings stored on camera data ``cam`` to
    :data:`SETTINGS_VERSION` (0 -> 1: ``axes`` and ``time_model`` it never stored are
    stored as the values it scanned with, ``"blensor"`` and ``"frame"``; the typed
    ``depth_formats`` / ``motion_formats`` strings become sets; below 2: a
    ``rotation_direction`` it never stored is stored as ``"ccw"``, the line and Kinect
    groups keep their 2011 behaviour (:func:`_upgrade_line_v2`, :data:`KINECT_BEFORE_V2`); below
    3: the ToF group keeps the ambiguity range it never stored, :data:`TOF_BEFORE_V3`, and the
    rotating LiDAR the beams without vertical offsets, ``vertical_offsets = False``; below 4: a
    ``return_model`` it never stored is stored as ``"limit"``, the model it scanned with).
    Returns whether it changed anything; a camera already at the version (or newer) is
    left as it is."""
    from ..io.formats import MOTION_FORMATS, WRITERS
    p = cam.blensor
    version = p.settings_version
    if version >= SETTINGS_VERSION:
        return False
    if version < 1:
        if not p.is_property_set("axes"):
            p.axes = "blensor"  # REP-103 became the default in version 1
        if not p.is_property_set("time_model"):
            p.time_model = "frame"  # a v0.1 file: the frozen-frame model it had
        for name, registry in (("depth_formats", WRITERS), ("motion_formats", MOTION_FORMATS)):
            old = _old_flags(p, name, registry)
            if old:
                setattr(p, name, old)
    if version < 2:
        if not p.is_property_set("rotation_direction"):
            p.rotation_direction = "ccw"  # the spin it scanned with; cw became the default in version 2
        if isinstance(getattr(p, "line", None), bpy.types.PropertyGroup):
            _upgrade_line_v2(p.line)
        if isinstance(getattr(p, "kinect", None), bpy.types.PropertyGroup):
            _store_unset(p.kinect, KINECT_BEFORE_V2)
    if version < 3:
        if not p.is_property_set("vertical_offsets"):
            p.vertical_offsets = False  # the VLP-16 / HDL-32E beams it scanned with: from the origin
        if isinstance(getattr(p, "tof", None), bpy.types.PropertyGroup):
            _store_unset(p.tof, TOF_BEFORE_V3)
    if version < 4 and not p.is_property_set("return_model"):
        p.return_model = "limit"  # the reflectivity limit it scanned with (radiometric: version 4's presets)
    p.settings_version = SETTINGS_VERSION
    return True


def _store_unset(group, values: dict) -> None:
    """Store ``values`` (name -> value) on ``group`` where it stored none."""
    for name, value in values.items():
        if not group.is_property_set(name):
            setattr(group, name, value)


def _upgrade_line_v2(group) -> None:
    """A line group stored before version 2: its preset (none stored, or ``ibeo_lux``, the
    only one then, whose layers were the 2011 ones) becomes ``ibeo_lux_2011`` without
    applying that preset's values (the raw enum index is stored, so the update callback
    does not overwrite what the camera stored); the values it never stored become those it
    scanned with (:data:`LINE_BEFORE_V2`)."""
    from ..core.sensors.line import PRESETS as LINE_PRESETS
    if not group.is_property_set("preset") or group.preset == "ibeo_lux":
        raw = _idprops(group)
        raw["preset"] = list(LINE_PRESETS).index("ibeo_lux_2011")
    _store_unset(group, LINE_BEFORE_V2)


def _idprops(group):
    """The ID-property group holding ``group``'s stored values, made if it has none yet
    (Blender 5.0 keeps add-on properties apart from custom properties)."""
    get = getattr(group, "bl_system_properties_get", None)
    if get is None:
        return group
    raw = get()
    return raw if raw is not None else get(do_create=True)


def upgrade_settings() -> int:
    """Upgrade every editable camera of the open file (:func:`upgrade_camera`); linked
    and non-editable cameras, and one that refuses the change (a library override), are
    left as they are. The load handler runs it after a file is loaded; a program that
    opens .blend files with the add-on's properties registered but without its handlers
    (a headless tool) calls it after each ``open_mainfile``, before reading any camera's
    settings (Blender drops a value stored under another type, such as the typed format
    strings, when the property is first read). Returns the number of cameras upgraded."""
    n = 0
    for cam, _p in _editable_cameras():
        try:
            n += upgrade_camera(cam)
        except (AttributeError, TypeError, RuntimeError):
            pass
    return n


def stamp_settings() -> int:
    """Store :data:`SETTINGS_VERSION` on every editable camera that has no version yet
    (cameras made since the file was loaded, which use the current defaults), before a
    file is saved, so they do not read as old cameras when it is loaded. Returns the
    number stamped."""
    n = 0
    for _cam, p in _editable_cameras():
        try:
            if not p.is_property_set("settings_version"):
                p.settings_version = SETTINGS_VERSION
                n += 1
        except (AttributeError, TypeError, RuntimeError):
            pass
    return n


def register_properties() -> None:
    """Attach ``Camera.blensor`` and ``Material.blensor``."""
    bpy.types.Camera.blensor = PointerProperty(type=BLENSOR_PG_sensor)
    bpy.types.Material.blensor = PointerProperty(type=BLENSOR_PG_material)


def unregister_properties() -> None:
    """Remove ``Camera.blensor`` and ``Material.blensor``."""
    del bpy.types.Material.blensor
    del bpy.types.Camera.blensor
