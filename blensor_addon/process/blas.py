"""One BLAS thread while BlenSor scans and writes.

numpy hands every ``a @ M`` of an (N, 3) array and a 3 x 3 matrix to its BLAS (OpenBLAS
in the numpy wheels Blender and pip install). OpenBLAS splits such a product over all
cores and then keeps its worker threads spinning (``sched_yield``) for a while, waiting
for the next call. The products are tiny (0.4 ms for 133k points on one thread), but the
spinning takes a core from the ray caster's threads and from the writers: on this 2-core
VM about 20% of a cold revolution's CPU samples were OpenBLAS threads yielding, and a
warm HDL-64E revolution took 0.094 s with OpenBLAS's default threads against 0.057 s
with one (``benchmarks/writers.py``, 2026-11-23).

:func:`single_blas_thread` limits BLAS to one thread while any scan or write is under way
(reference counted, so the main thread's scan and the writer thread can overlap) and
gives back the user's setting when the last one ends. One thread also makes the products
independent of the machine's core count. The limit goes through ``threadpoolctl``; where
that is missing (an add-on installed without its wheels) nothing is limited.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol


class _Limiter(Protocol):
    """What BlenSor uses of ``threadpoolctl``'s limiter (the value of
    ``ThreadpoolController.limit``)."""

    def restore_original_limits(self) -> None: ...


_lock = threading.Lock()
_depth = 0
_limiter: _Limiter | None = None
#: threadpoolctl.ThreadpoolController (no type information), made once (it scans the loaded libraries: ~6 ms)
_controller: Any = None


def _limit() -> _Limiter | None:
    """Limit every loaded BLAS to one thread; returns the limiter that restores it, or
    None without threadpoolctl or when it fails (a scan never fails for this)."""
    global _controller
    try:
        import threadpoolctl
        if _controller is None:
            _controller = threadpoolctl.ThreadpoolController()
        limiter: _Limiter = _controller.limit(limits=1, user_api="blas")
        return limiter
    except Exception:  # noqa: BLE001 - only a speed setting: scan on with BLAS as it is
        return None


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Context manager: BLAS runs on one thread inside (nested and concurrent uses from
    several threads share one limit; the original thread counts come back when the last
    use ends). Raises nothing of its own."""
    global _depth, _limiter
    with _lock:
        if _depth == 0:
            _limiter = _limit()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            # the last user out restores the count; BlenSor's own BLAS calls all run inside
            # a use, so none is under way then (another add-on's might be: OpenBLAS
            # documents no guarantee for that case, and we know of no failure)
            if _depth == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
