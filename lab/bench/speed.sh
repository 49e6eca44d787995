#!/usr/bin/env bash
# The speed measurements of docs/speed.md on one GPU, each side by side in one run (benchmark/rl.py):
#   bash lab/bench/speed.sh imdb|math          # one process alone: the profile's settings against each speed
#                                                  # option, with the profiled iteration's kernel count and GPU time
#   bash lab/bench/speed.sh vocab              # one math CORY process alone with the profile's math tokenizer,
#                                                  # then GPT-2's whole vocabulary, then again (order effects)
#   bash lab/bench/speed.sh paper              # the paper's GPT-2 Large shape (stand-ins built here on the GPU):
#                                                  # imdb/ppo and imdb/cory of the paper profile with its settings
#                                                  # (profiled: top kernels, host ops), then without the fused GELU,
#                                                  # without the aligned head (on by default), and with the static
#                                                  # KV cache instead of the profile's whole-step graph (cache:
#                                                  # graph since 2026-11-29)
#   bash lab/bench/speed.sh paper VARIANT ...  # those variants instead (plain, or comma-separated KEY=VALUE;
#                                                  # WARMUP=N untimed iterations first, default 1)
#                                                  # (benchmark/paper.py; JSON per variant in $OUT/paper-*.json)
#   bash lab/bench/speed.sh smollm2             # the default profile's SmolLM2 PPO and CORY runs (a random Llama of
#                                                  # SmolLM2-135M's architecture: no GGUF needed), the profile's
#                                                  # settings (last_hidden, regional compilation since 2026-12-07)
#                                                  # beside the eager passes without them, and CORY also with its
#                                                  # update in passes of 128 rows (its memory setting), each in its
#                                                  # own process: phases, launches, MFU, peak memory
#                                                  # ($OUT/smollm2_ppo.json, _cory.json); then, where trl 0.11.4 is in
#                                                  # $TRL_ENV (benchmark/trl_env.sh), trl's PPO beside ours at the
#                                                  # same shape ($OUT/smollm2_trl.json). EXTRA="VARIANT ..." adds variants
#   bash lab/bench/speed.sh workers GROUP N [VARIANT]  # N processes at once (as the train stage runs them),
#                                                  # without and then with CUDA MPS (kernels of different processes
#                                                  # run at the same time instead of taking turns on the GPU;
#                                                  # MPS=on|off: only with / without it); with VARIANT, that only
# Output in $OUT/bench-<what>.txt and on stdout.
set -uo pipefail
what=${1:?usage: $0 imdb|math|vocab|paper | workers GROUP N [VARIANT]}; shift
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-4}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
FILTER="Loading|Writing|LOAD REPORT|^Key|^---|MISSING|^Notes|^\s*$|_warn_once|profiler"
static=ppo.generation.cache=static dynamic=ppo.generation.cache=dynamic compile=ppo.speed.compile=true unaligned=ppo.speed.align_head=false fp32=ppo.speed.mixed_precision=false
bench() { python3 -m benchmark.rl "$@" 2>&1 | grep -Ev "$FILTER" | tee -a "$OUT/bench-$what.txt"; }
case "$what" in
  # (measured 2026-11-27 and dropped from the list: math micro-batches of 128 x 1 instead of 32 x 4, no faster)
  imdb) bench --group imdb --run cory --iterations 5 --warmup 4 --profile --variant "$unaligned" --variant "$fp32" \
          --variant "$static" --variant "$compile" --variant "$unaligned,$compile" --variant "$static,$compile" ;;
  # (the math runs' profile settings have the static cache since 2026-11-27: "$dynamic" is the option there)
  math) bench --group math --run cory --iterations 3 --warmup 3 --profile --variant "$unaligned" --variant "$fp32" \
          --variant "$dynamic" --variant "$compile" --variant "$unaligned,$compile" ;;
  # (ppo.compile_mode reduce-overhead, CUDA graphs of the experience's and update's passes, measured 2026-11-27 and
  # removed: no faster, and wrong with accumulated micro-batches over tied weights; docs/speed.md "Speed options")
  vocab)  # base_models.math.tokenizer: the profile's, and offline-gpt2 through a params copy ($CORY_PARAMS)
    full=$(mktemp --suffix .yaml)
    python3 -c "import sys, yaml; p = yaml.safe_load(open('params.yaml')); p['base_models']['math']['tokenizer'] = 'offline-gpt2'; yaml.safe_dump(p, open(sys.argv[1], 'w'))" "$full"
    for params in params.yaml "$full" params.yaml "$full"; do
      echo "== base_models.math.tokenizer: $(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['base_models']['math'].get('tokenizer', 'offline-gpt2'))" "$params")" | tee -a "$OUT/bench-$what.txt"
      CORY_PARAMS=$params bench --group math --run cory --iterations 3 --warmup 3
    done ;;
  paper)  # the paper shape's targets: PPO <= 1.0 s, CORY <= 2.0x PPO (docs/speed.md)
    # (SCALE=tiny DEVICE=cpu: the same steps at toy sizes, to try the script on a CPU)
    python3 -m tools.build_standins standins --only gpt2-large distilbert-imdb --profile paper_standins \
      --offline-data --device "${DEVICE:-cuda}" --scale "${SCALE:-full}" > /tmp/build_standins.log 2>&1 ||
      { tail -20 /tmp/build_standins.log; exit 1; }
    python3 -m pipeline.profile paper_standins || exit 1
    variants=("$@"); [ ${#variants[@]} -gt 0 ] || variants=(plain ppo.speed.fused_gelu=false ppo.speed.align_head=false ppo.generation.cache=static)
    for variant in "${variants[@]}"; do
      sets=(--warmup "${WARMUP:-1}")
      case $variant in plain) sets+=(--profile) ;;
        *) IFS=, read -ra pairs <<< "$variant"; for pair in "${pairs[@]}"; do sets+=(--set "$pair"); done ;; esac
      echo "== $variant" | tee -a "$OUT/bench-$what.txt"
      python3 -m benchmark.paper --iterations 3 --only imdb/ppo imdb/cory "${sets[@]}" \
        --out "$OUT/paper-${variant//[^a-z0-9]/_}.json" 2>&1 | grep -Ev "$FILTER" | tee -a "$OUT/bench-$what.txt"
    done ;;
  workers)
    group=${1:?group} n=${2:?workers} variant=${3:-}
    args=(--group "$group" --run cory --iterations 3 --warmup 3 --workers "$n")
    [ -n "$variant" ] && args+=(--variant "$variant" --no-baseline)
    if [ "${MPS:-both}" != on ]; then echo "== without MPS" | tee -a "$OUT/bench-$what.txt"; bench "${args[@]}"; fi
    if [ "${MPS:-both}" != off ]; then echo "== with MPS" | tee -a "$OUT/bench-$what.txt"; bench "${args[@]}" --mps; fi ;;
  smollm2)  # CORY also with its update in passes of 128 rows (its peak memory); PPO's is half of CORY's
    # (measured 2026-12-07 on one H100, reports/default/bench/20261207_h100_smollm2_*.json: the compiled passes
    # 1.79x PPO's and 1.62x CORY's iterations per second, and since then the profile's settings)
    eager=ppo.speed.last_hidden=false,ppo.speed.compile=false
    extra=(); for variant in ${EXTRA:-}; do extra+=(--variant "$variant"); done
    for run in ppo cory; do
      variants=(--variant "$eager")
      [ $run = cory ] && variants+=(--variant "ppo.speed.update_batch_size=128")
      bench --group imdb_smollm2 --run $run --iterations "${ITERATIONS:-3}" --warmup 2 --profile --checkpoint \
        "${variants[@]}" "${extra[@]}" --out "$OUT/smollm2_$run.json"
    done
    if [ -d "${TRL_ENV:-/tmp/trl_env}/trl" ]; then
      python3 -m benchmark.trl --trl-env "${TRL_ENV:-/tmp/trl_env}" --shape smollm2 --profile default \
        --speed last_hidden=true --speed compile=regional --only trl_bf16 ppo --warmup 2 --iterations 3 \
        --peak-flops 989e12 --out "$OUT/smollm2_trl.json" 2>&1 | grep -Ev "$FILTER" | tee -a "$OUT/bench-$what.txt"
    else echo "no trl 0.11.4 in ${TRL_ENV:-/tmp/trl_env} (bash benchmark/trl_env.sh): trl's side left out" >&2; fi ;;
  *) echo "unknown: $what" >&2; exit 2 ;;
esac
