/* weighted_blocks.c — oneDNN's weight gradient over blocks of images fixed
 * by the shape.
 *
 * A oneDNN weight gradient splits its sum over the images between the
 * threads it was created for and adds their partial sums in an order that
 * depends on their count: a replica on 2 threads got other bits than on 1
 * (ResNet-20's stride-2 convs in float32, VGG16's and ResNet50's convs in
 * both precisions, a bf16 Dense's bias). One replica runs on as many
 * threads as the user gives it (or its MPI process has), so here the batch
 * goes in blocks, each one primitive created for and run on one thread,
 * and the blocks' sums are added in block order: the same bits on any
 * count. */
#include "backend/cpu/cpu.h"

#include <omp.h>
#include <stdlib.h>

/* At most this many blocks (2, 4 and 8 threads share them evenly), of at
 * least MIN_IMAGES images each; fewer where the blocks' sums would cost
 * too much next to the gradient, down to one on one thread. Adding a
 * block's partial sums reads 4 bytes a weight, a streamed pass that costs
 * about what SUM_MACS multiply-adds of each weight do (2 cores, AVX-512),
 * so each further block needs SUM_MACS * 5 of them (a fifth); each
 * block's primitive call costs a few microseconds, so each has BLOCK_MACS
 * multiply-adds at least (Fashion-MNIST's Conv1D rows, 28 steps of 32 ->
 * 64 channels at 32 rows a slice, ran 7% slower in 4 blocks); and the
 * partials stay within PARTIAL_BUDGET. Winograd's weight gradient
 * transforms its sums back to the kernel's once a call, which on VGG16's
 * 256 and 512 channels cost more than the blocks' sums (its step at 128
 * images in bf16, against one call on 2 threads: in up to 4 blocks of 32
 * 0.94x, in 2 0.97x): 2 blocks of 32 images or more. */
enum {
  MAX_BLOCKS = 8,
  MIN_IMAGES = 8,
  MAX_WINOGRAD_BLOCKS = 2,
  MIN_WINOGRAD_IMAGES = 32,
  SUM_MACS = 50
};
#define BLOCK_MACS ((int64_t)1 << 23)
#define PARTIAL_BUDGET ((size_t)32 << 20)

struct cpu_weights_blocks {
  int blocks, threads;
  size_t x_bytes, dy_bytes;    /* a block's x and dy as the primitive reads */
  size_t dw_floats, db_floats; /* its gradient, in the op's chosen layout */
  float *partial; /* blocks 1..: block 0 writes the gradient itself */
  /* One per thread: the one primitive with memory objects and a
   * scratchpad of its own, as threads run it at once. */
  cpu_prim prim[];
};

/* per_weight: the gradient's multiply-adds per weight (images x output
 * pixels). */
static int block_count(int64_t n, int64_t per_weight, int64_t weights,
                       int max_blocks, int64_t min_images,
                       size_t partial_bytes) {
  for (int k = max_blocks; k >= 2; k /= 2)
    if (n % k == 0 && n / k >= min_images &&
        (int64_t)(k - 1) * SUM_MACS * 5 <= per_weight &&
        per_weight * weights / k >= BLOCK_MACS &&
        (size_t)(k - 1) * partial_bytes <= PARTIAL_BUDGET)
      return k;
  return 1;
}

static size_t md_bytes(const_dnnl_primitive_desc_t pd, int arg) {
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* md as the full batch's primitive chose it, for `images` images: the
 * images are the outermost dimension of every layout here, so a block is
 * the same layout from an offset. */
static dnnl_memory_desc_t block_md(const_dnnl_primitive_desc_t pd, int arg,
                                   int64_t images) {
  dnnl_memory_desc_t md =
      *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  md.dims[0] = md.padded_dims[0] = images;
  return md;
}

/* The backward-weights desc of the op's primitive with every layout as
 * it chose, for a block of `images`. */
typedef union block_desc {
  dnnl_convolution_desc_t conv;
  dnnl_inner_product_desc_t ip;
} block_desc;

static mxu_status describe_block(const_dnnl_primitive_desc_t pd, int64_t images,
                                 block_desc *out, const char *name) {
  const dnnl_convolution_desc_t *conv = NULL;
  const dnnl_inner_product_desc_t *ip = NULL;
  dnnl_memory_desc_t src = block_md(pd, DNNL_ARG_SRC, images);
  dnnl_memory_desc_t dst = block_md(pd, DNNL_ARG_DIFF_DST, images);
  const dnnl_memory_desc_t *dw = dnnl_primitive_desc_query_md(
      pd, dnnl_query_exec_arg_md, DNNL_ARG_DIFF_WEIGHTS);
  if (dnnl_primitive_desc_query(pd, dnnl_query_convolution_d, 0, &conv) ==
          dnnl_success &&
      conv) {
    out->conv = *conv;
    out->conv.src_desc = src;
    out->conv.diff_dst_desc = dst;
    out->conv.diff_weights_desc = *dw;
    return MXU_OK;
  }
  if (dnnl_primitive_desc_query(pd, dnnl_query_inner_product_d, 0, &ip) ==
          dnnl_success &&
      ip) {
    out->ip = *ip;
    out->ip.src_desc = src;
    out->ip.diff_dst_desc = dst;
    out->ip.diff_weights_desc = *dw;
    return MXU_OK;
  }
  return mxu_fail(MXU_ERR_BACKEND,
                  "onednn: %s: backward weights of an unknown kind", name);
}

/* Each thread's copy of the block primitive, created for one thread. */
static mxu_status create_prims(struct cpu_weights_blocks *wb,
                               const block_desc *desc, const cpu_prim *hint,
                               int has_bias, const char *name) {
  int was = omp_get_max_threads();
  omp_set_num_threads(1);
  mxu_status s = MXU_OK;
  for (int t = 0; t < wb->threads && s == MXU_OK; t++) {
    cpu_prim *p = &wb->prim[t];
    s = cpu_prim_create(p, desc, dnnl_alg_kind_undef, hint, name,
                        "backward_weights (a block)");
    if (s == MXU_OK) s = cpu_prim_arg(p, DNNL_ARG_SRC, name);
    if (s == MXU_OK) s = cpu_prim_arg(p, DNNL_ARG_DIFF_DST, name);
    if (s == MXU_OK) s = cpu_prim_arg(p, DNNL_ARG_DIFF_WEIGHTS, name);
    if (s == MXU_OK && has_bias) s = cpu_prim_arg(p, DNNL_ARG_DIFF_BIAS, name);
  }
  omp_set_num_threads(was);
  return s;
}

mxu_status cpu_weighted_blocks_attach(mxu_op *op, int64_t n, int64_t pixels,
                                      const char *name) {
  const_dnnl_primitive_desc_t pd = op->prim[CPU_PASS_BACKWARD_WEIGHTS].pd;
  size_t dw_bytes = md_bytes(pd, DNNL_ARG_DIFF_WEIGHTS);
  size_t db_bytes = op->has_bias ? md_bytes(pd, DNNL_ARG_DIFF_BIAS) : 0;
  const dnnl_convolution_desc_t *conv = NULL;
  int winograd = dnnl_primitive_desc_query(pd, dnnl_query_convolution_d, 0,
                                           &conv) == dnnl_success &&
                 conv && conv->alg_kind == dnnl_convolution_winograd;
  /* Winograd multiplies a quarter of direct's */
  int64_t per_weight = winograd ? n * pixels / 4 : n * pixels;
  int blocks = block_count(n, per_weight, (int64_t)(dw_bytes / sizeof(float)),
                           winograd ? MAX_WINOGRAD_BLOCKS : MAX_BLOCKS,
                           winograd ? MIN_WINOGRAD_IMAGES : MIN_IMAGES,
                           dw_bytes + db_bytes);
  int threads = cpu_create_threads();
  if (threads > blocks) threads = blocks;
  struct cpu_weights_blocks *wb =
      calloc(1, sizeof *wb + (size_t)threads * sizeof(cpu_prim));
  if (!wb) return mxu_fail(MXU_ERR_NOMEM, "onednn: %s: out of memory", name);
  op->weights_blocks = wb;
  wb->blocks = blocks;
  wb->threads = threads;
  wb->dw_floats = dw_bytes / sizeof(float);
  wb->db_floats = db_bytes / sizeof(float);
  wb->x_bytes = md_bytes(pd, DNNL_ARG_SRC) / (size_t)blocks;
  wb->dy_bytes = md_bytes(pd, DNNL_ARG_DIFF_DST) / (size_t)blocks;
  if (blocks > 1) {
    wb->partial =
        mxu_aligned_alloc((size_t)(blocks - 1) * (dw_bytes + db_bytes));
    if (!wb->partial)
      return mxu_fail(MXU_ERR_NOMEM,
                      "onednn: %s: no memory for %d blocks' weight gradients",
                      name, blocks - 1);
  }
  block_desc desc;
  MXU_TRY(describe_block(pd, n / blocks, &desc, name));
  return create_prims(wb, &desc, &op->prim[CPU_PASS_FORWARD], op->has_bias,
                      name);
}

void cpu_weighted_blocks_free(mxu_op *op) {
  struct cpu_weights_blocks *wb = op->weights_blocks;
  if (!wb) return;
  for (int t = 0; t < wb->threads; t++) cpu_prim_release(&wb->prim[t]);
  mxu_aligned_free(wb->partial);
  free(wb);
}

/* Block b's gradient: b 0 into dw and db, the others into their partial. */
static void run_block(struct cpu_weights_blocks *wb, int t, int b,
                      const char *x, const char *dy, float *dw, float *db) {
  if (b > 0) {
    dw = wb->partial + (size_t)(b - 1) * (wb->dw_floats + wb->db_floats);
    db = dw + wb->dw_floats;
  }
  cpu_run(&wb->prim[t],
          (const void *[]){x + b * wb->x_bytes, dy + b * wb->dy_bytes, dw, db});
}

/* to[0..count) += each block's partial from `at` on, in block order
 * (the same sums on any split of the values over threads). */
static void add_blocks(const struct cpu_weights_blocks *wb, size_t at,
                       float *to, size_t count) {
  enum { CHUNK = 4096 };
  size_t per = wb->dw_floats + wb->db_floats;
  int64_t chunks = (int64_t)((count + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(chunks))
  for (int64_t c = 0; c < chunks; c++) {
    size_t from = (size_t)c * CHUNK,
           end = from + CHUNK < count ? from + CHUNK : count;
    for (int b = 1; b < wb->blocks; b++) {
      const float *p = wb->partial + (size_t)(b - 1) * per + at;
      for (size_t e = from; e < end; e++) to[e] += p[e];
    }
  }
}

void cpu_weighted_blocks_run(mxu_op *op, const void *x, const void *dy,
                             float *dw, float *db) {
  struct cpu_weights_blocks *wb = op->weights_blocks;
  int threads = cpu_threads_for(wb->blocks);
  if (threads > wb->threads) threads = wb->threads;
  if (threads == 1) {
    /* one thread: oneDNN's own loops too */
    int was = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int b = 0; b < wb->blocks; b++) run_block(wb, 0, b, x, dy, dw, db);
    omp_set_num_threads(was);
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int b = 0; b < wb->blocks; b++)
      run_block(wb, omp_get_thread_num(), b, x, dy, dw, db);
  }
  if (wb->blocks == 1) return;
  add_blocks(wb, 0, dw, wb->dw_floats);
  if (db) add_blocks(wb, wb->dw_floats, db, wb->db_floats);
}
