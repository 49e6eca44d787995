#!/usr/bin/env bash
# The GPU diagnostics behind the default profile's report.deviations (ppo.kl_penalty, ppo.dropout) and the
# README's note on the math task, re-runnable (2026-11-26 they ran on one H200 (imdb-*) and one H100 (math-*), ~4
# minutes each, with the profile of that day; results in the README and docs/results.md):
#   bash lab/studies/diagnostics.sh imdb-dropout   # dropout on/off x bf16/fp32, PPO and CORY, the paper's "full" KL
#   bash lab/studies/diagnostics.sh imdb-kl        # k1 KL-in-reward with and without dropout, and at a fixed eta 0.1
#   bash lab/studies/diagnostics.sh math-drift     # why math PPO lowers the pass rate: lr, KL, score scaling, epochs
#   bash lab/studies/diagnostics.sh math-value     # ... value-loss gradient into the shared body? batch size?
#   bash lab/studies/diagnostics.sh math-group     # k attempts per query with a per-query (leave-one-out) baseline,
#                                              # GAE lambda, learning rate, batch; PPO and CORY, 100 iterations
#   bash lab/studies/diagnostics.sh math-lora      # LoRA r=16 (the paper's 7B setting) vs full fine-tuning; held-out pass@k
#   bash lab/studies/diagnostics.sh math-scale     # 32 queries x 8 attempts, lam 1, V starting at 0; LoRA lr / full; 2 seeds
#   bash lab/studies/diagnostics.sh math-long      # the best two of math-scale for 250 iterations: does pass@1 keep rising?
#   bash lab/studies/diagnostics.sh math-batch     # 64 queries x 8 attempts per iteration (a small model's iteration costs
#                                              # launches, not samples): lr, optimizer steps per batch; PPO and CORY
#   bash lab/studies/diagnostics.sh math-slip      # a base trained on solutions of which 30% slip in the final step
#                                              # (base_models.math.slip_rate): PPO and CORY, one and 8 attempts per query
#   bash lab/studies/diagnostics.sh math-slip3     # the k8 runs of math-slip on 3 seeds
#   bash lab/studies/diagnostics.sh math-lr        # the default profile's math PPO and CORY at lr 1e-5 and 2e-5, 3 seeds,
#                                              # and `lab.studies.variants drift`: why the training reward does not rise
#   bash lab/studies/diagnostics.sh math-cache     # math PPO with the dynamic vs the static KV cache vs the aligned LM
#                                              # head, 3 seeds, held-out pass@k: do the speed options keep the curves?
#   bash lab/studies/diagnostics.sh math-microbatch  # math PPO and CORY in micro-batches of 32 x 4 vs 128 x 1, 3 seeds,
#                                              # held-out pass@k: the same curves? (and each run's wall time)
# Each runs its stages' prerequisites, then 2 seeds of each variant at once (lab/studies/variants.py), and prints LLM1's
# metrics per block of 10 iterations (also written to $OUT/<name>.txt when $OUT is set, as on the lent GPU machine).
set -euo pipefail
export PYTHONUNBUFFERED=1
name=${1:?usage: $0 imdb-dropout | imdb-kl | math-drift | math-value | math-group | math-lora | math-scale | math-long | math-batch | math-slip | math-slip3 | math-lr | math-cache | math-microbatch}
P=cory.n_agents=1 C=cory.n_agents=2   # single-agent PPO / CORY
full=ppo.kl_penalty=full nodrop=ppo.dropout=none drop=ppo.dropout=update
seeds="0 1"
# batch 128 (256) responses in mini-batches of 32 accumulated to one optimizer step per epoch, to bound memory
B128=ppo.batch_size=128,ppo.mini_batch_size=32,ppo.gradient_accumulation_steps=4,ppo.speed.forward_batch_size=64
B256=ppo.batch_size=256,ppo.mini_batch_size=32,ppo.gradient_accumulation_steps=8,ppo.speed.forward_batch_size=64
K8=ppo.samples_per_query=8,ppo.group_baseline=true
case "$name" in
  imdb-dropout) group=imdb iterations=80 runs=(
      "ppo=$P,$full,$drop" "ppo_nodrop=$P,$full,$nodrop" "ppo_fp32=$P,$full,$drop,ppo.speed.mixed_precision=false"
      "ppo_nodrop_fp32=$P,$full,$nodrop,ppo.speed.mixed_precision=false" "cory=$C,$full,$drop" "cory_nodrop=$C,$full,$nodrop") ;;
  imdb-kl) group=imdb iterations=80 runs=(
      "ppo_k1=$P,$nodrop" "cory_k1=$C,$nodrop" "ppo_k1_drop=$P,$drop" "cory_k1_drop=$C,$drop"
      "ppo_k1_eta0.1=$P,$nodrop,ppo.adaptive_kl=false,ppo.init_kl_coef=0.1"
      "cory_k1_eta0.1=$C,$nodrop,ppo.adaptive_kl=false,ppo.init_kl_coef=0.1") ;;
  math-drift) group=math iterations=60 runs=(
      "ppo=$P" "ppo_lr1e-4=$P,ppo.learning_rate=1e-4" "ppo_lr3e-5=$P,ppo.learning_rate=3e-5"
      "ppo_nokl=$P,ppo.init_kl_coef=0.0,ppo.adaptive_kl=false"
      "ppo_rawscore=$P,ppo.use_score_scaling=false,ppo.use_score_norm=false" "ppo_1epoch=$P,ppo.ppo_epochs=1") ;;
  math-value) group=math iterations=50 runs=(
      "ppo=$P" "ppo_vf0.01=$P,ppo.vf_coef=0.01" "ppo_vf0=$P,ppo.vf_coef=0.0"
      "ppo_b128=$P,ppo.batch_size=128,ppo.mini_batch_size=128") ;;
  math-group) group=math iterations=100 seeds=0 runs=(
      "ppo=$P" "ppo_k8=$P,$B128,$K8" "ppo_k8_lam1=$P,$B128,$K8,ppo.lam=1.0"
      "ppo_k8_nobaseline_lam1=$P,$B128,ppo.samples_per_query=8,ppo.lam=1.0"
      "ppo_k8_lam1_lr3e-5=$P,$B128,$K8,ppo.lam=1.0,ppo.learning_rate=3.0e-5"
      "ppo_k8_lam1_lr1e-4=$P,$B128,$K8,ppo.lam=1.0,ppo.learning_rate=1.0e-4"
      "ppo_k4_b64_lam1=$P,ppo.batch_size=64,ppo.mini_batch_size=32,ppo.gradient_accumulation_steps=2,ppo.samples_per_query=4,ppo.group_baseline=true,ppo.lam=1.0"
      "ppo_k8_b256_lam1=$P,$B256,$K8,ppo.lam=1.0"
      "cory=$C" "cory_k8=$C,$B128,$K8" "cory_k8_lam1=$C,$B128,$K8,ppo.lam=1.0"
      "cory_k8_lam1_lr3e-5=$C,$B128,$K8,ppo.lam=1.0,ppo.learning_rate=3.0e-5") ;;
  math-lora) group=math iterations=100 seeds=0 evaluate=1 B128=${B128/forward_batch_size=64/forward_batch_size=32}
    L=lora_rank=16,lora_alpha=16
    runs=(
      "ppo=$P" "ppo_k8=$P,$B128,$K8" "ppo_lora_lr1e-4=$P,$L,ppo.learning_rate=1.0e-4"
      "ppo_lora_k8_lr1e-4=$P,$L,$B128,$K8,ppo.learning_rate=1.0e-4"
      "ppo_lora_k8_lr3e-4=$P,$L,$B128,$K8,ppo.learning_rate=3.0e-4"
      "ppo_lora_k8_lr1e-4_lam1=$P,$L,$B128,$K8,ppo.learning_rate=1.0e-4,ppo.lam=1.0"
      "cory_lora_lr1e-4=$C,$L,ppo.learning_rate=1.0e-4"
      "cory_lora_k8_lr1e-4=$C,$L,$B128,$K8,ppo.learning_rate=1.0e-4") ;;
  math-scale) group=math iterations=100 seeds="0 1" evaluate=1
    L=lora_rank=16,lora_alpha=16 Z=ppo.zero_init_value_head=true,ppo.lam=1.0
    B256=ppo.batch_size=256,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=4,ppo.speed.forward_batch_size=64
    runs=(
      "ppo_lora_lr3e-4=$P,$L,$B256,$K8,$Z,ppo.learning_rate=3.0e-4"
      "ppo_lora_lr1e-3=$P,$L,$B256,$K8,$Z,ppo.learning_rate=1.0e-3"
      "ppo_full_lr1e-5=$P,$B256,$K8,$Z,ppo.learning_rate=1.0e-5"
      "cory_lora_lr3e-4=$C,$L,$B256,$K8,$Z,ppo.learning_rate=3.0e-4") ;;
  math-long) group=math iterations=250 seeds=0 evaluate=1
    L=lora_rank=16,lora_alpha=16 Z=ppo.zero_init_value_head=true,ppo.lam=1.0
    B256=ppo.batch_size=256,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=4,ppo.speed.forward_batch_size=64
    runs=(
      "ppo_full_lr1e-5=$P,$B256,$K8,$Z,ppo.learning_rate=1.0e-5"
      "ppo_lora_lr3e-4=$P,$L,$B256,$K8,$Z,ppo.learning_rate=3.0e-4") ;;
  math-batch) group=math iterations=100 seeds="0 1" evaluate=1
    Z=ppo.zero_init_value_head=true,ppo.lam=1.0
    Q64=ppo.batch_size=512,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=8,ppo.speed.forward_batch_size=64
    Q64m=ppo.batch_size=512,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=2,ppo.speed.forward_batch_size=64
    runs=(
      "ppo_q64_lr1e-5=$P,$Q64,$K8,$Z,ppo.learning_rate=1.0e-5"
      "ppo_q64_lr3e-5=$P,$Q64,$K8,$Z,ppo.learning_rate=3.0e-5"
      "ppo_q64_mb128_lr1e-5=$P,$Q64m,$K8,$Z,ppo.learning_rate=1.0e-5"
      "cory_q64_lr3e-5=$C,$Q64,$K8,$Z,ppo.learning_rate=3.0e-5") ;;
  math-slip) group=math iterations=100 seeds="0 1" evaluate=1 base=slip_rate=0.3
    Z=ppo.zero_init_value_head=true,ppo.lam=1.0
    Q16=ppo.batch_size=128,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=2,ppo.speed.forward_batch_size=64
    runs=("ppo=$P" "cory=$C" "ppo_k8=$P,$Q16,$K8,$Z" "cory_k8=$C,$Q16,$K8,$Z") ;;
  math-slip3) group=math iterations=100 seeds="0 1 2" evaluate=1 base=slip_rate=0.3
    Z=ppo.zero_init_value_head=true,ppo.lam=1.0
    Q16=ppo.batch_size=128,ppo.mini_batch_size=64,ppo.gradient_accumulation_steps=2,ppo.speed.forward_batch_size=64
    runs=("ppo_k8=$P,$Q16,$K8,$Z" "cory_k8=$C,$Q16,$K8,$Z") ;;
  math-lr) group=math iterations=100 seeds="0 1 2" evaluate=1 drift=1  # the profile's math settings as they are,
    # in micro-batches of 32 (the same optimizer steps) so that 12 runs fit an 80 GB card at once (64: out of memory)
    M=ppo.mini_batch_size=32,ppo.gradient_accumulation_steps=4,ppo.speed.forward_batch_size=32
    runs=("ppo=$P,$M" "cory=$C,$M" "ppo_lr2e-5=$P,$M,ppo.learning_rate=2.0e-5" "cory_lr2e-5=$C,$M,ppo.learning_rate=2.0e-5") ;;
  math-cache) group=math iterations=100 seeds="0 1 2" evaluate=1  # the speed options against the curves
    # (docs/speed.md): the static KV cache (a 0.017 lower probe reward in the one run that had it) and the aligned LM head
    # (each names both options: the default profile has the static cache and the aligned head on since 2026-11-27)
    runs=("ppo=$P,ppo.generation.cache=dynamic,ppo.speed.align_head=false" "ppo_static=$P,ppo.generation.cache=static,ppo.speed.align_head=false"
      "ppo_aligned=$P,ppo.generation.cache=dynamic,ppo.speed.align_head=true") ;;
  math-microbatch) group=math iterations=100 seeds="0 1 2" evaluate=1  # docs/speed.md: the batch of 128 in one
    # micro-batch per optimizer step instead of 4 accumulated 32s (one math CORY process alone on an H100: 1.27 ->
    # 0.70 s per iteration, benchmark/rl.py); do the curves stay? (the loss is a mean over the batch's tokens
    # instead of a mean of 4 micro-batch means: the same gradient when every response has the same length)
    M1=ppo.mini_batch_size=128,ppo.gradient_accumulation_steps=1,ppo.speed.forward_batch_size=128
    runs=("ppo=$P" "ppo_mb128=$P,$M1" "cory=$C" "cory_mb128=$C,$M1") ;;
  *) echo "unknown diagnostic: $name" >&2; exit 2 ;;
esac
params=$(mktemp --suffix .yaml)
python3 -m lab.studies.variants write --group "$group" --iterations "${ITERATIONS:-$iterations}" --seeds $seeds ${evaluate:+--evaluate} \
  ${base:+--base "$base"} $(printf -- "--run %s " "${runs[@]}") > "$params"
export CORY_PARAMS="$params"  # the base model's settings may differ from the profile's ($base)
if [ "$group" = imdb ]; then
  python3 -m pipeline.prepare_imdb && python3 -m pipeline.base_models imdb_small reward
else
  python3 -m pipeline.prepare_math && python3 -m pipeline.base_models math
fi
rm -rf "outputs/$(python3 -c "import yaml; print(yaml.safe_load(open('$params'))['profile'])")/runs/variants"
# ${LIMIT}: stop the runs after this many seconds and summarise what they logged (on a lent machine's time limit)
timeout "${LIMIT:-0}" python3 -m pipeline.train variants || echo "pipeline.train exited $?"
python3 -m lab.studies.variants summary | tee ${OUT:+"$OUT/$name.txt"}
if [ -n "${evaluate:-}" ]; then  # held-out pass@k of each run's LLM1 beside the base model's (the evaluate stage's protocol)
  python3 -m lab.studies.variants materialize | tee -a ${OUT:+"$OUT/$name.txt"}  # runs $LIMIT stopped
  python3 - "$params" <<'EOF'  # leave out runs that $LIMIT stopped before they saved their weights
import sys, pathlib, yaml
params = yaml.safe_load(open(sys.argv[1]))
root, seed, models = pathlib.Path("outputs", params["profile"]), params["seeds"][0], params["evaluation"]["models"]
params["evaluation"]["models"] = {k: v for k, v in models.items() if (root / v.format(seed=seed) / "config.json").is_file()}
yaml.safe_dump(params, open(sys.argv[1], "w"), sort_keys=False)
EOF
  python3 -m pipeline.evaluate 2>&1 | grep "^evaluate:" | tee -a ${OUT:+"$OUT/$name.txt"}
  if [ -n "${drift:-}" ]; then python3 -m lab.studies.variants drift 2>&1 | grep -v Warning | tee -a ${OUT:+"$OUT/$name.txt"}; fi
fi
