/* json_ops.c — the ops on tensors Keras records as layers that mxu reads
 * and writes back (json_read.c, json_write.c): each one's name in Keras
 * 3's keras.src.ops modules and in tf.keras 2's TFOpLambda. */
#include "io/json.h"

#include <string.h>

static const mxu_json_op ops[] = {
    /* x + y, x - y, x * y of two tensors or a tensor and a number; x / c. */
    {"keras.src.ops.numpy", "Add", "__operators__.add", MXU_OP_ADD, MXU_LINEAR,
     NULL, NULL},
    {"keras.src.ops.numpy", "Add", "math.add", MXU_OP_ADD, MXU_LINEAR, NULL,
     NULL},
    {"keras.src.ops.numpy", "Subtract", "math.subtract", MXU_OP_SUBTRACT,
     MXU_LINEAR, NULL, NULL},
    {"keras.src.ops.numpy", "Multiply", "math.multiply", MXU_OP_MULTIPLY,
     MXU_LINEAR, NULL, NULL},
    {"keras.src.ops.numpy", "TrueDivide", "math.truediv", MXU_OP_DIVIDE,
     MXU_LINEAR, NULL, NULL},
    {"keras.src.ops.numpy", "Divide", "math.divide", MXU_OP_DIVIDE, MXU_LINEAR,
     NULL, NULL},
    /* Activations of one tensor: keras.ops.relu(x), tf.nn.relu(x). */
    {"keras.src.ops.nn", "Relu", "nn.relu", MXU_OP_ACTIVATION, MXU_RELU, NULL,
     NULL},
    {"keras.src.ops.nn", "Relu6", "nn.relu6", MXU_OP_ACTIVATION, MXU_RELU6,
     NULL, NULL},
    {"keras.src.ops.nn", "Sigmoid", "math.sigmoid", MXU_OP_ACTIVATION,
     MXU_SIGMOID, NULL, NULL},
    {"keras.src.ops.nn", "Silu", "nn.silu", MXU_OP_ACTIVATION, MXU_SILU, NULL,
     NULL},
    {"keras.src.ops.numpy", "Tanh", "math.tanh", MXU_OP_ACTIVATION, MXU_TANH,
     NULL, NULL},
    {"keras.src.ops.nn", "Softplus", "math.softplus", MXU_OP_ACTIVATION,
     MXU_SOFTPLUS, NULL, NULL},
    /* Tensors joined along an axis; one tensor in another shape. */
    {"keras.src.ops.numpy", "Concatenate", "concat", MXU_OP_CONCATENATE,
     MXU_LINEAR, "axis", "axis"},
    {"keras.src.ops.numpy", "Reshape", "reshape", MXU_OP_RESHAPE, MXU_LINEAR,
     "newshape", "shape"},
};

const mxu_json_op *mxu_json_op_named(int tf2, const char *name) {
  for (size_t i = 0; name && i < sizeof ops / sizeof *ops; i++)
    if (strcmp(name, tf2 ? ops[i].tf2 : ops[i].k3) == 0) return &ops[i];
  return NULL;
}

const mxu_json_op *mxu_json_op_of(const mxu_layer *layer) {
  mxu_activation act = layer->op == MXU_OP_ACTIVATION
                           ? mxu_layer_activation_kind(layer)
                           : MXU_LINEAR;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (ops[i].kind == layer->op && ops[i].activation == act) return &ops[i];
  return NULL;
}

int mxu_json_op_module(const char *module) {
  return module && (strcmp(module, "keras.src.ops.numpy") == 0 ||
                    strcmp(module, "keras.src.ops.nn") == 0);
}
