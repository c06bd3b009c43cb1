/* mxu.h — the one public header of mxu, a Keras-style training engine in C11.
 * Everything the command line can do is reachable from here; nothing else
 * under src/ is part of the API. */
#ifndef MXU_H
#define MXU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

typedef enum mxu_status {
  MXU_OK = 0,
  MXU_ERR_ARG,         /* a bad argument: a batch size of 0, an unknown name */
  MXU_ERR_IO,          /* a file could not be opened, read or written */
  MXU_ERR_FORMAT,      /* a file is truncated or corrupt */
  MXU_ERR_SHAPE,       /* shapes that do not fit together */
  MXU_ERR_NOMEM,       /* an allocation failed */
  MXU_ERR_UNSUPPORTED, /* valid Keras, but not (yet) in mxu */
  MXU_ERR_NUMERIC,     /* training diverged: a NaN or infinite loss */
  MXU_ERR_BACKEND      /* the kernel library refused */
} mxu_status;

/* What the last failing call on this thread said, e.g.
 * "idx: train-images-idx3-ubyte.gz: offset 16: file ends after 1000 of
 * 47040000 pixel bytes". Never NULL. */
const char *mxu_errmsg(void);
const char *mxu_status_name(mxu_status status);

/* ---- tensors ----------------------------------------------------------- */

typedef enum mxu_dtype { MXU_FLOAT32 = 0, MXU_BFLOAT16 = 1 } mxu_dtype;

#define MXU_MAX_RANK 6

/* A shape without the batch dimension is how layers are described, as in
 * Keras' input_shape; the batch dimension is fixed at compile. */
typedef struct mxu_shape {
  int rank;
  int64_t dims[MXU_MAX_RANK];
} mxu_shape;

typedef struct mxu_tensor {
  mxu_dtype dtype;
  mxu_shape shape;
  void *data;
} mxu_tensor;

mxu_shape mxu_shape_make(int rank, const int64_t *dims);
int64_t mxu_shape_count(const mxu_shape *shape);
size_t mxu_dtype_size(mxu_dtype dtype);

/* ---- layers ------------------------------------------------------------ */

/* Keras' activations, as their names give them (a parameter takes Keras'
 * default for the name: leaky_relu's slope 0.2, elu's alpha 1). */
typedef enum mxu_activation {
  MXU_LINEAR = 0,
  MXU_RELU,
  MXU_SIGMOID,
  MXU_TANH,
  MXU_SOFTMAX,      /* over the last axis */
  MXU_RELU6,        /* min(max(x, 0), 6) */
  MXU_LEAKY_RELU,   /* x > 0 ? x : 0.2 x */
  MXU_ELU,          /* x > 0 ? x : e^x - 1 */
  MXU_SELU,         /* 1.0507 * (x > 0 ? x : 1.6733 (e^x - 1)) */
  MXU_GELU,         /* x * Phi(x), exact (Keras' default) */
  MXU_GELU_TANH,    /* gelu's tanh approximation (approximate=True) */
  MXU_SILU,         /* x * sigmoid(x), also named swish */
  MXU_SOFTPLUS,     /* log(1 + e^x) */
  MXU_SOFTSIGN,     /* x / (1 + |x|) */
  MXU_HARD_SIGMOID, /* Keras 3: relu6(x + 3) / 6 */
  /* tf.keras 2's hard_sigmoid, clip(0.2 x + 0.5, 0, 1): what the name means
   * in a file tf.keras wrote. */
  MXU_HARD_SIGMOID_TF2,
  MXU_HARD_SILU, /* x * relu6(x + 3) / 6, also named hard_swish */
  MXU_EXPONENTIAL,
  MXU_MISH, /* x * tanh(softplus(x)) */
  /* Keras 3's. */
  MXU_CELU,        /* elu's (alpha 1) */
  MXU_HARD_TANH,   /* min(max(x, -1), 1) */
  MXU_LOG_SIGMOID, /* -softplus(-x) */
  MXU_TANH_SHRINK, /* x - tanh(x) */
  MXU_SQUAREPLUS,  /* (x + sqrt(x^2 + 4)) / 2 */
  MXU_SPARSE_PLUS, /* 0, (x + 1)^2 / 4 or x: left of -1, inside, right of 1 */
  MXU_SPARSE_SIGMOID, /* 0, (x + 1) / 2 or 1: left of -1, inside, right of 1 */
  MXU_SOFT_SHRINK,    /* |x| > 0.5 ? x - 0.5 sign(x) : 0 */
  MXU_HARD_SHRINK,    /* |x| > 0.5 ? x : 0 */
  MXU_LOG_SOFTMAX     /* x - log(sum(e^x)) over the last axis */
} mxu_activation;

/* MXU_CAUSAL: Conv1D's, all the padding before the sequence, so an output
 * step reads no later input step (Keras' padding='causal'). */
typedef enum mxu_padding { MXU_VALID = 0, MXU_SAME, MXU_CAUSAL } mxu_padding;

/* Each config has a maker that fills in Keras' defaults; change fields
 * after it. A NULL name gets Keras' automatic one (conv2d, conv2d_1, ...). */
/* A Keras initializer. In a layer's config MXU_INIT_DEFAULT (0, what
 * zeroed configs hold) means the layer's own Keras default (glorot_uniform
 * kernels, zero biases, BatchNormalization's ones and zeros). Keras' named
 * initializers are variance scalings: glorot_* (1, fan_avg), he_* (2,
 * fan_in), lecun_* (1, fan_in), *_normal truncated, *_uniform uniform.
 * Fans are Keras': a kernel's inputs and outputs times its receptive
 * field. A seeded initializer draws the same values wherever it is used
 * (as Keras' do); an unseeded one from the compile seed and the layer. */
typedef enum mxu_init_kind {
  MXU_INIT_DEFAULT = 0,
  MXU_INIT_ZEROS,
  MXU_INIT_ONES,
  MXU_INIT_CONSTANT,
  MXU_INIT_RANDOM_NORMAL,
  MXU_INIT_RANDOM_UNIFORM,
  MXU_INIT_TRUNCATED_NORMAL, /* redrawn beyond 2 stddev, as TF does */
  MXU_INIT_VARIANCE_SCALING,
  MXU_INIT_ORTHOGONAL, /* QR of a normal draw, over the last axis */
  MXU_INIT_IDENTITY    /* 2-D weights: gain on the diagonal */
} mxu_init_kind;

typedef enum mxu_fan_mode {
  MXU_FAN_IN = 0,
  MXU_FAN_OUT,
  MXU_FAN_AVG
} mxu_fan_mode;

typedef enum mxu_init_distribution {
  MXU_TRUNCATED_NORMAL = 0, /* stddev sqrt(scale / fan) / 0.8796 */
  MXU_UNTRUNCATED_NORMAL,
  MXU_UNIFORM /* limit sqrt(3 scale / fan) */
} mxu_init_distribution;

typedef struct mxu_initializer {
  mxu_init_kind kind;
  float value;          /* constant */
  float mean, stddev;   /* random and truncated normal */
  float minval, maxval; /* random uniform */
  float scale;          /* variance scaling */
  mxu_fan_mode mode;
  mxu_init_distribution distribution;
  float gain; /* orthogonal, identity */
  int has_seed;
  int64_t seed;
  /* Keras' class, written back to model files ("HeNormal"); empty for the
   * kind's own class. */
  char class_name[32];
} mxu_initializer;

/* An initializer by Keras' name, class or alias ("he_normal", "HeNormal",
 * "truncated_normal", ...) with Keras' defaults; MXU_ERR_UNSUPPORTED
 * listing the names mxu knows. */
mxu_status mxu_initializer_from_name(const char *name, mxu_initializer *out);

/* Keras' L1, L2 and L1L2 weight regularizers: l1 sum|w| + l2 sum w^2 is
 * added to the loss once per batch (and to what fit and evaluate log, as
 * Keras logs it), its gradient to the weight's. Zeros: none. */
typedef struct mxu_regularizer {
  float l1, l2;
} mxu_regularizer;

/* Keras' weight constraints, applied after every optimizer update: with
 * norms taken over `axes` (Keras' axis, default 0; negative counts from
 * the end), max_norm scales w to at most max_value, unit_norm to 1,
 * min_max_norm to rate clip(norm, min, max) + (1 - rate) norm; non_neg
 * zeroes negative values. */
typedef enum mxu_constraint_kind {
  MXU_CONSTRAINT_NONE = 0,
  MXU_MAX_NORM,
  MXU_NON_NEG,
  MXU_UNIT_NORM,
  MXU_MIN_MAX_NORM
} mxu_constraint_kind;

typedef struct mxu_constraint {
  mxu_constraint_kind kind;
  float max_value, min_value, rate;
  int axes[MXU_MAX_RANK], axis_count;
} mxu_constraint;

/* What Keras lets a layer say of each of its weights. */
typedef struct mxu_weight_options {
  mxu_initializer initializer;
  mxu_regularizer regularizer;
  mxu_constraint constraint;
} mxu_weight_options;

/* groups: input and output channels split in that many groups, each
 * output reading its own group's inputs (the kernel is (kh, kw, in /
 * groups, filters)); dilation_rate spreads the kernel's taps apart (Keras
 * refuses it with strides > 1, and so does mxu). */
typedef struct mxu_conv2d_config {
  const char *name;
  int filters;
  int kernel_size[2];
  int strides[2];
  mxu_padding padding;
  mxu_activation activation;
  int use_bias;
  mxu_weight_options kernel, bias;
  int dilation_rate[2];
  int groups;
} mxu_conv2d_config;

/* DepthwiseConv2D: each input channel convolved with depth_multiplier
 * kernels of its own, output channel c * depth_multiplier + m; the
 * kernel is (kh, kw, in, depth_multiplier). */
typedef struct mxu_depthwise_conv2d_config {
  const char *name;
  int kernel_size[2];
  int strides[2];
  mxu_padding padding;
  int depth_multiplier;
  int dilation_rate[2];
  mxu_activation activation;
  int use_bias;
  mxu_weight_options depthwise, bias;
} mxu_depthwise_conv2d_config;

/* Conv2DTranspose: the transpose of a Conv2D (the gradient of its input),
 * the output strides times the input's size ('same'), or that plus
 * max(kernel - stride, 0) ('valid'); its kernel is (kh, kw, filters,
 * input channels) as Keras keeps it. */
typedef mxu_conv2d_config mxu_conv2d_transpose_config;

/* SeparableConv2D: a DepthwiseConv2D (no bias, no activation) then a 1x1
 * Conv2D to `filters` channels with the bias and the activation; its
 * kernels are depthwise (kh, kw, in, depth_multiplier) and pointwise
 * (1, 1, in * depth_multiplier, filters). */
typedef struct mxu_separable_conv2d_config {
  const char *name;
  int filters;
  int kernel_size[2];
  int strides[2];
  mxu_padding padding;
  int depth_multiplier;
  int dilation_rate[2];
  mxu_activation activation;
  int use_bias;
  mxu_weight_options depthwise, pointwise, bias;
} mxu_separable_conv2d_config;

typedef struct mxu_pool2d_config {
  const char *name;
  int pool_size[2];
  int strides[2]; /* Keras: strides=None means pool_size */
  mxu_padding padding;
} mxu_pool2d_config;

typedef struct mxu_dense_config {
  const char *name;
  int units;
  mxu_activation activation;
  int use_bias;
  mxu_weight_options kernel, bias;
  /* Keras' EinsumDense of an equation Dense computes ("abc,cd->abd",
   * "abc,cde->abde", "...b,bc->...c"): the input's last `contracted` axes
   * against the kernel's first, giving its other axes, new_axes, as the
   * output's last (units: their product; the kernel (contracted dims...,
   * new_axes...), the bias new_axes when use_bias). contracted 0: Dense. */
  int contracted;
  mxu_shape new_axes;
  /* As Keras' config gives them, to write back: the equation, bias_axes
   * ("" for none) and output_shape (0 for a null dim). */
  char equation[48], bias_axes[8];
  mxu_shape output_shape;
} mxu_dense_config;

typedef struct mxu_batchnorm_config {
  const char *name;
  float momentum;
  float epsilon;
  int center;
  int scale;
  /* Keras' synchronized: batch statistics over the global batch (every
   * replica) instead of each replica's slice. */
  int synchronized;
  mxu_weight_options beta, gamma;
  mxu_initializer moving_mean_initializer, moving_variance_initializer;
} mxu_batchnorm_config;

/* Conv3D over volumes (depth, height, width, channels): as Conv2D, with
 * a third size of each; its kernel (kd, kh, kw, in / groups, filters). */
typedef struct mxu_conv3d_config {
  const char *name;
  int filters;
  int kernel_size[3];
  int strides[3];
  mxu_padding padding; /* valid or same */
  mxu_activation activation;
  int use_bias;
  mxu_weight_options kernel, bias;
  int dilation_rate[3];
  int groups;
} mxu_conv3d_config;

/* ConvLSTM2D over (steps, height, width, channels): an LSTM whose gates
 * are convolutions, of the step's image (kernel (kh, kw, channels, 4
 * filters), strides, valid or same padding, dilation) and of the last h
 * (recurrent_kernel (kh, kw, filters, 4 filters), same padding); gates
 * i, f, c, o along the last axis as Keras'. Outputs (out_h, out_w,
 * filters), or every step's with return_sequences. */
typedef struct mxu_conv_lstm2d_config {
  const char *name;
  int filters;
  int kernel_size[2];
  int strides[2];
  mxu_padding padding;
  int dilation_rate[2];
  mxu_activation activation, recurrent_activation;
  int use_bias, unit_forget_bias, return_sequences, go_backwards;
  mxu_weight_options kernel, recurrent, bias;
} mxu_conv_lstm2d_config;

/* MaxPooling3D and AveragePooling3D (the average over in-bounds cells). */
typedef struct mxu_pool3d_config {
  const char *name;
  int pool_size[3];
  int strides[3];
  mxu_padding padding;
} mxu_pool3d_config;

/* ZeroPadding3D (zeros added) and Cropping3D (cells cut): margins[a][0]
 * before and margins[a][1] after along depth, height and width (a = 0,
 * 1, 2). */
typedef struct mxu_margins3d_config {
  const char *name;
  int margins[3][2];
} mxu_margins3d_config;

/* UpSampling3D: each cell repeated size[a] times along axis a. */
typedef struct mxu_upsampling3d_config {
  const char *name;
  int size[3];
} mxu_upsampling3d_config;

/* Keras 3's (and PyTorch's) adaptive poolings over (steps, channels),
 * images or volumes: output_size[a] cells along spatial axis a (one entry
 * per spatial axis of the input, the rest 0), cell i the max or mean of
 * inputs [floor(i L / out), ceil((i + 1) L / out)) of that axis's L, so
 * neighbouring cells may share an input. AdaptiveAveragePooling1D..3D and
 * AdaptiveMaxPooling1D..3D. */
typedef struct mxu_adaptive_pool_config {
  const char *name;
  int output_size[3];
} mxu_adaptive_pool_config;

/* GlobalAveragePooling2D / GlobalMaxPooling2D: (h, w, c) -> (c), or
 * (1, 1, c) with keepdims. */
typedef struct mxu_global_pool2d_config {
  const char *name;
  int is_max;
  int keepdims;
} mxu_global_pool2d_config;

/* ZeroPadding2D: rows of zeros above and below, columns left and right. */
typedef struct mxu_zero_padding2d_config {
  const char *name;
  int top, bottom, left, right;
} mxu_zero_padding2d_config;

/* Keras' ReLU layer: x >= max_value -> max_value; threshold <= x <
 * max_value -> x; x < threshold -> negative_slope * (x - threshold).
 * max_value < 0 means none (Keras' None). */
typedef struct mxu_relu_config {
  const char *name;
  float max_value;
  float negative_slope;
  float threshold;
} mxu_relu_config;

/* LayerNormalization (groups 0: each position's channels normalised
 * alone) and GroupNormalization (groups > 0: each sample's channels split
 * in that many groups, each normalised over all positions): (x - mean) /
 * sqrt(var + epsilon), then * gamma + beta per channel (scale, center).
 * rms_scaling (LayerNormalization only, Keras 3's): x / sqrt(var +
 * epsilon) * gamma, x not centred and no beta. */
typedef struct mxu_layer_norm_config {
  const char *name;
  int groups;
  float epsilon;
  int center, scale, rms_scaling;
  mxu_weight_options beta, gamma;
} mxu_layer_norm_config;

mxu_layer_norm_config mxu_layer_norm_defaults(int groups);

/* PReLU: x > 0 ? x : alpha * x with alpha learned, one per value of the
 * input (without the batch) except along shared_axes (Keras' numbering,
 * the batch being 0), which share one. */
typedef struct mxu_prelu_config {
  const char *name;
  int shared_axes[MXU_MAX_RANK];
  int shared_axis_count;
  mxu_weight_options alpha;
} mxu_prelu_config;

/* How points outside the image are filled, as scipy.ndimage modes with
 * order-1 interpolation (what Keras passes through):
 *   nearest   aaaa|abcd|dddd
 *   constant  kkkk|abcd|kkkk  (k = cval; no blending across the border)
 *   reflect   dcba|abcd|dcba  (half-sample symmetric)
 *   wrap      scipy's legacy 'wrap', period n-1 (first and last pixel
 *             overlap): a one-pixel shift brings in the second-to-last
 *             column, not the last one as Keras' docstring draws it. */
typedef enum mxu_fill_mode {
  MXU_FILL_NEAREST = 0,
  MXU_FILL_CONSTANT,
  MXU_FILL_REFLECT,
  MXU_FILL_WRAP
} mxu_fill_mode;

/* Keras' augmentation layers, active in training only (inference passes
 * images through): each image gets its own draw from mxu's counter-based
 * generator, keyed by (seed, epoch, step, replica, layer, sample), so runs
 * stay bit-reproducible. Ranges are Keras' [lower, upper]. */
typedef enum mxu_random_kind {
  MXU_RANDOM_FLIP = 0,
  MXU_RANDOM_TRANSLATION,
  MXU_RANDOM_ROTATION,
  MXU_RANDOM_ZOOM,
  MXU_RANDOM_CONTRAST,
  MXU_RANDOM_CROP,
  MXU_RANDOM_BRIGHTNESS,
  MXU_RANDOM_GRAYSCALE,
  MXU_RANDOM_INVERT,
  MXU_SOLARIZATION,
  MXU_RANDOM_POSTERIZATION,
  MXU_RANDOM_SHEAR,
  MXU_RANDOM_COLOR_DEGENERATION,
  MXU_RANDOM_SHARPNESS
} mxu_random_kind;

typedef struct mxu_random_config {
  const char *name;
  mxu_random_kind kind;
  int horizontal, vertical; /* RandomFlip: each with probability 1/2 */
  /* RandomTranslation: fractions of the height and width (positive moves
   * the image down, right); RandomZoom: a positive value zooms out by that
   * fraction, and without a width range (has_width 0) the width zooms as
   * the height does; RandomShear (Keras 3's): y_factor and x_factor, each
   * image's shears s_y and s_x drawn from them, both negated with
   * probability 1/2, and output pixel (row, col) read from (row + s_y col,
   * col + s_x row), sheared about the top-left corner as Keras'. */
  float height[2], width[2];
  int has_width;
  /* RandomRotation: turns (positive: counter-clockwise); RandomContrast:
   * (a, b), each image's contrast factor c in [1 - a, 1 + b], its values
   * (x - mean) * c + mean per channel, clipped to value_range;
   * RandomBrightness: [lower, upper] in [-1, 1], each image's values
   * plus a delta drawn from it times value_range's width, clipped to
   * value_range. RandomGrayscale: factor[1], the probability an image
   * becomes its luma (0.2989 R + 0.587 G + 0.114 B, Keras'), RGB images
   * only; RandomInvert: each image's probability drawn from factor, an
   * inverted image value_range[1] - x; Solarization: factor the addition's
   * range, threshold the threshold's, each [lower, upper * 255] (Keras'
   * draws) on the image taken to [0, 255]: x + addition clipped to [0, 255],
   * then 255 - that from the threshold up; RandomPosterization: factor the
   * bits kept, drawn from [lower, upper) (lower where equal), on the image
   * taken to [0, 255] (no gradient through the rounding);
   * RandomColorDegeneration: each image's f drawn from factor, in [-1, 1],
   * its values x + f (luma - x) clipped to value_range (RGB images);
   * RandomSharpness: each image's f drawn from factor, in [0, 1], s = 2 f,
   * its values s x + (1 - s) smooth(x) clipped to value_range, smooth
   * Keras' 3x3 filter (5/13 in the middle, 1/13 around, zeros past the
   * edges) of each channel. */
  float factor[2];
  float value_range[2];
  float threshold[2];
  /* RandomCrop: a random height x width window in training; in inference
   * Keras' smart resize (the largest centred window of that aspect ratio,
   * resized to it). */
  int height_px, width_px;
  mxu_fill_mode fill_mode; /* Keras' default: reflect */
  float fill_value;
} mxu_random_config;

mxu_random_config mxu_random_defaults(mxu_random_kind kind);

/* Rescaling: x * scale + offset. */
typedef struct mxu_rescaling_config {
  const char *name;
  float scale, offset;
} mxu_rescaling_config;

/* Normalization over the last axis: (x - mean) / max(sqrt(variance),
 * 1e-7), or with invert x * max(sqrt(variance), 1e-7) + mean.
 * given 0: mean, variance and count are the layer's non-trainable
 * weights, as Keras' adapt() leaves them: zeros, ones and 0 until a
 * weights file gives them. given > 0: Keras' mean and variance passed to
 * the layer (keras.applications' EfficientNetV2 and ConvNeXt do), float32
 * constants and no weights: mean[0] and variance[0] for every channel
 * (given 1), or one per channel of the last axis (given = channels), at
 * most MXU_NORMALIZATION_VALUES; finite, variance >= 0. */
#define MXU_NORMALIZATION_VALUES 64
typedef struct mxu_normalization_config {
  const char *name;
  int invert;
  int given;
  float mean[MXU_NORMALIZATION_VALUES];
  float variance[MXU_NORMALIZATION_VALUES];
} mxu_normalization_config;

/* keras.applications ConvNeXt's own LayerScale: x * gamma along the last
 * axis, gamma a trainable weight of projection_dim values (the input's
 * last dimension) that starts at init_values. */
typedef struct mxu_layer_scale_config {
  const char *name;
  float init_values;
  int projection_dim;
} mxu_layer_scale_config;

/* ---- sequences: (steps, channels) ---------------------------------------
 * SimpleRNN, LSTM and GRU over (steps, features), from zero states: the
 * last step's output (units), or every step's (steps, units) with
 * return_sequences; go_backwards reads the steps last to first and
 * returns them in that order, as Keras. Weights kernel (features, g *
 * units), recurrent_kernel (units, g * units) and bias (g * units) with g
 * gates: 1, LSTM's 4 (i, f, c, o), GRU's 3 (z, r, h); GRU's bias is (2, 3
 * * units), its input and recurrent halves (Keras' reset_after; but see
 * reset_before). Defaults:
 * tanh, recurrent sigmoid, glorot_uniform kernel, orthogonal recurrent
 * kernel, zero bias but LSTM's forget block of ones (unit_forget_bias). */
typedef enum mxu_rnn_kind {
  MXU_SIMPLE_RNN = 0,
  MXU_LSTM,
  MXU_GRU
} mxu_rnn_kind;

typedef struct mxu_rnn_config {
  const char *name;
  mxu_rnn_kind kind;
  int units;
  mxu_activation activation, recurrent_activation;
  int use_bias, return_sequences, go_backwards;
  int unit_forget_bias; /* LSTM */
  mxu_weight_options kernel, recurrent, bias;
  /* Keras' dropout: in training, each sample's input features dropped
   * with this rate, one mask for every step and gate (Keras' with
   * recurrent_dropout 0), each direction of a Bidirectional its own.
   * recurrent_dropout drops the previous h's units as well: then, as
   * Keras' implementation 1, each gate has masks of its own, for the
   * inputs and for h (LSTM's cell state and GRU's z h_prev stay
   * unmasked). */
  float dropout, recurrent_dropout;
  /* With an Embedding's mask: a skipped step's output is zeros, not the
   * step before's (Keras' zero_output_for_mask; a Bidirectional's
   * sequences always). */
  int zero_output_for_mask;
  /* Keras' return_state: the layer's outputs are its output, then its
   * final states (h, and LSTM's c; a Bidirectional's forward ones, then
   * its backward ones), taken apart with mxu_output_part. */
  int return_state;
  /* Keras' RNN(LSTMCell(...)) (GRUCell, SimpleRNNCell): the same layer,
   * named and written as an RNN of that cell. */
  int of_cell;
  /* GRU: the reset gate scales h before the recurrent product, h_cand =
   * act(x W_h + b_h + (r * h) U_h), with one bias of 3 * units (Keras'
   * reset_after false, Keras 2.2's default). 0: Keras' default since,
   * r * (h U_h + b_h). */
  int reset_before;
} mxu_rnn_config;

/* Conv1D: a Conv2D over steps; its kernel is (kernel_size, channels /
 * groups, filters). padding: valid, same or causal. */
typedef struct mxu_conv1d_config {
  const char *name;
  int filters;
  int kernel_size, strides, dilation_rate, groups;
  mxu_padding padding;
  mxu_activation activation;
  int use_bias;
  mxu_weight_options kernel, bias;
} mxu_conv1d_config;

/* MaxPooling1D / AveragePooling1D over steps (valid or same). */
typedef struct mxu_pool1d_config {
  const char *name;
  int pool_size;
  int strides; /* Keras: strides=None means pool_size */
  mxu_padding padding;
} mxu_pool1d_config;

/* Embedding: an input of token ids (any shape) -> a row of `embeddings`
 * (input_dim, output_dim) per id, the shape gaining an axis of
 * output_dim. fit, evaluate and predict refuse data with an id outside
 * 0..input_dim-1 for an Embedding reading the model input, naming the
 * sample (TensorFlow's CPU kernel stops on one too); inside the model such
 * an id gives a row of zeros and no gradient (as TensorFlow's GPU
 * kernel). */
typedef struct mxu_embedding_config {
  const char *name;
  int input_dim, output_dim;
  mxu_weight_options embeddings;
  /* Keras' mask_zero: id 0 is padding. The mask (id != 0, per step of
   * ids of shape (steps)) goes along with the output through the layers
   * Keras lets it pass (Dense, Dropout, the activations and
   * normalizations, merges, a recurrent layer returning sequences) to
   * those that use it: SimpleRNN, LSTM, GRU and Bidirectional carry their
   * state over a masked step (its output the step before's),
   * GlobalAveragePooling1D averages the unmasked steps, and
   * MultiHeadAttention attends between unmasked positions (a masked
   * query's row of probabilities is zeros, as Keras 3's). Other layers
   * drop it, as Keras' do. Reaching a model output of (steps, values),
   * it masks the loss and metric, as Keras' (mxu_loss_positions). */
  int mask_zero;
} mxu_embedding_config;

/* MultiHeadAttention: every position of the query (Tq, query_dim)
 * attends over the positions of the value (Tv, value_dim), through the key
 * (Tv, key_input_dim; the value when none is given), as Keras' layer: per
 * head, softmax(Q K^T / sqrt(key_dim)) V of the projections Q = query
 * Wq + bq, K, V, the heads' results projected to output_dim (0: the
 * query's last dim) by attention_output. Samples of higher rank (h, w,
 * features) attend over all their positions (Keras' default
 * attention_axes). Weights query/kernel (query_dim, num_heads, key_dim),
 * query/bias (num_heads, key_dim), key/..., value/... (value_dim, 0:
 * key_dim), attention_output/kernel (num_heads, value_dim, output_dim) and
 * its bias (output_dim). causal: Keras' use_causal_mask, position i of
 * the query attends to positions 0..i only. dropout: the attention
 * probabilities', in training. tf2_fans: the kernels' initial scale uses
 * tf.keras 2's fans of their 3-D shapes, as its files were made; else
 * Keras 3's (fan in the projected features, fan out the heads' values). */
typedef struct mxu_attention_config {
  const char *name;
  int num_heads, key_dim, value_dim, output_dim;
  int use_bias, causal;
  float dropout;
  mxu_weight_options kernel, bias;
  int tf2_fans;
  /* Keras 3's GroupQueryAttention when > 0: the key's and value's heads
   * (num_key_value_heads, dividing num_heads, its num_query_heads), each
   * shared by num_heads / kv_heads query heads; key_dim its head_dim,
   * value_dim and output_dim 0. 0: MultiHeadAttention. */
  int kv_heads;
} mxu_attention_config;

/* Keras' Attention (Luong's: score_mode "dot", q . k, times a scalar
 * `scale` weight with use_scale; or "concat", concat_score_weight *
 * sum(tanh(scale (q + k)))) and AdditiveAttention (Bahdanau's, additive:
 * sum(scale * tanh(q + k)), scale a weight of the query's width with
 * use_scale): over query (tq, dim), value (tv, dv) and key (tv, dim; the
 * value when none), the softmax of the scores over the value's positions
 * (the first i + 1 with causal, Keras' use_causal_mask) weighs the value:
 * (tq, dv). dropout drops the weights in training. */
typedef struct mxu_dense_attention_config {
  const char *name;
  int additive, concat, use_scale, causal;
  float dropout;
} mxu_dense_attention_config;

/* UpSampling2D: each image size[0] times taller and size[1] times wider,
 * by repeating pixels (nearest) or by TensorFlow's bilinear resize (half-
 * pixel centres). */
typedef struct mxu_upsampling2d_config {
  const char *name;
  int size[2];
  int bilinear;
} mxu_upsampling2d_config;

/* Resizing (bilinear, TensorFlow's half-pixel resize, or nearest) and
 * CenterCrop (the centre window; bilinear unused): images to height x
 * width. */
typedef struct mxu_resize_config {
  const char *name;
  int height, width;
  int bilinear;
} mxu_resize_config;

/* Cropping2D: rows off the top and bottom, columns off the left and
 * right (the margins ZeroPadding2D would add). */
typedef mxu_zero_padding2d_config mxu_cropping2d_config;

/* Permute: output axis i is input axis dims[i], axes counted from 1 (the
 * batch is 0 and stays), as Keras' dims. */
typedef struct mxu_permute_config {
  const char *name;
  int dims[MXU_MAX_RANK];
  int rank;
} mxu_permute_config;

/* Reshape: the target shape without the batch; one dimension may be -1,
 * inferred from the others as Keras does. */
typedef struct mxu_reshape_config {
  const char *name;
  mxu_shape target;
} mxu_reshape_config;

/* The merge layers: elementwise over inputs of one shape, or Concatenate
 * along an axis. */
typedef enum mxu_merge_kind {
  MXU_MERGE_ADD = 0,
  MXU_MERGE_SUBTRACT, /* exactly two inputs: a - b */
  MXU_MERGE_MULTIPLY,
  MXU_MERGE_AVERAGE,
  MXU_MERGE_MAXIMUM,
  MXU_MERGE_MINIMUM,
  MXU_MERGE_CONCATENATE
} mxu_merge_kind;

mxu_conv2d_config mxu_conv2d_defaults(int filters, int kernel_h, int kernel_w);
mxu_relu_config mxu_relu_defaults(void);
mxu_depthwise_conv2d_config mxu_depthwise_conv2d_defaults(int kernel_h,
                                                          int kernel_w);
mxu_separable_conv2d_config
mxu_separable_conv2d_defaults(int filters, int kernel_h, int kernel_w);
mxu_pool2d_config mxu_pool2d_defaults(int pool_h, int pool_w);
mxu_conv1d_config mxu_conv1d_defaults(int filters, int kernel_size);
mxu_pool1d_config mxu_pool1d_defaults(int pool_size);
mxu_conv3d_config mxu_conv3d_defaults(int filters, int kernel_d, int kernel_h,
                                      int kernel_w);
/* Keras 3's: tanh, sigmoid, unit_forget_bias, valid, strides 1. */
mxu_conv_lstm2d_config mxu_conv_lstm2d_defaults(int filters, int kernel_h,
                                                int kernel_w);
mxu_pool3d_config mxu_pool3d_defaults(int pool_size); /* its strides too */
mxu_rnn_config mxu_rnn_defaults(mxu_rnn_kind kind, int units);
mxu_dense_config mxu_dense_defaults(int units);
mxu_attention_config mxu_attention_defaults(int num_heads, int key_dim);
mxu_batchnorm_config mxu_batchnorm_defaults(void);

/* ---- model ------------------------------------------------------------- */

typedef struct mxu_model mxu_model;

/* A Keras Sequential model. Layers are added in order; the first must be
 * the input. */
mxu_model *mxu_sequential(const char *name);
void mxu_model_free(mxu_model *model);

mxu_status mxu_add_input(mxu_model *model, const char *name, mxu_shape shape);
mxu_status mxu_add_conv2d(mxu_model *model, const mxu_conv2d_config *config);
mxu_status mxu_add_depthwise_conv2d(mxu_model *model,
                                    const mxu_depthwise_conv2d_config *config);
mxu_status mxu_add_max_pooling2d(mxu_model *model,
                                 const mxu_pool2d_config *config);
mxu_status mxu_add_average_pooling2d(mxu_model *model,
                                     const mxu_pool2d_config *config);
mxu_status mxu_add_activation(mxu_model *model, const char *name,
                              mxu_activation activation);
mxu_status mxu_add_flatten(mxu_model *model, const char *name);
mxu_status mxu_add_dense(mxu_model *model, const mxu_dense_config *config);
mxu_status mxu_add_dropout(mxu_model *model, const char *name, float rate);
mxu_status mxu_add_batch_normalization(mxu_model *model,
                                       const mxu_batchnorm_config *config);

/* ---- functional models --------------------------------------------------
 * Keras' Functional API: a model is a graph of layers applied to tensors.
 * Each mxu_apply_* adds one layer applied to the given tensors and returns
 * the tensor it outputs (an id >= 0), or -1 with mxu_errmsg() saying why;
 * a -1 passed in is returned again with its message kept, so a whole graph
 * can be built and checked once at the end. mxu_model_outputs closes it.
 *
 *   mxu_model *m = mxu_functional("resnet");
 *   mxu_tensor_id x = mxu_input(m, "image", shape);
 *   mxu_tensor_id y = mxu_apply_conv2d(m, &conv, x);
 *   y = mxu_apply_batch_normalization(m, &bn, y);
 *   y = mxu_add(m, NULL, x, y);                  (a residual connection)
 *   if (mxu_model_outputs(m, &y, 1) != MXU_OK) ... */
typedef int mxu_tensor_id;

mxu_model *mxu_functional(const char *name);
/* Keras' TimeDistributed: while on, each layer applied (or added) next
 * runs on every step of its (steps, ...) input: Conv2D, DepthwiseConv2D,
 * SeparableConv2D, the poolings, Flatten and their 1-D kinds each step's
 * image, the layers that compute every step alike (Dense, the
 * activations, Dropout, BatchNormalization, ...) as they are; others are
 * refused. The files mxu writes wrap each in a TimeDistributed. */
mxu_status mxu_time_distributed(mxu_model *model, int on);
mxu_tensor_id mxu_input(mxu_model *model, const char *name, mxu_shape shape);
mxu_tensor_id mxu_apply_conv2d(mxu_model *model,
                               const mxu_conv2d_config *config,
                               mxu_tensor_id x);
mxu_tensor_id mxu_apply_max_pooling2d(mxu_model *model,
                                      const mxu_pool2d_config *config,
                                      mxu_tensor_id x);
mxu_tensor_id mxu_apply_average_pooling2d(mxu_model *model,
                                          const mxu_pool2d_config *config,
                                          mxu_tensor_id x);
mxu_tensor_id mxu_apply_activation(mxu_model *model, const char *name,
                                   mxu_activation activation, mxu_tensor_id x);
mxu_tensor_id mxu_apply_flatten(mxu_model *model, const char *name,
                                mxu_tensor_id x);
mxu_tensor_id mxu_apply_dense(mxu_model *model, const mxu_dense_config *config,
                              mxu_tensor_id x);
/* EinsumDense: config->contracted and new_axes set (see mxu_dense_config). */
mxu_tensor_id mxu_apply_einsum_dense(mxu_model *model,
                                     const mxu_dense_config *config,
                                     mxu_tensor_id x);
mxu_tensor_id mxu_apply_dropout(mxu_model *model, const char *name, float rate,
                                mxu_tensor_id x);
/* Dropout with Keras' noise_shape, without its batch dimension: a dim of 1
 * draws one value for the whole axis, 0 (Keras' None) one per value.
 * kind: 0, Dropout; MXU_SPATIAL_2D, Keras' SpatialDropout2D, whose
 * noise_shape is (1, 1, channels); MXU_SPATIAL_1D, SpatialDropout1D's
 * (1, channels) over (steps, channels); MXU_SPATIAL_3D, SpatialDropout3D's
 * (1, 1, 1, channels); MXU_ALPHA_DROPOUT, AlphaDropout, which sets dropped
 * values to SELU's saturation and keeps the mean and variance. */
enum {
  MXU_SPATIAL_2D = 1,
  MXU_SPATIAL_1D = 2,
  MXU_SPATIAL_3D = 3,
  MXU_ALPHA_DROPOUT = 4
};
mxu_tensor_id mxu_apply_dropout_noise(mxu_model *model, const char *name,
                                      float rate, mxu_shape noise_shape,
                                      int kind, mxu_tensor_id x);
mxu_tensor_id mxu_apply_batch_normalization(mxu_model *model,
                                            const mxu_batchnorm_config *config,
                                            mxu_tensor_id x);
mxu_tensor_id mxu_apply_global_pooling2d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x);
mxu_tensor_id mxu_apply_zero_padding2d(mxu_model *model,
                                       const mxu_zero_padding2d_config *config,
                                       mxu_tensor_id x);
/* The volume layers, of (depth, height, width, channels): Conv3D,
 * MaxPooling3D, AveragePooling3D, GlobalAveragePooling3D /
 * GlobalMaxPooling3D ((1, 1, 1, c) with keepdims), ZeroPadding3D,
 * Cropping3D and UpSampling3D. */
mxu_tensor_id mxu_apply_conv3d(mxu_model *model,
                               const mxu_conv3d_config *config,
                               mxu_tensor_id x);
/* Conv3DTranspose: the transpose of a Conv3D, sizes as Conv2DTranspose's;
 * its kernel (kd, kh, kw, filters, in), groups 1. */
mxu_tensor_id mxu_apply_conv3d_transpose(mxu_model *model,
                                         const mxu_conv3d_config *config,
                                         mxu_tensor_id x);
mxu_tensor_id mxu_apply_conv_lstm2d(mxu_model *model,
                                    const mxu_conv_lstm2d_config *config,
                                    mxu_tensor_id x);
/* ConvLSTM1D over (steps, width, channels): the 2-D config with the 1 x n
 * window (kernel_size, strides and dilation_rate {1, n}); its kernels
 * (n, channels, 4 filters) and (n, filters, 4 filters), as Keras'. */
mxu_tensor_id mxu_apply_conv_lstm1d(mxu_model *model,
                                    const mxu_conv_lstm2d_config *config,
                                    mxu_tensor_id x);
mxu_tensor_id mxu_apply_max_pooling3d(mxu_model *model,
                                      const mxu_pool3d_config *config,
                                      mxu_tensor_id x);
mxu_tensor_id mxu_apply_average_pooling3d(mxu_model *model,
                                          const mxu_pool3d_config *config,
                                          mxu_tensor_id x);
mxu_tensor_id mxu_apply_global_pooling3d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x);
mxu_tensor_id mxu_apply_zero_padding3d(mxu_model *model,
                                       const mxu_margins3d_config *config,
                                       mxu_tensor_id x);
mxu_tensor_id mxu_apply_cropping3d(mxu_model *model,
                                   const mxu_margins3d_config *config,
                                   mxu_tensor_id x);
mxu_tensor_id mxu_apply_adaptive_average_pooling(
    mxu_model *model, const mxu_adaptive_pool_config *config, mxu_tensor_id x);
mxu_tensor_id mxu_apply_adaptive_max_pooling(
    mxu_model *model, const mxu_adaptive_pool_config *config, mxu_tensor_id x);
mxu_tensor_id mxu_apply_upsampling3d(mxu_model *model,
                                     const mxu_upsampling3d_config *config,
                                     mxu_tensor_id x);
mxu_tensor_id
mxu_apply_depthwise_conv2d(mxu_model *model,
                           const mxu_depthwise_conv2d_config *config,
                           mxu_tensor_id x);
/* DepthwiseConv1D and SeparableConv1D over (steps, channels): the 2-D
 * config with the 1 x n window (kernel_size, strides and dilation_rate
 * {1, n}); kernels (n, channels, depth_multiplier) and (1, channels *
 * depth_multiplier, filters), as Keras'. */
mxu_tensor_id
mxu_apply_depthwise_conv1d(mxu_model *model,
                           const mxu_depthwise_conv2d_config *config,
                           mxu_tensor_id x);
mxu_tensor_id
mxu_apply_separable_conv1d(mxu_model *model,
                           const mxu_separable_conv2d_config *config,
                           mxu_tensor_id x);
/* Keras' LeakyReLU (its negative_slope; Keras' default 0.3), ELU (alpha;
 * default 1) and Softmax (over the last axis) layers. */
mxu_tensor_id mxu_apply_leaky_relu(mxu_model *model, const char *name,
                                   float negative_slope, mxu_tensor_id x);
mxu_tensor_id mxu_apply_elu(mxu_model *model, const char *name, float alpha,
                            mxu_tensor_id x);
mxu_tensor_id mxu_apply_softmax(mxu_model *model, const char *name,
                                mxu_tensor_id x);
mxu_tensor_id mxu_apply_prelu(mxu_model *model, const mxu_prelu_config *config,
                              mxu_tensor_id x);
mxu_tensor_id mxu_apply_random(mxu_model *model,
                               const mxu_random_config *config,
                               mxu_tensor_id x);
/* In training only: GaussianNoise adds N(0, stddev) to every value,
 * GaussianDropout multiplies it by N(1, sqrt(rate / (1 - rate))), drawn
 * as dropout's masks are. */
/* ActivityRegularization: the identity, whose output's l1 sum(|y|) + l2
 * sum(y^2), divided by the batch, joins the loss (as any layer's Keras
 * activity_regularizer, which model files may also give). */
mxu_tensor_id mxu_apply_activity_regularization(mxu_model *model,
                                                const char *name, float l1,
                                                float l2, mxu_tensor_id x);
/* Identity: the input as it is (Keras' placeholder layer). */
mxu_tensor_id mxu_apply_identity(mxu_model *model, const char *name,
                                 mxu_tensor_id x);
mxu_tensor_id mxu_apply_gaussian_noise(mxu_model *model, const char *name,
                                       float stddev, mxu_tensor_id x);
mxu_tensor_id mxu_apply_gaussian_dropout(mxu_model *model, const char *name,
                                         float rate, mxu_tensor_id x);
/* UnitNormalization over the last axis: x / sqrt(max(sum(x^2), 1e-12)). */
mxu_tensor_id mxu_apply_unit_normalization(mxu_model *model, const char *name,
                                           mxu_tensor_id x);
mxu_tensor_id mxu_apply_layer_normalization(mxu_model *model,
                                            const mxu_layer_norm_config *config,
                                            mxu_tensor_id x);
/* RMSNormalization over the last axis: x / sqrt(mean(x^2) + epsilon) *
 * scale, one scale per channel (Keras 3's default epsilon 1e-6). */
mxu_tensor_id mxu_apply_rms_normalization(mxu_model *model, const char *name,
                                          float epsilon, mxu_tensor_id x);
mxu_tensor_id mxu_apply_upsampling2d(mxu_model *model,
                                     const mxu_upsampling2d_config *config,
                                     mxu_tensor_id x);
mxu_tensor_id mxu_apply_resizing(mxu_model *model,
                                 const mxu_resize_config *config,
                                 mxu_tensor_id x);
mxu_tensor_id mxu_apply_center_crop(mxu_model *model,
                                    const mxu_resize_config *config,
                                    mxu_tensor_id x);
mxu_tensor_id mxu_apply_cropping2d(mxu_model *model,
                                   const mxu_cropping2d_config *config,
                                   mxu_tensor_id x);
mxu_tensor_id mxu_apply_permute(mxu_model *model,
                                const mxu_permute_config *config,
                                mxu_tensor_id x);
mxu_tensor_id mxu_apply_rescaling(mxu_model *model,
                                  const mxu_rescaling_config *config,
                                  mxu_tensor_id x);
mxu_tensor_id mxu_apply_normalization(mxu_model *model,
                                      const mxu_normalization_config *config,
                                      mxu_tensor_id x);
mxu_tensor_id mxu_apply_layer_scale(mxu_model *model,
                                    const mxu_layer_scale_config *config,
                                    mxu_tensor_id x);
/* keras.applications InceptionResNetV2's own CustomScaleLayer: a + b *
 * scale, a and b of one shape (a block's input and its residual). */
mxu_tensor_id mxu_apply_custom_scale(mxu_model *model, const char *name,
                                     float scale, mxu_tensor_id a,
                                     mxu_tensor_id b);
mxu_tensor_id mxu_apply_conv1d(mxu_model *model,
                               const mxu_conv1d_config *config,
                               mxu_tensor_id x);
mxu_tensor_id mxu_apply_max_pooling1d(mxu_model *model,
                                      const mxu_pool1d_config *config,
                                      mxu_tensor_id x);
mxu_tensor_id mxu_apply_average_pooling1d(mxu_model *model,
                                          const mxu_pool1d_config *config,
                                          mxu_tensor_id x);
/* GlobalAveragePooling1D / GlobalMaxPooling1D: (steps, c) -> (c), or
 * (1, c) with keepdims. */
mxu_tensor_id mxu_apply_global_pooling1d(mxu_model *model,
                                         const mxu_global_pool2d_config *config,
                                         mxu_tensor_id x);
mxu_tensor_id mxu_apply_embedding(mxu_model *model,
                                  const mxu_embedding_config *config,
                                  mxu_tensor_id x);
mxu_tensor_id mxu_apply_rnn(mxu_model *model, const mxu_rnn_config *config,
                            mxu_tensor_id x);
/* The same from initial states (Keras' initial_state: h, and LSTM's c,
 * each (units); the encoder's final states in an encoder-decoder): the
 * gradient flows back into them. */
mxu_tensor_id mxu_apply_rnn_from(mxu_model *model, const mxu_rnn_config *config,
                                 mxu_tensor_id x, const mxu_tensor_id *states,
                                 int count);
/* Output k of a layer that returns several (an RNN with return_state:
 * 0 its output, 1 its final h, 2 LSTM's final c), as Keras' list of
 * outputs; -1 for no such output. */
mxu_tensor_id mxu_output_part(mxu_model *model, mxu_tensor_id layer, int k);
/* Masking over a sequence (steps, features): a step whose features all
 * equal mask_value is padding, its output zeros, and masked for the
 * layers after as an Embedding's mask_zero masks (mxu_embedding_config
 * says where the mask goes). */
mxu_tensor_id mxu_apply_masking(mxu_model *model, const char *name,
                                float mask_value, mxu_tensor_id x);
/* RepeatVector: (features) -> (n, features), the vector at every step. */
mxu_tensor_id mxu_apply_repeat_vector(mxu_model *model, const char *name, int n,
                                      mxu_tensor_id x);
/* Over a sequence (steps, channels): UpSampling1D repeats each step `size`
 * times; ZeroPadding1D adds steps of zeros before and after it;
 * Cropping1D cuts steps off either end. */
mxu_tensor_id mxu_apply_upsampling1d(mxu_model *model, const char *name,
                                     int size, mxu_tensor_id x);
mxu_tensor_id mxu_apply_zero_padding1d(mxu_model *model, const char *name,
                                       int before, int after, mxu_tensor_id x);
mxu_tensor_id mxu_apply_cropping1d(mxu_model *model, const char *name,
                                   int before, int after, mxu_tensor_id x);
/* Conv1DTranspose: the transpose of the Conv1D that maps its output back
 * to its input (padding valid or same, groups 1); its kernel is
 * (kernel_size, filters, channels). */
mxu_tensor_id mxu_apply_conv1d_transpose(mxu_model *model,
                                         const mxu_conv1d_config *config,
                                         mxu_tensor_id x);
/* Attention and AdditiveAttention([query, value, key]): key -1 for none
 * (the value is the key). */
mxu_tensor_id mxu_apply_dense_attention(
    mxu_model *model, const mxu_dense_attention_config *config,
    mxu_tensor_id query, mxu_tensor_id value, mxu_tensor_id key);
/* MultiHeadAttention(query, value, key): key -1 for none (the value is
 * the key), as Keras' call; GroupQueryAttention with config->kv_heads. */
mxu_tensor_id mxu_apply_multi_head_attention(mxu_model *model,
                                             const mxu_attention_config *config,
                                             mxu_tensor_id query,
                                             mxu_tensor_id value,
                                             mxu_tensor_id key);
/* Keras' Bidirectional(layer, merge_mode): the recurrent layer `layer`
 * (its name, NULL: Keras' automatic one, names the weights
 * forward_<name>/... and backward_<name>/...) reading forwards and a copy
 * reading backwards, whose sequence is reversed back; the two merged by
 * MXU_MERGE_CONCATENATE (Keras' concat), _ADD (sum), _MULTIPLY (mul) or
 * _AVERAGE (ave). */
mxu_tensor_id mxu_apply_bidirectional(mxu_model *model, const char *name,
                                      const mxu_rnn_config *layer,
                                      mxu_merge_kind merge_mode,
                                      mxu_tensor_id x);
/* The same from initial states: each direction's (h, and LSTM's c),
 * forwards first. With the layer's return_state its outputs
 * (mxu_output_part) are the merged output, then the forward direction's
 * final states, then the backward one's, as Keras'. */
mxu_tensor_id mxu_apply_bidirectional_from(mxu_model *model, const char *name,
                                           const mxu_rnn_config *layer,
                                           mxu_merge_kind merge_mode,
                                           mxu_tensor_id x,
                                           const mxu_tensor_id *states,
                                           int count);
mxu_tensor_id
mxu_apply_separable_conv2d(mxu_model *model,
                           const mxu_separable_conv2d_config *config,
                           mxu_tensor_id x);
mxu_tensor_id
mxu_apply_conv2d_transpose(mxu_model *model,
                           const mxu_conv2d_transpose_config *config,
                           mxu_tensor_id x);
mxu_tensor_id mxu_apply_relu(mxu_model *model, const mxu_relu_config *config,
                             mxu_tensor_id x);
mxu_tensor_id mxu_apply_reshape(mxu_model *model,
                                const mxu_reshape_config *config,
                                mxu_tensor_id x);
/* Keras' shared layers: calls the layer that made `made_by` again, on
 * `inputs`, with the same weights (a siamese branch, a block reused).
 * Their gradients from every call are summed. Layers with batch
 * statistics (BatchNormalization) cannot be shared. */
mxu_tensor_id mxu_apply_again(mxu_model *model, mxu_tensor_id made_by,
                              const mxu_tensor_id *inputs, int count);
/* A merge of `count` tensors; axis is Concatenate's, counted as Keras
 * does (the batch is axis 0, -1 the last). */
mxu_tensor_id mxu_merge(mxu_model *model, mxu_merge_kind kind, const char *name,
                        const mxu_tensor_id *inputs, int count, int axis);
/* Dot: Keras' batch_dot of a and b along axes[0] of a and axes[1] of b
 * (the batch is axis 0; negative from the end), each a vector or a
 * matrix a sample; normalize: each vector along the axis over its L2 norm
 * first (cosine similarity). */
typedef struct mxu_dot_config {
  const char *name;
  int axes[2];
  int normalize;
} mxu_dot_config;
mxu_tensor_id mxu_apply_dot(mxu_model *model, const mxu_dot_config *config,
                            mxu_tensor_id a, mxu_tensor_id b);
/* Keras' layers.add([a, b]). */
mxu_tensor_id mxu_add(mxu_model *model, const char *name, mxu_tensor_id a,
                      mxu_tensor_id b);
/* The tensors the model outputs, in order (fit and evaluate take data
 * with an array per input, mxu_dataset_add_input, and targets per output,
 * mxu_dataset_add_output_labels; mxu_predict one input and output,
 * mxu_predict_outputs any). This closes the graph: its
 * layers are put in the order Keras lists them (by depth from the outputs),
 * which is the order of mxu_model_layer_name and of the files mxu writes, so
 * tensor ids from before no longer name the same layers. */
mxu_status mxu_model_outputs(mxu_model *model, const mxu_tensor_id *outputs,
                             int count);
int mxu_model_input_count(const mxu_model *model);
int mxu_model_output_count(const mxu_model *model);

/* ---- the model's layers ------------------------------------------------- */

/* Keras' model.layers: in a functional model its InputLayers too. */
int mxu_model_layer_count(const mxu_model *model);
/* Output shape of layer i, without the batch dimension. */
mxu_shape mxu_model_layer_shape(const mxu_model *model, int layer);
/* The (first) input's shape, without the batch dimension. */
mxu_shape mxu_model_input_shape(const mxu_model *model);
/* Input k's shape and name (its InputLayer's), in the order of the
 * model's inputs; rank 0 and NULL for no such input. */
mxu_shape mxu_model_input_shape_of(const mxu_model *model, int k);
const char *mxu_model_input_name(const mxu_model *model, int k);
/* Output j's name, Keras' output name (its layer's): the key of its loss
 * and logs; NULL for no such output. */
const char *mxu_model_output_name(const mxu_model *model, int j);
/* Output j's shape (a sample's); rank 0 for no such output. */
mxu_shape mxu_model_output_shape_of(const mxu_model *model, int j);
const char *mxu_model_layer_name(const mxu_model *model, int layer);
int64_t mxu_model_param_count(const mxu_model *model, int trainable);

/* Keras' model.summary() table. Writes to out (stdout if NULL). */
void mxu_summary(const mxu_model *model, FILE *out);

/* ---- compile ----------------------------------------------------------- */

/* Keras' optimizers with Keras 3's update rules. */
typedef enum mxu_optimizer_kind {
  MXU_ADAM = 0,
  MXU_SGD,
  MXU_RMSPROP,  /* rho, momentum, epsilon, centered */
  MXU_ADAGRAD,  /* initial_accumulator_value, epsilon */
  MXU_ADAMAX,   /* beta_1, beta_2, epsilon */
  MXU_NADAM,    /* beta_1, beta_2, epsilon */
  MXU_ADADELTA, /* rho, epsilon */
  MXU_LION,     /* beta_1, beta_2 */
  MXU_ADAMW     /* Adam with weight_decay (0.004) */
} mxu_optimizer_kind;

/* Keras' learning-rate schedules: the rate of each optimizer step as a
 * function of the steps before it (Keras' formulas, in float32). */
typedef enum mxu_lr_decay_kind {
  MXU_DECAY_NONE = 0,
  MXU_EXPONENTIAL_DECAY,    /* initial decay_rate^(step / decay_steps) */
  MXU_PIECEWISE_CONSTANT,   /* values[i] up to boundaries[i] */
  MXU_POLYNOMIAL_DECAY,     /* end_learning_rate, power, cycle */
  MXU_INVERSE_TIME_DECAY,   /* initial / (1 + decay_rate step / decay_steps) */
  MXU_COSINE_DECAY,         /* alpha; linear warmup to warmup_target */
  MXU_COSINE_DECAY_RESTARTS /* t_mul, m_mul, alpha */
} mxu_lr_decay_kind;

#define MXU_MAX_BOUNDARIES 32

typedef struct mxu_lr_decay {
  mxu_lr_decay_kind kind;
  float initial_learning_rate;
  int64_t decay_steps; /* CosineDecayRestarts: first_decay_steps */
  float decay_rate;
  int staircase;
  int64_t boundaries[MXU_MAX_BOUNDARIES];
  float values[MXU_MAX_BOUNDARIES + 1];
  int boundary_count;
  float end_learning_rate, power;
  int cycle;
  float alpha;
  int has_warmup; /* warmup_target set */
  float warmup_target;
  int64_t warmup_steps;
  float t_mul, m_mul;
} mxu_lr_decay;

/* The schedule's rate after `step` optimizer steps. */
float mxu_schedule_rate(const mxu_lr_decay *schedule, int64_t step);

typedef struct mxu_optimizer_config {
  mxu_optimizer_kind kind;
  /* The rate, or the schedule's when schedule.kind is set (then
   * learning_rate holds its initial rate). */
  float learning_rate;
  mxu_lr_decay schedule;
  float beta_1, beta_2, epsilon;
  float momentum;                  /* SGD, RMSprop */
  int nesterov;                    /* SGD */
  int amsgrad;                     /* Adam, AdamW: the largest velocity */
  int centered;                    /* RMSprop: less the mean gradient */
  float rho;                       /* RMSprop, Adadelta */
  float initial_accumulator_value; /* Adagrad */
  /* Every optimizer (Keras 3's base class): w -= w * weight_decay * lr
   * before each update; and the gradients clipped first, each weight's to
   * norm clipnorm, all together to global_clipnorm, or each value to
   * +-clipvalue (0: off; at most one). */
  float weight_decay;
  float clipnorm, global_clipnorm, clipvalue;
  /* Every optimizer: an exponential moving average of the weights kept
   * beside them (use_ema), avg = ema_momentum avg + (1 - ema_momentum) w
   * after each update; the weights replaced by it every
   * ema_overwrite_frequency steps (0: never) and when fit ends. */
  int use_ema;
  float ema_momentum;
  int ema_overwrite_frequency;
} mxu_optimizer_config;

/* Keras' defaults: Adam(1e-3, 0.9, 0.999, 1e-7); SGD(0.01, 0, false). */
mxu_optimizer_config mxu_adam(float learning_rate);
mxu_optimizer_config mxu_sgd(float learning_rate, float momentum, int nesterov);
/* An optimizer by Keras' name or class ("rmsprop", "AdamW", ...) with
 * Keras' defaults; MXU_ERR_UNSUPPORTED listing the ones mxu has. Its
 * class name, and the name Keras 3 gives an instance ("adamw"). */
mxu_status mxu_optimizer_from_name(const char *name, mxu_optimizer_config *out);
const char *mxu_optimizer_class_name(mxu_optimizer_kind kind);
const char *mxu_optimizer_name(mxu_optimizer_kind kind);

/* Keras' losses, each the mean over the output's values of a sample, then
 * over the batch (sum_over_batch_size). The cross-entropies compare class
 * scores with class labels (sparse) or target rows; the others compare
 * the output with float targets of the same size (or, for a one-value
 * output, with the class label as a number: binary labels 0 and 1). */
typedef enum mxu_loss {
  MXU_SPARSE_CATEGORICAL_CROSSENTROPY = 0,
  MXU_CATEGORICAL_CROSSENTROPY,
  MXU_BINARY_CROSSENTROPY, /* Keras 3's: probabilities clipped to
                              [1e-7, 1 - 1e-7], or logits */
  MXU_MEAN_SQUARED_ERROR,
  MXU_MEAN_ABSOLUTE_ERROR,
  MXU_HUBER,         /* delta: huber_delta */
  MXU_KL_DIVERGENCE, /* targets and outputs clipped to [1e-7, 1] */
  /* 100 |t - y| / max(|t|, 1e-7) */
  MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR,
  /* (log(max(y, 1e-7) + 1) - log(max(t, 1e-7) + 1))^2 */
  MXU_MEAN_SQUARED_LOGARITHMIC_ERROR,
  MXU_LOG_COSH, /* log(cosh(y - t)) */
  MXU_POISSON,  /* y - t log(y + 1e-7) */
  /* max(1 - t y, 0) and its square, targets -1 and 1 (a target 0 counts
   * as -1: Keras turns labels 0 and 1 into -1 and 1 where all the batch's
   * are 0 or 1) */
  MXU_HINGE,
  MXU_SQUARED_HINGE,
  /* of a row: max(max((1 - t) y) - sum(t y) + 1, 0), one-hot targets */
  MXU_CATEGORICAL_HINGE,
  /* of a row: -(t / |t|) . (y / |y|), each norm at least 1e-7 */
  MXU_COSINE_SIMILARITY,
  /* the binary cross-entropy times (1 - p_t)^gamma, p_t the probability
   * given the target (y where t is 1, 1 - y where 0); with
   * apply_class_balancing times alpha for targets 1, 1 - alpha for 0 */
  MXU_BINARY_FOCAL_CROSSENTROPY,
  /* of a row of class probabilities p (the output over its sum, clipped
   * to [1e-7, 1 - 1e-7]): -sum alpha (1 - p)^gamma t log p */
  MXU_CATEGORICAL_FOCAL_CROSSENTROPY
} mxu_loss;

/* Keras' function name of a loss ("binary_crossentropy") and its class
 * ("BinaryCrossentropy"); mxu_loss_from_name takes either, or an alias
 * Keras' get() takes ("mse", "mae", "kld", ...). */
const char *mxu_loss_name(mxu_loss loss);
const char *mxu_loss_class_name(mxu_loss loss);
mxu_status mxu_loss_from_name(const char *name, mxu_loss *out);

typedef enum mxu_backend_kind {
  MXU_BACKEND_CPU = 0, /* oneDNN */
  MXU_BACKEND_CPU_REF, /* plain C loops: the oracle, slow */
  /* The training step as one XLA program on a PJRT plugin's devices, one
   * per replica (evaluation and prediction run on cpu). */
  MXU_BACKEND_PJRT
} mxu_backend_kind;

/* Keras' dtype policy for the whole model. MXU_MIXED_BFLOAT16 is Keras'
 * mixed_bfloat16: the weights stay float32 (the optimizer updates and the
 * saved files see float32 only), while Conv2D and Dense multiply in
 * bfloat16 with float32 accumulation, on CPUs with AVX512_BF16, where
 * that is faster than float32 (not on fewer than 16 input channels,
 * depthwise convs, convs on images of a few pixels, 3x3 convs followed by
 * a 2x2 max pooling that mxu's own Winograd takes, Dense of fewer than 32
 * units: those multiply in float32, the more exact); every other
 * layer, the softmax and the loss stay float32. On a CPU without
 * bfloat16 instructions the model trains in float32, which
 * mxu_model_precision tells after compile.
 * (MXU_FLOAT32 already names a tensor dtype, hence the longer name.) */
typedef enum mxu_precision {
  MXU_PRECISION_FLOAT32 = 0,
  MXU_MIXED_BFLOAT16
} mxu_precision;

/* Models of several outputs (Keras' compile with a list or dict of
 * losses): what each output's loss is. The model's loss is the sum of
 * each output's, times its weight (Keras' loss_weights), and the weights'
 * penalties; logs carry each output's loss unweighted, as Keras does. */
enum { MXU_MAX_OUTPUTS = 16, MXU_MAX_METRICS = 16 };

typedef struct mxu_output_loss {
  mxu_loss loss;
  int from_logits;
  float label_smoothing; /* as mxu_compile_config's */
  float huber_delta;     /* 1.0 (mxu_output_loss_defaults) */
  /* The focal cross-entropies' (as mxu_compile_config's). */
  float gamma, alpha;
  int apply_class_balancing;
  /* As mxu_compile_config's. */
  int has_ignore_class, ignore_class;
  float weight; /* the loss weight; 1.0 */
  /* The output's metrics, by the names mxu_compile_config.metrics takes,
   * NULL after the last; none: no metric (Keras' metrics dict without
   * this output). */
  const char *metrics[MXU_MAX_METRICS];
  /* Its weighted metrics, as mxu_compile_config.weighted_metrics. */
  const char *weighted_metrics[MXU_MAX_METRICS];
} mxu_output_loss;

/* The sparse categorical cross-entropy, weight 1, delta 1, no metric. */
mxu_output_loss mxu_output_loss_defaults(void);

typedef struct mxu_compile_config {
  mxu_optimizer_config optimizer;
  mxu_loss loss;
  int from_logits; /* the cross-entropies */
  /* Keras' label_smoothing of the categorical and binary cross-entropies:
   * targets t become t (1 - s) + s / classes (binary: + s / 2). */
  float label_smoothing;
  float huber_delta; /* Huber's delta; Keras' 1.0 (mxu_compile_defaults) */
  /* The focal cross-entropies': gamma, the focusing power (Keras' 2.0),
   * alpha, the weight of a class (Keras' 0.25; the binary one's with
   * apply_class_balancing only). */
  float gamma, alpha;
  int apply_class_balancing;
  /* Keras' ignore_class of the sparse cross-entropy, with has_ignore_class
   * set: a label (or a label at a position) of that class, in range or
   * not (segmentation's -1 or 255), scores no loss and no gradient, and
   * the loss is the mean over the batch's other labels (their sum over
   * their count, 0 when there is none); the metrics still count every
   * label, as Keras' do. */
  int has_ignore_class, ignore_class;
  int batch_size;
  mxu_backend_kind backend;
  /* pjrt: the plugin (NULL: $MXU_PJRT_PLUGIN, else the CPU plugin the
   * build fetched). */
  const char *pjrt_plugin;
  uint64_t seed; /* initialisers */
  /* The metrics (Keras' compile(metrics=[...])), NULL after the last, by
   * the names Keras prints and logs them under: "accuracy" (or "acc";
   * binary_accuracy for a one-value output or the binary cross-entropy,
   * sparse_categorical_accuracy for the sparse loss, categorical_accuracy
   * otherwise, as Keras chooses), those three by name,
   * "top_k_categorical_accuracy" and "sparse_top_k_categorical_accuracy"
   * (k = 5), "mae" or "mean_absolute_error", "mse" or
   * "mean_squared_error", "root_mean_squared_error", "precision" and
   * "recall" (Keras' Precision() and Recall(): each output value > 0.5
   * a positive prediction, each target != 0 a positive, counted over the
   * epoch), "true_positives", "false_positives", "true_negatives" and
   * "false_negatives" (their counts), "binary_crossentropy" (of
   * probabilities), "auc" (Keras' AUC(): the area under the ROC curve of
   * every output value against its target, at 200 thresholds, counted
   * over the epoch) and "prc" (AUC(curve="PR"), as Keras interpolates
   * it); at most 4 AUCs a model. "NAME=METRIC" logs METRIC under NAME
   * (Keras' name= of a metric object: "roc=auc", "tp=true_positives"; a
   * model file's compile settings read so point at text the model
   * keeps). None: {"accuracy"}. Logs, histories and callbacks carry the
   * first one's value where they say accuracy. */
  const char *metrics[MXU_MAX_METRICS];
  /* Keras' weighted_metrics, NULL after the last: metrics as above that
   * the samples' weights weigh (mxu_dataset_set_sample_weights and
   * class_weight, as they weigh the loss: a mean divides by the weights'
   * sum, the counts and curves count each sample by its weight), logged
   * after the metrics, as "weighted_NAME" where a metric of the output is
   * named NAME; at most MXU_MAX_METRICS an output with the metrics. */
  const char *weighted_metrics[MXU_MAX_METRICS];
  /* The strategy, as TPUStrategy: batch_size is the global batch, split
   * over `replicas` logical replicas (0 means 1; batch_size must divide by
   * it); each runs forward and backward on its slice, the gradients are
   * summed in a fixed order and every replica applies the same update.
   * `threads` worker threads run the replicas (0: the machine's cores).
   * Weights depend on the seed and the replica count only, bit for bit,
   * whatever the thread count or the number of MPI processes — except
   * that with more threads than replicas the spare threads work inside
   * each replica's kernels, whose reductions then follow the thread
   * count. steps_per_execution (Keras'; 0 means 1): steps run between two
   * progress updates; on the pjrt backend, steps run on the devices in one
   * execution (an on-device loop over that many stacked batches, one host
   * round trip). */
  int replicas;
  int threads;
  /* Rows a replica runs through the network at a time. Where no layer
   * computes batch statistics (BatchNormalization), a replica's batch may
   * run in slices, each with its own activations and gradient, summed in a
   * fixed order: the same result, with a small model's activations in the
   * cache. 0 chooses from the core's L2 cache size (slices of at least 32
   * rows, in a count that 2 and 4 workers share evenly where the rows
   * allow); a value that does not divide batch_size / replicas runs the
   * batch whole. */
  int slice_rows;
  int steps_per_execution;
  mxu_precision precision; /* float32 unless asked */
  /* Every node's output gradient kept whole after a training step, for
   * inspection; otherwise gradients share memory wherever their lives in
   * the backward pass do not meet. */
  int keep_gradients;
  /* A model of several outputs: output_count entries, one per model
   * output in the model's order. 0 gives every output the loss above
   * (loss, from_logits, label_smoothing, huber_delta, the focal ones'),
   * weight 1 and the
   * metrics above, as tf.keras' compile(loss=name, metrics=[name]) does. A
   * model of one output may give one entry. */
  int output_count;
  mxu_output_loss outputs[MXU_MAX_OUTPUTS];
} mxu_compile_config;

mxu_compile_config mxu_compile_defaults(void);
/* The precision the compiled model computes in: what was asked, or
 * float32 where mixed_bfloat16 was asked of a CPU without AVX512_BF16. */
mxu_precision mxu_model_precision(const mxu_model *model);

/* Fixes every shape (the batch included), creates the parameters with
 * Keras' initialisers, asks the backend for its primitives once and lays
 * out every activation and gradient. */
mxu_status mxu_compile(mxu_model *model, const mxu_compile_config *config);

/* ---- processes (MPI) --------------------------------------------------- */

/* Under mpirun, call mxu_distributed_init first in main and
 * mxu_distributed_finalize before returning: a model compiled with N
 * replicas then runs N/P of them in each of the P processes (N must divide
 * by P) and gives the same weights, bit for bit, as one process with N
 * replicas. Only rank 0 should print or write files; fit does that
 * itself. Without MPI (or outside mpirun) these make a world of one. */
mxu_status mxu_distributed_init(int *argc, char ***argv);
void mxu_distributed_finalize(void);
int mxu_distributed_rank(void);
int mxu_distributed_size(void);
/* Ends every process of the world with this exit code (after an error in
 * one of them, so the others do not wait for it forever). */
void mxu_distributed_abort(int code);

/* ---- data -------------------------------------------------------------- */

/* An in-memory data set: float32 samples (channels_last) and int32 class
 * labels, or float targets (regression; mxu_dataset_num_classes 0). */
typedef struct mxu_dataset mxu_dataset;

typedef enum mxu_split { MXU_TRAIN = 0, MXU_TEST } mxu_split;

/* IDX files (MNIST, Fashion-MNIST), plain or gzip. */
mxu_status mxu_load_idx(const char *images_path, const char *labels_path,
                        mxu_dataset **out);
/* NumPy arrays as a Keras user keeps a data set: an .npz (np.savez or
 * np.savez_compressed) holding x_train, y_train, x_test, y_test (as
 * keras.datasets' load_data() returns them) or x and y (a train split
 * only); or an .npy of samples and an .npy of labels. Samples of any
 * numeric dtype become float32 with their values. Labels that are all
 * class indices (integers >= 0, or one-hot rows) are classes, the count
 * the highest label in the file plus one; any others are float targets
 * (regression: mxu_dataset_num_classes 0). */
mxu_status mxu_load_npz(const char *path, mxu_split split, mxu_dataset **out);
mxu_status mxu_load_npy(const char *samples_path, const char *labels_path,
                        mxu_dataset **out);
/* Two arrays of an .npz by name (x_key, y_key: "x_val", "y_val"; y_key
 * NULL for samples only, as predict reads them). */
mxu_status mxu_load_npz_arrays(const char *path, const char *x_key,
                               const char *y_key, mxu_dataset **out);
/* The arrays of an .npz for a model of several inputs (Keras' fit on a
 * dict of arrays keyed by input name): x_keys[k] holds input k's samples
 * (mxu_dataset_add_input), y_key the labels as mxu_load_npz_arrays reads
 * them (NULL: none); every input's array must hold as many samples. */
mxu_status mxu_load_npz_inputs(const char *path, const char *const *x_keys,
                               int count, const char *y_key, mxu_dataset **out);
/* One split of an .npz for a model of several inputs, its arrays named
 * after the inputs (names[k] is input k's): NAME_train (NAME_test) beside
 * y_train (y_test), or NAME beside y: the train split, or with `whole`
 * the test split too. labels 0: samples only (as predict reads them; the
 * labels, if any, are not read). */
mxu_status mxu_load_npz_named(const char *path, mxu_split split,
                              const char *const *names, int count, int whole,
                              int labels, mxu_dataset **out);
/* The same for a model of several outputs too (Keras' fit with a dict of
 * y keyed by output name): output j's targets are the array named
 * outputs[j] (OUT_train / OUT_test, or OUT), read as labels are
 * (mxu_dataset_add_output_labels / _targets); output_count 0 reads
 * y_train / y_test or y, as mxu_load_npz_named does. */
mxu_status mxu_load_npz_model(const char *path, mxu_split split,
                              const char *const *inputs, int input_count,
                              const char *const *outputs, int output_count,
                              int whole, int labels, mxu_dataset **out);
/* The arrays an .npz holds, up to max: each name (without ".npy") and
 * the shape of one of its samples (the array's shape without its first
 * axis; (1) for a 1-D array). */
#define MXU_NPZ_NAME_SIZE 128
typedef struct mxu_npz_entry {
  char name[MXU_NPZ_NAME_SIZE];
  mxu_shape sample;
} mxu_npz_entry;
mxu_status mxu_npz_entries(const char *path, mxu_npz_entry *entries, int max,
                           int *count);
/* A numeric CSV table: a header row of column names, then one sample a
 * row; the column named label_column holds class indices (or, if any
 * value is not one, float regression targets), every other column is a
 * float32 feature (label_column NULL: every column is, for predict) (samples of
 * shape (columns - 1,)). Quoted cells are read as CSV has them (libcsv,
 * strict); a cell that is not a finite number is an error naming its row and
 * column. */
mxu_status mxu_load_csv(const char *path, const char *label_column,
                        mxu_dataset **out);
/* labels_path may be NULL: samples only (labels 0, one class), for
 * predict. mxu_save_npy writes float32 values of the given shape (rank
 * 1..MXU_MAX_RANK + 1) as NumPy's np.save does (format 1.0), through
 * mxu_file_write. */
mxu_status mxu_save_npy(const char *path, const int64_t *shape, int rank,
                        const float *values);
/* np.savez of float32 arrays: array k named names[k] (its member
 * NAME.npy), of shapes[k] (ranks[k] dims), values[k]; count 1 to
 * MXU_MAX_OUTPUTS (a model's outputs, as mxu predict writes them). */
mxu_status mxu_save_npz(const char *path, int count, const char *const *names,
                        const int64_t *const *shapes, const int *ranks,
                        const float *const *values);
/* The four standard MNIST-style files in dir ({train,t10k}-{images-idx3,
 * labels-idx1}-ubyte, with or without .gz). */
mxu_status mxu_load_mnist_dir(const char *dir, mxu_split split,
                              mxu_dataset **out);
/* CIFAR binary batches (.bin or .bin.gz). label_bytes is 1 for CIFAR-10,
 * 2 for CIFAR-100 (coarse then fine; the fine label is used). */
mxu_status mxu_load_cifar(const char *const *paths, int path_count,
                          int label_bytes, mxu_dataset **out);
/* data_batch_1..5 or test_batch in dir (CIFAR-10), or train / test
 * (CIFAR-100). */
mxu_status mxu_load_cifar10_dir(const char *dir, mxu_split split,
                                mxu_dataset **out);
mxu_status mxu_load_cifar100_dir(const char *dir, mxu_split split,
                                 mxu_dataset **out);
/* Wraps copies of caller arrays: x is count * shape floats, labels count
 * ints in [0, num_classes). */
mxu_status mxu_dataset_from_arrays(const float *x, const int32_t *labels,
                                   int64_t count, mxu_shape shape,
                                   int num_classes, mxu_dataset **out);
/* The same with float targets, target_size a sample (count * target_size
 * floats), for the losses that compare the output with targets
 * (regression, multi-label): the model's output must have target_size
 * values. */
mxu_status mxu_dataset_from_targets(const float *x, const float *targets,
                                    int64_t count, mxu_shape shape,
                                    int target_size, mxu_dataset **out);
/* A data set by name or directory: `fashion-mnist`, `mnist`, `cifar10`,
 * `cifar100` are looked up in $MXU_DATA_DIR, then ./data, then
 * /usr/share/datasets; any other argument must be a directory, whose format
 * is recognised from its files. Class names come with it. */
mxu_status mxu_load_dataset(const char *name_or_dir, mxu_split split,
                            mxu_dataset **out);
/* mxu_load_dataset for a model: the same, and also image folders, whose
 * images are decoded and resized to `input` (the model's input shape,
 * height x width x 1 or 3 channels). A folder of class subfolders is the
 * train split; DIR/train and DIR/test (or DIR/validation) give both. */
mxu_status mxu_load_dataset_for(const char *name_or_dir, mxu_split split,
                                mxu_shape input, mxu_dataset **out);
/* dir holds one subfolder per class; the class names are the
 * subfolder names sorted by byte value (label = position), and each
 * class's images are its .png, .jpg and .jpeg files (any case), its own
 * subfolders included, in Keras' order: folders by path, then files by
 * name. Names starting with '.' are skipped; other files are ignored.
 * Every image becomes an h x w x channels float sample (channels 1:
 * luminance as PIL's convert('L'); 3: RGB) with values 0..255, resized
 * with tf.image.resize's bilinear (half-pixel centres, no antialias).
 * PNG alpha and transparency are dropped, not composited (as PIL's
 * convert('RGB') and TF's decode_png(channels=3)); 16-bit PNGs keep their
 * high byte. A class folder may be empty; the whole set may not. */
mxu_status mxu_load_image_folder(const char *dir, int h, int w, int channels,
                                 mxu_dataset **out);

/* one PNG or JPEG file (told apart by its first bytes, not its
 * name) decoded, converted and resized as above into out, h * w * channels
 * floats in HWC order. */
mxu_status mxu_load_image_file(const char *path, int h, int w, int channels,
                               float *out);

void mxu_dataset_free(mxu_dataset *dataset);

int64_t mxu_dataset_count(const mxu_dataset *dataset);
mxu_shape mxu_dataset_shape(const mxu_dataset *dataset);
int mxu_dataset_num_classes(const mxu_dataset *dataset);
const float *mxu_dataset_x(const mxu_dataset *dataset);
const int32_t *mxu_dataset_labels(const mxu_dataset *dataset);
/* The class's name ("Ankle boot", "airplane") or NULL when unknown. */
const char *mxu_dataset_class_name(const mxu_dataset *dataset, int label);
/* Views every sample as `shape` (the same number of values, in C order:
 * NumPy's reshape), e.g. (28, 28) samples as a model's (28, 28, 1) input;
 * MXU_ERR_ARG when the counts differ. */
mxu_status mxu_dataset_reshape(mxu_dataset *dataset, mxu_shape shape);
/* A model of several inputs trains on samples of each (Keras' fit on a
 * list of arrays, in the order of the model's inputs): the data set's own
 * samples are input 0's, and each call adds the next input's, copying
 * count * shape floats. Inputs are counted 0 .. input_count - 1; reshape
 * of input k as mxu_dataset_reshape. */
mxu_status mxu_dataset_add_input(mxu_dataset *dataset, const float *x,
                                 mxu_shape shape);
int mxu_dataset_input_count(const mxu_dataset *dataset);
mxu_shape mxu_dataset_input_shape(const mxu_dataset *dataset, int k);
const float *mxu_dataset_input(const mxu_dataset *dataset, int k);
mxu_status mxu_dataset_reshape_input(mxu_dataset *dataset, int k,
                                     mxu_shape shape);
/* A model of several outputs trains on targets for each (Keras' fit with
 * a list or dict of y): the data set's own labels or targets are output
 * 0's, and each call adds the next output's: count class labels in
 * [0, num_classes), or count * target_size float targets (copied). */
mxu_status mxu_dataset_add_output_labels(mxu_dataset *dataset,
                                         const int32_t *labels,
                                         int num_classes);
mxu_status mxu_dataset_add_output_targets(mxu_dataset *dataset,
                                          const float *targets,
                                          int target_size);
int mxu_dataset_output_count(const mxu_dataset *dataset);
/* Keras' sample_weight: each sample's loss (of every output) counts
 * weights[i] times (count values, finite and >= 0, copied); the mean over
 * a batch still divides by its samples, and the metrics stay unweighted,
 * as Keras' fit and evaluate do. A data set without them weighs 1. */
mxu_status mxu_dataset_set_sample_weights(mxu_dataset *dataset,
                                          const float *weights);
/* Multiplies every sample value (of every input) by scale (e.g. 1/255). */
void mxu_dataset_rescale(mxu_dataset *dataset, float scale);
/* A view of samples [first, first + count), sharing memory with parent. */
mxu_status mxu_dataset_slice(const mxu_dataset *parent, int64_t first,
                             int64_t count, mxu_dataset **out);

/* ---- augmentation (Keras' ImageDataGenerator) -------------------------- */

/* ImageDataGenerator's geometric arguments. */
typedef struct mxu_augment_config {
  float rotation_range;     /* degrees: theta uniform in [-r, r] */
  float width_shift_range;  /* < 1: fraction of the width; >= 1: pixels */
  float height_shift_range; /* < 1: fraction of the height; >= 1: pixels */
  float zoom_range;         /* z: zx and zy drawn apart in [1-z, 1+z] */
  int horizontal_flip;      /* flip left-right with probability 0.5 */
  int vertical_flip;        /* flip top-bottom with probability 0.5 */
  mxu_fill_mode fill_mode;
  float cval; /* the value MXU_FILL_CONSTANT fills with */
} mxu_augment_config;

/* everything off, fill nearest, cval 0 (Keras' defaults). */
mxu_augment_config mxu_augment_defaults(void);
/* whether the config changes any image at all. */
int mxu_augment_active(const mxu_augment_config *config);
/* MXU_ERR_ARG, saying which field, for a negative or non-finite
 * range or an unknown fill mode. */
mxu_status mxu_augment_check(const mxu_augment_config *config);

/* ---- training ---------------------------------------------------------- */

typedef struct mxu_fit_config {
  int epochs;
  int batch_size;      /* 0: Keras' inference from steps_per_epoch, or 32 */
  int steps_per_epoch; /* 0: all full batches of the data set */
  const mxu_dataset *validation;
  int validation_freq; /* validate when epoch % freq == 0 (1-based) */
  int shuffle;
  uint64_t seed;
  int verbose; /* 0 silent, 1 progress bar, 2 one line per epoch */
  FILE *out;   /* where progress goes; stdout if NULL */
  /* Keras' initial_epoch, and mxu's step within it: where a resumed run
   * starts (see mxu_checkpoint_restore). The history's entry for a resumed
   * epoch covers the steps this call ran. */
  int initial_epoch, initial_step;
  /* Checkpoints: when checkpoint_dir is set, a full-model checkpoint is
   * written every checkpoint_every steps (0: at the end of every epoch). */
  const char *checkpoint_dir;
  int checkpoint_every;
  /* Keras callbacks, called in order (see "callbacks" below). */
  const struct mxu_callback *callbacks;
  int callback_count;
  /* On-the-fly augmentation of the training samples (NULL: none), drawn
   * per (seed, epoch, sample) and computed ahead on a prefetch thread. */
  const mxu_augment_config *augment;
  /* Keras' class_weight: a training sample of class c counts
   * class_weight[c] times in the loss (times its sample weight), for the
   * class_weight_count classes of a model of one output trained on class
   * labels; validation is not weighted by it. NULL: none. */
  const float *class_weight;
  int class_weight_count;
} mxu_fit_config;

mxu_fit_config mxu_fit_defaults(void);
/* The global batch fit uses for `samples` training samples: batch_size,
 * or with steps_per_epoch alone Keras' ceil(samples / steps_per_epoch),
 * else 32 (so a caller can compile for the batch fit will run). */
int64_t mxu_fit_batch_size(int batch_size, int steps_per_epoch,
                           int64_t samples);

/* An output's share of the logs: its loss (unweighted) and each metric's
 * value, and their val_. Keras logs a model of several outputs' as
 * "<name>_loss" and "<name>_<metric>", a model of one output's metrics
 * by their names. */
typedef struct mxu_output_log {
  const char *name;      /* the output layer's name; the model owns it */
  double loss, val_loss; /* val_: NaN when not validated */
  int metric_count;
  const char *metrics[MXU_MAX_METRICS]; /* their names; the model owns them */
  double values[MXU_MAX_METRICS], val_values[MXU_MAX_METRICS];
} mxu_output_log;

typedef struct mxu_epoch_log {
  int epoch; /* 1-based */
  /* loss: the total; accuracy: a model of one output's first metric (NaN
   * for several outputs, or none); outputs[0 .. output_count) hold each
   * output's loss and metrics (output_count 1 for a model of one
   * output). */
  double loss, accuracy;
  double val_loss, val_accuracy; /* NaN when not validated */
  double seconds;
  int64_t samples;
  int output_count;
  mxu_output_log outputs[MXU_MAX_OUTPUTS];
} mxu_epoch_log;

typedef struct mxu_history {
  int count;
  mxu_epoch_log *epochs;
} mxu_history;

/* Trains; history may be NULL. The history's memory belongs to the model
 * and lives until the next fit or mxu_model_free. */
mxu_status mxu_fit(mxu_model *model, const mxu_dataset *train,
                   const mxu_fit_config *config, const mxu_history **history);

/* Scores every sample exactly once (a partial last batch is padded and
 * masked). batch_size 0 uses the compiled one. */
mxu_status mxu_evaluate(mxu_model *model, const mxu_dataset *data,
                        int batch_size, double *loss, double *accuracy);

/* The total loss, and each output's loss and metrics into outputs
 * (mxu_model_output_count entries; val_ fields NaN). */
mxu_status mxu_evaluate_outputs(mxu_model *model, const mxu_dataset *data,
                                int batch_size, double *loss,
                                mxu_output_log *outputs);

/* Writes count * num_classes output values (the model's last layer) for the
 * samples x (count * input shape floats). */
mxu_status mxu_predict(mxu_model *model, const float *x, int64_t count,
                       float *out);

/* A model with several inputs or outputs (Keras' predict on a list):
 * inputs[k] holds count samples of input k (in the order of the model's
 * inputs, mxu_model_input_count of them), and outputs[j] receives count
 * samples of output j (mxu_model_output_count of them). */
mxu_status mxu_predict_outputs(mxu_model *model, const float *const *inputs,
                               int64_t count, float *const *outputs);

/* ---- parameters -------------------------------------------------------- */

/* Weights of layer `layer` in Keras order (kernel, bias; gamma, beta,
 * moving_mean, moving_variance), Keras layouts. Valid after compile. */
int mxu_layer_weight_count(const mxu_model *model, int layer);
mxu_status mxu_layer_weight(const mxu_model *model, int layer, int index,
                            mxu_tensor *out, const char **name);

/* ---- callbacks --------------------------------------------------------- */

/* Keras' logs: what a callback sees after a batch or an epoch. Batch logs
 * hold the running means of the epoch so far; val_* are NaN until (and
 * unless) the epoch is validated. */
typedef struct mxu_logs {
  int epoch; /* 0-based, as Keras passes it */
  int step;  /* batch callbacks: steps done in this epoch */
  double loss, accuracy, val_loss, val_accuracy;
  double learning_rate;
  const char *metric; /* the accuracy's name: "accuracy", ... */
  /* Each output's loss and metrics (output_count 1 for a model of one
   * output: Keras' "loss", "<metric>"; of several, loss is the total,
   * accuracy NaN and metric NULL, and Keras logs "<name>_loss",
   * "<name>_<metric>"). Logs a caller builds may leave output_count 0:
   * one output, its one metric named by metric. */
  int output_count;
  const mxu_output_log *outputs;
  /* Where fit prints (its out stream; NULL when silent): a callback's
   * warnings (Keras' "... is conditioned on metric ...") go there. */
  FILE *out;
} mxu_logs;

/* A callback: any hook may be NULL; a hook that fails stops fit with its
 * status. free releases self (mxu_callback_free calls it). */
typedef struct mxu_callback {
  void *self;
  mxu_status (*train_begin)(void *self, mxu_model *model);
  mxu_status (*epoch_begin)(void *self, mxu_model *model, int epoch);
  /* Every steps_per_execution steps, and after an epoch's last step. */
  mxu_status (*batch_end)(void *self, mxu_model *model, const mxu_logs *logs);
  mxu_status (*epoch_end)(void *self, mxu_model *model, const mxu_logs *logs);
  mxu_status (*train_end)(void *self, mxu_model *model, const mxu_logs *logs);
  void (*free)(void *self);
} mxu_callback;

void mxu_callback_free(mxu_callback *callback);

/* Keras' model.stop_training: fit stops after the current step. */
void mxu_model_stop_training(mxu_model *model);
/* The optimizer's learning rate, which schedules change between steps. */
double mxu_model_learning_rate(const mxu_model *model);
mxu_status mxu_model_set_learning_rate(mxu_model *model, double rate);
/* Copies of every weight (trainable and state, not the optimizer's), for
 * restoring the best epoch's. */
mxu_status mxu_model_snapshot(const mxu_model *model, float **out);
void mxu_model_restore_snapshot(mxu_model *model, const float *snapshot);

typedef enum mxu_monitor_mode {
  /* Keras 3's direction of the model's metric of that name (max for the
   * accuracies, precision, recall and AUCs, whatever they are named; min
   * for the errors and cross-entropy); for other keys max when the name
   * holds "acc" or ends in auc, precision or recall, else min. */
  MXU_MODE_AUTO = 0,
  MXU_MODE_MIN,
  MXU_MODE_MAX
} mxu_monitor_mode;

typedef struct mxu_early_stopping_config {
  const char *monitor; /* "val_loss" (default), "loss", "val_accuracy", ... */
  double min_delta;
  int patience;
  mxu_monitor_mode mode;
  int restore_best_weights;
  int start_from_epoch;
} mxu_early_stopping_config;
mxu_early_stopping_config mxu_early_stopping_defaults(void);
mxu_status mxu_early_stopping(const mxu_early_stopping_config *config,
                              mxu_callback *out);

typedef struct mxu_model_checkpoint_config {
  /* Python format fields {epoch}, {loss}, {val_loss}, {accuracy}, any
   * key of the logs ({val_auc}, {out_loss}), {lr}, with format specs such
   * as {epoch:02d} and {val_loss:.2f}; the fields are checked against the
   * model's keys when fit begins. */
  const char *filepath;
  const char *monitor; /* for save_best_only; default "val_loss" */
  mxu_monitor_mode mode;
  int save_best_only;
  int save_weights_only; /* else the whole model (mxu_save_model) */
} mxu_model_checkpoint_config;
mxu_model_checkpoint_config mxu_model_checkpoint_defaults(const char *filepath);
mxu_status mxu_model_checkpoint(const mxu_model_checkpoint_config *config,
                                mxu_callback *out);

typedef enum mxu_schedule_kind {
  MXU_SCHEDULE_STEP = 0,    /* lr * factor^floor(epoch / every) */
  MXU_SCHEDULE_EXPONENTIAL, /* lr * rate^epoch */
  MXU_SCHEDULE_COSINE       /* linear warm-up, then cosine down to min_lr */
} mxu_schedule_kind;

/* Keras' LearningRateScheduler: the rate for each epoch, set at its start
 * from the initial rate. fn, when set, replaces the built-in kinds. */
typedef struct mxu_lr_schedule_config {
  mxu_schedule_kind kind;
  double initial; /* 0: the compiled learning rate */
  double factor;  /* step: multiplier; exponential: rate per epoch */
  int every;      /* step: epochs between drops */
  int warmup_epochs, total_epochs;
  double min_lr;
  double (*fn)(int epoch, double lr, void *ctx);
  void *ctx;
} mxu_lr_schedule_config;
mxu_status mxu_lr_scheduler(const mxu_lr_schedule_config *config,
                            mxu_callback *out);

typedef struct mxu_reduce_lr_config {
  const char *monitor; /* default "val_loss" */
  double factor;       /* 0.1 */
  int patience;        /* 10 */
  mxu_monitor_mode mode;
  double min_delta; /* 1e-4 */
  int cooldown;     /* 0 */
  double min_lr;    /* 0 */
} mxu_reduce_lr_config;
mxu_reduce_lr_config mxu_reduce_lr_defaults(void);
mxu_status mxu_reduce_lr_on_plateau(const mxu_reduce_lr_config *config,
                                    mxu_callback *out);

/* Keras' CSVLogger: epoch, then the logs' keys in sorted order. */
mxu_status mxu_csv_logger(const char *path, int append, mxu_callback *out);
/* Keras' TerminateOnNaN. fit itself never applies a step whose loss is not
 * finite: it stops with MXU_ERR_NUMERIC naming the epoch and step, so the
 * last checkpoint stays the last good one. */
mxu_status mxu_terminate_on_nan(mxu_callback *out);
/* Keras' TensorBoard: event files in log_dir/train and log_dir/validation
 * with epoch_loss, epoch_<metric> and epoch_learning_rate per epoch, and
 * batch_loss every update_freq steps (0: epochs only). */
mxu_status mxu_tensorboard(const char *log_dir, int update_freq,
                           mxu_callback *out);

/* ---- benchmarking ------------------------------------------------------ */

/* Floating-point operations of one training step per sample, counted
 * exactly from the layer shapes (a multiply-add counts 2): forward,
 * backward (data and weight gradients) and the optimizer's share. */
double mxu_model_train_flops(const mxu_model *model);

/* Time per layer, for finding the next bottleneck: while profiling is on,
 * every step adds the wall time each layer's forward and backward took on
 * the first replica of this process. Enabling clears the totals. */
typedef struct mxu_layer_profile {
  const char *name, *class_name;
  double forward_seconds, backward_seconds;
  int64_t steps;
  /* The layer that runs this one fused into its own op (a Conv2D runs the
   * MaxPooling2D and relu after it), whose time includes this one's; NULL
   * for a layer that runs itself. */
  const char *fused_into;
} mxu_layer_profile;

/* Rows each replica runs through the network at a time, as compiled (see
 * mxu_compile_config.slice_rows); 0 before compile. */
int mxu_model_slice_rows(const mxu_model *model);

mxu_status mxu_profile_enable(mxu_model *model, int on);
/* On the pjrt backend, where XLA does not time its ops: each layer's
 * forward pass, then its forward and backward pass, run alone on device 0
 * as programs of their own with made-up values (a replica's batch), the
 * median of `repeats` runs; mxu_profile_read then gives one step's
 * times per layer. */
mxu_status mxu_profile_device(mxu_model *model, int repeats);
/* Fills up to capacity entries, one per layer; returns the layer count. */
int mxu_profile_read(const mxu_model *model, mxu_layer_profile *out,
                     int capacity);

/* The pjrt backend's host round trips since compile: the programs it
 * executed and the training steps they ran (steps_per_execution K runs K
 * steps an execution). Both 0 on the other backends. */
void mxu_device_counts(const mxu_model *model, int64_t *executions,
                       int64_t *steps);

/* ---- files ------------------------------------------------------------- */

/* Keras model JSON (model.to_json() of a Sequential model), tf.keras 2.x or
 * Keras 3 form. `source` names the text in messages (a file name). When
 * the JSON carries a compile_config (Keras 3) and compile is not NULL, it
 * is filled in (optimizer, loss, from_logits, metric) over the defaults and
 * *has_compile set. Unknown layers, unsupported options and malformed JSON
 * are errors naming the layer and the key. */
mxu_status mxu_model_from_json(const char *json, const char *source,
                               mxu_model **out, mxu_compile_config *compile,
                               int *has_compile);
mxu_status mxu_model_load_json(const char *path, mxu_model **out,
                               mxu_compile_config *compile, int *has_compile);
/* As mxu_model_load_json, for data whose samples are `sample` (without
 * the batch): a null dimension of the model's input (Keras'
 * Input(shape=(None,)), a sequence of any length) takes the samples'
 * (their trailing axes of 1 aside). Without it such a model is refused
 * with MXU_ERR_SHAPE. */
mxu_status mxu_model_load_json_for(const char *path, mxu_shape sample,
                                   mxu_model **out, mxu_compile_config *compile,
                                   int *has_compile);
/* The same for a model of several inputs: the InputLayer named names[k]
 * takes its null dimensions from samples of shapes[k] (an input not
 * named keeps them, and is refused). */
mxu_status mxu_model_load_json_for_inputs(
    const char *path, const char *const *names, const mxu_shape *shapes,
    int count, mxu_model **out, mxu_compile_config *compile, int *has_compile);
/* The model as tf.keras 2.x JSON (keras3: the Keras 3 form), so Keras'
 * model_from_json rebuilds it. *out is malloc'd; free it with free(). */
mxu_status mxu_model_to_json(const mxu_model *model, int keras3, char **out);
mxu_status mxu_model_save_json(const mxu_model *model, const char *path,
                               int keras3);

/* Weights as Keras' HDF5 files, every layer's weights in Keras order and
 * layouts. The file name picks the layout: "w.h5" (or ".hdf5") is tf.keras
 * 2.x's save_weights("w.h5") layout, which tf.keras and Keras 3 load;
 * "w.weights.h5" is Keras 3's save_weights layout. Any other name is
 * MXU_ERR_ARG (".keras", a zipped whole model, MXU_ERR_UNSUPPORTED).
 * Saving writes a temporary file beside the target and renames it over the
 * target once it is on disk, so a failure leaves the previous file intact.
 * Loading recognises either layout from the content (a whole-model
 * tf.keras .h5 file's model_weights included), matches layers with weights
 * by position (Keras 3: by its class-based names) as Keras does, and
 * checks every count and shape before the model changes: a file of
 * another model is refused naming the first layer that differs. */
mxu_status mxu_save_weights(const mxu_model *model, const char *path);
mxu_status mxu_load_weights(mxu_model *model, const char *path);
/* MXU_OK when path names a weights file mxu_save_weights can write; else
 * the error saving would give, so a command can refuse a name up front. */
mxu_status mxu_weights_path_check(const char *path);

/* Where training stands: the next step to run is `step` (0-based, within
 * the epoch) of `epoch` (0-based). With the fit seed it fixes the shuffle
 * order and every dropout mask still to come, so training resumed from
 * here continues bit for bit. Restoring also gives the global batch size
 * and replica count the file was written with (0 where it does not say;
 * saving writes the model's own and ignores these), so a caller can say
 * when a resume goes on with other settings. */
typedef struct mxu_train_position {
  int epoch, step;
  uint64_t seed;
  int batch_size, replicas;
} mxu_train_position;

/* The full model as tf.keras 2.x's model.save("m.h5"): root attributes
 * model_config (the model JSON) and training_config (loss, metrics,
 * optimizer_config), the weights under model_weights, the optimizer's
 * state (iterations, then Adam's m and v or SGD's momentum, per weight)
 * under optimizer_weights, and mxu's own attributes (batch size, training
 * position). A path ending in .keras gets Keras 3's archive instead (as
 * its model.save("m.keras")): config.json with the compile_config,
 * metadata.json, and model.weights.h5 with the layers, the optimizer's
 * variables under optimizer/vars (iteration, learning_rate, then each
 * weight's slots) and mxu's attributes. Written atomically. A compiled
 * model only. */
mxu_status mxu_save_model(const mxu_model *model, const char *path,
                          const mxu_train_position *position);
/* Rebuilds, compiles (the file's training config and batch size over
 * mxu_compile_defaults; backend from `backend`) and restores a model saved
 * by mxu_save_model, or by Keras' model.save (tf.keras 2 .h5 with either
 * optimizer naming, Keras 3 .h5 or .keras), optimizer state included.
 * position may be NULL; a file without mxu's training position (Keras',
 * or saved without one) gives epoch 0, step 0 and leaves the seed as the
 * caller set it: training goes on from the optimizer's state as Keras'
 * fit does after load_model. */
mxu_status mxu_load_model(const char *path, mxu_backend_kind backend,
                          mxu_model **out, mxu_train_position *position);
/* MXU_OK when mxu_save_model can write a file of that name; else the
 * error saving would give, so a command can refuse a name up front. */
mxu_status mxu_model_path_check(const char *path);
/* Restores weights, optimizer state and position (as mxu_load_model)
 * from a full-model file into an already compiled model of the same
 * architecture. */
mxu_status mxu_restore_model(mxu_model *model, const char *path,
                             mxu_train_position *position);

/* Writes size bytes to path as mxu writes every file: a regular file (or
 * a new one) is replaced atomically (a temporary beside it, synced, renamed
 * over it), so a failure leaves the previous file intact; a symlink's
 * target is replaced, not the link; a FIFO or device (/dev/stdout) is
 * written in place, never replaced. */
mxu_status mxu_file_write(const char *path, const void *data, size_t size);

/* Checkpoints: DIR/ckpt-EEEEE-SSSSS.h5 full-model files, written
 * atomically; after a new one is complete, all but the newest `keep` (at
 * least 2) are removed, so a complete one always exists. */
mxu_status mxu_checkpoint_save(const mxu_model *model, const char *dir,
                               const mxu_train_position *position, int keep);
/* One run a checkpoint directory: fit takes this lock on its
 * checkpoint_dir for its whole run (rank 0 under MPI), and a second run on
 * the same directory is refused naming the process that holds it. The
 * lock goes with the process; *handle is for mxu_checkpoint_unlock. */
mxu_status mxu_checkpoint_lock(const char *dir, int *handle);
void mxu_checkpoint_unlock(int handle);
/* Restores the newest checkpoint in DIR that loads; a truncated or corrupt
 * one is skipped. *found is 0 when DIR has none (not an error). skipped,
 * if not NULL, receives up to `skipped_size` bytes describing what was
 * skipped and why ("" when nothing was). */
mxu_status mxu_checkpoint_restore(mxu_model *model, const char *dir,
                                  mxu_train_position *position, int *found,
                                  char *skipped, size_t skipped_size);

#ifdef __cplusplus
}
#endif
#endif
