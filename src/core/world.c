/* world.c — which process of how many this is, so compile can pick the
 * replicas this process runs without depending on MPI itself. */
#include "core/core.h"

#include <unistd.h>

static int world_rank = 0, world_size = 1;

void mxu_world_set(int rank, int size) {
  world_rank = rank;
  world_size = size;
}

int mxu_distributed_rank(void) { return world_rank; }
int mxu_distributed_size(void) { return world_size; }

int mxu_machine_cores(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

int64_t mxu_machine_l2_bytes(void) {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (bytes > 0) return bytes;
#endif
  return 1 << 20; /* unknown: a common size */
}

int64_t mxu_machine_memory_bytes(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && size > 0) return (int64_t)pages * size;
#endif
  return 0;
}
