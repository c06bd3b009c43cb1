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

size_t mxu_dtype_size(mxu_dtype dtype) {
  return dtype == MXU_BFLOAT16 ? 2 : 4;
}

double mxu_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Keras' generic_utils.to_snake_case: an underscore before each capital
 * that follows a lower-case letter or digit, or that starts a new word
 * after a run of capitals; then lower case. Conv2D -> conv2d. */
void mxu_snake_case(const char *name, char *out, size_t out_size) {
  size_t j = 0, len = strlen(name);
  for (size_t i = 0; i < len && j + 2 < out_size; i++) {
    unsigned char c = (unsigned char)name[i];
    if (i > 0 && isupper(c)) {
      unsigned char prev = (unsigned char)name[i - 1];
      int next_lower = i + 1 < len && islower((unsigned char)name[i + 1]);
      if (islower(prev) || (isupper(prev) && next_lower)) out[j++] = '_';
    }
    out[j++] = (char)tolower(c);
  }
  out[j] = 0;
}
