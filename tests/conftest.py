"""Shared fixtures: real Blender (pip bpy 5.0.1), the add-on registered once per session."""
from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CROSSING = ROOT / "scenes" / "crossing.blend"

_spec = importlib.util.spec_from_file_location("native_build", ROOT / "native_patch" / "build.py")
#: ``native_patch/build.py`` (a script, not a package) as a module: ``build``, ``cross_build``, ...
native_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native_build)


def libasan() -> str | None:
    """Path of gcc's libasan.so (to LD_PRELOAD for a sanitizer build), or None."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def native_env(lib=None, *, no_avx=False, preload=None) -> dict:
    """Environment for a subprocess using the native library ``lib`` (default: the
    usual search), without AVX if ``no_avx``, with ``preload`` (libasan) and fatal
    sanitizer findings."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("BLENSOR_RT_NO_AVX", None)
    if lib is not None:
        env["BLENSOR_NATIVE_LIB"] = str(lib)
    if no_avx:
        env["BLENSOR_RT_NO_AVX"] = "1"
    if preload:
        env.update(LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return env


@pytest.fixture(scope="session")
def readme_checkout(tmp_path_factory):
    """A folder laid out as the repository after the README's quick start, its scan run once a
    session (``test_docs.after_quick_start``): the README's examples, the outside tools and the
    bag readers all read that one run's ``out/``."""
    from test_docs import after_quick_start
    return after_quick_start(tmp_path_factory.mktemp("readme"))


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


def without_glass(bpy):
    """Delete the demo's glass pane (``ShopGlass``, issue 22) from the open file: the scene
    then holds only opaque surfaces, where the return physics' default path must give the
    pre-issue-22 returns byte for byte."""
    bpy.data.objects.remove(bpy.data.objects["ShopGlass"])


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


def quad(x0, x1, y0, y1, z):
    """(vertices, faces) of the axis-aligned rectangle [x0, x1] x [y0, y1] at height z (m),
    for :func:`add_mesh`."""
    return [(x0, y0, z), (x1, y0, z), (x1, y1, z), (x0, y1, z)], [(0, 1, 2, 3)]


def cylinder_mesh(radius, z0, z1, segments=720):
    a = 2 * math.pi * np.arange(segments) / segments
    ring = np.stack([radius * np.cos(a), radius * np.sin(a)], 1)
    verts = [(x, y, z0) for x, y in ring] + [(x, y, z1) for x, y in ring]
    faces = [(i, (i + 1) % segments, segments + (i + 1) % segments, segments + i) for i in range(segments)]
    return verts, faces


#: Casts 20,000 random rays at 3,000 random triangles in a fresh process and saves the
#: hits (t, p, n, uv) and the kernel name (k) to the .npz named by argv[1].
RANDOM_CAST_SCRIPT = (
    "import sys, numpy as np\n"
    "from blensor_addon.raycast import MeshData, SceneGeometry\n"
    "from blensor_addon.raycast.native import NativeBackend, kernel\n"
    "rng = np.random.default_rng(5)\n"
    "c = rng.uniform(-5, 5, (3000, 1, 3)); v = (c + rng.normal(0, .6, (3000, 3, 3))).reshape(-1, 3)\n"
    "b = NativeBackend(2); b.set_geometry(SceneGeometry([MeshData(v, np.arange(9000).reshape(-1, 3))],"
    " [0], np.eye(4)[None]))\n"
    "o = rng.uniform(-8, 8, (20000, 3)); d = rng.normal(size=(20000, 3))\n"
    "d /= np.linalg.norm(d, axis=1, keepdims=True)\n"
    "h = b.intersect(o, d, 1e30)\n"
    "np.savez(sys.argv[1], t=h.t, p=h.primitive, n=h.normal, uv=h.uv, k=kernel())\n")


def random_cast(out_path, **env_extra):
    """Run :data:`RANDOM_CAST_SCRIPT` with the environment plus ``env_extra`` (e.g.
    ``BLENSOR_NATIVE_LIB``, ``BLENSOR_RT_NO_AVX``); returns the loaded .npz."""
    import sys
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    if "BLENSOR_RT_NO_AVX" not in env_extra:
        env.pop("BLENSOR_RT_NO_AVX", None)
    subprocess.run([sys.executable, "-c", RANDOM_CAST_SCRIPT, str(out_path)], check=True, env=env)
    return np.load(out_path)


def point_norm(r, channel, preset="hdl64e_s2"):
    """|point| in the sensor frame of returns at range ``r`` (m) of lasers ``channel`` of a
    preset whose beams leave from Velodyne's vertical/horizontal origin offsets: the offset
    is perpendicular to its beam (velodyne_pointcloud rawdata.cc), so |p|^2 = r^2 + vo^2 +
    ho^2 (issue 21: the HDL-64E S2 preset is a calibrated unit with offsets up to 0.21 m)."""
    from blensor_addon.core.sensors.rotating_presets import preset_table
    t = preset_table(preset)
    o2 = t.per_laser("vert_offset_m") ** 2 + t.per_laser("horiz_offset_m") ** 2
    r = np.asarray(r, dtype=np.float64)
    return np.sqrt(r * r + o2[np.asarray(channel, dtype=np.int64)])
