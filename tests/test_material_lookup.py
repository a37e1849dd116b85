"""MaterialTable.lookup's table of rows per (mesh, slots) (for speed)
gives the rows of the per-hit lookup through the slots, and the glass tracer's one
lookup per hit (``trace(..., material=)``) gives the rows of a lookup after it."""
import numpy as np

from blensor_addon.core.materials import MaterialTable


def _table(rng, n_inst=60):
    n_mesh = 5
    ntri = rng.integers(1, 40, n_mesh)
    tri_off = np.zeros(n_mesh + 1, np.int64)
    tri_off[1:] = np.cumsum(ntri)
    # slot indices per triangle, some beyond the instance's slots (clipped) and negative
    tri_mat = rng.integers(-1, 5, int(tri_off[-1])).astype(np.int32)
    inst_mesh = rng.integers(0, n_mesh, n_inst).astype(np.int32)
    nslots = rng.integers(0, 4, n_inst)  # 0: no slots, material 0
    slot_off = np.zeros(n_inst + 1, np.int64)
    slot_off[1:] = np.cumsum(nslots)
    slot_mat = rng.integers(0, 7, int(slot_off[-1])).astype(np.int32)
    slot_mat[: min(6, slot_mat.size)] = 3  # instances sharing (mesh, slots)
    m = 7
    return MaterialTable(reflectivity=np.linspace(0.1, 0.7, m, dtype=np.float32), mirror=np.zeros(m, bool),
                         color=np.zeros((m, 3), np.uint8), names=[f"m{i}" for i in range(m)],
                         mesh_tri_offset=tri_off, tri_material=tri_mat, inst_mesh=inst_mesh,
                         inst_slot_offset=slot_off, slot_material=slot_mat), ntri


def _per_hit(t, instance, primitive):
    """The lookup through the slots, hit by hit (the code before the table)."""
    out = np.zeros(instance.shape, np.int32)
    for k, (i, p) in enumerate(zip(instance.tolist(), primitive.tolist())):
        if i < 0:
            continue
        m = int(t.inst_mesh[i])
        s0, s1 = int(t.inst_slot_offset[i]), int(t.inst_slot_offset[i + 1])
        if s1 == s0:
            continue
        slot = min(max(int(t.tri_material[t.mesh_tri_offset[m] + p]), 0), s1 - s0 - 1)
        out[k] = t.slot_material[s0 + slot]
    return out


def test_lookup_table_matches_per_hit_lookup():
    rng = np.random.default_rng(5)
    for n_inst in (1, 60):
        t, ntri = _table(rng, n_inst)
        inst = rng.integers(-1, n_inst, 3000).astype(np.int32)
        prim = (rng.random(3000) * ntri[t.inst_mesh[np.maximum(inst, 0)]]).astype(np.int32)
        prim[inst < 0] = -1  # the native kernel's miss
        want = _per_hit(t, inst, prim)
        assert t._row_table() is not None  # the table path is the one tested
        got = t.lookup(inst, prim)
        assert got.dtype == np.int32 and np.array_equal(got, want)
        assert n_inst == 1 or len(set(want[inst >= 0].tolist())) > 2  # rows differ: a real test
        # above the instance limit: the per-hit path, the same rows
        t3 = MaterialTable(**{k: getattr(t, k) for k in ("reflectivity", "mirror", "color", "names",
                                                         "mesh_tri_offset", "tri_material", "inst_mesh",
                                                         "inst_slot_offset", "slot_material")})
        t3.__dict__["_rows_table"] = None  # as with more than ROW_TABLE_MAX_INSTANCES
        assert np.array_equal(t3.lookup(inst, prim), want)
        assert np.array_equal(t.lookup(inst[:0], prim[:0]), want[:0])
        allmiss = np.full(5, -1, np.int32)
        assert np.array_equal(t.lookup(allmiss, allmiss), np.zeros(5, np.int32))
