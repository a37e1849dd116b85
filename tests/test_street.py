"""The quick start's demo street (``scenes/street.blend``, built by ``scenes/build_street.py``):
what a street worth scanning needs is in the committed file, every object is labelled, the
drive lasts 20-30 s, and the script rebuilds the same scene (the same geometry and the same
scanned bytes)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

from blensor_addon.core.classes import SEMANTIC_KITTI

STREET = ROOT / "scenes" / "street.blend"
BUILD = ROOT / "scenes" / "build_street.py"
CROSSFALL = 0.02      # build_street.CROSSFALL: the road falls 2 % from the crown to the gutters
RELIEF = 0.3          # build_street.RELIEF: window recesses (m)


@pytest.fixture
def street(bpy_mod):
    """The demo street, freshly loaded."""
    bpy_mod.ops.wm.open_mainfile(filepath=str(STREET))
    return bpy_mod.context.scene


def mesh_arrays(obj):
    """(vertices (V, 3) float64 in world axes, polygon normals (P, 3), polygon centres (P, 3))
    of a mesh object (its own data, no modifiers: these scenes have none)."""
    me = obj.data
    v = np.empty(len(me.vertices) * 3)
    me.vertices.foreach_get("co", v)
    n = np.empty(len(me.polygons) * 3)
    me.polygons.foreach_get("normal", n)
    c = np.empty(len(me.polygons) * 3)
    me.polygons.foreach_get("center", c)
    M = np.array(obj.matrix_world)
    v = v.reshape(-1, 3) @ M[:3, :3].T + M[:3, 3]
    return v, n.reshape(-1, 3), c.reshape(-1, 3)


def labels(scene):
    return {o.name: o.get("blensor_label") for o in scene.objects}


def test_every_object_carries_a_class_label(street, bpy_mod):
    """Every object of the file (meshes, instancers, prototypes in the hidden collection, the
    camera) names a SemanticKITTI class."""
    objs = list(bpy_mod.data.objects)
    assert len(objs) > 150
    missing = [o.name for o in objs if o.get("blensor_label") not in SEMANTIC_KITTI]
    assert missing == []


def test_the_street_has_every_kind_of_content(street):
    """Road, kerbs and pavement, buildings, poles, signs, benches, bins, trees and bushes,
    cars, a cyclist, pedestrians: each kind as labelled objects, at town densities."""
    lab = labels(street)
    kinds = {}
    for name, label in lab.items():
        kinds.setdefault(label, []).append(name)
    for label in ("road", "sidewalk", "terrain", "building", "pole", "traffic-sign", "other-object",
                  "other-structure", "vegetation", "car", "bicyclist", "person"):
        assert kinds.get(label), label
    assert lab["Kerbs"] == "sidewalk" and lab["Pavement"] == "sidewalk" and lab["Road"] == "road"
    assert lab["StreetLights"] == lab["Bollards"] == lab["SignPoles"] == "pole"
    assert lab["Benches"] == lab["Bins"] == "other-object"
    assert lab["Cyclist"] == "bicyclist"
    assert len([n for n in kinds["person"] if n.startswith("Pedestrian")]) == 8
    trees = [n for n in kinds["vegetation"] if n.startswith(("TreeRound.", "TreeCone."))]
    bushes = [n for n in kinds["vegetation"] if n.startswith("Bush.")]
    assert len(trees) >= 60 and len(bushes) >= 10
    assert all(street.objects[n].instance_type == "COLLECTION" for n in trees + bushes)
    assert len([n for n in kinds["car"] if n.startswith("Parked.")]) >= 30
    # the signs' faces are retroreflective sheeting from the reflectance library
    assert street.objects["SignPlates"].data.materials[0].name == "retroreflective_sheeting"
    # furniture counts: a light about every 30 m of street, several kerb stones a street
    assert len(street.objects["StreetLights"].data.polygons) // 16 >= 20   # pole (10 faces) + arm (6)
    assert len(street.objects["Kerbs"].data.polygons) // 6 >= 400


def test_the_roads_have_camber(street):
    """The main street's asphalt between the crown and the gutters tilts 2 % down towards
    the kerbs on both sides (the face normals lean away from the centre line)."""
    _, n, c = mesh_arrays(street.objects["Road"])
    away = np.array([min(abs(c[i, 0] - xj) for xj in (-70.0, 0.0, 70.0)) for i in range(len(c))])
    for side in (-1, 1):
        sel = (np.abs(c[:, 1]) > 1.0) & (np.abs(c[:, 1]) < 5.0) & (np.sign(c[:, 1]) == side) & (away > 12)
        sel &= np.abs(c[:, 0]) < 130
        assert sel.sum() > 500
        tilt = float(np.mean(n[sel, 1] / n[sel, 2])) * side   # outward slope of the normal
        assert CROSSFALL - 0.004 < tilt < CROSSFALL + 0.004, (side, tilt)
    # the crown: the asphalt near the centre line stands above the gutters (12 cm, minus the slope)
    v, _, _ = mesh_arrays(street.objects["Road"])
    main = (np.abs(v[:, 0]) < 60) & (np.abs(v[:, 0]) > 12)
    crown = v[main & (np.abs(v[:, 1]) < 0.5)]
    gutter = v[main & (np.abs(v[:, 1]) > 5.5)]
    assert np.mean(crown[:, 2]) - np.mean(gutter[:, 2]) > 0.08


def test_the_buildings_have_facade_relief(street):
    """Piers and floor bands stand 0.3 m before the walls (the window recesses), balconies
    stand out of some facades, and the kerbs stand above the road."""
    v, _, _ = mesh_arrays(street.objects["FacadeRelief"])
    boxes = v.reshape(-1, 8, 3)
    ext = boxes.max(1) - boxes.min(1)
    thin = np.minimum(ext[:, 0], ext[:, 1])
    n_relief = int((np.abs(thin - RELIEF) < 1e-3).sum())
    assert n_relief >= 400
    bal = mesh_arrays(street.objects["Balconies"])[0].reshape(-1, 8, 3)
    assert len(bal) >= 20
    assert len(street.objects["Buildings"].data.polygons) // 6 >= 30
    # heights vary: 2 to 8 floors
    tops = boxes.max(1)[:, 2]
    assert tops.max() - tops.min() > 12.0


def test_one_glass_shop_front_and_one_mirror_facade(street, bpy_mod):
    """The shop pane's material is a Glass BSDF alone (the scanner follows the glass); the
    curtain wall's is the library's mirror-like ``shop_window``."""
    pane = street.objects["ShopGlass"]
    mat = pane.data.materials[0]
    assert [nd.type for nd in mat.node_tree.nodes if nd.type.startswith("BSDF")] == ["BSDF_GLASS"]
    assert len(pane.data.polygons) == 1
    mirror = street.objects["MirrorFacade"].data.materials[0]
    assert mirror.name == "shop_window" and mirror.blensor.mirror
    assert pane["blensor_label"] == street.objects["MirrorFacade"]["blensor_label"] == "building"
    assert street.objects["ShopCounter"]["blensor_label"] == "other-structure"


def test_things_move_and_the_drive_lasts_20_to_30_s(street, bpy_mod):
    """The scene spans 20-30 s; the ego car carries the camera ``Lidar`` (OS1-128, 512x10)
    through more than 100 m; five other cars, the cyclist and six pedestrians move, parked
    cars stand."""
    fps = street.render.fps / street.render.fps_base
    duration = (street.frame_end - street.frame_start + 1) / fps
    assert 20.0 <= duration <= 30.0
    cam = street.objects["Lidar"]
    assert street.camera == cam and cam.parent.name == "EgoCar"
    assert cam.data.blensor.preset == "os1_128" and abs(cam.data.blensor.angle_resolution - 360 / 512) < 1e-6

    def track(obj):
        out = []
        for f in (street.frame_start, street.frame_end):
            street.frame_set(f)
            out.append(np.array(obj.matrix_world.translation))
        return float(np.linalg.norm(out[1] - out[0]))

    assert track(street.objects["EgoCar"]) > 100.0
    moved = {o.name: track(o) for o in street.objects if o.animation_data is not None}
    assert sorted(n for n in moved if n.startswith("Car.") and moved[n] > 30) == [
        "Car.Crossing", "Car.Lead", "Car.Oncoming1", "Car.Oncoming2", "Car.Stopping"]
    stopping = street.objects["Car.Stopping"]   # ... and waits at the junction for the last seconds
    street.frame_set(street.frame_end - 3 * int(fps))
    waiting = np.array(stopping.matrix_world.translation)
    street.frame_set(street.frame_end)
    assert np.linalg.norm(np.array(stopping.matrix_world.translation) - waiting) < 0.05
    assert moved["Cyclist"] > 50.0
    assert sum(moved[n] > 15 for n in moved if n.startswith("Pedestrian")) == 6
    assert not any(n.startswith("Parked.") for n in moved)


def scene_signature(bpy) -> list:
    """Per object: name, type, label, vertex and triangle counts and a hash of its vertex
    coordinates (rounded to 0.1 mm) and world matrix."""
    out = []
    for o in sorted(bpy.data.objects, key=lambda o: o.name):
        row = [o.name, o.type, o.get("blensor_label"), tuple(round(x, 4) for x in o.location)]
        if o.type == "MESH":
            me = o.data
            me.calc_loop_triangles()
            v = np.empty(len(me.vertices) * 3)
            me.vertices.foreach_get("co", v)
            row += [len(me.vertices), len(me.loop_triangles),
                    hashlib.sha256(np.round(v, 4).tobytes()).hexdigest()[:16]]
        out.append(row)
    return out


@pytest.mark.slow
def test_the_script_rebuilds_the_committed_street(tmp_path, bpy_mod):
    """``scenes/build_street.py`` gives the committed file's scene: the same objects, vertex
    and triangle counts and coordinates; and the rebuilt file scans to the same npz bytes."""
    out = tmp_path / "street.blend"
    res = subprocess.run([sys.executable, str(BUILD), str(out)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    bpy_mod.ops.wm.open_mainfile(filepath=str(STREET))
    committed = scene_signature(bpy_mod)
    bpy_mod.ops.wm.open_mainfile(filepath=str(out))
    rebuilt = scene_signature(bpy_mod)
    assert len(rebuilt) == len(committed)
    assert rebuilt == committed
    digests = []
    for blend, folder in ((STREET, tmp_path / "a"), (out, tmp_path / "b")):
        r = subprocess.run([str(Path(sys.executable).parent / "blensor"), "scan", str(blend), "--out",
                            str(folder), "--formats", "npz", "--frames", "0-1", "--quiet"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.npz")})
    assert len(digests[0]) == 2
    assert digests[0] == digests[1]
