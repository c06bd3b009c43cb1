/* json_compile.c — a model file's compile settings: Keras 3's
 * compile_config (or tf.keras 2.x's training_config) read into
 * mxu_compile_config (optimizer, loss, from_logits, metric name; for a
 * model of several outputs each output's loss, weight and metric, keyed
 * by output name or in output order), and a compiled model's settings
 * written back in that shape. */
#include "io/json.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

/* Which of a metric class's options mxu checks (metric_of). */
typedef enum {
  OPTIONS_NONE,
  OPTIONS_TOP_K,
  OPTIONS_THRESHOLD,
  OPTIONS_COUNTS,
  OPTIONS_AUC,
  OPTIONS_BCE,
  OPTIONS_F_SCORE,
  OPTIONS_AXIS,
  OPTIONS_IOU,
  OPTIONS_BINARY_IOU
} options;

static const struct {
  const char *class_name, *metric;
  options options;
} metric_classes[] = {
    {"SparseCategoricalAccuracy", "sparse_categorical_accuracy", OPTIONS_NONE},
    {"CategoricalAccuracy", "categorical_accuracy", OPTIONS_NONE},
    {"BinaryAccuracy", "binary_accuracy", OPTIONS_THRESHOLD},
    {"TopKCategoricalAccuracy", "top_k_categorical_accuracy", OPTIONS_TOP_K},
    {"SparseTopKCategoricalAccuracy", "sparse_top_k_categorical_accuracy",
     OPTIONS_TOP_K},
    {"MeanAbsoluteError", "mean_absolute_error", OPTIONS_NONE},
    {"MeanSquaredError", "mean_squared_error", OPTIONS_NONE},
    {"RootMeanSquaredError", "root_mean_squared_error", OPTIONS_NONE},
    {"Precision", "precision", OPTIONS_COUNTS},
    {"Recall", "recall", OPTIONS_COUNTS},
    {"AUC", "auc", OPTIONS_AUC}, /* or "prc": its curve decides */
    {"TruePositives", "true_positives", OPTIONS_COUNTS},
    {"FalsePositives", "false_positives", OPTIONS_COUNTS},
    {"TrueNegatives", "true_negatives", OPTIONS_COUNTS},
    {"FalseNegatives", "false_negatives", OPTIONS_COUNTS},
    {"BinaryCrossentropy", "binary_crossentropy", OPTIONS_BCE},
    {"MeanAbsolutePercentageError", "mean_absolute_percentage_error",
     OPTIONS_NONE},
    {"MeanSquaredLogarithmicError", "mean_squared_logarithmic_error",
     OPTIONS_NONE},
    {"LogCoshError", "logcosh", OPTIONS_NONE},
    {"Poisson", "poisson", OPTIONS_NONE},
    {"Hinge", "hinge", OPTIONS_NONE},
    {"SquaredHinge", "squared_hinge", OPTIONS_NONE},
    {"CategoricalHinge", "categorical_hinge", OPTIONS_NONE},
    {"CosineSimilarity", "cosine_similarity", OPTIONS_AXIS},
    {"F1Score", "f1_score", OPTIONS_F_SCORE},
    {"FBetaScore", "fbeta_score", OPTIONS_F_SCORE},
    {"MeanIoU", "mean_iou", OPTIONS_IOU},
    {"OneHotMeanIoU", "one_hot_mean_iou", OPTIONS_IOU},
    {"BinaryIoU", "binary_iou", OPTIONS_BINARY_IOU},
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

static const char *const loss_keys[] = {"name",
                                        "reduction",
                                        "from_logits",
                                        "ignore_class",
                                        "label_smoothing",
                                        "axis",
                                        "dtype",
                                        "delta",
                                        "fn",
                                        "alpha",
                                        "gamma",
                                        "apply_class_balancing",
                                        NULL};

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

/* ---- outputs -------------------------------------------------------------
 */

const char *mxu_json_output_name(const mxu_model *model, int k) {
  const char *name = mxu_model_output_name(model, k);
  return name ? name : "";
}

int mxu_json_per_output(const mxu_model *model) {
  return model->compile.output_count > 0 || mxu_model_output_count(model) > 1;
}

/* A compile config's losses, loss weights and metrics, matched to the
 * model's outputs: each output's entry, and whether the config set the
 * outputs apart (a loss list or dict; metrics by output that leave one
 * without). */
typedef struct outputs_read {
  mxu_model *model; /* keeps the metrics' own names (mxu_model_keep) */
  int keras2;       /* tf.keras 2's training_config */
  int count;
  mxu_output_loss at[MXU_MAX_OUTPUTS];
  int apart;
} outputs_read;

static const char *output_name(const outputs_read *r, int k) {
  return mxu_json_output_name(r->model, k);
}

static int is_output(const outputs_read *r, const char *name) {
  for (int k = 0; k < r->count; k++)
    if (name && strcmp(output_name(r, k), name) == 0) return 1;
  return 0;
}

/* "'a', 'b', 'c'": the outputs, for messages. */
static void output_names_text(const outputs_read *r, char *text, size_t size) {
  size_t used = 0;
  text[0] = 0;
  for (int k = 0; k < r->count && used < size; k++)
    used += (size_t)snprintf(text + used, size - used, "%s'%s'", k ? ", " : "",
                             output_name(r, k));
}

/* A dict by output name: every key names one of the model's outputs. */
static mxu_status check_output_keys(const mxu_json_where *where,
                                    const outputs_read *r, const cJSON *dict,
                                    const char *what) {
  char unknown[256] = "", names[256];
  size_t used = 0;
  int count = 0;
  for (const cJSON *e = dict->child; e; e = e->next) {
    if (is_output(r, e->string)) continue;
    count++;
    if (used < sizeof unknown)
      used +=
          (size_t)snprintf(unknown + used, sizeof unknown - used, "%s'%s'",
                           count > 1 ? ", " : "", e->string ? e->string : "");
  }
  if (!count) return MXU_OK;
  output_names_text(r, names, sizeof names);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "%s %s not %s of the model; key the %s by its "
                       "outputs' names: %s",
                       unknown, count > 1 ? "are" : "is",
                       count > 1 ? "outputs" : "an output", what, names);
}

/* A list in output order: one entry per output. */
static mxu_status check_output_list(const mxu_json_where *where,
                                    const outputs_read *r, const cJSON *list,
                                    const char *what) {
  int n = cJSON_GetArraySize(list);
  if (n == r->count) return MXU_OK;
  char names[256];
  output_names_text(r, names, sizeof names);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "a list of %d %s for a model of %d output%s; give "
                       "one per output, in the model's order (%s)",
                       n, what, r->count, r->count > 1 ? "s" : "", names);
}

/* ---- loss ----------------------------------------------------------------
 */

/* label_smoothing of the cross-entropies that have it; 0 elsewhere. */
static mxu_status read_smoothing(const mxu_json_where *where,
                                 const cJSON *config, mxu_output_loss *out) {
  if (!mxu_loss_smooths(out->loss))
    return require_zero(where, config, "label_smoothing");
  MXU_TRY(mxu_json_float(where, config, "label_smoothing", MXU_JSON_OPTIONAL,
                         &out->label_smoothing));
  if (!(out->label_smoothing >= 0 && out->label_smoothing <= 1))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "label_smoothing must be in [0, 1], got %g",
                         (double)out->label_smoothing);
  return MXU_OK;
}

/* The focal cross-entropies' gamma, alpha (a number: one per class is
 * not supported) and the binary one's apply_class_balancing. */
static mxu_status read_focal(const mxu_json_where *where, const cJSON *config,
                             mxu_output_loss *out) {
  const cJSON *alpha = mxu_json_get(config, "alpha");
  if (alpha && !cJSON_IsNumber(alpha) && !cJSON_IsNull(alpha))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "alpha must be one number (a weight per class is not "
                         "supported)");
  MXU_TRY(
      mxu_json_float(where, config, "alpha", MXU_JSON_OPTIONAL, &out->alpha));
  MXU_TRY(
      mxu_json_float(where, config, "gamma", MXU_JSON_OPTIONAL, &out->gamma));
  if (!(out->gamma >= 0 && isfinite(out->gamma) && isfinite(out->alpha)))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "gamma must be a number >= 0 and alpha a number");
  return mxu_json_bool(where, config, "apply_class_balancing",
                       &out->apply_class_balancing);
}

/* The sparse cross-entropy's ignore_class: an int, or null for none. */
static mxu_status read_ignore_class(const mxu_json_where *where,
                                    const cJSON *config, mxu_output_loss *out) {
  const cJSON *v = mxu_json_get(config, "ignore_class");
  out->has_ignore_class = v && !cJSON_IsNull(v);
  if (!out->has_ignore_class) return MXU_OK;
  if (out->loss != MXU_SPARSE_CATEGORICAL_CROSSENTROPY)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "ignore_class is an option of "
                         "SparseCategoricalCrossentropy only");
  return mxu_json_int(where, config, "ignore_class", MXU_JSON_REQUIRED, INT_MIN,
                      INT_MAX, &out->ignore_class);
}

static int is_focal(mxu_loss loss) {
  return loss == MXU_BINARY_FOCAL_CROSSENTROPY ||
         loss == MXU_CATEGORICAL_FOCAL_CROSSENTROPY;
}

static mxu_status read_loss_config(const mxu_json_where *where,
                                   const cJSON *config, mxu_output_loss *out) {
  if (!config || cJSON_IsNull(config)) return MXU_OK;
  if (!cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "config must be an object");
  MXU_TRY(mxu_json_bool(where, config, "from_logits", &out->from_logits));
  MXU_TRY(read_smoothing(where, config, out));
  if (is_focal(out->loss)) MXU_TRY(read_focal(where, config, out));
  MXU_TRY(mxu_json_float(where, config, "delta", MXU_JSON_OPTIONAL,
                         &out->huber_delta));
  if (!(out->huber_delta > 0))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "delta must be positive");
  const cJSON *reduction = mxu_json_get(config, "reduction");
  if (cJSON_IsString(reduction) && reduction->valuestring &&
      strcmp(reduction->valuestring, "auto") != 0 &&
      strcmp(reduction->valuestring, "sum_over_batch_size") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "reduction '%s' is not supported (only "
                         "'sum_over_batch_size')",
                         reduction->valuestring);
  MXU_TRY(read_ignore_class(where, config, out));
  int axis = -1;
  MXU_TRY(mxu_json_int(where, config, "axis", MXU_JSON_OPTIONAL, -1, 1 << 20,
                       &axis));
  if (axis != -1)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "axis %d is not supported (only -1)", axis);
  return mxu_json_check_keys(where, config, loss_keys, NULL);
}

/* One loss, by name or class, over out's loss settings (not its weight
 * or metric). */
static mxu_status read_one_loss(const mxu_json_where *where, const cJSON *v,
                                mxu_output_loss *out) {
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
  if (mxu_loss_from_name(name->valuestring, &out->loss) != MXU_OK) {
    char why[512]; /* the message buffer is about to be rewritten */
    snprintf(why, sizeof why, "%s", mxu_errmsg());
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "%s", why);
  }
  out->from_logits = 0;
  out->label_smoothing = 0.0f;
  out->huber_delta = 1.0f;
  out->gamma = 2.0f;
  out->alpha = 0.25f;
  out->apply_class_balancing = 0;
  out->has_ignore_class = 0;
  return cJSON_IsObject(v)
             ? read_loss_config(where, mxu_json_get(v, "config"), out)
             : MXU_OK;
}

/* A dict by output name rather than one loss or metric object. */
static int is_output_dict(const cJSON *v) {
  return cJSON_IsObject(v) && !mxu_json_get(v, "class_name");
}

/* One loss for every output, a list in output order, or a dict by output
 * name with an entry for each. */
static mxu_status read_losses(const mxu_json_where *where, const cJSON *v,
                              outputs_read *r) {
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  mxu_json_where at;
  if (cJSON_IsArray(v)) {
    MXU_TRY(check_output_list(where, r, v, "losses"));
    int k = 0;
    for (const cJSON *e = v->child; e; e = e->next, k++) {
      mxu_json_where_set(&at, "%s[%d]", where->text, k);
      MXU_TRY(read_one_loss(&at, e, &r->at[k]));
    }
    r->apart = 1;
    return MXU_OK;
  }
  if (is_output_dict(v)) {
    MXU_TRY(check_output_keys(where, r, v, "losses"));
    for (int k = 0; k < r->count; k++) {
      const char *name = output_name(r, k);
      const cJSON *e = mxu_json_get(v, name);
      if (!e) {
        char names[256];
        output_names_text(r, names, sizeof names);
        return mxu_json_fail(where, MXU_ERR_FORMAT,
                             "output '%s' has no loss; give each output "
                             "one (%s)",
                             name, names);
      }
      mxu_json_where_set(&at, "%s['%s']", where->text, name);
      MXU_TRY(read_one_loss(&at, e, &r->at[k]));
    }
    r->apart = 1;
    return MXU_OK;
  }
  MXU_TRY(read_one_loss(where, v, &r->at[0]));
  for (int k = 1; k < r->count; k++) {
    mxu_output_loss *o = &r->at[k];
    mxu_output_loss own = *o;
    *o = r->at[0];
    o->weight = own.weight;
    memcpy(o->metrics, own.metrics, sizeof o->metrics);
  }
  return MXU_OK;
}

/* ---- loss_weights --------------------------------------------------------
 */

static mxu_status read_weight(const mxu_json_where *where, const cJSON *v,
                              float *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
      !isfinite(v->valuedouble)) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s is not a loss weight (a number >= 0)", text);
  }
  *out = (float)v->valuedouble;
  return MXU_OK;
}

/* null, a list in output order, or a dict by output name (the outputs it
 * leaves out weigh 1). */
static mxu_status read_loss_weights(const mxu_json_where *where, const cJSON *v,
                                    outputs_read *r) {
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  mxu_json_where at;
  if (cJSON_IsArray(v)) {
    MXU_TRY(check_output_list(where, r, v, "loss weights"));
    int k = 0;
    for (const cJSON *e = v->child; e; e = e->next, k++) {
      mxu_json_where_set(&at, "%s[%d]", where->text, k);
      MXU_TRY(read_weight(&at, e, &r->at[k].weight));
    }
    return MXU_OK;
  }
  if (cJSON_IsObject(v)) {
    MXU_TRY(check_output_keys(where, r, v, "loss weights"));
    for (int k = 0; k < r->count; k++) {
      const char *name = output_name(r, k);
      const cJSON *e = mxu_json_get(v, name);
      r->at[k].weight = 1.0f;
      mxu_json_where_set(&at, "%s['%s']", where->text, name);
      if (e) MXU_TRY(read_weight(&at, e, &r->at[k].weight));
    }
    return MXU_OK;
  }
  char text[160];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s is not supported (null, a list in output order "
                       "or a dict by output name)",
                       text);
}

/* ---- metrics -------------------------------------------------------------
 */

/* The metric a name gives, pointing into loss.c's table (never into the
 * JSON, whose memory is gone once the read returns); NULL for none. */
static const char *metric_by_name(const cJSON *name) {
  if (!cJSON_IsString(name) || !name->valuestring) return NULL;
  return mxu_metric_name(name->valuestring);
}

/* A number option other than its one value mxu computes (absent or null:
 * Keras' default, which is that value). */
static mxu_status check_number(const mxu_json_where *where, const cJSON *config,
                               const char *cls, const char *key, double want) {
  const cJSON *v = mxu_json_get(config, key);
  if (!v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == want))
    return MXU_OK;
  char text[96];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s with %s %s is not supported: mxu computes Keras' "
                       "default %s=%g",
                       cls, key, text, key, want);
}

/* The confusion metrics' options as compile takes them, into text: one
 * threshold (a list of several, a value per threshold, is refused),
 * Precision's and Recall's top_k and class_id. */
static mxu_status read_counts_config(const mxu_json_where *where,
                                     const cJSON *config, const char *cls,
                                     int top_k, char *text, size_t size) {
  const cJSON *t = mxu_json_get(config, "thresholds");
  if (cJSON_IsArray(t) && cJSON_GetArraySize(t) == 1) t = t->child;
  if (t && !cJSON_IsNull(t) &&
      !(cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble <= 1)) {
    char shown[96];
    mxu_json_text(mxu_json_get(config, "thresholds"), shown, sizeof shown);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s with thresholds %s is not supported: mxu logs "
                         "one number a metric, of one threshold in [0, 1]",
                         cls, shown);
  }
  /* 0.5, the default, unless top_k makes the default -inf. */
  const cJSON *k = mxu_json_get(config, "top_k");
  size_t used = 0;
  if (cJSON_IsNumber(t) && (t->valuedouble != 0.5 || (k && !cJSON_IsNull(k))))
    used = (size_t)snprintf(text, size, "(threshold=%.9g", t->valuedouble);
  static const char *const keys[] = {"top_k", "class_id"};
  for (int i = 0; i < 2 && used < size; i++) {
    const cJSON *v = mxu_json_get(config, keys[i]);
    if (!v || cJSON_IsNull(v)) continue;
    if (!top_k)
      return mxu_json_fail(where, MXU_ERR_FORMAT, "%s takes no %s", cls,
                           keys[i]);
    int least = i == 0 ? 1 : 0; /* top_k >= 1, class_id >= 0 */
    if (!cJSON_IsNumber(v) || v->valuedouble < least ||
        v->valuedouble > 1 << 20 ||
        v->valuedouble != (double)(int)v->valuedouble)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "%s's %s must be an integer >= %d", cls, keys[i],
                           least);
    used += (size_t)snprintf(text + used, size - used, "%s%s=%d",
                             used ? "," : "(", keys[i], (int)v->valuedouble);
  }
  if (used && used < size) snprintf(text + used, size - used, ")");
  return MXU_OK;
}

/* AUC's options other than Keras' defaults, which mxu does not compute:
 * the area under the ROC or the PR curve ("auc" or "prc" into *metric) of
 * every value, at 200 thresholds, by interpolation, of probabilities or
 * (from_logits, into text) of logits. */
static mxu_status check_auc_config(const mxu_json_where *where,
                                   const cJSON *config, const char **metric,
                                   char *text, size_t size) {
  if (cJSON_IsTrue(mxu_json_get(config, "from_logits")))
    snprintf(text, size, "(from_logits=1)");
  static const struct {
    const char *key, *want; /* want: a string, "200", "false" or "null" */
  } defaults[] = {
      {"num_thresholds", "200"}, {"summation_method", "interpolation"},
      {"multi_label", "false"},  {"label_weights", "null"},
      {"thresholds", "null"},
  };
  const cJSON *curve = mxu_json_get(config, "curve");
  int pr = cJSON_IsString(curve) && strcmp(curve->valuestring, "PR") == 0;
  *metric = pr ? "prc" : "auc";
  if (curve && !cJSON_IsNull(curve) && !pr &&
      !(cJSON_IsString(curve) && strcmp(curve->valuestring, "ROC") == 0)) {
    char text[96];
    mxu_json_text(curve, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "AUC with curve %s is not supported (ROC or PR)",
                         text);
  }
  for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
    const cJSON *v = mxu_json_get(config, defaults[i].key);
    const char *want = defaults[i].want;
    int ok = !v || cJSON_IsNull(v) ||
             (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0) ||
             (cJSON_IsNumber(v) && strcmp(want, "200") == 0 &&
              v->valuedouble == 200) ||
             (cJSON_IsFalse(v) && strcmp(want, "false") == 0);
    if (ok) continue;
    char text[96];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "AUC with %s %s is not supported: mxu computes "
                         "Keras' default AUC() (the ROC or PR curve of every "
                         "value at 200 thresholds, interpolated), of "
                         "probabilities or from_logits",
                         defaults[i].key, text);
  }
  return MXU_OK;
}

/* The BinaryCrossentropy metric of probabilities, as Keras' default. */
static mxu_status check_bce_config(const mxu_json_where *where,
                                   const cJSON *config) {
  const cJSON *logits = mxu_json_get(config, "from_logits");
  const cJSON *smoothing = mxu_json_get(config, "label_smoothing");
  if (cJSON_IsTrue(logits))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "the BinaryCrossentropy metric with from_logits is "
                         "not supported (only of probabilities)");
  if (cJSON_IsNumber(smoothing) && smoothing->valuedouble != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "the BinaryCrossentropy metric with label_smoothing "
                         "%g is not supported (only 0)",
                         smoothing->valuedouble);
  return MXU_OK;
}

/* An F-score's options as compile takes them, "(average=macro,...)",
 * into text: Keras' average None (a score per class) is refused. */
static mxu_status read_f_score_config(const mxu_json_where *where,
                                      const cJSON *config, const char *cls,
                                      char *text, size_t size) {
  const cJSON *average = mxu_json_get(config, "average");
  if (!cJSON_IsString(average) || !average->valuestring)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s with average None logs a score per class; mxu "
                         "logs one number a metric: give average 'micro', "
                         "'macro' or 'weighted'",
                         cls);
  size_t used =
      (size_t)snprintf(text, size, "(average=%s", average->valuestring);
  static const char *const numbers[] = {"beta", "threshold"};
  for (int i = 0; i < 2 && used < size; i++) {
    const cJSON *v = mxu_json_get(config, numbers[i]);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v))
      return mxu_json_fail(where, MXU_ERR_FORMAT, "%s's %s must be a number",
                           cls, numbers[i]);
    used += (size_t)snprintf(text + used, size - used, ",%s=%.9g", numbers[i],
                             v->valuedouble);
  }
  if (used < size) snprintf(text + used, size - used, ")");
  return MXU_OK;
}

/* A MeanIoU's options as compile takes them, "(num_classes=N,
 * ignore_class=C)"; MeanIoU(sparse_y_true=False) is OneHotMeanIoU, and
 * sparse_y_pred=True (the output taken as class ids) is refused. */
static mxu_status read_iou_config(const mxu_json_where *where,
                                  const cJSON *config, const char *cls,
                                  const char **metric, char *text,
                                  size_t size) {
  int classes = 0, ignore = 0, sparse_true = 1, sparse_pred = 0;
  MXU_TRY(mxu_json_int(where, config, "num_classes", MXU_JSON_REQUIRED, 1,
                       1 << 20, &classes));
  MXU_TRY(mxu_json_bool(where, config, "sparse_y_true", &sparse_true));
  MXU_TRY(mxu_json_bool(where, config, "sparse_y_pred", &sparse_pred));
  MXU_TRY(check_number(where, config, cls, "axis", -1));
  if (sparse_pred)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s with sparse_y_pred true takes the output as "
                         "class ids, but an output is a score per class: give "
                         "sparse_y_pred=False (its argmax)",
                         cls);
  if (!sparse_true) *metric = "one_hot_mean_iou";
  const cJSON *v = mxu_json_get(config, "ignore_class");
  size_t used = (size_t)snprintf(text, size, "(num_classes=%d", classes);
  if (v && !cJSON_IsNull(v)) {
    MXU_TRY(mxu_json_int(where, config, "ignore_class", MXU_JSON_REQUIRED,
                         INT_MIN, INT_MAX, &ignore));
    used += (size_t)snprintf(text + used, used < size ? size - used : 0,
                             ",ignore_class=%d", ignore);
  }
  if (used < size) snprintf(text + used, size - used, ")");
  return MXU_OK;
}

/* BinaryIoU's options as compile takes them, "(threshold=T,class_id=C)":
 * target_class_ids [0, 1] (both, the default) or one of them. */
static mxu_status read_binary_iou_config(const mxu_json_where *where,
                                         const cJSON *config, char *text,
                                         size_t size) {
  const cJSON *ids = mxu_json_get(config, "target_class_ids");
  int seen[2] = {0, 0}, count = 0;
  for (const cJSON *id = cJSON_IsArray(ids) ? ids->child : NULL; id;
       id = id->next, count++)
    if (cJSON_IsNumber(id) && (id->valuedouble == 0 || id->valuedouble == 1))
      seen[(int)id->valuedouble]++;
  int both = !ids || cJSON_IsNull(ids) || (count == 2 && seen[0] && seen[1]);
  if (!both && !(count == 1 && seen[0] + seen[1] == 1)) {
    char shown[96];
    mxu_json_text(ids, shown, sizeof shown);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "BinaryIoU's target_class_ids %s: expected [0, 1], "
                         "[0] or [1]",
                         shown);
  }
  double threshold = 0.5;
  const cJSON *t = mxu_json_get(config, "threshold");
  if (t && !cJSON_IsNull(t) && !cJSON_IsNumber(t))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "BinaryIoU's threshold must be a number");
  if (cJSON_IsNumber(t)) threshold = t->valuedouble;
  size_t used = (size_t)snprintf(text, size, "(threshold=%.9g", threshold);
  if (!both && used < size)
    used += (size_t)snprintf(text + used, size - used, ",class_id=%d",
                             seen[1] ? 1 : 0);
  if (used < size) snprintf(text + used, size - used, ")");
  return MXU_OK;
}

/* A metric object's name as Keras logs it: its config's name, less the
 * output's name tf.keras 2 writes before it in a model of several
 * outputs ("flag_roc" for output flag's "roc"); NULL for none. */
static const char *object_name(const cJSON *config, const char *prefix) {
  const cJSON *name = mxu_json_get(config, "name");
  if (!cJSON_IsString(name) || !name->valuestring || !*name->valuestring)
    return NULL;
  size_t n = prefix ? strlen(prefix) : 0;
  if (n && strncmp(name->valuestring, prefix, n) == 0 &&
      name->valuestring[n] == '_' && name->valuestring[n + 1])
    return name->valuestring + n + 1;
  return name->valuestring;
}

/* A metric class's options: other than Keras' defaults refused, or the
 * F-scores' into text. */
static mxu_status check_options(const mxu_json_where *where,
                                const cJSON *config, const char *cls,
                                options options, const char **metric,
                                char *text, size_t size) {
  switch (options) {
  case OPTIONS_F_SCORE:
    return read_f_score_config(where, config, cls, text, size);
  case OPTIONS_TOP_K: return check_number(where, config, cls, "k", MXU_TOP_K);
  case OPTIONS_THRESHOLD: { /* BinaryAccuracy's, any (0 for logits) */
    const cJSON *t = mxu_json_get(config, "threshold");
    if (cJSON_IsNumber(t) && t->valuedouble != 0.5)
      snprintf(text, size, "(threshold=%.9g)", t->valuedouble);
    else if (t && !cJSON_IsNull(t) && !cJSON_IsNumber(t))
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "%s's threshold must be a number", cls);
    return MXU_OK;
  }
  case OPTIONS_COUNTS:
    return read_counts_config(where, config, cls,
                              !strcmp(*metric, "precision") ||
                                  !strcmp(*metric, "recall"),
                              text, size);
  case OPTIONS_AUC: /* its curve, not its name ("auc" for PR too) */
    return check_auc_config(where, config, metric, text, size);
  case OPTIONS_BCE: return check_bce_config(where, config);
  case OPTIONS_AXIS: return check_number(where, config, cls, "axis", -1);
  case OPTIONS_IOU:
    return read_iou_config(where, config, cls, metric, text, size);
  case OPTIONS_BINARY_IOU:
    return read_binary_iou_config(where, config, text, size);
  case OPTIONS_NONE: return MXU_OK;
  }
  return MXU_OK;
}

/* "accuracy", or a metric object such as {"class_name": "AUC", "config":
 * {"name": "roc", ...}}: into *metric what it computes (NULL when mxu
 * does not) and into options its options' text (empty for none), into
 * *name what Keras logs it as (NULL: *metric). */
static mxu_status metric_of(const mxu_json_where *where, const cJSON *v,
                            const char *prefix, const char **metric,
                            char *options, size_t size, const char **name) {
  *name = NULL;
  options[0] = '\0';
  if (!cJSON_IsObject(v)) {
    *metric = metric_by_name(v);
    return MXU_OK;
  }
  const cJSON *config = mxu_json_get(v, "config");
  const cJSON *class_name = mxu_json_get(v, "class_name");
  *name = object_name(config, prefix);
  for (size_t i = 0; i < sizeof metric_classes / sizeof *metric_classes; i++) {
    if (!cJSON_IsString(class_name) || !class_name->valuestring ||
        strcmp(class_name->valuestring, metric_classes[i].class_name) != 0)
      continue;
    *metric = metric_classes[i].metric;
    return check_options(where, config, class_name->valuestring,
                         metric_classes[i].options, metric, options, size);
  }
  /* tf.keras 2.x h5 files wrap the function: MeanMetricWrapper, fn. */
  *metric = metric_by_name(mxu_json_get(config, "fn"));
  return MXU_OK;
}

static int same_logged(const char *a, const char *b) {
  size_t n = mxu_metric_logged_length(a);
  return n == mxu_metric_logged_length(b) && strncmp(a, b, n) == 0;
}

/* One metric appended to an output's list (k -1: every output's), as
 * compile takes it: the metric's name, or "NAME=METRIC" for one Keras
 * logs under a name of its own, kept by the model. */
static mxu_status read_one_metric(const mxu_json_where *where, const cJSON *v,
                                  outputs_read *r, int k, const char **list) {
  const char *prefix =
      r->keras2 && k >= 0 && r->count > 1 ? output_name(r, k) : NULL;
  const char *found, *name;
  char options[96];
  MXU_TRY(metric_of(where, v, prefix, &found, options, sizeof options, &name));
  char text[160];
  mxu_json_text(v, text, sizeof text);
  if (!found)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s is not supported (supported: %s)", text,
                         mxu_metric_names());
  if (!options[0] &&
      (!strcmp(found, "f1_score") || !strcmp(found, "fbeta_score")))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s is Keras' F1Score(), whose average None logs a "
                         "score per class; mxu logs one number a metric: "
                         "give F1Score(average='macro') (or 'micro', "
                         "'weighted')",
                         text);
  if (name && !options[0] && mxu_metric_says(name, found)) {
    found = mxu_metric_name(name);
  } else if ((name && strcmp(name, found) != 0) || options[0]) {
    if (name && strlen(name) >= MXU_METRIC_LOG_SIZE)
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "%s: mxu logs names of at most %d characters", text,
                           MXU_METRIC_LOG_SIZE - 1);
    int renamed = name && strcmp(name, found) != 0;
    char spec[2 * MXU_METRIC_LOG_SIZE + sizeof options];
    snprintf(spec, sizeof spec, "%s%s%s%s", renamed ? name : "",
             renamed ? "=" : "", found, options);
    found = r->model ? mxu_model_keep(r->model, spec) : NULL;
    if (!found) return mxu_json_fail(where, MXU_ERR_NOMEM, "out of memory");
  }
  int n = 0;
  while (n < MXU_MAX_METRICS && list[n]) {
    if (same_logged(list[n], found))
      return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                           "%s is listed twice; Keras logs one value by each "
                           "name",
                           text);
    n++;
  }
  if (n == MXU_MAX_METRICS)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s: mxu computes at most %d metrics%s", text,
                         MXU_MAX_METRICS, k >= 0 ? " per output" : "");
  list[n] = found;
  return MXU_OK;
}

/* A list of metrics, in tf.keras 2.x h5 files nested one level deeper
 * (null: an output without), replacing *list when it names any. */
static mxu_status read_metric_list(const mxu_json_where *where, const cJSON *v,
                                   outputs_read *r, int k, const char **list) {
  const char *read[MXU_MAX_METRICS] = {0};
  for (const cJSON *m = v->child; m; m = m->next) {
    if (!cJSON_IsArray(m)) {
      if (!cJSON_IsNull(m)) MXU_TRY(read_one_metric(where, m, r, k, read));
      continue;
    }
    for (const cJSON *inner = m->child; inner; inner = inner->next)
      if (!cJSON_IsNull(inner))
        MXU_TRY(read_one_metric(where, inner, r, k, read));
  }
  if (read[0]) memcpy(list, read, sizeof read);
  return MXU_OK;
}

/* An output's entry in a dict or a list of lists: a metric, a list, or
 * null (none). */
static mxu_status read_output_metric(const mxu_json_where *where,
                                     const cJSON *v, outputs_read *r, int k,
                                     const char **list) {
  memset(list, 0, MXU_MAX_METRICS * sizeof *list);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (cJSON_IsArray(v)) return read_metric_list(where, v, r, k, list);
  return read_one_metric(where, v, r, k, list);
}

/* Output k's metrics, or its weighted metrics. */
static const char **list_of(outputs_read *r, int k, int weighted) {
  return weighted ? r->at[k].weighted_metrics : r->at[k].metrics;
}

/* Several outputs' metrics (or weighted metrics): a list for every
 * output, a list of lists in output order, or a dict by output name
 * (outputs left out: none). */
static mxu_status read_output_metrics(const mxu_json_where *where,
                                      const cJSON *v, outputs_read *r,
                                      int weighted) {
  mxu_json_where at;
  if (is_output_dict(v)) {
    MXU_TRY(check_output_keys(where, r, v, "metrics"));
    for (int k = 0; k < r->count; k++) {
      const char *name = output_name(r, k);
      mxu_json_where_set(&at, "%s['%s']", where->text, name);
      MXU_TRY(read_output_metric(&at, mxu_json_get(v, name), r, k,
                                 list_of(r, k, weighted)));
      if (!list_of(r, k, weighted)[0]) r->apart = 1;
    }
    return MXU_OK;
  }
  int lists = 0, others = 0;
  for (const cJSON *m = v->child; m; m = m->next)
    cJSON_IsArray(m) || cJSON_IsNull(m) ? lists++ : others++;
  if (lists && others)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "mixes metrics and lists of metrics; give one list "
                         "for every output, a list of lists in output order "
                         "or a dict by output name");
  if (!lists) {
    const char *every[MXU_MAX_METRICS] = {0};
    MXU_TRY(read_metric_list(where, v, r, -1, every));
    for (int k = 0; every[0] && k < r->count; k++)
      memcpy(list_of(r, k, weighted), every, sizeof every);
    return MXU_OK;
  }
  MXU_TRY(check_output_list(where, r, v, "lists of metrics"));
  int k = 0;
  for (const cJSON *m = v->child; m; m = m->next, k++) {
    mxu_json_where_set(&at, "%s[%d]", where->text, k);
    MXU_TRY(read_output_metric(&at, m, r, k, list_of(r, k, weighted)));
    if (!list_of(r, k, weighted)[0]) r->apart = 1;
  }
  return MXU_OK;
}

static mxu_status read_metrics(const mxu_json_where *where, const cJSON *v,
                               outputs_read *r, int weighted) {
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (r->count > 1 || is_output_dict(v)) {
    if (cJSON_IsArray(v) || is_output_dict(v))
      return read_output_metrics(where, v, r, weighted);
  } else if (cJSON_IsArray(v)) {
    return read_metric_list(where, v, r, 0, list_of(r, 0, weighted));
  }
  char text[160];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s is not supported (only a list, or a dict by "
                       "output name)",
                       text);
}

/* ---- compile_config ------------------------------------------------------
 */

static int same_loss(const mxu_output_loss *a, const mxu_output_loss *b) {
  return a->loss == b->loss && a->from_logits == b->from_logits &&
         a->label_smoothing == b->label_smoothing &&
         a->huber_delta == b->huber_delta && a->gamma == b->gamma &&
         a->alpha == b->alpha &&
         a->apply_class_balancing == b->apply_class_balancing &&
         a->has_ignore_class == b->has_ignore_class &&
         (!a->has_ignore_class || a->ignore_class == b->ignore_class);
}

static int same_metrics(const char *const *a, const char *const *b) {
  for (int m = 0; m < MXU_MAX_METRICS; m++)
    if (a[m] != b[m] && (!a[m] || !b[m] || strcmp(a[m], b[m]) != 0)) return 0;
  return 1;
}

/* Each output's settings start from the caller's. */
static void outputs_start(outputs_read *r, mxu_model *model,
                          const mxu_compile_config *compile) {
  memset(r, 0, sizeof *r);
  r->model = model;
  r->count = model ? mxu_model_output_count(model) : 1;
  if (r->count < 1) r->count = 1;
  for (int k = 0; k < r->count && k < MXU_MAX_OUTPUTS; k++) {
    r->at[k] = mxu_output_spec(compile, k);
    if (compile->output_count == r->count) continue;
    /* The caller's metrics as given (none given: its default stays). */
    r->at[k].weight = 1.0f;
    memcpy(r->at[k].metrics, compile->metrics, sizeof compile->metrics);
    memcpy(r->at[k].weighted_metrics, compile->weighted_metrics,
           sizeof compile->weighted_metrics);
  }
}

/* One loss for all outputs where that says it all (always for one output
 * of weight 1); the outputs' own otherwise. */
static void outputs_finish(const outputs_read *r, mxu_compile_config *c) {
  const mxu_output_loss *first = &r->at[0];
  int apart = r->apart;
  for (int k = 0; k < r->count; k++)
    apart |= r->at[k].weight != 1.0f || !same_loss(&r->at[k], first) ||
             !same_metrics(r->at[k].metrics, first->metrics) ||
             !same_metrics(r->at[k].weighted_metrics, first->weighted_metrics);
  if (r->count == 1) apart = first->weight != 1.0f;
  c->loss = first->loss;
  c->from_logits = first->from_logits;
  c->label_smoothing = first->label_smoothing;
  c->huber_delta = first->huber_delta;
  c->gamma = first->gamma;
  c->alpha = first->alpha;
  c->apply_class_balancing = first->apply_class_balancing;
  c->has_ignore_class = first->has_ignore_class;
  c->ignore_class = first->ignore_class;
  c->output_count = apart ? r->count : 0;
  if (!apart) {
    memcpy(c->metrics, first->metrics, sizeof c->metrics);
    memcpy(c->weighted_metrics, first->weighted_metrics,
           sizeof c->weighted_metrics);
  }
  for (int k = 0; k < c->output_count; k++) c->outputs[k] = r->at[k];
}

static mxu_status read_compile_fields(const char *source, const char *key,
                                      const cJSON *c, mxu_model *model,
                                      mxu_compile_config *compile) {
  mxu_json_where where;
  mxu_json_where_set(&where, "%s: %s", source, key);
  if (!cJSON_IsObject(c))
    return mxu_json_fail(&where, MXU_ERR_FORMAT, "must be an object");
  MXU_TRY(mxu_json_check_keys(&where, c, compile_keys, NULL));
  outputs_read r;
  outputs_start(&r, model, compile);
  r.keras2 = strcmp(key, "training_config") == 0;
  if (r.count > MXU_MAX_OUTPUTS)
    return mxu_json_fail(&where, MXU_ERR_UNSUPPORTED,
                         "the model has %d outputs; mxu compiles at most %d",
                         r.count, MXU_MAX_OUTPUTS);
  const cJSON *optimizer = mxu_json_get(c, "optimizer");
  if (!optimizer) optimizer = mxu_json_get(c, "optimizer_config");
  mxu_json_where_set(&where, "%s: %s: optimizer", source, key);
  if (optimizer && !cJSON_IsNull(optimizer))
    MXU_TRY(read_optimizer(&where, optimizer, &compile->optimizer));
  mxu_json_where_set(&where, "%s: %s: loss", source, key);
  MXU_TRY(read_losses(&where, mxu_json_get(c, "loss"), &r));
  mxu_json_where_set(&where, "%s: %s: loss_weights", source, key);
  MXU_TRY(read_loss_weights(&where, mxu_json_get(c, "loss_weights"), &r));
  mxu_json_where_set(&where, "%s: %s", source, key);
  int steps = 1;
  MXU_TRY(mxu_json_int(&where, c, "steps_per_execution", MXU_JSON_OPTIONAL, 1,
                       1 << 30, &steps));
  compile->steps_per_execution = steps;
  mxu_json_where_set(&where, "%s: %s: metrics", source, key);
  MXU_TRY(read_metrics(&where, mxu_json_get(c, "metrics"), &r, 0));
  mxu_json_where_set(&where, "%s: %s: weighted_metrics", source, key);
  MXU_TRY(read_metrics(&where, mxu_json_get(c, "weighted_metrics"), &r, 1));
  outputs_finish(&r, compile);
  return MXU_OK;
}

mxu_status mxu_json_read_compile(const char *source, const cJSON *root,
                                 mxu_model *model, mxu_compile_config *compile,
                                 int *found) {
  const char *key = "compile_config";
  const cJSON *c = mxu_json_get(root, key);
  if (!c || cJSON_IsNull(c)) {
    key = "training_config";
    c = mxu_json_get(root, key);
  }
  *found = 0;
  if (!c || cJSON_IsNull(c)) return MXU_OK;
  MXU_TRY(read_compile_fields(source, key, c, model, compile));
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
static cJSON *loss_value(mxu_json_out *out, const mxu_output_loss *o) {
  int huber = o->loss == MXU_HUBER && o->huber_delta != 1.0f;
  int focal = is_focal(o->loss) && (o->gamma != 2.0f || o->alpha != 0.25f ||
                                    o->apply_class_balancing);
  if (!o->from_logits && o->label_smoothing == 0.0f && !huber && !focal &&
      !o->has_ignore_class)
    return cJSON_CreateString(mxu_loss_name(o->loss));
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", mxu_loss_name(o->loss));
  mxu_json_put_string(out, config, "reduction",
                      out->keras3 ? "sum_over_batch_size" : "auto");
  if (huber) {
    mxu_json_put_float(out, config, "delta", o->huber_delta);
  } else {
    mxu_json_put_bool(out, config, "from_logits", o->from_logits);
    if (o->label_smoothing != 0.0f)
      mxu_json_put_float(out, config, "label_smoothing", o->label_smoothing);
  }
  if (o->has_ignore_class)
    mxu_json_put_number(out, config, "ignore_class", o->ignore_class);
  if (focal) {
    mxu_json_put_float(out, config, "gamma", o->gamma);
    mxu_json_put_float(out, config, "alpha", o->alpha);
    if (o->loss == MXU_BINARY_FOCAL_CROSSENTROPY)
      mxu_json_put_bool(out, config, "apply_class_balancing",
                        o->apply_class_balancing);
  }
  return mxu_json_object(out, "keras.losses", mxu_loss_class_name(o->loss),
                         config);
}

/* An F-score's class and settings (Keras' average, beta, threshold). */
static const char *f_score_config(mxu_json_out *out, cJSON *config,
                                  const mxu_metric_options *o) {
  static const char *const averages[] = {"micro", "macro", "weighted"};
  mxu_json_put_string(out, config, "average",
                      averages[o->average - MXU_AVERAGE_MICRO]);
  /* Keras takes Python floats only: 2.0, not 2. */
  if (o->beta != 1.0) mxu_json_put_float(out, config, "beta", (float)o->beta);
  if (o->has_threshold)
    mxu_json_put_float(out, config, "threshold", (float)o->threshold);
  else
    mxu_json_put_null(out, config, "threshold");
  return o->beta != 1.0 ? "FBetaScore" : "F1Score";
}

/* A confusion metric's threshold: null (Keras' default), or the one. */
static void put_thresholds(mxu_json_out *out, cJSON *config,
                           const mxu_metric_options *o) {
  if (o->has_threshold)
    mxu_json_put_float(out, config, "thresholds", (float)o->threshold);
  else
    mxu_json_put_null(out, config, "thresholds");
}

cJSON *mxu_json_metric_class(mxu_json_out *out, const char *name,
                             mxu_metric_kind kind,
                             const mxu_metric_options *options, int named) {
  static const struct {
    const char *name;
    int function; /* a string unless named */
  } classes[] = {
      [MXU_METRIC_SPARSE_ACCURACY] = {"SparseCategoricalAccuracy", 1},
      [MXU_METRIC_CATEGORICAL_ACCURACY] = {"CategoricalAccuracy", 1},
      [MXU_METRIC_BINARY_ACCURACY] = {"BinaryAccuracy", 1},
      [MXU_METRIC_TOP_K] = {"TopKCategoricalAccuracy", 1},
      [MXU_METRIC_SPARSE_TOP_K] = {"SparseTopKCategoricalAccuracy", 1},
      [MXU_METRIC_MAE] = {"MeanAbsoluteError", 1},
      [MXU_METRIC_MSE] = {"MeanSquaredError", 1},
      [MXU_METRIC_RMSE] = {"RootMeanSquaredError", 0},
      [MXU_METRIC_PRECISION] = {"Precision", 0},
      [MXU_METRIC_RECALL] = {"Recall", 0},
      [MXU_METRIC_AUC] = {"AUC", 0},
      [MXU_METRIC_AUC_PR] = {"AUC", 0},
      [MXU_METRIC_TRUE_POSITIVES] = {"TruePositives", 0},
      [MXU_METRIC_FALSE_POSITIVES] = {"FalsePositives", 0},
      [MXU_METRIC_TRUE_NEGATIVES] = {"TrueNegatives", 0},
      [MXU_METRIC_FALSE_NEGATIVES] = {"FalseNegatives", 0},
      [MXU_METRIC_BINARY_CROSSENTROPY] = {"BinaryCrossentropy", 1},
      [MXU_METRIC_F_SCORE] = {"F1Score", 0},
      [MXU_METRIC_MAPE] = {"MeanAbsolutePercentageError", 1},
      [MXU_METRIC_MSLE] = {"MeanSquaredLogarithmicError", 1},
      /* Keras 3 takes no "logcosh" by name */
      [MXU_METRIC_LOGCOSH] = {"LogCoshError", 0},
      [MXU_METRIC_POISSON] = {"Poisson", 1},
      [MXU_METRIC_HINGE] = {"Hinge", 1},
      [MXU_METRIC_SQUARED_HINGE] = {"SquaredHinge", 1},
      [MXU_METRIC_CATEGORICAL_HINGE] = {"CategoricalHinge", 1},
      [MXU_METRIC_COSINE_SIMILARITY] = {"CosineSimilarity", 1},
      [MXU_METRIC_MEAN_IOU] = {"MeanIoU", 0},
      [MXU_METRIC_ONE_HOT_MEAN_IOU] = {"OneHotMeanIoU", 0},
      [MXU_METRIC_BINARY_IOU] = {"BinaryIoU", 0},
  };
  const char *cls = classes[kind].name;
  if (classes[kind].function && !named) return NULL;
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", name);
  mxu_json_put_string(out, config, "dtype", "float32");
  switch (kind) {
  case MXU_METRIC_BINARY_ACCURACY:
    mxu_json_put_float(out, config, "threshold",
                       options->has_threshold ? (float)options->threshold
                                              : 0.5f);
    break;
  case MXU_METRIC_TOP_K:
  case MXU_METRIC_SPARSE_TOP_K:
    mxu_json_put_number(out, config, "k", MXU_TOP_K);
    break;
  case MXU_METRIC_BINARY_CROSSENTROPY:
    mxu_json_put_bool(out, config, "from_logits", 0);
    mxu_json_put_number(out, config, "label_smoothing", 0);
    break;
  case MXU_METRIC_AUC:
  case MXU_METRIC_AUC_PR:
    mxu_json_put_number(out, config, "num_thresholds", MXU_AUC_THRESHOLDS);
    mxu_json_put_string(out, config, "curve",
                        kind == MXU_METRIC_AUC_PR ? "PR" : "ROC");
    mxu_json_put_string(out, config, "summation_method", "interpolation");
    mxu_json_put_bool(out, config, "multi_label", 0);
    mxu_json_put_null(out, config, "num_labels");
    mxu_json_put_null(out, config, "label_weights");
    mxu_json_put_bool(out, config, "from_logits", options->from_logits);
    break;
  case MXU_METRIC_PRECISION:
  case MXU_METRIC_RECALL:
    put_thresholds(out, config, options);
    if (options->top_k)
      mxu_json_put_number(out, config, "top_k", options->top_k);
    else
      mxu_json_put_null(out, config, "top_k");
    if (options->has_class_id)
      mxu_json_put_number(out, config, "class_id", options->class_id);
    else
      mxu_json_put_null(out, config, "class_id");
    break;
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES: put_thresholds(out, config, options); break;
  case MXU_METRIC_F_SCORE: cls = f_score_config(out, config, options); break;
  case MXU_METRIC_MEAN_IOU:
  case MXU_METRIC_ONE_HOT_MEAN_IOU:
    mxu_json_put_number(out, config, "num_classes", options->num_classes);
    if (options->has_ignore_class)
      mxu_json_put_number(out, config, "ignore_class", options->ignore_class);
    else
      mxu_json_put_null(out, config, "ignore_class");
    if (kind == MXU_METRIC_MEAN_IOU)
      mxu_json_put_bool(out, config, "sparse_y_true", 1);
    mxu_json_put_bool(out, config, "sparse_y_pred", 0);
    mxu_json_put_number(out, config, "axis", -1);
    break;
  case MXU_METRIC_BINARY_IOU: {
    cJSON *ids = cJSON_CreateArray();
    for (int c = 0; c < 2; c++)
      if (!options->has_class_id || options->class_id == c)
        mxu_json_append(out, ids, cJSON_CreateNumber(c));
    mxu_json_put(out, config, "target_class_ids", ids);
    mxu_json_put_float(out, config, "threshold",
                       options->has_threshold ? (float)options->threshold
                                              : 0.5f);
    break;
  }
  default: break;
  }
  return mxu_json_object(out, "keras.metrics", cls, config);
}

/* Head k's metrics as Keras 3's compile_config lists them. */
static cJSON *head_metrics(mxu_json_out *out, const mxu_model *model, int k,
                           int weighted) {
  const mxu_head *h = &model->heads[k];
  cJSON *list = cJSON_CreateArray();
  for (int m = 0; m < h->metric_count; m++) {
    if (h->metric_weighted[m] != weighted) continue;
    /* Its own name: a weighted one's without the weighted_ of the logs. */
    char name[MXU_METRIC_LOG_SIZE];
    mxu_metric_kind kind;
    mxu_metric_parse(h->metric_spec[m], h->spec.loss, 0, name, &kind, NULL);
    /* "accuracy" as given (Keras resolves it by the loss again) */
    int named = strcmp(name, h->metric_spec[m]) != 0;
    cJSON *object = mxu_json_metric_class(out, name, h->metric_kind[m],
                                          &h->metric_options[m], named);
    mxu_json_append(out, list, object ? object : cJSON_CreateString(name));
  }
  return list;
}

/* How many of head k's metrics are (weighted) or are not. */
static int metrics_of_kind(const mxu_model *model, int k, int weighted) {
  int n = 0;
  for (int m = 0; m < model->heads[k].metric_count; m++)
    n += model->heads[k].metric_weighted[m] == weighted;
  return n;
}

/* Keras' dicts by output name, as both write them for loss, loss_weights
 * and metrics ({"cls": ["accuracy"], ...}; an output without a metric is
 * left out). */
static void put_output_settings(mxu_json_out *out, cJSON *config,
                                const mxu_model *model) {
  const mxu_compile_config *c = &model->compile;
  int count = mxu_model_output_count(model);
  cJSON *losses = cJSON_CreateObject(), *weights = cJSON_CreateObject();
  cJSON *metrics[2] = {cJSON_CreateObject(), cJSON_CreateObject()};
  int weighted = 0;
  for (int k = 0; k < count; k++) {
    const char *name = mxu_json_output_name(model, k);
    mxu_output_loss o = mxu_output_spec(c, k);
    if (c->output_count > 0) {
      mxu_json_put(out, losses, name, loss_value(out, &o));
      mxu_json_put_float(out, weights, name, o.weight);
    }
    for (int w = 0; w < 2; w++)
      if (metrics_of_kind(model, k, w))
        mxu_json_put(out, metrics[w], name, head_metrics(out, model, k, w));
    weighted += metrics_of_kind(model, k, 1);
  }
  if (c->output_count > 0) {
    mxu_json_put(out, config, "loss", losses);
    mxu_json_put(out, config, "loss_weights", weights);
  } else {
    cJSON_Delete(losses);
    cJSON_Delete(weights);
    mxu_output_loss one = mxu_output_spec(c, 0);
    mxu_json_put(out, config, "loss", loss_value(out, &one));
    mxu_json_put_null(out, config, "loss_weights");
  }
  mxu_json_put(out, config, "metrics", metrics[0]);
  if (weighted) {
    mxu_json_put(out, config, "weighted_metrics", metrics[1]);
  } else {
    cJSON_Delete(metrics[1]);
    mxu_json_put_null(out, config, "weighted_metrics");
  }
}

cJSON *mxu_json_compile_config(mxu_json_out *out, const mxu_model *model) {
  const mxu_compile_config *c = &model->compile;
  cJSON *config = cJSON_CreateObject();
  mxu_json_put(out, config, "optimizer", optimizer_object(out, &c->optimizer));
  if (mxu_json_per_output(model)) {
    put_output_settings(out, config, model);
  } else {
    mxu_output_loss one = mxu_output_spec(c, 0);
    mxu_json_put(out, config, "loss", loss_value(out, &one));
    mxu_json_put_null(out, config, "loss_weights");
    mxu_json_put(out, config, "metrics", head_metrics(out, model, 0, 0));
    if (metrics_of_kind(model, 0, 1))
      mxu_json_put(out, config, "weighted_metrics",
                   head_metrics(out, model, 0, 1));
    else
      mxu_json_put_null(out, config, "weighted_metrics");
  }
  mxu_json_put_bool(out, config, "run_eagerly", 0);
  mxu_json_put_number(out, config, "steps_per_execution",
                      c->steps_per_execution > 0 ? c->steps_per_execution : 1);
  mxu_json_put_bool(out, config, "jit_compile", 0);
  return config;
}
