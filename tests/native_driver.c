/* Test driver for the native library, built statically for another CPU (aarch64 under
 * qemu-user) and for this one: a deterministic scene of random triangles, instanced
 * twice, against deterministic rays; prints every hit (t with 9 digits, instance,
 * triangle) so that two builds can be compared line by line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../native_patch/src/blensor_rt.h"

static uint64_t state = 88172645463325252ull;
static double rnd(void) { /* xorshift64, uniform in [0, 1) */
    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
    return (double)(state >> 11) / 9007199254740992.0;
}

int main(void) {
    enum { NT = 3000, NR = 20000 };
    static float v[NT * 9];
    static int32_t t[NT * 3];
    for (int i = 0; i < NT; ++i) {
        double c[3] = {rnd() * 10 - 5, rnd() * 10 - 5, rnd() * 10 - 5};
        for (int k = 0; k < 9; ++k) v[9 * i + k] = (float)(c[k % 3] + (rnd() - 0.5) * 1.2);
        for (int k = 0; k < 3; ++k) t[3 * i + k] = 3 * i + k;
    }
    brt_mesh *m;
    if (brt_mesh_create(v, NT * 3, t, NT, &m) != BRT_OK) return 2;
    float xf[32] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1,
                    0, -1, 0, 20, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1};
    int32_t im[2] = {0, 0};
    brt_scene *s;
    if (brt_scene_create(&m, 1, im, xf, 2, &s) != BRT_OK) return 3;
    static float o[NR * 3], d[NR * 3], tt[NR], ng[NR * 3], uv[NR * 2];
    static int32_t inst[NR], prim[NR];
    for (int i = 0; i < NR; ++i) {
        double dd[3] = {rnd() - 0.5, rnd() - 0.5, rnd() - 0.5}, n = 0;
        for (int k = 0; k < 3; ++k) { o[3 * i + k] = (float)(rnd() * 30 - 8); n += dd[k] * dd[k]; }
        for (int k = 0; k < 3; ++k) d[3 * i + k] = (float)(dd[k] / (n > 0 ? __builtin_sqrt(n) : 1));
    }
    if (brt_intersect(s, o, d, NULL, 1e30f, NR, 2, tt, inst, prim, ng, uv) != BRT_OK) return 4;
    long hits = 0;
    for (int i = 0; i < NR; ++i) {
        if (inst[i] >= 0) ++hits;
        printf("%d %.9g %d %d %.9g %.9g\n", i, tt[i], inst[i], prim[i], ng[3 * i], uv[2 * i]);
    }
    fprintf(stderr, "%ld hits\n", hits);
    brt_scene_free(s);
    brt_mesh_free(m);
    return 0;
}
