/* test_pjrt_step.c — a model's whole training step as one StableHLO
 * program (programs.c) on XLA's CPU plugin, over two replicas on two
 * devices with the gradient all-reduced: three steps from the same
 * weights as mxu's cpu_ref backend, for Adam and SGD with momentum, give
 * the same weights, losses and accuracy; both devices' weights agree bit
 * for bit; what the program cannot emit yet is refused by name. */
#include "backend/pjrt/runtime.h"
#include "check.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SIDE = 8, CLASSES = 10, ROWS = 8, REPLICAS = 2, STEPS = 3 };

static mxu_pjrt *plugin;

static int with_bn_dropout, per_execution, dense_only;
/* An L1L2 penalty on the first Dense's kernel, and categorical targets
 * with label smoothing, for the optimizer cases. */
static int penalized, smoothed;
/* The loss and metric small_net compiles with (the loss cases). */
static mxu_loss loss_kind = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
static const char *metric_name = "accuracy";
static int logits;
/* The output as (2, 5): a softmax over each of two positions, whose
 * cross-entropies and metrics are meaned per sample. */
static int positions;
static mxu_precision precision = MXU_PRECISION_FLOAT32;

static mxu_compile_config compile_config(mxu_optimizer_config o,
                                         mxu_backend_kind backend);

/* positions: the input's Dense as (2, 5), a softmax over each row. */
static mxu_model *positions_net(mxu_optimizer_config o,
                                mxu_backend_kind backend) {
  mxu_model *m = mxu_functional("positions");
  int64_t dims[3] = {SIDE, SIDE, 2}, rows[2] = {2, CLASSES / 2};
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  mxu_reshape_config r = {NULL, mxu_shape_make(2, rows)};
  mxu_tensor_id y = mxu_apply_dense(
      m, &d,
      mxu_apply_flatten(m, NULL, mxu_input(m, NULL, mxu_shape_make(3, dims))));
  y = mxu_apply_activation(m, NULL, MXU_SOFTMAX, mxu_apply_reshape(m, &r, y));
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  mxu_compile_config cc = compile_config(o, backend);
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

static mxu_model *small_net(mxu_optimizer_config o, mxu_backend_kind backend) {
  if (positions) return positions_net(o, backend);
  mxu_model *m = mxu_sequential("step");
  int64_t dims[3] = {SIDE, SIDE, 2};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.momentum = 0.5f;
  if (with_bn_dropout) CHECK_OK(mxu_add_batch_normalization(m, &bn));
  mxu_conv2d_config c = mxu_conv2d_defaults(4, 3, 3);
  c.padding = MXU_SAME;
  c.strides[1] = 2;
  mxu_pool2d_config p = mxu_pool2d_defaults(2, 2);
  if (!dense_only) {
    CHECK_OK(mxu_add_conv2d(m, &c));
    CHECK_OK(mxu_add_max_pooling2d(m, &p));
    CHECK_OK(mxu_add_activation(m, NULL, MXU_RELU));
  }
  if (with_bn_dropout) CHECK_OK(mxu_add_dropout(m, NULL, 0.25f));
  CHECK_OK(mxu_add_flatten(m, NULL));
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  d.activation = MXU_TANH;
  if (penalized) {
    d.kernel.regularizer = (mxu_regularizer){0.01f, 0.02f};
    d.kernel.constraint = (mxu_constraint){
        .kind = MXU_MAX_NORM, .max_value = 0.5f, .axes = {0}, .axis_count = 1};
    d.bias.constraint = (mxu_constraint){.kind = MXU_NON_NEG};
  }
  if (!dense_only) CHECK_OK(mxu_add_dense(m, &d));
  mxu_dense_config d2 = mxu_dense_defaults(CLASSES);
  CHECK_OK(mxu_add_dense(m, &d2));
  CHECK_OK(mxu_add_activation(m, NULL, MXU_SOFTMAX));
  mxu_compile_config cc = compile_config(o, backend);
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

static mxu_compile_config compile_config(mxu_optimizer_config o,
                                         mxu_backend_kind backend) {
  mxu_compile_config cc = mxu_compile_defaults();
  cc.optimizer = o;
  cc.batch_size = ROWS;
  cc.replicas = REPLICAS;
  cc.threads = 1;
  cc.backend = backend;
  cc.metrics[0] = metric_name;
  cc.loss = loss_kind;
  cc.from_logits = logits;
  cc.precision = precision;
  cc.steps_per_execution = per_execution;
  if (smoothed) {
    cc.loss = MXU_CATEGORICAL_CROSSENTROPY;
    cc.label_smoothing = 0.2f;
  }
  return cc;
}

static void data(float *x, int32_t *labels) {
  unsigned s = 11;
  for (int i = 0; i < ROWS * SIDE * SIDE * 2; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (float)((s >> 9) & 0xff) / 128.0f - 1.0f;
  }
  for (int r = 0; r < ROWS; r++) labels[r] = (r * 7) % CLASSES;
}

static mxu_pjrt_buffer *upload(const float *values, const mxu_shape *shape,
                               int device) {
  int64_t dims[MXU_MAX_RANK];
  for (int d = 0; d < shape->rank; d++) dims[d] = shape->dims[d];
  mxu_pjrt_buffer *b = NULL;
  CHECK_OK(mxu_pjrt_upload(plugin, device, MXU_PJRT_F32, values, shape->rank,
                           dims, &b));
  return b;
}

/* Steps the program from the model's weights; leaves the result in the
 * model's weights and the losses and accuracies per step. */
static void run_program(mxu_model *m, const float *x, const int32_t *labels,
                        double *loss, double *accuracy) {
  char *text = NULL;
  CHECK_OK(mxu_model_train_program(m, ROWS / REPLICAS, REPLICAS, 1, &text));
  mxu_pjrt_program *program = NULL;
  if (text) CHECK_OK(mxu_pjrt_compile(plugin, text, REPLICAS, &program));
  free(text);
  if (!program) return;
  const mxu_optimizer_config *o = &m->compile.optimizer;
  int count = m->param_count, kinds = o->kind == MXU_ADAM ? 2 : 1;
  int state = count * (1 + kinds), nargs = state + 7;
  int outputs = mxu_pjrt_program_outputs(program);
  /* the loss, then the one output's loss and count, its metric's sum and
   * divisor */
  CHECK(outputs == state + 5);
  mxu_pjrt_buffer **args = calloc((size_t)(REPLICAS * nargs), sizeof *args);
  mxu_pjrt_buffer **outs = calloc((size_t)(REPLICAS * outputs), sizeof *outs);
  float *zeros = calloc((size_t)m->trainable_count, sizeof(float));
  const int per = ROWS / REPLICAS, sample = SIDE * SIDE * 2;
  for (int r = 0; r < REPLICAS; r++)
    for (int i = 0; i < count; i++) {
      const mxu_param *p = &m->params[i];
      args[r * nargs + i] = upload(m->weights + p->offset, &p->shape, r);
      for (int k = 0; k < kinds; k++)
        args[r * nargs + count * (1 + k) + i] = upload(zeros, &p->shape, r);
    }
  float ones[ROWS];
  for (int i = 0; i < ROWS; i++) ones[i] = 1.0f;
  for (int t = 1; t <= STEPS; t++) {
    float hyper[MXU_HYPERS], scale = 1.0f / ROWS;
    mxu_step_hypers(m, t, hyper);
    for (int r = 0; r < REPLICAS; r++) {
      /* One step of the loop program: each input stacked one deep. */
      int64_t xd[5] = {1, per, SIDE, SIDE, 2}, rows[2] = {1, per}, one = 1;
      int32_t steps = 1;
      mxu_pjrt_buffer **a = args + r * nargs + state;
      int64_t hypers[2] = {1, MXU_HYPERS};
      CHECK_OK(
          mxu_pjrt_upload(plugin, r, MXU_PJRT_F32, hyper, 2, hypers, &a[0]));
      CHECK_OK(mxu_pjrt_upload(plugin, r, MXU_PJRT_F32, x + r * per * sample, 5,
                               xd, &a[1]));
      CHECK_OK(mxu_pjrt_upload(plugin, r, MXU_PJRT_S32, labels + r * per, 2,
                               rows, &a[2]));
      /* the mask, then each sample's weight */
      CHECK_OK(mxu_pjrt_upload(plugin, r, MXU_PJRT_F32, ones, 2, rows, &a[3]));
      CHECK_OK(mxu_pjrt_upload(plugin, r, MXU_PJRT_F32, ones, 2, rows, &a[4]));
      CHECK_OK(
          mxu_pjrt_upload(plugin, r, MXU_PJRT_F32, &scale, 1, &one, &a[5]));
      CHECK_OK(
          mxu_pjrt_upload(plugin, r, MXU_PJRT_S32, &steps, 0, NULL, &a[6]));
    }
    CHECK_OK(mxu_pjrt_execute(plugin, program, nargs, args, outs));
    float sums[5] = {0, 0, 0, 0, 0};
    for (int k = 0; k < 5; k++)
      CHECK_OK(
          mxu_pjrt_download(plugin, outs[state + k], &sums[k], sizeof(float)));
    CHECK(sums[2] == ROWS && sums[4] == ROWS && sums[0] == sums[1]);
    loss[t - 1] = sums[0] / ROWS;
    accuracy[t - 1] = sums[3] / ROWS;
    /* The new state is the next step's: the old buffers go. */
    for (int r = 0; r < REPLICAS; r++) {
      for (int i = 0; i < nargs; i++)
        mxu_pjrt_buffer_free(plugin, args[r * nargs + i]);
      for (int i = 0; i < state; i++)
        args[r * nargs + i] = outs[r * outputs + i];
      for (int i = state; i < outputs; i++)
        mxu_pjrt_buffer_free(plugin, outs[r * outputs + i]);
    }
  }
  /* Both devices hold the same weights, bit for bit. */
  for (int i = 0; i < count; i++) {
    const mxu_param *p = &m->params[i];
    size_t bytes = (size_t)p->count * sizeof(float);
    float *other = malloc(bytes);
    CHECK_OK(mxu_pjrt_download(plugin, args[i], m->weights + p->offset, bytes));
    CHECK_OK(mxu_pjrt_download(plugin, args[nargs + i], other, bytes));
    CHECK_MSG(memcmp(other, m->weights + p->offset, bytes) == 0,
              "%s: the replicas' weights differ", p->name);
    free(other);
  }
  for (int r = 0; r < REPLICAS; r++)
    for (int i = 0; i < state; i++)
      mxu_pjrt_buffer_free(plugin, args[r * nargs + i]);
  free(args), free(outs), free(zeros);
  mxu_pjrt_program_free(plugin, program);
}

/* The test's samples as a data set. */
static mxu_dataset *samples(float *x, int32_t *labels) {
  data(x, labels);
  int64_t dims[3] = {SIDE, SIDE, 2};
  mxu_dataset *set = NULL;
  if (positions) { /* each position's class of 5: one-hot or an index */
    int sparse = loss_kind == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
    float t[ROWS * CLASSES] = {0};
    for (int r = 0; r < ROWS; r++) {
      int a = labels[r] % 5, b = r % 5;
      if (sparse)
        t[r * 2] = (float)a, t[r * 2 + 1] = (float)b;
      else
        t[r * CLASSES + a] = t[r * CLASSES + 5 + b] = 1.0f;
    }
    CHECK_OK(mxu_dataset_from_targets(x, t, ROWS, mxu_shape_make(3, dims),
                                      sparse ? 2 : CLASSES, &set));
    return set;
  }
  CHECK_OK(mxu_dataset_from_arrays(x, labels, ROWS, mxu_shape_make(3, dims),
                                   CLASSES, &set));
  return set;
}

/* The largest relative difference of two models' weights and state. */
static double apart(const mxu_model *a, const mxu_model *b) {
  double worst = 0;
  for (int i = 0; i < a->trainable_count; i++)
    worst = fmax(worst, fabs(a->weights[i] - b->weights[i]) /
                            fmax(1e-2, fabs(a->weights[i])));
  for (int i = 0; i < a->state_count; i++)
    worst = fmax(worst, fabs(a->state[i] - b->state[i]) /
                            fmax(1e-2, fabs(a->state[i])));
  return worst;
}

static void same_steps(mxu_optimizer_config o, const char *what) {
  float x[ROWS * SIDE * SIDE * 2];
  int32_t labels[ROWS];
  mxu_dataset *set = samples(x, labels);
  mxu_model *ref = small_net(o, MXU_BACKEND_CPU_REF);
  mxu_model *dev = small_net(o, MXU_BACKEND_CPU_REF);
  if (!ref || !dev) return;
  memcpy(dev->weights, ref->weights,
         (size_t)ref->trainable_count * sizeof(float));
  mxu_fit_config fc = mxu_fit_defaults();
  fc.epochs = STEPS;
  fc.batch_size = ROWS;
  fc.verbose = 0;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(ref, set, &fc, &history));
  double loss[STEPS] = {0}, accuracy[STEPS] = {0};
  run_program(dev, x, labels, loss, accuracy);
  double worst = apart(ref, dev);
  CHECK_MSG(worst < 3e-5, "%s: weights after %d steps off by %.3g", what, STEPS,
            worst);
  for (int t = 0; history && t < STEPS; t++) {
    CHECK_MSG(fabs(history->epochs[t].loss - loss[t]) < 1e-5,
              "%s: step %d loss %.7f, cpu_ref %.7f", what, t + 1, loss[t],
              history->epochs[t].loss);
    CHECK_MSG(history->epochs[t].accuracy == accuracy[t],
              "%s: step %d accuracy %g, cpu_ref %g", what, t + 1, accuracy[t],
              history->epochs[t].accuracy);
  }
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

/* dev from ref's weights, then both fit `epochs` epochs of two shuffled
 * steps. */
static void fit_both(mxu_model *ref, mxu_model *dev, const mxu_dataset *set,
                     int epochs, const mxu_history **a, const mxu_history **b) {
  memcpy(dev->weights, ref->weights,
         (size_t)ref->trainable_count * sizeof(float));
  mxu_fit_config fc = mxu_fit_defaults();
  fc.epochs = epochs;
  fc.batch_size = ROWS / 2;
  fc.verbose = 0;
  CHECK_OK(mxu_fit(ref, set, &fc, a));
  CHECK_OK(mxu_fit(dev, set, &fc, b));
}

/* fit on --backend pjrt: the same epochs as on cpu_ref; evaluate and
 * predict on the devices give cpu_ref's. */
static void fit_on_devices(void) {
  float x[ROWS * SIDE * SIDE * 2];
  int32_t labels[ROWS];
  mxu_dataset *set = samples(x, labels);
  mxu_optimizer_config o = mxu_adam(0.01f);
  mxu_model *ref = small_net(o, MXU_BACKEND_CPU_REF);
  mxu_model *dev = small_net(o, MXU_BACKEND_PJRT);
  if (!ref || !dev) return;
  CHECK(dev->device != NULL && ref->device == NULL);
  const mxu_history *a = NULL, *b = NULL;
  fit_both(ref, dev, set, 4, &a, &b);
  /* BatchNormalization's moving statistics too (the state). */
  double worst = apart(ref, dev);
  CHECK_MSG(worst < 3e-5 && dev->iterations == 8,
            "fit on pjrt: weights off by %.3g after %lld steps", worst,
            (long long)dev->iterations);
  for (int e = 0; a && b && e < 4; e++)
    CHECK_MSG(fabs(a->epochs[e].loss - b->epochs[e].loss) < 1e-5,
              "epoch %d: loss %.7f on pjrt, %.7f on cpu_ref", e + 1,
              b->epochs[e].loss, a->epochs[e].loss);
  double loss_a = 0, loss_b = 0;
  CHECK_OK(mxu_evaluate(ref, set, ROWS, &loss_a, NULL));
  CHECK_OK(mxu_evaluate(dev, set, ROWS, &loss_b, NULL));
  CHECK_MSG(fabs(loss_a - loss_b) < 1e-5, "evaluate: %.7f, %.7f", loss_b,
            loss_a);
  /* predict: the devices' program, 5 rows (a partial batch). */
  float pa[5 * CLASSES], pb[5 * CLASSES];
  CHECK_OK(mxu_predict(ref, x, 5, pa));
  CHECK_OK(mxu_predict(dev, x, 5, pb));
  for (int i = 0; i < 5 * CLASSES; i++)
    CHECK_MSG(fabsf(pa[i] - pb[i]) < 1e-5f, "predict %d: %g on pjrt, %g", i,
              pb[i], pa[i]);
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

/* A model of two inputs, a (4) and b (3), each through a Dense of its own
 * to a sum and a softmax: on the devices, 3 steps an execution, shuffled,
 * as on cpu_ref; evaluate and predict too. */
static mxu_model *two_inputs_net(mxu_backend_kind backend) {
  mxu_model *m = mxu_functional("two_inputs");
  int64_t da = 4, db = 3;
  mxu_tensor_id a = mxu_input(m, "a", mxu_shape_make(1, &da));
  mxu_tensor_id b = mxu_input(m, "b", mxu_shape_make(1, &db));
  mxu_dense_config hidden = mxu_dense_defaults(6);
  hidden.activation = MXU_TANH;
  mxu_tensor_id sum = mxu_add(m, "sum", mxu_apply_dense(m, &hidden, a),
                              mxu_apply_dense(m, &hidden, b));
  mxu_dense_config out = mxu_dense_defaults(CLASSES);
  out.activation = MXU_SOFTMAX;
  mxu_tensor_id y = mxu_apply_dense(m, &out, sum);
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  per_execution = 3;
  mxu_compile_config cc = compile_config(mxu_adam(0.01f), backend);
  per_execution = 0;
  cc.batch_size = 4;
  cc.seed = 7;
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

static void several_inputs(void) {
  enum { N = 24 };
  float xa[N * 4], xb[N * 3];
  int32_t labels[N];
  for (int i = 0; i < N * 4; i++) xa[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < N * 3; i++) xb[i] = (float)((i * 13) % 7) / 3.0f - 1.0f;
  for (int i = 0; i < N; i++) labels[i] = (i * 7) % CLASSES;
  int64_t da = 4, db = 3;
  mxu_dataset *set = NULL;
  CHECK_OK(mxu_dataset_from_arrays(xa, labels, N, mxu_shape_make(1, &da),
                                   CLASSES, &set));
  if (set) CHECK_OK(mxu_dataset_add_input(set, xb, mxu_shape_make(1, &db)));
  mxu_model *ref = two_inputs_net(MXU_BACKEND_CPU_REF);
  mxu_model *dev = two_inputs_net(MXU_BACKEND_PJRT);
  if (!set || !ref || !dev) {
    mxu_dataset_free(set), mxu_model_free(ref), mxu_model_free(dev);
    return;
  }
  memcpy(dev->weights, ref->weights,
         (size_t)ref->trainable_count * sizeof(float));
  mxu_fit_config fc = mxu_fit_defaults();
  fc.epochs = 3;
  fc.batch_size = 4;
  fc.seed = 5;
  fc.verbose = 0;
  const mxu_history *a = NULL, *b = NULL;
  CHECK_OK(mxu_fit(ref, set, &fc, &a));
  CHECK_OK(mxu_fit(dev, set, &fc, &b));
  double worst = apart(ref, dev);
  CHECK_MSG(worst < 3e-5 && dev->iterations == 18,
            "two inputs on pjrt: weights off by %.3g after %lld steps", worst,
            (long long)dev->iterations);
  for (int e = 0; a && b && e < 3; e++)
    CHECK_MSG(fabs(a->epochs[e].loss - b->epochs[e].loss) < 1e-5,
              "two inputs, epoch %d: loss %.7f on pjrt, %.7f", e + 1,
              b->epochs[e].loss, a->epochs[e].loss);
  double loss_a = 0, loss_b = 0;
  CHECK_OK(mxu_evaluate(ref, set, 0, &loss_a, NULL));
  CHECK_OK(mxu_evaluate(dev, set, 0, &loss_b, NULL));
  CHECK_MSG(fabs(loss_a - loss_b) < 1e-5, "two inputs, evaluate: %.7f, %.7f",
            loss_b, loss_a);
  const float *inputs[2] = {xa, xb};
  float pa[5 * CLASSES], pb[5 * CLASSES];
  float *outs_a = pa, *outs_b = pb;
  CHECK_OK(mxu_predict_outputs(ref, inputs, 5, &outs_a));
  CHECK_OK(mxu_predict_outputs(dev, inputs, 5, &outs_b));
  for (int i = 0; i < 5 * CLASSES; i++)
    CHECK_MSG(fabsf(pa[i] - pb[i]) < 1e-5f, "two inputs, predict %d: %g, %g", i,
              pb[i], pa[i]);
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

/* A fit of 4 steps an epoch over 2 replicas of one row, unshuffled, k
 * steps an execution; fails when the data has a row that is not finite.
 * The model's weights and the device's counts are the caller's. */
static mxu_status fit_k(mxu_model **out, const mxu_model *from, int k,
                        const mxu_dataset *set, int checkpoint_every,
                        const char *dir, const mxu_history **history) {
  per_execution = k;
  mxu_model *m = small_net(mxu_adam(0.01f), MXU_BACKEND_PJRT);
  per_execution = 0;
  *out = m;
  if (!m) return MXU_ERR_ARG;
  memcpy(m->weights, from->weights,
         (size_t)from->trainable_count * sizeof(float));
  mxu_fit_config fc = mxu_fit_defaults();
  fc.epochs = 3;
  fc.batch_size = 2;
  fc.shuffle = 0;
  fc.verbose = 0;
  fc.checkpoint_every = checkpoint_every;
  fc.checkpoint_dir = dir;
  return mxu_fit(m, set, &fc, history);
}

static void same_weights(const mxu_model *a, const mxu_model *b,
                         const char *what) {
  CHECK_MSG(a->iterations == b->iterations &&
                memcmp(a->weights, b->weights,
                       (size_t)a->trainable_count * sizeof(float)) == 0 &&
                memcmp(a->state, b->state,
                       (size_t)a->state_count * sizeof(float)) == 0,
            "%s: not the weights of one step at a time (%lld, %lld steps)",
            what, (long long)a->iterations, (long long)b->iterations);
}

/* steps_per_execution K: K steps an execution on the devices, the same
 * weights and losses bit for bit as one at a time; executions end at
 * the epoch's end and where a checkpoint is due; a step whose loss is not
 * finite stops training with the steps before it applied. */
static void per_execution_loop(void) {
  float x[ROWS * SIDE * SIDE * 2];
  int32_t labels[ROWS];
  mxu_dataset *set = samples(x, labels);
  mxu_model *init = small_net(mxu_adam(0.01f), MXU_BACKEND_CPU_REF);
  mxu_model *one = NULL, *three = NULL, *clipped = NULL;
  const mxu_history *h1 = NULL, *h3 = NULL;
  CHECK_OK(fit_k(&one, init, 1, set, 0, NULL, &h1));
  CHECK_OK(fit_k(&three, init, 3, set, 0, NULL, &h3));
  int64_t executions = 0, steps = 0;
  if (one && three && h1 && h3) {
    same_weights(one, three, "3 steps an execution");
    for (int e = 0; e < 3; e++)
      CHECK_MSG(h1->epochs[e].loss == h3->epochs[e].loss &&
                    h1->epochs[e].accuracy == h3->epochs[e].accuracy,
                "epoch %d: loss %.9g, 3 steps an execution %.9g", e + 1,
                h1->epochs[e].loss, h3->epochs[e].loss);
    mxu_device_counts(one, &executions, &steps);
    CHECK(executions == 12 && steps == 12);
    /* 3 + 1 steps an epoch: the epoch's end ends an execution. */
    mxu_device_counts(three, &executions, &steps);
    CHECK_MSG(executions == 6 && steps == 12, "%lld executions, %lld steps",
              (long long)executions, (long long)steps);
  }
  /* A checkpoint every 2 steps cuts executions of 4 in two. */
  char dir[] = "/tmp/mxu_pjrt_stepXXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  CHECK_OK(fit_k(&clipped, init, 4, set, 2, dir, NULL));
  if (one && clipped) {
    same_weights(one, clipped, "4 steps an execution, checkpoints every 2");
    mxu_device_counts(clipped, &executions, &steps);
    CHECK_MSG(executions == 6 && steps == 12, "%lld executions, %lld steps",
              (long long)executions, (long long)steps);
  }
  char command[64];
  snprintf(command, sizeof command, "rm -rf %s", dir);
  CHECK(system(command) == 0);
  mxu_model_free(one), mxu_model_free(three), mxu_model_free(clipped);
  /* Step 3's rows not finite: the loss there is NaN; the two steps before
   * it are applied, in one execution of 3 as one at a time. */
  for (int i = 0; i < SIDE * SIDE * 2; i++)
    x[4 * SIDE * SIDE * 2 + i] = INFINITY;
  mxu_dataset_free(set);
  int64_t dims[3] = {SIDE, SIDE, 2};
  CHECK_OK(mxu_dataset_from_arrays(x, labels, ROWS, mxu_shape_make(3, dims),
                                   CLASSES, &set));
  dense_only = 1;
  mxu_model_free(init);
  init = small_net(mxu_adam(0.01f), MXU_BACKEND_CPU_REF);
  EXPECT_FAIL(fit_k(&one, init, 1, set, 0, NULL, NULL), MXU_ERR_NUMERIC,
              "epoch 1, step 3: the loss is NaN");
  EXPECT_FAIL(fit_k(&three, init, 3, set, 0, NULL, NULL), MXU_ERR_NUMERIC,
              "epoch 1, step 3: the loss is NaN");
  dense_only = 0;
  if (one && three) {
    CHECK(three->iterations == 2);
    same_weights(one, three, "a NaN loss in an execution of 3");
  }
  mxu_model_free(one), mxu_model_free(three), mxu_model_free(init);
  mxu_dataset_free(set);
}

/* Every optimizer and its options on the devices against cpu_ref's
 * update: 6 steps (3 epochs of 2), weights, slots and losses. */
static void optimizer_case(mxu_optimizer_config o, const char *what,
                           double tolerance) {
  float x[ROWS * SIDE * SIDE * 2];
  int32_t labels[ROWS];
  mxu_dataset *set = samples(x, labels);
  mxu_model *ref = small_net(o, MXU_BACKEND_CPU_REF);
  mxu_model *dev = small_net(o, MXU_BACKEND_PJRT);
  if (!ref || !dev) {
    CHECK_MSG(0, "%s: %s", what, mxu_errmsg());
    mxu_model_free(ref), mxu_model_free(dev), mxu_dataset_free(set);
    return;
  }
  const mxu_history *a = NULL, *b = NULL;
  fit_both(ref, dev, set, 3, &a, &b);
  CHECK_MSG(apart(ref, dev) < tolerance, "%s: weights off by %.3g", what,
            apart(ref, dev));
  double slots = 0;
  for (int k = 0; k <= MXU_SLOTS; k++) {
    const float *p = mxu_slot_buffer(ref, k), *q = mxu_slot_buffer(dev, k);
    for (int64_t i = 0; p && q && i < ref->trainable_count; i++)
      slots = fmax(slots, fabs(p[i] - q[i]) / fmax(1e-2, fabs(p[i])));
  }
  CHECK_MSG(slots < tolerance, "%s: slots off by %.3g", what, slots);
  for (int e = 0; a && b && e < 3; e++)
    CHECK_MSG(fabs(a->epochs[e].loss - b->epochs[e].loss) <
                  tolerance * fmax(1.0, fabs(a->epochs[e].loss)),
              "%s: epoch %d loss %.7f on pjrt, %.7f on cpu_ref", what, e + 1,
              b->epochs[e].loss, a->epochs[e].loss);
  for (int e = 0; a && b && e < 3; e++)
    CHECK_MSG(fabs(a->epochs[e].accuracy - b->epochs[e].accuracy) < 1e-5,
              "%s: epoch %d metric %.7f on pjrt, %.7f on cpu_ref", what, e + 1,
              b->epochs[e].accuracy, a->epochs[e].accuracy);
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

static mxu_optimizer_config named(const char *name) {
  mxu_optimizer_config o = mxu_adam(1e-3f);
  CHECK_OK(mxu_optimizer_from_name(name, &o));
  o.learning_rate = 0.01f;
  return o;
}

static void optimizers(void) {
  static const char *const names[] = {"adam",   "sgd",   "rmsprop",  "adagrad",
                                      "adamax", "nadam", "adadelta", "adamw"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    optimizer_case(named(names[i]), names[i], 3e-5);
  /* Lion's step is the sign of its momentum: a value near 0 may take
   * either sign in either float order; a looser bound. */
  optimizer_case(named("lion"), "lion", 1e-3);
  mxu_optimizer_config o = named("adam");
  o.amsgrad = 1;
  optimizer_case(o, "adam, amsgrad", 3e-5);
  o = named("rmsprop");
  o.centered = 1, o.momentum = 0.5f;
  optimizer_case(o, "rmsprop, centered, momentum", 3e-5);
  o = named("adamax");
  o.clipvalue = 0.002f;
  optimizer_case(o, "adamax, clipvalue", 3e-5);
  o = named("sgd");
  o.momentum = 0.9f, o.clipnorm = 0.05f, o.weight_decay = 0.1f;
  optimizer_case(o, "sgd, clipnorm, weight decay", 3e-5);
  o = named("adam");
  o.global_clipnorm = 0.1f, o.use_ema = 1, o.ema_momentum = 0.5f;
  o.ema_overwrite_frequency = 2;
  optimizer_case(o, "adam, global_clipnorm, use_ema", 3e-5);
  o.schedule = (mxu_lr_decay){.kind = MXU_EXPONENTIAL_DECAY,
                              .decay_steps = 2,
                              .decay_rate = 0.5f,
                              .initial_learning_rate = 0.02f};
  penalized = smoothed = 1;
  optimizer_case(o, "a schedule, L1L2, max_norm, non_neg, label smoothing",
                 3e-5);
  penalized = smoothed = 0;
}

/* Every loss and metric on the devices against cpu_ref's (the softmax
 * output and one-hot targets serve them all). */
static void losses(void) {
  static const struct {
    mxu_loss loss;
    const char *metric;
    int logits;
  } cases[] = {
      {MXU_SPARSE_CATEGORICAL_CROSSENTROPY, "sparse_top_k_categorical_accuracy",
       0},
      {MXU_CATEGORICAL_CROSSENTROPY, "top_k_categorical_accuracy", 0},
      /* the softmax's output taken as the logits */
      {MXU_CATEGORICAL_CROSSENTROPY, "accuracy", 1},
      {MXU_BINARY_CROSSENTROPY, "binary_accuracy", 0},
      {MXU_BINARY_CROSSENTROPY, "accuracy", 1},
      {MXU_MEAN_SQUARED_ERROR, "mae", 0},
      {MXU_MEAN_ABSOLUTE_ERROR, "mse", 0},
      {MXU_HUBER, "categorical_accuracy", 0},
      {MXU_KL_DIVERGENCE, "accuracy", 0},
      /* MAPE of these one-hot targets divides by 1e-7: tests/golden/metrics
       * has it on targets it suits. */
      {MXU_MEAN_SQUARED_LOGARITHMIC_ERROR, "logcosh", 0},
      {MXU_LOG_COSH, "poisson", 0},
      {MXU_POISSON, "msle", 0},
      {MXU_HINGE, "squared_hinge", 0},
      {MXU_SQUARED_HINGE, "hinge", 0},
      {MXU_CATEGORICAL_HINGE, "cosine_similarity", 0},
      {MXU_COSINE_SIMILARITY, "categorical_hinge", 0},
      {MXU_BINARY_FOCAL_CROSSENTROPY, "binary_accuracy", 0},
      {MXU_BINARY_FOCAL_CROSSENTROPY, "binary_accuracy", 1},
      {MXU_CATEGORICAL_FOCAL_CROSSENTROPY, "accuracy", 0},
      {MXU_CATEGORICAL_FOCAL_CROSSENTROPY, "accuracy", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    loss_kind = cases[i].loss;
    metric_name = cases[i].metric;
    logits = cases[i].logits;
    char what[96];
    snprintf(what, sizeof what, "%s%s, %s", mxu_loss_name(loss_kind),
             logits ? " from logits" : "", metric_name);
    optimizer_case(named("adam"), what, 3e-5);
  }
  logits = 0;
  /* Over two positions: the categorical targets' halves. */
  positions = 1;
  loss_kind = MXU_CATEGORICAL_CROSSENTROPY;
  optimizer_case(named("adam"), "categorical_crossentropy over 2 positions",
                 3e-5);
  metric_name = "mse";
  optimizer_case(named("sgd"), "categorical_crossentropy over 2 positions, mse",
                 3e-5);
  /* The vectors' losses and metrics of each position's. */
  loss_kind = MXU_COSINE_SIMILARITY;
  metric_name = "categorical_hinge";
  optimizer_case(named("adam"), "cosine_similarity over 2 positions", 3e-5);
  loss_kind = MXU_CATEGORICAL_FOCAL_CROSSENTROPY;
  metric_name = "cosine_similarity";
  optimizer_case(named("adam"),
                 "categorical_focal_crossentropy over 2 positions", 3e-5);
  loss_kind = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  metric_name = "accuracy";
  optimizer_case(named("adam"), "sparse labels over 2 positions", 3e-5);
  positions = 0;
  loss_kind = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  metric_name = "accuracy";
  logits = 0;
}

/* mixed_bfloat16: the devices convolve and multiply in bfloat16 (the
 * program converts around them; the weights stay float32), so its losses
 * follow the float32 oracle's within bfloat16's precision but not to the
 * bit. */
static void mixed_bfloat16(void) {
  float x[ROWS * SIDE * SIDE * 2];
  int32_t labels[ROWS];
  mxu_dataset *set = samples(x, labels);
  mxu_model *ref = small_net(mxu_adam(0.01f), MXU_BACKEND_CPU_REF);
  precision = MXU_MIXED_BFLOAT16;
  mxu_model *dev = small_net(mxu_adam(0.01f), MXU_BACKEND_PJRT);
  precision = MXU_PRECISION_FLOAT32;
  char *text = NULL;
  if (dev)
    CHECK_OK(mxu_model_train_program(dev, ROWS / REPLICAS, REPLICAS, 1, &text));
  CHECK(text && strstr(text, "bf16>") != NULL);
  free(text);
  const mxu_history *a = NULL, *b = NULL;
  if (ref && dev) fit_both(ref, dev, set, 3, &a, &b);
  int same = 1;
  for (int e = 0; a && b && e < 3; e++) {
    CHECK_MSG(fabs(a->epochs[e].loss - b->epochs[e].loss) <
                  2e-2 * a->epochs[e].loss,
              "mixed_bfloat16: epoch %d loss %.6f, float32 %.6f", e + 1,
              b->epochs[e].loss, a->epochs[e].loss);
    same &= a->epochs[e].loss == b->epochs[e].loss;
  }
  CHECK_MSG(a && b && !same, "mixed_bfloat16 gave float32's losses to the "
                             "bit");
  mxu_dataset_free(set);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

/* What the program cannot emit yet is refused, naming it. */
static void refusal(int layer, const char *optimizer, const char *needle) {
  mxu_model *m = mxu_sequential("refused");
  int64_t dims[3] = {6, 6, 2};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.synchronized = 1;
  if (layer) CHECK_OK(mxu_add_batch_normalization(m, &bn));
  CHECK_OK(mxu_add_flatten(m, NULL));
  mxu_dense_config d = mxu_dense_defaults(3);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &d));
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = 2;
  cc.backend = MXU_BACKEND_CPU_REF;
  CHECK_OK(mxu_optimizer_from_name(optimizer, &cc.optimizer));
  CHECK_OK(mxu_compile(m, &cc));
  char *text = (char *)1;
  EXPECT_FAIL(mxu_model_train_program(m, 2, 1, 1, &text), MXU_ERR_UNSUPPORTED,
              needle);
  CHECK(text == NULL);
  /* compile on pjrt says the same. */
  cc.backend = MXU_BACKEND_PJRT;
  EXPECT_FAIL(mxu_compile(m, &cc), MXU_ERR_UNSUPPORTED, needle);
  mxu_model_free(m);
}

static void refusals(void) {
  refusal(1, "adam", "synchronized BatchNormalization is not emitted yet");
}

int main(void) {
  CHECK_OK(mxu_pjrt_open(mxu_pjrt_plugin_path(NULL), REPLICAS, &plugin));
  if (!plugin) return check_report("test_pjrt_step");
  same_steps(mxu_adam(0.01f), "adam");
  same_steps(mxu_sgd(0.1f, 0.9f, 1), "sgd, nesterov momentum");
  fit_on_devices();
  with_bn_dropout = 1; /* the host's dropout masks, per-replica statistics */
  fit_on_devices();
  with_bn_dropout = 0;
  per_execution_loop();
  several_inputs();
  optimizers();
  losses();
  mixed_bfloat16();
  refusals();
  mxu_pjrt_close(plugin);
  return check_report("test_pjrt_step");
}
