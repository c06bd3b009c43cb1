/* arena.c — one aligned allocation per replica, laid out at compile so
 * nothing in the training step allocates. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

#define MXU_ALIGN 64

void *mxu_aligned_alloc(size_t bytes) {
  size_t rounded = (bytes + MXU_ALIGN - 1) / MXU_ALIGN * MXU_ALIGN;
  void *p = aligned_alloc(MXU_ALIGN, rounded ? rounded : MXU_ALIGN);
  if (p) memset(p, 0, rounded ? rounded : MXU_ALIGN);
  return p;
}

void mxu_aligned_free(void *p) { free(p); }

size_t mxu_arena_reserve(mxu_arena *arena, size_t bytes) {
  size_t offset = arena->size;
  arena->size += (bytes + MXU_ALIGN - 1) / MXU_ALIGN * MXU_ALIGN;
  return offset;
}

mxu_status mxu_arena_commit(mxu_arena *arena) {
  mxu_aligned_free(arena->base);
  arena->base = mxu_aligned_alloc(arena->size);
  if (!arena->base)
    return mxu_fail(MXU_ERR_NOMEM, "arena: cannot allocate %zu bytes",
                    arena->size);
  return MXU_OK;
}

void mxu_arena_release(mxu_arena *arena) {
  mxu_aligned_free(arena->base);
  arena->base = NULL;
  arena->size = 0;
}
