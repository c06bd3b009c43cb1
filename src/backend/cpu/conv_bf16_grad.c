/* conv_bf16_grad.c — a bf16 Conv2D's weight gradient for 3x3 convs at
 * stride 1 or 2 of 16 to 64 input channels, where oneDNN 2.6's bf16
 * kernels ran at half of vdpbf16ps' rate or less: ResNet-20's 16 -> 16
 * convs 1.25 ms a call of 128 images on 2 threads in the model, 32 -> 32
 * 1.02, 64 -> 64 0.96; its 16 -> 32 at stride 2 0.70 ms for half the
 * products.
 *
 * dw[ky][kx][i][o] sums x[s oy + ky][s ox + kx][i] dy[oy][ox][o] over
 * the batch's output pixels (s the stride); vdpbf16ps adds two products
 * a lane, so the pixels go in pairs (ox, ox + 1). Each image is first
 * rewritten:
 * - xp: x in bf16 with its padding, 0 there, so no tap needs a check;
 * - dp: at row oy, pair j, for each output channel, the pair of dy's
 *   pixels (2j, 2j + 1), a 32-bit value to broadcast.
 * A tile is one kernel row ky, one vector of 16 input channels and 8
 * output channels: 3 x 8 vectors of sums. For each pixel pair, each of
 * the three taps' x pixels (columns s 2j + kx, s (2j + 1) + kx of xp) are
 * paired lane by lane in one vpermt2w and meet each output channel's dy
 * pair, broadcast, in 24 vdpbf16ps. (x paired once for every column, as
 * pairs from each column on, is twice x and cost a third of the time.)
 *
 * The products of bf16 values are exact and the sums float32, as
 * oneDNN's. The images go in blocks of a size fixed by the shape, each
 * block's sums in a partial of its own, added in block order at the end:
 * the same bits on any thread count. x and dy may come in float32
 * (rounded here, to nearest even as oneDNN's conversion rounds) or in
 * bf16 (x_bf16, dy_bf16). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#ifdef VEC_BF16

#define TAPS 3  /* a kernel row's taps */
#define GROUP 8 /* output channels a tile: TAPS x GROUP sums */
/* The images of a block (their xp and dp) fit in half of a core's L2. */
#define BLOCK_BYTES ((int64_t)512 << 10)
#define MAX_IMAGES 16

struct cpu_conv_bf16_grad {
  mxu_conv2d_desc d;
  int pairs;         /* pixel pairs a row of dy: out_w / 2, rounded up */
  int stride;        /* both ways */
  int xp_h, xp_w;    /* rows and columns of xp: the taps' reach */
  int64_t xp_size;   /* 32-bit words of an image's xp (and a vector more:
                      * a pixel's last channels are loaded 512 bits wide) */
  int64_t dp_size;   /* and of its dp */
  int images;        /* a block */
  int64_t blocks;    /* of the batch */
  int threads;       /* that have a buffer */
  int dy_bf16;       /* this call's dy is bf16 */
  uint32_t *buffers; /* threads x images x (xp, dp) */
  float *partial;    /* blocks x (dw as [ky][kx][o][i], then db) */
};

/* Image x (NHWC) as xp. */
static void make_xp(const struct cpu_conv_bf16_grad *g, const char *x,
                    uint16_t *xp) {
  const mxu_conv2d_desc *d = &g->d;
  int64_t v = cpu_value_bytes(d->x_bf16), c = d->in_c;
  memset(xp, 0, (size_t)g->xp_size * sizeof(uint32_t));
  for (int a = 0; a < g->xp_h; a++) {
    int r = a - d->pad_top;
    if (r < 0 || r >= d->in_h) continue;
    const char *in = x + (int64_t)r * d->in_w * c * v;
    uint16_t *row = xp + ((int64_t)a * g->xp_w + d->pad_left) * c;
    int w = d->in_w < g->xp_w - d->pad_left ? d->in_w : g->xp_w - d->pad_left;
    for (int64_t i = 0; i < w * c; i += LANES)
      _mm256_storeu_si256((__m256i *)(row + i),
                          load_bf16(in + i * v, d->x_bf16));
  }
}

/* Image dy (NHWC) as dp, its values (as rounded) added to db. */
static void make_dp(const struct cpu_conv_bf16_grad *g, const char *dy,
                    uint32_t *dp, float *db) {
  const mxu_conv2d_desc *d = &g->d;
  int64_t v = cpu_value_bytes(g->dy_bf16), c = d->out_c;
  for (int64_t o = 0; o < c; o += LANES) {
    vf sum = *(const vfu *)(db + o);
    for (int oy = 0; oy < d->out_h; oy++)
      for (int j = 0; j < g->pairs; j++) {
        const char *lo = dy + (((int64_t)oy * d->out_w + 2 * j) * c + o) * v;
        __m256i hi = 2 * j + 1 < d->out_w ? load_bf16(lo + c * v, g->dy_bf16)
                                          : _mm256_setzero_si256();
        __m512i p = pair_halves(_mm512_inserti64x4(
            _mm512_castsi256_si512(load_bf16(lo, g->dy_bf16)), hi, 1));
        _mm512_storeu_si512(dp + ((int64_t)oy * g->pairs + j) * c + o, p);
        /* the pair's low and high bf16 as float32 */
        sum += (vf)_mm512_slli_epi32(p, 16);
        sum += (vf)_mm512_and_si512(p, _mm512_set1_epi32((int)0xFFFF0000u));
      }
    *(vfu *)(db + o) = sum;
  }
}

/* The block's sums for kernel row ky, input channels i0.., output
 * channels o0..: over its `images` images' xp and dp. */
static void tile(const struct cpu_conv_bf16_grad *g, const uint32_t *buffer,
                 int images, int ky, int i0, int o0, float *part) {
  static const int16_t order[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                    37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i pairs = _mm512_loadu_si512(order);
  const mxu_conv2d_desc *d = &g->d;
  int64_t ci = d->in_c, co = d->out_c, s = g->stride;
  __m512 acc[TAPS][GROUP];
#pragma GCC unroll 3
  for (int k = 0; k < TAPS; k++)
#pragma GCC unroll 8
    for (int o = 0; o < GROUP; o++) acc[k][o] = _mm512_setzero_ps();
  for (int i = 0; i < images; i++) {
    const uint32_t *image = buffer + i * (g->xp_size + g->dp_size);
    const uint16_t *xi = (const uint16_t *)image + i0;
    const uint32_t *di = image + g->xp_size + o0;
    for (int oy = 0; oy < d->out_h; oy++) {
      const uint16_t *xr = xi + (int64_t)(oy * s + ky) * g->xp_w * ci;
      const uint32_t *dr = di + (int64_t)oy * g->pairs * co;
      for (int j = 0; j < g->pairs; j++) {
        __m512bh xv[TAPS];
#pragma GCC unroll 3
        for (int k = 0; k < TAPS; k++) {
          const uint16_t *at = xr + (2 * s * j + k) * ci;
          xv[k] = (__m512bh)_mm512_permutex2var_epi16(
              _mm512_loadu_si512(at), pairs, _mm512_loadu_si512(at + s * ci));
        }
#pragma GCC unroll 8
        for (int o = 0; o < GROUP; o++) {
          __m512bh b = (__m512bh)_mm512_set1_epi32((int)dr[j * co + o]);
#pragma GCC unroll 3
          for (int k = 0; k < TAPS; k++)
            acc[k][o] = _mm512_dpbf16_ps(acc[k][o], xv[k], b);
        }
      }
    }
  }
#pragma GCC unroll 3
  for (int k = 0; k < TAPS; k++)
#pragma GCC unroll 8
    for (int o = 0; o < GROUP; o++)
      _mm512_storeu_ps(part + ((ky * TAPS + k) * co + o0 + o) * ci + i0,
                       acc[k][o]);
}

/* Block blk's partial: its images rewritten, then every tile. */
static void block(const struct cpu_conv_bf16_grad *g, const char *x,
                  const char *dy, int64_t blk, uint32_t *buffer) {
  const mxu_conv2d_desc *d = &g->d;
  int64_t ci = d->in_c, co = d->out_c, weights = TAPS * TAPS * ci * co;
  float *part = g->partial + blk * (weights + co);
  int64_t first = blk * g->images;
  int images = (int)(d->n - first < g->images ? d->n - first : g->images);
  int64_t x_image =
      (int64_t)d->in_h * d->in_w * ci * cpu_value_bytes(d->x_bf16);
  int64_t dy_image =
      (int64_t)d->out_h * d->out_w * co * cpu_value_bytes(g->dy_bf16);
  memset(part + weights, 0, (size_t)co * sizeof *part);
  for (int i = 0; i < images; i++) {
    uint32_t *xp = buffer + i * (g->xp_size + g->dp_size);
    make_xp(g, x + (first + i) * x_image, (uint16_t *)xp);
    make_dp(g, dy + (first + i) * dy_image, xp + g->xp_size, part + weights);
  }
  for (int ky = 0; ky < TAPS; ky++)
    for (int64_t i0 = 0; i0 < ci; i0 += LANES)
      for (int64_t o0 = 0; o0 < co; o0 += GROUP)
        tile(g, buffer, images, ky, (int)i0, (int)o0, part);
}

/* dw[tap][i][o] and db[o]: the partials added in block order, dw's
 * [o][i] turned to [i][o]; the taps shared among the threads. */
static void sum_blocks(const struct cpu_conv_bf16_grad *g, float *dw,
                       float *db) {
  int64_t ci = g->d.in_c, co = g->d.out_c, per = TAPS * TAPS * ci * co + co;
#pragma omp for schedule(static)
  for (int tap = 0; tap <= TAPS * TAPS; tap++) {
    if (tap == TAPS * TAPS) { /* the bias */
      for (int64_t o = 0; db && o < co; o++) {
        float sum = 0.0f;
        for (int64_t blk = 0; blk < g->blocks; blk++)
          sum += g->partial[blk * per + per - co + o];
        db[o] = sum;
      }
      continue;
    }
    for (int64_t o = 0; o < co; o++)
      for (int64_t i = 0; i < ci; i += LANES) {
        const float *at = g->partial + (tap * co + o) * ci + i;
        vf sum = *(const vfu *)at;
        for (int64_t blk = 1; blk < g->blocks; blk++)
          sum += *(const vfu *)(at + blk * per);
        float lanes[LANES];
        memcpy(lanes, &sum, sizeof lanes);
        for (int l = 0; l < LANES; l++)
          dw[(tap * ci + i + l) * co + o] = lanes[l];
      }
  }
}

int cpu_conv_bf16_grad_weights(mxu_op *op, const float *x, const float *dy,
                               float *dw, float *db) {
  /* dy in the op's own copy (a fused pooling wrote it there): bf16 NHWC,
   * or a layout these loops do not read */
  int copy = dy == op->diff_dst_copy;
  if (copy && !cpu_weighted_bf16_dy(op)) return 0;
  struct cpu_conv_bf16_grad *g = op->conv_bf16_grad;
  g->dy_bf16 = g->d.dy_bf16 || copy;
  int threads = cpu_threads_for(g->blocks);
  if (threads > g->threads) threads = g->threads;
  int64_t buffer = (int64_t)g->images * (g->xp_size + g->dp_size);
#pragma omp parallel num_threads(threads)
  {
    uint32_t *own = g->buffers + omp_get_thread_num() * buffer;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < g->blocks; blk++)
      block(g, (const char *)x, (const char *)dy, blk, own);
    sum_blocks(g, dw, db);
  }
  return 1;
}

#else

/* Never attached where the loops are not built (cpu_conv_bf16_grad_fits),
 * but conv.c's dispatch names it. */
int cpu_conv_bf16_grad_weights(mxu_op *op, const float *x, const float *dy,
                               float *dw, float *db) {
  (void)op;
  (void)x;
  (void)dy;
  (void)dw;
  (void)db;
  return 0;
}

#endif

/* A bf16 3x3 conv at stride 1 or 2, undilated, of 16, 32, 48 or 64 input
 * channels and outputs in sixteens (at most 64 x 64: the partials grow
 * with in_c x out_c), NHWC, on a CPU with AVX512_BF16. */
int cpu_conv_bf16_grad_fits(const mxu_conv2d_desc *d) {
#ifdef VEC_BF16
  return d->bf16 && mxu_conv2d_plain(d) && mxu_conv2d_groups(d) == 1 &&
         d->kernel_h == TAPS && d->kernel_w == TAPS && d->stride_h <= 2 &&
         d->stride_w == d->stride_h && d->in_c % LANES == 0 &&
         d->out_c % LANES == 0 && d->in_c * d->out_c <= 64 * 64 &&
         !d->x_native && !d->y_native;
#else
  (void)d;
  return 0;
#endif
}

mxu_status cpu_conv_bf16_grad_attach(mxu_op *op, const mxu_conv2d_desc *d) {
#ifdef VEC_BF16
  struct cpu_conv_bf16_grad g = {.d = *d, .pairs = (d->out_w + 1) / 2};
  /* the last pair's second pixel's last tap, and its neighbour (the
   * pair's second pixel where out_w is odd) */
  g.stride = d->stride_h;
  g.xp_h = (d->out_h - 1) * g.stride + TAPS;
  g.xp_w = (2 * g.pairs - 1) * g.stride + TAPS;
  g.xp_size =
      ((int64_t)g.xp_h * g.xp_w * d->in_c / 2 + 2 * LANES) / LANES * LANES;
  g.dp_size = (int64_t)d->out_h * g.pairs * d->out_c;
  int64_t image_bytes = (g.xp_size + g.dp_size) * (int64_t)sizeof(uint32_t);
  int64_t images = BLOCK_BYTES / image_bytes;
  g.images = images < 1 ? 1 : images > MAX_IMAGES ? MAX_IMAGES : (int)images;
  g.blocks = (d->n + g.images - 1) / g.images;
  g.threads = cpu_create_threads();
  size_t head = (sizeof g + 63) / 64 * 64;
  size_t buffers = (size_t)g.threads * (size_t)g.images *
                   (size_t)(g.xp_size + g.dp_size) * sizeof(uint32_t);
  size_t partial = (size_t)g.blocks *
                   (size_t)(TAPS * TAPS * d->in_c * d->out_c + d->out_c) *
                   sizeof(float);
  char *at = mxu_aligned_alloc(head + buffers + partial);
  if (!at) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  g.buffers = (uint32_t *)(void *)(at + head);
  g.partial = (float *)(void *)(at + head + buffers);
  memcpy(at, &g, sizeof g);
  op->conv_bf16_grad = (struct cpu_conv_bf16_grad *)(void *)at;
  return MXU_OK;
#else
  (void)op;
  (void)d;
  return mxu_fail(MXU_ERR_UNSUPPORTED, "conv2d: no AVX512_BF16 in this build");
#endif
}
