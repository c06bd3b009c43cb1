/* hlo.h — a StableHLO program built as a graph in memory, then printed as
 * MLIR text for a PJRT plugin to compile. Layers describe their forward
 * computation with these ops; grad.c derives the backward pass from the
 * graph (reverse mode, one rule per op), so no layer writes its gradient
 * twice. Values are node indices; every op checks its operands' shapes and
 * a failure (a shape that does not fit, no memory) sticks to the builder,
 * so emitters chain ops and look once at the end. Internal to libmxu. */
#ifndef MXU_HLO_H
#define MXU_HLO_H

#include "mxu.h"

#include <stddef.h>
#include <stdint.h>

enum { MXU_HLO_MAX_RANK = 6 };

typedef enum mxu_hlo_dtype {
  MXU_HLO_F32,
  MXU_HLO_F64, /* for checks in double */
  MXU_HLO_BF16,
  MXU_HLO_S32,
  MXU_HLO_U32,
  MXU_HLO_PRED
} mxu_hlo_dtype;

typedef struct mxu_hlo_shape {
  mxu_hlo_dtype dtype;
  int rank;
  int64_t dims[MXU_HLO_MAX_RANK];
} mxu_hlo_shape;

typedef int mxu_hlo_value; /* a node's index; 0 is no value */

typedef enum mxu_hlo_op {
  MXU_HLO_NONE,
  MXU_HLO_PARAMETER,
  MXU_HLO_CONSTANT, /* one number, splat over the shape */
  /* elementwise, two operands of one shape */
  MXU_HLO_ADD,
  MXU_HLO_SUBTRACT,
  MXU_HLO_MULTIPLY,
  MXU_HLO_DIVIDE,
  MXU_HLO_MAXIMUM,
  MXU_HLO_MINIMUM,
  MXU_HLO_POWER,
  MXU_HLO_XOR, /* bits of integers (the random generator's) */
  MXU_HLO_AND,
  MXU_HLO_SHIFT_RIGHT_LOGICAL,
  /* elementwise, one operand */
  MXU_HLO_NEGATE,
  MXU_HLO_EXP,
  MXU_HLO_LOG,
  MXU_HLO_SQRT,
  MXU_HLO_RSQRT,
  MXU_HLO_TANH,
  MXU_HLO_LOGISTIC,
  MXU_HLO_ABS,
  MXU_HLO_SIGN,
  MXU_HLO_ERF, /* CHLO's, which plugins lower: StableHLO has none */
  MXU_HLO_CONVERT,
  MXU_HLO_COMPARE, /* to pred; direction */
  MXU_HLO_SELECT,  /* pred, on_true, on_false */
  /* shape */
  MXU_HLO_BROADCAST, /* broadcast_in_dim: operand dim i -> result dims[i] */
  MXU_HLO_RESHAPE,
  MXU_HLO_TRANSPOSE,   /* result dim i is operand dim perm[i] */
  MXU_HLO_REVERSE,     /* along dims */
  MXU_HLO_SLICE,       /* start, limit, stride per dim */
  MXU_HLO_PAD,         /* low, high, interior per dim; operand, value */
  MXU_HLO_CONCATENATE, /* two operands along dims[0] */
  /* reductions and contractions */
  MXU_HLO_REDUCE,      /* over dims, sum or max */
  MXU_HLO_DOT,         /* dot_general */
  MXU_HLO_CONVOLUTION, /* NHWC x HWIO -> NHWC, 2-D */
  MXU_HLO_REDUCE_WINDOW,
  MXU_HLO_SELECT_AND_SCATTER, /* max pooling's gradient */
  MXU_HLO_ALL_REDUCE,         /* sum over every replica */
  MXU_HLO_IOTA,               /* along dim */
  MXU_HLO_REPLICA_ID
} mxu_hlo_op;

typedef enum mxu_hlo_compare {
  MXU_HLO_EQ,
  MXU_HLO_NE,
  MXU_HLO_LT,
  MXU_HLO_LE,
  MXU_HLO_GT,
  MXU_HLO_GE
} mxu_hlo_compare;

typedef enum mxu_hlo_reducer { MXU_HLO_SUM, MXU_HLO_MAX } mxu_hlo_reducer;

/* A 2-D window over NHWC: kernel (or pooling window) size, strides,
 * padding, input dilation (lhs) and kernel dilation (rhs). */
typedef struct mxu_hlo_window {
  int64_t size[2], stride[2], pad_low[2], pad_high[2];
  int64_t lhs_dilation[2], rhs_dilation[2];
  int64_t feature_groups;
} mxu_hlo_window;

typedef struct mxu_hlo_node {
  mxu_hlo_op op;
  mxu_hlo_shape shape;
  int count; /* operands */
  mxu_hlo_value in[3];
  double number;             /* CONSTANT */
  double *values;            /* CONSTANT of values (the graph's), or NULL */
  mxu_hlo_compare direction; /* COMPARE */
  mxu_hlo_reducer reducer;   /* REDUCE, REDUCE_WINDOW */
  int64_t dims[MXU_HLO_MAX_RANK];
  int dim_count;
  /* SLICE: start, limit, stride; PAD: low, high, interior. DOT: batch
   * and contracting dims of lhs (a) and rhs (b). */
  int64_t a[MXU_HLO_MAX_RANK], b[MXU_HLO_MAX_RANK], c[MXU_HLO_MAX_RANK];
  int batch_count, contract_count;
  int64_t lhs_batch[2], rhs_batch[2], lhs_contract[2], rhs_contract[2];
  mxu_hlo_window window; /* CONVOLUTION, REDUCE_WINDOW, SELECT_AND_SCATTER */
  /* CONVOLUTION: what each dim of lhs, rhs and result is, in StableHLO's
   * letters ("b01f" x "01io" -> "b01f" for NHWC x HWIO -> NHWC; the
   * gradients exchange them), and its batch_group_count. */
  char spec[3][5];
  int64_t batch_groups;
} mxu_hlo_node;

typedef struct mxu_hlo {
  mxu_hlo_node *nodes; /* nodes[0] unused */
  int count, capacity;
  int params;
  mxu_status status; /* the first failure, or MXU_OK */
} mxu_hlo;

/* A size after dilation: its elements that far apart. */
static inline int64_t mxu_hlo_dilated(int64_t size, int64_t dilation) {
  return size == 0 ? 0 : (size - 1) * dilation + 1;
}

/* Whether d is among the count dims of list. */
static inline int mxu_hlo_listed(int64_t d, int count, const int64_t *list) {
  for (int i = 0; i < count; i++)
    if (list[i] == d) return 1;
  return 0;
}

void mxu_hlo_init(mxu_hlo *h);
void mxu_hlo_free(mxu_hlo *h);
const mxu_hlo_shape *mxu_hlo_shape_of(const mxu_hlo *h, mxu_hlo_value v);
mxu_hlo_shape mxu_hlo_shape_make(mxu_hlo_dtype dtype, int rank,
                                 const int64_t *dims);
int64_t mxu_hlo_count(const mxu_hlo_shape *s);

/* The next parameter of the function (in order). */
mxu_hlo_value mxu_hlo_parameter(mxu_hlo *h, mxu_hlo_shape shape);
mxu_hlo_value mxu_hlo_constant(mxu_hlo *h, mxu_hlo_shape shape, double value);
/* A constant of the given values (row-major, copied), floating types. */
mxu_hlo_value mxu_hlo_constant_values(mxu_hlo *h, mxu_hlo_shape shape,
                                      const double *values);
/* A scalar-valued constant of v's shape and type. */
mxu_hlo_value mxu_hlo_full_like(mxu_hlo *h, mxu_hlo_value v, double value);

mxu_hlo_value mxu_hlo_binary(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_value a,
                             mxu_hlo_value b);
mxu_hlo_value mxu_hlo_unary(mxu_hlo *h, mxu_hlo_op op, mxu_hlo_value a);
/* Shorthands for arithmetic written out (the optimizers, the losses). */
static inline mxu_hlo_value mxu_hlo_add(mxu_hlo *h, mxu_hlo_value a,
                                        mxu_hlo_value b) {
  return mxu_hlo_binary(h, MXU_HLO_ADD, a, b);
}
static inline mxu_hlo_value mxu_hlo_sub(mxu_hlo *h, mxu_hlo_value a,
                                        mxu_hlo_value b) {
  return mxu_hlo_binary(h, MXU_HLO_SUBTRACT, a, b);
}
static inline mxu_hlo_value mxu_hlo_mul(mxu_hlo *h, mxu_hlo_value a,
                                        mxu_hlo_value b) {
  return mxu_hlo_binary(h, MXU_HLO_MULTIPLY, a, b);
}
static inline mxu_hlo_value mxu_hlo_div(mxu_hlo *h, mxu_hlo_value a,
                                        mxu_hlo_value b) {
  return mxu_hlo_binary(h, MXU_HLO_DIVIDE, a, b);
}
mxu_hlo_value mxu_hlo_convert(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_dtype to);
mxu_hlo_value mxu_hlo_compare_op(mxu_hlo *h, mxu_hlo_compare direction,
                                 mxu_hlo_value a, mxu_hlo_value b);
mxu_hlo_value mxu_hlo_select(mxu_hlo *h, mxu_hlo_value pred, mxu_hlo_value a,
                             mxu_hlo_value b);

/* Operand dim i becomes result dim dims[i]; the others are repeated. */
mxu_hlo_value mxu_hlo_broadcast(mxu_hlo *h, mxu_hlo_value a,
                                mxu_hlo_shape shape, const int64_t *dims);
/* a repeated along result dims missing from it: a's dims are the
 * result's trailing ones (NumPy's rule for equal ranks too). */
mxu_hlo_value mxu_hlo_broadcast_to(mxu_hlo *h, mxu_hlo_value a,
                                   mxu_hlo_shape shape);
mxu_hlo_value mxu_hlo_reshape(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_shape shape);
mxu_hlo_value mxu_hlo_transpose(mxu_hlo *h, mxu_hlo_value a,
                                const int64_t *perm);
mxu_hlo_value mxu_hlo_reverse(mxu_hlo *h, mxu_hlo_value a, int count,
                              const int64_t *dims);
mxu_hlo_value mxu_hlo_slice(mxu_hlo *h, mxu_hlo_value a, const int64_t *start,
                            const int64_t *limit, const int64_t *stride);
mxu_hlo_value mxu_hlo_pad(mxu_hlo *h, mxu_hlo_value a, double value,
                          const int64_t *low, const int64_t *high,
                          const int64_t *interior);

/* a then b along dim (equal elsewhere). */
mxu_hlo_value mxu_hlo_concatenate(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b,
                                  int64_t dim);

/* Sum or max over `count` dims (removed from the shape). */
mxu_hlo_value mxu_hlo_reduce(mxu_hlo *h, mxu_hlo_value a,
                             mxu_hlo_reducer reducer, int count,
                             const int64_t *dims);
/* dot_general: result dims are the batch dims, then a's free dims, then
 * b's free dims, as StableHLO orders them. */
mxu_hlo_value mxu_hlo_dot(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b,
                          int batch, const int64_t *a_batch,
                          const int64_t *b_batch, int contract,
                          const int64_t *a_contract, const int64_t *b_contract);
/* a (n, k) x b (k, m) -> (n, m). */
mxu_hlo_value mxu_hlo_matmul(mxu_hlo *h, mxu_hlo_value a, mxu_hlo_value b);
/* x NHWC, kernel HWIO (in = channels / groups) -> NHWC. */
mxu_hlo_value mxu_hlo_convolution(mxu_hlo *h, mxu_hlo_value x,
                                  mxu_hlo_value kernel,
                                  const mxu_hlo_window *window);
/* Any 2-D convolution: specs name each dim of lhs, rhs and the result
 * (b, f, 0, 1; i, o, 0, 1), batch_groups as StableHLO's. */
mxu_hlo_value
mxu_hlo_convolution_general(mxu_hlo *h, mxu_hlo_value lhs, mxu_hlo_value rhs,
                            const mxu_hlo_window *window, const char *lhs_spec,
                            const char *rhs_spec, const char *out_spec,
                            int64_t batch_groups);
/* The gradient of convolution(x, k, w) with respect to x from dy's: the
 * transposed convolution (Conv2DTranspose's forward); x_hw is x's height
 * and width. */
mxu_hlo_value mxu_hlo_convolution_backward_data(mxu_hlo *h, mxu_hlo_value dy,
                                                mxu_hlo_value k,
                                                const mxu_hlo_window *w,
                                                const int64_t x_hw[2]);
/* The padding that turns a window's output gradient back into its input's
 * (JAX's _conv_general_vjp_lhs_padding), for one spatial dim of `in`
 * values, a window of `window`, the output `out` long. */
void mxu_hlo_backward_padding(int64_t in, int64_t window, int64_t stride,
                              int64_t out, int64_t pad_low,
                              int64_t lhs_dilation, int64_t rhs_dilation,
                              int64_t *low, int64_t *high);
/* Pooling over the H and W of NHWC; sum or max, padding with 0 or -inf. */
mxu_hlo_value mxu_hlo_reduce_window(mxu_hlo *h, mxu_hlo_value x,
                                    mxu_hlo_reducer reducer,
                                    const mxu_hlo_window *window);
/* Max pooling's gradient: source (the pooled gradient) added where each
 * window of x has its first maximum. */
mxu_hlo_value mxu_hlo_select_and_scatter(mxu_hlo *h, mxu_hlo_value x,
                                         mxu_hlo_value source,
                                         const mxu_hlo_window *window);
mxu_hlo_value mxu_hlo_all_reduce(mxu_hlo *h, mxu_hlo_value a);
mxu_hlo_value mxu_hlo_iota(mxu_hlo *h, mxu_hlo_shape shape, int64_t dim);

/* ---- layers' forward computations (emit.c) ---------------------------- */

/* What a layer's emitter gets: the builder, its inputs and weights (in
 * declaration order) as values with the batch dimension first, whether
 * the program trains, over how many replicas, and in training the noise
 * the host drew for it (mxu_layer_class.emit_noise). An emitter whose
 * output is a softmax leaves the logits before it in `logits`, which a
 * cross-entropy uses instead; one that updates state (BatchNormalization's
 * moving statistics) leaves each weight's new value in updated[k]. */
/* A weight that follows a moving average of a per-replica statistic:
 * w = w momentum + (mean over replicas of local) factor (1 - momentum). */
typedef struct mxu_emit_moving {
  mxu_hlo_value local;
  float momentum, factor;
} mxu_emit_moving;

typedef struct mxu_emit {
  mxu_hlo *h;
  int batch, training, replicas;
  int bf16; /* mixed_bfloat16: convolutions and matmuls in bfloat16 */
  const mxu_hlo_value *in;
  const mxu_hlo_value *w;
  mxu_hlo_value noise;
  /* A layer that uses the mask: the ids of its input's mask (batch,
   * steps), 0 where none (see mxu_layer_run.mask_ids). */
  mxu_hlo_value mask;
  mxu_hlo_value mask_out; /* computes_mask: the output's mask */
  mxu_hlo_value logits;
  /* Per weight: its moving average's statistic (local 0: none). The
   * program sums every replica's in the one all_reduce that ends the step
   * (collectives scattered through a program may meet in different orders
   * on different devices). */
  mxu_emit_moving *moving;
} mxu_emit;

/* x through an activation (alpha: leaky_relu's slope, elu's alpha). */
mxu_hlo_value mxu_emit_activation(mxu_emit *e, mxu_activation activation,
                                  float alpha, mxu_hlo_value x);
/* x + bias broadcast along the last dim. */
mxu_hlo_value mxu_emit_bias(mxu_emit *e, mxu_hlo_value x, mxu_hlo_value bias);
/* count uniform draws in [0, 1) as mxu_rng_uniform4 makes them from
 * index 0 (Philox-4x32-10 in integer ops), the stream given as u32[4]:
 * key[0], key[1], stream[0], stream[1]. */
mxu_hlo_value mxu_emit_uniform4(mxu_emit *e, mxu_hlo_value rng, int64_t count);
/* An operand of a convolution or matmul in its compute type (bfloat16 in
 * mixed_bfloat16), and its result back in float32: the weights stay
 * float32 and the gradients come back through the converts. */
mxu_hlo_value mxu_emit_compute(mxu_emit *e, mxu_hlo_value v);
mxu_hlo_value mxu_emit_result(mxu_emit *e, mxu_hlo_value v);

/* The function main(parameters) -> (results) as MLIR text, for `replicas`
 * replicas; *text is the caller's to free. */
mxu_status mxu_hlo_print(const mxu_hlo *h, int count,
                         const mxu_hlo_value *results, int replicas,
                         char **text);

/* The function as a step run n times in an on-device loop (a
 * stablehlo.while around a call of it; one host round trip for n steps):
 * its first `carried` parameters are state, results[0..carried) their new
 * values; main takes each other parameter stacked `steps` deep (step i's
 * at row i) and the run's step count n (at most `steps`, a scalar i32
 * last), and returns the state after n steps and each other result
 * stacked (step i's at row i; rows from n on are zero). */
mxu_status mxu_hlo_print_loop(const mxu_hlo *h, int count,
                              const mxu_hlo_value *results, int carried,
                              int steps, int replicas, char **text);

/* The gradient of a scalar f32 value with respect to each of `count`
 * values (wrt), appended to the graph: grads[i] has wrt[i]'s shape (zeros
 * where wrt[i] does not reach the value). */
mxu_status mxu_hlo_gradients(mxu_hlo *h, mxu_hlo_value of, mxu_hlo_value seed,
                             int count, const mxu_hlo_value *wrt,
                             mxu_hlo_value *grads);

#endif
