"""The README's examples run as written, and the docs match the code.

Runnable examples are the README's fenced blocks marked ``sh`` (command lines),
``bash`` (a shell script, run whole with ``bash -e``: background jobs, variables) and
``python``; blocks marked ``text`` are synopses and are not run. Every fenced block must
say which it is. They run in a temporary folder holding what a clone has (``scenes/``,
``examples/``, ``tests/data/configs/``) and this test environment as ``.venv``, in the
README's order: first the quick start's scan (its ``bash tools/setup.sh`` and ``bash
tools/test.sh`` are what this environment and this suite already are), then every other
command and the Python example, each checked for exit status 0 and for the files it writes.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT
from test_layers import LEVELS

README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The quick start, exactly as issue 20 asks to keep it.
QUICK_START = ("bash tools/setup.sh && .venv/bin/blensor scan scenes/street.blend --out out "
               "--formats npz,pcd,kitti,rosbag2 --overwrite", "bash tools/test.sh")
#: Files the quick start's scan writes, as the README names them.
QUICK_START_FILES = ("scan00000.npz", "clean/scan00000.pcd", "noisy/scan00000.pcd", "velodyne/000000.bin",
                     "labels/000000.label", "poses.txt", "times.txt", "calib.txt", "manifest.json",
                     "trajectory.tum", "rosbag2/rosbag2.mcap")
#: File name endings each format writes (under --out, any depth).
FORMAT_FILES = {
    "npz": (".npz",), "evd": (".evd",), "pcd": (".pcd",), "las": (".las",), "laz": (".laz",),
    "ply": (".ply",), "kitti": (".bin", "poses.txt"), "rosbag2": (".mcap", ".db3"),
    "laserscan": (".npz", ".csv"),
    "range_image": (".png",), "pcap": (".pcap",), "exr": (".exr",), "npy": (".npy",), "pfm": (".pfm",), "dmap": (".dmap",),
}
MOTION_FILES = {"blensor": ("motion.txt",), "tum": (".tum",), "kitti": (".txt",), "json": (".json",)}
#: README commands that depend on parts of issue 20 made on other branches: expected to
#: fail until those are merged (strict: then they pass and the entry must go).


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """Every fenced code block of a markdown text: (language, code, line of the fence)."""
    out, lang, start, body = [], None, 0, []
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), i, []
            else:
                out.append((lang, "\n".join(body) + "\n", start))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"README.md:{start}: unterminated code block"
    return out


BLOCKS = fenced_blocks(README.read_text(encoding="utf-8"))


def commands() -> list[str]:
    """The README's runnable command lines, in order (each ``&&`` part on its own);
    the setup and test scripts of the quick start left out."""
    out = []
    for lang, code, _ in BLOCKS:
        if lang != "sh":
            continue
        for line in code.splitlines():
            for part in line.split(" && "):
                part = part.strip()
                if part and not part.startswith(("bash tools/setup.sh", "bash tools/test.sh")):
                    out.append(part)
    return out


COMMANDS = commands()
PYTHON_BLOCKS = [(code, line) for lang, code, line in BLOCKS if lang == "python"]
BASH_BLOCKS = [(code, line) for lang, code, line in BLOCKS if lang == "bash"]


@pytest.fixture
def workdir(readme_checkout):
    """The repository after the quick start (conftest's session fixture ``readme_checkout``,
    made by :func:`after_quick_start`, shared with the outside tools' and the bag readers'
    tests: the quick start runs once a session)."""
    return readme_checkout


def after_quick_start(d: Path) -> Path:
    """Lay out the folder ``d`` as the repository after the quick start: ``scenes/``,
    ``examples/`` and the sample config files ``tests/data/configs/`` copied, this environment
    as ``.venv``, the quick start's scan run (the README's first command, as it spells it)."""
    if not (Path(sys.prefix) / "bin" / "blensor").is_file():
        pytest.skip(f"{sys.prefix} has no bin/blensor: run the suite in the environment of tools/setup.sh")
    for name in ("scenes", "examples", "tests/data/configs"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, d / name, ignore=shutil.ignore_patterns("__pycache__", "*.blend1"))
    (d / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    res = run(COMMANDS[0], d, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    missing = [f for f in QUICK_START_FILES if not (d / "out" / f).is_file()]
    assert not missing, missing
    assert json.loads((d / "out" / "manifest.json").read_text())["status"] == "complete"
    return d


def run(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a README command line (no shell: the README's commands need none) in ``cwd``."""
    argv = command.split()
    assert argv[0].startswith(".venv/bin/"), f"README command must start with .venv/bin/: {command}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BLENSOR_NATIVE_LIB")}
    return subprocess.run([str(cwd / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


def files_under(folder: Path) -> list[str]:
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()]


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_readme_marks_every_block_and_keeps_the_quick_start():
    text = README.read_text(encoding="utf-8")
    unmarked = [line for lang, _, line in BLOCKS if lang not in ("sh", "bash", "python", "text")]
    assert not unmarked, f"README.md lines {unmarked}: mark each code block sh, bash, python or text"
    quick = next(code for lang, code, _ in BLOCKS if lang == "sh")
    assert quick.splitlines() == list(QUICK_START)
    assert COMMANDS[0] == QUICK_START[0].split(" && ")[1]
    for name in QUICK_START_FILES:
        assert name.split("/")[0] in text, name
    first_screen = "\n".join(text.splitlines()[:40])
    for phrase in ("REP-103", "x forward, y left, z up", "--axes blensor", "EVD", "Scenes saved before",
                   "about 20 minutes"):
        assert phrase in first_screen, phrase
    # the quick start's time: the whole scan command measured (wall and CPU time, Blender's start
    # included) and the CPU it ran on as lscpu names it
    assert re.search(r"The scan command took [\d.]+(-[\d.]+)? s wall, [\d.]+ CPU-s \(Blender's start "
                     r"included\) on \d+ (shared )?cores of an? \"[^\"]+\"", " ".join(first_screen.split()))
    # references a user cannot follow stay in the docs' source table
    assert not re.search(r"seed 00\d|reference section|reference \d", text, re.I)
    assert len(text.splitlines()) < 350


@pytest.mark.parametrize("command", COMMANDS[1:])
def test_readme_command_runs(workdir, command, request):
    res = run(command, workdir)
    assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
    argv = command.split()
    if "--json" in argv:
        json.loads(res.stdout)
    if argv[0] == ".venv/bin/blensor" and argv[1] in ("sensors", "info"):
        assert "rotating" in res.stdout or "Velodyne" in res.stdout, res.stdout[:500]
        return
    out = option(argv, "--out") or argv[-1]
    folder = workdir / out
    assert folder.is_dir(), f"{command}: wrote no {out}/"
    found = files_under(folder)
    assert found, f"{command}: {out}/ is empty"
    if argv[0] == ".venv/bin/blensor":
        kinds = MOTION_FILES if argv[1] == "motion" else FORMAT_FILES
        # a rig (several cameras) lists its sensors' folders in rig.json
        meta = (
            "motion.json" if argv[1] == "motion" else "rig.json" if "rig.json" in found else "manifest.json"
        )
        assert meta in found, found
        if argv[1] != "motion":
            assert json.loads((folder / meta).read_text())["status"] == "complete"
        formats = option(argv, "--formats") or option(argv, "--format")
        for fmt in formats.split(","):
            assert any(f.endswith(kinds[fmt]) for f in found), f"{command}: no {fmt} files in {sorted(found)}"


def scan_range_outputs(code: str) -> list[tuple[str, tuple]]:
    """(out_dir, formats) of every ``scan_range(...)`` call with literal arguments."""
    calls = []
    for node in ast.walk(ast.parse(code)):
        name = getattr(node, "func", None)
        if isinstance(node, ast.Call) and getattr(name, "attr", getattr(name, "id", "")) == "scan_range":
            kw = {k.arg: k.value for k in node.keywords}
            out = kw.get("out_dir", node.args[2] if len(node.args) > 2 else None)
            formats = kw.get("formats", node.args[3] if len(node.args) > 3 else ast.Constant(("npz",)))
            calls.append((ast.literal_eval(out), tuple(ast.literal_eval(formats))))
    return calls


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)), ids=[f"line{ln}" for _, ln in PYTHON_BLOCKS])
def test_readme_python_runs(workdir, index):
    code, _ = PYTHON_BLOCKS[index]
    script = workdir / "example.py"
    script.write_text(code)
    res = run(".venv/bin/python example.py", workdir)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Read blend:" not in res.stdout  # the API's open_blend keeps Blender's line off stdout
    for out, formats in scan_range_outputs(code):
        found = files_under(workdir / out)
        assert "manifest.json" in found, found
        assert json.loads((workdir / out / "manifest.json").read_text())["status"] == "complete"
        for fmt in formats:
            assert any(f.endswith(FORMAT_FILES[fmt]) for f in found), (fmt, found)


@pytest.mark.parametrize("index", range(len(BASH_BLOCKS)), ids=[f"line{ln}" for _, ln in BASH_BLOCKS])
def test_readme_bash_runs(workdir, index):
    """A ``bash`` block (the two-worker Dask cluster started by hand) runs whole with
    ``bash -e``; each ``blensor scan`` in it writes a complete run, and no process it
    started is left."""
    import signal
    code, _ = BASH_BLOCKS[index]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BLENSOR_NATIVE_LIB")}
    log = workdir / f"bash{index}.log"
    with open(log, "w") as out:  # (a file, not a pipe: a job left running would hold a pipe open)
        proc = subprocess.Popen(["bash", "-e", "-c", code], cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            code_ = proc.wait(timeout=300)
        finally:  # a failed script leaves its background jobs (the scheduler, workers) behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert code_ == 0, text[-4000:]
    res = SimpleNamespace(stderr=text)
    scans = [line.split() for line in code.splitlines() if line.startswith(".venv/bin/blensor scan")]
    assert scans
    for argv in scans:
        out = workdir / option(argv, "--out")
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
        assert any(f.endswith(".npz") for f in files_under(out))
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    # Dask logs at WARNING (no INFO flood) and its workers end cleanly (no SIGSEGV in Blender's
    # teardown: "Worker process ... was killed by signal 11")
    assert " - INFO - " not in text and "killed by signal" not in text, text[-4000:]


def test_readme_has_runnable_examples():
    # the examples this file runs: the quick start, the command lines, the Python API
    assert len(COMMANDS) >= 5 and PYTHON_BLOCKS
    assert any("scan_range" in code for code, _ in PYTHON_BLOCKS)


def test_architecture_doc_names_every_folder():
    """docs/architecture.md's table of folders matches blensor_addon/: every package and
    top-level module is described, and nothing that does not exist."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    described = set(re.findall(r"^\| `([a-z_/.]+)` \|", text, re.M))
    addon = ROOT / "blensor_addon"
    actual = {f"{p.parent.relative_to(addon)}/" for p in addon.rglob("__init__.py") if p.parent != addon}
    actual |= {p.name for p in addon.glob("*.py") if p.name != "__init__.py"}
    assert described == actual, (sorted(actual - described), sorted(described - actual))
    # the layer picture: the levels of tests/test_layers.py, top first, each part once
    picture = text[text.index("## Layers"):text.index("## What each folder owns")]
    groups = [[name.strip().rstrip("/").removesuffix(".py") for name in m.split(",")]
              for m in re.findall(r"^  ([a-z_]+[/.]?(?:py)?(?:, [a-z_]+[/.]?(?:py)?)*) {2,}", picture, re.M)]
    levels = [{LEVELS[name] for name in g} for g in groups]
    assert all(len(lv) == 1 for lv in levels), groups
    top_first = sorted(set(LEVELS.values()) - {LEVELS["__init__"]}, reverse=True)
    assert [lv.pop() for lv in levels] == top_first, groups
    assert sorted(n for g in groups for n in g) == sorted(set(LEVELS) - {"__init__"}), groups


def test_physics_doc_explains_every_source_the_code_cites():
    """Every 'seed 00N' the code cites is named in full in docs/physics.md, and every
    section, equation and table number cited from it appears there."""
    code = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "blensor_addon").rglob("*.py"))
    code = re.sub(r"\s+", " ", code.replace("#", " ").replace('"', " "))
    physics = (DOCS / "physics.md").read_text(encoding="utf-8")
    sources = physics[physics.index("## Sources"):physics.index("## Frames and angles")]
    cited = re.findall(r"[Ss]eed (00\d)((?:,? (?:sections?|Eq\.|Table|Fig\.) [\d.]+(?: and [\d.]+)?)*)", code)
    assert len(cited) > 20
    missing = []
    for seed, refs in cited:
        if f"| seed {seed} |" not in sources:
            missing.append(f"seed {seed}")
        row = next((r for r in sources.splitlines() if r.startswith(f"| seed {seed} |")), "")
        for kind, num in re.findall(r"(sections?|Eq\.|Table|Fig\.) ([\d.]+)", refs):
            num = num.rstrip(".")
            want = {"Eq.": f"Eq. {num}", "Table": f"Table {num}", "Fig.": f"Fig. {num}"}.get(kind, num)
            if want not in row and not (kind == "Eq." and f"Eq. {num[0]}-" in row):
                missing.append(f"seed {seed} {kind} {num}")
    assert not missing, sorted(set(missing))


def test_formats_doc_gives_the_frame_of_ouster_points_and_ouster_ros_defaults():
    """docs/formats.md says where an Ouster preset's points sit (the lidar origin, the sensor
    frame's axes), how far ouster-ros's default frames are from it, and cites ouster-ros's
    files; the README's format table points there."""
    text = re.sub(r"\s+", " ", (DOCS / "formats.md").read_text(encoding="utf-8"))
    section = text[text.index("## Ouster points"):]
    for words in ("lidar origin", "os_lidar", "os_sensor", "36.18 mm", "78.296 mm",
                  "ouster-ros/src/os_static_transforms_broadcaster.h", "ouster-ros/config/driver_params.yaml",
                  "src/os_transforms_broadcaster.h", "lidar_to_sensor_transform", "(-x, -y, z)"):
        assert words in section, words
    assert "docs/formats.md#ouster-points" in README.read_text(encoding="utf-8")


def test_the_architecture_table_names_the_modules_each_folder_holds():
    """docs/architecture.md's "What each folder owns" is drawn from the code: every module
    a row names (`name.py`) is a file of that row's folder (a rename or a removal that the
    table does not follow fails here), and every module of the folder is named (as `name.py`, or as the sensor or format it is)."""
    text = (DOCS / "architecture.md").read_text()
    section = text.split("## What each folder owns", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_/]+)/?`[^|]* \| (.*) \|$", section, re.M)
    assert len(rows) >= 8
    wrong, missing = [], []
    for folder, body in rows:
        where = ROOT / "blensor_addon" / folder.rstrip("/")
        if not where.is_dir():
            continue
        named = set(re.findall(r"`([a-z_0-9]+\.py)`", body))
        have = {p.name for p in where.glob("*.py")}
        folder = folder.rstrip("/")
        wrong += [f"{folder}/{n}" for n in sorted(named - have)]
        missing += [f"{folder}/{n}" for n in sorted(have - named - {"__init__.py"})
                    if not re.search(rf"\b{n[:-3].lstrip('_')}\b", body)]
    assert not wrong, f"the table names modules that do not exist: {wrong}"
    assert not missing, f"modules the table does not name: {missing}"
