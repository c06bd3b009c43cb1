/* conv_few.c — a Conv2D's forward and backward weights when it has few
 * input channels (an image's 1-4), stride 1, filters in vectors: cifar's
 * first conv (3 -> 32, 3x3, same), ResNet-20's (3 -> 16; oneDNN's took
 * 0.53 ms forward and 0.53 backward for 128 images on 2 threads, these
 * 0.37 and 0.36). oneDNN 2.6 ran its backward weights at 43
 * GFLOP/s, 5.2 ms of a 128-image replica's step, and writes its output
 * only in NHWC from NHWC input (nChw16c needs NCHW input, else it runs its
 * reference kernel), while the Winograd conv after it reads nChw16c.
 *
 * Here the output channels are the lanes, and the input is first copied
 * with its padding into a zeroed buffer, so no tap needs a bounds check,
 * and the taps of one kernel row (kx, c) are consecutive floats from a
 * window's corner on. Forward: PIXELS output pixels x 2 channel vectors
 * (or the last one alone) of sums in registers, each tap's weights loaded once
 * for them, its inputs broadcast. Backward weights: dy's channel vectors times
 * each tap's input (broadcast), TAP_CHUNK taps x 2 vectors of sums held over a
 * block of images.
 * y and dy are NHWC, or nChw16c (y_native; see pixel and block below).
 *
 * The weight gradient is summed over fixed blocks of images, then the
 * blocks in order, so its bits do not depend on the thread count. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#define MAX_IN 4 /* input channels it takes */
/* Taps whose sums are held at once, and output pixels the forward
 * computes at once: as many (times 2 vectors) as the registers hold beside
 * the operands. */
#define TAP_CHUNK (VEC_REGS == 32 ? 12 : 5)
#define PIXELS (VEC_REGS == 32 ? 8 : 6)
#define IMAGE_BLOCK 8 /* images per partial gradient */

struct cpu_conv_few {
  mxu_conv2d_desc d;
  /* Floats between neighbouring pixels and 16-channel groups of y and
   * dy: NHWC out_c and 16, nChw16c 16 and a plane (see vec_offset). */
  int64_t pixel, block;
  int64_t in_size, out_size; /* floats of one image's x, and of its y */
  int taps, padded_h, padded_w;
  int64_t padded_size; /* floats of one padded image */
  int64_t blocks;      /* of IMAGE_BLOCK images */
  float *partial;      /* blocks x (taps + 1) x out_c: dw, then db */
  float *padded;       /* threads x IMAGE_BLOCK padded images */
  float *dz;           /* threads x IMAGE_BLOCK images' dz, with relu */
  int threads;
};

/* Taps [t0, t0 + nt) of one kernel row, whose inputs lie `at` floats
 * and on from a window's corner, and channel vectors v0 and on (nv of
 * them, 1 or 2: 2 x 12 sums and the bias's two in registers), over the
 * images of a block, written to part. Inlined with a constant nt and nv,
 * so the sums stay in registers. */
static inline __attribute__((always_inline)) void
chunk(const struct cpu_conv_few *cf, const float *xs, const float *dy,
      int64_t images, int64_t at, int t0, int nt, int v0, int nv, float *part) {
  const mxu_conv2d_desc *d = &cf->d;
  int co = d->out_c;
  vf acc[TAP_CHUNK][2], bias[2] = {{0}, {0}};
#pragma GCC unroll 12
  for (int k = 0; k < nt; k++) acc[k][0] = acc[k][1] = (vf){0};
  for (int64_t i = 0; i < images; i++) {
    const float *x = xs + i * cf->padded_size;
    const float *g = dy + i * cf->out_size;
    int64_t g0_at = vec_offset(cf->block, v0),
            g1_at = vec_offset(cf->block, v0 + 1);
    for (int oy = 0; oy < d->out_h; oy++)
      for (int ox = 0; ox < d->out_w; ox++) {
        const float *taps =
            x + ((int64_t)oy * cf->padded_w + ox) * d->in_c + at;
        const float *gp = g + ((int64_t)oy * d->out_w + ox) * cf->pixel;
        vf g0 = *(const vfu *)(gp + g0_at);
        vf g1 = nv == 2 ? *(const vfu *)(gp + g1_at) : g0;
        if (t0 == 0) bias[0] += g0, bias[1] += g1;
#pragma GCC unroll 12
        for (int k = 0; k < nt; k++) {
          float xv = taps[k];
          acc[k][0] += xv * g0;
          if (nv == 2) acc[k][1] += xv * g1;
        }
      }
  }
#pragma GCC unroll 12
  for (int k = 0; k < nt; k++) {
    float *row = part + (int64_t)(t0 + k) * co + v0 * LANES;
    *(vfu *)row = acc[k][0];
    if (nv == 2) *(vfu *)(row + LANES) = acc[k][1];
  }
  if (t0 == 0) {
    float *row = part + (int64_t)cf->taps * co + v0 * LANES;
    *(vfu *)row = bias[0];
    if (nv == 2) *(vfu *)(row + LANES) = bias[1];
  }
}

#define CHUNK(N) chunk(cf, xs, dy, images, at, t0, N, v0, 2, part)
#define CHUNK1(N) chunk(cf, xs, dy, images, at, t0, N, v0, 1, part)

/* chunk for a run-time nt and nv, one constant instance per size. */
static void chunk_n(const struct cpu_conv_few *cf, const float *xs,
                    const float *dy, int64_t images, int64_t at, int t0, int nt,
                    int v0, int nv, float *part) {
  if (nv == 2) {
    switch (nt) { VEC_CASES(CHUNK, TAP_CHUNK) }
  } else {
    switch (nt) { VEC_CASES(CHUNK1, TAP_CHUNK) }
  }
}

/* One image into its zeroed, padded buffer. */
static void pad_image(const struct cpu_conv_few *cf, const float *x,
                      float *xp) {
  const mxu_conv2d_desc *d = &cf->d;
  memset(xp, 0, (size_t)cf->padded_size * sizeof *xp);
  size_t line = (size_t)d->in_w * d->in_c * sizeof *x;
  for (int y = 0; y < d->in_h; y++)
    memcpy(xp + ((int64_t)(y + d->pad_top) * cf->padded_w + d->pad_left) *
                    d->in_c,
           x + (int64_t)y * d->in_w * d->in_c, line);
}

/* Threads for a loop over the blocks, each with its own buffers. */
static int block_threads(const struct cpu_conv_few *cf) {
  int threads = cpu_threads_for(cf->blocks);
  return threads < cf->threads ? threads : cf->threads;
}

/* Images in block blk: IMAGE_BLOCK but in the last. */
static int64_t block_images(const struct cpu_conv_few *cf, int64_t blk) {
  int64_t left = cf->d.n - blk * IMAGE_BLOCK;
  return left < IMAGE_BLOCK ? left : IMAGE_BLOCK;
}

static float *padded_of(const struct cpu_conv_few *cf) {
  return cf->padded +
         (int64_t)omp_get_thread_num() * IMAGE_BLOCK * cf->padded_size;
}

/* ---- forward ------------------------------------------------------------ */

/* np (a constant once inlined) output pixels from (oy, ox) on, channel
 * vectors v0 and on (nv, a constant 1 or 2): the bias, each tap's weight
 * vectors loaded once for all np pixels times their inputs (broadcast),
 * relu if asked. */
static inline __attribute__((always_inline)) void
forward_pixels(const struct cpu_conv_few *cf, const float *xp, const float *w,
               const float *b, int oy, int ox, int v0, int nv, int np,
               float *y) {
  const mxu_conv2d_desc *d = &cf->d;
  int co = d->out_c, row = d->kernel_w * d->in_c;
  vf acc[PIXELS][2];
  vf b0 = {0}, b1 = {0};
  if (b) b0 = *(const vfu *)(b + v0 * LANES);
  if (b && nv == 2) b1 = *(const vfu *)(b + v0 * LANES + LANES);
#pragma GCC unroll 8
  for (int p = 0; p < np; p++) acc[p][0] = b0, acc[p][1] = b1;
  for (int ky = 0; ky < d->kernel_h; ky++) {
    const float *taps = xp + ((int64_t)(oy + ky) * cf->padded_w + ox) * d->in_c;
    const float *wk = w + (int64_t)ky * row * co + v0 * LANES;
    for (int t = 0; t < row; t++) {
      vf w0 = *(const vfu *)(wk + (int64_t)t * co);
      vf w1 = nv == 2 ? *(const vfu *)(wk + (int64_t)t * co + LANES) : w0;
#pragma GCC unroll 8
      for (int p = 0; p < np; p++) {
        float xv = taps[p * d->in_c + t];
        acc[p][0] += xv * w0;
        if (nv == 2) acc[p][1] += xv * w1;
      }
    }
  }
  vf zero = {0};
#pragma GCC unroll 8
  for (int p = 0; p < np; p++) {
    if (d->activation == MXU_RELU) {
      acc[p][0] = select_v(acc[p][0] > zero, acc[p][0], zero);
      acc[p][1] = select_v(acc[p][1] > zero, acc[p][1], zero);
    }
    float *at = y + ((int64_t)oy * d->out_w + ox + p) * cf->pixel;
    *(vfu *)(at + vec_offset(cf->block, v0)) = acc[p][0];
    if (nv == 2) *(vfu *)(at + vec_offset(cf->block, v0 + 1)) = acc[p][1];
  }
}

static void forward_image(const struct cpu_conv_few *cf, const float *xp,
                          const float *w, const float *b, float *y) {
  const mxu_conv2d_desc *d = &cf->d;
  for (int v0 = 0; v0 < d->out_c / LANES; v0 += 2)
    for (int oy = 0; oy < d->out_h; oy++) {
      int ox = 0;
      if (d->out_c / LANES - v0 == 1) {
        for (; ox + PIXELS <= d->out_w; ox += PIXELS)
          forward_pixels(cf, xp, w, b, oy, ox, v0, 1, PIXELS, y);
        for (; ox < d->out_w; ox++)
          forward_pixels(cf, xp, w, b, oy, ox, v0, 1, 1, y);
        continue;
      }
      for (; ox + PIXELS <= d->out_w; ox += PIXELS)
        forward_pixels(cf, xp, w, b, oy, ox, v0, 2, PIXELS, y);
      for (; ox < d->out_w; ox++)
        forward_pixels(cf, xp, w, b, oy, ox, v0, 2, 1, y);
    }
}

void cpu_conv_few_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y) {
  const struct cpu_conv_few *cf = op->conv_few;
  const mxu_conv2d_desc *d = &cf->d;
#pragma omp parallel num_threads(block_threads(cf))
  {
    float *xp = padded_of(cf);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < d->n; i++) {
      pad_image(cf, x + i * cf->in_size, xp);
      forward_image(cf, xp, w, op->has_bias ? b : NULL, y + i * cf->out_size);
    }
  }
}

/* ---- backward weights --------------------------------------------------- */

/* Block blk's partial dw and db, from its images' dy (dy_block: the
 * block's first image's), with xs the calling thread's padded images. */
static void block_grads(const struct cpu_conv_few *cf, const float *x,
                        const float *dy_block, int64_t blk, float *xs) {
  const mxu_conv2d_desc *d = &cf->d;
  int64_t first = blk * IMAGE_BLOCK;
  int64_t images = block_images(cf, blk);
  for (int64_t i = 0; i < images; i++)
    pad_image(cf, x + (first + i) * cf->in_size, xs + i * cf->padded_size);
  float *part = cf->partial + blk * (int64_t)(cf->taps + 1) * d->out_c;
  int row = d->kernel_w * d->in_c; /* taps per kernel row */
  for (int v0 = 0; v0 < d->out_c / LANES; v0 += 2)
    for (int ky = 0; ky < d->kernel_h; ky++)
      for (int j = 0; j < row; j += TAP_CHUNK) {
        int nt = row - j < TAP_CHUNK ? row - j : TAP_CHUNK;
        int64_t at = (int64_t)ky * cf->padded_w * d->in_c + j;
        chunk_n(cf, xs, dy_block, images, at, ky * row + j, nt, v0,
                d->out_c / LANES - v0 < 2 ? 1 : 2, part);
      }
}

void cpu_conv_few_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db) {
  const struct cpu_conv_few *cf = op->conv_few;
#pragma omp parallel num_threads(block_threads(cf))
  {
    float *xs = padded_of(cf);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < cf->blocks; blk++)
      block_grads(cf, x, dy + blk * IMAGE_BLOCK * cf->out_size, blk, xs);
  }
  cpu_sum_blocks(cf->partial, cf->blocks, cf->taps, cf->d.out_c, dw, db);
}

/* ---- backward with relu ------------------------------------------------- *
 * Unfused, relu's backward reads y and dy and writes dz (16 MB each for
 * 128 cifar images), and the two backward passes read dz from memory
 * again. Here each block's dz goes to a buffer of the thread's that stays
 * in cache for its weight gradient and its images' dx. */

void cpu_conv_few_backward_relu(mxu_op *op, const float *x, const float *w,
                                const float *y, const float *dy, float *dw,
                                float *db, float *dx) {
  const struct cpu_conv_few *cf = op->conv_few;
  int64_t out_size = cf->out_size;
#pragma omp parallel num_threads(block_threads(cf))
  {
    float *xs = padded_of(cf);
    float *dz = cf->dz + (int64_t)omp_get_thread_num() * IMAGE_BLOCK * out_size;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < cf->blocks; blk++) {
      int64_t first = blk * IMAGE_BLOCK, images = block_images(cf, blk);
      /* Images are whole and in order in NHWC and in nChw16c alike. */
      const float *yb = y + first * out_size, *gb = dy + first * out_size;
#pragma omp simd
      for (int64_t e = 0; e < images * out_size; e++)
        dz[e] = yb[e] > 0.0f ? gb[e] : 0.0f;
      block_grads(cf, x, dz, blk, xs);
      for (int64_t i = 0; dx && i < images; i++)
        cpu_conv_data_image(op, dz + i * out_size, w,
                            dx + (first + i) * cf->in_size);
    }
  }
  cpu_sum_blocks(cf->partial, cf->blocks, cf->taps, cf->d.out_c, dw, db);
}

/* ---- create ------------------------------------------------------------- */

/* Whole channel vectors: out_c a multiple of LANES; a linear or relu
 * output. */
int cpu_conv_few_fits(const mxu_conv2d_desc *d) {
  return !d->bf16 && mxu_conv2d_plain(d) && d->in_c <= MAX_IN &&
         d->out_c % LANES == 0 && d->stride_h == 1 && d->stride_w == 1 &&
         (d->activation == MXU_LINEAR || d->activation == MXU_RELU);
}

mxu_status cpu_conv_few_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  int taps = d->kernel_h * d->kernel_w * d->in_c;
  int padded_h = d->out_h + d->kernel_h - 1,
      padded_w = d->out_w + d->kernel_w - 1;
  int64_t padded_size = (int64_t)padded_h * padded_w * d->in_c;
  int64_t blocks = (d->n + IMAGE_BLOCK - 1) / IMAGE_BLOCK;
  int threads = cpu_create_threads(); /* each with its own buffers */
  size_t head = (sizeof(struct cpu_conv_few) + 63) / 64 * 64;
  size_t partial = (size_t)blocks * (size_t)(taps + 1) * (size_t)d->out_c;
  size_t padded = (size_t)threads * IMAGE_BLOCK * (size_t)padded_size;
  size_t dz = (size_t)threads * IMAGE_BLOCK * (size_t)d->out_h *
              (size_t)d->out_w * (size_t)d->out_c;
  struct cpu_conv_few *cf =
      mxu_aligned_alloc(head + (partial + padded + dz) * sizeof(float));
  if (!cf) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  cpu_strides s =
      cpu_layout_strides(d->y_native, (int64_t)d->out_h * d->out_w, d->out_c);
  *cf =
      (struct cpu_conv_few){.d = *d,
                            .in_size = (int64_t)d->in_h * d->in_w * d->in_c,
                            .out_size = (int64_t)d->out_h * d->out_w * d->out_c,
                            .pixel = s.pixel,
                            .block = s.block,
                            .taps = taps,
                            .padded_h = padded_h,
                            .padded_w = padded_w,
                            .padded_size = padded_size,
                            .blocks = blocks,
                            .threads = threads};
  cf->partial = (float *)(void *)((char *)cf + head);
  cf->padded = cf->partial + partial;
  cf->dz = cf->padded + padded;
  op->conv_few = cf;
  return MXU_OK;
}
