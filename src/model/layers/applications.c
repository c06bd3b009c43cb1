/* applications.c — layer classes keras.applications defines for its own
 * models rather than keras.layers: ConvNeXt's LayerScale and
 * InceptionResNetV2's CustomScaleLayer. Keras files name them by module
 * and registered name (their mxu_keras_origin). LayerScale runs on the
 * backend's channel scaling; CustomScaleLayer is a plain loop. */
#include "model/layers/layers.h"

#include <math.h>

/* ---- LayerScale -------------------------------------------------------------
 * ConvNeXt's: y = x * gamma along the last axis, gamma one trainable
 * weight of projection_dim values, Constant(init_values) at first. */

static const mxu_keras_origin layer_scale_origin = {
    "keras.src.applications.convnext", "LayerScale",
    "tf_keras.src.applications.convnext", "LayerScale"};

static const char *const layer_scale_keys[] = {"init_values", "projection_dim",
                                               NULL};

/* Keras' __init__ has no defaults for either. */
static mxu_status read_layer_scale(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  mxu_layer_scale_config c = {name, 0.0f, 0};
  MXU_TRY(mxu_json_float(where, config, "init_values", MXU_JSON_REQUIRED,
                         &c.init_values));
  MXU_TRY(mxu_json_int(where, config, "projection_dim", MXU_JSON_REQUIRED, 1,
                       1 << 24, &c.projection_dim));
  return mxu_json_applied(
      where, node, mxu_apply_layer_scale(node->model, &c, node->inputs[0]));
}

static void write_layer_scale(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  const mxu_layer_scale_config *c = &layer->config.layer_scale;
  mxu_json_put_float(out, config, "init_values", c->init_values);
  mxu_json_put_number(out, config, "projection_dim", c->projection_dim);
}

static int last_dim(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

/* gamma multiplies the last axis value by value: it must be as long. */
static mxu_status layer_scale_infer(mxu_layer *layer) {
  MXU_TRY(mxu_same_shape_infer(layer));
  const mxu_layer_scale_config *c = &layer->config.layer_scale;
  if (!isfinite(c->init_values))
    return mxu_fail(MXU_ERR_ARG, "%s: init_values %g must be finite",
                    layer->name, (double)c->init_values);
  if (c->projection_dim != last_dim(layer)) {
    char shape[64];
    mxu_shape_format(&layer->in_shape, shape, sizeof shape);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: projection_dim %d, but the input %s has %d values "
                    "on its last axis",
                    layer->name, c->projection_dim, shape, last_dim(layer));
  }
  return MXU_OK;
}

static int layer_scale_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_layer_scale_config *c = &layer->config.layer_scale;
  int64_t n = c->projection_dim;
  mxu_param_decl gamma = {
      .name = "gamma", .shape = mxu_shape_make(1, &n), .trainable = 1};
  gamma.init.kind = MXU_INIT_CONSTANT;
  gamma.init.value = c->init_values;
  decls[0] = gamma;
  return 1;
}

/* Forward: the product; backward: dx = dy * gamma and gamma's
 * dy * x summed. */
static double layer_scale_flops(const mxu_layer *layer,
                                const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 4.0 : 3.0);
}

/* gamma scales the channels of one image of all the rows: the backend's
 * squeeze-and-excitation kernel, with gamma's gradient its scale's. */
static int64_t rows_of(const mxu_layer *layer) {
  return mxu_batch_values(layer) / last_dim(layer);
}

static void layer_scale_forward(mxu_layer *layer, const mxu_layer_run *run) {
  run->backend->scale_channels(1, rows_of(layer), last_dim(layer), run->x,
                               run->w[0], run->y);
}

static void layer_scale_backward(mxu_layer *layer, const mxu_layer_run *run) {
  run->backend->scale_channels_backward(
      1, rows_of(layer), last_dim(layer), run->x, run->w[0], run->dy,
      run->need_dx ? run->dx : NULL, run->dw[0]);
}

/* gamma spread over the batch and every axis but the last. */
static mxu_hlo_value layer_scale_emit(const mxu_layer *layer, mxu_emit *e) {
  (void)layer;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  return mxu_hlo_binary(
      h, MXU_HLO_MULTIPLY, x,
      mxu_hlo_broadcast_to(h, e->w[0], *mxu_hlo_shape_of(h, x)));
}

const mxu_layer_class mxu_layer_scale_class = {
    .class_name = "LayerScale",
    .origin = &layer_scale_origin,
    .config_keys = layer_scale_keys,
    .read_config = read_layer_scale,
    .write_config = write_layer_scale,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = layer_scale_infer,
    .declare = layer_scale_declare,
    .flops = layer_scale_flops,
    .plan = mxu_no_plan,
    .forward = layer_scale_forward,
    .backward = layer_scale_backward,
    .emit = layer_scale_emit,
};

/* ---- CustomScaleLayer -------------------------------------------------------
 * InceptionResNetV2's residual sum: y = inputs[0] + inputs[1] * scale, in
 * that order (Keras' call), each step rounded to float32 as TensorFlow
 * does (ISO C: no fused multiply-add). */

static const mxu_keras_origin custom_scale_origin = {
    "keras.src.applications.inception_resnet_v2", "CustomScaleLayer",
    "tf_keras.src.applications.inception_resnet_v2", "Custom>CustomScaleLayer"};

static const char *const custom_scale_keys[] = {"scale", NULL};

static mxu_status read_custom_scale(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  float scale = 0.0f;
  MXU_TRY(mxu_json_float(where, config, "scale", MXU_JSON_REQUIRED, &scale));
  if (node->input_count != 2)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "CustomScaleLayer takes 2 inputs, got %d",
                         node->input_count);
  return mxu_json_applied(where, node,
                          mxu_apply_custom_scale(node->model, name, scale,
                                                 node->inputs[0],
                                                 node->inputs[1]));
}

static void write_custom_scale(mxu_json_out *out, const mxu_layer *layer,
                               cJSON *config) {
  mxu_json_put_float(out, config, "scale", layer->config.custom_scale);
}

/* Keras would broadcast; InceptionResNetV2 sums tensors of one shape. */
static mxu_status custom_scale_infer(mxu_layer *layer) {
  if (!isfinite(layer->config.custom_scale))
    return mxu_fail(MXU_ERR_ARG, "%s: scale %g must be finite", layer->name,
                    (double)layer->config.custom_scale);
  const mxu_shape *a = &layer->in_shapes[0], *b = &layer->in_shapes[1];
  int same = a->rank == b->rank;
  for (int d = 0; same && d < a->rank; d++) same = a->dims[d] == b->dims[d];
  if (!same) {
    char first[64], second[64];
    mxu_shape_format(a, first, sizeof first);
    mxu_shape_format(b, second, sizeof second);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: inputs of shapes %s and %s; CustomScaleLayer takes "
                    "two of one shape",
                    layer->name, first, second);
  }
  return mxu_same_shape_infer(layer);
}

/* Forward: a product and a sum; backward: the second input's product
 * (the first's gradient is dy itself). */
static double custom_scale_flops(const mxu_layer *layer,
                                 const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 3.0 : 2.0);
}

static void custom_scale_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float scale = layer->config.custom_scale;
  const float *a = run->xs[0], *b = run->xs[1];
  int64_t n = mxu_batch_values(layer);
  for (int64_t i = 0; i < n; i++) run->y[i] = a[i] + b[i] * scale;
}

static void custom_scale_backward(mxu_layer *layer, const mxu_layer_run *run) {
  float scale = layer->config.custom_scale;
  int64_t n = mxu_batch_values(layer);
  if (run->need_dxs[0] && run->dxs[0] != run->dy)
    run->backend->copy_rows(1, n, run->dy, n, run->dxs[0], n);
  if (run->need_dxs[1])
    for (int64_t i = 0; i < n; i++) run->dxs[1][i] = run->dy[i] * scale;
}

static mxu_hlo_value custom_scale_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value b = e->in[1];
  return mxu_hlo_binary(
      h, MXU_HLO_ADD, e->in[0],
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, b,
                     mxu_hlo_full_like(h, b, layer->config.custom_scale)));
}

const mxu_layer_class mxu_custom_scale_layer_class = {
    .class_name = "CustomScaleLayer",
    .origin = &custom_scale_origin,
    .config_keys = custom_scale_keys,
    .read_config = read_custom_scale,
    .write_config = write_custom_scale,
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = custom_scale_infer,
    .flops = custom_scale_flops,
    .plan = mxu_no_plan,
    .forward = custom_scale_forward,
    .backward = custom_scale_backward,
    .emit = custom_scale_emit,
};
