/* conv.c — Conv2D (channels_last, HWIO kernel, valid/same, strides,
 * optional bias, fused activation). */
#include "model/layers/layers.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static mxu_status conv2d_infer(mxu_layer *layer) {
  const mxu_conv2d_config *c = &layer->config.conv;
  if (c->filters <= 0)
    return mxu_fail(MXU_ERR_ARG, "%s: filters must be positive, got %d",
                    layer->name, c->filters);
  return mxu_window_infer(layer, "kernel", c->kernel_size, c->strides,
                          c->padding, c->filters);
}

static int conv2d_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_conv2d_config *c = &layer->config.conv;
  int64_t kh = c->kernel_size[0], kw = c->kernel_size[1];
  int64_t in = layer->in_shape.dims[2], out = c->filters;
  int64_t kernel[4] = {kh, kw, in, out};
  decls[0] = mxu_weight_decl("kernel", mxu_shape_make(4, kernel), &c->kernel,
                             mxu_init_glorot_uniform());
  if (!c->use_bias) return 1;
  decls[1] = mxu_weight_decl("bias", mxu_shape_make(1, &out), &c->bias,
                             mxu_init_zeros());
  return 2;
}

static mxu_conv2d_desc conv2d_describe(const mxu_layer *layer, int batch) {
  const mxu_conv2d_config *c = &layer->config.conv;
  mxu_conv2d_desc d = {0};
  d.n = batch;
  d.in_h = (int)layer->in_shape.dims[0];
  d.in_w = (int)layer->in_shape.dims[1];
  d.in_c = (int)layer->in_shape.dims[2];
  d.out_h = (int)layer->out_shape.dims[0];
  d.out_w = (int)layer->out_shape.dims[1];
  d.out_c = c->filters;
  d.kernel_h = c->kernel_size[0];
  d.kernel_w = c->kernel_size[1];
  d.stride_h = c->strides[0];
  d.stride_w = c->strides[1];
  mxu_conv_output_size(d.in_h, d.kernel_h, d.stride_h, c->padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(d.in_w, d.kernel_w, d.stride_w, c->padding, &d.pad_left,
                       &d.pad_right);
  d.has_bias = c->use_bias;
  d.bf16 = layer->compiled->bf16;
  d.activation = c->activation;
  d.x_native = layer->compiled->native_in;
  d.y_native = layer->compiled->native_out;
  return d;
}

int mxu_conv2d_chains(const mxu_layer *a, const mxu_layer *b,
                      const mxu_backend *backend, int batch) {
  if (!backend->conv2d_native || a->cls != &mxu_conv2d_class ||
      b->cls != &mxu_conv2d_class || a->config.conv.activation == MXU_SOFTMAX)
    return 0;
  mxu_conv2d_desc da = conv2d_describe(a, batch);
  mxu_conv2d_desc db = conv2d_describe(b, batch);
  return backend->conv2d_native(&da) && backend->conv2d_native(&db);
}

/* Fused with the MaxPooling2D that alone reads it (fused[0]) and the relu
 * that alone reads that (fused[1]), when compile found one: the op and its
 * argmax workspace (scratch[0]). Returns 0 when the backend declines. */
static int conv2d_plan_fused(mxu_layer *layer, const mxu_backend *backend,
                             const mxu_conv2d_desc *d, mxu_arena *layout) {
  mxu_pool2d_desc pool = mxu_pool2d_describe(layer->compiled->fused[0], d->n);
  if (backend->conv_pool_create(d, &pool, layer->compiled->fused_layers == 2,
                                &layer->compiled->ops[0]) != MXU_OK)
    return 0;
  layer->compiled->scratch[0] = mxu_arena_reserve(
      layout, backend->conv_pool_workspace_bytes(layer->compiled->ops[0]));
  return 1;
}

static mxu_status conv2d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  const mxu_conv2d_config *c = &layer->config.conv;
  mxu_conv2d_desc d = conv2d_describe(layer, batch);
  if (layer->compiled->fused_layers > 0 &&
      conv2d_plan_fused(layer, backend, &d, layout))
    return MXU_OK;
  layer->compiled->fused_layers = 0;
  int64_t rows = (int64_t)batch * d.out_h * d.out_w;
  MXU_TRY(mxu_epilogue_plan(layer, c->activation, backend, rows, d.out_c,
                            layout, &d.activation));
  return backend->conv2d_create(&d, &layer->compiled->ops[0]);
}

static float *bias_of(const mxu_layer *layer, float *const *w) {
  return layer->config.conv.use_bias ? w[1] : NULL;
}

static void conv2d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (layer->compiled->fused_layers) {
    run->backend->conv_pool_forward(
        run->ops[0], run->training, run->x, run->w[0], bias_of(layer, run->w),
        run->y,
        run->training ? run->arena + layer->compiled->scratch[0] : NULL);
    return;
  }
  mxu_activation act = layer->config.conv.activation;
  run->backend->conv2d_forward(run->ops[0], run->x, run->w[0],
                               layer->config.conv.use_bias ? run->w[1] : NULL,
                               mxu_epilogue_target(layer, act, run));
  mxu_epilogue_forward(layer, act, run);
}

static void conv2d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (layer->compiled->fused_layers) {
    run->backend->conv_pool_backward(run->ops[0], run->x, run->w[0], run->dy,
                                     run->arena + layer->compiled->scratch[0],
                                     run->dw[0], bias_of(layer, run->dw),
                                     run->need_dx ? run->dx : NULL);
    return;
  }
  mxu_activation act = layer->config.conv.activation;
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
  return mxu_epilogue_logits(layer, layer->config.conv.activation, run);
}

/* ---- Conv2D --------------------------------------------------------------
 */

static const char *const conv2d_keys[] = {
    "filters",     "kernel_size",         "strides", "padding",
    "data_format", "dilation_rate",       "groups",  "activation",
    "use_bias",    MXU_WEIGHT_OPTION_KEYS};

static mxu_status read_conv2d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name) {
  mxu_conv2d_config conv = mxu_conv2d_defaults(0, 0, 0);
  conv.name = name;
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &conv.filters));
  MXU_TRY(mxu_json_int_pair(where, config, "kernel_size", MXU_JSON_REQUIRED,
                            conv.kernel_size));
  MXU_TRY(mxu_json_int_pair(where, config, "strides", MXU_JSON_OPTIONAL,
                            conv.strides));
  MXU_TRY(mxu_json_padding(where, config, &conv.padding));
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_json_require_ones(where, config, "dilation_rate"));
  int groups = 1;
  MXU_TRY(mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, INT_MAX,
                       &groups));
  if (groups != 1)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "groups %d is not supported (only 1)", groups);
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &conv.activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &conv.use_bias));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &conv.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &conv.bias));
  MXU_TRY(mxu_json_require_null(where, config, "activity_regularizer"));
  return mxu_json_applied(
      where, node, mxu_apply_conv2d(node->model, &conv, node->inputs[0]));
}

static void write_conv2d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_conv2d_config *conv = &layer->config.conv;
  static const int ones[2] = {1, 1};
  mxu_json_put_number(out, config, "filters", conv->filters);
  mxu_json_put_pair(out, config, "kernel_size", conv->kernel_size);
  mxu_json_put_pair(out, config, "strides", conv->strides);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(conv->padding));
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_json_put_pair(out, config, "dilation_rate", ones);
  mxu_json_put_number(out, config, "groups", 1);
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

static double conv2d_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const mxu_conv2d_config *c = &layer->config.conv;
  double window = (double)c->kernel_size[0] * c->kernel_size[1] *
                  (double)layer->in_shape.dims[2];
  return mxu_weighted_flops((double)mxu_shape_count(&layer->out_shape), window,
                            c->use_bias, c->activation, step);
}

const mxu_layer_class mxu_conv2d_class = {
    .class_name = "Conv2D",
    .flops = conv2d_flops,
    .config_keys = conv2d_keys,
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
