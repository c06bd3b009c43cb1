/* programs.c — a compiled model's training step as one StableHLO program
 * for the pjrt backend: the layers' emitters in graph order, the loss over
 * the replica's valid rows, its gradient (grad.c), the gradient summed
 * over replicas with all_reduce, and the optimizer's update, so weights
 * and slots stay on the device from one step to the next. */
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static mxu_hlo_shape f32(int rank, const int64_t *dims) {
  return mxu_hlo_shape_make(MXU_HLO_F32, rank, dims);
}

mxu_hlo_shape mxu_noise_shape(const mxu_layer *l, int batch) {
  int64_t words = 4;
  return l->cls->noise_is_stream ? mxu_hlo_shape_make(MXU_HLO_U32, 1, &words)
                                 : mxu_batch_shape(batch, &l->out_shape);
}

mxu_hlo_shape mxu_batch_shape(int batch, const mxu_shape *s) {
  mxu_hlo_shape h = {.dtype = MXU_HLO_F32, .rank = 1 + s->rank};
  h.dims[0] = batch;
  for (int d = 0; d < s->rank; d++) h.dims[1 + d] = s->dims[d];
  return h;
}

static mxu_hlo_shape param_shape(const mxu_param *p) {
  mxu_hlo_shape h = {.dtype = MXU_HLO_F32, .rank = p->shape.rank};
  for (int d = 0; d < p->shape.rank; d++) h.dims[d] = p->shape.dims[d];
  return h;
}

/* The layers every program emits; a refusal naming the first that is not
 * emitted. */
static mxu_status check_layers(const mxu_model *model) {
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (l->cls != &mxu_input_layer_class && !l->cls->emit)
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "pjrt: layer '%s' (%s) is not emitted yet", l->name,
                      l->cls->class_name);
    for (int i = 0; l->cls->host_output && i < l->input_count; i++) {
      const mxu_layer *from = &model->layers[l->inputs[i]];
      if (from->cls != &mxu_input_layer_class && !from->cls->host_output)
        return mxu_fail(MXU_ERR_UNSUPPORTED,
                        "pjrt: layer '%s' (%s) follows '%s': random "
                        "augmentations are emitted only straight after the "
                        "input; move it there",
                        l->name, l->cls->class_name, from->name);
    }
  }
  return MXU_OK;
}

/* The forward pass: each node's output value (nodes[n]); the logits of
 * the output when it ends in a softmax; each weight's new value where a
 * layer updates state (moving, local 0 elsewhere). noise: one per node that
 * draws it, in node order. */
typedef struct pass {
  mxu_hlo *h;
  int batch, training, replicas;
  const mxu_hlo_value *weights, *noise;
  const mxu_hlo_value *x; /* each model input's batch */
  /* Per head: its output's logits where it ends in a softmax (Keras'
   * cross-entropy reads them), and the padding mask reaching its loss
   * (the head's loss_mask). */
  mxu_hlo_value logits[MXU_MAX_OUTPUTS], padding[MXU_MAX_OUTPUTS];
  mxu_hlo_value *nodes;
  mxu_emit_moving *moving;
} pass;

static mxu_status forward(const mxu_model *model, pass *p) {
  int drawn = 0;
  /* Per node, the mask it holds (mxu_layer.mask_out): its output (an
   * Embedding's ids) or what it computed (Masking). */
  mxu_hlo_value *masks = calloc((size_t)model->layer_count, sizeof *masks);
  if (!masks) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (l->cls == &mxu_input_layer_class) {
      /* A model input, or inside a model used as a layer a view of the
       * tensor it is called on. */
      int k = 0;
      while (k < model->input_count - 1 && model->inputs[k] != n) k++;
      p->nodes[n] = masks[n] =
          l->input_count ? p->nodes[l->inputs[0]] : p->x[k];
      continue;
    }
    mxu_hlo_value in[MXU_MAX_INPUTS];
    for (int i = 0; i < l->input_count; i++) in[i] = p->nodes[l->inputs[i]];
    const mxu_layer *owner = &model->layers[l->owner];
    mxu_emit e = {
        .h = p->h,
        .batch = p->batch,
        .bf16 = model->compile.precision == MXU_MIXED_BFLOAT16,
        .training = p->training,
        .replicas = p->replicas,
        .in = in,
        .w = p->weights + owner->param_first,
        .noise = p->noise && mxu_layer_draws_noise(l) ? p->noise[drawn++] : 0,
        .mask = l->cls->uses_mask && l->mask_in >= 0 ? masks[l->mask_in] : 0,
        .moving = p->moving ? p->moving + owner->param_first : NULL};
    p->nodes[n] = l->cls->emit(l, &e);
    masks[n] = l->cls->computes_mask ? e.mask_out : p->nodes[n];
    for (int j = 0; j < model->head_count; j++)
      if (n == model->heads[j].node) p->logits[j] = e.logits;
  }
  for (int j = 0; j < model->head_count; j++)
    if (model->plan.head[j].loss_mask >= 0)
      p->padding[j] = masks[model->plan.head[j].loss_mask];
  free(masks);
  return p->h->status;
}

/* The nodes' activity penalties, l1 |y| + l2 y^2 summed over the valid
 * rows, as step.c adds them to the loss. */
static mxu_hlo_value activity_penalties(const mxu_model *model, mxu_hlo *h,
                                        const mxu_hlo_value *nodes,
                                        mxu_hlo_value mask,
                                        mxu_hlo_value loss) {
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (!mxu_has_activity(l)) continue;
    mxu_hlo_value y = nodes[n];
    mxu_hlo_shape s = *mxu_hlo_shape_of(h, y);
    int64_t rows = 0, all[MXU_HLO_MAX_RANK];
    for (int d = 0; d < s.rank; d++) all[d] = d;
    mxu_hlo_value penalty = mxu_hlo_binary(
        h, MXU_HLO_ADD,
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY, mxu_hlo_unary(h, MXU_HLO_ABS, y),
                       mxu_hlo_full_like(h, y, l->activity.l1)),
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                       mxu_hlo_binary(h, MXU_HLO_MULTIPLY, y, y),
                       mxu_hlo_full_like(h, y, l->activity.l2)));
    penalty = mxu_hlo_binary(h, MXU_HLO_MULTIPLY, penalty,
                             mxu_hlo_broadcast(h, mask, s, &rows));
    loss = mxu_hlo_binary(h, MXU_HLO_ADD, loss,
                          mxu_hlo_reduce(h, penalty, MXU_HLO_SUM, s.rank, all));
  }
  return loss;
}

/* The parameters in order: every weight, the slots of the trainable
 * ones kind by kind, the step's hyper-parameters, x, the first output's
 * labels or targets, the mask, the samples' weights, the scale, each
 * noise-drawing node's noise,
 * the model's other inputs' batches (x[1..]) and the other outputs'
 * labels or targets (labels[1..]). */
typedef struct inputs {
  mxu_hlo_value *w, *slots, *noise;
  mxu_hlo_value hyper, x[MXU_MAX_INPUTS], labels[MXU_MAX_OUTPUTS], mask;
  mxu_hlo_value weights, scale;
} inputs;

/* A model input's batch as a parameter. */
static mxu_hlo_value input_parameter(const mxu_model *model, mxu_hlo *h,
                                     int batch, int k) {
  return mxu_hlo_parameter(
      h, mxu_batch_shape(batch, &model->layers[model->inputs[k]].out_shape));
}

mxu_hlo_shape mxu_labels_shape(const mxu_model *model, int head, int batch) {
  const mxu_head *h = &model->heads[head];
  int64_t t_dims[2] = {batch,
                       mxu_shape_count(&model->layers[h->node].out_shape)};
  /* A label per position of an output of several (mxu_loss_positions). */
  int64_t labels[1] = {batch * mxu_loss_positions(model, head)};
  return h->spec.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY
             ? mxu_hlo_shape_make(MXU_HLO_S32, 1, labels)
             : f32(2, t_dims);
}

static void declare_inputs(const mxu_model *model, mxu_hlo *h, int batch,
                           int kinds, inputs *in) {
  int count = model->param_count, k = 0;
  for (int i = 0; i < count; i++)
    in->w[i] = mxu_hlo_parameter(h, param_shape(&model->params[i]));
  for (int kind = 0; kind < kinds; kind++)
    for (int i = 0; i < count; i++)
      if (model->params[i].trainable)
        in->slots[k++] = mxu_hlo_parameter(h, param_shape(&model->params[i]));
  int64_t hypers = MXU_HYPERS;
  in->hyper = mxu_hlo_parameter(h, f32(1, &hypers));
  in->x[0] = input_parameter(model, h, batch, 0);
  int64_t rows[1] = {batch};
  in->labels[0] = mxu_hlo_parameter(h, mxu_labels_shape(model, 0, batch));
  in->mask = mxu_hlo_parameter(h, f32(1, rows));
  in->weights = mxu_hlo_parameter(h, f32(1, rows));
  in->scale = mxu_hlo_parameter(h, f32(0, NULL));
  int drawn = 0;
  for (int n = 0; n < model->layer_count; n++)
    if (mxu_layer_draws_noise(&model->layers[n]))
      in->noise[drawn++] =
          mxu_hlo_parameter(h, mxu_noise_shape(&model->layers[n], batch));
  for (int k = 1; k < model->input_count; k++)
    in->x[k] = input_parameter(model, h, batch, k);
  for (int j = 1; j < model->head_count; j++)
    in->labels[j] = mxu_hlo_parameter(h, mxu_labels_shape(model, j, batch));
}

/* The batch's sums over the rows where mask is 1 (program_loss.c):
 * sums[0] the loss (each head's times its weight, and the activity
 * penalties), then each head's mxu_emit_loss values (its loss, count and
 * metrics' sums: the mxu_head_sums of mxu_step_result). */
static mxu_status loss_and_hits(const mxu_model *model, const pass *p,
                                const mxu_hlo_value *labels, mxu_hlo_value mask,
                                mxu_hlo_value weights, mxu_hlo_value *sums) {
  mxu_hlo_value total = 0, *own = sums + 1;
  for (int j = 0; j < model->head_count; j++) {
    mxu_emit_loss_input in = {.h = p->h,
                              .batch = p->batch,
                              .y = p->nodes[model->heads[j].node],
                              .logits = p->logits[j],
                              .labels = labels[j],
                              .mask = mask,
                              .weights = weights,
                              .padding = p->padding[j]};
    MXU_TRY(mxu_emit_loss(model, j, &in, own));
    mxu_hlo_value weighted = mxu_hlo_mul(
        p->h, own[0],
        mxu_hlo_full_like(p->h, own[0], model->heads[j].spec.weight));
    total = total ? mxu_hlo_add(p->h, total, weighted) : weighted;
    own += mxu_head_sum_count(model, j);
  }
  sums[0] = activity_penalties(model, p->h, p->nodes, mask, total);
  return p->h->status;
}

int mxu_program_sum_count(const mxu_model *model) {
  int n = 1;
  for (int j = 0; j < model->head_count; j++) n += mxu_head_sum_count(model, j);
  return n;
}

/* Every replica's values summed in one all_reduce: each flattened and
 * laid end to end, then cut apart again. */
static void sum_over_replicas(mxu_hlo *h, int count, mxu_hlo_value *values) {
  mxu_hlo_value flat = 0;
  for (int i = 0; i < count; i++) {
    int64_t n = mxu_hlo_count(mxu_hlo_shape_of(h, values[i]));
    mxu_hlo_value f = mxu_hlo_reshape(h, values[i], f32(1, &n));
    flat = flat ? mxu_hlo_concatenate(h, flat, f, 0) : f;
  }
  mxu_hlo_value all = mxu_hlo_all_reduce(h, flat);
  int64_t at = 0, one = 1;
  for (int i = 0; i < count && h->status == MXU_OK; i++) {
    mxu_hlo_shape s = *mxu_hlo_shape_of(h, values[i]);
    int64_t end = at + mxu_hlo_count(&s);
    values[i] = mxu_hlo_reshape(h, mxu_hlo_slice(h, all, &at, &end, &one), s);
    at = end;
  }
}

/* w momentum + (the replicas' mean of the statistic) factor (1 - momentum). */
static mxu_hlo_value moving_average(mxu_hlo *h, mxu_hlo_value w,
                                    const mxu_emit_moving *m, mxu_hlo_value sum,
                                    int replicas) {
  mxu_hlo_value mean = mxu_hlo_binary(h, MXU_HLO_DIVIDE, sum,
                                      mxu_hlo_full_like(h, sum, replicas));
  if (m->factor != 1.0f)
    mean = mxu_hlo_binary(h, MXU_HLO_MULTIPLY, mean,
                          mxu_hlo_full_like(h, mean, m->factor));
  return mxu_hlo_binary(
      h, MXU_HLO_ADD,
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, w,
                     mxu_hlo_full_like(h, w, m->momentum)),
      mxu_hlo_binary(h, MXU_HLO_MULTIPLY, mean,
                     mxu_hlo_full_like(h, mean, 1.0f - m->momentum)));
}

/* Each weight's new value (results[i]) and its slots' (after every
 * weight, kind by kind) from the trainable weights' summed gradients:
 * clipping by norm, then each one's update and constraint. */
static void update_weights(mxu_hlo *h, const mxu_model *model, const inputs *in,
                           int kinds, const int *kind_of, mxu_hlo_value *grads,
                           mxu_hlo_value *results) {
  int count = model->param_count, trainable = 0;
  for (int i = 0; i < count; i++) trainable += model->params[i].trainable;
  /* The step's scalars, one value each. */
  mxu_hlo_value hyper[MXU_HYPERS];
  for (int64_t k = 0, one = 1; k < MXU_HYPERS; k++) {
    int64_t end = k + 1;
    hyper[k] = mxu_hlo_reshape(h, mxu_hlo_slice(h, in->hyper, &k, &end, &one),
                               f32(0, NULL));
  }
  mxu_emit_clip_norms(h, model, trainable, grads);
  for (int i = 0, slot = 0; i < count; i++) {
    const mxu_param *p = &model->params[i];
    results[i] = in->w[i];
    if (!p->trainable) continue;
    mxu_hlo_value kept[MXU_SLOTS + 1] = {0};
    for (int k = 0; k < kinds; k++)
      kept[kind_of[k]] = in->slots[k * trainable + slot];
    results[i] = mxu_emit_constraint(
        h, p, mxu_emit_update(h, model, p, hyper, in->w[i], grads[slot], kept));
    for (int k = 0; k < kinds; k++)
      results[count + k * trainable + slot] = kept[kind_of[k]];
    slot++;
  }
}

int mxu_model_slot_kinds(const mxu_model *model, int *kinds) {
  mxu_slot_spec spec = mxu_optimizer_slots(&model->compile.optimizer);
  int count = 0;
  for (int k = 0; k < MXU_SLOTS; k++)
    if (spec.keras3[k]) kinds[count++] = k;
  if (spec.average) kinds[count++] = MXU_SLOTS;
  return count;
}

mxu_status mxu_model_train_program(const mxu_model *model, int batch,
                                   int replicas, int steps, char **text) {
  *text = NULL;
  MXU_TRY(check_layers(model));
  int kind_of[MXU_SLOTS + 1];
  int kinds = mxu_model_slot_kinds(model, kind_of), count = model->param_count;
  int trainable = 0;
  for (int i = 0; i < count; i++) trainable += model->params[i].trainable;
  /* One block for every value list: weights, slots, noise, grads, nodes,
   * results, sums. */
  size_t values = (size_t)(5 * count + (2 * kinds + 1) * trainable +
                           2 * model->layer_count + 10 + 6 * MXU_MAX_OUTPUTS);
  mxu_hlo_value *v = calloc(values, sizeof *v);
  mxu_emit_moving *moving = calloc((size_t)count + 1, sizeof *moving);
  if (!v || !moving) {
    free(v), free(moving);
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  inputs in = {
      .w = v, .slots = v + count, .noise = v + count + kinds * trainable};
  mxu_hlo_value *grads = in.noise + model->layer_count, *nodes = grads + count;
  mxu_hlo_value *results = nodes + model->layer_count;
  int totals = mxu_program_sum_count(model);
  mxu_hlo_value *sums = results + count + kinds * trainable + totals;
  mxu_hlo h;
  mxu_hlo_init(&h);
  declare_inputs(model, &h, batch, kinds, &in);
  pass p = {.h = &h,
            .batch = batch,
            .training = 1,
            .replicas = replicas,
            .weights = in.w,
            .noise = in.noise,
            .x = in.x,
            .nodes = nodes,
            .moving = moving};
  /* loss_and_hits' */
  mxu_hlo_value metrics[1 + (2 + 2 * MXU_MAX_METRICS) * MXU_MAX_OUTPUTS] = {0};
  mxu_status s = forward(model, &p);
  if (s == MXU_OK)
    s = loss_and_hits(model, &p, in.labels, in.mask, in.weights, metrics);
  if (s == MXU_OK)
    s = mxu_hlo_gradients(&h, metrics[0], in.scale, count, in.w, grads);
  /* What the replicas sum, in one all_reduce: the trainable weights'
   * gradients, the moving averages' statistics, the loss and each head's
   * sums. */
  int n = 0;
  for (int i = 0; i < count; i++)
    if (model->params[i].trainable) sums[n++] = grads[i];
  for (int i = 0; i < count; i++)
    if (moving[i].local) sums[n++] = moving[i].local;
  for (int k = 0; k < totals; k++) sums[n++] = metrics[k];
  if (s == MXU_OK && replicas > 1) sum_over_replicas(&h, n, sums);
  /* Keras adds the weights' penalties to each batch's mean loss, at the
   * weights before the update. */
  if (s == MXU_OK && model->penalized)
    sums[n - totals] = mxu_hlo_binary(
        &h, MXU_HLO_ADD, sums[n - totals],
        mxu_hlo_binary(
            &h, MXU_HLO_MULTIPLY,
            mxu_hlo_constant(&h, f32(0, NULL), (double)batch * replicas),
            mxu_emit_penalty(&h, model, in.w)));
  /* Results: every weight's new value, the slots, the sums. */
  if (s == MXU_OK)
    update_weights(&h, model, &in, kinds, kind_of, sums, results);
  for (int i = 0, next = trainable; s == MXU_OK && i < count; i++)
    if (moving[i].local)
      results[i] =
          moving_average(&h, in.w[i], &moving[i], sums[next++], replicas);
  int r = count + kinds * trainable;
  for (int k = totals; k > 0; k--) results[r++] = sums[n - k];
  if (s == MXU_OK)
    s = mxu_hlo_print_loop(&h, r, results, count + kinds * trainable, steps,
                           replicas, text);
  if (s == MXU_OK && h.status != MXU_OK) s = h.status;
  mxu_hlo_free(&h);
  free(v);
  free(moving);
  return s;
}

mxu_status mxu_model_eval_program(const mxu_model *model, int batch,
                                  int replicas, int predict, char **text) {
  *text = NULL;
  MXU_TRY(check_layers(model));
  int count = model->param_count, outputs = mxu_model_output_count(model);
  mxu_hlo_value *v =
      calloc((size_t)(count + model->layer_count + MXU_MAX_INPUTS +
                      mxu_program_sum_count(model)),
             sizeof *v);
  if (!v) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  mxu_hlo_value *nodes = v + count, *results = nodes + model->layer_count;
  mxu_hlo h;
  mxu_hlo_init(&h);
  for (int i = 0; i < count; i++)
    v[i] = mxu_hlo_parameter(&h, param_shape(&model->params[i]));
  int64_t rows[1] = {batch};
  /* x, for evaluation the first output's labels, the mask and the
   * weights, then the other inputs and for evaluation the other outputs'
   * labels. */
  mxu_hlo_value x[MXU_MAX_INPUTS] = {input_parameter(model, &h, batch, 0)};
  pass p = {.h = &h,
            .batch = batch,
            .replicas = replicas,
            .weights = v,
            .x = x,
            .nodes = nodes};
  mxu_hlo_value labels[MXU_MAX_OUTPUTS] = {0}, mask = 0, weights = 0;
  if (!predict) {
    labels[0] = mxu_hlo_parameter(&h, mxu_labels_shape(model, 0, batch));
    mask = mxu_hlo_parameter(&h, f32(1, rows));
    weights = mxu_hlo_parameter(&h, f32(1, rows));
  }
  for (int k = 1; k < model->input_count; k++)
    x[k] = input_parameter(model, &h, batch, k);
  for (int j = 1; !predict && j < model->head_count; j++)
    labels[j] = mxu_hlo_parameter(&h, mxu_labels_shape(model, j, batch));
  mxu_status s = forward(model, &p);
  int r = 0;
  if (s == MXU_OK && predict) {
    for (; r < outputs; r++)
      results[r] = nodes[mxu_model_output_node(model, r)];
  } else if (s == MXU_OK) {
    s = loss_and_hits(model, &p, labels, mask, weights, results);
    r = mxu_program_sum_count(model);
    if (s == MXU_OK && replicas > 1) sum_over_replicas(&h, r, results);
  }
  if (s == MXU_OK) s = mxu_hlo_print(&h, r, results, replicas, text);
  mxu_hlo_free(&h);
  free(v);
  return s;
}
