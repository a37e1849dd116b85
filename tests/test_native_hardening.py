"""No input crashes the native library: NaN/inf/zero rays, NaN/inf/huge/degenerate/empty
geometry, non-finite and singular instance transforms, mismatched array shapes
(tests/native_hostile.py), on every kernel variant (AVX, SSE2, portable C as on arm64),
with the normal build and with AddressSanitizer + UndefinedBehaviorSanitizer."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, libasan, native_build, native_env

#: the kernel each variant must run (the "avx" variant on a CPU with AVX)
HAS_AVX = "avx" in open("/proc/cpuinfo").read().split() if sys.platform == "linux" else False
EXPECTED = {"avx": "avx" if HAS_AVX else "sse2", "sse2": "sse2", "portable": "portable"}

SCRIPT = ROOT / "tests" / "native_hostile.py"
pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


def run_script(lib, *, no_avx=False, preload=None):
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          env=native_env(lib, no_avx=no_avx, preload=preload), timeout=300)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    return {"simd": native_build.build(d / "simd"), "portable": native_build.build(d / "portable", portable=True)}


@pytest.mark.parametrize("variant", ["avx", "sse2", "portable"])
def test_hostile_input_on_every_kernel(libs, variant):
    res = run_script(libs["portable" if variant == "portable" else "simd"], no_avx=variant == "sse2")
    assert res.returncode == 0 and res.stdout.split() == ["ok", EXPECTED[variant]], res.stdout + res.stderr


@pytest.mark.parametrize("variant", ["avx", "sse2", "portable"])
def test_sanitizers_find_nothing(tmp_path_factory, variant):
    asan = libasan()
    if asan is None:
        pytest.skip("gcc's libasan is not installed")
    d = tmp_path_factory.getbasetemp() / "asan"
    lib = d / variant / native_build.library_name()
    if not lib.exists():
        native_build.build(d / variant, portable=variant == "portable", sanitize=True)
    res = run_script(lib, no_avx=variant == "sse2", preload=asan)
    assert res.returncode == 0 and res.stdout.split() == ["ok", EXPECTED[variant]], res.stdout + res.stderr
    assert "ERROR: AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
