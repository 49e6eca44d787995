#!/usr/bin/env bash
# On a four-GPU machine (kind nvidia-h200-x4 / nvidia-h100-x4), both repro timings of docs/scale.md in one go:
# the default `dvc repro` on GPU 0 and 16 cores (a one-GPU machine's), and the train stage again on GPUs 1-2 and 32
# cores (a two-GPU machine's) beside it, started once the repro's train stage begins (lab/bench/gpus.sh BESIDE).
#   call 1: bash lab/offline-gpu/device_beside.sh && bash lab/offline-gpu/device_repro.sh wait 500; bash lab/offline-gpu/device_repro.sh collect > /dev/null
#   call 2: bash lab/offline-gpu/device_repro.sh wait 500; bash lab/offline-gpu/device_repro.sh collect > /dev/null; TAG=gpus bash lab/offline-gpu/device_repro.sh log
# Send call 2 the moment call 1 returns: the lending tool gives an idle machine back after 30 s, and the next call
# then finds a fresh one without the runs (2026-11-28: a repro lost 480 s in that way).
set -u
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 bash lab/offline-gpu/device_repro.sh start
TAG=gpus RUN="ALL=1,2 BESIDE=/root/cory-repro bash lab/bench/gpus.sh" taskset -c 16-47 bash lab/offline-gpu/device_repro.sh start | tail -1
