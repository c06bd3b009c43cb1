/* callbacks_schedule.c — Keras' LearningRateScheduler: at the start of each
 * epoch the optimizer's rate is set from the epoch number, by one of three
 * built-in schedules or by the user's function. */
#include "train/callbacks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* C11 with only POSIX names has no M_PI. */
#define PI 3.14159265358979323846

typedef struct lr_scheduler {
  mxu_lr_schedule_config config;
  double initial; /* lr0: config.initial, else the rate fit started with */
  int have_initial;
} lr_scheduler;

/* The built-in schedules, from lr0 and the 0-based epoch:
 *   STEP         lr0 * factor^floor(epoch / every)
 *   EXPONENTIAL  lr0 * factor^epoch
 *   COSINE       lr0 * (epoch + 1) / warmup_epochs while epoch < warmup,
 *                then min_lr + (lr0 - min_lr) * (1 + cos(pi * t)) / 2 with
 *                t = (epoch - warmup) / (total - warmup), held at min_lr
 *                (t = 1) from epoch `total` on. */
static double schedule_value(const mxu_lr_schedule_config *c, double lr0,
                             int epoch) {
  switch (c->kind) {
  case MXU_SCHEDULE_STEP: return lr0 * pow(c->factor, epoch / c->every);
  case MXU_SCHEDULE_EXPONENTIAL: return lr0 * pow(c->factor, epoch);
  case MXU_SCHEDULE_COSINE: break;
  }
  int warmup = c->warmup_epochs;
  if (epoch < warmup) return lr0 * (epoch + 1) / warmup;
  double t = (double)(epoch - warmup) / (c->total_epochs - warmup);
  if (t > 1) t = 1;
  return c->min_lr + 0.5 * (lr0 - c->min_lr) * (1 + cos(PI * t));
}

/* lr0 is taken when training starts, so a schedule follows the compiled
 * rate; a run resumed from a model file whose rate the schedule already
 * lowered should give config.initial instead. */
static mxu_status scheduler_train_begin(void *self, mxu_model *model) {
  lr_scheduler *s = self;
  s->initial = s->config.initial > 0 ? s->config.initial
                                     : mxu_model_learning_rate(model);
  s->have_initial = 1;
  return MXU_OK;
}

/* Keras' schedule(epoch, lr) gets the current rate; the built-in kinds
 * compute from lr0 instead, so they never compound. */
static mxu_status scheduler_epoch_begin(void *self, mxu_model *model,
                                        int epoch) {
  lr_scheduler *s = self;
  if (!s->have_initial) MXU_TRY(scheduler_train_begin(s, model));
  const mxu_lr_schedule_config *c = &s->config;
  double rate = c->fn ? c->fn(epoch, mxu_model_learning_rate(model), c->ctx)
                      : schedule_value(c, s->initial, epoch);
  if (!(rate > 0) || !isfinite(rate))
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: epoch %d: the schedule gave a learning "
                    "rate of %g; it must be positive and finite",
                    epoch + 1, rate);
  return mxu_model_set_learning_rate(model, rate);
}

static mxu_status check_cosine(const mxu_lr_schedule_config *c) {
  if (c->warmup_epochs < 0 || c->total_epochs <= c->warmup_epochs)
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: cosine needs 0 <= warmup_epochs < "
                    "total_epochs, got warmup %d, total %d",
                    c->warmup_epochs, c->total_epochs);
  if (!(c->min_lr >= 0) || !isfinite(c->min_lr) ||
      (c->initial > 0 && c->min_lr > c->initial))
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: cosine min_lr %g must be in [0, initial]",
                    c->min_lr);
  return MXU_OK;
}

static mxu_status check_schedule(const mxu_lr_schedule_config *c) {
  if (!(c->initial >= 0) || !isfinite(c->initial))
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: initial %g must be positive (or 0 for the "
                    "compiled rate)",
                    c->initial);
  if (c->fn) return MXU_OK;
  if (c->kind == MXU_SCHEDULE_COSINE) return check_cosine(c);
  if (c->kind != MXU_SCHEDULE_STEP && c->kind != MXU_SCHEDULE_EXPONENTIAL)
    return mxu_fail(MXU_ERR_ARG, "lr_scheduler: unknown schedule kind %d",
                    (int)c->kind);
  if (!(c->factor > 0) || !isfinite(c->factor))
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: factor %g must be positive and finite",
                    c->factor);
  if (c->kind == MXU_SCHEDULE_STEP && c->every < 1)
    return mxu_fail(MXU_ERR_ARG,
                    "lr_scheduler: step schedule needs every >= 1, got %d",
                    c->every);
  return MXU_OK;
}

mxu_status mxu_lr_scheduler(const mxu_lr_schedule_config *config,
                            mxu_callback *out) {
  if (!config || !out)
    return mxu_fail(MXU_ERR_ARG, "lr_scheduler: config and out are required");
  memset(out, 0, sizeof *out);
  MXU_TRY(check_schedule(config));
  lr_scheduler *s = calloc(1, sizeof *s);
  if (!s) return mxu_fail(MXU_ERR_NOMEM, "lr_scheduler: out of memory");
  s->config = *config;
  out->self = s;
  out->train_begin = scheduler_train_begin;
  out->epoch_begin = scheduler_epoch_begin;
  out->free = free;
  return MXU_OK;
}
