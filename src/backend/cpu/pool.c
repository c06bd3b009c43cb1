/* pool.c — max and average pooling on oneDNN, NHWC. Max pooling's training
 * forward records the argmax in a caller-owned workspace that its backward
 * reads; inference uses a forward_inference primitive that writes none.
 * Average pooling excludes the padding, as Keras does. Max pooling whose
 * windows tile the input (the usual 2x2, stride 2, valid) runs on our own
 * loops instead, which keep to memory speed (see "tiled max pooling"). */
#include "backend/cpu/cpu.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { POOL_TRAIN, POOL_INFER, POOL_BWD };

static const char POOL[] = "pool2d";

typedef struct pool_mds {
  dnnl_memory_desc_t src, dst;
  dnnl_dims_t strides, kernel, pad_l, pad_r;
  dnnl_alg_kind_t alg;
} pool_mds;

static mxu_status pool_describe(const mxu_pool2d_desc *d, pool_mds *m) {
  dnnl_dims_t src = {d->n, d->c, d->in_h, d->in_w};
  dnnl_dims_t dst = {d->n, d->c, d->out_h, d->out_w};
  MXU_TRY(cpu_md(&m->src, 4, src, dnnl_nhwc, POOL));
  MXU_TRY(cpu_md(&m->dst, 4, dst, dnnl_nhwc, POOL));
  m->strides[0] = d->stride_h;
  m->strides[1] = d->stride_w;
  m->kernel[0] = d->pool_h;
  m->kernel[1] = d->pool_w;
  m->pad_l[0] = d->pad_top;
  m->pad_l[1] = d->pad_left;
  m->pad_r[0] = d->pad_bottom;
  m->pad_r[1] = d->pad_right;
  m->alg = d->is_max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
  return MXU_OK;
}

static size_t workspace_size(const cpu_prim *p) {
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(p->pd, dnnl_query_workspace_md, 0);
  return md ? dnnl_memory_desc_get_size(md) : 0;
}

static mxu_status forward_create(mxu_op *op, const pool_mds *m, int which) {
  int training = which == POOL_TRAIN;
  dnnl_pooling_desc_t pd;
  CPU_TRY(POOL, dnnl_pooling_forward_desc_init, &pd,
          training ? dnnl_forward_training : dnnl_forward_inference, m->alg,
          &m->src, &m->dst, m->strides, m->kernel, m->pad_l, m->pad_r);
  cpu_prim *p = &op->prim[which];
  MXU_TRY(cpu_prim_create(p, &pd, dnnl_alg_kind_undef, NULL, POOL,
                          training ? "forward_training" : "forward_inference"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_SRC, POOL));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DST, POOL));
  if (!training) return MXU_OK;
  op->workspace_bytes = workspace_size(p);
  if (op->workspace_bytes) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WORKSPACE, POOL));
  return MXU_OK;
}

static mxu_status backward_create(mxu_op *op, const pool_mds *m) {
  dnnl_pooling_desc_t pd;
  CPU_TRY(POOL, dnnl_pooling_backward_desc_init, &pd, m->alg, &m->src, &m->dst,
          m->strides, m->kernel, m->pad_l, m->pad_r);
  cpu_prim *p = &op->prim[POOL_BWD];
  MXU_TRY(cpu_prim_create(p, &pd, dnnl_alg_kind_undef, &op->prim[POOL_TRAIN],
                          POOL, "backward"));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_DST, POOL));
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_DIFF_SRC, POOL));
  if (op->workspace_bytes) MXU_TRY(cpu_prim_arg(p, DNNL_ARG_WORKSPACE, POOL));
  return MXU_OK;
}

/* ---- tiled max pooling --------------------------------------------------
 * When the windows tile the input (stride = pool size, no padding), every
 * input pixel belongs to at most one window. oneDNN 2.6's JIT kernel ran
 * such pooling on 26x26x64 at 60-70% of what plain loops reach, and its
 * backward writes dx twice (zeroes, then scatters). Here forward reads x
 * once, keeping the window position of each maximum (one byte) as the
 * workspace, and backward writes every dx value exactly once, with
 * streaming stores when dx is too big for the cache anyway. Each output
 * depends on its own window only, so any split over threads gives the same
 * bits; ties go to the first maximum in row-major order, as cpu_ref. */

/* Shapes of a tiling, read back from the primitive descriptor the op keeps
 * (so struct mxu_op needs no pooling fields). */
typedef struct tiling {
  int64_t n, in_h, in_w, c, out_h, out_w;
  int pool_h, pool_w;
  /* Where position p of a window starts, from the window's first value:
   * computed once a call, not per pixel (divisions cost more than the
   * pixel's own work). */
  int64_t step[256];
} tiling;

/* Whether op's pooling tiles its input; fills t when it does. The window
 * position must fit the workspace's byte. */
static int tiling_of(const mxu_op *op, tiling *t) {
  const dnnl_pooling_desc_t *d = NULL;
  if (dnnl_primitive_desc_query(op->prim[POOL_INFER].pd, dnnl_query_pooling_d,
                                0, &d) != dnnl_success ||
      !d || d->alg_kind != dnnl_pooling_max)
    return 0;
  for (int i = 0; i < 2; i++)
    if (d->strides[i] != d->kernel[i] || d->padding[0][i] != 0 ||
        d->padding[1][i] != 0)
      return 0;
  const dnnl_dim_t *src = d->src_desc.dims, *dst = d->dst_desc.dims;
  *t = (tiling){.n = src[0],
                .in_h = src[2],
                .in_w = src[3],
                .c = src[1],
                .out_h = dst[2],
                .out_w = dst[3],
                .pool_h = (int)d->kernel[0],
                .pool_w = (int)d->kernel[1]};
  if (t->pool_h * t->pool_w > 256 || t->out_h * t->pool_h > t->in_h ||
      t->out_w * t->pool_w > t->in_w)
    return 0;
  for (int i = 0; i < t->pool_h; i++)
    for (int j = 0; j < t->pool_w; j++)
      t->step[i * t->pool_w + j] = (i * t->in_w + j) * t->c;
  return 1;
}

static size_t tiling_workspace_bytes(const tiling *t) {
  return (size_t)(t->n * t->out_h * t->out_w * t->c);
}

/* Where in x (or dx) the first window of row r = n * out_h + oh starts;
 * window ow of the row starts ow * pool_w * c later. */
static int64_t row_at(const tiling *t, int64_t r) {
  int64_t n = r / t->out_h, oh = r % t->out_h;
  return (n * t->in_h + oh * t->pool_h) * t->in_w * t->c;
}

/* One output pixel: the running max over the window starting at x, and
 * where it was. */
static void max_pixel(const tiling *t, const float *x, float *restrict y,
                      uint8_t *restrict at) {
  int64_t c = t->c;
  memcpy(y, x, (size_t)c * sizeof *y);
  if (at) memset(at, 0, (size_t)c);
  for (int p = 1; p < t->pool_h * t->pool_w; p++) {
    const float *restrict v = x + t->step[p];
    if (at) {
#pragma omp simd
      for (int64_t k = 0; k < c; k++) {
        int more = v[k] > y[k];
        y[k] = more ? v[k] : y[k];
        at[k] = more ? (uint8_t)p : at[k];
      }
    } else {
#pragma omp simd
      for (int64_t k = 0; k < c; k++) y[k] = v[k] > y[k] ? v[k] : y[k];
    }
  }
}

/* at is NULL in inference: no workspace to fill. */
static void tiled_forward(const tiling *t, const float *x, float *y,
                          uint8_t *at) {
  int64_t rows = t->n * t->out_h, row = t->out_w * t->c;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++) {
    const float *window = x + row_at(t, r);
    for (int64_t ow = 0; ow < t->out_w; ow++) {
      int64_t o = r * row + ow * t->c;
      max_pixel(t, window + ow * t->pool_w * t->c, y + o, at ? at + o : NULL);
    }
  }
}

static int use_streaming(const tiling *t, const float *dx) {
  return t->c % 16 == 0 &&
         cpu_streams(dx,
                     (size_t)(t->n * t->in_h * t->in_w * t->c) * sizeof *dx);
}

/* dx of one input pixel at window position p: dy where the max was. */
static void route_pixel(int64_t c, int p, const float *restrict g,
                        const uint8_t *restrict at, float *restrict dx,
                        int streaming) {
#if defined(__AVX512F__)
  if (streaming) {
    __m512i position = _mm512_set1_epi32(p);
    for (int64_t k = 0; k < c; k += 16) {
      __m512i was = _mm512_cvtepu8_epi32(
          _mm_loadu_si128((const __m128i *)(const void *)(at + k)));
      __mmask16 hit = _mm512_cmpeq_epi32_mask(was, position);
      _mm512_stream_ps(dx + k, _mm512_maskz_loadu_ps(hit, g + k));
    }
    return;
  }
#else
  (void)streaming;
#endif
#pragma omp simd
  for (int64_t k = 0; k < c; k++) dx[k] = at[k] == p ? g[k] : 0.0f;
}

/* Input rows and columns past the last whole window get no gradient. */
static void zero_uncovered_row(const tiling *t, int64_t r, float *dx) {
  int64_t n = r / t->out_h, oh = r % t->out_h;
  int64_t covered_w = t->out_w * t->pool_w, c = t->c;
  for (int i = 0; i < t->pool_h; i++) {
    float *line = dx + ((n * t->in_h + oh * t->pool_h + i) * t->in_w) * c;
    memset(line + covered_w * c, 0,
           (size_t)((t->in_w - covered_w) * c) * sizeof *dx);
  }
  if (oh != t->out_h - 1) return;
  int64_t covered_h = t->out_h * t->pool_h;
  memset(dx + (n * t->in_h + covered_h) * t->in_w * c, 0,
         (size_t)((t->in_h - covered_h) * t->in_w * c) * sizeof *dx);
}

static void tiled_backward(const tiling *t, const float *dy, const uint8_t *at,
                           float *dx) {
  int64_t rows = t->n * t->out_h, row = t->out_w * t->c;
  int streaming = use_streaming(t, dx);
#pragma omp parallel num_threads(cpu_threads_for(rows))
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
      float *window = dx + row_at(t, r);
      for (int64_t ow = 0; ow < t->out_w; ow++) {
        int64_t o = r * row + ow * t->c;
        for (int p = 0; p < t->pool_h * t->pool_w; p++)
          route_pixel(t->c, p, dy + o, at + o,
                      window + ow * t->pool_w * t->c + t->step[p], streaming);
      }
      zero_uncovered_row(t, r, dx);
    }
    /* Streaming stores are weakly ordered: each thread fences its own
     * before the region ends and anyone reads dx. */
    if (streaming) cpu_stream_fence();
  }
}

/* The oneDNN primitives are built in every case: a tiling reads its shapes
 * from them, and the workspace is then its own. */
static mxu_status pool_build(mxu_op *op, const mxu_pool2d_desc *d) {
  pool_mds m;
  MXU_TRY(pool_describe(d, &m));
  MXU_TRY(forward_create(op, &m, POOL_TRAIN));
  MXU_TRY(forward_create(op, &m, POOL_INFER));
  MXU_TRY(backward_create(op, &m));
  tiling t;
  if (tiling_of(op, &t)) op->workspace_bytes = tiling_workspace_bytes(&t);
  return MXU_OK;
}

mxu_status cpu_pool2d_create(const mxu_pool2d_desc *desc, mxu_op **out) {
  mxu_op *op;
  MXU_TRY(cpu_op_alloc(&op, POOL));
  return cpu_op_finish(op, pool_build(op, desc), out);
}

size_t cpu_pool2d_workspace_bytes(mxu_op *op) { return op->workspace_bytes; }

/* Average pooling has no workspace argument, so workspace is not read. */
void cpu_pool2d_forward(mxu_op *op, int training, const float *x, float *y,
                        void *workspace) {
  tiling t;
  if (tiling_of(op, &t))
    tiled_forward(&t, x, y, training ? workspace : NULL);
  else
    cpu_run(&op->prim[training ? POOL_TRAIN : POOL_INFER],
            (const void *[]){x, y, workspace});
}

/* oneDNN's backward needs neither x nor y: max pooling routes dy through
 * the workspace's argmax, average pooling spreads it evenly. */
void cpu_pool2d_backward(mxu_op *op, const float *x, const float *y,
                         const float *dy, const void *workspace, float *dx) {
  (void)x;
  (void)y;
  tiling t;
  if (tiling_of(op, &t))
    tiled_backward(&t, dy, workspace, dx);
  else
    cpu_run(&op->prim[POOL_BWD], (const void *[]){dy, dx, workspace});
}
