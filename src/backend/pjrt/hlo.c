/* hlo.c — the graph builder: each op checks its operands and works out
 * its result's shape as StableHLO defines it, and appends a node. The
 * first failure is kept in h->status and every later op returns 0. */
#include "backend/pjrt/hlo.h"

#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mxu_hlo_init(mxu_hlo *h) { memset(h, 0, sizeof *h); }

void mxu_hlo_free(mxu_hlo *h) {
  for (int v = 1; v < h->count; v++) free(h->nodes[v].values);
  free(h->nodes);
  memset(h, 0, sizeof *h);
}

mxu_hlo_shape mxu_hlo_shape_make(mxu_hlo_dtype dtype, int rank,
                                 const int64_t *dims) {
  mxu_hlo_shape s = {.dtype = dtype, .rank = rank};
  for (int i = 0; i < rank && i < MXU_HLO_MAX_RANK; i++) s.dims[i] = dims[i];
  return s;
}

int64_t mxu_hlo_count(const mxu_hlo_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dims[i];
  return n;
}

const mxu_hlo_shape *mxu_hlo_shape_of(const mxu_hlo *h, mxu_hlo_value v) {
  /* No value (an op failed): a scalar, so emitters that chain ops on it
   * go on safely until the builder's failure is looked at. */
  static const mxu_hlo_shape none = {.dtype = MXU_HLO_F32};
  return v > 0 && v < h->count ? &h->nodes[v].shape : &none;
}

static int same_shape(const mxu_hlo_shape *a, const mxu_hlo_shape *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* Fails the builder (once) and returns 0. */
static mxu_hlo_value fail(mxu_hlo *h, mxu_status status, const char *format,
                          ...) __attribute__((format(printf, 3, 4)));
static mxu_hlo_value fail(mxu_hlo *h, mxu_status status, const char *format,
                          ...) {
  if (h->status != MXU_OK) return 0;
  char message[512];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  h->status = mxu_fail(status, "hlo: %s", message);
  return 0;
}

/* Whether every operand is a value (a failed op gave 0). */
static int valid(const mxu_hlo *h, int count, const mxu_hlo_value *in) {
  if (h->status != MXU_OK) return 0;
  for (int i = 0; i < count; i++)
    if (in[i] <= 0 || in[i] >= h->count) return 0;
  return 1;
}

static mxu_hlo_node *append(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_shape shape,
                            int count, const mxu_hlo_value *in) {
  if (h->count == 0) h->count = 1; /* node 0 stands for no value */
  if (h->count >= h->capacity) {
    int capacity = h->capacity ? 2 * h->capacity : 256;
    mxu_hlo_node *nodes = realloc(h->nodes, (size_t)capacity * sizeof *nodes);
    if (!nodes) {
      fail(h, MXU_ERR_NOMEM, "out of memory");
      return NULL;
    }
    h->nodes = nodes;
    h->capacity = capacity;
  }
  mxu_hlo_node *n = &h->nodes[h->count++];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->shape = shape;
  n->count = count;
  for (int i = 0; i < count; i++) n->in[i] = in[i];
  return n;
}

static mxu_hlo_value last(const mxu_hlo *h) { return h->count - 1; }

mxu_hlo_value mxu_hlo_parameter(mxu_hlo *h, mxu_hlo_shape shape) {
  if (h->status != MXU_OK) return 0;
  if (h->count > 1 && h->nodes[h->count - 1].op != MXU_HLO_PARAMETER)
    return fail(h, MXU_ERR_ARG, "parameters come before every other op");
  if (!append(h, MXU_HLO_PARAMETER, shape, 0, NULL)) return 0;
  h->params++;
  return last(h);
}

mxu_hlo_value mxu_hlo_constant(mxu_hlo *h, mxu_hlo_shape shape, double value) {
  if (h->status != MXU_OK) return 0;
  mxu_hlo_node *n = append(h, MXU_HLO_CONSTANT, shape, 0, NULL);
  if (!n) return 0;
  n->number = value;
  return last(h);
}

mxu_hlo_value mxu_hlo_constant_values(mxu_hlo *h, mxu_hlo_shape shape,
                                      const double *values) {
  if (h->status != MXU_OK) return 0;
  if (shape.dtype != MXU_HLO_F32 && shape.dtype != MXU_HLO_F64)
    return fail(h, MXU_ERR_ARG, "constant: values of floating types only");
  size_t bytes = (size_t)mxu_hlo_count(&shape) * sizeof(double);
  double *copy = malloc(bytes ? bytes : 1);
  if (!copy) return fail(h, MXU_ERR_NOMEM, "hlo: out of memory");
  memcpy(copy, values, bytes);
  mxu_hlo_node *n = append(h, MXU_HLO_CONSTANT, shape, 0, NULL);
  if (!n) {
    free(copy);
    return 0;
  }
  n->values = copy;
  return last(h);
}

mxu_hlo_value mxu_hlo_full_like(mxu_hlo *h, mxu_hlo_value v, double value) {
  if (!valid(h, 1, &v)) return 0;
  return mxu_hlo_constant(h, h->nodes[v].shape, value);
}

static int is_elementwise_binary(mxu_hlo_op op) {
  return op >= MXU_HLO_ADD && op <= MXU_HLO_SHIFT_RIGHT_LOGICAL;
}

static int is_elementwise_unary(mxu_hlo_op op) {
  return op >= MXU_HLO_NEGATE && op <= MXU_HLO_ERF;
}

mxu_hlo_value mxu_hlo_binary(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_value a,
                             mxu_hlo_value b) {
  mxu_hlo_value in[2] = {a, b};
  if (!valid(h, 2, in)) return 0;
  if (!is_elementwise_binary(op))
    return fail(h, MXU_ERR_ARG, "op %d is not elementwise binary", (int)op);
  if (!same_shape(&h->nodes[a].shape, &h->nodes[b].shape))
    return fail(h, MXU_ERR_SHAPE, "elementwise op %d on different shapes",
                (int)op);
  return append(h, op, h->nodes[a].shape, 2, in) ? last(h) : 0;
}

mxu_hlo_value mxu_hlo_unary(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_value a) {
  if (!valid(h, 1, &a)) return 0;
  if (!is_elementwise_unary(op))
    return fail(h, MXU_ERR_ARG, "op %d is not elementwise unary", (int)op);
  return append(h, op, h->nodes[a].shape, 1, &a) ? last(h) : 0;
}

mxu_hlo_value mxu_hlo_convert(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_dtype to) {
  if (!valid(h, 1, &a)) return 0;
  if (h->nodes[a].shape.dtype == to) return a;
  mxu_hlo_shape shape = h->nodes[a].shape;
  shape.dtype = to;
  return append(h, MXU_HLO_CONVERT, shape, 1, &a) ? last(h) : 0;
}

mxu_hlo_value mxu_hlo_compare_op(mxu_hlo *h, mxu_hlo_compare direction,
                                 mxu_hlo_value a, mxu_hlo_value b) {
  mxu_hlo_value in[2] = {a, b};
  if (!valid(h, 2, in)) return 0;
  if (!same_shape(&h->nodes[a].shape, &h->nodes[b].shape))
    return fail(h, MXU_ERR_SHAPE, "compare on different shapes");
  mxu_hlo_shape shape = h->nodes[a].shape;
  shape.dtype = MXU_HLO_PRED;
  mxu_hlo_node *n = append(h, MXU_HLO_COMPARE, shape, 2, in);
  if (!n) return 0;
  n->direction = direction;
  return last(h);
}

mxu_hlo_value mxu_hlo_select(mxu_hlo *h, mxu_hlo_value pred, mxu_hlo_value a,
                             mxu_hlo_value b) {
  mxu_hlo_value in[3] = {pred, a, b};
  if (!valid(h, 3, in)) return 0;
  mxu_hlo_shape p = h->nodes[pred].shape;
  p.dtype = h->nodes[a].shape.dtype;
  if (h->nodes[pred].shape.dtype != MXU_HLO_PRED ||
      !same_shape(&p, &h->nodes[a].shape) ||
      !same_shape(&h->nodes[a].shape, &h->nodes[b].shape))
    return fail(h, MXU_ERR_SHAPE, "select: shapes differ");
  return append(h, MXU_HLO_SELECT, h->nodes[a].shape, 3, in) ? last(h) : 0;
}

/* ---- shape ops --------------------------------------------------------- */

mxu_hlo_value mxu_hlo_broadcast(mxu_hlo *h, mxu_hlo_value a,
                                mxu_hlo_shape shape, const int64_t *dims) {
  if (!valid(h, 1, &a)) return 0;
  /* A copy: append may move the nodes. */
  const mxu_hlo_shape from = h->nodes[a].shape;
  shape.dtype = from.dtype;
  for (int i = 0; i < from.rank; i++)
    if (dims[i] < 0 || dims[i] >= shape.rank ||
        (from.dims[i] != 1 && from.dims[i] != shape.dims[dims[i]]))
      return fail(h, MXU_ERR_SHAPE, "broadcast: operand dim %d does not fit",
                  i);
  mxu_hlo_node *n = append(h, MXU_HLO_BROADCAST, shape, 1, &a);
  if (!n) return 0;
  n->dim_count = from.rank;
  for (int i = 0; i < from.rank; i++) n->dims[i] = dims[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_broadcast_to(mxu_hlo *h, mxu_hlo_value a,
                                   mxu_hlo_shape shape) {
  if (!valid(h, 1, &a)) return 0;
  int rank = h->nodes[a].shape.rank;
  if (rank > shape.rank)
    return fail(h, MXU_ERR_SHAPE, "broadcast to a lower rank");
  int64_t dims[MXU_HLO_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = shape.rank - rank + i;
  return mxu_hlo_broadcast(h, a, shape, dims);
}

mxu_hlo_value mxu_hlo_reshape(mxu_hlo *h, mxu_hlo_value a,
                              mxu_hlo_shape shape) {
  if (!valid(h, 1, &a)) return 0;
  shape.dtype = h->nodes[a].shape.dtype;
  if (mxu_hlo_count(&shape) != mxu_hlo_count(&h->nodes[a].shape))
    return fail(h, MXU_ERR_SHAPE, "reshape changes the element count");
  if (same_shape(&shape, &h->nodes[a].shape)) return a;
  return append(h, MXU_HLO_RESHAPE, shape, 1, &a) ? last(h) : 0;
}

mxu_hlo_value mxu_hlo_transpose(mxu_hlo *h, mxu_hlo_value a,
                                const int64_t *perm) {
  if (!valid(h, 1, &a)) return 0;
  mxu_hlo_shape from = h->nodes[a].shape, shape = from;
  int seen = 0, identity = 1;
  for (int i = 0; i < from.rank; i++) {
    if (perm[i] < 0 || perm[i] >= from.rank || (seen >> perm[i]) & 1)
      return fail(h, MXU_ERR_SHAPE, "transpose: not a permutation");
    seen |= 1 << perm[i];
    shape.dims[i] = from.dims[perm[i]];
    identity &= perm[i] == i;
  }
  if (identity) return a;
  mxu_hlo_node *n = append(h, MXU_HLO_TRANSPOSE, shape, 1, &a);
  if (!n) return 0;
  n->dim_count = from.rank;
  for (int i = 0; i < from.rank; i++) n->dims[i] = perm[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_reverse(mxu_hlo *h, mxu_hlo_value a, int count,
                              const int64_t *dims) {
  if (!valid(h, 1, &a)) return 0;
  mxu_hlo_node *n = append(h, MXU_HLO_REVERSE, h->nodes[a].shape, 1, &a);
  if (!n) return 0;
  n->dim_count = count;
  for (int i = 0; i < count; i++) n->dims[i] = dims[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_slice(mxu_hlo *h, mxu_hlo_value a, const int64_t *start,
                            const int64_t *limit, const int64_t *stride) {
  if (!valid(h, 1, &a)) return 0;
  mxu_hlo_shape shape = h->nodes[a].shape;
  for (int i = 0; i < shape.rank; i++) {
    if (start[i] < 0 || limit[i] > shape.dims[i] || start[i] > limit[i] ||
        stride[i] < 1)
      return fail(h, MXU_ERR_SHAPE, "slice: dim %d out of range", i);
    shape.dims[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
  }
  mxu_hlo_node *n = append(h, MXU_HLO_SLICE, shape, 1, &a);
  if (!n) return 0;
  for (int i = 0; i < shape.rank; i++)
    n->a[i] = start[i], n->b[i] = limit[i], n->c[i] = stride[i];
  return last(h);
}

static mxu_hlo_shape scalar(mxu_hlo_dtype dtype) {
  return (mxu_hlo_shape){.dtype = dtype};
}

mxu_hlo_value mxu_hlo_pad(mxu_hlo *h, mxu_hlo_value a, double value,
                          const int64_t *low, const int64_t *high,
                          const int64_t *interior) {
  if (!valid(h, 1, &a)) return 0;
  mxu_hlo_shape shape = h->nodes[a].shape;
  for (int i = 0; i < shape.rank; i++) {
    int64_t d = shape.dims[i];
    if (interior[i] < 0)
      return fail(h, MXU_ERR_SHAPE, "pad: negative interior padding");
    shape.dims[i] = low[i] + high[i] + d + (d > 0 ? (d - 1) * interior[i] : 0);
    if (shape.dims[i] < 0) return fail(h, MXU_ERR_SHAPE, "pad: dim %d < 0", i);
  }
  mxu_hlo_value in[2] = {a, mxu_hlo_constant(h, scalar(shape.dtype), value)};
  if (!valid(h, 2, in)) return 0;
  mxu_hlo_node *n = append(h, MXU_HLO_PAD, shape, 2, in);
  if (!n) return 0;
  for (int i = 0; i < shape.rank; i++)
    n->a[i] = low[i], n->b[i] = high[i], n->c[i] = interior[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_concatenate(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b,
                                  int64_t dim) {
  mxu_hlo_value in[2] = {a, b};
  if (!valid(h, 2, in)) return 0;
  mxu_hlo_shape sa = h->nodes[a].shape, sb = h->nodes[b].shape;
  int fits =
      sa.rank == sb.rank && sa.dtype == sb.dtype && dim >= 0 && dim < sa.rank;
  for (int d = 0; fits && d < sa.rank; d++)
    fits = d == dim || sa.dims[d] == sb.dims[d];
  if (!fits) return fail(h, MXU_ERR_SHAPE, "concatenate: shapes differ");
  sa.dims[dim] += sb.dims[dim];
  mxu_hlo_node *n = append(h, MXU_HLO_CONCATENATE, sa, 2, in);
  if (!n) return 0;
  n->dims[0] = dim;
  n->dim_count = 1;
  return last(h);
}

/* ---- reductions and contractions --------------------------------------- */

/* The reducer's identity: 0, or the lowest float (-inf). */
static double identity_of(mxu_hlo_reducer reducer) {
  return reducer == MXU_HLO_SUM ? 0.0 : -INFINITY;
}

/* A reduction's node: x and the reducer's identity as its initial value. */
static mxu_hlo_node *append_reducing(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_value x,
                                     mxu_hlo_shape shape,
                                     mxu_hlo_reducer reducer) {
  mxu_hlo_value in[2] = {
      x, mxu_hlo_constant(h, scalar(shape.dtype), identity_of(reducer))};
  if (!valid(h, 2, in)) return NULL;
  mxu_hlo_node *n = append(h, op, shape, 2, in);
  if (n) n->reducer = reducer;
  return n;
}

mxu_hlo_value mxu_hlo_reduce(mxu_hlo *h, mxu_hlo_value a,
                             mxu_hlo_reducer reducer, int count,
                             const int64_t *dims) {
  if (!valid(h, 1, &a)) return 0;
  mxu_hlo_shape from = h->nodes[a].shape, shape = {.dtype = from.dtype};
  int gone = 0;
  for (int i = 0; i < count; i++) {
    if (dims[i] < 0 || dims[i] >= from.rank || (gone >> dims[i]) & 1)
      return fail(h, MXU_ERR_SHAPE, "reduce: bad dims");
    gone |= 1 << dims[i];
  }
  for (int i = 0; i < from.rank; i++)
    if (!((gone >> i) & 1)) shape.dims[shape.rank++] = from.dims[i];
  mxu_hlo_node *n = append_reducing(h, MXU_HLO_REDUCE, a, shape, reducer);
  if (!n) return 0;
  n->dim_count = count;
  for (int i = 0; i < count; i++) n->dims[i] = dims[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_dot(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b,
                          int batch, const int64_t *a_batch,
                          const int64_t *b_batch, int contract,
                          const int64_t *a_contract,
                          const int64_t *b_contract) {
  mxu_hlo_value in[2] = {a, b};
  if (!valid(h, 2, in)) return 0;
  const mxu_hlo_shape *sa = &h->nodes[a].shape, *sb = &h->nodes[b].shape;
  if (batch > 2 || contract > 2 || sa->dtype != sb->dtype)
    return fail(h, MXU_ERR_SHAPE, "dot: unsupported dims or types");
  mxu_hlo_shape shape = {.dtype = sa->dtype};
  for (int i = 0; i < batch; i++) {
    if (sa->dims[a_batch[i]] != sb->dims[b_batch[i]])
      return fail(h, MXU_ERR_SHAPE, "dot: batch dims differ");
    shape.dims[shape.rank++] = sa->dims[a_batch[i]];
  }
  for (int i = 0; i < contract; i++)
    if (sa->dims[a_contract[i]] != sb->dims[b_contract[i]])
      return fail(h, MXU_ERR_SHAPE, "dot: contracting dims differ (%lld, %lld)",
                  (long long)sa->dims[a_contract[i]],
                  (long long)sb->dims[b_contract[i]]);
  for (int d = 0; d < sa->rank; d++)
    if (!mxu_hlo_listed(d, batch, a_batch) &&
        !mxu_hlo_listed(d, contract, a_contract))
      shape.dims[shape.rank++] = sa->dims[d];
  for (int d = 0; d < sb->rank; d++)
    if (!mxu_hlo_listed(d, batch, b_batch) &&
        !mxu_hlo_listed(d, contract, b_contract))
      shape.dims[shape.rank++] = sb->dims[d];
  if (shape.rank > MXU_HLO_MAX_RANK)
    return fail(h, MXU_ERR_SHAPE, "dot: result rank %d", shape.rank);
  mxu_hlo_node *n = append(h, MXU_HLO_DOT, shape, 2, in);
  if (!n) return 0;
  n->batch_count = batch;
  n->contract_count = contract;
  for (int i = 0; i < batch; i++)
    n->lhs_batch[i] = a_batch[i], n->rhs_batch[i] = b_batch[i];
  for (int i = 0; i < contract; i++)
    n->lhs_contract[i] = a_contract[i], n->rhs_contract[i] = b_contract[i];
  return last(h);
}

mxu_hlo_value mxu_hlo_matmul(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b) {
  const int64_t one = 1, zero = 0;
  return mxu_hlo_dot(h, a, b, 0, NULL, NULL, 1, &one, &zero);
}

/* The dim a spec letter names; -1 when it names none. */
static int spec_dim(const char *spec, char letter) {
  const char *at = strchr(spec, letter);
  return at ? (int)(at - spec) : -1;
}

/* Spatial dim s of a window's output: the input (dilated, padded) swept
 * by a span of `span` at the window's stride. */
static int64_t window_out(const mxu_hlo_window *w, int s, int64_t in,
                          int64_t span) {
  int64_t padded =
      mxu_hlo_dilated(in, w->lhs_dilation[s]) + w->pad_low[s] + w->pad_high[s];
  return padded < span ? 0 : (padded - span) / w->stride[s] + 1;
}

mxu_hlo_value
mxu_hlo_convolution_general(mxu_hlo *h, mxu_hlo_value lhs, mxu_hlo_value rhs,
                            const mxu_hlo_window *window, const char *lhs_spec,
                            const char *rhs_spec, const char *out_spec,
                            int64_t batch_groups) {
  mxu_hlo_value in[2] = {lhs, rhs};
  if (!valid(h, 2, in)) return 0;
  const mxu_hlo_shape *x = &h->nodes[lhs].shape, *k = &h->nodes[rhs].shape;
  int64_t groups = window->feature_groups > 0 ? window->feature_groups : 1;
  if (batch_groups < 1) batch_groups = 1;
  if (x->rank != 4 || k->rank != 4 || strlen(lhs_spec) != 4 ||
      strlen(rhs_spec) != 4 || strlen(out_spec) != 4)
    return fail(h, MXU_ERR_SHAPE, "convolution: 2-D only");
  int64_t batch = x->dims[spec_dim(lhs_spec, 'b')];
  int64_t features = x->dims[spec_dim(lhs_spec, 'f')];
  int64_t k_in = k->dims[spec_dim(rhs_spec, 'i')];
  int64_t k_out = k->dims[spec_dim(rhs_spec, 'o')];
  if (features != k_in * groups || k_out % groups || k_out % batch_groups ||
      batch % batch_groups)
    return fail(h, MXU_ERR_SHAPE,
                "convolution: %lld features, kernel %lld in x %lld out, "
                "%lld groups",
                (long long)features, (long long)k_in, (long long)k_out,
                (long long)groups);
  mxu_hlo_shape shape = {.dtype = x->dtype, .rank = 4};
  shape.dims[spec_dim(out_spec, 'b')] = batch / batch_groups;
  shape.dims[spec_dim(out_spec, 'f')] = k_out;
  for (int s = 0; s < 2; s++) {
    char letter = (char)('0' + s);
    shape.dims[spec_dim(out_spec, letter)] =
        window_out(window, s, x->dims[spec_dim(lhs_spec, letter)],
                   mxu_hlo_dilated(k->dims[spec_dim(rhs_spec, letter)],
                                   window->rhs_dilation[s]));
  }
  mxu_hlo_node *n = append(h, MXU_HLO_CONVOLUTION, shape, 2, in);
  if (!n) return 0;
  n->window = *window;
  n->window.feature_groups = groups;
  n->batch_groups = batch_groups;
  memcpy(n->spec[0], lhs_spec, 5);
  memcpy(n->spec[1], rhs_spec, 5);
  memcpy(n->spec[2], out_spec, 5);
  return last(h);
}

mxu_hlo_value mxu_hlo_convolution(mxu_hlo *h, mxu_hlo_value x,
                                  mxu_hlo_value kernel,
                                  const mxu_hlo_window *window) {
  return mxu_hlo_convolution_general(h, x, kernel, window, "b01f", "01io",
                                     "b01f", 1);
}

mxu_hlo_value mxu_hlo_reduce_window(mxu_hlo *h, mxu_hlo_value x,
                                    mxu_hlo_reducer reducer,
                                    const mxu_hlo_window *window) {
  if (!valid(h, 1, &x)) return 0;
  mxu_hlo_shape shape = h->nodes[x].shape;
  if (shape.rank != 4)
    return fail(h, MXU_ERR_SHAPE, "reduce_window: NHWC only");
  for (int s = 0; s < 2; s++)
    shape.dims[1 + s] =
        window_out(window, s, shape.dims[1 + s], window->size[s]);
  mxu_hlo_node *n =
      append_reducing(h, MXU_HLO_REDUCE_WINDOW, x, shape, reducer);
  if (!n) return 0;
  n->window = *window;
  return last(h);
}

mxu_hlo_value mxu_hlo_select_and_scatter(mxu_hlo *h, mxu_hlo_value x,
                                         mxu_hlo_value source,
                                         const mxu_hlo_window *window) {
  mxu_hlo_value in[3] = {x, source, 0};
  if (!valid(h, 2, in)) return 0;
  in[2] = mxu_hlo_constant(h, scalar(h->nodes[x].shape.dtype), 0.0);
  if (!valid(h, 3, in)) return 0;
  mxu_hlo_node *n =
      append(h, MXU_HLO_SELECT_AND_SCATTER, h->nodes[x].shape, 3, in);
  if (!n) return 0;
  n->window = *window;
  return last(h);
}

mxu_hlo_value mxu_hlo_all_reduce(mxu_hlo *h, mxu_hlo_value a) {
  if (!valid(h, 1, &a)) return 0;
  return append(h, MXU_HLO_ALL_REDUCE, h->nodes[a].shape, 1, &a) ? last(h) : 0;
}

mxu_hlo_value mxu_hlo_iota(mxu_hlo *h, mxu_hlo_shape shape, int64_t dim) {
  if (h->status != MXU_OK) return 0;
  if (dim < 0 || dim >= shape.rank)
    return fail(h, MXU_ERR_SHAPE, "iota: dim %lld", (long long)dim);
  mxu_hlo_node *n = append(h, MXU_HLO_IOTA, shape, 0, NULL);
  if (!n) return 0;
  n->dims[0] = dim;
  n->dim_count = 1;
  return last(h);
}

void mxu_hlo_backward_padding(int64_t in, int64_t window, int64_t stride,
                              int64_t out, int64_t pad_low,
                              int64_t lhs_dilation, int64_t rhs_dilation,
                              int64_t *low, int64_t *high) {
  int64_t lhs = mxu_hlo_dilated(in, lhs_dilation),
          rhs = mxu_hlo_dilated(window, rhs_dilation);
  *low = rhs - pad_low - 1;
  *high = lhs + rhs - 1 - mxu_hlo_dilated(out, stride) - *low;
}

mxu_hlo_value mxu_hlo_convolution_backward_data(mxu_hlo *h, mxu_hlo_value dy,
                                                mxu_hlo_value k,
                                                const mxu_hlo_window *w,
                                                const int64_t x_hw[2]) {
  mxu_hlo_value in[2] = {dy, k};
  if (!valid(h, 2, in)) return 0;
  const mxu_hlo_shape ks = h->nodes[k].shape, ys = h->nodes[dy].shape;
  int64_t groups = w->feature_groups > 0 ? w->feature_groups : 1;
  /* The kernel reversed, in and out exchanged (per group). */
  mxu_hlo_value kernel = k;
  if (groups > 1) {
    int64_t split[5] = {ks.dims[0], ks.dims[1], ks.dims[2], groups,
                        ks.dims[3] / groups};
    int64_t perm[5] = {0, 1, 3, 2, 4};
    int64_t merged[4] = {ks.dims[0], ks.dims[1], groups * ks.dims[2],
                         ks.dims[3] / groups};
    kernel = mxu_hlo_reshape(h, k, mxu_hlo_shape_make(ks.dtype, 5, split));
    kernel = mxu_hlo_transpose(h, kernel, perm);
    kernel =
        mxu_hlo_reshape(h, kernel, mxu_hlo_shape_make(ks.dtype, 4, merged));
  }
  const int64_t spatial[2] = {0, 1}, swap_io[4] = {0, 1, 3, 2};
  /* In and out exchanged by a transpose of our own: XLA's CPU compiler
   * makes a convolution of another layout canonical only outside loops,
   * and runs one it leaves as it is on one thread, slowly. */
  kernel =
      mxu_hlo_transpose(h, mxu_hlo_reverse(h, kernel, 2, spatial), swap_io);
  mxu_hlo_window t = {.feature_groups = groups};
  for (int s = 0; s < 2; s++) {
    /* Strides and input dilation exchange (JAX's
     * _conv_general_dilated_transpose_lhs). */
    t.stride[s] = w->lhs_dilation[s];
    t.lhs_dilation[s] = w->stride[s];
    t.rhs_dilation[s] = w->rhs_dilation[s];
    mxu_hlo_backward_padding(x_hw[s], ks.dims[s], w->stride[s], ys.dims[1 + s],
                             w->pad_low[s], w->lhs_dilation[s],
                             w->rhs_dilation[s], &t.pad_low[s], &t.pad_high[s]);
  }
  return mxu_hlo_convolution(h, dy, kernel, &t);
}
