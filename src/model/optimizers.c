/* optimizers.c — Keras 3's optimizers: their names and defaults, the
 * slots each keeps (and how Keras' files name and order them), gradient
 * clipping and weight decay, and the update rules. Adam and SGD run on
 * the backend's kernels; the others here, elementwise in float32 in the
 * order of Keras' own operations. */
#include "model/model.h"

#include <math.h>
#include <string.h>
#include <strings.h>

typedef struct optimizer_class {
  const char *name, *class_name;
  mxu_optimizer_kind kind;
  mxu_slot_spec slots;
} optimizer_class;

/* In mxu_optimizer_kind order: the slots' names in Keras 3, in tf.keras
 * 2.11+ (whose files mxu writes in .h5) and in tf.keras' legacy
 * optimizers. Keras builds each weight's slots in one call (interleaved:
 * m0 v0 m1 v1 ...) except RMSprop's, one kind after the other; Keras 3's
 * Nadam keeps u_product, a scalar, after them. */
#define SLOTS(k3a, k3b, k2a, k2b, la, lb, inter, product)                      \
  {                                                                            \
    .keras3 = {k3a, k3b, NULL}, .keras2 = {k2a, k2b, NULL},                    \
    .legacy = {la, lb, NULL}, .interleaved = inter, .u_product = product       \
  }
static const optimizer_class classes[] = {
    {"adam", "Adam", MXU_ADAM,
     SLOTS("momentum", "velocity", "m", "v", "m", "v", 1, 0)},
    {"sgd", "SGD", MXU_SGD,
     SLOTS("momentum", NULL, "m", NULL, "momentum", NULL, 1, 0)},
    {"rmsprop", "RMSprop", MXU_RMSPROP,
     SLOTS("velocity", "momentum", "velocity", "momentum", "rms", "momentum", 0,
           0)},
    {"adagrad", "Adagrad", MXU_ADAGRAD,
     SLOTS("accumulator", NULL, "accumulator", NULL, "accumulator", NULL, 1,
           0)},
    {"adamax", "Adamax", MXU_ADAMAX,
     SLOTS("momentum", "norm", "m", "u", "m", "v", 1, 0)},
    {"nadam", "Nadam", MXU_NADAM,
     SLOTS("momentum", "velocity", "m", "v", "m", "v", 1, 1)},
    {"adadelta", "Adadelta", MXU_ADADELTA,
     SLOTS("accumulated_grad", "accumulated_delta_var", "accumulated_grad",
           "accumulated_delta_var", "accum_grad", "accum_var", 1, 0)},
    {"lion", "Lion", MXU_LION,
     SLOTS("momentum", NULL, "m", NULL, "momentum", NULL, 1, 0)},
    {"adamw", "AdamW", MXU_ADAMW,
     SLOTS("momentum", "velocity", "m", "v", "m", "v", 1, 0)},
};
#undef SLOTS

enum { CLASS_COUNT = sizeof classes / sizeof *classes };

const char *mxu_optimizer_class_name(mxu_optimizer_kind kind) {
  return (unsigned)kind < CLASS_COUNT ? classes[kind].class_name : "Unknown";
}

const char *mxu_optimizer_name(mxu_optimizer_kind kind) {
  return (unsigned)kind < CLASS_COUNT ? classes[kind].name : "unknown";
}

mxu_optimizer_config mxu_adam(float learning_rate) {
  return (mxu_optimizer_config){.kind = MXU_ADAM,
                                .learning_rate = learning_rate,
                                .beta_1 = 0.9f,
                                .beta_2 = 0.999f,
                                .epsilon = 1e-7f};
}

mxu_optimizer_config mxu_sgd(float learning_rate, float momentum,
                             int nesterov) {
  return (mxu_optimizer_config){.kind = MXU_SGD,
                                .learning_rate = learning_rate,
                                .momentum = momentum,
                                .nesterov = nesterov};
}

mxu_status mxu_optimizer_from_name(const char *name,
                                   mxu_optimizer_config *out) {
  int k = -1;
  for (int i = 0; name && i < CLASS_COUNT; i++)
    if (strcasecmp(name, classes[i].name) == 0) k = i;
  if (k < 0)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "optimizer '%s' is not supported (supported: adam, sgd, "
                    "rmsprop, adagrad, adamax, nadam, adadelta, lion, adamw)",
                    name ? name : "(null)");
  mxu_optimizer_config o = mxu_adam(1e-3f); /* betas, epsilon */
  o.kind = classes[k].kind;
  if (o.kind == MXU_SGD) o = mxu_sgd(0.01f, 0, 0);
  if (o.kind == MXU_RMSPROP) o.rho = 0.9f;
  if (o.kind == MXU_ADADELTA) o.rho = 0.95f;
  if (o.kind == MXU_ADAGRAD) o.initial_accumulator_value = 0.1f;
  if (o.kind == MXU_LION) o.beta_2 = 0.99f;
  if (o.kind == MXU_ADAMW) o.weight_decay = 0.004f;
  *out = o;
  return MXU_OK;
}

mxu_slot_spec mxu_optimizer_slots(const mxu_optimizer_config *o) {
  mxu_slot_spec spec =
      classes[(unsigned)o->kind < CLASS_COUNT ? o->kind : 0].slots;
  int adam = o->kind == MXU_ADAM || o->kind == MXU_ADAMW;
  /* Keras keeps no momentum slot without momentum (but tf.keras 2's SGD
   * keeps an unused one). */
  if ((o->kind == MXU_SGD || o->kind == MXU_RMSPROP) && !(o->momentum > 0)) {
    int k = o->kind == MXU_SGD ? 0 : 1;
    spec.keras3[k] = spec.legacy[k] = NULL;
    if (o->kind == MXU_RMSPROP) spec.keras2[k] = NULL;
  }
  if (adam && o->amsgrad)
    spec.keras3[2] = "velocity_hat", spec.keras2[2] = "vhat",
    spec.legacy[2] = "vhat";
  if (o->kind == MXU_RMSPROP && o->centered)
    spec.keras3[2] = "average_gradient", spec.keras2[2] = "average_gradient",
    spec.legacy[2] = "mg";
  spec.average = o->use_ema != 0;
  return spec;
}

float *mxu_slot_buffer(const mxu_model *model, int k) {
  return k == 0   ? model->slot_m
         : k == 1 ? model->slot_v
         : k == 2 ? model->slot_u
                  : model->average;
}

void mxu_optimizer_reset(mxu_model *model) {
  size_t n = (size_t)model->trainable_count;
  for (int k = 0; k < MXU_SLOTS; k++)
    memset(mxu_slot_buffer(model, k), 0, n * sizeof(float));
  memset(model->average, 0, n * sizeof(float));
  const mxu_optimizer_config *o = &model->compile.optimizer;
  if (o->kind == MXU_ADAGRAD)
    for (size_t i = 0; i < n; i++)
      model->slot_m[i] = o->initial_accumulator_value;
}

/* ---- clipping ---------------------------------------------------------- */

/* clipnorm (each weight's gradient) and global_clipnorm (all of them):
 * g * c / max(norm, c), as Keras computes them. The whole gradient is
 * needed, so compile refuses these across MPI processes. */
static void clip_by_norm(mxu_model *model) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  if (!(o->clipnorm > 0) && !(o->global_clipnorm > 0)) return;
  double global = 0;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!p->trainable) continue;
    float *g = model->grads + p->offset;
    double sum = 0;
    for (int64_t k = 0; k < p->count; k++) sum += (double)g[k] * g[k];
    global += sum;
    if (!(o->clipnorm > 0)) continue;
    float norm = sqrtf((float)sum), c = o->clipnorm;
    float divisor = norm > c ? norm : c;
    for (int64_t k = 0; k < p->count; k++) g[k] = g[k] * c / divisor;
  }
  if (!(o->global_clipnorm > 0)) return;
  float c = o->global_clipnorm, norm = sqrtf((float)global);
  float scale = c * fminf(1.0f / norm, 1.0f / c);
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    for (int64_t k = 0; p->trainable && k < p->count; k++)
      model->grads[p->offset + k] *= scale;
  }
}

/* ---- update rules ------------------------------------------------------ */

/* centered: the velocity less the square of the gradient's running mean
 * (avg, slot_u), as Keras 3. */
static void rmsprop(const mxu_optimizer_config *o, float lr, int64_t n,
                    float *w, const float *g, float *v, float *m, float *avg) {
  float rho = o->rho;
  for (int64_t i = 0; i < n; i++) {
    v[i] = rho * v[i] + (1 - rho) * (g[i] * g[i]);
    float denominator = v[i] + o->epsilon;
    if (o->centered) {
      avg[i] = rho * avg[i] + (1 - rho) * g[i];
      denominator = v[i] - avg[i] * avg[i] + o->epsilon;
    }
    float increment = lr * g[i] / sqrtf(denominator);
    if (o->momentum > 0) {
      m[i] = o->momentum * m[i] + increment;
      w[i] -= m[i];
    } else {
      w[i] -= increment;
    }
  }
}

/* Adam with the largest velocity yet (v_hat, slot_u) in the step, as
 * Keras 3: m, v as Adam's; v_hat = max(v_hat, v); w -= m alpha /
 * (sqrt(v_hat) + epsilon). */
static void amsgrad(const mxu_optimizer_config *o, float alpha, int64_t n,
                    float *w, const float *g, float *m, float *v,
                    float *v_hat) {
  for (int64_t i = 0; i < n; i++) {
    m[i] += (g[i] - m[i]) * (1 - o->beta_1);
    v[i] += (g[i] * g[i] - v[i]) * (1 - o->beta_2);
    v_hat[i] = fmaxf(v_hat[i], v[i]);
    w[i] -= m[i] * alpha / (sqrtf(v_hat[i]) + o->epsilon);
  }
}

static void adagrad(const mxu_optimizer_config *o, float lr, int64_t n,
                    float *w, const float *g, float *acc) {
  for (int64_t i = 0; i < n; i++) {
    acc[i] += g[i] * g[i];
    w[i] -= lr * g[i] / sqrtf(acc[i] + o->epsilon);
  }
}

static void adamax(const mxu_optimizer_config *o, float lr, double t, int64_t n,
                   float *w, const float *g, float *m, float *u) {
  float correction = 1.0f - powf(o->beta_1, (float)t);
  for (int64_t i = 0; i < n; i++) {
    m[i] += (g[i] - m[i]) * (1 - o->beta_1);
    u[i] = fmaxf(o->beta_2 * u[i], fabsf(g[i]));
    w[i] -= lr * m[i] / (correction * (u[i] + o->epsilon));
  }
}

/* Keras' Nadam: u_product, the product of the momentum schedule so far,
 * is the model's (mxu_nadam_product). */
static void nadam(const mxu_optimizer_config *o, float lr, double t,
                  float u_product, int64_t n, float *w, const float *g,
                  float *m, float *v) {
  float b1 = o->beta_1, b2 = o->beta_2;
  float u_t = b1 * (1.0f - 0.5f * powf(0.96f, (float)t));
  float u_t_1 = b1 * (1.0f - 0.5f * powf(0.96f, (float)(t + 1)));
  float u_product_t_1 = u_product * u_t_1;
  float beta_2_power = powf(b2, (float)t);
  for (int64_t i = 0; i < n; i++) {
    m[i] += (g[i] - m[i]) * (1 - b1);
    v[i] += (g[i] * g[i] - v[i]) * (1 - b2);
    float m_hat =
        u_t_1 * m[i] / (1 - u_product_t_1) + (1 - u_t) * g[i] / (1 - u_product);
    float v_hat = v[i] / (1 - beta_2_power);
    w[i] -= m_hat * lr / (sqrtf(v_hat) + o->epsilon);
  }
}

static void adadelta(const mxu_optimizer_config *o, float lr, int64_t n,
                     float *w, const float *g, float *acc_g, float *acc_d) {
  float rho = o->rho, eps = o->epsilon;
  for (int64_t i = 0; i < n; i++) {
    acc_g[i] = rho * acc_g[i] + (1 - rho) * (g[i] * g[i]);
    float delta = -(sqrtf(acc_d[i] + eps) * g[i]) / sqrtf(acc_g[i] + eps);
    acc_d[i] = rho * acc_d[i] + (1 - rho) * (delta * delta);
    w[i] += lr * delta;
  }
}

static void lion(const mxu_optimizer_config *o, float lr, int64_t n, float *w,
                 const float *g, float *m) {
  for (int64_t i = 0; i < n; i++) {
    float c = m[i] * o->beta_1 + g[i] * (1.0f - o->beta_1);
    w[i] -= lr * (float)((c > 0) - (c < 0));
    m[i] = m[i] * o->beta_2 + g[i] * (1.0f - o->beta_2);
  }
}

/* Keras' u_product after t steps, in its float32 order:
 * u *= beta_1 * (1 - 0.5 * 0.96^s) for s = 1 .. t. */
static float product_after(float beta_1, int64_t from, float u, int64_t t) {
  for (int64_t s = from + 1; s <= t; s++)
    u = u * beta_1 * (1.0f - 0.5f * powf(0.96f, (float)s));
  return u;
}

float mxu_nadam_product(const mxu_model *model) {
  if (model->u_product_step == model->iterations) return model->u_product;
  return product_after(model->compile.optimizer.beta_1, 0, 1.0f,
                       model->iterations);
}

static void nadam_advance(mxu_model *model) {
  float b1 = model->compile.optimizer.beta_1;
  int64_t t = model->iterations;
  /* One step on from the last, or from the start after a restore. */
  if (model->u_product_step == t - 1)
    model->u_product = product_after(b1, t - 1, model->u_product, t);
  else if (model->u_product_step != t)
    model->u_product = product_after(b1, 0, 1.0f, t);
  model->u_product_step = t;
}

/* use_ema, after the update: Keras 3 starts the average from zero with
 * momentum 0 on the first step; tf.keras 2 starts it from a copy of the
 * weights before that step (moving_average_start) and never sets the
 * momentum aside. Every ema_overwrite_frequency steps the weights take
 * the average. */
static void moving_average(const mxu_model *model, int64_t begin, int64_t n,
                           float *w) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  float *avg = model->average + begin;
  int fresh = model->iterations == 1 && !model->keras2_names;
  float m = fresh ? 0.0f : o->ema_momentum, rest = 1.0f - m;
  for (int64_t i = 0; i < n; i++) avg[i] = m * avg[i] + rest * w[i];
  int64_t every = o->ema_overwrite_frequency;
  if (every > 0 && model->iterations % every == 0)
    memcpy(w, avg, (size_t)n * sizeof *w);
}

static void moving_average_start(const mxu_model *model, int64_t begin,
                                 int64_t n, const float *w) {
  if (model->iterations == 1 && model->keras2_names)
    memcpy(model->average + begin, w, (size_t)n * sizeof *w);
}

void mxu_optimizer_finalize(mxu_model *model) {
  if (model->compile.optimizer.use_ema)
    memcpy(model->weights, model->average,
           (size_t)model->trainable_count * sizeof(float));
}

double mxu_adam_rate(const mxu_optimizer_config *o, double lr, double t) {
  return lr * sqrt(1.0 - pow(o->beta_2, t)) / (1.0 - pow(o->beta_1, t));
}

float mxu_optimizer_rate(const mxu_model *model) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  if (o->schedule.kind != MXU_DECAY_NONE)
    return mxu_schedule_rate(&o->schedule, model->iterations);
  return o->learning_rate;
}

void mxu_step_hypers(const mxu_model *model, int64_t t, float *out) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  for (int i = 0; i < MXU_HYPERS; i++) out[i] = 0.0f;
  float lr = o->schedule.kind != MXU_DECAY_NONE
                 ? mxu_schedule_rate(&o->schedule, t - 1)
                 : o->learning_rate;
  out[MXU_HYPER_LR] = lr;
  float b1 = o->beta_1, ft = (float)t;
  switch (o->kind) {
  case MXU_ADAM:
  case MXU_ADAMW:
    out[MXU_HYPER_A] = (float)mxu_adam_rate(o, lr, (double)t);
    break;
  case MXU_ADAMAX: out[MXU_HYPER_A] = 1.0f - powf(b1, ft); break;
  case MXU_NADAM: {
    /* nadam()'s scalars, u_product brought to t as nadam_advance does. */
    float u =
        model->u_product_step <= t && model->u_product_step >= 0
            ? product_after(b1, model->u_product_step, model->u_product, t)
            : product_after(b1, 0, 1.0f, t);
    float u_t_1 = b1 * (1.0f - 0.5f * powf(0.96f, (float)(t + 1)));
    out[MXU_HYPER_A] = b1 * (1.0f - 0.5f * powf(0.96f, ft));
    out[MXU_HYPER_B] = u_t_1;
    out[MXU_HYPER_C] = u * u_t_1;
    out[MXU_HYPER_D] = u;
    out[MXU_HYPER_E] = powf(o->beta_2, ft);
    break;
  }
  default: break;
  }
  if (!o->use_ema) return;
  int fresh = t == 1 && !model->keras2_names;
  out[MXU_HYPER_EMA_MOMENTUM] = fresh ? 0.0f : o->ema_momentum;
  out[MXU_HYPER_EMA_OVERWRITE] =
      o->ema_overwrite_frequency > 0 && t % o->ema_overwrite_frequency == 0;
  out[MXU_HYPER_EMA_START] = t == 1 && model->keras2_names;
}

void mxu_optimizer_begin_step(mxu_model *model) {
  /* The rate of the steps before this one, as Keras evaluates it. */
  model->step_rate = mxu_optimizer_rate(model);
  model->iterations++;
  clip_by_norm(model);
  if (model->compile.optimizer.kind == MXU_NADAM) nadam_advance(model);
}

void mxu_optimizer_apply_range(mxu_model *model, int64_t begin, int64_t end) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  if (model->penalized) mxu_regularization_grad(model, begin, end);
  int64_t n = end - begin;
  float *w = model->weights + begin, *g = model->grads + begin;
  float *m = model->slot_m + begin, *v = model->slot_v + begin;
  float *u = model->slot_u + begin;
  float lr = model->step_rate;
  if (o->use_ema) moving_average_start(model, begin, n, w);
  if (o->clipvalue > 0)
    for (int64_t i = 0; i < n; i++)
      g[i] = fminf(fmaxf(g[i], -o->clipvalue), o->clipvalue);
  if (o->weight_decay > 0)
    for (int64_t i = 0; i < n; i++) w[i] = w[i] - w[i] * o->weight_decay * lr;
  double t = (double)model->iterations;
  switch (o->kind) {
  case MXU_ADAM:
  case MXU_ADAMW: {
    /* Keras folds the bias correction into the step size. */
    double lr_t = mxu_adam_rate(o, lr, t);
    if (o->amsgrad)
      amsgrad(o, (float)lr_t, n, w, g, m, v, u);
    else
      model->backend->adam_update(n, w, g, m, v, (float)lr_t, o->beta_1,
                                  o->beta_2, o->epsilon);
    break;
  }
  case MXU_SGD:
    model->backend->sgd_update(n, w, g, m, lr, o->momentum, o->nesterov);
    break;
  case MXU_RMSPROP: rmsprop(o, lr, n, w, g, m, v, u); break;
  case MXU_ADAGRAD: adagrad(o, lr, n, w, g, m); break;
  case MXU_ADAMAX: adamax(o, lr, t, n, w, g, m, v); break;
  case MXU_NADAM:
    nadam(o, lr, t, mxu_nadam_product(model), n, w, g, m, v);
    break;
  case MXU_ADADELTA: adadelta(o, lr, n, w, g, m, v); break;
  case MXU_LION: lion(o, lr, n, w, g, m); break;
  }
  if (o->use_ema) moving_average(model, begin, n, w);
}
