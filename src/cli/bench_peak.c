/* bench_peak.c — this machine's float32 peak for mxu bench: independent
 * FMA chains on every thread, as wide as the CPU runs them (AVX-512, else
 * AVX2), so the fraction of peak bench prints is against what these cores
 * really do, not a datasheet. */
#include "cli.h"

#include <omp.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

/* The sums are kept here so the compiler cannot drop the loops. */
static volatile double peak_sink;

/* A chain is acc = acc * a + b: it settles at b / (1 - a) = 1, never
 * overflowing or turning denormal, so the timing is the FMA units'. */
#define FMA_A 0.999999f
#define FMA_B 1e-6f

#define REPEAT12(X)                                                            \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define REPEAT16(X) REPEAT12(X) X(12) X(13) X(14) X(15)

#ifdef HAVE_X86
/* 16 chains: more than FMA latency (4 cycles) times ports (2) keeps every
 * port busy every cycle, and with a and b they fit the 32 zmm registers. */
#define DECLARE_512(k) __m512 acc##k = _mm512_set1_ps((float)(k));
#define STEP_512(k) acc##k = _mm512_fmadd_ps(acc##k, a, b);
#define SUM_512(k) sum = _mm512_add_ps(sum, acc##k);

__attribute__((target("avx512f"))) static double fma_avx512(int64_t n) {
  const __m512 a = _mm512_set1_ps(FMA_A), b = _mm512_set1_ps(FMA_B);
  REPEAT16(DECLARE_512)
  for (int64_t i = 0; i < n; i++) {
    REPEAT16(STEP_512)
  }
  __m512 sum = _mm512_setzero_ps();
  REPEAT16(SUM_512)
  float out[16];
  _mm512_storeu_ps(out, sum);
  return out[0];
}

/* 12 chains: AVX2 has 16 ymm registers, and a and b need two of them. */
#define DECLARE_256(k) __m256 acc##k = _mm256_set1_ps((float)(k));
#define STEP_256(k) acc##k = _mm256_fmadd_ps(acc##k, a, b);
#define SUM_256(k) sum = _mm256_add_ps(sum, acc##k);

__attribute__((target("avx2,fma"))) static double fma_avx2(int64_t n) {
  const __m256 a = _mm256_set1_ps(FMA_A), b = _mm256_set1_ps(FMA_B);
  REPEAT12(DECLARE_256)
  for (int64_t i = 0; i < n; i++) {
    REPEAT12(STEP_256)
  }
  __m256 sum = _mm256_setzero_ps();
  REPEAT12(SUM_256)
  float out[8];
  _mm256_storeu_ps(out, sum);
  return out[0];
}
#endif

/* Anything else: 12 scalar chains, which the compiler may vectorise. */
#define DECLARE_SCALAR(k) float acc##k = (float)(k);
#define STEP_SCALAR(k) acc##k = acc##k * FMA_A + FMA_B;
#define SUM_SCALAR(k) sum += acc##k;

static double fma_scalar(int64_t n) {
  REPEAT12(DECLARE_SCALAR)
  for (int64_t i = 0; i < n; i++) {
    REPEAT12(STEP_SCALAR)
  }
  float sum = 0.0f;
  REPEAT12(SUM_SCALAR)
  return sum;
}

typedef struct fma_kernel {
  double (*run)(int64_t iterations);
  double flops_per_iteration; /* chains x lanes x 2 */
  const char *name;
} fma_kernel;

static fma_kernel pick_kernel(void) {
#ifdef HAVE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return (fma_kernel){fma_avx512, 16 * 16 * 2, "AVX-512 FMA"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return (fma_kernel){fma_avx2, 12 * 8 * 2, "AVX2 FMA"};
#endif
  return (fma_kernel){fma_scalar, 12 * 2, "scalar"};
}

/* CPU seconds this thread has run. */
static double thread_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s of `threads` threads each running `iterations`. Each thread's
 * rate is over the CPU time it got, not the wall clock: on a shared
 * machine another process taking a core for a while would otherwise pass
 * for a slower core. Threads beyond the online cores add nothing: they
 * only take turns. *seconds is the longest thread's CPU time. */
static double timed_gflops(const fma_kernel *k, int64_t iterations, int threads,
                           double *seconds) {
  double rate = 0, sink = 0, longest = 0;
  int ran = 0;
#pragma omp parallel num_threads(threads)                                      \
    reduction(+ : rate, sink, ran) reduction(max : longest)
  {
    double start = thread_seconds();
    sink += k->run(iterations);
    double spent = thread_seconds() - start;
    if (spent > 0)
      rate += k->flops_per_iteration * (double)iterations / spent / 1e9;
    if (spent > longest) longest = spent;
    ran++;
  }
  peak_sink = sink;
  *seconds = longest;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && ran > cores) rate *= (double)cores / ran;
  return rate;
}

/* CPU seconds per timed run; three of them, after a calibration run,
 * keep the whole measurement under half a second. */
#define PEAK_RUN_SECONDS 0.1
#define PEAK_TRIES 3
#define CALIBRATION_ITERATIONS (1 << 16)

double cli_bench_peak_gflops(int threads, const char **kind) {
  fma_kernel k = pick_kernel();
  if (kind) *kind = k.name;
  double seconds;
  timed_gflops(&k, CALIBRATION_ITERATIONS, threads, &seconds);
  double scale = seconds > 0 ? PEAK_RUN_SECONDS / seconds : 1.0;
  int64_t iterations = (int64_t)(CALIBRATION_ITERATIONS * scale);
  if (iterations < CALIBRATION_ITERATIONS) iterations = CALIBRATION_ITERATIONS;
  double best = 0;
  for (int t = 0; t < PEAK_TRIES; t++) {
    double g = timed_gflops(&k, iterations, threads, &seconds);
    if (g > best) best = g;
  }
  return best;
}
