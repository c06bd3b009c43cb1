/* test_image_folder.c — image-folder data sets: a class tree of PNG (8 and
 * 16 bit, gray, RGB, RGBA, palette with transparency, interlaced) and JPEG
 * (gray, RGB) files written here with libpng and libjpeg, loaded as RGB
 * and as gray; exact PNG pixels after an identity resize, a 2x downscale
 * and a 2x upscale worked out by hand; JPEG pixels within a tolerance;
 * and the errors broken files and folders must raise. */
#include "check.h"
#include "data/image_folder.h"
#include "mxu.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#define MAX_ROWS 64

/* ---- writing test images ------------------------------------------------- */

static char root[512];

/* root/relative, in one of a few rotating buffers. */
static const char *at_root(const char *relative) {
  static char paths[8][1024];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, 1024, "%s/%s", root, relative);
  return path;
}

static void make_dir(const char *relative) {
  CHECK_MSG(mkdir(at_root(relative), 0755) == 0, "mkdir %s", relative);
}

static void write_bytes(const char *relative, const void *data, size_t size) {
  FILE *file = fopen(at_root(relative), "wb");
  CHECK(file != NULL);
  if (!file) return;
  CHECK(size == 0 || fwrite(data, size, 1, file) == 1);
  CHECK(fclose(file) == 0);
}

typedef struct png_spec {
  int w, h, color_type, bit_depth, interlace;
  const unsigned char *pixels; /* rows of row_bytes, 16-bit big-endian */
  size_t row_bytes;
  const png_color *palette;
  int palette_count;
  const png_byte *trans;
  int trans_count;
} png_spec;

static int png_to_file(FILE *file, const png_spec *spec) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return 0;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, (png_uint_32)spec->w, (png_uint_32)spec->h,
               spec->bit_depth, spec->color_type,
               spec->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (spec->palette)
    png_set_PLTE(png, info, spec->palette, spec->palette_count);
  if (spec->trans)
    png_set_tRNS(png, info, spec->trans, spec->trans_count, NULL);
  png_write_info(png, info);
  png_bytep rows[MAX_ROWS];
  for (int y = 0; y < spec->h && y < MAX_ROWS; y++)
    rows[y] = (png_bytep)spec->pixels + (size_t)y * spec->row_bytes;
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return 1;
}

static void write_png(const char *relative, const png_spec *spec) {
  FILE *file = fopen(at_root(relative), "wb");
  CHECK(file != NULL);
  if (!file) return;
  CHECK_MSG(png_to_file(file, spec), "writing %s", relative);
  CHECK(fclose(file) == 0);
}

/* Quality 100 with no chroma subsampling: close to the pixels given. */
static void write_jpeg(const char *relative, int w, int h, int components,
                       const unsigned char *pixels) {
  FILE *file = fopen(at_root(relative), "wb");
  CHECK(file != NULL);
  if (!file) return;
  struct jpeg_compress_struct info;
  struct jpeg_error_mgr errors;
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, file);
  info.image_width = (JDIMENSION)w;
  info.image_height = (JDIMENSION)h;
  info.input_components = components;
  info.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 100, TRUE);
  for (int c = 0; c < info.num_components; c++)
    info.comp_info[c].h_samp_factor = info.comp_info[c].v_samp_factor = 1;
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = (JSAMPROW)pixels +
                   (size_t)info.next_scanline * (size_t)(w * components);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  CHECK(fclose(file) == 0);
}

/* Keeps the first `keep` bytes of a file. */
static void cut_file(const char *relative, long keep) {
  CHECK(truncate(at_root(relative), keep) == 0);
}

/* ---- the images ---------------------------------------------------------- */

/* PIL's convert('L'), worked out the way Pillow does it. */
static float luma(int r, int g, int b) {
  return (float)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

/* b.png: 4 x 4 RGB, interlaced. */
static int rgb_value(int y, int x, int c) {
  return (y * 60 + x * 20 + c * 70 + 3) % 256;
}
/* a.PNG: 4 x 4 gray. */
static int gray_value(int y, int x) { return 17 + y * 50 + x * 9; }
/* y.png: palette entry k, pixel (y, x) uses entry (y + x) % 4. */
static const png_color palette[4] = {
    {0, 255, 0}, {50, 205, 7}, {100, 155, 14}, {150, 105, 21}};
/* z.png: 16-bit RGBA; the high byte is what loads. */
static int high_byte(int y, int x, int c) { return 200 - y * 40 - x * 7 + c; }
/* JPEGs: 8 x 8 smooth ramps (JPEG keeps them within a few levels). */
static int jpeg_gray(int y, int x) { return 40 + 10 * y + 5 * x; }
static int jpeg_rgb(int y, int x, int c) {
  return c == 0 ? 30 + 20 * y : c == 1 ? 200 - 15 * x : 90 + 4 * (x + y);
}

static void write_tree(void) {
  make_dir("tree");
  make_dir("tree/zebra");
  make_dir("tree/zebra/sub");
  make_dir("tree/apple");
  make_dir("tree/empty_class");
  write_bytes("tree/README.md", "not a class\n", 12);
  write_bytes("tree/zebra/notes.txt", "ignored\n", 8);
  write_bytes("tree/zebra/.hidden.png", "garbage", 7); /* skipped */

  unsigned char rgb[4 * 4 * 3], gray[4 * 4], indexed[4 * 4];
  unsigned char rgba16[4 * 4 * 8], jgray[8 * 8], jrgb[8 * 8 * 3];
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) {
      for (int c = 0; c < 3; c++) rgb[(y * 4 + x) * 3 + c] = rgb_value(y, x, c);
      gray[y * 4 + x] = (unsigned char)gray_value(y, x);
      indexed[y * 4 + x] = (unsigned char)((y + x) % 4);
      for (int c = 0; c < 4; c++) {
        unsigned char *p = rgba16 + (y * 4 + x) * 8 + c * 2;
        p[0] = (unsigned char)(c < 3 ? high_byte(y, x, c) : 255 - 60 * x);
        p[1] = (unsigned char)(y * 31 + x * 11 + c); /* low byte: dropped */
      }
    }
  for (int y = 0; y < 8; y++)
    for (int x = 0; x < 8; x++) {
      jgray[y * 8 + x] = (unsigned char)jpeg_gray(y, x);
      for (int c = 0; c < 3; c++)
        jrgb[(y * 8 + x) * 3 + c] = (unsigned char)jpeg_rgb(y, x, c);
    }
  png_spec b = {4, 4, PNG_COLOR_TYPE_RGB, 8, 1, rgb, 12, NULL, 0, NULL, 0};
  png_spec a = {4, 4, PNG_COLOR_TYPE_GRAY, 8, 0, gray, 4, NULL, 0, NULL, 0};
  static const png_byte trans[1] = {0}; /* entry 0 transparent */
  png_spec yp = {4,     4, PNG_COLOR_TYPE_PALETTE, 8, 0, indexed, 4, palette, 4,
                 trans, 1};
  png_spec z = {4,    4, PNG_COLOR_TYPE_RGB_ALPHA, 16, 0, rgba16, 32, NULL, 0,
                NULL, 0};
  write_png("tree/zebra/b.png", &b);
  write_png("tree/zebra/a.PNG", &a);
  write_jpeg("tree/zebra/sub/c.jpg", 8, 8, 3, jrgb);
  write_jpeg("tree/apple/x.jpeg", 8, 8, 1, jgray);
  write_png("tree/apple/y.png", &yp);
  write_png("tree/apple/z.png", &z);
}

/* ---- loading the tree ---------------------------------------------------- */

/* Value (y, x, c) of sample `sample` in a data set of 4 x 4 images. */
static float pixel(const mxu_dataset *set, int sample, int y, int x, int c) {
  int channels = (int)mxu_dataset_shape(set).dims[2];
  return mxu_dataset_x(set)[((sample * 4 + y) * 4 + x) * channels + c];
}

/* The mean of a 2 x 2 block, in the order tf.image.resize's bilinear
 * takes it at scale 2 (every lerp weight 0.5). */
static float block_mean(float tl, float tr, float bl, float br) {
  float top = tl + (tr - tl) * 0.5f, bottom = bl + (br - bl) * 0.5f;
  return top + (bottom - top) * 0.5f;
}

static void check_rgb_tree(const mxu_dataset *set) {
  /* 0 x.jpeg, 1 y.png, 2 z.png (apple); 3 a.PNG, 4 b.png, 5 sub/c.jpg
   * (zebra); empty_class has none. */
  float worst = 0;
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) {
      const png_color *entry = &palette[(y + x) % 4];
      int colour[3] = {entry->red, entry->green, entry->blue};
      for (int c = 0; c < 3; c++) {
        CHECK(pixel(set, 1, y, x, c) == colour[c]);
        CHECK(pixel(set, 2, y, x, c) == high_byte(y, x, c));
        CHECK(pixel(set, 3, y, x, c) == gray_value(y, x));
        CHECK(pixel(set, 4, y, x, c) == rgb_value(y, x, c));
        float gray = block_mean(
            jpeg_gray(2 * y, 2 * x), jpeg_gray(2 * y, 2 * x + 1),
            jpeg_gray(2 * y + 1, 2 * x), jpeg_gray(2 * y + 1, 2 * x + 1));
        float rgb = block_mean(
            jpeg_rgb(2 * y, 2 * x, c), jpeg_rgb(2 * y, 2 * x + 1, c),
            jpeg_rgb(2 * y + 1, 2 * x, c), jpeg_rgb(2 * y + 1, 2 * x + 1, c));
        CHECK_NEAR(pixel(set, 0, y, x, c), gray, 4);
        CHECK_NEAR(pixel(set, 5, y, x, c), rgb, 4);
        float off = fabsf(pixel(set, 5, y, x, c) - rgb);
        if (off > worst) worst = off;
      }
    }
  printf("test_image_folder: worst JPEG error after a 2x downscale: %.2f\n",
         worst);
}

static void test_tree_rgb(void) {
  mxu_dataset *set = NULL;
  CHECK_OK(mxu_load_image_folder(at_root("tree"), 4, 4, 3, &set));
  if (!set) return;
  CHECK(mxu_dataset_count(set) == 6);
  CHECK(mxu_dataset_num_classes(set) == 3);
  mxu_shape shape = mxu_dataset_shape(set);
  CHECK(shape.rank == 3 && shape.dims[0] == 4 && shape.dims[1] == 4 &&
        shape.dims[2] == 3);
  const int32_t want_labels[6] = {0, 0, 0, 2, 2, 2};
  for (int i = 0; i < 6; i++)
    CHECK(mxu_dataset_labels(set)[i] == want_labels[i]);
  CHECK(has(mxu_dataset_class_name(set, 0), "apple"));
  CHECK(strcmp(mxu_dataset_class_name(set, 1), "empty_class") == 0);
  CHECK(strcmp(mxu_dataset_class_name(set, 2), "zebra") == 0);
  check_rgb_tree(set);
  mxu_dataset_free(set);
}

static void test_tree_gray(void) {
  mxu_dataset *set = NULL;
  /* A trailing slash changes nothing. */
  CHECK_OK(mxu_load_image_folder(at_root("tree/"), 4, 4, 1, &set));
  if (!set) return;
  CHECK(mxu_dataset_count(set) == 6 && mxu_dataset_shape(set).dims[2] == 1);
  CHECK(strcmp(mxu_dataset_class_name(set, 0), "apple") == 0);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) {
      const png_color *entry = &palette[(y + x) % 4];
      CHECK(pixel(set, 1, y, x, 0) ==
            luma(entry->red, entry->green, entry->blue));
      CHECK(pixel(set, 2, y, x, 0) ==
            luma(high_byte(y, x, 0), high_byte(y, x, 1), high_byte(y, x, 2)));
      CHECK(pixel(set, 3, y, x, 0) == gray_value(y, x));
      CHECK(pixel(set, 4, y, x, 0) ==
            luma(rgb_value(y, x, 0), rgb_value(y, x, 1), rgb_value(y, x, 2)));
    }
  /* Two of the values worked out by hand: 0.299 r + 0.587 g + 0.114 b. */
  CHECK(luma(50, 205, 7) == 136);   /* 14.95 + 120.335 + 0.798 = 136.08 */
  CHECK(luma(100, 155, 14) == 122); /* 29.9 + 90.985 + 1.596 = 122.48 */
  mxu_dataset_free(set);
}

/* ---- single files and resizing ------------------------------------------- */

static void test_resize(void) {
  /* Identity: 4 x 4 stays exact. */
  float same[4 * 4 * 3];
  CHECK_OK(mxu_load_image_file(at_root("tree/zebra/b.png"), 4, 4, 3, same));
  for (int i = 0; i < 4 * 4 * 3; i++)
    CHECK(same[i] == rgb_value(i / 12, i / 3 % 4, i % 3));
  /* 2x down: each value is its 2 x 2 block's mean. */
  float half[2 * 2 * 3];
  CHECK_OK(mxu_load_image_file(at_root("tree/zebra/b.png"), 2, 2, 3, half));
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 2; x++)
      for (int c = 0; c < 3; c++) {
        float want = block_mean(
            rgb_value(2 * y, 2 * x, c), rgb_value(2 * y, 2 * x + 1, c),
            rgb_value(2 * y + 1, 2 * x, c), rgb_value(2 * y + 1, 2 * x + 1, c));
        CHECK(half[(y * 2 + x) * 3 + c] == want);
      }
  /* 2x up along a row of 0 100 40 200: source positions -0.25, 0.25, 0.75,
   * 1.25, ..., 3.25, the ends clamped. */
  const unsigned char row[4] = {0, 100, 40, 200};
  png_spec spec = {4, 1, PNG_COLOR_TYPE_GRAY, 8, 0, row, 4, NULL, 0, NULL, 0};
  write_png("row.png", &spec);
  float wide[8];
  const float want[8] = {0, 25, 75, 85, 55, 80, 160, 200};
  CHECK_OK(mxu_load_image_file(at_root("row.png"), 1, 8, 1, wide));
  for (int i = 0; i < 8; i++)
    CHECK_MSG(wide[i] == want[i], "x %d: %g, want %g", i, (double)wide[i],
              (double)want[i]);
  /* A PNG named .jpg loads: the first bytes decide. */
  write_png("row_named.jpg", &spec);
  CHECK_OK(mxu_load_image_file(at_root("row_named.jpg"), 1, 8, 1, wide));
  CHECK(wide[1] == 25);
}

/* ---- errors -------------------------------------------------------------- */

/* The bytes of a file under root. */
static unsigned char *read_all(const char *relative, long *size) {
  FILE *f = fopen(at_root(relative), "rb");
  unsigned char *bytes = NULL;
  if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) > 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (bytes = malloc((size_t)*size)) &&
      fread(bytes, 1, (size_t)*size, f) != (size_t)*size) {
    free(bytes);
    bytes = NULL;
  }
  if (f) fclose(f);
  return bytes;
}

static void put_be(unsigned char *p, unsigned value, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (unsigned char)(value >> (8 * (bytes - 1 - i)));
}

/* Decompression bombs (a small file claiming 65500 x 65500 pixels) are
 * refused before any pixel memory, naming the limit; a JPEG whose scan
 * data is corrupt is refused, not decoded into made-up pixels. */
static void check_bombs_and_corruption(void) {
  float out[16 * 3];
  unsigned char ramp[8 * 8 * 3];
  for (int i = 0; i < (int)sizeof ramp; i++) ramp[i] = (unsigned char)(i * 3);
  write_jpeg("bomb.jpg", 8, 8, 3, ramp);
  long size = 0;
  unsigned char *jpeg = read_all("bomb.jpg", &size);
  CHECK(jpeg != NULL);
  for (long i = 0; jpeg && i + 9 < size; i++)
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) { /* SOF0: height, width */
      put_be(jpeg + i + 5, 65500, 2);
      put_be(jpeg + i + 7, 65500, 2);
      break;
    }
  if (jpeg) write_bytes("bomb.jpg", jpeg, (size_t)size);
  EXPECT_FAIL(mxu_load_image_file(at_root("bomb.jpg"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "bomb.jpg");
  check_message("bomb.jpg", "MXU_MAX_IMAGE_PIXELS");
  free(jpeg);
  unsigned char rgb[4 * 4 * 3] = {0};
  png_spec spec = {4, 4, PNG_COLOR_TYPE_RGB, 8, 0, rgb, 12, NULL, 0, NULL, 0};
  write_png("bomb.png", &spec);
  unsigned char *png = read_all("bomb.png", &size);
  if (png && size > 33) { /* IHDR: width, height at 16, CRC at 29 */
    put_be(png + 16, 20000, 4);
    put_be(png + 20, 20000, 4);
    put_be(png + 29, (unsigned)crc32(0, png + 12, 17), 4);
    write_bytes("bomb.png", png, (size_t)size);
  }
  free(png);
  EXPECT_FAIL(mxu_load_image_file(at_root("bomb.png"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "bomb.png");
  check_message("bomb.png", "MXU_MAX_IMAGE_PIXELS");
  /* Scan data overwritten past the headers: libjpeg warns and guesses. */
  unsigned char big[64 * 64 * 3];
  for (int i = 0; i < (int)sizeof big; i++) big[i] = (unsigned char)(i * 7);
  write_jpeg("corrupt.jpg", 64, 64, 3, big);
  jpeg = read_all("corrupt.jpg", &size);
  for (long i = size / 2; jpeg && i < size / 2 + 40 && i < size - 2; i++)
    jpeg[i] = (unsigned char)(0x5a ^ i);
  if (jpeg) write_bytes("corrupt.jpg", jpeg, (size_t)size);
  free(jpeg);
  EXPECT_FAIL(mxu_load_image_file(at_root("corrupt.jpg"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "corrupt.jpg: corrupt or truncated JPEG");
}

static void test_file_errors(void) {
  float out[16 * 3];
  unsigned char rgb[4 * 4 * 3] = {0};
  png_spec spec = {4, 4, PNG_COLOR_TYPE_RGB, 8, 0, rgb, 12, NULL, 0, NULL, 0};
  write_png("cut.png", &spec);
  cut_file("cut.png", 40);
  EXPECT_FAIL(mxu_load_image_file(at_root("cut.png"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "cut.png");
  check_message("cut.png", "PNG");
  write_bytes("garbage.jpg", "this is no image at all", 23);
  EXPECT_FAIL(mxu_load_image_file(at_root("garbage.jpg"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "garbage.jpg: not a PNG or JPEG");
  const unsigned char bad_jpeg[12] = {0xff, 0xd8, 0xff, 0xe0, 1, 2,
                                      3,    4,    5,    6,    7, 8};
  write_bytes("bad.jpg", bad_jpeg, sizeof bad_jpeg);
  EXPECT_FAIL(mxu_load_image_file(at_root("bad.jpg"), 4, 4, 3, out),
              MXU_ERR_FORMAT, "bad.jpg: corrupt or truncated JPEG");
  /* A JPEG cut in its scan data: libjpeg would pad it, we refuse it. */
  unsigned char ramp[8 * 8];
  for (int i = 0; i < 64; i++) ramp[i] = (unsigned char)(i * 3);
  write_jpeg("cut.jpg", 8, 8, 1, ramp);
  struct stat info;
  CHECK(stat(at_root("cut.jpg"), &info) == 0);
  cut_file("cut.jpg", (long)info.st_size - 20);
  EXPECT_FAIL(mxu_load_image_file(at_root("cut.jpg"), 4, 4, 1, out),
              MXU_ERR_FORMAT, "cut.jpg");
  check_bombs_and_corruption();
  write_bytes("empty.png", "", 0);
  EXPECT_FAIL(mxu_load_image_file(at_root("empty.png"), 4, 4, 1, out),
              MXU_ERR_FORMAT, "empty.png: empty file");
  EXPECT_FAIL(mxu_load_image_file(at_root("missing.png"), 4, 4, 1, out),
              MXU_ERR_IO, "missing.png");
  EXPECT_FAIL(mxu_load_image_file(at_root("tree/zebra/b.png"), 4, 4, 2, out),
              MXU_ERR_ARG, "channels");
  EXPECT_FAIL(mxu_load_image_file(at_root("tree/zebra/b.png"), 0, 4, 3, out),
              MXU_ERR_ARG, "size");
}

static void test_folder_errors(void) {
  mxu_dataset *set = NULL;
  make_dir("empty");
  EXPECT_FAIL(mxu_load_image_folder(at_root("empty"), 4, 4, 3, &set),
              MXU_ERR_FORMAT, "empty folder");
  CHECK(set == NULL);
  make_dir("loose");
  write_bytes("loose/one.png", "x", 1);
  EXPECT_FAIL(mxu_load_image_folder(at_root("loose"), 4, 4, 3, &set),
              MXU_ERR_FORMAT, "no class subfolders");
  make_dir("hollow");
  make_dir("hollow/cats");
  make_dir("hollow/dogs");
  write_bytes("hollow/dogs/readme.txt", "x", 1);
  EXPECT_FAIL(mxu_load_image_folder(at_root("hollow"), 4, 4, 3, &set),
              MXU_ERR_FORMAT, "none of its 2 class subfolders");
  EXPECT_FAIL(mxu_load_image_folder(at_root("nowhere"), 4, 4, 3, &set),
              MXU_ERR_IO, "nowhere");

  /* Several broken files: the first in load order is named, however many
   * threads decode. */
  make_dir("broken");
  make_dir("broken/a");
  make_dir("broken/b");
  unsigned char rgb[4 * 4 * 3] = {0};
  png_spec spec = {4, 4, PNG_COLOR_TYPE_RGB, 8, 0, rgb, 12, NULL, 0, NULL, 0};
  for (int i = 0; i < 6; i++) {
    char name[64];
    snprintf(name, sizeof name, "broken/a/good%d.png", i);
    write_png(name, &spec);
  }
  write_png("broken/a/truncated.png", &spec);
  cut_file("broken/a/truncated.png", 50);
  write_bytes("broken/b/garbage.jpg", "garbage!", 8);
  int threads = omp_get_max_threads();
  for (int t = 1; t <= 2; t++) {
    omp_set_num_threads(t);
    EXPECT_FAIL(mxu_load_image_folder(at_root("broken"), 4, 4, 3, &set),
                MXU_ERR_FORMAT, "broken/a/truncated.png: corrupt or truncated");
    CHECK(set == NULL);
  }
  omp_set_num_threads(threads);
  EXPECT_FAIL(mxu_load_image_folder(at_root("tree"), 4, 4, 4, &set),
              MXU_ERR_ARG, "channels");
}

/* ---- through the mxu command ------------------------------------------ */

/* 8x8 gray images of two classes, dark and bright, with noise. */
static void write_split(const char *split, int per_class, uint32_t seed) {
  static const char *const classes[2] = {"dark", "bright"};
  char path[256];
  snprintf(path, sizeof path, "e2e/%s", split);
  make_dir(path);
  for (int c = 0; c < 2; c++) {
    snprintf(path, sizeof path, "e2e/%s/%s", split, classes[c]);
    make_dir(path);
    for (int i = 0; i < per_class; i++) {
      unsigned char pixels[64];
      for (int k = 0; k < 64; k++) {
        seed = seed * 1664525u + 1013904223u;
        pixels[k] = (unsigned char)((c ? 170 : 20) + (seed >> 26));
      }
      png_spec spec = {8,    8, PNG_COLOR_TYPE_GRAY, 8, 0, pixels, 8, NULL, 0,
                       NULL, 0};
      snprintf(path, sizeof path, "e2e/%s/%s/%02d.png", split, classes[c], i);
      write_png(path, &spec);
    }
  }
}

/* mxu train on an image folder (train/ and test/ splits, class names from
 * the subfolders in sorted order: bright is 0, dark 1), then mxu predict
 * --image on one of its files. */
static void test_command(void) {
  make_dir("e2e");
  write_split("train", 24, 1);
  write_split("test", 8, 2);
  mxu_model *model = mxu_sequential("images");
  int64_t dims[3] = {8, 8, 1};
  CHECK_OK(mxu_add_input(model, "input", mxu_shape_make(3, dims)));
  CHECK_OK(mxu_add_flatten(model, NULL));
  mxu_dense_config dense = mxu_dense_defaults(2);
  dense.activation = MXU_SOFTMAX;
  CHECK_OK(mxu_add_dense(model, &dense));
  CHECK_OK(mxu_model_save_json(model, at_root("e2e.json"), 0));
  mxu_model_free(model);
  char json[1024], data[1024], weights[1024], image[1024];
  snprintf(json, sizeof json, "%s", at_root("e2e.json"));
  snprintf(data, sizeof data, "%s", at_root("e2e"));
  snprintf(weights, sizeof weights, "%s", at_root("e2e.h5"));
  snprintf(image, sizeof image, "%s", at_root("e2e/test/bright/03.png"));
  char *train[] = {MXU_BIN,       "train",
                   json,          "--data",
                   data,          "--epochs",
                   "20",          "--batch-size",
                   "8",           "--rescale",
                   "0.003921568", "--learning-rate",
                   "0.05",        "--save-weights",
                   weights,       "--verbose",
                   "0",           NULL};
  char *out, *err;
  int code = check_run(train, &out, &err);
  CHECK_MSG(code == 0, "mxu train: exit %d: %s", code, err);
  CHECK_MSG(has(out, "test accuracy 1.0000"), "%s", out);
  free(out);
  free(err);
  char *predict[] = {MXU_BIN, "predict",   json,          "--weights",
                     weights, "--data",    data,          "--image",
                     image,   "--rescale", "0.003921568", "--top",
                     "1",     NULL};
  code = check_run(predict, &out, &err);
  CHECK_MSG(code == 0, "mxu predict: exit %d: %s", code, err);
  CHECK_MSG(has(out, "image ") && has(out, "1. bright (0)"), "%s", out);
  free(out);
  free(err);
}

/* A test split whose class folders differ from train's: labelled by
 * train's classes (a missing class is fine), refused when it has a class
 * train has not (it was silently labelled by its own sorted order). */
static void test_split_classes(void) {
  int64_t dims[3] = {8, 8, 1};
  mxu_shape input = mxu_shape_make(3, dims);
  make_dir("fewer");
  make_dir("fewer/test");
  CHECK(symlink(at_root("e2e/train"), at_root("fewer/train")) == 0);
  CHECK(symlink(at_root("e2e/test/dark"), at_root("fewer/test/dark")) == 0);
  mxu_dataset *set = NULL;
  CHECK_OK(mxu_load_dataset_for(at_root("fewer"), MXU_TEST, input, &set));
  if (set) {
    CHECK(mxu_dataset_num_classes(set) == 2 && mxu_dataset_count(set) == 8);
    CHECK(strcmp(mxu_dataset_class_name(set, 1), "dark") == 0);
    for (int64_t i = 0; i < mxu_dataset_count(set); i++)
      CHECK(mxu_dataset_labels(set)[i] == 1); /* dark, as in train */
  }
  mxu_dataset_free(set);
  make_dir("renamed");
  make_dir("renamed/test");
  CHECK(symlink(at_root("e2e/train"), at_root("renamed/train")) == 0);
  CHECK(symlink(at_root("e2e/test/dark"), at_root("renamed/test/dark")) == 0);
  CHECK(symlink(at_root("e2e/test/bright"), at_root("renamed/test/light")) ==
        0);
  EXPECT_FAIL(mxu_load_dataset_for(at_root("renamed"), MXU_TEST, input, &set),
              MXU_ERR_FORMAT, "'light'");
  CHECK(set == NULL);
}

int main(void) {
  CHECK(check_temp_make("image_folder"));
  snprintf(root, sizeof root, "%s", check_temp_dir);
  write_tree();
  test_tree_rgb();
  test_tree_gray();
  test_resize();
  test_file_errors();
  test_folder_errors();
  test_command();
  test_split_classes();
  check_remove_tree(check_temp_dir);
  return check_report("test_image_folder");
}
