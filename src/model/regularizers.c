/* regularizers.c — Keras' weight regularizers (L1, L2, L1L2: a penalty
 * added to the loss and its gradient to the weights') and constraints
 * (max_norm, non_neg, unit_norm, min_max_norm: applied to the weights
 * after each update): their JSON form and their arithmetic. */
#include "model/model.h"

#include <math.h>
#include <string.h>

/* Keras' backend epsilon in the norm constraints' divisions. */
#define CONSTRAINT_EPSILON 1e-7f

/* ---- JSON -------------------------------------------------------------- */

/* The class and the other names Keras' get() takes. */
static int named(const char *name, const char *class_name, const char *alias) {
  return strcmp(name, class_name) == 0 || strcmp(name, alias) == 0;
}

static const char *name_of(const cJSON *v) {
  const cJSON *name = cJSON_IsObject(v) ? mxu_json_get(v, "class_name") : v;
  return cJSON_IsString(name) ? name->valuestring : NULL;
}

static mxu_status not_supported(const mxu_json_where *where, const char *key,
                                const cJSON *v, const char *supported) {
  char text[160];
  mxu_json_text(v, text, sizeof text);
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED,
                       "%s %s is not supported (supported: %s)", key, text,
                       supported);
}

mxu_status mxu_json_regularizer(const mxu_json_where *where,
                                const cJSON *object, const char *key,
                                mxu_regularizer *out) {
  static const char *const known[] = {"l1", "l2", NULL};
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  const char *name = name_of(v);
  mxu_regularizer r = {0, 0};
  if (name && named(name, "L1", "l1"))
    r.l1 = 0.01f;
  else if (name && named(name, "L2", "l2"))
    r.l2 = 0.01f;
  else if (!name || !named(name, "L1L2", "l1_l2"))
    return not_supported(where, key, v, "L1, L2, L1L2");
  const cJSON *config = cJSON_IsObject(v) ? mxu_json_get(v, "config") : NULL;
  if (config && !cJSON_IsNull(config)) {
    MXU_TRY(mxu_json_check_keys(where, config, known, NULL));
    MXU_TRY(mxu_json_float(where, config, "l1", 0, &r.l1));
    MXU_TRY(mxu_json_float(where, config, "l2", 0, &r.l2));
  }
  if (!(r.l1 >= 0 && r.l2 >= 0 && isfinite(r.l1) && isfinite(r.l2)))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s: l1 and l2 must be finite and >= 0", key);
  *out = r;
  return MXU_OK;
}

void mxu_json_put_regularizer(mxu_json_out *out, cJSON *object, const char *key,
                              const mxu_regularizer *r) {
  if (r->l1 == 0 && r->l2 == 0) {
    mxu_json_put_null(out, object, key);
    return;
  }
  cJSON *config = cJSON_CreateObject();
  const char *class_name = r->l1 && r->l2 ? "L1L2" : r->l1 ? "L1" : "L2";
  if (r->l1) mxu_json_put_float(out, config, "l1", r->l1);
  if (r->l2) mxu_json_put_float(out, config, "l2", r->l2);
  mxu_json_put(out, object, key,
               mxu_json_object(out, "keras.regularizers", class_name, config));
}

static const struct {
  const char *class_name, *alias;
  mxu_constraint_kind kind;
} constraint_classes[] = {{"MaxNorm", "max_norm", MXU_MAX_NORM},
                          {"NonNeg", "non_neg", MXU_NON_NEG},
                          {"UnitNorm", "unit_norm", MXU_UNIT_NORM},
                          {"MinMaxNorm", "min_max_norm", MXU_MIN_MAX_NORM}};

/* axis: an int or a list of ints. */
static mxu_status read_axes(const mxu_json_where *where, const cJSON *config,
                            mxu_constraint *c) {
  const cJSON *axis = mxu_json_get(config, "axis");
  if (!axis || cJSON_IsNull(axis)) return MXU_OK;
  const cJSON *item = cJSON_IsArray(axis) ? axis->child : axis;
  c->axis_count = 0;
  for (; item; item = cJSON_IsArray(axis) ? item->next : NULL) {
    if (!cJSON_IsNumber(item) ||
        item->valuedouble != floor(item->valuedouble) ||
        fabs(item->valuedouble) > MXU_MAX_RANK || c->axis_count == MXU_MAX_RANK)
      return mxu_json_fail(where, MXU_ERR_FORMAT,
                           "constraint axis must be an int or a list of ints "
                           "within the weight's rank");
    c->axes[c->axis_count++] = (int)item->valuedouble;
  }
  return MXU_OK;
}

mxu_status mxu_json_constraint(const mxu_json_where *where, const cJSON *object,
                               const char *key, mxu_constraint *out) {
  static const char *const known[] = {"max_value", "min_value", "rate", "axis",
                                      NULL};
  const cJSON *v = mxu_json_get(object, key);
  if (!v || cJSON_IsNull(v)) return MXU_OK;
  const char *name = name_of(v);
  mxu_constraint c = {
      .max_value = 2, .min_value = 0, .rate = 1, .axes = {0}, .axis_count = 1};
  for (size_t i = 0;
       name && i < sizeof constraint_classes / sizeof *constraint_classes; i++)
    if (named(name, constraint_classes[i].class_name,
              constraint_classes[i].alias))
      c.kind = constraint_classes[i].kind;
  if (c.kind == MXU_CONSTRAINT_NONE)
    return not_supported(where, key, v,
                         "MaxNorm, NonNeg, UnitNorm, MinMaxNorm");
  if (c.kind == MXU_MIN_MAX_NORM) c.max_value = 1;
  const cJSON *config = cJSON_IsObject(v) ? mxu_json_get(v, "config") : NULL;
  if (config && !cJSON_IsNull(config)) {
    MXU_TRY(mxu_json_check_keys(where, config, known, NULL));
    MXU_TRY(mxu_json_float(where, config, "max_value", 0, &c.max_value));
    MXU_TRY(mxu_json_float(where, config, "min_value", 0, &c.min_value));
    MXU_TRY(mxu_json_float(where, config, "rate", 0, &c.rate));
    MXU_TRY(read_axes(where, config, &c));
  }
  if (!(c.min_value >= 0 && c.min_value <= c.max_value) ||
      !isfinite(c.max_value) || !isfinite(c.rate))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s: needs 0 <= min_value <= max_value", key);
  *out = c;
  return MXU_OK;
}

void mxu_json_put_constraint(mxu_json_out *out, cJSON *object, const char *key,
                             const mxu_constraint *c) {
  if (c->kind == MXU_CONSTRAINT_NONE) {
    mxu_json_put_null(out, object, key);
    return;
  }
  cJSON *config = cJSON_CreateObject();
  if (c->kind == MXU_MAX_NORM || c->kind == MXU_MIN_MAX_NORM) {
    if (c->kind == MXU_MIN_MAX_NORM)
      mxu_json_put_float(out, config, "min_value", c->min_value);
    mxu_json_put_float(out, config, "max_value", c->max_value);
    if (c->kind == MXU_MIN_MAX_NORM)
      mxu_json_put_float(out, config, "rate", c->rate);
  }
  if (c->kind != MXU_NON_NEG) {
    cJSON *axes = c->axis_count == 1
                      ? cJSON_CreateNumber(c->axes[0])
                      : cJSON_CreateIntArray(c->axes, c->axis_count);
    mxu_json_put(out, config, "axis", axes);
  }
  mxu_json_put(out, object, key,
               mxu_json_object(out, "keras.constraints",
                               constraint_classes[c->kind - 1].class_name,
                               config));
}

/* ---- arithmetic -------------------------------------------------------- */

static int regularized(const mxu_param *p) {
  return p->trainable && (p->regularizer.l1 != 0 || p->regularizer.l2 != 0);
}

double mxu_regularization_loss(const mxu_model *model) {
  double total = 0;
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!regularized(p)) continue;
    const float *w = model->weights + p->offset;
    double l1 = 0, l2 = 0;
    for (int64_t k = 0; k < p->count; k++) {
      l1 += fabsf(w[k]);
      l2 += (double)w[k] * w[k];
    }
    total += p->regularizer.l1 * l1 + p->regularizer.l2 * l2;
  }
  return total;
}

void mxu_regularization_grad(const mxu_model *model, int64_t begin,
                             int64_t end) {
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!regularized(p)) continue;
    int64_t from = p->offset > begin ? p->offset : begin;
    int64_t to = p->offset + p->count < end ? p->offset + p->count : end;
    float l1 = p->regularizer.l1, two_l2 = 2 * p->regularizer.l2;
    for (int64_t k = from; k < to; k++) {
      float w = model->weights[k];
      model->grads[k] += two_l2 * w + l1 * (float)((w > 0) - (w < 0));
    }
  }
}

/* Whether axis d of a rank-r weight is one the norm runs over. */
static int reduced(const mxu_constraint *c, int rank, int d) {
  for (int a = 0; a < c->axis_count; a++)
    if ((c->axes[a] + rank) % rank == d) return 1;
  return 0;
}

/* The norm constraints: each slice along the kept axes scaled by
 * desired / (eps + norm). Index i's slice: its coordinates on the kept
 * axes, numbered in row-major order. */
static void constrain_norms(const mxu_constraint *c, const mxu_shape *s,
                            float *w, double *norms) {
  int64_t n = mxu_shape_count(s), slices = 1;
  int rank = s->rank > 0 ? s->rank : 1;
  for (int d = 0; d < s->rank; d++)
    if (!reduced(c, rank, d)) slices *= s->dims[d];
  for (int64_t k = 0; k < slices; k++) norms[k] = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < n; i++) {
      int64_t rest = i, slice = 0, stride = 1;
      for (int d = s->rank - 1; d >= 0; d--) {
        int64_t coord = rest % s->dims[d];
        rest /= s->dims[d];
        if (reduced(c, rank, d)) continue;
        slice += coord * stride;
        stride *= s->dims[d];
      }
      if (pass == 0) {
        norms[slice] += (double)w[i] * w[i];
        continue;
      }
      float norm = sqrtf((float)norms[slice]);
      float desired = c->kind == MXU_UNIT_NORM
                          ? 1.0f
                          : fminf(fmaxf(norm, c->min_value), c->max_value);
      if (c->kind == MXU_MIN_MAX_NORM)
        desired = c->rate * desired + (1 - c->rate) * norm;
      w[i] *= desired / (CONSTRAINT_EPSILON + norm);
    }
}

void mxu_apply_constraints(mxu_model *model) {
  for (int i = 0; i < model->param_count; i++) {
    const mxu_param *p = &model->params[i];
    if (!p->trainable || p->constraint.kind == MXU_CONSTRAINT_NONE) continue;
    float *w = model->weights + p->offset;
    if (p->constraint.kind == MXU_NON_NEG)
      for (int64_t k = 0; k < p->count; k++) w[k] = w[k] >= 0 ? w[k] : 0.0f;
    else
      constrain_norms(&p->constraint, &p->shape, w, model->norms);
  }
}
