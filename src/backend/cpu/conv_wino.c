/* conv_wino.c — 3x3 stride-1 convolutions by Winograd's F(4x4, 3x3)
 * (Lavin and Gray, 2015) where oneDNN 2.6 has none: its jit_wino_4x3 is
 * AVX-512 only (conv.c), and on AVX2 its direct kernels ran ResNet-20's
 * and cifar's 3x3 convs at 50-60% of the machine's peak, four fifths of
 * their steps. Winograd computes each 4x4 tile of output from the 6x6
 * window under it with 36 multiplications per (input, output) channel
 * pair instead of 144; the transforms cost adds. The forward; the
 * backward data as the forward of dy with the kernel turned half round
 * and its channels swapped (padding 2 - pad); the backward weights as
 * G^T (sum over tiles of V^T W) G, W = A dY A^T the outputs' gradient
 * transformed.
 *
 * The tiles of the whole batch go in fixed blocks of `block` tiles. For a
 * block, channels in the lanes: each tile's window transformed (B^T d B)
 * into V[block][36][in_c], 36 matrix products M[p] = V[p] x U[p] (U: the
 * kernel transformed, G g G^T, [36][in_c][out_c]), and each tile's 4x4
 * outputs transformed back (A^T m A) into y, plus bias and relu. A block's
 * V and M stay in the L2 cache. Tile-major, each tile's 36 transformed
 * vectors are stored to consecutive lines: position-major
 * ([36][block][in_c]) they went to 36 lines far apart, which took cifar's
 * 32 -> 32 forward 8.5% longer (7.60 against 6.68 ms, 128 images on one
 * thread). Every output is computed by the same operations whatever the
 * thread count, so runs are bit-identical (the weight gradient's sums
 * too: see cpu_conv_wino_backward_weights). Its sums round differently
 * from a direct conv's: against cpu_ref's (in double), the largest error
 * was 4e-6 to 7e-6 of the largest value, forward and backward, for 16 and
 * 64 channels. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#define POS 36 /* transformed positions per tile (6 x 6) */
#define ROWS 6 /* tiles a register block of the products holds */
/* A block's V and M together: within the L2 cache (512 KB on Zen 3, 1-2
 * MB on Intel's server cores) beside the inputs the block reads. */
#define BLOCK_BYTES ((size_t)192 << 10)
/* The weight gradient's blocks: each adds its products into the whole
 * of dU (36 x in_c x out_c), which then goes through L1 and L2 once a
 * block; so, as many tiles as dU's bytes hold, between BLOCK_BYTES' and
 * this. 128 images on one thread: 64 -> 64 on 16x16 7.1 -> 5.4 ms, on 8x8
 * 1.64 -> 1.23, 128 -> 128 on 16x16 (64 images) 12.5 -> 11.3; at this
 * size for all, 16 -> 16 on 32x32 went 3.1 -> 3.4. */
#define MAX_WEIGHTS_BLOCK_BYTES ((size_t)768 << 10)
/* The weight gradient's chunks: enough for two threads to share out
 * evenly, at most this much memory for their partial sums. */
#define MAX_CHUNKS 8
#define MAX_PARTIAL_BYTES ((int64_t)32 << 20)

/* One pass as a forward conv: x [n][in_h][in_w][in_c] to
 * y [n][out_h][out_w][out_c], 3x3, stride 1, padding pad_top, pad_left
 * (and what the output size leaves at the far sides). */
typedef struct wino_pass {
  int n, in_h, in_w, in_c, out_h, out_w, out_c, pad_top, pad_left;
} wino_pass;

struct cpu_conv_wino {
  wino_pass forward, backward; /* backward data: dy in, dx out */
  int relu, threads;
  int64_t scratch_floats; /* per thread: V, M (or W) of a block, a window */
  float *scratch;         /* [threads][scratch_floats] */
  float *u;               /* the running pass's transformed kernel */
  float *turned;          /* [3][3][out_c][in_c]: the kernel for backward */
  int64_t chunks;         /* of blocks, for the weight gradient's sums */
  float *partial;         /* [chunks][36 * in_c * out_c + out_c]: dU, db */
};

static int64_t tiles_of(const wino_pass *p) {
  return (int64_t)p->n * ((p->out_h + 3) / 4) * ((p->out_w + 3) / 4);
}

/* Tiles per block: as many as `bytes` holds of V and M (or W), in whole
 * register blocks. */
static int64_t block_of(const wino_pass *p, size_t bytes) {
  int64_t per_tile = (int64_t)POS * (p->in_c + p->out_c) * sizeof(float);
  int64_t block = (int64_t)bytes / per_tile / ROWS * ROWS;
  return block > ROWS ? block : ROWS;
}

static int64_t weights_block_of(const wino_pass *p) {
  size_t bytes = (size_t)POS * p->in_c * p->out_c * sizeof(float);
  if (bytes < BLOCK_BYTES) bytes = BLOCK_BYTES;
  if (bytes > MAX_WEIGHTS_BLOCK_BYTES) bytes = MAX_WEIGHTS_BLOCK_BYTES;
  return block_of(p, bytes);
}

/* ---- the transforms (B^T, A^T, G and, for gradients, A, G^T), a line of
 * vectors at a time --------------------------------------------------- */

static inline __attribute__((always_inline)) void input_line(const vf d[6],
                                                             vf o[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
  o[2] = (d[4] - d[3]) + 4.0f * (d[1] - d[2]);
  o[3] = (d[4] - d[2]) + 2.0f * (d[3] - d[1]);
  o[4] = (d[4] - d[2]) - 2.0f * (d[3] - d[1]);
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

static inline __attribute__((always_inline)) void output_line(const vf m[6],
                                                              vf o[4]) {
  vf sum12 = m[1] + m[2], dif12 = m[1] - m[2];
  vf sum34 = m[3] + m[4], dif34 = m[3] - m[4];
  o[0] = m[0] + sum12 + sum34;
  o[1] = dif12 + 2.0f * dif34;
  o[2] = sum12 + 4.0f * sum34;
  o[3] = dif12 + 8.0f * dif34 + m[5];
}

static inline __attribute__((always_inline)) void kernel_line(const vf g[3],
                                                              vf o[6]) {
  o[0] = g[0] * 0.25f;
  o[1] = (g[0] + g[1] + g[2]) * (-1.0f / 6.0f);
  o[2] = (g[0] - g[1] + g[2]) * (-1.0f / 6.0f);
  o[3] = g[0] * (1.0f / 24.0f) + g[1] * (1.0f / 12.0f) + g[2] * (1.0f / 6.0f);
  o[4] = g[0] * (1.0f / 24.0f) - g[1] * (1.0f / 12.0f) + g[2] * (1.0f / 6.0f);
  o[5] = g[2];
}

/* A 4-line of the output's gradient to 6 (A m, for A dY A^T). */
static inline __attribute__((always_inline)) void gradient_line(const vf m[4],
                                                                vf o[6]) {
  vf even = m[0] + m[2], odd = m[1] + m[3];
  vf even4 = m[0] + 4.0f * m[2], odd8 = 2.0f * m[1] + 8.0f * m[3];
  o[0] = m[0];
  o[1] = even + odd;
  o[2] = even - odd;
  o[3] = even4 + odd8;
  o[4] = even4 - odd8;
  o[5] = m[3];
}

/* A 6-line of the transformed kernel's gradient to 3 (G^T u). */
static inline __attribute__((always_inline)) void
kernel_gradient_line(const vf u[6], vf g[3]) {
  vf sum12 = u[1] + u[2], dif21 = u[2] - u[1];
  vf sum34 = u[3] + u[4], dif34 = u[3] - u[4];
  g[0] = u[0] * 0.25f - sum12 * (1.0f / 6.0f) + sum34 * (1.0f / 24.0f);
  g[1] = dif21 * (1.0f / 6.0f) + dif34 * (1.0f / 12.0f);
  g[2] = (sum34 - sum12) * (1.0f / 6.0f) + u[5];
}

/* U[36][in_c][out_c] = G g G^T of w ([3][3][in_c][out_c], HWIO), output
 * channels in the lanes. */
static void transform_kernel(const float *w, int64_t in_c, int64_t out_c,
                             float *u) {
  int64_t tap = in_c * out_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(in_c))
  for (int64_t ci = 0; ci < in_c; ci++)
    for (int64_t co = 0; co < out_c; co += LANES) {
      vf g[3][3], rows[6][3];
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++)
          g[ky][kx] = *(const vfu *)(w + (ky * 3 + kx) * tap + ci * out_c + co);
      for (int kx = 0; kx < 3; kx++) {
        vf col[3] = {g[0][kx], g[1][kx], g[2][kx]}, out[6];
        kernel_line(col, out);
        for (int a = 0; a < 6; a++) rows[a][kx] = out[a];
      }
      for (int a = 0; a < 6; a++) {
        vf out[6];
        kernel_line(rows[a], out);
        for (int b = 0; b < 6; b++)
          *(vfu *)(u + (a * 6 + b) * tap + ci * out_c + co) = out[b];
      }
    }
}

/* ---- a block: windows in, products, tiles out -------------------------- */

typedef struct tile_at {
  int64_t image;
  int y0, x0; /* the tile's first output row and column */
} tile_at;

static tile_at tile_where(const wino_pass *p, int64_t tile) {
  int64_t across = (p->out_w + 3) / 4,
          per_image = across * ((p->out_h + 3) / 4);
  int64_t r = tile % per_image;
  return (tile_at){tile / per_image, (int)(r / across) * 4,
                   (int)(r % across) * 4};
}

/* The size x size window from (y0, x0) of an h x w image of c channels
 * into `into` ([size][size][c]), zeros where it falls outside. */
static void copy_window(const float *image, int h, int w, int64_t c, int y0,
                        int x0, int size, float *into) {
  for (int a = 0; a < size; a++)
    for (int b = 0; b < size; b++, into += c) {
      int y = y0 + a, x = x0 + b;
      if (y < 0 || y >= h || x < 0 || x >= w) {
        memset(into, 0, (size_t)c * sizeof *into);
        continue;
      }
      const float *from = image + ((int64_t)y * w + x) * c;
      for (int64_t k = 0; k < c; k += LANES)
        *(vf *)(into + k) = *(const vfu *)(from + k);
    }
}

/* B^T d B of the 6x6 window at `from` (pixel (a, b) at from + a * row +
 * b * col), every channel vector of it, into V[a * 6 + b] at to + (a * 6
 * + b) * channels. */
static void transform_window(const float *from, int64_t row, int64_t col,
                             int64_t channels, float *to) {
  for (int64_t c = 0; c < channels; c += LANES) {
    vf mid[6][6];
    const float *column = from + c;
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++, column += col) {
      vf d[6], o[6];
#pragma GCC unroll 6
      for (int a = 0; a < 6; a++) d[a] = *(const vfu *)(column + a * row);
      input_line(d, o);
#pragma GCC unroll 6
      for (int a = 0; a < 6; a++) mid[a][b] = o[a];
    }
    float *at = to + c;
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) {
      vf o[6];
      input_line(mid[a], o);
#pragma GCC unroll 6
      for (int b = 0; b < 6; b++, at += channels) *(vf *)at = o[b];
    }
  }
}

/* Tile t of the block (global tile `tile`): V[t][p][..] for every channel
 * vector, from its 6x6 window of x. A window across the image's edge is
 * first copied into `edge` ([6][6][in_c]) with zeros for the padding. */
static void input_tile(const wino_pass *p, const float *x, float *edge,
                       int64_t tile, int64_t t, float *v) {
  tile_at at = tile_where(p, tile);
  int64_t c_n = p->in_c, row = (int64_t)p->in_w * c_n;
  const float *image = x + at.image * p->in_h * row;
  int y0 = at.y0 - p->pad_top, x0 = at.x0 - p->pad_left;
  float *to = v + t * POS * c_n;
  if (y0 >= 0 && x0 >= 0 && y0 + 6 <= p->in_h && x0 + 6 <= p->in_w) {
    transform_window(image + y0 * row + x0 * c_n, row, c_n, c_n, to);
    return;
  }
  copy_window(image, p->in_h, p->in_w, c_n, y0, x0, 6, edge);
  transform_window(edge, 6 * c_n, c_n, c_n, to);
}

/* Where a pass's outputs go: y (NHWC), or, with pool, each 2x2 window's
 * maximum to y ([n][out_h / 2][out_w / 2][out_c]) and its position to ws
 * (as conv_then_pool.c's pooling, then relu if pool_relu: the same
 * values, without writing the conv's output and reading it back). */
typedef struct wino_out {
  float *y;
  const float *bias;
  int relu, stream;
  int pool, pool_relu;
  uint8_t *ws;
} wino_out;

/* The 2x2 windows of one channel vector of a tile's 4x4 outputs (out),
 * where they lie whole inside the output. */
static void pool_tile(const wino_pass *p, const wino_out *o, tile_at at,
                      int64_t c, const vf out[4][4]) {
  int64_t pooled_h = p->out_h / 2, pooled_w = p->out_w / 2;
  for (int wy = 0; wy < 2; wy++)
    for (int wx = 0; wx < 2; wx++) {
      int64_t py = at.y0 / 2 + wy, px = at.x0 / 2 + wx;
      if (py >= pooled_h || px >= pooled_w) continue;
      window_max m = window_first(out[2 * wy][2 * wx]);
      window_offer(&m, out[2 * wy][2 * wx + 1], 1);
      window_offer(&m, out[2 * wy + 1][2 * wx], 2);
      window_offer(&m, out[2 * wy + 1][2 * wx + 1], 3);
      if (o->pool_relu) window_relu(&m);
      int64_t to = ((at.image * pooled_h + py) * pooled_w + px) * p->out_c + c;
      *(vfu *)(o->y + to) = m.max;
      if (o->ws) store_bytes(o->ws + to, m.arg);
    }
}

/* Tile t's outputs from M[t][p][..], plus bias and relu, to o. */
static void output_tile(const wino_pass *p, const float *m, const wino_out *o,
                        int64_t tile, int64_t t) {
  tile_at at = tile_where(p, tile);
  float *image = o->y + at.image * p->out_h * p->out_w * p->out_c;
  int rows_in = p->out_h - at.y0 < 4 ? p->out_h - at.y0 : 4;
  int cols_in = p->out_w - at.x0 < 4 ? p->out_w - at.x0 : 4;
  for (int64_t c = 0; c < p->out_c; c += LANES) {
    const float *at_c = m + t * POS * p->out_c + c;
    vf rows[4][6];
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++) {
      vf col[6], line[4];
#pragma GCC unroll 6
      for (int a = 0; a < 6; a++)
        col[a] = *(const vf *)(at_c + (a * 6 + b) * p->out_c);
      output_line(col, line);
#pragma GCC unroll 6
      for (int a = 0; a < 4; a++) rows[a][b] = line[a];
    }
    vf add = o->bias ? *(const vfu *)(o->bias + c) : (vf){0}, out[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
      output_line(rows[a], out[a]);
#pragma GCC unroll 4
      for (int b = 0; b < 4; b++) {
        out[a][b] += add;
        if (o->relu) out[a][b] = select_v(out[a][b] > 0.0f, out[a][b], (vf){0});
      }
    }
    if (o->pool) {
      pool_tile(p, o, at, c, out);
      continue;
    }
    for (int a = 0; a < rows_in; a++) {
      float *to =
          image + ((int64_t)(at.y0 + a) * p->out_w + at.x0) * p->out_c + c;
      for (int b = 0; b < cols_in; b++, to += p->out_c)
        store_vec(to, out[a][b], o->stream);
    }
  }
}

/* A dY A^T of the 4x4 gradient window at `from` (pixel (a, b) at from + a
 * * row + b * col), every channel vector of it, into W[a * 6 + b] at to +
 * (a * 6 + b) * channels; the window's sum added to db. */
static void transform_gradient(const float *from, int64_t row, int64_t col,
                               int64_t channels, float *to, float *db) {
  for (int64_t c = 0; c < channels; c += LANES) {
    vf mid[6][4], sum = {0};
    const float *column = from + c;
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++, column += col) {
      vf d[4], o[6];
#pragma GCC unroll 4
      for (int a = 0; a < 4; a++) {
        d[a] = *(const vfu *)(column + a * row);
        sum += d[a];
      }
      gradient_line(d, o);
#pragma GCC unroll 6
      for (int a = 0; a < 6; a++) mid[a][b] = o[a];
    }
    *(vf *)(db + c) += sum;
    float *at = to + c;
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) {
      vf o[6];
      gradient_line(mid[a], o);
#pragma GCC unroll 6
      for (int b = 0; b < 6; b++, at += channels) *(vf *)at = o[b];
    }
  }
}

/* Tile t of the block: W[t][p][..] from its 4x4 outputs' gradient, and
 * their sum added to db. A tile past the output's edge is first copied
 * into `edge` ([4][4][out_c]) with zeros there. */
static void gradient_tile(const wino_pass *p, const float *dy, float *edge,
                          int64_t tile, int64_t t, float *w, float *db) {
  tile_at at = tile_where(p, tile);
  int64_t c_n = p->out_c, row = (int64_t)p->out_w * c_n;
  const float *image = dy + at.image * p->out_h * row;
  float *to = w + t * POS * c_n;
  if (at.y0 + 4 <= p->out_h && at.x0 + 4 <= p->out_w) {
    transform_gradient(image + at.y0 * row + (int64_t)at.x0 * c_n, row, c_n,
                       c_n, to, db);
    return;
  }
  copy_window(image, p->out_h, p->out_w, c_n, at.y0, at.x0, 4, edge);
  transform_gradient(edge, 4 * c_n, c_n, c_n, to, db);
}

/* One matrix product's operands: step k of row r of the broadcast
 * operand at a[r * a_row + k * a_k], step k of the vector operand at
 * b[k * b_k], row r of the result at c[r * c_row]. */
typedef struct product_at {
  const float *a, *b;
  float *c;
  int64_t a_row, a_k, b_k, c_row, steps;
} product_at;

/* Rows [0, R) and column vectors [0, NV) of the result (added to it with
 * add): inlined with constants so the sums stay in registers. */
static inline __attribute__((always_inline)) void
product_block(const product_at *q, int add, int R, int NV) {
  vf acc[ROWS][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++)
      acc[r][j] =
          add ? *(const vf *)(q->c + r * q->c_row + j * LANES) : (vf){0};
  for (int64_t k = 0; k < q->steps; k++) {
    vf w[2];
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++)
      w[j] = *(const vf *)(q->b + k * q->b_k + j * LANES);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      float x = q->a[r * q->a_row + k * q->a_k];
#pragma GCC unroll 2
      for (int j = 0; j < NV; j++) acc[r][j] += x * w[j];
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++)
      *(vf *)(q->c + r * q->c_row + j * LANES) = acc[r][j];
}

/* The result's rows x cols (cols in whole vectors), in register blocks. */
static void product(const product_at *q, int64_t rows, int64_t cols, int add) {
  int pair = cols % (2 * LANES) == 0;
  for (int64_t r = 0; r < rows; r += ROWS) {
    int n = rows - r < ROWS ? (int)(rows - r) : ROWS;
    for (int64_t col = 0; col < cols; col += pair ? 2 * LANES : LANES) {
      product_at at = *q;
      at.a += r * q->a_row;
      at.b += col;
      at.c += r * q->c_row + col;
#define PRODUCT_PAIR(R) product_block(&at, add, R, 2)
#define PRODUCT_ONE(R) product_block(&at, add, R, 1)
      if (pair) switch (n) {
          VEC_CASES(PRODUCT_PAIR, ROWS)
        }
      else
        switch (n) { VEC_CASES(PRODUCT_ONE, ROWS) }
#undef PRODUCT_PAIR
#undef PRODUCT_ONE
    }
  }
}

/* M[p] = V[p] x U[p] for the block's `count` tiles. */
static void products(const wino_pass *p, const float *u, const float *v,
                     int64_t count, float *m) {
  int64_t in_c = p->in_c, out_c = p->out_c;
  for (int pos = 0; pos < POS; pos++) {
    product_at q = {v + pos * in_c,
                    u + pos * in_c * out_c,
                    m + pos * out_c,
                    POS * in_c,
                    1,
                    out_c,
                    POS * out_c,
                    in_c};
    product(&q, count, out_c, 0);
  }
}

static void run_pass(const struct cpu_conv_wino *cw, const wino_pass *p,
                     const float *x, wino_out o) {
  int64_t tiles = tiles_of(p), block = block_of(p, BLOCK_BYTES);
  int64_t blocks = (tiles + block - 1) / block;
  int threads = cpu_threads_for(blocks);
  if (threads > cw->threads) threads = cw->threads;
  /* cifar's 32x32x32 outputs of 128 images, forward and backward, one
   * thread: 6.45 -> 5.63 ms a pass; 16x16 64 -> 64: 5.15 -> 4.45. */
  o.stream = !o.pool && p->out_c % 16 == 0 &&
             cpu_streams(o.y, (size_t)p->n * p->out_h * p->out_w * p->out_c *
                                  sizeof *o.y);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t b = 0; b < blocks; b++) {
    float *v = cw->scratch + omp_get_thread_num() * cw->scratch_floats;
    float *m = v + POS * block * p->in_c, *edge = m + POS * block * p->out_c;
    int64_t first = b * block;
    int64_t count = tiles - first < block ? tiles - first : block;
    for (int64_t t = 0; t < count; t++) input_tile(p, x, edge, first + t, t, v);
    products(p, cw->u, v, count, m);
    for (int64_t t = 0; t < count; t++) output_tile(p, m, &o, first + t, t);
    if (o.stream) cpu_stream_fence();
  }
}

/* The forward, its outputs to o (y, and how, but for bias and relu). */
static void forward(mxu_op *op, const float *x, const float *w, const float *b,
                    wino_out o) {
  struct cpu_conv_wino *cw = op->conv_wino;
  transform_kernel(w, cw->forward.in_c, cw->forward.out_c, cw->u);
  o.bias = op->has_bias ? b : NULL;
  o.relu = cw->relu;
  run_pass(cw, &cw->forward, x, o);
}

void cpu_conv_wino_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y) {
  forward(op, x, w, b, (wino_out){.y = y});
}

/* The forward and a 2x2 max pooling after it (stride 2, windows inside
 * the output), relu after the pooling when pool_relu: y pooled, ws its
 * maxima's positions (NULL in inference). */
void cpu_conv_wino_forward_pool(mxu_op *op, const float *x, const float *w,
                                const float *b, int pool_relu, float *y,
                                uint8_t *ws) {
  forward(op, x, w, b,
          (wino_out){.y = y, .pool = 1, .pool_relu = pool_relu, .ws = ws});
}

/* dx is the forward of dy with the kernel [ky][kx][ci][co] as
 * [2 - ky][2 - kx][co][ci]. */
void cpu_conv_wino_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx) {
  struct cpu_conv_wino *cw = op->conv_wino;
  const wino_pass *p = &cw->backward;
  int64_t ci_n = p->out_c, co_n = p->in_c;
  for (int tap = 0; tap < 9; tap++) {
    const float *from = w + (int64_t)(8 - tap) * ci_n * co_n;
    float *to = cw->turned + (int64_t)tap * ci_n * co_n;
    for (int64_t ci = 0; ci < ci_n; ci++)
      for (int64_t co = 0; co < co_n; co++)
        to[co * ci_n + ci] = from[ci * co_n + co];
  }
  transform_kernel(cw->turned, p->in_c, p->out_c, cw->u);
  run_pass(cw, p, dy, (wino_out){.y = dx});
}

/* dw[ky][kx][ci][co] = G^T dU G, dU the chunks' partial sums added in
 * chunk order; db the same. */
static void kernel_gradient(const struct cpu_conv_wino *cw, float *dw,
                            float *db) {
  int64_t in_c = cw->forward.in_c, out_c = cw->forward.out_c;
  int64_t tap = in_c * out_c, per_chunk = POS * tap + out_c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(in_c))
  for (int64_t ci = 0; ci < in_c; ci++)
    for (int64_t co = 0; co < out_c; co += LANES) {
      vf rows[6][3];
      for (int a = 0; a < 6; a++) {
        vf u[6], g[3];
        for (int b = 0; b < 6; b++) {
          const float *at = cw->partial + (a * 6 + b) * tap + ci * out_c + co;
          u[b] = *(const vf *)at;
          for (int64_t k = 1; k < cw->chunks; k++)
            u[b] += *(const vf *)(at + k * per_chunk);
        }
        kernel_gradient_line(u, g);
        for (int kx = 0; kx < 3; kx++) rows[a][kx] = g[kx];
      }
      for (int kx = 0; kx < 3; kx++) {
        vf col[6] = {rows[0][kx], rows[1][kx], rows[2][kx],
                     rows[3][kx], rows[4][kx], rows[5][kx]},
           g[3];
        kernel_gradient_line(col, g);
        for (int ky = 0; ky < 3; ky++)
          *(vfu *)(dw + (ky * 3 + kx) * tap + ci * out_c + co) = g[ky];
      }
    }
  for (int64_t co = 0; db && co < out_c; co++) {
    const float *at = cw->partial + POS * tap + co;
    float sum = at[0];
    for (int64_t k = 1; k < cw->chunks; k++) sum += at[k * per_chunk];
    db[co] = sum;
  }
}

/* dU[p] = sum over tiles of V[p]^T W[p] (V: x's windows transformed, W:
 * the outputs' gradient transformed), taken over a fixed number of
 * chunks of blocks (by shape, not thread count: the same bits on any),
 * each chunk's sums in its own partial. */
void cpu_conv_wino_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db) {
  struct cpu_conv_wino *cw = op->conv_wino;
  const wino_pass *p = &cw->forward;
  int64_t in_c = p->in_c, out_c = p->out_c, kernel = POS * in_c * out_c;
  int64_t tiles = tiles_of(p), block = weights_block_of(p);
  int64_t blocks = (tiles + block - 1) / block, chunks = cw->chunks;
  int threads = cpu_threads_for(chunks);
  if (threads > cw->threads) threads = cw->threads;
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t k = 0; k < chunks; k++) {
    float *v = cw->scratch + omp_get_thread_num() * cw->scratch_floats;
    float *g = v + POS * block * in_c, *edge = g + POS * block * out_c;
    float *part = cw->partial + k * (kernel + out_c);
    memset(part, 0, (size_t)(kernel + out_c) * sizeof *part);
    for (int64_t b = k * blocks / chunks; b < (k + 1) * blocks / chunks; b++) {
      int64_t first = b * block;
      int64_t count = tiles - first < block ? tiles - first : block;
      for (int64_t t = 0; t < count; t++) {
        input_tile(p, x, edge, first + t, t, v);
        gradient_tile(p, dy, edge, first + t, t, g, part + kernel);
      }
      for (int pos = 0; pos < POS; pos++) {
        product_at q = {v + pos * in_c,
                        g + pos * out_c,
                        part + pos * in_c * out_c,
                        1,
                        POS * in_c,
                        POS * out_c,
                        out_c,
                        count};
        product(&q, in_c, out_c, 1);
      }
    }
  }
  kernel_gradient(cw, dw, db);
}

/* Plain float32 NHWC 3x3 stride-1 convs with whole vectors of channels,
 * linear or relu, whose tiles are at least half used (2x2 outputs fill a
 * quarter of their 4x4 tile: no fewer multiplications than direct). The
 * transformed kernel is read once per block of tiles, so with 256 x 256
 * channels or more images need 4 tiles or more (the op alone on 64
 * images, 2 threads: 8x8 of 256 -> 256 3x oneDNN's speed forward, 1.4x
 * for the weights; 3x3 of 256 -> 256 and 4x4 of 512 -> 512 1.2-3x slower
 * than oneDNN but for the weights). */
int cpu_conv_wino_fits(const mxu_conv2d_desc *d) {
  int64_t tiles = (int64_t)((d->out_h + 3) / 4) * ((d->out_w + 3) / 4);
  return !d->bf16 && !d->x_native && !d->y_native && mxu_conv2d_plain(d) &&
         d->kernel_h == 3 && d->kernel_w == 3 && d->stride_h == 1 &&
         d->stride_w == 1 && d->in_c % LANES == 0 && d->out_c % LANES == 0 &&
         (d->activation == MXU_LINEAR || d->activation == MXU_RELU) &&
         2 * d->out_h * d->out_w >= 16 * tiles &&
         (tiles >= 4 || (int64_t)d->in_c * d->out_c < 256 * 256);
}

mxu_status cpu_conv_wino_attach(mxu_op *op, const mxu_conv2d_desc *d) {
  wino_pass forward = {d->n,     d->in_h,  d->in_w,    d->in_c,    d->out_h,
                       d->out_w, d->out_c, d->pad_top, d->pad_left};
  wino_pass backward = {d->n,     d->out_h,       d->out_w,
                        d->out_c, d->in_h,        d->in_w,
                        d->in_c,  2 - d->pad_top, 2 - d->pad_left};
  int threads = cpu_create_threads();
  /* All passes have in_c + out_c channels, the weight gradient's blocks
   * the most tiles; V, M and the edge window keep the vectors' alignment
   * (36 x a vector's floats). */
  int64_t widest = d->in_c > d->out_c ? d->in_c : d->out_c;
  int64_t block = weights_block_of(&forward);
  int64_t per_thread = POS * (block * (d->in_c + d->out_c) + widest);
  int64_t kernel = (int64_t)POS * d->in_c * d->out_c;
  size_t head = (sizeof(struct cpu_conv_wino) + 63) / 64 * 64;
  int64_t blocks = (tiles_of(&forward) + block - 1) / block;
  int64_t chunks = blocks < MAX_CHUNKS ? blocks : MAX_CHUNKS;
  while (chunks > 2 && chunks * (kernel + d->out_c) * (int64_t)sizeof(float) >
                           MAX_PARTIAL_BYTES)
    chunks--;
  size_t floats = (size_t)(per_thread * threads + kernel + 9 * kernel / POS +
                           chunks * (kernel + d->out_c));
  struct cpu_conv_wino *cw = mxu_aligned_alloc(head + floats * sizeof(float));
  if (!cw) return mxu_fail(MXU_ERR_NOMEM, "conv2d: out of memory");
  *cw = (struct cpu_conv_wino){.forward = forward,
                               .backward = backward,
                               .relu = d->activation == MXU_RELU,
                               .threads = threads,
                               .scratch_floats = per_thread};
  cw->scratch = (float *)(void *)((char *)cw + head);
  cw->u = cw->scratch + per_thread * threads;
  cw->turned = cw->u + kernel;
  cw->partial = cw->turned + 9 * kernel / POS;
  cw->chunks = chunks;
  op->conv_wino = cw;
  return MXU_OK;
}
