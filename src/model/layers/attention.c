/* attention.c — MultiHeadAttention, Keras' layer: the query attends over
 * the value's positions through the key, head by head; and Keras 3's
 * GroupQueryAttention, the same with fewer key and value heads, each
 * shared by a group of query heads (query head h reads key and value
 * head h / (heads / kv_heads), as Keras' repeat of them lays them out).
 *
 * The four projections (query, key, value, attention_output) are the
 * backend's dense ops over every position at once. Between them, per
 * sample and head, the attention itself is plain loops: scores of the
 * scaled query against the key, a softmax over the allowed positions (all,
 * or 0..i with the causal mask), dropout of the probabilities in training,
 * and their weighted sum of the value. Every loop runs in a fixed order,
 * so the sums are the same bits for any batch slicing and backend.
 *
 * Layouts, per sample: positions first, heads within, each head's values
 * last; Q, K and V as the projections write them ((T, heads, dim) is the
 * (T, heads * dim) the dense op writes; K and V with kv_heads), the
 * probabilities (heads, Tq, Tv) as Keras' attention scores. */
#include "model/layers/layers.h"

#include <math.h>
#include <string.h>

/* The weights in Keras' order: each projection's kernel, then its bias. */
enum { QUERY = 0, KEY, VALUE, OUTPUT, PROJECTIONS };

static const char *const weight_names[PROJECTIONS][2] = {
    {"query/kernel", "query/bias"},
    {"key/kernel", "key/bias"},
    {"value/kernel", "value/bias"},
    {"attention_output/kernel", "attention_output/bias"}};

/* Keras 3's subgroup of each projection (layers/<mha>/query_dense/vars);
 * GroupQueryAttention's keep their attributes' underscores. */
static const char *const keras3_groups[2][PROJECTIONS] = {
    {"query_dense", "key_dense", "value_dense", "output_dense"},
    {"_query_dense", "_key_dense", "_value_dense", "_output_dense"}};

typedef struct att_dims {
  int64_t n, tq, tv;          /* samples, query and value positions */
  int64_t dq, dk, dv;         /* the query's, key's and value's features */
  int64_t heads, kd, vd, out; /* key_dim, value_dim, output_dim */
  int64_t kvh;                /* the key's and value's heads */
} att_dims;

static int value_dim_of(const mxu_attention_config *c) {
  return c->value_dim ? c->value_dim : c->key_dim;
}

/* The key's input: its own, or the value's. */
static const mxu_shape *key_shape(const mxu_layer *layer) {
  return &layer->in_shapes[layer->input_count > 2 ? 2 : 1];
}

static int64_t last_dim(const mxu_shape *s) { return s->dims[s->rank - 1]; }

static int64_t positions(const mxu_shape *s) {
  return mxu_shape_count(s) / last_dim(s);
}

static att_dims dims_of(const mxu_layer *layer, int64_t batch) {
  const mxu_attention_config *c = &layer->config.attention;
  const mxu_shape *q = &layer->in_shapes[0], *v = &layer->in_shapes[1];
  return (att_dims){batch,
                    positions(q),
                    positions(v),
                    last_dim(q),
                    last_dim(key_shape(layer)),
                    last_dim(v),
                    c->num_heads,
                    c->key_dim,
                    value_dim_of(c),
                    last_dim(&layer->out_shape),
                    c->kv_heads ? c->kv_heads : c->num_heads};
}

/* ---- shapes and weights ------------------------------------------------- */

static mxu_status check_config(const mxu_layer *layer) {
  const mxu_attention_config *c = &layer->config.attention;
  const int limit = 1 << 16;
  if (c->num_heads < 1 || c->num_heads > limit || c->key_dim < 1 ||
      c->key_dim > limit || c->value_dim < 0 || c->value_dim > limit ||
      c->output_dim < 0 || c->output_dim > (1 << 20))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: num_heads %d and key_dim %d must be in 1..%d, "
                    "value_dim %d in 0..%d and output_dim %d in 0..%d (0: "
                    "Keras' default)",
                    layer->name, c->num_heads, c->key_dim, limit, c->value_dim,
                    limit, c->output_dim, 1 << 20);
  if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
    return mxu_fail(MXU_ERR_ARG, "%s: dropout must be in [0, 1), got %g",
                    layer->name, (double)c->dropout);
  if (c->kv_heads < 0 || (c->kv_heads && c->num_heads % c->kv_heads))
    return mxu_fail(MXU_ERR_ARG,
                    "%s: num_key_value_heads %d must divide num_query_heads "
                    "%d",
                    layer->name, c->kv_heads, c->num_heads);
  return MXU_OK;
}

/* Query and value of one rank, at least (positions, features); the key's
 * positions the value's. The output is the query's shape with
 * output_dim features. */
static mxu_status attention_infer(mxu_layer *layer) {
  const mxu_attention_config *c = &layer->config.attention;
  MXU_TRY(check_config(layer));
  const mxu_shape *q = &layer->in_shapes[0], *v = &layer->in_shapes[1];
  const mxu_shape *k = key_shape(layer);
  char qt[64], vt[64], kt[64];
  mxu_shape_format(q, qt, sizeof qt);
  mxu_shape_format(v, vt, sizeof vt);
  mxu_shape_format(k, kt, sizeof kt);
  int fits = q->rank >= 2 && v->rank == q->rank && k->rank == v->rank;
  for (int d = 0; fits && d + 1 < v->rank; d++) fits = k->dims[d] == v->dims[d];
  if (!fits)
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: query %s, value %s and key %s must be of one rank, "
                    "at least (positions, features), the key's positions "
                    "the value's",
                    layer->name, qt, vt, kt);
  /* Keras' GroupQueryAttention: (positions, features) and a value of the
   * query's features, which its output has. */
  if (c->kv_heads && (q->rank != 2 || last_dim(v) != last_dim(q) ||
                      c->value_dim || c->output_dim))
    return mxu_fail(MXU_ERR_SHAPE,
                    "%s: GroupQueryAttention takes a query and value of "
                    "(positions, features), as many features each; got "
                    "query %s, value %s",
                    layer->name, qt, vt);
  if (c->causal && q->rank > 2)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: a causal mask over query %s is not supported: "
                    "Keras' masks only the first axis of several",
                    layer->name, qt);
  layer->out_shape = *q;
  layer->out_shape.dims[q->rank - 1] =
      c->output_dim ? c->output_dim : last_dim(q);
  return MXU_OK;
}

static int weights_per(const mxu_attention_config *c) {
  return c->use_bias ? 2 : 1;
}

static int attention_declare(const mxu_layer *layer, mxu_param_decl *decls) {
  const mxu_attention_config *c = &layer->config.attention;
  att_dims d = dims_of(layer, 1);
  /* Each projection's kernel: (in, heads, dim), the output's (heads,
   * value_dim, out); Keras 3's fans: (in, heads * dim), (heads *
   * value_dim, out). */
  int64_t kernels[PROJECTIONS][3] = {{d.dq, d.heads, d.kd},
                                     {d.dk, d.kvh, d.kd},
                                     {d.dv, d.kvh, d.vd},
                                     {d.heads, d.vd, d.out}};
  int per = weights_per(c), count = 0;
  for (int p = 0; p < PROJECTIONS; p++) {
    const int64_t *k = kernels[p];
    mxu_param_decl *w = &decls[count];
    w[0] = mxu_weight_decl(weight_names[p][0], mxu_shape_make(3, k), &c->kernel,
                           mxu_init_glorot_uniform());
    int64_t fans[2] = {p == OUTPUT ? k[0] * k[1] : k[0],
                       p == OUTPUT ? k[2] : k[1] * k[2]};
    if (!c->tf2_fans) w[0].fans = mxu_shape_make(2, fans);
    if (c->use_bias)
      w[1] = mxu_weight_decl(weight_names[p][1],
                             p == OUTPUT ? mxu_shape_make(1, &k[2])
                                         : mxu_shape_make(2, &k[1]),
                             &c->bias, mxu_init_zeros());
    count += per;
  }
  return count;
}

static const char *attention_group(const mxu_layer *layer, int k) {
  const mxu_attention_config *c = &layer->config.attention;
  return keras3_groups[c->kv_heads > 0][k / weights_per(c)];
}

/* The projections' products, and per head the scores and the weighted sum
 * (2 flops a product term each) and some 5 flops a probability (softmax,
 * dropout); backward about twice that. */
static double attention_flops(const mxu_layer *layer,
                              const mxu_flops_step *step) {
  att_dims d = dims_of(layer, 1);
  double projections =
      2.0 * (d.tq * d.dq * d.heads * d.kd + d.tv * d.dk * d.kvh * d.kd +
             d.tv * d.dv * d.kvh * d.vd + d.tq * d.heads * d.vd * d.out);
  double pairs = (double)d.heads * d.tq * d.tv;
  double core = 2.0 * pairs * (d.kd + d.vd) + 5.0 * pairs;
  double backward =
      projections * (step->need_dx ? 2.0 : 1.5) + 2.0 * core + 5.0 * pairs;
  return projections + core + backward;
}

/* ---- the plan ------------------------------------------------------------
 * ops[p] the projection p's dense op; scratch[0] what backward reads of
 * the forward pass, scratch[1] backward's work. */

typedef struct att_buffers {
  float *q;     /* (n, tq, heads, kd): the query's projection, scaled */
  float *k;     /* (n, tv, kvh, kd) */
  float *v;     /* (n, tv, kvh, vd) */
  float *probs; /* (n, heads, tq, tv): after the softmax */
  float *keep;  /* dropout: the same, 0 or 1 / (1 - rate) */
  float *heads; /* (n, tq, heads, vd): the attention's results */
  float *d_heads, *dq, *dk, *dv; /* their gradients */
  float *row;                    /* tv: one row of the probabilities' */
  float *t;     /* max(kd, vd) x tv: a head's K or V transposed */
  float *d_key; /* (n, tv, dk): the key's input gradient, when the value's */
} att_buffers;

static size_t forward_floats(const att_dims *d) {
  return (size_t)(d->n * (d->tq * d->heads * (d->kd + d->vd) +
                          d->tv * d->kvh * (d->kd + d->vd) +
                          2 * d->heads * d->tq * d->tv));
}

static int64_t transposed_floats(const att_dims *d) {
  return (d->kd > d->vd ? d->kd : d->vd) * d->tv;
}

static size_t work_floats(const att_dims *d) {
  return (size_t)(d->n * (d->tq * d->heads * (d->vd + d->kd) +
                          d->tv * d->kvh * (d->kd + d->vd) + d->tv * d->dk) +
                  d->tv + transposed_floats(d));
}

static att_buffers buffers_of(const mxu_layer *layer, const mxu_layer_run *run,
                              const att_dims *d) {
  const size_t *scratch = layer->compiled->scratch;
  float *f = (float *)(void *)(run->arena + scratch[0]);
  float *w = (float *)(void *)(run->arena + scratch[1]);
  int64_t hq = d->n * d->tq * d->heads, hv = d->n * d->tv * d->kvh;
  int64_t pairs = d->n * d->heads * d->tq * d->tv;
  att_buffers b;
  b.q = f;
  b.k = b.q + hq * d->kd;
  b.v = b.k + hv * d->kd;
  b.probs = b.v + hv * d->vd;
  b.keep = b.probs + pairs;
  b.heads = b.keep + pairs;
  b.d_heads = w;
  b.dq = b.d_heads + hq * d->vd;
  b.dk = b.dq + hq * d->kd;
  b.dv = b.dk + hv * d->kd;
  b.d_key = b.dv + hv * d->vd;
  b.row = b.d_key + d->n * d->tv * d->dk;
  b.t = b.row + d->tv;
  return b;
}

static mxu_status attention_plan(mxu_layer *layer, const mxu_backend *backend,
                                 int batch, mxu_arena *layout) {
  const mxu_attention_config *c = &layer->config.attention;
  att_dims d = dims_of(layer, batch);
  mxu_dense_desc descs[PROJECTIONS] = {
      {(int)(d.n * d.tq), (int)d.dq, (int)(d.heads * d.kd), c->use_bias,
       MXU_LINEAR, 0},
      {(int)(d.n * d.tv), (int)d.dk, (int)(d.kvh * d.kd), c->use_bias,
       MXU_LINEAR, 0},
      {(int)(d.n * d.tv), (int)d.dv, (int)(d.kvh * d.vd), c->use_bias,
       MXU_LINEAR, 0},
      {(int)(d.n * d.tq), (int)(d.heads * d.vd), (int)d.out, c->use_bias,
       MXU_LINEAR, 0}};
  for (int p = 0; p < PROJECTIONS; p++)
    MXU_TRY(backend->dense_create(&descs[p], &layer->compiled->ops[p]));
  layer->compiled->scratch[0] =
      mxu_arena_reserve(layout, forward_floats(&d) * sizeof(float));
  layer->compiled->scratch[1] =
      mxu_arena_reserve(layout, work_floats(&d) * sizeof(float));
  return MXU_OK;
}

/* ---- one sample's head ---------------------------------------------------
 * A head of sample n: its rows of Q, K, V and results are `stride` floats
 * apart (heads or kv_heads times dim), its probabilities a (tq, tv) block. */

typedef struct att_head {
  const att_dims *d;
  int64_t q_stride, k_stride; /* heads * kd, kvh * kd */
  int64_t v_stride, o_stride; /* kvh * vd, heads * vd */
  float *q, *k, *v, *heads;   /* the head's first values */
  float *probs, *keep;        /* its (tq, tv) block; keep NULL: none */
  const float *ids; /* the mask's ids of the sample (tq = tv), or NULL */
} att_head;

static att_head head_of(const att_dims *d, const att_buffers *b, int64_t n,
                        int64_t h, int dropping, const float *ids) {
  int64_t block = d->tq * d->tv, first = (n * d->heads + h) * block;
  int64_t kv = h / (d->heads / d->kvh);
  return (att_head){d,
                    d->heads * d->kd,
                    d->kvh * d->kd,
                    d->kvh * d->vd,
                    d->heads * d->vd,
                    b->q + n * d->tq * d->heads * d->kd + h * d->kd,
                    b->k + n * d->tv * d->kvh * d->kd + kv * d->kd,
                    b->v + n * d->tv * d->kvh * d->vd + kv * d->vd,
                    b->heads + n * d->tq * d->heads * d->vd + h * d->vd,
                    b->probs + first,
                    dropping ? b->keep + first : NULL,
                    ids ? ids + n * d->tq : NULL};
}

/* rows (count, dim), `stride` apart, into t (dim, count). */
static void transpose(const float *rows, int64_t count, int64_t dim,
                      int64_t stride, float *t) {
  for (int64_t j = 0; j < count; j++)
    for (int64_t c = 0; c < dim; c++) t[c * count + j] = rows[j * stride + c];
}

/* out[j] = sum over c of a[c] t[c][j], j < count: a row times the
 * transposed rows, in c's order (the inner loop runs along j). */
static void row_times(const float *restrict a, const float *restrict t,
                      int64_t dim, int64_t count, int64_t cols,
                      float *restrict out) {
  for (int64_t j = 0; j < count; j++) out[j] = 0.0f;
  for (int64_t c = 0; c < dim; c++)
    for (int64_t j = 0; j < count; j++) out[j] += a[c] * t[c * cols + j];
}

static void axpy(float a, const float *restrict x, int64_t count,
                 float *restrict y) {
  for (int64_t c = 0; c < count; c++) y[c] += a * x[c];
}

/* The positions query position i attends to: 0..i when causal. */
static int64_t allowed(const mxu_attention_config *c, const att_dims *d,
                       int64_t i) {
  return c->causal && i + 1 < d->tv ? i + 1 : d->tv;
}

/* Softmax of row[0..count) in place, the rest up to tv zeros (the causal
 * mask: Keras' exp of -1e9 below the maximum is 0 too); -inf values, the
 * padded positions, give 0 (one at least is finite: the query's own). */
static void softmax_row(float *row, int64_t count, int64_t tv) {
  float top = row[0], sum = 0.0f;
  for (int64_t j = 1; j < count; j++)
    if (row[j] > top) top = row[j];
  for (int64_t j = 0; j < count; j++) sum += row[j] = expf(row[j] - top);
  for (int64_t j = 0; j < count; j++) row[j] /= sum;
  for (int64_t j = count; j < tv; j++) row[j] = 0.0f;
}

static void head_forward(const mxu_attention_config *c, const att_head *a,
                         float *t) {
  const att_dims *d = a->d;
  transpose(a->k, d->tv, d->kd, a->k_stride, t);
  for (int64_t i = 0; i < d->tq; i++) {
    int64_t count = allowed(c, d, i);
    float *p = a->probs + i * d->tv, *out = a->heads + i * a->o_stride;
    for (int64_t e = 0; e < d->vd; e++) out[e] = 0.0f;
    /* An Embedding's mask: a padded query attends to nothing (Keras 3's
     * softmax zeroes its row), and no query to a padded position. */
    if (a->ids && a->ids[i] == 0.0f) {
      memset(p, 0, (size_t)d->tv * sizeof(float));
      continue;
    }
    row_times(a->q + i * a->q_stride, t, d->kd, count, d->tv, p);
    for (int64_t j = 0; a->ids && j < count; j++)
      if (a->ids[j] == 0.0f) p[j] = -INFINITY;
    softmax_row(p, count, d->tv);
    for (int64_t j = 0; j < count; j++) {
      float weight = a->keep ? p[j] * a->keep[i * d->tv + j] : p[j];
      axpy(weight, a->v + j * a->v_stride, d->vd, out);
    }
  }
}

/* dheads: the head's results' gradients; adds into its dq, dk and dv
 * (dq of the scaled query). */
static void head_backward(const mxu_attention_config *c, const att_head *a,
                          const att_head *g, float *row, float *t) {
  const att_dims *d = a->d;
  transpose(a->v, d->tv, d->vd, a->v_stride, t);
  for (int64_t i = 0; i < d->tq; i++) {
    int64_t count = allowed(c, d, i);
    const float *p = a->probs + i * d->tv;
    const float *keep = a->keep ? a->keep + i * d->tv : NULL;
    const float *dout = g->heads + i * a->o_stride;
    /* The dropped probabilities' gradient, then the softmax's. */
    row_times(dout, t, d->vd, count, d->tv, row);
    float dot = 0.0f;
    for (int64_t j = 0; j < count; j++) {
      float weight = keep ? p[j] * keep[j] : p[j];
      axpy(weight, dout, d->vd, g->v + j * a->v_stride);
      if (keep) row[j] *= keep[j];
      dot += p[j] * row[j];
    }
    for (int64_t j = 0; j < count; j++) {
      float ds = p[j] * (row[j] - dot);
      axpy(ds, a->k + j * a->k_stride, d->kd, g->q + i * a->q_stride);
      axpy(ds, a->q + i * a->q_stride, d->kd, g->k + j * a->k_stride);
    }
  }
}

/* ---- forward and backward ----------------------------------------------- */

typedef struct att_run {
  const mxu_attention_config *c;
  att_dims d;
  att_buffers b;
  const float *w[PROJECTIONS], *bias[PROJECTIONS];
  float *dw[PROJECTIONS], *db[PROJECTIONS];
  const float *x[3]; /* query, value, key (the value's when none) */
  int dropping;
} att_run;

static att_run run_of(const mxu_layer *layer, const mxu_layer_run *run) {
  att_run r;
  r.c = &layer->config.attention;
  r.d = dims_of(layer, layer->compiled->batch);
  r.b = buffers_of(layer, run, &r.d);
  int per = weights_per(r.c);
  for (int p = 0; p < PROJECTIONS; p++) {
    r.w[p] = run->w[p * per];
    r.bias[p] = r.c->use_bias ? run->w[p * per + 1] : NULL;
    r.dw[p] = run->dw[p * per];
    r.db[p] = r.c->use_bias ? run->dw[p * per + 1] : NULL;
  }
  r.x[0] = run->xs[0];
  r.x[1] = run->xs[1];
  r.x[2] = run->xs[layer->input_count > 2 ? 2 : 1];
  r.dropping = run->training && r.c->dropout > 0.0f;
  return r;
}

void mxu_draw_keep(const mxu_layer_run *run, float *keep, int64_t rows,
                   int64_t block, float rate) {
  float scale = 1.0f / (1.0f - rate);
  for (int64_t n = 0; n < rows; n++, keep += block) {
    mxu_rng_uniform4(&run->rng, (uint64_t)((run->row_offset + n) * block), keep,
                     (size_t)block);
    for (int64_t i = 0; i < block; i++) keep[i] = keep[i] >= rate ? scale : 0;
  }
}

static void attention_forward(mxu_layer *layer, const mxu_layer_run *run) {
  att_run r = run_of(layer, run);
  const att_dims *d = &r.d;
  const mxu_backend *be = run->backend;
  mxu_op *const *ops = run->ops;
  be->dense_forward(ops[QUERY], r.x[0], r.w[QUERY], r.bias[QUERY], r.b.q);
  be->dense_forward(ops[KEY], r.x[2], r.w[KEY], r.bias[KEY], r.b.k);
  be->dense_forward(ops[VALUE], r.x[1], r.w[VALUE], r.bias[VALUE], r.b.v);
  /* Keras scales the query's projection by 1 / sqrt(key_dim). */
  float scale = (float)(1.0 / sqrt((double)d->kd));
  for (int64_t i = 0; i < d->n * d->tq * d->heads * d->kd; i++)
    r.b.q[i] *= scale;
  if (r.dropping)
    mxu_draw_keep(run, r.b.keep, d->n, d->heads * d->tq * d->tv, r.c->dropout);
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t h = 0; h < d->heads; h++) {
      att_head a = head_of(d, &r.b, n, h, r.dropping, run->mask_ids);
      head_forward(r.c, &a, r.b.t);
    }
  be->dense_forward(ops[OUTPUT], r.b.heads, r.w[OUTPUT], r.bias[OUTPUT],
                    run->y);
}

static void attention_backward(mxu_layer *layer, const mxu_layer_run *run) {
  att_run r = run_of(layer, run);
  const att_dims *d = &r.d;
  const mxu_backend *be = run->backend;
  mxu_op *const *ops = run->ops;
  be->dense_backward_weights(ops[OUTPUT], r.b.heads, run->dy, r.dw[OUTPUT],
                             r.db[OUTPUT]);
  be->dense_backward_data(ops[OUTPUT], run->dy, r.w[OUTPUT], r.b.d_heads);
  int64_t hq = d->n * d->tq * d->heads, hv = d->n * d->tv * d->kvh;
  memset(r.b.dq, 0, (size_t)(hq * d->kd) * sizeof(float));
  memset(r.b.dk, 0, (size_t)(hv * d->kd) * sizeof(float));
  memset(r.b.dv, 0, (size_t)(hv * d->vd) * sizeof(float));
  att_buffers grads = r.b;
  grads.q = r.b.dq, grads.k = r.b.dk, grads.v = r.b.dv;
  grads.heads = r.b.d_heads;
  for (int64_t n = 0; n < d->n; n++)
    for (int64_t h = 0; h < d->heads; h++) {
      att_head a = head_of(d, &r.b, n, h, r.dropping, NULL);
      att_head g = head_of(d, &grads, n, h, 0, NULL);
      head_backward(r.c, &a, &g, r.b.row, r.b.t);
    }
  /* Through the scaling, to the query's projection. */
  float scale = (float)(1.0 / sqrt((double)d->kd));
  for (int64_t i = 0; i < hq * d->kd; i++) r.b.dq[i] *= scale;
  be->dense_backward_weights(ops[QUERY], r.x[0], r.b.dq, r.dw[QUERY],
                             r.db[QUERY]);
  be->dense_backward_weights(ops[KEY], r.x[2], r.b.dk, r.dw[KEY], r.db[KEY]);
  be->dense_backward_weights(ops[VALUE], r.x[1], r.b.dv, r.dw[VALUE],
                             r.db[VALUE]);
  if (run->need_dxs[0])
    be->dense_backward_data(ops[QUERY], r.b.dq, r.w[QUERY], run->dxs[0]);
  int own_key = layer->input_count > 2;
  if (own_key && run->need_dxs[2])
    be->dense_backward_data(ops[KEY], r.b.dk, r.w[KEY], run->dxs[2]);
  if (!run->need_dxs[1]) return;
  be->dense_backward_data(ops[VALUE], r.b.dv, r.w[VALUE], run->dxs[1]);
  if (own_key) return;
  /* The value is the key too: both projections' gradients. */
  be->dense_backward_data(ops[KEY], r.b.dk, r.w[KEY], r.b.d_key);
  for (int64_t i = 0; i < d->n * d->tv * d->dv; i++)
    run->dxs[1][i] += r.b.d_key[i];
}

/* ---- pjrt --------------------------------------------------------------- */

/* x (n, positions..., in) through a projection's kernel (in, heads, dim)
 * and bias: (n, t, heads, dim). */
static mxu_hlo_value project_emit(mxu_emit *e, mxu_hlo_value x, int64_t n,
                                  int64_t t, int64_t in, mxu_hlo_value w,
                                  mxu_hlo_value b, int64_t heads, int64_t dim) {
  mxu_hlo *h = e->h;
  int64_t rows[2] = {n * t, in}, kernel[2] = {in, heads * dim};
  int64_t wide = heads * dim, out[4] = {n, t, heads, dim};
  x = mxu_hlo_reshape(h, x, mxu_hlo_shape_make(MXU_HLO_F32, 2, rows));
  w = mxu_hlo_reshape(h, w, mxu_hlo_shape_make(MXU_HLO_F32, 2, kernel));
  mxu_hlo_value y = mxu_emit_result(
      e, mxu_hlo_matmul(h, mxu_emit_compute(e, x), mxu_emit_compute(e, w)));
  if (b)
    y = mxu_emit_bias(
        e, y, mxu_hlo_reshape(h, b, mxu_hlo_shape_make(MXU_HLO_F32, 1, &wide)));
  return mxu_hlo_reshape(h, y, mxu_hlo_shape_make(MXU_HLO_F32, 4, out));
}

/* GroupQueryAttention's key or value (n, t, kvh, dim) as heads of their
 * own, each repeated for its group: (n, t, kvh * group, dim). */
static mxu_hlo_value repeat_heads(mxu_hlo *h, mxu_hlo_value x, int64_t group) {
  if (group == 1) return x;
  const mxu_hlo_shape s = *mxu_hlo_shape_of(h, x);
  int64_t wide[5] = {s.dims[0], s.dims[1], s.dims[2], group, s.dims[3]};
  int64_t out[4] = {s.dims[0], s.dims[1], s.dims[2] * group, s.dims[3]};
  static const int64_t keep[4] = {0, 1, 2, 4};
  x = mxu_hlo_broadcast(h, x, mxu_hlo_shape_make(s.dtype, 5, wide), keep);
  return mxu_hlo_reshape(h, x, mxu_hlo_shape_make(s.dtype, 4, out));
}

mxu_hlo_value mxu_emit_dropped(mxu_emit *e, mxu_hlo_value p, float rate) {
  if (!e->training || !e->noise || rate == 0.0f) return p;
  mxu_hlo *h = e->h;
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, p);
  int64_t count = 1;
  for (int d = 0; d < s.rank; d++) count *= s.dims[d];
  mxu_hlo_value u =
      mxu_hlo_reshape(h, mxu_emit_uniform4(e, e->noise, count), s);
  mxu_hlo_value keep = mxu_hlo_select(
      h, mxu_hlo_compare_op(h, MXU_HLO_GE, u, mxu_hlo_full_like(h, u, rate)),
      mxu_hlo_full_like(h, u, 1.0 / (1.0 - rate)),
      mxu_hlo_full_like(h, u, 0.0));
  return mxu_hlo_mul(h, p, keep);
}

/* Where query i may attend to position j (scores' last two axes): j <= i
 * with the causal mask, both unpadded with an Embedding's (ids, (n, tq));
 * 0 for everywhere. */
static mxu_hlo_value allowed_emit(mxu_emit *e, mxu_hlo_value scores,
                                  int causal) {
  mxu_hlo *h = e->h;
  mxu_hlo_shape s = *mxu_hlo_shape_of(h, scores);
  mxu_hlo_shape whole = mxu_hlo_shape_make(MXU_HLO_PRED, s.rank, s.dims);
  int64_t i = s.rank - 2, j = s.rank - 1;
  mxu_hlo_value allowed = 0;
  if (causal) {
    mxu_hlo_shape index = mxu_hlo_shape_make(MXU_HLO_S32, s.rank, s.dims);
    allowed = mxu_hlo_compare_op(h, MXU_HLO_GE, mxu_hlo_iota(h, index, i),
                                 mxu_hlo_iota(h, index, j));
  }
  if (!e->mask) return allowed;
  mxu_hlo_value kept = mxu_hlo_compare_op(h, MXU_HLO_NE, e->mask,
                                          mxu_hlo_full_like(h, e->mask, 0.0));
  const int64_t rows[2] = {0, i}, cols[2] = {0, j};
  mxu_hlo_value both =
      mxu_hlo_binary(h, MXU_HLO_AND, mxu_hlo_broadcast(h, kept, whole, rows),
                     mxu_hlo_broadcast(h, kept, whole, cols));
  return allowed ? mxu_hlo_binary(h, MXU_HLO_AND, allowed, both) : both;
}

mxu_hlo_value mxu_emit_attention_weights(mxu_emit *e, mxu_hlo_value scores,
                                         int causal) {
  mxu_hlo *h = e->h;
  /* Scores not allowed set to -1e9 before the softmax, as Keras' masks,
   * and their weights to 0 after (a padded query's whole row). */
  mxu_hlo_value allowed = allowed_emit(e, scores, causal);
  if (allowed)
    scores =
        mxu_hlo_select(h, allowed, scores, mxu_hlo_full_like(h, scores, -1e9));
  mxu_hlo_value saved = e->logits; /* the softmax notes its logits */
  mxu_hlo_value p = mxu_emit_activation(e, MXU_SOFTMAX, 0.0f, scores);
  e->logits = saved;
  if (allowed) p = mxu_hlo_select(h, allowed, p, mxu_hlo_full_like(h, p, 0.0));
  return p;
}

static mxu_hlo_value attention_emit(const mxu_layer *layer, mxu_emit *e) {
  mxu_hlo *h = e->h;
  const mxu_attention_config *c = &layer->config.attention;
  att_dims d = dims_of(layer, e->batch);
  int per = weights_per(c);
  const mxu_hlo_value *w = e->w;
#define BIAS(p) (c->use_bias ? w[(p)*per + 1] : 0)
  mxu_hlo_value q =
      project_emit(e, e->in[0], d.n, d.tq, d.dq, w[0], BIAS(0), d.heads, d.kd);
  mxu_hlo_value k = project_emit(e, e->in[layer->input_count > 2 ? 2 : 1], d.n,
                                 d.tv, d.dk, w[per], BIAS(KEY), d.kvh, d.kd);
  mxu_hlo_value v = project_emit(e, e->in[1], d.n, d.tv, d.dv, w[2 * per],
                                 BIAS(VALUE), d.kvh, d.vd);
  k = repeat_heads(h, k, d.heads / d.kvh);
  v = repeat_heads(h, v, d.heads / d.kvh);
  q = mxu_hlo_mul(h, q,
                  mxu_hlo_full_like(h, q, (float)(1.0 / sqrt((double)d.kd))));
  /* (n, heads, tq, tv): batch dims n and heads, contracting the key dim. */
  const int64_t batch[2] = {0, 2}, contract_qk[1] = {3};
  mxu_hlo_value scores =
      mxu_hlo_dot(h, q, k, 2, batch, batch, 1, contract_qk, contract_qk);
  mxu_hlo_value p = mxu_emit_dropped(
      e, mxu_emit_attention_weights(e, scores, c->causal), c->dropout);
  /* (n, heads, tq, vd), then (n * tq, heads * vd) for the output's. */
  const int64_t p_batch[2] = {0, 1}, v_batch[2] = {0, 2};
  const int64_t p_contract[1] = {3}, v_contract[1] = {1};
  mxu_hlo_value heads =
      mxu_hlo_dot(h, p, v, 2, p_batch, v_batch, 1, p_contract, v_contract);
  const int64_t order[4] = {0, 2, 1, 3};
  heads = mxu_hlo_transpose(h, heads, order);
  int64_t rows[2] = {d.n * d.tq, d.heads * d.vd}, kernel[2] = {rows[1], d.out};
  heads = mxu_hlo_reshape(h, heads, mxu_hlo_shape_make(MXU_HLO_F32, 2, rows));
  mxu_hlo_value wo = mxu_hlo_reshape(
      h, w[OUTPUT * per], mxu_hlo_shape_make(MXU_HLO_F32, 2, kernel));
  mxu_hlo_value y =
      mxu_emit_result(e, mxu_hlo_matmul(h, mxu_emit_compute(e, heads),
                                        mxu_emit_compute(e, wo)));
  if (c->use_bias) y = mxu_emit_bias(e, y, BIAS(OUTPUT));
#undef BIAS
  return mxu_hlo_reshape(h, y, mxu_batch_shape(e->batch, &layer->out_shape));
}

/* pjrt: dropout's stream, from which the device draws draw_keep's. */
static int attention_noise(const mxu_layer *layer, const mxu_layer_run *run,
                           float *out) {
  if (layer->config.attention.dropout == 0.0f) return 0;
  return mxu_stream_noise(run, out);
}

/* ---- Keras' JSON ---------------------------------------------------------
 * Refused: what the layer's call would need masks, gates or windows for
 * (use_gate, sliding_window: unknown keys unless off), attention over
 * some of several axes, and an output_shape of several dims. tf.keras 2's
 * query_shape, key_shape and value_shape restate the inputs' shapes. */

static const char *const attention_keys[] = {
    "num_heads",   "key_dim",      "value_dim",      "dropout",
    "use_bias",    "output_shape", "attention_axes", "seed",
    "query_shape", "key_shape",    "value_shape",    MXU_WEIGHT_OPTION_KEYS};

static const char *const call_tensors[] = {"query", "value", "key", NULL};
static const char *const call_options[] = {"use_causal_mask",
                                           "return_attention_scores", NULL};

/* An int, or null for Keras' default (0 here); output_shape may be a
 * list of one. */
static mxu_status read_dim(const mxu_json_where *where, const cJSON *config,
                           const char *key, int *out) {
  const cJSON *v = mxu_json_get(config, key);
  *out = 0;
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1) v = v->child;
  if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 20) ||
      v->valuedouble != (int)v->valuedouble) {
    char text[64];
    mxu_json_text(mxu_json_get(config, key), text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                         "%s %s is not supported: a whole number of "
                         "features, or null",
                         key, text);
  }
  *out = (int)v->valuedouble;
  return MXU_OK;
}

/* attention_axes: null, or every axis between the batch and the features
 * of a query of `rank` dims with the batch (Keras' default). */
static mxu_status read_axes(const mxu_json_where *where, const cJSON *config,
                            int rank) {
  const cJSON *v = mxu_json_get(config, "attention_axes");
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  int next = 1, fits = 1;
  if (cJSON_IsNumber(v)) {
    int axis = (int)v->valuedouble;
    fits = (axis == 1 || axis == 1 - rank) && rank == 3;
  } else if (cJSON_IsArray(v)) {
    for (const cJSON *a = v->child; a && fits; a = a->next, next++) {
      int axis = cJSON_IsNumber(a) ? (int)a->valuedouble : -1000;
      fits = axis == next || axis == next - rank;
    }
    fits = fits && next == rank - 1;
  } else {
    fits = 0;
  }
  if (fits) return MXU_OK;
  char text[64];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "attention_axes %s is not supported: mxu attends over "
                       "every axis between the batch and the features "
                       "(null, or 1 to %d)",
                       text, rank - 2);
}

/* Both attentions' use_bias, dropout, weight options and call options;
 * then the layer on the node's query, value and key. */
static mxu_status read_shared_and_apply(const mxu_json_where *where,
                                        const cJSON *config,
                                        mxu_json_node *node,
                                        mxu_attention_config *c) {
  MXU_TRY(mxu_json_bool(where, config, "use_bias", &c->use_bias));
  MXU_TRY(mxu_json_rate(where, config, "dropout", &c->dropout));
  MXU_TRY(mxu_config_weight_options(where, config, "kernel", &c->kernel));
  MXU_TRY(mxu_config_weight_options(where, config, "bias", &c->bias));
  MXU_TRY(mxu_json_bool(where, node->kwargs, "use_causal_mask", &c->causal));
  MXU_TRY(
      mxu_json_require_false(where, node->kwargs, "return_attention_scores"));
  mxu_tensor_id key = node->input_count > 2 ? node->inputs[2] : -1;
  return mxu_json_applied(where, node,
                          mxu_apply_multi_head_attention(node->model, c,
                                                         node->inputs[0],
                                                         node->inputs[1], key));
}

static mxu_status read_attention(const mxu_json_where *where,
                                 const cJSON *config, mxu_json_node *node,
                                 const char *name) {
  mxu_attention_config c = mxu_attention_defaults(0, 0);
  c.name = name;
  c.tf2_fans = node->model->keras2_names;
  MXU_TRY(mxu_json_int(where, config, "num_heads", MXU_JSON_REQUIRED, 1,
                       1 << 16, &c.num_heads));
  MXU_TRY(mxu_json_int(where, config, "key_dim", MXU_JSON_REQUIRED, 1, 1 << 16,
                       &c.key_dim));
  MXU_TRY(read_dim(where, config, "value_dim", &c.value_dim));
  MXU_TRY(read_dim(where, config, "output_shape", &c.output_dim));
  mxu_tensor_id query = node->inputs[0];
  if (query >= 0)
    MXU_TRY(read_axes(where, config,
                      node->model->layers[query].out_shape.rank + 1));
  return read_shared_and_apply(where, config, node, &c);
}

static void write_attention(mxu_json_out *out, const mxu_layer *layer,
                            cJSON *config) {
  const mxu_attention_config *c = &layer->config.attention;
  mxu_json_put_number(out, config, "num_heads", c->num_heads);
  mxu_json_put_number(out, config, "key_dim", c->key_dim);
  mxu_json_put_number(out, config, "value_dim", value_dim_of(c));
  mxu_json_put_float(out, config, "dropout", c->dropout);
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  if (c->output_dim)
    mxu_json_put_number(out, config, "output_shape", c->output_dim);
  else
    mxu_json_put_null(out, config, "output_shape");
  /* Keras' default, resolved as Keras 3 writes it: 1 .. rank - 1. */
  int axes[MXU_MAX_RANK];
  for (int a = 1; a < layer->in_shapes[0].rank; a++) axes[a - 1] = a;
  mxu_json_put(out, config, "attention_axes",
               cJSON_CreateIntArray(axes, layer->in_shapes[0].rank - 1));
  mxu_config_put_initializers(out, config, "kernel", &c->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &c->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "bias", &c->bias,
                           1);
  if (out->keras3) {
    mxu_json_put_null(out, config, "seed");
    return;
  }
  /* tf.keras 2's from_config requires them. (Keras 3 reads no .h5 with a
   * MultiHeadAttention, tf.keras 2's own neither: its .keras it does.) */
  const mxu_shape *shapes[3] = {&layer->in_shapes[0], key_shape(layer),
                                &layer->in_shapes[1]};
  static const char *const keys[3] = {"query_shape", "key_shape",
                                      "value_shape"};
  for (int k = 0; k < 3; k++)
    mxu_json_put(out, config, keys[k], mxu_json_batch_shape(shapes[k]));
}

/* ---- GroupQueryAttention ------------------------------------------------
 * Keras 3's: head_dim for every head, no value_dim, output_shape or
 * attention_axes (the output has the query's features, attention over its
 * positions). Refused: use_gate and sliding_window, unless off. */

static const char *const group_keys[] = {"head_dim",
                                         "num_query_heads",
                                         "num_key_value_heads",
                                         "use_bias",
                                         "use_gate",
                                         "sliding_window",
                                         "dropout",
                                         "seed",
                                         MXU_WEIGHT_OPTION_KEYS};

static mxu_status read_group_attention(const mxu_json_where *where,
                                       const cJSON *config, mxu_json_node *node,
                                       const char *name) {
  mxu_attention_config c = mxu_attention_defaults(0, 0);
  c.name = name;
  MXU_TRY(mxu_json_int(where, config, "head_dim", MXU_JSON_REQUIRED, 1, 1 << 16,
                       &c.key_dim));
  MXU_TRY(mxu_json_int(where, config, "num_query_heads", MXU_JSON_REQUIRED, 1,
                       1 << 16, &c.num_heads));
  MXU_TRY(mxu_json_int(where, config, "num_key_value_heads", MXU_JSON_REQUIRED,
                       1, 1 << 16, &c.kv_heads));
  if (c.num_heads % c.kv_heads)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "num_key_value_heads %d must divide num_query_heads "
                         "%d",
                         c.kv_heads, c.num_heads);
  MXU_TRY(mxu_json_require_false(where, config, "use_gate"));
  MXU_TRY(mxu_json_require_null(where, config, "sliding_window"));
  return read_shared_and_apply(where, config, node, &c);
}

static void write_group_attention(mxu_json_out *out, const mxu_layer *layer,
                                  cJSON *config) {
  const mxu_attention_config *c = &layer->config.attention;
  mxu_json_put_number(out, config, "head_dim", c->key_dim);
  mxu_json_put_number(out, config, "num_query_heads", c->num_heads);
  mxu_json_put_number(out, config, "num_key_value_heads", c->kv_heads);
  mxu_json_put_bool(out, config, "use_bias", c->use_bias);
  mxu_json_put_bool(out, config, "use_gate", 0);
  mxu_json_put_null(out, config, "sliding_window");
  mxu_json_put_float(out, config, "dropout", c->dropout);
  mxu_config_put_initializers(out, config, "kernel", &c->kernel.initializer,
                              mxu_init_glorot_uniform(), "bias",
                              &c->bias.initializer, mxu_init_zeros());
  mxu_config_put_penalties(out, config, "kernel", &c->kernel, "bias", &c->bias,
                           1);
  mxu_json_put_null(out, config, "seed");
}

static void write_attention_call(mxu_json_out *out, const mxu_layer *layer,
                                 cJSON *kwargs) {
  if (layer->config.attention.causal)
    mxu_json_put_bool(out, kwargs, "use_causal_mask", 1);
}

/* The two attentions: one computation, their own configs. */
#define ATTENTION_CLASS(symbol, keras_name, python, keys, reader, writer)      \
  const mxu_layer_class symbol = {.class_name = keras_name,                    \
                                  .python_class = python,                      \
                                  .keras3_group = attention_group,             \
                                  .config_keys = keys,                         \
                                  .read_config = reader,                       \
                                  .write_config = writer,                      \
                                  .call_tensors = call_tensors,                \
                                  .call_options = call_options,                \
                                  .write_call = write_attention_call,          \
                                  .min_inputs = 2,                             \
                                  .max_inputs = 3,                             \
                                  .infer = attention_infer,                    \
                                  .declare = attention_declare,                \
                                  .flops = attention_flops,                    \
                                  .plan = attention_plan,                      \
                                  .forward = attention_forward,                \
                                  .backward = attention_backward,              \
                                  .emit = attention_emit,                      \
                                  .emit_noise = attention_noise,               \
                                  .noise_is_stream = 1,                        \
                                  .output_mask = mxu_input_mask,               \
                                  .uses_mask = 1,                              \
                                  .mask_all_or_none = 1}

ATTENTION_CLASS(mxu_multi_head_attention_class, "MultiHeadAttention", NULL,
                attention_keys, read_attention, write_attention);
ATTENTION_CLASS(mxu_group_query_attention_class, "GroupQueryAttention",
                "GroupedQueryAttention", group_keys, read_group_attention,
                write_group_attention);
