/* pool.c — cpu_ref's max and average pooling. Padding never counts: max
 * sees in-bounds pixels only and average divides by their number (Keras).
 * Backward re-finds each maximum in x, so no workspace is needed. */
#include "backend/cpu_ref/ref.h"

#include <string.h>

mxu_status mxu_ref_pool2d_create(const mxu_pool2d_desc *desc, mxu_op **out) {
  const mxu_pool2d_desc *d = desc;
  *out = NULL;
  if (d->n <= 0 || d->c <= 0)
    return mxu_fail(MXU_ERR_ARG, "cpu_ref: pool2d: batch %d, channels %d", d->n,
                    d->c);
  MXU_TRY(mxu_ref_check_window("pool2d rows", d->in_h, d->out_h, d->pool_h,
                               d->stride_h, d->pad_top, d->pad_bottom));
  MXU_TRY(mxu_ref_check_window("pool2d columns", d->in_w, d->out_w, d->pool_w,
                               d->stride_w, d->pad_left, d->pad_right));
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.pool2d = *d;
  return MXU_OK;
}

size_t mxu_ref_pool2d_workspace_bytes(mxu_op *op) {
  (void)op;
  return 0;
}

/* The in-bounds part of one window: rows [h0, h1), columns [w0, w1). The
 * create checks guarantee it is never empty. */
typedef struct window {
  int h0, h1, w0, w1;
} window;

static int clamp(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

static window window_of(const mxu_pool2d_desc *d, int oh, int ow) {
  window win;
  int top = oh * d->stride_h - d->pad_top;
  int left = ow * d->stride_w - d->pad_left;
  win.h0 = clamp(top, 0, d->in_h);
  win.h1 = clamp(top + d->pool_h, 0, d->in_h);
  win.w0 = clamp(left, 0, d->in_w);
  win.w1 = clamp(left + d->pool_w, 0, d->in_w);
  return win;
}

static int64_t x_at(const mxu_pool2d_desc *d, int n, int h, int w, int c) {
  return mxu_ref_at4(n, h, w, c, d->in_h, d->in_w, d->c);
}

static int64_t y_at(const mxu_pool2d_desc *d, int n, int h, int w, int c) {
  return mxu_ref_at4(n, h, w, c, d->out_h, d->out_w, d->c);
}

/* Offset in x of the window's first maximum in row-major order. */
static int64_t argmax(const mxu_pool2d_desc *d, const float *x, int n,
                      window win, int c) {
  int64_t best = x_at(d, n, win.h0, win.w0, c);
  for (int h = win.h0; h < win.h1; h++)
    for (int w = win.w0; w < win.w1; w++)
      if (x[x_at(d, n, h, w, c)] > x[best]) best = x_at(d, n, h, w, c);
  return best;
}

static int window_count(window win) {
  return (win.h1 - win.h0) * (win.w1 - win.w0);
}

static double window_mean(const mxu_pool2d_desc *d, const float *x, int n,
                          window win, int c) {
  double sum = 0.0;
  for (int h = win.h0; h < win.h1; h++)
    for (int w = win.w0; w < win.w1; w++) sum += x[x_at(d, n, h, w, c)];
  return sum / window_count(win);
}

void mxu_ref_pool2d_forward(mxu_op *op, int training, const float *x, float *y,
                            void *workspace) {
  const mxu_pool2d_desc *d = &op->desc.pool2d;
  (void)training;
  (void)workspace;
  for (int n = 0; n < d->n; n++)
    for (int oh = 0; oh < d->out_h; oh++)
      for (int ow = 0; ow < d->out_w; ow++)
        for (int c = 0; c < d->c; c++) {
          window win = window_of(d, oh, ow);
          y[y_at(d, n, oh, ow, c)] = d->is_max
                                         ? x[argmax(d, x, n, win, c)]
                                         : (float)window_mean(d, x, n, win, c);
        }
}

/* Spreads one output's gradient over the input pixels it came from. */
static void scatter(const mxu_pool2d_desc *d, const float *x, float g, int n,
                    window win, int c, float *dx) {
  if (d->is_max) {
    dx[argmax(d, x, n, win, c)] += g;
    return;
  }
  float share = (float)((double)g / window_count(win));
  for (int h = win.h0; h < win.h1; h++)
    for (int w = win.w0; w < win.w1; w++) dx[x_at(d, n, h, w, c)] += share;
}

void mxu_ref_pool2d_backward(mxu_op *op, const float *x, const float *y,
                             const float *dy, const void *workspace,
                             float *dx) {
  const mxu_pool2d_desc *d = &op->desc.pool2d;
  (void)y;
  (void)workspace;
  memset(dx, 0, sizeof *dx * (size_t)d->n * d->in_h * d->in_w * d->c);
  for (int n = 0; n < d->n; n++)
    for (int oh = 0; oh < d->out_h; oh++)
      for (int ow = 0; ow < d->out_w; ow++)
        for (int c = 0; c < d->c; c++)
          scatter(d, x, dy[y_at(d, n, oh, ow, c)], n, window_of(d, oh, ow), c,
                  dx);
}
