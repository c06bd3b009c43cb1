/* conv_lstm.c — ConvLSTM2D: an LSTM over the steps of (steps, height,
 * width, channels) whose gates are convolutions, Keras' ConvLSTMCell:
 *
 *   gates = conv(x_t, kernel) + bias + conv_same(h_prev, recurrent_kernel)
 *   i, f, o = recurrent_activation(gates' i, f, o)
 *   c = f c_prev + i activation(gates' c);  h = o activation(c)
 *
 * Each pixel is an LSTM cell of `filters` units (the gates i, f, c, o
 * along the last axis, as the kernels' columns). The input convolution
 * runs once over every step's image (batch x steps images); the recurrent
 * one step by step over the batch's h. Backward runs the steps in
 * reverse: the recurrent convolution's backward data carries dh to the
 * step before, and the input convolution's backward passes run once over
 * every step's gate gradient. The state starts at zeros. */
#include "model/layers/layers.h"

#include <limits.h>
#include <string.h>

/* ---- shapes ---------------------------------------------------------------
 */

typedef struct lstm_dims {
  int64_t n, steps, h, w, c; /* batch, and the input's */
  int64_t oh, ow, units;     /* the state's image: (oh, ow, filters) */
  int64_t pix;               /* oh x ow */
} lstm_dims;

static const mxu_conv_lstm2d_config *config_of(const mxu_layer *layer) {
  return &layer->config.conv_lstm;
}

static int at_least_one(int v) { return v > 1 ? v : 1; }

static int span(const mxu_conv_lstm2d_config *c, int a) {
  return (c->kernel_size[a] - 1) * at_least_one(c->dilation_rate[a]) + 1;
}

/* ConvLSTM1D's frames (width, channels) are images (1, width, channels),
 * its sizes the 1 x n window (kernel_size[0] = 1), as Conv1D's. */
static int is_1d(const mxu_layer *layer) { return layer->cls->sequence; }

static lstm_dims dims_of(const mxu_layer *layer, int64_t batch) {
  const int64_t *in = layer->in_shape.dims;
  const mxu_conv_lstm2d_config *c = config_of(layer);
  lstm_dims d = {batch, in[0], 1, in[1], in[2], 0, 0, c->filters, 0};
  if (!is_1d(layer)) d.h = in[1], d.w = in[2], d.c = in[3];
  d.oh = mxu_conv_output_size((int)d.h, span(c, 0), c->strides[0], c->padding,
                              NULL, NULL);
  d.ow = mxu_conv_output_size((int)d.w, span(c, 1), c->strides[1], c->padding,
                              NULL, NULL);
  d.pix = d.oh * d.ow;
  return d;
}

static mxu_status conv_lstm_infer(mxu_layer *layer) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 4 - is_1d(layer) || layer->time_steps)
    return mxu_fail(MXU_ERR_SHAPE, "%s: expects %s input, got %s", layer->name,
                    is_1d(layer) ? "(steps, width, channels)"
                                 : "(steps, height, width, channels)",
                    text);
  if (c->filters <= 0 || c->filters > 1 << 20)
    return mxu_fail(MXU_ERR_ARG, "%s: filters %d must be in 1..%d", layer->name,
                    c->filters, 1 << 20);
  if (!mxu_rnn_activation_supported(c->activation) ||
      !mxu_rnn_activation_supported(c->recurrent_activation))
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: activation %s and recurrent_activation %s: mxu's "
                    "cells take tanh, sigmoid, hard_sigmoid, relu and linear",
                    layer->name, mxu_json_activation_name(c->activation),
                    mxu_json_activation_name(c->recurrent_activation));
  if (c->padding == MXU_CAUSAL)
    return mxu_fail(MXU_ERR_ARG, "%s: padding 'causal' is Conv1D's only",
                    layer->name);
  for (int a = 0; a < 2; a++)
    if (c->kernel_size[a] < 1 || c->strides[a] < 1 || c->dilation_rate[a] < 1 ||
        c->kernel_size[a] > MXU_MAX_WINDOW || c->strides[a] > MXU_MAX_WINDOW ||
        c->dilation_rate[a] > MXU_MAX_WINDOW ||
        (c->dilation_rate[a] > 1 && c->strides[a] > 1))
      return mxu_fail(MXU_ERR_ARG,
                      "%s: kernel %d, stride %d and dilation %d must be in "
                      "1..%d, the dilation 1 where the stride is not",
                      layer->name, c->kernel_size[a], c->strides[a],
                      c->dilation_rate[a], MXU_MAX_WINDOW);
  lstm_dims d = dims_of(layer, 1);
  if (d.oh <= 0 || d.ow <= 0)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: input %s is smaller than the %dx%d kernel with "
                    "'valid' padding",
                    layer->name, text, c->kernel_size[0], c->kernel_size[1]);
  int64_t out[4] = {d.steps, d.oh, d.ow, d.units};
  int64_t out1d[3] = {d.steps, d.ow, d.units};
  const int64_t *dims = is_1d(layer) ? out1d : out;
  int rank = 4 - is_1d(layer);
  layer->out_shape = c->return_sequences ? mxu_shape_make(rank, dims)
                                         : mxu_shape_make(rank - 1, dims + 1);
  return MXU_OK;
}

static int conv_lstm_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  int64_t f = c->filters, kh = c->kernel_size[0], kw = c->kernel_size[1];
  /* ConvLSTM1D's (kw, channels, 4 f) are the 2-D kind's with kh = 1. */
  int one = is_1d(layer);
  int64_t kernel[4] = {kh, kw, dims_of(layer, 1).c, 4 * f};
  int64_t recurrent[4] = {kh, kw, f, 4 * f}, bias = 4 * f;
  decls[0] = mxu_weight_decl("kernel", mxu_shape_make(4 - one, kernel + one),
                             &c->kernel, mxu_init_glorot_uniform());
  decls[1] = mxu_weight_decl(
      "recurrent_kernel", mxu_shape_make(4 - one, recurrent + one),
      &c->recurrent,
      (mxu_initializer){.kind = MXU_INIT_ORTHOGONAL, .gain = 1.0f});
  if (!c->use_bias) return 2;
  decls[2] = mxu_weight_decl("bias", mxu_shape_make(1, &bias), &c->bias,
                             mxu_init_zeros());
  if (c->unit_forget_bias) { /* the f gate's ones */
    decls[2].ones_first = f;
    decls[2].ones_count = f;
  }
  return 3;
}

/* Per sample: the two convolutions' products, forward and twice
 * backward, and some ten float ops per gate value each way. */
static double conv_lstm_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  lstm_dims d = dims_of(layer, 1);
  double taps = (double)c->kernel_size[0] * c->kernel_size[1];
  double gates = (double)d.steps * d.pix * 4.0 * d.units;
  double products = 2.0 * gates * taps * (double)(d.c + d.units);
  return products * (step->need_dx ? 3.0 : 2.5) + 20.0 * gates;
}

/* ---- the plan -------------------------------------------------------------
 * ops[0] the input convolution (batch x steps images, its bias fused),
 * ops[1] the recurrent one (batch images, same padding); scratch[0] the
 * buffers below, one after another. */

enum {
  BUF_P,   /* input convolution's output, (n, steps) rows; backward dP */
  BUF_G,   /* each step's activated gates, (step, n) rows */
  BUF_C,   /* each step's cell state */
  BUF_H,   /* each step's h */
  BUF_R,   /* a step's recurrent product; backward its gate gradient */
  BUF_DH,  /* backward: dh carried to the step before */
  BUF_DC,  /* backward: dc carried to the step before */
  BUF_DW,  /* backward: a step's recurrent kernel gradient */
  BUF_TMP, /* backward: a cell's activated c and its slope */
  BUFS
};

static void buffer_sizes(const mxu_layer *layer, const lstm_dims *d,
                         int64_t *size) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  int64_t rows = d->n * d->pix, u = d->units;
  size[BUF_P] = d->steps * rows * 4 * u;
  size[BUF_G] = d->steps * rows * 4 * u;
  size[BUF_C] = d->steps * rows * u;
  size[BUF_H] = d->steps * rows * u;
  size[BUF_R] = rows * 4 * u;
  size[BUF_DH] = rows * u;
  size[BUF_DC] = rows * u;
  size[BUF_DW] = (int64_t)c->kernel_size[0] * c->kernel_size[1] * u * 4 * u;
  size[BUF_TMP] = 2 * u;
}

static float *buffer(const mxu_layer *layer, const mxu_layer_run *run, int k) {
  lstm_dims d = dims_of(layer, layer->compiled->batch);
  int64_t size[BUFS], at = 0;
  buffer_sizes(layer, &d, size);
  for (int i = 0; i < k; i++) at += size[i];
  return (float *)(void *)(run->arena + layer->compiled->scratch[0]) + at;
}

static mxu_conv2d_desc conv_describe(const mxu_layer *layer, int batch,
                                     int recurrent) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  lstm_dims d = dims_of(layer, batch);
  mxu_conv2d_desc desc = {0};
  desc.n = (int)(recurrent ? d.n : d.n * d.steps);
  desc.in_h = (int)(recurrent ? d.oh : d.h);
  desc.in_w = (int)(recurrent ? d.ow : d.w);
  desc.in_c = (int)(recurrent ? d.units : d.c);
  desc.out_h = (int)d.oh, desc.out_w = (int)d.ow;
  desc.out_c = (int)(4 * d.units);
  desc.kernel_h = c->kernel_size[0], desc.kernel_w = c->kernel_size[1];
  desc.stride_h = recurrent ? 1 : c->strides[0];
  desc.stride_w = recurrent ? 1 : c->strides[1];
  desc.dilation_h = recurrent ? 1 : at_least_one(c->dilation_rate[0]);
  desc.dilation_w = recurrent ? 1 : at_least_one(c->dilation_rate[1]);
  desc.groups = 1;
  mxu_padding padding = recurrent ? MXU_SAME : c->padding;
  int kh = recurrent ? c->kernel_size[0] : span(c, 0);
  int kw = recurrent ? c->kernel_size[1] : span(c, 1);
  mxu_conv_output_size(desc.in_h, kh, desc.stride_h, padding, &desc.pad_top,
                       &desc.pad_bottom);
  mxu_conv_output_size(desc.in_w, kw, desc.stride_w, padding, &desc.pad_left,
                       &desc.pad_right);
  desc.has_bias = !recurrent && c->use_bias;
  desc.activation = MXU_LINEAR;
  desc.bf16 = layer->compiled->bf16;
  return desc;
}

static mxu_status conv_lstm_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  lstm_dims d = dims_of(layer, batch);
  int64_t size[BUFS], total = 0;
  buffer_sizes(layer, &d, size);
  for (int i = 0; i < BUFS; i++) total += size[i];
  layer->compiled->scratch[0] =
      mxu_arena_reserve(layout, (size_t)total * sizeof(float));
  for (int k = 0; k < 2; k++) {
    mxu_conv2d_desc desc = conv_describe(layer, batch, k);
    MXU_TRY(backend->conv2d_create(&desc, &layer->compiled->ops[k]));
  }
  return MXU_OK;
}

/* ---- forward and backward -------------------------------------------------
 */

/* The input step processing step s reads. */
static int64_t input_step(const mxu_layer *layer, const lstm_dims *d,
                          int64_t s) {
  return config_of(layer)->go_backwards ? d->steps - 1 - s : s;
}

static void conv_lstm_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  lstm_dims d = dims_of(layer, layer->compiled->batch);
  int64_t u = d.units, rows = d.n * d.pix, image = d.pix * 4 * u;
  float *p = buffer(layer, run, BUF_P), *g = buffer(layer, run, BUF_G);
  float *cells = buffer(layer, run, BUF_C), *hs = buffer(layer, run, BUF_H);
  float *r = buffer(layer, run, BUF_R);
  run->backend->conv2d_forward(run->ops[0], run->x, run->w[0],
                               c->use_bias ? run->w[2] : NULL, p);
  for (int64_t s = 0; s < d.steps; s++) {
    int64_t t = input_step(layer, &d, s);
    float *gs = g + s * rows * 4 * u, *cs = cells + s * rows * u,
          *hs_s = hs + s * rows * u;
    if (s)
      run->backend->conv2d_forward(run->ops[1], hs_s - rows * u, run->w[1],
                                   NULL, r);
    for (int64_t n = 0; n < d.n; n++) {
      memcpy(gs + n * image, p + (n * d.steps + t) * image,
             (size_t)image * sizeof(float));
      for (int64_t k = 0; s && k < image; k++)
        gs[n * image + k] += r[n * image + k];
    }
    for (int64_t q = 0; q < rows; q++)
      mxu_lstm_cell_forward(c->activation, c->recurrent_activation, u,
                            gs + q * 4 * u, s ? cs - rows * u + q * u : NULL,
                            cs + q * u, hs_s + q * u);
  }
  /* The output: every step's h (in the order processed), or the last. */
  int64_t frame = d.pix * u;
  for (int64_t n = 0; n < d.n; n++)
    for (int64_t s = c->return_sequences ? 0 : d.steps - 1; s < d.steps; s++)
      memcpy(run->y + (n * (c->return_sequences ? d.steps : 1) +
                       (c->return_sequences ? s : 0)) *
                          frame,
             hs + (s * d.n + n) * frame, (size_t)frame * sizeof(float));
}

/* The output's gradient for step s, added into dh (rows of the batch). */
static void add_output_gradient(const mxu_layer *layer, const lstm_dims *d,
                                const float *dy, int64_t s, float *dh) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  int64_t frame = d->pix * d->units;
  if (!c->return_sequences && s != d->steps - 1) return;
  for (int64_t n = 0; n < d->n; n++) {
    const float *from =
        dy + (c->return_sequences ? n * d->steps + s : n) * frame;
    for (int64_t k = 0; k < frame; k++) dh[n * frame + k] += from[k];
  }
}

static void conv_lstm_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  lstm_dims d = dims_of(layer, layer->compiled->batch);
  int64_t u = d.units, rows = d.n * d.pix, image = d.pix * 4 * u;
  float *dp = buffer(layer, run, BUF_P), *g = buffer(layer, run, BUF_G);
  float *cells = buffer(layer, run, BUF_C), *hs = buffer(layer, run, BUF_H);
  float *dg = buffer(layer, run, BUF_R), *dh = buffer(layer, run, BUF_DH);
  float *dc = buffer(layer, run, BUF_DC), *dw = buffer(layer, run, BUF_DW);
  float *tmp = buffer(layer, run, BUF_TMP);
  int64_t weights = (int64_t)c->kernel_size[0] * c->kernel_size[1] * u * 4 * u;
  memset(dh, 0, (size_t)(rows * u) * sizeof(float));
  memset(dc, 0, (size_t)(rows * u) * sizeof(float));
  memset(run->dw[1], 0, (size_t)weights * sizeof(float));
  for (int64_t s = d.steps - 1; s >= 0; s--) {
    add_output_gradient(layer, &d, run->dy, s, dh);
    const float *gs = g + s * rows * 4 * u, *cs = cells + s * rows * u;
    for (int64_t q = 0; q < rows; q++)
      mxu_lstm_cell_backward(c->activation, c->recurrent_activation, u,
                             gs + q * 4 * u, s ? cs - rows * u + q * u : NULL,
                             cs + q * u, dh + q * u, dc + q * u, dg + q * 4 * u,
                             tmp);
    int64_t t = input_step(layer, &d, s);
    for (int64_t n = 0; n < d.n; n++)
      memcpy(dp + (n * d.steps + t) * image, dg + n * image,
             (size_t)image * sizeof(float));
    if (!s) break;
    /* The recurrent product's: the step before's h and dh. dg is one
     * buffer refilled each step: the backend must not take it for a copy
     * it made of the step after's. */
    run->backend->conv2d_new_inputs(run->ops[1]);
    run->backend->conv2d_backward_weights(run->ops[1], hs + (s - 1) * rows * u,
                                          dg, dw, NULL);
    for (int64_t k = 0; k < weights; k++) run->dw[1][k] += dw[k];
    run->backend->conv2d_backward_data(run->ops[1], dg, run->w[1], dh);
  }
  run->backend->conv2d_backward_weights(run->ops[0], run->x, dp, run->dw[0],
                                        c->use_bias ? run->dw[2] : NULL);
  if (run->need_dx)
    run->backend->conv2d_backward_data(run->ops[0], dp, run->w[0], run->dx);
}

/* ---- pjrt ------------------------------------------------------------------
 * The same steps unrolled: the input's convolution over every step's
 * image, then per step the recurrent convolution and the cells over
 * (batch x pixels, 4 filters) rows; XLA's differentiation runs them
 * backward. */

static mxu_hlo_window window_of(const mxu_conv2d_desc *d) {
  return (mxu_hlo_window){.stride = {d->stride_h, d->stride_w},
                          .pad_low = {d->pad_top, d->pad_left},
                          .pad_high = {d->pad_bottom, d->pad_right},
                          .lhs_dilation = {1, 1},
                          .rhs_dilation = {d->dilation_h, d->dilation_w},
                          .feature_groups = 1};
}

/* A kernel as HWIO: ConvLSTM1D's (kw, in, out) as (1, kw, in, out). */
static mxu_hlo_value hwio(mxu_hlo *h, mxu_hlo_value kernel) {
  const mxu_hlo_shape *k = mxu_hlo_shape_of(h, kernel);
  if (k->rank == 4) return kernel;
  int64_t dims[4] = {1, k->dims[0], k->dims[1], k->dims[2]};
  return mxu_hlo_reshape(h, kernel, mxu_hlo_shape_make(k->dtype, 4, dims));
}

/* Gate g's columns of rows (rows, 4 u). */
static mxu_hlo_value gate(mxu_hlo *h, mxu_hlo_value v, int64_t rows, int64_t u,
                          int g) {
  int64_t start[2] = {0, g * u}, limit[2] = {rows, (g + 1) * u},
          stride[2] = {1, 1};
  return mxu_hlo_slice(h, v, start, limit, stride);
}

static mxu_hlo_value conv_lstm_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  mxu_hlo *h = e->h;
  lstm_dims d = dims_of(layer, e->batch);
  int64_t u = d.units, rows = d.n * d.pix;
  mxu_conv2d_desc in = conv_describe(layer, e->batch, 0),
                  rec = conv_describe(layer, e->batch, 1);
  mxu_hlo_window wi = window_of(&in), wr = window_of(&rec);
  int64_t images[4] = {d.n * d.steps, d.h, d.w, d.c};
  int64_t by_step[4] = {d.n, d.steps, d.pix, 4 * u};
  int64_t cells[2] = {rows, 4 * u}, state[4] = {d.n, d.oh, d.ow, u};
  int64_t frame[5] = {d.n, 1, d.oh, d.ow, u};
  mxu_hlo_value p = mxu_emit_result(
      e, mxu_hlo_convolution(
             h,
             mxu_emit_compute(e, mxu_hlo_reshape(h, e->in[0],
                                                 mxu_hlo_shape_make(
                                                     MXU_HLO_F32, 4, images))),
             mxu_emit_compute(e, hwio(h, e->w[0])), &wi));
  if (c->use_bias) p = mxu_emit_bias(e, p, e->w[2]);
  p = mxu_hlo_reshape(h, p, mxu_hlo_shape_make(MXU_HLO_F32, 4, by_step));
  mxu_hlo_value hv = 0, cell = 0, out = 0;
#define ACT(a, v) mxu_emit_activation(e, a, 0.0f, v)
  for (int64_t s = 0; s < d.steps; s++) {
    int64_t t = input_step(layer, &d, s);
    const int64_t start[4] = {0, t, 0, 0},
                  limit[4] = {d.n, t + 1, d.pix, 4 * u}, ones[4] = {1, 1, 1, 1};
    mxu_hlo_value z =
        mxu_hlo_reshape(h, mxu_hlo_slice(h, p, start, limit, ones),
                        mxu_hlo_shape_make(MXU_HLO_F32, 2, cells));
    if (hv) {
      mxu_hlo_value r = mxu_emit_result(
          e, mxu_hlo_convolution(
                 h,
                 mxu_emit_compute(
                     e, mxu_hlo_reshape(
                            h, hv, mxu_hlo_shape_make(MXU_HLO_F32, 4, state))),
                 mxu_emit_compute(e, hwio(h, e->w[1])), &wr));
      z = mxu_hlo_add(
          h, z,
          mxu_hlo_reshape(h, r, mxu_hlo_shape_make(MXU_HLO_F32, 2, cells)));
    }
    mxu_hlo_value i = ACT(c->recurrent_activation, gate(h, z, rows, u, 0));
    mxu_hlo_value f = ACT(c->recurrent_activation, gate(h, z, rows, u, 1));
    mxu_hlo_value k = ACT(c->activation, gate(h, z, rows, u, 2));
    mxu_hlo_value o = ACT(c->recurrent_activation, gate(h, z, rows, u, 3));
    mxu_hlo_value ik = mxu_hlo_mul(h, i, k);
    cell = cell ? mxu_hlo_add(h, mxu_hlo_mul(h, f, cell), ik) : ik;
    hv = mxu_hlo_mul(h, o, ACT(c->activation, cell));
    if (!c->return_sequences) continue;
    mxu_hlo_value step =
        mxu_hlo_reshape(h, hv, mxu_hlo_shape_make(MXU_HLO_F32, 5, frame));
    out = out ? mxu_hlo_concatenate(h, out, step, 1) : step;
  }
#undef ACT
  return mxu_hlo_reshape(h, c->return_sequences ? out : hv,
                         mxu_batch_shape(e->batch, &layer->out_shape));
}

/* ---- Keras config ---------------------------------------------------------
 */

static const char *const conv_lstm_keys[] = {"filters",
                                             "kernel_size",
                                             "strides",
                                             "padding",
                                             "data_format",
                                             "dilation_rate",
                                             "activation",
                                             "recurrent_activation",
                                             "use_bias",
                                             "kernel_initializer",
                                             "recurrent_initializer",
                                             "bias_initializer",
                                             "unit_forget_bias",
                                             "kernel_regularizer",
                                             "recurrent_regularizer",
                                             "bias_regularizer",
                                             "activity_regularizer",
                                             "kernel_constraint",
                                             "recurrent_constraint",
                                             "bias_constraint",
                                             "dropout",
                                             "recurrent_dropout",
                                             "seed",
                                             "return_sequences",
                                             "return_state",
                                             "go_backwards",
                                             "stateful",
                                             "unroll",
                                             "time_major",
                                             "zero_output_for_mask",
                                             NULL};

/* A rate other than 0 is refused: mxu's ConvLSTM2D drops nothing. */
static mxu_status require_no_dropout(const mxu_json_where *where,
                                     const cJSON *config, const char *key) {
  float rate = 0.0f;
  MXU_TRY(mxu_json_float(where, config, key, MXU_JSON_OPTIONAL, &rate));
  if (rate == 0.0f) return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "ConvLSTM2D with %s %g is not supported (only 0)", key,
                       (double)rate);
}

/* ConvLSTM2D's config, or ConvLSTM1D's (one: its sizes lists of one, the
 * 1 x n window). */
static mxu_status read_conv_lstm_of(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name, int one) {
  mxu_conv_lstm2d_config c = mxu_conv_lstm2d_defaults(0, 1, 1);
  int keras2 = node->model->keras2_names;
  c.name = name;
  if (keras2) c.recurrent_activation = MXU_HARD_SIGMOID_TF2;
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.filters));
  MXU_TRY(mxu_config_window_size(where, config, "kernel_size",
                                 MXU_JSON_REQUIRED, one, c.kernel_size));
  MXU_TRY(mxu_config_window_size(where, config, "strides", MXU_JSON_OPTIONAL,
                                 one, c.strides));
  MXU_TRY(mxu_json_padding(where, config, &c.padding));
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_config_window_size(where, config, "dilation_rate",
                                 MXU_JSON_OPTIONAL, one, c.dilation_rate));
  MXU_TRY(
      mxu_json_activation(where, config, "activation", keras2, &c.activation));
  MXU_TRY(mxu_json_activation(where, config, "recurrent_activation", keras2,
                              &c.recurrent_activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &c.use_bias));
  MXU_TRY(
      mxu_json_bool(where, config, "unit_forget_bias", &c.unit_forget_bias));
  MXU_TRY(
      mxu_json_bool(where, config, "return_sequences", &c.return_sequences));
  MXU_TRY(mxu_json_bool(where, config, "go_backwards", &c.go_backwards));
  MXU_TRY(mxu_json_require_false(where, config, "return_state"));
  MXU_TRY(mxu_json_require_false(where, config, "stateful"));
  MXU_TRY(mxu_json_require_false(where, config, "time_major"));
  MXU_TRY(require_no_dropout(where, config, "dropout"));
  MXU_TRY(require_no_dropout(where, config, "recurrent_dropout"));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "recurrent", &c.recurrent));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c.bias));
  return mxu_json_applied(where, node,
                          (one ? mxu_apply_conv_lstm1d : mxu_apply_conv_lstm2d)(
                              node->model, &c, node->inputs[0]));
}

static mxu_status read_conv_lstm(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  return read_conv_lstm_of(where, config, node, name, 0);
}

static mxu_status read_conv_lstm1d(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  return read_conv_lstm_of(where, config, node, name, 1);
}

static void write_conv_lstm(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_conv_lstm2d_config *c = config_of(layer);
  int dilation[2] = {at_least_one(c->dilation_rate[0]),
                     at_least_one(c->dilation_rate[1])};
  mxu_json_put_bool(out, config, "return_sequences", c->return_sequences);
  mxu_json_put_bool(out, config, "return_state", 0);
  mxu_json_put_bool(out, config, "go_backwards", c->go_backwards);
  mxu_json_put_bool(out, config, "stateful", 0);
  mxu_json_put_bool(out, config, "unroll", 0);
  mxu_json_put_number(out, config, "filters", c->filters);
  int one = is_1d(layer);
  mxu_config_put_window_size(out, config, "kernel_size", c->kernel_size, one);
  mxu_config_put_window_size(out, config, "strides", c->strides, one);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(c->padding));
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_config_put_window_size(out, config, "dilation_rate", dilation, one);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(c->activation));
  mxu_json_put_string(out, config, "recurrent_activation",
                      mxu_json_activation_name(c->recurrent_activation));
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  mxu_config_put_initializers(
      out, config, "kernel", &c->kernel.initializer, mxu_init_glorot_uniform(),
      "recurrent", &c->recurrent.initializer,
      (mxu_initializer){.kind = MXU_INIT_ORTHOGONAL, .gain = 1.0f});
  mxu_initializer bias = mxu_init_or(&c->bias.initializer, mxu_init_zeros());
  mxu_json_put_initializer(out, config, "bias_initializer", &bias);
  mxu_json_put_bool(out, config, "unit_forget_bias", c->unit_forget_bias);
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "recurrent",
                           &c->recurrent, 1);
  mxu_json_put_regularizer(out, config, "bias_regularizer",
                           &c->bias.regularizer);
  mxu_json_put_constraint(out, config, "bias_constraint", &c->bias.constraint);
  mxu_json_put_float(out, config, "dropout", 0.0f);
  mxu_json_put_float(out, config, "recurrent_dropout", 0.0f);
}

static const char *cell_group(const mxu_layer *layer, int k) {
  (void)layer;
  (void)k;
  return "cell";
}

#define CONV_LSTM_CLASS(symbol, keras_name, reader, one)                       \
  const mxu_layer_class symbol = {.class_name = keras_name,                    \
                                  .keras3_group = cell_group,                  \
                                  .sequence = one,                             \
                                  .config_keys = conv_lstm_keys,               \
                                  .read_config = reader,                       \
                                  .write_config = write_conv_lstm,             \
                                  .min_inputs = 1,                             \
                                  .max_inputs = 1,                             \
                                  .infer = conv_lstm_infer,                    \
                                  .declare = conv_lstm_declare,                \
                                  .plan = conv_lstm_plan,                      \
                                  .forward = conv_lstm_forward,                \
                                  .backward = conv_lstm_backward,              \
                                  .flops = conv_lstm_flops,                    \
                                  .emit = conv_lstm_emit}

CONV_LSTM_CLASS(mxu_conv_lstm2d_class, "ConvLSTM2D", read_conv_lstm, 0);
CONV_LSTM_CLASS(mxu_conv_lstm1d_class, "ConvLSTM1D", read_conv_lstm1d, 1);
