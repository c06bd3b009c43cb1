/* json_compile.c — a model file's compile settings: Keras 3's
 * compile_config (or tf.keras 2.x's training_config) read into
 * mxu_compile_config (optimizer, loss, from_logits, metric name), and a
 * compiled model's settings written back in that shape. */
#include "io/json.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *class_name, *metric;
} metric_classes[] = {
    {"SparseCategoricalAccuracy", "sparse_categorical_accuracy"},
    {"CategoricalAccuracy", "categorical_accuracy"},
    {"BinaryAccuracy", "binary_accuracy"},
    {"TopKCategoricalAccuracy", "top_k_categorical_accuracy"},
    {"SparseTopKCategoricalAccuracy", "sparse_top_k_categorical_accuracy"},
    {"MeanAbsoluteError", "mean_absolute_error"},
    {"MeanSquaredError", "mean_squared_error"},
};

static const char *const optimizer_keys[] = {"name",
                                             "learning_rate",
                                             "lr",
                                             "beta_1",
                                             "beta_2",
                                             "epsilon",
                                             "amsgrad",
                                             "momentum",
                                             "nesterov",
                                             "rho",
                                             "centered",
                                             "initial_accumulator_value",
                                             "decay",
                                             "weight_decay",
                                             "clipnorm",
                                             "clipvalue",
                                             "global_clipnorm",
                                             "use_ema",
                                             "ema_momentum",
                                             "ema_overwrite_frequency",
                                             "jit_compile",
                                             "is_legacy_optimizer",
                                             "loss_scale_factor",
                                             "gradient_accumulation_steps",
                                             NULL};

static const char *const loss_keys[] = {
    "name",         "reduction",       "from_logits",
    "ignore_class", "label_smoothing", "axis",
    "dtype",        "delta",           NULL};

static const char *const compile_keys[] = {
    "optimizer",       "optimizer_config",    "loss",
    "metrics",         "loss_weights",        "weighted_metrics",
    "run_eagerly",     "steps_per_execution", "jit_compile",
    "auto_scale_loss", "sample_weight_mode",  NULL};

/* Absent, null or 0: an option that is off (weight_decay, decay). */
static mxu_status require_zero(const mxu_json_where *where, const cJSON *object,
                               const char *key) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 0))
    return MXU_OK;
  char text[160];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s %s is not supported (only 0 or null)", key, text);
}

/* ---- optimizer -----------------------------------------------------------
 */

/* A number, or null (Keras' "off" for weight_decay and the clips). */
static mxu_status read_optional(const mxu_json_where *where,
                                const cJSON *config, const char *key,
                                float *out) {
  const cJSON *v = mxu_json_get(config, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  return mxu_json_float(where, config, key, MXU_JSON_OPTIONAL, out);
}

/* Keras' schedule classes, in mxu_lr_decay_kind order from 1. */
static const char *const schedule_classes[] = {"ExponentialDecay",
                                               "PiecewiseConstantDecay",
                                               "PolynomialDecay",
                                               "InverseTimeDecay",
                                               "CosineDecay",
                                               "CosineDecayRestarts",
                                               NULL};

static const char *const schedule_keys[] = {"initial_learning_rate",
                                            "decay_steps",
                                            "decay_rate",
                                            "staircase",
                                            "boundaries",
                                            "values",
                                            "end_learning_rate",
                                            "power",
                                            "cycle",
                                            "alpha",
                                            "warmup_target",
                                            "warmup_steps",
                                            "first_decay_steps",
                                            "t_mul",
                                            "m_mul",
                                            "name",
                                            NULL};

static mxu_status read_steps(const mxu_json_where *where, const cJSON *config,
                             const char *key, int64_t *out) {
  const cJSON *v = mxu_json_get(config, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
      v->valuedouble < 0 || v->valuedouble > 9e15)
    return mxu_json_fail(where, MXU_ERR_FORMAT, "%s must be a step count", key);
  *out = (int64_t)v->valuedouble;
  return MXU_OK;
}

/* PiecewiseConstantDecay's boundaries (steps) and values (one more). */
static mxu_status read_pieces(const mxu_json_where *where, const cJSON *config,
                              mxu_lr_decay *d) {
  const cJSON *b = mxu_json_get(config, "boundaries"),
              *v = mxu_json_get(config, "values");
  int nb = cJSON_IsArray(b) ? cJSON_GetArraySize(b) : -1;
  int nv = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (nb < 1 || nb > MXU_MAX_BOUNDARIES || nv != nb + 1)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "PiecewiseConstantDecay needs 1 to %d boundaries "
                         "and one value more",
                         MXU_MAX_BOUNDARIES);
  d->boundary_count = nb;
  for (int i = 0; i < nb + nv; i++) {
    const cJSON *item = cJSON_GetArrayItem(i < nb ? b : v, i < nb ? i : i - nb);
    if (!cJSON_IsNumber(item))
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "boundaries and values must be numbers");
    if (i < nb)
      d->boundaries[i] = (int64_t)item->valuedouble;
    else
      d->values[i - nb] = (float)item->valuedouble;
  }
  return MXU_OK;
}

static mxu_status read_schedule(const mxu_json_where *where, const cJSON *v,
                                mxu_lr_decay *d) {
  const cJSON *name = mxu_json_get(v, "class_name");
  memset(d, 0, sizeof *d);
  for (int i = 0; schedule_classes[i] && cJSON_IsString(name); i++)
    if (strcmp(name->valuestring, schedule_classes[i]) == 0)
      d->kind = (mxu_lr_decay_kind)(i + 1);
  if (d->kind == MXU_DECAY_NONE) {
    char text[160];
    mxu_json_text(name, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "learning_rate: schedule %s is not supported "
                         "(supported: ExponentialDecay, "
                         "PiecewiseConstantDecay, PolynomialDecay, "
                         "InverseTimeDecay, CosineDecay, CosineDecayRestarts)",
                         text);
  }
  const cJSON *config = mxu_json_get(v, "config");
  if (!cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "learning_rate: a schedule needs its config");
  MXU_TRY(mxu_json_check_keys(where, config, schedule_keys, NULL));
  d->end_learning_rate = 0.0001f;
  d->power = 1.0f;
  d->t_mul = 2.0f;
  d->m_mul = 1.0f;
  static const char *const floats[] = {"initial_learning_rate",
                                       "decay_rate",
                                       "end_learning_rate",
                                       "power",
                                       "alpha",
                                       "t_mul",
                                       "m_mul",
                                       NULL};
  float *targets[] = {&d->initial_learning_rate,
                      &d->decay_rate,
                      &d->end_learning_rate,
                      &d->power,
                      &d->alpha,
                      &d->t_mul,
                      &d->m_mul};
  for (int i = 0; floats[i]; i++)
    MXU_TRY(read_optional(where, config, floats[i], targets[i]));
  MXU_TRY(mxu_json_bool(where, config, "staircase", &d->staircase));
  MXU_TRY(mxu_json_bool(where, config, "cycle", &d->cycle));
  MXU_TRY(read_steps(where, config, "decay_steps", &d->decay_steps));
  MXU_TRY(read_steps(where, config, "first_decay_steps", &d->decay_steps));
  MXU_TRY(read_steps(where, config, "warmup_steps", &d->warmup_steps));
  const cJSON *target = mxu_json_get(config, "warmup_target");
  d->has_warmup = target && !cJSON_IsNull(target);
  if (d->has_warmup)
    MXU_TRY(read_optional(where, config, "warmup_target", &d->warmup_target));
  if (d->kind == MXU_PIECEWISE_CONSTANT) MXU_TRY(read_pieces(where, config, d));
  return MXU_OK;
}

static mxu_status read_learning_rate(const mxu_json_where *where,
                                     const cJSON *config,
                                     mxu_optimizer_config *o) {
  const char *key =
      mxu_json_get(config, "learning_rate") ? "learning_rate" : "lr";
  const cJSON *v = mxu_json_get(config, key);
  if (cJSON_IsObject(v)) {
    MXU_TRY(read_schedule(where, v, &o->schedule));
    /* The rate the schedule starts at. */
    o->learning_rate = mxu_schedule_rate(&o->schedule, 0);
    return MXU_OK;
  }
  o->schedule.kind = MXU_DECAY_NONE;
  float *out = &o->learning_rate;
  MXU_TRY(mxu_json_float(where, config, key, MXU_JSON_OPTIONAL, out));
  if (!(*out > 0))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "%s must be positive, got %g",
                         key, (double)*out);
  return MXU_OK;
}

/* The weights' moving average: use_ema, its momentum (Keras' default
 * 0.99) and how often it overwrites the weights (null: never). */
static mxu_status read_ema(const mxu_json_where *where, const cJSON *config,
                           mxu_optimizer_config *out) {
  MXU_TRY(mxu_json_bool(where, config, "use_ema", &out->use_ema));
  if (!out->use_ema) return MXU_OK;
  out->ema_momentum = 0.99f;
  MXU_TRY(read_optional(where, config, "ema_momentum", &out->ema_momentum));
  if (!(out->ema_momentum >= 0 && out->ema_momentum <= 1))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "ema_momentum must be in [0, 1], got %g",
                         (double)out->ema_momentum);
  const char *key = "ema_overwrite_frequency";
  const cJSON *every = mxu_json_get(config, key);
  if (!every || cJSON_IsNull(every)) return MXU_OK;
  return mxu_json_int(where, config, key, MXU_JSON_OPTIONAL, 1, INT_MAX,
                      &out->ema_overwrite_frequency);
}

/* What mxu's optimizers do not have: legacy decay, accumulation;
 * AMSGrad is Adam's and AdamW's, centered RMSprop's alone. */
static mxu_status read_optimizer_options(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_optimizer_config *out) {
  static const char *const nulls[] = {"loss_scale_factor",
                                      "gradient_accumulation_steps", NULL};
  for (const char *const *key = nulls; *key; key++)
    MXU_TRY(mxu_json_require_null(where, config, *key));
  MXU_TRY(require_zero(where, config, "decay"));
  MXU_TRY(read_ema(where, config, out));
  if (out->kind == MXU_ADAM || out->kind == MXU_ADAMW)
    MXU_TRY(mxu_json_bool(where, config, "amsgrad", &out->amsgrad));
  else
    MXU_TRY(mxu_json_require_false(where, config, "amsgrad"));
  if (out->kind == MXU_RMSPROP)
    MXU_TRY(mxu_json_bool(where, config, "centered", &out->centered));
  else
    MXU_TRY(mxu_json_require_false(where, config, "centered"));
  return mxu_json_check_keys(where, config, optimizer_keys, NULL);
}

static mxu_status read_optimizer_config(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_optimizer_config *out) {
  if (config && !cJSON_IsNull(config) && !cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "config must be an object");
  MXU_TRY(read_learning_rate(where, config, out));
  static const char *const floats[] = {"beta_1",  "beta_2",
                                       "epsilon", "momentum",
                                       "rho",     "initial_accumulator_value",
                                       NULL};
  float *targets[] = {&out->beta_1,  &out->beta_2,
                      &out->epsilon, &out->momentum,
                      &out->rho,     &out->initial_accumulator_value};
  for (int i = 0; floats[i]; i++)
    MXU_TRY(read_optional(where, config, floats[i], targets[i]));
  MXU_TRY(mxu_json_bool(where, config, "nesterov", &out->nesterov));
  MXU_TRY(read_optional(where, config, "weight_decay", &out->weight_decay));
  MXU_TRY(read_optional(where, config, "clipnorm", &out->clipnorm));
  MXU_TRY(
      read_optional(where, config, "global_clipnorm", &out->global_clipnorm));
  MXU_TRY(read_optional(where, config, "clipvalue", &out->clipvalue));
  return read_optimizer_options(where, config, out);
}

/* "adam", "rmsprop", ..., or {"class_name": "Adam", "config": {...}};
 * Keras 3 adds module and registered_name, tf.keras 2.11+ h5 files may
 * say "Custom>Adam". */
static mxu_status read_optimizer(const mxu_json_where *where, const cJSON *v,
                                 mxu_optimizer_config *out) {
  const cJSON *name = cJSON_IsObject(v) ? mxu_json_get(v, "class_name") : v;
  if (!cJSON_IsString(name) || !name->valuestring) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "must be a name or an object with class_name, got %s",
                         text);
  }
  const char *class_name = name->valuestring;
  if (strncmp(class_name, "Custom>", 7) == 0) class_name += 7;
  if (mxu_optimizer_from_name(class_name, out) != MXU_OK) {
    char why[512]; /* the message buffer is about to be rewritten */
    snprintf(why, sizeof why, "%s", mxu_errmsg());
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "%s", why);
  }
  if (!cJSON_IsObject(v)) return MXU_OK;
  return read_optimizer_config(where, mxu_json_get(v, "config"), out);
}

/* ---- loss ----------------------------------------------------------------
 */

/* label_smoothing of the two cross-entropies that have it; 0 elsewhere. */
static mxu_status read_smoothing(const mxu_json_where *where,
                                 const cJSON *config,
                                 mxu_compile_config *compile) {
  if (compile->loss != MXU_CATEGORICAL_CROSSENTROPY &&
      compile->loss != MXU_BINARY_CROSSENTROPY)
    return require_zero(where, config, "label_smoothing");
  MXU_TRY(mxu_json_float(where, config, "label_smoothing", MXU_JSON_OPTIONAL,
                         &compile->label_smoothing));
  if (!(compile->label_smoothing >= 0 && compile->label_smoothing <= 1))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "label_smoothing must be in [0, 1], got %g",
                         (double)compile->label_smoothing);
  return MXU_OK;
}

static mxu_status read_loss_config(const mxu_json_where *where,
                                   const cJSON *config,
                                   mxu_compile_config *compile) {
  if (!config || cJSON_IsNull(config)) return MXU_OK;
  if (!cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "config must be an object");
  MXU_TRY(mxu_json_bool(where, config, "from_logits", &compile->from_logits));
  MXU_TRY(read_smoothing(where, config, compile));
  MXU_TRY(mxu_json_float(where, config, "delta", MXU_JSON_OPTIONAL,
                         &compile->huber_delta));
  if (!(compile->huber_delta > 0))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "delta must be positive");
  const cJSON *reduction = mxu_json_get(config, "reduction");
  if (cJSON_IsString(reduction) && reduction->valuestring &&
      strcmp(reduction->valuestring, "auto") != 0 &&
      strcmp(reduction->valuestring, "sum_over_batch_size") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "reduction '%s' is not supported (only "
                         "'sum_over_batch_size')",
                         reduction->valuestring);
  MXU_TRY(mxu_json_require_null(where, config, "ignore_class"));
  int axis = -1;
  MXU_TRY(mxu_json_int(where, config, "axis", MXU_JSON_OPTIONAL, -1, 1 << 20,
                       &axis));
  if (axis != -1)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "axis %d is not supported (only -1)", axis);
  return mxu_json_check_keys(where, config, loss_keys, NULL);
}

static mxu_status read_loss(const mxu_json_where *where, const cJSON *v,
                            mxu_compile_config *compile) {
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  const cJSON *name = cJSON_IsObject(v) ? mxu_json_get(v, "class_name") : v;
  if (!cJSON_IsString(name) || !name->valuestring) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where,
                         cJSON_IsArray(v) || cJSON_IsObject(v)
                             ? MXU_ERR_UNSUPPORTED
                             : MXU_ERR_FORMAT,
                         "%s is not supported (only one loss, by name or "
                         "class)",
                         text);
  }
  if (mxu_loss_from_name(name->valuestring, &compile->loss) != MXU_OK) {
    char why[512]; /* the message buffer is about to be rewritten */
    snprintf(why, sizeof why, "%s", mxu_errmsg());
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "%s", why);
  }
  compile->from_logits = 0;
  compile->label_smoothing = 0.0f;
  compile->huber_delta = 1.0f;
  return cJSON_IsObject(v)
             ? read_loss_config(where, mxu_json_get(v, "config"), compile)
             : MXU_OK;
}

/* ---- metrics -------------------------------------------------------------
 */

/* compile->metric points into loss.c's table, never into the JSON, whose
 * memory is gone once the read returns. */
static const char *metric_by_name(const cJSON *name) {
  if (!cJSON_IsString(name) || !name->valuestring) return NULL;
  return mxu_metric_name(name->valuestring);
}

/* "accuracy", or a metric object such as {"class_name":
 * "SparseCategoricalAccuracy", "config": {"name": ...}}. */
static const char *metric_of(const cJSON *v) {
  if (!cJSON_IsObject(v)) return metric_by_name(v);
  const char *named =
      metric_by_name(mxu_json_get(mxu_json_get(v, "config"), "name"));
  const cJSON *class_name = mxu_json_get(v, "class_name");
  for (size_t i = 0; i < sizeof metric_classes / sizeof *metric_classes; i++)
    if (cJSON_IsString(class_name) && class_name->valuestring &&
        strcmp(class_name->valuestring, metric_classes[i].class_name) == 0)
      return named ? named : metric_classes[i].metric;
  /* tf.keras 2.x h5 files wrap the function: MeanMetricWrapper, fn. */
  return named && metric_by_name(mxu_json_get(mxu_json_get(v, "config"), "fn"))
             ? named
             : NULL;
}

static mxu_status read_one_metric(const mxu_json_where *where, const cJSON *v,
                                  int *count, const char **metric) {
  const char *found = metric_of(v);
  char text[160];
  mxu_json_text(v, text, sizeof text);
  if (!found)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s is not supported (supported: %s)", text,
                         mxu_metric_names());
  if (++*count > 1)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s: mxu computes one metric; list only one", text);
  *metric = found;
  return MXU_OK;
}

/* A list of metrics, in tf.keras 2.x h5 files nested one level deeper. */
static mxu_status read_metrics(const mxu_json_where *where, const cJSON *v,
                               const char **metric) {
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (!cJSON_IsArray(v)) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s is not supported (only a list)", text);
  }
  int count = 0;
  for (const cJSON *m = v->child; m; m = m->next) {
    if (!cJSON_IsArray(m)) {
      MXU_TRY(read_one_metric(where, m, &count, metric));
      continue;
    }
    for (const cJSON *inner = m->child; inner; inner = inner->next)
      MXU_TRY(read_one_metric(where, inner, &count, metric));
  }
  return MXU_OK;
}

/* ---- compile_config ------------------------------------------------------
 */

static mxu_status read_compile_fields(const char *source, const char *key,
                                      const cJSON *c,
                                      mxu_compile_config *compile) {
  mxu_json_where where;
  mxu_json_where_set(&where, "%s: %s", source, key);
  if (!cJSON_IsObject(c))
    return mxu_json_fail(&where, MXU_ERR_FORMAT, "must be an object");
  MXU_TRY(mxu_json_check_keys(&where, c, compile_keys, NULL));
  MXU_TRY(mxu_json_require_null(&where, c, "loss_weights"));
  const cJSON *weighted = mxu_json_get(c, "weighted_metrics");
  if (weighted && !(cJSON_IsArray(weighted) && !weighted->child))
    MXU_TRY(mxu_json_require_null(&where, c, "weighted_metrics"));
  const cJSON *optimizer = mxu_json_get(c, "optimizer");
  if (!optimizer) optimizer = mxu_json_get(c, "optimizer_config");
  mxu_json_where_set(&where, "%s: %s: optimizer", source, key);
  if (optimizer && !cJSON_IsNull(optimizer))
    MXU_TRY(read_optimizer(&where, optimizer, &compile->optimizer));
  mxu_json_where_set(&where, "%s: %s: loss", source, key);
  MXU_TRY(read_loss(&where, mxu_json_get(c, "loss"), compile));
  mxu_json_where_set(&where, "%s: %s", source, key);
  int steps = 1;
  MXU_TRY(mxu_json_int(&where, c, "steps_per_execution", MXU_JSON_OPTIONAL, 1,
                       1 << 30, &steps));
  compile->steps_per_execution = steps;
  mxu_json_where_set(&where, "%s: %s: metrics", source, key);
  return read_metrics(&where, mxu_json_get(c, "metrics"), &compile->metric);
}

mxu_status mxu_json_read_compile(const char *source, const cJSON *root,
                                 mxu_compile_config *compile, int *found) {
  const char *key = "compile_config";
  const cJSON *c = mxu_json_get(root, key);
  if (!c || cJSON_IsNull(c)) {
    key = "training_config";
    c = mxu_json_get(root, key);
  }
  *found = 0;
  if (!c || cJSON_IsNull(c)) return MXU_OK;
  MXU_TRY(read_compile_fields(source, key, c, compile));
  *found = 1;
  return MXU_OK;
}

/* ---- writing -------------------------------------------------------------
 */

static void put_optional(mxu_json_out *out, cJSON *config, const char *key,
                         float value) {
  if (value > 0)
    mxu_json_put_float(out, config, key, value);
  else
    mxu_json_put_null(out, config, key);
}

/* The class's own settings in Keras' order. */
static void put_optimizer_settings(mxu_json_out *out, cJSON *config,
                                   const mxu_optimizer_config *o) {
  switch (o->kind) {
  case MXU_SGD:
    mxu_json_put_float(out, config, "momentum", o->momentum);
    mxu_json_put_bool(out, config, "nesterov", o->nesterov);
    return;
  case MXU_RMSPROP:
    mxu_json_put_float(out, config, "rho", o->rho);
    mxu_json_put_float(out, config, "momentum", o->momentum);
    mxu_json_put_float(out, config, "epsilon", o->epsilon);
    mxu_json_put_bool(out, config, "centered", o->centered);
    return;
  case MXU_ADAGRAD:
    mxu_json_put_float(out, config, "initial_accumulator_value",
                       o->initial_accumulator_value);
    mxu_json_put_float(out, config, "epsilon", o->epsilon);
    return;
  case MXU_ADADELTA:
    mxu_json_put_float(out, config, "rho", o->rho);
    mxu_json_put_float(out, config, "epsilon", o->epsilon);
    return;
  default:
    mxu_json_put_float(out, config, "beta_1", o->beta_1);
    mxu_json_put_float(out, config, "beta_2", o->beta_2);
    if (o->kind == MXU_LION) return;
    mxu_json_put_float(out, config, "epsilon", o->epsilon);
    if (o->kind == MXU_ADAM || o->kind == MXU_ADAMW)
      mxu_json_put_bool(out, config, "amsgrad", o->amsgrad);
  }
}

static cJSON *schedule_object(mxu_json_out *out, const mxu_lr_decay *d) {
  cJSON *config = cJSON_CreateObject();
  mxu_lr_decay_kind k = d->kind;
  if (k == MXU_PIECEWISE_CONSTANT) {
    cJSON *b = cJSON_CreateArray(), *v = cJSON_CreateArray();
    for (int i = 0; i < d->boundary_count; i++)
      cJSON_AddItemToArray(b, cJSON_CreateNumber((double)d->boundaries[i]));
    for (int i = 0; i <= d->boundary_count; i++)
      cJSON_AddItemToArray(v, cJSON_CreateNumber(d->values[i]));
    mxu_json_put(out, config, "boundaries", b);
    mxu_json_put(out, config, "values", v);
  } else {
    mxu_json_put_float(out, config, "initial_learning_rate",
                       d->initial_learning_rate);
    mxu_json_put_number(out, config,
                        k == MXU_COSINE_DECAY_RESTARTS ? "first_decay_steps"
                                                       : "decay_steps",
                        (double)d->decay_steps);
  }
  if (k == MXU_EXPONENTIAL_DECAY || k == MXU_INVERSE_TIME_DECAY) {
    mxu_json_put_float(out, config, "decay_rate", d->decay_rate);
    mxu_json_put_bool(out, config, "staircase", d->staircase);
  } else if (k == MXU_POLYNOMIAL_DECAY) {
    mxu_json_put_float(out, config, "end_learning_rate", d->end_learning_rate);
    mxu_json_put_float(out, config, "power", d->power);
    mxu_json_put_bool(out, config, "cycle", d->cycle);
  } else if (k == MXU_COSINE_DECAY || k == MXU_COSINE_DECAY_RESTARTS) {
    if (k == MXU_COSINE_DECAY_RESTARTS) {
      mxu_json_put_float(out, config, "t_mul", d->t_mul);
      mxu_json_put_float(out, config, "m_mul", d->m_mul);
    }
    mxu_json_put_float(out, config, "alpha", d->alpha);
    if (k == MXU_COSINE_DECAY && d->has_warmup) {
      mxu_json_put_float(out, config, "warmup_target", d->warmup_target);
      mxu_json_put_number(out, config, "warmup_steps", (double)d->warmup_steps);
    }
  }
  return mxu_json_object(out, "keras.optimizers.schedules",
                         schedule_classes[k - 1], config);
}

static cJSON *optimizer_object(mxu_json_out *out,
                               const mxu_optimizer_config *o) {
  cJSON *config = cJSON_CreateObject();
  const char *class_name = mxu_optimizer_class_name(o->kind);
  /* Keras 3 names optimizers in snake case, tf.keras 2.x by class. */
  mxu_json_put_string(out, config, "name",
                      out->keras3 ? mxu_optimizer_name(o->kind) : class_name);
  if (o->schedule.kind != MXU_DECAY_NONE)
    mxu_json_put(out, config, "learning_rate",
                 schedule_object(out, &o->schedule));
  else
    mxu_json_put_float(out, config, "learning_rate", o->learning_rate);
  put_optional(out, config, "weight_decay", o->weight_decay);
  put_optional(out, config, "clipnorm", o->clipnorm);
  put_optional(out, config, "global_clipnorm", o->global_clipnorm);
  put_optional(out, config, "clipvalue", o->clipvalue);
  if (o->use_ema) {
    mxu_json_put_bool(out, config, "use_ema", 1);
    mxu_json_put_float(out, config, "ema_momentum", o->ema_momentum);
    if (o->ema_overwrite_frequency > 0)
      mxu_json_put_number(out, config, "ema_overwrite_frequency",
                          o->ema_overwrite_frequency);
    else
      mxu_json_put_null(out, config, "ema_overwrite_frequency");
  }
  put_optimizer_settings(out, config, o);
  if (out->keras3)
    return mxu_json_object(out, "keras.optimizers", class_name, config);
  /* As tf.keras 2.11+ writes them: without is_legacy_optimizer it would
   * build its legacy optimizer, which knows none of these keys and keeps
   * other slots; it finds Lion and AdamW by their registered names only. */
  mxu_json_put_bool(out, config, "is_legacy_optimizer", 0);
  char registered[64];
  snprintf(registered, sizeof registered, "Custom>%s", class_name);
  return mxu_json_object(out, "keras.optimizers", registered, config);
}

/* The function's name, or the class with its options where one is set. */
static cJSON *loss_value(mxu_json_out *out, const mxu_compile_config *c) {
  int huber = c->loss == MXU_HUBER && c->huber_delta != 1.0f;
  if (!c->from_logits && c->label_smoothing == 0.0f && !huber)
    return cJSON_CreateString(mxu_loss_name(c->loss));
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", mxu_loss_name(c->loss));
  mxu_json_put_string(out, config, "reduction",
                      out->keras3 ? "sum_over_batch_size" : "auto");
  if (huber) {
    mxu_json_put_float(out, config, "delta", c->huber_delta);
  } else {
    mxu_json_put_bool(out, config, "from_logits", c->from_logits);
    if (c->label_smoothing != 0.0f)
      mxu_json_put_float(out, config, "label_smoothing", c->label_smoothing);
  }
  return mxu_json_object(out, "keras.losses", mxu_loss_class_name(c->loss),
                         config);
}

cJSON *mxu_json_compile_config(mxu_json_out *out, const mxu_model *model) {
  const mxu_compile_config *c = &model->compile;
  cJSON *config = cJSON_CreateObject();
  mxu_json_put(out, config, "optimizer", optimizer_object(out, &c->optimizer));
  mxu_json_put(out, config, "loss", loss_value(out, c));
  mxu_json_put_null(out, config, "loss_weights");
  cJSON *metrics = cJSON_CreateArray();
  const char *metric = c->metric ? c->metric : "accuracy";
  if (!cJSON_AddItemToArray(metrics, cJSON_CreateString(metric)))
    out->failed = 1;
  mxu_json_put(out, config, "metrics", metrics);
  mxu_json_put_null(out, config, "weighted_metrics");
  mxu_json_put_bool(out, config, "run_eagerly", 0);
  mxu_json_put_number(out, config, "steps_per_execution",
                      c->steps_per_execution > 0 ? c->steps_per_execution : 1);
  mxu_json_put_bool(out, config, "jit_compile", 0);
  return config;
}
