/* device_profile.c — where the time of a pjrt step goes, layer by layer.
 * XLA's CPU runtime does not time its ops, so each layer's emitted
 * forward pass runs alone as a program on device 0 (its inputs, weights
 * and noise made up, a replica's batch), then its forward and backward
 * pass (the gradient of sum(y r) for a made-up r, with respect to its
 * inputs and weights); the difference is the backward's. The times go
 * where mxu_profile_read reads the host's, so a profile of the same model
 * on `cpu` and on `pjrt` compares layer by layer. */
#include "backend/pjrt/runtime.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

/* A layer's program: its text and its parameters' shapes. */
typedef struct layer_program {
  char *text;
  int params;
  mxu_hlo_shape shapes[2 * MXU_MAX_INPUTS + 8];
} layer_program;

/* The layer's forward pass (results: its output), or its backward too
 * (results: the gradients of every parameter but r). */
static mxu_status build(const mxu_model *model, int n, int batch, int backward,
                        layer_program *prog) {
  char **text = &prog->text;
  const mxu_layer *l = &model->layers[n];
  const mxu_layer *owner = &model->layers[l->owner];
  int weights = owner->param_count, count = weights + l->input_count + 2;
  mxu_hlo_value *v = calloc((size_t)(2 * count), sizeof *v);
  mxu_emit_moving *moving = calloc((size_t)weights + 1, sizeof *moving);
  if (!v || !moving) {
    free(v), free(moving);
    return mxu_fail(MXU_ERR_NOMEM, "profile: out of memory");
  }
  mxu_hlo h;
  mxu_hlo_init(&h);
  int p = 0;
  for (int i = 0; i < weights; i++) {
    const mxu_param *q = &model->params[owner->param_first + i];
    mxu_hlo_shape s = {.dtype = MXU_HLO_F32, .rank = q->shape.rank};
    for (int d = 0; d < s.rank; d++) s.dims[d] = q->shape.dims[d];
    v[p++] = mxu_hlo_parameter(&h, s);
  }
  for (int i = 0; i < l->input_count; i++)
    v[p++] = mxu_hlo_parameter(&h, mxu_batch_shape(batch, &l->in_shapes[i]));
  mxu_hlo_shape out = mxu_batch_shape(batch, &l->out_shape);
  mxu_hlo_value noise =
      mxu_layer_draws_noise(l)
          ? (v[p++] = mxu_hlo_parameter(&h, mxu_noise_shape(l, batch)))
          : 0;
  mxu_hlo_value r = v[p++] = mxu_hlo_parameter(&h, out);
  for (int i = 0;
       i < p && i < (int)(sizeof prog->shapes / sizeof *prog->shapes); i++)
    prog->shapes[i] = *mxu_hlo_shape_of(&h, v[i]);
  prog->params = p;
  mxu_emit e = {.h = &h,
                .batch = batch,
                .bf16 = model->compile.precision == MXU_MIXED_BFLOAT16,
                .training = 1,
                .replicas = 1,
                .in = v + weights,
                .w = v,
                .noise = noise,
                .moving = moving};
  mxu_hlo_value y = l->cls->emit(l, &e);
  mxu_status s = h.status;
  if (s == MXU_OK && !backward) {
    s = mxu_hlo_print(&h, 1, &y, 1, text);
  } else if (s == MXU_OK) {
    int64_t all[MXU_HLO_MAX_RANK];
    for (int d = 0; d < out.rank; d++) all[d] = d;
    mxu_hlo_value f =
        mxu_hlo_reduce(&h, mxu_hlo_binary(&h, MXU_HLO_MULTIPLY, y, r),
                       MXU_HLO_SUM, out.rank, all);
    int wrt = weights + l->input_count;
    s = mxu_hlo_gradients(&h, f, mxu_hlo_full_like(&h, f, 1.0), wrt, v,
                          v + count);
    if (s == MXU_OK) s = mxu_hlo_print(&h, wrt, v + count, 1, text);
  }
  mxu_hlo_free(&h);
  free(v);
  free(moving);
  return s;
}

/* Seconds a run of the program takes, the median of `repeats` after one
 * to warm up; args made up from the parameters' shapes. */
static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static mxu_status time_program(mxu_pjrt *pjrt, const layer_program *prog,
                               int repeats, double *seconds) {
  mxu_pjrt_program *program = NULL;
  MXU_TRY(mxu_pjrt_compile(pjrt, prog->text, 1, &program));
  mxu_status s = MXU_OK;
  int nargs = prog->params, outputs = mxu_pjrt_program_outputs(program);
  mxu_pjrt_buffer **args = calloc((size_t)nargs + 1, sizeof *args);
  mxu_pjrt_buffer **outs = calloc((size_t)outputs + 1, sizeof *outs);
  double *runs = calloc((size_t)repeats + 1, sizeof *runs);
  if (!args || !outs || !runs)
    s = mxu_fail(MXU_ERR_NOMEM, "profile: out of memory");
  for (int i = 0; s == MXU_OK && i < nargs; i++) {
    const mxu_hlo_shape *shape = &prog->shapes[i];
    int64_t values = mxu_hlo_count(shape);
    float *data = malloc((size_t)(values ? values : 1) * sizeof *data);
    if (!data) {
      s = mxu_fail(MXU_ERR_NOMEM, "profile: out of memory");
      break;
    }
    for (int64_t j = 0; j < values; j++)
      data[j] = 0.5f + (float)((j * 7919) % 1000) / 1000.0f;
    /* A random stream's words (uint32) take the same made-up bits. */
    s = mxu_pjrt_upload(pjrt, 0, mxu_pjrt_type_of(shape->dtype), data,
                        shape->rank, shape->dims, &args[i]);
    free(data);
  }
  for (int t = 0; s == MXU_OK && t <= repeats; t++) {
    double start = mxu_now_seconds();
    s = mxu_pjrt_execute(pjrt, program, nargs, args, outs);
    if (t) runs[t - 1] = mxu_now_seconds() - start;
    for (int o = 0; o < outputs; o++) {
      mxu_pjrt_buffer_free(pjrt, outs[o]);
      outs[o] = NULL;
    }
  }
  if (s == MXU_OK) {
    qsort(runs, (size_t)repeats, sizeof *runs, compare_doubles);
    *seconds = runs[repeats / 2];
  }
  for (int i = 0; args && i < nargs; i++) mxu_pjrt_buffer_free(pjrt, args[i]);
  free(args), free(outs), free(runs);
  mxu_pjrt_program_free(pjrt, program);
  return s;
}

mxu_status mxu_profile_device(mxu_model *model, int repeats) {
  if (!model || !model->device)
    return mxu_fail(MXU_ERR_ARG,
                    "profile: the model has no devices (compile it for the "
                    "pjrt backend)");
  MXU_TRY(mxu_profile_enable(model, 1));
  model->profiling = 0;
  model->profile_steps = 1; /* the totals are one step's */
  mxu_pjrt *pjrt = mxu_device_client(model);
  for (int n = 0; n < model->layer_count; n++) {
    const mxu_layer *l = &model->layers[n];
    if (l->cls == &mxu_input_layer_class) continue;
    double seconds[2] = {0, 0};
    for (int backward = 0; backward < 2; backward++) {
      layer_program prog = {0};
      MXU_TRY(build(model, n, model->plan.batch, backward, &prog));
      mxu_status s = time_program(pjrt, &prog, repeats, &seconds[backward]);
      free(prog.text);
      MXU_TRY(s);
    }
    model->profile[2 * n] = seconds[0];
    model->profile[2 * n + 1] =
        seconds[1] > seconds[0] ? seconds[1] - seconds[0] : 0.0;
  }
  return MXU_OK;
}
