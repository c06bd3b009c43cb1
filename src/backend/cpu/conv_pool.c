/* conv_pool.c — a Conv2D with few input channels and the 2x2 max pooling
 * after it (and relu), in one pass. Fashion-MNIST's first layer writes a
 * 26x26x64 output per image (173 KB, 16x its input): unfused, that tensor
 * goes to memory and back four times a step (conv forward, pool forward,
 * pool backward, conv backward weights), which made the model
 * memory-bound at a tenth of the machine's arithmetic peak, and oneDNN 2.6
 * ran the 1-channel backward-weights at ~10 GFLOP/s. Here each 2x2 window
 * of conv outputs is computed in registers and only its maximum is
 * stored, with the window position of the maximum as one byte (0xFF when
 * relu zeroed it, so backward needs neither y nor a mask).
 *
 * The lanes are output channels, a register's worth to a vector (vec.h:
 * 16 on AVX-512, 8 on AVX2); the input
 * pixels are broadcast. Backward adds the weight gradient over fixed blocks
 * of images and then the blocks in order, so its bits do not depend on the
 * thread count. Shapes these loops do not take (more input channels) go to
 * conv_then_pool.c, which fuses less; conv_pool_dense.c runs a Flatten
 * and small Dense after the op too. */
#include "backend/cpu/conv_pool.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Channel vectors per forward tile (4 x that accumulators), and
 * weight-gradient accumulators held at once: as many as the registers
 * take beside the operands. */
#define MAX_BLOCKS (VEC_REGS == 32 ? 4 : 2)
#define TAP_CHUNK (VEC_REGS == 32 ? 12 : 9)

typedef float v4u __attribute__((vector_size(16), aligned(4)));

static const char CONV_POOL[] = "conv_pool";

/* Offset of sub-position s of a 2x2 window from its top-left input. */
static int64_t window_off(const struct cpu_conv_pool *cp, int s) {
  return ((int64_t)(s >> 1) * cp->in_w + (s & 1)) * cp->in_c;
}

/* ---- forward ------------------------------------------------------------ */

/* Each window's maximum of nb channel vectors from channel c0 (relu'd),
 * and where it was. */
static inline __attribute__((always_inline)) void
window_store(const struct cpu_conv_pool *cp, vf acc[WINDOW][MAX_BLOCKS], int c0,
             int nb, float *y, uint8_t *ws) {
#pragma GCC unroll 4
  for (int j = 0; j < nb; j++) {
    window_max m = window_first(acc[0][j]);
#pragma GCC unroll 4
    for (int s = 1; s < WINDOW; s++) window_offer(&m, acc[s][j], s);
    if (cp->relu) window_relu(&m);
    *(vfu *)(y + c0 + j * LANES) = m.max;
    if (ws) store_bytes(ws + c0 + j * LANES, m.arg);
  }
}

/* Accumulators of nb channel vectors from c0, each the bias. */
static inline __attribute__((always_inline)) void
window_init(vf acc[WINDOW][MAX_BLOCKS], const float *b, int c0, int nb) {
#pragma GCC unroll 4
  for (int j = 0; j < nb; j++) {
    vf bias = {0};
    if (b) bias = *(const vfu *)(b + c0 + j * LANES);
#pragma GCC unroll 4
    for (int s = 0; s < WINDOW; s++) acc[s][j] = bias;
  }
}

/* One pooled pixel, nb channel vectors from channel c0: the four conv
 * outputs of its window in registers, then their maximum. Inlined with a
 * constant nb, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void
forward_tile(const struct cpu_conv_pool *cp, const float *x0, const float *w,
             const float *b, int c0, int nb, float *y, uint8_t *ws) {
  vf acc[WINDOW][MAX_BLOCKS];
  window_init(acc, b, c0, nb);
  int64_t off[WINDOW];
  for (int s = 0; s < WINDOW; s++) off[s] = window_off(cp, s);
  for (int t = 0; t < cp->taps; t++) {
    const float *wt = w + (int64_t)t * cp->c + c0;
    const float *xt = x0 + cp->tap_off[t];
    vf wv[MAX_BLOCKS];
#pragma GCC unroll 4
    for (int j = 0; j < nb; j++)
      wv[j] = in_register(*(const vfu *)(wt + j * LANES));
#pragma GCC unroll 4
    for (int s = 0; s < WINDOW; s++) {
      vf xv = splat(xt[off[s]]);
#pragma GCC unroll 4
      for (int j = 0; j < nb; j++) acc[s][j] += xv * wv[j];
    }
  }
  window_store(cp, acc, c0, nb, y, ws);
}

/* ---- forward in bf16 ----------------------------------------------------
 * One vdpbf16ps multiplies a pair of taps (2k, 2k + 1) into 16 channels:
 * 5 products where float32 takes 9 FMAs for a 3x3 kernel, at the same
 * rate. Its x operand is one 32-bit pair broadcast from memory, so each
 * pooled row's inputs are laid out first as those pairs (row_pairs):
 * [window row][pair][conv column], a conv pixel's pairs at a stride,
 * two loads and a conversion per 16 of them. The sums stay float32, and
 * the products of bf16 are exact in it, as in Keras' mixed_bfloat16 (bf16
 * inputs and kernel, float32 accumulation). */
#ifdef VEC_BF16

/* Tap pairs (kernels up to 3x3 on the one channel: larger ones run
 * float32) and channel vectors of a bf16 tile: their kernel vectors stay
 * in registers beside the accumulators. */
#define BF16_PAIRS 6
#define BF16_BLOCKS 2

/* Pooled row py's inputs as tap pairs, into pairs: pair k of conv pixel
 * (2 py + sy, col) at (sy * cp->pairs + k) * cp->pair_cols + col. */
static void row_pairs(const struct cpu_conv_pool *cp, const float *x, int py,
                      int32_t *pairs) {
  int cols = 2 * cp->out_w, whole = cp->taps / 2;
  for (int sy = 0; sy < 2; sy++) {
    const float *row = x + (int64_t)(2 * py + sy) * cp->in_w;
    int32_t *to = pairs + sy * cp->pairs * cp->pair_cols;
    for (int c0 = 0; c0 < cols; c0 += LANES) {
      /* no loads past the row's last column: the image may end there */
      __mmask16 m = cols - c0 >= LANES ? 0xFFFF : (1u << (cols - c0)) - 1;
      for (int k = 0; k < whole; k++) {
        vf l = (vf)_mm512_maskz_loadu_ps(m, row + cp->tap_off[2 * k] + c0);
        vf h = (vf)_mm512_maskz_loadu_ps(m, row + cp->tap_off[2 * k + 1] + c0);
        _mm512_storeu_si512(to + k * cp->pair_cols + c0, pair_vector(l, h));
      }
      if (whole < cp->pairs) { /* an odd tap out: the pair's other half 0 */
        vf l = (vf)_mm512_maskz_loadu_ps(m, row + cp->tap_off[2 * whole] + c0);
        _mm512_storeu_si512(to + whole * cp->pair_cols + c0,
                            pair_vector(l, (vf){0}));
      }
    }
  }
}

void cpu_conv_pool_weights(const struct cpu_conv_pool *cp, const float *w) {
  if (!cp->bf16) return;
  for (int k = 0; k < cp->pairs; k++)
    for (int c0 = 0; c0 < cp->c; c0 += LANES) {
      vf lo = *(const vfu *)(w + (int64_t)2 * k * cp->c + c0);
      vf hi = 2 * k + 1 < cp->taps
                  ? *(const vfu *)(w + (int64_t)(2 * k + 1) * cp->c + c0)
                  : (vf){0};
      _mm512_storeu_si512(cp->w16 + 2 * ((int64_t)k * cp->c + c0),
                          pair_vector(lo, hi));
    }
}

/* forward_tile in bf16, at pooled pixel px (pairs: row_pairs' layout), its
 * n_pairs x nb kernel vectors wv held in registers across the row: the
 * tile's loads are then its broadcasts alone, where reloading them took
 * the forward 3.4 us an image against 2.6 (and Fashion-MNIST's step 2.5%
 * longer). */
static inline __attribute__((always_inline)) void
tile_bf16(const struct cpu_conv_pool *cp, const int32_t *pairs,
          const vf wv[BF16_PAIRS][BF16_BLOCKS], int n_pairs, const float *b,
          int px, int c0, int nb, float *y, uint8_t *ws) {
  vf acc[WINDOW][MAX_BLOCKS];
  window_init(acc, b, c0, nb);
  int64_t rows = (int64_t)cp->pairs * cp->pair_cols; /* to window row 1's */
#pragma GCC unroll 6
  for (int k = 0; k < n_pairs; k++) {
    const int32_t *xk = pairs + k * cp->pair_cols + 2 * px;
#pragma GCC unroll 4
    for (int s = 0; s < WINDOW; s++) {
      __m512bh xv = (__m512bh)_mm512_set1_epi32(xk[(s >> 1) * rows + (s & 1)]);
#pragma GCC unroll 2
      for (int j = 0; j < nb; j++)
        acc[s][j] =
            (vf)_mm512_dpbf16_ps((__m512)acc[s][j], xv, (__m512bh)wv[k][j]);
    }
  }
  int64_t at = (int64_t)px * cp->c;
  window_store(cp, acc, c0, nb, y + at, ws ? ws + at : NULL);
}

/* A row's pooled pixels for channel vectors c0.. (nb), with the kernel
 * vectors of its n_pairs (a constant) tap pairs loaded once. */
static inline __attribute__((always_inline)) void
row_block_bf16(const struct cpu_conv_pool *cp, const int32_t *pairs,
               int n_pairs, const float *b, int c0, int nb, float *y,
               uint8_t *ws) {
  vf wv[BF16_PAIRS][BF16_BLOCKS];
#pragma GCC unroll 6
  for (int k = 0; k < n_pairs; k++)
#pragma GCC unroll 2
    for (int j = 0; j < nb; j++)
      wv[k][j] = in_register((vf)_mm512_loadu_si512(
          cp->w16 + 2 * ((int64_t)k * cp->c + c0 + j * LANES)));
  for (int px = 0; px < cp->out_w; px++)
    tile_bf16(cp, pairs, wv, n_pairs, b, px, c0, nb, y, ws);
}

#define ROW_BLOCK_2(N) row_block_bf16(cp, pairs, N, b, c0, 2, y, ws)
#define ROW_BLOCK_1(N) row_block_bf16(cp, pairs, N, b, c0, 1, y, ws)

static void row_bf16(const struct cpu_conv_pool *cp, const float *x,
                     const float *b, int py, float *y, uint8_t *ws,
                     float *cols) {
  int32_t *pairs = (int32_t *)cols;
  row_pairs(cp, x, py, pairs);
  int c0 = 0;
  for (; c0 + BF16_BLOCKS * LANES <= cp->c; c0 += BF16_BLOCKS * LANES)
    switch (cp->pairs) { VEC_CASES(ROW_BLOCK_2, BF16_PAIRS) }
  if (c0 < cp->c) switch (cp->pairs) {
      VEC_CASES(ROW_BLOCK_1, BF16_PAIRS)
    }
}

#else

void cpu_conv_pool_weights(const struct cpu_conv_pool *cp, const float *w) {
  (void)cp, (void)w;
}

#endif

void cpu_conv_pool_prefetch(const struct cpu_conv_pool *cp, const float *x,
                            int py) {
  int64_t row = (int64_t)cp->in_w * cp->in_c;
  const char *from = (const char *)(x + 2 * py * row);
  const char *to = (const char *)(x + (2 * py + cp->patch_h) * row);
  for (; from < to; from += 64) __builtin_prefetch(from);
}

void cpu_conv_pool_row(const struct cpu_conv_pool *cp, const float *x,
                       const float *w, const float *b, int py, float *y,
                       uint8_t *ws, float *cols) {
#ifdef VEC_BF16
  if (cp->bf16) {
    row_bf16(cp, x, b, py, y, ws, cols);
    return;
  }
#endif
  (void)cols;
  for (int px = 0; px < cp->out_w; px++) {
    const float *x0 = x + ((int64_t)2 * py * cp->in_w + 2 * px) * cp->in_c;
    int64_t at = (int64_t)px * cp->c;
    uint8_t *wsp = ws ? ws + at : NULL;
    int c0 = 0;
    for (; c0 + MAX_BLOCKS * LANES <= cp->c; c0 += MAX_BLOCKS * LANES)
      forward_tile(cp, x0, w, b, c0, MAX_BLOCKS, y + at, wsp);
    for (; c0 < cp->c; c0 += LANES)
      forward_tile(cp, x0, w, b, c0, 1, y + at, wsp);
  }
}

static void forward_image(const struct cpu_conv_pool *cp, const float *x,
                          const float *w, const float *b, float *y,
                          uint8_t *ws) {
  float *cols = cp->cols + (int64_t)omp_get_thread_num() * cp->col_floats;
  for (int py = 0; py < cp->out_h; py++)
    cpu_conv_pool_row(cp, x, w, b, py, y + py * cp->row_len,
                      ws ? ws + py * cp->row_len : NULL, cols);
}

void cpu_conv_pool_forward(mxu_op *op, int training, const float *x,
                           const float *w, const float *b, float *y,
                           void *workspace) {
  if (op->conv_then_pool) {
    cpu_conv_then_pool_forward(op, training, x, w, b, y, workspace);
    return;
  }
  const struct cpu_conv_pool *cp = op->conv_pool;
  int64_t in_size = (int64_t)cp->in_h * cp->in_w * cp->in_c;
  int64_t out_size = (int64_t)cp->out_h * cp->out_w * cp->c;
  uint8_t *ws = training ? workspace : NULL;
  cpu_conv_pool_weights(cp, w);
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_conv_pool_threads(cp, cp->n))
  for (int i = 0; i < cp->n; i++)
    forward_image(cp, x + i * in_size, w, cp->has_bias ? b : NULL,
                  y + i * out_size, ws ? ws + i * out_size : NULL);
}

/* ---- backward ----------------------------------------------------------- */

/* Where the inputs a pooled pixel sees fit a vector (cp->patch), the
 * columns of row py are those patches alone, [px][LANES], copied a row at
 * a time: 4 copies of 16 bytes a pixel for a 3x3 kernel on one channel,
 * against row_columns' 36 of 4 (which took 7% of Fashion-MNIST's step).
 * Not memcpy: a call per 16 bytes cost more than the copies. */
static void row_patches(const struct cpu_conv_pool *cp, const float *x, int py,
                        float *cols) {
  int64_t in_row = (int64_t)cp->in_w * cp->in_c;
  for (int px = 0; px < cp->out_w; px++) {
    const float *x0 = x + 2 * py * in_row + (int64_t)2 * px * cp->in_c;
    for (int r = 0; r < cp->patch_h; r++) {
      const float *from = x0 + r * in_row;
      float *to = cols + px * LANES + r * cp->patch_row;
      int e = 0;
      for (; e + 4 <= cp->patch_row; e += 4)
        *(v4u *)(to + e) = *(const v4u *)(from + e);
      for (; e < cp->patch_row; e++) to[e] = from[e];
    }
  }
}

/* The inputs each pooled pixel of row py saw, as [px][tap][s]: one pointer
 * then reaches all of them at constant offsets (36 addresses of their own
 * ran out of registers). */
static void row_columns(const struct cpu_conv_pool *cp, const float *x, int py,
                        float *cols) {
  for (int px = 0; px < cp->out_w; px++) {
    const float *x0 = x + ((int64_t)2 * py * cp->in_w + 2 * px) * cp->in_c;
    int n = cp->taps * WINDOW;
    for (int j = 0; j < n; j++) cols[j] = x0[cp->col_off[j]];
    cols += n;
  }
}

/* Taps [t0, t0 + nt) of the weight gradient of channels c0.. over one
 * pooled row, added to part; on the first chunk, the bias gradient too.
 * Only the input under each lane's maximum contributes: a row of columns
 * holds LANES / 4 taps x 4 window positions, and one permute picks
 * each lane's (tap, position) from it, one FMA per tap instead of four
 * with three of them multiplying zeros. Inlined with a constant nt (see
 * row_grads_n), so the sums stay in registers. */
static inline __attribute__((always_inline)) void
row_grads(const struct cpu_conv_pool *cp, const float *cols, const float *dy,
          const uint8_t *ws, int c0, int t0, int nt, int patch, float *part) {
  vf acc[TAP_CHUNK], bias = {0};
#pragma GCC unroll 12
  for (int k = 0; k < nt; k++) acc[k] = (vf){0};
  for (int px = 0; px < cp->out_w; px++) {
    int64_t at = (int64_t)px * cp->c + c0;
    const float *col = cols + ((int64_t)px * cp->taps + t0) * WINDOW;
    vi pos = load_bytes(ws + at);
    vf g = select_v(pos != POOL_RELU_ZERO, *(const vfu *)(dy + at), (vf){0});
    bias += g;
    if (patch) { /* tap t of position s: patch input tap_at[t] + at(s) */
      vf table = *(const vf *)(cols + px * LANES);
      vi at = (pos >> 1) * cp->patch_row + (pos & 1) * cp->in_c;
#pragma GCC unroll 12
      for (int k = 0; k < nt; k++)
        acc[k] += permute(table, at + cp->tap_at[t0 + k]) * g;
      continue;
    }
#pragma GCC unroll 6
    for (int k = 0; k < nt; k += LANES / WINDOW) {
      vf table = *(const vfu *)(col + k * WINDOW);
#pragma GCC unroll 4
      for (int j = 0; j < LANES / WINDOW; j++)
        if (k + j < nt) acc[k + j] += permute(table, pos + j * WINDOW) * g;
    }
  }
#pragma GCC unroll 12
  for (int k = 0; k < nt; k++)
    *(vfu *)(part + (int64_t)(t0 + k) * cp->c + c0) += acc[k];
  if (t0 == 0) *(vfu *)(part + (int64_t)cp->taps * cp->c + c0) += bias;
}

#define GRADS(N) row_grads(cp, cols, dy, ws, c0, t0, N, 0, part)
#define PATCH_GRADS(N) row_grads(cp, cols, dy, ws, c0, t0, N, 1, part)

/* row_grads for a run-time nt, one constant instance per size. */
static void row_grads_n(const struct cpu_conv_pool *cp, const float *cols,
                        const float *dy, const uint8_t *ws, int c0, int t0,
                        int nt, float *part) {
  if (cp->patch) {
    switch (nt) { VEC_CASES(PATCH_GRADS, TAP_CHUNK) }
  } else {
    switch (nt) { VEC_CASES(GRADS, TAP_CHUNK) }
  }
}

void cpu_conv_pool_row_grads(const struct cpu_conv_pool *cp, const float *x,
                             int py, const float *dy, const uint8_t *ws,
                             int64_t i, float *cols) {
  float *part = cp->partial + i / IMAGE_BLOCK * (int64_t)(cp->taps + 1) * cp->c;
  (cp->patch ? row_patches : row_columns)(cp, x, py, cols);
  for (int c0 = 0; c0 < cp->c; c0 += LANES)
    for (int t0 = 0; t0 < cp->taps; t0 += TAP_CHUNK) {
      int nt = cp->taps - t0 < TAP_CHUNK ? cp->taps - t0 : TAP_CHUNK;
      row_grads_n(cp, cols, dy, ws, c0, t0, nt, part);
    }
}

/* Block `blk`'s images: its partial dw and db, summed row by row in
 * order, with cols the calling thread's row_columns buffer. */
static void block_grads(const struct cpu_conv_pool *cp, const float *x,
                        const float *dy, const uint8_t *ws, int64_t blk,
                        float *cols) {
  int64_t in_size = (int64_t)cp->in_h * cp->in_w * cp->in_c;
  int64_t first = blk * IMAGE_BLOCK;
  int64_t last = first + IMAGE_BLOCK < cp->n ? first + IMAGE_BLOCK : cp->n;
  float *part = cp->partial + blk * (int64_t)(cp->taps + 1) * cp->c;
  memset(part, 0, (size_t)(cp->taps + 1) * (size_t)cp->c * sizeof *part);
  for (int64_t i = first; i < last; i++)
    for (int py = 0; py < cp->out_h; py++) {
      int64_t row = i * cp->image_stride + py * cp->row_stride;
      cpu_conv_pool_row_grads(cp, x + i * in_size, py, dy + row, ws + row, i,
                              cols);
    }
}

/* dx of one image: each maximum's gradient spread back over its
 * receptive field. Only a conv that is not the model's first layer needs
 * it, rare for so few input channels, so it stays plain. */
static void data_grads(const struct cpu_conv_pool *cp, const float *w,
                       const float *dy, const uint8_t *ws, float *dx) {
  memset(dx, 0, (size_t)cp->in_h * cp->in_w * cp->in_c * sizeof(float));
  for (int py = 0; py < cp->out_h; py++)
    for (int px = 0; px < cp->out_w; px++) {
      int64_t at = py * cp->row_stride + (int64_t)px * cp->c;
      float *d0 = dx + ((int64_t)2 * py * cp->in_w + 2 * px) * cp->in_c;
      for (int c = 0; c < cp->c; c++) {
        int s = ws[at + c];
        if (s == POOL_RELU_ZERO) continue;
        float g = dy[at + c];
        float *ds = d0 + window_off(cp, s);
        for (int t = 0; t < cp->taps; t++)
          ds[cp->tap_off[t]] += g * w[(int64_t)t * cp->c + c];
      }
    }
}

void cpu_conv_pool_dx(const struct cpu_conv_pool *cp, const float *w,
                      const float *dy, const uint8_t *ws, float *dx) {
  int64_t in_size = (int64_t)cp->in_h * cp->in_w * cp->in_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(cp->n))
  for (int i = 0; i < cp->n; i++)
    data_grads(cp, w, dy + i * cp->image_stride, ws + i * cp->image_stride,
               dx + i * in_size);
}

void cpu_conv_pool_backward(mxu_op *op, const float *x, const float *w,
                            const float *dy, const void *workspace, float *dw,
                            float *db, float *dx) {
  if (op->conv_then_pool) {
    cpu_conv_then_pool_backward(op, x, w, dy, workspace, dw, db, dx);
    return;
  }
  const struct cpu_conv_pool *cp = op->conv_pool;
  const uint8_t *ws = workspace;
  int threads = cpu_conv_pool_threads(cp, cp->blocks);
#pragma omp parallel num_threads(threads)
  {
    float *cols = cp->cols + (int64_t)omp_get_thread_num() * cp->col_floats;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < cp->blocks; blk++)
      block_grads(cp, x, dy, ws, blk, cols);
  }
  cpu_sum_blocks(cp->partial, cp->blocks, cp->taps, cp->c, dw, db);
  if (dx) cpu_conv_pool_dx(cp, w, dy, ws, dx);
}

/* ---- create ------------------------------------------------------------- */

/* What the loops above handle: stride 1 and no padding, few input
 * channels (more, and oneDNN's blocked kernels do better), whole channel
 * vectors, float32, and 2x2 windows that tile the conv output. */
int cpu_conv_pool_fits(const mxu_conv2d_desc *c, const mxu_pool2d_desc *p) {
  int taps = c->kernel_h * c->kernel_w * c->in_c;
  return c->stride_h == 1 && c->stride_w == 1 && c->pad_top == 0 &&
         c->pad_left == 0 && c->pad_bottom == 0 && c->pad_right == 0 &&
         c->in_c <= 4 && c->out_c % LANES == 0 && taps <= MAX_TAPS &&
         mxu_conv2d_plain(c) &&
         (c->activation == MXU_LINEAR || c->activation == MXU_RELU) &&
         p->is_max && p->pool_h == 2 && p->pool_w == 2 && p->stride_h == 2 &&
         p->stride_w == 2 && p->pad_top == 0 && p->pad_left == 0 &&
         p->pad_bottom == 0 && p->pad_right == 0 && p->c == c->out_c &&
         p->in_h == c->out_h && p->in_w == c->out_w;
}

/* The op's one allocation: the struct, then (each a whole number of
 * vectors) the partials, every thread's columns and the caller's extra. */
mxu_status cpu_conv_pool_build(const mxu_conv2d_desc *c,
                               const mxu_pool2d_desc *p, int relu, size_t extra,
                               mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, CONV_POOL));
  int64_t blocks = (c->n + IMAGE_BLOCK - 1) / IMAGE_BLOCK;
  int taps = c->kernel_h * c->kernel_w * c->in_c;
  int patch = (c->kernel_h + 1) * (c->kernel_w + 1) * c->in_c;
  int64_t row_len = (int64_t)p->out_w * c->out_c;
  size_t head = (sizeof(struct cpu_conv_pool) + 63) / 64 * 64;
  size_t partial = (size_t)blocks * (size_t)(taps + 1) * (size_t)c->out_c;
  int col_threads = cpu_create_threads(); /* each with its own columns */
  /* A pooled pixel's columns: its patch in a vector, or every tap at
   * every window position. row_grads reads whole tables of LANES floats:
   * up to LANES - 4 floats past a row. */
  size_t per_pixel = patch <= LANES ? LANES : (size_t)taps * WINDOW;
  size_t col_floats =
      ((size_t)p->out_w * per_pixel + 2 * LANES - 1) / LANES * LANES;
  int pairs = (taps + 1) / 2;
#ifdef VEC_BF16
  int bf16 = c->bf16 && c->in_c == 1 && pairs <= BF16_PAIRS;
#else
  int bf16 = 0;
#endif
  /* In bf16 the forward lays each row's pairs out in the columns too. */
  size_t pair_cols = ((size_t)2 * p->out_w + LANES - 1) / LANES * LANES;
  if (bf16 && 2 * pairs * pair_cols > col_floats)
    col_floats = 2 * pairs * pair_cols;
  size_t w16 = bf16 ? (size_t)pairs * (size_t)c->out_c : 0; /* bf16 pairs */
  size_t floats = partial + (size_t)col_threads * col_floats + w16 + extra;
  struct cpu_conv_pool *cp = mxu_aligned_alloc(head + floats * sizeof(float));
  if (!cp) {
    cpu_op_free(op);
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", CONV_POOL);
  }
  *cp = (struct cpu_conv_pool){.n = c->n,
                               .in_h = c->in_h,
                               .in_w = c->in_w,
                               .in_c = c->in_c,
                               .c = c->out_c,
                               .out_h = p->out_h,
                               .out_w = p->out_w,
                               .taps = taps,
                               .relu = relu || c->activation == MXU_RELU,
                               .has_bias = c->has_bias,
                               .blocks = blocks,
                               .partial = (float *)((char *)cp + head),
                               .col_floats = (int64_t)col_floats,
                               .col_threads = col_threads,
                               .row_len = row_len,
                               .image_stride = p->out_h * row_len,
                               .row_stride = row_len,
                               .patch = patch <= LANES,
                               .patch_h = c->kernel_h + 1,
                               .patch_row = (c->kernel_w + 1) * c->in_c,
                               .bf16 = bf16,
                               .pairs = pairs,
                               .pair_cols = (int)pair_cols};
  cp->cols = cp->partial + partial;
  memset(cp->cols, 0, (size_t)col_threads * col_floats * sizeof(float));
  cp->w16 = (uint16_t *)(cp->cols + (size_t)col_threads * col_floats);
  cp->extra = cp->cols + (size_t)col_threads * col_floats + w16;
  /* Taps in the kernel's HWIO order, so tap t's weights are row t. */
  for (int t = 0; t < taps; t++) {
    int ci = t % c->in_c, kx = t / c->in_c % c->kernel_w,
        ky = t / c->in_c / c->kernel_w;
    cp->tap_off[t] = (ky * c->in_w + kx) * c->in_c + ci;
    cp->tap_at[t] = (ky * (c->kernel_w + 1) + kx) * c->in_c + ci;
    for (int s = 0; s < WINDOW; s++)
      cp->col_off[t * WINDOW + s] = cp->tap_off[t] + (int)window_off(cp, s);
  }
  op->conv_pool = cp;
  op->workspace_bytes = (size_t)c->n * (size_t)p->out_h * (size_t)row_len;
  *out = op;
  return MXU_OK;
}

mxu_status cpu_conv_pool_create(const mxu_conv2d_desc *c,
                                const mxu_pool2d_desc *p, int relu,
                                mxu_op **out) {
  if (!cpu_conv_pool_fits(c, p))
    return cpu_conv_then_pool_create(c, p, relu, out);
  return cpu_conv_pool_build(c, p, relu, 0, out);
}

size_t cpu_conv_pool_workspace_bytes(mxu_op *op) { return op->workspace_bytes; }
