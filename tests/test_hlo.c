/* test_hlo.c — the hlo graph builder, its printer and its gradients, run
 * on XLA's CPU plugin: each op's gradient (grad.c) against central finite
 * differences of the same program, in float64, for f = sum(op(x) * r)
 * with a fixed random r; and a dense layer's softmax cross-entropy in
 * float32 against the same written out in C. */
#include "backend/pjrt/hlo.h"
#include "backend/pjrt/runtime.h"
#include "check.h"
#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_INPUTS = 3, MAX_VALUES = 512 };

typedef mxu_hlo_value (*build_fn)(mxu_hlo *h, const mxu_hlo_value *x);

typedef struct op_case {
  const char *name;
  int inputs;
  mxu_hlo_shape shape[MAX_INPUTS];
  build_fn build;
  int positive; /* inputs in (0.5, 1.5) (log, sqrt, division) */
} op_case;

static mxu_pjrt *plugin;

static mxu_hlo_shape f64(int rank, int64_t d0, int64_t d1, int64_t d2,
                         int64_t d3) {
  int64_t dims[4] = {d0, d1, d2, d3};
  return mxu_hlo_shape_make(MXU_HLO_F64, rank, dims);
}

/* Deterministic values in (-1, 1), or (0.5, 1.5). */
static void fill(double *x, int64_t n, unsigned seed, int positive) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    double u = (double)((seed >> 8) & 0xffff) / 65536.0;
    x[i] = positive ? 0.5 + u : 2 * u - 1;
  }
}

/* The op's result shape, from a scratch build. */
static mxu_hlo_shape output_shape(const op_case *c) {
  mxu_hlo h;
  mxu_hlo_init(&h);
  mxu_hlo_value x[MAX_INPUTS];
  for (int i = 0; i < c->inputs; i++) x[i] = mxu_hlo_parameter(&h, c->shape[i]);
  mxu_hlo_value y = c->build(&h, x);
  CHECK_MSG(h.status == MXU_OK, "%s: %s", c->name, mxu_errmsg());
  mxu_hlo_shape shape =
      h.status == MXU_OK ? *mxu_hlo_shape_of(&h, y) : c->shape[0];
  mxu_hlo_free(&h);
  return shape;
}

/* f = sum(op(x) * r); with grads, also df/dx for each input. */
static char *program(const op_case *c, int grads, mxu_hlo_shape ys) {
  mxu_hlo h;
  mxu_hlo_init(&h);
  mxu_hlo_value x[MAX_INPUTS];
  for (int i = 0; i < c->inputs; i++) x[i] = mxu_hlo_parameter(&h, c->shape[i]);
  mxu_hlo_value r = mxu_hlo_parameter(&h, ys);
  mxu_hlo_value y = c->build(&h, x);
  int64_t all[MXU_HLO_MAX_RANK];
  for (int d = 0; d < ys.rank; d++) all[d] = d;
  mxu_hlo_value f =
      mxu_hlo_reduce(&h, mxu_hlo_binary(&h, MXU_HLO_MULTIPLY, y, r),
                     MXU_HLO_SUM, ys.rank, all);
  mxu_hlo_value results[1 + MAX_INPUTS] = {f};
  if (grads)
    CHECK_OK(mxu_hlo_gradients(&h, f, mxu_hlo_full_like(&h, f, 1.0), c->inputs,
                               x, results + 1));
  char *text = NULL;
  CHECK_OK(mxu_hlo_print(&h, 1 + (grads ? c->inputs : 0), results, 1, &text));
  mxu_hlo_free(&h);
  return text;
}

typedef struct run {
  mxu_pjrt_program *program;
  int inputs;
  mxu_hlo_shape shape[MAX_INPUTS + 1];
} run;

/* Executes; out[0] gets f, out[1 + i] the gradient of input i (if any). */
static int execute(run *r, double *const *values, int outputs,
                   double *const *out) {
  mxu_pjrt_buffer *args[MAX_INPUTS + 1] = {0}, *res[1 + MAX_INPUTS] = {0};
  int ok = 1;
  for (int i = 0; i <= r->inputs && ok; i++)
    ok = mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, values[i], r->shape[i].rank,
                         r->shape[i].dims, &args[i]) == MXU_OK;
  if (ok)
    ok = mxu_pjrt_execute(plugin, r->program, r->inputs + 1, args, res) ==
         MXU_OK;
  for (int o = 0; o < outputs && ok; o++) {
    int64_t n = o == 0 ? 1 : mxu_hlo_count(&r->shape[o - 1]);
    ok = mxu_pjrt_download(plugin, res[o], out[o],
                           (size_t)n * sizeof(double)) == MXU_OK;
  }
  for (int i = 0; i <= r->inputs; i++) mxu_pjrt_buffer_free(plugin, args[i]);
  for (int o = 0; o < 1 + MAX_INPUTS; o++) mxu_pjrt_buffer_free(plugin, res[o]);
  CHECK_MSG(ok, "execute: %s", mxu_errmsg());
  return ok;
}

static void check_op(const op_case *c) {
  mxu_hlo_shape ys = output_shape(c);
  char *forward = program(c, 0, ys), *backward = program(c, 1, ys);
  run f = {.inputs = c->inputs}, b = {.inputs = c->inputs};
  for (int i = 0; i < c->inputs; i++) f.shape[i] = b.shape[i] = c->shape[i];
  f.shape[c->inputs] = b.shape[c->inputs] = ys;
  if (forward) CHECK_OK(mxu_pjrt_compile(plugin, forward, 1, &f.program));
  if (backward) CHECK_OK(mxu_pjrt_compile(plugin, backward, 1, &b.program));
  if (!f.program || !b.program) {
    fprintf(stderr, "%s:\n%s\n", c->name, backward ? backward : "(none)");
    free(forward), free(backward);
    mxu_pjrt_program_free(plugin, f.program);
    mxu_pjrt_program_free(plugin, b.program);
    return;
  }
  static double values[MAX_INPUTS + 1][MAX_VALUES],
      grads[MAX_INPUTS][MAX_VALUES];
  double *in[MAX_INPUTS + 1], *out[1 + MAX_INPUTS], f0 = 0;
  out[0] = &f0;
  for (int i = 0; i <= c->inputs; i++) {
    int64_t n = mxu_hlo_count(i < c->inputs ? &c->shape[i] : &ys);
    CHECK(n <= MAX_VALUES);
    fill(values[i], n, 7u + 31u * (unsigned)i, i < c->inputs && c->positive);
    in[i] = values[i];
    if (i < c->inputs) out[1 + i] = grads[i];
  }
  double worst = 0;
  if (execute(&b, in, 1 + c->inputs, out))
    for (int i = 0; i < c->inputs; i++)
      for (int64_t k = 0; k < mxu_hlo_count(&c->shape[i]); k++) {
        const double eps = 1e-6;
        double keep = values[i][k], up = 0, down = 0;
        double *up_out[1] = {&up}, *down_out[1] = {&down};
        values[i][k] = keep + eps;
        execute(&f, in, 1, up_out);
        values[i][k] = keep - eps;
        execute(&f, in, 1, down_out);
        values[i][k] = keep;
        double numeric = (up - down) / (2 * eps);
        worst = fmax(worst,
                     fabs(numeric - grads[i][k]) / fmax(1e-3, fabs(numeric)));
      }
  CHECK_MSG(worst < 1e-6, "%s: gradient off by %.3g (relative)", c->name,
            worst);
  free(forward), free(backward);
  mxu_pjrt_program_free(plugin, f.program);
  mxu_pjrt_program_free(plugin, b.program);
}

/* ---- the ops ----------------------------------------------------------- */

#define BINARY(fn, op)                                                         \
  static mxu_hlo_value fn(mxu_hlo *h, const mxu_hlo_value *x) {                \
    return mxu_hlo_binary(h, op, x[0], x[1]);                                  \
  }
#define UNARY(fn, op)                                                          \
  static mxu_hlo_value fn(mxu_hlo *h, const mxu_hlo_value *x) {                \
    return mxu_hlo_unary(h, op, x[0]);                                         \
  }
BINARY(add, MXU_HLO_ADD)
BINARY(subtract, MXU_HLO_SUBTRACT)
BINARY(multiply, MXU_HLO_MULTIPLY)
BINARY(divide, MXU_HLO_DIVIDE)
BINARY(maximum, MXU_HLO_MAXIMUM)
BINARY(minimum, MXU_HLO_MINIMUM)
BINARY(power, MXU_HLO_POWER)
UNARY(negate, MXU_HLO_NEGATE)
UNARY(exponential, MXU_HLO_EXP)
UNARY(logarithm, MXU_HLO_LOG)
UNARY(square_root, MXU_HLO_SQRT)
UNARY(reciprocal_root, MXU_HLO_RSQRT)
UNARY(hyperbolic_tangent, MXU_HLO_TANH)
UNARY(logistic, MXU_HLO_LOGISTIC)
UNARY(absolute, MXU_HLO_ABS)
UNARY(error_function, MXU_HLO_ERF)

static mxu_hlo_value relu(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_value zero = mxu_hlo_full_like(h, x[0], 0.0);
  return mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_GT, x[0], zero), x[0],
                        zero);
}

static mxu_hlo_value broadcast_reshape_transpose(mxu_hlo *h,
                                                 const mxu_hlo_value *x) {
  /* (3) -> (2, 3, 4) along dim 1 -> (4, 3, 2) -> (12, 2) */
  int64_t dims[1] = {1}, perm[3] = {2, 1, 0}, flat[2] = {12, 2};
  mxu_hlo_value b = mxu_hlo_broadcast(h, x[0], f64(3, 2, 3, 4, 0), dims);
  mxu_hlo_value t = mxu_hlo_transpose(h, b, perm);
  return mxu_hlo_reshape(h, t, mxu_hlo_shape_make(MXU_HLO_F64, 2, flat));
}

static mxu_hlo_value reverse_slice_pad(mxu_hlo *h, const mxu_hlo_value *x) {
  int64_t d[1] = {1}, start[2] = {1, 0}, limit[2] = {4, 5}, stride[2] = {2, 2};
  int64_t low[2] = {1, 0}, high[2] = {0, 2}, interior[2] = {1, 2};
  mxu_hlo_value r = mxu_hlo_reverse(h, x[0], 1, d);
  mxu_hlo_value s = mxu_hlo_slice(h, r, start, limit, stride);
  return mxu_hlo_pad(h, s, 0.5, low, high, interior);
}

static mxu_hlo_value reduce_sum_max(mxu_hlo *h, const mxu_hlo_value *x) {
  int64_t first[1] = {0}, last[1] = {1};
  mxu_hlo_value s = mxu_hlo_reduce(h, x[0], MXU_HLO_SUM, 1, first);
  return mxu_hlo_reduce(h, s, MXU_HLO_MAX, 1, last);
}

static mxu_hlo_value batched_dot(mxu_hlo *h, const mxu_hlo_value *x) {
  /* (2, 3, 4) x (4, 2, 5): batch 0 with 1, contract 2 with 0 -> (2, 3, 5) */
  int64_t ab[1] = {0}, bb[1] = {1}, ac[1] = {2}, bc[1] = {0};
  return mxu_hlo_dot(h, x[0], x[1], 1, ab, bb, 1, ac, bc);
}

static mxu_hlo_value matmul(mxu_hlo *h, const mxu_hlo_value *x) {
  return mxu_hlo_matmul(h, x[0], x[1]);
}

static mxu_hlo_value conv_strided(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_window w = {.stride = {2, 1},
                      .pad_low = {1, 0},
                      .pad_high = {1, 1},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 2},
                      .feature_groups = 1};
  return mxu_hlo_convolution(h, x[0], x[1], &w);
}

/* A transposed convolution's: input dilation, with strides of its own. */
static mxu_hlo_value conv_input_dilated(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_window w = {.stride = {1, 2},
                      .pad_low = {2, 1},
                      .pad_high = {1, 2},
                      .lhs_dilation = {2, 3},
                      .rhs_dilation = {1, 1},
                      .feature_groups = 1};
  return mxu_hlo_convolution(h, x[0], x[1], &w);
}

static mxu_hlo_value conv_grouped(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_window w = {.stride = {1, 2},
                      .pad_low = {1, 1},
                      .pad_high = {1, 0},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1},
                      .feature_groups = 2};
  return mxu_hlo_convolution(h, x[0], x[1], &w);
}

static mxu_hlo_value pool(mxu_hlo *h, const mxu_hlo_value *x,
                          mxu_hlo_reducer reducer) {
  mxu_hlo_window w = {.size = {2, 3},
                      .stride = {2, 2},
                      .pad_low = {0, 1},
                      .pad_high = {1, 1},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1}};
  return mxu_hlo_reduce_window(h, x[0], reducer, &w);
}

static mxu_hlo_value max_pool(mxu_hlo *h, const mxu_hlo_value *x) {
  return pool(h, x, MXU_HLO_MAX);
}

/* Windows that tile the input (grad.c's own rule): 2x2 windows leaving a
 * row and a column out; 2x3 ones over padding. */
static mxu_hlo_value max_pool_tiled(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_window w = {.size = {2, 2},
                      .stride = {2, 2},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1}};
  return mxu_hlo_reduce_window(h, x[0], MXU_HLO_MAX, &w);
}

static mxu_hlo_value max_pool_tiled_padded(mxu_hlo *h, const mxu_hlo_value *x) {
  mxu_hlo_window w = {.size = {2, 3},
                      .stride = {2, 3},
                      .pad_low = {1, 0},
                      .pad_high = {0, 2},
                      .lhs_dilation = {1, 1},
                      .rhs_dilation = {1, 1}};
  return mxu_hlo_reduce_window(h, x[0], MXU_HLO_MAX, &w);
}

static mxu_hlo_value sum_pool(mxu_hlo *h, const mxu_hlo_value *x) {
  return pool(h, x, MXU_HLO_SUM);
}

static void ops(void) {
  mxu_hlo_shape m = f64(2, 3, 4, 0, 0);
  const op_case cases[] = {
      {"add", 2, {m, m}, add, 0},
      {"subtract", 2, {m, m}, subtract, 0},
      {"multiply", 2, {m, m}, multiply, 0},
      {"divide", 2, {m, m}, divide, 1},
      {"maximum", 2, {m, m}, maximum, 0},
      {"minimum", 2, {m, m}, minimum, 0},
      {"power", 2, {m, m}, power, 1},
      {"negate", 1, {m}, negate, 0},
      {"exponential", 1, {m}, exponential, 0},
      {"log", 1, {m}, logarithm, 1},
      {"sqrt", 1, {m}, square_root, 1},
      {"rsqrt", 1, {m}, reciprocal_root, 1},
      {"tanh", 1, {m}, hyperbolic_tangent, 0},
      {"logistic", 1, {m}, logistic, 0},
      {"erf (chlo)", 1, {m}, error_function, 0},
      {"abs", 1, {m}, absolute, 0},
      {"relu (compare, select)", 1, {m}, relu, 0},
      {"broadcast, transpose, reshape",
       1,
       {f64(1, 3, 0, 0, 0)},
       broadcast_reshape_transpose,
       0},
      {"reverse, strided slice, interior pad",
       1,
       {f64(2, 5, 6, 0, 0)},
       reverse_slice_pad,
       0},
      {"reduce sum, max", 1, {f64(3, 2, 3, 4, 0)}, reduce_sum_max, 0},
      {"matmul", 2, {m, f64(2, 4, 5, 0, 0)}, matmul, 0},
      {"dot_general, batched",
       2,
       {f64(3, 2, 3, 4, 0), f64(3, 4, 2, 5, 0)},
       batched_dot,
       0},
      {"convolution, strided, padded, dilated",
       2,
       {f64(4, 2, 5, 6, 3), f64(4, 3, 2, 3, 2)},
       conv_strided,
       0},
      {"convolution, input dilated, strided",
       2,
       {f64(4, 2, 3, 4, 2), f64(4, 3, 2, 2, 3)},
       conv_input_dilated,
       0},
      {"convolution, 2 groups",
       2,
       {f64(4, 2, 4, 5, 4), f64(4, 3, 3, 2, 4)},
       conv_grouped,
       0},
      {"max pooling (reduce_window)", 1, {f64(4, 2, 5, 5, 2)}, max_pool, 0},
      {"sum pooling (reduce_window)", 1, {f64(4, 2, 5, 5, 2)}, sum_pool, 0},
      {"max pooling, tiling windows",
       1,
       {f64(4, 2, 5, 7, 3)},
       max_pool_tiled,
       0},
      {"max pooling, tiling windows over padding",
       1,
       {f64(4, 1, 5, 7, 2)},
       max_pool_tiled_padded,
       0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_op(&cases[i]);
}

/* ---- errors ------------------------------------------------------------ */

static void errors(void) {
  mxu_hlo h;
  mxu_hlo_init(&h);
  mxu_hlo_value a = mxu_hlo_parameter(&h, f64(2, 3, 4, 0, 0));
  mxu_hlo_value b = mxu_hlo_parameter(&h, f64(2, 4, 3, 0, 0));
  CHECK(mxu_hlo_binary(&h, MXU_HLO_ADD, a, b) == 0);
  CHECK(h.status == MXU_ERR_SHAPE);
  /* Later ops give no value and keep the first failure. */
  CHECK(mxu_hlo_matmul(&h, a, b) == 0 && h.status == MXU_ERR_SHAPE);
  char *text = NULL;
  CHECK(mxu_hlo_print(&h, 1, &a, 1, &text) == MXU_ERR_SHAPE && !text);
  mxu_hlo_free(&h);
  mxu_hlo_init(&h);
  a = mxu_hlo_parameter(&h, f64(2, 3, 4, 0, 0));
  b = mxu_hlo_parameter(&h, f64(2, 5, 4, 0, 0));
  CHECK(mxu_hlo_matmul(&h, a, b) == 0);
  CHECK(strstr(mxu_errmsg(), "contracting dims differ (4, 5)") != NULL);
  mxu_hlo_free(&h);
}

/* ---- mxu's generator on the device --------------------------------------- */

/* The program's draws, bit for bit the host's (mxu_rng_uniform4), for a
 * count that ends inside a group of 64. */
static void uniform_draws(void) {
  enum { COUNT = 200 };
  mxu_rng rng = mxu_rng_make(0x123456789abcdefull, 3, 1, 4, 1);
  mxu_hlo h;
  mxu_hlo_init(&h);
  int64_t four = 4;
  mxu_hlo_value words =
      mxu_hlo_parameter(&h, mxu_hlo_shape_make(MXU_HLO_U32, 1, &four));
  mxu_emit e = {.h = &h};
  mxu_hlo_value u = mxu_emit_uniform4(&e, words, COUNT);
  char *text = NULL;
  CHECK_OK(mxu_hlo_print(&h, 1, &u, 1, &text));
  mxu_hlo_free(&h);
  mxu_pjrt_program *program = NULL;
  if (text) CHECK_OK(mxu_pjrt_compile(plugin, text, 1, &program));
  free(text);
  if (!program) return;
  uint32_t in[4] = {rng.key[0], rng.key[1], rng.stream[0], rng.stream[1]};
  float got[COUNT], want[COUNT];
  mxu_rng_uniform4(&rng, 0, want, COUNT);
  mxu_pjrt_buffer *arg = NULL, *out = NULL;
  CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_U32, in, 1, &four, &arg));
  CHECK_OK(mxu_pjrt_execute(plugin, program, 1, &arg, &out));
  CHECK_OK(mxu_pjrt_download(plugin, out, got, sizeof got));
  int differ = 0;
  for (int i = 0; i < COUNT; i++) differ += got[i] != want[i];
  CHECK_MSG(differ == 0,
            "%d of %d draws differ from the host's (first: %g, %g)", differ,
            COUNT, got[0], want[0]);
  mxu_pjrt_buffer_free(plugin, arg);
  mxu_pjrt_buffer_free(plugin, out);
  mxu_pjrt_program_free(plugin, program);
}

/* ---- max pooling's gradient at ties -------------------------------------- */

/* Equal values in a window (relu's zeros): the gradient goes to the first
 * maximum in row-major order, as TensorFlow's and select_and_scatter's. */
static void pooling_ties(void) {
  enum { H = 4, W = 6 };
  mxu_hlo h;
  mxu_hlo_init(&h);
  mxu_hlo_value x = mxu_hlo_parameter(&h, f64(4, 1, H, W, 1));
  mxu_hlo_value r = mxu_hlo_parameter(&h, f64(4, 1, H / 2, W / 2, 1));
  mxu_hlo_value y = max_pool_tiled(&h, &x);
  int64_t all[4] = {0, 1, 2, 3};
  mxu_hlo_value f = mxu_hlo_reduce(
      &h, mxu_hlo_binary(&h, MXU_HLO_MULTIPLY, y, r), MXU_HLO_SUM, 4, all);
  mxu_hlo_value dx = 0;
  CHECK_OK(mxu_hlo_gradients(&h, f, mxu_hlo_full_like(&h, f, 1.0), 1, &x, &dx));
  char *text = NULL;
  CHECK_OK(mxu_hlo_print(&h, 1, &dx, 1, &text));
  mxu_hlo_free(&h);
  mxu_pjrt_program *program = NULL;
  if (text) CHECK_OK(mxu_pjrt_compile(plugin, text, 1, &program));
  free(text);
  if (!program) return;
  double xv[H][W], rv[H / 2][W / 2], got[H][W], want[H][W] = {{0}};
  for (int i = 0; i < H; i++)
    for (int j = 0; j < W; j++) xv[i][j] = (i * 7 + j * 3) % 4 == 0 ? 1 : 0;
  for (int i = 0; i < H / 2; i++)
    for (int j = 0; j < W / 2; j++) {
      rv[i][j] = 1 + i * (W / 2) + j;
      int bi = 2 * i, bj = 2 * j; /* the first maximum */
      for (int k = 0; k < 4; k++)
        if (xv[2 * i + k / 2][2 * j + k % 2] > xv[bi][bj])
          bi = 2 * i + k / 2, bj = 2 * j + k % 2;
      want[bi][bj] = rv[i][j];
    }
  int64_t xd[4] = {1, H, W, 1}, rd[4] = {1, H / 2, W / 2, 1};
  mxu_pjrt_buffer *args[2] = {0}, *out = NULL;
  CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, xv, 4, xd, &args[0]));
  CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, rv, 4, rd, &args[1]));
  CHECK_OK(mxu_pjrt_execute(plugin, program, 2, args, &out));
  CHECK_OK(mxu_pjrt_download(plugin, out, got, sizeof got));
  CHECK_MSG(memcmp(got, want, sizeof got) == 0,
            "max pooling's gradient at ties is not at the first maximum");
  mxu_pjrt_buffer_free(plugin, args[0]);
  mxu_pjrt_buffer_free(plugin, args[1]);
  mxu_pjrt_buffer_free(plugin, out);
  mxu_pjrt_program_free(plugin, program);
}

/* ---- the step in an on-device loop --------------------------------------- */

/* state w (2x3) and c (scalar); each step's x (2x3) and k (scalar):
 * w' = w * k + x, c' = c + 1, results sum(w') and w'[0][0] as rows. Run
 * 3 of 4 stacked steps, then 0, against the same in C. */
static void loop(void) {
  mxu_hlo h;
  mxu_hlo_init(&h);
  mxu_hlo_shape m = f64(2, 2, 3, 0, 0), scalar = f64(0, 0, 0, 0, 0);
  mxu_hlo_value w = mxu_hlo_parameter(&h, m), c = mxu_hlo_parameter(&h, scalar);
  mxu_hlo_value x = mxu_hlo_parameter(&h, m), k = mxu_hlo_parameter(&h, scalar);
  mxu_hlo_value next =
      mxu_hlo_binary(&h, MXU_HLO_ADD,
                     mxu_hlo_binary(&h, MXU_HLO_MULTIPLY, w,
                                    mxu_hlo_broadcast(&h, k, m, NULL)),
                     x);
  int64_t all[2] = {0, 1}, zero[2] = {0, 0}, one[2] = {1, 1};
  mxu_hlo_value results[4] = {
      next, mxu_hlo_binary(&h, MXU_HLO_ADD, c, mxu_hlo_full_like(&h, c, 1.0)),
      mxu_hlo_reduce(&h, next, MXU_HLO_SUM, 2, all),
      mxu_hlo_reshape(&h, mxu_hlo_slice(&h, next, zero, one, one),
                      f64(1, 1, 0, 0, 0))};
  char *text = NULL;
  CHECK_OK(mxu_hlo_print_loop(&h, 4, results, 2, 4, 1, &text));
  mxu_pjrt_program *program = NULL;
  if (text) CHECK_OK(mxu_pjrt_compile(plugin, text, 1, &program));
  free(text);
  /* A loop whose state result is not its parameter's shape. */
  mxu_hlo_value wrong[2] = {results[2], results[1]};
  CHECK(mxu_hlo_print_loop(&h, 2, wrong, 2, 4, 1, &text) == MXU_ERR_SHAPE);
  mxu_hlo_free(&h);
  if (!program) return;
  double w0[6] = {1, 2, 3, 4, 5, 6}, c0 = 10, xs[4][6], ks[4] = {2, -1, 0.5, 9};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++) xs[i][j] = 0.25 * (i + 1) - j;
  for (int n = 3; n >= 0; n -= 3) {
    int steps = n;
    int64_t dims_m[2] = {2, 3}, dims_x[3] = {4, 2, 3}, dims_k[1] = {4};
    mxu_pjrt_buffer *args[5] = {0}, *outs[4] = {0};
    CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, w0, 2, dims_m, &args[0]));
    CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, &c0, 0, NULL, &args[1]));
    CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, xs, 3, dims_x, &args[2]));
    CHECK_OK(mxu_pjrt_upload(plugin, 0, MXU_PJRT_F64, ks, 1, dims_k, &args[3]));
    CHECK_OK(
        mxu_pjrt_upload(plugin, 0, MXU_PJRT_S32, &steps, 0, NULL, &args[4]));
    CHECK_OK(mxu_pjrt_execute(plugin, program, 5, args, outs));
    double w[6], c, sums[4], firsts[4];
    CHECK_OK(mxu_pjrt_download(plugin, outs[0], w, sizeof w));
    CHECK_OK(mxu_pjrt_download(plugin, outs[1], &c, sizeof c));
    CHECK_OK(mxu_pjrt_download(plugin, outs[2], sums, sizeof sums));
    CHECK_OK(mxu_pjrt_download(plugin, outs[3], firsts, sizeof firsts));
    double expect[6], expect_sums[4] = {0}, expect_firsts[4] = {0};
    memcpy(expect, w0, sizeof expect);
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < 6; j++) {
        expect[j] = expect[j] * ks[i] + xs[i][j];
        expect_sums[i] += expect[j];
      }
      expect_firsts[i] = expect[0];
    }
    CHECK(c == c0 + n);
    CHECK(memcmp(w, expect, sizeof w) == 0);
    for (int i = 0; i < 4; i++)
      CHECK_MSG(sums[i] == expect_sums[i] && firsts[i] == expect_firsts[i],
                "n %d, step %d: %g %g against %g %g", n, i, sums[i], firsts[i],
                expect_sums[i], expect_firsts[i]);
    for (int i = 0; i < 5; i++) mxu_pjrt_buffer_free(plugin, args[i]);
    for (int i = 0; i < 4; i++) mxu_pjrt_buffer_free(plugin, outs[i]);
  }
  mxu_pjrt_program_free(plugin, program);
}

int main(void) {
  CHECK_OK(mxu_pjrt_open(mxu_pjrt_plugin_path(NULL), 1, &plugin));
  if (!plugin) return check_report("test_hlo");
  ops();
  pooling_ties();
  uniform_draws();
  loop();
  errors();
  mxu_pjrt_close(plugin);
  return check_report("test_hlo");
}
