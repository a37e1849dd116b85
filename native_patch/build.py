"""Build the native batch ray-cast library ``blensor_rt``.

Usage: ``python native_patch/build.py [--out DIR] [--cc CC] [--debug] [--portable] [--sanitize]``
or ``python native_patch/build.py --target PLATFORM [--out DIR]`` to cross-compile for one of
:data:`TARGETS` (linux-x64, linux-arm64, windows-x64, macos-x64, macos-arm64) with the C
compiler of the ``ziglang`` package (``pip install ziglang``), warnings as errors, into
``build/native/<PLATFORM>/``; ``--target all`` builds every one.

Compiles ``native_patch/src/blensor_rt.c`` (C99, pthreads, no Python headers) into
``build/native/libblensor_rt.so`` (``.dylib`` on macOS).  That folder is git-ignored;
``blensor_addon.raycast.native`` looks there, next to the add-on (``lib/``, where the
extension zip carries it) and at ``$BLENSOR_NATIVE_LIB``.

Exit status: 0 on success, 1 if the compiler is missing or fails (its output is shown).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "native_patch" / "src" / "blensor_rt.c"


def library_name() -> str:
    """File name of the shared library on this operating system."""
    if sys.platform == "darwin":
        return "libblensor_rt.dylib"
    if sys.platform == "win32":
        return "blensor_rt.dll"
    return "libblensor_rt.so"


#: flags of the sanitizer build (``--sanitize``): AddressSanitizer + UndefinedBehaviorSanitizer,
#: every finding fatal. A process loading it needs libasan preloaded (LD_PRELOAD).
SANITIZE_FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                  "-fno-sanitize-recover=all"]


def build(out_dir: Path, cc: str | None = None, debug: bool = False, portable: bool = False,
          sanitize: bool = False) -> Path:
    """Compile the library into ``out_dir`` and return its path.

    The object is written to a temporary name and renamed, so a failed build never
    leaves a half-written library where the loader looks.

    ``portable=True`` compiles the plain-C kernels (no SSE/AVX), as on arm64; the tests
    use it to check that path on x86-64. ``sanitize=True`` builds with ASan + UBSan
    (:data:`SANITIZE_FLAGS`) for the sanitizer test.

    Raises:
        RuntimeError: no C compiler was found, or it failed.
    """
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler found (set CC or install gcc/clang)")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / library_name()
    tmp = out_dir / (library_name() + ".tmp")
    opt = list(SANITIZE_FLAGS) if sanitize else (["-O0", "-g"] if debug else ["-O3"])
    # -ffp-contract=off: no FMA contraction, so the watertight edge tests round the same
    # way on every machine and compiler.
    if portable:
        opt.append("-DBRT_NO_SIMD")
    cmd = [cc, *opt, "-std=c99", "-fPIC", "-shared", "-pthread", "-ffp-contract=off",
           "-fvisibility=hidden", "-Wall", "-Wextra", "-o", str(tmp), str(SRC), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("native build failed:\n" + " ".join(cmd) + "\n" + res.stdout + res.stderr)
    if res.stderr.strip():
        sys.stderr.write(res.stderr)
    os.replace(tmp, target)
    return target


#: Blender platform name -> (zig target triple, library file name). Linux builds link
#: glibc 2.17 symbols at most, so they load on every distribution Blender supports.
TARGETS = {
    "linux-x64": ("x86_64-linux-gnu.2.17", "libblensor_rt.so"),
    "linux-arm64": ("aarch64-linux-gnu.2.17", "libblensor_rt.so"),
    "windows-x64": ("x86_64-windows-gnu", "blensor_rt.dll"),
    "macos-x64": ("x86_64-macos", "libblensor_rt.dylib"),
    "macos-arm64": ("aarch64-macos", "libblensor_rt.dylib"),
}


def zig_cc() -> list[str]:
    """The ``ziglang`` package's C compiler as a command prefix.

    Raises:
        RuntimeError: the package is not installed.
    """
    if importlib.util.find_spec("ziglang") is None:
        raise RuntimeError("cross builds need the ziglang package (pip install ziglang==0.13.0)")
    return [sys.executable, "-m", "ziglang", "cc"]


def cross_build(platform: str, out_dir: Path | None = None) -> Path:
    """Cross-compile the library for Blender platform ``platform`` (a key of
    :data:`TARGETS`) with zig's clang, ``-Werror``; returns the library's path
    (``out_dir`` defaults to ``build/native/<platform>``). x86-64 targets carry the SSE2
    and AVX kernels (AVX chosen at run time by CPUID), arm64 targets the portable ones.

    Raises:
        RuntimeError: unknown platform, no ziglang, or the compiler failed.
    """
    if platform not in TARGETS:
        raise RuntimeError(f"--target must be one of {', '.join(TARGETS)} or all, got {platform!r}")
    triple, name = TARGETS[platform]
    out_dir = out_dir or ROOT / "build" / "native" / platform
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        obj = Path(tmp) / name  # zig also writes .pdb/.lib for Windows: keep only the library
        cmd = [*zig_cc(), "-target", triple, "-O3", "-g0", "-std=c99", "-shared", "-ffp-contract=off",
               "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-o", str(obj), str(SRC)]
        if not platform.startswith("windows"):
            cmd[-3:-3] = ["-fPIC", "-pthread"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("cross build failed:\n" + " ".join(cmd) + "\n" + res.stdout + res.stderr)
        os.replace(obj, out_dir / name)
    return out_dir / name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "native")
    ap.add_argument("--cc", default=None)
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--portable", action="store_true", help="plain C kernels, no SSE/AVX")
    ap.add_argument("--sanitize", action="store_true",
                    help="ASan + UBSan build (default folder build/native-asan[-portable])")
    ap.add_argument("--target", help="cross-compile for a Blender platform (or all) with ziglang")
    args = ap.parse_args(argv)
    if args.target:
        try:
            for plat in (TARGETS if args.target == "all" else [args.target]):
                out = None if args.out == ROOT / "build" / "native" else args.out / plat
                print(f"built {cross_build(plat, out)}")
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    out = args.out
    if args.sanitize and out == ROOT / "build" / "native":
        out = ROOT / "build" / ("native-asan-portable" if args.portable else "native-asan")
    try:
        path = build(out, args.cc, args.debug, args.portable, args.sanitize)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
