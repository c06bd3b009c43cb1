/* recurrent.c — SimpleRNN, LSTM and GRU (Keras' reset_after) over
 * (steps, features), from zero states, return_sequences and go_backwards.
 *
 * The products are the backend's dense ops: every step's input projection
 * x W + b in one (batch x steps) op before the steps, each step's h U in
 * one of batch rows, and after the backward steps the weight gradients in
 * one op each (dW from every step's gate gradients, dU from every step's
 * previous h). The gates between are plain loops over the batch's values,
 * as the layer's own arithmetic (a few float ops each).
 *
 * Step s of the recurrence reads input step t = s (go_backwards: steps - 1
 * - s). Per-step values are kept in step order, batch rows within: h in
 * `hs` after a zero block (so hs is also every step's previous h), the
 * gates after their activations in `gates`, LSTM's cell states, and GRU's
 * recurrent candidate term h U_h + b_h, which its reset gate scales. */
#include "model/layers/layers.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static int gates_of(mxu_rnn_kind kind) {
  return kind == MXU_LSTM ? 4 : kind == MXU_GRU ? 3 : 1;
}

/* ---- the cell's activations -------------------------------------------
 * Those whose derivative is a function of the output, which the backward
 * steps read from the kept gates. */

static int supported_activation(mxu_activation a) {
  return a == MXU_TANH || a == MXU_SIGMOID || a == MXU_LINEAR ||
         a == MXU_RELU || a == MXU_HARD_SIGMOID || a == MXU_HARD_SIGMOID_TF2;
}

static float activate(mxu_activation a, float x) {
  switch (a) {
  case MXU_TANH: return tanhf(x);
  case MXU_SIGMOID: return 1.0f / (1.0f + expf(-x));
  case MXU_RELU: return x > 0.0f ? x : 0.0f;
  case MXU_HARD_SIGMOID: {
    float v = x / 6.0f + 0.5f;
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
  }
  case MXU_HARD_SIGMOID_TF2: {
    float v = 0.2f * x + 0.5f;
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
  }
  default: return x;
  }
}

/* d activate / dx at the x that gave y. */
static float slope(mxu_activation a, float y) {
  switch (a) {
  case MXU_TANH: return 1.0f - y * y;
  case MXU_SIGMOID: return y * (1.0f - y);
  case MXU_RELU: return y > 0.0f ? 1.0f : 0.0f;
  case MXU_HARD_SIGMOID: return y > 0.0f && y < 1.0f ? 1.0f / 6.0f : 0.0f;
  case MXU_HARD_SIGMOID_TF2: return y > 0.0f && y < 1.0f ? 0.2f : 0.0f;
  default: return 1.0f;
  }
}

/* ---- shapes and weights ------------------------------------------------- */

typedef struct rnn_dims {
  int64_t n, steps, features, units, gates;
} rnn_dims;

static rnn_dims dims_of(const mxu_layer *layer, int64_t batch) {
  const mxu_rnn_config *c = &layer->config.rnn;
  return (rnn_dims){batch, layer->in_shape.dims[0], layer->in_shape.dims[1],
                    c->units, gates_of(c->kind)};
}

static mxu_status rnn_infer(mxu_layer *layer) {
  const mxu_rnn_config *c = &layer->config.rnn;
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: expects (steps, features) input, got %s", layer->name,
                    text);
  if (c->units <= 0 || c->units > (1 << 20))
    return mxu_fail(MXU_ERR_ARG, "%s: units %d must be in 1..%d", layer->name,
                    c->units, 1 << 20);
  if (!supported_activation(c->activation) ||
      !supported_activation(c->recurrent_activation))
    return mxu_fail(
        MXU_ERR_UNSUPPORTED,
        "%s: a recurrent cell's activation and recurrent_activation "
        "must be tanh, sigmoid, hard_sigmoid, relu or linear",
        layer->name);
  int64_t dims[2] = {layer->in_shape.dims[0], c->units};
  layer->out_shape = c->return_sequences ? mxu_shape_make(2, dims)
                                         : mxu_shape_make(1, &dims[1]);
  return MXU_OK;
}

/* tf.keras 2 names the weights in the cell's scope
 * ("lstm/lstm_cell/kernel:0"); Keras 3 keeps them in a "cell" group. */
static const char *const weight_names[][3] = {
    [MXU_SIMPLE_RNN] = {"simple_rnn_cell/kernel",
                        "simple_rnn_cell/recurrent_kernel",
                        "simple_rnn_cell/bias"},
    [MXU_LSTM] = {"lstm_cell/kernel", "lstm_cell/recurrent_kernel",
                  "lstm_cell/bias"},
    [MXU_GRU] = {"gru_cell/kernel", "gru_cell/recurrent_kernel",
                 "gru_cell/bias"}};

static mxu_initializer orthogonal(void) {
  return (mxu_initializer){.kind = MXU_INIT_ORTHOGONAL, .gain = 1.0f};
}

static int rnn_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_rnn_config *c = &layer->config.rnn;
  rnn_dims d = dims_of(layer, 1);
  const char *const *names = weight_names[c->kind];
  int64_t kernel[2] = {d.features, d.gates * d.units};
  int64_t recurrent[2] = {d.units, d.gates * d.units};
  decls[0] = mxu_weight_decl(names[0], mxu_shape_make(2, kernel), &c->kernel,
                             mxu_init_glorot_uniform());
  decls[1] = mxu_weight_decl(names[1], mxu_shape_make(2, recurrent),
                             &c->recurrent, orthogonal());
  if (!c->use_bias) return 2;
  int64_t bias[2] = {2, d.gates * d.units};
  int gru = c->kind == MXU_GRU;
  decls[2] = mxu_weight_decl(
      names[2], gru ? mxu_shape_make(2, bias) : mxu_shape_make(1, &bias[1]),
      &c->bias, mxu_init_zeros());
  if (c->kind == MXU_LSTM && c->unit_forget_bias) {
    decls[2].ones_first = d.units;
    decls[2].ones_count = d.units;
  }
  return 3;
}

/* Per sample: the products forward (input and recurrent), twice that
 * backward, and some ten float ops per gate value each way. */
static double rnn_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  rnn_dims d = dims_of(layer, 1);
  double width = (double)d.gates * d.units;
  double products = 2.0 * d.steps * (d.features + d.units) * width;
  double gates = 10.0 * d.steps * width;
  double backward = products * (step->need_dx ? 2.0 : 1.5) + gates;
  return products + gates + backward;
}

/* ---- the plan ------------------------------------------------------------
 * scratch[0]: what backward reads of the forward pass; scratch[1]: the
 * steps' work. Offsets in floats within each. */

typedef struct rnn_buffers {
  float *projected; /* (n, steps) rows of g * units: x W + b */
  float *gates;     /* (step, n) rows of g * units, activated */
  float *hs;        /* a zero block, then (step, n) rows of units */
  float *cells;     /* LSTM: (step, n) rows of units */
  float *candidate; /* GRU: (step, n) rows of units: h U_h + b_h */
  float *recurrent; /* a step's (n, g * units): h U */
  float *d_input;   /* (n, steps) rows of g * units: the input side's */
  float *d_rec;     /* (step, n) rows of g * units: the recurrent side's */
  float *dh, *dc;   /* (n, units): into the step before */
} rnn_buffers;

static size_t forward_floats(const rnn_dims *d) {
  int64_t values = d->n * d->steps * d->units;
  return (size_t)(2 * values * d->gates + values + d->n * d->units +
                  2 * values);
}

static size_t work_floats(const rnn_dims *d) {
  int64_t values = d->n * d->steps * d->units * d->gates;
  return (size_t)(d->n * d->units * d->gates + 2 * values +
                  2 * d->n * d->units);
}

static rnn_buffers buffers_of(const mxu_layer *layer,
                              const mxu_layer_run *run) {
  rnn_dims d = dims_of(layer, layer->compiled->batch);
  int64_t values = d.n * d.steps * d.units, row = d.n * d.units;
  float *f = (float *)(void *)(run->arena + layer->compiled->scratch[0]);
  float *w = (float *)(void *)(run->arena + layer->compiled->scratch[1]);
  rnn_buffers b;
  b.projected = f;
  b.gates = b.projected + values * d.gates;
  b.hs = b.gates + values * d.gates;
  b.cells = b.hs + values + row;
  b.candidate = b.cells + values;
  b.recurrent = w;
  b.d_input = b.recurrent + row * d.gates;
  b.d_rec = b.d_input + values * d.gates;
  b.dh = b.d_rec + values * d.gates;
  b.dc = b.dh + row;
  return b;
}

static mxu_status rnn_plan(mxu_layer *layer, const mxu_backend *backend,
                           int batch, mxu_arena *layout) {
  const mxu_rnn_config *c = &layer->config.rnn;
  rnn_dims d = dims_of(layer, batch);
  int width = (int)(d.gates * d.units);
  mxu_dense_desc input = {(int)(d.n * d.steps), (int)d.features, width,
                          c->use_bias,          MXU_LINEAR,      0};
  mxu_dense_desc step = {(int)d.n, (int)d.units, width, 0, MXU_LINEAR, 0};
  mxu_dense_desc all_steps = {
      (int)(d.n * d.steps), (int)d.units, width, 0, MXU_LINEAR, 0};
  MXU_TRY(backend->dense_create(&input, &layer->compiled->ops[0]));
  MXU_TRY(backend->dense_create(&step, &layer->compiled->ops[1]));
  MXU_TRY(backend->dense_create(&all_steps, &layer->compiled->ops[2]));
  layer->compiled->scratch[0] =
      mxu_arena_reserve(layout, forward_floats(&d) * sizeof(float));
  layer->compiled->scratch[1] =
      mxu_arena_reserve(layout, work_floats(&d) * sizeof(float));
  return MXU_OK;
}

/* ---- forward ------------------------------------------------------------ */

static int64_t input_step(const rnn_dims *d, const mxu_rnn_config *c,
                          int64_t s) {
  return c->go_backwards ? d->steps - 1 - s : s;
}

/* One step's gates and state for batch row n: p the input projection, r
 * the recurrent one (NULL at step 0), h_prev and c_prev the states before;
 * writes the activated gates, h (and LSTM's c, GRU's candidate term). */
static void cell_forward(const mxu_rnn_config *c, int64_t u, const float *p,
                         const float *r, const float *rec_bias,
                         const float *h_prev, const float *c_prev, float *gates,
                         float *h, float *cell, float *candidate) {
  mxu_activation act = c->activation, rec = c->recurrent_activation;
  for (int64_t j = 0; j < u; j++) {
    if (c->kind == MXU_SIMPLE_RNN) {
      h[j] = gates[j] = activate(act, p[j] + (r ? r[j] : 0.0f));
      continue;
    }
    if (c->kind == MXU_LSTM) {
      float z[4];
      for (int g = 0; g < 4; g++) z[g] = p[g * u + j] + (r ? r[g * u + j] : 0);
      float i = activate(rec, z[0]), f = activate(rec, z[1]);
      float k = activate(act, z[2]), o = activate(rec, z[3]);
      cell[j] = f * c_prev[j] + i * k;
      h[j] = o * activate(act, cell[j]);
      gates[j] = i, gates[u + j] = f, gates[2 * u + j] = k,
      gates[3 * u + j] = o;
      continue;
    }
    /* GRU, reset_after: the reset gate scales h U_h + b_h. */
    float rz = r ? r[j] : 0.0f, rr = r ? r[u + j] : 0.0f;
    float rh = r ? r[2 * u + j] : 0.0f;
    if (rec_bias)
      rz += rec_bias[j], rr += rec_bias[u + j], rh += rec_bias[2 * u + j];
    float z = activate(rec, p[j] + rz), reset = activate(rec, p[u + j] + rr);
    float k = activate(act, p[2 * u + j] + reset * rh);
    h[j] = z * h_prev[j] + (1.0f - z) * k;
    candidate[j] = rh;
    gates[j] = z, gates[u + j] = reset, gates[2 * u + j] = k;
  }
}

static const float *recurrent_bias(const mxu_layer *layer, float *const *w) {
  const mxu_rnn_config *c = &layer->config.rnn;
  return c->kind == MXU_GRU && c->use_bias ? w[2] + gates_of(c->kind) * c->units
                                           : NULL;
}

static void rnn_forward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_rnn_config *c = &layer->config.rnn;
  rnn_dims d = dims_of(layer, layer->compiled->batch);
  rnn_buffers b = buffers_of(layer, run);
  int64_t u = d.units, width = d.gates * u, row = d.n * u;
  const mxu_backend *be = run->backend;
  be->dense_forward(run->ops[0], run->x, run->w[0],
                    c->use_bias ? run->w[2] : NULL, b.projected);
  const float *rec_bias = recurrent_bias(layer, run->w);
  memset(b.hs, 0, (size_t)row * sizeof(float));
  for (int64_t s = 0; s < d.steps; s++) {
    const float *h_prev = b.hs + s * row;
    if (s) be->dense_forward(run->ops[1], h_prev, run->w[1], NULL, b.recurrent);
    int64_t t = input_step(&d, c, s);
    for (int64_t n = 0; n < d.n; n++) {
      const float *c_prev = s ? b.cells + (s - 1) * row + n * u : b.hs;
      cell_forward(c, u, b.projected + (n * d.steps + t) * width,
                   s ? b.recurrent + n * width : NULL, rec_bias, h_prev + n * u,
                   c_prev, b.gates + (s * d.n + n) * width,
                   b.hs + (s + 1) * row + n * u, b.cells + s * row + n * u,
                   b.candidate + s * row + n * u);
    }
  }
  for (int64_t n = 0; n < d.n; n++) {
    if (!c->return_sequences) {
      memcpy(run->y + n * u, b.hs + d.steps * row + n * u,
             (size_t)u * sizeof(float));
      continue;
    }
    for (int64_t s = 0; s < d.steps; s++)
      memcpy(run->y + (n * d.steps + s) * u, b.hs + (s + 1) * row + n * u,
             (size_t)u * sizeof(float));
  }
}

/* ---- backward ----------------------------------------------------------- */

/* One step's gradients for batch row n: dh the output's (the layer's and
 * the next step's), left as the previous h's direct term (GRU's z; 0
 * else); dc LSTM's cell gradient from the next step, left as the previous
 * cell's. Writes the input side's and the recurrent side's pre-activation
 * gradients. */
static void cell_backward(const mxu_rnn_config *c, int64_t u,
                          const float *gates, const float *h_prev,
                          const float *c_prev, const float *cell,
                          const float *candidate, float *dh, float *dc,
                          float *d_input, float *d_rec) {
  mxu_activation act = c->activation, rec = c->recurrent_activation;
  for (int64_t j = 0; j < u; j++) {
    if (c->kind == MXU_SIMPLE_RNN) {
      d_input[j] = d_rec[j] = dh[j] * slope(act, gates[j]);
      dh[j] = 0.0f;
      continue;
    }
    if (c->kind == MXU_LSTM) {
      float i = gates[j], f = gates[u + j], k = gates[2 * u + j];
      float o = gates[3 * u + j], tc = activate(act, cell[j]);
      float dcell = dh[j] * o * slope(act, tc) + dc[j];
      float g[4] = {dcell * k * slope(rec, i),
                    dcell * c_prev[j] * slope(rec, f),
                    dcell * i * slope(act, k), dh[j] * tc * slope(rec, o)};
      for (int q = 0; q < 4; q++) d_input[q * u + j] = d_rec[q * u + j] = g[q];
      dc[j] = dcell * f;
      dh[j] = 0.0f;
      continue;
    }
    float z = gates[j], reset = gates[u + j], k = gates[2 * u + j];
    float dk = dh[j] * (1.0f - z) * slope(act, k);
    float dz = dh[j] * (h_prev[j] - k) * slope(rec, z);
    float dr = dk * candidate[j] * slope(rec, reset);
    d_input[j] = d_rec[j] = dz;
    d_input[u + j] = d_rec[u + j] = dr;
    d_input[2 * u + j] = dk;
    d_rec[2 * u + j] = dk * reset;
    dh[j] *= z;
  }
}

/* The output's gradient at step s for row n, into dh (added). */
static void add_output_gradient(const mxu_layer *layer, const rnn_dims *d,
                                const float *dy, int64_t s, int64_t n,
                                float *dh) {
  const float *g = NULL;
  if (layer->config.rnn.return_sequences)
    g = dy + (n * d->steps + s) * d->units;
  else if (s == d->steps - 1)
    g = dy + n * d->units;
  for (int64_t j = 0; g && j < d->units; j++) dh[j] += g[j];
}

/* GRU's recurrent bias: the sum of the recurrent side's gradients. */
static void recurrent_bias_gradient(const rnn_dims *d, const float *d_rec,
                                    float *db) {
  int64_t width = d->gates * d->units;
  memset(db, 0, (size_t)width * sizeof(float));
  for (int64_t r = 0; r < d->n * d->steps; r++)
    for (int64_t j = 0; j < width; j++) db[j] += d_rec[r * width + j];
}

static void rnn_backward(mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_rnn_config *c = &layer->config.rnn;
  rnn_dims d = dims_of(layer, layer->compiled->batch);
  rnn_buffers b = buffers_of(layer, run);
  int64_t u = d.units, width = d.gates * u, row = d.n * u;
  const mxu_backend *be = run->backend;
  memset(b.dh, 0, (size_t)row * sizeof(float));
  memset(b.dc, 0, (size_t)row * sizeof(float));
  for (int64_t s = d.steps - 1; s >= 0; s--) {
    int64_t t = input_step(&d, c, s);
    for (int64_t n = 0; n < d.n; n++)
      add_output_gradient(layer, &d, run->dy, s, n, b.dh + n * u);
    float *d_rec = b.d_rec + s * d.n * width;
    for (int64_t n = 0; n < d.n; n++) {
      const float *c_prev = s ? b.cells + (s - 1) * row + n * u : b.hs;
      cell_backward(c, u, b.gates + (s * d.n + n) * width,
                    b.hs + s * row + n * u, c_prev, b.cells + s * row + n * u,
                    b.candidate + s * row + n * u, b.dh + n * u, b.dc + n * u,
                    b.d_input + (n * d.steps + t) * width, d_rec + n * width);
    }
    if (s == 0) break;
    /* The previous h's: its direct term (left in dh) + d_rec U^T. */
    be->dense_backward_data(run->ops[1], d_rec, run->w[1], b.recurrent);
    for (int64_t i = 0; i < row; i++) b.dh[i] += b.recurrent[i];
  }
  be->dense_backward_weights(run->ops[0], run->x, b.d_input, run->dw[0],
                             c->use_bias ? run->dw[2] : NULL);
  be->dense_backward_weights(run->ops[2], b.hs, b.d_rec, run->dw[1], NULL);
  if (recurrent_bias(layer, run->w))
    recurrent_bias_gradient(&d, b.d_rec, run->dw[2] + width);
  if (run->need_dx)
    be->dense_backward_data(run->ops[0], b.d_input, run->w[0], run->dx);
}

/* ---- pjrt: the steps unrolled ------------------------------------------- */

/* Columns [first, first + count) of a (rows, cols) value. */
static mxu_hlo_value columns(mxu_hlo *h, mxu_hlo_value v, int64_t rows,
                             int64_t first, int64_t count) {
  int64_t start[2] = {0, first}, limit[2] = {rows, first + count};
  int64_t stride[2] = {1, 1};
  return mxu_hlo_slice(h, v, start, limit, stride);
}

/* Row `row` of a (2, width) bias, as (width). */
static mxu_hlo_value bias_row(mxu_hlo *h, mxu_hlo_value b, int64_t row,
                              int64_t width) {
  int64_t start[2] = {row, 0}, limit[2] = {row + 1, width}, stride[2] = {1, 1};
  return mxu_hlo_reshape(h, mxu_hlo_slice(h, b, start, limit, stride),
                         mxu_hlo_shape_make(MXU_HLO_F32, 1, &width));
}

/* One step: p the input projection (n, g * u), r the recurrent one (or 0
 * at step 0); returns h, and LSTM's cell in *cell. */
static mxu_hlo_value cell_emit(mxu_emit *e, const mxu_rnn_config *c, int64_t n,
                               mxu_hlo_value p, mxu_hlo_value r,
                               mxu_hlo_value rec_bias, mxu_hlo_value h_prev,
                               mxu_hlo_value *cell) {
  mxu_hlo *h = e->h;
  int64_t u = c->units;
  mxu_activation act = c->activation, rec = c->recurrent_activation;
#define GATE(v, g) columns(h, v, n, (g)*u, u)
#define ACT(a, v) mxu_emit_activation(e, a, 0.0f, v)
  if (c->kind == MXU_SIMPLE_RNN) return ACT(act, mxu_hlo_add(h, p, r));
  if (c->kind == MXU_LSTM) {
    mxu_hlo_value z = mxu_hlo_add(h, p, r);
    mxu_hlo_value i = ACT(rec, GATE(z, 0)), f = ACT(rec, GATE(z, 1));
    mxu_hlo_value k = ACT(act, GATE(z, 2)), o = ACT(rec, GATE(z, 3));
    *cell = mxu_hlo_add(h, mxu_hlo_mul(h, f, *cell), mxu_hlo_mul(h, i, k));
    return mxu_hlo_mul(h, o, ACT(act, *cell));
  }
  if (rec_bias) r = mxu_emit_bias(e, r, rec_bias);
  mxu_hlo_value z = ACT(rec, mxu_hlo_add(h, GATE(p, 0), GATE(r, 0)));
  mxu_hlo_value reset = ACT(rec, mxu_hlo_add(h, GATE(p, 1), GATE(r, 1)));
  mxu_hlo_value k =
      ACT(act, mxu_hlo_add(h, GATE(p, 2), mxu_hlo_mul(h, reset, GATE(r, 2))));
  mxu_hlo_value one = mxu_hlo_full_like(h, z, 1.0);
  return mxu_hlo_add(h, mxu_hlo_mul(h, z, h_prev),
                     mxu_hlo_mul(h, mxu_hlo_sub(h, one, z), k));
#undef GATE
#undef ACT
}

static mxu_hlo_value rnn_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const mxu_rnn_config *c = &layer->config.rnn;
  rnn_dims d = dims_of(layer, e->batch);
  int64_t u = d.units, width = d.gates * u;
  int gru = c->kind == MXU_GRU;
  int64_t flat[2] = {d.n * d.steps, d.features};
  mxu_hlo_value x =
      mxu_hlo_reshape(h, e->in[0], mxu_hlo_shape_make(MXU_HLO_F32, 2, flat));
  mxu_hlo_value p = mxu_hlo_matmul(h, x, e->w[0]), rec_bias = 0;
  if (c->use_bias)
    p = mxu_emit_bias(e, p, gru ? bias_row(h, e->w[2], 0, width) : e->w[2]);
  if (c->use_bias && gru) rec_bias = bias_row(h, e->w[2], 1, width);
  int64_t by_step[3] = {d.n, d.steps, width}, row[2] = {d.n, u};
  p = mxu_hlo_reshape(h, p, mxu_hlo_shape_make(MXU_HLO_F32, 3, by_step));
  mxu_hlo_shape state = mxu_hlo_shape_make(MXU_HLO_F32, 2, row);
  int64_t wide[2] = {d.n, width}, one_step[3] = {d.n, 1, u};
  mxu_hlo_value hs = mxu_hlo_constant(h, state, 0.0), cell = hs, seq = 0;
  mxu_hlo_value zero =
      mxu_hlo_constant(h, mxu_hlo_shape_make(MXU_HLO_F32, 2, wide), 0.0);
  for (int64_t s = 0; s < d.steps; s++) {
    int64_t t = input_step(&d, c, s);
    int64_t start[3] = {0, t, 0}, limit[3] = {d.n, t + 1, width};
    int64_t stride[3] = {1, 1, 1};
    mxu_hlo_value pt =
        mxu_hlo_reshape(h, mxu_hlo_slice(h, p, start, limit, stride),
                        mxu_hlo_shape_make(MXU_HLO_F32, 2, wide));
    mxu_hlo_value r = s ? mxu_hlo_matmul(h, hs, e->w[1]) : zero;
    hs = cell_emit(e, c, d.n, pt, r, rec_bias, hs, &cell);
    if (!c->return_sequences) continue;
    mxu_hlo_value step =
        mxu_hlo_reshape(h, hs, mxu_hlo_shape_make(MXU_HLO_F32, 3, one_step));
    seq = s ? mxu_hlo_concatenate(h, seq, step, 1) : step;
  }
  return c->return_sequences ? seq : hs;
}

/* ---- Keras' JSON ---------------------------------------------------------
 * Refused: what mxu's zero-state, whole-sequence, dropout-free cell does
 * not do (return_state, stateful, dropout, recurrent_dropout, time_major,
 * GRU's reset_after false). unroll, implementation, use_cudnn and seed
 * change nothing computed here. */

static const char *const rnn_keys[] = {"units",
                                       "activation",
                                       "recurrent_activation",
                                       "use_bias",
                                       "kernel_initializer",
                                       "recurrent_initializer",
                                       "bias_initializer",
                                       "unit_forget_bias",
                                       "kernel_regularizer",
                                       "recurrent_regularizer",
                                       "bias_regularizer",
                                       "activity_regularizer",
                                       "kernel_constraint",
                                       "recurrent_constraint",
                                       "bias_constraint",
                                       "dropout",
                                       "recurrent_dropout",
                                       "return_sequences",
                                       "return_state",
                                       "go_backwards",
                                       "stateful",
                                       "unroll",
                                       "time_major",
                                       "implementation",
                                       "reset_after",
                                       "use_cudnn",
                                       "seed",
                                       NULL};

static mxu_status require_zero(const mxu_json_where *where, const cJSON *config,
                               const char *key) {
  float v = 0.0f;
  MXU_TRY(mxu_json_float(where, config, key, MXU_JSON_OPTIONAL, &v));
  if (v == 0.0f) return MXU_OK;
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s %g is not supported (mxu's recurrent layers have "
                       "no dropout): use 0, or a Dropout layer before",
                       key, (double)v);
}

static mxu_status read_rnn(const mxu_json_where *where, const cJSON *config,
                           mxu_json_node *node, const char *name,
                           mxu_rnn_kind kind) {
  mxu_rnn_config c = mxu_rnn_defaults(kind, 0);
  c.name = name;
  int keras2 = node->model->keras2_names, reset_after = 1;
  MXU_TRY(mxu_json_int(where, config, "units", MXU_JSON_REQUIRED, 1, 1 << 20,
                       &c.units));
  MXU_TRY(
      mxu_json_activation(where, config, "activation", keras2, &c.activation));
  if (kind != MXU_SIMPLE_RNN)
    MXU_TRY(mxu_json_activation(where, config, "recurrent_activation", keras2,
                                &c.recurrent_activation));
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &c.use_bias));
  MXU_TRY(
      mxu_json_bool(where, config, "unit_forget_bias", &c.unit_forget_bias));
  MXU_TRY(
      mxu_json_bool(where, config, "return_sequences", &c.return_sequences));
  MXU_TRY(mxu_json_bool(where, config, "go_backwards", &c.go_backwards));
  MXU_TRY(mxu_json_bool(where, config, "reset_after", &reset_after));
  if (!reset_after)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "reset_after false is not supported (Keras 1's GRU): "
                         "use the default, true");
  MXU_TRY(mxu_json_require_false(where, config, "return_state"));
  MXU_TRY(mxu_json_require_false(where, config, "stateful"));
  MXU_TRY(mxu_json_require_false(where, config, "time_major"));
  MXU_TRY(require_zero(where, config, "dropout"));
  MXU_TRY(require_zero(where, config, "recurrent_dropout"));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "recurrent", &c.recurrent));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c.bias));
  return mxu_json_applied(where, node,
                          mxu_apply_rnn(node->model, &c, node->inputs[0]));
}

static void write_rnn(mxu_json_out *out, const mxu_layer *layer,
                      cJSON *config) {
  const mxu_rnn_config *c = &layer->config.rnn;
  mxu_json_put_bool(out, config, "return_sequences", c->return_sequences);
  mxu_json_put_bool(out, config, "return_state", 0);
  mxu_json_put_bool(out, config, "go_backwards", c->go_backwards);
  mxu_json_put_bool(out, config, "stateful", 0);
  mxu_json_put_bool(out, config, "unroll", 0);
  mxu_json_put_number(out, config, "units", c->units);
  mxu_json_put_string(out, config, "activation",
                      mxu_json_activation_name(c->activation));
  if (c->kind != MXU_SIMPLE_RNN)
    mxu_json_put_string(out, config, "recurrent_activation",
                        mxu_json_activation_name(c->recurrent_activation));
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  mxu_config_put_initializers(out, config, "kernel", &c->kernel.initializer,
                              mxu_init_glorot_uniform(), "recurrent",
                              &c->recurrent.initializer, orthogonal());
  mxu_initializer bias = mxu_init_or(&c->bias.initializer, mxu_init_zeros());
  mxu_json_put_initializer(out, config, "bias_initializer", &bias);
  if (c->kind == MXU_LSTM)
    mxu_json_put_bool(out, config, "unit_forget_bias", c->unit_forget_bias);
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "recurrent",
                           &c->recurrent, 1);
  mxu_json_put_regularizer(out, config, "bias_regularizer",
                           &c->bias.regularizer);
  mxu_json_put_constraint(out, config, "bias_constraint", &c->bias.constraint);
  mxu_json_put_float(out, config, "dropout", 0.0f);
  mxu_json_put_float(out, config, "recurrent_dropout", 0.0f);
  if (c->kind == MXU_GRU) mxu_json_put_bool(out, config, "reset_after", 1);
}

static mxu_status read_simple_rnn(const mxu_json_where *where,
                                  const cJSON *config, mxu_json_node *node,
                                  const char *name) {
  return read_rnn(where, config, node, name, MXU_SIMPLE_RNN);
}

static mxu_status read_lstm(const mxu_json_where *where, const cJSON *config,
                            mxu_json_node *node, const char *name) {
  return read_rnn(where, config, node, name, MXU_LSTM);
}

static mxu_status read_gru(const mxu_json_where *where, const cJSON *config,
                           mxu_json_node *node, const char *name) {
  return read_rnn(where, config, node, name, MXU_GRU);
}

static const char *cell_group(const mxu_layer *layer, int k) {
  (void)layer;
  (void)k;
  return "cell";
}

#define RNN_CLASS(cname, reader)                                               \
  {                                                                            \
    .class_name = cname, .keras3_group = cell_group, .config_keys = rnn_keys,  \
    .read_config = reader, .write_config = write_rnn, .min_inputs = 1,         \
    .max_inputs = 1, .infer = rnn_infer, .declare = rnn_declare,               \
    .flops = rnn_flops, .plan = rnn_plan, .forward = rnn_forward,              \
    .backward = rnn_backward, .emit = rnn_emit                                 \
  }

const mxu_layer_class mxu_simple_rnn_class =
    RNN_CLASS("SimpleRNN", read_simple_rnn);
const mxu_layer_class mxu_lstm_class = RNN_CLASS("LSTM", read_lstm);
const mxu_layer_class mxu_gru_class = RNN_CLASS("GRU", read_gru);
