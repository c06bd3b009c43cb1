/* test_initializers.c — Keras' initializers: statistics of large draws
 * (mean, variance, bounds) against each one's definition, orthogonality,
 * identity, seeds, and the JSON form read from Keras' files and written
 * back in both dialects. */
#include "check.h"
#include "model/model.h"

#include <stdlib.h>

typedef struct stats {
  double mean, variance, min, max;
} stats;

static stats stats_of(const float *v, int64_t n) {
  stats s = {0, 0, INFINITY, -INFINITY};
  for (int64_t i = 0; i < n; i++) {
    s.mean += v[i];
    s.min = fmin(s.min, v[i]);
    s.max = fmax(s.max, v[i]);
  }
  s.mean /= (double)n;
  for (int64_t i = 0; i < n; i++)
    s.variance += (v[i] - s.mean) * (v[i] - s.mean);
  s.variance /= (double)(n - 1);
  return s;
}

/* A conv kernel (3, 3, 40, 64): fan_in 360, fan_out 576, 23,040 values. */
static const int64_t kernel_dims[4] = {3, 3, 40, 64};

typedef struct expect {
  const char *name;
  double variance; /* Keras' target variance */
  double bound;    /* |value| <= bound (0: none) */
} expect;

static void named_statistics(void) {
  const double in = 360, out = 576, avg = (in + out) / 2;
  const expect cases[] = {
      {"glorot_uniform", 1 / avg, sqrt(3 / avg)},
      {"glorot_normal", 1 / avg, 2 * sqrt(1 / avg) / 0.87962566103423978},
      {"he_uniform", 2 / in, sqrt(6 / in)},
      {"he_normal", 2 / in, 2 * sqrt(2 / in) / 0.87962566103423978},
      {"lecun_uniform", 1 / in, sqrt(3 / in)},
      {"lecun_normal", 1 / in, 2 * sqrt(1 / in) / 0.87962566103423978},
      {"random_normal", 0.05 * 0.05, 0},
      {"random_uniform", 0.1 * 0.1 / 12, 0.05},
      {"truncated_normal", 0.05 * 0.05 * 0.7737413, 0.1},
  };
  mxu_shape shape = mxu_shape_make(4, kernel_dims);
  int64_t n = mxu_shape_count(&shape);
  float *v = malloc((size_t)n * sizeof *v);
  for (size_t i = 0; v && i < sizeof cases / sizeof *cases; i++) {
    mxu_initializer init;
    CHECK_OK(mxu_initializer_from_name(cases[i].name, &init));
    CHECK_OK(mxu_init_fill(&init, &shape, 11, 2, 0, v));
    stats s = stats_of(v, n);
    double sd = sqrt(cases[i].variance / (double)n);
    CHECK_MSG(fabs(s.mean) < 5 * sd &&
                  fabs(s.variance / cases[i].variance - 1) < 0.04 &&
                  (!cases[i].bound || (s.max <= cases[i].bound * (1 + 1e-6) &&
                                       s.min >= -cases[i].bound * (1 + 1e-6))),
              "%s: mean %g, variance %g (want %g), range [%g, %g] (bound %g)",
              cases[i].name, s.mean, s.variance, cases[i].variance, s.min,
              s.max, cases[i].bound);
  }
  /* Variance scaling by hand: scale 3, fan_out, untruncated normal. */
  mxu_initializer vs;
  CHECK_OK(mxu_initializer_from_name("VarianceScaling", &vs));
  vs.scale = 3;
  vs.mode = MXU_FAN_OUT;
  vs.distribution = MXU_UNTRUNCATED_NORMAL;
  if (v) {
    CHECK_OK(mxu_init_fill(&vs, &shape, 11, 2, 0, v));
    stats s = stats_of(v, n);
    CHECK_MSG(fabs(s.variance / (3 / out) - 1) < 0.04 &&
                  s.max > 3 * sqrt(3 / out),
              "variance %g, max %g", s.variance, s.max);
  }
  free(v);
}

static void constants_orthogonal_identity(void) {
  int64_t dims[2] = {30, 50};
  mxu_shape shape = mxu_shape_make(2, dims);
  float v[30 * 50];
  mxu_initializer c;
  CHECK_OK(mxu_initializer_from_name("constant", &c));
  c.value = 0.25f;
  CHECK_OK(mxu_init_fill(&c, &shape, 1, 0, 0, v));
  CHECK(v[0] == 0.25f && v[30 * 50 - 1] == 0.25f);
  mxu_initializer id;
  CHECK_OK(mxu_initializer_from_name("identity", &id));
  id.gain = 2;
  CHECK_OK(mxu_init_fill(&id, &shape, 1, 0, 0, v));
  CHECK(v[0] == 2 && v[51] == 2 && v[1] == 0 && v[29 * 50 + 29] == 2 &&
        v[29 * 50 + 30] == 0);
  int64_t three[3] = {2, 3, 4};
  mxu_shape rank3 = mxu_shape_make(3, three);
  EXPECT_FAIL(mxu_init_fill(&id, &rank3, 1, 0, 0, v), MXU_ERR_SHAPE,
              "identity needs a 2-D weight");
  /* Orthogonal: 30 x 50 has orthonormal rows, 50 x 30 (and a conv
   * kernel's (3, 3, 4, 8) as 36 x 8) orthonormal columns. */
  int64_t shapes[3][4] = {{30, 50}, {50, 30}, {3, 3, 4, 8}};
  int ranks[3] = {2, 2, 4};
  mxu_initializer o;
  CHECK_OK(mxu_initializer_from_name("Orthogonal", &o));
  o.gain = 1.5f;
  for (int k = 0; k < 3; k++) {
    mxu_shape s = mxu_shape_make(ranks[k], shapes[k]);
    int64_t cols = shapes[k][ranks[k] - 1], rows = mxu_shape_count(&s) / cols;
    CHECK_OK(mxu_init_fill(&o, &s, 5, 1, 0, v));
    /* The smaller side's Gram matrix is gain^2 I. */
    int by_rows = rows < cols;
    int64_t n = by_rows ? rows : cols, len = by_rows ? cols : rows;
    double worst = 0;
    for (int64_t a = 0; a < n; a++)
      for (int64_t b = 0; b < n; b++) {
        double dot = 0;
        for (int64_t i = 0; i < len; i++)
          dot += by_rows ? (double)v[a * cols + i] * v[b * cols + i]
                         : (double)v[i * cols + a] * v[i * cols + b];
        worst = fmax(worst, fabs(dot - (a == b ? 2.25 : 0)));
      }
    CHECK_MSG(worst < 1e-5, "orthogonal %d: Gram matrix off by %g", k, worst);
  }
}

/* Unseeded draws follow the compile seed and the layer; a seeded one is
 * the same in any layer, as Keras' seeded initializers are. */
static void seeds(void) {
  int64_t dims[2] = {20, 10};
  mxu_shape shape = mxu_shape_make(2, dims);
  float a[200], b[200], c[200];
  mxu_initializer he;
  CHECK_OK(mxu_initializer_from_name("he_normal", &he));
  CHECK_OK(mxu_init_fill(&he, &shape, 1, 3, 0, a));
  CHECK_OK(mxu_init_fill(&he, &shape, 1, 4, 0, b));
  CHECK_OK(mxu_init_fill(&he, &shape, 1, 3, 0, c));
  CHECK(memcmp(a, b, sizeof a) != 0 && memcmp(a, c, sizeof a) == 0);
  he.has_seed = 1;
  he.seed = 42;
  CHECK_OK(mxu_init_fill(&he, &shape, 1, 3, 0, a));
  CHECK_OK(mxu_init_fill(&he, &shape, 9, 7, 1, b));
  CHECK(memcmp(a, b, sizeof a) == 0);
  he.seed = 43;
  CHECK_OK(mxu_init_fill(&he, &shape, 1, 3, 0, c));
  CHECK(memcmp(a, c, sizeof a) != 0);
}

/* A Keras model file with initializers of every kind: read, compiled
 * (the weights follow them), written in both dialects and read back
 * the same. */
static const char *model_json =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
    "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
    "{\"batch_input_shape\": [null, 8, 8, 3], \"name\": \"in\"}}, "
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", "
    "\"filters\": 4, \"kernel_size\": 3, \"kernel_initializer\": "
    "{\"class_name\": \"HeNormal\", \"config\": {\"seed\": 7}}, "
    "\"bias_initializer\": {\"class_name\": \"Constant\", \"config\": "
    "{\"value\": 0.5}}}}, "
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", "
    "\"gamma_initializer\": {\"class_name\": \"RandomUniform\", \"config\": "
    "{\"minval\": 0.9, \"maxval\": 1.1, \"seed\": null}}, "
    "\"moving_variance_initializer\": \"ones\"}}, "
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}, "
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 5, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"VarianceScaling\", \"config\": {\"scale\": 2.0, "
    "\"mode\": \"fan_avg\", \"distribution\": \"uniform\", \"seed\": null}, "
    "\"registered_name\": null}, \"bias_initializer\": {\"class_name\": "
    "\"TruncatedNormal\", \"config\": {\"mean\": 1.0, \"stddev\": 0.01, "
    "\"seed\": 3}}}}]}}";

static mxu_model *read_model(const char *text) {
  mxu_model *m = NULL;
  CHECK_OK(mxu_model_from_json(text, "init.json", &m, NULL, NULL));
  if (!m) return NULL;
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = 2;
  c.threads = 1;
  CHECK_OK(mxu_compile(m, &c));
  return m;
}

static void json_forms(void) {
  mxu_model *m = read_model(model_json);
  if (!m) return;
  const mxu_dense_config *d = &m->layers[m->layer_count - 1].config.dense;
  CHECK(d->kernel.initializer.kind == MXU_INIT_VARIANCE_SCALING &&
        d->kernel.initializer.scale == 2.0f &&
        d->kernel.initializer.mode == MXU_FAN_AVG &&
        d->kernel.initializer.distribution == MXU_UNIFORM);
  /* The conv bias is the constant; the dense bias within 2 stddev of 1. */
  const mxu_param *conv_bias = &m->params[1];
  CHECK(strcmp(conv_bias->name, "bias") == 0 &&
        m->weights[conv_bias->offset] == 0.5f);
  const mxu_param *dense_bias = &m->params[m->param_count - 1];
  for (int64_t i = 0; i < dense_bias->count; i++)
    CHECK(fabsf(m->weights[dense_bias->offset + i] - 1.0f) <= 0.02f);
  for (int keras3 = 0; keras3 < 2; keras3++) {
    char *text = NULL;
    CHECK_OK(mxu_model_to_json(m, keras3, &text));
    CHECK(text && strstr(text, "\"HeNormal\"") && strstr(text, "\"seed\": 7") &&
          strstr(text, "\"fan_avg\""));
    mxu_model *again = text ? read_model(text) : NULL;
    /* Same seed and settings: the same initial weights. */
    CHECK(again && check_weights_differing(m, again) == 0);
    mxu_model_free(again);
    free(text);
  }
  mxu_model_free(m);
}

int main(void) {
  named_statistics();
  constants_orthogonal_identity();
  seeds();
  json_forms();
  return check_report("test_initializers");
}
