#!/usr/bin/env bash
# Set up swarmnode in ./.venv: `bash packaging/setup.sh` for a node, `bash packaging/setup.sh test`
# for the test suite too. Safe to run again.
#
# torch comes first: where no NVIDIA GPU is present on Linux, the CPU build (a few hundred MB)
# instead of the default build with several GB of CUDA libraries. macOS gets the regular
# build (CPU + MPS); CUDA machines get the regular CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
extras=""
[ "${1:-}" = "test" ] && extras="[test]"

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if [ "$(uname -s)" = "Linux" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "setup: no NVIDIA GPU found: installing the CPU build of torch $TORCH_VERSION"
    pip install --retries 1 --timeout 20 "torch==$TORCH_VERSION" \
        --index-url https://download.pytorch.org/whl/cpu \
      || pip install "torch==$TORCH_VERSION"
  else
    pip install "torch==$TORCH_VERSION"
  fi
fi
pip install -e ".$extras"
echo "setup: done. Start a node with: .venv/bin/swarmnode start"
