#!/usr/bin/env bash
# trl 0.11.4 (the last trl with the legacy PPOTrainer.step) in a folder of its own, for benchmark/trl.py:
#   bash benchmark/trl_env.sh DIR            # download the wheels into DIR/wheels (needs PyPI) and install them into DIR
#   bash benchmark/trl_env.sh DIR --offline  # install from DIR/wheels only (a machine without network, the folder
#                                            # copied there)
# trl 0.11.4 needs transformers 4.x, which the project's environment (transformers 5) cannot hold, so these go into
# DIR with --target and --no-deps: a process with PYTHONPATH=DIR first sees them over the project's packages and
# takes everything else (torch, accelerate, numpy, ...) from the project's environment. The set is what trl 0.11.4
# imports and that the project's environment has at a version it cannot use (or lacks).
# Every wheel is pure Python except tokenizers' (abi3, manylinux x86_64), so one download serves CPU and GPU machines.
set -euo pipefail
dir=${1:?usage: $0 DIR [--offline]}
mode=${2:-}
PIP=${PIP:-python -m pip}
wheels=(trl==0.11.4 transformers==4.46.3 tokenizers==0.20.3 huggingface_hub==0.36.0 datasets==3.6.0 tyro==0.8.14
        docstring-parser shtab typeguard)
mkdir -p "$dir/wheels"
if [[ "$mode" != "--offline" ]]; then
  $PIP download --no-deps --only-binary=:all: "${wheels[@]}" -d "$dir/wheels"
fi
$PIP install --no-deps --no-index --upgrade --target "$dir" "$dir"/wheels/*.whl
echo "trl env ready: PYTHONPATH=$dir python -c 'import trl'"
