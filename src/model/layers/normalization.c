/* normalization.c — BatchNormalization over the last axis: batch
 * statistics in training (each replica's own, Keras' default), moving
 * statistics in inference. After a step the moving statistics take the
 * mean over replicas of what each replica's update would give, as a
 * MEAN-aggregated mirrored variable does in TensorFlow. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

enum { SCRATCH_STATS, SCRATCH_CONST, SCRATCH_DISCARD, SCRATCH_SYNC };

static mxu_status batchnorm_infer(mxu_layer *layer) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  if (layer->in_shape.rank < 1)
    return mxu_fail(MXU_ERR_SHAPE, "%s: input has no dimensions", layer->name);
  if (!(c->momentum >= 0.0f && c->momentum <= 1.0f) || !(c->epsilon > 0.0f))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: momentum must be in [0, 1] and epsilon positive",
                    layer->name);
  layer->out_shape = layer->in_shape;
  return MXU_OK;
}

static int batchnorm_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  mxu_shape shape =
      mxu_shape_make(1, &layer->in_shape.dims[layer->in_shape.rank - 1]);
  int n = 0;
  if (c->scale)
    decls[n++] = mxu_weight_decl("gamma", shape, &c->gamma, mxu_init_ones());
  if (c->center)
    decls[n++] = mxu_weight_decl("beta", shape, &c->beta, mxu_init_zeros());
  decls[n++] = (mxu_param_decl){
      .name = "moving_mean",
      .shape = shape,
      .init = mxu_init_or(&c->moving_mean_initializer, mxu_init_zeros())};
  decls[n++] = (mxu_param_decl){
      .name = "moving_variance",
      .shape = shape,
      .init = mxu_init_or(&c->moving_variance_initializer, mxu_init_ones())};
  return n;
}

static int channels(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static int64_t rows(const mxu_layer *layer) {
  return (int64_t)layer->compiled->batch * mxu_shape_count(&layer->in_shape) /
         channels(layer);
}

static mxu_status batchnorm_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  (void)batch;
  size_t c_bytes = (size_t)channels(layer) * sizeof(float);
  /* The batch mean then the batch variance: this replica's statistics. */
  layer->compiled->scratch[SCRATCH_STATS] =
      mxu_arena_reserve(layout, 2 * c_bytes);
  layer->compiled->stats_offset = layer->compiled->scratch[SCRATCH_STATS];
  /* ones then zeros, standing in for gamma or beta when scale or center is
   * off; and a sink for their unused gradients. */
  layer->compiled->scratch[SCRATCH_CONST] =
      mxu_arena_reserve(layout, 2 * c_bytes);
  layer->compiled->scratch[SCRATCH_DISCARD] =
      mxu_arena_reserve(layout, 2 * c_bytes);
  /* Synchronized: what this replica shares with the others. */
  layer->compiled->scratch[SCRATCH_SYNC] =
      mxu_arena_reserve(layout, 2 * c_bytes);
  layer->compiled->sync_offset = layer->compiled->scratch[SCRATCH_SYNC];
  mxu_batchnorm_desc d = {
      rows(layer),
      channels(layer),
      layer->config.batchnorm.epsilon,
      layer->compiled->fused_layers == 1
          ? mxu_layer_activation_kind(layer->compiled->fused[0])
          : MXU_LINEAR,
      (int)layer->compiled->x_bf16,
      layer->compiled->y_bf16,
      (int)layer->compiled->dx_bf16,
      layer->compiled->dy_bf16};
  return backend->batchnorm_create(&d, &layer->compiled->ops[0]);
}

typedef struct bn_views {
  float *gamma, *beta, *moving_mean, *moving_var;
  float *dgamma, *dbeta, *mean, *var;
} bn_views;

static bn_views views(const mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  int channel_count = channels(layer), i = 0;
  float *constants =
      (float *)(void *)(run->arena + layer->compiled->scratch[SCRATCH_CONST]);
  float *discard =
      (float *)(void *)(run->arena + layer->compiled->scratch[SCRATCH_DISCARD]);
  for (int k = 0; k < channel_count; k++) {
    constants[k] = 1.0f;
    constants[channel_count + k] = 0.0f;
  }
  bn_views v;
  v.gamma = c->scale ? run->w[i] : constants;
  v.dgamma = c->scale ? run->dw[i++] : discard;
  v.beta = c->center ? run->w[i] : constants + channel_count;
  v.dbeta = c->center ? run->dw[i++] : discard + channel_count;
  v.moving_mean = run->w[i++];
  v.moving_var = run->w[i];
  v.mean =
      (float *)(void *)(run->arena + layer->compiled->scratch[SCRATCH_STATS]);
  v.var = v.mean + channel_count;
  return v;
}

static void batchnorm_forward(mxu_layer *layer, const mxu_layer_run *run) {
  bn_views v = views(layer, run);
  if (!run->training) {
    run->backend->batchnorm_forward_inference(run->ops[0], run->x, v.gamma,
                                              v.beta, v.moving_mean,
                                              v.moving_var, run->y);
    return;
  }
  run->backend->batchnorm_forward_training(run->ops[0], run->x, v.gamma, v.beta,
                                           run->y, v.mean, v.var);
}

static int batchnorm_stats_floats(const mxu_layer *layer) {
  return 2 * channels(layer);
}

/* Whether tf.keras 2.x runs its fused kernel, which feeds the moving
 * variance the unbiased batch variance: on 4-D and 5-D inputs (images and
 * volumes), unsynchronized. */
static int unbiased_moving_variance(const mxu_layer *layer) {
  int rank = layer->in_shape.rank;
  return (rank == 3 || rank == 4) && !layer->config.batchnorm.synchronized;
}

/* moving = momentum * moving + (1 - momentum) * mean over replicas of the
 * batch statistic, its variance unbiased where tf.keras 2.x's is
 * (unbiased_moving_variance). Replicas are summed in their logical
 * order. */
static void batchnorm_update_state(mxu_layer *layer, const float *const *stats,
                                   int replicas, float *const *w) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  int first = c->scale + c->center, channel_count = channels(layer);
  float *moving_mean = w[first], *moving_var = w[first + 1];
  double n = (double)rows(layer);
  float unbias =
      n > 1 && unbiased_moving_variance(layer) ? (float)(n / (n - 1)) : 1.0f;
  float momentum = c->momentum;
  for (int k = 0; k < channel_count; k++) {
    float mean = 0.0f, var = 0.0f;
    for (int r = 0; r < replicas; r++) {
      mean += stats[r][k];
      var += stats[r][channel_count + k];
    }
    mean /= (float)replicas;
    var /= (float)replicas;
    moving_mean[k] = moving_mean[k] * momentum + mean * (1.0f - momentum);
    moving_var[k] = moving_var[k] * momentum + var * unbias * (1.0f - momentum);
  }
}

static void batchnorm_backward(mxu_layer *layer, const mxu_layer_run *run) {
  bn_views v = views(layer, run);
  /* dx is always computed: the kernel gives all three gradients at once,
   * and run->dx is a real buffer even for the first layer. */
  run->backend->batchnorm_backward(run->ops[0], run->x, run->y, run->dy,
                                   v.gamma, v.beta, v.mean, v.var, run->dx,
                                   v.dgamma, v.dbeta);
}

/* ---- synchronized: statistics over the global batch ------------------
 * Each replica shares its batch mean and variance; every replica then
 * combines all of them in the same order (so all agree bit for bit) and
 * normalises with the global ones. Backward shares the per-channel sums of
 * dy and dy * xhat the same way. */

static int batchnorm_sync_floats(const mxu_layer *layer) {
  return layer->config.batchnorm.synchronized ? 2 * channels(layer) : 0;
}

static float *sync_block(const mxu_layer *layer, const mxu_layer_run *run) {
  return (float *)(void *)(run->arena + layer->compiled->sync_offset);
}

static void batchnorm_forward_local(mxu_layer *layer,
                                    const mxu_layer_run *run) {
  int c = channels(layer);
  int64_t n = rows(layer);
  float *mean = sync_block(layer, run), *var = mean + c;
  for (int k = 0; k < c; k++) {
    double sum = 0, sq = 0;
    for (int64_t r = 0; r < n; r++) sum += run->x[r * c + k];
    double m = sum / (double)n;
    for (int64_t r = 0; r < n; r++) {
      double d = run->x[r * c + k] - m;
      sq += d * d;
    }
    mean[k] = (float)m;
    var[k] = (float)(sq / (double)n);
  }
}

/* Equal slices: the global mean is the mean of the means, the global
 * variance the mean of (variance + squared distance to the global mean). */
static void batchnorm_forward_global(mxu_layer *layer, const mxu_layer_run *run,
                                     const float *const *all, int replicas) {
  bn_views v = views(layer, run);
  int c = channels(layer);
  for (int k = 0; k < c; k++) {
    double mean = 0, var = 0;
    for (int r = 0; r < replicas; r++) mean += all[r][k];
    mean /= replicas;
    for (int r = 0; r < replicas; r++) {
      double d = all[r][k] - mean;
      var += all[r][c + k] + d * d;
    }
    v.mean[k] = (float)mean;
    v.var[k] = (float)(var / replicas);
  }
  run->backend->batchnorm_forward_inference(run->ops[0], run->x, v.gamma,
                                            v.beta, v.mean, v.var, run->y);
}

static void batchnorm_backward_local(mxu_layer *layer,
                                     const mxu_layer_run *run) {
  bn_views v = views(layer, run);
  int c = channels(layer);
  int64_t n = rows(layer);
  float *sum_dy = sync_block(layer, run), *sum_dy_xhat = sum_dy + c;
  float epsilon = layer->config.batchnorm.epsilon;
  for (int k = 0; k < c; k++) {
    double inv = 1.0 / sqrt((double)v.var[k] + epsilon), a = 0, b = 0;
    for (int64_t r = 0; r < n; r++) {
      double dy = run->dy[r * c + k];
      a += dy;
      b += dy * (run->x[r * c + k] - v.mean[k]) * inv;
    }
    sum_dy[k] = (float)a;
    sum_dy_xhat[k] = (float)b;
  }
}

/* dx = gamma / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)), means
 * over the global batch; dgamma and dbeta are this replica's sums, which
 * the all-reduce adds up. */
static void batchnorm_backward_global(mxu_layer *layer,
                                      const mxu_layer_run *run,
                                      const float *const *all, int replicas) {
  bn_views v = views(layer, run);
  int c = channels(layer);
  int64_t n = rows(layer);
  const float *own = sync_block(layer, run);
  float epsilon = layer->config.batchnorm.epsilon;
  double total = (double)n * replicas;
  for (int k = 0; k < c; k++) {
    double mean_dy = 0, mean_dy_xhat = 0;
    for (int r = 0; r < replicas; r++) {
      mean_dy += all[r][k];
      mean_dy_xhat += all[r][c + k];
    }
    mean_dy /= total;
    mean_dy_xhat /= total;
    double inv = 1.0 / sqrt((double)v.var[k] + epsilon);
    for (int64_t r = 0; r < n; r++) {
      double xhat = (run->x[r * c + k] - v.mean[k]) * inv;
      run->dx[r * c + k] =
          (float)(v.gamma[k] * inv *
                  (run->dy[r * c + k] - mean_dy - xhat * mean_dy_xhat));
    }
    v.dbeta[k] = own[k];
    v.dgamma[k] = own[c + k];
  }
}

/* ---- BatchNormalization --------------------------------------------------
 */

static const char *const batchnorm_keys[] = {"axis",
                                             "momentum",
                                             "epsilon",
                                             "center",
                                             "scale",
                                             "beta_initializer",
                                             "gamma_initializer",
                                             "moving_mean_initializer",
                                             "moving_variance_initializer",
                                             "beta_regularizer",
                                             "gamma_regularizer",
                                             "beta_constraint",
                                             "gamma_constraint",
                                             "renorm",
                                             "renorm_clipping",
                                             "renorm_momentum",
                                             "virtual_batch_size",
                                             "synchronized",
                                             "fused",
                                             NULL};

/* mxu normalises over the last axis only: -1, or its index counting the
 * batch axis as tf.keras writes it once built ([3] for images). */
static mxu_status read_batchnorm_axis(const mxu_json_where *where,
                                      const cJSON *config,
                                      const mxu_json_node *node) {
  const cJSON *v = mxu_json_get(config, "axis");
  if (!v) return MXU_OK;
  const cJSON *axis =
      cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 ? v->child : v;
  int is_int = cJSON_IsNumber(axis) && axis->valuedouble >= -1e6 &&
               axis->valuedouble <= 1e6 &&
               axis->valuedouble == (double)(int)axis->valuedouble;
  if (!is_int && !cJSON_IsArray(v)) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "axis must be an integer or a list of integers, got "
                         "%s",
                         text);
  }
  return mxu_json_last_axis(where, config, node);
}

static mxu_status read_batchnorm(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.name = name;
  MXU_TRY(read_batchnorm_axis(where, config, node));
  MXU_TRY(mxu_json_float(where, config, "momentum", MXU_JSON_OPTIONAL,
                         &bn.momentum));
  MXU_TRY(
      mxu_json_float(where, config, "epsilon", MXU_JSON_OPTIONAL, &bn.epsilon));
  MXU_TRY(mxu_json_bool(where, config, "center", &bn.center));
  MXU_TRY(mxu_json_bool(where, config, "scale", &bn.scale));
  MXU_TRY(mxu_config_weight_options(where, config, "beta", &bn.beta));
  MXU_TRY(mxu_config_weight_options(where, config, "gamma", &bn.gamma));
  MXU_TRY(mxu_json_initializer(where, config, "moving_mean_initializer",
                               &bn.moving_mean_initializer));
  MXU_TRY(mxu_json_initializer(where, config, "moving_variance_initializer",
                               &bn.moving_variance_initializer));
  MXU_TRY(mxu_json_require_false(where, config, "renorm"));
  MXU_TRY(mxu_json_require_null(where, config, "virtual_batch_size"));
  MXU_TRY(mxu_json_bool(where, config, "synchronized", &bn.synchronized));
  return mxu_json_applied(
      where, node,
      mxu_apply_batch_normalization(node->model, &bn, node->inputs[0]));
}

static void write_batchnorm(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_batchnorm_config *bn = &layer->config.batchnorm;
  if (out->keras3) {
    mxu_json_put_number(out, config, "axis", -1);
  } else {
    /* tf.keras turns axis -1 into [last index] when the layer is built
     * (inside a TimeDistributed, on a step's shape). */
    int last = layer->in_shape.rank - (layer->wrapped[0] != 0);
    mxu_json_put(out, config, "axis", cJSON_CreateIntArray(&last, 1));
  }
  mxu_json_put_float(out, config, "momentum", bn->momentum);
  mxu_json_put_float(out, config, "epsilon", bn->epsilon);
  mxu_json_put_bool(out, config, "center", bn->center);
  mxu_json_put_bool(out, config, "scale", bn->scale);
  mxu_config_put_initializers(out, config, "beta", &bn->beta.initializer,
                              mxu_init_zeros(), "gamma", &bn->gamma.initializer,
                              mxu_init_ones());
  mxu_config_put_initializers(
      out, config, "moving_mean", &bn->moving_mean_initializer,
      mxu_init_zeros(), "moving_variance", &bn->moving_variance_initializer,
      mxu_init_ones());
  mxu_config_put_penalties(out, config, "beta", &bn->beta, "gamma", &bn->gamma,
                           0);
  /* tf.keras knows the key since 2.12; older ones would reject it. */
  if (out->keras3 || bn->synchronized)
    mxu_json_put_bool(out, config, "synchronized", bn->synchronized);
}

/* Per element: forward mean 1, variance 3, normalise 2, scale and shift
 * 2; backward sums of dy and dy * xhat 3, xhat 2, dx 4 (the kernel always
 * computes dx, even for the first layer). Per channel and step the moving
 * statistics take 2 adds per replica and 8 more, shared by the batch. */
static double batchnorm_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  double state = (double)channels(layer) * (2.0 * step->replicas + 8.0);
  return (double)mxu_shape_count(&layer->in_shape) * (8.0 + 9.0) +
         state / step->batch;
}

/* gamma, then beta, as the layer has them; k counts the weights used. */
static mxu_hlo_value scale_shift(const mxu_layer *layer, mxu_emit *e,
                                 mxu_hlo_value y, int *k) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  if (c->scale)
    y = mxu_hlo_binary(
        e->h, MXU_HLO_MULTIPLY, y,
        mxu_hlo_broadcast_to(e->h, e->w[(*k)++], *mxu_hlo_shape_of(e->h, y)));
  if (c->center) y = mxu_emit_bias(e, y, e->w[(*k)++]);
  return y;
}

/* Inference: the moving statistics. */
static mxu_hlo_value batchnorm_inference(const mxu_layer *layer, mxu_emit *e) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  int k = (c->scale != 0) + (c->center != 0);
  mxu_hlo_value inv = mxu_hlo_unary(
      h, MXU_HLO_RSQRT,
      mxu_hlo_binary(h, MXU_HLO_ADD, e->w[k + 1],
                     mxu_hlo_full_like(h, e->w[k + 1], c->epsilon)));
  mxu_hlo_value y =
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                     mxu_hlo_binary(h, MXU_HLO_SUBTRACT, x,
                                    mxu_hlo_broadcast_to(h, e->w[k], s)),
                     mxu_hlo_broadcast_to(h, inv, s));
  k = 0;
  return scale_shift(layer, e, y, &k);
}

/* Training: normalised by this replica's batch statistics; the moving
 * ones follow their mean over replicas, the variance unbiased as tf.keras'
 * fused kernel for images (batchnorm_update_state). */
static mxu_hlo_value batchnorm_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  mxu_hlo *h = e->h;
  if (c->synchronized && e->training) {
    if (h->status == MXU_OK)
      h->status = mxu_fail(MXU_ERR_UNSUPPORTED,
                           "pjrt: layer '%s': synchronized BatchNormalization "
                           "is not emitted yet",
                           layer->name);
    return 0;
  }
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  int k = 0;
  if (!e->training) return batchnorm_inference(layer, e);
  int64_t over[MXU_HLO_MAX_RANK], last = s.rank - 1, n = 1;
  for (int d = 0; d < last; d++) over[d] = d, n *= s.dims[d];
  mxu_hlo_value mean = mxu_hlo_binary(
      h, MXU_HLO_DIVIDE, mxu_hlo_reduce(h, x, MXU_HLO_SUM, (int)last, over),
      mxu_hlo_constant(h, mxu_hlo_shape_make(MXU_HLO_F32, 1, &s.dims[last]),
                       (double)n));
  mxu_hlo_value centered = mxu_hlo_binary(h, MXU_HLO_SUBTRACT, x,
                                          mxu_hlo_broadcast(h, mean, s, &last));
  mxu_hlo_value var = mxu_hlo_binary(
      h, MXU_HLO_DIVIDE,
      mxu_hlo_reduce(h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centered, centered),
                     MXU_HLO_SUM, (int)last, over),
      mxu_hlo_full_like(h, mean, (double)n));
  mxu_hlo_value inv =
      mxu_hlo_unary(h, MXU_HLO_RSQRT,
                    mxu_hlo_binary(h, MXU_HLO_ADD, var,
                                   mxu_hlo_full_like(h, var, c->epsilon)));
  mxu_hlo_value y = mxu_hlo_binary(h, MXU_HLO_MULTIPLY, centered,
                                   mxu_hlo_broadcast(h, inv, s, &last));
  y = scale_shift(layer, e, y, &k);
  /* The moving statistics follow each replica's, averaged. */
  double unbias =
      n > 1 && unbiased_moving_variance(layer) ? (double)n / (n - 1) : 1;
  e->moving[k] = (mxu_emit_moving){mean, c->momentum, 1.0f};
  e->moving[k + 1] = (mxu_emit_moving){var, c->momentum, (float)unbias};
  return y;
}

const mxu_layer_class mxu_batch_normalization_class = {
    .output_mask = mxu_input_mask,
    .positionwise = 1, /* TimeDistributed's statistics span the steps too */
    .class_name = "BatchNormalization",
    .emit = batchnorm_emit,
    .flops = batchnorm_flops,
    .config_keys = batchnorm_keys,
    .read_config = read_batchnorm,
    .write_config = write_batchnorm,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = batchnorm_infer,
    .declare = batchnorm_declare,
    .plan = batchnorm_plan,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .stats_floats = batchnorm_stats_floats,
    .update_state = batchnorm_update_state,
    .sync_floats = batchnorm_sync_floats,
    .forward_local = batchnorm_forward_local,
    .forward_global = batchnorm_forward_global,
    .backward_local = batchnorm_backward_local,
    .backward_global = batchnorm_backward_global,
};

/* ---- UnitNormalization ------------------------------------------------------
 * Each row of the last axis scaled to unit length, as tf.math.l2_normalize
 * and Keras 3's normalize compute it: x * rsqrt(max(sum(x^2), 1e-12)).
 * Backward: r * (dy - y * sum(dy * y)) where the sum cleared the floor,
 * r * dy where the floor held. */

#define UNIT_EPSILON 1e-12

static const char *const unit_normalization_keys[] = {"axis", NULL};

static mxu_status read_unit_normalization(const mxu_json_where *where,
                                          const cJSON *config,
                                          mxu_json_node *node,
                                          const char *name) {
  MXU_TRY(mxu_json_last_axis(where, config, node));
  return mxu_json_applied(
      where, node,
      mxu_apply_unit_normalization(node->model, name, node->inputs[0]));
}

static void write_unit_normalization(mxu_json_out *out, const mxu_layer *layer,
                                     cJSON *config) {
  (void)layer;
  mxu_json_put_number(out, config, "axis", -1);
}

static int last_axis(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static int64_t unit_rows(const mxu_layer *layer) {
  return layer->compiled->batch * mxu_shape_count(&layer->in_shape) /
         last_axis(layer);
}

/* 1 / sqrt(max(sum of squares, epsilon)) of a row; *floored when the
 * epsilon held. */
static double unit_scale(const float *x, int n, int *floored) {
  double sum = 0.0;
  for (int j = 0; j < n; j++) sum += (double)x[j] * x[j];
  *floored = sum < UNIT_EPSILON;
  return 1.0 / sqrt(*floored ? UNIT_EPSILON : sum);
}

static void unit_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int n = last_axis(layer), floored;
  for (int64_t r = 0; r < unit_rows(layer); r++) {
    double scale = unit_scale(run->x + r * n, n, &floored);
    for (int j = 0; j < n; j++)
      run->y[r * n + j] = (float)(run->x[r * n + j] * scale);
  }
}

static void unit_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int n = last_axis(layer), floored;
  for (int64_t r = 0; r < unit_rows(layer); r++) {
    const float *y = run->y + r * n, *dy = run->dy + r * n;
    double scale = unit_scale(run->x + r * n, n, &floored), dot = 0.0;
    for (int j = 0; j < n && !floored; j++) dot += (double)dy[j] * y[j];
    for (int j = 0; j < n; j++)
      run->dx[r * n + j] = (float)(scale * (dy[j] - y[j] * dot));
  }
}

static double unit_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  return (double)mxu_shape_count(&layer->in_shape) *
         (step->need_dx ? 7.0 : 3.0);
}

/* x / sqrt(max(sum of squares, epsilon)) along the last axis. */
static mxu_hlo_value unit_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  int64_t last = s.rank - 1, keep[MXU_HLO_MAX_RANK];
  for (int d = 0; d < last; d++) keep[d] = d;
  mxu_hlo_value sum = mxu_hlo_reduce(
      h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, x, x), MXU_HLO_SUM, 1, &last);
  mxu_hlo_value scale =
      mxu_hlo_unary(h, MXU_HLO_RSQRT,
                    mxu_hlo_binary(h, MXU_HLO_MAXIMUM, sum,
                                   mxu_hlo_full_like(h, sum, UNIT_EPSILON)));
  (void)layer;
  return mxu_hlo_binary(h, MXU_HLO_MULTIPLY, x,
                        mxu_hlo_broadcast(h, scale, s, keep));
}

const mxu_layer_class mxu_unit_normalization_class = {
    .output_mask = mxu_input_mask,
    .class_name = "UnitNormalization",
    .flops = unit_flops,
    .config_keys = unit_normalization_keys,
    .read_config = read_unit_normalization,
    .write_config = write_unit_normalization,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = mxu_same_shape_infer,
    .plan = mxu_no_plan,
    .forward = unit_forward,
    .backward = unit_backward,
    .emit = unit_emit,
};
