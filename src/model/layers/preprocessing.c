/* preprocessing.c — the input pipeline layers Keras models carry:
 * Rescaling and Normalization (with the statistics adapt() left in its
 * weights). Plain loops: they touch each input value once. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

static double one_per_value(const mxu_layer *layer,
                            const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 3.0 : 2.0);
}

/* ---- Rescaling ------------------------------------------------------------
 */

static const char *const rescaling_keys[] = {"scale", "offset", NULL};

static mxu_status read_rescaling(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_rescaling_config r = {name, 1.0f, 0.0f};
  MXU_TRY(mxu_json_float(where, config, "scale", MXU_JSON_REQUIRED, &r.scale));
  MXU_TRY(
      mxu_json_float(where, config, "offset", MXU_JSON_OPTIONAL, &r.offset));
  return mxu_json_applied(
      where, node, mxu_apply_rescaling(node->model, &r, node->inputs[0]));
}

static void write_rescaling(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  mxu_json_put_float(out, config, "scale", layer->config.rescaling.scale);
  mxu_json_put_float(out, config, "offset", layer->config.rescaling.offset);
}

static mxu_status rescaling_infer(mxu_layer *layer) {
  const mxu_rescaling_config *c = &layer->config.rescaling;
  if (!isfinite(c->scale) || !isfinite(c->offset))
    return mxu_fail(MXU_ERR_ARG, "%s: scale %g and offset %g must be finite",
                    layer->name, (double)c->scale, (double)c->offset);
  return mxu_same_shape_infer(layer);
}

static void rescaling_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float scale = layer->config.rescaling.scale;
  float offset = layer->config.rescaling.offset;
  int64_t n = mxu_batch_values(layer);
  for (int64_t i = 0; i < n; i++) run->y[i] = run->x[i] * scale + offset;
}

static void rescaling_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  float scale = layer->config.rescaling.scale;
  int64_t n = mxu_batch_values(layer);
  for (int64_t i = 0; i < n; i++) run->dx[i] = run->dy[i] * scale;
}

static mxu_hlo_value rescaling_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_rescaling_config *c = &layer->config.rescaling;
  mxu_hlo_value x = e->in[0];
  return mxu_hlo_binary(e->h, MXU_HLO_ADD,
                        mxu_hlo_binary(e->h, MXU_HLO_MULTIPLY, x,
                                       mxu_hlo_full_like(e->h, x, c->scale)),
                        mxu_hlo_full_like(e->h, x, c->offset));
}

const mxu_layer_class mxu_rescaling_class = {
    .class_name = "Rescaling",
    .config_keys = rescaling_keys,
    .read_config = read_rescaling,
    .write_config = write_rescaling,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = rescaling_infer,
    .flops = one_per_value,
    .plan = mxu_no_plan,
    .forward = rescaling_forward,
    .emit = rescaling_emit,
    .backward = rescaling_backward,
};

/* ---- Normalization --------------------------------------------------------
 * Over the last axis only (Keras' default, and what image models use);
 * the statistics come from the weights (mean and variance given in the
 * config instead are refused). */

static const char *const normalization_keys[] = {"axis", "invert", "mean",
                                                 "variance", NULL};

static mxu_status read_normalization(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  mxu_normalization_config n = {name, 0};
  MXU_TRY(mxu_json_last_axis(where, config, node));
  MXU_TRY(mxu_json_bool(where, config, "invert", &n.invert));
  MXU_TRY(mxu_json_require_null(where, config, "mean"));
  MXU_TRY(mxu_json_require_null(where, config, "variance"));
  return mxu_json_applied(
      where, node, mxu_apply_normalization(node->model, &n, node->inputs[0]));
}

static void write_normalization(mxu_json_out *out, const mxu_layer *layer,
                                cJSON *config) {
  cJSON *axis = cJSON_CreateArray();
  if (axis)
    cJSON_AddItemToArray(axis, cJSON_CreateNumber(layer->in_shape.rank));
  mxu_json_put(out, config, "axis", axis);
  mxu_json_put_bool(out, config, "invert", layer->config.normalization.invert);
  mxu_json_put_null(out, config, "mean");
  mxu_json_put_null(out, config, "variance");
}

static int channels(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static int normalization_declare(const mxu_layer *layer,
                                 mxu_param_decl *decls) {
  int64_t c = channels(layer);
  mxu_shape shape = mxu_shape_make(1, &c);
  decls[0] = (mxu_param_decl){
      .name = "mean", .shape = shape, .init = mxu_init_zeros()};
  decls[1] = (mxu_param_decl){
      .name = "variance", .shape = shape, .init = mxu_init_ones()};
  decls[2] = (mxu_param_decl){.name = "count",
                              .shape = mxu_shape_make(0, NULL),
                              .init = mxu_init_zeros()};
  return 3;
}

/* Keras' denominator, max(sqrt(variance), epsilon). */
static float spread_of_channel(const float *variance, int ch) {
  float s = sqrtf(variance[ch]);
  return s > 1e-7f ? s : 1e-7f;
}

static void normalization_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *mean = run->w[0], *variance = run->w[1];
  int c = channels(layer), invert = layer->config.normalization.invert;
  int64_t rows = mxu_batch_values(layer) / c;
  for (int64_t r = 0; r < rows; r++)
    for (int ch = 0; ch < c; ch++) {
      float x = run->x[r * c + ch], s = spread_of_channel(variance, ch);
      run->y[r * c + ch] = invert ? x * s + mean[ch] : (x - mean[ch]) / s;
    }
}

static void normalization_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  const float *variance = run->w[1];
  int c = channels(layer), invert = layer->config.normalization.invert;
  int64_t rows = mxu_batch_values(layer) / c;
  for (int64_t r = 0; r < rows; r++)
    for (int ch = 0; ch < c; ch++) {
      float s = spread_of_channel(variance, ch), dy = run->dy[r * c + ch];
      run->dx[r * c + ch] = invert ? dy * s : dy / s;
    }
}

/* The statistics spread along the last axis; max(sqrt(variance), 1e-7). */
static mxu_hlo_value normalization_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  mxu_hlo_value mean = mxu_hlo_broadcast_to(h, e->w[0], s);
  mxu_hlo_value spread = mxu_hlo_broadcast_to(
      h,
      mxu_hlo_binary(h, MXU_HLO_MAXIMUM,
                     mxu_hlo_unary(h, MXU_HLO_SQRT, e->w[1]),
                     mxu_hlo_full_like(h, e->w[1], 1e-7f)),
      s);
  if (layer->config.normalization.invert)
    return mxu_hlo_binary(h, MXU_HLO_ADD,
                          mxu_hlo_binary(h, MXU_HLO_MULTIPLY, x, spread), mean);
  return mxu_hlo_binary(h, MXU_HLO_DIVIDE,
                        mxu_hlo_binary(h, MXU_HLO_SUBTRACT, x, mean), spread);
}

const mxu_layer_class mxu_normalization_class = {
    .class_name = "Normalization",
    .config_keys = normalization_keys,
    .read_config = read_normalization,
    .write_config = write_normalization,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = mxu_same_shape_infer,
    .declare = normalization_declare,
    .flops = one_per_value,
    .plan = mxu_no_plan,
    .forward = normalization_forward,
    .backward = normalization_backward,
    .emit = normalization_emit,
};
