/* conv_data.c — a Conv2D's backward data when it has few input channels
 * (an image's 1-4), stride 1. oneDNN 2.6 blocks the input channels of
 * dx by 16, so for cifar's first conv (3 -> 32, 3x3) it ran at 28 GFLOP/s
 * against 74 for the forward of the same shape: 8.2 ms of a 128-image
 * replica's step. Here each dx pixel sums its taps with the output
 * channels in vector lanes, one accumulator per input channel, and folds
 * the lanes at the end. Where a row's pixels see every kernel column,
 * QUAD of them (4, or 2 on AVX2) go together: each tap's weights are
 * loaded once for them, and their QUAD x nc sums fold in one transposing
 * tree (reduce)
 * rather than one lane by lane each. The order of every sum is fixed. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <stdint.h>
#define MAX_IN 4 /* input channels it takes */
/* Pixels the inner loops take together: their MAX_IN sums fill a vector. */
#define QUAD (LANES / MAX_IN)

struct cpu_conv_data {
  mxu_conv2d_desc d;
  /* Between neighbouring pixels and 16-channel groups of dy: NHWC, or
   * nChw16c (y_native); see vec_offset. */
  int64_t pixel, block;
};

/* One tap's contribution to a pixel's nc sums: dy of the output pixel it
 * reaches (g) times the tap's weights (wt, [nc][co]), two channel vectors
 * a step into two accumulators, so that with a set per tap parity twelve
 * FMA chains (three input channels) run side by side. */
static inline __attribute__((always_inline)) void tap(vf acc[2][MAX_IN],
                                                      const float *g,
                                                      const float *wt, int co,
                                                      int nc, int64_t block) {
  int v = 0;
  for (; v + 2 * LANES <= co; v += 2 * LANES) {
    vf a = *(const vfu *)(g + vec_offset(block, v / LANES)),
       b = *(const vfu *)(g + vec_offset(block, v / LANES + 1));
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
      acc[0][c] += *(const vfu *)(wt + c * co + v) * a;
      acc[1][c] += *(const vfu *)(wt + c * co + v + LANES) * b;
    }
  }
  if (v < co) {
    vf a = *(const vfu *)(g + vec_offset(block, v / LANES));
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
      acc[0][c] += *(const vfu *)(wt + c * co + v) * a;
  }
}

static inline int max_int(int a, int b) { return a > b ? a : b; }
static inline int min_int(int a, int b) { return a < b ? a : b; }

/* Lane i of the result is the sum of v[i]'s lanes: pairs of vectors fold
 * into halves, then quarters, eighths (and sixteenths), each level two
 * two-input permutes and an add. */
static inline __attribute__((always_inline)) vf reduce(vf v[LANES]) {
#if LANES == 16
  static const vi lo[4] = {
      {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
      {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
      {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
      {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
  static const vi hi[4] = {
      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
      {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
      {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31},
      {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
#elif LANES == 8
  static const vi lo[3] = {{0, 1, 2, 3, 8, 9, 10, 11},
                           {0, 1, 4, 5, 8, 9, 12, 13},
                           {0, 2, 4, 6, 8, 10, 12, 14}};
  static const vi hi[3] = {{4, 5, 6, 7, 12, 13, 14, 15},
                           {2, 3, 6, 7, 10, 11, 14, 15},
                           {1, 3, 5, 7, 9, 11, 13, 15}};
#else
  static const vi lo[2] = {{0, 1, 4, 5}, {0, 2, 4, 6}};
  static const vi hi[2] = {{2, 3, 6, 7}, {1, 3, 5, 7}};
#endif
#pragma GCC unroll 4
  for (int level = 0, n = LANES; n > 1; level++, n /= 2)
#pragma GCC unroll 8
    for (int k = 0; k < n / 2; k++)
      v[k] = shuffle2(v[2 * k], v[2 * k + 1], lo[level]) +
             shuffle2(v[2 * k], v[2 * k + 1], hi[level]);
  return v[0];
}

/* dx at QUAD pixels from (iy, ix) on, each of which sees every kernel
 * column: over the kernel rows whose output row exists, each tap's
 * weights (nc vectors a channel vector) loaded once for the QUAD pixels'
 * dy. */
static inline __attribute__((always_inline)) void
quad(const struct cpu_conv_data *cd, const float *dy, const float *w, int iy,
     int ix, int nc, float *dx) {
  const mxu_conv2d_desc *d = &cd->d;
  int64_t px = cd->pixel, bl = cd->block;
  int co = d->out_c, ty = iy + d->pad_top, tx = ix + d->pad_left;
  vf acc[LANES] = {{0}};
  int ky0 = max_int(0, ty - d->out_h + 1), ky1 = min_int(d->kernel_h, ty + 1);
  for (int ky = ky0; ky < ky1; ky++) {
    const float *row = dy + (int64_t)(ty - ky) * d->out_w * px;
    for (int kx = 0; kx < d->kernel_w; kx++) {
      const float *wt = w + (int64_t)(ky * d->kernel_w + kx) * nc * co;
      const float *g = row + (int64_t)(tx - kx) * px;
      for (int v = 0; v < co / LANES; v++) {
        vf wv[MAX_IN];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
          wv[c] = *(const vfu *)(wt + c * co + v * LANES);
#pragma GCC unroll 4
        for (int p = 0; p < QUAD; p++) {
          vf gv = *(const vfu *)(g + p * px + vec_offset(bl, v));
#pragma GCC unroll 4
          for (int c = 0; c < nc; c++) acc[p * nc + c] += gv * wv[c];
        }
      }
    }
  }
  vf sums = reduce(acc);
  /* The QUAD pixels' nc channels are consecutive in dx, as in sums. */
  for (int k = 0; k < QUAD * nc; k++) dx[k] = sums[k];
}

/* dx at input pixel (iy, ix) of one image, nc input channels (a constant
 * once inlined): over the taps whose output pixel exists, that pixel's dy
 * times the tap's weights for channel c, lanes folded at the end. */
static inline __attribute__((always_inline)) void
pixel(const struct cpu_conv_data *cd, const float *dy, const float *w, int iy,
      int ix, int nc, float *dx) {
  const mxu_conv2d_desc *d = &cd->d;
  int64_t px = cd->pixel, bl = cd->block;
  vf acc[2][2][MAX_IN] = {{{{0}}}};
  int co = d->out_c, ty = iy + d->pad_top, tx = ix + d->pad_left;
  /* Output pixel (ty - ky, tx - kx) must be inside the output. */
  int ky0 = max_int(0, ty - d->out_h + 1), ky1 = min_int(d->kernel_h, ty + 1);
  int kx0 = max_int(0, tx - d->out_w + 1), kx1 = min_int(d->kernel_w, tx + 1);
  for (int ky = ky0; ky < ky1; ky++) {
    const float *row = dy + (int64_t)(ty - ky) * d->out_w * px;
    const float *wrow = w + (int64_t)ky * d->kernel_w * nc * co;
    int kx = kx0;
    for (; kx + 1 < kx1; kx += 2) {
      tap(acc[0], row + (int64_t)(tx - kx) * px, wrow + kx * nc * co, co, nc,
          bl);
      tap(acc[1], row + (int64_t)(tx - kx - 1) * px, wrow + (kx + 1) * nc * co,
          co, nc, bl);
    }
    if (kx < kx1)
      tap(acc[0], row + (int64_t)(tx - kx) * px, wrow + kx * nc * co, co, nc,
          bl);
  }
#pragma GCC unroll 4
  for (int c = 0; c < nc; c++)
    dx[c] =
        lane_sum((acc[0][0][c] + acc[0][1][c]) + (acc[1][0][c] + acc[1][1][c]));
}

static inline __attribute__((always_inline)) void
image(const struct cpu_conv_data *cd, const float *dy, const float *w, int nc,
      float *dx) {
  const mxu_conv2d_desc *d = &cd->d;
  /* Pixels that see every kernel column: tx - kx inside the output for
   * all kx. */
  int first = max_int(0, d->kernel_w - 1 - d->pad_left);
  int last = min_int(d->in_w, d->out_w - d->pad_left); /* past the end */
  for (int iy = 0; iy < d->in_h; iy++) {
    float *out = dx + (int64_t)iy * d->in_w * nc;
    int ix = 0;
    for (; ix < d->in_w; ix++) {
      if (ix >= first && ix + QUAD <= last) {
        quad(cd, dy, w, iy, ix, nc, out + ix * nc);
        ix += QUAD - 1;
      } else {
        pixel(cd, dy, w, iy, ix, nc, out + ix * nc);
      }
    }
  }
}

void cpu_conv_data_image(const mxu_op *op, const float *dy, const float *w,
                         float *dx) {
  const struct cpu_conv_data *cd = op->conv_data;
  switch (cd->d.in_c) {
  case 1: image(cd, dy, w, 1, dx); break;
  case 2: image(cd, dy, w, 2, dx); break;
  case 3: image(cd, dy, w, 3, dx); break;
  default: image(cd, dy, w, 4, dx); break;
  }
}

void cpu_conv_data_backward(mxu_op *op, const float *dy, const float *w,
                            float *dx) {
  const mxu_conv2d_desc *d = &op->conv_data->d;
  int64_t in_size = (int64_t)d->in_h * d->in_w * d->in_c;
  int64_t out_size = (int64_t)d->out_h * d->out_w * d->out_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(d->n))
  for (int i = 0; i < d->n; i++)
    cpu_conv_data_image(op, dy + i * out_size, w, dx + i * in_size);
}

int cpu_conv_data_fits(const mxu_conv2d_desc *d) {
  return !d->bf16 && mxu_conv2d_plain(d) && d->in_c <= MAX_IN &&
         d->out_c % LANES == 0 && d->stride_h == 1 && d->stride_w == 1;
}

mxu_status cpu_conv_data_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  op->conv_data = mxu_aligned_alloc(sizeof *op->conv_data);
  if (!op->conv_data) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  cpu_strides s =
      cpu_layout_strides(d->y_native, (int64_t)d->out_h * d->out_w, d->out_c);
  *op->conv_data = (struct cpu_conv_data){*d, s.pixel, s.block};
  return MXU_OK;
}
