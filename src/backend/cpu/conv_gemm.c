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
 * the others are 0. db sums dy's rows in order. */
#include "backend/cpu/cpu.h"

#include <stdint.h>
#include <string.h>

/* Columns buffer limit: larger images have fewer dead taps and oneDNN's
 * own kernels. */
#define MAX_COLUMN_BYTES ((size_t)64 << 20)

struct cpu_conv_gemm {
  mxu_conv2d_desc d;
  int taps, live; /* kernel taps, and those that see the image */
  int *live_tap;  /* [live]: which */
  float *columns; /* [rows][live * in_c] */
  float *product; /* [live * in_c][out_c] */
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

void cpu_conv_gemm_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db) {
  const struct cpu_conv_gemm *g = op->conv_gemm;
  const mxu_conv2d_desc *d = &g->d;
  int64_t rows = (int64_t)d->n * d->out_h * d->out_w;
  int64_t width = (int64_t)g->live * d->in_c, co = d->out_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++)
    gather_row(g, x, r, g->columns + r * width);
  if (width > 0)
    dnnl_sgemm('T', 'N', width, co, rows, 1.0f, g->columns, width, dy, co, 0.0f,
               g->product, co);
  /* HWIO: tap t's rows are dw[t * in_c ..]. */
  int64_t tap_floats = (int64_t)d->in_c * co;
  memset(dw, 0, (size_t)(g->taps * tap_floats) * sizeof *dw);
  for (int k = 0; k < g->live; k++)
    memcpy(dw + g->live_tap[k] * tap_floats, g->product + k * tap_floats,
           (size_t)tap_floats * sizeof *dw);
  if (!db) return;
  memset(db, 0, (size_t)co * sizeof *db);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < co; o++) db[o] += dy[r * co + o];
}

/* Plain float32 NHWC convs whose weight gradient oneDNN runs generically,
 * with columns of a sane size. */
int cpu_conv_gemm_fits(const mxu_op *op, const mxu_conv2d_desc *d) {
  size_t columns = (size_t)d->n * (size_t)d->out_h * (size_t)d->out_w *
                   (size_t)d->kernel_h * (size_t)d->kernel_w * (size_t)d->in_c *
                   sizeof(float);
  return !d->bf16 && !d->x_native && !d->y_native &&
         mxu_conv2d_groups(d) == 1 && columns <= MAX_COLUMN_BYTES &&
         cpu_weighted_generic(op, CPU_PASS_BACKWARD_WEIGHTS);
}

mxu_status cpu_conv_gemm_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  int taps = d->kernel_h * d->kernel_w, live = 0;
  for (int t = 0; t < taps; t++) live += tap_live(d, t);
  size_t rows = (size_t)d->n * (size_t)d->out_h * (size_t)d->out_w;
  size_t width = (size_t)live * (size_t)d->in_c;
  size_t head = (sizeof(struct cpu_conv_gemm) + 63) / 64 * 64;
  size_t list = ((size_t)taps * sizeof(int) + 63) / 64 * 64;
  struct cpu_conv_gemm *g = mxu_aligned_alloc(
      head + list + (rows * width + width * (size_t)d->out_c) * sizeof(float));
  if (!g) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  *g = (struct cpu_conv_gemm){.d = *d, .taps = taps, .live = live};
  g->live_tap = (int *)(void *)((char *)g + head);
  g->columns = (float *)(void *)((char *)g + head + list);
  g->product = g->columns + rows * width;
  for (int t = 0, k = 0; t < taps; t++)
    if (tap_live(d, t)) g->live_tap[k++] = t;
  op->conv_gemm = g;
  return MXU_OK;
}
