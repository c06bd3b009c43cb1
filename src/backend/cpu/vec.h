/* vec.h — the vectors the hand-written CPU kernels compute in: one
 * machine register wide (GCC's vector extension: 16 floats on AVX-512, 8
 * with AVX2, 4 with SSE or NEON), and the few operations on them that need
 * care. GCC keeps a vector wider than the machine's registers in memory,
 * not in register pairs: 16-float vectors on AVX2 spilled every
 * accumulator and ran Fashion-MNIST's fused conv at a tenth of the speed.
 * Internal to src/backend/cpu. */
#ifndef MXU_BACKEND_CPU_VEC_H
#define MXU_BACKEND_CPU_VEC_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifdef __AVX512F__
#define LANES 16
#define VEC_REGS 32 /* zmm registers */
#elif defined(__AVX__)
#define LANES 8
#define VEC_REGS 16 /* ymm registers */
#else
#define LANES 4     /* SSE2 (builds without -march=native), NEON */
#define VEC_REGS 16 /* xmm / q registers */
#endif

typedef float vf __attribute__((vector_size(LANES * 4)));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));
typedef uint8_t vb __attribute__((vector_size(LANES)));
/* The same, for addresses only 4-byte (or 1-byte) aligned. */
typedef float vfu __attribute__((vector_size(LANES * 4), aligned(4)));

/* Where channel vector v (channels v * LANES on) starts, from a pixel's
 * first channel, given the floats between neighbouring 16-channel groups
 * (`block`: 16 in NHWC, a plane's 16 channels in nChw16c). */
static inline int64_t vec_offset(int64_t block, int64_t v) {
  return v * LANES / 16 * block + v * LANES % 16;
}

/* GCC's __builtin_shuffle: lane i of the result is lane m[i] of a (mod
 * LANES), or of a then b (mod 2 * LANES). Clang (the fuzz build) shuffles
 * only by constants, so it gets the lane loop. Constant masks compile to
 * the machine's shuffles; for a mask computed at run time use permute. */
static inline vf shuffle(vf a, vi m) {
#ifdef __clang__
  vf r;
  for (int i = 0; i < LANES; i++) r[i] = a[m[i] & (LANES - 1)];
  return r;
#else
  return __builtin_shuffle(a, m);
#endif
}

static inline vf shuffle2(vf a, vf b, vi m) {
#ifdef __clang__
  vf r;
  for (int i = 0; i < LANES; i++)
    r[i] = m[i] & LANES ? b[m[i] & (LANES - 1)] : a[m[i] & (LANES - 1)];
  return r;
#else
  return __builtin_shuffle(a, b, m);
#endif
}

/* Lane i of the result is lane m[i] (not a constant) of a: one vpermps.
 * GCC lowers the generic variable shuffle on AVX2 lane by lane through
 * memory. */
static inline __attribute__((always_inline)) vf permute(vf a, vi m) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  return (vf)_mm256_permutevar8x32_ps((__m256)a, (__m256i)m);
#else
  return shuffle(a, m);
#endif
}

/* The cases 1..16 of a switch over a kernel's run-time block size n, each
 * running CALL(n) with n a constant, so that the inlined kernel keeps its
 * sums in registers. Only n up to `limit` (the kernel's accumulators) is
 * compiled; a larger constant would index past them. */
#define VEC_CASE(CALL, n, limit)                                               \
  case n:                                                                      \
    if ((n) <= (limit)) CALL(n);                                               \
    break
#define VEC_CASES(CALL, limit)                                                 \
  VEC_CASE(CALL, 1, limit);                                                    \
  VEC_CASE(CALL, 2, limit);                                                    \
  VEC_CASE(CALL, 3, limit);                                                    \
  VEC_CASE(CALL, 4, limit);                                                    \
  VEC_CASE(CALL, 5, limit);                                                    \
  VEC_CASE(CALL, 6, limit);                                                    \
  VEC_CASE(CALL, 7, limit);                                                    \
  VEC_CASE(CALL, 8, limit);                                                    \
  VEC_CASE(CALL, 9, limit);                                                    \
  VEC_CASE(CALL, 10, limit);                                                   \
  VEC_CASE(CALL, 11, limit);                                                   \
  VEC_CASE(CALL, 12, limit);                                                   \
  VEC_CASE(CALL, 13, limit);                                                   \
  VEC_CASE(CALL, 14, limit);                                                   \
  VEC_CASE(CALL, 15, limit);                                                   \
  VEC_CASE(CALL, 16, limit);

/* A vector to `to`, past the cache when stream (cpu_streams; `to` then
 * 64-byte aligned). */
static inline __attribute__((always_inline)) void store_vec(float *to, vf v,
                                                            int stream) {
#ifdef __AVX512F__
  if (stream) {
    _mm512_stream_ps(to, (__m512)v);
    return;
  }
#else
  (void)stream;
#endif
  *(vfu *)to = v;
}

/* x in every lane: one broadcast ((vf){0} + x is an add first, as
 * 0 + -0 is +0). */
static inline __attribute__((always_inline)) vf splat(float x) {
  vf v;
  for (int i = 0; i < LANES; i++) v[i] = x;
  return v;
}

/* v, kept in a register: GCC folds a load into every FMA that uses it,
 * and where one vector feeds several FMAs the repeated loads bound the
 * loop (conv_pool's forward: 20 loads a tap for 16 FMAs). */
static inline __attribute__((always_inline)) vf in_register(vf v) {
#if defined(__x86_64__) && !defined(__clang__)
  __asm__("" : "+v"(v));
#endif
  return v;
}

/* Lanes of a where mask is set, else of b. */
static inline vf select_v(vi mask, vf a, vf b) {
  return (vf)(((vi)a & mask) | ((vi)b & ~mask));
}

/* The fused max poolings (conv_pool.c, conv_then_pool.c, conv_wino.c)
 * keep, per output, the window position of its maximum in a workspace
 * byte, this where relu made the output 0: their backward needs neither
 * x nor y. */
#define POOL_RELU_ZERO 0xFF

/* A window's running maximum and, per lane, the position of its first
 * maximum: values are offered in row-major order, and only a strictly
 * greater one replaces, so ties keep the first (as cpu_ref). */
typedef struct window_max {
  vf max;
  vi arg;
} window_max;

static inline __attribute__((always_inline)) window_max window_first(vf v) {
  return (window_max){v, (vi){0}};
}

/* On AVX-512 a compare into a mask register and two masked moves: GCC
 * made each select of a vector mask two instructions, 5-6% of
 * Fashion-MNIST's step in conv_pool's forward. */
static inline __attribute__((always_inline)) void
window_offer(window_max *m, vf v, int position) {
#ifdef __AVX512F__
  __mmask16 greater = _mm512_cmp_ps_mask((__m512)v, (__m512)m->max, _CMP_GT_OQ);
  m->max = (vf)_mm512_mask_mov_ps((__m512)m->max, greater, (__m512)v);
  m->arg = (vi)_mm512_mask_mov_epi32((__m512i)m->arg, greater,
                                     _mm512_set1_epi32(position));
#else
  vi greater = v > m->max;
  m->max = select_v(greater, v, m->max);
  m->arg = (greater & position) | (m->arg & ~greater);
#endif
}

/* relu after the pooling: 0, and POOL_RELU_ZERO for the position, where
 * the maximum is not above 0. */
static inline __attribute__((always_inline)) void window_relu(window_max *m) {
#ifdef __AVX512F__
  __mmask16 positive =
      _mm512_cmp_ps_mask((__m512)m->max, _mm512_setzero_ps(), _CMP_GT_OQ);
  m->max = (vf)_mm512_maskz_mov_ps(positive, (__m512)m->max);
  m->arg = (vi)_mm512_mask_mov_epi32(_mm512_set1_epi32(POOL_RELU_ZERO),
                                     positive, (__m512i)m->arg);
#else
  vi positive = m->max > 0.0f;
  m->max = select_v(positive, m->max, (vf){0});
  m->arg = (positive & m->arg) | (~positive & POOL_RELU_ZERO);
#endif
}

/* The sum of a vector's lanes, folded in halves. */
static inline float lane_sum(vf v) {
#if LANES == 16
  v += shuffle(v, (vi){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  v += shuffle(v, (vi){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
  v += shuffle(v, (vi){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
#elif LANES == 8
  v += shuffle(v, (vi){4, 5, 6, 7, 0, 1, 2, 3});
  v += shuffle(v, (vi){2, 3, 0, 1, 6, 7, 4, 5});
#else
  v += shuffle(v, (vi){2, 3, 0, 1});
#endif
  return v[0] + v[1];
}

/* LANES bytes (window positions) as 32-bit lanes. GCC lowers the generic
 * byte-to-int conversion one lane at a time, so AVX builds say vpmovzxbd
 * themselves. */
static inline __attribute__((always_inline)) vi load_bytes(const uint8_t *p) {
#ifdef __AVX512F__
  return (vi)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
#elif defined(__AVX2__)
  return (vi)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
#else
  vb raw;
  memcpy(&raw, p, sizeof raw);
  return __builtin_convertvector(raw, vi);
#endif
}

/* The other way: each lane's value (0..255) as a byte to p. */
static inline __attribute__((always_inline)) void store_bytes(uint8_t *p,
                                                              vi v) {
#ifdef __AVX512F__
  _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8((__m512i)v));
#elif defined(__AVX2__)
  /* The packs work within 128-bit halves: lanes 0-3 and 4-7 meet in the
   * low 64 bits of each. */
  __m256i words = _mm256_packus_epi32((__m256i)v, (__m256i)v);
  __m128i lo = _mm256_castsi256_si128(words);
  __m128i hi = _mm256_extracti128_si256(words, 1);
  _mm_storel_epi64((__m128i *)p,
                   _mm_packus_epi16(_mm_unpacklo_epi64(lo, hi), lo));
#else
  vb bytes = __builtin_convertvector(v, vb);
  memcpy(p, &bytes, sizeof bytes);
#endif
}

/* Where the own loops multiply in vdpbf16ps under mixed_bfloat16
 * (AVX512_BF16): conv_pool.c, conv_pool_dense.c, conv_bf16.c. */
#if defined(__AVX512BF16__) && LANES == 16
#define VEC_BF16

/* Lane l: bf16 value l of the low 256 bits of `both` in its low half, value
 * l of the high 256 bits in its high half. */
static inline __attribute__((always_inline)) __m512i pair_halves(__m512i both) {
  static const int16_t order[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                    21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                    11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_loadu_si512(order), both);
}

/* Lane l: bf16 of lo[l] in its low half, of hi[l] in its high half, so
 * that vdpbf16ps pairs them with a kernel vector of the same layout. */
static inline __attribute__((always_inline)) __m512i pair_vector(vf lo, vf hi) {
  return pair_halves((__m512i)_mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo));
}

/* 16 values of a tensor as bf16: read as they are where it is held in
 * bf16 (x_bf16, ...), else float32 rounded to nearest even. */
static inline __attribute__((always_inline)) __m256i load_bf16(const void *at,
                                                               int bf16) {
  if (bf16) return _mm256_loadu_si256((const __m256i *)at);
  return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps((const float *)at));
}

/* bf16 of lo and of hi, paired as pair_vector's lanes. */
static inline int32_t pair_of(float lo, float hi) {
  __m128bh both = _mm_cvtneps_pbh(_mm_setr_ps(lo, hi, 0.0f, 0.0f));
  return _mm_cvtsi128_si32((__m128i)both);
}

#endif

#endif
