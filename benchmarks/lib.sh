# shellcheck shell=bash disable=SC2154  # bench, bin: the sourcing script's
# What the benchmark scripts share: sourced (not run) after they set
# `bench` (their name, for messages) and, where they use a build, `bin`
# (its bin/ directory).
#   source "$root/benchmarks/lib.sh"

# die MESSAGE: says it on stderr, prefixed with the script's name; exit 1.
die() { echo "${bench:-${0##*/}}: error: $*" >&2; exit 1; }

# load1: the 1-minute load average, for each RESULT line.
load1() { cut -d' ' -f1 /proc/loadavg; }

# need_torch PYTHON: dies unless PYTHON imports torch.
need_torch() {
  "$1" -c 'import torch' || die "$1 cannot import torch (apt-get install python3-torch)"
}

# need_build [PROGRAM...]: dies unless $bin holds pstrain and each
# PROGRAM, and the library pstrain.torch loads (lib/libpstrain.so) is
# beside it.
# shellcheck disable=SC2120  # no PROGRAM: pstrain alone
need_build() {
  local p
  for p in pstrain "$@"; do [[ -x $bin/$p ]] || die "no $bin/$p; run tools/setup.sh"; done
  [[ -f $bin/../lib/libpstrain.so ]] || die "no $bin/../lib/libpstrain.so; build pstrain_c"
}

# summary_field RUN_DIR NAME: a top-level number (or quoted string) of
# RUN_DIR/summary.json, as written.
summary_field() { sed -n "s/^ *\"$2\": \([^,]*\),*$/\1/p" "$1/summary.json" | head -n 1; }

# result_field LINE NAME: NAME's value in a line of NAME=VALUE pairs
# (a RESULT line).
result_field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# local_spec FILE PS WORKERS: writes a cluster spec of PS ps and WORKERS
# workers on localhost to FILE and prints FILE (its ports are
# placeholders: launch it with --free_ports).
local_spec() {
  local workers="" ps="" i
  for ((i = 0; i < $3; i++)); do workers+="${workers:+, }\"localhost:$((21000 + i))\""; done
  for ((i = 0; i < $2; i++)); do ps+="${ps:+, }\"localhost:$((22000 + i))\""; done
  echo "{\"cluster\": {\"worker\": [$workers], \"ps\": [$ps]}}" > "$1"
  echo "$1"
}
