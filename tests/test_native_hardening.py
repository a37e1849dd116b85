"""No input crashes the native library: NaN/inf/zero rays, NaN/inf/huge/degenerate/empty
geometry, non-finite and singular instance transforms, mismatched array shapes
(tests/native_hostile.py), on every kernel variant (AVX, SSE2, portable C as on arm64),
with the normal build and with AddressSanitizer + UndefinedBehaviorSanitizer."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "tests" / "native_hostile.py"
_spec = importlib.util.spec_from_file_location("native_build", ROOT / "native_patch" / "build.py")
native_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native_build)
pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


def run_script(lib, *, no_avx=False, preload=None):
    env = dict(os.environ, BLENSOR_NATIVE_LIB=str(lib), PYTHONPATH=str(ROOT))
    env.pop("BLENSOR_RT_NO_AVX", None)
    if no_avx:
        env["BLENSOR_RT_NO_AVX"] = "1"
    if preload:
        env.update(LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    return {"simd": native_build.build(d / "simd"), "portable": native_build.build(d / "portable", portable=True)}


@pytest.mark.parametrize("variant", ["avx", "sse2", "portable"])
def test_hostile_input_on_every_kernel(libs, variant):
    res = run_script(libs["portable" if variant == "portable" else "simd"], no_avx=variant == "sse2")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


def _libasan():
    cc = shutil.which("gcc") or shutil.which("cc")
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


@pytest.mark.parametrize("variant", ["avx", "sse2", "portable"])
def test_sanitizers_find_nothing(tmp_path_factory, variant):
    asan = _libasan()
    if asan is None:
        pytest.skip("gcc's libasan is not installed")
    d = tmp_path_factory.getbasetemp() / "asan"
    lib = d / variant / native_build.library_name()
    if not lib.exists():
        native_build.build(d / variant, portable=variant == "portable", sanitize=True)
    res = run_script(lib, no_avx=variant == "sse2", preload=asan)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr
    assert "ERROR: AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
