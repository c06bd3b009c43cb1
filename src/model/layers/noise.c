/* noise.c — GaussianNoise and GaussianDropout: in training, each value
 * plus N(0, stddev), or times N(1, sqrt(rate / (1 - rate))), the normal
 * draws from this run's counter-based stream at the value's place in the
 * replica (Box-Muller over two uniform draws), so slices draw what the
 * whole would; inference passes values through. GaussianDropout keeps
 * its factors (scratch[0]) for backward. Beside them the identities:
 * ActivityRegularization (whose penalty is the step's) and Identity. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

#define TWO_PI 6.28318530717958647692

static int is_gaussian_noise(const mxu_layer *layer) {
  return layer->cls == &mxu_gaussian_noise_class;
}

static mxu_status noise_infer(mxu_layer *layer) {
  float v = layer->config.dropout.rate;
  if (is_gaussian_noise(layer) ? !(v >= 0.0f && isfinite(v))
                               : !(v >= 0.0f && v < 1.0f))
    return mxu_fail(MXU_ERR_ARG, "%s: %s must be %s, got %g", layer->name,
                    is_gaussian_noise(layer) ? "stddev" : "rate",
                    is_gaussian_noise(layer) ? ">= 0" : "in [0, 1)", (double)v);
  return mxu_same_shape_infer(layer);
}

static mxu_status noise_plan(mxu_layer *layer, const mxu_backend *backend,
                             int batch, mxu_arena *layout) {
  (void)backend;
  if (!is_gaussian_noise(layer))
    layer->compiled->scratch[0] = mxu_arena_reserve(
        layout, (size_t)batch * (size_t)mxu_shape_count(&layer->in_shape) *
                    sizeof(float));
  return MXU_OK;
}

/* N(0, 1) for the values first .. first + count - 1 of the stream. */
static void normals(const mxu_rng *rng, uint64_t first, float *out,
                    int64_t count) {
  enum { CHUNK = 256 };
  float u[2 * CHUNK];
  for (int64_t at = 0; at < count; at += CHUNK) {
    int64_t n = count - at < CHUNK ? count - at : CHUNK;
    mxu_rng_uniform(rng, 2 * (first + (uint64_t)at), u, (size_t)(2 * n));
    for (int64_t i = 0; i < n; i++)
      out[at + i] = (float)(sqrt(-2.0 * log(1.0 - (double)u[2 * i])) *
                            cos(TWO_PI * (double)u[2 * i + 1]));
  }
}

static void noise_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t n = mxu_batch_values(layer);
  float v = layer->config.dropout.rate;
  if (!run->training || v == 0.0f) {
    if (run->y != run->x) memcpy(run->y, run->x, (size_t)n * sizeof(float));
    return;
  }
  uint64_t first =
      (uint64_t)(run->row_offset * mxu_shape_count(&layer->in_shape));
  if (is_gaussian_noise(layer)) {
    normals(&run->rng, first, run->y, n);
    for (int64_t i = 0; i < n; i++) run->y[i] = run->x[i] + v * run->y[i];
    return;
  }
  float *factor = (float *)(void *)(run->arena + layer->compiled->scratch[0]);
  float stddev = sqrtf(v / (1.0f - v));
  normals(&run->rng, first, factor, n);
  for (int64_t i = 0; i < n; i++) {
    factor[i] = 1.0f + stddev * factor[i];
    run->y[i] = run->x[i] * factor[i];
  }
}

static void noise_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t n = mxu_batch_values(layer);
  if (is_gaussian_noise(layer) || layer->config.dropout.rate == 0.0f) {
    memcpy(run->dx, run->dy, (size_t)n * sizeof(float));
    return;
  }
  const float *factor =
      (const float *)(void *)(run->arena + layer->compiled->scratch[0]);
  for (int64_t i = 0; i < n; i++) run->dx[i] = run->dy[i] * factor[i];
}

/* A normal draw (about ten flops) and an add or multiply. */
static double noise_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (11.0 + (step->need_dx && !is_gaussian_noise(layer) ? 1.0 : 0.0));
}

static const char *const gaussian_noise_keys[] = {"stddev", "seed", NULL};
static const char *const gaussian_dropout_keys[] = {"rate", "seed", NULL};

/* The seed is ignored: mxu's draws are its own. */
static mxu_status read_gaussian_noise(const mxu_json_where *where,
                                      const cJSON *config, mxu_json_node *node,
                                      const char *name) {
  float stddev = 0.0f;
  MXU_TRY(mxu_json_float(where, config, "stddev", MXU_JSON_REQUIRED, &stddev));
  return mxu_json_applied(
      where, node,
      mxu_apply_gaussian_noise(node->model, name, stddev, node->inputs[0]));
}

static mxu_status read_gaussian_dropout(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node, const char *name) {
  float rate = 0.0f;
  MXU_TRY(mxu_json_float(where, config, "rate", MXU_JSON_REQUIRED, &rate));
  return mxu_json_applied(
      where, node,
      mxu_apply_gaussian_dropout(node->model, name, rate, node->inputs[0]));
}

static void write_noise(mxu_json_out *out, const mxu_layer *layer,
                        cJSON *config) {
  mxu_json_put_float(out, config, is_gaussian_noise(layer) ? "stddev" : "rate",
                     layer->config.dropout.rate);
  mxu_json_put_null(out, config, "seed");
}

/* What noise_forward adds (GaussianNoise) or multiplies by
 * (GaussianDropout), for the program to apply. */
static int noise_draws(const mxu_layer *layer, const mxu_layer_run *run,
                       float *out) {
  float v = layer->config.dropout.rate;
  if (v == 0.0f) return 0;
  if (!out) return 1; /* asked whether it draws */
  int64_t n = mxu_batch_values(layer);
  normals(&run->rng,
          (uint64_t)(run->row_offset * mxu_shape_count(&layer->in_shape)), out,
          n);
  float stddev = is_gaussian_noise(layer) ? v : sqrtf(v / (1.0f - v));
  float base = is_gaussian_noise(layer) ? 0.0f : 1.0f;
  for (int64_t i = 0; i < n; i++) out[i] = base + stddev * out[i];
  return 1;
}

static mxu_hlo_value noise_emit(const mxu_layer *layer, mxu_emit *e) {
  if (!e->training || !e->noise) return e->in[0];
  return mxu_hlo_binary(
      e->h, is_gaussian_noise(layer) ? MXU_HLO_ADD : MXU_HLO_MULTIPLY, e->in[0],
      e->noise);
}

#define NOISE_CLASS(symbol, keras_name, reader, keys)                          \
  const mxu_layer_class symbol = {                                             \
      .output_mask = mxu_input_mask,                                           \
      .positionwise = 1,                                                       \
      .class_name = keras_name,                                                \
      .flops = noise_flops,                                                    \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = write_noise,                                             \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = noise_infer,                                                    \
      .plan = noise_plan,                                                      \
      .forward = noise_forward,                                                \
      .backward = noise_backward,                                              \
      .emit = noise_emit,                                                      \
      .emit_noise = noise_draws,                                               \
  }

NOISE_CLASS(mxu_gaussian_noise_class, "GaussianNoise", read_gaussian_noise,
            gaussian_noise_keys);
NOISE_CLASS(mxu_gaussian_dropout_class, "GaussianDropout",
            read_gaussian_dropout, gaussian_dropout_keys);

/* ---- ActivityRegularization -------------------------------------------------
 * The identity; its penalty and the penalty's gradient are the step's
 * (step.c), as for any layer with an activity regularizer. */

static const char *const activity_keys[] = {"l1", "l2", NULL};

static mxu_status read_activity(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  float l1 = 0.0f, l2 = 0.0f;
  MXU_TRY(mxu_json_float(where, config, "l1", MXU_JSON_OPTIONAL, &l1));
  MXU_TRY(mxu_json_float(where, config, "l2", MXU_JSON_OPTIONAL, &l2));
  return mxu_json_applied(where, node,
                          mxu_apply_activity_regularization(
                              node->model, name, l1, l2, node->inputs[0]));
}

static void write_activity(mxu_json_out *out, const mxu_layer *layer,
                           cJSON *config) {
  mxu_json_put_float(out, config, "l1", layer->activity.l1);
  mxu_json_put_float(out, config, "l2", layer->activity.l2);
}

static void identity_forward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->y != run->x)
    memcpy(run->y, run->x, (size_t)mxu_batch_values(layer) * 4);
}

static void identity_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx && run->dx != run->dy)
    memcpy(run->dx, run->dy, (size_t)mxu_batch_values(layer) * 4);
}

/* |y| or y^2 and an add per value, each way. */
static double activity_flops(const mxu_layer *layer,
                             const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 6.0 : 3.0);
}

static mxu_hlo_value identity_emit(const mxu_layer *layer, mxu_emit *e) {
  (void)layer;
  return e->in[0];
}

const mxu_layer_class mxu_activity_regularization_class = {
    .output_mask = mxu_input_mask,
    .class_name = "ActivityRegularization",
    .flops = activity_flops,
    .config_keys = activity_keys,
    .read_config = read_activity,
    .write_config = write_activity,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = mxu_same_shape_infer,
    .plan = mxu_no_plan,
    .forward = identity_forward,
    .backward = identity_backward,
    .emit = identity_emit,
};

/* ---- Identity ------------------------------------------------------------ */

static const char *const no_keys[] = {NULL};

static mxu_status read_identity(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  (void)config;
  return mxu_json_applied(
      where, node, mxu_apply_identity(node->model, name, node->inputs[0]));
}

const mxu_layer_class mxu_identity_class = {
    .output_mask = mxu_input_mask,
    .positionwise = 1,
    .class_name = "Identity",
    .config_keys = no_keys,
    .read_config = read_identity,
    .write_config = mxu_write_nothing,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = mxu_same_shape_infer,
    .plan = mxu_no_plan,
    .forward = identity_forward,
    .backward = identity_backward,
    .emit = identity_emit,
};
