/* fast_math.h — e^-|v|, the sigmoid and tanh as inline float functions
 * for the loops GCC vectorises (libm's expf and tanhf are a call per
 * value): the cpu backend's fused activations and the recurrent cells'
 * gates. The loops that use them are compiled with -fno-trapping-math (GCC
 * vectorises their selects only so; the values are the same) and
 * -ffp-contract=fast (the polynomial's FMAs): see CMakeLists.txt. */
#ifndef MXU_CORE_FAST_MATH_H
#define MXU_CORE_FAST_MATH_H

#include <math.h>
#include <stdint.h>

/* e^-|v| inside the vectorised loops (libm's expf is a call per value):
 * with x = -|v| = n ln 2 + r, |r| <= ln(2) / 2, e^r by its Taylor series
 * to r^7 (within 2 ulp) and 2^n written into the exponent. |v| is
 * clamped to 87 on its bits, where 2^n stays a normal float (beyond it
 * e^-87 beside 1 is nothing; NaN clamps too, and the callers carry v's
 * on). On the bits because GCC compiles a float clamp before
 * a division into both paths and a blend, and the clamped path's
 * constant divisor made denormals of every value: 4x slower.
 * exp_reduce gives r and 2^n. */
typedef struct exp_parts {
  float r, two_n;
} exp_parts;

static inline __attribute__((always_inline)) exp_parts exp_reduce(float v) {
  union {
    float f;
    int32_t i;
  } a = {fabsf(v)};
  a.i = a.i > 0x42AE0000 ? 0x42AE0000 : a.i; /* 87.0f */
  float x = -a.f;
  /* Adding 1.5 * 2^23 rounds x / ln 2 to the integer n, which is then
   * the low bits of t's mantissa. */
  float t = x * 1.44269504f + 12582912.0f, n = t - 12582912.0f;
  union {
    float f;
    int32_t i;
  } bits = {t};
  union {
    int32_t i;
    float f;
  } two_n = {(bits.i - 0x4B400000 + 127) * (1 << 23)};
  /* ln 2 in two parts, the first exact in 8 bits: n * it is exact. */
  exp_parts parts = {x - n * 0.693359375f - n * -2.12194440e-4f, two_n.f};
  return parts;
}

/* (e^r - 1) / r by its Taylor series to r^6. */
static inline __attribute__((always_inline)) float expm1_over(float r) {
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  return p * r + 1.0f;
}

static inline __attribute__((always_inline)) float exp_neg_abs(float v) {
  exp_parts e = exp_reduce(v);
  return (expm1_over(e.r) * e.r + 1.0f) * e.two_n;
}

/* e^-|v| - 1, as accurate near 0 as elsewhere: 2^n (e^r - 1) + (2^n - 1),
 * where the second term is exact. */
static inline __attribute__((always_inline)) float expm1_neg_abs(float v) {
  exp_parts e = exp_reduce(v);
  return expm1_over(e.r) * e.r * e.two_n + (e.two_n - 1.0f);
}

/* sigmoid(v) with e = e^-|v| and q = 1 / (1 + e): q for v >= 0, e q
 * below, so that nothing overflows or cancels; below -87 it is e^-87
 * (1.6e-38) rather than less. NaN stays NaN (a diverged step must show). */
static inline __attribute__((always_inline)) float sigmoid(float v) {
  float e = exp_neg_abs(v), q = 1.0f / (1.0f + e);
  float s = v >= 0.0f ? q : e * q;
  return v == v ? s : v;
}

/* tanh(v) = sign(v) (1 - e^-2|v|) / (1 + e^-2|v|), from e^-2|v| - 1 so
 * that small v keep their digits; 1 beyond |v| = 43.5. NaN stays NaN. */
static inline __attribute__((always_inline)) float tanh_fast(float v) {
  float t = expm1_neg_abs(2.0f * v), y = copysignf(-t / (t + 2.0f), v);
  return v == v ? y : v;
}

#endif
