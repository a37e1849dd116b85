"""Build the Blender extension zip ``dist/blensor-<version>.zip``.

Usage: ``python tools/build_extension.py [--no-native] [--output-dir DIR]``

Stages ``blensor_addon/`` with the top-level ``blender_manifest.toml`` in
``build/extension/``, adds the native ray-cast library for this platform under ``lib/``
(built first if missing; the manifest then names this platform) and runs Blender's own
extension tool, which ships inside the ``bpy`` wheel
(``addons_core/bl_pkg/cli/blender_ext.py``): ``build``, then ``validate`` on the zip.
Without the native library (``--no-native``) the zip is platform independent and
scans with the BVHTree fallback.

Exit status 0 on success; the tool's output is shown on failure.
"""
from __future__ import annotations

import argparse
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "extension"


def blender_ext_tool() -> Path:
    """Path of ``blender_ext.py`` inside the installed ``bpy`` package.

    Raises:
        RuntimeError: bpy is not installed or does not contain the tool.
    """
    spec = importlib.util.find_spec("bpy")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("bpy is not installed (run tools/setup.sh)")
    for loc in spec.submodule_search_locations:
        hits = sorted(Path(loc).glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
        if hits:
            return hits[-1]
    raise RuntimeError("blender_ext.py not found inside the bpy package")


def platform_tag() -> str:
    """Blender's platform name for this machine (linux-x64, macos-arm64, ...)."""
    machine = platform.machine().lower()
    arch = "arm64" if machine in ("arm64", "aarch64") else "x64"
    osname = {"linux": "linux", "darwin": "macos", "win32": "windows"}[sys.platform]
    return f"{osname}-{arch}"


def stage(native: bool) -> Path:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    shutil.copytree(ROOT / "blensor_addon", STAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "lib"))
    manifest = (ROOT / "blender_manifest.toml").read_text()
    if native:
        spec = importlib.util.spec_from_file_location("native_build", ROOT / "native_patch" / "build.py")
        native_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(native_build)
        lib = ROOT / "build" / "native" / native_build.library_name()
        if not lib.exists():
            native_build.build(lib.parent)
        (STAGE / "lib").mkdir()
        shutil.copy2(lib, STAGE / "lib" / lib.name)
        manifest = re.sub(r"(blender_version_min = .*\n)", r'\1\nplatforms = ["%s"]\n' % platform_tag(),
                          manifest, count=1)
    (STAGE / "blender_manifest.toml").write_text(manifest)
    return STAGE


def run(cmd: list) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{res.stdout}{res.stderr}")


def build(output_dir: Path, native: bool = True) -> Path:
    """Stage, build and validate; return the zip's path."""
    tool = blender_ext_tool()
    src = stage(native)
    version = re.search(r'^version = "([^"]+)"', (src / "blender_manifest.toml").read_text(), re.M).group(1)
    output_dir.mkdir(parents=True, exist_ok=True)
    out = output_dir / f"blensor-{version}.zip"
    if out.exists():
        out.unlink()
    run([sys.executable, str(tool), "build", "--source-dir", str(src), "--output-filepath", str(out)])
    run([sys.executable, str(tool), "validate", str(out)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build the BlenSor extension zip")
    ap.add_argument("--output-dir", type=Path, default=ROOT / "dist")
    ap.add_argument("--no-native", action="store_true", help="leave the native library out")
    args = ap.parse_args(argv)
    try:
        out = build(args.output_dir, native=not args.no_native)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"built {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
