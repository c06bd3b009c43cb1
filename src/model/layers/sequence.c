/* sequence.c — the layers that shape sequences without learning:
 * Masking (a step whose features all equal mask_value is padding: zeros
 * out, and masked for the layers after, as an Embedding's mask_zero
 * masks), RepeatVector ((features) -> (n, features)), UpSampling1D,
 * ZeroPadding1D and Cropping1D (plain loops: copies). */
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

int mxu_step_kept(const float *x, int64_t width, float padding) {
  for (int64_t j = 0; j < width; j++)
    if (x[j] != padding) return 1;
  return 0;
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
    mask[r] = (float)mxu_step_kept(x, f, value);
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

/* ---- UpSampling1D ---------------------------------------------------------
 * Each step repeated `size` times (Keras' ops.repeat along the steps). */

static const char *const upsampling1d_keys[] = {"size", NULL};

static mxu_status read_upsampling1d(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  int size = 2;
  MXU_TRY(mxu_json_int(where, config, "size", MXU_JSON_OPTIONAL, 1, MXU_MAX_DIM,
                       &size));
  return mxu_json_applied(
      where, node,
      mxu_apply_upsampling1d(node->model, name, size, node->inputs[0]));
}

static void write_upsampling1d(mxu_json_out *out, const mxu_layer *layer,
                               cJSON *config) {
  mxu_json_put_number(out, config, "size", layer->config.repeats);
}

/* A sequence (steps, channels) of the layer's input, else a message. */
static mxu_status need_sequence(const mxu_layer *layer) {
  if (layer->in_shape.rank == 2) return MXU_OK;
  char s[64];
  mxu_shape_format(&layer->in_shape, s, sizeof s);
  return mxu_fail(MXU_ERR_SHAPE, "%s: %s takes (steps, channels), got %s",
                  layer->name, layer->cls->class_name, s);
}

static mxu_status upsampling1d_infer(mxu_layer *layer) {
  int size = layer->config.repeats;
  MXU_TRY(need_sequence(layer));
  if (size < 1 || layer->in_shape.dims[0] * size > MXU_MAX_DIM)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: size %d must be >= 1 and give at most %d steps",
                    layer->name, size, MXU_MAX_DIM);
  layer->out_shape = layer->in_shape;
  layer->out_shape.dims[0] *= size;
  return MXU_OK;
}

static void upsampling1d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t rows = (int64_t)layer->compiled->batch * layer->in_shape.dims[0];
  int64_t c = layer->in_shape.dims[1], size = layer->config.repeats;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < size; k++)
      memcpy(run->y + (r * size + k) * c, run->x + r * c,
             (size_t)c * sizeof(float));
}

static void upsampling1d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t rows = (int64_t)layer->compiled->batch * layer->in_shape.dims[0];
  int64_t c = layer->in_shape.dims[1], size = layer->config.repeats;
  for (int64_t r = 0; r < rows; r++) {
    float *dx = run->dx + r * c;
    memcpy(dx, run->dy + r * size * c, (size_t)c * sizeof(float));
    for (int64_t k = 1; k < size; k++)
      for (int64_t j = 0; j < c; j++) dx[j] += run->dy[(r * size + k) * c + j];
  }
}

/* (n, steps, c) -> (n, steps, size, c) -> (n, steps * size, c). */
static mxu_hlo_value upsampling1d_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_hlo_shape *in = mxu_hlo_shape_of(e->h, e->in[0]);
  int64_t spread[4] = {in->dims[0], in->dims[1], layer->config.repeats,
                       in->dims[2]};
  const int64_t dims[3] = {0, 1, 3};
  int64_t out[3] = {in->dims[0], in->dims[1] * layer->config.repeats,
                    in->dims[2]};
  mxu_hlo_value y = mxu_hlo_broadcast(
      e->h, e->in[0], mxu_hlo_shape_make(in->dtype, 4, spread), dims);
  return mxu_hlo_reshape(e->h, y, mxu_hlo_shape_make(in->dtype, 3, out));
}

const mxu_layer_class mxu_upsampling1d_class = {
    .class_name = "UpSampling1D",
    .config_keys = upsampling1d_keys,
    .read_config = read_upsampling1d,
    .write_config = write_upsampling1d,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = upsampling1d_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = upsampling1d_forward,
    .backward = upsampling1d_backward,
    .emit = upsampling1d_emit,
};

/* ---- ZeroPadding1D, Cropping1D ---------------------------------------------
 * Steps of zeros before and after the sequence, or steps cut off either
 * end: config.padding's top and bottom are the steps before and after. */

static const char *const zero_padding1d_keys[] = {"padding", "data_format",
                                                  NULL};
static const char *const cropping1d_keys[] = {"cropping", NULL};

static int is_cropping1d(const mxu_layer *layer) {
  return layer->cls == &mxu_cropping1d_class;
}

/* n (both ends) or [before, after], each 0..2^20. */
static mxu_status read_ends(const mxu_json_where *where, const cJSON *config,
                            const char *key, int ends[2]) {
  const cJSON *v = mxu_json_get(config, key);
  if (!v) return MXU_OK;
  const cJSON *a = cJSON_IsArray(v) ? v->child : v;
  const cJSON *b = cJSON_IsArray(v) ? (a ? a->next : NULL) : v;
  int ok = (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 2) && a && b;
  for (int i = 0; ok && i < 2; i++) {
    const cJSON *n = i ? b : a;
    ok = cJSON_IsNumber(n) && n->valuedouble >= 0 &&
         n->valuedouble <= 1 << 20 && n->valuedouble == (int)n->valuedouble;
    if (ok) ends[i] = (int)n->valuedouble;
  }
  if (ok) return MXU_OK;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "%s must be n or [before, after], integers >= 0, got %s",
                       key, text);
}

static mxu_status read_zero_padding1d(const mxu_json_where *where,
                                      const cJSON *config, mxu_json_node *node,
                                      const char *name) {
  int ends[2] = {1, 1}; /* Keras' default */
  MXU_TRY(read_ends(where, config, "padding", ends));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(where, node,
                          mxu_apply_zero_padding1d(node->model, name, ends[0],
                                                   ends[1], node->inputs[0]));
}

static mxu_status read_cropping1d(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  int ends[2] = {1, 1}; /* Keras' default */
  MXU_TRY(read_ends(where, config, "cropping", ends));
  return mxu_json_applied(where, node,
                          mxu_apply_cropping1d(node->model, name, ends[0],
                                               ends[1], node->inputs[0]));
}

/* tf.keras 2's ZeroPadding1D takes no data_format. */
static void write_ends(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  int ends[2] = {layer->config.padding.top, layer->config.padding.bottom};
  cJSON *pair = cJSON_CreateIntArray(ends, 2);
  if (!pair) out->failed = 1;
  mxu_json_put(out, config, is_cropping1d(layer) ? "cropping" : "padding",
               pair);
  if (out->keras3 && !is_cropping1d(layer))
    mxu_json_put_string(out, config, "data_format", "channels_last");
}

static mxu_status ends_infer(mxu_layer *layer) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  MXU_TRY(need_sequence(layer));
  if (c->top < 0 || c->bottom < 0 || c->top > 1 << 20 || c->bottom > 1 << 20)
    return mxu_fail(MXU_ERR_ARG, "%s: (%d, %d) steps must be in 0..1048576",
                    layer->name, c->top, c->bottom);
  int64_t sign = is_cropping1d(layer) ? -1 : 1;
  layer->out_shape = layer->in_shape;
  layer->out_shape.dims[0] += sign * (c->top + c->bottom);
  if (layer->out_shape.dims[0] < 1)
    return mxu_fail(
        MXU_ERR_SHAPE, "%s: cropping (%d, %d) leaves none of %lld steps",
        layer->name, c->top, c->bottom, (long long)layer->in_shape.dims[0]);
  return MXU_OK;
}

/* Each sample's shorter sequence into the longer one after `before`
 * steps (zeros around), or out of it. */
static void ends_move(const mxu_layer *layer, const float *from, float *to,
                      int into_longer) {
  int crop = is_cropping1d(layer);
  const mxu_shape *shorter = crop ? &layer->out_shape : &layer->in_shape;
  const mxu_shape *longer = crop ? &layer->in_shape : &layer->out_shape;
  int64_t c = shorter->dims[1], run = shorter->dims[0] * c;
  int64_t skip = (int64_t)layer->config.padding.top * c;
  int64_t whole = longer->dims[0] * c;
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    if (into_longer) {
      memset(to + n * whole, 0, (size_t)whole * sizeof(float));
      memcpy(to + n * whole + skip, from + n * run,
             (size_t)run * sizeof(float));
    } else {
      memcpy(to + n * run, from + n * whole + skip,
             (size_t)run * sizeof(float));
    }
  }
}

static void ends_forward(mxu_layer *layer, const mxu_layer_run *run) {
  ends_move(layer, run->x, run->y, !is_cropping1d(layer));
}

static void ends_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) ends_move(layer, run->dy, run->dx, is_cropping1d(layer));
}

static mxu_hlo_value ends_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int64_t low[3] = {0, c->top, 0}, none[3] = {0};
  if (!is_cropping1d(layer)) {
    int64_t high[3] = {0, c->bottom, 0};
    return mxu_hlo_pad(e->h, e->in[0], 0.0, low, high, none);
  }
  int64_t limit[3] = {e->batch, c->top + layer->out_shape.dims[0],
                      layer->out_shape.dims[1]},
          stride[3] = {1, 1, 1};
  return mxu_hlo_slice(e->h, e->in[0], low, limit, stride);
}

#define ENDS_CLASS(symbol, keras_name, reader, keys)                           \
  const mxu_layer_class symbol = {                                             \
      .class_name = keras_name,                                                \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = write_ends,                                              \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = ends_infer,                                                     \
      .flops = mxu_no_flops,                                                   \
      .plan = mxu_no_plan,                                                     \
      .forward = ends_forward,                                                 \
      .backward = ends_backward,                                               \
      .emit = ends_emit,                                                       \
  }

ENDS_CLASS(mxu_zero_padding1d_class, "ZeroPadding1D", read_zero_padding1d,
           zero_padding1d_keys);
ENDS_CLASS(mxu_cropping1d_class, "Cropping1D", read_cropping1d,
           cropping1d_keys);
