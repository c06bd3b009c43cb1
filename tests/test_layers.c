/* test_layers.c — every layer, inside a small model, checked two ways:
 * backward against central finite differences of the loss (cpu_ref), and
 * forward and backward of the oneDNN backend against cpu_ref. */
#include "check.h"
#include "model/model.h"
#include "strategy/strategy.h"

#include <string.h>

#define BATCH 3
#define CLASSES 4

typedef mxu_status (*add_fn)(mxu_model *model);

typedef struct layer_case {
  const char *name;
  int64_t input[3];
  int input_rank;
  add_fn add; /* adds the layer(s) under test */
  mxu_loss loss;
  int from_logits;
  int head; /* 1: append Flatten + Dense(CLASSES, softmax) */
} layer_case;

static mxu_model *build(const layer_case *c, mxu_backend_kind backend) {
  mxu_model *model = mxu_sequential(c->name);
  CHECK_OK(mxu_add_input(model, NULL, mxu_shape_make(c->input_rank, c->input)));
  /* A leading identity, so the layer under test computes its dx. */
  CHECK_OK(mxu_add_activation(model, "identity", MXU_LINEAR));
  CHECK_OK(c->add(model));
  if (c->head) {
    mxu_dense_config dense = mxu_dense_defaults(CLASSES);
    dense.activation = MXU_SOFTMAX;
    CHECK_OK(mxu_add_flatten(model, NULL));
    CHECK_OK(mxu_add_dense(model, &dense));
  }
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = BATCH;
  cc.backend = backend;
  cc.seed = 11;
  cc.loss = c->loss;
  cc.from_logits = c->from_logits;
  cc.keep_gradients = 1; /* every node's is compared */
  CHECK_OK(mxu_compile(model, &cc));
  return model;
}

static void load_inputs(mxu_model *model, uint64_t seed) {
  mxu_plan *plan = &model->plan;
  int64_t count = BATCH * mxu_shape_count(&mxu_model_input(model)->out_shape);
  float *x = mxu_plan_floats(model, plan->act[0]);
  mxu_rng rng = mxu_rng_make(seed, 99, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, (size_t)count);
  for (int64_t i = 0; i < count; i++) x[i] = 4.0f * x[i] - 2.0f;
  int32_t *labels =
      (int32_t *)(void *)mxu_plan_floats(model, plan->head[0].labels);
  float *onehot = mxu_plan_floats(model, plan->head[0].targets);
  memset(onehot, 0, BATCH * CLASSES * sizeof(float));
  for (int r = 0; r < BATCH; r++) {
    labels[r] = (int32_t)mxu_rng_below(&rng, 1000 + (uint64_t)r, CLASSES);
    onehot[r * CLASSES + labels[r]] = 1.0f;
  }
}

/* One training step (forward, loss, backward) over the loaded batch. */
static mxu_step_result train_step(mxu_model *model) {
  mxu_replica_set_rows(model, &model->plan.replica[0], BATCH);
  mxu_step_key key = {1, 5, 0, 0};
  return mxu_strategy_step(model, &key, 1.0f / BATCH);
}

static double mean_loss(mxu_model *model) {
  return train_step(model).loss_sum / BATCH;
}

static int close_enough(double analytic, double numeric) {
  double scale =
      fabs(analytic) > fabs(numeric) ? fabs(analytic) : fabs(numeric);
  return fabs(analytic - numeric) <= 2e-2 * scale + 2e-3;
}

/* Central differences on up to 25 entries of buffer, against grad. */
static void check_fd(mxu_model *model, float *buffer, const float *grad,
                     int64_t count, const char *what, const char *name) {
  int64_t stride = count > 25 ? count / 25 : 1;
  const float eps =
      1e-3f; /* small: a kink of relu or max must rarely fall inside */
  for (int64_t i = 0; i < count; i += stride) {
    float saved = buffer[i];
    buffer[i] = saved + eps;
    double plus = mean_loss(model);
    buffer[i] = saved - eps;
    double minus = mean_loss(model);
    buffer[i] = saved;
    double numeric = (plus - minus) / (2.0 * eps);
    CHECK_MSG(close_enough(grad[i], numeric),
              "%s: %s[%lld]: analytic %.6g, finite difference %.6g", name, what,
              (long long)i, (double)grad[i], numeric);
  }
}

static void finite_differences(const layer_case *c) {
  mxu_model *model = build(c, MXU_BACKEND_CPU_REF);
  load_inputs(model, 3);
  mean_loss(model);
  mxu_plan *plan = &model->plan;
  int64_t n_in = BATCH * mxu_shape_count(&model->layers[0].out_shape);
  int64_t n_w = model->trainable_count;
  float *grad_in = malloc((size_t)n_in * 4), *grad_w = malloc((size_t)n_w * 4);
  memcpy(grad_in, mxu_plan_floats(model, plan->grad[1]), (size_t)n_in * 4);
  memcpy(grad_w, model->grads, (size_t)n_w * 4);
  check_fd(model, mxu_plan_floats(model, plan->act[0]), grad_in, n_in, "input",
           c->name);
  /* Only the weights of the layers under test: the head is Dense, which
   * its own case covers. */
  for (int p = 0; p < model->param_count; p++) {
    const mxu_param *param = &model->params[p];
    if (!param->trainable ||
        (c->head && param->layer >= model->layer_count - 2))
      continue;
    check_fd(model, model->weights + param->offset, grad_w + param->offset,
             param->count, param->name, c->name);
  }
  free(grad_in);
  free(grad_w);
  mxu_model_free(model);
}

static void check_same(const float *a, const float *b, int64_t count,
                       const char *what, const char *name) {
  for (int64_t i = 0; i < count; i++) {
    double scale = fabs(a[i]) > fabs(b[i]) ? fabs(a[i]) : fabs(b[i]);
    if (fabs(a[i] - b[i]) > 1e-4 * scale + 1e-5) {
      CHECK_MSG(0, "%s: %s[%lld]: cpu %.7g, cpu_ref %.7g", name, what,
                (long long)i, (double)a[i], (double)b[i]);
      return;
    }
  }
}

/* The same model, seed and batch on both backends: every activation,
 * every gradient and the state (BatchNormalization's moving statistics). */
static void backends_agree(const layer_case *c) {
  mxu_model *fast = build(c, MXU_BACKEND_CPU);
  mxu_model *ref = build(c, MXU_BACKEND_CPU_REF);
  load_inputs(fast, 3);
  load_inputs(ref, 3);
  mxu_step_result a = train_step(fast);
  mxu_step_result b = train_step(ref);
  CHECK_NEAR(a.loss_sum, b.loss_sum, 1e-4 * fabs(b.loss_sum) + 1e-5);
  for (int i = 0; i < fast->layer_count; i++) {
    const mxu_shape *s = &fast->layers[i].out_shape;
    int64_t count = BATCH * mxu_shape_count(s);
    check_same(mxu_plan_floats(fast, fast->plan.act[i]),
               mxu_plan_floats(ref, ref->plan.act[i]), count, "activation",
               c->name);
    if (i >= 1)
      check_same(mxu_plan_floats(fast, fast->plan.grad[i]),
                 mxu_plan_floats(ref, ref->plan.grad[i]), count, "gradient",
                 c->name);
  }
  check_same(fast->grads, ref->grads, fast->trainable_count, "weight gradient",
             c->name);
  check_same(fast->state, ref->state, fast->state_count, "state", c->name);
  mxu_model_free(fast);
  mxu_model_free(ref);
}

/* ---- the cases ---------------------------------------------------------- */

static mxu_status conv_valid_relu(mxu_model *m) {
  mxu_conv2d_config c = mxu_conv2d_defaults(3, 3, 3);
  c.activation = MXU_RELU;
  return mxu_add_conv2d(m, &c);
}
static mxu_status conv_same_stride2_tanh(mxu_model *m) {
  mxu_conv2d_config c = mxu_conv2d_defaults(4, 3, 2);
  c.padding = MXU_SAME;
  c.strides[0] = c.strides[1] = 2;
  c.activation = MXU_TANH;
  return mxu_add_conv2d(m, &c);
}
static mxu_status conv_nobias_sigmoid(mxu_model *m) {
  mxu_conv2d_config c = mxu_conv2d_defaults(2, 2, 2);
  c.use_bias = 0;
  c.activation = MXU_SIGMOID;
  return mxu_add_conv2d(m, &c);
}
static mxu_status max_pool_valid(mxu_model *m) {
  mxu_pool2d_config p = mxu_pool2d_defaults(2, 2);
  return mxu_add_max_pooling2d(m, &p);
}
static mxu_status max_pool_same_stride1(mxu_model *m) {
  mxu_pool2d_config p = mxu_pool2d_defaults(3, 3);
  p.strides[0] = p.strides[1] = 1;
  p.padding = MXU_SAME;
  return mxu_add_max_pooling2d(m, &p);
}
static mxu_status avg_pool_same(mxu_model *m) {
  mxu_pool2d_config p = mxu_pool2d_defaults(2, 2);
  p.padding = MXU_SAME;
  return mxu_add_average_pooling2d(m, &p);
}
static mxu_status activations(mxu_model *m) {
  mxu_status s = mxu_add_activation(m, NULL, MXU_RELU);
  if (!s) s = mxu_add_activation(m, NULL, MXU_SIGMOID);
  if (!s) s = mxu_add_activation(m, NULL, MXU_TANH);
  if (!s) s = mxu_add_activation(m, NULL, MXU_SOFTMAX);
  return s;
}
/* Every activation a name gives, after each other: the smooth ones, and
 * those with corners (at 0, +-0.5, +-1, +-2.5, +-3: the finite differences
 * step over them, as for relu above). */
static mxu_status activations_smooth(mxu_model *m) {
  static const mxu_activation acts[] = {
      MXU_GELU,       MXU_GELU_TANH,  MXU_SILU,        MXU_MISH,
      MXU_SOFTPLUS,   MXU_SOFTSIGN,   MXU_EXPONENTIAL, MXU_ELU,
      MXU_SELU,       MXU_CELU,       MXU_LOG_SIGMOID, MXU_TANH_SHRINK,
      MXU_SQUAREPLUS, MXU_LOG_SOFTMAX};
  mxu_status s = MXU_OK;
  for (size_t i = 0; i < sizeof acts / sizeof *acts && !s; i++)
    s = mxu_add_activation(m, NULL, acts[i]);
  return s;
}
static mxu_status activations_cornered(mxu_model *m) {
  /* The shrinks first, on inputs in [-2, 2): later, in [0, 1], they would
   * pass nothing. */
  static const mxu_activation acts[] = {
      MXU_HARD_SHRINK,    MXU_SOFT_SHRINK,     MXU_HARD_TANH, MXU_SPARSE_PLUS,
      MXU_SPARSE_SIGMOID, MXU_LEAKY_RELU,      MXU_HARD_SILU, MXU_HARD_SIGMOID,
      MXU_RELU6,          MXU_HARD_SIGMOID_TF2};
  mxu_status s = MXU_OK;
  for (size_t i = 0; i < sizeof acts / sizeof *acts && !s; i++)
    s = mxu_add_activation(m, NULL, acts[i]);
  return s;
}
/* Activations a conv or dense op does not fuse run after it, from the
 * pre-activation values the layer keeps. */
static mxu_status conv_gelu_dense_mish(mxu_model *m) {
  mxu_conv2d_config c = mxu_conv2d_defaults(3, 3, 3);
  c.padding = MXU_SAME;
  c.activation = MXU_GELU;
  mxu_dense_config d = mxu_dense_defaults(5);
  d.activation = MXU_MISH;
  mxu_status s = mxu_add_conv2d(m, &c);
  if (!s) s = mxu_add_flatten(m, NULL);
  return s ? s : mxu_add_dense(m, &d);
}
/* A depthwise conv with 2 kernels per channel, stride 2, relu6 (unfused);
 * a grouped conv; a dilated one. */
static mxu_status depthwise(mxu_model *m) {
  mxu_depthwise_conv2d_config c = mxu_depthwise_conv2d_defaults(3, 3);
  c.padding = MXU_SAME;
  c.strides[0] = c.strides[1] = 2;
  c.depth_multiplier = 2;
  c.activation = MXU_RELU6;
  return mxu_add_depthwise_conv2d(m, &c);
}
static mxu_status grouped_dilated(mxu_model *m) {
  mxu_conv2d_config g = mxu_conv2d_defaults(6, 3, 3);
  g.padding = MXU_SAME;
  g.groups = 2;
  g.activation = MXU_TANH;
  mxu_conv2d_config d = mxu_conv2d_defaults(3, 3, 2);
  d.dilation_rate[0] = d.dilation_rate[1] = 2;
  d.use_bias = 0;
  mxu_status s = mxu_add_conv2d(m, &g);
  return s ? s : mxu_add_conv2d(m, &d);
}
/* Dense on (h, w, c): the last axis, each pixel a row. */
static mxu_status dense_rank3(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(4);
  d.activation = MXU_TANH;
  return mxu_add_dense(m, &d);
}
static mxu_status dense_relu(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(5);
  d.activation = MXU_RELU;
  mxu_status s = mxu_add_flatten(m, NULL);
  return s ? s : mxu_add_dense(m, &d);
}
static mxu_status dropout(mxu_model *m) {
  return mxu_add_dropout(m, NULL, 0.4f);
}
static mxu_status batchnorm(mxu_model *m) {
  mxu_batchnorm_config b = mxu_batchnorm_defaults();
  return mxu_add_batch_normalization(m, &b);
}
static mxu_status batchnorm_no_center_scale(mxu_model *m) {
  mxu_batchnorm_config b = mxu_batchnorm_defaults();
  b.center = b.scale = 0;
  return mxu_add_batch_normalization(m, &b);
}
/* Heads: the last layer is the one under test. */
static mxu_status dense_softmax_head(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  d.activation = MXU_SOFTMAX;
  mxu_status s = mxu_add_flatten(m, NULL);
  return s ? s : mxu_add_dense(m, &d);
}
static mxu_status dense_then_softmax_head(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  mxu_status s = mxu_add_flatten(m, NULL);
  if (!s) s = mxu_add_dense(m, &d);
  return s ? s : mxu_add_activation(m, NULL, MXU_SOFTMAX);
}
static mxu_status dense_logits_head(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  mxu_status s = mxu_add_flatten(m, NULL);
  return s ? s : mxu_add_dense(m, &d);
}
static mxu_status dense_sigmoid_head(mxu_model *m) {
  mxu_dense_config d = mxu_dense_defaults(CLASSES);
  d.activation = MXU_SIGMOID;
  mxu_status s = mxu_add_flatten(m, NULL);
  return s ? s : mxu_add_dense(m, &d);
}

#define SPARSE MXU_SPARSE_CATEGORICAL_CROSSENTROPY
#define ONEHOT MXU_CATEGORICAL_CROSSENTROPY

static const layer_case cases[] = {
    {"conv2d valid relu", {7, 6, 2}, 3, conv_valid_relu, SPARSE, 0, 1},
    {"conv2d same stride 2 tanh",
     {7, 5, 3},
     3,
     conv_same_stride2_tanh,
     SPARSE,
     0,
     1},
    {"conv2d no bias sigmoid", {5, 5, 2}, 3, conv_nobias_sigmoid, ONEHOT, 0, 1},
    {"max_pooling2d valid", {5, 6, 3}, 3, max_pool_valid, SPARSE, 0, 1},
    {"max_pooling2d same stride 1",
     {4, 5, 2},
     3,
     max_pool_same_stride1,
     SPARSE,
     0,
     1},
    {"average_pooling2d same", {5, 5, 3}, 3, avg_pool_same, SPARSE, 0, 1},
    {"activations", {3, 3, 4}, 3, activations, SPARSE, 0, 1},
    {"flatten + dense relu", {3, 2, 3}, 3, dense_relu, SPARSE, 0, 1},
    {"dense on rank 3", {3, 2, 5}, 3, dense_rank3, SPARSE, 0, 1},
    {"depthwise_conv2d", {5, 6, 3}, 3, depthwise, SPARSE, 0, 1},
    {"conv2d groups, dilation", {6, 7, 4}, 3, grouped_dilated, SPARSE, 0, 1},
    {"smooth activations", {3, 3, 4}, 3, activations_smooth, SPARSE, 0, 1},
    {"cornered activations", {3, 3, 4}, 3, activations_cornered, SPARSE, 0, 1},
    {"conv2d gelu + dense mish",
     {4, 4, 2},
     3,
     conv_gelu_dense_mish,
     SPARSE,
     0,
     1},
    {"dropout", {4, 4, 3}, 3, dropout, SPARSE, 0, 1},
    {"batch_normalization 4-D", {3, 3, 5}, 3, batchnorm, SPARSE, 0, 1},
    {"batch_normalization 2-D plain",
     {6, 1, 1},
     1,
     batchnorm_no_center_scale,
     SPARSE,
     0,
     1},
    {"dense softmax, sparse loss",
     {3, 2, 2},
     3,
     dense_softmax_head,
     SPARSE,
     0,
     0},
    {"dense + softmax, one-hot loss",
     {3, 2, 2},
     3,
     dense_then_softmax_head,
     ONEHOT,
     0,
     0},
    {"dense from logits", {3, 2, 2}, 3, dense_logits_head, SPARSE, 1, 0},
    {"dense sigmoid, probabilities",
     {3, 2, 2},
     3,
     dense_sigmoid_head,
     SPARSE,
     0,
     0},
};

int main(void) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    finite_differences(&cases[i]);
    backends_agree(&cases[i]);
  }
  return check_report("test_layers");
}
