/* dense.c — Dense on oneDNN's inner product: x [n, in] as 'nc' and Keras'
 * kernel [in, out] used in place as the 'io' weights layout (a blocked
 * layout measured only 10-40% faster here, not worth a reorder). In bf16
 * x, the kernel and dy are read in bfloat16 and everything written is
 * f32. The primitives themselves are built in weighted.c. */
#include "backend/cpu/cpu.h"

static const char DENSE[] = "dense";

/* A bf16 kernel is reordered (rounded) anyway, so oneDNN may pick its
 * layout for free: its blocked brgemm kernels measured 1.0-1.7x as fast
 * as bf16 gemm on the plain 'io' layout (10816->10 the most). */
static const dnnl_format_tag_t BF16_WEIGHTS = dnnl_format_tag_any;

/* *_lo: what the multiplications read, bf16 or f32; the rest is f32. */
typedef struct dense_mds {
  dnnl_memory_desc_t src, weights, bias, dst;
  dnnl_memory_desc_t src_lo, weights_lo, dst_lo, diff_weights;
} dense_mds;

static mxu_status dense_describe(const mxu_dense_desc *d, int bf16,
                                 dense_mds *m) {
  dnnl_dims_t src = {d->n, d->in};
  dnnl_dims_t weights = {d->out, d->in}; /* logical O,I */
  dnnl_dims_t bias = {d->out};
  dnnl_dims_t dst = {d->n, d->out};
  dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
  MXU_TRY(cpu_md(&m->src, 2, src, dnnl_nc, DENSE));
  MXU_TRY(cpu_md(&m->weights, 2, weights, dnnl_io, DENSE));
  MXU_TRY(cpu_md(&m->bias, 1, bias, dnnl_x, DENSE));
  MXU_TRY(cpu_md(&m->dst, 2, dst, dnnl_nc, DENSE));
  MXU_TRY(cpu_md_typed(&m->src_lo, 2, src, lo, dnnl_nc, DENSE));
  MXU_TRY(cpu_md_typed(&m->weights_lo, 2, weights, lo,
                       bf16 ? BF16_WEIGHTS : dnnl_io, DENSE));
  MXU_TRY(cpu_md_typed(&m->dst_lo, 2, dst, lo, dnnl_nc, DENSE));
  /* The weight gradient in place even in bf16: brgemm's blocked one and
   * its reorder out took cifar's 3136 -> 512 backward 2.7-3.2 ms a
   * replica's step, the gemm on 'io' 1.9-2.4; the rows transformer
   * 7,854 -> 8,521 images/s. */
  MXU_TRY(cpu_md(&m->diff_weights, 2, weights, dnnl_io, DENSE));
  return MXU_OK;
}

/* Which passes run on the same bits on any thread count, measured on 1
 * and 2 threads over shapes from 1 to 100,000 rows: float32's forward and
 * weight gradient do, its backward data does not where the rows are few
 * (its sum over the outputs split by the count: 32 x 4096 -> 4096, 64 x
 * 2048 -> 2048, 128 x 1024 -> 1024), which cpu_sgemm takes then; bf16's
 * bias gradient did not (4096 x 128 -> 32), so its weight gradient goes
 * over blocks of rows. */
static mxu_status dense_create(const mxu_dense_desc *desc, int bf16,
                               mxu_op **out) {
  dense_mds m;
  MXU_TRY(dense_describe(desc, bf16, &m));
  const dnnl_memory_desc_t *b = desc->has_bias ? &m.bias : NULL;
  dnnl_inner_product_desc_t fwd, bwd_data, bwd_weights;
  CPU_TRY(DENSE, dnnl_inner_product_forward_desc_init, &fwd,
          dnnl_forward_training, &m.src_lo, &m.weights_lo, b, &m.dst);
  CPU_TRY(DENSE, dnnl_inner_product_backward_data_desc_init, &bwd_data, &m.src,
          &m.weights_lo, &m.dst_lo);
  CPU_TRY(DENSE, dnnl_inner_product_backward_weights_desc_init, &bwd_weights,
          &m.src_lo, &m.diff_weights, b, &m.dst_lo);
  cpu_weighted_descs descs = {.forward = &fwd,
                              .backward_data = &bwd_data,
                              .backward_weights = &bwd_weights,
                              .plain_weights = &m.weights,
                              .activation = desc->activation,
                              .has_bias = desc->has_bias,
                              .bf16 = bf16,
                              .plain_src = &m.src,
                              .plain_dst = &m.dst};
  mxu_op *op;
  MXU_TRY(cpu_weighted_create(&descs, DENSE, &op));
  if (!bf16) {
    op->dense_rows = desc->n, op->dense_in = desc->in;
    op->dense_out = desc->out;
    return cpu_op_finish(op, MXU_OK, out);
  }
  return cpu_op_finish(op, cpu_weighted_blocks_attach(op, desc->n, 1, DENSE),
                       out);
}

/* Below this many outputs a bf16 product costs more than its f32 one:
 * rounding x to bf16 is a pass over it as long as the product itself
 * (mxu bench fashion, 10816 -> 10 on slices of 40 rows: 0.43 ms a slice
 * in bf16, 0.33 in f32). */
enum { BF16_MIN_OUT = 32 };

/* bf16 where it pays and oneDNN has fast kernels for it, else f32 (see
 * weighted.c): f32 is the more exact, so mixed_bfloat16 loses nothing. */
mxu_status cpu_dense_create(const mxu_dense_desc *desc, mxu_op **out) {
  if (desc->bf16 && desc->out >= BF16_MIN_OUT &&
      dense_create(desc, 1, out) == MXU_OK)
    return MXU_OK;
  return dense_create(desc, 0, out);
}

/* dx = dy w^T, w as Keras lays it out: [in][out]. */
void cpu_dense_backward_data(mxu_op *op, const float *dy, const float *w,
                             float *dx) {
  if (!op->dense_rows) {
    cpu_weighted_backward_data(op, dy, w, dx);
    return;
  }
  cpu_sgemm('N', 'T', op->dense_rows, op->dense_in, op->dense_out, 1.0f, dy,
            op->dense_out, w, op->dense_out, 0.0f, dx, op->dense_in);
}
