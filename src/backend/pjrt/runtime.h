/* runtime.h — a PJRT plugin loaded at run time (dlopen): a client over
 * its devices, programs compiled from StableHLO text, buffers on the
 * devices. The one place in mxu that speaks the PJRT C API; mxu builds
 * and runs without any plugin, and says so when one is asked for.
 * Internal to libmxu. */
#ifndef MXU_PJRT_RUNTIME_H
#define MXU_PJRT_RUNTIME_H

#include "backend/pjrt/hlo.h"
#include "mxu.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mxu_pjrt mxu_pjrt;
typedef struct mxu_pjrt_program mxu_pjrt_program;
typedef struct mxu_pjrt_buffer mxu_pjrt_buffer; /* a PJRT_Buffer */

typedef enum mxu_pjrt_type {
  MXU_PJRT_F32,
  MXU_PJRT_F64,
  MXU_PJRT_S32,
  MXU_PJRT_U32,
  MXU_PJRT_S64,
  MXU_PJRT_BF16
} mxu_pjrt_type;

/* The buffer type of a program value of that element type (PRED has
 * none: F32). */
mxu_pjrt_type mxu_pjrt_type_of(mxu_hlo_dtype dtype);

/* The plugin to load: path, else $MXU_PJRT_PLUGIN, else the CPU plugin
 * the build downloaded (NULL when there is none). */
const char *mxu_pjrt_plugin_path(const char *path);

/* A client of the plugin with at least `devices` devices (the CPU plugin
 * makes as many as asked; a TPU or GPU has what it has). Errors carry the
 * plugin's own message. */
mxu_status mxu_pjrt_open(const char *plugin, int devices, mxu_pjrt **out);
void mxu_pjrt_close(mxu_pjrt *p);
int mxu_pjrt_device_count(const mxu_pjrt *p);
const char *mxu_pjrt_platform(const mxu_pjrt *p); /* "cpu", "tpu", ... */

/* A StableHLO module (MLIR text) compiled for `replicas` devices; its
 * replica r runs on device r. */
mxu_status mxu_pjrt_compile(mxu_pjrt *p, const char *mlir, int replicas,
                            mxu_pjrt_program **out);
void mxu_pjrt_program_free(mxu_pjrt *p, mxu_pjrt_program *program);
int mxu_pjrt_program_outputs(const mxu_pjrt_program *program);

/* A copy of host data (dense, row-major) on device `device`. */
mxu_status mxu_pjrt_upload(mxu_pjrt *p, int device, mxu_pjrt_type type,
                           const void *data, int rank, const int64_t *dims,
                           mxu_pjrt_buffer **out);
/* The buffer's bytes into out (exactly its size). */
mxu_status mxu_pjrt_download(mxu_pjrt *p, mxu_pjrt_buffer *buffer, void *out,
                             size_t bytes);
void mxu_pjrt_buffer_free(mxu_pjrt *p, mxu_pjrt_buffer *buffer);

/* One run of the program on its replicas, waited for: args[r * nargs + i]
 * is replica r's argument i (the arguments stay the caller's), and
 * outs[r * outputs + j] receives replica r's output j, a new buffer the
 * caller frees. */
mxu_status mxu_pjrt_execute(mxu_pjrt *p, mxu_pjrt_program *program, int nargs,
                            mxu_pjrt_buffer *const *args,
                            mxu_pjrt_buffer **outs);

#endif
