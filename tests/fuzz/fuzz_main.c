/* fuzz_main.c — the libFuzzer entry of one harness, chosen when built:
 * -DFUZZ_TARGET=<name> (CMake's fuzz_<name> targets, `make fuzz`). */
#include "harnesses.h"

#include <stdlib.h>
#include <string.h>

#define FUZZ_STRING_(x) #x
#define FUZZ_STRING(x) FUZZ_STRING_(x)

static int (*harness)(const uint8_t *, size_t);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  for (const fuzz_target *t = fuzz_targets; t->name && !harness; t++)
    if (strcmp(t->name, FUZZ_STRING(FUZZ_TARGET)) == 0) harness = t->run;
  if (!harness) abort();
  atexit(fuzz_cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return harness(data, size);
}
