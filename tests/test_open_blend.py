"""``blensor_addon.open_blend``: a script's stdout holds its own output, not Blender's
"Read blend: ..." line (which ``bpy.ops.wm.open_mainfile`` prints to file descriptor 1)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import CROSSING, ROOT

SCRIPT = textwrap.dedent("""
    import sys
    import bpy
    import blensor_addon
    blensor_addon.register()
    try:
        if sys.argv[2] == "api":
            scene = blensor_addon.open_blend(sys.argv[1])
        else:
            bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
            scene = bpy.context.scene
        print("scene", scene.name)
        try:
            blensor_addon.open_blend(sys.argv[1] + ".missing")
        except RuntimeError:
            print("refused")
    finally:
        blensor_addon.unregister()
""")


def _run(how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(CROSSING), how], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_open_blend_keeps_blenders_line_off_stdout():
    res = _run("api")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "scene Crossing\nrefused\n", res.stdout  # stdout is back after a refusal too
    assert "Traceback" not in res.stderr


def test_open_mainfile_itself_prints_it():  # (why open_blend exists: Blender's own behaviour)
    res = _run("ops")
    assert res.returncode == 0, res.stderr
    assert "Read blend:" in res.stdout and res.stdout.endswith("scene Crossing\nrefused\n")
