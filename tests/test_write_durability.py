"""What a range scan's writing costs in syncs and manifest bytes, and what it guarantees:
one data sync per packet (``syncfs`` on Linux) before the packet's files are renamed
into place, each file at its final name whole; a manifest whose rewrites over a run add
up to a size linear in the run, with the bytes ``json.dumps`` gives."""
from __future__ import annotations

import errno
import os
import sys

import pytest

from blensor_addon.io import atomic

needs_syncfs = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs(2) is Linux's")

#: one packet of npz, pcd and kitti with the trajectory: 9 files in 5 folders
PACKET = [("scan00001.npz", b"n" * 5000), ("clean/scan00001.pcd", b"c" * 3000),
          ("noisy/scan00001.pcd", b"y" * 3000), ("velodyne/000001.bin", b"v" * 2000),
          ("labels/000001.label", b"l" * 500), ("poses.txt", b"p\n"), ("times.txt", b"t\n"),
          ("calib.txt", b"k\n"), ("trajectory.tum", b"0 0 0 0 0 0 0 1\n")]


def count_syncs(monkeypatch):
    """Count os.fsync and syncfs calls (both still done)."""
    calls = {"fsync": 0, "syncfs": 0}
    real_fsync, real_syncfs = os.fsync, getattr(atomic, "_syncfs", None)

    def fsync(fd):
        calls["fsync"] += 1
        real_fsync(fd)

    def syncfs(fd):
        calls["syncfs"] += 1
        real_syncfs(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(atomic, "_syncfs", syncfs, raising=False)
    return calls


@needs_syncfs
def test_a_packets_files_are_synced_once_not_once_per_file(tmp_path, monkeypatch):
    calls = count_syncs(monkeypatch)
    written = atomic.commit_files(tmp_path, PACKET)
    assert calls == {"fsync": 0, "syncfs": 1}
    assert [p.read_bytes() for p in written] == [data for _, data in PACKET]
    assert not list(tmp_path.rglob("*.part"))


@needs_syncfs
def test_the_data_is_synced_before_any_file_is_renamed(tmp_path, monkeypatch):
    """The durability order: every staged file's data is synced, then the renames."""
    events = []
    real_syncfs, real_replace = getattr(atomic, "_syncfs", None), os.replace

    def syncfs(fd):
        events.append(("sync", sorted(p.name for p in tmp_path.rglob("*") if p.is_file())))
        real_syncfs(fd)

    def replace(src, dst):
        events.append(("rename", os.path.basename(dst)))
        real_replace(src, dst)
    monkeypatch.setattr(atomic, "_syncfs", syncfs, raising=False)
    monkeypatch.setattr(os, "replace", replace)
    atomic.commit_files(tmp_path, PACKET)
    assert events[0][0] == "sync" and len(events[0][1]) == len(PACKET)
    assert all(name.endswith(".part") for name in events[0][1])
    assert [e[1] for e in events[1:]] == [os.path.basename(n) for n, _ in PACKET]


def test_without_syncfs_each_file_is_fsynced(tmp_path, monkeypatch):
    """macOS and Windows have no syncfs: one fsync per file before the renames."""
    calls = {"fsync": 0}
    real_fsync = os.fsync

    def fsync(fd):
        calls["fsync"] += 1
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(atomic, "_syncfs", None, raising=False)
    atomic.commit_files(tmp_path, PACKET)
    assert calls == {"fsync": len(PACKET)}


@needs_syncfs
def test_a_failed_sync_leaves_no_file_and_the_earlier_ones_as_they_were(tmp_path, monkeypatch):
    (tmp_path / "poses.txt").write_bytes(b"the earlier run's\n")

    def syncfs(fd):
        raise OSError(errno.EIO, "syncfs failed (Input/output error)")
    monkeypatch.setattr(atomic, "_syncfs", syncfs, raising=False)
    with pytest.raises(OSError) as err:
        atomic.commit_files(tmp_path, PACKET)
    assert err.value.errno == errno.EIO
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["poses.txt"] and (tmp_path / "poses.txt").read_bytes() == b"the earlier run's\n"


@needs_syncfs
def test_a_range_scan_syncs_each_packet_once(bpy_mod, crossing, tmp_path, monkeypatch):
    """Three packets into npz, pcd and kitti (9 files each): three syncfs calls for the
    packets' files; every os.fsync is a manifest's (started, after each of the first
    packets, final)."""
    from blensor_addon.io.outdir import OutputFolder
    from blensor_addon.jobs.range_scan import scan_range
    cam = bpy_mod.data.objects["Velodyne"]
    cam.data.blensor.time_model = "frame"
    calls = count_syncs(monkeypatch)
    manifests = []
    real = OutputFolder.write_manifest

    def write_manifest(self, doc, done, final=False):
        manifests.append(done)
        return real(self, doc, done, final)
    monkeypatch.setattr(OutputFolder, "write_manifest", write_manifest)
    job = scan_range(cam, range(1, 4), tmp_path, ("npz", "pcd", "kitti"), angle_resolution=2.0)
    assert job.status == "complete" and len(job.done) == 3
    assert calls == {"syncfs": 3, "fsync": len(manifests)} and manifests == [0, 1, 2, 3, 3]


def test_the_manifest_text_is_json_dumps_byte_for_byte():
    """Entries encoded once and joined give the bytes json.dumps gives the whole doc,
    with strings that look like the layout, non-ASCII text, NaN, empty containers."""
    import json
    import random

    from blensor_addon.io.outdir import ManifestText
    rng = random.Random(7)
    for trial in range(30):
        text = ManifestText()
        doc = {"blensor_version": "x", "sensor": {"b": [1, 2.5, float("nan")], "c": 'é\n  "frames": []'},
               "objects": [{"id": i, "name": f"o{i}"} for i in range(rng.randint(0, 3))],
               "z": None, "frames": [], "status": "running"}
        for k in range(rng.randint(0, 6)):
            entry = {"frame": k, "pose": [rng.random() for _ in range(16)], "files": ["a", "b/c"],
                     "file_checks": {"a": {"size": 1, "sha256": "0" * 64}}, "empty": {}, "none": []}
            doc["frames"].append(entry)
            text.add(entry)
            assert text.encode(doc) == (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
        doc["objects"] = doc["objects"][:rng.randint(0, 2)]  # a changed object table is encoded again
        assert text.encode(doc) == (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    objects = [{"id": 1, "name": "a"}]
    doc = {"objects": objects, "frames": []}
    text = ManifestText()
    assert text.encode(doc) == (b'{\n  "frames": [],\n  "objects": [\n    {\n      "id": 1,\n'
                                b'      "name": "a"\n    }\n  ]\n}\n')
    objects.append({"id": 2, "name": "b"})  # the table changed in place: encoded again
    objects[0]["name"] = "z"
    assert text.encode(doc) == (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def manifest_run(tmp_path, monkeypatch, packets, seconds_per_packet):
    """A run of ``packets`` through the real manifest writer and output folder, its
    clock advanced ``seconds_per_packet`` a packet: (bytes of every manifest write, the
    final manifest's bytes)."""
    import hashlib

    from blensor_addon.io.outdir import OutputFolder
    from blensor_addon.jobs.run_files import ManifestWriter
    clock = [0.0]
    folder = OutputFolder(tmp_path, manifest="manifest.json", patterns=[], listed=lambda m: None).open()
    folder.clock = lambda: clock[0]
    sizes, real = [], atomic.atomic_write_bytes

    def counting(path, data):
        sizes.append(len(data))
        real(path, data)
    monkeypatch.setattr(atomic, "atomic_write_bytes", counting)
    man = ManifestWriter(folder, {"blensor_version": "x", "formats": ["npz"]}, lambda: [])
    man.start()
    for frame in range(packets):
        clock[0] += seconds_per_packet
        name = f"scan{frame:05d}.npz"
        check = {"size": 1000, "sha256": hashlib.sha256(name.encode()).hexdigest()}
        man.finished({"frame": frame, "points": 1000, "geometry_hash": "g", "files": [name],
                      "file_checks": {name: check}})
    man.close("complete")
    folder.release()
    return sizes, (tmp_path / "manifest.json").stat().st_size


def test_a_slow_runs_manifest_rewrites_add_up_linearly(tmp_path, monkeypatch):
    """2,000 packets of 1 s each: a rewrite every 5 s would write 400 manifests, about
    200 times the final one's bytes, growing with the square of the run; spaced in time
    as in packets, the rewrites add up to a bounded multiple of the final manifest."""
    sizes, final = manifest_run(tmp_path, monkeypatch, 2000, 1.0)
    assert sizes[-1] == final
    assert sum(sizes) <= 64 * final, (len(sizes), sum(sizes) / final)
    assert len(sizes) <= 140


def test_a_killed_run_loses_at_most_a_sixteenth_of_its_time(tmp_path, monkeypatch):
    """The time rule still bounds what a kill loses: a rewrite at least every 5 s in
    the first 80 s, later at least every 1/16 of the time so far."""
    from blensor_addon.io.outdir import OutputFolder
    folder = OutputFolder(tmp_path, manifest="manifest.json", patterns=[], listed=lambda m: None)
    folder.path.mkdir(exist_ok=True)
    folder.clock = lambda: 0.0
    folder.write_manifest({"frames": []}, 40)  # 40 packets listed: the next one alone is not due
    assert not folder.manifest_due(41, now=4.9) and folder.manifest_due(41, now=5.0)
    folder.clock = lambda: 160.0
    folder.write_manifest({"frames": []}, 40)  # rewritten 160 s into the run: due 10.67 s later
    assert not folder.manifest_due(41, now=160.0 + 10.6) and folder.manifest_due(41, now=160.0 + 10.7)
