/* rng.c — Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11): a counter-based generator, so the draw for
 * (seed, stream, index) is a pure function and nothing depends on which
 * thread asks or in what order. */
#include "core/core.h"

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

void mxu_rng_uniform(const mxu_rng *rng, uint64_t first, float *out,
                     size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t block[4];
    mxu_rng_block(rng, first + i, block);
    /* 24 random bits: every value is exact in float32 and below 1. */
    out[i] = (float)(block[0] >> 8) * (1.0f / 16777216.0f);
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
