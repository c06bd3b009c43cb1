/* test_graph.c — the model as a graph: every layer of the Functional API
 * (merges, global pooling, padding, ReLU, Reshape) against loops written
 * here and its backward against central finite differences; tensors read
 * by several nodes (one reading the same tensor twice); a whole residual
 * CNN's gradient along a random direction; bit-identical training for any
 * thread count; Conv2D fusion inside a residual block; and the errors the
 * graph API gives. */
#include "check.h"
#include "core/core.h"
#include "model/model.h"
#include "strategy/strategy.h"

#include <string.h>

#define BATCH 3
#define CLASSES 4

/* ---- building and running ------------------------------------------------
 */

/* Adds the layers of a graph and returns the tensor the loss reads; it may
 * call mxu_model_outputs itself (several outputs). */
typedef mxu_tensor_id (*graph_fn)(mxu_model *m, const void *ctx);

static mxu_compile_config config_for(mxu_backend_kind backend) {
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = BATCH;
  cc.backend = backend;
  cc.seed = 11;
  cc.threads = 1;
  cc.keep_gradients = 1; /* the checks below read every node's */
  return cc;
}

static mxu_model *build_with(const char *name, graph_fn fn, const void *ctx,
                             const mxu_compile_config *cc) {
  mxu_model *m = mxu_functional(name);
  mxu_tensor_id out = fn(m, ctx);
  CHECK_MSG(out >= 0, "%s: building the graph failed: %s", name, mxu_errmsg());
  if (out >= 0 && !m->output_count) CHECK_OK(mxu_model_outputs(m, &out, 1));
  mxu_status status = out >= 0 ? mxu_compile(m, cc) : MXU_ERR_ARG;
  CHECK_MSG(status == MXU_OK, "%s: compile: %s", name, mxu_errmsg());
  if (status != MXU_OK) {
    mxu_model_free(m);
    return NULL;
  }
  return m;
}

static mxu_model *build(const char *name, graph_fn fn, const void *ctx,
                        mxu_backend_kind backend) {
  mxu_compile_config cc = config_for(backend);
  return build_with(name, fn, ctx, &cc);
}

/* A model input of shape (h, w, c) and an identity Activation reading it,
 * so that the graph's first tensor carries a gradient (a model input does
 * not). */
static mxu_tensor_id input_identity(mxu_model *m, const int64_t dims[3]) {
  mxu_tensor_id in = mxu_input(m, NULL, mxu_shape_make(3, dims));
  return mxu_apply_activation(m, NULL, MXU_LINEAR, in);
}

/* Flatten + Dense(CLASSES, softmax): what the loss reads. */
static mxu_tensor_id head(mxu_model *m, mxu_tensor_id y) {
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &dense, mxu_apply_flatten(m, NULL, y));
}

static int node_named(const mxu_model *m, const char *name) {
  for (int i = 0; i < m->layer_count; i++)
    if (strcmp(m->layers[i].name, name) == 0) return i;
  return -1;
}

static int64_t tensor_floats(const mxu_model *m, int node) {
  return (int64_t)m->plan.batch * mxu_shape_count(&m->layers[node].out_shape);
}

static float *act(mxu_model *m, int node) {
  return mxu_plan_floats(m, m->plan.act[node]);
}

static float *grad(mxu_model *m, int node) {
  return mxu_plan_floats(m, m->plan.grad[node]);
}

/* Uniform values in [-2, 2) in every model input, and labels, from seed. */
static void load_inputs(mxu_model *m, uint64_t seed) {
  mxu_plan *plan = &m->plan;
  for (int k = 0; k < m->input_count; k++) {
    int node = m->inputs[k];
    int64_t count = tensor_floats(m, node);
    float *x = act(m, node);
    mxu_rng rng = mxu_rng_make(seed, 99, (uint32_t)k, 0, 0);
    mxu_rng_uniform(&rng, 0, x, (size_t)count);
    for (int64_t i = 0; i < count; i++) x[i] = 4.0f * x[i] - 2.0f;
  }
  mxu_rng rng = mxu_rng_make(seed, 98, 0, 0, 0);
  int classes = (int)m->layers[mxu_model_output(m)].out_shape.dims[0];
  int32_t *labels = (int32_t *)(void *)mxu_plan_floats(m, plan->head[0].labels);
  float *onehot = mxu_plan_floats(m, plan->head[0].targets);
  memset(onehot, 0, (size_t)plan->batch * (size_t)classes * sizeof(float));
  for (int r = 0; r < plan->batch; r++) {
    labels[r] = (int32_t)mxu_rng_below(&rng, (uint64_t)r, (uint32_t)classes);
    onehot[r * classes + labels[r]] = 1.0f;
  }
}

/* One training step (forward, loss, backward) over the loaded batch. */
static mxu_step_result train_step(mxu_model *m) {
  mxu_replica_set_rows(m, &m->plan.replica[0], m->plan.batch);
  mxu_step_key key = {1, 5, 0, 0};
  return mxu_strategy_step(m, &key, 1.0f / (float)m->plan.batch);
}

static double mean_loss(mxu_model *m) {
  return train_step(m).loss_sum / m->plan.batch;
}

static int close_enough(double analytic, double numeric) {
  double scale =
      fabs(analytic) > fabs(numeric) ? fabs(analytic) : fabs(numeric);
  return fabs(analytic - numeric) <= 1e-2 * scale + 5e-4;
}

/* A line through the weights or the inputs, t = 0 where they are: one
 * value *v moved by t, or every trainable weight moved to w0 + t d. */
typedef struct line {
  mxu_model *m;
  float *v;
  const float *w0, *d;
} line;

static double loss_at(const line *l, double t) {
  mxu_model *m = l->m;
  if (l->v) {
    float saved = *l->v;
    *l->v = saved + (float)t;
    double loss = mean_loss(m);
    *l->v = saved;
    return loss;
  }
  for (int64_t i = 0; i < m->trainable_count; i++)
    m->weights[i] = l->w0[i] + (float)t * l->d[i];
  double loss = mean_loss(m);
  memcpy(m->weights, l->w0, (size_t)m->trainable_count * sizeof(float));
  return loss;
}

/* Whether the loss's slope along the line at t = 0 is `analytic` (as
 * agree judges), by finite differences; *central gets the central one
 * of step 1e-3. That step keeps float rounding of the loss well below the
 * tolerances, but a weight moves every output of its layer (a kernel
 * slides over the whole image) and now and then one crosses a kink of
 * relu, max or a pooling window's winner inside the step: then a five
 * times smaller step decides, and where the kink is closer still than
 * that, the slope on one side of it (the gradient is one side's). A wrong
 * gradient matches none. */
static int slope_matches(const line *l, double analytic,
                         int (*agree)(double, double), double *central) {
  static const double steps[2] = {1e-3, 2e-4};
  double at = loss_at(l, 0);
  for (int s = 0; s < 2; s++) {
    double h = steps[s], plus = loss_at(l, h), minus = loss_at(l, -h);
    double mid = (plus - minus) / (2 * h);
    if (s == 0) *central = mid;
    if (agree(analytic, mid) || agree(analytic, (plus - at) / h) ||
        agree(analytic, (at - minus) / h))
      return 1;
  }
  return 0;
}

/* The gradient of entries of buffer (every one of a small buffer, 40
 * spread over a large one) against finite differences of the mean loss. */
static void check_fd(mxu_model *m, float *buffer, const float *analytic,
                     int64_t count, const char *what, const char *name) {
  int64_t stride = count > 80 ? count / 40 : 1;
  for (int64_t i = 0; i < count; i += stride) {
    line l = {m, &buffer[i], NULL, NULL};
    double central = NAN;
    CHECK_MSG(slope_matches(&l, analytic[i], close_enough, &central),
              "%s: %s[%lld]: analytic %.6g, finite difference %.6g", name, what,
              (long long)i, (double)analytic[i], central);
  }
}

/* The identity Activation that reads model input k: its gradient is the
 * loss's gradient with respect to the input. */
static int input_reader(const mxu_model *m, int k) {
  for (int i = 0; i < m->layer_count; i++)
    if (m->layers[i].input_count == 1 &&
        m->layers[i].inputs[0] == m->inputs[k] &&
        m->layers[i].cls == &mxu_activation_class)
      return i;
  return -1;
}

/* Token ids for model input `ids` of steps 6 (BATCH rows): padded with 0
 * after, before and inside; no-op when ids is -1. */
static void load_ids(mxu_model *m, int ids) {
  static const float pattern[3][6] = {
      {3, 1, 4, 0, 0, 0}, {0, 0, 2, 5, 1, 3}, {1, 0, 2, 0, 4, 5}};
  if (ids < 0) return;
  float *x = act(m, m->inputs[ids]);
  const mxu_shape *s = &m->layers[m->inputs[ids]].out_shape;
  if (s->rank == 1) {
    for (int r = 0; r < BATCH; r++) memcpy(x + r * 6, pattern[r % 3], 6 * 4);
    return;
  }
  /* A series (6, f): its steps zeros where the ids are 0 (a padding a
   * Masking finds), load_inputs' values elsewhere. */
  int64_t f = s->dims[1];
  for (int r = 0; r < BATCH; r++)
    for (int t = 0; t < 6; t++)
      if (pattern[r % 3][t] == 0) memset(x + (r * 6 + t) * f, 0, f * 4);
}

static void finite_differences_ids(mxu_model *m, const char *name, int ids);

/* The gradient of every model input and every trainable weight against
 * finite differences of the loss. */
static void finite_differences(mxu_model *m, const char *name) {
  finite_differences_ids(m, name, -1);
}

/* ... with model input `ids` token ids (load_ids), whose gradient is not
 * checked. */
static void finite_differences_ids(mxu_model *m, const char *name, int ids) {
  if (!m) return;
  load_inputs(m, 3);
  load_ids(m, ids);
  train_step(m);
  int64_t n_w = m->trainable_count;
  float *grad_w = malloc((size_t)(n_w ? n_w : 1) * sizeof(float));
  memcpy(grad_w, m->grads, (size_t)n_w * sizeof(float));
  float *grad_in[MXU_MAX_INPUTS];
  for (int k = 0; k < m->input_count; k++) {
    int reader = input_reader(m, k);
    CHECK(reader >= 0);
    int64_t n = tensor_floats(m, m->inputs[k]);
    grad_in[k] = malloc((size_t)n * sizeof(float));
    if (reader >= 0)
      memcpy(grad_in[k], grad(m, reader), (size_t)n * sizeof(float));
  }
  /* The gradients must mean something: not all zero. */
  double norm = 0;
  for (int64_t i = 0; i < tensor_floats(m, m->inputs[0]); i++)
    norm += fabs(grad_in[0][i]);
  CHECK_MSG(norm > 1e-4, "%s: the input's gradient is zero", name);
  for (int k = 0; k < m->input_count; k++) {
    char what[32];
    snprintf(what, sizeof what, "input %d", k);
    if (k != ids)
      check_fd(m, act(m, m->inputs[k]), grad_in[k],
               tensor_floats(m, m->inputs[k]), what, name);
    free(grad_in[k]);
  }
  for (int p = 0; p < m->param_count; p++) {
    const mxu_param *param = &m->params[p];
    if (!param->trainable) continue;
    char what[160];
    snprintf(what, sizeof what, "%s/%s", m->layers[param->layer].name,
             param->name);
    check_fd(m, m->weights + param->offset, grad_w + param->offset,
             param->count, what, name);
  }
  free(grad_w);
}

/* Whether node i's output buffer is written in a step: not that of a
 * Conv2D that runs the layers after it fused, nor of a fused layer but the
 * last. */
static int output_written(const mxu_model *m, int i) {
  const mxu_layer *layer = &m->layers[i];
  if (layer->compiled->fused_layers || layer->compiled->folded) return 0;
  if (!layer->compiled->absorbed) return 1;
  for (int j = 0; j < i; j++)
    if (m->layers[j].compiled->fused_layers &&
        m->layers[j].compiled->fused[m->layers[j].compiled->fused_layers - 1] ==
            layer)
      return 1;
  return 0;
}

static void check_same(const float *a, const float *b, int64_t count,
                       const char *what, const char *name, const char *node) {
  for (int64_t i = 0; i < count; i++) {
    double scale = fabs(a[i]) > fabs(b[i]) ? fabs(a[i]) : fabs(b[i]);
    if (!(fabs(a[i] - b[i]) <= 1e-4 * scale + 1e-5)) {
      CHECK_MSG(0, "%s: %s of %s [%lld]: cpu %.7g, cpu_ref %.7g", name, what,
                node, (long long)i, (double)a[i], (double)b[i]);
      return;
    }
  }
}

/* The same graph, seed and batch on both backends: every activation and
 * gradient the CPU backend writes, the weight gradients and the state;
 * model input `ids` (or -1) token ids (load_ids). */
static void backends_agree_ids(const char *name, graph_fn fn, const void *ctx,
                               int ids) {
  mxu_model *fast = build(name, fn, ctx, MXU_BACKEND_CPU);
  mxu_model *ref = build(name, fn, ctx, MXU_BACKEND_CPU_REF);
  if (!fast || !ref) {
    mxu_model_free(fast);
    mxu_model_free(ref);
    return;
  }
  load_inputs(fast, 4);
  load_inputs(ref, 4);
  load_ids(fast, ids);
  load_ids(ref, ids);
  CHECK(memcmp(fast->weights, ref->weights,
               (size_t)fast->trainable_count * sizeof(float)) == 0);
  mxu_step_result a = train_step(fast);
  mxu_step_result b = train_step(ref);
  CHECK_NEAR(a.loss_sum, b.loss_sum, 1e-4 * fabs(b.loss_sum) + 1e-5);
  for (int i = 0; i < fast->layer_count; i++) {
    if (!output_written(fast, i)) continue;
    const char *node = fast->layers[i].name;
    int64_t count = tensor_floats(fast, i);
    check_same(act(fast, i), act(ref, i), count, "activation", name, node);
    if (fast->layers[i].cls != &mxu_input_layer_class)
      check_same(grad(fast, i), grad(ref, i), count, "gradient", name, node);
  }
  check_same(fast->grads, ref->grads, fast->trainable_count, "weight gradient",
             name, "the model");
  check_same(fast->state, ref->state, fast->state_count, "state", name,
             "the model");
  mxu_model_free(fast);
  mxu_model_free(ref);
}

static void backends_agree(const char *name, graph_fn fn, const void *ctx) {
  backends_agree_ids(name, fn, ctx, -1);
}

/* ---- 1. every new layer ---------------------------------------------------
 * Each case: model inputs of the given shapes, each read by an identity,
 * the layer under test (named "under_test") over them, and the head. */

typedef struct layer_case layer_case;
struct layer_case {
  const char *name;
  int inputs;
  int64_t shape[3][3];
  int64_t out[3];
  int out_rank;
  /* one sample: x[k] input k's values, y the expected output */
  void (*expect)(const layer_case *c, const float *const *x, float *y);
  mxu_merge_kind kind;
  int axis;  /* Concatenate, as Keras counts it */
  int layer; /* not a merge: which (below) */
  mxu_relu_config relu;
  int keepdims, top, bottom, left, right;
  int64_t target[3]; /* Reshape */
  float alpha;       /* LeakyReLU, ELU; PReLU's initial slopes */
  int shared[2];     /* PReLU's shared axes, 0 for none */
  mxu_random_kind random_kind;
};

enum {
  MERGE = 0,
  GLOBAL_AVG,
  GLOBAL_MAX,
  ZERO_PAD,
  RELU,
  RESHAPE,
  LEAKY_RELU,
  ELU,
  SOFTMAX,
  PRELU,
  SEPARABLE,
  RANDOM,   /* .random_kind */
  CROP,     /* .top, .bottom, .left, .right */
  PERMUTE,  /* .target: the dims */
  UPSAMPLE, /* .keepdims: bilinear */
  UNIT_NORM,
  LAYER_NORM, /* .keepdims: groups */
  TRANSPOSE,  /* .keepdims: same */
  ACTIVITY,
  RMS_NORM /* .keepdims: LayerNormalization(rms_scaling), else RMSNormalization
            */
};

static int64_t count3(const int64_t *d) { return d[0] * d[1] * d[2]; }

static void elementwise_expect(const layer_case *c, const float *const *x,
                               float *y) {
  for (int64_t i = 0; i < count3(c->shape[0]); i++) {
    float v = x[0][i];
    for (int k = 1; k < c->inputs; k++) {
      float u = x[k][i];
      switch (c->kind) {
      case MXU_MERGE_SUBTRACT: v = v - u; break;
      case MXU_MERGE_MULTIPLY: v = v * u; break;
      case MXU_MERGE_MAXIMUM: v = u > v ? u : v; break;
      case MXU_MERGE_MINIMUM: v = u < v ? u : v; break;
      default: v = v + u;
      }
    }
    y[i] = c->kind == MXU_MERGE_AVERAGE ? v / (float)c->inputs : v;
  }
}

/* Cropping2D: the window of the input inside the margins. */
static void crop_expect(const layer_case *c, const float *const *x, float *y) {
  const int64_t *in = c->shape[0], *out = c->out;
  for (int64_t h = 0; h < out[0]; h++)
    for (int64_t w = 0; w < out[1]; w++)
      for (int64_t ch = 0; ch < out[2]; ch++)
        y[(h * out[1] + w) * out[2] + ch] =
            x[0][((h + c->top) * in[1] + w + c->left) * in[2] + ch];
}

/* Permute: output (i0, i1, i2) is input at those coordinates put back in
 * the input's order. */
static void permute_expect(const layer_case *c, const float *const *x,
                           float *y) {
  const int64_t *in = c->shape[0], *out = c->out;
  for (int64_t i = 0; i < count3(out); i++) {
    int64_t o[3] = {i / (out[1] * out[2]), i / out[2] % out[1], i % out[2]};
    int64_t a[3];
    for (int k = 0; k < 3; k++) a[c->target[k] - 1] = o[k];
    y[i] = x[0][(a[0] * in[1] + a[1]) * in[2] + a[2]];
  }
}

/* LeakyReLU, ELU and PReLU (whose slopes start at alpha everywhere):
 * Keras' formulas; Softmax over the last axis. */
static void slope_expect(const layer_case *c, const float *const *x, float *y) {
  for (int64_t i = 0; i < count3(c->shape[0]); i++) {
    float v = x[0][i];
    y[i] = v > 0             ? v
           : c->layer == ELU ? (float)(c->alpha * expm1((double)v))
                             : c->alpha * v;
  }
}

/* Keras 3's formulas over the last axis, the scale still all ones:
 * RMSNormalization x / sqrt(mean(x^2) + 1e-6); LayerNormalization's
 * rms_scaling x / sqrt(var(x) + 1e-3). */
static void rms_expect(const layer_case *c, const float *const *x, float *y) {
  int64_t k = c->shape[0][2];
  for (int64_t r = 0; r < count3(c->shape[0]) / k; r++) {
    const float *v = x[0] + r * k;
    double mean = 0.0, squares = 0.0;
    for (int64_t j = 0; j < k && c->keepdims; j++) mean += v[j] / (double)k;
    for (int64_t j = 0; j < k; j++) squares += (v[j] - mean) * (v[j] - mean);
    double inv = 1.0 / sqrt(squares / (double)k + (c->keepdims ? 1e-3 : 1e-6));
    for (int64_t j = 0; j < k; j++) y[r * k + j] = (float)(v[j] * inv);
  }
}

static void softmax_expect(const layer_case *c, const float *const *x,
                           float *y) {
  int64_t k = c->shape[0][2];
  for (int64_t r = 0; r < count3(c->shape[0]) / k; r++) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++) sum += exp((double)x[0][r * k + j]);
    for (int64_t j = 0; j < k; j++)
      y[r * k + j] = (float)(exp((double)x[0][r * k + j]) / sum);
  }
}

/* Inputs broadcast to the output: a dim of 1 repeats its one value. */
static void broadcast_expect(const layer_case *c, const float *const *x,
                             float *y) {
  const int64_t *o = c->out;
  for (int64_t h = 0; h < o[0]; h++)
    for (int64_t w = 0; w < o[1]; w++)
      for (int64_t ch = 0; ch < o[2]; ch++) {
        float v = 0.0f;
        for (int k = 0; k < c->inputs; k++) {
          const int64_t *d = c->shape[k];
          float u =
              x[k][((d[0] > 1 ? h : 0) * d[1] + (d[1] > 1 ? w : 0)) * d[2] +
                   (d[2] > 1 ? ch : 0)];
          if (k == 0)
            v = u;
          else if (c->kind == MXU_MERGE_MULTIPLY)
            v *= u;
          else if (c->kind == MXU_MERGE_MAXIMUM)
            v = u > v ? u : v;
          else
            v += u;
        }
        y[(h * o[1] + w) * o[2] + ch] = v;
      }
}

/* Output position by position: which input holds it, and where. */
static void concatenate_expect(const layer_case *c, const float *const *x,
                               float *y) {
  int axis = c->axis < 0 ? 3 + c->axis : c->axis - 1;
  int64_t out[3] = {c->shape[0][0], c->shape[0][1], c->shape[0][2]};
  out[axis] = 0;
  for (int k = 0; k < c->inputs; k++) out[axis] += c->shape[k][axis];
  for (int64_t a = 0; a < out[0]; a++)
    for (int64_t b = 0; b < out[1]; b++)
      for (int64_t d = 0; d < out[2]; d++) {
        int64_t at[3] = {a, b, d};
        int k = 0;
        while (at[axis] >= c->shape[k][axis]) at[axis] -= c->shape[k++][axis];
        const int64_t *s = c->shape[k];
        y[(a * out[1] + b) * out[2] + d] =
            x[k][(at[0] * s[1] + at[1]) * s[2] + at[2]];
      }
}

static void global_pool_expect(const layer_case *c, const float *const *x,
                               float *y) {
  int64_t h = c->shape[0][0], w = c->shape[0][1], ch = c->shape[0][2];
  for (int64_t k = 0; k < ch; k++) {
    double sum = 0;
    float best = x[0][k];
    for (int64_t r = 0; r < h; r++)
      for (int64_t col = 0; col < w; col++) {
        float v = x[0][(r * w + col) * ch + k];
        sum += v;
        if (v > best) best = v;
      }
    y[k] = c->layer == GLOBAL_MAX ? best : (float)(sum / (double)(h * w));
  }
}

static void zero_padding_expect(const layer_case *c, const float *const *x,
                                float *y) {
  int64_t h = c->shape[0][0], w = c->shape[0][1], ch = c->shape[0][2];
  int64_t out_h = h + c->top + c->bottom, out_w = w + c->left + c->right;
  for (int64_t r = 0; r < out_h; r++)
    for (int64_t col = 0; col < out_w; col++)
      for (int64_t k = 0; k < ch; k++) {
        int64_t ir = r - c->top, ic = col - c->left;
        int inside = ir >= 0 && ir < h && ic >= 0 && ic < w;
        y[(r * out_w + col) * ch + k] =
            inside ? x[0][(ir * w + ic) * ch + k] : 0.0f;
      }
}

/* Keras' ReLU as keras.activations.relu writes it: x * (x > threshold)
 * (relu(x) when threshold is 0), clipped to [0, max_value] when there is
 * one, minus negative_slope * relu(threshold - x). */
static void relu_expect(const layer_case *c, const float *const *x, float *y) {
  const mxu_relu_config *r = &c->relu;
  for (int64_t i = 0; i < count3(c->shape[0]); i++) {
    float v = x[0][i];
    float negative = r->threshold - v > 0 ? r->threshold - v : 0.0f;
    float out =
        r->threshold != 0 ? (v > r->threshold ? v : 0.0f) : (v > 0 ? v : 0.0f);
    if (r->max_value >= 0)
      out = out < 0 ? 0.0f : out > r->max_value ? r->max_value : out;
    y[i] = out - r->negative_slope * negative;
  }
}

static void copy_expect(const layer_case *c, const float *const *x, float *y) {
  memcpy(y, x[0], (size_t)count3(c->shape[0]) * sizeof(float));
}

static mxu_tensor_id case_graph(mxu_model *m, const void *ctx) {
  const layer_case *c = ctx;
  mxu_tensor_id x[3];
  for (int k = 0; k < c->inputs; k++) x[k] = input_identity(m, c->shape[k]);
  mxu_tensor_id y = -1;
  switch (c->layer) {
  case MERGE:
    y = mxu_merge(m, c->kind, "under_test", x, c->inputs, c->axis);
    break;
  case GLOBAL_AVG:
  case GLOBAL_MAX: {
    mxu_global_pool2d_config g = {"under_test", c->layer == GLOBAL_MAX,
                                  c->keepdims};
    y = mxu_apply_global_pooling2d(m, &g, x[0]);
    break;
  }
  case ZERO_PAD: {
    mxu_zero_padding2d_config p = {"under_test", c->top, c->bottom, c->left,
                                   c->right};
    y = mxu_apply_zero_padding2d(m, &p, x[0]);
    break;
  }
  case RELU: {
    mxu_relu_config r = c->relu;
    r.name = "under_test";
    y = mxu_apply_relu(m, &r, x[0]);
    break;
  }
  case RESHAPE: {
    mxu_reshape_config r = {"under_test", mxu_shape_make(3, c->target)};
    y = mxu_apply_reshape(m, &r, x[0]);
    break;
  }
  case LEAKY_RELU:
    y = mxu_apply_leaky_relu(m, "under_test", c->alpha, x[0]);
    break;
  case ELU: y = mxu_apply_elu(m, "under_test", c->alpha, x[0]); break;
  case SOFTMAX: y = mxu_apply_softmax(m, "under_test", x[0]); break;
  case RANDOM: {
    mxu_random_config r = mxu_random_defaults(c->random_kind);
    r.name = "under_test";
    r.height[0] = r.width[0] = -0.3f, r.height[1] = r.width[1] = 0.2f;
    r.has_width = 1;
    r.factor[0] = -0.1f, r.factor[1] = 0.1f;
    r.fill_mode = c->random_kind == MXU_RANDOM_ZOOM ? MXU_FILL_CONSTANT
                                                    : MXU_FILL_REFLECT;
    r.height_px = 3, r.width_px = 2;             /* RandomCrop */
    if (c->random_kind == MXU_RANDOM_CONTRAST) { /* [0.7, 1.2], no clip */
      r.factor[0] = 0.3f, r.factor[1] = 0.2f;
      r.value_range[0] = -100.0f, r.value_range[1] = 100.0f;
    }
    y = mxu_apply_random(m, &r, x[0]);
    break;
  }
  case CROP: {
    mxu_cropping2d_config crop = {"under_test", c->top, c->bottom, c->left,
                                  c->right};
    y = mxu_apply_cropping2d(m, &crop, x[0]);
    break;
  }
  case PERMUTE: {
    mxu_permute_config p = {
        "under_test",
        {(int)c->target[0], (int)c->target[1], (int)c->target[2]},
        3};
    y = mxu_apply_permute(m, &p, x[0]);
    break;
  }
  case UPSAMPLE: {
    mxu_upsampling2d_config u = {"under_test", {2, 3}, c->keepdims};
    y = mxu_apply_upsampling2d(m, &u, x[0]);
    break;
  }
  case LAYER_NORM: {
    mxu_layer_norm_config n = mxu_layer_norm_defaults(c->keepdims);
    n.name = "under_test";
    y = mxu_apply_layer_normalization(m, &n, x[0]);
    break;
  }
  case TRANSPOSE: {
    mxu_conv2d_transpose_config t = mxu_conv2d_defaults(3, 3, 2);
    t.name = "under_test";
    t.strides[0] = 2;
    t.padding = c->keepdims ? MXU_SAME : MXU_VALID;
    t.activation = c->keepdims ? MXU_TANH : MXU_GELU;
    y = mxu_apply_conv2d_transpose(m, &t, x[0]);
    break;
  }
  case ACTIVITY:
    y = mxu_apply_activity_regularization(m, "under_test", 0.05f, 0.1f, x[0]);
    break;
  case RMS_NORM: {
    mxu_layer_norm_config n = mxu_layer_norm_defaults(0);
    n.name = "under_test";
    n.rms_scaling = 1;
    y = c->keepdims ? mxu_apply_layer_normalization(m, &n, x[0])
                    : mxu_apply_rms_normalization(m, "under_test", 1e-6f, x[0]);
    break;
  }
  case UNIT_NORM:
    y = mxu_apply_unit_normalization(m, "under_test", x[0]);
    break;
  case SEPARABLE: {
    mxu_separable_conv2d_config c2 = mxu_separable_conv2d_defaults(5, 3, 2);
    c2.name = "under_test";
    c2.padding = MXU_SAME;
    c2.depth_multiplier = 2;
    c2.activation = MXU_SILU;
    y = mxu_apply_separable_conv2d(m, &c2, x[0]);
    break;
  }
  case PRELU: {
    mxu_prelu_config p = {0};
    p.name = "under_test";
    p.alpha.initializer.kind = MXU_INIT_CONSTANT;
    p.alpha.initializer.value = c->alpha;
    for (int k = 0; k < 2 && c->shared[k]; k++)
      p.shared_axes[p.shared_axis_count++] = c->shared[k];
    y = mxu_apply_prelu(m, &p, x[0]);
    break;
  }
  }
  return head(m, y);
}

/* The layer's output against the case's loops, sample by sample. */
static void check_forward(const layer_case *c) {
  mxu_model *m = build(c->name, case_graph, c, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test");
  CHECK(node >= 0);
  if (node < 0) {
    mxu_model_free(m);
    return;
  }
  const mxu_shape *s = &m->layers[node].out_shape;
  int same = s->rank == c->out_rank;
  for (int d = 0; same && d < s->rank; d++) same = s->dims[d] == c->out[d];
  CHECK_MSG(same, "%s: output shape of rank %d, (%lld, %lld, %lld)", c->name,
            s->rank, (long long)s->dims[0], (long long)s->dims[1],
            (long long)s->dims[2]);
  CHECK(m->layers[node].input_count == c->inputs);
  load_inputs(m, 8);
  train_step(m);
  int64_t out_count = mxu_shape_count(s);
  float *want = malloc((size_t)out_count * sizeof(float));
  for (int r = 0; r < BATCH; r++) {
    const float *x[3];
    for (int k = 0; k < c->inputs; k++)
      x[k] = act(m, m->inputs[k]) + r * count3(c->shape[k]);
    c->expect(c, x, want);
    const float *got = act(m, node) + r * out_count;
    for (int64_t i = 0; i < out_count; i++)
      if (!(fabs(got[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-6)) {
        CHECK_MSG(0, "%s: sample %d value %lld: %.7g, want %.7g", c->name, r,
                  (long long)i, (double)got[i], (double)want[i]);
        break;
      }
  }
  free(want);
  mxu_model_free(m);
}

#define SHAPE342                                                               \
  { 3, 4, 2 }
#define MERGE_CASE(label, k, n)                                                \
  {                                                                            \
    .name = label, .inputs = n, .shape = {SHAPE342, SHAPE342, SHAPE342},       \
    .out = SHAPE342, .out_rank = 3, .expect = elementwise_expect, .kind = k,   \
    .layer = MERGE                                                             \
  }
#define RELU_CASE(label, top, slope, threshold)                                \
  {                                                                            \
    .name = label, .inputs = 1, .shape = {SHAPE342}, .out = SHAPE342,          \
    .out_rank = 3, .expect = relu_expect, .layer = RELU, .relu = {             \
      NULL,                                                                    \
      top,                                                                     \
      slope,                                                                   \
      threshold                                                                \
    }                                                                          \
  }

static const layer_case layer_cases[] = {
    MERGE_CASE("Add of 3", MXU_MERGE_ADD, 3),
    MERGE_CASE("Subtract", MXU_MERGE_SUBTRACT, 2),
    MERGE_CASE("Multiply of 3", MXU_MERGE_MULTIPLY, 3),
    MERGE_CASE("Average of 3", MXU_MERGE_AVERAGE, 3),
    MERGE_CASE("Maximum of 3", MXU_MERGE_MAXIMUM, 3),
    MERGE_CASE("Minimum", MXU_MERGE_MINIMUM, 2),
    {.name = "Multiply (3, 4, 2) by (1, 1, 2): squeeze-and-excitation",
     .inputs = 2,
     .shape = {SHAPE342, {1, 1, 2}},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = broadcast_expect,
     .kind = MXU_MERGE_MULTIPLY,
     .layer = MERGE},
    {.name = "Multiply (1, 1, 2) by (3, 4, 2): the scale first",
     .inputs = 2,
     .shape = {{1, 1, 2}, SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = broadcast_expect,
     .kind = MXU_MERGE_MULTIPLY,
     .layer = MERGE},
    {.name = "Add (3, 1, 2), (1, 4, 2), (3, 4, 1)",
     .inputs = 3,
     .shape = {{3, 1, 2}, {1, 4, 2}, {3, 4, 1}},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = broadcast_expect,
     .kind = MXU_MERGE_ADD,
     .layer = MERGE},
    {.name = "Maximum (3, 4, 1), (3, 4, 2)",
     .inputs = 2,
     .shape = {{3, 4, 1}, SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = broadcast_expect,
     .kind = MXU_MERGE_MAXIMUM,
     .layer = MERGE},
    {.name = "Concatenate axis -1",
     .inputs = 2,
     .shape = {{3, 4, 2}, {3, 4, 3}},
     .out = {3, 4, 5},
     .out_rank = 3,
     .expect = concatenate_expect,
     .kind = MXU_MERGE_CONCATENATE,
     .axis = -1,
     .layer = MERGE},
    {.name = "Concatenate axis 2 (width)",
     .inputs = 2,
     .shape = {{3, 4, 2}, {3, 2, 2}},
     .out = {3, 6, 2},
     .out_rank = 3,
     .expect = concatenate_expect,
     .kind = MXU_MERGE_CONCATENATE,
     .axis = 2,
     .layer = MERGE},
    {.name = "Concatenate axis 1 (height) of 3",
     .inputs = 3,
     .shape = {{3, 4, 2}, {1, 4, 2}, {2, 4, 2}},
     .out = {6, 4, 2},
     .out_rank = 3,
     .expect = concatenate_expect,
     .kind = MXU_MERGE_CONCATENATE,
     .axis = 1,
     .layer = MERGE},
    {.name = "GlobalAveragePooling2D",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {2},
     .out_rank = 1,
     .expect = global_pool_expect,
     .layer = GLOBAL_AVG},
    {.name = "GlobalAveragePooling2D keepdims",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {1, 1, 2},
     .out_rank = 3,
     .expect = global_pool_expect,
     .layer = GLOBAL_AVG,
     .keepdims = 1},
    {.name = "GlobalMaxPooling2D",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {2},
     .out_rank = 1,
     .expect = global_pool_expect,
     .layer = GLOBAL_MAX},
    {.name = "GlobalMaxPooling2D keepdims",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {1, 1, 2},
     .out_rank = 3,
     .expect = global_pool_expect,
     .layer = GLOBAL_MAX,
     .keepdims = 1},
    {.name = "ZeroPadding2D ((1, 2), (0, 3))",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {6, 7, 2},
     .out_rank = 3,
     .expect = zero_padding_expect,
     .layer = ZERO_PAD,
     .top = 1,
     .bottom = 2,
     .left = 0,
     .right = 3},
    RELU_CASE("ReLU default", -1.0f, 0.0f, 0.0f),
    RELU_CASE("ReLU max 6 (relu6, the backend's op)", 6.0f, 0.0f, 0.0f),
    RELU_CASE("ReLU max 1.5 slope 0.2 threshold 0.5", 1.5f, 0.2f, 0.5f),
    RELU_CASE("ReLU slope 0.1 threshold -0.5", -1.0f, 0.1f, -0.5f),
    RELU_CASE("ReLU max 1 slope 0.3", 1.0f, 0.3f, 0.0f),
    RELU_CASE("ReLU max 1 threshold -0.5", 1.0f, 0.0f, -0.5f),
    {.name = "LeakyReLU 0.1",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = slope_expect,
     .layer = LEAKY_RELU,
     .alpha = 0.1f},
    {.name = "ELU 0.5",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = slope_expect,
     .layer = ELU,
     .alpha = 0.5f},
    {.name = "Softmax",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = softmax_expect,
     .layer = SOFTMAX},
    {.name = "PReLU",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = slope_expect,
     .layer = PRELU,
     .alpha = 0.25f},
    {.name = "PReLU shared_axes [1, 2]",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = slope_expect,
     .layer = PRELU,
     .alpha = 0.25f,
     .shared = {1, 2}},
    {.name = "SeparableConv2D (its values: the golden surface test)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {3, 4, 5},
     .out_rank = 3,
     .expect = NULL,
     .layer = SEPARABLE},
    /* Augmentation: backward is the transform's adjoint (the transform is
     * linear in the image for its drawn parameters). */
    {.name = "RandomFlip",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_FLIP},
    {.name = "RandomTranslation reflect",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_TRANSLATION},
    {.name = "RandomRotation reflect",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_ROTATION},
    {.name = "RandomCrop",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {3, 2, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_CROP},
    {.name = "RandomContrast",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_CONTRAST},
    {.name = "RandomZoom constant",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_ZOOM},
    {.name = "RandomShear",
     .inputs = 1,
     .shape = {{5, 4, 2}},
     .out = {5, 4, 2},
     .out_rank = 3,
     .layer = RANDOM,
     .random_kind = MXU_RANDOM_SHEAR},
    {.name = "Cropping2D ((1, 0), (2, 1))",
     .inputs = 1,
     .shape = {{4, 5, 2}},
     .out = {3, 2, 2},
     .out_rank = 3,
     .expect = crop_expect,
     .layer = CROP,
     .top = 1,
     .left = 2,
     .right = 1},
    {.name = "Permute (3, 1, 2)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {2, 3, 4},
     .out_rank = 3,
     .expect = permute_expect,
     .layer = PERMUTE,
     .target = {3, 1, 2}},
    {.name = "UpSampling2D (2, 3) nearest (values: the golden surface test)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {6, 12, 2},
     .out_rank = 3,
     .layer = UPSAMPLE},
    {.name = "UpSampling2D (2, 3) bilinear",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {6, 12, 2},
     .out_rank = 3,
     .layer = UPSAMPLE,
     .keepdims = 1},
    {.name = "UnitNormalization (values: the golden surface test)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .layer = UNIT_NORM},
    {.name = "LayerNormalization (values: the golden surface test)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .layer = LAYER_NORM},
    {.name = "GroupNormalization 2 groups",
     .inputs = 1,
     .shape = {{3, 4, 6}},
     .out = {3, 4, 6},
     .out_rank = 3,
     .layer = LAYER_NORM,
     .keepdims = 2},
    {.name = "RMSNormalization",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = rms_expect,
     .layer = RMS_NORM},
    {.name = "LayerNormalization rms_scaling",
     .inputs = 1,
     .shape = {{3, 4, 6}},
     .out = {3, 4, 6},
     .out_rank = 3,
     .expect = rms_expect,
     .layer = RMS_NORM,
     .keepdims = 1},
    {.name = "Conv2DTranspose same (values: the golden surface test)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {6, 4, 3},
     .out_rank = 3,
     .layer = TRANSPOSE,
     .keepdims = 1},
    {.name = "Conv2DTranspose valid",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {7, 5, 3},
     .out_rank = 3,
     .layer = TRANSPOSE},
    {.name = "ActivityRegularization (its penalty in the loss)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = SHAPE342,
     .out_rank = 3,
     .expect = copy_expect,
     .layer = ACTIVITY},
    {.name = "Reshape (2, -1, 3)",
     .inputs = 1,
     .shape = {SHAPE342},
     .out = {2, 4, 3},
     .out_rank = 3,
     .expect = copy_expect,
     .layer = RESHAPE,
     .target = {2, -1, 3}},
};

static void test_layers(void) {
  for (size_t i = 0; i < sizeof layer_cases / sizeof *layer_cases; i++) {
    const layer_case *c = &layer_cases[i];
    if (c->expect) check_forward(c);
    mxu_model *m = build(c->name, case_graph, c, MXU_BACKEND_CPU_REF);
    finite_differences(m, c->name);
    mxu_model_free(m);
    backends_agree(c->name, case_graph, c);
  }
}

/* Dropout with a noise_shape (Keras' (None, 1, 1, C), EfficientNet's
 * (None, 1, 1, 1)), SpatialDropout1D/2D/3D and AlphaDropout: in training one
 * draw per sample and shared dims, so every value of a run sharing a draw is
 * kept (y = a x + b: 1 / (1 - rate) x for Dropout, Keras' affine map for
 * AlphaDropout) or dropped (y = 0, AlphaDropout's saturation) alike; finite
 * differences and cpu_ref over the same masks. */
typedef struct noise_case {
  const char *name;
  int64_t noise[3];
  int kind; /* mxu_apply_dropout_noise's */
} noise_case;

static int is_spatial_kind(int kind) {
  return kind == MXU_SPATIAL_1D || kind == MXU_SPATIAL_2D ||
         kind == MXU_SPATIAL_3D;
}

static mxu_tensor_id noise_graph(mxu_model *m, const void *ctx) {
  const noise_case *c = ctx;
  static const int64_t shape[3] = {3, 4, 5};
  mxu_tensor_id x = input_identity(m, shape);
  if (c->kind == MXU_SPATIAL_1D) { /* 12 steps of 5 channels */
    mxu_reshape_config r = {"steps", {2, {12, 5}}};
    x = mxu_apply_reshape(m, &r, x);
  }
  if (c->kind == MXU_SPATIAL_3D) { /* a volume of 3 x 2 x 2, 5 channels */
    mxu_reshape_config r = {"volume", {4, {3, 2, 2, 5}}};
    x = mxu_apply_reshape(m, &r, x);
  }
  int per_value = !(c->noise[0] || c->noise[1] || c->noise[2]);
  mxu_shape noise = is_spatial_kind(c->kind) || per_value
                        ? (mxu_shape){0}
                        : mxu_shape_make(3, c->noise);
  return head(
      m, mxu_apply_dropout_noise(m, "under_test", 0.5f, noise, c->kind, x));
}

/* Keras' AlphaDropout at rate q, as its call writes it: a and b, and the
 * value a dropped one takes. */
static void alpha_dropout_affine(double q, double *a, double *b,
                                 double *dropped) {
  double alpha_p =
      -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946;
  *a = pow((1 - q) * (1 + q * alpha_p * alpha_p), -0.5);
  *b = -*a * alpha_p * q;
  *dropped = *a * alpha_p + *b;
}

/* 1 if y is x kept, 0 if dropped, -1 if neither. */
static int kept_or_dropped(int kind, float x, float y) {
  double a = 2.0, b = 0.0, dropped = 0.0;
  if (kind == MXU_ALPHA_DROPOUT) alpha_dropout_affine(0.5, &a, &b, &dropped);
  if (fabs(y - (a * x + b)) <= 1e-6 * (1 + fabs(y))) return 1;
  return fabs(y - dropped) <= 1e-6 ? 0 : -1;
}

static void check_shared_mask(const noise_case *c, mxu_backend_kind kind) {
  mxu_model *m = build(c->name, noise_graph, c, kind);
  if (!m) return;
  int node = node_named(m, "under_test");
  load_inputs(m, 4);
  train_step(m);
  const float *x = act(m, m->layers[node].inputs[0]), *y = act(m, node);
  int64_t dims[3] = {3, 4, 5}, shared[3];
  for (int d = 0; d < 3; d++)
    shared[d] = is_spatial_kind(c->kind) ? d < 2 : c->noise[d] == 1;
  int kept = 0, dropped = 0, bad = 0;
  for (int r = 0; r < BATCH; r++)
    for (int64_t i = 0; i < 60; i++) {
      int64_t h = i / 20, w = i / 5 % 4, ch = i % 5;
      /* the first value of the run this one shares its draw with */
      int64_t j = ((shared[0] ? 0 : h) * dims[1] + (shared[1] ? 0 : w)) * 5 +
                  (shared[2] ? 0 : ch);
      int ki = kept_or_dropped(c->kind, x[r * 60 + i], y[r * 60 + i]),
          kj = kept_or_dropped(c->kind, x[r * 60 + j], y[r * 60 + j]);
      bad += ki < 0 || ki != kj;
      if (i == j) ki == 0 ? dropped++ : kept++;
    }
  /* Both kinds of draw, where there are enough draws to expect them. */
  CHECK_MSG(bad == 0 && (kept + dropped < 10 || (kept > 0 && dropped > 0)),
            "%s: %d values off their run's mask (%d draws kept, %d dropped)",
            c->name, bad, kept, dropped);
  mxu_model_free(m);
}

/* AlphaDropout keeps the mean 0 and variance 1 of a normalized input (what
 * it is for, after SELU), and drops about its rate of the values. */
static mxu_tensor_id alpha_moments_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {10, 10, 100};
  mxu_tensor_id x = input_identity(m, shape);
  return head(m, mxu_apply_dropout_noise(m, "under_test", 0.3f, (mxu_shape){0},
                                         MXU_ALPHA_DROPOUT, x));
}

static void test_alpha_dropout_moments(void) {
  mxu_model *m = build("AlphaDropout's moments", alpha_moments_graph, NULL,
                       MXU_BACKEND_CPU);
  if (!m) return;
  load_inputs(m, 4);
  int node = node_named(m, "under_test"), in = m->inputs[0];
  int64_t n = tensor_floats(m, node);
  float *u = act(m, in);
  for (int64_t i = 0; i < n; i++) u[i] *= 0.8660254f; /* variance 1 */
  train_step(m);
  const float *y = act(m, node);
  double a, b, dropped, sum = 0, squares = 0;
  alpha_dropout_affine(0.3, &a, &b, &dropped);
  int64_t drops = 0;
  for (int64_t i = 0; i < n; i++) {
    sum += y[i];
    squares += (double)y[i] * y[i];
    drops += fabs(y[i] - dropped) < 1e-6;
  }
  double mean = sum / (double)n, variance = squares / (double)n - mean * mean;
  CHECK_MSG(fabs(mean) < 0.03 && fabs(variance - 1) < 0.05 &&
                fabs((double)drops / (double)n - 0.3) < 0.02,
            "AlphaDropout(0.3) of a mean 0, variance 1 input: mean %.4f, "
            "variance %.4f, %.4f dropped",
            mean, variance, (double)drops / (double)n);
  mxu_model_free(m);
}

static void test_dropout_noise(void) {
  static const noise_case cases[] = {
      {"Dropout noise_shape (None, 1, 1, 5)", {1, 1, 0}, 0},
      {"Dropout noise_shape (None, 1, 1, 1)", {1, 1, 1}, 0},
      {"Dropout noise_shape (None, 3, 1, None)", {3, 1, 0}, 0},
      {"SpatialDropout2D", {0, 0, 0}, MXU_SPATIAL_2D},
      {"SpatialDropout1D over the 12 steps", {0, 0, 0}, MXU_SPATIAL_1D},
      {"SpatialDropout3D over a 3 x 2 x 2 volume", {0, 0, 0}, MXU_SPATIAL_3D},
      {"AlphaDropout", {0, 0, 0}, MXU_ALPHA_DROPOUT},
      {"AlphaDropout noise_shape (None, 1, 1, 5)",
       {1, 1, 0},
       MXU_ALPHA_DROPOUT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    /* cpu scales by the draws where the noise is per sample or channel */
    check_shared_mask(&cases[i], MXU_BACKEND_CPU);
    check_shared_mask(&cases[i], MXU_BACKEND_CPU_REF);
    mxu_model *m =
        build(cases[i].name, noise_graph, &cases[i], MXU_BACKEND_CPU_REF);
    finite_differences(m, cases[i].name);
    mxu_model_free(m);
    backends_agree(cases[i].name, noise_graph, &cases[i]);
  }
}

/* Rescaling then Normalization (invert or not): y = (0.5 x + 0.25 -
 * mean) / max(sqrt(variance), 1e-7) per channel (x * that + mean
 * inverted). The statistics are the layer's weights, set here (a zero
 * variance at the epsilon), or given in its config (Keras' mean and
 * variance arguments): one per channel, or one for every channel. */
typedef struct normalization_case {
  const char *name;
  int invert, given; /* given: mxu_normalization_config's */
  float mean[4], variance[4];
} normalization_case;

static mxu_tensor_id preprocessing_graph(mxu_model *m, const void *ctx) {
  const normalization_case *c = ctx;
  static const int64_t shape[3] = {2, 3, 4};
  mxu_rescaling_config r = {"rescaling", 0.5f, 0.25f};
  mxu_normalization_config n = {"under_test", c->invert, c->given, {0}, {0}};
  memcpy(n.mean, c->mean, sizeof c->mean);
  memcpy(n.variance, c->variance, sizeof c->variance);
  mxu_tensor_id x = input_identity(m, shape);
  return head(m, mxu_apply_normalization(m, &n, mxu_apply_rescaling(m, &r, x)));
}

static void test_preprocessing(void) {
  static const normalization_case cases[] = {
      {"Normalization", 0, 0, {0.5f, -0.25f, 0.0f, 2.0f}, {4, 0.25f, 0, 1}},
      {"Normalization invert",
       1,
       0,
       {0.5f, -0.25f, 0.0f, 2.0f},
       {4, 0.25f, 0, 1}},
      {"Normalization given per channel",
       0,
       4,
       {0.5f, -0.25f, 0.0f, 2.0f},
       {4, 0.25f, 0.5f, 1}},
      {"Normalization given per channel, invert",
       1,
       4,
       {0.5f, -0.25f, 0.0f, 2.0f},
       {4, 0.25f, 0.5f, 1}},
      {"Normalization given one for all", 0, 1, {-0.5f}, {2.25f}},
      {"Normalization given one for all, invert", 1, 1, {-0.5f}, {2.25f}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const normalization_case *c = &cases[k];
    mxu_model *m = build(c->name, preprocessing_graph, c, MXU_BACKEND_CPU_REF);
    if (!m) continue;
    int node = node_named(m, "under_test"), weights = 0;
    for (int i = 0; i < m->param_count; i++) {
      const mxu_param *p = &m->params[i];
      if (p->layer != node) continue;
      weights++;
      if (p->count == 4)
        memcpy(mxu_param_values(m, p),
               strcmp(p->name, "mean") ? c->variance : c->mean, sizeof c->mean);
    }
    /* Given statistics are constants: no weights (Keras' too). */
    CHECK_MSG(weights == (c->given ? 0 : 3), "%s: %d weights", c->name,
              weights);
    load_inputs(m, 6);
    train_step(m);
    const float *x = act(m, m->inputs[0]), *y = act(m, node);
    int bad = 0;
    for (int64_t i = 0; i < tensor_floats(m, node); i++) {
      int ch = c->given == 1 ? 0 : (int)(i % 4);
      float root = sqrtf(c->variance[ch]), s = root > 1e-7f ? root : 1e-7f;
      float v = x[i] * 0.5f + 0.25f;
      float want = c->invert ? v * s + c->mean[ch] : (v - c->mean[ch]) / s;
      bad += !(fabsf(y[i] - want) <= 1e-6f * (1.0f + fabsf(want)));
    }
    CHECK_MSG(bad == 0, "%s: %d values off", c->name, bad);
    mxu_model_free(m);
    /* Finite differences at Keras' initial statistics (0 and 1), or at
     * the given ones. */
    m = build(c->name, preprocessing_graph, c, MXU_BACKEND_CPU_REF);
    finite_differences(m, c->name);
    mxu_model_free(m);
    backends_agree(c->name, preprocessing_graph, c);
  }
}

/* keras.applications ConvNeXt's LayerScale: y = x * gamma along the last
 * axis. gamma starts at init_values everywhere; set apart per channel
 * here, so that a channel read for another shows. */
static mxu_tensor_id layer_scale_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {2, 3, 4};
  mxu_layer_scale_config c = {"under_test", 0.5f, 4};
  return head(m, mxu_apply_layer_scale(m, &c, input_identity(m, shape)));
}

static void test_layer_scale(void) {
  static const float gamma[4] = {0.5f, -1.25f, 2.0f, 0.75f};
  const char *name = "LayerScale";
  mxu_model *m = build(name, layer_scale_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test");
  const mxu_param *p = NULL;
  for (int i = 0; i < m->param_count; i++)
    if (m->params[i].layer == node) p = &m->params[i];
  CHECK_MSG(p && strcmp(p->name, "gamma") == 0 && p->trainable && p->count == 4,
            "%s: no trainable gamma of 4 values", name);
  if (!p) {
    mxu_model_free(m);
    return;
  }
  float *w = mxu_param_values(m, p);
  int initial = 0;
  for (int i = 0; i < 4; i++) initial += w[i] == 0.5f;
  CHECK_MSG(initial == 4, "%s: gamma does not start at init_values", name);
  memcpy(w, gamma, sizeof gamma);
  load_inputs(m, 6);
  train_step(m);
  const float *x = act(m, m->layers[node].inputs[0]), *y = act(m, node);
  int bad = 0;
  for (int64_t i = 0; i < tensor_floats(m, node); i++)
    bad += y[i] != x[i] * gamma[i % 4];
  CHECK_MSG(bad == 0, "%s: %d values off", name, bad);
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, layer_scale_graph, NULL);
}

/* keras.applications InceptionResNetV2's CustomScaleLayer: y = a + b *
 * scale, rounded as Keras' float32 ops round it (the product, then the
 * sum); twice: of two tensors, and of one tensor read as both inputs
 * (y = x + x * scale, its gradient both inputs' summed). */
static mxu_tensor_id custom_scale_graph(mxu_model *m, const void *ctx) {
  static const int64_t shape[3] = {3, 4, 2};
  mxu_tensor_id a = input_identity(m, shape);
  mxu_tensor_id b = *(const int *)ctx ? a : input_identity(m, shape);
  return head(m, mxu_apply_custom_scale(m, "under_test", 0.17f, a, b));
}

static void test_custom_scale(void) {
  for (int one = 0; one < 2; one++) {
    const char *name =
        one ? "CustomScaleLayer of one tensor twice" : "CustomScaleLayer";
    mxu_model *m = build(name, custom_scale_graph, &one, MXU_BACKEND_CPU_REF);
    if (!m) continue;
    int node = node_named(m, "under_test");
    const mxu_layer *l = &m->layers[node];
    CHECK(l->input_count == 2 && (l->inputs[0] == l->inputs[1]) == one);
    load_inputs(m, 6);
    train_step(m);
    const float *a = act(m, l->inputs[0]), *b = act(m, l->inputs[1]);
    const float *y = act(m, node);
    int bad = 0;
    for (int64_t i = 0; i < tensor_floats(m, node); i++) {
      float product = b[i] * 0.17f;
      bad += y[i] != a[i] + product;
    }
    CHECK_MSG(bad == 0, "%s: %d values off", name, bad);
    finite_differences(m, name);
    mxu_model_free(m);
    backends_agree(name, custom_scale_graph, &one);
  }
}

/* GaussianNoise (stddev 0.5) and GaussianDropout (rate 0.2: factors of
 * stddev 0.5 about 1) in training: the noise's mean and spread over
 * 8 x 8 x 4 values a sample; inference passes values through. */
static mxu_tensor_id gaussian_graph(mxu_model *m, const void *ctx) {
  static const int64_t shape[3] = {8, 8, 4};
  mxu_tensor_id x = input_identity(m, shape);
  return head(m, *(const int *)ctx
                     ? mxu_apply_gaussian_dropout(m, "under_test", 0.2f, x)
                     : mxu_apply_gaussian_noise(m, "under_test", 0.5f, x));
}

/* RandomContrast (factor (0.3, 0.2): contrast in [0.7, 1.2]; values
 * clipped to [0, 1]): each image's channels keep their mean where nothing
 * is clipped, and y - mean = c (x - mean) with one c per image. */
static mxu_tensor_id contrast_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {4, 4, 2};
  mxu_random_config r = mxu_random_defaults(MXU_RANDOM_CONTRAST);
  r.name = "under_test";
  r.factor[0] = 0.3f, r.factor[1] = 0.2f;
  r.value_range[0] = -5.0f, r.value_range[1] = 1.0f;
  return head(m, mxu_apply_random(m, &r, input_identity(m, shape)));
}

static void test_random_contrast(void) {
  mxu_model *m =
      build("RandomContrast", contrast_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test"), bad = 0, clipped = 0;
  load_inputs(m, 12);
  train_step(m);
  const float *x = act(m, m->layers[node].inputs[0]), *y = act(m, node);
  for (int r = 0; r < BATCH; r++) {
    double c = NAN;
    for (int ch = 0; ch < 2; ch++) {
      double mean = 0.0;
      for (int i = ch; i < 32; i += 2) mean += x[r * 32 + i] / 16.0;
      for (int i = ch; i < 32; i += 2) {
        double want_c = (y[r * 32 + i] - mean) / (x[r * 32 + i] - mean);
        if (y[r * 32 + i] == 1.0f) {
          clipped++;
          continue;
        }
        if (isnan(c)) c = want_c;
        bad += !(fabs(want_c - c) < 1e-4 && c >= 0.7 - 1e-6 && c <= 1.2 + 1e-6);
      }
    }
  }
  CHECK_MSG(bad == 0 && clipped > 0,
            "RandomContrast: %d values off one factor per image (%d clipped)",
            bad, clipped);
  mxu_model_free(m);
}

/* RandomBrightness((-0.2, 0.3), value_range (-1, 1)): each image its own
 * delta in [-0.4, 0.6] (the range times value_range's width), the values
 * clipped to [-1, 1], whose gradient passes where unclipped only. */
static mxu_tensor_id brightness_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {4, 4, 2};
  mxu_random_config r = mxu_random_defaults(MXU_RANDOM_BRIGHTNESS);
  r.name = "under_test";
  r.factor[0] = -0.2f, r.factor[1] = 0.3f;
  r.value_range[0] = -1.0f, r.value_range[1] = 1.0f;
  return head(m, mxu_apply_random(m, &r, input_identity(m, shape)));
}

static void test_random_brightness(void) {
  mxu_model *m =
      build("RandomBrightness", brightness_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test"), in = m->layers[node].inputs[0];
  int bad = 0, clipped = 0, deltas = 0;
  load_inputs(m, 12);
  train_step(m);
  const float *x = act(m, in), *y = act(m, node);
  const float *dx = grad(m, in), *dy = grad(m, node);
  double first = NAN;
  for (int r = 0; r < BATCH; r++) {
    double delta = NAN; /* from the image's first unclipped value */
    for (int i = r * 32; i < r * 32 + 32 && isnan(delta); i++)
      if (fabsf(y[i]) < 1.0f) delta = y[i] - x[i];
    for (int i = r * 32; i < r * 32 + 32; i++) {
      int cut = fabs(x[i] + delta) > 1.0 + 1e-6;
      clipped += cut;
      bad += cut ? !(fabsf(y[i]) == 1.0f && dx[i] == 0.0f)
                 : !(fabs(y[i] - x[i] - delta) < 1e-5 && dx[i] == dy[i]);
    }
    bad += !(delta >= -0.4 - 1e-6 && delta <= 0.6 + 1e-6);
    if (r == 0) first = delta;
    deltas += r > 0 && fabs(delta - first) > 1e-6;
  }
  CHECK_MSG(bad == 0 && clipped > 0 && deltas > 0,
            "RandomBrightness: %d values off one delta per image (%d clipped, "
            "%d images unlike the first)",
            bad, clipped, deltas);
  mxu_model_free(m);
}

/* Keras 3's colour layers over 16 RGB images of values in [-2, 2)
 * (value_range (-2, 2)): each image its own draw, checked against Keras'
 * formulas image by image, with the gradient each map has; inference
 * passes the images through. */
typedef struct color_case {
  const char *name;
  mxu_random_kind kind;
  float factor[2], threshold[2];
} color_case;

enum { COLOR_BATCH = 16, COLOR_PER = 4 * 4 * 3 };

static mxu_tensor_id color_graph(mxu_model *m, const void *ctx) {
  const color_case *c = ctx;
  static const int64_t shape[3] = {4, 4, 3};
  mxu_random_config r = mxu_random_defaults(c->kind);
  r.name = "under_test";
  memcpy(r.factor, c->factor, sizeof r.factor);
  memcpy(r.threshold, c->threshold, sizeof r.threshold);
  r.value_range[0] = -2.0f, r.value_range[1] = 2.0f;
  return head(m, mxu_apply_random(m, &r, input_identity(m, shape)));
}

/* x of [-2, 2] on [0, 255] and back. */
static double to_bytes(double x) { return (x + 2.0) / 4.0 * 255.0; }
static double from_bytes(double v) { return v / 255.0 * 4.0 - 2.0; }

/* Whether y = clip(x + f (luma - x), -2, 2) for one f in the factor's
 * range, and dx that map's gradient of dy. */
static int color_degenerated(const color_case *c, const float *x,
                             const float *y, const float *dx, const float *dy) {
  static const double w[3] = {0.2989, 0.587, 0.114};
  double f = NAN;
  for (int i = 0; i < COLOR_PER && isnan(f); i++) {
    int p = i - i % 3;
    double g = w[0] * x[p] + w[1] * x[p + 1] + w[2] * x[p + 2];
    if (fabs(g - x[i]) > 0.1 && fabs(y[i]) < 1.99)
      f = (y[i] - x[i]) / (g - x[i]);
  }
  int fits = !isnan(f) && f >= c->factor[0] - 1e-5 && f <= c->factor[1] + 1e-5;
  for (int p = 0; p < COLOR_PER; p += 3) {
    double g = w[0] * x[p] + w[1] * x[p + 1] + w[2] * x[p + 2], through = 0;
    double pass[3];
    for (int k = 0; k < 3; k++) {
      double v = x[p + k] + f * (g - x[p + k]);
      pass[k] = v >= -2.0 && v <= 2.0;
      through += f * pass[k] * dy[p + k];
      fits &= fabs(y[p + k] - fmin(fmax(v, -2.0), 2.0)) < 1e-4;
    }
    for (int k = 0; k < 3; k++)
      fits &= fabs(dx[p + k] -
                   ((1.0 - f) * pass[k] * dy[p + k] + w[k] * through)) < 1e-5;
  }
  return fits;
}

/* Keras' RandomSharpness smoothing of a 4x4x3 image at value i. */
static double smoothed(const float *x, int i) {
  int r = i / 12, col = i / 3 % 4, k = i % 3;
  double sum = 0;
  for (int rr = r - 1; rr <= r + 1; rr++)
    for (int cc = col - 1; cc <= col + 1; cc++)
      if (rr >= 0 && rr < 4 && cc >= 0 && cc < 4)
        sum += (rr == r && cc == col ? 5.0 : 1.0) / 13.0 *
               x[(rr * 4 + cc) * 3 + k];
  return sum;
}

/* Whether y = clip(s x + (1 - s) smooth(x), -2, 2) for one s = 2 f, f in
 * the factor's range, and dx = s u + (1 - s) smooth(u), u the gradient
 * the clip passes. */
static int color_sharpened(const color_case *c, const float *x, const float *y,
                           const float *dx, const float *dy) {
  double s = NAN;
  float u[COLOR_PER];
  for (int i = 0; i < COLOR_PER && isnan(s); i++) {
    double sm = smoothed(x, i);
    if (fabs(sm - x[i]) > 0.1 && fabs(y[i]) < 1.99)
      s = 1.0 - (y[i] - x[i]) / (sm - x[i]);
  }
  int fits =
      !isnan(s) && s >= 2 * c->factor[0] - 1e-4 && s <= 2 * c->factor[1] + 1e-4;
  for (int i = 0; i < COLOR_PER; i++) {
    double v = s * x[i] + (1.0 - s) * smoothed(x, i);
    fits &= fabs(y[i] - fmin(fmax(v, -2.0), 2.0)) < 1e-4;
    u[i] = v >= -2.0 && v <= 2.0 ? dy[i] : 0.0f;
  }
  for (int i = 0; i < COLOR_PER; i++)
    fits &= fabs(dx[i] - (s * u[i] + (1.0 - s) * smoothed(u, i))) < 1e-5;
  return fits;
}

/* Whether image x maps to y with gradient dx of dy, as Keras' layer would
 * for some draw within its ranges: 1 if changed, 0 if passed through, -1
 * if neither. */
static int color_image(const color_case *c, const float *x, const float *y,
                       const float *dx, const float *dy) {
  int same = 1;
  for (int i = 0; i < COLOR_PER; i++) same &= y[i] == x[i] && dx[i] == dy[i];
  if (same && c->kind != MXU_SOLARIZATION &&
      c->kind != MXU_RANDOM_POSTERIZATION)
    return 0;
  int fits = 1;
  if (c->kind == MXU_RANDOM_GRAYSCALE) {
    for (int p = 0; p < COLOR_PER; p += 3) {
      double luma = 0.2989 * x[p] + 0.587 * x[p + 1] + 0.114 * x[p + 2];
      double g = (double)dy[p] + dy[p + 1] + dy[p + 2];
      for (int k = 0; k < 3; k++)
        fits &= fabs(y[p + k] - luma) < 1e-5 &&
                fabs(dx[p + k] - (k == 0   ? 0.2989
                                  : k == 1 ? 0.587
                                           : 0.114) *
                                     g) < 1e-6;
    }
  } else if (c->kind == MXU_RANDOM_INVERT) {
    for (int i = 0; i < COLOR_PER; i++)
      fits &= fabs(y[i] - (2.0 - x[i])) < 1e-6 && dx[i] == -dy[i];
  } else if (c->kind == MXU_RANDOM_COLOR_DEGENERATION) {
    fits = color_degenerated(c, x, y, dx, dy);
  } else if (c->kind == MXU_RANDOM_SHARPNESS) {
    fits = color_sharpened(c, x, y, dx, dy);
  } else if (c->kind == MXU_RANDOM_POSTERIZATION) {
    int any = 0; /* some number of bits in [2, 5) fits every value */
    for (int bits = 2; bits < 5 && !any; bits++) {
      int s = 8 - bits, all = 1;
      for (int i = 0; i < COLOR_PER; i++) {
        int q = ((int)to_bytes(x[i]) >> s) << s;
        all &= fabs(y[i] - from_bytes(q)) < 1e-5 && dx[i] == 0.0f;
      }
      any = all;
    }
    fits = any;
  } else if (c->factor[1] > 0.0f) {
    /* Solarization, threshold 0: y = 255 - clip(x + a), one a in [0, 51]. */
    double a = NAN;
    for (int i = 0; i < COLOR_PER; i++) {
      double v = to_bytes(x[i]), out = to_bytes(y[i]);
      if (out < 1e-3) { /* clipped at 255 */
        fits &= dx[i] == 0.0f;
        continue;
      }
      double here = 255.0 - out - v;
      if (isnan(a)) a = here;
      fits &= fabs(here - a) < 1e-3 && dx[i] == -dy[i];
    }
    fits &= isnan(a) || (a >= -1e-3 && a <= 51.0 + 1e-3);
  } else {
    /* Solarization, no addition: values below one threshold kept, the
     * others 255 - v. */
    double kept = -1.0, flipped = 256.0;
    for (int i = 0; i < COLOR_PER; i++) {
      double v = to_bytes(x[i]);
      if (fabs(y[i] - x[i]) < 1e-5 && dx[i] == dy[i])
        kept = fmax(kept, v);
      else if (fabs(to_bytes(y[i]) - (255.0 - v)) < 1e-3 && dx[i] == -dy[i])
        flipped = fmin(flipped, v);
      else
        fits = 0;
    }
    fits &= kept < flipped;
    return fits ? kept >= 0.0 && flipped <= 255.0 : -1;
  }
  return fits ? 1 : -1;
}

static void test_color_layers(void) {
  static const color_case cases[] = {
      {"RandomGrayscale(0.5)", MXU_RANDOM_GRAYSCALE, {0, 0.5f}, {0, 0}},
      {"RandomInvert((0, 1))", MXU_RANDOM_INVERT, {0, 1}, {0, 0}},
      {"Solarization(addition (0, 0.2))", MXU_SOLARIZATION, {0, 0.2f}, {0, 0}},
      {"Solarization(threshold (0, 1))", MXU_SOLARIZATION, {0, 0}, {0, 1}},
      {"RandomPosterization((2, 5))", MXU_RANDOM_POSTERIZATION, {2, 5}, {0, 0}},
      {"RandomColorDegeneration((-0.5, 0.5))",
       MXU_RANDOM_COLOR_DEGENERATION,
       {-0.5f, 0.5f},
       {0, 0}},
      {"RandomSharpness((0.1, 0.9))",
       MXU_RANDOM_SHARPNESS,
       {0.1f, 0.9f},
       {0, 0}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const color_case *c = &cases[k];
    mxu_compile_config cc = config_for(MXU_BACKEND_CPU_REF);
    cc.batch_size = COLOR_BATCH;
    mxu_model *m = build_with(c->name, color_graph, c, &cc);
    if (!m) continue;
    int node = node_named(m, "under_test"), in = m->layers[node].inputs[0];
    load_inputs(m, 21);
    train_step(m);
    const float *x = act(m, in), *y = act(m, node);
    const float *dx = grad(m, in), *dy = grad(m, node);
    int changed = 0, passed = 0, bad = 0;
    for (int r = 0; r < COLOR_BATCH; r++) {
      int o = r * COLOR_PER;
      int v = color_image(c, x + o, y + o, dx + o, dy + o);
      changed += v == 1, passed += v == 0, bad += v < 0;
    }
    /* Every image changes where the layer always applies. */
    int always = c->kind == MXU_SOLARIZATION ||
                 c->kind == MXU_RANDOM_POSTERIZATION ||
                 c->kind == MXU_RANDOM_COLOR_DEGENERATION ||
                 c->kind == MXU_RANDOM_SHARPNESS;
    CHECK_MSG(bad == 0 && changed > 0 && (always || passed > 0),
              "%s: %d images off Keras' map (%d changed, %d passed)", c->name,
              bad, changed, passed);
    float xs[COLOR_BATCH * COLOR_PER], probs[COLOR_BATCH * CLASSES];
    memcpy(xs, act(m, m->inputs[0]), sizeof xs);
    CHECK_OK(mxu_predict(m, xs, COLOR_BATCH, probs));
    CHECK_MSG(memcmp(act(m, node), xs, sizeof xs) == 0,
              "%s: inference changed the images", c->name);
    mxu_model_free(m);
  }
  /* RandomGrayscale reads RGB images only. */
  mxu_model *m = mxu_functional("gray");
  static const int64_t two[3] = {4, 4, 2};
  mxu_random_config r = mxu_random_defaults(MXU_RANDOM_GRAYSCALE);
  CHECK(mxu_apply_random(m, &r, input_identity(m, two)) < 0 &&
        strstr(mxu_errmsg(), "takes RGB images (3 channels), got 2"));
  mxu_model_free(m);
}

/* RandomCrop(3, 2) of a 4x6 image: in training each image a 3x2 window
 * of itself; in inference tf.keras 2's smart resize, whose output for
 * 0..23 tf.keras printed as 3, 4, 11, 12, 19, 20 (Keras 3.15 passes the
 * image through unchanged in inference, against its own output shape). */
static mxu_tensor_id crop_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {4, 6, 1};
  mxu_random_config r = mxu_random_defaults(MXU_RANDOM_CROP);
  r.name = "under_test";
  r.height_px = 3, r.width_px = 2;
  return head(m, mxu_apply_random(m, &r, input_identity(m, shape)));
}

static void test_random_crop(void) {
  mxu_model *m = build("RandomCrop", crop_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test"), windows = 0;
  float x[BATCH * 24], probs[BATCH * CLASSES];
  for (int i = 0; i < BATCH * 24; i++) x[i] = (float)(i % 24);
  memcpy(act(m, m->inputs[0]), x, sizeof x);
  train_step(m);
  const float *y = act(m, node);
  for (int r = 0; r < BATCH; r++) {
    int top = (int)y[r * 6] / 6, left = (int)y[r * 6] % 6, same = 1;
    for (int i = 0; i < 6; i++)
      same &= y[r * 6 + i] == (float)((top + i / 2) * 6 + left + i % 2);
    windows += same;
  }
  CHECK_MSG(windows == BATCH, "RandomCrop: %d of %d images are windows",
            windows, BATCH);
  static const float keras[6] = {3, 4, 11, 12, 19, 20};
  CHECK_OK(mxu_predict(m, x, BATCH, probs));
  for (int i = 0; i < 6; i++) CHECK_NEAR(act(m, node)[i], keras[i], 1e-5);
  mxu_model_free(m);
}

static void test_gaussian_layers(void) {
  for (int dropout = 0; dropout < 2; dropout++) {
    const char *name = dropout ? "GaussianDropout" : "GaussianNoise";
    mxu_model *m = build(name, gaussian_graph, &dropout, MXU_BACKEND_CPU_REF);
    if (!m) continue;
    int node = node_named(m, "under_test");
    load_inputs(m, 10);
    train_step(m);
    const float *x = act(m, m->layers[node].inputs[0]), *y = act(m, node);
    int64_t n = tensor_floats(m, node);
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = dropout ? (double)y[i] / x[i] - 1.0 : (double)y[i] - x[i];
      sum += e, squares += e * e;
    }
    double mean = sum / n, sd = sqrt(squares / n - mean * mean);
    /* n >= 768: the mean within 4 standard errors, the spread 15%. */
    CHECK_MSG(fabs(mean) < 4 * 0.5 / sqrt((double)n) && fabs(sd - 0.5) < 0.075,
              "%s: noise mean %.4f, sd %.4f over %lld values", name, mean, sd,
              (long long)n);
    float *copy = malloc((size_t)n * sizeof(float)), probs[BATCH * CLASSES];
    memcpy(copy, x, (size_t)n * sizeof(float));
    CHECK_OK(mxu_predict(m, copy, BATCH, probs));
    CHECK(memcmp(act(m, node), copy, (size_t)n * sizeof(float)) == 0);
    free(copy);
    mxu_model_free(m);
    m = build(name, gaussian_graph, &dropout, MXU_BACKEND_CPU_REF);
    finite_differences(m, name);
    mxu_model_free(m);
    backends_agree(name, gaussian_graph, &dropout);
  }
}

/* RandomFlip (horizontal) in training: each image itself or its mirror;
 * in inference every image itself. */
static mxu_tensor_id flip_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[3] = {3, 4, 2};
  mxu_random_config r = mxu_random_defaults(MXU_RANDOM_FLIP);
  r.name = "under_test";
  r.vertical = 0;
  return head(m, mxu_apply_random(m, &r, input_identity(m, shape)));
}

static void test_random_flip(void) {
  mxu_model *m = build("RandomFlip", flip_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test"), mirrored = 0, other = 0;
  load_inputs(m, 9);
  train_step(m);
  const float *x = act(m, m->layers[node].inputs[0]), *y = act(m, node);
  for (int r = 0; r < BATCH; r++) {
    int is_same = 1, is_mirror = 1;
    for (int i = 0; i < 24; i++) {
      int h = i / 8, w = i / 2 % 4, c = i % 2;
      is_same &= y[r * 24 + i] == x[r * 24 + i];
      is_mirror &= y[r * 24 + i] == x[r * 24 + (h * 4 + 3 - w) * 2 + c];
    }
    mirrored += is_mirror && !is_same;
    other += !is_same && !is_mirror;
  }
  CHECK_MSG(other == 0,
            "RandomFlip: %d images neither themselves nor "
            "mirrored (%d mirrored)",
            other, mirrored);
  float *copy = malloc(24 * BATCH * sizeof(float)), probs[BATCH * CLASSES];
  memcpy(copy, x, 24 * BATCH * sizeof(float));
  CHECK_OK(mxu_predict(m, copy, BATCH, probs));
  CHECK(memcmp(act(m, node), copy, 24 * BATCH * sizeof(float)) == 0);
  free(copy);
  mxu_model_free(m);
}

/* ---- 2. fan-out -------------------------------------------------------------
 */

static const int64_t small[3] = {4, 4, 2};

static mxu_conv2d_config conv_same(int filters, mxu_activation activation,
                                   const char *name) {
  mxu_conv2d_config conv = mxu_conv2d_defaults(filters, 3, 3);
  conv.padding = MXU_SAME;
  conv.activation = activation;
  conv.name = name;
  return conv;
}

/* x read by 2: a residual connection, x + conv(x). */
static mxu_tensor_id fan_out_2(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  mxu_conv2d_config conv = conv_same(2, MXU_TANH, "conv");
  return head(m, mxu_add(m, "sum", x, mxu_apply_conv2d(m, &conv, x)));
}

/* x read by 3, twice by one node: Concatenate([conv(x), Add()([x, x])]). */
static mxu_tensor_id fan_out_3(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  mxu_conv2d_config conv = conv_same(3, MXU_TANH, "conv");
  mxu_tensor_id a = mxu_apply_conv2d(m, &conv, x);
  mxu_tensor_id twice = mxu_add(m, "twice", x, x);
  mxu_tensor_id both[2] = {a, twice};
  return head(m, mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, both, 2, -1));
}

/* x read six times by four nodes, x * x read twice: Concatenate of
 * Subtract([Maximum([x, x * x]), conv(x * x)]), Average([x]) and
 * Maximum([x, x]) (a tie everywhere: all of the gradient goes to one). */
static mxu_tensor_id fan_out_square(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  mxu_tensor_id xx[2] = {x, x};
  mxu_tensor_id square = mxu_merge(m, MXU_MERGE_MULTIPLY, "square", xx, 2, -1);
  mxu_tensor_id pair[2] = {x, square};
  mxu_tensor_id top = mxu_merge(m, MXU_MERGE_MAXIMUM, NULL, pair, 2, -1);
  mxu_conv2d_config conv = conv_same(2, MXU_LINEAR, "conv");
  mxu_tensor_id diff[2] = {top, mxu_apply_conv2d(m, &conv, square)};
  mxu_tensor_id d = mxu_merge(m, MXU_MERGE_SUBTRACT, NULL, diff, 2, -1);
  mxu_tensor_id x_again = mxu_merge(m, MXU_MERGE_AVERAGE, NULL, &x, 1, -1);
  mxu_tensor_id x_max = mxu_merge(m, MXU_MERGE_MAXIMUM, NULL, xx, 2, -1);
  mxu_tensor_id all[3] = {d, x_again, x_max};
  return head(m, mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, all, 3, 2));
}

/* Views over a tensor that others read too: x reshaped to (16, 2) and back
 * (a view of a view) added to x, then a conv; Flatten in the head is a
 * view of the sum, which a GlobalMaxPooling2D also reads. */
static mxu_tensor_id fan_out_views(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  int64_t flat[2] = {-1, 2};
  mxu_reshape_config r1 = {"flat", mxu_shape_make(2, flat)};
  mxu_reshape_config r2 = {"back", mxu_shape_make(3, small)};
  mxu_tensor_id back = mxu_apply_reshape(m, &r2, mxu_apply_reshape(m, &r1, x));
  mxu_conv2d_config conv = conv_same(2, MXU_TANH, "conv");
  mxu_tensor_id y = mxu_apply_conv2d(m, &conv, mxu_add(m, NULL, x, back));
  mxu_global_pool2d_config g = {NULL, 1, 0};
  mxu_tensor_id pooled = mxu_apply_global_pooling2d(m, &g, y);
  mxu_tensor_id flat_y = mxu_apply_flatten(m, NULL, y);
  mxu_tensor_id cat[2] = {flat_y, pooled};
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &dense,
                         mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, cat, 2, -1));
}

/* x read by one layer of every kind, each then flattened, all
 * concatenated: every layer class writes its input's gradient into a
 * partial buffer, but the one the backward reaches first. */
static mxu_tensor_id fan_out_every_layer(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  mxu_tensor_id y[16];
  int n = 0;
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  y[n++] = mxu_apply_batch_normalization(m, &bn, x);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  y[n++] = mxu_apply_max_pooling2d(m, &pool, x);
  y[n++] = mxu_apply_average_pooling2d(m, &pool, x);
  y[n++] = mxu_apply_activation(m, NULL, MXU_SIGMOID, x);
  y[n++] = mxu_apply_dropout(m, NULL, 0.3f, x);
  mxu_zero_padding2d_config pad = {NULL, 1, 0, 0, 1};
  y[n++] = mxu_apply_zero_padding2d(m, &pad, x);
  mxu_relu_config relu = {NULL, -1.0f, 0.2f, 0.3f};
  y[n++] = mxu_apply_relu(m, &relu, x);
  mxu_conv2d_config conv = conv_same(2, MXU_TANH, NULL);
  y[n++] = mxu_apply_conv2d(m, &conv, x);
  mxu_dense_config dense = mxu_dense_defaults(3);
  dense.activation = MXU_TANH;
  y[n++] = mxu_apply_dense(m, &dense, mxu_apply_flatten(m, NULL, x));
  mxu_global_pool2d_config average = {NULL, 0, 0}, max = {NULL, 1, 1};
  y[n++] = mxu_apply_global_pooling2d(m, &average, x);
  y[n++] = mxu_apply_global_pooling2d(m, &max, x);
  int64_t flat[1] = {-1};
  mxu_reshape_config reshape = {NULL, mxu_shape_make(1, flat)};
  y[n++] = mxu_apply_reshape(m, &reshape, x);
  for (int k = 0; k < n; k++) y[k] = mxu_apply_flatten(m, NULL, y[k]);
  mxu_dense_config out = mxu_dense_defaults(CLASSES);
  out.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &out,
                         mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, y, n, -1));
}

/* Two outputs, the first (which the loss reads) also read by the second:
 * the second's branch carries no loss, so the first output's gradient is
 * the loss's alone. */
static mxu_tensor_id two_outputs(mxu_model *m, const void *ctx) {
  (void)ctx;
  mxu_tensor_id x = input_identity(m, small);
  mxu_tensor_id first = head(m, x);
  mxu_dense_config dense = mxu_dense_defaults(3);
  dense.name = "second";
  mxu_tensor_id outputs[2] = {first, mxu_apply_dense(m, &dense, first)};
  CHECK_OK(mxu_model_outputs(m, outputs, 2));
  return first;
}

static int partial_edges(const mxu_model *m, int tensor) {
  int count = 0;
  for (int i = 0; i < m->layer_count; i++)
    for (int k = 0; k < m->layers[i].input_count; k++)
      if (m->layers[i].inputs[k] == tensor &&
          m->plan.edges[i * MXU_MAX_INPUTS + k].partial)
        count++;
  return count;
}

static void check_readers(const char *name, graph_fn fn, int readers) {
  mxu_model *m = build(name, fn, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int x = input_reader(m, 0);
  CHECK_MSG(m->plan.consumers[x] == readers, "%s: x has %d readers, want %d",
            name, m->plan.consumers[x], readers);
  /* The last reader writes the gradient; every other adds a partial. */
  CHECK_MSG(partial_edges(m, x) == readers - 1, "%s: %d partial edges", name,
            partial_edges(m, x));
  mxu_model_free(m);
}

static void test_fan_out(void) {
  static const struct {
    const char *name;
    graph_fn fn;
    int readers;
  } graphs[] = {
      {"x read by 2", fan_out_2, 2},
      {"x read by 3, twice by Add", fan_out_3, 3},
      {"x and x * x read by several", fan_out_square, 6},
      {"views of a tensor read twice", fan_out_views, 2},
      {"x read by every kind of layer", fan_out_every_layer, 12},
  };
  for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++) {
    check_readers(graphs[i].name, graphs[i].fn, graphs[i].readers);
    mxu_model *m =
        build(graphs[i].name, graphs[i].fn, NULL, MXU_BACKEND_CPU_REF);
    finite_differences(m, graphs[i].name);
    mxu_model_free(m);
    backends_agree(graphs[i].name, graphs[i].fn, NULL);
  }
  /* Add()([x, x]) is 2x: its output is twice its input, and the gradient
   * that reaches x through it twice what reaches its output. */
  mxu_model *m = build("x + x", fan_out_3, NULL, MXU_BACKEND_CPU_REF);
  if (m) {
    load_inputs(m, 6);
    train_step(m);
    int x = input_reader(m, 0), twice = node_named(m, "twice");
    for (int64_t i = 0; i < tensor_floats(m, x); i++)
      if (act(m, twice)[i] != 2.0f * act(m, x)[i]) {
        CHECK_MSG(0, "x + x [%lld] = %g, x = %g", (long long)i,
                  (double)act(m, twice)[i], (double)act(m, x)[i]);
        break;
      }
    mxu_model_free(m);
  }
  /* A model output that another node reads; the one loss compiled is
   * every output's (Keras' compile(loss=name)), so the second output's
   * kernel has a gradient of its own. */
  m = build("two outputs", two_outputs, NULL, MXU_BACKEND_CPU_REF);
  finite_differences(m, "two outputs");
  if (m) {
    load_inputs(m, 3);
    train_step(m);
    int second = node_named(m, "second");
    const mxu_param *p = &m->params[m->layers[second].param_first];
    double sum = 0;
    for (int64_t i = 0; i < p->count; i++) sum += fabs(m->grads[p->offset + i]);
    CHECK_MSG(sum > 0, "the second output's kernel has no gradient");
  }
  mxu_model_free(m);
}

/* ---- 3. the whole residual CNN along a random direction -----------------
 * (kann's kad_check_grad): (L(w + eps d) - L(w - eps d)) / 2 eps against
 * grad . d for a random unit d over every trainable weight. */

typedef struct residual_options {
  float dropout;
} residual_options;

/* conv -> BN -> relu (h), conv -> BN added to h, ReLU, concatenated with
 * h, GlobalAveragePooling2D, Dense softmax. */
static mxu_tensor_id residual_cnn(mxu_model *m, const void *ctx) {
  const residual_options *o = ctx;
  static const int64_t dims[3] = {6, 6, 3};
  mxu_tensor_id x = mxu_input(m, "image", mxu_shape_make(3, dims));
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_conv2d_config c1 = conv_same(4, MXU_LINEAR, NULL);
  mxu_tensor_id h = mxu_apply_activation(
      m, NULL, MXU_RELU,
      mxu_apply_batch_normalization(m, &bn, mxu_apply_conv2d(m, &c1, x)));
  mxu_conv2d_config c2 = conv_same(4, MXU_LINEAR, NULL);
  mxu_tensor_id r =
      mxu_apply_batch_normalization(m, &bn, mxu_apply_conv2d(m, &c2, h));
  mxu_relu_config relu = mxu_relu_defaults();
  mxu_tensor_id s = mxu_apply_relu(m, &relu, mxu_add(m, NULL, h, r));
  mxu_tensor_id both[2] = {s, h};
  mxu_tensor_id y = mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, both, 2, -1);
  if (o && o->dropout > 0) y = mxu_apply_dropout(m, NULL, o->dropout, y);
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &dense, mxu_apply_global_pooling2d(m, &gap, y));
}

static int agree(double analytic, double numeric) {
  double scale =
      fabs(analytic) > fabs(numeric) ? fabs(analytic) : fabs(numeric);
  return fabs(analytic - numeric) <= 2e-2 * scale + 1e-4;
}

static void directional_check(mxu_backend_kind backend, uint64_t seed) {
  const char *name = backend == MXU_BACKEND_CPU ? "residual cnn (cpu)"
                                                : "residual cnn (cpu_ref)";
  mxu_model *m = build(name, residual_cnn, NULL, backend);
  if (!m) return;
  load_inputs(m, 21);
  mean_loss(m);
  int64_t n = m->trainable_count;
  float *g = malloc((size_t)n * sizeof(float));
  float *w0 = malloc((size_t)n * sizeof(float));
  float *d = calloc((size_t)n, sizeof(float));
  memcpy(g, m->grads, (size_t)n * sizeof(float));
  memcpy(w0, m->weights, (size_t)n * sizeof(float));
  /* A random direction over the weights (not the alignment padding
   * between them), of unit length. */
  mxu_rng rng = mxu_rng_make(seed, 7, 0, 0, 0);
  double norm = 0;
  int layers_moved = 0;
  for (int p = 0; p < m->param_count; p++) {
    const mxu_param *param = &m->params[p];
    if (!param->trainable) continue;
    mxu_rng_uniform(&rng, (uint64_t)param->offset, d + param->offset,
                    (size_t)param->count);
    for (int64_t i = param->offset; i < param->offset + param->count; i++) {
      d[i] = 2.0f * d[i] - 1.0f;
      norm += (double)d[i] * d[i];
    }
    layers_moved++;
  }
  CHECK(layers_moved == 10); /* 2 x (kernel, bias, gamma, beta), Dense's 2 */
  double dot = 0;
  for (int64_t i = 0; i < n; i++) {
    d[i] = (float)(d[i] / sqrt(norm));
    dot += (double)g[i] * d[i];
  }
  line l = {m, NULL, w0, d};
  double central = NAN;
  CHECK_MSG(fabs(dot) > 5e-4, "%s: grad . d = %g is too small to tell", name,
            dot);
  CHECK_MSG(slope_matches(&l, dot, agree, &central),
            "%s: grad . d = %.8g, finite difference %.8g", name, dot, central);
  free(g);
  free(w0);
  free(d);
  mxu_model_free(m);
}

static void test_whole_graph(void) {
  directional_check(MXU_BACKEND_CPU_REF, 1);
  directional_check(MXU_BACKEND_CPU_REF, 2);
  directional_check(MXU_BACKEND_CPU, 3);
  backends_agree("residual cnn", residual_cnn, NULL);
}

/* ---- 4. determinism --------------------------------------------------------
 * Two replicas on one thread or on two: the same weights bit for bit. */

static mxu_model *train_residual(int threads, const mxu_dataset *data,
                                 double *loss) {
  static const residual_options options = {0.25f};
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
  cc.batch_size = 8;
  cc.replicas = 2;
  cc.threads = threads;
  cc.seed = 3;
  mxu_model *m = build_with("residual fit", residual_cnn, &options, &cc);
  if (!m) return NULL;
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 1;
  fit.batch_size = 8;
  fit.steps_per_epoch = 3;
  fit.seed = 9;
  fit.verbose = 0;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(m, data, &fit, &history));
  *loss = history && history->count == 1 ? history->epochs[0].loss : NAN;
  return m;
}

static void test_determinism(void) {
  enum { COUNT = 32 };
  static const int64_t dims[3] = {6, 6, 3};
  float *x = malloc(COUNT * 6 * 6 * 3 * sizeof(float));
  int32_t labels[COUNT];
  mxu_rng rng = mxu_rng_make(17, 1, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, x, COUNT * 6 * 6 * 3);
  for (int i = 0; i < COUNT; i++)
    labels[i] = (int32_t)mxu_rng_below(&rng, 1u << 20 | (unsigned)i, CLASSES);
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, COUNT, mxu_shape_make(3, dims),
                                   CLASSES, &data));
  free(x);
  if (!data) return;
  double loss1 = NAN, loss2 = NAN;
  mxu_model *one = train_residual(1, data, &loss1);
  mxu_model *two = train_residual(2, data, &loss2);
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
  cc.batch_size = 8;
  cc.replicas = 2;
  cc.seed = 3;
  static const residual_options options = {0.25f};
  mxu_model *fresh = build_with("untrained", residual_cnn, &options, &cc);
  if (one && two && fresh) {
    CHECK(two->plan.workers == 2 && one->plan.workers == 1);
    CHECK(one->iterations == 3 && two->iterations == 3);
    CHECK(isfinite(loss1));
    CHECK_MSG(loss1 == loss2, "loss %.9g with 1 thread, %.9g with 2", loss1,
              loss2);
    size_t w = (size_t)one->trainable_count * sizeof(float);
    size_t s = (size_t)one->state_count * sizeof(float);
    CHECK(memcmp(one->weights, two->weights, w) == 0);
    CHECK(memcmp(one->state, two->state, s) == 0);
    /* ... and training changed them. */
    CHECK(memcmp(one->weights, fresh->weights, w) != 0);
    CHECK(memcmp(one->state, fresh->state, s) != 0);
  }
  mxu_model_free(one);
  mxu_model_free(two);
  mxu_model_free(fresh);
  mxu_dataset_free(data);
}

/* ---- 5. fusion inside a residual block ----------------------------------- */

enum { FUSE_ALL, LONG_SHORTCUT, CONV_READ_TWICE, POOL_READ_TWICE };

/* x -> conv(relu) -> MaxPooling2D -> Activation('relu'), added to a
 * shortcut conv that reads x too. Variants make the shortcut the longer
 * path (so that the graph's order, by depth, puts it first), or give the
 * conv's output or the pool's a second reader. */
static mxu_tensor_id fusion_graph(mxu_model *m, const void *ctx) {
  int variant = *(const int *)ctx;
  static const int64_t dims[3] = {9, 9, 2};
  mxu_tensor_id x = input_identity(m, dims);
  mxu_conv2d_config conv = mxu_conv2d_defaults(16, 2, 2);
  conv.activation = MXU_RELU;
  conv.name = "main";
  mxu_tensor_id c = mxu_apply_conv2d(m, &conv, x);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  pool.name = "pool";
  mxu_tensor_id p = mxu_apply_max_pooling2d(m, &pool, c);
  mxu_tensor_id r = mxu_apply_activation(m, "relu", MXU_RELU, p);
  mxu_conv2d_config shortcut = mxu_conv2d_defaults(16, 2, 2);
  shortcut.strides[0] = shortcut.strides[1] = 2;
  shortcut.name = "shortcut";
  mxu_tensor_id s = mxu_apply_conv2d(m, &shortcut, x);
  for (int k = 0; variant == LONG_SHORTCUT && k < 3; k++)
    s = mxu_apply_activation(m, NULL, MXU_TANH, s);
  mxu_tensor_id sum = mxu_add(m, NULL, r, s);
  if (variant == CONV_READ_TWICE) {
    mxu_pool2d_config avg = mxu_pool2d_defaults(2, 2);
    sum = mxu_add(m, NULL, sum, mxu_apply_average_pooling2d(m, &avg, c));
  } else if (variant == POOL_READ_TWICE) {
    sum = mxu_add(m, NULL, sum, p);
  }
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &dense, mxu_apply_global_pooling2d(m, &gap, sum));
}

/* A classifier's end: conv, pool, relu, Flatten, a linear Dense and a
 * softmax Activation, which the conv runs all of (conv_pool_dense); not
 * a softmax Dense (its epilogue stays its own), nor a Flatten another
 * Dense reads too. */
enum { DENSE_LINEAR, DENSE_SOFTMAX, FLATTEN_READ_TWICE };

static mxu_tensor_id fusion_dense_graph(mxu_model *m, const void *ctx) {
  int variant = *(const int *)ctx;
  static const int64_t dims[3] = {10, 10, 1};
  mxu_conv2d_config conv = mxu_conv2d_defaults(16, 3, 3);
  conv.name = "main";
  mxu_tensor_id c = mxu_apply_conv2d(m, &conv, input_identity(m, dims));
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_tensor_id p = mxu_apply_max_pooling2d(m, &pool, c);
  mxu_tensor_id r = mxu_apply_activation(m, NULL, MXU_RELU, p);
  mxu_tensor_id f = mxu_apply_flatten(m, NULL, r);
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.name = "dense";
  if (variant == DENSE_SOFTMAX) {
    dense.activation = MXU_SOFTMAX;
    return mxu_apply_dense(m, &dense, f);
  }
  mxu_tensor_id d = mxu_apply_dense(m, &dense, f);
  if (variant == FLATTEN_READ_TWICE) {
    dense.name = "beside";
    d = mxu_add(m, NULL, d, mxu_apply_dense(m, &dense, f));
  }
  return mxu_apply_activation(m, NULL, MXU_SOFTMAX, d);
}

/* A graph variant and the layers its conv should absorb. */
typedef struct fusion_case {
  const char *name;
  int variant, fused;
} fusion_case;

static void test_fusion_dense(void) {
  static const fusion_case cases[] = {
      {"conv, pool, relu, flatten, dense", DENSE_LINEAR, 4},
      {"conv, pool, relu, flatten, softmax dense", DENSE_SOFTMAX, 2},
      {"a flatten two denses read", FLATTEN_READ_TWICE, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *name = cases[i].name;
    mxu_model *m =
        build(name, fusion_dense_graph, &cases[i].variant, MXU_BACKEND_CPU);
    if (!m) continue;
    int conv = node_named(m, "main"), dense = node_named(m, "dense");
    if (m->backend->conv_pool_dense_create) {
      CHECK_MSG(m->layers[conv].compiled->fused_layers == cases[i].fused,
                "%s: fused_layers %d, want %d", name,
                m->layers[conv].compiled->fused_layers, cases[i].fused);
      CHECK(m->layers[dense].compiled->absorbed == (cases[i].fused == 4));
      CHECK((mxu_layer_writes(&m->layers[conv]) == dense) ==
            (cases[i].fused == 4));
    } else {
      printf("test_graph: this backend fuses nothing; fusion unchecked\n");
    }
    finite_differences(m, name);
    mxu_model_free(m);
    backends_agree(name, fusion_dense_graph, &cases[i].variant);
  }
}

static void test_fusion(void) {
  static const fusion_case cases[] = {
      {"conv, pool, relu in a residual block", FUSE_ALL, 2},
      {"conv, pool, relu beside a longer shortcut", LONG_SHORTCUT, 2},
      {"a conv read twice", CONV_READ_TWICE, 0},
      {"a pool read twice", POOL_READ_TWICE, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *name = cases[i].name;
    mxu_model *m =
        build(name, fusion_graph, &cases[i].variant, MXU_BACKEND_CPU);
    if (!m) continue;
    int conv = node_named(m, "main"), pool = node_named(m, "pool");
    int relu = node_named(m, "relu");
    CHECK(m->plan.consumers[input_reader(m, 0)] == 2);
    if (m->backend->conv_pool_create) {
      int want = cases[i].fused;
      CHECK_MSG(m->layers[conv].compiled->fused_layers == want,
                "%s: fused_layers %d, want %d", name,
                m->layers[conv].compiled->fused_layers, want);
      CHECK(m->layers[pool].compiled->absorbed == (want >= 1));
      CHECK(m->layers[relu].compiled->absorbed == (want >= 2));
      if (want >= 1)
        CHECK(m->layers[conv].compiled->fused[0] == &m->layers[pool]);
      if (want >= 2)
        CHECK(m->layers[conv].compiled->fused[1] == &m->layers[relu]);
      CHECK(m->layers[node_named(m, "shortcut")].compiled->fused_layers == 0);
    } else {
      printf("test_graph: this backend fuses nothing; fusion unchecked\n");
    }
    mxu_model_free(m);
    m = build(name, fusion_graph, &cases[i].variant, MXU_BACKEND_CPU_REF);
    if (m) CHECK(m->layers[conv].compiled->fused_layers == 0);
    finite_differences(m, name);
    mxu_model_free(m);
    backends_agree(name, fusion_graph, &cases[i].variant);
  }
}

/* BatchNormalization and the relu that alone reads it, in a residual
 * block: x -> conv -> BN -> relu (Activation, a ReLU layer, ReLU(6.),
 * Activation('silu'); a cap of 3 is neither relu nor relu6, gelu not
 * fused), added to a shortcut conv of x; or the BN's output read twice.
 * The (last) Add and the relu after it fuse too. */
enum {
  BN_ACTIVATION,
  BN_RELU_LAYER,
  BN_RELU6,
  BN_RELU_CAP3,
  BN_READ_TWICE,
  BN_SILU,
  BN_HARD_SILU,
  BN_GELU
};

static mxu_tensor_id bn_fusion_graph(mxu_model *m, const void *ctx) {
  int variant = *(const int *)ctx;
  static const int64_t dims[3] = {6, 6, 3};
  mxu_tensor_id x = input_identity(m, dims);
  mxu_conv2d_config conv = mxu_conv2d_defaults(4, 3, 3);
  conv.padding = MXU_SAME;
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  bn.name = "bn";
  mxu_tensor_id b =
      mxu_apply_batch_normalization(m, &bn, mxu_apply_conv2d(m, &conv, x));
  mxu_relu_config relu = mxu_relu_defaults();
  relu.name = "relu";
  if (variant == BN_RELU6) relu.max_value = 6.0f;
  if (variant == BN_RELU_CAP3) relu.max_value = 3.0f;
  mxu_tensor_id r =
      variant == BN_RELU_LAYER || variant == BN_RELU6 || variant == BN_RELU_CAP3
          ? mxu_apply_relu(m, &relu, b)
      : variant == BN_SILU ? mxu_apply_activation(m, "relu", MXU_SILU, b)
      : variant == BN_HARD_SILU
          ? mxu_apply_activation(m, "relu", MXU_HARD_SILU, b)
      : variant == BN_GELU ? mxu_apply_activation(m, "relu", MXU_GELU, b)
                           : mxu_apply_activation(m, "relu", MXU_RELU, b);
  mxu_conv2d_config shortcut = mxu_conv2d_defaults(4, 1, 1);
  mxu_tensor_id sum = mxu_add(m, NULL, r, mxu_apply_conv2d(m, &shortcut, x));
  if (variant == BN_READ_TWICE) sum = mxu_add(m, NULL, sum, b);
  sum = mxu_apply_activation(m, "add_relu", MXU_RELU, sum);
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  mxu_dense_config dense = mxu_dense_defaults(CLASSES);
  dense.activation = MXU_SOFTMAX;
  return mxu_apply_dense(m, &dense, mxu_apply_global_pooling2d(m, &gap, sum));
}

/* Both backends fuse them (a relu'd output, the gradient masked by it),
 * and they train as the layers apart do: gradients against finite
 * differences, cpu against cpu_ref. */
static void test_bn_fusion(void) {
  static const struct {
    const char *name;
    int variant, fused;
  } cases[] = {
      {"BN, Activation('relu') in a residual block", BN_ACTIVATION, 1},
      {"BN, ReLU() in a residual block", BN_RELU_LAYER, 1},
      {"BN, ReLU(6.) in a residual block", BN_RELU6, 1},
      {"BN, ReLU(3.)", BN_RELU_CAP3, 0},
      {"a BN read twice", BN_READ_TWICE, 0},
      {"BN, Activation('silu') in a residual block", BN_SILU, 1},
      {"BN, Activation('hard_silu') in a residual block", BN_HARD_SILU, 1},
      {"BN, Activation('gelu')", BN_GELU, 0},
  };
  static const mxu_backend_kind kinds[2] = {MXU_BACKEND_CPU,
                                            MXU_BACKEND_CPU_REF};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *name = cases[i].name;
    for (int k = 0; k < 2; k++) {
      mxu_model *m = build(name, bn_fusion_graph, &cases[i].variant, kinds[k]);
      if (!m) continue;
      int bn = node_named(m, "bn"), relu = node_named(m, "relu");
      CHECK_MSG(m->layers[bn].compiled->fused_layers == cases[i].fused,
                "%s: fused_layers %d", name,
                m->layers[bn].compiled->fused_layers);
      CHECK(m->layers[relu].compiled->absorbed == cases[i].fused);
      int add_relu = node_named(m, "add_relu");
      int add = m->layers[add_relu].inputs[0];
      CHECK(m->layers[add].cls == &mxu_add_class);
      CHECK(m->layers[add].compiled->fused_layers == 1);
      CHECK(m->layers[add_relu].compiled->absorbed);
      if (k == 1) finite_differences(m, name);
      mxu_model_free(m);
    }
    backends_agree(name, bn_fusion_graph, &cases[i].variant);
  }
}

/* Gradients sharing memory where their lives in the backward pass do not
 * meet (the default) train to the same bits as each kept whole: the same
 * weights after two steps, for the graphs with weights on both sides of
 * their branches and fusions (golden tests and recipes train every other
 * model so); and in less memory. */
static void same_with_shared_gradients(const char *name, graph_fn fn,
                                       const void *ctx) {
  mxu_model *m[2];
  for (int keep = 0; keep < 2; keep++) {
    mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
    cc.keep_gradients = keep;
    m[keep] = build_with(name, fn, ctx, &cc);
    if (!m[keep]) {
      if (keep) mxu_model_free(m[0]);
      return;
    }
    load_inputs(m[keep], 5);
    train_step(m[keep]);
    train_step(m[keep]);
  }
  CHECK_MSG(memcmp(m[0]->weights, m[1]->weights,
                   (size_t)m[0]->trainable_count * sizeof(float)) == 0,
            "%s: weights", name);
  CHECK(m[0]->plan.layout.size <= m[1]->plan.layout.size);
  mxu_model_free(m[0]), mxu_model_free(m[1]);
}

/* The backward step that runs node i: n - 1 - i, or its fused group
 * head's. */
static int step_of(const mxu_model *m, int i) {
  while (m->layers[i].compiled->absorbed) i = m->layers[i].inputs[0];
  return m->layer_count - 1 - i;
}

/* Node i's gradient is written from the step of its last reader (the
 * loss's, -1, for the output) and read up to its own: two gradients live
 * at one step (both ends count: a node reads its dy while it writes its
 * dx) never overlap, unless one is the other (a view's). */
static void gradients_apart(const char *name, graph_fn fn, const void *ctx) {
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
  cc.keep_gradients = 0;
  mxu_model *m = build_with(name, fn, ctx, &cc);
  if (!m) return;
  int n = m->layer_count, *first = calloc((size_t)n, sizeof *first);
  for (int i = 0; i < n; i++) {
    first[i] = i == mxu_model_output(m) ? -1 : n;
    for (int j = i + 1; j < n; j++)
      for (int k = 0; k < m->layers[j].input_count; k++)
        if (m->layers[j].inputs[k] == i && step_of(m, j) < first[i])
          first[i] = step_of(m, j);
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      if (!output_written(m, i) || !output_written(m, j) ||
          m->plan.grad[i] == m->plan.grad[j])
        continue;
      if (first[i] > step_of(m, j) || first[j] > step_of(m, i)) continue;
      size_t a = m->plan.grad[i], b = m->plan.grad[j];
      size_t a_end = a + (size_t)tensor_floats(m, i) * sizeof(float);
      size_t b_end = b + (size_t)tensor_floats(m, j) * sizeof(float);
      CHECK_MSG(a_end <= b || b_end <= a, "%s: gradients of %s and %s overlap",
                name, m->layers[i].name, m->layers[j].name);
    }
  free(first);
  mxu_model_free(m);
}

static void test_gradient_memory(void) {
  static const int fuse_all = FUSE_ALL, bn_relu = BN_ACTIVATION;
  static const residual_options no_dropout = {0.0f};
  const struct {
    const char *name;
    graph_fn fn;
    const void *ctx;
  } graphs[] = {{"fan-out square", fan_out_square, NULL},
                {"fan-out views", fan_out_views, NULL},
                {"fan-out every layer", fan_out_every_layer, NULL},
                {"two outputs", two_outputs, NULL},
                {"residual cnn", residual_cnn, &no_dropout},
                {"conv+pool+relu fusion", fusion_graph, &fuse_all},
                {"BN+relu fusion", bn_fusion_graph, &bn_relu}};
  for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++) {
    same_with_shared_gradients(graphs[i].name, graphs[i].fn, graphs[i].ctx);
    gradients_apart(graphs[i].name, graphs[i].fn, graphs[i].ctx);
  }
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
  size_t size[2];
  for (int keep = 0; keep < 2; keep++) {
    cc.keep_gradients = keep;
    mxu_model *m = build_with("residual cnn", residual_cnn, &no_dropout, &cc);
    size[keep] = m ? m->plan.layout.size : 0;
    mxu_model_free(m);
  }
  CHECK(size[0] < size[1]);
}

/* ---- 6. errors -------------------------------------------------------------
 */

static void test_errors(void) {
  static const int64_t dims[3] = {3, 4, 2}, other[3] = {3, 5, 2};
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU_REF);

  /* A node nobody reads. */
  mxu_model *m = mxu_functional("dangling");
  mxu_tensor_id x = mxu_input(m, NULL, mxu_shape_make(3, dims));
  mxu_global_pool2d_config g = {"unread", 1, 0};
  mxu_apply_global_pooling2d(m, &g, x);
  mxu_tensor_id out = head(m, x);
  CHECK_OK(mxu_model_outputs(m, &out, 1));
  EXPECT_FAIL(mxu_compile(m, &cc), MXU_ERR_ARG, "'unread'");
  CHECK(!m->compiled);
  mxu_model_free(m);
  /* ... nor an input nobody reads, without mxu_model_outputs. */
  m = mxu_functional("unused input");
  x = mxu_input(m, NULL, mxu_shape_make(3, dims));
  mxu_input(m, "spare", mxu_shape_make(3, dims));
  head(m, x);
  EXPECT_FAIL(mxu_compile(m, &cc), MXU_ERR_ARG, "'spare'");
  mxu_model_free(m);

  m = mxu_functional("errors");
  x = mxu_input(m, NULL, mxu_shape_make(3, dims));
  mxu_tensor_id y = mxu_input(m, NULL, mxu_shape_make(3, other));
  int count = m->layer_count;
  /* Subtract takes two. */
  mxu_tensor_id three[3] = {x, x, x};
  CHECK(mxu_merge(m, MXU_MERGE_SUBTRACT, NULL, three, 3, -1) == -1);
  CHECK_MSG(has(mxu_errmsg(), "Subtract") && has(mxu_errmsg(), "2"), "%s",
            mxu_errmsg());
  /* Concatenate of shapes that differ off the axis: both named. */
  mxu_tensor_id pair[2] = {x, y};
  CHECK(mxu_merge(m, MXU_MERGE_CONCATENATE, "cat", pair, 2, -1) == -1);
  CHECK_MSG(has(mxu_errmsg(), "(3, 4, 2)") && has(mxu_errmsg(), "(3, 5, 2)") &&
                has(mxu_errmsg(), "cat"),
            "%s", mxu_errmsg());
  /* ... along the axis they may differ. */
  mxu_tensor_id ok = mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, pair, 2, 2);
  CHECK(ok >= 0 && m->layers[ok].out_shape.dims[1] == 9);
  CHECK(mxu_merge(m, MXU_MERGE_ADD, NULL, pair, 2, -1) == -1);
  CHECK_MSG(has(mxu_errmsg(), "(3, 4, 2)") && has(mxu_errmsg(), "(3, 5, 2)"),
            "%s", mxu_errmsg());
  CHECK(mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, pair, 2, 4) == -1);
  CHECK(has(mxu_errmsg(), "axis 4"));
  CHECK(mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, pair, 2, 0) == -1);
  mxu_tensor_id elsewhere[2] = {x, 1000};
  CHECK(mxu_merge(m, MXU_MERGE_ADD, NULL, elsewhere, 2, -1) == -1);
  CHECK(has(mxu_errmsg(), "not a tensor of this model"));
  int64_t bad[3] = {5, -1, 1};
  mxu_reshape_config reshape = {NULL, mxu_shape_make(3, bad)};
  CHECK(mxu_apply_reshape(m, &reshape, x) == -1); /* 24 values by 5 */
  mxu_relu_config relu = mxu_relu_defaults();
  relu.negative_slope = -1;
  CHECK(mxu_apply_relu(m, &relu, x) == -1);
  CHECK(has(mxu_errmsg(), "negative_slope"));
  CHECK(m->layer_count == count + 1);

  /* A failure passed on: -1 in, -1 out, the first message kept. */
  CHECK(mxu_merge(m, MXU_MERGE_CONCATENATE, "cat", pair, 2, -1) == -1);
  char first[512];
  snprintf(first, sizeof first, "%s", mxu_errmsg());
  count = m->layer_count;
  mxu_conv2d_config conv = mxu_conv2d_defaults(2, 1, 1);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  mxu_dense_config dense = mxu_dense_defaults(2);
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  mxu_zero_padding2d_config pad = {NULL, 1, 1, 1, 1};
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  relu = mxu_relu_defaults();
  int64_t flat[1] = {-1};
  reshape = (mxu_reshape_config){NULL, mxu_shape_make(1, flat)};
  mxu_tensor_id failed = -1, with_failed[2] = {x, -1};
  CHECK(mxu_apply_conv2d(m, &conv, failed) == -1);
  CHECK(mxu_apply_max_pooling2d(m, &pool, failed) == -1);
  CHECK(mxu_apply_average_pooling2d(m, &pool, failed) == -1);
  CHECK(mxu_apply_activation(m, NULL, MXU_RELU, failed) == -1);
  CHECK(mxu_apply_flatten(m, NULL, failed) == -1);
  CHECK(mxu_apply_dense(m, &dense, failed) == -1);
  CHECK(mxu_apply_dropout(m, NULL, 0.5f, failed) == -1);
  CHECK(mxu_apply_batch_normalization(m, &bn, failed) == -1);
  CHECK(mxu_apply_global_pooling2d(m, &gap, failed) == -1);
  CHECK(mxu_apply_zero_padding2d(m, &pad, failed) == -1);
  CHECK(mxu_apply_relu(m, &relu, failed) == -1);
  CHECK(mxu_apply_reshape(m, &reshape, failed) == -1);
  /* ... even with a NULL config too. */
  CHECK(mxu_apply_global_pooling2d(m, NULL, failed) == -1);
  CHECK(mxu_apply_zero_padding2d(m, NULL, failed) == -1);
  CHECK(mxu_apply_relu(m, NULL, failed) == -1);
  CHECK(mxu_apply_reshape(m, NULL, failed) == -1);
  CHECK(mxu_apply_conv2d(m, NULL, failed) == -1);
  CHECK(mxu_apply_dense(m, NULL, failed) == -1);
  CHECK(mxu_add(m, NULL, x, failed) == -1);
  CHECK(mxu_merge(m, MXU_MERGE_MAXIMUM, NULL, with_failed, 2, -1) == -1);
  CHECK(mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, with_failed, 2, -1) == -1);
  EXPECT_FAIL(mxu_model_outputs(m, &failed, 1), MXU_ERR_ARG, NULL);
  CHECK_MSG(strcmp(mxu_errmsg(), first) == 0, "message now '%s', was '%s'",
            mxu_errmsg(), first);
  CHECK(m->layer_count == count);

  /* mxu_add_* belong to Sequential models. */
  EXPECT_FAIL(mxu_add_input(m, NULL, mxu_shape_make(3, dims)), MXU_ERR_ARG,
              "mxu_input");
  EXPECT_FAIL(mxu_add_conv2d(m, &conv), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_max_pooling2d(m, &pool), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_average_pooling2d(m, &pool), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_activation(m, NULL, MXU_RELU), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_flatten(m, NULL), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_dense(m, &dense), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_dropout(m, NULL, 0.5f), MXU_ERR_ARG, "mxu_apply");
  EXPECT_FAIL(mxu_add_batch_normalization(m, &bn), MXU_ERR_ARG, "mxu_apply");
  CHECK(m->layer_count == count);
  mxu_model_free(m);

  /* ... and mxu_input and mxu_apply_* to functional ones. */
  m = mxu_sequential("sequential");
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  CHECK_OK(mxu_add_conv2d(m, &conv));
  count = m->layer_count;
  CHECK(mxu_input(m, NULL, mxu_shape_make(3, dims)) == -1);
  CHECK(has(mxu_errmsg(), "mxu_add_input"));
  CHECK(mxu_apply_conv2d(m, &conv, 1) == -1);
  CHECK(has(mxu_errmsg(), "Sequential"));
  CHECK(mxu_apply_max_pooling2d(m, &pool, 1) == -1);
  CHECK(mxu_apply_activation(m, NULL, MXU_RELU, 1) == -1);
  CHECK(mxu_apply_flatten(m, NULL, 1) == -1);
  CHECK(mxu_apply_global_pooling2d(m, &gap, 1) == -1);
  CHECK(mxu_apply_zero_padding2d(m, &pad, 1) == -1);
  CHECK(mxu_apply_relu(m, &relu, 1) == -1);
  CHECK(mxu_apply_reshape(m, &reshape, 1) == -1);
  CHECK(mxu_add(m, NULL, 1, 1) == -1);
  CHECK(has(mxu_errmsg(), "Sequential"));
  CHECK(m->layer_count == count);
  /* Its hidden InputLayer is node 0; Keras' layer 0 is node 1. */
  CHECK(!mxu_layer_listed(m, 0) && m->layers[0].cls == &mxu_input_layer_class);
  CHECK(mxu_model_node(m, 0) == 1 && mxu_model_node(m, 1) == -1);
  CHECK(mxu_model_layer_count(m) == 1);
  mxu_model_free(m);

  /* A functional model's InputLayer is one of its layers. */
  m = mxu_functional(NULL);
  x = mxu_input(m, "in", mxu_shape_make(3, dims));
  CHECK(x == 0 && mxu_model_node(m, 0) == 0 && mxu_model_layer_count(m) == 1);
  CHECK(strcmp(mxu_model_layer_name(m, 0), "in") == 0);
  mxu_model_free(m);
}

/* ---- several inputs and outputs -----------------------------------------
 * Two inputs a and b, outputs softmax(Dense(a + b)) and a + b itself, run
 * through mxu_predict_outputs over batches of 2 with a partial last one:
 * each output checked against values computed here from the weights. */
static void test_several_outputs(void) {
  enum { N = 5, D = 4, K = 3 };
  mxu_model *m = mxu_functional("two_in_two_out");
  int64_t d = D;
  mxu_tensor_id a = mxu_input(m, "a", mxu_shape_make(1, &d));
  mxu_tensor_id b = mxu_input(m, "b", mxu_shape_make(1, &d));
  mxu_tensor_id sum = mxu_add(m, "sum", a, b);
  mxu_dense_config dense = mxu_dense_defaults(K);
  dense.activation = MXU_SOFTMAX;
  mxu_tensor_id outs[2] = {mxu_apply_dense(m, &dense, sum), sum};
  CHECK_OK(mxu_model_outputs(m, outs, 2));
  CHECK(mxu_model_input_count(m) == 2 && mxu_model_output_count(m) == 2);
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = 2;
  cc.seed = 3;
  CHECK_OK(mxu_compile(m, &cc));
  float xa[N * D], xb[N * D], probs[N * K], sums[N * D];
  for (int i = 0; i < N * D; i++) {
    xa[i] = 0.1f * (float)(i % 7) - 0.3f;
    xb[i] = 0.05f * (float)(i % 5);
  }
  const float *inputs[2] = {xa, xb};
  float *outputs[2] = {probs, sums};
  CHECK_OK(mxu_predict_outputs(m, inputs, N, outputs));
  /* mxu_predict takes one input and one output, and says so. */
  CHECK(mxu_predict(m, xa, N, probs) == MXU_ERR_UNSUPPORTED);
  CHECK_OK(mxu_predict_outputs(m, inputs, N, outputs));
  mxu_tensor kernel, bias;
  int dense_layer = mxu_model_layer_count(m) - 1;
  CHECK_OK(mxu_layer_weight(m, dense_layer, 0, &kernel, NULL));
  CHECK_OK(mxu_layer_weight(m, dense_layer, 1, &bias, NULL));
  const float *w = kernel.data, *bv = bias.data;
  for (int r = 0; r < N; r++) {
    double z[K], total = 0;
    for (int k = 0; k < K; k++) {
      z[k] = bv[k];
      for (int i = 0; i < D; i++)
        z[k] += (double)(xa[r * D + i] + xb[r * D + i]) * w[i * K + k];
      total += exp(z[k]);
    }
    for (int k = 0; k < K; k++)
      CHECK_NEAR(probs[r * K + k], exp(z[k]) / total, 1e-5);
    for (int i = 0; i < D; i++)
      CHECK(sums[r * D + i] == xa[r * D + i] + xb[r * D + i]);
  }
  mxu_model_free(m);
}

/* ---- fit on several inputs ------------------------------------------------
 * Inputs a (noise) and b, whose argmax is the class: Dense(a) + Dense(b)
 * -> softmax. Fit shuffles both inputs by one order and validates on a
 * slice of both; learning the class shows b's rows travel with their
 * labels, the two backends agreeing shows nothing else differs. */
static mxu_model *two_input_model(mxu_backend_kind backend) {
  mxu_model *m = mxu_functional("two_inputs");
  int64_t da = 4, db = 3;
  mxu_tensor_id a = mxu_input(m, "a", mxu_shape_make(1, &da));
  mxu_tensor_id b = mxu_input(m, "b", mxu_shape_make(1, &db));
  mxu_dense_config hidden = mxu_dense_defaults(16);
  hidden.activation = MXU_RELU;
  hidden.name = "from_a";
  mxu_tensor_id ha = mxu_apply_dense(m, &hidden, a);
  hidden.name = "from_b";
  mxu_tensor_id hb = mxu_apply_dense(m, &hidden, b);
  mxu_dense_config out = mxu_dense_defaults(3);
  out.activation = MXU_SOFTMAX;
  mxu_tensor_id y = mxu_apply_dense(m, &out, mxu_add(m, "sum", ha, hb));
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  mxu_compile_config cc = config_for(backend);
  cc.optimizer = mxu_adam(0.02f);
  cc.batch_size = 16;
  cc.seed = 5;
  CHECK_OK(mxu_compile(m, &cc));
  return m;
}

static void test_fit_several_inputs(void) {
  enum { N = 512 };
  static float xa[N * 4], xb[N * 3];
  static int32_t labels[N];
  mxu_rng rng = mxu_rng_make(23, 1, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, xa, N * 4);
  mxu_rng_uniform(&rng, 1, xb, N * 3);
  for (int i = 0; i < N; i++) {
    const float *r = xb + 3 * i;
    labels[i] = r[0] > r[1] ? (r[0] > r[2] ? 0 : 2) : (r[1] > r[2] ? 1 : 2);
  }
  int64_t da = 4, dc = 3;
  mxu_dataset *data = NULL, *train = NULL, *val = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(xa, labels, N, mxu_shape_make(1, &da), 3, &data));
  if (!data) return;
  mxu_model *fast = two_input_model(MXU_BACKEND_CPU);
  mxu_model *ref = two_input_model(MXU_BACKEND_CPU_REF);
  mxu_fit_config fit = mxu_fit_defaults();
  fit.epochs = 6;
  fit.batch_size = 16;
  fit.seed = 2;
  fit.verbose = 0;
  /* Samples for one input of two: refused, naming the counts. */
  CHECK(mxu_fit(fast, data, &fit, NULL) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "samples for 1 inputs but the model has 2"));
  CHECK(mxu_dataset_add_input(data, xb, mxu_shape_make(1, &dc)) == MXU_OK);
  CHECK(mxu_dataset_input_count(data) == 2);
  CHECK_OK(mxu_dataset_slice(data, 0, 448, &train));
  CHECK_OK(mxu_dataset_slice(data, 448, 64, &val));
  fit.validation = val;
  const mxu_history *h1 = NULL, *h2 = NULL;
  CHECK_OK(mxu_fit(fast, train, &fit, &h1));
  CHECK_OK(mxu_fit(ref, train, &fit, &h2));
  if (h1 && h2 && h1->count == 6 && h2->count == 6) {
    CHECK_MSG(h1->epochs[5].val_accuracy > 0.9, "val accuracy %.3f",
              h1->epochs[5].val_accuracy);
    CHECK_NEAR(h1->epochs[5].loss, h2->epochs[5].loss, 1e-4);
  }
  check_same(fast->weights, ref->weights, fast->trainable_count, "weight",
             "two inputs", "the model");
  double loss = 0, acc = 0;
  CHECK_OK(mxu_evaluate(fast, val, 32, &loss, &acc));
  if (h1 && h1->count == 6) CHECK_NEAR(acc, h1->epochs[5].val_accuracy, 1e-6);
  /* b's samples of another shape: refused, naming the input. */
  mxu_dataset *wrong = NULL;
  CHECK_OK(mxu_dataset_from_arrays(xa, labels, N, mxu_shape_make(1, &da), 3,
                                   &wrong));
  if (wrong) {
    CHECK_OK(mxu_dataset_add_input(wrong, xa, mxu_shape_make(1, &da)));
    CHECK(mxu_evaluate(fast, wrong, 32, &loss, &acc) == MXU_ERR_SHAPE &&
          strstr(mxu_errmsg(), "input 'b' takes (3)"));
  }
  mxu_dataset_free(wrong);
  mxu_dataset_free(val);
  mxu_dataset_free(train);
  mxu_dataset_free(data);
  mxu_model_free(fast);
  mxu_model_free(ref);
}

/* ---- limits -------------------------------------------------------------
 * Numbers that overflowed or crashed (issue 21): each refused at the
 * boundary, naming the limit. */
static void test_limits(void) {
  mxu_model *m = mxu_functional("limits");
  int64_t dims[3] = {8, 8, 1};
  mxu_tensor_id x = mxu_input(m, "x", mxu_shape_make(3, dims));
  mxu_conv2d_config huge = mxu_conv2d_defaults(2, 2147483647, 2147483647);
  huge.padding = MXU_SAME;
  huge.strides[0] = 2147483647;
  CHECK(mxu_apply_conv2d(m, &huge, x) == -1 &&
        strstr(mxu_errmsg(), "MXU_MAX_WINDOW"));
  mxu_tensor_id flat = mxu_apply_flatten(m, NULL, x);
  mxu_dense_config wide = mxu_dense_defaults(1 << 30);
  CHECK(mxu_apply_dense(m, &wide, flat) == -1 &&
        strstr(mxu_errmsg(), "MXU_MAX_DIM"));
  mxu_dense_config head = mxu_dense_defaults(3);
  head.activation = MXU_SOFTMAX;
  mxu_tensor_id y = mxu_apply_dense(m, &head, flat);
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  mxu_compile_config cc = mxu_compile_defaults();
  cc.threads = 100000;
  CHECK(mxu_compile(m, &cc) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "MXU_MAX_THREADS"));
  cc.threads = 1;
  cc.batch_size = 2147483647;
  CHECK(mxu_compile(m, &cc) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "MXU_MAX_BATCH"));
  /* A batch whose activations would pass 2^31 values per replica. */
  int64_t big[3] = {1 << 14, 1 << 14, 1};
  mxu_model *b = mxu_functional("big");
  mxu_tensor_id bx = mxu_input(b, "x", mxu_shape_make(3, big));
  mxu_global_pool2d_config gap = {NULL, 0, 0};
  mxu_dense_config two = mxu_dense_defaults(2);
  mxu_tensor_id by =
      mxu_apply_dense(b, &two, mxu_apply_global_pooling2d(b, &gap, bx));
  CHECK_OK(mxu_model_outputs(b, &by, 1));
  /* 2^28 values a sample: even a slice of 32 rows passes 2^31. */
  cc.batch_size = 64;
  CHECK(mxu_compile(b, &cc) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "MXU_MAX_ELEMENTS"));
  mxu_model_free(b);
  mxu_model_free(m);
}

/* An empty split is an error that says so, not a batch "of at most 0" or
 * an accuracy of 0 over nothing (issue 21). */
static void test_empty_data(void) {
  mxu_model *m = mxu_functional("empty");
  int64_t d = 4;
  mxu_tensor_id x = mxu_input(m, "x", mxu_shape_make(1, &d));
  mxu_dense_config head = mxu_dense_defaults(2);
  head.activation = MXU_SOFTMAX;
  mxu_tensor_id y = mxu_apply_dense(m, &head, x);
  CHECK_OK(mxu_model_outputs(m, &y, 1));
  mxu_compile_config cc = mxu_compile_defaults();
  cc.batch_size = 2;
  CHECK_OK(mxu_compile(m, &cc));
  mxu_dataset *none = NULL;
  CHECK_OK(
      mxu_dataset_from_arrays(NULL, NULL, 0, mxu_shape_make(1, &d), 2, &none));
  double loss = -1, accuracy = -1;
  CHECK(mxu_evaluate(m, none, 0, &loss, &accuracy) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "no samples") && accuracy == -1);
  mxu_fit_config fit = mxu_fit_defaults();
  fit.verbose = 0;
  CHECK(mxu_fit(m, none, &fit, NULL) == MXU_ERR_ARG &&
        strstr(mxu_errmsg(), "fit: the data set has no samples"));
  mxu_dataset_free(none);
  mxu_model_free(m);
}

/* A ZeroPadding2D that a conv alone reads, folded into the conv's own
 * padding: MobileNetV2's ((0, 1), (0, 1)) before a stride-2 depthwise
 * conv, ResNet50's 3 all round before a 'valid' 7x7 conv, one whose input
 * is read twice (its gradient then copied, not shared). Not folded: one
 * before a 'same' conv (only 'valid' ones take margins), one read by two
 * convs. */
enum { PAD_DEPTHWISE, PAD_CONV, PAD_SAME, PAD_INPUT_TWICE, PAD_READ_TWICE };

static mxu_tensor_id pad_fold_graph(mxu_model *m, const void *ctx) {
  int variant = *(const int *)ctx;
  static const int64_t dims[3] = {8, 7, 4};
  mxu_tensor_id x = input_identity(m, dims);
  mxu_zero_padding2d_config pad = {"pad", 1, 1, 1, 1};
  if (variant == PAD_DEPTHWISE)
    pad = (mxu_zero_padding2d_config){"pad", 0, 1, 0, 1};
  if (variant == PAD_CONV) pad = (mxu_zero_padding2d_config){"pad", 3, 3, 3, 3};
  if (variant == PAD_SAME) pad = (mxu_zero_padding2d_config){"pad", 2, 0, 1, 1};
  mxu_tensor_id p = mxu_apply_zero_padding2d(m, &pad, x);
  mxu_conv2d_config conv = mxu_conv2d_defaults(4, 3, 3);
  conv.name = "conv";
  mxu_tensor_id y;
  if (variant == PAD_DEPTHWISE) {
    mxu_depthwise_conv2d_config dw = mxu_depthwise_conv2d_defaults(3, 3);
    dw.name = "conv";
    dw.strides[0] = dw.strides[1] = 2;
    y = mxu_apply_depthwise_conv2d(m, &dw, p);
  } else {
    if (variant == PAD_CONV) {
      conv.kernel_size[0] = conv.kernel_size[1] = 7;
      conv.strides[0] = conv.strides[1] = 2;
    }
    if (variant == PAD_SAME) conv.padding = MXU_SAME;
    y = mxu_apply_conv2d(m, &conv, p);
  }
  if (variant == PAD_INPUT_TWICE) y = mxu_add(m, NULL, y, x);
  if (variant == PAD_READ_TWICE) {
    conv.name = "other";
    y = mxu_add(m, NULL, y, mxu_apply_conv2d(m, &conv, p));
  }
  /* tanh, not relu: no kink for the backends' roundings (Winograd's on
   * 4 channels where vectors are 4 floats) to take different sides of */
  return head(m, mxu_apply_activation(m, NULL, MXU_TANH, y));
}

/* Both backends fold it (the ZeroPadding2D a view, the conv padding) and
 * train as the layers apart do: gradients against finite differences,
 * cpu against cpu_ref. */
static void test_pad_folding(void) {
  static const struct {
    const char *name;
    int variant, folded;
  } cases[] = {
      {"ZeroPadding2D((0, 1), (0, 1)), DepthwiseConv2D stride 2", PAD_DEPTHWISE,
       1},
      {"ZeroPadding2D(3), Conv2D 7x7 stride 2", PAD_CONV, 1},
      {"ZeroPadding2D((2, 0), (1, 1)), Conv2D 'same'", PAD_SAME, 0},
      {"ZeroPadding2D read by a conv, its input by an Add too", PAD_INPUT_TWICE,
       1},
      {"ZeroPadding2D read by two convs", PAD_READ_TWICE, 0},
  };
  static const mxu_backend_kind kinds[2] = {MXU_BACKEND_CPU,
                                            MXU_BACKEND_CPU_REF};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *name = cases[i].name;
    for (int k = 0; k < 2; k++) {
      mxu_model *m = build(name, pad_fold_graph, &cases[i].variant, kinds[k]);
      if (!m) continue;
      int pad = node_named(m, "pad"), conv = node_named(m, "conv");
      CHECK_MSG(m->layers[pad].compiled->folded == cases[i].folded,
                "%s: folded %d", name, m->layers[pad].compiled->folded);
      CHECK(m->layers[conv].compiled->margins[0] ==
            (cases[i].folded ? m->layers[pad].config.padding.top : 0));
      CHECK((m->plan.act[pad] == m->plan.act[m->layers[pad].inputs[0]]) ==
            cases[i].folded);
      if (k == 1) finite_differences(m, name);
      mxu_model_free(m);
    }
    backends_agree(name, pad_fold_graph, &cases[i].variant);
    same_with_shared_gradients(name, pad_fold_graph, &cases[i].variant);
  }
}

/* What layers without weights make of a model input carries no gradient
 * (none is computed) unless keep_gradients asks for every one: input ->
 * Rescaling -> ZeroPadding2D -> conv, added to the Rescaling's output. */
static mxu_tensor_id weightless_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t dims[3] = {6, 5, 3};
  mxu_tensor_id x = mxu_input(m, NULL, mxu_shape_make(3, dims));
  mxu_rescaling_config scale = {"rescaling", 0.5f, 0.25f};
  mxu_tensor_id r = mxu_apply_rescaling(m, &scale, x);
  mxu_zero_padding2d_config pad = {"pad", 1, 1, 1, 1};
  mxu_conv2d_config conv = mxu_conv2d_defaults(3, 3, 3);
  conv.name = "conv";
  mxu_tensor_id c =
      mxu_apply_conv2d(m, &conv, mxu_apply_zero_padding2d(m, &pad, r));
  return head(m, mxu_add(m, "add", c, r));
}

static void test_gradients_needed(void) {
  const char *name = "input, Rescaling, ZeroPadding2D, Conv2D, Add";
  for (int keep = 0; keep < 2; keep++) {
    mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
    cc.keep_gradients = keep;
    mxu_model *m = build_with(name, weightless_graph, NULL, &cc);
    if (!m) return;
    int conv = node_named(m, "conv"), add = node_named(m, "add");
    int pad = node_named(m, "pad"), rescaling = node_named(m, "rescaling");
    const mxu_edge *e = m->plan.edges;
    CHECK(e[conv * MXU_MAX_INPUTS].need_dx == keep);
    CHECK(e[pad * MXU_MAX_INPUTS].need_dx == keep);
    CHECK(e[rescaling * MXU_MAX_INPUTS].need_dx == 0); /* a model input */
    CHECK(e[add * MXU_MAX_INPUTS].need_dx == 1);       /* the conv's */
    CHECK(e[add * MXU_MAX_INPUTS + 1].need_dx == keep);
    mxu_model_free(m);
  }
  same_with_shared_gradients(name, weightless_graph, NULL);
}

/* ---- sequences: (steps, channels) -----------------------------------------
 * Conv1D and the 1-D poolings against loops written here over the
 * sequence, then finite differences and the two backends; Embedding's
 * rows and its table's gradient. */

#define STEPS 9
#define SEQ_CHANNELS 4

typedef struct sequence_case {
  const char *name;
  enum { CONV1D, MAX1D, AVG1D, GLOBAL_AVG1D, GLOBAL_MAX1D } kind;
  int size, strides, dilation, groups, filters; /* window; Conv1D's */
  mxu_padding padding;
  int keepdims;
  int64_t out_steps;
} sequence_case;

static mxu_tensor_id sequence_graph(mxu_model *m, const void *ctx) {
  const sequence_case *c = ctx;
  static const int64_t shape[2] = {STEPS, SEQ_CHANNELS};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, NULL, mxu_shape_make(2, shape)));
  mxu_pool1d_config pool = mxu_pool1d_defaults(c->size);
  pool.name = "under_test";
  pool.strides = c->strides;
  pool.padding = c->padding;
  mxu_global_pool2d_config global = {"under_test", c->kind == GLOBAL_MAX1D,
                                     c->keepdims};
  switch (c->kind) {
  case CONV1D: {
    mxu_conv1d_config conv = mxu_conv1d_defaults(c->filters, c->size);
    conv.name = "under_test";
    conv.strides = c->strides;
    conv.dilation_rate = c->dilation;
    conv.groups = c->groups;
    conv.padding = c->padding;
    conv.activation = MXU_TANH;
    conv.bias.initializer.kind = MXU_INIT_RANDOM_UNIFORM;
    conv.bias.initializer.minval = -0.5f, conv.bias.initializer.maxval = 0.5f;
    return head(m, mxu_apply_conv1d(m, &conv, x));
  }
  case MAX1D: return head(m, mxu_apply_max_pooling1d(m, &pool, x));
  case AVG1D: return head(m, mxu_apply_average_pooling1d(m, &pool, x));
  default: return head(m, mxu_apply_global_pooling1d(m, &global, x));
  }
}

/* Where the window of output step 0 starts: Keras' padding. */
static int window_start(const sequence_case *c, int span) {
  if (c->padding == MXU_CAUSAL) return -(span - 1);
  if (c->padding == MXU_VALID) return 0;
  int total = ((int)c->out_steps - 1) * c->strides + span - STEPS;
  return total > 0 ? -(total / 2) : 0;
}

/* One sample's output: x (STEPS, SEQ_CHANNELS); w, b Conv1D's weights. */
static void sequence_expect(const sequence_case *c, const float *x,
                            const float *w, const float *b, float *y) {
  int span = (c->size - 1) * (c->kind == CONV1D ? c->dilation : 1) + 1;
  int start = window_start(c, span);
  int in_group = SEQ_CHANNELS / (c->kind == CONV1D ? c->groups : 1);
  for (int t = 0; t < (int)c->out_steps; t++) {
    int first = t * c->strides + start;
    if (c->kind == CONV1D) {
      int per_group = c->filters / c->groups;
      for (int f = 0; f < c->filters; f++) {
        double sum = b[f];
        int g = f / per_group;
        for (int k = 0; k < c->size; k++) {
          int at = first + k * c->dilation;
          if (at < 0 || at >= STEPS) continue;
          for (int ch = 0; ch < in_group; ch++)
            sum += (double)x[at * SEQ_CHANNELS + g * in_group + ch] *
                   w[(k * in_group + ch) * c->filters + f];
        }
        y[t * c->filters + f] = tanhf((float)sum);
      }
      continue;
    }
    for (int ch = 0; ch < SEQ_CHANNELS; ch++) {
      double sum = 0;
      float best = -INFINITY;
      int n = 0;
      for (int k = 0; k < c->size; k++) {
        int at = first + k;
        if (at < 0 || at >= STEPS) continue;
        float v = x[at * SEQ_CHANNELS + ch];
        sum += v, n++;
        if (v > best) best = v;
      }
      y[t * SEQ_CHANNELS + ch] = c->kind == MAX1D ? best : (float)(sum / n);
    }
  }
}

static void global_expect(const sequence_case *c, const float *x, float *y) {
  for (int ch = 0; ch < SEQ_CHANNELS; ch++) {
    double sum = 0;
    float best = x[ch];
    for (int t = 0; t < STEPS; t++) {
      float v = x[t * SEQ_CHANNELS + ch];
      sum += v;
      if (v > best) best = v;
    }
    y[ch] = c->kind == GLOBAL_MAX1D ? best : (float)(sum / STEPS);
  }
}

static void check_sequence(const sequence_case *c) {
  mxu_model *m = build(c->name, sequence_graph, c, MXU_BACKEND_CPU_REF);
  if (!m) return;
  int node = node_named(m, "under_test");
  const mxu_layer *l = &m->layers[node];
  int global = c->kind == GLOBAL_AVG1D || c->kind == GLOBAL_MAX1D;
  int64_t channels = c->kind == CONV1D ? c->filters : SEQ_CHANNELS;
  int rank = global ? 1 + c->keepdims : 2;
  int64_t steps = global ? 1 : c->out_steps;
  CHECK_MSG(
      l->out_shape.rank == rank && l->out_shape.dims[rank - 1] == channels &&
          (rank == 1 || l->out_shape.dims[0] == steps),
      "%s: output shape of rank %d, (%lld, %lld)", c->name, l->out_shape.rank,
      (long long)l->out_shape.dims[0], (long long)l->out_shape.dims[1]);
  const float *w = NULL, *b = NULL;
  for (int i = 0; i < m->param_count; i++)
    if (m->params[i].layer == node)
      *(strcmp(m->params[i].name, "kernel") == 0 ? &w : &b) =
          mxu_param_values(m, &m->params[i]);
  if (c->kind == CONV1D) CHECK_MSG(w && b, "%s: no kernel and bias", c->name);
  load_inputs(m, 8);
  train_step(m);
  int64_t out_count = steps * channels;
  float want[STEPS * 8];
  for (int r = 0; r < BATCH && (w || c->kind != CONV1D); r++) {
    const float *x = act(m, m->inputs[0]) + r * STEPS * SEQ_CHANNELS;
    if (global)
      global_expect(c, x, want);
    else
      sequence_expect(c, x, w, b, want);
    const float *got = act(m, node) + r * out_count;
    for (int64_t i = 0; i < out_count; i++)
      if (!(fabs(got[i] - want[i]) <= 1e-5 * fabs(want[i]) + 1e-6)) {
        CHECK_MSG(0, "%s: sample %d value %lld: %.7g, want %.7g", c->name, r,
                  (long long)i, (double)got[i], (double)want[i]);
        break;
      }
  }
  finite_differences(m, c->name);
  mxu_model_free(m);
  backends_agree(c->name, sequence_graph, c);
}

/* DepthwiseConv1D then SeparableConv1D (checked against Keras by
 * test_golden's separable1d net): finite differences and the two
 * backends. */
static mxu_tensor_id separable1d_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t shape[2] = {STEPS, SEQ_CHANNELS};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, NULL, mxu_shape_make(2, shape)));
  mxu_depthwise_conv2d_config dw = mxu_depthwise_conv2d_defaults(1, 3);
  dw.name = "depthwise", dw.depth_multiplier = 2, dw.padding = MXU_SAME;
  dw.activation = MXU_TANH;
  dw.bias.initializer.kind = MXU_INIT_RANDOM_UNIFORM;
  dw.bias.initializer.minval = -0.5f, dw.bias.initializer.maxval = 0.5f;
  mxu_separable_conv2d_config sep = mxu_separable_conv2d_defaults(3, 1, 2);
  sep.name = "separable", sep.strides[1] = 2, sep.depth_multiplier = 2;
  sep.activation = MXU_TANH;
  return head(m, mxu_apply_separable_conv1d(
                     m, &sep, mxu_apply_depthwise_conv1d(m, &dw, x)));
}

static int dims_are(mxu_shape s, int rank, int64_t a, int64_t b, int64_t c) {
  int64_t want[3] = {a, b, c};
  if (s.rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (s.dims[i] != want[i]) return 0;
  return 1;
}

static void test_separable1d(void) {
  const char *name = "DepthwiseConv1D, SeparableConv1D";
  mxu_model *m = build(name, separable1d_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  const mxu_layer *sep = &m->layers[node_named(m, "separable")];
  /* 9 steps, stride 2, kernel 2: 4; its kernels (2, 8, 2), (1, 16, 3). */
  CHECK(dims_are(sep->out_shape, 2, 4, 3, 0) &&
        dims_are(m->params[sep->param_first].shape, 3, 2, 8, 2) &&
        dims_are(m->params[sep->param_first + 1].shape, 3, 1, 16, 3));
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, separable1d_graph, NULL);
}

/* Volumes (6, 7, 6, 2): Conv3D (same, strides 2 along depth: the last
 * depth tap reads padding; groups 2; relu), MaxPooling3D (same),
 * AveragePooling3D (1 along width, stride 1, same: windows cut by the
 * edges), Conv3D (valid, dilated along height, tanh), then
 * GlobalMaxPooling3D, GlobalAveragePooling3D, and Conv3DTranspose
 * (valid, strided; same, dilated), UpSampling3D, ZeroPadding3D and
 * Cropping3D. */
static mxu_tensor_id volume_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t dims[4] = {6, 7, 6, 2};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "volume", mxu_shape_make(4, dims)));
  mxu_conv3d_config conv = mxu_conv3d_defaults(4, 3, 2, 3);
  conv.name = "conv3d";
  conv.padding = MXU_SAME;
  conv.strides[0] = 2;
  conv.groups = 2;
  conv.activation = MXU_RELU;
  x = mxu_apply_conv3d(m, &conv, x);
  mxu_pool3d_config pool = mxu_pool3d_defaults(2);
  pool.padding = MXU_SAME;
  x = mxu_apply_max_pooling3d(m, &pool, x);
  mxu_pool3d_config avg = {"avg3d", {2, 2, 1}, {1, 1, 1}, MXU_SAME};
  x = mxu_apply_average_pooling3d(m, &avg, x);
  mxu_conv3d_config second = mxu_conv3d_defaults(3, 2, 2, 2);
  second.name = "dilated3d";
  second.dilation_rate[1] = 2;
  second.activation = MXU_TANH;
  x = mxu_apply_conv3d(m, &second, x);
  mxu_global_pool2d_config gmp = {"gmp3d", 1, 0}, gap = {"gap3d", 0, 1};
  /* (1, 2, 2) -> transposed, valid (2, 4, 4) -> (4, 4, 8) -> (5, 5, 8)
   * -> (4, 4, 5); and transposed, same, dilated (1, 2, 2). */
  mxu_conv3d_config t = mxu_conv3d_defaults(2, 2, 3, 2);
  t.name = "transposed3d";
  t.strides[0] = t.strides[2] = 2;
  t.activation = MXU_RELU;
  mxu_conv3d_config same = mxu_conv3d_defaults(3, 3, 2, 2);
  same.name = "same_transposed3d";
  same.padding = MXU_SAME;
  same.dilation_rate[0] = 2;
  same.activation = MXU_TANH;
  mxu_upsampling3d_config up = {"up3d", {2, 1, 2}};
  mxu_margins3d_config pad = {"pad3d", {{0, 1}, {1, 0}, {0, 0}}},
                       crop = {"crop3d", {{1, 0}, {0, 1}, {1, 2}}};
  mxu_tensor_id u = mxu_apply_zero_padding3d(
      m, &pad,
      mxu_apply_upsampling3d(m, &up, mxu_apply_conv3d_transpose(m, &t, x)));
  mxu_tensor_id all[4] = {
      mxu_apply_global_pooling3d(m, &gmp, x),
      mxu_apply_flatten(m, NULL, mxu_apply_global_pooling3d(m, &gap, x)),
      mxu_apply_flatten(m, NULL, mxu_apply_cropping3d(m, &crop, u)),
      mxu_apply_flatten(m, NULL, mxu_apply_conv3d_transpose(m, &same, x))};
  return head(m, mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, all, 4, -1));
}

static int volume_is(mxu_shape s, int64_t d, int64_t h, int64_t w, int64_t c) {
  return s.rank == 4 && s.dims[0] == d && s.dims[1] == h && s.dims[2] == w &&
         s.dims[3] == c;
}

static void test_volumes(void) {
  const char *name = "Conv3D, the 3-D poolings";
  mxu_model *m = build(name, volume_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  const mxu_layer *conv = &m->layers[node_named(m, "conv3d")];
  const mxu_layer *dilated = &m->layers[node_named(m, "dilated3d")];
  /* depth 6 stride 2 same: 3; pooled (2, 4, 3); dilated valid (1, 2, 2). */
  const mxu_shape *kernel = &m->params[conv->param_first].shape;
  CHECK(volume_is(conv->out_shape, 3, 7, 6, 4) && kernel->rank == 5 &&
        kernel->dims[0] == 3 && kernel->dims[3] == 1 && kernel->dims[4] == 4);
  CHECK(volume_is(m->layers[node_named(m, "avg3d")].out_shape, 2, 4, 3, 4) &&
        volume_is(dilated->out_shape, 1, 2, 2, 3));
  CHECK(volume_is(m->layers[node_named(m, "gap3d")].out_shape, 1, 1, 1, 3));
  const mxu_layer *t = &m->layers[node_named(m, "transposed3d")];
  CHECK(volume_is(t->out_shape, 2, 4, 4, 2) &&
        m->params[t->param_first].shape.dims[3] == 2 &&
        m->params[t->param_first].shape.dims[4] == 3);
  CHECK(volume_is(m->layers[node_named(m, "pad3d")].out_shape, 5, 5, 8, 2) &&
        volume_is(m->layers[node_named(m, "crop3d")].out_shape, 4, 4, 5, 2) &&
        volume_is(m->layers[node_named(m, "same_transposed3d")].out_shape, 1, 2,
                  2, 3));
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, volume_graph, NULL);
}

/* The adaptive poolings on (7, 5, 2) images: 2-D max (3, 2) and average
 * (4, 3) (windows sharing inputs), 1-D over the rows (7, 10) to 3 and 7
 * (one input a window), 3-D over (7, 5, 1, 2) to (2, 4, 1). */
static mxu_tensor_id adaptive_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t dims[3] = {7, 5, 2}, rows[2] = {7, 10}, volume[4] = {7, 5, 1, 2};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "image", mxu_shape_make(3, dims)));
  mxu_adaptive_pool_config max2d = {"max2d", {3, 2, 0}},
                           avg2d = {"avg2d", {4, 3, 0}},
                           avg1d = {"avg1d", {3, 0, 0}},
                           max1d = {"max1d", {7, 0, 0}},
                           max3d = {"max3d", {2, 4, 1}};
  mxu_reshape_config r = {"rows", mxu_shape_make(2, rows)},
                     v = {"volume", mxu_shape_make(4, volume)};
  mxu_tensor_id seq = mxu_apply_reshape(m, &r, x);
  mxu_tensor_id all[5] = {
      mxu_apply_flatten(m, NULL, mxu_apply_adaptive_max_pooling(m, &max2d, x)),
      mxu_apply_flatten(m, NULL,
                        mxu_apply_adaptive_average_pooling(m, &avg2d, x)),
      mxu_apply_flatten(m, NULL,
                        mxu_apply_adaptive_average_pooling(m, &avg1d, seq)),
      mxu_apply_flatten(m, NULL,
                        mxu_apply_adaptive_max_pooling(m, &max1d, seq)),
      mxu_apply_flatten(m, NULL,
                        mxu_apply_adaptive_max_pooling(
                            m, &max3d, mxu_apply_reshape(m, &v, x)))};
  return head(m, mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, all, 5, -1));
}

static void test_adaptive_pooling(void) {
  const char *name = "adaptive poolings";
  mxu_model *m = build(name, adaptive_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  const mxu_layer *avg = &m->layers[node_named(m, "avg2d")];
  CHECK(avg->cls == &mxu_adaptive_pooling_classes[0][1] &&
        avg->out_shape.rank == 3 && avg->out_shape.dims[0] == 4 &&
        avg->out_shape.dims[1] == 3 && avg->out_shape.dims[2] == 2);
  CHECK(m->layers[node_named(m, "max3d")].cls ==
            &mxu_adaptive_pooling_classes[1][2] &&
        volume_is(m->layers[node_named(m, "max3d")].out_shape, 2, 4, 1, 2));
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, adaptive_graph, NULL);
  /* Sizes the input cannot take. */
  mxu_model *bad = mxu_functional("bad");
  int64_t dims[3] = {7, 5, 2};
  mxu_tensor_id x = mxu_input(bad, "x", mxu_shape_make(3, dims));
  mxu_adaptive_pool_config three = {"three", {2, 2, 2}},
                           none = {"none", {0, 0, 0}};
  CHECK(mxu_apply_adaptive_max_pooling(bad, &three, x) < 0 &&
        strstr(mxu_errmsg(), "three: AdaptiveMaxPooling3D expects 3 spatial "
                             "axes and channels, got (7, 5, 2)"));
  CHECK(mxu_apply_adaptive_average_pooling(bad, &none, x) < 0 &&
        strstr(mxu_errmsg(), "output_size is empty"));
  mxu_model_free(bad);
}

/* ConvLSTM2D over 3 frames (5, 4, 2): same padding, sequences, then
 * valid and strided, backwards, the last step, a hard sigmoid without
 * bias. */
static mxu_tensor_id conv_lstm_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t dims[4] = {3, 5, 4, 2};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "clip", mxu_shape_make(4, dims)));
  mxu_conv_lstm2d_config a = mxu_conv_lstm2d_defaults(3, 3, 2);
  a.name = "conv_lstm";
  a.padding = MXU_SAME;
  a.return_sequences = 1;
  x = mxu_apply_conv_lstm2d(m, &a, x);
  mxu_conv_lstm2d_config b = mxu_conv_lstm2d_defaults(2, 2, 2);
  b.name = "conv_lstm_back";
  b.strides[0] = 2;
  b.go_backwards = 1;
  b.use_bias = 0;
  b.recurrent_activation = MXU_HARD_SIGMOID;
  return head(m, mxu_apply_conv_lstm2d(m, &b, x));
}

/* ConvLSTM1D over 4 frames (7, 2): same, sequences; valid and strided,
 * backwards. */
static mxu_tensor_id conv_lstm1d_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t dims[3] = {4, 7, 2};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "series", mxu_shape_make(3, dims)));
  mxu_conv_lstm2d_config a = mxu_conv_lstm2d_defaults(3, 1, 3);
  a.name = "conv_lstm1d";
  a.padding = MXU_SAME;
  a.return_sequences = 1;
  mxu_conv_lstm2d_config b = mxu_conv_lstm2d_defaults(2, 1, 2);
  b.strides[1] = 2;
  b.go_backwards = 1;
  return head(m, mxu_apply_conv_lstm1d(m, &b, mxu_apply_conv_lstm1d(m, &a, x)));
}

static void test_conv_lstm(void) {
  const char *name = "ConvLSTM2D";
  mxu_model *m = build(name, conv_lstm_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  const mxu_layer *a = &m->layers[node_named(m, "conv_lstm")];
  const mxu_layer *b = &m->layers[node_named(m, "conv_lstm_back")];
  CHECK(volume_is(a->out_shape, 3, 5, 4, 3) &&
        dims_are(b->out_shape, 3, 2, 3, 2));
  const mxu_shape *kernel = &m->params[a->param_first].shape,
                  *recurrent = &m->params[a->param_first + 1].shape;
  CHECK(kernel->rank == 4 && kernel->dims[2] == 2 && kernel->dims[3] == 12 &&
        recurrent->dims[2] == 3 && recurrent->dims[3] == 12);
  /* unit_forget_bias: the f gate's bias starts at ones. */
  const float *bias = m->weights + m->params[a->param_first + 2].offset;
  CHECK(bias[0] == 0.0f && bias[3] == 1.0f && bias[5] == 1.0f &&
        bias[6] == 0.0f);
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, conv_lstm_graph, NULL);
  name = "ConvLSTM1D";
  m = build(name, conv_lstm1d_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  a = &m->layers[node_named(m, "conv_lstm1d")];
  kernel = &m->params[a->param_first].shape;
  CHECK(dims_are(a->out_shape, 3, 4, 7, 3) && kernel->rank == 3 &&
        kernel->dims[0] == 3 && kernel->dims[1] == 2 && kernel->dims[2] == 12);
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, conv_lstm1d_graph, NULL);
}

/* TimeDistributed: a clip of 3 frames (5, 5, 2), each through Conv2D
 * (same, relu), BatchNormalization, MaxPooling2D, DepthwiseConv2D and
 * GlobalAveragePooling2D; and a series of 3 sequences (6, 2) through
 * Conv1D and Flatten: each step's image one of the batch. */
static mxu_tensor_id time_distributed_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t clip[4] = {3, 5, 5, 2}, series[3] = {3, 6, 2};
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "clip", mxu_shape_make(4, clip)));
  mxu_tensor_id s = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "series", mxu_shape_make(3, series)));
  CHECK_OK(mxu_time_distributed(m, 1));
  mxu_conv2d_config conv = mxu_conv2d_defaults(3, 3, 3);
  conv.name = "frames_conv";
  conv.padding = MXU_SAME;
  conv.activation = MXU_RELU;
  x = mxu_apply_conv2d(m, &conv, x);
  mxu_batchnorm_config bn = mxu_batchnorm_defaults();
  x = mxu_apply_batch_normalization(m, &bn, x);
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  x = mxu_apply_max_pooling2d(m, &pool, x);
  mxu_depthwise_conv2d_config dw = mxu_depthwise_conv2d_defaults(2, 2);
  dw.activation = MXU_TANH;
  x = mxu_apply_depthwise_conv2d(m, &dw, x);
  mxu_global_pool2d_config gap = {"frames_gap", 0, 0};
  x = mxu_apply_global_pooling2d(m, &gap, x);
  mxu_conv1d_config c1 = mxu_conv1d_defaults(2, 3);
  c1.name = "series_conv";
  s = mxu_apply_flatten(m, "series_flat", mxu_apply_conv1d(m, &c1, s));
  CHECK_OK(mxu_time_distributed(m, 0));
  mxu_tensor_id both[2] = {x, s};
  return head(m, mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, both, 2, -1));
}

static void test_time_distributed(void) {
  const char *name = "TimeDistributed image layers";
  mxu_model *m = build(name, time_distributed_graph, NULL, MXU_BACKEND_CPU_REF);
  if (!m) return;
  /* The steps stay in every shape; each step's image runs alone. */
  CHECK(
      dims_are(m->layers[node_named(m, "frames_gap")].out_shape, 2, 3, 3, 0) &&
      dims_are(m->layers[node_named(m, "series_conv")].out_shape, 3, 3, 4, 2) &&
      dims_are(m->layers[node_named(m, "series_flat")].out_shape, 2, 3, 8, 0));
  CHECK(m->layers[node_named(m, "frames_conv")].time_steps == 3 &&
        strcmp(m->layers[node_named(m, "frames_conv")].wrapped,
               "frames_conv") == 0);
  finite_differences(m, name);
  mxu_model_free(m);
  backends_agree(name, time_distributed_graph, NULL);
  /* Called again (shared) on a clip of other length: that clip's steps. */
  m = mxu_functional("again");
  int64_t three[4] = {3, 5, 5, 2}, two[4] = {2, 5, 5, 2};
  mxu_tensor_id a = mxu_input(m, "a", mxu_shape_make(4, three));
  mxu_tensor_id b = mxu_input(m, "b", mxu_shape_make(4, two));
  CHECK_OK(mxu_time_distributed(m, 1));
  mxu_conv2d_config shared = mxu_conv2d_defaults(3, 3, 3);
  shared.padding = MXU_SAME;
  a = mxu_apply_conv2d(m, &shared, a);
  CHECK_OK(mxu_time_distributed(m, 0));
  b = mxu_apply_again(m, a, &b, 1);
  const mxu_shape *again = b >= 0 ? &m->layers[b].out_shape : NULL;
  CHECK(again && m->layers[b].time_steps == 2 && again->rank == 4 &&
        again->dims[0] == 2 && again->dims[1] == 5 && again->dims[2] == 5 &&
        again->dims[3] == 3);
  mxu_model_free(m);
  /* What TimeDistributed does not wrap, and inputs it cannot split. */
  m = mxu_functional("refused");
  int64_t dims[2] = {3, 4};
  mxu_tensor_id x = mxu_input(m, NULL, mxu_shape_make(2, dims));
  CHECK_OK(mxu_time_distributed(m, 1));
  mxu_rnn_config rnn = mxu_rnn_defaults(MXU_LSTM, 2);
  mxu_apply_rnn(m, &rnn, x);
  check_message("", "TimeDistributed(LSTM) 'lstm' is not supported");
  mxu_conv2d_config conv = mxu_conv2d_defaults(2, 1, 1);
  mxu_apply_conv2d(m, &conv, x);
  check_message("", "expects (steps, height, width, channels) input");
  mxu_model_free(m);
}

static const sequence_case sequence_cases[] = {
    {"Conv1D causal, dilation 2", CONV1D, 3, 1, 2, 1, 5, MXU_CAUSAL, 0, 9},
    {"Conv1D same, strides 2, groups 2", CONV1D, 3, 2, 1, 2, 6, MXU_SAME, 0, 5},
    {"Conv1D valid, kernel 4", CONV1D, 4, 1, 1, 1, 3, MXU_VALID, 0, 6},
    {"Conv1D causal, strides 3", CONV1D, 2, 3, 1, 1, 2, MXU_CAUSAL, 0, 3},
    {"MaxPooling1D(3, 2, same)", MAX1D, 3, 2, 1, 1, 0, MXU_SAME, 0, 5},
    {"AveragePooling1D(2)", AVG1D, 2, 2, 1, 1, 0, MXU_VALID, 0, 4},
    {"AveragePooling1D(4, 1, same)", AVG1D, 4, 1, 1, 1, 0, MXU_SAME, 0, 9},
    {"GlobalAveragePooling1D", GLOBAL_AVG1D, 0, 0, 0, 0, 0, MXU_VALID, 0, 1},
    {"GlobalMaxPooling1D keepdims", GLOBAL_MAX1D, 0, 0, 0, 0, 0, MXU_VALID, 1,
     1},
};

/* Embedding(6, 3) of 5 ids a sample: ids toward zero as Keras casts them
 * (-0.5 and 2.9 are rows 0 and 2), outside the table (-1, 6, NaN) zeros;
 * the table's gradient against finite differences. */
static mxu_tensor_id embedding_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  int64_t steps = 5;
  mxu_embedding_config e = {
      .name = "under_test", .input_dim = 6, .output_dim = 3};
  return head(m, mxu_apply_embedding(
                     m, &e, mxu_input(m, NULL, mxu_shape_make(1, &steps))));
}

static void test_embedding(void) {
  static const float ids[BATCH][5] = {
      {0, 5, 2.9f, -0.5f, 5}, {3, 3, -1, 6, 1}, {NAN, 3, 0, 1.5f, 2}};
  const char *name = "Embedding";
  for (int b = 0; b < 2; b++) {
    mxu_model *m = build(name, embedding_graph, NULL,
                         b ? MXU_BACKEND_CPU : MXU_BACKEND_CPU_REF);
    if (!m) return;
    int node = node_named(m, "under_test");
    const mxu_param *p = &m->params[0];
    CHECK(m->layers[node].out_shape.rank == 2 &&
          m->layers[node].out_shape.dims[1] == 3 &&
          strcmp(p->name, "embeddings") == 0 && p->count == 18);
    float *table = mxu_param_values(m, p);
    for (int i = 0; i < 18; i++) table[i] = 0.25f * (float)i - 2.0f;
    load_inputs(m, 5);
    memcpy(act(m, m->inputs[0]), ids, sizeof ids);
    train_step(m);
    const float *y = act(m, node);
    int bad = 0;
    for (int i = 0; i < BATCH * 5; i++) {
      float id = ids[i / 5][i % 5];
      int row = id > -1.0f && id < 6.0f ? (int)id : -1;
      for (int k = 0; k < 3; k++)
        bad += y[i * 3 + k] != (row < 0 ? 0.0f : table[row * 3 + k]);
    }
    CHECK_MSG(bad == 0, "%s: %d values off", name, bad);
    /* Rows read get a gradient; row 4, which no id reads, none. */
    float grads[18];
    memcpy(grads, m->grads + p->offset, sizeof grads);
    CHECK(grads[12] == 0 && grads[13] == 0 && grads[14] == 0 && grads[0] != 0);
    check_fd(m, table, grads, 18, "embeddings", name);
    mxu_model_free(m);
  }
  /* fit, evaluate and predict refuse ids outside the table, naming the
   * sample and value (TensorFlow's CPU kernel stops on them too). */
  mxu_model *m = build(name, embedding_graph, NULL, MXU_BACKEND_CPU);
  if (!m) return;
  float good[BATCH * 5], bad[BATCH * 5];
  int32_t labels[BATCH] = {0, 1, 2};
  for (int i = 0; i < BATCH * 5; i++) good[i] = bad[i] = (float)(i % 6);
  bad[8] = 6.0f;
  mxu_dataset *ok = NULL, *wrong = NULL;
  int64_t steps = 5;
  CHECK_OK(mxu_dataset_from_arrays(good, labels, BATCH,
                                   mxu_shape_make(1, &steps), CLASSES, &ok));
  CHECK_OK(mxu_dataset_from_arrays(bad, labels, BATCH,
                                   mxu_shape_make(1, &steps), CLASSES, &wrong));
  mxu_fit_config fit = mxu_fit_defaults();
  fit.batch_size = BATCH;
  fit.verbose = 0;
  double loss, accuracy;
  float out[BATCH * CLASSES];
  CHECK_OK(mxu_fit(m, ok, &fit, NULL));
  EXPECT_FAIL(mxu_fit(m, wrong, &fit, NULL), MXU_ERR_ARG,
              "fit: sample 1, value 3: id 6 is not a row of Embedding "
              "'under_test' (0 to 5)");
  EXPECT_FAIL(mxu_evaluate(m, wrong, BATCH, &loss, &accuracy), MXU_ERR_ARG,
              "evaluate: sample 1, value 3: id 6");
  EXPECT_FAIL(mxu_predict(m, bad, BATCH, out), MXU_ERR_ARG,
              "predict: sample 1, value 3: id 6");
  CHECK_OK(mxu_predict(m, good, BATCH, out));
  mxu_dataset_free(ok);
  mxu_dataset_free(wrong);
  mxu_model_free(m);
}

static mxu_tensor_id identity_input(mxu_model *m, const int64_t *dims,
                                    int rank) {
  return mxu_apply_activation(m, NULL, MXU_LINEAR,
                              mxu_input(m, NULL, mxu_shape_make(rank, dims)));
}

/* RepeatVector(3) of a vector of 4 (through a tanh Dense, so its
 * gradient sums the steps' into weights the checks see), then a
 * GRU over the steps. */
static mxu_tensor_id repeat_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t features = 4;
  mxu_dense_config d = mxu_dense_defaults(4);
  d.activation = MXU_TANH;
  mxu_tensor_id v = mxu_apply_dense(m, &d, identity_input(m, &features, 1));
  mxu_rnn_config gru = mxu_rnn_defaults(MXU_GRU, 2);
  gru.return_sequences = 1;
  return head(m, mxu_apply_rnn(m, &gru,
                               mxu_apply_repeat_vector(m, "under_test", 3, v)));
}

static void test_repeat_vector(void) {
  mxu_model *m = build("RepeatVector", repeat_graph, NULL, MXU_BACKEND_CPU);
  if (m) {
    int node = node_named(m, "under_test");
    load_inputs(m, 2);
    train_step(m);
    const float *v = act(m, m->layers[node].inputs[0]), *y = act(m, node);
    for (int r = 0; r < BATCH; r++)
      for (int t = 0; t < 3; t++)
        CHECK(memcmp(y + (r * 3 + t) * 4, v + r * 4, 4 * 4) == 0);
    finite_differences(m, "RepeatVector");
  }
  mxu_model_free(m);
  backends_agree("RepeatVector", repeat_graph, NULL);
  /* Refused, each named: a sequence repeated, n 0, Masking of an image. */
  mxu_model *r = mxu_functional("refusals");
  static const int64_t seq[2] = {5, 2}, image[3] = {4, 4, 2};
  mxu_tensor_id s = mxu_input(r, NULL, mxu_shape_make(2, seq));
  CHECK(mxu_apply_repeat_vector(r, NULL, 2, s) < 0 &&
        strstr(mxu_errmsg(), "RepeatVector takes a vector (features)"));
  CHECK(mxu_apply_repeat_vector(r, NULL, 0, mxu_apply_flatten(r, NULL, s)) <
            0 &&
        strstr(mxu_errmsg(), "n must be in 1.."));
  CHECK(mxu_apply_masking(r, NULL, 0.0f,
                          mxu_input(r, NULL, mxu_shape_make(3, image))) < 0 &&
        strstr(mxu_errmsg(), "Masking over (4, 4, 2) is not supported"));
  mxu_model_free(r);
}

/* A bias drawn from U(-0.3, 0.3) rather than Keras' zeros, so that the
 * paths of its gradient count in the checks. */
static void live_bias(mxu_weight_options *bias) {
  bias->initializer.kind = MXU_INIT_RANDOM_UNIFORM;
  bias->initializer.minval = -0.3f;
  bias->initializer.maxval = 0.3f;
}

/* A sequence's shape (steps, channels). */
static int is_sequence(mxu_shape s, int64_t steps, int64_t channels) {
  return s.rank == 2 && s.dims[0] == steps && s.dims[1] == channels;
}

/* A convolutional autoencoder's decoder over (5, 3): Conv1DTranspose(4,
 * 3, strides 2, same, tanh) (10, 4), UpSampling1D(2) (20, 4),
 * ZeroPadding1D(1, 2) (23, 4), Cropping1D(2, 1) (20, 4),
 * Conv1DTranspose(2, 2, valid) (21, 2). */
static mxu_tensor_id decoder_graph(mxu_model *m, const void *ctx) {
  (void)ctx;
  static const int64_t series[2] = {5, 3};
  mxu_conv1d_config up = mxu_conv1d_defaults(4, 3);
  up.strides = 2;
  up.padding = MXU_SAME;
  up.activation = MXU_TANH;
  live_bias(&up.bias);
  mxu_conv1d_config last = mxu_conv1d_defaults(2, 2);
  mxu_tensor_id y =
      mxu_apply_conv1d_transpose(m, &up, identity_input(m, series, 2));
  y = mxu_apply_upsampling1d(m, "up", 2, y);
  y = mxu_apply_zero_padding1d(m, "pad", 1, 2, y);
  y = mxu_apply_cropping1d(m, "crop", 2, 1, y);
  return head(m, mxu_apply_conv1d_transpose(m, &last, y));
}

static void test_decoder_layers(void) {
  mxu_model *m = build("decoder", decoder_graph, NULL, MXU_BACKEND_CPU);
  if (m) {
    int up = node_named(m, "up"), pad = node_named(m, "pad");
    int crop = node_named(m, "crop");
    CHECK(is_sequence(m->layers[up].out_shape, 20, 4) &&
          is_sequence(m->layers[pad].out_shape, 23, 4) &&
          is_sequence(m->layers[crop].out_shape, 20, 4) &&
          is_sequence(m->layers[crop + 1].out_shape, 21, 2));
    load_inputs(m, 2);
    train_step(m);
    const float *x = act(m, m->layers[up].inputs[0]), *u = act(m, up);
    const float *p = act(m, pad), *c = act(m, crop);
    static const float zeros[4] = {0};
    for (int r = 0; r < BATCH; r++) {
      /* Each step twice; a step of zeros, then the steps, then two. */
      CHECK(memcmp(u + (r * 20 + 7) * 4, x + (r * 10 + 3) * 4, 16) == 0 &&
            memcmp(u + (r * 20 + 6) * 4, x + (r * 10 + 3) * 4, 16) == 0);
      CHECK(memcmp(p + r * 23 * 4, zeros, 16) == 0 &&
            memcmp(p + (r * 23 + 21) * 4, zeros, 16) == 0 &&
            memcmp(p + (r * 23 + 1) * 4, u + r * 20 * 4, 20 * 16) == 0);
      CHECK(memcmp(c + r * 20 * 4, p + (r * 23 + 2) * 4, 20 * 16) == 0);
    }
    finite_differences(m, "decoder");
  }
  mxu_model_free(m);
  backends_agree("decoder", decoder_graph, NULL);
}

/* Dot of a (4, 3) and b (5, 3), or of vectors (3): the vectors' dot,
 * the sequences' along the features (a (4, 5)) or along the steps of a
 * and a (4, 2) (a (3, 2)), normalized or not. */
typedef struct dot_case {
  const char *name;
  int rank[2];
  mxu_dot_config c;
} dot_case;

static mxu_tensor_id dot_graph(mxu_model *m, const void *ctx) {
  const dot_case *d = ctx;
  static const int64_t shapes[2][2][2] = {{{3}, {3}}, {{4, 3}, {5, 3}}};
  static const int64_t steps[2] = {4, 2};
  int seq = d->rank[0] == 2;
  mxu_tensor_id a = identity_input(m, shapes[seq][0], d->rank[0]);
  mxu_tensor_id b = d->c.axes[1] == 1 && seq
                        ? identity_input(m, steps, 2)
                        : identity_input(m, shapes[seq][1], d->rank[1]);
  mxu_dot_config c = d->c;
  c.name = "under_test";
  return head(m, mxu_apply_dot(m, &c, a, b));
}

static void test_dot(void) {
  static const dot_case cases[] = {
      {"Dot(1) of vectors", {1, 1}, {NULL, {1, 1}, 0}},
      {"Dot(-1, normalize) of vectors", {1, 1}, {NULL, {-1, -1}, 1}},
      {"Dot(2) of sequences", {2, 2}, {NULL, {2, 2}, 0}},
      {"Dot(2, normalize) of sequences", {2, 2}, {NULL, {2, -1}, 1}},
      {"Dot((1, 1)) along the steps", {2, 2}, {NULL, {1, 1}, 0}},
      {"Dot((1, 1), normalize) along the steps", {2, 2}, {NULL, {1, 1}, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    mxu_model *m = build(cases[i].name, dot_graph, &cases[i], MXU_BACKEND_CPU);
    if (!m) continue;
    int node = node_named(m, "under_test");
    load_inputs(m, 2);
    train_step(m);
    /* Sample 1's first output against its own sums. */
    const dot_case *d = &cases[i];
    int seq = d->rank[0] == 2, steps = seq && d->c.axes[0] == 1;
    const float *a = act(m, m->layers[node].inputs[0]);
    const float *b = act(m, m->layers[node].inputs[1]);
    int64_t na = mxu_shape_count(&m->layers[node].in_shapes[0]);
    int64_t nb = mxu_shape_count(&m->layers[node].in_shapes[1]);
    int k = steps ? 4 : 3, sa = steps ? 3 : 1, sb = steps ? 2 : 1;
    double dot = 0, aa = 0, bb = 0;
    for (int j = 0; j < k; j++) {
      double x = a[na + j * sa], z = b[nb + j * sb];
      dot += x * z, aa += x * x, bb += z * z;
    }
    if (d->c.normalize) dot /= sqrt(aa) * sqrt(bb);
    float got = act(m, node)[mxu_shape_count(&m->layers[node].out_shape)];
    CHECK_MSG(fabs(got - dot) <= 1e-5 * fabs(dot) + 1e-6, "%s: %g, want %g",
              d->name, (double)got, dot);
    finite_differences(m, d->name);
    mxu_model_free(m);
    backends_agree(d->name, dot_graph, d);
  }
  mxu_model *r = mxu_functional("refusals");
  static const int64_t image[3] = {2, 2, 3}, vec[1] = {4};
  mxu_tensor_id x = mxu_input(r, NULL, mxu_shape_make(3, image));
  mxu_tensor_id v = mxu_input(r, NULL, mxu_shape_make(1, vec));
  mxu_dot_config c = {NULL, {3, 1}, 0};
  CHECK(mxu_apply_dot(r, &c, x, v) < 0 &&
        strstr(mxu_errmsg(), "Dot's axis 3 of input 0 (2, 2, 3)"));
  c.axes[0] = 1;
  CHECK(mxu_apply_dot(r, &c, v, mxu_apply_flatten(r, NULL, x)) < 0 &&
        strstr(mxu_errmsg(), "have 4 and 12 values"));
  mxu_model_free(r);
}

static void test_sequence_layers(void) {
  for (size_t i = 0; i < sizeof sequence_cases / sizeof *sequence_cases; i++)
    check_sequence(&sequence_cases[i]);
  /* padding 'causal' is Conv1D's only: a Conv2D's or a pool's is refused. */
  mxu_model *m = mxu_functional("causal");
  int64_t image[3] = {4, 4, 2}, steps[2] = {6, 2};
  mxu_tensor_id x = mxu_input(m, NULL, mxu_shape_make(3, image));
  mxu_tensor_id s = mxu_input(m, NULL, mxu_shape_make(2, steps));
  mxu_conv2d_config conv = mxu_conv2d_defaults(2, 3, 3);
  conv.padding = MXU_CAUSAL;
  mxu_pool1d_config pool = mxu_pool1d_defaults(2);
  pool.padding = MXU_CAUSAL;
  CHECK(mxu_apply_conv2d(m, &conv, x) < 0 &&
        strstr(mxu_errmsg(), "padding 'causal' is Conv1D's only"));
  CHECK(mxu_apply_max_pooling1d(m, &pool, s) < 0 &&
        strstr(mxu_errmsg(), "padding 'causal' is Conv1D's only"));
  mxu_model_free(m);
  test_embedding();
  test_repeat_vector();
  test_decoder_layers();
  test_dot();
}

/* A layer with dropout (the graph of ctx `dropping`; of `plain` the same
 * without) drops in training only: predictions are the dropout-free
 * layer's, a training step's outputs are not. The graph's input: 15
 * values a sample. */
static void drops_in_training_only(const char *name, graph_fn fn,
                                   const void *plain, const void *dropping) {
  mxu_model *a = build(name, fn, plain, MXU_BACKEND_CPU);
  mxu_model *d = build(name, fn, dropping, MXU_BACKEND_CPU);
  if (a && d) {
    float x[BATCH * 15], pa[BATCH * CLASSES], pd[BATCH * CLASSES];
    for (int i = 0; i < BATCH * 15; i++) x[i] = 0.1f * (float)(i % 11) - 0.5f;
    CHECK_OK(mxu_predict(a, x, BATCH, pa));
    CHECK_OK(mxu_predict(d, x, BATCH, pd));
    CHECK_MSG(memcmp(pa, pd, sizeof pa) == 0, "%s: predictions differ", name);
    load_inputs(a, 2);
    load_inputs(d, 2);
    train_step(a);
    train_step(d);
    int node = node_named(d, "under_test");
    CHECK_MSG(memcmp(act(a, node), act(d, node),
                     (size_t)tensor_floats(d, node) * sizeof(float)) != 0,
              "%s: a training step drops nothing", name);
  }
  mxu_model_free(a);
  mxu_model_free(d);
}

/* ---- recurrent layers -------------------------------------------------------
 * Their forward pass is checked against Keras (test_golden's recurrent
 * net); here each option's backward against finite differences and cpu
 * against cpu_ref, over 5 steps of 3 features. */

static mxu_tensor_id rnn_graph(mxu_model *m, const void *ctx) {
  static const int64_t shape[2] = {5, 3};
  mxu_rnn_config c = *(const mxu_rnn_config *)ctx;
  c.name = "under_test";
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, NULL, mxu_shape_make(2, shape)));
  return head(m, mxu_apply_rnn(m, &c, x));
}

typedef struct bidirectional_case {
  mxu_merge_kind merge;
  mxu_rnn_config rnn;
} bidirectional_case;

static mxu_tensor_id bidirectional_graph(mxu_model *m, const void *ctx) {
  static const int64_t shape[2] = {5, 3};
  const bidirectional_case *c = ctx;
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, NULL, mxu_shape_make(2, shape)));
  return head(m,
              mxu_apply_bidirectional(m, "under_test", &c->rnn, c->merge, x));
}

/* recurrent_dropout runs each gate's products on their own (a mask per
 * gate for the inputs and for h): at rates of 1e-6, whose masks are all
 * 1 / (1 - 1e-6), a training step's outputs and weight gradients are the
 * fused products' of the rate-0 layer, but for rounding. */
static void recurrent_dropout_paths(void) {
  static const mxu_rnn_kind kinds[3] = {MXU_LSTM, MXU_GRU, MXU_SIMPLE_RNN};
  for (int k = 0; k < 3; k++) {
    mxu_rnn_config plain = mxu_rnn_defaults(kinds[k], 3), tiny;
    plain.return_sequences = 1;
    live_bias(&plain.bias);
    tiny = plain;
    tiny.dropout = tiny.recurrent_dropout = 1e-6f;
    mxu_model *a = build("rate 0", rnn_graph, &plain, MXU_BACKEND_CPU);
    mxu_model *b = build("rate 1e-6", rnn_graph, &tiny, MXU_BACKEND_CPU);
    if (a && b) {
      load_inputs(a, 6);
      load_inputs(b, 6);
      train_step(a);
      train_step(b);
      int node = node_named(a, "under_test");
      const char *what = kinds[k] == MXU_LSTM  ? "LSTM"
                         : kinds[k] == MXU_GRU ? "GRU"
                                               : "SimpleRNN";
      check_same(act(a, node), act(b, node), tensor_floats(a, node), "output",
                 "recurrent_dropout 1e-6", what);
      check_same(a->grads, b->grads, a->trainable_count, "weight gradient",
                 "recurrent_dropout 1e-6", what);
    }
    mxu_model_free(a);
    mxu_model_free(b);
  }
}

/* Keras' encoder-decoder: an encoder's final states (return_state) start
 * a decoder over a second input (initial_state), whose sequence and own
 * final states all reach the loss, so every gradient through the states
 * is checked: into the decoder's initial states, out of its final ones. */
typedef struct states_case {
  mxu_rnn_config encoder, decoder;
  int bidirectional; /* both Bidirectional, the decoder's merge a sum */
} states_case;

static mxu_tensor_id states_graph(mxu_model *m, const void *ctx) {
  static const int64_t enc_shape[2] = {5, 3}, dec_shape[2] = {4, 2};
  const states_case *c = ctx;
  mxu_rnn_config enc = c->encoder, dec = c->decoder;
  enc.name = "encoder", dec.name = "decoder";
  enc.return_state = dec.return_state = 1;
  dec.return_sequences = 1;
  mxu_tensor_id x = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "enc", mxu_shape_make(2, enc_shape)));
  mxu_tensor_id y = mxu_apply_activation(
      m, NULL, MXU_LINEAR, mxu_input(m, "dec", mxu_shape_make(2, dec_shape)));
  int states = (enc.kind == MXU_LSTM ? 2 : 1) * (c->bidirectional ? 2 : 1);
  mxu_tensor_id e = c->bidirectional
                        ? mxu_apply_bidirectional(m, "encoder", &enc,
                                                  MXU_MERGE_CONCATENATE, x)
                        : mxu_apply_rnn(m, &enc, x);
  mxu_tensor_id initial[4], parts[5];
  for (int k = 0; k < states; k++) initial[k] = mxu_output_part(m, e, k + 1);
  mxu_tensor_id d =
      c->bidirectional
          ? mxu_apply_bidirectional_from(m, "decoder", &dec, MXU_MERGE_ADD, y,
                                         initial, states)
          : mxu_apply_rnn_from(m, &dec, y, initial, states);
  parts[0] = mxu_apply_flatten(m, NULL, mxu_output_part(m, d, 0));
  for (int k = 0; k < states; k++) parts[k + 1] = mxu_output_part(m, d, k + 1);
  return head(m,
              mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, parts, 1 + states, -1));
}

static void test_recurrent_states(void) {
  static const char *const names[] = {
      "LSTM states -> LSTM", "GRU states -> GRU (backwards, dropouts)",
      "SimpleRNN states -> SimpleRNN (sequences)",
      "Bidirectional LSTM states -> Bidirectional LSTM (sum)"};
  static const mxu_rnn_kind kinds[] = {MXU_LSTM, MXU_GRU, MXU_SIMPLE_RNN,
                                       MXU_LSTM};
  for (int i = 0; i < 4; i++) {
    states_case c = {mxu_rnn_defaults(kinds[i], 3),
                     mxu_rnn_defaults(kinds[i], 3), i == 3};
    live_bias(&c.encoder.bias);
    live_bias(&c.decoder.bias);
    c.encoder.go_backwards = i == 1;
    c.encoder.return_sequences = i == 2;
    c.decoder.recurrent_dropout = i == 1 ? 0.3f : 0.0f;
    c.encoder.dropout = i == 1 ? 0.2f : 0.0f;
    mxu_model *m = build(names[i], states_graph, &c, MXU_BACKEND_CPU_REF);
    if (!m) continue;
    finite_differences(m, names[i]);
    mxu_model_free(m);
    backends_agree(names[i], states_graph, &c);
  }
  /* Refusals, naming the layer: a state of another size, too many. */
  mxu_model *m = mxu_functional("bad states");
  int64_t shape[2] = {5, 3}, three = 3, four = 4;
  mxu_tensor_id x = mxu_input(m, "x", mxu_shape_make(2, shape));
  mxu_tensor_id h = mxu_input(m, "h", mxu_shape_make(1, &four));
  mxu_rnn_config gru = mxu_rnn_defaults(MXU_GRU, 3);
  gru.name = "gru";
  CHECK(mxu_apply_rnn_from(m, &gru, x, &h, 1) < 0 &&
        strstr(mxu_errmsg(), "gru: initial state 0 is (4); the layer's "
                             "states are (3)"));
  mxu_tensor_id h3 = mxu_input(m, "h3", mxu_shape_make(1, &three));
  mxu_tensor_id two[2] = {h3, h3};
  CHECK(mxu_apply_rnn_from(m, &gru, x, two, 2) < 0);
  mxu_tensor_id plain = mxu_apply_rnn(m, &gru, x);
  CHECK(mxu_output_part(m, plain, 1) < 0 &&
        strstr(mxu_errmsg(), "has 1 output"));
  mxu_model_free(m);
}

static void test_recurrent(void) {
  enum { CASES = 10 };
  mxu_rnn_config cases[CASES];
  const char *names[CASES] = {
      "LSTM(4) sequences, dropout 0.3",
      "LSTM(2) backwards, no bias",
      "GRU(3) backwards",
      "GRU(3) sequences, relu",
      "SimpleRNN(3) backwards sequences",
      "LSTM(3) sequences, dropout 0.2, recurrent_dropout 0.3",
      "GRU(3) backwards, recurrent_dropout 0.4",
      "SimpleRNN(3), dropout 0.3, recurrent_dropout 0.3",
      "GRU(3) reset_before, sequences",
      "GRU(4) reset_before, backwards, dropout 0.2, recurrent_dropout 0.4"};
  cases[0] = mxu_rnn_defaults(MXU_LSTM, 4);
  cases[0].return_sequences = 1, cases[0].dropout = 0.3f;
  cases[1] = mxu_rnn_defaults(MXU_LSTM, 2);
  cases[1].go_backwards = 1, cases[1].use_bias = 0;
  cases[2] = mxu_rnn_defaults(MXU_GRU, 3);
  cases[2].go_backwards = 1;
  cases[3] = mxu_rnn_defaults(MXU_GRU, 3);
  cases[3].return_sequences = 1, cases[3].activation = MXU_RELU;
  cases[4] = mxu_rnn_defaults(MXU_SIMPLE_RNN, 3);
  cases[4].go_backwards = cases[4].return_sequences = 1;
  cases[5] = mxu_rnn_defaults(MXU_LSTM, 3);
  cases[5].return_sequences = 1;
  cases[5].dropout = 0.2f, cases[5].recurrent_dropout = 0.3f;
  cases[6] = mxu_rnn_defaults(MXU_GRU, 3);
  cases[6].go_backwards = 1, cases[6].recurrent_dropout = 0.4f;
  cases[7] = mxu_rnn_defaults(MXU_SIMPLE_RNN, 3);
  cases[7].dropout = cases[7].recurrent_dropout = 0.3f;
  cases[8] = mxu_rnn_defaults(MXU_GRU, 3);
  cases[8].reset_before = cases[8].return_sequences = 1;
  cases[9] = mxu_rnn_defaults(MXU_GRU, 4);
  cases[9].reset_before = cases[9].go_backwards = 1;
  cases[9].dropout = 0.2f, cases[9].recurrent_dropout = 0.4f;
  for (int i = 0; i < CASES; i++) {
    live_bias(&cases[i].bias);
    mxu_model *m = build(names[i], rnn_graph, &cases[i], MXU_BACKEND_CPU_REF);
    if (!m) continue;
    finite_differences(m, names[i]);
    mxu_model_free(m);
    backends_agree(names[i], rnn_graph, &cases[i]);
  }
  /* Bidirectional, every merge: sequences (the backward direction's
   * reversed back) or last steps. */
  static const mxu_merge_kind merges[] = {MXU_MERGE_CONCATENATE, MXU_MERGE_ADD,
                                          MXU_MERGE_MULTIPLY,
                                          MXU_MERGE_AVERAGE};
  static const char *const merge_names[] = {
      "Bidirectional(GRU sequences) concat",
      "Bidirectional(LSTM, dropout 0.25) sum",
      "Bidirectional(SimpleRNN sequences) mul",
      "Bidirectional(LSTM, recurrent_dropout 0.3) ave"};
  for (int i = 0; i < 4; i++) {
    bidirectional_case c = {merges[i],
                            mxu_rnn_defaults(i == 0   ? MXU_GRU
                                             : i == 2 ? MXU_SIMPLE_RNN
                                                      : MXU_LSTM,
                                             3)};
    c.rnn.return_sequences = i % 2 == 0;
    c.rnn.dropout = i == 1 ? 0.25f : 0.0f;
    c.rnn.recurrent_dropout = i == 3 ? 0.3f : 0.0f;
    live_bias(&c.rnn.bias);
    mxu_model *bm =
        build(merge_names[i], bidirectional_graph, &c, MXU_BACKEND_CPU_REF);
    if (!bm) continue;
    finite_differences(bm, merge_names[i]);
    mxu_model_free(bm);
    backends_agree(merge_names[i], bidirectional_graph, &c);
  }
  /* dropout drops in training only. */
  mxu_rnn_config plain = mxu_rnn_defaults(MXU_GRU, 3), dropping = plain;
  dropping.dropout = 0.5f;
  drops_in_training_only("GRU dropout 0.5", rnn_graph, &plain, &dropping);
  recurrent_dropout_paths();
  /* unit_forget_bias: the forget block of LSTM's bias starts at 1. */
  mxu_rnn_config lstm = mxu_rnn_defaults(MXU_LSTM, 3);
  mxu_model *m = build("LSTM", rnn_graph, &lstm, MXU_BACKEND_CPU_REF);
  if (!m) return;
  const float *b = NULL;
  for (int i = 0; i < m->param_count; i++)
    if (strcmp(m->params[i].name, "lstm_cell/bias") == 0)
      b = mxu_param_values(m, &m->params[i]);
  CHECK(b != NULL);
  for (int j = 0; b && j < 12; j++)
    CHECK_MSG(b[j] == (j >= 3 && j < 6 ? 1.0f : 0.0f), "LSTM bias[%d] = %g", j,
              (double)b[j]);
  mxu_model_free(m);
}

/* ---- MultiHeadAttention ----------------------------------------------------
 * Its forward pass is checked against Keras (test_golden's attention
 * net); here each case's backward against finite differences and cpu
 * against cpu_ref: causal self-attention with dropout, the query also the
 * value (two partial gradients of one tensor), cross-attention with a key
 * of its own and no biases, and attention over a (2, 3) grid. */

typedef struct attention_case {
  const char *name;
  mxu_attention_config c;
  int64_t query[3], value[3], key[3]; /* key[0] 0: none */
  int rank, self;                     /* self: the query is the value */
} attention_case;

static mxu_tensor_id attention_graph(mxu_model *m, const void *ctx) {
  const attention_case *a = ctx;
  mxu_attention_config c = a->c;
  c.name = "under_test";
  mxu_tensor_id q = identity_input(m, a->query, a->rank);
  mxu_tensor_id v = a->self ? q : identity_input(m, a->value, a->rank);
  mxu_tensor_id k = a->key[0] ? identity_input(m, a->key, a->rank) : -1;
  return head(m, mxu_apply_multi_head_attention(m, &c, q, v, k));
}

static void test_attention(void) {
  attention_case cases[6] = {
      {"MHA(2, 3) causal, value_dim 2, output 4, dropout 0.3",
       mxu_attention_defaults(2, 3),
       {5, 3},
       {5, 3},
       {0},
       2,
       1},
      {"MHA(3, 2) cross, own key, no bias",
       mxu_attention_defaults(3, 2),
       {4, 3},
       {6, 2},
       {6, 4},
       2,
       0},
      {"MHA(2, 2) query of 3 over 5 values",
       mxu_attention_defaults(2, 2),
       {3, 4},
       {5, 3},
       {0},
       2,
       0},
      {"MHA(2, 3) over a (2, 3) grid",
       mxu_attention_defaults(2, 3),
       {2, 3, 3},
       {2, 3, 3},
       {0},
       3,
       1},
      {"GroupQueryAttention 4 query heads over 2, causal, dropout 0.3",
       mxu_attention_defaults(4, 2),
       {5, 3},
       {5, 3},
       {0},
       2,
       1},
      {"GroupQueryAttention 3 query heads over 1, own key",
       mxu_attention_defaults(3, 2),
       {4, 3},
       {6, 3},
       {6, 5},
       2,
       0}};
  cases[4].c.kv_heads = 2, cases[4].c.causal = 1, cases[4].c.dropout = 0.3f;
  cases[5].c.kv_heads = 1;
  cases[0].c.causal = 1, cases[0].c.value_dim = 2, cases[0].c.output_dim = 4;
  cases[0].c.dropout = 0.3f;
  cases[1].c.use_bias = 0;
  cases[2].c.causal = 1; /* 3 queries over 5: position i sees 0..i */
  for (int i = 0; i < 6; i++) {
    live_bias(&cases[i].c.bias);
    mxu_model *m =
        build(cases[i].name, attention_graph, &cases[i], MXU_BACKEND_CPU_REF);
    if (!m) continue;
    int node = node_named(m, "under_test");
    CHECK(m->layers[node].param_count == (i == 1 ? 4 : 8));
    finite_differences(m, cases[i].name);
    mxu_model_free(m);
    backends_agree(cases[i].name, attention_graph, &cases[i]);
  }
  /* dropout drops in training only. */
  attention_case plain = cases[0];
  plain.c.dropout = 0.0f;
  drops_in_training_only("MHA dropout", attention_graph, &plain, &cases[0]);
  /* The kernels' initial scale: Keras 3's glorot_uniform takes the fans of
   * the projection (64 features to 4 heads of 16: sqrt(6 / 128)), tf.keras
   * 2's those of the 3-D shape (64 * 4 and 16 * 64: sqrt(6 / 1280)). */
  for (int tf2 = 0; tf2 < 2; tf2++) {
    attention_case wide = {"MHA(4, 16) of 64",
                           mxu_attention_defaults(4, 16),
                           {3, 64},
                           {3, 64},
                           {0},
                           2,
                           1};
    wide.c.tf2_fans = tf2;
    mxu_model *w = build(wide.name, attention_graph, &wide, MXU_BACKEND_CPU);
    const mxu_param *kernel = NULL;
    for (int i = 0; w && i < w->param_count; i++)
      if (strcmp(w->params[i].name, "query/kernel") == 0)
        kernel = &w->params[i];
    CHECK(kernel != NULL);
    float top = 0, limit = sqrtf(6.0f / (tf2 ? 1280.0f : 128.0f));
    for (int64_t i = 0; kernel && i < kernel->count; i++)
      top = fmaxf(top, fabsf(mxu_param_values(w, kernel)[i]));
    CHECK_MSG(top <= limit && top > 0.95f * limit,
              "query/kernel (tf2 fans %d) reaches %g, limit %g", tf2,
              (double)top, (double)limit);
    mxu_model_free(w);
  }
  /* What the layer refuses, each named. */
  attention_case grid = cases[3];
  grid.c.causal = 1;
  mxu_model *m = mxu_functional("refusals");
  mxu_tensor_id q = identity_input(m, grid.query, 3);
  CHECK(mxu_apply_multi_head_attention(m, &grid.c, q, q, -1) < 0 &&
        strstr(mxu_errmsg(), "causal mask"));
  mxu_attention_config bad = mxu_attention_defaults(0, 3);
  CHECK(mxu_apply_multi_head_attention(m, &bad, q, q, -1) < 0 &&
        strstr(mxu_errmsg(), "num_heads 0"));
  static const int64_t other[2] = {6, 3};
  mxu_tensor_id v = identity_input(m, other, 2);
  CHECK(mxu_apply_multi_head_attention(m, &cases[3].c, q, v, -1) < 0 &&
        strstr(mxu_errmsg(), "must be of one rank"));
  mxu_attention_config uneven = cases[4].c;
  uneven.kv_heads = 3;
  mxu_tensor_id s = identity_input(m, cases[4].query, 2);
  CHECK(mxu_apply_multi_head_attention(m, &uneven, s, s, -1) < 0 &&
        strstr(mxu_errmsg(), "num_key_value_heads 3 must divide"));
  mxu_tensor_id wide = identity_input(m, cases[1].key, 2);
  CHECK(mxu_apply_multi_head_attention(m, &cases[5].c, s, wide, -1) < 0 &&
        strstr(mxu_errmsg(), "as many features each"));
  mxu_model_free(m);
}

/* ---- Attention and AdditiveAttention ------------------------------------
 * Checked against Keras by test_golden's dense_attention net; here each
 * score's backward against finite differences (its scale weights too)
 * and cpu against cpu_ref: cross-attention of 3 queries over 5 values,
 * with a key of its own, causal, with dropout. */

typedef struct dense_attention_case {
  const char *name;
  mxu_dense_attention_config c;
  int key, self;
} dense_attention_case;

static mxu_tensor_id dense_attention_graph(mxu_model *m, const void *ctx) {
  static const int64_t q_shape[2] = {3, 4}, v_shape[2] = {5, 2},
                       k_shape[2] = {5, 4};
  const dense_attention_case *a = ctx;
  mxu_dense_attention_config c = a->c;
  c.name = "under_test";
  mxu_tensor_id q = identity_input(m, q_shape, 2);
  mxu_tensor_id v =
      a->self ? q : identity_input(m, a->key ? v_shape : k_shape, 2);
  mxu_tensor_id k = a->key ? identity_input(m, k_shape, 2) : -1;
  return head(m, mxu_apply_dense_attention(m, &c, q, v, k));
}

static void test_dense_attention(void) {
  dense_attention_case cases[] = {
      {"Attention dot, scaled, own key", {.use_scale = 1}, 1, 0},
      {"Attention dot over 5 values, causal", {.causal = 1}, 0, 0},
      {"Attention concat, scaled, own key",
       {.concat = 1, .use_scale = 1},
       1,
       0},
      {"Attention concat, self, dropout 0.3",
       {.concat = 1, .dropout = 0.3f},
       0,
       1},
      {"AdditiveAttention, own key", {.additive = 1, .use_scale = 1}, 1, 0},
      {"AdditiveAttention unscaled, self, causal",
       {.additive = 1, .causal = 1},
       0,
       1},
  };
  int count = (int)(sizeof cases / sizeof *cases);
  for (int i = 0; i < count; i++) {
    mxu_model *m = build(cases[i].name, dense_attention_graph, &cases[i],
                         MXU_BACKEND_CPU_REF);
    if (!m) continue;
    /* The scales away from their initial ones, so that their gradients
     * are not the unscaled score's. */
    for (int p = 0; p < m->param_count; p++)
      if (strstr(m->params[p].name, "scale") ||
          strstr(m->params[p].name, "weight"))
        for (int64_t j = 0; j < m->params[p].count; j++)
          m->weights[m->params[p].offset + j] += 0.3f + 0.1f * (float)j;
    finite_differences(m, cases[i].name);
    mxu_model_free(m);
    backends_agree(cases[i].name, dense_attention_graph, &cases[i]);
  }
  dense_attention_case plain = cases[3];
  plain.c.dropout = 0.0f;
  drops_in_training_only("Attention dropout", dense_attention_graph, &plain,
                         &cases[3]);
  /* Refused: a query of other features than the key's. */
  mxu_model *m = mxu_functional("bad attention");
  int64_t a[2] = {3, 4}, b[2] = {5, 3};
  mxu_dense_attention_config c = {.name = "att"};
  CHECK(mxu_apply_dense_attention(
            m, &c, mxu_input(m, "q", mxu_shape_make(2, a)),
            mxu_input(m, "v", mxu_shape_make(2, b)), -1) < 0 &&
        strstr(mxu_errmsg(), "att: the query's features (4) must be the "
                             "key's (3)"));
  mxu_model_free(m);
}

/* ---- an Embedding's mask -------------------------------------------------
 * Checked against Keras by test_golden's masking net; here each layer that
 * uses the mask against finite differences and cpu against cpu_ref, over
 * ids padded after, before and inside (load_ids): the ids' Embedding
 * (mask_zero) beside x (6, 2), concatenated along the features. */

typedef struct mask_case {
  const char *name;
  enum {
    MASK_RNN,
    MASK_BIDIRECTIONAL,
    MASK_POOL,
    MASK_ATTENTION,
    MASK_DENSE_ATTENTION /* Attention, or with `additive` AdditiveAttention */
  } kind;
  mxu_rnn_config rnn;
  int causal; /* MASK_ATTENTION, MASK_DENSE_ATTENTION */
  /* The mask from a Masking over a Dense (no bias) of a series padded
   * with zero steps, not from an Embedding's ids. */
  int masking;
  int additive; /* MASK_DENSE_ATTENTION */
} mask_case;

/* The masked sequence (6, 3): an Embedding of ids (mask_zero), or a
 * Masking of a Dense of a padded series, whose gradient it passes at
 * the unpadded steps only. */
static mxu_tensor_id masked_input(mxu_model *m, int masking) {
  static const int64_t steps = 6, series[2] = {6, 2};
  if (masking) {
    mxu_dense_config d = mxu_dense_defaults(3);
    d.use_bias = 0;
    return mxu_apply_masking(
        m, "masking", 0.0f,
        mxu_apply_dense(m, &d, identity_input(m, series, 2)));
  }
  mxu_embedding_config e = {.input_dim = 6, .output_dim = 3, .mask_zero = 1};
  e.embeddings.initializer.kind = MXU_INIT_RANDOM_UNIFORM;
  e.embeddings.initializer.minval = -1.0f;
  e.embeddings.initializer.maxval = 1.0f;
  return mxu_apply_embedding(m, &e, identity_input(m, &steps, 1));
}

static mxu_tensor_id mask_graph(mxu_model *m, const void *ctx) {
  const mask_case *c = ctx;
  static const int64_t x_shape[2] = {6, 2};
  mxu_tensor_id x = identity_input(m, x_shape, 2);
  mxu_tensor_id both[2] = {masked_input(m, c->masking), x};
  mxu_tensor_id seq = mxu_merge(m, MXU_MERGE_CONCATENATE, NULL, both, 2, -1);
  mxu_rnn_config rnn = c->rnn;
  rnn.name = "under_test";
  if (c->kind == MASK_RNN) return head(m, mxu_apply_rnn(m, &rnn, seq));
  if (c->kind == MASK_BIDIRECTIONAL)
    return head(m, mxu_apply_bidirectional(m, "under_test", &c->rnn,
                                           MXU_MERGE_CONCATENATE, seq));
  if (c->kind == MASK_ATTENTION) {
    mxu_attention_config mha = mxu_attention_defaults(2, 2);
    mha.name = "under_test";
    mha.causal = c->causal;
    live_bias(&mha.bias);
    return head(m, mxu_apply_multi_head_attention(m, &mha, seq, seq, -1));
  }
  if (c->kind == MASK_DENSE_ATTENTION) {
    mxu_dense_attention_config a = {.name = "under_test",
                                    .additive = c->additive,
                                    .use_scale = 1,
                                    .causal = c->causal};
    return head(m, mxu_apply_dense_attention(m, &a, seq, seq, -1));
  }
  mxu_dense_config dense = mxu_dense_defaults(4);
  dense.activation = MXU_TANH;
  mxu_global_pool2d_config pool = {"under_test", 0, 0};
  return head(
      m, mxu_apply_global_pooling1d(m, &pool, mxu_apply_dense(m, &dense, seq)));
}

static void test_masking(void) {
  mask_case cases[15] = {
      {"masked LSTM(3) sequences", MASK_RNN, mxu_rnn_defaults(MXU_LSTM, 3), 0,
       0, 0},
      {"masked GRU(3) backwards", MASK_RNN, mxu_rnn_defaults(MXU_GRU, 3), 0, 0,
       0},
      {"masked SimpleRNN(2) sequences, zero_output_for_mask", MASK_RNN,
       mxu_rnn_defaults(MXU_SIMPLE_RNN, 2), 0, 0, 0},
      {"masked LSTM(2), recurrent_dropout 0.3", MASK_RNN,
       mxu_rnn_defaults(MXU_LSTM, 2), 0, 0, 0},
      {"masked Bidirectional(GRU(2) sequences)", MASK_BIDIRECTIONAL,
       mxu_rnn_defaults(MXU_GRU, 2), 0, 0, 0},
      {"masked GlobalAveragePooling1D", MASK_POOL,
       mxu_rnn_defaults(MXU_LSTM, 1), 0, 0, 0},
      {"masked MultiHeadAttention(2, 2)", MASK_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 0, 0, 0},
      {"masked MultiHeadAttention(2, 2), causal", MASK_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 1, 0, 0},
      {"Masking, LSTM(3) sequences", MASK_RNN, mxu_rnn_defaults(MXU_LSTM, 3), 0,
       1, 0},
      {"Masking, GRU(2) backwards", MASK_RNN, mxu_rnn_defaults(MXU_GRU, 2), 0,
       1, 0},
      {"Masking, GlobalAveragePooling1D", MASK_POOL,
       mxu_rnn_defaults(MXU_LSTM, 1), 0, 1, 0},
      {"Masking, MultiHeadAttention(2, 2)", MASK_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 0, 1, 0},
      {"masked Attention, scaled", MASK_DENSE_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 0, 0, 0},
      {"masked AdditiveAttention, causal", MASK_DENSE_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 1, 0, 1},
      {"Masking, Attention causal", MASK_DENSE_ATTENTION,
       mxu_rnn_defaults(MXU_LSTM, 1), 1, 1, 0},
  };
  cases[0].rnn.return_sequences = 1;
  cases[1].rnn.go_backwards = 1;
  cases[2].rnn.return_sequences = cases[2].rnn.zero_output_for_mask = 1;
  cases[3].rnn.recurrent_dropout = 0.3f;
  cases[4].rnn.return_sequences = 1;
  cases[8].rnn.return_sequences = 1;
  cases[9].rnn.go_backwards = 1;
  for (int i = 0; i < 15; i++) {
    live_bias(&cases[i].rnn.bias);
    mxu_model *m =
        build(cases[i].name, mask_graph, &cases[i], MXU_BACKEND_CPU_REF);
    if (!m) continue;
    CHECK(m->layers[node_named(m, "under_test")].mask_in >= 0);
    finite_differences_ids(m, cases[i].name, 1);
    mxu_model_free(m);
    backends_agree_ids(cases[i].name, mask_graph, &cases[i], 1);
  }
  /* Over a padded step the state carries: an LSTM's sequence repeats the
   * step before's output there (row 0's steps 3..5), a zero_output one
   * gives zeros, and the pooled mean is over the unpadded steps only. */
  mxu_model *m = build("masked", mask_graph, &cases[0], MXU_BACKEND_CPU);
  mxu_model *z = build("zeroed", mask_graph, &cases[2], MXU_BACKEND_CPU);
  if (m && z) {
    load_inputs(m, 2), load_ids(m, 1), train_step(m);
    load_inputs(z, 2), load_ids(z, 1), train_step(z);
    const float *y = act(m, node_named(m, "under_test"));
    const float *yz = act(z, node_named(z, "under_test"));
    CHECK(memcmp(y + 3 * 3, y + 2 * 3, 3 * 4) == 0 &&
          memcmp(y + 5 * 3, y + 2 * 3, 3 * 4) == 0 && y[0] != 0);
    CHECK(yz[3 * 2] == 0 && yz[5 * 2 + 1] == 0 && yz[2 * 2] != 0);
    /* Row 1 is padded before: its first two outputs are the zero state. */
    CHECK(y[6 * 3] == 0 && y[6 * 3 + 3 + 2] == 0 && y[6 * 3 + 6] != 0);
  }
  mxu_model_free(m);
  mxu_model_free(z);
  /* So over a Masking's padded steps (row 0's steps 3..5 zeros, row 2's
   * step 1); its output is zeros there, and a step with one feature 0
   * is kept. */
  mxu_model *k = build("Masking", mask_graph, &cases[8], MXU_BACKEND_CPU);
  if (k) {
    load_inputs(k, 2), load_ids(k, 1);
    act(k, k->inputs[1])[5 * 12 + 2 * 2] = 0.0f; /* row 5, step 2, one 0 */
    train_step(k);
    const float *y = act(k, node_named(k, "under_test"));
    const float *masked = act(k, node_named(k, "masking"));
    CHECK(memcmp(y + 3 * 3, y + 2 * 3, 3 * 4) == 0 &&
          memcmp(y + 5 * 3, y + 2 * 3, 3 * 4) == 0 && y[0] != 0);
    CHECK(memcmp(y + 13 * 3, y + 12 * 3, 3 * 4) == 0 &&
          memcmp(y + 14 * 3, y + 13 * 3, 3 * 4) != 0);
    CHECK(masked[3 * 3] == 0 && masked[5 * 3 + 2] == 0 &&
          masked[(5 * 6 + 2) * 3] != 0 && masked[(5 * 6 + 2) * 3 + 1] != 0);
    CHECK(memcmp(y + (5 * 6 + 2) * 3, y + (5 * 6 + 1) * 3, 3 * 4) != 0);
  }
  mxu_model_free(k);
  /* What is refused, each named. */
  mxu_model *r = mxu_functional("refusals");
  static const int64_t steps = 6, features[2] = {6, 3};
  mxu_tensor_id ids = mxu_input(r, NULL, mxu_shape_make(1, &steps));
  mxu_tensor_id x = mxu_input(r, NULL, mxu_shape_make(2, features));
  mxu_embedding_config e = {.input_dim = 6, .output_dim = 3, .mask_zero = 1};
  mxu_tensor_id a = mxu_apply_embedding(r, &e, ids);
  mxu_tensor_id pair[2] = {a, x};
  CHECK(mxu_merge(r, MXU_MERGE_ADD, NULL, pair, 2, -1) < 0 &&
        strstr(mxu_errmsg(), "and unmasked inputs together"));
  CHECK(mxu_merge(r, MXU_MERGE_CONCATENATE, NULL, pair, 2, 1) < 0 &&
        strstr(mxu_errmsg(), "along axis 1"));
  mxu_attention_config mha = mxu_attention_defaults(2, 2);
  CHECK(mxu_apply_multi_head_attention(r, &mha, a, x, -1) < 0 &&
        strstr(mxu_errmsg(), "masked (an Embedding's mask_zero) and unmasked"));
  mxu_model_free(r);
  /* The loss Keras masks takes the mask of the model input, not one
   * computed inside the model. (test_golden checks the masked losses.) */
  mxu_model *o = mxu_functional("masking inside");
  mxu_dense_config d = mxu_dense_defaults(3);
  mxu_tensor_id out = mxu_apply_masking(
      o, NULL, 0.0f,
      mxu_apply_dense(o, &d, mxu_input(o, NULL, mxu_shape_make(2, features))));
  CHECK_OK(mxu_model_outputs(o, &out, 1));
  mxu_compile_config cc = config_for(MXU_BACKEND_CPU);
  EXPECT_FAIL(mxu_compile(o, &cc), MXU_ERR_UNSUPPORTED,
              "the mask must come from the model input");
  mxu_model_free(o);
}

int main(void) {
  test_empty_data();
  test_limits();
  test_several_outputs();
  test_fit_several_inputs();
  test_recurrent_states();
  test_dense_attention();
  test_separable1d();
  test_volumes();
  test_adaptive_pooling();
  test_conv_lstm();
  test_time_distributed();
  test_layers();
  test_dropout_noise();
  test_alpha_dropout_moments();
  test_preprocessing();
  test_layer_scale();
  test_custom_scale();
  test_sequence_layers();
  test_recurrent();
  test_attention();
  test_masking();
  test_random_flip();
  test_random_contrast();
  test_random_brightness();
  test_color_layers();
  test_random_crop();
  test_gaussian_layers();
  test_fan_out();
  test_whole_graph();
  test_determinism();
  test_fusion();
  test_fusion_dense();
  test_bn_fusion();
  test_gradient_memory();
  test_pad_folding();
  test_gradients_needed();
  test_errors();
  return check_report("test_graph");
}
