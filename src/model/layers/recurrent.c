/* recurrent.c — SimpleRNN, LSTM and GRU (Keras' reset_after either way) over
 * (steps, features), from zero states or initial_state, return_sequences,
 * return_state and go_backwards.
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
 * `hs` after the initial state (so hs is also every step's previous h), the
 * gates after their activations in `gates`, LSTM's cell states, and GRU's
 * recurrent candidate term h U_h + b_h, which its reset gate scales. */
#include "model/layers/layers.h"

#include "core/fast_math.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static int gates_of(mxu_rnn_kind kind) {
  return kind == MXU_LSTM ? 4 : kind == MXU_GRU ? 3 : 1;
}

/* The states it carries: LSTM's h and c, the others' h. */
static int states_of(mxu_rnn_kind kind) { return kind == MXU_LSTM ? 2 : 1; }

/* A GRU whose reset gate scales h before U_h (Keras' reset_after false). */
static int resets_before(const mxu_rnn_config *c) {
  return c->kind == MXU_GRU && c->reset_before;
}

/* GRU's (2, 3 units) bias of input and recurrent halves (reset_after). */
static int two_biases(const mxu_rnn_config *c) {
  return c->kind == MXU_GRU && c->use_bias && !c->reset_before;
}

/* ---- the cell's activations -------------------------------------------
 * Those whose derivative is a function of the output, which the backward
 * steps read from the kept gates. */

int mxu_rnn_activation_supported(mxu_activation a) {
  return a == MXU_TANH || a == MXU_SIGMOID || a == MXU_LINEAR ||
         a == MXU_RELU || a == MXU_HARD_SIGMOID || a == MXU_HARD_SIGMOID_TF2;
}

/* y = a(x) over count values (y may be x), each activation its own loop
 * for GCC to vectorise (core/fast_math.h's sigmoid and tanh). */
void mxu_rnn_activate(mxu_activation a, const float *x, float *y,
                      int64_t count) {
  int64_t j;
  switch (a) {
  case MXU_TANH:
    for (j = 0; j < count; j++) y[j] = tanh_fast(x[j]);
    return;
  case MXU_SIGMOID:
    for (j = 0; j < count; j++) y[j] = sigmoid(x[j]);
    return;
  case MXU_RELU:
    for (j = 0; j < count; j++) y[j] = x[j] > 0.0f ? x[j] : 0.0f;
    return;
  case MXU_HARD_SIGMOID:
    for (j = 0; j < count; j++)
      y[j] = fminf(fmaxf(x[j] / 6.0f + 0.5f, 0.0f), 1.0f);
    return;
  case MXU_HARD_SIGMOID_TF2:
    for (j = 0; j < count; j++)
      y[j] = fminf(fmaxf(0.2f * x[j] + 0.5f, 0.0f), 1.0f);
    return;
  default:
    if (y != x) memcpy(y, x, (size_t)count * sizeof(float));
  }
}

/* d a / dx at the x that gave each y, into out (count values). */
void mxu_rnn_slope(mxu_activation a, const float *y, float *out,
                   int64_t count) {
  int64_t j;
  switch (a) {
  case MXU_TANH:
    for (j = 0; j < count; j++) out[j] = 1.0f - y[j] * y[j];
    return;
  case MXU_SIGMOID:
    for (j = 0; j < count; j++) out[j] = y[j] * (1.0f - y[j]);
    return;
  case MXU_RELU:
    for (j = 0; j < count; j++) out[j] = y[j] > 0.0f ? 1.0f : 0.0f;
    return;
  case MXU_HARD_SIGMOID:
  case MXU_HARD_SIGMOID_TF2: {
    float s = a == MXU_HARD_SIGMOID ? 1.0f / 6.0f : 0.2f;
    for (j = 0; j < count; j++) out[j] = y[j] > 0.0f && y[j] < 1.0f ? s : 0.0f;
    return;
  }
  default:
    for (j = 0; j < count; j++) out[j] = 1.0f;
  }
}

/* y += x over count values. */
static void add_all(const float *x, float *y, int64_t count) {
  for (int64_t j = 0; j < count; j++) y[j] += x[j];
}

/* ---- the LSTM cell ------------------------------------------------------- */

/* A pixel's cell: gates (i, f, c, o pre-activation in, activated out),
 * c_prev (NULL: zeros) into cell and h. */
void mxu_lstm_cell_forward(mxu_activation act, mxu_activation rec, int64_t u,
                           float *gates, const float *c_prev, float *cell,
                           float *h) {
  float *i = gates, *f = gates + u, *k = gates + 2 * u, *o = gates + 3 * u;
  mxu_rnn_activate(rec, i, i, 2 * u);
  mxu_rnn_activate(act, k, k, u);
  mxu_rnn_activate(rec, o, o, u);
  for (int64_t j = 0; j < u; j++)
    cell[j] = (c_prev ? f[j] * c_prev[j] : 0.0f) + i[j] * k[j];
  mxu_rnn_activate(act, cell, h, u);
  for (int64_t j = 0; j < u; j++) h[j] *= o[j];
}

/* Its gradient: dh and dc (the step after's) in; the gates' gradient
 * (before their activations) into dg, dc the step before's. tmp: 2 u. */
void mxu_lstm_cell_backward(mxu_activation act, mxu_activation rec, int64_t u,
                            const float *gates, const float *c_prev,
                            const float *cell, const float *dh, float *dc,
                            float *dg, float *tmp) {
  const float *i = gates, *f = gates + u, *k = gates + 2 * u,
              *o = gates + 3 * u;
  float *tc = tmp, *s_tc = tmp + u;
  mxu_rnn_activate(act, cell, tc, u);
  mxu_rnn_slope(act, tc, s_tc, u);
  mxu_rnn_slope(rec, i, dg, 2 * u);
  mxu_rnn_slope(act, k, dg + 2 * u, u);
  mxu_rnn_slope(rec, o, dg + 3 * u, u);
  for (int64_t j = 0; j < u; j++) {
    float dcell = dh[j] * o[j] * s_tc[j] + dc[j];
    dg[j] *= dcell * k[j];
    dg[u + j] *= c_prev ? dcell * c_prev[j] : 0.0f;
    dg[2 * u + j] *= dcell * i[j];
    dg[3 * u + j] *= dh[j] * tc[j];
    dc[j] = dcell * f[j];
  }
}

/* ---- shapes and weights ------------------------------------------------- */

static int is_bidirectional(const mxu_layer *layer) {
  return layer->cls == &mxu_bidirectional_class;
}

/* The recurrent layer a node runs: its own, or the one a Bidirectional
 * wraps (run forwards, then backwards: two directions). */
static const mxu_rnn_config *rnn_of(const mxu_layer *layer) {
  return is_bidirectional(layer) ? &layer->config.bidirectional.rnn
                                 : &layer->config.rnn;
}

static int directions_of(const mxu_layer *layer) {
  return is_bidirectional(layer) ? 2 : 1;
}

/* Weights per direction: kernel, recurrent_kernel and the bias. */
static int weights_per(const mxu_rnn_config *c) { return c->use_bias ? 3 : 2; }

typedef struct rnn_dims {
  int64_t n, steps, features, units, gates;
} rnn_dims;

static rnn_dims dims_of(const mxu_layer *layer, int64_t batch) {
  const mxu_rnn_config *c = rnn_of(layer);
  return (rnn_dims){batch, layer->in_shape.dims[0], layer->in_shape.dims[1],
                    c->units, gates_of(c->kind)};
}

/* Positions of the output: every step's, or the last one's. */
static int64_t positions_of(const mxu_layer *layer) {
  return rnn_of(layer)->return_sequences ? layer->in_shape.dims[0] : 1;
}

/* The width of an output position: a Bidirectional's concatenation
 * holds both directions'. */
static int64_t width_of(const mxu_layer *layer) {
  int both = is_bidirectional(layer) &&
             layer->config.bidirectional.merge == MXU_MERGE_CONCATENATE;
  return rnn_of(layer)->units * (both ? 2 : 1);
}

/* The states a direction carries with return_state (0 without). */
static int64_t returned_states(const mxu_layer *layer) {
  const mxu_rnn_config *c = rnn_of(layer);
  return c->return_state ? states_of(c->kind) : 0;
}

/* With return_state a sample's output holds the layer's output, then each
 * direction's final states (h, LSTM's c), `units` each: where direction
 * dir's state k starts, and the floats of the whole. */
static int64_t state_offset(const mxu_layer *layer, int dir, int64_t k) {
  return positions_of(layer) * width_of(layer) +
         (dir * returned_states(layer) + k) * rnn_of(layer)->units;
}

static int64_t sample_floats(const mxu_layer *layer) {
  return state_offset(layer, directions_of(layer), 0);
}

/* Initial states, when given, are inputs 1.. (Keras' initial_state): one
 * (units) each, h and LSTM's c, a Bidirectional's forward ones first. */
static mxu_status check_states(const mxu_layer *layer) {
  const mxu_rnn_config *c = rnn_of(layer);
  int given = layer->input_count - 1;
  int want = states_of(c->kind) * directions_of(layer);
  if (given && given != want)
    return mxu_fail(
        MXU_ERR_SHAPE, "%s: initial_state must give %d states (h%s%s), got %d",
        layer->name, want, c->kind == MXU_LSTM ? " and c" : "",
        is_bidirectional(layer) ? " forwards, then backwards" : "", given);
  for (int k = 1; k < layer->input_count; k++)
    if (layer->in_shapes[k].rank != 1 ||
        layer->in_shapes[k].dims[0] != c->units) {
      char text[64];
      mxu_shape_format(&layer->in_shapes[k], text, sizeof text);
      return mxu_fail(MXU_ERR_SHAPE,
                      "%s: initial state %d is %s; the layer's states are "
                      "(%d)",
                      layer->name, k - 1, text, c->units);
    }
  return MXU_OK;
}

static mxu_merge_kind merge_of(const mxu_layer *layer) {
  return is_bidirectional(layer) ? layer->config.bidirectional.merge
                                 : MXU_MERGE_CONCATENATE;
}

static mxu_status rnn_infer(mxu_layer *layer) {
  const mxu_rnn_config *c = rnn_of(layer);
  char text[64];
  mxu_shape_format(&layer->in_shape, text, sizeof text);
  if (layer->in_shape.rank != 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: expects (steps, features) input, got %s", layer->name,
                    text);
  if (c->units <= 0 || c->units > (1 << 20))
    return mxu_fail(MXU_ERR_ARG, "%s: units %d must be in 1..%d", layer->name,
                    c->units, 1 << 20);
  if (c->reset_before && c->kind != MXU_GRU)
    return mxu_fail(MXU_ERR_ARG, "%s: reset_before is a GRU's option",
                    layer->name);
  if (!mxu_rnn_activation_supported(c->activation) ||
      !mxu_rnn_activation_supported(c->recurrent_activation))
    return mxu_fail(
        MXU_ERR_UNSUPPORTED,
        "%s: a recurrent cell's activation and recurrent_activation "
        "must be tanh, sigmoid, hard_sigmoid, relu or linear",
        layer->name);
  if (!(c->dropout >= 0.0f && c->dropout < 1.0f) ||
      !(c->recurrent_dropout >= 0.0f && c->recurrent_dropout < 1.0f))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: dropout %g and recurrent_dropout %g must be in "
                    "[0, 1)",
                    layer->name, (double)c->dropout,
                    (double)c->recurrent_dropout);
  mxu_merge_kind merge = merge_of(layer);
  if (merge != MXU_MERGE_CONCATENATE && merge != MXU_MERGE_ADD &&
      merge != MXU_MERGE_MULTIPLY && merge != MXU_MERGE_AVERAGE)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: merge_mode must be concat, sum, mul or ave",
                    layer->name);
  MXU_TRY(check_states(layer));
  int64_t dims[2] = {layer->in_shape.dims[0], width_of(layer)};
  layer->out_shape = c->return_sequences ? mxu_shape_make(2, dims)
                                         : mxu_shape_make(1, &dims[1]);
  /* return_state: the output, then the states, flat (rnn_parts). */
  int64_t whole = sample_floats(layer);
  if (c->return_state) layer->out_shape = mxu_shape_make(1, &whole);
  return MXU_OK;
}

/* Its outputs with return_state: the output, then each direction's final
 * states. */
static int rnn_parts(const mxu_layer *layer, mxu_shape *shapes) {
  const mxu_rnn_config *c = rnn_of(layer);
  if (!c->return_state) return 1;
  int64_t dims[2] = {layer->in_shape.dims[0], width_of(layer)};
  int64_t units = c->units;
  int count = 1 + (int)(states_of(c->kind) * directions_of(layer));
  for (int k = 0; shapes && k < count; k++)
    shapes[k] = k > 0                 ? mxu_shape_make(1, &units)
                : c->return_sequences ? mxu_shape_make(2, dims)
                                      : mxu_shape_make(1, &dims[1]);
  return count;
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
  const mxu_rnn_config *c = rnn_of(layer);
  rnn_dims d = dims_of(layer, 1);
  int per = weights_per(c);
  int64_t kernel[2] = {d.features, d.gates * d.units};
  int64_t recurrent[2] = {d.units, d.gates * d.units};
  int64_t bias[2] = {2, d.gates * d.units};
  for (int dir = 0; dir < directions_of(layer); dir++) {
    const char *names[3];
    for (int k = 0; k < 3; k++)
      names[k] = is_bidirectional(layer)
                     ? layer->config.bidirectional.names[dir * 3 + k]
                     : weight_names[c->kind][k];
    mxu_param_decl *w = decls + dir * per;
    w[0] = mxu_weight_decl(names[0], mxu_shape_make(2, kernel), &c->kernel,
                           mxu_init_glorot_uniform());
    w[1] = mxu_weight_decl(names[1], mxu_shape_make(2, recurrent),
                           &c->recurrent, orthogonal());
    if (!c->use_bias) continue;
    w[2] = mxu_weight_decl(names[2],
                           two_biases(c) ? mxu_shape_make(2, bias)
                                         : mxu_shape_make(1, &bias[1]),
                           &c->bias, mxu_init_zeros());
    if (c->kind == MXU_LSTM && c->unit_forget_bias) {
      w[2].ones_first = d.units;
      w[2].ones_count = d.units;
    }
  }
  return per * directions_of(layer);
}

/* Per sample and direction: the products forward (input and recurrent),
 * twice that backward, and some ten float ops per gate value each way. */
static double rnn_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  rnn_dims d = dims_of(layer, 1);
  double width = (double)d.gates * d.units;
  double products = 2.0 * d.steps * (d.features + d.units) * width;
  double gates = 10.0 * d.steps * width;
  double backward = products * (step->need_dx ? 2.0 : 1.5) + gates;
  return (products + gates + backward) * directions_of(layer);
}

/* ---- the plan ------------------------------------------------------------
 * Direction k has ops 6k .. 6k + 5: the input projection, a step's
 * recurrent product, the recurrent kernel's gradient over every step, and
 * the same three for one gate (recurrent_dropout's per-gate products, and
 * the candidate's product of a GRU whose reset gate comes before it);
 * scratch[2k] what backward reads of its forward pass and scratch[2k + 1]
 * its steps' work; a Bidirectional's second work buffer also holds the
 * two directions' output gradients and the second's input gradient. */

enum { OPS_PER_DIRECTION = 6 };

/* In training, the masks a direction draws per sample: for the inputs
 * (dropout) one, or with recurrent_dropout one per gate (Keras'
 * implementation 1); for h (recurrent_dropout) one per gate. */
typedef struct rnn_masks {
  int in, rec;
} rnn_masks;

static rnn_masks masks_of(const mxu_rnn_config *c, int training) {
  rnn_masks m = {0, 0};
  int per_gate = c->recurrent_dropout > 0.0f;
  if (training && c->dropout > 0.0f) m.in = per_gate ? gates_of(c->kind) : 1;
  if (training && per_gate) m.rec = gates_of(c->kind);
  return m;
}

/* A sample's draws for one direction: its input masks', then h's. */
static int64_t draws_per(const rnn_dims *d, rnn_masks m) {
  return m.in * d->features + m.rec * d->units;
}

/* Whether the input side runs gate by gate (a mask per gate). */
static int gate_inputs(rnn_masks m) { return m.in > 1; }

typedef struct rnn_buffers {
  float *mask;      /* dropout: (n, masks.in, features): 0 or 1/(1 - rate) */
  float *dropped;   /* dropout: per input mask, (n, steps) rows: x * mask */
  float *rec_mask;  /* recurrent_dropout: (n, gates, units) */
  float *masked;    /* per gate, (step, n) rows: the previous h * mask */
  float *gate_w;    /* per gate, its (features, units) columns of W */
  float *gate_u;    /* per gate, its (units, units) columns of U */
  float *projected; /* (n, steps) rows of g * units: x W + b */
  float *gates;     /* (step, n) rows of g * units, activated */
  float *hs;        /* the initial h, then (step, n) rows of units */
  float *cells;     /* LSTM: (step, n) rows of units */
  float *candidate; /* GRU: (step, n) rows of units: h U_h + b_h, or the
                     * r * h its reset_before multiplies by U_h */
  float *c0;        /* LSTM: the initial cell state, (n, units) */
  float *zeros;     /* units zeros: a skipped step's zeroed output */
  float *recurrent; /* a step's (n, g * units): h U */
  float *d_input;   /* (n, steps) rows of g * units: the input side's */
  float *d_rec;     /* (step, n) rows of g * units: the recurrent side's */
  float *dh, *dc;   /* (n, units): into the step before */
  float *part;      /* per-gate products: (n, steps) rows of units */
  float *d_weight;  /* a gate's weight gradient: (features or units, units) */
  float *d_part;    /* a gate's input gradient: (n, steps) rows of features */
  float *cell_tmp;  /* cell_backward's 2 * units */
  float *extra;     /* a Bidirectional's second direction: dy, dy, dx */
} rnn_buffers;

/* The floats of each buffer, in buffers_of's order: the forward pass's
 * (the first `kept`), then the steps' work. */
enum { RNN_BUFFERS = 22, KEPT_BUFFERS = 13 };

/* Gate by gate: the recurrent products with recurrent_dropout's masks,
 * and a GRU's candidate product when its reset gate comes before. */
static int by_gate(const mxu_rnn_config *c, rnn_masks m) {
  return m.rec > 0 || resets_before(c);
}

static void buffer_sizes(const mxu_rnn_config *c, const rnn_dims *d,
                         rnn_masks m, int64_t *size) {
  int64_t rows = d->n * d->steps, u = d->units, f = d->features;
  int64_t values = rows * u, g = d->gates, per_gate = by_gate(c, m);
  int64_t in_gates = gate_inputs(m) ? g : 0;
  int64_t sizes[RNN_BUFFERS] = {d->n * m.in * f,                /* mask */
                                m.in * rows * f,                /* dropped */
                                d->n * m.rec * u,               /* rec_mask */
                                m.rec * values,                 /* masked */
                                in_gates * f * u,               /* gate_w */
                                per_gate * g * u * u,           /* gate_u */
                                values * g,                     /* projected */
                                values * g,                     /* gates */
                                values + d->n * u,              /* hs */
                                values,                         /* cells */
                                values,                         /* candidate */
                                d->n * u,                       /* c0 */
                                u,                              /* zeros */
                                d->n * u * g,                   /* recurrent */
                                values * g,                     /* d_input */
                                values * g,                     /* d_rec */
                                d->n * u,                       /* dh */
                                d->n * u,                       /* dc */
                                per_gate * values,              /* part */
                                per_gate * (f > u ? f : u) * u, /* d_weight */
                                in_gates * rows * f,            /* d_part */
                                2 * u};                         /* cell_tmp */
  memcpy(size, sizes, sizeof sizes);
}

static size_t sum_floats(const int64_t *size, int first, int last) {
  int64_t sum = 0;
  for (int i = first; i < last; i++) sum += size[i];
  return (size_t)sum;
}

static size_t extra_floats(const rnn_dims *d) {
  return (size_t)(d->n * d->steps * (2 * d->units + d->features));
}

static rnn_buffers buffers_of(const mxu_layer *layer, const mxu_layer_run *run,
                              int dir) {
  rnn_dims d = dims_of(layer, layer->compiled->batch);
  int64_t size[RNN_BUFFERS];
  buffer_sizes(rnn_of(layer), &d, masks_of(rnn_of(layer), 1), size);
  const size_t *scratch = layer->compiled->scratch + 2 * dir;
  rnn_buffers b;
  float **slot[RNN_BUFFERS + 1] = {
      &b.mask,      &b.dropped,   &b.rec_mask, &b.masked,    &b.gate_w,
      &b.gate_u,    &b.projected, &b.gates,    &b.hs,        &b.cells,
      &b.candidate, &b.c0,        &b.zeros,    &b.recurrent, &b.d_input,
      &b.d_rec,     &b.dh,        &b.dc,       &b.part,      &b.d_weight,
      &b.d_part,    &b.cell_tmp,  &b.extra};
  float *at = (float *)(void *)(run->arena + scratch[0]);
  for (int i = 0; i <= RNN_BUFFERS; i++) {
    if (i == KEPT_BUFFERS) at = (float *)(void *)(run->arena + scratch[1]);
    *slot[i] = at;
    if (i < RNN_BUFFERS) at += size[i];
  }
  return b;
}

static mxu_status rnn_plan(mxu_layer *layer, const mxu_backend *backend,
                           int batch, mxu_arena *layout) {
  const mxu_rnn_config *c = rnn_of(layer);
  rnn_dims d = dims_of(layer, batch);
  int rows = (int)(d.n * d.steps), u = (int)d.units, f = (int)d.features;
  int width = (int)d.gates * u, gru_bias = two_biases(c);
  /* The all-steps ops' bias gradient is GRU's recurrent bias's: every
   * d_rec row summed. */
  mxu_dense_desc descs[OPS_PER_DIRECTION] = {
      {rows, f, width, c->use_bias, MXU_LINEAR, 0},
      {(int)d.n, u, width, 0, MXU_LINEAR, 0},
      {rows, u, width, gru_bias, MXU_LINEAR, 0},
      {rows, f, u, c->use_bias, MXU_LINEAR, 0},
      {(int)d.n, u, u, 0, MXU_LINEAR, 0},
      {rows, u, u, gru_bias, MXU_LINEAR, 0}};
  int64_t size[RNN_BUFFERS];
  buffer_sizes(c, &d, masks_of(c, 1), size);
  int ops = by_gate(c, masks_of(c, 1)) ? OPS_PER_DIRECTION : 3;
  for (int dir = 0; dir < directions_of(layer); dir++) {
    mxu_op **op = layer->compiled->ops + OPS_PER_DIRECTION * dir;
    for (int k = 0; k < ops; k++)
      MXU_TRY(backend->dense_create(&descs[k], &op[k]));
    size_t work = sum_floats(size, KEPT_BUFFERS, RNN_BUFFERS) +
                  (dir ? extra_floats(&d) : 0);
    layer->compiled->scratch[2 * dir] = mxu_arena_reserve(
        layout, sum_floats(size, 0, KEPT_BUFFERS) * sizeof(float));
    layer->compiled->scratch[2 * dir + 1] =
        mxu_arena_reserve(layout, work * sizeof(float));
  }
  return MXU_OK;
}

/* One direction as it runs (dir 1: a Bidirectional's backward copy):
 * its weights, ops and buffers; it reads the steps last to first when
 * go_backwards. */
typedef struct rnn_unit {
  const mxu_rnn_config *c;
  rnn_dims d;
  int dir, directions;
  int go_backwards;
  rnn_masks masks;  /* this run's */
  const float *ids; /* an Embedding's mask's ids (n, steps), or NULL */
  /* The initial states (initial_state), NULL for zeros; their gradients'
   * buffers, NULL when not needed. */
  const float *h0, *c0;
  float *dh0, *dc0;
  /* The floats of a sample in the output gradient it reads (the layer's,
   * or a Bidirectional direction's own), and of the layer's, where its
   * final states' gradients are, from `states` on. */
  int64_t stride, whole, states;
  mxu_op *const *ops;
  float *const *w, *const *dw;
  rnn_buffers b;
} rnn_unit;

static rnn_unit unit_of(const mxu_layer *layer, const mxu_layer_run *run,
                        int dir) {
  const mxu_rnn_config *c = rnn_of(layer);
  int per = weights_per(c), lstm = c->kind == MXU_LSTM;
  int given = layer->input_count > 1, first = 1 + dir * states_of(c->kind);
  return (rnn_unit){
      c,
      dims_of(layer, layer->compiled->batch),
      dir,
      directions_of(layer),
      c->go_backwards != dir,
      masks_of(c, run->training),
      run->mask_ids,
      given ? run->xs[first] : NULL,
      given && lstm ? run->xs[first + 1] : NULL,
      given && run->need_dxs[first] ? run->dxs[first] : NULL,
      given && lstm && run->need_dxs[first + 1] ? run->dxs[first + 1] : NULL,
      is_bidirectional(layer) ? positions_of(layer) * c->units
                              : sample_floats(layer),
      sample_floats(layer),
      state_offset(layer, dir, 0),
      run->ops + OPS_PER_DIRECTION * dir,
      run->w + per * dir,
      run->dw + per * dir,
      buffers_of(layer, run, dir)};
}

static int64_t input_step(const rnn_unit *u, int64_t s) {
  return u->go_backwards ? u->d.steps - 1 - s : s;
}

/* Whether an Embedding's mask skips input step t of row n: the state
 * carries over it, as Keras' (its output is the step before's). */
static int skipped(const rnn_unit *u, int64_t n, int64_t t) {
  return u->ids && u->ids[n * u->d.steps + t] == 0.0f;
}

/* Whether step s's output for row n is zeros: skipped, where the layer
 * zeroes a skipped step's output (zero_output_for_mask). */
static int zeroed(const rnn_unit *u, int64_t n, int64_t s) {
  return u->c->zero_output_for_mask && skipped(u, n, input_step(u, s));
}

/* Where step s's output stands in a returned sequence: in step order, but
 * a Bidirectional's backward copy's, which Keras reverses back (so this
 * maps a position to its step too). */
static int64_t position_of(const rnn_unit *u, int64_t s) {
  return u->dir ? u->d.steps - 1 - s : s;
}

/* The unit's output at position p (the last step's without sequences) for
 * batch row n. */
static const float *output_at(const rnn_unit *u, int64_t p, int64_t n) {
  int64_t s = u->c->return_sequences ? position_of(u, p) : u->d.steps - 1;
  if (zeroed(u, n, s)) return u->b.zeros;
  return u->b.hs + ((s + 1) * u->d.n + n) * u->d.units;
}

/* Row n's final state k: h after the last step, LSTM's c. */
static const float *final_state(const rnn_unit *u, int k, int64_t n) {
  int64_t row = u->d.n * u->d.units, s = u->d.steps;
  return k ? u->b.cells + (s - 1) * row + n * u->d.units
           : u->b.hs + s * row + n * u->d.units;
}

/* ---- forward ------------------------------------------------------------ */

/* One step's gates and state for batch row n: p the input projection, r
 * the recurrent one (NULL at step 0), h_prev and c_prev the states before;
 * writes the activated gates, h (and LSTM's c, GRU's candidate term). */
static void cell_forward(const mxu_rnn_config *c, int64_t u, const float *p,
                         const float *r, const float *rec_bias,
                         const float *h_prev, const float *c_prev, float *gates,
                         float *h, float *cell, float *candidate) {
  mxu_activation act = c->activation, rec = c->recurrent_activation;
  int64_t j, width = u * gates_of(c->kind);
  if (c->kind != MXU_GRU) {
    memcpy(gates, p, (size_t)width * sizeof(float));
    if (r) add_all(r, gates, width);
  }
  if (c->kind == MXU_SIMPLE_RNN) {
    mxu_rnn_activate(act, gates, gates, u);
    memcpy(h, gates, (size_t)u * sizeof(float));
    return;
  }
  if (c->kind == MXU_LSTM) {
    mxu_lstm_cell_forward(act, rec, u, gates, c_prev, cell, h);
    return;
  }
  /* GRU, reset_after: the reset gate scales h U_h + b_h, the candidate
   * term; z and the reset gate see p + (h U + b_h). */
  float *z = gates, *reset = gates + u, *k = gates + 2 * u;
  if (r) {
    memcpy(gates, r, (size_t)(2 * u) * sizeof(float));
    memcpy(candidate, r + 2 * u, (size_t)u * sizeof(float));
  } else {
    memset(gates, 0, (size_t)(2 * u) * sizeof(float));
    memset(candidate, 0, (size_t)u * sizeof(float));
  }
  if (rec_bias) {
    add_all(rec_bias, gates, 2 * u);
    add_all(rec_bias + 2 * u, candidate, u);
  }
  for (j = 0; j < 2 * u; j++) gates[j] = p[j] + gates[j];
  mxu_rnn_activate(rec, gates, gates, 2 * u);
  for (j = 0; j < u; j++) k[j] = p[2 * u + j] + reset[j] * candidate[j];
  mxu_rnn_activate(act, k, k, u);
  for (j = 0; j < u; j++) h[j] = z[j] * h_prev[j] + (1.0f - z[j]) * k[j];
}

/* GRU's recurrent half of its (2, 3 units) bias. */
static const float *recurrent_bias(const rnn_unit *u) {
  return two_biases(u->c) ? u->w[2] + u->d.gates * u->d.units : NULL;
}

/* The masks, drawn per row of the logical replica (row_offset on) and
 * direction, so a sample's are the same in any slicing and on pjrt
 * (rnn_emit): its input masks', then h's (draws_per); then every step's
 * features times each input mask. */
static void draw_masks(const rnn_unit *u, const mxu_layer_run *run,
                       const float *x) {
  const rnn_dims *d = &u->d;
  const rnn_masks m = u->masks;
  int64_t per = draws_per(d, m), f = d->features, rows = d->n * d->steps;
  float rates[2] = {u->c->dropout, u->c->recurrent_dropout};
  for (int64_t n = 0; n < d->n; n++) {
    float *in = u->b.mask + n * m.in * f,
          *rec = u->b.rec_mask + n * m.rec * d->units;
    uint64_t first =
        (uint64_t)(((run->row_offset + n) * u->directions + u->dir) * per);
    mxu_rng_uniform4(&run->rng, first, in, (size_t)(m.in * f));
    mxu_rng_uniform4(&run->rng, first + (uint64_t)(m.in * f), rec,
                     (size_t)(m.rec * d->units));
    for (int k = 0; k < 2; k++) {
      float *v = k ? rec : in, keep = 1.0f / (1.0f - rates[k]);
      int64_t count = k ? m.rec * d->units : m.in * f;
      for (int64_t j = 0; j < count; j++) v[j] = v[j] >= rates[k] ? keep : 0;
    }
    for (int g = 0; g < m.in; g++)
      for (int64_t t = 0; t < d->steps; t++) {
        const float *from = x + (n * d->steps + t) * f;
        float *to = u->b.dropped + g * rows * f + (n * d->steps + t) * f;
        for (int64_t j = 0; j < f; j++) to[j] = from[j] * in[g * f + j];
      }
  }
}

/* Columns [g * units, (g + 1) * units) of each of `rows` rows of `width`
 * floats, into part (rows, units); put_columns writes them back. */
static void take_columns(const float *wide, int64_t rows, int64_t width, int g,
                         int64_t units, float *part) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(part + r * units, wide + r * width + g * units,
           (size_t)units * sizeof(float));
}

static void put_columns(float *wide, int64_t rows, int64_t width, int g,
                        int64_t units, const float *part) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(wide + r * width + g * units, part + r * units,
           (size_t)units * sizeof(float));
}

/* The input projection: x W + b in one product, or with a mask per gate
 * gate by gate into its columns. */
static void project_inputs(const rnn_unit *u, const mxu_backend *be,
                           const float *x) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t rows = d->n * d->steps, width = d->gates * d->units;
  const float *bias = u->c->use_bias ? u->w[2] : NULL;
  if (!gate_inputs(u->masks)) {
    be->dense_forward(u->ops[0], u->masks.in ? b->dropped : x, u->w[0], bias,
                      b->projected);
    return;
  }
  for (int g = 0; g < d->gates; g++) {
    float *w = b->gate_w + g * d->features * d->units;
    take_columns(u->w[0], d->features, width, g, d->units, w);
    be->dense_forward(u->ops[3], b->dropped + g * rows * d->features, w,
                      bias ? bias + g * d->units : NULL, b->part);
    put_columns(b->projected, rows, width, g, d->units, b->part);
  }
}

/* Step s's recurrent product into b->recurrent: h U, or with
 * recurrent_dropout (h * mask_g) U_g gate by gate, each masked h kept. */
static void project_state(const rnn_unit *u, const mxu_backend *be, int64_t s) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, row = d->n * units, width = d->gates * units;
  const float *h = b->hs + s * row;
  if (!u->masks.rec) { /* reset_before's h U_h is not read */
    be->dense_forward(u->ops[1], h, u->w[1], NULL, b->recurrent);
    return;
  }
  /* reset_before's candidate product waits for its reset gate. */
  for (int g = 0; g < d->gates - resets_before(u->c); g++) {
    float *masked = b->masked + (g * d->steps + s) * row;
    for (int64_t n = 0; n < d->n; n++)
      for (int64_t j = 0; j < units; j++)
        masked[n * units + j] =
            h[n * units + j] * b->rec_mask[(n * d->gates + g) * units + j];
    be->dense_forward(u->ops[4], masked, b->gate_u + g * units * units, NULL,
                      b->part);
    put_columns(b->recurrent, d->n, width, g, units, b->part);
  }
}

/* The recurrent-dropout mask of gate g for row n, or NULL. */
static const float *rec_mask_of(const rnn_unit *u, int64_t n, int g) {
  return u->masks.rec ? u->b.rec_mask + (n * u->d.gates + g) * u->d.units
                      : NULL;
}

/* Step s of a GRU whose reset gate comes before U_h, every row: z and r
 * from p + h U; then h_c = r * h (h times the candidate's recurrent
 * dropout mask), kept in `candidate`, times U_h in one product over the
 * rows; then the candidate and h. */
static void gru_before_forward(const rnn_unit *u, const mxu_backend *be,
                               int64_t s, int recurrent) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, width = 3 * units, row = d->n * units;
  int64_t t = input_step(u, s);
  const float *h_prev = b->hs + s * row;
  float *rh = b->candidate + s * row, *h = b->hs + (s + 1) * row;
  for (int64_t n = 0; n < d->n; n++) {
    const float *p = b->projected + (n * d->steps + t) * width;
    const float *hp = h_prev + n * units, *m = rec_mask_of(u, n, 2);
    float *gates = b->gates + (s * d->n + n) * width;
    for (int64_t j = 0; j < 2 * units; j++)
      gates[j] = p[j] + (recurrent ? b->recurrent[n * width + j] : 0.0f);
    mxu_rnn_activate(u->c->recurrent_activation, gates, gates, 2 * units);
    for (int64_t j = 0; j < units; j++)
      rh[n * units + j] = skipped(u, n, t)
                              ? 0.0f
                              : gates[units + j] * hp[j] * (m ? m[j] : 1.0f);
  }
  if (recurrent)
    be->dense_forward(u->ops[4], rh, b->gate_u + 2 * units * units, NULL,
                      b->part);
  for (int64_t n = 0; n < d->n; n++) {
    const float *p = b->projected + (n * d->steps + t) * width;
    const float *hp = h_prev + n * units;
    float *z = b->gates + (s * d->n + n) * width, *k = z + 2 * units;
    float *out = h + n * units;
    if (skipped(u, n, t)) {
      memcpy(out, hp, (size_t)units * sizeof(float));
      continue;
    }
    for (int64_t j = 0; j < units; j++)
      k[j] = p[2 * units + j] + (recurrent ? b->part[n * units + j] : 0.0f);
    mxu_rnn_activate(u->c->activation, k, k, units);
    for (int64_t j = 0; j < units; j++)
      out[j] = z[j] * hp[j] + (1.0f - z[j]) * k[j];
  }
}

static void unit_forward(const rnn_unit *u, const mxu_layer_run *run) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  const mxu_backend *be = run->backend;
  int64_t units = d->units, width = d->gates * units, row = d->n * units;
  if (u->masks.in || u->masks.rec) draw_masks(u, run, run->x);
  project_inputs(u, be, run->x);
  for (int g = 0; by_gate(u->c, u->masks) && g < d->gates; g++)
    take_columns(u->w[1], units, width, g, units,
                 b->gate_u + g * units * units);
  for (int g = 0; u->masks.rec && g < d->gates; g++)
    memset(b->masked + g * d->steps * row, 0, (size_t)row * sizeof(float));
  const float *rec_bias = recurrent_bias(u);
  size_t state_bytes = (size_t)row * sizeof(float);
  if (u->h0)
    memcpy(b->hs, u->h0, state_bytes);
  else
    memset(b->hs, 0, state_bytes);
  if (u->c0)
    memcpy(b->c0, u->c0, state_bytes);
  else
    memset(b->c0, 0, state_bytes);
  memset(b->zeros, 0, (size_t)units * sizeof(float));
  for (int64_t s = 0; s < d->steps; s++) {
    const float *h_prev = b->hs + s * row;
    /* A zero h0 has no recurrent product. */
    int recurrent = s || u->h0;
    if (recurrent) project_state(u, be, s);
    if (resets_before(u->c)) {
      gru_before_forward(u, be, s, recurrent);
      continue;
    }
    int64_t t = input_step(u, s);
    for (int64_t n = 0; n < d->n; n++) {
      const float *c_prev =
          s ? b->cells + (s - 1) * row + n * units : b->c0 + n * units;
      if (skipped(u, n, t)) {
        size_t bytes = (size_t)units * sizeof(float);
        memcpy(b->hs + (s + 1) * row + n * units, h_prev + n * units, bytes);
        memcpy(b->cells + s * row + n * units, c_prev, bytes);
        continue;
      }
      cell_forward(
          u->c, units, b->projected + (n * d->steps + t) * width,
          recurrent ? b->recurrent + n * width : NULL, rec_bias,
          h_prev + n * units, c_prev, b->gates + (s * d->n + n) * width,
          b->hs + (s + 1) * row + n * units, b->cells + s * row + n * units,
          b->candidate + s * row + n * units);
    }
  }
}

/* The outputs merged, position by position: one direction's as they are;
 * a Bidirectional's concatenated, summed, multiplied or averaged. */
static void rnn_forward(mxu_layer *layer, const mxu_layer_run *run) {
  rnn_unit units[2];
  int count = directions_of(layer);
  for (int dir = 0; dir < count; dir++) {
    units[dir] = unit_of(layer, run, dir);
    unit_forward(&units[dir], run);
  }
  const rnn_dims *d = &units[0].d;
  int64_t positions = positions_of(layer), whole = sample_floats(layer);
  int64_t u = d->units, width = width_of(layer);
  mxu_merge_kind merge = merge_of(layer);
  for (int dir = 0; dir < count; dir++)
    for (int64_t n = 0; n < d->n; n++)
      for (int64_t k = 0; k < returned_states(layer); k++)
        memcpy(run->y + n * whole + state_offset(layer, dir, k),
               final_state(&units[dir], (int)k, n), (size_t)u * sizeof(float));
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t p = 0; p < positions; p++) {
      float *y = run->y + n * whole + p * width;
      const float *a = output_at(&units[0], p, n);
      const float *b = count > 1 ? output_at(&units[1], p, n) : NULL;
      for (int64_t j = 0; j < u; j++) {
        if (!b || merge == MXU_MERGE_CONCATENATE) {
          y[j] = a[j];
          if (b) y[u + j] = b[j];
        } else {
          y[j] = merge == MXU_MERGE_ADD        ? a[j] + b[j]
                 : merge == MXU_MERGE_MULTIPLY ? a[j] * b[j]
                                               : (a[j] + b[j]) * 0.5f;
        }
      }
    }
}

/* ---- backward ----------------------------------------------------------- */

/* One step's gradients for batch row n: dh the output's (the layer's and
 * the next step's), left as the previous h's direct term (GRU's z; 0
 * else); dc LSTM's cell gradient from the next step, left as the previous
 * cell's. Writes the input side's and the recurrent side's pre-activation
 * gradients, each gate's slope first in d_input; tmp: 2 * u floats. */
static void cell_backward(const mxu_rnn_config *c, int64_t u,
                          const float *gates, const float *h_prev,
                          const float *c_prev, const float *cell,
                          const float *candidate, float *dh, float *dc,
                          float *d_input, float *d_rec, float *tmp) {
  mxu_activation act = c->activation, rec = c->recurrent_activation;
  int64_t j;
  if (c->kind == MXU_SIMPLE_RNN) {
    mxu_rnn_slope(act, gates, d_input, u);
    for (j = 0; j < u; j++) {
      d_rec[j] = d_input[j] *= dh[j];
      dh[j] = 0.0f;
    }
    return;
  }
  if (c->kind == MXU_LSTM) {
    mxu_lstm_cell_backward(act, rec, u, gates, c_prev, cell, dh, dc, d_input,
                           tmp);
    memcpy(d_rec, d_input, (size_t)(4 * u) * sizeof(float));
    memset(dh, 0, (size_t)u * sizeof(float));
    return;
  }
  const float *z = gates, *reset = gates + u, *k = gates + 2 * u;
  mxu_rnn_slope(rec, z, d_input, 2 * u);
  mxu_rnn_slope(act, k, d_input + 2 * u, u);
  for (j = 0; j < u; j++) {
    float dk = dh[j] * (1.0f - z[j]) * d_input[2 * u + j];
    float dz = dh[j] * (h_prev[j] - k[j]) * d_input[j];
    d_input[j] = d_rec[j] = dz;
    d_input[2 * u + j] = dk;
    dh[j] *= z[j];
    if (c->reset_before) { /* r's slope stays, for gru_before_backward */
      d_rec[2 * u + j] = dk;
      continue;
    }
    d_input[u + j] = d_rec[u + j] = dk * candidate[j] * d_input[u + j];
    d_rec[2 * u + j] = dk * reset[j];
  }
}

/* The gradient of the unit's output at step s for row n, into dh (added):
 * dy holds the unit's own outputs' gradients, position by position. */
static void add_output_gradient(const rnn_unit *u, const float *dy, int64_t s,
                                int64_t n, float *dh) {
  const rnn_dims *d = &u->d;
  const float *g = NULL;
  if (zeroed(u, n, s)) return;
  if (u->c->return_sequences)
    g = dy + n * u->stride + position_of(u, s) * d->units;
  else if (s == d->steps - 1)
    g = dy + n * u->stride;
  for (int64_t j = 0; g && j < d->units; j++) dh[j] += g[j];
}

/* The previous h's gradient from step s's recurrent side, added to dh:
 * d_rec U^T, or gate by gate (d_rec_g U_g^T) * mask_g; a reset_before
 * GRU's candidate went through r * h (gru_before_backward). */
static void state_gradient(const rnn_unit *u, const mxu_backend *be,
                           const float *d_rec) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, row = d->n * units, width = d->gates * units;
  if (!by_gate(u->c, u->masks)) {
    be->dense_backward_data(u->ops[1], d_rec, u->w[1], b->recurrent);
    for (int64_t i = 0; i < row; i++) b->dh[i] += b->recurrent[i];
    return;
  }
  for (int g = 0; g < d->gates - resets_before(u->c); g++) {
    take_columns(d_rec, d->n, width, g, units, b->part);
    be->dense_backward_data(u->ops[4], b->part, b->gate_u + g * units * units,
                            b->recurrent);
    for (int64_t n = 0; n < d->n; n++) {
      const float *m = rec_mask_of(u, n, g);
      for (int64_t j = 0; j < units; j++)
        b->dh[n * units + j] += b->recurrent[n * units + j] * (m ? m[j] : 1.0f);
    }
  }
}

/* A reset_before GRU's step s after cell_backward's per-row part (dz, dk
 * and r's slope in d_input): the gradient of h_c = r * h through U_h, in
 * one product over the rows, into r's gate gradient and the previous h's
 * (dh). Without a recurrent product (s = 0 from zeros), r had none. */
static void gru_before_backward(const rnn_unit *u, const mxu_backend *be,
                                int64_t s, int recurrent) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, width = 3 * units, row = d->n * units;
  int64_t t = input_step(u, s);
  float *d_rec = b->d_rec + s * d->n * width;
  if (recurrent) {
    take_columns(d_rec, d->n, width, 2, units, b->part);
    be->dense_backward_data(u->ops[4], b->part, b->gate_u + 2 * units * units,
                            b->recurrent);
  }
  for (int64_t n = 0; n < d->n; n++) {
    if (skipped(u, n, t)) continue;
    const float *hp = b->hs + s * row + n * units, *m = rec_mask_of(u, n, 2);
    const float *reset = b->gates + (s * d->n + n) * width + units;
    float *dr = b->d_input + (n * d->steps + t) * width + units;
    for (int64_t j = 0; j < units; j++) {
      float g =
          recurrent ? b->recurrent[n * units + j] * (m ? m[j] : 1.0f) : 0.0f;
      dr[j] *= g * hp[j];
      d_rec[n * width + units + j] = dr[j];
      b->dh[n * units + j] += g * reset[j];
    }
  }
}

/* The weights' gradients after the steps: W's (and the bias's) from the
 * input side, U's (and GRU's recurrent bias's) from every step's
 * recurrent side; gate by gate into their columns where masked so. */
static void weight_gradients(const rnn_unit *u, const mxu_backend *be,
                             const float *x) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, rows = d->n * d->steps, width = d->gates * units;
  float *db = u->c->use_bias ? u->dw[2] : NULL;
  float *db_rec = recurrent_bias(u) ? u->dw[2] + width : NULL;
  if (!gate_inputs(u->masks)) {
    be->dense_backward_weights(u->ops[0], u->masks.in ? b->dropped : x,
                               b->d_input, u->dw[0], db);
  } else {
    for (int g = 0; g < d->gates; g++) {
      take_columns(b->d_input, rows, width, g, units, b->part);
      be->dense_backward_weights(u->ops[3], b->dropped + g * rows * d->features,
                                 b->part, b->d_weight,
                                 db ? db + g * units : NULL);
      put_columns(u->dw[0], d->features, width, g, units, b->d_weight);
    }
  }
  /* A reset_before GRU's U_h multiplied r * h, kept in `candidate`. */
  int first = 0, before = resets_before(u->c);
  if (!u->masks.rec) {
    be->dense_backward_weights(u->ops[2], b->hs, b->d_rec, u->dw[1], db_rec);
    first = before ? 2 : d->gates;
  }
  for (int g = first; g < d->gates; g++) {
    const float *h =
        before && g == 2 ? b->candidate : b->masked + g * rows * units;
    take_columns(b->d_rec, rows, width, g, units, b->part);
    be->dense_backward_weights(u->ops[5], h, b->part, b->d_weight,
                               db_rec ? db_rec + g * units : NULL);
    put_columns(u->dw[1], units, width, g, units, b->d_weight);
  }
}

/* dx = d_input W^T, each feature times its mask; gate by gate summed
 * where each gate has its own. */
static void input_gradient(const rnn_unit *u, const mxu_backend *be,
                           float *dx) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t rows = d->n * d->steps, f = d->features, units = d->units;
  int64_t width = d->gates * units;
  if (!gate_inputs(u->masks))
    be->dense_backward_data(u->ops[0], b->d_input, u->w[0], dx);
  else
    memset(dx, 0, (size_t)(rows * f) * sizeof(float));
  for (int g = 0; gate_inputs(u->masks) && g < d->gates; g++) {
    take_columns(b->d_input, rows, width, g, units, b->part);
    be->dense_backward_data(u->ops[3], b->part, b->gate_w + g * f * units,
                            b->d_part);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < f; j++)
        dx[r * f + j] += b->d_part[r * f + j] *
                         b->mask[((r / d->steps) * d->gates + g) * f + j];
  }
  for (int64_t r = 0; u->masks.in == 1 && r < rows; r++)
    for (int64_t j = 0; j < f; j++)
      dx[r * f + j] *= b->mask[(r / d->steps) * f + j];
}

/* dy: the gradients of the unit's outputs; layer_dy the layer's (its
 * final states' with return_state); dx NULL when not needed. */
static void unit_backward(const rnn_unit *u, const mxu_backend *be,
                          const float *x, const float *dy,
                          const float *layer_dy, float *dx) {
  const rnn_dims *d = &u->d;
  const rnn_buffers *b = &u->b;
  int64_t units = d->units, width = d->gates * units, row = d->n * units;
  memset(b->dh, 0, (size_t)row * sizeof(float));
  memset(b->dc, 0, (size_t)row * sizeof(float));
  int64_t states = u->c->return_state ? states_of(u->c->kind) : 0;
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t k = 0; k < states; k++)
      memcpy((k ? b->dc : b->dh) + n * units,
             layer_dy + n * u->whole + u->states + k * units,
             (size_t)units * sizeof(float));
  for (int64_t s = d->steps - 1; s >= 0; s--) {
    int64_t t = input_step(u, s);
    float *d_rec = b->d_rec + s * d->n * width;
    for (int64_t n = 0; n < d->n; n++) {
      add_output_gradient(u, dy, s, n, b->dh + n * units);
      if (skipped(u, n, t)) { /* dh and dc carry over it */
        size_t bytes = (size_t)width * sizeof(float);
        memset(b->d_input + (n * d->steps + t) * width, 0, bytes);
        memset(d_rec + n * width, 0, bytes);
        continue;
      }
      const float *c_prev =
          s ? b->cells + (s - 1) * row + n * units : b->c0 + n * units;
      cell_backward(u->c, units, b->gates + (s * d->n + n) * width,
                    b->hs + s * row + n * units, c_prev,
                    b->cells + s * row + n * units,
                    b->candidate + s * row + n * units, b->dh + n * units,
                    b->dc + n * units, b->d_input + (n * d->steps + t) * width,
                    d_rec + n * width, b->cell_tmp);
    }
    if (resets_before(u->c)) gru_before_backward(u, be, s, s || u->h0);
    /* The previous h's: its direct term (left in dh) + the recurrent
     * side's; before step 0, the initial state's. */
    if (s || u->h0) state_gradient(u, be, d_rec);
  }
  if (u->dh0) memcpy(u->dh0, b->dh, (size_t)row * sizeof(float));
  if (u->dc0) memcpy(u->dc0, b->dc, (size_t)row * sizeof(float));
  weight_gradients(u, be, x);
  if (dx) input_gradient(u, be, dx);
}

/* A Bidirectional's output gradient split into each direction's: its half
 * of a concatenation, the whole of a sum, half of an average, and times
 * the other direction's output for a product. */
static void split_gradient(const mxu_layer *layer, const rnn_unit *units,
                           const float *dy, float *const *out) {
  const rnn_dims *d = &units[0].d;
  int64_t positions = positions_of(layer), whole = sample_floats(layer);
  int64_t u = d->units, width = width_of(layer);
  mxu_merge_kind merge = merge_of(layer);
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t p = 0; p < positions; p++) {
      const float *g = dy + n * whole + p * width;
      for (int dir = 0; dir < 2; dir++) {
        float *o = out[dir] + (n * positions + p) * u;
        const float *other = output_at(&units[1 - dir], p, n);
        for (int64_t j = 0; j < u; j++)
          o[j] = merge == MXU_MERGE_CONCATENATE ? g[dir * u + j]
                 : merge == MXU_MERGE_ADD       ? g[j]
                 : merge == MXU_MERGE_MULTIPLY  ? g[j] * other[j]
                                                : g[j] * 0.5f;
      }
    }
}

static void rnn_backward(mxu_layer *layer, const mxu_layer_run *run) {
  rnn_unit units[2];
  units[0] = unit_of(layer, run, 0);
  if (!is_bidirectional(layer)) {
    unit_backward(&units[0], run->backend, run->x, run->dy, run->dy,
                  run->need_dx ? run->dx : NULL);
    return;
  }
  units[1] = unit_of(layer, run, 1);
  const rnn_dims *d = &units[0].d;
  int64_t outputs = d->n * d->steps * d->units;
  float *dys[2] = {units[1].b.extra, units[1].b.extra + outputs};
  float *dx = dys[1] + outputs;
  split_gradient(layer, units, run->dy, dys);
  unit_backward(&units[0], run->backend, run->x, dys[0], run->dy,
                run->need_dx ? run->dx : NULL);
  unit_backward(&units[1], run->backend, run->x, dys[1], run->dy,
                run->need_dx ? dx : NULL);
  for (int64_t i = 0; run->need_dx && i < d->n * d->steps * d->features; i++)
    run->dx[i] += dx[i];
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
 * at step 0); returns h, and LSTM's cell in *cell. A reset_before GRU's
 * candidate reads (r * h_c) u_h instead of r's last gate, h_c the previous
 * h (times its recurrent dropout mask). */
static mxu_hlo_value cell_emit(mxu_emit *e, const mxu_rnn_config *c, int64_t n,
                               mxu_hlo_value p, mxu_hlo_value r,
                               mxu_hlo_value rec_bias, mxu_hlo_value h_prev,
                               mxu_hlo_value *cell, mxu_hlo_value h_c,
                               mxu_hlo_value u_h) {
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
  mxu_hlo_value candidate =
      c->reset_before ? mxu_hlo_matmul(h, mxu_hlo_mul(h, reset, h_c), u_h)
                      : mxu_hlo_mul(h, reset, GATE(r, 2));
  mxu_hlo_value k = ACT(act, mxu_hlo_add(h, GATE(p, 2), candidate));
  mxu_hlo_value one = mxu_hlo_full_like(h, z, 1.0);
  return mxu_hlo_add(h, mxu_hlo_mul(h, z, h_prev),
                     mxu_hlo_mul(h, mxu_hlo_sub(h, one, z), k));
#undef GATE
#undef ACT
}

/* 0 or 1 / (1 - rate) of uniform draws u. */
static mxu_hlo_value keep_emit(mxu_hlo *h, mxu_hlo_value u, float rate) {
  return mxu_hlo_select(
      h, mxu_hlo_compare_op(h, MXU_HLO_GE, u, mxu_hlo_full_like(h, u, rate)),
      mxu_hlo_full_like(h, u, 1.0 / (1.0 - rate)),
      mxu_hlo_full_like(h, u, 0.0));
}

/* Columns [first, first + count) of v (n, 1, per) as (n, masks, size). */
static mxu_hlo_value mask_part(mxu_hlo *h, mxu_hlo_value v, int64_t n,
                               int64_t first, int masks, int64_t size) {
  int64_t start[3] = {0, 0, first}, limit[3] = {n, 1, first + masks * size};
  int64_t stride[3] = {1, 1, 1}, shape[3] = {n, masks, size};
  return mxu_hlo_reshape(h, mxu_hlo_slice(h, v, start, limit, stride),
                         mxu_hlo_shape_make(MXU_HLO_F32, 3, shape));
}

/* Mask k of (n, masks, size) as (n, size). */
static mxu_hlo_value mask_at(mxu_hlo *h, mxu_hlo_value m, int k) {
  const mxu_hlo_shape *s = mxu_hlo_shape_of(h, m);
  int64_t start[3] = {0, k, 0}, limit[3] = {s->dims[0], k + 1, s->dims[2]};
  int64_t stride[3] = {1, 1, 1}, shape[2] = {s->dims[0], s->dims[2]};
  return mxu_hlo_reshape(h, mxu_hlo_slice(h, m, start, limit, stride),
                         mxu_hlo_shape_make(MXU_HLO_F32, 2, shape));
}

/* In training, direction dir's masks as draw_masks draws them: the
 * inputs' (n, masks.in, features) in *in and h's (n, gates, units) in
 * *rec; 0 where none. */
static void masks_emit(mxu_emit *e, const mxu_layer *layer, int dir,
                       const rnn_dims *d, rnn_masks m, mxu_hlo_value *in,
                       mxu_hlo_value *rec) {
  const mxu_rnn_config *c = rnn_of(layer);
  mxu_hlo *h = e->h;
  *in = *rec = 0;
  if (!m.in && !m.rec) return;
  int dirs = directions_of(layer);
  int64_t per = draws_per(d, m), by_row[3] = {d->n, dirs, per};
  mxu_hlo_value u =
      mxu_hlo_reshape(h, mxu_emit_uniform4(e, e->noise, d->n * dirs * per),
                      mxu_hlo_shape_make(MXU_HLO_F32, 3, by_row));
  int64_t start[3] = {0, dir, 0}, limit[3] = {d->n, dir + 1, per};
  int64_t stride[3] = {1, 1, 1};
  u = mxu_hlo_slice(h, u, start, limit, stride);
  if (m.in)
    *in = keep_emit(h, mask_part(h, u, d->n, 0, m.in, d->features), c->dropout);
  if (m.rec)
    *rec =
        keep_emit(h, mask_part(h, u, d->n, m.in * d->features, m.rec, d->units),
                  c->recurrent_dropout);
}

/* v (n, size) times mask k of (n, masks, size). */
static mxu_hlo_value masked_emit(mxu_hlo *h, mxu_hlo_value v, mxu_hlo_value m,
                                 int k) {
  return mxu_hlo_mul(h, v, mask_at(h, m, k));
}

/* x (n, steps, features) times input mask k, over every step, as
 * (n * steps, features). */
static mxu_hlo_value dropped_emit(mxu_hlo *h, mxu_hlo_value x, mxu_hlo_value in,
                                  int k, const rnn_dims *d) {
  int64_t flat[2] = {d->n * d->steps, d->features};
  const int64_t spread[2] = {0, 2};
  if (in)
    x = mxu_hlo_mul(h, x,
                    mxu_hlo_broadcast(h, mask_at(h, in, k),
                                      *mxu_hlo_shape_of(h, x), spread));
  return mxu_hlo_reshape(h, x, mxu_hlo_shape_make(MXU_HLO_F32, 2, flat));
}

/* Each gate's a[g] (rows, in) times its columns [g * u, (g + 1) * u) of
 * w (in, width), side by side: (rows, width). */
static mxu_hlo_value gate_products(mxu_hlo *h, const mxu_hlo_value *a,
                                   mxu_hlo_value w, int64_t in, int64_t u,
                                   int gates) {
  mxu_hlo_value y = 0;
  for (int g = 0; g < gates; g++) {
    mxu_hlo_value part = mxu_hlo_matmul(h, a[g], columns(h, w, in, g * u, u));
    y = g ? mxu_hlo_concatenate(h, y, part, 1) : part;
  }
  return y;
}

/* Whether each row's input step t is kept by the mask's ids (n, steps),
 * as a predicate of the state's shape (n, units). */
static mxu_hlo_value kept_emit(mxu_hlo *h, mxu_hlo_value ids, int64_t t,
                               mxu_hlo_shape state) {
  int64_t n = state.dims[0], start[2] = {0, t}, limit[2] = {n, t + 1};
  int64_t stride[2] = {1, 1};
  mxu_hlo_value id =
      mxu_hlo_reshape(h, mxu_hlo_slice(h, ids, start, limit, stride),
                      mxu_hlo_shape_make(MXU_HLO_F32, 1, &n));
  const int64_t rows[1] = {0};
  return mxu_hlo_broadcast(
      h, mxu_hlo_compare_op(h, MXU_HLO_NE, id, mxu_hlo_full_like(h, id, 0.0)),
      mxu_hlo_shape_make(MXU_HLO_PRED, 2, state.dims), rows);
}

/* One direction over every step: its outputs in step order (n, steps,
 * units), or the last one's (n, units); its final states (h, LSTM's c)
 * into states. */
static mxu_hlo_value unit_emit(mxu_emit *e, const mxu_layer *layer, int dir,
                               mxu_hlo_value *states) {
  mxu_hlo *h = e->h;
  const mxu_rnn_config *c = rnn_of(layer);
  const mxu_hlo_value *w = e->w + weights_per(c) * dir;
  rnn_dims d = dims_of(layer, e->batch);
  rnn_masks m = masks_of(c, e->training && e->noise);
  int go_backwards = c->go_backwards != dir;
  int64_t u = d.units, width = d.gates * u;
  mxu_hlo_value in_masks, rec_masks;
  masks_emit(e, layer, dir, &d, m, &in_masks, &rec_masks);
  mxu_hlo_value xs[4];
  for (int g = 0; g < (gate_inputs(m) ? d.gates : 1); g++)
    xs[g] = dropped_emit(h, e->in[0], in_masks, g, &d);
  mxu_hlo_value p = gate_inputs(m)
                        ? gate_products(h, xs, w[0], d.features, u, d.gates)
                        : mxu_hlo_matmul(h, xs[0], w[0]);
  mxu_hlo_value rec_bias = 0;
  if (c->use_bias)
    p = mxu_emit_bias(e, p, two_biases(c) ? bias_row(h, w[2], 0, width) : w[2]);
  if (two_biases(c)) rec_bias = bias_row(h, w[2], 1, width);
  mxu_hlo_value u_h = resets_before(c) ? columns(h, w[1], u, 2 * u, u) : 0;
  int64_t by_step[3] = {d.n, d.steps, width}, row[2] = {d.n, u};
  p = mxu_hlo_reshape(h, p, mxu_hlo_shape_make(MXU_HLO_F32, 3, by_step));
  mxu_hlo_shape state = mxu_hlo_shape_make(MXU_HLO_F32, 2, row);
  int64_t wide[2] = {d.n, width}, one_step[3] = {d.n, 1, u};
  mxu_hlo_value hs = mxu_hlo_constant(h, state, 0.0), cell = hs, seq = 0;
  mxu_hlo_value last = hs;
  int initial = layer->input_count > 1; /* else zero: no recurrent term */
  int first = 1 + dir * states_of(c->kind);
  if (initial) hs = e->in[first];
  if (initial && c->kind == MXU_LSTM) cell = e->in[first + 1];
  mxu_hlo_value zero =
      mxu_hlo_constant(h, mxu_hlo_shape_make(MXU_HLO_F32, 2, wide), 0.0);
  for (int64_t s = 0; s < d.steps; s++) {
    int64_t t = go_backwards ? d.steps - 1 - s : s;
    int64_t start[3] = {0, t, 0}, limit[3] = {d.n, t + 1, width};
    int64_t stride[3] = {1, 1, 1};
    mxu_hlo_value pt =
        mxu_hlo_reshape(h, mxu_hlo_slice(h, p, start, limit, stride),
                        mxu_hlo_shape_make(MXU_HLO_F32, 2, wide));
    mxu_hlo_value r = zero, masked[4];
    for (int g = 0; (s || initial) && m.rec && g < d.gates; g++)
      masked[g] = masked_emit(h, hs, rec_masks, g);
    if (s || initial)
      r = m.rec ? gate_products(h, masked, w[1], u, u, d.gates)
                : mxu_hlo_matmul(h, hs, w[1]);
    mxu_hlo_value h_prev = hs, c_prev = cell;
    mxu_hlo_value h_c = (s || initial) && m.rec ? masked[d.gates - 1] : hs;
    hs = cell_emit(e, c, d.n, pt, r, rec_bias, hs, &cell, h_c, u_h);
    if (e->mask) { /* skipped steps carry the state over (skipped) */
      mxu_hlo_value kept = kept_emit(h, e->mask, t, state);
      hs = mxu_hlo_select(h, kept, hs, h_prev);
      if (c->kind == MXU_LSTM) cell = mxu_hlo_select(h, kept, cell, c_prev);
    }
    mxu_hlo_value out = hs;
    if (e->mask && c->zero_output_for_mask)
      out = mxu_hlo_select(h, kept_emit(h, e->mask, t, state), hs,
                           mxu_hlo_full_like(h, hs, 0.0));
    if (!c->return_sequences) {
      last = out;
      continue;
    }
    mxu_hlo_value step =
        mxu_hlo_reshape(h, out, mxu_hlo_shape_make(MXU_HLO_F32, 3, one_step));
    seq = s ? mxu_hlo_concatenate(h, seq, step, 1) : step;
  }
  states[0] = hs;
  states[1] = cell;
  return c->return_sequences ? seq : last;
}

/* A Bidirectional's backward sequence reversed back, then merged. */
static mxu_hlo_value merge_emit(const mxu_layer *layer, mxu_hlo *h,
                                mxu_hlo_value a, mxu_hlo_value b) {
  const mxu_rnn_config *c = rnn_of(layer);
  const int64_t time[1] = {1};
  if (c->return_sequences) b = mxu_hlo_reverse(h, b, 1, time);
  switch (merge_of(layer)) {
  case MXU_MERGE_ADD: return mxu_hlo_add(h, a, b);
  case MXU_MERGE_MULTIPLY: return mxu_hlo_mul(h, a, b);
  case MXU_MERGE_AVERAGE:
    return mxu_hlo_mul(h, mxu_hlo_add(h, a, b), mxu_hlo_full_like(h, a, 0.5));
  default: return mxu_hlo_concatenate(h, a, b, c->return_sequences ? 2 : 1);
  }
}

/* With return_state the output flat, then each direction's final states
 * (sample_floats). */
static mxu_hlo_value rnn_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const mxu_rnn_config *c = rnn_of(layer);
  mxu_hlo_value states[2][2];
  mxu_hlo_value y = unit_emit(e, layer, 0, states[0]);
  if (is_bidirectional(layer))
    y = merge_emit(layer, h, y, unit_emit(e, layer, 1, states[1]));
  if (!c->return_state) return y;
  int64_t flat[2] = {e->batch, positions_of(layer) * width_of(layer)};
  y = mxu_hlo_reshape(h, y, mxu_hlo_shape_make(MXU_HLO_F32, 2, flat));
  for (int dir = 0; dir < directions_of(layer); dir++)
    for (int k = 0; k < states_of(c->kind); k++)
      y = mxu_hlo_concatenate(h, y, states[dir][k], 1);
  return y;
}

/* ---- Keras' JSON ---------------------------------------------------------
 * Refused: what mxu's whole-sequence cell does not do (stateful,
 * time_major). unroll,
 * implementation, use_cudnn and seed change nothing computed here. */

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
                                       "zero_output_for_mask",
                                       NULL};

/* What the layer does with the cell's steps: Keras' RNN's own options. */
static mxu_status read_sequence_flags(const mxu_json_where *where,
                                      const cJSON *config, mxu_rnn_config *c) {
  MXU_TRY(
      mxu_json_bool(where, config, "return_sequences", &c->return_sequences));
  MXU_TRY(mxu_json_bool(where, config, "go_backwards", &c->go_backwards));
  MXU_TRY(mxu_json_bool(where, config, "return_state", &c->return_state));
  MXU_TRY(mxu_json_require_false(where, config, "stateful"));
  MXU_TRY(mxu_json_require_false(where, config, "time_major"));
  return mxu_json_bool(where, config, "zero_output_for_mask",
                       &c->zero_output_for_mask);
}

static mxu_status read_rnn_config(const mxu_json_where *where,
                                  const cJSON *config, int keras2,
                                  mxu_rnn_kind kind, mxu_rnn_config *out) {
  mxu_rnn_config c = mxu_rnn_defaults(kind, 0);
  int reset_after = kind == MXU_GRU;
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
  MXU_TRY(mxu_json_bool(where, config, "reset_after", &reset_after));
  c.reset_before = kind == MXU_GRU && !reset_after;
  MXU_TRY(read_sequence_flags(where, config, &c));
  MXU_TRY(mxu_json_rate(where, config, "dropout", &c.dropout));
  MXU_TRY(
      mxu_json_rate(where, config, "recurrent_dropout", &c.recurrent_dropout));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c.kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "recurrent", &c.recurrent));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c.bias));
  *out = c;
  return MXU_OK;
}

/* The layer read, on its input and initial states (the node's others). */
static mxu_status apply_read(const mxu_json_where *where, mxu_json_node *node,
                             mxu_rnn_config *c, const char *name) {
  c->name = name;
  return mxu_json_applied(where, node,
                          mxu_apply_rnn_from(node->model, c, node->inputs[0],
                                             node->inputs + 1,
                                             node->input_count - 1));
}

static mxu_status read_rnn(const mxu_json_where *where, const cJSON *config,
                           mxu_json_node *node, const char *name,
                           mxu_rnn_kind kind) {
  mxu_rnn_config c;
  MXU_TRY(read_rnn_config(where, config, node->model->keras2_names, kind, &c));
  return apply_read(where, node, &c, name);
}

static void write_rnn_config(mxu_json_out *out, const mxu_rnn_config *c,
                             cJSON *config) {
  mxu_json_put_bool(out, config, "return_sequences", c->return_sequences);
  mxu_json_put_bool(out, config, "return_state", c->return_state);
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
  mxu_json_put_float(out, config, "dropout", c->dropout);
  mxu_json_put_float(out, config, "recurrent_dropout", c->recurrent_dropout);
  if (c->zero_output_for_mask)
    mxu_json_put_bool(out, config, "zero_output_for_mask", 1);
  if (c->kind == MXU_GRU)
    mxu_json_put_bool(out, config, "reset_after", !c->reset_before);
}

static void write_rnn(mxu_json_out *out, const mxu_layer *layer,
                      cJSON *config) {
  write_rnn_config(out, &layer->config.rnn, config);
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

/* pjrt: dropout's stream (its key and stream words), from which the
 * device draws what drop_input draws. */
static int rnn_noise(const mxu_layer *layer, const mxu_layer_run *run,
                     float *out) {
  const mxu_rnn_config *c = rnn_of(layer);
  if (c->dropout == 0.0f && c->recurrent_dropout == 0.0f) return 0;
  return mxu_stream_noise(run, out);
}

static const char *cell_group(const mxu_layer *layer, int k) {
  (void)layer;
  (void)k;
  return "cell";
}

/* Its sequence keeps the input's mask; its last step does not. */
static int rnn_mask(const mxu_layer *layer) {
  return rnn_of(layer)->return_sequences ? layer->mask_in : -1;
}

/* The recurrent classes: one computation; an RNN of a cell reads and
 * writes its own config. */
#define RNN_CLASS_OF(cname, keys, reader, writer, states)                      \
  {                                                                            \
    .class_name = cname, .keras3_group = cell_group, .config_keys = keys,      \
    .read_config = reader, .write_config = writer, .min_inputs = 1,            \
    .max_inputs = 1 + (states), .output_parts = rnn_parts,                     \
    .list_argument = "initial_state", .infer = rnn_infer,                      \
    .declare = rnn_declare, .flops = rnn_flops, .plan = rnn_plan,              \
    .forward = rnn_forward, .backward = rnn_backward, .emit = rnn_emit,        \
    .emit_noise = rnn_noise, .noise_is_stream = 1, .output_mask = rnn_mask,    \
    .uses_mask = 1                                                             \
  }
#define RNN_CLASS(cname, reader, states)                                       \
  RNN_CLASS_OF(cname, rnn_keys, reader, write_rnn, states)

const mxu_layer_class mxu_simple_rnn_class =
    RNN_CLASS("SimpleRNN", read_simple_rnn, 1);
const mxu_layer_class mxu_lstm_class = RNN_CLASS("LSTM", read_lstm, 2);
const mxu_layer_class mxu_gru_class = RNN_CLASS("GRU", read_gru, 1);

/* ---- RNN ----------------------------------------------------------------
 * Keras' RNN(cell) of one LSTMCell, GRUCell or SimpleRNNCell: the layer of
 * that cell (LSTM, GRU, SimpleRNN) under the name RNN, its cell's options
 * in the cell's config and the sequence's in the RNN's. Its weights are
 * where that layer keeps them (tf.keras 2: rnn/lstm_cell/kernel:0; Keras
 * 3: layers/rnn/cell/vars). StackedRNNCells is refused. */

static const char *const rnn_wrapper_keys[] = {
    "cell",     "return_sequences", "return_state", "go_backwards",
    "stateful", "unroll",           "time_major",   "zero_output_for_mask",
    NULL};

static const char *const cell_names[] = {[MXU_SIMPLE_RNN] = "SimpleRNNCell",
                                         [MXU_LSTM] = "LSTMCell",
                                         [MXU_GRU] = "GRUCell"};

/* The layer's keys, which write_rnn_config writes among the cell's. */
static const char *const sequence_keys[] = {
    "return_sequences", "return_state", "go_backwards",
    "stateful",         "unroll",       "zero_output_for_mask"};

/* An RNN layer's config: its cell's options, then its own. */
static mxu_status read_cell_layer(const mxu_json_where *where,
                                  const cJSON *config, int keras2,
                                  mxu_rnn_config *out) {
  const cJSON *entry = mxu_json_get(config, "cell"),
              *cell = mxu_json_get(entry, "config");
  const char *cls = cJSON_GetStringValue(mxu_json_get(entry, "class_name"));
  int kind = -1;
  for (int k = 0; cls && k <= MXU_GRU; k++)
    if (strcmp(cls, cell_names[k]) == 0) kind = k;
  if (cls && strcmp(cls, "StackedRNNCells") == 0)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "cell: StackedRNNCells is not supported: give each "
                         "cell an RNN layer of its own, return_sequences "
                         "true on all but the last (the same computation)");
  if (kind < 0 || !cJSON_IsObject(cell))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "cell: %s is not supported (mxu's RNN takes one "
                         "LSTMCell, GRUCell or SimpleRNNCell)",
                         cls ? cls : "(no class_name)");
  static const char *const cell_common[] = {"name", "trainable", "dtype", NULL};
  MXU_TRY(mxu_json_check_keys(where, cell, rnn_keys, cell_common));
  for (size_t k = 0; k < sizeof sequence_keys / sizeof *sequence_keys; k++)
    if (mxu_json_get(cell, sequence_keys[k]))
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "cell: %s is the RNN layer's option, not its "
                           "cell's",
                           sequence_keys[k]);
  MXU_TRY(read_rnn_config(where, cell, keras2, (mxu_rnn_kind)kind, out));
  MXU_TRY(read_sequence_flags(where, config, out));
  out->of_cell = 1;
  return MXU_OK;
}

static mxu_status read_rnn_wrapper(const mxu_json_where *where,
                                   const cJSON *config, mxu_json_node *node,
                                   const char *name) {
  mxu_rnn_config c;
  MXU_TRY(read_cell_layer(where, config, node->model->keras2_names, &c));
  return apply_read(where, node, &c, name);
}

/* write_rnn_config's keys, the layer's moved out of the cell's (a cell
 * has no activity_regularizer). For tf.keras 2 too the cell names its
 * module, and time_major is left out: Keras 3 reads the .h5 then. */
static void write_cell_layer(mxu_json_out *out, const mxu_rnn_config *c,
                             cJSON *config) {
  static const char *const automatic[] = {[MXU_SIMPLE_RNN] = "simple_rnn_cell",
                                          [MXU_LSTM] = "lstm_cell",
                                          [MXU_GRU] = "gru_cell"};
  cJSON *cell = cJSON_CreateObject();
  mxu_json_put_string(out, cell, "name", automatic[c->kind]);
  mxu_json_put_bool(out, cell, "trainable", 1);
  mxu_json_put_dtype(out, cell);
  write_rnn_config(out, c, cell);
  for (size_t k = 0; cell && k < sizeof sequence_keys / sizeof *sequence_keys;
       k++) {
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(cell, sequence_keys[k]);
    if (v) cJSON_AddItemToObject(config, sequence_keys[k], v);
  }
  cJSON_DeleteItemFromObjectCaseSensitive(cell, "activity_regularizer");
  mxu_json_out named = *out;
  named.keras3 = 1;
  mxu_json_put(
      out, config, "cell",
      mxu_json_object(&named, "keras.layers", cell_names[c->kind], cell));
}

static void write_rnn_wrapper(mxu_json_out *out, const mxu_layer *layer,
                              cJSON *config) {
  write_cell_layer(out, &layer->config.rnn, config);
}

/* Its states: an LSTMCell's two at most. */
const mxu_layer_class mxu_rnn_class = RNN_CLASS_OF(
    "RNN", rnn_wrapper_keys, read_rnn_wrapper, write_rnn_wrapper, 2);

/* ---- Bidirectional --------------------------------------------------------
 * Keras' wrapper of a SimpleRNN, LSTM or GRU: the layer forwards and a
 * copy backwards (go_backwards flipped), the copy's sequence reversed
 * back, the two merged (merge_mode concat, sum, mul or ave). tf.keras 2
 * writes the wrapped layer under its own name ("lstm") and names the
 * weights forward_lstm/lstm_cell/kernel:0, ...; Keras 3 names it
 * forward_lstm and writes the copy too, as backward_layer. */

static const char *const bidirectional_keys[] = {
    "layer", "merge_mode", "backward_layer", "weights", NULL};

static const char *const merge_names[] = {[MXU_MERGE_CONCATENATE] = "concat",
                                          [MXU_MERGE_ADD] = "sum",
                                          [MXU_MERGE_MULTIPLY] = "mul",
                                          [MXU_MERGE_AVERAGE] = "ave"};

static const mxu_layer_class *const wrapped_classes[] = {
    [MXU_SIMPLE_RNN] = &mxu_simple_rnn_class,
    [MXU_LSTM] = &mxu_lstm_class,
    [MXU_GRU] = &mxu_gru_class};

static const char *const common_keys[] = {"name", "trainable", "dtype", NULL};

/* The wrapped layer's entry: its class, its config read as the layer's
 * own would be; its name (the forward_ prefix Keras 3 adds taken off). */
static mxu_status read_wrapped(const mxu_json_where *where, const cJSON *entry,
                               int keras2, mxu_rnn_config *c,
                               const char **name) {
  const cJSON *config = mxu_json_get(entry, "config");
  const char *cls = cJSON_GetStringValue(mxu_json_get(entry, "class_name"));
  int kind = -1, of_cell = cls && strcmp(cls, "RNN") == 0;
  for (int k = 0; cls && k <= MXU_GRU; k++)
    if (strcmp(cls, wrapped_classes[k]->class_name) == 0) kind = k;
  if ((kind < 0 && !of_cell) || !cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "layer: wrapping %s is not supported (mxu wraps "
                         "SimpleRNN, LSTM, GRU and an RNN of their cells)",
                         cls ? cls : "(no class_name)");
  if (of_cell) {
    MXU_TRY(mxu_json_check_keys(where, config, rnn_wrapper_keys, common_keys));
    MXU_TRY(read_cell_layer(where, config, keras2, c));
  } else {
    MXU_TRY(mxu_json_check_keys(where, config, rnn_keys, common_keys));
    MXU_TRY(read_rnn_config(where, config, keras2, (mxu_rnn_kind)kind, c));
  }
  MXU_TRY(mxu_json_string(where, config, "name", MXU_JSON_OPTIONAL, name));
  if (*name && strncmp(*name, "forward_", 8) == 0) *name += 8;
  return MXU_OK;
}

static mxu_status read_merge_mode(const mxu_json_where *where,
                                  const cJSON *config, mxu_merge_kind *merge) {
  const cJSON *v = mxu_json_get(config, "merge_mode");
  *merge = MXU_MERGE_CONCATENATE;
  if (!v) return MXU_OK;
  for (int m = 0; cJSON_IsString(v) && m <= MXU_MERGE_CONCATENATE; m++)
    if (merge_names[m] && strcmp(v->valuestring, merge_names[m]) == 0) {
      *merge = (mxu_merge_kind)m;
      return MXU_OK;
    }
  char text[64];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "merge_mode %s is not supported (concat, sum, mul or "
                       "ave; null gives two outputs)",
                       text);
}

/* Keras 3's backward_layer: the wrapped layer reading backwards, or a
 * layer of its own, which mxu does not take. */
static mxu_status check_backward_layer(const mxu_json_where *where,
                                       const cJSON *config, int keras2,
                                       const mxu_rnn_config *forward) {
  const cJSON *entry = mxu_json_get(config, "backward_layer");
  if (!entry || cJSON_IsNull(entry)) return MXU_OK;
  mxu_rnn_config back;
  const char *name = NULL;
  MXU_TRY(read_wrapped(where, entry, keras2, &back, &name));
  if (back.kind != forward->kind || back.units != forward->units ||
      back.go_backwards == forward->go_backwards ||
      back.return_sequences != forward->return_sequences ||
      back.use_bias != forward->use_bias ||
      back.activation != forward->activation ||
      back.recurrent_activation != forward->recurrent_activation)
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "backward_layer: a backward layer other than the "
                         "layer reading backwards is not supported");
  return MXU_OK;
}

static mxu_status read_bidirectional(const mxu_json_where *where,
                                     const cJSON *config, mxu_json_node *node,
                                     const char *name) {
  int keras2 = node->model->keras2_names;
  const cJSON *entry = mxu_json_get(config, "layer");
  if (!cJSON_IsObject(entry))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "layer is missing or not a layer object");
  mxu_rnn_config c;
  const char *inner = NULL;
  mxu_merge_kind merge;
  MXU_TRY(read_wrapped(where, entry, keras2, &c, &inner));
  MXU_TRY(read_merge_mode(where, config, &merge));
  MXU_TRY(check_backward_layer(where, config, keras2, &c));
  MXU_TRY(mxu_json_require_null(where, config, "weights"));
  c.name = inner;
  return mxu_json_applied(where, node,
                          mxu_apply_bidirectional_from(
                              node->model, name, &c, merge, node->inputs[0],
                              node->inputs + 1, node->input_count - 1));
}

/* The wrapped layer's entry: for Keras 3 forward_<name> (backward_<name>
 * and go_backwards flipped for its copy), as Keras 3 writes them. */
static cJSON *wrapped_entry(mxu_json_out *out, const mxu_layer *layer,
                            int backward) {
  const mxu_bidirectional_config *b = &layer->config.bidirectional;
  mxu_rnn_config c = b->rnn;
  char name[MXU_NAME_SIZE + 16];
  snprintf(name, sizeof name, "%s%s",
           !out->keras3 ? ""
           : backward   ? "backward_"
                        : "forward_",
           b->inner);
  if (backward) c.go_backwards = !c.go_backwards;
  cJSON *config = cJSON_CreateObject();
  mxu_json_put_string(out, config, "name", name);
  mxu_json_put_bool(out, config, "trainable", 1);
  mxu_json_put_dtype(out, config);
  if (c.of_cell)
    write_cell_layer(out, &c, config);
  else
    write_rnn_config(out, &c, config);
  return mxu_json_object(
      out, "keras.layers",
      c.of_cell ? "RNN" : wrapped_classes[c.kind]->class_name, config);
}

static void write_bidirectional(mxu_json_out *out, const mxu_layer *layer,
                                cJSON *config) {
  mxu_json_put(out, config, "layer", wrapped_entry(out, layer, 0));
  mxu_json_put_string(out, config, "merge_mode",
                      merge_names[layer->config.bidirectional.merge]);
  if (out->keras3)
    mxu_json_put(out, config, "backward_layer", wrapped_entry(out, layer, 1));
}

/* Keras 3 keeps each direction's weights in its layer's cell. */
static const char *direction_group(const mxu_layer *layer, int k) {
  return k < weights_per(rnn_of(layer)) ? "forward_layer/cell"
                                        : "backward_layer/cell";
}

const mxu_layer_class mxu_bidirectional_class = {
    .class_name = "Bidirectional",
    .keras3_group = direction_group,
    .config_keys = bidirectional_keys,
    .read_config = read_bidirectional,
    .write_config = write_bidirectional,
    .output_parts = rnn_parts,
    .list_argument = "initial_state",
    .min_inputs = 1,
    .max_inputs = 5,
    .infer = rnn_infer,
    .declare = rnn_declare,
    .flops = rnn_flops,
    .plan = rnn_plan,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .emit = rnn_emit,
    .emit_noise = rnn_noise,
    .noise_is_stream = 1,
    .output_mask = rnn_mask,
    .uses_mask = 1};

/* The names of the weights, tf.keras 2's: forward_<inner>/<cell>/kernel. */
void mxu_bidirectional_names(mxu_bidirectional_config *b) {
  static const char *const direction[2] = {"forward_", "backward_"};
  for (int dir = 0; dir < 2; dir++)
    for (int k = 0; k < 3; k++)
      snprintf(b->names[dir * 3 + k], sizeof b->names[0], "%s%s/%s",
               direction[dir], b->inner, weight_names[b->rnn.kind][k]);
}
