#!/usr/bin/env bash
# The GPU diagnostics behind the default profile's report.deviations (ppo.kl_penalty, ppo.disable_dropout) and the
# README's note on the math task, re-runnable (2026-11-26 they ran on one H200 (imdb-*) and one H100 (math-*), ~4
# minutes each, with the profile of that day; results in the README and the closing note of issue 4):
#   bash scripts/diagnostics.sh imdb-dropout   # dropout on/off x bf16/fp32, PPO and CORY, the paper's "full" KL
#   bash scripts/diagnostics.sh imdb-kl        # k1 KL-in-reward with and without dropout, and at a fixed eta 0.1
#   bash scripts/diagnostics.sh math-drift     # why math PPO lowers the pass rate: lr, KL, score scaling, epochs
#   bash scripts/diagnostics.sh math-value     # ... value-loss gradient into the shared body? batch size?
# Each runs its stages' prerequisites, then 2 seeds of each variant at once (scripts/variants.py), and prints LLM1's
# metrics per block of 10 iterations (also written to $OUT/<name>.txt when $OUT is set, as on the lent GPU machine).
set -euo pipefail
export PYTHONUNBUFFERED=1
name=${1:?usage: $0 imdb-dropout | imdb-kl | math-drift | math-value}
P=cory.n_agents=1 C=cory.n_agents=2   # single-agent PPO / CORY
full=ppo.kl_penalty=full nodrop=ppo.disable_dropout=true drop=ppo.disable_dropout=false
case "$name" in
  imdb-dropout) group=imdb iterations=80 runs=(
      "ppo=$P,$full,$drop" "ppo_nodrop=$P,$full,$nodrop" "ppo_fp32=$P,$full,$drop,ppo.mixed_precision=false"
      "ppo_nodrop_fp32=$P,$full,$nodrop,ppo.mixed_precision=false" "cory=$C,$full,$drop" "cory_nodrop=$C,$full,$nodrop") ;;
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
  *) echo "unknown diagnostic: $name" >&2; exit 2 ;;
esac
if [ "$group" = imdb ]; then
  python3 -m pipeline.prepare_imdb && python3 -m pipeline.base_models imdb_small && python3 -m pipeline.reward_model
else
  python3 -m pipeline.prepare_math && python3 -m pipeline.base_models math
fi
params=$(mktemp --suffix .yaml)
python3 -m scripts.variants write --group "$group" --iterations "$iterations" --seeds 0 1 \
  $(printf -- "--run %s " "${runs[@]}") > "$params"
rm -rf "outputs/$(python3 -c "import yaml; print(yaml.safe_load(open('$params'))['profile'])")/runs/variants"
CORY_PARAMS="$params" python3 -m pipeline.train variants
CORY_PARAMS="$params" python3 -m scripts.variants summary | tee ${OUT:+"$OUT/$name.txt"}
