/* embedding.c — Embedding: token ids in, a row of its (input_dim,
 * output_dim) `embeddings` weight out per id. The ids arrive as floats (a
 * model's data is float32; ids below 2^24 are exact). Plain loops: a
 * forward copies rows, a backward adds them, in sample order so that the
 * sums are the same bits on every backend and replica count. */
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static const char *const embedding_keys[] = {"input_dim",
                                             "output_dim",
                                             "embeddings_initializer",
                                             "embeddings_regularizer",
                                             "activity_regularizer",
                                             "embeddings_constraint",
                                             "mask_zero",
                                             "input_length",
                                             "lora_rank",
                                             "lora_alpha",
                                             "quantization_config",
                                             NULL};

/* mask_zero makes id 0 a padding the layers after skip (mxu.h says
 * which); tf.keras 2's input_length only documents the input's length;
 * Keras 3's LoRA and quantization are off at null or 0. */
static mxu_status read_embedding(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_embedding_config c = {.name = name};
  MXU_TRY(mxu_json_int(where, config, "input_dim", MXU_JSON_REQUIRED, 1,
                       1 << 24, &c.input_dim));
  MXU_TRY(mxu_json_int(where, config, "output_dim", MXU_JSON_REQUIRED, 1,
                       1 << 24, &c.output_dim));
  MXU_TRY(mxu_json_bool(where, config, "mask_zero", &c.mask_zero));
  int lora = 0;
  MXU_TRY(
      mxu_json_int(where, config, "lora_rank", MXU_JSON_OPTIONAL, 0, 0, &lora));
  MXU_TRY(mxu_json_require_null(where, config, "quantization_config"));
  MXU_TRY(
      mxu_config_weight_options(where, config, "embeddings", &c.embeddings));
  return mxu_json_applied(
      where, node, mxu_apply_embedding(node->model, &c, node->inputs[0]));
}

static mxu_initializer default_init(void) {
  mxu_initializer init = {
      .kind = MXU_INIT_RANDOM_UNIFORM, .minval = -0.05f, .maxval = 0.05f};
  return init;
}

static void write_embedding(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_embedding_config *c = &layer->config.embedding;
  mxu_json_put_number(out, config, "input_dim", c->input_dim);
  mxu_json_put_number(out, config, "output_dim", c->output_dim);
  mxu_initializer init =
      mxu_init_or(&c->embeddings.initializer, default_init());
  mxu_json_put_initializer(out, config, "embeddings_initializer", &init);
  mxu_json_put_regularizer(out, config, "embeddings_regularizer",
                           &c->embeddings.regularizer);
  mxu_json_put_null(out, config, "activity_regularizer");
  mxu_json_put_constraint(out, config, "embeddings_constraint",
                          &c->embeddings.constraint);
  mxu_json_put_bool(out, config, "mask_zero", c->mask_zero);
}

/* The input's shape gains an axis of output_dim. */
static mxu_status embedding_infer(mxu_layer *layer) {
  const mxu_embedding_config *c = &layer->config.embedding;
  if (c->input_dim <= 0 || c->output_dim <= 0)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: input_dim %d and output_dim %d must be positive",
                    layer->name, c->input_dim, c->output_dim);
  if (layer->in_shape.rank >= MXU_MAX_RANK)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: an input of rank %d has no room for "
                    "the embedding's axis (at most %d)",
                    layer->name, layer->in_shape.rank, MXU_MAX_RANK - 1);
  if (c->mask_zero && layer->in_shape.rank != 1) {
    char text[64];
    mxu_shape_format(&layer->in_shape, text, sizeof text);
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: mask_zero over ids %s is not supported: mxu masks "
                    "the steps of a sequence of ids (steps)",
                    layer->name, text);
  }
  layer->out_shape = layer->in_shape;
  layer->out_shape.dims[layer->out_shape.rank++] = c->output_dim;
  return MXU_OK;
}

/* mask_zero: the ids' zeros mask the output's steps. */
static int embedding_mask(const mxu_layer *layer) {
  return layer->config.embedding.mask_zero ? layer->inputs[0] : -1;
}

static int embedding_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_embedding_config *c = &layer->config.embedding;
  int64_t dims[2] = {c->input_dim, c->output_dim};
  decls[0] = mxu_weight_decl("embeddings", mxu_shape_make(2, dims),
                             &c->embeddings, default_init());
  return 1;
}

/* No arithmetic forward; backward one add per output value. */
static double embedding_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  (void)step;
  return (double)mxu_shape_count(&layer->out_shape);
}

/* The row of id x, or -1 for an id outside the table. Keras casts a
 * float id to int32, toward zero: -0.5 is row 0. */
static int64_t row_of(float x, int input_dim) {
  if (!(x > -1.0f) || !(x < (float)input_dim)) return -1;
  return (int64_t)x;
}

static void embedding_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_embedding_config *c = &layer->config.embedding;
  int64_t ids = mxu_batch_values(layer);
  size_t bytes = (size_t)c->output_dim * sizeof(float);
  for (int64_t i = 0; i < ids; i++) {
    int64_t row = row_of(run->x[i], c->input_dim);
    float *y = run->y + i * c->output_dim;
    if (row < 0)
      memset(y, 0, bytes);
    else
      memcpy(y, run->w[0] + row * c->output_dim, bytes);
  }
}

/* The ids have no gradient: dx, where a layer's output feeds them, is 0. */
static void embedding_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_embedding_config *c = &layer->config.embedding;
  int64_t ids = mxu_batch_values(layer);
  if (run->need_dx) memset(run->dx, 0, (size_t)ids * sizeof(float));
  if (!run->dw[0]) return;
  memset(run->dw[0], 0,
         (size_t)c->input_dim * (size_t)c->output_dim * sizeof(float));
  for (int64_t i = 0; i < ids; i++) {
    int64_t row = row_of(run->x[i], c->input_dim);
    if (row < 0) continue;
    float *dw = run->dw[0] + row * c->output_dim;
    const float *dy = run->dy + i * c->output_dim;
    for (int j = 0; j < c->output_dim; j++) dw[j] += dy[j];
  }
}

/* A one-hot (ids, input_dim) matrix times the table: StableHLO's gather
 * as a product, which the gradient derivation (grad.c) already knows.
 * Its cost is ids x input_dim: fine for the vocabularies of small models,
 * a gather would serve large ones better. Ids outside the table match no
 * column and give zeros, as cpu's. */
static mxu_hlo_value embedding_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const mxu_embedding_config *c = &layer->config.embedding;
  int64_t ids = (int64_t)e->batch * mxu_shape_count(&layer->in_shape);
  int64_t flat[2] = {ids, c->input_dim};
  mxu_hlo_shape table = mxu_hlo_shape_make(MXU_HLO_F32, 2, flat);
  mxu_hlo_value x =
      mxu_hlo_reshape(h, e->in[0], mxu_hlo_shape_make(MXU_HLO_F32, 1, &ids));
  /* The id toward zero, as Keras' cast; -1 (no column) outside the table
   * and for NaN, as cpu's. */
  mxu_hlo_value id =
      mxu_hlo_convert(h, mxu_hlo_convert(h, x, MXU_HLO_S32), MXU_HLO_F32);
  mxu_hlo_value none = mxu_hlo_full_like(h, x, -1.0);
  id = mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_GT, x, none), id, none);
  id = mxu_hlo_select(
      h,
      mxu_hlo_compare_op(h, MXU_HLO_LT, x,
                         mxu_hlo_full_like(h, x, (double)c->input_dim)),
      id, none);
  const int64_t rows[1] = {0};
  mxu_hlo_value wide = mxu_hlo_broadcast(h, id, table, rows);
  mxu_hlo_value column = mxu_hlo_iota(h, table, 1);
  mxu_hlo_value one_hot = mxu_hlo_convert(
      h, mxu_hlo_compare_op(h, MXU_HLO_EQ, wide, column), MXU_HLO_F32);
  mxu_hlo_value y = mxu_hlo_matmul(h, one_hot, e->w[0]);
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

const mxu_layer_class mxu_embedding_class = {
    .class_name = "Embedding",
    .config_keys = embedding_keys,
    .read_config = read_embedding,
    .write_config = write_embedding,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = embedding_infer,
    .output_mask = embedding_mask,
    .declare = embedding_declare,
    .flops = embedding_flops,
    .plan = mxu_no_plan,
    .forward = embedding_forward,
    .backward = embedding_backward,
    .emit = embedding_emit,
};
