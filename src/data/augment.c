/* augment.c — Keras ImageDataGenerator's geometric augmentation: the
 * random parameters of get_random_transform, the centred affine matrix of
 * apply_affine_transform, and scipy.ndimage.affine_transform's order-1
 * resampling with its four boundary modes, then the flips. Every draw
 * comes from the counter-based RNG keyed by (seed, epoch, sample). */
#include "data/augment.h"
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Where each parameter's draw lives in the sample's stream: fixed, so one
 * option's draw never moves when another is switched on. */
enum {
  DRAW_THETA = 0,
  DRAW_TX,
  DRAW_TY,
  DRAW_ZX,
  DRAW_ZY,
  DRAW_FLIP_H,
  DRAW_FLIP_V
};

/* Beyond this a coordinate is far outside any image; clamping it keeps
 * the int conversion defined without changing which pixel is read. */
#define COORD_LIMIT 1073741824.0

/* numpy's deg2rad multiplies by pi / 180; M_PI is not in strict C11. */
#define DEGREES_TO_RADIANS (3.14159265358979323846 / 180.0)

mxu_augment_config mxu_augment_defaults(void) {
  mxu_augment_config config;
  memset(&config, 0, sizeof config);
  config.fill_mode = MXU_FILL_NEAREST;
  return config;
}

int mxu_augment_active(const mxu_augment_config *config) {
  return config &&
         (config->rotation_range != 0 || config->width_shift_range != 0 ||
          config->height_shift_range != 0 || config->zoom_range != 0 ||
          config->horizontal_flip || config->vertical_flip);
}

static mxu_status check_range(const char *name, float value) {
  if (isfinite(value) && value >= 0) return MXU_OK;
  return mxu_fail(MXU_ERR_ARG,
                  "augment: %s is %g (expected a finite value >= 0)", name,
                  (double)value);
}

mxu_status mxu_augment_check(const mxu_augment_config *config) {
  if (!config) return mxu_fail(MXU_ERR_ARG, "augment: config is NULL");
  MXU_TRY(check_range("rotation_range", config->rotation_range));
  MXU_TRY(check_range("width_shift_range", config->width_shift_range));
  MXU_TRY(check_range("height_shift_range", config->height_shift_range));
  MXU_TRY(check_range("zoom_range", config->zoom_range));
  if (!isfinite(config->cval))
    return mxu_fail(MXU_ERR_ARG, "augment: cval is %g (expected finite)",
                    (double)config->cval);
  if ((unsigned)config->fill_mode > MXU_FILL_WRAP)
    return mxu_fail(MXU_ERR_ARG,
                    "augment: fill_mode %d (expected nearest, constant, "
                    "reflect or wrap)",
                    (int)config->fill_mode);
  return MXU_OK;
}

/* ---- drawing the parameters ------------------------------------------- */

static double draw_uniform(const mxu_rng *rng, uint64_t index, double low,
                           double high) {
  float u;
  mxu_rng_uniform(rng, index, &u, 1);
  return low + (high - low) * (double)u;
}

/* Keras: a range below 1 is a fraction of the side, else pixels. Keras
 * itself scales its tx by the height and moves columns with it
 * (keras-team/keras#17398); here the width shift moves columns, as its
 * documentation says. */
static double draw_shift(const mxu_rng *rng, uint64_t index, float range,
                         int side) {
  if (range == 0) return 0;
  double shift = draw_uniform(rng, index, -(double)range, (double)range);
  return range < 1 ? shift * side : shift;
}

static int draw_flip(const mxu_rng *rng, uint64_t index, int enabled) {
  return enabled && draw_uniform(rng, index, 0, 1) < 0.5;
}

void mxu_augment_draw(const mxu_augment_config *config, int h, int w,
                      uint64_t seed, uint32_t epoch, int64_t sample,
                      mxu_augment_params *params) {
  uint64_t id = (uint64_t)sample;
  mxu_rng rng = mxu_rng_make(seed, MXU_STREAM_AUGMENT, epoch, (uint32_t)id,
                             (uint32_t)(id >> 32));
  double rotation = config->rotation_range;
  params->theta =
      rotation == 0 ? 0 : draw_uniform(&rng, DRAW_THETA, -rotation, rotation);
  params->tx = draw_shift(&rng, DRAW_TX, config->width_shift_range, w);
  params->ty = draw_shift(&rng, DRAW_TY, config->height_shift_range, h);
  params->zx = params->zy = 1;
  if (config->zoom_range != 0) {
    double low = 1 - (double)config->zoom_range;
    double high = 1 + (double)config->zoom_range;
    params->zx = draw_uniform(&rng, DRAW_ZX, low, high);
    params->zy = draw_uniform(&rng, DRAW_ZY, low, high);
  }
  params->flip_horizontal =
      draw_flip(&rng, DRAW_FLIP_H, config->horizontal_flip);
  params->flip_vertical = draw_flip(&rng, DRAW_FLIP_V, config->vertical_flip);
}

/* ---- the matrix --------------------------------------------------------- */

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
  return p->theta == 0 && p->tx == 0 && p->ty == 0 && p->zx == 1 && p->zy == 1;
}

/* Keras flips after the affine step, so pixel (r, c) of the transform
 * lands at its mirrored place. */
static float *flipped_at(const mxu_augment_params *p, float *out, int h, int w,
                         int channels, int r, int c) {
  int row = p->flip_vertical ? h - 1 - r : r;
  int col = p->flip_horizontal ? w - 1 - c : c;
  return out + ((size_t)row * w + col) * (size_t)channels;
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
      float *dst = flipped_at(params, out, h, w, channels, r, c);
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

void mxu_augment_sample(const mxu_augment_config *config, const float *in,
                        float *out, int h, int w, int channels, uint64_t seed,
                        uint32_t epoch, int64_t sample) {
  if (h < 1 || w < 1 || channels < 1) return;
  if (!mxu_augment_active(config)) {
    memcpy(out, in, (size_t)h * w * channels * sizeof(float));
    return;
  }
  mxu_augment_params params;
  mxu_augment_draw(config, h, w, seed, epoch, sample, &params);
  mxu_augment_apply(&params, config->fill_mode, config->cval, in, out, h, w,
                    channels);
}

void mxu_augment_batch(const mxu_augment_config *config, const float *in,
                       float *out, int64_t n, int h, int w, int channels,
                       uint64_t seed, uint32_t epoch,
                       const int64_t *sample_ids) {
  if (h < 1 || w < 1 || channels < 1) return;
  size_t floats = (size_t)h * w * channels;
  /* Each image depends only on its own sample id, so any split of the
   * loop over threads gives the same bytes. */
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; k++)
    mxu_augment_sample(config, in + (size_t)k * floats,
                       out + (size_t)k * floats, h, w, channels, seed, epoch,
                       sample_ids ? sample_ids[k] : k);
}
