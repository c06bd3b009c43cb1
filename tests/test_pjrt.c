/* test_pjrt.c — the PJRT runtime on XLA's CPU plugin (the one the build
 * fetched): hand-written StableHLO compiled and run, buffers both ways,
 * an all-reduce over four replicas on four devices, and the plugin's own
 * messages for a bad program, a missing plugin and too many devices. */
#include "backend/pjrt/runtime.h"
#include "check.h"

#include <string.h>

static const char add_program[] =
    "func.func public @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>)\n"
    "    -> (tensor<2x3xf32>, tensor<f32>) {\n"
    "  %0 = stablehlo.add %a, %b : tensor<2x3xf32>\n"
    "  %zero = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "  %1 = stablehlo.reduce(%0 init: %zero) applies stablehlo.add\n"
    "      across dimensions = [0, 1] : (tensor<2x3xf32>, tensor<f32>)\n"
    "      -> tensor<f32>\n"
    "  return %0, %1 : tensor<2x3xf32>, tensor<f32>\n"
    "}\n";

/* Each replica's x plus its replica id, summed over the four. */
static const char all_reduce_program[] =
    "module @sum attributes {mhlo.num_replicas = 4 : i32,\n"
    "                        mhlo.num_partitions = 1 : i32} {\n"
    "  func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {\n"
    "    %id = stablehlo.replica_id : tensor<ui32>\n"
    "    %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>\n"
    "    %b = stablehlo.broadcast_in_dim %f, dims = [] :\n"
    "        (tensor<f32>) -> tensor<3xf32>\n"
    "    %y = stablehlo.add %x, %b : tensor<3xf32>\n"
    "    %0 = \"stablehlo.all_reduce\"(%y) ({\n"
    "    ^bb0(%p: tensor<f32>, %q: tensor<f32>):\n"
    "      %s = stablehlo.add %p, %q : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}\n"
    "        : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    return %0 : tensor<3xf32>\n"
    "  }\n"
    "}\n";

static void add_and_reduce(mxu_pjrt *p) {
  mxu_pjrt_program *program = NULL;
  CHECK_OK(mxu_pjrt_compile(p, add_program, 1, &program));
  if (!program) return;
  CHECK(mxu_pjrt_program_outputs(program) == 2);
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5f, -1, 2, 0, 10, -6};
  int64_t dims[2] = {2, 3};
  mxu_pjrt_buffer *args[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
  CHECK_OK(mxu_pjrt_upload(p, 0, MXU_PJRT_F32, a, 2, dims, &args[0]));
  CHECK_OK(mxu_pjrt_upload(p, 0, MXU_PJRT_F32, b, 2, dims, &args[1]));
  CHECK_OK(mxu_pjrt_execute(p, program, 2, args, outs));
  float sum[6] = {0}, total = 0;
  CHECK_OK(mxu_pjrt_download(p, outs[0], sum, sizeof sum));
  CHECK_OK(mxu_pjrt_download(p, outs[1], &total, sizeof total));
  float want_total = 0;
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(sum[i] == a[i] + b[i], "sum[%d] = %g", i, (double)sum[i]);
    want_total += a[i] + b[i];
  }
  CHECK_MSG(total == want_total, "total %g, want %g", (double)total,
            (double)want_total);
  /* A buffer read into the wrong size is refused, not overrun. */
  EXPECT_FAIL(mxu_pjrt_download(p, outs[0], sum, sizeof sum - 4), MXU_ERR_SHAPE,
              "24 bytes read into 20");
  for (int i = 0; i < 2; i++) {
    mxu_pjrt_buffer_free(p, args[i]);
    mxu_pjrt_buffer_free(p, outs[i]);
  }
  mxu_pjrt_program_free(p, program);
}

static void all_reduce(mxu_pjrt *p) {
  mxu_pjrt_program *program = NULL;
  CHECK_OK(mxu_pjrt_compile(p, all_reduce_program, 4, &program));
  if (!program) return;
  mxu_pjrt_buffer *args[4] = {0}, *outs[4] = {0};
  int64_t dims[1] = {3};
  float x[4][3];
  for (int r = 0; r < 4; r++) {
    for (int i = 0; i < 3; i++) x[r][i] = (float)(r * 10 + i);
    CHECK_OK(mxu_pjrt_upload(p, r, MXU_PJRT_F32, x[r], 1, dims, &args[r]));
  }
  CHECK_OK(mxu_pjrt_execute(p, program, 1, args, outs));
  for (int r = 0; r < 4; r++) {
    float y[3] = {0};
    CHECK_OK(mxu_pjrt_download(p, outs[r], y, sizeof y));
    for (int i = 0; i < 3; i++) {
      /* sum over replicas q of (10 q + i + q) */
      float want = (float)(60 + 4 * i + 6);
      CHECK_MSG(y[i] == want, "replica %d: y[%d] = %g, want %g", r, i,
                (double)y[i], (double)want);
    }
    mxu_pjrt_buffer_free(p, args[r]);
    mxu_pjrt_buffer_free(p, outs[r]);
  }
  mxu_pjrt_program_free(p, program);
}

static void errors(mxu_pjrt *p) {
  mxu_pjrt_program *program = (mxu_pjrt_program *)1;
  /* XLA's parser speaks for itself, through mxu_errmsg. */
  EXPECT_FAIL(mxu_pjrt_compile(p,
                               "func.func @main() { %0 = stablehlo.nonsense }",
                               1, &program),
              MXU_ERR_BACKEND, "pjrt: compile: ");
  CHECK(program == NULL);
  EXPECT_FAIL(mxu_pjrt_compile(p, add_program, 9, &program), MXU_ERR_ARG,
              "9 replicas on 4 devices");
  mxu_pjrt *other = (mxu_pjrt *)1;
  EXPECT_FAIL(mxu_pjrt_open("/nonexistent/plugin.so", 1, &other), MXU_ERR_IO,
              "/nonexistent/plugin.so");
  CHECK(other == NULL);
  /* Not a plugin: a shared library without GetPjrtApi. */
  EXPECT_FAIL(mxu_pjrt_open("libm.so.6", 1, &other), MXU_ERR_FORMAT,
              "no GetPjrtApi");
}

int main(void) {
  const char *plugin = mxu_pjrt_plugin_path(NULL);
  CHECK_MSG(plugin != NULL, "the build fetched no PJRT plugin");
  mxu_pjrt *p = NULL;
  CHECK_OK(mxu_pjrt_open(plugin, 4, &p));
  if (!p) return check_report("test_pjrt");
  CHECK(mxu_pjrt_device_count(p) >= 4);
  CHECK_MSG(strcmp(mxu_pjrt_platform(p), "cpu") == 0, "platform '%s'",
            mxu_pjrt_platform(p));
  add_and_reduce(p);
  all_reduce(p);
  errors(p);
  mxu_pjrt_close(p);
  return check_report("test_pjrt");
}
