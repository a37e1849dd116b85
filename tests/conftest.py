"""Shared fixtures: real Blender (pip bpy 5.0.1), the add-on registered once per session."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CROSSING = ROOT / "scenes" / "crossing.blend"


@pytest.fixture(scope="session")
def bpy_mod():
    import bpy

    import blensor_addon
    blensor_addon.register()
    yield bpy
    # bpy 4.2 crashes and 4.5 hangs at exit while add-on classes are registered
    blensor_addon.unregister()


@pytest.fixture
def empty_scene(bpy_mod):
    """A fresh empty file."""
    bpy_mod.ops.wm.read_factory_settings(use_empty=True)
    return bpy_mod.context.scene


@pytest.fixture
def crossing(bpy_mod):
    """The demo scene, freshly loaded."""
    bpy_mod.ops.wm.open_mainfile(filepath=str(CROSSING))
    return bpy_mod.context.scene


def add_camera(bpy, name="Sensor", location=(0.0, 0.0, 0.0), rotation=(0.0, 0.0, 0.0)):
    """A camera object with the add-on's sensor settings; no rotation = sensor frame is world."""
    data = bpy.data.cameras.new(name)
    obj = bpy.data.objects.new(name, data)
    obj.location = location
    obj.rotation_euler = rotation
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.scene.camera = obj
    return obj


def generic_sensor(cam, elevations="0", noise=False, **kw):
    s = cam.data.blensor
    s.preset = "generic"
    s.elevations = elevations
    if not noise:
        s.noise_sigma = 0.0
        s.bias_distribution = "gaussian"
        s.bias_sigma = 0.0
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def add_mesh(bpy, name, verts, faces, material=None, location=(0, 0, 0)):
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([tuple(map(float, v)) for v in verts], [], [tuple(map(int, f)) for f in faces])
    mesh.update()
    if material is not None:
        mesh.materials.append(material)
    obj = bpy.data.objects.new(name, mesh)
    obj.location = location
    bpy.context.scene.collection.objects.link(obj)
    return obj


def cylinder_mesh(radius, z0, z1, segments=720):
    a = 2 * math.pi * np.arange(segments) / segments
    ring = np.stack([radius * np.cos(a), radius * np.sin(a)], 1)
    verts = [(x, y, z0) for x, y in ring] + [(x, y, z1) for x, y in ring]
    faces = [(i, (i + 1) % segments, segments + (i + 1) % segments, segments + i) for i in range(segments)]
    return verts, faces
