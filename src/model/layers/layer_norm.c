/* layer_norm.c — LayerNormalization, GroupNormalization and
 * RMSNormalization over the last (channel) axis. Each normalises sets of
 * values, then scales and shifts per channel: LayerNormalization's and
 * RMSNormalization's sets are each position's channels, GroupNormalization's
 * each sample's group of channels at every position. xhat = (x - c) inv,
 * inv = 1 / sqrt(sum((x - m)^2) / n + epsilon): c = m = the set's mean
 * (LayerNormalization, GroupNormalization); c = 0, m = mean
 * (LayerNormalization's rms_scaling, Keras 3's); c = m = 0 (RMSNormalization,
 * the mean square). Statistics in double; plain loops. Backward, dxhat =
 * dy * gamma: dx = inv / n * (n dxhat - [c] sum(dxhat) - (x - m) inv
 * sum(dxhat xhat)); dgamma = sum(dy xhat), dbeta = sum(dy) per channel. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

mxu_layer_norm_config mxu_layer_norm_defaults(int groups) {
  return (mxu_layer_norm_config){
      .groups = groups, .epsilon = 1e-3f, .center = 1, .scale = 1};
}

static int is_group(const mxu_layer *layer) {
  return layer->cls == &mxu_group_normalization_class;
}

static int is_rms(const mxu_layer *layer) {
  return layer->cls == &mxu_rms_normalization_class;
}

/* m: the variance is about the mean (all but RMSNormalization). */
static int centers_variance(const mxu_layer *layer) { return !is_rms(layer); }

/* c: the values are centred before the scaling. */
static int centers_values(const mxu_layer *layer) {
  return !is_rms(layer) && !layer->config.layer_norm.rms_scaling;
}

/* Keras' weights: gamma with scale or rms_scaling, beta with center but not
 * rms_scaling (RMSNormalization: scale only, by construction). */
static int has_gamma(const mxu_layer_norm_config *c) {
  return c->scale || c->rms_scaling;
}

static int has_beta(const mxu_layer_norm_config *c) {
  return c->center && !c->rms_scaling;
}

static int channels(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static mxu_status layer_norm_infer(mxu_layer *layer) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  MXU_TRY(mxu_same_shape_infer(layer));
  if (!(c->epsilon > 0.0f) || !isfinite(c->epsilon))
    return mxu_fail(MXU_ERR_ARG, "%s: epsilon must be positive, got %g",
                    layer->name, (double)c->epsilon);
  if (is_group(layer) && (c->groups < 1 || channels(layer) % c->groups))
    return mxu_fail(MXU_ERR_ARG, "%s: groups %d must divide the %d channels",
                    layer->name, c->groups, channels(layer));
  return MXU_OK;
}

/* Keras' order: gamma (RMSNormalization's scale), then beta. */
static int layer_norm_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  int64_t ch = channels(layer);
  mxu_shape shape = mxu_shape_make(1, &ch);
  int n = 0;
  if (has_gamma(c))
    decls[n++] = mxu_weight_decl(is_rms(layer) ? "scale" : "gamma", shape,
                                 &c->gamma, mxu_init_ones());
  if (has_beta(c))
    decls[n++] = mxu_weight_decl("beta", shape, &c->beta, mxu_init_zeros());
  return n;
}

/* The sets: `count` of them, each `positions` runs of `width` channels
 * of a position of `stride` channels. */
typedef struct norm_sets {
  int64_t count, positions;
  int width, stride, groups;
} norm_sets;

static norm_sets sets_of(const mxu_layer *layer) {
  int c = channels(layer);
  int64_t positions = mxu_shape_count(&layer->in_shape) / c;
  int64_t batch = layer->compiled->batch;
  if (!is_group(layer)) return (norm_sets){batch * positions, 1, c, c, 1};
  int g = layer->config.layer_norm.groups;
  return (norm_sets){batch * g, positions, c / g, c, g};
}

/* Set k's first value, and the channel it starts at: its values are the
 * `width` after base + p * stride for each position p. */
static int64_t set_base(const norm_sets *s, int64_t k, int *first) {
  int64_t sample = k / s->groups, group = k % s->groups;
  *first = (int)(group * s->width);
  return sample * s->positions * s->stride + *first;
}

/* Set k's m (its mean, or 0 where the variance is not centred) and
 * 1 / sqrt(biased variance about m + epsilon), in double. */
static void set_stats(const norm_sets *s, int64_t k, const float *x,
                      float epsilon, int centered, double *mean, double *inv) {
  int first;
  const float *set = x + set_base(s, k, &first);
  double n = (double)(s->positions * s->width), sum = 0.0, squares = 0.0;
  for (int64_t p = 0; p < s->positions && centered; p++)
    for (int c = 0; c < s->width; c++) sum += set[p * s->stride + c];
  *mean = sum / n;
  for (int64_t p = 0; p < s->positions; p++)
    for (int c = 0; c < s->width; c++) {
      double d = set[p * s->stride + c] - *mean;
      squares += d * d;
    }
  *inv = 1.0 / sqrt(squares / n + epsilon);
}

static void layer_norm_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  const float *gamma = has_gamma(c) ? run->w[0] : NULL;
  const float *beta = has_beta(c) ? run->w[has_gamma(c)] : NULL;
  norm_sets s = sets_of(layer);
  for (int64_t k = 0; k < s.count; k++) {
    double mean, inv;
    int first;
    set_stats(&s, k, run->x, c->epsilon, centers_variance(layer), &mean, &inv);
    double shift = centers_values(layer) ? mean : 0.0;
    int64_t base = set_base(&s, k, &first);
    for (int64_t p = 0; p < s.positions; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double v = (run->x[i] - shift) * inv;
        if (gamma) v *= gamma[first + j];
        if (beta) v += beta[first + j];
        run->y[i] = (float)v;
      }
  }
}

static void layer_norm_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  const float *gamma = has_gamma(c) ? run->w[0] : NULL;
  float *dgamma = has_gamma(c) ? run->dw[0] : NULL;
  float *dbeta = has_beta(c) ? run->dw[has_gamma(c)] : NULL;
  norm_sets s = sets_of(layer);
  double n = (double)(s.positions * s.width);
  int centered = centers_values(layer);
  if (dgamma) memset(dgamma, 0, (size_t)channels(layer) * sizeof(float));
  if (dbeta) memset(dbeta, 0, (size_t)channels(layer) * sizeof(float));
  for (int64_t k = 0; k < s.count; k++) {
    double mean, inv, sum_d = 0.0, sum_dx = 0.0;
    int first;
    set_stats(&s, k, run->x, c->epsilon, centers_variance(layer), &mean, &inv);
    double shift = centered ? mean : 0.0;
    int64_t base = set_base(&s, k, &first);
    for (int64_t p = 0; p < s.positions; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double xhat = (run->x[i] - shift) * inv, dy = run->dy[i];
        double dxhat = gamma ? dy * gamma[first + j] : dy;
        sum_d += dxhat;
        sum_dx += dxhat * xhat;
        if (dgamma) dgamma[first + j] += (float)(dy * xhat);
        if (dbeta) dbeta[first + j] += (float)dy;
      }
    for (int64_t p = 0; p < s.positions && run->need_dx; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double dy = run->dy[i];
        double dxhat = gamma ? dy * gamma[first + j] : dy;
        run->dx[i] = (float)(inv / n *
                             (n * dxhat - (centered ? sum_d : 0.0) -
                              (run->x[i] - mean) * inv * sum_dx));
      }
  }
}

/* Forward: mean 1, variance 3, normalise 2, scale and shift 2; backward
 * about 10. */
static double layer_norm_flops(const mxu_layer *layer,
                               const mxu_flops_step *step) {
  (void)step;
  return (double)mxu_shape_count(&layer->in_shape) * (8.0 + 10.0);
}

/* ---- JSON ------------------------------------------------------------------
 * The last axis only (-1, or its index counting the batch). */

static const char *const layer_norm_keys[] = {"axis",
                                              "epsilon",
                                              "center",
                                              "scale",
                                              "beta_initializer",
                                              "gamma_initializer",
                                              "beta_regularizer",
                                              "gamma_regularizer",
                                              "beta_constraint",
                                              "gamma_constraint",
                                              "rms_scaling",
                                              NULL};
static const char *const rms_norm_keys[] = {"axis", "epsilon", NULL};
static const char *const group_norm_keys[] = {"groups",
                                              "axis",
                                              "epsilon",
                                              "center",
                                              "scale",
                                              "beta_initializer",
                                              "gamma_initializer",
                                              "beta_regularizer",
                                              "gamma_regularizer",
                                              "beta_constraint",
                                              "gamma_constraint",
                                              NULL};

static mxu_status read_norm(const mxu_json_where *where, const cJSON *config,
                            mxu_json_node *node, const char *name, int group) {
  mxu_layer_norm_config c = mxu_layer_norm_defaults(group ? 32 : 0);
  c.name = name;
  MXU_TRY(mxu_json_last_axis(where, config, node));
  if (group)
    MXU_TRY(mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, 1 << 20,
                         &c.groups));
  MXU_TRY(
      mxu_json_float(where, config, "epsilon", MXU_JSON_OPTIONAL, &c.epsilon));
  MXU_TRY(mxu_json_bool(where, config, "center", &c.center));
  MXU_TRY(mxu_json_bool(where, config, "scale", &c.scale));
  MXU_TRY(mxu_config_weight_options(where, config, "beta", &c.beta));
  MXU_TRY(mxu_config_weight_options(where, config, "gamma", &c.gamma));
  MXU_TRY(mxu_json_bool(where, config, "rms_scaling", &c.rms_scaling));
  return mxu_json_applied(
      where, node,
      mxu_apply_layer_normalization(node->model, &c, node->inputs[0]));
}

static mxu_status read_layer_norm(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_norm(where, config, node, name, 0);
}

/* Keras 3's RMSNormalization: its scale always, epsilon 1e-6 by default. */
static mxu_status read_rms_norm(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  float epsilon = 1e-6f;
  MXU_TRY(mxu_json_last_axis(where, config, node));
  MXU_TRY(
      mxu_json_float(where, config, "epsilon", MXU_JSON_OPTIONAL, &epsilon));
  return mxu_json_applied(
      where, node,
      mxu_apply_rms_normalization(node->model, name, epsilon, node->inputs[0]));
}

static mxu_status read_group_norm(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_norm(where, config, node, name, 1);
}

/* tf.keras 2's LayerNormalization has no rms_scaling: written there only
 * when set (for Keras 3 to read the .h5). */
static void write_norm(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  if (is_group(layer)) mxu_json_put_number(out, config, "groups", c->groups);
  mxu_json_put_number(out, config, "axis", -1);
  mxu_json_put_float(out, config, "epsilon", c->epsilon);
  if (is_rms(layer)) return;
  mxu_json_put_bool(out, config, "center", c->center);
  mxu_json_put_bool(out, config, "scale", c->scale);
  if (!is_group(layer) && (out->keras3 || c->rms_scaling))
    mxu_json_put_bool(out, config, "rms_scaling", c->rms_scaling);
  mxu_config_put_initializers(out, config, "beta", &c->beta.initializer,
                              mxu_init_zeros(), "gamma", &c->gamma.initializer,
                              mxu_init_ones());
  mxu_config_put_penalties(out, config, "beta", &c->beta, "gamma", &c->gamma,
                           0);
}

/* The sets as dims of their own: x as (batch, positions, groups, width),
 * LayerNormalization's statistics over the width (one group), a group's
 * over the positions and the width. */
static mxu_hlo_value layer_norm_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape xs = *mxu_hlo_shape_of(h, x);
  int g = is_group(layer), groups = g ? c->groups : 1, ch = channels(layer);
  int64_t dims[4] = {e->batch, mxu_shape_count(&layer->in_shape) / ch, groups,
                     ch / groups};
  const mxu_hlo_shape ts = mxu_hlo_shape_make(xs.dtype, 4, dims);
  static const int64_t group_over[2] = {1, 3}, group_keep[2] = {0, 2},
                       layer_over[1] = {3}, layer_keep[3] = {0, 1, 2};
  const int64_t *over = g ? group_over : layer_over;
  const int64_t *keep = g ? group_keep : layer_keep;
  int count = g ? 2 : 1;
  double n = (double)dims[3] * (g ? (double)dims[1] : 1.0);
  mxu_hlo_value t = mxu_hlo_reshape(h, x, ts), centered = t;
  if (centers_variance(layer)) {
    mxu_hlo_value sum = mxu_hlo_reduce(h, t, MXU_HLO_SUM, count, over);
    mxu_hlo_value mean =
        mxu_hlo_binary(h, MXU_HLO_DIVIDE, sum, mxu_hlo_full_like(h, sum, n));
    centered = mxu_hlo_binary(h, MXU_HLO_SUBTRACT, t,
                              mxu_hlo_broadcast(h, mean, ts, keep));
  }
  mxu_hlo_value squares =
      mxu_hlo_reduce(h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centered, centered),
                     MXU_HLO_SUM, count, over);
  mxu_hlo_value var = mxu_hlo_binary(h, MXU_HLO_DIVIDE, squares,
                                     mxu_hlo_full_like(h, squares, n));
  mxu_hlo_value inv =
      mxu_hlo_unary(h, MXU_HLO_RSQRT,
                    mxu_hlo_binary(h, MXU_HLO_ADD, var,
                                   mxu_hlo_full_like(h, var, c->epsilon)));
  mxu_hlo_value y = mxu_hlo_reshape(
      h,
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centers_values(layer) ? centered : t,
                     mxu_hlo_broadcast(h, inv, ts, keep)),
      xs);
  int k = 0;
  if (has_gamma(c))
    y = mxu_hlo_binary(h, MXU_HLO_MULTIPLY, y,
                       mxu_hlo_broadcast_to(h, e->w[k++], xs));
  if (has_beta(c)) y = mxu_emit_bias(e, y, e->w[k]);
  return y;
}

#define NORM_CLASS(symbol, keras_name, reader, keys)                           \
  const mxu_layer_class symbol = {                                             \
      .output_mask = mxu_input_mask,                                           \
      .class_name = keras_name,                                                \
      .flops = layer_norm_flops,                                               \
      .config_keys = keys,                                                     \
      .read_config = reader,                                                   \
      .write_config = write_norm,                                              \
      .min_inputs = 1,                                                         \
      .max_inputs = 1,                                                         \
      .infer = layer_norm_infer,                                               \
      .declare = layer_norm_declare,                                           \
      .plan = mxu_no_plan,                                                     \
      .forward = layer_norm_forward,                                           \
      .backward = layer_norm_backward,                                         \
      .emit = layer_norm_emit,                                                 \
  }

NORM_CLASS(mxu_layer_normalization_class, "LayerNormalization", read_layer_norm,
           layer_norm_keys);
NORM_CLASS(mxu_group_normalization_class, "GroupNormalization", read_group_norm,
           group_norm_keys);
NORM_CLASS(mxu_rms_normalization_class, "RMSNormalization", read_rms_norm,
           rms_norm_keys);
