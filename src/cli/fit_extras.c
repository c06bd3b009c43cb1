/* fit_extras.c — Keras' callbacks and augmentation for `mxu train`, from
 * the command line to the C API's mxu_callback and mxu_augment_config. */
#include "fit_extras.h"
#include <errno.h>
#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fill_names[] = {"nearest", "constant", "reflect",
                                         "wrap", NULL};

void cli_fit_extra_options(cli_fit_extras *e, cli_option *o) {
  cli_option table[CLI_FIT_EXTRA_OPTIONS] = {
      {"--early-stopping", "PATIENCE",
       "Keras' EarlyStopping: stop after PATIENCE epochs without improvement "
       "of --monitor",
       CLI_POSITIVE_INT, &e->early_stopping, NULL, 0, 0},
      {"--monitor", "NAME",
       "what EarlyStopping, ReduceLROnPlateau and --save-best-only watch: "
       "val_loss (default), loss, val_accuracy, accuracy; of a model of "
       "several outputs each one's, e.g. val_NAME_loss, val_NAME_accuracy",
       CLI_STRING, &e->monitor, NULL, 0, 0},
      {"--restore-best-weights", "",
       "when EarlyStopping stops, go back to the best epoch's weights",
       CLI_FLAG, &e->restore_best_weights, NULL, 0, 0},
      {"--model-checkpoint", "TEMPLATE",
       "Keras' ModelCheckpoint: save after every epoch to TEMPLATE, e.g. "
       "'model.{epoch:02d}-{val_loss:.2f}.h5'",
       CLI_STRING, &e->model_checkpoint, NULL, 0, 0},
      {"--save-best-only", "",
       "ModelCheckpoint: save only when --monitor improves", CLI_FLAG,
       &e->save_best_only, NULL, 0, 0},
      {"--save-weights-only", "",
       "ModelCheckpoint: save the weights (save_weights), not the whole "
       "model",
       CLI_FLAG, &e->save_weights_only, NULL, 0, 0},
      {"--lr-schedule", "SPEC",
       "Keras' LearningRateScheduler per epoch: step:FACTOR:EVERY, "
       "exponential:RATE or cosine:WARMUP_EPOCHS[:MIN_LR]",
       CLI_STRING, &e->lr_schedule, NULL, 0, 0},
      {"--reduce-lr-patience", "N",
       "Keras' ReduceLROnPlateau: multiply the learning rate by "
       "--reduce-lr-factor after N epochs without improvement",
       CLI_POSITIVE_INT, &e->reduce_lr_patience, NULL, 0, 0},
      {"--reduce-lr-factor", "F", "ReduceLROnPlateau's factor (default 0.1)",
       CLI_POSITIVE_FLOAT, &e->reduce_lr_factor, NULL, 0, 0},
      {"--csv-log", "FILE", "Keras' CSVLogger: one row per epoch in FILE",
       CLI_STRING, &e->csv_log, NULL, 0, 0},
      {"--tensorboard", "DIR",
       "TensorBoard event files in DIR/train and DIR/validation", CLI_STRING,
       &e->tensorboard, NULL, 0, 0},
      {"--tensorboard-update-freq", "N",
       "also log the batch loss every N steps (default: epochs only)",
       CLI_POSITIVE_INT, &e->tensorboard_update_freq, NULL, 0, 0},
      {"--rotation-range", "DEG",
       "augmentation: rotate by up to DEG degrees either way",
       CLI_POSITIVE_FLOAT, &e->rotation_range, NULL, 0, 0},
      {"--width-shift-range", "F",
       "augmentation: shift sideways by up to F of the width (F < 1) or F "
       "pixels",
       CLI_POSITIVE_FLOAT, &e->width_shift_range, NULL, 0, 0},
      {"--height-shift-range", "F",
       "augmentation: shift up or down by up to F of the height (or pixels)",
       CLI_POSITIVE_FLOAT, &e->height_shift_range, NULL, 0, 0},
      {"--zoom-range", "Z",
       "augmentation: zoom each axis by a factor in [1-Z, 1+Z]",
       CLI_POSITIVE_FLOAT, &e->zoom_range, NULL, 0, 0},
      {"--horizontal-flip", "", "augmentation: flip half the images left-right",
       CLI_FLAG, &e->horizontal_flip, NULL, 0, 0},
      {"--vertical-flip", "", "augmentation: flip half the images upside down",
       CLI_FLAG, &e->vertical_flip, NULL, 0, 0},
      {"--fill-mode", "MODE",
       "augmentation: nearest (default), constant, reflect or wrap", CLI_CHOICE,
       &e->fill_mode, fill_names, 0, 0},
  };
  memcpy(o, table, sizeof table);
}

static int add(cli_fit_extras *e, mxu_status status) {
  if (status != MXU_OK) return cli_runtime_error("train");
  e->callback_count++;
  return CLI_OK;
}

static mxu_callback *next(cli_fit_extras *e) {
  return &e->callbacks[e->callback_count];
}

/* A whole number field: finite, positive for counts, nothing after it. */
static int real_field(const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  *out = strtod(text, &end);
  return end != text && !*end && errno == 0 && isfinite(*out);
}

static int count_field(const char *text, int *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (end == text || *end || errno || value < 0 || value > 1000000) return 0;
  *out = (int)value;
  return 1;
}

/* "step:0.5:10", "exponential:0.95", "cosine:5[:1e-5]": every field read
 * whole (no overflow, nothing trailing). */
static int schedule(cli_fit_extras *e, int epochs) {
  mxu_lr_schedule_config c = {0};
  char spec[256], *field[4] = {NULL};
  int fields = 0;
  snprintf(spec, sizeof spec, "%s", e->lr_schedule);
  for (char *p = spec, *save = NULL; fields < 4;) {
    char *token = strtok_r(fields ? NULL : p, ":", &save);
    if (!token) break;
    field[fields++] = token;
  }
  int ok = strlen(e->lr_schedule) < sizeof spec && fields >= 2;
  if (ok && !strcmp(field[0], "step") && fields == 3) {
    c.kind = MXU_SCHEDULE_STEP;
    ok = real_field(field[1], &c.factor) && count_field(field[2], &c.every) &&
         c.every > 0;
  } else if (ok && !strcmp(field[0], "exponential") && fields == 2) {
    c.kind = MXU_SCHEDULE_EXPONENTIAL;
    ok = real_field(field[1], &c.factor);
  } else if (ok && !strcmp(field[0], "cosine") && fields <= 3) {
    c.kind = MXU_SCHEDULE_COSINE;
    c.total_epochs = epochs;
    ok = count_field(field[1], &c.warmup_epochs) &&
         (fields == 2 || real_field(field[2], &c.min_lr));
  } else {
    ok = 0;
  }
  if (!ok)
    return cli_usage_error("train",
                           "--lr-schedule: '%s' is not step:FACTOR:EVERY, "
                           "exponential:RATE or cosine:WARMUP[:MIN_LR] "
                           "(finite numbers, EVERY and WARMUP in 0..1000000)",
                           e->lr_schedule);
  return add(e, mxu_lr_scheduler(&c, next(e)));
}

static int monitored(cli_fit_extras *e) {
  int code = CLI_OK;
  if (e->early_stopping) {
    mxu_early_stopping_config c = mxu_early_stopping_defaults();
    if (e->monitor) c.monitor = e->monitor;
    c.patience = e->early_stopping;
    c.restore_best_weights = e->restore_best_weights;
    code = add(e, mxu_early_stopping(&c, next(e)));
  }
  if (code == CLI_OK && e->reduce_lr_patience) {
    mxu_reduce_lr_config c = mxu_reduce_lr_defaults();
    if (e->monitor) c.monitor = e->monitor;
    c.patience = e->reduce_lr_patience;
    if (e->reduce_lr_factor > 0) c.factor = e->reduce_lr_factor;
    code = add(e, mxu_reduce_lr_on_plateau(&c, next(e)));
  }
  if (code == CLI_OK && e->model_checkpoint) {
    mxu_model_checkpoint_config c =
        mxu_model_checkpoint_defaults(e->model_checkpoint);
    if (e->monitor) c.monitor = e->monitor;
    c.save_best_only = e->save_best_only;
    c.save_weights_only = e->save_weights_only;
    code = add(e, mxu_model_checkpoint(&c, next(e)));
  }
  return code;
}

static int loggers(cli_fit_extras *e) {
  int code = CLI_OK;
  if (e->csv_log) code = add(e, mxu_csv_logger(e->csv_log, 0, next(e)));
  if (code == CLI_OK && e->tensorboard)
    code = add(e, mxu_tensorboard(e->tensorboard, e->tensorboard_update_freq,
                                  next(e)));
  return code;
}

static void augmentation(cli_fit_extras *e) {
  mxu_augment_config *a = &e->augment;
  *a = mxu_augment_defaults();
  a->rotation_range = e->rotation_range;
  a->width_shift_range = e->width_shift_range;
  a->height_shift_range = e->height_shift_range;
  a->zoom_range = e->zoom_range;
  a->horizontal_flip = e->horizontal_flip;
  a->vertical_flip = e->vertical_flip;
  a->fill_mode = (mxu_fill_mode)e->fill_mode;
  e->augmenting = mxu_augment_active(a);
}

int cli_fit_extras_build(cli_fit_extras *e, int epochs) {
  int code = e->lr_schedule ? schedule(e, epochs) : CLI_OK;
  if (code == CLI_OK) code = monitored(e);
  if (code == CLI_OK) code = loggers(e);
  augmentation(e);
  return code;
}

void cli_fit_extras_apply(cli_fit_extras *e, mxu_fit_config *fit) {
  fit->callbacks = e->callbacks;
  fit->callback_count = e->callback_count;
  fit->augment = e->augmenting ? &e->augment : NULL;
}

void cli_fit_extras_free(cli_fit_extras *e) {
  for (int i = 0; i < e->callback_count; i++)
    mxu_callback_free(&e->callbacks[i]);
  e->callback_count = 0;
}
