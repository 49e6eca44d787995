#!/usr/bin/env bash
# Usage: usage_sampler.sh PID FILE. Once a second until process PID ends, one CSV row in FILE:
#   unix time, GPU utilization % (the share of the second in which a kernel ran, nvidia-smi's), GPU memory used MiB,
#   host CPU busy % over all cores (from /proc/stat: 100 - idle - iowait), cores
# (device_repro.sh starts it beside a background job; a stage bound by the host shows busy cores and an idle GPU.)
set -u
pid=$1 file=$2
cores=$(nproc)
echo "time,gpu_util,gpu_mem_mib,cpu_busy,cores" > "$file"
read -r _ u n s i w q sq st _ < /proc/stat
prev_total=$((u + n + s + i + w + q + sq + st)) prev_idle=$((i + w))
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  read -r _ u n s i w q sq st _ < /proc/stat
  total=$((u + n + s + i + w + q + sq + st)) idle=$((i + w))
  busy=$(( 100 * ((total - prev_total) - (idle - prev_idle)) / ((total - prev_total) > 0 ? (total - prev_total) : 1) ))
  prev_total=$total prev_idle=$idle
  gpu=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
  echo "$(date +%s),${gpu:-,},$busy,$cores" >> "$file"
done
