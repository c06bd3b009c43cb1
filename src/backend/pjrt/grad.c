/* grad.c — reverse-mode differentiation of an hlo graph: the adjoint of
 * each node, from the last to the first, pushed to its operands by one
 * rule per op, as TensorFlow's and JAX's gradients define them (relu and
 * max as TF: the whole gradient to the first operand on a tie; reduce_max
 * shared among ties; max pooling's to the window's first maximum). Only
 * nodes between the wanted values and the output get adjoints. */
#include "backend/pjrt/hlo.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct grad {
  mxu_hlo *h;
  int count;              /* nodes before differentiation */
  mxu_hlo_value *adjoint; /* per node; 0: none yet */
  unsigned char *reach;   /* depends on a wanted value */
} grad;

static void accumulate(grad *g, mxu_hlo_value v, mxu_hlo_value value) {
  if (!g->reach[v] || !value) return;
  g->adjoint[v] = g->adjoint[v]
                      ? mxu_hlo_binary(g->h, MXU_HLO_ADD, g->adjoint[v], value)
                      : value;
}

static mxu_hlo_value mul(grad *g, mxu_hlo_value a, mxu_hlo_value b) {
  return mxu_hlo_binary(g->h, MXU_HLO_MULTIPLY, a, b);
}

static mxu_hlo_value scaled(grad *g, mxu_hlo_value a, double k) {
  return mul(g, a, mxu_hlo_full_like(g->h, a, k));
}

/* dy masked: where mask, or elsewhere (flip). */
static mxu_hlo_value masked(grad *g, mxu_hlo_value mask, mxu_hlo_value dy,
                            int flip) {
  mxu_hlo_value zero = mxu_hlo_full_like(g->h, dy, 0.0);
  return flip ? mxu_hlo_select(g->h, mask, zero, dy)
              : mxu_hlo_select(g->h, mask, dy, zero);
}

static void elementwise(grad *g, const mxu_hlo_node *n, mxu_hlo_value out,
                        mxu_hlo_value dy) {
  mxu_hlo *h = g->h;
  mxu_hlo_value a = n->in[0], b = n->count > 1 ? n->in[1] : 0;
  switch (n->op) {
  case MXU_HLO_ADD:
    accumulate(g, a, dy);
    accumulate(g, b, dy);
    return;
  case MXU_HLO_SUBTRACT:
    accumulate(g, a, dy);
    accumulate(g, b, mxu_hlo_unary(h, MXU_HLO_NEGATE, dy));
    return;
  case MXU_HLO_MULTIPLY:
    accumulate(g, a, mul(g, dy, b));
    accumulate(g, b, mul(g, dy, a));
    return;
  case MXU_HLO_DIVIDE:
    accumulate(g, a, mxu_hlo_binary(h, MXU_HLO_DIVIDE, dy, b));
    accumulate(
        g, b,
        mxu_hlo_unary(h, MXU_HLO_NEGATE,
                      mxu_hlo_binary(h, MXU_HLO_DIVIDE, mul(g, dy, out), b)));
    return;
  case MXU_HLO_MAXIMUM:
  case MXU_HLO_MINIMUM: {
    mxu_hlo_value first = mxu_hlo_compare_op(
        h, n->op == MXU_HLO_MAXIMUM ? MXU_HLO_GE : MXU_HLO_LE, a, b);
    accumulate(g, a, masked(g, first, dy, 0));
    accumulate(g, b, masked(g, first, dy, 1));
    return;
  }
  case MXU_HLO_POWER: {
    mxu_hlo_value b_1 =
        mxu_hlo_binary(h, MXU_HLO_SUBTRACT, b, mxu_hlo_full_like(h, b, 1.0));
    accumulate(g, a,
               mul(g, dy, mul(g, b, mxu_hlo_binary(h, MXU_HLO_POWER, a, b_1))));
    accumulate(g, b, mul(g, dy, mul(g, out, mxu_hlo_unary(h, MXU_HLO_LOG, a))));
    return;
  }
  case MXU_HLO_NEGATE:
    accumulate(g, a, mxu_hlo_unary(h, MXU_HLO_NEGATE, dy));
    return;
  case MXU_HLO_EXP: accumulate(g, a, mul(g, dy, out)); return;
  case MXU_HLO_LOG:
    accumulate(g, a, mxu_hlo_binary(h, MXU_HLO_DIVIDE, dy, a));
    return;
  case MXU_HLO_SQRT:
    accumulate(g, a,
               mxu_hlo_binary(h, MXU_HLO_DIVIDE, scaled(g, dy, 0.5), out));
    return;
  case MXU_HLO_RSQRT:
    accumulate(
        g, a,
        mxu_hlo_binary(h, MXU_HLO_DIVIDE, mul(g, scaled(g, dy, -0.5), out), a));
    return;
  case MXU_HLO_TANH: {
    mxu_hlo_value one = mxu_hlo_full_like(h, out, 1.0);
    accumulate(
        g, a,
        mul(g, dy, mxu_hlo_binary(h, MXU_HLO_SUBTRACT, one, mul(g, out, out))));
    return;
  }
  case MXU_HLO_LOGISTIC: {
    mxu_hlo_value one = mxu_hlo_full_like(h, out, 1.0);
    accumulate(
        g, a,
        mul(g, dy, mul(g, out, mxu_hlo_binary(h, MXU_HLO_SUBTRACT, one, out))));
    return;
  }
  case MXU_HLO_ABS:
    accumulate(g, a, mul(g, dy, mxu_hlo_unary(h, MXU_HLO_SIGN, a)));
    return;
  case MXU_HLO_ERF: /* 2 / sqrt(pi) e^(-a^2) */
    accumulate(
        g, a,
        mul(g, scaled(g, dy, 1.12837916709551257390),
            mxu_hlo_unary(h, MXU_HLO_EXP,
                          mxu_hlo_unary(h, MXU_HLO_NEGATE, mul(g, a, a)))));
    return;
  case MXU_HLO_CONVERT:
    accumulate(g, a, mxu_hlo_convert(h, dy, h->nodes[a].shape.dtype));
    return;
  case MXU_HLO_SELECT:
    accumulate(g, n->in[1], masked(g, a, dy, 0));
    accumulate(g, n->in[2], masked(g, a, dy, 1));
    return;
  default: return;
  }
}

/* ---- shape ops --------------------------------------------------------- */

/* broadcast_in_dim's gradient: summed over the dims it repeated along. */
static void broadcast(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  const mxu_hlo_shape from = g->h->nodes[n->in[0]].shape;
  int64_t sum[MXU_HLO_MAX_RANK];
  int count = 0;
  for (int d = 0; d < n->shape.rank; d++) {
    int kept = 0;
    for (int i = 0; i < n->dim_count; i++)
      kept |= n->dims[i] == d && from.dims[i] == n->shape.dims[d];
    if (!kept) sum[count++] = d;
  }
  mxu_hlo_value summed =
      count ? mxu_hlo_reduce(g->h, dy, MXU_HLO_SUM, count, sum) : dy;
  accumulate(g, n->in[0], mxu_hlo_reshape(g->h, summed, from));
}

static void slice(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  const mxu_hlo_shape *from = &g->h->nodes[n->in[0]].shape;
  int64_t low[MXU_HLO_MAX_RANK], high[MXU_HLO_MAX_RANK],
      interior[MXU_HLO_MAX_RANK];
  for (int d = 0; d < from->rank; d++) {
    int64_t out = n->shape.dims[d];
    low[d] = n->a[d];
    interior[d] = out > 0 ? n->c[d] - 1 : 0;
    high[d] = from->dims[d] - low[d] - (out > 0 ? (out - 1) * n->c[d] + 1 : 0);
  }
  accumulate(g, n->in[0], mxu_hlo_pad(g->h, dy, 0.0, low, high, interior));
}

/* Each operand's part of dy. */
static void concatenate(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  int64_t start[MXU_HLO_MAX_RANK] = {0}, limit[MXU_HLO_MAX_RANK],
          stride[MXU_HLO_MAX_RANK];
  for (int i = 0; i < 2; i++) {
    const mxu_hlo_shape *s = &g->h->nodes[n->in[i]].shape;
    for (int d = 0; d < s->rank; d++) {
      stride[d] = 1;
      limit[d] = start[d] + s->dims[d];
    }
    accumulate(g, n->in[i], mxu_hlo_slice(g->h, dy, start, limit, stride));
    start[n->dims[0]] = limit[n->dims[0]];
  }
}

static void pad(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  const mxu_hlo_shape *from = &g->h->nodes[n->in[0]].shape;
  int64_t start[MXU_HLO_MAX_RANK], limit[MXU_HLO_MAX_RANK],
      stride[MXU_HLO_MAX_RANK];
  for (int d = 0; d < from->rank; d++) {
    start[d] = n->a[d];
    stride[d] = n->c[d] + 1;
    limit[d] = start[d] + (from->dims[d] - 1) * stride[d] + 1;
  }
  accumulate(g, n->in[0], mxu_hlo_slice(g->h, dy, start, limit, stride));
}

/* The dims a reduction kept, in order (where its result's dims came from). */
static int kept_dims(const mxu_hlo_node *n, int rank, int64_t *kept) {
  int count = 0;
  for (int d = 0; d < rank; d++) {
    int gone = 0;
    for (int i = 0; i < n->dim_count; i++) gone |= n->dims[i] == d;
    if (!gone) kept[count++] = d;
  }
  return count;
}

static void reduce(grad *g, const mxu_hlo_node *n, mxu_hlo_value out,
                   mxu_hlo_value dy) {
  mxu_hlo *h = g->h;
  mxu_hlo_value a = n->in[0];
  mxu_hlo_shape from = h->nodes[a].shape;
  int64_t kept[MXU_HLO_MAX_RANK];
  kept_dims(n, from.rank, kept);
  mxu_hlo_value spread = mxu_hlo_broadcast(h, dy, from, kept);
  if (n->reducer == MXU_HLO_SUM) {
    accumulate(g, a, spread);
    return;
  }
  /* Shared among the maxima, as TensorFlow's reduce_max gradient. */
  mxu_hlo_value at_max =
      mxu_hlo_convert(h,
                      mxu_hlo_compare_op(h, MXU_HLO_EQ, a,
                                         mxu_hlo_broadcast(h, out, from, kept)),
                      from.dtype);
  mxu_hlo_value ties = mxu_hlo_broadcast(
      h, mxu_hlo_reduce(h, at_max, MXU_HLO_SUM, n->dim_count, n->dims), from,
      kept);
  accumulate(g, a,
             mxu_hlo_binary(h, MXU_HLO_DIVIDE, mul(g, spread, at_max), ties));
}

/* ---- contractions ------------------------------------------------------ */

/* One operand's gradient of dot_general: dy contracted with the other
 * operand over the other's free dims, then transposed into this operand's
 * layout. mine/other: this operand's and the other's batch and
 * contracting dims; free_at: where dy's dims for the other's free dims
 * start. */
static mxu_hlo_value dot_operand(grad *g, mxu_hlo_value dy, mxu_hlo_value other,
                                 int rank, int batch, const int64_t *my_batch,
                                 const int64_t *other_batch, int contract,
                                 const int64_t *my_contract,
                                 const int64_t *other_contract, int free_at) {
  /* A copy: mxu_hlo_dot below may move the nodes. */
  const mxu_hlo_shape shape = g->h->nodes[other].shape, *o = &shape;
  int64_t dy_batch[2] = {0}, dy_free[MXU_HLO_MAX_RANK] = {0},
          other_free[MXU_HLO_MAX_RANK] = {0};
  int frees = 0;
  for (int i = 0; i < batch; i++) dy_batch[i] = i;
  for (int d = 0; d < o->rank; d++)
    if (!mxu_hlo_listed(d, batch, other_batch) &&
        !mxu_hlo_listed(d, contract, other_contract)) {
      other_free[frees] = d;
      dy_free[frees] = free_at + frees;
      frees++;
    }
  mxu_hlo_value r = mxu_hlo_dot(g->h, dy, other, batch, dy_batch, other_batch,
                                frees, dy_free, other_free);
  /* r's dims: batch, my free dims (in order), then the other's
   * contracting dims in the other's order, each standing for mine. */
  int64_t source[MXU_HLO_MAX_RANK];
  int at = 0;
  for (int i = 0; i < batch; i++) source[at++] = my_batch[i];
  for (int d = 0; d < rank; d++)
    if (!mxu_hlo_listed(d, batch, my_batch) &&
        !mxu_hlo_listed(d, contract, my_contract))
      source[at++] = d;
  for (int d = 0; d < o->rank; d++)
    for (int j = 0; j < contract; j++)
      if (other_contract[j] == d) source[at++] = my_contract[j];
  int64_t perm[MXU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[source[i]] = i;
  return mxu_hlo_transpose(g->h, r, perm);
}

static void dot(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  mxu_hlo_value a = n->in[0], b = n->in[1];
  int ra = g->h->nodes[a].shape.rank, rb = g->h->nodes[b].shape.rank;
  int a_free = ra - n->batch_count - n->contract_count;
  if (g->reach[a])
    accumulate(g, a,
               dot_operand(g, dy, b, ra, n->batch_count, n->lhs_batch,
                           n->rhs_batch, n->contract_count, n->lhs_contract,
                           n->rhs_contract, n->batch_count + a_free));
  if (g->reach[b])
    accumulate(g, b,
               dot_operand(g, dy, a, rb, n->batch_count, n->rhs_batch,
                           n->lhs_batch, n->contract_count, n->rhs_contract,
                           n->lhs_contract, n->batch_count));
}

static void convolution(grad *g, const mxu_hlo_node *n, mxu_hlo_value dy) {
  mxu_hlo *h = g->h;
  if (strcmp(n->spec[0], "b01f") || strcmp(n->spec[1], "01io") ||
      strcmp(n->spec[2], "b01f") || n->batch_groups != 1) {
    h->status = mxu_fail(MXU_ERR_UNSUPPORTED,
                         "hlo: no gradient of a convolution's gradient");
    return;
  }
  mxu_hlo_value x = n->in[0], k = n->in[1];
  const mxu_hlo_shape xs = h->nodes[x].shape, ks = h->nodes[k].shape;
  const mxu_hlo_window *w = &n->window;
  int64_t groups = w->feature_groups;
  if (g->reach[x]) {
    int64_t x_hw[2] = {xs.dims[1], xs.dims[2]};
    accumulate(g, x, mxu_hlo_convolution_backward_data(h, dy, k, w, x_hw));
  }
  if (g->reach[k]) {
    /* x and dy correlated: x's channels act as the batch, the samples as
     * the features (JAX's _conv_general_dilated_transpose_rhs). */
    mxu_hlo_window t = {.feature_groups = 1};
    for (int s = 0; s < 2; s++) {
      int64_t lhs = mxu_hlo_dilated(xs.dims[1 + s], w->lhs_dilation[s]);
      int64_t rhs = mxu_hlo_dilated(ks.dims[s], w->rhs_dilation[s]);
      int64_t out = mxu_hlo_dilated(n->shape.dims[1 + s], w->stride[s]);
      t.stride[s] = w->rhs_dilation[s];
      t.rhs_dilation[s] = w->stride[s];
      t.lhs_dilation[s] = w->lhs_dilation[s];
      t.pad_low[s] = w->pad_low[s];
      t.pad_high[s] = (out - lhs) + (rhs - w->pad_low[s] - 1);
    }
    if (groups > 1) {
      accumulate(g, k,
                 mxu_hlo_convolution_general(h, x, dy, &t, "f01b", "i01o",
                                             "01bf", groups));
      return;
    }
    /* The same in the canonical layout, transposed by hand (see above):
     * x as (C, H, W, N), dy as (H, W, N, C'), the result (C, kh, kw, C'). */
    const int64_t x_perm[4] = {3, 1, 2, 0}, dy_perm[4] = {1, 2, 0, 3};
    mxu_hlo_value c =
        mxu_hlo_convolution(h, mxu_hlo_transpose(h, x, x_perm),
                            mxu_hlo_transpose(h, dy, dy_perm), &t);
    accumulate(g, k, mxu_hlo_transpose(h, c, dy_perm));
  }
}

/* Max pooling's gradient where the windows tile the input (stride =
 * size, no dilation, at most 16 places): dy to each window's first
 * maximum in row-major order (as select_and_scatter). Each place of the
 * windows is a strided slice of x; the gradient at a place is dy where
 * the place holds the maximum and no earlier place did; the places are
 * interleaved back. Elementwise ops XLA's CPU code fuses into one loop
 * over the output; the scatter it makes of select_and_scatter runs on one
 * thread. 0 where the windows do not tile. */
static int tiled_max_grad(grad *g, mxu_hlo_value x, mxu_hlo_value y,
                          const mxu_hlo_window *w, mxu_hlo_value dy) {
  mxu_hlo *h = g->h;
  for (int s = 0; s < 2; s++)
    if (w->stride[s] != w->size[s] || w->lhs_dilation[s] != 1 ||
        w->rhs_dilation[s] != 1)
      return 0;
  int64_t a = w->size[0], b = w->size[1];
  if (a * b > 16) return 0;
  const mxu_hlo_shape xs = h->nodes[x].shape, ys = h->nodes[y].shape;
  int64_t rows = ys.dims[1] * a, cols = ys.dims[2] * b;
  /* What the windows cover: the padding added, what they leave cut. */
  int64_t low[4] = {0, w->pad_low[0], w->pad_low[1], 0}, none[4] = {0};
  int64_t high[4] = {0, rows - xs.dims[1] - low[1], cols - xs.dims[2] - low[2],
                     0};
  mxu_hlo_value covered = mxu_hlo_pad(h, x, -INFINITY, low, high, none);
  mxu_hlo_shape pred = ys;
  pred.dtype = MXU_HLO_PRED;
  mxu_hlo_value taken = mxu_hlo_constant(h, pred, 0.0);
  mxu_hlo_value zero = mxu_hlo_full_like(h, dy, 0.0), rows_of[16] = {0};
  int64_t one[6] = {ys.dims[0], ys.dims[1], 1, ys.dims[2], 1, ys.dims[3]};
  mxu_hlo_shape place = mxu_hlo_shape_make(ys.dtype, 6, one);
  for (int64_t i = 0; i < a; i++) {
    mxu_hlo_value row = 0;
    for (int64_t j = 0; j < b; j++) {
      int64_t start[4] = {0, i, j, 0}, stride[4] = {1, a, b, 1};
      int64_t limit[4] = {xs.dims[0], rows, cols, xs.dims[3]};
      mxu_hlo_value at = mxu_hlo_slice(h, covered, start, limit, stride);
      mxu_hlo_value hit =
          mxu_hlo_select(h, taken, mxu_hlo_constant(h, pred, 0.0),
                         mxu_hlo_compare_op(h, MXU_HLO_EQ, at, y));
      taken = mxu_hlo_select(h, hit, hit, taken);
      mxu_hlo_value part =
          mxu_hlo_reshape(h, mxu_hlo_select(h, hit, dy, zero), place);
      row = row ? mxu_hlo_concatenate(h, row, part, 4) : part;
    }
    rows_of[i] = row;
  }
  mxu_hlo_value spread = rows_of[0];
  for (int64_t i = 1; i < a; i++)
    spread = mxu_hlo_concatenate(h, spread, rows_of[i], 2);
  int64_t whole[4] = {xs.dims[0], rows, cols, xs.dims[3]};
  for (int d = 0; d < 4; d++) low[d] = -low[d], high[d] = -high[d];
  accumulate(
      g, x,
      mxu_hlo_pad(
          h, mxu_hlo_reshape(h, spread, mxu_hlo_shape_make(xs.dtype, 4, whole)),
          0.0, low, high, none));
  return 1;
}

static void reduce_window(grad *g, const mxu_hlo_node *n, mxu_hlo_value v,
                          mxu_hlo_value dy) {
  mxu_hlo *h = g->h;
  mxu_hlo_value x = n->in[0];
  const mxu_hlo_window *w = &n->window;
  if (n->reducer == MXU_HLO_MAX) {
    if (!tiled_max_grad(g, x, v, w, dy))
      accumulate(g, x, mxu_hlo_select_and_scatter(h, x, dy, w));
    return;
  }
  /* A sum's: dy spread out by the strides, summed over each window. */
  const mxu_hlo_shape *xs = &h->nodes[x].shape;
  int64_t low[4] = {0}, high[4] = {0}, interior[4] = {0};
  for (int s = 0; s < 2; s++) {
    mxu_hlo_backward_padding(xs->dims[1 + s], w->size[s], w->stride[s],
                             n->shape.dims[1 + s], w->pad_low[s],
                             w->lhs_dilation[s], 1, &low[1 + s], &high[1 + s]);
    interior[1 + s] = w->stride[s] - 1;
  }
  mxu_hlo_value spread = mxu_hlo_pad(h, dy, 0.0, low, high, interior);
  mxu_hlo_window sum = {.size = {w->size[0], w->size[1]},
                        .stride = {1, 1},
                        .lhs_dilation = {1, 1},
                        .rhs_dilation = {1, 1}};
  accumulate(g, x, mxu_hlo_reduce_window(h, spread, MXU_HLO_SUM, &sum));
}

/* ---- the pass ---------------------------------------------------------- */

static void backward(grad *g, mxu_hlo_value v) {
  mxu_hlo *h = g->h;
  mxu_hlo_node n = h->nodes[v]; /* a copy: appending moves the nodes */
  mxu_hlo_value dy = g->adjoint[v];
  switch (n.op) {
  case MXU_HLO_BROADCAST: broadcast(g, &n, dy); return;
  case MXU_HLO_RESHAPE:
    accumulate(g, n.in[0], mxu_hlo_reshape(h, dy, h->nodes[n.in[0]].shape));
    return;
  case MXU_HLO_TRANSPOSE: {
    int64_t inverse[MXU_HLO_MAX_RANK];
    for (int i = 0; i < n.dim_count; i++) inverse[n.dims[i]] = i;
    accumulate(g, n.in[0], mxu_hlo_transpose(h, dy, inverse));
    return;
  }
  case MXU_HLO_REVERSE:
    accumulate(g, n.in[0], mxu_hlo_reverse(h, dy, n.dim_count, n.dims));
    return;
  case MXU_HLO_SLICE: slice(g, &n, dy); return;
  case MXU_HLO_CONCATENATE: concatenate(g, &n, dy); return;
  case MXU_HLO_PAD: pad(g, &n, dy); return;
  case MXU_HLO_REDUCE: reduce(g, &n, v, dy); return;
  case MXU_HLO_DOT: dot(g, &n, dy); return;
  case MXU_HLO_CONVOLUTION: convolution(g, &n, dy); return;
  case MXU_HLO_REDUCE_WINDOW: reduce_window(g, &n, v, dy); return;
  case MXU_HLO_ALL_REDUCE:
    accumulate(g, n.in[0], mxu_hlo_all_reduce(h, dy));
    return;
  default: elementwise(g, &n, v, dy); return;
  }
}

mxu_status mxu_hlo_gradients(mxu_hlo *h, mxu_hlo_value of, mxu_hlo_value seed,
                             int count, const mxu_hlo_value *wrt,
                             mxu_hlo_value *grads) {
  if (h->status != MXU_OK) return h->status;
  grad g = {.h = h, .count = h->count};
  g.adjoint = calloc((size_t)g.count, sizeof *g.adjoint);
  g.reach = calloc((size_t)g.count, 1);
  if (!g.adjoint || !g.reach) {
    free(g.adjoint), free(g.reach);
    return mxu_fail(MXU_ERR_NOMEM, "hlo: out of memory");
  }
  for (int i = 0; i < count; i++) g.reach[wrt[i]] = 1;
  /* A comparison's truth values have no gradient (Masking's mask of its
   * input): nothing past one reaches back. */
  for (int v = 1; v < g.count; v++)
    for (int i = 0; i < h->nodes[v].count && h->nodes[v].op != MXU_HLO_COMPARE;
         i++)
      g.reach[v] |= g.reach[h->nodes[v].in[i]];
  accumulate(&g, of, seed);
  for (int v = of; v > 0 && h->status == MXU_OK; v--)
    if (g.adjoint[v]) backward(&g, v);
  for (int i = 0; i < count; i++)
    grads[i] = g.adjoint[wrt[i]] ? g.adjoint[wrt[i]]
                                 : mxu_hlo_full_like(h, wrt[i], 0.0);
  free(g.adjoint), free(g.reach);
  return h->status;
}
