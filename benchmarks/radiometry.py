"""What the radiometric signal chain costs: one HDL-64E S2 revolution of the demo crossing
scanned with the papers' reflectivity limit and with the radiometric return model, in one
run.

Usage: ``.venv/bin/python benchmarks/radiometry.py [--rounds 9]``

Scene: ``scenes/crossing.blend``, camera ``Velodyne`` (HDL-64E S2, full turn 0..360 deg,
133,312 rays), frame 12, continuous time, every field, native backend, warm (BVHs built
and imports done before the rounds). The crossing stores ``return_model = limit``; the
cases set it per scan (``blensor_addon.scan``'s setting overrides). Three scene states, in
each of which the two models' scans alternate round by round:

- as stored: ``limit`` (seed 000 Eq. 1, the reference) and ``radiometric`` (the signal
  chain, docs/physics.md "Signal chain": received power, SNR against the HDL-64E S2's
  datasheet ranges, detection draws, range noise from SNR; the crossing has no light, so
  the ambient stage reads night);
- ``sun``: a Sun light of 952 W/m^2 (100 klx at 105 lm/W, the datasheets' condition) at
  40 deg elevation added (docs/physics.md "Ambient light");
- ``node-tree materials``: every material's BlenSor reflectivity and library entry
  cleared, so Principled BSDF coats give glossy lobes (docs/physics.md "Glossy coats").

Printed: the CPU model, the load average before and after, each case's least CPU time
(``time.process_time``, every thread) and minimum wall time over the rounds, the points
each case returns, and the ratio of each radiometric case's least CPU to the limit case
of its state (the bound of docs/performance.md "The signal chain's cost": at most
1.15). Nothing here asserts a time: tests never time anything.
"""
from __future__ import annotations

import argparse
import math
import os
import time

from overhead import crossing_velodyne  # benchmarks/overhead.py (this script's folder is first on sys.path)
from raycast import cpu_model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    import bpy

    import blensor_addon
    cam = crossing_velodyne()
    scene = bpy.context.scene

    def add_sun() -> None:
        data = bpy.data.lights.new("BenchSun", type="SUN")
        data.energy = 952.0
        sun = bpy.data.objects.new("BenchSun", data)
        sun.rotation_euler = (math.radians(50.0), 0.0, math.radians(30.0))
        scene.collection.objects.link(sun)

    def remove_sun() -> None:
        for ob in [o for o in bpy.data.objects if o.name.startswith("BenchSun")]:
            bpy.data.objects.remove(ob)

    saved = {}

    def node_tree_materials() -> None:
        for m in bpy.data.materials:
            b = m.blensor
            saved[m.name] = (b.is_property_set("reflectivity"), b.reflectivity, b.library)
            b.property_unset("reflectivity")
            b.library = ""

    def stored_materials() -> None:
        for m in bpy.data.materials:
            if m.name in saved:
                was_set, value, lib = saved[m.name]
                if was_set:
                    m.blensor.reflectivity = value
                m.blensor.library = lib

    # (scene state, set-up, tear-down): within a state the two models' scans alternate
    states = [("", None, None), ("sun", add_sun, remove_sun),
              ("node-tree materials", node_tree_materials, stored_materials)]
    cpu: dict = {}
    wall: dict = {}
    points: dict = {}
    names = []
    for state, setup, teardown in states:
        if setup:
            setup()
        pair = [(f"{model}, {state}" if state else model, model) for model in ("limit", "radiometric")]
        for name, model in pair:
            names.append(name)
            cpu[name] = wall[name] = math.inf
            for _ in range(2):  # warm: caches, BVHs
                points[name] = len(blensor_addon.scan(cam, frame=12, return_model=model))
        for _ in range(args.rounds):
            for name, model in pair:
                c0, w0 = time.process_time(), time.perf_counter()
                blensor_addon.scan(cam, frame=12, return_model=model)
                cpu[name] = min(cpu[name], time.process_time() - c0)
                wall[name] = min(wall[name], time.perf_counter() - w0)
        if teardown:
            teardown()
    load_after = os.getloadavg()
    print(f"CPU: {cpu_model()}; load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"{args.rounds} interleaved rounds")
    print(f"{'case':36s} {'least CPU s':>12s} {'min wall s':>11s} {'points':>8s} {'CPU / limit':>12s}")
    for name in names:
        ratio = cpu[name] / cpu[name.replace("radiometric", "limit")]
        print(f"{name:36s} {cpu[name]:12.4f} {wall[name]:11.4f} {points[name]:8d} {ratio:12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
