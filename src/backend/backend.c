/* backend.c — picks a kernel table and holds the shape arithmetic every
 * backend and layer shares. */
#include "backend/backend.h"

const mxu_backend *mxu_backend_get(mxu_backend_kind kind) {
  /* pjrt's host side (loading, evaluation, prediction) is cpu's. */
  return kind == MXU_BACKEND_CPU_REF ? mxu_backend_cpu_ref()
                                     : mxu_backend_cpu();
}

/* In int64: sizes and windows reach 2^24 and 2^16 (core.h's limits), so
 * the products fit; the caller checks the results. */
int mxu_conv_output_size(int in, int kernel, int stride, mxu_padding padding,
                         int *pad_before, int *pad_after) {
  int64_t out, total;
  if (padding == MXU_SAME) {
    out = ((int64_t)in + stride - 1) / stride;
    total = (out - 1) * stride + kernel - in;
    if (total < 0) total = 0;
  } else if (padding == MXU_CAUSAL) {
    /* All of it before: the last output's window ends at the last input. */
    out = ((int64_t)in - 1) / stride + 1;
    total = kernel - 1;
    if (pad_before) *pad_before = (int)total;
    if (pad_after) *pad_after = 0;
    return (int)out;
  } else {
    out = in < kernel ? 0 : ((int64_t)in - kernel) / stride + 1;
    total = 0;
  }
  if (pad_before) *pad_before = (int)(total / 2);
  if (pad_after) *pad_after = (int)(total - total / 2);
  return (int)out;
}
