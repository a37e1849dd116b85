"""What a ``blensor`` command leaves behind and lets through besides its files: Blender's
own messages (printed by its C code on the process's stderr, past Python) reach the
terminal with names escaped as BlenSor's own lines are (``core/text.py``), and the
session folder Blender makes in ``$TMPDIR`` (``blender_XXXXXX``) is gone when the
command ends, though the command skips Blender's teardown (``os._exit``, see
``cli.end_process``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import CROSSING
from test_faults import BLENSOR

EVIL = "Evil\x1b[31mRED\x07"


def run_with_tmpdir(tmpdir, *args, timeout=300):
    env = dict(os.environ, TMPDIR=str(tmpdir))
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.parametrize("args,code", [
    (["info", CROSSING], 0),
    (["scan", CROSSING, "--frames", "1", "--formats", "npz", "--out", "OUT", "--quiet"], 0),
    (["scan", CROSSING, "--camera", "Nobody", "--out", "OUT"], 2),  # refused once Blender is loaded
    (["config", "export", "unity", CROSSING, "OUT.xml"], 0),
])
def test_a_command_that_loads_blender_leaves_no_folder_in_tmpdir(tmp_path, args, code):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    res = run_with_tmpdir(tmpdir, *[tmp_path / "out" if a == "OUT" else tmp_path / a if a == "OUT.xml"
                                    else a for a in args])
    assert res.returncode == code, res.stderr
    assert os.listdir(tmpdir) == []


def test_the_child_blender_that_reads_a_file_first_leaves_no_folder_in_tmpdir(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    code = ("from pathlib import Path; from blensor_addon.cli import _probe_blend; "
            f"_probe_blend(Path({str(CROSSING)!r}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=300)
    assert res.returncode == 0, res.stderr
    assert os.listdir(tmpdir) == []


def test_the_workers_of_a_local_cluster_leave_no_blender_folder_in_tmpdir(tmp_path):
    pytest.importorskip("distributed")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    res = run_with_tmpdir(tmpdir, "depth", CROSSING, "--frames", "1", "--formats", "npy", "--out",
                          tmp_path / "d", "--workers", "2", "--quiet")
    assert res.returncode == 0, res.stderr
    # (Dask's own dask-scratch-space and multiprocessing's pymp-* are theirs, not Blender's)
    assert [n for n in os.listdir(tmpdir) if n.startswith("blender_")] == []


@pytest.fixture(scope="module")
def driver_blend(tmp_path_factory):
    """The demo scene with an object named with an escape sequence and a bell, driven by
    a Python expression Blender refuses (auto-execution is off): Blender prints a warning
    naming the object at every evaluation."""
    blend = tmp_path_factory.mktemp("driver") / "driver.blend"
    code = textwrap.dedent(f"""
        import bpy, os
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        mesh = [o for o in bpy.data.objects if o.type == "MESH"][0]
        mesh.name = {EVIL!r}
        fc = mesh.driver_add("location", 2)
        fc.driver.type = "SCRIPTED"
        fc.driver.expression = "[0.0][0] + undefined_name"
        bpy.ops.wm.save_as_mainfile(filepath={str(blend)!r})
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    return blend


@pytest.mark.parametrize("args", [
    ["info", "BLEND"],
    ["scan", "BLEND", "--frames", "1-2", "--formats", "npz", "--out", "OUT", "--quiet"],
    ["motion", "BLEND", "--frames", "1-2", "--out", "OUT", "--quiet"],
])
def test_blenders_driver_warnings_reach_the_terminal_escaped(driver_blend, tmp_path, args):
    res = subprocess.run([BLENSOR, *[str(driver_blend) if a == "BLEND" else str(tmp_path / "o") if a == "OUT"
                                     else a for a in args]], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert 'name="Evil\\x1b[31mRED\\x07"' in res.stderr  # Blender's warning, passed on escaped
    assert "Error in PyDriver" in res.stderr
    assert not any(c in res.stdout + res.stderr for c in "\x1b\x07")


def test_what_c_code_prints_on_stderr_after_blender_loaded_is_escaped_and_never_blocks():
    # C code (Blender's fprintf) writes on file descriptor 2, past sys.stderr; libc's
    # write through ctypes.PyDLL keeps the GIL held, as a Python driver's message does:
    # a full pipe must lose the rest of a flood, never wait for the thread that needs the GIL
    code = textwrap.dedent("""
        import ctypes, os, sys
        from blensor_addon.process.messages import EscapedStderr
        err = EscapedStderr().start()
        os.write(2, b'For target: (type=Object, name="Evil\\x1b[31mRED\\x07", property=location)\\n'
                    b'\\tnext\\n')
        print("blensor: our own line", file=sys.stderr)
        libc = ctypes.PyDLL(None)
        libc.write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        block = b"x" * 65535 + b"\\n"
        for _ in range(64):  # 4 MiB with the GIL held
            libc.write(2, block, len(block))
        while True:  # (Python's own os.write sees the full pipe: BlockingIOError until drained)
            try:
                os.write(2, b"partial line \\x9b at the end")
                break
            except BlockingIOError:
                import time
                time.sleep(0.01)
        err.stop()
        print("blensor: after stop", file=sys.stderr)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    err = res.stderr
    assert b'name="Evil\\x1b[31mRED\\x07", property=location)\n\tnext\n' in err
    assert b"blensor: our own line\n" in err
    assert err.endswith(b"partial line \\x9b at the endblensor: after stop\n")  # (no newline: none printed)
    assert b"\x1b" not in err and b"\x07" not in err
