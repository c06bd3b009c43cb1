/* dense.c — Dense on oneDNN's inner product: x [n, in] as 'nc' and Keras'
 * kernel [in, out] used in place as the 'io' weights layout (a blocked
 * layout measured only 10-40% faster here, not worth a reorder). The
 * primitives themselves are built in weighted.c. */
#include "backend/cpu/cpu.h"

static const char DENSE[] = "dense";

mxu_status cpu_dense_create(const mxu_dense_desc *desc, mxu_op **out) {
  dnnl_dims_t src_dims = {desc->n, desc->in};
  dnnl_dims_t weights_dims = {desc->out, desc->in}; /* logical O,I */
  dnnl_dims_t bias_dims = {desc->out};
  dnnl_dims_t dst_dims = {desc->n, desc->out};
  dnnl_memory_desc_t src, weights, bias, dst;
  MXU_TRY(cpu_md(&src, 2, src_dims, dnnl_nc, DENSE));
  MXU_TRY(cpu_md(&weights, 2, weights_dims, dnnl_io, DENSE));
  MXU_TRY(cpu_md(&bias, 1, bias_dims, dnnl_x, DENSE));
  MXU_TRY(cpu_md(&dst, 2, dst_dims, dnnl_nc, DENSE));
  const dnnl_memory_desc_t *b = desc->has_bias ? &bias : NULL;
  dnnl_inner_product_desc_t fwd, bwd_data, bwd_weights;
  CPU_TRY(DENSE, dnnl_inner_product_forward_desc_init, &fwd,
          dnnl_forward_training, &src, &weights, b, &dst);
  CPU_TRY(DENSE, dnnl_inner_product_backward_data_desc_init, &bwd_data, &src,
          &weights, &dst);
  CPU_TRY(DENSE, dnnl_inner_product_backward_weights_desc_init, &bwd_weights,
          &src, &weights, b, &dst);
  cpu_weighted_descs descs = {&fwd,     &bwd_data,        &bwd_weights,
                              &weights, desc->activation, desc->has_bias};
  return cpu_weighted_create(&descs, DENSE, out);
}
