"""Hostile input for the native library, run as a script (by tests/test_native_hardening.py)
so that each kernel variant and the sanitizer build get a process of their own.

Usage: ``python tests/native_hostile.py`` with ``BLENSOR_NATIVE_LIB`` naming the library
and, for the SSE2 kernels, ``BLENSOR_RT_NO_AVX=1``. Exits 0 and prints ``ok`` and the kernel
that ran when every check holds; an assertion error or a sanitizer report otherwise. No Blender needed.
"""
from __future__ import annotations

import numpy as np

from blensor_addon.raycast import MeshData, SceneGeometry
from blensor_addon.raycast.native import NativeBackend, kernel

NAN, INF = float("nan"), float("inf")


def quad(z):
    v = np.array([[-5, -5, z], [5, -5, z], [5, 5, z], [-5, 5, z]], np.float32)
    return MeshData(v, np.array([[0, 1, 2], [0, 2, 3]]))


def box():
    v = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], np.float32)
    f = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
         (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    return MeshData(v, np.array(f))


def translate(x, y, z, scale=(1.0, 1.0, 1.0)):
    m = np.diag([*scale, 1.0])
    m[:3, 3] = (x, y, z)
    return m


def main() -> None:
    rng = np.random.default_rng(3)
    nan_mesh = MeshData(np.array([[NAN, 0, 0], [1, 0, -20], [0, 1, -20], [INF, 1, 1]], np.float32),
                        np.array([[0, 1, 2], [1, 2, 3], [1, 1, 2]]))  # every triangle bad or degenerate
    degenerate = MeshData(np.zeros((3, 3), np.float32), np.array([[0, 1, 2]]))
    empty = MeshData(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32))
    huge = MeshData(np.array([[-3e38, -3e38, -40], [3e38, -3e38, -40], [0, 3e38, -40]], np.float32),
                    np.array([[0, 1, 2]]))
    meshes = [quad(-10.0), box(), nan_mesh, degenerate, empty, huge]
    inst_mesh, mats = [0], [np.eye(4)]
    # a box squashed flat (scale 0 on x) at x = 2: the rays along -x must hit its plane
    inst_mesh.append(1)
    mats.append(translate(2.0, 0.0, 0.0, (0.0, 1.0, 1.0)))
    for bad in ([NAN, 0, 0], [INF, 0, 0], [0, -INF, 0]):  # non-finite translations
        inst_mesh.append(1)
        mats.append(translate(*bad))
    nan_rot = np.eye(4)
    nan_rot[0, 1] = NAN
    inst_mesh += [1, 2, 3, 4, 5]  # instances 5..9; 9 (a triangle 6e38 m wide) is hittable
    mats += [nan_rot, np.eye(4), np.eye(4), np.eye(4), np.eye(4)]
    inst_mesh += [1] * 200  # many instances with NaN translations (stack overflow before)
    mats += [translate(NAN, i, 0) for i in range(200)]
    be = NativeBackend(threads=2)
    be.set_geometry(SceneGeometry(meshes, np.array(inst_mesh), np.array(mats)))

    o = np.zeros((10, 3))
    d = np.tile([0.0, 0.0, -1.0], (10, 1))
    o[1] = [NAN, 0, 0]
    o[2] = [0, INF, 0]
    d[3] = [NAN, 0, -1]
    d[4] = [0, 0, 0]
    d[5] = [INF, 0, -1]
    o[6], d[6] = [5.0, 0.0, 0.0], [-1.0, 0.0, 0.0]  # the flat box at x = 2
    o[7], d[7] = [0.3, 0.2, 0.0], [0.0, 0.0, -1.0]
    tmax = np.full(10, 100.0, np.float32)
    tmax[8] = NAN
    tmax[9] = -1.0
    h = be.intersect(o, d, tmax)
    assert h.t[0] == np.float32(10.0) and h.instance[0] == 0, (h.t[0], h.instance[0])
    assert h.t[7] == np.float32(10.0) and h.instance[7] == 0
    assert abs(h.t[6] - 3.0) < 1e-5 and h.instance[6] == 1, (h.t[6], h.instance[6])
    for i in (1, 2, 3, 4, 5, 8, 9):
        assert h.instance[i] == -1 and h.primitive[i] == -1 and np.isinf(h.t[i]), (i, h.t[i], h.instance[i])
    # scalar tmax of every kind
    for tm in (NAN, -5.0, 0.0, INF):
        hh = be.intersect(o[:1], d[:1], tm)
        assert (hh.instance[0] == 0) == (tm == INF), tm
    # random rays, some with NaN components, never crash and never hit a bad instance
    ro = rng.uniform(-10, 10, (20000, 3))
    rd = rng.normal(size=(20000, 3))
    rd /= np.linalg.norm(rd, axis=1, keepdims=True)
    ro[::7, 0] = NAN
    rd[::11, 2] = NAN
    hh = be.intersect(ro, rd, 1e30)
    bad = np.isnan(ro).any(1) | np.isnan(rd).any(1)
    assert (hh.instance[bad] == -1).all()
    assert set(np.unique(hh.instance[~bad]).tolist()) == {-1, 0, 1, 9}, np.unique(hh.instance)
    # shapes are checked before any call
    for args in ((o, d[:5], 10.0), (o[:, :2], d[:, :2], 10.0), (o, d, np.ones(3)), (o.ravel(), d.ravel(), 1.0)):
        try:
            be.intersect(*args)
        except ValueError:
            continue
        raise AssertionError(f"no ValueError for shapes {[np.shape(a) for a in args]}")
    for geo in (SceneGeometry([quad(-1.0)], [1], np.eye(4)[None]),):
        try:
            be.set_geometry(geo)
        except ValueError:
            continue
        raise AssertionError("no ValueError for an instance of a missing mesh")
    # empty scene, empty batch
    be.set_geometry(SceneGeometry([], np.zeros(0, np.int32), np.zeros((0, 4, 4))))
    assert be.intersect(o, d, 10.0).instance.tolist() == [-1] * 10
    assert be.intersect(np.zeros((0, 3)), np.zeros((0, 3)), 10.0).t.shape == (0,)
    be.close()
    print("ok", kernel())  # the kernel that ran: the caller checks it is the one it meant


if __name__ == "__main__":
    main()
