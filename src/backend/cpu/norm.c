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
 * cifar images (mxu bench --profile). */
#include "backend/cpu/cpu.h"

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

/* The scratch holds, per channel: 2 sums in double (the total), 3
 * coefficients, and each block's 2 sums in float. */
typedef struct bn_shape {
  int64_t rows, c;
  int64_t per, blocks; /* rows per block, and blocks */
  double epsilon;
  double *total;      /* [2][c] */
  float *coefficient; /* [3][c] */
  float *partial;     /* [blocks][2][c] */
} bn_shape;

/* Longest period the periodic loops take (16 channels' worth). */
#define MAX_PERIOD 256

/* Per-channel values repeated along a period (see above). */
typedef struct periodic {
  int64_t period; /* lcm(c, 16), or 0 where the plain loops run */
  float v[4][MAX_PERIOD];
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
         (size_t)((3 + 2 * blocks) * c) * sizeof(float);
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
  s.partial = s.coefficient + 3 * s.c;
  return s;
}

static int64_t block_end(const bn_shape *s, int64_t b) {
  int64_t end = (b + 1) * s->per;
  return end < s->rows ? end : s->rows;
}

/* ---- the sums ---------------------------------------------------------- */

static float *partial_of(const bn_shape *s, int64_t b) {
  return s->partial + b * 2 * s->c;
}

/* Block b's sums of x - shift and of its square, per channel, in float
 * (16 lanes a vector). Shifting by one sample keeps the one-pass variance
 * exact enough even when the mean is far larger than the spread (raw
 * pixels). */
static void moment_block(const bn_shape *s, int64_t b, const float *x,
                         const float *shift, const periodic *p) {
  int64_t c = s->c;
  float *restrict sum = partial_of(s, b), *restrict squares = sum + c;
  memset(sum, 0, (size_t)(2 * c) * sizeof *sum);
  int64_t r = b * s->per;
  if (p->period) {
    float lane_sum[MAX_PERIOD] = {0}, lane_squares[MAX_PERIOD] = {0};
    const float *restrict sp = p->v[0];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
      const float *restrict v = x + r * c;
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++) {
        float d = v[j] - sp[j];
        lane_sum[j] += d;
        lane_squares[j] += d * d;
      }
    }
    for (int64_t j = 0; j < p->period; j++) {
      sum[j % c] += lane_sum[j];
      squares[j % c] += lane_squares[j];
    }
  }
  for (; r < block_end(s, b); r++) {
    const float *restrict row = x + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; j++) {
      float d = row[j] - shift[j];
      sum[j] += d;
      squares[j] += d * d;
    }
  }
}

/* The gradient at the normalisation's output: dy, or with the relu fused
 * (act a constant where inlined), dy where the relu's y is positive (and
 * for relu6 below 6). */
static inline __attribute__((always_inline)) float
dz_at(const float *y, const float *dy, int64_t i, mxu_activation act) {
  if (act == MXU_LINEAR) return dy[i];
  int open = y[i] > 0.0f && (act != MXU_RELU6 || y[i] < 6.0f);
  return open ? dy[i] : 0.0f;
}

/* Block b's sums of dz and of dz * (x - mean), per channel, as above. */
static inline __attribute__((always_inline)) void
gradient_block(const bn_shape *s, int64_t b, const float *x, const float *y,
               const float *dy, const float *mean, const periodic *p,
               mxu_activation act) {
  int64_t c = s->c;
  float *restrict sum = partial_of(s, b), *restrict dot = sum + c;
  memset(sum, 0, (size_t)(2 * c) * sizeof *sum);
  int64_t r = b * s->per;
  if (p->period) {
    float lane_sum[MAX_PERIOD] = {0}, lane_dot[MAX_PERIOD] = {0};
    const float *restrict mp = p->v[0];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
      const float *restrict xv = x + r * c, *restrict g = dy + r * c;
      const float *yv = act != MXU_LINEAR ? y + r * c : NULL;
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++) {
        float dz = dz_at(yv, g, j, act);
        lane_sum[j] += dz;
        lane_dot[j] += dz * (xv[j] - mp[j]);
      }
    }
    for (int64_t j = 0; j < p->period; j++) {
      sum[j % c] += lane_sum[j];
      dot[j % c] += lane_dot[j];
    }
  }
  for (; r < block_end(s, b); r++) {
    const float *restrict xr = x + r * c, *restrict g = dy + r * c;
    const float *yr = act != MXU_LINEAR ? y + r * c : NULL;
#pragma omp simd
    for (int64_t j = 0; j < c; j++) {
      float dz = dz_at(yr, g, j, act);
      sum[j] += dz;
      dot[j] += dz * (xr[j] - mean[j]);
    }
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

/* y = (x - mean) * scale + beta over block b; 0 where that is below
 * floor and ceiling where above it (the fused relu's 0 and relu6's 6,
 * else infinities: never, NaN included). */
static void normalise_block(const bn_shape *s, int64_t b, const float *x,
                            const float *mean, const float *scale,
                            const float *beta, const periodic *p,
                            const float bounds[2], float *y) {
  float floor = bounds[0], ceiling = bounds[1];
  int64_t c = s->c;
  int64_t r = b * s->per;
  if (p->period) {
    const float *restrict mp = p->v[0], *restrict sp = p->v[1],
                          *restrict bp = p->v[2];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
      const float *restrict xv = x + r * c;
      float *restrict yv = y + r * c;
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++) {
        float v = (xv[j] - mp[j]) * sp[j] + bp[j];
        v = v < floor ? 0.0f : v;
        yv[j] = v > ceiling ? ceiling : v;
      }
    }
  }
  for (; r < block_end(s, b); r++) {
    const float *restrict xr = x + r * c;
    float *restrict yr = y + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; j++) {
      float v = (xr[j] - mean[j]) * scale[j] + beta[j];
      v = v < floor ? 0.0f : v;
      yr[j] = v > ceiling ? ceiling : v;
    }
  }
}

/* dx = dz * k[0] + (x - mean) * k[1] + k[2] over block b, k[i] = k + i*c. */
static inline __attribute__((always_inline)) void
backward_block(const bn_shape *s, int64_t b, const float *x, const float *y,
               const float *dy, const float *mean, const float *k,
               const periodic *p, mxu_activation act, float *dx) {
  int64_t c = s->c;
  const float *k0 = k, *k1 = k + c, *k2 = k + 2 * c;
  int64_t r = b * s->per;
  if (p->period) {
    const float *restrict mp = p->v[0], *restrict p0 = p->v[1],
                          *restrict p1 = p->v[2], *restrict p2 = p->v[3];
    for (; r + p->period / c <= block_end(s, b); r += p->period / c) {
      const float *restrict xv = x + r * c, *restrict g = dy + r * c;
      const float *yv = act != MXU_LINEAR ? y + r * c : NULL;
      float *restrict out = dx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < p->period; j++)
        out[j] = dz_at(yv, g, j, act) * p0[j] + (xv[j] - mp[j]) * p1[j] + p2[j];
    }
  }
  for (; r < block_end(s, b); r++) {
    const float *restrict xr = x + r * c, *restrict g = dy + r * c;
    const float *yr = act != MXU_LINEAR ? y + r * c : NULL;
    float *restrict out = dx + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; j++)
      out[j] = dz_at(yr, g, j, act) * k0[j] + (xr[j] - mean[j]) * k1[j] + k2[j];
  }
}

static void normalise(const bn_shape *s, const float *x, const float *gamma,
                      const float *beta, const float *mean, const float *var,
                      mxu_activation act, float *y) {
  float *scale = s->coefficient;
  for (int64_t j = 0; j < s->c; j++)
    scale[j] = (float)(gamma[j] / sqrt((double)var[j] + s->epsilon));
  float bounds[2] = {act == MXU_LINEAR ? -INFINITY : 0.0f,
                     act == MXU_RELU6 ? 6.0f : INFINITY};
  periodic p = {.period = period_of(s->c)};
  expand(&p, 0, mean, s->c);
  expand(&p, 1, scale, s->c);
  expand(&p, 2, beta, s->c);
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(s->blocks))
  for (int64_t b = 0; b < s->blocks; b++)
    normalise_block(s, b, x, mean, scale, beta, &p, bounds, y);
}

/* ---- the table's entries ------------------------------------------------ */

void cpu_batchnorm_forward_training(mxu_op *op, const float *x,
                                    const float *gamma, const float *beta,
                                    float *y, float *mean, float *var) {
  bn_shape s = shape_of(op);
  /* Row 0 as the shift, where normalise's scale will not overwrite it. */
  float *shift = s.coefficient + s.c;
  memcpy(shift, x, (size_t)s.c * sizeof *shift);
  periodic p = {.period = period_of(s.c)};
  expand(&p, 0, shift, s.c);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++) moment_block(&s, b, x, shift, &p);
  add_blocks(&s);
  const double *total = s.total;
  for (int64_t j = 0; j < s.c; j++) {
    double m = total[j] / (double)s.rows;
    double v = total[s.c + j] / (double)s.rows - m * m; /* biased, as Keras */
    mean[j] = (float)(shift[j] + m);
    var[j] = (float)(v < 0.0 ? 0.0 : v); /* rounding; NaN stays */
  }
  normalise(&s, x, gamma, beta, mean, var, op->activation, y);
}

void cpu_batchnorm_forward_inference(mxu_op *op, const float *x,
                                     const float *gamma, const float *beta,
                                     const float *mean, const float *var,
                                     float *y) {
  bn_shape s = shape_of(op);
  normalise(&s, x, gamma, beta, mean, var, op->activation, y);
}

/* With xhat = (x - mean) / sigma, sigma = sqrt(var + eps), and N rows:
 * dbeta = sum dy, dgamma = sum dy xhat, and
 * dx = gamma / sigma * (dy - dbeta / N - xhat dgamma / N), which is
 * dy k0 + (x - mean) k1 + k2 with per-channel k0 = gamma / sigma,
 * k1 = -gamma dgamma / (N sigma^2) and k2 = -gamma dbeta / (N sigma). */
void cpu_batchnorm_backward(mxu_op *op, const float *x, const float *y,
                            const float *dy, const float *gamma,
                            const float *mean, const float *var, float *dx,
                            float *dgamma, float *dbeta) {
  bn_shape s = shape_of(op);
  int64_t c = s.c;
  mxu_activation act = op->activation;
  periodic p = {.period = period_of(c)};
  expand(&p, 0, mean, c);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++) {
    /* One specialisation per activation, the mask's tests inlined. */
    if (act == MXU_RELU)
      gradient_block(&s, b, x, y, dy, mean, &p, MXU_RELU);
    else if (act == MXU_RELU6)
      gradient_block(&s, b, x, y, dy, mean, &p, MXU_RELU6);
    else
      gradient_block(&s, b, x, y, dy, mean, &p, MXU_LINEAR);
  }
  add_blocks(&s);
  const double *total = s.total, rows = (double)s.rows;
  float *k = s.coefficient;
  for (int64_t j = 0; j < c; j++) {
    double inv = 1.0 / sqrt((double)var[j] + s.epsilon);
    double sum_dy = total[j], sum_xhat = total[c + j] * inv;
    dbeta[j] = (float)sum_dy;
    dgamma[j] = (float)sum_xhat;
    k[j] = (float)(gamma[j] * inv);
    k[c + j] = (float)(-gamma[j] * sum_xhat * inv * inv / rows);
    k[2 * c + j] = (float)(-gamma[j] * sum_dy * inv / rows);
  }
  for (int i = 0; i < 3; i++) expand(&p, 1 + i, k + i * c, c);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(s.blocks))
  for (int64_t b = 0; b < s.blocks; b++) {
    if (act == MXU_RELU)
      backward_block(&s, b, x, y, dy, mean, k, &p, MXU_RELU, dx);
    else if (act == MXU_RELU6)
      backward_block(&s, b, x, y, dy, mean, k, &p, MXU_RELU6, dx);
    else
      backward_block(&s, b, x, y, dy, mean, k, &p, MXU_LINEAR, dx);
  }
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
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, BN));
  op->activation = desc->activation;
  return cpu_op_finish(op, bn_build(op, desc), out);
}
