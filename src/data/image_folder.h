/* image_folder.h — data sets from a folder of class subfolders of PNG and
 * JPEG files, as Keras' image_dataset_from_directory builds them, and the
 * single-image loader predict uses. Internal to libmxu. */
#ifndef MXU_DATA_IMAGE_FOLDER_H
#define MXU_DATA_IMAGE_FOLDER_H

#include "mxu.h"

/* PUBLIC: dir holds one subfolder per class; the class names are the
 * subfolder names sorted by byte value (label = position), and each
 * class's images are its .png, .jpg and .jpeg files (any case), its own
 * subfolders included, in Keras' order: folders by path, then files by
 * name. Names starting with '.' are skipped; other files are ignored.
 * Every image becomes an h x w x channels float sample (channels 1:
 * luminance as PIL's convert('L'); 3: RGB) with values 0..255, resized
 * with tf.image.resize's bilinear (half-pixel centres, no antialias).
 * PNG alpha and transparency are dropped, not composited (as PIL's
 * convert('RGB') and TF's decode_png(channels=3)); 16-bit PNGs keep their
 * high byte. A class folder may be empty; the whole set may not. */
mxu_status mxu_load_image_folder(const char *dir, int h, int w, int channels,
                                 mxu_dataset **out);

/* PUBLIC: one PNG or JPEG file (told apart by its first bytes, not its
 * name) decoded, converted and resized as above into out, h * w * channels
 * floats in HWC order. */
mxu_status mxu_load_image_file(const char *path, int h, int w, int channels,
                               float *out);

#endif
