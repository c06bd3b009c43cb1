/* conv_dw.c — a DepthwiseConv2D's backward weights (one filter per
 * channel, float32, NHWC), its backward data where strided or on tiny
 * images (see data_image), and its forward where oneDNN has no kernel of
 * its own for the shape. oneDNN 2.6's jit kernels want images large
 * enough; MobileNetV2 at 32x32 ends in 4x4, 2x2 and 1x1 images of 384-960
 * channels, where its weight gradient fell back to a GEMM per channel:
 * 60 ms for a layer that is 1.1 M multiply-adds, 224 of the model's 505
 * ms a step of 128 on an AVX2 EPYC; EfficientNetB0's 5x5 forward on 1x1
 * images of 1152 channels, 24-39 ms a layer.
 *
 * Here the channels are the lanes. The weight gradient goes through an
 * image row by row: for each tap, its products along the output row are
 * summed in registers and then added to the tap's sums, which (taps x
 * channels, a few KB) stay in L1. (Holding one channel vector's sums in
 * registers and streaming the block once per vector ran 1.5-2.5x slower:
 * x went through the cache once per vector.) Where a window lies inside
 * the image, no tap is bounds-checked. The gradient is summed over fixed
 * blocks of images, then the blocks in order, so its bits do not depend
 * on the thread count. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <stdint.h>
#include <string.h>

#define IMAGE_BLOCK 8 /* images per partial gradient */
#define MAX_TAPS 64   /* kernel taps (kh x kw) the op takes */

struct cpu_conv_dw {
  mxu_conv2d_desc d;
  int own_forward; /* oneDNN's forward is generic: run forward_image */
  int own_data;    /* strided or tiny images: run data_image */
  int taps;
  int64_t blocks;      /* of IMAGE_BLOCK images */
  float *partial;      /* blocks x (taps + 1) x c: dw, then db */
  int tap_y[MAX_TAPS]; /* tap t's row and column offset from a window's corner
                        */
  int tap_x[MAX_TAPS];
  /* Output rows and columns [lo, hi) whose windows lie inside the image:
   * there no tap needs a bounds check. */
  int row_lo, row_hi, col_lo, col_hi;
  /* Output columns [lo, hi) where tap t lands inside the image. */
  int tap_col_lo[MAX_TAPS], tap_col_hi[MAX_TAPS];
};

/* Output (oy, ox)'s window: its corner in the input (y0, x0), and
 * whether it lies inside the image (then no tap needs a check). */
static inline int corner(const struct cpu_conv_dw *cd, int oy, int ox, int *y0,
                         int *x0) {
  const mxu_conv2d_desc *d = &cd->d;
  *y0 = oy * d->stride_h - d->pad_top;
  *x0 = ox * d->stride_w - d->pad_left;
  return oy >= cd->row_lo && oy < cd->row_hi && ox >= cd->col_lo &&
         ox < cd->col_hi;
}

/* Where tap t of the window at (y0, x0) reads, in floats from the image's
 * start, or -1 where it falls on padding. */
static inline int64_t tap_from(const struct cpu_conv_dw *cd, int y0, int x0,
                               int inside, int t) {
  const mxu_conv2d_desc *d = &cd->d;
  int iy = y0 + cd->tap_y[t], ix = x0 + cd->tap_x[t];
  if (!inside && (iy < 0 || iy >= d->in_h || ix < 0 || ix >= d->in_w))
    return -1;
  return ((int64_t)iy * d->in_w + ix) * d->in_c;
}

/* ---- forward ------------------------------------------------------------ */

/* One image: each output pixel's channel vectors, the bias plus each tap
 * that lands inside the image. */
static void forward_image(const struct cpu_conv_dw *cd, const float *x,
                          const float *w, const float *b, float *y) {
  const mxu_conv2d_desc *d = &cd->d;
  int64_t c = d->in_c;
  for (int oy = 0; oy < d->out_h; oy++)
    for (int ox = 0; ox < d->out_w; ox++, y += c) {
      int y0, x0, inside = corner(cd, oy, ox, &y0, &x0);
      for (int64_t at = 0; at < c; at += LANES) {
        vf acc = b ? *(const vfu *)(b + at) : (vf){0};
        for (int t = 0; t < cd->taps; t++) {
          int64_t from = tap_from(cd, y0, x0, inside, t);
          if (from >= 0)
            acc +=
                *(const vfu *)(x + from + at) * *(const vfu *)(w + t * c + at);
        }
        if (d->activation == MXU_RELU) acc = select_v(acc > 0.0f, acc, (vf){0});
        *(vfu *)(y + at) = acc;
      }
    }
}

int cpu_conv_dw_own_forward(const mxu_op *op) {
  return op->conv_dw && op->conv_dw->own_forward;
}

int cpu_conv_dw_own_data(const mxu_op *op) {
  return op->conv_dw && op->conv_dw->own_data;
}

/* Each image on its own: any split gives the same bits. */
void cpu_conv_dw_forward(mxu_op *op, const float *x, const float *w,
                         const float *b, float *y) {
  const struct cpu_conv_dw *cd = op->conv_dw;
  const mxu_conv2d_desc *d = &cd->d;
  int64_t in_size = (int64_t)d->in_h * d->in_w * d->in_c,
          out_size = (int64_t)d->out_h * d->out_w * d->in_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(d->n))
  for (int64_t i = 0; i < d->n; i++)
    forward_image(cd, x + i * in_size, w, op->has_bias ? b : NULL,
                  y + i * out_size);
}

/* ---- backward weights --------------------------------------------------- */

/* The product of x and g, channel vector v from xp and gp. */
#define PRODUCT(xp, gp, v)                                                     \
  (*(const vfu *)((xp) + (v)*LANES) * *(const vfu *)((gp) + (v)*LANES))

/* part[0, c) += the sum over n pixels of x times g, the pixels xstep and
 * gstep floats apart: four channel vectors at a time summed along the row
 * in registers, then added to part once. (Named sums, not an array: GCC
 * kept an array of them in memory, 2x slower. Eight sums, even and odd
 * pixels apart, measured no faster.) */
static inline void row_dot(const float *x, int64_t xstep, const float *g,
                           int64_t gstep, int n, int64_t c, float *part) {
  int64_t at = 0;
  for (; at + 4 * LANES <= c; at += 4 * LANES) {
    vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (int k = 0; k < n; k++) {
      const float *xp = x + k * xstep + at, *gp = g + k * gstep + at;
      s0 += PRODUCT(xp, gp, 0), s1 += PRODUCT(xp, gp, 1);
      s2 += PRODUCT(xp, gp, 2), s3 += PRODUCT(xp, gp, 3);
    }
    *(vfu *)(part + at) += s0;
    *(vfu *)(part + at + LANES) += s1;
    *(vfu *)(part + at + 2 * LANES) += s2;
    *(vfu *)(part + at + 3 * LANES) += s3;
  }
  for (; at < c; at += LANES) {
    vf sum = {0};
    for (int k = 0; k < n; k++)
      sum += PRODUCT(x + k * xstep + at, g + k * gstep + at, 0);
    *(vfu *)(part + at) += sum;
  }
}

/* part[t][c] += x at tap t times dy, part[taps][c] += dy, over image i's
 * output pixels: row by row, each tap's products summed along the row in
 * registers (its columns inside the image known up front), part written
 * once per row and tap. Adding each pixel's products to part in L1 (a load
 * and a store per multiply-add) ran up to 2x slower (harness, 2 threads,
 * best of 5: 16x16 of 32 at 128 images 0.66 -> 0.37 ms, EfficientNet's
 * 5x5 on 8x8 of 144 at 64 0.83 -> 0.42, 8x8 and 4x4 of 144-192 1.1-1.2x;
 * at stride 2 on 16x16 of 96 0.67 -> 0.84 ms in one run, 0.54 -> 0.45 in
 * another). The three taps of a 3-wide row at once (dy loaded once for
 * them, x in order) measured the same (0.41-0.36 against 0.45-0.35 ms),
 * so it was not kept. */
static void image_gradient(const struct cpu_conv_dw *cd, const float *x,
                           const float *dy, int64_t i, float *part) {
  const mxu_conv2d_desc *d = &cd->d;
  int64_t c = d->in_c;
  const float *xi = x + i * d->in_h * d->in_w * c;
  const float *gi = dy + i * d->out_h * d->out_w * c;
  float *bias = part + (int64_t)cd->taps * c;
  int64_t xstep = (int64_t)d->stride_w * c;
  for (int oy = 0; oy < d->out_h; oy++) {
    const float *g = gi + (int64_t)oy * d->out_w * c;
    for (int64_t at = 0; at < c; at += LANES) {
      vf sum = {0};
      for (int ox = 0; ox < d->out_w; ox++)
        sum += *(const vfu *)(g + ox * c + at);
      *(vfu *)(bias + at) += sum;
    }
    for (int t = 0; t < cd->taps; t++) {
      int iy = oy * d->stride_h - d->pad_top + cd->tap_y[t];
      int lo = cd->tap_col_lo[t], hi = cd->tap_col_hi[t];
      if (iy < 0 || iy >= d->in_h || lo >= hi) continue;
      int ix = lo * d->stride_w - d->pad_left + cd->tap_x[t];
      row_dot(xi + ((int64_t)iy * d->in_w + ix) * c, xstep, g + lo * c, c,
              hi - lo, c, part + t * c);
    }
  }
}

/* ---- backward data ----------------------------------------------------- */

/* Image i's dx: each output pixel's row of dy times each tap's row of
 * weights, added where the tap lands (the image's dx stays in cache).
 * Against oneDNN 2.6's (harness, 2 threads): at stride 2 1.4-2x faster
 * (MobileNetV2's 16x16 of 96 at 128 images: 1.46 -> 1.02 ms; 8x8 of 144:
 * 0.35 -> 0.20; EfficientNet's 5x5 on 8x8 of 144 at 64: 0.27 -> 0.21),
 * on 2x2 images 1.2-1.7x; at stride 1 on 4x4 the same, on 8x8 and 16x16
 * 1.1-1.9x slower (16x16 of 32: 0.53 against 0.98): there oneDNN's. */
static void data_image(const struct cpu_conv_dw *cd, const float *dy,
                       const float *w, int64_t i, float *dx) {
  const mxu_conv2d_desc *d = &cd->d;
  int64_t c = d->in_c;
  float *di = dx + i * d->in_h * d->in_w * c;
  const float *g = dy + i * d->out_h * d->out_w * c;
  memset(di, 0, (size_t)(d->in_h * d->in_w * c) * sizeof *di);
  for (int oy = 0; oy < d->out_h; oy++)
    for (int ox = 0; ox < d->out_w; ox++, g += c) {
      int y0, x0, inside = corner(cd, oy, ox, &y0, &x0);
      for (int t = 0; t < cd->taps; t++) {
        int64_t from = tap_from(cd, y0, x0, inside, t);
        if (from < 0) continue;
        float *to = di + from;
        const float *wt = w + t * c;
        for (int64_t at = 0; at < c; at += LANES)
          *(vfu *)(to + at) += *(const vfu *)(g + at) * *(const vfu *)(wt + at);
      }
    }
}

/* Each image on its own: any split gives the same bits. */
void cpu_conv_dw_backward_data(mxu_op *op, const float *dy, const float *w,
                               float *dx) {
  const struct cpu_conv_dw *cd = op->conv_dw;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(cd->d.n))
  for (int64_t i = 0; i < cd->d.n; i++) data_image(cd, dy, w, i, dx);
}

void cpu_conv_dw_backward_weights(mxu_op *op, const float *x, const float *dy,
                                  float *dw, float *db) {
  const struct cpu_conv_dw *cd = op->conv_dw;
  int64_t c = cd->d.in_c, per = (int64_t)(cd->taps + 1) * c;
#pragma omp parallel for schedule(dynamic)                                     \
    num_threads(cpu_threads_for(cd->blocks))
  for (int64_t blk = 0; blk < cd->blocks; blk++) {
    int64_t first = blk * IMAGE_BLOCK;
    int64_t last =
        first + IMAGE_BLOCK < cd->d.n ? first + IMAGE_BLOCK : cd->d.n;
    float *part = cd->partial + blk * per;
    memset(part, 0, (size_t)per * sizeof *part);
    for (int64_t i = first; i < last; i++) image_gradient(cd, x, dy, i, part);
  }
  cpu_sum_blocks(cd->partial, cd->blocks, cd->taps, c, dw, db);
}

/* One filter per channel (Keras' depth_multiplier 1), on whole channel
 * vectors, float32 and NHWC. */
int cpu_conv_dw_fits(const mxu_conv2d_desc *d) {
  int taps = d->kernel_h * d->kernel_w;
  return !d->bf16 && !d->x_native && !d->y_native && d->in_c > 1 &&
         mxu_conv2d_groups(d) == d->in_c && d->out_c == d->in_c &&
         d->in_c % LANES == 0 && taps <= MAX_TAPS;
}

/* The outputs [lo, hi) along one axis whose window, from o * stride - pad
 * spanning reach more, lies inside [0, size). */
static void inside(int outs, int stride, int pad, int reach, int size, int *lo,
                   int *hi) {
  *lo = outs, *hi = 0;
  for (int o = 0; o < outs; o++) {
    int first = o * stride - pad;
    if (first < 0 || first + reach >= size) continue;
    if (o < *lo) *lo = o;
    *hi = o + 1;
  }
}

mxu_status cpu_conv_dw_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  int taps = d->kernel_h * d->kernel_w;
  int64_t blocks = (d->n + IMAGE_BLOCK - 1) / IMAGE_BLOCK;
  size_t head = (sizeof(struct cpu_conv_dw) + 63) / 64 * 64;
  size_t partial = (size_t)blocks * (size_t)(taps + 1) * (size_t)d->in_c;
  struct cpu_conv_dw *cd = mxu_aligned_alloc(head + partial * sizeof(float));
  if (!cd) return mxu_fail(MXU_ERR_NOMEM, "depthwise conv2d: out of memory");
  /* The forward only where oneDNN's would be generic, and with an
   * activation the loop applies. */
  int own_forward = cpu_weighted_generic(op, CPU_PASS_FORWARD) &&
                    (d->activation == MXU_LINEAR || d->activation == MXU_RELU);
  *cd = (struct cpu_conv_dw){.d = *d,
                             .own_forward = own_forward,
                             .own_data = d->stride_h > 1 || d->stride_w > 1 ||
                                         d->out_h * d->out_w <= 4,
                             .taps = taps,
                             .blocks = blocks,
                             .partial = (float *)((char *)cd + head)};
  int dh = d->dilation_h > 1 ? d->dilation_h : 1,
      dwid = d->dilation_w > 1 ? d->dilation_w : 1;
  /* Taps in the kernel's (kh, kw) order, as Keras' (kh, kw, c, 1). */
  for (int t = 0; t < taps; t++) {
    cd->tap_y[t] = t / d->kernel_w * dh;
    cd->tap_x[t] = t % d->kernel_w * dwid;
    cd->tap_col_lo[t] = d->out_w, cd->tap_col_hi[t] = 0;
    for (int ox = 0; ox < d->out_w; ox++) {
      int ix = ox * d->stride_w - d->pad_left + cd->tap_x[t];
      if (ix < 0 || ix >= d->in_w) continue;
      if (ox < cd->tap_col_lo[t]) cd->tap_col_lo[t] = ox;
      cd->tap_col_hi[t] = ox + 1;
    }
  }
  inside(d->out_h, d->stride_h, d->pad_top, (d->kernel_h - 1) * dh, d->in_h,
         &cd->row_lo, &cd->row_hi);
  inside(d->out_w, d->stride_w, d->pad_left, (d->kernel_w - 1) * dwid, d->in_w,
         &cd->col_lo, &cd->col_hi);
  op->conv_dw = cd;
  return MXU_OK;
}
