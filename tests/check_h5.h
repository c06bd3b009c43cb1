/* check_h5.h — the golden tests' reads of the HDF5 files Keras' scripts
 * wrote (tests/keras/make_*.py): a dataset whole, or a failed check. */
#ifndef MXU_CHECK_H5_H
#define MXU_CHECK_H5_H

#include "check.h"

#include <hdf5.h>

static inline void check_h5_read(hid_t file, const char *name, hid_t type,
                                 void *out) {
  hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  CHECK_MSG(set >= 0, "the golden file has no %s", name);
  if (set < 0) return;
  CHECK(H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0);
  H5Dclose(set);
}

#endif
