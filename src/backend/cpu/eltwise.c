/* eltwise.c — standalone activations over [rows, cols]: sigmoid and tanh
 * and relu's forward as oneDNN eltwise primitives; relu's backward and
 * softmax (over each row) in plain C; backward from the forward's output
 * y. Linear is a copy and needs no primitive.
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

/* Streaming stores pay off only when dx would leave the cache before the
 * next layer reads it; below this, plain stores keep it there. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)

/* The *_use_dst_for_bwd algorithms compute the derivative from y, which is
 * what the table hands backward; forward uses the same algorithm so the
 * backward's hint matches it. */
static dnnl_alg_kind_t eltwise_alg(mxu_activation activation) {
  switch (activation) {
  case MXU_RELU: return dnnl_eltwise_relu_use_dst_for_bwd;
  case MXU_SIGMOID: return dnnl_eltwise_logistic_use_dst_for_bwd;
  case MXU_TANH: return dnnl_eltwise_tanh_use_dst_for_bwd;
  default: return dnnl_alg_kind_undef;
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
  if (d->activation == MXU_SOFTMAX) {
    CPU_TRY(ACT, dnnl_softmax_forward_desc_init, &fwd->softmax,
            dnnl_forward_training, md, 1);
    return MXU_OK;
  }
  dnnl_alg_kind_t alg = eltwise_alg(d->activation);
  if (alg == dnnl_alg_kind_undef)
    return mxu_fail(MXU_ERR_ARG, "onednn: %s: unknown activation %d", ACT,
                    (int)d->activation);
  CPU_TRY(ACT, dnnl_eltwise_forward_desc_init, &fwd->eltwise,
          dnnl_forward_training, alg, md, 0.0f, 0.0f);
  return MXU_OK;
}

/* Only sigmoid and tanh run oneDNN's backward. */
static mxu_status backward_create(mxu_op *op, const mxu_activation_desc *d,
                                  const dnnl_memory_desc_t *md) {
  dnnl_eltwise_desc_t bwd;
  CPU_TRY(ACT, dnnl_eltwise_backward_desc_init, &bwd,
          eltwise_alg(d->activation), md, md, 0.0f, 0.0f);
  cpu_prim *b = &op->prim[ACT_BWD];
  MXU_TRY(cpu_prim_create(b, &bwd, dnnl_alg_kind_undef, &op->prim[ACT_FWD], ACT,
                          "backward"));
  MXU_TRY(cpu_prim_arg(b, DNNL_ARG_DST, ACT));
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
  if (d->activation == MXU_SOFTMAX || d->activation == MXU_RELU) return MXU_OK;
  return backward_create(op, d, &md);
}

mxu_status cpu_activation_create(const mxu_activation_desc *desc,
                                 mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, ACT));
  op->activation = desc->activation;
  op->count = desc->rows * desc->cols;
  return cpu_op_finish(
      op, desc->activation == MXU_LINEAR ? MXU_OK : act_build(op, desc), out);
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

/* The row length, from the softmax primitive's [rows, cols] descriptor. */
static int cols_of(const mxu_op *op) {
  return (int)dnnl_primitive_desc_query_md(op->prim[ACT_FWD].pd,
                                           dnnl_query_src_md, 0)
      ->dims[1];
}

static void softmax_forward(const mxu_op *op, const float *x, float *y) {
  int cols = cols_of(op);
  int64_t rows = op->count / cols, per = BLOCK / cols + 1;
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(rows / per))
  for (int64_t r = 0; r < rows; r++)
    softmax_row(cols, x + r * cols, y + r * cols);
}

static void softmax_backward(const mxu_op *op, const float *y, const float *dy,
                             float *dx) {
  int cols = cols_of(op);
  int64_t rows = op->count / cols, per = BLOCK / cols + 1;
#pragma omp parallel for schedule(static)                                      \
    num_threads(cpu_threads_for(rows / per))
  for (int64_t r = 0; r < rows; r++)
    softmax_row_backward(cols, y + r * cols, dy + r * cols, dx + r * cols);
}

/* ---- relu's backward --------------------------------------------------- */

static int streams(int64_t count, const float *dy, const float *dx) {
#if defined(__AVX512F__)
  return dx != dy && (uintptr_t)dx % 64 == 0 &&
         (size_t)count * sizeof *dx >= STREAM_MIN_BYTES;
#else
  (void)count;
  (void)dy;
  (void)dx;
  return 0;
#endif
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
#if defined(__AVX512F__)
    /* Streaming stores are weakly ordered: each thread fences its own
     * before the region ends and the next layer reads dx. */
    if (streaming) _mm_sfence();
#endif
  }
}

/* ---- the table's entries ------------------------------------------------ */

void cpu_activation_forward(mxu_op *op, const float *x, float *y) {
  if (op->activation == MXU_SOFTMAX)
    softmax_forward(op, x, y);
  else if (op->activation != MXU_LINEAR)
    cpu_run(&op->prim[ACT_FWD], (const void *[]){x, y});
  else if (x != y)
    memcpy(y, x, (size_t)op->count * sizeof *y);
}

/* Elementwise (softmax: row by row), so dx may alias dy: each dy is read
 * before the same dx is written. */
void cpu_activation_backward(mxu_op *op, const float *y, const float *dy,
                             float *dx) {
  switch (op->activation) {
  case MXU_RELU: relu_backward(op->count, y, dy, dx); break;
  case MXU_SOFTMAX: softmax_backward(op, y, dy, dx); break;
  case MXU_LINEAR:
    if (dx != dy) memcpy(dx, dy, (size_t)op->count * sizeof *dx);
    break;
  default: cpu_run(&op->prim[ACT_BWD], (const void *[]){y, dy, dx});
  }
}
