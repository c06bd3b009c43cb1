/* common.c — the oneDNN backend's shared plumbing: one engine and stream
 * for the process, op records, and creating and running primitives whose
 * memory objects are pointed at caller buffers only when they execute. */
#include "backend/cpu/cpu.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine_cpu;
static dnnl_status_t engine_status;
static const char *engine_call;
/* One stream per thread: replica workers execute primitives at the same
 * time, and a oneDNN stream is not meant to be shared between threads. */
static _Thread_local dnnl_stream_t stream_cpu;

/* Lives for the whole process: primitives of any op may use it, and oneDNN
 * keeps its own thread pool and caches alive anyway. */
static void engine_init(void) {
  engine_call = "dnnl_engine_create";
  engine_status = dnnl_engine_create(&engine_cpu, dnnl_cpu, 0);
}

/* Every thread's stream also lives here, so streams stay reachable for
 * the whole process like the engine (worker threads outlive any model). */
#define MAX_STREAMS 1024
static dnnl_stream_t all_streams[MAX_STREAMS];
static int stream_count;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

/* This thread's stream, created on its first primitive. */
static dnnl_status_t thread_stream(dnnl_stream_t *stream) {
  if (!stream_cpu) {
    pthread_once(&engine_once, engine_init);
    if (engine_status != dnnl_success) return engine_status;
    dnnl_status_t status =
        dnnl_stream_create(&stream_cpu, engine_cpu, dnnl_stream_default_flags);
    if (status != dnnl_success) return status;
    pthread_mutex_lock(&streams_lock);
    if (stream_count < MAX_STREAMS) all_streams[stream_count++] = stream_cpu;
    pthread_mutex_unlock(&streams_lock);
  }
  *stream = stream_cpu;
  return dnnl_success;
}

mxu_status cpu_engine(const char *op, dnnl_engine_t *engine) {
  pthread_once(&engine_once, engine_init);
  MXU_TRY(cpu_check(engine_status, op, engine_call));
  *engine = engine_cpu;
  return MXU_OK;
}

mxu_status cpu_check(dnnl_status_t status, const char *op, const char *call) {
  if (status == dnnl_success) return MXU_OK;
  return mxu_fail(MXU_ERR_BACKEND, "onednn: %s: %s failed: status %d", op, call,
                  (int)status);
}

int cpu_threads_for(int64_t units) {
  return omp_in_parallel() || units < 2 ? 1 : omp_get_max_threads();
}

int cpu_create_threads(void) {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

/* dnnl_sgemm splits a product over the threads it runs on by their
 * count, and where it splits the sum (few rows and columns against a long
 * k: a batch of 32 times a 2048 x 512 kernel) it adds the threads' partial
 * sums in an order that depends on it too: ResNet50's and MobileNetV2's
 * last convs gave other bits on 2 threads than on 1. Here C goes in
 * panels of its larger side fixed by the shape alone, each one
 * single-threaded dnnl_sgemm (whose bits depend on the panel's shape: a
 * panel count that followed the threads would not do). A power of two of
 * them (shared evenly by 2, 4 or 8 threads), each at least PANEL_MIN wide
 * and PANEL_MACS multiply-adds: each packs the other operand again, which
 * the small products of a recurrent layer's steps cannot afford. */
enum { PANEL_MIN = 64, PANELS_MAX = 16 };
#define PANEL_MACS ((int64_t)1 << 22)

/* C's rows (by_rows) or columns [from, to). */
static void sgemm_panel(char transa, char transb, int64_t m, int64_t n,
                        int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c,
                        int64_t ldc, int by_rows, int64_t from, int64_t to) {
  if (by_rows)
    dnnl_sgemm(transa, transb, to - from, n, k, alpha,
               a + (transa == 'N' ? from * lda : from), lda, b, ldb, beta,
               c + from * ldc, ldc);
  else
    dnnl_sgemm(transa, transb, m, to - from, k, alpha, a, lda,
               b + (transb == 'N' ? from : from * ldb), ldb, beta, c + from,
               ldc);
}

void cpu_sgemm(char transa, char transb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b,
               int64_t ldb, float beta, float *c, int64_t ldc) {
  int by_rows = m > n;
  int64_t side = by_rows ? m : n, macs = m * n * k, panels = 1;
  while (panels < PANELS_MAX && side / (panels * 2) >= PANEL_MIN &&
         macs / (panels * 2) >= PANEL_MACS)
    panels *= 2;
  int threads = cpu_threads_for(panels);
  if (threads == 1) {
    /* one thread: a team of one is no parallel region to oneDNN, which
     * would spread the product over the count the caller was given */
    int was = omp_get_max_threads();
    if (was > 1) omp_set_num_threads(1);
    for (int64_t p = 0; p < panels; p++)
      sgemm_panel(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  by_rows, side * p / panels, side * (p + 1) / panels);
    if (was > 1) omp_set_num_threads(was);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < panels; p++)
    sgemm_panel(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                by_rows, side * p / panels, side * (p + 1) / panels);
}

void cpu_sum_blocks(const float *partial, int64_t blocks, int64_t taps,
                    int64_t c, float *dw, float *db) {
  int64_t weights = taps * c, per = weights + c;
  for (int64_t e = 0; e < per; e++) {
    float sum = 0.0f;
    for (int64_t blk = 0; blk < blocks; blk++) sum += partial[blk * per + e];
    if (e < weights)
      dw[e] = sum;
    else if (db)
      db[e - weights] = sum;
  }
}

mxu_status cpu_op_alloc(mxu_op **out, const char *op) {
  *out = calloc(1, sizeof **out);
  if (!*out) return mxu_fail(MXU_ERR_NOMEM, "onednn: %s: out of memory", op);
  return MXU_OK;
}

mxu_status cpu_op_finish(mxu_op *op, mxu_status status, mxu_op **out) {
  if (status != MXU_OK) {
    cpu_op_free(op);
    return status;
  }
  *out = op;
  return MXU_OK;
}

void cpu_prim_release(cpu_prim *p) {
  for (int i = 0; i < p->nargs; i++) dnnl_memory_destroy(p->args[i].memory);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->pd) dnnl_primitive_desc_destroy(p->pd);
  mxu_aligned_free(p->scratch);
}

void cpu_op_free(mxu_op *op) {
  if (!op) return;
  for (int i = 0; i < CPU_MAX_PRIMS; i++) cpu_prim_release(&op->prim[i]);
  cpu_weighted_blocks_free(op);
  for (int i = 0; i < 3; i++) mxu_aligned_free(op->blocked[i]);
  mxu_aligned_free(op->src_copy);
  mxu_aligned_free(op->diff_dst_copy);
  mxu_aligned_free(op->conv_pool);
  mxu_aligned_free(op->conv_then_pool);
  mxu_aligned_free(op->conv_data);
  mxu_aligned_free(op->conv_few);
  mxu_aligned_free(op->conv_dw);
  mxu_aligned_free(op->conv_gemm);
  mxu_aligned_free(op->conv_wino);
  mxu_aligned_free(op->conv_bf16);
  mxu_aligned_free(op->conv_bf16_data);
  mxu_aligned_free(op->conv_bf16_grad);
  free(op);
}

mxu_status cpu_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                  dnnl_format_tag_t tag, const char *op) {
  return cpu_md_typed(md, ndims, dims, dnnl_f32, tag, op);
}

mxu_status cpu_md_typed(dnnl_memory_desc_t *md, int ndims,
                        const dnnl_dims_t dims, dnnl_data_type_t type,
                        dnnl_format_tag_t tag, const char *op) {
  CPU_TRY(op, dnnl_memory_desc_init_by_tag, md, ndims, dims, type, tag);
  return MXU_OK;
}

mxu_status cpu_fused_alg(mxu_activation activation, const char *op,
                         dnnl_alg_kind_t *alg) {
  switch (activation) {
  case MXU_LINEAR: *alg = dnnl_alg_kind_undef; return MXU_OK;
  case MXU_RELU: *alg = dnnl_eltwise_relu; return MXU_OK;
  case MXU_SIGMOID: *alg = dnnl_eltwise_logistic; return MXU_OK;
  case MXU_TANH: *alg = dnnl_eltwise_tanh; return MXU_OK;
  default: break; /* not fusable (mxu_activation_fusable) */
  }
  return mxu_fail(MXU_ERR_ARG, "onednn: %s: activation %d cannot be fused", op,
                  (int)activation);
}

/* User scratchpad mode: oneDNN would otherwise allocate (and may grow) its
 * scratchpad while executing; ours is sized from the pd once. */
static mxu_status make_attr(dnnl_primitive_attr_t attr, dnnl_alg_kind_t post,
                            const char *op) {
  CPU_TRY(op, dnnl_primitive_attr_set_scratchpad_mode, attr,
          dnnl_scratchpad_mode_user);
  if (post == dnnl_alg_kind_undef) return MXU_OK;
  dnnl_post_ops_t ops;
  CPU_TRY(op, dnnl_post_ops_create, &ops);
  mxu_status status =
      cpu_check(dnnl_post_ops_append_eltwise(ops, 1.0f, post, 0.0f, 0.0f), op,
                "dnnl_post_ops_append_eltwise");
  if (status == MXU_OK)
    status = cpu_check(dnnl_primitive_attr_set_post_ops(attr, ops), op,
                       "dnnl_primitive_attr_set_post_ops");
  dnnl_post_ops_destroy(ops);
  return status;
}

/* desc NULL: a reorder from `from` to `to`; else an op desc. */
static mxu_status create_pd(cpu_prim *p, const_dnnl_op_desc_t desc,
                            dnnl_alg_kind_t post, const cpu_prim *hint,
                            const dnnl_memory_desc_t *from,
                            const dnnl_memory_desc_t *to, const char *op,
                            const char *what) {
  dnnl_engine_t engine;
  MXU_TRY(cpu_engine(op, &engine));
  dnnl_primitive_attr_t attr;
  CPU_TRY(op, dnnl_primitive_attr_create, &attr);
  mxu_status status = make_attr(attr, post, op);
  if (status == MXU_OK) {
    dnnl_status_t s =
        desc ? dnnl_primitive_desc_create(&p->pd, desc, attr, engine,
                                          hint ? hint->pd : NULL)
             : dnnl_reorder_primitive_desc_create(&p->pd, from, engine, to,
                                                  engine, attr);
    if (s != dnnl_success)
      status =
          mxu_fail(MXU_ERR_BACKEND, "onednn: %s: %s(%s) failed: status %d", op,
                   desc ? "dnnl_primitive_desc_create"
                        : "dnnl_reorder_primitive_desc_create",
                   what, (int)s);
  }
  dnnl_primitive_attr_destroy(attr);
  return status;
}

static mxu_status create_scratchpad(cpu_prim *p, const char *op) {
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
  size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
  if (bytes == 0) return MXU_OK;
  p->scratch = mxu_aligned_alloc(bytes);
  if (!p->scratch)
    return mxu_fail(MXU_ERR_NOMEM,
                    "onednn: %s: no memory for a %zu-byte scratchpad", op,
                    bytes);
  dnnl_engine_t engine;
  MXU_TRY(cpu_engine(op, &engine));
  dnnl_memory_t memory;
  CPU_TRY(op, dnnl_memory_create, &memory, md, engine, p->scratch);
  p->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, memory};
  p->nargs = p->first_user = 1;
  return MXU_OK;
}

/* The primitives of one op never run at the same time (an op belongs to
 * one replica or slice, which one worker runs), so one scratchpad, the
 * largest, serves them all: Winograd's three need 7-10 MB each per 128
 * cifar images. */
mxu_status cpu_prims_share_scratch(cpu_prim *prims, int count, const char *op) {
  size_t largest = 0;
  int owner = -1;
  for (int i = 0; i < count; i++) {
    if (!prims[i].scratch) continue;
    size_t bytes = dnnl_memory_desc_get_size(
        dnnl_primitive_desc_query_md(prims[i].pd, dnnl_query_scratchpad_md, 0));
    if (owner < 0 || bytes > largest) largest = bytes, owner = i;
  }
  for (int i = 0; i < count; i++) {
    if (!prims[i].scratch || i == owner) continue;
    mxu_aligned_free(prims[i].scratch);
    prims[i].scratch = NULL;
    CPU_TRY(op, dnnl_memory_set_data_handle, prims[i].args[0].memory,
            prims[owner].scratch);
  }
  return MXU_OK;
}

mxu_status cpu_prim_create(cpu_prim *p, const_dnnl_op_desc_t desc,
                           dnnl_alg_kind_t post_eltwise, const cpu_prim *hint,
                           const char *op, const char *what) {
  MXU_TRY(create_pd(p, desc, post_eltwise, hint, NULL, NULL, op, what));
  MXU_TRY(create_scratchpad(p, op));
  CPU_TRY(op, dnnl_primitive_create, &p->prim, p->pd);
  return MXU_OK;
}

mxu_status cpu_reorder_create(cpu_prim *p, const dnnl_memory_desc_t *from,
                              const dnnl_memory_desc_t *to, const char *op,
                              const char *what) {
  MXU_TRY(create_pd(p, NULL, dnnl_alg_kind_undef, NULL, from, to, op, what));
  MXU_TRY(create_scratchpad(p, op));
  CPU_TRY(op, dnnl_primitive_create, &p->prim, p->pd);
  MXU_TRY(cpu_prim_arg(p, DNNL_ARG_FROM, op));
  return cpu_prim_arg(p, DNNL_ARG_TO, op);
}

mxu_status cpu_prim_arg(cpu_prim *p, int arg, const char *op) {
  if (p->nargs == CPU_MAX_ARGS)
    return mxu_fail(MXU_ERR_BACKEND, "onednn: %s: too many arguments", op);
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(p->pd, dnnl_query_exec_arg_md, arg);
  if (!md)
    return mxu_fail(MXU_ERR_BACKEND, "onednn: %s: no memory desc for arg %d",
                    op, arg);
  dnnl_engine_t engine;
  MXU_TRY(cpu_engine(op, &engine));
  dnnl_memory_t memory;
  CPU_TRY(op, dnnl_memory_create, &memory, md, engine, DNNL_MEMORY_NONE);
  p->args[p->nargs++] = (dnnl_exec_arg_t){arg, memory};
  return MXU_OK;
}

void cpu_run(cpu_prim *p, const void *const *buffers) {
  dnnl_stream_t stream_cpu = NULL;
  dnnl_status_t status = thread_stream(&stream_cpu);
  /* v2 with our stream: a blocked buffer's padding is zeroed on it rather
   * than on a service stream. */
  for (int i = p->first_user; i < p->nargs && status == dnnl_success; i++)
    status = dnnl_memory_set_data_handle_v2(
        p->args[i].memory, (void *)buffers[i - p->first_user], stream_cpu);
  if (status == dnnl_success)
    status = dnnl_primitive_execute(p->prim, stream_cpu, p->nargs, p->args);
  if (status == dnnl_success) status = dnnl_stream_wait(stream_cpu);
  /* Shapes were fixed and checked at create, so this does not happen in
   * practice; the execute kernels return nothing, so record it. */
  if (status != dnnl_success)
    cpu_check(status, "execute", "dnnl_primitive_execute");
}
