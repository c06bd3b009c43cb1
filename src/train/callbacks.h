/* callbacks.h — how fit calls the user's callbacks: one dispatcher per
 * Keras hook, in the order the callbacks were given, stopping at the first
 * that fails. Internal to libmxu. */
#ifndef MXU_TRAIN_CALLBACKS_H
#define MXU_TRAIN_CALLBACKS_H

#include "model/model.h"

typedef enum mxu_hook {
  MXU_HOOK_TRAIN_BEGIN,
  MXU_HOOK_EPOCH_BEGIN,
  MXU_HOOK_BATCH_END,
  MXU_HOOK_EPOCH_END,
  MXU_HOOK_TRAIN_END
} mxu_hook;

/* logs may be NULL for the begin hooks; epoch is used by epoch_begin. */
mxu_status mxu_callbacks_run(const mxu_fit_config *config, mxu_model *model,
                             mxu_hook hook, int epoch, const mxu_logs *logs);

/* Keras' mode "auto": max for a name holding "acc" or ending in "auc",
 * "precision" or "recall" (Keras 3's directions of those metrics), else
 * min. */
int mxu_monitor_is_max(const char *monitor, mxu_monitor_mode mode);
/* Mode "auto" for a metric the model computes under that name: its
 * kind's direction (Keras 3's: a metric logged under a name of its own,
 * "roc" for an AUC, is maximized); otherwise `mode` unchanged, which
 * mxu_monitor_is_max reads off the name. */
mxu_monitor_mode mxu_monitor_mode_for(const mxu_model *model,
                                      const char *monitor,
                                      mxu_monitor_mode mode);
/* Whether the monitored value improved on best (mode resolved from the
 * name when AUTO); min_delta as Keras applies it. Shared by EarlyStopping,
 * ReduceLROnPlateau and ModelCheckpoint. */
int mxu_monitor_improved(const char *monitor, mxu_monitor_mode mode,
                         double min_delta, double value, double best);
/* A named value of the logs: loss, val_loss, a metric or val_<metric>
 * (also "accuracy"/"val_accuracy" for whichever accuracy a model of one
 * output has), an output's "<name>_loss" or "<name>_<metric>" and their
 * val_, learning_rate / lr. NaN when absent. */
double mxu_logs_value(const mxu_logs *logs, const char *name);
/* The keys Keras' logs dict holds, in tf.keras' order: loss and the
 * metrics (a model of one output), or loss, each output's loss and each
 * output's metrics (several); then the same with val_ when the epoch was
 * validated (logs->val_loss not NaN). Returns the count (at most
 * MXU_MAX_LOG_KEYS). */
enum {
  MXU_LOG_KEY_SIZE = 96,
  MXU_MAX_LOG_KEYS = 2 * (1 + MXU_MAX_OUTPUTS * (1 + MXU_MAX_METRICS))
};
int mxu_logs_keys(const mxu_logs *logs, char keys[][MXU_LOG_KEY_SIZE]);

/* The most significant digits mxu_python_float writes. */
#define MXU_PYTHON_DIGITS 60

/* A float as Python writes it, for Keras' file names and CSV rows.
 * precision 0: repr(value), the fewest digits that read back as the same
 * double ("0.1", "1e-05", "1000000000000000.0", "nan") -- or, when float32
 * is set, as the same float32, as numpy's str() of a float32 ("0.001").
 * precision p > 0: format(value, ".p"), p significant digits with at least
 * one after the point, switching to exponent form at 10^(p-1). */
void mxu_python_float(double value, int precision, int float32, char *out,
                      size_t size);

#endif
