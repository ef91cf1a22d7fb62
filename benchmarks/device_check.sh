#!/usr/bin/env bash
# The target engine's GPU check (benchmarks/device_check.py): greedy on = off and verify step costs, eager
# against compiled, on a random Llama-3-8B-shaped bf16 model. Results in ${OUT:-.}/device_check.json.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
timeout 470 python benchmarks/device_check.py --shape llama-3-8b --device cuda:0 --out "${OUT:-.}/device_check.json"
