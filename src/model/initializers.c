/* initializers.c — Keras' initializers: their names, their JSON form, and
 * the values they draw from mxu's counter-based generator. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What a class's config holds besides its seed. */
enum {
  HAS_VALUE = 1,
  HAS_NORMAL = 2,  /* mean, stddev */
  HAS_UNIFORM = 4, /* minval, maxval */
  HAS_SCALING = 8, /* scale, mode, distribution */
  HAS_GAIN = 16,
  HAS_SEED = 32
};

typedef struct init_class {
  const char *name, *class_name;
  mxu_init_kind kind;
  float scale;
  mxu_fan_mode mode;
  mxu_init_distribution distribution;
  int keys;
} init_class;

static const init_class classes[] = {
    {"zeros", "Zeros", MXU_INIT_ZEROS, 0, 0, 0, 0},
    {"ones", "Ones", MXU_INIT_ONES, 0, 0, 0, 0},
    {"constant", "Constant", MXU_INIT_CONSTANT, 0, 0, 0, HAS_VALUE},
    {"random_normal", "RandomNormal", MXU_INIT_RANDOM_NORMAL, 0, 0, 0,
     HAS_NORMAL | HAS_SEED},
    {"random_uniform", "RandomUniform", MXU_INIT_RANDOM_UNIFORM, 0, 0, 0,
     HAS_UNIFORM | HAS_SEED},
    {"truncated_normal", "TruncatedNormal", MXU_INIT_TRUNCATED_NORMAL, 0, 0, 0,
     HAS_NORMAL | HAS_SEED},
    {"variance_scaling", "VarianceScaling", MXU_INIT_VARIANCE_SCALING, 1,
     MXU_FAN_IN, MXU_TRUNCATED_NORMAL, HAS_SCALING | HAS_SEED},
    {"glorot_normal", "GlorotNormal", MXU_INIT_VARIANCE_SCALING, 1, MXU_FAN_AVG,
     MXU_TRUNCATED_NORMAL, HAS_SEED},
    {"glorot_uniform", "GlorotUniform", MXU_INIT_VARIANCE_SCALING, 1,
     MXU_FAN_AVG, MXU_UNIFORM, HAS_SEED},
    {"he_normal", "HeNormal", MXU_INIT_VARIANCE_SCALING, 2, MXU_FAN_IN,
     MXU_TRUNCATED_NORMAL, HAS_SEED},
    {"he_uniform", "HeUniform", MXU_INIT_VARIANCE_SCALING, 2, MXU_FAN_IN,
     MXU_UNIFORM, HAS_SEED},
    {"lecun_normal", "LecunNormal", MXU_INIT_VARIANCE_SCALING, 1, MXU_FAN_IN,
     MXU_TRUNCATED_NORMAL, HAS_SEED},
    {"lecun_uniform", "LecunUniform", MXU_INIT_VARIANCE_SCALING, 1, MXU_FAN_IN,
     MXU_UNIFORM, HAS_SEED},
    {"orthogonal", "Orthogonal", MXU_INIT_ORTHOGONAL, 0, 0, 0,
     HAS_GAIN | HAS_SEED},
    {"identity", "Identity", MXU_INIT_IDENTITY, 0, 0, 0, HAS_GAIN},
};

enum { CLASS_COUNT = sizeof classes / sizeof *classes };

/* Other names Keras' get() takes for a class. */
static const struct {
  const char *alias, *name;
} aliases[] = {{"IdentityInitializer", "identity"},
               {"normal", "random_normal"},
               {"uniform", "random_uniform"},
               {"zero", "zeros"},
               {"one", "ones"}};

static const init_class *class_named(const char *name) {
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (strcmp(name, aliases[i].alias) == 0) name = aliases[i].name;
  for (int i = 0; i < CLASS_COUNT; i++)
    if (strcmp(name, classes[i].name) == 0 ||
        strcmp(name, classes[i].class_name) == 0)
      return &classes[i];
  return NULL;
}

static mxu_initializer from_class(const init_class *c) {
  mxu_initializer init = {0};
  init.kind = c->kind;
  init.stddev = 0.05f;
  init.minval = -0.05f;
  init.maxval = 0.05f;
  init.scale = c->scale;
  init.mode = c->mode;
  init.distribution = c->distribution;
  init.gain = 1.0f;
  snprintf(init.class_name, sizeof init.class_name, "%s", c->class_name);
  return init;
}

mxu_status mxu_initializer_from_name(const char *name, mxu_initializer *out) {
  const init_class *c = name ? class_named(name) : NULL;
  if (c) {
    *out = from_class(c);
    return MXU_OK;
  }
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "initializer '%s' is not supported (supported: zeros, ones, "
                  "constant, random_normal, random_uniform, truncated_normal, "
                  "variance_scaling, glorot_normal, glorot_uniform, "
                  "he_normal, he_uniform, lecun_normal, lecun_uniform, "
                  "orthogonal, identity, or their classes)",
                  name ? name : "(null)");
}

mxu_initializer mxu_init_or(const mxu_initializer *given,
                            mxu_initializer fallback) {
  return given && given->kind != MXU_INIT_DEFAULT ? *given : fallback;
}

mxu_initializer mxu_init_glorot_uniform(void) {
  mxu_initializer init;
  mxu_initializer_from_name("glorot_uniform", &init);
  return init;
}

mxu_initializer mxu_init_zeros(void) {
  mxu_initializer init;
  mxu_initializer_from_name("zeros", &init);
  return init;
}

mxu_initializer mxu_init_ones(void) {
  mxu_initializer init;
  mxu_initializer_from_name("ones", &init);
  return init;
}

/* ---- drawing ----------------------------------------------------------- */

/* Keras' compute_fans: a kernel's fans are its input and output channels
 * times its receptive field. */
static void fans(const mxu_shape *s, double *in, double *out) {
  if (s->rank == 0) {
    *in = *out = 1;
  } else if (s->rank == 1) {
    *in = *out = (double)s->dims[0];
  } else {
    double receptive = 1;
    for (int d = 0; d < s->rank - 2; d++) receptive *= (double)s->dims[d];
    *in = (double)s->dims[s->rank - 2] * receptive;
    *out = (double)s->dims[s->rank - 1] * receptive;
  }
}

/* A standard normal for draw i (Box-Muller on two 24-bit uniforms of one
 * block; attempt picks another block for a truncated redraw). */
static double normal_at(const mxu_rng *rng, uint64_t i, int attempt) {
  uint32_t w[4];
  mxu_rng_block(rng, i * 16 + (uint64_t)attempt, w);
  double u1 = ((w[0] >> 8) + 0.5) / 16777216.0, u2 = (w[1] >> 8) / 16777216.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* TF's truncated normal: redrawn until within 2 standard deviations. */
static double truncated_at(const mxu_rng *rng, uint64_t i) {
  for (int attempt = 0; attempt < 16; attempt++) {
    double z = normal_at(rng, i, attempt);
    if (fabs(z) <= 2.0) return z;
  }
  return 0.0; /* 16 draws beyond 2 sigma: p < 1e-21 */
}

static void fill_normal(const mxu_rng *rng, int truncated, double mean,
                        double stddev, int64_t count, float *values) {
  for (int64_t i = 0; i < count; i++)
    values[i] = (float)(mean + stddev * (truncated ? truncated_at(rng, i)
                                                   : normal_at(rng, i, 0)));
}

static void fill_scaling(const mxu_initializer *init, const mxu_shape *shape,
                         const mxu_rng *rng, int64_t count, float *values) {
  double in, out;
  fans(shape, &in, &out);
  float fan = init->mode == MXU_FAN_IN    ? (float)in
              : init->mode == MXU_FAN_OUT ? (float)out
                                          : (float)(in + out) / 2.0f;
  if (fan < 1.0f) fan = 1.0f;
  float variance = init->scale / fan;
  if (init->distribution == MXU_UNIFORM) {
    /* glorot_uniform's sqrt(6 / (fan_in + fan_out)), in float32 */
    float limit = sqrtf(3.0f * variance);
    mxu_rng_uniform(rng, 0, values, (size_t)count);
    for (int64_t i = 0; i < count; i++)
      values[i] = limit * (2.0f * values[i] - 1.0f);
    return;
  }
  int truncated = init->distribution == MXU_TRUNCATED_NORMAL;
  /* The truncation's own stddev, .87962566103423978, put back. */
  double stddev =
      sqrt((double)variance) / (truncated ? 0.87962566103423978 : 1);
  fill_normal(rng, truncated, 0.0, stddev, count, values);
}

/* Householder QR of a (m x n, m >= n, row-major): q gets the first n
 * columns of Q with the signs of R's diagonal taken out, as Keras does
 * (q * sign(diag(r))). */
static void orthonormal(double *a, int64_t m, int64_t n, double *v, double *q) {
  double *diag = v + m; /* v: m values, then n for R's diagonal */
  for (int64_t i = 0; i < m * n; i++) q[i] = 0;
  for (int64_t i = 0; i < n; i++) q[i * n + i] = 1;
  double *vs = diag + n; /* the n reflectors, m values each */
  for (int64_t k = 0; k < n; k++) {
    double norm = 0;
    for (int64_t r = k; r < m; r++) norm += a[r * n + k] * a[r * n + k];
    norm = sqrt(norm);
    double alpha = a[k * n + k] > 0 ? -norm : norm;
    for (int64_t r = 0; r < m; r++) v[r] = r < k ? 0 : a[r * n + k];
    v[k] -= alpha;
    double vv = 0;
    for (int64_t r = k; r < m; r++) vv += v[r] * v[r];
    for (int64_t c = k; c < n && vv > 0; c++) {
      double dot = 0;
      for (int64_t r = k; r < m; r++) dot += v[r] * a[r * n + c];
      for (int64_t r = k; r < m; r++) a[r * n + c] -= 2 * dot / vv * v[r];
    }
    diag[k] = a[k * n + k];
    for (int64_t r = 0; r < m; r++)
      vs[k * m + r] = vv > 0 ? v[r] / sqrt(vv) : 0;
  }
  /* Q's first n columns: the reflectors applied to I's, last first. */
  for (int64_t k = n - 1; k >= 0; k--) {
    const double *u = vs + k * m;
    for (int64_t c = 0; c < n; c++) {
      double dot = 0;
      for (int64_t r = k; r < m; r++) dot += u[r] * q[r * n + c];
      for (int64_t r = k; r < m; r++) q[r * n + c] -= 2 * dot * u[r];
    }
  }
  for (int64_t c = 0; c < n; c++)
    if (diag[c] < 0)
      for (int64_t r = 0; r < m; r++) q[r * n + c] = -q[r * n + c];
}

/* Keras' Orthogonal over (rows = the leading axes, cols = the last). */
static mxu_status fill_orthogonal(const mxu_initializer *init,
                                  const mxu_shape *shape, const mxu_rng *rng,
                                  int64_t count, float *values) {
  int64_t cols = shape->rank ? shape->dims[shape->rank - 1] : 1;
  int64_t rows = count / (cols ? cols : 1);
  int64_t m = rows > cols ? rows : cols, n = rows > cols ? cols : rows;
  double *a = malloc((size_t)(m * n) * sizeof *a);
  double *q = malloc((size_t)(m * n) * sizeof *q);
  double *work = malloc((size_t)(m + n + n * m) * sizeof *work);
  if (!a || !q || !work) {
    free(a);
    free(q);
    free(work);
    return mxu_fail(MXU_ERR_NOMEM, "initializer: no memory for orthogonal");
  }
  for (int64_t i = 0; i < m * n; i++) a[i] = normal_at(rng, (uint64_t)i, 0);
  orthonormal(a, m, n, work, q);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      values[r * cols + c] =
          (float)(init->gain * (rows >= cols ? q[r * n + c] : q[c * n + r]));
  free(a);
  free(q);
  free(work);
  return MXU_OK;
}

mxu_status mxu_init_fill(const mxu_initializer *init, const mxu_shape *shape,
                         uint64_t seed, int layer, int index, float *values) {
  int64_t count = mxu_shape_count(shape);
  /* A seeded initializer draws the same wherever it is used. */
  mxu_rng rng = init->has_seed
                    ? mxu_rng_make((uint64_t)init->seed, MXU_STREAM_INIT,
                                   UINT32_MAX, 0, 0)
                    : mxu_rng_make(seed, MXU_STREAM_INIT, (uint32_t)layer,
                                   (uint32_t)index, 0);
  float constant = init->kind == MXU_INIT_ONES       ? 1.0f
                   : init->kind == MXU_INIT_CONSTANT ? init->value
                                                     : 0.0f;
  switch (init->kind) {
  case MXU_INIT_RANDOM_NORMAL:
  case MXU_INIT_TRUNCATED_NORMAL:
    fill_normal(&rng, init->kind == MXU_INIT_TRUNCATED_NORMAL, init->mean,
                init->stddev, count, values);
    return MXU_OK;
  case MXU_INIT_RANDOM_UNIFORM:
    mxu_rng_uniform(&rng, 0, values, (size_t)count);
    for (int64_t i = 0; i < count; i++)
      values[i] = init->minval + (init->maxval - init->minval) * values[i];
    return MXU_OK;
  case MXU_INIT_VARIANCE_SCALING:
    fill_scaling(init, shape, &rng, count, values);
    return MXU_OK;
  case MXU_INIT_ORTHOGONAL:
    return fill_orthogonal(init, shape, &rng, count, values);
  case MXU_INIT_IDENTITY:
    if (shape->rank != 2)
      return mxu_fail(MXU_ERR_SHAPE,
                      "initializer: identity needs a 2-D weight, not rank %d",
                      shape->rank);
    for (int64_t i = 0; i < count; i++)
      values[i] = i / shape->dims[1] == i % shape->dims[1] ? init->gain : 0.0f;
    return MXU_OK;
  default:
    for (int64_t i = 0; i < count; i++) values[i] = constant;
    return MXU_OK;
  }
}

/* ---- JSON -------------------------------------------------------------- */

static const char *const mode_names[] = {"fan_in", "fan_out", "fan_avg", NULL};
static const char *const distribution_names[] = {
    "truncated_normal", "untruncated_normal", "uniform", NULL};

static mxu_status read_choice(const mxu_json_where *where, const cJSON *config,
                              const char *key, const char *const *names,
                              int *out) {
  const char *text = NULL;
  MXU_TRY(mxu_json_string(where, config, key, MXU_JSON_OPTIONAL, &text));
  if (!text) return MXU_OK;
  /* tf.keras 1's "normal" is its truncated normal. */
  if (strcmp(text, "normal") == 0) text = "truncated_normal";
  for (int i = 0; names[i]; i++)
    if (strcmp(text, names[i]) == 0) {
      *out = i;
      return MXU_OK;
    }
  return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "%s '%s' is not supported",
                       key, text);
}

static mxu_status read_seed(const mxu_json_where *where, const cJSON *config,
                            mxu_initializer *init) {
  const cJSON *seed = mxu_json_get(config, "seed");
  if (!seed || cJSON_IsNull(seed)) return MXU_OK;
  if (!cJSON_IsNumber(seed) || seed->valuedouble != floor(seed->valuedouble) ||
      fabs(seed->valuedouble) > 9e15)
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "seed must be an integer or null");
  init->has_seed = 1;
  init->seed = (int64_t)seed->valuedouble;
  return MXU_OK;
}

static mxu_status read_config(const mxu_json_where *where, const cJSON *config,
                              int keys, mxu_initializer *init) {
  static const char *const known[] = {
      "value", "mean",         "stddev", "minval", "maxval", "scale",
      "mode",  "distribution", "gain",   "seed",   "dtype",  NULL};
  if (!config || cJSON_IsNull(config)) return MXU_OK;
  if (!cJSON_IsObject(config))
    return mxu_json_fail(where, MXU_ERR_FORMAT, "config must be an object");
  MXU_TRY(mxu_json_check_keys(where, config, known, NULL));
  MXU_TRY(mxu_json_float(where, config, "value", 0, &init->value));
  MXU_TRY(mxu_json_float(where, config, "mean", 0, &init->mean));
  MXU_TRY(mxu_json_float(where, config, "stddev", 0, &init->stddev));
  MXU_TRY(mxu_json_float(where, config, "minval", 0, &init->minval));
  MXU_TRY(mxu_json_float(where, config, "maxval", 0, &init->maxval));
  MXU_TRY(mxu_json_float(where, config, "scale", 0, &init->scale));
  MXU_TRY(mxu_json_float(where, config, "gain", 0, &init->gain));
  int mode = (int)init->mode, distribution = (int)init->distribution;
  MXU_TRY(read_choice(where, config, "mode", mode_names, &mode));
  MXU_TRY(read_choice(where, config, "distribution", distribution_names,
                      &distribution));
  init->mode = (mxu_fan_mode)mode;
  init->distribution = (mxu_init_distribution)distribution;
  if (keys & HAS_SEED) MXU_TRY(read_seed(where, config, init));
  if (!(init->stddev >= 0) || !(init->scale >= 0) ||
      !(init->minval <= init->maxval) || !isfinite(init->value) ||
      !isfinite(init->mean) || !isfinite(init->gain))
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "an initializer's stddev and scale must be >= 0, "
                         "minval <= maxval, and every value finite");
  return MXU_OK;
}

mxu_status mxu_json_initializer(const mxu_json_where *where,
                                const cJSON *object, const char *key,
                                mxu_initializer *out) {
  const cJSON *v = mxu_json_get(object, key);
  if (!v) return MXU_OK;
  const cJSON *name = cJSON_IsObject(v) ? mxu_json_get(v, "class_name") : v;
  if (!cJSON_IsString(name) || !name->valuestring) {
    char text[160];
    mxu_json_text(v, text, sizeof text);
    return mxu_json_fail(where, MXU_ERR_FORMAT,
                         "%s %s is not an initializer name or object", key,
                         text);
  }
  const init_class *c = class_named(name->valuestring);
  if (!c) {
    mxu_initializer_from_name(name->valuestring, out);
    char why[1024];
    snprintf(why, sizeof why, "%s", mxu_errmsg());
    return mxu_json_fail(where, MXU_ERR_UNSUPPORTED, "%s: %s", key, why);
  }
  mxu_initializer init = from_class(c);
  if (cJSON_IsObject(v))
    MXU_TRY(read_config(where, mxu_json_get(v, "config"), c->keys, &init));
  *out = init;
  return MXU_OK;
}

static const init_class *class_of(const mxu_initializer *init) {
  const init_class *c =
      init->class_name[0] ? class_named(init->class_name) : NULL;
  for (int i = 0; !c && i < CLASS_COUNT; i++)
    if (classes[i].kind == init->kind) c = &classes[i];
  return c ? c : &classes[0];
}

void mxu_json_put_initializer(mxu_json_out *out, cJSON *object, const char *key,
                              const mxu_initializer *init) {
  const init_class *c = class_of(init);
  cJSON *config = cJSON_CreateObject();
  if (c->keys & HAS_VALUE)
    mxu_json_put_float(out, config, "value", init->value);
  if (c->keys & HAS_NORMAL) {
    mxu_json_put_float(out, config, "mean", init->mean);
    mxu_json_put_float(out, config, "stddev", init->stddev);
  }
  if (c->keys & HAS_UNIFORM) {
    mxu_json_put_float(out, config, "minval", init->minval);
    mxu_json_put_float(out, config, "maxval", init->maxval);
  }
  if (c->keys & HAS_SCALING) {
    mxu_json_put_float(out, config, "scale", init->scale);
    mxu_json_put_string(out, config, "mode", mode_names[init->mode]);
    mxu_json_put_string(out, config, "distribution",
                        distribution_names[init->distribution]);
  }
  if (c->keys & HAS_GAIN) mxu_json_put_float(out, config, "gain", init->gain);
  if (c->keys & HAS_SEED) {
    if (init->has_seed)
      mxu_json_put_number(out, config, "seed", (double)init->seed);
    else
      mxu_json_put_null(out, config, "seed");
  }
  const char *class_name = c->kind == MXU_INIT_IDENTITY && out->keras3
                               ? "IdentityInitializer"
                               : c->class_name;
  mxu_json_put(out, object, key,
               mxu_json_object(out, "keras.initializers", class_name, config));
}
