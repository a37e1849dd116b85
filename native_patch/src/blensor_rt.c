/*
 * blensor_rt: two-level BVH batch ray caster.  See blensor_rt.h for the API.
 *
 * Build: binned SAH (Wald, "On fast Construction of SAH-based Bounding Volume
 * Hierarchies", RT 2007) over axis-aligned boxes; the same builder serves the
 * triangles of a mesh and the instances of a scene. The binary tree is collapsed into
 * BW-wide nodes; mesh leaves hold up to MESH_LEAF triangles as packets of 4.
 * Traversal (traverse.inc.h, compiled for SSE2 and for AVX, picked at run time): stack
 * based, nearest child first, robust slab test with the conservative 1 + 2 gamma(3)
 * widening of Ize, "Robust BVH Ray Traversal", JCGT 2(2), 2013.
 * Triangles: watertight test of Woop, Benthin, Wald, JCGT 2(1), 2013 (double precision
 * retry on zero edge functions); the distance of an accepted hit is then taken from the
 * triangle plane in double precision.
 */
#define _POSIX_C_SOURCE 200809L
#define _DARWIN_C_SOURCE /* sysconf(_SC_NPROCESSORS_ONLN) on macOS */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE (Linux) */
#include "blensor_rt.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
/* Threads: pthreads, or Win32 threads on Windows (no pthreads there). */
#if defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <malloc.h> /* _aligned_malloc */
#else
#include <pthread.h>
#include <sched.h> /* sched_yield */
#include <sys/mman.h> /* madvise */
#include <unistd.h>
#endif
/* Compiler builtins with portable versions for MSVC (clang and GCC have them). */
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define BRT_FETCH_ADD(p, v) _InterlockedExchangeAdd64((volatile long long *)(p), (long long)(v))
#define BRT_FETCH_ADD_SYNC(p, v) BRT_FETCH_ADD(p, v) /* interlocked: a full barrier */
#define BRT_LOAD_ACQ(p) _InterlockedCompareExchange64((volatile long long *)(p), 0, 0)
#define BRT_STORE_REL(p, v) _InterlockedExchange64((volatile long long *)(p), (long long)(v))
/* compare and swap: *p = v if *p == *expected (1), else *expected = *p (0) */
static __inline int brt_cas64(int64_t *p, int64_t *expected, int64_t v) {
    const int64_t old = _InterlockedCompareExchange64((volatile long long *)p, v, *expected);
    if (old == *expected) return 1;
    *expected = old;
    return 0;
}
#define BRT_CAS(p, expected, v) brt_cas64((p), (expected), (v))
static __inline int brt_ctz(unsigned x) { unsigned long i; _BitScanForward(&i, x); return (int)i; }
#define BRT_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#else
#define BRT_FETCH_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
/* the barrier of the reordered cast (order_barrier): a phase's writes are seen after it */
#define BRT_FETCH_ADD_SYNC(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#define BRT_LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define BRT_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define BRT_CAS(p, expected, v) __atomic_compare_exchange_n((p), (expected), (v), 0, __ATOMIC_RELAXED, \
                                                            __ATOMIC_RELAXED)
#define BRT_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define brt_ctz(x) __builtin_ctz(x)
#endif
/* BRT_SIMD: SSE2 kernels (every x86-64); otherwise portable C (arm64, or -DBRT_NO_SIMD,
 * which the tests use to check the portable path). BRT_HAVE_AVX: also an AVX copy of
 * the traversal, chosen at run time (GCC on x86-64). */
#if defined(__SSE2__) && !defined(BRT_NO_SIMD)
#define BRT_SIMD 1
#include <emmintrin.h>
#endif
#if defined(BRT_SIMD) && defined(__x86_64__) && defined(__GNUC__) /* GCC and Clang (zig cc) */
#define BRT_HAVE_AVX 1
#include <immintrin.h>
#include <cpuid.h>
#endif

#define NBINS 16
#define BIN_BITS 4 /* bits of a bin index (NBINS <= 1 << BIN_BITS): prim_t.pad keeps three */
#define BIN_MASK ((1 << BIN_BITS) - 1)
typedef char brt_bins_fit_in_pad[(3 * BIN_BITS <= 31 && NBINS <= (1 << BIN_BITS)) ? 1 : -1];
#define BOX_WIDEN 1.0000004f /* 1 + 2 gamma(3) for float32 (Ize 2013) */
#define STACK_SIZE 1024 /* at most BW entries per level of a tree of depth <= MAX_DEPTH */
#define MAX_DEPTH 100 /* deeper tasks become leaves, so a traversal stack of STACK_SIZE never overflows */

typedef struct {
    float bmin[3];
    int32_t first; /* leaf: first primitive; inner: index of left child (right = left + 1) */
    float bmax[3];
    int32_t count; /* leaf: number of primitives (> 0); inner: 0 */
} node_t;

/* Wide node (BW children) collapsed from the binary tree: child bounds in SoA layout so
 * one slab test covers all children (8 lanes in AVX, two 4-lane halves in SSE2). 256
 * bytes, and node arrays start on a 64-byte boundary, so no bound load of the slab test
 * straddles two cache lines. Empty lanes (past the node's children) have count -1 and
 * the inverted infinite box [+inf, -inf], which no finite ray enters: every slab test
 * gives t0 = +inf > t1 = -inf there. */
#define BW 8 /* branching width of the collapsed tree (a multiple of 4) */
/* Triangles a mesh leaf may hold without a split: a leaf is tested as packets of four
 * (tri4_hit, a few SIMD operations each), far cheaper than the wide-node visits a deeper
 * tree costs. 16 measured best on the benchmark terrain (472k triangles), interleaved
 * A/B against 4: HDL-64E single-thread cast 29 -> 26.5-27.5 ms, 3e5 random rays 122-141
 * -> 85-100 ms, build 61 -> 41 ms; 24 and 32 were no better, 48 slower. */
#define MESH_LEAF 16

typedef struct {
    float bmin[3][BW];
    float bmax[3][BW];
    int32_t child[BW]; /* inner: node index; leaf: first primitive */
    int32_t count[BW]; /* leaf: primitives (> 0); inner: 0; empty lane: -1 */
} wnode_t;

#define NODE_ALIGN 64
#define HUGE_PAGE ((size_t)2 << 20)

/* size bytes aligned to NODE_ALIGN (free with big_free). On Linux, arrays of 2 MiB or
 * more start on a 2 MiB boundary and are marked for transparent huge pages (madvise;
 * unless BLENSOR_RT_NO_HUGEPAGES is set): the trees, triangle packets and the scratch of
 * reordered casts, which scattered rays reach all over, then miss the TLB far less
 * (issue 24: glibc's malloc.hugetlb tunable gave 4M random rays +11% at 16 threads on
 * the lent Xeon). Where the system gives no huge pages, nothing changes. */
static void *big_alloc(size_t size) {
    if (size == 0) size = 1;
#if defined(_WIN32)
    return _aligned_malloc(size, NODE_ALIGN);
#else
    void *p = NULL;
#if defined(MADV_HUGEPAGE)
    if (size >= HUGE_PAGE && !getenv("BLENSOR_RT_NO_HUGEPAGES")) {
        if (posix_memalign(&p, HUGE_PAGE, size) != 0) return NULL;
        madvise(p, size, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
        return p;
    }
#endif
    return posix_memalign(&p, NODE_ALIGN, size) == 0 ? p : NULL;
#endif
}

static void big_free(void *p) {
#if defined(_WIN32)
    _aligned_free(p);
#else
    free(p);
#endif
}

/* Node arrays (free with nodes_free). */
static wnode_t *nodes_alloc(int64_t n) {
    return (wnode_t *)big_alloc((size_t)(n > 0 ? n : 1) * sizeof(wnode_t));
}

static void nodes_free(wnode_t *p) { big_free(p); }

/* A node without children: every lane empty. */
static void node_clear(wnode_t *nd) {
    for (int j = 0; j < BW; ++j) {
        for (int k = 0; k < 3; ++k) { nd->bmin[k][j] = INFINITY; nd->bmax[k][j] = -INFINITY; }
        nd->child[j] = 0;
        nd->count[j] = -1;
    }
}

typedef struct {
    wnode_t *nodes;
    int64_t n, cap;
} wtree_t;

struct brt_mesh {
    wnode_t *nodes;
    int64_t nnodes;
    float root_min[3], root_max[3];
    float *pk;      /* (npk, 3 vertices, 3 axes, 4 lanes): leaves as packets of 4 triangles */
    int32_t *pk_tri; /* (npk, 4): input triangle index of each lane (short leaves repeat the last) */
    int64_t npk;
    int64_t ntris;  /* triangles kept (finite) */
};

/* Motion of an instance over the time step (see brt_scene_create_motion), in double
 * precision, with what every evaluation needs precomputed. */
typedef struct {
    double t0[3], t1[3];   /* translation at s = 0 and 1 [m] */
    double q0[4], q1[4];   /* unit quaternions (w, x, y, z), dot(q0, q1) >= 0 */
    double u0[6], u1[6];   /* upper triangles (a b c / d e / f) of U0, U1 */
    double theta;          /* angle between q0 and q1 (half the rotation angle) */
    double inv_sin;        /* 1 / sin(theta) */
    int lerp;              /* theta < 1e-6: normalized lerp instead of slerp */
} motion_t;

typedef struct {
    const brt_mesh *mesh;
    const motion_t *mo; /* NULL: static (m, inv, nrm below); else moving */
    float m[12];    /* object to world, rows 0..2 of the 4x4 */
    float inv[12];  /* world to object */
    float nrm[9];   /* normal matrix: transpose of the inverse 3x3 */
    int identity;   /* static, m exactly the identity: rays are cast as they are (no
                     * transform, no second setup); a common case (applied transforms, meshes
                     * baked to world space), worth 2-3% of a cast in A/B runs */
} instance_t;

struct brt_scene {
    wnode_t *nodes;
    int64_t nnodes;
    instance_t *inst; /* in original order */
    int32_t *order;   /* leaf order -> original instance index */
    int64_t ninst;
    motion_t *motion; /* records of the moving instances */
};

/* ------------------------------------------------------------------ build */

typedef struct {
    const float *bmin; /* (n,3) */
    const float *bmax; /* (n,3) */
    int32_t *idx;      /* (n,) permutation being built */
    node_t *nodes;
    int64_t nnodes, cap;
    int max_leaf;
} builder_t;

static float half_area(const float *lo, const float *hi) {
    float dx = hi[0] - lo[0], dy = hi[1] - lo[1], dz = hi[2] - lo[2];
    if (dx < 0 || dy < 0 || dz < 0) return 0.0f;
    return dx * dy + dy * dz + dz * dx;
}

#if defined(BRT_SIMD)
/* half_area of the box (lo, hi) held in lanes 0-2 of two SSE registers: the same
 * products and sums in the same order, so the same float. */
static inline float half_area4(__m128 lo, __m128 hi) {
    const __m128 d = _mm_sub_ps(hi, lo); /* dx dy dz . */
    if (_mm_movemask_ps(_mm_cmplt_ps(d, _mm_setzero_ps())) & 7) return 0.0f;
    const __m128 p = _mm_mul_ps(d, _mm_shuffle_ps(d, d, _MM_SHUFFLE(3, 0, 2, 1))); /* dx*dy dy*dz dz*dx . */
    return _mm_cvtss_f32(_mm_add_ss(_mm_add_ss(p, _mm_shuffle_ps(p, p, _MM_SHUFFLE(1, 1, 1, 1))),
                                    _mm_shuffle_ps(p, p, _MM_SHUFFLE(2, 2, 2, 2))));
}
#endif

static void box_empty(float *lo, float *hi) {
    for (int k = 0; k < 3; ++k) { lo[k] = FLT_MAX; hi[k] = -FLT_MAX; }
}

/* Branch-free (compiles to minss/maxss): the build is dominated by these. */
static inline void box_grow(float *lo, float *hi, const float *plo, const float *phi) {
    for (int k = 0; k < 3; ++k) {
        lo[k] = plo[k] < lo[k] ? plo[k] : lo[k];
        hi[k] = phi[k] > hi[k] ? phi[k] : hi[k];
    }
}

static int64_t alloc_nodes(builder_t *b, int64_t n) {
    if (b->nnodes + n > b->cap) {
        int64_t cap = b->cap * 2 + n;
        node_t *p = (node_t *)realloc(b->nodes, (size_t)cap * sizeof(node_t));
        if (!p) return -1;
        b->nodes = p;
        b->cap = cap;
    }
    int64_t r = b->nnodes;
    b->nnodes += n;
    return r;
}

typedef struct { /* lo and hi each start a 16-byte group: one SSE load each */
    float lo[3];
    int32_t id;
    float hi[3];
    int32_t pad; /* the task's bins on the three axes (BIN_BITS each), set by its binning pass */
} prim_t;

typedef struct {
    int64_t node, start, end, depth;
    float clo[3], chi[3]; /* centroid bounds of the task's primitives */
} task_t;

#if !defined(BRT_SIMD)
/* Bin of a centroid coordinate; never converts NaN or an out-of-range float to int
 * (undefined in C): such values go to the first or last bin. */
static int bin_of(float c, float clo, float scale) {
    float x = (c - clo) * scale;
    if (!(x >= 1.0f)) return 0;
    if (!(x < (float)NBINS)) return NBINS - 1;
    return (int)x;
}
#endif

/* Binned SAH build over the primitive boxes (b->bmin, b->bmax), in the order b->idx;
 * on return b->idx is the leaf order and b->nodes the binary tree (node 0 = root).
 * Primitive records are moved (not indices), so every pass reads memory in order; one
 * pass bins all three axes, and the partition pass yields the children's centroid bounds. */
/* One task of the build: make it a leaf (returns 0) or split it by binned SAH into
 * children *L and *R whose two nodes are allocated in b (returns 1); BRT_E_NOMEM. */
static int process_task(builder_t *b, prim_t *prims, task_t t, task_t *L, task_t *R) {
    int64_t cnt = t.end - t.start;
    node_t *nd = &b->nodes[t.node];
    if (cnt <= b->max_leaf || t.depth >= MAX_DEPTH) {
        nd->first = (int32_t)t.start;
        nd->count = (int32_t)cnt;
        return 0;
    }
    float scale[3];
    int any_axis = 0;
    for (int a = 0; a < 3; ++a) {
        float ext = t.chi[a] - t.clo[a];
        scale[a] = ext > 0.0f ? (float)NBINS / ext : 0.0f;
        any_axis |= ext > 0.0f;
    }
    int64_t mid;
    float llo[3], lhi[3], rlo[3], rhi[3];
    /* centroid bounds of the left and right children */
    float lcl[3] = {FLT_MAX, FLT_MAX, FLT_MAX}, lch[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
    float rcl[3] = {FLT_MAX, FLT_MAX, FLT_MAX}, rch[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
    if (any_axis) {
        int64_t bcnt[3][NBINS];
        float best_cost = FLT_MAX;
        int best_axis = -1, best_split = 0;
#if defined(BRT_SIMD)
        { /* the same bins and the same SAH sweep as the portable code below, three axes
           * of a bin per instruction (SSE2); the same arithmetic in the same order, so
           * both give the same tree */
            __m128 vlo[3][NBINS], vhi[3][NBINS];
            const __m128 inf = _mm_set1_ps(FLT_MAX), ninf = _mm_set1_ps(-FLT_MAX);
            for (int a = 0; a < 3; ++a)
                for (int k = 0; k < NBINS; ++k) { bcnt[a][k] = 0; vlo[a][k] = inf; vhi[a][k] = ninf; }
            const __m128 clo = _mm_setr_ps(t.clo[0], t.clo[1], t.clo[2], 0.0f);
            const __m128 sc = _mm_setr_ps(scale[0], scale[1], scale[2], 0.0f);
            const __m128 half = _mm_set1_ps(0.5f), zero = _mm_setzero_ps(), top = _mm_set1_ps((float)(NBINS - 1));
            /* lane 3 of each load is the id (or the padding): zeroed, so no arithmetic sees
             * an integer's bits as a subnormal or NaN float (slow on some CPUs) */
            const __m128 xyz = _mm_castsi128_ps(_mm_setr_epi32(-1, -1, -1, 0));
            for (int64_t i = t.start; i < t.end; ++i) {
                const __m128 lo = _mm_and_ps(_mm_loadu_ps(prims[i].lo), xyz);
                const __m128 hi = _mm_and_ps(_mm_loadu_ps(prims[i].hi), xyz);
                const __m128 x = _mm_mul_ps(_mm_sub_ps(_mm_mul_ps(half, _mm_add_ps(lo, hi)), clo), sc);
                /* max(x, 0) gives 0 for NaN (second operand), as bin_of does */
                int32_t bi[4];
                _mm_storeu_si128((__m128i *)bi, _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(x, zero), top)));
                prims[i].pad = bi[0] | bi[1] << BIN_BITS | bi[2] << 2 * BIN_BITS;
                for (int a = 0; a < 3; ++a) {
                    bcnt[a][bi[a]]++;
                    vlo[a][bi[a]] = _mm_min_ps(lo, vlo[a][bi[a]]);
                    vhi[a][bi[a]] = _mm_max_ps(hi, vhi[a][bi[a]]);
                }
            }
            for (int a = 0; a < 3; ++a) {
                if (scale[a] == 0.0f) continue;
                float rarea[NBINS];
                int64_t rcnt[NBINS];
                __m128 xlo = inf, xhi = ninf;
                int64_t acc = 0;
                for (int k = NBINS - 1; k > 0; --k) {
                    acc += bcnt[a][k];
                    if (bcnt[a][k]) { xlo = _mm_min_ps(vlo[a][k], xlo); xhi = _mm_max_ps(vhi[a][k], xhi); }
                    rarea[k] = half_area4(xlo, xhi);
                    rcnt[k] = acc;
                }
                xlo = inf;
                xhi = ninf;
                acc = 0;
                for (int k = 0; k < NBINS - 1; ++k) {
                    acc += bcnt[a][k];
                    if (bcnt[a][k]) { xlo = _mm_min_ps(vlo[a][k], xlo); xhi = _mm_max_ps(vhi[a][k], xhi); }
                    if (acc == 0 || rcnt[k + 1] == 0) continue;
                    float cost = half_area4(xlo, xhi) * (float)acc + rarea[k + 1] * (float)rcnt[k + 1];
                    if (cost < best_cost) { best_cost = cost; best_axis = a; best_split = k; }
                }
            }
            if (best_axis >= 0) { /* the children's boxes: the bins on either side of the split */
                __m128 l0 = inf, l1 = ninf, r0 = inf, r1 = ninf;
                for (int k = 0; k < NBINS; ++k) {
                    if (!bcnt[best_axis][k]) continue;
                    if (k <= best_split) {
                        l0 = _mm_min_ps(vlo[best_axis][k], l0);
                        l1 = _mm_max_ps(vhi[best_axis][k], l1);
                    } else {
                        r0 = _mm_min_ps(vlo[best_axis][k], r0);
                        r1 = _mm_max_ps(vhi[best_axis][k], r1);
                    }
                }
                float v[4];
                _mm_storeu_ps(v, l0); memcpy(llo, v, sizeof llo);
                _mm_storeu_ps(v, l1); memcpy(lhi, v, sizeof lhi);
                _mm_storeu_ps(v, r0); memcpy(rlo, v, sizeof rlo);
                _mm_storeu_ps(v, r1); memcpy(rhi, v, sizeof rhi);
            }
        }
#else
        float blo[3][NBINS][3], bhi[3][NBINS][3];
        for (int a = 0; a < 3; ++a)
            for (int k = 0; k < NBINS; ++k) { bcnt[a][k] = 0; box_empty(blo[a][k], bhi[a][k]); }
        for (int64_t i = t.start; i < t.end; ++i) {
            prim_t *q = &prims[i];
            q->pad = 0;
            for (int a = 0; a < 3; ++a) {
                int bi = bin_of(0.5f * (q->lo[a] + q->hi[a]), t.clo[a], scale[a]);
                q->pad |= bi << a * BIN_BITS;
                bcnt[a][bi]++;
                box_grow(blo[a][bi], bhi[a][bi], q->lo, q->hi);
            }
        }
        for (int a = 0; a < 3; ++a) {
            if (scale[a] == 0.0f) continue;
            float rarea[NBINS];
            int64_t rcnt[NBINS];
            float xlo[3], xhi[3];
            box_empty(xlo, xhi);
            int64_t acc = 0;
            for (int k = NBINS - 1; k > 0; --k) {
                acc += bcnt[a][k];
                if (bcnt[a][k]) box_grow(xlo, xhi, blo[a][k], bhi[a][k]);
                rarea[k] = half_area(xlo, xhi);
                rcnt[k] = acc;
            }
            box_empty(xlo, xhi);
            acc = 0;
            for (int k = 0; k < NBINS - 1; ++k) {
                acc += bcnt[a][k];
                if (bcnt[a][k]) box_grow(xlo, xhi, blo[a][k], bhi[a][k]);
                if (acc == 0 || rcnt[k + 1] == 0) continue;
                float cost = half_area(xlo, xhi) * (float)acc + rarea[k + 1] * (float)rcnt[k + 1];
                if (cost < best_cost) { best_cost = cost; best_axis = a; best_split = k; }
            }
        }
        if (best_axis >= 0) { /* the children's boxes: the bins on either side of the split */
            box_empty(llo, lhi);
            box_empty(rlo, rhi);
            for (int k = 0; k < NBINS; ++k) {
                if (!bcnt[best_axis][k]) continue;
                if (k <= best_split) box_grow(llo, lhi, blo[best_axis][k], bhi[best_axis][k]);
                else box_grow(rlo, rhi, blo[best_axis][k], bhi[best_axis][k]);
            }
        }
#endif
        if (best_axis < 0) goto median; /* cannot happen with a positive extent */
        float parent_area = half_area(nd->bmin, nd->bmax);
        float split_cost = 0.5f + (parent_area > 0 ? best_cost / parent_area : (float)cnt);
        if (split_cost >= (float)cnt && cnt <= 4) {
            nd->first = (int32_t)t.start;
            nd->count = (int32_t)cnt;
            return 0;
        }
        /* partition by the bins the binning pass stored in pad; each primitive's
         * centroid grows the centroid bounds of the side it goes to */
        const int shift = BIN_BITS * best_axis;
        int64_t i = t.start, j = t.end - 1;
#if defined(BRT_SIMD)
        {
            const __m128 half = _mm_set1_ps(0.5f);
            const __m128 xyz = _mm_castsi128_ps(_mm_setr_epi32(-1, -1, -1, 0)); /* as in the binning */
            __m128 l0 = _mm_set1_ps(FLT_MAX), l1 = _mm_set1_ps(-FLT_MAX), r0 = l0, r1 = l1;
            while (i <= j) {
                const __m128 c = _mm_mul_ps(half, _mm_add_ps(_mm_and_ps(_mm_loadu_ps(prims[i].lo), xyz),
                                                             _mm_and_ps(_mm_loadu_ps(prims[i].hi), xyz)));
                if (((prims[i].pad >> shift) & BIN_MASK) <= best_split) {
                    l0 = _mm_min_ps(c, l0);
                    l1 = _mm_max_ps(c, l1);
                    ++i;
                } else {
                    r0 = _mm_min_ps(c, r0);
                    r1 = _mm_max_ps(c, r1);
                    prim_t tmp = prims[i];
                    prims[i] = prims[j];
                    prims[j] = tmp;
                    --j;
                }
            }
            float v[4]; /* lane 3 (id + pad bits) is not kept */
            _mm_storeu_ps(v, l0); memcpy(lcl, v, sizeof lcl);
            _mm_storeu_ps(v, l1); memcpy(lch, v, sizeof lch);
            _mm_storeu_ps(v, r0); memcpy(rcl, v, sizeof rcl);
            _mm_storeu_ps(v, r1); memcpy(rch, v, sizeof rch);
        }
#else
        while (i <= j) {
            float c[3];
            for (int k = 0; k < 3; ++k) c[k] = 0.5f * (prims[i].lo[k] + prims[i].hi[k]);
            if (((prims[i].pad >> shift) & BIN_MASK) <= best_split) {
                box_grow(lcl, lch, c, c);
                ++i;
            } else {
                box_grow(rcl, rch, c, c);
                prim_t tmp = prims[i];
                prims[i] = prims[j];
                prims[j] = tmp;
                --j;
            }
        }
#endif
        mid = i;
    } else {
    median: /* all centroids coincide: split by position so leaves stay small */
        mid = t.start + cnt / 2;
        box_empty(llo, lhi);
        box_empty(rlo, rhi);
        for (int64_t i = t.start; i < t.end; ++i) {
            float c[3];
            for (int k = 0; k < 3; ++k) c[k] = 0.5f * (prims[i].lo[k] + prims[i].hi[k]);
            if (i < mid) {
                box_grow(llo, lhi, prims[i].lo, prims[i].hi);
                box_grow(lcl, lch, c, c);
            } else {
                box_grow(rlo, rhi, prims[i].lo, prims[i].hi);
                box_grow(rcl, rch, c, c);
            }
        }
    }
    int64_t left = alloc_nodes(b, 2);
    if (left < 0) return BRT_E_NOMEM;
    nd = &b->nodes[t.node]; /* realloc may have moved it */
    nd->first = (int32_t)left;
    nd->count = 0;
    memcpy(b->nodes[left].bmin, llo, sizeof llo);
    memcpy(b->nodes[left].bmax, lhi, sizeof lhi);
    memcpy(b->nodes[left + 1].bmin, rlo, sizeof rlo);
    memcpy(b->nodes[left + 1].bmax, rhi, sizeof rhi);
    *L = (task_t){left, t.start, mid, t.depth + 1, {lcl[0], lcl[1], lcl[2]}, {lch[0], lch[1], lch[2]}};
    *R = (task_t){left + 1, mid, t.end, t.depth + 1, {rcl[0], rcl[1], rcl[2]}, {rch[0], rch[1], rch[2]}};
    return 1;
}

/* Run tasks from ``root`` until every one is a leaf (depth first, left child first). */
static int build_from(builder_t *b, prim_t *prims, task_t root) {
    int64_t sp = 0, scap = 128;
    task_t *stack = (task_t *)malloc(sizeof(task_t) * (size_t)scap);
    if (!stack) return BRT_E_NOMEM;
    stack[sp++] = root;
    while (sp > 0) {
        task_t t = stack[--sp], L, R;
        int rc = process_task(b, prims, t, &L, &R);
        if (rc < 0) { free(stack); return rc; }
        if (rc == 0) continue;
        if (sp + 2 > scap) {
            scap *= 2;
            task_t *s2 = (task_t *)realloc(stack, sizeof(task_t) * (size_t)scap);
            if (!s2) { free(stack); return BRT_E_NOMEM; }
            stack = s2;
        }
        stack[sp++] = R;
        stack[sp++] = L;
    }
    free(stack);
    return BRT_OK;
}

/* Subtree of one child of the root, built into its own node array (node 0 = its root). */
typedef struct {
    builder_t sub;
    prim_t *prims;
    task_t task;
    int rc;
} subtree_job_t;

static int online_cpus(void) {
#if defined(_WIN32)
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return (int)si.dwNumberOfProcessors;
#else
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#endif
}

typedef void (*pair_fn)(void *);
typedef struct {
    pair_fn fn;
    void *arg;
} pair_call_t;

#if defined(_WIN32)
static DWORD WINAPI pair_thread(LPVOID p) { ((pair_call_t *)p)->fn(((pair_call_t *)p)->arg); return 0; }
#else
static void *pair_thread(void *p) { ((pair_call_t *)p)->fn(((pair_call_t *)p)->arg); return NULL; }
#endif

/* fn(a) on a second thread, where the machine has more than one core, while fn(b) runs
 * on this one; both have returned when this does (fn(a) runs here, after fn(b), if no
 * thread could be started). The two calls must not depend on each other. */
static void run_pair(pair_fn fn, void *a, void *b) {
    pair_call_t call = {fn, a};
    int threaded;
#if defined(_WIN32)
    HANDLE th = online_cpus() > 1 ? CreateThread(NULL, 0, pair_thread, &call, 0, NULL) : NULL;
    threaded = th != NULL;
    fn(b);
    if (threaded) { WaitForSingleObject(th, INFINITE); CloseHandle(th); }
#else
    pthread_t th;
    threaded = online_cpus() > 1 && pthread_create(&th, NULL, pair_thread, &call) == 0;
    fn(b);
    if (threaded) pthread_join(th, NULL);
#endif
    if (!threaded) fn(a);
}

static void subtree_run(void *p) {
    subtree_job_t *j = (subtree_job_t *)p;
    j->rc = build_from(&j->sub, j->prims, j->task);
}

/* Below this many primitives the tree is built in one pass; from it on, the two
 * children of the root are built as separate subtrees (on two threads where the machine
 * has two cores) and appended after the root. The tree is the one the single pass
 * builds (same splits, same child order), only numbered otherwise, and its numbering
 * depends on the input alone, not on the thread count or timing. */
#define PAR_MIN 20000
/* packets of a mesh from which packetize fills them on two threads (half each) */
#define PACKETS_PAR_MIN 8192

static int build_subtrees(builder_t *b, prim_t *prims, task_t root) {
    task_t L, R;
    int rc = process_task(b, prims, root, &L, &R);
    if (rc <= 0) return rc; /* a leaf, or out of memory */
    subtree_job_t job[2];
    task_t kids[2] = {L, R};
    for (int k = 0; k < 2; ++k) {
        int64_t cnt = kids[k].end - kids[k].start;
        job[k].sub = (builder_t){NULL, NULL, NULL, NULL, 0, 2 * cnt + 1, b->max_leaf};
        job[k].sub.nodes = (node_t *)malloc((size_t)job[k].sub.cap * sizeof(node_t));
        job[k].prims = prims;
        job[k].task = kids[k];
        job[k].task.node = 0;
        job[k].rc = BRT_E_NOMEM;
        if (job[k].sub.nodes) {
            job[k].sub.nnodes = 1;
            job[k].sub.nodes[0] = b->nodes[kids[k].node];
        }
    }
    if (job[0].sub.nodes && job[1].sub.nodes) run_pair(subtree_run, &job[1], &job[0]);
    rc = job[0].rc < 0 ? job[0].rc : job[1].rc;
    /* node i >= 1 of a subtree goes to base + i - 1; its root replaces the child node */
    for (int k = 0; k < 2 && rc == BRT_OK; ++k) {
        int64_t m = job[k].sub.nnodes - 1;
        int64_t base = alloc_nodes(b, m);
        if (base < 0) { rc = BRT_E_NOMEM; break; }
        for (int64_t i = 0; i <= m; ++i) {
            node_t nd = job[k].sub.nodes[i];
            if (nd.count == 0) nd.first = (int32_t)(base + nd.first - 1);
            b->nodes[i == 0 ? kids[k].node : base + i - 1] = nd;
        }
    }
    free(job[0].sub.nodes);
    free(job[1].sub.nodes);
    return rc;
}

static int build_bvh(builder_t *b, int64_t n) {
    b->cap = n > 0 ? 2 * n : 1;
    b->nodes = (node_t *)malloc((size_t)b->cap * sizeof(node_t));
    prim_t *prims = (prim_t *)malloc(sizeof(prim_t) * (size_t)(n > 0 ? n : 1));
    if (!b->nodes || !prims) { free(prims); return BRT_E_NOMEM; }
    b->nnodes = 0;
    alloc_nodes(b, 1);
    task_t root = {0, 0, n, 0, {FLT_MAX, FLT_MAX, FLT_MAX}, {-FLT_MAX, -FLT_MAX, -FLT_MAX}};
    float lo[3], hi[3];
    box_empty(lo, hi);
    for (int64_t i = 0; i < n; ++i) {
        int32_t p = b->idx[i];
        prim_t *q = &prims[i];
        for (int k = 0; k < 3; ++k) {
            q->lo[k] = b->bmin[3 * p + k];
            q->hi[k] = b->bmax[3 * p + k];
            float c = 0.5f * (q->lo[k] + q->hi[k]);
            root.clo[k] = c < root.clo[k] ? c : root.clo[k];
            root.chi[k] = c > root.chi[k] ? c : root.chi[k];
        }
        q->id = p;
        q->pad = 0;
        box_grow(lo, hi, q->lo, q->hi);
    }
    memcpy(b->nodes[0].bmin, lo, sizeof lo);
    memcpy(b->nodes[0].bmax, hi, sizeof hi);
    int rc = n >= PAR_MIN ? build_subtrees(b, prims, root) : build_from(b, prims, root);
    if (rc == BRT_OK)
        for (int64_t i = 0; i < n; ++i) b->idx[i] = prims[i].id;
    free(prims);
    return rc;
}


/* Collapse the binary tree under bin[bi] into wide nodes; returns the new node's
 * index or -1 on allocation failure. Children are opened largest surface area first. */
static int64_t collapse(const node_t *bin, int64_t bi, wtree_t *t) {
    if (t->n == t->cap) {
        int64_t cap = t->cap * 2 + 16;
        wnode_t *p = nodes_alloc(cap);
        if (!p) return -1;
        if (t->n) memcpy(p, t->nodes, (size_t)t->n * sizeof(wnode_t));
        nodes_free(t->nodes);
        t->nodes = p;
        t->cap = cap;
    }
    int64_t me = t->n++;
    int32_t kids[BW];
    int nk;
    if (bin[bi].count > 0) {
        kids[0] = (int32_t)bi; /* a leaf root */
        nk = 1;
    } else {
        kids[0] = bin[bi].first;
        kids[1] = bin[bi].first + 1;
        nk = 2;
        while (nk < BW) {
            int best = -1;
            float best_area = -1.0f;
            for (int j = 0; j < nk; ++j) {
                const node_t *c = &bin[kids[j]];
                if (c->count == 0) {
                    float a = half_area(c->bmin, c->bmax);
                    if (a > best_area) { best_area = a; best = j; }
                }
            }
            if (best < 0) break;
            int32_t c = kids[best];
            kids[best] = bin[c].first;
            kids[nk++] = bin[c].first + 1;
        }
    }
    int32_t child[BW], count[BW];
    for (int j = 0; j < nk; ++j) {
        const node_t *c = &bin[kids[j]];
        if (c->count > 0) {
            child[j] = c->first;
            count[j] = c->count;
        } else {
            int64_t sub = collapse(bin, kids[j], t);
            if (sub < 0) return -1;
            child[j] = (int32_t)sub;
            count[j] = 0;
        }
    }
    wnode_t *nd = &t->nodes[me]; /* after the recursion: the array may have moved */
    node_clear(nd);
    for (int j = 0; j < nk; ++j) {
        const node_t *c = &bin[kids[j]];
        for (int k = 0; k < 3; ++k) {
            nd->bmin[k][j] = c->bmin[k];
            nd->bmax[k][j] = c->bmax[k];
        }
        nd->child[j] = child[j];
        nd->count[j] = count[j];
    }
    return me;
}

/* Build the binary tree, then the wide one (the binary nodes stay in b->nodes for the caller to free). */
static int build_wide_tree(builder_t *b, int64_t n, wnode_t **nodes, int64_t *nnodes) {
    int rc = build_bvh(b, n);
    if (rc != BRT_OK) { free(b->nodes); b->nodes = NULL; return rc; }
    wtree_t t = {NULL, 0, 0};
    if (n == 0) { /* no primitives: one node without children */
        t.nodes = nodes_alloc(1);
        if (!t.nodes) { free(b->nodes); b->nodes = NULL; return BRT_E_NOMEM; }
        node_clear(t.nodes);
        *nodes = t.nodes;
        *nnodes = 1;
        return BRT_OK;
    }
    if (collapse(b->nodes, 0, &t) < 0) { nodes_free(t.nodes); free(b->nodes); b->nodes = NULL; return BRT_E_NOMEM; }
    *nodes = t.nodes;
    *nnodes = t.n;
    return BRT_OK;
}

/* Packets of the nodes [n0, n1) of a mesh tree, the first one numbered q0 (see packetize). */
typedef struct {
    brt_mesh *m;
    const float *verts;
    const int32_t *tris, *order;
    int64_t n0, n1, q0;
} packet_job_t;

static void packetize_nodes(void *p) {
    const packet_job_t *jb = (const packet_job_t *)p;
    brt_mesh *m = jb->m;
    int64_t q = jb->q0;
    for (int64_t i = jb->n0; i < jb->n1; ++i) {
        wnode_t *n = &m->nodes[i];
        for (int j = 0; j < BW; ++j) {
            if (n->count[j] <= 0) continue;
            int32_t first = n->child[j], count = n->count[j], np = (count + 3) / 4;
            for (int32_t pk = 0; pk < np; ++pk, ++q) {
                for (int lane = 0; lane < 4; ++lane) {
                    int32_t k = 4 * pk + lane < count ? 4 * pk + lane : count - 1;
                    int32_t tri = jb->order[first + k]; /* leaf order -> input triangle */
                    m->pk_tri[4 * q + lane] = tri;
                    for (int v = 0; v < 3; ++v)
                        for (int a = 0; a < 3; ++a)
                            m->pk[36 * q + (3 * v + a) * 4 + lane] =
                                jb->verts[3 * (int64_t)jb->tris[3 * (int64_t)tri + v] + a];
                }
            }
            n->child[j] = (int32_t)(q - np);
            n->count[j] = np;
        }
    }
}

/* Re-point every leaf of a mesh tree at packets of 4 triangles (SoA), so one SIMD test
 * covers four triangles of a leaf. Packets are numbered in node order; the nodes are
 * cut in two halves of near-equal packet counts, filled on two threads (the gather of
 * the vertices is memory bound). The result does not depend on the threads. */
static int packetize(brt_mesh *m, const float *verts, const int32_t *tris, const int32_t *order) {
    int64_t npk = 0;
    for (int64_t i = 0; i < m->nnodes; ++i)
        for (int j = 0; j < BW; ++j)
            if (m->nodes[i].count[j] > 0) npk += (m->nodes[i].count[j] + 3) / 4;
    m->pk = (float *)big_alloc(sizeof(float) * 36 * (size_t)(npk + 1));
    m->pk_tri = (int32_t *)big_alloc(sizeof(int32_t) * 4 * (size_t)(npk + 1));
    if (!m->pk || !m->pk_tri) return BRT_E_NOMEM;
    packet_job_t half[2] = {{m, verts, tris, order, 0, m->nnodes, 0},
                            {m, verts, tris, order, m->nnodes, m->nnodes, npk}};
    if (npk >= 2 * PACKETS_PAR_MIN) { /* the first node at which half the packets are numbered */
        int64_t q = 0, i = 0;
        for (; i < m->nnodes && 2 * q < npk; ++i)
            for (int j = 0; j < BW; ++j)
                if (m->nodes[i].count[j] > 0) q += (m->nodes[i].count[j] + 3) / 4;
        half[0].n1 = half[1].n0 = i;
        half[1].q0 = q;
        run_pair(packetize_nodes, &half[1], &half[0]);
    } else {
        packetize_nodes(&half[0]);
    }
    m->npk = npk;
    return BRT_OK;
}

BRT_API int brt_api_version(void) { return BRT_API_VERSION; }

/* ---------------------------------------------------------------- crash message */
#if defined(_WIN32)
BRT_API int brt_crash_message(const char *before, const char *after, int code) {
    (void)before; (void)after; (void)code;
    return -4;
}
#else
#include <signal.h>
#include <fcntl.h>
#define CRASH_NSIG 5
static const int crash_sigs[CRASH_NSIG] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static const char *const crash_names[CRASH_NSIG] = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"};
static struct sigaction crash_old[CRASH_NSIG];
static char crash_text[2048];
static size_t crash_before, crash_after;
static int crash_code, crash_set, crash_fd = -1;

static void crash_write(const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(crash_fd, p, n);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void crash_handler(int sig) {
    crash_write(crash_text, crash_before);
    for (int i = 0; i < CRASH_NSIG; i++)
        if (crash_sigs[i] == sig) crash_write(crash_names[i], strlen(crash_names[i]));
    crash_write(crash_text + crash_before, crash_after);
    _exit(crash_code);
}

BRT_API int brt_crash_message(const char *before, const char *after, int code) {
    if (!before && !after) {
        if (crash_set)
            for (int i = 0; i < CRASH_NSIG; i++) sigaction(crash_sigs[i], &crash_old[i], NULL);
        crash_set = 0;
        if (crash_fd >= 0) close(crash_fd);
        crash_fd = -1;
        return BRT_OK;
    }
    if (!before || !after) return BRT_E_ARG;
    size_t nb = strlen(before), na = strlen(after);
    if (nb + na >= sizeof crash_text) return BRT_E_ARG;
    if (crash_fd < 0) {
        /* the stderr of now: the caller may point fd 2 elsewhere while Blender reads (its
         * reader prints noise there on a refused file); the message goes to the real one */
        crash_fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
        if (crash_fd < 0) return BRT_E_ARG;
    }
    memcpy(crash_text, before, nb);
    memcpy(crash_text + nb, after, na);
    crash_before = nb;
    crash_after = na;
    crash_code = code;
    if (!crash_set) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = crash_handler;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        for (int i = 0; i < CRASH_NSIG; i++) sigaction(crash_sigs[i], &sa, &crash_old[i]);
        crash_set = 1;
    }
    return BRT_OK;
}
#endif

/* ---------------------------------------------------------------- signal watchdog */
#if defined(_WIN32)
BRT_API int brt_watchdog_start(double grace_s, int code) {
    (void)grace_s; (void)code;
    return -4;
}
BRT_API void brt_watchdog_ack(void) {}
BRT_API int brt_watchdog_text(const char *before, const char *after) {
    (void)before; (void)after;
    return -4;
}
BRT_API int brt_watchdog_action(int slot, int mode, const char *path, const char *data, int64_t n) {
    (void)slot; (void)mode; (void)path; (void)data; (void)n;
    return -4;
}
#else
#include <errno.h>
#include <stdio.h>
#include <time.h>
#define WD_SLOTS 8
#define WD_PATH 4096
typedef struct { int mode; char path[WD_PATH]; char *data; int64_t n; } wd_action_t;
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static wd_action_t wd_actions[WD_SLOTS];
static char wd_before[WD_PATH], wd_after[WD_PATH];
static int wd_err = -1, wd_code = 130, wd_started;
static double wd_grace = 5.0;
static int64_t wd_sigs, wd_acked; /* __atomic: signals seen by the handler, by Python */
static int wd_last, wd_pipe[2] = {-1, -1};
static struct sigaction wd_old[2];

static double wd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wd_write(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

/* the run's stop actions, the line, the exit: the interpreter is stuck, nothing else runs */
static void wd_stop(int sig) {
    pthread_mutex_lock(&wd_mu);
    for (int i = 0; i < WD_SLOTS; i++) {
        wd_action_t *a = &wd_actions[i];
        if (a->mode == 1) {
            char tmp[WD_PATH + 32];
            snprintf(tmp, sizeof tmp, "%s.stop-%ld", a->path, (long)getpid());
            int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
            if (fd < 0) continue;
            wd_write(fd, a->data, (size_t)a->n);
            int ok = fsync(fd) == 0;
            close(fd);
            if (!ok || rename(tmp, a->path) != 0) unlink(tmp);
        } else if (a->mode == 2) {
            unlink(a->path);
        } else if (a->mode == 3) {
            rmdir(a->path);
        }
    }
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    wd_write(wd_err, wd_before, strlen(wd_before));
    wd_write(wd_err, name, strlen(name));
    wd_write(wd_err, wd_after, strlen(wd_after));
    _exit(wd_code);
}

/* in front of the interpreter's handler: count the signal and wake the thread, then chain
 * (atomics and write only: async-signal-safe) */
static void wd_handler(int sig) {
    int e = errno;
    __atomic_store_n(&wd_last, sig, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&wd_sigs, 1, __ATOMIC_SEQ_CST);
    char c = (char)sig;
    if (write(wd_pipe[1], &c, 1) < 0) { /* a full pipe: the thread is awake anyway */ }
    struct sigaction *old = &wd_old[sig == SIGTERM];
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN)
        old->sa_handler(sig);
    errno = e;
}

static void *wd_main(void *arg) {
    (void)arg;
    char buf[64];
    for (;;) {
        ssize_t r = read(wd_pipe[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return NULL;
        /* every signal counted so far must be acknowledged: Python's handler stores the
         * count it saw, and it runs after this library's handler counted its signal */
        int64_t want = __atomic_load_n(&wd_sigs, __ATOMIC_SEQ_CST);
        double end = wd_now() + wd_grace;
        while (__atomic_load_n(&wd_acked, __ATOMIC_SEQ_CST) < want) {
            if (wd_now() >= end) wd_stop(__atomic_load_n(&wd_last, __ATOMIC_SEQ_CST));
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

BRT_API int brt_watchdog_start(double grace_s, int code) {
    if (!(grace_s > 0)) return BRT_E_ARG;
    pthread_mutex_lock(&wd_mu);
    wd_grace = grace_s;
    wd_code = code;
    int rc = BRT_OK;
    if (!wd_started) {
        if (pipe(wd_pipe) != 0) {
            rc = BRT_E_NOMEM;
        } else {
            for (int i = 0; i < 2; i++) fcntl(wd_pipe[i], F_SETFD, FD_CLOEXEC);
            fcntl(wd_pipe[1], F_SETFL, fcntl(wd_pipe[1], F_GETFL) | O_NONBLOCK);
            wd_err = fcntl(2, F_DUPFD_CLOEXEC, 3);
            pthread_t th;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            sigset_t all, old;
            sigfillset(&all); /* the thread takes no signal: they stay the interpreter's */
            pthread_sigmask(SIG_SETMASK, &all, &old);
            if (pthread_create(&th, &at, wd_main, NULL) != 0) rc = BRT_E_NOMEM;
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            pthread_attr_destroy(&at);
            wd_started = rc == BRT_OK;
        }
    }
    if (rc == BRT_OK) { /* (again after the interpreter's handlers were set anew) */
        static const int sigs[2] = {SIGINT, SIGTERM};
        for (int i = 0; i < 2; i++) {
            struct sigaction cur;
            sigaction(sigs[i], NULL, &cur);
            if (cur.sa_handler == wd_handler) continue;
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = wd_handler;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = cur.sa_flags & ~(SA_SIGINFO | SA_RESETHAND);
            wd_old[i] = cur;
            sigaction(sigs[i], &sa, NULL);
        }
    }
    pthread_mutex_unlock(&wd_mu);
    return rc;
}

BRT_API void brt_watchdog_ack(void) {
    __atomic_store_n(&wd_acked, __atomic_load_n(&wd_sigs, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
}

BRT_API int brt_watchdog_text(const char *before, const char *after) {
    if (!before || !after || strlen(before) >= WD_PATH || strlen(after) >= WD_PATH) return BRT_E_ARG;
    pthread_mutex_lock(&wd_mu);
    memcpy(wd_before, before, strlen(before) + 1);
    memcpy(wd_after, after, strlen(after) + 1);
    pthread_mutex_unlock(&wd_mu);
    return BRT_OK;
}

BRT_API int brt_watchdog_action(int slot, int mode, const char *path, const char *data, int64_t n) {
    if (slot < 0 || slot >= WD_SLOTS || mode < 0 || mode > 3 || n < 0) return BRT_E_ARG;
    if (mode && (!path || strlen(path) >= WD_PATH)) return BRT_E_ARG;
    if (mode == 1 && n > 0 && !data) return BRT_E_ARG;
    char *copy = NULL;
    if (mode == 1 && n > 0) {
        copy = (char *)malloc((size_t)n);
        if (!copy) return BRT_E_NOMEM;
        memcpy(copy, data, (size_t)n);
    }
    pthread_mutex_lock(&wd_mu);
    wd_action_t *a = &wd_actions[slot];
    free(a->data);
    a->data = copy;
    a->n = mode == 1 ? n : 0;
    a->mode = mode;
    if (mode) memcpy(a->path, path, strlen(path) + 1);
    pthread_mutex_unlock(&wd_mu);
    return BRT_OK;
}
#endif

#if defined(BRT_HAVE_AVX)
static int use_avx(void);
#endif

BRT_API const char *brt_kernel(void) {
#if defined(BRT_HAVE_AVX)
    if (use_avx()) return "avx";
#endif
#if defined(BRT_SIMD)
    return "sse2";
#else
    return "portable";
#endif
}

BRT_API int brt_mesh_create(const float *verts, int64_t nverts, const int32_t *tris,
                            int64_t ntris, brt_mesh **out) {
    if (!out || nverts < 0 || ntris < 0 || (nverts > 0 && !verts) || (ntris > 0 && !tris))
        return BRT_E_ARG;
    if (ntris > INT32_MAX / 2) return BRT_E_ARG;
    *out = NULL;
    for (int64_t i = 0; i < 3 * ntris; ++i)
        if (tris[i] < 0 || tris[i] >= nverts) return BRT_E_INDEX;
    brt_mesh *m = (brt_mesh *)calloc(1, sizeof(brt_mesh));
    float *bmin = (float *)malloc(sizeof(float) * 3 * (size_t)(ntris + 1));
    float *bmax = (float *)malloc(sizeof(float) * 3 * (size_t)(ntris + 1));
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(ntris + 1));
    int rc = BRT_E_NOMEM;
    if (!m || !bmin || !bmax || !idx) goto fail;
    int64_t kept = 0;
    for (int64_t i = 0; i < ntris; ++i) {
        /* 64-bit index arithmetic: 3 * index overflows int32 past ~715M vertices */
        const float *a = verts + 3 * (int64_t)tris[3 * i], *b = verts + 3 * (int64_t)tris[3 * i + 1],
                    *c = verts + 3 * (int64_t)tris[3 * i + 2];
        int finite = 1;
        for (int k = 0; k < 3; ++k) finite &= isfinite(a[k]) && isfinite(b[k]) && isfinite(c[k]);
        if (!finite) continue;
        for (int k = 0; k < 3; ++k) { /* finite here: plain compares, no libm calls, in the order
                                       * that gives glibc's fminf(a, fminf(b, c)) bits (signed zeros
                                       * too: x < y ? x : y), and the same on every platform */
            float lo = b[k] < c[k] ? b[k] : c[k], hi = b[k] > c[k] ? b[k] : c[k];
            bmin[3 * i + k] = a[k] < lo ? a[k] : lo;
            bmax[3 * i + k] = a[k] > hi ? a[k] : hi;
        }
        idx[kept++] = (int32_t)i;
    }
    builder_t b = {bmin, bmax, idx, NULL, 0, 0, MESH_LEAF};
    rc = build_wide_tree(&b, kept, &m->nodes, &m->nnodes);
    if (rc != BRT_OK) goto fail;
    memcpy(m->root_min, b.nodes[0].bmin, sizeof m->root_min);
    memcpy(m->root_max, b.nodes[0].bmax, sizeof m->root_max);
    free(b.nodes);
    m->ntris = kept;
    rc = packetize(m, verts, tris, idx);
    if (rc != BRT_OK) goto fail;
    free(bmin); free(bmax); free(idx);
    *out = m;
    return BRT_OK;
fail:
    free(bmin); free(bmax); free(idx);
    brt_mesh_free(m);
    return rc;
}

BRT_API void brt_mesh_free(brt_mesh *m) {
    if (!m) return;
    nodes_free(m->nodes);
    big_free(m->pk);
    big_free(m->pk_tri);
    free(m);
}

#define MIN_DET 1e-30 /* |det| at or below: a singular 3x3 (also raycast/motion.py MIN_DET) */

static int invert_affine(const float *m, float *inv) {
    /* m: 3x4 row-major [R | t]; inv = [R^-1 | -R^-1 t], computed in double */
    double a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], f = m[6], g = m[8], h = m[9], i = m[10];
    double A = e * i - f * h, B = -(d * i - f * g), C = d * h - e * g;
    double det = a * A + b * B + c * C;
    if (!(fabs(det) > MIN_DET) || !isfinite(det)) return 0;
    double r[9] = {A / det, -(b * i - c * h) / det, (b * f - c * e) / det,
                   B / det, (a * i - c * g) / det, -(a * f - c * d) / det,
                   C / det, -(a * h - b * g) / det, (a * e - b * d) / det};
    for (int row = 0; row < 3; ++row) {
        double tx = -(r[3 * row] * m[3] + r[3 * row + 1] * m[7] + r[3 * row + 2] * m[11]);
        for (int col = 0; col < 3; ++col) inv[4 * row + col] = (float)r[3 * row + col];
        inv[4 * row + 3] = (float)tx;
    }
    return 1;
}

/* ------------------------------------------------------------------ motion */

#define MOTION_LERP_ANGLE 1e-6 /* below this quaternion angle: normalized lerp */

/* Rotation matrix (row-major) of a quaternion (w, x, y, z) of any nonzero length. */
static void quat_matrix(const double *q, double *R) {
    double w = q[0], x = q[1], y = q[2], z = q[3];
    double s = 2.0 / (w * w + x * x + y * y + z * z);
    R[0] = 1.0 - s * (y * y + z * z); R[1] = s * (x * y - w * z);       R[2] = s * (x * z + w * y);
    R[3] = s * (x * y + w * z);       R[4] = 1.0 - s * (x * x + z * z); R[5] = s * (y * z - w * x);
    R[6] = s * (x * z - w * y);       R[7] = s * (y * z + w * x);       R[8] = 1.0 - s * (x * x + y * y);
}

/* Set up *mo from a record [t0(3), t1(3), q0(4), q1(4), U0(9), U1(9)]; 0 if it cannot
 * describe a motion (non-finite, a zero quaternion, a singular U0 or U1). */
static int motion_setup(const double *rec, motion_t *mo) {
    for (int k = 0; k < 32; ++k)
        if (!isfinite(rec[k])) return 0;
    memcpy(mo->t0, rec, 3 * sizeof(double));
    memcpy(mo->t1, rec + 3, 3 * sizeof(double));
    double n0 = 0.0, n1 = 0.0, dot = 0.0;
    for (int k = 0; k < 4; ++k) {
        n0 += rec[6 + k] * rec[6 + k];
        n1 += rec[10 + k] * rec[10 + k];
    }
    n0 = sqrt(n0);
    n1 = sqrt(n1);
    if (!(n0 > 1e-150) || !(n1 > 1e-150) || !isfinite(n0) || !isfinite(n1)) return 0;
    for (int k = 0; k < 4; ++k) {
        mo->q0[k] = rec[6 + k] / n0;
        mo->q1[k] = rec[10 + k] / n1;
        dot += mo->q0[k] * mo->q1[k];
    }
    if (dot < 0.0) { /* shortest arc */
        for (int k = 0; k < 4; ++k) mo->q1[k] = -mo->q1[k];
        dot = -dot;
    }
    mo->theta = acos(dot > 1.0 ? 1.0 : dot);
    mo->lerp = mo->theta < MOTION_LERP_ANGLE;
    mo->inv_sin = mo->lerp ? 0.0 : 1.0 / sin(mo->theta);
    static const int up[6] = {0, 1, 2, 4, 5, 8}; /* upper triangle of a row-major 3x3 */
    for (int k = 0; k < 6; ++k) {
        mo->u0[k] = rec[14 + up[k]];
        mo->u1[k] = rec[23 + up[k]];
    }
    double d0 = mo->u0[0] * mo->u0[3] * mo->u0[5], d1 = mo->u1[0] * mo->u1[3] * mo->u1[5];
    return fabs(d0) > MIN_DET && fabs(d1) > MIN_DET && isfinite(d0) && isfinite(d1);
}

/* Rotation R (row-major), factor U (upper triangle a b c d e f) and translation t at s. */
static inline void motion_parts(const motion_t *mo, double s, double *R, double *u, double *t) {
    double q[4], w0, w1;
    if (mo->lerp) {
        w0 = 1.0 - s;
        w1 = s;
    } else {
        w0 = sin((1.0 - s) * mo->theta) * mo->inv_sin;
        w1 = sin(s * mo->theta) * mo->inv_sin;
    }
    for (int k = 0; k < 4; ++k) q[k] = w0 * mo->q0[k] + w1 * mo->q1[k];
    quat_matrix(q, R); /* divides by |q|^2: the lerp needs no separate normalization */
    for (int k = 0; k < 6; ++k) u[k] = (1.0 - s) * mo->u0[k] + s * mo->u1[k];
    for (int k = 0; k < 3; ++k) t[k] = (1.0 - s) * mo->t0[k] + s * mo->t1[k];
}

/* World-to-object 3x3 W = U^-1 R^T (row-major) and translation t at s; 0 if U(s) is
 * singular. The normal matrix at s is W^T. */
static inline int motion_inverse(const motion_t *mo, double s, double *W, double *t) {
    double R[9], u[6];
    motion_parts(mo, s, R, u, t);
    const double a = u[0], b = u[1], c = u[2], d = u[3], e = u[4], f = u[5];
    const double det = a * d * f;
    if (!(fabs(det) > MIN_DET) || !isfinite(det)) return 0;
    const double ia = 1.0 / a, id = 1.0 / d, iff = 1.0 / f;
    const double ui[6] = {ia, -b * ia * id, (b * e - c * d) * ia * id * iff, id, -e * id * iff, iff};
    for (int j = 0; j < 3; ++j) { /* W[i][j] = sum_k Ui[i][k] R[j][k] */
        W[j] = ui[0] * R[3 * j] + ui[1] * R[3 * j + 1] + ui[2] * R[3 * j + 2];
        W[3 + j] = ui[3] * R[3 * j + 1] + ui[4] * R[3 * j + 2];
        W[6 + j] = ui[5] * R[3 * j + 2];
    }
    return 1;
}

/* The ray (org, dir) in the object space of a moving instance at time s: 0 (the instance
 * is not hit) if U(s) is singular or the moved ray does not fit in float. */
static inline int motion_apply(const double *W, const double *t, const float *org, const float *dir,
                               float *lorg, float *ldir);
static inline int motion_ray(const motion_t *mo, double s, const float *org, const float *dir, float *lorg,
                             float *ldir) {
    double W[9], t[3];
    if (!motion_inverse(mo, s, W, t)) return 0;
    return motion_apply(W, t, org, dir, lorg, ldir);
}

/* motion_ray with the inverse transform (W, t) of motion_inverse at hand (the rays of a
 * bundle share their time): the same arithmetic. */
static inline int motion_apply(const double *W, const double *t, const float *org, const float *dir,
                               float *lorg, float *ldir) {
    double p[3], lo[3], ld[3];
    for (int k = 0; k < 3; ++k) p[k] = (double)org[k] - t[k];
    int ok = 1;
    for (int r = 0; r < 3; ++r) {
        lo[r] = W[3 * r] * p[0] + W[3 * r + 1] * p[1] + W[3 * r + 2] * p[2];
        ld[r] = W[3 * r] * dir[0] + W[3 * r + 1] * dir[1] + W[3 * r + 2] * dir[2];
        ok &= fabs(lo[r]) <= FLT_MAX && fabs(ld[r]) <= FLT_MAX; /* also false on NaN */
    }
    if (!ok) return 0;
    for (int r = 0; r < 3; ++r) {
        lorg[r] = (float)lo[r];
        ldir[r] = (float)ld[r];
    }
    return 1;
}

static double frobenius_u(const double *u) {
    double q = 0.0;
    for (int k = 0; k < 6; ++k) q += u[k] * u[k];
    return sqrt(q);
}

/* World box of a moving instance over every s in [0, 1]; 0 if it does not fit in float.
 *
 * Bound: the mesh lies in the ball (centre c, radius r) around its root box in object
 * space, so at time s it lies within ||A(s)||_2 r <= max(|U0|_F, |U1|_F) r =: rho of
 * p(s) = R(s) U(s) c + t(s) (R orthonormal; the Frobenius norm is convex in s). p is
 * Lipschitz in s with constant L = 2 theta' Umax |c| + |U1 - U0|_F |c| + |t1 - t0|: slerp
 * turns the rotation at 2 theta rad per unit s about a fixed axis (normalized lerp, used
 * only below 1e-6 rad, at most 2 theta / cos^2(theta / 2); theta' = 1.001 theta covers
 * both). Sampling p at s_k = k / K (k = 0..K) puts every p(s) within L / (2K) of a sample,
 * so the union of the sample boxes grown by rho + L / (2K) holds the instance at every s.
 * K is chosen so that L / (2K) <= rho / 8 where that needs at most 64 samples. */
static int motion_box(const motion_t *mo, const brt_mesh *mesh, float *bmin, float *bmax) {
    double c[3], r2 = 0.0, cn2 = 0.0, du[6], dt2 = 0.0;
    for (int k = 0; k < 3; ++k) {
        c[k] = 0.5 * ((double)mesh->root_min[k] + (double)mesh->root_max[k]);
        double h = 0.5 * ((double)mesh->root_max[k] - (double)mesh->root_min[k]);
        r2 += h * h;
        cn2 += c[k] * c[k];
        dt2 += (mo->t1[k] - mo->t0[k]) * (mo->t1[k] - mo->t0[k]);
    }
    for (int k = 0; k < 6; ++k) du[k] = mo->u1[k] - mo->u0[k];
    double n0 = frobenius_u(mo->u0), n1 = frobenius_u(mo->u1);
    double umax = n0 > n1 ? n0 : n1;
    double rho = umax * sqrt(r2), cn = sqrt(cn2);
    double lip = 2.0 * 1.001 * mo->theta * umax * cn + frobenius_u(du) * cn + sqrt(dt2);
    double kk = lip / (0.25 * rho);
    int K = !(kk < 64.0) ? 64 : kk > 1.0 ? (int)ceil(kk) : 1;
    double pad = (rho + lip / (2.0 * K)) * (1.0 + 1e-9);
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int i = 0; i <= K; ++i) {
        double R[9], u[6], t[3], uc[3], p[3];
        motion_parts(mo, (double)i / K, R, u, t);
        uc[0] = u[0] * c[0] + u[1] * c[1] + u[2] * c[2];
        uc[1] = u[3] * c[1] + u[4] * c[2];
        uc[2] = u[5] * c[2];
        for (int k = 0; k < 3; ++k) {
            p[k] = R[3 * k] * uc[0] + R[3 * k + 1] * uc[1] + R[3 * k + 2] * uc[2] + t[k];
            lo[k] = p[k] < lo[k] ? p[k] : lo[k];
            hi[k] = p[k] > hi[k] ? p[k] : hi[k];
        }
    }
    for (int k = 0; k < 3; ++k) {
        double a = lo[k] - pad, b = hi[k] + pad;
        /* also false on NaN; the relative float pad below must not overflow either */
        if (!(fabs(a) < 0.5 * FLT_MAX) || !(fabs(b) < 0.5 * FLT_MAX)) return 0;
        bmin[k] = (float)a;
        bmax[k] = (float)b;
    }
    return 1;
}

BRT_API int brt_scene_create(brt_mesh *const *meshes, int64_t nmeshes, const int32_t *inst_mesh,
                             const float *inst_xform, int64_t ninst, brt_scene **out) {
    return brt_scene_create_motion(meshes, nmeshes, inst_mesh, inst_xform, NULL, NULL, ninst, out);
}

BRT_API int brt_scene_create_motion(brt_mesh *const *meshes, int64_t nmeshes, const int32_t *inst_mesh,
                                    const float *inst_xform, const double *motion, const uint8_t *moving,
                                    int64_t ninst, brt_scene **out) {
    if (!out || ninst < 0 || nmeshes < 0 || (ninst > 0 && (!meshes || !inst_mesh || !inst_xform)))
        return BRT_E_ARG;
    *out = NULL;
    for (int64_t i = 0; i < ninst; ++i)
        if (inst_mesh[i] < 0 || inst_mesh[i] >= nmeshes || !meshes[inst_mesh[i]]) return BRT_E_INDEX;
    brt_scene *s = (brt_scene *)calloc(1, sizeof(brt_scene));
    if (!s) return BRT_E_NOMEM;
    s->inst = (instance_t *)calloc((size_t)(ninst + 1), sizeof(instance_t));
    float *bmin = (float *)malloc(sizeof(float) * 3 * (size_t)(ninst + 1));
    float *bmax = (float *)malloc(sizeof(float) * 3 * (size_t)(ninst + 1));
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(ninst + 1));
    int64_t nmoving = 0;
    if (motion)
        for (int64_t i = 0; i < ninst; ++i) nmoving += !moving || moving[i];
    if (nmoving) s->motion = (motion_t *)calloc((size_t)nmoving, sizeof(motion_t));
    int rc = BRT_E_NOMEM;
    if (!s->inst || !bmin || !bmax || !idx || (nmoving && !s->motion)) goto fail;
    int64_t kept = 0, nmo = 0;
    for (int64_t i = 0; i < ninst; ++i) {
        instance_t *in = &s->inst[i];
        in->mesh = meshes[inst_mesh[i]];
        if (motion && (!moving || moving[i]) && motion_setup(motion + 32 * i, &s->motion[nmo])) {
            /* moving: placed by its record at the ray's time; the box covers the whole step */
            in->mo = &s->motion[nmo++];
            if (in->mesh->ntris == 0 || !motion_box(in->mo, in->mesh, bmin + 3 * i, bmax + 3 * i)) continue;
            for (int k = 0; k < 3; ++k) { /* float rounding, as below */
                float lo = bmin[3 * i + k], hi = bmax[3 * i + k];
                float pad = 1e-6f * fabsf(lo) + 1e-6f * fabsf(hi) + 1e-6f;
                bmin[3 * i + k] = lo - pad;
                bmax[3 * i + k] = hi + pad;
            }
            idx[kept++] = (int32_t)i;
            continue;
        }
        memcpy(in->m, inst_xform + 16 * i, 12 * sizeof(float));
        /* a non-finite or singular transform cannot be used to move rays into the mesh's
         * frame: the instance is left out (the Python layer bakes singular ones, e.g. a
         * scale of 0 on one axis, into world-space meshes beforehand) */
        int finite = 1;
        for (int k = 0; k < 12; ++k) finite &= isfinite(in->m[k]) != 0;
        if (!finite || !invert_affine(in->m, in->inv)) continue;
        static const float eye[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
        in->identity = memcmp(in->m, eye, sizeof eye) == 0;
        for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 3; ++c) in->nrm[3 * r + c] = in->inv[4 * c + r];
        if (in->mesh->ntris == 0) continue;
        const brt_mesh *mm = in->mesh;
        float lo[3], hi[3];
        box_empty(lo, hi);
        for (int corner = 0; corner < 8; ++corner) {
            float p[3] = {(corner & 1) ? mm->root_max[0] : mm->root_min[0],
                          (corner & 2) ? mm->root_max[1] : mm->root_min[1],
                          (corner & 4) ? mm->root_max[2] : mm->root_min[2]};
            float w[3];
            for (int r = 0; r < 3; ++r)
                w[r] = in->m[4 * r] * p[0] + in->m[4 * r + 1] * p[1] + in->m[4 * r + 2] * p[2] + in->m[4 * r + 3];
            box_grow(lo, hi, w, w);
        }
        /* widen by a relative epsilon: float rounding of the transformed corners */
        int box_ok = 1;
        for (int k = 0; k < 3; ++k) {
            float pad = 1e-6f * fabsf(lo[k]) + 1e-6f * fabsf(hi[k]) + 1e-6f; /* no overflow near FLT_MAX */
            bmin[3 * i + k] = fmaxf(lo[k] - pad, -FLT_MAX);
            bmax[3 * i + k] = fminf(hi[k] + pad, FLT_MAX);
            box_ok &= isfinite(lo[k]) && isfinite(hi[k]);
        }
        if (!box_ok) continue; /* transformed corners overflowed to inf: unusable */
        idx[kept++] = (int32_t)i;
    }
    builder_t b = {bmin, bmax, idx, NULL, 0, 0, 1};
    rc = build_wide_tree(&b, kept, &s->nodes, &s->nnodes);
    if (rc != BRT_OK) goto fail;
    free(b.nodes);
    s->ninst = kept;
    s->order = idx;
    free(bmin); free(bmax);
    *out = s;
    return BRT_OK;
fail:
    free(bmin); free(bmax); free(idx);
    brt_scene_free(s);
    return rc;
}

BRT_API void brt_scene_free(brt_scene *s) {
    if (!s) return;
    nodes_free(s->nodes);
    free(s->inst);
    free(s->order);
    free(s->motion);
    free(s);
}

/* -------------------------------------------------------------- traversal */

typedef struct {
#if defined(BRT_SIMD)
    __m128 org4[3], inv4[3]; /* broadcast once per ray, not per node */
    __m128 invf4[3];          /* inv * (1 + 2 gamma(3)): exit distances rounded outward */
#endif
    float org[3], dir[3], inv[3];
    float invf[3];          /* inv * (1 + 2 gamma(3)) */
    int neg[3];             /* direction component negative: enter boxes through bmax */
    int near_off[3], far_off[3]; /* byte offsets of the entry/exit planes in a wnode_t */
    int kx, ky, kz;
    float sx, sy, sz;
} ray_t;

static void ray_setup(ray_t *r) {
    for (int k = 0; k < 3; ++k) {
        r->inv[k] = 1.0f / r->dir[k];
        r->neg[k] = r->inv[k] < 0.0f;
        r->invf[k] = r->inv[k] * BOX_WIDEN;
        int lo = (int)(offsetof(wnode_t, bmin) + sizeof(float) * BW * k),
            hi = (int)(offsetof(wnode_t, bmax) + sizeof(float) * BW * k);
        r->near_off[k] = r->neg[k] ? hi : lo;
        r->far_off[k] = r->neg[k] ? lo : hi;
#if defined(BRT_SIMD)
        r->org4[k] = _mm_set1_ps(r->org[k]);
        r->inv4[k] = _mm_set1_ps(r->inv[k]);
        r->invf4[k] = _mm_set1_ps(r->inv[k] * BOX_WIDEN);
#endif
    }
    float ax = fabsf(r->dir[0]), ay = fabsf(r->dir[1]), az = fabsf(r->dir[2]);
    int kz = (ax > ay) ? (ax > az ? 0 : 2) : (ay > az ? 1 : 2);
    int kx = (kz + 1) % 3, ky = (kx + 1) % 3;
    if (r->dir[kz] < 0.0f) { int tmp = kx; kx = ky; ky = tmp; }
    r->kx = kx; r->ky = ky; r->kz = kz;
    /* shear constants from the reciprocal already at hand; every triangle of the ray sees
     * the same values, which is all watertightness needs */
    r->sz = r->inv[kz];
    r->sx = r->dir[kx] * r->sz;
    r->sy = r->dir[ky] * r->sz;
}


/* The setup of ray r whose direction equals w's (bit for bit): w's direction-derived
 * fields, r's origin. The same values as ray_setup(r) gives, without its divisions. */
static inline void ray_setup_dir_of(ray_t *r, const ray_t *w) {
    float org[3];
    memcpy(org, r->org, sizeof org);
    *r = *w;
    memcpy(r->org, org, sizeof org);
#if defined(BRT_SIMD)
    for (int k = 0; k < 3; ++k) r->org4[k] = _mm_set1_ps(org[k]);
#endif
}


typedef struct { int32_t idx, count; float t; } entry_t;


typedef struct {
    float t, b1, b2;
    int64_t slot;     /* packet * 4 + lane of the hit triangle in the instance's mesh */
    int32_t inst;     /* original instance index */
} hit_t;


/* a and b are the same direction bit for bit (NaN: no; either answer is right where it
 * only chooses between ray_setup and ray_setup_dir_of, which give the same values). */
static inline int same_dir(const float *a, const float *b) {
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && signbit(a[0]) == signbit(b[0])
           && signbit(a[1]) == signbit(b[1]) && signbit(a[2]) == signbit(b[2]);
}

/* Bundles (traverse.inc.h, cast_bundle): at most BUNDLE_MAX rays; BUNDLE_TIE is the
 * relative distance within which two triangles' hits count as a tie. */
#define BUNDLE_MAX 64
#define BUNDLE_TIE 1e-5
static int64_t bundle_recasts; /* rays of bundles cast again on their own (brt_bundle_recasts) */
BRT_API int64_t brt_bundle_recasts(void) { return BRT_FETCH_ADD(&bundle_recasts, 0); }

#if defined(BRT_SIMD)
/* The slab data of a bundle: the shared origin, the least and greatest reciprocal
 * direction (inv and inv * BOX_WIDEN) per axis over the active rays, the entry and exit
 * planes of the shared signs. */
typedef struct {
    float org[3], ilo[3], ihi[3], flo[3], fhi[3];
    int near_off[3], far_off[3];
} bray_t;

/* b from the rays rs[i] with act[i]: 0 if there are none, or their origins differ (bit
 * for bit) or the signs of their directions do. */
static int bundle_setup(bray_t *b, const ray_t *rs, const uint8_t *act, int S) {
    int first = -1;
    for (int i = 0; i < S; ++i) {
        if (!act[i]) continue;
        const ray_t *r = &rs[i];
        if (first < 0) {
            first = i;
            memcpy(b->org, r->org, sizeof b->org);
            for (int k = 0; k < 3; ++k) {
                b->ilo[k] = b->ihi[k] = r->inv[k];
                b->flo[k] = b->fhi[k] = r->invf[k];
                b->near_off[k] = r->near_off[k];
                b->far_off[k] = r->far_off[k];
            }
            continue;
        }
        if (memcmp(b->org, r->org, sizeof b->org) != 0) return 0;
        for (int k = 0; k < 3; ++k) {
            if (r->near_off[k] != b->near_off[k]) return 0;
            if (r->inv[k] < b->ilo[k]) b->ilo[k] = r->inv[k];
            if (r->inv[k] > b->ihi[k]) b->ihi[k] = r->inv[k];
            if (r->invf[k] < b->flo[k]) b->flo[k] = r->invf[k];
            if (r->invf[k] > b->fhi[k]) b->fhi[k] = r->invf[k];
        }
    }
    return first >= 0;
}
#endif

#define BRT_FN(name) name##_base
#include "traverse.inc.h"
#undef BRT_FN

#if defined(BRT_HAVE_AVX)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx")
#endif
#define BRT_AVX 1
#define BRT_FN(name) name##_avx
#include "traverse.inc.h"
#undef BRT_FN
#undef BRT_AVX
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

typedef struct {
    const brt_scene *s;
    const float *org, *dir, *tmax;
    float tmax_default;
    int64_t nrays;
    float *t_out, *ng_out, *uv_out;
    int32_t *inst_out, *prim_out;
    int64_t next; /* shared chunk counter */
    void (*cast)(const brt_scene *, const float *, const float *, float, double, hit_t *);
    const float *time; /* (nrays,) or NULL */
    int bundle;          /* rays in consecutive bundles of this many (1: none) */
    void (*cast_bundle)(const brt_scene *, const float *, const float *, const float *, double, hit_t *, int);
    /* scattered origins, cast in the order of their origins' cells (see "ray order"; rec
     * NULL: in the caller's order) */
    float grid_lo[3], grid_scale[3]; /* cell of an origin o on axis k: (o[k] - lo[k]) * scale[k] */
    float *rec;          /* (nrays, 8), 64-byte aligned: the rays in cell order (origin,
                          * direction, tmax, time), then in place their answers */
    int32_t *dest;       /* (nrays,) row of rec that holds the caller's ray i */
    uint32_t *hist;      /* (nblk, ORDER_CELLS): rays of each block per cell, then rows */
    int64_t nblk;        /* blocks of ORDER_BLOCK rays in the caller's order */
    int64_t next_blk[2], next_ans; /* shared counters of the phases (next: the cast's) */
    int64_t arrived;     /* order_barrier: arrivals of all threads at all barriers so far */
    int64_t nworkers;    /* threads of the job; 0 while the caller is still starting them */
    struct region_s *regions; /* (nregions,): the rays (or rows of rec) in one region a thread */
    int64_t nregions;
    int64_t ticket;      /* threads started so far: each one's own region */
} job_t;

#define CHUNK 1024

/* Rays [0, n) in contiguous regions, one a thread: each thread casts its own region from
 * its start, chunk by chunk, then helps with the others' (taking chunks from their fronts).
 * So each thread casts neighbouring rays one after another, and coherent rays (a lidar's
 * sweep, rows in cell order) keep their nodes in that core's cache, where chunks handed
 * out in turn gave each thread every width-th chunk of the batch; and a thread that the
 * system holds back delays the end by one chunk at most. */
typedef struct region_s {
    int64_t next, end;
    char pad[128 - 2 * sizeof(int64_t)]; /* a cache line (or two) of its own */
} region_t;

/* Regions of [0, n) for width threads, bounds on multiples of unit. */
static void regions_init(region_t *rg, int64_t width, int64_t n, int64_t unit) {
    for (int64_t k = 0; k < width; ++k) {
        rg[k].next = n / width * k / unit * unit;
        rg[k].end = k + 1 < width ? n / width * (k + 1) / unit * unit : n;
    }
}

/* Chunks of unit rays of the regions, own region first (home), then the others; fn for
 * each. */
static void regions_run(job_t *j, region_t *rg, int64_t width, int64_t home, int64_t unit,
                        void (*fn)(job_t *, int64_t, int64_t)) {
    for (int64_t q = 0; q < width; ++q) {
        region_t *r = &rg[(home + q) % width];
        int64_t a;
        while ((a = BRT_FETCH_ADD(&r->next, unit)) < r->end) fn(j, a, a + unit < r->end ? a + unit : r->end);
    }
}

#if defined(BRT_HAVE_AVX)
/* AVX kernels unless the CPU lacks AVX or BLENSOR_RT_NO_AVX is set (for comparisons). */
static int cpu_has_avx(void) {
    /* CPUID.1:ECX bit 28 (AVX) and 27 (OSXSAVE), and the OS saves the YMM state (XCR0 bits 1, 2) */
    unsigned a, b, c, d, lo, hi;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 28)) || !(c & (1u << 27))) return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}

static int use_avx(void) {
    static int cached = -1;
    if (cached < 0) cached = cpu_has_avx() && !getenv("BLENSOR_RT_NO_AVX");
    return cached;
}
#endif

/* ------------------------------------------------------------ ray order */

/* Batches from many scattered origins (secondary rays, random probes) are cast in the
 * order of the cells of their origins, a 16 x 16 x 16 grid over them taken in Morton
 * order, so rays that follow each other visit the same nodes while they are in cache (ray
 * reordering: Pharr et al., "Rendering complex scenes with memory-coherent ray tracing",
 * SIGGRAPH 1997; Moon et al., "Cache-oblivious ray reordering", ACM TOG 29(3), 2010).
 * Rays are independent, so the answers are the same in any order. Batches from one
 * origin (a lidar, a camera) or already in coherent order (a moving sensor's sweep:
 * consecutive origins close together) are left alone.
 *
 * Every phase runs on all the job's threads, with a barrier between phases (issue 24:
 * a one-thread Morton sort and chunk-wise gathers and scatters over the whole batch
 * limited 4M scattered rays to 14.5 Mrays/s on 16 cores, against 38.9 for rays given in
 * order):
 *  A. per block of ORDER_BLOCK rays, the rays per cell (a counting sort's histogram);
 *  B. one thread: each block's first row in each cell (cells in Morton order, blocks in
 *     order within a cell, rays in order within a block: a stable order, the same for
 *     any number of threads);
 *  C. per block, each ray (origin, direction, tmax, time: 32 bytes) copied to its row of
 *     rec, and the row noted in dest: sequential reads, writes to 4,096 streams;
 *  D. rec cast chunk by chunk in its order (sequential reads), a contiguous region of rows
 *     per thread (regions_run), each answer (t, instance, triangle, normal, barycentrics:
 *     32 bytes) written over its ray's row;
 *  E. per block of the caller's order, the answers read from rec through dest and written
 *     to the caller's arrays in order (one random 32-byte read per ray instead of five
 *     random writes).
 * Cells finer than 16 per axis cast no faster on the benchmark's 4M random rays (a full
 * 30-bit Morton order measured the same within noise), and 4,096 write streams keep
 * phase C's open lines in a core's cache. On the lent 16-core Xeon, 4M random rays: 14.4
 * -> 34.0 Mrays/s at 16 threads (Embree 30.6), 2.0 -> 2.5 at one thread. Compile with
 * -DBRT_PHASE_TIMES for each phase's CPU time on stderr (measurements only). */
#define ORDER_MIN 16384   /* fewer rays: not worth the passes */
#define ORDER_SAMPLE 4096 /* neighbour pairs that decide whether a batch is reordered */
#define ORDER_CELL_BITS 4 /* per axis: 16 x 16 x 16 cells */
#define ORDER_CELLS (1 << (3 * ORDER_CELL_BITS))
#define ORDER_BLOCK 65536 /* rays of a block of phases A and C */
#define ORDER_ANSWERS 16384 /* rays of a block of phase E */
typedef char brt_order_cells_are_4_bits[ORDER_CELL_BITS == 4 ? 1 : -1]; /* order_cell's table */


static int64_t reordered_batches; /* batches cast in Morton order (brt_reordered_batches) */

BRT_API int64_t brt_reordered_batches(void) { return BRT_FETCH_ADD(&reordered_batches, 0); }

static inline int origin_finite(const float *o) { return isfinite(o[0]) && isfinite(o[1]) && isfinite(o[2]); }

static double origin_extent(const float *lo, const float *hi) {
    double e = 0.0;
    for (int k = 0; k < 3; ++k) e += hi[k] > lo[k] ? (double)hi[k] - lo[k] : 0.0;
    return e;
}

/* Whether the rays with origins org (n, 3) are cast in cell order; if so, the grid (lo,
 * scale) over the origins of the sample. Decided on ORDER_SAMPLE pairs of neighbouring
 * rays spread over the batch (a pass over all of them would cost every one-origin sensor
 * batch): reorder unless they share one origin or neighbours lie on average within 1/64
 * of the origins' extent. Origins outside the sample's box go to the border cells (only
 * the order depends on the grid, never an answer). */
static int order_grid(const float *org, int64_t n, float *lo, float *scale) {
    if (n < ORDER_MIN || n > INT32_MAX) return 0;
    float hi[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
    for (int k = 0; k < 3; ++k) lo[k] = FLT_MAX;
    double step = 0.0; /* sum of |o[i+1] - o[i]|_1 over the finite sampled pairs */
    int64_t pairs = 0;
    for (int64_t q = 0; q < ORDER_SAMPLE; ++q) {
        const float *o = org + 3 * (q * (n - 1) / ORDER_SAMPLE), *p = o + 3;
        if (!origin_finite(o) || !origin_finite(p)) continue;
        box_grow(lo, hi, o, o);
        box_grow(lo, hi, p, p);
        step += fabs((double)p[0] - o[0]) + fabs((double)p[1] - o[1]) + fabs((double)p[2] - o[2]);
        ++pairs;
    }
    double extent = origin_extent(lo, hi);
    if (!(extent > 0.0) || step < extent * (double)pairs / 64.0) return 0;
    for (int k = 0; k < 3; ++k) {
        const double w = (double)hi[k] - lo[k]; /* finite: both ends are sampled origins */
        scale[k] = w > 0.0 ? (float)((double)(1 << ORDER_CELL_BITS) / w) : 0.0f;
        if (!isfinite(scale[k])) scale[k] = 0.0f;
    }
    return 1;
}

/* Morton index of the cell of origin o: the grid's cell, or a border cell for an origin
 * outside it (NaN coordinates: 0; an infinite one: its end). */
static inline uint32_t order_cell(const job_t *j, const float *o) {
    static const uint16_t spread4[16] = {0x000, 0x001, 0x008, 0x009, 0x040, 0x041, 0x048, 0x049,
                                         0x200, 0x201, 0x208, 0x209, 0x240, 0x241, 0x248, 0x249};
    uint32_t code = 0;
    for (int k = 0; k < 3; ++k) {
        const float q = (o[k] - j->grid_lo[k]) * j->grid_scale[k];
        const uint32_t c = q > 0.0f ? (q < 15.0f ? (uint32_t)q : 15u) : 0u; /* NaN: 0 */
        code |= (uint32_t)spread4[c] << k;
    }
    return code;
}

static void yield_thread(void) {
#if defined(_WIN32)
    SwitchToThread();
#else
    sched_yield();
#endif
}

/* Barrier k (1, 2, ...) of the job's threads: returns once all of them have called it k
 * times; 1 in the thread that came last, 0 in the others. */
static int order_barrier(job_t *j, int64_t k) {
    const int64_t nw = BRT_LOAD_ACQ(&j->nworkers);
    const int64_t mine = BRT_FETCH_ADD_SYNC(&j->arrived, 1) + 1;
    while (BRT_LOAD_ACQ(&j->arrived) < k * nw) yield_thread();
    return mine == k * nw;
}

/* Phase A: block k's rays per cell. */
static void order_count(job_t *j, int64_t k) {
    uint32_t *h = j->hist + k * ORDER_CELLS;
    const int64_t a = k * ORDER_BLOCK, b = a + ORDER_BLOCK < j->nrays ? a + ORDER_BLOCK : j->nrays;
    memset(h, 0, sizeof(uint32_t) * ORDER_CELLS);
    for (int64_t i = a; i < b; ++i) h[order_cell(j, j->org + 3 * i)]++;
}

/* Phase B: the counts become each block's first row in each cell (passes along the
 * blocks' rows of counts, not down the columns: 0.3 instead of 3.4 ms for 4M rays). */
static void order_rows(job_t *j) {
    uint32_t next[ORDER_CELLS]; /* per cell: the next row */
    memset(next, 0, sizeof next);
    for (int64_t k = 0; k < j->nblk; ++k)
        for (int c = 0; c < ORDER_CELLS; ++c) next[c] += j->hist[k * ORDER_CELLS + c];
    uint32_t row = 0;
    for (int c = 0; c < ORDER_CELLS; ++c) {
        const uint32_t v = next[c];
        next[c] = row;
        row += v;
    }
    for (int64_t k = 0; k < j->nblk; ++k)
        for (int c = 0; c < ORDER_CELLS; ++c) {
            const uint32_t v = j->hist[k * ORDER_CELLS + c];
            j->hist[k * ORDER_CELLS + c] = next[c];
            next[c] += v;
        }
}

/* Phase C: block k's rays to their rows of rec. */
static void order_copy(job_t *j, int64_t k) {
    uint32_t *h = j->hist + k * ORDER_CELLS;
    const int64_t a = k * ORDER_BLOCK, b = a + ORDER_BLOCK < j->nrays ? a + ORDER_BLOCK : j->nrays;
    for (int64_t i = a; i < b; ++i) {
        const uint32_t p = h[order_cell(j, j->org + 3 * i)]++;
        float *r = j->rec + 8 * (int64_t)p;
        memcpy(r, j->org + 3 * i, 3 * sizeof(float));
        memcpy(r + 3, j->dir + 3 * i, 3 * sizeof(float));
        r[6] = j->tmax ? j->tmax[i] : j->tmax_default;
        r[7] = j->time ? j->time[i] : 0.0f;
        j->dest[i] = (int32_t)p;
    }
}

static void run_range(job_t *j, int64_t a, int64_t b);

/* Phase D: rows [a, b) of rec (at most CHUNK) cast, their answers written over them. */
static void order_cast(job_t *j, int64_t a, int64_t b) {
    float org[3 * CHUNK], dir[3 * CHUNK], tmax[CHUNK], time[CHUNK], t[CHUNK], ng[3 * CHUNK], uv[2 * CHUNK];
    int32_t inst[CHUNK], prim[CHUNK];
    const int64_t m = b - a;
    for (int64_t k = 0; k < m; ++k) {
        const float *r = j->rec + 8 * (a + k);
        memcpy(org + 3 * k, r, 3 * sizeof(float));
        memcpy(dir + 3 * k, r + 3, 3 * sizeof(float));
        tmax[k] = r[6]; /* the caller's tmax, or tmax_default: the same float run_range takes */
        time[k] = r[7];
    }
    job_t local; /* what run_range reads (not *j whole: other threads count in it) */
    memset(&local, 0, sizeof local);
    local.s = j->s; local.cast = j->cast;
    local.org = org; local.dir = dir; local.tmax = tmax;
    local.time = j->time ? time : NULL;
    local.t_out = t; local.inst_out = inst; local.prim_out = prim;
    local.ng_out = j->ng_out ? ng : NULL;
    local.uv_out = j->uv_out ? uv : NULL;
    run_range(&local, 0, m);
    for (int64_t k = 0; k < m; ++k) {
        float *r = j->rec + 8 * (a + k);
        r[0] = t[k];
        memcpy(r + 1, inst + k, sizeof(int32_t));
        memcpy(r + 2, prim + k, sizeof(int32_t));
        if (j->ng_out) memcpy(r + 3, ng + 3 * k, 3 * sizeof(float));
        if (j->uv_out) memcpy(r + 6, uv + 2 * k, 2 * sizeof(float));
    }
}

/* Phase E: the answers of the caller's rays [a, b), in its order. */
static void order_answer(job_t *j, int64_t a, int64_t b) {
    enum { AHEAD = 16 };
    for (int64_t i = a; i < b; ++i) {
        if (i + AHEAD < b) BRT_PREFETCH(j->rec + 8 * (int64_t)j->dest[i + AHEAD]);
        const float *r = j->rec + 8 * (int64_t)j->dest[i];
        j->t_out[i] = r[0];
        memcpy(j->inst_out + i, r + 1, sizeof(int32_t));
        memcpy(j->prim_out + i, r + 2, sizeof(int32_t));
        if (j->ng_out) memcpy(j->ng_out + 3 * i, r + 3, 3 * sizeof(float));
        if (j->uv_out) memcpy(j->uv_out + 2 * i, r + 6, 2 * sizeof(float));
    }
}

/* The phases of a reordered cast on one of the job's threads. */
#if defined(BRT_PHASE_TIMES) /* measurements only: CPU seconds of each phase, to stderr */
#include <stdio.h>
#include <time.h>
static double phase_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
#define PHASE(i) (tp[i] = phase_clock())
#else
#define PHASE(i) ((void)0)
#endif

static void order_worker(job_t *j) {
    const int64_t n = j->nrays;
    int64_t k, a;
#if defined(BRT_PHASE_TIMES)
    double tp[9];
#endif
    while (BRT_LOAD_ACQ(&j->nworkers) == 0) yield_thread(); /* the caller is starting threads */
    PHASE(0);
    while ((k = BRT_FETCH_ADD(&j->next_blk[0], 1)) < j->nblk) order_count(j, k);
    PHASE(1);
    if (order_barrier(j, 1)) order_rows(j);
    PHASE(2);
    order_barrier(j, 2);
    PHASE(3);
    while ((k = BRT_FETCH_ADD(&j->next_blk[1], 1)) < j->nblk) order_copy(j, k);
    PHASE(4);
    order_barrier(j, 3);
    PHASE(5);
    regions_run(j, j->regions, j->nregions, BRT_FETCH_ADD(&j->ticket, 1), CHUNK, order_cast);
    PHASE(6);
    order_barrier(j, 4);
    PHASE(7);
    while ((a = BRT_FETCH_ADD(&j->next_ans, ORDER_ANSWERS)) < n)
        order_answer(j, a, a + ORDER_ANSWERS < n ? a + ORDER_ANSWERS : n);
    PHASE(8);
#if defined(BRT_PHASE_TIMES)
    fprintf(stderr, "phases ms: count %.2f rows %.2f copy %.2f cast %.2f answer %.2f waits %.2f\n",
            1e3 * (tp[1] - tp[0]), 1e3 * (tp[2] - tp[1]), 1e3 * (tp[4] - tp[3]), 1e3 * (tp[6] - tp[5]),
            1e3 * (tp[8] - tp[7]), 1e3 * ((tp[3] - tp[2]) + (tp[5] - tp[4]) + (tp[7] - tp[6])));
#endif
}

/* Scratch memory of reordered casts: one buffer is kept from one cast to the next (up to
 * ORDER_KEEP bytes), since a fresh buffer's page faults cost more than the passes that
 * fill it (4M rays: 160 MB, about 40k faults of 4 KiB pages). Taken and given back with
 * an atomic exchange, so concurrent casts each get a buffer of their own. */
#define ORDER_KEEP ((size_t)256 << 20)
#define ORDER_ALIGN 64
typedef struct { size_t size; } scratch_head_t; /* at the start of a buffer */
static void *order_kept; /* the kept buffer, or NULL */

#if defined(_MSC_VER) && !defined(__clang__)
#define BRT_XCHG_PTR(p, v) InterlockedExchangePointer((PVOID volatile *)(p), (v))
#else
#define BRT_XCHG_PTR(p, v) __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
#endif

static void scratch_free(void *p) { big_free(p); }

/* A buffer of at least size bytes (ORDER_ALIGN-aligned, with its head), or NULL. */
static void *scratch_take(size_t size) {
    void *p = BRT_XCHG_PTR(&order_kept, NULL);
    if (p && ((scratch_head_t *)p)->size >= size) return p;
    scratch_free(p);
    p = big_alloc(size);
    if (p) ((scratch_head_t *)p)->size = size;
    return p;
}

static void scratch_give(void *p) {
    if (p && ((scratch_head_t *)p)->size <= ORDER_KEEP) p = BRT_XCHG_PTR(&order_kept, p);
    scratch_free(p);
}

/* rec, dest and hist of a reordered cast of j->nrays rays, in one scratch buffer; 0 if
 * memory is short (then the rays are cast in the caller's order: the same answers). */
static int order_alloc(job_t *j) {
    const size_t n = (size_t)j->nrays;
    j->nblk = (j->nrays + ORDER_BLOCK - 1) / ORDER_BLOCK;
    const size_t rec = ORDER_ALIGN, dest = rec + sizeof(float) * 8 * n; /* rows on 32-byte bounds */
    const size_t hist = dest + ((sizeof(int32_t) * n + 63) & ~(size_t)63);
    char *p = (char *)scratch_take(hist + sizeof(uint32_t) * ORDER_CELLS * (size_t)j->nblk);
    if (!p) return 0;
    j->rec = (float *)(p + rec);
    j->dest = (int32_t *)(p + dest);
    j->hist = (uint32_t *)(p + hist);
    return 1;
}

static void order_free(job_t *j) {
    if (j->rec) scratch_give((char *)j->rec - ORDER_ALIGN);
    j->rec = NULL; j->dest = NULL; j->hist = NULL;
}

/* The answers for ray i of the job from its hit *hp at time fraction ts. */
static inline void write_hit(job_t *j, int64_t i, const hit_t *hp, double ts) {
    const hit_t h = *hp;
    if (h.inst < 0) {
        j->t_out[i] = INFINITY;
        j->inst_out[i] = -1;
        j->prim_out[i] = -1;
        if (j->ng_out) j->ng_out[3 * i] = j->ng_out[3 * i + 1] = j->ng_out[3 * i + 2] = 0.0f;
        if (j->uv_out) j->uv_out[2 * i] = j->uv_out[2 * i + 1] = 0.0f;
        return;
    }
    const instance_t *in = &j->s->inst[h.inst];
    j->t_out[i] = h.t;
    j->inst_out[i] = h.inst;
    j->prim_out[i] = in->mesh->pk_tri[h.slot];
    if (j->uv_out) { j->uv_out[2 * i] = h.b1; j->uv_out[2 * i + 1] = h.b2; }
    if (j->ng_out) {
        const float *P = in->mesh->pk + 36 * (h.slot / 4);
        const int lane = (int)(h.slot % 4);
        double e1[3], e2[3], n[3], w[3];
        for (int k = 0; k < 3; ++k) {
            e1[k] = (double)P[(3 + k) * 4 + lane] - P[k * 4 + lane];
            e2[k] = (double)P[(6 + k) * 4 + lane] - P[k * 4 + lane];
        }
        n[0] = e1[1] * e2[2] - e1[2] * e2[1];
        n[1] = e1[2] * e2[0] - e1[0] * e2[2];
        n[2] = e1[0] * e2[1] - e1[1] * e2[0];
        double W[9], tt[3];
        if (in->mo && motion_inverse(in->mo, ts, W, tt)) { /* normal matrix at the ray's time: W^T */
            for (int r = 0; r < 3; ++r) w[r] = W[r] * n[0] + W[3 + r] * n[1] + W[6 + r] * n[2];
        } else {
            for (int r = 0; r < 3; ++r)
                w[r] = in->nrm[3 * r] * n[0] + in->nrm[3 * r + 1] * n[1] + in->nrm[3 * r + 2] * n[2];
        }
        double len = sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
        if (len > 0) { w[0] /= len; w[1] /= len; w[2] /= len; }
        for (int k = 0; k < 3; ++k) j->ng_out[3 * i + k] = (float)w[k];
    }
}

/* Rays [a, b) of the job, in blocks: every ray of a block is cast first, then the answers
 * are written. The answers' lookups (a hit's input triangle, its vertices for the normal)
 * miss the cache; in a pass of their own they overlap each other instead of waiting one
 * at a time behind a traversal. */
static void run_range(job_t *j, int64_t a, int64_t b) {
    hit_t hs[CHUNK];
    double tss[CHUNK];
    for (int64_t c = a; c < b; c += CHUNK) {
        const int64_t e = b - c < CHUNK ? b : c + CHUNK;
        for (int64_t i = c; i < e; ++i) {
            float tm = j->tmax ? j->tmax[i] : j->tmax_default;
            double ts = 0.0;
            if (j->time) {
                float tv = j->time[i];
                if (!isfinite(tv)) tm = NAN; /* a ray at no time misses */
                ts = tv > 0.0f ? (tv < 1.0f ? (double)tv : 1.0) : 0.0;
            }
            tss[i - c] = ts;
            j->cast(j->s, j->org + 3 * i, j->dir + 3 * i, tm, ts, &hs[i - c]);
        }
        for (int64_t i = c; i < e; ++i) write_hit(j, i, &hs[i - c], tss[i - c]);
    }
}

/* Rays [a, b) of the job, a a multiple of j->bundle, in bundles: a bundle whose rays
 * share their time goes to cast_bundle, the others (and a last incomplete one) ray by
 * ray, as run_range casts them. */
static void run_bundled(job_t *j, int64_t a, int64_t b) {
    hit_t hs[CHUNK];
    double tss[CHUNK];
    float tms[CHUNK];
    const int S = j->bundle;
    for (int64_t i = a; i < b; ++i) {
        float tm = j->tmax ? j->tmax[i] : j->tmax_default;
        double ts = 0.0;
        if (j->time) {
            float tv = j->time[i];
            if (!isfinite(tv)) tm = NAN;
            ts = tv > 0.0f ? (tv < 1.0f ? (double)tv : 1.0) : 0.0;
        }
        tss[i - a] = ts;
        tms[i - a] = tm;
    }
    for (int64_t c = a; c < b; c += S) {
        int same = c + S <= b && j->cast_bundle != NULL;
        for (int64_t i = c + 1; same && i < c + S; ++i) same = tss[i - a] == tss[c - a];
        if (same) {
            j->cast_bundle(j->s, j->org + 3 * c, j->dir + 3 * c, tms + (c - a), tss[c - a], hs + (c - a), S);
        } else {
            for (int64_t i = c; i < b && i < c + S; ++i)
                j->cast(j->s, j->org + 3 * i, j->dir + 3 * i, tms[i - a], tss[i - a], &hs[i - a]);
        }
    }
    for (int64_t i = a; i < b; ++i) write_hit(j, i, &hs[i - a], tss[i - a]);
}

/* Rays [a, b) of the job, in the caller's order or in bundles. */
static void run_chunk(job_t *j, int64_t a, int64_t b) {
    if (j->bundle > 1) run_bundled(j, a, b);
    else run_range(j, a, b);
}

static void *worker(void *arg) {
    job_t *j = (job_t *)arg;
    if (j->rec) {
        order_worker(j);
        return NULL;
    }
    const int64_t chunk = j->bundle > 1 ? (CHUNK / j->bundle) * j->bundle : CHUNK; /* whole bundles */
    regions_run(j, j->regions, j->nregions, BRT_FETCH_ADD(&j->ticket, 1), chunk, run_chunk);
    return NULL;
}

#if defined(_WIN32)
static DWORD WINAPI worker_win32(LPVOID arg) {
    worker(arg);
    return 0;
}
#endif

BRT_API int brt_intersect(const brt_scene *s, const float *org, const float *dir,
                          const float *tmax, float tmax_default, int64_t nrays, int nthreads,
                          float *t_out, int32_t *inst_out, int32_t *prim_out, float *ng_out,
                          float *uv_out) {
    return brt_intersect_timed(s, org, dir, NULL, tmax, tmax_default, nrays, nthreads, t_out, inst_out,
                               prim_out, ng_out, uv_out);
}

BRT_API int brt_intersect_timed(const brt_scene *s, const float *org, const float *dir, const float *time,
                                const float *tmax, float tmax_default, int64_t nrays, int nthreads,
                                float *t_out, int32_t *inst_out, int32_t *prim_out, float *ng_out,
                                float *uv_out) {
    return brt_intersect_bundled(s, org, dir, time, tmax, tmax_default, nrays, 1, nthreads, t_out, inst_out,
                                 prim_out, ng_out, uv_out);
}

BRT_API int brt_intersect_bundled(const brt_scene *s, const float *org, const float *dir, const float *time,
                                  const float *tmax, float tmax_default, int64_t nrays, int bundle,
                                  int nthreads, float *t_out, int32_t *inst_out, int32_t *prim_out,
                                  float *ng_out, float *uv_out) {
    if (!s || nrays < 0 || (nrays > 0 && (!org || !dir || !t_out || !inst_out || !prim_out)))
        return BRT_E_ARG;
    if (bundle < 1) return BRT_E_ARG;
    if (bundle > BUNDLE_MAX) bundle = 1; /* the same answers, ray by ray */
    job_t j;
    memset(&j, 0, sizeof j);
    j.s = s; j.org = org; j.dir = dir; j.tmax = tmax; j.tmax_default = tmax_default; j.nrays = nrays;
    j.t_out = t_out; j.ng_out = ng_out; j.uv_out = uv_out; j.inst_out = inst_out; j.prim_out = prim_out;
    j.cast = cast_one_base; j.time = time; j.bundle = bundle;
#if defined(BRT_SIMD)
    j.cast_bundle = cast_bundle_base;
#endif
#if defined(BRT_HAVE_AVX)
    if (use_avx()) { j.cast = cast_one_avx; j.cast_bundle = cast_bundle_avx; }
#endif
    if (nthreads < 1) nthreads = 1;
    if (nthreads > 256) nthreads = 256;
    if ((int64_t)nthreads > nrays / CHUNK + 1) nthreads = (int)(nrays / CHUNK + 1);
    region_t one, *regions = nthreads > 1 ? (region_t *)malloc(sizeof(region_t) * (size_t)nthreads) : NULL;
    j.regions = regions ? regions : &one; /* no memory: one region, the same answers */
    j.nregions = regions ? nthreads : 1;
    regions_init(j.regions, j.nregions, nrays, bundle > 1 ? (CHUNK / bundle) * bundle : CHUNK);
    /* scattered origins: cast in the order of their cells ("ray order"); bundles share
     * their origin and keep the caller's order */
    if (s->ninst > 0 && bundle == 1 && order_grid(org, nrays, j.grid_lo, j.grid_scale)) {
        if (order_alloc(&j)) BRT_FETCH_ADD(&reordered_batches, 1);
    }
    if (nthreads == 1) {
        j.nworkers = 1;
        worker(&j);
        order_free(&j);
        free(regions);
        return BRT_OK;
    }
    int started = 0;
#if defined(_WIN32)
    HANDLE th[256];
    for (int k = 0; k < nthreads - 1; ++k) {
        th[k] = CreateThread(NULL, 0, worker_win32, &j, 0, NULL);
        if (th[k] == NULL) break; /* fewer threads, same result */
        ++started;
    }
    BRT_STORE_REL(&j.nworkers, (int64_t)started + 1); /* a reordered cast's barriers count them */
    worker(&j); /* the calling thread works too and finishes whatever is left */
    for (int k = 0; k < started; ++k) {
        WaitForSingleObject(th[k], INFINITE);
        CloseHandle(th[k]);
    }
#else
    pthread_t th[256];
    for (int k = 0; k < nthreads - 1; ++k) {
        if (pthread_create(&th[k], NULL, worker, &j) != 0) break; /* fewer threads, same result */
        ++started;
    }
    BRT_STORE_REL(&j.nworkers, (int64_t)started + 1); /* a reordered cast's barriers count them */
    worker(&j); /* the calling thread works too and finishes whatever is left */
    for (int k = 0; k < started; ++k) pthread_join(th[k], NULL);
#endif
    order_free(&j);
    free(regions);
    return BRT_OK;
}
