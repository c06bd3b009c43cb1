/* sequence.c — the layers that shape sequences without learning:
 * Masking (a step whose features all equal mask_value is padding: zeros
 * out, and masked for the layers after, as an Embedding's mask_zero
 * masks) and RepeatVector ((features) -> (n, features)). */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

static double one_per_output(const mxu_layer *layer,
                             const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->out_shape) *
         (step->need_dx ? 2.0 : 1.0);
}

/* ---- Masking --------------------------------------------------------------
 * Keras: mask = any(x != mask_value, axis=-1); y = x * mask. The mask
 * (1 or 0 per step) stays in scratch[0] for backward and for the layers
 * that use it (computes_mask). */

static const char *const masking_keys[] = {"mask_value", NULL};

static mxu_status read_masking(const mxu_json_where *where, const cJSON *config,
                               mxu_json_node *node, const char *name) {
  float value = 0.0f;
  MXU_TRY(
      mxu_json_float(where, config, "mask_value", MXU_JSON_OPTIONAL, &value));
  return mxu_json_applied(
      where, node,
      mxu_apply_masking(node->model, name, value, node->inputs[0]));
}

static void write_masking(mxu_json_out *out, const mxu_layer *layer,
                          cJSON *config) {
  mxu_json_put_float(out, config, "mask_value", layer->config.mask_value);
}

static mxu_status masking_infer(mxu_layer *layer) {
  if (layer->in_shape.rank != 2) {
    char s[64];
    mxu_shape_format(&layer->in_shape, s, sizeof s);
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: Masking over %s is not supported: mxu masks the "
                    "steps of a sequence (steps, features)",
                    layer->name, s);
  }
  return mxu_same_shape_infer(layer);
}

static int masking_mask(const mxu_layer *layer) { return layer->index; }

static mxu_status masking_plan(mxu_layer *layer, const mxu_backend *backend,
                               int batch, mxu_arena *layout) {
  (void)backend;
  layer->compiled->scratch[0] = mxu_arena_reserve(
      layout, (size_t)batch * (size_t)layer->in_shape.dims[0] * sizeof(float));
  return MXU_OK;
}

static float *mask_of(const mxu_layer *layer, const mxu_layer_run *run) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[0]);
}

static void masking_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t rows = (int64_t)layer->compiled->batch * layer->in_shape.dims[0];
  int64_t f = layer->in_shape.dims[1];
  float value = layer->config.mask_value, *mask = mask_of(layer, run);
  for (int64_t r = 0; r < rows; r++) {
    const float *x = run->x + r * f;
    int kept = 0;
    for (int64_t j = 0; j < f && !kept; j++) kept = x[j] != value;
    mask[r] = (float)kept;
    for (int64_t j = 0; j < f; j++) run->y[r * f + j] = x[j] * mask[r];
  }
}

static void masking_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t rows = (int64_t)layer->compiled->batch * layer->in_shape.dims[0];
  int64_t f = layer->in_shape.dims[1];
  const float *mask = mask_of(layer, run);
  for (int64_t i = 0; i < rows * f; i++) run->dx[i] = run->dy[i] * mask[i / f];
}

static mxu_hlo_value masking_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const int64_t features[1] = {2}, rows_steps[2] = {0, 1};
  mxu_hlo_value differs = mxu_hlo_convert(
      h,
      mxu_hlo_compare_op(h, MXU_HLO_NE, x,
                         mxu_hlo_full_like(h, x, layer->config.mask_value)),
      MXU_HLO_F32);
  e->mask_out = mxu_hlo_reduce(h, differs, MXU_HLO_MAX, 1, features);
  return mxu_hlo_mul(
      h, x,
      mxu_hlo_broadcast(h, e->mask_out, *mxu_hlo_shape_of(h, x), rows_steps));
}

const mxu_layer_class mxu_masking_class = {
    .class_name = "Masking",
    .config_keys = masking_keys,
    .read_config = read_masking,
    .write_config = write_masking,
    .output_mask = masking_mask,
    .computes_mask = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = masking_infer,
    .flops = one_per_output,
    .plan = masking_plan,
    .forward = masking_forward,
    .backward = masking_backward,
    .emit = masking_emit,
};

/* ---- RepeatVector ---------------------------------------------------------
 */

static const char *const repeat_keys[] = {"n", NULL};

static mxu_status read_repeat_vector(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  int n = 0;
  MXU_TRY(
      mxu_json_int(where, config, "n", MXU_JSON_REQUIRED, 1, MXU_MAX_DIM, &n));
  return mxu_json_applied(
      where, node,
      mxu_apply_repeat_vector(node->model, name, n, node->inputs[0]));
}

static void write_repeat_vector(mxu_json_out *out, const mxu_layer *layer,
                                cJSON *config) {
  mxu_json_put_number(out, config, "n", layer->config.repeats);
}

static mxu_status repeat_infer(mxu_layer *layer) {
  int n = layer->config.repeats;
  if (n < 1 || n > MXU_MAX_DIM)
    return mxu_fail(MXU_ERR_ARG, "%s: n must be in 1..%d, got %d", layer->name,
                    MXU_MAX_DIM, n);
  if (layer->in_shape.rank != 1) {
    char s[64];
    mxu_shape_format(&layer->in_shape, s, sizeof s);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: RepeatVector takes a vector (features), got %s",
                    layer->name, s);
  }
  layer->out_shape = (mxu_shape){2, {n, layer->in_shape.dims[0]}};
  return MXU_OK;
}

static void repeat_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t f = layer->in_shape.dims[0], n = layer->config.repeats;
  for (int64_t s = 0; s < layer->compiled->batch; s++)
    for (int64_t r = 0; r < n; r++)
      memcpy(run->y + (s * n + r) * f, run->x + s * f,
             (size_t)f * sizeof(float));
}

static void repeat_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t f = layer->in_shape.dims[0], n = layer->config.repeats;
  for (int64_t s = 0; s < layer->compiled->batch; s++) {
    float *dx = run->dx + s * f;
    memcpy(dx, run->dy + s * n * f, (size_t)f * sizeof(float));
    for (int64_t r = 1; r < n; r++)
      for (int64_t j = 0; j < f; j++) dx[j] += run->dy[(s * n + r) * f + j];
  }
}

static mxu_hlo_value repeat_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo_shape s = *mxu_hlo_shape_of(e->h, e->in[0]);
  s.rank = 3;
  s.dims[2] = s.dims[1];
  s.dims[1] = layer->config.repeats;
  const int64_t dims[2] = {0, 2};
  return mxu_hlo_broadcast(e->h, e->in[0], s, dims);
}

const mxu_layer_class mxu_repeat_vector_class = {
    .class_name = "RepeatVector",
    .config_keys = repeat_keys,
    .read_config = read_repeat_vector,
    .write_config = write_repeat_vector,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = repeat_infer,
    .flops = one_per_output,
    .plan = mxu_no_plan,
    .forward = repeat_forward,
    .backward = repeat_backward,
    .emit = repeat_emit,
};
