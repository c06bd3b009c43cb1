/* normalization.c — BatchNormalization over the last axis: batch
 * statistics in training (each replica's own, Keras' default), moving
 * statistics in inference. After a step the moving statistics take the
 * mean over replicas of what each replica's update would give, as a
 * MEAN-aggregated mirrored variable does in TensorFlow. */
#include "model/layers/layers.h"

#include <string.h>

enum { SCRATCH_STATS, SCRATCH_CONST, SCRATCH_DISCARD };

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
    decls[n++] = (mxu_param_decl){"gamma", shape, MXU_INIT_ONES, 1, 0, 0};
  if (c->center)
    decls[n++] = (mxu_param_decl){"beta", shape, MXU_INIT_ZEROS, 1, 0, 0};
  decls[n++] = (mxu_param_decl){"moving_mean", shape, MXU_INIT_ZEROS, 0, 0, 0};
  decls[n++] =
      (mxu_param_decl){"moving_variance", shape, MXU_INIT_ONES, 0, 0, 0};
  return n;
}

static int channels(const mxu_layer *layer) {
  return (int)layer->in_shape.dims[layer->in_shape.rank - 1];
}

static int64_t rows(const mxu_layer *layer) {
  return (int64_t)layer->batch * mxu_shape_count(&layer->in_shape) /
         channels(layer);
}

static mxu_status batchnorm_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  (void)batch;
  size_t c_bytes = (size_t)channels(layer) * sizeof(float);
  /* The batch mean then the batch variance: this replica's statistics. */
  layer->scratch[SCRATCH_STATS] = mxu_arena_reserve(layout, 2 * c_bytes);
  layer->stats_offset = layer->scratch[SCRATCH_STATS];
  /* ones then zeros, standing in for gamma or beta when scale or center is
   * off; and a sink for their unused gradients. */
  layer->scratch[SCRATCH_CONST] = mxu_arena_reserve(layout, 2 * c_bytes);
  layer->scratch[SCRATCH_DISCARD] = mxu_arena_reserve(layout, 2 * c_bytes);
  mxu_batchnorm_desc d = {rows(layer), channels(layer),
                          layer->config.batchnorm.epsilon};
  return backend->batchnorm_create(&d, &layer->ops[0]);
}

typedef struct bn_views {
  float *gamma, *beta, *moving_mean, *moving_var;
  float *dgamma, *dbeta, *mean, *var;
} bn_views;

static bn_views views(const mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  int channel_count = channels(layer), i = 0;
  float *constants =
      (float *)(void *)(run->arena + layer->scratch[SCRATCH_CONST]);
  float *discard =
      (float *)(void *)(run->arena + layer->scratch[SCRATCH_DISCARD]);
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
  v.mean = (float *)(void *)(run->arena + layer->scratch[SCRATCH_STATS]);
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

/* moving = momentum * moving + (1 - momentum) * mean over replicas of the
 * batch statistic; tf.keras 2.x feeds the moving variance the unbiased
 * batch variance on 4-D inputs (its fused kernel), the biased one
 * otherwise. Replicas are summed in their logical order. */
static void batchnorm_update_state(mxu_layer *layer, const float *const *stats,
                                   int replicas, float *const *w) {
  const mxu_batchnorm_config *c = &layer->config.batchnorm;
  int first = c->scale + c->center, channel_count = channels(layer);
  float *moving_mean = w[first], *moving_var = w[first + 1];
  double n = (double)rows(layer);
  float unbias =
      n > 1 && layer->in_shape.rank == 3 ? (float)(n / (n - 1)) : 1.0f;
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
  run->backend->batchnorm_backward(run->ops[0], run->x, run->dy, v.gamma,
                                   v.mean, v.var, run->dx, v.dgamma, v.dbeta);
}

const mxu_layer_class mxu_batch_normalization_class = {
    .class_name = "BatchNormalization",
    .infer = batchnorm_infer,
    .declare = batchnorm_declare,
    .plan = batchnorm_plan,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .stats_floats = batchnorm_stats_floats,
    .update_state = batchnorm_update_state,
};
