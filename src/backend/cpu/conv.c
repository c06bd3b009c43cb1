/* conv.c — 2-D convolution on oneDNN: NHWC activations in place (for
 * Winograd, converted to and from its blocked layout: weighted.c, unless
 * a neighbouring conv takes that layout as it is: x_native, y_native),
 * Keras' HWIO kernel reordered to the layout oneDNN picks, asymmetric SAME
 * padding passed as padding_l / padding_r. In bf16 the primitives read x,
 * the kernel and dy in bfloat16 and write y, dx, dw and db in float32 (x,
 * y, dx and dy may be bf16 tensors of the caller's: x_bf16, ...). The
 * primitives are built in weighted.c; the shapes oneDNN serves badly
 * (few input channels, depthwise, small images, 3x3 where it has no
 * Winograd) run on the own loops of conv_*.c instead, which this file's
 * entries dispatch to. */
#include "backend/cpu/cpu.h"

#include <string.h>

static const char CONV[] = "conv2d";

/* The activation layout of x_native and y_native: Winograd's. */
#define NATIVE dnnl_nChw16c

/* How the primitives compute: direct on NHWC in f32 or bf16, or Winograd
 * in f32 on the blocked layouts it requires. */
typedef enum conv_kind { CONV_F32, CONV_BF16, CONV_WINOGRAD } conv_kind;

/* *_lo: what the multiplications read, bf16 or f32, in the layout the
 * primitives see x and y in (NHWC, or any for Winograd); the rest is the
 * caller's, NHWC: src and dst its dx and dy, x and y its x and y, each
 * f32 or, where the desc says (x_bf16, ...), bf16. */
typedef struct conv_mds {
  dnnl_memory_desc_t src, weights, weights_any, bias, dst, x, y;
  dnnl_memory_desc_t src_lo, weights_any_lo, dst_lo;
  dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_mds;

/* oneDNN's logical order is always N,C,H,W and O,I,H,W (G,O,I,H,W with
 * groups, O and I per group); the format tags say how Keras lays them out
 * in memory: (kh, kw, in / groups, out), out group-major, is hwigo. */
static mxu_status conv_describe(const mxu_conv2d_desc *d, conv_kind kind,
                                conv_mds *m) {
  int g = mxu_conv2d_groups(d), wdims = g > 1 ? 5 : 4;
  dnnl_dims_t src = {d->n, d->in_c, d->in_h, d->in_w};
  dnnl_dims_t weights = {d->out_c, d->in_c, d->kernel_h, d->kernel_w};
  if (g > 1) {
    dnnl_dims_t grouped = {g, d->out_c / g, d->in_c / g, d->kernel_h,
                           d->kernel_w};
    memcpy(weights, grouped, sizeof grouped);
  }
  dnnl_dims_t bias = {d->out_c};
  dnnl_dims_t dst = {d->n, d->out_c, d->out_h, d->out_w};
  dnnl_data_type_t lo = kind == CONV_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_format_tag_t x_tag = d->x_native ? NATIVE : dnnl_nhwc;
  dnnl_format_tag_t y_tag = d->y_native ? NATIVE : dnnl_nhwc;
  int wino = kind == CONV_WINOGRAD;
  /* src and dst: the caller's dx and dy (bf16 where the desc says) */
  MXU_TRY(cpu_md_typed(&m->src, 4, src, d->dx_bf16 ? dnnl_bf16 : dnnl_f32,
                       x_tag, CONV));
  MXU_TRY(cpu_md(&m->weights, wdims, weights, g > 1 ? dnnl_hwigo : dnnl_hwio,
                 CONV));
  MXU_TRY(cpu_md(&m->weights_any, wdims, weights, dnnl_format_tag_any, CONV));
  MXU_TRY(cpu_md(&m->bias, 1, bias, dnnl_x, CONV));
  MXU_TRY(cpu_md_typed(&m->dst, 4, dst, d->dy_bf16 ? dnnl_bf16 : dnnl_f32,
                       y_tag, CONV));
  MXU_TRY(cpu_md_typed(&m->x, 4, src, d->x_bf16 ? dnnl_bf16 : dnnl_f32, x_tag,
                       CONV));
  MXU_TRY(cpu_md_typed(&m->y, 4, dst, d->y_bf16 ? dnnl_bf16 : dnnl_f32, y_tag,
                       CONV));
  MXU_TRY(cpu_md_typed(&m->src_lo, 4, src, lo,
                       wino ? dnnl_format_tag_any : x_tag, CONV));
  MXU_TRY(cpu_md_typed(&m->weights_any_lo, wdims, weights, lo,
                       dnnl_format_tag_any, CONV));
  MXU_TRY(cpu_md_typed(&m->dst_lo, 4, dst, lo,
                       wino ? dnnl_format_tag_any : y_tag, CONV));
  m->strides[0] = d->stride_h;
  m->strides[1] = d->stride_w;
  /* oneDNN counts dilation from 0 (no gap), Keras from 1. */
  m->dilates[0] = d->dilation_h > 1 ? d->dilation_h - 1 : 0;
  m->dilates[1] = d->dilation_w > 1 ? d->dilation_w - 1 : 0;
  m->pad_l[0] = d->pad_top;
  m->pad_l[1] = d->pad_left;
  m->pad_r[0] = d->pad_bottom;
  m->pad_r[1] = d->pad_right;
  return MXU_OK;
}

/* Weights in oneDNN's own (blocked) layout let it use its direct JIT
 * kernels with NHWC activations: 2-3x faster, forward and backward, than
 * the im2col + GEMM it falls back to for plain HWIO. Winograd only where
 * asked for (see winograd_fits), never through auto. */
static mxu_status conv_create(const mxu_conv2d_desc *desc, conv_kind kind,
                              mxu_op **out) {
  conv_mds m;
  MXU_TRY(conv_describe(desc, kind, &m));
  const dnnl_memory_desc_t *bias = desc->has_bias ? &m.bias : NULL;
  /* Winograd's three read and write x, y, dx and dy blocked alike. */
  int wino = kind == CONV_WINOGRAD;
  const dnnl_memory_desc_t *diff_src = wino ? &m.src_lo : &m.src;
  const dnnl_memory_desc_t *dst = wino ? &m.dst_lo : &m.y;
  dnnl_alg_kind_t alg =
      wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
  dnnl_convolution_desc_t fwd, bwd_data, bwd_weights;
  CPU_TRY(CONV, dnnl_dilated_convolution_forward_desc_init, &fwd,
          dnnl_forward_training, alg, &m.src_lo, &m.weights_any_lo, bias, dst,
          m.strides, m.dilates, m.pad_l, m.pad_r);
  CPU_TRY(CONV, dnnl_dilated_convolution_backward_data_desc_init, &bwd_data,
          alg, diff_src, &m.weights_any_lo, &m.dst_lo, m.strides, m.dilates,
          m.pad_l, m.pad_r);
  CPU_TRY(CONV, dnnl_dilated_convolution_backward_weights_desc_init,
          &bwd_weights, alg, &m.src_lo, &m.weights_any, bias, &m.dst_lo,
          m.strides, m.dilates, m.pad_l, m.pad_r);
  cpu_weighted_descs descs = {&fwd,
                              &bwd_data,
                              &bwd_weights,
                              &m.weights,
                              desc->activation,
                              desc->has_bias,
                              kind == CONV_BF16,
                              &m.src,
                              &m.dst,
                              &m.x,
                              &m.y};
  return cpu_weighted_create(&descs, CONV, out);
}

/* Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, AVX-512) does a quarter of
 * direct's multiplications for 3x3 stride-1 convs with channels in
 * sixteens, at the price of transforms and of conversions between NHWC
 * and its blocked nChw16c; its sums round differently from direct's. It pays
 * from about 32 images per thread the primitive runs on: mxu bench, cifar
 * at batch 256 on 2 threads 1.15x direct, cifar_augmented at 64 on 2
 * threads 1.05x, at 32 on 1 thread 1.05x, at 16 on 1 thread 0.99x, at 32
 * on 2 threads 0.8x. The limit is 32 images whatever the thread count: a
 * choice that followed it would give other bits on other counts. */
enum { WINOGRAD_MIN_IMAGES = 32 };

/* Not on images of 4 pixels or fewer, whose one 4x4 tile Winograd
 * computes whole: ResNet50's 3x3 512 -> 512 on 1x1 images (the centre tap
 * alone) took 27 ms a step at batch 128, conv_gemm.c's GEMM over the
 * batch 0.8. Nor below 128 x 256 channels, where the own Winograd
 * (conv_wino.c) runs faster than oneDNN's (mxu bench on a 2-core AMD EPYC
 * with AVX-512, images/s: cifar at 1024 over 8 replicas 2,888 -> 3,417,
 * ResNet-20 at 128 983 -> 1,481, VGG16 at 32x32 370 -> 387 (its 128 ->
 * 128 on 16x16 36 -> 33 ms a step, but its 256 -> 256 on 8x8 26 -> 35
 * and 512 -> 512 on 4x4 30 -> 82 without oneDNN's)). */
static int winograd_fits(const mxu_conv2d_desc *d) {
  return !d->bf16 && mxu_conv2d_plain(d) && d->out_h * d->out_w > 4 &&
         (int64_t)d->in_c * d->out_c >= 128 * 256 && d->kernel_h == 3 &&
         d->kernel_w == 3 && d->stride_h == 1 && d->stride_w == 1 &&
         d->in_c % 16 == 0 && d->out_c % 16 == 0 && d->n >= WINOGRAD_MIN_IMAGES;
}

/* Whether conv_few.c and conv_data.c run all three passes (few input
 * channels, filters in vectors, linear or relu). */
static int few_fits(const mxu_conv2d_desc *d) {
  return cpu_conv_few_fits(d) && cpu_conv_data_fits(d);
}

static int64_t pixels_of(const mxu_conv2d_desc *d) {
  return (int64_t)d->out_h * d->out_w;
}

/* Whether the own float32 loops take the weight gradient (see
 * cpu_conv2d_backward_weights), so oneDNN's never runs. */
static int own_weight_gradient(const mxu_op *op) {
  return op->conv_few || op->conv_dw || op->conv_gemm || op->conv_wino;
}

/* Where Winograd fits and oneDNN has it (AVX-512): should it still
 * decline such a conv, direct reads and writes nChw16c as well. And where
 * the own kernels run all of a conv with few input channels: they write y
 * (and read dy) in nChw16c; its x is never native, as no native conv
 * writes fewer than 16 channels. */
int cpu_conv2d_native(const mxu_conv2d_desc *desc) {
  int avx512 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) ==
               dnnl_cpu_isa_avx512_core;
  mxu_conv2d_desc own = *desc; /* few channels run f32 even in bf16 */
  own.bf16 = 0;
  return few_fits(&own) || (winograd_fits(desc) && avx512);
}

/* conv_data.c's, conv_few.c's, conv_dw.c's, conv_gemm.c's and
 * conv_wino.c's loops, where they fit. */
static mxu_status attach_own(mxu_op *op, const mxu_conv2d_desc *desc) {
  if (cpu_conv_data_fits(desc)) MXU_TRY(cpu_conv_data_attach(op, desc));
  if (cpu_conv_few_fits(desc)) MXU_TRY(cpu_conv_few_attach(op, desc));
  if (cpu_conv_dw_fits(desc)) MXU_TRY(cpu_conv_dw_attach(op, desc));
  if (!op->conv_few && cpu_conv_gemm_fits(op, desc))
    MXU_TRY(cpu_conv_gemm_attach(op, desc));
  if (cpu_conv_gemm_passes(op) || !cpu_conv_wino_fits(desc)) return MXU_OK;
  MXU_TRY(cpu_conv_wino_attach(op, desc));
  /* Winograd's weight gradient sums V^T M over blocks of tiles: with one
   * tile an image and many channels its 36 x in x out sums outweigh the
   * products, and one GEMM over the batch ran 1.2-1.9x faster (ResNet50's
   * 128 -> 128 on 4x4 images at 64: 5.5 -> 2.9 ms; at 128 -> 32 Winograd
   * stayed faster, 0.54 against 0.75). */
  if (!op->conv_gemm && desc->out_h <= 4 && desc->out_w <= 4 &&
      desc->in_c * desc->out_c >= 128 * 128 && cpu_conv_gemm_can(desc))
    MXU_TRY(cpu_conv_gemm_attach(op, desc));
  return MXU_OK;
}

/* mixed_bfloat16 runs a conv in bf16 only where oneDNN's bf16 primitives
 * would take every pass and have a vector of input channels to multiply,
 * and Winograd's quarter of the multiplications does not outrun them.
 * Else f32 (the more exact) is the faster (mxu bench, ms a step, f32
 * against bf16: fashion's 1 -> 64 with its pooling 0.39 against 1.89 a
 * slice, cifar's 3 -> 32 24 against 40, MobileNetV2's 3 -> 32 at stride 2
 * 0.37 against 0.94; its depthwise convs 5.6 against 59, its 1x1 convs on
 * 2x2 and 1x1 images, where conv_gemm.c's loops run, 0.3-0.8 against
 * 0.8-2.4 each; VGG16's 3x3 256 -> 256 on 8x8 images by Winograd 25
 * against 33, 512 -> 512 on 4x4 32 against 46, but 128 -> 128 on 16x16 40
 * against 34, ResNet-20's 64 -> 64 on 8x8 3.1 against 2.6, ResNet50's
 * 128 -> 128 on 4x4 3.0 against 2.3). */
enum { BF16_MIN_IN = 16 };

/* Whether bf16 pays for the conv by its shape (the f32 one: own). */
static int bf16_pays(const mxu_conv2d_desc *desc, const mxu_conv2d_desc *own) {
  return desc->in_c >= BF16_MIN_IN && mxu_conv2d_groups(desc) == 1 &&
         !(winograd_fits(own) && own->out_h * own->out_w <= 64 &&
           (int64_t)own->in_c * own->out_c >= 256 * 256);
}

/* Where bf16 pays, unless conv_gemm.c's float32 loops would take it. */
static mxu_status bf16_create(const mxu_conv2d_desc *desc,
                              const mxu_conv2d_desc *own, mxu_op **out) {
  if (!bf16_pays(desc, own)) return MXU_ERR_UNSUPPORTED;
  mxu_op *op;
  MXU_TRY(conv_create(desc, CONV_BF16, &op));
  if (cpu_conv_gemm_fits(op, own)) {
    cpu_op_free(op);
    return MXU_ERR_UNSUPPORTED;
  }
  mxu_status s = MXU_OK;
  if (cpu_conv_bf16_fits(desc)) s = cpu_conv_bf16_attach(op, desc);
  if (s == MXU_OK && cpu_conv_bf16_data_fits(desc))
    s = cpu_conv_bf16_data_attach(op, desc);
  if (s == MXU_OK && cpu_conv_bf16_grad_fits(desc))
    s = cpu_conv_bf16_grad_attach(op, desc);
  /* conv_bf16_grad.c's declines dy in a layout it does not read */
  if (s == MXU_OK)
    s = cpu_weighted_blocks_attach(op, desc->n, pixels_of(desc), CONV);
  return cpu_op_finish(op, s, out);
}

/* bf16 tensors go to and from the convs that bf16_create builds, whose
 * primitives (and conv_bf16.c's forward) read and write them as they
 * are: undilated ones, on a CPU oneDNN runs bf16 on, but where
 * conv_gemm.c's float32 loops would be faster (asked of the op itself:
 * with ResNet50's 3x3 convs on 4x4 and 2x2 images held to bf16, its
 * step ran 2% slower). */
int cpu_conv2d_bf16_tensors(const mxu_conv2d_desc *desc) {
  mxu_conv2d_desc own = *desc;
  own.bf16 = own.x_bf16 = own.y_bf16 = own.dx_bf16 = own.dy_bf16 = 0;
  dnnl_cpu_isa_t isa = dnnl_cpu_isa_avx512_core_bf16;
  if (!desc->bf16 || (dnnl_get_effective_cpu_isa() & isa) != isa ||
      desc->x_native || desc->y_native || !mxu_conv2d_plain(desc) ||
      !bf16_pays(desc, &own))
    return 0;
  mxu_conv2d_desc plain = *desc;
  plain.x_bf16 = plain.y_bf16 = plain.dx_bf16 = plain.dy_bf16 = 0;
  mxu_op *op;
  if (conv_create(&plain, CONV_BF16, &op) != MXU_OK) return 0;
  int takes = !cpu_conv_gemm_fits(op, &own);
  cpu_op_free(op);
  return takes;
}

/* bf16 where it pays and oneDNN has fast kernels for it, else f32 (see
 * bf16_create and weighted.c):
 * Winograd where it fits and oneDNN has it, else direct; in f32 with few
 * input channels, backward data on conv_data.c's loops and, with filters
 * in vectors, forward and backward weights
 * on conv_few.c's; a depthwise conv's backward weights on conv_dw.c's;
 * backward weights that oneDNN would run a GEMM per image for, and all
 * passes of convs with one output pixel per image, on conv_gemm.c's; 3x3
 * stride-1 convs where oneDNN's Winograd does not run (below AVX-512, too
 * few images per thread, fewer than 128 x 256 channels) all three passes
 * on conv_wino.c's. */
mxu_status cpu_conv2d_create(const mxu_conv2d_desc *desc, mxu_op **out) {
  mxu_conv2d_desc own = *desc; /* the conv as float32 */
  own.bf16 = own.x_bf16 = own.y_bf16 = own.dx_bf16 = own.dy_bf16 = 0;
  if (desc->bf16 && bf16_create(desc, &own, out) == MXU_OK) return MXU_OK;
  if (desc->x_bf16 || desc->y_bf16 || desc->dx_bf16 || desc->dy_bf16)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: bf16 tensors for a conv that does not run in bf16 "
                    "(see conv2d_bf16_tensors)",
                    CONV);
  if (winograd_fits(&own) && conv_create(&own, CONV_WINOGRAD, out) == MXU_OK)
    return cpu_op_finish(
        *out, cpu_weighted_blocks_attach(*out, own.n, pixels_of(&own), CONV),
        out);
  /* With few input channels the own kernels take y_native; oneDNN's
   * primitives (which then never run) are built for NHWC. */
  mxu_conv2d_desc plain = *desc;
  plain.y_native = desc->y_native && !few_fits(&own);
  mxu_op *op;
  MXU_TRY(conv_create(&plain, CONV_F32, &op));
  /* The op computes in float32 even where bf16 was asked for, so the own
   * float32 loops take it as such. */
  mxu_status s = attach_own(op, &own);
  if (s == MXU_OK && !own_weight_gradient(op))
    s = cpu_weighted_blocks_attach(op, own.n, pixels_of(&own), CONV);
  return cpu_op_finish(op, s, out);
}

void cpu_conv2d_forward(mxu_op *op, const float *x, const float *w,
                        const float *b, float *y) {
  if (op->conv_bf16)
    cpu_conv_bf16_forward(op, x, w, b, y);
  else if (op->conv_few)
    cpu_conv_few_forward(op, x, w, b, y);
  else if (cpu_conv_dw_own_forward(op))
    cpu_conv_dw_forward(op, x, w, b, y);
  else if (cpu_conv_gemm_passes(op))
    cpu_conv_gemm_forward(op, x, w, b, y);
  else if (op->conv_wino)
    cpu_conv_wino_forward(op, x, w, b, y);
  else
    cpu_weighted_forward(op, x, w, b, y);
}

void cpu_conv2d_backward_weights(mxu_op *op, const float *x, const float *dy,
                                 float *dw, float *db) {
  if (op->conv_bf16_grad && cpu_conv_bf16_grad_weights(op, x, dy, dw, db))
    return;
  if (op->conv_few)
    cpu_conv_few_backward_weights(op, x, dy, dw, db);
  else if (op->conv_dw)
    cpu_conv_dw_backward_weights(op, x, dy, dw, db);
  else if (op->conv_gemm)
    cpu_conv_gemm_backward_weights(op, x, dy, dw, db);
  else if (op->conv_wino)
    cpu_conv_wino_backward_weights(op, x, dy, dw, db);
  else /* !own_weight_gradient(op) */
    cpu_weighted_backward_weights(op, x, dy, dw, db);
}

int cpu_conv2d_backward_relu(mxu_op *op, const float *x, const float *w,
                             const float *y, const float *dy, float *dw,
                             float *db, float *dx) {
  if (!op->conv_few || !op->conv_data) return 0;
  cpu_conv_few_backward_relu(op, x, w, y, dy, dw, db, dx);
  return 1;
}

void cpu_conv2d_backward_data(mxu_op *op, const float *dy, const float *w,
                              float *dx) {
  if (op->conv_bf16_data && cpu_conv_bf16_data(op, dy, w, dx)) return;
  if (op->conv_data)
    cpu_conv_data_backward(op, dy, w, dx);
  else if (cpu_conv_dw_own_data(op))
    cpu_conv_dw_backward_data(op, dy, w, dx);
  else if (cpu_conv_gemm_passes(op))
    cpu_conv_gemm_backward_data(op, dy, w, dx);
  else if (op->conv_wino)
    cpu_conv_wino_backward_data(op, dy, w, dx);
  else
    cpu_weighted_backward_data(op, dy, w, dx);
}
