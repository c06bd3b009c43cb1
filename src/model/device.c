/* device.c — the pjrt backend's side of a compiled model: the plugin's
 * client with one device per replica, the training step compiled once
 * (programs.c), and the weights and optimizer slots kept on the devices
 * from one step to the next. The host plan still loads each replica's
 * batch and runs evaluation and prediction; after each step the host's
 * weights and slots are brought up to date from device 0 (so callbacks,
 * checkpoints and saves see them), and they go back to the devices when
 * the host changed them (a restore, a new fit). */
#include "backend/pjrt/runtime.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

struct mxu_device {
  mxu_pjrt *pjrt;
  mxu_pjrt_program *train;
  int devices, kinds, trainable, state, nargs, outputs;
  float *noise;           /* the host's draws for one node of one replica */
  mxu_pjrt_buffer **args; /* devices * nargs: state, then the step's */
  mxu_pjrt_buffer **outs; /* devices * outputs */
  int pending;            /* outs hold a step not yet applied */
  int64_t synced;         /* model->iterations of the devices' state; -1 */
  float rate;             /* the pending step's learning rate */
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
  if (d->args) free_buffers(d, d->args, 0, d->nargs, d->nargs);
  if (d->outs) free_buffers(d, d->outs, 0, d->outputs, d->outputs);
  free(d->args);
  free(d->outs);
  free(d->noise);
  mxu_pjrt_program_free(d->pjrt, d->train);
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

mxu_status mxu_device_open(mxu_model *model) {
  mxu_device_free(model);
  keep_large_allocations();
  if (mxu_distributed_size() > 1)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "pjrt: one process drives every device; run without "
                    "mpirun");
  const mxu_plan *plan = &model->plan;
  char *text = NULL;
  MXU_TRY(mxu_model_train_program(model, plan->batch, plan->replicas, &text));
  mxu_device *d = calloc(1, sizeof *d);
  if (!d) {
    free(text);
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  model->device = d;
  d->devices = plan->replicas;
  d->synced = -1;
  d->kinds = mxu_model_slot_kinds(model);
  for (int i = 0; i < model->param_count; i++)
    d->trainable += model->params[i].trainable;
  d->state = model->param_count + d->kinds * d->trainable;
  int64_t largest = 0, noises = 0;
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (!mxu_layer_draws_noise(l)) continue;
    noises++;
    int64_t values = plan->batch * mxu_shape_count(&l->out_shape);
    if (values > largest) largest = values;
  }
  d->nargs = d->state + 5 + (int)noises;
  mxu_status s =
      mxu_pjrt_open(model->compile.pjrt_plugin, d->devices, &d->pjrt);
  if (s == MXU_OK) s = mxu_pjrt_compile(d->pjrt, text, d->devices, &d->train);
  free(text);
  if (s == MXU_OK) {
    d->outputs = mxu_pjrt_program_outputs(d->train);
    d->args = calloc((size_t)(d->devices * d->nargs), sizeof *d->args);
    d->outs = calloc((size_t)(d->devices * d->outputs), sizeof *d->outs);
    d->noise = malloc((size_t)(largest ? largest : 1) * sizeof(float));
    if (!d->args || !d->outs || !d->noise)
      s = mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  if (s != MXU_OK) mxu_device_free(model);
  return s;
}

void mxu_device_invalidate(mxu_model *model) {
  if (model->device) model->device->synced = -1;
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
        MXU_TRY(upload_param(d, r, p, mxu_slot_buffer(model, k),
                             &args[count + k * d->trainable + t]));
      t++;
    }
  }
  d->synced = model->iterations;
  return MXU_OK;
}

/* Each noise-drawing node's draws for this replica and step, as the host
 * forward pass would draw them. */
static mxu_status upload_noise(mxu_model *model, int r, const mxu_step_key *key,
                               mxu_pjrt_buffer **at) {
  mxu_device *d = model->device;
  mxu_replica *replica = &model->plan.replica[r];
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (!mxu_layer_draws_noise(l)) continue;
    mxu_layer_run run = mxu_replica_run(model, replica, n, key);
    l->cls->emit_noise(l, &run, d->noise);
    mxu_hlo_shape s = mxu_batch_shape(model->plan.batch, &l->out_shape);
    MXU_TRY(upload(d, r, MXU_PJRT_F32, d->noise, s.rank, s.dims, at++));
  }
  return MXU_OK;
}

/* Each replica's loaded batch (the host plan's arenas) and the step's
 * scalars. */
static mxu_status upload_batch(mxu_model *model, const mxu_step_key *key,
                               float rate, float scale) {
  mxu_device *d = model->device;
  const mxu_plan *plan = &model->plan;
  mxu_hlo_shape x =
      mxu_batch_shape(plan->batch, &model->layers[model->inputs[0]].out_shape);
  int64_t rows[1] = {plan->batch};
  int64_t classes =
      mxu_shape_count(&model->layers[mxu_model_output(model)].out_shape);
  int64_t t_dims[2] = {plan->batch, classes};
  int sparse = model->compile.loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  for (int r = 0; r < d->devices; r++) {
    const mxu_replica *replica = &plan->replica[r];
    mxu_pjrt_buffer **a = d->args + r * d->nargs + d->state;
    MXU_TRY(upload(d, r, MXU_PJRT_F32, &rate, 0, NULL, &a[0]));
    MXU_TRY(upload(d, r, MXU_PJRT_F32,
                   mxu_replica_floats(replica, plan->act[model->inputs[0]]),
                   x.rank, x.dims, &a[1]));
    if (sparse)
      MXU_TRY(upload(d, r, MXU_PJRT_S32,
                     mxu_replica_floats(replica, plan->labels), 1, rows,
                     &a[2]));
    else
      MXU_TRY(upload(d, r, MXU_PJRT_F32,
                     mxu_replica_floats(replica, plan->targets), 2, t_dims,
                     &a[2]));
    MXU_TRY(upload(d, r, MXU_PJRT_F32, mxu_replica_floats(replica, plan->mask),
                   1, rows, &a[3]));
    MXU_TRY(upload(d, r, MXU_PJRT_F32, &scale, 0, NULL, &a[4]));
    MXU_TRY(upload_noise(model, r, key, &a[5]));
  }
  return MXU_OK;
}

/* The step's rate as the host update would use it: the schedule's at the
 * iteration before the step; Adam's with its bias correction folded in. */
static float step_rate(const mxu_model *model) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  double rate = mxu_optimizer_rate(model);
  if (o->kind == MXU_ADAM)
    rate = mxu_adam_rate(o, rate, (double)model->iterations + 1);
  return (float)rate;
}

mxu_step_result mxu_device_step(mxu_model *model, const mxu_step_key *key,
                                float scale) {
  mxu_device *d = model->device;
  mxu_step_result result = {0};
  /* A step not applied (its loss was not finite) leaves its outputs. */
  free_buffers(d, d->outs, 0, d->outputs, d->outputs);
  d->pending = 0;
  mxu_status s = MXU_OK;
  if (d->synced != model->iterations) s = upload_state(model);
  d->rate = step_rate(model);
  if (s == MXU_OK) s = upload_batch(model, key, d->rate, scale);
  if (s == MXU_OK)
    s = mxu_pjrt_execute(d->pjrt, d->train, d->nargs, d->args, d->outs);
  float sums[2] = {0, 0};
  for (int k = 0; s == MXU_OK && k < 2; k++)
    s = mxu_pjrt_download(d->pjrt, d->outs[d->state + k], &sums[k],
                          sizeof(float));
  d->pending = s == MXU_OK;
  if (s != MXU_OK) free_buffers(d, d->outs, 0, d->outputs, d->outputs);
  result.status = s;
  result.loss_sum = sums[0];
  result.metric_sum = sums[1];
  return result;
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
  d->pending = 0;
  model->step_rate = d->rate;
  model->iterations++;
  d->synced = -1; /* until the host has all of it */
  int count = model->param_count;
  for (int i = 0, t = 0; i < count; i++) {
    const mxu_param *p = &model->params[i];
    size_t bytes = (size_t)p->count * sizeof(float);
    MXU_TRY(mxu_pjrt_download(d->pjrt, d->args[i], mxu_param_values(model, p),
                              bytes));
    if (!p->trainable) continue;
    for (int k = 0; k < d->kinds; k++)
      MXU_TRY(mxu_pjrt_download(d->pjrt, d->args[count + k * d->trainable + t],
                                mxu_slot_buffer(model, k) + p->offset, bytes));
    t++;
  }
  d->synced = model->iterations;
  return MXU_OK;
}
