/*
 * Traversal kernels of blensor_rt, included twice by blensor_rt.c: once for the baseline
 * instruction set (SSE2 on x86-64, plain C elsewhere) and once compiled for AVX, chosen
 * at run time. BRT_FN(name) gives each copy its own names; BRT_AVX selects the 8-lane
 * AVX slab test.
 */

/* Slab test of the child boxes of a wide node; returns a bit mask of the lanes hit
 * within (0, tmax) and their entry distances. A NaN slab (origin on the plane of a zero
 * direction component) leaves the interval unchanged, which is conservative: max/min
 * below return their second operand on NaN, as SSE's maxps/minps do. */
#if defined(BRT_AVX)
static inline int BRT_FN(box_hit)(const wnode_t *n, const ray_t *r, float tmax, float tnear[BW]) {
    const char *base = (const char *)n;
    __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_set1_ps(tmax);
    for (int k = 0; k < 3; ++k) {
        const __m256 lo = _mm256_loadu_ps((const float *)(base + r->near_off[k]));
        const __m256 hi = _mm256_loadu_ps((const float *)(base + r->far_off[k]));
        const __m256 o = _mm256_broadcast_ss(&r->org[k]);
        const __m256 a = _mm256_mul_ps(_mm256_sub_ps(lo, o), _mm256_broadcast_ss(&r->inv[k]));
        const __m256 b = _mm256_mul_ps(_mm256_sub_ps(hi, o), _mm256_broadcast_ss(&r->invf[k]));
        t0 = _mm256_max_ps(a, t0);
        t1 = _mm256_min_ps(b, t1);
    }
    _mm256_storeu_ps(tnear, t0);
    return _mm256_movemask_ps(_mm256_cmp_ps(t0, t1, _CMP_LE_OQ)); /* empty lanes: +inf > -inf */
}
#elif defined(BRT_SIMD)
static inline int BRT_FN(box_hit)(const wnode_t *n, const ray_t *r, float tmax, float tnear[BW]) {
    const char *base = (const char *)n;
    int mask = 0;
    for (int h = 0; h < BW; h += 4) {
        __m128 t0 = _mm_setzero_ps(), t1 = _mm_set1_ps(tmax);
        for (int k = 0; k < 3; ++k) {
            const __m128 lo = _mm_loadu_ps((const float *)(base + r->near_off[k]) + h);
            const __m128 hi = _mm_loadu_ps((const float *)(base + r->far_off[k]) + h);
            const __m128 a = _mm_mul_ps(_mm_sub_ps(lo, r->org4[k]), r->inv4[k]);
            const __m128 b = _mm_mul_ps(_mm_sub_ps(hi, r->org4[k]), r->invf4[k]);
            t0 = _mm_max_ps(a, t0);
            t1 = _mm_min_ps(b, t1);
        }
        _mm_storeu_ps(tnear + h, t0);
        mask |= _mm_movemask_ps(_mm_cmple_ps(t0, t1)) << h;
    }
    return mask; /* empty lanes: +inf > -inf */
}
#else
static inline int BRT_FN(box_hit)(const wnode_t *n, const ray_t *r, float tmax, float tnear[BW]) {
    float t0[BW], t1[BW];
    for (int j = 0; j < BW; ++j) { t0[j] = 0.0f; t1[j] = tmax; }
    for (int k = 0; k < 3; ++k) {
        const float *lo = r->neg[k] ? n->bmax[k] : n->bmin[k];
        const float *hi = r->neg[k] ? n->bmin[k] : n->bmax[k];
        for (int j = 0; j < BW; ++j) {
            float a = (lo[j] - r->org[k]) * r->inv[k];
            float b = (hi[j] - r->org[k]) * r->inv[k] * BOX_WIDEN;
            t0[j] = a > t0[j] ? a : t0[j];
            t1[j] = b < t1[j] ? b : t1[j];
        }
    }
    int mask = 0;
    for (int j = 0; j < BW; ++j) {
        tnear[j] = t0[j];
        /* empty lanes (count -1) are never reported: with a NaN ray the comparisons above
         * would leave t0 = 0 <= t1 = tmax there and push child 0 again and again */
        mask |= (t0[j] <= t1[j] && n->count[j] >= 0) << j;
    }
    return mask;
}
#endif


/* Push the lanes of mask, farthest first, so the nearest is popped next. */
static inline int BRT_FN(push_children)(const wnode_t *n, int mask, const float tn[BW], entry_t *stack, int sp) {
    if (sp > STACK_SIZE - BW) return sp; /* cannot happen for trees of depth <= MAX_DEPTH; never overflow */
    if ((mask & (mask - 1)) == 0) { /* one child: the common case deep in the tree */
        int j = brt_ctz(mask);
        stack[sp].idx = n->child[j];
        stack[sp].count = n->count[j];
        stack[sp].t = tn[j];
        return sp + 1;
    }
    int base = sp;
    while (mask) { /* insertion into stack[base..sp), farthest at the bottom */
        int j = brt_ctz(mask);
        mask &= mask - 1;
        int p = sp++;
        while (p > base && stack[p - 1].t < tn[j]) { stack[p] = stack[p - 1]; --p; }
        stack[p].idx = n->child[j];
        stack[p].count = n->count[j];
        stack[p].t = tn[j];
    }
    return sp;
}


/* Distance along the ray to the plane of a triangle whose vertex v, axis a is
 * P[(3 v + a) * stride], in double precision (the barycentric form T/det of the
 * watertight test loses ~1e-4 m on long thin triangles seen from afar). NaN when the
 * ray is parallel to the plane, which every caller's range test rejects. */
static inline double BRT_FN(plane_distance)(const float *P, int stride, const ray_t *r) {
    double e1[3], e2[3], a[3];
    for (int k = 0; k < 3; ++k) {
        double v0 = P[k * stride];
        e1[k] = (double)P[(3 + k) * stride] - v0;
        e2[k] = (double)P[(6 + k) * stride] - v0;
        a[k] = v0 - (double)r->org[k];
    }
    double n0 = e1[1] * e2[2] - e1[2] * e2[1];
    double n1 = e1[2] * e2[0] - e1[0] * e2[2];
    double n2 = e1[0] * e2[1] - e1[1] * e2[0];
    double den = n0 * r->dir[0] + n1 * r->dir[1] + n2 * r->dir[2];
    return den == 0.0 ? NAN : (n0 * a[0] + n1 * a[1] + n2 * a[2]) / den;
}

/* Watertight test; returns 1 and sets *t, *b1, *b2 on a hit with 0 < t < tmax. */
static inline int BRT_FN(tri_hit)(const float *tv, const ray_t *r, float tmax, float *t, float *b1, float *b2) {
    const int kx = r->kx, ky = r->ky, kz = r->kz;
    float A[3], B[3], C[3];
    for (int k = 0; k < 3; ++k) {
        A[k] = tv[k] - r->org[k];
        B[k] = tv[3 + k] - r->org[k];
        C[k] = tv[6 + k] - r->org[k];
    }
    float Ax = A[kx] - r->sx * A[kz], Ay = A[ky] - r->sy * A[kz];
    float Bx = B[kx] - r->sx * B[kz], By = B[ky] - r->sy * B[kz];
    float Cx = C[kx] - r->sx * C[kz], Cy = C[ky] - r->sy * C[kz];
    float U = Cx * By - Cy * Bx;
    float V = Ax * Cy - Ay * Cx;
    float W = Bx * Ay - By * Ax;
    if (U == 0.0f || V == 0.0f || W == 0.0f) {
        U = (float)((double)Cx * (double)By - (double)Cy * (double)Bx);
        V = (float)((double)Ax * (double)Cy - (double)Ay * (double)Cx);
        W = (float)((double)Bx * (double)Ay - (double)By * (double)Ax);
    }
    if ((U < 0.0f || V < 0.0f || W < 0.0f) && (U > 0.0f || V > 0.0f || W > 0.0f)) return 0;
    float det = U + V + W;
    if (det == 0.0f) return 0;
    /* The edge functions decide inside/outside (that is what makes the test watertight);
     * the distance comes from the triangle's plane. */
    double td = BRT_FN(plane_distance)(tv, 1, r);
    if (!(td > 0.0) || !(td < (double)tmax)) return 0;
    float rcp = 1.0f / det;
    *t = (float)td;
    *b1 = V * rcp;
    *b2 = W * rcp;
    return 1;
}

/* Four triangles of a packet against one ray: the watertight edge functions in SIMD,
 * then the exact plane distance (as tri_hit) for the lanes that pass. Lanes with an edge
 * function of exactly zero are redone by the scalar test (its double-precision retry).
 * Updates *best / *slot (packet * 4 + lane) / *b1 / *b2 on a nearer hit. */
static inline void BRT_FN(tri4_hit)(const brt_mesh *m, int64_t pkt, const ray_t *r, float *best, int64_t *slot,
                            float *b1, float *b2) {
    const float *P = m->pk + 36 * pkt;
    const int kx = r->kx, ky = r->ky, kz = r->kz;
    float U[4], V[4], W[4];
    int cand = 0, zero = 0;
#if defined(BRT_SIMD)
    const __m128 ox = _mm_set1_ps(r->org[kx]), oy = _mm_set1_ps(r->org[ky]), oz = _mm_set1_ps(r->org[kz]);
    const __m128 sx = _mm_set1_ps(r->sx), sy = _mm_set1_ps(r->sy);
    __m128 X[3], Y[3];
    for (int v = 0; v < 3; ++v) {
        const __m128 dz = _mm_sub_ps(_mm_loadu_ps(P + (3 * v + kz) * 4), oz);
        X[v] = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(P + (3 * v + kx) * 4), ox), _mm_mul_ps(sx, dz));
        Y[v] = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(P + (3 * v + ky) * 4), oy), _mm_mul_ps(sy, dz));
    }
    const __m128 u = _mm_sub_ps(_mm_mul_ps(X[2], Y[1]), _mm_mul_ps(Y[2], X[1]));
    const __m128 vv = _mm_sub_ps(_mm_mul_ps(X[0], Y[2]), _mm_mul_ps(Y[0], X[2]));
    const __m128 w = _mm_sub_ps(_mm_mul_ps(X[1], Y[0]), _mm_mul_ps(Y[1], X[0]));
    const __m128 z = _mm_setzero_ps();
    const __m128 neg = _mm_or_ps(_mm_or_ps(_mm_cmplt_ps(u, z), _mm_cmplt_ps(vv, z)), _mm_cmplt_ps(w, z));
    const __m128 pos = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(u, z), _mm_cmpgt_ps(vv, z)), _mm_cmpgt_ps(w, z));
    const __m128 zer = _mm_or_ps(_mm_or_ps(_mm_cmpeq_ps(u, z), _mm_cmpeq_ps(vv, z)), _mm_cmpeq_ps(w, z));
    const __m128 det = _mm_add_ps(_mm_add_ps(u, vv), w);
    zero = _mm_movemask_ps(zer);
    cand = _mm_movemask_ps(_mm_andnot_ps(_mm_and_ps(neg, pos), _mm_cmpneq_ps(det, z))) & ~zero;
    _mm_storeu_ps(U, u);
    _mm_storeu_ps(V, vv);
    _mm_storeu_ps(W, w);
#else
    for (int lane = 0; lane < 4; ++lane) {
        float X[3], Y[3];
        for (int v = 0; v < 3; ++v) {
            float dz = P[(3 * v + kz) * 4 + lane] - r->org[kz];
            X[v] = P[(3 * v + kx) * 4 + lane] - r->org[kx] - r->sx * dz;
            Y[v] = P[(3 * v + ky) * 4 + lane] - r->org[ky] - r->sy * dz;
        }
        U[lane] = X[2] * Y[1] - Y[2] * X[1];
        V[lane] = X[0] * Y[2] - Y[0] * X[2];
        W[lane] = X[1] * Y[0] - Y[1] * X[0];
        if (U[lane] == 0.0f || V[lane] == 0.0f || W[lane] == 0.0f) { zero |= 1 << lane; continue; }
        int ng = U[lane] < 0.0f || V[lane] < 0.0f || W[lane] < 0.0f;
        int ps = U[lane] > 0.0f || V[lane] > 0.0f || W[lane] > 0.0f;
        if (!(ng && ps) && U[lane] + V[lane] + W[lane] != 0.0f) cand |= 1 << lane;
    }
#endif
    while (zero) { /* rare: an edge function is exactly zero; the scalar test decides */
        int lane = brt_ctz(zero);
        zero &= zero - 1;
        float tv[9], t, c1, c2;
        for (int v = 0; v < 3; ++v)
            for (int a = 0; a < 3; ++a) tv[3 * v + a] = P[(3 * v + a) * 4 + lane];
        if (BRT_FN(tri_hit)(tv, r, *best, &t, &c1, &c2)) { *best = t; *slot = 4 * pkt + lane; *b1 = c1; *b2 = c2; }
    }
    while (cand) {
        int lane = brt_ctz(cand);
        cand &= cand - 1;
        double td = BRT_FN(plane_distance)(P + lane, 4, r);
        if (!(td > 0.0) || !(td < (double)*best)) continue;
        float dsum = U[lane] + V[lane] + W[lane];
        *best = (float)td;
        *slot = 4 * pkt + lane;
        *b1 = V[lane] / dsum;
        *b2 = W[lane] / dsum;
    }
}


static void BRT_FN(traverse_mesh)(const brt_mesh *m, const ray_t *r, hit_t *h, int32_t inst) {
    entry_t stack[STACK_SIZE];
    int sp = 0;
    int32_t idx = 0, count = 0; /* the node being visited: the root */
    float tn[BW];
    for (;;) {
        if (count == 0) { /* inner node: descend into the nearest child hit, push the others */
            const wnode_t *n = &m->nodes[idx];
            int mask = BRT_FN(box_hit)(n, r, h->t, tn);
            if (mask) {
                if ((mask & (mask - 1)) == 0) { /* one child: no stack traffic */
                    int j = brt_ctz(mask);
                    idx = n->child[j];
                    count = n->count[j];
                    continue;
                }
                const int rest = mask & (mask - 1);
                if ((rest & (rest - 1)) == 0 && sp < STACK_SIZE) {
                    /* two children: push the farther, descend into the nearer (on a tie the
                     * higher lane, as push_children orders them) */
                    const int j0 = brt_ctz(mask), j1 = brt_ctz(rest);
                    const int nj = tn[j1] <= tn[j0] ? j1 : j0, fj = nj == j0 ? j1 : j0;
                    stack[sp].idx = n->child[fj];
                    stack[sp].count = n->count[fj];
                    stack[sp].t = tn[fj];
                    ++sp;
                    idx = n->child[nj];
                    count = n->count[nj];
                    continue;
                }
                int before = sp;
                sp = BRT_FN(push_children)(n, mask, tn, stack, sp);
                if (sp > before) { /* the nearest, pushed last: within h->t by the test */
                    --sp;
                    idx = stack[sp].idx;
                    count = stack[sp].count;
                    /* the next nearest is likely visited next: start loading it */
                    const entry_t *nx = &stack[sp - 1];
                    const char *pf = nx->count ? (const char *)(m->pk + 36 * (int64_t)nx->idx)
                                               : (const char *)&m->nodes[nx->idx];
                    BRT_PREFETCH(pf); BRT_PREFETCH(pf + 64); BRT_PREFETCH(pf + 128);
                    if (!nx->count) BRT_PREFETCH(pf + 192);
                    continue;
                }
            }
        } else if (count > 0) { /* a leaf (count -1, an empty lane entered only by a ray made
                                 * non-finite by an extreme transform, tests nothing) */
            float best = h->t, c1 = 0.0f, c2 = 0.0f;
            int64_t slot = -1;
            for (int32_t p = idx; p < idx + count; ++p) BRT_FN(tri4_hit)(m, p, r, &best, &slot, &c1, &c2);
            if (slot >= 0) {
                h->t = best; h->b1 = c1; h->b2 = c2; h->slot = slot; h->inst = inst;
                BRT_PREFETCH(m->pk_tri + slot); /* read for the answer once the ray is done */
            }
        }
        for (;;) { /* next: the nearest pushed entry still nearer than the hit so far */
            if (sp == 0) return;
            entry_t e = stack[--sp];
            if (e.t < h->t) { idx = e.idx; count = e.count; break; }
        }
    }
}

/* Closest hit of one world ray at time fraction tm in [0, 1] (used by moving instances only). */
static void BRT_FN(cast_one)(const brt_scene *s, const float *org, const float *dir, float tmax, double tm, hit_t *h) {
    h->t = tmax; h->inst = -1; h->slot = -1; h->b1 = h->b2 = 0.0f;
    if (s->ninst == 0 || !(tmax > 0.0f)) return;
    /* non-finite or zero-length rays miss */
    int finite = 1;
    for (int k = 0; k < 3; ++k) finite &= isfinite(org[k]) && isfinite(dir[k]);
    if (!finite || (dir[0] == 0.0f && dir[1] == 0.0f && dir[2] == 0.0f)) return;
    ray_t wr;
    memcpy(wr.org, org, sizeof wr.org);
    memcpy(wr.dir, dir, sizeof wr.dir);
    ray_setup(&wr);
    entry_t stack[STACK_SIZE];
    int sp = 0;
    stack[sp++] = (entry_t){0, 0, 0.0f};
    float tn[BW];
    while (sp > 0) {
        entry_t e = stack[--sp];
        if (e.t >= h->t) continue;
        if (e.count != 0) { /* a leaf (count -1: an empty lane, nothing to test) */
            for (int32_t i = e.idx; i < e.idx + e.count; ++i) {
                int32_t ii = s->order[i];
                const instance_t *in = &s->inst[ii];
                if (in->identity) { /* the world ray is the object's ray */
                    BRT_FN(traverse_mesh)(in->mesh, &wr, h, ii);
                    continue;
                }
                ray_t lr;
                if (in->mo) { /* moving: its transform at the ray's time, in double */
                    if (!motion_ray(in->mo, tm, org, dir, lr.org, lr.dir)) continue;
                } else {
                    for (int row = 0; row < 3; ++row) {
                        const float *q = in->inv + 4 * row;
                        lr.org[row] = q[0] * org[0] + q[1] * org[1] + q[2] * org[2] + q[3];
                        lr.dir[row] = q[0] * dir[0] + q[1] * dir[1] + q[2] * dir[2];
                    }
                }
                /* an instance that does not rotate or scale (a translation) keeps the
                 * direction: its setup is the world ray's */
                if (same_dir(lr.dir, wr.dir)) ray_setup_dir_of(&lr, &wr); /* (not memcmp: it stalls
                                                                         * on the stores just made) */
                else ray_setup(&lr);
                BRT_FN(traverse_mesh)(in->mesh, &lr, h, ii);
            }
            continue;
        }
        const wnode_t *n = &s->nodes[e.idx];
        int mask = BRT_FN(box_hit)(n, &wr, h->t, tn);
        if (mask) sp = BRT_FN(push_children)(n, mask, tn, stack, sp);
    }
}



/* ------------------------------------------------------------------ bundles
 * A bundle: S rays from one origin (bit for bit) at one time, such as the sub-rays of one
 * divergent beam (issue 22, section 2). Its inner nodes are tested once for all S rays by
 * a conservative slab test over the rays' reciprocal ranges; its leaves per ray, with the
 * per-ray triangle tests. Every ray tests every triangle its own traversal would test
 * (the bundle's box test contains each ray's, and nodes are cut only beyond the bundle's
 * widened farthest hit), so the nearest hit is the same; only the order differs, which
 * decides between triangles at (nearly) equal distance: a ray that meets such a tie
 * (bundle_tie) is cast again on its own, so every answer is the per-ray kernel's. */
#if defined(BRT_SIMD)

/* The slab test of a wide node's children for bundle b: a lane is reported if some ray of
 * the bundle may enter it within (0, tmax); tnear gets the bundle's least entry distance.
 * Per axis the entry is the least of (plane - org) times the rays' least and greatest
 * reciprocal (rounding is monotonic, so it is at most every ray's entry), the exit the
 * greatest; a NaN (origin on a plane, an infinite reciprocal) leaves the interval as the
 * per-ray test's NaN does. */
#if defined(BRT_AVX)
static inline int BRT_FN(bundle_box_hit)(const wnode_t *n, const bray_t *b, float tmax, float tnear[BW]) {
    const char *base = (const char *)n;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_set1_ps(tmax);
    for (int k = 0; k < 3; ++k) {
        const __m256 o = _mm256_broadcast_ss(&b->org[k]);
        const __m256 dl = _mm256_sub_ps(_mm256_loadu_ps((const float *)(base + b->near_off[k])), o);
        const __m256 dh = _mm256_sub_ps(_mm256_loadu_ps((const float *)(base + b->far_off[k])), o);
        const __m256 a1 = _mm256_mul_ps(dl, _mm256_broadcast_ss(&b->ilo[k]));
        const __m256 a2 = _mm256_mul_ps(dl, _mm256_broadcast_ss(&b->ihi[k]));
        const __m256 b1 = _mm256_mul_ps(dh, _mm256_broadcast_ss(&b->flo[k]));
        const __m256 b2 = _mm256_mul_ps(dh, _mm256_broadcast_ss(&b->fhi[k]));
        const __m256 a = _mm256_blendv_ps(_mm256_min_ps(a1, a2), ninf, _mm256_cmp_ps(a1, a2, _CMP_UNORD_Q));
        const __m256 e = _mm256_blendv_ps(_mm256_max_ps(b1, b2), pinf, _mm256_cmp_ps(b1, b2, _CMP_UNORD_Q));
        t0 = _mm256_max_ps(a, t0);
        t1 = _mm256_min_ps(e, t1);
    }
    _mm256_storeu_ps(tnear, t0);
    return _mm256_movemask_ps(_mm256_cmp_ps(t0, t1, _CMP_LE_OQ));
}
#else
static inline int BRT_FN(bundle_box_hit)(const wnode_t *n, const bray_t *b, float tmax, float tnear[BW]) {
    const char *base = (const char *)n;
    int mask = 0;
    for (int j = 0; j < BW; ++j) {
        float t0 = 0.0f, t1 = tmax;
        for (int k = 0; k < 3; ++k) {
            const float dl = ((const float *)(base + b->near_off[k]))[j] - b->org[k];
            const float dh = ((const float *)(base + b->far_off[k]))[j] - b->org[k];
            const float a1 = dl * b->ilo[k], a2 = dl * b->ihi[k];
            const float b1 = dh * b->flo[k], b2 = dh * b->fhi[k];
            const float a = (isnan(a1) || isnan(a2)) ? -INFINITY : (a1 < a2 ? a1 : a2);
            const float e = (isnan(b1) || isnan(b2)) ? INFINITY : (b1 > b2 ? b1 : b2);
            t0 = a > t0 ? a : t0;
            t1 = e < t1 ? e : t1;
        }
        tnear[j] = t0;
        mask |= (t0 <= t1) << j;
    }
    return mask;
}
#endif

/* tri4_hit for one ray of a bundle, which also sets *tie when a triangle that passes the
 * edge tests lies within BUNDLE_TIE (relative) of the nearest hit so far. */
static inline void BRT_FN(tri4_hit_tie)(const brt_mesh *m, int64_t pkt, const ray_t *r, float *best,
                                        int64_t *slot, float *b1, float *b2, int *tie) {
    const float *P = m->pk + 36 * pkt;
    const int kx = r->kx, ky = r->ky, kz = r->kz;
    float U[4], V[4], W[4];
    const __m128 ox = _mm_set1_ps(r->org[kx]), oy = _mm_set1_ps(r->org[ky]), oz = _mm_set1_ps(r->org[kz]);
    const __m128 sx = _mm_set1_ps(r->sx), sy = _mm_set1_ps(r->sy);
    __m128 X[3], Y[3];
    for (int v = 0; v < 3; ++v) {
        const __m128 dz = _mm_sub_ps(_mm_loadu_ps(P + (3 * v + kz) * 4), oz);
        X[v] = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(P + (3 * v + kx) * 4), ox), _mm_mul_ps(sx, dz));
        Y[v] = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(P + (3 * v + ky) * 4), oy), _mm_mul_ps(sy, dz));
    }
    const __m128 u = _mm_sub_ps(_mm_mul_ps(X[2], Y[1]), _mm_mul_ps(Y[2], X[1]));
    const __m128 vv = _mm_sub_ps(_mm_mul_ps(X[0], Y[2]), _mm_mul_ps(Y[0], X[2]));
    const __m128 w = _mm_sub_ps(_mm_mul_ps(X[1], Y[0]), _mm_mul_ps(Y[1], X[0]));
    const __m128 z = _mm_setzero_ps();
    const __m128 neg = _mm_or_ps(_mm_or_ps(_mm_cmplt_ps(u, z), _mm_cmplt_ps(vv, z)), _mm_cmplt_ps(w, z));
    const __m128 pos = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(u, z), _mm_cmpgt_ps(vv, z)), _mm_cmpgt_ps(w, z));
    const __m128 zer = _mm_or_ps(_mm_or_ps(_mm_cmpeq_ps(u, z), _mm_cmpeq_ps(vv, z)), _mm_cmpeq_ps(w, z));
    const __m128 det = _mm_add_ps(_mm_add_ps(u, vv), w);
    int zero = _mm_movemask_ps(zer);
    int cand = _mm_movemask_ps(_mm_andnot_ps(_mm_and_ps(neg, pos), _mm_cmpneq_ps(det, z))) & ~zero;
    _mm_storeu_ps(U, u);
    _mm_storeu_ps(V, vv);
    _mm_storeu_ps(W, w);
    while (zero) { /* the scalar test, without a limit: its distance decides as below */
        int lane = brt_ctz(zero);
        zero &= zero - 1;
        float tv[9], t, c1, c2;
        for (int v = 0; v < 3; ++v)
            for (int a = 0; a < 3; ++a) tv[3 * v + a] = P[(3 * v + a) * 4 + lane];
        if (!BRT_FN(tri_hit)(tv, r, INFINITY, &t, &c1, &c2)) continue;
        if (fabs((double)t - (double)*best) <= BUNDLE_TIE * (double)*best) { *tie = 1; continue; }
        if (t < *best) { *best = t; *slot = 4 * pkt + lane; *b1 = c1; *b2 = c2; }
    }
    while (cand) {
        int lane = brt_ctz(cand);
        cand &= cand - 1;
        double td = BRT_FN(plane_distance)(P + lane, 4, r);
        if (!(td > 0.0)) continue;
        if (fabs(td - (double)*best) <= BUNDLE_TIE * (double)*best) *tie = 1;
        if (!(td < (double)*best)) continue;
        float dsum = U[lane] + V[lane] + W[lane];
        *best = (float)td;
        *slot = 4 * pkt + lane;
        *b1 = V[lane] / dsum;
        *b2 = W[lane] / dsum;
    }
}

/* The bundle's limit: its farthest hit so far, widened so that a node entered exactly
 * there (a tie) is still visited. */
static inline float BRT_FN(bundle_limit)(const hit_t *hs, const uint8_t *act, int S) {
    float T = 0.0f;
    for (int i = 0; i < S; ++i)
        if (act[i] && hs[i].t > T) T = hs[i].t;
    return T + T * (float)(4.0 * BUNDLE_TIE);
}

/* The mesh of instance inst for the active rays rs[i] (act[i]) of a bundle, which share
 * their origin and their directions' signs (bundle_setup). */
static void BRT_FN(traverse_mesh_bundle)(const brt_mesh *m, const ray_t *rs, const bray_t *b, int S,
                                         const uint8_t *act, hit_t *hs, int32_t inst, int *tie) {
    entry_t stack[STACK_SIZE];
    int sp = 0;
    stack[sp++] = (entry_t){0, 0, 0.0f};
    float tn[BW];
    float T = BRT_FN(bundle_limit)(hs, act, S);
    while (sp > 0) {
        entry_t e = stack[--sp];
        if (!(e.t < T)) continue;
        if (e.count == 0) {
            int mask = BRT_FN(bundle_box_hit)(&m->nodes[e.idx], b, T, tn);
            if (mask) sp = BRT_FN(push_children)(&m->nodes[e.idx], mask, tn, stack, sp);
            continue;
        }
        if (e.count < 0) continue; /* an empty lane */
        for (int i = 0; i < S; ++i) {
            if (!act[i]) continue;
            hit_t *h = &hs[i];
            /* the leaf starts beyond this ray's hit (and its tie window): the bundle's entry
             * is at most the ray's, so none of its triangles is nearer or ties */
            if (!(e.t <= h->t + h->t * (float)(4.0 * BUNDLE_TIE))) continue;
            float best = h->t, c1 = 0.0f, c2 = 0.0f;
            int64_t slot = -1;
            for (int32_t p = e.idx; p < e.idx + e.count; ++p)
                BRT_FN(tri4_hit_tie)(m, p, &rs[i], &best, &slot, &c1, &c2, &tie[i]);
            if (slot >= 0) { h->t = best; h->b1 = c1; h->b2 = c2; h->slot = slot; h->inst = inst; }
        }
        T = BRT_FN(bundle_limit)(hs, act, S);
    }
}

/* Closest hits of the S <= BUNDLE_MAX rays org[i], dir[i] (3 floats each) with limits
 * tmax[i], all at time fraction tm: as cast_one gives them, ray by ray (which is what a
 * bundle that is not one, such as rays from different origins, gets). */
static void BRT_FN(cast_bundle)(const brt_scene *s, const float *org, const float *dir, const float *tmax,
                                double tm, hit_t *hs, int S) {
    ray_t wr[BUNDLE_MAX], lr[BUNDLE_MAX];
    uint8_t all[BUNDLE_MAX], act[BUNDLE_MAX];
    int tie[BUNDLE_MAX];
    int ok = S >= 2 && S <= BUNDLE_MAX && s->ninst > 0;
    for (int i = 0; ok && i < S; ++i) {
        const float *o = org + 3 * i, *d = dir + 3 * i;
        ok = tmax[i] > 0.0f && memcmp(o, org, 3 * sizeof(float)) == 0 && isfinite(o[0]) && isfinite(o[1])
             && isfinite(o[2]) && isfinite(d[0]) && isfinite(d[1]) && isfinite(d[2])
             && (d[0] != 0.0f || d[1] != 0.0f || d[2] != 0.0f);
    }
    bray_t wb;
    if (ok) {
        for (int i = 0; i < S; ++i) {
            memcpy(wr[i].org, org + 3 * i, sizeof wr[i].org);
            memcpy(wr[i].dir, dir + 3 * i, sizeof wr[i].dir);
            ray_setup(&wr[i]);
            all[i] = 1;
            tie[i] = 0;
            hs[i].t = tmax[i]; hs[i].inst = -1; hs[i].slot = -1; hs[i].b1 = hs[i].b2 = 0.0f;
        }
        ok = bundle_setup(&wb, wr, all, S);
    }
    if (!ok) {
        for (int i = 0; i < S; ++i) BRT_FN(cast_one)(s, org + 3 * i, dir + 3 * i, tmax[i], tm, &hs[i]);
        return;
    }
    int redo = 0; /* an instance where the rays' signs part: every ray on its own */
    bray_t lb;    /* the bundle of the rays that meet an instance, in its object space */
    entry_t stack[STACK_SIZE];
    int sp = 0;
    stack[sp++] = (entry_t){0, 0, 0.0f};
    float tn[BW];
    float T = BRT_FN(bundle_limit)(hs, all, S);
    while (sp > 0 && !redo) {
        entry_t e = stack[--sp];
        if (!(e.t < T)) continue;
        if (e.count == 0) {
            const wnode_t *n = &s->nodes[e.idx];
            int mask = BRT_FN(bundle_box_hit)(n, &wb, T, tn);
            if (mask) sp = BRT_FN(push_children)(n, mask, tn, stack, sp);
            continue;
        }
        /* the rays whose hit (and tie window) lies before this leaf's entry skip it */
        uint8_t reach[BUNDLE_MAX];
        int nreach = 0;
        for (int i = 0; i < S; ++i) {
            reach[i] = e.t <= hs[i].t + hs[i].t * (float)(4.0 * BUNDLE_TIE);
            nreach += reach[i];
        }
        if (nreach == 0) continue;
        for (int32_t q = e.idx; q < e.idx + e.count && !redo; ++q) { /* count -1: nothing */
            int32_t ii = s->order[q];
            const instance_t *in = &s->inst[ii];
            if (in->identity) {
                if (bundle_setup(&lb, wr, reach, S))
                    BRT_FN(traverse_mesh_bundle)(in->mesh, wr, &lb, S, reach, hs, ii, tie);
                continue;
            }
            int any = 0;
            double W[9], wt[3]; /* a moving instance's transform at the bundle's time, once */
            if (in->mo && !motion_inverse(in->mo, tm, W, wt)) continue;
            for (int i = 0; i < S; ++i) {
                const float *o = org + 3 * i, *d = dir + 3 * i;
                act[i] = reach[i];
                if (!act[i]) continue;
                if (in->mo) {
                    if (!motion_apply(W, wt, o, d, lr[i].org, lr[i].dir)) { act[i] = 0; continue; }
                } else {
                    for (int row = 0; row < 3; ++row) {
                        const float *qq = in->inv + 4 * row;
                        lr[i].org[row] = qq[0] * o[0] + qq[1] * o[1] + qq[2] * o[2] + qq[3];
                        lr[i].dir[row] = qq[0] * d[0] + qq[1] * d[1] + qq[2] * d[2];
                    }
                }
                /* (compared as floats with their signs, not by memcmp: an 8-byte load of the
                 * 4-byte stores just made stalls; either setup gives the same values) */
                if (same_dir(lr[i].dir, wr[i].dir)) ray_setup_dir_of(&lr[i], &wr[i]);
                else ray_setup(&lr[i]);
                any = 1;
            }
            if (!any) continue;
            if (!bundle_setup(&lb, lr, act, S)) { redo = 1; break; }
            BRT_FN(traverse_mesh_bundle)(in->mesh, lr, &lb, S, act, hs, ii, tie);
        }
        T = BRT_FN(bundle_limit)(hs, all, S);
    }
    int again = 0;
    for (int i = 0; i < S; ++i)
        if (redo || tie[i]) { BRT_FN(cast_one)(s, org + 3 * i, dir + 3 * i, tmax[i], tm, &hs[i]); ++again; }
    if (again) BRT_FETCH_ADD(&bundle_recasts, again);
}
#endif /* BRT_SIMD */
