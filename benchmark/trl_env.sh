#!/usr/bin/env bash
# trl 0.11.4 (the last trl with the legacy PPOTrainer.step) in a folder of its own, for benchmark/trl.py:
#   bash benchmark/trl_env.sh DIR                      # download the wheels into DIR/wheels (needs PyPI), install into DIR
#   bash benchmark/trl_env.sh download WHEELS [PYVER]  # the wheels only, for Python PYVER (e.g. 3.12; default: this one)
#   bash benchmark/trl_env.sh install WHEELS DIR       # install from WHEELS only (a machine without network)
# trl 0.11.4 needs transformers 4.x, which the project's environment (transformers 5) cannot hold, so these go into
# DIR with --target and --no-deps: a process with PYTHONPATH=DIR first sees them over the project's packages and
# takes everything else (torch, accelerate, numpy, datasets' dependencies, ...) from the project's environment. The
# set is what trl 0.11.4 imports and the project's environment has at a version it cannot use, or lacks.
# All but tokenizers' wheel are pure Python; tokenizers' is built per Python version, hence PYVER for another machine
# (the lent GPU machines run Python 3.12 on x86-64).
set -euo pipefail
PIP=${PIP:-python3 -m pip}
WHEELS=(trl==0.11.4 transformers==4.46.3 tokenizers==0.20.3 huggingface_hub==0.36.0 datasets==3.6.0 tyro==0.8.14
        docstring-parser shtab typeguard)
download() {  # WHEELS_DIR [PYVER]
  local target=()
  [[ -n "${2:-}" ]] && target=(--python-version "$2" --implementation cp --platform manylinux2014_x86_64
                               --platform manylinux_2_17_x86_64 --platform any)
  $PIP download --no-deps --only-binary=:all: "${target[@]}" "${WHEELS[@]}" -d "$1"
}
install() {  # WHEELS_DIR DIR
  $PIP install --no-deps --no-index --upgrade --target "$2" "$1"/*.whl
  echo "trl env ready: PYTHONPATH=$2 python3 -c 'import trl'"
}
case "${1:?usage: $0 DIR | download WHEELS [PYVER] | install WHEELS DIR}" in
  download) download "${2:?WHEELS}" "${3:-}" ;;
  install) install "${2:?WHEELS}" "${3:?DIR}" ;;
  *) download "$1/wheels" && install "$1/wheels" "$1" ;;
esac
