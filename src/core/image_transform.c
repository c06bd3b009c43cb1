/* image_transform.c — the geometry of an image augmentation, shared by
 * the data pipeline's ImageDataGenerator (data/augment.c) and Keras'
 * augmentation layers (model/layers/augmentation.c): the centred affine
 * matrix of Keras' apply_affine_transform, scipy.ndimage.affine_transform's
 * order-1 resampling with its four boundary modes, then the flips; and
 * the adjoint of all that, the gradient of a layer that applies it. */
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Beyond this a coordinate is far outside any image; clamping it keeps
 * the int conversion defined without changing which pixel is read. */
#define COORD_LIMIT 1073741824.0

/* numpy's deg2rad multiplies by pi / 180; M_PI is not in strict C11. */
#define DEGREES_TO_RADIANS (3.14159265358979323846 / 180.0)

/* Keras builds R * T * Z in (x, y) = (col, row), centres it and swaps the
 * axes into scipy's (row, col). The centre is the true one, ((h-1)/2,
 * (w-1)/2): Keras centres rows on (w-1)/2, which only differs for
 * non-square images and would turn them about a point off their middle. */
void mxu_augment_matrix(const mxu_augment_params *p, int h, int w,
                        double m[2][3]) {
  double radians = p->theta * DEGREES_TO_RADIANS;
  double cos_t = p->theta == 0 ? 1 : cos(radians);
  double sin_t = p->theta == 0 ? 0 : sin(radians);
  double cy = (h - 1) / 2.0, cx = (w - 1) / 2.0;
  m[0][0] = cos_t * p->zy;
  m[0][1] = sin_t * p->zx;
  m[0][2] = cy + sin_t * p->tx + cos_t * p->ty - m[0][0] * cy - m[0][1] * cx;
  m[1][0] = -sin_t * p->zy;
  m[1][1] = cos_t * p->zx;
  m[1][2] = cx + cos_t * p->tx - sin_t * p->ty - m[1][0] * cy - m[1][1] * cx;
  m[0][1] += p->shear_y;
  m[1][0] += p->shear_x;
}

/* ---- scipy's boundary modes ------------------------------------------- */

/* Moves a coordinate outside [0, n-1] back inside as scipy's
 * map_coordinate does before interpolating; -1 means "use cval". */
static double map_reflect(double c, int n) {
  double period = 2.0 * n;
  if (c < 0) {
    if (c < -period) c += period * trunc(-c / period);
    /* scipy nudges tiny negatives so the result never reaches -1. */
    return c < -n ? c + period : (c > -1e-15 ? 1e-15 : -c) - 1;
  }
  c -= period * trunc(c / period);
  return c >= n ? period - c - 1 : c;
}

/* scipy's 'wrap' repeats with period n-1, so 0 and n-1 coincide. */
static double map_wrap(double c, int n) {
  double period = n - 1.0;
  if (c < 0) return c + period * (trunc(-c / period) + 1);
  return c - period * trunc(c / period);
}

static double map_coordinate(double c, int n, mxu_fill_mode mode) {
  if (c >= 0 && c <= n - 1) return c;
  if (n <= 1) return mode == MXU_FILL_CONSTANT ? -1 : 0;
  switch (mode) {
  case MXU_FILL_REFLECT: return map_reflect(c, n);
  case MXU_FILL_WRAP: return map_wrap(c, n);
  case MXU_FILL_CONSTANT: return -1;
  case MXU_FILL_NEAREST: break;
  }
  return c;
}

/* Index of the tap k in [0, n): scipy extends the samples half-sample
 * symmetrically for reflect, by the edge for nearest, and whole-sample
 * symmetrically (mirror) for constant and wrap. */
static int tap_index(long k, int n, mxu_fill_mode mode) {
  if (k >= 0 && k < n) return (int)k;
  if (n <= 1) return 0;
  if (mode == MXU_FILL_NEAREST) return k < 0 ? 0 : n - 1;
  int half = mode == MXU_FILL_REFLECT;
  long period = half ? 2L * n : 2L * n - 2;
  k %= period;
  if (k < 0) k += period;
  if (k < n) return (int)k;
  return (int)(half ? period - k - 1 : period - k);
}

/* The two taps and weights along one axis, or 0 when the point takes
 * cval. Weights as scipy: w0 = 1 - frac, w1 = 1 - w0. */
typedef struct axis_taps {
  int i0, i1;
  double w0, w1;
} axis_taps;

static int axis_taps_at(double c, int n, mxu_fill_mode mode, axis_taps *t) {
  if (c != c) return 0; /* NaN: nothing to read, so cval */
  if (mode != MXU_FILL_NEAREST) {
    c = map_coordinate(c, n, mode);
    if (!(c > -1.0)) return 0;
  }
  if (c < -COORD_LIMIT) c = -COORD_LIMIT;
  if (c > COORD_LIMIT) c = COORD_LIMIT;
  double base = floor(c);
  long start = (long)base;
  t->i0 = tap_index(start, n, mode);
  t->i1 = tap_index(start + 1, n, mode);
  t->w0 = 1.0 - (c - base);
  t->w1 = 1.0 - t->w0;
  return 1;
}

/* ---- resampling --------------------------------------------------------- */

typedef struct image_view {
  const float *pixels;
  int h, w, channels;
} image_view;

/* One output pixel, all channels, summed in scipy's order (row tap outer,
 * column tap inner, weights multiplied row first) in double. */
static void sample_point(const image_view *in, const double coord[2],
                         mxu_fill_mode mode, float cval, float *out) {
  axis_taps row, col;
  if (!axis_taps_at(coord[0], in->h, mode, &row) ||
      !axis_taps_at(coord[1], in->w, mode, &col)) {
    for (int ch = 0; ch < in->channels; ch++) out[ch] = cval;
    return;
  }
  size_t stride = (size_t)in->channels;
  const float *p00 = in->pixels + ((size_t)row.i0 * in->w + col.i0) * stride;
  const float *p01 = in->pixels + ((size_t)row.i0 * in->w + col.i1) * stride;
  const float *p10 = in->pixels + ((size_t)row.i1 * in->w + col.i0) * stride;
  const float *p11 = in->pixels + ((size_t)row.i1 * in->w + col.i1) * stride;
  for (int ch = 0; ch < in->channels; ch++) {
    double t = 0.0;
    t += (double)p00[ch] * row.w0 * col.w0;
    t += (double)p01[ch] * row.w0 * col.w1;
    t += (double)p10[ch] * row.w1 * col.w0;
    t += (double)p11[ch] * row.w1 * col.w1;
    out[ch] = (float)t;
  }
}

static int is_identity(const mxu_augment_params *p) {
  return p->theta == 0 && p->tx == 0 && p->ty == 0 && p->zx == 1 &&
         p->zy == 1 && p->shear_x == 0 && p->shear_y == 0;
}

/* Keras flips after the affine step, so pixel (r, c) of the transform
 * lands at its mirrored place. */
static size_t flipped_at(const mxu_augment_params *p, int h, int w,
                         int channels, int r, int c) {
  int row = p->flip_vertical ? h - 1 - r : r;
  int col = p->flip_horizontal ? w - 1 - c : c;
  return ((size_t)row * w + col) * (size_t)channels;
}

void mxu_augment_apply(const mxu_augment_params *params, mxu_fill_mode mode,
                       float cval, const float *in, float *out, int h, int w,
                       int channels) {
  if (h < 1 || w < 1 || channels < 1) return;
  image_view view = {in, h, w, channels};
  double m[2][3];
  mxu_augment_matrix(params, h, w, m);
  /* Keras skips resampling when there is no affine part; so do we, which
   * also keeps the copy bit-exact for NaN and infinite pixels. */
  int identity = is_identity(params);
  for (int r = 0; r < h; r++) {
    for (int c = 0; c < w; c++) {
      float *dst = out + flipped_at(params, h, w, channels, r, c);
      if (identity) {
        memcpy(dst, in + ((size_t)r * w + c) * (size_t)channels,
               (size_t)channels * sizeof(float));
        continue;
      }
      /* The same sums, in the same order, as scipy's affine loop. */
      double coord[2];
      coord[0] = (double)r * m[0][0] + (double)c * m[0][1] + m[0][2];
      coord[1] = (double)r * m[1][0] + (double)c * m[1][1] + m[1][2];
      sample_point(&view, coord, mode, cval, dst);
    }
  }
}

/* Each output pixel's gradient goes back to the (up to four) input pixels
 * sample_point read, with the same weights. */
static void spread_point(const image_view *in, const double coord[2],
                         mxu_fill_mode mode, const float *g, float *dx) {
  axis_taps row, col;
  if (!axis_taps_at(coord[0], in->h, mode, &row) ||
      !axis_taps_at(coord[1], in->w, mode, &col))
    return;
  size_t stride = (size_t)in->channels;
  float *p00 = dx + ((size_t)row.i0 * in->w + col.i0) * stride;
  float *p01 = dx + ((size_t)row.i0 * in->w + col.i1) * stride;
  float *p10 = dx + ((size_t)row.i1 * in->w + col.i0) * stride;
  float *p11 = dx + ((size_t)row.i1 * in->w + col.i1) * stride;
  for (int ch = 0; ch < in->channels; ch++) {
    p00[ch] += (float)(g[ch] * row.w0 * col.w0);
    p01[ch] += (float)(g[ch] * row.w0 * col.w1);
    p10[ch] += (float)(g[ch] * row.w1 * col.w0);
    p11[ch] += (float)(g[ch] * row.w1 * col.w1);
  }
}

void mxu_augment_adjoint(const mxu_augment_params *params, mxu_fill_mode mode,
                         const float *dy, float *dx, int h, int w,
                         int channels) {
  if (h < 1 || w < 1 || channels < 1) return;
  size_t count = (size_t)h * w * channels;
  memset(dx, 0, count * sizeof *dx);
  image_view view = {dx, h, w, channels};
  double m[2][3];
  mxu_augment_matrix(params, h, w, m);
  int identity = is_identity(params);
  for (int r = 0; r < h; r++)
    for (int c = 0; c < w; c++) {
      const float *g = dy + flipped_at(params, h, w, channels, r, c);
      float *at = dx + ((size_t)r * w + c) * (size_t)channels;
      if (identity) {
        for (int ch = 0; ch < channels; ch++) at[ch] += g[ch];
        continue;
      }
      double coord[2];
      coord[0] = (double)r * m[0][0] + (double)c * m[0][1] + m[0][2];
      coord[1] = (double)r * m[1][0] + (double)c * m[1][1] + m[1][2];
      spread_point(&view, coord, mode, g, dx);
    }
}
