/* rng.c — Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11): a counter-based generator, so the draw for
 * (seed, stream, index) is a pure function and nothing depends on which
 * thread asks or in what order. */
#include "core/core.h"

#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t product = (uint64_t)a * b;
  *hi = (uint32_t)(product >> 32);
  *lo = (uint32_t)product;
}

static void philox(const uint32_t key_in[2], const uint32_t counter[4],
                   uint32_t out[4]) {
  uint32_t k0 = key_in[0], k1 = key_in[1];
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  for (int round = 0; round < 10; round++) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(PHILOX_M0, c0, &hi0, &lo0);
    mulhilo(PHILOX_M1, c2, &hi1, &lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* The four stream ids are folded into a 64-bit stream prefix with one
 * Philox call, so streams that differ in any id are unrelated. */
mxu_rng mxu_rng_make(uint64_t seed, uint32_t id0, uint32_t id1, uint32_t id2,
                     uint32_t id3) {
  mxu_rng rng;
  rng.key[0] = (uint32_t)seed;
  rng.key[1] = (uint32_t)(seed >> 32);
  uint32_t ids[4] = {id0, id1, id2, id3}, mixed[4];
  philox(rng.key, ids, mixed);
  rng.stream[0] = mixed[0];
  rng.stream[1] = mixed[1] ^ mixed[2] ^ mixed[3];
  return rng;
}

void mxu_rng_block(const mxu_rng *rng, uint64_t index, uint32_t out[4]) {
  uint32_t counter[4] = {(uint32_t)index, (uint32_t)(index >> 32),
                         rng->stream[0], rng->stream[1]};
  philox(rng->key, counter, out);
}

/* ---- Sixteen draws at a time ---------------------------------------------
 *
 * mxu_rng_uniform needs only word 0 of each block, but a scalar Philox per
 * value is ~15 ns (dropout over a cifar batch: ~17 ms a step). The ten
 * rounds are the same for every lane, so 16 consecutive indices run side by
 * side; each lane computes exactly the scalar function, so the draws are
 * bit-identical to mxu_rng_block's. mxu_rng_uniform4 takes all four words
 * of the 16 blocks, 64 values a batch: dropout's masks (1.5 M values per
 * 128 cifar images) in a quarter of the time. */
enum { LANES = 16 };

/* 24 random bits: every value is exact in float32 and below 1. */
static float to_uniform(uint32_t word) {
  return (float)(word >> 8) * (1.0f / 16777216.0f);
}

#if defined(__AVX512F__)
/* Each 64-bit lane holds one 32-bit word in its low half, so vpmuludq
 * yields the whole 32x32->64 product per lane (gcc 12 turns the portable
 * loop below into vpmullq, three times the uops). High halves carry junk
 * that vpmuludq ignores and the final vpmovqd drops. */
typedef struct {
  uint64_t key[10][2]; /* round keys, once per call, not per batch */
  uint64_t stream[2];
} lanes_plan;

/* The four words of blocks first .. first + 15: words[w][j] is word w of
 * block first + j. */
static void words16(const lanes_plan *plan, uint64_t first,
                    uint32_t words[4][LANES]) {
  const __m512i m0 = _mm512_set1_epi64(PHILOX_M0);
  const __m512i m1 = _mm512_set1_epi64(PHILOX_M1);
  __m512i a0 = _mm512_add_epi64(_mm512_set1_epi64((long long)first),
                                _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  __m512i b0 = _mm512_add_epi64(_mm512_set1_epi64((long long)first),
                                _mm512_set_epi64(15, 14, 13, 12, 11, 10, 9, 8));
  __m512i a1 = _mm512_srli_epi64(a0, 32), b1 = _mm512_srli_epi64(b0, 32);
  __m512i a2 = _mm512_set1_epi64((long long)plan->stream[0]), b2 = a2;
  __m512i a3 = _mm512_set1_epi64((long long)plan->stream[1]), b3 = a3;
#pragma GCC unroll 10
  for (int round = 0; round < 10; round++) {
    __m512i key0 = _mm512_set1_epi64((long long)plan->key[round][0]);
    __m512i key1 = _mm512_set1_epi64((long long)plan->key[round][1]);
    __m512i pa0 = _mm512_mul_epu32(a0, m0), pa1 = _mm512_mul_epu32(a2, m1);
    __m512i pb0 = _mm512_mul_epu32(b0, m0), pb1 = _mm512_mul_epu32(b2, m1);
    /* 0x96: three-way xor. */
    a0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(pa1, 32), a1, key0, 0x96);
    a2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(pa0, 32), a3, key1, 0x96);
    b0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(pb1, 32), b1, key0, 0x96);
    b2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(pb0, 32), b3, key1, 0x96);
    a1 = pa1;
    a3 = pa0;
    b1 = pb1;
    b3 = pb0;
  }
  const __m512i a[4] = {a0, a1, a2, a3}, b[4] = {b0, b1, b2, b3};
  for (int w = 0; w < 4; w++)
    _mm512_storeu_si512(
        words[w],
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(a[w])),
                           _mm512_cvtepi64_epi32(b[w]), 1));
}

static void plan_lanes(const mxu_rng *rng, lanes_plan *plan) {
  uint32_t k0 = rng->key[0], k1 = rng->key[1];
  for (int round = 0; round < 10; round++) {
    plan->key[round][0] = k0;
    plan->key[round][1] = k1;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  plan->stream[0] = rng->stream[0];
  plan->stream[1] = rng->stream[1];
}
#else
/* Portable: plain lane loops that omp simd vectorises wherever the target
 * has vector integer multiplies, and that stay correct where it has not. */
typedef mxu_rng lanes_plan;

static void plan_lanes(const mxu_rng *rng, lanes_plan *plan) { *plan = *rng; }

static void words16(const lanes_plan *rng, uint64_t first,
                    uint32_t words[4][LANES]) {
  uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
#pragma omp simd
  for (int j = 0; j < LANES; j++) {
    uint64_t index = first + (uint64_t)j;
    c0[j] = (uint32_t)index;
    c1[j] = (uint32_t)(index >> 32);
    c2[j] = rng->stream[0];
    c3[j] = rng->stream[1];
  }
  uint32_t k0 = rng->key[0], k1 = rng->key[1];
  for (int round = 0; round < 10; round++) {
#pragma omp simd
    for (int j = 0; j < LANES; j++) {
      uint64_t p0 = (uint64_t)PHILOX_M0 * c0[j];
      uint64_t p1 = (uint64_t)PHILOX_M1 * c2[j];
      c0[j] = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0;
      c1[j] = (uint32_t)p1;
      c2[j] = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
      c3[j] = (uint32_t)p0;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  memcpy(words[0], c0, sizeof c0);
  memcpy(words[1], c1, sizeof c1);
  memcpy(words[2], c2, sizeof c2);
  memcpy(words[3], c3, sizeof c3);
}
#endif

/* Whole batches of 16 draws (word 0 of 16 blocks each); returns how many
 * values it wrote. */
static size_t uniform_lanes(const mxu_rng *rng, uint64_t first, float *out,
                            size_t count) {
  lanes_plan plan;
  plan_lanes(rng, &plan);
  size_t i = 0;
  uint32_t words[4][LANES];
  for (; i + LANES <= count; i += LANES) {
    words16(&plan, first + i, words);
#pragma omp simd
    for (int j = 0; j < LANES; j++)
      out[i + (size_t)j] = to_uniform(words[0][j]);
  }
  return i;
}

void mxu_rng_uniform(const mxu_rng *rng, uint64_t first, float *out,
                     size_t count) {
  size_t i = uniform_lanes(rng, first, out, count);
  /* The tail (and short calls such as augment's one draw) go scalar. */
  for (; i < count; i++) {
    uint32_t block[4];
    mxu_rng_block(rng, first + i, block);
    out[i] = to_uniform(block[0]);
  }
}

uint32_t mxu_rng_below(const mxu_rng *rng, uint64_t index, uint32_t bound) {
  uint32_t block[4];
  mxu_rng_block(rng, index, block);
  /* Lemire's multiply-shift on 64 random bits: the bias is below 2^-32 of
   * a draw, far under anything a shuffle can show. */
  uint64_t r = ((uint64_t)block[0] << 32) | block[1];
  return (uint32_t)(((unsigned __int128)r * bound) >> 64);
}

/* Value k's block and word: see core.h. */
static float uniform4_at(const mxu_rng *rng, uint64_t k) {
  uint32_t block[4];
  mxu_rng_block(rng, k / 64 * LANES + k % LANES, block);
  return to_uniform(block[k % 64 / LANES]);
}

void mxu_rng_uniform4(const mxu_rng *rng, uint64_t first, float *out,
                      size_t count) {
  size_t i = 0;
  /* Scalar up to a whole group of 64, then groups, then the tail. */
  for (; i < count && (first + i) % 64 != 0; i++)
    out[i] = uniform4_at(rng, first + i);
  lanes_plan plan;
  plan_lanes(rng, &plan);
  uint32_t words[4][LANES];
  for (; i + 4 * LANES <= count; i += 4 * LANES) {
    words16(&plan, (first + i) / 64 * LANES, words);
    for (int w = 0; w < 4; w++)
#pragma omp simd
      for (int j = 0; j < LANES; j++)
        out[i + (size_t)(w * LANES + j)] = to_uniform(words[w][j]);
  }
  for (; i < count; i++) out[i] = uniform4_at(rng, first + i);
}
