/* image_folder.c — image-folder data sets as Keras'
 * image_dataset_from_directory reads them: class subfolders in sorted
 * order, PNG (libpng) and JPEG (libjpeg) files decoded to 8-bit gray or
 * RGB, converted as PIL does, resized with tf.image.resize's bilinear.
 * libpng and libjpeg report errors by longjmp here, never by exit(). */
#include "data/image_folder.h"
#include "core/core.h"
#include "data/data.h"
#include "data/loader.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jpeglib.h>
/* jerror.h after jpeglib.h: it names the warning codes (JWRN_JPEG_EOF). */
#include <jerror.h>
#include <png.h>
#include <setjmp.h>

/* A decoded image: 8-bit gray (1 channel) or RGB (3), rows top first. */
typedef struct decoded {
  unsigned char *pixels;
  int h, w, channels;
} decoded;

/* What an image over the pixel limit is told (core.h's limit). */
#define TOO_LARGE "MXU_MAX_IMAGE_PIXELS (67108864 pixels, 8192 x 8192)"

/* ---- PNG ---------------------------------------------------------------- */

/* Everything the libpng calls touch lives here, in the caller's frame, so
 * nothing the longjmp skips over is left indeterminate. */
typedef struct png_job {
  const unsigned char *data;
  size_t size, pos;
  png_structp png;
  png_infop info;
  png_bytep *rows;
  decoded *image;
  int out_of_memory;
  char message[256];
} png_job;

static void png_read_memory(png_structp png, png_bytep out, size_t n) {
  png_job *job = png_get_io_ptr(png);
  if (n > job->size - job->pos) png_error(png, "file ends early");
  memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

static void png_on_error(png_structp png, png_const_charp message) {
  png_job *job = png_get_error_ptr(png);
  snprintf(job->message, sizeof job->message, "%s", message);
  png_longjmp(png, 1);
}

/* libpng warns about harmless things (bad ancillary chunks); the library
 * never prints, so they are dropped. */
static void png_on_warning(png_structp png, png_const_charp message) {
  (void)png;
  (void)message;
}

/* Asks libpng for 8-bit gray or RGB whatever the file holds: palettes
 * expanded, low bit depths widened, 16 bits cut to the high byte (as PIL),
 * alpha and tRNS transparency dropped (as PIL's convert('RGB')). */
static void png_want_8bit(png_structp png, png_infop info) {
  png_byte color = png_get_color_type(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

/* The setjmp lives here, apart from the function that cleans up, so the
 * cleanup never reads a local the longjmp may have clobbered. */
__attribute__((noinline)) static int png_run(png_job *job) {
  if (setjmp(png_jmpbuf(job->png))) return 1;
  png_set_read_fn(job->png, job, png_read_memory);
  png_read_info(job->png, job->info);
  /* Checked before any pixel memory: a small file may claim a huge image
   * (a decompression bomb). */
  if ((int64_t)png_get_image_width(job->png, job->info) *
          png_get_image_height(job->png, job->info) >
      MXU_MAX_IMAGE_PIXELS)
    png_error(job->png, "the image is larger than " TOO_LARGE);
  png_want_8bit(job->png, job->info);
  decoded *image = job->image;
  image->w = (int)png_get_image_width(job->png, job->info);
  image->h = (int)png_get_image_height(job->png, job->info);
  image->channels = png_get_channels(job->png, job->info);
  if (image->channels != 1 && image->channels != 3)
    png_error(job->png, "unexpected channel count after conversion");
  size_t row_bytes = png_get_rowbytes(job->png, job->info);
  image->pixels = malloc(row_bytes * (size_t)image->h);
  job->rows = malloc((size_t)image->h * sizeof *job->rows);
  if (!image->pixels || !job->rows) {
    job->out_of_memory = 1;
    return 1;
  }
  for (int y = 0; y < image->h; y++)
    job->rows[y] = image->pixels + (size_t)y * row_bytes;
  png_read_image(job->png, job->rows);
  /* Reading to IEND catches a file cut after its last pixel row. */
  png_read_end(job->png, NULL);
  return 0;
}

static mxu_status decode_png(const char *who, const char *path,
                             const unsigned char *data, size_t size,
                             decoded *image) {
  png_job job;
  memset(&job, 0, sizeof job);
  job.data = data;
  job.size = size;
  job.image = image;
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_on_error,
                                   png_on_warning);
  if (job.png) job.info = png_create_info_struct(job.png);
  int created = job.info != NULL; /* destroy below clears job.info */
  int failed = !created || png_run(&job);
  png_destroy_read_struct(&job.png, &job.info, NULL);
  free(job.rows);
  if (!failed) return MXU_OK;
  free(image->pixels);
  image->pixels = NULL;
  if (!created || job.out_of_memory)
    return mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory decoding the PNG",
                    who, path);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: %s: corrupt or truncated PNG (libpng: %s); re-save or "
                  "re-download it, or move it out of the folder",
                  who, path, job.message);
}

/* ---- JPEG --------------------------------------------------------------- */

typedef struct jpeg_job {
  struct jpeg_error_mgr errors; /* first: libjpeg hands back its address */
  jmp_buf jump;
  struct jpeg_decompress_struct info;
  int created, out_of_memory, cmyk;
  decoded *image;
  char message[JMSG_LENGTH_MAX];
} jpeg_job;

static void jpeg_on_error(j_common_ptr common) {
  jpeg_job *job = (jpeg_job *)(void *)common->err;
  common->err->format_message(common, job->message);
  longjmp(job->jump, 1);
}

/* libjpeg's warnings say the data is corrupt (bad Huffman codes, a file
 * that ends early) and that it made pixels up (grey padding, guessed
 * blocks); a training image made up so is refused, as PIL and TF refuse
 * a truncated one. Trace messages (level > 0) are not warnings. */
static void jpeg_on_message(j_common_ptr common, int level) {
  if (level < 0) jpeg_on_error(common);
}

static void jpeg_quiet(j_common_ptr common) { (void)common; }

__attribute__((noinline)) static int
jpeg_run(jpeg_job *job, const unsigned char *data, size_t size) {
  if (setjmp(job->jump)) return 1;
  struct jpeg_decompress_struct *info = &job->info;
  jpeg_create_decompress(info);
  job->created = 1;
  jpeg_mem_src(info, data, (unsigned long)size);
  jpeg_read_header(info, TRUE);
  if ((int64_t)info->image_width * info->image_height > MXU_MAX_IMAGE_PIXELS) {
    snprintf(job->message, sizeof job->message,
             "the image is larger than " TOO_LARGE);
    return 1;
  }
  if (info->jpeg_color_space == JCS_CMYK ||
      info->jpeg_color_space == JCS_YCCK) {
    job->cmyk = 1;
    return 1;
  }
  /* Grey files stay grey (PIL's mode L); colour ones become RGB with
   * libjpeg's accurate integer DCT, PIL's default. */
  info->out_color_space =
      info->jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  info->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(info);
  decoded *image = job->image;
  image->w = (int)info->output_width;
  image->h = (int)info->output_height;
  image->channels = info->output_components;
  size_t row_bytes = (size_t)image->w * (size_t)image->channels;
  image->pixels = malloc(row_bytes * (size_t)image->h);
  if (!image->pixels) {
    job->out_of_memory = 1;
    return 1;
  }
  while (info->output_scanline < info->output_height) {
    JSAMPROW row = image->pixels + (size_t)info->output_scanline * row_bytes;
    jpeg_read_scanlines(info, &row, 1);
  }
  jpeg_finish_decompress(info);
  return 0;
}

static mxu_status decode_jpeg(const char *who, const char *path,
                              const unsigned char *data, size_t size,
                              decoded *image) {
  jpeg_job job;
  memset(&job, 0, sizeof job);
  job.image = image;
  job.info.err = jpeg_std_error(&job.errors);
  job.errors.error_exit = jpeg_on_error;
  job.errors.emit_message = jpeg_on_message;
  job.errors.output_message = jpeg_quiet;
  int failed = jpeg_run(&job, data, size);
  if (job.created) jpeg_destroy_decompress(&job.info);
  if (!failed) return MXU_OK;
  free(image->pixels);
  image->pixels = NULL;
  if (job.out_of_memory)
    return mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory decoding the JPEG",
                    who, path);
  if (job.cmyk)
    return mxu_fail(MXU_ERR_UNSUPPORTED,
                    "%s: %s: CMYK JPEG; convert it to RGB (e.g. `convert "
                    "in.jpg -colorspace sRGB out.jpg`)",
                    who, path);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: %s: corrupt or truncated JPEG (libjpeg: %s); re-save "
                  "or re-download it, or move it out of the folder",
                  who, path, job.message);
}

/* ---- one image ---------------------------------------------------------- */

/* The format comes from the first bytes, as TF's decode_image and PIL
 * tell it: a PNG named .jpg still loads. */
static mxu_status decode_image(const char *who, const char *path,
                               const unsigned char *data, size_t size,
                               decoded *image) {
  static const unsigned char png_magic[8] = {0x89, 'P',  'N',  'G',
                                             '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && memcmp(data, png_magic, 8) == 0)
    return decode_png(who, path, data, size, image);
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
    return decode_jpeg(who, path, data, size, image);
  if (size == 0)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: %s: empty file (expected a PNG or JPEG image); "
                    "re-download it or move it out of the folder",
                    who, path);
  unsigned char head[4] = {0, 0, 0, 0};
  memcpy(head, data, size < 4 ? size : 4);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: %s: not a PNG or JPEG image (first bytes %02x %02x "
                  "%02x %02x); convert it to PNG or JPEG, or move it out of "
                  "the folder",
                  who, path, head[0], head[1], head[2], head[3]);
}

/* PIL's convert('L'): ITU-R 601-2 luma in 16-bit fixed point, rounded. */
static unsigned char luma(const unsigned char *rgb) {
  return (unsigned char)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u +
                          0x8000u) >>
                         16);
}

/* Converts to the wanted channel count in place of the decoded pixels:
 * grey to RGB copies the value, RGB to grey takes the luma. */
static mxu_status convert_channels(const char *who, const char *path,
                                   decoded *image, int channels) {
  if (image->channels == channels) return MXU_OK;
  size_t count = (size_t)image->h * (size_t)image->w;
  unsigned char *converted = malloc(count * (size_t)channels);
  if (!converted)
    return mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory converting pixels",
                    who, path);
  for (size_t i = 0; i < count; i++) {
    const unsigned char *p = image->pixels + i * (size_t)image->channels;
    if (channels == 1)
      converted[i] = luma(p);
    else
      converted[3 * i] = converted[3 * i + 1] = converted[3 * i + 2] = p[0];
  }
  free(image->pixels);
  image->pixels = converted;
  image->channels = channels;
  return MXU_OK;
}

/* tf.image.resize's bilinear (half-pixel centres, no antialias), in float
 * as TF computes it: source position (i + 0.5) * in/out - 0.5, the lower
 * tap clamped at 0, the upper at the last pixel. */
typedef struct resize_tap {
  size_t lower, upper;
  float lerp;
} resize_tap;

static void resize_taps(int in_size, int out_size, resize_tap *taps) {
  float scale = (float)in_size / (float)out_size;
  for (int i = 0; i < out_size; i++) {
    float position = ((float)i + 0.5f) * scale - 0.5f;
    float below = floorf(position);
    float above = ceilf(position);
    taps[i].lower = below < 0 ? 0 : (size_t)below;
    taps[i].upper = above > in_size - 1 ? (size_t)(in_size - 1) : (size_t)above;
    taps[i].lerp = position - below;
  }
}

static void resize_rows(const decoded *image, const resize_tap *rows,
                        const resize_tap *cols, float *out, int h, int w) {
  size_t ch = (size_t)image->channels, stride = (size_t)image->w * ch;
  for (int y = 0; y < h; y++) {
    const unsigned char *top = image->pixels + rows[y].lower * stride;
    const unsigned char *bottom = image->pixels + rows[y].upper * stride;
    float y_lerp = rows[y].lerp;
    for (int x = 0; x < w; x++) {
      size_t left = cols[x].lower * ch, right = cols[x].upper * ch;
      float x_lerp = cols[x].lerp;
      float *dst = out + ((size_t)y * w + x) * ch;
      for (size_t c = 0; c < ch; c++) {
        float top_left = top[left + c], top_right = top[right + c];
        float bottom_left = bottom[left + c], bottom_right = bottom[right + c];
        float upper = top_left + (top_right - top_left) * x_lerp;
        float lower = bottom_left + (bottom_right - bottom_left) * x_lerp;
        dst[c] = upper + (lower - upper) * y_lerp;
      }
    }
  }
}

static mxu_status resize_bilinear(const char *who, const char *path,
                                  const decoded *image, float *out, int h,
                                  int w) {
  resize_tap *rows = malloc((size_t)h * sizeof *rows);
  resize_tap *cols = malloc((size_t)w * sizeof *cols);
  mxu_status status = MXU_OK;
  if (rows && cols) {
    resize_taps(image->h, h, rows);
    resize_taps(image->w, w, cols);
    resize_rows(image, rows, cols, out, h, w);
  } else {
    status =
        mxu_fail(MXU_ERR_NOMEM, "%s: %s: out of memory resizing", who, path);
  }
  free(rows);
  free(cols);
  return status;
}

static mxu_status load_image_into(const char *who, const char *path, int h,
                                  int w, int channels, float *out) {
  unsigned char *data = NULL;
  size_t size = 0;
  MXU_TRY(mxu_read_file(who, path, &data, &size));
  decoded image = {NULL, 0, 0, 0};
  mxu_status status = decode_image(who, path, data, size, &image);
  free(data);
  if (status == MXU_OK) status = convert_channels(who, path, &image, channels);
  if (status == MXU_OK) status = resize_bilinear(who, path, &image, out, h, w);
  free(image.pixels);
  return status;
}

static mxu_status check_target(const char *who, int h, int w, int channels) {
  if (h < 1 || w < 1 || (int64_t)h * w > INT32_MAX / 3)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: image size %d x %d (expected both >= 1 and h * w * 3 "
                    "below 2^31)",
                    who, h, w);
  if (channels != 1 && channels != 3)
    return mxu_fail(MXU_ERR_ARG,
                    "%s: %d channels (expected 1 for grayscale or 3 for RGB)",
                    who, channels);
  return MXU_OK;
}

mxu_status mxu_load_image_file(const char *path, int h, int w, int channels,
                               float *out) {
  if (!path || !out) return mxu_fail(MXU_ERR_ARG, "image: path or out is NULL");
  MXU_TRY(check_target("image", h, w, channels));
  return load_image_into("image", path, h, w, channels, out);
}

/* ---- the folder --------------------------------------------------------- */

typedef struct name_list {
  char **items;
  size_t count, capacity;
} name_list;

/* Takes ownership of text (malloc'd); 0 when memory runs out. */
static int list_take(name_list *list, char *text) {
  if (!text) return 0;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? 2 * list->capacity : 16;
    char **items = realloc(list->items, capacity * sizeof *items);
    if (!items) {
      free(text);
      return 0;
    }
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = text;
  return 1;
}

static void list_free(name_list *list) {
  for (size_t i = 0; i < list->count; i++) free(list->items[i]);
  free(list->items);
  memset(list, 0, sizeof *list);
}

/* Byte order, which for UTF-8 names is Python's sorted() order. */
static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_sort(name_list *list) {
  if (list->count > 1)
    qsort(list->items, list->count, sizeof *list->items, compare_names);
}

static char *join_path(const char *dir, const char *name) {
  size_t length = strlen(dir);
  int slash = length > 0 && dir[length - 1] == '/';
  size_t size = length + strlen(name) + 2;
  char *path = malloc(size);
  if (path) snprintf(path, size, slash ? "%s%s" : "%s/%s", dir, name);
  return path;
}

static int is_image_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                 strcasecmp(dot, ".jpeg") == 0);
}

/* What one directory holds: subfolders (full paths) and image files (full
 * paths); either list may be NULL. follow: whether a link to a folder
 * counts as a folder (yes for class folders, as Keras' isdir; no inside
 * them, as os.walk, which also rules out loops). */
typedef struct listing {
  name_list *dirs, *images;
  int follow;
  size_t other_files;
} listing;

static mxu_status note_entry(const char *who, const char *path,
                             const char *name, listing *out) {
  struct stat target, link;
  /* A dangling link or an entry we may not stat is not an image. */
  if (stat(path, &target) != 0) return MXU_OK;
  int is_dir = S_ISDIR(target.st_mode);
  if (is_dir && !out->follow && lstat(path, &link) == 0)
    is_dir = S_ISDIR(link.st_mode);
  name_list *list = NULL;
  if (is_dir) {
    list = out->dirs;
  } else if (S_ISREG(target.st_mode) && is_image_name(name)) {
    list = out->images;
  } else if (S_ISREG(target.st_mode)) {
    out->other_files++;
  }
  if (!list) return MXU_OK;
  if (!list_take(list, strdup(path)))
    return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory listing", who);
  return MXU_OK;
}

static mxu_status list_dir(const char *who, const char *dir, listing *out) {
  DIR *handle = opendir(dir);
  if (!handle)
    return mxu_fail(MXU_ERR_IO,
                    "%s: %s: cannot open folder: %s (expected a folder with "
                    "one subfolder of images per class)",
                    who, dir, strerror(errno));
  mxu_status status = MXU_OK;
  for (struct dirent *entry; status == MXU_OK && (entry = readdir(handle));) {
    /* Hidden names (., .., .git, macOS' ._x.jpg) are never images. */
    if (entry->d_name[0] == '.') continue;
    char *path = join_path(dir, entry->d_name);
    status = path ? note_entry(who, path, entry->d_name, out)
                  : mxu_fail(MXU_ERR_NOMEM, "%s: out of memory listing", who);
    free(path);
  }
  closedir(handle);
  return status;
}

/* A class's images in Keras' order: every folder under the class folder
 * sorted by path, each folder's files sorted by name. */
static mxu_status collect_class(const char *who, const char *class_dir,
                                name_list *paths) {
  name_list roots = {0};
  mxu_status status = list_take(&roots, strdup(class_dir))
                          ? MXU_OK
                          : mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
  /* roots grows while it is walked: each folder adds its subfolders. */
  for (size_t i = 0; status == MXU_OK && i < roots.count; i++) {
    listing found = {&roots, NULL, 0, 0};
    status = list_dir(who, roots.items[i], &found);
  }
  list_sort(&roots);
  for (size_t i = 0; status == MXU_OK && i < roots.count; i++) {
    name_list images = {0};
    listing found = {NULL, &images, 0, 0};
    status = list_dir(who, roots.items[i], &found);
    list_sort(&images);
    for (size_t k = 0; status == MXU_OK && k < images.count; k++) {
      if (!list_take(paths, images.items[k]))
        status = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
      images.items[k] = NULL;
    }
    list_free(&images);
  }
  list_free(&roots);
  return status;
}

/* The folder's classes and every image with its label. */
typedef struct folder_index {
  name_list classes; /* full paths of the class folders, sorted */
  name_list paths;
  int32_t *labels;
} folder_index;

static void index_free(folder_index *index) {
  list_free(&index->classes);
  list_free(&index->paths);
  free(index->labels);
}

static mxu_status find_classes(const char *who, const char *dir,
                               folder_index *index) {
  name_list images = {0};
  listing found = {&index->classes, &images, 1, 0};
  mxu_status status = list_dir(who, dir, &found);
  size_t loose = images.count + found.other_files;
  list_free(&images);
  if (status != MXU_OK) return status;
  list_sort(&index->classes);
  if (index->classes.count > INT32_MAX)
    return mxu_fail(MXU_ERR_FORMAT, "%s: %s: too many class subfolders", who,
                    dir);
  if (index->classes.count > 0) return MXU_OK;
  if (loose == 0)
    return mxu_fail(MXU_ERR_FORMAT,
                    "%s: %s: empty folder; expected one subfolder per class "
                    "holding its images (%s/<class>/<image>.jpg)",
                    who, dir, dir);
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: %s: no class subfolders, only %zu loose files; move "
                  "each class's images into a subfolder named after it "
                  "(%s/<class>/<image>.jpg)",
                  who, dir, loose, dir);
}

static mxu_status label_class(const char *who, folder_index *index,
                              size_t first, int32_t label) {
  int32_t *labels =
      realloc(index->labels, (index->paths.count + 1) * sizeof *labels);
  if (!labels) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
  index->labels = labels;
  for (size_t i = first; i < index->paths.count; i++) labels[i] = label;
  return MXU_OK;
}

static mxu_status index_folder(const char *who, const char *dir,
                               folder_index *index) {
  MXU_TRY(find_classes(who, dir, index));
  for (size_t k = 0; k < index->classes.count; k++) {
    size_t first = index->paths.count;
    MXU_TRY(collect_class(who, index->classes.items[k], &index->paths));
    MXU_TRY(label_class(who, index, first, (int32_t)k));
  }
  if (index->paths.count > 0) return MXU_OK;
  return mxu_fail(MXU_ERR_FORMAT,
                  "%s: %s: none of its %zu class subfolders (first: %s) holds "
                  "a .png, .jpg or .jpeg file; put the images in them",
                  who, dir, index->classes.count, index->classes.items[0]);
}

/* The lowest-numbered file that failed, so the error does not depend on
 * thread timing. */
typedef struct first_failure {
  int64_t index;
  mxu_status status;
  char message[1024];
} first_failure;

static void record_failure(first_failure *failure, int64_t i,
                           mxu_status status) {
#pragma omp critical(mxu_image_folder_failure)
  {
    if (i < failure->index) {
      /* mxu_errmsg is per thread: copy it while on the failing one. */
      snprintf(failure->message, sizeof failure->message, "%s", mxu_errmsg());
      failure->status = status;
#pragma omp atomic write
      failure->index = i;
    }
  }
}

/* Decodes every file into its slot of x, files spread over threads. */
static mxu_status decode_all(const char *who, const name_list *paths, int h,
                             int w, int channels, float *x) {
  size_t floats = (size_t)h * (size_t)w * (size_t)channels;
  int64_t count = (int64_t)paths->count;
  first_failure failure = {INT64_MAX, MXU_OK, ""};
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < count; i++) {
    int64_t failed_at;
#pragma omp atomic read
    failed_at = failure.index;
    if (i > failed_at) continue; /* a lower file already failed */
    mxu_status status = load_image_into(who, paths->items[i], h, w, channels,
                                        x + (size_t)i * floats);
    if (status != MXU_OK) record_failure(&failure, i, status);
  }
  if (failure.status == MXU_OK) return MXU_OK;
  return mxu_fail(failure.status, "%s", failure.message);
}

/* A class's name: its folder's, without the path in front. */
static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* Class names are the folder names. */
static mxu_status name_classes(const char *who, mxu_dataset *dataset,
                               const name_list *classes) {
  const char **names = malloc(classes->count * sizeof *names);
  if (!names) return mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
  for (size_t k = 0; k < classes->count; k++)
    names[k] = base_name(classes->items[k]);
  mxu_status status =
      mxu_dataset_set_class_names(dataset, names, (int)classes->count);
  free(names);
  return status;
}

static mxu_status build_dataset(const char *who, const folder_index *index,
                                int h, int w, int channels, mxu_dataset **out) {
  int64_t dims[3] = {h, w, channels};
  mxu_dataset *dataset = NULL;
  MXU_TRY(mxu_dataset_alloc(mxu_shape_make(3, dims),
                            (int64_t)index->paths.count,
                            (int)index->classes.count, &dataset));
  memcpy(dataset->labels, index->labels,
         index->paths.count * sizeof *index->labels);
  mxu_status status =
      decode_all(who, &index->paths, h, w, channels, dataset->x);
  if (status == MXU_OK) status = name_classes(who, dataset, &index->classes);
  if (status != MXU_OK) {
    mxu_dataset_free(dataset);
    return status;
  }
  *out = dataset;
  return MXU_OK;
}

/* Labels the index by the classes of `classes_dir` instead of its own
 * folders, so a test split names the class a label means in training; a
 * folder training has not got is an error naming every such folder. */
static mxu_status label_as(const char *who, const char *dir,
                           const char *classes_dir, folder_index *index) {
  folder_index train;
  memset(&train, 0, sizeof train);
  mxu_status status = find_classes(who, classes_dir, &train);
  char missing[1024] = "";
  size_t unknown = 0;
  int32_t *map = calloc(index->classes.count + 1, sizeof *map);
  if (status == MXU_OK && !map)
    status = mxu_fail(MXU_ERR_NOMEM, "%s: out of memory", who);
  for (size_t k = 0; status == MXU_OK && k < index->classes.count; k++) {
    const char *name = base_name(index->classes.items[k]);
    map[k] = -1;
    for (size_t t = 0; t < train.classes.count && map[k] < 0; t++)
      if (strcmp(name, base_name(train.classes.items[t])) == 0)
        map[k] = (int32_t)t;
    if (map[k] < 0 && unknown++ < 8)
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
               "%s'%s'", unknown > 1 ? ", " : "", name);
  }
  if (status == MXU_OK && unknown)
    status = mxu_fail(MXU_ERR_FORMAT,
                      "%s: %s has %zu class folder%s that %s has not (%s%s): "
                      "its images would be labelled as other classes; name "
                      "the class folders the same in both",
                      who, dir, unknown, unknown > 1 ? "s" : "", classes_dir,
                      missing, unknown > 8 ? ", ..." : "");
  for (size_t i = 0; status == MXU_OK && i < index->paths.count; i++)
    index->labels[i] = map[index->labels[i]];
  if (status == MXU_OK) {
    name_list own = index->classes;
    index->classes = train.classes;
    train.classes = own;
  }
  free(map);
  index_free(&train);
  return status;
}

mxu_status mxu_load_image_folder_as(const char *dir, const char *classes_dir,
                                    int h, int w, int channels,
                                    mxu_dataset **out) {
  static const char who[] = "image_folder";
  if (!out) return mxu_fail(MXU_ERR_ARG, "%s: out is NULL", who);
  *out = NULL;
  if (!dir) return mxu_fail(MXU_ERR_ARG, "%s: dir is NULL", who);
  MXU_TRY(check_target(who, h, w, channels));
  folder_index index;
  memset(&index, 0, sizeof index);
  mxu_status status = index_folder(who, dir, &index);
  if (status == MXU_OK && classes_dir)
    status = label_as(who, dir, classes_dir, &index);
  if (status == MXU_OK)
    status = build_dataset(who, &index, h, w, channels, out);
  index_free(&index);
  return status;
}

mxu_status mxu_load_image_folder(const char *dir, int h, int w, int channels,
                                 mxu_dataset **out) {
  return mxu_load_image_folder_as(dir, NULL, h, w, channels, out);
}
