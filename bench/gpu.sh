#!/usr/bin/env bash
# The checks that need a GPU, in one run of about 5 minutes, for a session lent a GPU machine
# (docs/development.md#a-gpu-machine): the elastic loop's overhead against plain DDP on
# three models, with the plain loop also reading loss.item() and as an A/A run;
# the CUDA host-sync test; the digits example on the GPU. The machine is offline and has
# torch: interstice is installed without its dependencies, which these checks do not import.
#
#   bash bench/gpu.sh OUT_DIR                      # on the GPU machine: OUT_DIR=$OUT
#   DEVICE=cpu ROUNDS=2 STEPS=2 MODELS="--model charlm:32" bash bench/gpu.sh /tmp/dry-run
#                                                  # the same flow on a CPU, small
#
# Writes OUT_DIR/card.txt (the card, driver, torch) and one log per check (at most 8 files,
# what the device tool brings back); prints each check's exit status and last lines.
set -u
out=${1:?usage: bash bench/gpu.sh OUT_DIR}
device=${DEVICE:-cuda}
rounds=${ROUNDS:-20}
steps=${STEPS:-20}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

if ! python3 -c "import interstice.elastic" 2>/dev/null; then
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$out/install.log" 2>&1 \
        || { echo "pip install -e . failed:"; tail -n 20 "$out/install.log"; exit 1; }
fi
{
    date -u +%FT%TZ
    git rev-parse --short HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    uptime
} > "$out/card.txt"
cat "$out/card.txt"

check() {  # check NAME COMMAND...: run it (at most 150 s), its output in OUT_DIR/NAME.log
    local name=$1
    shift
    echo "== $name: $*"
    timeout 150 "$@" > "$out/$name.log" 2>&1
    echo "exit status $?"
    tail -n 4 "$out/$name.log"
}

read -ra models <<< "${MODELS:---model charlm:256 --model resnet18:256 --model resnet50:512}"
elastic=(python3 bench/elastic.py --device "$device" --world-size 1 "${models[@]}")
check elastic "${elastic[@]}" --rounds "$rounds" --steps "$steps"
check elastic_item "${elastic[@]}" --rounds "$rounds" --steps "$steps" --plain-item
check elastic_aa "${elastic[@]}" --rounds "$rounds" --steps "$steps" --aa
if [ "$device" = cuda ]; then
    check host_syncs python3 -m pytest -q -p no:cacheprovider -m gpu tests/elastic/test_host_syncs.py
fi
check digits python3 examples/train_digits.py --total-samples 15000
