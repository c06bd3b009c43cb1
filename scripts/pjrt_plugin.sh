#!/bin/sh
# pjrt_plugin.sh DIR VERSION — the PJRT C API header and XLA's CPU plugin,
# as PyPI's xla-cpu-pjrt wheel ships them, unpacked into DIR (a build
# tree; never the repository). CMake runs it once per build tree.
set -e
dir=$1
version=$2
mkdir -p "$dir/wheel"
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
  --only-binary=:all: "xla-cpu-pjrt==$version" -d "$dir/wheel"
python3 -m zipfile -e "$dir"/wheel/xla_cpu_pjrt-"$version"-*.whl "$dir"
rm -rf "$dir/wheel"
