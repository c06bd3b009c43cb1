/* schedules.c — Keras' learning-rate schedules, in float32 with Keras'
 * order of operations, so the rates match Keras' to the last bits. */
#include "model/model.h"

#include <math.h>

#define PI_F 3.14159265358979f

static float piecewise(const mxu_lr_decay *s, int64_t step) {
  for (int i = 0; i < s->boundary_count; i++)
    if (step <= s->boundaries[i]) return s->values[i];
  return s->values[s->boundary_count];
}

static float polynomial(const mxu_lr_decay *s, float step) {
  float decay_steps = (float)s->decay_steps;
  if (s->cycle)
    decay_steps *= step == 0 ? 1.0f : ceilf(step / (float)s->decay_steps);
  else
    step = fminf(step, decay_steps);
  float p = step / decay_steps;
  return (s->initial_learning_rate - s->end_learning_rate) *
             powf(1 - p, s->power) +
         s->end_learning_rate;
}

static float cosine(float step, float decay_steps, float from, float alpha) {
  float completed = step / decay_steps;
  float decayed = 0.5f * (1.0f + cosf(PI_F * completed));
  return from * ((1 - alpha) * decayed + alpha);
}

static float cosine_decay(const mxu_lr_decay *s, float step) {
  float decay_steps = (float)s->decay_steps;
  if (!s->has_warmup)
    return cosine(fminf(step, decay_steps), decay_steps,
                  s->initial_learning_rate, s->alpha);
  float warmup = (float)s->warmup_steps;
  step = fminf(step, decay_steps + warmup);
  if (step < warmup)
    return (s->warmup_target - s->initial_learning_rate) * (step / warmup) +
           s->initial_learning_rate;
  return cosine(step - warmup, decay_steps, s->warmup_target, s->alpha);
}

static float restarts(const mxu_lr_decay *s, float step) {
  float completed = step / (float)s->decay_steps, i_restart;
  if (s->t_mul == 1.0f) {
    i_restart = floorf(completed);
    completed -= i_restart;
  } else {
    i_restart =
        floorf(logf(1.0f - completed * (1.0f - s->t_mul)) / logf(s->t_mul));
    float sum_r = (1.0f - powf(s->t_mul, i_restart)) / (1.0f - s->t_mul);
    completed = (completed - sum_r) / powf(s->t_mul, i_restart);
  }
  float decayed =
      0.5f * powf(s->m_mul, i_restart) * (1.0f + cosf(PI_F * completed));
  return s->initial_learning_rate * ((1 - s->alpha) * decayed + s->alpha);
}

float mxu_schedule_rate(const mxu_lr_decay *s, int64_t step) {
  float t = (float)step, p = t / (float)(s->decay_steps ? s->decay_steps : 1);
  if (s->staircase) p = floorf(p);
  switch (s->kind) {
  case MXU_EXPONENTIAL_DECAY:
    return s->initial_learning_rate * powf(s->decay_rate, p);
  case MXU_PIECEWISE_CONSTANT: return piecewise(s, step);
  case MXU_POLYNOMIAL_DECAY: return polynomial(s, t);
  case MXU_INVERSE_TIME_DECAY:
    return s->initial_learning_rate / (1.0f + s->decay_rate * p);
  case MXU_COSINE_DECAY: return cosine_decay(s, t);
  case MXU_COSINE_DECAY_RESTARTS: return restarts(s, t);
  default: return s->initial_learning_rate;
  }
}
