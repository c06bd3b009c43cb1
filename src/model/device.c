/* device.c — the pjrt backend's side of a compiled model: the plugin's
 * client with one device per replica, the training step compiled once
 * (programs.c), and the weights and optimizer slots kept on the devices
 * from one step to the next; evaluation and prediction programs compiled
 * when first asked for. The host plan still loads each replica's batch.
 * The host's weights and slots are brought up to date from device 0 only
 * when something reads them (callbacks, checkpoints, the end of fit), and
 * go back to the devices when the host may have changed them (a restore,
 * a new fit, callbacks). */
#include "backend/pjrt/runtime.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* A step's inputs besides the state, in the program's order: the
 * optimizer's scalars (mxu_step_hypers), x, the first output's labels or
 * targets, the mask, the samples' weights, the scale, each noise-drawing
 * node's noise, the
 * model's other inputs' batches, the other outputs' labels or targets.
 * The host stages `steps` of them (one execution's), stacked. */
enum { HYPER, X, LABELS, MASK, WEIGHTS, SCALE, NOISE };

struct mxu_device {
  mxu_pjrt *pjrt;
  mxu_pjrt_program *train;
  char *train_text; /* the step, until it is compiled at its first run */
  int devices, kinds, trainable, state, inputs, nargs, outputs;
  int more;       /* where model input 1's batch stands among the inputs */
  int labels;     /* where output 1's labels stand among the inputs */
  int sums;       /* the loss sums a program gives (programs.c's loss_sums) */
  int *sum_size;  /* sums: each one's floats (a tally's: half of it each) */
  int sum_floats; /* all the sums' of one step */
  float *tallies; /* steps * the metrics' tallies: the last run's */
  /* The sums downloaded: steps stacked, then one step's gathered. */
  float *sum_stage;
  int kind[MXU_SLOTS + 1]; /* each slot kind's buffer (mxu_slot_buffer) */
  int steps;               /* the most one execution runs */
  mxu_hlo_shape *shape;    /* inputs: one step's, dtype F32 or S32 */
  int64_t *size;           /* inputs: one step's values */
  float **stage;           /* devices * inputs: `steps` steps' values */
  mxu_pjrt_buffer **args;  /* devices * nargs: state, inputs, step count */
  mxu_pjrt_buffer **outs;  /* devices * outputs */
  int pending;             /* steps in outs not yet applied */
  int64_t synced;          /* model->iterations of the devices' state; -1 */
  float *rates;            /* steps: each staged step's schedule rate */
  int64_t executions, steps_run;
  int host_stale;                   /* the host's weights are behind */
  mxu_pjrt_program *eval, *predict; /* compiled when first asked for */
};

static void free_buffers(mxu_device *d, mxu_pjrt_buffer **b, int from, int to,
                         int stride) {
  for (int r = 0; r < d->devices; r++)
    for (int i = from; i < to; i++) {
      mxu_pjrt_buffer_free(d->pjrt, b[r * stride + i]);
      b[r * stride + i] = NULL;
    }
}

void mxu_device_free(mxu_model *model) {
  mxu_device *d = model->device;
  if (!d) return;
  /* The host keeps the last applied step (if the devices still answer). */
  if (mxu_device_sync(model) != MXU_OK)
    fprintf(stderr,
            "mxu: pjrt: the weights of the last steps could not be "
            "read back: %s\n",
            mxu_errmsg());
  if (d->args) free_buffers(d, d->args, 0, d->nargs, d->nargs);
  if (d->outs) free_buffers(d, d->outs, 0, d->outputs, d->outputs);
  if (d->stage)
    for (int i = 0; i < d->devices * d->inputs; i++) free(d->stage[i]);
  free(d->stage);
  free(d->shape);
  free(d->rates);
  free(d->sum_size);
  free(d->tallies);
  free(d->sum_stage);
  free(d->size);
  free(d->args);
  free(d->outs);
  mxu_pjrt_program_free(d->pjrt, d->train);
  free(d->train_text);
  mxu_pjrt_program_free(d->pjrt, d->eval);
  mxu_pjrt_program_free(d->pjrt, d->predict);
  mxu_pjrt_close(d->pjrt);
  free(d);
  model->device = NULL;
}

/* XLA's CPU runtime allocates an execution's large temporaries afresh each
 * time; glibc would map and unmap each one, and the page faults took a
 * third of a Fashion-MNIST step. Kept in the heap instead. */
static void keep_large_allocations(void) {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

/* One step's shape of each input. */
static void input_shapes(const mxu_model *model, mxu_device *d) {
  const mxu_plan *plan = &model->plan;
  int64_t rows[1] = {plan->batch};
  int64_t hypers = MXU_HYPERS;
  d->shape[HYPER] = mxu_hlo_shape_make(MXU_HLO_F32, 1, &hypers);
  d->shape[SCALE] = mxu_hlo_shape_make(MXU_HLO_F32, 0, NULL);
  d->shape[X] =
      mxu_batch_shape(plan->batch, &model->layers[model->inputs[0]].out_shape);
  d->shape[LABELS] = mxu_labels_shape(model, 0, plan->batch);
  d->shape[MASK] = mxu_hlo_shape_make(MXU_HLO_F32, 1, rows);
  d->shape[WEIGHTS] = d->shape[MASK];
  for (int n = 0, i = NOISE; n < model->layer_count; n++)
    if (mxu_layer_draws_noise(&model->layers[n]))
      d->shape[i++] = mxu_noise_shape(&model->layers[n], plan->batch);
  for (int k = 1; k < model->input_count; k++)
    d->shape[d->more + k - 1] = mxu_batch_shape(
        plan->batch, &model->layers[model->inputs[k]].out_shape);
  for (int j = 1; j < model->head_count; j++)
    d->shape[d->labels + j - 1] = mxu_labels_shape(model, j, plan->batch);
  for (int i = 0; i < d->inputs; i++) d->size[i] = mxu_hlo_count(&d->shape[i]);
}

static mxu_status allocate(const mxu_model *model, mxu_device *d) {
  int noises = 0;
  for (int n = 0; n < model->layer_count; n++)
    noises += mxu_layer_draws_noise(&model->layers[n]);
  d->more = NOISE + noises;
  d->labels = d->more + model->input_count - 1;
  d->inputs = d->labels + model->head_count - 1;
  d->nargs = d->state + d->inputs + 1;
  /* the state, the loss and each head's sums */
  d->sums = mxu_program_sum_count(model);
  d->outputs = d->state + d->sums;
  d->sum_size = calloc((size_t)d->sums, sizeof *d->sum_size);
  d->tallies = calloc((size_t)(d->steps * model->plan.tally_values + 1),
                      sizeof *d->tallies);
  if (!d->sum_size || !d->tallies)
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  /* The total, then each head's loss, count and metrics' two each. */
  int k = 0;
  d->sum_size[k++] = 1;
  for (int j = 0; j < model->head_count; j++) {
    d->sum_size[k++] = 1;
    d->sum_size[k++] = 1;
    for (int m = 0; m < model->heads[j].metric_count; m++) {
      const mxu_head *head = &model->heads[j];
      int size =
          head->tally[m] >= 0
              ? (int)mxu_metric_tally_size(head->metric_kind[m],
                                           mxu_head_row_values(model, j)) /
                    2
              : 1;
      d->sum_size[k++] = size;
      d->sum_size[k++] = size;
    }
  }
  for (k = 0; k < d->sums; k++) d->sum_floats += d->sum_size[k];
  d->sum_stage =
      malloc((size_t)(d->steps + 1) * d->sum_floats * sizeof *d->sum_stage);
  if (!d->sum_stage) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  d->shape = calloc((size_t)d->inputs, sizeof *d->shape);
  d->size = calloc((size_t)d->inputs, sizeof *d->size);
  d->rates = calloc((size_t)d->steps, sizeof *d->rates);
  d->stage = calloc((size_t)(d->devices * d->inputs), sizeof *d->stage);
  d->args = calloc((size_t)(d->devices * d->nargs), sizeof *d->args);
  d->outs = calloc((size_t)(d->devices * d->outputs), sizeof *d->outs);
  if (!d->shape || !d->size || !d->rates || !d->stage || !d->args || !d->outs)
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  input_shapes(model, d);
  for (int r = 0; r < d->devices; r++)
    for (int i = 0; i < d->inputs; i++) {
      size_t bytes = (size_t)(d->steps * d->size[i]) * sizeof(float);
      if (!(d->stage[r * d->inputs + i] = malloc(bytes)))
        return mxu_fail(MXU_ERR_NOMEM,
                        "pjrt: out of memory for %d steps' inputs (%zu "
                        "bytes each); lower steps_per_execution",
                        d->steps, bytes);
    }
  return MXU_OK;
}

mxu_status mxu_device_open(mxu_model *model) {
  mxu_device_free(model);
  keep_large_allocations();
  if (mxu_distributed_size() > 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "pjrt: one process drives every device; run without "
                    "mpirun");
  const mxu_plan *plan = &model->plan;
  int steps = model->compile.steps_per_execution > 0
                  ? model->compile.steps_per_execution
                  : 1;
  /* The step is built now (what cannot be emitted is refused at compile)
   * but compiled by XLA when it first runs: evaluation and prediction,
   * which may open a device for another batch, need only their own. */
  char *text = NULL;
  MXU_TRY(mxu_model_train_program(model, plan->batch, plan->replicas, steps,
                                  &text));
  mxu_device *d = calloc(1, sizeof *d);
  if (!d) {
    free(text);
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  model->device = d;
  d->devices = plan->replicas;
  d->steps = steps;
  d->synced = -1;
  d->kinds = mxu_model_slot_kinds(model, d->kind);
  for (int i = 0; i < model->param_count; i++)
    d->trainable += model->params[i].trainable;
  d->state = model->param_count + d->kinds * d->trainable;
  mxu_status s =
      mxu_pjrt_open(model->compile.pjrt_plugin, d->devices, &d->pjrt);
  d->train_text = text;
  if (s == MXU_OK) s = allocate(model, d);
  if (s != MXU_OK) mxu_device_free(model);
  return s;
}

mxu_status mxu_device_invalidate(mxu_model *model) {
  if (!model->device) return MXU_OK;
  MXU_TRY(mxu_device_sync(model));
  model->device->synced = -1;
  return MXU_OK;
}

static mxu_status upload(mxu_device *d, int device, mxu_pjrt_type type,
                         const void *data, int rank, const int64_t *dims,
                         mxu_pjrt_buffer **at) {
  mxu_pjrt_buffer_free(d->pjrt, *at);
  *at = NULL;
  return mxu_pjrt_upload(d->pjrt, device, type, data, rank, dims, at);
}

static mxu_status upload_param(mxu_device *d, int device, const mxu_param *p,
                               const float *values, mxu_pjrt_buffer **at) {
  int64_t dims[MXU_MAX_RANK];
  for (int i = 0; i < p->shape.rank; i++) dims[i] = p->shape.dims[i];
  return upload(d, device, MXU_PJRT_F32, values + p->offset, p->shape.rank,
                dims, at);
}

/* The host's weights and slots to every device. */
static mxu_status upload_state(mxu_model *model) {
  mxu_device *d = model->device;
  int count = model->param_count;
  for (int r = 0; r < d->devices; r++) {
    mxu_pjrt_buffer **args = d->args + r * d->nargs;
    for (int i = 0, t = 0; i < count; i++) {
      const mxu_param *p = &model->params[i];
      MXU_TRY(upload_param(
          d, r, p, p->trainable ? model->weights : model->state, &args[i]));
      if (!p->trainable) continue;
      for (int k = 0; k < d->kinds; k++)
        MXU_TRY(upload_param(d, r, p, mxu_slot_buffer(model, d->kind[k]),
                             &args[count + k * d->trainable + t]));
      t++;
    }
  }
  d->synced = model->iterations;
  return MXU_OK;
}

int mxu_device_steps(const mxu_model *model) {
  return model->device ? model->device->steps : 0;
}

/* Where the host plan loaded a replica's labels (or targets) of head j. */
static const void *loaded_labels(const mxu_model *model,
                                 const mxu_replica *replica, int j) {
  const mxu_head_plan *hp = &model->plan.head[j];
  int sparse = model->heads[j].spec.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  return mxu_replica_floats(replica, sparse ? hp->labels : hp->targets);
}

/* Where the host plan loaded a replica's x, first labels, mask and
 * weights. */
static const void *loaded(const mxu_model *model, const mxu_replica *replica,
                          int input) {
  if (input == LABELS) return loaded_labels(model, replica, 0);
  const mxu_plan *plan = &model->plan;
  return mxu_replica_floats(replica, input == X ? plan->act[model->inputs[0]]
                                     : input == MASK ? plan->mask
                                                     : plan->weight);
}

static const void *loaded_input(const mxu_model *model,
                                const mxu_replica *replica, int k) {
  return mxu_replica_floats(replica, model->plan.act[model->inputs[k]]);
}

static void stage_copy(mxu_device *d, int r, int input, int step,
                       const void *from) {
  float *to = d->stage[r * d->inputs + input] + step * d->size[input];
  memcpy(to, from, (size_t)d->size[input] * sizeof(float));
}

void mxu_device_stage(mxu_model *model, int step, const mxu_step_key *key,
                      float scale) {
  mxu_device *d = model->device;
  const mxu_plan *plan = &model->plan;
  float hyper[MXU_HYPERS];
  mxu_step_hypers(model, model->iterations + step + 1, hyper);
  d->rates[step] = hyper[MXU_HYPER_LR];
  for (int r = 0; r < d->devices; r++) {
    mxu_replica *replica = &plan->replica[r];
    stage_copy(d, r, HYPER, step, hyper);
    for (int input = X; input <= WEIGHTS; input++)
      stage_copy(d, r, input, step, loaded(model, replica, input));
    stage_copy(d, r, SCALE, step, &scale);
    /* Each noise-drawing node's draws, as the host forward pass would
     * draw them. */
    for (int n = 0, i = NOISE; n < model->layer_count; n++) {
      const mxu_layer *l = &model->layers[n];
      if (!mxu_layer_draws_noise(l)) continue;
      mxu_layer_run run = mxu_replica_run(model, replica, n, key);
      l->cls->emit_noise(l, &run,
                         d->stage[r * d->inputs + i] + step * d->size[i]);
      i++;
    }
    for (int k = 1; k < model->input_count; k++)
      stage_copy(d, r, d->more + k - 1, step, loaded_input(model, replica, k));
    for (int j = 1; j < model->head_count; j++)
      stage_copy(d, r, d->labels + j - 1, step,
                 loaded_labels(model, replica, j));
  }
}

/* The staged steps, stacked, to every device. */
static mxu_status upload_stage(mxu_device *d) {
  for (int r = 0; r < d->devices; r++)
    for (int i = 0; i < d->inputs; i++) {
      const mxu_hlo_shape *s = &d->shape[i];
      int64_t dims[MXU_HLO_MAX_RANK + 1] = {d->steps};
      memcpy(dims + 1, s->dims, (size_t)s->rank * sizeof *dims);
      MXU_TRY(upload(d, r, mxu_pjrt_type_of(s->dtype),
                     d->stage[r * d->inputs + i], s->rank + 1, dims,
                     &d->args[r * d->nargs + d->state + i]));
    }
  return MXU_OK;
}

/* A program's loss sums of a step (sums: d->sum_floats values, each sum
 * its sum_size) as the step's result, a metric's tally into tallies (the
 * model's). */
static void read_sums(const mxu_model *model, const float *sums,
                      mxu_step_result *out, float *tallies) {
  *out = (mxu_step_result){.loss_sum = sums[0]};
  const float *own = sums + 1;
  for (int j = 0; j < model->head_count; j++) {
    const mxu_head *head = &model->heads[j];
    mxu_head_sums *t = &out->heads[j];
    t->loss = *own++;
    t->count = *own++;
    for (int m = 0; m < head->metric_count; m++) {
      if (head->tally[m] >= 0) {
        int64_t size = mxu_metric_tally_size(head->metric_kind[m],
                                             mxu_head_row_values(model, j));
        memcpy(tallies + head->tally[m], own, (size_t)size * sizeof *own);
        own += size;
        continue;
      }
      t->metric[m] = *own++;
      t->divisor[m] = *own++;
    }
  }
}

void mxu_device_tallies(mxu_model *model, int step) {
  mxu_device *d = model->device;
  int values = model->plan.tally_values;
  for (int v = 0; v < values; v++)
    model->plan.tallies[v] = d->tallies[step * values + v];
}

mxu_status mxu_device_run(mxu_model *model, int steps,
                          mxu_step_result *results) {
  mxu_device *d = model->device;
  if (steps < 1 || steps > d->steps)
    return mxu_fail(MXU_ERR_ARG, "pjrt: %d steps in one execution (1 to %d)",
                    steps, d->steps);
  /* A run not applied (a loss was not finite) leaves its outputs. */
  free_buffers(d, d->outs, 0, d->outputs, d->outputs);
  d->pending = 0;
  mxu_status s = MXU_OK;
  if (d->synced != model->iterations) s = upload_state(model);
  if (s == MXU_OK) s = upload_stage(d);
  int32_t count = steps;
  for (int r = 0; s == MXU_OK && r < d->devices; r++)
    s = upload(d, r, MXU_PJRT_S32, &count, 0, NULL,
               &d->args[r * d->nargs + d->nargs - 1]);
  if (s == MXU_OK && !d->train) {
    s = mxu_pjrt_compile(d->pjrt, d->train_text, d->devices, &d->train);
    free(d->train_text);
    d->train_text = NULL;
  }
  if (s == MXU_OK)
    s = mxu_pjrt_execute(d->pjrt, d->train, d->nargs, d->args, d->outs);
  /* Each sum over the execution's steps, stacked: sum k's at all +
   * steps * (the floats of the sums before it). */
  float *all = d->sum_stage, *sums = all + (size_t)d->steps * d->sum_floats;
  for (int k = 0, at = 0; s == MXU_OK && k < d->sums;
       at += d->sum_size[k++] * d->steps)
    s = mxu_pjrt_download(d->pjrt, d->outs[d->state + k], all + at,
                          (size_t)(d->steps * d->sum_size[k]) * sizeof *all);
  int values = model->plan.tally_values;
  for (int j = 0; s == MXU_OK && j < steps; j++) {
    for (int k = 0, at = 0, to = 0; k < d->sums; k++) {
      int size = d->sum_size[k];
      memcpy(sums + to, all + at + j * size, (size_t)size * sizeof *sums);
      at += size * d->steps;
      to += size;
    }
    read_sums(model, sums, &results[j], d->tallies + j * values);
  }
  if (s != MXU_OK) {
    free_buffers(d, d->outs, 0, d->outputs, d->outputs);
    return s;
  }
  d->pending = steps;
  d->executions++;
  d->steps_run += steps;
  return MXU_OK;
}

void mxu_device_counts(const mxu_model *model, int64_t *executions,
                       int64_t *steps) {
  const mxu_device *d = model ? model->device : NULL;
  if (executions) *executions = d ? d->executions : 0;
  if (steps) *steps = d ? d->steps_run : 0;
}

mxu_status mxu_device_apply(mxu_model *model) {
  mxu_device *d = model->device;
  if (!d->pending) return mxu_fail(MXU_ERR_ARG, "pjrt: no step to apply");
  /* The step's results are the devices' state from now on. */
  for (int r = 0; r < d->devices; r++)
    for (int i = 0; i < d->state; i++) {
      mxu_pjrt_buffer_free(d->pjrt, d->args[r * d->nargs + i]);
      d->args[r * d->nargs + i] = d->outs[r * d->outputs + i];
      d->outs[r * d->outputs + i] = NULL;
    }
  free_buffers(d, d->outs, d->state, d->outputs, d->outputs);
  /* The host's record of the last step, as its own update leaves it. */
  model->step_rate = d->rates[d->pending - 1];
  model->iterations += d->pending;
  d->pending = 0;
  d->synced = model->iterations;
  d->host_stale = 1; /* read back when the host needs it (mxu_device_sync) */
  return MXU_OK;
}

mxu_status mxu_device_sync(mxu_model *model) {
  mxu_device *d = model->device;
  if (!d || !d->host_stale) return MXU_OK;
  int count = model->param_count;
  for (int i = 0, t = 0; i < count; i++) {
    const mxu_param *p = &model->params[i];
    size_t bytes = (size_t)p->count * sizeof(float);
    MXU_TRY(mxu_pjrt_download(d->pjrt, d->args[i], mxu_param_values(model, p),
                              bytes));
    if (!p->trainable) continue;
    for (int k = 0; k < d->kinds; k++)
      MXU_TRY(mxu_pjrt_download(d->pjrt, d->args[count + k * d->trainable + t],
                                mxu_slot_buffer(model, d->kind[k]) + p->offset,
                                bytes));
    t++;
  }
  d->host_stale = 0;
  return MXU_OK;
}

/* ---- evaluation and prediction ------------------------------------------ */

static mxu_status eval_program(mxu_model *model, int predict,
                               mxu_pjrt_program **out) {
  mxu_device *d = model->device;
  mxu_pjrt_program **program = predict ? &d->predict : &d->eval;
  if (!*program) {
    char *text = NULL;
    MXU_TRY(mxu_model_eval_program(model, model->plan.batch, d->devices,
                                   predict, &text));
    mxu_status s = mxu_pjrt_compile(d->pjrt, text, d->devices, program);
    free(text);
    MXU_TRY(s);
  }
  *out = *program;
  return MXU_OK;
}

/* The program on each replica's loaded batch, with the devices' weights;
 * outs: devices * the program's outputs, the caller's to free. */
static mxu_status run_eval(mxu_model *model, int predict,
                           mxu_pjrt_buffer **outs) {
  mxu_device *d = model->device;
  const mxu_plan *plan = &model->plan;
  mxu_pjrt_program *program = NULL;
  MXU_TRY(eval_program(model, predict, &program));
  if (d->synced != model->iterations) MXU_TRY(upload_state(model));
  int given = predict ? 1 : 4, others = model->input_count - 1;
  int heads = predict ? 0 : model->head_count - 1;
  int count = model->param_count, n = count + given + others + heads;
  mxu_pjrt_buffer **args = calloc((size_t)(d->devices * n), sizeof *args);
  if (!args) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  mxu_status s = MXU_OK;
  /* x, for evaluation the labels, the mask and the weights, then the
   * other inputs and the other outputs' labels. */
  const int inputs[4] = {X, LABELS, MASK, WEIGHTS};
  for (int r = 0; r < d->devices && s == MXU_OK; r++) {
    mxu_pjrt_buffer **a = args + r * n;
    const mxu_replica *replica = &plan->replica[r];
    for (int i = 0; i < count; i++) a[i] = d->args[r * d->nargs + i];
    for (int k = 0; k < given + others + heads && s == MXU_OK; k++) {
      int other = k - given, head = k - given - others + 1;
      int input = k < given        ? inputs[k]
                  : other < others ? d->more + other
                                   : d->labels + head - 1;
      const void *from = k < given ? loaded(model, replica, input)
                         : other < others
                             ? loaded_input(model, replica, other + 1)
                             : loaded_labels(model, replica, head);
      const mxu_hlo_shape *shape = &d->shape[input];
      s = upload(d, r, mxu_pjrt_type_of(shape->dtype), from, shape->rank,
                 shape->dims, &a[count + k]);
    }
  }
  if (s == MXU_OK) s = mxu_pjrt_execute(d->pjrt, program, n, args, outs);
  for (int r = 0; r < d->devices; r++)
    for (int i = count; i < n; i++)
      mxu_pjrt_buffer_free(d->pjrt, args[r * n + i]);
  free(args);
  return s;
}

mxu_status mxu_device_evaluate(mxu_model *model, mxu_step_result *result) {
  mxu_device *d = model->device;
  int n = d->sums;
  mxu_pjrt_buffer **outs = calloc((size_t)(n * d->devices), sizeof *outs);
  if (!outs) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  mxu_status s = run_eval(model, 0, outs);
  float *sums = d->sum_stage;
  for (int k = 0, at = 0; s == MXU_OK && k < n; at += d->sum_size[k++])
    s = mxu_pjrt_download(d->pjrt, outs[k], sums + at,
                          (size_t)d->sum_size[k] * sizeof *sums);
  for (int i = 0; i < n * d->devices; i++)
    mxu_pjrt_buffer_free(d->pjrt, outs[i]);
  free(outs);
  if (s == MXU_OK) {
    read_sums(model, sums, result, d->tallies);
    mxu_device_tallies(model, 0);
  }
  return s;
}

mxu_status mxu_device_predict(mxu_model *model, int64_t rows,
                              float *const *outputs) {
  mxu_device *d = model->device;
  int count = mxu_model_output_count(model);
  mxu_pjrt_buffer **outs = calloc((size_t)(count * d->devices), sizeof *outs);
  if (!outs) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  mxu_status s = run_eval(model, 1, outs);
  /* Replica r holds rows r * batch .. of the global batch. */
  for (int j = 0; s == MXU_OK && j < count; j++) {
    int node = mxu_model_output_node(model, j);
    int64_t size = mxu_shape_count(&model->layers[node].out_shape);
    float *all = malloc((size_t)(model->plan.batch * size) * sizeof *all);
    if (!all) s = mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
    for (int r = 0; s == MXU_OK && r < d->devices; r++) {
      int64_t first = (int64_t)r * model->plan.batch;
      int64_t own =
          rows - first < model->plan.batch ? rows - first : model->plan.batch;
      if (own <= 0) break;
      s = mxu_pjrt_download(d->pjrt, outs[r * count + j], all,
                            (size_t)(model->plan.batch * size) * sizeof *all);
      if (s == MXU_OK)
        memcpy(outputs[j] + first * size, all,
               (size_t)(own * size) * sizeof *all);
    }
    free(all);
  }
  for (int i = 0; i < count * d->devices; i++)
    mxu_pjrt_buffer_free(d->pjrt, outs[i]);
  free(outs);
  return s;
}

mxu_pjrt *mxu_device_client(const mxu_model *model) {
  return model->device ? model->device->pjrt : NULL;
}
