/* harnesses.h — the fuzz harnesses (harnesses.c), by name. */
#ifndef MXU_FUZZ_HARNESSES_H
#define MXU_FUZZ_HARNESSES_H

#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_target {
  const char *name;
  int (*run)(const uint8_t *data, size_t size);
  /* The corpus' first inputs: glob patterns, space-separated, relative to
   * the repository's root. */
  const char *seeds;
} fuzz_target;

/* Every harness, ending with a NULL name. */
extern const fuzz_target fuzz_targets[];

/* Removes the scratch folder the harnesses write their input to. */
void fuzz_cleanup(void);

#endif
