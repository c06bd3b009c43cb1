/* conv_gemm.c — a Conv2D's weight gradient as one GEMM over the whole
 * batch, where oneDNN 2.6 has no kernel of its own for the shape and runs
 * a GEMM per image instead: small images of many channels, as at the end
 * of keras.applications ResNet50 and DenseNet121 at 32x32 (3x3 convs on
 * 2x2 and 1x1 images). Per image that is a matrix-vector product over
 * the whole gradient (9 x 512 x 512 floats read and written for 64 x 512
 * multiply-adds per tap): 29 ms for ResNet50's last 3x3 conv at batch 64,
 * about a fifth of its step.
 *
 * Here the taps that see the image at all (on a 1x1 image with 'same'
 * padding, the centre only) gather the batch's inputs into columns
 * [rows = n * out_h * out_w][live taps x in_c], zero where a tap falls on
 * padding, and dw's live rows are columns^T x dy in one sgemm (K = rows);
 * the others are 0. db sums dy's rows in order.
 *
 * Where most taps see only padding (a 3x3 'same' conv on 1x1 images,
 * ResNet50's last stage), oneDNN's own forward and backward data still
 * run all nine: ~10 ms for what is one 64 x 512 x 512 product. There the
 * forward is columns x the live taps' weights (packed), and backward data
 * dy x their transpose, added back into dx. On images of 2x2 outputs or
 * fewer the columns would still multiply padding (a 3x3 'same' conv on
 * 2x2 sees 16 of its 36 pixel-tap pairs inside): there every pass goes by
 * windows instead, a GEMM per output pixel and kernel row on the tensors
 * where they lie. And a strided 1x1 conv of few input channels takes its
 * weight gradient here always: oneDNN's is broken there
 * (onednn_rtus_bug).
 *
 * Where each image has one output pixel, oneDNN 2.6 runs every pass image
 * by image too: 1x1 convs on 1x1 images (EfficientNetB0's, MobileNetV2's
 * and ResNet50's last blocks at 32x32 and their squeeze-and-excite) ran
 * 2.5-3.5x slower in each pass than one sgemm over the batch (harness, 2
 * threads: 1152 -> 320 at batch 64 forward 0.96 -> 0.26 ms, backward data
 * 1.19 -> 0.35, weights 1.05 -> 0.28; 960 -> 160 at 128 0.73 -> 0.25,
 * 0.89 -> 0.27, 0.97 -> 0.29). All three run here. A 1x1 unpadded
 * stride-1 conv needs no gathering: NHWC x is the columns, HWIO w the
 * weights, dx and dw the products; its weight gradient runs here also on
 * images up to 8x8, where oneDNN's ran 1.0-2x slower (672 -> 112 on 2x2
 * at 64: 0.85 -> 0.41 ms; 144 -> 24 on 8x8: 0.39 -> 0.25), while its
 * forward and backward data there were as fast or faster. */
#include "backend/cpu/cpu.h"
#include "core/fast_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Columns buffer limit: larger images have fewer dead taps and oneDNN's
 * own kernels. */
#define MAX_COLUMN_BYTES ((size_t)64 << 20)
/* Copies of operands with aliasing strides (see unaliased) up to this. */
#define MAX_SPARE_BYTES ((size_t)32 << 20)
/* Multiply-adds of a direct pass below which oneDNN's generic weight
 * gradient and its forward and backward data on 2x2 images win anyway
 * (the gathering and the GEMM's set-up cost): DenseNet121's 3x3 128 -> 32
 * on 2x2 images (9 M) ran its backward data faster on oneDNN (though its
 * weight gradient slower: see tiny); ResNet50's 256 and 512 channels
 * (151 M) 3-10x slower. */
#define MIN_MACS ((int64_t)1 << 24)

struct cpu_conv_gemm {
  mxu_conv2d_desc d;
  int taps, live; /* kernel taps, and those that see the image */
  int passes;     /* forward and backward data too: by windows, most taps
                   * dead, one output pixel per image, or 2x2 of some size */
  int direct;     /* pointwise: x, w, dx, dw are the GEMMs' own operands */
  int windows;    /* tiny images: a GEMM per output pixel and kernel row */
  int *live_tap;  /* [live]: which */
  float *columns; /* [rows][live * in_c] */
  float *product; /* [live * in_c][out_c] */
  float *spare;   /* operands copied to unaliased strides, or NULL */
};

/* Input row and column of tap (ky, kx) for output (oy, ox). */
static int tap_row(const mxu_conv2d_desc *d, int oy, int ky) {
  return oy * d->stride_h - d->pad_top +
         ky * (d->dilation_h > 1 ? d->dilation_h : 1);
}

static int tap_col(const mxu_conv2d_desc *d, int ox, int kx) {
  return ox * d->stride_w - d->pad_left +
         kx * (d->dilation_w > 1 ? d->dilation_w : 1);
}

/* Whether tap t lands inside the image for some output pixel. */
static int tap_live(const mxu_conv2d_desc *d, int t) {
  int ky = t / d->kernel_w, kx = t % d->kernel_w;
  int rows = 0, cols = 0;
  for (int oy = 0; oy < d->out_h; oy++) {
    int iy = tap_row(d, oy, ky);
    rows |= iy >= 0 && iy < d->in_h;
  }
  for (int ox = 0; ox < d->out_w; ox++) {
    int ix = tap_col(d, ox, kx);
    cols |= ix >= 0 && ix < d->in_w;
  }
  return rows && cols;
}

static int live_taps(const mxu_conv2d_desc *d) {
  int live = 0;
  for (int t = 0; t < d->kernel_h * d->kernel_w; t++) live += tap_live(d, t);
  return live;
}

/* Output pixel r's row of columns: each live tap's in_c inputs, or 0. */
static void gather_row(const struct cpu_conv_gemm *g, const float *x, int64_t r,
                       float *out) {
  const mxu_conv2d_desc *d = &g->d;
  int64_t per_image = (int64_t)d->out_h * d->out_w;
  int64_t i = r / per_image;
  int oy = (int)(r % per_image / d->out_w), ox = (int)(r % d->out_w);
  const float *image = x + i * d->in_h * d->in_w * d->in_c;
  for (int k = 0; k < g->live; k++, out += d->in_c) {
    int t = g->live_tap[k];
    int iy = tap_row(d, oy, t / d->kernel_w),
        ix = tap_col(d, ox, t % d->kernel_w);
    if (iy >= 0 && iy < d->in_h && ix >= 0 && ix < d->in_w)
      memcpy(out, image + ((int64_t)iy * d->in_w + ix) * d->in_c,
             (size_t)d->in_c * sizeof *out);
    else
      memset(out, 0, (size_t)d->in_c * sizeof *out);
  }
}

static int64_t rows_of(const mxu_conv2d_desc *d) {
  return (int64_t)d->n * d->out_h * d->out_w;
}

/* The GEMM's left operand [rows][live * in_c]: x itself where the conv is
 * pointwise, else gathered. */
static const float *columns(const struct cpu_conv_gemm *g, const float *x) {
  if (g->direct) return x;
  int64_t rows = rows_of(&g->d), width = (int64_t)g->live * g->d.in_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++)
    gather_row(g, x, r, g->columns + r * width);
  return g->columns;
}

/* Row yr's bias and the activation a conv fuses (mxu_activation_fusable),
 * the sigmoid vectorised: EfficientNet's squeeze-and-excite convs end in
 * one, over outputs 24x their inputs, where libm's expf per value took
 * three quarters of the pass. */
static void epilogue(mxu_activation act, const float *b, int64_t co,
                     float *restrict yr) {
  for (int64_t o = 0; b && o < co; o++) yr[o] += b[o];
  if (act == MXU_RELU) {
#pragma omp simd
    for (int64_t o = 0; o < co; o++) yr[o] = yr[o] > 0.0f ? yr[o] : 0.0f;
  } else if (act == MXU_SIGMOID) {
#pragma omp simd
    for (int64_t o = 0; o < co; o++) yr[o] = sigmoid(yr[o]);
  } else if (act == MXU_TANH) {
    for (int64_t o = 0; o < co; o++) yr[o] = tanhf(yr[o]);
  }
}

/* ---- strides dnnl_sgemm reads slowly ----------------------------------
 * dnnl_sgemm packs the operands it reads down their rows (A in a 'T'
 * product, B in an 'N' one) from rows lda or ldb floats apart. Where that
 * is a multiple of 512 floats (2 KB), the rows it reads together share
 * cache sets and it ran at half speed (harness, 2 threads: 256 x 1024 x
 * 256 with ldb 1024 82 GFLOP/s, 1040 175; 1536: 115 and 161; A^T of 1024 x
 * 256 x 256 with lda 1024 71, 1040 132; strides of 768, 960 or 1280 lost
 * 4-14%, not worth a copy). Such an operand is first copied to rows PAD
 * floats longer, into the op's spare buffer. */
enum { ALIASED = 512, PAD = 16 };

typedef struct operand {
  const float *at;
  int64_t ld;
} operand;

static int aliased(int64_t ld) { return ld % ALIASED == 0; }

/* rows x cols floats ld apart at src: themselves, or copied into *spare
 * (then advanced past them) where ld aliases and there is a spare. */
static operand unaliased(const float *src, int64_t rows, int64_t cols,
                         int64_t ld, float **spare) {
  if (!aliased(ld) || !*spare) return (operand){src, ld};
  float *to = *spare;
  int64_t pitch = cols + PAD;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++)
    memcpy(to + r * pitch, src + r * ld, (size_t)cols * sizeof *to);
  *spare += rows * pitch;
  return (operand){to, pitch};
}

/* The floats unaliased may take of a spare for rows x cols ld apart. */
static int64_t spare_for(int64_t rows, int64_t cols, int64_t ld) {
  return aliased(ld) ? rows * (cols + PAD) : 0;
}

/* The live taps' weights, [live * in_c][out_c]: packed into product, or
 * straight into *spare at the longer pitch where out_c aliases (spare
 * NULL: product). */
static operand live_weights(const struct cpu_conv_gemm *g, const float *w,
                            float **spare) {
  int64_t in_c = g->d.in_c, co = g->d.out_c, rows = g->live * in_c;
  float *to = g->product;
  int64_t pitch = co;
  if (spare && *spare && aliased(co)) {
    to = *spare, pitch = co + PAD;
    *spare += rows * pitch;
  }
  for (int k = 0; k < g->live; k++)
    for (int64_t r = 0; r < in_c; r++)
      memcpy(to + (k * in_c + r) * pitch, w + (g->live_tap[k] * in_c + r) * co,
             (size_t)co * sizeof *w);
  return (operand){to, pitch};
}

/* ---- windows: tiny images, one GEMM per output pixel and kernel row ----
 * Output pixel p's kernel row ky reads one run of input pixels in one
 * input row (dilation 1), and those taps are one run of HWIO's rows: the
 * GEMMs take x, w, dy, dx and dw where they lie, with the images' strides,
 * and multiply no padding. A 3x3 'same' conv on 2x2 images sees 16 of
 * the 36 (pixel, tap) pairs the gathered columns hold. */

typedef struct window_run {
  int64_t x_at, w_row, width; /* floats into an image; w's [.][out_c] row;
                               * run x in_c */
} window_run;

/* Output pixel p's kernel row ky: whether it reads the image, and where. */
static int window_of(const mxu_conv2d_desc *d, int p, int ky, window_run *run) {
  int oy = p / d->out_w, ox = p % d->out_w;
  int iy = tap_row(d, oy, ky), x0 = tap_col(d, ox, 0);
  int lo = x0 < 0 ? -x0 : 0;
  int hi = d->in_w - x0 < d->kernel_w ? d->in_w - x0 : d->kernel_w;
  if (iy < 0 || iy >= d->in_h || hi <= lo) return 0;
  run->x_at = ((int64_t)iy * d->in_w + x0 + lo) * d->in_c;
  run->w_row = ((int64_t)ky * d->kernel_w + lo) * d->in_c;
  run->width = (int64_t)(hi - lo) * d->in_c;
  return 1;
}

/* The windows' widths summed (their multiply-adds per image and output
 * channel, against the columns' pixels x live taps x in_c), and the rows
 * of w [.][out_c] they read: [*first, *end). */
static int64_t window_span(const mxu_conv2d_desc *d, int64_t *first,
                           int64_t *end) {
  int64_t sum = 0;
  *first = (int64_t)d->kernel_h * d->kernel_w * d->in_c, *end = 0;
  window_run run;
  for (int p = 0; p < d->out_h * d->out_w; p++)
    for (int ky = 0; ky < d->kernel_h; ky++)
      if (window_of(d, p, ky, &run)) {
        sum += run.width;
        if (run.w_row < *first) *first = run.w_row;
        if (run.w_row + run.width > *end) *end = run.w_row + run.width;
      }
  return sum;
}

static void windows_forward(const mxu_conv2d_desc *d, const float *x,
                            const float *w, float *y, float *spare) {
  int pixels = d->out_h * d->out_w;
  int64_t co = d->out_c, image = (int64_t)d->in_h * d->in_w * d->in_c;
  int64_t first, end;
  window_span(d, &first, &end);
  /* Only the rows read (on 1x1 images one tap's of nine). */
  operand wo = unaliased(w + first * co, end - first, co, co, &spare);
  for (int p = 0; p < pixels; p++) {
    float beta = 0.0f;
    window_run run;
    for (int ky = 0; ky < d->kernel_h; ky++)
      if (window_of(d, p, ky, &run)) {
        cpu_sgemm('N', 'N', d->n, co, run.width, 1.0f, x + run.x_at, image,
                  wo.at + (run.w_row - first) * wo.ld, wo.ld, beta, y + p * co,
                  pixels * co);
        beta = 1.0f;
      }
    if (beta == 0.0f) /* every tap on padding */
      for (int64_t i = 0; i < d->n; i++)
        memset(y + (i * pixels + p) * co, 0, (size_t)co * sizeof *y);
  }
}

static void windows_backward_data(const mxu_conv2d_desc *d, const float *dy,
                                  const float *w, float *dx) {
  int pixels = d->out_h * d->out_w;
  int64_t co = d->out_c, image = (int64_t)d->in_h * d->in_w * d->in_c;
  memset(dx, 0, (size_t)(d->n * image) * sizeof *dx);
  window_run run;
  for (int p = 0; p < pixels; p++)
    for (int ky = 0; ky < d->kernel_h; ky++)
      if (window_of(d, p, ky, &run))
        cpu_sgemm('N', 'T', d->n, run.width, co, 1.0f, dy + p * co, pixels * co,
                  w + run.w_row * co, co, 1.0f, dx + run.x_at, image);
}

static void windows_backward_weights(const mxu_conv2d_desc *d, const float *x,
                                     const float *dy, float *dw, float *spare) {
  int pixels = d->out_h * d->out_w;
  int64_t co = d->out_c, image = (int64_t)d->in_h * d->in_w * d->in_c;
  memset(dw, 0,
         (size_t)(d->kernel_h * d->kernel_w * d->in_c * co) * sizeof *dw);
  operand xo = unaliased(x, d->n, image, image, &spare);
  operand dyo = unaliased(dy, d->n, pixels * co, pixels * co, &spare);
  window_run run;
  for (int p = 0; p < pixels; p++)
    for (int ky = 0; ky < d->kernel_h; ky++)
      if (window_of(d, p, ky, &run))
        cpu_sgemm('T', 'N', run.width, co, d->n, 1.0f, xo.at + run.x_at, xo.ld,
                  dyo.at + p * co, dyo.ld, 1.0f, dw + run.w_row * co, co);
}

int cpu_conv_gemm_passes(const mxu_op *op) {
  return op->conv_gemm && op->conv_gemm->passes;
}

int cpu_conv_gemm_windows(const mxu_op *op) {
  return op->conv_gemm && op->conv_gemm->windows;
}

void cpu_conv_gemm_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y) {
  const struct cpu_conv_gemm *g = op->conv_gemm;
  const mxu_conv2d_desc *d = &g->d;
  int64_t rows = rows_of(d), width = (int64_t)g->live * d->in_c;
  int64_t co = d->out_c;
  float *spare = g->spare;
  if (g->windows) {
    windows_forward(d, x, w, y, spare);
  } else {
    operand wo = g->direct ? unaliased(w, width, co, co, &spare)
                           : live_weights(g, w, &spare);
    cpu_sgemm('N', 'N', rows, co, width, 1.0f, columns(g, x), width, wo.at,
              wo.ld, 0.0f, y, co);
  }
  if (!op->has_bias) b = NULL;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++) epilogue(d->activation, b, co, y + r * co);
}

/* dx: each output pixel's row of dy x the live weights' transpose, added
 * where its taps land, image by image in pixel order. */
void cpu_conv_gemm_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx) {
  const struct cpu_conv_gemm *g = op->conv_gemm;
  const mxu_conv2d_desc *d = &g->d;
  int64_t per_image = (int64_t)d->out_h * d->out_w;
  int64_t width = (int64_t)g->live * d->in_c, co = d->out_c;
  int64_t in_size = (int64_t)d->in_h * d->in_w * d->in_c;
  if (g->windows) {
    windows_backward_data(d, dy, w, dx);
    return;
  }
  if (g->direct) {
    cpu_sgemm('N', 'T', rows_of(d), width, co, 1.0f, dy, co, w, co, 0.0f, dx,
              width);
    return;
  }
  cpu_sgemm('N', 'T', rows_of(d), width, co, 1.0f, dy, co,
            live_weights(g, w, NULL).at, co, 0.0f, g->columns, width);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(d->n))
  for (int64_t i = 0; i < d->n; i++) {
    float *image = dx + i * in_size;
    memset(image, 0, (size_t)in_size * sizeof *image);
    for (int64_t p = 0; p < per_image; p++) {
      const float *col = g->columns + (i * per_image + p) * width;
      int oy = (int)(p / d->out_w), ox = (int)(p % d->out_w);
      for (int k = 0; k < g->live; k++, col += d->in_c) {
        int t = g->live_tap[k];
        int iy = tap_row(d, oy, t / d->kernel_w),
            ix = tap_col(d, ox, t % d->kernel_w);
        if (iy < 0 || iy >= d->in_h || ix < 0 || ix >= d->in_w) continue;
        float *to = image + ((int64_t)iy * d->in_w + ix) * d->in_c;
        for (int c = 0; c < d->in_c; c++) to[c] += col[c];
      }
    }
  }
}

/* db: dy's rows summed in order, each thread a span of channels. */
static void bias_gradient(const float *dy, int64_t rows, int64_t co,
                          float *db) {
  enum { SPAN = 64 };
  int64_t spans = (co + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(spans))
  for (int64_t s = 0; s < spans; s++) {
    int64_t begin = s * SPAN, end = begin + SPAN < co ? begin + SPAN : co;
    float *out = db + begin;
    memset(out, 0, (size_t)(end - begin) * sizeof *out);
    for (int64_t r = 0; r < rows; r++) {
      const float *row = dy + r * co + begin;
      for (int64_t o = 0; o < end - begin; o++) out[o] += row[o];
    }
  }
}

/* to [live * in_c][out_c] = columns^T x dy, over every output pixel. */
static void columns_gradient(const struct cpu_conv_gemm *g, const float *x,
                             const float *dy, float *to) {
  const mxu_conv2d_desc *d = &g->d;
  int64_t rows = rows_of(d), width = (int64_t)g->live * d->in_c;
  int64_t co = d->out_c;
  if (width == 0) return;
  float *spare = g->spare;
  operand xo = unaliased(columns(g, x), rows, width, width, &spare);
  operand dyo = unaliased(dy, rows, co, co, &spare);
  cpu_sgemm('T', 'N', width, co, rows, 1.0f, xo.at, xo.ld, dyo.at, dyo.ld, 0.0f,
            to, co);
}

void cpu_conv_gemm_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db) {
  const struct cpu_conv_gemm *g = op->conv_gemm;
  const mxu_conv2d_desc *d = &g->d;
  int64_t co = d->out_c;
  if (g->windows) {
    windows_backward_weights(d, x, dy, dw, g->spare);
  } else if (g->direct) {
    columns_gradient(g, x, dy, dw);
  } else {
    columns_gradient(g, x, dy, g->product);
    /* HWIO: tap t's rows are dw[t * in_c ..]. */
    int64_t tap_floats = (int64_t)d->in_c * co;
    memset(dw, 0, (size_t)(g->taps * tap_floats) * sizeof *dw);
    for (int k = 0; k < g->live; k++)
      memcpy(dw + g->live_tap[k] * tap_floats, g->product + k * tap_floats,
             (size_t)tap_floats * sizeof *dw);
  }
  if (db) bias_gradient(dy, rows_of(d), co, db);
}

/* No more than half the taps see the image: the own forward and
 * backward data pay. */
static int mostly_dead(const mxu_conv2d_desc *d, int live) {
  return live > 0 && 2 * live <= d->kernel_h * d->kernel_w;
}

static int one_pixel(const mxu_conv2d_desc *d) {
  return d->out_h == 1 && d->out_w == 1;
}

/* A 1x1 unpadded stride-1 conv: NHWC x is [rows][in_c], HWIO w
 * [in_c][out_c]. */
static int pointwise(const mxu_conv2d_desc *d) {
  return d->kernel_h == 1 && d->kernel_w == 1 && d->stride_h == 1 &&
         d->stride_w == 1 && d->pad_top == 0 && d->pad_bottom == 0 &&
         d->pad_left == 0 && d->pad_right == 0;
}

/* Output pixels per image up to which a pointwise conv's weight gradient
 * runs here (see the top). */
enum { POINTWISE_MAX_PIXELS = 64 };

/* Images of 2x2 outputs or fewer: oneDNN 2.6 ran a 3x3 conv's weight
 * gradient there 2.5-4x slower than one GEMM over the batch (DenseNet121's
 * 128 -> 32 on 2x2 at 64 images: 0.5-0.8 -> 0.2 ms), and from MIN_MACS on
 * its forward and backward data too 1.1-1.8x slower than the gathered
 * columns (ResNet50's 256 -> 256: forward 4.5 -> 2.5 ms, data 2.9 -> 2.4;
 * 512 -> 128: 3.8 -> 2.4, 2.8 -> 2.6). By windows (below) every pass
 * runs here at any size. */
static int tiny(const mxu_conv2d_desc *d) { return d->out_h * d->out_w <= 4; }

/* oneDNN 2.6's jit_1x1 weight gradient of a strided 1x1 conv in NHWC,
 * with input channels not filling its blocks (8 on AVX2, 16 on AVX-512),
 * copies the strided input into a per-thread buffer it writes past: on
 * 2 threads, wrong gradients in about one run in six (a golden test's
 * 1x1 stride-2 conv of 4 channels, under load), or a hang or crash
 * (oneDNN issue 6035, open). That gradient always runs here. */
static int onednn_rtus_bug(const mxu_conv2d_desc *d) {
  return d->kernel_h == 1 && d->kernel_w == 1 &&
         (d->stride_h > 1 || d->stride_w > 1) && d->in_c % 16 != 0;
}

static int64_t macs_of(const mxu_conv2d_desc *d) {
  return rows_of(d) * d->kernel_h * d->kernel_w * d->in_c * d->out_c;
}

int cpu_conv_gemm_can(const mxu_conv2d_desc *d) {
  int64_t taps = (int64_t)d->kernel_h * d->kernel_w;
  size_t columns = (size_t)(rows_of(d) * taps * d->in_c) * sizeof(float);
  return !d->bf16 && !d->x_native && !d->y_native &&
         mxu_conv2d_groups(d) == 1 && mxu_activation_fusable(d->activation) &&
         (pointwise(d) || columns <= MAX_COLUMN_BYTES);
}

/* Where it can, and: of some size, whose weight gradient oneDNN runs
 * generically or whose taps mostly see padding; on tiny images; or any
 * that oneDNN's bug above would meet. */
int cpu_conv_gemm_fits(const mxu_op *op, const mxu_conv2d_desc *d) {
  if (!cpu_conv_gemm_can(d)) return 0;
  return onednn_rtus_bug(d) || one_pixel(d) || tiny(d) ||
         (pointwise(d) && d->out_h * d->out_w <= POINTWISE_MAX_PIXELS) ||
         (macs_of(d) >= MIN_MACS &&
          (cpu_weighted_generic(op, CPU_PASS_BACKWARD_WEIGHTS) ||
           mostly_dead(d, live_taps(d))));
}

/* All three passes by windows: tiny images, undilated, where the columns
 * would hold padding (or gather the one pixel for nothing). Harness, 2
 * threads, 64 images on 2x2, 3x3 'same', oneDNN's or the columns' ->
 * windows, ms: ResNet50's 256 -> 256 (columns) forward 2.3-2.8 -> 1.0-1.4,
 * data 2.3-2.5 -> 1.0-1.2, weights 2.9-3.2 -> 2.1-2.4; DenseNet121's 128
 * -> 32 (oneDNN's but the weights) 0.14-0.22 -> 0.08, data the same
 * (0.09-0.12), weights 0.15-0.18 -> 0.11; 32 -> 32 0.05-0.07 -> 0.03,
 * 0.03-0.05 -> 0.03, 0.05-0.10 -> 0.03. */
static int by_windows(const mxu_conv2d_desc *d, int live) {
  int pixels = d->out_h * d->out_w;
  int64_t first, end;
  return !pointwise(d) && tiny(d) && d->dilation_h <= 1 && d->dilation_w <= 1 &&
         (pixels == 1 ||
          window_span(d, &first, &end) < (int64_t)pixels * live * d->in_c);
}

/* The spare floats the passes take to unalias their operands (none past
 * MAX_SPARE_BYTES: they then run on the strides as they are). */
static size_t spare_floats(const mxu_conv2d_desc *d, int live, int windows) {
  int64_t co = d->out_c, pixels = (int64_t)d->out_h * d->out_w;
  int64_t image = (int64_t)d->in_h * d->in_w * d->in_c;
  int64_t width = (int64_t)live * d->in_c, rows = rows_of(d);
  int64_t forward, weights;
  if (windows) {
    int64_t first, end;
    window_span(d, &first, &end);
    forward = spare_for(end - first, co, co);
    weights = spare_for(d->n, image, image) +
              spare_for(d->n, pixels * co, pixels * co);
  } else {
    forward = spare_for(width, co, co);
    weights = spare_for(rows, width, width) + spare_for(rows, co, co);
  }
  size_t most = (size_t)(forward > weights ? forward : weights);
  return most * sizeof(float) > MAX_SPARE_BYTES ? 0 : most;
}

mxu_status cpu_conv_gemm_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  int taps = d->kernel_h * d->kernel_w, live = live_taps(d);
  int direct = pointwise(d);
  int windows = by_windows(d, live);
  int passes = windows || mostly_dead(d, live) || one_pixel(d) ||
               (tiny(d) && macs_of(d) >= MIN_MACS);
  /* Pointwise or by windows, the GEMMs need no buffers of their own. */
  size_t rows = direct || windows ? 0 : (size_t)rows_of(d);
  size_t width = direct || windows ? 0 : (size_t)live * (size_t)d->in_c;
  size_t spare = spare_floats(d, live, windows);
  size_t head = (sizeof(struct cpu_conv_gemm) + 63) / 64 * 64;
  size_t list = ((size_t)taps * sizeof(int) + 63) / 64 * 64;
  struct cpu_conv_gemm *g = mxu_aligned_alloc(
      head + list +
      (rows * width + width * (size_t)d->out_c + spare) * sizeof(float));
  if (!g) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  *g = (struct cpu_conv_gemm){.d = *d,
                              .taps = taps,
                              .live = live,
                              .passes = passes,
                              .direct = direct,
                              .windows = windows};
  g->live_tap = (int *)(void *)((char *)g + head);
  g->columns = (float *)(void *)((char *)g + head + list);
  g->product = g->columns + rows * width;
  g->spare = spare ? g->product + width * (size_t)d->out_c : NULL;
  for (int t = 0, k = 0; t < taps; t++)
    if (tap_live(d, t)) g->live_tap[k++] = t;
  op->conv_gemm = g;
  return MXU_OK;
}
