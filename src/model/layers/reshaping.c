/* reshaping.c — layers that move values rather than compute them:
 * GlobalAveragePooling2D and GlobalMaxPooling2D (keepdims too),
 * ZeroPadding2D and Reshape. Plain loops: each touches every value once. */
#include "model/layers/layers.h"

#include <string.h>

static mxu_status need_image(const mxu_layer *layer) {
  if (layer->in_shape.rank == 3) return MXU_OK;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  return mxu_fail(MXU_ERR_SHAPE,
                  "%s: expects (height, width, channels) input, got %s",
                  layer->name, text);
}

/* ---- GlobalAveragePooling2D, GlobalMaxPooling2D --------------------------
 * Over each image's height x width, per channel. */

static mxu_status global_pool_infer(mxu_layer *layer) {
  MXU_TRY(need_image(layer));
  int64_t dims[3] = {1, 1, layer->in_shape.dims[2]};
  layer->out_shape = layer->config.global_pool.keepdims
                         ? mxu_shape_make(3, dims)
                         : mxu_shape_make(1, &dims[2]);
  return MXU_OK;
}

static double global_pool_flops(const mxu_layer *layer, int need_dx) {
  double n = (double)mxu_shape_count(&layer->in_shape);
  return n * (need_dx ? 2.0 : 1.0);
}

static void global_average_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t pixels = layer->in_shape.dims[0] * layer->in_shape.dims[1];
  int64_t c = layer->in_shape.dims[2];
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * pixels * c;
    float *y = run->y + n * c;
    for (int64_t k = 0; k < c; k++) y[k] = 0.0f;
    for (int64_t p = 0; p < pixels; p++)
      for (int64_t k = 0; k < c; k++) y[k] += x[p * c + k];
    for (int64_t k = 0; k < c; k++) y[k] /= (float)pixels;
  }
}

static void global_average_backward(mxu_layer *layer,
                                    const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t pixels = layer->in_shape.dims[0] * layer->in_shape.dims[1];
  int64_t c = layer->in_shape.dims[2];
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *dy = run->dy + n * c;
    float *dx = run->dx + n * pixels * c;
    for (int64_t p = 0; p < pixels; p++)
      for (int64_t k = 0; k < c; k++) dx[p * c + k] = dy[k] / (float)pixels;
  }
}

static void global_max_forward(mxu_layer *layer, const mxu_layer_run *run) {
  int64_t pixels = layer->in_shape.dims[0] * layer->in_shape.dims[1];
  int64_t c = layer->in_shape.dims[2];
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * pixels * c;
    float *y = run->y + n * c;
    memcpy(y, x, (size_t)c * sizeof(float));
    for (int64_t p = 1; p < pixels; p++)
      for (int64_t k = 0; k < c; k++)
        if (x[p * c + k] > y[k]) y[k] = x[p * c + k];
  }
}

/* TensorFlow's reduce_max shares the gradient equally among the pixels
 * that hold the maximum (a channel that relu zeroed everywhere ties). */
static void global_max_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  int64_t pixels = layer->in_shape.dims[0] * layer->in_shape.dims[1];
  int64_t c = layer->in_shape.dims[2];
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    const float *x = run->x + n * pixels * c, *y = run->y + n * c;
    const float *dy = run->dy + n * c;
    float *dx = run->dx + n * pixels * c;
    for (int64_t k = 0; k < c; k++) {
      int64_t ties = 0;
      for (int64_t p = 0; p < pixels; p++) ties += x[p * c + k] == y[k];
      float share = dy[k] / (float)(ties ? ties : 1);
      for (int64_t p = 0; p < pixels; p++)
        dx[p * c + k] = x[p * c + k] == y[k] ? share : 0.0f;
    }
  }
}

const mxu_layer_class mxu_global_average_pooling2d_class = {
    .class_name = "GlobalAveragePooling2D",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_average_forward,
    .backward = global_average_backward,
};

const mxu_layer_class mxu_global_max_pooling2d_class = {
    .class_name = "GlobalMaxPooling2D",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = global_pool_infer,
    .flops = global_pool_flops,
    .plan = mxu_no_plan,
    .forward = global_max_forward,
    .backward = global_max_backward,
};

/* ---- ZeroPadding2D ---------------------------------------------------------
 */

static mxu_status zero_padding_infer(mxu_layer *layer) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  MXU_TRY(need_image(layer));
  if (c->top < 0 || c->bottom < 0 || c->left < 0 || c->right < 0 ||
      c->top > (1 << 20) || c->bottom > (1 << 20) || c->left > (1 << 20) ||
      c->right > (1 << 20))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: padding ((%d, %d), (%d, %d)) must be in 0..1048576",
                    layer->name, c->top, c->bottom, c->left, c->right);
  int64_t dims[3] = {layer->in_shape.dims[0] + c->top + c->bottom,
                     layer->in_shape.dims[1] + c->left + c->right,
                     layer->in_shape.dims[2]};
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

/* Each input row lands as one run of width * channels values in y;
 * backward reads the same runs out of dy. */
static void padding_rows(const mxu_layer *layer, const mxu_layer_run *run,
                         int forward) {
  const mxu_zero_padding2d_config *c = &layer->config.padding;
  int64_t h = layer->in_shape.dims[0], w = layer->in_shape.dims[1];
  int64_t ch = layer->in_shape.dims[2];
  int64_t out_h = layer->out_shape.dims[0], out_w = layer->out_shape.dims[1];
  size_t row = (size_t)(w * ch) * sizeof(float);
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int64_t r = 0; r < h; r++) {
      int64_t in = (n * h + r) * w * ch;
      int64_t out = ((n * out_h + r + c->top) * out_w + c->left) * ch;
      if (forward)
        memcpy(run->y + out, run->x + in, row);
      else
        memcpy(run->dx + in, run->dy + out, row);
    }
}

static void zero_padding_forward(mxu_layer *layer, const mxu_layer_run *run) {
  memset(run->y, 0,
         (size_t)(layer->compiled->batch * mxu_shape_count(&layer->out_shape)) *
             sizeof(float));
  padding_rows(layer, run, 1);
}

static void zero_padding_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) padding_rows(layer, run, 0);
}

const mxu_layer_class mxu_zero_padding2d_class = {
    .class_name = "ZeroPadding2D",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = zero_padding_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = zero_padding_forward,
    .backward = zero_padding_backward,
};

/* ---- Reshape --------------------------------------------------------------
 * channels_last memory is row-major, so a reshape is a view: compile gives
 * it its input's buffer and nothing moves. */

static mxu_status reshape_infer(mxu_layer *layer) {
  mxu_shape target = layer->config.reshape.target;
  int64_t known = 1, count = mxu_shape_count(&layer->in_shape);
  int unknown = -1;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (target.rank < 1 || target.rank > MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_ARG, "%s: target rank %d is not in 1..%d",
                    layer->name, target.rank, MXU_MAX_RANK);
  for (int d = 0; d < target.rank; d++) {
    if (target.dims[d] == -1 && unknown < 0) {
      unknown = d;
    } else if (target.dims[d] >= 1 && target.dims[d] <= count) {
      known *= target.dims[d];
    } else {
      return mxu_fail(MXU_ERR_ARG,
                      "%s: target dimension %d is %lld; each must be "
                      "positive, and one may be -1",
                      layer->name, d, (long long)target.dims[d]);
    }
  }
  if (unknown >= 0 && count % known == 0) target.dims[unknown] = count / known;
  if (mxu_shape_count(&target) != count || (unknown >= 0 && count % known)) {
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: input %s holds %lld values per sample, which the "
                    "target shape cannot",
                    layer->name, text, (long long)count);
  }
  layer->out_shape = target;
  return MXU_OK;
}

const mxu_layer_class mxu_reshape_class = {
    .class_name = "Reshape",
    .view = 1,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = reshape_infer,
    .flops = mxu_no_flops,
    .plan = mxu_no_plan,
    .forward = mxu_view_forward,
    .backward = mxu_view_backward,
};
