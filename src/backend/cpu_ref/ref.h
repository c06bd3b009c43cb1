/* ref.h — what the cpu_ref kernel files share: the op (a heap copy of the
 * descriptor, nothing precomputed, so the oracle has no state to get wrong)
 * and each family's entry points, gathered into the table by cpu_ref.c. */
#ifndef MXU_CPU_REF_H
#define MXU_CPU_REF_H

#include "backend/backend.h"
#include "core/core.h"

struct mxu_op {
  union {
    mxu_conv2d_desc conv2d;
    mxu_dense_desc dense;
    mxu_pool2d_desc pool2d;
    mxu_batchnorm_desc batchnorm;
    mxu_activation_desc activation;
  } desc;
};

/* Offset of element (i0, i1, i2, i3) in a dense 4-D array whose last three
 * extents are d1, d2, d3 (NHWC activations and HWIO kernels alike). */
static inline int64_t mxu_ref_at4(int64_t i0, int64_t i1, int64_t i2,
                                  int64_t i3, int64_t d1, int64_t d2,
                                  int64_t d3) {
  return ((i0 * d1 + i1) * d2 + i2) * d3 + i3;
}

/* cpu_ref.c: shared validation and allocation for the create functions. */
mxu_status mxu_ref_op_new(mxu_op **out);
mxu_status mxu_ref_check_window(const char *what, int in, int out, int kernel,
                                int stride, int pad_before, int pad_after);
mxu_status mxu_ref_check_fused(const char *what, mxu_activation activation);

/* elementwise.c */
float mxu_ref_activate(mxu_activation activation, float x);
/* The derivative of the activation at x (alpha its default). */
double mxu_ref_slope(mxu_activation activation, double x);
mxu_status mxu_ref_activation_create(const mxu_activation_desc *desc,
                                     mxu_op **out);
void mxu_ref_activation_forward(mxu_op *op, const float *x, float *y);
void mxu_ref_activation_backward(mxu_op *op, const float *x, const float *y,
                                 const float *dy, float *dx);
void mxu_ref_multiply(int64_t count, const float *a, const float *b, float *y);
void mxu_ref_scale_channels(int64_t n, int64_t pixels, int c, const float *x,
                            const float *s, float *y);
void mxu_ref_scale_channels_backward(int64_t n, int64_t pixels, int c,
                                     const float *x, const float *s,
                                     const float *dy, float *dx, float *ds);
void mxu_ref_copy_rows(int64_t rows, int64_t width, const float *src,
                       int64_t src_stride, float *dst, int64_t dst_stride);
void mxu_ref_channel_mean(int64_t n, int64_t pixels, int c, const float *x,
                          float *y);
void mxu_ref_channel_mean_backward(int64_t n, int64_t pixels, int c,
                                   const float *dy, float *dx);
void mxu_ref_scale_shift(int64_t count, const float *x, float scale,
                         float offset, float *y);
void mxu_ref_add(int64_t count, const float *a, const float *b, int relu,
                 float *y);

/* conv.c */
mxu_status mxu_ref_conv2d_create(const mxu_conv2d_desc *desc, mxu_op **out);
void mxu_ref_conv2d_forward(mxu_op *op, const float *x, const float *w,
                            const float *b, float *y);
void mxu_ref_conv2d_backward_data(mxu_op *op, const float *dy, const float *w,
                                  float *dx);
void mxu_ref_conv2d_backward_weights(mxu_op *op, const float *x,
                                     const float *dy, float *dw, float *db);

/* dense.c */
mxu_status mxu_ref_dense_create(const mxu_dense_desc *desc, mxu_op **out);
void mxu_ref_dense_forward(mxu_op *op, const float *x, const float *w,
                           const float *b, float *y);
void mxu_ref_dense_backward_data(mxu_op *op, const float *dy, const float *w,
                                 float *dx);
void mxu_ref_dense_backward_weights(mxu_op *op, const float *x, const float *dy,
                                    float *dw, float *db);

/* pool.c */
mxu_status mxu_ref_pool2d_create(const mxu_pool2d_desc *desc, mxu_op **out);
size_t mxu_ref_pool2d_workspace_bytes(mxu_op *op);
void mxu_ref_pool2d_forward(mxu_op *op, int training, const float *x, float *y,
                            void *workspace);
void mxu_ref_pool2d_backward(mxu_op *op, const float *x, const float *y,
                             const float *dy, const void *workspace, float *dx);

/* norm.c */
mxu_status mxu_ref_batchnorm_create(const mxu_batchnorm_desc *desc,
                                    mxu_op **out);
void mxu_ref_batchnorm_forward_training(mxu_op *op, const float *x,
                                        const float *gamma, const float *beta,
                                        float *y, float *mean, float *var);
void mxu_ref_batchnorm_forward_inference(mxu_op *op, const float *x,
                                         const float *gamma, const float *beta,
                                         const float *mean, const float *var,
                                         float *y);
void mxu_ref_batchnorm_backward(mxu_op *op, const float *x, const float *y,
                                const float *dy, const float *gamma,
                                const float *beta, const float *mean,
                                const float *var, float *dx, float *dgamma,
                                float *dbeta);

/* loss.c */
void mxu_ref_softmax_cross_entropy(int64_t n, int k, const float *logits,
                                   const int32_t *labels, const float *onehot,
                                   const float *mask, float scale, float *probs,
                                   float *loss, float *dlogits);
void mxu_ref_cross_entropy(int64_t n, int k, const float *probs,
                           const int32_t *labels, const float *onehot,
                           const float *mask, float scale, float *loss,
                           float *dprobs);

/* optimizer.c */
void mxu_ref_adam_update(int64_t count, float *w, const float *g, float *m,
                         float *v, float lr_t, float beta_1, float beta_2,
                         float epsilon);
void mxu_ref_sgd_update(int64_t count, float *w, const float *g,
                        float *velocity, float lr, float momentum,
                        int nesterov);

#endif
