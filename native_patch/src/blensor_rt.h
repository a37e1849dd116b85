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
 * Moving instances (continuous-time scanning, rolling shutter): within one time step an
 * instance may move from its start transform M0 to its end transform M1; a ray with time
 * fraction s in [0, 1] meets it at the transform interpolated at s (translation linear,
 * rotation by slerp, the scale/shear factor linear; blensor_addon/raycast/motion.py
 * defines it and builds the records), so no mesh BVH is rebuilt for motion.
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

#define BRT_API_VERSION 5 /* 2: brt_kernel(); 3: moving instances, per-ray time;
                             4: brt_mesh_node_count removed, brt_crash_message();
                             5: brt_intersect_bundled() */

/* Error codes (negative). */
#define BRT_OK 0
#define BRT_E_ARG (-1)     /* null pointer or negative count */
#define BRT_E_INDEX (-2)   /* triangle index outside [0, nverts) */
#define BRT_E_NOMEM (-3)   /* allocation failed */


typedef struct brt_mesh brt_mesh;
typedef struct brt_scene brt_scene;

/* Version of this ABI; the loader refuses a library with another value. */
BRT_API int brt_api_version(void);

/* Number of intersect batches cast in the Morton order of their origins' cells so far
 * (rays from scattered origins, 16,384 or more; see brt_intersect). For tests. */
BRT_API int64_t brt_reordered_batches(void);

/* Number of rays of bundles (brt_intersect_bundled) cast again on their own so far (a tie
 * between two triangles, or an instance that parts the bundle's direction signs). For tests. */
BRT_API int64_t brt_bundle_recasts(void);

/* Traversal kernel brt_intersect uses on this CPU: "avx", "sse2" or "portable"
 * (x86-64 picks AVX at run time unless the CPU lacks it or BLENSOR_RT_NO_AVX is set). */
BRT_API const char *brt_kernel(void);

/* While set, a crash of the process (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: in Blender's
 * .blend reader, which crashes on some corrupt files) writes before + the signal's name +
 * after to stderr (the file descriptor 2 had when it was first set: the caller may point
 * fd 2 elsewhere afterwards) and ends the process with exit status code (write and _exit only:
 * async-signal-safe). before and after are copied (at most 2047 bytes in all). Both NULL:
 * the handlers from before are back. Returns BRT_OK, BRT_E_ARG (one of them NULL, too
 * long), or -4 where the platform has no sigaction (Windows). */
BRT_API int brt_crash_message(const char *before, const char *after, int code);

/* Signal watchdog: the end of a headless run whose main thread is stuck in a C call that
 * does not return (Blender opening a FIFO again after EINTR), where no Python handler runs
 * to act on SIGINT or SIGTERM. Puts a handler in front of the current ones
 * of SIGINT and SIGTERM (call it after Python's are set) that counts the signal, wakes a
 * thread of this library and chains to the one before. If brt_watchdog_ack() (which
 * Python's handler calls whenever it runs) has not seen every signal within grace_s
 * seconds, the thread does the run's stop actions (brt_watchdog_action), writes text
 * before + the signal's name + text after to stderr (fd 2 of the first call) and ends the
 * process with exit status code. The thread is started once; a later call changes grace_s
 * and code and puts the handlers in front again. Returns BRT_OK, BRT_E_ARG (grace_s not
 * positive), BRT_E_NOMEM (no pipe or thread), or -4 on Windows. */
BRT_API int brt_watchdog_start(double grace_s, int code);
/* Python's signal handler ran: every signal counted so far is seen. */
BRT_API void brt_watchdog_ack(void);
/* The line of a stuck end: before + signal name + after (copied; at most 4095 bytes). */
BRT_API int brt_watchdog_text(const char *before, const char *after);
/* Stop action slot (0..7) of a stuck end, done in slot order: mode 0 none, 1 write the n
 * bytes of data to path (a temporary name beside it, then renamed over it), 2 remove the
 * file path, 3 remove the folder path if it is empty. Copied. BRT_E_ARG: bad slot or mode,
 * path over 4095 bytes; BRT_E_NOMEM. */
BRT_API int brt_watchdog_action(int slot, int mode, const char *path, const char *data, int64_t n);

/* Build the BVH of one mesh.
 * verts: (nverts, 3) float32 object-space coordinates [m].
 * tris:  (ntris, 3) int32 vertex indices.
 * Triangles with a non-finite vertex are left out (they can never be hit).
 * On success *out holds a mesh that owns copies of the data. */
BRT_API int brt_mesh_create(const float *verts, int64_t nverts, const int32_t *tris,
                            int64_t ntris, brt_mesh **out);
BRT_API void brt_mesh_free(brt_mesh *mesh);

/* Build the top level over instances.
 * meshes: array of nmeshes mesh handles (may repeat; NULL not allowed).
 * inst_mesh: (ninst,) int32 index into meshes.
 * inst_xform: (ninst, 4, 4) float32 row-major object-to-world matrices
 *             (last row 0 0 0 1); instances with a singular matrix are never hit.
 * The scene refers to the meshes; they must outlive it. */
BRT_API int brt_scene_create(brt_mesh *const *meshes, int64_t nmeshes, const int32_t *inst_mesh,
                             const float *inst_xform, int64_t ninst, brt_scene **out);
/* Top level over instances some of which move during the time step.
 * inst_xform: (ninst, 4, 4) float32 transforms at the step start (M0), as above.
 * motion: (ninst, 32) float64 records [t0(3), t1(3), q0(4), q1(4), U0(9), U1(9)], or NULL
 *         (no instance moves): translations [m] at s = 0 and 1, unit quaternions (w, x, y, z)
 *         and upper-triangular 3x3 factors (row-major) with M[:3,:3] = R(q) U; the
 *         transform at s is t = (1-s) t0 + s t1, q = slerp(q0, q1, s) (normalized lerp when
 *         the angle is below 1e-6 rad; q1 is negated first if dot(q0, q1) < 0),
 *         U = (1-s) U0 + s U1, M[:3,:3] = R(q) U.
 * moving: (ninst,) uint8, nonzero = the instance moves: its record, not inst_xform, places
 *         it; NULL = every instance moves when motion is given.
 * A moving instance whose record is not finite or has a singular U0 or U1 (|det| <= 1e-30)
 * stays at inst_xform. Where det U(s) vanishes between the ends (a mirrored and an
 * unmirrored end) the instance is not hit at that s. Static instances behave exactly as in
 * brt_scene_create, which is this function with motion = moving = NULL. */
BRT_API int brt_scene_create_motion(brt_mesh *const *meshes, int64_t nmeshes, const int32_t *inst_mesh,
                                    const float *inst_xform, const double *motion, const uint8_t *moving,
                                    int64_t ninst, brt_scene **out);
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
 * (b1, b2) with p = (1-b1-b2) v0 + b1 v1 + b2 v2 (may be NULL).
 * A batch of 16,384 rays or more from scattered origins is cast in the Morton order of
 * its origins' cells (better cache use; every phase of the reordering runs on all nthreads
 * threads) and answered in the caller's order; every ray's answer is the same bits in any
 * order and on any number of threads. Such a cast uses 40 bytes of scratch memory a ray;
 * the library keeps one buffer of up to 256 MiB for the next such cast. */
BRT_API int brt_intersect(const brt_scene *scene, const float *org, const float *dir,
                          const float *tmax, float tmax_default, int64_t nrays, int nthreads,
                          float *t_out, int32_t *inst_out, int32_t *prim_out, float *ng_out,
                          float *uv_out);

/* brt_intersect with a time per ray.
 * time: (nrays,) float32 fraction of the time step in [0, 1] at which each ray is cast
 *       (values outside clamp to 0 or 1; NaN or inf: the ray misses), or NULL = 0 for all.
 * Moving instances are met at their transform at that time (world-to-object transform and
 * normal matrix evaluated in double precision); static ones ignore it, so a scene without
 * moving instances gives bitwise the answers of brt_intersect. */
BRT_API int brt_intersect_timed(const brt_scene *scene, const float *org, const float *dir,
                                const float *time, const float *tmax, float tmax_default, int64_t nrays,
                                int nthreads, float *t_out, int32_t *inst_out, int32_t *prim_out,
                                float *ng_out, float *uv_out);

/* brt_intersect_timed for rays that come in consecutive bundles of `bundle` rays (the
 * sub-rays of one divergent beam: one origin, one time, close directions), which are
 * traversed together: the inner nodes of the trees are tested once per bundle, the
 * triangles per ray. The answers are brt_intersect_timed's, bit for bit: a bundle whose
 * rays do not share their origin (bit for bit), time or direction signs, a last incomplete
 * bundle, and a ray that meets two triangles at (nearly) the same distance are cast ray by
 * ray. bundle 1 is brt_intersect_timed; bundle above 64 is cast ray by ray; below 1:
 * BRT_E_ARG. Bundles keep the caller's order (no Morton reordering). */
BRT_API int brt_intersect_bundled(const brt_scene *scene, const float *org, const float *dir,
                                  const float *time, const float *tmax, float tmax_default, int64_t nrays,
                                  int bundle, int nthreads, float *t_out, int32_t *inst_out,
                                  int32_t *prim_out, float *ng_out, float *uv_out);

#endif
