/* emit.c — what several layers' emitters share: Keras' activations as
 * StableHLO ops (their gradients follow from grad.c's rules: relu's is
 * the incoming gradient where x > 0, as TensorFlow's), and the bias. */
#include "backend/pjrt/hlo.h"

#include "core/core.h"

#include <math.h>

static mxu_hlo_value k(mxu_emit *e, mxu_hlo_value like, double value) {
  return mxu_hlo_full_like(e->h, like, value);
}

static mxu_hlo_value op2(mxu_emit *e, mxu_hlo_op op, mxu_hlo_value a,
                         mxu_hlo_value b) {
  return mxu_hlo_binary(e->h, op, a, b);
}

static mxu_hlo_value positive(mxu_emit *e, mxu_hlo_value x) {
  return mxu_hlo_compare_op(e->h, MXU_HLO_GT, x, k(e, x, 0.0));
}

static mxu_hlo_value relu(mxu_emit *e, mxu_hlo_value x) {
  return mxu_hlo_select(e->h, positive(e, x), x, k(e, x, 0.0));
}

static mxu_hlo_value relu6(mxu_emit *e, mxu_hlo_value x) {
  return op2(e, MXU_HLO_MINIMUM, relu(e, x), k(e, x, 6.0));
}

/* x > 0 ? x : alpha (e^x - 1) */
static mxu_hlo_value elu(mxu_emit *e, mxu_hlo_value x, double alpha) {
  mxu_hlo_value em1 = op2(e, MXU_HLO_SUBTRACT,
                          mxu_hlo_unary(e->h, MXU_HLO_EXP, x), k(e, x, 1.0));
  return mxu_hlo_select(e->h, positive(e, x), x,
                        op2(e, MXU_HLO_MULTIPLY, em1, k(e, x, alpha)));
}

/* log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|). */
static mxu_hlo_value softplus(mxu_emit *e, mxu_hlo_value x) {
  mxu_hlo_value neg_abs =
      mxu_hlo_unary(e->h, MXU_HLO_NEGATE, mxu_hlo_unary(e->h, MXU_HLO_ABS, x));
  mxu_hlo_value tail =
      mxu_hlo_unary(e->h, MXU_HLO_LOG,
                    op2(e, MXU_HLO_ADD, k(e, x, 1.0),
                        mxu_hlo_unary(e->h, MXU_HLO_EXP, neg_abs)));
  return op2(e, MXU_HLO_ADD, op2(e, MXU_HLO_MAXIMUM, x, k(e, x, 0.0)), tail);
}

/* Over the last dim, less its maximum first: softmax, or log_softmax's
 * shifted - log(sum(e^shifted)). */
static mxu_hlo_value softmax(mxu_emit *e, mxu_hlo_value x, int log) {
  const mxu_hlo_shape s = *mxu_hlo_shape_of(e->h, x);
  int64_t last = s.rank - 1, keep[MXU_HLO_MAX_RANK];
  for (int d = 0; d < last; d++) keep[d] = d;
  mxu_hlo_value max = mxu_hlo_reduce(e->h, x, MXU_HLO_MAX, 1, &last);
  mxu_hlo_value shifted =
      op2(e, MXU_HLO_SUBTRACT, x, mxu_hlo_broadcast(e->h, max, s, keep));
  mxu_hlo_value ex = mxu_hlo_unary(e->h, MXU_HLO_EXP, shifted);
  mxu_hlo_value sum = mxu_hlo_broadcast(
      e->h, mxu_hlo_reduce(e->h, ex, MXU_HLO_SUM, 1, &last), s, keep);
  if (log)
    return op2(e, MXU_HLO_SUBTRACT, shifted,
               mxu_hlo_unary(e->h, MXU_HLO_LOG, sum));
  e->logits = x;
  return op2(e, MXU_HLO_DIVIDE, ex, sum);
}

/* x's comparison with a number. */
static mxu_hlo_value is(mxu_emit *e, mxu_hlo_compare direction, mxu_hlo_value x,
                        double value) {
  return mxu_hlo_compare_op(e->h, direction, x, k(e, x, value));
}

/* Keras 3's newer ones, as its where()s and clips compute them (so their
 * gradients take the same branches). */
static mxu_hlo_value keras3_activation(mxu_emit *e, mxu_activation activation,
                                       mxu_hlo_value x) {
  mxu_hlo *h = e->h;
  switch (activation) {
  case MXU_CELU: return elu(e, x, 1.0);
  case MXU_HARD_TANH:
    return op2(e, MXU_HLO_MINIMUM, op2(e, MXU_HLO_MAXIMUM, x, k(e, x, -1.0)),
               k(e, x, 1.0));
  case MXU_LOG_SIGMOID:
    return mxu_hlo_unary(h, MXU_HLO_NEGATE,
                         softplus(e, mxu_hlo_unary(h, MXU_HLO_NEGATE, x)));
  case MXU_TANH_SHRINK:
    return op2(e, MXU_HLO_SUBTRACT, x, mxu_hlo_unary(h, MXU_HLO_TANH, x));
  case MXU_SQUAREPLUS: { /* left of 0 as 2 / (s - x): no cancellation */
    mxu_hlo_value s = mxu_hlo_unary(
        h, MXU_HLO_SQRT,
        op2(e, MXU_HLO_ADD, op2(e, MXU_HLO_MULTIPLY, x, x), k(e, x, 4.0)));
    return mxu_hlo_select(
        h, is(e, MXU_HLO_GE, x, 0.0),
        op2(e, MXU_HLO_MULTIPLY, op2(e, MXU_HLO_ADD, x, s), k(e, x, 0.5)),
        op2(e, MXU_HLO_DIVIDE, k(e, x, 2.0), op2(e, MXU_HLO_SUBTRACT, s, x)));
  }
  case MXU_SPARSE_PLUS: {
    mxu_hlo_value x1 = op2(e, MXU_HLO_ADD, x, k(e, x, 1.0));
    mxu_hlo_value q = op2(e, MXU_HLO_MULTIPLY, op2(e, MXU_HLO_MULTIPLY, x1, x1),
                          k(e, x, 0.25));
    return mxu_hlo_select(h, is(e, MXU_HLO_LE, x, -1.0), k(e, x, 0.0),
                          mxu_hlo_select(h, is(e, MXU_HLO_LT, x, 1.0), q, x));
  }
  case MXU_SPARSE_SIGMOID:
    return mxu_hlo_select(
        h, is(e, MXU_HLO_LE, x, -1.0), k(e, x, 0.0),
        mxu_hlo_select(h, is(e, MXU_HLO_GE, x, 1.0), k(e, x, 1.0),
                       op2(e, MXU_HLO_MULTIPLY,
                           op2(e, MXU_HLO_ADD, x, k(e, x, 1.0)),
                           k(e, x, 0.5))));
  case MXU_SOFT_SHRINK:
    return mxu_hlo_select(
        h, is(e, MXU_HLO_GT, x, 0.5), op2(e, MXU_HLO_SUBTRACT, x, k(e, x, 0.5)),
        mxu_hlo_select(h, is(e, MXU_HLO_LT, x, -0.5),
                       op2(e, MXU_HLO_ADD, x, k(e, x, 0.5)), k(e, x, 0.0)));
  case MXU_HARD_SHRINK:
    return mxu_hlo_select(
        h, is(e, MXU_HLO_GT, mxu_hlo_unary(h, MXU_HLO_ABS, x), 0.5), x,
        k(e, x, 0.0));
  default: return softmax(e, x, 1); /* MXU_LOG_SOFTMAX */
  }
}

mxu_hlo_value mxu_emit_activation(mxu_emit *e, mxu_activation activation,
                                  float alpha, mxu_hlo_value x) {
  mxu_hlo *h = e->h;
  if (h->status != MXU_OK || !x) return 0; /* an earlier op failed */
  switch (activation) {
  case MXU_LINEAR: return x;
  case MXU_RELU: return relu(e, x);
  case MXU_SIGMOID: return mxu_hlo_unary(h, MXU_HLO_LOGISTIC, x);
  case MXU_TANH: return mxu_hlo_unary(h, MXU_HLO_TANH, x);
  case MXU_SOFTMAX: return softmax(e, x, 0);
  case MXU_RELU6: return relu6(e, x);
  case MXU_LEAKY_RELU:
    return mxu_hlo_select(h, positive(e, x), x,
                          op2(e, MXU_HLO_MULTIPLY, x, k(e, x, alpha)));
  case MXU_ELU: return elu(e, x, alpha);
  case MXU_SELU:
    return op2(e, MXU_HLO_MULTIPLY, elu(e, x, 1.67326324235437728481),
               k(e, x, 1.05070098735548049342));
  case MXU_GELU_TANH: {
    /* x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 */
    mxu_hlo_value cube =
        op2(e, MXU_HLO_MULTIPLY, op2(e, MXU_HLO_MULTIPLY, x, x), x);
    mxu_hlo_value inner =
        op2(e, MXU_HLO_MULTIPLY,
            op2(e, MXU_HLO_ADD, x,
                op2(e, MXU_HLO_MULTIPLY, cube, k(e, x, 0.044715))),
            k(e, x, 0.79788456080286535588)); /* sqrt(2 / pi) */
    mxu_hlo_value t = op2(e, MXU_HLO_ADD, k(e, x, 1.0),
                          mxu_hlo_unary(h, MXU_HLO_TANH, inner));
    return op2(e, MXU_HLO_MULTIPLY, op2(e, MXU_HLO_MULTIPLY, x, t),
               k(e, x, 0.5));
  }
  case MXU_SILU:
    return op2(e, MXU_HLO_MULTIPLY, x, mxu_hlo_unary(h, MXU_HLO_LOGISTIC, x));
  case MXU_SOFTPLUS: return softplus(e, x);
  case MXU_SOFTSIGN:
    return op2(
        e, MXU_HLO_DIVIDE, x,
        op2(e, MXU_HLO_ADD, k(e, x, 1.0), mxu_hlo_unary(h, MXU_HLO_ABS, x)));
  case MXU_HARD_SIGMOID:
    return op2(e, MXU_HLO_DIVIDE,
               relu6(e, op2(e, MXU_HLO_ADD, x, k(e, x, 3.0))), k(e, x, 6.0));
  case MXU_HARD_SIGMOID_TF2: {
    mxu_hlo_value y =
        op2(e, MXU_HLO_ADD, op2(e, MXU_HLO_MULTIPLY, x, k(e, x, 0.2)),
            k(e, x, 0.5));
    return op2(e, MXU_HLO_MINIMUM, op2(e, MXU_HLO_MAXIMUM, y, k(e, x, 0.0)),
               k(e, x, 1.0));
  }
  case MXU_HARD_SILU:
    return op2(e, MXU_HLO_MULTIPLY, x,
               op2(e, MXU_HLO_DIVIDE,
                   relu6(e, op2(e, MXU_HLO_ADD, x, k(e, x, 3.0))),
                   k(e, x, 6.0)));
  case MXU_EXPONENTIAL: return mxu_hlo_unary(h, MXU_HLO_EXP, x);
  case MXU_MISH:
    return op2(e, MXU_HLO_MULTIPLY, x,
               mxu_hlo_unary(h, MXU_HLO_TANH, softplus(e, x)));
  case MXU_CELU:
  case MXU_HARD_TANH:
  case MXU_LOG_SIGMOID:
  case MXU_TANH_SHRINK:
  case MXU_SQUAREPLUS:
  case MXU_SPARSE_PLUS:
  case MXU_SPARSE_SIGMOID:
  case MXU_SOFT_SHRINK:
  case MXU_HARD_SHRINK:
  case MXU_LOG_SOFTMAX: return keras3_activation(e, activation, x);
  case MXU_GELU: /* x (1 + erf(x / sqrt(2))) / 2 */
    return op2(e, MXU_HLO_MULTIPLY,
               op2(e, MXU_HLO_MULTIPLY, x,
                   op2(e, MXU_HLO_ADD, k(e, x, 1.0),
                       mxu_hlo_unary(h, MXU_HLO_ERF,
                                     op2(e, MXU_HLO_MULTIPLY, x,
                                         k(e, x, 0.70710678118654752440))))),
               k(e, x, 0.5));
  }
  if (h->status == MXU_OK)
    h->status = mxu_fail(MXU_ERR_UNSUPPORTED,
                         "pjrt: activation %d is not emitted", (int)activation);
  return 0;
}

mxu_hlo_value mxu_emit_compute(mxu_emit *e, mxu_hlo_value v) {
  return e->bf16 ? mxu_hlo_convert(e->h, v, MXU_HLO_BF16) : v;
}

mxu_hlo_value mxu_emit_result(mxu_emit *e, mxu_hlo_value v) {
  return e->bf16 ? mxu_hlo_convert(e->h, v, MXU_HLO_F32) : v;
}

mxu_hlo_value mxu_emit_bias(mxu_emit *e, mxu_hlo_value x, mxu_hlo_value bias) {
  const mxu_hlo_shape s = *mxu_hlo_shape_of(e->h, x);
  int64_t last = s.rank - 1;
  return op2(e, MXU_HLO_ADD, x, mxu_hlo_broadcast(e->h, bias, s, &last));
}

/* ---- mxu's random generator on the device ------------------------------ */

typedef struct words {
  mxu_emit *e;
  mxu_hlo_value like; /* u32 of the blocks' shape */
} words;

static mxu_hlo_value u32k(const words *w, uint32_t v) {
  return mxu_hlo_full_like(w->e->h, w->like, (double)v);
}

static mxu_hlo_value bits(const words *w, mxu_hlo_op op, mxu_hlo_value a,
                          mxu_hlo_value b) {
  return mxu_hlo_binary(w->e->h, op, a, b);
}

/* The high and low halves of a * m (32 x 32 -> 64 bits) from 16-bit
 * halves, each partial product within 32 bits. */
static void mulhilo(const words *w, mxu_hlo_value a, uint32_t m,
                    mxu_hlo_value *hi, mxu_hlo_value *lo) {
  mxu_hlo_value mask = u32k(w, 0xFFFFu), sixteen = u32k(w, 16);
  mxu_hlo_value al = bits(w, MXU_HLO_AND, a, mask);
  mxu_hlo_value ah = bits(w, MXU_HLO_SHIFT_RIGHT_LOGICAL, a, sixteen);
  mxu_hlo_value ml = u32k(w, m & 0xFFFFu), mh = u32k(w, m >> 16);
  mxu_hlo_value ll = bits(w, MXU_HLO_MULTIPLY, al, ml);
  mxu_hlo_value lh = bits(w, MXU_HLO_MULTIPLY, al, mh);
  mxu_hlo_value hl = bits(w, MXU_HLO_MULTIPLY, ah, ml);
  mxu_hlo_value hh = bits(w, MXU_HLO_MULTIPLY, ah, mh);
  /* the middle column: its carry into the high half */
  mxu_hlo_value middle = bits(
      w, MXU_HLO_ADD,
      bits(w, MXU_HLO_ADD, bits(w, MXU_HLO_SHIFT_RIGHT_LOGICAL, ll, sixteen),
           bits(w, MXU_HLO_AND, lh, mask)),
      bits(w, MXU_HLO_AND, hl, mask));
  *hi = bits(w, MXU_HLO_ADD,
             bits(w, MXU_HLO_ADD, hh,
                  bits(w, MXU_HLO_SHIFT_RIGHT_LOGICAL, lh, sixteen)),
             bits(w, MXU_HLO_ADD,
                  bits(w, MXU_HLO_SHIFT_RIGHT_LOGICAL, hl, sixteen),
                  bits(w, MXU_HLO_SHIFT_RIGHT_LOGICAL, middle, sixteen)));
  *lo = bits(w, MXU_HLO_MULTIPLY, a, u32k(w, m));
}

/* rng's word i spread over the blocks. */
static mxu_hlo_value rng_word(const words *w, mxu_hlo_value rng, int64_t i) {
  mxu_hlo *h = w->e->h;
  int64_t end = i + 1, one = 1;
  mxu_hlo_value scalar =
      mxu_hlo_reshape(h, mxu_hlo_slice(h, rng, &i, &end, &one),
                      mxu_hlo_shape_make(MXU_HLO_U32, 0, NULL));
  return mxu_hlo_broadcast(h, scalar, *mxu_hlo_shape_of(h, w->like), NULL);
}

mxu_hlo_value mxu_emit_uniform4(mxu_emit *e, mxu_hlo_value rng, int64_t count) {
  mxu_hlo *h = e->h;
  /* Groups of 64 values: value k is word k % 64 / 16 of block
   * k / 64 * 16 + k % 16 (core.h), so a group is 16 blocks' four words. */
  int64_t groups = (count + 63) / 64, dims[2] = {groups, 16};
  mxu_hlo_shape blocks = mxu_hlo_shape_make(MXU_HLO_U32, 2, dims);
  words ww = {e, mxu_hlo_iota(h, blocks, 1)}, *w = &ww;
  mxu_hlo_value c[4], k[2];
  c[0] =
      bits(w, MXU_HLO_ADD,
           bits(w, MXU_HLO_MULTIPLY, mxu_hlo_iota(h, blocks, 0), u32k(w, 16)),
           ww.like);
  c[1] = u32k(w, 0); /* the index's high word: below 2^32 blocks */
  c[2] = rng_word(w, rng, 2);
  c[3] = rng_word(w, rng, 3);
  k[0] = rng_word(w, rng, 0);
  k[1] = rng_word(w, rng, 1);
  for (int round = 0; round < 10; round++) {
    mxu_hlo_value hi0, lo0, hi1, lo1;
    mulhilo(w, c[0], 0xD2511F53u, &hi0, &lo0);
    mulhilo(w, c[2], 0xCD9E8D57u, &hi1, &lo1);
    c[0] = bits(w, MXU_HLO_XOR, bits(w, MXU_HLO_XOR, hi1, c[1]), k[0]);
    c[1] = lo1;
    c[2] = bits(w, MXU_HLO_XOR, bits(w, MXU_HLO_XOR, hi0, c[3]), k[1]);
    c[3] = lo0;
    k[0] = bits(w, MXU_HLO_ADD, k[0], u32k(w, 0x9E3779B9u));
    k[1] = bits(w, MXU_HLO_ADD, k[1], u32k(w, 0xBB67AE85u));
  }
  /* (groups, word, 16) in order, 24 bits of each word as [0, 1). */
  int64_t one_word[3] = {groups, 1, 16}, all = groups * 64;
  mxu_hlo_value stacked = 0;
  for (int i = 0; i < 4; i++) {
    mxu_hlo_value part =
        mxu_hlo_reshape(h, c[i], mxu_hlo_shape_make(MXU_HLO_U32, 3, one_word));
    stacked = i ? mxu_hlo_concatenate(h, stacked, part, 1) : part;
  }
  mxu_hlo_value flat =
      mxu_hlo_reshape(h, stacked, mxu_hlo_shape_make(MXU_HLO_U32, 1, &all));
  int64_t start = 0, stride = 1;
  mxu_hlo_value drawn = mxu_hlo_slice(h, flat, &start, &count, &stride);
  mxu_hlo_value top =
      mxu_hlo_convert(h,
                      mxu_hlo_binary(h, MXU_HLO_SHIFT_RIGHT_LOGICAL, drawn,
                                     mxu_hlo_full_like(h, drawn, 8)),
                      MXU_HLO_F32);
  return mxu_hlo_binary(h, MXU_HLO_MULTIPLY, top,
                        mxu_hlo_full_like(h, top, 1.0 / 16777216.0));
}
