/* vec.h — the 16-lane vectors the hand-written CPU kernels compute in
 * (GCC's vector extension: AVX-512 with -march=native on such a CPU,
 * narrower units elsewhere), and the few operations on them that need
 * care. Internal to src/backend/cpu. */
#ifndef MXU_BACKEND_CPU_VEC_H
#define MXU_BACKEND_CPU_VEC_H

#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define LANES 16

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint8_t v16b __attribute__((vector_size(16)));
/* The same, for addresses only 4-byte (or 1-byte) aligned. */
typedef float v16u __attribute__((vector_size(64), aligned(4)));
typedef uint8_t v16bu __attribute__((vector_size(16), aligned(1)));

/* GCC's __builtin_shuffle: lane i of the result is lane m[i] of a (mod
 * 16), or of a then b (mod 32). Clang (the fuzz build) shuffles only by
 * constants, so it gets the lane loop. */
static inline v16 shuffle16(v16 a, v16i m) {
#ifdef __clang__
  v16 r;
  for (int i = 0; i < LANES; i++) r[i] = a[m[i] & 15];
  return r;
#else
  return __builtin_shuffle(a, m);
#endif
}

static inline v16 shuffle32(v16 a, v16 b, v16i m) {
#ifdef __clang__
  v16 r;
  for (int i = 0; i < LANES; i++)
    r[i] = m[i] & 16 ? b[m[i] & 15] : a[m[i] & 15];
  return r;
#else
  return __builtin_shuffle(a, b, m);
#endif
}

/* Lanes of a where mask is set, else of b. */
static inline v16 select16(v16i mask, v16 a, v16 b) {
  return (v16)(((v16i)a & mask) | ((v16i)b & ~mask));
}

/* 16 bytes (window positions) as 32-bit lanes. GCC lowers the generic
 * byte-to-int conversion one lane at a time, so AVX-512 builds say
 * vpmovzxbd themselves. */
static inline __attribute__((always_inline)) v16i
load_bytes16(const uint8_t *p) {
#ifdef __AVX512F__
  return (v16i)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
#else
  v16b raw;
  memcpy(&raw, p, sizeof raw);
  return __builtin_convertvector(raw, v16i);
#endif
}

#endif
