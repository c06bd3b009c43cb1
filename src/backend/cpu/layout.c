/* layout.c — NHWC <-> nChw16c (oneDNN's aBcd16b: channels in blocks of
 * 16, each block an image's whole plane) for the f32 activations Winograd
 * reads and writes. oneDNN's jit:uni reorder ran at 11 GB/s on cifar's
 * 16 MB tensors, which come from and go to memory, not cache; these loops
 * move whole 64-byte lines and store them past the cache, which saves
 * the read a store to a line not in cache makes: 3.0 -> 1.7 ms per 16 MB
 * (microbenchmark with caches flushed). */
#include "backend/cpu/cpu.h"

#include <stdint.h>
#include <string.h>

#ifdef __AVX512F__
#include <immintrin.h>

/* Past the cache where `to` is 64-byte aligned (always, but for callers
 * such as the tests that hand in plain malloc buffers). */
static inline void line_copy(float *to, const float *from, int stream) {
  __m512 line = _mm512_loadu_ps(from);
  if (stream)
    _mm512_stream_ps(to, line);
  else
    _mm512_storeu_ps(to, line);
}
#else
static inline void line_copy(float *to, const float *from, int stream) {
  (void)stream;
  memcpy(to, from, 16 * sizeof *to);
}
#endif

/* One image: pixel p's channels 16b..16b+15 <-> block b's line p. to16
 * says which way. */
static void image_convert(const float *from, float *to, int64_t hw, int64_t c,
                          int to16, int stream) {
  int64_t blocks = c / 16;
  for (int64_t p = 0; p < hw; p++)
    for (int64_t b = 0; b < blocks; b++) {
      int64_t nhwc = p * c + b * 16, blocked = (b * hw + p) * 16;
      if (to16)
        line_copy(to + blocked, from + nhwc, stream);
      else
        line_copy(to + nhwc, from + blocked, stream);
    }
}

cpu_strides cpu_layout_strides(int blocked, int64_t hw, int64_t c) {
  return blocked ? (cpu_strides){16, hw * 16} : (cpu_strides){c, 16};
}

void cpu_layout_convert(const float *from, float *to, int64_t n, int64_t hw,
                        int64_t c, int to16) {
  int64_t image = hw * c;
  int stream = ((uintptr_t)to & 63) == 0;
#pragma omp parallel for schedule(static) num_threads(cpu_threads_for(n))
  for (int64_t i = 0; i < n; i++) {
    image_convert(from + i * image, to + i * image, hw, c, to16, stream);
    cpu_stream_fence();
  }
}
