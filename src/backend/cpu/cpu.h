/* cpu.h — what the oneDNN backend's files share: the op record (a few
 * primitives built once at create), the global engine and stream, and the
 * helpers that create primitives and run them on caller buffers.
 * Internal to src/backend/cpu. */
#ifndef MXU_BACKEND_CPU_H
#define MXU_BACKEND_CPU_H

#include "backend/backend.h"
#include "core/core.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define CPU_MAX_ARGS 12
#define CPU_MAX_PRIMS 10

/* One primitive with its arguments. Every memory object is created at
 * create time without a buffer (DNNL_MEMORY_NONE); running only points them
 * at the caller's buffers. The scratchpad is ours (user mode), allocated
 * once, so executing never allocates. */
typedef struct cpu_prim {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  void *scratch;
  int first_user; /* 1 when args[0] is the scratchpad */
  int nargs;
  dnnl_exec_arg_t args[CPU_MAX_ARGS];
} cpu_prim;

/* How a conv or dense op brings x and dy into, and y and dx out of, the
 * layout its primitives chose (see weighted.c). */
typedef enum cpu_convert_how {
  CPU_CONVERT_NONE,
  CPU_CONVERT_ONEDNN,
  CPU_CONVERT_OWN
} cpu_convert_how;
typedef struct cpu_convert {
  cpu_convert_how how;
  int64_t n, hw, c; /* CPU_CONVERT_OWN's shape */
} cpu_convert;

struct mxu_op {
  cpu_prim prim[CPU_MAX_PRIMS];
  int has_bias;              /* conv, dense: BIAS arguments exist */
  mxu_activation activation; /* activation ops: LINEAR has no primitive */
  int64_t count;             /* activation ops: values per tensor */
  size_t workspace_bytes;    /* pooling: max pooling's training workspace */
  int x_bf16, y_bf16;        /* batchnorm, conv: x, y in bf16 (backend.h) */
  int dx_bf16, dy_bf16;      /* and their gradients */
  /* conv, dense: the weights (or their gradient) in the layout and data
   * type primitive i chose, when that is not the caller's plain float32;
   * allocated at create. */
  void *blocked[3];
  /* conv and dense: copies of x and dy in the primitives' type and layout
   * (bf16, or Winograd's blocked one) where that is not the caller's,
   * allocated at create, and the caller buffers they (and blocked[0], the
   * forward's weights) were last made from, so the backward passes reuse
   * the forward's conversions; forward clears them (a new step).
   * share_weights: backward data reads the forward's weights layout, so
   * one copy serves both. */
  int bf16, share_weights;
  void *src_copy, *diff_dst_copy;
  size_t src_copy_bytes, diff_dst_copy_bytes;
  cpu_convert convert[4]; /* x in, dy in, y out, dx out */
  const void *src_from, *weights_from, *diff_dst_from;
  struct cpu_conv_pool *conv_pool; /* conv_pool.c's fused op */
  /* conv_then_pool.c's: this conv op with a pooling after it */
  struct cpu_conv_then_pool *conv_then_pool;
  struct cpu_conv_data *conv_data; /* conv_data.c's backward data, or NULL */
  struct cpu_conv_few *conv_few;   /* conv_few.c's forward and weights */
  struct cpu_conv_dw *conv_dw;     /* conv_dw.c's depthwise weights */
  struct cpu_conv_gemm *conv_gemm; /* conv_gemm.c's weights, or NULL */
  struct cpu_conv_wino *conv_wino; /* conv_wino.c's forward and data */
  struct cpu_conv_bf16 *conv_bf16; /* conv_bf16.c's bf16 forward */
  /* and its backward data, as the forward of another conv */
  struct cpu_conv_bf16 *conv_bf16_data;
  /* conv_bf16_grad.c's bf16 weight gradient */
  struct cpu_conv_bf16_grad *conv_bf16_grad;
  /* weighted_blocks.c's: oneDNN's weight gradient over fixed blocks */
  struct cpu_weights_blocks *weights_blocks;
  /* dense.c's float32 Dense of rows x in -> out, whose backward data
   * cpu_sgemm runs (0 rows: a bf16 one) */
  int64_t dense_rows, dense_in, dense_out;
};

/* Turns a oneDNN status into mxu_fail's "onednn: <op>: <call> failed". */
mxu_status cpu_check(dnnl_status_t status, const char *op, const char *call);
#define CPU_TRY(op, fn, ...) MXU_TRY(cpu_check(fn(__VA_ARGS__), op, #fn))

/* The process-wide CPU engine and stream, created once on first use. */
mxu_status cpu_engine(const char *op, dnnl_engine_t *engine);

/* Threads for a kernel's own parallel loop over `units` pieces of work:
 * one inside a parallel region (a replica's or slice's worker) or for a
 * single piece, else the whole team. */
int cpu_threads_for(int64_t units);
/* Threads an op's own loops will run on, fixed at its create (compile
 * creates each op with the count it runs with): one inside a parallel
 * region. Ops keep a buffer per thread. */
int cpu_create_threads(void);

/* Stores past the cache (AVX-512's streaming stores, whole aligned
 * lines) save the read that a store to a line not in cache makes, where
 * a tensor this big would leave the cache before its next reader anyway;
 * below, plain stores keep it there for that reader (vec.h's store_vec
 * makes them; cpu_stream_fence below orders them). */
#define CPU_STREAM_MIN_BYTES ((size_t)8 << 20)

/* Whether `bytes` written from `to` go past the cache. */
static inline int cpu_streams(const void *to, size_t bytes) {
#ifdef __AVX512F__
  return (uintptr_t)to % 64 == 0 && bytes >= CPU_STREAM_MIN_BYTES;
#else
  (void)to;
  (void)bytes;
  return 0;
#endif
}

/* Streamed stores are weakly ordered: the thread that made them fences
 * them before another reads what they wrote. */
static inline void cpu_stream_fence(void) {
#ifdef __AVX512F__
  _mm_sfence();
#endif
}

/* Bytes a value of a tensor held in bf16 (x_bf16, ...) or float32. */
static inline int64_t cpu_value_bytes(int bf16) { return bf16 ? 2 : 4; }

/* A bf16 tensor's values (x_bf16, y_bf16) as float32, and float32 to
 * bf16 as vcvtneps2bf16 and oneDNN's conversions round: to nearest, ties
 * to even, subnormal inputs as zero, NaN kept quiet. Plain C, so that the
 * loops around them vectorise on any x86-64 build. */
static inline float cpu_bf16_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t cpu_bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(u >> 16 | 0x40);
  if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
  return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1)) >> 16);
}

/* n values rounded to bf16 as cpu_bf16_of does, by vcvtneps2bf16 where
 * the build has it (the plain C's tests vectorise, but ran a batch
 * normalisation's pass 1.5x slower than its float32 stores). */
static inline void cpu_bf16_row(uint16_t *to, const float *from, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512BF16__
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(to + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(from + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(
        to + i, m,
        (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, from + i)));
  }
#endif
  for (; i < n; i++) to[i] = cpu_bf16_of(from[i]);
}

/* The own kernels' weight gradients are summed over fixed blocks of
 * images (partial: blocks x (taps + 1) x c, each block's dw then db),
 * then the blocks in order into dw and db (when not NULL), so their bits
 * do not depend on the thread count. */
void cpu_sum_blocks(const float *partial, int64_t blocks, int64_t taps,
                    int64_t c, float *dw, float *db);

/* dnnl_sgemm's row-major C = alpha op(A) op(B) + beta C, with the same
 * bits on any thread count (see common.c). */
void cpu_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b,
               int64_t ldb, float beta, float *c, int64_t ldc);

mxu_status cpu_op_alloc(mxu_op **out, const char *op);
void cpu_op_free(mxu_op *op);
/* Hands op out when its build succeeded, else frees it: the tail of every
 * *_create. */
mxu_status cpu_op_finish(mxu_op *op, mxu_status status, mxu_op **out);

/* A plain memory descriptor (f32). */
mxu_status cpu_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                  dnnl_format_tag_t tag, const char *op);
/* The same of another data type (bf16 for mixed precision). */
mxu_status cpu_md_typed(dnnl_memory_desc_t *md, int ndims,
                        const dnnl_dims_t dims, dnnl_data_type_t type,
                        dnnl_format_tag_t tag, const char *op);

/* Creates the primitive descriptor and primitive for desc, with an
 * optional fused eltwise post-op (dnnl_alg_kind_undef for none) and the
 * forward primitive as hint for backward ones. */
mxu_status cpu_prim_create(cpu_prim *p, const_dnnl_op_desc_t desc,
                           dnnl_alg_kind_t post_eltwise, const cpu_prim *hint,
                           const char *op, const char *what);
/* Points the scratchpads of prims[0..count) that have one at the largest
 * of them and frees the rest: for primitives that never run at once. */
mxu_status cpu_prims_share_scratch(cpu_prim *prims, int count, const char *op);
/* Destroys what cpu_prim_create or cpu_reorder_create made. */
void cpu_prim_release(cpu_prim *p);
/* A reorder between two layouts of one tensor; cpu_run takes {from, to}. */
mxu_status cpu_reorder_create(cpu_prim *p, const dnnl_memory_desc_t *from,
                              const dnnl_memory_desc_t *to, const char *op,
                              const char *what);
/* Adds an execute argument; cpu_run takes the buffers in the same order. */
mxu_status cpu_prim_arg(cpu_prim *p, int arg, const char *op);
/* Points the arguments at buffers and executes (buffers[i] for the i-th
 * argument added). A failure can only be recorded for mxu_errmsg(). */
void cpu_run(cpu_prim *p, const void *const *buffers);

/* The three passes of a conv or dense op, its primitives 0..2. */
typedef enum cpu_pass {
  CPU_PASS_FORWARD,
  CPU_PASS_BACKWARD_DATA,
  CPU_PASS_BACKWARD_WEIGHTS
} cpu_pass;

/* Conv and dense are the same three primitives (forward with fused bias
 * and activation, backward data, backward weights + bias) over different
 * op descs; weighted.c builds and runs them for both. */
typedef struct cpu_weighted_descs {
  const_dnnl_op_desc_t forward, backward_data, backward_weights;
  /* The caller's weights layout. When the descs leave the weights to
   * oneDNN (format_tag any) and it picks another, the op reorders. */
  const dnnl_memory_desc_t *plain_weights;
  mxu_activation activation;
  int has_bias;
  /* bf16: the descs read src, weights and diff_dst in bf16 (dst,
   * diff_src, diff_weights and the bias stay f32). plain_src and plain_dst
   * are the caller's f32 layouts of dx and dy, and of x and y too unless
   * plain_x and plain_y (non-NULL: a bf16 x or y, x_bf16) say otherwise;
   * where the primitives chose another for x, y, dx or dy, the op
   * converts. */
  int bf16;
  const dnnl_memory_desc_t *plain_src, *plain_dst, *plain_x, *plain_y;
} cpu_weighted_descs;

mxu_status cpu_weighted_create(const cpu_weighted_descs *descs, const char *op,
                               mxu_op **out);
void cpu_weighted_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y);
void cpu_weighted_backward_data(mxu_op *op, const float *dy, const float *w,
                                float *dx);
void cpu_weighted_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db);

/* weighted_blocks.c: oneDNN's weight gradient of a conv or dense op of
 * n images of `pixels` output pixels over blocks of them fixed by the
 * shape (attach after the op's primitives), which
 * cpu_weighted_backward_weights then runs. */
mxu_status cpu_weighted_blocks_attach(mxu_op *op, int64_t n, int64_t pixels,
                                      const char *name);
void cpu_weighted_blocks_run(mxu_op *op, const void *x, const void *dy,
                             float *dw, float *db);
void cpu_weighted_blocks_free(mxu_op *op);

/* For an op that consumes y itself (a fused pooling): the layout the
 * primitives write y and read dy in. 0: the caller's NHWC. 1: nChw16c,
 * through the op's dy copy (*copy), which the forward then takes as y and
 * the backward as dy, unconverted. -1: another (the caller must not keep
 * y in it). */
int cpu_weighted_dst_layout(mxu_op *op, void **copy);
/* For an op whose caller makes dy itself (a fused pooling): where the
 * primitives read dy as NHWC bfloat16 (a bf16 conv), the op's copy of it,
 * which the caller may fill (rounded to nearest even, as the conversion
 * would) and pass as dy; else NULL. */
uint16_t *cpu_weighted_bf16_dy(const mxu_op *op);
/* For an op whose caller runs the forward itself (conv_bf16.c): where
 * backward weights reads x as NHWC bfloat16, the op's copy of it, which
 * the caller may fill (rounded as the conversion would) and then mark as
 * made from x; else NULL. */
uint16_t *cpu_weighted_bf16_x(const mxu_op *op);
void cpu_weighted_made_x(mxu_op *op, const float *x);
/* Whether oneDNN runs a pass on a generic kernel (its GEMM or reference
 * one) rather than one of its own for the shape. */
int cpu_weighted_generic(const mxu_op *op, cpu_pass pass);

/* The post-op for a fused activation, or dnnl_alg_kind_undef for LINEAR;
 * fails for SOFTMAX, which is never fused. */
mxu_status cpu_fused_alg(mxu_activation activation, const char *op,
                         dnnl_alg_kind_t *alg);

/* layout.c: NHWC <-> nChw16c (to16: which way) of n images of hw pixels
 * and c channels, c a multiple of 16. */
void cpu_layout_convert(const float *from, float *to, int64_t n, int64_t hw,
                        int64_t c, int to16);
/* Floats between neighbouring pixels, and between neighbouring blocks of
 * 16 channels, of an image of hw pixels and c channels (c a multiple of
 * 16) in nChw16c (blocked) or NHWC: the own kernels' one addressing for
 * both. */
typedef struct cpu_strides {
  int64_t pixel, block;
} cpu_strides;
cpu_strides cpu_layout_strides(int blocked, int64_t hw, int64_t c);

/* ---- the table's entries, by family file ------------------------------ */

mxu_status cpu_conv2d_create(const mxu_conv2d_desc *desc, mxu_op **out);
int cpu_conv2d_native(const mxu_conv2d_desc *desc);
int cpu_conv2d_bf16_tensors(const mxu_conv2d_desc *desc);
void cpu_conv2d_backward_data(mxu_op *op, const float *dy, const float *w,
                              float *dx);
/* conv_data.c: backward data for few input channels, stride 1, float32,
 * attached to a oneDNN conv op (which keeps forward and weights). */
int cpu_conv_data_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_data_attach(mxu_op *op, const mxu_conv2d_desc *desc);
void cpu_conv_data_backward(mxu_op *op, const float *dy, const float *w,
                            float *dx);
/* The same for one image's dy and dx. */
void cpu_conv_data_image(const mxu_op *op, const float *dy, const float *w,
                         float *dx);
/* conv_dw.c: a depthwise conv's backward weights, float32 NHWC, attached
 * to the conv op as conv_data.c's, and its forward where oneDNN's is
 * generic (own_forward). */
int cpu_conv_dw_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_dw_attach(mxu_op *op, const mxu_conv2d_desc *desc);
int cpu_conv_dw_own_forward(const mxu_op *op);
int cpu_conv_dw_own_data(const mxu_op *op);
void cpu_conv_dw_forward(mxu_op *op, const float *x, const float *w,
                         const float *b, float *y);
void cpu_conv_dw_backward_data(mxu_op *op, const float *dy, const float *w,
                               float *dx);
void cpu_conv_dw_backward_weights(mxu_op *op, const float *x, const float *dy,
                                  float *dw, float *db);

/* conv_gemm.c: a conv's backward weights as one GEMM over the batch,
 * where oneDNN's is generic (small images; fits reads the op's) or the
 * conv pointwise on images up to 8x8, and its forward and backward data
 * where most taps see only padding, each image has one output pixel or
 * its outputs are 2x2 or fewer (passes). */
/* Plain float32 NHWC, columns of a sane size: it could. */
int cpu_conv_gemm_can(const mxu_conv2d_desc *desc);
int cpu_conv_gemm_fits(const mxu_op *op, const mxu_conv2d_desc *desc);
mxu_status cpu_conv_gemm_attach(mxu_op *op, const mxu_conv2d_desc *desc);
int cpu_conv_gemm_passes(const mxu_op *op);
/* Whether those run as a GEMM per output pixel and kernel row (tiny
 * images: no padding multiplied). */
int cpu_conv_gemm_windows(const mxu_op *op);
void cpu_conv_gemm_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y);
void cpu_conv_gemm_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx);
void cpu_conv_gemm_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db);

/* conv_wino.c: a 3x3 stride-1 conv's forward and backward data by
 * Winograd's F(4x4, 3x3), where oneDNN has no Winograd kernel. */
int cpu_conv_wino_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_wino_attach(mxu_op *op, const mxu_conv2d_desc *desc);
void cpu_conv_wino_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y);
void cpu_conv_wino_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx);
/* The forward and the 2x2 max pooling after it (stride 2), relu after
 * when pool_relu: conv_then_pool.c's, in one pass. */
void cpu_conv_wino_forward_pool(mxu_op *op, const float *x, const float *w,
                                const float *b, int pool_relu, float *y,
                                uint8_t *ws);
void cpu_conv_wino_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db);

/* conv_bf16.c: a bf16 conv's forward where it has 16 input channels,
 * attached to the bf16 oneDNN op that runs its backward passes. */
int cpu_conv_bf16_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_bf16_attach(mxu_op *op, const mxu_conv2d_desc *desc);
void cpu_conv_bf16_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y);
/* and its backward data where the conv is 3x3 with 16 outputs at stride
 * 1; 0 where dy is in a layout of the primitives' (the caller runs
 * theirs) */
int cpu_conv_bf16_data_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_bf16_data_attach(mxu_op *op, const mxu_conv2d_desc *desc);
int cpu_conv_bf16_data(mxu_op *op, const float *dy, const float *w, float *dx);

/* conv_bf16_grad.c: a bf16 3x3 conv's weight gradient where it has 16-64
 * input channels, attached the same way; 0 where dy is in a layout of the
 * primitives' it does not read (the caller runs theirs). */
int cpu_conv_bf16_grad_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_bf16_grad_attach(mxu_op *op, const mxu_conv2d_desc *desc);
int cpu_conv_bf16_grad_weights(mxu_op *op, const float *x, const float *dy,
                               float *dw, float *db);

/* conv_few.c: forward and backward weights for few input channels,
 * stride 1, float32, attached the same way; with conv_data.c, they read
 * and write y and dy in nChw16c too (y_native). */
int cpu_conv_few_fits(const mxu_conv2d_desc *desc);
mxu_status cpu_conv_few_attach(mxu_op *op, const mxu_conv2d_desc *desc);
void cpu_conv_few_forward(mxu_op *op, const float *x, const float *w,
                          const float *b, float *y);
void cpu_conv_few_backward_weights(mxu_op *op, const float *x, const float *dy,
                                   float *dw, float *db);
/* Backward weights and (with conv_data.c, dx not NULL) data from dy of the
 * fused relu's output: each block of images' dz made from dy and y in a
 * buffer that stays in cache for both. */
void cpu_conv_few_backward_relu(mxu_op *op, const float *x, const float *w,
                                const float *y, const float *dy, float *dw,
                                float *db, float *dx);
/* The table's conv entries: the own kernels where attached, else oneDNN. */
void cpu_conv2d_forward(mxu_op *op, const float *x, const float *w,
                        const float *b, float *y);
void cpu_weighted_new_inputs(mxu_op *op);
void cpu_conv2d_backward_weights(mxu_op *op, const float *x, const float *dy,
                                 float *dw, float *db);
int cpu_conv2d_backward_relu(mxu_op *op, const float *x, const float *w,
                             const float *y, const float *dy, float *dw,
                             float *db, float *dx);
mxu_status cpu_dense_create(const mxu_dense_desc *desc, mxu_op **out);
void cpu_dense_backward_data(mxu_op *op, const float *dy, const float *w,
                             float *dx);

mxu_status cpu_pool2d_create(const mxu_pool2d_desc *desc, mxu_op **out);
size_t cpu_pool2d_workspace_bytes(mxu_op *op);
void cpu_pool2d_forward(mxu_op *op, int training, const float *x, float *y,
                        void *workspace);
void cpu_pool2d_backward(mxu_op *op, const float *x, const float *y,
                         const float *dy, const void *workspace, float *dx);

mxu_status cpu_conv_pool_create(const mxu_conv2d_desc *conv,
                                const mxu_pool2d_desc *pool, int relu,
                                mxu_op **out);
size_t cpu_conv_pool_workspace_bytes(mxu_op *op);
void cpu_conv_pool_forward(mxu_op *op, int training, const float *x,
                           const float *w, const float *b, float *y,
                           void *workspace);
void cpu_conv_pool_backward(mxu_op *op, const float *x, const float *w,
                            const float *dy, const void *workspace, float *dw,
                            float *db, float *dx);
mxu_status cpu_conv_pool_dense_create(const mxu_conv2d_desc *conv,
                                      const mxu_pool2d_desc *pool, int relu,
                                      const mxu_dense_desc *dense,
                                      mxu_op **out);
void cpu_conv_pool_dense_forward(mxu_op *op, int training, const float *x,
                                 const float *const w[MXU_CPD_PARAMS],
                                 float *logits, void *workspace);
void cpu_conv_pool_dense_backward(mxu_op *op, const float *x,
                                  const float *const w[MXU_CPD_PARAMS],
                                  const float *dlogits, void *workspace,
                                  float *const dw[MXU_CPD_PARAMS], float *dx);

/* conv_then_pool.c: a conv op (any conv.c builds) with the max pooling
 * after it run on its output's own layout; the same entries as above. */
mxu_status cpu_conv_then_pool_create(const mxu_conv2d_desc *conv,
                                     const mxu_pool2d_desc *pool, int relu,
                                     mxu_op **out);
void cpu_conv_then_pool_forward(mxu_op *op, int training, const float *x,
                                const float *w, const float *b, float *y,
                                void *workspace);
void cpu_conv_then_pool_backward(mxu_op *op, const float *x, const float *w,
                                 const float *dy, const void *workspace,
                                 float *dw, float *db, float *dx);

mxu_status cpu_batchnorm_create(const mxu_batchnorm_desc *desc, mxu_op **out);
void cpu_batchnorm_forward_training(mxu_op *op, const float *x,
                                    const float *gamma, const float *beta,
                                    float *y, float *mean, float *var);
void cpu_batchnorm_forward_inference(mxu_op *op, const float *x,
                                     const float *gamma, const float *beta,
                                     const float *mean, const float *var,
                                     float *y);
void cpu_batchnorm_backward(mxu_op *op, const float *x, const float *y,
                            const float *dy, const float *gamma,
                            const float *beta, const float *mean,
                            const float *var, float *dx, float *dgamma,
                            float *dbeta);

mxu_status cpu_activation_create(const mxu_activation_desc *desc, mxu_op **out);
void cpu_activation_forward(mxu_op *op, const float *x, float *y);
void cpu_activation_backward(mxu_op *op, const float *x, const float *y,
                             const float *dy, float *dx);

void cpu_softmax_cross_entropy(int64_t n, int k, const float *logits,
                               const int32_t *labels, const float *onehot,
                               const float *mask, float scale, float *probs,
                               float *loss, float *dlogits);
void cpu_cross_entropy(int64_t n, int k, const float *probs,
                       const int32_t *labels, const float *onehot,
                       const float *mask, float scale, float *loss,
                       float *dprobs);
void cpu_multiply(int64_t count, const float *a, const float *b, float *y);
void cpu_add(int64_t count, const float *a, const float *b, int relu, float *y);
void cpu_add_bf16(int64_t count, const void *a, const void *b, unsigned bf16,
                  int relu, void *y);
void cpu_multiply_bf16(int64_t count, const void *a, const void *b,
                       unsigned bf16, void *y);
void cpu_add_backward_bf16(int64_t count, const void *y, const void *dy,
                           unsigned bf16, int relu, void *dx);
void cpu_scale_shift(int64_t count, const float *x, float scale, float offset,
                     float *y);
void cpu_scale_channels(int64_t n, int64_t pixels, int c, const float *x,
                        const float *s, float *y);
void cpu_scale_channels_backward(int64_t n, int64_t pixels, int c,
                                 const float *x, const float *s,
                                 const float *dy, float *dx, float *ds);
void cpu_copy_rows(int64_t rows, int64_t width, const float *src,
                   int64_t src_stride, float *dst, int64_t dst_stride);
void cpu_channel_mean(int64_t n, int64_t pixels, int c, const float *x,
                      float *y);
void cpu_channel_mean_backward(int64_t n, int64_t pixels, int c,
                               const float *dy, float *dx);
void cpu_adam_update(int64_t count, float *w, const float *g, float *m,
                     float *v, float lr_t, float beta_1, float beta_2,
                     float epsilon);
void cpu_sgd_update(int64_t count, float *w, const float *g, float *velocity,
                    float lr, float momentum, int nesterov);

#endif
