/* test_precision.c — Keras' mixed_bfloat16 policy end to end through the
 * public API: a small conv net trained a few epochs in mixed_bfloat16
 * ends close to the same run in float32, its weights stay float32 (and
 * survive a save/load round trip bit for bit), replicas stay
 * deterministic, and cpu_ref, the oracle, ignores the policy. Besides
 * mxu.h it asks oneDNN only whether bf16 may run at all. */
#include "bf16_expected.h"
#include "check.h"
#include "mxu.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <string.h>

#define SAMPLES 256
#define BATCH 32
#define EPOCHS 3
#define CLASSES 4
#define SIDE 10

/* The test's own generator (xorshift64*), independent of the library's. */
static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float next_unit(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * 0x1.0p-24f;
}

/* Noise plus a bright square in the quadrant the label names, so a
 * conv net learns it within a few epochs. */
static mxu_dataset *make_data(void) {
  int64_t per = SIDE * SIDE * 3;
  float *x = malloc(SAMPLES * per * sizeof *x);
  int32_t labels[SAMPLES];
  for (int i = 0; i < SAMPLES; i++) {
    int label = (i * 7 + 3) % CLASSES, top = label / 2 * 5,
        left = label % 2 * 5;
    labels[i] = label;
    for (int64_t k = 0; k < per; k++) x[i * per + k] = next_unit() - 0.5f;
    for (int r = top + 1; r < top + 4; r++)
      for (int c = left + 1; c < left + 4; c++)
        x[i * per + (r * SIDE + c) * 3 + i % 3] += 1.5f;
  }
  int64_t dims[3] = {SIDE, SIDE, 3};
  mxu_dataset *data = NULL;
  CHECK_OK(mxu_dataset_from_arrays(x, labels, SAMPLES, mxu_shape_make(3, dims),
                                   CLASSES, &data));
  free(x);
  return data;
}

/* conv (relu, fused) - pool - conv (tanh) - dense (relu) - dense softmax:
 * every fused activation bf16 meets, and a final softmax the loss fuses.
 * The second conv (16 input channels) and the first dense (32 outputs)
 * run bf16; the others are shapes that stay float32 (test_backend_ops'
 * test_bf16_choice). */
static mxu_model *make_model(void) {
  mxu_model *m = mxu_sequential("precision");
  int64_t dims[3] = {SIDE, SIDE, 3};
  CHECK_OK(mxu_add_input(m, NULL, mxu_shape_make(3, dims)));
  mxu_conv2d_config c1 = mxu_conv2d_defaults(16, 3, 3);
  c1.padding = MXU_SAME;
  c1.activation = MXU_RELU;
  CHECK_OK(mxu_add_conv2d(m, &c1));
  mxu_pool2d_config pool = mxu_pool2d_defaults(2, 2);
  CHECK_OK(mxu_add_max_pooling2d(m, &pool));
  mxu_conv2d_config c2 = mxu_conv2d_defaults(6, 3, 3);
  c2.activation = MXU_TANH;
  CHECK_OK(mxu_add_conv2d(m, &c2));
  CHECK_OK(mxu_add_flatten(m, NULL));
  mxu_dense_config d1 = mxu_dense_defaults(32);
  d1.activation = MXU_RELU;
  CHECK_OK(mxu_add_dense(m, &d1));
  mxu_dense_config d2 = mxu_dense_defaults(CLASSES);
  d2.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(m, &d2));
  return m;
}

typedef struct run_config {
  mxu_precision precision;
  mxu_backend_kind backend;
  int replicas, threads;
} run_config;

static mxu_model *compiled(const run_config *r) {
  mxu_model *m = make_model();
  mxu_compile_config c = mxu_compile_defaults();
  c.batch_size = BATCH;
  c.seed = 7;
  c.optimizer = mxu_adam(0.005f);
  c.precision = r->precision;
  c.backend = r->backend;
  c.replicas = r->replicas;
  c.threads = r->threads;
  CHECK_OK(mxu_compile(m, &c));
  return m;
}

/* EPOCHS epochs in a fixed order; the last epoch's mean loss. */
static double train(mxu_model *m, const mxu_dataset *data) {
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = EPOCHS;
  f.batch_size = BATCH;
  f.verbose = 0;
  f.seed = 11;
  const mxu_history *history = NULL;
  CHECK_OK(mxu_fit(m, data, &f, &history));
  return history ? history->epochs[history->count - 1].loss : NAN;
}

/* Every weight of a and b, compared bit for bit (same == 1) or checked
 * to differ somewhere (same == 0); all must be float32. */
static void compare_weights(const mxu_model *a, const mxu_model *b, int same,
                            const char *what) {
  int differ = 0;
  for (int layer = 0; layer < mxu_model_layer_count(a); layer++)
    for (int i = 0; i < mxu_layer_weight_count(a, layer); i++) {
      mxu_tensor ta, tb;
      CHECK_OK(mxu_layer_weight(a, layer, i, &ta, NULL));
      CHECK_OK(mxu_layer_weight(b, layer, i, &tb, NULL));
      CHECK(ta.dtype == MXU_FLOAT32 && tb.dtype == MXU_FLOAT32);
      size_t bytes = (size_t)mxu_shape_count(&ta.shape) * sizeof(float);
      differ |= memcmp(ta.data, tb.data, bytes) != 0;
    }
  CHECK_MSG(differ == !same, "%s: weights %s", what,
            differ ? "differ" : "are identical");
}

static void test_defaults_and_arguments(void) {
  CHECK(mxu_compile_defaults().precision == MXU_PRECISION_FLOAT32);
  mxu_model *m = make_model();
  mxu_compile_config c = mxu_compile_defaults();
  c.precision = (mxu_precision)7;
  EXPECT_FAIL(mxu_compile(m, &c), MXU_ERR_ARG, "precision");
  mxu_model_free(m);
}

/* mixed_bfloat16 learns as float32 does: the same seed ends within a few
 * percent of float32's loss (bf16 rounding moves each step slightly), and
 * the weights it leaves are float32 that save and load bit for bit. */
static void test_mixed_training(const mxu_dataset *data) {
  run_config f32 = {MXU_PRECISION_FLOAT32, MXU_BACKEND_CPU, 1, 0};
  run_config mixed = {MXU_MIXED_BFLOAT16, MXU_BACKEND_CPU, 1, 0};
  mxu_model *a = compiled(&f32), *b = compiled(&mixed);
  double first = 0;
  CHECK_OK(mxu_evaluate(a, data, 0, &first, NULL));
  double loss_f32 = train(a, data), loss_bf16 = train(b, data);
  printf("test_precision: loss %.4f at start, after %d epochs float32 %.4f, "
         "mixed_bfloat16 %.4f\n",
         first, EPOCHS, loss_f32, loss_bf16);
  CHECK_MSG(loss_f32 < 0.7 * first, "float32 did not learn: %g -> %g", first,
            loss_f32);
  CHECK_MSG(fabs(loss_bf16 - loss_f32) <= 0.05 * loss_f32,
            "mixed_bfloat16 loss %g vs float32 %g", loss_bf16, loss_f32);
  /* Where the CPU has bf16 it ran, so the two runs cannot agree exactly. */
  if (bf16_expected()) compare_weights(a, b, 0, "float32 vs mixed_bfloat16");

  const char *path = temp_path("mixed.weights.h5");
  CHECK_OK(mxu_save_weights(b, path));
  CHECK_OK(mxu_load_weights(a, path));
  compare_weights(a, b, 1, "saved and loaded");

  /* Inference in bf16 agrees with float32 on the same weights. */
  float probs_f32[8 * CLASSES], probs_bf16[8 * CLASSES];
  CHECK_OK(mxu_predict(a, mxu_dataset_x(data), 8, probs_f32));
  CHECK_OK(mxu_predict(b, mxu_dataset_x(data), 8, probs_bf16));
  for (int i = 0; i < 8 * CLASSES; i++)
    CHECK_NEAR(probs_bf16[i], probs_f32[i], 0.02);
  mxu_model_free(a);
  mxu_model_free(b);
}

/* Replicas in bf16 stay bit-identical over thread counts, as in float32. */
static void test_replicas(const mxu_dataset *data) {
  run_config one = {MXU_MIXED_BFLOAT16, MXU_BACKEND_CPU, 2, 1};
  run_config two = {MXU_MIXED_BFLOAT16, MXU_BACKEND_CPU, 2, 2};
  mxu_model *a = compiled(&one), *b = compiled(&two);
  train(a, data);
  train(b, data);
  compare_weights(a, b, 1, "2 replicas on 1 and 2 threads");
  mxu_model_free(a);
  mxu_model_free(b);
}

/* The oracle stays float32 whatever the policy. */
static void test_reference_ignores(const mxu_dataset *data) {
  run_config f32 = {MXU_PRECISION_FLOAT32, MXU_BACKEND_CPU_REF, 1, 1};
  run_config mixed = {MXU_MIXED_BFLOAT16, MXU_BACKEND_CPU_REF, 1, 1};
  mxu_model *a = compiled(&f32), *b = compiled(&mixed);
  mxu_fit_config f = mxu_fit_defaults();
  f.epochs = 1;
  f.batch_size = BATCH;
  f.steps_per_epoch = 2;
  f.verbose = 0;
  CHECK_OK(mxu_fit(a, data, &f, NULL));
  CHECK_OK(mxu_fit(b, data, &f, NULL));
  compare_weights(a, b, 1, "cpu_ref float32 vs mixed_bfloat16");
  mxu_model_free(a);
  mxu_model_free(b);
}

int main(void) {
  if (!check_temp_make("precision")) return 1;
  mxu_dataset *data = make_data();
  test_defaults_and_arguments();
  test_mixed_training(data);
  test_replicas(data);
  test_reference_ignores(data);
  mxu_dataset_free(data);
  int failed = check_report("test_precision");
  if (!failed) check_remove_tree(check_temp_dir);
  return failed;
}
