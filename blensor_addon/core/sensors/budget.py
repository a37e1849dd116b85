"""The ray budget: how many rays one scan may cast, refused before anything is allocated.

Rays are cast in chunks of :data:`CHUNK_RAYS`, so a scan's memory grows with the returns
it keeps; :func:`ray_limit` caps the rays of one scan at :data:`MAX_RAYS` or at what the
free memory holds, and :func:`refuse_rays` turns an over-large scan into one
SettingsError naming the setting to change and the value that fits.
"""
from __future__ import annotations

from ..errors import SettingsError

#: Most rays one scan (a single scan, or one frame of a range scan) may cast. Rays are
#: cast in chunks of :data:`CHUNK_RAYS`, so memory grows with the returns kept; a scan
#: in which every ray returns needs about :data:`BYTES_PER_RETURN` per ray, so the cap
#: keeps the worst case near 11 GB. (An HDL-64E S2 turn at 0.01 deg is 2.3 M rays.)
MAX_RAYS = 20_000_000
#: Rays generated and cast at once.
CHUNK_RAYS = 1 << 18
#: Peak bytes per kept return while a result is assembled (an upper bound of the peak of
#: numpy's allocations: 432-492 bytes per return on HDL-64E S2 turns of a closed box and of
#: the demo street, 0.06-4 M rays, tests/test_scan_memory.py and benchmarks/startup.py;
#: the scan's whole returns are held several times over while detected and assembled).
BYTES_PER_RETURN = 550
#: Largest image side of the pixel-grid sensors (ToF, Kinect, depth camera).
MAX_PIXELS_SIDE = 16384


def available_memory() -> int | None:
    """Bytes of memory available to this process (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def ray_limit() -> int:
    """Most rays one scan may cast here: :data:`MAX_RAYS`, or fewer if free memory is short."""
    limit = MAX_RAYS
    mem = available_memory()
    if mem is not None:
        limit = min(limit, max(CHUNK_RAYS, mem // BYTES_PER_RETURN))
    return limit


def refuse_rays(rays: int, setting_name: str, value: float, *, grows: bool = False, unit: str = "") -> None:
    """Raise SettingsError (``setting_name``) if ``rays`` exceeds :func:`ray_limit`,
    saying the value of that setting that fits (the ray count is proportional to it,
    or inversely so when ``grows`` is False)."""
    limit = ray_limit()
    if rays <= limit:
        return
    factor = rays / limit
    fit = value / factor if grows else value * factor
    word = "at most" if grows else "at least"
    raise SettingsError(setting_name, f"{word} {fit:.6g}{(' ' + unit) if unit else ''} at these settings "
                        f"({rays:,} rays per scan; the limit is {limit:,})", value)
