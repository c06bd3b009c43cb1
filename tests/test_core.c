/* test_core.c — the shared core pieces: Philox (known-answer vectors from
 * Random123 and statistical checks), the arena, Keras' snake_case, error
 * messages, convolution output sizes and shape helpers. */
#include "backend/backend.h"
#include "check.h"

#include "core/core.h"
#include <sys/stat.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ---- Philox -------------------------------------------------------------
 */

/* Random123's kat_vectors for philox4x32_10: counter words, key words,
 * expected output. mxu_rng_block's counter is (index lo, index hi,
 * stream[0], stream[1]) under key (seed lo, seed hi). */
static void philox_known_answers(void) {
  static const struct {
    uint32_t counter[4], key[2], expect[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof *kat; i++) {
    mxu_rng rng;
    rng.key[0] = kat[i].key[0];
    rng.key[1] = kat[i].key[1];
    rng.stream[0] = kat[i].counter[2];
    rng.stream[1] = kat[i].counter[3];
    uint64_t index =
        (uint64_t)kat[i].counter[0] | ((uint64_t)kat[i].counter[1] << 32);
    uint32_t out[4];
    mxu_rng_block(&rng, index, out);
    for (int k = 0; k < 4; k++)
      CHECK_MSG(out[k] == kat[i].expect[k],
                "philox kat %zu word %d: got %08x, want %08x", i, k, out[k],
                kat[i].expect[k]);
  }
}

static int same_block(const uint32_t a[4], const uint32_t b[4]) {
  return memcmp(a, b, 4 * sizeof *a) == 0;
}

static void philox_streams(void) {
  uint32_t a[4], b[4];
  mxu_rng r1 = mxu_rng_make(42, 1, 2, 3, 4);
  mxu_rng r2 = mxu_rng_make(42, 1, 2, 3, 4);
  mxu_rng_block(&r1, 17, a);
  mxu_rng_block(&r2, 17, b);
  CHECK(same_block(a, b));
  /* The four words of a block are not all equal (a stuck generator). */
  CHECK(!(a[0] == a[1] && a[1] == a[2] && a[2] == a[3]));

  /* Each input on its own changes the words. */
  const mxu_rng others[] = {
      mxu_rng_make(43, 1, 2, 3, 4),
      mxu_rng_make(42ull | (1ull << 32), 1, 2, 3, 4), /* high seed bits */
      mxu_rng_make(42, 0, 2, 3, 4),
      mxu_rng_make(42, 1, 0, 3, 4),
      mxu_rng_make(42, 1, 2, 0, 4),
      mxu_rng_make(42, 1, 2, 3, 0),
      mxu_rng_make(42, 2, 1, 3, 4), /* ids are ordered, not a set */
  };
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    mxu_rng_block(&others[i], 17, b);
    CHECK_MSG(!same_block(a, b), "stream variant %zu repeats the block", i);
  }
  mxu_rng_block(&r1, 18, b);
  CHECK(!same_block(a, b));
  mxu_rng_block(&r1, 17ull | (1ull << 32), b); /* high index bits */
  CHECK(!same_block(a, b));

  /* Counter based: a draw does not depend on where a run of draws starts. */
  float whole[64], tail[32];
  mxu_rng_uniform(&r1, 100, whole, 64);
  mxu_rng_uniform(&r1, 132, tail, 32);
  CHECK(memcmp(whole + 32, tail, sizeof tail) == 0);
  /* ... and is not the same value over and over. */
  int distinct = 0;
  for (int i = 1; i < 64; i++) distinct += whole[i] != whole[0];
  CHECK(distinct >= 60);
}

static void philox_uniform(void) {
  enum { N = 100000, BINS = 10 };
  float *u = malloc(N * sizeof *u);
  mxu_rng rng = mxu_rng_make(2024, MXU_STREAM_DROPOUT, 0, 0, 0);
  mxu_rng_uniform(&rng, 0, u, N);
  double sum = 0, sum2 = 0;
  int in_range = 1;
  long bins[BINS] = {0};
  for (int i = 0; i < N; i++) {
    if (!(u[i] >= 0.0f && u[i] < 1.0f)) in_range = 0;
    sum += u[i];
    sum2 += (double)u[i] * u[i];
    int b = (int)(u[i] * BINS);
    if (b >= 0 && b < BINS) bins[b]++;
  }
  CHECK(in_range);
  double mean = sum / N, var = sum2 / N - mean * mean;
  /* Standard errors: 0.29/sqrt(N) = 9e-4 for the mean, 2.7e-4 for the
   * variance; the tolerances are about five of them. */
  CHECK_NEAR(mean, 0.5, 0.005);
  CHECK_NEAR(var, 1.0 / 12.0, 0.0015);
  double chi2 = 0, expect = (double)N / BINS;
  for (int b = 0; b < BINS; b++)
    chi2 += (bins[b] - expect) * (bins[b] - expect) / expect;
  CHECK_MSG(chi2 < 30.0, "chi2 over %d bins = %g", BINS, chi2); /* df 9 */
  free(u);
}

/* mxu_rng_uniform runs 16 draws side by side and the rest scalar: every
 * (first, count) split must give word 0 of mxu_rng_block, bit for bit, and
 * write nothing past count. So must mxu_rng_uniform4, 64 draws at a time,
 * with value k from word (k % 64) / 16 of block k / 64 * 16 + k % 16. */
static void philox_uniform_lanes(void) {
  static const struct {
    uint64_t first;
    size_t count;
  } runs[] = {
      {0, 0},
      {0, 1},
      {0, 15},
      {0, 16},
      {0, 17},
      {0, 1000},
      {5, 0},
      {5, 1},
      {5, 15},
      {5, 16},
      {5, 17},
      {5, 1000},
      {13, 33},
      {100, 64},
      {64, 256},                   /* whole groups of 64 only */
      {40, 1000},                  /* a head, groups and a tail */
      {0xfffffff0u, 16},           /* lanes up to 2^32 - 1 */
      {0xfffffff8u, 16},           /* high index word changes mid-batch */
      {0xfffffffbu, 1000},         /* ... and in later batches and tail */
      {(1ull << 32) - 1, 17},      /* first lane alone below 2^32 */
      {0x00000007fffffff3ull, 40}, /* a higher high word carrying */
      {UINT64_MAX - 20, 40},       /* the index wraps, as first + i does */
  };
  const mxu_rng streams[] = {
      mxu_rng_make(2024, MXU_STREAM_DROPOUT, 3, 1, 7),
      mxu_rng_make(0xfedcba9876543210ull, 1, 2, 3, 4),
  };
  enum { MAX = 1000 };
  float *got = malloc((MAX + 1) * sizeof *got);
  float *want = malloc((MAX + 1) * sizeof *want);
  for (int four = 0; four < 2; four++)
    for (size_t s = 0; s < sizeof streams / sizeof *streams; s++)
      for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        uint64_t first = runs[r].first;
        size_t count = runs[r].count;
        for (size_t i = 0; i < count; i++) {
          uint64_t k = first + i;
          uint32_t block[4];
          mxu_rng_block(&streams[s], four ? k / 64 * 16 + k % 16 : k, block);
          uint32_t word = block[four ? k % 64 / 16 : 0];
          want[i] = (float)(word >> 8) * (1.0f / 16777216.0f);
        }
        got[count] = -1.0f; /* a sentinel just past the end */
        (four ? mxu_rng_uniform4 : mxu_rng_uniform)(&streams[s], first, got,
                                                    count);
        CHECK_MSG(memcmp(got, want, count * sizeof *got) == 0,
                  "stream %zu: uniform%s(first %llu, count %zu) differs from "
                  "mxu_rng_block",
                  s, four ? "4" : "", (unsigned long long)first, count);
        CHECK_MSG(got[count] == -1.0f,
                  "stream %zu: uniform%s(first %llu, count %zu) wrote past end",
                  s, four ? "4" : "", (unsigned long long)first, count);
      }
  free(got);
  free(want);
}

static void philox_below(void) {
  mxu_rng rng = mxu_rng_make(7, MXU_STREAM_SHUFFLE, 1, 0, 0);
  enum { N = 100000, BOUND = 10 };
  long counts[BOUND] = {0};
  int in_range = 1;
  for (int i = 0; i < N; i++) {
    uint32_t v = mxu_rng_below(&rng, (uint64_t)i, BOUND);
    if (v >= BOUND)
      in_range = 0;
    else
      counts[v]++;
  }
  CHECK(in_range);
  double chi2 = 0, expect = (double)N / BOUND;
  for (int b = 0; b < BOUND; b++)
    chi2 += (counts[b] - expect) * (counts[b] - expect) / expect;
  CHECK_MSG(chi2 < 30.0, "chi2 over %d values = %g", BOUND, chi2);

  int ones = 1;
  for (int i = 0; i < 1000; i++) ones &= mxu_rng_below(&rng, i, 1) == 0;
  CHECK(ones);
  int two_seen[2] = {0, 0}, two_in_range = 1;
  for (int i = 0; i < 1000; i++) {
    uint32_t v = mxu_rng_below(&rng, i, 2);
    two_in_range &= v < 2;
    two_seen[v & 1] = 1;
  }
  CHECK(two_in_range && two_seen[0] && two_seen[1]);

  /* A large bound that is not a power of two: a 32-bit modulo would put
   * half of the draws below bound/3 instead of a third. */
  const uint32_t big = 3u << 30;
  long below_third = 0;
  int big_in_range = 1;
  for (int i = 0; i < N; i++) {
    uint32_t v = mxu_rng_below(&rng, 1000000 + (uint64_t)i, big);
    big_in_range &= v < big;
    below_third += v < (1u << 30);
  }
  CHECK(big_in_range);
  CHECK_NEAR((double)below_third / N, 1.0 / 3.0, 0.01);
  /* The top of the range is reachable. */
  long top = 0;
  for (int i = 0; i < N; i++)
    top +=
        mxu_rng_below(&rng, 2000000 + (uint64_t)i, 0xffffffffu) >= 0xf0000000u;
  CHECK_NEAR((double)top / N, 1.0 / 16.0, 0.01);
}

/* ---- arena --------------------------------------------------------------
 */

static void arena(void) {
  mxu_arena a = {0};
  const size_t sizes[] = {10, 100, 64, 1, 0, 4096, 3};
  size_t offsets[sizeof sizes / sizeof *sizes];
  size_t n = sizeof sizes / sizeof *sizes;
  for (size_t i = 0; i < n; i++) {
    offsets[i] = mxu_arena_reserve(&a, sizes[i]);
    CHECK_MSG(offsets[i] % 64 == 0, "offset %zu = %zu", i, offsets[i]);
    if (i) CHECK(offsets[i] >= offsets[i - 1] + sizes[i - 1]);
  }
  CHECK(offsets[0] == 0);
  /* No more room than alignment needs: blocks are packed at 64 bytes. */
  CHECK(offsets[1] == 64);
  CHECK(offsets[2] == 192);
  CHECK(offsets[3] == 256);
  CHECK(a.size >= offsets[n - 1] + sizes[n - 1]);
  CHECK(a.size % 64 == 0);
  CHECK_OK(mxu_arena_commit(&a));
  CHECK(a.base != NULL);
  if (a.base) {
    CHECK((uintptr_t)a.base % 64 == 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < a.size; i++) nonzero += a.base[i] != 0;
    CHECK(nonzero == 0);
    /* Every byte is writable (ASan would object otherwise). */
    memset(a.base, 0xab, a.size);
    float *f = mxu_arena_floats(&a, offsets[5]);
    CHECK((uintptr_t)f % 64 == 0);
  }
  /* A second commit gives a fresh zeroed block. */
  CHECK_OK(mxu_arena_commit(&a));
  if (a.base) CHECK(a.base[0] == 0 && a.base[a.size - 1] == 0);
  mxu_arena_release(&a);
  CHECK(a.base == NULL && a.size == 0);

  const size_t alloc_sizes[] = {0, 1, 63, 64, 65, 1000};
  for (size_t i = 0; i < sizeof alloc_sizes / sizeof *alloc_sizes; i++) {
    unsigned char *p = mxu_aligned_alloc(alloc_sizes[i]);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK((uintptr_t)p % 64 == 0);
    size_t nonzero = 0;
    for (size_t k = 0; k < alloc_sizes[i]; k++) nonzero += p[k] != 0;
    CHECK(nonzero == 0);
    mxu_aligned_free(p);
  }
}

/* ---- snake_case ---------------------------------------------------------
 */

static void snake_case(void) {
  /* Expected values are what Keras' to_snake_case (two re.sub passes, then
   * lower()) gives for these class names. */
  static const char *const cases[][2] = {
      {"Conv2D", "conv2d"},
      {"MaxPooling2D", "max_pooling2d"},
      {"BatchNormalization", "batch_normalization"},
      {"AveragePooling2D", "average_pooling2d"},
      {"Dense", "dense"},
      {"InputLayer", "input_layer"},
      {"Activation", "activation"},
      {"Flatten", "flatten"},
      {"Dropout", "dropout"},
      {"GlobalAveragePooling2D", "global_average_pooling2d"},
      {"Conv2DTranspose", "conv2d_transpose"},
      {"ReLU", "re_lu"},
      {"PReLU", "p_re_lu"},
      {"GRUCell", "gru_cell"},
      {"SimpleRNN", "simple_rnn"},
      {"LSTM", "lstm"},
      {"UpSampling2D", "up_sampling2d"},
      /* A capital with a lower-case letter after it starts a word even
       * after another capital (a digit does not: Keras 3 names ConvLSTM2D
       * layers conv_lstm2d, tf.keras 2 conv_lst_m2d). */
      {"ConvLSTM2D", "conv_lstm2d"},
      {"Conv3DTranspose", "conv3d_transpose"},
      {"GlobalAveragePooling3D", "global_average_pooling3d"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char out[64];
    mxu_snake_case(cases[i][0], out, sizeof out);
    CHECK_MSG(strcmp(out, cases[i][1]) == 0, "%s -> '%s', want '%s'",
              cases[i][0], out, cases[i][1]);
  }
  /* A short buffer is filled with a prefix, terminated, never overrun. */
  for (size_t size = 1; size <= 24; size++) {
    char buffer[32];
    memset(buffer, '#', sizeof buffer);
    mxu_snake_case("BatchNormalization", buffer, size);
    size_t len = strnlen(buffer, sizeof buffer);
    CHECK_MSG(len < size, "size %zu: length %zu", size, len);
    CHECK_MSG(strncmp(buffer, "batch_normalization", len) == 0,
              "size %zu: '%s'", size, buffer);
    int untouched = 1;
    for (size_t k = size; k < sizeof buffer; k++) untouched &= buffer[k] == '#';
    CHECK_MSG(untouched, "size %zu: wrote past the buffer", size);
  }
}

/* ---- errors -------------------------------------------------------------
 */

static void *other_thread(void *arg) {
  (void)arg;
  mxu_fail(MXU_ERR_IO, "message from another thread");
  return NULL;
}

static void errors(void) {
  CHECK(mxu_fail(MXU_ERR_IO, "idx: %s: offset %d", "a.gz", 16) == MXU_ERR_IO);
  CHECK(strcmp(mxu_errmsg(), "idx: a.gz: offset 16") == 0);
  CHECK(mxu_fail_prefix(MXU_ERR_FORMAT, "load %s: ", "mnist") ==
        MXU_ERR_FORMAT);
  CHECK_MSG(strcmp(mxu_errmsg(), "load mnist: idx: a.gz: offset 16") == 0,
            "'%s'", mxu_errmsg());
  CHECK(mxu_fail(MXU_OK, "%s", "") == MXU_OK);
  CHECK(mxu_errmsg() != NULL && mxu_errmsg()[0] == 0);

  /* A very long message is cut, keeping its start, and terminated. */
  enum { LONG = 5000 };
  char *text = malloc(LONG + 1);
  for (int i = 0; i < LONG; i++) text[i] = (char)('a' + i % 26);
  text[LONG] = 0;
  CHECK(mxu_fail(MXU_ERR_ARG, "%s", text) == MXU_ERR_ARG);
  size_t len = strlen(mxu_errmsg());
  CHECK(len > 100 && len < LONG);
  CHECK(strncmp(mxu_errmsg(), text, len) == 0);
  /* A prefix on a full message: the prefix survives, the total stays
   * bounded and the old message's start follows it. */
  CHECK(mxu_fail_prefix(MXU_ERR_ARG, "ctx: ") == MXU_ERR_ARG);
  const char *m = mxu_errmsg();
  CHECK(strncmp(m, "ctx: ", 5) == 0);
  CHECK(strlen(m) <= len);
  CHECK(strncmp(m + 5, text, strlen(m) - 5) == 0);
  /* A very long prefix too. */
  mxu_fail(MXU_ERR_ARG, "tail");
  CHECK(mxu_fail_prefix(MXU_ERR_ARG, "%s", text) == MXU_ERR_ARG);
  m = mxu_errmsg();
  CHECK(strlen(m) < LONG);
  CHECK(strncmp(m, text, 100) == 0);
  free(text);

  /* The message is per thread. */
  mxu_fail(MXU_ERR_SHAPE, "main thread");
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, other_thread, NULL) == 0);
  pthread_join(thread, NULL);
  CHECK(strcmp(mxu_errmsg(), "main thread") == 0);

  /* Every status has its own name. */
  const mxu_status all[] = {
      MXU_OK,         MXU_ERR_ARG,   MXU_ERR_IO,          MXU_ERR_FORMAT,
      MXU_ERR_SHAPE,  MXU_ERR_NOMEM, MXU_ERR_UNSUPPORTED, MXU_ERR_NUMERIC,
      MXU_ERR_BACKEND};
  size_t n = sizeof all / sizeof *all;
  for (size_t i = 0; i < n; i++) {
    CHECK(mxu_status_name(all[i]) != NULL && mxu_status_name(all[i])[0]);
    for (size_t k = 0; k < i; k++)
      CHECK(strcmp(mxu_status_name(all[i]), mxu_status_name(all[k])) != 0);
  }
}

/* ---- convolution output size -------------------------------------------
 */

static void conv_size_case(int in, int kernel, int stride, mxu_padding pad,
                           int out, int before, int after) {
  int b = -1, a = -1;
  int got = mxu_conv_output_size(in, kernel, stride, pad, &b, &a);
  CHECK_MSG(got == out && b == before && a == after,
            "in %d kernel %d stride %d %s: got %d (%d, %d), want %d (%d, %d)",
            in, kernel, stride, pad == MXU_SAME ? "same" : "valid", got, b, a,
            out, before, after);
}

static void conv_output_size(void) {
  conv_size_case(28, 3, 1, MXU_VALID, 26, 0, 0);
  conv_size_case(26, 2, 2, MXU_VALID, 13, 0, 0);
  conv_size_case(7, 3, 2, MXU_VALID, 3, 0, 0);
  conv_size_case(8, 3, 2, MXU_VALID, 3, 0, 0);
  conv_size_case(3, 3, 1, MXU_VALID, 1, 0, 0);
  conv_size_case(28, 3, 1, MXU_SAME, 28, 1, 1);
  conv_size_case(7, 3, 2, MXU_SAME, 4, 1, 1);
  /* Odd totals: the extra pixel goes after (bottom/right). */
  conv_size_case(6, 3, 2, MXU_SAME, 3, 0, 1);
  conv_size_case(5, 2, 1, MXU_SAME, 5, 0, 1);
  conv_size_case(5, 4, 1, MXU_SAME, 5, 1, 2);
  conv_size_case(1, 5, 3, MXU_SAME, 1, 2, 2);
  conv_size_case(10, 1, 3, MXU_SAME, 4, 0, 0);
  conv_size_case(8, 2, 4, MXU_SAME, 2, 0, 0); /* windows skip pixels */
  /* Too small for a valid window. */
  CHECK(mxu_conv_output_size(2, 3, 1, MXU_VALID, NULL, NULL) <= 0);
  /* The pads are optional. */
  CHECK(mxu_conv_output_size(9, 3, 2, MXU_SAME, NULL, NULL) == 5);

  /* The whole grid against TensorFlow's documented rules. */
  for (int in = 1; in <= 20; in++)
    for (int k = 1; k <= 6; k++)
      for (int s = 1; s <= 4; s++) {
        int b, a;
        int out = mxu_conv_output_size(in, k, s, MXU_SAME, &b, &a);
        int want = (in + s - 1) / s;
        int total = (want - 1) * s + k - in;
        if (total < 0) total = 0;
        CHECK_MSG(out == want && b == total / 2 && a == total - total / 2,
                  "same in %d k %d s %d: %d (%d, %d)", in, k, s, out, b, a);
        if (in >= k) {
          out = mxu_conv_output_size(in, k, s, MXU_VALID, &b, &a);
          CHECK_MSG(out == (in - k) / s + 1 && b == 0 && a == 0,
                    "valid in %d k %d s %d: %d", in, k, s, out);
        }
      }
}

/* ---- shapes -------------------------------------------------------------
 */

static void shapes(void) {
  int64_t dims[MXU_MAX_RANK + 1] = {2, 3, 4, 5, 6, 7, 8};
  mxu_shape s = mxu_shape_make(3, dims);
  CHECK(s.rank == 3 && s.dims[0] == 2 && s.dims[2] == 4);
  CHECK(mxu_shape_count(&s) == 24);
  s = mxu_shape_make(1, dims);
  CHECK(mxu_shape_count(&s) == 2);
  s = mxu_shape_make(0, dims);
  CHECK(mxu_shape_count(&s) == 1); /* a scalar is one value */
  s = mxu_shape_make(MXU_MAX_RANK, dims);
  CHECK(mxu_shape_count(&s) == 2 * 3 * 4 * 5 * 6 * 7);
  /* Past 2^32 values: 64-bit arithmetic throughout. */
  int64_t big[3] = {1 << 20, 1 << 20, 3};
  s = mxu_shape_make(3, big);
  CHECK(mxu_shape_count(&s) == 3ll << 40);
  int64_t with_zero[2] = {5, 0};
  s = mxu_shape_make(2, with_zero);
  CHECK(mxu_shape_count(&s) == 0);
  /* A rank out of range is clamped, never read past dims. */
  s = mxu_shape_make(MXU_MAX_RANK + 1, dims);
  CHECK(s.rank == MXU_MAX_RANK);
  s = mxu_shape_make(-1, dims);
  CHECK(s.rank == 0);
  CHECK(mxu_dtype_size(MXU_FLOAT32) == 4);
  CHECK(mxu_dtype_size(MXU_BFLOAT16) == 2);
}

/* mxu_file_write never replaces what is not a regular file (as root, the
 * rename it used to do would have replaced a /dev node): a symlink's
 * target is replaced and the link kept, a device is written in place, a
 * directory is refused. */
static void file_writes(void) {
  char dir[] = "/tmp/mxu_core_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char target[256], link_path[256], sub[256];
  snprintf(target, sizeof target, "%s/target.txt", dir);
  snprintf(link_path, sizeof link_path, "%s/link.txt", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  CHECK_OK(mxu_file_write(target, "old", 3));
  CHECK(symlink(target, link_path) == 0);
  CHECK_OK(mxu_file_write(link_path, "new!", 4));
  struct stat st;
  CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(stat(target, &st) == 0 && st.st_size == 4);
  CHECK_OK(mxu_file_write("/dev/null", "x", 1));
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
  CHECK(mkdir(sub, 0755) == 0);
  CHECK(mxu_file_write(sub, "x", 1) == MXU_ERR_IO &&
        strstr(mxu_errmsg(), "is a directory"));
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *e; d && (e = readdir(d));) entries += e->d_name[0] != '.';
  if (d) closedir(d);
  CHECK_MSG(entries == 3, "%d entries: no temporary may be left", entries);
  unlink(link_path);
  unlink(target);
  rmdir(sub);
  rmdir(dir);
}

int main(void) {
  file_writes();
  philox_known_answers();
  philox_streams();
  philox_uniform();
  philox_uniform_lanes();
  philox_below();
  arena();
  snake_case();
  errors();
  conv_output_size();
  shapes();
  return check_report("test_core");
}
