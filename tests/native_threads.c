/* Test driver for the threads of the native library (tests/test_native_scaling.py), built
 * with and without ThreadSanitizer: a deterministic scene of random triangles, instanced
 * twice, against rays from scattered origins (cast in the order of their origins' cells,
 * every phase on every thread), cast on 1, 2, 3 and 7 threads, with and without normals and
 * barycentrics, per-ray tmax and default tmax; also two casts at once from two threads of
 * the caller. Exit status 0 when every answer matches the one-thread cast bit for bit and
 * the batch was reordered; prints the hits on stdout. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native_scene.h"

enum { NT = 2000, NR = 70001 }; /* two blocks of the reordering's counting sort */
static float o[NR * 3], d[NR * 3], tm[NR];
static brt_scene *scene;

typedef struct {
    int threads, normals;
    const float *tmax;
    float t[NR], ng[NR * 3], uv[NR * 2];
    int32_t inst[NR], prim[NR];
    int rc;
} cast_t;

static void *cast(void *p) {
    cast_t *c = (cast_t *)p;
    memset(c->ng, 0x55, sizeof c->ng); /* not written without normals: must stay */
    memset(c->uv, 0x55, sizeof c->uv);
    c->rc = brt_intersect(scene, o, d, c->tmax, 40.0f, NR, c->threads, c->t, c->inst, c->prim,
                          c->normals ? c->ng : NULL, c->normals ? c->uv : NULL);
    return NULL;
}

static int same(const cast_t *a, const cast_t *b) {
    return !memcmp(a->t, b->t, sizeof a->t) && !memcmp(a->inst, b->inst, sizeof a->inst)
           && !memcmp(a->prim, b->prim, sizeof a->prim) && !memcmp(a->ng, b->ng, sizeof a->ng)
           && !memcmp(a->uv, b->uv, sizeof a->uv);
}

int main(void) {
    brt_mesh *m;
    int rc = random_scene(NT, &m, &scene);
    if (rc) return rc;
    for (int i = 0; i < NR; ++i) {
        random_ray(o + 3 * i, d + 3 * i);
        tm[i] = (float)(5 + 30 * rnd());
    }
    o[3 * 5] = 1e30f;                 /* far outside the sampled box: a border cell */
    o[3 * 77 + 1] = 0.0f / 0.0f;      /* NaN origin: misses */
    o[3 * 101 + 2] = -1.0f / 0.0f;    /* infinite origin: misses */
    static cast_t ref[2][2], c;       /* [normals][per-ray tmax] */
    int64_t before = brt_reordered_batches();
    for (int nm = 0; nm < 2; ++nm)
        for (int pt = 0; pt < 2; ++pt) {
            cast_t *r = &ref[nm][pt];
            r->threads = 1; r->normals = nm; r->tmax = pt ? tm : NULL;
            cast(r);
            if (r->rc != BRT_OK) return 4;
            const int threads[3] = {2, 3, 7};
            for (int k = 0; k < 3; ++k) {
                c = *r;
                c.threads = threads[k];
                cast(&c);
                if (c.rc != BRT_OK || !same(&c, r)) {
                    fprintf(stderr, "threads %d normals %d tmax %d: other answers\n", threads[k], nm, pt);
                    return 5;
                }
            }
        }
    if (brt_reordered_batches() != before + 16) {
        fprintf(stderr, "%ld batches reordered, expected 16\n", (long)(brt_reordered_batches() - before));
        return 6;
    }
    /* two casts at once, each on 3 threads */
    static cast_t two[2];
    pthread_t th;
    for (int k = 0; k < 2; ++k) { two[k] = ref[1][k]; two[k].threads = 3; }
    if (pthread_create(&th, NULL, cast, &two[0]) != 0) return 7;
    cast(&two[1]);
    pthread_join(th, NULL);
    if (!same(&two[0], &ref[1][0]) || !same(&two[1], &ref[1][1])) {
        fprintf(stderr, "concurrent casts: other answers\n");
        return 8;
    }
    long hits = 0;
    for (int i = 0; i < NR; ++i) hits += ref[1][1].inst[i] >= 0;
    if (ref[1][1].inst[77] != -1 || ref[1][1].inst[101] != -1) return 9;
    printf("%ld hits\n", hits);
    brt_scene_free(scene);
    brt_mesh_free(m);
    return 0;
}
