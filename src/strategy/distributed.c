/* distributed.c — the processes of an mpirun world, through OpenMPI when
 * mxu is built with it; otherwise (or outside mpirun) a world of one in
 * which every exchange is a copy. */
#include "strategy/strategy.h"

#include <stdlib.h>
#include <string.h>

#ifdef MXU_HAVE_MPI
#include <mpi.h>

static int started; /* we called MPI_Init, so we finalize */

/* OpenMPI's launcher sets these; a plain run never starts MPI, so mxu
 * works without mpirun (and without its daemons) too. */
static int under_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
         getenv("PMI_RANK");
}

mxu_status mxu_distributed_init(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (!under_mpirun()) return MXU_OK;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
      return mxu_fail(MXU_ERR_IO, "mpi: MPI_Init failed");
    started = 1;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mxu_world_set(rank, size);
  return MXU_OK;
}

void mxu_distributed_finalize(void) {
  if (started) MPI_Finalize();
  started = 0;
  mxu_world_set(0, 1);
}

void mxu_distributed_abort(int code) {
  if (mxu_distributed_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

void mxu_dist_allgather(const void *send, void *recv, size_t bytes) {
  if (mxu_distributed_size() == 1) {
    memcpy(recv, send, bytes);
    return;
  }
  MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                MPI_COMM_WORLD);
}

void mxu_dist_alltoall(const float *send, float *recv, int64_t count) {
  if (mxu_distributed_size() == 1) {
    memcpy(recv, send, (size_t)count * sizeof(float));
    return;
  }
  MPI_Alltoall(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT,
               MPI_COMM_WORLD);
}

void mxu_dist_allgatherv(float *buf, const int *counts, const int *displs) {
  if (mxu_distributed_size() == 1) return;
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                 MPI_FLOAT, MPI_COMM_WORLD);
}

#else

mxu_status mxu_distributed_init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return MXU_OK;
}

void mxu_distributed_finalize(void) {}

void mxu_distributed_abort(int code) { exit(code); }

void mxu_dist_allgather(const void *send, void *recv, size_t bytes) {
  memcpy(recv, send, bytes);
}

void mxu_dist_alltoall(const float *send, float *recv, int64_t count) {
  memcpy(recv, send, (size_t)count * sizeof(float));
}

void mxu_dist_allgatherv(float *buf, const int *counts, const int *displs) {
  (void)buf;
  (void)counts;
  (void)displs;
}

#endif
