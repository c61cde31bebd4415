# shellcheck shell=bash disable=SC2154,SC2034  # bench, bin: the sourcing script's; part_status: its too
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

# part NAME LIMIT COMMAND...: one bounded part of a run on a lent host
# (a short device budget): runs COMMAND, for at most LIMIT seconds and not
# past $part_end (seconds of the calling script; unset: no end), with its
# output in $out/NAME.log; prints the log's lines that match $part_lines
# (grep -E; default ^RESULT) and how it ended, and sets part_status=1
# and returns 1 when it failed (run in the background, its status is
# wait's). NAME runs only where it is in $parts (space-separated; empty:
# every part); one that cannot have 20 s before $part_end is skipped and
# counts as failed.
part() {
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  [[ -z ${parts:-} || " $parts " == *" $name "* ]] || return 0
  if [[ -n ${part_end:-} ]] && ((part_end - SECONDS < limit)); then
    limit=$((part_end - SECONDS))
  fi
  if ((limit < 20)); then
    echo "== $name: skipped (no time left)"
    part_status=1
    return 1
  fi
  echo "== $name: $* (at most $limit s)"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  grep -hE "${part_lines:-^RESULT}" "$out/$name.log" | tail -n 40
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  ((rc == 0)) || { part_status=1; return 1; }
}
