/* normalization.c — BatchNormalization over the last axis: batch
 * statistics in training (feeding the moving ones, tf.keras 2.x style),
 * moving statistics in inference. */
#include "model/layers/layers.h"

#include <string.h>

enum { SCRATCH_MEAN, SCRATCH_VAR, SCRATCH_CONST, SCRATCH_DISCARD };

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
  layer->scratch[SCRATCH_MEAN] = mxu_arena_reserve(layout, c_bytes);
  layer->scratch[SCRATCH_VAR] = mxu_arena_reserve(layout, c_bytes);
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
  v.mean = (float *)(void *)(run->arena + layer->scratch[SCRATCH_MEAN]);
  v.var = (float *)(void *)(run->arena + layer->scratch[SCRATCH_VAR]);
  return v;
}

static void batchnorm_forward(mxu_layer *layer, const mxu_layer_run *run) {
  bn_views v = views(layer, run);
  if (!run->training) {
    run->backend->batchnorm_forward_inference(layer->ops[0], run->x, v.gamma,
                                              v.beta, v.moving_mean,
                                              v.moving_var, run->y);
    return;
  }
  run->backend->batchnorm_forward_training(layer->ops[0], run->x, v.gamma,
                                           v.beta, run->y, v.mean, v.var);
  /* tf.keras 2.x feeds the moving variance the unbiased batch variance on
   * 4-D inputs (its fused kernel), the biased one otherwise. */
  float momentum = layer->config.batchnorm.momentum;
  double n = (double)rows(layer);
  float unbias =
      n > 1 && layer->in_shape.rank == 3 ? (float)(n / (n - 1)) : 1.0f;
  for (int k = 0; k < channels(layer); k++) {
    v.moving_mean[k] =
        v.moving_mean[k] * momentum + v.mean[k] * (1.0f - momentum);
    v.moving_var[k] =
        v.moving_var[k] * momentum + v.var[k] * unbias * (1.0f - momentum);
  }
}

static void batchnorm_backward(mxu_layer *layer, const mxu_layer_run *run) {
  bn_views v = views(layer, run);
  /* dx is always computed: the kernel gives all three gradients at once,
   * and run->dx is a real buffer even for the first layer. */
  run->backend->batchnorm_backward(layer->ops[0], run->x, run->dy, v.gamma,
                                   v.mean, v.var, run->dx, v.dgamma, v.dbeta);
}

const mxu_layer_class mxu_batch_normalization_class = {
    "BatchNormalization",
    batchnorm_infer,
    batchnorm_declare,
    batchnorm_plan,
    batchnorm_forward,
    batchnorm_backward,
    NULL,
};
