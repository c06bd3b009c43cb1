/* util.c — shapes, clocks and Keras' naming rule. */
#include "core/core.h"

#include <ctype.h>
#include <string.h>
#include <time.h>

mxu_shape mxu_shape_make(int rank, const int64_t *dims) {
  mxu_shape shape = {0};
  shape.rank = rank < 0 ? 0 : rank > MXU_MAX_RANK ? MXU_MAX_RANK : rank;
  for (int i = 0; i < shape.rank; i++) shape.dims[i] = dims[i];
  return shape;
}

int64_t mxu_shape_count(const mxu_shape *shape) {
  int64_t count = 1;
  for (int i = 0; i < shape->rank; i++) count *= shape->dims[i];
  return count;
}

size_t mxu_dtype_size(mxu_dtype dtype) { return dtype == MXU_BFLOAT16 ? 2 : 4; }

double mxu_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keras 3's to_snake_case, its two regular expressions as scans:
 * (.)([A-Z][a-z]+) -> \1_\2, then ([a-z])([A-Z]) -> \1_\2, then lower
 * case. Conv2D -> conv2d, MaxPooling2D -> max_pooling2d, ConvLSTM2D ->
 * conv_lstm2d (the name of its group in a .keras archive; tf.keras 2's
 * [a-z0-9]+ made it conv_lst_m2d). */
static int word_start(const char *s, size_t i) {
  return isupper((unsigned char)s[i]) && islower((unsigned char)s[i + 1]);
}

void mxu_snake_case(const char *name, char *out, size_t out_size) {
  char first[256];
  size_t len = strlen(name), j = 0;
  for (size_t i = 0; i < len && j + 2 < sizeof first;) {
    if (i + 1 < len && word_start(name, i + 1)) {
      /* The match consumes the character before and the whole word. */
      first[j++] = name[i++];
      first[j++] = '_';
      first[j++] = name[i++];
      while (i < len && j + 1 < sizeof first && islower((unsigned char)name[i]))
        first[j++] = name[i++];
    } else {
      first[j++] = name[i++];
    }
  }
  first[j] = 0;
  size_t k = 0;
  for (size_t i = 0; i < j && k + 2 < out_size; i++) {
    if (i > 0 && isupper((unsigned char)first[i]) &&
        islower((unsigned char)first[i - 1]))
      out[k++] = '_';
    out[k++] = (char)tolower((unsigned char)first[i]);
  }
  if (out_size) out[k < out_size ? k : out_size - 1] = 0;
}

int mxu_ends_with(const char *text, const char *suffix) {
  size_t n = strlen(text), m = strlen(suffix);
  return n >= m && strcmp(text + n - m, suffix) == 0;
}
