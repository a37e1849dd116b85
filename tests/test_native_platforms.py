"""The native library for every platform Blender extensions ship for, cross-compiled here
with the ``ziglang`` package's clang (warnings as errors), and the arm64 build run under
``qemu-aarch64`` (Debian's qemu-user) against this machine's builds."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, native_build, random_cast

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                                reason="ziglang not installed (pip install ziglang==0.13.0)")

MAGIC = {"linux-x64": (b"\x7fELF", 62), "linux-arm64": (b"\x7fELF", 183), "windows-x64": (b"MZ", None),
         "macos-x64": (b"\xcf\xfa\xed\xfe", 0x01000007), "macos-arm64": (b"\xcf\xfa\xed\xfe", 0x0100000C)}


@pytest.mark.parametrize("platform", sorted(native_build.TARGETS))
def test_cross_build_for_every_platform(tmp_path, platform):
    lib = native_build.cross_build(platform, tmp_path)
    data = lib.read_bytes()
    magic, machine = MAGIC[platform]
    assert data.startswith(magic) and lib.name == native_build.TARGETS[platform][1]
    if magic == b"\x7fELF":
        assert int.from_bytes(data[18:20], "little") == machine
    elif machine is not None:
        assert int.from_bytes(data[4:8], "little") == machine
    assert b"brt_intersect" in data  # the API is exported


def _driver(tmp_path, triple, *flags):
    exe = tmp_path / f"driver-{triple}{'-'.join(flags)}"
    cmd = [*native_build.zig_cc(), "-target", triple, "-O2", "-std=c99", "-static", "-ffp-contract=off",
           *flags, "-o", str(exe), str(ROOT / "tests" / "native_driver.c"), str(native_build.SRC)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return exe


@pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="qemu-user not installed (apt-get install qemu-user)")
def test_arm64_build_under_qemu_gives_this_machines_answers(tmp_path):
    arm = subprocess.run(["qemu-aarch64", str(_driver(tmp_path, "aarch64-linux-musl"))],
                         capture_output=True, text=True, timeout=600)
    assert arm.returncode == 0, arm.stderr
    portable = subprocess.run([str(_driver(tmp_path, "x86_64-linux-musl", "-DBRT_NO_SIMD"))],
                              capture_output=True, text=True)
    sse = subprocess.run([str(_driver(tmp_path, "x86_64-linux-musl"))], capture_output=True, text=True)
    hits = int(arm.stderr.split()[0])
    assert hits > 2000 and len(arm.stdout.splitlines()) == 20000
    assert arm.stdout == portable.stdout == sse.stdout


def test_one_validated_extension_zip_per_platform(tmp_path):
    import zipfile
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "build_extension.py"), "--all-platforms",
                          "--output-dir", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr  # Blender's blender_ext.py validated each
    from blensor_addon import __version__
    for platform, (_triple, name) in native_build.TARGETS.items():
        z = zipfile.ZipFile(tmp_path / f"blensor-{__version__}-{platform}.zip")
        assert f'platforms = ["{platform}"]' in z.read("blender_manifest.toml").decode()
        libs = [n for n in z.namelist() if n.startswith("lib/")]
        assert libs == [f"lib/{name}"]
        assert z.read(f"lib/{name}")[:2] in (b"\x7fE", b"MZ", b"\xcf\xfa")


def test_zig_linux_x64_build_runs_the_avx_kernels_with_the_gcc_builds_answers(tmp_path):
    # clang (zig cc) gets the AVX copy too, chosen by CPUID at run time, so the x64 zips
    # for Windows and macOS are not left on SSE2
    zig = native_build.cross_build("linux-x64", tmp_path / "zig")
    gcc = native_build.build(tmp_path / "gcc")
    out = {name: random_cast(tmp_path / f"{name}.npz", BLENSOR_NATIVE_LIB=str(lib))
           for name, lib in (("zig", zig), ("gcc", gcc))}
    cpu_avx = "avx" in open("/proc/cpuinfo").read().split()
    assert str(out["zig"]["k"]) == str(out["gcc"]["k"]) == ("avx" if cpu_avx else "sse2")
    for k in ("t", "p", "n"):
        assert np.array_equal(out["zig"][k], out["gcc"][k]), k
