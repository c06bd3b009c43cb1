/* volume.c — the layers of volumes (depth, height, width, channels):
 * Conv3D, MaxPooling3D and AveragePooling3D, built from the backends' 2-D
 * kernels rather than kernels of their own.
 *
 * A Conv3D is the sum over its kernel's depth taps of 2-D convolutions:
 * for tap i, the input's depth slices od * stride + i * dilation - pad
 * (zeros outside the volume) of every output depth od, gathered as batch
 * x out_depth images, convolved with the kernel's slice i, (kh, kw, in,
 * filters), which Keras' (kd, kh, kw, in, filters) kernel keeps whole.
 * A 3-D pooling is a 2-D pooling of each depth slice's (height, width),
 * then a pooling of depth over images (depth, height x width): the max of
 * maxima, and the average of averages, in-bounds cells weighing alike
 * since a window's in-bounds cells are the product of its axes'. And
 * ZeroPadding3D, Cropping3D and UpSampling3D, plain copies. */
#include "model/layers/layers.h"

#include <limits.h>
#include <string.h>

/* ---- shapes ---------------------------------------------------------------
 */

/* A window sliding from d x h x w x c to od x oh x ow: a pooling's, a
 * Conv3D's, or the Conv3D whose input gradient a Conv3DTranspose is (from
 * the transposed layer's output to its input). */
typedef struct volume {
  int d, h, w, c;   /* the window's input */
  int od, oh, ow;   /* its output */
  int front;        /* zeros before the depth ('same') */
  int size, stride; /* the window's depth */
  int dilation;     /* the kernel's, along depth */
} volume;

static int at_least_one(int v) { return v > 1 ? v : 1; }

static int is_transpose(const mxu_layer *layer) {
  return layer->cls == &mxu_conv3d_transpose_class;
}

static int is_conv(const mxu_layer *layer) {
  return layer->cls == &mxu_conv3d_class || is_transpose(layer);
}

static const int *sizes_of(const mxu_layer *layer) {
  return is_conv(layer) ? layer->config.conv3d.kernel_size
                        : layer->config.pool3d.pool_size;
}

static const int *strides_of(const mxu_layer *layer) {
  return is_conv(layer) ? layer->config.conv3d.strides
                        : layer->config.pool3d.strides;
}

static mxu_padding padding_of(const mxu_layer *layer) {
  return is_conv(layer) ? layer->config.conv3d.padding
                        : layer->config.pool3d.padding;
}

/* A window's span along axis a: a dilated kernel's (k - 1) d + 1. */
static int span(const mxu_layer *layer, int a) {
  int dilation =
      is_conv(layer) ? at_least_one(layer->config.conv3d.dilation_rate[a]) : 1;
  return (sizes_of(layer)[a] - 1) * dilation + 1;
}

static volume volume_of(const mxu_layer *layer) {
  const int64_t *in = layer->in_shape.dims, *out = layer->out_shape.dims;
  if (is_transpose(layer)) {
    const int64_t *swap = in;
    in = out, out = swap;
  }
  volume v = {(int)in[0],
              (int)in[1],
              (int)in[2],
              (int)in[3],
              (int)out[0],
              (int)out[1],
              (int)out[2],
              0,
              sizes_of(layer)[0],
              strides_of(layer)[0],
              1};
  if (is_conv(layer))
    v.dilation = at_least_one(layer->config.conv3d.dilation_rate[0]);
  int back;
  mxu_conv_output_size(v.d, span(layer, 0), v.stride, padding_of(layer),
                       &v.front, &back);
  return v;
}

/* (depth, height, width, channels) in, the window's output sizes out. */
static mxu_status volume_infer(mxu_layer *layer, const char *window,
                               int channels_out) {
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 4 || layer->time_steps)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: expects (depth, height, width, channels) input, got "
                    "%s",
                    layer->name, text);
  const int *size = sizes_of(layer), *strides = strides_of(layer);
  if (padding_of(layer) == MXU_CAUSAL)
    return mxu_fail(MXU_ERR_ARG, "%s: padding 'causal' is Conv1D's only",
                    layer->name);
  int64_t out[4];
  for (int a = 0; a < 3; a++) {
    if (size[a] <= 0 || strides[a] <= 0 || size[a] > MXU_MAX_WINDOW ||
        strides[a] > MXU_MAX_WINDOW)
      return mxu_fail(MXU_ERR_ARG,
                      "%s: %s size %dx%dx%d and strides %dx%dx%d must be in "
                      "1..%d (MXU_MAX_WINDOW)",
                      layer->name, window, size[0], size[1], size[2],
                      strides[0], strides[1], strides[2], MXU_MAX_WINDOW);
    out[a] = mxu_conv_output_size((int)layer->in_shape.dims[a], span(layer, a),
                                  strides[a], padding_of(layer), NULL, NULL);
    if (out[a] <= 0)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: input %s is smaller than the %dx%dx%d %s with "
                      "'valid' padding (use 'same' or a larger input)",
                      layer->name, text, size[0], size[1], size[2], window);
  }
  out[3] = channels_out ? channels_out : layer->in_shape.dims[3];
  layer->out_shape = mxu_shape_make(4, out);
  return MXU_OK;
}

/* ---- Conv3D ---------------------------------------------------------------
 * ops[0] the 2-D convolution of batch x out_depth images, ops[1] the
 * activation; scratch[0] every tap's gathered images, each tap's own
 * buffer kept from the forward pass to the backward (the backends may
 * keep a converted copy of an input by its address within a step: one
 * buffer refilled per tap would meet a stale copy), scratch[1] a tap's
 * output (forward) or its images' gradient (backward), scratch[2] the
 * output before the activation and scratch[3] its gradient. */

static int groups_of(const mxu_layer *layer) {
  return is_transpose(layer) ? 1 : at_least_one(layer->config.conv3d.groups);
}

static mxu_status conv3d_infer(mxu_layer *layer) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  if (c->filters <= 0)
    return mxu_fail(MXU_ERR_ARG, "%s: filters must be positive, got %d",
                    layer->name, c->filters);
  for (int a = 0; a < 3; a++)
    if (c->dilation_rate[a] <= 0 || c->dilation_rate[a] > MXU_MAX_WINDOW ||
        (c->dilation_rate[a] > 1 && c->strides[a] > 1))
      return mxu_fail(MXU_ERR_ARG,
                      "%s: dilation_rate %d must be in 1..%d, and 1 where "
                      "strides > 1 (as in Keras)",
                      layer->name, c->dilation_rate[a], MXU_MAX_WINDOW);
  int64_t in = layer->in_shape.rank == 4 ? layer->in_shape.dims[3] : 0;
  int g = groups_of(layer);
  if (in && (in % g || c->filters % g))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: groups %d must divide the input's %lld channels and "
                    "the %d filters",
                    layer->name, g, (long long)in, c->filters);
  return volume_infer(layer, "kernel", c->filters);
}

static int conv3d_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  int64_t kernel[5] = {c->kernel_size[0], c->kernel_size[1], c->kernel_size[2],
                       layer->in_shape.dims[3] / groups_of(layer), c->filters};
  decls[0] = mxu_weight_decl("kernel", mxu_shape_make(5, kernel), &c->kernel,
                             mxu_init_glorot_uniform());
  if (!c->use_bias) return 1;
  int64_t filters = c->filters;
  decls[1] = mxu_weight_decl("bias", mxu_shape_make(1, &filters), &c->bias,
                             mxu_init_zeros());
  return 2;
}

/* One depth tap's 2-D convolution over batch x out_depth images. */
static mxu_conv2d_desc tap_describe(const mxu_layer *layer, int batch) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  volume v = volume_of(layer);
  mxu_conv2d_desc d = {0};
  d.n = batch * v.od;
  d.in_h = v.h, d.in_w = v.w, d.in_c = v.c;
  d.out_h = v.oh, d.out_w = v.ow;
  d.out_c = is_transpose(layer) ? (int)layer->in_shape.dims[3] : c->filters;
  d.kernel_h = c->kernel_size[1], d.kernel_w = c->kernel_size[2];
  d.stride_h = c->strides[1], d.stride_w = c->strides[2];
  d.groups = groups_of(layer);
  d.dilation_h = at_least_one(c->dilation_rate[1]);
  d.dilation_w = at_least_one(c->dilation_rate[2]);
  mxu_conv_output_size(v.h, span(layer, 1), d.stride_h, c->padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(v.w, span(layer, 2), d.stride_w, c->padding, &d.pad_left,
                       &d.pad_right);
  d.activation = MXU_LINEAR;
  d.bf16 = layer->compiled->bf16;
  return d;
}

static mxu_status conv3d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  mxu_conv2d_desc d = tap_describe(layer, batch);
  volume v = volume_of(layer);
  size_t images = (size_t)d.n * (size_t)v.h * v.w * v.c * sizeof(float);
  size_t out = (size_t)d.n * (size_t)v.oh * v.ow * d.out_c * sizeof(float);
  mxu_node_plan *cl = layer->compiled;
  cl->scratch[0] = mxu_arena_reserve(
      layout, images * (size_t)layer->config.conv3d.kernel_size[0]);
  cl->scratch[1] = mxu_arena_reserve(layout, images > out ? images : out);
  const mxu_conv3d_config *c = &layer->config.conv3d;
  if (c->activation != MXU_LINEAR) { /* over the layer's output */
    int64_t cells = mxu_shape_count(&layer->out_shape) / c->filters * batch;
    mxu_activation_desc a = {c->activation, cells, c->filters,
                             mxu_activation_alpha(c->activation)};
    MXU_TRY(backend->activation_create(&a, &cl->ops[1]));
    size_t bytes = (size_t)(cells * c->filters) * sizeof(float);
    cl->scratch[2] = mxu_arena_reserve(layout, bytes);
    cl->scratch[3] = mxu_arena_reserve(layout, bytes);
  }
  return backend->conv2d_create(&d, &cl->ops[0]);
}

static float *scratch(const mxu_layer *layer, const mxu_layer_run *run, int k) {
  return (float *)(void *)(run->arena + layer->compiled->scratch[k]);
}

/* The output before the activation: y itself when linear. */
static float *pre_activation(const mxu_layer *layer, const mxu_layer_run *run) {
  return layer->config.conv3d.activation == MXU_LINEAR ? run->y
                                                       : scratch(layer, run, 2);
}

/* Tap i's images: for each sample and output depth, the input's depth
 * slice it reads, or zeros (padding). */
static void gather(const mxu_layer *layer, const float *x, int i,
                   float *images) {
  volume v = volume_of(layer);
  size_t slice = (size_t)v.h * v.w * v.c;
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int od = 0; od < v.od; od++) {
      int z = od * v.stride + i * v.dilation - v.front;
      float *to = images + ((size_t)n * v.od + od) * slice;
      if (z < 0 || z >= v.d)
        memset(to, 0, slice * sizeof *to);
      else
        memcpy(to, x + ((size_t)n * v.d + z) * slice, slice * sizeof *to);
    }
}

/* gather's transpose: each image's gradient added to its slice's. */
static void scatter_add(const mxu_layer *layer, const float *images, int i,
                        float *dx) {
  volume v = volume_of(layer);
  size_t slice = (size_t)v.h * v.w * v.c;
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int od = 0; od < v.od; od++) {
      int z = od * v.stride + i * v.dilation - v.front;
      if (z < 0 || z >= v.d) continue;
      const float *from = images + ((size_t)n * v.od + od) * slice;
      float *to = dx + ((size_t)n * v.d + z) * slice;
      for (size_t k = 0; k < slice; k++) to[k] += from[k];
    }
}

/* The kernel's slice of tap i: (kh, kw, in / groups, filters), a
 * Conv3DTranspose's (kh, kw, filters, in). */
static size_t tap_size(const mxu_layer *layer) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  return (size_t)c->kernel_size[1] * c->kernel_size[2] *
         (size_t)(layer->in_shape.dims[3] / groups_of(layer)) * c->filters;
}

static const float *tap_kernel(const mxu_layer *layer, const mxu_layer_run *run,
                               int i) {
  return run->w[0] + (size_t)i * tap_size(layer);
}

/* Tap i's gathered images. */
static float *tap_images(const mxu_layer *layer, const mxu_layer_run *run,
                         int i) {
  volume v = volume_of(layer);
  return scratch(layer, run, 0) +
         (size_t)i * layer->compiled->batch * v.od * v.h * v.w * v.c;
}

/* z + bias, through the activation into y (z is y when linear). */
static void finish_forward(const mxu_layer *layer, const mxu_layer_run *run,
                           float *z) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  int64_t count = mxu_shape_count(&layer->out_shape) * layer->compiled->batch;
  if (c->use_bias)
    for (int64_t k = 0; k < count; k++) z[k] += run->w[1][k % c->filters];
  if (c->activation != MXU_LINEAR)
    run->backend->activation_forward(run->ops[1], z, run->y);
}

/* The gradient before the activation; the bias's, its sum over the
 * output's cells (the taps' ops have no bias). */
static const float *start_backward(const mxu_layer *layer,
                                   const mxu_layer_run *run) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  const float *dz = run->dy;
  if (c->activation != MXU_LINEAR && !run->fused_softmax) {
    float *g = scratch(layer, run, 3);
    run->backend->activation_backward(run->ops[1], scratch(layer, run, 2),
                                      run->y, run->dy, g);
    dz = g;
  }
  if (c->use_bias) {
    int64_t count = mxu_shape_count(&layer->out_shape) * layer->compiled->batch;
    memset(run->dw[1], 0, (size_t)c->filters * sizeof(float));
    for (int64_t k = 0; k < count; k++) run->dw[1][k % c->filters] += dz[k];
  }
  return dz;
}

static void add_to(float *to, const float *from, int64_t count) {
  for (int64_t k = 0; k < count; k++) to[k] += from[k];
}

static void conv3d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float *part = scratch(layer, run, 1), *z = pre_activation(layer, run);
  int64_t count = mxu_shape_count(&layer->out_shape) * layer->compiled->batch;
  for (int i = 0; i < layer->config.conv3d.kernel_size[0]; i++) {
    float *images = tap_images(layer, run, i);
    gather(layer, run->x, i, images);
    run->backend->conv2d_forward(run->ops[0], images, tap_kernel(layer, run, i),
                                 NULL, i ? part : z);
    if (i) add_to(z, part, count);
  }
  finish_forward(layer, run, z);
}

static void conv3d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *dz = start_backward(layer, run);
  float *d_images = scratch(layer, run, 1);
  if (run->need_dx)
    memset(run->dx, 0,
           (size_t)mxu_shape_count(&layer->in_shape) * layer->compiled->batch *
               sizeof(float));
  for (int i = 0; i < layer->config.conv3d.kernel_size[0]; i++) {
    run->backend->conv2d_backward_weights(
        run->ops[0], tap_images(layer, run, i), dz,
        run->dw[0] + (size_t)i * tap_size(layer), NULL);
    if (!run->need_dx) continue;
    run->backend->conv2d_backward_data(run->ops[0], dz,
                                       tap_kernel(layer, run, i), d_images);
    scatter_add(layer, d_images, i, run->dx);
  }
}

/* Conv3DTranspose: the input gradient of the Conv3D D from its output to
 * its input (volume_of's window), tap by tap: D's backward data of x,
 * scattered to the output depths the tap reads; backward, D's forward
 * of the gathered gradient, and D's weight gradient with the roles of x
 * and dy exchanged. */
static void transpose3d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float *part = scratch(layer, run, 1), *z = pre_activation(layer, run);
  run->backend->conv2d_new_inputs(run->ops[0]);
  memset(z, 0,
         (size_t)(mxu_shape_count(&layer->out_shape) * layer->compiled->batch) *
             sizeof(float));
  for (int i = 0; i < layer->config.conv3d.kernel_size[0]; i++) {
    run->backend->conv2d_backward_data(run->ops[0], run->x,
                                       tap_kernel(layer, run, i), part);
    scatter_add(layer, part, i, z);
  }
  finish_forward(layer, run, z);
}

static void transpose3d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const float *dz = start_backward(layer, run);
  float *part = scratch(layer, run, 1);
  int64_t count = mxu_shape_count(&layer->in_shape) * layer->compiled->batch;
  for (int i = 0; i < layer->config.conv3d.kernel_size[0]; i++) {
    float *images = tap_images(layer, run, i);
    gather(layer, dz, i, images);
    run->backend->conv2d_backward_weights(
        run->ops[0], images, run->x, run->dw[0] + (size_t)i * tap_size(layer),
        NULL);
    if (!run->need_dx) continue;
    run->backend->conv2d_forward(run->ops[0], images, tap_kernel(layer, run, i),
                                 NULL, i ? part : run->dx);
    if (i) add_to(run->dx, part, count);
  }
}

static const float *conv3d_logits(const mxu_layer *layer,
                                  const mxu_layer_run *run) {
  return layer->config.conv3d.activation == MXU_SOFTMAX ? scratch(layer, run, 2)
                                                        : NULL;
}

/* Each output reads kd * kh * kw * (in / groups) inputs. */
static double conv3d_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  double window = (double)c->kernel_size[0] * c->kernel_size[1] *
                  c->kernel_size[2] *
                  (double)(layer->in_shape.dims[3] / groups_of(layer));
  return mxu_weighted_flops((double)mxu_shape_count(&layer->out_shape), window,
                            c->use_bias, c->activation, step);
}

/* Tap i's kernel (kh, kw, i, o) of the kernel (kd, kh, kw, i, o). */
static mxu_hlo_value emit_tap_kernel(mxu_hlo *h, mxu_hlo_value kernel, int i) {
  const mxu_hlo_shape *ks = mxu_hlo_shape_of(h, kernel);
  int64_t k[5] = {ks->dims[0], ks->dims[1], ks->dims[2], ks->dims[3],
                  ks->dims[4]};
  const int64_t start[5] = {i, 0, 0, 0, 0},
                limit[5] = {i + 1, k[1], k[2], k[3], k[4]},
                ones[5] = {1, 1, 1, 1, 1};
  return mxu_hlo_reshape(h, mxu_hlo_slice(h, kernel, start, limit, ones),
                         mxu_hlo_shape_make(MXU_HLO_F32, 4, k + 1));
}

static mxu_hlo_window tap_window(const mxu_conv2d_desc *d) {
  return (mxu_hlo_window){.stride = {d->stride_h, d->stride_w},
                          .pad_low = {d->pad_top, d->pad_left},
                          .pad_high = {d->pad_bottom, d->pad_right},
                          .lhs_dilation = {1, 1},
                          .rhs_dilation = {d->dilation_h, d->dilation_w},
                          .feature_groups = d->groups};
}

static mxu_hlo_value emit_bias_activation(const mxu_layer *layer, mxu_emit *e,
                                          mxu_hlo_value y) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  if (c->use_bias) y = mxu_emit_bias(e, y, e->w[1]);
  return mxu_emit_activation(e, c->activation,
                             mxu_activation_alpha(c->activation), y);
}

/* The same sum of taps: each tap's depth slices a strided slice of the
 * input padded along depth, convolved as batch x out_depth images. */
static mxu_hlo_value conv3d_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  mxu_hlo *h = e->h;
  volume v = volume_of(layer);
  mxu_conv2d_desc d = tap_describe(layer, e->batch);
  int64_t n = e->batch;
  int front, back;
  mxu_conv_output_size(v.d, span(layer, 0), v.stride, c->padding, &front,
                       &back);
  const int64_t low[5] = {0, front, 0, 0, 0}, high[5] = {0, back, 0, 0, 0},
                none[5] = {0};
  mxu_hlo_value x = mxu_hlo_pad(h, e->in[0], 0.0, low, high, none);
  int64_t images[4] = {n * v.od, v.h, v.w, v.c};
  mxu_hlo_window w = tap_window(&d);
  mxu_hlo_value y = 0;
  for (int i = 0; i < c->kernel_size[0]; i++) {
    const int64_t start[5] = {0, (int64_t)i * v.dilation, 0, 0, 0},
                  limit[5] = {n,
                              (int64_t)i * v.dilation +
                                  (int64_t)(v.od - 1) * v.stride + 1,
                              v.h, v.w, v.c},
                  stride[5] = {1, v.stride, 1, 1, 1};
    mxu_hlo_value slices =
        mxu_hlo_reshape(h, mxu_hlo_slice(h, x, start, limit, stride),
                        mxu_hlo_shape_make(MXU_HLO_F32, 4, images));
    mxu_hlo_value part = mxu_emit_result(
        e, mxu_hlo_convolution(
               h, mxu_emit_compute(e, slices),
               mxu_emit_compute(e, emit_tap_kernel(h, e->w[0], i)), &w));
    y = y ? mxu_hlo_add(h, y, part) : part;
  }
  y = mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
  return emit_bias_activation(layer, e, y);
}

/* Each tap's transposed 2-D convolution of the input's slices, spread
 * along depth to where the tap writes (stride - 1 zeros between, the
 * tap's offset before) on a canvas of every depth the taps reach, of
 * which the output is the part from D's padding on. */
static mxu_hlo_value transpose3d_emit(const mxu_layer *layer, mxu_emit *e) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  mxu_hlo *h = e->h;
  volume v = volume_of(layer); /* D: from the output (v.d) to the input */
  mxu_conv2d_desc d = tap_describe(layer, e->batch);
  mxu_hlo_window w = tap_window(&d);
  int64_t n = e->batch, reach = (int64_t)(v.od - 1) * v.stride + 1 +
                                (int64_t)(c->kernel_size[0] - 1) * v.dilation;
  int64_t canvas = reach > v.front + v.d ? reach : v.front + v.d;
  const int64_t out_hw[2] = {v.h, v.w};
  int64_t images[4] = {n * v.od, v.oh, v.ow, layer->in_shape.dims[3]};
  int64_t slices[5] = {n, v.od, v.h, v.w, v.c};
  mxu_hlo_value x =
      mxu_hlo_reshape(h, e->in[0], mxu_hlo_shape_make(MXU_HLO_F32, 4, images));
  mxu_hlo_value y = 0;
  for (int i = 0; i < c->kernel_size[0]; i++) {
    mxu_hlo_value part = mxu_emit_result(
        e,
        mxu_hlo_convolution_backward_data(
            h, mxu_emit_compute(e, x),
            mxu_emit_compute(e, emit_tap_kernel(h, e->w[0], i)), &w, out_hw));
    int64_t at = (int64_t)i * v.dilation;
    const int64_t low[5] = {0, at, 0, 0, 0},
                  high[5] = {0,
                             canvas - at - ((int64_t)(v.od - 1) * v.stride + 1),
                             0, 0, 0},
                  interior[5] = {0, v.stride - 1, 0, 0, 0};
    part = mxu_hlo_pad(
        h, mxu_hlo_reshape(h, part, mxu_hlo_shape_make(MXU_HLO_F32, 5, slices)),
        0.0, low, high, interior);
    y = y ? mxu_hlo_add(h, y, part) : part;
  }
  const int64_t start[5] = {0, v.front, 0, 0, 0},
                limit[5] = {n, v.front + v.d, v.h, v.w, v.c},
                ones[5] = {1, 1, 1, 1, 1};
  return emit_bias_activation(layer, e,
                              mxu_hlo_slice(h, y, start, limit, ones));
}

/* Conv3D's keys, Conv3DTranspose's too (output_padding refused, as
 * Conv2DTranspose's). */
static mxu_status read_conv3d_of(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name, int transpose) {
  mxu_conv3d_config c = mxu_conv3d_defaults(0, 1, 1, 1);
  c.name = name;
  if (transpose)
    MXU_TRY(mxu_json_require_null(where, config, "output_padding"));
  MXU_TRY(mxu_json_int(where, config, "filters", MXU_JSON_REQUIRED, 1, INT_MAX,
                       &c.filters));
  MXU_TRY(mxu_json_int_triple(where, config, "kernel_size", MXU_JSON_REQUIRED,
                              c.kernel_size));
  MXU_TRY(mxu_json_int_triple(where, config, "strides", MXU_JSON_OPTIONAL,
                              c.strides));
  MXU_TRY(mxu_json_padding(where, config, &c.padding));
  MXU_TRY(mxu_json_data_format(where, config));
  MXU_TRY(mxu_json_int_triple(where, config, "dilation_rate", MXU_JSON_OPTIONAL,
                              c.dilation_rate));
  MXU_TRY(mxu_json_int(where, config, "groups", MXU_JSON_OPTIONAL, 1, INT_MAX,
                       &c.groups));
  MXU_TRY(mxu_json_activation(where, config, "activation",
                              node->model->keras2_names, &c.activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &c.use_bias));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c.bias));
  return mxu_json_applied(
      where, node,
      (transpose ? mxu_apply_conv3d_transpose
                 : mxu_apply_conv3d)(node->model, &c, node->inputs[0]));
}

static mxu_status read_conv3d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name) {
  return read_conv3d_of(where, config, node, name, 0);
}

static mxu_status read_conv3d_transpose(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node, const char *name) {
  return read_conv3d_of(where, config, node, name, 1);
}

static void write_conv3d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  int dilation[3] = {at_least_one(c->dilation_rate[0]),
                     at_least_one(c->dilation_rate[1]),
                     at_least_one(c->dilation_rate[2])};
  mxu_json_put_number(out, config, "filters", c->filters);
  mxu_json_put_triple(out, config, "kernel_size", c->kernel_size);
  mxu_json_put_triple(out, config, "strides", c->strides);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(c->padding));
  mxu_json_put_string(out, config, "data_format", "channels_last");
  mxu_json_put_triple(out, config, "dilation_rate", dilation);
  /* Keras 3's Conv3DTranspose takes no groups (tf.keras 2's inherits
   * Conv3D's). */
  if (!(out->keras3 && is_transpose(layer)))
    mxu_json_put_number(out, config, "groups", groups_of(layer));
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(c->activation));
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  mxu_config_put_initializers(out, config, "kernel", &c->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &c->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "bias", &c->bias,
                           1);
}

static const char *const conv3d_aliases[] = {"Convolution3D", NULL};

const mxu_layer_class mxu_conv3d_class = {
    .class_name = "Conv3D",
    .aliases = conv3d_aliases,
    .config_keys = mxu_conv_keys,
    .read_config = read_conv3d,
    .write_config = write_conv3d,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = conv3d_infer,
    .declare = conv3d_declare,
    .plan = conv3d_plan,
    .forward = conv3d_forward,
    .backward = conv3d_backward,
    .logits = conv3d_logits,
    .flops = conv3d_flops,
    .emit = conv3d_emit,
};

/* Keras' sizes: in x stride ('same'), plus max(span - stride, 0)
 * ('valid'). */
static mxu_status transpose3d_infer(mxu_layer *layer) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 4 || layer->time_steps)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: expects (depth, height, width, channels) input, got "
                    "%s",
                    layer->name, text);
  if (c->filters <= 0 || at_least_one(c->groups) != 1 ||
      c->padding == MXU_CAUSAL)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: filters %d must be positive, groups 1, padding "
                    "valid or same",
                    layer->name, c->filters);
  int64_t out[4] = {0, 0, 0, c->filters};
  for (int a = 0; a < 3; a++) {
    int k = c->kernel_size[a], st = c->strides[a], dil = c->dilation_rate[a];
    if (k < 1 || st < 1 || dil < 1 || k > MXU_MAX_WINDOW ||
        st > MXU_MAX_WINDOW || dil > MXU_MAX_WINDOW || (dil > 1 && st > 1))
      return mxu_fail(MXU_ERR_ARG,
                      "%s: kernel %d, stride %d and dilation %d must be in "
                      "1..%d, the dilation 1 where the stride is not",
                      layer->name, k, st, dil, MXU_MAX_WINDOW);
    int64_t in = layer->in_shape.dims[a], extent = span(layer, a);
    out[a] = c->padding == MXU_SAME ? in * st
                                    : in * st + (extent > st ? extent - st : 0);
    if (out[a] > 1 << 20)
      return mxu_fail(MXU_ERR_SHAPE, "%s: output too large", layer->name);
  }
  layer->out_shape = mxu_shape_make(4, out);
  return MXU_OK;
}

/* Keras' (kd, kh, kw, filters, in). */
static int transpose3d_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  int64_t kernel[5] = {c->kernel_size[0], c->kernel_size[1], c->kernel_size[2],
                       c->filters, layer->in_shape.dims[3]};
  decls[0] = mxu_weight_decl("kernel", mxu_shape_make(5, kernel), &c->kernel,
                             mxu_init_glorot_uniform());
  if (!c->use_bias) return 1;
  int64_t filters = c->filters;
  decls[1] = mxu_weight_decl("bias", mxu_shape_make(1, &filters), &c->bias,
                             mxu_init_zeros());
  return 2;
}

/* What D costs, its output being this layer's input. */
static double transpose3d_flops(const mxu_layer *layer,
                                const mxu_flops_step *step) {
  const mxu_conv3d_config *c = &layer->config.conv3d;
  double window = (double)c->kernel_size[0] * c->kernel_size[1] *
                  c->kernel_size[2] * c->filters;
  return mxu_weighted_flops((double)mxu_shape_count(&layer->in_shape), window,
                            c->use_bias, c->activation, step);
}

static const char *const transpose3d_aliases[] = {"Convolution3DTranspose",
                                                  NULL};

const mxu_layer_class mxu_conv3d_transpose_class = {
    .class_name = "Conv3DTranspose",
    .aliases = transpose3d_aliases,
    .config_keys = mxu_conv_transpose_keys,
    .read_config = read_conv3d_transpose,
    .write_config = write_conv3d,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = transpose3d_infer,
    .declare = transpose3d_declare,
    .plan = conv3d_plan,
    .forward = transpose3d_forward,
    .backward = transpose3d_backward,
    .logits = conv3d_logits,
    .flops = transpose3d_flops,
    .emit = transpose3d_emit,
};

/* ---- MaxPooling3D, AveragePooling3D ---------------------------------------
 * ops[0] pools each depth slice's (height, width), ops[1] the depth of
 * images (depth, out_h x out_w); scratch[0] the slices' pools, [1] and
 * [2] the ops' workspaces, [3] the slices' pools' gradient. */

static mxu_status pool3d_infer(mxu_layer *layer) {
  return volume_infer(layer, "pool", 0);
}

static mxu_pool2d_desc pool_stage(const mxu_layer *layer, int batch,
                                  int depth) {
  const mxu_pool3d_config *c = &layer->config.pool3d;
  volume v = volume_of(layer);
  mxu_pool2d_desc d = {0};
  d.c = v.c;
  d.is_max = layer->cls == &mxu_max_pooling3d_class;
  if (depth) { /* images (depth, out_h x out_w), windows (size, 1) */
    d.n = batch, d.in_h = v.d, d.in_w = v.oh * v.ow;
    d.out_h = v.od, d.out_w = d.in_w;
    d.pool_h = c->pool_size[0], d.pool_w = 1;
    d.stride_h = c->strides[0], d.stride_w = 1;
    mxu_conv_output_size(v.d, d.pool_h, d.stride_h, c->padding, &d.pad_top,
                         &d.pad_bottom);
    return d;
  }
  d.n = batch * v.d, d.in_h = v.h, d.in_w = v.w;
  d.out_h = v.oh, d.out_w = v.ow;
  d.pool_h = c->pool_size[1], d.pool_w = c->pool_size[2];
  d.stride_h = c->strides[1], d.stride_w = c->strides[2];
  mxu_conv_output_size(v.h, d.pool_h, d.stride_h, c->padding, &d.pad_top,
                       &d.pad_bottom);
  mxu_conv_output_size(v.w, d.pool_w, d.stride_w, c->padding, &d.pad_left,
                       &d.pad_right);
  return d;
}

static mxu_status pool3d_plan(mxu_layer *layer, const mxu_backend *backend,
                              int batch, mxu_arena *layout) {
  volume v = volume_of(layer);
  size_t mid = (size_t)batch * v.d * v.oh * v.ow * v.c * sizeof(float);
  mxu_node_plan *cl = layer->compiled;
  for (int s = 0; s < 2; s++) {
    mxu_pool2d_desc d = pool_stage(layer, batch, s);
    MXU_TRY(backend->pool2d_create(&d, &cl->ops[s]));
    size_t bytes = backend->pool2d_workspace_bytes(cl->ops[s]);
    cl->scratch[1 + s] = bytes ? mxu_arena_reserve(layout, bytes) : 0;
  }
  cl->scratch[0] = mxu_arena_reserve(layout, mid);
  cl->scratch[3] = mxu_arena_reserve(layout, mid);
  return MXU_OK;
}

/* Stage s's workspace, NULL where its op keeps none. */
static void *pool_workspace(const mxu_layer *layer, const mxu_layer_run *run,
                            int s) {
  return run->backend->pool2d_workspace_bytes(run->ops[s])
             ? run->arena + layer->compiled->scratch[1 + s]
             : NULL;
}

static void pool3d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  float *mid = scratch(layer, run, 0);
  for (int s = 0; s < 2; s++)
    run->backend->pool2d_forward(
        run->ops[s], run->training, s ? mid : run->x, s ? run->y : mid,
        run->training ? pool_workspace(layer, run, s) : NULL);
}

static void pool3d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  float *mid = scratch(layer, run, 0), *dmid = scratch(layer, run, 3);
  run->backend->pool2d_backward(run->ops[1], mid, run->y, run->dy,
                                pool_workspace(layer, run, 1), dmid);
  run->backend->pool2d_backward(run->ops[0], run->x, mid, dmid,
                                pool_workspace(layer, run, 0), run->dx);
}

/* Max: window - 1 comparisons per output; average: window adds and a
 * division (backward as the 2-D poolings count). */
static double pool3d_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const int *p = layer->config.pool3d.pool_size;
  double window = (double)p[0] * p[1] * p[2];
  double outputs = (double)mxu_shape_count(&layer->out_shape);
  if (layer->cls == &mxu_max_pooling3d_class)
    return outputs * (window - 1 + (step->need_dx ? 1 : 0));
  return outputs * (window + (step->need_dx ? window + 1 : 0));
}

/* A stage as reduce_window: the max, or the sum over the in-bounds
 * count. */
static mxu_hlo_value emit_stage(mxu_hlo *h, mxu_hlo_value x,
                                const mxu_pool2d_desc *d) {
  mxu_hlo_window w = {.size = {d->pool_h, d->pool_w},
                      .stride = {d->stride_h, d->stride_w},
                      .pad_low = {d->pad_top, d->pad_left},
                      .pad_high = {d->pad_bottom, d->pad_right},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1}};
  if (d->is_max) return mxu_hlo_reduce_window(h, x, MXU_HLO_MAX, &w);
  mxu_hlo_value sum = mxu_hlo_reduce_window(h, x, MXU_HLO_SUM, &w);
  mxu_hlo_value count =
      mxu_hlo_reduce_window(h, mxu_hlo_full_like(h, x, 1.0), MXU_HLO_SUM, &w);
  return mxu_hlo_binary(h, MXU_HLO_DIVIDE, sum, count);
}

static mxu_hlo_value pool3d_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value y = e->in[0];
  for (int s = 0; s < 2; s++) {
    mxu_pool2d_desc d = pool_stage(layer, e->batch, s);
    int64_t image[4] = {d.n, d.in_h, d.in_w, d.c};
    y = emit_stage(
        h, mxu_hlo_reshape(h, y, mxu_hlo_shape_make(MXU_HLO_F32, 4, image)),
        &d);
  }
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

static const char *const pool3d_keys[] = {"pool_size", "padding", "strides",
                                          "data_format", NULL};

/* Keras: strides None means the pool size. */
static mxu_status read_pool3d(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name,
                              int is_max) {
  mxu_pool3d_config c = mxu_pool3d_defaults(2);
  c.name = name;
  MXU_TRY(mxu_json_int_triple(where, config, "pool_size", MXU_JSON_OPTIONAL,
                              c.pool_size));
  memcpy(c.strides, c.pool_size, sizeof c.strides);
  const cJSON *strides = mxu_json_get(config, "strides");
  if (strides && !cJSON_IsNull(strides))
    MXU_TRY(mxu_json_int_triple(where, config, "strides", MXU_JSON_OPTIONAL,
                                c.strides));
  MXU_TRY(mxu_json_padding(where, config, &c.padding));
  MXU_TRY(mxu_json_data_format(where, config));
  mxu_tensor_id x = node->inputs[0];
  return mxu_json_applied(
      where, node,
      is_max ? mxu_apply_max_pooling3d(node->model, &c, x)
             : mxu_apply_average_pooling3d(node->model, &c, x));
}

static mxu_status read_max_pooling3d(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  return read_pool3d(where, config, node, name, 1);
}

static mxu_status read_average_pooling3d(const mxu_json_where *where,
                                         const cJSON *config,
                                         mxu_json_node *node,
                                         const char *name) {
  return read_pool3d(where, config, node, name, 0);
}

static void write_pool3d(mxu_json_out *out, const mxu_layer *layer,
                         cJSON *config) {
  const mxu_pool3d_config *c = &layer->config.pool3d;
  mxu_json_put_triple(out, config, "pool_size", c->pool_size);
  mxu_json_put_string(out, config, "padding", mxu_padding_name(c->padding));
  mxu_json_put_triple(out, config, "strides", c->strides);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static const char *const max_pool3d_aliases[] = {"MaxPool3D", NULL};
static const char *const average_pool3d_aliases[] = {"AvgPool3D", NULL};

const mxu_layer_class mxu_max_pooling3d_class = {
    .class_name = "MaxPooling3D",
    .aliases = max_pool3d_aliases,
    .config_keys = pool3d_keys,
    .read_config = read_max_pooling3d,
    .write_config = write_pool3d,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool3d_infer,
    .plan = pool3d_plan,
    .forward = pool3d_forward,
    .backward = pool3d_backward,
    .flops = pool3d_flops,
    .emit = pool3d_emit,
};

const mxu_layer_class mxu_average_pooling3d_class = {
    .class_name = "AveragePooling3D",
    .aliases = average_pool3d_aliases,
    .config_keys = pool3d_keys,
    .read_config = read_average_pooling3d,
    .write_config = write_pool3d,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = pool3d_infer,
    .plan = pool3d_plan,
    .forward = pool3d_forward,
    .backward = pool3d_backward,
    .flops = pool3d_flops,
    .emit = pool3d_emit,
};

/* ---- ZeroPadding3D, Cropping3D, UpSampling3D --------------------------------
 * Each output cell (a channel vector) copies one input cell or is zero:
 * plain loops (each touches every value once); backward adds each output
 * cell's gradient into the cell it copied. */

static int is_padding(const mxu_layer *layer) {
  return layer->cls == &mxu_zero_padding3d_class;
}

static int is_upsampling(const mxu_layer *layer) {
  return layer->cls == &mxu_upsampling3d_class;
}

static mxu_status resize3d_infer(mxu_layer *layer) {
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 4 || layer->time_steps)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: expects (depth, height, width, channels) input, got "
                    "%s",
                    layer->name, text);
  int64_t out[4];
  out[3] = layer->in_shape.dims[3];
  for (int a = 0; a < 3; a++) {
    int64_t in = layer->in_shape.dims[a];
    if (is_upsampling(layer)) {
      int size = layer->config.upsampling3d.size[a];
      if (size < 1 || size > MXU_MAX_WINDOW)
        return mxu_fail(MXU_ERR_ARG, "%s: size %d must be in 1..%d",
                        layer->name, size, MXU_MAX_WINDOW);
      out[a] = in * size;
      continue;
    }
    const int *m = layer->config.margins3d.margins[a];
    if (m[0] < 0 || m[1] < 0 || m[0] > 1 << 20 || m[1] > 1 << 20)
      return mxu_fail(MXU_ERR_ARG, "%s: margins %d and %d must be in 0..%d",
                      layer->name, m[0], m[1], 1 << 20);
    out[a] = is_padding(layer) ? in + m[0] + m[1] : in - m[0] - m[1];
    if (out[a] < 1)
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: cropping %d and %d leaves nothing of the input %s",
                      layer->name, m[0], m[1], text);
  }
  layer->out_shape = mxu_shape_make(4, out);
  return MXU_OK;
}

/* The input cell output cell o copies along axis a, or -1 (a zero). */
static int64_t source_along(const mxu_layer *layer, int a, int64_t o) {
  if (is_upsampling(layer)) return o / layer->config.upsampling3d.size[a];
  int64_t before = layer->config.margins3d.margins[a][0];
  int64_t i = is_padding(layer) ? o - before : o + before;
  return i >= 0 && i < layer->in_shape.dims[a] ? i : -1;
}

/* Forward (dy NULL: x into y) or backward (dy into dx), sample by
 * sample, cell by cell. */
static void resize3d_run(const mxu_layer *layer, const mxu_layer_run *run,
                         const float *dy) {
  const int64_t *in = layer->in_shape.dims, *out = layer->out_shape.dims;
  int64_t c = in[3], in_cells = in[0] * in[1] * in[2];
  int64_t out_cells = out[0] * out[1] * out[2];
  if (dy)
    memset(run->dx, 0,
           (size_t)(layer->compiled->batch * in_cells * c) * sizeof(float));
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    for (int64_t od = 0; od < out[0]; od++)
      for (int64_t oh = 0; oh < out[1]; oh++)
        for (int64_t ow = 0; ow < out[2]; ow++) {
          int64_t id = source_along(layer, 0, od),
                  ih = source_along(layer, 1, oh),
                  iw = source_along(layer, 2, ow);
          int64_t o = n * out_cells + (od * out[1] + oh) * out[2] + ow;
          int inside = id >= 0 && ih >= 0 && iw >= 0;
          int64_t i = n * in_cells + (id * in[1] + ih) * in[2] + iw;
          if (dy) {
            for (int64_t k = 0; inside && k < c; k++)
              run->dx[i * c + k] += dy[o * c + k];
          } else if (inside) {
            memcpy(run->y + o * c, run->x + i * c, (size_t)c * sizeof(float));
          } else {
            memset(run->y + o * c, 0, (size_t)c * sizeof(float));
          }
        }
}

static void resize3d_forward(mxu_layer *layer, const mxu_layer_run *run) {
  resize3d_run(layer, run, NULL);
}

static void resize3d_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (run->need_dx) resize3d_run(layer, run, run->dy);
}

/* Padding a pad, cropping a slice; upsampling each axis in turn, a
 * broadcast along a new axis after it merged into it. */
static mxu_hlo_value resize3d_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  mxu_hlo_value x = e->in[0];
  const int64_t *in = layer->in_shape.dims, *out = layer->out_shape.dims;
  int64_t n = e->batch;
  if (!is_upsampling(layer)) {
    const int(*m)[2] = layer->config.margins3d.margins;
    int64_t low[5] = {0, m[0][0], m[1][0], m[2][0], 0},
            high[5] = {0, m[0][1], m[1][1], m[2][1], 0}, none[5] = {0};
    if (is_padding(layer)) return mxu_hlo_pad(h, x, 0.0, low, high, none);
    int64_t limit[5] = {n, m[0][0] + out[0], m[1][0] + out[1], m[2][0] + out[2],
                        in[3]},
            ones[5] = {1, 1, 1, 1, 1};
    return mxu_hlo_slice(h, x, low, limit, ones);
  }
  int64_t dims[5] = {n, in[0], in[1], in[2], in[3]};
  for (int a = 0; a < 3; a++) {
    int size = layer->config.upsampling3d.size[a];
    /* (n, ..., axis, 1, ...) -> (n, ..., axis, size, ...) -> merged */
    int64_t spread[6], keep[5];
    for (int d = 0; d < 6; d++)
      spread[d] = d == a + 2 ? size : dims[d < a + 2 ? d : d - 1];
    for (int d = 0; d < 5; d++) keep[d] = d < a + 2 ? d : d + 1;
    x = mxu_hlo_broadcast(h, x, mxu_hlo_shape_make(MXU_HLO_F32, 6, spread),
                          keep);
    dims[a + 1] *= size;
    x = mxu_hlo_reshape(h, x, mxu_hlo_shape_make(MXU_HLO_F32, 5, dims));
  }
  return x;
}

/* padding (cropping): n, [d, h, w] (each both ends), or [[d0, d1], [h0,
 * h1], [w0, w1]]. */
static mxu_status read_margins3d(const mxu_json_where *where,
                                 const cJSON *config, const char *key,
                                 int fallback, int margins[3][2]) {
  const cJSON *v = mxu_json_get(config, key);
  for (int a = 0; a < 3; a++) margins[a][0] = margins[a][1] = fallback;
  if (!v) return MXU_OK;
  int n;
  if (cJSON_IsNumber(v) && (n = (int)v->valuedouble) == v->valuedouble &&
      n >= 0) {
    for (int a = 0; a < 3; a++) margins[a][0] = margins[a][1] = n;
    return MXU_OK;
  }
  const cJSON *e =
      cJSON_IsArray(v) && cJSON_GetArraySize(v) == 3 ? v->child : NULL;
  for (int a = 0; e && a < 3; a++, e = e->next) {
    const cJSON *first = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2
                             ? e->child
                             : e,
                *second = first == e ? e : first->next;
    if (!cJSON_IsNumber(first) || !cJSON_IsNumber(second) ||
        first->valuedouble != (int)first->valuedouble ||
        second->valuedouble != (int)second->valuedouble ||
        first->valuedouble < 0 || second->valuedouble < 0)
      break;
    margins[a][0] = (int)first->valuedouble;
    margins[a][1] = (int)second->valuedouble;
    if (a == 2) return MXU_OK;
  }
  char text[96];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_FORMAT,
                       "%s %s must be n, [d, h, w] or [[d0, d1], [h0, h1], "
                       "[w0, w1]] of integers >= 0",
                       key, text);
}

static mxu_status read_zero_padding3d(const mxu_json_where *where,
                                      const cJSON *config, mxu_json_node *node,
                                      const char *name) {
  mxu_margins3d_config c = {name, {{0}}};
  MXU_TRY(read_margins3d(where, config, "padding", 1, c.margins));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_zero_padding3d(node->model, &c, node->inputs[0]));
}

static mxu_status read_cropping3d(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  mxu_margins3d_config c = {name, {{0}}};
  MXU_TRY(read_margins3d(where, config, "cropping", 1, c.margins));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_cropping3d(node->model, &c, node->inputs[0]));
}

static void write_margins3d(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  cJSON *list = cJSON_CreateArray();
  for (int a = 0; list && a < 3; a++)
    cJSON_AddItemToArray(
        list, cJSON_CreateIntArray(layer->config.margins3d.margins[a], 2));
  mxu_json_put(out, config, is_padding(layer) ? "padding" : "cropping", list);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static mxu_status read_upsampling3d(const mxu_json_where *where,
                                    const cJSON *config, mxu_json_node *node,
                                    const char *name) {
  mxu_upsampling3d_config c = {name, {2, 2, 2}};
  MXU_TRY(
      mxu_json_int_triple(where, config, "size", MXU_JSON_OPTIONAL, c.size));
  MXU_TRY(mxu_json_data_format(where, config));
  return mxu_json_applied(
      where, node, mxu_apply_upsampling3d(node->model, &c, node->inputs[0]));
}

static void write_upsampling3d(mxu_json_out *out, const mxu_layer *layer,
                               cJSON *config) {
  mxu_json_put_triple(out, config, "size", layer->config.upsampling3d.size);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static const char *const zero_padding3d_keys[] = {"padding", "data_format",
                                                  NULL};
static const char *const cropping3d_keys[] = {"cropping", "data_format", NULL};
static const char *const upsampling3d_keys[] = {"size", "data_format", NULL};

#define RESIZE3D_CLASS(symbol, keras_name, keys, reader, writer)               \
  const mxu_layer_class symbol = {.class_name = keras_name,                    \
                                  .config_keys = keys,                         \
                                  .read_config = reader,                       \
                                  .write_config = writer,                      \
                                  .min_inputs = 1,                             \
                                  .max_inputs = 1,                             \
                                  .infer = resize3d_infer,                     \
                                  .plan = mxu_no_plan,                         \
                                  .flops = mxu_no_flops,                       \
                                  .forward = resize3d_forward,                 \
                                  .backward = resize3d_backward,               \
                                  .emit = resize3d_emit}

RESIZE3D_CLASS(mxu_zero_padding3d_class, "ZeroPadding3D", zero_padding3d_keys,
               read_zero_padding3d, write_margins3d);
RESIZE3D_CLASS(mxu_cropping3d_class, "Cropping3D", cropping3d_keys,
               read_cropping3d, write_margins3d);
RESIZE3D_CLASS(mxu_upsampling3d_class, "UpSampling3D", upsampling3d_keys,
               read_upsampling3d, write_upsampling3d);
