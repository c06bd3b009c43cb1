/* test_augment.c — ImageDataGenerator-style augmentation: identity, flips,
 * whole- and half-pixel shifts under each scipy fill mode (expected values
 * worked out by hand), rotations by 90 degrees, zoom, the ranges drawn,
 * determinism per (seed, epoch, sample), thread-count independence, and
 * one random transform against scipy.ndimage when python3 has scipy. */
#include "check.h"
#include "core/core.h"
#include "data/augment.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SEED 1234u

/* Pixel (r, c, ch) of a test image: distinct, exact in float. */
static float pattern(int r, int c, int ch) {
  return (float)(100 * r + 10 * c + ch);
}

static void fill_pattern(float *image, int h, int w, int channels) {
  for (int r = 0; r < h; r++)
    for (int c = 0; c < w; c++)
      for (int ch = 0; ch < channels; ch++)
        image[(r * w + c) * channels + ch] = pattern(r, c, ch);
}

static float at(const float *image, int w, int channels, int r, int c, int ch) {
  return image[(r * w + c) * channels + ch];
}

static mxu_augment_params no_change(void) {
  mxu_augment_params p = {.zx = 1, .zy = 1};
  return p;
}

/* ---- identity ------------------------------------------------------------ */

static void test_identity(void) {
  mxu_augment_config config = mxu_augment_defaults();
  CHECK(!mxu_augment_active(&config));
  CHECK(config.fill_mode == MXU_FILL_NEAREST && config.cval == 0);
  CHECK_OK(mxu_augment_check(&config));
  float in[6 * 5 * 3], out[6 * 5 * 3];
  fill_pattern(in, 6, 5, 3);
  in[7] = NAN; /* a copy keeps even NaN bits */
  mxu_augment_sample(&config, in, out, 6, 5, 3, SEED, 0, 7);
  CHECK(memcmp(in, out, sizeof in) == 0);
  /* Parameters that change nothing copy too, whatever the fill mode. */
  mxu_augment_params p = no_change();
  memset(out, 0, sizeof out);
  mxu_augment_apply(&p, MXU_FILL_CONSTANT, 9, in, out, 6, 5, 3);
  CHECK(memcmp(in, out, sizeof in) == 0);
}

/* ---- flips --------------------------------------------------------------- */

static void mirror(const float *in, float *out, int h, int w, int channels,
                   int horizontal) {
  for (int r = 0; r < h; r++)
    for (int c = 0; c < w; c++)
      for (int ch = 0; ch < channels; ch++) {
        int sr = horizontal ? r : h - 1 - r, sc = horizontal ? w - 1 - c : c;
        out[(r * w + c) * channels + ch] = at(in, w, channels, sr, sc, ch);
      }
}

static void check_flip(int horizontal) {
  enum { H = 4, W = 5, C = 2 };
  mxu_augment_config config = mxu_augment_defaults();
  if (horizontal)
    config.horizontal_flip = 1;
  else
    config.vertical_flip = 1;
  CHECK(mxu_augment_active(&config));
  float in[H * W * C], out[H * W * C], mirrored[H * W * C];
  fill_pattern(in, H, W, C);
  mirror(in, mirrored, H, W, C, horizontal);
  int flipped = 0, kept = 0;
  for (int64_t sample = 0; sample < 64; sample++) {
    mxu_augment_sample(&config, in, out, H, W, C, SEED, 3, sample);
    mxu_augment_params p;
    mxu_augment_draw(&config, H, W, SEED, 3, sample, &p);
    int drawn = horizontal ? p.flip_horizontal : p.flip_vertical;
    int other = horizontal ? p.flip_vertical : p.flip_horizontal;
    CHECK(!other);
    if (drawn) {
      CHECK(memcmp(out, mirrored, sizeof out) == 0);
      flipped++;
    } else {
      CHECK(memcmp(out, in, sizeof out) == 0);
      kept++;
    }
  }
  /* Probability 0.5: both outcomes show up in 64 samples. */
  CHECK_MSG(flipped > 10 && kept > 10, "flipped %d, kept %d", flipped, kept);
}

/* ---- shifts and fill modes ----------------------------------------------- */

/* Whole-pixel shift of a 3 x 5 image: output (r, c) reads input
 * (r + ty, c + tx). The source indices per mode, worked out by hand from
 * scipy's definitions (-9 = cval):
 *   columns, tx = +2, c = 0..4 reads 2 3 4 5 6:
 *     nearest 2 3 4 4 4 | reflect 2 3 4 4 3 | wrap (period 4) 2 3 4 1 2
 *   columns, tx = -2, c = 0..4 reads -2 -1 0 1 2:
 *     nearest 0 0 0 1 2 | reflect 1 0 0 1 2 | wrap 2 3 0 1 2
 *   rows, ty = -1, r = 0..2 reads -1 0 1:
 *     nearest 0 0 1 | reflect 0 0 1 | wrap (period 2) 1 0 1 */
static const int cols_plus2[4][5] = {
    {2, 3, 4, 4, 4}, {2, 3, 4, -9, -9}, {2, 3, 4, 4, 3}, {2, 3, 4, 1, 2}};
static const int cols_minus2[4][5] = {
    {0, 0, 0, 1, 2}, {-9, -9, 0, 1, 2}, {1, 0, 0, 1, 2}, {2, 3, 0, 1, 2}};
static const int rows_minus1[4][3] = {
    {0, 0, 1}, {-9, 0, 1}, {0, 0, 1}, {1, 0, 1}};

static void check_shift(mxu_fill_mode mode, double tx, const int *cols) {
  enum { H = 3, W = 5, C = 2 };
  const float cval = -7.5f;
  float in[H * W * C], out[H * W * C];
  fill_pattern(in, H, W, C);
  mxu_augment_params p = no_change();
  p.tx = tx;
  p.ty = -1;
  mxu_augment_apply(&p, mode, cval, in, out, H, W, C);
  for (int r = 0; r < H; r++)
    for (int c = 0; c < W; c++)
      for (int ch = 0; ch < C; ch++) {
        int sr = rows_minus1[mode][r], sc = cols[c];
        float want = sr < 0 || sc < 0 ? cval : pattern(sr, sc, ch);
        float got = at(out, W, C, r, c, ch);
        CHECK_MSG(got == want, "mode %d tx %g: (%d,%d,%d) = %g, want %g",
                  (int)mode, tx, r, c, ch, (double)got, (double)want);
      }
}

/* Half a pixel: each value is the mean of two neighbours, and the last
 * column shows each mode's edge (row of 0 10 20 30 40, tx = +0.5). */
static void check_half_shift(void) {
  enum { W = 5 };
  const float in[W] = {0, 10, 20, 30, 40};
  const float want[4][W] = {{5, 15, 25, 35, 40},
                            {5, 15, 25, 35, -1},
                            {5, 15, 25, 35, 40},
                            {5, 15, 25, 35, 5}};
  mxu_augment_params p = no_change();
  p.tx = 0.5;
  for (int mode = 0; mode < 4; mode++) {
    float out[W];
    mxu_augment_apply(&p, (mxu_fill_mode)mode, -1, in, out, 1, W, 1);
    for (int c = 0; c < W; c++)
      CHECK_MSG(out[c] == want[mode][c], "mode %d col %d: %g, want %g", mode, c,
                (double)out[c], (double)want[mode][c]);
  }
}

static void test_shifts(void) {
  for (int mode = 0; mode < 4; mode++) {
    check_shift((mxu_fill_mode)mode, 2, cols_plus2[mode]);
    check_shift((mxu_fill_mode)mode, -2, cols_minus2[mode]);
  }
  check_half_shift();
}

/* ---- rotation and zoom --------------------------------------------------- */

/* theta = +90 is numpy's rot90: out[r][c] = in[c][n-1-r]; -90 the other
 * way: out[r][c] = in[n-1-c][r]. */
static void test_rotation(void) {
  enum { N = 5, C = 3 };
  float in[N * N * C], out[N * N * C];
  fill_pattern(in, N, N, C);
  for (int sign = -1; sign <= 1; sign += 2) {
    mxu_augment_params p = no_change();
    p.theta = 90.0 * sign;
    mxu_augment_apply(&p, MXU_FILL_NEAREST, 0, in, out, N, N, C);
    for (int r = 0; r < N; r++)
      for (int c = 0; c < N; c++)
        for (int ch = 0; ch < C; ch++) {
          int sr = sign > 0 ? c : N - 1 - c, sc = sign > 0 ? N - 1 - r : r;
          CHECK_NEAR(at(out, N, C, r, c, ch), pattern(sr, sc, ch), 1e-3);
        }
  }
  /* 180 degrees and a horizontal flip is a vertical flip. */
  mxu_augment_params p = no_change();
  p.theta = 180;
  p.flip_horizontal = 1;
  mxu_augment_apply(&p, MXU_FILL_NEAREST, 0, in, out, N, N, C);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < N; c++)
      CHECK_NEAR(at(out, N, C, r, c, 1), pattern(N - 1 - r, c, 1), 1e-3);
}

/* zx = zy = 2 about the centre (2, 2) of a 5 x 5 image: output (r, c)
 * reads (2 + 2 (r - 2), 2 + 2 (c - 2)); (0, 0) reads (-2, -2). */
static void test_zoom(void) {
  enum { N = 5 };
  float in[N * N], out[N * N];
  fill_pattern(in, N, N, 1);
  mxu_augment_params p = no_change();
  p.zx = p.zy = 2;
  mxu_augment_apply(&p, MXU_FILL_CONSTANT, -1, in, out, N, N, 1);
  CHECK(out[2 * N + 2] == pattern(2, 2, 0));
  CHECK(out[1 * N + 1] == pattern(0, 0, 0));
  CHECK(out[3 * N + 1] == pattern(4, 0, 0));
  CHECK(out[0] == -1);
  /* zx only: columns stretch, rows stay. */
  p.zy = 1;
  mxu_augment_apply(&p, MXU_FILL_NEAREST, 0, in, out, N, N, 1);
  CHECK(out[4 * N + 3] == pattern(4, 4, 0));
  CHECK(out[1 * N + 0] == pattern(1, 0, 0));
}

/* ---- draws --------------------------------------------------------------- */

/* Keras 3's RandomShear, about the top-left corner: with s_x = 1, output
 * (r, c) reads input (r, c + r); with s_y = -1, input (r - c, c). Keras'
 * affine_transform gave, on this image, for s_x = 1:
 *   0 10 20 30 40 / 110 120 130 140 f / 220 230 240 f f / 330 340 f f f
 * and for s_y = -1: 0 f f f f / 100 10 f f f / 200 110 20 f f /
 * 300 210 120 30 f (f the constant fill). */
static void test_shear(void) {
  enum { H = 4, W = 5 };
  float in[H * W], out[H * W];
  fill_pattern(in, H, W, 1);
  for (int axis = 0; axis < 2; axis++) {
    mxu_augment_params p = no_change();
    if (axis)
      p.shear_y = -1;
    else
      p.shear_x = 1;
    mxu_augment_apply(&p, MXU_FILL_CONSTANT, -1, in, out, H, W, 1);
    for (int r = 0; r < H; r++)
      for (int c = 0; c < W; c++) {
        int sr = axis ? r - c : r, sc = axis ? c : c + r;
        float want = sr < 0 || sc >= W ? -1.0f : pattern(sr, sc, 0);
        CHECK_MSG(out[r * W + c] == want, "shear %s: (%d,%d) = %g, want %g",
                  axis ? "y" : "x", r, c, (double)out[r * W + c], (double)want);
      }
  }
}

static void test_draw_ranges(void) {
  mxu_augment_config config = mxu_augment_defaults();
  config.rotation_range = 30;
  config.width_shift_range = 0.25f; /* fraction: up to 8 of 32 columns */
  config.height_shift_range = 3;    /* pixels */
  config.zoom_range = 0.2f;
  CHECK_OK(mxu_augment_check(&config));
  double low_theta = 0, high_theta = 0, high_tx = 0;
  for (int64_t sample = 0; sample < 2000; sample++) {
    mxu_augment_params p;
    mxu_augment_draw(&config, 16, 32, SEED, 1, sample, &p);
    CHECK(p.theta >= -30 && p.theta <= 30);
    CHECK(fabs(p.tx) <= 8 && fabs(p.ty) <= 3);
    CHECK(p.zx >= 0.8 - 1e-6 && p.zx <= 1.2 + 1e-6);
    CHECK(p.zy >= 0.8 - 1e-6 && p.zy <= 1.2 + 1e-6);
    CHECK(p.zx != p.zy);
    CHECK(!p.flip_horizontal && !p.flip_vertical);
    low_theta = fmin(low_theta, p.theta);
    high_theta = fmax(high_theta, p.theta);
    high_tx = fmax(high_tx, fabs(p.tx));
  }
  /* The draws fill their ranges. */
  CHECK(low_theta < -29 && high_theta > 29 && high_tx > 7.9);

  /* One option's draws do not move when another is switched on. */
  mxu_augment_config rotate_only = mxu_augment_defaults();
  rotate_only.rotation_range = 30;
  mxu_augment_params a, b;
  mxu_augment_draw(&rotate_only, 16, 32, SEED, 1, 5, &a);
  mxu_augment_draw(&config, 16, 32, SEED, 1, 5, &b);
  CHECK(a.theta == b.theta);

  mxu_augment_config bad = mxu_augment_defaults();
  bad.zoom_range = -0.1f;
  EXPECT_FAIL(mxu_augment_check(&bad), MXU_ERR_ARG, "zoom_range");
  bad = mxu_augment_defaults();
  bad.fill_mode = (mxu_fill_mode)7;
  EXPECT_FAIL(mxu_augment_check(&bad), MXU_ERR_ARG, "fill_mode");
}

static mxu_augment_config busy_config(void) {
  mxu_augment_config config = mxu_augment_defaults();
  config.rotation_range = 40;
  config.width_shift_range = 0.2f;
  config.height_shift_range = 0.2f;
  config.zoom_range = 0.3f;
  config.horizontal_flip = 1;
  config.vertical_flip = 1;
  config.fill_mode = MXU_FILL_REFLECT;
  return config;
}

static void test_determinism(void) {
  enum { H = 9, W = 7, C = 3, F = H * W * C };
  mxu_augment_config config = busy_config();
  float in[F], a[F], b[F];
  fill_pattern(in, H, W, C);
  mxu_augment_sample(&config, in, a, H, W, C, SEED, 2, 11);
  mxu_augment_sample(&config, in, b, H, W, C, SEED, 2, 11);
  CHECK(memcmp(a, b, sizeof a) == 0);
  mxu_augment_sample(&config, in, b, H, W, C, SEED, 3, 11);
  CHECK(memcmp(a, b, sizeof a) != 0);
  mxu_augment_sample(&config, in, b, H, W, C, SEED, 2, 12);
  CHECK(memcmp(a, b, sizeof a) != 0);
  mxu_augment_sample(&config, in, b, H, W, C, SEED + 1, 2, 11);
  CHECK(memcmp(a, b, sizeof a) != 0);
  /* Sample ids past 2^32 are their own streams too. */
  mxu_augment_sample(&config, in, b, H, W, C, SEED, 2, 11 + (1ll << 32));
  CHECK(memcmp(a, b, sizeof a) != 0);
}

static void test_batch_threads(void) {
  enum { N = 37, H = 12, W = 10, C = 3, F = H * W * C };
  mxu_augment_config config = busy_config();
  float *in = malloc(sizeof(float) * N * F);
  float *one = malloc(sizeof(float) * N * F);
  float *two = malloc(sizeof(float) * N * F);
  float *single = malloc(sizeof(float) * F);
  int64_t ids[N];
  CHECK(in && one && two && single);
  if (!in || !one || !two || !single) return;
  for (int k = 0; k < N; k++) {
    ids[k] = (k * 7919) % 1000; /* a shuffled order */
    for (int i = 0; i < F; i++) in[k * F + i] = (float)((k * 31 + i) % 256);
  }
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  mxu_augment_batch(&config, in, one, N, H, W, C, SEED, 4, ids);
  omp_set_num_threads(2);
  mxu_augment_batch(&config, in, two, N, H, W, C, SEED, 4, ids);
  omp_set_num_threads(threads);
  CHECK(memcmp(one, two, sizeof(float) * N * F) == 0);
  /* Each image is its sample's own augmentation, whatever the batch. */
  mxu_augment_sample(&config, in + 5 * F, single, H, W, C, SEED, 4, ids[5]);
  CHECK(memcmp(single, one + 5 * F, sizeof(float) * F) == 0);
  free(in);
  free(one);
  free(two);
  free(single);
}

/* ---- scipy --------------------------------------------------------------- */

/* /usr/bin/python3, or MXU_TEST_PYTHON (one with scipy, say). */
static const char *python(void) {
  const char *path = getenv("MXU_TEST_PYTHON");
  return path && *path ? path : "/usr/bin/python3";
}

static int have_scipy(void) {
  char command[512];
  snprintf(command, sizeof command,
           "%s -c 'import scipy.ndimage' >/dev/null 2>&1", python());
  return system(command) == 0;
}

/* Writes in, runs scipy.ndimage.affine_transform(order=1) with our matrix
 * and mode, and reads its result into theirs. */
static int run_scipy(const float *in, int h, int w, const double m[2][3],
                     const char *mode, float cval, float *theirs) {
  const char *in_path = temp_path("in.f32"), *out_path = temp_path("out.f32");
  FILE *file = fopen(in_path, "wb");
  int ok =
      file && fwrite(in, sizeof(float), (size_t)h * w, file) == (size_t)h * w;
  if (file) fclose(file);
  char command[2048];
  snprintf(command, sizeof command,
           "%s -c \"import numpy as n, scipy.ndimage as s; "
           "x = n.fromfile('%s', n.float32).reshape(%d, %d); "
           "m = n.array([[%.17g, %.17g], [%.17g, %.17g]]); "
           "o = n.array([%.17g, %.17g]); "
           "s.affine_transform(x, m, o, order=1, mode='%s', cval=%.9g)"
           ".astype(n.float32).tofile('%s')\"",
           python(), in_path, h, w, m[0][0], m[0][1], m[1][0], m[1][1], m[0][2],
           m[1][2], mode, (double)cval, out_path);
  ok = ok && system(command) == 0;
  file = fopen(out_path, "rb");
  ok = ok && file &&
       fread(theirs, sizeof(float), (size_t)h * w, file) == (size_t)h * w;
  if (file) fclose(file);
  return ok;
}

/* One randomly drawn transform (flips aside: they are not scipy's) on a
 * one-channel image, against scipy in each fill mode. */
static void test_against_scipy(void) {
  if (!have_scipy()) {
    printf("test_augment: note: %s has no scipy; skipping the comparison "
           "with scipy.ndimage.affine_transform\n",
           python());
    return;
  }
  enum { H = 11, W = 9 };
  const char *modes[4] = {"nearest", "constant", "reflect", "wrap"};
  float in[H * W], out[H * W], theirs[H * W];
  for (int i = 0; i < H * W; i++) in[i] = (float)((i * 37) % 101);
  mxu_augment_config config = busy_config();
  config.horizontal_flip = config.vertical_flip = 0;
  mxu_augment_params p;
  mxu_augment_draw(&config, H, W, SEED, 0, 3, &p);
  double m[2][3];
  mxu_augment_matrix(&p, H, W, m);
  for (int mode = 0; mode < 4; mode++) {
    mxu_augment_apply(&p, (mxu_fill_mode)mode, 3.5f, in, out, H, W, 1);
    CHECK_MSG(run_scipy(in, H, W, m, modes[mode], 3.5f, theirs),
              "running scipy (%s)", modes[mode]);
    int differ = 0;
    for (int i = 0; i < H * W; i++) differ += fabsf(theirs[i] - out[i]) > 1e-4f;
    CHECK_MSG(differ == 0, "mode %s: %d of %d pixels differ from scipy",
              modes[mode], differ, H * W);
  }
  printf("test_augment: theta %.2f tx %.2f ty %.2f zx %.3f zy %.3f matches "
         "scipy.ndimage.affine_transform in all four modes\n",
         p.theta, p.tx, p.ty, p.zx, p.zy);
}

int main(void) {
  CHECK(check_temp_make("augment"));
  test_identity();
  check_flip(1);
  check_flip(0);
  test_shifts();
  test_rotation();
  test_zoom();
  test_shear();
  test_draw_ranges();
  test_determinism();
  test_batch_threads();
  test_against_scipy();
  check_remove_tree(check_temp_dir);
  return check_report("test_augment");
}
