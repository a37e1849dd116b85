"""Memory of one scan: the ray budget's bytes per return (core/sensors/budget.py
BYTES_PER_RETURN, which caps the rays one scan may cast by the free memory) bound the peak
of numpy's allocations while a scan whose every ray returns is cast, detected and
assembled (benchmarks/startup.py measures the peak per 10^6 rays on the demo street)."""
from __future__ import annotations

import tracemalloc

from conftest import add_camera, add_mesh

import blensor_addon
from blensor_addon.core.sensors.budget import BYTES_PER_RETURN


def test_the_budget_s_bytes_per_return_bound_a_scan_s_peak(bpy_mod, empty_scene):
    # a closed box of 40 x 40 x 20 m around the sensor: every ray of an HDL-64E S2 turn returns
    h, z0, z1 = 20.0, -2.0, 18.0
    verts = [(x, y, z) for x in (-h, h) for y in (-h, h) for z in (z0, z1)]
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    add_mesh(bpy_mod, "Box", verts, faces)
    cam = add_camera(bpy_mod)
    cam.data.blensor.preset = "hdl64e_s2"
    blensor_addon.scan(cam, angle_resolution=0.4)  # (the libraries and the pattern's tables made)
    tracemalloc.start()
    try:
        r = blensor_addon.scan(cam, angle_resolution=0.2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.num_rays == 64 * 1800 and len(r) > 0.9 * r.num_rays
    assert peak / len(r) <= BYTES_PER_RETURN, f"{peak / len(r):.0f} bytes per return"
