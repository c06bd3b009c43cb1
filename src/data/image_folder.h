/* image_folder.h — data sets from a folder of class subfolders of PNG and
 * JPEG files, as Keras' image_dataset_from_directory builds them, and the
 * single-image loader predict uses. Internal to libmxu. */
#ifndef MXU_DATA_IMAGE_FOLDER_H
#define MXU_DATA_IMAGE_FOLDER_H

#include "mxu.h"

/* mxu_load_image_folder and mxu_load_image_file are public: mxu.h. */

/* mxu_load_image_folder labelling by the class folders of classes_dir
 * (NULL: dir's own): a test split labelled as its train split, refused
 * when it has a class folder the train split has not. */
mxu_status mxu_load_image_folder_as(const char *dir, const char *classes_dir,
                                    int h, int w, int channels,
                                    mxu_dataset **out);

#endif
