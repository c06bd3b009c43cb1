/* model.h — the layer contract and the compiled model: what a layer
 * declares, the static plan compile builds from it, and the step that runs
 * the plan. Internal to libmxu. */
#ifndef MXU_MODEL_H
#define MXU_MODEL_H

#include "backend/backend.h"
#include "backend/pjrt/hlo.h"
#include "core/core.h"
#include "core/json.h"
#include "mxu.h"

#define MXU_MAX_LAYER_PARAMS 8
#define MXU_MAX_LAYER_OPS 12

#define MXU_MAX_LAYER_SCRATCH 4
#define MXU_NAME_SIZE 128

/* One weight as Keras sees it: name, shape, initialiser, trainability. */
typedef struct mxu_param_decl {
  const char *name; /* kernel, bias, gamma, beta, moving_mean, ... */
  mxu_shape shape;
  mxu_initializer init; /* never MXU_INIT_DEFAULT: the layer resolved it */
  int trainable;
  mxu_regularizer regularizer;
  mxu_constraint constraint;
  /* Values set to 1 after the initializer drew them (LSTM's
   * unit_forget_bias: its forget gate's block of the bias). */
  int64_t ones_first, ones_count;
  /* A variance-scaling initializer's fans as Keras 3 takes them for an
   * EinsumDense kernel: the dims of this 2-D shape (the projected
   * features, the heads' outputs). Rank 0: Keras' compute_fans of the
   * weight's shape. */
  mxu_shape fans;
} mxu_param_decl;

typedef struct mxu_layer mxu_layer;

/* The ops on tensors Keras records as layers that mxu reads (see
 * mxu_layer.op). */
typedef enum mxu_op_kind {
  MXU_OP_NONE = 0,
  MXU_OP_ADD,
  MXU_OP_SUBTRACT,
  MXU_OP_MULTIPLY,
  MXU_OP_DIVIDE,      /* by a number only: x / c */
  MXU_OP_ACTIVATION,  /* of one tensor: tf.nn.relu(x), keras.ops.relu(x) */
  MXU_OP_CONCATENATE, /* tf.concat([a, b], axis) */
  MXU_OP_RESHAPE      /* tf.reshape(x, [-1, ...]) */
} mxu_op_kind;

/* What a layer's FLOP count depends on beyond its shapes: whether it
 * computes its input's gradient, whether its softmax is fused into the
 * loss (no backward of its own), and the step's global batch and replica
 * count (per-step work shared over the batch). */
typedef struct mxu_flops_step {
  int need_dx;
  int fused_softmax;
  double batch, replicas;
} mxu_flops_step;

/* A model used as a layer: one of Keras' layers of the model around it,
 * its own layers inlined as nodes of this scope, in one run of node
 * order. Its InputLayers are views of the tensors it is called on. */
typedef struct mxu_scope {
  char name[MXU_NAME_SIZE];
  int sequential;  /* a Sequential, else a Functional */
  int parent;      /* the scope it is a layer of */
  int first, last; /* its nodes (and its inner scopes') */
  int output;      /* the node giving its output */
} mxu_scope;

/* What one layer's forward or backward sees: its input and output, their
 * gradients, its weights and their gradients (trainable ones first, as
 * declared; dw[i] is NULL for a non-trainable weight) and this replica's
 * arena, where the offsets the layer reserved at plan time point. */
typedef struct mxu_layer_run {
  const mxu_backend *backend;
  int training;
  const float *x; /* xs[0] */
  float *y;
  const float *dy;
  float *dx;   /* dxs[0]: always a buffer of the input's size */
  int need_dx; /* need_dxs[0]: 0 for a model input, a layer may skip dx */
  /* Every input, for layers that read several (merges). A layer writes
   * each dx whole: where its input is read by others too, the plan sums
   * the partial gradients after. */
  int input_count;
  const float *xs[MXU_MAX_INPUTS];
  float *dxs[MXU_MAX_INPUTS];
  int need_dxs[MXU_MAX_INPUTS];
  float *w[MXU_MAX_LAYER_PARAMS];
  float *dw[MXU_MAX_LAYER_PARAMS];
  unsigned char *arena;
  mxu_op *const *ops; /* this replica's ops for the layer */
  mxu_rng rng;        /* this (seed, epoch, step, replica, layer) stream */
  int64_t row_offset; /* this slice's first row in its logical replica */
  /* A layer that uses the mask (uses_mask), whose input has one: the ids
   * of the mask's Embedding for this slice, (batch, steps), or a
   * Masking's 1 and 0 (computes_mask); 0 is a masked step. NULL: no
   * mask. */
  const float *mask_ids;
  int fused_softmax; /* backward: dy is already the gradient of the logits */
} mxu_layer_run;

/* Where Keras keeps a layer class that is not one of keras.layers
 * (keras.applications' own layers): the module and registered_name each
 * dialect writes, which the reader accepts and the writer gives back so
 * that Keras finds the class again. */
typedef struct mxu_keras_origin {
  const char *module_k3, *registered_k3;
  const char *module_tf2, *registered_tf2;
} mxu_keras_origin;

typedef struct mxu_layer_class {
  const char *class_name; /* Keras' class name */
  /* Other names Keras reads for it (Convolution2D, MaxPool2D, ...). */
  const char *const *aliases;
  /* NULL: keras.layers, registered_name null. */
  const mxu_keras_origin *origin;
  /* Keras 3's Python class where its name is not class_name
   * (GroupedQueryAttention, which Keras 3 writes as GroupQueryAttention):
   * the layer's automatic name, .keras group and summary's class come from
   * it. */
  const char *python_class;
  /* Its config in Keras' JSON, both dialects: the keys it reads besides
   * name, trainable and dtype; the reader, which applies the layer to
   * node->inputs (refusing what mxu cannot honour, naming the key); the
   * writer of its keys after the common ones. NULL for InputLayer, which
   * the model reader and writer handle. */
  const char *const *config_keys;
  mxu_status (*read_config)(const mxu_json_where *where, const cJSON *config,
                            mxu_json_node *node, const char *name);
  void (*write_config)(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config);
  /* The output is the input's memory under another shape (Flatten):
   * compile gives both the same buffer and the layer copies nothing
   * (its gradient too, where the input has no other reader). */
  int view;
  /* The subgroup of the layer's group in which Keras 3 keeps weight k (an
   * RNN's "cell": layers/lstm/cell/vars/0; a Bidirectional's
   * "forward_layer/cell"), one run of weights each. NULL: every weight in
   * the layer's own vars (use mxu_keras3_group). */
  const char *(*keras3_group)(const mxu_layer *layer, int k);
  /* A layer over sequences (Conv1D, the 1-D poolings): its (steps,
   * channels) tensors run as images (1, steps, channels) through the same
   * kernels as its 2-D kind (mxu_image_shape). */
  int sequence;
  /* The tensors a call reads, by Keras' names of the call's parameters,
   * in order (MultiHeadAttention's query, value, key): a call passes
   * them by position or by name (tf.keras 2 all but the first by name).
   * NULL: the call's positional arguments. */
  const char *const *call_tensors;
  /* The call's other arguments the layer takes (use_causal_mask): its
   * reader finds them in node->kwargs, write_call puts them back. */
  const char *const *call_options;
  void (*write_call)(mxu_json_out *out, const mxu_layer *layer, cJSON *kwargs);
  /* An Embedding's mask (mask_zero) and the layers after it: the node
   * whose ids mask the layer's output (Keras' compute_mask: an Embedding
   * its input, most layers their input's mask, layer->mask_in), -1 for
   * none; NULL: none, the layer drops a mask as Keras' do. uses_mask: the
   * layer computes with its input's (run->mask_ids, e->mask). */
  int (*output_mask)(const mxu_layer *layer);
  int uses_mask;
  /* The layer computes the mask its output carries (Masking; its
   * output_mask is the node itself): 1 or 0 per step, (batch, steps)
   * floats at scratch[0] of the replica's arena (cpu) or in e->mask_out
   * (pjrt). A node of another class holds the mask's ids itself. */
  int computes_mask;
  /* The layer computes every position of its input's leading axes alike,
   * its weights over the last axis only (Dense, the activations,
   * Dropout; BatchNormalization, whose statistics span them as Keras'
   * TimeDistributed's do): Keras' TimeDistributed of it is the layer
   * itself over the sequence (mxu_layer.wrapped). */
  int positionwise;
  /* An image layer (Conv2D, the poolings, Flatten and their 1-D kinds):
   * Keras' TimeDistributed of it runs the sequence's steps as that many
   * more images of the batch (mxu_layer.time_steps). */
  int steps_in_batch;
  /* Masked and unmasked inputs together are refused: a merge's mask,
   * which Keras 3 ors from its inputs' (none when one has none) and
   * tf.keras 2 ands from those that have one; MultiHeadAttention's query
   * and value masks, which mxu takes as one. */
  int mask_all_or_none;
  /* A layer that returns several tensors (an RNN's return_state): how
   * many, each one's shape into shapes (NULL: only the count); 1 for one.
   * Its node's output holds them one after the other, per sample, and
   * hidden OutputPart nodes (mxu_output_part) give them apart. NULL: one
   * output. */
  int (*output_parts)(const mxu_layer *layer, mxu_shape *shapes);
  /* The inputs after the first are passed as one list in this call
   * argument (an RNN's "initial_state"): Keras 3 writes them so, tf.keras
   * 2 as more positional tensors. NULL: none. */
  const char *list_argument;
  /* How many inputs the layer takes: 1 for most; a merge 2 and up. */
  int min_inputs, max_inputs;
  /* in_shapes -> out_shape; rejects what the layer cannot take. */
  mxu_status (*infer)(mxu_layer *layer);
  /* Fills up to MXU_MAX_LAYER_PARAMS declarations in Keras order. NULL:
   * the layer has no weights. */
  int (*declare)(const mxu_layer *layer, mxu_param_decl *decls);
  /* Floating-point operations of forward and backward per sample, as its
   * kernels compute them (flops.c says how they count). NULL: none. */
  double (*flops)(const mxu_layer *layer, const struct mxu_flops_step *step);
  /* Whether the layer's output is a softmax, which a cross-entropy loss
   * fuses with (reading the logits). NULL: never. */
  int (*ends_in_softmax)(const mxu_layer *layer);
  /* Creates backend ops for `batch` samples in layer->ops and reserves
   * per-replica scratch in the arena layout. Compile calls it once per
   * replica from the same layout state, so every replica gets the same
   * offsets and its own ops (ops hold per-call state). */
  mxu_status (*plan)(mxu_layer *layer, const mxu_backend *backend, int batch,
                     mxu_arena *layout);
  void (*forward)(mxu_layer *layer, const mxu_layer_run *run);
  void (*backward)(mxu_layer *layer, const mxu_layer_run *run);
  /* The forward computation as StableHLO ops for the pjrt backend, which
   * derives the backward pass from it (grad.c); returns the output. NULL:
   * not emitted yet (pjrt refuses the model, naming the layer). */
  mxu_hlo_value (*emit)(const mxu_layer *layer, mxu_emit *e);
  /* For emitters that need randomness in training (Dropout): fills out
   * with this replica's noise for the run's step, a float per output
   * value of its batch rows, drawn on the host from the same stream the
   * forward pass draws from, so a device's masks are cpu's. Returns 0
   * (nothing drawn) when the layer needs none, e.g. rate 0; with out
   * NULL, only says whether it draws. NULL: none. */
  int (*emit_noise)(const mxu_layer *layer, const mxu_layer_run *run,
                    float *out);
  /* pjrt: in training the host computes the layer's output (emit_noise
   * runs its forward pass and gives the output whole) and the devices take
   * it as is: the random augmentations, which only input layers and other
   * such layers may feed (no gradient flows back through them). */
  int host_output;
  /* pjrt: the noise emit_noise gives is the run's random stream (its key
   * and stream words, 4 uint32) and the emitter draws on the device
   * (mxu_emit_uniform4) what the host would (Dropout's masks). */
  int noise_is_stream;
  /* For a layer that ends in a softmax: the pre-softmax values of this run,
   * which a cross-entropy loss uses instead of the probabilities, as
   * Keras does. NULL for other layers. */
  const float *(*logits)(const mxu_layer *layer, const mxu_layer_run *run);
  /* Non-trainable state fed by training statistics (BatchNormalization's
   * moving mean and variance): a training forward leaves stats_floats
   * values at scratch offset stats_offset of its replica's arena, and
   * after the step update_state folds every replica's values, given in
   * logical replica order, into the weights w. NULL for other layers. */
  int (*stats_floats)(const mxu_layer *layer);
  void (*update_state)(mxu_layer *layer, const float *const *stats,
                       int replicas, float *const *w);
  /* Layers that compute over the global batch in training (synchronized
   * BatchNormalization) split forward and backward in two: *_local leaves
   * sync_floats values of this replica at stats_offset, then, once every
   * replica has, *_global gets all of them in logical replica order and
   * finishes. sync_floats returns 0 when the layer is not synchronized. */
  int (*sync_floats)(const mxu_layer *layer);
  void (*forward_local)(mxu_layer *layer, const mxu_layer_run *run);
  void (*forward_global)(mxu_layer *layer, const mxu_layer_run *run,
                         const float *const *all, int replicas);
  void (*backward_local)(mxu_layer *layer, const mxu_layer_run *run);
  void (*backward_global)(mxu_layer *layer, const mxu_layer_run *run,
                          const float *const *all, int replicas);
} mxu_layer_class;

/* Dropout and SpatialDropout2D, and the Gaussian ones: rate is
 * GaussianDropout's rate and GaussianNoise's stddev.
 * noise: Keras' noise_shape without the batch (rank 0: none; a dim of 1
 * shares one draw along the axis). */
typedef struct mxu_dropout_config {
  const char *name;
  float rate;
  mxu_shape noise;
} mxu_dropout_config;

/* What the layers of the graph issue carry; public configs in mxu.h. */
typedef struct mxu_merge_config {
  mxu_merge_kind kind;
  int axis; /* Concatenate: the axis without the batch, 0-based */
} mxu_merge_config;

/* Bidirectional: the wrapped recurrent layer (its name in inner), how
 * the two directions merge, and its weights' tf.keras 2 names, which
 * hold the wrapped layer's name (mxu_bidirectional_names). */
typedef struct mxu_bidirectional_config {
  mxu_rnn_config rnn;
  mxu_merge_kind merge;
  char inner[MXU_NAME_SIZE];
  char names[6][MXU_NAME_SIZE + 48];
} mxu_bidirectional_config;
void mxu_bidirectional_names(mxu_bidirectional_config *b);

/* LeakyReLU, ELU and Softmax: an activation with the layer's own alpha. */
typedef struct mxu_activation_layer_config {
  mxu_activation kind;
  float alpha;
} mxu_activation_layer_config;

/* OutputPart: output `index` of a layer that returns several
 * (output_parts), the values [offset, offset + count of shape) of each
 * sample of its input, which holds them one after the other. */
typedef struct mxu_part_config {
  int index;
  int64_t offset;
  mxu_shape shape;
} mxu_part_config;

struct mxu_layer {
  const mxu_layer_class *cls;
  char name[MXU_NAME_SIZE];
  union {
    mxu_conv2d_config conv;
    mxu_conv3d_config conv3d;
    mxu_conv_lstm2d_config conv_lstm;
    mxu_pool3d_config pool3d;
    mxu_margins3d_config margins3d;
    mxu_upsampling3d_config upsampling3d;
    mxu_adaptive_pool_config adaptive;
    mxu_depthwise_conv2d_config depthwise;
    mxu_separable_conv2d_config separable;
    mxu_pool2d_config pool;
    mxu_dense_config dense;
    mxu_batchnorm_config batchnorm;
    mxu_dropout_config dropout;
    mxu_activation activation;
    mxu_merge_config merge;
    mxu_global_pool2d_config global_pool;
    mxu_zero_padding2d_config padding;
    mxu_relu_config relu;
    mxu_reshape_config reshape;
    mxu_rescaling_config rescaling;
    mxu_activation_layer_config act;
    mxu_prelu_config prelu;
    mxu_random_config random;
    mxu_permute_config permute;
    mxu_upsampling2d_config upsampling;
    mxu_resize_config resize;
    mxu_layer_norm_config layer_norm;
    mxu_normalization_config normalization;
    mxu_layer_scale_config layer_scale;
    float custom_scale; /* CustomScaleLayer's scale */
    float mask_value;   /* Masking */
    int repeats;        /* RepeatVector's n, UpSampling1D's size */
    mxu_embedding_config embedding;
    mxu_rnn_config rnn;
    mxu_bidirectional_config bidirectional;
    mxu_attention_config attention;
    mxu_dot_config dot;
    int input_dtype; /* InputLayer: its index in mxu_input_dtypes */
    mxu_part_config part;
    mxu_dense_attention_config dense_attention;
  } config;
  int is_max_pool;
  /* Keras recorded the layer as an op on tensors (json_read.c: x + 3.0
   * as Keras 3's keras.src.ops.numpy Add, tf.keras 2's TFOpLambda), not
   * one of its layers. The JSON writer gives it back so; Keras 3 keeps
   * no weights group for it. */
  mxu_op_kind op;
  /* Keras' activity_regularizer (and the ActivityRegularization layer's):
   * l1 |y| + l2 y^2 of the output, summed, joins the loss (divided by
   * the batch, as Keras divides it), its gradient the output's. */
  mxu_regularizer activity;
  /* Masks (an Embedding's mask_zero, Masking): the node that holds the
   * mask on this node's inputs, and on its output (an Embedding's ids, or
   * a Masking, computes_mask); -1: none. */
  int mask_in, mask_out;
  /* Read from Keras' TimeDistributed(layer) of a positionwise class: the
   * wrapped layer's name, which the writers give back (the node has the
   * wrapper's); "" for others. */
  char wrapped[MXU_NAME_SIZE];
  /* TimeDistributed of a steps_in_batch class: the steps (its input's
   * first axis), each an image of its own (mxu_image_shape, run for
   * mxu_layer_rows samples); 0 for others. Its shapes keep the steps. */
  int time_steps;
  mxu_shape in_shape, out_shape; /* without the batch dimension */

  /* The graph: the nodes whose outputs this one reads (a node is one
   * layer applied once; its output is the tensor of the same index), in
   * order, and their shapes (in_shape is in_shapes[0]). */
  int inputs[MXU_MAX_INPUTS];
  int input_count;
  mxu_shape in_shapes[MXU_MAX_INPUTS];
  /* A shared layer (Keras: one layer called several times) is a node per
   * call: `owner` is the node holding the weights (the first of them in
   * Keras' order; a node's own index otherwise) and `call` the call's
   * number, Keras' node_index. Other calls write their weight gradient
   * at shadow_first in the gradient buffers (past the trainable values),
   * added to the owner's after backward. */
  int owner, call;
  int64_t shadow_first;
  /* The layer's place among the model's layers other than InputLayers:
   * what its random streams (initialisers, dropout) are keyed by, so a
   * model gets the same weights built as Sequential or as a graph. */
  int key;
  /* The model this node belongs to: 0 the model itself, else a model used
   * as a layer (model->scopes[scope]), whose nodes are inlined here. */
  int scope;

  /* compiled: where the layer's weights are in the parameter table */
  int index;       /* position in the model */
  int param_first; /* index into the model's parameter table */
  int param_count;
  /* What the plan decided for this node (its batch, precision, fusion,
   * layouts, scratch); it lives in the plan, for one plan only. NULL when
   * the model has none. */
  struct mxu_node_plan *compiled;
};

typedef struct mxu_node_plan {
  int batch;                             /* per replica */
  int bf16;                              /* conv, dense: in bfloat16 */
  mxu_op *ops[MXU_MAX_LAYER_OPS];        /* while planning only */
  size_t scratch[MXU_MAX_LAYER_SCRATCH]; /* offsets in the replica arena */
  size_t stats_offset;                   /* see stats_floats */
  size_t sync_offset;                    /* see sync_floats */
  /* Fusion: a layer that runs the fused_layers layers after it itself in
   * one backend op (Conv2D with the MaxPooling2D that alone reads it, the
   * relu that alone reads that, and a Flatten and linear Dense after
   * those; BatchNormalization, or Add, with the relu that alone reads it)
   * reads its input and writes the last one's output; those layers are
   * `absorbed` and do nothing of their own, and an absorbed layer's
   * weights come after the layer's own in mxu_layer_run's w and dw.
   * Compile proposes it from consumer counts, the layer's plan accepts
   * (all or a leading part); fused[k] are the absorbed nodes in order. */
  int fused_layers;
  struct mxu_layer *fused[4];
  int absorbed;
  /* Between two Conv2D layers that the backend runs in its own activation
   * layout, the tensor stays in it (see mxu_conv2d_desc): the first's
   * native_out and the second's native_in. */
  int native_in, native_out;
  /* mixed_bfloat16 on a backend with bf16 tensors (conv2d_bf16_tensors):
   * the outputs that bf16 convs, BatchNormalizations and Adds write and
   * only such layers read are held in bf16, 2 bytes a value (compile's
   * plan_bf16_tensors): the writer's y_bf16, and bit k of a reader's
   * x_bf16 for its input k; and, where every reader writes its share of
   * the gradient in bf16 too (dx_bf16, a bit per input) and the writer
   * reads it so (dy_bf16), the tensor's gradient. */
  unsigned x_bf16, dx_bf16;
  int y_bf16, dy_bf16;
  /* A ZeroPadding2D that a conv alone reads pads nothing itself: the
   * conv reads the unpadded input and pads it as part of its own padding
   * (margins: top, bottom, left, right), and the ZeroPadding2D is a view
   * (MobileNetV2's, EfficientNet's and ResNet50's: a copy of the batch
   * there and back saved). folded marks the ZeroPadding2D. */
  int folded;
  int margins[4];
} mxu_node_plan;

/* Weight k's subgroup in Keras 3's files, NULL for the layer's own vars
 * (layers/shared.c). */
const char *mxu_keras3_group(const mxu_layer *layer, int k);

/* "(28, 28, 1)" (layers/shared.c) */
void mxu_shape_format(const mxu_shape *shape, char *out, size_t size);

/* The dtypes an InputLayer may declare, "float32" first: token ids come
 * as int32 or int64 (Embedding's input). mxu's samples are float32
 * whatever the file says; the name is kept to write it back. NULL-ended. */
extern const char *const mxu_input_dtypes[];

/* The registry: one row per layer class. */
extern const mxu_layer_class mxu_conv2d_class;
extern const mxu_layer_class mxu_depthwise_conv2d_class;
extern const mxu_layer_class mxu_separable_conv2d_class;
extern const mxu_layer_class mxu_conv2d_transpose_class;
extern const mxu_layer_class mxu_conv1d_class;
extern const mxu_layer_class mxu_max_pooling1d_class;
extern const mxu_layer_class mxu_average_pooling1d_class;
extern const mxu_layer_class mxu_global_average_pooling1d_class;
extern const mxu_layer_class mxu_global_max_pooling1d_class;
extern const mxu_layer_class mxu_embedding_class;
extern const mxu_layer_class mxu_masking_class;
extern const mxu_layer_class mxu_repeat_vector_class;
extern const mxu_layer_class mxu_upsampling1d_class;
extern const mxu_layer_class mxu_zero_padding1d_class;
extern const mxu_layer_class mxu_cropping1d_class;
extern const mxu_layer_class mxu_conv1d_transpose_class;
extern const mxu_layer_class mxu_dot_class;
extern const mxu_layer_class mxu_spatial_dropout1d_class;
extern const mxu_layer_class mxu_spatial_dropout3d_class;
extern const mxu_layer_class mxu_alpha_dropout_class;
extern const mxu_layer_class mxu_identity_class;
extern const mxu_layer_class mxu_einsum_dense_class;
extern const mxu_layer_class mxu_rms_normalization_class;
extern const mxu_layer_class mxu_simple_rnn_class;
extern const mxu_layer_class mxu_lstm_class;
extern const mxu_layer_class mxu_gru_class;
extern const mxu_layer_class mxu_rnn_class;
extern const mxu_layer_class mxu_bidirectional_class;
extern const mxu_layer_class mxu_multi_head_attention_class;
extern const mxu_layer_class mxu_group_query_attention_class;
extern const mxu_layer_class mxu_attention_class;
extern const mxu_layer_class mxu_additive_attention_class;
extern const mxu_layer_class mxu_max_pooling2d_class;
extern const mxu_layer_class mxu_conv3d_class;
extern const mxu_layer_class mxu_conv_lstm2d_class;
extern const mxu_layer_class mxu_conv_lstm1d_class;
extern const mxu_layer_class mxu_conv3d_transpose_class;
extern const mxu_layer_class mxu_max_pooling3d_class;
extern const mxu_layer_class mxu_average_pooling3d_class;
extern const mxu_layer_class mxu_global_average_pooling3d_class;
extern const mxu_layer_class mxu_global_max_pooling3d_class;
extern const mxu_layer_class mxu_zero_padding3d_class;
extern const mxu_layer_class mxu_cropping3d_class;
extern const mxu_layer_class mxu_upsampling3d_class;
/* [0] average, [1] max; [r - 1] over r spatial axes. */
extern const mxu_layer_class mxu_adaptive_pooling_classes[2][3];
extern const mxu_layer_class mxu_average_pooling2d_class;
extern const mxu_layer_class mxu_activation_class;
extern const mxu_layer_class mxu_flatten_class;
extern const mxu_layer_class mxu_dense_class;
extern const mxu_layer_class mxu_dropout_class;
extern const mxu_layer_class mxu_spatial_dropout2d_class;
extern const mxu_layer_class mxu_rescaling_class;
/* x / c, read from an op only (not a Keras layer, so not in the registry
 * of names). */
extern const mxu_layer_class mxu_divide_class;
mxu_tensor_id mxu_apply_divide(mxu_model *model, const char *name,
                               float divisor, mxu_tensor_id x);
extern const mxu_layer_class mxu_leaky_relu_class;
extern const mxu_layer_class mxu_elu_class;
extern const mxu_layer_class mxu_softmax_class;
extern const mxu_layer_class mxu_prelu_class;
extern const mxu_layer_class mxu_random_flip_class;
extern const mxu_layer_class mxu_random_translation_class;
extern const mxu_layer_class mxu_random_rotation_class;
extern const mxu_layer_class mxu_random_zoom_class;
extern const mxu_layer_class mxu_random_contrast_class;
extern const mxu_layer_class mxu_random_brightness_class;
extern const mxu_layer_class mxu_random_grayscale_class;
extern const mxu_layer_class mxu_random_invert_class;
extern const mxu_layer_class mxu_solarization_class;
extern const mxu_layer_class mxu_random_posterization_class;
extern const mxu_layer_class mxu_random_shear_class;
extern const mxu_layer_class mxu_random_color_degeneration_class;
extern const mxu_layer_class mxu_random_sharpness_class;
extern const mxu_layer_class mxu_random_crop_class;
extern const mxu_layer_class mxu_activity_regularization_class;
extern const mxu_layer_class mxu_cropping2d_class;
extern const mxu_layer_class mxu_permute_class;
extern const mxu_layer_class mxu_upsampling2d_class;
extern const mxu_layer_class mxu_resizing_class;
extern const mxu_layer_class mxu_center_crop_class;
extern const mxu_layer_class mxu_gaussian_noise_class;
extern const mxu_layer_class mxu_unit_normalization_class;
extern const mxu_layer_class mxu_layer_normalization_class;
extern const mxu_layer_class mxu_group_normalization_class;
extern const mxu_layer_class mxu_gaussian_dropout_class;
extern const mxu_layer_class mxu_normalization_class;
extern const mxu_layer_class mxu_layer_scale_class;
extern const mxu_layer_class mxu_custom_scale_layer_class;
extern const mxu_layer_class mxu_batch_normalization_class;
extern const mxu_layer_class mxu_input_layer_class;
extern const mxu_layer_class mxu_depthwise_conv1d_class;
extern const mxu_layer_class mxu_separable_conv1d_class;
extern const mxu_layer_class mxu_output_part_class;
extern const mxu_layer_class mxu_add_class;
extern const mxu_layer_class mxu_subtract_class;
extern const mxu_layer_class mxu_multiply_class;
extern const mxu_layer_class mxu_average_class;
extern const mxu_layer_class mxu_maximum_class;
extern const mxu_layer_class mxu_minimum_class;
extern const mxu_layer_class mxu_concatenate_class;
extern const mxu_layer_class mxu_global_average_pooling2d_class;
extern const mxu_layer_class mxu_global_max_pooling2d_class;
extern const mxu_layer_class mxu_zero_padding2d_class;
extern const mxu_layer_class mxu_relu_class;
extern const mxu_layer_class mxu_reshape_class;
/* By Keras' class name or an alias of it; NULL when mxu has none. */
const mxu_layer_class *mxu_layer_class_find(const char *class_name);
/* "Conv2D, MaxPooling2D, ...": every class, for messages. */
const char *mxu_layer_class_names(void);

/* Whether the layer ends in a softmax (its class's ends_in_softmax). */
int mxu_layer_ends_in_softmax(const mxu_layer *layer);
/* The weights a layer declares (0 for a layer without). */
int mxu_layer_declare(const mxu_layer *layer, mxu_param_decl *decls);

/* One weight of the model: a view into the trainable buffer (weights, with
 * grads, and the optimizer's slots at the same offsets) or the
 * non-trainable one (state). */
typedef struct mxu_param {
  int layer;
  const char *name;
  mxu_shape shape;
  int trainable;
  int64_t offset, count;
  mxu_regularizer regularizer;
  mxu_constraint constraint;
} mxu_param;

/* A parameter's values in the model's buffers. */
static inline float *mxu_param_values(const mxu_model *model,
                                      const mxu_param *param);

/* One replica: its activations and gradients (an arena laid out at
 * compile, the same offsets in every replica), its backend ops and its
 * gradient of the weights. */
typedef struct mxu_replica {
  int index; /* slice id, 0 .. replicas-1 (logical replica: index / split) */
  mxu_arena arena;
  mxu_op **ops; /* layer_count * MXU_MAX_LAYER_OPS */
  float *grads; /* trainable_count; local replica 0's is model->grads */
} mxu_replica;

/* Where a node's backward writes the gradient of its input k: straight
 * into the input's gradient buffer, or, where the input has other readers
 * whose gradient is already there, into a partial buffer that is added to
 * it after, so each reader's share is summed in one fixed order. */
typedef struct mxu_edge {
  size_t dx;   /* offset of the buffer dx is written into */
  int partial; /* 1: add the buffer into the input's gradient after */
  int need_dx; /* the input carries a gradient (mxu_tensors_with_grad) */
} mxu_edge;

/* The metric a model computes (loss.c), resolved from its name at
 * compile. */
typedef enum mxu_metric_kind {
  MXU_METRIC_SPARSE_ACCURACY = 0,  /* argmax == class label */
  MXU_METRIC_CATEGORICAL_ACCURACY, /* argmax == argmax of the targets */
  MXU_METRIC_BINARY_ACCURACY,      /* (y > 0.5) == target, per value */
  MXU_METRIC_TOP_K,                /* the target's class among the top 5 */
  MXU_METRIC_SPARSE_TOP_K,
  MXU_METRIC_MAE,
  MXU_METRIC_MSE,
  MXU_METRIC_RMSE,      /* the square root of the epoch's mean */
  MXU_METRIC_PRECISION, /* of every value: y > 0.5 among targets != 0 */
  MXU_METRIC_RECALL,
  MXU_METRIC_AUC,    /* Keras' AUC(): the ROC curve at MXU_AUC_THRESHOLDS */
  MXU_METRIC_AUC_PR, /* AUC(curve="PR"), Keras' interpolation */
  /* Counts over the epoch of every value, y > 0.5 a positive prediction,
   * a target != 0 a positive: Keras' TruePositives() and the others. */
  MXU_METRIC_TRUE_POSITIVES,
  MXU_METRIC_FALSE_POSITIVES,
  MXU_METRIC_TRUE_NEGATIVES,
  MXU_METRIC_FALSE_NEGATIVES,
  MXU_METRIC_BINARY_CROSSENTROPY, /* of probabilities, as the loss's */
  /* The losses of those names as metrics, meaned as the losses are. */
  MXU_METRIC_MAPE,
  MXU_METRIC_MSLE,
  MXU_METRIC_LOGCOSH,
  MXU_METRIC_POISSON,
  MXU_METRIC_HINGE,
  MXU_METRIC_SQUARED_HINGE,
  MXU_METRIC_CATEGORICAL_HINGE, /* of each vector of the last axis */
  MXU_METRIC_COSINE_SIMILARITY, /* t . y over their norms, each vector's */
  /* Keras' F1Score and FBetaScore: each value a positive prediction above
   * the threshold (or its row's largest), counted per class against the
   * targets over the epoch, averaged as the options say. */
  MXU_METRIC_F_SCORE,
  /* Keras' MeanIoU (sparse_y_pred=False): each row's class the output's
   * argmax, its true class the label (MEAN_IOU) or the targets' argmax
   * (ONE_HOT_MEAN_IOU: OneHotMeanIoU), counted per class over the epoch
   * (rows whose true class is the ignore_class or no class left out); the
   * mean over the classes seen of tp / (tp + fp + fn). */
  MXU_METRIC_MEAN_IOU,
  MXU_METRIC_ONE_HOT_MEAN_IOU,
  /* Keras' BinaryIoU: every value a prediction of class 1 at or above the
   * threshold (0.5), of 0 below, its target (truncated, as Keras' int
   * cast) the true class; the IoU of classes 0 and 1 (or of class_id
   * alone, Keras' target_class_ids [c]) meaned as MeanIoU's. */
  MXU_METRIC_BINARY_IOU
} mxu_metric_kind;

/* The options of the metrics that take them, from a metric's text:
 * "f1_score(average=macro,threshold=0.5)", "fbeta_score(average=micro,
 * beta=2)", "binary_accuracy(threshold=0)", "auc(from_logits=1)". */
typedef enum mxu_metric_average {
  MXU_AVERAGE_MICRO = 1, /* the classes' counts summed, then the score */
  MXU_AVERAGE_MACRO,     /* the classes' scores' mean */
  MXU_AVERAGE_WEIGHTED   /* their mean weighted by each class's targets */
} mxu_metric_average;

typedef struct mxu_metric_options {
  mxu_metric_average average; /* an F-score's */
  double beta;                /* an F-score's recall weight: 1 (F1) */
  /* An F-score's or BinaryAccuracy's: a positive prediction above it;
   * without, an F-score's row's largest value, BinaryAccuracy's 0.5. */
  int has_threshold;
  double threshold;
  int from_logits; /* an AUC's: of sigmoid(output) */
  /* Precision's and Recall's (the counts' take the threshold): only a
   * row's top_k largest values predicted positive (0: every value; the
   * threshold then -inf unless given), only value class_id counted
   * (has_class_id); BinaryIoU's class_id: the one class it means. */
  int top_k, has_class_id, class_id;
  /* A MeanIoU's: its classes (the output's last axis), and the class
   * whose rows it leaves out (has_ignore_class). */
  int num_classes, has_ignore_class, ignore_class;
  /* Not of the text: the length of the vectors the categorical hinge
   * and the cosine similarity compare, the output's last axis (compile
   * sets it; 0: the whole row). */
  int64_t vector;
} mxu_metric_options;

/* Keras' AUC: num_thresholds 200, evenly spaced over [0, 1] (the ends
 * moved out by epsilon). Its counts are a curve: per threshold bucket, the
 * true and the false values whose prediction falls in it.
 *
 * A metric that keeps more than a sum and a divisor over the epoch keeps
 * a tally, a vector of sums (an AUC's curve, an F-score's counts per
 * class), summed over replicas, processes and steps as the sums are; a
 * model's tallies hold at most MXU_MAX_TALLY_VALUES floats. */
enum {
  MXU_AUC_THRESHOLDS = 200,
  MXU_AUC_VALUES = 2 * MXU_AUC_THRESHOLDS,
  MXU_MAX_TALLY_VALUES = 8192
};

enum { MXU_TOP_K = 5 }; /* Keras' default k */

enum { MXU_METRIC_LOG_SIZE = 64 }; /* a metric's logged name, its NUL too */

/* A model output the loss scores (Keras: a loss for each output, their
 * weighted sum the model's), resolved at compile from the config: its node,
 * loss and metrics. spec.metrics point at metric_spec[]. */
typedef struct mxu_head {
  int node;
  mxu_output_loss spec;
  int metric_count;
  /* Each metric's name in the logs, and as compile was given it
   * ("roc=auc", "auc"). */
  char metric[MXU_MAX_METRICS][MXU_METRIC_LOG_SIZE];
  char metric_spec[MXU_MAX_METRICS][2 * MXU_METRIC_LOG_SIZE];
  mxu_metric_kind metric_kind[MXU_MAX_METRICS];
  mxu_metric_options metric_options[MXU_MAX_METRICS];
  /* The metrics come first, then the weighted metrics (Keras' order). */
  unsigned char metric_weighted[MXU_MAX_METRICS];
  /* A metric's tally (mxu_metric_tally_size): where it starts among the
   * model's (mxu_plan.tallies), in floats; -1 for the other metrics. */
  int tally[MXU_MAX_METRICS];
} mxu_head;

/* Whether any of the head's metrics is weighted. */
static inline int mxu_head_weighs_metrics(const mxu_head *head) {
  for (int m = 0; m < head->metric_count; m++)
    if (head->metric_weighted[m]) return 1;
  return 0;
}

/* A head's buffers and decisions in the plan. labels: this batch's class
 * labels (int32; one per position of an output of several under the
 * sparse loss: mxu_loss_positions); targets: floats, the output's size a
 * row (float targets as given, or labels as numbers or one-hot rows);
 * smoothed: the categorical targets after label smoothing; row_mask: the
 * mask of each row the loss scores (positions); probs, loss: the loss's
 * outputs per row. */
typedef struct mxu_head_plan {
  size_t labels, targets, smoothed, row_mask, probs, loss;
  /* Under ignore_class, the rows its loss scores: row_mask's but those
   * whose label is the ignored class (the metrics keep them, as Keras'). */
  size_t loss_rows;
  /* Its metrics' tallies of this batch (floats), where it has any: the
   * model's values tally_first .. + tally_values (mxu_plan.tallies). */
  size_t tallies;
  int tally_first, tally_values;
  /* With weighted metrics, each row's mask times its sample's weight. */
  size_t weighted_mask;
  /* A padding mask reaching the loss (an Embedding's mask_zero of the
   * model input, or a Masking of it): the node holding it, -1 for none;
   * per local slice, its logical replica's real samples over its unmasked
   * positions (Keras' loss: the masked positions' sum over their count),
   * which load_batch counts from the input. */
  int loss_mask;
  double *mask_factor;
  int fused_softmax; /* the loss reads the output layer's logits */
} mxu_head_plan;

typedef struct mxu_step_result mxu_step_result; /* below */

typedef struct mxu_plan {
  /* Rows per replica: the global batch / replicas. Here `replicas` counts
   * slices: each logical replica's rows may run in `split` slices
   * (compile.c says when), slice k belonging to logical replica k / split;
   * everything else treats a slice as a replica. */
  int batch;
  float scale; /* the running step's loss scale (1 / global batch) */
  int split;
  const mxu_backend *backend;
  mxu_arena layout;     /* sizes and offsets; replicas commit copies */
  mxu_node_plan *nodes; /* layer_count: what was decided per node */
  size_t *act;          /* layer_count offsets: each node's output */
  size_t *grad;         /* same, for gradients */
  /* Per node: how many read its output (a model output counts as a
   * reader: the loss); and its inputs' edges (MXU_MAX_INPUTS a node). */
  int *consumers;
  mxu_edge *edges;
  size_t mask; /* 1 for real samples, 0 for padding */
  /* Each sample's weight in the loss (Keras' sample_weight times its
   * class_weight), when this batch has any (weighted); else unread. */
  size_t weight;
  int weighted;
  /* Keras' class_weight while fit trains (NULL otherwise): by class. */
  const float *class_weight;
  mxu_head_plan head[MXU_MAX_OUTPUTS]; /* model->head_count */
  /* The strategy: `replicas` logical replicas, of which this process runs
   * local_count starting at local_first (all of them without MPI), on
   * `workers` threads; oneDNN gets intra_threads inside each. */
  int replicas, local_first, local_count;
  int workers, intra_threads;
  mxu_replica *replica; /* local_count */
  /* The metrics' tallies (tally_values floats: each head's in turn) of
   * the last step, summed over every replica in logical order; stage:
   * every replica's, gathered. NULL without a tally. */
  int tally_values;
  double *tallies;
  float *tally_stage;
  /* A step's results: every replica's gathered (replicas), then the local
   * ones' (local_count), off the stack (a result is kilobytes). */
  mxu_step_result *results;
  /* strategy/'s staging for exchanges between processes, sized at
   * compile for the largest one, so steps do not allocate. */
  float *exchange;
  size_t exchange_floats;
} mxu_plan;

struct mxu_model {
  char name[MXU_NAME_SIZE];
  /* Built by mxu_sequential (each layer reads the one before, Keras'
   * Sequential) or as a graph (mxu_functional). */
  int sequential;
  /* Read from a file tf.keras 2 wrote, whose names may mean other things
   * than Keras 3's (hard_sigmoid). */
  int keras2_names;
  /* The graph: nodes in topological order; inputs are InputLayer nodes. */
  mxu_layer *layers;
  int layer_count, layer_capacity;
  int inputs[MXU_MAX_INPUTS], input_count;
  /* Set by mxu_model_outputs; a model without is read at its last node. */
  int outputs[MXU_MAX_INPUTS], output_count;
  /* Models used as layers (Keras: a Sequential or Functional called like a
   * layer), inlined: scopes[0] is the model itself. New nodes join
   * building_scope. */
  mxu_scope *scopes;
  int scope_count, building_scope;
  /* Set while Keras' TimeDistributed wraps the layers applied next
   * (mxu_time_distributed). */
  int time_distributed;

  int compiled;
  mxu_compile_config compile; /* compile.metrics point at heads[0].metric */
  /* The outputs the loss scores: every model output, in order. */
  mxu_head heads[MXU_MAX_OUTPUTS];
  int head_count;
  const mxu_backend *backend;
  mxu_param *params;
  int param_count;
  /* trainable_count each; slot_u is AMSGrad's velocity_hat and centered
   * RMSprop's average_gradient; average the weights' moving average
   * (use_ema). */
  float *weights, *grads, *slot_m, *slot_v, *slot_u, *average;
  /* The pjrt backend's devices and program (device.c); NULL otherwise. */
  struct mxu_device *device;
  /* Regularized weights (their penalties join the loss), and room for
   * the norms of the largest constrained weight (regularizers.c). */
  int penalized;
  double *norms;
  /* Nadam's product of its momentum schedule, as of step u_product_step
   * (optimizers.c). */
  float u_product;
  int64_t u_product_step;
  float step_rate; /* the learning rate of the step being applied */
  float *state;    /* state_count */
  int64_t trainable_count, state_count;
  /* Gradient buffers hold shadow_count more values: the weight gradients
   * of shared layers' other calls (see mxu_layer.owner). */
  int64_t shadow_count;
  int64_t iterations; /* optimizer steps taken (Adam's t) */
  int stop_training;  /* Keras' model.stop_training, set by callbacks */

  mxu_plan plan;
  mxu_history history;
  /* Text the compile settings read with the model point at (metrics
   * logged under their own names: "roc=auc"); freed with the model. */
  char **kept;
  int kept_count;

  /* mxu_profile_enable: seconds of local replica 0's layers, forward at
   * [2 * layer] and backward at [2 * layer + 1], over profile_steps
   * training steps; the strategy adds to them while `profiling` is set. */
  double *profile;
  int64_t profile_steps;
  int profiling;
};

/* The samples a layer runs for a batch of `batch`: a TimeDistributed
 * image layer's each step an image of its own. */
static inline int mxu_layer_rows(const mxu_layer *layer, int batch) {
  return layer->time_steps ? batch * layer->time_steps : batch;
}

/* A copy of text that lives as long as the model; NULL when out of
 * memory. */
const char *mxu_model_keep(mxu_model *model, const char *text);
/* The node the loss and predict read: the model's first output. */
int mxu_model_output(const mxu_model *model);
/* Output j's node (the model's j-th output; a model without outputs set
 * has one, its last node); -1 for no such output. */
int mxu_model_output_node(const mxu_model *model, int j);
/* The values a row of head h's output holds, which its metrics compare
 * (the output's per position of a sequence's). */
int64_t mxu_head_row_values(const mxu_model *model, int h);
/* What output k's loss is: the config's entry for it, or the config's
 * one loss (weight 1, the one metric, "accuracy" when none is named). */
mxu_output_loss mxu_output_spec(const mxu_compile_config *c, int k);
/* Its input 0's node, shape and name, for single-input code (fit). */
const mxu_layer *mxu_model_input(const mxu_model *model);
/* Keras' model.layers[i] as a node index (a Sequential's InputLayer is
 * not one); -1 when out of range or a model used as a layer. */
int mxu_model_node(const mxu_model *model, int layer);
/* Whether each tensor (node t's output, has_grad[t]) carries a gradient:
 * one that a trainable weight is computed from (the tensor of a layer
 * that has one, or of a layer reading such a tensor), so not a model input
 * nor what layers without weights make of it (Rescaling, Normalization,
 * ZeroPadding2D before the first conv: no input gradient is computed for
 * them); with keep_gradients, for inspection, every tensor but a model
 * input. An InputLayer inside a model used as a layer passes on the
 * gradient of what it views. */
void mxu_tensors_with_grad(const mxu_model *model, unsigned char *has_grad);
/* The node whose output a node's run writes: the last it fused, or its
 * own. */
static inline int mxu_layer_writes(const mxu_layer *layer) {
  const mxu_node_plan *p = layer->compiled;
  return p && p->fused_layers ? p->fused[p->fused_layers - 1]->index
                              : layer->index;
}
/* A node that is another call of a shared layer (not the owner). */
static inline int mxu_layer_is_call(const mxu_layer *layer) {
  return layer->owner != layer->index;
}

/* Model used as a layer, for the JSON reader: opens a scope named `name`
 * whose nodes follow until mxu_scope_end, which gives its output node. */
mxu_status mxu_scope_begin(mxu_model *model, const char *name, int sequential);
mxu_status mxu_scope_end(mxu_model *model, int output);
/* An InputLayer of the open scope: a view of `outer`, the tensor the
 * model used as a layer is called on, which must have `shape`. */
mxu_tensor_id mxu_scope_input(mxu_model *model, const char *name,
                              mxu_shape shape, mxu_tensor_id outer);
/* Whether node i is one of its scope's listed layers (Keras'
 * model.layers of the model it belongs to): not a shared layer's other
 * call, nor a Sequential's InputLayer. */
int mxu_layer_listed(const mxu_model *model, int i);

/* The weights of layer item (a node, or -1 - scope) in Keras' order, as
 * indices into model->params; returns how many. */
int mxu_model_layer_params(const mxu_model *model, int item, int *out);
/* Keras' model.layers of scope s in order, into out (room for the
 * model's node count): a node index, or -1 - c for model c used as a
 * layer. Returns how many. */
int mxu_scope_layers(const mxu_model *model, int scope, int *out);
/* A layer item's name (a node's, or a model used as a layer's). */
const char *mxu_model_item_name(const mxu_model *model, int item);
/* The scope directly inside `scope` that node i belongs to (0: none, i
 * is in `scope` itself or outside it). */
int mxu_scope_child(const mxu_model *model, int scope, int i);
/* Keras' layer name, node index and tensor index (in *tensor) for tensor
 * t (a node's output) as seen from scope: a model used as a layer there
 * names its output by its own name; tf.keras counts that call as its node
 * 1, Keras 3 as 0; an OutputPart is its layer's tensor of its index. */
const char *mxu_scope_tensor(const mxu_model *model, int scope, int t,
                             int keras3, int *index, int *tensor);

/* Marks a graph read from a Sequential model's JSON as one: a chain from
 * its one input, which is then not one of Keras' model.layers. */
mxu_status mxu_model_mark_sequential(mxu_model *model);

/* Plans for a global batch size (compile calls it; fit and evaluate
 * replan when asked for another batch size), which must divide by the
 * replica count. */
mxu_status mxu_plan_build(mxu_model *model, int batch);
void mxu_plan_release(mxu_model *model);

/* The pieces of one step on one replica, which the strategy runs over
 * every replica: a layer's forward or backward, and the loss. Dropout and
 * every other random draw are keyed by (seed, epoch, step, logical replica,
 * layer), never by thread. */
typedef struct mxu_step_key {
  int training;
  uint64_t seed;
  uint32_t epoch, step;
} mxu_step_key;

/* What layer `layer` sees on this replica for this step. */
mxu_layer_run mxu_replica_run(mxu_model *model, mxu_replica *replica, int layer,
                              const mxu_step_key *key);
void mxu_replica_forward(mxu_model *model, mxu_replica *replica, int layer,
                         const mxu_step_key *key);
void mxu_replica_backward(mxu_model *model, mxu_replica *replica, int layer,
                          const mxu_step_key *key);
/* Bytes of a gradient buffer: the trainable values and the shadows. */
static inline size_t mxu_model_grad_bytes(const mxu_model *model) {
  return (size_t)(model->trainable_count + model->shadow_count) * sizeof(float);
}

/* After a replica's whole backward: each shared layer's other calls'
 * weight gradients added to the owner's, in node order. */
void mxu_replica_sum_shared(mxu_model *model, mxu_replica *replica);
/* After a node's backward: the gradients it wrote into partial buffers
 * (inputs that other nodes read too) added to their inputs' gradients. */
void mxu_replica_add_partials(mxu_model *model, mxu_replica *replica,
                              const mxu_layer *layer, const mxu_layer_run *run);
/* Marks rows >= rows as padding. */
void mxu_replica_set_rows(mxu_model *model, mxu_replica *replica, int64_t rows);

/* A head's loss (unweighted) over a batch, the sum over its real samples;
 * count: the real samples, or under a padding mask the unmasked positions
 * over positions a sample (Keras weighs a metric by the mask); each
 * metric's sum and what it divides by over an epoch (count for the mean
 * metrics, where a correct prediction counts 1; the predicted or the true
 * positives for precision and recall). */
typedef struct mxu_head_sums {
  double loss, count;
  double metric[MXU_MAX_METRICS], divisor[MXU_MAX_METRICS];
} mxu_head_sums;

/* The loss of a replica's batch: the heads' weighted sum and the activity
 * penalties, summed over its real samples, and each head's sums; in
 * training, also the gradient of loss * scale with respect to each output
 * (its logits where the softmax is fused). */
struct mxu_step_result {
  double loss_sum;
  mxu_head_sums heads[MXU_MAX_OUTPUTS];
  mxu_status status; /* a device's failure (pjrt); MXU_OK on the host */
};

mxu_step_result mxu_replica_loss(mxu_model *model, mxu_replica *replica,
                                 const mxu_step_key *key, float scale);
/* total += r, every sum. */
void mxu_step_result_add(mxu_step_result *total, const mxu_step_result *r);
/* Whether a node's activity regularizer is set. */
static inline int mxu_has_activity(const mxu_layer *layer) {
  return layer->activity.l1 != 0 || layer->activity.l2 != 0;
}

/* The activation a node computes and nothing else, for another node to
 * fuse: an Activation's, MXU_RELU for a ReLU layer with no threshold,
 * slope or cap, MXU_RELU6 for ReLU(6.); else MXU_LINEAR (activations.c).
 * Which of them a fusing node takes, its backend's descriptor says. */
mxu_activation mxu_layer_activation_kind(const mxu_layer *layer);

/* ---- initializers.c ---------------------------------------------------- */

/* The given initializer, or fallback where it is MXU_INIT_DEFAULT. */
mxu_initializer mxu_init_or(const mxu_initializer *given,
                            mxu_initializer fallback);
/* Keras' defaults: glorot_uniform, zeros, ones. */
mxu_initializer mxu_init_glorot_uniform(void);
mxu_initializer mxu_init_zeros(void);
mxu_initializer mxu_init_ones(void);
/* Fills values (the shape's count) as init says; unseeded draws come
 * from the stream (seed, INIT, layer, index). MXU_ERR_SHAPE for an
 * identity of a weight that is not 2-D, MXU_ERR_NOMEM. */
mxu_status mxu_init_fill(const mxu_initializer *init, const mxu_shape *shape,
                         uint64_t seed, int layer, int index, float *values);
/* An initializer value in a layer's JSON config (absent: left as is; a
 * name or {"class_name", "config"}), and its Keras form for writing. */
mxu_status mxu_json_initializer(const mxu_json_where *where,
                                const cJSON *object, const char *key,
                                mxu_initializer *out);
void mxu_json_put_initializer(mxu_json_out *out, cJSON *object, const char *key,
                              const mxu_initializer *init);

/* ---- regularizers.c ---------------------------------------------------- */

/* A weight's regularizer and constraint in a layer's JSON config (absent
 * or null: none), and their Keras form (null for none). */
mxu_status mxu_json_regularizer(const mxu_json_where *where,
                                const cJSON *object, const char *key,
                                mxu_regularizer *out);
void mxu_json_put_regularizer(mxu_json_out *out, cJSON *object, const char *key,
                              const mxu_regularizer *r);
mxu_status mxu_json_constraint(const mxu_json_where *where, const cJSON *object,
                               const char *key, mxu_constraint *out);
void mxu_json_put_constraint(mxu_json_out *out, cJSON *object, const char *key,
                             const mxu_constraint *c);
/* The penalty of every regularized weight at the current weights. */
double mxu_regularization_loss(const mxu_model *model);
/* Adds the penalties' gradient to model->grads over [begin, end) of the
 * trainable buffer (elementwise: any split gives the same). */
void mxu_regularization_grad(const mxu_model *model, int64_t begin,
                             int64_t end);
/* Applies every weight's constraint (after an update). */
void mxu_apply_constraints(mxu_model *model);

/* ---- loss.c: the target losses and the metrics ---------------------------
 */

/* A target loss over rows of `values` outputs, `last` of them on the last
 * axis. */
typedef struct mxu_loss_spec {
  mxu_output_loss o;
  int64_t values, last;
} mxu_loss_spec;

/* Every loss but the two softmax cross-entropies: each row's loss, and
 * grad = d(loss * scale)/dy; rows with mask 0 get zeros. */
void mxu_target_loss(const mxu_loss_spec *spec, int64_t rows, const float *y,
                     const float *targets, const float *mask, float scale,
                     float *loss, float *grad);
/* The two cross-entropies the backend computes with a softmax (fused with
 * a final one, as Keras does); the other losses are mxu_target_loss's. */
int mxu_loss_is_softmax(mxu_loss loss);
/* Whether a loss takes label_smoothing: the categorical and binary
 * cross-entropies and their focal kinds. */
int mxu_loss_smooths(mxu_loss loss);
/* Whether a loss is of each vector of the last axis as a whole (the
 * categorical hinge, cosine similarity and categorical focal
 * cross-entropy), summed over it, rather than of each value. */
int mxu_loss_of_vectors(mxu_loss loss);
/* Whether a step of `width` values is kept by a mask: any value other
 * than `padding` (Masking's mask_value; an Embedding's id 0, width 1). */
int mxu_step_kept(const float *x, int64_t width, float padding);
/* The rows a softmax cross-entropy scores per sample: the positions of an
 * output of several ((steps, classes): its steps), each a row of the last
 * axis, whose losses and metrics Keras means per sample; so too any loss
 * under a padding mask (the head's loss_mask), which weighs the
 * positions; 1 otherwise (the other losses mean over every value alike).
 * Of head h (0: the first output's). */
int64_t mxu_loss_positions(const mxu_model *model, int h);
/* Whether head h's loss means over the rows it keeps, each weighed by its
 * mask_factor: under a padding mask (loss_mask), or ignore_class. */
int mxu_loss_keeps_rows(const mxu_model *model, int h);
/* Categorical label smoothing: out = t (1 - s) + s / k. */
void mxu_smooth_targets(int64_t rows, int k, float smoothing,
                        const float *targets, float *out);
/* The metric's sum over the rows, each by its mask (0: left out; a
 * weighted metric's, the sample's weight), and what it divides by
 * (precision's and recall's positives, the mean metrics' masks' sum;
 * each row's value in [0, 1] for the accuracies). */
double mxu_metric_sum(mxu_metric_kind kind, const mxu_metric_options *options,
                      int64_t rows, int64_t k, const float *y,
                      const int32_t *labels, const float *targets,
                      const float *mask, double *divisor);
/* The metric's value from its sums over an epoch (0 where it divides by
 * 0, as Keras' divide_no_nan). */
double mxu_metric_result(mxu_metric_kind kind, double sum, double divisor);
/* An AUC's counts of rows, each by its mask, added into curve (MXU_AUC_VALUES:
 * the true, then the false weight of each threshold bucket). */
void mxu_auc_counts(int64_t rows, int64_t k, const float *y,
                    const float *targets, const float *mask, int from_logits,
                    float *curve);
/* The area under the curve of counts: ROC (MXU_METRIC_AUC: Keras'
 * interpolation, the trapezoids between thresholds) or precision-recall
 * (MXU_METRIC_AUC_PR: Keras' interpolate_pr_auc). */
double mxu_auc_result(mxu_metric_kind kind, const double *curve);
/* Whether the metric is a mean of each row's value (else counts). */
int mxu_metric_is_mean(mxu_metric_kind kind);
/* Whether it is an AUC, whose counts are a curve (mxu_auc_counts). */
int mxu_metric_has_curve(mxu_metric_kind kind);
/* The kind a metric name means with this loss and output size (Keras'
 * resolution of "accuracy"); MXU_ERR_UNSUPPORTED naming what is. */
mxu_status mxu_metric_kind_of(const char *name, mxu_loss loss, int64_t outputs,
                              mxu_metric_kind *out);
/* A metric as compile takes it: a name, or "NAME=METRIC" (METRIC logged
 * as NAME, Keras' name= of a metric object), METRIC with its options in
 * parentheses where it takes some ("f1_score(average=macro)"): the name
 * logged, the kind and the options (options may be NULL). */
mxu_status mxu_metric_parse(const char *spec, mxu_loss loss, int64_t outputs,
                            char log[MXU_METRIC_LOG_SIZE],
                            mxu_metric_kind *kind, mxu_metric_options *options);
/* The length of the name a metric's text is logged under ("roc" of
 * "roc=auc", "f1_score" of "f1_score(average=macro)"). */
size_t mxu_metric_logged_length(const char *spec);
/* The floats of the metric's tally for outputs of `values` a row: an
 * AUC's curve (MXU_AUC_VALUES), an F-score's true positives, false
 * positives, false negatives and targets per value, a MeanIoU's the same
 * per class (4 values each; a device returns them as two equal halves), a
 * BinaryIoU's for its two classes (8); 0 for a metric of sums. */
int64_t mxu_metric_tally_size(mxu_metric_kind kind, int64_t values);
/* Its counts of rows (k values each; a row's class label in labels, its
 * targets in targets), each by its mask (0: left out; a weighted
 * metric's, the sample's weight), added into tally. */
void mxu_metric_tally(mxu_metric_kind kind, const mxu_metric_options *options,
                      int64_t rows, int64_t k, const float *y,
                      const int32_t *labels, const float *targets,
                      const float *mask, float *tally);
/* Whether the metric is a MeanIoU (either kind). */
int mxu_metric_is_iou(mxu_metric_kind kind);
/* Its value from the tally of an epoch. */
double mxu_tally_result(mxu_metric_kind kind, const mxu_metric_options *options,
                        const double *tally, int64_t values);
/* The loss a metric of a loss's name computes (binary_crossentropy,
 * mape, msle, logcosh, poisson), of probabilities. */
mxu_loss mxu_metric_loss(mxu_metric_kind kind);
/* Keras 3's direction of the metric (its _direction): 1 up (the
 * accuracies, precision, recall, the AUCs), -1 down (the errors and the
 * cross-entropy), 0 none (the counts). */
int mxu_metric_direction(mxu_metric_kind kind);
/* The supported names, for messages; the table's own copy of a supported
 * name (a string that lives as long as the program), or NULL. */
const char *mxu_metric_names(void);
/* The Keras function a kind is ("binary_accuracy", "mean_absolute_error"):
 * tf.keras 2's metric wrappers name it. */
const char *mxu_metric_function(mxu_metric_kind kind);
const char *mxu_metric_name(const char *name);
/* Whether Keras' metric name alone computes `metric` (loss.c's names):
 * "mae" does mean_absolute_error, "accuracy" any accuracy (Keras resolves
 * it by the loss, as it did the function a file wrote). */
int mxu_metric_says(const char *name, const char *metric);
/* Whether the metric reads class labels (else the targets). */
int mxu_metric_needs_labels(mxu_metric_kind kind);

/* ---- programs.c ---------------------------------------------------------- */

/* The training step as one StableHLO program for `replicas` replicas of
 * `batch` rows, run up to `steps` times in an on-device loop (MLIR text,
 * the caller's to free; mxu_hlo_print_loop). Parameters: every weight
 * (model->params order), the trainable ones' optimizer slots kind by
 * kind, then each step's (stacked `steps` deep): its rate (Adam's with its
 * bias correction folded in), x, the labels (int32) or targets, the rows'
 * mask, the loss scale (1 / global batch) and the noise of each node that
 * draws it (emit_noise), in node order; last the steps to run. Results:
 * every weight's new value, the new slots, each step's loss sum and metric
 * sum over every replica. MXU_ERR_UNSUPPORTED names what is not emitted. */
mxu_status mxu_model_train_program(const mxu_model *model, int batch,
                                   int replicas, int steps, char **text);
/* Evaluation (predict 0) or prediction (1) as one StableHLO program for
 * `replicas` replicas of `batch` rows: parameters every weight, x, and for
 * evaluation the labels (int32) or targets and the rows' mask; results
 * the loss sum and metric sum over every replica, or each output's
 * values. */
mxu_status mxu_model_eval_program(const mxu_model *model, int batch,
                                  int replicas, int predict, char **text);
/* The optimizer state the program keeps per trainable weight, in order:
 * mxu_slot_buffer's k of each slot in use (MXU_SLOTS: use_ema's average);
 * returns how many (at most MXU_SLOTS + 1). */
int mxu_model_slot_kinds(const mxu_model *model, int *kinds);

/* ---- program_loss.c ------------------------------------------------------ */

/* What a program's loss reads: the output's value y (batch first), the
 * logits before its softmax (0: none), the labels (int32) or targets, the
 * rows' mask. */
typedef struct mxu_emit_loss_input {
  mxu_hlo *h;
  int batch;
  mxu_hlo_value y, logits, labels, mask;
  mxu_hlo_value weights; /* each sample's weight in the loss (batch) */
  /* A padding mask reaching the loss (the head's loss_mask): the values
   * of the node that holds it, (batch, steps), 0 where masked; else 0. */
  mxu_hlo_value padding;
} mxu_emit_loss_input;
/* Head `head`'s compiled loss (unweighted) and metric sums over the rows
 * whose mask is 1, as loss.c computes each row's, into sums: the loss,
 * the count (mxu_head_sums'), then each metric's sum and divisor;
 * MXU_ERR_UNSUPPORTED if not emitted. */
mxu_status mxu_emit_loss(const mxu_model *model, int head,
                         const mxu_emit_loss_input *in, mxu_hlo_value *sums);
/* The values mxu_emit_loss gives head `head`: 2 + 2 * its metrics. */
int mxu_head_sum_count(const mxu_model *model, int head);
/* The loss sums a program returns: the total, then each head's
 * mxu_emit_loss values. */
int mxu_program_sum_count(const mxu_model *model);

/* ---- updates.c ----------------------------------------------------------- */

/* The optimizer's step in the program takes these per-step scalars from
 * the host (mxu_step_hypers): the rate; A Adam's rate with its bias
 * correction folded in, Adamax's 1 - beta_1^t, Nadam's u_t; B, C, D, E
 * Nadam's u_t+1, u_product_t+1, u_product, beta_2^t; use_ema's momentum,
 * whether the weights take the average, whether it starts from them. */
enum {
  MXU_HYPER_LR,
  MXU_HYPER_A,
  MXU_HYPER_B,
  MXU_HYPER_C,
  MXU_HYPER_D,
  MXU_HYPER_E,
  MXU_HYPER_EMA_MOMENTUM,
  MXU_HYPER_EMA_OVERWRITE,
  MXU_HYPER_EMA_START,
  MXU_HYPERS
};
/* The weights' penalties (L1, L2) as a scalar, 0 when none. */
mxu_hlo_value mxu_emit_penalty(mxu_hlo *h, const mxu_model *model,
                               const mxu_hlo_value *w);
/* clipnorm and global_clipnorm over the `count` trainable weights'
 * gradients g, in place. */
void mxu_emit_clip_norms(mxu_hlo *h, const mxu_model *model, int count,
                         mxu_hlo_value *g);
/* Weight p's step from its gradient g: its penalty's gradient, clipvalue,
 * weight decay, the optimizer's update and use_ema; slot[k] (by
 * mxu_slot_buffer's k) replaced by their new values; returns the new w. */
mxu_hlo_value mxu_emit_update(mxu_hlo *h, const mxu_model *model,
                              const mxu_param *p, const mxu_hlo_value *hyper,
                              mxu_hlo_value w, mxu_hlo_value g,
                              mxu_hlo_value *slot);
/* w under p's constraint (after the update), as mxu_apply_constraints. */
mxu_hlo_value mxu_emit_constraint(mxu_hlo *h, const mxu_param *p,
                                  mxu_hlo_value w);
/* A tensor of `batch` rows of shape s, as the programs' values have it. */
mxu_hlo_shape mxu_batch_shape(int batch, const mxu_shape *s);
/* A batch's labels (int32) for the sparse cross-entropy, else its float
 * targets of the output's width. */
mxu_hlo_shape mxu_labels_shape(const mxu_model *model, int head, int batch);
/* The noise input a node's emitter takes in training, for `batch` rows:
 * its stream's 4 words (noise_is_stream), or a value per output value. */
mxu_hlo_shape mxu_noise_shape(const mxu_layer *l, int batch);
/* Whether a node's emitter takes host-drawn noise in training. */
static inline int mxu_layer_draws_noise(const mxu_layer *l) {
  return l->cls->emit_noise && l->cls->emit_noise(l, NULL, NULL);
}

/* ---- device.c ------------------------------------------------------------ */

typedef struct mxu_device mxu_device;
typedef struct mxu_pjrt mxu_pjrt; /* backend/pjrt/runtime.h */
/* At compile, for the pjrt backend: the plugin, a device per replica and
 * the training step compiled; freed with the plan (the host given the
 * devices' weights first), and opened again by fit for a plan of another
 * batch. */
mxu_status mxu_device_open(mxu_model *model);
void mxu_device_free(mxu_model *model);
/* The devices' weights and slots to the host, if they are ahead of it
 * (steps applied since): before anything on the host reads them. */
mxu_status mxu_device_sync(mxu_model *model);
/* The host's weights may change (a new fit, a restore, callbacks): synced
 * first, then sent to the devices before the next program runs. */
mxu_status mxu_device_invalidate(mxu_model *model);
/* Training steps run on the devices `steps` at a time, one host round
 * trip each (steps_per_execution; an on-device loop): the most one run
 * takes (0 without a device). */
int mxu_device_steps(const mxu_model *model);
/* The loaded batch as step `step` of the next run (its rate from the
 * iteration model->iterations + step). */
void mxu_device_stage(mxu_model *model, int step, const mxu_step_key *key,
                      float scale);
/* The first `steps` staged steps run from the devices' state, each step's
 * loss and metric sums and metric count returned; kept until
 * mxu_device_apply makes the result the state (and copies the weights and
 * slots to the host). A run not applied is dropped by the next. */
mxu_status mxu_device_run(mxu_model *model, int steps,
                          mxu_step_result *results);
/* The plugin's client the devices belong to. */
mxu_pjrt *mxu_device_client(const mxu_model *model);
/* The run's result becomes the devices' state; the host's copy is read
 * back only when needed (mxu_device_sync). */
mxu_status mxu_device_apply(mxu_model *model);
/* The loaded batch evaluated on the devices (their weights): the loss and
 * metric sums and the metric count over every replica. The program is
 * compiled on first use. */
mxu_status mxu_device_evaluate(mxu_model *model, mxu_step_result *result);
/* Step `step` of the last run's tallies into model->plan.tallies (an
 * evaluation's are there already). */
void mxu_device_tallies(mxu_model *model, int step);
/* The loaded batch's outputs (rows of the global batch hold samples):
 * each output's values into outputs[j]. */
mxu_status mxu_device_predict(mxu_model *model, int64_t rows,
                              float *const *outputs);

/* ---- optimizers.c ------------------------------------------------------ */

/* The optimizer's slots: what Keras 3 (keras3), tf.keras 2.11+ (keras2)
 * and tf.keras' legacy optimizers (legacy) call the ones it keeps in
 * slot_m, slot_v and slot_u (NULL: none), whether Keras keeps each
 * weight's first
 * two together (interleaved; a third always follows as a block),
 * whether a Nadam u_product follows them, and whether the weights'
 * moving average ("average", model->average) comes before them all, as
 * every Keras builds it (use_ema). */
enum { MXU_SLOTS = 3 };
typedef struct mxu_slot_spec {
  const char *keras3[MXU_SLOTS], *keras2[MXU_SLOTS], *legacy[MXU_SLOTS];
  int interleaved, u_product, average;
} mxu_slot_spec;
/* The model's buffer for slot k of a spec (slot_m, slot_v, slot_u; k
 * MXU_SLOTS: use_ema's average). */
float *mxu_slot_buffer(const mxu_model *model, int k);
mxu_slot_spec mxu_optimizer_slots(const mxu_optimizer_config *o);
/* The slots as a fresh optimizer has them (zeros; Adagrad's initial
 * accumulator value). */
void mxu_optimizer_reset(mxu_model *model);
/* Adam's (and AdamW's) rate at step t with Keras' bias correction folded
 * in, in double as the update computes it. */
double mxu_adam_rate(const mxu_optimizer_config *o, double lr, double t);
/* The learning rate of the next step: the schedule's at the iteration
 * count, or the fixed rate. */
float mxu_optimizer_rate(const mxu_model *model);
/* The per-step scalars of step t (1 for the first) the pjrt program's
 * update takes (MXU_HYPER_*), as the host's update would compute them. */
void mxu_step_hypers(const mxu_model *model, int64_t t, float *out);
/* Before a step's updates, serially: the step's rate, the iteration
 * count, the gradient clipped by norm (clipnorm, global_clipnorm) and
 * Nadam's schedule product brought to the step. */
void mxu_optimizer_begin_step(mxu_model *model);
/* When fit ends: the weights replaced by their moving average (use_ema),
 * as Keras' finalize_variable_values. */
void mxu_optimizer_finalize(mxu_model *model);
/* Nadam's schedule product as of model->iterations (Keras' u_product). */
float mxu_nadam_product(const mxu_model *model);
/* The optimizer update of weights [begin, end) from model->grads, for
 * optimizer step model->iterations (the caller counts it): penalties'
 * gradients, clipvalue, weight decay, then the rule. Elementwise, so any
 * split of the buffer gives the same weights. */
void mxu_optimizer_apply_range(mxu_model *model, int64_t begin, int64_t end);

static inline float *mxu_param_values(const mxu_model *model,
                                      const mxu_param *param) {
  return (param->trainable ? model->weights : model->state) + param->offset;
}

/* Pointers into a replica's arena. */
static inline float *mxu_replica_floats(const mxu_replica *replica,
                                        size_t offset) {
  return mxu_arena_floats(&replica->arena, offset);
}
/* ... and into local replica 0's, for a one-replica model. */
static inline float *mxu_plan_floats(mxu_model *model, size_t offset) {
  return mxu_replica_floats(&model->plan.replica[0], offset);
}

#endif
