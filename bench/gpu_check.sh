#!/usr/bin/env bash
# The one command on the GPU machine (Python 3.12 with PyTorch, CUDA's compiler, CMake and ninja; no
# network): the carried wheels into a folder of their own, then bench/gpu_check.py. Needs `.gpu`
# (bench/gpu_prepare.py) carried beside the working tree.
#
#   bench/gpu_check.sh OUT [gpu_check.py's flags]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bench/gpu_check.sh OUT [flags]}"
shift
site=/tmp/conformant-gpu/site
mkdir -p "$site" "$out"
# The project's wheel among them, for its entry points (`python -m backend` is `conformant backend`);
# the working tree comes first on the path, so the code that runs is the tree's, not the wheel's.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .gpu/wheels/*.whl
export PYTHONPATH="$PWD:$site" PYTHONUNBUFFERED=1
exec python3 bench/gpu_check.py --out "$out" "$@"
