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

/* Over the last dim, less its maximum first. */
static mxu_hlo_value softmax(mxu_emit *e, mxu_hlo_value x) {
  const mxu_hlo_shape s = *mxu_hlo_shape_of(e->h, x);
  int64_t last = s.rank - 1, keep[MXU_HLO_MAX_RANK];
  for (int d = 0; d < last; d++) keep[d] = d;
  mxu_hlo_value max = mxu_hlo_reduce(e->h, x, MXU_HLO_MAX, 1, &last);
  mxu_hlo_value shifted =
      op2(e, MXU_HLO_SUBTRACT, x, mxu_hlo_broadcast(e->h, max, s, keep));
  mxu_hlo_value ex = mxu_hlo_unary(e->h, MXU_HLO_EXP, shifted);
  mxu_hlo_value sum = mxu_hlo_reduce(e->h, ex, MXU_HLO_SUM, 1, &last);
  e->logits = x;
  return op2(e, MXU_HLO_DIVIDE, ex, mxu_hlo_broadcast(e->h, sum, s, keep));
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
  case MXU_SOFTMAX: return softmax(e, x);
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
