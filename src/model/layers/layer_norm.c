/* layer_norm.c — LayerNormalization and GroupNormalization over the last
 * (channel) axis. Both normalise sets of values with their own mean and
 * biased variance, then scale and shift per channel: LayerNormalization's
 * sets are each position's channels, GroupNormalization's each sample's
 * group of channels at every position. Statistics in double; plain loops.
 * Backward: dx = inv / n * (n dxhat - sum(dxhat) - xhat sum(dxhat xhat)),
 * dxhat = dy * gamma; dgamma = sum(dy xhat), dbeta = sum(dy) per channel. */
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

/* Keras' order: gamma, then beta. */
static int layer_norm_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  int64_t ch = channels(layer);
  mxu_shape shape = mxu_shape_make(1, &ch);
  int n = 0;
  if (c->scale)
    decls[n++] = mxu_weight_decl("gamma", shape, &c->gamma, mxu_init_ones());
  if (c->center)
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

/* Set k's mean and 1 / sqrt(biased variance + epsilon), in double. */
static void set_stats(const norm_sets *s, int64_t k, const float *x,
                      float epsilon, double *mean, double *inv) {
  int first;
  const float *set = x + set_base(s, k, &first);
  double n = (double)(s->positions * s->width), sum = 0.0, squares = 0.0;
  for (int64_t p = 0; p < s->positions; p++)
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
  const float *gamma = c->scale ? run->w[0] : NULL;
  const float *beta = c->center ? run->w[c->scale ? 1 : 0] : NULL;
  norm_sets s = sets_of(layer);
  for (int64_t k = 0; k < s.count; k++) {
    double mean, inv;
    int first;
    set_stats(&s, k, run->x, c->epsilon, &mean, &inv);
    int64_t base = set_base(&s, k, &first);
    for (int64_t p = 0; p < s.positions; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double v = (run->x[i] - mean) * inv;
        if (gamma) v *= gamma[first + j];
        if (beta) v += beta[first + j];
        run->y[i] = (float)v;
      }
  }
}

static void layer_norm_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  const float *gamma = c->scale ? run->w[0] : NULL;
  float *dgamma = c->scale ? run->dw[0] : NULL;
  float *dbeta = c->center ? run->dw[c->scale ? 1 : 0] : NULL;
  norm_sets s = sets_of(layer);
  double n = (double)(s.positions * s.width);
  if (dgamma) memset(dgamma, 0, (size_t)channels(layer) * sizeof(float));
  if (dbeta) memset(dbeta, 0, (size_t)channels(layer) * sizeof(float));
  for (int64_t k = 0; k < s.count; k++) {
    double mean, inv, sum_d = 0.0, sum_dx = 0.0;
    int first;
    set_stats(&s, k, run->x, c->epsilon, &mean, &inv);
    int64_t base = set_base(&s, k, &first);
    for (int64_t p = 0; p < s.positions; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double xhat = (run->x[i] - mean) * inv, dy = run->dy[i];
        double dxhat = gamma ? dy * gamma[first + j] : dy;
        sum_d += dxhat;
        sum_dx += dxhat * xhat;
        if (dgamma) dgamma[first + j] += (float)(dy * xhat);
        if (dbeta) dbeta[first + j] += (float)dy;
      }
    for (int64_t p = 0; p < s.positions && run->need_dx; p++)
      for (int j = 0; j < s.width; j++) {
        int64_t i = base + p * s.stride + j;
        double xhat = (run->x[i] - mean) * inv, dy = run->dy[i];
        double dxhat = gamma ? dy * gamma[first + j] : dy;
        run->dx[i] = (float)(inv / n * (n * dxhat - sum_d - xhat * sum_dx));
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
 * The last axis only (-1, or its index counting the batch); Keras 3's
 * rms_scaling must be false. */

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
  MXU_TRY(mxu_json_require_false(where, config, "rms_scaling"));
  return mxu_json_applied(
      where, node,
      mxu_apply_layer_normalization(node->model, &c, node->inputs[0]));
}

static mxu_status read_layer_norm(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_norm(where, config, node, name, 0);
}

static mxu_status read_group_norm(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_norm(where, config, node, name, 1);
}

static void write_norm(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  const mxu_layer_norm_config *c = &layer->config.layer_norm;
  if (is_group(layer)) mxu_json_put_number(out, config, "groups", c->groups);
  mxu_json_put_number(out, config, "axis", -1);
  mxu_json_put_float(out, config, "epsilon", c->epsilon);
  mxu_json_put_bool(out, config, "center", c->center);
  mxu_json_put_bool(out, config, "scale", c->scale);
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
  mxu_hlo_value t = mxu_hlo_reshape(h, x, ts);
  mxu_hlo_value sum = mxu_hlo_reduce(h, t, MXU_HLO_SUM, count, over);
  mxu_hlo_value mean =
      mxu_hlo_binary(h, MXU_HLO_DIVIDE, sum, mxu_hlo_full_like(h, sum, n));
  mxu_hlo_value centered = mxu_hlo_binary(h, MXU_HLO_SUBTRACT, t,
                                          mxu_hlo_broadcast(h, mean, ts, keep));
  mxu_hlo_value squares =
      mxu_hlo_reduce(h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centered, centered),
                     MXU_HLO_SUM, count, over);
  mxu_hlo_value var = mxu_hlo_binary(h, MXU_HLO_DIVIDE, squares,
                                     mxu_hlo_full_like(h, squares, n));
  mxu_hlo_value inv =
      mxu_hlo_unary(h, MXU_HLO_RSQRT,
                    mxu_hlo_binary(h, MXU_HLO_ADD, var,
                                   mxu_hlo_full_like(h, var, c->epsilon)));
  mxu_hlo_value y =
      mxu_hlo_reshape(h,
                      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centered,
                                     mxu_hlo_broadcast(h, inv, ts, keep)),
                      xs);
  int k = 0;
  if (c->scale)
    y = mxu_hlo_binary(h, MXU_HLO_MULTIPLY, y,
                       mxu_hlo_broadcast_to(h, e->w[k++], xs));
  if (c->center) y = mxu_emit_bias(e, y, e->w[k]);
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
