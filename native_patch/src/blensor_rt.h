/*
 * blensor_rt: batch ray casting for BlenSor.
 *
 * Plain C99 ABI (no Python or NumPy headers) so that one build per operating
 * system serves every Blender from 4.2 on; Python loads it with ctypes.
 *
 * Geometry is two-level: one BVH per mesh (binned SAH, built once per mesh
 * content) and a top-level BVH over instances, each a mesh plus a 4x4
 * object-to-world matrix.  An animation frame in which only transforms change
 * rebuilds only the top level.
 *
 * Ray/triangle intersection is the watertight test of Woop, Benthin and Wald,
 * "Watertight Ray/Triangle Intersection", JCGT 2(1), 2013: a ray through a
 * shared edge or vertex hits at least one of the adjacent triangles.
 *
 * All arrays are C-contiguous, little-endian, float32 / int32.
 */
#ifndef BLENSOR_RT_H
#define BLENSOR_RT_H

#include <stdint.h>

#ifdef _WIN32
#define BRT_API __declspec(dllexport)
#else
#define BRT_API __attribute__((visibility("default")))
#endif

#define BRT_API_VERSION 2 /* 2: brt_kernel() */

/* Error codes (negative). */
#define BRT_OK 0
#define BRT_E_ARG (-1)     /* null pointer or negative count */
#define BRT_E_INDEX (-2)   /* triangle index outside [0, nverts) */
#define BRT_E_NOMEM (-3)   /* allocation failed */


typedef struct brt_mesh brt_mesh;
typedef struct brt_scene brt_scene;

/* Version of this ABI; the loader refuses a library with another value. */
BRT_API int brt_api_version(void);

/* Traversal kernel brt_intersect uses on this CPU: "avx", "sse2" or "portable"
 * (x86-64 picks AVX at run time unless the CPU lacks it or BLENSOR_RT_NO_AVX is set). */
BRT_API const char *brt_kernel(void);

/* Build the BVH of one mesh.
 * verts: (nverts, 3) float32 object-space coordinates [m].
 * tris:  (ntris, 3) int32 vertex indices.
 * Triangles with a non-finite vertex are left out (they can never be hit).
 * On success *out holds a mesh that owns copies of the data. */
BRT_API int brt_mesh_create(const float *verts, int64_t nverts, const int32_t *tris,
                            int64_t ntris, brt_mesh **out);
BRT_API void brt_mesh_free(brt_mesh *mesh);
/* Number of BVH nodes (for statistics and tests). */
BRT_API int64_t brt_mesh_node_count(const brt_mesh *mesh);

/* Build the top level over instances.
 * meshes: array of nmeshes mesh handles (may repeat; NULL not allowed).
 * inst_mesh: (ninst,) int32 index into meshes.
 * inst_xform: (ninst, 4, 4) float32 row-major object-to-world matrices
 *             (last row 0 0 0 1); instances with a singular matrix are never hit.
 * The scene refers to the meshes; they must outlive it. */
BRT_API int brt_scene_create(brt_mesh *const *meshes, int64_t nmeshes, const int32_t *inst_mesh,
                             const float *inst_xform, int64_t ninst, brt_scene **out);
BRT_API void brt_scene_free(brt_scene *scene);

/* Closest hit for every ray.
 * org, dir: (nrays, 3) float32 world-space origins [m] and directions (unit length
 *           expected: then t is a distance in metres).
 * tmax: (nrays,) float32 per-ray limit, or NULL to use tmax_default for all.
 * nthreads: worker threads (1 = serial in the calling thread).
 * Outputs (nrays each): t_out float32 (+inf on a miss), inst_out int32 (-1 on a
 * miss), prim_out int32 (triangle index in the instance's mesh, -1 on a miss),
 * ng_out (nrays,3) float32 unit geometric normal in world space from the
 * triangle's winding (may be NULL), uv_out (nrays,2) float32 barycentrics
 * (b1, b2) with p = (1-b1-b2) v0 + b1 v1 + b2 v2 (may be NULL). */
BRT_API int brt_intersect(const brt_scene *scene, const float *org, const float *dir,
                          const float *tmax, float tmax_default, int64_t nrays, int nthreads,
                          float *t_out, int32_t *inst_out, int32_t *prim_out, float *ng_out,
                          float *uv_out);

#endif
