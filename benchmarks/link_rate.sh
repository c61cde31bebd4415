#!/usr/bin/env bash
# What a network link does to sync and async training: each task in a
# network namespace of its own on a private bridge (pstrain launch
# --isolate=netns), its egress limited by tc tbf, against the same job on
# loopback. One RESULT line per run (benchmarks/train_throughput.sh's
# format, with extra= naming the setting). Root only.
#
# Usage: benchmarks/link_rate.sh [ROUNDS]
# Environment:
#   MODELS="mnist_cnn cnn_large"       models
#   RATES="loopback unlimited 10gbit 1gbit"   settings
#   STEPS_mnist_cnn=470 STEPS_cnn_large=60    steps per worker
# docs/reports/link_rate_<date>.md holds a run of it and what it shows.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-1}
spec=$root/cluster_specs/local_2ps_2w.json
[[ $(id -u) -eq 0 ]] || { echo "link_rate: network namespaces need root" >&2; exit 2; }
for round in $(seq "$rounds"); do
  for model in ${MODELS:-mnist_cnn cnn_large}; do
    steps_var=STEPS_$model
    steps=${!steps_var:-$([[ $model == cnn_large ]] && echo 60 || echo 470)}
    for rate in ${RATES:-loopback unlimited 10gbit 1gbit}; do
      case $rate in
        loopback) flags="--model=$model" ;;
        unlimited) flags="--model=$model --isolate=netns" ;;
        *) flags="--model=$model --isolate=netns --link_rate=$rate" ;;
      esac
      echo "link_rate: round $round, $model, $rate" >&2
      EXTRA_FLAGS="$flags" "$root/benchmarks/train_throughput.sh" "$spec" "$steps" sync async |
          grep '^RESULT' | sed "s/\$/ round=$round rate=$rate/"
    done
  done
done
