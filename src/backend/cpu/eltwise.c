/* eltwise.c — standalone activations over [rows, cols]: oneDNN eltwise
 * primitives for those it has (backward from y where y determines the
 * derivative, else from x); relu's backward, softmax and log_softmax (over
 * each row) and
 * what oneDNN 2.6 lacks in plain C. Linear is a copy.
 *
 * Why plain C for those: relu's backward is pure memory traffic, and
 * oneDNN 2.6's kernel moved it at half the speed of the loop below (which
 * also streams a large dx past the cache); its softmax spent ~3 us a row
 * on rows of 10 classes, mostly starting threads. */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { ACT_FWD, ACT_BWD };

static const char ACT[] = "activation";

/* Work is split into blocks of this many values (a multiple of 16, so each
 * block starts on a cache line); a block's values depend on nothing
 * outside it, so any split over threads gives the same bits. */
#define BLOCK 16384

/* How oneDNN computes an activation: the algorithm, its alpha and beta,
 * and whether its backward reads y (the *_use_dst_for_bwd ones, used
 * where y determines the derivative) or x. alg is undef for those oneDNN
 * 2.6 lacks (selu, softsign, both hard_sigmoids: own loops below) and
 * for softplus and mish, whose oneDNN kernels are off by up to 4e-6 for
 * inputs below -15 (softplus even negative there, where it is 1e-7 and
 * less): Poisson losses and variances take the log of it. */
typedef struct eltwise_alg {
  dnnl_alg_kind_t alg;
  float alpha, beta;
  int from_y;
} eltwise_alg;

static eltwise_alg alg_of(mxu_activation activation, float alpha) {
  switch (activation) {
  case MXU_RELU:
    return (eltwise_alg){dnnl_eltwise_relu_use_dst_for_bwd, 0, 0, 1};
  case MXU_SIGMOID:
    return (eltwise_alg){dnnl_eltwise_logistic_use_dst_for_bwd, 0, 0, 1};
  case MXU_TANH:
    return (eltwise_alg){dnnl_eltwise_tanh_use_dst_for_bwd, 0, 0, 1};
  /* clip_v2 passes the gradient strictly inside (0, 6), as TF's relu6. */
  case MXU_RELU6: return (eltwise_alg){dnnl_eltwise_clip_v2, 0, 6, 0};
  case MXU_LEAKY_RELU: return (eltwise_alg){dnnl_eltwise_relu, alpha, 0, 0};
  case MXU_ELU: return (eltwise_alg){dnnl_eltwise_elu, alpha, 0, 0};
  case MXU_CELU: return (eltwise_alg){dnnl_eltwise_elu, 1, 0, 0};
  case MXU_GELU: return (eltwise_alg){dnnl_eltwise_gelu_erf, 0, 0, 0};
  case MXU_GELU_TANH: return (eltwise_alg){dnnl_eltwise_gelu_tanh, 0, 0, 0};
  case MXU_SILU: return (eltwise_alg){dnnl_eltwise_swish, 1, 0, 0};

  case MXU_HARD_SILU: return (eltwise_alg){dnnl_eltwise_hardswish, 0, 0, 0};
  case MXU_EXPONENTIAL:
    return (eltwise_alg){dnnl_eltwise_exp_use_dst_for_bwd, 0, 0, 1};
  default: return (eltwise_alg){dnnl_alg_kind_undef, 0, 0, 0};
  }
}

/* Either kind of op desc; oneDNN tells them apart by their first field. */
typedef union act_desc {
  dnnl_eltwise_desc_t eltwise;
  dnnl_softmax_desc_t softmax;
} act_desc;

/* Softmax's forward primitive is built but never run: its descriptor keeps
 * the row length for the C loops. */
static mxu_status forward_desc(const mxu_activation_desc *d,
                               const dnnl_memory_desc_t *md, act_desc *fwd) {
  if (mxu_activation_rowwise(d->activation)) {
    CPU_TRY(ACT, dnnl_softmax_forward_desc_init, &fwd->softmax,
            dnnl_forward_training, md, 1);
    return MXU_OK;
  }
  eltwise_alg a = alg_of(d->activation, d->alpha);
  CPU_TRY(ACT, dnnl_eltwise_forward_desc_init, &fwd->eltwise,
          dnnl_forward_training, a.alg, md, a.alpha, a.beta);
  return MXU_OK;
}

/* relu and the row-wise ones have their own backward loops. */
static mxu_status backward_create(mxu_op *op, const mxu_activation_desc *d,
                                  const dnnl_memory_desc_t *md) {
  eltwise_alg a = alg_of(d->activation, d->alpha);
  dnnl_eltwise_desc_t bwd;
  CPU_TRY(ACT, dnnl_eltwise_backward_desc_init, &bwd, a.alg, md, md, a.alpha,
          a.beta);
  cpu_prim *b = &op->prim[ACT_BWD];
  MXU_TRY(cpu_prim_create(b, &bwd, dnnl_alg_kind_undef, &op->prim[ACT_FWD], ACT,
                          "backward"));
  MXU_TRY(cpu_prim_arg(b, a.from_y ? DNNL_ARG_DST : DNNL_ARG_SRC, ACT));
  MXU_TRY(cpu_prim_arg(b, DNNL_ARG_DIFF_DST, ACT));
  return cpu_prim_arg(b, DNNL_ARG_DIFF_SRC, ACT);
}

static mxu_status act_build(mxu_op *op, const mxu_activation_desc *d) {
  dnnl_dims_t dims = {d->rows, d->cols};
  dnnl_memory_desc_t md;
  MXU_TRY(cpu_md(&md, 2, dims, dnnl_nc, ACT));
  act_desc fwd;
  MXU_TRY(forward_desc(d, &md, &fwd));
  cpu_prim *f = &op->prim[ACT_FWD];
  MXU_TRY(cpu_prim_create(f, &fwd, dnnl_alg_kind_undef, NULL, ACT, "forward"));
  MXU_TRY(cpu_prim_arg(f, DNNL_ARG_SRC, ACT));
  MXU_TRY(cpu_prim_arg(f, DNNL_ARG_DST, ACT));
  if (mxu_activation_rowwise(d->activation) || d->activation == MXU_RELU)
    return MXU_OK;
  return backward_create(op, d, &md);
}

mxu_status cpu_activation_create(const mxu_activation_desc *desc,
                                 mxu_op **out) {
  if (desc->activation < MXU_LINEAR || desc->activation > MXU_LAST_ACTIVATION ||
      !isfinite(desc->alpha))
    return mxu_fail(MXU_ERR_ARG, "onednn: %s: unknown activation %d", ACT,
                    (int)desc->activation);
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, ACT));
  op->activation = desc->activation;
  op->count = desc->rows * desc->cols;
  int primitive = mxu_activation_rowwise(desc->activation) ||
                  alg_of(desc->activation, 0).alg != dnnl_alg_kind_undef;
  return cpu_op_finish(op, primitive ? act_build(op, desc) : MXU_OK, out);
}

/* ---- what oneDNN 2.6 lacks ---------------------------------------------
 * selu, softsign, the two hard_sigmoids and Keras 3's newer ones (and
 * softplus and mish, to the last bit of small values), forward and
 * backward from x, over blocks as relu's backward. The derivatives take
 * TensorFlow's side at their corners (see cpu_ref's elementwise.c). */

/* log(1 + e^x) without overflow, and to full precision where it is tiny. */
static inline float softplus(float x) {
  return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

#define SELU_ALPHA 1.67326324f
#define SELU_SCALE 1.05070098f

/* Keras 3's: each a branch of its where()s, or a clip. */
static void keras3_forward_span(mxu_activation a, int64_t begin, int64_t end,
                                const float *restrict x, float *restrict y) {
  switch (a) {
  case MXU_HARD_TANH:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      y[i] = fminf(fmaxf(x[i], -1.0f), 1.0f);
    break;
  case MXU_LOG_SIGMOID:
    for (int64_t i = begin; i < end; i++) y[i] = -softplus(-x[i]);
    break;
  case MXU_TANH_SHRINK:
    for (int64_t i = begin; i < end; i++) y[i] = x[i] - tanhf(x[i]);
    break;
  case MXU_SQUAREPLUS: /* left of 0 as 2 / (s - x): no cancellation */
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i], s = sqrtf(v * v + 4.0f);
      y[i] = v >= 0.0f ? 0.5f * (v + s) : 2.0f / (s - v);
    }
    break;
  case MXU_SPARSE_PLUS:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i], q = 0.25f * (v + 1.0f) * (v + 1.0f);
      y[i] = v <= -1.0f ? 0.0f : v < 1.0f ? q : v;
    }
    break;
  case MXU_SPARSE_SIGMOID:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i];
      y[i] = v <= -1.0f ? 0.0f : v >= 1.0f ? 1.0f : 0.5f * (v + 1.0f);
    }
    break;
  case MXU_SOFT_SHRINK:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i];
      y[i] = v > 0.5f ? v - 0.5f : v < -0.5f ? v + 0.5f : 0.0f;
    }
    break;
  default: /* MXU_HARD_SHRINK */
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      y[i] = fabsf(x[i]) > 0.5f ? x[i] : 0.0f;
  }
}

static void keras3_backward_span(mxu_activation a, int64_t begin, int64_t end,
                                 const float *x, const float *dy, float *dx) {
  switch (a) {
  case MXU_HARD_TANH:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      dx[i] = x[i] >= -1.0f && x[i] <= 1.0f ? dy[i] : 0.0f;
    break;
  case MXU_LOG_SIGMOID: /* sigmoid(-x) */
    for (int64_t i = begin; i < end; i++) dx[i] = dy[i] / (1.0f + expf(x[i]));
    break;
  case MXU_TANH_SHRINK:
    for (int64_t i = begin; i < end; i++) {
      float t = tanhf(x[i]);
      dx[i] = dy[i] * t * t;
    }
    break;
  case MXU_SQUAREPLUS: /* (1 + x / s) / 2, left of 0 as 2 / (s (s - x)) */
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i], s = sqrtf(v * v + 4.0f);
      dx[i] =
          dy[i] * (v >= 0.0f ? 0.5f * (1.0f + v / s) : 2.0f / (s * (s - v)));
    }
    break;
  case MXU_SPARSE_PLUS:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float v = x[i];
      dx[i] = v <= -1.0f ? 0.0f : v < 1.0f ? dy[i] * 0.5f * (v + 1.0f) : dy[i];
    }
    break;
  case MXU_SPARSE_SIGMOID:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      dx[i] = x[i] > -1.0f && x[i] < 1.0f ? 0.5f * dy[i] : 0.0f;
    break;
  default: /* MXU_SOFT_SHRINK, MXU_HARD_SHRINK */
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      dx[i] = fabsf(x[i]) > 0.5f ? dy[i] : 0.0f;
  }
}

static void own_forward_span(mxu_activation a, int64_t begin, int64_t end,
                             const float *restrict x, float *restrict y) {
  switch (a) {
  case MXU_SELU:
    for (int64_t i = begin; i < end; i++)
      y[i] = SELU_SCALE * (x[i] > 0.0f ? x[i] : SELU_ALPHA * expm1f(x[i]));
    break;
  case MXU_SOFTSIGN:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) y[i] = x[i] / (1.0f + fabsf(x[i]));
    break;
  case MXU_HARD_SIGMOID:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      y[i] = fminf(fmaxf(x[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
    break;
  case MXU_SOFTPLUS:
    for (int64_t i = begin; i < end; i++) y[i] = softplus(x[i]);
    break;
  case MXU_MISH:
    for (int64_t i = begin; i < end; i++) y[i] = x[i] * tanhf(softplus(x[i]));
    break;
  default: keras3_forward_span(a, begin, end, x, y); break;
  case MXU_HARD_SIGMOID_TF2:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      y[i] = fminf(fmaxf(0.2f * x[i] + 0.5f, 0.0f), 1.0f);
  }
}

/* dx may be dy: each dy is read before the same dx is written. */
static void own_backward_span(mxu_activation a, int64_t begin, int64_t end,
                              const float *x, const float *dy, float *dx) {
  switch (a) {
  case MXU_SELU:
    for (int64_t i = begin; i < end; i++)
      dx[i] =
          dy[i] * SELU_SCALE * (x[i] > 0.0f ? 1.0f : SELU_ALPHA * expf(x[i]));
    break;
  case MXU_SOFTSIGN:
#pragma omp simd
    for (int64_t i = begin; i < end; i++) {
      float d = 1.0f + fabsf(x[i]);
      dx[i] = dy[i] / (d * d);
    }
    break;
  case MXU_HARD_SIGMOID:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      dx[i] = x[i] > -3.0f && x[i] < 3.0f ? dy[i] / 6.0f : 0.0f;
    break;
  case MXU_SOFTPLUS: /* sigmoid(x) */
    for (int64_t i = begin; i < end; i++) dx[i] = dy[i] / (1.0f + expf(-x[i]));
    break;
  case MXU_MISH:
    for (int64_t i = begin; i < end; i++) {
      float t = tanhf(softplus(x[i]));
      dx[i] = dy[i] * (t + x[i] * (1.0f - t * t) / (1.0f + expf(-x[i])));
    }
    break;
  default: keras3_backward_span(a, begin, end, x, dy, dx); break;
  case MXU_HARD_SIGMOID_TF2:
#pragma omp simd
    for (int64_t i = begin; i < end; i++)
      dx[i] = x[i] >= -2.5f && x[i] <= 2.5f ? 0.2f * dy[i] : 0.0f;
  }
}

/* out = f(in) or f'(x) * dy over the op's values, in blocks. */
static void own_run(const mxu_op *op, const float *x, const float *dy,
                    float *out) {
  int64_t count = op->count, blocks = (count + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t b = 0; b < blocks; b++) {
    int64_t end = (b + 1) * BLOCK < count ? (b + 1) * BLOCK : count;
    if (dy)
      own_backward_span(op->activation, b * BLOCK, end, x, dy, out);
    else
      own_forward_span(op->activation, b * BLOCK, end, x, out);
  }
}

/* ---- softmax ----------------------------------------------------------- */

/* Shifted by the row maximum so exp cannot overflow; summed in double as
 * cpu_ref does. */
static void softmax_row(int cols, const float *restrict x, float *restrict y) {
  float max = x[0];
  for (int j = 1; j < cols; j++) max = x[j] > max ? x[j] : max;
  double sum = 0.0;
  for (int j = 0; j < cols; j++) {
    y[j] = expf(x[j] - max);
    sum += y[j];
  }
  float inv = (float)(1.0 / sum);
  for (int j = 0; j < cols; j++) y[j] *= inv;
}

/* y * (dy - sum(dy * y)); the sum is taken before any dx is written
 * because dx may be dy. */
static void softmax_row_backward(int cols, const float *y, const float *dy,
                                 float *dx) {
  double dot = 0.0;
  for (int j = 0; j < cols; j++) dot += (double)dy[j] * y[j];
  for (int j = 0; j < cols; j++) dx[j] = y[j] * (dy[j] - (float)dot);
}

/* x - max - log(sum(e^(x - max))), summed in double as cpu_ref does. */
static void log_softmax_row(int cols, const float *restrict x,
                            float *restrict y) {
  float max = x[0];
  for (int j = 1; j < cols; j++) max = x[j] > max ? x[j] : max;
  double sum = 0.0;
  for (int j = 0; j < cols; j++) sum += expf(x[j] - max);
  float shift = max + (float)log(sum);
  for (int j = 0; j < cols; j++) y[j] = x[j] - shift;
}

/* dy - e^y * sum(dy), the sum taken first as for softmax. */
static void log_softmax_row_backward(int cols, const float *y, const float *dy,
                                     float *dx) {
  double sum = 0.0;
  for (int j = 0; j < cols; j++) sum += dy[j];
  for (int j = 0; j < cols; j++) dx[j] = dy[j] - expf(y[j]) * (float)sum;
}

/* The row length, from the softmax primitive's [rows, cols] descriptor. */
static int cols_of(const mxu_op *op) {
  return (int)dnnl_primitive_desc_query_md(op->prim[ACT_FWD].pd,
                                           dnnl_query_src_md, 0)
      ->dims[1];
}

static void rowwise_forward(const mxu_op *op, const float *x, float *y) {
  void (*row)(int, const float *restrict, float *restrict) =
      op->activation == MXU_LOG_SOFTMAX ? log_softmax_row : softmax_row;
  int cols = cols_of(op);
  int64_t rows = op->count / cols, per = BLOCK / cols + 1;
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(rows / per))
  for (int64_t r = 0; r < rows; r++) row(cols, x + r * cols, y + r * cols);
}

static void rowwise_backward(const mxu_op *op, const float *y, const float *dy,
                             float *dx) {
  void (*row)(int, const float *, const float *, float *) =
      op->activation == MXU_LOG_SOFTMAX ? log_softmax_row_backward
                                        : softmax_row_backward;
  int cols = cols_of(op);
  int64_t rows = op->count / cols, per = BLOCK / cols + 1;
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(rows / per))
  for (int64_t r = 0; r < rows; r++)
    row(cols, y + r * cols, dy + r * cols, dx + r * cols);
}

/* ---- relu's backward --------------------------------------------------- */

static int streams(int64_t count, const float *dy, const float *dx) {
  return dx != dy && cpu_streams(dx, (size_t)count * sizeof *dx);
}

/* dx = y > 0 ? dy : 0 over [begin, end). dx may be dy (same index read
 * before written), so no restrict on them. */
static void relu_span(int64_t begin, int64_t end, const float *y,
                      const float *dy, float *dx, int streaming) {
#if defined(__AVX512F__)
  if (streaming) {
    int64_t whole = begin + (end - begin) / 16 * 16;
    for (int64_t i = begin; i < whole; i += 16) {
      __mmask16 on = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i),
                                        _mm512_setzero_ps(), _CMP_GT_OQ);
      _mm512_stream_ps(dx + i, _mm512_maskz_loadu_ps(on, dy + i));
    }
    begin = whole;
  }
#else
  (void)streaming;
#endif
#pragma omp simd
  for (int64_t i = begin; i < end; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static void relu_backward(int64_t count, const float *y, const float *dy,
                          float *dx) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
  int streaming = streams(count, dy, dx);
#pragma omp parallel num_threads(cpu_threads_for(blocks))
  {
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < blocks; b++) {
      int64_t end = (b + 1) * BLOCK < count ? (b + 1) * BLOCK : count;
      relu_span(b * BLOCK, end, y, dy, dx, streaming);
    }
    if (streaming) cpu_stream_fence();
  }
}

/* ---- the table's entries ------------------------------------------------ */

/* Over blocks of BLOCK on every thread: the residual blocks' Adds are 8 MB
 * a tensor in ResNet-20's first stage. */
void cpu_add(int64_t count, const float *a, const float *b, int relu,
             float *y) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
  float floor = relu ? 0.0f : -INFINITY; /* never below -inf: not even NaN */
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t end = (blk + 1) * BLOCK < count ? (blk + 1) * BLOCK : count;
#pragma omp simd
    for (int64_t i = blk * BLOCK; i < end; i++) {
      float v = a[i] + b[i];
      y[i] = v < floor ? 0.0f : v;
    }
  }
}

/* Values of add_bf16's operands converted at a time. */
#define CHUNK 256

/* n values of v from at as float32: v itself, or (bf) converted into to. */
static const float *chunk_of(const void *v, int bf, int64_t at, int n,
                             float *to) {
  if (!bf) return (const float *)v + at;
  const uint16_t *h = (const uint16_t *)v + at;
#pragma omp simd
  for (int i = 0; i < n; i++) to[i] = cpu_bf16_float(h[i]);
  return to;
}

/* a + b (relu'd above floor) or a * b, with bf16 operands: a chunk at a
 * time, in float32 between. */
static void combine_bf16(int64_t count, const void *a, const void *b,
                         unsigned bf16, int multiply, float floor, void *y) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t end = (blk + 1) * BLOCK < count ? (blk + 1) * BLOCK : count;
    float ta[CHUNK], tb[CHUNK], ty[CHUNK];
    for (int64_t at = blk * BLOCK; at < end; at += CHUNK) {
      int n = end - at < CHUNK ? (int)(end - at) : CHUNK;
      const float *restrict pa = chunk_of(a, bf16 & 1, at, n, ta);
      const float *restrict pb = chunk_of(b, bf16 & 2, at, n, tb);
      float *restrict py = bf16 & 4 ? ty : (float *)y + at;
      if (multiply) {
#pragma omp simd
        for (int i = 0; i < n; i++) py[i] = pa[i] * pb[i];
      } else {
#pragma omp simd
        for (int i = 0; i < n; i++) {
          float v = pa[i] + pb[i];
          py[i] = v < floor ? 0.0f : v;
        }
      }
      if (bf16 & 4) cpu_bf16_row((uint16_t *)y + at, ty, n);
    }
  }
}

void cpu_add_bf16(int64_t count, const void *a, const void *b, unsigned bf16,
                  int relu, void *y) {
  combine_bf16(count, a, b, bf16, 0, relu ? 0.0f : -INFINITY, y);
}

void cpu_multiply_bf16(int64_t count, const void *a, const void *b,
                       unsigned bf16, void *y) {
  combine_bf16(count, a, b, bf16, 1, 0.0f, y);
}

void cpu_add_backward_bf16(int64_t count, const void *y, const void *dy,
                           unsigned bf16, int relu, void *dx) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t end = (blk + 1) * BLOCK < count ? (blk + 1) * BLOCK : count;
    float ty[CHUNK], tg[CHUNK], tx[CHUNK];
    for (int64_t at = blk * BLOCK; at < end; at += CHUNK) {
      int n = end - at < CHUNK ? (int)(end - at) : CHUNK;
      const float *restrict py = relu ? chunk_of(y, bf16 & 1, at, n, ty) : NULL;
      const float *pg = chunk_of(dy, bf16 & 2, at, n, tg);
      float *px = bf16 & 4 ? tx : (float *)dx + at; /* may be pg */
      if (relu) {
#pragma omp simd
        for (int i = 0; i < n; i++) px[i] = py[i] > 0.0f ? pg[i] : 0.0f;
      } else if (px != pg) {
        memmove(px, pg, (size_t)n * sizeof *px);
      }
      if (bf16 & 4) cpu_bf16_row((uint16_t *)dx + at, px, n);
    }
  }
}

/* y = a * b over [begin, end) in spans of 16 through restrict pointers,
 * which gcc -O2 vectorises (an omp simd loop over aliased pointers ran
 * Dropout 1.25x slower); y may be a or b, which restrict forbids for
 * the three-pointer form. */
static inline void mul_span(int n, int64_t at, const float *restrict a,
                            const float *restrict b, float *restrict y) {
  for (int i = 0; i < n; i++) y[at + i] = a[at + i] * b[at + i];
}

static inline void mul_into_span(int n, int64_t at, float *restrict y,
                                 const float *restrict b) {
  for (int i = 0; i < n; i++) y[at + i] *= b[at + i];
}

static void multiply_range(int64_t begin, int64_t end, const float *a,
                           const float *b, float *y) {
  int64_t at = begin, body = end - (end - begin) % 16;
  if (y != a && y != b)
    for (; at < body; at += 16) mul_span(16, at, a, b, y);
  else if (a != b)
    for (; at < body; at += 16) mul_into_span(16, at, y, y == a ? b : a);
  for (; at < end; at++) y[at] = a[at] * b[at];
}

/* y = a * b: Dropout's masks (in chunks of 1024 floats, where a parallel
 * region would cost more than the work), and a Multiply of two tensors
 * (MobileNetV3's hard swish as tf.keras 2 writes it, 2 MB a tensor at
 * batch 128), over blocks as above on every thread. */
void cpu_multiply(int64_t count, const float *a, const float *b, float *y) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
  if (cpu_threads_for(blocks) == 1) {
    multiply_range(0, count, a, b, y);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t end = (blk + 1) * BLOCK < count ? (blk + 1) * BLOCK : count;
    multiply_range(blk * BLOCK, end, a, b, y);
  }
}

/* y = x * scale + offset, each step rounded (no FMA in this file, as in
 * Keras' Rescaling), over blocks as above. y may be x. */
void cpu_scale_shift(int64_t count, const float *x, float scale, float offset,
                     float *y) {
  int64_t blocks = (count + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(blocks))
  for (int64_t blk = 0; blk < blocks; blk++) {
    int64_t end = (blk + 1) * BLOCK < count ? (blk + 1) * BLOCK : count;
#pragma omp simd
    for (int64_t i = blk * BLOCK; i < end; i++) y[i] = x[i] * scale + offset;
  }
}

/* Per channel over each image's pixels, image by image on every thread;
 * the sums run over the pixels in order whatever the split. One channel
 * (a scale per image: drop-connect) runs along the image instead. */
void cpu_scale_channels(int64_t n, int64_t pixels, int c, const float *x,
                        const float *s, float *y) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(n))
  for (int64_t i = 0; i < n; i++) {
    if (c == 1) {
      const float *restrict from = x + i * pixels;
      float *restrict to = y + i * pixels;
      float scale = s[i];
#pragma omp simd
      for (int64_t p = 0; p < pixels; p++) to[p] = from[p] * scale;
      continue;
    }
    const float *restrict scale = s + i * c;
    for (int64_t p = 0; p < pixels; p++) {
      const float *restrict from = x + (i * pixels + p) * c;
      float *restrict to = y + (i * pixels + p) * c;
#pragma omp simd
      for (int k = 0; k < c; k++) to[k] = from[k] * scale[k];
    }
  }
}

void cpu_scale_channels_backward(int64_t n, int64_t pixels, int c,
                                 const float *x, const float *s,
                                 const float *dy, float *dx, float *ds) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(n))
  for (int64_t i = 0; i < n; i++) {
    const float *restrict scale = s + i * c;
    float *restrict sum = ds ? ds + i * c : NULL;
    if (sum) memset(sum, 0, (size_t)c * sizeof *sum);
    for (int64_t p = 0; p < pixels; p++) {
      int64_t at = (i * pixels + p) * c;
      const float *restrict g = dy + at, *restrict xr = x + at;
      if (dx) {
        float *restrict to = dx + at;
#pragma omp simd
        for (int k = 0; k < c; k++) to[k] = g[k] * scale[k];
      }
      if (sum) {
#pragma omp simd
        for (int k = 0; k < c; k++) sum[k] += g[k] * xr[k];
      }
    }
  }
}

/* In pieces of up to BLOCK floats of a row, so that one long row (an
 * Add's gradient) is shared out as well as many short ones (Concatenate's
 * slabs). */
void cpu_copy_rows(int64_t rows, int64_t width, const float *src,
                   int64_t src_stride, float *dst, int64_t dst_stride) {
  int64_t pieces = (width + BLOCK - 1) / BLOCK, blocks = rows * width / BLOCK;
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(blocks + 1))
  for (int64_t p = 0; p < rows * pieces; p++) {
    int64_t r = p / pieces, at = p % pieces * BLOCK;
    int64_t n = width - at < BLOCK ? width - at : BLOCK;
    memcpy(dst + r * dst_stride + at, src + r * src_stride + at,
           (size_t)n * sizeof *dst);
  }
}

void cpu_channel_mean(int64_t n, int64_t pixels, int c, const float *x,
                      float *y) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(n))
  for (int64_t i = 0; i < n; i++) {
    float *restrict sum = y + i * c;
    memset(sum, 0, (size_t)c * sizeof *sum);
    for (int64_t p = 0; p < pixels; p++) {
      const float *restrict row = x + (i * pixels + p) * c;
#pragma omp simd
      for (int k = 0; k < c; k++) sum[k] += row[k];
    }
#pragma omp simd
    for (int k = 0; k < c; k++) sum[k] /= (float)pixels;
  }
}

void cpu_channel_mean_backward(int64_t n, int64_t pixels, int c,
                               const float *dy, float *dx) {
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(n))
  for (int64_t i = 0; i < n; i++) {
    const float *restrict g = dy + i * c;
    for (int64_t p = 0; p < pixels; p++) {
      float *restrict to = dx + (i * pixels + p) * c;
#pragma omp simd
      for (int k = 0; k < c; k++) to[k] = g[k] / (float)pixels;
    }
  }
}

void cpu_activation_forward(mxu_op *op, const float *x, float *y) {
  if (mxu_activation_rowwise(op->activation))
    rowwise_forward(op, x, y);
  else if (op->activation == MXU_LINEAR) {
    if (x != y) memcpy(y, x, (size_t)op->count * sizeof *y);
  } else if (op->prim[ACT_FWD].prim)
    cpu_run(&op->prim[ACT_FWD], (const void *[]){x, y});
  else
    own_run(op, x, NULL, y);
}

/* Elementwise (softmax and log_softmax: row by row), so dx may alias dy: each
 * dy is read before the same dx is written. */
void cpu_activation_backward(mxu_op *op, const float *x, const float *y,
                             const float *dy, float *dx) {
  switch (op->activation) {
  case MXU_RELU: relu_backward(op->count, y, dy, dx); break;
  case MXU_SOFTMAX:
  case MXU_LOG_SOFTMAX: rowwise_backward(op, y, dy, dx); break;
  case MXU_LINEAR:
    if (dx != dy) memcpy(dx, dy, (size_t)op->count * sizeof *dx);
    break;
  default:
    if (!op->prim[ACT_BWD].prim)
      own_run(op, x, dy, dx);
    else
      cpu_run(
          &op->prim[ACT_BWD],
          (const void *[]){alg_of(op->activation, 0).from_y ? y : x, dy, dx});
  }
}
