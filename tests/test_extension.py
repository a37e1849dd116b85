"""The extension zip: built with Blender's own tool, installed into a fresh bpy process,
enabled, and used to scan the demo scene through ``bpy.ops.blensor.scan()``."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

import pytest

from conftest import CROSSING, ROOT


def test_extension_zip_installs_and_scans(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "build_extension.py"), "--output-dir",
                          str(tmp_path / "dist")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    from blensor_addon import __version__
    zips = sorted((tmp_path / "dist").glob(f"blensor-{__version__}-*.zip"))  # named after this platform
    assert len(zips) == 1
    zpath = zips[0]
    names = zipfile.ZipFile(zpath).namelist()
    assert "blender_manifest.toml" in names and "__init__.py" in names and "core/sensors/rotating.py" in names
    assert "core/tables/reflectance.json" in names  # the material library, read at scan time (issue 22)
    assert any(n.startswith("lib/libblensor_rt") for n in names)
    # the format libraries travel as wheels (an extension cannot pip-install)
    assert {n.split("/")[1].split("-")[0].lower() for n in names if n.startswith("wheels/")} >= {
        "laspy", "lazrs", "plyfile", "rosbags", "pillow"}
    code = textwrap.dedent(f"""
        import bpy
        bpy.ops.extensions.package_install_files(filepath={str(zpath)!r}, repo="user_default",
                                                 enable_on_install=True)
        assert "bl_ext.user_default.blensor" in bpy.context.preferences.addons.keys()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        assert bpy.ops.blensor.scan() == {{"FINISHED"}}
        n = len(bpy.data.objects["Scan.1"].data.vertices)
        from bl_ext.user_default.blensor.raycast import get_backend
        print("RESULT", n, get_backend().name)
        from bl_ext.user_default.blensor.jobs.range_scan import scan_range
        job = scan_range(bpy.data.objects["Velodyne"], [2], {str(tmp_path / "out")!r}, ("las", "ply", "rosbag2"))
        print("FORMATS", job.status)
        import glob, os
        print("WHEELS", len(glob.glob(os.path.join(os.environ["BLENDER_USER_RESOURCES"], "extensions", ".local",
                                                     "lib", "python3.11", "site-packages", "laspy", "__init__.py"))))
        # bpy 4.2/4.5 crash or hang at exit while add-on classes are registered
        bpy.ops.preferences.addon_disable(module="bl_ext.user_default.blensor")
    """)
    env = {"BLENDER_USER_RESOURCES": str(tmp_path / "user"), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")][-1].split()
    assert int(line[1]) > 100000 and line[2] == "native"
    assert "FORMATS complete" in res.stdout
    # frame 2 spans [2/24, 3/24) s, in which sweep 1 starts (continuous time, the demo's setting)
    assert (tmp_path / "out" / "clean" / "scan00001.las").is_file() and (tmp_path / "out" / "rosbag2").is_dir()
    # Blender installed the bundled wheels for the extension (and removes them when it is disabled)
    assert "WHEELS 1" in res.stdout


def _build_extension_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_extension", ROOT / "tools" / "build_extension.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundled_wheels_come_from_pyproject_pins(tmp_path):
    """One list of pins: the extension bundles pyproject's dependencies (less numpy,
    which Blender ships, and tqdm, the command line's) with their pins, plus what they
    need; a bundled requirement without an exact pin is refused."""
    import tomllib
    be = _build_extension_module()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = [d for d in data["project"]["dependencies"] if not d.startswith(("numpy", "tqdm"))]
    assert list(be.WHEELS[:len(deps)]) == deps and len(deps) == 7
    assert "laspy==2.7.0" in be.WHEELS and "rosbags==0.11.9" in be.WHEELS and "apsw==3.54.1.0" in be.WHEELS
    assert not any(w.startswith(("numpy", "tqdm")) for w in be.WHEELS)
    loose = tmp_path / "pyproject.toml"
    loose.write_text((ROOT / "pyproject.toml").read_text().replace('"laspy==2.7.0"', '"laspy>=2"'))
    with pytest.raises(RuntimeError, match="pinned with == in pyproject.toml: laspy>=2"):
        be.extension_wheels(loose)


def test_versions_agree():
    import re
    import tomllib

    from blensor_addon import __version__
    manifest = (ROOT / "blender_manifest.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', manifest, re.M).group(1) == __version__ == tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["version"]
