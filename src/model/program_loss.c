/* program_loss.c — mxu's losses and metrics as StableHLO ops for the pjrt
 * programs, each row's as loss.c computes it (the softmax cross-entropies
 * from the logits before the softmax, as Keras fuses them), summed over
 * the rows whose mask is 1. Their gradients follow from grad.c's rules
 * (a clip passes none outside its range, as on the host). */
#include "model/model.h"

#include <math.h>

/* Keras' backend epsilon, loss.c's clip. */
#define LOSS_EPSILON 1e-7f

typedef struct ops {
  mxu_hlo *h;
  mxu_hlo_value like;
} ops;

static mxu_hlo_value k(const ops *o, double v) {
  return mxu_hlo_full_like(o->h, o->like, v);
}
#define bin(o, op, a, b) mxu_hlo_binary((o)->h, op, a, b)
#define un(o, op, a) mxu_hlo_unary((o)->h, op, a)
#define MUL(a, b) mxu_hlo_mul(o->h, a, b)
#define ADD(a, b) mxu_hlo_add(o->h, a, b)
#define SUB(a, b) mxu_hlo_sub(o->h, a, b)
#define DIV(a, b) mxu_hlo_div(o->h, a, b)
#define CLIP(a, lo, hi)                                                        \
  bin(o, MXU_HLO_MINIMUM, bin(o, MXU_HLO_MAXIMUM, a, k(o, lo)), k(o, hi))

/* Per row of (rows, k): the sum over the row. */
static mxu_hlo_value row_sums(mxu_hlo *h, mxu_hlo_value v) {
  const int64_t last = 1;
  return mxu_hlo_reduce(h, v, MXU_HLO_SUM, 1, &last);
}

/* Over the rows whose mask is 1. */
static mxu_hlo_value masked_sum(mxu_hlo *h, mxu_hlo_value per_row,
                                mxu_hlo_value mask) {
  const int64_t rows = 0;
  return mxu_hlo_reduce(h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, per_row, mask),
                        MXU_HLO_SUM, 1, &rows);
}

/* -t . log softmax(z) = logsumexp(z) sum(t) - z . t per row (targets
 * need not sum to 1: a row of zeros costs nothing, as on the host). */
static mxu_hlo_value cross_entropy(mxu_hlo *h, mxu_hlo_value z,
                                   mxu_hlo_value target) {
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, z);
  int64_t rows = 0, last = 1;
  mxu_hlo_value max = mxu_hlo_reduce(h, z, MXU_HLO_MAX, 1, &last);
  mxu_hlo_value shifted = mxu_hlo_binary(h, MXU_HLO_SUBTRACT, z,
                                         mxu_hlo_broadcast(h, max, s, &rows));
  mxu_hlo_value lse = mxu_hlo_binary(
      h, MXU_HLO_ADD, max,
      mxu_hlo_unary(h, MXU_HLO_LOG,
                    row_sums(h, mxu_hlo_unary(h, MXU_HLO_EXP, shifted))));
  return mxu_hlo_binary(
      h, MXU_HLO_SUBTRACT, mxu_hlo_mul(h, lse, row_sums(h, target)),
      row_sums(h, mxu_hlo_binary(h, MXU_HLO_MULTIPLY, z, target)));
}

/* The labels as one-hot rows of k classes. */
static mxu_hlo_value one_hot(mxu_hlo *h, mxu_hlo_value labels, int batch,
                             int64_t classes) {
  int64_t dims[2] = {batch, classes}, rows = 0;
  mxu_hlo_shape s = mxu_hlo_shape_make(MXU_HLO_S32, 2, dims);
  return mxu_hlo_convert(
      h,
      mxu_hlo_compare_op(h, MXU_HLO_EQ, mxu_hlo_iota(h, s, 1),
                         mxu_hlo_broadcast(h, labels, s, &rows)),
      MXU_HLO_F32);
}

/* Each row's first largest value's index (as float), argmax's. */
static mxu_hlo_value first_argmax(mxu_hlo *h, mxu_hlo_value y) {
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, y);
  int64_t last = 1, rows = 0;
  mxu_hlo_value max = mxu_hlo_broadcast(
      h, mxu_hlo_reduce(h, y, MXU_HLO_MAX, 1, &last), s, &rows);
  mxu_hlo_value index = mxu_hlo_convert(
      h, mxu_hlo_iota(h, mxu_hlo_shape_make(MXU_HLO_S32, s.rank, s.dims), 1),
      MXU_HLO_F32);
  /* the least index at the maximum, as -max(-index) */
  mxu_hlo_value negated =
      mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_EQ, y, max),
                     mxu_hlo_unary(h, MXU_HLO_NEGATE, index),
                     mxu_hlo_full_like(h, index, -1e9));
  return mxu_hlo_unary(h, MXU_HLO_NEGATE,
                       mxu_hlo_reduce(h, negated, MXU_HLO_MAX, 1, &last));
}

/* 1.0 where the comparison holds, else 0.0. */
static mxu_hlo_value truth(mxu_hlo *h, mxu_hlo_compare c, mxu_hlo_value a,
                           mxu_hlo_value b) {
  return mxu_hlo_convert(h, mxu_hlo_compare_op(h, c, a, b), MXU_HLO_F32);
}

/* tf.math.in_top_k with k 5: fewer than 5 scores above the target's, which
 * must be finite. */
static mxu_hlo_value in_top_k(mxu_hlo *h, mxu_hlo_value y, mxu_hlo_value hot) {
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, y);
  int64_t rows = 0;
  mxu_hlo_value score = row_sums(
      h, mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_GT, hot, k(o, 0.5)), y,
                        k(o, 0.0)));
  mxu_hlo_value above = row_sums(
      h,
      mxu_hlo_convert(h,
                      mxu_hlo_compare_op(h, MXU_HLO_GT, y,
                                         mxu_hlo_broadcast(h, score, s, &rows)),
                      MXU_HLO_F32));
  mxu_hlo_value few = mxu_hlo_compare_op(
      h, MXU_HLO_LT, above, mxu_hlo_full_like(h, above, MXU_TOP_K));
  mxu_hlo_value finite =
      mxu_hlo_compare_op(h, MXU_HLO_LT, mxu_hlo_unary(h, MXU_HLO_ABS, score),
                         mxu_hlo_full_like(h, score, INFINITY));
  return mxu_hlo_select(h, finite, mxu_hlo_convert(h, few, MXU_HLO_F32),
                        mxu_hlo_full_like(h, score, 0.0));
}

/* A row's sum over its `values` values. */
static mxu_hlo_value mean_of(mxu_hlo *h, mxu_hlo_value sums, int64_t values) {
  return mxu_hlo_binary(h, MXU_HLO_DIVIDE, sums,
                        mxu_hlo_full_like(h, sums, (double)values));
}

/* 1 where loss.c's predicted(): above the threshold (0.5, or -inf with
 * top_k) and, with top_k, among the row's top_k (fewer than top_k values
 * above it, or equal before it); else 0. y (rows, k). */
static mxu_hlo_value positive(const ops *o, const mxu_metric_options *m,
                              mxu_hlo_value y) {
  mxu_hlo *h = o->h;
  mxu_hlo_value p = k(o, 1.0); /* top_k's threshold: -inf */
  if (m->has_threshold || !m->top_k)
    p = truth(h, MXU_HLO_GT, y,
              k(o, m->has_threshold ? (float)m->threshold : 0.5f));
  if (!m->top_k) return p;
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  int64_t cube[3] = {s.dims[0], s.dims[1], s.dims[1]};
  const int64_t others[2] = {0, 2}, mine[2] = {0, 1}, last = 2;
  mxu_hlo_shape c = mxu_hlo_shape_make(MXU_HLO_F32, 3, cube);
  mxu_hlo_value a = mxu_hlo_broadcast(h, y, c, others); /* [r, j, i]: y_i */
  mxu_hlo_value b = mxu_hlo_broadcast(h, y, c, mine);   /* [r, j, i]: y_j */
  mxu_hlo_shape ic = mxu_hlo_shape_make(MXU_HLO_S32, 3, cube);
  mxu_hlo_value before =
      truth(h, MXU_HLO_LT, mxu_hlo_iota(h, ic, 2), mxu_hlo_iota(h, ic, 1));
  mxu_hlo_value above =
      mxu_hlo_add(h, truth(h, MXU_HLO_GT, a, b),
                  mxu_hlo_mul(h, truth(h, MXU_HLO_EQ, a, b), before));
  mxu_hlo_value rank = mxu_hlo_reduce(h, above, MXU_HLO_SUM, 1, &last);
  return mxu_hlo_mul(h, p, truth(h, MXU_HLO_LT, rank, k(o, m->top_k)));
}

/* 1 where t != 0 (a positive target), else 0. */
static mxu_hlo_value true_(const ops *o, mxu_hlo_value t) {
  return truth(o->h, MXU_HLO_NE, t, k(o, 0.0));
}

/* v (rows, k) where the confusion metrics count: every column, or
 * class_id's only. */
static mxu_hlo_value counted(const ops *o, const mxu_metric_options *m,
                             mxu_hlo_value v) {
  if (!m->has_class_id) return v;
  mxu_hlo_shape s = *mxu_hlo_shape_of(o->h, v);
  mxu_hlo_value column = mxu_hlo_convert(
      o->h, mxu_hlo_iota(o->h, mxu_hlo_shape_make(MXU_HLO_S32, 2, s.dims), 1),
      MXU_HLO_F32);
  return mxu_hlo_mul(o->h, v,
                     truth(o->h, MXU_HLO_EQ, column, k(o, m->class_id)));
}

static mxu_hlo_value element_loss(mxu_hlo *h, const mxu_output_loss *c,
                                  mxu_hlo_value y, mxu_hlo_value t);
static mxu_hlo_value vectors_per_row(mxu_hlo *h, const mxu_output_loss *c,
                                     mxu_hlo_value y, mxu_hlo_value t,
                                     int64_t n);

/* Each row's metric (loss.c's row_metric): y and t (rows, k); hot the
 * label's or the targets' argmax as one-hot rows. */
static mxu_hlo_value row_metric(mxu_hlo *h, mxu_metric_kind kind,
                                const mxu_metric_options *options,
                                mxu_hlo_value y, mxu_hlo_value t,
                                mxu_hlo_value hot, int64_t values) {
  const ops oo = {h, y}, *o = &oo;
  switch (kind) {
  /* Times the one-hot row's sum: a label outside the classes (an ignored
   * -1 or 255) has a row of zeros, and never hits, as on the host. */
  case MXU_METRIC_SPARSE_ACCURACY:
  case MXU_METRIC_CATEGORICAL_ACCURACY:
    return mxu_hlo_mul(
        h, truth(h, MXU_HLO_EQ, first_argmax(h, y), first_argmax(h, hot)),
        row_sums(h, hot));
  case MXU_METRIC_SPARSE_TOP_K:
  case MXU_METRIC_TOP_K:
    return mxu_hlo_mul(h, in_top_k(h, y, hot), row_sums(h, hot));
  case MXU_METRIC_BINARY_ACCURACY: {
    float threshold = options->has_threshold ? (float)options->threshold : 0.5f;
    mxu_hlo_value above = mxu_hlo_convert(
        h, mxu_hlo_compare_op(h, MXU_HLO_GT, y, k(o, threshold)), MXU_HLO_F32);
    return mean_of(h, row_sums(h, truth(h, MXU_HLO_EQ, above, t)), values);
  }
  case MXU_METRIC_MAE:
    return mean_of(h, row_sums(h, un(o, MXU_HLO_ABS, SUB(y, t))), values);
  case MXU_METRIC_MSE:
  case MXU_METRIC_RMSE:
    return mean_of(h, row_sums(h, MUL(SUB(y, t), SUB(y, t))), values);
  case MXU_METRIC_AUC:
  case MXU_METRIC_AUC_PR:
  case MXU_METRIC_F_SCORE:
  case MXU_METRIC_MEAN_IOU:
  case MXU_METRIC_ONE_HOT_MEAN_IOU:
  case MXU_METRIC_BINARY_IOU: return 0; /* a tally: emit_metric's */
  case MXU_METRIC_PRECISION:            /* true positives */
  case MXU_METRIC_RECALL:
  case MXU_METRIC_TRUE_POSITIVES:
  case MXU_METRIC_FALSE_POSITIVES:
  case MXU_METRIC_TRUE_NEGATIVES:
  case MXU_METRIC_FALSE_NEGATIVES: {
    mxu_hlo_value p = positive(o, options, y), q = true_(o, t);
    if (kind == MXU_METRIC_FALSE_POSITIVES || kind == MXU_METRIC_TRUE_NEGATIVES)
      q = SUB(k(o, 1.0), q);
    if (kind == MXU_METRIC_TRUE_NEGATIVES || kind == MXU_METRIC_FALSE_NEGATIVES)
      p = SUB(k(o, 1.0), p);
    return row_sums(h, counted(o, options, MUL(p, q)));
  }
  case MXU_METRIC_BINARY_CROSSENTROPY:
  case MXU_METRIC_MAPE:
  case MXU_METRIC_MSLE:
  case MXU_METRIC_LOGCOSH:
  case MXU_METRIC_POISSON:
  case MXU_METRIC_HINGE:
  case MXU_METRIC_SQUARED_HINGE: {
    mxu_output_loss loss = mxu_output_loss_defaults();
    loss.loss = mxu_metric_loss(kind);
    return mean_of(h, row_sums(h, element_loss(h, &loss, y, t)), values);
  }
  case MXU_METRIC_CATEGORICAL_HINGE: /* the mean over the vectors */
  case MXU_METRIC_COSINE_SIMILARITY: {
    mxu_output_loss loss = mxu_output_loss_defaults();
    int cosine = kind == MXU_METRIC_COSINE_SIMILARITY;
    loss.loss = cosine ? MXU_COSINE_SIMILARITY : MXU_CATEGORICAL_HINGE;
    int64_t n = options->vector > 0 ? options->vector : values;
    mxu_hlo_value sum = vectors_per_row(h, &loss, y, t, n);
    return mean_of(h, cosine ? un(o, MXU_HLO_NEGATE, sum) : sum, values / n);
  }
  }
  return 0;
}

/* Precision's divisor a row: its predicted positives; recall's: its true
 * ones. */
static mxu_hlo_value row_positives(mxu_hlo *h, mxu_metric_kind kind,
                                   const mxu_metric_options *options,
                                   mxu_hlo_value y, mxu_hlo_value t) {
  const ops oo = {h, y}, *o = &oo;
  return row_sums(h,
                  counted(o, options,
                          kind == MXU_METRIC_PRECISION ? positive(o, options, y)
                                                       : true_(o, t)));
}

/* loss.c's element(): each value's loss, y and t (rows, k). */
static mxu_hlo_value element_loss(mxu_hlo *h, const mxu_output_loss *c,
                                  mxu_hlo_value y, mxu_hlo_value t) {
  const ops oo = {h, y}, *o = &oo;
  switch (c->loss) {
  case MXU_BINARY_CROSSENTROPY: {
    float ls = c->label_smoothing;
    if (ls > 0) t = ADD(MUL(t, k(o, 1.0f - ls)), k(o, 0.5f * ls));
    if (c->from_logits) /* max(z, 0) - z t + log(1 + e^-|z|) */
      return ADD(
          SUB(bin(o, MXU_HLO_MAXIMUM, y, k(o, 0.0)), MUL(y, t)),
          un(o, MXU_HLO_LOG,
             ADD(k(o, 1.0), un(o, MXU_HLO_EXP,
                               un(o, MXU_HLO_NEGATE, un(o, MXU_HLO_ABS, y))))));
    mxu_hlo_value p = CLIP(y, LOSS_EPSILON, 1.0f - LOSS_EPSILON);
    return un(
        o, MXU_HLO_NEGATE,
        ADD(MUL(t, un(o, MXU_HLO_LOG, p)),
            MUL(SUB(k(o, 1.0), t), un(o, MXU_HLO_LOG, SUB(k(o, 1.0), p)))));
  }
  case MXU_MEAN_SQUARED_ERROR: return MUL(SUB(y, t), SUB(y, t));
  case MXU_MEAN_ABSOLUTE_ERROR: return un(o, MXU_HLO_ABS, SUB(y, t));
  case MXU_HUBER: {
    mxu_hlo_value e = SUB(y, t), a = un(o, MXU_HLO_ABS, e);
    float d = c->huber_delta;
    return mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_LE, a, k(o, d)),
                          MUL(k(o, 0.5), MUL(e, e)),
                          SUB(MUL(k(o, d), a), k(o, 0.5f * d * d)));
  }
  case MXU_KL_DIVERGENCE: {
    mxu_hlo_value tc = CLIP(t, LOSS_EPSILON, 1.0f);
    return MUL(tc, un(o, MXU_HLO_LOG, DIV(tc, CLIP(y, LOSS_EPSILON, 1.0f))));
  }
  case MXU_MEAN_ABSOLUTE_PERCENTAGE_ERROR:
    return MUL(k(o, 100.0), DIV(un(o, MXU_HLO_ABS, SUB(t, y)),
                                bin(o, MXU_HLO_MAXIMUM, un(o, MXU_HLO_ABS, t),
                                    k(o, LOSS_EPSILON))));
  case MXU_MEAN_SQUARED_LOGARITHMIC_ERROR: {
    mxu_hlo_value d =
        SUB(un(o, MXU_HLO_LOG,
               ADD(bin(o, MXU_HLO_MAXIMUM, y, k(o, LOSS_EPSILON)), k(o, 1.0))),
            un(o, MXU_HLO_LOG,
               ADD(bin(o, MXU_HLO_MAXIMUM, t, k(o, LOSS_EPSILON)), k(o, 1.0))));
    return MUL(d, d);
  }
  case MXU_LOG_COSH: { /* x + softplus(-2x) - log 2 */
    mxu_hlo_value x = SUB(y, t), z = MUL(x, k(o, -2.0));
    mxu_hlo_value softplus = ADD(
        bin(o, MXU_HLO_MAXIMUM, z, k(o, 0.0)),
        un(o, MXU_HLO_LOG,
           ADD(k(o, 1.0), un(o, MXU_HLO_EXP,
                             un(o, MXU_HLO_NEGATE, un(o, MXU_HLO_ABS, z))))));
    return SUB(ADD(x, softplus), k(o, 0.69314718f));
  }
  case MXU_POISSON:
    return SUB(y, MUL(t, un(o, MXU_HLO_LOG, ADD(y, k(o, LOSS_EPSILON)))));
  case MXU_HINGE:
  case MXU_SQUARED_HINGE: { /* a target 0 counts as -1 */
    mxu_hlo_value signed_t = mxu_hlo_select(
        h, mxu_hlo_compare_op(h, MXU_HLO_EQ, t, k(o, 0.0)), k(o, -1.0), t);
    mxu_hlo_value m =
        bin(o, MXU_HLO_MAXIMUM, SUB(k(o, 1.0), MUL(signed_t, y)), k(o, 0.0));
    return c->loss == MXU_HINGE ? m : MUL(m, m);
  }
  case MXU_BINARY_FOCAL_CROSSENTROPY: {
    float ls = c->label_smoothing;
    if (ls > 0) t = ADD(MUL(t, k(o, 1.0f - ls)), k(o, 0.5f * ls));
    mxu_hlo_value p = c->from_logits ? un(o, MXU_HLO_LOGISTIC, y) : y;
    mxu_hlo_value clipped = CLIP(p, LOSS_EPSILON, 1.0f - LOSS_EPSILON);
    mxu_hlo_value bce =
        un(o, MXU_HLO_NEGATE,
           ADD(MUL(t, un(o, MXU_HLO_LOG, clipped)),
               MUL(SUB(k(o, 1.0), t),
                   un(o, MXU_HLO_LOG, SUB(k(o, 1.0), clipped)))));
    mxu_hlo_value p_t =
        ADD(MUL(t, p), MUL(SUB(k(o, 1.0), t), SUB(k(o, 1.0), p)));
    mxu_hlo_value e =
        MUL(bin(o, MXU_HLO_POWER, SUB(k(o, 1.0), p_t), k(o, c->gamma)), bce);
    if (!c->apply_class_balancing) return e;
    return MUL(e, ADD(MUL(t, k(o, c->alpha)),
                      MUL(SUB(k(o, 1.0), t), k(o, 1.0f - c->alpha))));
  }
  default: return 0;
  }
}

/* Keras 3's normalize's factor per row: min(rsqrt(x . x), 1e7). */
static mxu_hlo_value inverse_norm(const ops *o, mxu_hlo_value x) {
  mxu_hlo_value n = un(o, MXU_HLO_RSQRT, row_sums(o->h, MUL(x, x)));
  return bin(o, MXU_HLO_MINIMUM, n,
             mxu_hlo_full_like(o->h, n, 1.0f / LOSS_EPSILON));
}

/* loss.c's vector losses of y and t (vectors, n): each vector's. */
static mxu_hlo_value vector_loss(mxu_hlo *h, const mxu_output_loss *c,
                                 mxu_hlo_value y, mxu_hlo_value t) {
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  const int64_t last = 1, rows = 0;
  switch (c->loss) {
  case MXU_CATEGORICAL_HINGE: {
    mxu_hlo_value pos = row_sums(h, MUL(t, y));
    mxu_hlo_value neg =
        mxu_hlo_reduce(h, MUL(SUB(k(o, 1.0), t), y), MXU_HLO_MAX, 1, &last);
    mxu_hlo_value m = ADD(SUB(neg, pos), mxu_hlo_full_like(h, pos, 1.0));
    return mxu_hlo_binary(h, MXU_HLO_MAXIMUM, m, mxu_hlo_full_like(h, m, 0.0));
  }
  case MXU_COSINE_SIMILARITY:
    return un(o, MXU_HLO_NEGATE,
              MUL(row_sums(h, MUL(t, y)),
                  MUL(inverse_norm(o, y), inverse_norm(o, t))));
  case MXU_CATEGORICAL_FOCAL_CROSSENTROPY: {
    float ls = c->label_smoothing;
    if (ls > 0) t = ADD(MUL(t, k(o, 1.0f - ls)), k(o, ls / (float)s.dims[1]));
    mxu_hlo_value p = y;
    if (c->from_logits) {
      mxu_hlo_value max = mxu_hlo_broadcast(
          h, mxu_hlo_reduce(h, y, MXU_HLO_MAX, 1, &last), s, &rows);
      p = un(o, MXU_HLO_EXP, SUB(y, max));
    }
    mxu_hlo_value q = DIV(p, mxu_hlo_broadcast(h, row_sums(h, p), s, &rows));
    mxu_hlo_value clipped = CLIP(q, LOSS_EPSILON, 1.0f - LOSS_EPSILON);
    mxu_hlo_value focal =
        bin(o, MXU_HLO_POWER, SUB(k(o, 1.0), clipped), k(o, c->gamma));
    return row_sums(h, MUL(MUL(k(o, -c->alpha), focal),
                           MUL(t, un(o, MXU_HLO_LOG, clipped))));
  }
  default: return 0;
  }
}

/* A vector loss's (or metric's) per row of y and t (rows, values): the
 * sum over the row's vectors of `n` values each. */
static mxu_hlo_value vectors_per_row(mxu_hlo *h, const mxu_output_loss *c,
                                     mxu_hlo_value y, mxu_hlo_value t,
                                     int64_t n) {
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, y);
  int64_t vectors[2] = {s.dims[0] * s.dims[1] / n, n};
  int64_t per_row[2] = {s.dims[0], s.dims[1] / n};
  mxu_hlo_shape v = mxu_hlo_shape_make(MXU_HLO_F32, 2, vectors);
  mxu_hlo_value each =
      vector_loss(h, c, mxu_hlo_reshape(h, y, v), mxu_hlo_reshape(h, t, v));
  if (!each) return 0;
  return row_sums(
      h, mxu_hlo_reshape(h, each, mxu_hlo_shape_make(MXU_HLO_F32, 2, per_row)));
}

/* Each scored row's weights (step.c's row_mask, loss_rows and
 * row_weight): a sample's mask over its positions, 0 where the padding
 * masks; in the metric 1 / positions; in the loss also 0 where the label
 * is the ignored class, and where the loss keeps rows (a padding mask,
 * ignore_class) the replica's samples over its kept rows (0 when none, as
 * Keras' divide_no_nan), else 1 / positions. */
static void row_weights(mxu_hlo *h, const mxu_output_loss *c,
                        const mxu_emit_loss_input *in, int64_t positions,
                        mxu_hlo_value *loss, mxu_hlo_value *metric) {
  int64_t spread[2] = {in->batch, positions}, rows = in->batch * positions;
  const int64_t samples = 0, all = 0;
  mxu_hlo_shape grid = mxu_hlo_shape_make(MXU_HLO_F32, 2, spread);
  mxu_hlo_value kept = mxu_hlo_broadcast(h, in->mask, grid, &samples);
  if (in->padding)
    kept =
        mxu_hlo_mul(h, kept,
                    mxu_hlo_convert(h,
                                    mxu_hlo_compare_op(
                                        h, MXU_HLO_NE, in->padding,
                                        mxu_hlo_full_like(h, in->padding, 0)),
                                    MXU_HLO_F32));
  kept = mxu_hlo_reshape(h, kept, mxu_hlo_shape_make(MXU_HLO_F32, 1, &rows));
  *metric = mxu_hlo_mul(h, kept, mxu_hlo_full_like(h, kept, 1.0 / positions));
  if (!in->padding && !c->has_ignore_class) {
    *loss = *metric;
    return;
  }
  if (c->has_ignore_class)
    kept = mxu_hlo_mul(
        h, kept,
        mxu_hlo_convert(h,
                        mxu_hlo_compare_op(
                            h, MXU_HLO_NE, in->labels,
                            mxu_hlo_full_like(h, in->labels, c->ignore_class)),
                        MXU_HLO_F32));
  mxu_hlo_value own = mxu_hlo_reduce(h, in->mask, MXU_HLO_SUM, 1, &all);
  mxu_hlo_value valid = mxu_hlo_reduce(h, kept, MXU_HLO_SUM, 1, &all);
  mxu_hlo_value factor = mxu_hlo_select(
      h,
      mxu_hlo_compare_op(h, MXU_HLO_GT, valid, mxu_hlo_full_like(h, valid, 0)),
      mxu_hlo_div(h, own, valid), mxu_hlo_full_like(h, valid, 0));
  *loss = mxu_hlo_mul(
      h, kept, mxu_hlo_broadcast_to(h, factor, *mxu_hlo_shape_of(h, kept)));
}

/* An AUC's curve (loss.c's mxu_auc_counts): of each value of y and t
 * (rows, k) in a row `kept` weighs 1, its bucket ceil(y (T - 1)) - 1
 * (clamped into [0, T)) as a one-hot row: bucket b holds z = y (T - 1)
 * when b < z <= b + 1, the first also z <= 0 and the last z > T - 1;
 * sums[0] each bucket's true weight (t), sums[1] its false (1 - t). */
static void emit_curve(mxu_hlo *h, mxu_hlo_value y, mxu_hlo_value t,
                       mxu_hlo_value kept, mxu_hlo_value *sums) {
  mxu_hlo_shape rows = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  int64_t n = rows.dims[0] * rows.dims[1], T = MXU_AUC_THRESHOLDS;
  int64_t grid_dims[2] = {n, T};
  const int64_t first = 0, all = 0;
  mxu_hlo_shape flat = mxu_hlo_shape_make(MXU_HLO_F32, 1, &n);
  mxu_hlo_shape grid = mxu_hlo_shape_make(MXU_HLO_F32, 2, grid_dims);
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_value z = mxu_hlo_broadcast(
      h, mxu_hlo_reshape(h, MUL(y, k(o, (double)(T - 1))), flat), grid, &first);
  mxu_hlo_value b = mxu_hlo_convert(
      h, mxu_hlo_iota(h, mxu_hlo_shape_make(MXU_HLO_S32, 2, grid_dims), 1),
      MXU_HLO_F32);
  const ops go = {h, b}, *g = &go;
  mxu_hlo_value low = mxu_hlo_select(
      h, mxu_hlo_compare_op(h, MXU_HLO_EQ, b, k(g, 0.0)), k(g, -1e30), b);
  mxu_hlo_value high =
      mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_EQ, b, k(g, T - 1.0)),
                     k(g, 1e30), mxu_hlo_add(h, b, k(g, 1.0)));
  mxu_hlo_value hot =
      MUL(mxu_hlo_convert(h, mxu_hlo_compare_op(h, MXU_HLO_GT, z, low),
                          MXU_HLO_F32),
          mxu_hlo_convert(h, mxu_hlo_compare_op(h, MXU_HLO_LE, z, high),
                          MXU_HLO_F32));
  mxu_hlo_value weight =
      mxu_hlo_reshape(h, mxu_hlo_broadcast(h, kept, rows, &first), flat);
  mxu_hlo_value truth = MUL(mxu_hlo_reshape(h, t, flat), weight);
  mxu_hlo_value falsity = SUB(weight, truth);
  sums[0] =
      mxu_hlo_reduce(h, MUL(hot, mxu_hlo_broadcast(h, truth, grid, &first)),
                     MXU_HLO_SUM, 1, &all);
  sums[1] =
      mxu_hlo_reduce(h, MUL(hot, mxu_hlo_broadcast(h, falsity, grid, &first)),
                     MXU_HLO_SUM, 1, &all);
}

/* An F-score's counts (loss.c's f_score_counts): of y and t (rows, k) in
 * the rows `kept` weighs 1, per value the true positives and false
 * positives (sums[0], 2k), the false negatives and the targets' sum
 * (sums[1], 2k). */
static void emit_f_score(mxu_hlo *h, const mxu_metric_options *options,
                         mxu_hlo_value y, mxu_hlo_value t, mxu_hlo_value kept,
                         mxu_hlo_value *sums) {
  mxu_hlo_shape rows = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  const int64_t first = 0, last = 1;
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_value p;
  if (options->threshold > 0) {
    p = mxu_hlo_convert(
        h, mxu_hlo_compare_op(h, MXU_HLO_GT, y, k(o, options->threshold)),
        MXU_HLO_F32);
  } else {
    mxu_hlo_value max = mxu_hlo_broadcast(
        h, mxu_hlo_reduce(h, y, MXU_HLO_MAX, 1, &last), rows, &first);
    p = MUL(
        mxu_hlo_convert(h, mxu_hlo_compare_op(h, MXU_HLO_GE, y, max),
                        MXU_HLO_F32),
        mxu_hlo_convert(h,
                        mxu_hlo_compare_op(h, MXU_HLO_GT, un(o, MXU_HLO_ABS, y),
                                           k(o, 1e-9)),
                        MXU_HLO_F32));
  }
  mxu_hlo_value weight = mxu_hlo_broadcast(h, kept, rows, &first);
  mxu_hlo_value pw = MUL(p, weight), tw = MUL(t, weight);
  mxu_hlo_value counts[4] = {MUL(pw, t), MUL(pw, SUB(k(o, 1.0), t)),
                             MUL(SUB(weight, pw), t), tw};
  for (int i = 0; i < 4; i++)
    counts[i] = mxu_hlo_reduce(h, counts[i], MXU_HLO_SUM, 1, &first);
  sums[0] = mxu_hlo_concatenate(h, counts[0], counts[1], 0);
  sums[1] = mxu_hlo_concatenate(h, counts[2], counts[3], 0);
}

/* Each row's first largest value as a one-hot row (argmax's). */
static mxu_hlo_value argmax_hot(mxu_hlo *h, mxu_hlo_value v) {
  mxu_hlo_shape rows = *mxu_hlo_shape_of(h, v); /* a copy: nodes move */
  return mxu_hlo_convert(
      h,
      mxu_hlo_compare_op(
          h, MXU_HLO_EQ,
          mxu_hlo_convert(
              h,
              mxu_hlo_iota(h, mxu_hlo_shape_make(MXU_HLO_S32, 2, rows.dims), 1),
              MXU_HLO_F32),
          mxu_hlo_broadcast(h, first_argmax(h, v), rows, (const int64_t[]){0})),
      MXU_HLO_F32);
}

/* A MeanIoU's counts (loss.c's iou_counts): of y and t (rows, k), t the
 * labels' one-hot rows (mean_iou: a label past the classes a row of 0,
 * left out) or the targets, in the rows `kept` weighs, per class the true
 * and false positives (sums[0], 2k), the false negatives and the true rows
 * (sums[1], 2k). */
static void emit_iou(mxu_hlo *h, mxu_metric_kind kind,
                     const mxu_metric_options *options, mxu_hlo_value y,
                     mxu_hlo_value t, mxu_hlo_value kept, mxu_hlo_value *sums) {
  mxu_hlo_shape rows = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  const int64_t first = 0;
  mxu_hlo_value w = kept;
  if (kind == MXU_METRIC_MEAN_IOU) w = mxu_hlo_mul(h, w, row_sums(h, t));
  if (options->has_ignore_class)
    w = mxu_hlo_mul(h, w,
                    truth(h, MXU_HLO_NE, first_argmax(h, t),
                          mxu_hlo_full_like(h, w, options->ignore_class)));
  mxu_hlo_value weight = mxu_hlo_broadcast(h, w, rows, &first);
  mxu_hlo_value true_hot = argmax_hot(h, t);
  mxu_hlo_value predicted = mxu_hlo_mul(h, argmax_hot(h, y), weight);
  mxu_hlo_value actual = mxu_hlo_mul(h, true_hot, weight);
  mxu_hlo_value hits = mxu_hlo_mul(h, predicted, true_hot);
  mxu_hlo_value counts[4] = {hits, mxu_hlo_sub(h, predicted, hits),
                             mxu_hlo_sub(h, actual, hits), actual};
  for (int i = 0; i < 4; i++)
    counts[i] = mxu_hlo_reduce(h, counts[i], MXU_HLO_SUM, 1, &first);
  sums[0] = mxu_hlo_concatenate(h, counts[0], counts[1], 0);
  sums[1] = mxu_hlo_concatenate(h, counts[2], counts[3], 0);
}

/* A BinaryIoU's counts (loss.c's binary_iou_counts): of y and t (rows, k),
 * every value, in the rows `kept` weighs, for classes 0 and 1 the true and
 * false positives (sums[0], 4), the false negatives and the true values
 * (sums[1], 4). */
static void emit_binary_iou(mxu_hlo *h, const mxu_metric_options *options,
                            mxu_hlo_value y, mxu_hlo_value t,
                            mxu_hlo_value kept, mxu_hlo_value *sums) {
  mxu_hlo_shape rows = *mxu_hlo_shape_of(h, y); /* a copy: nodes move */
  const int64_t first = 0, all[2] = {0, 1};
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_value w = mxu_hlo_broadcast(h, kept, rows, &first);
  mxu_hlo_value p1 =
      truth(h, MXU_HLO_GE, y,
            k(o, options->has_threshold ? options->threshold : 0.5));
  /* The target truncated: 1 on [1, 2), 0 on (-1, 1), else no class. */
  mxu_hlo_value t1 = MUL(truth(h, MXU_HLO_GE, t, k(o, 1.0)),
                         truth(h, MXU_HLO_LT, t, k(o, 2.0)));
  mxu_hlo_value t0 = MUL(truth(h, MXU_HLO_GT, t, k(o, -1.0)),
                         truth(h, MXU_HLO_LT, t, k(o, 1.0)));
  mxu_hlo_value p0 = SUB(k(o, 1.0), p1);
  t1 = MUL(t1, w);
  t0 = MUL(t0, w);
  /* Per class: tp, fp, fn, true values. */
  mxu_hlo_value counts[8] = {MUL(p0, t0), MUL(p1, t1), MUL(p0, t1), MUL(p1, t0),
                             MUL(p1, t0), MUL(p0, t1), t0,          t1};
  for (int i = 0; i < 8; i++)
    counts[i] = mxu_hlo_reshape(
        h, mxu_hlo_reduce(h, counts[i], MXU_HLO_SUM, 2, all),
        mxu_hlo_shape_make(MXU_HLO_F32, 1, (const int64_t[]){1}));
  mxu_hlo_value pairs[4];
  for (int i = 0; i < 4; i++)
    pairs[i] = mxu_hlo_concatenate(h, counts[2 * i], counts[2 * i + 1], 0);
  sums[0] = mxu_hlo_concatenate(h, pairs[0], pairs[1], 0);
  sums[1] = mxu_hlo_concatenate(h, pairs[2], pairs[3], 0);
}

int mxu_head_sum_count(const mxu_model *model, int head) {
  return 2 + 2 * model->heads[head].metric_count;
}

/* A head's metric m: its sum over the rows metric_mask weighs (1 /
 * positions each, or 0 where masked), and its divisor (the mean metrics'
 * count; precision's and recall's positives, counted whole). */
static mxu_status emit_metric(const mxu_model *model, int head, int m,
                              mxu_hlo *h, mxu_hlo_value y, mxu_hlo_value t,
                              mxu_hlo_value metric_mask, mxu_hlo_value count,
                              int64_t positions, mxu_hlo_value *sums) {
  /* The metric's own targets: the labels' one-hot rows, or the targets'
   * argmax. */
  mxu_metric_kind kind = model->heads[head].metric_kind[m];
  /* Counts: each kept row whole, not 1 / positions of it. */
  mxu_hlo_value whole =
      mxu_metric_is_mean(kind)
          ? 0
          : mxu_hlo_mul(h, metric_mask,
                        mxu_hlo_full_like(h, metric_mask, (double)positions));
  if (mxu_metric_has_curve(kind)) {
    /* from_logits: of sigmoid(y), 1 / (1 + e^-y) as the host's */
    const ops oo = {h, y}, *o = &oo;
    mxu_hlo_value p =
        model->heads[head].metric_options[m].from_logits
            ? DIV(k(o, 1.0),
                  ADD(k(o, 1.0), un(o, MXU_HLO_EXP, un(o, MXU_HLO_NEGATE, y))))
            : y;
    emit_curve(h, p, t, whole, sums);
    return h->status;
  }
  if (kind == MXU_METRIC_F_SCORE) {
    emit_f_score(h, &model->heads[head].metric_options[m], y, t, whole, sums);
    return h->status;
  }
  if (mxu_metric_is_iou(kind)) {
    emit_iou(h, kind, &model->heads[head].metric_options[m], y, t, whole, sums);
    return h->status;
  }
  if (kind == MXU_METRIC_BINARY_IOU) {
    emit_binary_iou(h, &model->heads[head].metric_options[m], y, t, whole,
                    sums);
    return h->status;
  }
  int64_t values = mxu_hlo_shape_of(h, y)->dims[1];
  mxu_hlo_value hot = t;
  if (kind == MXU_METRIC_CATEGORICAL_ACCURACY || kind == MXU_METRIC_TOP_K)
    hot = argmax_hot(h, t);
  mxu_hlo_value value = row_metric(
      h, kind, &model->heads[head].metric_options[m], y, t, hot, values);
  if (!value)
    return mxu_fail(MXU_ERR_UNSUPPORTED, "pjrt: metric %s is not emitted",
                    model->heads[head].metric[m]);
  sums[0] = masked_sum(h, value, metric_mask);
  sums[1] = count;
  if (mxu_metric_is_mean(kind)) return h->status;
  sums[0] = masked_sum(h, value, whole);
  sums[1] = masked_sum(
      h, row_positives(h, kind, &model->heads[head].metric_options[m], y, t),
      whole);
  return h->status;
}

mxu_status mxu_emit_loss(const mxu_model *model, int head,
                         const mxu_emit_loss_input *in, mxu_hlo_value *sums) {
  mxu_hlo *h = in->h;
  const mxu_output_loss *c = &model->heads[head].spec;
  const mxu_shape *out = &model->layers[model->heads[head].node].out_shape;
  /* A sequence's positions are rows of their own (loss.c's positions),
   * each 1 / positions of its sample's loss and metric. */
  int64_t positions = mxu_loss_positions(model, head);
  int64_t values = mxu_shape_count(out) / positions;
  int64_t dims[2] = {in->batch * positions, values};
  mxu_hlo_shape rows_shape = mxu_hlo_shape_make(MXU_HLO_F32, 2, dims);
  mxu_hlo_value mask = in->mask, metric_mask = in->mask;
  if (positions > 1 || c->has_ignore_class)
    row_weights(h, c, in, positions, &mask, &metric_mask);
  mxu_hlo_value y = mxu_hlo_reshape(h, in->y, rows_shape);
  int sparse = c->loss == MXU_SPARSE_CATEGORICAL_CROSSENTROPY;
  mxu_hlo_value t = sparse ? one_hot(h, in->labels, (int)dims[0], values)
                           : mxu_hlo_reshape(h, in->labels, rows_shape);
  const ops oo = {h, y}, *o = &oo;
  mxu_hlo_value per_row;
  if (mxu_loss_is_softmax(c->loss)) {
    if (!in->logits && !c->from_logits)
      return mxu_fail(MXU_ERR_UNSUPPORTED,
                      "pjrt: the cross-entropy needs the output to end in a "
                      "softmax, or from_logits");
    /* from_logits takes the output as the logits, a softmax's too (its
     * probabilities then pass through another), as Keras and the host. */
    mxu_hlo_value z =
        c->from_logits ? y : mxu_hlo_reshape(h, in->logits, rows_shape);
    float ls = c->label_smoothing;
    mxu_hlo_value smoothed =
        ls > 0 ? ADD(MUL(t, k(o, 1.0f - ls)), k(o, ls / (float)values)) : t;
    per_row = cross_entropy(h, z, smoothed);
  } else {
    /* Keras means over the last axis (KL divergence sums over it), then
     * over the sample's other axes. */
    int64_t last = out->dims[out->rank - 1];
    double divisor =
        c->loss == MXU_KL_DIVERGENCE ? (double)(values / last) : (double)values;
    int vectors = mxu_loss_of_vectors(c->loss);
    if (vectors) divisor = (double)(values / last);
    mxu_hlo_value e = vectors ? vectors_per_row(h, c, y, t, last)
                              : row_sums(h, element_loss(h, c, y, t));
    if (!e)
      return mxu_fail(MXU_ERR_UNSUPPORTED, "pjrt: loss %s is not emitted",
                      mxu_loss_name(c->loss));
    per_row = mean_of(h, e, (int64_t)divisor);
  }
  /* Each sample's weight over its positions' rows. */
  const int64_t samples = 0;
  int64_t spread[2] = {in->batch, positions};
  mxu_hlo_value w = mxu_hlo_reshape(
      h,
      mxu_hlo_broadcast(h, in->weights,
                        mxu_hlo_shape_make(MXU_HLO_F32, 2, spread), &samples),
      mxu_hlo_shape_make(MXU_HLO_F32, 1, &dims[0]));
  sums[0] = masked_sum(h, mxu_hlo_mul(h, per_row, w), mask);
  const int64_t all = 0;
  sums[1] = mxu_hlo_reduce(h, metric_mask, MXU_HLO_SUM, 1, &all);
  /* Weighted metrics count each row by its sample's weight too. */
  mxu_hlo_value weighted_mask = metric_mask, weighted_count = sums[1];
  if (mxu_head_weighs_metrics(&model->heads[head])) {
    weighted_mask = mxu_hlo_mul(h, metric_mask, w);
    weighted_count = mxu_hlo_reduce(h, weighted_mask, MXU_HLO_SUM, 1, &all);
  }
  for (int m = 0; m < model->heads[head].metric_count; m++) {
    int weighted = model->heads[head].metric_weighted[m];
    MXU_TRY(emit_metric(
        model, head, m, h, y, t, weighted ? weighted_mask : metric_mask,
        weighted ? weighted_count : sums[1], positions, sums + 2 + 2 * m));
  }
  return h->status;
}
