/* conv_bf16.c — a bf16 Conv2D's forward where its 16 input channels are
 * too few for oneDNN 2.6's brgemm kernels to run them well: ResNet-20's
 * 3x3 16 -> 16 convs on 32x32 images ran at half of vdpbf16ps' rate
 * there, 1.37-1.41 ms a forward of 128 images on 2 threads in the model
 * (rounding x to bf16 in a pass of its own included), 0.92-0.93 here;
 * ResNet-20 in mixed_bfloat16 1.063x (median of 7 alternating ratios).
 * With 32 input channels oneDNN's ran within 15% of these loops.
 *
 * Each image is first rounded into a zeroed bf16 buffer with its
 * padding, so no tap needs a bounds check, and a pixel's 16 channels are
 * 8 pairs of consecutive bf16 (32 bits each). A tile is 16 output pixels
 * of a row by one vector of 16 output channels: for each tap and pair of
 * input channels, one vector of the kernel's pairs (the two channels'
 * weights interleaved for the 16 outputs) meets each pixel's pair,
 * broadcast, in one vdpbf16ps. With 3 taps a kernel row, a pixel's pair
 * is broadcast once for the three kernel vectors it meets (18 broadcasts
 * for 48 vdpbf16ps, where each took its own: 0.75 -> 0.70 ms for
 * ResNet-20's 16 -> 16 warm; ResNet-20 in mixed_bfloat16 1.004x, all of 5
 * alternating ratios above 1). The sums are float32, as oneDNN's; the
 * products of bf16 values are exact, so only the order of the sums
 * differs from oneDNN's. Each output is computed by the same operations
 * whatever the thread count. x may come in bf16 already (x_bf16: it is
 * then copied) and y may go out in bf16 (y_bf16).
 *
 * The backward passes stay on oneDNN's primitives of the same op, but
 * the weight gradient of 3x3 kernels (conv_bf16_grad.c's loops, which
 * read x as it comes) and the backward data of 3x3 convs of 16 outputs:
 * its 16 inputs are dy, the conv of dy by the kernel turned round (taps
 * reversed, inputs and outputs swapped) that these loops run as a
 * forward of their own (conv_bf16_data; dy and dx in bf16 or float32
 * alike). For oneDNN's weight gradient the rounded x goes into its copy
 * as well (from memory, in the backward, that pass over x cost more than
 * the forward saved); their other copies the primitives make themselves
 * (cpu_weighted_new_inputs). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#define ROW_TAPS 3 /* a kernel row's taps where they share broadcasts */

#ifdef VEC_BF16

#define IN_C 16   /* input channels it takes: 8 pairs */
#define PIXELS 16 /* output pixels a tile holds */

struct cpu_conv_bf16 {
  mxu_conv2d_desc d;
  int padded_w;
  int64_t padded_size; /* bf16 values of one padded image */
  int threads;
  uint32_t *w16;    /* [taps][IN_C / 2][out_c]: each a pair of bf16 */
  uint16_t *padded; /* threads x one padded image */
  /* For backward data (the conv of dy, as d describes it, by the kernel
   * turned round): that kernel, HWIO, float32. */
  float *turned;
};

/* The kernel ([kh][kw][IN_C][out_c], HWIO) as pairs of input channels:
 * element (tap, p, o) holds bf16 of w[tap][2p][o] low, of w[tap][2p+1][o]
 * high, so that a vector of 16 outputs meets a pixel's pair p. */
static void pair_kernel(const struct cpu_conv_bf16 *cb, const float *w) {
  int taps = cb->d.kernel_h * cb->d.kernel_w, co = cb->d.out_c;
  for (int t = 0; t < taps; t++)
    for (int p = 0; p < IN_C / 2; p++) {
      const float *lo = w + ((int64_t)t * IN_C + 2 * p) * co, *hi = lo + co;
      uint32_t *to = cb->w16 + ((int64_t)t * (IN_C / 2) + p) * co;
      for (int o = 0; o < co; o += LANES)
        _mm512_storeu_si512(to + o, pair_vector(*(const vfu *)(lo + o),
                                                *(const vfu *)(hi + o)));
    }
}

/* Image x rounded to bf16 (or copied, x_bf16) into xp, its padding
 * zero, and into x16 (the backward weights' copy, NHWC) unless NULL. */
static void pad_image(const struct cpu_conv_bf16 *cb, const void *x,
                      uint16_t *xp, uint16_t *x16) {
  const mxu_conv2d_desc *d = &cb->d;
  memset(xp, 0, (size_t)cb->padded_size * sizeof *xp);
  for (int y = 0; y < d->in_h; y++) {
    int64_t at = (int64_t)y * d->in_w * IN_C;
    uint16_t *to =
        xp + ((int64_t)(y + d->pad_top) * cb->padded_w + d->pad_left) * IN_C;
    for (int i = 0; i < d->in_w; i++) {
      __m256i h = load_bf16((const char *)x + at * cpu_value_bytes(d->x_bf16),
                            d->x_bf16);
      _mm256_storeu_si256((__m256i *)(to + i * IN_C), h);
      if (x16) _mm256_storeu_si256((__m256i *)(x16 + at), h);
      at += IN_C;
    }
  }
}

/* The pair at p in every lane, loaded so: GCC otherwise kept pixels'
 * pairs that several taps share in registers and broadcast from there,
 * a shuffle each on the one port they go to (1.5 against 1.3 ms for
 * ResNet-20's 16 -> 16 forwards). */
static inline __attribute__((always_inline)) __m512bh
broadcast(const uint32_t *p) {
  __m512i v;
  __asm__("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
  return (__m512bh)v;
}

/* np output pixels (a constant once inlined) of row oy from column ox
 * on, output channels v * 16 on: the bias, every tap's 8 products, relu
 * if asked, stored. */
static inline __attribute__((always_inline)) void
tile(const struct cpu_conv_bf16 *cb, const uint16_t *xp, const float *b, int oy,
     int ox, int v, int np, int kw, int stream, float *y) {
  const mxu_conv2d_desc *d = &cb->d;
  int co = d->out_c;
  __m512 acc[PIXELS];
  __m512 bias = b ? _mm512_loadu_ps(b + v * LANES) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < np; p++) acc[p] = bias;
  for (int ky = 0; ky < d->kernel_h; ky++) {
    const uint32_t *row =
        (const uint32_t *)(xp +
                           ((int64_t)(oy + ky) * cb->padded_w + ox) * IN_C);
    const uint32_t *wt =
        cb->w16 + (int64_t)ky * d->kernel_w * (IN_C / 2) * co + v * LANES;
    if (kw == ROW_TAPS) /* each pixel's pair broadcast once for 3 taps */
#pragma GCC unroll 8
      for (int pair = 0; pair < IN_C / 2; pair++) {
        __m512bh w[ROW_TAPS];
#pragma GCC unroll 3
        for (int kx = 0; kx < ROW_TAPS; kx++)
          w[kx] = (__m512bh)_mm512_loadu_si512(
              wt + ((int64_t)kx * (IN_C / 2) + pair) * co);
#pragma GCC unroll 18
        for (int q = 0; q < np + ROW_TAPS - 1; q++) {
          __m512bh x = broadcast(row + q * (IN_C / 2) + pair);
#pragma GCC unroll 3
          for (int kx = 0; kx < ROW_TAPS; kx++)
            if (q - kx >= 0 && q - kx < np)
              acc[q - kx] = _mm512_dpbf16_ps(acc[q - kx], w[kx], x);
        }
      }
    else
      for (int kx = 0; kx < d->kernel_w; kx++)
#pragma GCC unroll 8
        for (int pair = 0; pair < IN_C / 2; pair++) {
          __m512bh w = (__m512bh)_mm512_loadu_si512(
              wt + ((int64_t)kx * (IN_C / 2) + pair) * co);
#pragma GCC unroll 16
          for (int p = 0; p < np; p++)
            acc[p] = _mm512_dpbf16_ps(
                acc[p], w, broadcast(row + (p + kx) * (IN_C / 2) + pair));
        }
  }
  int64_t at = ((int64_t)oy * d->out_w + ox) * co + v * LANES;
#pragma GCC unroll 16
  for (int p = 0; p < np; p++) {
    if (d->activation == MXU_RELU)
      acc[p] = _mm512_max_ps(acc[p], _mm512_setzero_ps());
    if (!d->y_bf16) {
      store_vec(y + at + (int64_t)p * co, (vf)acc[p], stream);
      continue;
    }
    __m256i h = (__m256i)_mm512_cvtneps_pbh(acc[p]);
    __m256i *to = (__m256i *)((uint16_t *)y + at + (int64_t)p * co);
    if (stream)
      _mm256_stream_si256(to, h);
    else
      _mm256_storeu_si256(to, h);
  }
}

#define TILE(N) tile(cb, xp, b, oy, ox, v, N, kw, stream, y)
#define TILE3(N) tile(cb, xp, b, oy, ox, v, N, ROW_TAPS, stream, y)

/* One image's outputs, past the cache where stream (y goes to the next
 * layer from memory anyway: 1.5 against 1.3 ms with plain stores);
 * meanwhile the next image's x (next, or NULL) is asked for, a row's
 * share with each output row. */
static void image(const struct cpu_conv_bf16 *cb, const uint16_t *xp,
                  const float *b, const void *next, int stream, float *y) {
  const mxu_conv2d_desc *d = &cb->d;
  int64_t in_bytes =
      (int64_t)d->in_h * d->in_w * IN_C * cpu_value_bytes(d->x_bf16);
  int64_t share = (in_bytes + d->out_h - 1) / d->out_h;
  for (int oy = 0; oy < d->out_h; oy++) {
    if (next)
      for (int64_t at = oy * share; at < (oy + 1) * share && at < in_bytes;
           at += 64)
        __builtin_prefetch((const char *)next + at);
    for (int v = 0; v < d->out_c / LANES; v++) {
      int ox = 0;
      if (d->kernel_w == ROW_TAPS) {
        for (; ox + PIXELS <= d->out_w; ox += PIXELS) TILE3(PIXELS);
        switch (d->out_w - ox) { VEC_CASES(TILE3, PIXELS - 1) }
        continue;
      }
      int kw = d->kernel_w;
      for (; ox + PIXELS <= d->out_w; ox += PIXELS) TILE(PIXELS);
      switch (d->out_w - ox) { VEC_CASES(TILE, PIXELS - 1) }
    }
  }
}

#undef TILE
#undef TILE3

/* cb's conv of x (w paired in cb->w16) into y, x rounded into x16 too
 * unless NULL. */
static void run(const struct cpu_conv_bf16 *cb, const void *x, const float *b,
                uint16_t *x16, void *y) {
  const mxu_conv2d_desc *d = &cb->d;
  int64_t in_size = (int64_t)d->in_h * d->in_w * IN_C;
  int64_t out_size = (int64_t)d->out_h * d->out_w * d->out_c;
  int64_t xv = cpu_value_bytes(d->x_bf16), yv = cpu_value_bytes(d->y_bf16);
  int threads = cpu_threads_for(d->n);
  if (threads > cb->threads) threads = cb->threads;
  int stream = cpu_streams(y, (size_t)(d->n * out_size * yv));
#pragma omp parallel num_threads(threads)
  {
    uint16_t *xp = cb->padded + omp_get_thread_num() * cb->padded_size;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < d->n; i++) {
      const char *xi = (const char *)x + i * in_size * xv;
      pad_image(cb, xi, xp, x16 ? x16 + i * in_size : NULL);
      image(cb, xp, b, i + 1 < d->n ? xi + in_size * xv : NULL, stream,
            (float *)(void *)((char *)y + i * out_size * yv));
    }
    if (stream) cpu_stream_fence();
  }
}

void cpu_conv_bf16_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y) {
  const struct cpu_conv_bf16 *cb = op->conv_bf16;
  /* A new step: the backward passes make their copies but of x, which
   * this writes as it rounds it. */
  cpu_weighted_new_inputs(op);
  uint16_t *x16 = op->conv_bf16_grad ? NULL : cpu_weighted_bf16_x(op);
  pair_kernel(cb, w);
  run(cb, x, op->has_bias ? b : NULL, x16, y);
  if (x16) cpu_weighted_made_x(op, x);
}

/* dx[a][i] sums dy[a - t + pad][o] w[t][i][o] over taps t and outputs o:
 * the conv of dy by the kernel turned round (w'[kh-1-ky][kw-1-kx][o][i] =
 * w[ky][kx][i][o]) with the padding's complement. */
int cpu_conv_bf16_data(mxu_op *op, const float *dy, const float *w, float *dx) {
  if (dy == op->diff_dst_copy) return 0; /* a fused pooling's, blocked */
  const struct cpu_conv_bf16 *cb = op->conv_bf16_data;
  const mxu_conv2d_desc *d = &cb->d;
  int kh = d->kernel_h, kw = d->kernel_w, ci = d->in_c, co = d->out_c;
  for (int ky = 0; ky < kh; ky++)
    for (int kx = 0; kx < kw; kx++) {
      const float *from =
          w + ((int64_t)(kh - 1 - ky) * kw + kw - 1 - kx) * co * ci;
      float *to = cb->turned + ((int64_t)ky * kw + kx) * ci * co;
      for (int i = 0; i < ci; i++)
        for (int o = 0; o < co; o++) to[i * co + o] = from[o * ci + i];
    }
  pair_kernel(cb, cb->turned);
  run(cb, dy, NULL, NULL, dx);
  return 1;
}

#else

/* Never attached where the loops are not built (cpu_conv_bf16_fits), but
 * conv.c's dispatch names it. */
void cpu_conv_bf16_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y) {
  (void)op;
  (void)x;
  (void)w;
  (void)b;
  (void)y;
}

int cpu_conv_bf16_data(mxu_op *op, const float *dy, const float *w, float *dx) {
  (void)op;
  (void)dy;
  (void)w;
  (void)dx;
  return 0;
}

#endif

/* A bf16 conv of 16 input channels, stride 1, whole vectors of outputs,
 * linear or relu, NHWC in and out, on a CPU with AVX512_BF16. */
int cpu_conv_bf16_fits(const mxu_conv2d_desc *d) {
#ifdef VEC_BF16
  return d->bf16 && mxu_conv2d_plain(d) && d->in_c == IN_C &&
         d->out_c % LANES == 0 && d->stride_h == 1 && d->stride_w == 1 &&
         !d->x_native && !d->y_native &&
         (d->activation == MXU_LINEAR || d->activation == MXU_RELU);
#else
  (void)d;
  return 0;
#endif
}

#ifdef VEC_BF16
/* The loops' record for conv d, with room for the turned kernel where it
 * is a backward data's (turned). */
static mxu_status make(const mxu_conv2d_desc *d, int turned,
                       struct cpu_conv_bf16 **out) {
  int padded_h = d->out_h + d->kernel_h - 1,
      padded_w = d->out_w + d->kernel_w - 1;
  /* whole lines a thread, so each buffer starts on one */
  int64_t padded_size = ((int64_t)padded_h * padded_w * IN_C + 31) / 32 * 32;
  int threads = cpu_create_threads();
  size_t head = (sizeof(struct cpu_conv_bf16) + 63) / 64 * 64;
  size_t taps = (size_t)d->kernel_h * d->kernel_w;
  size_t w16 = taps * (IN_C / 2) * d->out_c * sizeof(uint32_t);
  w16 = (w16 + 63) / 64 * 64;
  size_t kernel = turned ? taps * IN_C * d->out_c * sizeof(float) : 0;
  struct cpu_conv_bf16 *cb = mxu_aligned_alloc(
      head + w16 + kernel +
      (size_t)threads * (size_t)padded_size * sizeof(uint16_t));
  if (!cb) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  *cb = (struct cpu_conv_bf16){.d = *d,
                               .padded_w = padded_w,
                               .padded_size = padded_size,
                               .threads = threads};
  cb->w16 = (uint32_t *)(void *)((char *)cb + head);
  if (turned) cb->turned = (float *)(void *)((char *)cb + head + w16);
  cb->padded = (uint16_t *)(void *)((char *)cb + head + w16 + kernel);
  *out = cb;
  return MXU_OK;
}
#endif

mxu_status cpu_conv_bf16_attach(mxu_op *op, const mxu_conv2d_desc *d) {
#ifdef VEC_BF16
  return make(d, 0, &op->conv_bf16);
#else
  (void)op;
  (void)d;
  return mxu_fail(MXU_ERR_UNSUPPORTED, "conv2d: no AVX512_BF16 in this build");
#endif
}

/* The conv whose forward is d's backward data: dy in, dx out, the kernel
 * turned round, each pad the rest of the kernel's reach. */
static mxu_conv2d_desc turned_desc(const mxu_conv2d_desc *d) {
  mxu_conv2d_desc t = *d;
  t.in_h = d->out_h, t.in_w = d->out_w, t.in_c = d->out_c;
  t.out_h = d->in_h, t.out_w = d->in_w, t.out_c = d->in_c;
  t.pad_top = d->kernel_h - 1 - d->pad_top;
  t.pad_bottom = d->kernel_h - 1 - d->pad_bottom;
  t.pad_left = d->kernel_w - 1 - d->pad_left;
  t.pad_right = d->kernel_w - 1 - d->pad_right;
  t.has_bias = 0;
  t.activation = MXU_LINEAR;
  t.x_bf16 = d->dy_bf16, t.y_bf16 = d->dx_bf16;
  t.dx_bf16 = t.dy_bf16 = 0;
  return t;
}

/* A bf16 conv of 16 outputs at stride 1 whose pads leave no output pixel
 * without an input one, whose backward data is then such a conv; with
 * kernel rows of 3 (ResNet-20's 16 -> 16: 0.77 -> 0.72 ms warm against
 * oneDNN's, the model 1.014x; but MobileNetV2's 1x1 32 -> 16 0.30 ->
 * 0.34). */
int cpu_conv_bf16_data_fits(const mxu_conv2d_desc *d) {
  mxu_conv2d_desc t = turned_desc(d);
  return d->kernel_w == ROW_TAPS && d->stride_h == 1 && d->stride_w == 1 &&
         t.pad_top >= 0 && t.pad_bottom >= 0 && t.pad_left >= 0 &&
         t.pad_right >= 0 && cpu_conv_bf16_fits(&t);
}

mxu_status cpu_conv_bf16_data_attach(mxu_op *op, const mxu_conv2d_desc *d) {
#ifdef VEC_BF16
  mxu_conv2d_desc t = turned_desc(d);
  return make(&t, 1, &op->conv_bf16_data);
#else
  (void)op;
  (void)d;
  return mxu_fail(MXU_ERR_UNSUPPORTED, "conv2d: no AVX512_BF16 in this build");
#endif
}
