/* apps_predict.c — the mxu half of check_apps.py: loads a model JSON and a
 * weights file, predicts N samples read as raw float32 and writes the raw
 * float32 outputs. Built by check_apps.py against build/libmxu.so; not
 * part of the suite (Keras is never a test dependency).
 *
 * usage: apps_predict MODEL.json WEIGHTS N X.f32 OUT.f32 */
#include "mxu.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 6) return 2;
  mxu_model *m = NULL;
  mxu_compile_config cc = mxu_compile_defaults();
  int n = atoi(argv[3]);
  cc.batch_size = n;
  if (mxu_model_load_json(argv[1], &m, NULL, NULL) || mxu_compile(m, &cc) ||
      mxu_load_weights(m, argv[2])) {
    fprintf(stderr, "apps_predict: %s\n", mxu_errmsg());
    return 1;
  }
  mxu_shape in = mxu_model_input_shape(m);
  int64_t count = mxu_shape_count(&in), classes = 0;
  mxu_shape out = mxu_model_layer_shape(m, mxu_model_layer_count(m) - 1);
  classes = mxu_shape_count(&out);
  float *x = malloc((size_t)(n * count) * sizeof(float));
  float *y = malloc((size_t)(n * classes) * sizeof(float));
  FILE *f = fopen(argv[4], "rb");
  if (!x || !y || !f ||
      fread(x, sizeof(float), (size_t)(n * count), f) != (size_t)(n * count))
    return 1;
  fclose(f);
  if (mxu_predict(m, x, n, y)) {
    fprintf(stderr, "apps_predict: %s\n", mxu_errmsg());
    return 1;
  }
  f = fopen(argv[5], "wb");
  if (!f || fwrite(y, sizeof(float), (size_t)(n * classes), f) !=
                (size_t)(n * classes))
    return 1;
  fclose(f);
  free(x);
  free(y);
  mxu_model_free(m);
  return 0;
}
