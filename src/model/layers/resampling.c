/* resampling.c — UpSampling2D and Resizing: nearest or bilinear as
 * TensorFlow's resize computes them (half-pixel centres: output pixel o
 * reads input (o + 0.5) * in / out - 0.5, its two neighbours clamped to
 * the image), which both Keras versions call. Backward spreads each output
 * gradient over the pixels it read, with the same weights. */
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An output row's or column's two input taps and the second's weight. */
typedef struct tap {
  int lo, hi;
  float frac;
} tap;

/* Output pixel o of `out` reading an axis of `in` pixels. TensorFlow's
 * nearest takes floor((o + 0.5) * in / out), which for UpSampling2D's
 * whole factors is o / factor. */
static tap tap_at(int o, int in, int out, int bilinear) {
  float scale = (float)in / (float)out;
  if (!bilinear) {
    int i = (int)floorf(((float)o + 0.5f) * scale);
    i = i > in - 1 ? in - 1 : i;
    return (tap){i, i, 0.0f};
  }
  float at = ((float)o + 0.5f) * scale - 0.5f;
  float below = floorf(at);
  int lo = below < 0.0f ? 0 : (int)below;
  int hi = (int)ceilf(at);
  if (hi > in - 1) hi = in - 1;
  if (hi < 0) hi = 0;
  return (tap){lo, hi, at - below};
}

static mxu_status upsampling_infer(mxu_layer *layer) {
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  if (layer->in_shape.rank != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: UpSampling2D takes (height, width, channels) images",
                    layer->name);
  if (c->size[0] < 1 || c->size[1] < 1 || c->size[0] > 1 << 16 ||
      c->size[1] > 1 << 16)
    return mxu_fail(MXU_ERR_ARG, "%s: size %dx%d must be in 1..65536",
                    layer->name, c->size[0], c->size[1]);
  int64_t dims[3] = {layer->in_shape.dims[0] * c->size[0],
                     layer->in_shape.dims[1] * c->size[1],
                     layer->in_shape.dims[2]};
  if (dims[0] > INT_MAX || dims[1] > INT_MAX)
    return mxu_fail(MXU_ERR_SHAPE, "%s: the output is too large", layer->name);
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

static int is_resizing(const mxu_layer *layer) {
  return layer->cls == &mxu_resizing_class;
}

static int bilinear_of(const mxu_layer *layer) {
  return is_resizing(layer) ? layer->config.resize.bilinear
                            : layer->config.upsampling.bilinear;
}

typedef struct geometry {
  int h, w, ch, out_h, out_w;
} geometry;

static geometry geometry_of(const mxu_layer *layer) {
  const mxu_shape *in = &layer->in_shape, *out = &layer->out_shape;
  return (geometry){(int)in->dims[0], (int)in->dims[1], (int)in->dims[2],
                    (int)out->dims[0], (int)out->dims[1]};
}

/* TensorFlow's order: top and bottom lerps across, then down. */
void mxu_resize_image(const float *x, int h, int w, int row_stride, int ch,
                      float *y, int out_h, int out_w, int bilinear) {
  for (int r = 0; r < out_h; r++) {
    tap ty = tap_at(r, h, out_h, bilinear);
    for (int col = 0; col < out_w; col++) {
      tap tx = tap_at(col, w, out_w, bilinear);
      const float *tl = x + ((size_t)ty.lo * row_stride + tx.lo) * ch;
      const float *tr = x + ((size_t)ty.lo * row_stride + tx.hi) * ch;
      const float *bl = x + ((size_t)ty.hi * row_stride + tx.lo) * ch;
      const float *br = x + ((size_t)ty.hi * row_stride + tx.hi) * ch;
      float *out = y + ((size_t)r * out_w + col) * ch;
      for (int k = 0; k < ch; k++) {
        float top = tl[k] + (tr[k] - tl[k]) * tx.frac;
        float bottom = bl[k] + (br[k] - bl[k]) * tx.frac;
        out[k] = top + (bottom - top) * ty.frac;
      }
    }
  }
}

static void upsampling_forward(mxu_layer *layer, const mxu_layer_run *run) {
  geometry g = geometry_of(layer);
  for (int64_t n = 0; n < layer->compiled->batch; n++)
    mxu_resize_image(run->x + n * g.h * g.w * g.ch, g.h, g.w, g.w, g.ch,
                     run->y + n * g.out_h * g.out_w * g.ch, g.out_h, g.out_w,
                     bilinear_of(layer));
}

static void upsampling_backward(mxu_layer *layer, const mxu_layer_run *run) {
  if (!run->need_dx) return;
  geometry g = geometry_of(layer);
  size_t per = (size_t)g.h * g.w * g.ch;
  memset(run->dx, 0, (size_t)layer->compiled->batch * per * sizeof(float));
  for (int64_t n = 0; n < layer->compiled->batch; n++) {
    float *dx = run->dx + n * per;
    const float *dy = run->dy + n * g.out_h * g.out_w * g.ch;
    for (int r = 0; r < g.out_h; r++) {
      tap ty = tap_at(r, g.h, g.out_h, bilinear_of(layer));
      for (int col = 0; col < g.out_w; col++) {
        tap tx = tap_at(col, g.w, g.out_w, bilinear_of(layer));
        const float *d = dy + ((size_t)r * g.out_w + col) * g.ch;
        float *tl = dx + ((size_t)ty.lo * g.w + tx.lo) * g.ch;
        float *tr = dx + ((size_t)ty.lo * g.w + tx.hi) * g.ch;
        float *bl = dx + ((size_t)ty.hi * g.w + tx.lo) * g.ch;
        float *br = dx + ((size_t)ty.hi * g.w + tx.hi) * g.ch;
        for (int k = 0; k < g.ch; k++) {
          float top = d[k] * (1.0f - ty.frac), bottom = d[k] * ty.frac;
          tl[k] += top * (1.0f - tx.frac);
          tr[k] += top * tx.frac;
          bl[k] += bottom * (1.0f - tx.frac);
          br[k] += bottom * tx.frac;
        }
      }
    }
  }
}

/* The taps as a matrix (out x in): each output row's weights of the input
 * rows. */
static mxu_hlo_value taps_matrix(mxu_emit *e, int in, int out, int bilinear) {
  double *m = calloc((size_t)in * (size_t)out, sizeof *m);
  if (!m) {
    if (e->h->status == MXU_OK)
      e->h->status = mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
    return 0;
  }
  for (int o = 0; o < out; o++) {
    tap t = tap_at(o, in, out, bilinear);
    m[(size_t)o * in + t.lo] += 1.0 - t.frac;
    m[(size_t)o * in + t.hi] += t.frac;
  }
  int64_t dims[2] = {out, in};
  mxu_hlo_value v = mxu_hlo_constant_values(
      e->h, mxu_hlo_shape_make(MXU_HLO_F32, 2, dims), m);
  free(m);
  return v;
}

/* Rows, then columns, each a product with its taps matrix. */
mxu_hlo_value mxu_emit_resize(mxu_emit *e, mxu_hlo_value x, int h, int w,
                              int out_h, int out_w, int bilinear) {
  const int64_t one = 1, rows = 1, cols = 2;
  /* (out_h, h) . (n, h, w, c) -> (out_h, n, w, c) */
  mxu_hlo_value y = mxu_hlo_dot(e->h, taps_matrix(e, h, out_h, bilinear), x, 0,
                                NULL, NULL, 1, &one, &rows);
  /* (out_w, w) . (out_h, n, w, c) -> (out_w, out_h, n, c) */
  y = mxu_hlo_dot(e->h, taps_matrix(e, w, out_w, bilinear), y, 0, NULL, NULL, 1,
                  &one, &cols);
  const int64_t order[4] = {2, 1, 0, 3};
  return mxu_hlo_transpose(e->h, y, order);
}

static mxu_hlo_value upsampling_emit(const mxu_layer *layer, mxu_emit *e) {
  geometry g = geometry_of(layer);
  return mxu_emit_resize(e, e->in[0], g.h, g.w, g.out_h, g.out_w,
                         bilinear_of(layer));
}

/* Bilinear: three lerps of two flops per value. */
static double upsampling_flops(const mxu_layer *layer,
                               const mxu_flops_step *step) {
  if (!bilinear_of(layer)) return 0.0;
  return (double)mxu_shape_count(&layer->out_shape) *
         (step->need_dx ? 12.0 : 6.0);
}

static const char *const upsampling_keys[] = {"size", "interpolation",
                                              "data_format", NULL};

static mxu_status read_upsampling(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  mxu_upsampling2d_config c = {name, {2, 2}, 0};
  const char *interpolation = "nearest";
  MXU_TRY(mxu_json_int_pair(where, config, "size", MXU_JSON_OPTIONAL, c.size));
  MXU_TRY(mxu_json_string(where, config, "interpolation", MXU_JSON_OPTIONAL,
                          &interpolation));
  MXU_TRY(mxu_json_data_format(where, config));
  c.bilinear = strcmp(interpolation, "bilinear") == 0;
  if (!c.bilinear && strcmp(interpolation, "nearest") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "interpolation '%s' is not supported (nearest or "
                         "bilinear)",
                         interpolation);
  return mxu_json_applied(
      where, node, mxu_apply_upsampling2d(node->model, &c, node->inputs[0]));
}

static void write_upsampling(mxu_json_out *out, const mxu_layer *layer,
                             cJSON *config) {
  const mxu_upsampling2d_config *c = &layer->config.upsampling;
  mxu_json_put_pair(out, config, "size", c->size);
  mxu_json_put_string(out, config, "interpolation",
                      c->bilinear ? "bilinear" : "nearest");
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

const mxu_layer_class mxu_upsampling2d_class = {
    .class_name = "UpSampling2D",
    .config_keys = upsampling_keys,
    .read_config = read_upsampling,
    .write_config = write_upsampling,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = upsampling_infer,
    .flops = upsampling_flops,
    .plan = mxu_no_plan,
    .forward = upsampling_forward,
    .backward = upsampling_backward,
    .emit = upsampling_emit,
};

/* ---- Resizing
 * ----------------------------------------------------------------
 * crop_to_aspect_ratio and pad_to_aspect_ratio (Keras 3) must be false;
 * interpolation bilinear (Keras' default) or nearest. */

static const char *const resizing_keys[] = {"height",
                                            "width",
                                            "interpolation",
                                            "crop_to_aspect_ratio",
                                            "pad_to_aspect_ratio",
                                            "fill_mode",
                                            "fill_value",
                                            "antialias",
                                            "data_format",
                                            NULL};

static mxu_status read_resizing(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  mxu_resize_config c = {name, 0, 0, 1};
  const char *interpolation = "bilinear";
  MXU_TRY(mxu_json_int(where, config, "height", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.height));
  MXU_TRY(mxu_json_int(where, config, "width", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.width));
  MXU_TRY(mxu_json_string(where, config, "interpolation", MXU_JSON_OPTIONAL,
                          &interpolation));
  MXU_TRY(mxu_json_require_false(where, config, "crop_to_aspect_ratio"));
  MXU_TRY(mxu_json_require_false(where, config, "pad_to_aspect_ratio"));
  MXU_TRY(mxu_json_require_false(where, config, "antialias"));
  MXU_TRY(mxu_json_data_format(where, config));
  c.bilinear = strcmp(interpolation, "bilinear") == 0;
  if (!c.bilinear && strcmp(interpolation, "nearest") != 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "interpolation '%s' is not supported (bilinear or "
                         "nearest)",
                         interpolation);
  return mxu_json_applied(where, node,
                          mxu_apply_resizing(node->model, &c, node->inputs[0]));
}

static void write_resizing(mxu_json_out *out, const mxu_layer *layer,
                           cJSON *config) {
  const mxu_resize_config *c = &layer->config.resize;
  mxu_json_put_number(out, config, "height", c->height);
  mxu_json_put_number(out, config, "width", c->width);
  mxu_json_put_string(out, config, "interpolation",
                      c->bilinear ? "bilinear" : "nearest");
  mxu_json_put_bool(out, config, "crop_to_aspect_ratio", 0);
  mxu_json_put_string(out, config, "data_format", "channels_last");
}

static mxu_status resizing_infer(mxu_layer *layer) {
  const mxu_resize_config *c = &layer->config.resize;
  if (layer->in_shape.rank != 3)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: Resizing takes (height, width, channels) images",
                    layer->name);
  if (c->height < 1 || c->width < 1 || c->height > 1 << 20 ||
      c->width > 1 << 20)
    return mxu_fail(MXU_ERR_ARG, "%s: size %dx%d must be in 1..1048576",
                    layer->name, c->height, c->width);
  int64_t dims[3] = {c->height, c->width, layer->in_shape.dims[2]};
  layer->out_shape = mxu_shape_make(3, dims);
  return MXU_OK;
}

const mxu_layer_class mxu_resizing_class = {
    .class_name = "Resizing",
    .config_keys = resizing_keys,
    .read_config = read_resizing,
    .write_config = write_resizing,
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = resizing_infer,
    .flops = upsampling_flops,
    .plan = mxu_no_plan,
    .forward = upsampling_forward,
    .backward = upsampling_backward,
    .emit = upsampling_emit,
};
