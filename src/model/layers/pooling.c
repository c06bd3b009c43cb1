/* pooling.c — MaxPooling2D and AveragePooling2D (pool size, strides,
 * valid/same; average over in-bounds pixels as Keras does). */
#include "model/layers/layers.h"

static mxu_status pool2d_infer(mxu_layer *layer) {
  const mxu_pool2d_config *c = &layer->config.pool;
  int channels = layer->in_shape.rank == 3 ? (int)layer->in_shape.dims[2] : 0;
  return mxu_window_infer(layer, "pool", c->pool_size, c->strides, c->padding,
                          channels);
}

static int pool2d_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  (void)layer;
  (void)decls;
  return 0;
}

mxu_pool2d_desc mxu_pool2d_describe(const mxu_layer *layer, int batch) {
  const mxu_pool2d_config *c = &layer->config.pool;
  mxu_pool2d_desc d = {0};
  d.n = batch;
  d.in_h = (int)layer->in_shape.dims[0];
  d.in_w = (int)layer->in_shape.dims[1];
  d.c = (int)layer->in_shape.dims[2];
  d.out_h = (int)layer->out_shape.dims[0];
  d.out_w = (int)layer->out_shape.dims[1];
  d.pool_h = c->pool_size[0];
  d.pool_w = c->pool_size[1];
  d.stride_h = c->strides[0];
  d.stride_w = c->strides[1];
  mxu_conv_output_size(d.in_h, d.pool_h, d.stride_h, c->padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(d.in_w, d.pool_w, d.stride_w, c->padding, &d.pad_left,
                       &d.pad_right);
  d.is_max = layer->is_max_pool;
  return d;
}

static mxu_status pool2d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  mxu_pool2d_desc d = mxu_pool2d_describe(layer, batch);
  MXU_TRY(backend->pool2d_create(&d, &layer->compiled->ops[0]));
  size_t bytes = backend->pool2d_workspace_bytes(layer->compiled->ops[0]);
  layer->compiled->scratch[0] = bytes ? mxu_arena_reserve(layout, bytes) : 0;
  layer->compiled->scratch[1] = bytes; /* remembered: 0 means no workspace */
  return MXU_OK;
}

static void *workspace(const mxu_layer *layer, const mxu_layer_run *run) {
  return layer->compiled->scratch[1] ? run->arena + layer->compiled->scratch[0]
                                     : NULL;
}

static void pool2d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  run->backend->pool2d_forward(run->ops[0], run->training, run->x, run->y,
                               run->training ? workspace(layer, run) : NULL);
}

static void pool2d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx)
    run->backend->pool2d_backward(run->ops[0], run->x, run->y, run->dy,
                                  workspace(layer, run), run->dx);
}

const mxu_layer_class mxu_max_pooling2d_class = {
    .class_name = "MaxPooling2D",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .declare = pool2d_declare,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .backward = pool2d_backward,
};

const mxu_layer_class mxu_average_pooling2d_class = {
    .class_name = "AveragePooling2D",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool2d_infer,
    .declare = pool2d_declare,
    .plan = pool2d_plan,
    .forward = pool2d_forward,
    .backward = pool2d_backward,
};
