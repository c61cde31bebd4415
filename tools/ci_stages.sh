#!/usr/bin/env bash
# The CI stages after the normal suite (.ci/run runs them after tools/test.sh):
#
#   asan  built with -fsanitize=address,undefined (build-asan/): every unit
#         test, and the integration tests aimed at a live task (hostile
#         peers, bad input, the launcher's failure handling) and one whole
#         training (ASAN_INTEGRATION)
#   tsan  the tests with threads or child processes (ps server, clients,
#         heartbeats, launcher, integration) built with -fsanitize=thread;
#         their child processes are the TSan-built binaries too (build-tsan/)
#   fuzz  the libFuzzer targets, side by side for FUZZ_SECONDS from their seed
#         corpus in fuzz/corpus/; built in build-asan/ (PSTRAIN_FUZZ: the
#         libraries they fuzz carry libFuzzer's coverage instrumentation)
#
# Usage: tools/ci_stages.sh [--install | --build-only] [asan] [tsan] [fuzz]
#   (default: all three stages, each built then run)
#   --install     only install what the stages need (clang, libclang-rt-dev)
#   --build-only  only build the stages' binaries (nothing installed: run
#                 --install first); the stage run later builds nothing and
#                 runs its tests. .ci/run builds the sanitizer stages this
#                 way, niced, beside the normal suite.
# Environment:
#   FUZZ_SECONDS=30    how long the fuzzers run (all four at once)
#   PSTRAIN_WERROR=ON  warnings as errors (CI sets it)
#   JOBS=N             build parallelism (default: nproc); ctest runs N+1
#
# Any sanitizer report fails its stage: reports go to files under
# <build dir>/sanitizer-reports/ (children's too, whoever captures their
# stderr), every sanitizer stops the process at its first report, and the
# stage fails when a test fails or a report file exists. Each stage prints
# its wall time. Needs the packages of tools/setup.sh and clang and
# libclang-rt-dev (installed here when missing).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PROG=ci
die() { echo "ci: error: $*" >&2; exit 1; }
# shellcheck source=tools/lib/apt.sh
source "$root/tools/lib/apt.sh"

jobs=${JOBS:-$(nproc)}
# Tests at once: one more than the build's jobs, as tools/test.sh runs the
# suite (its tests wait on processes and peers): on a clean clone here the
# ASan stage's integration tests took 60 s at -j2 and 48 s at -j3, the
# TSan stage's tests 115 s and 102 s (2026-11-26, 2 vCPUs).
test_jobs=$((jobs + 1))
fuzz_seconds=${FUZZ_SECONDS:-30}
werror=${PSTRAIN_WERROR:-OFF}
readonly FUZZERS=(fuzz_cluster_spec fuzz_idx fuzz_request fuzz_stream)
# Left out of the sanitizer stages: the tests where `pstrain compare`,
# `pstrain scale` and `pstrain chaos` run several whole trainings each, and
# the two where the launcher restarts a worker of a 3-epoch job (200 s
# apiece under ASan, where the last hit its 240 s deadline); the launcher code they drive is
# covered by the Compare, Scale, Report, Launch and LaunchRestarts tests,
# and the recovery paths of the tasks by recovery_test and, for a killed ps
# (the one that touches every part), KilledAndRestarted/ps1; the normal
# suite runs them all.
readonly SLOW_UNDER_SANITIZERS='^(CompareCommand\.WritesOneRowPerModeAndThePlots|ScaleCommand\.WritesTheMatrix|ChaosCommand\.(RestartsKilledWorkers|ASyncJobSurvives)|Tasks/KilledAndRestarted\..*/(worker1|chief|ps0_with_standby|ps1_without_checkpoints)|LaunchRestarts\.AnAsyncJobSurvivesAKilledWorker|Launch\.RestartsAKilledWorkerAndSaysSo)'
# Left out of the TSan stage besides those: whole trainings that differ from
# one it runs only in the ps's single-threaded arithmetic (Adam, AdamW and a
# schedule against the SGD golden run; the rank-ordered sum of three sync
# workers; the staleness-scaled learning rate; the second SSP bound), 15-20 s
# apiece under TSan, and forward ahead across epochs and evaluations, whose
# thread is the one ForwardAheadOnRepliesInPieces drives (what it adds is
# the training loop's choice of when not to run ahead): 148 s under TSan,
# the stage's longest test, in 219 s of the stage's tests on three slots
# (2026-11-30, a clean clone). The normal suite runs them.
readonly SAME_THREADS_UNDER_TSAN='^(GoldenEquivalence\.(TwoSyncWorkersReproduceOneProcess(WithAdam|WithAdamW|UnderAScheduleToo)|ThreeSyncWorkersRepeatBitForBit.*|ForwardAheadChangesNothingAcrossEpochsAndEvaluations)|StalenessAwareLearningRate\..*|Bounds/SspBound\..*/2)$'
# The integration tests the ASan stage runs. The others train whole jobs
# (one to three minutes each under ASan: the stage took 12 minutes with
# them all, 2026-11-23) through the same code; the normal suite runs them,
# and the TSan stage the threaded ones. The recovery with a standby
# (KilledAndRestarted/ps1_with_standby) left on 2026-11-26: 148 of the
# stage's 215 s of integration tests; replica_test and recovery_test drive
# the same code under ASan with a fake clock.
readonly ASAN_INTEGRATION='^(CApi|CApiWithPs|AttackedPs|BadInput|LivePs|MismatchedWorker|LongLaunch|LaunchFaults|LaunchDeadline)\.|^Launch\.(TrainsAndWritesTheRunDirectory|BadSpecExitsTwo|UnknownCommand)|^DeadPeer\.AKilledPsThatNeverComesBack'
# The binaries that hold them, which the stage builds with the unit tests
# (CMake's `unit_tests`) and the programs the tests start, not `all`: the
# other integration tests' binaries were 185 of the ASan build's 1,858 s of
# CPU (2026-11-30, 2 vCPUs). A test moved to another binary must move here.
readonly ASAN_INTEGRATION_TARGETS=(c_api_test attack_test bad_input_test hostile_peer_test launcher_test
                                   restart_test)
# Sanitizer builds, with line tables for readable reports and NDEBUG (with
# Eigen's assertions the integration tests ran 10x slower and timed out).
# Both at -O1: GCC compiles instrumented code about twice as fast as at -O2
# (models/cpu/linear.cc 12 s against 23 s under ASan), and the builds were
# most of the stages (2026-11-26, a clean clone: ASan's about 1,000 of
# 1,178 s at -O2, then 640 of 876 s at -O1; TSan's 420 of 556 s at -O2).
# Built with clang, which the fuzz stage needs anyway: the ASan build took
# about 455 s with clang against 617 s with GCC (2026-11-26), and clang's
# compile-time format checks are stricter.
# The test code itself at -O0 (PSTRAIN_TEST_OPTIMIZE): clang compiled the
# ASan build's 90 test sources in 270 s of CPU against 620 s at -O1, and
# the ASan stage's tests ran 105 s against 91 (2026-11-30, 2 vCPUs): what a
# test spends its time in is the libraries and the processes it starts.
# Each library's sources compiled in batches (PSTRAIN_UNITY_BUILD: clang
# builds have no precompiled header for the libraries, so every file
# parsed the same headers again): the ASan build took 712 s of CPU against
# 924 file by file (399 s against 498 of wall time, 2026-12-02, a clean
# clone on 2 vCPUs).
readonly SAN_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                    -DPSTRAIN_UNITY_BUILD=ON
                    -DPSTRAIN_TEST_OPTIMIZE=-O0 -DPSTRAIN_CUDA=OFF -DPSTRAIN_BUILD_BENCHMARKS=OFF -DPSTRAIN_NATIVE=OFF
                    "-DPSTRAIN_WERROR=$werror" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang)
# The ASan build is also the fuzzers' (PSTRAIN_FUZZ: the fuzz targets, which
# the stage names, and libFuzzer's coverage instrumentation in the three
# libraries they fuzz and the protobuf code, fuzz/CMakeLists.txt): one build for two
# stages, where the fuzz stage built the libraries again on its own (about
# 190 of its 250 s, 2026-11-26).
# The fuzzers so run with NDEBUG: pstrain's own code has no assert or DCHECK
# (a CHECK stays on), so only third-party headers' debug checks (Eigen's)
# are off, and ASan checks every access anyway.
readonly ASAN_FLAGS=("${SAN_FLAGS[@]}" "-DPSTRAIN_SANITIZE=address,undefined" -DPSTRAIN_FUZZ=ON)

# usage: build DIR TARGET... -- CMAKE_ARG...
build() {
  local dir=$1; shift
  local targets=()
  while [[ $1 != -- ]]; do targets+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  cmake -S "$root" -B "$dir" "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; die "configure $dir failed"; }
  local target_args=()
  for t in "${targets[@]}"; do target_args+=(--target "$t"); done
  if ! cmake --build "$dir" -j "$jobs" "${target_args[@]}" >"$dir/build.log" 2>&1; then
    grep -E "error|Error" -A3 "$dir/build.log" | head -60 >&2 || tail -n 60 "$dir/build.log" >&2
    die "build of $dir failed; see $dir/build.log"
  fi
}

# Sanitizer options for everything the stage runs; `dir` receives reports.
sanitizer_env() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir"
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$dir/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$dir/ubsan"
  export LSAN_OPTIONS="log_path=$dir/lsan"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$dir/tsan"
}

# Fails when any sanitizer wrote a report under `dir`, printing them. A
# file that holds nothing but the symbolizer's "Can't read from
# symbolizer" is printed and passed over: TSan symbolizes a race to match
# it against the suppressions (common/tsan_suppressions.cc's race:
# entries) before it reports or drops it, and a test that kills a
# process group mid-way kills llvm-symbolizer with it; the process dies
# before saying anything else. A race that is not suppressed shows again
# in a process that lives.
check_reports() {
  local dir=$1
  local reports=() r
  while IFS= read -r r; do
    if ! grep -qv "WARNING: Can't read from symbolizer at fd" "$r"; then
      echo "== $r (a symbolizer killed with its process; not a report)"; cat "$r"
      continue
    fi
    reports+=("$r")
  done < <(find "$dir" -type f | sort) >&2
  [[ ${#reports[@]} -eq 0 ]] && return 0
  for r in "${reports[@]}"; do echo "== $r"; head -n 60 "$r"; done >&2
  die "${#reports[@]} sanitizer report(s) in $dir"
}

run_ctest() {
  local dir=$1; shift
  sanitizer_env "$dir/sanitizer-reports"
  local rc=0
  ctest --test-dir "$dir" --output-on-failure -j "$test_jobs" "$@" || rc=$?
  check_reports "$dir/sanitizer-reports"
  [[ $rc -eq 0 ]] || die "ctest in $dir failed"
}

build_asan() {
  build "$root/build-asan" unit_tests ps_server worker pstrain fuzzers "${ASAN_INTEGRATION_TARGETS[@]}" \
      -- "${ASAN_FLAGS[@]}"
}

stage_asan() {
  build_asan
  # Every test binary left unbuilt must be an integration test's (CMake
  # lists them): any other's tests would drop out of the stage unseen.
  local listed="$root/build-asan/integration_test_binaries.txt" unbuilt
  [[ -f $listed ]] || die "CMake did not write $listed"
  unbuilt=$(ctest --test-dir "$root/build-asan" -N -R '_NOT_BUILT$' |
    sed -n 's/^ *Test *#[0-9]*: \(.*\)_NOT_BUILT$/\1/p' |
    grep -vxF -f "$listed" || true)
  [[ -z $unbuilt ]] || die "test binaries the ASan stage did not build: $unbuilt"
  # (-E: the placeholders ctest makes for the integration tests' binaries
  # not built here)
  run_ctest "$root/build-asan" -LE '^integration$' -E '_NOT_BUILT$'
  run_ctest "$root/build-asan" -L '^integration$' -R "$ASAN_INTEGRATION"
}

# The TSan stage builds only the targets of the tests labelled integration
# or tsan, and the binaries they start.
build_tsan() {
  build "$root/build-tsan" ps_server worker pstrain cluster_spec_test cancellation_test \
      transport_test local_links_test request_handler_test shard_store_test ps_server_test \
      launcher_test compare_test \
      scale_test plot_test cluster_training_test golden_equivalence_test bad_input_test hostile_peer_test \
      consistency_test experiment_commands_test metrics_server_test c_api_test -- "${SAN_FLAGS[@]}" \
      -DPSTRAIN_SANITIZE=thread
}

stage_tsan() {
  build_tsan
  run_ctest "$root/build-tsan" -L '^(integration|tsan)$' -E "$SLOW_UNDER_SANITIZERS|$SAME_THREADS_UNDER_TSAN"
}

# The fuzzers are the ASan build's (the same directory and flags).
build_fuzz() {
  build "$root/build-asan" fuzzers -- "${ASAN_FLAGS[@]}"
}

stage_fuzz() {
  # libFuzzer reads the sanitizers' reports on stderr.
  unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS
  build_fuzz  # nothing to build after the asan stage
  local fuzz_out="$root/build-asan/fuzz-out"
  rm -rf "$fuzz_out" && mkdir -p "$fuzz_out"
  # Side by side: each fuzzer's time is wall time, so four on two cores for
  # FUZZ_SECONDS each get as much CPU as one after another for half of it,
  # in a quarter of the stage's time.
  local f pids=()
  for f in "${FUZZERS[@]}"; do
    # A scratch corpus, so the committed seeds stay as they are.
    mkdir -p "$fuzz_out/$f.corpus"
    echo "ci: fuzzing $f for $fuzz_seconds s"
    "$root/build-asan/bin/$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 -artifact_prefix="$fuzz_out/$f-" "$fuzz_out/$f.corpus" \
        "$root/fuzz/corpus/$f" >"$fuzz_out/$f.log" 2>&1 &
    pids+=($!)
  done
  local i failed=()
  for i in "${!FUZZERS[@]}"; do
    f=${FUZZERS[$i]}
    if ! wait "${pids[$i]}"; then
      tail -n 80 "$fuzz_out/$f.log" >&2
      failed+=("$f")
    fi
    grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units" "$fuzz_out/$f.log" | sed "s/^/$f: /" || true
  done
  [[ ${#failed[@]} -eq 0 ]] || die "${failed[*]} found a crash; the input is in $fuzz_out"
}

mode=run
case ${1:-} in
  --install) mode=install; shift ;;
  --build-only) mode=build; shift ;;
esac
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(asan tsan fuzz)
for s in "${stages[@]}"; do
  case $s in
    asan|tsan|fuzz) ;;
    *) die "unknown stage $s (expected asan, tsan or fuzz)" ;;
  esac
done
# Every stage needs clang and its runtimes, installed first (a build-only
# run beside another command must not wait on apt's lock).
[[ $mode == build ]] || install_packages clang libclang-rt-dev
[[ $mode == install ]] && exit 0
for s in "${stages[@]}"; do
  start=$SECONDS
  if [[ $mode == build ]]; then
    echo "ci: building stage $s"
    "build_$s"
    echo "ci: stage $s built in $((SECONDS - start)) s"
    continue
  fi
  echo "ci: stage $s"
  "stage_$s"
  echo "ci: stage $s passed in $((SECONDS - start)) s"
done
