/* preprocessing.c — the input pipeline layers Keras models carry:
 * Rescaling (on the backend) and Normalization (with the statistics
 * adapt() left in its weights, or given in its config; plain loops: it
 * touches each input value once). */
#include "model/layers/layers.h"

#include <float.h>
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

/* On the backend (threaded): tf.keras 2's MobileNetV3 computes its hard
 * swish with ops read as Rescalings (json_read.c), on whole tensors. */
static void rescaling_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_rescaling_config *c = &layer->config.rescaling;
  run->backend->scale_shift(mxu_batch_values(layer), run->x, c->scale,
                            c->offset, run->y);
}

static void rescaling_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  run->backend->scale_shift(mxu_batch_values(layer), run->dy,
                            layer->config.rescaling.scale, 0.0f, run->dx);
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
    .output_mask = mxu_input_mask,
    .positionwise = 1,
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

/* ---- x / c ----------------------------------------------------------------
 * An op Keras records as a layer (json_read.c: `inputs / 255.0`), which
 * no Rescaling gives the bits of: x * (1 / c) rounds twice. The
 * divisor is the Rescaling config's scale. */

static mxu_status divide_infer(mxu_layer *layer) {
  if (!isfinite(layer->config.rescaling.scale))
    return mxu_fail(MXU_ERR_ARG, "%s: the divisor %g must be finite",
                    layer->name, (double)layer->config.rescaling.scale);
  return mxu_same_shape_infer(layer);
}

static void divide_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float divisor = layer->config.rescaling.scale;
  int64_t n = mxu_batch_values(layer);
  for (int64_t i = 0; i < n; i++) run->y[i] = run->x[i] / divisor;
}

static void divide_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  float divisor = layer->config.rescaling.scale;
  int64_t n = mxu_batch_values(layer);
  for (int64_t i = 0; i < n; i++) run->dx[i] = run->dy[i] / divisor;
}

static mxu_hlo_value divide_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo_value x = e->in[0];
  return mxu_hlo_binary(
      e->h, MXU_HLO_DIVIDE, x,
      mxu_hlo_full_like(e->h, x, layer->config.rescaling.scale));
}

const mxu_layer_class mxu_divide_class = {
    .class_name = "TrueDivide",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = divide_infer,
    .flops = one_per_value,
    .plan = mxu_no_plan,
    .forward = divide_forward,
    .emit = divide_emit,
    .backward = divide_backward,
};

/* ---- Normalization --------------------------------------------------------
 * Over the last axis only (Keras' default, and what image models use).
 * The statistics come from the weights, as adapt() leaves them, or from
 * the config: keras.applications' EfficientNetV2 and ConvNeXt pass
 * ImageNet's mean and variance to the layer, which then has no weights
 * (nothing in the weights files, no params) and keeps them as float32
 * constants. */

static const char *const normalization_keys[] = {"axis", "invert", "mean",
                                                 "variance", NULL};

/* A mean or variance given in the config: null or absent (the adapted
 * weights: *count 0), a number (one for every channel) or a list of
 * numbers (one per channel). */
static mxu_status read_given(const mxu_json_where *where, const cJSON *config,
                             const char *key, float *values, int *count) {
  const cJSON *v = mxu_json_get(config, key);
  *count = 0;
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
  if (n > MXU_NORMALIZATION_VALUES)
    return mxu_json_fail(
        where, MXU_ERR_UNSUPPORTED,
        "%s has %d values; mxu takes at most %d given in the config "
        "(MXU_NORMALIZATION_VALUES): give the statistics as the adapted "
        "layer's weights instead (mean and variance null)",
        key, n, MXU_NORMALIZATION_VALUES);
  const cJSON *item = cJSON_IsArray(v) ? v->child : v;
  for (int i = 0; i < n; i++, item = item->next) {
    if (!cJSON_IsNumber(item))
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "%s must be null, a number or a list of numbers, "
                           "got %s",
                           key, text);
    if (!(fabs(item->valuedouble) <= FLT_MAX))
      return mxu_json_fail(where, MXU_ERR_ARG,
                           "%s %s is beyond float32's range", key, text);
    values[i] = (float)item->valuedouble;
  }
  if (n == 0)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s is an empty list (give a number, or one per "
                         "channel)",
                         key);
  *count = n;
  return MXU_OK;
}

static mxu_status read_normalization(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  mxu_normalization_config n = {name, 0, 0, {0}, {0}};
  MXU_TRY(mxu_json_last_axis(where, config, node));
  MXU_TRY(mxu_json_bool(where, config, "invert", &n.invert));
  int means = 0, variances = 0;
  MXU_TRY(read_given(where, config, "mean", n.mean, &means));
  MXU_TRY(read_given(where, config, "variance", n.variance, &variances));
  if (!means != !variances)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "mean and variance are given together or not at "
                         "all (here only %s)",
                         means ? "mean" : "variance");
  if (means != variances)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "mean has %d values and variance %d: they must have "
                         "the same shape",
                         means, variances);
  n.given = means;
  return mxu_json_applied(
      where, node, mxu_apply_normalization(node->model, &n, node->inputs[0]));
}

/* Given statistics go back as Keras lists (a single one too: Keras
 * broadcasts [v] as it does v), adapted ones as null. */
static void put_given(mxu_json_out *out, cJSON *config, const char *key,
                      const float *values, int count) {
  if (!count) {
    mxu_json_put_null(out, config, key);
    return;
  }
  cJSON *list = mxu_json_put(out, config, key, cJSON_CreateArray());
  for (int i = 0; list && i < count; i++)
    if (!cJSON_AddItemToArray(
            list, cJSON_CreateNumber(mxu_json_short_float(values[i]))))
      out->failed = 1;
}

static void write_normalization(mxu_json_out *out, const mxu_layer *layer,
                                cJSON *config) {
  const mxu_normalization_config *c = &layer->config.normalization;
  cJSON *axis = cJSON_CreateArray();
  if (axis)
    cJSON_AddItemToArray(axis, cJSON_CreateNumber(layer->in_shape.rank));
  mxu_json_put(out, config, "axis", axis);
  mxu_json_put_bool(out, config, "invert", c->invert);
  put_given(out, config, "mean", c->mean, c->given);
  put_given(out, config, "variance", c->variance, c->given);
}

static int channels(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

/* Given statistics: one value, or one per channel, each usable. */
static mxu_status normalization_infer(mxu_layer *layer) {
  MXU_TRY(mxu_same_shape_infer(layer));
  const mxu_normalization_config *c = &layer->config.normalization;
  if (c->given < 0 || c->given > MXU_NORMALIZATION_VALUES)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: %d given mean and variance values; 0 (adapted "
                    "weights) to %d",
                    layer->name, c->given, MXU_NORMALIZATION_VALUES);
  if (c->given > 1 && c->given != channels(layer))
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: mean and variance have %d values, and the input's "
                    "last axis %d channels: give one value, or one per "
                    "channel",
                    layer->name, c->given, channels(layer));
  for (int i = 0; i < c->given; i++)
    if (!isfinite(c->mean[i]) || !isfinite(c->variance[i]) ||
        c->variance[i] < 0)
      return mxu_fail(MXU_ERR_ARG,
                      "%s: mean %g and variance %g (value %d) must be finite, "
                      "the variance >= 0",
                      layer->name, (double)c->mean[i], (double)c->variance[i],
                      i);
  return MXU_OK;
}

/* Adapted statistics only: given ones are constants, not weights. */
static int normalization_declare(const mxu_layer *layer,
                                 mxu_param_decl *decls) {
  if (layer->config.normalization.given) return 0;
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

/* Where a run reads the statistics: channel ch's are mean[ch * step]
 * and variance[ch * step] (step 0: one value for every channel). */
typedef struct statistics {
  const float *mean, *variance;
  int step;
} statistics;

static statistics statistics_of(const mxu_layer *layer,
                                const mxu_layer_run *run) {
  const mxu_normalization_config *c = &layer->config.normalization;
  if (c->given) return (statistics){c->mean, c->variance, c->given > 1};
  return (statistics){run->w[0], run->w[1], 1};
}

/* Keras' denominator, max(sqrt(variance), epsilon). */
static float spread_of(float variance) {
  float s = sqrtf(variance);
  return s > 1e-7f ? s : 1e-7f;
}

static void normalization_forward(mxu_layer *layer, const mxu_layer_run *run) {
  statistics st = statistics_of(layer, run);
  int c = channels(layer), invert = layer->config.normalization.invert;
  int64_t rows = mxu_batch_values(layer) / c;
  for (int64_t r = 0; r < rows; r++)
    for (int ch = 0; ch < c; ch++) {
      float x = run->x[r * c + ch], mean = st.mean[ch * st.step],
            s = spread_of(st.variance[ch * st.step]);
      run->y[r * c + ch] = invert ? x * s + mean : (x - mean) / s;
    }
}

static void normalization_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  statistics st = statistics_of(layer, run);
  int c = channels(layer), invert = layer->config.normalization.invert;
  int64_t rows = mxu_batch_values(layer) / c;
  for (int64_t r = 0; r < rows; r++)
    for (int ch = 0; ch < c; ch++) {
      float s = spread_of(st.variance[ch * st.step]), dy = run->dy[r * c + ch];
      run->dx[r * c + ch] = invert ? dy * s : dy / s;
    }
}

/* The statistics as a value along the last axis (the weights, or the
 * given constants), or one for every channel (a scalar). */
static mxu_hlo_value statistic(const mxu_layer *layer, mxu_emit *e, int k,
                               const float *given) {
  const mxu_normalization_config *c = &layer->config.normalization;
  if (!c->given) return e->w[k];
  double values[MXU_NORMALIZATION_VALUES];
  for (int i = 0; i < c->given; i++) values[i] = given[i];
  int64_t n = c->given;
  return c->given == 1
             ? mxu_hlo_constant(e->h, mxu_hlo_shape_make(MXU_HLO_F32, 0, NULL),
                                values[0])
             : mxu_hlo_constant_values(
                   e->h, mxu_hlo_shape_make(MXU_HLO_F32, 1, &n), values);
}

/* The statistics spread along the last axis; max(sqrt(variance), 1e-7). */
static mxu_hlo_value normalization_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_normalization_config *c = &layer->config.normalization;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  mxu_hlo_value variance = statistic(layer, e, 1, c->variance);
  mxu_hlo_value mean =
      mxu_hlo_broadcast_to(h, statistic(layer, e, 0, c->mean), s);
  mxu_hlo_value spread = mxu_hlo_broadcast_to(
      h,
      mxu_hlo_binary(h, MXU_HLO_MAXIMUM,
                     mxu_hlo_unary(h, MXU_HLO_SQRT, variance),
                     mxu_hlo_full_like(h, variance, 1e-7f)),
      s);
  if (c->invert)
    return mxu_hlo_binary(h, MXU_HLO_ADD,
                          mxu_hlo_binary(h, MXU_HLO_MULTIPLY, x, spread), mean);
  return mxu_hlo_binary(h, MXU_HLO_DIVIDE,
                        mxu_hlo_binary(h, MXU_HLO_SUBTRACT, x, mean), spread);
}

const mxu_layer_class mxu_normalization_class = {
    .output_mask = mxu_input_mask,
    .class_name = "Normalization",
    .config_keys = normalization_keys,
    .read_config = read_normalization,
    .write_config = write_normalization,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = normalization_infer,
    .declare = normalization_declare,
    .flops = one_per_value,
    .plan = mxu_no_plan,
    .forward = normalization_forward,
    .backward = normalization_backward,
    .emit = normalization_emit,
};
