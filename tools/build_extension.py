"""Build the Blender extension zips ``dist/blensor-<version>-<platform>.zip``.

Usage: ``python tools/build_extension.py [--platform P ... | --all-platforms | --no-native]
[--output-dir DIR]``

For each platform (default: this machine's), stages ``blensor_addon/`` with the
top-level ``blender_manifest.toml`` in ``build/extension/``, adds the native ray-cast
library of that platform under ``lib/`` (always built afresh from the sources, so a
stale library is never packaged: with this machine's C compiler for its own platform,
with ``ziglang`` for the others, see ``native_patch/build.py --target``), names the
platform in the manifest (``platforms = [...]``), bundles that platform's wheels of the
format libraries (:data:`WHEELS`, read from ``pyproject.toml``: its pinned dependencies and
``[tool.blensor.extension]``; downloaded with pip; ``wheels = [...]``) and runs
Blender's own extension tool,
which ships inside the ``bpy`` wheel (``addons_core/bl_pkg/cli/blender_ext.py``):
``build``, then ``validate`` on the zip. Platforms: linux-x64, linux-arm64,
windows-x64, macos-x64, macos-arm64. Without the native library (``--no-native``) one
platform-independent zip ``blensor-<version>.zip`` scans with the BVHTree fallback.

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
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "extension"


def extension_wheels(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, ...]:
    """The pinned requirements bundled as wheels (an extension cannot pip-install; Blender
    installs the listed wheels itself): ``pyproject.toml``'s ``[project] dependencies``
    except ``[tool.blensor.extension] exclude``, then its ``wheels`` (what they need).

    Raises:
        RuntimeError: a bundled requirement is not pinned with ``==``.
    """
    data = tomllib.loads(pyproject.read_text())
    ext = data["tool"]["blensor"]["extension"]
    skip = {n.lower() for n in ext.get("exclude", ())}
    out = [r for r in data["project"]["dependencies"]
           if re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower() not in skip]
    out += list(ext.get("wheels", ()))
    loose = [r for r in out if "==" not in r]
    if loose:
        raise RuntimeError(f"bundled wheels must be pinned with == in pyproject.toml: {', '.join(loose)}")
    return tuple(out)


#: the format libraries and threadpoolctl (pyproject's dependencies) and what they need, bundled as wheels
WHEELS = extension_wheels()
#: pip platform tags of every Blender platform
PIP_PLATFORMS = {
    "linux-x64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "linux-arm64": ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"),
    "windows-x64": ("win_amd64",),
    "macos-x64": ("macosx_11_0_x86_64", "macosx_10_13_x86_64", "macosx_10_12_x86_64", "macosx_10_9_x86_64"),
    "macos-arm64": ("macosx_11_0_arm64",),
}


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


def _native_build():
    spec = importlib.util.spec_from_file_location("native_build", ROOT / "native_patch" / "build.py")
    native_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native_build)
    return native_build


def fresh_library(platform: str | None) -> Path:
    """The native library for ``platform`` built now from the sources (None: none).

    Raises:
        RuntimeError: the compiler (or ziglang for another platform) is missing or failed.
    """
    nb = _native_build()
    out = ROOT / "build" / "extension-lib" / platform
    if platform == platform_tag():
        return nb.build(out)  # this machine's compiler: the AVX kernels where GCC has them
    return nb.cross_build(platform, out)


def download_wheels(platform: str, dest: Path) -> list[str]:
    """Download the :data:`WHEELS` for ``platform`` (CPython 3.11) into ``dest``; return
    their file names.

    Raises:
        RuntimeError: pip could not get a wheel for that platform.
    """
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for tag in PIP_PLATFORMS[platform]:
        cmd += ["--platform", tag]
    run(cmd + list(WHEELS))
    return sorted(p.name for p in dest.glob("*.whl"))


def stage(platform: str | None) -> Path:
    """Stage the add-on with ``platform``'s library and the format libraries' wheels
    (None: neither, no platforms; the formats that need them are then refused)."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    shutil.copytree(ROOT / "blensor_addon", STAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "lib"))
    manifest = (ROOT / "blender_manifest.toml").read_text()
    if platform is not None:
        lib = fresh_library(platform)
        (STAGE / "lib").mkdir()
        shutil.copy2(lib, STAGE / "lib" / lib.name)
        wheels = download_wheels(platform, STAGE / "wheels")
        listed = ", ".join(f'"./wheels/{w}"' for w in wheels)
        manifest = re.sub(r"(blender_version_min = .*\n)", r'\1\nplatforms = ["%s"]\nwheels = [%s]\n'
                          % (platform, listed), manifest, count=1)
    (STAGE / "blender_manifest.toml").write_text(manifest)
    return STAGE


def run(cmd: list) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{res.stdout}{res.stderr}")


def build(output_dir: Path, platform: str | None) -> Path:
    """Stage, build and validate the zip for ``platform`` (None: without the native
    library); return the zip's path.

    Raises:
        RuntimeError: a build step or Blender's validation failed.
    """
    tool = blender_ext_tool()
    src = stage(platform)
    version = re.search(r'^version = "([^"]+)"', (src / "blender_manifest.toml").read_text(), re.M).group(1)
    output_dir.mkdir(parents=True, exist_ok=True)
    out = output_dir / (f"blensor-{version}-{platform}.zip" if platform else f"blensor-{version}.zip")
    if out.exists():
        out.unlink()
    run([sys.executable, str(tool), "build", "--source-dir", str(src), "--output-filepath", str(out)])
    run([sys.executable, str(tool), "validate", str(out)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build the BlenSor extension zip")
    ap.add_argument("--output-dir", type=Path, default=ROOT / "dist")
    ap.add_argument("--no-native", action="store_true", help="leave the native library out")
    ap.add_argument("--platform", action="append", help="a Blender platform (repeatable; default: this one)")
    ap.add_argument("--all-platforms", action="store_true", help="one zip per supported platform")
    args = ap.parse_args(argv)
    plats = [None] if args.no_native else (sorted(_native_build().TARGETS) if args.all_platforms
                                           else args.platform or [platform_tag()])
    try:
        for plat in plats:
            print(f"built {build(args.output_dir, plat)}")
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
