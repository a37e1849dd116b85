"""Build the native batch ray-cast library ``blensor_rt``.

Usage: ``python native_patch/build.py [--out DIR] [--cc CC] [--debug] [--portable] [--sanitize]``

Compiles ``native_patch/src/blensor_rt.c`` (C99, pthreads, no Python headers) into
``build/native/libblensor_rt.so`` (``.dylib`` on macOS).  That folder is git-ignored;
``blensor_addon.raycast.native`` looks there, next to the add-on (``lib/``, where the
extension zip carries it) and at ``$BLENSOR_NATIVE_LIB``.

Exit status: 0 on success, 1 if the compiler is missing or fails (its output is shown).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "native")
    ap.add_argument("--cc", default=None)
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--portable", action="store_true", help="plain C kernels, no SSE/AVX")
    ap.add_argument("--sanitize", action="store_true",
                    help="ASan + UBSan build (default folder build/native-asan[-portable])")
    args = ap.parse_args(argv)
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
