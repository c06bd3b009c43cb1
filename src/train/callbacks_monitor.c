/* callbacks_monitor.c — the callbacks that watch one logged quantity epoch
 * by epoch, as tf.keras 2.x has them: EarlyStopping, ReduceLROnPlateau, and
 * ModelCheckpoint with its Python str.format file names. */
#include "strategy/strategy.h"
#include "train/callbacks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the monitors share ------------------------------------------- */

static double worst_value(const char *monitor, mxu_monitor_mode mode) {
  return mxu_monitor_is_max(monitor, mode) ? -INFINITY : INFINITY;
}

/* Whether the logs hold the key at all, as a Keras logs dict would: val_*
 * only when the epoch was validated; the rate and "accuracy"'s aliases
 * too, which mxu_logs_value names. */
static int logs_have(const mxu_logs *logs, const char *name) {
  char keys[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  int n = mxu_logs_keys(logs, keys);
  for (int i = 0; i < n; i++)
    if (strcmp(keys[i], name) == 0) return 1;
  if (strncmp(name, "val_", 4) == 0 && isnan(logs->val_loss)) return 0;
  return !isnan(mxu_logs_value(logs, name));
}

/* The keys these logs hold, comma-separated as Keras lists them. */
static void logs_keys(const mxu_logs *logs, char *out, size_t size) {
  char keys[MXU_MAX_LOG_KEYS][MXU_LOG_KEY_SIZE];
  int n = mxu_logs_keys(logs, keys);
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s,", keys[i]);
  if (used < size) snprintf(out + used, size - used, "lr");
}

/* Keras logs a warning and skips the epoch when the monitored key is
 * missing (not validated this epoch, or misspelt); mxu writes it where
 * fit prints. */
static void warn_missing(const char *what, const char *monitor,
                         const mxu_logs *logs) {
  if (!logs->out) return;
  char keys[MXU_MAX_LOG_KEYS * MXU_LOG_KEY_SIZE];
  logs_keys(logs, keys, sizeof keys);
  fprintf(logs->out,
          "mxu: warning: %s is conditioned on metric `%s` which is not "
          "available. Available metrics are: %s\n",
          what, monitor, keys);
}

/* A copy of the monitor's name, "val_loss" when none is given. */
static mxu_status copy_monitor(const char *who, const char *monitor,
                               mxu_monitor_mode mode, char **out) {
  if (mode != MXU_MODE_AUTO && mode != MXU_MODE_MIN && mode != MXU_MODE_MAX)
    return mxu_fail(MXU_ERR_ARG, "%s: mode %d is not auto, min or max", who,
                    (int)mode);
  const char *name = monitor ? monitor : "val_loss";
  if (!*name) return mxu_fail(MXU_ERR_ARG, "%s: the monitor is empty", who);
  *out = malloc(strlen(name) + 1);
  if (!*out) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
  strcpy(*out, name);
  return MXU_OK;
}

/* ---- EarlyStopping ----------------------------------------------------- */

typedef struct early_stopping {
  mxu_early_stopping_config config;
  char *monitor;
  mxu_monitor_mode mode; /* config's, resolved for the model at train begin */
  int wait, stopped_epoch, best_epoch;
  double best;
  float *best_weights; /* restore_best_weights: the best epoch's */
} early_stopping;

mxu_early_stopping_config mxu_early_stopping_defaults(void) {
  mxu_early_stopping_config config = {0};
  config.monitor = "val_loss";
  config.mode = MXU_MODE_AUTO;
  return config;
}

static mxu_status early_train_begin(void *self, mxu_model *model) {
  early_stopping *es = self;
  es->wait = es->stopped_epoch = es->best_epoch = 0;
  es->mode = mxu_monitor_mode_for(model, es->monitor, es->config.mode);
  es->best = worst_value(es->monitor, es->mode);
  free(es->best_weights);
  es->best_weights = NULL;
  return MXU_OK;
}

static mxu_status keep_weights(early_stopping *es, const mxu_model *model) {
  free(es->best_weights);
  es->best_weights = NULL;
  return mxu_model_snapshot(model, &es->best_weights);
}

/* tf.keras 2.x: wait counts epochs since the last improvement; training
 * stops once it reaches patience, never after the first epoch, and the
 * best weights come back only then (Keras 3 also restores them when
 * training ends without stopping early; mxu follows tf.keras 2.x). */
static mxu_status early_epoch_end(void *self, mxu_model *model,
                                  const mxu_logs *logs) {
  early_stopping *es = self;
  if (!logs_have(logs, es->monitor)) {
    warn_missing("Early stopping", es->monitor, logs);
    return MXU_OK;
  }
  if (logs->epoch < es->config.start_from_epoch) return MXU_OK;
  /* Keras keeps the first monitored epoch's weights even if it never
   * improves (a NaN), so there is always something to restore. */
  if (es->config.restore_best_weights && !es->best_weights)
    MXU_TRY(keep_weights(es, model));
  double current = mxu_logs_value(logs, es->monitor);
  es->wait++;
  if (mxu_monitor_improved(es->monitor, es->mode, es->config.min_delta, current,
                           es->best)) {
    es->best = current;
    es->best_epoch = logs->epoch;
    es->wait = 0;
    if (es->config.restore_best_weights) MXU_TRY(keep_weights(es, model));
    return MXU_OK;
  }
  if (es->wait < es->config.patience || logs->epoch == 0) return MXU_OK;
  es->stopped_epoch = logs->epoch;
  mxu_model_stop_training(model);
  if (es->config.restore_best_weights && es->best_weights)
    mxu_model_restore_snapshot(model, es->best_weights);
  return MXU_OK;
}

static void early_free(void *self) {
  early_stopping *es = self;
  if (!es) return;
  free(es->monitor);
  free(es->best_weights);
  free(es);
}

static mxu_status check_early(const mxu_early_stopping_config *c) {
  if (c->patience < 0)
    return mxu_fail(MXU_ERR_ARG, "early_stopping: patience %d is negative",
                    c->patience);
  if (c->start_from_epoch < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "early_stopping: start_from_epoch %d is negative",
                    c->start_from_epoch);
  if (!isfinite(c->min_delta))
    return mxu_fail(MXU_ERR_ARG, "early_stopping: min_delta %g is not finite",
                    c->min_delta);
  return MXU_OK;
}

mxu_status mxu_early_stopping(const mxu_early_stopping_config *config,
                              mxu_callback *out) {
  if (!config || !out)
    return mxu_fail(MXU_ERR_ARG, "early_stopping: config and out are required");
  memset(out, 0, sizeof *out);
  MXU_TRY(check_early(config));
  early_stopping *es = calloc(1, sizeof *es);
  if (!es) return mxu_fail(MXU_ERR_NOMEM, "early_stopping: out of memory");
  es->config = *config;
  mxu_status s = copy_monitor("early_stopping", config->monitor, config->mode,
                              &es->monitor);
  if (s != MXU_OK) {
    early_free(es);
    return s;
  }
  es->config.monitor = es->monitor;
  es->best = worst_value(es->monitor, config->mode);
  out->self = es;
  out->train_begin = early_train_begin;
  out->epoch_end = early_epoch_end;
  out->free = early_free;
  return MXU_OK;
}

/* ---- ReduceLROnPlateau ------------------------------------------------- */

typedef struct reduce_lr {
  mxu_reduce_lr_config config;
  char *monitor;
  mxu_monitor_mode mode; /* as early_stopping's */
  int wait, cooldown_counter;
  double best;
} reduce_lr;

mxu_reduce_lr_config mxu_reduce_lr_defaults(void) {
  mxu_reduce_lr_config config = {0};
  config.monitor = "val_loss";
  config.factor = 0.1;
  config.patience = 10;
  config.mode = MXU_MODE_AUTO;
  config.min_delta = 1e-4;
  return config;
}

static mxu_status reduce_train_begin(void *self, mxu_model *model) {
  reduce_lr *r = self;
  r->wait = r->cooldown_counter = 0;
  r->mode = mxu_monitor_mode_for(model, r->monitor, r->config.mode);
  r->best = worst_value(r->monitor, r->mode);
  return MXU_OK;
}

/* Keras: the rate is float32, and min_lr is compared as a float32, so a
 * rate already clamped to min_lr is never "reduced" again. */
static mxu_status reduce_now(reduce_lr *r, mxu_model *model) {
  double old = mxu_model_learning_rate(model);
  if (!((float)old > (float)r->config.min_lr)) return MXU_OK;
  double rate = fmax(old * r->config.factor, r->config.min_lr);
  MXU_TRY(mxu_model_set_learning_rate(model, rate));
  r->cooldown_counter = r->config.cooldown;
  r->wait = 0;
  return MXU_OK;
}

/* Keras' order: a cooldown epoch first counts the cooldown down and
 * clears wait; an improvement always resets wait; only outside cooldown
 * does a flat epoch count towards patience. */
static mxu_status reduce_epoch_end(void *self, mxu_model *model,
                                   const mxu_logs *logs) {
  reduce_lr *r = self;
  if (!logs_have(logs, r->monitor)) {
    warn_missing("Learning rate reduction", r->monitor, logs);
    return MXU_OK;
  }
  double current = mxu_logs_value(logs, r->monitor);
  if (r->cooldown_counter > 0) {
    r->cooldown_counter--;
    r->wait = 0;
  }
  if (mxu_monitor_improved(r->monitor, r->mode, r->config.min_delta, current,
                           r->best)) {
    r->best = current;
    r->wait = 0;
  } else if (r->cooldown_counter <= 0) {
    r->wait++;
    if (r->wait >= r->config.patience) return reduce_now(r, model);
  }
  return MXU_OK;
}

static void reduce_free(void *self) {
  reduce_lr *r = self;
  if (!r) return;
  free(r->monitor);
  free(r);
}

static mxu_status check_reduce(const mxu_reduce_lr_config *c) {
  /* Keras refuses factor >= 1; a factor <= 0 would make the rate 0. */
  if (!(c->factor > 0 && c->factor < 1))
    return mxu_fail(MXU_ERR_ARG,
                    "reduce_lr_on_plateau: factor %g must be in (0, 1)",
                    c->factor);
  if (c->patience < 0 || c->cooldown < 0)
    return mxu_fail(MXU_ERR_ARG,
                    "reduce_lr_on_plateau: patience %d and cooldown %d must "
                    "not be negative",
                    c->patience, c->cooldown);
  if (!(c->min_lr >= 0) || !isfinite(c->min_lr) || !isfinite(c->min_delta))
    return mxu_fail(MXU_ERR_ARG,
                    "reduce_lr_on_plateau: min_lr %g must be finite and not "
                    "negative, min_delta %g finite",
                    c->min_lr, c->min_delta);
  return MXU_OK;
}

mxu_status mxu_reduce_lr_on_plateau(const mxu_reduce_lr_config *config,
                                    mxu_callback *out) {
  if (!config || !out)
    return mxu_fail(MXU_ERR_ARG,
                    "reduce_lr_on_plateau: config and out are required");
  memset(out, 0, sizeof *out);
  MXU_TRY(check_reduce(config));
  reduce_lr *r = calloc(1, sizeof *r);
  if (!r) return mxu_fail(MXU_ERR_NOMEM, "reduce_lr_on_plateau: out of memory");
  r->config = *config;
  mxu_status s = copy_monitor("reduce_lr_on_plateau", config->monitor,
                              config->mode, &r->monitor);
  if (s != MXU_OK) {
    reduce_free(r);
    return s;
  }
  r->config.monitor = r->monitor;
  r->best = worst_value(r->monitor, config->mode);
  out->self = r;
  out->train_begin = reduce_train_begin;
  out->epoch_end = reduce_epoch_end;
  out->free = reduce_free;
  return MXU_OK;
}

/* ---- file name templates: Python's str.format ---------------------------
 *
 * Keras names a checkpoint filepath.format(epoch=epoch + 1, **logs). The
 * template is parsed the same way at construction (with stand-in values,
 * so every error shows before training) and at each epoch's end. */

#define PATH_CAPACITY 4096
#define FIELD_CAPACITY 128

/* Python's format spec: [[fill]align][sign][#][0][width][.precision][type] */
typedef struct format_spec {
  char fill, align, sign, type;          /* 0 when not given */
  int alternate, zero, width, precision; /* precision -1 when not given */
} format_spec;

/* A field's value: epoch is an int, every logged value a float. */
typedef struct field_value {
  double value;
  int is_int;
} field_value;

/* Where values come from: stand-ins at construction (logs NULL), the
 * keys the model will log at train begin (model_logs, `model` set), the
 * epoch's logs later. */
typedef struct field_source {
  const char *template; /* for messages */
  const mxu_logs *logs;
  int epoch; /* 0-based */
  int model; /* logs are model_logs' */
} field_source;

typedef struct text_out {
  char *text;
  size_t used, capacity;
} text_out;

static mxu_status put(text_out *out, const char *text, size_t n,
                      const char *template) {
  if (out->used + n >= out->capacity)
    return mxu_fail(MXU_ERR_ARG,
                    "model_checkpoint: filepath '%s' makes a path longer "
                    "than %d bytes",
                    template, PATH_CAPACITY - 1);
  memcpy(out->text + out->used, text, n);
  out->used += n;
  out->text[out->used] = 0;
  return MXU_OK;
}

static mxu_status put_repeat(text_out *out, char c, int count,
                             const char *template) {
  for (int i = 0; i < count; i++) MXU_TRY(put(out, &c, 1, template));
  return MXU_OK;
}

/* "model_checkpoint: filepath 'T': {name}: what" (no {name} when NULL). */
__attribute__((format(printf, 3, 4))) static mxu_status
template_error(const field_source *src, const char *name, const char *fmt,
               ...) {
  char what[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(what, sizeof what, fmt, args);
  va_end(args);
  if (!name)
    return mxu_fail(MXU_ERR_ARG, "model_checkpoint: filepath '%s': %s",
                    src->template, what);
  return mxu_fail(MXU_ERR_ARG, "model_checkpoint: filepath '%s': {%s}: %s",
                  src->template, name, what);
}

/* Logs of the keys fit will log for the model, validated, every value
 * 0: what a template's fields are checked against before training. */
static void model_logs(const mxu_model *model, mxu_output_log *outputs,
                       mxu_logs *logs) {
  memset(logs, 0, sizeof *logs);
  logs->output_count = model->head_count;
  logs->outputs = outputs;
  logs->accuracy = NAN; /* "accuracy" names a one-output model's first */
  for (int h = 0; h < model->head_count; h++) {
    const mxu_head *head = &model->heads[h];
    mxu_output_log *o = &outputs[h];
    memset(o, 0, sizeof *o);
    o->name = mxu_model_output_name(model, h);
    o->metric_count = head->metric_count;
    for (int m = 0; m < head->metric_count; m++)
      o->metrics[m] = head->metric[m];
    if (model->head_count == 1 && head->metric_count) logs->accuracy = 0;
  }
  logs->val_accuracy = logs->accuracy;
}

/* epoch is the 1-based count, every other field a logged value: loss, a
 * metric, their val_, lr (Keras' template takes any key of the logs). */
static mxu_status field_lookup(const field_source *src, const char *name,
                               field_value *out) {
  out->is_int = strcmp(name, "epoch") == 0;
  if (!src->logs) { /* construction: any stand-in checks the syntax */
    out->value = 1;
    return MXU_OK;
  }
  if (out->is_int) {
    out->value = src->epoch + 1;
    return MXU_OK;
  }
  if (!logs_have(src->logs, name)) {
    char keys[MXU_MAX_LOG_KEYS * MXU_LOG_KEY_SIZE];
    logs_keys(src->logs, keys, sizeof keys);
    if (src->model)
      return template_error(src, name,
                            "unknown field; the fields are epoch and what "
                            "the logs hold: %s",
                            keys);
    return template_error(src, name,
                          "epoch %d has no value for it (the logs hold %s)",
                          src->epoch + 1, keys);
  }
  out->value = mxu_logs_value(src->logs, name);
  return MXU_OK;
}

static int is_align(char c) { return c && strchr("<>=^", c) != NULL; }

static int read_number(const char **p) {
  int n = 0;
  while (**p >= '0' && **p <= '9' && n < 100000) n = n * 10 + (*(*p)++ - '0');
  return n;
}

/* The spec's syntax, as Python's parser reads it; grouping (, _) and the
 * z option are refused rather than half-supported. */
static mxu_status parse_spec_syntax(const field_source *src, const char *name,
                                    const char *text, format_spec *s) {
  memset(s, 0, sizeof *s);
  s->precision = -1;
  const char *p = text;
  if (p[0] && is_align(p[1])) {
    s->fill = p[0];
    s->align = p[1];
    p += 2;
  } else if (is_align(p[0])) {
    s->align = *p++;
  }
  if (*p == '+' || *p == '-' || *p == ' ') s->sign = *p++;
  if (*p == 'z' || *p == ',' || *p == '_')
    return template_error(src, name,
                          "the format options z, ',' and '_' "
                          "are not supported");
  if (*p == '#') {
    s->alternate = 1;
    p++;
  }
  if (*p == '0') {
    s->zero = 1;
    p++;
  }
  s->width = read_number(&p);
  if (*p == ',' || *p == '_')
    return template_error(src, name,
                          "digit grouping (',' '_') is not "
                          "supported");
  if (*p == '.') {
    p++;
    if (*p < '0' || *p > '9')
      return template_error(src, name, "format specifier missing precision");
    s->precision = read_number(&p);
  }
  if (*p) s->type = *p++;
  if (*p || s->width > 1000 || s->precision > 50)
    return template_error(src, name,
                          "invalid format specifier '%s' (or a "
                          "width over 1000, a precision over 50)",
                          text);
  return MXU_OK;
}

/* Which types fit which value, with Python's complaints. */
static mxu_status check_spec_type(const field_source *src, const char *name,
                                  const format_spec *s, int is_int) {
  if (s->type && !strchr("deEfFgG%", s->type))
    return template_error(src, name,
                          "format code '%c' is not supported (use d, e, f, g "
                          "or %%)",
                          s->type);
  if (s->type == 'd' && !is_int)
    return template_error(src, name,
                          "unknown format code 'd' for a float value");
  if (is_int && s->precision >= 0 && (!s->type || s->type == 'd'))
    return template_error(src, name,
                          "precision not allowed in integer format specifier");
  return MXU_OK;
}

/* The value without its sign, as Python formats it. */
static void format_digits(double magnitude, int is_int, const format_spec *s,
                          char *out, size_t size) {
  if (is_int && (!s->type || s->type == 'd')) {
    snprintf(out, size, "%.0f", magnitude);
  } else if (!s->type) { /* str(), or format(x, ".p"), where .0 means .1 */
    int precision = s->precision < 0 ? 0 : s->precision == 0 ? 1 : s->precision;
    mxu_python_float(magnitude, precision, 0, out, size);
  } else {
    char conversion[8];
    int precision = s->precision >= 0 ? s->precision : 6;
    char type = s->type == '%' ? 'f' : s->type;
    snprintf(conversion, sizeof conversion, "%%%s.*%c", s->alternate ? "#" : "",
             type);
    double shown = s->type == '%' ? magnitude * 100 : magnitude;
    snprintf(out, size, conversion, precision, shown);
    if (s->type == '%') strncat(out, "%", size - strlen(out) - 1);
  }
}

/* Python pads to width with fill: numbers align right by default, and a
 * 0 before the width means fill 0 between sign and digits ("=="). */
static mxu_status format_value(const field_source *src, field_value v,
                               const format_spec *s, text_out *out) {
  char digits[128];
  int negative = !isnan(v.value) && signbit(v.value);
  format_digits(fabs(v.value), v.is_int, s, digits, sizeof digits);
  const char *sign = negative         ? "-"
                     : s->sign == '+' ? "+"
                     : s->sign == ' ' ? " "
                                      : "";
  char fill = s->fill ? s->fill : s->zero ? '0' : ' ';
  char align = s->align ? s->align : s->zero ? '=' : '>';
  int pad = s->width - (int)(strlen(sign) + strlen(digits));
  if (pad < 0) pad = 0;
  int left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
  int right = align == '<' ? pad : align == '^' ? pad - pad / 2 : 0;
  int middle = align == '=' ? pad : 0;
  MXU_TRY(put_repeat(out, fill, left, src->template));
  MXU_TRY(put(out, sign, strlen(sign), src->template));
  MXU_TRY(put_repeat(out, fill, middle, src->template));
  MXU_TRY(put(out, digits, strlen(digits), src->template));
  return put_repeat(out, fill, right, src->template);
}

static int is_identifier(const char *name) {
  if (!*name || (*name >= '0' && *name <= '9')) return 0;
  for (const char *p = name; *p; p++)
    if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
          (*p >= 'A' && *p <= 'Z')))
      return 0;
  return 1;
}

/* One {name:spec} field, its text between the braces. */
static mxu_status render_field(const field_source *src, const char *field,
                               size_t length, text_out *out) {
  char name[FIELD_CAPACITY];
  if (length >= sizeof name)
    return template_error(src, NULL, "a field longer than %d characters",
                          FIELD_CAPACITY - 1);
  memcpy(name, field, length);
  name[length] = 0;
  char *colon = strchr(name, ':');
  if (colon) *colon = 0;
  if (strchr(name, '!'))
    return template_error(src, name,
                          "conversions (!r, !s, !a) are not supported");
  if (!is_identifier(name))
    return template_error(src, name,
                          "not a key name (positional fields, attributes "
                          "and indexes are not supported)");
  field_value v = {0, 0};
  MXU_TRY(field_lookup(src, name, &v));
  format_spec spec;
  MXU_TRY(parse_spec_syntax(src, name, colon ? colon + 1 : "", &spec));
  MXU_TRY(check_spec_type(src, name, &spec, v.is_int));
  return format_value(src, v, &spec, out);
}

/* Python's rules: {{ and }} are braces, {...} a field, a lone } an error;
 * nested fields inside a spec ({loss:{w}}) are not supported. */
static mxu_status render_template(const field_source *src, text_out *out) {
  const char *p = src->template;
  out->used = 0;
  out->text[0] = 0;
  while (*p) {
    if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
      MXU_TRY(put(out, p, 1, src->template));
      p += 2;
    } else if (*p == '}') {
      return template_error(src, NULL,
                            "single '}' encountered in format string");
    } else if (*p == '{') {
      const char *end = strchr(p + 1, '}');
      const char *nested = strchr(p + 1, '{');
      if (!end)
        return template_error(src, NULL, "expected '}' before end of string");
      if (nested && nested < end)
        return template_error(src, NULL, "nested fields are not supported");
      MXU_TRY(render_field(src, p + 1, (size_t)(end - p - 1), out));
      p = end + 1;
    } else {
      MXU_TRY(put(out, p++, 1, src->template));
    }
  }
  return MXU_OK;
}

/* ---- ModelCheckpoint --------------------------------------------------- */

typedef struct checkpoint {
  mxu_model_checkpoint_config config;
  char *filepath, *monitor;
  mxu_monitor_mode mode; /* as early_stopping's, until something is saved */
  double best;           /* as in Keras, kept from one fit to the next */
  char path[PATH_CAPACITY];
} checkpoint;

mxu_model_checkpoint_config
mxu_model_checkpoint_defaults(const char *filepath) {
  mxu_model_checkpoint_config config = {0};
  config.filepath = filepath;
  config.monitor = "val_loss";
  config.mode = MXU_MODE_AUTO;
  return config;
}

/* Every process gathers the optimizer slots (a collective under MPI, so
 * all of them call it); one process writes. A failed save stops fit with
 * the save's own status and message. */
static mxu_status save_checkpoint(checkpoint *c, mxu_model *model, int epoch) {
  if (!c->config.save_weights_only) mxu_strategy_sync_slots(model);
  if (mxu_distributed_rank() != 0) return MXU_OK;
  mxu_train_position position = {.epoch = epoch + 1};
  mxu_status s = c->config.save_weights_only
                     ? mxu_save_weights(model, c->path)
                     : mxu_save_model(model, c->path, &position);
  if (s != MXU_OK)
    return mxu_fail_prefix(s, "model_checkpoint: epoch %d: ", epoch + 1);
  return MXU_OK;
}

/* Keras formats the name first (a missing key fails even when the epoch
 * would not be saved), then, with save_best_only, saves only a strict
 * improvement: the first epoch beats +-inf, a NaN never counts. */
static mxu_status checkpoint_epoch_end(void *self, mxu_model *model,
                                       const mxu_logs *logs) {
  checkpoint *c = self;
  field_source src = {c->filepath, logs, logs->epoch, 0};
  text_out out = {c->path, 0, sizeof c->path};
  MXU_TRY(render_template(&src, &out));
  if (c->config.save_best_only) {
    if (!logs_have(logs, c->monitor)) {
      warn_missing("Saving the best model", c->monitor, logs);
      return MXU_OK;
    }
    double current = mxu_logs_value(logs, c->monitor);
    if (!mxu_monitor_improved(c->monitor, c->mode, 0, current, c->best))
      return MXU_OK;
    c->best = current;
  }
  return save_checkpoint(c, model, logs->epoch);
}

/* The template's fields against the keys the model logs; the direction
 * the model's metric gives (Keras 3 reads it off the compiled metric),
 * while no epoch has been saved as the best. */
static mxu_status checkpoint_train_begin(void *self, mxu_model *model) {
  checkpoint *c = self;
  mxu_output_log outputs[MXU_MAX_OUTPUTS];
  mxu_logs logs;
  model_logs(model, outputs, &logs);
  field_source src = {c->filepath, &logs, 0, 1};
  text_out out = {c->path, 0, sizeof c->path};
  MXU_TRY(render_template(&src, &out));
  if (isinf(c->best)) {
    c->mode = mxu_monitor_mode_for(model, c->monitor, c->config.mode);
    c->best = worst_value(c->monitor, c->mode);
  }
  return MXU_OK;
}

static void checkpoint_free(void *self) {
  checkpoint *c = self;
  if (!c) return;
  free(c->filepath);
  free(c->monitor);
  free(c);
}

/* The template with stand-in values: its syntax and, for weights, the
 * file name's suffix (its fields are checked at train begin, once the
 * model's keys are known). */
static mxu_status check_template(checkpoint *c) {
  field_source src = {c->filepath, NULL, 0, 0};
  text_out out = {c->path, 0, sizeof c->path};
  MXU_TRY(render_template(&src, &out));
  if (c->config.save_weights_only && mxu_weights_path_check(c->path) != MXU_OK)
    return mxu_fail_prefix(MXU_ERR_ARG,
                           "model_checkpoint: filepath '%s': ", c->filepath);
  return MXU_OK;
}

static mxu_status checkpoint_setup(checkpoint *c,
                                   const mxu_model_checkpoint_config *config) {
  c->config = *config;
  c->filepath = malloc(strlen(config->filepath) + 1);
  if (!c->filepath)
    return mxu_fail(MXU_ERR_NOMEM, "model_checkpoint: out of memory");
  strcpy(c->filepath, config->filepath);
  c->config.filepath = c->filepath;
  MXU_TRY(copy_monitor("model_checkpoint", config->monitor, config->mode,
                       &c->monitor));
  c->config.monitor = c->monitor;
  c->mode = config->mode;
  c->best = worst_value(c->monitor, c->mode);
  return check_template(c);
}

mxu_status mxu_model_checkpoint(const mxu_model_checkpoint_config *config,
                                mxu_callback *out) {
  if (!config || !out)
    return mxu_fail(MXU_ERR_ARG,
                    "model_checkpoint: config and out are required");
  memset(out, 0, sizeof *out);
  if (!config->filepath || !*config->filepath)
    return mxu_fail(MXU_ERR_ARG, "model_checkpoint: a filepath is required");
  checkpoint *c = calloc(1, sizeof *c);
  if (!c) return mxu_fail(MXU_ERR_NOMEM, "model_checkpoint: out of memory");
  mxu_status s = checkpoint_setup(c, config);
  if (s != MXU_OK) {
    checkpoint_free(c);
    return s;
  }
  out->self = c;
  out->train_begin = checkpoint_train_begin;
  out->epoch_end = checkpoint_epoch_end;
  out->free = checkpoint_free;
  return MXU_OK;
}
