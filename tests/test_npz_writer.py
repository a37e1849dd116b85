"""The npz writer without Blender (``io/formats/npz.py``): which members a frame's file
holds, in which order and dtype, and the zip container's fixed bytes (member times, modes,
deflate or store), read back with the standard library and ``numpy.load``."""
from __future__ import annotations

import io
import json
import zipfile
import zlib

import numpy as np
import pytest

from blensor_addon.core.classes import CLASSES
from blensor_addon.core.result import FIELDS, ScanResult
from blensor_addon.io.formats._base import RunInfo
from blensor_addon.io.formats.npz import (NpzOptions, NpzWriter, npz_bytes, npz_bytes_of, npz_members,
                                          write_npz)

START_2020_NS = 1577836800 * 10**9  # the default time base, 2020-01-01T00:00:00Z


def result(n: int = 4, **kw) -> ScanResult:
    """A hand-made sensor-frame result of ``n`` returns on a (2, 2) grid."""
    i = np.arange(n)
    xyz = np.stack([i * 1.0, i * 2.0, i * -3.0], axis=1)
    base = dict(timestamp=0.5 + i * 1e-4, azimuth=i * 0.1, elevation=np.zeros(n), range=5.0 + i,
                range_noisy=5.01 + i, xyz=xyz, xyz_noisy=xyz + 0.5, object_id=i + 1, semantic=np.full(n, 40),
                instancer_id=np.zeros(n), instance_id=np.zeros(n), channel=i % 2, ring=i % 2, ray_index=i,
                reflectivity=np.full(n, 0.5), intensity=np.full(n, 0.25), color=np.full((n, 3), 200),
                normal=np.tile([0.0, 0.0, 1.0], (n, 1)), grid_shape=(2, 2), frame=12, frame_time=0.1,
                sensor={"zeta": 1, "alpha": [2, 3]}, sensor_type="line", axes="ros")
    base.update(kw)
    return ScanResult(**base)


def members(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data)) as z:
        return {k: z[k] for k in z.files}


def test_members_are_every_field_then_the_metadata_in_file_order():
    r = result()
    m = npz_members(r, start_ns=123)
    assert list(m) == [*FIELDS, "frame", "frame_time", "start_time_ns", "frame_of_reference",
                       "sensor_to_world", "sensor", "sensor_type", "grid_shape", "axes", "classes"]
    for name in FIELDS:
        assert m[name] is getattr(r, name) or np.array_equal(m[name], getattr(r, name))
    assert m["frame"].dtype == np.int64 and m["frame"].shape == () and int(m["frame"]) == 12
    assert m["frame_time"].dtype == np.float64 and float(m["frame_time"]) == 0.1
    assert m["start_time_ns"].dtype == np.int64 and int(m["start_time_ns"]) == 123
    assert str(m["frame_of_reference"]) == "sensor"
    assert m["sensor_to_world"].dtype == np.float64 and np.array_equal(m["sensor_to_world"], np.eye(4))
    assert str(m["sensor"]) == '{"alpha": [2, 3], "zeta": 1}'  # keys sorted: the same bytes every run
    assert str(m["sensor_type"]) == "line" and str(m["axes"]) == "ros"
    assert m["grid_shape"].dtype == np.int64 and m["grid_shape"].tolist() == [2, 2]
    assert json.loads(str(m["classes"])) == CLASSES
    assert int(npz_members(r)["start_time_ns"]) == START_2020_NS  # None: the default time base


def test_metadata_is_stored_at_its_documented_dtype_whatever_the_callers_numbers_are():
    # numpy scalars of other widths (a frame number from an array, a float32 frame time, a
    # float32 pose) and a result with no grid keep the file's dtypes
    r = result(ray_index=None, grid_shape=(), frame=np.int16(12), frame_time=np.float32(0.1),
               sensor_to_world=np.eye(4, dtype=np.float32))
    m = npz_members(r, start_ns=np.uint64(START_2020_NS))
    assert "ray_index" not in m
    assert m["frame"].dtype == np.int64 and int(m["frame"]) == 12
    assert m["frame_time"].dtype == np.float64
    assert m["start_time_ns"].dtype == np.int64 and int(m["start_time_ns"]) == START_2020_NS
    assert m["sensor_to_world"].dtype == np.float64
    assert m["grid_shape"].dtype == np.int64 and m["grid_shape"].shape == (0,)


def test_continuous_time_adds_the_end_pose_and_registered_fields_follow():
    end = np.eye(4)
    end[:3, 3] = (1.0, 2.0, 3.0)
    r = result(sensor_to_world_end=end.astype(np.float32),
               extra={"return_number": np.array([1, 2, 1, 1]), "number_of_returns": np.array([1, 2, 2, 1])})
    m = npz_members(r)
    assert list(m)[-3:] == ["sensor_to_world_end", "return_number", "number_of_returns"]
    assert m["sensor_to_world_end"].dtype == np.float64 and np.array_equal(m["sensor_to_world_end"], end)
    assert m["return_number"].dtype == np.uint8 and m["number_of_returns"].tolist() == [1, 2, 2, 1]
    assert "sensor_to_world_end" not in npz_members(result())


@pytest.mark.parametrize("compress,method", [(True, zipfile.ZIP_DEFLATED), (False, zipfile.ZIP_STORED)])
def test_the_zip_has_fixed_times_modes_and_method_so_a_scan_gives_the_same_bytes(compress, method):
    r = result()
    data = npz_bytes(r, compress, start_ns=7)
    assert data == npz_bytes(result(), compress, start_ns=7)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == [k + ".npy" for k in npz_members(r)]
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.external_attr == 0o644 << 16
            assert info.compress_type == method
    back = members(data)
    assert int(back["start_time_ns"]) == 7 and str(back["sensor_type"]) == "line"
    assert np.array_equal(back["xyz_noisy"], r.xyz_noisy) and back["xyz_noisy"].dtype == np.float32
    assert int(members(npz_bytes(r))["start_time_ns"]) == START_2020_NS


def test_deflated_members_use_the_fast_level_and_stored_ones_are_the_arrays_as_npy():
    arrays = {"a": np.arange(4000, dtype=np.float64) % 7,
              "b": np.asfortranarray(np.arange(6.0).reshape(2, 3))}
    stored = npz_bytes_of(arrays)
    assert stored == npz_bytes_of(arrays, compress=False)
    with zipfile.ZipFile(io.BytesIO(stored)) as zf:
        raw = zf.read("b.npy")
        assert raw[:6] == b"\x93NUMPY" and b"'fortran_order': False" in raw  # C order, whatever came in
        assert zf.getinfo("a.npy").compress_size == zf.getinfo("a.npy").file_size
    deflated = npz_bytes_of(arrays, compress=True)
    with zipfile.ZipFile(io.BytesIO(deflated)) as zf:
        info = zf.getinfo("a.npy")
        assert info.compress_size < info.file_size
        co = zlib.compressobj(1, zlib.DEFLATED, -15)  # raw deflate at level 1, as zipfile calls zlib
        assert info.compress_size == len(co.compress(zf.read("a.npy")) + co.flush())
    back = members(deflated)
    assert list(back) == ["a", "b"] and np.array_equal(back["b"], arrays["b"])
    with pytest.raises(ValueError):  # no pickled objects in a BlenSor npz
        npz_bytes_of({"o": np.array([{"x": 1}], dtype=object)})


def test_write_npz_and_the_writer_give_the_frames_bytes(tmp_path):
    r = result()
    write_npz(r, tmp_path / "a.npz")
    assert (tmp_path / "a.npz").read_bytes() == npz_bytes(r)
    write_npz(r, tmp_path / "b.npz", compress=False)
    assert (tmp_path / "b.npz").read_bytes() == npz_bytes(r, False)
    w = NpzWriter(tmp_path, None, RunInfo(start_ns=99))
    assert w.options == NpzOptions() and w.options.compress is True
    assert w.frame_files(r) == [("scan00012.npz", npz_bytes(r, True, 99))]
    w = NpzWriter(tmp_path, NpzOptions(compress=False), RunInfo(start_ns=99))
    assert w.frame_files(r) == [("scan00012.npz", npz_bytes(r, False, 99))]


def test_a_far_world_frame_result_is_warned_about_once(capsys, tmp_path):
    far = np.tile([40_000.0, 0.0, 0.0], (4, 1)) + np.arange(4)[:, None] * 0.123456
    pose = np.eye(4)
    r = result(xyz=far, xyz_noisy=far, frame_of_reference="world", sensor_to_world=pose)
    w = NpzWriter(tmp_path)
    w.frame_files(r)
    w.frame_files(r)
    err = capsys.readouterr().err
    assert err.count("blensor: warning: world coordinates up to") == 1 and " in npz " in err


def zipfile_npz(arrays, compress, date_time=(1980, 1, 1, 0, 0, 0)):
    """The archive as numpy-style code writes it with zipfile: one writestr per member
    (each stamped ``date_time``)."""
    from blensor_addon.io.formats._base import write_array
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    level = 1 if compress else None
    with zipfile.ZipFile(out, "w", compression=method, compresslevel=level) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            write_array(buf, np.require(arr, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=date_time)
            info.external_attr = 0o644 << 16
            info.compress_type = method
            zf.writestr(info, buf.getbuffer(), compress_type=method, compresslevel=level)
    return out.getvalue()


ARRAYS = {"big": np.arange(40000, dtype=np.float64) % 11, "noise": np.random.default_rng(3).random(30000),
          "small": np.arange(5, dtype=np.uint16), "empty": np.zeros((0, 3), np.float32),
          "scalar": np.array(2.5), "text": np.array('{"é": 1}'), "grüße": np.ones(3, np.uint8)}


@pytest.mark.parametrize("compress", [True, False])
def test_the_archive_is_zipfiles_bytes_with_or_without_the_pool(compress):
    """Assembled here with the members deflated on the pool, on this thread, or every
    member on the pool: the bytes zipfile writes (non-ASCII member name included)."""
    from blensor_addon.io.formats import npz
    expected = zipfile_npz(ARRAYS, compress)
    assert npz_bytes_of(ARRAYS, compress) == expected
    assert npz_bytes_of(ARRAYS, compress, pool=None) == expected
    assert npz_bytes_of({}, compress) == zipfile_npz({}, compress)
    old = npz.POOL_MIN_BYTES
    try:
        npz.POOL_MIN_BYTES = 0
        assert npz_bytes_of(ARRAYS, compress) == expected
    finally:
        npz.POOL_MIN_BYTES = old
    with zipfile.ZipFile(io.BytesIO(expected)) as zf:
        assert zf.testzip() is None and zf.getinfo("grüße.npy").flag_bits & 0x800


def test_the_large_members_go_to_the_pool_at_once():
    """Deflate runs on the pool's threads for every member of 64 KiB or more in one
    map (all in flight together); the small ones on the calling thread."""
    import os
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from blensor_addon.io.formats import npz
    calls = []

    class Recording(ThreadPoolExecutor):
        def map(self, fn, *iterables, **kw):
            items = [list(it) for it in iterables]
            calls.append([len(x) for x in items[0]])
            return super().map(fn, *items, **kw)
    with Recording(2) as pool:
        assert npz_bytes_of(ARRAYS, True, pool=lambda: pool) == zipfile_npz(ARRAYS, True)
    assert calls == [[40000 * 8 + 128, 30000 * 8 + 128]] and npz.POOL_MIN_BYTES == 1 << 16
    assert npz.POOL_THREADS == max(1, min(4, os.cpu_count() or 1))
    npz_bytes_of(ARRAYS, True)
    assert npz.deflate_pool() is npz.deflate_pool()
    assert any(t.name.startswith("blensor-deflate") for t in threading.enumerate())


def test_an_archive_that_needs_zip64_records_is_zipfiles(monkeypatch):
    """Past the ZIP64 limit (2 GiB: lowered here) or 65,535 members zipfile writes the
    archive, ZIP64 records and all."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 200_000)
    data = npz_bytes_of(ARRAYS, True)
    assert data == zipfile_npz(ARRAYS, True) and b"PK\x06\x06" in data  # the ZIP64 end record
    assert np.array_equal(members(data)["noise"], ARRAYS["noise"])
    monkeypatch.undo()
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", len(ARRAYS) - 1)  # (65,535 members)
    data = npz_bytes_of(ARRAYS, False)
    assert data == zipfile_npz(ARRAYS, False) and b"PK\x06\x06" in data
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", len(ARRAYS))
    assert b"PK\x06\x06" not in npz_bytes_of(ARRAYS, False)


def test_the_deflate_pool_has_pool_threads_workers():
    """At most 4 threads (the cores): not ThreadPoolExecutor's default of cores + 4, which
    would compete with the scan's own threads."""
    from blensor_addon.io.formats import npz
    assert npz.deflate_pool()._max_workers == npz.POOL_THREADS  # (CPython's ThreadPoolExecutor)
    assert npz.POOL_THREADS <= 4


def test_zipfile_writes_the_archive_exactly_past_the_zip64_thresholds(monkeypatch):
    """zipfile writes a member with ZIP64 records when its size x 1.05 exceeds ZIP64_LIMIT,
    and the end record when members exceed ZIP_FILECOUNT_LIMIT: the archive goes to zipfile
    just past each threshold (total npy bytes x 1.05 > ZIP64_LIMIT; more members than
    ZIP_FILECOUNT_LIMIT), and is assembled here at it, the bytes zipfile's either way."""
    from blensor_addon.io.formats import npz
    real, used = npz._zipfile_bytes, []

    def spy(members, compress):
        used.append(len(members))
        return real(members, compress)
    monkeypatch.setattr(npz, "_zipfile_bytes", spy)
    one = {"a": np.arange(992, dtype=np.uint8)}  # 1,120 bytes of npy; x 1.05 = 1,176 exactly
    with zipfile.ZipFile(io.BytesIO(zipfile_npz(one, False))) as zf:
        total = zf.getinfo("a.npy").file_size
    assert total == 1120 and total * 1.05 == 1176
    for limit, by_zipfile in [(1176, False), (1175, True), (1120, True), (2000, False)]:
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", limit)
        used.clear()
        for compress in (True, False):
            assert npz_bytes_of(one, compress) == zipfile_npz(one, compress)
        assert used == ([1, 1] if by_zipfile else []), limit
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", (1 << 31) - 1)
    for count_limit, by_zipfile in [(len(ARRAYS), False), (len(ARRAYS) - 1, True)]:
        monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", count_limit)
        used.clear()
        assert npz_bytes_of(ARRAYS, False, pool=None) == zipfile_npz(ARRAYS, False)
        assert used == ([len(ARRAYS)] if by_zipfile else [])


def test_each_member_is_packed_once_from_pool_min_bytes_on_the_pool(monkeypatch):
    """A member of POOL_MIN_BYTES or more is deflated (and CRC-summed) once, on the pool's
    threads; a smaller one once, on the calling thread; with pool=None all on the calling
    thread. The member exactly at the threshold (before a larger one) goes to the pool."""
    import threading

    from blensor_addon.io.formats import npz
    arrays = {"edge": np.arange(992, dtype=np.uint8), "big": np.arange(3000, dtype=np.uint16) % 7,
              "small": np.arange(3, dtype=np.uint8)}
    monkeypatch.setattr(npz, "POOL_MIN_BYTES", 1120)  # the npy bytes of "edge"
    real, calls = npz._packed, []

    def spy(data, compress):
        calls.append((len(data), threading.current_thread().name.startswith("blensor-deflate")))
        return real(data, compress)
    monkeypatch.setattr(npz, "_packed", spy)
    for compress in (True, False):
        calls.clear()
        assert npz_bytes_of(arrays, compress) == zipfile_npz(arrays, compress)
        assert sorted(calls) == [(131, False), (1120, True), (6128, True)]
        calls.clear()
        assert npz_bytes_of(arrays, compress, pool=None) == zipfile_npz(arrays, compress)
        assert sorted(calls) == [(131, False), (1120, False), (6128, False)]


def test_an_archive_of_small_members_never_starts_the_pool():
    """No member of POOL_MIN_BYTES: the pool is not asked for (no threads are started)."""
    def no_pool():
        raise AssertionError("the deflate pool was asked for")
    arrays = {"small": np.arange(3, dtype=np.uint8), "text": np.array("ros")}
    for compress in (True, False):
        assert npz_bytes_of(arrays, compress, pool=no_pool) == zipfile_npz(arrays, compress)


def test_the_central_directory_packs_the_member_time_as_zipfile_does(monkeypatch):
    """The members' fixed time (_EPOCH) goes into the local headers (ZipInfo.FileHeader) and
    the central directory packed here: with another time than 1980-01-01 00:00:00 (whose
    DOS time is 0), every field in its bits as zipfile packs them (seconds halved)."""
    from blensor_addon.io.formats import npz
    when = (2024, 5, 17, 13, 45, 59)
    monkeypatch.setattr(npz, "_EPOCH", when)
    for compress in (True, False):
        data = npz_bytes_of(ARRAYS, compress)
        assert data == zipfile_npz(ARRAYS, compress, date_time=when)
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            assert {i.date_time for i in zf.infolist()} == {(2024, 5, 17, 13, 45, 58)}
