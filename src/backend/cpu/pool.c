/* pool.c — max and average pooling on oneDNN, NHWC. Max pooling's training
 * forward records the argmax in a caller-owned workspace that its backward
 * reads; inference uses a forward_inference primitive that writes none.
 * Average pooling excludes the padding, as Keras does. */
#include "backend/cpu/cpu.h"

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

static mxu_status pool_build(mxu_op *op, const mxu_pool2d_desc *d) {
  pool_mds m;
  MXU_TRY(pool_describe(d, &m));
  MXU_TRY(forward_create(op, &m, POOL_TRAIN));
  MXU_TRY(forward_create(op, &m, POOL_INFER));
  return backward_create(op, &m);
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
  cpu_run(&op->prim[training ? POOL_TRAIN : POOL_INFER],
          (const void *[]){x, y, workspace});
}

/* oneDNN's backward needs neither x nor y: max pooling routes dy through
 * the workspace's argmax, average pooling spreads it evenly. */
void cpu_pool2d_backward(mxu_op *op, const float *x, const float *y,
                         const float *dy, const void *workspace, float *dx) {
  (void)x;
  (void)y;
  cpu_run(&op->prim[POOL_BWD], (const void *[]){dy, dx, workspace});
}
