/* update.c — elementwise kernels of the oneDNN backend in plain C: the
 * dropout multiply and the Adam and SGD weight updates. Loops over
 * restrict pointers so gcc -O2 -march=native vectorises them. */
#include "backend/cpu/cpu.h"

#include <math.h>

static void mul(int64_t count, const float *restrict a,
                const float *restrict b, float *restrict y) {
  for (int64_t i = 0; i < count; i++) y[i] = a[i] * b[i];
}

static void mul_into(int64_t count, float *restrict y,
                     const float *restrict b) {
  for (int64_t i = 0; i < count; i++) y[i] *= b[i];
}

/* Dropout may run in place (y == a or y == b), which restrict forbids for
 * the three-pointer loop. */
void cpu_multiply(int64_t count, const float *a, const float *b, float *y) {
  if (y == a && y != b)
    mul_into(count, y, b);
  else if (y == b && y != a)
    mul_into(count, y, a);
  else if (y != a)
    mul(count, a, b, y);
  else
    for (int64_t i = 0; i < count; i++) y[i] *= y[i];
}

/* sqrtf of a non-negative v never sets errno, but without -fno-math-errno
 * gcc keeps the errno path and will not vectorise; the builtin with this
 * function-level flag lets it emit vsqrtps. */
__attribute__((optimize("no-math-errno"))) void
cpu_adam_update(int64_t count, float *restrict w, const float *restrict g,
                float *restrict m, float *restrict v, float lr_t,
                float beta_1, float beta_2, float epsilon) {
  float one_minus_b1 = 1.0f - beta_1, one_minus_b2 = 1.0f - beta_2;
  for (int64_t i = 0; i < count; i++) {
    float mi = beta_1 * m[i] + one_minus_b1 * g[i];
    float vi = beta_2 * v[i] + one_minus_b2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr_t * mi / (sqrtf(vi) + epsilon);
  }
}

static void sgd_plain(int64_t count, float *restrict w,
                      const float *restrict g, float lr) {
  for (int64_t i = 0; i < count; i++) w[i] -= lr * g[i];
}

static void sgd_momentum(int64_t count, float *restrict w,
                         const float *restrict g, float *restrict velocity,
                         float lr, float momentum) {
  for (int64_t i = 0; i < count; i++) {
    float vi = momentum * velocity[i] - lr * g[i];
    velocity[i] = vi;
    w[i] += vi;
  }
}

static void sgd_nesterov(int64_t count, float *restrict w,
                         const float *restrict g, float *restrict velocity,
                         float lr, float momentum) {
  for (int64_t i = 0; i < count; i++) {
    float vi = momentum * velocity[i] - lr * g[i];
    velocity[i] = vi;
    w[i] += momentum * vi - lr * g[i];
  }
}

void cpu_sgd_update(int64_t count, float *w, const float *g, float *velocity,
                    float lr, float momentum, int nesterov) {
  if (momentum == 0.0f)
    sgd_plain(count, w, g, lr);
  else if (nesterov)
    sgd_nesterov(count, w, g, velocity, lr, momentum);
  else
    sgd_momentum(count, w, g, velocity, lr, momentum);
}
