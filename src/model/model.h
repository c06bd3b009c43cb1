/* model.h — the layer contract and the compiled model: what a layer
 * declares, the static plan compile builds from it, and the step that runs
 * the plan. Internal to libmxu. */
#ifndef MXU_MODEL_H
#define MXU_MODEL_H

#include "backend/backend.h"
#include "core/core.h"
#include "mxu.h"

#define MXU_MAX_LAYER_PARAMS 4
#define MXU_MAX_LAYER_OPS 3
#define MXU_MAX_LAYER_SCRATCH 4
#define MXU_NAME_SIZE 128

typedef enum mxu_initializer {
  MXU_INIT_ZEROS = 0,
  MXU_INIT_ONES,
  MXU_INIT_GLOROT_UNIFORM
} mxu_initializer;

/* One weight as Keras sees it: name, shape, initialiser, trainability. */
typedef struct mxu_param_decl {
  const char *name; /* kernel, bias, gamma, beta, moving_mean, ... */
  mxu_shape shape;
  mxu_initializer init;
  int trainable;
  int64_t fan_in, fan_out;
} mxu_param_decl;

typedef struct mxu_layer mxu_layer;

/* What one layer's forward or backward sees: its input and output, their
 * gradients, its weights and their gradients (trainable ones first, as
 * declared; dw[i] is NULL for a non-trainable weight) and this replica's
 * arena, where the offsets the layer reserved at plan time point. */
typedef struct mxu_layer_run {
  const mxu_backend *backend;
  int training;
  const float *x;
  float *y;
  const float *dy;
  float *dx;   /* always a buffer of the input's size */
  int need_dx; /* 0 for the first layer: a layer may skip dx then */
  float *w[MXU_MAX_LAYER_PARAMS];
  float *dw[MXU_MAX_LAYER_PARAMS];
  unsigned char *arena;
  mxu_rng rng;       /* this (seed, epoch, step, replica, layer) stream */
  int fused_softmax; /* backward: dy is already the gradient of the logits */
} mxu_layer_run;

typedef struct mxu_layer_class {
  const char *class_name; /* Keras' class name */
  /* in_shape -> out_shape; rejects what the layer cannot take. */
  mxu_status (*infer)(mxu_layer *layer);
  /* Fills up to MXU_MAX_LAYER_PARAMS declarations in Keras order. */
  int (*declare)(const mxu_layer *layer, mxu_param_decl *decls);
  /* Creates backend ops for `batch` samples and reserves per-replica
   * scratch in the arena layout. */
  mxu_status (*plan)(mxu_layer *layer, const mxu_backend *backend, int batch,
                     mxu_arena *layout);
  void (*forward)(mxu_layer *layer, const mxu_layer_run *run);
  void (*backward)(mxu_layer *layer, const mxu_layer_run *run);
  /* For a layer that ends in a softmax: the pre-softmax values of this run,
   * which a cross-entropy loss uses instead of the probabilities, as
   * Keras does. NULL for other layers. */
  const float *(*logits)(const mxu_layer *layer, const mxu_layer_run *run);
} mxu_layer_class;

typedef struct mxu_dropout_config {
  const char *name;
  float rate;
} mxu_dropout_config;

struct mxu_layer {
  const mxu_layer_class *cls;
  char name[MXU_NAME_SIZE];
  union {
    mxu_conv2d_config conv;
    mxu_pool2d_config pool;
    mxu_dense_config dense;
    mxu_batchnorm_config batchnorm;
    mxu_dropout_config dropout;
    mxu_activation activation;
  } config;
  int is_max_pool;
  mxu_shape in_shape, out_shape; /* without the batch dimension */

  /* compiled */
  int index;       /* position in the model */
  int param_first; /* index into the model's parameter table */
  int param_count;
  int batch;
  mxu_op *ops[MXU_MAX_LAYER_OPS];
  size_t scratch[MXU_MAX_LAYER_SCRATCH]; /* offsets in the replica arena */
};

/* The registry: one row per layer class. */
extern const mxu_layer_class mxu_conv2d_class;
extern const mxu_layer_class mxu_max_pooling2d_class;
extern const mxu_layer_class mxu_average_pooling2d_class;
extern const mxu_layer_class mxu_activation_class;
extern const mxu_layer_class mxu_flatten_class;
extern const mxu_layer_class mxu_dense_class;
extern const mxu_layer_class mxu_dropout_class;
extern const mxu_layer_class mxu_batch_normalization_class;
const mxu_layer_class *mxu_layer_class_find(const char *class_name);

/* Frees a layer's backend ops. */
void mxu_layer_release_ops(mxu_layer *layer, const mxu_backend *backend);

/* One weight of the model: a view into the trainable buffer (weights, with
 * grads, and the optimizer's slots at the same offsets) or the
 * non-trainable one (state). */
typedef struct mxu_param {
  int layer;
  const char *name;
  mxu_shape shape;
  int trainable;
  int64_t offset, count;
} mxu_param;

/* A replica's activations and gradients, laid out at compile. */
typedef struct mxu_replica {
  mxu_arena arena;
} mxu_replica;

typedef struct mxu_plan {
  int batch;
  const mxu_backend *backend;
  mxu_arena layout;      /* sizes and offsets; replicas commit copies */
  size_t *act;           /* layer_count + 1 offsets: input, each output */
  size_t *grad;          /* same, for gradients */
  size_t labels, onehot; /* targets of this batch */
  size_t mask;           /* 1 for real samples, 0 for padding */
  size_t probs, loss;    /* loss outputs per sample */
  int fused_softmax;     /* the loss reads the last layer's logits */
  mxu_replica replica;   /* one for now; the replicas issue adds more */
} mxu_plan;

struct mxu_model {
  char name[MXU_NAME_SIZE];
  char input_name[MXU_NAME_SIZE]; /* Keras' InputLayer, not in layers */
  mxu_shape input_shape;
  int has_input;
  mxu_layer *layers;
  int layer_count, layer_capacity;

  int compiled;
  mxu_compile_config compile; /* compile.metric points at metric below */
  char metric[64];
  const mxu_backend *backend;
  mxu_param *params;
  int param_count;
  float *weights, *grads, *slot_m, *slot_v; /* trainable_count each */
  float *state;                             /* state_count */
  int64_t trainable_count, state_count;
  int64_t iterations; /* optimizer steps taken (Adam's t) */

  mxu_plan plan;
  mxu_history history;
};

/* Plans for a batch size (compile calls it; fit and evaluate replan when
 * asked for another batch size). */
mxu_status mxu_plan_build(mxu_model *model, int batch);
void mxu_plan_release(mxu_model *model);

/* One forward over the planned batch already in the arena's input and
 * targets; training adds the backward. rows_valid marks samples beyond it
 * as padding. Returns the sum of the per-sample losses and writes the
 * number of correct predictions. */
typedef struct mxu_step_result {
  double loss_sum;
  int64_t correct;
} mxu_step_result;

mxu_step_result mxu_step_run(mxu_model *model, int training, int64_t rows,
                             float loss_scale, uint64_t seed, uint32_t epoch,
                             uint32_t step);
void mxu_optimizer_apply(mxu_model *model);

/* Pointers into the replica arena. */
static inline float *mxu_plan_floats(mxu_model *model, size_t offset) {
  return mxu_arena_floats(&model->plan.replica.arena, offset);
}

#endif
