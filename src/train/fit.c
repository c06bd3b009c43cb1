/* fit.c — Keras' fit, evaluate and predict over the static plan: each
 * global batch is gathered in a seeded order, replica r taking its r-th
 * slice into its arena; a partial batch is padded and masked where every
 * sample must count (evaluate, predict) and dropped in training. */
#include "data/data.h"
#include "strategy/strategy.h"
#include "train/callbacks.h"
#include "train/prefetch.h"
#include "train/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mxu_fit_config mxu_fit_defaults(void) {
  mxu_fit_config config = {0};
  config.epochs = 1;
  config.validation_freq = 1;
  config.shuffle = 1;
  config.verbose = 1;
  return config;
}

/* Values head h's output has a sample (classes for a classifier). */
static int64_t output_values(const mxu_model *model, int h) {
  return mxu_shape_count(&model->layers[model->heads[h].node].out_shape);
}

/* Whether head h's class labels are the data's targets, one a position:
 * the sparse loss over an output of several positions (a sequence's
 * steps: an .npy of (count, steps) labels), or under ignore_class over
 * one where the data's labels are numbers, not classes (an .npy holding
 * the ignored -1 loads as targets). */
static int positional_labels(const mxu_model *model, int h,
                             const mxu_dataset *data) {
  const mxu_output_loss *spec = &model->heads[h].spec;
  return spec->loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY &&
         (mxu_loss_positions(model, h) > 1 ||
          (spec->has_ignore_class && !data->num_classes && data->targets &&
           data->target_size == 1));
}

/* "output 'name': " before a message about one output of a model of
 * several; nothing for a model of one. */
static const char *output_label(const mxu_model *model, int h, char *out,
                                size_t size) {
  out[0] = 0;
  if (model->head_count > 1)
    snprintf(out, size, "output '%s': ", mxu_model_output_name(model, h));
  return out;
}

static mxu_status check_positional(const mxu_model *model, int h,
                                   const mxu_dataset *data, const char *what) {
  int64_t positions = mxu_loss_positions(model, h);
  int64_t classes = output_values(model, h) / positions;
  char o[MXU_NAME_SIZE + 16];
  output_label(model, h, o, sizeof o);
  if (!data->targets || data->target_size != positions)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %ssparse_categorical_crossentropy over the output's "
                    "%lld positions needs a class index for each (labels of "
                    "(count, %lld)), but the data gives %d values a sample",
                    what, o, (long long)positions, (long long)positions,
                    data->targets ? data->target_size : 1);
  const mxu_output_loss *spec = &model->heads[h].spec;
  for (int64_t i = 0; i < data->count * positions; i++) {
    float v = data->targets[i];
    if (spec->has_ignore_class && v == (float)spec->ignore_class) continue;
    if (!(v >= 0 && v < (float)classes && v == floorf(v)))
      return mxu_fail(MXU_ERR_ARG,
                      "%s: %ssample %lld's label at position %lld is %g, not "
                      "a class index in 0..%lld%s",
                      what, o, (long long)(i / positions),
                      (long long)(i % positions), (double)v,
                      (long long)classes - 1,
                      spec->has_ignore_class ? " or the ignore_class" : "");
  }
  return MXU_OK;
}

/* What head h's loss and metric read must be in the data (its view of
 * output h): class labels for the sparse ones (one per position:
 * check_positional); else targets of the output's size, or labels to stand
 * for them (as numbers for a one-value output, else one-hot rows). */
static mxu_status check_targets(const mxu_model *model, int h,
                                const mxu_dataset *data, const char *what) {
  if (positional_labels(model, h, data))
    return check_positional(model, h, data, what);
  const mxu_head *head = &model->heads[h];
  int64_t values = output_values(model, h);
  int sparse = head->spec.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  for (int m = 0; m < head->metric_count; m++)
    sparse |= mxu_metric_needs_labels(head->metric_kind[m]);
  char o[MXU_NAME_SIZE + 16];
  output_label(model, h, o, sizeof o);
  const mxu_shape *shape = &model->layers[head->node].out_shape;
  if (mxu_loss_is_softmax(head->spec.loss) && shape->dims[shape->rank - 1] < 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %sa categorical cross-entropy needs a score per "
                    "class (at least 2, along the last axis); give this "
                    "output its own loss (mxu_compile_config.outputs)",
                    what, o);
  if (data->num_classes == 0 && sparse)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %sthe data's targets are %d float values a sample, "
                    "not class labels, which the sparse loss and metrics "
                    "need; use a loss such as mean_squared_error",
                    what, o, data->target_size);
  if (data->num_classes == 0 && data->target_size != values)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %sthe data's targets are %d float values a sample, "
                    "but the model outputs %lld",
                    what, o, data->target_size, (long long)values);
  if (data->num_classes == 0 || values == 1 ||
      (data->targets && data->target_size == values && !sparse))
    return MXU_OK;
  if (data->num_classes > values)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: %sthe data has %d classes but the model outputs %lld",
                    what, o, data->num_classes, (long long)values);
  return MXU_OK;
}

/* Token ids an Embedding reads straight from model input k must be rows
 * of its table, as TensorFlow's CPU kernel demands: mxu's forward pass
 * would give such an id a row of zeros and train on without a word. */
static mxu_status check_ids(const mxu_model *model, int k, const float *x,
                            int64_t count, const char *what) {
  int node = model->inputs[k];
  int64_t per = mxu_shape_count(&model->layers[node].out_shape);
  for (int i = 0; x && i < model->layer_count; i++) {
    const mxu_layer *l = &model->layers[i];
    if (l->cls != &mxu_embedding_class || l->inputs[0] != node) continue;
    int rows = l->config.embedding.input_dim;
    for (int64_t j = 0; j < count * per; j++)
      if (!(x[j] > -1.0f && x[j] < (float)rows))
        return mxu_fail(MXU_ERR_ARG,
                        "%s: sample %lld, value %lld: id %g is not a row of "
                        "Embedding '%s' (0 to %d); map unknown tokens to a "
                        "row of the table, or give it more rows",
                        what, (long long)(j / per), (long long)(j % per),
                        (double)x[j], l->name, rows - 1);
  }
  return MXU_OK;
}

static mxu_shape squeezed(const mxu_shape *s) {
  mxu_shape out = {0};
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] != 1) out.dims[out.rank++] = s->dims[i];
  return out;
}

/* Input k's samples against the model's input k: the same values, in the
 * same order, axes of 1 aside (Fashion-MNIST's (28, 28, 1) images feed a
 * Keras model built for its (28, 28) arrays). */
static mxu_status check_input(const mxu_model *model, const mxu_dataset *data,
                              int k, const char *what) {
  const mxu_layer *input = &model->layers[model->inputs[k]];
  const mxu_shape *shape = &input->out_shape;
  mxu_shape given = mxu_dataset_input_shape(data, k);
  mxu_shape a = squeezed(&given), b = squeezed(shape);
  int same = a.rank == b.rank;
  for (int i = 0; same && i < a.rank; i++) same = a.dims[i] == b.dims[i];
  if (!same) {
    char x[64], y[64];
    mxu_shape_format(&given, x, sizeof x);
    mxu_shape_format(shape, y, sizeof y);
    int64_t n = mxu_shape_count(&given), want = mxu_shape_count(shape);
    if (n == want)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: the samples are %s but the model's input '%s' "
                      "takes %s",
                      what, x, input->name, y);
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: the samples are %s (%lld values) but the model's "
                    "input '%s' takes %s (%lld values)",
                    what, x, (long long)n, input->name, y, (long long)want);
  }
  return check_ids(model, k, mxu_dataset_input(data, k), data->count, what);
}

static mxu_status check_data(const mxu_model *model, const mxu_dataset *data,
                             const char *what) {
  if (!model || !model->compiled)
    return mxu_fail(MXU_ERR_ARG, "%s: compile the model first", what);
  if (!data) return mxu_fail(MXU_ERR_ARG, "%s: no data", what);
  /* Else fit would ask for a batch "of at most 0" and evaluate report an
   * accuracy of 0 over nothing. */
  if (data->count == 0)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: the data set has no samples; check its path and "
                    "split",
                    what);
  if (mxu_dataset_output_count(data) != model->head_count)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: the data has targets for %d outputs but the model "
                    "has %d (%s ...); give targets for each, in the order "
                    "of the model's outputs (mxu_dataset_add_output_labels, "
                    "mxu_dataset_add_output_targets)",
                    what, mxu_dataset_output_count(data), model->head_count,
                    mxu_model_output_name(model, 0));
  if (mxu_dataset_input_count(data) != model->input_count)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: the data has samples for %d inputs but the model "
                    "has %d (%s ...); give one array per input, in the "
                    "order of the model's inputs (mxu_dataset_add_input)",
                    what, mxu_dataset_input_count(data), model->input_count,
                    mxu_model_input(model)->name);
  for (int k = 0; k < model->input_count; k++)
    MXU_TRY(check_input(model, data, k, what));
  for (int h = 0; h < model->head_count; h++) {
    mxu_dataset view;
    mxu_dataset_output_view(data, h, &view);
    MXU_TRY(check_targets(model, h, &view, what));
  }
  return MXU_OK;
}

/* Keras' class_weight: for a model of one output trained on one class
 * label a sample, a finite weight >= 0 for each class the data has. */
static mxu_status check_class_weight(const mxu_model *model,
                                     const mxu_dataset *train,
                                     const mxu_fit_config *c) {
  if (!c->class_weight) return MXU_OK;
  if (model->head_count > 1 || !train->num_classes ||
      positional_labels(model, 0, train))
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "fit: class_weight weighs the samples of a model of one "
                    "output by their one class label; give sample weights "
                    "instead (mxu_dataset_set_sample_weights)");
  if (c->class_weight_count < train->num_classes)
    return mxu_fail(MXU_ERR_ARG,
                    "fit: class_weight has %d weights but the data has %d "
                    "classes; give one for each",
                    c->class_weight_count, train->num_classes);
  for (int k = 0; k < c->class_weight_count; k++)
    if (!(c->class_weight[k] >= 0.0f) || !isfinite(c->class_weight[k]))
      return mxu_fail(MXU_ERR_ARG,
                      "fit: class %d's weight is %g; a class weight is a "
                      "finite number >= 0",
                      k, (double)c->class_weight[k]);
  return MXU_OK;
}

/* The global batch: the per-replica batch times the replicas. */
static int64_t global_batch(const mxu_model *model) {
  return (int64_t)model->plan.batch * model->plan.replicas;
}

/* A plan for `batch`; on pjrt with its devices (a plan for another batch
 * than compile's has none yet). */
static mxu_status ensure_batch(mxu_model *model, int batch) {
  if (batch != global_batch(model)) MXU_TRY(mxu_plan_build(model, batch));
  if (model->compile.backend == MXU_BACKEND_PJRT && !model->device)
    MXU_TRY(mxu_device_open(model));
  return MXU_OK;
}

/* Rows of the global batch that replica `index` gets when the batch holds
 * `rows` real samples. */
static int64_t replica_rows(const mxu_model *model, int index, int64_t rows) {
  int64_t first = (int64_t)index * model->plan.batch;
  int64_t left = rows - first;
  return left < 0 ? 0 : left < model->plan.batch ? left : model->plan.batch;
}

/* Head h's labels and targets of the replica's `own` samples from the
 * data's output h, zeros after them. */
static void load_targets(mxu_model *model, mxu_replica *replica, int h,
                         const mxu_dataset *all, const int64_t *order,
                         int64_t first, int64_t own) {
  const mxu_head_plan *hp = &model->plan.head[h];
  mxu_dataset data;
  mxu_dataset_output_view(all, h, &data);
  int64_t batch = model->plan.batch;
  int32_t *labels = (int32_t *)(void *)mxu_replica_floats(replica, hp->labels);
  float *targets = mxu_replica_floats(replica, hp->targets);
  int64_t values = output_values(model, h);
  int positional = positional_labels(model, h, &data);
  int64_t positions = positional ? mxu_loss_positions(model, h) : 1;
  int given = data.targets && (data.target_size == values ||
                               (positional && data.target_size == positions));
  memset(labels, 0, (size_t)(batch * positions) * sizeof *labels);
  memset(targets, 0, (size_t)(batch * values) * sizeof *targets);
  /* predict's data has neither: labels read as class 0, targets as 0. */
  if (own > 0)
    mxu_dataset_gather(&data, order, first, own, NULL,
                       data.num_classes && positions == 1 ? labels : NULL,
                       given ? targets : NULL);
  if (positional) { /* each position's class index, from the targets */
    const mxu_output_loss *spec = &model->heads[h].spec;
    for (int64_t i = 0; given && i < own * positions; i++)
      labels[i] =
          spec->has_ignore_class && targets[i] == (float)spec->ignore_class
              ? spec->ignore_class /* any int, past float's range */
              : (int32_t)targets[i];
    return;
  }
  if (given || !data.num_classes) return;
  for (int64_t r = 0; r < own; r++) {
    if (values == 1)
      targets[r] = (float)labels[r];
    else
      targets[r * values + labels[r]] = 1.0f;
  }
}

/* Each of the replica's samples' weight in the loss: its sample weight
 * (1 without) times its class's weight, while training with class_weight
 * (plan->class_weight); 0 past its real rows. The host reads them when
 * the batch has any (plan->weighted), the devices always. */
static void load_weights(mxu_model *model, mxu_replica *replica,
                         const mxu_dataset *data, const int64_t *order,
                         int64_t first, int64_t own) {
  const mxu_plan *plan = &model->plan;
  float *w = mxu_replica_floats(replica, plan->weight);
  for (int64_t r = 0; r < plan->batch; r++) {
    int64_t i = r < own ? (order ? order[first + r] : first + r) : -1;
    w[r] = i < 0 ? 0.0f : data->weights ? data->weights[i] : 1.0f;
    if (i >= 0 && plan->class_weight)
      w[r] *= plan->class_weight[data->labels[i]];
  }
}

/* Copies a replica's samples of the global batch starting at `first` (of
 * order, or of the data set) into its arena, with zeros after its real
 * rows, and marks those rows. */
static void load_replica(mxu_model *model, mxu_replica *replica,
                         const mxu_dataset *data, const int64_t *order,
                         int64_t first, int64_t rows) {
  mxu_plan *plan = &model->plan;
  int64_t batch = plan->batch;
  int64_t own = replica_rows(model, replica->index, rows);
  first += (int64_t)replica->index * batch;
  for (int k = 0; k < model->input_count; k++) {
    int64_t per = mxu_shape_count(&model->layers[model->inputs[k]].out_shape);
    float *x = mxu_replica_floats(replica, plan->act[model->inputs[k]]);
    if (own > 0 && k == 0)
      mxu_dataset_gather(data, order, first, own, x, NULL, NULL);
    else if (own > 0)
      mxu_dataset_gather_input(data, k, order, first, own, x);
    memset(x + own * per, 0, (size_t)((batch - own) * per) * 4);
  }
  for (int h = 0; h < model->head_count; h++)
    load_targets(model, replica, h, data, order, first, own);
  mxu_replica_set_rows(model, replica, own);
  load_weights(model, replica, data, order, first, own);
}

/* Where head h's loss keeps rows (mxu_loss_keeps_rows): each local
 * slice's kept positions, those a padding mask reaching the loss leaves
 * (its loss_mask: ids != 0 in the input it holds, or a Masking's steps not
 * all mask_value) and not labelled ignore_class, summed per logical
 * replica; each slice's factor is its logical replica's real samples over
 * that sum (0 when none is kept, as Keras' divide_no_nan). */
static void count_kept(mxu_model *model, int h) {
  mxu_plan *plan = &model->plan;
  mxu_head_plan *hp = &plan->head[h];
  const mxu_output_loss *spec = &model->heads[h].spec;
  int64_t positions = mxu_loss_positions(model, h), width = 0;
  const mxu_layer *holder =
      hp->loss_mask >= 0 ? &model->layers[hp->loss_mask] : NULL;
  int masking = holder && holder->cls->computes_mask;
  int input = !holder ? -1 : masking ? holder->inputs[0] : holder->index;
  float padding = masking ? holder->config.mask_value : 0.0f;
  if (input >= 0)
    width = mxu_shape_count(&model->layers[input].out_shape) / positions;
  double valid[plan->local_count], own[plan->local_count];
  for (int r = 0; r < plan->local_count; r++) {
    const mxu_replica *replica = &plan->replica[r];
    const float *mask = mxu_replica_floats(replica, plan->mask);
    const float *x =
        input >= 0 ? mxu_replica_floats(replica, plan->act[input]) : NULL;
    const int32_t *labels =
        (const int32_t *)(const void *)mxu_replica_floats(replica, hp->labels);
    valid[r] = own[r] = 0;
    for (int64_t n = 0; n < plan->batch && mask[n] != 0.0f; n++, own[r]++)
      for (int64_t i = n * positions; i < (n + 1) * positions; i++)
        valid[r] +=
            !(spec->has_ignore_class && labels[i] == spec->ignore_class) &&
            (!x || mxu_step_kept(x + i * width, width, padding));
  }
  for (int r = 0; r < plan->local_count; r++) {
    int logical = plan->replica[r].index / plan->split;
    double v = 0, o = 0;
    for (int s = 0; s < plan->local_count; s++)
      if (plan->replica[s].index / plan->split == logical)
        v += valid[s], o += own[s];
    hp->mask_factor[r] = v > 0 ? o / v : 0.0;
  }
}

/* The replicas' copies run on all the step's threads: on one, Fashion-MNIST's
 * 3 MB a step took 2-3% of it while the other core waited. */
static void load_batch(mxu_model *model, const mxu_dataset *data,
                       const int64_t *order, int64_t first, int64_t rows) {
  mxu_plan *plan = &model->plan;
  plan->weighted = data->weights || plan->class_weight;
  int threads = plan->workers * plan->intra_threads;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int r = 0; r < plan->local_count; r++)
    load_replica(model, &plan->replica[r], data, order, first, rows);
  for (int h = 0; h < model->head_count; h++)
    if (mxu_loss_keeps_rows(model, h)) count_kept(model, h);
}

/* A run's metrics' tallies (mxu_plan.tallies summed over its steps). */
typedef struct tally_totals {
  double at[MXU_MAX_TALLY_VALUES];
} tally_totals;

static void add_tallies(const mxu_model *model, tally_totals *totals) {
  for (int v = 0; v < model->plan.tally_values; v++)
    totals->at[v] += model->plan.tallies[v];
}

/* Each head's mean loss and metrics from sums over `samples`. */
static void output_means(const mxu_model *model, const mxu_step_result *sums,
                         const tally_totals *tallies, double samples,
                         mxu_output_log *out) {
  for (int h = 0; h < model->head_count; h++) {
    const mxu_head *head = &model->heads[h];
    const mxu_head_sums *t = &sums->heads[h];
    mxu_output_log *o = &out[h];
    o->name = mxu_model_output_name(model, h);
    o->loss = t->loss / (samples > 0 ? samples : 1.0);
    o->val_loss = NAN;
    o->metric_count = head->metric_count;
    for (int m = 0; m < head->metric_count; m++) {
      o->metrics[m] = head->metric[m];
      o->values[m] =
          head->tally[m] >= 0
              ? mxu_tally_result(head->metric_kind[m], &head->metric_options[m],
                                 tallies->at + head->tally[m],
                                 mxu_head_row_values(model, h))
              : mxu_metric_result(head->metric_kind[m], t->metric[m],
                                  t->divisor[m]);
      o->val_values[m] = NAN;
    }
  }
}

/* A model of one output's first metric, where logs say accuracy. */
static double first_metric(const mxu_model *model, const mxu_output_log *o,
                           int val) {
  if (model->head_count != 1 || !o->metric_count) return NAN;
  return val ? o->val_values[0] : o->values[0];
}

/* The devices' sums for the loaded batch. */
static mxu_step_result device_evaluate(mxu_model *model) {
  mxu_step_result r = {0};
  mxu_status s = mxu_device_evaluate(model, &r);
  r.status = s;
  return r;
}

mxu_status mxu_evaluate_outputs(mxu_model *model, const mxu_dataset *data,
                                int batch_size, double *loss,
                                mxu_output_log *outputs) {
  MXU_TRY(check_data(model, data, "evaluate"));
  if (batch_size < 0)
    return mxu_fail(MXU_ERR_ARG, "evaluate: batch size %d is negative",
                    batch_size);
  MXU_TRY(ensure_batch(model, batch_size ? batch_size : global_batch(model)));
  int64_t batch = global_batch(model);
  mxu_step_result totals = {0};
  tally_totals tallies = {{0}};
  mxu_step_key key = {0, 0, 0, 0};
  for (int64_t first = 0; first < data->count; first += batch) {
    int64_t rows = data->count - first < batch ? data->count - first : batch;
    load_batch(model, data, NULL, first, rows);
    mxu_step_result r = model->device ? device_evaluate(model)
                                      : mxu_strategy_step(model, &key, 1.0f);
    MXU_TRY(r.status);
    mxu_step_result_add(&totals, &r);
    add_tallies(model, &tallies);
  }
  double n = data->count ? (double)data->count : 1.0;
  double penalty = model->penalized ? mxu_regularization_loss(model) : 0.0;
  if (loss) *loss = totals.loss_sum / n + penalty;
  if (outputs) output_means(model, &totals, &tallies, n, outputs);
  return MXU_OK;
}

mxu_status mxu_evaluate(mxu_model *model, const mxu_dataset *data,
                        int batch_size, double *loss, double *accuracy) {
  mxu_output_log outputs[MXU_MAX_OUTPUTS];
  MXU_TRY(mxu_evaluate_outputs(model, data, batch_size, loss, outputs));
  /* A model of several outputs has no one accuracy. */
  if (accuracy) *accuracy = first_metric(model, &outputs[0], 0);
  return MXU_OK;
}

mxu_status mxu_predict(mxu_model *model, const float *x, int64_t count,
                       float *out) {
  if (!model || !model->compiled)
    return mxu_fail(MXU_ERR_ARG, "predict: compile the model first");
  if (!x || !out || count < 0)
    return mxu_fail(MXU_ERR_ARG, "predict: x and out are required");
  if (mxu_model_output_count(model) != 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "predict: the model has %d outputs; mxu_predict_outputs "
                    "takes an array for each",
                    mxu_model_output_count(model));
  if (model->input_count != 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "predict: the model has %d inputs; mxu_predict_outputs "
                    "takes an array for each",
                    model->input_count);
  return mxu_predict_outputs(model, &x, count, &out);
}

int64_t mxu_fit_batch_size(int batch_size, int steps_per_epoch,
                           int64_t samples) {
  if (batch_size > 0) return batch_size;
  if (steps_per_epoch > 0)
    return (samples + steps_per_epoch - 1) / steps_per_epoch;
  return 32;
}

static mxu_status resolve_batch(const mxu_fit_config *c, int64_t count,
                                int *batch, int *steps) {
  if (c->epochs <= 0)
    return mxu_fail(MXU_ERR_ARG, "fit: epochs must be at least 1, got %d",
                    c->epochs);
  if (c->batch_size < 0 || c->steps_per_epoch < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "fit: batch size %d and steps per epoch %d must not be "
                    "negative",
                    c->batch_size, c->steps_per_epoch);
  int64_t inferred =
      mxu_fit_batch_size(c->batch_size, c->steps_per_epoch, count);
  if (inferred > count)
    return mxu_fail(MXU_ERR_ARG,
                    "fit: batch size %lld is larger than the %lld training "
                    "samples; use a batch size of at most %lld",
                    (long long)inferred, (long long)count, (long long)count);
  *batch = (int)inferred;
  /* Static shapes: the last partial batch is dropped, as on a TPU. When
   * the batch was inferred from steps_per_epoch, that drops a step. */
  int64_t full = count / *batch;
  *steps = c->steps_per_epoch && c->batch_size ? c->steps_per_epoch : (int)full;
  if (*steps > full)
    return mxu_fail(MXU_ERR_ARG,
                    "fit: %d steps of %d samples need %lld samples per epoch "
                    "but the data set has %lld",
                    *steps, *batch, (long long)*steps * *batch,
                    (long long)count);
  return MXU_OK;
}

typedef struct epoch_totals {
  mxu_step_result sums;
  tally_totals tallies;
  int64_t samples;
  mxu_output_log outputs[MXU_MAX_OUTPUTS]; /* the logs' means */
} epoch_totals;

/* Writes a checkpoint when one is due after `step` of `epoch` has been
 * applied: every checkpoint_every steps, or at an epoch's end when that is
 * 0 (the caller passes epoch_end). */
static mxu_status maybe_checkpoint(mxu_model *model, const mxu_fit_config *c,
                                   int epoch, int step, int steps,
                                   int epoch_end) {
  if (!c->checkpoint_dir) return MXU_OK;
  int64_t done = (int64_t)epoch * steps + step + 1;
  int due = c->checkpoint_every > 0
                ? !epoch_end && done % c->checkpoint_every == 0
                : epoch_end;
  if (!due) return MXU_OK;
  mxu_train_position next = {.epoch = step + 1 == steps ? epoch + 1 : epoch,
                             .step = step + 1 == steps ? 0 : step + 1,
                             .seed = c->seed};
  MXU_TRY(mxu_device_sync(model));
  mxu_strategy_sync_slots(model);
  /* One process writes: all hold the same model. */
  if (mxu_distributed_rank() != 0) return MXU_OK;
  return mxu_checkpoint_save(model, c->checkpoint_dir, &next, 2);
}

/* Keras' logs over `outputs` (means, their val_ too): the total loss, a
 * model of one output's first metric as its accuracy, and each output's
 * loss and metrics. */
static mxu_logs logs_of(const mxu_model *model, int epoch, double loss,
                        double val_loss, const mxu_output_log *outputs) {
  int one = model->head_count == 1 && outputs[0].metric_count;
  mxu_logs logs = {.epoch = epoch,
                   .loss = loss,
                   .accuracy = first_metric(model, &outputs[0], 0),
                   .val_loss = val_loss,
                   .val_accuracy = first_metric(model, &outputs[0], 1),
                   .learning_rate = mxu_model_learning_rate(model),
                   .metric = one ? outputs[0].metrics[0] : NULL,
                   .output_count = model->head_count,
                   .outputs = outputs,
                   .out = NULL}; /* callbacks get fit's stream */
  return logs;
}

/* Keras' logs of the epoch so far (no validation yet). */
static mxu_logs epoch_logs(const mxu_model *model, int epoch,
                           epoch_totals *totals) {
  double n = totals->samples ? (double)totals->samples : 1.0;
  output_means(model, &totals->sums, &totals->tallies, n, totals->outputs);
  return logs_of(model, epoch, totals->sums.loss_sum / n, NAN, totals->outputs);
}

/* The progress bar shows the logs' keys, in tf.keras' order. */
static void show_progress(mxu_progress *progress, int step,
                          const mxu_logs *logs, int final) {
  char keys[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  mxu_metric_value values[MXU_MAX_LOG_KEYS];
  int n = mxu_logs_keys(logs, keys);
  for (int i = 0; i < n; i++)
    values[i] = (mxu_metric_value){keys[i], mxu_logs_value(logs, keys[i])};
  mxu_progress_update(progress, step, values, n, final);
}

static int steps_per_execution(const mxu_model *model) {
  int k = model->compile.steps_per_execution;
  return k > 0 ? k : 1;
}

static mxu_status check_finite(int epoch, int step, double loss_sum) {
  if (isfinite(loss_sum)) return MXU_OK;
  return mxu_fail(MXU_ERR_NUMERIC,
                  "fit: epoch %d, step %d: the loss is %s; training "
                  "stopped before applying this step (lower the learning "
                  "rate or rescale the inputs)",
                  epoch + 1, step + 1, isnan(loss_sum) ? "NaN" : "inf");
}

/* After a step is applied: the epoch's running totals, a checkpoint when
 * due, and every steps_per_execution steps the progress bar and the
 * batch-end callbacks. */
static mxu_status after_step(mxu_model *model, const mxu_fit_config *c,
                             int epoch, int step, int steps, int first,
                             mxu_progress *progress, epoch_totals *totals,
                             mxu_step_result r) {
  mxu_step_result_add(&totals->sums, &r);
  add_tallies(model, &totals->tallies);
  totals->samples += global_batch(model);
  MXU_TRY(maybe_checkpoint(model, c, epoch, step, steps, 0));
  if ((step + 1 - first) % steps_per_execution(model) != 0 && step + 1 != steps)
    return MXU_OK;
  mxu_logs logs = epoch_logs(model, epoch, totals);
  logs.step = step + 1;
  show_progress(progress, step + 1, &logs, 0);
  return mxu_callbacks_run(c, model, MXU_HOOK_BATCH_END, epoch, &logs);
}

/* One step on the loaded batch: forward, backward, the all-reduce and
 * the update, with the epoch's running totals and the hooks after it. */
static mxu_status train_step(mxu_model *model, const mxu_fit_config *c,
                             int epoch, int step, int steps, int first,
                             mxu_progress *progress, epoch_totals *totals) {
  int64_t batch = global_batch(model);
  mxu_step_key key = {1, c->seed, (uint32_t)epoch, (uint32_t)step};
  mxu_step_result r = mxu_strategy_step(model, &key, 1.0f / (float)batch);
  MXU_TRY(r.status);
  /* Keras adds the weights' penalties to each batch's mean loss, at the
   * weights before the update. */
  if (model->penalized)
    r.loss_sum += (double)batch * mxu_regularization_loss(model);
  MXU_TRY(check_finite(epoch, step, r.loss_sum));
  MXU_TRY(mxu_strategy_apply(model));
  return after_step(model, c, epoch, step, steps, first, progress, totals, r);
}

/* How many steps from `step` run in one execution on the devices: up to
 * steps_per_execution, ending where the host must see the weights (the
 * batch-end callbacks every steps_per_execution steps, a checkpoint, the
 * epoch's end). 1 on the host backends. */
static int group_size(const mxu_model *model, const mxu_fit_config *c,
                      int epoch, int step, int steps, int first) {
  int most = mxu_device_steps(model), n = 1;
  while (n < most && step + n < steps &&
         (step + n - first) % steps_per_execution(model) != 0 &&
         !(c->checkpoint_dir && c->checkpoint_every > 0 &&
           ((int64_t)epoch * steps + step + n) % c->checkpoint_every == 0))
    n++;
  return n;
}

/* n staged steps on the devices in one execution. A step whose loss is
 * not finite stops training with the steps before it applied, as on the
 * host: the run is repeated without it and the rest. */
static mxu_status device_steps(mxu_model *model, const mxu_fit_config *c,
                               int epoch, int step, int n, int steps, int first,
                               mxu_progress *progress, epoch_totals *totals) {
  mxu_step_result *r = malloc(2 * (size_t)n * sizeof *r);
  if (!r) return mxu_fail(MXU_ERR_NOMEM, "fit: out of memory");
  mxu_status s = mxu_device_run(model, n, r);
  int good = 0;
  while (s == MXU_OK && good < n && isfinite(r[good].loss_sum)) good++;
  if (s == MXU_OK && good > 0 && good < n)
    s = mxu_device_run(model, good, r + n);
  if (s == MXU_OK && good > 0) s = mxu_strategy_apply(model);
  for (int j = 0; s == MXU_OK && j < n; j++) {
    s = check_finite(epoch, step + j, r[j].loss_sum);
    if (model->plan.tally_values) mxu_device_tallies(model, j);
    if (s == MXU_OK)
      s = after_step(model, c, epoch, step + j, steps, first, progress, totals,
                     r[j]);
  }
  free(r);
  return s;
}

/* With augmentation the batches come from the prefetch thread, already
 * gathered and transformed; without, they are gathered in place. */
static void load_step(mxu_model *model, const mxu_dataset *train,
                      const int64_t *sequence, mxu_prefetch *prefetch,
                      int step) {
  int64_t batch = global_batch(model);
  if (prefetch) {
    mxu_dataset view;
    mxu_prefetch_get(prefetch, step, &view);
    load_batch(model, &view, NULL, 0, batch);
    mxu_prefetch_release(prefetch, step);
  } else {
    load_batch(model, train, sequence, step * batch, batch);
  }
}

static mxu_status train_epoch(mxu_model *model, const mxu_dataset *train,
                              const mxu_fit_config *c, int epoch, int steps,
                              int64_t *order, mxu_progress *progress,
                              epoch_totals *totals) {
  int64_t batch = global_batch(model);
  const int64_t *sequence = c->shuffle ? order : NULL;
  if (c->shuffle)
    mxu_dataset_permutation(train->count, c->seed, (uint32_t)epoch, order);
  int first = epoch == c->initial_epoch ? c->initial_step : 0;
  mxu_prefetch *prefetch = NULL;
  if (c->augment && mxu_augment_active(c->augment))
    MXU_TRY(mxu_prefetch_start(train, sequence, batch, first, steps, c->augment,
                               c->seed, (uint32_t)epoch, &prefetch));
  mxu_status status = MXU_OK;
  model->plan.class_weight = c->class_weight; /* training's, not validation's */
  for (int step = first, n = 1; step < steps && status == MXU_OK; step += n) {
    if (!model->device) {
      load_step(model, train, sequence, prefetch, step);
      status =
          train_step(model, c, epoch, step, steps, first, progress, totals);
    } else {
      n = group_size(model, c, epoch, step, steps, first);
      for (int j = 0; j < n; j++) {
        load_step(model, train, sequence, prefetch, step + j);
        mxu_step_key key = {1, c->seed, (uint32_t)epoch, (uint32_t)(step + j)};
        mxu_device_stage(model, j, &key, 1.0f / (float)batch);
      }
      status = device_steps(model, c, epoch, step, n, steps, first, progress,
                            totals);
    }
    if (model->stop_training) break;
  }
  model->plan.class_weight = NULL;
  mxu_prefetch_stop(prefetch);
  return status;
}

static mxu_status grow_history(mxu_model *model, int epochs) {
  free(model->history.epochs);
  model->history.count = 0;
  model->history.epochs = calloc((size_t)epochs, sizeof(mxu_epoch_log));
  if (!model->history.epochs)
    return mxu_fail(MXU_ERR_NOMEM, "fit: out of memory");
  return MXU_OK;
}

/* The validation of an epoch, into its history entry. */
static mxu_status validate(mxu_model *model, const mxu_dataset *data,
                           mxu_epoch_log *log) {
  mxu_output_log val[MXU_MAX_OUTPUTS];
  MXU_TRY(mxu_evaluate_outputs(model, data, 0, &log->val_loss, val));
  for (int h = 0; h < model->head_count; h++) {
    log->outputs[h].val_loss = val[h].loss;
    memcpy(log->outputs[h].val_values, val[h].values, sizeof val[h].values);
  }
  log->val_accuracy = first_metric(model, &val[0], 0);
  return MXU_OK;
}

static mxu_status run_epochs(mxu_model *model, const mxu_dataset *train,
                             const mxu_fit_config *c, int steps, int64_t *order,
                             mxu_logs *logs) {
  FILE *out = c->out ? c->out : stdout;
  for (int epoch = c->initial_epoch; epoch < c->epochs; epoch++) {
    mxu_progress progress;
    /* Only rank 0 of an MPI world prints. */
    int verbose = mxu_distributed_rank() == 0 ? c->verbose : 0;
    mxu_progress_epoch(&progress, out, verbose, epoch + 1, c->epochs, steps);
    epoch_totals totals = {0};
    double start = mxu_now_seconds();
    MXU_TRY(mxu_callbacks_run(c, model, MXU_HOOK_EPOCH_BEGIN, epoch, NULL));
    MXU_TRY(
        train_epoch(model, train, c, epoch, steps, order, &progress, &totals));
    mxu_epoch_log *log = &model->history.epochs[model->history.count++];
    log->epoch = epoch + 1;
    mxu_logs so_far = epoch_logs(model, epoch, &totals);
    log->loss = so_far.loss;
    log->accuracy = so_far.accuracy;
    log->samples = totals.samples;
    log->val_loss = log->val_accuracy = NAN;
    log->output_count = so_far.output_count;
    memcpy(log->outputs, totals.outputs, sizeof log->outputs);
    int freq = c->validation_freq > 0 ? c->validation_freq : 1;
    if (c->validation && (epoch + 1) % freq == 0)
      MXU_TRY(validate(model, c->validation, log));
    log->seconds = mxu_now_seconds() - start;
    /* The logs of the epoch's end live in the history, past this call. */
    *logs = logs_of(model, epoch, log->loss, log->val_loss, log->outputs);
    show_progress(&progress, steps, logs, 1);
    MXU_TRY(maybe_checkpoint(model, c, epoch, steps - 1, steps, 1));
    MXU_TRY(mxu_callbacks_run(c, model, MXU_HOOK_EPOCH_END, epoch, logs));
    if (model->stop_training) break;
  }
  return MXU_OK;
}

mxu_status mxu_fit(mxu_model *model, const mxu_dataset *train,
                   const mxu_fit_config *config, const mxu_history **history) {
  MXU_TRY(check_data(model, train, "fit"));
  if (!config) return mxu_fail(MXU_ERR_ARG, "fit: config is NULL");
  if (config->validation)
    MXU_TRY(check_data(model, config->validation, "fit: validation data"));
  int batch = 0, steps = 0;
  MXU_TRY(resolve_batch(config, train->count, &batch, &steps));
  if (config->initial_epoch < 0 || config->initial_epoch >= config->epochs ||
      config->initial_step < 0 || config->initial_step >= steps)
    return mxu_fail(MXU_ERR_ARG,
                    "fit: cannot start at epoch %lld, step %lld: training "
                    "has %d epochs of %d steps",
                    (long long)config->initial_epoch + 1,
                    (long long)config->initial_step + 1, config->epochs, steps);
  if (config->checkpoint_every < 0)
    return mxu_fail(MXU_ERR_ARG, "fit: checkpoint_every %d is negative",
                    config->checkpoint_every);
  if (config->augment) {
    MXU_TRY(mxu_augment_check(config->augment));
    if (train->shape.rank != 3)
      return mxu_fail(MXU_ERR_SHAPE,
                      "fit: augmentation needs images (height, width, "
                      "channels), but the samples have rank %d",
                      train->shape.rank);
    if ((train->more_count || train->out_count || train->weights) &&
        mxu_augment_active(config->augment))
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "fit: augmentation transforms the images of a model "
                      "of one input and one output, without sample weights; "
                      "this one has %d inputs and %d outputs (augment "
                      "inside the model instead: RandomFlip, "
                      "RandomRotation, ...)",
                      model->input_count, model->head_count);
  }
  MXU_TRY(check_class_weight(model, train, config));
  MXU_TRY(ensure_batch(model, batch));
  MXU_TRY(grow_history(model, config->epochs));
  int lock = -1;
  if (config->checkpoint_dir && mxu_distributed_rank() == 0)
    MXU_TRY(mxu_checkpoint_lock(config->checkpoint_dir, &lock));
  int64_t *order = malloc((size_t)train->count * sizeof *order);
  if (!order) {
    mxu_checkpoint_unlock(lock);
    return mxu_fail(MXU_ERR_NOMEM, "fit: out of memory");
  }
  model->stop_training = 0;
  mxu_status status = mxu_device_invalidate(model); /* the host's may be new */
  mxu_output_log none[MXU_MAX_OUTPUTS];
  static const tally_totals no_tallies;
  output_means(model, &(mxu_step_result){0}, &no_tallies, 1.0, none);
  mxu_logs logs = logs_of(model, 0, 0.0, NAN, none);
  if (status == MXU_OK)
    status = mxu_callbacks_run(config, model, MXU_HOOK_TRAIN_BEGIN, 0, NULL);
  if (status == MXU_OK)
    status = run_epochs(model, train, config, steps, order, &logs);
  /* The steps applied on the devices are the host's too, even after a
   * failure. */
  mxu_status synced = mxu_device_sync(model);
  if (status == MXU_OK) status = synced;
  mxu_strategy_sync_slots(model);
  if (status == MXU_OK) {
    mxu_optimizer_finalize(model);
    status =
        mxu_callbacks_run(config, model, MXU_HOOK_TRAIN_END, logs.epoch, &logs);
  }
  free(order);
  mxu_checkpoint_unlock(lock);
  if (history) *history = &model->history;
  return status;
}

/* Replica `replica`'s rows of every input, from the callers' arrays, with
 * zeros after its real rows. */
static void load_inputs(mxu_model *model, mxu_replica *replica,
                        const float *const *inputs, int64_t first,
                        int64_t rows) {
  int64_t batch = model->plan.batch;
  int64_t own = replica_rows(model, replica->index, rows);
  first += (int64_t)replica->index * batch;
  for (int k = 0; k < model->input_count; k++) {
    int node = model->inputs[k];
    int64_t sample = mxu_shape_count(&model->layers[node].out_shape);
    float *x = mxu_replica_floats(replica, model->plan.act[node]);
    if (own > 0)
      memcpy(x, inputs[k] + first * sample, (size_t)(own * sample) * 4);
    memset(x + own * sample, 0, (size_t)((batch - own) * sample) * 4);
  }
  model->plan.weighted = 0;
  for (int h = 0; h < model->head_count; h++) {
    const mxu_head_plan *hp = &model->plan.head[h];
    memset(mxu_replica_floats(replica, hp->labels), 0,
           (size_t)(batch * mxu_loss_positions(model, h)) * sizeof(int32_t));
    memset(mxu_replica_floats(replica, hp->targets), 0,
           (size_t)(batch * output_values(model, h)) * sizeof(float));
  }
  mxu_replica_set_rows(model, replica, own);
}

mxu_status mxu_predict_outputs(mxu_model *model, const float *const *inputs,
                               int64_t count, float *const *outputs) {
  if (!model || !model->compiled)
    return mxu_fail(MXU_ERR_ARG, "predict_outputs: compile the model first");
  if (!inputs || !outputs || count < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "predict_outputs: inputs and outputs are required");
  for (int k = 0; k < model->input_count; k++) {
    if (!inputs[k])
      return mxu_fail(MXU_ERR_ARG, "predict_outputs: input %d is NULL", k);
    MXU_TRY(check_ids(model, k, inputs[k], count, "predict"));
  }
  int output_count = mxu_model_output_count(model);
  int nodes[MXU_MAX_INPUTS];
  for (int j = 0; j < output_count; j++) {
    nodes[j] = mxu_model_output_node(model, j);
    if (!outputs[j])
      return mxu_fail(MXU_ERR_ARG, "predict_outputs: output %d is NULL", j);
  }
  MXU_TRY(ensure_batch(model, global_batch(model)));
  int64_t batch = global_batch(model);
  mxu_step_key key = {0, 0, 0, 0};
  for (int64_t first = 0; first < count; first += batch) {
    int64_t rows = count - first < batch ? count - first : batch;
    for (int r = 0; r < model->plan.local_count; r++)
      load_inputs(model, &model->plan.replica[r], inputs, first, rows);
    float *at[MXU_MAX_INPUTS];
    for (int j = 0; j < output_count; j++)
      at[j] = outputs[j] +
              first * mxu_shape_count(&model->layers[nodes[j]].out_shape);
    if (model->device) {
      MXU_TRY(mxu_device_predict(model, rows, at));
      continue;
    }
    mxu_strategy_step(model, &key, 1.0f);
    for (int j = 0; j < output_count; j++)
      mxu_strategy_outputs(model, nodes[j], rows, at[j]);
  }
  return MXU_OK;
}
