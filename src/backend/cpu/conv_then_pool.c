/* conv_then_pool.c — a Conv2D on oneDNN (conv.c, with whatever it picks:
 * Winograd, direct, bf16) and the max pooling after it (and relu), fused
 * at the seams: the pooling reads the conv's output in the layout the
 * primitives wrote it, and its backward writes the conv's dy, relu's mask
 * applied, in the layout they read it. For cifar's 32x32x32 conv outputs
 * (16 MB per 128 images) run unfused, Winograd's y went blocked -> NHWC,
 * pooling read it, pooling's backward wrote a 16 MB dx, relu's backward
 * read that and y and wrote dz, and dz went NHWC -> blocked: seven passes
 * over 16 MB where this makes two (the pooling's read, the scatter's
 * write). The conv output never leaves the op: the layer's y is the
 * pooled one, and the workspace holds each maximum's window position (one
 * byte, POOL_RELU_ZERO where relu zeroed it), so backward needs neither x
 * nor y of the pooling. Where the own Winograd runs the conv and the
 * windows are 2x2, it pools its output tiles itself (conv_wino.c), and
 * the conv's output is not even written.
 *
 * Windows must tile the conv output (stride = size, no padding); rows and
 * columns past the last window get zero gradient. Each output depends on
 * its own window only, so any split over threads gives the same bits;
 * ties go to the first maximum in row-major order, as cpu_ref. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"

#include <stdint.h>

#define MAX_WINDOW 255 /* positions, so that one fits the byte */

struct cpu_conv_then_pool {
  int64_t n, h, w, c;   /* the conv's output */
  int64_t out_h, out_w; /* pooled */
  int pool_h, pool_w;
  int relu; /* the conv's own, or one after the pooling */
  /* Where the conv's output lives: the conv op's nChw16c copy, or a
   * buffer of our own in NHWC (after this struct). pixel and block: the
   * distance between neighbouring pixels and 16-channel groups in it. */
  float *conv_y;
  int64_t pixel, block;
  /* A bf16 conv's dy copy (NHWC, as conv_y then is), which the backward
   * fills rounded to bf16 in place of conv_y: the conversion's pass over
   * an f32 dy saved (cifar's 32x32x32: 128 MB a step); NULL elsewhere. */
  uint16_t *dy16;
  /* The conv's dy goes past the cache (cpu_streams): the primitives read
   * it only after all of it is written. cifar at 2,537 / 2,571 / 2,541
   * images/s against 2,451 / 2,513 / 2,465 with plain stores. */
  int stream;
  /* The own Winograd runs the conv: it pools 2x2 windows as it goes. */
  int wino_pools;
  /* Where window position p starts in conv_y, from the window's first
   * pixel: computed once, not per window. */
  int64_t step[MAX_WINDOW];
};

static const char CONV_THEN_POOL[] = "conv_then_pool";

/* Where channel vector cb of pixel (y, x) of image i is, in conv_y. */
static int64_t conv_offset(const struct cpu_conv_then_pool *t, int64_t i,
                           int64_t cb, int64_t y, int64_t x) {
  return i * t->h * t->w * t->c + vec_offset(t->block, cb) +
         (y * t->w + x) * t->pixel;
}

static float *conv_at(const struct cpu_conv_then_pool *t, int64_t i, int64_t cb,
                      int64_t y, int64_t x) {
  return t->conv_y + conv_offset(t, i, cb, y, x);
}

/* ---- forward ------------------------------------------------------------ */

/* Pooled row oy of image i: each window's maximum and, in training, where
 * it was. */
static void pool_row(const struct cpu_conv_then_pool *t, int64_t i, int64_t oy,
                     float *y, uint8_t *ws) {
  int window = t->pool_h * t->pool_w;
  for (int64_t cb = 0; cb < t->c / LANES; cb++)
    for (int64_t ox = 0; ox < t->out_w; ox++) {
      const float *top = conv_at(t, i, cb, oy * t->pool_h, ox * t->pool_w);
      window_max m = window_first(*(const vf *)top);
      for (int p = 1; p < window; p++)
        window_offer(&m, *(const vf *)(top + t->step[p]), p);
      if (t->relu) window_relu(&m);
      int64_t at = ((i * t->out_h + oy) * t->out_w + ox) * t->c + cb * LANES;
      *(vfu *)(y + at) = m.max;
      if (ws) store_bytes(ws + at, m.arg);
    }
}

void cpu_conv_then_pool_forward(mxu_op *op, int training, const float *x,
                                const float *w, const float *b, float *y,
                                void *workspace) {
  const struct cpu_conv_then_pool *t = op->conv_then_pool;
  uint8_t *ws = training ? workspace : NULL;
  /* The conv's output never goes to memory: cifar's forwards of 128
   * images on one thread, 32 -> 32 on 32x32 6.6-6.8 -> 5.6 ms, 64 -> 64
   * on 16x16 unpadded 5.7-6.1 -> 4.7. */
  if (t->wino_pools) {
    cpu_conv_wino_forward_pool(op, x, w, b, t->relu, y, ws);
    return;
  }
  cpu_conv2d_forward(op, x, w, b, t->conv_y);
  int64_t rows = t->n * t->out_h;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(rows))
  for (int64_t r = 0; r < rows; r++)
    pool_row(t, r / t->out_h, r % t->out_h, y, ws);
}

/* ---- backward ----------------------------------------------------------- */

/* The conv's dy at offset `at`: in conv_y, or rounded into dy16. */
static inline void store_dy(const struct cpu_conv_then_pool *t, int64_t at,
                            vf v) {
#ifdef __AVX512BF16__
  if (t->dy16) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh((__m512)v);
    if (t->stream)
      _mm256_stream_si256((__m256i *)(t->dy16 + at), h);
    else
      _mm256_store_si256((__m256i *)(t->dy16 + at), h);
    return;
  }
#endif
  store_vec(t->conv_y + at, v, t->stream);
}

/* One row of the conv's dy in channel block cb, under pooled row oy at
 * window row k: each pooled gradient at its maximum's window position,
 * zero elsewhere and past the last window. */
static void scatter_line(const struct cpu_conv_then_pool *t, int64_t i,
                         int64_t oy, int64_t cb, int k, const float *dy,
                         const uint8_t *ws) {
  int64_t to = conv_offset(t, i, cb, oy * t->pool_h + k, 0);
  vf zero = {0};
  int64_t col = 0;
  if (k < t->pool_h)
    for (int64_t ox = 0; ox < t->out_w; ox++) {
      int64_t at = ((i * t->out_h + oy) * t->out_w + ox) * t->c + cb * LANES;
      vi pos = load_bytes(ws + at);
      vf g = *(const vfu *)(dy + at);
      for (int j = 0; j < t->pool_w; j++, col++)
        store_dy(t, to + col * t->pixel,
                 select_v(pos == k * t->pool_w + j, g, zero));
    }
  for (; col < t->w; col++) store_dy(t, to + col * t->pixel, zero);
}

/* The conv's rows under pooled row oy, and for the last one the rows
 * below every window too. */
static void scatter_row(const struct cpu_conv_then_pool *t, int64_t i,
                        int64_t oy, const float *dy, const uint8_t *ws) {
  int64_t first = oy * t->pool_h;
  int64_t last = oy == t->out_h - 1 ? t->h : first + t->pool_h;
  for (int64_t cb = 0; cb < t->c / LANES; cb++)
    for (int64_t row = first; row < last; row++)
      scatter_line(t, i, oy, cb, (int)(row - first), dy, ws);
}

void cpu_conv_then_pool_backward(mxu_op *op, const float *x, const float *w,
                                 const float *dy, const void *workspace,
                                 float *dw, float *db, float *dx) {
  const struct cpu_conv_then_pool *t = op->conv_then_pool;
  int64_t rows = t->n * t->out_h;
#pragma omp parallel num_threads(cpu_threads_for(rows))
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++)
      scatter_row(t, r / t->out_h, r % t->out_h, dy, workspace);
    /* Streaming stores are weakly ordered: each thread fences its own
     * before the region ends and the primitives read them. */
    if (t->stream) cpu_stream_fence();
  }
  /* dy16 goes where an f32 dy would: the primitives take their copy as
   * it is (weighted.c's input_for). */
  const float *conv_dy = t->dy16 ? (const float *)t->dy16 : t->conv_y;
  cpu_conv2d_backward_weights(op, x, conv_dy, dw, db);
  if (dx) cpu_conv2d_backward_data(op, conv_dy, w, dx);
}

/* ---- create ------------------------------------------------------------- */

/* Max pooling whose windows tile the conv's output, on whole channel
 * vectors, after a linear or relu conv. */
static int fits(const mxu_conv2d_desc *c, const mxu_pool2d_desc *p) {
  return (c->activation == MXU_LINEAR || c->activation == MXU_RELU) &&
         mxu_conv2d_plain(c) && !c->y_native && c->out_c % LANES == 0 &&
         p->is_max && p->stride_h == p->pool_h && p->stride_w == p->pool_w &&
         p->pool_h * p->pool_w <= MAX_WINDOW && p->pad_top == 0 &&
         p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0 &&
         p->c == c->out_c && p->in_h == c->out_h && p->in_w == c->out_w &&
         p->out_h * p->pool_h <= c->out_h && p->out_w * p->pool_w <= c->out_w;
}

/* The record, with a buffer for the conv's output after it where the
 * conv op has no copy of its own to keep it in. */
static mxu_status attach(mxu_op *op, const mxu_conv2d_desc *c,
                         const mxu_pool2d_desc *p, int relu) {
  void *copy;
  int layout = cpu_weighted_dst_layout(op, &copy);
  if (layout < 0)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: the conv's y is in a layout "
                    "it does not read",
                    CONV_THEN_POOL);
  size_t head = (sizeof(struct cpu_conv_then_pool) + 63) / 64 * 64;
  size_t own =
      layout ? 0
             : (size_t)c->n * c->out_h * c->out_w * c->out_c * sizeof(float);
  struct cpu_conv_then_pool *t = mxu_aligned_alloc(head + own);
  if (!t)
    return mxu_fail(MXU_ERR_NOMEM, "%s: no memory for a %zu-byte conv output",
                    CONV_THEN_POOL, own);
  cpu_strides s =
      cpu_layout_strides(layout, (int64_t)c->out_h * c->out_w, c->out_c);
  *t = (struct cpu_conv_then_pool){
      .n = c->n,
      .h = c->out_h,
      .w = c->out_w,
      .c = c->out_c,
      .out_h = p->out_h,
      .out_w = p->out_w,
      .pool_h = p->pool_h,
      .pool_w = p->pool_w,
      .relu = relu || c->activation == MXU_RELU,
      .conv_y = layout ? copy : (float *)((char *)t + head),
#ifdef __AVX512BF16__
      .dy16 = layout ? NULL : cpu_weighted_bf16_dy(op),
#endif
      .pixel = s.pixel,
      .block = s.block,
      .wino_pools =
          op->conv_wino && !op->bf16 && p->pool_h == 2 && p->pool_w == 2,
      .stream = cpu_streams(layout ? copy : (char *)t + head,
                            (size_t)c->n * c->out_h * c->out_w * c->out_c *
                                sizeof(float))};
  for (int k = 0; k < p->pool_h * p->pool_w; k++)
    t->step[k] = (k / p->pool_w * t->w + k % p->pool_w) * t->pixel;
  op->conv_then_pool = t;
  op->workspace_bytes = (size_t)c->n * p->out_h * p->out_w * c->out_c;
  return MXU_OK;
}

mxu_status cpu_conv_then_pool_create(const mxu_conv2d_desc *c,
                                     const mxu_pool2d_desc *p, int relu,
                                     mxu_op **out) {
  if (!fits(c, p))
    return mxu_fail(MXU_ERR_UNSUPPORTED, "%s: not a shape it fuses",
                    CONV_THEN_POOL);
  mxu_op *op;
  /* In mixed_bfloat16 too, the own Winograd where it pools as it goes:
   * its output never written, it outran oneDNN's bf16 conv and this
   * pooling (cifar's 32 -> 32 on 32x32, a replica's step of 128 images:
   * 5.6 + 14.9 ms forward and backward against 8.2 + 14.0). */
  if (c->bf16 && p->pool_h == 2 && p->pool_w == 2) {
    mxu_conv2d_desc f32 = *c;
    f32.bf16 = 0;
    MXU_TRY(cpu_conv2d_create(&f32, &op));
    if (op->conv_wino && !cpu_conv_gemm_passes(op))
      return cpu_op_finish(op, attach(op, &f32, p, relu), out);
    cpu_op_free(op);
  }
  MXU_TRY(cpu_conv2d_create(c, &op));
  return cpu_op_finish(op, attach(op, c, p, relu), out);
}
