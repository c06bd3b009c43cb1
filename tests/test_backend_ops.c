/* test_backend_ops.c — the oneDNN backend (cpu) against the oracle
 * (cpu_ref), op by op: the same random inputs through both, forward and
 * backward, compared with a relative tolerance. Shapes are deliberately
 * odd (n=3, 7x5 images, 3 channels, 5 filters) and cover strides 1 and 2,
 * valid and asymmetric same padding, and every fused activation. Conv and
 * dense also run in bf16 (mixed_bfloat16) against the float32 oracle. */
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec.h"
#include "bf16_expected.h"
#include "check.h"
#include "core/core.h"

#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

#define TOL_OPS 1e-4   /* elementwise kernels, losses, optimisers */
#define TOL_LAYER 5e-4 /* sums over windows and channels */
/* bf16 rounds x, w and dy to 8 significant bits (relative error up to
 * u = 2^-9 each), so each product is off by up to 2u and a sum of K of
 * them with random signs by about u * sqrt(2/3) = 0.0016 of its own
 * typical size, whatever K (the errors add like the terms do). The
 * comparison divides by at least the mean |value| that is not 0, 0.8 of
 * that size: 0.002 per sigma, and the maximum over the ~10^6 values
 * compared is some 5-10 sigma (a sum of few terms errs more than its
 * Gaussian share). 0.03 leaves room and still fails
 * any wrong layout or missed conversion, whose errors are of order 1. The
 * kernels are drawn as glorot_uniform does (pre-activations of order 1),
 * or tanh and sigmoid would shrink the values but not the errors. */
#define TOL_BF16 3e-2
/* Below this, a bf16 result would be suspiciously exact: f32 ran. */
#define BF16_MIN_ERROR 1e-4

static const mxu_backend *backends[2];
enum { CPU, REF };

static const mxu_activation fused_acts[] = {MXU_LINEAR, MXU_RELU, MXU_SIGMOID,
                                            MXU_TANH};
static const char *const act_names[] = {
    "linear",      "relu",           "sigmoid",      "tanh",
    "softmax",     "relu6",          "leaky_relu",   "elu",
    "selu",        "gelu",           "gelu_tanh",    "silu",
    "softplus",    "softsign",       "hard_sigmoid", "hard_sigmoid_tf2",
    "hard_silu",   "exponential",    "mish",         "celu",
    "hard_tanh",   "log_sigmoid",    "tanh_shrink",  "squareplus",
    "sparse_plus", "sparse_sigmoid", "soft_shrink",  "hard_shrink",
    "log_softmax"};

/* ---- buffers ----------------------------------------------------------- */

static uint32_t stream_id;

/* Uniform in [lo, hi); every call draws from a new stream. */
static float *rnd(size_t n, float lo, float hi) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  mxu_rng rng = mxu_rng_make(2024, ++stream_id, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, p, n);
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * p[i];
  return p;
}

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *copy_of(const float *src, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  memcpy(p, src, n * sizeof *p);
  return p;
}

static void free_pair(float *pair[2]) {
  free(pair[0]);
  free(pair[1]);
}

/* |got - want| <= tol * (|want| + mean |want|): relative where values are
 * large, scaled to the buffer where they cancel towards 0. The mean is over
 * the values that are not 0: the zeros a layer's shape makes (the dead
 * taps of a kernel on a 1x1 image, the pixels a strided 1x1 conv skips, a
 * relu's) say nothing of the size of its sums. NaN fails. */
static int comparisons;

/* Returns the worst error, which the bf16 tests also look at. */
static double expect_close(const char *what, const float *got,
                           const float *want, size_t n, double tol) {
  comparisons++;
  double sum = 0.0, worst = 0.0;
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    sum += fabs(want[i]);
    nonzero += want[i] != 0.0f;
  }
  double mean = 1e-6 + (nonzero ? sum / (double)nonzero : 0.0);
  size_t bad = n;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - want[i]) / (fabs(want[i]) + mean);
    if (!(err <= tol) && bad == n) bad = i;
    if (err > worst || err != err) worst = err;
  }
  CHECK_MSG(bad == n, "%s: [%zu] cpu %.9g, cpu_ref %.9g (worst error %.3g)",
            what, bad, bad < n ? got[bad] : 0.0, bad < n ? want[bad] : 0.0,
            worst);
  return worst;
}

static double expect_pair(const char *label, const char *what, float *pair[2],
                          size_t n, double tol) {
  char name[256];
  snprintf(name, sizeof name, "%s: %s", label, what);
  return expect_close(name, pair[CPU], pair[REF], n, tol);
}

/* The op kernels return nothing: a failed oneDNN execute only leaves its
 * message for mxu_errmsg(), so look for one (and clear it) after each run. */
static void expect_no_exec_error(const char *family) {
  CHECK_MSG(strstr(mxu_errmsg(), "execute") == NULL, "%s: %s", family,
            mxu_errmsg());
  mxu_fail(MXU_OK, "%s", "");
}

/* ---- conv2d ------------------------------------------------------------ */

typedef struct conv_case {
  int n, h, w, c, filters, kh, kw, sh, sw;
  mxu_padding padding;
} conv_case;

static const conv_case conv_cases[] = {
    {3, 7, 5, 3, 5, 3, 3, 1, 1, MXU_SAME},  /* pads 1/1 */
    {3, 8, 6, 3, 5, 3, 3, 2, 2, MXU_SAME},  /* pads 0/1 both ways */
    {3, 7, 5, 3, 5, 4, 4, 1, 1, MXU_SAME},  /* pads 1/2 both ways */
    {2, 9, 7, 4, 8, 4, 4, 2, 2, MXU_SAME},  /* stride 2, pads 1/2 */
    {3, 7, 5, 3, 5, 3, 2, 2, 2, MXU_VALID}, /* stride 2, drops a row */
    {3, 7, 5, 3, 5, 2, 3, 1, 2, MXU_SAME},  /* mixed strides, 0/1 and 1/1 */
    {4, 6, 6, 16, 32, 1, 1, 1, 1, MXU_VALID},
    {4, 14, 14, 8, 16, 3, 3, 1, 1, MXU_SAME},
    /* 1-4 input channels at stride 1: cpu's own forward and backward
     * passes (conv_few.c, conv_data.c), filters in pairs of vectors, one
     * (16) or both (48) */
    {2, 12, 10, 3, 32, 3, 3, 1, 1, MXU_SAME}, /* cifar's first layer */
    {3, 7, 9, 1, 16, 4, 4, 1, 1, MXU_SAME},   /* pads 1/2 */
    {2, 6, 8, 4, 48, 2, 3, 1, 1, MXU_VALID},
    {2, 4, 3, 2, 16, 5, 5, 1, 1, MXU_SAME},  /* windows past every edge */
    {9, 5, 7, 2, 64, 4, 4, 1, 1, MXU_SAME},  /* a partial image block */
    {3, 9, 8, 4, 32, 5, 4, 1, 1, MXU_VALID}, /* 16-tap rows: two chunks */
    /* Small images of many channels (16 M multiply-adds and more), whose
     * weight gradient oneDNN runs as a GEMM per image: cpu's one GEMM over
     * the batch (conv_gemm.c), only the live taps; on 1x1 (the centre
     * tap alone) the forward and backward data as GEMMs too */
    {8, 1, 1, 512, 512, 3, 3, 1, 1, MXU_SAME},
    {8, 2, 2, 256, 256, 3, 3, 1, 1, MXU_SAME},
    /* and on tiny images by windows (a GEMM per output pixel and kernel
     * row): stride 2 with pads 1/1 and 0/1, a 1x2 image, a 5x5 kernel
     * whose rows reach past both edges */
    {16, 3, 4, 256, 256, 3, 3, 2, 2, MXU_SAME},
    {16, 1, 2, 256, 256, 3, 3, 1, 1, MXU_SAME},
    {12, 2, 2, 128, 128, 5, 5, 1, 1, MXU_SAME},
    /* A strided 1x1 of 4 channels: oneDNN 2.6's jit_1x1 weight gradient
     * writes past its buffer (wrong values on 2 threads, a crash on 1);
     * cpu runs conv_gemm.c's */
    {8, 8, 8, 4, 8, 1, 1, 2, 2, MXU_VALID},
    /* One output pixel per image: all three passes one GEMM over the batch
     * (conv_gemm.c), a pointwise conv's on x, w, dx and dw themselves; and
     * a pointwise conv's weight gradient on small images (case 6 too) */
    {8, 1, 1, 64, 48, 1, 1, 1, 1, MXU_VALID},
    {4, 3, 3, 16, 24, 3, 3, 1, 1, MXU_VALID},
    {4, 5, 3, 24, 40, 1, 1, 1, 1, MXU_SAME},
    /* 2x2 images of few channels: by windows too; one tile an image of
     * 128 x 128 channels: Winograd's forward and data, conv_gemm.c's
     * weight gradient */
    {8, 2, 2, 16, 16, 3, 3, 1, 1, MXU_SAME},
    {4, 4, 4, 128, 128, 3, 3, 1, 1, MXU_SAME},
    /* 3x3 at stride 1 with 128 x 256 channels or more and 32 images on
     * one thread: cpu runs oneDNN's Winograd where it has one (AVX-512),
     * else its own (conv_wino.c), as for the ones after it (fewer
     * channels, in vectors) and case 7 */
    {32, 3, 3, 128, 256, 3, 3, 1, 1, MXU_SAME},
    {32, 6, 5, 16, 32, 3, 3, 1, 1, MXU_SAME}, /* partial 4x4 tiles */
    {32, 9, 9, 32, 16, 3, 3, 1, 1, MXU_VALID},
    {32, 16, 16, 16, 32, 3, 3, 1, 1, MXU_SAME}, /* 22 blocks, 8 chunks */
    {8, 10, 10, 24, 40, 3, 3, 1, 1, MXU_SAME},  /* odd vectors on AVX2 */
};
enum {
  FIRST_WINDOWS_CASE = 14,
  FIRST_GEMM_CASE = 20,
  FIRST_WINOGRAD_CASE = 25,
  END_WINOGRAD_CASE = 26
};

static mxu_conv2d_desc conv_desc(const conv_case *c, mxu_activation act,
                                 int has_bias) {
  mxu_conv2d_desc d = {0};
  d.n = c->n, d.in_h = c->h, d.in_w = c->w, d.in_c = c->c;
  d.out_c = c->filters, d.kernel_h = c->kh, d.kernel_w = c->kw;
  d.stride_h = c->sh, d.stride_w = c->sw;
  d.out_h = mxu_conv_output_size(c->h, c->kh, c->sh, c->padding, &d.pad_top,
                                 &d.pad_bottom);
  d.out_w = mxu_conv_output_size(c->w, c->kw, c->sw, c->padding, &d.pad_left,
                                 &d.pad_right);
  d.has_bias = has_bias;
  d.activation = act;
  return d;
}

static void conv_run(const mxu_conv2d_desc *d, const float *const in[4],
                     float *const out[4], int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(be->conv2d_create(d, &op));
  if (!op) return;
  const float *b = d->has_bias ? in[2] : NULL;
  be->conv2d_forward(op, in[0], in[1], b, out[0]);
  be->conv2d_backward_data(op, in[3], in[1], out[1]);
  be->conv2d_backward_weights(op, in[0], in[3], out[2],
                              d->has_bias ? out[3] : NULL);
  expect_no_exec_error(be->name);
  be->op_free(op);
}

static void conv_compare(mxu_conv2d_desc d, int index) {
  mxu_activation act = d.activation;
  int has_bias = d.has_bias;
  size_t nx = (size_t)d.n * d.in_h * d.in_w * d.in_c;
  size_t nw = (size_t)d.kernel_h * d.kernel_w * d.in_c / mxu_conv2d_groups(&d) *
              d.out_c;
  size_t ny = (size_t)d.n * d.out_h * d.out_w * d.out_c;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(d.out_c, -1, 1);
  float *dy = rnd(ny, -1, 1);
  float *y[2], *dx[2], *dw[2], *db[2];
  for (int k = 0; k < 2; k++) {
    y[k] = zeros(ny), dx[k] = zeros(nx), dw[k] = zeros(nw);
    db[k] = zeros(d.out_c);
    conv_run(&d, (const float *[]){x, w, b, dy},
             (float *[]){y[k], dx[k], dw[k], db[k]}, k);
  }
  char label[128];
  snprintf(label, sizeof label,
           "conv2d case %d %s%s pads %d/%d,%d/%d groups %d dilation %d,%d",
           index, act_names[act], has_bias ? "+bias" : "", d.pad_top,
           d.pad_bottom, d.pad_left, d.pad_right, mxu_conv2d_groups(&d),
           d.dilation_h, d.dilation_w);
  expect_pair(label, "forward y", y, ny, TOL_LAYER);
  expect_pair(label, "backward dx", dx, nx, TOL_LAYER);
  expect_pair(label, "backward dw", dw, nw, TOL_LAYER);
  if (has_bias) expect_pair(label, "backward db", db, d.out_c, TOL_LAYER);
  free_pair(y), free_pair(dx), free_pair(dw), free_pair(db);
  free(x), free(w), free(b), free(dy);
}

/* Grouped convs (a DepthwiseConv2D is one group per input channel) and
 * dilated ones: oneDNN's grouped and dilated primitives. */
typedef struct grouped_case {
  conv_case conv;
  int groups, dilation;
} grouped_case;

static const grouped_case grouped_cases[] = {
    {{3, 7, 5, 4, 8, 3, 3, 1, 1, MXU_SAME}, 2, 1},
    {{3, 8, 6, 8, 8, 3, 3, 2, 2, MXU_SAME}, 8, 1},     /* depthwise, stride 2 */
    {{2, 9, 9, 16, 32, 3, 3, 1, 1, MXU_SAME}, 16, 1},  /* depth_multiplier 2 */
    {{4, 8, 8, 32, 32, 3, 3, 1, 1, MXU_SAME}, 32, 1},  /* MobileNet's */
    {{2, 10, 9, 24, 24, 5, 5, 2, 2, MXU_SAME}, 24, 1}, /* EfficientNet's */
    {{2, 9, 7, 3, 5, 3, 3, 1, 1, MXU_SAME}, 1, 2},     /* dilation 2 */
    /* dilated on 2x2 images, the centre tap alone live: conv_gemm.c's
     * gathered columns, its 512 filters' packed weights on longer rows */
    {{8, 2, 2, 16, 512, 3, 3, 1, 1, MXU_SAME}, 1, 2},
    {{2, 11, 9, 4, 4, 3, 2, 1, 1, MXU_VALID}, 4, 3}, /* depthwise dilated */
    /* Channel vectors on the own depthwise weights gradient (conv_dw.c):
     * MobileNetV2's last images at 32x32 (2x2, 1x1: most taps outside),
     * a partial block of images, dilation. */
    {{2, 2, 2, 48, 48, 3, 3, 1, 1, MXU_SAME}, 48, 1},
    {{3, 1, 1, 32, 32, 3, 3, 1, 1, MXU_SAME}, 32, 1},
    {{9, 5, 4, 32, 32, 3, 3, 2, 2, MXU_SAME}, 32, 1},
    {{2, 11, 9, 16, 16, 3, 2, 1, 1, MXU_VALID}, 16, 3},
    {{2, 7, 6, 16, 16, 5, 5, 1, 1, MXU_SAME}, 16, 1},
    /* EfficientNet's 5x5 on 1x1 images: oneDNN's forward is its GEMM, so
     * conv_dw.c runs the forward too. */
    {{3, 1, 1, 32, 32, 5, 5, 1, 1, MXU_SAME}, 32, 1},
};

static mxu_conv2d_desc grouped_desc(const grouped_case *g, mxu_activation act,
                                    int has_bias) {
  mxu_conv2d_desc d = conv_desc(&g->conv, act, has_bias);
  const conv_case *c = &g->conv;
  d.groups = g->groups;
  d.dilation_h = d.dilation_w = g->dilation;
  /* Keras pads for the dilated kernel's span. */
  d.out_h = mxu_conv_output_size(c->h, (c->kh - 1) * g->dilation + 1, c->sh,
                                 c->padding, &d.pad_top, &d.pad_bottom);
  d.out_w = mxu_conv_output_size(c->w, (c->kw - 1) * g->dilation + 1, c->sw,
                                 c->padding, &d.pad_left, &d.pad_right);
  return d;
}

/* On one thread, as in a replica's worker, whatever the machine's cores. */
static void test_conv2d(void) {
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int i = 0; i < COUNT(conv_cases); i++)
    for (int a = 0; a < 4; a++)
      conv_compare(conv_desc(&conv_cases[i], fused_acts[a], (i + a) % 2 == 0),
                   i);
  for (int i = 0; i < COUNT(grouped_cases); i++)
    for (int a = 0; a < 4; a++)
      conv_compare(grouped_desc(&grouped_cases[i], fused_acts[a], a % 2), i);
  omp_set_num_threads(threads);
}

/* cpu's relu conv backward with relu's backward folded in (few input
 * channels) computes the same bits as relu's backward and then the two
 * passes, in NHWC and in nChw16c (y_native); other convs decline it. */
static void relu_backward_check(const conv_case *c, int y_native) {
  const mxu_backend *be = backends[CPU];
  mxu_conv2d_desc d = conv_desc(c, MXU_RELU, 1);
  d.y_native = y_native;
  size_t nx = (size_t)d.n * d.in_h * d.in_w * d.in_c;
  size_t nw = (size_t)d.kernel_h * d.kernel_w * d.in_c * d.out_c;
  size_t ny = (size_t)d.n * d.out_h * d.out_w * d.out_c;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(d.out_c, -1, 1);
  float *dy = rnd(ny, -1, 1), *y = zeros(ny), *dz = zeros(ny);
  float *dx[2], *dw[2], *db[2];
  mxu_op *op = NULL, *relu = NULL;
  mxu_activation_desc ad = {MXU_RELU, (int64_t)ny / d.out_c, d.out_c, 0};
  CHECK_OK(be->conv2d_create(&d, &op));
  CHECK_OK(be->activation_create(&ad, &relu));
  for (int k = 0; k < 2; k++)
    dx[k] = zeros(nx), dw[k] = zeros(nw), db[k] = zeros(d.out_c);
  if (op && relu) {
    be->conv2d_forward(op, x, w, b, y);
    be->activation_backward(relu, NULL, y, dy, dz);
    be->conv2d_backward_weights(op, x, dz, dw[0], db[0]);
    be->conv2d_backward_data(op, dz, w, dx[0]);
    CHECK(be->conv2d_backward_relu(op, x, w, y, dy, dw[1], db[1], dx[1]));
    CHECK(memcmp(dx[0], dx[1], nx * sizeof(float)) == 0);
    CHECK(memcmp(dw[0], dw[1], nw * sizeof(float)) == 0);
    CHECK(memcmp(db[0], db[1], d.out_c * sizeof(float)) == 0);
  }
  be->op_free(op), be->op_free(relu);
  free_pair(dx), free_pair(dw), free_pair(db);
  free(x), free(w), free(b), free(dy), free(y), free(dz);
}

static void test_conv2d_backward_relu(void) {
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const conv_case few[] = {{2, 12, 10, 3, 32, 3, 3, 1, 1, MXU_SAME},
                           {9, 5, 7, 2, 64, 4, 4, 1, 1, MXU_SAME}};
  for (int i = 0; i < COUNT(few); i++)
    for (int native = 0; native < 2; native++)
      relu_backward_check(&few[i], native);
  mxu_conv2d_desc other = conv_desc(&conv_cases[0], MXU_RELU, 1);
  mxu_op *op = NULL;
  CHECK_OK(backends[CPU]->conv2d_create(&other, &op));
  if (op)
    CHECK(!backends[CPU]->conv2d_backward_relu(op, NULL, NULL, NULL, NULL, NULL,
                                               NULL, NULL));
  backends[CPU]->op_free(op);
  omp_set_num_threads(threads);
}

/* The forward primitive's oneDNN implementation (white box: prim[0] is
 * the forward in weighted.c's order). */
static const char *forward_impl(const mxu_op *op) {
  const char *impl = "";
  dnnl_primitive_desc_query(op->prim[0].pd, dnnl_query_impl_info_str, 0, &impl);
  return impl;
}

/* Whether the op's oneDNN primitives compute in bf16. */
static int runs_bf16(const mxu_op *op) {
  return strstr(forward_impl(op), "bf16") != NULL;
}

static int runs_winograd(const mxu_conv2d_desc *d) {
  mxu_op *op = NULL;
  CHECK_OK(backends[CPU]->conv2d_create(d, &op));
  if (!op) return -1;
  int wino = strstr(forward_impl(op), "wino") != NULL;
  backends[CPU]->op_free(op);
  return wino;
}

/* The cases test_conv2d compares as Winograd do run as Winograd (where
 * oneDNN has it: AVX-512) and the others do not, on one thread and on two
 * alike (a choice by the count would give other bits on each); nor do the
 * same shapes with 16 images, or in bf16. */
static void test_conv2d_winograd(void) {
  int threads = omp_get_max_threads();
  int avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) ==
               dnnl_cpu_isa_avx512_core;
  for (int t = 1; t <= 2; t++) {
    omp_set_num_threads(t);
    for (int i = 0; i < COUNT(conv_cases); i++) {
      mxu_conv2d_desc d = conv_desc(&conv_cases[i], MXU_RELU, 1);
      int want = i >= FIRST_WINOGRAD_CASE && i < END_WINOGRAD_CASE && avx512;
      CHECK_MSG(runs_winograd(&d) == want, "conv2d case %d on %d threads", i,
                t);
      d.n = 16;
      CHECK_MSG(runs_winograd(&d) == 0, "conv2d case %d, %d images", i, d.n);
      /* In bf16 never, but where the conv runs float32 (see
       * test_bf16_choice): then as float32 does. */
      d.n = 32;
      int f32 = runs_winograd(&d);
      d.bf16 = 1;
      mxu_op *op = NULL;
      CHECK_OK(backends[CPU]->conv2d_create(&d, &op));
      int bf16 = op && runs_bf16(op);
      if (op) backends[CPU]->op_free(op);
      CHECK_MSG(runs_winograd(&d) == (bf16 ? 0 : f32), "conv2d case %d in bf16",
                i);
    }
    /* Nor on images of 4 pixels or fewer (1x1 and 2x2, in sixteens), at
     * any batch: conv_gemm.c's GEMMs take those. */
    for (int i = FIRST_WINDOWS_CASE; i < FIRST_WINDOWS_CASE + 2; i++) {
      mxu_conv2d_desc d = conv_desc(&conv_cases[i], MXU_RELU, 1);
      d.n = 64 * t;
      CHECK_MSG(runs_winograd(&d) == 0, "conv2d case %d, %d images", i, d.n);
    }
  }
  omp_set_num_threads(threads);
}

/* Which cases from FIRST_WINDOWS_CASE run their passes by windows on
 * conv_gemm.c: the tiny images with padding or one pixel, whatever their
 * size; not the pointwise, the strided 1x1 or larger ones. */
static void test_conv2d_windows(void) {
  static const int want[FIRST_WINOGRAD_CASE - FIRST_WINDOWS_CASE] = {
      1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0};
  for (int i = FIRST_WINDOWS_CASE; i < FIRST_WINOGRAD_CASE; i++) {
    mxu_conv2d_desc d = conv_desc(&conv_cases[i], MXU_RELU, 1);
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->conv2d_create(&d, &op));
    if (!op) continue;
    CHECK_MSG(cpu_conv_gemm_windows(op) == want[i - FIRST_WINDOWS_CASE],
              "conv2d case %d: windows %d", i, cpu_conv_gemm_windows(op));
    backends[CPU]->op_free(op);
  }
}

/* Which passes the cases from FIRST_GEMM_CASE run on conv_gemm.c (the
 * weight gradient on all), and which on conv_wino.c: the one-pixel ones
 * and the small 2x2 one every pass on conv_gemm.c, the pointwise its
 * weight gradient, the 4x4 of 128 x 128 the others on Winograd. */
static void test_conv2d_gemm(void) {
  static const struct {
    int passes, wino;
  } want[FIRST_WINOGRAD_CASE - FIRST_GEMM_CASE] = {
      {1, 0}, {1, 0}, {0, 0}, {1, 0}, {0, 1}};
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int i = FIRST_GEMM_CASE; i < FIRST_WINOGRAD_CASE; i++) {
    mxu_conv2d_desc d = conv_desc(&conv_cases[i], MXU_RELU, 1);
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->conv2d_create(&d, &op));
    if (!op) continue;
    int k = i - FIRST_GEMM_CASE;
    CHECK_MSG(op->conv_gemm && cpu_conv_gemm_passes(op) == want[k].passes &&
                  (op->conv_wino != NULL) == want[k].wino,
              "conv2d case %d: conv_gemm %p, passes %d, conv_wino %p", i,
              (void *)op->conv_gemm, cpu_conv_gemm_passes(op),
              (void *)op->conv_wino);
    backends[CPU]->op_free(op);
  }
  omp_set_num_threads(threads);
}

/* conv_gemm.c's sigmoid (sigmoid.h's, not libm's) on a one-pixel conv
 * whose pre-activations pass +-100: within 3e-7 of the sigmoid in double
 * (at most e^-87 where it is smaller), and an image of NaN inputs NaN. */
static void test_conv2d_gemm_sigmoid(void) {
  mxu_conv2d_desc d = conv_desc(&conv_cases[FIRST_GEMM_CASE], MXU_LINEAR, 0);
  size_t nx = (size_t)d.n * d.in_c, ny = (size_t)d.n * d.out_c;
  float *x = rnd(nx, -1, 1), *w = rnd((size_t)d.in_c * d.out_c, -20, 20);
  for (int c = 0; c < d.in_c; c++) x[c] = NAN; /* image 0 */
  float *v = zeros(ny), *y = zeros(ny);
  mxu_op *linear = NULL, *sigmoid = NULL;
  CHECK_OK(backends[CPU]->conv2d_create(&d, &linear));
  d.activation = MXU_SIGMOID;
  CHECK_OK(backends[CPU]->conv2d_create(&d, &sigmoid));
  if (!linear || !sigmoid) return;
  CHECK(sigmoid->conv_gemm && cpu_conv_gemm_passes(sigmoid));
  backends[CPU]->conv2d_forward(linear, x, w, NULL, v);
  backends[CPU]->conv2d_forward(sigmoid, x, w, NULL, y);
  size_t bad = ny, nan = 0;
  float lo = 0, hi = 0;
  for (size_t i = 0; i < ny; i++) {
    if (i < (size_t)d.out_c) {
      nan += isnan(y[i]);
      continue;
    }
    lo = fminf(lo, v[i]), hi = fmaxf(hi, v[i]);
    double want = 1.0 / (1.0 + exp(-(double)v[i]));
    if (!(fabs(y[i] - want) <= 3e-7 * want + 1.7e-38) && bad == ny) bad = i;
  }
  CHECK_MSG(bad == ny, "conv sigmoid: [%zu] v %.9g: %.9g", bad,
            bad < ny ? v[bad] : 0.0, bad < ny ? y[bad] : 0.0);
  CHECK_MSG(lo < -100 && hi > 100, "pre-activations only in [%g, %g]", lo, hi);
  CHECK_MSG(nan == (size_t)d.out_c, "%zu of image 0's %d outputs NaN", nan,
            d.out_c);
  backends[CPU]->op_free(linear);
  backends[CPU]->op_free(sigmoid);
  free(x), free(w), free(v), free(y);
}

/* A conv's passes on one thread and on two (an op is created for the
 * count it runs with): the same bits, as one replica on any count needs.
 * winograd: the shape runs Winograd, oneDNN's where it has one (AVX-512,
 * 32 images or more; its weight gradient over blocks of 32) else the
 * own. */
static void conv_threads_check(const conv_case *c, int n, int bf16,
                               int winograd) {
  const mxu_backend *be = backends[CPU];
  int threads = omp_get_max_threads();
  mxu_conv2d_desc d = conv_desc(c, MXU_RELU, 1);
  d.n = n;
  d.bf16 = bf16;
  size_t nx = (size_t)d.n * d.in_h * d.in_w * d.in_c;
  size_t nw = (size_t)9 * d.in_c * d.out_c;
  size_t ny = (size_t)d.n * d.out_h * d.out_w * d.out_c;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(d.out_c, -1, 1);
  float *dy = rnd(ny, -1, 1);
  float *y[2], *dx[2], *dw[2], *db[2];
  int made = 0;
  for (int k = 0; k < 2; k++) {
    y[k] = zeros(ny), dx[k] = zeros(nx), dw[k] = zeros(nw);
    db[k] = zeros(d.out_c);
    omp_set_num_threads(k + 1);
    mxu_op *op = NULL;
    CHECK_OK(be->conv2d_create(&d, &op));
    if (!op) continue;
    made++;
    CHECK_MSG(!winograd || op->conv_wino || strstr(forward_impl(op), "wino"),
              "conv2d %dx%d %d->%d on %d threads: no Winograd", d.in_h, d.in_w,
              d.in_c, d.out_c, k + 1);
    be->conv2d_forward(op, x, w, b, y[k]);
    be->conv2d_backward_data(op, dy, w, dx[k]);
    be->conv2d_backward_weights(op, x, dy, dw[k], db[k]);
    be->op_free(op);
  }
  omp_set_num_threads(threads);
  if (made == 2) {
    CHECK(memcmp(y[0], y[1], ny * sizeof(float)) == 0);
    CHECK(memcmp(dx[0], dx[1], nx * sizeof(float)) == 0);
    CHECK(memcmp(dw[0], dw[1], nw * sizeof(float)) == 0);
    CHECK(memcmp(db[0], db[1], d.out_c * sizeof(float)) == 0);
  }
  free_pair(y), free_pair(dx), free_pair(dw), free_pair(db);
  free(x), free(w), free(b), free(dy);
}

static void test_conv2d_threads(void) {
  /* The own Winograd; channels in odd numbers of this build's vectors. */
  const conv_case odd = {8, 10, 10, 3 * LANES, 5 * LANES, 3, 3, 1, 1, MXU_SAME};
  const conv_case *own = &conv_cases[COUNT(conv_cases) - 2];
  conv_threads_check(own, own->n, 0, 1);
  conv_threads_check(&odd, odd.n, 0, 1);
  /* oneDNN's Winograd, its weight gradient in one block and in two */
  const conv_case *wino = &conv_cases[FIRST_WINOGRAD_CASE];
  conv_threads_check(wino, 32, 0, 1);
  conv_threads_check(wino, 64, 0, 1);
  /* oneDNN's direct weight gradient over blocks of images: a stride-2
   * conv (float32; bf16 where this CPU has it) and 128 x 128 channels in
   * bf16, beyond conv_bf16_grad.c's */
  const conv_case strided = {32, 8, 8, 64, 128, 3, 3, 2, 2, MXU_SAME};
  const conv_case wide = {32, 8, 8, 128, 128, 3, 3, 1, 1, MXU_SAME};
  conv_threads_check(&strided, 32, 0, 0);
  conv_threads_check(&strided, 32, 1, 0);
  conv_threads_check(&wide, 32, 1, 0);
}

/* conv_dw.c's weight gradient sums fixed blocks of images: the same bits
 * on one thread and on two (20 images: 3 blocks, the last partial). */
static void test_conv2d_dw_threads(void) {
  const mxu_backend *be = backends[CPU];
  int threads = omp_get_max_threads();
  mxu_conv2d_desc d = grouped_desc(&grouped_cases[9], MXU_LINEAR, 1);
  d.n = 20;
  size_t nx = (size_t)d.n * d.in_h * d.in_w * d.in_c;
  size_t nw = (size_t)d.kernel_h * d.kernel_w * d.in_c;
  size_t ny = (size_t)d.n * d.out_h * d.out_w * d.out_c;
  float *x = rnd(nx, -1, 1), *dy = rnd(ny, -1, 1);
  float *dw[2] = {zeros(nw), zeros(nw)},
        *db[2] = {zeros(d.out_c), zeros(d.out_c)};
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    mxu_op *op = NULL;
    CHECK_OK(be->conv2d_create(&d, &op));
    if (!op) continue;
    CHECK(op->conv_dw != NULL);
    be->conv2d_backward_weights(op, x, dy, dw[k], db[k]);
    be->op_free(op);
  }
  omp_set_num_threads(threads);
  CHECK(memcmp(dw[0], dw[1], nw * sizeof(float)) == 0);
  CHECK(memcmp(db[0], db[1], d.out_c * sizeof(float)) == 0);
  free_pair(dw), free_pair(db);
  free(x), free(dy);
}

/* A shape oneDNN must refuse comes back as MXU_ERR_BACKEND, named. */
static void test_conv2d_error(void) {
  mxu_conv2d_desc d = conv_desc(&conv_cases[0], MXU_RELU, 1);
  d.out_h += 3;
  mxu_op *op = NULL;
  mxu_status status = backends[CPU]->conv2d_create(&d, &op);
  CHECK(status == MXU_ERR_BACKEND);
  CHECK(op == NULL);
  CHECK_MSG(strncmp(mxu_errmsg(), "onednn: conv2d: ", 16) == 0, "%s",
            mxu_errmsg());
}

/* ---- two convs chained in cpu's own layout ----------------------------- *
 * a (tanh) then b, with a's y and dy, b's x and dx passed in the backend's
 * layout (x_native, y_native) on cpu, and in NHWC on cpu_ref; tanh's
 * backward runs on the tensor as it is, elementwise. A smooth activation,
 * so that Winograd's rounding cannot flip a relu mask; and as Winograd
 * fuses only relu, a runs direct on the blocked layout, as any chained
 * conv does where oneDNN declines Winograd. */
typedef struct chain_io {
  const float *x, *wa, *ba, *wb, *bb, *dyb;
  float *yb, *dx, *dwa, *dba, *dwb, *dbb; /* out */
} chain_io;

static void chain_run(const mxu_conv2d_desc *da, const mxu_conv2d_desc *db,
                      const chain_io *io, int which) {
  mxu_activation act_a = da->activation;
  const mxu_backend *be = backends[which];
  mxu_conv2d_desc a = *da, b = *db;
  a.y_native = b.x_native = which == CPU;
  size_t ny = (size_t)a.n * a.out_h * a.out_w * a.out_c;
  float *ya = zeros(ny), *dya = zeros(ny), *dza = zeros(ny);
  mxu_activation_desc ad = {act_a, (int64_t)a.n * a.out_h * a.out_w, a.out_c,
                            0};
  mxu_op *opa = NULL, *opb = NULL, *act = NULL;
  CHECK_OK(be->conv2d_create(&a, &opa));
  CHECK_OK(be->conv2d_create(&b, &opb));
  if (act_a != MXU_LINEAR) CHECK_OK(be->activation_create(&ad, &act));
  if (!opa || !opb || (act_a != MXU_LINEAR && !act)) goto done;
  if (which == CPU) { /* nothing is converted between the two */
    CHECK(opa->diff_dst_copy == NULL && opb->src_copy == NULL);
    /* b runs Winograd; a either its own loops (few input channels), or,
     * as Winograd does not fuse tanh, direct on the same blocked layout */
    CHECK_MSG(strstr(forward_impl(opb), "wino") != NULL, "%s",
              forward_impl(opb));
    CHECK_MSG(a.in_c <= 4 ? opa->conv_few != NULL
                          : strstr(forward_impl(opa), "wino") == NULL,
              "%s", forward_impl(opa));
  }
  be->conv2d_forward(opa, io->x, io->wa, io->ba, ya);
  be->conv2d_forward(opb, ya, io->wb, io->bb, io->yb);
  be->conv2d_backward_weights(opb, ya, io->dyb, io->dwb, io->dbb);
  be->conv2d_backward_data(opb, io->dyb, io->wb, dya);
  if (act)
    be->activation_backward(act, NULL, ya, dya, dza);
  else
    memcpy(dza, dya, ny * sizeof *dza);
  be->conv2d_backward_weights(opa, io->x, dza, io->dwa, io->dba);
  be->conv2d_backward_data(opa, dza, io->wa, io->dx);
  expect_no_exec_error(be->name);
done:
  be->op_free(opa), be->op_free(opb), be->op_free(act);
  free(ya), free(dya), free(dza);
}

typedef struct chain_case {
  conv_case a, b;
  mxu_activation act; /* a's */
} chain_case;

/* b of the channels oneDNN's Winograd takes (128 x 256 and more). */
static const chain_case chain_cases[] = {
    {{32, 5, 4, 128, 256, 3, 3, 1, 1, MXU_SAME},
     {32, 5, 4, 256, 128, 3, 3, 1, 1, MXU_VALID},
     MXU_TANH},
    /* a few-channel conv first: a on conv_few.c and conv_data.c, linear
     * so that no relu mask can flip between their sums and cpu_ref's */
    {{32, 5, 4, 3, 256, 3, 3, 1, 1, MXU_SAME},
     {32, 5, 4, 256, 128, 3, 3, 1, 1, MXU_SAME},
     MXU_LINEAR},
};

/* On one thread, where b runs Winograd (so only with AVX-512). */
static void chain_check(const chain_case *c, int index) {
  mxu_conv2d_desc da = conv_desc(&c->a, c->act, 1);
  mxu_conv2d_desc db = conv_desc(&c->b, MXU_LINEAR, 1);
  CHECK(backends[CPU]->conv2d_native(&da) && backends[CPU]->conv2d_native(&db));
  size_t nx = (size_t)da.n * da.in_h * da.in_w * da.in_c;
  char label[64];
  snprintf(label, sizeof label, "conv2d chain %d", index);
  size_t nwa = (size_t)9 * da.in_c * da.out_c,
         nwb = (size_t)9 * db.in_c * db.out_c;
  size_t nyb = (size_t)db.n * db.out_h * db.out_w * db.out_c;
  float *x = rnd(nx, -1, 1), *wa = rnd(nwa, -0.3f, 0.3f),
        *ba = rnd(da.out_c, -1, 1);
  float *wb = rnd(nwb, -1, 1), *bb = rnd(db.out_c, -1, 1),
        *dyb = rnd(nyb, -1, 1);
  float *yb[2], *dx[2], *dwa[2], *dba[2], *dwb[2], *dbb[2];
  for (int k = 0; k < 2; k++) {
    yb[k] = zeros(nyb), dx[k] = zeros(nx), dwa[k] = zeros(nwa);
    dba[k] = zeros(da.out_c), dwb[k] = zeros(nwb), dbb[k] = zeros(db.out_c);
    chain_io io = {x,     wa,    ba,     wb,     bb,     dyb,
                   yb[k], dx[k], dwa[k], dba[k], dwb[k], dbb[k]};
    chain_run(&da, &db, &io, k);
  }
  expect_pair(label, "forward y", yb, nyb, TOL_LAYER);
  expect_pair(label, "backward dx", dx, nx, TOL_LAYER);
  expect_pair(label, "backward dw (first)", dwa, nwa, TOL_LAYER);
  expect_pair(label, "backward db (first)", dba, da.out_c, TOL_LAYER);
  expect_pair(label, "backward dw (second)", dwb, nwb, TOL_LAYER);
  expect_pair(label, "backward db (second)", dbb, db.out_c, TOL_LAYER);
  free_pair(yb), free_pair(dx), free_pair(dwa), free_pair(dba);
  free_pair(dwb), free_pair(dbb);
  free(x), free(wa), free(ba), free(wb), free(bb), free(dyb);
}

static void test_conv2d_chain(void) {
  if ((dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) !=
      dnnl_cpu_isa_avx512_core)
    return;
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int i = 0; i < COUNT(chain_cases); i++) chain_check(&chain_cases[i], i);
  omp_set_num_threads(threads);
}

/* ---- dense ------------------------------------------------------------- */

typedef struct dense_case {
  int n, in, out;
} dense_case;

static const dense_case dense_cases[] = {
    {3, 7, 5}, {1, 1, 1}, {32, 64, 10}, {5, 33, 17}, {7, 128, 3}};

static void dense_run(const mxu_dense_desc *d, const float *const in[4],
                      float *const out[4], int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(be->dense_create(d, &op));
  if (!op) return;
  be->dense_forward(op, in[0], in[1], d->has_bias ? in[2] : NULL, out[0]);
  be->dense_backward_data(op, in[3], in[1], out[1]);
  be->dense_backward_weights(op, in[0], in[3], out[2],
                             d->has_bias ? out[3] : NULL);
  expect_no_exec_error(be->name);
  be->op_free(op);
}

static void dense_check(const dense_case *c, mxu_activation act, int has_bias,
                        int index) {
  mxu_dense_desc d = {c->n, c->in, c->out, has_bias, act, 0};
  size_t nx = (size_t)c->n * c->in, nw = (size_t)c->in * c->out;
  size_t ny = (size_t)c->n * c->out;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(c->out, -1, 1);
  float *dy = rnd(ny, -1, 1);
  float *y[2], *dx[2], *dw[2], *db[2];
  for (int k = 0; k < 2; k++) {
    y[k] = zeros(ny), dx[k] = zeros(nx), dw[k] = zeros(nw);
    db[k] = zeros(c->out);
    dense_run(&d, (const float *[]){x, w, b, dy},
              (float *[]){y[k], dx[k], dw[k], db[k]}, k);
  }
  char label[128];
  snprintf(label, sizeof label, "dense case %d %s%s", index, act_names[act],
           has_bias ? "+bias" : "");
  expect_pair(label, "forward y", y, ny, TOL_LAYER);
  expect_pair(label, "backward dx", dx, nx, TOL_LAYER);
  expect_pair(label, "backward dw", dw, nw, TOL_LAYER);
  if (has_bias) expect_pair(label, "backward db", db, c->out, TOL_LAYER);
  free_pair(y), free_pair(dx), free_pair(dw), free_pair(db);
  free(x), free(w), free(b), free(dy);
}

static void test_dense(void) {
  int cases = (int)(sizeof dense_cases / sizeof *dense_cases);
  for (int i = 0; i < cases; i++)
    for (int a = 0; a < 4; a++)
      dense_check(&dense_cases[i], fused_acts[a], (i + a) % 2 == 0, i);
}

/* ---- conv2d and dense in bf16 ------------------------------------------ */

/* One conv or dense op, which the bf16 tests drive through the same
 * calls; cpu_ref gets the same desc and ignores bf16 (the f32 oracle). */
typedef struct weighted_case {
  int conv;
  mxu_conv2d_desc conv_desc;
  mxu_dense_desc dense_desc;
  size_t n[4]; /* values of x, w, b, dy (and of y, dx, dw, db) */
  int has_bias;
  int fan_in; /* products summed per output value */
} weighted_case;

enum { X, W, B, DY };   /* inputs */
enum { DX, DW, DB, Y }; /* outputs: out[k] is the size of in[k] */

static double bf16_worst; /* over every bf16 comparison */

static weighted_case conv_weighted(const conv_case *c, mxu_activation act,
                                   int has_bias) {
  weighted_case w = {.conv = 1, .has_bias = has_bias};
  mxu_conv2d_desc *d = &w.conv_desc;
  *d = conv_desc(c, act, has_bias);
  d->bf16 = 1;
  w.n[X] = (size_t)d->n * d->in_h * d->in_w * d->in_c;
  w.n[W] = (size_t)d->kernel_h * d->kernel_w * d->in_c * d->out_c;
  w.n[B] = (size_t)d->out_c;
  w.n[DY] = (size_t)d->n * d->out_h * d->out_w * d->out_c;
  w.fan_in = d->kernel_h * d->kernel_w * d->in_c;
  return w;
}

static weighted_case dense_weighted(const dense_case *c, mxu_activation act,
                                    int has_bias) {
  weighted_case w = {.conv = 0, .has_bias = has_bias};
  w.dense_desc = (mxu_dense_desc){c->n, c->in, c->out, has_bias, act, 1};
  w.n[X] = (size_t)c->n * c->in;
  w.n[W] = (size_t)c->in * c->out;
  w.n[B] = (size_t)c->out;
  w.n[DY] = (size_t)c->n * c->out;
  w.fan_in = c->in;
  return w;
}

/* in: x, w, b, dy; out: dx, dw, db, y. */
static void weighted_forward(const mxu_backend *be, const weighted_case *c,
                             mxu_op *op, float *const in[4],
                             float *const out[4]) {
  const float *b = c->has_bias ? in[B] : NULL;
  if (c->conv)
    be->conv2d_forward(op, in[X], in[W], b, out[Y]);
  else
    be->dense_forward(op, in[X], in[W], b, out[Y]);
}

static void weighted_backward_data(const mxu_backend *be,
                                   const weighted_case *c, mxu_op *op,
                                   float *const in[4], float *const out[4]) {
  if (c->conv)
    be->conv2d_backward_data(op, in[DY], in[W], out[DX]);
  else
    be->dense_backward_data(op, in[DY], in[W], out[DX]);
}

static void weighted_backward_weights(const mxu_backend *be,
                                      const weighted_case *c, mxu_op *op,
                                      float *const in[4], float *const out[4]) {
  float *db = c->has_bias ? out[DB] : NULL;
  if (c->conv)
    be->conv2d_backward_weights(op, in[X], in[DY], out[DW], db);
  else
    be->dense_backward_weights(op, in[X], in[DY], out[DW], db);
}

/* Two training steps on one op. Step 2's inputs are written over step 1's
 * in the same buffers, as training does, so a bf16 copy the op kept from
 * step 1 would show; step 1 runs backward data before backward weights,
 * step 2 in the layers' order, so either may convert dy first. */
static void bf16_run(const weighted_case *c, float *const steps[2][4],
                     float *const out[2][4], int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(c->conv ? be->conv2d_create(&c->conv_desc, &op)
                   : be->dense_create(&c->dense_desc, &op));
  if (!op) return;
  float *in[4];
  for (int k = 0; k < 4; k++) in[k] = copy_of(steps[0][k], c->n[k]);
  weighted_forward(be, c, op, in, out[0]);
  weighted_backward_data(be, c, op, in, out[0]);
  weighted_backward_weights(be, c, op, in, out[0]);
  for (int k = 0; k < 4; k++)
    memcpy(in[k], steps[1][k], c->n[k] * sizeof(float));
  weighted_forward(be, c, op, in, out[1]);
  weighted_backward_weights(be, c, op, in, out[1]);
  weighted_backward_data(be, c, op, in, out[1]);
  expect_no_exec_error(be->name);
  be->op_free(op);
  for (int k = 0; k < 4; k++) free(in[k]);
}

static void bf16_check(const weighted_case *c, const char *label) {
  static const char *const what[4] = {"backward dx", "backward dw",
                                      "backward db", "forward y"};
  float *steps[2][4], *out[2][2][4]; /* [backend][step][output] */
  float limit = sqrtf(3.0f / (float)c->fan_in);
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 4; k++) {
      steps[s][k] = k == W ? rnd(c->n[k], -limit, limit) : rnd(c->n[k], -1, 1);
      out[CPU][s][k] = zeros(c->n[k]);
      out[REF][s][k] = zeros(c->n[k]);
    }
  bf16_run(c, steps, out[CPU], CPU);
  bf16_run(c, steps, out[REF], REF);
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 4; k++) {
      if (k == DB && !c->has_bias) continue;
      char step[160];
      snprintf(step, sizeof step, "%s step %d", label, s + 1);
      double worst = expect_pair(step, what[k],
                                 (float *[]){out[CPU][s][k], out[REF][s][k]},
                                 c->n[k], TOL_BF16);
      if (worst > bf16_worst) bf16_worst = worst;
    }
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 4; k++) {
      free(steps[s][k]);
      free(out[CPU][s][k]);
      free(out[REF][s][k]);
    }
}

/* Longer reductions than the f32 cases: 576 products per conv output,
 * 1000 per dense one; shapes bf16 runs on (see test_bf16_choice). */
static const conv_case bf16_conv_cases[] = {
    {2, 9, 9, 64, 16, 3, 3, 1, 1, MXU_SAME},
    {3, 11, 7, 17, 33, 3, 3, 2, 1, MXU_VALID},
    /* 16 input channels at stride 1: cpu's own bf16 forward; a row of 16
     * pixels and 5 more, two output vectors */
    {2, 5, 21, 16, 32, 3, 3, 1, 1, MXU_SAME},
    {3, 7, 5, 16, 16, 4, 4, 1, 1, MXU_SAME},   /* pads 1/2 */
    {2, 6, 18, 16, 48, 3, 3, 1, 1, MXU_VALID}, /* one whole tile a row */
};
static const dense_case bf16_dense_cases[] = {{8, 1000, 40}, {3, 17, 129}};

static void bf16_conv_cases_check(const conv_case *cases, int count,
                                  const char *set) {
  for (int i = 0; i < count; i++)
    for (int a = 0; a < 4; a++) {
      int has_bias = (i + a) % 2 == 0;
      weighted_case c = conv_weighted(&cases[i], fused_acts[a], has_bias);
      char label[128];
      snprintf(label, sizeof label, "bf16 conv2d %s case %d %s%s", set, i,
               act_names[fused_acts[a]], has_bias ? "+bias" : "");
      bf16_check(&c, label);
    }
}

static void bf16_dense_cases_check(const dense_case *cases, int count,
                                   const char *set) {
  for (int i = 0; i < count; i++)
    for (int a = 0; a < 4; a++) {
      int has_bias = (i + a) % 2 == 0;
      weighted_case c = dense_weighted(&cases[i], fused_acts[a], has_bias);
      char label[128];
      snprintf(label, sizeof label, "bf16 dense %s case %d %s%s", set, i,
               act_names[fused_acts[a]], has_bias ? "+bias" : "");
      bf16_check(&c, label);
    }
}

/* The op computes in bf16 where that is wanted and the CPU has it; frees
 * the op. */
static void expect_choice(mxu_op *op, int bf16, const char *kind, int i) {
  if (!op) return;
  CHECK_MSG(runs_bf16(op) == (bf16 && bf16_expected()), "%s choice %d: %s",
            kind, i, forward_impl(op));
  backends[CPU]->op_free(op);
}

/* mixed_bfloat16 runs bf16 where it pays (where the CPU has it), and
 * float32 where the own f32 loops or f32 itself are faster: few input
 * channels, depthwise, 1x1 images (conv_gemm.c), Winograd's many channels
 * on small images, few dense outputs. */
static void test_bf16_choice(void) {
  static const struct {
    conv_case c;
    int groups, bf16;
  } convs[] = {
      {{2, 9, 9, 64, 16, 3, 3, 1, 1, MXU_SAME}, 1, 1},
      {{2, 9, 9, 16, 16, 3, 3, 1, 1, MXU_SAME}, 1, 1}, /* conv_bf16.c's */
      {{4, 8, 8, 32, 32, 3, 3, 1, 1, MXU_SAME}, 1, 1},
      {{3, 11, 7, 17, 33, 3, 3, 2, 1, MXU_VALID}, 1, 1},
      {{2, 12, 10, 3, 32, 3, 3, 1, 1, MXU_SAME}, 1, 0},  /* cifar's first */
      {{2, 12, 10, 3, 32, 3, 3, 2, 2, MXU_SAME}, 1, 0},  /* MobileNetV2's */
      {{4, 8, 8, 32, 32, 3, 3, 1, 1, MXU_SAME}, 32, 0},  /* depthwise */
      {{8, 1, 1, 512, 512, 3, 3, 1, 1, MXU_SAME}, 1, 0}, /* 1x1 images */
      {{0, 8, 8, 256, 256, 3, 3, 1, 1, MXU_SAME}, 1, 0}, /* Winograd's */
      {{0, 8, 8, 64, 64, 3, 3, 1, 1, MXU_SAME}, 1, 1},
      {{0, 16, 16, 128, 128, 3, 3, 1, 1, MXU_SAME}, 1, 1},
  };
  static const struct {
    dense_case c;
    int bf16;
  } denses[] = {{{8, 1000, 40}, 1}, {{3, 17, 129}, 1}, {{8, 1000, 7}, 0}};
  for (int i = 0; i < COUNT(convs); i++) {
    mxu_conv2d_desc d = conv_desc(&convs[i].c, MXU_RELU, 1);
    /* n 0: the images Winograd needs on every thread */
    if (d.n == 0) d.n = 32 * omp_get_max_threads();
    d.groups = convs[i].groups;
    d.bf16 = 1;
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->conv2d_create(&d, &op));
#ifdef __AVX512BF16__
    /* the own bf16 forward exactly where it fits: 16 inputs, stride 1 */
    if (op && bf16_expected())
      CHECK_MSG((op->conv_bf16 != NULL) ==
                    (d.in_c == 16 && d.stride_h == 1 && d.groups <= 1),
                "conv2d choice %d: own bf16 forward", i);
    /* its backward data as the forward of the turned conv: 16 outputs,
     * kernel rows of 3 */
    if (op && bf16_expected())
      CHECK_MSG((op->conv_bf16_data != NULL) ==
                    (d.out_c == 16 && d.in_c % 16 == 0 && d.stride_h == 1 &&
                     d.kernel_w == 3 && d.groups <= 1),
                "conv2d choice %d: own bf16 backward data", i);
    /* and the own weight gradient: 3x3 at stride 1 or 2, channels in 16s, at
     * most 64 x 64 of them */
    if (op && bf16_expected())
      CHECK_MSG((op->conv_bf16_grad != NULL) ==
                    (d.kernel_h == 3 && d.kernel_w == 3 && d.stride_h <= 2 &&
                     d.groups <= 1 && d.in_c % 16 == 0 && d.out_c % 16 == 0 &&
                     d.in_c * d.out_c <= 64 * 64),
                "conv2d choice %d: own bf16 weight gradient", i);
#endif
    expect_choice(op, convs[i].bf16, "conv2d", i);
  }
  for (int i = 0; i < COUNT(denses); i++) {
    const dense_case *c = &denses[i].c;
    mxu_dense_desc d = {c->n, c->in, c->out, 1, MXU_RELU, 1};
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->dense_create(&d, &op));
    expect_choice(op, denses[i].bf16, "dense", i);
  }
}

static uint16_t *pack_bf16(const float *x, size_t n);
static void unpack_bf16(const float *packed, size_t n, float *to);

/* One step of conv case c on the cpu op with x, y, dx and dy in bf16 as
 * the bits of `flags` say (1, 2, 4, 8), all four outputs as float32 (a
 * bf16 y or dx unpacked). */
static void bf16_tensor_step(weighted_case c, int flags, float *const in[4],
                             float *const out[4]) {
  c.conv_desc.x_bf16 = flags & 1, c.conv_desc.y_bf16 = flags >> 1 & 1;
  c.conv_desc.dx_bf16 = flags >> 2 & 1, c.conv_desc.dy_bf16 = flags >> 3;
  mxu_op *op = NULL;
  CHECK_OK(backends[CPU]->conv2d_create(&c.conv_desc, &op));
  if (!op) return;
  uint16_t *xh = pack_bf16(in[X], c.n[X]), *dyh = pack_bf16(in[DY], c.n[DY]);
  float *at[4] = {flags & 1 ? (float *)xh : in[X], in[W], in[B],
                  flags & 8 ? (float *)dyh : in[DY]};
  for (int k = 0; k < 4; k++) memset(out[k], 0, c.n[k] * sizeof(float));
  weighted_forward(backends[CPU], &c, op, at, out);
  weighted_backward_data(backends[CPU], &c, op, at, out);
  weighted_backward_weights(backends[CPU], &c, op, at, out);
  if (flags & 2) unpack_bf16(out[Y], c.n[DY], out[Y]);
  if (flags & 4) unpack_bf16(out[DX], c.n[X], out[DX]);
  expect_no_exec_error("cpu");
  backends[CPU]->op_free(op);
  free(xh), free(dyh);
}

/* bf16 tensors (x_bf16, y_bf16, dx_bf16, dy_bf16: between convs, batch
 * normalisations and Adds): where conv2d_bf16_tensors says a conv takes
 * them, x and dy in bf16 give the same bits as the float32 ones they
 * round (every output), and y and dx in bf16 are the float32 ones
 * rounded; elsewhere creating such an op fails. */
static void test_bf16_tensors(void) {
  const mxu_backend *be = backends[CPU];
  int takers = 0;
  for (int set = 0; set < 2; set++) {
    const conv_case *cases = set ? bf16_conv_cases : conv_cases;
    int count = set ? COUNT(bf16_conv_cases) : COUNT(conv_cases);
    for (int i = 0; i < count; i++) {
      weighted_case c = conv_weighted(&cases[i], fused_acts[i % 2], i % 3 != 0);
      char label[96];
      snprintf(label, sizeof label, "bf16 tensors %s case %d",
               set ? "long" : "f32-set", i);
      if (!be->conv2d_bf16_tensors(&c.conv_desc)) {
        for (int f = 1; f < 16; f *= 2) {
          mxu_conv2d_desc d = c.conv_desc;
          d.x_bf16 = f & 1, d.y_bf16 = f >> 1 & 1;
          d.dx_bf16 = f >> 2 & 1, d.dy_bf16 = f >> 3;
          mxu_op *op = NULL;
          CHECK_MSG(be->conv2d_create(&d, &op) == MXU_ERR_UNSUPPORTED && !op,
                    "%s: bf16 tensors (%d) taken where the backend said no",
                    label, f);
          if (op) be->op_free(op);
        }
        continue;
      }
      takers++;
      float limit = sqrtf(3.0f / (float)c.fan_in), *in[4], *out[16][4];
      for (int k = 0; k < 4; k++) {
        in[k] = k == W ? rnd(c.n[k], -limit, limit) : rnd(c.n[k], -1, 1);
        for (int f = 0; f < 16; f++) out[f][k] = zeros(c.n[k]);
      }
      for (int f = 0; f < 16; f++) bf16_tensor_step(c, f, in, out[f]);
      static const char *const what[4] = {"dx", "dw", "db", "y"};
      for (int f = 1; f < 16; f++)
        for (int k = 0; k < 4; k++) {
          int rounded = (k == Y && f & 2) || (k == DX && f & 4);
          size_t bad = c.n[k];
          for (size_t e = 0; e < c.n[k] && bad == c.n[k]; e++) {
            float want = out[0][k][e];
            if (rounded) want = cpu_bf16_float(cpu_bf16_of(want));
            if (memcmp(&out[f][k][e], &want, sizeof want) != 0) bad = e;
          }
          CHECK_MSG(bad == c.n[k], "%s flags %d: %s [%zu] %.9g, want %.9g",
                    label, f, what[k], bad, bad < c.n[k] ? out[f][k][bad] : 0.0,
                    bad < c.n[k] ? out[0][k][bad] : 0.0);
        }
      for (int k = 0; k < 4; k++) {
        free(in[k]);
        for (int f = 0; f < 16; f++) free(out[f][k]);
      }
    }
  }
  printf("test_backend_ops: %d convs take bf16 tensors\n", takers);
  /* the own 16-channel forward among them, and oneDNN's */
  if (bf16_expected()) CHECK(takers >= 4);
}

/* dw and db by the definition: double sums of the bf16-rounded x and
 * dy's products (sum_abs: of their magnitudes, which bound float32's
 * rounding of the sums). */
static void weight_gradient_reference(const mxu_conv2d_desc *d, const float *x,
                                      const float *dy, double *dw, double *db,
                                      double *sum_abs) {
  int64_t taps = (int64_t)d->kernel_h * d->kernel_w;
  memset(dw, 0, (size_t)(taps * d->in_c * d->out_c) * sizeof *dw);
  memset(sum_abs, 0, (size_t)(taps * d->in_c * d->out_c) * sizeof *dw);
  memset(db, 0, (size_t)d->out_c * sizeof *db);
  for (int64_t n = 0; n < d->n; n++)
    for (int oy = 0; oy < d->out_h; oy++)
      for (int ox = 0; ox < d->out_w; ox++) {
        const float *g = dy + ((n * d->out_h + oy) * d->out_w + ox) * d->out_c;
        for (int o = 0; o < d->out_c; o++)
          db[o] += cpu_bf16_float(cpu_bf16_of(g[o]));
        for (int64_t t = 0; t < taps; t++) {
          int r = oy * d->stride_h + (int)(t / d->kernel_w) - d->pad_top;
          int c = ox * d->stride_w + (int)(t % d->kernel_w) - d->pad_left;
          if (r < 0 || r >= d->in_h || c < 0 || c >= d->in_w) continue;
          const float *v = x + ((n * d->in_h + r) * d->in_w + c) * d->in_c;
          for (int i = 0; i < d->in_c; i++)
            for (int o = 0; o < d->out_c; o++) {
              double p = (double)cpu_bf16_float(cpu_bf16_of(v[i])) *
                         cpu_bf16_float(cpu_bf16_of(g[o]));
              int64_t e = (t * d->in_c + i) * d->out_c + o;
              dw[e] += p;
              sum_abs[e] += fabs(p);
            }
        }
      }
}

/* The own bf16 weight gradient (3x3, stride 1 or 2, 16-64 input channels:
 * conv_bf16_grad.c) gives the sums of the rounded products but for
 * float32's rounding of the sums (under 1e-5 of the products'
 * magnitudes, where one product off or one pair of pixels misplaced
 * is some 1e-2), with x and dy in float32 and in bf16, and the same bits
 * on 1 and 2 threads. Odd widths (a pixel pair's second half past the
 * row), valid padding, 48 channels, batches that leave a block short.
 * Where the loops are not built (no AVX512_BF16 at compile time: the
 * sanitizer build), oneDNN's weight gradient over its fixed blocks of
 * images (weighted_blocks.c) is held to the same. */
static void test_bf16_weight_gradient(void) {
  static const conv_case cases[] = {
      {37, 7, 9, 16, 16, 3, 3, 1, 1, MXU_SAME},
      {5, 6, 11, 48, 32, 3, 3, 1, 1, MXU_VALID},
      {3, 5, 5, 64, 64, 3, 3, 1, 1, MXU_SAME},
      {21, 8, 8, 32, 16, 3, 3, 1, 1, MXU_SAME},
      {6, 9, 10, 16, 32, 3, 3, 2, 2, MXU_SAME}, /* pads 1/1 and 0/1 */
      {4, 11, 8, 32, 16, 3, 3, 2, 2, MXU_VALID},
  };
  if (!bf16_expected()) return;
  int threads = omp_get_max_threads();
  for (int i = 0; i < COUNT(cases); i++) {
    weighted_case c = conv_weighted(&cases[i], MXU_LINEAR, 1);
    const mxu_conv2d_desc *d = &c.conv_desc;
    float *x = rnd(c.n[X], -1, 1), *dy = rnd(c.n[DY], -1, 1);
    uint16_t *xh = pack_bf16(x, c.n[X]), *dyh = pack_bf16(dy, c.n[DY]);
    double *want = malloc(c.n[W] * sizeof *want),
           *db_want = malloc(c.n[B] * sizeof *want);
    double *bound = malloc(c.n[W] * sizeof *want);
    weight_gradient_reference(d, x, dy, want, db_want, bound);
    float *dw[4], *db[4];
    for (int run = 0; run < 4; run++) { /* bf16 x and dy or not, threads */
      mxu_conv2d_desc rd = *d;
      rd.x_bf16 = rd.dy_bf16 = run & 1;
      omp_set_num_threads(run < 2 ? 1 : 2);
      dw[run] = zeros(c.n[W]), db[run] = zeros(c.n[B]);
      mxu_op *op = NULL;
      CHECK_OK(backends[CPU]->conv2d_create(&rd, &op));
      if (!op) continue;
#ifdef __AVX512BF16__
      CHECK_MSG(op->conv_bf16_grad != NULL, "bf16 dw case %d: not own", i);
#endif
      backends[CPU]->conv2d_backward_weights(
          op, run & 1 ? (const float *)xh : x,
          run & 1 ? (const float *)dyh : dy, dw[run], db[run]);
      backends[CPU]->op_free(op);
    }
    omp_set_num_threads(threads);
    double worst = 0.0;
    for (size_t e = 0; e < c.n[W]; e++) {
      double err = fabs(dw[0][e] - want[e]) / (bound[e] + 1e-30);
      if (err > worst) worst = err;
    }
    for (size_t o = 0; o < c.n[B]; o++) {
      double err = fabs(db[0][o] - db_want[o]) / (double)cases[i].n /
                   cases[i].h / cases[i].w;
      if (err > worst) worst = err;
    }
    CHECK_MSG(worst < 1e-5, "bf16 dw case %d: off the sums by %.3g", i, worst);
    for (int run = 1; run < 4; run++)
      CHECK_MSG(!memcmp(dw[run], dw[0], c.n[W] * sizeof(float)) &&
                    !memcmp(db[run], db[0], c.n[B] * sizeof(float)),
                "bf16 dw case %d: run %d's bits differ", i, run);
    for (int run = 0; run < 4; run++) free(dw[run]), free(db[run]);
    free(x), free(dy), free(xh), free(dyh), free(want), free(db_want),
        free(bound);
  }
}

static void test_bf16(void) {
  test_bf16_tensors();
  test_bf16_weight_gradient();
  bf16_conv_cases_check(conv_cases, COUNT(conv_cases), "f32-set");
  bf16_conv_cases_check(bf16_conv_cases, COUNT(bf16_conv_cases), "long");
  bf16_dense_cases_check(dense_cases, COUNT(dense_cases), "f32-set");
  bf16_dense_cases_check(bf16_dense_cases, COUNT(bf16_dense_cases), "long");
  /* Where the CPU has bf16, it must have been used: float32 would agree
   * with the oracle to ~1e-6. */
  if (bf16_expected())
    CHECK_MSG(bf16_worst > BF16_MIN_ERROR,
              "bf16 results within %.3g of float32: bf16 did not run",
              bf16_worst);
  printf("test_backend_ops: bf16 worst error %.4f (tolerance %.2f)\n",
         bf16_worst, TOL_BF16);
}

/* ---- pooling ----------------------------------------------------------- */

static const conv_case pool_cases[] = {
    /* n, h, w, c, (filters unused), ph, pw, sh, sw, padding */
    {3, 7, 5, 3, 0, 2, 2, 2, 2, MXU_VALID},
    {3, 7, 5, 3, 0, 2, 2, 2, 2, MXU_SAME}, /* pads 0/1 */
    {3, 7, 5, 3, 0, 3, 3, 1, 1, MXU_SAME}, /* overlapping, pads 1/1 */
    {2, 6, 6, 5, 0, 3, 3, 2, 2, MXU_SAME}, /* pads 0/1 */
    {2, 7, 7, 4, 0, 4, 4, 1, 1, MXU_SAME}, /* pads 1/2 */
    {2, 8, 8, 16, 0, 2, 2, 2, 2, MXU_VALID},
    {3, 7, 5, 3, 0, 3, 2, 2, 1, MXU_VALID},
};

static mxu_pool2d_desc pool_desc(const conv_case *c, int is_max) {
  mxu_pool2d_desc d = {0};
  d.n = c->n, d.in_h = c->h, d.in_w = c->w, d.c = c->c;
  d.pool_h = c->kh, d.pool_w = c->kw, d.stride_h = c->sh, d.stride_w = c->sw;
  d.out_h = mxu_conv_output_size(c->h, c->kh, c->sh, c->padding, &d.pad_top,
                                 &d.pad_bottom);
  d.out_w = mxu_conv_output_size(c->w, c->kw, c->sw, c->padding, &d.pad_left,
                                 &d.pad_right);
  d.is_max = is_max;
  return d;
}

/* out: training y, inference y, dx. */
static void pool_run(const mxu_pool2d_desc *d, const float *x, const float *dy,
                     float *const out[3], int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(be->pool2d_create(d, &op));
  if (!op) return;
  size_t bytes = be->pool2d_workspace_bytes(op);
  if (which == CPU) CHECK(d->is_max ? bytes > 0 : bytes == 0);
  void *workspace = bytes ? mxu_aligned_alloc(bytes) : NULL;
  be->pool2d_forward(op, 1, x, out[0], workspace);
  be->pool2d_forward(op, 0, x, out[1], NULL);
  be->pool2d_backward(op, x, out[0], dy, workspace, out[2]);
  mxu_aligned_free(workspace);
  expect_no_exec_error(be->name);
  be->op_free(op);
}

static void pool_check(const conv_case *c, int is_max, int index) {
  mxu_pool2d_desc d = pool_desc(c, is_max);
  size_t nx = (size_t)d.n * d.in_h * d.in_w * d.c;
  size_t ny = (size_t)d.n * d.out_h * d.out_w * d.c;
  float *x = rnd(nx, -1, 1), *dy = rnd(ny, -1, 1);
  float *y[2], *yi[2], *dx[2];
  for (int k = 0; k < 2; k++) {
    y[k] = zeros(ny), yi[k] = zeros(ny), dx[k] = zeros(nx);
    pool_run(&d, x, dy, (float *[]){y[k], yi[k], dx[k]}, k);
  }
  char label[128];
  snprintf(label, sizeof label, "%s pool case %d pads %d/%d,%d/%d",
           is_max ? "max" : "avg", index, d.pad_top, d.pad_bottom, d.pad_left,
           d.pad_right);
  expect_pair(label, "training y", y, ny, TOL_OPS);
  expect_pair(label, "inference y", yi, ny, TOL_OPS);
  expect_pair(label, "backward dx", dx, nx, TOL_OPS);
  free_pair(y), free_pair(yi), free_pair(dx);
  free(x), free(dy);
}

static void test_pool2d(void) {
  int cases = (int)(sizeof pool_cases / sizeof *pool_cases);
  for (int i = 0; i < cases; i++) {
    pool_check(&pool_cases[i], 1, i);
    pool_check(&pool_cases[i], 0, i);
  }
}

/* ---- conv + max pooling (+ relu), fused ------------------------------- *
 * cpu's fused op against cpu_ref's conv, pool and relu one after another:
 * the model-level fusion must compute exactly what the layers do. Few
 * input channels run conv_pool.c's loops, more conv_then_pool.c's. */

typedef struct conv_pool_case {
  int n, h, w, c, filters, kh, kw;
  mxu_padding padding;
  int pool; /* window size and stride; 0 for 2 */
} conv_pool_case;

static const conv_pool_case conv_pool_cases[] = {
    {3, 28, 28, 1, 64, 3, 3, MXU_VALID, 0}, /* Fashion-MNIST's first layer */
    {5, 9, 7, 3, 32, 3, 3, MXU_VALID, 0},   /* odd conv output: a row dropped */
    {2, 8, 8, 2, 16, 2, 2, MXU_VALID, 0},
    {9, 6, 6, 4, 48, 1, 1, MXU_VALID, 0}, /* two image blocks, a tail */
    {2, 7, 7, 4, 16, 3, 3, MXU_VALID, 0}, /* 36 taps: three gradient chunks */
    /* conv_then_pool: on one thread the first runs oneDNN's Winograd
     * (blocked y), on two the own (NHWC), see test_conv_pool; the others
     * the own Winograd or direct (NHWC). */
    {32, 3, 3, 128, 256, 3, 3, MXU_SAME, 0}, /* a row and column dropped */
    {32, 9, 9, 16, 32, 3, 3, MXU_SAME, 0},
    {32, 8, 8, 32, 16, 3, 3, MXU_VALID, 0},
    {3, 7, 7, 8, 16, 3, 3, MXU_VALID, 0},
    {2, 11, 10, 5, 32, 3, 3, MXU_SAME, 3}, /* 3x3 windows, two dropped */
    {4, 8, 8, 3, 32, 3, 3, MXU_SAME, 0},   /* on conv_few.c's conv */
};
enum { FIRST_WINOGRAD_CONV_POOL = 5, WINOGRAD_CONV_POOLS = 1 };

/* y[n, out] = relu?(x) elementwise; the mask variant is for gradients. */
static void relu_in_place(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
}

static void mask_by_positive(float *g, const float *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(v[i] > 0.0f)) g[i] = 0.0f;
}

typedef struct conv_pool_io {
  const float *x, *w, *b, *dy;
  float *y, *y_infer, *dx, *dw, *db; /* out */
} conv_pool_io;

/* Layer by layer: z = conv(x) + b, a = act(z), p = pool(a), y = relu?(p);
 * and back, on cpu_ref but for z. z comes from cpu's unfused conv, which
 * the fused op runs too: relu's mask and the argmax are discontinuous,
 * and Winograd's rounding, within tolerance of cpu_ref's (test_conv2d),
 * flips the odd one when a z is near 0 or a window near a tie. */
static void conv_pool_reference(const mxu_conv2d_desc *cd,
                                const mxu_pool2d_desc *pd, int relu,
                                const conv_pool_io *io) {
  const mxu_backend *be = backends[REF];
  mxu_conv2d_desc linear = *cd;
  linear.activation = MXU_LINEAR;
  size_t nz = (size_t)cd->n * cd->out_h * cd->out_w * cd->out_c;
  size_t ny = (size_t)pd->n * pd->out_h * pd->out_w * pd->c;
  float *z = zeros(nz), *a = zeros(nz), *da = zeros(nz), *dp = zeros(ny);
  mxu_op *conv = NULL, *pool = NULL, *cpu_conv = NULL;
  CHECK_OK(be->conv2d_create(&linear, &conv));
  CHECK_OK(backends[CPU]->conv2d_create(&linear, &cpu_conv));
  CHECK_OK(be->pool2d_create(pd, &pool));
  if (!conv || !pool || !cpu_conv) goto done;
  backends[CPU]->conv2d_forward(cpu_conv, io->x, io->w, io->b, z);
  memcpy(a, z, nz * sizeof *a);
  if (cd->activation == MXU_RELU) relu_in_place(a, nz);
  be->pool2d_forward(pool, 1, a, io->y, NULL);
  if (relu) relu_in_place(io->y, ny);
  memcpy(io->y_infer, io->y, ny * sizeof *io->y);
  memcpy(dp, io->dy, ny * sizeof *dp);
  if (relu) mask_by_positive(dp, io->y, ny);
  be->pool2d_backward(pool, a, io->y, dp, NULL, da);
  if (cd->activation == MXU_RELU) mask_by_positive(da, z, nz);
  be->conv2d_backward_weights(conv, io->x, da, io->dw, io->db);
  be->conv2d_backward_data(conv, da, io->w, io->dx);
done:
  be->op_free(conv);
  be->op_free(pool);
  backends[CPU]->op_free(cpu_conv);
  free(z), free(a), free(da), free(dp);
}

static void conv_pool_fused(const mxu_conv2d_desc *cd,
                            const mxu_pool2d_desc *pd, int relu,
                            const conv_pool_io *io) {
  const mxu_backend *be = backends[CPU];
  mxu_op *op = NULL;
  CHECK_OK(be->conv_pool_create(cd, pd, relu, &op));
  if (!op) return;
  void *ws = mxu_aligned_alloc(be->conv_pool_workspace_bytes(op));
  be->conv_pool_forward(op, 0, io->x, io->w, io->b, io->y_infer, NULL);
  be->conv_pool_forward(op, 1, io->x, io->w, io->b, io->y, ws);
  be->conv_pool_backward(op, io->x, io->w, io->dy, ws, io->dw, io->db, io->dx);
  mxu_aligned_free(ws);
  be->op_free(op);
}

/* x rounded to bfloat16 (to nearest, ties to even), in place. */
static void round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    u = (u + 0x7FFF + (u >> 16 & 1)) & 0xFFFF0000u;
    memcpy(&x[i], &u, sizeof u);
  }
}

/* Case c's conv (act, bias) and the max pooling after it: 2x2, or
 * c->pool. */
static void conv_pool_descs(const conv_pool_case *c, mxu_activation act,
                            int has_bias, mxu_conv2d_desc *cd,
                            mxu_pool2d_desc *pd) {
  conv_case cc = {c->n,  c->h,  c->w, c->c, c->filters,
                  c->kh, c->kw, 1,    1,    c->padding};
  *cd = conv_desc(&cc, act, has_bias);
  int win = c->pool ? c->pool : 2;
  conv_case pc = {c->n, cd->out_h, cd->out_w, c->filters, 0,
                  win,  win,       win,       win,        MXU_VALID};
  *pd = pool_desc(&pc, 1);
}

/* Whether conv_pool.c's bf16 loops are built: for AVX512_BF16
 * (-march=native on such a CPU); else bf16 runs as float32. */
static int own_bf16(void) {
#ifdef __AVX512BF16__
  return 1;
#else
  return 0;
#endif
}

/* Where they are, a bf16 result off float32's by more than
 * BF16_MIN_ERROR: bf16 ran. */
static void expect_bf16_ran(const char *label, double worst) {
  CHECK_MSG(!own_bf16() || worst > BF16_MIN_ERROR,
            "%s: error %.3g: bf16 did not run", label, worst);
}

/* In bf16 (cd.bf16), x and w come rounded to bf16: the products are then
 * exact in float32, and the fused op must match the layers to float32's
 * tolerance, bf16 pairing of taps and all. */
static void conv_pool_check(const conv_pool_case *c, mxu_activation act,
                            int relu, int has_bias, int bf16) {
  mxu_conv2d_desc cd;
  mxu_pool2d_desc pd;
  conv_pool_descs(c, act, has_bias, &cd, &pd);
  cd.bf16 = bf16;
  int win = pd.pool_h;
  size_t nx = (size_t)c->n * c->h * c->w * c->c;
  size_t nw = (size_t)c->kh * c->kw * c->c * c->filters;
  size_t ny = (size_t)c->n * pd.out_h * pd.out_w * c->filters;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(c->filters, -1, 1);
  float *dy = rnd(ny, -1, 1);
  if (bf16) round_bf16(x, nx), round_bf16(w, nw);
  float *y[2], *yi[2], *dx[2], *dw[2], *db[2];
  for (int k = 0; k < 2; k++) {
    y[k] = zeros(ny), yi[k] = zeros(ny), dx[k] = zeros(nx);
    dw[k] = zeros(nw), db[k] = zeros(c->filters);
    conv_pool_io io = {x,     w,     has_bias ? b : NULL,    dy, y[k], yi[k],
                       dx[k], dw[k], has_bias ? db[k] : NULL};
    (k == CPU ? conv_pool_fused : conv_pool_reference)(&cd, &pd, relu, &io);
  }
  char label[128];
  snprintf(label, sizeof label,
           "%sconv+pool %dx%dx%d->%d k%dx%d pool %d %s%s%s on %d threads",
           bf16 ? "bf16 " : "", c->h, c->w, c->c, c->filters, c->kh, c->kw, win,
           act_names[act], relu ? "+relu" : "", has_bias ? "+bias" : "",
           omp_get_max_threads());
  expect_pair(label, "training y", y, ny, TOL_LAYER);
  expect_pair(label, "inference y", yi, ny, TOL_LAYER);
  expect_pair(label, "backward dx", dx, nx, TOL_LAYER);
  expect_pair(label, "backward dw", dw, nw, TOL_LAYER);
  if (has_bias) expect_pair(label, "backward db", db, c->filters, TOL_LAYER);
  free_pair(y), free_pair(yi), free_pair(dx), free_pair(dw), free_pair(db);
  free(x), free(w), free(b), free(dy);
}

/* ---- conv + pool + Flatten + Dense ------------------------------------ */

/* The fused cases: Fashion-MNIST's network; 1x1 kernels, a group of
 * images left over; 70 images, two kernel-gradient blocks; one unit. */
static const conv_pool_case cpd_cases[] = {
    {3, 28, 28, 1, 64, 3, 3, MXU_VALID, 0},
    {9, 6, 6, 4, 48, 1, 1, MXU_VALID, 0},
    {70, 10, 10, 1, 16, 3, 3, MXU_VALID, 0},
    {5, 9, 7, 3, 32, 3, 3, MXU_VALID, 0},
};
static const int cpd_units[] = {10, 16, 3, 1};

typedef struct cpd_io {
  float *logits, *logits_infer, *dx, *dw, *db, *dkernel, *dbias; /* out */
} cpd_io;

/* conv_pool_reference fed dy of y = dlogits kernel^T; the Dense in
 * doubles on its y. Where the Dense runs bf16 (dd->bf16 and own_bf16:
 * the test rounds kernel and dlogits), y and dy rounded to bf16 as it
 * rounds them (its dy, summed in another order, rounds the same but for
 * the odd value at a tie). */
static void cpd_reference(const mxu_conv2d_desc *cd, const mxu_pool2d_desc *pd,
                          int relu, const mxu_dense_desc *dd,
                          const float *const w[MXU_CPD_PARAMS], const float *x,
                          const float *dl, const cpd_io *io) {
  int64_t n = dd->n, in = dd->in, units = dd->out;
  float *y = zeros((size_t)(n * in)), *yi = zeros((size_t)(n * in));
  float *dy = zeros((size_t)(n * in));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < in; j++) {
      double s = 0.0;
      for (int64_t k = 0; k < units; k++)
        s += (double)dl[i * units + k] * w[MXU_CPD_DENSE_W][j * units + k];
      dy[i * in + j] = (float)s;
    }
  conv_pool_io cio = {
      x,     w[MXU_CPD_CONV_W], w[MXU_CPD_CONV_B], dy, y, yi, io->dx, io->dw,
      io->db};
  int rounds = dd->bf16 && own_bf16();
  if (rounds) round_bf16(dy, (size_t)(n * in));
  conv_pool_reference(cd, pd, relu, &cio);
  if (rounds) round_bf16(y, (size_t)(n * in));
  for (int64_t k = 0; k < units; k++) {
    for (int64_t i = 0; i < n; i++) {
      double s = w[MXU_CPD_DENSE_B] ? w[MXU_CPD_DENSE_B][k] : 0.0;
      for (int64_t j = 0; j < in; j++)
        s += (double)y[i * in + j] * w[MXU_CPD_DENSE_W][j * units + k];
      io->logits[i * units + k] = io->logits_infer[i * units + k] = (float)s;
    }
    double sb = 0.0;
    for (int64_t i = 0; i < n; i++) sb += dl[i * units + k];
    if (io->dbias) io->dbias[k] = (float)sb;
    for (int64_t j = 0; j < in; j++) {
      double s = 0.0;
      for (int64_t i = 0; i < n; i++)
        s += (double)y[i * in + j] * dl[i * units + k];
      io->dkernel[j * units + k] = (float)s;
    }
  }
  free(y), free(yi), free(dy);
}

static void cpd_fused(const mxu_conv2d_desc *cd, const mxu_pool2d_desc *pd,
                      int relu, const mxu_dense_desc *dd,
                      const float *const w[MXU_CPD_PARAMS], const float *x,
                      const float *dl, const cpd_io *io) {
  const mxu_backend *be = backends[CPU];
  mxu_op *op = NULL;
  CHECK_OK(be->conv_pool_dense_create(cd, pd, relu, dd, &op));
  if (!op) return;
  void *ws = mxu_aligned_alloc(be->conv_pool_workspace_bytes(op));
  float *const dw[MXU_CPD_PARAMS] = {io->dw, io->db, io->dkernel, io->dbias};
  be->conv_pool_dense_forward(op, 0, x, w, io->logits_infer, NULL);
  be->conv_pool_dense_forward(op, 1, x, w, io->logits, ws);
  be->conv_pool_dense_backward(op, x, w, dl, ws, dw, io->dx);
  mxu_aligned_free(ws);
  be->op_free(op);
}

/* Against the layers one by one, and the same bits on one thread as on
 * two. */
static void cpd_check(int c_index, mxu_activation act, int relu, int has_bias,
                      int bf16) {
  const conv_pool_case *c = &cpd_cases[c_index];
  mxu_conv2d_desc cd;
  mxu_pool2d_desc pd;
  conv_pool_descs(c, act, has_bias, &cd, &pd);
  cd.bf16 = bf16; /* the inputs rounded, as conv_pool_check */
  int units = cpd_units[c_index], in = pd.out_h * pd.out_w * pd.c;
  mxu_dense_desc dd = {c->n, in, units, has_bias, MXU_LINEAR, bf16};
  size_t nx = (size_t)c->n * c->h * c->w * c->c;
  size_t nw = (size_t)c->kh * c->kw * c->c * c->filters;
  size_t nk = (size_t)in * units, nl = (size_t)c->n * units;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(c->filters, -1, 1);
  float *kernel = rnd(nk, -0.1f, 0.1f), *bias = rnd(units, -1, 1);
  float *dl = rnd(nl, -1, 1);
  if (bf16) {
    round_bf16(x, nx), round_bf16(w, nw);
    round_bf16(kernel, nk), round_bf16(dl, nl);
  }
  const float *const params[MXU_CPD_PARAMS] = {w, has_bias ? b : NULL, kernel,
                                               has_bias ? bias : NULL};
  float *out[7][3]; /* logits, inference logits, dx, dw, db, dkernel, dbias */
  size_t sizes[7] = {nl, nl, nx, nw, (size_t)c->filters, nk, (size_t)units};
  int threads = omp_get_max_threads();
  for (int r = 0; r < 3; r++) { /* cpu_ref, cpu on 1 thread, on 2 */
    for (int k = 0; k < 7; k++) out[k][r] = zeros(sizes[k]);
    cpd_io io = {out[0][r],
                 out[1][r],
                 out[2][r],
                 out[3][r],
                 has_bias ? out[4][r] : NULL,
                 out[5][r],
                 has_bias ? out[6][r] : NULL};
    omp_set_num_threads(r == 2 ? 2 : 1);
    (r ? cpd_fused : cpd_reference)(&cd, &pd, relu, &dd, params, x, dl, &io);
  }
  omp_set_num_threads(threads);
  static const char *const names[7] = {
      "logits", "inference logits", "dx", "dw", "db", "dkernel", "dbias"};
  char label[128];
  snprintf(label, sizeof label,
           "%sconv+pool+dense %dx%dx%d->%d k%dx%d %s%s%s, %d units, n %d",
           bf16 ? "bf16 " : "", c->h, c->w, c->c, c->filters, c->kh, c->kw,
           act_names[act], relu ? "+relu" : "", has_bias ? "+bias" : "", units,
           c->n);
  for (int k = 0; k < 7; k++) {
    if (!has_bias && (k == 4 || k == 6)) continue;
    float *vs_ref[2] = {out[k][1], out[k][0]};
    float *vs_two[2] = {out[k][2], out[k][1]};
    expect_pair(label, names[k], vs_ref, sizes[k], TOL_LAYER);
    expect_pair(label, names[k], vs_two, sizes[k], 0.0);
  }
  for (int k = 0; k < 7; k++)
    for (int r = 0; r < 3; r++) free(out[k][r]);
  free(x), free(w), free(b), free(kernel), free(bias), free(dl);
}

/* As conv_pool_bf16_runs, for the logits: Fashion-MNIST's, and with
 * three input channels (the conv float32, the Dense alone bf16). */
static void cpd_bf16_runs(const conv_pool_case *c, int units) {
  mxu_conv2d_desc cd;
  mxu_pool2d_desc pd;
  conv_pool_descs(c, MXU_LINEAR, 1, &cd, &pd);
  int in = pd.out_h * pd.out_w * pd.c;
  mxu_dense_desc dd = {c->n, in, units, 1, MXU_LINEAR, 0};
  size_t nx = (size_t)c->n * c->h * c->w * c->c, nl = (size_t)c->n * units;
  size_t nw = (size_t)c->kh * c->kw * c->c * c->filters;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(c->filters, -1, 1);
  float *kernel = rnd((size_t)in * units, -0.1f, 0.1f);
  float *bias = rnd(units, -1, 1);
  const float *const params[MXU_CPD_PARAMS] = {w, b, kernel, bias};
  float *logits[2] = {zeros(nl), zeros(nl)};
  for (int k = 0; k < 2; k++) {
    mxu_op *op = NULL;
    cd.bf16 = dd.bf16 = k == CPU;
    CHECK_OK(backends[CPU]->conv_pool_dense_create(&cd, &pd, 0, &dd, &op));
    if (op)
      backends[CPU]->conv_pool_dense_forward(op, 0, x, params, logits[k], NULL);
    backends[CPU]->op_free(op);
  }
  char label[64];
  snprintf(label, sizeof label, "bf16 conv+pool+dense %dx%dx%d", c->h, c->w,
           c->c);
  double worst =
      expect_pair(label, "logits against float32", logits, nl, TOL_BF16);
  expect_bf16_ran(label, worst);
  free_pair(logits);
  free(x), free(w), free(b), free(kernel), free(bias);
}

/* Declined: 17 units; a Dense reading less than the whole pooled image;
 * a relu Dense; a bf16 Dense after a float32 conv. */
static void cpd_declines(void) {
  conv_case cc = {2, 8, 8, 1, 16, 3, 3, 1, 1, MXU_VALID};
  mxu_conv2d_desc cd = conv_desc(&cc, MXU_RELU, 1);
  conv_case pc = {2, 6, 6, 16, 0, 2, 2, 2, 2, MXU_VALID};
  mxu_pool2d_desc pd = pool_desc(&pc, 1);
  mxu_dense_desc ok = {2, 3 * 3 * 16, 16, 1, MXU_LINEAR, 0};
  mxu_dense_desc bad[4] = {ok, ok, ok, ok};
  bad[0].out = 17, bad[1].in -= 16, bad[2].activation = MXU_RELU;
  bad[3].bf16 = 1;
  mxu_op *op = NULL;
  CHECK_OK(backends[CPU]->conv_pool_dense_create(&cd, &pd, 0, &ok, &op));
  backends[CPU]->op_free(op);
  for (int i = 0; i < 4; i++) {
    op = NULL;
    CHECK_MSG(backends[CPU]->conv_pool_dense_create(&cd, &pd, 0, &bad[i],
                                                    &op) == MXU_ERR_UNSUPPORTED,
              "conv+pool+dense decline %d", i);
    CHECK(op == NULL);
  }
  CHECK(backends[REF]->conv_pool_dense_create == NULL);
}

static void test_conv_pool_dense(void) {
  for (int i = 0; i < COUNT(cpd_cases); i++)
    for (int v = 0; v < 8; v++)
      cpd_check(i, v & 1 ? MXU_RELU : MXU_LINEAR, v >> 1 & 1, (i + v) % 2 == 0,
                v >> 2);
  cpd_bf16_runs(&cpd_cases[0], cpd_units[0]);
  cpd_bf16_runs(&cpd_cases[3], cpd_units[3]);
  cpd_declines();
}

/* What neither fused op takes is declined, for the layers to run:
 * filters not in sixteens, tanh, average pooling, windows that overlap. */
static void conv_pool_declines(void) {
  conv_case cc = {2, 9, 9, 1, 10, 3, 3, 1, 1, MXU_VALID};
  conv_case pc = {2, 7, 7, 10, 0, 2, 2, 2, 2, MXU_VALID};
  mxu_pool2d_desc pd10 = pool_desc(&pc, 1);
  mxu_conv2d_desc odd = conv_desc(&cc, MXU_LINEAR, 1); /* 10 filters */
  cc.c = 8, cc.filters = pc.c = 16;
  mxu_conv2d_desc tanh = conv_desc(&cc, MXU_TANH, 1);
  mxu_conv2d_desc wide = conv_desc(&cc, MXU_RELU, 1);
  mxu_pool2d_desc pd = pool_desc(&pc, 1), avg = pool_desc(&pc, 0);
  pc.sh = pc.sw = 1;
  mxu_pool2d_desc overlap = pool_desc(&pc, 1);
  const mxu_conv2d_desc *convs[] = {&odd, &tanh, &wide, &wide};
  const mxu_pool2d_desc *pools[] = {&pd10, &pd, &avg, &overlap};
  for (int i = 0; i < COUNT(convs); i++) {
    mxu_op *op = NULL;
    CHECK_MSG(backends[CPU]->conv_pool_create(convs[i], pools[i], 0, &op) ==
                  MXU_ERR_UNSUPPORTED,
              "conv+pool decline %d", i);
    CHECK(op == NULL);
  }
  CHECK(backends[REF]->conv_pool_create == NULL); /* the oracle never fuses */
}

/* conv_then_pool's Winograd cases do run Winograd on one thread (where
 * oneDNN has it), and so keep the conv's output blocked. */
static void conv_pool_winograd(void) {
  int avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) ==
               dnnl_cpu_isa_avx512_core;
  for (int i = FIRST_WINOGRAD_CONV_POOL;
       i < FIRST_WINOGRAD_CONV_POOL + WINOGRAD_CONV_POOLS; i++) {
    const conv_pool_case *c = &conv_pool_cases[i];
    mxu_conv2d_desc cd;
    mxu_pool2d_desc pd;
    conv_pool_descs(c, MXU_RELU, 1, &cd, &pd);
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->conv_pool_create(&cd, &pd, 0, &op));
    if (!op) continue;
    CHECK_MSG((strstr(forward_impl(op), "wino") != NULL) == avx512,
              "conv+pool case %d: %s", i, forward_impl(op));
    backends[CPU]->op_free(op);
  }
}

/* In bf16 a 3x3 conv the own Winograd takes runs it in f32 where it pools
 * 2x2 windows as it goes; with 3x3 windows, which it does not pool, the
 * conv stays bf16. */
static void conv_pool_bf16_choice(void) {
  for (int win = 2; win <= 3; win++) {
    conv_case cc = {8, 12, 12, 32, 32, 3, 3, 1, 1, MXU_SAME};
    mxu_conv2d_desc cd = conv_desc(&cc, MXU_RELU, 1);
    cd.bf16 = 1;
    conv_case pc = {8, 12, 12, 32, 0, win, win, win, win, MXU_VALID};
    mxu_pool2d_desc pd = pool_desc(&pc, 1);
    mxu_op *op = NULL;
    CHECK_OK(backends[CPU]->conv_pool_create(&cd, &pd, 0, &op));
    if (!op) continue;
    CHECK_MSG(runs_bf16(op) == (win == 3 && bf16_expected()),
              "bf16 conv+pool, %dx%d windows: %s", win, win, forward_impl(op));
    backends[CPU]->op_free(op);
  }
}

/* In bf16 conv_then_pool writes the conv's dy rounded to bf16 where the
 * primitives read it: the very bits of the unfused bf16 conv (cpu's) fed
 * the pooling's and relu's f32 gradient, which oneDNN's conversion rounds.
 * The first case's dy (8 MB as f32) is stored past the cache, the second
 * drops a row and a column. Without bf16, both run f32, alike too. 5x5
 * kernels: the own Winograd would take 3x3 ones under 2x2 windows
 * (conv_pool_bf16_choice); under 3x3 windows the third, a 3x3 kernel,
 * runs bf16, its weight gradient on conv_bf16_grad.c's loops from the
 * op's dy copy. */
static void conv_pool_bf16(void) {
  static const conv_case cases[] = {{64, 32, 32, 32, 32, 5, 5, 1, 1, MXU_SAME},
                                    {8, 9, 9, 16, 32, 5, 5, 1, 1, MXU_SAME},
                                    {8, 9, 9, 16, 32, 3, 3, 1, 1, MXU_SAME}};
  static const int windows[] = {2, 2, 3};
  const mxu_backend *be = backends[CPU];
  for (int i = 0; i < COUNT(cases); i++) {
    mxu_conv2d_desc cd = conv_desc(&cases[i], MXU_RELU, 1);
    cd.bf16 = 1;
    int k = windows[i];
    conv_case pc = {cd.n, cd.out_h, cd.out_w, cd.out_c, 0,
                    k,    k,        k,        k,        MXU_VALID};
    mxu_pool2d_desc pd = pool_desc(&pc, 1);
    size_t nx = (size_t)cd.n * cd.in_h * cd.in_w * cd.in_c;
    size_t nw = (size_t)cd.kernel_h * cd.kernel_w * cd.in_c * cd.out_c;
    size_t nz = (size_t)cd.n * cd.out_h * cd.out_w * cd.out_c;
    size_t ny = (size_t)cd.n * pd.out_h * pd.out_w * pd.c;
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -0.2f, 0.2f);
    float *b = rnd(cd.out_c, -1, 1), *dy = rnd(ny, -1, 1);
    float *z = zeros(nz), *dz = zeros(nz);
    float *y[2], *yi[2], *dx[2], *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
      y[k] = zeros(ny), yi[k] = zeros(ny), dx[k] = zeros(nx);
      dw[k] = zeros(nw), db[k] = zeros(cd.out_c);
    }
    conv_pool_io io = {x, w, b, dy, y[CPU], yi[CPU], dx[CPU], dw[CPU], db[CPU]};
    conv_pool_fused(&cd, &pd, 0, &io);
    mxu_op *conv = NULL, *pool = NULL;
    CHECK_OK(be->conv2d_create(&cd, &conv));
    CHECK_OK(backends[REF]->pool2d_create(&pd, &pool));
    if (conv && pool) {
      be->conv2d_forward(conv, x, w, b, z);
      backends[REF]->pool2d_forward(pool, 1, z, y[REF], NULL);
      backends[REF]->pool2d_backward(pool, z, y[REF], dy, NULL, dz);
      mask_by_positive(dz, z, nz);
      be->conv2d_backward_weights(conv, x, dz, dw[REF], db[REF]);
      be->conv2d_backward_data(conv, dz, w, dx[REF]);
    }
    be->op_free(conv);
    backends[REF]->op_free(pool);
    char label[64];
    snprintf(label, sizeof label, "bf16 conv+pool case %d", i);
    expect_pair(label, "y", y, ny, 0.0);
    expect_pair(label, "dx", dx, nx, 0.0);
    expect_pair(label, "dw", dw, nw, 0.0);
    expect_pair(label, "db", db, cd.out_c, 0.0);
    free_pair(y), free_pair(yi), free_pair(dx), free_pair(dw), free_pair(db);
    free(x), free(w), free(b), free(dy), free(z), free(dz);
  }
}

/* One input channel, in float32 and in bf16, where conv_pool.c pairs the
 * taps in vdpbf16ps. Fashion-MNIST's first layer (26 conv columns: two vectors
 * of pairs, the second overlapping the first); 2x2 kernels (6 columns, masked);
 * 1x1 kernels, one tap (its pair's other half zero; a patch of 4 floats in a
 * vector of columns each) and 48 filters; 34 columns. */
static const conv_pool_case one_channel_cases[] = {
    {3, 28, 28, 1, 64, 3, 3, MXU_VALID, 0},
    {2, 8, 8, 1, 16, 2, 2, MXU_VALID, 0},
    {9, 6, 6, 1, 48, 1, 1, MXU_VALID, 0},
    {2, 40, 37, 1, 32, 3, 3, MXU_VALID, 0},
};

/* On unrounded inputs the bf16 op's y is off float32's by bf16's
 * rounding: within TOL_BF16, and (where the CPU has AVX512_BF16) more
 * than BF16_MIN_ERROR, or bf16 did not run. */
static void conv_pool_bf16_runs(const conv_pool_case *c) {
  mxu_conv2d_desc cd;
  mxu_pool2d_desc pd;
  conv_pool_descs(c, MXU_LINEAR, 1, &cd, &pd);
  size_t nx = (size_t)c->n * c->h * c->w;
  size_t nw = (size_t)c->kh * c->kw * c->filters;
  size_t ny = (size_t)c->n * pd.out_h * pd.out_w * c->filters;
  float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(c->filters, -1, 1);
  float *y[2] = {zeros(ny), zeros(ny)};
  for (int k = 0; k < 2; k++) {
    mxu_op *op = NULL;
    cd.bf16 = k == CPU;
    CHECK_OK(backends[CPU]->conv_pool_create(&cd, &pd, 0, &op));
    if (op) backends[CPU]->conv_pool_forward(op, 0, x, w, b, y[k], NULL);
    backends[CPU]->op_free(op);
  }
  char label[64];
  snprintf(label, sizeof label, "bf16 conv+pool k%dx%d, %d filters", c->kh,
           c->kw, c->filters);
  double worst = expect_pair(label, "y against float32", y, ny, TOL_BF16);
  expect_bf16_ran(label, worst);
  free_pair(y);
  free(x), free(w), free(b);
}

/* Every case on one thread and on two: the same shapes then run
 * conv_then_pool on Winograd's blocked layout and on direct's NHWC. */
static void test_conv_pool(void) {
  int threads = omp_get_max_threads();
  for (int t = 1; t <= 2; t++) {
    omp_set_num_threads(t);
    for (int i = 0; i < COUNT(conv_pool_cases); i++)
      for (int v = 0; v < 4; v++)
        conv_pool_check(&conv_pool_cases[i], v & 1 ? MXU_RELU : MXU_LINEAR,
                        v >> 1, (i + v) % 2 == 0, 0);
    for (int i = 0; i < COUNT(one_channel_cases); i++)
      for (int v = 0; v < 8; v++)
        conv_pool_check(&one_channel_cases[i], v & 1 ? MXU_RELU : MXU_LINEAR,
                        v >> 1 & 1, (i + v) % 2 == 0, v >> 2);
  }
  for (int i = 0; i < COUNT(one_channel_cases); i++)
    conv_pool_bf16_runs(&one_channel_cases[i]);
  omp_set_num_threads(1);
  conv_pool_winograd();
  omp_set_num_threads(threads);
  conv_pool_declines();
  conv_pool_bf16();
  conv_pool_bf16_choice();
}

/* ---- batch normalisation ----------------------------------------------- */

typedef struct bn_case {
  int64_t rows;
  int c;
  float epsilon;
} bn_case;

/* Channels not in sixteens run cpu's periodic loops over whole periods
 * of lcm(c, 16) values, and the plain ones over the rows left. */
static const bn_case bn_cases[] = {
    {3 * 7 * 5, 3, 1e-3f}, {7, 5, 1e-3f},
    {64, 16, 1e-5f},       {2 * 9 * 9, 32, 1e-3f},
    {2100, 3, 1e-3f}, /* three blocks, a tail */
    {1000, 5, 1e-3f},      {37, 24, 1e-3f},
    {40, 300, 1e-3f}}; /* rows longer than a bf16 y's chunk */

/* y: the training output the backward masks dy by, with the relu fused
 * (NULL: the run's own). */
typedef struct bn_inputs {
  const float *x, *gamma, *beta, *dy, *mean, *var, *y;
} bn_inputs;

/* out: y, mean, var (training); inference y; dx, dgamma, dbeta. */
static void bn_run(const mxu_batchnorm_desc *d, const bn_inputs *in,
                   float *const out[7], int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(be->batchnorm_create(d, &op));
  if (!op) return;
  be->batchnorm_forward_training(op, in->x, in->gamma, in->beta, out[0], out[1],
                                 out[2]);
  be->batchnorm_forward_inference(op, in->x, in->gamma, in->beta, in->mean,
                                  in->var, out[3]);
  /* Both backwards start from the oracle's batch statistics, so the
   * gradients are compared on identical inputs. */
  be->batchnorm_backward(op, in->x, in->y ? in->y : out[0], in->dy, in->gamma,
                         in->beta, out[1], out[2], out[4], out[5], out[6]);
  expect_no_exec_error(be->name);
  be->op_free(op);
}

/* act: MXU_LINEAR, or the relu, relu6, silu or hard_silu fused; for relu6
 * and hard_silu gammas of 3-9 put part of y above the cap (and of the
 * normalised values below -3) even in the 7-row case, for silu in odd cases
 * gammas of 40-120 part of the normalised values beyond +-88, where cpu's exp
 * clamps (both checked). */
static void bn_check(const bn_case *c, mxu_activation act, int index) {
  mxu_batchnorm_desc d = {c->rows, c->c, c->epsilon, act, 0, 0, 0, 0};
  size_t n = (size_t)c->rows * c->c;
  int wide = act == MXU_SILU && index % 2;
  int capped_act = act == MXU_RELU6 || act == MXU_HARD_SILU;
  float gamma_low = capped_act ? 3.0f : wide ? 40.0f : 0.5f;
  bn_inputs in = {rnd(n, -1, 3),
                  rnd(c->c, gamma_low, 3 * gamma_low),
                  rnd(c->c, -1, 1),
                  rnd(n, -1, 1),
                  rnd(c->c, -0.5f, 1),
                  rnd(c->c, 0.2f, 2),
                  NULL};
  size_t sizes[7] = {n, c->c, c->c, n, n, c->c, c->c};
  float *out[2][7];
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 7; j++) out[k][j] = zeros(sizes[j]);
  bn_run(&d, &in, out[REF], REF);
  /* The cpu backward gets the oracle's mean, var and y as its inputs. */
  memcpy(out[CPU][1], out[REF][1], c->c * sizeof(float));
  memcpy(out[CPU][2], out[REF][2], c->c * sizeof(float));
  in.y = out[REF][0];
  bn_run(&d, &in, out[CPU], CPU);
  static const char *const what[7] = {
      "training y", "mean", "variance", "inference y", "dx", "dgamma", "dbeta"};
  char label[64];
  snprintf(label, sizeof label, "batchnorm case %d + %s", index,
           act_names[act]);
  for (int j = 0; j < 7; j++)
    expect_pair(label, what[j], (float *[]){out[CPU][j], out[REF][j]}, sizes[j],
                TOL_LAYER);
  size_t capped = 0, beyond = 0, flat = 0;
  for (size_t j = 0; j < n; j++) {
    capped += out[REF][0][j] == 6.0f;
    beyond += out[REF][0][j] > 88.0f;
    flat += out[REF][0][j] == 0.0f; /* hard_silu: v <= -3 */
  }
  CHECK_MSG(act != MXU_RELU6 || capped > 0, "%s: no y capped", label);
  CHECK_MSG(act != MXU_HARD_SILU || flat > 0,
            "%s: no normalised value below -3", label);
  CHECK_MSG(!wide || beyond > 0, "%s: no y beyond 88", label);
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 7; j++) free(out[k][j]);
  free((void *)in.x), free((void *)in.gamma), free((void *)in.beta);
  free((void *)in.dy), free((void *)in.mean), free((void *)in.var);
}

/* n values as bf16 (pack) or back (unpack, into floats). */
static uint16_t *pack_bf16(const float *x, size_t n) {
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = cpu_bf16_of(x[i]);
  return h;
}

static void unpack_bf16(const float *packed, size_t n, float *to) {
  const uint16_t *h = (const uint16_t *)packed;
  for (size_t i = n; i-- > 0;) to[i] = cpu_bf16_float(h[i]);
}

/* bf16 tensors (x_bf16, y_bf16, dx_bf16, dy_bf16): with x and dy rounded
 * to bf16, cpu agrees with the oracle; then for every choice of bf16
 * among them, x and dy passed in bf16 give the float32 ones' bits, and a
 * bf16 y or dx is the float32 one rounded, nothing else changing. */
static void bn_bf16_check(const bn_case *c, mxu_activation act, int index) {
  size_t n = (size_t)c->rows * c->c;
  bn_inputs in = {rnd(n, -1, 3), rnd(c->c, 0.5f, 1.5f), rnd(c->c, -1, 1),
                  rnd(n, -1, 1), rnd(c->c, -0.5f, 1),   rnd(c->c, 0.2f, 2),
                  NULL};
  round_bf16((float *)in.x, n);
  round_bf16((float *)in.dy, n);
  uint16_t *xh = pack_bf16(in.x, n), *dyh = pack_bf16(in.dy, n);
  size_t sizes[7] = {n, c->c, c->c, n, n, c->c, c->c};
  float *ref[7], *base[7], *out[7];
  for (int j = 0; j < 7; j++)
    ref[j] = zeros(sizes[j]), base[j] = zeros(sizes[j]),
    out[j] = zeros(sizes[j]);
  mxu_batchnorm_desc d = {c->rows, c->c, c->epsilon, act, 0, 0, 0, 0};
  bn_run(&d, &in, ref, REF);
  in.y = ref[0];
  for (int j = 1; j < 3; j++) memcpy(base[j], ref[j], sizes[j] * 4);
  bn_run(&d, &in, base, CPU);
  char label[80];
  snprintf(label, sizeof label, "batchnorm bf16 case %d + %s", index,
           act_names[act]);
  static const char *const what[7] = {
      "training y", "mean", "variance", "inference y", "dx", "dgamma", "dbeta"};
  for (int j = 0; j < 7; j++)
    expect_pair(label, what[j], (float *[]){base[j], ref[j]}, sizes[j],
                TOL_LAYER);
  for (int f = 1; f < 16; f++) {
    d.x_bf16 = f & 1, d.y_bf16 = f >> 1 & 1;
    d.dx_bf16 = f >> 2 & 1, d.dy_bf16 = f >> 3;
    bn_inputs at = in;
    if (d.x_bf16) at.x = (const float *)xh;
    if (d.dy_bf16) at.dy = (const float *)dyh;
    for (int j = 1; j < 3; j++) memcpy(out[j], ref[j], sizes[j] * 4);
    bn_run(&d, &at, out, CPU);
    if (d.y_bf16)
      unpack_bf16(out[0], n, out[0]), unpack_bf16(out[3], n, out[3]);
    if (d.dx_bf16) unpack_bf16(out[4], n, out[4]);
    for (int j = 0; j < 7; j++) {
      int rounded = ((j == 0 || j == 3) && d.y_bf16) || (j == 4 && d.dx_bf16);
      size_t bad = sizes[j];
      for (size_t i = 0; i < sizes[j] && bad == sizes[j]; i++) {
        float want =
            rounded ? cpu_bf16_float(cpu_bf16_of(base[j][i])) : base[j][i];
        if (memcmp(&out[j][i], &want, sizeof want) != 0) bad = i;
      }
      CHECK_MSG(bad == sizes[j], "%s flags %d: %s [%zu] %.9g, want %.9g", label,
                f, what[j], bad, bad < sizes[j] ? out[j][bad] : 0.0,
                bad < sizes[j] ? base[j][bad] : 0.0);
    }
  }
  for (int j = 0; j < 7; j++) free(ref[j]), free(base[j]), free(out[j]);
  free(xh), free(dyh);
  free((void *)in.x), free((void *)in.gamma), free((void *)in.beta);
  free((void *)in.dy), free((void *)in.mean), free((void *)in.var);
}

/* silu keeps its dz in dx between its two passes: no bf16 dx with it. */
static void bn_bf16_silu_refused(void) {
  mxu_batchnorm_desc d = {64, 16, 1e-3f, MXU_SILU, 0, 0, 1, 0};
  mxu_op *op = NULL;
  CHECK(backends[CPU]->batchnorm_create(&d, &op) == MXU_ERR_ARG && !op);
}

static void test_batchnorm(void) {
  static const mxu_activation bn_acts[] = {MXU_LINEAR, MXU_RELU, MXU_RELU6,
                                           MXU_SILU, MXU_HARD_SILU};
  int cases = (int)(sizeof bn_cases / sizeof *bn_cases);
  for (int i = 0; i < cases; i++)
    for (int a = 0; a < 5; a++) bn_check(&bn_cases[i], bn_acts[a], i);
  for (int i = 0; i < cases; i++)
    for (int a = 0; a < 3; a++) bn_bf16_check(&bn_cases[i], bn_acts[a], i);
  bn_bf16_silu_refused();
}

/* ---- activations ------------------------------------------------------- */

typedef struct act_case {
  int64_t rows;
  int cols;
} act_case;

static const act_case act_cases[] = {{3, 7}, {105, 5}, {4, 10}, {1, 1}};

/* out: y, dx, dx computed in place over a copy of dy. */
static void act_run(const mxu_activation_desc *d, const float *x,
                    const float *y_ref, const float *dy, float *const out[3],
                    int which) {
  const mxu_backend *be = backends[which];
  mxu_op *op = NULL;
  CHECK_OK(be->activation_create(d, &op));
  if (!op) return;
  size_t n = (size_t)d->rows * d->cols;
  be->activation_forward(op, x, out[0]);
  /* Backward from the oracle's y, so only the backward is compared. */
  const float *y = y_ref ? y_ref : out[0];
  be->activation_backward(op, x, y, dy, out[1]);
  memcpy(out[2], dy, n * sizeof *dy);
  be->activation_backward(op, x, y, out[2], out[2]);
  expect_no_exec_error(be->name);
  be->op_free(op);
}

/* alpha: 0 for the name's default, else a layer's own (LeakyReLU, ELU). */
static void act_check(const act_case *c, mxu_activation act, float alpha,
                      int index) {
  mxu_activation_desc d = {act, c->rows, c->cols,
                           alpha ? alpha : mxu_activation_alpha(act)};
  size_t n = (size_t)c->rows * c->cols;
  float *x = rnd(n, -3, 3), *dy = rnd(n, -1, 1);
  float *y[2], *dx[2], *dx_in_place[2];
  for (int k = 0; k < 2; k++)
    y[k] = zeros(n), dx[k] = zeros(n), dx_in_place[k] = zeros(n);
  act_run(&d, x, NULL, dy, (float *[]){y[REF], dx[REF], dx_in_place[REF]}, REF);
  act_run(&d, x, y[REF], dy, (float *[]){y[CPU], dx[CPU], dx_in_place[CPU]},
          CPU);
  char label[64];
  snprintf(label, sizeof label, "activation %s (alpha %g) case %d",
           act_names[act], (double)d.alpha, index);
  expect_pair(label, "forward y", y, n, TOL_OPS);
  expect_pair(label, "backward dx", dx, n, TOL_OPS);
  expect_pair(label, "backward dx in place", dx_in_place, n, TOL_OPS);
  free_pair(y), free_pair(dx), free_pair(dx_in_place);
  free(x), free(dy);
}

static void test_activations(void) {
  int cases = (int)(sizeof act_cases / sizeof *act_cases);
  for (int i = 0; i < cases; i++)
    for (int a = MXU_LINEAR; a <= MXU_LAST_ACTIVATION; a++)
      act_check(&act_cases[i], (mxu_activation)a, 0.0f, i);
  act_check(&act_cases[1], MXU_LEAKY_RELU, 0.3f, 1);
  act_check(&act_cases[1], MXU_ELU, 0.5f, 1);
}

/* Far out, where these activations' values are tiny (or x itself): to
 * their own relative precision, not only to TOL_OPS absolute. A softplus
 * of -20 is 2e-9; oneDNN's kernel gave -1.9e-6, whose log (a Poisson
 * loss's) is NaN. */
static void test_activation_tails(void) {
  static const mxu_activation tails[] = {
      MXU_SIGMOID, MXU_SOFTPLUS,    MXU_MISH,      MXU_EXPONENTIAL,
      MXU_SILU,    MXU_LOG_SIGMOID, MXU_SQUAREPLUS};
  enum { N = 61 };
  float x[N], dy[N], y[2][N], dx[2][N];
  for (int i = 0; i < N; i++) {
    x[i] = i < 40 ? -40.0f + 0.75f * (float)i : 10.0f + (float)(i - 40);
    dy[i] = 1.0f;
  }
  for (size_t a = 0; a < sizeof tails / sizeof *tails; a++) {
    /* exp overflows past 88: its tail is the negative one only. */
    int n = tails[a] == MXU_EXPONENTIAL ? 40 : N;
    mxu_activation_desc d = {tails[a], 1, n, mxu_activation_alpha(tails[a])};
    for (int b = 0; b < 2; b++) {
      mxu_op *op = NULL;
      CHECK_OK(backends[b]->activation_create(&d, &op));
      if (!op) return;
      backends[b]->activation_forward(op, x, y[b]);
      backends[b]->activation_backward(op, x, y[b], dy, dx[b]);
      backends[b]->op_free(op);
    }
    for (int i = 0; i < n; i++) {
      CHECK_MSG(fabsf(y[CPU][i] - y[REF][i]) <= 1e-5f * fabsf(y[REF][i]),
                "%s(%g): %.8g, reference %.8g", act_names[tails[a]],
                (double)x[i], (double)y[CPU][i], (double)y[REF][i]);
      CHECK_MSG(fabsf(dx[CPU][i] - dx[REF][i]) <= 1e-5f * fabsf(dx[REF][i]),
                "%s'(%g): %.8g, reference %.8g", act_names[tails[a]],
                (double)x[i], (double)dx[CPU][i], (double)dx[REF][i]);
    }
  }
}

/* ---- losses ------------------------------------------------------------ */

typedef struct loss_inputs {
  int64_t n;
  int k;
  const int32_t *labels;
  const float *onehot, *mask;
} loss_inputs;

static void sce_check(const loss_inputs *in, const float *logits,
                      const char *label) {
  size_t nk = (size_t)in->n * in->k;
  float *probs[2], *loss[2], *dlogits[2];
  for (int b = 0; b < 2; b++) {
    probs[b] = zeros(nk), loss[b] = zeros(in->n), dlogits[b] = zeros(nk);
    backends[b]->softmax_cross_entropy(
        in->n, in->k, logits, in->labels, in->onehot, in->mask,
        1.0f / (float)in->n, probs[b], loss[b], dlogits[b]);
  }
  expect_pair(label, "softmax_cross_entropy probs", probs, nk, TOL_OPS);
  expect_pair(label, "softmax_cross_entropy loss", loss, in->n, TOL_OPS);
  expect_pair(label, "softmax_cross_entropy dlogits", dlogits, nk, TOL_OPS);
  free_pair(probs), free_pair(loss), free_pair(dlogits);
}

static void ce_check(const loss_inputs *in, const float *probs,
                     const char *label) {
  size_t nk = (size_t)in->n * in->k;
  float *loss[2], *dprobs[2];
  for (int b = 0; b < 2; b++) {
    loss[b] = zeros(in->n), dprobs[b] = zeros(nk);
    backends[b]->cross_entropy(in->n, in->k, probs, in->labels, in->onehot,
                               in->mask, 0.5f, loss[b], dprobs[b]);
  }
  expect_pair(label, "cross_entropy loss", loss, in->n, TOL_OPS);
  expect_pair(label, "cross_entropy dprobs", dprobs, nk, TOL_OPS);
  free_pair(loss), free_pair(dprobs);
}

/* Soft one-hot rows (random, normalised), labels, and a mask with zeros. */
static void loss_case(int64_t n, int k, int index) {
  size_t nk = (size_t)n * k;
  float *logits = rnd(nk, -5, 5), *probs = rnd(nk, 0.01f, 1);
  float *onehot = rnd(nk, 0, 1), *mask = zeros(n);
  int32_t *labels = malloc((size_t)n * sizeof *labels);
  for (int64_t i = 0; i < n; i++) {
    float sum = 0;
    for (int j = 0; j < k; j++) sum += onehot[i * k + j];
    for (int j = 0; j < k; j++) onehot[i * k + j] /= sum;
    labels[i] = (int32_t)((i * 7 + 3) % k);
    mask[i] = i % 3 == 1 ? 0.0f : 1.0f;
  }
  /* A target probability below the clip: loss -log(1e-7), no gradient. */
  probs[labels[0]] = 1e-9f;
  for (int variant = 0; variant < 4; variant++) {
    loss_inputs in = {n, k, variant & 1 ? NULL : labels,
                      variant & 1 ? onehot : NULL, variant & 2 ? mask : NULL};
    char label[96];
    snprintf(label, sizeof label, "loss case %d (%s%s)", index,
             variant & 1 ? "one-hot" : "sparse", variant & 2 ? ", masked" : "");
    sce_check(&in, logits, label);
    ce_check(&in, probs, label);
  }
  free(logits), free(probs), free(onehot), free(mask), free(labels);
}

static void test_losses(void) {
  loss_case(3, 7, 0);
  loss_case(32, 10, 1);
  loss_case(5, 1, 2);
  loss_case(9, 100, 3);
}

/* ---- multiply and optimisers ------------------------------------------- */

/* multiply and scale_shift, out of place and in place, over sizes up to
 * several of the threaded blocks (16384). Each value is one rounding of
 * the same operations, so the backends agree exactly. */
static void test_multiply(void) {
  const size_t counts[] = {1, 37, 1000, 70001};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    size_t n = counts[c];
    float *a = rnd(n, -2, 2), *b = rnd(n, 0, 2), *y[2], *in_place[2];
    float *shifted[2], *shifted_in_place[2];
    for (int k = 0; k < 2; k++) {
      y[k] = zeros(n), in_place[k] = copy_of(a, n);
      shifted[k] = zeros(n), shifted_in_place[k] = copy_of(a, n);
      backends[k]->multiply((int64_t)n, a, b, y[k]);
      backends[k]->multiply((int64_t)n, in_place[k], b, in_place[k]);
      backends[k]->scale_shift((int64_t)n, a, 0.3f, -1.7f, shifted[k]);
      backends[k]->scale_shift((int64_t)n, shifted_in_place[k], -1.0f, 3.0f,
                               shifted_in_place[k]);
    }
    expect_pair("multiply", "y", y, n, 0.0);
    expect_pair("multiply", "y in place", in_place, n, 0.0);
    expect_pair("scale_shift", "y", shifted, n, 0.0);
    expect_pair("scale_shift", "y in place", shifted_in_place, n, 0.0);
    for (size_t i = 0; i < n; i++) {
      float want = a[i] * 0.3f; /* rounded before the shift: no FMA */
      CHECK_MSG(shifted[0][i] == want + -1.7f && y[0][i] == a[i] * b[i],
                "scale_shift/multiply [%zu]: %.9g, %.9g", i,
                (double)shifted[0][i], (double)y[0][i]);
    }
    free_pair(y), free_pair(in_place);
    free_pair(shifted), free_pair(shifted_in_place);
    free(a), free(b);
  }
}

/* Per image and channel: scale_channels both ways (squeeze-and-excite's
 * Multiply, Dropout's per-sample or per-channel draws) and channel_mean
 * both ways (GlobalAveragePooling2D); one channel (a scale per image) is
 * cpu's own loop. */
static void test_channel_ops(void) {
  static const int64_t cases[][3] = {
      {3, 5, 1}, {5, 1000, 1}, {4, 7, 3}, {2, 6, 16}, {3, 9, 20}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int64_t n = cases[i][0], pixels = cases[i][1];
    int c = (int)cases[i][2];
    size_t count = (size_t)(n * pixels * c), per = (size_t)(n * c);
    float *x = rnd(count, -2, 2), *scale = rnd(per, -1, 2),
          *dy = rnd(count, -1, 1), *out[5][2];
    for (int k = 0; k < 2; k++) {
      const mxu_backend *be = backends[k];
      out[0][k] = zeros(count), out[1][k] = zeros(count);
      out[2][k] = zeros(per), out[3][k] = zeros(per), out[4][k] = zeros(count);
      be->scale_channels(n, pixels, c, x, scale, out[0][k]);
      be->scale_channels_backward(n, pixels, c, x, scale, dy, out[1][k],
                                  out[2][k]);
      be->channel_mean(n, pixels, c, x, out[3][k]);
      be->channel_mean_backward(n, pixels, c, scale, out[4][k]);
    }
    char label[64];
    snprintf(label, sizeof label, "channel ops %lldx%lldx%d", (long long)n,
             (long long)pixels, c);
    expect_pair(label, "scaled", out[0], count, TOL_OPS);
    expect_pair(label, "scaled dx", out[1], count, TOL_OPS);
    expect_pair(label, "scaled ds", out[2], per, TOL_LAYER);
    expect_pair(label, "mean", out[3], per, TOL_LAYER);
    expect_pair(label, "mean dx", out[4], count, TOL_OPS);
    /* one image's scale on another's pixels would differ */
    for (int64_t j = 0; j < n; j++)
      CHECK_MSG(out[0][CPU][j * pixels * c] == x[j * pixels * c] * scale[j * c],
                "%s: image %lld's first value", label, (long long)j);
    for (int k = 0; k < 5; k++) free_pair(out[k]);
    free(x), free(scale), free(dy);
  }
}

/* copy_rows: strided rows (Concatenate's slabs) and one row longer than
 * cpu's pieces, with a tail (an Add's gradient), each value where it
 * belongs and the strides' gaps untouched. */
static void test_copy_rows(void) {
  static const int64_t cases[][4] = {/* rows, width, src, dst strides */
                                     {7, 5, 9, 6},
                                     {300, 64, 64, 200},
                                     {1, 40000, 40000, 40000}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int64_t rows = cases[i][0], width = cases[i][1], from = cases[i][2],
            to = cases[i][3];
    float *src = rnd((size_t)(rows * from), -1, 1);
    for (int k = 0; k < 2; k++) {
      float *dst = zeros((size_t)(rows * to));
      backends[k]->copy_rows(rows, width, src, from, dst, to);
      size_t bad = 0;
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < to; j++)
          bad += dst[r * to + j] != (j < width ? src[r * from + j] : 0.0f);
      CHECK_MSG(bad == 0, "%s copy_rows %lldx%lld: %zu values off",
                backends[k]->name, (long long)rows, (long long)width, bad);
      free(dst);
    }
    free(src);
  }
}

/* Add, plain and relu'd, out of place and in place; more than a block
 * of values, so the cpu's threads split it. NaN stays NaN through the
 * relu (as TensorFlow's). */
static void test_add(void) {
  const size_t counts[] = {1, 37, 40000};
  for (size_t c = 0; c < 3; c++)
    for (int relu = 0; relu < 2; relu++) {
      size_t n = counts[c];
      float *a = rnd(n, -2, 2), *b = rnd(n, -2, 2), *y[2], *in_place[2];
      a[n / 2] = NAN;
      for (int k = 0; k < 2; k++) {
        y[k] = zeros(n), in_place[k] = copy_of(a, n);
        backends[k]->add((int64_t)n, a, b, relu, y[k]);
        backends[k]->add((int64_t)n, in_place[k], b, relu, in_place[k]);
        CHECK(isnan(y[k][n / 2]) && isnan(in_place[k][n / 2]));
        y[k][n / 2] = in_place[k][n / 2] = 0.0f;
      }
      size_t zeroed = 0;
      for (size_t i = 0; i < n; i++) {
        float want = i == n / 2 ? 0.0f : a[i] + b[i];
        if (relu && want < 0.0f) want = 0.0f;
        zeroed += relu && y[CPU][i] == 0.0f;
        CHECK_MSG(y[CPU][i] == want, "add%s [%zu]: %g, want %g",
                  relu ? "+relu" : "", i, (double)y[CPU][i], (double)want);
      }
      CHECK(!relu || n < 1000 || zeroed > n / 4);
      expect_pair(relu ? "add+relu" : "add", "y", y, n, TOL_OPS);
      expect_pair(relu ? "add+relu" : "add", "y in place", in_place, n,
                  TOL_OPS);
      free_pair(y), free_pair(in_place);
      free(a), free(b);
    }
}

/* The bf16 tensors' Add and multiply: for every choice of bf16 operands
 * (a, b, y), the float32 add (multiply) of the same values, y rounded;
 * and the Add's backward likewise. */
static void test_add_bf16(void) {
  const mxu_backend *be = backends[CPU];
  const size_t n = 40000; /* blocks on every thread, chunks and a tail */
  float *a = rnd(n, -2, 2), *b = rnd(n, -2, 2), *dy = rnd(n, -1, 1);
  round_bf16(a, n);
  round_bf16(b, n);
  uint16_t *ah = pack_bf16(a, n), *bh = pack_bf16(b, n);
  float *want = zeros(n), *got = zeros(n), *dx = zeros(n), *dx_want = zeros(n);
  for (int relu = 0; relu < 2; relu++) {
    be->add((int64_t)n, a, b, relu, want);
    for (unsigned bits = 0; bits < 8; bits++) {
      memset(got, 0, n * sizeof *got);
      be->add_bf16((int64_t)n, bits & 1 ? (void *)ah : a,
                   bits & 2 ? (void *)bh : b, bits, relu, got);
      if (bits & 4) unpack_bf16(got, n, got);
      size_t bad = n;
      for (size_t i = 0; i < n && bad == n; i++) {
        float w = bits & 4 ? cpu_bf16_float(cpu_bf16_of(want[i])) : want[i];
        if (got[i] != w) bad = i;
      }
      CHECK_MSG(bad == n, "add_bf16 bits %u relu %d [%zu]: %g, want %g", bits,
                relu, bad, bad < n ? got[bad] : 0.0, bad < n ? want[bad] : 0.0);
    }
  }
  /* multiply_bf16 (Dropout's mask) likewise against multiply */
  be->multiply((int64_t)n, a, b, want);
  for (unsigned bits = 0; bits < 8; bits++) {
    memset(got, 0, n * sizeof *got);
    be->multiply_bf16((int64_t)n, bits & 1 ? (void *)ah : a,
                      bits & 2 ? (void *)bh : b, bits, got);
    if (bits & 4) unpack_bf16(got, n, got);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
      float w = bits & 4 ? cpu_bf16_float(cpu_bf16_of(want[i])) : want[i];
      if (got[i] != w) bad = i;
    }
    CHECK_MSG(bad == n, "multiply_bf16 bits %u [%zu]", bits, bad);
  }
  /* Backward, from y = the relu'd sum in bf16 (as float32 too) and dy
   * rounded: for every choice of bf16 y, dy, dx, float32's relu mask (or
   * copy) of the same values, dx rounded. */
  uint16_t *yh = pack_bf16(want, n);
  unpack_bf16((const float *)yh, n, got);
  round_bf16(dy, n);
  uint16_t *dyh = pack_bf16(dy, n);
  mxu_activation_desc relu = {MXU_RELU, 1, (int)n, 0};
  mxu_op *op = NULL;
  CHECK_OK(be->activation_create(&relu, &op));
  if (op) be->activation_backward(op, NULL, got, dy, dx_want), be->op_free(op);
  for (int r = 0; r < 2; r++)
    for (unsigned bits = 1; bits < 8; bits++) {
      be->add_backward_bf16((int64_t)n, bits & 1 ? (void *)yh : got,
                            bits & 2 ? (void *)dyh : dy, bits, r, dx);
      if (bits & 4) unpack_bf16(dx, n, dx);
      CHECK_MSG(memcmp(dx, r ? dx_want : dy, n * sizeof *dx) == 0,
                "add_backward_bf16 bits %u relu %d", bits, r);
    }
  free(dyh);
  free(a), free(b), free(dy), free(ah), free(bh), free(yh);
  free(want), free(got), free(dx), free(dx_want);
}

#define STEPS 3

static void test_adam(void) {
  const size_t n = 1003; /* not a multiple of the vector width */
  float *w0 = rnd(n, -1, 1), *m0 = rnd(n, -0.1f, 0.1f);
  float *v0 = rnd(n, 0, 0.01f), *g[STEPS], *w[2], *m[2], *v[2];
  for (int step = 0; step < STEPS; step++) g[step] = rnd(n, -1, 1);
  for (int k = 0; k < 2; k++) {
    w[k] = copy_of(w0, n), m[k] = copy_of(m0, n), v[k] = copy_of(v0, n);
    for (int step = 0; step < STEPS; step++)
      backends[k]->adam_update((int64_t)n, w[k], g[step], m[k], v[k],
                               1e-3f * (float)(step + 1), 0.9f, 0.999f, 1e-7f);
  }
  expect_pair("adam", "w", w, n, TOL_OPS);
  expect_pair("adam", "m", m, n, TOL_OPS);
  expect_pair("adam", "v", v, n, TOL_OPS);
  for (int step = 0; step < STEPS; step++) free(g[step]);
  free_pair(w), free_pair(m), free_pair(v);
  free(w0), free(m0), free(v0);
}

static void sgd_check(float momentum, int nesterov) {
  const size_t n = 517;
  float *w0 = rnd(n, -1, 1), *g[STEPS], *w[2], *vel[2];
  for (int step = 0; step < STEPS; step++) g[step] = rnd(n, -1, 1);
  for (int k = 0; k < 2; k++) {
    w[k] = copy_of(w0, n);
    vel[k] = momentum == 0.0f ? NULL : zeros(n); /* unused at momentum 0 */
    for (int step = 0; step < STEPS; step++)
      backends[k]->sgd_update((int64_t)n, w[k], g[step], vel[k], 0.01f,
                              momentum, nesterov);
  }
  char label[64];
  snprintf(label, sizeof label, "sgd momentum %.1f%s", momentum,
           nesterov ? " nesterov" : "");
  expect_pair(label, "w", w, n, TOL_OPS);
  if (momentum != 0.0f) expect_pair(label, "velocity", vel, n, TOL_OPS);
  for (int step = 0; step < STEPS; step++) free(g[step]);
  free_pair(w), free_pair(vel), free(w0);
}

static void test_sgd(void) {
  sgd_check(0.0f, 0);
  sgd_check(0.9f, 0);
  sgd_check(0.9f, 1);
}

int main(void) {
  backends[CPU] = mxu_backend_cpu();
  backends[REF] = mxu_backend_cpu_ref();
  CHECK(strcmp(backends[CPU]->name, "cpu") == 0);
  test_conv2d();
  test_conv2d_winograd();
  test_conv2d_threads();
  test_conv2d_gemm();
  test_conv2d_windows();
  test_conv2d_gemm_sigmoid();
  test_conv2d_dw_threads();
  test_conv2d_chain();
  test_conv2d_backward_relu();
  test_conv2d_error();
  test_dense();
  test_bf16();
  test_bf16_choice();
  test_pool2d();
  test_conv_pool();
  test_conv_pool_dense();
  test_batchnorm();
  test_activations();
  test_activation_tails();
  test_losses();
  test_multiply();
  test_add();
  test_add_bf16();
  test_channel_ops();
  test_copy_rows();
  test_adam();
  test_sgd();
  printf("test_backend_ops: %d buffers compared, cpu against cpu_ref\n",
         comparisons);
  return check_report("test_backend_ops");
}
