/* updates.c — the optimizer's step as StableHLO ops for the pjrt training
 * program: gradient clipping, the weights' penalties, weight decay, every
 * optimizer's update and use_ema's moving average, in the order and the
 * float operations of the host's (optimizers.c, regularizers.c). What
 * changes from step to step (the rate, Adam's bias correction, Nadam's
 * momentum products, use_ema's schedule) comes in as scalars the host
 * computes (mxu_step_hypers). */
#include "model/model.h"

typedef struct rule {
  mxu_hlo *h;
  mxu_hlo_value like; /* a value of the weight's shape */
  const mxu_hlo_value *hyper;
} rule;

static mxu_hlo_value k(const rule *r, double value) {
  return mxu_hlo_full_like(r->h, r->like, value);
}
/* Hyper-parameter i spread over the weight. */
static mxu_hlo_value hy(const rule *r, int i) {
  return mxu_hlo_broadcast_to(r->h, r->hyper[i],
                              *mxu_hlo_shape_of(r->h, r->like));
}
#define op(r, o, a, b) mxu_hlo_binary((r)->h, o, a, b)
#define fn(r, o, a) mxu_hlo_unary((r)->h, o, a)
#define MUL(a, b) mxu_hlo_mul(r->h, a, b)
#define ADD(a, b) mxu_hlo_add(r->h, a, b)
#define SUB(a, b) mxu_hlo_sub(r->h, a, b)
#define DIV(a, b) mxu_hlo_div(r->h, a, b)
#define MAX(a, b) op(r, MXU_HLO_MAXIMUM, a, b)
#define SQRT(a) fn(r, MXU_HLO_SQRT, a)

mxu_hlo_value mxu_emit_penalty(mxu_hlo *h, const mxu_model *model,
                               const mxu_hlo_value *w) {
  mxu_hlo_value total = 0;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!p->trainable || (p->regularizer.l1 == 0 && p->regularizer.l2 == 0))
      continue;
    mxu_hlo_shape s = *mxu_hlo_shape_of(h, w[i]);
    int64_t all[MXU_HLO_MAX_RANK];
    for (int d = 0; d < s.rank; d++) all[d] = d;
    rule rr = {h, w[i], NULL}, *r = &rr;
    mxu_hlo_value l1 =
        mxu_hlo_reduce(h, fn(r, MXU_HLO_ABS, w[i]), MXU_HLO_SUM, s.rank, all);
    mxu_hlo_value l2 =
        mxu_hlo_reduce(h, MUL(w[i], w[i]), MXU_HLO_SUM, s.rank, all);
    mxu_hlo_value term = mxu_hlo_binary(
        h, MXU_HLO_ADD,
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                       mxu_hlo_full_like(h, l1, p->regularizer.l1), l1),
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                       mxu_hlo_full_like(h, l2, p->regularizer.l2), l2));
    total = total ? mxu_hlo_binary(h, MXU_HLO_ADD, total, term) : term;
  }
  return total;
}

void mxu_emit_clip_norms(mxu_hlo *h, const mxu_model *model, int count,
                         mxu_hlo_value *g) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  if (!(o->clipnorm > 0) && !(o->global_clipnorm > 0)) return;
  mxu_hlo_value global = 0;
  for (int j = 0; j < count; j++) {
    mxu_hlo_shape s = *mxu_hlo_shape_of(h, g[j]);
    int64_t all[MXU_HLO_MAX_RANK];
    for (int d = 0; d < s.rank; d++) all[d] = d;
    rule rr = {h, g[j], NULL}, *r = &rr;
    mxu_hlo_value sum =
        mxu_hlo_reduce(h, MUL(g[j], g[j]), MXU_HLO_SUM, s.rank, all);
    global = global ? mxu_hlo_binary(h, MXU_HLO_ADD, global, sum) : sum;
    if (!(o->clipnorm > 0)) continue;
    /* g c / max(norm, c) */
    mxu_hlo_value c = mxu_hlo_full_like(h, sum, o->clipnorm);
    mxu_hlo_value divisor = mxu_hlo_binary(
        h, MXU_HLO_MAXIMUM, mxu_hlo_unary(h, MXU_HLO_SQRT, sum), c);
    g[j] =
        DIV(MUL(g[j], k(r, o->clipnorm)), mxu_hlo_broadcast_to(h, divisor, s));
  }
  if (!(o->global_clipnorm > 0) || !global) return;
  /* c min(1 / norm, 1 / c) */
  mxu_hlo_value norm = mxu_hlo_unary(h, MXU_HLO_SQRT, global);
  mxu_hlo_value scale = mxu_hlo_binary(
      h, MXU_HLO_MULTIPLY, mxu_hlo_full_like(h, norm, o->global_clipnorm),
      mxu_hlo_binary(h, MXU_HLO_MINIMUM,
                     mxu_hlo_binary(h, MXU_HLO_DIVIDE,
                                    mxu_hlo_full_like(h, norm, 1.0), norm),
                     mxu_hlo_full_like(h, norm, 1.0f / o->global_clipnorm)));
  for (int j = 0; j < count; j++)
    g[j] = mxu_hlo_binary(
        h, MXU_HLO_MULTIPLY, g[j],
        mxu_hlo_broadcast_to(h, scale, *mxu_hlo_shape_of(h, g[j])));
}

/* Adam's and AdamW's (amsgrad too). */
static mxu_hlo_value adam(const rule *r, const mxu_optimizer_config *o,
                          mxu_hlo_value w, mxu_hlo_value g,
                          mxu_hlo_value *slot) {
  mxu_hlo_value alpha = hy(r, MXU_HYPER_A);
  if (!o->amsgrad) {
    /* The backend kernels' order. */
    mxu_hlo_value m =
        ADD(MUL(k(r, o->beta_1), slot[0]), MUL(k(r, 1.0f - o->beta_1), g));
    mxu_hlo_value v = ADD(MUL(k(r, o->beta_2), slot[1]),
                          MUL(MUL(k(r, 1.0f - o->beta_2), g), g));
    slot[0] = m, slot[1] = v;
    return SUB(w, DIV(MUL(alpha, m), ADD(SQRT(v), k(r, o->epsilon))));
  }
  mxu_hlo_value m = ADD(slot[0], MUL(SUB(g, slot[0]), k(r, 1 - o->beta_1)));
  mxu_hlo_value v =
      ADD(slot[1], MUL(SUB(MUL(g, g), slot[1]), k(r, 1 - o->beta_2)));
  mxu_hlo_value v_hat = MAX(slot[2], v);
  slot[0] = m, slot[1] = v, slot[2] = v_hat;
  return SUB(w, DIV(MUL(m, alpha), ADD(SQRT(v_hat), k(r, o->epsilon))));
}

static mxu_hlo_value sgd(const rule *r, const mxu_optimizer_config *o,
                         mxu_hlo_value w, mxu_hlo_value g,
                         mxu_hlo_value *slot) {
  mxu_hlo_value lr = hy(r, MXU_HYPER_LR);
  if (!(o->momentum > 0)) return SUB(w, MUL(lr, g));
  mxu_hlo_value velocity = SUB(MUL(k(r, o->momentum), slot[0]), MUL(lr, g));
  slot[0] = velocity;
  return o->nesterov ? ADD(w, SUB(MUL(k(r, o->momentum), velocity), MUL(lr, g)))
                     : ADD(w, velocity);
}

/* Slots: velocity (0), momentum (1), the average gradient (2). */
static mxu_hlo_value rmsprop(const rule *r, const mxu_optimizer_config *o,
                             mxu_hlo_value w, mxu_hlo_value g,
                             mxu_hlo_value *slot) {
  mxu_hlo_value v =
      ADD(MUL(k(r, o->rho), slot[0]), MUL(k(r, 1 - o->rho), MUL(g, g)));
  mxu_hlo_value denominator = ADD(v, k(r, o->epsilon));
  slot[0] = v;
  if (o->centered) {
    mxu_hlo_value avg =
        ADD(MUL(k(r, o->rho), slot[2]), MUL(k(r, 1 - o->rho), g));
    denominator = ADD(SUB(v, MUL(avg, avg)), k(r, o->epsilon));
    slot[2] = avg;
  }
  mxu_hlo_value increment = DIV(MUL(hy(r, MXU_HYPER_LR), g), SQRT(denominator));
  if (!(o->momentum > 0)) return SUB(w, increment);
  slot[1] = ADD(MUL(k(r, o->momentum), slot[1]), increment);
  return SUB(w, slot[1]);
}

static mxu_hlo_value adagrad(const rule *r, const mxu_optimizer_config *o,
                             mxu_hlo_value w, mxu_hlo_value g,
                             mxu_hlo_value *slot) {
  slot[0] = ADD(slot[0], MUL(g, g));
  return SUB(w, DIV(MUL(hy(r, MXU_HYPER_LR), g),
                    SQRT(ADD(slot[0], k(r, o->epsilon)))));
}

static mxu_hlo_value adamax(const rule *r, const mxu_optimizer_config *o,
                            mxu_hlo_value w, mxu_hlo_value g,
                            mxu_hlo_value *slot) {
  slot[0] = ADD(slot[0], MUL(SUB(g, slot[0]), k(r, 1 - o->beta_1)));
  slot[1] = MAX(MUL(k(r, o->beta_2), slot[1]), fn(r, MXU_HLO_ABS, g));
  /* hyper A: 1 - beta_1^t */
  return SUB(w, DIV(MUL(hy(r, MXU_HYPER_LR), slot[0]),
                    MUL(hy(r, MXU_HYPER_A), ADD(slot[1], k(r, o->epsilon)))));
}

/* hyper A u_t, B u_t+1, C u_product_t+1, D u_product, E beta_2^t. */
static mxu_hlo_value nadam(const rule *r, const mxu_optimizer_config *o,
                           mxu_hlo_value w, mxu_hlo_value g,
                           mxu_hlo_value *slot) {
  mxu_hlo_value m = ADD(slot[0], MUL(SUB(g, slot[0]), k(r, 1 - o->beta_1)));
  mxu_hlo_value v =
      ADD(slot[1], MUL(SUB(MUL(g, g), slot[1]), k(r, 1 - o->beta_2)));
  slot[0] = m, slot[1] = v;
  mxu_hlo_value one = k(r, 1.0);
  mxu_hlo_value m_hat = ADD(
      DIV(MUL(hy(r, MXU_HYPER_B), m), SUB(one, hy(r, MXU_HYPER_C))),
      DIV(MUL(SUB(one, hy(r, MXU_HYPER_A)), g), SUB(one, hy(r, MXU_HYPER_D))));
  mxu_hlo_value v_hat = DIV(v, SUB(one, hy(r, MXU_HYPER_E)));
  return SUB(w, DIV(MUL(m_hat, hy(r, MXU_HYPER_LR)),
                    ADD(SQRT(v_hat), k(r, o->epsilon))));
}

static mxu_hlo_value adadelta(const rule *r, const mxu_optimizer_config *o,
                              mxu_hlo_value w, mxu_hlo_value g,
                              mxu_hlo_value *slot) {
  mxu_hlo_value eps = k(r, o->epsilon);
  slot[0] = ADD(MUL(k(r, o->rho), slot[0]), MUL(k(r, 1 - o->rho), MUL(g, g)));
  mxu_hlo_value delta =
      fn(r, MXU_HLO_NEGATE,
         DIV(MUL(SQRT(ADD(slot[1], eps)), g), SQRT(ADD(slot[0], eps))));
  slot[1] =
      ADD(MUL(k(r, o->rho), slot[1]), MUL(k(r, 1 - o->rho), MUL(delta, delta)));
  return ADD(w, MUL(hy(r, MXU_HYPER_LR), delta));
}

static mxu_hlo_value lion(const rule *r, const mxu_optimizer_config *o,
                          mxu_hlo_value w, mxu_hlo_value g,
                          mxu_hlo_value *slot) {
  mxu_hlo_value c =
      ADD(MUL(slot[0], k(r, o->beta_1)), MUL(g, k(r, 1.0f - o->beta_1)));
  slot[0] = ADD(MUL(slot[0], k(r, o->beta_2)), MUL(g, k(r, 1.0f - o->beta_2)));
  return SUB(w, MUL(hy(r, MXU_HYPER_LR), fn(r, MXU_HLO_SIGN, c)));
}

/* Where a hyper-parameter flag (0 or 1) is set: a, else b. */
static mxu_hlo_value flagged(const rule *r, int i, mxu_hlo_value a,
                             mxu_hlo_value b) {
  mxu_hlo_value set = mxu_hlo_compare_op(r->h, MXU_HLO_GT, hy(r, i), k(r, 0.5));
  return mxu_hlo_select(r->h, set, a, b);
}

mxu_hlo_value mxu_emit_update(mxu_hlo *h, const mxu_model *model,
                              const mxu_param *p, const mxu_hlo_value *hyper,
                              mxu_hlo_value w, mxu_hlo_value g,
                              mxu_hlo_value *slot) {
  const mxu_optimizer_config *o = &model->compile.optimizer;
  rule rr = {h, w, hyper}, *r = &rr;
  mxu_hlo_value before = w;
  if (p->regularizer.l1 != 0 || p->regularizer.l2 != 0)
    g = ADD(g, ADD(MUL(k(r, 2 * p->regularizer.l2), w),
                   MUL(k(r, p->regularizer.l1), fn(r, MXU_HLO_SIGN, w))));
  if (o->clipvalue > 0)
    g = op(r, MXU_HLO_MINIMUM, MAX(g, k(r, -o->clipvalue)), k(r, o->clipvalue));
  if (o->weight_decay > 0)
    w = SUB(w, MUL(MUL(w, k(r, o->weight_decay)), hy(r, MXU_HYPER_LR)));
  switch (o->kind) {
  case MXU_ADAM:
  case MXU_ADAMW: w = adam(r, o, w, g, slot); break;
  case MXU_SGD: w = sgd(r, o, w, g, slot); break;
  case MXU_RMSPROP: w = rmsprop(r, o, w, g, slot); break;
  case MXU_ADAGRAD: w = adagrad(r, o, w, g, slot); break;
  case MXU_ADAMAX: w = adamax(r, o, w, g, slot); break;
  case MXU_NADAM: w = nadam(r, o, w, g, slot); break;
  case MXU_ADADELTA: w = adadelta(r, o, w, g, slot); break;
  case MXU_LION: w = lion(r, o, w, g, slot); break;
  }
  if (!o->use_ema) return w;
  /* The average (tf.keras 2 starts it from the weights before the first
   * step), then the weights replaced by it every overwrite steps. */
  mxu_hlo_value *avg = &slot[MXU_SLOTS];
  mxu_hlo_value m = hy(r, MXU_HYPER_EMA_MOMENTUM);
  mxu_hlo_value start = flagged(r, MXU_HYPER_EMA_START, before, *avg);
  *avg = ADD(MUL(m, start), MUL(SUB(k(r, 1.0), m), w));
  return flagged(r, MXU_HYPER_EMA_OVERWRITE, *avg, w);
}

mxu_hlo_value mxu_emit_constraint(mxu_hlo *h, const mxu_param *p,
                                  mxu_hlo_value w) {
  const mxu_constraint *c = &p->constraint;
  rule rr = {h, w, NULL}, *r = &rr;
  if (c->kind == MXU_CONSTRAINT_NONE) return w;
  if (c->kind == MXU_NON_NEG)
    return mxu_hlo_select(h, mxu_hlo_compare_op(h, MXU_HLO_GE, w, k(r, 0.0)), w,
                          k(r, 0.0));
  /* Each slice along the kept axes scaled by desired / (eps + norm), as
   * regularizers.c's constrain_norms. */
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, w);
  int rank = s.rank > 0 ? s.rank : 1;
  int64_t over[MXU_HLO_MAX_RANK], kept[MXU_HLO_MAX_RANK];
  int n_over = 0, n_kept = 0;
  for (int d = 0; d < s.rank; d++) {
    int reduced = 0;
    for (int a = 0; a < c->axis_count; a++)
      reduced |= (c->axes[a] + rank) % rank == d;
    if (reduced)
      over[n_over++] = d;
    else
      kept[n_kept++] = d;
  }
  mxu_hlo_value norm = mxu_hlo_unary(
      h, MXU_HLO_SQRT, mxu_hlo_reduce(h, MUL(w, w), MXU_HLO_SUM, n_over, over));
  mxu_hlo_value desired = mxu_hlo_full_like(h, norm, 1.0);
  if (c->kind != MXU_UNIT_NORM)
    desired =
        mxu_hlo_binary(h, MXU_HLO_MINIMUM,
                       mxu_hlo_binary(h, MXU_HLO_MAXIMUM, norm,
                                      mxu_hlo_full_like(h, norm, c->min_value)),
                       mxu_hlo_full_like(h, norm, c->max_value));
  if (c->kind == MXU_MIN_MAX_NORM)
    desired = mxu_hlo_binary(
        h, MXU_HLO_ADD,
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY, mxu_hlo_full_like(h, norm, c->rate),
                       desired),
        mxu_hlo_binary(h, MXU_HLO_MULTIPLY,
                       mxu_hlo_full_like(h, norm, 1 - c->rate), norm));
  mxu_hlo_value factor = mxu_hlo_binary(
      h, MXU_HLO_DIVIDE, desired,
      mxu_hlo_binary(h, MXU_HLO_ADD, mxu_hlo_full_like(h, norm, 1e-7f), norm));
  return MUL(w, mxu_hlo_broadcast(h, factor, s, kept));
}
