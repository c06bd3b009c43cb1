/* compile.c — turns a model into a static plan: the parameter table and its
 * buffers with Keras' initialisers, and for every replica this process
 * runs, backend ops for its fixed batch slice and one arena holding every
 * activation and gradient. */
#include "model/layers/layers.h"
#include "model/model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mxu_compile_config mxu_compile_defaults(void) {
  mxu_compile_config config = {0};
  config.optimizer = mxu_adam(1e-3f);
  config.loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  config.huber_delta = 1.0f;
  config.gamma = 2.0f;
  config.alpha = 0.25f;
  config.batch_size = 32;
  config.backend = MXU_BACKEND_CPU;
  config.seed = 0;
  return config;
}

/* Readers of each node's output into counts (zeroed): the nodes that
 * read it, and the caller for each model output (the loss for the
 * first). */
static void count_readers(const mxu_model *model, int *counts) {
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    for (int k = 0; k < layer->input_count; k++) counts[layer->inputs[k]]++;
  }
  counts[mxu_model_output(model)]++;
  for (int k = 1; k < model->output_count; k++) counts[model->outputs[k]]++;
}

/* Every node must lead to the output: Keras' model holds only the layers
 * between its inputs and outputs, and a tensor nobody reads would get no
 * gradient. */
static mxu_status check_graph(const mxu_model *model) {
  int output = mxu_model_output(model);
  if (model->input_count == 0 ||
      model->layers[output].cls == &mxu_input_layer_class)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the model needs an input and at least one "
                    "layer");
  int *readers = calloc((size_t)model->layer_count, sizeof *readers);
  if (!readers) return mxu_fail(MXU_ERR_NOMEM, "compile: out of memory");
  count_readers(model, readers);
  int unread = -1;
  for (int i = 0; i < model->layer_count && unread < 0; i++)
    if (!readers[i]) unread = i;
  free(readers);
  if (unread >= 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the output of layer '%s' is used by no layer "
                    "and is not a model output; remove it or pass it to "
                    "mxu_model_outputs",
                    model->layers[unread].name);
  return MXU_OK;
}

/* A padding mask at an output: its loss scores the unmasked positions
 * of an output (steps, values), their mask from the model input
 * (an Embedding of it with mask_zero, or a Masking of it), which
 * load_batch counts before the step. Sets the head's loss_mask. */
static mxu_status check_loss_mask(mxu_model *model, int h) {
  const mxu_layer *out = &model->layers[model->heads[h].node];
  model->plan.head[h].loss_mask = out->mask_out;
  if (out->mask_out < 0) return MXU_OK;
  const mxu_layer *holder = &model->layers[out->mask_out];
  int from_input =
      holder->cls == &mxu_input_layer_class ||
      (holder->cls->computes_mask &&
       model->layers[holder->inputs[0]].cls == &mxu_input_layer_class);
  int64_t steps = holder->cls == &mxu_input_layer_class
                      ? holder->out_shape.dims[0]
                      : holder->in_shape.dims[0];
  const char *why =
      out->out_shape.rank != 2 || out->out_shape.dims[0] != steps
          ? "the output must be (steps, values), the masked steps'"
      : !from_input ? "the mask must come from the model input (an Embedding "
                      "of it with mask_zero, or a Masking of it)"
                    : NULL;
  if (!why) return MXU_OK;
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "compile: a padding mask reaches the model output '%s', "
                  "whose loss Keras masks: %s",
                  out->name, why);
}

static mxu_status check_schedule(const mxu_lr_decay *s) {
  if (s->kind == MXU_DECAY_NONE) return MXU_OK;
  if ((unsigned)s->kind > MXU_COSINE_DECAY_RESTARTS)
    return mxu_fail(MXU_ERR_ARG, "compile: schedule %d is not one mxu has",
                    (int)s->kind);
  int ok =
      isfinite(s->initial_learning_rate) && s->alpha >= 0 &&
      isfinite(s->decay_rate) && isfinite(s->power) &&
      (s->kind == MXU_PIECEWISE_CONSTANT || s->decay_steps > 0) &&
      (s->kind != MXU_COSINE_DECAY || !s->has_warmup || s->warmup_steps >= 0) &&
      (s->kind != MXU_COSINE_DECAY_RESTARTS || (s->t_mul > 0 && s->m_mul >= 0));
  if (s->kind == MXU_PIECEWISE_CONSTANT) {
    ok =
        ok && s->boundary_count >= 1 && s->boundary_count <= MXU_MAX_BOUNDARIES;
    for (int i = 1; ok && i < s->boundary_count; i++)
      ok = s->boundaries[i] > s->boundaries[i - 1];
  }
  return ok ? MXU_OK
            : mxu_fail(MXU_ERR_ARG,
                       "compile: the learning-rate schedule's settings are "
                       "out of range (decay steps > 0, boundaries rising, "
                       "at most %d of them)",
                       MXU_MAX_BOUNDARIES);
}

static mxu_status check_optimizer(const mxu_optimizer_config *o) {
  MXU_TRY(check_schedule(&o->schedule));
  if ((unsigned)o->kind > MXU_ADAMW)
    return mxu_fail(MXU_ERR_ARG, "compile: optimizer %d is not one mxu has",
                    (int)o->kind);
  const char *name = mxu_optimizer_class_name(o->kind);
  /* A schedule may start at 0 (a warmup from 0); a fixed rate may not. */
  if (o->schedule.kind == MXU_DECAY_NONE &&
      (!(o->learning_rate > 0.0f) || !isfinite(o->learning_rate)))
    return mxu_fail(MXU_ERR_ARG, "compile: learning rate %g must be positive",
                    (double)o->learning_rate);
  int betas = o->kind == MXU_ADAM || o->kind == MXU_ADAMW ||
              o->kind == MXU_ADAMAX || o->kind == MXU_NADAM ||
              o->kind == MXU_LION;
  if (betas && !(o->beta_1 >= 0 && o->beta_1 < 1 && o->beta_2 >= 0 &&
                 o->beta_2 < 1 && o->epsilon >= 0))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %s needs 0 <= beta_1, beta_2 < 1 and "
                    "epsilon >= 0",
                    name);
  if (!(o->momentum >= 0 && o->momentum <= 1) ||
      !(o->rho >= 0 && o->rho <= 1) || !(o->epsilon >= 0) ||
      !(o->initial_accumulator_value >= 0) || !(o->weight_decay >= 0))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %s needs momentum and rho in [0, 1] and "
                    "epsilon, initial_accumulator_value, weight_decay >= 0",
                    name);
  int clips = (o->clipnorm > 0) + (o->global_clipnorm > 0) + (o->clipvalue > 0);
  if (clips > 1 || o->clipnorm < 0 || o->global_clipnorm < 0 ||
      o->clipvalue < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: only one of clipnorm, global_clipnorm and "
                    "clipvalue can be set (and none negative), as in Keras");
  if (o->use_ema && !(o->ema_momentum >= 0 && o->ema_momentum <= 1 &&
                      o->ema_overwrite_frequency >= 0))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: use_ema needs ema_momentum in [0, 1] and "
                    "ema_overwrite_frequency >= 0 (0: never), got %g and %d",
                    (double)o->ema_momentum, o->ema_overwrite_frequency);
  if ((o->clipnorm > 0 || o->global_clipnorm > 0) && mxu_distributed_size() > 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "compile: clipnorm and global_clipnorm need each "
                    "process to hold the whole gradient, which several MPI "
                    "processes do not (clipvalue works)");
  return MXU_OK;
}

mxu_output_loss mxu_output_spec(const mxu_compile_config *c, int k) {
  if (c->output_count > k) return c->outputs[k];
  mxu_output_loss spec = {.loss = c->loss,
                          .from_logits = c->from_logits,
                          .label_smoothing = c->label_smoothing,
                          .huber_delta = c->huber_delta,
                          .gamma = c->gamma,
                          .alpha = c->alpha,
                          .apply_class_balancing = c->apply_class_balancing,
                          .has_ignore_class = c->has_ignore_class,
                          .ignore_class = c->ignore_class,
                          .weight = 1.0f,
                          .metrics = {"accuracy"}};
  if (c->metrics[0]) memcpy(spec.metrics, c->metrics, sizeof spec.metrics);
  memcpy(spec.weighted_metrics, c->weighted_metrics,
         sizeof spec.weighted_metrics);
  return spec;
}

static mxu_status head_metrics(const mxu_layer *out, const mxu_output_loss *o,
                               mxu_head *h);

/* An output's loss; with `shapes`, also against the output's shape (a
 * loss named for every output of a model of several is checked against
 * each when fit or evaluate scores it: Keras' compile takes it). */
static mxu_status check_head(const mxu_layer *out, const mxu_output_loss *o,
                             int shapes) {
  if ((unsigned)o->loss > MXU_CATEGORICAL_FOCAL_CROSSENTROPY)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: loss %d of output '%s' is not an "
                    "mxu_loss",
                    (int)o->loss, out->name);
  if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: label_smoothing %g must be in [0, 1]",
                    (double)o->label_smoothing);
  if (o->label_smoothing > 0.0f && !mxu_loss_smooths(o->loss))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: label_smoothing is an option of the categorical "
                    "and binary cross-entropies (and their focal kinds) only");
  if (!(o->gamma >= 0.0f && isfinite(o->gamma) && isfinite(o->alpha)))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: a focal loss's gamma %g must be >= 0 and its "
                    "alpha %g a number",
                    (double)o->gamma, (double)o->alpha);
  if (o->has_ignore_class && o->loss != MXU_SPARSE_CATEGORICAL_CROSSENTROPY)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: ignore_class is an option of the sparse "
                    "categorical cross-entropy only (output '%s' has %s)",
                    out->name, mxu_loss_name(o->loss));
  if (o->loss == MXU_HUBER &&
      !(o->huber_delta > 0.0f && isfinite(o->huber_delta)))
    return mxu_fail(MXU_ERR_ARG, "compile: Huber's delta %g must be positive",
                    (double)o->huber_delta);
  if (!(o->weight >= 0.0f && isfinite(o->weight)))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the loss weight %g of output '%s' must be a "
                    "number >= 0",
                    (double)o->weight, out->name);
  const mxu_shape *shape = &out->out_shape;
  if (shapes && mxu_loss_is_softmax(o->loss) &&
      shape->dims[shape->rank - 1] < 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "compile: the output layer '%s' must output one score "
                    "per class (at least 2 classes, along the last axis) "
                    "for a categorical cross-entropy loss",
                    out->name);
  mxu_head scratch;
  return head_metrics(out, o, &scratch);
}

/* A MeanIoU's rows are the output's vectors along its last axis, one a
 * sample or one a position under the categorical cross-entropies, of
 * num_classes scores; mean_iou's true classes are the class labels (the
 * sparse loss's over positions), one_hot_mean_iou's the one-hot targets'
 * (not the sparse loss's labels). */
static mxu_status check_iou(const mxu_layer *out, const mxu_output_loss *o,
                            const mxu_head *h, int m) {
  const mxu_shape *s = &out->out_shape;
  int64_t last = s->dims[s->rank - 1];
  int sparse = o->loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  const char *why =
      h->metric_options[m].num_classes != last
          ? "num_classes must be the output's last axis, its scores a row"
      : s->rank > 1 && !mxu_loss_is_softmax(o->loss)
          ? "over an output of several positions it takes the categorical "
            "cross-entropies' rows (a position's scores)"
      : h->metric_kind[m] == MXU_METRIC_MEAN_IOU && s->rank > 1 && !sparse
          ? "over positions it reads the sparse loss's class labels; use "
            "one_hot_mean_iou with one-hot targets"
      : h->metric_kind[m] == MXU_METRIC_ONE_HOT_MEAN_IOU && sparse
          ? "it reads one-hot targets, but the sparse loss's are class "
            "labels; use mean_iou"
          : NULL;
  if (!why) return MXU_OK;
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "compile: metric '%s' of output '%s' (%lld scores a row, "
                  "num_classes %d): %s",
                  h->metric_spec[m], out->name, (long long)last,
                  h->metric_options[m].num_classes, why);
}

/* What compile refuses of metric m of h (read from o): an F-score of
 * more than a row a sample, a count of class labels, a name twice. */
static mxu_status check_metric(const mxu_layer *out, const mxu_output_loss *o,
                               const mxu_head *h, int m) {
  const char *spec = h->metric_spec[m];
  const mxu_metric_options *mo = &h->metric_options[m];
  if ((mo->top_k || mo->has_class_id) &&
      h->metric_kind[m] != MXU_METRIC_BINARY_IOU && /* its class 0 or 1 */
      (out->out_shape.rank != 1 ||
       (mo->has_class_id && mo->class_id >= out->out_shape.dims[0])))
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "compile: metric '%s' of output '%s': top_k and class_id "
                    "take outputs of (classes,) a sample, class_id one of "
                    "them (the output has %lld values a sample)",
                    spec, out->name,
                    (long long)mxu_shape_count(&out->out_shape));
  if (h->metric_kind[m] == MXU_METRIC_F_SCORE && out->out_shape.rank != 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "compile: metric '%s' of output '%s': an F-score takes "
                    "outputs of (values,) a sample, as Keras' (2-D "
                    "batches)",
                    spec, out->name);
  if (mxu_metric_is_iou(h->metric_kind[m]))
    MXU_TRY(check_iou(out, o, h, m));
  else if (!mxu_metric_is_mean(h->metric_kind[m]) &&
           o->loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "compile: metric '%s' of output '%s' compares each "
                    "output value with a target of the output's shape, "
                    "but the sparse loss's targets are class labels; use "
                    "one-hot targets and categorical_crossentropy, or an "
                    "accuracy",
                    spec, out->name);
  for (int j = 0; j < m; j++)
    if (strcmp(h->metric[j], h->metric[m]) == 0)
      return mxu_fail(MXU_ERR_ARG,
                      "compile: metric '%s' of output '%s' is named "
                      "twice; Keras logs one value by each name",
                      h->metric[m], out->name);
  return MXU_OK;
}

/* A weighted metric named as a metric of the output: Keras logs it as
 * "weighted_NAME". */
static mxu_status rename_weighted(const mxu_layer *out, mxu_head *h, int m) {
  for (int j = 0; j < m; j++) {
    if (h->metric_weighted[j] || strcmp(h->metric[j], h->metric[m]) != 0)
      continue;
    char name[MXU_METRIC_LOG_SIZE + 16];
    snprintf(name, sizeof name, "weighted_%s", h->metric[m]);
    if (strlen(name) >= sizeof h->metric[m])
      return mxu_fail(MXU_ERR_ARG,
                      "compile: weighted metric '%s' of output '%s': its "
                      "name '%s' is longer than %d characters",
                      h->metric_spec[m], out->name, name,
                      MXU_METRIC_LOG_SIZE - 1);
    memcpy(h->metric[m], name, strlen(name) + 1);
  }
  return MXU_OK;
}

/* Output o's metrics, then its weighted ones, into h: their text, the
 * names logged, kinds and options, checked. */
static mxu_status head_metrics(const mxu_layer *out, const mxu_output_loss *o,
                               mxu_head *h) {
  h->metric_count = 0;
  for (int weighted = 0; weighted < 2; weighted++) {
    const char *const *list = weighted ? o->weighted_metrics : o->metrics;
    for (int i = 0; i < MXU_MAX_METRICS && list[i]; i++) {
      int m = h->metric_count;
      if (m == MXU_MAX_METRICS || strlen(list[i]) >= sizeof h->metric_spec[m])
        return mxu_fail(MXU_ERR_ARG,
                        "compile: output '%s': %s (mxu computes at most %d "
                        "metrics an output, the weighted ones included, of "
                        "at most %d characters each)",
                        out->name,
                        m == MXU_MAX_METRICS ? "too many metrics" : list[i],
                        MXU_MAX_METRICS, (int)sizeof h->metric_spec[m] - 1);
      memcpy(h->metric_spec[m], list[i], strlen(list[i]) + 1);
      MXU_TRY(mxu_metric_parse(list[i], o->loss,
                               mxu_shape_count(&out->out_shape), h->metric[m],
                               &h->metric_kind[m], &h->metric_options[m]));
      h->metric_options[m].vector =
          out->out_shape.dims[out->out_shape.rank - 1];
      h->metric_weighted[m] = (unsigned char)weighted;
      h->tally[m] = -1; /* a tally's: reserve_io numbers them */
      if (weighted) MXU_TRY(rename_weighted(out, h, m));
      MXU_TRY(check_metric(out, o, h, m));
      h->metric_count++;
    }
  }
  return MXU_OK;
}

/* The head's own copies of its metrics (checked by check_head), which its
 * spec points at. */
static void resolve_metrics(const mxu_layer *out, mxu_head *h) {
  head_metrics(out, &h->spec, h);
  for (int m = 0, plain = 0, weighted = 0; m < h->metric_count; m++) {
    if (h->metric_weighted[m])
      h->spec.weighted_metrics[weighted++] = h->metric_spec[m];
    else
      h->spec.metrics[plain++] = h->metric_spec[m];
  }
}

/* Every output's loss, into heads (the model's own at compile). */
static mxu_status resolve_heads(const mxu_model *model,
                                const mxu_compile_config *c, mxu_head *heads) {
  int outputs = mxu_model_output_count(model);
  if (c->output_count < 0 || c->output_count > MXU_MAX_OUTPUTS ||
      (c->output_count && c->output_count != outputs))
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %d output losses given but the model has %d "
                    "outputs; give one for each, in the model's order (or "
                    "none: the one loss for all)",
                    c->output_count, outputs);
  for (int k = 0; k < outputs; k++) {
    mxu_head *h = &heads[k];
    h->node = mxu_model_output_node(model, k);
    const mxu_layer *out = &model->layers[h->node];
    h->spec = mxu_output_spec(c, k);
    MXU_TRY(check_head(out, &h->spec, c->output_count || outputs == 1));
    for (int j = 0; j < k; j++)
      if (heads[j].node == h->node)
        return mxu_fail(MXU_ERR_UNSUPPORTED,
                        "compile: '%s' is the model's output %d and %d; "
                        "a tensor may be one output only",
                        out->name, j, k);
    resolve_metrics(out, h);
  }
  return MXU_OK;
}

static mxu_status check_compile(const mxu_model *model,
                                const mxu_compile_config *c) {
  if (model->layer_count == 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the model needs an input and at least one "
                    "layer");
  MXU_TRY(check_graph(model));
  if (c->batch_size <= 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: batch size %d must be a positive number of "
                    "samples",
                    c->batch_size);
  if (c->replicas < 0 || c->threads < 0 || c->steps_per_execution < 0 ||
      c->slice_rows < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: replicas (%d), threads (%d), "
                    "steps_per_execution (%d) and slice_rows (%d) must not be "
                    "negative",
                    c->replicas, c->threads, c->steps_per_execution,
                    c->slice_rows);
  if (c->threads > MXU_MAX_THREADS)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %d threads; mxu takes at most %d "
                    "(MXU_MAX_THREADS)",
                    c->threads, MXU_MAX_THREADS);
  if (c->replicas > MXU_MAX_BATCH)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %d replicas; the batch, which they split, is "
                    "at most %d (MXU_MAX_BATCH)",
                    c->replicas, MXU_MAX_BATCH);
  MXU_TRY(check_optimizer(&c->optimizer));
  mxu_head heads[MXU_MAX_OUTPUTS];
  return resolve_heads(model, c, heads);
}

/* Whether this CPU multiplies bfloat16 natively (AVX512_BF16). Without
 * it oneDNN would emulate bf16, slower than float32. */
static int cpu_has_bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return 0;
#endif
}

/* mixed_bfloat16 on a CPU that cannot still trains, in float32, which
 * mxu_model_precision tells (the command line says so). */
static mxu_status check_precision(const mxu_compile_config *c) {
  if (c->precision != MXU_PRECISION_FLOAT32 &&
      c->precision != MXU_MIXED_BFLOAT16)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: precision %d is neither float32 nor "
                    "mixed_bfloat16",
                    (int)c->precision);
  return MXU_OK;
}

mxu_precision mxu_model_precision(const mxu_model *model) {
  if (!model || !model->compiled) return MXU_PRECISION_FLOAT32;
  const mxu_compile_config *c = &model->compile;
  return c->precision == MXU_MIXED_BFLOAT16 &&
                 (c->backend != MXU_BACKEND_CPU || cpu_has_bf16())
             ? MXU_MIXED_BFLOAT16
             : MXU_PRECISION_FLOAT32;
}

/* A shared layer's other calls use the owner's weights, which must fit
 * their inputs too (Keras refuses the call otherwise), and get shadow
 * gradient space past the trainable values. */
static mxu_status shared_calls(mxu_model *model) {
  model->shadow_count = 0;
  for (int i = 0; i < model->layer_count; i++) {
    mxu_layer *layer = &model->layers[i];
    if (!mxu_layer_is_call(layer)) continue;
    const mxu_layer *owner = &model->layers[layer->owner];
    mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
    int n = mxu_layer_declare(layer, decls);
    layer->param_first = owner->param_first;
    layer->param_count = owner->param_count;
    layer->shadow_first = model->trainable_count + model->shadow_count;
    for (int k = 0; k < n; k++) {
      const mxu_param *p = &model->params[owner->param_first + k];
      int same =
          n == owner->param_count && decls[k].shape.rank == p->shape.rank;
      for (int d = 0; same && d < p->shape.rank; d++)
        same = decls[k].shape.dims[d] == p->shape.dims[d];
      if (!same)
        return mxu_fail(MXU_ERR_SHAPE,
                        "compile: layer '%s' is called on inputs its "
                        "weights do not fit (call %d, weight '%s')",
                        layer->name, layer->call, p->name);
      if (p->trainable) model->shadow_count += (p->count + 15) / 16 * 16;
    }
  }
  return MXU_OK;
}

/* A constraint's axes must be the weight's (Keras: -rank .. rank-1). */
static mxu_status check_constraint(const mxu_layer *layer, const mxu_param *p) {
  const mxu_constraint *c = &p->constraint;
  for (int a = 0; c->kind != MXU_CONSTRAINT_NONE && a < c->axis_count; a++)
    if (c->axes[a] < -p->shape.rank || c->axes[a] >= p->shape.rank ||
        p->shape.rank == 0)
      return mxu_fail(MXU_ERR_SHAPE,
                      "compile: layer '%s': the constraint of %s has axis %d "
                      "but the weight has rank %d",
                      layer->name, p->name, c->axes[a], p->shape.rank);
  return MXU_OK;
}

static mxu_status build_params(mxu_model *model) {
  int total = 0;
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  for (int i = 0; i < model->layer_count; i++)
    total += mxu_layer_declare(&model->layers[i], decls);
  free(model->params);
  model->params = calloc((size_t)total + 1, sizeof *model->params);
  if (!model->params) return mxu_fail(MXU_ERR_NOMEM, "compile: out of memory");
  model->param_count = 0;
  model->trainable_count = model->state_count = 0;
  for (int i = 0; i < model->layer_count; i++) {
    mxu_layer *layer = &model->layers[i];
    if (mxu_layer_is_call(layer)) continue; /* see shared_calls */
    int n = mxu_layer_declare(layer, decls);
    layer->param_first = model->param_count;
    layer->param_count = n;
    for (int k = 0; k < n; k++) {
      mxu_param *p = &model->params[model->param_count++];
      int64_t *counter =
          decls[k].trainable ? &model->trainable_count : &model->state_count;
      *p = (mxu_param){.layer = i,
                       .name = decls[k].name,
                       .shape = decls[k].shape,
                       .trainable = decls[k].trainable,
                       .offset = *counter,
                       .count = mxu_shape_count(&decls[k].shape),
                       .regularizer = decls[k].regularizer,
                       .constraint = decls[k].constraint};
      MXU_TRY(check_constraint(layer, p));
      /* Each weight starts on a 64-byte boundary. */
      *counter += (p->count + 15) / 16 * 16;
    }
  }
  return shared_calls(model);
}

static mxu_status allocate_params(mxu_model *model) {
  size_t trainable = (size_t)model->trainable_count * sizeof(float);
  size_t state = (size_t)model->state_count * sizeof(float);
  size_t grads = mxu_model_grad_bytes(model);
  float **buffers[] = {&model->weights, &model->grads,  &model->state,
                       &model->slot_m,  &model->slot_v, &model->slot_u,
                       &model->average};
  for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++) {
    mxu_aligned_free(*buffers[i]);
    *buffers[i] = mxu_aligned_alloc(i == 2   ? state
                                    : i == 1 ? grads
                                             : trainable);
    if (!*buffers[i])
      return mxu_fail(MXU_ERR_NOMEM, "compile: cannot allocate parameters");
  }
  int64_t largest = 1;
  model->penalized = 0;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    model->penalized |= p->regularizer.l1 != 0 || p->regularizer.l2 != 0;
    if (p->constraint.kind != MXU_CONSTRAINT_NONE && p->count > largest)
      largest = p->count;
  }
  free(model->norms);
  model->norms = malloc((size_t)largest * sizeof *model->norms);
  if (!model->norms)
    return mxu_fail(MXU_ERR_NOMEM, "compile: cannot allocate parameters");
  mxu_param_decl decls[MXU_MAX_LAYER_PARAMS];
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    if (mxu_layer_is_call(layer)) continue;
    mxu_layer_declare(layer, decls);
    for (int k = 0; k < layer->param_count; k++) {
      const mxu_param *p = &model->params[layer->param_first + k];
      float *values =
          (p->trainable ? model->weights : model->state) + p->offset;
      /* The fans' shape holds as many values as the weight's. */
      const mxu_param_decl *d = &decls[k];
      int by_fans = d->fans.rank && d->init.kind == MXU_INIT_VARIANCE_SCALING;
      mxu_status s = mxu_init_fill(&d->init, by_fans ? &d->fans : &p->shape,
                                   model->compile.seed, layer->key, k, values);
      if (s != MXU_OK)
        return mxu_fail_prefix(s, "compile: layer '%s', %s: ", layer->name,
                               p->name);
      for (int64_t j = 0; j < decls[k].ones_count; j++)
        values[decls[k].ones_first + j] = 1.0f;
    }
  }
  model->iterations = 0;
  model->u_product = 1.0f;
  model->u_product_step = 0;
  mxu_optimizer_reset(model);
  return MXU_OK;
}

mxu_status mxu_compile(mxu_model *model, const mxu_compile_config *config) {
  if (!model || !config)
    return mxu_fail(MXU_ERR_ARG, "compile: model and config are required");
  MXU_TRY(check_compile(model, config));
  MXU_TRY(check_precision(config));
  mxu_plan_release(model);
  model->compile = *config;
  resolve_heads(model, config, model->heads);
  model->head_count = mxu_model_output_count(model);
  memcpy(model->compile.metrics, model->heads[0].spec.metrics,
         sizeof model->compile.metrics);
  memcpy(model->compile.weighted_metrics, model->heads[0].spec.weighted_metrics,
         sizeof model->compile.weighted_metrics);
  for (int k = 0; k < config->output_count; k++)
    model->compile.outputs[k] = model->heads[k].spec;
  model->backend = mxu_backend_get(config->backend);
  MXU_TRY(build_params(model));
  MXU_TRY(allocate_params(model));
  model->compiled = 1;
  mxu_status status = mxu_plan_build(model, config->batch_size);
  if (status == MXU_OK && config->backend == MXU_BACKEND_PJRT)
    status = mxu_device_open(model);
  if (status != MXU_OK) model->compiled = 0;
  return status;
}

static void release_replica(mxu_model *model, mxu_replica *replica) {
  int op_count = model->layer_count * MXU_MAX_LAYER_OPS;
  for (int k = 0; replica->ops && k < op_count; k++)
    if (replica->ops[k]) model->backend->op_free(replica->ops[k]);
  free(replica->ops);
  if (replica->grads != model->grads) mxu_aligned_free(replica->grads);
  mxu_arena_release(&replica->arena);
}

void mxu_plan_release(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  mxu_device_free(model);
  for (int r = 0; plan->replica && r < plan->local_count; r++)
    release_replica(model, &plan->replica[r]);
  free(plan->replica);
  free(plan->exchange);
  free(plan->tallies);
  free(plan->tally_stage);
  free(plan->results);
  for (int h = 0; h < MXU_MAX_OUTPUTS; h++) free(plan->head[h].mask_factor);
  for (int i = 0; plan->nodes && i < model->layer_count; i++)
    model->layers[i].compiled = NULL;
  free(plan->nodes);
  free(plan->act);
  free(plan->grad);
  free(plan->consumers);
  free(plan->edges);
  memset(plan, 0, sizeof *plan);
  for (int h = 0; h < MXU_MAX_OUTPUTS; h++) plan->head[h].loss_mask = -1;
}

/* Keras fuses a final softmax into a cross-entropy loss: the loss then
 * reads the logits, with no clipping. Not where another layer reads the
 * probabilities too: its gradient is theirs, not the logits'. */
static int fuses_softmax(const mxu_model *model, int h) {
  const mxu_head *head = &model->heads[h];
  return !head->spec.from_logits && mxu_loss_is_softmax(head->spec.loss) &&
         model->plan.consumers[head->node] == 1 &&
         mxu_layer_ends_in_softmax(&model->layers[head->node]);
}

static size_t batch_bytes(int batch, const mxu_shape *shape) {
  return (size_t)batch * (size_t)mxu_shape_count(shape) * sizeof(float);
}

/* ---- slices ---------------------------------------------------------------
 * A replica's batch may run as `split` slices of rows, each through the
 * whole network with its own activations and gradient, exactly as
 * replicas do, and summed in the same fixed tree. For a layer whose
 * samples do not meet (everything but batch statistics) that is the same
 * computation, and it keeps a small model's activations in the core's L2
 * cache: Fashion-MNIST's 1000-image batch streamed ~300 MB through memory
 * a step as one slice. Splitting depends on the model and batch only, not
 * on the threads, so results stay independent of the thread count. */

/* Rows a slice should keep at least: fewer, and per-slice overheads
 * (a gradient buffer each, small GEMMs) win over the cache. */
#define SLICE_ROWS 32

static int batch_coupled(const mxu_model *model) {
  for (int i = 0; i < model->layer_count; i++)
    if (model->layers[i].cls->stats_floats || model->layers[i].cls->sync_floats)
      return 1;
  return 0;
}

/* Activation and gradient bytes of one sample through the model. */
static int64_t bytes_per_row(const mxu_model *model) {
  int64_t floats = 0;
  for (int i = 0; i < model->layer_count; i++)
    floats += mxu_shape_count(&model->layers[i].out_shape);
  return 2 * floats * (int64_t)sizeof(float);
}

static int choose_split(const mxu_model *model, int rows) {
  int asked = model->compile.slice_rows;
  /* pjrt: a device is a logical replica. */
  if (batch_coupled(model) || model->compile.backend == MXU_BACKEND_PJRT)
    return 1;
  if (asked > 0) return rows % asked == 0 ? rows / asked : 1;
  int64_t row_bytes = bytes_per_row(model);
  if (row_bytes * rows <= mxu_machine_l2_bytes() ||
      model->trainable_count * (int64_t)sizeof(float) > SLICE_ROWS * row_bytes)
    return 1;
  /* The most slices, preferring a count that 2 and 4 workers share out
   * evenly: Fashion-MNIST's 1000 rows on 2 threads ran 25 slices of 40 at
   * 109-112k images/s, 20 of 50 at 115k (one worker idled a slice's time
   * each step). */
  int split = 1, even = 0;
  for (int s = 2; rows / s >= SLICE_ROWS; s++)
    if (rows % s == 0) split = s, even = s % 4 == 0 ? s : even;
  if (even) split = even;
  /* Too few rows for two such slices: two halves down to SLICE_ROWS / 2,
   * so that two workers share the replica each on one thread, instead of
   * one worker lending oneDNN both. cifar_augmented at batch 32 on 2
   * threads: 1,089 -> 1,818 images/s; on 1 thread 0.88x, where the whole
   * replica had run Winograd (32 images) and halves run direct. */
  if (split == 1 && rows % 2 == 0 && rows / 2 >= SLICE_ROWS / 2) split = 2;
  return split;
}

/* Which replicas this process runs on how many threads, from the compile
 * config and the MPI world. */
static mxu_status plan_strategy(mxu_model *model, int batch) {
  mxu_plan *plan = &model->plan;
  const mxu_compile_config *c = &model->compile;
  int replicas = c->replicas > 0 ? c->replicas : 1;
  int processes = mxu_distributed_size();
  if (batch % replicas != 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: the global batch size %d does not divide by "
                    "the %d replicas; use a multiple of %d (each replica "
                    "takes batch / replicas samples)",
                    batch, replicas, replicas);
  if (replicas % processes != 0)
    return mxu_fail(MXU_ERR_ARG,
                    "compile: %d replicas cannot be spread over %d "
                    "processes; use a replica count that divides by %d",
                    replicas, processes, processes);
  plan->split = choose_split(model, batch / replicas);
  plan->batch = batch / replicas / plan->split;
  plan->replicas = replicas * plan->split;
  plan->local_count = plan->replicas / processes;
  plan->local_first = mxu_distributed_rank() * plan->local_count;
  int threads = c->threads > 0 ? c->threads : mxu_machine_cores();
  plan->workers = threads < plan->local_count ? threads : plan->local_count;
  /* Workers run oneDNN single-threaded (its results then never depend on
   * the thread count); one worker lends it every thread instead. */
  plan->intra_threads = plan->workers == 1 ? threads : 1;
  plan->replica = calloc((size_t)plan->local_count, sizeof *plan->replica);
  if (!plan->replica) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  for (int r = 0; r < plan->local_count; r++) {
    mxu_replica *replica = &plan->replica[r];
    replica->index = plan->local_first + r;
    replica->ops = calloc((size_t)model->layer_count * MXU_MAX_LAYER_OPS,
                          sizeof *replica->ops);
    replica->grads =
        r == 0 ? model->grads : mxu_aligned_alloc(mxu_model_grad_bytes(model));
    if (!replica->ops || !replica->grads)
      return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  }
  return MXU_OK;
}

/* ---- the graph's buffers --------------------------------------------------
 */

/* Whether node i is one of the model's outputs, which the caller reads. */
static int is_output(const mxu_model *model, int i) {
  if (i == mxu_model_output(model)) return 1;
  for (int k = 0; k < model->output_count; k++)
    if (model->outputs[k] == i) return 1;
  return 0;
}

/* The node that alone reads node i's output, or -1 (none, several, or the
 * loss). */
static int sole_consumer(const mxu_model *model, int i) {
  if (model->plan.consumers[i] != 1 || is_output(model, i)) return -1;
  for (int j = i + 1; j < model->layer_count; j++)
    if (model->layers[j].input_count > 0 && model->layers[j].inputs[0] == i)
      return model->layers[j].input_count == 1 ? j : -1;
  return -1;
}

/* The relu (without an activity regularizer) that alone reads node i's
 * output, or -1; where node i is a BatchNormalization, any activation its
 * backend fuses (relu6, silu: mxu_batchnorm_fusable). */
static int relu_reader(const mxu_model *model, int i, int batchnorm) {
  int next = sole_consumer(model, i);
  if (next < 0 || mxu_has_activity(&model->layers[next])) return -1;
  mxu_activation kind = mxu_layer_activation_kind(&model->layers[next]);
  int fuses = batchnorm ? mxu_batchnorm_fusable(kind) : kind == MXU_RELU;
  return kind != MXU_LINEAR && fuses ? next : -1;
}

/* A Flatten that alone reads node i and a linear Dense of its own (not a
 * shared layer's call) that alone reads that, into fused[0..1]: 2, else
 * 0. The backend decides whether it fuses them (units, shapes). */
static int dense_after(mxu_model *model, int i, mxu_layer **fused) {
  int flatten = sole_consumer(model, i);
  if (!model->backend->conv_pool_dense_create || flatten < 0 ||
      model->layers[flatten].cls != &mxu_flatten_class ||
      mxu_has_activity(&model->layers[flatten]) ||
      model->layers[flatten].time_steps)
    return 0;
  int dense = sole_consumer(model, flatten);
  const mxu_layer *d = dense < 0 ? NULL : &model->layers[dense];
  if (!d || d->cls != &mxu_dense_class || mxu_has_activity(d) ||
      mxu_layer_is_call(d) || d->time_steps ||
      d->config.dense.activation != MXU_LINEAR)
    return 0;
  fused[0] = &model->layers[flatten];
  fused[1] = &model->layers[dense];
  return 2;
}

/* What node i could run itself: a BatchNormalization (per replica) or an
 * Add of two or more, and the relu that alone reads it (ResNets' every
 * block: the relu's pass over memory, forward and backward, saved; for a
 * BatchNormalization relu6 and silu too, MobileNetV2's and EfficientNet's
 * every block); a Conv2D (linear or relu) whose output only a
 * MaxPooling2D reads, and a relu that alone reads that. Decided from
 * readers, not positions, so the pattern fuses inside a residual block
 * and a tensor read twice is never fused away; after those a Flatten and
 * small Dense (dense_after). The conv's plan asks the backend, which may
 * decline. */
static int fusion_proposal(mxu_model *model, int i) {
  mxu_layer *layer = &model->layers[i];
  /* A node with an activity regularizer must write its output; a
   * TimeDistributed one runs alone. */
  if (mxu_has_activity(layer) || layer->time_steps) return 0;
  if ((layer->cls == &mxu_batch_normalization_class &&
       !layer->config.batchnorm.synchronized) ||
      (layer->cls == &mxu_add_class && layer->input_count > 1)) {
    int relu = relu_reader(model, i, layer->cls != &mxu_add_class);
    if (relu < 0) return 0;
    layer->compiled->fused[0] = &model->layers[relu];
    return 1;
  }
  if (!model->backend->conv_pool_create || layer->cls != &mxu_conv2d_class)
    return 0;
  mxu_activation act = layer->config.conv.activation;
  if (act != MXU_LINEAR && act != MXU_RELU) return 0;
  int pool = sole_consumer(model, i);
  if (pool < 0 || model->layers[pool].cls != &mxu_max_pooling2d_class ||
      mxu_has_activity(&model->layers[pool]))
    return 0;
  int count = 0;
  layer->compiled->fused[count++] = &model->layers[pool];
  int relu = relu_reader(model, pool, 0);
  if (relu >= 0) layer->compiled->fused[count++] = &model->layers[relu];
  return count + dense_after(model, relu >= 0 ? relu : pool,
                             &layer->compiled->fused[count]);
}

/* Whether the margins can join a 'valid' conv's padding: backends take
 * padding narrower than the (dilated) kernel, so no window is all
 * padding. */
static int margins_fit(const mxu_zero_padding2d_config *c, mxu_padding padding,
                       const int kernel[2], const int dilation[2]) {
  int span_h = (kernel[0] - 1) * (dilation[0] > 1 ? dilation[0] : 1) + 1;
  int span_w = (kernel[1] - 1) * (dilation[1] > 1 ? dilation[1] : 1) + 1;
  return padding == MXU_VALID && c->top < span_h && c->bottom < span_h &&
         c->left < span_w && c->right < span_w;
}

/* A ZeroPadding2D (node i) that a 'valid' Conv2D or DepthwiseConv2D alone
 * reads, not a call of a shared layer (one plan for every call): the conv
 * pads for it. */
static void fold_padding(mxu_model *model, int i) {
  mxu_layer *pad = &model->layers[i];
  int j = sole_consumer(model, i);
  if (pad->cls != &mxu_zero_padding2d_class || mxu_has_activity(pad) || j < 0 ||
      mxu_layer_is_call(&model->layers[j]))
    return;
  mxu_layer *conv = &model->layers[j];
  const mxu_zero_padding2d_config *c = &pad->config.padding;
  const mxu_conv2d_config *cc = &conv->config.conv;
  const mxu_depthwise_conv2d_config *dc = &conv->config.depthwise;
  int fits =
      conv->cls == &mxu_conv2d_class
          ? margins_fit(c, cc->padding, cc->kernel_size, cc->dilation_rate)
      : conv->cls == &mxu_depthwise_conv2d_class
          ? margins_fit(c, dc->padding, dc->kernel_size, dc->dilation_rate)
          : 0;
  if (!fits) return;
  pad->compiled->folded = 1;
  int *m = conv->compiled->margins;
  m[0] = c->top, m[1] = c->bottom, m[2] = c->left, m[3] = c->right;
}

/* The node that runs node i: itself, or for an absorbed node the head of
 * its fused group. */
static const mxu_layer *group_head(const mxu_model *model, int i) {
  const mxu_layer *layer = &model->layers[i];
  while (layer->compiled->absorbed) layer = &model->layers[layer->inputs[0]];
  return layer;
}

/* Whether node i's output buffer is read or written: not where a fused
 * op writes a later node's output instead. */
static int output_used(const mxu_model *model, int i) {
  const mxu_layer *layer = &model->layers[i];
  if (layer->compiled->fused_layers) return 0;
  return !layer->compiled->absorbed ||
         mxu_layer_writes(group_head(model, i)) == i;
}

/* Input edges, in the order backward visits nodes (fused groups run at
 * their head). The partial buffers are shared by every node: each node's
 * partials are added before the next node runs. */
static mxu_status reserve_edges(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  int n = model->layer_count;
  if (n < 1) return MXU_OK; /* compile refuses such a model first */
  unsigned char *seen = calloc((size_t)n, 1), *has_grad = calloc((size_t)n, 1);
  if (!seen || !has_grad) {
    free(seen), free(has_grad);
    return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  }
  mxu_tensors_with_grad(model, has_grad);
  /* The loss writes each output's gradient before any backward: a node
   * that reads an output too adds its share. */
  for (int h = 0; h < model->head_count; h++) seen[model->heads[h].node] = 1;
  size_t partial_bytes = 0;
  int partial_slots = 0;
  for (int i = n - 1; i >= 0; i--) {
    const mxu_layer *layer = &model->layers[i];
    if (layer->compiled->absorbed) continue;
    int slots = 0;
    for (int k = 0; k < layer->input_count; k++) {
      int t = layer->inputs[k];
      mxu_edge *edge = &plan->edges[i * MXU_MAX_INPUTS + k];
      int need_dx = has_grad[t];
      if (!seen[t]) {
        seen[t] = 1;
        *edge = (mxu_edge){plan->grad[t], 0, need_dx};
        continue;
      }
      size_t bytes = batch_bytes(plan->batch, &model->layers[t].out_shape);
      if (bytes > partial_bytes) partial_bytes = bytes;
      /* a slot until reserved */
      *edge = (mxu_edge){(size_t)slots++, 1, need_dx};
    }
    if (slots > partial_slots) partial_slots = slots;
  }
  size_t first = partial_slots
                     ? mxu_arena_reserve(&plan->layout,
                                         partial_bytes * (size_t)partial_slots)
                     : 0;
  for (int e = 0; e < n * MXU_MAX_INPUTS; e++)
    if (plan->edges[e].partial)
      plan->edges[e].dx = first + plan->edges[e].dx * partial_bytes;
  free(seen), free(has_grad);
  return MXU_OK;
}

/* ---- gradient memory -----------------------------------------------------
 * A node's output gradient is live from the backward step of its last
 * reader (or the loss's, before any, for an output) to its own, or its
 * fused group head's. Gradients whose lives do not meet share memory:
 * each placed, largest first, at the lowest offset clear of those placed
 * that it meets. At 128 images a replica, ResNet-20's 233 MB of gradients
 * fit in 24 MB, MobileNetV2's (32x32) 222 in 36, ResNet50's 282 in 24.
 * keep_gradients gives every life the whole pass, so none share. */

typedef struct grad_life {
  size_t bytes, offset;
  int first, last; /* backward steps; the loss's is -1 */
} grad_life;

/* Backward runs node i (its fused group's head) at step n - 1 - i. */
static int backward_step(const mxu_model *model, int i) {
  return model->layer_count - 1 - group_head(model, i)->index;
}

static int lives_meet(const grad_life *a, const grad_life *b) {
  return a->first <= b->last && b->first <= a->last;
}

/* The lowest offset where `life` overlaps none of the placed ones it
 * meets in time: each clash moves it past the one it hit. */
static size_t first_fit(const grad_life *lives, const int *placed, int count,
                        const grad_life *life) {
  size_t offset = 0;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int p = 0; p < count; p++) {
      const grad_life *o = &lives[placed[p]];
      if (!lives_meet(o, life) || o->offset + o->bytes <= offset ||
          offset + life->bytes <= o->offset)
        continue;
      offset = o->offset + o->bytes;
      moved = 1;
    }
  }
  return offset;
}

/* Each gradient's life, merged into its owner's (a view shares its
 * input's gradient where nothing else reads the input): written from its
 * readers' steps (the loss's for an output), read up to its own. Sizes in
 * the arena's 64-byte units, so every offset keeps its alignment. */
static void find_lives(const mxu_model *model, const int *owner,
                       grad_life *lives) {
  int n = model->layer_count;
  for (int i = 0; i < n; i++) lives[i].first = n, lives[i].last = -1;
  for (int i = 0; i < n; i++) {
    int step = backward_step(model, i);
    const mxu_layer *layer = &model->layers[i];
    for (int k = 0; k < layer->input_count; k++) {
      grad_life *read = &lives[owner[layer->inputs[k]]];
      if (step < read->first) read->first = step;
    }
    if (!output_used(model, i)) continue;
    grad_life *life = &lives[owner[i]];
    size_t bytes =
        (batch_bytes(model->plan.batch, &layer->out_shape) + 63) / 64 * 64;
    if (bytes > life->bytes) life->bytes = bytes;
    if (step > life->last) life->last = step;
    if (is_output(model, i)) life->first = -1;
  }
  for (int i = 0; model->compile.keep_gradients && i < n; i++)
    lives[i].first = -1, lives[i].last = n;
}

static mxu_status reserve_gradients(mxu_model *model, const int *owner) {
  mxu_plan *plan = &model->plan;
  int n = model->layer_count, count = 0;
  grad_life *lives = calloc((size_t)n, sizeof *lives);
  int *order = calloc((size_t)n, sizeof *order);
  if (!lives || !order) {
    free(lives), free(order);
    return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  }
  find_lives(model, owner, lives);
  for (int i = 0; i < n; i++) {
    if (!output_used(model, i) || owner[i] != i) continue;
    int at = count++; /* insertion by size, largest first */
    for (; at > 0 && lives[order[at - 1]].bytes < lives[i].bytes; at--)
      order[at] = order[at - 1];
    order[at] = i;
  }
  size_t total = 0;
  for (int p = 0; p < count; p++) {
    grad_life *life = &lives[order[p]];
    life->offset = first_fit(lives, order, p, life);
    if (life->offset + life->bytes > total) total = life->offset + life->bytes;
  }
  size_t base = mxu_arena_reserve(&plan->layout, total);
  for (int i = 0; i < n; i++)
    if (output_used(model, i)) plan->grad[i] = base + lives[owner[i]].offset;
  free(lives), free(order);
  return MXU_OK;
}

/* Each node's output and gradient; a view (or a folded ZeroPadding2D)
 * shares its input's memory, and its input's gradient too where nothing
 * else reads the input. Then each node's input edges, walking backward as
 * the step does: a tensor's gradient is written whole by its last reader
 * and every earlier reader's share is added to it after, from a partial
 * buffer. */
static mxu_status reserve_io(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  mxu_arena *layout = &plan->layout;
  int n = model->layer_count, batch = plan->batch;
  if (n < 1) return MXU_OK; /* compile refuses such a model first */
  int *owner = calloc((size_t)n, sizeof *owner);
  if (!owner) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  for (int i = 0; i < n; i++) {
    const mxu_layer *layer = &model->layers[i];
    owner[i] = i;
    if (!output_used(model, i)) continue;
    if ((layer->cls->view || layer->compiled->folded) && layer->input_count) {
      int input = layer->inputs[0];
      plan->act[i] = plan->act[input];
      if (plan->consumers[input] == 1) owner[i] = owner[input];
      continue;
    }
    plan->act[i] =
        mxu_arena_reserve(layout, batch_bytes(batch, &layer->out_shape));
  }
  mxu_status status = reserve_gradients(model, owner);
  free(owner);
  MXU_TRY(status);
  MXU_TRY(reserve_edges(model));
  plan->mask = mxu_arena_reserve(layout, (size_t)batch * sizeof(float));
  plan->weight = mxu_arena_reserve(layout, (size_t)batch * sizeof(float));
  for (int h = 0; h < model->head_count; h++) {
    mxu_head_plan *hp = &plan->head[h];
    const mxu_layer *out = &model->layers[model->heads[h].node];
    size_t classes = (size_t)mxu_shape_count(&out->out_shape);
    size_t positions = (size_t)mxu_loss_positions(model, h);
    hp->labels =
        mxu_arena_reserve(layout, (size_t)batch * positions * sizeof(int32_t));
    hp->targets =
        mxu_arena_reserve(layout, (size_t)batch * classes * sizeof(float));
    if (model->heads[h].spec.label_smoothing > 0.0f)
      hp->smoothed =
          mxu_arena_reserve(layout, (size_t)batch * classes * sizeof(float));
    hp->row_mask = positions > 1
                       ? mxu_arena_reserve(layout, (size_t)batch * positions *
                                                       sizeof(float))
                       : plan->mask;
    if (model->heads[h].spec.has_ignore_class)
      hp->loss_rows =
          mxu_arena_reserve(layout, (size_t)batch * positions * sizeof(float));
    hp->probs =
        mxu_arena_reserve(layout, (size_t)batch * classes * sizeof(float));
    hp->loss =
        mxu_arena_reserve(layout, (size_t)batch * positions * sizeof(float));
    mxu_head *head = &model->heads[h];
    hp->tally_first = plan->tally_values;
    for (int m = 0; m < head->metric_count; m++) {
      int64_t size = mxu_metric_tally_size(head->metric_kind[m],
                                           (int64_t)(classes / positions));
      if (!size) continue;
      if (plan->tally_values + size > MXU_MAX_TALLY_VALUES)
        return mxu_fail(MXU_ERR_UNSUPPORTED,
                        "compile: metric '%s' of output '%s' needs %lld "
                        "values over the epoch, which brings the model's "
                        "(AUCs' curves, F-scores' counts per class) past "
                        "the %d mxu keeps",
                        head->metric[m], model->layers[head->node].name,
                        (long long)size, MXU_MAX_TALLY_VALUES);
      head->tally[m] = plan->tally_values;
      plan->tally_values += (int)size;
    }
    hp->tally_values = plan->tally_values - hp->tally_first;
    if (mxu_head_weighs_metrics(head))
      hp->weighted_mask =
          mxu_arena_reserve(layout, (size_t)batch * positions * sizeof(float));
    if (hp->tally_values)
      hp->tallies =
          mxu_arena_reserve(layout, (size_t)hp->tally_values * sizeof(float));
  }
  return MXU_OK;
}

/* Each head's padding mask and fused softmax. */
static mxu_status plan_heads(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  for (int h = 0; h < model->head_count; h++) {
    mxu_head_plan *hp = &plan->head[h];
    MXU_TRY(check_loss_mask(model, h));
    hp->mask_factor =
        calloc((size_t)plan->local_count, sizeof *hp->mask_factor);
    if (!hp->mask_factor) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
    hp->fused_softmax = fuses_softmax(model, h);
    /* With the softmax fused, the output's gradient is the logits'. */
    const mxu_layer *out = &model->layers[model->heads[h].node];
    if (hp->fused_softmax && mxu_has_activity(out))
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "compile: an activity regularizer on the output layer "
                      "'%s', whose softmax the loss takes with it, is not "
                      "supported",
                      out->name);
  }
  return MXU_OK;
}

/* A step's results and metrics' tallies, and strategy/'s stage for every
 * replica's (and the local ones' to send). */
static mxu_status reserve_results(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  plan->results = calloc((size_t)(plan->replicas + plan->local_count),
                         sizeof *plan->results);
  if (!plan->results) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  if (!plan->tally_values) return MXU_OK;
  size_t values = (size_t)plan->tally_values;
  plan->tallies = calloc(values, sizeof *plan->tallies);
  plan->tally_stage =
      calloc(values * (size_t)(plan->replicas + plan->local_count),
             sizeof *plan->tally_stage);
  if (!plan->tallies || !plan->tally_stage)
    return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  return MXU_OK;
}

/* strategy/'s staging for exchanges between processes, allocated here so
 * that no step allocates: the larger of the gradient all-to-all (every
 * process's shard of every local replica's gradient, sent and received)
 * and a gather of per-replica values (batch statistics, outputs) from
 * every replica beside the local copies. */
static mxu_status reserve_exchange(mxu_model *model) {
  mxu_plan *plan = &model->plan;
  int64_t size = mxu_distributed_size();
  if (size == 1) return MXU_OK;
  int64_t per = ((model->trainable_count + size - 1) / size + 15) / 16 * 16;
  int64_t floats = 2 * size * plan->local_count * per;
  int64_t gathered =
      (int64_t)plan->batch *
      mxu_shape_count(&model->layers[mxu_model_output(model)].out_shape);
  for (int i = 0; i < model->layer_count; i++) {
    const mxu_layer *layer = &model->layers[i];
    int64_t stats =
        layer->cls->stats_floats ? layer->cls->stats_floats(layer) : 0;
    int64_t sync = layer->cls->sync_floats ? layer->cls->sync_floats(layer) : 0;
    if (stats > gathered) gathered = stats;
    if (sync > gathered) gathered = sync;
  }
  gathered *= plan->local_count + plan->replicas;
  if (gathered > floats) floats = gathered;
  plan->exchange = malloc((size_t)floats * sizeof(float));
  if (!plan->exchange)
    return mxu_fail(MXU_ERR_NOMEM,
                    "plan: cannot allocate %lld MB for exchanges between "
                    "processes",
                    (long long)(floats * 4 >> 20));
  plan->exchange_floats = (size_t)floats;
  return MXU_OK;
}

/* Every tensor of a replica's batch within MXU_MAX_ELEMENTS values, which
 * the kernels index (checked before any is planned). */
static mxu_status check_batch_sizes(const mxu_model *model) {
  for (int i = 0; i < model->layer_count; i++) {
    int64_t values = (int64_t)model->plan.batch *
                     mxu_shape_count(&model->layers[i].out_shape);
    if (values > MXU_MAX_ELEMENTS)
      return mxu_fail(MXU_ERR_ARG,
                      "plan: a batch of %d rows per replica gives layer '%s' "
                      "%lld values, more than %lld (MXU_MAX_ELEMENTS); use a "
                      "smaller batch or more replicas",
                      model->plan.batch, model->layers[i].name,
                      (long long)values, (long long)MXU_MAX_ELEMENTS);
  }
  return MXU_OK;
}

/* Which layers compute in bf16, and which neighbouring Conv2D layers pass
 * their tensor in the backend's own layout (cifar's two pairs: four
 * NHWC <-> nChw16c conversions a step less for each): a conv whose output
 * only another conv reads. */
static void plan_precision_and_chains(mxu_model *model) {
  mxu_layer *layers = model->layers;
  int n = model->layer_count;
  for (int i = 0; i < n; i++) {
    /* cpu_ref ignores it: the oracle stays float32. */
    layers[i].compiled->bf16 =
        model->compile.precision == MXU_MIXED_BFLOAT16 && cpu_has_bf16();
    layers[i].compiled->batch = mxu_layer_rows(&layers[i], model->plan.batch);
  }
  for (int i = 0; i < n; i++) {
    int next = sole_consumer(model, i);
    if (next >= 0 && !layers[i].time_steps && !layers[next].time_steps &&
        mxu_conv2d_chains(&layers[i], &layers[next], model->backend,
                          model->plan.batch))
      layers[i].compiled->native_out = layers[next].compiled->native_in = 1;
  }
}

/* A layer of its own (not a shared layer's call, not TimeDistributed,
 * without an activity regularizer) on an image tensor. */
static int plain_image_layer(const mxu_layer *layer) {
  return !mxu_layer_is_call(layer) && !layer->time_steps &&
         !mxu_has_activity(layer) && layer->in_shape.rank == 3;
}

/* A BatchNormalization or a two-input Add (no broadcasting) that takes
 * bf16 tensors on this backend. */
static int takes_bf16(const mxu_model *model, const mxu_layer *layer) {
  if (!plain_image_layer(layer)) return 0;
  if (layer->cls == &mxu_batch_normalization_class)
    return layer->input_count == 1 && !layer->config.batchnorm.synchronized;
  return layer->cls == &mxu_add_class && layer->input_count == 2 &&
         model->backend->add_bf16 &&
         mxu_shape_count(&layer->in_shapes[0]) ==
             mxu_shape_count(&layer->out_shape) &&
         mxu_shape_count(&layer->in_shapes[1]) ==
             mxu_shape_count(&layer->out_shape);
}

/* What each conv (not one fused with a pooling after it) takes: bit 0
 * a bf16 x, bit 1 a bf16 y (mxu_conv2d_bf16_tensors, asked once a conv:
 * the backend builds an op to answer). */
static void conv_bf16_tensors(mxu_model *model, unsigned char *conv) {
  for (int i = 0; i < model->layer_count; i++) {
    mxu_layer *layer = &model->layers[i];
    int y = 0;
    conv[i] = 0;
    if (layer->cls != &mxu_conv2d_class || fusion_proposal(model, i)) continue;
    if (mxu_conv2d_bf16_tensors(layer, model->backend, model->plan.batch, &y))
      conv[i] = (unsigned char)(1 | (y && !mxu_has_activity(layer)) << 1);
  }
}

/* A Dropout (no noise_shape) passes a bf16 tensor on as it came: it reads
 * one exactly where it writes one, which its readers decide. */
static int passes_bf16(const mxu_model *model, const mxu_layer *layer) {
  return plain_image_layer(layer) && layer->cls == &mxu_dropout_class &&
         layer->config.dropout.noise.rank == 0 && model->backend->multiply_bf16;
}

static int reads_bf16(const mxu_model *model, const unsigned char *conv, int j,
                      int k);

/* Whether node i's output is read, and only as a bf16 tensor. */
static int read_as_bf16(const mxu_model *model, const unsigned char *conv,
                        int i) {
  if (is_output(model, i) || model->plan.consumers[i] == 0) return 0;
  for (int j = i + 1; j < model->layer_count; j++)
    for (int k = 0; k < model->layers[j].input_count; k++)
      if (model->layers[j].inputs[k] == i && !reads_bf16(model, conv, j, k))
        return 0;
  return 1;
}

/* Whether node j reads its input k as a bf16 tensor: a conv, a
 * BatchNormalization, an Add; a Dropout whose output is read so. */
static int reads_bf16(const mxu_model *model, const unsigned char *conv, int j,
                      int k) {
  const mxu_layer *layer = &model->layers[j];
  if (layer->cls == &mxu_conv2d_class) return k == 0 && (conv[j] & 1);
  if (passes_bf16(model, layer)) return read_as_bf16(model, conv, j);
  return takes_bf16(model, layer);
}

/* The node whose output node i writes as a bf16 tensor (its own, or its
 * fused activation's), or -1. */
static int writes_bf16(mxu_model *model, const unsigned char *conv, int i) {
  mxu_layer *layer = &model->layers[i];
  if (layer->cls == &mxu_conv2d_class) return conv[i] & 2 ? i : -1;
  if (passes_bf16(model, layer)) return layer->compiled->x_bf16 ? i : -1;
  if (!takes_bf16(model, layer)) return -1;
  return fusion_proposal(model, i) ? layer->compiled->fused[0]->index : i;
}

/* Whether reader `layer` of a bf16 tensor writes its gradient in bf16
 * too: all do but a BatchNormalization with silu, whose backward keeps an
 * intermediate in dx; a Dropout where its own output's gradient is bf16. */
static int writes_bf16_dx(mxu_model *model, int j) {
  mxu_layer *layer = &model->layers[j];
  if (passes_bf16(model, layer)) {
    for (int r = j + 1; r < model->layer_count; r++)
      for (int k = 0; k < model->layers[r].input_count; k++)
        if (model->layers[r].inputs[k] == j && !writes_bf16_dx(model, r))
          return 0;
    return 1;
  }
  return layer->cls != &mxu_batch_normalization_class ||
         !fusion_proposal(model, j) ||
         mxu_layer_activation_kind(layer->compiled->fused[0]) != MXU_SILU;
}

/* Under mixed_bfloat16, where the backend has bf16 tensors, the outputs
 * that bf16 convs, BatchNormalizations and Adds write and only such layers
 * read (or Dropouts that pass them on to such) are held in bf16
 * (mxu_node_plan's x_bf16, y_bf16): ResNets' activations but the first conv's
 * (float32) and the last block's. The convs round their input to bf16 to
 * multiply anyway, so the values they see do not change; the normalisations and
 * Adds see theirs rounded, as Keras' do (its layers' outputs are bf16 under
 * mixed_bfloat16). So are their gradients (dx_bf16, dy_bf16), as Keras' and
 * PyTorch's autocast are, unless keep_gradients asks for float32 ones or a
 * reader cannot write its share in bf16; the sums within the layers (batch
 * statistics' gradients, weight gradients) stay float32. Each such tensor is
 * written and read at half the bytes, and a conv reading one needs no copy in
 * bf16 of its own. */
static mxu_status plan_bf16_tensors(mxu_model *model) {
  if (!model->backend->conv2d_bf16_tensors) return MXU_OK;
  int n = model->layer_count;
  unsigned char *conv = malloc((size_t)n);
  if (!conv) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  conv_bf16_tensors(model, conv);
  for (int i = 0; i < n; i++) {
    if (!model->layers[i].compiled->bf16) continue;
    int out = writes_bf16(model, conv, i);
    if (out < 0 || !read_as_bf16(model, conv, out)) continue;
    int grads = !model->compile.keep_gradients; /* kept: as float32 */
    for (int j = out + 1; j < n; j++)
      for (int k = 0; k < model->layers[j].input_count; k++)
        if (model->layers[j].inputs[k] == out)
          grads &= writes_bf16_dx(model, j);
    model->layers[i].compiled->y_bf16 = 1;
    model->layers[i].compiled->dy_bf16 = grads;
    for (int j = out + 1; j < n; j++)
      for (int k = 0; k < model->layers[j].input_count; k++)
        if (model->layers[j].inputs[k] == out) {
          model->layers[j].compiled->x_bf16 |= 1u << k;
          model->layers[j].compiled->dx_bf16 |= (unsigned)grads << k;
        }
  }
  free(conv);
  return MXU_OK;
}

/* Every replica plans the layer from the same layout state, so all get the
 * same scratch offsets; only replica 0's reservations are kept. */
static mxu_status plan_layer(mxu_model *model, int i) {
  mxu_plan *plan = &model->plan;
  mxu_layer *layer = &model->layers[i];
  mxu_arena before = plan->layout;
  for (int r = 0; r < plan->local_count; r++) {
    mxu_arena copy = before;
    memset(layer->compiled->scratch, 0, sizeof layer->compiled->scratch);
    mxu_status status = layer->cls->plan(layer, model->backend,
                                         mxu_layer_rows(layer, plan->batch),
                                         r == 0 ? &plan->layout : &copy);
    memcpy(&plan->replica[r].ops[i * MXU_MAX_LAYER_OPS], layer->compiled->ops,
           sizeof layer->compiled->ops);
    memset(layer->compiled->ops, 0, sizeof layer->compiled->ops);
    if (status != MXU_OK)
      return mxu_fail_prefix(status, "compile: layer '%s': ", layer->name);
  }
  return MXU_OK;
}

static mxu_status plan_build(mxu_model *model, int batch) {
  mxu_plan *plan = &model->plan;
  int n = model->layer_count;
  plan->backend = model->backend;
  plan->nodes = calloc((size_t)n, sizeof *plan->nodes);
  if (!plan->nodes) return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  for (int i = 0; i < n; i++) model->layers[i].compiled = &plan->nodes[i];
  plan->act = calloc((size_t)n, sizeof *plan->act);
  plan->grad = calloc((size_t)n, sizeof *plan->grad);
  plan->consumers = calloc((size_t)n, sizeof *plan->consumers);
  plan->edges = calloc((size_t)n * MXU_MAX_INPUTS, sizeof *plan->edges);
  if (!plan->act || !plan->grad || !plan->consumers || !plan->edges)
    return mxu_fail(MXU_ERR_NOMEM, "plan: out of memory");
  count_readers(model, plan->consumers);
  MXU_TRY(plan_strategy(model, batch));
  MXU_TRY(check_batch_sizes(model));
  MXU_TRY(plan_heads(model));
  /* oneDNN sizes a primitive's work split by the threads it may use when
   * it is created: create them with the count they will run with. */
  omp_set_num_threads(plan->intra_threads);
  /* Every node's plan starts zeroed (calloc): nothing fused, no layout. */
  for (int i = 0; i < n; i++) fold_padding(model, i);
  plan_precision_and_chains(model);
  MXU_TRY(plan_bf16_tensors(model));
  for (int i = 0; i < n; i++) {
    mxu_layer *layer = &model->layers[i];
    if (layer->compiled->absorbed) continue;
    layer->compiled->fused_layers = fusion_proposal(model, i);
    MXU_TRY(plan_layer(model, i));
    for (int k = 0; k < layer->compiled->fused_layers; k++)
      layer->compiled->fused[k]->compiled->absorbed = 1;
  }
  MXU_TRY(reserve_io(model));
  MXU_TRY(reserve_exchange(model));
  MXU_TRY(reserve_results(model));
  /* Refused rather than left to the kernel's OOM killer. */
  int64_t memory = mxu_machine_memory_bytes();
  int64_t needed = (int64_t)plan->layout.size * plan->local_count;
  if (memory > 0 && needed > memory)
    return mxu_fail(MXU_ERR_NOMEM,
                    "plan: a global batch of %d needs %.1f GB of activations "
                    "and gradients (%d replica slices of %.1f GB) but the "
                    "machine has %.1f GB; use a smaller batch",
                    batch, (double)needed / (1 << 30), plan->local_count,
                    (double)plan->layout.size / (1 << 30),
                    (double)memory / (1 << 30));
  for (int r = 0; r < plan->local_count; r++) {
    plan->replica[r].arena.size = plan->layout.size;
    MXU_TRY(mxu_arena_commit(&plan->replica[r].arena));
  }
  return MXU_OK;
}

mxu_status mxu_plan_build(mxu_model *model, int batch) {
  if (batch <= 0 || batch > MXU_MAX_BATCH)
    return mxu_fail(MXU_ERR_ARG,
                    "plan: batch size %d must be in 1..%d (MXU_MAX_BATCH)",
                    batch, MXU_MAX_BATCH);
  mxu_plan_release(model);
  mxu_status status = plan_build(model, batch);
  if (status != MXU_OK) mxu_plan_release(model);
  return status;
}
