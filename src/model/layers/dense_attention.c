/* dense_attention.c — Keras' Attention (Luong's dot product, or its
 * "concat" score) and AdditiveAttention (Bahdanau's): attention without
 * projections, a query's scores against every key turned by a softmax into
 * weights of the values. Plain loops over each sample's (tq, tv) scores:
 * the layers sit on a recurrent encoder's and decoder's steps, tens to
 * hundreds of them, not where a model's time goes.
 *
 * score(i, j): dot      s q_i . k_j                  (s: scale, or 1)
 *              concat   c sum_d tanh(s (q_id + k_jd)) (c: concat_score_weight)
 *              additive sum_d s_d tanh(q_id + k_jd)   (s_d: scale, or 1)
 * Masked (causal: j > i; padding: key j or query i padded) scores weigh
 * nothing; a padded query's output is zeros, as Keras' query mask. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

typedef struct datt_dims {
  int64_t n, tq, tv, dim, dv;
} datt_dims;

static const mxu_dense_attention_config *config_of(const mxu_layer *layer) {
  return &layer->config.dense_attention;
}

/* The key: input 2, or the value. */
static int key_input(const mxu_layer *layer) {
  return layer->input_count > 2 ? 2 : 1;
}

static datt_dims dims_of(const mxu_layer *layer, int64_t batch) {
  const mxu_shape *q = &layer->in_shapes[0], *v = &layer->in_shapes[1];
  return (datt_dims){batch, q->dims[0], v->dims[0], q->dims[1], v->dims[1]};
}

static mxu_status datt_infer(mxu_layer *layer) {
  const mxu_dense_attention_config *c = config_of(layer);
  const mxu_shape *q = &layer->in_shapes[0], *v = &layer->in_shapes[1];
  const mxu_shape *k = &layer->in_shapes[key_input(layer)];
  if (q->rank != 2 || v->rank != 2 || k->rank != 2)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: query, value and key must each be (steps, "
                    "features)",
                    layer->name);
  if (q->dims[1] != k->dims[1] || k->dims[0] != v->dims[0])
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: the query's features (%lld) must be the key's "
                    "(%lld), and the key's steps (%lld) the value's (%lld)",
                    layer->name, (long long)q->dims[1], (long long)k->dims[1],
                    (long long)k->dims[0], (long long)v->dims[0]);
  if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
    return mxu_fail(MXU_ERR_ARG, "%s: dropout %g must be in [0, 1)",
                    layer->name, (double)c->dropout);
  int64_t dims[2] = {q->dims[0], v->dims[1]};
  layer->out_shape = mxu_shape_make(2, dims);
  return MXU_OK;
}

/* Attention: scale () and concat_score_weight (), ones; AdditiveAttention:
 * scale (dim), glorot_uniform. Each only when used. */
static int datt_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_dense_attention_config *c = config_of(layer);
  int count = 0;
  int64_t dim = layer->in_shapes[0].dims[1];
  if (c->use_scale)
    decls[count++] = (mxu_param_decl){
        .name = "scale",
        .shape = c->additive ? mxu_shape_make(1, &dim) : (mxu_shape){0},
        .init = c->additive ? mxu_init_glorot_uniform() : mxu_init_ones(),
        .trainable = 1};
  if (c->concat && !c->additive)
    decls[count++] = (mxu_param_decl){
        .name = "concat_score_weight", .init = mxu_init_ones(), .trainable = 1};
  return count;
}

/* Per sample: the scores, their products and the softmax over tv. */
static double datt_flops(const mxu_layer *layer, const mxu_flops_step *step) {
  const mxu_dense_attention_config *c = config_of(layer);
  datt_dims d = dims_of(layer, 1);
  double pairs = (double)(d.tq * d.tv);
  double score =
      c->additive || c->concat ? 4.0 * (double)d.dim : 2.0 * (double)d.dim;
  double forward = pairs * (score + 2.0 * (double)d.dv + 5.0);
  return step->need_dx ? 3.0 * forward : 2.0 * forward;
}

/* The kept (n, tq, tv) weights, and with dropout their keep factors. */
static mxu_status datt_plan(mxu_layer *layer, const mxu_backend *backend,
                            int batch, mxu_arena *layout) {
  (void)backend;
  datt_dims d = dims_of(layer, batch);
  size_t block = (size_t)(d.n * d.tq * d.tv) * sizeof(float);
  layer->compiled->scratch[0] = mxu_arena_reserve(layout, block);
  layer->compiled->scratch[1] = mxu_arena_reserve(layout, block);
  /* A row of dp, and of dq's scratch: tv + dim floats. */
  layer->compiled->scratch[2] =
      mxu_arena_reserve(layout, (size_t)(d.tv + d.dim) * sizeof(float));
  return MXU_OK;
}

typedef struct datt_run {
  const mxu_dense_attention_config *c;
  datt_dims d;
  const float *q, *v, *k;
  const float *scale, *weight; /* NULL: 1 */
  float *probs, *keep, *row;   /* keep NULL: no dropout this run */
  const float *ids;            /* the mask's ids (n, steps), or NULL */
} datt_run;

static datt_run run_of(const mxu_layer *layer, const mxu_layer_run *run) {
  const mxu_dense_attention_config *c = config_of(layer);
  datt_run r = {0};
  r.c = c;
  r.d = dims_of(layer, layer->compiled->batch);
  r.q = run->xs[0];
  r.v = run->xs[1];
  r.k = run->xs[key_input(layer)];
  int w = 0;
  r.scale = c->use_scale ? run->w[w++] : NULL;
  r.weight = c->concat && !c->additive ? run->w[w] : NULL;
  const size_t *scratch = layer->compiled->scratch;
  r.probs = (float *)(void *)(run->arena + scratch[0]);
  r.keep = run->training && c->dropout > 0.0f
               ? (float *)(void *)(run->arena + scratch[1])
               : NULL;
  r.row = (float *)(void *)(run->arena + scratch[2]);
  r.ids = run->mask_ids;
  return r;
}

/* Query i of sample n may weigh key j: not after it when causal, neither
 * padded. */
static int allowed(const datt_run *r, int64_t n, int64_t i, int64_t j) {
  if (r->c->causal && j > i) return 0;
  if (!r->ids) return 1;
  return r->ids[n * r->d.tq + i] != 0.0f && r->ids[n * r->d.tv + j] != 0.0f;
}

/* The score of q (dim) against k (dim); tanh(...) of each feature into t
 * for the backward pass when it is not NULL. */
static float score(const datt_run *r, const float *q, const float *k,
                   float *t) {
  const mxu_dense_attention_config *c = r->c;
  int64_t dim = r->d.dim;
  float s = 0.0f;
  if (!c->additive && !c->concat) {
    for (int64_t e = 0; e < dim; e++) s += q[e] * k[e];
    return r->scale ? s * r->scale[0] : s;
  }
  for (int64_t e = 0; e < dim; e++) {
    float pre = q[e] + k[e];
    if (!c->additive && r->scale) pre *= r->scale[0];
    float th = tanhf(pre);
    if (t) t[e] = th;
    s += c->additive && r->scale ? r->scale[e] * th : th;
  }
  return c->additive ? s : (r->weight ? r->weight[0] : 1.0f) * s;
}

static void datt_forward(mxu_layer *layer, const mxu_layer_run *run) {
  datt_run r = run_of(layer, run);
  const datt_dims *d = &r.d;
  if (r.keep) mxu_draw_keep(run, r.keep, d->n, d->tq * d->tv, r.c->dropout);
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t i = 0; i < d->tq; i++) {
      float *p = r.probs + (n * d->tq + i) * d->tv;
      float *out = run->y + (n * d->tq + i) * d->dv;
      memset(out, 0, (size_t)d->dv * sizeof(float));
      float top = -INFINITY, sum = 0.0f;
      for (int64_t j = 0; j < d->tv; j++) {
        p[j] = allowed(&r, n, i, j)
                   ? score(&r, r.q + (n * d->tq + i) * d->dim,
                           r.k + (n * d->tv + j) * d->dim, NULL)
                   : -INFINITY;
        if (p[j] > top) top = p[j];
      }
      if (top == -INFINITY) { /* a padded query: zeros */
        memset(p, 0, (size_t)d->tv * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < d->tv; j++) sum += p[j] = expf(p[j] - top);
      for (int64_t j = 0; j < d->tv; j++) {
        p[j] /= sum;
        float w = r.keep ? p[j] * r.keep[(n * d->tq + i) * d->tv + j] : p[j];
        const float *v = r.v + (n * d->tv + j) * d->dv;
        for (int64_t e = 0; e < d->dv; e++) out[e] += w * v[e];
      }
    }
}

/* The score's gradient ds into dq, dk and the weights' gradients. */
static void score_backward(const datt_run *r, float ds, const float *q,
                           const float *k, float *dq, float *dk, float *dscale,
                           float *dweight, float *t) {
  const mxu_dense_attention_config *c = r->c;
  int64_t dim = r->d.dim;
  if (!c->additive && !c->concat) {
    float s = r->scale ? r->scale[0] : 1.0f, dot = 0.0f;
    for (int64_t e = 0; e < dim; e++) {
      dot += q[e] * k[e];
      dq[e] += ds * s * k[e];
      dk[e] += ds * s * q[e];
    }
    if (dscale) dscale[0] += ds * dot;
    return;
  }
  float sum = 0.0f;
  (void)score(r, q, k, t);
  float weight = !c->additive && r->weight ? r->weight[0] : 1.0f;
  float s = !c->additive && r->scale ? r->scale[0] : 1.0f, dpre_s = 0.0f;
  for (int64_t e = 0; e < dim; e++) {
    float slope = 1.0f - t[e] * t[e];
    float g = c->additive ? ds * (r->scale ? r->scale[e] : 1.0f) * slope
                          : ds * weight * slope * s;
    dq[e] += g, dk[e] += g;
    sum += t[e];
    if (c->additive && dscale) dscale[e] += ds * t[e];
    if (!c->additive) dpre_s += ds * weight * slope * (q[e] + k[e]);
  }
  if (!c->additive && dscale) dscale[0] += dpre_s;
  if (dweight) dweight[0] += ds * sum;
}

static void datt_backward(mxu_layer *layer, const mxu_layer_run *run) {
  datt_run r = run_of(layer, run);
  const datt_dims *d = &r.d;
  int k_in = key_input(layer), w = 0;
  float *dq = run->dxs[0], *dv = run->dxs[1], *dk = run->dxs[k_in];
  float *dscale = r.c->use_scale ? run->dw[w++] : NULL;
  float *dweight = r.weight ? run->dw[w] : NULL;
  /* Each dx whole: zeros, then sums (the key's into the value's). */
  memset(dq, 0, (size_t)(d->n * d->tq * d->dim) * sizeof(float));
  memset(dv, 0, (size_t)(d->n * d->tv * d->dv) * sizeof(float));
  if (k_in != 1) memset(dk, 0, (size_t)(d->n * d->tv * d->dim) * sizeof(float));
  float *dp = r.row, *t = r.row + d->tv;
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t i = 0; i < d->tq; i++) {
      const float *p = r.probs + (n * d->tq + i) * d->tv;
      const float *keep = r.keep ? r.keep + (n * d->tq + i) * d->tv : NULL;
      const float *dout = run->dy + (n * d->tq + i) * d->dv;
      float dot = 0.0f;
      for (int64_t j = 0; j < d->tv; j++) {
        const float *v = r.v + (n * d->tv + j) * d->dv;
        float *g = dv + (n * d->tv + j) * d->dv, weight = p[j], dpj = 0.0f;
        if (keep) weight *= keep[j];
        for (int64_t e = 0; e < d->dv; e++) {
          g[e] += weight * dout[e];
          dpj += dout[e] * v[e];
        }
        dp[j] = keep ? dpj * keep[j] : dpj;
        dot += p[j] * dp[j];
      }
      for (int64_t j = 0; j < d->tv; j++) {
        if (p[j] == 0.0f) continue; /* masked, or nothing to pass on */
        score_backward(&r, p[j] * (dp[j] - dot), r.q + (n * d->tq + i) * d->dim,
                       r.k + (n * d->tv + j) * d->dim,
                       dq + (n * d->tq + i) * d->dim,
                       dk + (n * d->tv + j) * d->dim, dscale, dweight, t);
      }
    }
}

/* ---- pjrt --------------------------------------------------------------- */

/* q (n, tq, dim) and k (n, tv, dim) both as (n, tq, tv, dim). */
static void pairs_emit(mxu_emit *e, const datt_dims *d, mxu_hlo_value q,
                       mxu_hlo_value k, mxu_hlo_value *qb, mxu_hlo_value *kb) {
  int64_t all[4] = {d->n, d->tq, d->tv, d->dim};
  mxu_hlo_shape s = mxu_hlo_shape_make(MXU_HLO_F32, 4, all);
  const int64_t q_dims[3] = {0, 1, 3}, k_dims[3] = {0, 2, 3};
  *qb = mxu_hlo_broadcast(e->h, q, s, q_dims);
  *kb = mxu_hlo_broadcast(e->h, k, s, k_dims);
}

static mxu_hlo_value scores_emit(const mxu_layer *layer, mxu_emit *e,
                                 const datt_dims *d) {
  mxu_hlo *h = e->h;
  const mxu_dense_attention_config *c = config_of(layer);
  mxu_hlo_value q = e->in[0], k = e->in[key_input(layer)];
  mxu_hlo_value scale = c->use_scale ? e->w[0] : 0;
  if (!c->additive && !c->concat) {
    const int64_t batch[1] = {0}, contract[1] = {2};
    mxu_hlo_value s =
        mxu_hlo_dot(h, q, k, 1, batch, batch, 1, contract, contract);
    if (!scale) return s;
    const int64_t none[1] = {0};
    return mxu_hlo_mul(
        h, s, mxu_hlo_broadcast(h, scale, *mxu_hlo_shape_of(h, s), none));
  }
  mxu_hlo_value qb, kb;
  pairs_emit(e, d, q, k, &qb, &kb);
  mxu_hlo_value pre = mxu_hlo_add(h, qb, kb);
  mxu_hlo_shape whole = *mxu_hlo_shape_of(h, pre);
  const int64_t feature[1] = {3}, none[1] = {0};
  if (scale && !c->additive)
    pre = mxu_hlo_mul(h, pre, mxu_hlo_broadcast(h, scale, whole, none));
  mxu_hlo_value t = mxu_hlo_unary(h, MXU_HLO_TANH, pre);
  if (scale && c->additive)
    t = mxu_hlo_mul(h, t, mxu_hlo_broadcast(h, scale, whole, feature));
  mxu_hlo_value s = mxu_hlo_reduce(h, t, MXU_HLO_SUM, 1, feature);
  if (c->additive || !c->concat) return s;
  mxu_hlo_value weight = e->w[c->use_scale ? 1 : 0];
  return mxu_hlo_mul(
      h, s, mxu_hlo_broadcast(h, weight, *mxu_hlo_shape_of(h, s), none));
}

static mxu_hlo_value datt_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const mxu_dense_attention_config *c = config_of(layer);
  datt_dims d = dims_of(layer, e->batch);
  mxu_hlo_value p = mxu_emit_dropped(
      e, mxu_emit_attention_weights(e, scores_emit(layer, e, &d), c->causal),
      c->dropout);
  const int64_t batch[1] = {0}, p_contract[1] = {2}, v_contract[1] = {1};
  return mxu_hlo_dot(h, p, e->in[1], 1, batch, batch, 1, p_contract,
                     v_contract);
}

static int datt_noise(const mxu_layer *layer, const mxu_layer_run *run,
                      float *out) {
  if (config_of(layer)->dropout == 0.0f) return 0;
  return mxu_stream_noise(run, out);
}

/* ---- Keras' JSON ---------------------------------------------------------
 * Called on [query, value] or [query, value, key]; use_causal_mask is a
 * call argument (tf.keras 2 writes it in each tensor's kwargs).
 * return_attention_scores, a second output, is refused. tf.keras 2's
 * older `causal` config key means use_causal_mask. */

static const char *const attention_keys[] = {
    "use_scale", "score_mode", "dropout", "seed", "causal", NULL};
static const char *const additive_keys[] = {"use_scale", "dropout", "seed",
                                            "causal", NULL};
static const char *const call_options[] = {"use_causal_mask",
                                           "return_attention_scores", NULL};

static mxu_status read_common(const mxu_json_where *where, const cJSON *config,
                              mxu_json_node *node, const char *name,
                              mxu_dense_attention_config *c) {
  c->name = name;
  MXU_TRY(mxu_json_bool(where, config, "use_scale", &c->use_scale));
  MXU_TRY(mxu_json_rate(where, config, "dropout", &c->dropout));
  MXU_TRY(mxu_json_bool(where, config, "causal", &c->causal));
  MXU_TRY(mxu_json_bool(where, node->kwargs, "use_causal_mask", &c->causal));
  MXU_TRY(
      mxu_json_require_false(where, node->kwargs, "return_attention_scores"));
  mxu_tensor_id key = node->input_count > 2 ? node->inputs[2] : -1;
  return mxu_json_applied(where, node,
                          mxu_apply_dense_attention(node->model, c,
                                                    node->inputs[0],
                                                    node->inputs[1], key));
}

static mxu_status read_attention(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_dense_attention_config c = {0};
  const char *mode = NULL;
  MXU_TRY(
      mxu_json_string(where, config, "score_mode", MXU_JSON_OPTIONAL, &mode));
  if (mode && strcmp(mode, "dot") != 0 && strcmp(mode, "concat") != 0)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "score_mode '%s' must be dot or concat", mode);
  c.concat = mode && strcmp(mode, "concat") == 0;
  return read_common(where, config, node, name, &c);
}

static mxu_status read_additive(const mxu_json_where *where,
                                const cJSON *config, mxu_json_node *node,
                                const char *name) {
  mxu_dense_attention_config c = {.additive = 1, .use_scale = 1};
  return read_common(where, config, node, name, &c);
}

static void write_datt(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *config) {
  const mxu_dense_attention_config *c = config_of(layer);
  mxu_json_put_bool(out, config, "use_scale", c->use_scale);
  if (!c->additive)
    mxu_json_put_string(out, config, "score_mode",
                        c->concat ? "concat" : "dot");
  mxu_json_put_float(out, config, "dropout", c->dropout);
  if (out->keras3) mxu_json_put_null(out, config, "seed");
}

static void write_call(mxu_json_out *out, const mxu_layer *layer,
                       cJSON *kwargs) {
  if (config_of(layer)->causal)
    mxu_json_put_bool(out, kwargs, "use_causal_mask", 1);
}

#define DENSE_ATTENTION_CLASS(cname, keys, reader)                             \
  {                                                                            \
    .class_name = cname, .config_keys = keys, .read_config = reader,           \
    .write_config = write_datt, .call_options = call_options,                  \
    .write_call = write_call, .min_inputs = 2, .max_inputs = 3,                \
    .infer = datt_infer, .declare = datt_declare, .flops = datt_flops,         \
    .plan = datt_plan, .forward = datt_forward, .backward = datt_backward,     \
    .emit = datt_emit, .emit_noise = datt_noise, .noise_is_stream = 1,         \
    .output_mask = mxu_input_mask, .uses_mask = 1, .mask_all_or_none = 1       \
  }

const mxu_layer_class mxu_attention_class =
    DENSE_ATTENTION_CLASS("Attention", attention_keys, read_attention);
const mxu_layer_class mxu_additive_attention_class =
    DENSE_ATTENTION_CLASS("AdditiveAttention", additive_keys, read_additive);
