/* conv.c — cpu_ref's 2-D convolution: every output, input gradient and
 * kernel gradient is its own direct sum over NHWC activations and HWIO
 * kernels (with groups and dilation), accumulated in double so it is the
 * most accurate answer around. */
#include "backend/cpu_ref/ref.h"

static int dil_h(const mxu_conv2d_desc *d) {
  return d->dilation_h > 1 ? d->dilation_h : 1;
}

static int dil_w(const mxu_conv2d_desc *d) {
  return d->dilation_w > 1 ? d->dilation_w : 1;
}

mxu_status mxu_ref_conv2d_create(const mxu_conv2d_desc *desc, mxu_op **out) {
  const mxu_conv2d_desc *d = desc;
  *out = NULL;
  int groups = mxu_conv2d_groups(d);
  if (d->n <= 0 || d->in_c <= 0 || d->out_c <= 0 || d->in_c % groups ||
      d->out_c % groups)
    return mxu_fail(MXU_ERR_ARG,
                    "cpu_ref: conv2d: batch %d, channels %d->%d in %d groups",
                    d->n, d->in_c, d->out_c, groups);
  /* A dilated kernel spans (k - 1) * dilation + 1 pixels. */
  MXU_TRY(mxu_ref_check_window("conv2d rows", d->in_h, d->out_h,
                               (d->kernel_h - 1) * dil_h(d) + 1, d->stride_h,
                               d->pad_top, d->pad_bottom));
  MXU_TRY(mxu_ref_check_window("conv2d columns", d->in_w, d->out_w,
                               (d->kernel_w - 1) * dil_w(d) + 1, d->stride_w,
                               d->pad_left, d->pad_right));
  MXU_TRY(mxu_ref_check_fused("conv2d", d->activation));
  MXU_TRY(mxu_ref_op_new(out));
  (*out)->desc.conv2d = *d;
  return MXU_OK;
}

static int64_t x_at(const mxu_conv2d_desc *d, int n, int h, int w, int c) {
  return mxu_ref_at4(n, h, w, c, d->in_h, d->in_w, d->in_c);
}

static int64_t y_at(const mxu_conv2d_desc *d, int n, int h, int w, int c) {
  return mxu_ref_at4(n, h, w, c, d->out_h, d->out_w, d->out_c);
}

/* Input channels per group, and a group's first input and output. */
static int group_in(const mxu_conv2d_desc *d) {
  return d->in_c / mxu_conv2d_groups(d);
}

static int first_in_of_out(const mxu_conv2d_desc *d, int oc) {
  return oc / (d->out_c / mxu_conv2d_groups(d)) * group_in(d);
}

static int first_out_of_in(const mxu_conv2d_desc *d, int ic) {
  return ic / group_in(d) * (d->out_c / mxu_conv2d_groups(d));
}

/* The kernel's input index is the channel's place in its group. */
static int64_t w_at(const mxu_conv2d_desc *d, int kh, int kw, int ic, int oc) {
  return mxu_ref_at4(kh, kw, ic % group_in(d), oc, d->kernel_w, group_in(d),
                     d->out_c);
}

/* The input pixel that kernel tap (kh, kw) of output (oh, ow) reads, or -1
 * in the padding. */
static int in_row(const mxu_conv2d_desc *d, int oh, int kh) {
  int ih = oh * d->stride_h - d->pad_top + kh * dil_h(d);
  return ih >= 0 && ih < d->in_h ? ih : -1;
}

static int in_col(const mxu_conv2d_desc *d, int ow, int kw) {
  int iw = ow * d->stride_w - d->pad_left + kw * dil_w(d);
  return iw >= 0 && iw < d->in_w ? iw : -1;
}

/* The output whose tap at offset k (dilated) reads input i, or -1 if none
 * does (the stride skips it or it lies past the edge). */
static int out_index(int i, int k, int pad, int stride, int out_size) {
  int t = i + pad - k;
  if (t < 0 || t % stride != 0 || t / stride >= out_size) return -1;
  return t / stride;
}

static double conv_point(const mxu_conv2d_desc *d, const float *x,
                         const float *w, int n, int oh, int ow, int oc) {
  double sum = 0.0;
  int ic0 = first_in_of_out(d, oc), ic1 = ic0 + group_in(d);
  for (int kh = 0; kh < d->kernel_h; kh++) {
    int ih = in_row(d, oh, kh);
    for (int kw = 0; kw < d->kernel_w && ih >= 0; kw++) {
      int iw = in_col(d, ow, kw);
      if (iw < 0) continue;
      for (int ic = ic0; ic < ic1; ic++)
        sum += (double)x[x_at(d, n, ih, iw, ic)] * w[w_at(d, kh, kw, ic, oc)];
    }
  }
  return sum;
}

void mxu_ref_conv2d_forward(mxu_op *op, const float *x, const float *w,
                            const float *b, float *y) {
  const mxu_conv2d_desc *d = &op->desc.conv2d;
  for (int n = 0; n < d->n; n++)
    for (int oh = 0; oh < d->out_h; oh++)
      for (int ow = 0; ow < d->out_w; ow++)
        for (int oc = 0; oc < d->out_c; oc++) {
          double sum = conv_point(d, x, w, n, oh, ow, oc);
          if (d->has_bias) sum += b[oc];
          y[y_at(d, n, oh, ow, oc)] =
              mxu_ref_activate(d->activation, (float)sum);
        }
}

/* dx at one input pixel gathers every (output, tap) pair that read it. */
static double data_point(const mxu_conv2d_desc *d, const float *dy,
                         const float *w, int n, int ih, int iw, int ic) {
  double sum = 0.0;
  int oc0 = first_out_of_in(d, ic), oc1 = oc0 + d->out_c / mxu_conv2d_groups(d);
  for (int kh = 0; kh < d->kernel_h; kh++) {
    int oh = out_index(ih, kh * dil_h(d), d->pad_top, d->stride_h, d->out_h);
    for (int kw = 0; kw < d->kernel_w && oh >= 0; kw++) {
      int ow = out_index(iw, kw * dil_w(d), d->pad_left, d->stride_w, d->out_w);
      if (ow < 0) continue;
      for (int oc = oc0; oc < oc1; oc++)
        sum += (double)dy[y_at(d, n, oh, ow, oc)] * w[w_at(d, kh, kw, ic, oc)];
    }
  }
  return sum;
}

void mxu_ref_conv2d_backward_data(mxu_op *op, const float *dy, const float *w,
                                  float *dx) {
  const mxu_conv2d_desc *d = &op->desc.conv2d;
  for (int n = 0; n < d->n; n++)
    for (int ih = 0; ih < d->in_h; ih++)
      for (int iw = 0; iw < d->in_w; iw++)
        for (int ic = 0; ic < d->in_c; ic++)
          dx[x_at(d, n, ih, iw, ic)] =
              (float)data_point(d, dy, w, n, ih, iw, ic);
}

static double weight_point(const mxu_conv2d_desc *d, const float *x,
                           const float *dy, int kh, int kw, int ic, int oc) {
  double sum = 0.0;
  for (int n = 0; n < d->n; n++)
    for (int oh = 0; oh < d->out_h; oh++) {
      int ih = in_row(d, oh, kh);
      for (int ow = 0; ow < d->out_w && ih >= 0; ow++) {
        int iw = in_col(d, ow, kw);
        if (iw < 0) continue;
        sum += (double)x[x_at(d, n, ih, iw, ic)] * dy[y_at(d, n, oh, ow, oc)];
      }
    }
  return sum;
}

static double bias_point(const mxu_conv2d_desc *d, const float *dy, int oc) {
  double sum = 0.0;
  for (int n = 0; n < d->n; n++)
    for (int oh = 0; oh < d->out_h; oh++)
      for (int ow = 0; ow < d->out_w; ow++) sum += dy[y_at(d, n, oh, ow, oc)];
  return sum;
}

void mxu_ref_conv2d_backward_weights(mxu_op *op, const float *x,
                                     const float *dy, float *dw, float *db) {
  const mxu_conv2d_desc *d = &op->desc.conv2d;
  for (int kh = 0; kh < d->kernel_h; kh++)
    for (int kw = 0; kw < d->kernel_w; kw++)
      for (int g = 0; g < group_in(d); g++)
        for (int oc = 0; oc < d->out_c; oc++) {
          int ic = first_in_of_out(d, oc) + g;
          dw[w_at(d, kh, kw, ic, oc)] =
              (float)weight_point(d, x, dy, kh, kw, ic, oc);
        }
  if (!db) return;
  for (int oc = 0; oc < d->out_c; oc++) db[oc] = (float)bias_point(d, dy, oc);
}
