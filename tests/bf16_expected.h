/* bf16_expected.h — whether the cpu backend should run bfloat16: the CPU
 * has AVX512_BF16 and oneDNN may use it (DNNL_MAX_CPU_ISA can hold it
 * back, and then mxu falls back to float32). For the tests that check
 * which precision ran. */
#ifndef MXU_TESTS_BF16_EXPECTED_H
#define MXU_TESTS_BF16_EXPECTED_H

#include <oneapi/dnnl/dnnl.h>

static inline int bf16_expected(void) {
#if defined(__x86_64__) || defined(__i386__)
  dnnl_cpu_isa_t want = dnnl_cpu_isa_avx512_core_bf16;
  return __builtin_cpu_supports("avx512bf16") &&
         (dnnl_get_effective_cpu_isa() & want) == want;
#else
  return 0;
#endif
}

#endif
