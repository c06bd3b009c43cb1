/* conv_pool_dense.c — conv_pool.c's op followed by a Flatten and a small
 * linear Dense (a classifier's logits: Fashion-MNIST's whole network), in
 * the same pass. Each pooled row is multiplied into the logits while it
 * is in the cache, and backward turns dlogits into that row's gradient
 * just before the conv's weight gradient reads it. Unfused, the Dense
 * read its input twice and wrote its gradient for the conv to read back,
 * each a pass over memory. Fused, Fashion-MNIST trained at 110-112k
 * images/s against 100k (2 threads; 137k with what came after: even slice
 * counts, patch columns, in_register and splat). Under mixed_bfloat16 the
 * Dense follows the conv into bf16 (vdpbf16ps): pairs of a row's values
 * for the logits, of images for the kernel gradient, of units for the
 * gradient of y (bf16 at 145-155k against float32's 141-144k in one run,
 * with conv_pool.c's tap pairs). */
#include "backend/cpu/conv_pool.h"

#include <omp.h>
#include <string.h>

/* Logits held in registers at once (forward), units a backward pass over
 * the images takes (both as many as the registers hold beside the
 * operands), and the images per partial kernel gradient (a multiple of
 * IMAGE_BLOCK). */
#define UNIT_CHUNK (VEC_REGS == 32 ? 12 : 6)
#define DY_CHUNK (VEC_REGS == 32 ? 10 : 4)
#define DENSE_BLOCK 64
/* vector_grads16 pairs units from k0, a multiple of DY_CHUNK */
_Static_assert(DY_CHUNK % 2 == 0, "DY_CHUNK in pairs of units");

/* A thread's buffers: the Dense's kernel rows that one pooled row meets,
 * transposed to a vector of each unit's for every LANES rows (wt,
 * [row_len / LANES][units][LANES]: one pointer reaches every unit's),
 * their gradient (dwt, the same), a dense block's rows of the gradient of
 * y (g), and two rows of y where inference keeps none. */
typedef struct thread_tiles {
  float *wt, *dwt, *g, *row;
  int32_t *dl; /* in bf16, a dense block's dlogits in pairs (dl_pairs) */
} thread_tiles;

static size_t tile_floats(int64_t row_len, int units) {
  return (size_t)row_len * (2 * (size_t)units + DENSE_BLOCK + 2) +
         DENSE_BLOCK * MAX_UNITS;
}

static thread_tiles tiles_of(const struct cpu_conv_pool *cp, int thread) {
  float *t = cp->tiles + (int64_t)thread * cp->tile_floats;
  int64_t tile = (int64_t)cp->units * cp->row_len;
  float *g = t + 2 * tile, *row = g + DENSE_BLOCK * cp->row_len;
  return (thread_tiles){t, t + tile, g, row,
                        (int32_t *)(row + 2 * cp->row_len)};
}

/* ---- the Dense ----------------------------------------------------------
 * Pooled row py meets kernel rows py * row_len.. of the Dense. Images run
 * row by row (py outer), so those rows, transposed into a thread's tile,
 * are read from L1 by every image, and two images at a time share each
 * load of them. Each image's logits are summed lane-wise
 * over the rows in order and the lanes in order at the end, and the
 * kernel's gradient image by image in order: the bits depend on the
 * images alone, not on the threads. */

#if LANES == 16

/* r[i][j] <-> r[j][i]: pairs of rows interleaved by floats, then by
 * pairs of floats, then by 128-bit lanes, twice. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4)
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
      __m512d a = _mm512_castps_pd(t[i + j]),
              b = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
#pragma GCC unroll 2
  for (int i = 0; i < 16; i += 8)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

/* `blocks` 16 x units blocks of Keras' kernel rows, one after the
 * other, to the tiles' [units][16]: each row one load of 16 floats (what
 * lies past it is the next row's or block's, but at the end of the last
 * block, where the load is masked) and a 16 x 16 transpose in registers
 * (64 shuffles). Against transpose_n's shuffles and selects into each
 * output vector, Fashion-MNIST's step ran 1.015x (bf16) and 1.020x
 * (float32) faster (medians of 7 alternating ratios). The way back, 16
 * stores of rows that overlap ran no faster than transpose_n. */
static inline __attribute__((always_inline)) void
rows_to_cols_n(const float *from, float *to, int64_t blocks, int units) {
  for (int64_t b = 0; b < blocks; b++) {
    const float *f = from + b * units * LANES;
    float *t = to + b * units * LANES;
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
      r[i] = b < blocks - 1 || i * units + 16 <= 16 * units
                 ? _mm512_loadu_ps(f + i * units)
                 : _mm512_maskz_loadu_ps((__mmask16)((1u << units) - 1),
                                         f + i * units);
    transpose16(r);
#pragma GCC unroll 16
    for (int q = 0; q < units; q++) _mm512_storeu_ps(t + q * LANES, r[q]);
  }
}

#endif

/* LANES x units blocks (units vectors each), `blocks` of them one after
 * the other, transposed in registers: output vector q takes, from each
 * pair of input vectors, the lanes idx[q][pair] where mask[q][pair] is
 * set. Inlined with a constant units (transpose), the loops unroll.
 * Gathers took 1.2 cycles a float here, a scalar loop 2. */
static inline __attribute__((always_inline)) void
transpose_n(const vi (*idx)[PAIRS], const vi (*mask)[PAIRS], const float *from,
            float *to, int64_t blocks, int units) {
  for (int64_t b = 0; b < blocks; b++) {
    vf in[2 * PAIRS];
    const float *f = from + b * units * LANES;
    float *t = to + b * units * LANES;
#pragma GCC unroll 16
    for (int q = 0; q < units; q++) in[q] = *(const vfu *)(f + q * LANES);
    in[units] = (vf){0}; /* the odd one's pair */
#pragma GCC unroll 16
    for (int q = 0; q < units; q++) {
      vf o = {0};
#pragma GCC unroll 9
      for (int p = 0; p < (units + 1) / 2; p++)
        o = select_v(mask[q][p], shuffle2(in[2 * p], in[2 * p + 1], idx[q][p]),
                     o);
      *(vfu *)(t + q * LANES) = o;
    }
  }
}

#define TRANSPOSE(N) transpose_n(idx, mask, from, to, blocks, N)
#define TO_COLS(N) rows_to_cols_n(from, to, blocks, N)

/* Keras' kernel rows (to_cols) to the tiles' layout, or back. */
static void transpose(const struct cpu_conv_pool *cp, int to_cols,
                      const float *from, float *to, int64_t rows) {
  const vi(*idx)[PAIRS] = to_cols ? cp->to_cols : cp->to_rows;
  const vi(*mask)[PAIRS] = to_cols ? cp->to_cols_mask : cp->to_rows_mask;
  int64_t blocks = rows / LANES;
#if LANES == 16
  if (to_cols) {
    switch (cp->units) { VEC_CASES(TO_COLS, MAX_UNITS) }
    return;
  }
#endif
  switch (cp->units) { VEC_CASES(TRANSPOSE, MAX_UNITS) }
}

/* The tables: `rows` transposes Keras' [LANES][units] rows to [units]
 * [LANES] columns, else the other way. In either, element e of the
 * row-major block is row e / units, unit e % units. */
static void transpose_tables(struct cpu_conv_pool *cp, int rows,
                             vi (*idx)[PAIRS], vi (*mask)[PAIRS]) {
  int u = cp->units;
  for (int q = 0; q < u; q++)
    for (int p = 0; p < (u + 1) / 2; p++)
      for (int l = 0; l < LANES; l++) {
        /* The input vector and lane that lane l of output q reads. */
        int e = rows ? l * u + q : q * LANES + l;
        int from = rows ? e / LANES : e % u, lane = rows ? e % LANES : e / u;
        int in = from / 2 == p;
        idx[q][p][l] = in ? (from % 2) * LANES + lane : 0;
        mask[q][p][l] = in ? -1 : 0;
      }
}

static void kernel_tile(const struct cpu_conv_pool *cp, const float *kernel,
                        int py, float *wt) {
  transpose(cp, 1, kernel + py * cp->row_len * cp->units, wt, cp->row_len);
}

/* The tile's gradient back into Keras' [in, units] rows of pooled row py. */
static void kernel_tile_out(const struct cpu_conv_pool *cp, const float *dwt,
                            int py, float *dkernel) {
  transpose(cp, 0, dwt, dkernel + py * cp->row_len * cp->units, cp->row_len);
}

#ifdef VEC_BF16

/* In bf16 the forward's tile holds kernel rows v.. v + 31 of unit k as
 * one vector of 32 in order ([row_len / 32][units][32]), so that each
 * vdpbf16ps multiplies 32 of a row of y, in order too, into 16 lanes:
 * made from the float32 tile. */
static void kernel_tile16(const struct cpu_conv_pool *cp, const float *wt,
                          uint16_t *wt16) {
  int64_t u = cp->units;
  for (int64_t v = 0; v < cp->row_len; v += 32)
    for (int64_t k = 0; k < u; k++) {
      const float *lo = wt + (v * u + k * LANES);
      __m512 hi = v + LANES < cp->row_len ? _mm512_loadu_ps(lo + u * LANES)
                                          : _mm512_setzero_ps(); /* a tail */
      _mm512_storeu_si512(wt16 + v * u + k * 32, (__m512i)_mm512_cvtne2ps_pbh(
                                                     hi, _mm512_loadu_ps(lo)));
    }
}

#endif

/* Units k0.. (nk) of ni (1 or 2) images' logit lanes, plus their rows'
 * share: each load of the tile feeds both. tile: the float32 tile, or in
 * bf16 (a constant) kernel_tile16's. */
static inline __attribute__((always_inline)) void
logit_lanes(const struct cpu_conv_pool *cp, const float *const y[2],
            const void *tile, int k0, int nk, int ni, int bf16,
            float *const sums[2]) {
  vf acc[2][UNIT_CHUNK];
#pragma GCC unroll 2
  for (int i = 0; i < ni; i++)
#pragma GCC unroll 16
    for (int k = 0; k < nk; k++)
      acc[i][k] = *(const vf *)(sums[i] + (k0 + k) * LANES);
  for (int64_t v = 0; v < cp->row_len; v += bf16 ? 32 : LANES) {
#ifdef VEC_BF16
    if (bf16) {
      __m512bh yv[2];
      int tail = v + LANES == cp->row_len; /* rows in sixteens, not 32s */
#pragma GCC unroll 2
      for (int i = 0; i < ni; i++)
        yv[i] = _mm512_cvtne2ps_pbh(tail ? _mm512_setzero_ps()
                                         : _mm512_loadu_ps(y[i] + v + LANES),
                                    _mm512_loadu_ps(y[i] + v));
      const uint16_t *wv = (const uint16_t *)tile + v * cp->units;
#pragma GCC unroll 16
      for (int k = 0; k < nk; k++) {
        vf wk = in_register((vf)_mm512_loadu_si512(wv + (k0 + k) * 32));
#pragma GCC unroll 2
        for (int i = 0; i < ni; i++)
          acc[i][k] =
              (vf)_mm512_dpbf16_ps((__m512)acc[i][k], yv[i], (__m512bh)wk);
      }
      continue;
    }
#endif
    const float *wt = tile;
    vf yv[2];
#pragma GCC unroll 2
    for (int i = 0; i < ni; i++) yv[i] = *(const vfu *)(y[i] + v);
#pragma GCC unroll 16
    for (int k = 0; k < nk; k++) {
      vf wk = in_register(*(const vf *)(wt + v * cp->units + (k0 + k) * LANES));
#pragma GCC unroll 2
      for (int i = 0; i < ni; i++) acc[i][k] += yv[i] * wk;
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < ni; i++)
#pragma GCC unroll 16
    for (int k = 0; k < nk; k++)
      *(vf *)(sums[i] + (k0 + k) * LANES) = acc[i][k];
}

#define LOGITS(N, NI, BF16) logit_lanes(cp, y, tile, k0, N, NI, BF16, sums)
#define LOGITS_1(N) LOGITS(N, 1, 0)
#define LOGITS_2(N) LOGITS(N, 2, 0)
#define LOGITS16_1(N) LOGITS(N, 1, 1)
#define LOGITS16_2(N) LOGITS(N, 2, 1)

/* ni images' logit lanes, plus the row's share: tile is the float32 tile
 * or, where the Dense runs bf16, kernel_tile16's. */
static void logit_rows(const struct cpu_conv_pool *cp, const float *const y[2],
                       const void *tile, int ni, float *const sums[2]) {
  for (int k0 = 0; k0 < cp->units; k0 += UNIT_CHUNK) {
    int nk = cp->units - k0 < UNIT_CHUNK ? cp->units - k0 : UNIT_CHUNK;
#ifdef VEC_BF16
    if (cp->dense16) {
      if (ni == 2) {
        switch (nk) { VEC_CASES(LOGITS16_2, UNIT_CHUNK) }
      } else {
        switch (nk) { VEC_CASES(LOGITS16_1, UNIT_CHUNK) }
      }
      continue;
    }
#endif
    if (ni == 2) {
      switch (nk) { VEC_CASES(LOGITS_2, UNIT_CHUNK) }
    } else {
      switch (nk) { VEC_CASES(LOGITS_1, UNIT_CHUNK) }
    }
  }
}

/* Images [lo, hi): y (into the workspace when training) and logits; cols:
 * the thread's conv_pool columns. */
static void dense_forward_range(const struct cpu_conv_pool *cp, int lo, int hi,
                                const float *x, const float *const w[],
                                float *logits, float *y, uint8_t *ws,
                                thread_tiles t, float *cols) {
  int64_t in_size = (int64_t)cp->in_h * cp->in_w * cp->in_c;
  int64_t lanes = cp->units * LANES;
  const float *b = cp->has_bias ? w[MXU_CPD_CONV_B] : NULL;
  memset(cp->sums + lo * lanes, 0, (size_t)((hi - lo) * lanes) * sizeof(float));
  const void *tile = t.wt;
#ifdef VEC_BF16
  if (cp->dense16) tile = t.dwt; /* its bf16 copy, where backward's goes */
#endif
  for (int py = 0; py < cp->out_h; py++) {
    kernel_tile(cp, w[MXU_CPD_DENSE_W], py, t.wt);
#ifdef VEC_BF16
    if (cp->dense16) kernel_tile16(cp, t.wt, (uint16_t *)t.dwt);
#endif
    for (int i0 = lo; i0 < hi; i0 += 2) {
      int ni = hi - i0 < 2 ? 1 : 2;
      const float *rows[2];
      float *sums[2];
      for (int i = 0; i < ni; i++) {
        if (i0 + i + 2 < hi)
          cpu_conv_pool_prefetch(cp, x + (i0 + i + 2) * in_size, py);
        int64_t at = (i0 + i) * cp->image_stride + py * cp->row_stride;
        float *row = y ? y + at : t.row + i * cp->row_len;
        cpu_conv_pool_row(cp, x + (i0 + i) * in_size, w[MXU_CPD_CONV_W], b, py,
                          row, ws ? ws + at : NULL, cols);
        rows[i] = row;
        sums[i] = cp->sums + (i0 + i) * lanes;
      }
      logit_rows(cp, rows, tile, ni, sums);
    }
  }
  const float *db = cp->has_dense_bias ? w[MXU_CPD_DENSE_B] : NULL;
  for (int i = lo; i < hi; i++)
    for (int k = 0; k < cp->units; k++) {
      const float *lane = cp->sums + i * lanes + k * LANES;
      float sum = 0.0f;
      for (int l = 0; l < LANES; l++) sum += lane[l];
      logits[(int64_t)i * cp->units + k] = sum + (db ? db[k] : 0.0f);
    }
}

/* The workspace of conv_pool_dense: y, the gradient of y (kept for dx
 * only), then conv_pool's argmax bytes. */
static float *workspace_dy(const struct cpu_conv_pool *cp, void *workspace) {
  return (float *)workspace + cp->n * cp->out_h * cp->row_len;
}

static uint8_t *workspace_arg(const struct cpu_conv_pool *cp, void *workspace) {
  return (uint8_t *)(workspace_dy(cp, workspace) +
                     cp->n * cp->out_h * cp->row_len);
}

void cpu_conv_pool_dense_forward(mxu_op *op, int training, const float *x,
                                 const float *const w[MXU_CPD_PARAMS],
                                 float *logits, void *workspace) {
  const struct cpu_conv_pool *cp = op->conv_pool;
  float *y = training ? workspace : NULL;
  uint8_t *ws = training ? workspace_arg(cp, workspace) : NULL;
  int threads = cpu_conv_pool_threads(cp, cp->n);
  cpu_conv_pool_weights(cp, w[MXU_CPD_CONV_W]);
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    dense_forward_range(cp, cp->n * t / nt, cp->n * (t + 1) / nt, x, w, logits,
                        y, ws, tiles_of(cp, t),
                        cp->cols + (int64_t)t * cp->col_floats);
  }
}

/* Units k0.. (nk) of the kernel gradient of pooled row py's vector v,
 * over images [first, last) in order, and the gradient of their y there
 * (into g, which the first chunk starts): a little GEMM whose kernel
 * vectors and sums stay in registers while the images go by, each
 * broadcast of dlogits feeding both products. */
static inline __attribute__((always_inline)) void
vector_grads(const struct cpu_conv_pool *cp, const float *y,
             const float *dlogits, const float *wt, float *dwt, float *g,
             int64_t first, int64_t last, int64_t v, int k0, int nk) {
  vf wk[DY_CHUNK], acc[DY_CHUNK];
#pragma GCC unroll 16
  for (int k = 0; k < nk; k++)
    wk[k] = *(const vf *)(wt + v * cp->units + (k0 + k) * LANES),
    acc[k] = (vf){0};
  for (int64_t i = first; i < last; i++) {
    const float *yi = y + i * cp->image_stride + v;
    vf yv = *(const vfu *)yi;
    /* The image's next vector, needed one pass over the images from now:
     * y comes from memory, a slice's rows at a time, too many streams for
     * the hardware prefetcher (40% of this loop waited on it). */
    __builtin_prefetch(yi + LANES);
    float *gi = g + (i - first) * cp->row_len + v;
    vf gv = k0 ? *(const vf *)gi : (vf){0};
    const float *dl = dlogits + i * cp->units + k0;
#pragma GCC unroll 16
    for (int k = 0; k < nk; k++) {
      acc[k] += dl[k] * yv;
      gv += dl[k] * wk[k];
    }
    *(vf *)gi = gv;
  }
#pragma GCC unroll 16
  for (int k = 0; k < nk; k++)
    *(vf *)(dwt + v * cp->units + (k0 + k) * LANES) = acc[k];
}

#define VECTOR_GRADS(N)                                                        \
  vector_grads(cp, y, dlogits, wt, dwt, g, first, last, v, k0, N)

#ifdef VEC_BF16

/* A dense block's dlogits as bf16 pairs, for vector_grads16: of images
 * (i, i + 1) for each unit, [(i - first) / 2][units], then of units
 * (k, k + 1) for each image, [i - first][(units + 1) / 2]; a missing
 * image or unit 0. */
static void dl_pairs(const struct cpu_conv_pool *cp, const float *dlogits,
                     int64_t first, int64_t last, int32_t *dl) {
  int u = cp->units, up = (u + 1) / 2;
  int64_t n = last - first;
  int32_t *unit = dl + (n + 1) / 2 * u;
  const float *d = dlogits + first * u;
  for (int64_t i = 0; i < n; i += 2)
    for (int k = 0; k < u; k++)
      dl[i / 2 * u + k] =
          pair_of(d[i * u + k], i + 1 < n ? d[(i + 1) * u + k] : 0.0f);
  for (int64_t i = 0; i < n; i++)
    for (int p = 0; p < up; p++)
      unit[i * up + p] = pair_of(d[i * u + 2 * p],
                                 2 * p + 1 < u ? d[i * u + 2 * p + 1] : 0.0f);
}

/* One image's gradient of y at vector v from units k0.. (nk), in pairs;
 * dl: its unit pairs from k0. After the last units it is rounded to bf16,
 * as Keras' bf16 Dense passes it on, so that the conv's weight and bias
 * gradients and dx all see the same values. */
static inline __attribute__((always_inline)) void
image_grad16(const __m512bh *wp, const int32_t *dl, int nk, int k0, int last,
             float *gi) {
  vf gv = k0 ? *(const vf *)gi : (vf){0};
#pragma GCC unroll 8
  for (int p = 0; p < (nk + 1) / 2; p++)
    gv = (vf)_mm512_dpbf16_ps((__m512)gv, (__m512bh)_mm512_set1_epi32(dl[p]),
                              wp[p]);
  if (last) {
    __m256i rounded = (__m256i)_mm512_cvtneps_pbh((__m512)gv);
    gv = (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(rounded), 16);
  }
  *(vf *)gi = gv;
}

/* vector_grads in bf16: two images at a time, their y vectors paired in
 * lanes for the kernel gradient, each image's gradient of y from pairs
 * of units. dl: dl_pairs'. */
static inline __attribute__((always_inline)) void
vector_grads16(const struct cpu_conv_pool *cp, const float *y,
               const int32_t *dl, const float *wt, float *dwt, float *g,
               int64_t first, int64_t last, int64_t v, int k0, int nk) {
  int u = cp->units, up = (u + 1) / 2;
  const int32_t *unit = dl + (last - first + 1) / 2 * u;
  __m512bh wp[(DY_CHUNK + 1) / 2];
  vf acc[DY_CHUNK];
#pragma GCC unroll 8
  for (int p = 0; p < (nk + 1) / 2; p++) {
    const float *w0 = wt + v * u + (k0 + 2 * p) * LANES;
    vf hi = k0 + 2 * p + 1 < u ? *(const vf *)(w0 + LANES) : (vf){0};
    wp[p] = (__m512bh)pair_vector(*(const vf *)w0, hi);
  }
#pragma GCC unroll 16
  for (int k = 0; k < nk; k++) acc[k] = (vf){0};
  for (int64_t i = first; i < last; i += 2) {
    int two = i + 1 < last;
    const float *yi = y + i * cp->image_stride + v;
    vf y1 = two ? *(const vfu *)(yi + cp->image_stride) : (vf){0};
    __m512bh yp = (__m512bh)pair_vector(*(const vfu *)yi, y1);
    /* as vector_grads */
    __builtin_prefetch(yi + LANES);
    __builtin_prefetch(yi + cp->image_stride + LANES);
    const int32_t *di = dl + (i - first) / 2 * u + k0;
#pragma GCC unroll 16
    for (int k = 0; k < nk; k++)
      acc[k] = (vf)_mm512_dpbf16_ps((__m512)acc[k], yp,
                                    (__m512bh)_mm512_set1_epi32(di[k]));
    float *gi = g + (i - first) * cp->row_len + v;
    const int32_t *ui = unit + (i - first) * up + k0 / 2;
    int end = k0 + nk == u;
    image_grad16(wp, ui, nk, k0, end, gi);
    if (two) image_grad16(wp, ui + up, nk, k0, end, gi + cp->row_len);
  }
#pragma GCC unroll 16
  for (int k = 0; k < nk; k++) *(vf *)(dwt + v * u + (k0 + k) * LANES) = acc[k];
}

#define VECTOR_GRADS16(N)                                                      \
  vector_grads16(cp, y, dl, wt, dwt, g, first, last, v, k0, N)

#endif

/* Pooled row py's share of the Dense's backward over images [first,
 * last): dl is dl_pairs' where the Dense runs bf16. */
static void row_dense_grads(const struct cpu_conv_pool *cp, const float *y,
                            const float *dlogits, const int32_t *dl,
                            const float *wt, float *dwt, float *g,
                            int64_t first, int64_t last) {
  (void)dl;
  for (int k0 = 0; k0 < cp->units; k0 += DY_CHUNK) {
    int nk = cp->units - k0 < DY_CHUNK ? cp->units - k0 : DY_CHUNK;
    for (int64_t v = 0; v < cp->row_len; v += LANES) {
#ifdef VEC_BF16
      if (cp->dense16) {
        switch (nk) { VEC_CASES(VECTOR_GRADS16, DY_CHUNK) }
        continue;
      }
#endif
      switch (nk) { VEC_CASES(VECTOR_GRADS, DY_CHUNK) }
    }
  }
}

/* Dense block blk: its images' conv partials, and its share of the
 * Dense's kernel gradient into dkernel, row by row. dy_keep: where dx
 * needs the gradient of y kept, else NULL. */
static void dense_backward_block(const struct cpu_conv_pool *cp, int64_t blk,
                                 const float *x, const float *kernel,
                                 const float *dlogits, const float *y,
                                 const uint8_t *ws, float *dy_keep,
                                 float *dkernel, thread_tiles t, float *cols) {
  int64_t in_size = (int64_t)cp->in_h * cp->in_w * cp->in_c;
  int64_t first = blk * DENSE_BLOCK;
  int64_t last = first + DENSE_BLOCK < cp->n ? first + DENSE_BLOCK : cp->n;
  int64_t per = (int64_t)(cp->taps + 1) * cp->c;
  memset(cp->partial + first / IMAGE_BLOCK * per, 0,
         (size_t)(((last - first + IMAGE_BLOCK - 1) / IMAGE_BLOCK) * per) *
             sizeof(float));
#ifdef VEC_BF16
  if (cp->dense16) dl_pairs(cp, dlogits, first, last, t.dl);
#endif
  for (int py = 0; py < cp->out_h; py++) {
    int64_t row = py * cp->row_stride;
    kernel_tile(cp, kernel, py, t.wt);
    row_dense_grads(cp, y + row, dlogits, t.dl, t.wt, t.dwt, t.g, first, last);
    for (int64_t i = first; i < last; i++) {
      const float *g = t.g + (i - first) * cp->row_len;
      int64_t at = i * cp->image_stride + row;
      if (dy_keep) memcpy(dy_keep + at, g, (size_t)cp->row_len * sizeof(float));
      cpu_conv_pool_row_grads(cp, x + i * in_size, py, g, ws + at, i, cols);
    }
    kernel_tile_out(cp, t.dwt, py, dkernel);
  }
}

/* The kernel gradient's block partials, added in block order. */
static void sum_dense_blocks(const struct cpu_conv_pool *cp, int64_t kernel,
                             float *dkernel) {
  const float *part = cp->dense_partial;
  for (int64_t e = 0; e < kernel; e++) dkernel[e] = part[e] + part[kernel + e];
  for (int64_t blk = 2; blk < cp->dense_blocks; blk++)
    for (int64_t e = 0; e < kernel; e++) dkernel[e] += part[blk * kernel + e];
}

void cpu_conv_pool_dense_backward(mxu_op *op, const float *x,
                                  const float *const w[MXU_CPD_PARAMS],
                                  const float *dlogits, void *workspace,
                                  float *const dw[MXU_CPD_PARAMS], float *dx) {
  const struct cpu_conv_pool *cp = op->conv_pool;
  const float *y = workspace;
  const uint8_t *ws = workspace_arg(cp, workspace);
  float *dy_keep = dx ? workspace_dy(cp, workspace) : NULL;
  int64_t kernel = cp->out_h * cp->row_len * cp->units;
  int threads = cpu_conv_pool_threads(cp, cp->dense_blocks);
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    float *cols = cp->cols + (int64_t)t * cp->col_floats;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < cp->dense_blocks; blk++)
      dense_backward_block(
          cp, blk, x, w[MXU_CPD_DENSE_W], dlogits, y, ws, dy_keep,
          cp->dense_blocks > 1 ? cp->dense_partial + blk * kernel
                               : dw[MXU_CPD_DENSE_W],
          tiles_of(cp, t), cols);
  }
  if (cp->dense_blocks > 1) sum_dense_blocks(cp, kernel, dw[MXU_CPD_DENSE_W]);
  if (dw[MXU_CPD_DENSE_B])
    for (int k = 0; k < cp->units; k++) {
      float sum = 0.0f;
      for (int i = 0; i < cp->n; i++)
        sum += dlogits[(int64_t)i * cp->units + k];
      dw[MXU_CPD_DENSE_B][k] = sum;
    }
  cpu_sum_blocks(cp->partial, cp->blocks, cp->taps, cp->c, dw[MXU_CPD_CONV_W],
                 dw[MXU_CPD_CONV_B]);
  if (dx) cpu_conv_pool_dx(cp, w[MXU_CPD_CONV_W], dy_keep, ws, dx);
}

/* ---- create ------------------------------------------------------------- */

/* The Dense this op runs: linear, few units, in the conv's precision,
 * reading the whole pooled image flattened. */
static int dense_fits(const mxu_conv2d_desc *c, const mxu_pool2d_desc *p,
                      const mxu_dense_desc *d) {
  return d->activation == MXU_LINEAR && d->bf16 == c->bf16 && d->out >= 1 &&
         d->out <= MAX_UNITS && d->n == p->n &&
         d->in == (int64_t)p->out_h * p->out_w * p->c;
}

/* conv_pool's op with, in its extra floats, the logit lanes, the kernel
 * gradient's block partials (more than one block only) and every
 * thread's tiles; y, dy and the argmax bytes kept [py][i]. */
mxu_status cpu_conv_pool_dense_create(const mxu_conv2d_desc *c,
                                      const mxu_pool2d_desc *p, int relu,
                                      const mxu_dense_desc *d, mxu_op **out) {
  if (!cpu_conv_pool_fits(c, p) || !dense_fits(c, p, d))
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "conv_pool_dense: this conv, pooling and Dense do not "
                    "fuse");
  int64_t row_len = (int64_t)p->out_w * c->out_c;
  int64_t dense_blocks = (c->n + DENSE_BLOCK - 1) / DENSE_BLOCK;
  size_t sums = (size_t)c->n * (size_t)d->out * LANES;
  size_t kernel = (size_t)p->out_h * (size_t)row_len * (size_t)d->out;
  size_t partial = dense_blocks > 1 ? (size_t)dense_blocks * kernel : 0;
  size_t tiles = tile_floats(row_len, d->out);
  size_t threads = (size_t)cpu_create_threads();
  MXU_TRY(
      cpu_conv_pool_build(c, p, relu, sums + partial + threads * tiles, out));
  struct cpu_conv_pool *cp = (*out)->conv_pool;
  cp->units = d->out;
#ifdef VEC_BF16
  cp->dense16 = d->bf16;
#endif
  cp->has_dense_bias = d->has_bias;
  cp->image_stride = row_len;
  cp->row_stride = c->n * row_len;
  cp->dense_blocks = dense_blocks;
  cp->sums = cp->extra;
  cp->dense_partial = cp->sums + sums;
  cp->tiles = cp->dense_partial + partial;
  cp->tile_floats = (int64_t)tiles;
  transpose_tables(cp, 1, cp->to_cols, cp->to_cols_mask);
  transpose_tables(cp, 0, cp->to_rows, cp->to_rows_mask);
  /* y and its gradient before the argmax bytes */
  (*out)->workspace_bytes *= 1 + 2 * sizeof(float);
  return MXU_OK;
}
