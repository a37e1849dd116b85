/* Test driver for the native library, built statically for another CPU (aarch64 under
 * qemu-user) and for this one: a deterministic scene of random triangles, instanced
 * twice, against deterministic rays; prints every hit (t with 9 digits, instance,
 * triangle) so that two builds can be compared line by line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "native_scene.h"

int main(void) {
    enum { NT = 3000, NR = 20000 };
    brt_mesh *m;
    brt_scene *s;
    int rc = random_scene(NT, &m, &s);
    if (rc) return rc;
    static float o[NR * 3], d[NR * 3], tt[NR], ng[NR * 3], uv[NR * 2];
    static int32_t inst[NR], prim[NR];
    for (int i = 0; i < NR; ++i) random_ray(o + 3 * i, d + 3 * i);
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
