/* optimizer.c — cpu_ref's Adam and SGD steps, each exactly the float32
 * formula in backend.h, one parameter at a time, so faster backends can be
 * held to it. */
#include "backend/cpu_ref/ref.h"

#include <math.h>

void mxu_ref_adam_update(int64_t count, float *w, const float *g, float *m,
                         float *v, float lr_t, float beta_1, float beta_2,
                         float epsilon) {
  for (int64_t i = 0; i < count; i++) {
    m[i] = beta_1 * m[i] + (1.0f - beta_1) * g[i];
    v[i] = beta_2 * v[i] + (1.0f - beta_2) * g[i] * g[i];
    w[i] -= lr_t * m[i] / (sqrtf(v[i]) + epsilon);
  }
}

/* Keras keeps no velocity without momentum, so none is touched then. */
void mxu_ref_sgd_update(int64_t count, float *w, const float *g,
                        float *velocity, float lr, float momentum,
                        int nesterov) {
  for (int64_t i = 0; i < count; i++) {
    if (momentum == 0.0f) {
      w[i] -= lr * g[i];
      continue;
    }
    velocity[i] = momentum * velocity[i] - lr * g[i];
    if (nesterov)
      w[i] += momentum * velocity[i] - lr * g[i];
    else
      w[i] += velocity[i];
  }
}
