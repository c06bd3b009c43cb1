/* test_optimizers.c — every optimizer's update rule against Keras 3's
 * formulas written out here in double precision (three steps from fixed
 * gradients), gradient clipping and weight decay, and the optimizer state
 * through .h5 and .keras files: a restored run continues bit for bit. */
#include "check.h"
#include "model/model.h"
#include "strategy/strategy.h"

enum { IN = 4, OUT = 3, W = IN * OUT + OUT, STEPS = 3 };

static mxu_model *model_with(mxu_optimizer_config o) {
  mxu_model *m = mxu_sequential("opt");
  int64_t dims[1] = {IN};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(OUT);
  d.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = o;
  c.batch_size = 2;
  c.threads = 1;
  CHECK_OK(mxu_compile(m, &c));
  return m;
}

/* The model's W trainable values in order (kernel, then bias). */
static double *value_at(mxu_model *m, float *buffer, int i, double *tmp) {
  const mxu_param *p = &m->params[i < IN * OUT ? 0 : 1];
  *tmp = buffer[p->offset + (i < IN * OUT ? i : i - IN * OUT)];
  return tmp;
}

static float *slot(mxu_model *m, float *buffer, int i) {
  const mxu_param *p = &m->params[i < IN * OUT ? 0 : 1];
  return buffer + p->offset + (i < IN * OUT ? i : i - IN * OUT);
}

static float gradient(int step, int i) {
  return (float)(((i * 5 + step * 3) % 9) - 4) / 8.0f;
}

/* Keras 3's update of one value, in double. */
/* a, b, c: the slots as slot_m, slot_v, slot_u hold them. */
static void reference(const mxu_optimizer_config *o, int t, double g, double *w,
                      double *a, double *b, double *c, double u_product) {
  double lr = o->learning_rate, b1 = o->beta_1, b2 = o->beta_2;
  double eps = o->epsilon;
  switch (o->kind) {
  case MXU_ADAM:
  case MXU_ADAMW: {
    *a += (g - *a) * (1 - b1);
    *b += (g * g - *b) * (1 - b2);
    *c = fmax(*c, *b); /* AMSGrad's v_hat */
    double lr_t = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    *w -= lr_t * *a / (sqrt(o->amsgrad ? *c : *b) + eps);
    break;
  }
  case MXU_SGD:
    *a = o->momentum * *a - lr * g;
    *w += *a;
    break;
  case MXU_RMSPROP: {
    *a = o->rho * *a + (1 - o->rho) * g * g;
    *c = o->rho * *c + (1 - o->rho) * g; /* centered: the mean gradient */
    double inc = lr * g / sqrt(*a - (o->centered ? *c * *c : 0) + eps);
    *b = o->momentum * *b + inc;
    *w -= o->momentum > 0 ? *b : inc;
    break;
  }
  case MXU_ADAGRAD:
    *a += g * g;
    *w -= lr * g / sqrt(*a + eps);
    break;
  case MXU_ADAMAX:
    *a += (g - *a) * (1 - b1);
    *b = fmax(b2 * *b, fabs(g));
    *w -= lr * *a / ((1 - pow(b1, t)) * (*b + eps));
    break;
  case MXU_NADAM: {
    double u_t = b1 * (1 - 0.5 * pow(0.96, t));
    double u_t_1 = b1 * (1 - 0.5 * pow(0.96, t + 1));
    *a += (g - *a) * (1 - b1);
    *b += (g * g - *b) * (1 - b2);
    double m_hat =
        u_t_1 * *a / (1 - u_product * u_t_1) + (1 - u_t) * g / (1 - u_product);
    double v_hat = *b / (1 - pow(b2, t));
    *w -= m_hat * lr / (sqrt(v_hat) + eps);
    break;
  }
  case MXU_ADADELTA: {
    *a = o->rho * *a + (1 - o->rho) * g * g;
    double delta = -sqrt(*b + eps) * g / sqrt(*a + eps);
    *b = o->rho * *b + (1 - o->rho) * delta * delta;
    *w += lr * delta;
    break;
  }
  case MXU_LION: {
    double c = *a * b1 + g * (1 - b1);
    *w -= lr * ((c > 0) - (c < 0));
    *a = *a * b2 + g * (1 - b2);
    break;
  }
  }
}

/* use_ema after step t: Keras 3's average starts at the first step's
 * weights; tf.keras 2's (keras2) at a copy of the weights before it. */
static void reference_average(const mxu_optimizer_config *o, int keras2, int t,
                              double *w, double *average) {
  double m = t == 1 && !keras2 ? 0 : o->ema_momentum;
  *average = m * *average + (1 - m) * *w;
  if (o->ema_overwrite_frequency > 0 && t % o->ema_overwrite_frequency == 0)
    *w = *average;
}

/* Three steps of the model and of the reference, from the same weights
 * and the same gradients (clipped and decayed first as Keras does); with
 * use_ema, the average, and the weights fit leaves (the average). */
static void check_rule_in(mxu_optimizer_config o, int keras2,
                          const char *what) {
  mxu_model *m = model_with(o);
  if (!m) return;
  m->keras2_names = keras2;
  double w[W], a[W], b[W], c[W], average[W], tmp;
  for (int i = 0; i < W; i++) {
    w[i] = average[i] = *value_at(m, m->weights, i, &tmp);
    a[i] = *slot(m, m->slot_m, i); /* Adagrad starts at its accumulator */
    b[i] = c[i] = 0;
  }
  double u_product = 1;
  for (int t = 1; t <= STEPS; t++) {
    double g[W], norm = 0, kernel_norm = 0, bias_norm = 0;
    for (int i = 0; i < W; i++) {
      g[i] = gradient(t, i);
      *slot(m, m->grads, i) = (float)g[i];
      norm += g[i] * g[i];
      *(i < IN * OUT ? &kernel_norm : &bias_norm) += g[i] * g[i];
    }
    for (int i = 0; i < W; i++) {
      double own = sqrt(i < IN * OUT ? kernel_norm : bias_norm);
      if (o.clipnorm > 0) g[i] = g[i] * o.clipnorm / fmax(own, o.clipnorm);
      if (o.global_clipnorm > 0)
        g[i] *= o.global_clipnorm * fmin(1 / sqrt(norm), 1 / o.global_clipnorm);
      if (o.clipvalue > 0) g[i] = fmin(fmax(g[i], -o.clipvalue), o.clipvalue);
      w[i] -= w[i] * o.weight_decay * o.learning_rate;
    }
    u_product *= o.beta_1 * (1 - 0.5 * pow(0.96, t));
    for (int i = 0; i < W; i++) {
      reference(&o, t, g[i], &w[i], &a[i], &b[i], &c[i], u_product);
      if (o.use_ema) reference_average(&o, keras2, t, &w[i], &average[i]);
    }
    mxu_strategy_apply(m);
  }
  /* The weights, and the slots the optimizer keeps (slot_m, slot_v,
   * slot_u as its spec names them). */
  double worst = 0;
  mxu_slot_spec spec = mxu_optimizer_slots(&o);
  const double *want[MXU_SLOTS] = {a, b, c};
  for (int i = 0; i < W; i++) {
    double got = *value_at(m, m->weights, i, &tmp);
    worst = fmax(worst, fabs(got - w[i]) / fmax(1e-3, fabs(w[i])));
    for (int k = 0; k < MXU_SLOTS; k++)
      if (spec.keras3[k])
        worst =
            fmax(worst, fabs(*slot(m, mxu_slot_buffer(m, k), i) - want[k][i]) /
                            fmax(1e-3, fabs(want[k][i])));
  }
  mxu_optimizer_finalize(m);
  for (int i = 0; o.use_ema && i < W; i++) {
    double got = *value_at(m, m->weights, i, &tmp);
    worst = fmax(worst, fabs(got - average[i]) / fmax(1e-3, fabs(average[i])));
  }
  CHECK_MSG(worst < 2e-5 && m->iterations == STEPS,
            "%s: weights off by %g (relative) after %d steps", what, worst,
            STEPS);
  mxu_model_free(m);
}

static void check_rule(mxu_optimizer_config o, const char *what) {
  check_rule_in(o, 0, what);
}

static void rules(void) {
  static const char *const names[] = {"adam",     "sgd",    "rmsprop",
                                      "adagrad",  "adamax", "nadam",
                                      "adadelta", "lion",   "adamw"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    mxu_optimizer_config o;
    CHECK_OK(mxu_optimizer_from_name(names[i], &o));
    o.learning_rate = 0.05f; /* large enough to move visibly */
    check_rule(o, names[i]);
  }
  mxu_optimizer_config o;
  CHECK_OK(mxu_optimizer_from_name("rmsprop", &o));
  o.momentum = 0.5f;
  check_rule(o, "rmsprop with momentum");
  o.centered = 1;
  check_rule(o, "rmsprop centered with momentum");
  o.momentum = 0;
  check_rule(o, "rmsprop centered");
  o = mxu_adam(0.05f);
  o.amsgrad = 1;
  check_rule(o, "adam amsgrad");
  CHECK_OK(mxu_optimizer_from_name("adamw", &o));
  o.learning_rate = 0.05f;
  o.amsgrad = 1;
  check_rule(o, "adamw amsgrad");
  o = mxu_sgd(0.1f, 0.9f, 0);
  check_rule(o, "sgd with momentum");
  o = mxu_adam(0.01f);
  o.clipnorm = 0.3f;
  check_rule(o, "adam, clipnorm");
  o.clipnorm = 0;
  o.global_clipnorm = 0.5f;
  check_rule(o, "adam, global_clipnorm");
  o.global_clipnorm = 0;
  o.clipvalue = 0.2f;
  o.weight_decay = 0.1f;
  check_rule(o, "adam, clipvalue and weight_decay");
  /* Two clips at once are refused, as Keras refuses them. */
  o.clipnorm = 1;
  mxu_model *m = mxu_sequential("two");
  int64_t dims[1] = {IN};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  mxu_dense_config d = mxu_dense_defaults(OUT);
  CHECK_OK(mxu_add_dense(m, &d));
  mxu_compile_config c = mxu_compile_defaults();
  c.optimizer = o;
  EXPECT_FAIL(mxu_compile(m, &c), MXU_ERR_ARG, "only one of clipnorm");
  mxu_model_free(m);
  EXPECT_FAIL(mxu_optimizer_from_name("ftrl", &o), MXU_ERR_UNSUPPORTED,
              "optimizer 'ftrl' is not supported");
  o = mxu_adam(0.05f);
  o.use_ema = 1;
  o.ema_momentum = 0.5f;
  check_rule_in(o, 0, "adam, use_ema");
  check_rule_in(o, 1, "adam, use_ema as tf.keras 2");
  o = mxu_sgd(0.1f, 0.9f, 0);
  o.use_ema = 1;
  o.ema_momentum = 0.7f;
  o.ema_overwrite_frequency = 2;
  check_rule_in(o, 0, "sgd, use_ema overwriting every 2 steps");
  check_rule_in(o, 1, "sgd, use_ema overwriting every 2 steps as tf.keras 2");
  o.ema_momentum = 1.5f;
  m = mxu_sequential("ema");
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(1, dims)));
  CHECK_OK(mxu_add_dense(m, &d));
  c.optimizer = o;
  EXPECT_FAIL(mxu_compile(m, &c), MXU_ERR_ARG, "ema_momentum in [0, 1]");
  mxu_model_free(m);
}

/* Saved after two steps, restored into a fresh model: the third step
 * gives the same weights bit for bit, in both file layouts. */
static void state_files(void) {
  /* The last four: rmsprop centered, adam with amsgrad (a third slot),
   * adam and sgd (without momentum, a slot only tf.keras 2 keeps) with
   * use_ema (the average before the slots). */
  static const char *const names[] = {
      "rmsprop", "adagrad", "adamax", "nadam", "adadelta", "lion",
      "adamw",   "rmsprop", "adam",   "adam",  "sgd"};
  int count = (int)(sizeof names / sizeof *names);
  CHECK(check_temp_make("optimizers"));
  for (int i = 0; i < count; i++)
    for (int keras = 0; keras < 2; keras++) {
      mxu_optimizer_config o;
      CHECK_OK(mxu_optimizer_from_name(names[i], &o));
      o.learning_rate = 0.05f;
      if (o.kind == MXU_RMSPROP) o.momentum = 0.3f;
      o.centered = i == count - 4;
      o.amsgrad = i == count - 3;
      o.use_ema = i >= count - 2;
      o.ema_momentum = 0.6f;
      mxu_model *a = model_with(o), *b = model_with(o);
      if (!a || !b) return;
      for (int t = 1; t <= 3; t++) {
        for (int k = 0; k < W; k++) *slot(a, a->grads, k) = gradient(t, k);
        mxu_strategy_apply(a);
        if (t != 2) continue;
        char name[64];
        snprintf(name, sizeof name, "%s%d.%s", names[i], i,
                 keras ? "keras" : "h5");
        CHECK_OK(mxu_save_model(a, temp_path(name), NULL));
        CHECK_OK(mxu_restore_model(b, temp_path(name), NULL));
      }
      for (int k = 0; k < W; k++) *slot(b, b->grads, k) = gradient(3, k);
      mxu_strategy_apply(b);
      CHECK_MSG(b->iterations == 3 && check_weights_differing(a, b) == 0,
                "%s (%s): the restored run differs", names[i],
                keras ? ".keras" : ".h5");
      mxu_model_free(a);
      mxu_model_free(b);
    }
  check_remove_tree(check_temp_dir);
}

/* Each schedule's rate against Keras' formula, in double. */
static void schedules(void) {
  const double pi = 3.14159265358979;
  mxu_lr_decay e = {.kind = MXU_EXPONENTIAL_DECAY,
                    .initial_learning_rate = 0.1f,
                    .decay_steps = 10,
                    .decay_rate = 0.5f};
  mxu_lr_decay inv = e, poly = e, cosine = e, restart = e, piece = {0};
  inv.kind = MXU_INVERSE_TIME_DECAY;
  inv.staircase = 1;
  poly.kind = MXU_POLYNOMIAL_DECAY;
  poly.end_learning_rate = 0.01f;
  poly.power = 2;
  poly.cycle = 1;
  cosine.kind = MXU_COSINE_DECAY;
  cosine.alpha = 0.1f;
  cosine.has_warmup = 1;
  cosine.warmup_target = 0.2f;
  cosine.warmup_steps = 4;
  restart.kind = MXU_COSINE_DECAY_RESTARTS;
  restart.t_mul = 2;
  restart.m_mul = 0.5f;
  restart.alpha = 0;
  piece.kind = MXU_PIECEWISE_CONSTANT;
  piece.boundary_count = 2;
  piece.boundaries[0] = 5, piece.boundaries[1] = 9;
  piece.values[0] = 1, piece.values[1] = 0.5f, piece.values[2] = 0.25f;
  int64_t steps[] = {0, 1, 4, 5, 9, 10, 17, 25, 40};
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    double t = (double)steps[i];
    double want[6];
    want[0] = 0.1 * pow(0.5, t / 10);
    want[1] = 0.1 / (1 + 0.5 * floor(t / 10));
    double ds = 10 * (t == 0 ? 1 : ceil(t / 10));
    want[2] = (0.1 - 0.01) * pow(1 - t / ds, 2) + 0.01;
    if (t < 4) {
      want[3] = (0.2 - 0.1) * t / 4 + 0.1;
    } else {
      double c = fmin(t - 4, 10) / 10;
      want[3] = 0.2 * (0.9 * 0.5 * (1 + cos(pi * c)) + 0.1);
    }
    /* Restarts every 10, 20, 40 steps: restart i starts at 10 (2^i - 1). */
    double f = t / 10;
    double r = floor(log(1 - f * (1 - 2)) / log(2));
    double within = (f - (1 - pow(2, r)) / (1 - 2)) / pow(2, r);
    want[4] = 0.1 * 0.5 * pow(0.5, r) * (1 + cos(pi * within));
    want[5] = t <= 5 ? 1 : t <= 9 ? 0.5 : 0.25;
    const mxu_lr_decay *all[6] = {&e, &inv, &poly, &cosine, &restart, &piece};
    for (int k = 0; k < 6; k++) {
      double got = mxu_schedule_rate(all[k], steps[i]);
      CHECK_MSG(fabs(got - want[k]) <= 1e-6 * fmax(1, fabs(want[k])) + 1e-7,
                "schedule %d at step %lld: %.9g, Keras' formula %.9g", k,
                (long long)steps[i], got, want[k]);
    }
  }
  /* Each step runs at the rate of the steps before it, as Keras'. */
  mxu_optimizer_config o = mxu_sgd(0.1f, 0, 0);
  o.schedule = e;
  mxu_model *m = model_with(o);
  if (!m) return;
  float before = m->weights[0];
  for (int t = 1; t <= 2; t++) {
    for (int k = 0; k < W; k++) *slot(m, m->grads, k) = 1.0f;
    mxu_strategy_apply(m);
  }
  double want = before - 0.1 - 0.1 * pow(0.5, 0.1);
  CHECK_MSG(fabs(m->weights[0] - want) < 1e-6, "after 2 steps %g, want %g",
            m->weights[0], want);
  CHECK(fabs(mxu_model_learning_rate(m) - 0.1 * pow(0.5, 0.2)) < 1e-7);
  EXPECT_FAIL(mxu_model_set_learning_rate(m, 0.01), MXU_ERR_ARG,
              "follows a learning-rate schedule");
  /* Written with the model and read back the same. */
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = NULL;
    CHECK_OK(mxu_model_to_json(m, keras3, &text));
    mxu_model *again = NULL;
    mxu_compile_config c = mxu_compile_defaults();
    CHECK_OK(mxu_model_from_json(text, "s.json", &again, &c, NULL));
    CHECK(text && strstr(text, "\"ExponentialDecay\"") &&
          c.optimizer.schedule.kind == MXU_EXPONENTIAL_DECAY &&
          c.optimizer.schedule.decay_steps == 10 &&
          c.optimizer.schedule.decay_rate == 0.5f);
    mxu_model_free(again);
    free(text);
  }
  mxu_model_free(m);
}

int main(void) {
  schedules();
  rules();
  state_files();
  return check_report("test_optimizers");
}
