/* epilogue.c — the activation after Conv2D and Dense: fused into the
 * backend op where it can be, a separate softmax where it cannot, and the
 * matching backward. */
#include "model/layers/layers.h"

#include <stdio.h>
#include <string.h>

mxu_status mxu_epilogue_plan(mxu_layer *layer, mxu_activation activation,
                             const mxu_backend *backend, int64_t rows,
                             int cols, mxu_arena *layout,
                             mxu_activation *fused) {
  *fused = activation == MXU_SOFTMAX ? MXU_LINEAR : activation;
  if (activation == MXU_LINEAR) return MXU_OK;
  mxu_activation_desc desc = {activation, rows, cols};
  MXU_TRY(backend->activation_create(&desc, &layer->ops[1]));
  size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
  if (activation == MXU_SOFTMAX)
    layer->scratch[0] = mxu_arena_reserve(layout, bytes);
  layer->scratch[1] = mxu_arena_reserve(layout, bytes);
  return MXU_OK;
}

float *mxu_epilogue_target(const mxu_layer *layer, mxu_activation activation,
                           const mxu_layer_run *run) {
  if (activation != MXU_SOFTMAX) return run->y;
  return (float *)(void *)(run->arena + layer->scratch[0]);
}

void mxu_epilogue_forward(const mxu_layer *layer, mxu_activation activation,
                          const mxu_layer_run *run) {
  if (activation == MXU_SOFTMAX)
    run->backend->activation_forward(
        layer->ops[1], mxu_epilogue_target(layer, activation, run), run->y);
}

const float *mxu_epilogue_backward(const mxu_layer *layer,
                                   mxu_activation activation,
                                   const mxu_layer_run *run) {
  if (activation == MXU_LINEAR || run->fused_softmax) return run->dy;
  float *dz = (float *)(void *)(run->arena + layer->scratch[1]);
  run->backend->activation_backward(layer->ops[1], run->y, run->dy, dz);
  return dz;
}

const float *mxu_epilogue_logits(const mxu_layer *layer,
                                 mxu_activation activation,
                                 const mxu_layer_run *run) {
  if (activation != MXU_SOFTMAX) return NULL;
  return mxu_epilogue_target(layer, activation, run);
}

void mxu_shape_format(const mxu_shape *shape, char *out, size_t size) {
  size_t used = (size_t)snprintf(out, size, "(");
  for (int i = 0; i < shape->rank && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", i ? ", " : "",
                             (long long)shape->dims[i]);
  if (used < size) snprintf(out + used, size - used, ")");
}
