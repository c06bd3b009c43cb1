/* callbacks.c — dispatching Keras' hooks to the user's callbacks, and the
 * model controls callbacks use: stop_training, the learning rate and
 * weight snapshots. */
#include "train/callbacks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mxu_status mxu_callbacks_run(const mxu_fit_config *config, mxu_model *model,
                             mxu_hook hook, int epoch, const mxu_logs *given) {
  /* Callbacks warn where fit prints (rank 0, unless silent). */
  mxu_logs local = given ? *given : (mxu_logs){0};
  local.out = config->verbose && mxu_distributed_rank() == 0
                  ? (config->out ? config->out : stdout)
                  : NULL;
  const mxu_logs *logs = given ? &local : NULL;
  /* Callbacks read the weights and may change them: on pjrt, the host has
   * the devices' before, and the devices the host's after. */
  if (config->callback_count) MXU_TRY(mxu_device_sync(model));
  for (int i = 0; i < config->callback_count; i++) {
    const mxu_callback *cb = &config->callbacks[i];
    mxu_status s = MXU_OK;
    switch (hook) {
    case MXU_HOOK_TRAIN_BEGIN:
      if (cb->train_begin) s = cb->train_begin(cb->self, model);
      break;
    case MXU_HOOK_EPOCH_BEGIN:
      if (cb->epoch_begin) s = cb->epoch_begin(cb->self, model, epoch);
      break;
    case MXU_HOOK_BATCH_END:
      if (cb->batch_end) s = cb->batch_end(cb->self, model, logs);
      break;
    case MXU_HOOK_EPOCH_END:
      if (cb->epoch_end) s = cb->epoch_end(cb->self, model, logs);
      break;
    case MXU_HOOK_TRAIN_END:
      if (cb->train_end) s = cb->train_end(cb->self, model, logs);
      break;
    }
    if (s != MXU_OK) return s;
  }
  return config->callback_count ? mxu_device_invalidate(model) : MXU_OK;
}

void mxu_callback_free(mxu_callback *callback) {
  if (!callback) return;
  if (callback->free) callback->free(callback->self);
  memset(callback, 0, sizeof *callback);
}

int mxu_monitor_is_max(const char *monitor, mxu_monitor_mode mode) {
  if (mode != MXU_MODE_AUTO) return mode == MXU_MODE_MAX;
  if (!monitor) return 0;
  static const char *const up[] = {"auc", "precision", "recall"};
  size_t n = strlen(monitor);
  for (size_t i = 0; i < sizeof up / sizeof *up; i++) {
    size_t k = strlen(up[i]);
    if (n >= k && strcmp(monitor + n - k, up[i]) == 0) return 1;
  }
  return strstr(monitor, "acc") != NULL;
}

/* Whether `base` is head h's metric m as the logs name it. */
static int is_metric_key(const mxu_model *model, int h, int m,
                         const char *base) {
  const char *metric = model->heads[h].metric[m];
  if (model->head_count == 1) return strcmp(base, metric) == 0;
  const char *output = mxu_model_output_name(model, h);
  size_t n = output ? strlen(output) : 0;
  return n && strncmp(base, output, n) == 0 && base[n] == '_' &&
         strcmp(base + n + 1, metric) == 0;
}

mxu_monitor_mode mxu_monitor_mode_for(const mxu_model *model,
                                      const char *monitor,
                                      mxu_monitor_mode mode) {
  if (mode != MXU_MODE_AUTO || !model || !monitor) return mode;
  const char *base = strncmp(monitor, "val_", 4) == 0 ? monitor + 4 : monitor;
  for (int h = 0; h < model->head_count; h++)
    for (int m = 0; m < model->heads[h].metric_count; m++) {
      if (!is_metric_key(model, h, m, base)) continue;
      int direction = mxu_metric_direction(model->heads[h].metric_kind[m]);
      if (direction) return direction > 0 ? MXU_MODE_MAX : MXU_MODE_MIN;
    }
  return mode;
}

/* Keras: min_delta counts against the direction of improvement, so an
 * improvement must beat best by more than |min_delta|. */
int mxu_monitor_improved(const char *monitor, mxu_monitor_mode mode,
                         double min_delta, double value, double best) {
  if (isnan(value)) return 0;
  double delta = fabs(min_delta);
  if (mxu_monitor_is_max(monitor, mode)) return value - delta > best;
  return value + delta < best;
}

/* An output's metric named `metric`, or NaN. */
static double metric_value(const mxu_output_log *o, const char *metric,
                           int val) {
  for (int m = 0; m < o->metric_count; m++)
    if (strcmp(metric, o->metrics[m]) == 0)
      return val ? o->val_values[m] : o->values[m];
  return NAN;
}

/* Output j's value named base ("<name>_loss", "<name>_<metric>"). */
static double output_value(const mxu_output_log *o, const char *base, int val) {
  size_t n = strlen(o->name);
  if (strncmp(base, o->name, n) != 0 || base[n] != '_') return NAN;
  if (strcmp(base + n + 1, "loss") == 0) return val ? o->val_loss : o->loss;
  return metric_value(o, base + n + 1, val);
}

double mxu_logs_value(const mxu_logs *logs, const char *name) {
  if (!logs || !name) return NAN;
  int val = strncmp(name, "val_", 4) == 0;
  const char *base = val ? name + 4 : name;
  if (strcmp(base, "loss") == 0) return val ? logs->val_loss : logs->loss;
  if (!val && (strcmp(name, "learning_rate") == 0 || strcmp(name, "lr") == 0))
    return logs->learning_rate;
  if (logs->output_count > 1) {
    for (int j = 0; j < logs->output_count; j++) {
      double v = output_value(&logs->outputs[j], base, val);
      if (!isnan(v)) return v;
    }
    return NAN;
  }
  /* A metric of that name first: "accuracy" may be any of several. */
  for (int m = 0; logs->output_count && m < logs->outputs[0].metric_count; m++)
    if (strcmp(base, logs->outputs[0].metrics[m]) == 0)
      return metric_value(&logs->outputs[0], base, val);
  if (strcmp(base, "accuracy") == 0 || strcmp(base, "acc") == 0 ||
      (logs->metric && strcmp(base, logs->metric) == 0))
    return val ? logs->val_accuracy : logs->accuracy;
  return NAN;
}

/* Keras' keys, in tf.keras 2's order: loss, the outputs' losses (of
 * several), each output's metrics; then their val_. */
int mxu_logs_keys(const mxu_logs *logs, char keys[][MXU_LOG_KEY_SIZE]) {
  int n = 0, several = logs->output_count > 1;
  for (int v = 0; v <= !isnan(logs->val_loss); v++) {
    const char *p = v ? "val_" : "";
    snprintf(keys[n++], MXU_LOG_KEY_SIZE, "%sloss", p);
    for (int j = 0; several && j < logs->output_count; j++)
      snprintf(keys[n++], MXU_LOG_KEY_SIZE, "%s%s_loss", p,
               logs->outputs[j].name);
    if (!logs->output_count && logs->metric) /* logs without outputs */
      snprintf(keys[n++], MXU_LOG_KEY_SIZE, "%s%s", p, logs->metric);
    for (int j = 0; j < logs->output_count; j++) {
      const mxu_output_log *o = &logs->outputs[j];
      for (int m = 0; m < o->metric_count; m++)
        snprintf(keys[n++], MXU_LOG_KEY_SIZE, "%s%s%s%s", p,
                 several ? o->name : "", several ? "_" : "", o->metrics[m]);
    }
  }
  return n;
}

void mxu_model_stop_training(mxu_model *model) {
  if (model) model->stop_training = 1;
}

double mxu_model_learning_rate(const mxu_model *model) {
  return model ? mxu_optimizer_rate(model) : NAN;
}

mxu_status mxu_model_set_learning_rate(mxu_model *model, double rate) {
  if (!model || !(rate > 0) || !isfinite(rate))
    return mxu_fail(MXU_ERR_ARG,
                    "learning rate %g: a learning rate must be positive", rate);
  /* Keras refuses it too (the optimizer holds the schedule, no value). */
  if (model->compile.optimizer.schedule.kind != MXU_DECAY_NONE)
    return mxu_fail(MXU_ERR_ARG,
                    "learning rate %g: the optimizer's rate follows a "
                    "learning-rate schedule, which a callback cannot set",
                    rate);
  model->compile.optimizer.learning_rate = (float)rate;
  return MXU_OK;
}

mxu_status mxu_model_snapshot(const mxu_model *model, float **out) {
  if (!model || !model->compiled || !out)
    return mxu_fail(MXU_ERR_ARG, "snapshot: compile the model first");
  size_t trainable = (size_t)model->trainable_count;
  size_t state = (size_t)model->state_count;
  *out = malloc((trainable + state + 1) * sizeof(float));
  if (!*out) return mxu_fail(MXU_ERR_NOMEM, "snapshot: out of memory");
  memcpy(*out, model->weights, trainable * sizeof(float));
  memcpy(*out + trainable, model->state, state * sizeof(float));
  return MXU_OK;
}

void mxu_model_restore_snapshot(mxu_model *model, const float *snapshot) {
  size_t trainable = (size_t)model->trainable_count;
  memcpy(model->weights, snapshot, trainable * sizeof(float));
  memcpy(model->state, snapshot + trainable,
         (size_t)model->state_count * sizeof(float));
}

/* ---- Python's float text (CSVLogger rows, ModelCheckpoint file names) -- */

/* |value| rounded to `digits` significant digits: the digits without
 * trailing zeros into out, the decimal exponent returned (0.0125, 3 ->
 * "125", -2). printf rounds correctly, as Python does. */
static int decimal_digits(double value, int digits, char *out) {
  char text[MXU_PYTHON_DIGITS + 16];
  snprintf(text, sizeof text, "%.*e", digits - 1, fabs(value));
  const char *e = strchr(text, 'e');
  size_t n = 0;
  for (const char *p = text; p < e; p++)
    if (*p != '.') out[n++] = *p;
  while (n > 1 && out[n - 1] == '0') n--;
  out[n] = 0;
  return atoi(e + 1);
}

/* The fewest significant digits that read back as the same number: what
 * repr() prints for a double, and numpy's str() for a float32. (Python may
 * pick a non-nearest string of the same length in rare cases near powers
 * of two; the nearest one still reads back exactly.) */
static int shortest_digits(double value, int float32) {
  char text[64];
  for (int digits = 1; digits < 17; digits++) {
    snprintf(text, sizeof text, "%.*e", digits - 1, value);
    if (float32 ? strtof(text, NULL) == (float)value
                : strtod(text, NULL) == value)
      return digits;
  }
  return 17;
}

/* Python's layout of 0.d1d2... * 10^(exp+1): positional, with at least one
 * digit after the point, when -4 <= exp < limit; else d1.d2...e+XX. */
static void python_layout(const char *sign, const char *digits, int exp,
                          int limit, char *out, size_t size) {
  int n = (int)strlen(digits);
  if (exp < -4 || exp >= limit) {
    snprintf(out, size, "%s%c%s%se%c%02d", sign, digits[0], n > 1 ? "." : "",
             digits + 1, exp < 0 ? '-' : '+', abs(exp));
    return;
  }
  /* At most 4 zeros before the digits, or zeros up to the 16th place. */
  char text[MXU_PYTHON_DIGITS + 24];
  int at = 0, point = exp + 1; /* digits before the point */
  if (point <= 0) {
    text[at++] = '0';
    text[at++] = '.';
    for (int i = 0; i < -point; i++) text[at++] = '0';
    for (int i = 0; i < n; i++) text[at++] = digits[i];
  } else {
    for (int i = 0; i < point || i < n; i++) {
      if (i == point) text[at++] = '.';
      text[at++] = i < n ? digits[i] : '0';
    }
    if (n <= point) {
      text[at++] = '.';
      text[at++] = '0';
    }
  }
  text[at] = 0;
  snprintf(out, size, "%s%s", sign, text);
}

void mxu_python_float(double value, int precision, int float32, char *out,
                      size_t size) {
  if (isnan(value) || isinf(value)) {
    snprintf(out, size, "%s",
             isnan(value) ? "nan"
             : value < 0  ? "-inf"
                          : "inf");
    return;
  }
  if (precision > MXU_PYTHON_DIGITS) precision = MXU_PYTHON_DIGITS;
  int digits = precision > 0 ? precision : shortest_digits(value, float32);
  /* repr() goes to exponent form from 1e16 on; format(x, ".p") from
   * 10^(p-1) on, so that its p digits never need padding zeros. */
  int limit = precision > 0 ? precision - 1 : 16;
  char text[MXU_PYTHON_DIGITS + 1];
  int exp = decimal_digits(value, digits, text);
  python_layout(signbit(value) ? "-" : "", text, exp, limit, out, size);
}
