/* test_fuzz.c — every fuzz harness (tests/fuzz/harnesses.c) over its seed
 * files and a fixed set of mutations of each: flipped bits, bytes set to
 * boundary values, cuts, and runs of bytes copied, inserted or deleted,
 * drawn from a fixed seed so a failure repeats. The long, coverage-guided
 * search is `make fuzz`; this is its short pass inside `make test`.
 *
 * `test_fuzz NAME` runs harness NAME alone; `test_fuzz --seeds NAME`
 * prints its seed files, one per line, for scripts/fuzz.sh. */
#include "check.h"
#include "fuzz/harnesses.h"

#include <glob.h>

/* Mutated inputs per seed file; the seed itself runs too. */
#define MUTATIONS 60

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

/* One to four edits of the seed's bytes into out (capacity: size + 64). */
static size_t mutate(const uint8_t *seed, size_t size, uint8_t *out) {
  memcpy(out, seed, size);
  size_t n = size;
  static const uint8_t boundary[] = {0, 1, 0x7f, 0x80, 0xff};
  for (int edits = 1 + (int)below(4); edits > 0; edits--) {
    size_t at = below(n);
    switch (below(6)) {
    case 0: /* a flipped bit */
      if (n) out[at] ^= (uint8_t)(1u << below(8));
      break;
    case 1: /* a byte set to a boundary value */
      if (n) out[at] = boundary[below(sizeof boundary)];
      break;
    case 2: /* cut short */ n = at; break;
    case 3: { /* up to 16 bytes deleted */
      size_t k = 1 + below(16);
      if (at + k > n) k = n - at;
      memmove(out + at, out + at + k, n - at - k);
      n -= k;
      break;
    }
    case 4: { /* up to 16 random bytes inserted, within the capacity */
      size_t k = 1 + below(16);
      if (n + k > size + 64) break;
      memmove(out + at + k, out + at, n - at);
      for (size_t i = 0; i < k; i++) out[at + i] = (uint8_t)next();
      n += k;
      break;
    }
    default: { /* a run of up to 8 bytes copied over another place */
      size_t from = below(n), k = 1 + below(8);
      if (from + k <= n && at + k <= n) memmove(out + at, out + from, k);
    }
    }
  }
  return n;
}

static uint8_t *read_seed(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  uint8_t *bytes = n >= 0 ? malloc((size_t)n + 1) : NULL;
  *size = bytes ? fread(bytes, 1, (size_t)n, f) : 0;
  fclose(f);
  return bytes;
}

/* The seed files of a harness, globbed from its patterns. */
static void find_seeds(const fuzz_target *t, glob_t *found) {
  memset(found, 0, sizeof *found);
  char patterns[512];
  snprintf(patterns, sizeof patterns, "%s", t->seeds);
  int flags = 0;
  for (char *p = strtok(patterns, " "); p; p = strtok(NULL, " ")) {
    glob(p, flags, NULL, found);
    flags = GLOB_APPEND;
  }
}

static void run_target(const fuzz_target *t) {
  glob_t seeds;
  find_seeds(t, &seeds);
  CHECK_MSG(seeds.gl_pathc > 0, "%s: no seed files", t->name);
  long runs = 0;
  for (size_t s = 0; s < seeds.gl_pathc; s++) {
    size_t size = 0;
    uint8_t *seed = read_seed(seeds.gl_pathv[s], &size);
    uint8_t *input = seed ? malloc(size + 64) : NULL;
    CHECK_MSG(input != NULL, "cannot read %s", seeds.gl_pathv[s]);
    if (!input) {
      free(seed);
      continue;
    }
    t->run(seed, size);
    for (int m = 0; m < MUTATIONS; m++)
      t->run(input, mutate(seed, size, input));
    runs += 1 + MUTATIONS;
    free(input);
    free(seed);
  }
  printf("%-10s %zu seeds, %ld runs\n", t->name, seeds.gl_pathc, runs);
  fflush(stdout);
  globfree(&seeds);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--seeds") == 0) {
    for (const fuzz_target *t = fuzz_targets; t->name; t++) {
      if (strcmp(t->name, argv[2]) != 0) continue;
      glob_t seeds;
      find_seeds(t, &seeds);
      size_t count = seeds.gl_pathc;
      for (size_t s = 0; s < count; s++) printf("%s\n", seeds.gl_pathv[s]);
      globfree(&seeds);
      return count ? 0 : 1;
    }
    return 2;
  }
  for (const fuzz_target *t = fuzz_targets; t->name; t++)
    for (int a = 1; a < argc || a == 1; a++)
      if (argc < 2 || strcmp(argv[a], t->name) == 0) run_target(t);
  fuzz_cleanup();
  return check_report("test_fuzz");
}
