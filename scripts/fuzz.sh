#!/bin/sh
# fuzz.sh — `make fuzz`: builds the libFuzzer harnesses (tests/fuzz) with
# clang, AddressSanitizer and UBSan into build-fuzz/, then runs each for
# FUZZ_SECONDS (default 600), FUZZ_JOBS at a time (default: the cores), on
# a corpus seeded from the repository's own files (build-fuzz/corpus/NAME,
# kept between runs). A finding is saved as build-fuzz/findings/NAME-*
# (emptied at the start) and makes the script fail; each harness's log is build-fuzz/fuzz_NAME.log.
# FUZZ_TARGETS picks harnesses (default: all).
set -eu
dir=build-fuzz
seconds=${FUZZ_SECONDS:-600}
jobs=${FUZZ_JOBS:-$(nproc)}
targets=${FUZZ_TARGETS:-"model_json h5 keras idx cifar image npz csv report"}

CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMXU_FUZZ=ON \
  >/dev/null
cmake --build "$dir" -j "$jobs" --target fuzzers test_fuzz

# Findings are this run's: an earlier run's were fixed or are in its log.
rm -rf "$dir/findings"
mkdir -p "$dir/findings"
for name in $targets; do
  mkdir -p "$dir/corpus/$name"
  "$dir/test_fuzz" --seeds "$name" | while read -r seed; do
    cp "$seed" "$dir/corpus/$name/"
  done
done

# One harness: libFuzzer's own limits for a slow input (-timeout, s) and
# memory (-rss_limit_mb) count as findings too; the input length is
# capped where the seeds are small, so time goes to structure, not size.
run() {
  name=$1
  max_len=65536
  case $name in h5 | keras | model_json | npz) max_len=1048576 ;; esac
  # The harnesses read the repository's files: run from its root.
  began=$(date +%s)
  if "$dir/fuzz_$name" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=4096 -max_len="$max_len" -print_final_stats=1 \
    -artifact_prefix="$dir/findings/$name-" "$dir/corpus/$name" \
    >"$dir/fuzz_$name.log" 2>&1; then
    verdict="no finding"
  else
    verdict="FINDING (see $dir/fuzz_$name.log)"
  fi
  # The last stats are the fuzzer's: the h5 probe's children (forks of
  # it) print their own when libhdf5 asks them for absurd memory.
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz_$name.log" |
    tail -n 1)
  corpus=$(ls "$dir/corpus/$name" | wc -l)
  took=$(($(date +%s) - began))
  echo "fuzz_$name: ${runs:-?} executions in $took s, corpus $corpus files: $verdict"
  [ "$verdict" = "no finding" ]
}

status=0
running=0
pids=""
for name in $targets; do
  run "$name" &
  pids="$pids $!"
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    for pid in $pids; do wait "$pid" || status=1; done
    pids=""
    running=0
  fi
done
for pid in $pids; do wait "$pid" || status=1; done
exit $status
