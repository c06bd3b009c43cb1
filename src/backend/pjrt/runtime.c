/* runtime.c — the PJRT C API, reached through the GetPjrtApi table of a
 * plugin loaded with dlopen. Every call fills an *_Args struct whose
 * struct_size tells the plugin which fields this build knows; an error
 * comes back as a PJRT_Error whose message goes to mxu_errmsg. Plugins
 * are never unloaded (their threads outlive a client), and each is
 * initialised once per process. */
#include "backend/pjrt/runtime.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

mxu_pjrt_type mxu_pjrt_type_of(mxu_hlo_dtype dtype) {
  switch (dtype) {
  case MXU_HLO_F64: return MXU_PJRT_F64;
  case MXU_HLO_BF16: return MXU_PJRT_BF16;
  case MXU_HLO_S32: return MXU_PJRT_S32;
  case MXU_HLO_U32: return MXU_PJRT_U32;
  default: return MXU_PJRT_F32;
  }
}

#ifndef MXU_HAVE_PJRT

/* Built without pjrt_c_api.h: every entry point says how to get it. */
static mxu_status not_built(void) {
  return mxu_fail(MXU_ERR_UNSUPPORTED,
                  "pjrt: this mxu was built without the PJRT C API header "
                  "(the build downloads it with the xla-cpu-pjrt wheel from "
                  "PyPI); rebuild with network access");
}

const char *mxu_pjrt_plugin_path(const char *path) {
  return path ? path : getenv("MXU_PJRT_PLUGIN");
}
mxu_status mxu_pjrt_open(const char *plugin, int devices, mxu_pjrt **out) {
  (void)plugin, (void)devices;
  *out = NULL;
  return not_built();
}
void mxu_pjrt_close(mxu_pjrt *p) { (void)p; }
int mxu_pjrt_device_count(const mxu_pjrt *p) { return (void)p, 0; }
const char *mxu_pjrt_platform(const mxu_pjrt *p) { return (void)p, "none"; }
mxu_status mxu_pjrt_compile(mxu_pjrt *p, const char *mlir, int replicas,
                            mxu_pjrt_program **out) {
  (void)p, (void)mlir, (void)replicas;
  *out = NULL;
  return not_built();
}
void mxu_pjrt_program_free(mxu_pjrt *p, mxu_pjrt_program *program) {
  (void)p, (void)program;
}
int mxu_pjrt_program_outputs(const mxu_pjrt_program *program) {
  return (void)program, 0;
}
mxu_status mxu_pjrt_upload(mxu_pjrt *p, int device, mxu_pjrt_type type,
                           const void *data, int rank, const int64_t *dims,
                           mxu_pjrt_buffer **out) {
  (void)p, (void)device, (void)type, (void)data, (void)rank, (void)dims;
  *out = NULL;
  return not_built();
}
mxu_status mxu_pjrt_download(mxu_pjrt *p, mxu_pjrt_buffer *buffer, void *out,
                             size_t bytes) {
  (void)p, (void)buffer, (void)out, (void)bytes;
  return not_built();
}
void mxu_pjrt_buffer_free(mxu_pjrt *p, mxu_pjrt_buffer *buffer) {
  (void)p, (void)buffer;
}
mxu_status mxu_pjrt_execute(mxu_pjrt *p, mxu_pjrt_program *program, int nargs,
                            mxu_pjrt_buffer *const *args,
                            mxu_pjrt_buffer **outs) {
  (void)p, (void)program, (void)nargs, (void)args, (void)outs;
  return not_built();
}

#else

#include <dlfcn.h>
#include <stdio.h>

#include "pjrt_c_api.h"

struct mxu_pjrt {
  const PJRT_Api *api;
  PJRT_Client *client;
  PJRT_Device *const *devices;
  int device_count;
  char platform[32];
};

struct mxu_pjrt_program {
  PJRT_LoadedExecutable *executable;
  int replicas, outputs;
};

/* ---- errors and events ------------------------------------------------- */

/* MXU_OK for no error; else the plugin's message after what, and the
 * error freed. */
static mxu_status check(const PJRT_Api *api, PJRT_Error *error,
                        const char *what) {
  if (!error) return MXU_OK;
  PJRT_Error_Message_Args m = {
      .struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Message(&m);
  mxu_status s = mxu_fail(MXU_ERR_BACKEND, "pjrt: %s: %.*s", what,
                          (int)m.message_size, m.message);
  PJRT_Error_Destroy_Args d = {
      .struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Destroy(&d);
  return s;
}

/* Waits for the event (NULL: none) and frees it. */
static mxu_status await_event(const PJRT_Api *api, PJRT_Event *event,
                              const char *what) {
  if (!event) return MXU_OK;
  PJRT_Event_Await_Args a = {.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE,
                             .event = event};
  mxu_status s = check(api, api->PJRT_Event_Await(&a), what);
  PJRT_Event_Destroy_Args d = {
      .struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = event};
  api->PJRT_Event_Destroy(&d);
  return s;
}

/* ---- the plugin -------------------------------------------------------- */

const char *mxu_pjrt_plugin_path(const char *path) {
  if (path && *path) return path;
  const char *env = getenv("MXU_PJRT_PLUGIN");
  if (env && *env) return env;
#ifdef MXU_PJRT_BUILD_PLUGIN
  return MXU_PJRT_BUILD_PLUGIN;
#else
  return NULL;
#endif
}

/* The loaded plugins, each initialised once (a process uses one or two). */
enum { MAX_PLUGINS = 4 };
static struct {
  char path[512];
  const PJRT_Api *api;
} loaded[MAX_PLUGINS];

static mxu_status load_api(const char *path, const PJRT_Api **out) {
  for (int i = 0; i < MAX_PLUGINS; i++)
    if (loaded[i].api && strcmp(loaded[i].path, path) == 0) {
      *out = loaded[i].api;
      return MXU_OK;
    }
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return mxu_fail(MXU_ERR_IO,
                    "pjrt: cannot load plugin %s: %s (give a PJRT plugin "
                    "with --pjrt-plugin or MXU_PJRT_PLUGIN)",
                    path, dlerror());
  typedef const PJRT_Api *(*get_api_fn)(void);
  get_api_fn get_api;
  *(void **)&get_api = dlsym(handle, "GetPjrtApi");
  const PJRT_Api *api = get_api ? get_api() : NULL;
  if (!api)
    return mxu_fail(MXU_ERR_FORMAT,
                    "pjrt: %s is not a PJRT plugin (no GetPjrtApi)", path);
  PJRT_Api_Version v = api->pjrt_api_version;
  if (v.major_version != PJRT_API_MAJOR || v.minor_version < 50)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "pjrt: %s speaks PJRT C API %d.%d; mxu needs %d.50 or "
                    "newer (built against %d.%d)",
                    path, v.major_version, v.minor_version, PJRT_API_MAJOR,
                    PJRT_API_MAJOR, PJRT_API_MINOR);
  PJRT_Plugin_Initialize_Args init = {
      .struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE};
  MXU_TRY(check(api, api->PJRT_Plugin_Initialize(&init), "initialise plugin"));
  for (int i = 0; i < MAX_PLUGINS; i++)
    if (!loaded[i].api) {
      snprintf(loaded[i].path, sizeof loaded[i].path, "%s", path);
      loaded[i].api = api;
      break;
    }
  *out = api;
  return MXU_OK;
}

/* The CPU plugin makes cpu_device_count devices; other plugins may refuse
 * the option, and are asked again without it. */
static mxu_status create_client(const PJRT_Api *api, int devices,
                                PJRT_Client **out) {
  static const char key[] = "cpu_device_count";
  PJRT_NamedValue option = {.struct_size = PJRT_NamedValue_STRUCT_SIZE,
                            .name = key,
                            .name_size = sizeof key - 1,
                            .type = PJRT_NamedValue_kInt64,
                            .int64_value = devices,
                            .value_size = 1};
  PJRT_Client_Create_Args c = {.struct_size =
                                   PJRT_Client_Create_Args_STRUCT_SIZE,
                               .create_options = &option,
                               .num_options = 1};
  PJRT_Error *error = api->PJRT_Client_Create(&c);
  if (error) {
    mxu_status ignored = check(api, error, "create client");
    (void)ignored;
    c.create_options = NULL;
    c.num_options = 0;
    MXU_TRY(check(api, api->PJRT_Client_Create(&c), "create client"));
  }
  *out = c.client;
  return MXU_OK;
}

/* XLA's CPU runtime runs XNNPACK's kernels on a thread pool shared by
 * every device of the process; a device waiting in an all_reduce holds
 * one of its threads, and with as many threads as cores (two here) another
 * device's XNNPACK kernel waited for it forever (the cifar model on two
 * devices). XLA's own kernels do not. Read from XLA_FLAGS when the plugin
 * first compiles; a user's own setting stands. */
static mxu_status avoid_shared_pool_deadlock(void) {
  static const char flag[] = "--xla_cpu_use_xnnpack=false";
  const char *now = getenv("XLA_FLAGS");
  if (now && strstr(now, "xla_cpu_use_xnnpack")) return MXU_OK;
  char flags[4096];
  int n = snprintf(flags, sizeof flags, "%s%s%s", now ? now : "",
                   now && *now ? " " : "", flag);
  if (n < 0 || (size_t)n >= sizeof flags || setenv("XLA_FLAGS", flags, 1) != 0)
    return mxu_fail(MXU_ERR_ARG, "pjrt: XLA_FLAGS is too long to add %s", flag);
  return MXU_OK;
}

mxu_status mxu_pjrt_open(const char *plugin, int devices, mxu_pjrt **out) {
  *out = NULL;
  if (devices > 1) MXU_TRY(avoid_shared_pool_deadlock());
  const char *path = mxu_pjrt_plugin_path(plugin);
  if (!path)
    return mxu_fail(MXU_ERR_ARG,
                    "pjrt: no plugin: give one with --pjrt-plugin PATH or "
                    "MXU_PJRT_PLUGIN (the CPU plugin: pip install "
                    "xla-cpu-pjrt; TPUs: pip install libtpu)");
  if (devices < 1)
    return mxu_fail(MXU_ERR_ARG, "pjrt: %d devices asked for", devices);
  const PJRT_Api *api = NULL;
  MXU_TRY(load_api(path, &api));
  mxu_pjrt *p = calloc(1, sizeof *p);
  if (!p) return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  p->api = api;
  mxu_status s = create_client(api, devices, &p->client);
  PJRT_Client_AddressableDevices_Args d = {
      .struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE,
      .client = p->client};
  if (s == MXU_OK)
    s = check(api, api->PJRT_Client_AddressableDevices(&d), "list devices");
  p->devices = d.addressable_devices;
  p->device_count = (int)d.num_addressable_devices;
  PJRT_Client_PlatformName_Args n = {
      .struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE,
      .client = p->client};
  if (s == MXU_OK)
    s = check(api, api->PJRT_Client_PlatformName(&n), "platform name");
  if (s == MXU_OK)
    snprintf(p->platform, sizeof p->platform, "%.*s", (int)n.platform_name_size,
             n.platform_name);
  if (s == MXU_OK && p->device_count < devices)
    s = mxu_fail(MXU_ERR_ARG,
                 "pjrt: %s has %d %s devices here, %d asked for (use "
                 "--replicas %d or fewer)",
                 path, p->device_count, p->platform, devices, p->device_count);
  if (s != MXU_OK) {
    mxu_pjrt_close(p);
    return s;
  }
  *out = p;
  return MXU_OK;
}

void mxu_pjrt_close(mxu_pjrt *p) {
  if (!p) return;
  if (p->client) {
    PJRT_Client_Destroy_Args d = {.struct_size =
                                      PJRT_Client_Destroy_Args_STRUCT_SIZE,
                                  .client = p->client};
    mxu_status ignored =
        check(p->api, p->api->PJRT_Client_Destroy(&d), "destroy client");
    (void)ignored;
  }
  free(p);
}

int mxu_pjrt_device_count(const mxu_pjrt *p) { return p->device_count; }

const char *mxu_pjrt_platform(const mxu_pjrt *p) { return p->platform; }

/* ---- programs ---------------------------------------------------------- */

static mxu_status count_outputs(const PJRT_Api *api,
                                PJRT_LoadedExecutable *loaded_executable,
                                int *out) {
  PJRT_LoadedExecutable_GetExecutable_Args g = {
      .struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
      .loaded_executable = loaded_executable};
  MXU_TRY(check(api, api->PJRT_LoadedExecutable_GetExecutable(&g),
                "get executable"));
  PJRT_Executable_NumOutputs_Args n = {
      .struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
      .executable = g.executable};
  mxu_status s =
      check(api, api->PJRT_Executable_NumOutputs(&n), "count outputs");
  *out = (int)n.num_outputs;
  PJRT_Executable_Destroy_Args d = {
      .struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE,
      .executable = g.executable};
  mxu_status ignored =
      check(api, api->PJRT_Executable_Destroy(&d), "free executable");
  (void)ignored;
  return s;
}

mxu_status mxu_pjrt_compile(mxu_pjrt *p, const char *mlir, int replicas,
                            mxu_pjrt_program **out) {
  *out = NULL;
  if (replicas < 1 || replicas > 127 || replicas > p->device_count)
    return mxu_fail(MXU_ERR_ARG,
                    "pjrt: %d replicas on %d devices (at most 127)", replicas,
                    p->device_count);
  /* xla.CompileOptionsProto: executable_build_options (field 3) with
   * num_replicas (4) and num_partitions (5), each a one-byte varint. */
  const char options[] = {0x1a, 0x04, 0x20, (char)replicas, 0x28, 0x01};
  static const char format[] = "mlir";
  PJRT_Program program = {.struct_size = PJRT_Program_STRUCT_SIZE,
                          .code = (char *)mlir,
                          .code_size = strlen(mlir),
                          .format = format,
                          .format_size = sizeof format - 1};
  PJRT_Client_Compile_Args c = {.struct_size =
                                    PJRT_Client_Compile_Args_STRUCT_SIZE,
                                .client = p->client,
                                .program = &program,
                                .compile_options = options,
                                .compile_options_size = sizeof options};
  MXU_TRY(check(p->api, p->api->PJRT_Client_Compile(&c), "compile"));
  mxu_pjrt_program *prog = calloc(1, sizeof *prog);
  if (!prog) {
    PJRT_LoadedExecutable_Destroy_Args d = {
        .struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
        .executable = c.executable};
    mxu_status ignored = check(
        p->api, p->api->PJRT_LoadedExecutable_Destroy(&d), "free program");
    (void)ignored;
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  prog->executable = c.executable;
  prog->replicas = replicas;
  mxu_status s = count_outputs(p->api, c.executable, &prog->outputs);
  if (s != MXU_OK) {
    mxu_pjrt_program_free(p, prog);
    return s;
  }
  *out = prog;
  return MXU_OK;
}

void mxu_pjrt_program_free(mxu_pjrt *p, mxu_pjrt_program *program) {
  if (!program) return;
  PJRT_LoadedExecutable_Destroy_Args d = {
      .struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
      .executable = program->executable};
  mxu_status ignored =
      check(p->api, p->api->PJRT_LoadedExecutable_Destroy(&d), "free program");
  (void)ignored;
  free(program);
}

int mxu_pjrt_program_outputs(const mxu_pjrt_program *program) {
  return program->outputs;
}

/* ---- buffers ----------------------------------------------------------- */

static PJRT_Buffer_Type buffer_type(mxu_pjrt_type type) {
  switch (type) {
  case MXU_PJRT_F32: return PJRT_Buffer_Type_F32;
  case MXU_PJRT_F64: return PJRT_Buffer_Type_F64;
  case MXU_PJRT_S32: return PJRT_Buffer_Type_S32;
  case MXU_PJRT_U32: return PJRT_Buffer_Type_U32;
  case MXU_PJRT_S64: return PJRT_Buffer_Type_S64;
  case MXU_PJRT_BF16: return PJRT_Buffer_Type_BF16;
  }
  return PJRT_Buffer_Type_INVALID;
}

mxu_status mxu_pjrt_upload(mxu_pjrt *p, int device, mxu_pjrt_type type,
                           const void *data, int rank, const int64_t *dims,
                           mxu_pjrt_buffer **out) {
  *out = NULL;
  if (device < 0 || device >= p->device_count)
    return mxu_fail(MXU_ERR_ARG, "pjrt: no device %d", device);
  /* The plugin copies during the call: data may go right after. */
  PJRT_Client_BufferFromHostBuffer_Args b = {
      .struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
      .client = p->client,
      .data = data,
      .type = buffer_type(type),
      .dims = dims,
      .num_dims = (size_t)rank,
      .host_buffer_semantics =
          PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
      .device = p->devices[device]};
  MXU_TRY(check(p->api, p->api->PJRT_Client_BufferFromHostBuffer(&b),
                "copy to device"));
  mxu_status s = await_event(p->api, b.done_with_host_buffer, "copy to device");
  if (s != MXU_OK) {
    mxu_pjrt_buffer_free(p, (mxu_pjrt_buffer *)b.buffer);
    return s;
  }
  *out = (mxu_pjrt_buffer *)b.buffer;
  return MXU_OK;
}

mxu_status mxu_pjrt_download(mxu_pjrt *p, mxu_pjrt_buffer *buffer, void *out,
                             size_t bytes) {
  PJRT_Buffer_ToHostBuffer_Args t = {
      .struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
      .src = (PJRT_Buffer *)buffer};
  /* First the size it needs, then the copy. */
  MXU_TRY(check(p->api, p->api->PJRT_Buffer_ToHostBuffer(&t), "buffer size"));
  MXU_TRY(await_event(p->api, t.event, "buffer size"));
  t.event = NULL;
  if (t.dst_size != bytes)
    return mxu_fail(MXU_ERR_SHAPE, "pjrt: a buffer of %zu bytes read into %zu",
                    t.dst_size, bytes);
  t.dst = out;
  MXU_TRY(check(p->api, p->api->PJRT_Buffer_ToHostBuffer(&t), "copy to host"));
  return await_event(p->api, t.event, "copy to host");
}

void mxu_pjrt_buffer_free(mxu_pjrt *p, mxu_pjrt_buffer *buffer) {
  if (!buffer) return;
  PJRT_Buffer_Destroy_Args d = {.struct_size =
                                    PJRT_Buffer_Destroy_Args_STRUCT_SIZE,
                                .buffer = (PJRT_Buffer *)buffer};
  mxu_status ignored =
      check(p->api, p->api->PJRT_Buffer_Destroy(&d), "free buffer");
  (void)ignored;
}

/* ---- execution --------------------------------------------------------- */

mxu_status mxu_pjrt_execute(mxu_pjrt *p, mxu_pjrt_program *program, int nargs,
                            mxu_pjrt_buffer *const *args,
                            mxu_pjrt_buffer **outs) {
  int replicas = program->replicas, outputs = program->outputs;
  PJRT_Buffer *const **arg_lists = malloc((size_t)replicas * sizeof *arg_lists);
  PJRT_Buffer ***out_lists = malloc((size_t)replicas * sizeof *out_lists);
  PJRT_Event **events = calloc((size_t)replicas, sizeof *events);
  if (!arg_lists || !out_lists || !events) {
    free(arg_lists), free(out_lists), free(events);
    return mxu_fail(MXU_ERR_NOMEM, "pjrt: out of memory");
  }
  memset(outs, 0, (size_t)replicas * (size_t)outputs * sizeof *outs);
  for (int r = 0; r < replicas; r++) {
    arg_lists[r] = (PJRT_Buffer *const *)args + (size_t)r * nargs;
    out_lists[r] = (PJRT_Buffer **)outs + (size_t)r * outputs;
  }
  PJRT_ExecuteOptions options = {.struct_size =
                                     PJRT_ExecuteOptions_STRUCT_SIZE};
  PJRT_LoadedExecutable_Execute_Args e = {
      .struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
      .executable = program->executable,
      .options = &options,
      .argument_lists = arg_lists,
      .num_devices = (size_t)replicas,
      .num_args = (size_t)nargs,
      .output_lists = out_lists,
      .device_complete_events = events};
  mxu_status s =
      check(p->api, p->api->PJRT_LoadedExecutable_Execute(&e), "execute");
  for (int r = 0; r < replicas; r++) {
    mxu_status done = await_event(p->api, events[r], "execute");
    if (s == MXU_OK) s = done;
  }
  free(arg_lists), free(out_lists), free(events);
  return s;
}

#endif
