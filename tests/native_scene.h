/* The deterministic scene and rays of the native library's C test drivers
 * (tests/native_driver.c, tests/native_threads.c): random triangles from a seeded xorshift64,
 * the mesh instanced twice (identity, and turned 90 deg about z, moved 20 m along y and
 * scaled 2 along z), rays from scattered origins in [-8, 22) m with unit directions. */
#ifndef BLENSOR_TEST_NATIVE_SCENE_H
#define BLENSOR_TEST_NATIVE_SCENE_H

#include <stdint.h>
#include <stdlib.h>

#include "../native_patch/src/blensor_rt.h"

static uint64_t state = 88172645463325252ull;
static double rnd(void) { /* xorshift64, uniform in [0, 1) */
    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
    return (double)(state >> 11) / 9007199254740992.0;
}

/* nt random triangles (each within about 0.6 m of a centre in [-5, 5) m^3) in *m, instanced
 * twice in *s. Returns 0, 2 (mesh refused) or 3 (scene refused). */
static int random_scene(int nt, brt_mesh **m, brt_scene **s) {
    float *v = malloc(sizeof(float) * 9 * (size_t)nt);
    int32_t *t = malloc(sizeof(int32_t) * 3 * (size_t)nt);
    if (!v || !t) return 2;
    for (int i = 0; i < nt; ++i) {
        double c[3] = {rnd() * 10 - 5, rnd() * 10 - 5, rnd() * 10 - 5};
        for (int k = 0; k < 9; ++k) v[9 * i + k] = (float)(c[k % 3] + (rnd() - 0.5) * 1.2);
        for (int k = 0; k < 3; ++k) t[3 * i + k] = 3 * i + k;
    }
    int rc = brt_mesh_create(v, nt * 3, t, nt, m) != BRT_OK ? 2 : 0;
    free(v);
    free(t);
    if (rc) return rc;
    float xf[32] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1,
                    0, -1, 0, 20, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1};
    int32_t im[2] = {0, 0};
    return brt_scene_create(m, 1, im, xf, 2, s) != BRT_OK ? 3 : 0;
}

/* One ray: an origin in [-8, 22) m on each axis and a unit direction (o, d: 3 floats). */
static void random_ray(float *o, float *d) {
    double dd[3] = {rnd() - 0.5, rnd() - 0.5, rnd() - 0.5}, n = 0;
    for (int k = 0; k < 3; ++k) { o[k] = (float)(rnd() * 30 - 8); n += dd[k] * dd[k]; }
    for (int k = 0; k < 3; ++k) d[k] = (float)(dd[k] / (n > 0 ? __builtin_sqrt(n) : 1));
}

#endif
