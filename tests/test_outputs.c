/* test_outputs.c — models of several outputs in fit, evaluate and the
 * logs: a loss for each output, Keras' loss_weights and each output's
 * metric, against tf.keras (tests/golden/outputs, make_outputs.py), finite
 * differences of the weighted total, replicas, callbacks and refusals. */
#include "check.h"
#include "check_h5.h"
#include "data/data.h"
#include "model/model.h"
#include "train/callbacks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR "tests/golden/outputs/"
enum { ROWS = 8, FEATURES = 6 };

/* The golden batch: x, each output's targets, Keras' losses and metrics
 * of the step and its predictions before and after it. */
typedef struct golden {
  float x[ROWS * FEATURES];
  int32_t cls[ROWS];
  float reg[ROWS * 2], flag[ROWS];
  double loss, losses[3], metrics[3];
  float before[3][ROWS * 3], after[3][ROWS * 3];
} golden;

static const int widths[3] = {3, 2, 1};

static void read_golden(golden *g) {
  hid_t file = H5Fopen(DIR "batch.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0);
  if (file < 0) return;
  check_h5_read(file, "x", H5T_NATIVE_FLOAT, g->x);
  check_h5_read(file, "y_0", H5T_NATIVE_INT32, g->cls);
  check_h5_read(file, "y_1", H5T_NATIVE_FLOAT, g->reg);
  check_h5_read(file, "y_2", H5T_NATIVE_FLOAT, g->flag);
  check_h5_read(file, "loss", H5T_NATIVE_DOUBLE, &g->loss);
  for (int j = 0; j < 3; j++) {
    char name[32];
    snprintf(name, sizeof name, "loss_%d", j);
    check_h5_read(file, name, H5T_NATIVE_DOUBLE, &g->losses[j]);
    snprintf(name, sizeof name, "metric_%d", j);
    check_h5_read(file, name, H5T_NATIVE_DOUBLE, &g->metrics[j]);
    snprintf(name, sizeof name, "predict_before_%d", j);
    check_h5_read(file, name, H5T_NATIVE_FLOAT, g->before[j]);
    snprintf(name, sizeof name, "predict_after_%d", j);
    check_h5_read(file, name, H5T_NATIVE_FLOAT, g->after[j]);
  }
  H5Fclose(file);
}

/* make_outputs.py's compile: sparse CE with accuracy, mse (weight 0.5)
 * with mae, binary CE from logits with label smoothing 0.1 (weight 2) with
 * accuracy; SGD(0.1). */
static mxu_compile_config keras_compile(mxu_backend_kind backend) {
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = mxu_sgd(0.1f, 0.0f, 0);
  c.batch_size = ROWS;
  c.backend = backend;
  c.output_count = 3;
  for (int j = 0; j < 3; j++) c.outputs[j] = mxu_output_loss_defaults();
  c.outputs[0].metrics[0] = "accuracy";
  c.outputs[1].loss = MXU_MEAN_SQUARED_ERROR;
  c.outputs[1].weight = 0.5f;
  c.outputs[1].metrics[0] = "mae";
  c.outputs[2].loss = MXU_BINARY_CROSSENTROPY;
  c.outputs[2].from_logits = 1;
  c.outputs[2].label_smoothing = 0.1f;
  c.outputs[2].weight = 2.0f;
  c.outputs[2].metrics[0] = "accuracy";
  return c;
}

static mxu_model *load(const char *json, const mxu_compile_config *c,
                       const char *weights) {
  mxu_model *model = NULL;
  CHECK_OK(mxu_model_load_json(json, &model, NULL, NULL));
  if (!model) return NULL;
  CHECK_OK(mxu_compile(model, c));
  if (weights) CHECK_OK(mxu_load_weights(model, weights));
  return model;
}

static mxu_dataset *golden_data(const golden *g) {
  mxu_dataset *d = NULL;
  CHECK_OK(mxu_dataset_from_arrays(
      g->x, g->cls, ROWS, mxu_shape_make(1, (int64_t[]){FEATURES}), 3, &d));
  if (!d) return NULL;
  CHECK_OK(mxu_dataset_add_output_targets(d, g->reg, 2));
  CHECK_OK(mxu_dataset_add_output_targets(d, g->flag, 1));
  return d;
}

static double worst_error(const float *got, const float *want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
    if (e > worst) worst = e;
  }
  return worst;
}

/* What is refused, and how. */
static void expect_fail(mxu_status s, mxu_status want, const char *text) {
  CHECK_MSG(s == want && strstr(mxu_errmsg(), text),
            "status %d, message: %s (wanted %d, '%s')", (int)s, mxu_errmsg(),
            (int)want, text);
}

static void expect_predictions(mxu_model *m, const golden *g,
                               float want[3][ROWS * 3], double tolerance,
                               const char *what) {
  float out[3][ROWS * 3];
  float *outs[3] = {out[0], out[1], out[2]};
  const float *in = g->x;
  CHECK_OK(mxu_predict_outputs(m, &in, ROWS, outs));
  for (int j = 0; j < 3; j++) {
    double e = worst_error(out[j], want[j], ROWS * widths[j]);
    CHECK_MSG(e <= tolerance, "%s: output %d off Keras' by %.3g", what, j, e);
  }
}

/* One step from Keras' initial weights: the total loss, each output's
 * loss and metric, every weight and every prediction as tf.keras. */
static void golden_step(const char *json, mxu_backend_kind backend) {
  static golden g;
  read_golden(&g);
  mxu_compile_config c = keras_compile(backend);
  mxu_model *m = load(json, &c, DIR "initial.h5");
  mxu_model *keras = load(json, &c, DIR "after_step.h5");
  mxu_dataset *data = golden_data(&g);
  if (!m || !keras || !data) goto done;
  double tolerance = backend == MXU_BACKEND_CPU_REF ? 1e-6 : 1e-5;
  expect_predictions(m, &g, g.before, tolerance, json);
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = ROWS;
  fit.shuffle = 0;
  fit.verbose = 0;
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(m, data, &fit, &h));
  if (!h || h->count != 1) goto done;
  const mxu_epoch_log *log = &h->epochs[0];
  CHECK_MSG(fabs(log->loss - g.loss) <= tolerance * g.loss,
            "%s: loss %.9g, Keras %.9g", json, log->loss, g.loss);
  CHECK(isnan(log->accuracy) && log->output_count == 3);
  static const char *names[3] = {"cls", "reg", "flag"};
  static const char *metrics[3] = {"accuracy", "mae", "accuracy"};
  for (int j = 0; j < 3; j++) {
    const mxu_output_log *o = &log->outputs[j];
    CHECK(strcmp(o->name, names[j]) == 0 &&
          strcmp(o->metrics[0], metrics[j]) == 0);
    CHECK_MSG(fabs(o->loss - g.losses[j]) <= tolerance * g.losses[j],
              "%s: %s_loss %.9g, Keras %.9g", json, names[j], o->loss,
              g.losses[j]);
    CHECK_MSG(fabs(o->values[0] - g.metrics[j]) <= 1e-6,
              "%s: %s_%s %.9g, Keras %.9g", json, names[j], metrics[j],
              o->values[0], g.metrics[j]);
  }
  CHECK(m->trainable_count == keras->trainable_count);
  if (m->trainable_count == keras->trainable_count) {
    double e = worst_error(m->weights, keras->weights, m->trainable_count);
    CHECK_MSG(e <= tolerance, "%s: weights off Keras' by %.3g", json, e);
  }
  expect_predictions(m, &g, g.after, tolerance, json);
done:
  mxu_dataset_free(data);
  mxu_model_free(m);
  mxu_model_free(keras);
}

/* ---- a net of three heads, built here --------------------------------
 * x (5) -> Dense(6, tanh) trunk; a = Dense(4, softmax)(trunk), sparse CE;
 * b = Dense(2)(Concatenate(trunk, a)) mse, weight 0.7: a is an output that
 * another layer reads, so its softmax is not fused into its loss and its
 * gradient sums both; c = Dense(1, sigmoid)(trunk) binary CE with label
 * smoothing 0.2, weight 1.5. */
enum { N = 16, IN = 5 };

/* SGD of `rate` over batches of `batch`; three outputs: sparse CE with
 * accuracy, mse of weight `weight`, and a third sparse CE without a metric
 * (each net changes what it needs). */
static mxu_compile_config three_heads(mxu_backend_kind backend, int batch,
                                      float rate, float weight) {
  mxu_compile_config cc = mxu_compile_defaults();
  cc.optimizer = mxu_sgd(rate, 0.0f, 0);
  cc.batch_size = batch;
  cc.backend = backend;
  cc.output_count = 3;
  for (int j = 0; j < 3; j++) cc.outputs[j] = mxu_output_loss_defaults();
  cc.outputs[0].metrics[0] = "accuracy";
  cc.outputs[1].loss = MXU_MEAN_SQUARED_ERROR;
  cc.outputs[1].weight = weight;
  return cc;
}

static mxu_model *heads_model(mxu_backend_kind backend, int replicas,
                              int per_execution, float rate) {
  mxu_model *m = mxu_functional("heads");
  int64_t d = IN;
  mxu_tensor_id x = mxu_input(m, "x", mxu_shape_make(1, &d));
  mxu_dense_config dense = mxu_dense_defaults(6);
  dense.activation = MXU_TANH;
  dense.name = "trunk";
  mxu_tensor_id trunk = mxu_apply_dense(m, &dense, x);
  dense = mxu_dense_defaults(4);
  dense.activation = MXU_SOFTMAX;
  dense.name = "a";
  mxu_tensor_id a = mxu_apply_dense(m, &dense, trunk);
  mxu_tensor_id both[2] = {trunk, a};
  mxu_tensor_id joined =
      mxu_merge(m, MXU_MERGE_CONCATENATE, "joined", both, 2, -1);
  dense = mxu_dense_defaults(2);
  dense.name = "b";
  mxu_tensor_id b = mxu_apply_dense(m, &dense, joined);
  dense = mxu_dense_defaults(1);
  dense.activation = MXU_SIGMOID;
  dense.name = "c";
  mxu_tensor_id c = mxu_apply_dense(m, &dense, trunk);
  mxu_tensor_id outs[3] = {a, b, c};
  CHECK_OK(mxu_model_outputs(m, outs, 3));
  mxu_compile_config cc = three_heads(backend, N, rate, 0.7f);
  cc.replicas = replicas;
  cc.steps_per_execution = per_execution;
  cc.seed = 11;
  cc.outputs[1].metrics[0] = "mse";
  cc.outputs[2].loss = MXU_BINARY_CROSSENTROPY;
  cc.outputs[2].label_smoothing = 0.2f;
  cc.outputs[2].weight = 1.5f;
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

/* count samples: x uniform in [-1, 1]; a's class the argmax of x's first
 * four; b's targets x0 - x1 and x2 x3; c's 1 when x4 > 0. */
static mxu_dataset *heads_data(int count, uint64_t seed, int outputs) {
  float *x = malloc((size_t)count * IN * sizeof *x);
  float *b = malloc((size_t)count * 2 * sizeof *b);
  float *c = malloc((size_t)count * sizeof *c);
  int32_t *a = malloc((size_t)count * sizeof *a);
  mxu_dataset *data = NULL;
  if (!x || !b || !c || !a) goto done;
  mxu_rng rng = mxu_rng_make(seed, 3, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, (size_t)count * IN);
  for (int i = 0; i < count; i++) {
    float *v = x + i * IN;
    for (int k = 0; k < IN; k++) v[k] = 2.0f * v[k] - 1.0f;
    a[i] = 0;
    for (int k = 1; k < 4; k++)
      if (v[k] > v[a[i]]) a[i] = k;
    b[2 * i] = v[0] - v[1];
    b[2 * i + 1] = v[2] * v[3];
    c[i] = v[4] > 0;
  }
  CHECK_OK(mxu_dataset_from_arrays(
      x, a, count, mxu_shape_make(1, (int64_t[]){IN}), 4, &data));
  if (data && outputs == 3) {
    CHECK_OK(mxu_dataset_add_output_targets(data, b, 2));
    CHECK_OK(mxu_dataset_add_output_targets(data, c, 1));
  }
done:
  free(x), free(b), free(c), free(a);
  return data;
}

/* The gradient of the weighted total, from one SGD step of rate 1 (the
 * weights before less those after), against central differences of
 * evaluate's loss: model m (cpu_ref, SGD of rate 1) on one batch of
 * data. */
static void expect_gradient(mxu_model *m, const mxu_dataset *data, int rows,
                            const char *what) {
  int64_t count = m->trainable_count;
  float *w0 = malloc((size_t)count * sizeof *w0);
  double *grad = malloc((size_t)count * sizeof *grad);
  if (!w0 || !grad) goto done;
  memcpy(w0, m->weights, (size_t)count * sizeof *w0);
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = rows;
  fit.shuffle = 0;
  fit.verbose = 0;
  CHECK_OK(mxu_fit(m, data, &fit, NULL));
  for (int64_t i = 0; i < count; i++) grad[i] = (double)w0[i] - m->weights[i];
  const float eps = 1e-2f;
  int bad = 0;
  for (int64_t i = 0; i < count; i++) {
    double up = 0, down = 0;
    memcpy(m->weights, w0, (size_t)count * sizeof *w0);
    m->weights[i] = w0[i] + eps;
    CHECK_OK(mxu_evaluate_outputs(m, data, rows, &up, NULL));
    m->weights[i] = w0[i] - eps;
    CHECK_OK(mxu_evaluate_outputs(m, data, rows, &down, NULL));
    double fd = (up - down) / (2.0 * eps);
    if (fabs(fd - grad[i]) > 2e-3 + 2e-2 * fabs(fd) && bad++ < 5)
      CHECK_MSG(0, "%s: weight %lld: gradient %.6g, finite differences %.6g",
                what, (long long)i, grad[i], fd);
  }
  CHECK_MSG(bad == 0, "%s: %d weights off", what, bad);
  memcpy(m->weights, w0, (size_t)count * sizeof *w0);
done:
  free(w0), free(grad);
}

/* The heads' logged losses: the step's and evaluate's, the total their
 * weighted sum; then the gradient of that total. */
static void test_finite_differences(void) {
  mxu_model *m = heads_model(MXU_BACKEND_CPU_REF, 1, 1, 1.0f);
  mxu_dataset *data = heads_data(N, 5, 3);
  if (!m || !data) goto done;
  CHECK(!m->plan.head[0].fused_softmax); /* Dense b reads a's output */
  double before = 0;
  mxu_output_log outputs[3];
  CHECK_OK(mxu_evaluate_outputs(m, data, N, &before, outputs));
  double weighted =
      outputs[0].loss + 0.7 * outputs[1].loss + 1.5 * outputs[2].loss;
  CHECK_NEAR(before, weighted, 1e-6);
  CHECK(outputs[2].metric_count == 0);
  float *w0 = malloc((size_t)m->trainable_count * sizeof *w0);
  if (w0) memcpy(w0, m->weights, (size_t)m->trainable_count * sizeof *w0);
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = N;
  fit.shuffle = 0;
  fit.verbose = 0;
  const mxu_history *h = NULL;
  CHECK_OK(mxu_fit(m, data, &fit, &h));
  if (h && h->count == 1) {
    CHECK_NEAR(h->epochs[0].loss, before, 1e-6);
    for (int j = 0; j < 3; j++)
      CHECK_NEAR(h->epochs[0].outputs[j].loss, outputs[j].loss, 1e-6);
    CHECK_NEAR(h->epochs[0].outputs[0].values[0], outputs[0].values[0], 1e-12);
  }
  if (w0) memcpy(m->weights, w0, (size_t)m->trainable_count * sizeof *w0);
  free(w0);
  expect_gradient(m, data, N, "three heads");
done:
  mxu_dataset_free(data);
  mxu_model_free(m);
}

/* ---- heads under a padding mask ------------------------------------------
 * ids (5 steps, trailing zeros) -> Embedding(mask_zero) -> LSTM(sequences)
 * -> tag: Dense(3, softmax) per step, sparse CE; score: Dense(1) per step,
 * mse x 0.5; and GlobalAveragePooling1D -> kind: Dense(2, softmax). Both
 * per-step losses mean over the unmasked steps only. */
enum { STEPS = 5, M = 8 };

static mxu_model *masked_model(mxu_backend_kind backend, float rate) {
  mxu_model *m = mxu_functional("masked_heads");
  int64_t steps = STEPS;
  mxu_tensor_id ids = mxu_input(m, "ids", mxu_shape_make(1, &steps));
  mxu_embedding_config emb = {.name = "emb", .input_dim = 7, .output_dim = 4};
  emb.mask_zero = 1;
  mxu_tensor_id e = mxu_apply_embedding(m, &emb, ids);
  mxu_rnn_config rnn = mxu_rnn_defaults(MXU_LSTM, 5);
  rnn.name = "lstm";
  rnn.return_sequences = 1;
  mxu_tensor_id seq = mxu_apply_rnn(m, &rnn, e);
  mxu_dense_config dense = mxu_dense_defaults(3);
  dense.activation = MXU_SOFTMAX;
  dense.name = "tag";
  mxu_tensor_id tag = mxu_apply_dense(m, &dense, seq);
  dense = mxu_dense_defaults(1);
  dense.name = "score";
  mxu_tensor_id score = mxu_apply_dense(m, &dense, seq);
  mxu_global_pool2d_config pool = {.name = "pool"};
  mxu_tensor_id mean = mxu_apply_global_pooling1d(m, &pool, seq);
  dense = mxu_dense_defaults(2);
  dense.activation = MXU_SOFTMAX;
  dense.name = "kind";
  mxu_tensor_id kind = mxu_apply_dense(m, &dense, mean);
  mxu_tensor_id outs[3] = {tag, score, kind};
  CHECK_OK(mxu_model_outputs(m, outs, 3));
  mxu_compile_config cc = three_heads(backend, M, rate, 0.5f);
  cc.seed = 12;
  cc.outputs[2].metrics[0] = "accuracy";
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

/* Sample i has 2 + i % 4 ids, then padding. */
static mxu_dataset *masked_data(void) {
  float ids[M * STEPS] = {0}, tags[M * STEPS] = {0}, scores[M * STEPS] = {0};
  int32_t kinds[M];
  for (int i = 0; i < M; i++) {
    for (int t = 0; t < 2 + i % 4; t++) {
      ids[i * STEPS + t] = (float)(1 + (i * 3 + t * 5) % 6);
      tags[i * STEPS + t] = (float)((i + t) % 3);
      scores[i * STEPS + t] = 0.3f * (float)(t - i % 3);
    }
    kinds[i] = i % 2;
  }
  mxu_dataset *d = NULL;
  CHECK_OK(mxu_dataset_from_targets(
      ids, tags, M, mxu_shape_make(1, (int64_t[]){STEPS}), STEPS, &d));
  if (d) CHECK_OK(mxu_dataset_add_output_targets(d, scores, STEPS));
  if (d) CHECK_OK(mxu_dataset_add_output_labels(d, kinds, 2));
  return d;
}

/* The padded steps count in no output's loss: changing their targets
 * changes nothing; the gradient of the total against finite differences;
 * pjrt's masks against cpu_ref's after two steps. */
static void test_masked_heads(void) {
  mxu_model *m = masked_model(MXU_BACKEND_CPU_REF, 1.0f);
  mxu_dataset *data = masked_data();
  if (!m || !data) goto done;
  CHECK(m->plan.head[0].loss_mask >= 0 && m->plan.head[1].loss_mask >= 0 &&
        m->plan.head[2].loss_mask < 0);
  double loss = 0, other = 0;
  mxu_output_log a[3], b[3];
  CHECK_OK(mxu_evaluate_outputs(m, data, M, &loss, a));
  /* The last sample has 5 ids: its steps are all real; the first's past
   * its second are padding, whose targets are not read. */
  data->outs[0].targets[3] = 100.0f;
  data->targets[4] = 2.0f;
  CHECK_OK(mxu_evaluate_outputs(m, data, M, &other, b));
  CHECK(loss == other && a[0].loss == b[0].loss && a[1].loss == b[1].loss);
  expect_gradient(m, data, M, "masked heads");
  mxu_model *ref = masked_model(MXU_BACKEND_CPU_REF, 0.1f);
  mxu_model *dev = masked_model(MXU_BACKEND_PJRT, 0.1f);
  if (ref && dev) {
    mxu_fit_config fit = mxu_fit_defaults();
    fit.batch_size = M;
    fit.epochs = 2;
    fit.verbose = 0;
    const mxu_history *h1 = NULL, *h2 = NULL;
    CHECK_OK(mxu_fit(ref, data, &fit, &h1));
    CHECK_OK(mxu_fit(dev, data, &fit, &h2));
    for (int j = 0; h1 && h2 && j < 3; j++)
      CHECK_NEAR(h1->epochs[1].outputs[j].loss, h2->epochs[1].outputs[j].loss,
                 1e-5);
    CHECK(worst_error(ref->weights, dev->weights, ref->trainable_count) < 1e-5);
  }
  mxu_model_free(ref);
  mxu_model_free(dev);
done:
  mxu_dataset_free(data);
  mxu_model_free(m);
}

/* Four replicas on the cpu backend train as one on cpu_ref: the per-head
 * sums are gathered in logical order; so do two pjrt devices running
 * three steps an execution, and their evaluation. */
static void test_replicas(mxu_backend_kind backend, int replicas,
                          int per_execution) {
  mxu_model *one = heads_model(MXU_BACKEND_CPU_REF, 1, 1, 0.1f);
  mxu_model *four = heads_model(backend, replicas, per_execution, 0.1f);
  mxu_dataset *data = heads_data(4 * N, 6, 3);
  if (!one || !four || !data) goto done;
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = N;
  fit.epochs = 2;
  fit.verbose = 0;
  fit.seed = 4;
  const mxu_history *h1 = NULL, *h4 = NULL;
  CHECK_OK(mxu_fit(one, data, &fit, &h1));
  CHECK_OK(mxu_fit(four, data, &fit, &h4));
  if (!h1 || !h4 || h1->count != 2 || h4->count != 2) goto done;
  for (int e = 0; e < 2; e++)
    for (int j = 0; j < 3; j++) {
      CHECK_NEAR(h1->epochs[e].outputs[j].loss, h4->epochs[e].outputs[j].loss,
                 1e-5);
      if (j < 2)
        CHECK_NEAR(h1->epochs[e].outputs[j].values[0],
                   h4->epochs[e].outputs[j].values[0], 1e-5);
    }
  CHECK(worst_error(one->weights, four->weights, one->trainable_count) < 1e-5);
  double loss1 = 0, loss4 = 0;
  mxu_output_log o1[3], o4[3];
  CHECK_OK(mxu_evaluate_outputs(one, data, 0, &loss1, o1));
  CHECK_OK(mxu_evaluate_outputs(four, data, 0, &loss4, o4));
  CHECK_NEAR(loss1, loss4, 1e-5);
  for (int j = 0; j < 3; j++) {
    CHECK_NEAR(o1[j].loss, o4[j].loss, 1e-5);
    if (j < 2) CHECK_NEAR(o1[j].values[0], o4[j].values[0], 1e-6);
  }
done:
  mxu_dataset_free(data);
  mxu_model_free(one);
  mxu_model_free(four);
}

/* ---- sample and class weights -------------------------------------------
 * Keras' fit(sample_weight=, class_weight=): a sample's loss counts its
 * weight times, the batch's mean still over its samples; the metrics are
 * not weighted (tf.keras 2.21 and Keras 3.15 agree: loss = sum w l / N). */
static mxu_model *one_head(mxu_backend_kind backend) {
  mxu_model *m = mxu_functional("one_head");
  int64_t d = IN;
  mxu_tensor_id x = mxu_input(m, "x", mxu_shape_make(1, &d));
  mxu_dense_config dense = mxu_dense_defaults(6);
  dense.activation = MXU_TANH;
  mxu_tensor_id h = mxu_apply_dense(m, &dense, x);
  dense = mxu_dense_defaults(4);
  dense.activation = MXU_SOFTMAX;
  mxu_tensor_id y = mxu_apply_dense(m, &dense, h);
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  mxu_compile_config cc = mxu_compile_defaults();
  cc.optimizer = mxu_sgd(1.0f, 0.0f, 0); /* expect_gradient reads a step */
  cc.batch_size = N;
  cc.backend = backend;
  cc.seed = 13;
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

static const float class_weight[4] = {2.0f, 0.5f, 1.0f, 0.0f};

static void test_weights(void) {
  mxu_dataset *data = heads_data(N, 8, 1), *plain = heads_data(N, 8, 1);
  mxu_dataset *three = heads_data(N, 8, 3);
  mxu_model *m = one_head(MXU_BACKEND_CPU_REF);
  mxu_model *heads = heads_model(MXU_BACKEND_CPU_REF, 1, 1, 1.0f);
  float w[N];
  for (int i = 0; i < N; i++) w[i] = 0.25f * (float)(i % 5);
  if (!data || !plain || !three || !m || !heads) goto done;
  CHECK_OK(mxu_dataset_set_sample_weights(data, w));
  CHECK_OK(mxu_dataset_set_sample_weights(three, w));
  /* evaluate: sum w l / N of each sample's own loss; accuracy unweighted */
  double loss = 0, sum = 0, accuracy = 0, unweighted = 0;
  CHECK_OK(mxu_evaluate(m, data, N, &loss, &accuracy));
  CHECK_OK(mxu_evaluate(m, plain, N, NULL, &unweighted));
  CHECK(accuracy == unweighted);
  for (int i = 0; i < N; i++) {
    mxu_dataset *one = NULL;
    double l = 0;
    CHECK_OK(mxu_dataset_slice(plain, i, 1, &one));
    if (one) CHECK_OK(mxu_evaluate(m, one, N, &l, NULL));
    sum += w[i] * l;
    mxu_dataset_free(one);
  }
  CHECK_MSG(fabs(loss - sum / N) < 1e-6, "weighted loss %.8f, sum w l / N %.8f",
            loss, sum / N);
  /* the weighted loss's gradient, for one head and for three */
  expect_gradient(m, data, N, "sample weights");
  expect_gradient(heads, three, N, "sample weights, three heads");
  /* class_weight is a sample weight by class: the same step */
  mxu_model *a = one_head(MXU_BACKEND_CPU_REF), *b = one_head(MXU_BACKEND_CPU);
  mxu_dataset *by_class = heads_data(N, 8, 1);
  float cw[N];
  for (int i = 0; i < N; i++)
    cw[i] = class_weight[mxu_dataset_labels(plain)[i]];
  if (by_class) CHECK_OK(mxu_dataset_set_sample_weights(by_class, cw));
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = N;
  fit.shuffle = 0;
  fit.verbose = 0;
  const mxu_history *ha = NULL, *hb = NULL;
  if (a && b && by_class) {
    CHECK_OK(mxu_fit(a, by_class, &fit, &ha));
    fit.class_weight = class_weight;
    fit.class_weight_count = 4;
    CHECK_OK(mxu_fit(b, plain, &fit, &hb));
    CHECK(ha && hb && fabs(ha->epochs[0].loss - hb->epochs[0].loss) < 1e-6);
    CHECK(worst_error(a->weights, b->weights, a->trainable_count) < 1e-6);
  }
  /* what is refused */
  fit.class_weight_count = 3;
  expect_fail(mxu_fit(b, plain, &fit, NULL), MXU_ERR_ARG,
              "class_weight has 3 weights but the data has 4 classes");
  fit.class_weight_count = 4;
  expect_fail(mxu_fit(heads, three, &fit, NULL), MXU_ERR_UNSUPPORTED,
              "class_weight weighs the samples of a model of one output");
  w[3] = -1.0f;
  expect_fail(mxu_dataset_set_sample_weights(plain, w), MXU_ERR_ARG,
              "sample 3's weight is -1");
  mxu_model_free(a);
  mxu_model_free(b);
  mxu_dataset_free(by_class);
done:
  mxu_dataset_free(data);
  mxu_dataset_free(plain);
  mxu_dataset_free(three);
  mxu_model_free(m);
  mxu_model_free(heads);
}

/* pjrt weighs the samples as the host does: two steps with sample and
 * class weights, and the weighted evaluation. */
static void test_weights_pjrt(void) {
  mxu_model *ref = one_head(MXU_BACKEND_CPU_REF),
            *dev = one_head(MXU_BACKEND_PJRT);
  mxu_dataset *data = heads_data(2 * N, 9, 1);
  float w[2 * N];
  for (int i = 0; i < 2 * N; i++) w[i] = 0.2f * (float)(i % 7);
  if (!ref || !dev || !data) goto done;
  CHECK_OK(mxu_dataset_set_sample_weights(data, w));
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = N;
  fit.verbose = 0;
  fit.class_weight = class_weight;
  fit.class_weight_count = 4;
  const mxu_history *h1 = NULL, *h2 = NULL;
  CHECK_OK(mxu_fit(ref, data, &fit, &h1));
  CHECK_OK(mxu_fit(dev, data, &fit, &h2));
  CHECK(h1 && h2 && fabs(h1->epochs[0].loss - h2->epochs[0].loss) < 1e-5);
  CHECK(worst_error(ref->weights, dev->weights, ref->trainable_count) < 1e-5);
  double l1 = 0, l2 = 0, a1 = 0, a2 = 0;
  CHECK_OK(mxu_evaluate(ref, data, 0, &l1, &a1));
  CHECK_OK(mxu_evaluate(dev, data, 0, &l2, &a2));
  CHECK_NEAR(l1, l2, 1e-5);
  CHECK(a1 == a2);
done:
  mxu_dataset_free(data);
  mxu_model_free(ref);
  mxu_model_free(dev);
}

/* Keras' logs keys: the CSV logger's header (sorted), EarlyStopping on
 * an output's val_ metric, and the values the logs name. */
static mxu_status check_logs(void *self, mxu_model *model,
                             const mxu_logs *logs) {
  (void)model;
  int *seen = self;
  ++*seen;
  CHECK(logs->output_count == 3 && isnan(logs->accuracy) && !logs->metric);
  CHECK(mxu_logs_value(logs, "b_loss") == logs->outputs[1].loss);
  CHECK(mxu_logs_value(logs, "val_a_accuracy") ==
        logs->outputs[0].val_values[0]);
  CHECK(mxu_logs_value(logs, "val_b_mse") == logs->outputs[1].val_values[0]);
  CHECK(isnan(mxu_logs_value(logs, "c_accuracy")));
  CHECK(isnan(mxu_logs_value(logs, "accuracy")));
  return MXU_OK;
}

static void test_callbacks(void) {
  mxu_model *m = heads_model(MXU_BACKEND_CPU, 1, 1, 0.1f);
  mxu_dataset *data = heads_data(4 * N, 7, 3), *train = NULL, *val = NULL;
  if (!m || !data) goto done;
  CHECK_OK(mxu_dataset_slice(data, 0, 3 * N, &train));
  CHECK_OK(mxu_dataset_slice(data, 3 * N, N, &val));
  char path[] = "/tmp/mxu_outputs_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  mxu_callback cbs[3];
  int seen = 0;
  CHECK_OK(mxu_csv_logger(path, 0, &cbs[0]));
  mxu_early_stopping_config es = mxu_early_stopping_defaults();
  es.monitor = "val_a_accuracy";
  es.patience = 100;
  CHECK_OK(mxu_early_stopping(&es, &cbs[1]));
  cbs[2] = (mxu_callback){.self = &seen, .epoch_end = check_logs};
  char printed[4096] = {0};
  FILE *out = fmemopen(printed, sizeof printed - 1, "w");
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = N;
  fit.epochs = 2;
  fit.verbose = 2;
  fit.out = out;
  fit.validation = val;
  fit.callbacks = cbs;
  fit.callback_count = 3;
  CHECK_OK(mxu_fit(m, train, &fit, NULL));
  if (out) fclose(out);
  CHECK(seen == 2);
  /* Keras' per-epoch line: the loss, each output's loss, each metric. */
  CHECK_MSG(strstr(printed, " - loss: ") && strstr(printed, " - a_loss: ") &&
                strstr(printed, " - c_loss: ") &&
                strstr(printed, " - a_accuracy: ") &&
                strstr(printed, " - b_mse: ") &&
                strstr(printed, " - val_b_loss: ") &&
                strstr(printed, " - val_a_accuracy: ") &&
                !strstr(printed, "warning") && !strstr(printed, "c_accuracy"),
            "printed: %s", printed);
  FILE *csv = fopen(path, "r");
  char header[512] = {0};
  CHECK(csv && fgets(header, sizeof header, csv));
  if (csv) fclose(csv);
  CHECK_MSG(strcmp(header,
                   "epoch,a_accuracy,a_loss,b_loss,b_mse,c_loss,loss,lr,"
                   "val_a_accuracy,val_a_loss,val_b_loss,val_b_mse,"
                   "val_c_loss,val_loss\r\n") == 0,
            "header: %s", header);
  remove(path);
  for (int i = 0; i < 2; i++) mxu_callback_free(&cbs[i]);
done:
  mxu_dataset_free(train);
  mxu_dataset_free(val);
  mxu_dataset_free(data);
  mxu_model_free(m);
}

static void test_refusals(void) {
  mxu_model *m = heads_model(MXU_BACKEND_CPU_REF, 1, 1, 0.1f);
  float x[N * IN] = {0}, wide[N * 3] = {0};
  int32_t labels[N] = {0};
  mxu_dataset *one = NULL, *wrong = NULL;
  CHECK_OK(mxu_dataset_from_arrays(
      x, labels, N, mxu_shape_make(1, (int64_t[]){IN}), 4, &one));
  CHECK_OK(mxu_dataset_from_arrays(
      x, labels, N, mxu_shape_make(1, (int64_t[]){IN}), 4, &wrong));
  if (!m || !one || !wrong) goto done;
  expect_fail(mxu_evaluate(m, one, 0, NULL, NULL), MXU_ERR_ARG,
              "targets for 1 outputs but the model has 3");
  CHECK_OK(mxu_dataset_add_output_targets(wrong, wide, 3));
  CHECK_OK(mxu_dataset_add_output_targets(wrong, wide, 1));
  expect_fail(mxu_evaluate(m, wrong, 0, NULL, NULL), MXU_ERR_SHAPE,
              "output 'b': the data's targets are 3 float values a sample, "
              "but the model outputs 2");
  float out[N];
  expect_fail(mxu_predict(m, x, N, out), MXU_ERR_UNSUPPORTED,
              "mxu_predict_outputs takes an array for each");
  mxu_compile_config cc = m->compile;
  cc.output_count = 2;
  expect_fail(mxu_compile(m, &cc), MXU_ERR_ARG,
              "2 output losses given but the model has 3");
  cc.output_count = 3;
  cc.outputs[1].weight = -1.0f;
  expect_fail(mxu_compile(m, &cc), MXU_ERR_ARG,
              "the loss weight -1 of output 'b'");
  cc.outputs[1].weight = 1.0f;
  cc.outputs[2].loss = MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  cc.outputs[2].label_smoothing = 0.0f;
  expect_fail(mxu_compile(m, &cc), MXU_ERR_SHAPE,
              "the output layer 'c' must output one score per class");
  expect_fail(mxu_dataset_add_output_labels(one, (int32_t[N]){[3] = 5}, 4),
              MXU_ERR_ARG, "label 5 of sample 3 out of range 0..3");
done:
  mxu_dataset_free(one);
  mxu_dataset_free(wrong);
  mxu_model_free(m);
}

int main(void) {
  test_finite_differences();
  test_masked_heads();
  test_weights();
  test_weights_pjrt();
  test_replicas(MXU_BACKEND_CPU, 4, 1);
  test_replicas(MXU_BACKEND_PJRT, 2, 3);
  test_callbacks();
  test_refusals();
  golden_step(DIR "model.tf2.json", MXU_BACKEND_CPU_REF);
  golden_step(DIR "model.k3.json", MXU_BACKEND_CPU_REF);
  golden_step(DIR "model.tf2.json", MXU_BACKEND_CPU);
  golden_step(DIR "model.k3.json", MXU_BACKEND_PJRT);
  return check_report("test_outputs");
}
