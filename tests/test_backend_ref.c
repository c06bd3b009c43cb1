/* test_backend_ref.c — checks the oracle itself: every cpu_ref backward
 * against central finite differences of its forward, plus forward values
 * worked out by hand; other backends are only as right as cpu_ref is. */
#include "backend/backend.h"
#include "check.h"

#include <stdint.h>
#include <string.h>

static const mxu_backend *be;

/* ---- scratch memory and random numbers -------------------------------- */

static void *scratch[256];
static int scratch_count;

static float *floats(int64_t count) {
  float *p = calloc((size_t)(count > 0 ? count : 1), sizeof *p);
  if (!p || scratch_count == 256) abort();
  scratch[scratch_count++] = p;
  return p;
}

static void scratch_free(void) {
  while (scratch_count) free(scratch[--scratch_count]);
}

static float *filled(int64_t count, float value) {
  float *p = floats(count);
  for (int64_t i = 0; i < count; i++) p[i] = value;
  return p;
}

static float *copied(const float *src, int64_t count) {
  float *p = floats(count);
  memcpy(p, src, sizeof *p * (size_t)count);
  return p;
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static double uniform(double lo, double hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1.0p-53;
}

static int below(int bound) { return (int)uniform(0.0, bound) % bound; }

static float *random_floats(int64_t count, double lo, double hi) {
  float *p = floats(count);
  for (int64_t i = 0; i < count; i++) p[i] = (float)uniform(lo, hi);
  return p;
}

/* Values at least `step` apart in shuffled order, so a perturbation smaller
 * than step/2 can never change which element of a window is the maximum. */
static float *distinct_floats(int64_t count, double step) {
  float *p = floats(count);
  for (int64_t i = 0; i < count; i++) p[i] = (float)(step * (i - count / 2));
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = below((int)i + 1);
    float t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

static double weighted_sum(const float *y, const float *r, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; i++) sum += (double)y[i] * r[i];
  return sum;
}

static int max_abs_diff_ok(const float *a, const float *b, int64_t count,
                           double tol) {
  for (int64_t i = 0; i < count; i++)
    if (!(fabs((double)a[i] - b[i]) <= tol)) return 0;
  return 1;
}

/* ---- finite differences ------------------------------------------------ */

/* Every objective is a scalar computed in double from a kernel's float
 * outputs, typically sum(r * y) for fixed random r, so its gradient is what
 * a backward kernel gives for dy = r. */
typedef double (*objective_fn)(void *ctx);

/* Error is measured relative to the larger of the two values plus the rms
 * of the whole analytic gradient, so a near-zero entry is judged on the
 * array's scale instead of demanding digits float32 cannot give.
 * MXU_TEST_VERBOSE=1 prints each array's worst error. */
#define FD_RTOL 1e-3

static double fd_worst;
static int fd_arrays;

typedef struct fd_result {
  double error, analytic, numeric;
  int64_t where;
} fd_result;

static double rms(const float *a, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; i++) sum += (double)a[i] * a[i];
  return sqrt(sum / (double)count);
}

static double central_difference(objective_fn f, void *ctx, float *param,
                                 double eps) {
  float saved = *param;
  float plus = (float)(saved + eps), minus = (float)(saved - eps);
  *param = plus;
  double f_plus = f(ctx);
  *param = minus;
  double f_minus = f(ctx);
  *param = saved;
  return (f_plus - f_minus) / ((double)plus - minus);
}

static fd_result fd_compare(objective_fn f, void *ctx, float *param,
                            int64_t count, const float *analytic, double eps) {
  fd_result worst = {0.0, 0.0, 0.0, -1};
  double floor = rms(analytic, count);
  for (int64_t i = 0; i < count; i++) {
    double numeric = central_difference(f, ctx, param + i, eps);
    double a = analytic[i];
    double scale = fmax(fabs(a), fabs(numeric)) + floor;
    double error = scale > 0 ? fabs(a - numeric) / scale : 0.0;
    if (!(error <= worst.error)) {
      fd_result here = {error, a, numeric, i};
      worst = here;
    }
  }
  f(ctx); /* leave outputs as at the unperturbed point */
  return worst;
}

static void fd_check(const char *what, objective_fn f, void *ctx, float *param,
                     int64_t count, const float *analytic, double eps) {
  fd_result r = fd_compare(f, ctx, param, count, analytic, eps);
  CHECK_MSG(r.error <= FD_RTOL,
            "%s: element %lld: analytic %.8g, finite difference %.8g, "
            "relative error %.3g",
            what, (long long)r.where, r.analytic, r.numeric, r.error);
  if (r.error > fd_worst || r.error != r.error) fd_worst = r.error;
  fd_arrays++;
  if (getenv("MXU_TEST_VERBOSE")) printf("%-72s %.2e\n", what, r.error);
}

/* ---- conv2d and dense: forward(op, x, w, b, y) ------------------------ */

typedef void (*forward_fn)(mxu_op *, const float *, const float *,
                           const float *, float *);
typedef void (*backward_data_fn)(mxu_op *, const float *, const float *,
                                 float *);
typedef void (*backward_weights_fn)(mxu_op *, const float *, const float *,
                                    float *, float *);

typedef struct layer_ctx {
  mxu_op *op;
  forward_fn forward;
  backward_data_fn backward_data;
  backward_weights_fn backward_weights;
  mxu_activation activation; /* fused */
  int cols;                  /* output channels: one activation row */
  float *x, *w, *b, *y, *r;  /* b NULL without bias */
  int64_t nx, nw, nb, ny;
} layer_ctx;

static double layer_objective(void *p) {
  layer_ctx *c = p;
  c->forward(c->op, c->x, c->w, c->b, c->y);
  return weighted_sum(c->y, c->r, c->ny);
}

/* The layer's job, repeated here: undo the fused activation from y. */
static float *pre_activation_grad(const layer_ctx *c) {
  float *g = copied(c->r, c->ny);
  if (c->activation == MXU_LINEAR) return g;
  mxu_activation_desc d = {c->activation, c->ny / c->cols, c->cols, 0};
  mxu_op *act = NULL;
  CHECK_OK(be->activation_create(&d, &act));
  if (act) be->activation_backward(act, NULL, c->y, c->r, g);
  be->op_free(act);
  return g;
}

static void check_layer(const char *name, layer_ctx *c, double eps) {
  char what[160];
  layer_objective(c);
  float *g = pre_activation_grad(c);
  float *dx = filled(c->nx, 777.0f), *dw = filled(c->nw, 777.0f);
  float *db = c->b ? filled(c->nb, 777.0f) : NULL;
  c->backward_data(c->op, g, c->w, dx);
  c->backward_weights(c->op, c->x, g, dw, db);
  snprintf(what, sizeof what, "%s dx", name);
  fd_check(what, layer_objective, c, c->x, c->nx, dx, eps);
  snprintf(what, sizeof what, "%s dw", name);
  fd_check(what, layer_objective, c, c->w, c->nw, dw, eps);
  if (!c->b) return;
  snprintf(what, sizeof what, "%s db", name);
  fd_check(what, layer_objective, c, c->b, c->nb, db, eps);
}

/* Keras' output size and split of 'same' padding (odd pixel bottom/right),
 * restated so the test does not lean on the code it checks. */
static int geometry(int in, int k, int s, int same, int *before, int *after) {
  int out = same ? (in + s - 1) / s : (in - k) / s + 1;
  int total = same ? (out - 1) * s + k - in : 0;
  if (total < 0) total = 0;
  *before = total / 2;
  *after = total - total / 2;
  return out;
}

typedef struct conv_case {
  int n, h, w, c, oc, kh, kw, sh, sw, same, has_bias;
  mxu_activation activation;
} conv_case;

static mxu_conv2d_desc conv_desc(const conv_case *t) {
  mxu_conv2d_desc d = {0};
  d.n = t->n, d.in_h = t->h, d.in_w = t->w, d.in_c = t->c, d.out_c = t->oc;
  d.kernel_h = t->kh, d.kernel_w = t->kw;
  d.stride_h = t->sh, d.stride_w = t->sw;
  d.out_h = geometry(t->h, t->kh, t->sh, t->same, &d.pad_top, &d.pad_bottom);
  d.out_w = geometry(t->w, t->kw, t->sw, t->same, &d.pad_left, &d.pad_right);
  d.has_bias = t->has_bias;
  d.activation = t->activation;
  return d;
}

/* groups and dilation as Keras' Conv2D takes them (0: none). */
static void test_conv_case(const conv_case *t, int groups, int dilation) {
  mxu_conv2d_desc d = conv_desc(t);
  if (dilation > 1) {
    d.dilation_h = d.dilation_w = dilation;
    d.out_h = geometry(t->h, (t->kh - 1) * dilation + 1, t->sh, t->same,
                       &d.pad_top, &d.pad_bottom);
    d.out_w = geometry(t->w, (t->kw - 1) * dilation + 1, t->sw, t->same,
                       &d.pad_left, &d.pad_right);
  }
  d.groups = groups;
  layer_ctx c = {.forward = be->conv2d_forward,
                 .backward_data = be->conv2d_backward_data,
                 .backward_weights = be->conv2d_backward_weights,
                 .activation = d.activation,
                 .cols = d.out_c};
  char name[128];
  snprintf(
      name, sizeof name,
      "conv2d %dx%dx%dx%d k%dx%d s%d,%d pad %d,%d,%d,%d -> %dx%dx%d act %d "
      "groups %d dilation %d",
      d.n, d.in_h, d.in_w, d.in_c, d.kernel_h, d.kernel_w, d.stride_h,
      d.stride_w, d.pad_top, d.pad_left, d.pad_bottom, d.pad_right, d.out_h,
      d.out_w, d.out_c, (int)d.activation, groups, dilation);
  CHECK_OK(be->conv2d_create(&d, &c.op));
  if (!c.op) return;
  c.nx = (int64_t)d.n * d.in_h * d.in_w * d.in_c;
  c.nw = (int64_t)d.kernel_h * d.kernel_w * d.in_c / mxu_conv2d_groups(&d) *
         d.out_c;
  c.nb = d.out_c;
  c.ny = (int64_t)d.n * d.out_h * d.out_w * d.out_c;
  c.x = random_floats(c.nx, -1, 1);
  c.w = random_floats(c.nw, -0.5, 0.5);
  c.b = d.has_bias ? random_floats(c.nb, -0.5, 0.5) : NULL;
  c.y = floats(c.ny);
  c.r = random_floats(c.ny, -1, 1);
  check_layer(name, &c, 1e-2);
  be->op_free(c.op);
  scratch_free();
}

static void test_conv_gradients(void) {
  static const conv_case cases[] = {
      /* n  h  w  c oc kh kw sh sw same bias act */
      {2, 5, 6, 3, 4, 3, 3, 1, 1, 0, 1, MXU_LINEAR},
      {1, 7, 5, 2, 3, 3, 2, 2, 2, 0, 1, MXU_LINEAR},
      {2, 5, 6, 2, 3, 4, 4, 1, 1, 1, 1, MXU_LINEAR}, /* pads 1/2 */
      {1, 7, 6, 3, 2, 4, 3, 2, 2, 1, 0, MXU_LINEAR}, /* pads 1/2, 0/1 */
      {3, 6, 5, 1, 2, 3, 3, 2, 1, 1, 1, MXU_LINEAR},
      {1, 4, 4, 2, 5, 1, 1, 1, 1, 0, 1, MXU_LINEAR},
      {2, 5, 5, 2, 3, 3, 3, 1, 2, 1, 1, MXU_SIGMOID},
      {1, 6, 4, 3, 2, 2, 3, 2, 1, 1, 1, MXU_TANH},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    test_conv_case(&cases[i], 1, 1);
  /* Grouped (depthwise: a group per input channel, 2 outputs each) and
   * dilated. */
  static const conv_case grouped = {2, 6, 5, 4, 6, 3,
                                    3, 1, 1, 1, 1, MXU_LINEAR};
  static const conv_case depthwise = {2, 6, 7, 3, 6, 3,
                                      2, 2, 1, 1, 1, MXU_LINEAR};
  static const conv_case dilated = {1, 9, 8, 2, 3, 3, 3, 1, 1, 0, 1, MXU_TANH};
  test_conv_case(&grouped, 2, 1);
  test_conv_case(&depthwise, 3, 1);
  test_conv_case(&depthwise, 3, 2);
  test_conv_case(&dilated, 1, 2);
}

static void test_dense_case(int n, int in, int out, int has_bias,
                            mxu_activation activation) {
  mxu_dense_desc d = {n, in, out, has_bias, activation, 0};
  layer_ctx c = {.forward = be->dense_forward,
                 .backward_data = be->dense_backward_data,
                 .backward_weights = be->dense_backward_weights,
                 .activation = activation,
                 .cols = out};
  char name[96];
  snprintf(name, sizeof name, "dense %dx%d -> %d bias %d act %d", n, in, out,
           has_bias, (int)activation);
  CHECK_OK(be->dense_create(&d, &c.op));
  if (!c.op) return;
  c.nx = (int64_t)n * in, c.nw = (int64_t)in * out, c.nb = out;
  c.ny = (int64_t)n * out;
  c.x = random_floats(c.nx, -1, 1);
  c.w = random_floats(c.nw, -0.5, 0.5);
  c.b = has_bias ? random_floats(c.nb, -0.5, 0.5) : NULL;
  c.y = floats(c.ny);
  c.r = random_floats(c.ny, -1, 1);
  check_layer(name, &c, 1e-2);
  be->op_free(c.op);
  scratch_free();
}

static void test_dense_gradients(void) {
  test_dense_case(3, 5, 4, 1, MXU_LINEAR);
  test_dense_case(1, 7, 3, 0, MXU_LINEAR);
  test_dense_case(4, 6, 5, 1, MXU_SIGMOID);
  test_dense_case(2, 3, 7, 1, MXU_TANH);
}

/* A fused activation must equal the linear op followed by activation_*. */
static void check_fused(forward_fn forward, mxu_op *linear, mxu_op *fused,
                        mxu_activation activation, const layer_ctx *c) {
  float *y_linear = floats(c->ny), *y_fused = floats(c->ny);
  float *y_split = floats(c->ny);
  mxu_activation_desc ad = {activation, c->ny / c->cols, c->cols, 0};
  mxu_op *act = NULL;
  forward(linear, c->x, c->w, c->b, y_linear);
  forward(fused, c->x, c->w, c->b, y_fused);
  CHECK_OK(be->activation_create(&ad, &act));
  if (!act) return;
  be->activation_forward(act, y_linear, y_split);
  CHECK_MSG(max_abs_diff_ok(y_fused, y_split, c->ny, 1e-6),
            "fused activation %d", (int)activation);
  be->op_free(act);
}

static void test_fused_activations(void) {
  static const mxu_activation acts[] = {MXU_RELU, MXU_SIGMOID, MXU_TANH};
  conv_case t = {2, 5, 4, 3, 4, 3, 3, 2, 1, 1, 1, MXU_LINEAR};
  mxu_conv2d_desc cd = conv_desc(&t);
  mxu_dense_desc dd = {3, 5, 4, 1, MXU_LINEAR, 0};
  layer_ctx conv = {.cols = 4, .ny = 2L * cd.out_h * cd.out_w * 4};
  layer_ctx dense = {.cols = 4, .ny = 12};
  conv.x = random_floats(2L * 5 * 4 * 3, -1, 1);
  conv.w = random_floats(3L * 3 * 3 * 4, -0.5, 0.5);
  conv.b = dense.b = random_floats(4, -0.5, 0.5);
  dense.x = random_floats(15, -1, 1);
  dense.w = random_floats(20, -0.5, 0.5);
  for (int i = 0; i < 3; i++) {
    mxu_conv2d_desc cf = cd;
    mxu_dense_desc df = dd;
    mxu_op *ops[4] = {NULL, NULL, NULL, NULL};
    cf.activation = df.activation = acts[i];
    CHECK_OK(be->conv2d_create(&cd, &ops[0]));
    CHECK_OK(be->conv2d_create(&cf, &ops[1]));
    CHECK_OK(be->dense_create(&dd, &ops[2]));
    CHECK_OK(be->dense_create(&df, &ops[3]));
    if (ops[0] && ops[1])
      check_fused(be->conv2d_forward, ops[0], ops[1], acts[i], &conv);
    if (ops[2] && ops[3])
      check_fused(be->dense_forward, ops[2], ops[3], acts[i], &dense);
    for (int j = 0; j < 4; j++) be->op_free(ops[j]);
  }
  scratch_free();
}

/* ---- pooling ------------------------------------------------------------ */

typedef struct pool_ctx {
  mxu_op *op;
  float *x, *y, *r;
  int64_t ny;
} pool_ctx;

static double pool_objective(void *p) {
  pool_ctx *c = p;
  be->pool2d_forward(c->op, 1, c->x, c->y, NULL);
  return weighted_sum(c->y, c->r, c->ny);
}

typedef struct pool_case {
  int n, h, w, c, ph, pw, sh, sw, same, is_max;
} pool_case;

static mxu_pool2d_desc pool_desc(const pool_case *t) {
  mxu_pool2d_desc d = {0};
  d.n = t->n, d.in_h = t->h, d.in_w = t->w, d.c = t->c;
  d.pool_h = t->ph, d.pool_w = t->pw, d.stride_h = t->sh, d.stride_w = t->sw;
  d.out_h = geometry(t->h, t->ph, t->sh, t->same, &d.pad_top, &d.pad_bottom);
  d.out_w = geometry(t->w, t->pw, t->sw, t->same, &d.pad_left, &d.pad_right);
  d.is_max = t->is_max;
  return d;
}

static void test_pool_case(const pool_case *t) {
  mxu_pool2d_desc d = pool_desc(t);
  pool_ctx c = {NULL, NULL, NULL, NULL, (int64_t)d.n * d.out_h * d.out_w * d.c};
  int64_t nx = (int64_t)d.n * d.in_h * d.in_w * d.c;
  char name[128];
  snprintf(
      name, sizeof name, "%s pool %dx%dx%dx%d p%dx%d s%d,%d pad %d,%d,%d,%d dx",
      d.is_max ? "max" : "avg", d.n, d.in_h, d.in_w, d.c, d.pool_h, d.pool_w,
      d.stride_h, d.stride_w, d.pad_top, d.pad_left, d.pad_bottom, d.pad_right);
  CHECK_OK(be->pool2d_create(&d, &c.op));
  if (!c.op) return;
  CHECK(be->pool2d_workspace_bytes(c.op) == 0);
  c.x = distinct_floats(nx, 0.05);
  c.y = floats(c.ny);
  c.r = random_floats(c.ny, -1, 1);
  pool_objective(&c);
  float *dx = filled(nx, 777.0f);
  be->pool2d_backward(c.op, c.x, c.y, c.r, NULL, dx);
  fd_check(name, pool_objective, &c, c.x, nx, dx, 1e-2);
  be->op_free(c.op);
  scratch_free();
}

static void test_pool_gradients(void) {
  static const pool_case cases[] = {
      /* n  h  w  c ph pw sh sw same max */
      {2, 4, 6, 3, 2, 2, 2, 2, 0, 1},
      {1, 5, 5, 2, 2, 2, 2, 2, 1, 1}, /* pads 0/1 */
      {2, 5, 7, 2, 3, 3, 1, 1, 0, 1},
      {1, 6, 5, 3, 3, 2, 2, 1, 1, 1},
      {2, 4, 6, 3, 2, 2, 2, 2, 0, 0},
      {1, 5, 5, 2, 2, 2, 2, 2, 1, 0},
      {2, 5, 7, 2, 3, 3, 1, 1, 1, 0}, /* pads 1/1 */
      {1, 7, 6, 3, 4, 3, 2, 1, 1, 0}, /* pads 1/2, 1/1 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    test_pool_case(&cases[i]);
}

/* ---- batch normalisation ----------------------------------------------- */

typedef struct bn_ctx {
  mxu_op *op;
  float *x, *gamma, *beta, *y, *mean, *var, *r;
  int64_t count;
} bn_ctx;

static double bn_objective(void *p) {
  bn_ctx *c = p;
  be->batchnorm_forward_training(c->op, c->x, c->gamma, c->beta, c->y, c->mean,
                                 c->var);
  return weighted_sum(c->y, c->r, c->count);
}

/* The batch statistics, computed independently of the kernel. */
static void check_bn_stats(const bn_ctx *c, int64_t rows, int ch_count) {
  for (int ch = 0; ch < ch_count; ch++) {
    double sum = 0.0, sq = 0.0;
    for (int64_t r = 0; r < rows; r++) sum += c->x[r * ch_count + ch];
    double mean = sum / rows;
    for (int64_t r = 0; r < rows; r++)
      sq += pow(c->x[r * ch_count + ch] - mean, 2);
    CHECK_NEAR(c->mean[ch], mean, 1e-6 * (1 + fabs(mean)));
    CHECK_NEAR(c->var[ch], sq / rows, 1e-6 * (sq / rows));
  }
}

/* act: the relu, relu6 or silu after it fused (else MXU_LINEAR); the
 * objective then reads the activation's y, and the backward masks by it
 * (relus) or recomputes the normalised value (silu, given no y). For
 * relu6, gammas of 3-5 and betas of 1.5-2.5 put part of y above the
 * cap. */
static void test_bn_case(int64_t rows, int ch_count, float epsilon,
                         mxu_activation act) {
  mxu_batchnorm_desc d = {rows, ch_count, epsilon, act, 0, 0, 0, 0};
  const char *what = act == MXU_RELU6  ? "+relu6"
                     : act == MXU_RELU ? "+relu"
                     : act == MXU_SILU ? "+silu"
                                       : "";
  bn_ctx c = {0};
  char name[96];
  c.count = rows * ch_count;
  CHECK_OK(be->batchnorm_create(&d, &c.op));
  if (!c.op) return;
  c.x = random_floats(c.count, -1, 1);
  for (int64_t i = 0; i < c.count; i++)
    c.x[i] = c.x[i] * (1 + i % ch_count) + i % ch_count;
  c.gamma = act == MXU_RELU6 ? random_floats(ch_count, 3, 5)
                             : random_floats(ch_count, 0.5, 1.5);
  c.beta = act == MXU_RELU6 ? random_floats(ch_count, 1.5, 2.5)
                            : random_floats(ch_count, -0.5, 0.5);
  c.y = floats(c.count);
  c.mean = floats(ch_count), c.var = floats(ch_count);
  c.r = random_floats(c.count, -1, 1);
  bn_objective(&c);
  check_bn_stats(&c, rows, ch_count);
  float *dx = filled(c.count, 777.0f), *dgamma = filled(ch_count, 777.0f);
  float *dbeta = filled(ch_count, 777.0f);
  be->batchnorm_backward(c.op, c.x, act == MXU_SILU ? NULL : c.y, c.r, c.gamma,
                         c.beta, c.mean, c.var, dx, dgamma, dbeta);
  if (act == MXU_RELU || act == MXU_RELU6) {
    int64_t zeroed = 0, capped = 0;
    for (int64_t i = 0; i < c.count; i++) {
      zeroed += c.y[i] == 0.0f;
      capped += c.y[i] == 6.0f;
    }
    CHECK(zeroed > 0 && zeroed < c.count);
    CHECK(act != MXU_RELU6 || capped > 0);
  }
  snprintf(name, sizeof name, "batchnorm%s %lldx%d dx", what, (long long)rows,
           ch_count);
  fd_check(name, bn_objective, &c, c.x, c.count, dx, 1e-3);
  snprintf(name, sizeof name, "batchnorm%s %lldx%d dgamma", what,
           (long long)rows, ch_count);
  fd_check(name, bn_objective, &c, c.gamma, ch_count, dgamma, 1e-2);
  snprintf(name, sizeof name, "batchnorm%s %lldx%d dbeta", what,
           (long long)rows, ch_count);
  fd_check(name, bn_objective, &c, c.beta, ch_count, dbeta, 1e-2);
  be->op_free(c.op);
  scratch_free();
}

static void test_bn_gradients(void) {
  static const mxu_activation acts[] = {MXU_LINEAR, MXU_RELU, MXU_RELU6,
                                        MXU_SILU};
  for (int a = 0; a < 4; a++) {
    test_bn_case(7, 3, 1e-3f, acts[a]);
    test_bn_case(12, 2, 1e-3f, acts[a]);
    test_bn_case(5, 1, 1e-5f, acts[a]);
  }
}

/* ---- activations ------------------------------------------------------- */

typedef struct act_ctx {
  mxu_op *op;
  float *x, *y, *r;
  int64_t count;
} act_ctx;

static double act_objective(void *p) {
  act_ctx *c = p;
  be->activation_forward(c->op, c->x, c->y);
  return weighted_sum(c->y, c->r, c->count);
}

/* Where the activations have kinks or jumps (the shrinks' at +-0.5;
 * relu6's at 6 is outside the draws). */
static void push_from_kinks(float *p, int64_t count, double margin) {
  static const float kinks[] = {0.0f,  -0.5f, 0.5f,  -1.0f, 1.0f,
                                -2.5f, 2.5f,  -3.0f, 3.0f};
  for (int64_t i = 0; i < count; i++)
    for (int k = 0; k < (int)(sizeof kinks / sizeof *kinks); k++)
      if (fabsf(p[i] - kinks[k]) < margin)
        p[i] = kinks[k] + (p[i] < kinks[k] ? -2 * margin : 2 * margin);
}

static void test_activation_case(mxu_activation activation, float alpha,
                                 int64_t rows, int cols) {
  mxu_activation_desc d = {activation, rows, cols,
                           alpha ? alpha : mxu_activation_alpha(activation)};
  act_ctx c = {NULL, NULL, NULL, NULL, rows * cols};
  char name[64];
  CHECK_OK(be->activation_create(&d, &c.op));
  if (!c.op) return;
  c.x = random_floats(c.count, -3.5, 3.5);
  push_from_kinks(c.x, c.count, 0.05);
  c.y = floats(c.count);
  c.r = random_floats(c.count, -1, 1);
  act_objective(&c);
  float *dx = filled(c.count, 777.0f), *in_place = copied(c.r, c.count);
  be->activation_backward(c.op, c.x, c.y, c.r, dx);
  be->activation_backward(c.op, c.x, c.y, in_place, in_place); /* dx == dy */
  CHECK_MSG(max_abs_diff_ok(dx, in_place, c.count, 0.0),
            "activation %d: in-place backward differs", (int)activation);
  snprintf(name, sizeof name, "activation %d %lldx%d dx", (int)activation,
           (long long)rows, cols);
  fd_check(name, act_objective, &c, c.x, c.count, dx, 1e-2);
  be->op_free(c.op);
  scratch_free();
}

static void test_activation_gradients(void) {
  for (int a = MXU_LINEAR; a <= MXU_LAST_ACTIVATION; a++) {
    test_activation_case((mxu_activation)a, 0.0f, 3, 7);
    test_activation_case((mxu_activation)a, 0.0f, 1, 1);
  }
  test_activation_case(MXU_SOFTMAX, 0.0f, 4, 10);
  test_activation_case(MXU_LOG_SOFTMAX, 0.0f, 4, 10);
  test_activation_case(MXU_LEAKY_RELU, 0.3f, 3, 7); /* LeakyReLU's default */
  test_activation_case(MXU_ELU, 0.5f, 3, 7);
}

/* ---- losses ------------------------------------------------------------ */

typedef struct loss_ctx {
  int64_t n;
  int k, from_logits;
  float *input; /* logits or probabilities */
  const int32_t *labels;
  const float *onehot, *mask;
  float scale;
  float *probs, *loss, *grad;
} loss_ctx;

static void loss_run(loss_ctx *c) {
  if (c->from_logits)
    be->softmax_cross_entropy(c->n, c->k, c->input, c->labels, c->onehot,
                              c->mask, c->scale, c->probs, c->loss, c->grad);
  else
    be->cross_entropy(c->n, c->k, c->input, c->labels, c->onehot, c->mask,
                      c->scale, c->loss, c->grad);
}

static double loss_objective(void *p) {
  loss_ctx *c = p;
  double sum = 0.0;
  loss_run(c);
  for (int64_t i = 0; i < c->n; i++) sum += c->loss[i];
  return sum * c->scale;
}

/* Masked rows: zero loss and gradient; from logits, probs still written. */
static void check_masked_rows(const loss_ctx *c) {
  mxu_activation_desc d = {MXU_SOFTMAX, c->n, c->k, 0};
  mxu_op *softmax = NULL;
  float *p = floats(c->n * c->k);
  CHECK_OK(be->activation_create(&d, &softmax));
  if (softmax) be->activation_forward(softmax, c->input, p);
  be->op_free(softmax);
  for (int64_t i = 0; i < c->n; i++) {
    int masked = c->mask && c->mask[i] == 0.0f;
    if (masked) CHECK(c->loss[i] == 0.0f);
    if (!masked) CHECK(c->loss[i] > 0.0f);
    for (int j = 0; j < c->k && masked; j++)
      CHECK(c->grad[i * c->k + j] == 0.0f);
  }
  if (c->from_logits)
    CHECK_MSG(max_abs_diff_ok(c->probs, p, c->n * c->k, 1e-6), "probs");
}

/* targets: 0 sparse, 1 one-hot, 2 soft (rows of positive values summing
 * to 1, which the gradient formulas must handle as well). */
static void test_loss_case(int from_logits, int targets, int masked) {
  loss_ctx c = {.n = 5, .k = 6, .from_logits = from_logits};
  int32_t labels[5];
  float mask[5] = {1, 0, 1, 1, 0};
  float *onehot = floats(30);
  char name[96];
  for (int i = 0; i < 5; i++) labels[i] = below(6);
  for (int i = 0; i < 5; i++) {
    double sum = 0.0;
    for (int j = 0; j < 6; j++) {
      float t = targets == 2 ? (float)uniform(0.1, 1) : labels[i] == j;
      onehot[i * 6 + j] = t;
      sum += t;
    }
    for (int j = 0; j < 6; j++) onehot[i * 6 + j] /= (float)sum;
  }
  c.input = from_logits ? random_floats(30, -2, 2) : random_floats(30, 0.1, 1);
  c.labels = targets == 0 ? labels : NULL;
  c.onehot = targets == 0 ? NULL : onehot;
  c.mask = masked ? mask : NULL;
  c.scale = masked ? 1.0f / 3 : 1.0f / 5;
  c.probs = floats(30), c.loss = floats(5), c.grad = filled(30, 777.0f);
  loss_run(&c);
  check_masked_rows(&c);
  float *grad = copied(c.grad, 30);
  snprintf(name, sizeof name, "%s targets %d mask %d grad",
           from_logits ? "softmax_cross_entropy" : "cross_entropy", targets,
           masked);
  fd_check(name, loss_objective, &c, c.input, 30, grad,
           from_logits ? 1e-2 : 2e-3);
  scratch_free();
}

/* Sparse labels and their one-hot rows are the same loss. */
static void test_sparse_equals_onehot(int from_logits) {
  int32_t labels[4] = {2, 0, 4, 1};
  float *onehot = floats(20);
  for (int i = 0; i < 4; i++) onehot[i * 5 + labels[i]] = 1.0f;
  float *input =
      from_logits ? random_floats(20, -3, 3) : random_floats(20, 0.05, 1);
  loss_ctx a = {.n = 4,
                .k = 5,
                .from_logits = from_logits,
                .input = input,
                .labels = labels,
                .scale = 0.25f,
                .probs = floats(20),
                .loss = floats(4),
                .grad = floats(20)};
  loss_ctx b = a;
  b.labels = NULL, b.onehot = onehot;
  b.probs = floats(20), b.loss = floats(4), b.grad = floats(20);
  loss_run(&a);
  loss_run(&b);
  CHECK(max_abs_diff_ok(a.loss, b.loss, 4, 1e-6));
  CHECK(max_abs_diff_ok(a.grad, b.grad, 20, 1e-7));
  scratch_free();
}

static void test_loss_gradients(void) {
  for (int from_logits = 0; from_logits <= 1; from_logits++) {
    for (int targets = 0; targets <= 2; targets++) {
      test_loss_case(from_logits, targets, 0);
      test_loss_case(from_logits, targets, 1);
    }
    test_sparse_equals_onehot(from_logits);
  }
}

/* The harness must be able to fail: a gradient off by 1% in one element, or
 * one that lost a term, is caught. */
static void test_harness_catches_errors(void) {
  act_ctx c = {NULL, NULL, NULL, NULL, 12};
  mxu_activation_desc d = {MXU_TANH, 3, 4, 0};
  CHECK_OK(be->activation_create(&d, &c.op));
  if (!c.op) return;
  c.x = random_floats(12, -1, 1), c.y = floats(12);
  c.r = random_floats(12, -1, 1);
  act_objective(&c);
  float *dx = floats(12);
  be->activation_backward(c.op, c.x, c.y, c.r, dx);
  CHECK(fd_compare(act_objective, &c, c.x, 12, dx, 1e-2).error <= FD_RTOL);
  dx[5] *= 1.01f;
  CHECK(fd_compare(act_objective, &c, c.x, 12, dx, 1e-2).error > FD_RTOL);
  for (int i = 0; i < 12; i++) dx[i] = c.r[i]; /* forgot the derivative */
  CHECK(fd_compare(act_objective, &c, c.x, 12, dx, 1e-2).error > FD_RTOL);
  be->op_free(c.op);
  scratch_free();
}

/* ---- forward values worked out by hand --------------------------------- */

/* x = 1..16 as a 4x4 image, one channel; kernel rows {1 2 0}, {0 1 0},
 * {-1 0 1}, bias 0.5. Valid, stride 1: the top-left window gives
 * 1+4+6-9+11 = 13, and since x is a ramp (+1 per column, +4 per row) and
 * the kernel sums to 4, the others are 17, 29, 33. Same, stride 2, pads
 * 0/1: windows at (0,0) 13; (0,2) 3+8+8-11 = 8; (2,0) 9+20+14 = 43;
 * (2,2) 11+24+16 = 51. */
static void test_conv_by_hand(void) {
  float x[16], w[9] = {1, 2, 0, 0, 1, 0, -1, 0, 1}, b[1] = {0.5f}, y[4];
  static const float valid[4] = {13.5f, 17.5f, 29.5f, 33.5f};
  static const float same[4] = {13.5f, 8.5f, 43.5f, 51.5f};
  for (int i = 0; i < 16; i++) x[i] = (float)(i + 1);
  conv_case tv = {1, 4, 4, 1, 1, 3, 3, 1, 1, 0, 1, MXU_LINEAR};
  conv_case ts = {1, 4, 4, 1, 1, 3, 3, 2, 2, 1, 1, MXU_LINEAR};
  for (int pass = 0; pass < 2; pass++) {
    mxu_conv2d_desc d = conv_desc(pass ? &ts : &tv);
    mxu_op *op = NULL;
    CHECK(d.out_h == 2 && d.out_w == 2);
    CHECK_OK(be->conv2d_create(&d, &op));
    if (!op) continue;
    be->conv2d_forward(op, x, w, b, y);
    for (int i = 0; i < 4; i++)
      CHECK_NEAR(y[i], (pass ? same : valid)[i], 1e-5);
    be->op_free(op);
  }
}

/* Layouts: x is NHWC with h=2, w=1, c=2: pixel 0 = (1, 2), pixel 1 = (3, 4).
 * w is HWIO 2x1x2x2 = 1..8, so w[kh][0][ic][oc] = 1 + 4 kh + 2 ic + oc.
 * y[oc] = sum x[kh][ic] w[kh][0][ic][oc]: oc 0: 1*1 + 2*3 + 3*5 + 4*7 = 50,
 * oc 1: 1*2 + 2*4 + 3*6 + 4*8 = 60. */
static void test_conv_layout_by_hand(void) {
  float x[4] = {1, 2, 3, 4}, w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[2];
  mxu_conv2d_desc d = {0};
  d.n = 1, d.in_h = 2, d.in_w = 1, d.in_c = 2, d.out_h = 1, d.out_w = 1;
  d.out_c = 2, d.kernel_h = 2, d.kernel_w = 1, d.stride_h = d.stride_w = 1;
  mxu_op *op = NULL;
  CHECK_OK(be->conv2d_create(&d, &op));
  if (!op) return;
  be->conv2d_forward(op, x, w, NULL, y);
  CHECK_NEAR(y[0], 50, 1e-5);
  CHECK_NEAR(y[1], 60, 1e-5);
  be->op_free(op);
}

/* x = (1, 2), w (in=2, units=3) = {1 2 3; 4 5 6}: x w = (9, 12, 15). With
 * relu and bias (-9.5, 0.2, 0.3): (0, 12.2, 15.3). */
static void test_dense_by_hand(void) {
  float x[2] = {1, 2}, w[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-9.5f, 0.2f, 0.3f};
  float y[3];
  mxu_dense_desc d = {1, 2, 3, 1, MXU_RELU, 0};
  mxu_op *op = NULL;
  CHECK_OK(be->dense_create(&d, &op));
  if (!op) return;
  be->dense_forward(op, x, w, b, y);
  CHECK_NEAR(y[0], 0.0, 0);
  CHECK_NEAR(y[1], 12.2, 1e-5);
  CHECK_NEAR(y[2], 15.3, 1e-5);
  be->op_free(op);
}

/* x = 1..9 as a 3x3 image; 2x2 windows, stride 2, same (pads 0/1). Max:
 * {1 2 4 5} -> 5, {3 6} -> 6, {7 8} -> 8, {9} -> 9. Average counts only
 * in-bounds pixels: 3, 4.5, 7.5, 9. With x negated, padding (which would
 * be 0) must not win: -1, -3, -7, -9. */
static void test_pool_by_hand(void) {
  static const float max_y[4] = {5, 6, 8, 9}, avg_y[4] = {3, 4.5f, 7.5f, 9};
  static const float neg_y[4] = {-1, -3, -7, -9};
  pool_case t = {1, 3, 3, 1, 2, 2, 2, 2, 1, 1};
  float x[9], neg[9], y[4];
  for (int i = 0; i < 9; i++) x[i] = (float)(i + 1), neg[i] = -x[i];
  for (int is_max = 0; is_max <= 1; is_max++) {
    mxu_op *op = NULL;
    t.is_max = is_max;
    mxu_pool2d_desc d = pool_desc(&t);
    CHECK(d.out_h == 2 && d.pad_bottom == 1 && d.pad_top == 0);
    CHECK_OK(be->pool2d_create(&d, &op));
    if (!op) continue;
    be->pool2d_forward(op, 0, x, y, NULL);
    for (int i = 0; i < 4; i++)
      CHECK_NEAR(y[i], (is_max ? max_y : avg_y)[i], 1e-6);
    be->pool2d_forward(op, 1, neg, y, NULL);
    if (is_max)
      for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], neg_y[i], 0);
    be->op_free(op);
  }
}

/* Ties in a max window: the first maximum in row-major order takes all of
 * the gradient; with overlapping windows, gradients add. */
static void test_pool_ties(void) {
  pool_case t = {1, 2, 3, 1, 2, 2, 1, 1, 0, 1}; /* two windows share col 1 */
  mxu_pool2d_desc d = pool_desc(&t);
  float x[6] = {1, 1, 0, 1, 1, 1}, y[2], dy[2] = {2, 3}, dx[6];
  mxu_op *op = NULL;
  CHECK_OK(be->pool2d_create(&d, &op));
  if (!op) return;
  be->pool2d_forward(op, 1, x, y, NULL);
  be->pool2d_backward(op, x, y, dy, NULL, dx);
  CHECK(y[0] == 1 && y[1] == 1);
  /* window 0 = {x0 x1 x3 x4} -> x0; window 1 = {x1 x2 x4 x5} -> x1 */
  CHECK(dx[0] == 2 && dx[1] == 3 && dx[2] == 0);
  CHECK(dx[3] == 0 && dx[4] == 0 && dx[5] == 0);
  be->op_free(op);
}

/* x = (1, 2, 3, 4) in one channel: mean 2.5, biased variance 1.25. */
static void test_bn_by_hand(void) {
  float x[4] = {1, 2, 3, 4}, gamma = 2, beta = 1, y[4], mean, var, yi[4];
  float given_mean = 2, given_var = 4;
  mxu_batchnorm_desc d = {4, 1, 1e-3f, 0, 0, 0, 0, 0};
  mxu_op *op = NULL;
  CHECK_OK(be->batchnorm_create(&d, &op));
  if (!op) return;
  be->batchnorm_forward_training(op, x, &gamma, &beta, y, &mean, &var);
  CHECK_NEAR(mean, 2.5, 1e-7);
  CHECK_NEAR(var, 1.25, 1e-7);
  for (int i = 0; i < 4; i++)
    CHECK_NEAR(y[i], 1.0 + 2.0 * (x[i] - 2.5) / sqrt(1.25 + 1e-3), 1e-6);
  be->batchnorm_forward_inference(op, x, &gamma, &beta, &mean, &var, yi);
  CHECK(max_abs_diff_ok(y, yi, 4, 1e-6));
  be->batchnorm_forward_inference(op, x, &gamma, &beta, &given_mean, &given_var,
                                  yi);
  for (int i = 0; i < 4; i++)
    CHECK_NEAR(yi[i], 1.0 + 2.0 * (x[i] - 2.0) / sqrt(4.0 + 1e-3), 1e-6);
  be->op_free(op);
}

/* softmax(1, 2, 3) = (0.09003057, 0.24472847, 0.66524096); sigmoid(0) =
 * 0.5, sigmoid(2) = 0.88079708; tanh(0.5) = 0.46211716. */
static void test_activation_by_hand(void) {
  struct {
    mxu_activation act;
    float x[3], y[3];
  } cases[] = {
      {MXU_SOFTMAX, {1, 2, 3}, {0.09003057f, 0.24472847f, 0.66524096f}},
      {MXU_SOFTMAX,
       {1001, 1002, 1003},
       {0.09003057f, 0.24472847f, 0.66524096f}},
      {MXU_SIGMOID, {0, 2, -2}, {0.5f, 0.88079708f, 0.11920292f}},
      {MXU_TANH, {0.5f, 0, -0.5f}, {0.46211716f, 0, -0.46211716f}},
      {MXU_RELU, {-1, 2, 0}, {0, 2, 0}},
      {MXU_LINEAR, {-1, 2, 0.25f}, {-1, 2, 0.25f}},
      /* Keras 3.15 (and tf.keras 2.21 where it has the name) on x. */
      {MXU_RELU6, {-1, 2.5f, 7}, {0, 2.5f, 6}},
      {MXU_LEAKY_RELU, {-1, 1, 2.5f}, {-0.2f, 1, 2.5f}},
      {MXU_ELU, {-1, 1, 2.5f}, {-0.63212103f, 1, 2.5f}},
      {MXU_SELU, {-1, 1, 2.5f}, {-1.11133099f, 1.05070102f, 2.62675190f}},
      {MXU_GELU, {-1, 1, 2.5f}, {-0.15865500f, 0.84134501f, 2.48447609f}},
      {MXU_GELU_TANH, {-1, 1, 2.5f}, {-0.15880799f, 0.84119201f, 2.48491573f}},
      {MXU_SILU, {-1, 1, 2.5f}, {-0.26894099f, 0.73105901f, 2.31035399f}},
      {MXU_SOFTPLUS, {-1, 1, 2.5f}, {0.31326199f, 1.31326199f, 2.57889009f}},
      {MXU_SOFTSIGN, {-1, 1, 2.5f}, {-0.5f, 0.5f, 0.71428603f}},
      {MXU_HARD_SIGMOID,
       {-1, 1, 2.5f},
       {0.33333299f, 0.66666698f, 0.91666698f}},
      {MXU_HARD_SIGMOID_TF2, {-1, 1, 2.5f}, {0.3f, 0.7f, 1}},
      {MXU_HARD_SILU, {-1, 1, 2.5f}, {-0.33333299f, 0.66666698f, 2.29166698f}},
      {MXU_EXPONENTIAL, {-1, 1, 2.5f}, {0.36787900f, 2.71828198f, 12.1824942f}},
      {MXU_MISH, {-1, 1, 2.5f}, {-0.30340201f, 0.86509800f, 2.47139192f}},
      /* Keras 3.15's newer ones, which tf.keras 2 lacks. */
      {MXU_CELU, {-1, 0.25f, 2.5f}, {-0.63212055f, 0.25f, 2.5f}},
      {MXU_HARD_TANH, {-1, 0.25f, 2.5f}, {-1, 0.25f, 1}},
      {MXU_LOG_SIGMOID,
       {-1, 0.25f, 2.5f},
       {-1.3132616f, -0.57593942f, -0.078889735f}},
      {MXU_TANH_SHRINK,
       {-1, 0.25f, 2.5f},
       {-0.23840582f, 0.0050813407f, 1.5133857f}},
      {MXU_SQUAREPLUS, {-1, 0.25f, 2.5f}, {0.61803401f, 1.1327822f, 2.850781f}},
      {MXU_SPARSE_PLUS, {-1, 0.25f, 2.5f}, {0, 0.390625f, 2.5f}},
      {MXU_SPARSE_SIGMOID, {-1, 0.25f, 2.5f}, {0, 0.625f, 1}},
      {MXU_SOFT_SHRINK, {-1, 0.25f, 2.5f}, {-0.5f, 0, 2}},
      {MXU_HARD_SHRINK, {-1, 0.25f, 2.5f}, {-1, 0, 2.5f}},
      {MXU_LOG_SOFTMAX,
       {-1, 0.25f, 2.5f},
       {-3.6271582f, -2.3771582f, -0.12715818f}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mxu_activation_desc d = {cases[i].act, 1, 3,
                             mxu_activation_alpha(cases[i].act)};
    mxu_op *op = NULL;
    float y[3];
    CHECK_OK(be->activation_create(&d, &op));
    if (!op) continue;
    be->activation_forward(op, cases[i].x, y);
    for (int j = 0; j < 3; j++) /* Keras' values are rounded to 1e-6 */
      CHECK_NEAR(y[j], cases[i].y[j], 1e-6 * (1.0 + fabsf(cases[i].y[j])));
    be->op_free(op);
  }
}

/* logits (1, 2, 3), label 2: loss = log(1 + e^-1 + e^-2) = 0.40760596,
 * dlogits = p - onehot. Logits (1000, 0), label 1: loss 1000, no overflow. */
static void test_softmax_ce_by_hand(void) {
  float logits[5] = {1, 2, 3, 1000, 0}, probs[5], loss[2], grad[5];
  int32_t l1[1] = {2}, l2[1] = {1};
  be->softmax_cross_entropy(1, 3, logits, l1, NULL, NULL, 1.0f, probs, loss,
                            grad);
  CHECK_NEAR(loss[0], 0.40760596, 1e-6);
  CHECK_NEAR(grad[0], 0.09003057, 1e-6);
  CHECK_NEAR(grad[2], 0.66524096 - 1.0, 1e-6);
  be->softmax_cross_entropy(1, 2, logits + 3, l2, NULL, NULL, 0.5f, probs, loss,
                            grad);
  CHECK_NEAR(loss[0], 1000, 1e-3);
  CHECK_NEAR(probs[0], 1, 0);
  CHECK_NEAR(grad[0], 0.5, 1e-7);
  CHECK_NEAR(grad[1], -0.5, 1e-7);
}

/* Probabilities are renormalised: (0.4, 0.6, 1.0), label 2 is -log 0.5.
 * Clipping: (1e-9, .5, .5), label 0 clips to 1e-7: loss -log(1e-7) and no
 * gradient; label 1: q = p / s with s ~ 1, g = (0, -1/q1, 0), sum g q = -1,
 * so dp = (g + 1) / s = (1, -1, 1). (1, 0, 0), label 0: q clips to 1 - 1e-7
 * (float32), loss 1.1920929e-7, no gradient. */
static void test_cross_entropy_by_hand(void) {
  float p1[3] = {0.4f, 0.6f, 1.0f}, p2[3] = {1e-9f, 0.5f, 0.5f};
  float p3[3] = {1, 0, 0}, loss[1], grad[3];
  int32_t l0[1] = {0}, l1[1] = {1}, l2[1] = {2};
  be->cross_entropy(1, 3, p1, l2, NULL, NULL, 1.0f, loss, grad);
  CHECK_NEAR(loss[0], log(2.0), 1e-6);
  be->cross_entropy(1, 3, p2, l0, NULL, NULL, 1.0f, loss, grad);
  CHECK_NEAR(loss[0], -log(1e-7), 1e-5);
  for (int j = 0; j < 3; j++) CHECK_NEAR(grad[j], 0, 0);
  be->cross_entropy(1, 3, p2, l1, NULL, NULL, 0.5f, loss, grad);
  CHECK_NEAR(loss[0], log(2.0), 1e-6);
  CHECK_NEAR(grad[0], 0.5, 1e-6);
  CHECK_NEAR(grad[1], -0.5, 1e-6);
  CHECK_NEAR(grad[2], 0.5, 1e-6);
  be->cross_entropy(1, 3, p3, l0, NULL, NULL, 1.0f, loss, grad);
  CHECK_NEAR(loss[0], 1.1920929e-7, 1e-9);
  for (int j = 0; j < 3; j++) CHECK_NEAR(grad[j], 0, 0);
}

/* Keras Adam with defaults: lr_t = lr sqrt(1 - b2^t) / (1 - b1^t). Step 1
 * moves each weight by about lr against its gradient's sign:
 * lr g / (|g| + eps / sqrt(1 - b2)) = 9.99993675e-4 for g = 0.5. */
static void test_adam_by_hand(void) {
  const double lr = 1e-3, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f; /* as passed */
  float w[3] = {1, -2, 0.5f}, m[3] = {0}, v[3] = {0};
  double ew[3] = {1, -2, 0.5}, em[3] = {0}, ev[3] = {0};
  const float g[2][3] = {{0.5f, -0.25f, 0}, {-1, 0.75f, 2}};
  for (int t = 1; t <= 2; t++) {
    double lr_t = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    be->adam_update(3, w, g[t - 1], m, v, (float)lr_t, (float)b1, (float)b2,
                    (float)eps);
    for (int i = 0; i < 3; i++) {
      em[i] = b1 * em[i] + (1 - b1) * g[t - 1][i];
      ev[i] = b2 * ev[i] + (1 - b2) * g[t - 1][i] * g[t - 1][i];
      ew[i] -= lr_t * em[i] / (sqrt(ev[i]) + eps);
      CHECK_NEAR(m[i], em[i], 1e-7);
      CHECK_NEAR(v[i], ev[i], 1e-9);
      CHECK_NEAR(w[i], ew[i], 2e-7);
    }
    if (t == 1) CHECK_NEAR(w[0], 1 - 9.99993675e-4, 2e-7);
    if (t == 1) CHECK_NEAR(w[1], -2 + 9.9998735e-4, 2e-7);
  }
}

/* w = 1, g = 0.5, v = 0.2, lr = 0.1, momentum 0.9: v = 0.18 - 0.05 = 0.13,
 * w = 1.13; nesterov w = 1 + 0.9*0.13 - 0.05 = 1.067; no momentum
 * w = 0.95 and the velocity is not touched (NULL). */
static void test_sgd_by_hand(void) {
  float g[2] = {0.5f, -1}, w[2] = {1, 2}, v[2] = {0.2f, 0};
  be->sgd_update(2, w, g, v, 0.1f, 0.9f, 0);
  CHECK_NEAR(v[0], 0.13, 1e-7);
  CHECK_NEAR(w[0], 1.13, 1e-7);
  CHECK_NEAR(v[1], 0.1, 1e-7);
  CHECK_NEAR(w[1], 2.1, 1e-7);
  float wn[2] = {1, 2}, vn[2] = {0.2f, 0};
  be->sgd_update(2, wn, g, vn, 0.1f, 0.9f, 1);
  CHECK_NEAR(vn[0], 0.13, 1e-7);
  CHECK_NEAR(wn[0], 1.067, 1e-7);
  CHECK_NEAR(wn[1], 2 + 0.09 + 0.1, 1e-7);
  float w0[2] = {1, 2};
  be->sgd_update(2, w0, g, NULL, 0.1f, 0.0f, 0);
  CHECK_NEAR(w0[0], 0.95, 1e-7);
  CHECK_NEAR(w0[1], 2.1, 1e-7);
}

static void test_multiply(void) {
  float a[3] = {1, -2, 0.5f}, b[3] = {0, 3, 4}, y[3];
  be->multiply(3, a, b, y);
  CHECK(y[0] == 0 && y[1] == -6 && y[2] == 2);
}

/* Shapes that do not fit are refused at create, never run. */
static void test_bad_descs(void) {
  conv_case t = {1, 5, 5, 1, 1, 3, 3, 1, 1, 0, 1, MXU_LINEAR};
  mxu_conv2d_desc cd = conv_desc(&t);
  mxu_pool2d_desc pd = {1, 4, 4, 1, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1};
  mxu_dense_desc dd = {0, 3, 4, 1, MXU_LINEAR, 0};
  mxu_activation_desc ad = {MXU_SOFTMAX, 2, 0, 0};
  mxu_batchnorm_desc bd = {0, 3, 1e-3f, 0, 0, 0, 0, 0};
  mxu_op *op = (mxu_op *)&op;
  cd.out_h = 4;
  CHECK(be->conv2d_create(&cd, &op) == MXU_ERR_ARG && op == NULL);
  cd = conv_desc(&t), cd.activation = MXU_SOFTMAX;
  CHECK(be->conv2d_create(&cd, &op) == MXU_ERR_ARG);
  pd.out_h = 3;
  CHECK(be->pool2d_create(&pd, &op) == MXU_ERR_ARG);
  CHECK(be->dense_create(&dd, &op) == MXU_ERR_ARG);
  CHECK(be->activation_create(&ad, &op) == MXU_ERR_ARG);
  CHECK(be->batchnorm_create(&bd, &op) == MXU_ERR_ARG);
  CHECK(mxu_errmsg()[0] != '\0');
}

/* Every field after name is a function pointer, so the table is scanned as
 * an array of them: a slot added to backend.h and left unset shows up.
 * The optional slots (fused conv+pool, conv2d_native, the bf16 tensors',
 * _backward_relu) are the oracle's
 * only NULLs: it runs those layers one by one, in NHWC, which is what the
 * fused and chained ops are tested against. */
static void test_table_complete(void) {
  enum {
    SLOTS = (sizeof(mxu_backend) - offsetof(mxu_backend, op_free)) /
            sizeof(void (*)(void)),
    FUSED_FIRST = (offsetof(mxu_backend, conv_pool_create) -
                   offsetof(mxu_backend, op_free)) /
                  sizeof(void (*)(void)),
    FUSED_LAST = (offsetof(mxu_backend, conv2d_backward_relu) -
                  offsetof(mxu_backend, op_free)) /
                 sizeof(void (*)(void))
  };
  void (*slot[SLOTS])(void);
  memcpy(slot, &be->op_free, sizeof slot);
  CHECK(be->name && strcmp(be->name, "cpu_ref") == 0);
  for (int i = 0; i < SLOTS; i++)
    if (i < FUSED_FIRST || i > FUSED_LAST)
      CHECK_MSG(slot[i] != NULL, "slot %d", i);
    else
      CHECK_MSG(slot[i] == NULL, "slot %d (fused) is set", i);
}

int main(void) {
  be = mxu_backend_cpu_ref();
  test_table_complete();
  test_conv_by_hand();
  test_conv_layout_by_hand();
  test_dense_by_hand();
  test_pool_by_hand();
  test_pool_ties();
  test_bn_by_hand();
  test_activation_by_hand();
  test_softmax_ce_by_hand();
  test_cross_entropy_by_hand();
  test_adam_by_hand();
  test_sgd_by_hand();
  test_multiply();
  test_bad_descs();
  test_harness_catches_errors();
  test_conv_gradients();
  test_fused_activations();
  test_dense_gradients();
  test_pool_gradients();
  test_bn_gradients();
  test_activation_gradients();
  test_loss_gradients();
  printf("test_backend_ref: %d gradient arrays checked against finite "
         "differences, worst relative error %.2e (limit %.0e)\n",
         fd_arrays, fd_worst, FD_RTOL);
  return check_report("test_backend_ref");
}
