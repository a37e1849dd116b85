"""Build ``scenes/crossing.blend``: the crossing of the BlenSor paper (seed 000, section 5,
Fig. 4), reproducibly.

Two 10 m roads cross at the origin (world +Z up); kerbed pavements and four buildings
stand on the corners, trees line the pavements (a collection instanced by empties), a
row of bollards comes from an Array modifier, one building has a shop window that is a
mirror, and the south-west building a glass shop front (issue 22: a single-face pane with
a Glass BSDF of IOR 1.5, a room with a counter behind it). Four cars (one shared mesh, so
the scene has instancing) drive through the crossing over frames 1-48 at 24 fps. The ego
car drives north on the right lane with a Velodyne HDL-64E S2 on its roof: the camera
``Velodyne`` (local +Y = world up, looking north). Materials come from
``blensor_addon/core/tables/reflectance.json``.

Usage: ``python scenes/build_crossing.py [OUT.blend] [--variant fog|rig]`` (pip ``bpy``; the
committed files are built with bpy 4.2.23: ``.venv-bpy4.2.23/bin/python``), default
``scenes/crossing.blend``; ``--variant fog`` gives ``scenes/crossing_fog.blend``, the same
scene with the sensor's ``weather = fog`` at ``fog_visibility`` :data:`FOG_VISIBILITY` m;
``--variant rig`` gives ``scenes/crossing_rig.blend``, the same scene with three more sensors
on the ego car (:data:`RIG`: two side VLP-16s and a front Kinect) for rig scans.
The same script gives the same scene every time.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import bpy

ROOT = Path(__file__).resolve().parent.parent
FRAMES = (1, 48)
VARIANTS = ("clear", "fog", "rig")
#: meteorological optical range of the fog variant (m): dense fog (Hahner et al. 2021 simulate
#: MOR 15-600 m)
FOG_VISIBILITY = 80.0


def make_materials(addon_registered: bool) -> dict:
    lib = json.loads((ROOT / "blensor_addon" / "core" / "tables" / "reflectance.json").read_text())
    mats = {}
    for name, spec in lib.items():
        if name.startswith("_"):
            continue
        m = bpy.data.materials.new(name)
        m.diffuse_color = (*spec["color"], 1.0)
        m.use_nodes = True
        bsdf = next(n for n in m.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
        bsdf.inputs["Base Color"].default_value = (*spec["color"], 1.0)
        if spec["mirror"]:
            bsdf.inputs["Metallic"].default_value = 1.0
            bsdf.inputs["Roughness"].default_value = 0.0
        if addon_registered:
            m.blensor.reflectivity = spec["reflectivity"]
            m.blensor.mirror = spec["mirror"]
        mats[name] = m
    return mats


def box_parts(parts):
    """Vertices and quads of axis-aligned boxes: parts = [(center, size, material slot)]."""
    verts, faces, mat_idx = [], [], []
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    for (cx, cy, cz), (sx, sy, sz), slot in parts:
        base = len(verts)
        for i in range(8):
            verts.append((cx + (sx / 2 if i & 4 else -sx / 2), cy + (sy / 2 if i & 2 else -sy / 2),
                          cz + (sz / 2 if i & 1 else -sz / 2)))
        for q in quads:
            faces.append(tuple(base + k for k in q))
            mat_idx.append(slot)
    return verts, faces, mat_idx


def mesh_object(name, verts, faces, mats, mat_idx=None, collection=None):
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata(verts, [], faces)
    for m in mats:
        mesh.materials.append(m)
    if mat_idx is not None:
        mesh.polygons.foreach_set("material_index", mat_idx)
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    (collection or bpy.context.scene.collection).objects.link(obj)
    return obj


def cylinder(radius, height, segments=12, z0=0.0):
    verts, faces = [], []
    for i in range(segments):
        a = 2 * math.pi * i / segments
        verts += [(radius * math.cos(a), radius * math.sin(a), z0), (radius * math.cos(a), radius * math.sin(a), z0 + height)]
    for i in range(segments):
        j = (i + 1) % segments
        faces.append((2 * i, 2 * j, 2 * j + 1, 2 * i + 1))
    faces.append(tuple(2 * i for i in reversed(range(segments))))
    faces.append(tuple(2 * i + 1 for i in range(segments)))
    return verts, faces


def sphere(radius, center, rings=8, segments=12):
    cx, cy, cz = center
    verts = [(cx, cy, cz - radius)]
    for r in range(1, rings):
        th = math.pi * r / rings - math.pi / 2
        for s in range(segments):
            a = 2 * math.pi * s / segments
            verts.append((cx + radius * math.cos(th) * math.cos(a), cy + radius * math.cos(th) * math.sin(a),
                          cz + radius * math.sin(th)))
    verts.append((cx, cy, cz + radius))
    faces = []
    top = len(verts) - 1
    for s in range(segments):
        faces.append((0, 1 + (s + 1) % segments, 1 + s))
    for r in range(rings - 2):
        for s in range(segments):
            a = 1 + r * segments + s
            b = 1 + r * segments + (s + 1) % segments
            faces.append((a, b, b + segments, a + segments))
    last = 1 + (rings - 2) * segments
    for s in range(segments):
        faces.append((last + s, last + (s + 1) % segments, top))
    return verts, faces


#: the glass shop: a room cut into the south-west building's east facade (x = -12 m), its
#: glass pane the facade's plane between these corners (x, y, z in m)
SHOP_Y, SHOP_Z, SHOP_DEPTH = (-22.0, -16.0), (0.15, 3.5), 4.0


def shop_building_parts():
    """The south-west building (24 m cube's footprint x, y in [-36, -12], 15 m high) as boxes
    around the shop: a room SHOP_DEPTH deep behind the east facade, between SHOP_Y and up to
    SHOP_Z[1] (its floor is the pavement). Faces of neighbouring boxes meet only inside."""
    (y0, y1), (_, z1), x_back = SHOP_Y, SHOP_Z, -12.0 - SHOP_DEPTH
    return [
        (((-36 + x_back) / 2, -24, 7.5), (x_back + 36, 24, 15), 0),          # behind the room
        (((x_back - 12) / 2, (-36 + y0) / 2, 7.5), (SHOP_DEPTH, y0 + 36, 15), 0),  # south of it
        (((x_back - 12) / 2, (y1 - 12) / 2, 7.5), (SHOP_DEPTH, -12 - y1, 15), 0),  # north of it
        (((x_back - 12) / 2, (y0 + y1) / 2, (z1 + 15) / 2), (SHOP_DEPTH, y1 - y0, 15 - z1), 0),  # above
    ]


def glass_material(name: str = "shop_glass"):
    """A clear glass material: only a Glass BSDF (IOR 1.5, roughness 0) on the output, no
    BlenSor reflectivity of its own (the node tree decides: the scanner follows the glass)."""
    glass = bpy.data.materials.new(name)
    glass.use_nodes = True
    nodes = glass.node_tree.nodes
    for n in list(nodes):
        if n.type != "OUTPUT_MATERIAL":
            nodes.remove(n)
    out = next(n for n in nodes if n.type == "OUTPUT_MATERIAL")
    bsdf = nodes.new("ShaderNodeBsdfGlass")
    bsdf.inputs["IOR"].default_value = 1.5
    bsdf.inputs["Roughness"].default_value = 0.0
    glass.node_tree.links.new(bsdf.outputs["BSDF"], out.inputs["Surface"])
    glass.diffuse_color = (0.8, 0.9, 1.0, 0.3)
    return glass


def shop_window(M, registered):
    """The shop's glass pane (one face in the facade plane x = -12 m, a Glass BSDF of IOR
    1.5 and no BlenSor reflectivity of its own: the node tree decides, issue 22 section 3)
    and a counter inside the room (concrete), 1.5 m behind the glass."""
    glass = glass_material()
    (y0, y1), (z0, z1) = SHOP_Y, SHOP_Z
    pane = mesh_object("ShopGlass", [(-12.0, y0, z0), (-12.0, y1, z0), (-12.0, y1, z1), (-12.0, y0, z1)],
                       [(0, 1, 2, 3)], [glass])
    pane["blensor_label"] = "building"
    v, f, mi = box_parts([((-13.9, (y0 + y1) / 2, 0.6), (0.8, 4.0, 0.9), 0)])
    counter = mesh_object("ShopCounter", v, f, [M["concrete"]], mi)
    counter["blensor_label"] = "other-structure"
    return pane


def keyframes(obj, points):
    for frame, loc in points:
        obj.location = loc
        obj.keyframe_insert("location", frame=frame)


def empty_file_with_addon() -> bool:
    """Start from an empty file and register the add-on if it can be imported (its
    settings are then stored on cameras and materials); returns whether it was."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    try:
        import blensor_addon
        blensor_addon.register()
        return True
    except ImportError:
        return False


#: the rig variant's extra sensors on the ego car: name -> (sensor type, preset, location in
#: the car's frame (+X ahead, +Y left, +Z up; m), yaw about the car's up axis (deg))
RIG = {
    "VLP16_Left": ("rotating", "vlp16", (0.2, 0.95, 1.9), 90.0),
    "VLP16_Right": ("rotating", "vlp16", (0.2, -0.95, 1.9), -90.0),
    "Kinect": ("kinect", "", (2.3, 0.0, 0.9), 0.0),
}


def add_rig(scene, ego, registered: bool) -> None:
    """The rig variant's sensors (:data:`RIG`), parented to the ego car beside its roof
    HDL-64E: two VLP-16s on the sides looking left and right, a Kinect in the front
    bumper looking ahead (camera -Z along the yaw, +Y up)."""
    for name, (stype, preset, loc, yaw) in RIG.items():
        data = bpy.data.cameras.new(name)
        cam = bpy.data.objects.new(name, data)
        scene.collection.objects.link(cam)
        cam.parent = ego
        cam.location = loc
        cam.rotation_euler = (math.pi / 2, 0.0, math.radians(yaw) - math.pi / 2)
        if registered:
            s = data.blensor
            s.sensor_type = stype
            if preset:
                s.preset = preset
            s.time_model = "continuous"
            s.axes = "ros"


def build(out: Path, variant: str = "clear") -> None:
    registered = empty_file_with_addon()
    bpy.context.preferences.edit.keyframe_new_interpolation_type = "LINEAR"
    scene = bpy.context.scene
    scene.name = "Crossing"
    scene.render.fps = 24
    scene.frame_start, scene.frame_end = FRAMES
    scene.frame_current = 1
    M = make_materials(registered)

    # ground: road cross (asphalt) and four kerbed pavement blocks
    # one east-west strip and two north-south arms, so no faces coincide (ties between
    # coplanar faces would make the hit depend on the ray caster's traversal order)
    roads = [((0, 0, -0.05), (120, 10, 0.1), 0), ((0, 32.5, -0.05), (10, 55, 0.1), 0),
             ((0, -32.5, -0.05), (10, 55, 0.1), 0)]
    v, f, mi = box_parts(roads)
    mesh_object("Road", v, f, [M["asphalt"]], mi)["blensor_label"] = "road"
    markings = []
    for k in range(-11, 12):
        if abs(k) > 1:
            markings.append(((k * 5.0, 0, 0.002), (2.5, 0.15, 0.004), 0))
            markings.append(((0, k * 5.0, 0.002), (0.15, 2.5, 0.004), 0))
    v, f, mi = box_parts(markings)
    mesh_object("RoadMarkings", v, f, [M["road_marking"]], mi)["blensor_label"] = "lane-marking"
    pav = []
    for sx in (-1, 1):
        for sy in (-1, 1):
            pav.append(((sx * 32.6, sy * 32.6, 0.075), (54.8, 54.8, 0.15), 0))
    v, f, mi = box_parts(pav)
    mesh_object("Pavement", v, f, [M["concrete"]], mi)["blensor_label"] = "sidewalk"
    kerbs = []
    for sx in (-1, 1):
        for sy in (-1, 1):
            kerbs.append(((sx * 32.5, sy * 5.1, 0.08), (55, 0.2, 0.16), 0))
            kerbs.append(((sx * 5.1, sy * 32.6, 0.08), (0.2, 54.8, 0.16), 0))
    v, f, mi = box_parts(kerbs)
    mesh_object("Kerbs", v, f, [M["kerb_granite"]], mi)["blensor_label"] = "sidewalk"  # SemanticKITTI: curbs

    # buildings on the corners; the north-east one has a shop window (mirror)
    walls = {(-1, -1): "brick", (1, -1): "plaster_white", (-1, 1): "plaster_white", (1, 1): "brick"}
    for (sx, sy), mat in walls.items():
        parts = [((sx * 24, sy * 24, 7.5), (24, 24, 15), 0)]
        if (sx, sy) == (-1, -1):
            parts = shop_building_parts()
        v, f, mi = box_parts(parts)
        b = mesh_object(f"Building_{'N' if sy > 0 else 'S'}{'E' if sx > 0 else 'W'}", v, f, [M[mat]], mi)
        b["blensor_label"] = "building"
    shop_window(M, registered)
    v, f, mi = box_parts([((16, 11.97, 2.2), (10, 0.05, 3.2), 0)])
    w = mesh_object("ShopWindow", v, f, [M["shop_window"]], mi)
    w["blensor_label"] = "building"

    # trees: one prototype collection, instanced by empties along the pavements
    proto = bpy.data.collections.new("TreePrototype")
    scene.collection.children.link(proto)
    tv, tf = cylinder(0.15, 2.5)
    trunk = mesh_object("TreeTrunk", tv, tf, [M["tree_bark"]], collection=proto)
    cv, cf = sphere(1.6, (0, 0, 3.6))
    crown = mesh_object("TreeCrown", cv, cf, [M["vegetation"]], collection=proto)
    trunk["blensor_label"] = "trunk"
    crown["blensor_label"] = "vegetation"
    bpy.context.view_layer.layer_collection.children["TreePrototype"].exclude = True
    n_tree = 0
    for sx in (-1, 1):
        for sy in (-1, 1):
            for k in range(3):
                e = bpy.data.objects.new(f"Tree.{n_tree:03d}", None)
                e.instance_type = "COLLECTION"
                e.instance_collection = proto
                e.location = (sx * (12 + 9 * k), sy * 7.5, 0.15)
                e["blensor_label"] = "vegetation"
                scene.collection.objects.link(e)
                n_tree += 1

    # bollards from an Array modifier (modifier stack is scanned as evaluated)
    bv, bf = cylinder(0.1, 0.9, 8, 0.15)
    bollard = mesh_object("Bollards", bv, bf, [M["metal_pole"]])
    bollard.location = (-6.2, -8.0, 0.0)
    arr = bollard.modifiers.new("Array", "ARRAY")
    arr.count = 5
    arr.use_relative_offset = False
    arr.use_constant_offset = True
    arr.constant_offset_displace = (0.0, -2.0, 0.0)
    bollard["blensor_label"] = "pole"

    # cars: one shared mesh (body, cabin, wheels), four instances with their own paint
    parts = [((0, 0, 0.7), (4.5, 1.8, 0.8), 0), ((-0.3, 0, 1.35), (2.4, 1.6, 0.5), 0)]
    for wx in (-1.5, 1.5):
        for wy in (-0.85, 0.85):
            parts.append(((wx, wy, 0.33), (0.66, 0.2, 0.66), 1))
    v, f, mi = box_parts(parts)
    car_mesh = bpy.data.meshes.new("CarMesh")
    car_mesh.from_pydata(v, [], f)
    car_mesh.materials.append(M["car_paint_white"])
    car_mesh.materials.append(M["tyre_rubber"])
    car_mesh.polygons.foreach_set("material_index", mi)
    car_mesh.update()
    paint = ["car_paint_red", "car_paint_white", "car_paint_black", "car_paint_red"]
    routes = [
        ((-45, -2.5, 0), (45, -2.5, 0), 0.0),           # eastbound
        ((40, 2.5, 0), (-50, 2.5, 0), math.pi),         # westbound
        ((2.5, 45, 0), (2.5, -45, 0), -math.pi / 2),    # southbound, passes the ego car
        ((-2.5, 8, 0), (-2.5, 30, 0), math.pi / 2),     # northbound ahead of the ego car
    ]
    for i, ((a, b, yaw), mat) in enumerate(zip(routes, paint)):
        car = bpy.data.objects.new(f"Car.{i + 1}", car_mesh)
        car.material_slots[0].link = "OBJECT"
        car.material_slots[0].material = M[mat]
        car.material_slots[1].link = "OBJECT"
        car.material_slots[1].material = M["tyre_rubber"]
        car.rotation_euler = (0, 0, yaw)
        scene.collection.objects.link(car)
        keyframes(car, [(FRAMES[0], a), (FRAMES[1], b)])
        car["blensor_label"] = "car"

    # ego car with the sensor on its roof
    ego = bpy.data.objects.new("EgoCar", car_mesh)
    ego.rotation_euler = (0, 0, math.pi / 2)
    scene.collection.objects.link(ego)
    keyframes(ego, [(FRAMES[0], (-2.5, -14, 0)), (FRAMES[1], (-2.5, -4, 0))])
    ego["blensor_label"] = "car"
    cam_data = bpy.data.cameras.new("Velodyne")
    cam = bpy.data.objects.new("Velodyne", cam_data)
    scene.collection.objects.link(cam)
    cam.parent = ego
    # in the car's frame (+X forward): sensor 2.5 m up on a roof mast, high enough that the
    # lowest laser (-24.9 deg) clears the car; camera -Z looks forward, +Y up
    cam.location = (0.0, 0.0, 2.5)
    cam.rotation_euler = (math.pi / 2, 0.0, -math.pi / 2)
    scene.camera = cam
    if registered:
        s = cam_data.blensor
        s.preset = "hdl64e_s2"
        s.time_model = "continuous"  # every ray at its own time while the cars move
        s.axes = "ros"  # files in REP-103 axes (x ahead, y left, z up), the default of new cameras
        s.output_dir = "//blensor_out/"
        s.formats = {"npz", "evd", "pcd"}
        if variant == "fog":  # dense fog: attenuation and backscatter returns near the car
            s.weather = "fog"
            s.fog_visibility = FOG_VISIBILITY

    if variant == "rig":  # issue 23: a sensor rig on the ego car (blensor scan --all-sensors)
        add_rig(scene, ego, registered)
    out.parent.mkdir(parents=True, exist_ok=True)
    bpy.ops.wm.save_as_mainfile(filepath=str(out), compress=True)
    if registered:  # bpy 4.2/4.5 crash or hang at exit while add-on classes are registered
        import blensor_addon
        blensor_addon.unregister()
    print(f"wrote {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    variant = "clear"
    if "--variant" in args:
        i = args.index("--variant")
        variant = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
        if variant not in VARIANTS:
            sys.exit(f"build_crossing: --variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    default = ROOT / "scenes" / ("crossing.blend" if variant == "clear" else f"crossing_{variant}.blend")
    build(Path(args[0]) if args else default, variant)
