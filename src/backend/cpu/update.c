/* update.c — the Adam and SGD weight updates of the oneDNN backend in
 * plain C, written so that gcc -O2 -march=native vectorises them. */
#include "backend/cpu/cpu.h"

#include <math.h>

/* gcc -O2's "very cheap" cost model vectorises only loops whose trip count
 * is a known multiple of the vector width (no scalar epilogue), so each
 * kernel runs whole blocks of LANES through an inlined fixed-length span,
 * then the tail through the same span. 16 floats = one AVX-512 register,
 * two AVX2 ones. */
#define LANES 16
#define BLOCKED(count, span, ...)                                              \
  do {                                                                         \
    int64_t body_ = (count) - (count) % LANES;                                 \
    for (int64_t at_ = 0; at_ < body_; at_ += LANES)                           \
      span(LANES, at_, __VA_ARGS__);                                           \
    span((int)((count)-body_), body_, __VA_ARGS__);                            \
  } while (0)

/* The moments vectorise; sqrtf keeps a scalar errno path unless the build
 * has -fno-math-errno (gcc ignores it as a function attribute). */
static inline void adam_span(int n, int64_t at, float *restrict w,
                             const float *restrict g, float *restrict m,
                             float *restrict v, const float *hyper) {
  float lr_t = hyper[0], beta_1 = hyper[1], beta_2 = hyper[2];
  float epsilon = hyper[3];
  for (int i = 0; i < n; i++) {
    float gi = g[at + i];
    float mi = beta_1 * m[at + i] + (1.0f - beta_1) * gi;
    float vi = beta_2 * v[at + i] + (1.0f - beta_2) * gi * gi;
    m[at + i] = mi;
    v[at + i] = vi;
    w[at + i] -= lr_t * mi / (sqrtf(vi) + epsilon);
  }
}

void cpu_adam_update(int64_t count, float *w, const float *g, float *m,
                     float *v, float lr_t, float beta_1, float beta_2,
                     float epsilon) {
  const float hyper[4] = {lr_t, beta_1, beta_2, epsilon};
  BLOCKED(count, adam_span, w, g, m, v, hyper);
}

static inline void sgd_span(int n, int64_t at, float *restrict w,
                            const float *restrict g, float lr) {
  for (int i = 0; i < n; i++) w[at + i] -= lr * g[at + i];
}

/* Keras: v = momentum v - lr g; w += v. */
static inline void momentum_span(int n, int64_t at, float *restrict w,
                                 const float *restrict g,
                                 float *restrict velocity, float lr,
                                 float momentum) {
  for (int i = 0; i < n; i++) {
    float vi = momentum * velocity[at + i] - lr * g[at + i];
    velocity[at + i] = vi;
    w[at + i] += vi;
  }
}

/* Nesterov steps from the look-ahead: w += momentum v - lr g. */
static inline void nesterov_span(int n, int64_t at, float *restrict w,
                                 const float *restrict g,
                                 float *restrict velocity, float lr,
                                 float momentum) {
  for (int i = 0; i < n; i++) {
    float vi = momentum * velocity[at + i] - lr * g[at + i];
    velocity[at + i] = vi;
    w[at + i] += momentum * vi - lr * g[at + i];
  }
}

void cpu_sgd_update(int64_t count, float *w, const float *g, float *velocity,
                    float lr, float momentum, int nesterov) {
  if (momentum == 0.0f)
    BLOCKED(count, sgd_span, w, g, lr);
  else if (nesterov)
    BLOCKED(count, nesterov_span, w, g, velocity, lr, momentum);
  else
    BLOCKED(count, momentum_span, w, g, velocity, lr, momentum);
}
