"""The ``blensor`` command: headless scans with pip ``bpy`` (or inside Blender).

    blensor scan SCENE.blend [--camera NAME] [--frames A-B] [--out DIR]
                 [--formats npz,evd,pcd] [--seed N] [--backend auto|native|bvhtree]
                 [--frame-of-reference sensor|world] [--pcd-ascii] [--overwrite | --resume]
                 [--quiet]
    blensor info SCENE.blend [--json]
    blensor --version

Exit status and the one line printed on stderr:

- 0: done.
- 2, ``blensor: error: <setting> must be <allowed>, got <value>``: bad input (missing or
  unreadable file, no such camera, frames outside the scene, bad sensor settings, too
  many rays, an unwritable folder, a folder in use by another run or holding another
  run's files); nothing is written.
- 1, ``blensor: error: ...``: the scan failed (a write error such as a full disk, the
  native library missing with ``--backend native``); finished frames and the manifest
  (status ``failed``) are kept.
- 130, ``blensor: interrupted ...``: SIGINT or SIGTERM; the current frame is finished
  (a second signal drops it), finished frames, a terminated EVD and the manifest
  (status ``cancelled``) are kept.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
_OPTION_NAMES = {"frames", "out", "formats", "backend", "camera", "frame_of_reference", "seed", "resume"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own usage errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"blensor: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    from . import __version__
    ap = _Parser(prog="blensor", description="BlenSor: LiDAR simulation of Blender scenes")
    ap.add_argument("--version", action="version", version=f"blensor {__version__}")
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
    mode = sc.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true",
                      help="replace the files of an earlier run in --out (else refused)")
    mode.add_argument("--resume", action="store_true",
                      help="keep the finished frames of an earlier run in --out with the same settings")
    sc.add_argument("--quiet", action="store_true", help="print nothing but errors")
    info = sub.add_parser("info", help="list cameras and their sensor settings")
    info.add_argument("blend")
    info.add_argument("--json", action="store_true", help="print one JSON document")
    return ap


def parse_frames(text: str | None, scene) -> range:
    """``"A-B"`` or ``"A"`` -> range of frames (no list is built before the range is
    checked against the scene); None -> the scene's range.

    Raises:
        SettingsError (``--frames``) on a malformed range.
    """
    from .core.errors import SettingsError
    if text is None:
        return range(scene.frame_start, scene.frame_end + 1)
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
    return range(a, b + 1)


@contextmanager
def _stdout_silenced(on: bool):
    """Send file descriptor 1 to the null device (Blender's C code prints "Read blend"
    there, past Python's sys.stdout)."""
    if not on:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _open_blend(path: str, quiet: bool = False):
    from .core.errors import SettingsError
    p = Path(path)
    if not p.is_file():
        raise SettingsError("SCENE.blend", "an existing .blend file", path)
    with _stdout_silenced(quiet):
        import bpy
        from . import register
        register()
        try:
            bpy.ops.wm.open_mainfile(filepath=str(p.resolve()))
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else "unreadable"
            raise SettingsError("SCENE.blend", "a readable .blend file", f"{path} ({msg})") from None
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
    bpy = _open_blend(args.blend, args.quiet)
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
                         overwrite=args.overwrite, resume=args.resume, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    dt = time.perf_counter() - t0
    if job.status == "cancelled" and job.signal is not None:
        print(f"blensor: interrupted by {signal.Signals(job.signal).name} after {len(job.done)} of "
              f"{len(job.frames)} frames; finished frames kept in {job.out} (manifest: cancelled)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.quiet:
        reused = f", {job.reused} reused" if job.reused else ""
        print(f"blensor: {len(job.done)} frames{reused}, {job.points} points, {dt:.2f} s "
              f"({job.scanner.backend.name}) -> {job.out}")
    return 0


def cmd_info(args) -> int:
    """``blensor info``: print the scene's frame range and every camera's settings
    (``--json``: one JSON document with ``scene``, ``frame_start``, ``frame_end``,
    ``fps``, ``cameras`` (name, scene_camera, settings or error))."""
    bpy = _open_blend(args.blend, args.json)
    from .scene.scanner import read_settings
    from .core.errors import SettingsError
    scene = bpy.context.scene
    if args.json:
        cams = []
        for obj in sorted((o for o in scene.objects if o.type == "CAMERA"), key=lambda o: o.name):
            entry = {"name": obj.name, "scene_camera": obj == scene.camera}
            try:
                entry["settings"] = read_settings(obj).to_dict()
            except SettingsError as exc:
                entry["error"] = str(exc)
            cams.append(entry)
        doc = {"blend_file": bpy.data.filepath, "scene": scene.name, "frame_start": scene.frame_start,
               "frame_end": scene.frame_end, "fps": scene.render.fps / scene.render.fps_base, "cameras": cams}
        print(json.dumps(doc, indent=2, allow_nan=False))
        return 0
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
    """Entry point of the ``blensor`` console script; returns the exit status (see the
    module docstring). The add-on is unregistered before returning: bpy 4.2 crashes and
    4.5 hangs at interpreter exit while operators or panels are registered."""
    args = _build_parser().parse_args(argv)
    from .core.errors import BlensorError, SettingsError
    try:
        return cmd_scan(args) if args.command == "scan" else cmd_info(args)
    except BlensorError as exc:
        if not isinstance(exc, SettingsError):  # e.g. --backend native without the library
            print(f"blensor: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if exc.setting in _OPTION_NAMES:  # say it the way the command line spells it
            exc = SettingsError("--" + exc.setting.replace("_", "-"), exc.allowed, exc.value)
        print(f"blensor: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # write errors during the scan: finished frames are kept
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"blensor: error: writing failed: {exc.strerror or exc}{where}; finished frames and the "
              "manifest (status failed) are kept", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("blensor: interrupted; finished frames kept (manifest: cancelled)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        from . import unregister
        unregister()


if __name__ == "__main__":
    sys.exit(main())
