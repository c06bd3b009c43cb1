/* backend.h — the kernel table every backend fills in. A layer describes an
 * op once at compile (a *_desc), the backend turns it into an mxu_op (for
 * oneDNN: a primitive created once), and the training step only executes.
 *
 * Layouts are Keras': activations NHWC (channels_last), conv kernels HWIO
 * (kh, kw, in, out), dense kernels (in, units). Backward kernels overwrite
 * their outputs (no accumulation). Internal to libmxu. */
#ifndef MXU_BACKEND_H
#define MXU_BACKEND_H

#include "mxu.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mxu_op mxu_op; /* a backend's private state for one op */

/* Activations a conv or dense op may fuse after its bias: linear, relu,
 * sigmoid and tanh, whose derivatives are functions of the output alone.
 * The others the layer runs after the op with activation_* (and the loss
 * may fuse a softmax).
 *
 * bf16 (mixed_bfloat16): multiply in bfloat16, accumulate in float32. The
 * buffers the kernels take stay float32 (x, w, b, y and every gradient);
 * the backend rounds x, w and dy to bfloat16 copies of its own, and a
 * backend without bfloat16 kernels (cpu_ref, or a CPU without them)
 * computes in float32. The backward kernels reuse the copies of x and w
 * the op's last forward made when given the same buffers, so with bf16
 * they must follow a forward on the same values, as in a training step. */
typedef struct mxu_conv2d_desc {
  int n, in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel_h, kernel_w, stride_h, stride_w;
  int pad_top, pad_left, pad_bottom, pad_right;
  int has_bias;
  mxu_activation activation; /* mxu_activation_fusable */
  int bf16;
  /* Keras' groups (0 or 1: one): input and output channels split in that
   * many groups, each output channel reading its group's inputs only; the
   * kernel is (kh, kw, in_c / groups, out_c). A DepthwiseConv2D is
   * groups = in_c. Dilation (0 or 1: none) spreads the kernel's taps that
   * many pixels apart. */
  int groups, dilation_h, dilation_w;
  /* x and dx (x_native), y and dy (y_native) in the backend's own layout
   * for activations instead of NHWC: only between two convs that both
   * compute in it (conv2d_native), which then pass the tensor on without
   * converting it. Elementwise work on it (the activation's backward)
   * needs no layout; nothing else may read it. */
  int x_native, y_native;
  /* x (x_bf16), y (y_bf16) and their gradients (dx_bf16, dy_bf16) held
   * in bfloat16, NHWC, 2 bytes a value in the caller's float buffer: bf16
   * tensors of the plan, which only bf16 convs, batch normalisations and
   * Adds read and write, and Dropouts pass on (conv2d_bf16_tensors). */
  int x_bf16, y_bf16, dx_bf16, dy_bf16;
} mxu_conv2d_desc;

static inline int mxu_conv2d_groups(const mxu_conv2d_desc *d) {
  return d->groups > 1 ? d->groups : 1;
}

/* A conv with one group and no dilation, which the fast paths take. */
static inline int mxu_conv2d_plain(const mxu_conv2d_desc *d) {
  return d->groups <= 1 && d->dilation_h <= 1 && d->dilation_w <= 1;
}

typedef struct mxu_dense_desc {
  int n, in, out;
  int has_bias;
  mxu_activation activation; /* mxu_activation_fusable */
  int bf16;
} mxu_dense_desc;

/* The weights of a conv_pool_dense op, in this order. */
enum {
  MXU_CPD_CONV_W,
  MXU_CPD_CONV_B,
  MXU_CPD_DENSE_W,
  MXU_CPD_DENSE_B,
  MXU_CPD_PARAMS
};

typedef struct mxu_pool2d_desc {
  int n, in_h, in_w, c;
  int out_h, out_w;
  int pool_h, pool_w, stride_h, stride_w;
  int pad_top, pad_left, pad_bottom, pad_right;
  int is_max; /* else average, over the window's in-bounds pixels only */
} mxu_pool2d_desc;

/* Normalises over rows (n*h*w), per channel c; data is [rows, c]. */
typedef struct mxu_batchnorm_desc {
  int64_t rows;
  int c;
  float epsilon;
  /* MXU_LINEAR, or the activation that alone reads the output, fused:
   * relu (MXU_RELU) or relu6 (MXU_RELU6, MobileNetV2's ReLU(6.)): y is
   * relu'd (NaN stays NaN, as TensorFlow's relu), and backward passes dy
   * on only where that y is positive (and below 6: TensorFlow's side at
   * the corners); silu (MXU_SILU, EfficientNet's swish): y = v sigmoid(v)
   * of the normalised v, and hard_silu (MXU_HARD_SILU, MobileNetV3's
   * hard swish): y = v relu6(v + 3) / 6, both of which backward
   * recomputes from x, gamma and beta (so y is not read). */
  mxu_activation activation;
  /* x, y, dx, dy in bfloat16 (see mxu_conv2d_desc's x_bf16); no dx_bf16
   * with silu */
  int x_bf16, y_bf16, dx_bf16, dy_bf16;
} mxu_batchnorm_desc;

/* The activations a batch normalisation may fuse (above). */
static inline int mxu_batchnorm_fusable(mxu_activation activation) {
  return activation == MXU_LINEAR || activation == MXU_RELU ||
         activation == MXU_RELU6 || activation == MXU_SILU ||
         activation == MXU_HARD_SILU;
}

static inline int mxu_activation_fusable(mxu_activation activation) {
  return activation == MXU_LINEAR || activation == MXU_RELU ||
         activation == MXU_SIGMOID || activation == MXU_TANH;
}

/* Elementwise over rows*cols values; softmax and log_softmax run over each
 * row of cols.
 * alpha is leaky_relu's negative slope and elu's alpha (Keras' layers
 * LeakyReLU and ELU set their own); mxu_activation_alpha gives the
 * default an activation's name implies. */
typedef struct mxu_activation_desc {
  mxu_activation activation;
  int64_t rows;
  int cols;
  float alpha;
} mxu_activation_desc;

/* celu is elu with Keras' default alpha, 1: the backends compute it so. */
static inline float mxu_activation_alpha(mxu_activation activation) {
  return activation == MXU_LEAKY_RELU                      ? 0.2f
         : activation == MXU_ELU || activation == MXU_CELU ? 1.0f
                                                           : 0.0f;
}

/* The activations over each row of the last axis, not elementwise: their
 * backward reads y. */
static inline int mxu_activation_rowwise(mxu_activation activation) {
  return activation == MXU_SOFTMAX || activation == MXU_LOG_SOFTMAX;
}

#define MXU_LAST_ACTIVATION MXU_LOG_SOFTMAX

typedef struct mxu_backend {
  const char *name;

  void (*op_free)(mxu_op *op);

  /* y = act(conv(x, w) + b). backward_* take dy with respect to the
   * pre-activation output: the layer undoes the fused activation first
   * with activation_backward. db may be NULL when there is no bias. */
  mxu_status (*conv2d_create)(const mxu_conv2d_desc *desc, mxu_op **out);
  void (*conv2d_forward)(mxu_op *op, const float *x, const float *w,
                         const float *b, float *y);
  void (*conv2d_backward_data)(mxu_op *op, const float *dy, const float *w,
                               float *dx);
  void (*conv2d_backward_weights)(mxu_op *op, const float *x, const float *dy,
                                  float *dw, float *db);
  /* The buffers given before hold new values: an op keeping copies made
   * of them by their addresses (within a step, from its forward on)
   * drops them. The transposed convolutions call it before a forward
   * that is their op's backward data, ConvLSTM before each step's
   * backward. */
  void (*conv2d_new_inputs)(mxu_op *op);

  /* y[n,out] = act(x[n,in] w[in,out] + b) */
  mxu_status (*dense_create)(const mxu_dense_desc *desc, mxu_op **out);
  void (*dense_forward)(mxu_op *op, const float *x, const float *w,
                        const float *b, float *y);
  void (*dense_backward_data)(mxu_op *op, const float *dy, const float *w,
                              float *dx);
  void (*dense_backward_weights)(mxu_op *op, const float *x, const float *dy,
                                 float *dw, float *db);

  /* Max pooling in training may record where the maxima were in a
   * workspace of pool2d_workspace_bytes (which the caller owns, in its
   * replica's arena); in inference workspace is NULL. Backward gets the
   * forward's x, y and workspace and may use whichever it needs. */
  mxu_status (*pool2d_create)(const mxu_pool2d_desc *desc, mxu_op **out);
  size_t (*pool2d_workspace_bytes)(mxu_op *op);
  void (*pool2d_forward)(mxu_op *op, int training, const float *x, float *y,
                         void *workspace);
  void (*pool2d_backward)(mxu_op *op, const float *x, const float *y,
                          const float *dy, const void *workspace, float *dx);

  /* Optional (NULL where a backend has none): a Conv2D and the max pooling
   * after it, with relu when asked, in one pass, so the conv output never
   * reaches memory: y = maxpool(conv(x, w) + b), then relu(y) if relu
   * (relu commutes with max, so it may have come before the pooling or
   * after). create fails with MXU_ERR_UNSUPPORTED for what the backend
   * does not fuse; the caller then runs the layers one by one. Training
   * forward records where each maximum was in a workspace of
   * conv_pool_workspace_bytes; backward takes dy of y and writes dw, db
   * (NULL without bias) and dx (NULL when not needed). */
  mxu_status (*conv_pool_create)(const mxu_conv2d_desc *conv,
                                 const mxu_pool2d_desc *pool, int relu,
                                 mxu_op **out);
  size_t (*conv_pool_workspace_bytes)(mxu_op *op);
  void (*conv_pool_forward)(mxu_op *op, int training, const float *x,
                            const float *w, const float *b, float *y,
                            void *workspace);
  void (*conv_pool_backward)(mxu_op *op, const float *x, const float *w,
                             const float *dy, const void *workspace, float *dw,
                             float *db, float *dx);
  /* Optional: conv_pool's op followed by a Flatten and a linear Dense of
   * few units, logits = flatten(y) kernel + bias, in the same pass, so
   * that neither the Dense's input nor its gradient goes through memory
   * between layers (Fashion-MNIST's whole network). The weights, and
   * their gradients, in the order MXU_CPD_*: the conv's kernel and bias,
   * the Dense's kernel [in, units] and bias; a bias NULL where the layer
   * has none. The workspace (conv_pool_workspace_bytes) keeps y for the
   * Dense's weight gradient; backward takes dlogits, dy of the logits. */
  mxu_status (*conv_pool_dense_create)(const mxu_conv2d_desc *conv,
                                       const mxu_pool2d_desc *pool, int relu,
                                       const mxu_dense_desc *dense,
                                       mxu_op **out);
  void (*conv_pool_dense_forward)(mxu_op *op, int training, const float *x,
                                  const float *const w[MXU_CPD_PARAMS],
                                  float *logits, void *workspace);
  void (*conv_pool_dense_backward)(mxu_op *op, const float *x,
                                   const float *const w[MXU_CPD_PARAMS],
                                   const float *dlogits, void *workspace,
                                   float *const dw[MXU_CPD_PARAMS], float *dx);
  /* Optional: whether the op for desc would compute in the backend's own
   * activation layout (see x_native), so that a neighbouring conv that
   * does too may hand it the tensor in that layout. */
  int (*conv2d_native)(const mxu_conv2d_desc *desc);
  /* Optional: whether the op for desc (bf16) would multiply in bfloat16,
   * so that it takes bf16 tensors (x_bf16 ... dy_bf16) at no cost: it
   * rounds x and dy to bf16 anyway. NULL: the backend has no bf16
   * tensors. */
  int (*conv2d_bf16_tensors)(const mxu_conv2d_desc *desc);
  /* Optional, with bf16 tensors: add (below) where the bits of `bf16`
   * say which of a (1), b (2) and y (4) are bf16, 2 bytes a value (y
   * rounded from the float32 sum); y may alias a. And its backward for
   * one input: dx = dy, or with the relu fused dy where y > 0; bits: y
   * (1), dy (2), dx (4) in bf16. */
  void (*add_bf16)(int64_t count, const void *a, const void *b, unsigned bf16,
                   int relu, void *y);
  void (*add_backward_bf16)(int64_t count, const void *y, const void *dy,
                            unsigned bf16, int relu, void *dx);
  /* Optional, with bf16 tensors: multiply (below) with add_bf16's bits
   * for a, b and y (Dropout's float32 mask on a bf16 tensor and its
   * gradient). */
  void (*multiply_bf16)(int64_t count, const void *a, const void *b,
                        unsigned bf16, void *y);
  /* Optional: a relu conv's backward weights and data (dx NULL when not
   * needed) from dy of the relu's output and the forward's y, where the
   * backend folds relu's backward into its own passes; returns 0, doing
   * nothing, for an op where it does not: the layer then undoes the relu
   * itself and calls the two above. */
  int (*conv2d_backward_relu)(mxu_op *op, const float *x, const float *w,
                              const float *y, const float *dy, float *dw,
                              float *db, float *dx);

  /* Training: normalise with the batch mean and biased variance, which are
   * written to mean and var. Inference: use the given mean and var.
   * Backward: the batch-statistics gradient, from the training forward's
   * mean and var (and its y, which a backend may read with relu or relu6
   * fused: may be NULL otherwise; beta may be read with any fused). */
  mxu_status (*batchnorm_create)(const mxu_batchnorm_desc *desc, mxu_op **out);
  void (*batchnorm_forward_training)(mxu_op *op, const float *x,
                                     const float *gamma, const float *beta,
                                     float *y, float *mean, float *var);
  void (*batchnorm_forward_inference)(mxu_op *op, const float *x,
                                      const float *gamma, const float *beta,
                                      const float *mean, const float *var,
                                      float *y);
  void (*batchnorm_backward)(mxu_op *op, const float *x, const float *y,
                             const float *dy, const float *gamma,
                             const float *beta, const float *mean,
                             const float *var, float *dx, float *dgamma,
                             float *dbeta);

  /* Backward gets the forward's input x and output y and reads whichever
   * the derivative is best computed from; x may be NULL for the fusable
   * activations (their derivatives are functions of y). dx may alias
   * dy. */
  mxu_status (*activation_create)(const mxu_activation_desc *desc,
                                  mxu_op **out);
  void (*activation_forward)(mxu_op *op, const float *x, float *y);
  void (*activation_backward)(mxu_op *op, const float *x, const float *y,
                              const float *dy, float *dx);

  /* Softmax fused with cross-entropy, from logits [n, k]. Targets are
   * either sparse labels or one-hot rows (the other pointer NULL). Writes
   * probs, each row's loss (-log p[target]) and dlogits = (p - t) * scale;
   * rows with mask[i] == 0 (mask may be NULL) get zero loss and gradient. */
  void (*softmax_cross_entropy)(int64_t n, int k, const float *logits,
                                const int32_t *labels, const float *onehot,
                                const float *mask, float scale, float *probs,
                                float *loss, float *dlogits);
  /* Cross-entropy on probabilities (a model without a final softmax): each
   * row is normalised to sum 1 and clipped to [1e-7, 1 - 1e-7] as Keras
   * does; dprobs is the gradient of loss*scale through that. */
  void (*cross_entropy)(int64_t n, int k, const float *probs,
                        const int32_t *labels, const float *onehot,
                        const float *mask, float scale, float *loss,
                        float *dprobs);

  /* y = a * b elementwise (dropout's mask, a Multiply of two tensors).
   * y may alias a or b. */
  void (*multiply)(int64_t count, const float *a, const float *b, float *y);
  /* y = x * scale + offset elementwise, rounded after each operation
   * (Rescaling). y may alias x. */
  void (*scale_shift)(int64_t count, const float *x, float scale, float offset,
                      float *y);
  /* y = a + b elementwise (the Add merge), relu'd where relu (the relu
   * that alone reads it, fused: NaN stays NaN). y may alias a. */
  void (*add)(int64_t count, const float *a, const float *b, int relu,
              float *y);
  /* Over n images of `pixels` pixels of c channels: y = x scaled by the
   * image's s[i][c] (squeeze-and-excitation's Multiply of (h, w, c) by
   * (1, 1, c)); its backward dx = dy s and ds[i][c] = the sum of dy x
   * over the image's pixels in order (either NULL: not wanted). */
  void (*scale_channels)(int64_t n, int64_t pixels, int c, const float *x,
                         const float *s, float *y);
  void (*scale_channels_backward)(int64_t n, int64_t pixels, int c,
                                  const float *x, const float *s,
                                  const float *dy, float *dx, float *ds);
  /* rows runs of width floats from src to dst, each strided by its own
   * stride (Concatenate's slabs, forward and backward). */
  void (*copy_rows)(int64_t rows, int64_t width, const float *src,
                    int64_t src_stride, float *dst, int64_t dst_stride);
  /* GlobalAveragePooling2D: y[i][c] = the mean of image i's pixels (summed
   * in order); its backward dx = dy / pixels at every pixel. */
  void (*channel_mean)(int64_t n, int64_t pixels, int c, const float *x,
                       float *y);
  void (*channel_mean_backward)(int64_t n, int64_t pixels, int c,
                                const float *dy, float *dx);

  /* Keras Adam, with the bias correction folded into lr_t:
   * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr_t m / (sqrt(v) + eps).
   */
  void (*adam_update)(int64_t count, float *w, const float *g, float *m,
                      float *v, float lr_t, float beta_1, float beta_2,
                      float epsilon);
  /* Keras SGD: v = momentum v - lr g; w += v (nesterov: w += momentum v -
   * lr g). velocity is unused when momentum is 0. */
  void (*sgd_update)(int64_t count, float *w, const float *g, float *velocity,
                     float lr, float momentum, int nesterov);
} mxu_backend;

const mxu_backend *mxu_backend_cpu_ref(void);
const mxu_backend *mxu_backend_cpu(void); /* oneDNN */
const mxu_backend *mxu_backend_get(mxu_backend_kind kind);

/* Keras' output size and padding split (the odd pixel of SAME goes to the
 * bottom/right). Returns 0 when the input is too small. */
int mxu_conv_output_size(int in, int kernel, int stride, mxu_padding padding,
                         int *pad_before, int *pad_after);

#endif
