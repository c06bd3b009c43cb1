/* cpu_ref.c — the oracle backend's kernel table: plain loops, written to be
 * obviously right rather than fast, that every other backend's tests compare
 * against. Also the checks every create shares. */
#include "backend/cpu_ref/ref.h"

#include <stdlib.h>

mxu_status mxu_ref_op_new(mxu_op **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return mxu_fail(MXU_ERR_NOMEM, "cpu_ref: no memory for an op");
  return MXU_OK;
}

static void ref_op_free(mxu_op *op) { free(op); }

/* Windows must fit Keras' geometry exactly: padding narrower than the
 * kernel (so no window is all padding) and the floor output size. */
mxu_status mxu_ref_check_window(const char *what, int in, int out, int kernel,
                                int stride, int pad_before, int pad_after) {
  int padded = in + pad_before + pad_after;
  if (in <= 0 || kernel <= 0 || stride <= 0 || pad_before < 0 ||
      pad_after < 0 || pad_before >= kernel || pad_after >= kernel ||
      padded < kernel || out != (padded - kernel) / stride + 1)
    return mxu_fail(MXU_ERR_ARG,
                    "cpu_ref: %s: input %d, kernel %d, stride %d and padding "
                    "%d/%d do not give output %d",
                    what, in, kernel, stride, pad_before, pad_after, out);
  return MXU_OK;
}

mxu_status mxu_ref_check_fused(const char *what, mxu_activation activation) {
  if (mxu_activation_fusable(activation)) return MXU_OK;
  return mxu_fail(MXU_ERR_ARG, "cpu_ref: %s: activation %d cannot be fused",
                  what, (int)activation);
}

/* The oracle converts nothing: no copies to drop. */
static void keeps_nothing(mxu_op *op) { (void)op; }

static const mxu_backend cpu_ref_table = {
    .name = "cpu_ref",
    .op_free = ref_op_free,
    .conv2d_create = mxu_ref_conv2d_create,
    .conv2d_forward = mxu_ref_conv2d_forward,
    .conv2d_backward_data = mxu_ref_conv2d_backward_data,
    .conv2d_backward_weights = mxu_ref_conv2d_backward_weights,
    .conv2d_new_inputs = keeps_nothing,
    .dense_create = mxu_ref_dense_create,
    .dense_forward = mxu_ref_dense_forward,
    .dense_backward_data = mxu_ref_dense_backward_data,
    .dense_backward_weights = mxu_ref_dense_backward_weights,
    .pool2d_create = mxu_ref_pool2d_create,
    .pool2d_workspace_bytes = mxu_ref_pool2d_workspace_bytes,
    .pool2d_forward = mxu_ref_pool2d_forward,
    .pool2d_backward = mxu_ref_pool2d_backward,
    .batchnorm_create = mxu_ref_batchnorm_create,
    .batchnorm_forward_training = mxu_ref_batchnorm_forward_training,
    .batchnorm_forward_inference = mxu_ref_batchnorm_forward_inference,
    .batchnorm_backward = mxu_ref_batchnorm_backward,
    .activation_create = mxu_ref_activation_create,
    .activation_forward = mxu_ref_activation_forward,
    .activation_backward = mxu_ref_activation_backward,
    .softmax_cross_entropy = mxu_ref_softmax_cross_entropy,
    .cross_entropy = mxu_ref_cross_entropy,
    .multiply = mxu_ref_multiply,
    .scale_shift = mxu_ref_scale_shift,
    .add = mxu_ref_add,
    .scale_channels = mxu_ref_scale_channels,
    .scale_channels_backward = mxu_ref_scale_channels_backward,
    .copy_rows = mxu_ref_copy_rows,
    .channel_mean = mxu_ref_channel_mean,
    .channel_mean_backward = mxu_ref_channel_mean_backward,
    .adam_update = mxu_ref_adam_update,
    .sgd_update = mxu_ref_sgd_update,
};

const mxu_backend *mxu_backend_cpu_ref(void) { return &cpu_ref_table; }
