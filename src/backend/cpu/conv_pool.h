/* conv_pool.h — conv_pool.c's op, which conv_pool_dense.c extends with
 * the Flatten and Dense after it. Internal to src/backend/cpu. */
#ifndef MXU_BACKEND_CPU_CONV_POOL_H
#define MXU_BACKEND_CPU_CONV_POOL_H

#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <stdint.h>

#define WINDOW 4                    /* 2x2 */
#define IMAGE_BLOCK 8               /* images per partial weight gradient */
#define MAX_TAPS 64                 /* kernel_h * kernel_w * in_c */
#define MAX_UNITS 16                /* of a fused Dense */
#define PAIRS ((MAX_UNITS + 2) / 2) /* of conv_pool_dense's transposes */

struct cpu_conv_pool {
  int n, in_h, in_w, in_c, c; /* c: output channels */
  int out_h, out_w;           /* pooled */
  int taps;                   /* kernel_h * kernel_w * in_c */
  int relu, has_bias;
  int64_t blocks; /* of IMAGE_BLOCK images */
  float *partial; /* blocks x (taps + 1) x c: dw, then db */
  float *cols;    /* col_threads x col_floats: row_columns per thread */
  int64_t col_floats;
  int col_threads;
  int tap_off[MAX_TAPS]; /* offset of tap t from a window's top-left input */
  int col_off[MAX_TAPS * WINDOW]; /* of (tap, s): tap_off + window_off */
  /* The (kernel_h + 1) x (kernel_w + 1) x in_c inputs a pooled pixel sees
   * fit a vector (see row_columns): its rows, their floats, and tap t's
   * input in it at window position 0. */
  int patch, patch_h, patch_row;
  int tap_at[MAX_TAPS];
  /* bf16 (mixed_bfloat16, one input channel, AVX512_BF16): the forward's
   * products pair taps 2k and 2k + 1 in one vdpbf16ps (row_pairs). pairs:
   * how many; pair_cols: a pair row's columns, whole vectors; w16: the
   * kernel rounded, [pairs][c] pairs of bf16, made by cpu_conv_pool_weights
   * at each forward. */
  int bf16, pairs, pair_cols;
  uint16_t *w16;
  int dense16;     /* conv_pool_dense's Dense in vdpbf16ps too */
  int64_t row_len; /* out_w * c: the floats of a pooled row */
  /* Where image i's row py of y, dy and the argmax bytes starts in the
   * op's buffers: i * image_stride + py * row_stride. conv_pool's are the
   * model's NHWC; conv_pool_dense keeps its own row-major, [py][i], so
   * that the images' rows py follow one another. */
  int64_t image_stride, row_stride;
  float *extra; /* past the columns: what conv_pool_dense asked for */
  /* conv_pool_dense's (units > 0; conv_pool_dense.c): */
  int units, has_dense_bias;
  /* transpose_n's tables, to the tiles' layout and back to Keras' rows */
  vi to_cols[MAX_UNITS][PAIRS], to_cols_mask[MAX_UNITS][PAIRS];
  vi to_rows[MAX_UNITS][PAIRS], to_rows_mask[MAX_UNITS][PAIRS];
  int64_t dense_blocks; /* of DENSE_BLOCK images */
  float *sums;          /* n x units x LANES: each image's logit lanes */
  float *dense_partial; /* dense_blocks x in x units, when more than one */
  float *tiles;         /* per thread: see thread_tiles */
  int64_t tile_floats;
};

/* Whether conv_pool.c's loops take the conv and pooling. */
int cpu_conv_pool_fits(const mxu_conv2d_desc *c, const mxu_pool2d_desc *p);
/* The op, with `extra` floats (whole vectors) for the caller at
 * cp->extra; y, dy and the argmax bytes NHWC, a workspace of the bytes. */
mxu_status cpu_conv_pool_build(const mxu_conv2d_desc *c,
                               const mxu_pool2d_desc *p, int relu, size_t extra,
                               mxu_op **out);
/* Threads for `units` of work, at most as many as have buffers. */
static inline int cpu_conv_pool_threads(const struct cpu_conv_pool *cp,
                                        int64_t units) {
  int threads = cpu_threads_for(units);
  return threads < cp->col_threads ? threads : cp->col_threads;
}
/* Before a forward: the bf16 copy of the kernel w, where the op has one. */
void cpu_conv_pool_weights(const struct cpu_conv_pool *cp, const float *w);
/* The inputs of pooled row py of image x, into the cache. */
void cpu_conv_pool_prefetch(const struct cpu_conv_pool *cp, const float *x,
                            int py);
/* Pooled row py of one image x: y and ws point at the row; cols: the
 * thread's buffer. */
void cpu_conv_pool_row(const struct cpu_conv_pool *cp, const float *x,
                       const float *w, const float *b, int py, float *y,
                       uint8_t *ws, float *cols);
/* The weight gradient of image i's pooled row py (dy and ws point at the
 * row) added to its image block's partial; cols: the thread's buffer. */
void cpu_conv_pool_row_grads(const struct cpu_conv_pool *cp, const float *x,
                             int py, const float *dy, const uint8_t *ws,
                             int64_t i, float *cols);
/* dx of every image from dy of y. */
void cpu_conv_pool_dx(const struct cpu_conv_pool *cp, const float *w,
                      const float *dy, const uint8_t *ws, float *dx);

#endif
