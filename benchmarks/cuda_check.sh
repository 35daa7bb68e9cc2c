#!/usr/bin/env bash
# Every CUDA check in one command, for a machine with a GPU (CI has none; there these tests skip with the reason).
#   benchmarks/cuda_check.sh [extra pytest args]
# 1. the tests marked `cuda` (cross-device stage, device items through the plugin);
# 2. the deployment corpus on cpu and cuda, with AOTInductor (logs and the JSON report under $OUT, else $TMPDIR).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-${TMPDIR:-/tmp}/pytest-export-cuda}"
mkdir -p "$out"
python -c 'import torch; assert torch.cuda.is_available(), "no CUDA device: nothing to check"; print(torch.__version__, torch.cuda.get_device_name(0))'
status=0
PYTEST_EXPORT_AOTI=1 python -m pytest -p no:cacheprovider -m cuda -rs -q --durations=10 \
    tests/test_option_export_devices.py tests/test_aoti.py "$@" \
    2>&1 | tee "$out/cuda_tests.log" || status=1
python -m pytest -p no:cacheprovider corpus/test_deployment.py --export-check --export-devices cpu,cuda \
    --export-aoti --export-report "$out/deployment_cuda.json" -n 4 -q -rs --durations=10 "$@" \
    2>&1 | tee "$out/deployment_cuda.log" || status=1
exit $status
