/* table.c — the oneDNN backend's kernel table: every entry of backend.h
 * filled from the family files beside it. */
#include "backend/cpu/cpu.h"

static const mxu_backend cpu_backend = {
    .name = "cpu",
    .op_free = cpu_op_free,
    .conv2d_create = cpu_conv2d_create,
    .conv2d_forward = cpu_conv2d_forward,
    .conv2d_backward_data = cpu_conv2d_backward_data,
    .conv2d_backward_weights = cpu_conv2d_backward_weights,
    .conv2d_native = cpu_conv2d_native,
    .conv2d_backward_relu = cpu_conv2d_backward_relu,
    .dense_create = cpu_dense_create,
    .dense_forward = cpu_weighted_forward,
    .dense_backward_data = cpu_weighted_backward_data,
    .dense_backward_weights = cpu_weighted_backward_weights,
    .pool2d_create = cpu_pool2d_create,
    .pool2d_workspace_bytes = cpu_pool2d_workspace_bytes,
    .pool2d_forward = cpu_pool2d_forward,
    .pool2d_backward = cpu_pool2d_backward,
    .conv_pool_create = cpu_conv_pool_create,
    .conv_pool_workspace_bytes = cpu_conv_pool_workspace_bytes,
    .conv_pool_forward = cpu_conv_pool_forward,
    .conv_pool_backward = cpu_conv_pool_backward,
    .batchnorm_create = cpu_batchnorm_create,
    .batchnorm_forward_training = cpu_batchnorm_forward_training,
    .batchnorm_forward_inference = cpu_batchnorm_forward_inference,
    .batchnorm_backward = cpu_batchnorm_backward,
    .activation_create = cpu_activation_create,
    .activation_forward = cpu_activation_forward,
    .activation_backward = cpu_activation_backward,
    .softmax_cross_entropy = cpu_softmax_cross_entropy,
    .cross_entropy = cpu_cross_entropy,
    .multiply = cpu_multiply,
    .add = cpu_add,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
};

const mxu_backend *mxu_backend_cpu(void) { return &cpu_backend; }
