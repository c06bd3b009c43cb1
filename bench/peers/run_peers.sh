#!/usr/bin/env bash
# run_peers.sh — the peers of `make bench`: PyTorch and TF-Keras training
# the models mxu bench times, at the same batch sizes, thread count and
# precision, each through peer_bench.py, one process a run. Reports go to
# RESULTS_DIR/peer_<framework>_<model>_<precision>[_compiled].json, where
# scripts/bench_summary.py sets them beside mxu's.
#
# usage: MXU_PEERS_PYTHON=PY[:PY...] bench/peers/run_peers.sh [RESULTS_DIR]
#
#   MXU_PEERS_PYTHON      interpreters, colon-separated; each framework runs
#                         on the first one that imports it (torch; tensorflow
#                         for keras). Unset: nothing runs (exit 0).
#   MXU_PEERS_FRAMEWORKS  "torch keras" by default
#   MXU_PEERS_MODELS      "cifar fashion resnet20 mobilenetv2 resnet50
#                         rows_conv1d rows_rnn rows_transformer" by default
#                         (the rows_ models, Fashion-MNIST's rows as
#                         sequences, Keras only)
#   MXU_PEERS_REPEATS     timed repeats of each run, 3 by default
#   MXU_PEERS_COMPILED=0  skips the torch.compile and XLA runs (a third of
#                         the time, mostly compiling)
#   MXU_PEERS_SMOKE=1     batch 32, 1 step, 1 repeat, 1 thread: only checks
#                         that every run works (give another RESULTS_DIR)
#
# A framework that no interpreter imports is skipped. A run that fails is
# reported (its stderr's tail), its old report removed, and the rest go on;
# the exit status is then 1.
#
# Runtime on 2 cores (AVX2 EPYC, estimated from 1-thread runs): about 14
# minutes for the 18 float32 and cifar mixed_bfloat16 runs, two thirds of
# it fixed costs: torch.compile and XLA compiling (~5 min; torch.compile's
# cache in /tmp/torchinductor_$USER shortens later runs), imports and Keras
# tracing; and the two mixed_bfloat16 cifar runs (~3.5 min) on a CPU
# without bfloat16 instructions, where a step of 1024 takes ~20 s in
# either framework; the other mixed_bfloat16 runs add a few minutes more
# there, less on a CPU with AVX512_BF16.
set -u

here=$(cd "$(dirname "$0")" && pwd)
results=${1:-bench/results}

if [ -z "${MXU_PEERS_PYTHON:-}" ]; then
  echo "peers: set MXU_PEERS_PYTHON to a python with torch and/or tensorflow to compare"
  exit 0
fi

threads=2 # as every `make bench` configuration below
repeats=${MXU_PEERS_REPEATS:-3}
frameworks=${MXU_PEERS_FRAMEWORKS:-torch keras}
models=${MXU_PEERS_MODELS:-cifar fashion resnet20 mobilenetv2 resnet50 rows_conv1d rows_rnn rows_transformer}

# model, batch, precision, timed steps per repeat: the configurations of the
# Makefile's bench target. mxu runs cifar's 1024 as 8 replicas of 128; a peer
# runs the 1024 as one batch. Steps are few because each run also pays
# imports, warm-up and compiling: cifar steps take 1-3 s, and bfloat16
# ones ~20 s where the CPU has no bfloat16 instructions.
configs="cifar 1024 float32 3
fashion 1000 float32 5
cifar 1024 mixed_bfloat16 1
fashion 1000 mixed_bfloat16 5
resnet20 128 float32 4
resnet20 128 mixed_bfloat16 4
mobilenetv2 128 float32 4
mobilenetv2 128 mixed_bfloat16 4
resnet50 64 float32 3
rows_conv1d 128 float32 10
rows_rnn 128 float32 5
rows_transformer 128 float32 5"

# The first interpreter in MXU_PEERS_PYTHON that imports module $1.
find_python() {
  local py
  local IFS=:
  for py in $MXU_PEERS_PYTHON; do
    if "$py" -c "import $1" >/dev/null 2>&1; then
      echo "$py"
      return 0
    fi
  done
  return 1
}

if [ "${MXU_PEERS_SMOKE:-0}" = 1 ]; then
  threads=1
  repeats=1
  configs=$(echo "$configs" | awk '{ print $1, 32, $3, 1 }')
fi

mkdir -p "$results"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export TF_CPP_MIN_LOG_LEVEL=2
failed=0
runs=0
start_all=$SECONDS

# One run: framework, interpreter, model, batch, precision, steps, [flag].
run() {
  local fw=$1 py=$2 model=$3 batch=$4 precision=$5 steps=$6 flag=${7:-}
  local out="$results/peer_${fw}_${model}_${precision}${flag:+_compiled}.json"
  local start=$SECONDS
  rm -f "$out" # no stale report if this run fails
  runs=$((runs + 1))
  # shellcheck disable=SC2086 # $flag is empty or one word
  if "$py" "$here/peer_bench.py" --framework "$fw" --model "$model" \
    --batch-size "$batch" --threads "$threads" --precision "$precision" \
    --steps "$steps" --repeats "$repeats" $flag --report "$out" 2>"$log"; then
    echo "  ($((SECONDS - start)) s in all, $out)"
  else
    failed=$((failed + 1))
    echo "peer $fw $model $precision${flag:+ $flag}: FAILED after $((SECONDS - start)) s:"
    tail -n 5 "$log" | sed 's/^/  /'
  fi
}

for fw in $frameworks; do
  case $fw in
    torch) module=torch ;;
    keras) module=tensorflow ;;
    *) echo "peers: unknown framework $fw (torch, keras)"; exit 2 ;;
  esac
  if ! py=$(find_python $module); then
    echo "peers: no interpreter in MXU_PEERS_PYTHON imports $module: $fw skipped"
    continue
  fi
  echo "peers: $fw on $py"
  while read -r model batch precision steps; do
    case " $models " in *" $model "*) ;; *) continue ;; esac
    # The sequence models over Fashion-MNIST's rows have no torch module.
    case "$fw $model" in "torch rows_"*) continue ;; esac
    run "$fw" "$py" "$model" "$batch" "$precision" "$steps"
    # The compiled variant for float32 only: torch.compile, Keras' XLA.
    if [ "$precision" = float32 ] && [ "${MXU_PEERS_COMPILED:-1}" != 0 ]; then
      if [ "$fw" = torch ]; then flag=--compile; else flag=--xla; fi
      run "$fw" "$py" "$model" "$batch" "$precision" "$steps" "$flag"
    fi
  done <<<"$configs"
done

echo "peers: $runs runs in $((SECONDS - start_all)) s, $failed failed"
[ "$failed" -eq 0 ]
