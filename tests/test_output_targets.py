"""Output targets: every writer of BlenSor refuses a target that exists and is not a
regular file (a FIFO, a device node, a socket, a folder, a link at an output name):
exit 2 with one line, the node left as it was, nothing written beside it. Before, the
temporary-file-and-rename writers (``io/atomic.py``) renamed their file over whatever
sat at the path: ``blensor config export unity SCENE.blend /dev/null`` as root turned
the machine's ``/dev/null`` into a regular file."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import CROSSING
from test_faults import one_error_line, run

#: the kinds of node a test plants at a target: name -> maker(path)
NODES = {
    "fifo": lambda p: os.mkfifo(p),
    # a private null device (major 1, minor 3 on Linux): only root may make one
    "device": lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3)),
}
KIND = {"fifo": "a FIFO", "device": "a device"}


def plant(path: Path, node: str) -> os.stat_result:
    """Make a ``node`` (fifo, device) at ``path``; returns its lstat (skips the test
    where it cannot be made: a device node needs root)."""
    if node == "device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    path.parent.mkdir(parents=True, exist_ok=True)
    NODES[node](path)
    return os.lstat(path)


def same_node(path: Path, before: os.stat_result) -> bool:
    """True if ``path`` is still the node ``before`` (same inode, type and device)."""
    st = os.lstat(path)
    return (st.st_ino, st.st_mode, st.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)


@pytest.mark.parametrize("node", ["fifo", "device"])
def test_config_export_refuses_a_target_that_is_not_a_regular_file(tmp_path, node):
    target = tmp_path / "sensors.xml"
    before = plant(target, node)
    res = run("config", "export", "unity", CROSSING, target)
    assert res.returncode == 2 and res.stdout == ""
    assert one_error_line(res) == (
        f"blensor: error: {target} must be a new file or a regular file to replace (never a FIFO, "
        f"device, socket or folder), got '{target} ({KIND[node]})'")
    assert same_node(target, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sensors.xml"]  # no temporary file left


def test_config_export_writes_through_a_link_to_a_regular_file_and_refuses_one_to_a_fifo(tmp_path):
    real = tmp_path / "real.xml"
    real.write_text("old")
    link = tmp_path / "link.xml"
    link.symlink_to(real)
    res = run("config", "export", "unity", CROSSING, link)
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and real.read_text().startswith("<")  # the link kept, its file written
    fifo = tmp_path / "fifo"
    before = plant(fifo, "fifo")
    to_fifo = tmp_path / "to_fifo.xml"
    to_fifo.symlink_to(fifo)
    res = run("config", "export", "unity", CROSSING, to_fifo)
    assert res.returncode == 2 and f"got '{fifo} (a FIFO)'" in one_error_line(res)
    assert same_node(fifo, before) and to_fifo.is_symlink()


@pytest.mark.parametrize("name,node", [("trajectory.tum", "fifo"), ("scan00001.npz", "device"),
                                       ("clean/scan00001.pcd", "fifo")])
def test_scan_refuses_a_node_at_an_output_name_before_scanning(tmp_path, name, node):
    out = tmp_path / "out"
    before = plant(out / name, node)
    res = run("scan", CROSSING, "--frames", "1", "--formats", "npz,pcd", "--out", out, "--quiet")
    assert res.returncode == 2 and res.stdout == ""
    assert one_error_line(res) == (
        f"blensor: error: --out must be a folder whose files of BlenSor's names are regular files "
        f"(BlenSor replaces no FIFO, device, socket, folder or link there), got "
        f"'{out / name} ({KIND[node]})'")
    assert same_node(out / name, before)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        {name, *(["clean"] if "/" in name else [])})


def test_motion_export_refuses_a_fifo_at_its_file(tmp_path):
    out = tmp_path / "out"
    before = plant(out / "motion.txt", "fifo")
    res = run("motion", CROSSING, "--frames", "1", "--out", out, "--quiet")
    assert res.returncode == 2, res.stderr
    assert one_error_line(res).endswith(f"got '{out / 'motion.txt'} (a FIFO)'")
    assert same_node(out / "motion.txt", before) and [p.name for p in out.iterdir()] == ["motion.txt"]


@pytest.mark.parametrize("node", ["fifo", "device"])
def test_a_node_at_the_lock_file_is_refused_and_kept(tmp_path, node):
    out = tmp_path / "out"
    before = plant(out / ".blensor.lock", node)
    res = run("motion", CROSSING, "--frames", "1", "--out", out, "--quiet")
    assert res.returncode == 2
    assert one_error_line(res) == (
        f"blensor: error: --out must be a folder whose .blensor.lock is a regular file or missing "
        f"(never a FIFO, device, socket, folder or link), got '{out / '.blensor.lock'} ({KIND[node]})'")
    assert same_node(out / ".blensor.lock", before) and len(list(out.iterdir())) == 1


def test_the_atomic_writers_never_rename_over_a_node(tmp_path):
    from blensor_addon.io import atomic
    fifo = tmp_path / "f"
    before = plant(fifo, "fifo")
    folder = tmp_path / "d"
    folder.mkdir()
    for target in (fifo, folder):
        with pytest.raises(atomic.NotRegularError) as err:
            atomic.atomic_write_bytes(target, b"x")
        assert err.value.filename == str(target)
    with pytest.raises(atomic.NotRegularError):
        atomic.commit_files(tmp_path, [("ok", b"1"), ("f", b"2")])
    with pytest.raises(atomic.NotRegularError):
        atomic.StagedFile(fifo)
    staged = atomic.StagedFile(tmp_path / "later")
    staged.put(0, b"data")
    os.mkfifo(tmp_path / "later")  # planted while the file was being written
    with pytest.raises(atomic.NotRegularError):
        staged.commit()
    staged.discard()
    assert same_node(fifo, before) and stat.S_ISFIFO(os.lstat(tmp_path / "later").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f", "later"]  # no "ok", no .part


def test_a_second_depth_export_into_its_folder_names_only_options_depth_takes(tmp_path):
    out = tmp_path / "d"
    first = run("depth", CROSSING, "--frames", "1", "--formats", "npy", "--out", out, "--quiet")
    assert first.returncode == 0, first.stderr
    res = run("depth", CROSSING, "--frames", "1", "--formats", "npy", "--out", out, "--quiet")
    assert res.returncode == 2
    line = one_error_line(res)
    assert "--overwrite" in line and "--resume" not in line, line
    scan = run("scan", CROSSING, "--frames", "1", "--formats", "npz", "--out", out, "--quiet")
    assert scan.returncode == 2 and "--resume to continue it" in one_error_line(scan)  # scan takes it


def test_a_pattern_file_is_never_written_into_a_fifo(tmp_path):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.core.sensors.pattern_file import write_csv
    fifo = tmp_path / "pattern.csv"
    before = plant(fifo, "fifo")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # (else opening it for writing would block)
    try:
        with pytest.raises(SettingsError, match="path must be a new file or a regular file to replace"):
            write_csv(str(fifo), [0.0], [0.0], [0.0], [0])
        assert os.read(reader, 100) == b""  # nothing went into it
    finally:
        os.close(reader)
    assert same_node(fifo, before)


def test_saving_the_blend_never_renames_over_a_node_put_at_its_path(crossing, tmp_path):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.calib_import import save_blend_atomically
    target = tmp_path / "scene.blend"
    before = plant(target, "fifo")  # (the command checks the .blend before loading it; this came later)
    held = os.open(target, os.O_RDWR)  # a reader of its first bytes must not block
    os.write(held, b"BLENDER-")
    try:
        with pytest.raises(SettingsError) as err:
            save_blend_atomically(target)
    finally:
        os.close(held)
    assert str(err.value) == (f"SCENE.blend must be a .blend that is a regular file (never a FIFO, device, "
                              f"socket, folder or link), got '{target} (a FIFO)'")
    assert same_node(target, before) and [p.name for p in tmp_path.iterdir()] == ["scene.blend"]
