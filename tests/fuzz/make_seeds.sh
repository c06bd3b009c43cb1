#!/bin/sh
# make_seeds.sh — the small data files the fuzz corpus starts from, cut
# from the shared data sets and the repository's own images (run once from
# the repository's root; the output is committed). Model JSON, HDF5 and
# report seeds are the repository's own files (harnesses.c lists them).
set -eu
data=../shared/data
out=tests/fuzz/seeds
idx() { # images of 4 samples, their labels
  zcat "$data/mnist/t10k-images-idx3-ubyte.gz" | head -c $((16 + 4 * 784)) |
    python3 -c 'import sys; b = bytearray(sys.stdin.buffer.read()); b[4:8] = (4).to_bytes(4, "big"); sys.stdout.buffer.write(b)' >"$out/idx/images4"
  zcat "$data/mnist/t10k-labels-idx1-ubyte.gz" | head -c 12 |
    python3 -c 'import sys; b = bytearray(sys.stdin.buffer.read()); b[4:8] = (4).to_bytes(4, "big"); sys.stdout.buffer.write(b)' >"$out/idx/labels4"
  gzip -9 -n -c "$out/idx/images4" >"$out/idx/images4.gz"
}
cifar() { # 3 records, plain and gzip
  zcat "$data/cifar-10/test_batch.bin.gz" | head -c $((3 * 3073)) >"$out/cifar/batch3.bin"
  gzip -9 -n -c "$out/cifar/batch3.bin" >"$out/cifar/batch3.bin.gz"
}
images() { # small PNG and JPEG, colour and grey
  convert-im6.q16 docs/cifar_augmented_curves.png -resize 12x9! "$out/image/rgb.png"
  convert-im6.q16 docs/cifar_augmented_curves.png -resize 12x9! -colorspace Gray "$out/image/gray.png"
  convert-im6.q16 docs/cifar_augmented_curves.png -resize 12x9! -quality 80 "$out/image/rgb.jpg"
  convert-im6.q16 docs/cifar_augmented_curves.png -resize 9x12! -colorspace Gray "$out/image/gray.jpg"
  convert-im6.q16 docs/cifar_augmented_curves.png -resize 8x8! -interlace JPEG "$out/image/progressive.jpg"
}
idx
cifar
images
