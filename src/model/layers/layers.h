/* layers.h — helpers the layer families share: the activation epilogue of
 * Conv2D and Dense, and shape formatting for error messages. */
#ifndef MXU_LAYERS_H
#define MXU_LAYERS_H

#include "model/model.h"

/* Conv2D and Dense fuse relu/sigmoid/tanh into the backend op; softmax
 * runs as a separate activation op over rows of `cols`. The epilogue uses
 * ops[1] and scratch[0] (pre-softmax values) and scratch[1] (the gradient
 * before the activation). Returns the activation to fuse into the op. */
mxu_status mxu_epilogue_plan(mxu_layer *layer, mxu_activation activation,
                             const mxu_backend *backend, int64_t rows, int cols,
                             mxu_arena *layout, mxu_activation *fused);
/* Where the op writes: y, or the pre-softmax buffer. */
float *mxu_epilogue_target(const mxu_layer *layer, mxu_activation activation,
                           const mxu_layer_run *run);
/* After the op: runs the softmax, if any. */
void mxu_epilogue_forward(const mxu_layer *layer, mxu_activation activation,
                          const mxu_layer_run *run);
/* The gradient with respect to the op's output before the activation. */
const float *mxu_epilogue_backward(const mxu_layer *layer,
                                   mxu_activation activation,
                                   const mxu_layer_run *run);
const float *mxu_epilogue_logits(const mxu_layer *layer,
                                 mxu_activation activation,
                                 const mxu_layer_run *run);

/* Shape inference of a 2-D window (Conv2D's kernel, a pool) sliding over
 * (height, width, channels): checks the sizes and sets out_shape to
 * (out_h, out_w, channels_out) (a TimeDistributed layer's steps first). A
 * sequence layer's window is 1 x size[1] over (steps, channels), its out_shape
 * (out_steps, channels_out). causal: whether the layer takes padding 'causal'
 * (Conv1D). */
mxu_status mxu_window_infer(mxu_layer *layer, const char *window,
                            const int size[2], const int strides[2],
                            mxu_padding padding, int causal, int channels_out);

/* The shape as the layer's 2-D kernels see it: a TimeDistributed layer's
 * without its steps (each an image of the batch), a sequence layer's
 * (steps, channels) the image (1, steps, channels); others' as is. */
mxu_shape mxu_image_shape(const mxu_layer *layer, const mxu_shape *shape);
/* A step's shape with a TimeDistributed layer's steps before it (the
 * shape itself for others). */
mxu_shape mxu_steps_shape(const mxu_layer *layer, mxu_shape step);

/* Whether Conv2D layers a and b (b reading a's output) may pass it in the
 * backend's own layout, for `batch` samples: both compute in it, and a's
 * activation is elementwise. */
int mxu_conv2d_chains(const mxu_layer *a, const mxu_layer *b,
                      const mxu_backend *backend, int batch);
/* Whether Conv2D layer `layer` (a node of its own, computing in bf16)
 * may read its input as a bf16 tensor for `batch` samples, the backend
 * taking it at no cost; and (*y_too) write its output so: linear (an
 * activation's backward would read y). */
int mxu_conv2d_bf16_tensors(const mxu_layer *layer, const mxu_backend *backend,
                            int batch, int *y_too);

/* The recurrent cells' activations (tanh, sigmoid, relu, linear, the
 * hard sigmoids): y = a(x) over count values (y may be x), and the slope
 * at the x that gave each y, from y. */
int mxu_rnn_activation_supported(mxu_activation a);
void mxu_rnn_activate(mxu_activation a, const float *x, float *y,
                      int64_t count);
void mxu_rnn_slope(mxu_activation a, const float *y, float *out, int64_t count);

/* An LSTM cell of u units (LSTM's and each pixel's of ConvLSTM): gates
 * (i, f, c, o before their activations in, activated out), c_prev (NULL:
 * zeros) into cell and h; backward, dh and dc (the step after's) in, the
 * gates' gradient before their activations into dg, dc the step
 * before's. tmp: 2 u floats. */
void mxu_lstm_cell_forward(mxu_activation act, mxu_activation rec, int64_t u,
                           float *gates, const float *c_prev, float *cell,
                           float *h);
void mxu_lstm_cell_backward(mxu_activation act, mxu_activation rec, int64_t u,
                            const float *gates, const float *c_prev,
                            const float *cell, const float *dh, float *dc,
                            float *dg, float *tmp);

/* A pooling layer's backend description for `batch` samples. */
mxu_pool2d_desc mxu_pool2d_describe(const mxu_layer *layer, int batch);

/* What layers without a plan, FLOPs or compute of their own share: a
 * plan that reserves nothing, no FLOPs (copies), and a view's forward and
 * backward (Flatten, Reshape), which copy only where compile gave the
 * output its own buffer (the input's gradient read by others too). */
mxu_status mxu_no_plan(mxu_layer *layer, const mxu_backend *backend, int batch,
                       mxu_arena *layout);
double mxu_no_flops(const mxu_layer *layer, const mxu_flops_step *step);
/* The config writer of a class with no options (Add, Identity). */
void mxu_write_nothing(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config);
/* An activation per element, forward (backward 0) or backward (1). */
double mxu_activation_cost(mxu_activation activation, int backward);
/* Conv2D and Dense: `outputs` values, each a dot product over `window`
 * inputs, with bias and fused activation (flops.c's counting rules). */
double mxu_weighted_flops(double outputs, double window, int use_bias,
                          mxu_activation activation,
                          const mxu_flops_step *step);
void mxu_view_forward(mxu_layer *layer, const mxu_layer_run *run);
void mxu_view_backward(mxu_layer *layer, const mxu_layer_run *run);

/* ---- Keras config (each class reads and writes its own) ---------------- */

/* The config keys of Conv2D and the other convolutions (Conv1D, Conv3D),
 * and of the transposed ones. */
extern const char *const mxu_conv_keys[];
extern const char *const mxu_conv_transpose_keys[];

/* The keys Conv2D and Dense share for their kernel and bias. */
#define MXU_WEIGHT_OPTION_KEYS                                                 \
  "kernel_initializer", "bias_initializer", "kernel_regularizer",              \
      "bias_regularizer", "activity_regularizer", "kernel_constraint",         \
      "bias_constraint", NULL

/* weight_initializer, weight_regularizer, weight_constraint (weight is
 * "kernel", "bias", "gamma", ...) into *options (each left as is when
 * absent). */
mxu_status mxu_config_weight_options(const mxu_json_where *where,
                                     const cJSON *config, const char *weight,
                                     mxu_weight_options *options);
/* A trainable weight's declaration from its options (fallback: the
 * layer's default initializer). */
mxu_param_decl mxu_weight_decl(const char *name, mxu_shape shape,
                               const mxu_weight_options *options,
                               mxu_initializer fallback);
/* first_regularizer, second_regularizer, activity_regularizer (null, when
 * activity), first_constraint, second_constraint, in Keras' order. */
void mxu_config_put_penalties(mxu_json_out *out, cJSON *config,
                              const char *first, const mxu_weight_options *a,
                              const char *second, const mxu_weight_options *b,
                              int activity);
/* first_initializer and second_initializer: each given one, or its
 * layer's default. */
void mxu_config_put_initializers(mxu_json_out *out, cJSON *config,
                                 const char *first, const mxu_initializer *a,
                                 mxu_initializer a_default, const char *second,
                                 const mxu_initializer *b,
                                 mxu_initializer b_default);
/* A window's size key (kernel_size, strides, dilation_rate, pool_size):
 * n or [a, b] into size; a sequence layer's n or [n] (Keras' tuple (n,))
 * into size[1], its window 1 x n over the image (1, steps, channels). The
 * writer gives each back as its Keras writes it. */
mxu_status mxu_config_window_size(const mxu_json_where *where,
                                  const cJSON *config, const char *key,
                                  int required, int sequence, int size[2]);
void mxu_config_put_window_size(mxu_json_out *out, cJSON *config,
                                const char *key, const int size[2],
                                int sequence);
/* "same", "valid" or "causal". */
const char *mxu_padding_name(mxu_padding padding);

/* Broadcasting a tensor of shape `in` (dims equal to `out`'s or 1) over
 * `out`, sample by sample: to_out copies x's values to every place they
 * repeat at; else sums a gradient over those places back into in's shape
 * (overwriting it). */
typedef struct mxu_spread {
  int64_t run, in_count, out_count;
  const mxu_shape *in, *out;
} mxu_spread;

mxu_spread mxu_spread_of(const mxu_shape *in, const mxu_shape *out);
void mxu_spread_move(const mxu_spread *p, int64_t batch, const float *from,
                     float *to, int to_out);

/* output_mask of the layers whose output keeps their input's mask. */
int mxu_input_mask(const mxu_layer *layer);

/* The output is the input's shape (any rank but 0). */
mxu_status mxu_same_shape_infer(mxu_layer *layer);

/* A dropout rate of the config (optional, as given when absent): in
 * [0, 1). */
mxu_status mxu_json_rate(const mxu_json_where *where, const cJSON *config,
                         const char *key, float *rate);

/* A config's "axis" naming the last axis of the layer's input: absent,
 * -1, or its index counting the batch (a list of one too); any other is
 * unsupported. */
mxu_status mxu_json_last_axis(const mxu_json_where *where, const cJSON *config,
                              const mxu_json_node *node);

/* One image (or a window of one: rows row_stride pixels apart) of h x w
 * pixels of ch channels resized to out_h x out_w as TensorFlow's resize
 * does (half-pixel centres), bilinear or nearest (resampling.c). */
void mxu_resize_image(const float *x, int h, int w, int row_stride, int ch,
                      float *y, int out_h, int out_w, int bilinear);

/* x (batch, h, w, c) resized to out_h x out_w as mxu_resize_image does,
 * for the pjrt backend (resampling.c). */
mxu_hlo_value mxu_emit_resize(mxu_emit *e, mxu_hlo_value x, int h, int w,
                              int out_h, int out_w, int bilinear);
/* A layer whose output the host computes in training (host_output): its
 * forward pass on the run, the output copied to out (pjrt's emit_noise);
 * and the input passed through in inference (its emit). */
int mxu_host_output(const mxu_layer *layer, const mxu_layer_run *run,
                    float *out);
mxu_hlo_value mxu_emit_host_output(const mxu_layer *layer, mxu_emit *e);

/* The values of the layer's input over its planned batch. */
int64_t mxu_batch_values(const mxu_layer *layer);

/* ---- attention (attention.c) -------------------------------------------- */

/* Dropout's keep factors (0 or 1 / (1 - rate)), `block` a row, for `rows`
 * rows of the logical replica from row_offset on, so that any slicing and
 * a device's draws (mxu_emit_dropped) give the same ones. */
void mxu_draw_keep(const mxu_layer_run *run, float *keep, int64_t rows,
                   int64_t block, float rate);
/* The softmax over scores' last axis (queries by keys: (..., tq, tv)),
 * the keys not allowed (after query i with causal; e->mask's padded
 * positions) weighing 0, and a padded query's whole row. */
mxu_hlo_value mxu_emit_attention_weights(mxu_emit *e, mxu_hlo_value scores,
                                         int causal);
/* In training with dropout, p times keep factors drawn as
 * mxu_draw_keep numbers them; else p. */
mxu_hlo_value mxu_emit_dropped(mxu_emit *e, mxu_hlo_value p, float rate);

/* ---- pjrt emitters (shared.c) ------------------------------------------ */

/* The input under the output's shape (Flatten, Reshape). */
mxu_hlo_value mxu_emit_view(const mxu_layer *layer, mxu_emit *e);
/* emit_noise for a layer that draws on the device (noise_is_stream): the
 * run's stream, its key and stream words, into out (NULL: it draws). */
int mxu_stream_noise(const mxu_layer_run *run, float *out);
/* A sequence layer's input as the image its 2-D ops read (a
 * TimeDistributed one's steps as images of the batch; others' as is), and
 * the image it gives back as the layer's output shape. */
mxu_hlo_value mxu_emit_image_input(const mxu_layer *layer, mxu_emit *e);
mxu_hlo_value mxu_emit_sequence_output(const mxu_layer *layer, mxu_emit *e,
                                       mxu_hlo_value y);

#endif
