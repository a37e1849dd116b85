"""The ``blensor`` command: headless scans with pip ``bpy`` (or inside Blender).

    blensor scan SCENE.blend [--camera NAME] [--frames A-B] [--out DIR]
                 [--formats npz,evd,pcd] [--seed N] [--backend auto|native|bvhtree]
                 [--frame-of-reference sensor|world] [--pcd-ascii] [--quiet]
    blensor info SCENE.blend

Bad input (missing file, no such camera, a non-camera object, frames outside the scene,
bad sensor settings, an unwritable output folder) prints one line
``blensor: error: ...`` naming the setting and its allowed values, exits with status 2
and writes no file. Other BlenSor errors (``--backend native`` without the built
library) print one line and exit with status 1.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

EXIT_BAD_INPUT = 2
_OPTION_NAMES = {"frames", "out", "formats", "backend", "camera", "frame_of_reference", "seed"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"blensor: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="blensor", description="BlenSor: LiDAR simulation of Blender scenes")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sc = sub.add_parser("scan", help="scan frames of a .blend into files")
    sc.add_argument("blend", help="the .blend file")
    sc.add_argument("--camera", help="camera object (default: the scene camera)")
    sc.add_argument("--frames", help="A-B or A (default: the scene's frame range)")
    sc.add_argument("--out", default="out", help="output folder (default: out)")
    sc.add_argument("--formats", default="npz", help="comma-separated subset of npz,evd,pcd")
    sc.add_argument("--seed", type=int, default=None, help="seed (default: the camera's seed setting)")
    sc.add_argument("--backend", default="auto", help="auto, native or bvhtree")
    sc.add_argument("--frame-of-reference", default="sensor", help="sensor or world")
    sc.add_argument("--pcd-ascii", action="store_true", help="ASCII instead of binary PCD")
    sc.add_argument("--quiet", action="store_true", help="no progress bar")
    info = sub.add_parser("info", help="list cameras and their sensor settings")
    info.add_argument("blend")
    return ap


def parse_frames(text: str | None, scene) -> list[int]:
    """``"A-B"`` or ``"A"`` -> list of frames; None -> the scene's range.

    Raises:
        SettingsError (``--frames``) on a malformed range.
    """
    from .core.errors import SettingsError
    if text is None:
        return list(range(scene.frame_start, scene.frame_end + 1))
    try:
        if "-" in text.strip()[1:]:
            i = text.index("-", 1)
            a, b = int(text[:i]), int(text[i + 1:])
        else:
            a = b = int(text)
    except ValueError:
        raise SettingsError("--frames", "A-B or A with integer frames", text) from None
    if b < a:
        raise SettingsError("--frames", "A-B with A <= B", text)
    return list(range(a, b + 1))


def _open_blend(path: str):
    from .core.errors import SettingsError
    p = Path(path)
    if not p.is_file():
        raise SettingsError("SCENE.blend", "an existing .blend file", path)
    import bpy
    from . import register
    register()
    try:
        bpy.ops.wm.open_mainfile(filepath=str(p.resolve()))
    except RuntimeError as exc:
        raise SettingsError("SCENE.blend", "a readable .blend file", f"{path} ({exc})") from None
    return bpy


def _camera(bpy, name: str | None):
    from .core.errors import SettingsError
    scene = bpy.context.scene
    if name is None:
        if scene.camera is None:
            raise SettingsError("--camera", "a camera object (the scene has no scene camera)", None)
        return scene.camera
    obj = scene.objects.get(name)
    cams = sorted(o.name for o in scene.objects if o.type == "CAMERA")
    if obj is None or obj.type != "CAMERA":
        raise SettingsError("--camera", "one of the scene's cameras: " + (", ".join(cams) or "(none)"), name)
    return obj


def cmd_scan(args) -> int:
    """``blensor scan``: validate, open the file, run the range scan; returns 0.

    Raises:
        SettingsError: bad option or setting (the caller prints it and exits 2).
    """
    from .core.settings import FRAMES_OF_REFERENCE
    from .core.errors import SettingsError
    from .io.range import parse_formats
    from .raycast import BACKENDS
    # cheap checks first, before Blender loads the file
    formats = parse_formats(args.formats)
    if args.backend not in BACKENDS:
        raise SettingsError("--backend", "one of " + ", ".join(BACKENDS), args.backend)
    if args.frame_of_reference not in FRAMES_OF_REFERENCE:
        raise SettingsError("--frame-of-reference", "one of " + ", ".join(FRAMES_OF_REFERENCE),
                            args.frame_of_reference)
    if args.seed is not None and args.seed < 0:
        raise SettingsError("--seed", "an integer >= 0", args.seed)
    bpy = _open_blend(args.blend)
    cam = _camera(bpy, args.camera)
    frames = parse_frames(args.frames, bpy.context.scene)
    from .io.range import scan_range
    bar = None

    def progress(done, total, entry):
        nonlocal bar
        if args.quiet:
            return
        if bar is None:  # input validated: only now show the bar
            from tqdm import tqdm
            bar = tqdm(total=total, unit="frame", desc="blensor", file=sys.stderr)
        if entry is not None:
            bar.set_postfix(points=entry["points"])
            bar.update(1)

    t0 = time.perf_counter()
    try:
        job = scan_range(cam, frames, os.path.abspath(args.out), formats, args.seed, backend=args.backend,
                         frame_of_reference=args.frame_of_reference, pcd_ascii=args.pcd_ascii,
                         progress=progress)
    finally:
        if bar is not None:
            bar.close()
    dt = time.perf_counter() - t0
    print(f"blensor: {len(job.done)} frames, {job.points} points, {dt:.2f} s "
          f"({job.scanner.backend.name}) -> {job.out}")
    return 0


def cmd_info(args) -> int:
    """``blensor info``: print the scene's frame range and every camera's settings."""
    bpy = _open_blend(args.blend)
    from .scene.scanner import read_settings
    from .core.errors import SettingsError
    scene = bpy.context.scene
    print(f"scene '{scene.name}': frames {scene.frame_start}-{scene.frame_end} at "
          f"{scene.render.fps / scene.render.fps_base:g} fps")
    for obj in sorted((o for o in scene.objects if o.type == "CAMERA"), key=lambda o: o.name):
        mark = " (scene camera)" if obj == scene.camera else ""
        print(f"camera '{obj.name}'{mark}")
        try:
            s = read_settings(obj)
            d = s.to_dict()
            d["elevations"] = f"{s.num_lasers} lasers, {min(d['elevations']):.2f}..{max(d['elevations']):.2f} deg"
            for k, v in d.items():
                print(f"  {k}: {v}")
        except SettingsError as exc:
            print(f"  invalid settings: {exc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``blensor`` console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    from .core.errors import BlensorError, SettingsError
    try:
        return cmd_scan(args) if args.command == "scan" else cmd_info(args)
    except BlensorError as exc:
        if not isinstance(exc, SettingsError):  # e.g. --backend native without the library
            print(f"blensor: error: {exc}", file=sys.stderr)
            return 1
        if exc.setting in _OPTION_NAMES:  # say it the way the command line spells it
            exc = SettingsError("--" + exc.setting.replace("_", "-"), exc.allowed, exc.value)
        print(f"blensor: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
