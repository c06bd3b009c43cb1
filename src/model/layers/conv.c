/* conv.c — Conv2D (channels_last, HWIO kernel, valid/same, strides,
 * dilation, groups, optional bias, activation), Conv1D (a Conv2D over the
 * image (1, steps, channels), causal padding too) and DepthwiseConv2D, which
 * is a Conv2D with a group per input channel: its (kh, kw, in, multiplier)
 * kernel is, value for value, the grouped (kh, kw, 1, in * multiplier)
 * one. */
#include "model/layers/layers.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* What both classes are, as one convolution. */
typedef struct conv_spec {
  int filters, groups;
  const int *kernel, *strides, *dilation;
  mxu_padding padding;
  mxu_activation activation;
  int use_bias;
} conv_spec;

static int is_depthwise(const mxu_layer *layer) {
  return layer->cls == &mxu_depthwise_conv2d_class ||
         layer->cls == &mxu_depthwise_conv1d_class;
}

static int at_least_one(int v) { return v > 1 ? v : 1; }

static int is_separable(const mxu_layer *layer) {
  return layer->cls == &mxu_separable_conv2d_class ||
         layer->cls == &mxu_separable_conv1d_class;
}

static int is_transpose(const mxu_layer *layer) {
  return layer->cls == &mxu_conv2d_transpose_class ||
         layer->cls == &mxu_conv1d_transpose_class;
}

/* The input's channels, 0 for an input of the wrong rank. */
static int in_channels(const mxu_layer *layer) {
  mxu_shape image = mxu_image_shape(layer, &layer->in_shape);
  return image.rank == 3 ? (int)image.dims[2] : 0;
}

/* A SeparableConv2D's spec is its depthwise half's: no bias, linear. */
static conv_spec spec_of(const mxu_layer *layer) {
  int in = in_channels(layer);
  if (is_separable(layer)) {
    const mxu_separable_conv2d_config *c = &layer->config.separable;
    return (conv_spec){
        in * c->depth_multiplier, in,         c->kernel_size, c->strides,
        c->dilation_rate,         c->padding, MXU_LINEAR,     0};
  }
  if (is_depthwise(layer)) {
    const mxu_depthwise_conv2d_config *c = &layer->config.depthwise;
    return (conv_spec){
        in * c->depth_multiplier, in,         c->kernel_size, c->strides,
        c->dilation_rate,         c->padding, c->activation,  c->use_bias};
  }
  const mxu_conv2d_config *c = &layer->config.conv;
  return (conv_spec){c->filters,       at_least_one(c->groups),
                     c->kernel_size,   c->strides,
                     c->dilation_rate, c->padding,
                     c->activation,    c->use_bias};
}

/* A dilated kernel spans (k - 1) * dilation + 1 pixels; Keras' output size
 * and 'same' padding are the span's. */
static int span(const conv_spec *s, int axis) {
  return (s->kernel[axis] - 1) * at_least_one(s->dilation[axis]) + 1;
}

static mxu_status conv2d_infer(mxu_layer *layer) {
  conv_spec s = spec_of(layer);
  int in = in_channels(layer);
  int multiplier =
      is_depthwise(layer)   ? layer->config.depthwise.depth_multiplier
      : is_separable(layer) ? layer->config.separable.depth_multiplier
                            : 1;
  if (multiplier <= 0)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: depth_multiplier must be positive, got %d",
                    layer->name, multiplier);
  if (is_separable(layer) && layer->config.separable.filters <= 0)
    return mxu_fail(MXU_ERR_ARG, "%s: filters must be positive, got %d",
                    layer->name, layer->config.separable.filters);
  if (s.filters <= 0 && !is_depthwise(layer) && !is_separable(layer))
    return mxu_fail(MXU_ERR_ARG, "%s: filters must be positive, got %d",
                    layer->name, s.filters);
  if (s.dilation[0] <= 0 || s.dilation[1] <= 0 ||
      s.dilation[0] > MXU_MAX_WINDOW || s.dilation[1] > MXU_MAX_WINDOW)
    return mxu_fail(MXU_ERR_ARG, "%s: dilation_rate %dx%d must be in 1..%d",
                    layer->name, s.dilation[0], s.dilation[1], MXU_MAX_WINDOW);
  if ((s.dilation[0] > 1 || s.dilation[1] > 1) &&
      (s.strides[0] > 1 || s.strides[1] > 1))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: dilation_rate > 1 with strides > 1 is not supported "
                    "(nor in Keras): use one or the other",
                    layer->name);
  if (in > 0 && (s.groups <= 0 || in % s.groups || s.filters % s.groups))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: groups %d must divide the input's %d channels and "
                    "the %d filters",
                    layer->name, s.groups, in, s.filters);
  int size[2] = {span(&s, 0), span(&s, 1)};
  return mxu_window_infer(
      layer, "kernel", size, s.strides, s.padding, layer->cls->sequence,
      is_separable(layer) ? layer->config.separable.filters : s.filters);
}

static int conv2d_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  conv_spec s = spec_of(layer);
  int64_t kh = s.kernel[0], kw = s.kernel[1], out = s.filters;
  int64_t in = in_channels(layer);
  const mxu_weight_options *bias;
  /* A sequence layer's kernels are its 2-D kind's without the first
   * axis (kh = 1): (kw, in, multiplier), (1, in * multiplier, filters). */
  int sequence = layer->cls->sequence;
  if (is_separable(layer)) {
    const mxu_separable_conv2d_config *c = &layer->config.separable;
    int64_t depthwise[4] = {kh, kw, in, c->depth_multiplier};
    int64_t pointwise[4] = {1, 1, out, c->filters};
    decls[0] = mxu_weight_decl(
        "depthwise_kernel", mxu_shape_make(4 - sequence, depthwise + sequence),
        &c->depthwise, mxu_init_glorot_uniform());
    decls[1] = mxu_weight_decl(
        "pointwise_kernel", mxu_shape_make(4 - sequence, pointwise + sequence),
        &c->pointwise, mxu_init_glorot_uniform());
    if (!c->use_bias) return 2;
    int64_t filters = c->filters;
    decls[2] = mxu_weight_decl("bias", mxu_shape_make(1, &filters), &c->bias,
                               mxu_init_zeros());
    return 3;
  }
  if (is_depthwise(layer)) {
    const mxu_depthwise_conv2d_config *c = &layer->config.depthwise;
    int64_t kernel[4] = {kh, kw, in, c->depth_multiplier};
    decls[0] = mxu_weight_decl("depthwise_kernel",
                               mxu_shape_make(4 - sequence, kernel + sequence),
                               &c->depthwise, mxu_init_glorot_uniform());
    bias = &c->bias;
  } else if (is_transpose(layer)) {
    /* Conv1DTranspose's (kw, out, in) is Conv2DTranspose's with kh = 1. */
    const mxu_conv2d_config *c = &layer->config.conv;
    int64_t kernel[4] = {kh, kw, out, in};
    decls[0] = mxu_weight_decl("kernel",
                               mxu_shape_make(4 - sequence, kernel + sequence),
                               &c->kernel, mxu_init_glorot_uniform());
    bias = &c->bias;
  } else {
    /* Conv1D's (kw, in / groups, out) is Conv2D's with kh = 1. */
    const mxu_conv2d_config *c = &layer->config.conv;
    int64_t kernel[4] = {kh, kw, in / s.groups, out};
    decls[0] = mxu_weight_decl(
        "kernel", mxu_shape_make(sequence ? 3 : 4, kernel + sequence),
        &c->kernel, mxu_init_glorot_uniform());
    bias = &c->bias;
  }
  if (!s.use_bias) return 1;
  decls[1] =
      mxu_weight_decl("bias", mxu_shape_make(1, &out), bias, mxu_init_zeros());
  return 2;
}

/* The conv as the graph has it: what a device runs (the ZeroPadding2D
 * before it pads there). */
static mxu_conv2d_desc graph_describe(const mxu_layer *layer, int batch) {
  conv_spec s = spec_of(layer);
  mxu_shape in = mxu_image_shape(layer, &layer->in_shape);
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  mxu_conv2d_desc d = {0};
  d.n = batch;
  d.in_h = (int)in.dims[0];
  d.in_w = (int)in.dims[1];
  d.in_c = (int)in.dims[2];
  d.out_h = (int)out.dims[0];
  d.out_w = (int)out.dims[1];
  d.out_c = s.filters;
  d.kernel_h = s.kernel[0];
  d.kernel_w = s.kernel[1];
  d.stride_h = s.strides[0];
  d.stride_w = s.strides[1];
  d.groups = s.groups;
  d.dilation_h = at_least_one(s.dilation[0]);
  d.dilation_w = at_least_one(s.dilation[1]);
  mxu_conv_output_size(d.in_h, span(&s, 0), d.stride_h, s.padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(d.in_w, span(&s, 1), d.stride_w, s.padding, &d.pad_left,
                       &d.pad_right);
  d.has_bias = s.use_bias;
  d.bf16 = layer->compiled->bf16;
  d.activation = s.activation;
  d.x_native = layer->compiled->native_in;
  d.y_native = layer->compiled->native_out;
  d.x_bf16 = (int)layer->compiled->x_bf16;
  d.y_bf16 = layer->compiled->y_bf16;
  d.dx_bf16 = (int)layer->compiled->dx_bf16;
  d.dy_bf16 = layer->compiled->dy_bf16;
  return d;
}

/* As the plan runs it: reading the input of a ZeroPadding2D folded into
 * it (compile), the conv pads that itself. */
static mxu_conv2d_desc conv2d_describe(const mxu_layer *layer, int batch) {
  mxu_conv2d_desc d = graph_describe(layer, batch);
  const int *m = layer->compiled->margins;
  d.in_h -= m[0] + m[1];
  d.in_w -= m[2] + m[3];
  d.pad_top += m[0], d.pad_bottom += m[1];
  d.pad_left += m[2], d.pad_right += m[3];
  return d;
}

int mxu_conv2d_chains(const mxu_layer *a, const mxu_layer *b,
                      const mxu_backend *backend, int batch) {
  if (!backend->conv2d_native || a->cls != &mxu_conv2d_class ||
      b->cls != &mxu_conv2d_class ||
      mxu_activation_rowwise(a->config.conv.activation))
    return 0; /* the native layout is blocked by channel: no softmax */
  mxu_conv2d_desc da = conv2d_describe(a, batch);
  mxu_conv2d_desc db = conv2d_describe(b, batch);
  return backend->conv2d_native(&da) && backend->conv2d_native(&db);
}

int mxu_conv2d_bf16_tensors(const mxu_layer *layer, const mxu_backend *backend,
                            int batch, int *y_too) {
  *y_too = 0;
  if (!backend->conv2d_bf16_tensors || layer->cls != &mxu_conv2d_class ||
      !layer->compiled->bf16 || layer->time_steps || mxu_layer_is_call(layer))
    return 0;
  mxu_conv2d_desc d = conv2d_describe(layer, batch);
  if (!backend->conv2d_bf16_tensors(&d)) return 0;
  /* With an activation, backward would read y for its derivative. */
  *y_too = spec_of(layer).activation == MXU_LINEAR;
  return 1;
}

/* The Dense a conv fused (fused_dense), or NULL. */
static const mxu_layer *fused_dense(const mxu_layer *layer) {
  const mxu_node_plan *p = layer->compiled;
  const mxu_layer *last =
      p->fused_layers ? p->fused[p->fused_layers - 1] : NULL;
  return last && last->cls == &mxu_dense_class ? last : NULL;
}

/* Fused with the MaxPooling2D that alone reads it (fused[0]), the relu
 * that alone reads that, and a Flatten and Dense after those, when compile
 * found them: the op and its workspace (scratch[0]). Where the backend
 * declines the Dense, the conv keeps the pooling and relu; returns 0 when
 * it declines those too. */
static int conv2d_plan_fused(mxu_layer *layer, const mxu_backend *backend,
                             const mxu_conv2d_desc *d, mxu_arena *layout) {
  mxu_node_plan *p = layer->compiled;
  mxu_pool2d_desc pool = mxu_pool2d_describe(p->fused[0], d->n);
  int relu = p->fused_layers > 1 && p->fused[1]->cls != &mxu_flatten_class;
  const mxu_layer *dense = fused_dense(layer);
  mxu_op **op = &p->ops[0];
  if (dense) {
    mxu_dense_desc dd = {d->n,
                         (int)mxu_shape_count(&dense->in_shape),
                         dense->config.dense.units,
                         dense->config.dense.use_bias,
                         MXU_LINEAR,
                         d->bf16};
    if (backend->conv_pool_dense_create(d, &pool, relu, &dd, op) != MXU_OK)
      p->fused_layers = 1 + relu; /* the Flatten and Dense run alone */
  }
  if (!fused_dense(layer) &&
      backend->conv_pool_create(d, &pool, relu, op) != MXU_OK)
    return 0;
  p->scratch[0] =
      mxu_arena_reserve(layout, backend->conv_pool_workspace_bytes(*op));
  return 1;
}

static mxu_status conv2d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  mxu_conv2d_desc d = conv2d_describe(layer, batch);
  if (layer->compiled->fused_layers > 0 &&
      conv2d_plan_fused(layer, backend, &d, layout))
    return MXU_OK;
  layer->compiled->fused_layers = 0;
  int64_t rows = (int64_t)batch * d.out_h * d.out_w;
  MXU_TRY(mxu_epilogue_plan(layer, spec_of(layer).activation, backend, rows,
                            d.out_c, layout, &d.activation));
  return backend->conv2d_create(&d, &layer->compiled->ops[0]);
}

static float *bias_of(const mxu_layer *layer, float *const *w) {
  return spec_of(layer).use_bias ? w[1] : NULL;
}

/* A fused Dense's weights follow the conv's in run->w (or dw). */
static void cpd_params(const mxu_layer *layer, float *const *w,
                       float *out[MXU_CPD_PARAMS]) {
  int own = layer->param_count;
  out[MXU_CPD_CONV_W] = w[0];
  out[MXU_CPD_CONV_B] = bias_of(layer, w);
  out[MXU_CPD_DENSE_W] = w[own];
  out[MXU_CPD_DENSE_B] =
      fused_dense(layer)->config.dense.use_bias ? w[own + 1] : NULL;
}

static void conv2d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  void *workspace =
      run->training ? run->arena + layer->compiled->scratch[0] : NULL;
  if (fused_dense(layer)) {
    float *w[MXU_CPD_PARAMS];
    cpd_params(layer, run->w, w);
    run->backend->conv_pool_dense_forward(run->ops[0], run->training, run->x,
                                          (const float *const *)w, run->y,
                                          workspace);
    return;
  }
  if (layer->compiled->fused_layers) {
    run->backend->conv_pool_forward(run->ops[0], run->training, run->x,
                                    run->w[0], bias_of(layer, run->w), run->y,
                                    workspace);
    return;
  }
  mxu_activation act = spec_of(layer).activation;
  run->backend->conv2d_forward(run->ops[0], run->x, run->w[0],
                               bias_of(layer, run->w),
                               mxu_epilogue_target(layer, act, run));
  mxu_epilogue_forward(layer, act, run);
}

static void conv2d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (fused_dense(layer)) {
    float *w[MXU_CPD_PARAMS], *dw[MXU_CPD_PARAMS];
    cpd_params(layer, run->w, w);
    cpd_params(layer, run->dw, dw);
    run->backend->conv_pool_dense_backward(
        run->ops[0], run->x, (const float *const *)w, run->dy,
        run->arena + layer->compiled->scratch[0], dw,
        run->need_dx ? run->dx : NULL);
    return;
  }
  if (layer->compiled->fused_layers) {
    run->backend->conv_pool_backward(run->ops[0], run->x, run->w[0], run->dy,
                                     run->arena + layer->compiled->scratch[0],
                                     run->dw[0], bias_of(layer, run->dw),
                                     run->need_dx ? run->dx : NULL);
    return;
  }
  mxu_activation act = spec_of(layer).activation;
  float *db = bias_of(layer, run->dw);
  if (act == MXU_RELU && run->backend->conv2d_backward_relu &&
      run->backend->conv2d_backward_relu(run->ops[0], run->x, run->w[0], run->y,
                                         run->dy, run->dw[0], db,
                                         run->need_dx ? run->dx : NULL))
    return;
  const float *dz = mxu_epilogue_backward(layer, act, run);
  run->backend->conv2d_backward_weights(run->ops[0], run->x, dz, run->dw[0],
                                        db);
  if (run->need_dx)
    run->backend->conv2d_backward_data(run->ops[0], dz, run->w[0], run->dx);
}

static const float *conv2d_logits(const mxu_layer *layer,
                                  const mxu_layer_run *run) {
  return mxu_epilogue_logits(layer, spec_of(layer).activation, run);
}

/* ---- Conv2D --------------------------------------------------------------
 */

const char *const mxu_conv_keys[] = {
    "filters",     "kernel_size",         "strides", "padding",
    "data_format", "dilation_rate",       "groups",  "activation",
    "use_bias",    MXU_WEIGHT_OPTION_KEYS};

/* The window's keys, kernel_size .. dilation_rate; a sequence layer's
 * (Conv1D's) sizes are the 1 x n window of its image and its padding may be
 * causal. */
static mxu_status read_window(const mxu_json_where *where, const cJSON *config,
                              int sequence, int kernel[2], int strides[2],
                              mxu_padding *padding, int dilation[2]) {
  MXU_TRY(mxu_config_window_size(where, config, "kernel_size",
                                 MXU_JSON_REQUIRED, sequence, kernel));
  MXU_TRY(mxu_config_window_size(where, config, "strides", MXU_JSON_OPTIONAL,
                                 sequence, strides));
  MXU_TRY((sequence ? mxu_json_padding_causal : mxu_json_padding)(where, config,
                                                                  padding));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_config_window_size(where, config, "dilation_rate",
                                MXU_JSON_OPTIONAL, sequence, dilation);
}

/* What Conv2D, Conv2DTranspose and Conv1D read alike: all of a Conv2D's
 * keys, a Conv1D's window of one dimension (sequence). */
static mxu_status read_conv_fields(const mxu_json_where *where,
                                   const cJSON *config,
                                   const mxu_json_node *node, const char *name,
                                   int sequence, mxu_conv2d_config *conv) {
  *conv = mxu_conv2d_defaults(0, 1, 1);
  conv->name = name;
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &conv->filters));
  MXU_TRY(read_window(where, config, sequence, conv->kernel_size, conv->strides,
                      &conv->padding, conv->dilation_rate));
  MXU_TRY(mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, INT_MAX,
                       &conv->groups));
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &conv->activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &conv->use_bias));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &conv->kernel));
  return mxu_config_weight_options(where, config, "bias", &conv->bias);
}

static mxu_status read_conv2d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name) {
  mxu_conv2d_config conv;
  MXU_TRY(read_conv_fields(where, config, node, name, 0, &conv));
  return mxu_json_applied(
      where, node, mxu_apply_conv2d(node->model, &conv, node->inputs[0]));
}

static void put_window(mxu_json_out *out, cJSON *config, const conv_spec *s,
                       int sequence) {
  int dilation[2] = {at_least_one(s->dilation[0]),
                     at_least_one(s->dilation[1])};
  mxu_config_put_window_size(out, config, "kernel_size", s->kernel, sequence);
  mxu_config_put_window_size(out, config, "strides", s->strides, sequence);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(s->padding));
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_config_put_window_size(out, config, "dilation_rate", dilation, sequence);
}

static void write_conv2d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_conv2d_config *conv = &layer->config.conv;
  conv_spec s = spec_of(layer);
  mxu_json_put_number(out, config, "filters", conv->filters);
  put_window(out, config, &s, layer->cls->sequence);
  /* Keras 3's transposed convolutions take no groups (tf.keras 2's
   * inherit Conv's). */
  if (!(out->keras3 && is_transpose(layer)))
    mxu_json_put_number(out, config, "groups", s.groups);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(conv->activation));
  mxu_json_put_bool(out, config, "use_bias", conv->use_bias);
  mxu_config_put_initializers(out, config, "kernel", &conv->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &conv->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "kernel", &conv->kernel, "bias",
                           &conv->bias, 1);
}

/* Keras 1's name, which Keras still reads. */
static const char *const conv2d_aliases[] = {"Convolution2D", NULL};

/* Each output reads kh * kw * (in / groups) inputs. */
static double conv2d_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  conv_spec s = spec_of(layer);
  double window =
      (double)s.kernel[0] * s.kernel[1] * in_channels(layer) / s.groups;
  return mxu_weighted_flops((double)mxu_shape_count(&layer->out_shape), window,
                            s.use_bias, s.activation, step);
}

static mxu_hlo_window window_of(const mxu_conv2d_desc *d) {
  return (mxu_hlo_window){.stride = {d->stride_h, d->stride_w},
                          .pad_low = {d->pad_top, d->pad_left},
                          .pad_high = {d->pad_bottom, d->pad_right},
                          .lhs_dilation = {1, 1},
                          .rhs_dilation = {d->dilation_h, d->dilation_w},
                          .feature_groups = mxu_conv2d_groups(d)};
}

static mxu_hlo_value bias_activation(mxu_emit *e, mxu_hlo_value y,
                                     mxu_hlo_value bias,
                                     mxu_activation activation) {
  if (bias) y = mxu_emit_bias(e, y, bias);
  return mxu_emit_activation(e, activation, mxu_activation_alpha(activation),
                             y);
}

/* Keras' kernel (kh, kw, in / groups, filters) is StableHLO's HWIO; a
 * depthwise one (kh, kw, in, multiplier) is (kh, kw, 1, in x multiplier)
 * of `in` groups, its outputs channel by channel as TensorFlow's. A
 * SeparableConv2D's pointwise half is a 1x1 convolution. */
static mxu_hlo_value conv2d_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_conv2d_desc d = graph_describe(layer, e->batch);
  mxu_hlo_window w = window_of(&d);
  mxu_hlo_value kernel = e->w[0];
  const mxu_hlo_shape *k = mxu_hlo_shape_of(e->h, kernel);
  if (is_depthwise(layer) || is_separable(layer)) {
    /* (kh, kw, in, multiplier), or a sequence's (kw, in, multiplier). */
    int seq = layer->cls->sequence;
    int64_t dims[4] = {seq ? 1 : k->dims[0], k->dims[1 - seq], 1,
                       k->dims[2 - seq] * k->dims[3 - seq]};
    kernel =
        mxu_hlo_reshape(e->h, kernel, mxu_hlo_shape_make(k->dtype, 4, dims));
  } else if (layer->cls->sequence) { /* (kw, in, out) is (1, kw, in, out) */
    int64_t dims[4] = {1, k->dims[0], k->dims[1], k->dims[2]};
    kernel =
        mxu_hlo_reshape(e->h, kernel, mxu_hlo_shape_make(k->dtype, 4, dims));
  }
  mxu_hlo_value y = mxu_emit_result(
      e, mxu_hlo_convolution(
             e->h, mxu_emit_compute(e, mxu_emit_image_input(layer, e)),
             mxu_emit_compute(e, kernel), &w));
  if (!is_separable(layer))
    return mxu_emit_sequence_output(
        layer, e,
        bias_activation(e, y, d.has_bias ? e->w[1] : 0, d.activation));
  const mxu_separable_conv2d_config *c = &layer->config.separable;
  mxu_hlo_window one = {.stride = {1, 1},
                        .lhs_dilation = {1, 1},
                        .rhs_dilation = {1, 1},
                        .feature_groups = 1};
  /* The pointwise kernel as the 2-D kind's (1, 1, in, filters). */
  int64_t k4[4] = {1, 1, (int64_t)in_channels(layer) * c->depth_multiplier,
                   c->filters};
  mxu_hlo_value w1 =
      mxu_hlo_reshape(e->h, e->w[1], mxu_hlo_shape_make(MXU_HLO_F32, 4, k4));
  y = mxu_emit_result(e, mxu_hlo_convolution(e->h, mxu_emit_compute(e, y),
                                             mxu_emit_compute(e, w1), &one));
  return mxu_emit_sequence_output(
      layer, e,
      bias_activation(e, y, c->use_bias ? e->w[2] : 0, c->activation));
}

const mxu_layer_class mxu_conv2d_class = {
    .class_name = "Conv2D",
    .steps_in_batch = 1,
    .emit = conv2d_emit,
    .flops = conv2d_flops,
    .config_keys = mxu_conv_keys,
    .read_config = read_conv2d,
    .write_config = write_conv2d,
    .aliases = conv2d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = conv2d_infer,
    .declare = conv2d_declare,
    .plan = conv2d_plan,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .logits = conv2d_logits,
};

/* ---- Conv1D ----------------------------------------------------------------
 * Keras' keys are Conv2D's, its sizes lists of one; the layer keeps them
 * as the 1 x n window of the image (1, steps, channels) it runs on. */

/* Conv1D's config, or Conv1DTranspose's (output_padding refused, as
 * Conv2DTranspose's). */
static mxu_status read_conv1d_of(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name, int transpose) {
  mxu_conv2d_config conv;
  if (transpose)
    MXU_TRY(mxu_json_require_null(where, config, "output_padding"));
  MXU_TRY(read_conv_fields(where, config, node, name, 1, &conv));
  mxu_conv1d_config c = {name,
                         conv.filters,
                         conv.kernel_size[1],
                         conv.strides[1],
                         conv.dilation_rate[1],
                         conv.groups,
                         conv.padding,
                         conv.activation,
                         conv.use_bias,
                         conv.kernel,
                         conv.bias};
  return mxu_json_applied(
      where, node,
      (transpose ? mxu_apply_conv1d_transpose
                 : mxu_apply_conv1d)(node->model, &c, node->inputs[0]));
}

static mxu_status read_conv1d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name) {
  return read_conv1d_of(where, config, node, name, 0);
}

static const char *const conv1d_aliases[] = {"Convolution1D", NULL};

const mxu_layer_class mxu_conv1d_class = {
    .class_name = "Conv1D",
    .steps_in_batch = 1,
    .sequence = 1,
    .emit = conv2d_emit,
    .flops = conv2d_flops,
    .config_keys = mxu_conv_keys,
    .read_config = read_conv1d,
    .write_config = write_conv2d,
    .aliases = conv1d_aliases,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = conv2d_infer,
    .declare = conv2d_declare,
    .plan = conv2d_plan,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .logits = conv2d_logits,
};

/* ---- DepthwiseConv2D -----------------------------------------------------
 * tf.keras 2 writes Conv2D's groups (1) too. */

static const char *const depthwise_keys[] = {"kernel_size",
                                             "strides",
                                             "padding",
                                             "data_format",
                                             "dilation_rate",
                                             "groups",
                                             "depth_multiplier",
                                             "activation",
                                             "use_bias",
                                             "depthwise_initializer",
                                             "bias_initializer",
                                             "depthwise_regularizer",
                                             "bias_regularizer",
                                             "activity_regularizer",
                                             "depthwise_constraint",
                                             "bias_constraint",
                                             NULL};

/* What DepthwiseConv2D and SeparableConv2D read alike after the window:
 * groups (tf.keras writes 1), depth_multiplier, activation, use_bias and
 * the depthwise kernel's and bias' options. */
typedef struct depthwise_fields {
  int *multiplier;
  mxu_activation *activation;
  int *use_bias;
  mxu_weight_options *depthwise, *bias;
} depthwise_fields;

static mxu_status read_depthwise_fields(const mxu_json_where *where,
                                        const cJSON *config,
                                        const mxu_json_node *node,
                                        const depthwise_fields *f) {
  int groups = 1;
  MXU_TRY(
      mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, 1, &groups));
  MXU_TRY(mxu_json_int(where, config, "depth_multiplier", MXU_JSON_OPTIONAL, 1,
                       INT_MAX, f->multiplier));
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, f->activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", f->use_bias));
  MXU_TRY(mxu_config_weight_options(where, config, "depthwise", f->depthwise));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", f->bias));
  return MXU_OK;
}

static mxu_status read_depthwise_of(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name, int sequence) {
  mxu_depthwise_conv2d_config dw = mxu_depthwise_conv2d_defaults(1, 1);
  dw.name = name;
  MXU_TRY(read_window(where, config, sequence, dw.kernel_size, dw.strides,
                      &dw.padding, dw.dilation_rate));
  depthwise_fields f = {&dw.depth_multiplier, &dw.activation, &dw.use_bias,
                        &dw.depthwise, &dw.bias};
  MXU_TRY(read_depthwise_fields(where, config, node, &f));
  return mxu_json_applied(
      where, node,
      (sequence ? mxu_apply_depthwise_conv1d : mxu_apply_depthwise_conv2d)(
          node->model, &dw, node->inputs[0]));
}

static mxu_status read_depthwise(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  return read_depthwise_of(where, config, node, name, 0);
}

static mxu_status read_depthwise1d(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  return read_depthwise_of(where, config, node, name, 1);
}

static void write_depthwise(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_depthwise_conv2d_config *dw = &layer->config.depthwise;
  conv_spec s = spec_of(layer);
  put_window(out, config, &s, layer->cls->sequence);
  mxu_json_put_number(out, config, "depth_multiplier", dw->depth_multiplier);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(dw->activation));
  mxu_json_put_bool(out, config, "use_bias", dw->use_bias);
  mxu_config_put_initializers(out, config, "depthwise",
                              &dw->depthwise.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &dw->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "depthwise", &dw->depthwise, "bias",
                           &dw->bias, 1);
}

#define DEPTHWISE_CLASS(keras_name, reader, by_steps)                          \
  {                                                                            \
    .class_name = keras_name, .sequence = by_steps, .steps_in_batch = 1,       \
    .flops = conv2d_flops, .config_keys = depthwise_keys,                      \
    .read_config = reader, .write_config = write_depthwise, .min_inputs = 1,   \
    .max_inputs = 1, .infer = conv2d_infer, .declare = conv2d_declare,         \
    .plan = conv2d_plan, .forward = conv2d_forward, .emit = conv2d_emit,       \
    .backward = conv2d_backward, .logits = conv2d_logits,                      \
  }

const mxu_layer_class mxu_depthwise_conv2d_class =
    DEPTHWISE_CLASS("DepthwiseConv2D", read_depthwise, 0);
/* DepthwiseConv1D: DepthwiseConv2D's 1 x n window over the steps. */
const mxu_layer_class mxu_depthwise_conv1d_class =
    DEPTHWISE_CLASS("DepthwiseConv1D", read_depthwise1d, 1);

/* ---- SeparableConv2D -------------------------------------------------------
 * Two backend convs: the depthwise one (ops[0], into t at scratch[2]) and
 * the pointwise one (ops[2]) with the bias and the fusable activation;
 * the rest of the activation is the epilogue's (ops[1], scratch[0..1]).
 * Backward: the epilogue, the pointwise conv's two gradients (dt at
 * scratch[3]), then the depthwise one's. */

enum { SEP_T = 2, SEP_DT = 3, SEP_POINTWISE = 2 };

static mxu_conv2d_desc pointwise_describe(const mxu_layer *layer, int batch) {
  const mxu_separable_conv2d_config *c = &layer->config.separable;
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  mxu_conv2d_desc d = {0};
  d.n = batch;
  d.in_h = d.out_h = (int)out.dims[0];
  d.in_w = d.out_w = (int)out.dims[1];
  d.in_c = in_channels(layer) * c->depth_multiplier;
  d.out_c = c->filters;
  d.kernel_h = d.kernel_w = d.stride_h = d.stride_w = 1;
  d.has_bias = c->use_bias;
  d.activation = c->activation;
  d.bf16 = layer->compiled->bf16;
  return d;
}

static mxu_status separable_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  mxu_conv2d_desc depthwise = conv2d_describe(layer, batch);
  mxu_conv2d_desc pointwise = pointwise_describe(layer, batch);
  depthwise.x_native = depthwise.y_native = 0;
  int64_t rows = (int64_t)batch * pointwise.out_h * pointwise.out_w;
  size_t t_bytes = (size_t)rows * (size_t)pointwise.in_c * sizeof(float);
  layer->compiled->scratch[SEP_T] = mxu_arena_reserve(layout, t_bytes);
  layer->compiled->scratch[SEP_DT] = mxu_arena_reserve(layout, t_bytes);
  MXU_TRY(mxu_epilogue_plan(layer, layer->config.separable.activation, backend,
                            rows, pointwise.out_c, layout,
                            &pointwise.activation));
  MXU_TRY(backend->conv2d_create(&depthwise, &layer->compiled->ops[0]));
  return backend->conv2d_create(&pointwise,
                                &layer->compiled->ops[SEP_POINTWISE]);
}

static float *separable_buffer(const mxu_layer *layer, const mxu_layer_run *run,
                               int k) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[k]);
}

static float *separable_bias(const mxu_layer *layer, float *const *w) {
  return layer->config.separable.use_bias ? w[2] : NULL;
}

static void separable_forward(mxu_layer *layer, const mxu_layer_run *run) {
  mxu_activation act = layer->config.separable.activation;
  float *t = separable_buffer(layer, run, SEP_T);
  run->backend->conv2d_forward(run->ops[0], run->x, run->w[0], NULL, t);
  run->backend->conv2d_forward(run->ops[SEP_POINTWISE], t, run->w[1],
                               separable_bias(layer, run->w),
                               mxu_epilogue_target(layer, act, run));
  mxu_epilogue_forward(layer, act, run);
}

static void separable_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *dz =
      mxu_epilogue_backward(layer, layer->config.separable.activation, run);
  const float *t = separable_buffer(layer, run, SEP_T);
  float *dt = separable_buffer(layer, run, SEP_DT);
  mxu_op *pointwise = run->ops[SEP_POINTWISE];
  run->backend->conv2d_backward_weights(pointwise, t, dz, run->dw[1],
                                        separable_bias(layer, run->dw));
  run->backend->conv2d_backward_data(pointwise, dz, run->w[1], dt);
  run->backend->conv2d_backward_weights(run->ops[0], run->x, dt, run->dw[0],
                                        NULL);
  if (run->need_dx)
    run->backend->conv2d_backward_data(run->ops[0], dt, run->w[0], run->dx);
}

static const float *separable_logits(const mxu_layer *layer,
                                     const mxu_layer_run *run) {
  return mxu_epilogue_logits(layer, layer->config.separable.activation, run);
}

/* The depthwise conv's work (no bias), then the pointwise conv's. */
static double separable_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  const mxu_separable_conv2d_config *c = &layer->config.separable;
  conv_spec s = spec_of(layer);
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  double pixels = (double)out.dims[0] * out.dims[1];
  return mxu_weighted_flops(pixels * s.filters,
                            (double)s.kernel[0] * s.kernel[1], 0, MXU_LINEAR,
                            step) +
         mxu_weighted_flops(pixels * c->filters, (double)s.filters, c->use_bias,
                            c->activation, step);
}

static const char *const separable_keys[] = {"filters",
                                             "kernel_size",
                                             "strides",
                                             "padding",
                                             "data_format",
                                             "dilation_rate",
                                             "groups",
                                             "depth_multiplier",
                                             "activation",
                                             "use_bias",
                                             "depthwise_initializer",
                                             "pointwise_initializer",
                                             "bias_initializer",
                                             "depthwise_regularizer",
                                             "pointwise_regularizer",
                                             "bias_regularizer",
                                             "activity_regularizer",
                                             "depthwise_constraint",
                                             "pointwise_constraint",
                                             "bias_constraint",
                                             "kernel_initializer",
                                             "kernel_regularizer",
                                             "kernel_constraint",
                                             NULL};

/* tf.keras 2 writes its Conv base's kernel_* keys too, which the layer
 * never uses: read (so a malformed one is still refused) and dropped. */
static mxu_status read_separable_of(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name, int sequence) {
  mxu_weight_options unused = {0};
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &unused));
  mxu_separable_conv2d_config c = mxu_separable_conv2d_defaults(0, 1, 1);
  c.name = name;
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &c.filters));
  MXU_TRY(read_window(where, config, sequence, c.kernel_size, c.strides,
                      &c.padding, c.dilation_rate));
  depthwise_fields f = {&c.depth_multiplier, &c.activation, &c.use_bias,
                        &c.depthwise, &c.bias};
  MXU_TRY(read_depthwise_fields(where, config, node, &f));
  MXU_TRY(mxu_config_weight_options(where, config, "pointwise", &c.pointwise));
  return mxu_json_applied(
      where, node,
      (sequence ? mxu_apply_separable_conv1d : mxu_apply_separable_conv2d)(
          node->model, &c, node->inputs[0]));
}

static mxu_status read_separable(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  return read_separable_of(where, config, node, name, 0);
}

static mxu_status read_separable1d(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  return read_separable_of(where, config, node, name, 1);
}

static void write_separable(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_separable_conv2d_config *c = &layer->config.separable;
  conv_spec s = spec_of(layer);
  mxu_json_put_number(out, config, "filters", c->filters);
  put_window(out, config, &s, layer->cls->sequence);
  mxu_json_put_number(out, config, "depth_multiplier", c->depth_multiplier);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(c->activation));
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  mxu_initializer init =
      mxu_init_or(&c->depthwise.initializer, mxu_init_glorot_uniform());
  mxu_json_put_initializer(out, config, "depthwise_initializer", &init);
  mxu_config_put_initializers(out, config, "pointwise",
                              &c->pointwise.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &c->bias.initializer, mxu_init_zeros());
  mxu_json_put_regularizer(out, config, "depthwise_regularizer",
                           &c->depthwise.regularizer);
  mxu_json_put_constraint(out, config, "depthwise_constraint",
                          &c->depthwise.constraint);
  mxu_config_put_penalties(out, config, "pointwise", &c->pointwise, "bias",
                           &c->bias, 1);
}

#define SEPARABLE_CLASS(keras_name, reader, by_steps)                          \
  {                                                                            \
    .class_name = keras_name, .sequence = by_steps, .steps_in_batch = 1,       \
    .flops = separable_flops, .config_keys = separable_keys,                   \
    .read_config = reader, .write_config = write_separable, .min_inputs = 1,   \
    .max_inputs = 1, .infer = conv2d_infer, .declare = conv2d_declare,         \
    .plan = separable_plan, .forward = separable_forward, .emit = conv2d_emit, \
    .backward = separable_backward, .logits = separable_logits,                \
  }

const mxu_layer_class mxu_separable_conv2d_class =
    SEPARABLE_CLASS("SeparableConv2D", read_separable, 0);
/* SeparableConv1D: SeparableConv2D's 1 x n window over the steps. */
const mxu_layer_class mxu_separable_conv1d_class =
    SEPARABLE_CLASS("SeparableConv1D", read_separable1d, 1);

/* ---- Conv2DTranspose
 * --------------------------------------------------------- The transpose of
 * the Conv2D D that maps this layer's output shape back to its input shape with
 * the same kernel (Keras' (kh, kw, filters, in) is D's HWIO). Forward is D's
 * backward data (then the bias and the activation), backward data D's forward,
 * the kernel's gradient D's backward weights with the roles of x and dy
 * exchanged. */

/* Conv1DTranspose is Conv2DTranspose's 1 x n window over the image (1,
 * steps, channels), as Conv1D is Conv2D's. */
static mxu_status transpose_infer(mxu_layer *layer) {
  conv_spec s = spec_of(layer);
  int sequence = layer->cls->sequence;
  if (layer->in_shape.rank != 3 - sequence)
    return mxu_fail(
        MXU_ERR_SHAPE, "%s: %s takes %s", layer->name, layer->cls->class_name,
        sequence ? "(steps, channels)" : "(height, width, channels)");
  if (s.filters <= 0 || s.groups != 1)
    return mxu_fail(MXU_ERR_ARG, "%s: filters %d must be positive, groups 1",
                    layer->name, s.filters);
  if (s.padding == MXU_CAUSAL)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: padding 'causal' is Conv1D's only", layer->name);
  mxu_shape image = mxu_image_shape(layer, &layer->in_shape);
  int64_t dims[3] = {0, 0, s.filters};
  for (int a = 0; a < 2; a++) {
    int64_t in = image.dims[a], k = span(&s, a), st = s.strides[a];
    if (k < 1 || st < 1 || k > MXU_MAX_WINDOW || st > MXU_MAX_WINDOW)
      return mxu_fail(MXU_ERR_ARG, "%s: kernel %d and stride %d out of 1..%d",
                      layer->name, s.kernel[a], s.strides[a], MXU_MAX_WINDOW);
    dims[a] = s.padding == MXU_SAME ? in * st : in * st + (k > st ? k - st : 0);
    if (dims[a] > 1 << 20)
      return mxu_fail(MXU_ERR_SHAPE, "%s: output too large", layer->name);
  }
  layer->out_shape = mxu_shape_make(3 - sequence, dims + sequence);
  return MXU_OK;
}

/* D: from this layer's output (its input) to this layer's input. */
static mxu_conv2d_desc transpose_describe(const mxu_layer *layer, int batch) {
  conv_spec s = spec_of(layer);
  mxu_shape in = mxu_image_shape(layer, &layer->in_shape);
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  mxu_conv2d_desc d = {0};
  d.n = batch;
  d.in_h = (int)out.dims[0];
  d.in_w = (int)out.dims[1];
  d.in_c = s.filters;
  d.out_h = (int)in.dims[0];
  d.out_w = (int)in.dims[1];
  d.out_c = (int)in.dims[2];
  d.kernel_h = s.kernel[0];
  d.kernel_w = s.kernel[1];
  d.stride_h = s.strides[0];
  d.stride_w = s.strides[1];
  d.dilation_h = at_least_one(s.dilation[0]);
  d.dilation_w = at_least_one(s.dilation[1]);
  mxu_conv_output_size(d.in_h, span(&s, 0), d.stride_h, s.padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(d.in_w, span(&s, 1), d.stride_w, s.padding, &d.pad_left,
                       &d.pad_right);
  /* float32: D's bf16 backward passes would reuse copies its forward
   * makes, and here they run without one. */
  d.bf16 = 0;
  return d;
}

static mxu_status transpose_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  mxu_conv2d_desc d = transpose_describe(layer, batch);
  mxu_activation fused; /* D fuses nothing: forward runs it (ops[1]) */
  int64_t rows = (int64_t)batch * d.in_h * d.in_w;
  MXU_TRY(mxu_epilogue_plan(layer, spec_of(layer).activation, backend, rows,
                            d.in_c, layout, &fused));
  return backend->conv2d_create(&d, &layer->compiled->ops[0]);
}

/* D's input gradient: the transposed convolution. */
static mxu_hlo_value transpose_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_conv2d_desc d = transpose_describe(layer, e->batch);
  conv_spec s = spec_of(layer);
  mxu_hlo_window w = window_of(&d);
  const int64_t out_hw[2] = {d.in_h, d.in_w};
  mxu_hlo_value kernel = e->w[0];
  if (layer->cls->sequence) { /* (kw, out, in) is (1, kw, out, in) */
    int64_t hwoi[4] = {1, s.kernel[1], s.filters, d.out_c};
    kernel =
        mxu_hlo_reshape(e->h, kernel, mxu_hlo_shape_make(MXU_HLO_F32, 4, hwoi));
  }
  mxu_hlo_value y = mxu_emit_result(
      e, mxu_hlo_convolution_backward_data(
             e->h, mxu_emit_compute(e, mxu_emit_image_input(layer, e)),
             mxu_emit_compute(e, kernel), &w, out_hw));
  y = bias_activation(e, y, s.use_bias ? e->w[1] : 0, s.activation);
  return layer->cls->sequence ? mxu_emit_sequence_output(layer, e, y) : y;
}

/* The output's pixels (a sequence's steps) over the batch. */
static int64_t transpose_rows(const mxu_layer *layer) {
  mxu_shape out = mxu_image_shape(layer, &layer->out_shape);
  return (int64_t)layer->compiled->batch * out.dims[0] * out.dims[1];
}

static void transpose_forward(mxu_layer *layer, const mxu_layer_run *run) {
  conv_spec s = spec_of(layer);
  float *z = mxu_epilogue_target(layer, s.activation, run);
  run->backend->conv2d_new_inputs(run->ops[0]);
  run->backend->conv2d_backward_data(run->ops[0], run->x, run->w[0], z);
  if (s.use_bias) {
    int64_t rows = transpose_rows(layer);
    for (int64_t r = 0; r < rows; r++)
      for (int c = 0; c < s.filters; c++) z[r * s.filters + c] += run->w[1][c];
  }
  if (s.activation != MXU_LINEAR && mxu_activation_fusable(s.activation))
    run->backend->activation_forward(run->ops[1], z, z);
  mxu_epilogue_forward(layer, s.activation, run);
}

static void transpose_backward(mxu_layer *layer, const mxu_layer_run *run) {
  conv_spec s = spec_of(layer);
  const float *dz = mxu_epilogue_backward(layer, s.activation, run);
  run->backend->conv2d_backward_weights(run->ops[0], dz, run->x, run->dw[0],
                                        NULL);
  if (s.use_bias) {
    int64_t rows = transpose_rows(layer);
    /* Summed in double, channel by channel: a sum over every pixel. */
    for (int c = 0; c < s.filters; c++) {
      double sum = 0.0;
      for (int64_t r = 0; r < rows; r++) sum += dz[r * s.filters + c];
      run->dw[1][c] = (float)sum;
    }
  }
  if (run->need_dx)
    run->backend->conv2d_forward(run->ops[0], dz, run->w[0], NULL, run->dx);
}

/* What the Conv2D D costs, its output being this layer's input. */
static double transpose_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  conv_spec s = spec_of(layer);
  double window = (double)s.kernel[0] * s.kernel[1] * s.filters;
  return mxu_weighted_flops((double)mxu_shape_count(&layer->in_shape), window,
                            s.use_bias, s.activation, step);
}

const char *const mxu_conv_transpose_keys[] = {"filters",
                                               "kernel_size",
                                               "strides",
                                               "padding",
                                               "output_padding",
                                               "data_format",
                                               "dilation_rate",
                                               "groups",
                                               "activation",
                                               "use_bias",
                                               MXU_WEIGHT_OPTION_KEYS};

/* output_padding (an output size Keras' formula does not give) is
 * refused; groups other than 1 too (transpose_infer). */
static mxu_status read_transpose(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_conv2d_config conv;
  MXU_TRY(mxu_json_require_null(where, config, "output_padding"));
  MXU_TRY(read_conv_fields(where, config, node, name, 0, &conv));
  return mxu_json_applied(
      where, node,
      mxu_apply_conv2d_transpose(node->model, &conv, node->inputs[0]));
}

static void write_transpose(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  write_conv2d(out, layer, config);
  mxu_json_put_null(out, config, "output_padding");
}

#define TRANSPOSE_CLASS(symbol, keras_name, names, reader, by_steps)           \
  const mxu_layer_class symbol = {                                             \
      .class_name = keras_name,                                                \
      .aliases = names,                                                        \
      .sequence = by_steps,                                                    \
      .flops = transpose_flops,                                                \
      .config_keys = mxu_conv_transpose_keys,                                  \
      .read_config = reader,                                                   \
      .write_config = write_transpose,                                         \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = transpose_infer,                                                \
      .declare = conv2d_declare,                                               \
      .plan = transpose_plan,                                                  \
      .forward = transpose_forward,                                            \
      .emit = transpose_emit,                                                  \
      .backward = transpose_backward,                                          \
      .logits = conv2d_logits,                                                 \
  }

TRANSPOSE_CLASS(mxu_conv2d_transpose_class, "Conv2DTranspose", NULL,
                read_transpose, 0);

static mxu_status read_conv1d_transpose(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node, const char *name) {
  return read_conv1d_of(where, config, node, name, 1);
}

static const char *const conv1d_transpose_aliases[] = {"Convolution1DTranspose",
                                                       NULL};

TRANSPOSE_CLASS(mxu_conv1d_transpose_class, "Conv1DTranspose",
                conv1d_transpose_aliases, read_conv1d_transpose, 1);
