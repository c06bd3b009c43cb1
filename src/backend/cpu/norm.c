/* norm.c — batch normalisation over [rows, c] (rows = n*h*w of an NHWC
 * activation), with separate gamma (scale) and beta (shift) arrays:
 * training, inference on given statistics, and the full backward with
 * dgamma and dbeta.
 *
 * The kernels are plain C. oneDNN 2.6 ran this layout through a generic
 * kernel for few channels (45 ms a step for 1024x32x32x3, some 10x what
 * memory speed allows), its JIT kernel for 32 channels was no faster than
 * these loops, and its statistics changed with the thread count. A oneDNN
 * primitive descriptor is still built: it validates the shape at create
 * and keeps it (rows, c, epsilon) for the kernels.
 *
 * Determinism: the rows are cut into fixed blocks (by shape only), each
 * block's sums are taken in float in row order, and the blocks' sums are
 * added in double in block order; so threads may take the blocks in any split
 * and the statistics come out the same bits. Elementwise passes are split the
 * same way and depend on nothing but their own values.
 *
 * Channels not in sixteens (cifar's input has 3) leave a row too short for
 * a vector: the loops then run over the block as one flat array, a period
 * of lcm(c, 16) values at a time, with each per-channel value repeated
 * along the period ("periodic" below), and the period's lanes are folded
 * into channels at the end. For c = 3 that is 3 full vectors instead of a
 * 3-wide loop: forward + backward 1.24 + 1.41 -> 0.50 + 0.57 ms per 128
 * cifar images (mxu bench --profile).
 *
 * The activation that alone reads the output may be fused (relu, relu6,
 * silu, hard_silu): its pass over memory, forward and backward, is saved.
 * Backward recomputes the normalised value from x rather than read y.
 *
 * x and y may be bf16 tensors (x_bf16, y_bf16: between bf16 convs), read
 * and written at 2 bytes a value, the sums and dx float32: each pass is
 * compiled once per combination (WITH_BF16), so the conversions inline. */
#include "backend/cpu/cpu.h"
#include "core/fast_math.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* prim[BN_DESC] keeps the descriptor only; prim[BN_SCRATCH] has no
 * primitive, its scratch holds the kernels' sums and coefficients. */
enum { BN_DESC, BN_SCRATCH };

static const char BN[] = "batchnorm";

static const unsigned BN_FLAGS = dnnl_use_scale | dnnl_use_shift;

/* A block is at most this many rows and about BLOCK_VALUES values: small
 * enough that its float sums lose nothing that matters (they are added
 * across blocks in double) and that two threads share out a 1 MB tensor,
 * big enough to amortise a thread's start. */
#define BLOCK_ROWS 1024
#define BLOCK_VALUES 16384

/* The scratch holds, per channel: 2 sums in double (the total), 4
 * coefficients, and each block's 2 sums in float. */
typedef struct bn_shape {
  int64_t rows, c;
  int64_t per, blocks; /* rows per block, and blocks */
  double epsilon;
  double *total;      /* [2][c] */
  float *coefficient; /* [4][c] */
  float *partial;     /* [blocks][2][c] */
} bn_shape;

/* Longest period the periodic loops take (16 channels' worth). */
#define MAX_PERIOD 256

/* Per-channel values repeated along a period (see above): the mean, the
 * normalisation's scale and shift (v = (x - mean) scale + beta, which
 * backward recomputes under a fused activation) and backward's k0..k2. */
enum { P_MEAN, P_SCALE, P_BETA, P_K0, P_K1, P_K2 };

typedef struct periodic {
  int64_t period; /* lcm(c, 16), or 0 where the plain loops run */
  float v[6][MAX_PERIOD];
} periodic;

static int64_t period_of(int64_t c) {
  int64_t a = c, b = 16;
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  int64_t lcm = c / a * 16;
  return c % 16 != 0 && lcm <= MAX_PERIOD ? lcm : 0;
}

/* p->v[k] from channel values `from`; period 0 leaves it unused. */
static void expand(periodic *p, int k, const float *from, int64_t c) {
  for (int64_t j = 0; j < p->period; j++) p->v[k][j] = from[j % c];
}

static int64_t rows_per_block(int64_t c) {
  int64_t rows = c < BLOCK_VALUES ? BLOCK_VALUES / c : 1;
  return rows < BLOCK_ROWS ? rows : BLOCK_ROWS;
}

static size_t scratch_bytes(int64_t rows, int64_t c) {
  int64_t per = rows_per_block(c), blocks = (rows + per - 1) / per;
  return (size_t)(2 * c) * sizeof(double) +
         (size_t)((4 + 2 * blocks) * c) * sizeof(float);
}

/* The shape kept by the training descriptor. */
static bn_shape shape_of(const mxu_op *op) {
  const dnnl_batch_normalization_desc_t *d = NULL;
  dnnl_primitive_desc_query(op->prim[BN_DESC].pd,
                            dnnl_query_batch_normalization_d, 0, &d);
  bn_shape s = {0};
  s.rows = d->data_desc.dims[0];
  s.c = d->data_desc.dims[1];
  s.per = rows_per_block(s.c);
  s.blocks = (s.rows + s.per - 1) / s.per;
  s.epsilon = d->batch_norm_epsilon;
  s.total = op->prim[BN_SCRATCH].scratch;
  s.coefficient = (float *)(void *)(s.total + 2 * s.c);
  s.partial = s.coefficient + 4 * s.c;
  return s;
}

static int64_t block_end(const bn_shape *s, int64_t b) {
  int64_t end = (b + 1) * s->per;
  return end < s->rows ? end : s->rows;
}

/* ---- the fused activations ----------------------------------------------
 * Each pass below is compiled once per activation (WITH_ACTIVATION), so
 * its tests fold away and the silu's arithmetic is vectorised inline. */

#define INLINE static inline __attribute__((always_inline))

/* Value i of x, float32 or (bf, a constant) bf16. */
INLINE float load(const void *v, int64_t i, int bf) {
  return bf ? cpu_bf16_float(((const uint16_t *)v)[i]) : ((const float *)v)[i];
}

/* silu(v) = v sigmoid(v), and its slope sigmoid(v) (1 + v (1 -
 * sigmoid(v))); with e = e^-|v| and q = 1 / (1 + e), 1 - sigmoid(v) is
 * e q for v >= 0 and q below (core/fast_math.h). */
INLINE float silu(float v) { return v * sigmoid(v); }

INLINE float silu_slope(float v) {
  float e = exp_neg_abs(v), q = 1.0f / (1.0f + e), eq = e * q;
  float s = v >= 0.0f ? q : eq, rest = v >= 0.0f ? eq : q;
  return s * (1.0f + v * rest);
}

/* hard_silu(v) = v relu6(v + 3) / 6, rounded in Keras' order; its slope
 * (2v + 3) / 6 inside (-3, 3), 1 above, 0 below (relu6's gradient is
 * TensorFlow's: 0 at the corners). */
INLINE float relu6_of(float v) {
  v = v < 0.0f ? 0.0f : v;
  return v > 6.0f ? 6.0f : v;
}

INLINE float hard_silu(float v) { return v * relu6_of(v + 3.0f) / 6.0f; }

INLINE float hard_silu_slope(float v) {
  float inside = v > -3.0f && v < 3.0f ? v / 6.0f : 0.0f;
  return relu6_of(v + 3.0f) / 6.0f + inside;
}

/* The fused activation of the normalised v; the relus keep NaN. */
INLINE float activate(float v, mxu_activation act) {
  if (act == MXU_SILU) return silu(v);
  if (act == MXU_HARD_SILU) return hard_silu(v);
  if (act == MXU_LINEAR) return v;
  if (act == MXU_RELU6) return relu6_of(v);
  return v < 0.0f ? 0.0f : v;
}

/* The gradient at the normalisation's output v: dy; with the relu fused,
 * dy where v (so the relu's y) is positive (and for relu6 below 6); with
 * silu, dy silu'(v). Backward recomputes v from x (the same expression as
 * forward, so the same bits) rather than read y: a third less memory. */
INLINE float dz_at(float dy, float v, mxu_activation act) {
  if (act == MXU_LINEAR) return dy;
  if (act == MXU_SILU) return dy * silu_slope(v);
  if (act == MXU_HARD_SILU) return dy * hard_silu_slope(v);
  int open = v > 0.0f && (act != MXU_RELU6 || v < 6.0f);
  return open ? dy : 0.0f;
}

/* Calls CALL with A the op's activation as a constant: one copy of the
 * (inlined) pass per activation. */
#define WITH_ACTIVATION(act, CALL)                                             \
  do {                                                                         \
    if ((act) == MXU_RELU) {                                                   \
      const mxu_activation A = MXU_RELU;                                       \
      CALL;                                                                    \
    } else if ((act) == MXU_RELU6) {                                           \
      const mxu_activation A = MXU_RELU6;                                      \
      CALL;                                                                    \
    } else if ((act) == MXU_SILU) {                                            \
      const mxu_activation A = MXU_SILU;                                       \
      CALL;                                                                    \
    } else if ((act) == MXU_HARD_SILU) {                                       \
      const mxu_activation A = MXU_HARD_SILU;                                  \
      CALL;                                                                    \
    } else {                                                                   \
      const mxu_activation A = MXU_LINEAR;                                     \
      CALL;                                                                    \
    }                                                                          \
  } while (0)

/* Calls CALL with NAME (x or y in bf16) the constant flag. */
#define WITH_BF16(NAME, flag, CALL)                                            \
  do {                                                                         \
    if (flag) {                                                                \
      const int NAME = 1;                                                      \
      CALL;                                                                    \
    } else {                                                                   \
      const int NAME = 0;                                                      \
      CALL;                                                                    \
    }                                                                          \
  } while (0)

/* Per-channel arrays a pass reads: the mean and the normalisation's scale
 * and shift (v = (x - mean) * scale + beta; backward reads scale and beta
 * under a fused activation only), and backward's k0..k2. */
typedef struct channel_values {
  const float *mean, *scale, *beta, *k[3];
} channel_values;

/* ---- the sums ---------------------------------------------------------- */

static float *partial_of(const bn_shape *s, int64_t b) {
  return s->partial + b * 2 * s->c;
}

/* Channels a run of sums holds at once; and up to how many channels the
 * sums run so: with more, adding row after row into memory leaves each
 * channel's chain of additions time enough (MobileNetV2's normalisations
 * of 96-1280 channels ran 4% slower in rows inside channel vectors). */
#define SUM_LANES 16
#define FEW_CHANNELS 32

/* Rows [r0, r1)'s sums of x - shift and of its square for channels
 * [j0, j0 + n), added in row order to acc and sq (n of each): the
 * block's sums themselves, or (few channels) a copy of a vector of them
 * that, inlined with n constant, stays in registers, where adding each
 * row into memory chained every row's sums on the last one's store (the
 * pass ran at a third of memory's speed). */
INLINE void moment_rows(const void *x, const float *shift, int64_t c,
                        int64_t r0, int64_t r1, int64_t j0, int64_t n, int xb,
                        float *restrict acc, float *restrict sq) {
  for (int64_t r = r0; r < r1; r++)
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      float d = load(x, r * c + j0 + j, xb) - shift[j0 + j];
      acc[j] += d;
      sq[j] += d * d;
    }
}

/* Block b's sums of x - shift and of its square, per channel, in float
 * (16 lanes a vector). Shifting by one sample keeps the one-pass variance
 * exact enough even when the mean is far larger than the spread (raw
 * pixels). */
INLINE void moment_block(const bn_shape *s, int64_t b, const void *x,
                         const float *shift, const periodic *p, int xb) {
  int64_t c = s->c;
  float *restrict sum = partial_of(s, b), *restrict squares = sum + c;
  memset(sum, 0, (size_t)(2 * c) * sizeof *sum);
  int64_t r = b * s->per;
  if (p->period) {
    float lane_sum[MAX_PERIOD] = {0}, lane_squares[MAX_PERIOD] = {0};
    const float *restrict sp = p->v[0];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++) {
        float d = load(x, r * c + j, xb) - sp[j];
        lane_sum[j] += d;
        lane_squares[j] += d * d;
      }
    }
    for (int64_t j = 0; j < p->period; j++) {
      sum[j % c] += lane_sum[j];
      squares[j % c] += lane_squares[j];
    }
  }
  if (c > FEW_CHANNELS) { /* each channel's chain has time enough */
    moment_rows(x, shift, c, r, block_end(s, b), 0, c, xb, sum, squares);
    return;
  }
  for (int64_t j0 = 0; j0 < c; j0 += SUM_LANES) {
    int64_t n = c - j0 < SUM_LANES ? c - j0 : SUM_LANES;
    float acc[SUM_LANES], sq[SUM_LANES];
    memcpy(acc, sum + j0, (size_t)n * sizeof *acc);
    memcpy(sq, squares + j0, (size_t)n * sizeof *sq);
    if (n == SUM_LANES)
      moment_rows(x, shift, c, r, block_end(s, b), j0, SUM_LANES, xb, acc, sq);
    else
      moment_rows(x, shift, c, r, block_end(s, b), j0, n, xb, acc, sq);
    memcpy(sum + j0, acc, (size_t)n * sizeof *acc);
    memcpy(squares + j0, sq, (size_t)n * sizeof *sq);
  }
}

/* gradient_block's sums over rows [r0, r1) for channels [j0, j0 + n),
 * into acc and dt, as moment_rows'. */
INLINE void gradient_rows(const void *x, const void *dy,
                          const channel_values *cv, int64_t c, int64_t r0,
                          int64_t r1, int64_t j0, int64_t n, mxu_activation act,
                          int xb, int gb, float *dz_out, float *restrict acc,
                          float *restrict dt) {
  int fused = act != MXU_LINEAR, fused_silu = act == MXU_SILU;
  const float *restrict mean = cv->mean + j0, *restrict scale = cv->scale + j0,
                        *restrict beta = cv->beta + j0;
  for (int64_t r = r0; r < r1; r++) {
    float *restrict dzr = fused_silu ? dz_out + r * c + j0 : NULL;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      float xr = load(x, r * c + j0 + j, xb);
      float v = fused ? (xr - mean[j]) * scale[j] + beta[j] : 0.0f;
      float dz = dz_at(load(dy, r * c + j0 + j, gb), v, act);
      if (fused_silu) dzr[j] = dz;
      acc[j] += dz;
      dt[j] += dz * (xr - mean[j]);
    }
  }
}

/* Block b's sums of dz and of dz * (x - mean), per channel, as above;
 * with silu dz is also written to dz_out, so that the second pass reads
 * it rather than compute the slope again (1.3x faster). */
INLINE void gradient_block(const bn_shape *s, int64_t b, const void *x,
                           const void *dy, const channel_values *cv,
                           const periodic *p, mxu_activation act, int xb,
                           int gb, float *dz_out) {
  int64_t c = s->c;
  float *restrict sum = partial_of(s, b), *restrict dot = sum + c;
  memset(sum, 0, (size_t)(2 * c) * sizeof *sum);
  int fused = act != MXU_LINEAR, fused_silu = act == MXU_SILU;
  int64_t r = b * s->per;
  if (p->period) {
    float lane_sum[MAX_PERIOD] = {0}, lane_dot[MAX_PERIOD] = {0};
    const float *restrict mp = p->v[P_MEAN], *restrict sp = p->v[P_SCALE],
                          *restrict bp = p->v[P_BETA];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
      float *restrict dzv = fused_silu ? dz_out + r * c : NULL;
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++) {
        float xv = load(x, r * c + j, xb);
        float v = fused ? (xv - mp[j]) * sp[j] + bp[j] : 0.0f;
        float dz = dz_at(load(dy, r * c + j, gb), v, act);
        if (fused_silu) dzv[j] = dz;
        lane_sum[j] += dz;
        lane_dot[j] += dz * (xv - mp[j]);
      }
    }
    for (int64_t j = 0; j < p->period; j++) {
      sum[j % c] += lane_sum[j];
      dot[j % c] += lane_dot[j];
    }
  }
  if (c > FEW_CHANNELS) { /* as moment_block */
    gradient_rows(x, dy, cv, c, r, block_end(s, b), 0, c, act, xb, gb, dz_out,
                  sum, dot);
    return;
  }
  for (int64_t j0 = 0; j0 < c; j0 += SUM_LANES) {
    int64_t n = c - j0 < SUM_LANES ? c - j0 : SUM_LANES;
    float acc[SUM_LANES], dt[SUM_LANES];
    memcpy(acc, sum + j0, (size_t)n * sizeof *acc);
    memcpy(dt, dot + j0, (size_t)n * sizeof *dt);
    if (n == SUM_LANES)
      gradient_rows(x, dy, cv, c, r, block_end(s, b), j0, SUM_LANES, act, xb,
                    gb, dz_out, acc, dt);
    else
      gradient_rows(x, dy, cv, c, r, block_end(s, b), j0, n, act, xb, gb,
                    dz_out, acc, dt);
    memcpy(sum + j0, acc, (size_t)n * sizeof *acc);
    memcpy(dot + j0, dt, (size_t)n * sizeof *dt);
  }
}

/* The blocks' two sums added in block order, in double, into total. */
static void add_blocks(const bn_shape *s) {
  int64_t width = 2 * s->c;
  double *restrict total = s->total;
  memset(total, 0, (size_t)width * sizeof *total);
  for (int64_t b = 0; b < s->blocks; b++) {
    const float *restrict part = partial_of(s, b);
    for (int64_t j = 0; j < width; j++) total[j] += part[j];
  }
}

/* ---- elementwise passes ------------------------------------------------ */

/* Values of a bf16 output computed at a time (whole rows, or a row's
 * part) before cpu_bf16_row rounds them: a row at a time ran ResNet-20's
 * 16 channels 1.6x slower than float32. */
#define Y_CHUNK 256

/* The elementwise passes' period: for 16 channels into bf16 (bf16_out),
 * Y_CHUNK values, one flat span of rows at a time: a row at a time,
 * ResNet-20's 16 channels went through the loop's setup and remainder
 * every row, and its normalisations ran slower in bf16 than in float32
 * (128x32x32x16 on 2 threads, forward 0.27 -> 0.20 ms, backward 0.43 ->
 * 0.31; but 32 and 64 channels ran 5-20% slower so, and float32 outputs
 * no faster). Elementwise, so the same bits. */
static int64_t pass_period(int64_t c, int bf16_out) {
  int64_t period = period_of(c);
  return period || !bf16_out || c != 16 ? period : Y_CHUNK;
}

/* The two elementwise passes: normalise's y = act((x - mean) * scale +
 * beta), and backward's dx = dz * k0 + (x - mean) * k1 + k2. */
enum { NORMALISE, BACKWARD };

/* Values [at, at + n) of a pass, from per-channel values `per` (mean,
 * scale, beta, k0, k1, k2; the k NULL for NORMALISE) lined up with them:
 * the channel values, or a period of them. */
INLINE void pass_values(int pass, const float *const per[6], const void *x,
                        const void *dy, int64_t at, int64_t n,
                        mxu_activation act, int xb, int gb, float *to) {
  int fused = act != MXU_LINEAR;
  const float *restrict mean = per[0], *restrict scale = per[1],
                        *restrict beta = per[2], *restrict k0 = per[3],
                        *restrict k1 = per[4], *restrict k2 = per[5];
  float *restrict out = to;
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float xv = load(x, at + j, xb);
    if (pass == NORMALISE) {
      out[j] = activate((xv - mean[j]) * scale[j] + beta[j], act);
      continue;
    }
    float v = fused ? (xv - mean[j]) * scale[j] + beta[j] : 0.0f;
    float dz = dz_at(load(dy, at + j, gb), v, act);
    out[j] = dz * k0[j] + (xv - mean[j]) * k1[j] + k2[j];
  }
}

static const float *from(const float *v, int64_t j0) {
  return v ? v + j0 : NULL;
}

/* A pass over block b into out, float32 or (ob) bf16, computed Y_CHUNK
 * values (or a period) at a time and then rounded. Backward's dy may be
 * dx (the silu's dz, from the first pass, float32 both): each is read
 * before it is written. */
INLINE void pass_block(int pass, const bn_shape *s, int64_t b, const void *x,
                       const void *dy, const channel_values *cv,
                       const periodic *p, mxu_activation act, int xb, int gb,
                       int ob, void *out) {
  int64_t c = s->c, end = block_end(s, b);
  int64_t r = b * s->per;
  float chunk[Y_CHUNK];
  if (p->period) {
    const float *per[6] = {p->v[P_MEAN], p->v[P_SCALE], p->v[P_BETA],
                           p->v[P_K0],   p->v[P_K1],    p->v[P_K2]};
    for (; r + p->period / c <= end; r += p->period / c) {
      float *to = ob ? chunk : (float *)out + r * c;
      pass_values(pass, per, x, dy, r * c, p->period, act, xb, gb, to);
      if (ob) cpu_bf16_row((uint16_t *)out + r * c, chunk, p->period);
    }
  }
  int64_t rows = !ob ? 1 : c <= Y_CHUNK ? Y_CHUNK / c : 1; /* at a time */
  int64_t width = ob && c > Y_CHUNK ? Y_CHUNK : c;
  for (; r < end; r += rows) {
    int64_t m = end - r < rows ? end - r : rows;
    for (int64_t j0 = 0; j0 < c; j0 += width) {
      int64_t n = c - j0 < width ? c - j0 : width;
      const float *per[6] = {from(cv->mean, j0), from(cv->scale, j0),
                             from(cv->beta, j0), from(cv->k[0], j0),
                             from(cv->k[1], j0), from(cv->k[2], j0)};
      for (int64_t k = 0; k < m; k++)
        pass_values(pass, per, x, dy, (r + k) * c + j0, n, act, xb, gb,
                    ob ? chunk + k * c : (float *)out + (r + k) * c + j0);
      if (ob) cpu_bf16_row((uint16_t *)out + r * c + j0, chunk, m * n);
    }
  }
}

/* gamma / sqrt(var + epsilon), the same bits in forward and backward. */
static void scale_of(const bn_shape *s, const float *gamma, const float *var,
                     float *scale) {
  for (int64_t j = 0; j < s->c; j++)
    scale[j] = (float)(gamma[j] / sqrt((double)var[j] + s->epsilon));
}

static void normalise(const mxu_op *op, const bn_shape *s, const void *x,
                      const float *gamma, const float *beta, const float *mean,
                      const float *var, void *y) {
  float *scale = s->coefficient;
  scale_of(s, gamma, var, scale);
  channel_values cv = {.mean = mean, .scale = scale, .beta = beta};
  periodic p = {.period = pass_period(s->c, op->y_bf16)};
  expand(&p, P_MEAN, mean, s->c);
  expand(&p, P_SCALE, scale, s->c);
  expand(&p, P_BETA, beta, s->c);
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(s->blocks))
  for (int64_t b = 0; b < s->blocks; b++)
    WITH_BF16(XB, op->x_bf16,
              WITH_BF16(YB, op->y_bf16,
                        WITH_ACTIVATION(op->activation,
                                        pass_block(NORMALISE, s, b, x, NULL,
                                                   &cv, &p, A, XB, 0, YB, y))));
}

/* ---- the table's entries ------------------------------------------------ */

void cpu_batchnorm_forward_training(mxu_op *op, const float *x,
                                    const float *gamma, const float *beta,
                                    float *y, float *mean, float *var) {
  bn_shape s = shape_of(op);
  /* Row 0 as the shift, where normalise's scale will not overwrite it. */
  float *shift = s.coefficient + s.c;
  for (int64_t j = 0; j < s.c; j++) shift[j] = load(x, j, op->x_bf16);
  periodic p = {.period = period_of(s.c)};
  expand(&p, 0, shift, s.c);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++)
    WITH_BF16(XB, op->x_bf16, moment_block(&s, b, x, shift, &p, XB));
  add_blocks(&s);
  const double *total = s.total;
  for (int64_t j = 0; j < s.c; j++) {
    double m = total[j] / (double)s.rows;
    double v = total[s.c + j] / (double)s.rows - m * m; /* biased, as Keras */
    mean[j] = (float)(shift[j] + m);
    var[j] = (float)(v < 0.0 ? 0.0 : v); /* rounding; NaN stays */
  }
  normalise(op, &s, x, gamma, beta, mean, var, y);
}

void cpu_batchnorm_forward_inference(mxu_op *op, const float *x,
                                     const float *gamma, const float *beta,
                                     const float *mean, const float *var,
                                     float *y) {
  bn_shape s = shape_of(op);
  normalise(op, &s, x, gamma, beta, mean, var, y);
}

/* With xhat = (x - mean) / sigma, sigma = sqrt(var + eps), and N rows:
 * dbeta = sum dy, dgamma = sum dy xhat, and
 * dx = gamma / sigma * (dy - dbeta / N - xhat dgamma / N), which is
 * dy k0 + (x - mean) k1 + k2 with per-channel k0 = gamma / sigma,
 * k1 = -gamma dgamma / (N sigma^2) and k2 = -gamma dbeta / (N sigma).
 * (dy: the gradient at the normalisation's output, dz above.) */
void cpu_batchnorm_backward(mxu_op *op, const float *x, const float *y,
                            const float *dy, const float *gamma,
                            const float *beta, const float *mean,
                            const float *var, float *dx, float *dgamma,
                            float *dbeta) {
  (void)y; /* the fused activation's mask comes from x (dz_at) */
  bn_shape s = shape_of(op);
  int64_t c = s.c;
  mxu_activation act = op->activation;
  float *k = s.coefficient, *scale = k + 3 * c;
  channel_values cv = {
      .mean = mean, .scale = scale, .beta = beta, .k = {k, k + c, k + 2 * c}};
  periodic p = {.period = period_of(c)};
  expand(&p, P_MEAN, mean, c);
  if (act != MXU_LINEAR) {
    scale_of(&s, gamma, var, scale);
    expand(&p, P_SCALE, scale, c);
    expand(&p, P_BETA, beta, c);
  }
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++)
    WITH_BF16(
        XB, op->x_bf16,
        WITH_BF16(GB, op->dy_bf16,
                  WITH_ACTIVATION(act, gradient_block(&s, b, x, dy, &cv, &p, A,
                                                      XB, GB, dx))));
  add_blocks(&s);
  const double *total = s.total, rows = (double)s.rows;
  for (int64_t j = 0; j < c; j++) {
    double inv = 1.0 / sqrt((double)var[j] + s.epsilon);
    double sum_dy = total[j], sum_xhat = total[c + j] * inv;
    dbeta[j] = (float)sum_dy;
    dgamma[j] = (float)sum_xhat;
    k[j] = (float)(gamma[j] * inv);
    k[c + j] = (float)(-gamma[j] * sum_xhat * inv * inv / rows);
    k[2 * c + j] = (float)(-gamma[j] * sum_dy * inv / rows);
  }
  /* the elementwise pass's period */
  p.period = pass_period(c, op->dx_bf16);
  expand(&p, P_MEAN, mean, c);
  if (act != MXU_LINEAR) {
    expand(&p, P_SCALE, scale, c);
    expand(&p, P_BETA, beta, c);
  }
  for (int i = 0; i < 3; i++) expand(&p, P_K0 + i, k + i * c, c);
  /* silu's dz is in dx already (float32: no bf16 dx with silu), and is
   * all the second pass needs. */
  int silu = act == MXU_SILU;
  const void *dz = silu ? (const void *)dx : dy;
  mxu_activation mask = silu ? MXU_LINEAR : act;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++)
    WITH_BF16(
        XB, op->x_bf16,
        WITH_BF16(GB, op->dy_bf16 && !silu,
                  WITH_BF16(DB, op->dx_bf16,
                            WITH_ACTIVATION(mask, pass_block(BACKWARD, &s, b, x,
                                                             dz, &cv, &p, A, XB,
                                                             GB, DB, dx)))));
}

/* ---- create: descriptors for the shape, and room for the sums ---------- */

/* oneDNN's own check of the shape and epsilon, and where they are kept:
 * a primitive descriptor only, so no kernel is generated. */
static mxu_status describe(mxu_op *op, const mxu_batchnorm_desc *d) {
  dnnl_dims_t dims = {d->rows, d->c, 1, 1};
  dnnl_memory_desc_t md;
  MXU_TRY(cpu_md(&md, 4, dims, dnnl_nhwc, BN));
  dnnl_batch_normalization_desc_t bd;
  CPU_TRY(BN, dnnl_batch_normalization_forward_desc_init, &bd,
          dnnl_forward_training, &md, d->epsilon, BN_FLAGS);
  dnnl_engine_t engine;
  MXU_TRY(cpu_engine(BN, &engine));
  CPU_TRY(BN, dnnl_primitive_desc_create, &op->prim[BN_DESC].pd, &bd, NULL,
          engine, NULL);
  return MXU_OK;
}

static mxu_status bn_build(mxu_op *op, const mxu_batchnorm_desc *d) {
  MXU_TRY(describe(op, d));
  size_t bytes = scratch_bytes(d->rows, d->c);
  op->prim[BN_SCRATCH].scratch = mxu_aligned_alloc(bytes);
  if (!op->prim[BN_SCRATCH].scratch)
    return mxu_fail(MXU_ERR_NOMEM,
                    "onednn: %s: no memory for %zu bytes of sums", BN, bytes);
  return MXU_OK;
}

mxu_status cpu_batchnorm_create(const mxu_batchnorm_desc *desc, mxu_op **out) {
  if (!mxu_batchnorm_fusable(desc->activation))
    return mxu_fail(MXU_ERR_ARG, "onednn: %s: cannot fuse activation %d", BN,
                    (int)desc->activation);
  if (desc->dx_bf16 && desc->activation == MXU_SILU)
    return mxu_fail(MXU_ERR_ARG,
                    "onednn: %s: silu's backward keeps its dz in dx, which "
                    "must be float32",
                    BN);
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, BN));
  op->activation = desc->activation;
  op->x_bf16 = desc->x_bf16;
  op->y_bf16 = desc->y_bf16;
  op->dx_bf16 = desc->dx_bf16;
  op->dy_bf16 = desc->dy_bf16;
  return cpu_op_finish(op, bn_build(op, desc), out);
}
