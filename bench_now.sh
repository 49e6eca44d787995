#!/usr/bin/env bash
# this session's last call (deleted after): IMDB CORY alone, the profile's settings against ppo.compile (twice: cold,
# then with inductor's caches warm)
bash scripts/device_repro.sh install > /dev/null 2>&1
mkdir -p $OUT
timeout 170 python3 -m scripts.bench_rl --group imdb --run cory --iterations 10 --warmup 6 \
  --variant ppo.compile=true --variant ppo.compile=true 2>&1 | grep -E "^\[|bench_rl|Error" | tee $OUT/bench.txt
