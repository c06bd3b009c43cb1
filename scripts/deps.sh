#!/bin/sh
# deps.sh — installs the Debian packages mxu builds and tests with, only
# those missing, with one apt-get update. Run by `make demo` and `make test`.
set -e
# libhdf5-dev: Keras .h5 weights files; python3-h5py: tests only, an
# independent writer of those files (run with /usr/bin/python3), and
# python3-numpy: tests only, NumPy reading the .npy files mxu writes.
# libopenmpi-dev/openmpi-bin: replicas across processes (mpirun);
# libpng-dev/libjpeg-dev: image-folder data sets; libcairo2-dev: mxu plot;
# libzip-dev: NumPy .npz data; libcsv-dev: CSV tables.
packages="build-essential cmake pkg-config libdnnl-dev libcjson-dev zlib1g-dev
  libhdf5-dev libopenmpi-dev openmpi-bin libpng-dev libjpeg-dev libcairo2-dev
  libzip-dev libcsv-dev
  dataset-fashion-mnist python3-h5py python3-numpy"
# `deps.sh fuzz` (make fuzz): clang with libFuzzer and the sanitizer
# runtimes, and clang's OpenMP.
[ "${1:-}" = fuzz ] && packages="$packages clang libclang-rt-dev libomp-dev"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends $missing
