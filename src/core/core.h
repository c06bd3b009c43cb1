/* core.h — the pieces every module shares: error reporting, the arena,
 * the counter-based RNG and small shape helpers. Internal to libmxu. */
#ifndef MXU_CORE_H
#define MXU_CORE_H

#include "mxu.h"

#include <stddef.h>
#include <stdint.h>

/* Tensors one node reads: a merge of up to this many, or a model's inputs
 * or outputs. */
#define MXU_MAX_INPUTS 16

/* Resource limits, checked where a number enters (a flag, a model file, a
 * C call) and refused naming the limit; raise them here and rebuild.
 * Sizes are computed in int64 below them, so nothing overflows. */
#define MXU_MAX_THREADS 1024           /* worker threads */
#define MXU_MAX_DIM (1 << 24)          /* one dimension of a tensor */
#define MXU_MAX_WINDOW (1 << 16)       /* a kernel, pool or stride side */
#define MXU_MAX_ELEMENTS (1LL << 31)   /* values of one sample or weight */
#define MXU_MAX_BATCH (1 << 20)        /* samples of a global batch */
#define MXU_MAX_IMAGE_PIXELS (1 << 26) /* one decoded image: 8192 x 8192 */
#define MXU_MAX_TEXT_BYTES (64 << 20)  /* a model JSON file */
/* A data file unpacked into memory: at most half the machine's memory (a
 * gzip bomb fails here, not in the kernel's OOM killer); the environment
 * variable MXU_MAX_DATA_BYTES sets another limit. */

/* Records a formatted message for mxu_errmsg() and returns status, so a
 * failure reads: return mxu_fail(MXU_ERR_IO, "idx: %s: ...", path); */
/* The status of the last mxu_fail on this thread (what a call returning
 * -1 instead of a status failed with). */
mxu_status mxu_last_status(void);
mxu_status mxu_fail(mxu_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with context ("conv2d_1: " + message). */
mxu_status mxu_fail_prefix(mxu_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define MXU_TRY(expr)                                                          \
  do {                                                                         \
    mxu_status mxu_try_status_ = (expr);                                       \
    if (mxu_try_status_ != MXU_OK) return mxu_try_status_;                     \
  } while (0)

/* ---- arena: one allocation per replica, laid out at compile ----------- */

/* Planning pass: reserve returns offsets; after mxu_arena_commit the
 * pointers are valid. Every block is 64-byte aligned for AVX-512. */
typedef struct mxu_arena {
  size_t size;
  unsigned char *base;
} mxu_arena;

size_t mxu_arena_reserve(mxu_arena *arena, size_t bytes);
mxu_status mxu_arena_commit(mxu_arena *arena);
void mxu_arena_release(mxu_arena *arena);
static inline float *mxu_arena_floats(const mxu_arena *arena, size_t offset) {
  return (float *)(void *)(arena->base + offset);
}

void *mxu_aligned_alloc(size_t bytes); /* zeroed, 64-byte aligned */
void mxu_aligned_free(void *p);

/* ---- RNG: Philox-4x32-10, counter based ------------------------------- */

/* A stream is a key (seed) and a fixed prefix of the counter (stream ids:
 * epoch, step, replica, layer, ...); the draw index fills the rest. Any
 * draw can be recomputed without replaying the ones before it. */
typedef struct mxu_rng {
  uint32_t key[2];
  uint32_t stream[2];
} mxu_rng;

mxu_rng mxu_rng_make(uint64_t seed, uint32_t id0, uint32_t id1, uint32_t id2,
                     uint32_t id3);
/* Four independent 32-bit words for draw index i. */
void mxu_rng_block(const mxu_rng *rng, uint64_t index, uint32_t out[4]);
/* Uniform floats in [0, 1) for draws first .. first+count-1. */
void mxu_rng_uniform(const mxu_rng *rng, uint64_t first, float *out,
                     size_t count);
/* The same from all four words of each block, for a quarter of the work
 * (dropout's masks): value k is word (k % 64) / 16 of block
 * k / 64 * 16 + k % 16, so that 16 blocks side by side give 64 values in
 * order. Draws first .. first+count-1. */
void mxu_rng_uniform4(const mxu_rng *rng, uint64_t first, float *out,
                      size_t count);
/* A uniform integer in [0, bound) for draw index i (unbiased). */
uint32_t mxu_rng_below(const mxu_rng *rng, uint64_t index, uint32_t bound);

/* Stream ids, so callers name what a stream is for. */
enum {
  MXU_STREAM_INIT = 1,
  MXU_STREAM_SHUFFLE = 2,
  MXU_STREAM_DROPOUT = 3,
  MXU_STREAM_AUGMENT = 4
};

/* ---- misc -------------------------------------------------------------- */

double mxu_now_seconds(void);
/* Keras' snake_case of a class name: Conv2D -> conv2d,
 * MaxPooling2D -> max_pooling2d, BatchNormalization -> batch_normalization. */
void mxu_snake_case(const char *class_name, char *out, size_t out_size);

/* 1 when text ends with suffix (a file name's extension, say). */
int mxu_ends_with(const char *text, const char *suffix);

/* ---- world: the processes training together ------------------------- */

/* This process's rank and the number of processes (0 and 1 without MPI);
 * strategy/ sets them when it starts MPI, and mxu_distributed_rank() and
 * mxu_distributed_size() read them. */
void mxu_world_set(int rank, int size);

/* The threads a replica step may use when the user asks for 0: the
 * machine's online cores. */
int mxu_machine_cores(void);
/* One core's L2 cache. */
int64_t mxu_machine_l2_bytes(void);
/* A file being written (file.c): a temporary beside the target, renamed
 * over it when finished; or, for what is not a regular file (a FIFO,
 * /dev/stdout), the file itself, written in place. A symlink's target is
 * what gets written. */
typedef struct mxu_file_out {
  char path[4096]; /* the target, a symlink resolved */
  char temp[4096];
  int fd, in_place;
} mxu_file_out;
mxu_status mxu_file_begin(mxu_file_out *out, const char *path);
/* Writes the bytes, syncs, renames; on failure the target is untouched. */
mxu_status mxu_file_finish(mxu_file_out *out, const void *bytes, size_t size);

/* A zip archive of the members (stored, each dated now) built in memory
 * (zip.c): *bytes, malloc'd, and *size; errors name path. */
typedef struct mxu_zip_member {
  const char *name;
  const void *bytes;
  size_t size;
} mxu_zip_member;
mxu_status mxu_zip_build(const char *path, const mxu_zip_member *members,
                         int count, unsigned char **bytes, size_t *size);
void mxu_file_abandon(mxu_file_out *out);

/* The machine's physical memory (0 when unknown). */
int64_t mxu_machine_memory_bytes(void);

/* ---- image_transform.c ------------------------------------------------ */

/* One sample's transform, in Keras' apply_affine_transform terms with x
 * the column axis and y the row axis. Output pixel (x, y) reads the input
 * at  c + R(theta) * (Z * ((x, y) - c) + (tx, ty)),  c the image centre,
 * Z = diag(zx, zy); then the result is flipped. theta > 0 turns the
 * picture counter-clockwise as displayed (theta = 90 is numpy's rot90);
 * tx > 0 moves the content left, zx > 1 shows more of it (zooms out). */
typedef struct mxu_augment_params {
  double theta; /* degrees */
  double tx, ty;
  double zx, zy;
  int flip_horizontal, flip_vertical;
  /* Keras 3's RandomShear, alone (about the top-left corner, not the
   * centre): input row += shear_y * col, input col += shear_x * row. */
  double shear_x, shear_y;
} mxu_augment_params;

/* The 2x3 matrix scipy.ndimage.affine_transform gets for params on an
 * h x w image: input (row, col) = m[.][0..1] * (row, col) + m[.][2]. */
void mxu_augment_matrix(const mxu_augment_params *params, int h, int w,
                        double m[2][3]);

/* Applies params to one h x w x channels image (in != out). */
void mxu_augment_apply(const mxu_augment_params *params, mxu_fill_mode mode,
                       float cval, const float *in, float *out, int h, int w,
                       int channels);
/* The adjoint of mxu_augment_apply with the same parameters: dx = the
 * transpose of the resampling applied to dy (each output pixel's gradient
 * spread over the input pixels it read, with their weights; a constant
 * fill's pixels read none). dx is overwritten; dx != dy. */
void mxu_augment_adjoint(const mxu_augment_params *params, mxu_fill_mode mode,
                         const float *dy, float *dx, int h, int w,
                         int channels);

#endif
