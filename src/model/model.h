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
  mxu_op *const *ops; /* this replica's ops for the layer */
  mxu_rng rng;        /* this (seed, epoch, step, replica, layer) stream */
  int64_t row_offset; /* this slice's first row in its logical replica */
  int fused_softmax;  /* backward: dy is already the gradient of the logits */
} mxu_layer_run;

typedef struct mxu_layer_class {
  const char *class_name; /* Keras' class name */
  /* The output is the input's memory under another shape (Flatten):
   * compile gives both the same buffer and the layer copies nothing. */
  int view;
  /* in_shape -> out_shape; rejects what the layer cannot take. */
  mxu_status (*infer)(mxu_layer *layer);
  /* Fills up to MXU_MAX_LAYER_PARAMS declarations in Keras order. */
  int (*declare)(const mxu_layer *layer, mxu_param_decl *decls);
  /* Creates backend ops for `batch` samples in layer->ops and reserves
   * per-replica scratch in the arena layout. Compile calls it once per
   * replica from the same layout state, so every replica gets the same
   * offsets and its own ops (ops hold per-call state). */
  mxu_status (*plan)(mxu_layer *layer, const mxu_backend *backend, int batch,
                     mxu_arena *layout);
  void (*forward)(mxu_layer *layer, const mxu_layer_run *run);
  void (*backward)(mxu_layer *layer, const mxu_layer_run *run);
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
  int batch;                             /* per replica */
  int bf16;                              /* conv, dense: in bfloat16 */
  mxu_op *ops[MXU_MAX_LAYER_OPS];        /* while planning only */
  size_t scratch[MXU_MAX_LAYER_SCRATCH]; /* offsets in the replica arena */
  size_t stats_offset;                   /* see stats_floats */
  size_t sync_offset;                    /* see sync_floats */
  /* Fusion: a layer that runs the next fused_layers layers itself in one
   * backend op (Conv2D with its MaxPooling2D and relu) reads its input
   * and writes the last one's output; those layers are `absorbed` and do
   * nothing of their own. Compile proposes it, the layer's plan accepts. */
  int fused_layers;
  int absorbed;
  /* Between two Conv2D layers that the backend runs in its own activation
   * layout, the tensor stays in it (see mxu_conv2d_desc): the first's
   * native_out and the second's native_in. */
  int native_in, native_out;
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

/* One replica: its activations and gradients (an arena laid out at
 * compile, the same offsets in every replica), its backend ops and its
 * gradient of the weights. */
typedef struct mxu_replica {
  int index; /* slice id, 0 .. replicas-1 (logical replica: index / split) */
  mxu_arena arena;
  mxu_op **ops; /* layer_count * MXU_MAX_LAYER_OPS */
  float *grads; /* trainable_count; local replica 0's is model->grads */
} mxu_replica;

typedef struct mxu_plan {
  /* Rows per replica: the global batch / replicas. Here `replicas` counts
   * slices: each logical replica's rows may run in `split` slices
   * (compile.c says when), slice k belonging to logical replica k / split;
   * everything else treats a slice as a replica. */
  int batch;
  int split;
  const mxu_backend *backend;
  mxu_arena layout;      /* sizes and offsets; replicas commit copies */
  size_t *act;           /* layer_count + 1 offsets: input, each output */
  size_t *grad;          /* same, for gradients */
  size_t labels, onehot; /* targets of this batch */
  size_t mask;           /* 1 for real samples, 0 for padding */
  size_t probs, loss;    /* loss outputs per sample */
  int fused_softmax;     /* the loss reads the last layer's logits */
  /* The strategy: `replicas` logical replicas, of which this process runs
   * local_count starting at local_first (all of them without MPI), on
   * `workers` threads; oneDNN gets intra_threads inside each. */
  int replicas, local_first, local_count;
  int workers, intra_threads;
  mxu_replica *replica; /* local_count */
  /* strategy/'s staging for exchanges between processes, grown to the
   * largest one on first use and kept, so steps do not allocate. */
  float *exchange;
  size_t exchange_floats;
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
  int stop_training;  /* Keras' model.stop_training, set by callbacks */

  mxu_plan plan;
  mxu_history history;

  /* mxu_profile_enable: seconds of local replica 0's layers, forward at
   * [2 * layer] and backward at [2 * layer + 1], over profile_steps
   * training steps; the strategy adds to them while `profiling` is set. */
  double *profile;
  int64_t profile_steps;
  int profiling;
};

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
/* Marks rows >= rows as padding. */
void mxu_replica_set_rows(mxu_model *model, mxu_replica *replica, int64_t rows);

/* The loss of a replica's batch (the sum over its real samples) and the
 * number of correct predictions; in training, also the gradient of
 * loss * scale with respect to the last layer. */
typedef struct mxu_step_result {
  double loss_sum;
  int64_t correct;
} mxu_step_result;

mxu_step_result mxu_replica_loss(mxu_model *model, mxu_replica *replica,
                                 const mxu_step_key *key, float scale);

/* The optimizer update of weights [begin, end) from model->grads, for
 * optimizer step model->iterations (the caller counts it). Elementwise, so
 * any split of the buffer gives the same weights. */
void mxu_optimizer_apply_range(mxu_model *model, int64_t begin, int64_t end);

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
