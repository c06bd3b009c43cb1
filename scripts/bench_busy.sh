#!/bin/sh
# bench_busy.sh MXU RESULTS — how mxu's training throughput holds up when
# another process competes for the cores (a shared CI runner, a laptop):
# Fashion-MNIST (batch 1000, 2 threads) beside one busy loop of this
# shell's, first at nice 19, then at nice 0. The reports go to
# RESULTS/fashion_mnist_busy_nice19.json and ..._nice0.json;
# bench_summary.py prints each against the quiet run's.
set -e
mxu=$1
out=$2
busy=
trap '[ -n "$busy" ] && kill $busy 2>/dev/null' EXIT
for level in 19 0; do
  nice -n $level sh -c 'while :; do :; done' &
  busy=$!
  "$mxu" bench models/fashion_mnist.json --batch-size 1000 --threads 2 \
    --report "$out/fashion_mnist_busy_nice$level.json"
  kill $busy
  busy=
done
