#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and its driver: builds with --features
# cuda, runs the CUDA tests against the real driver, runs the CUDA benches
# quickly, runs the Vulkan tests on the machine's Vulkan driver where one
# is installed with the validation layers (the tests need them), and
# writes a summary (default: gpu-check-summary.txt).
#
#   scripts/gpu-check.sh [summary-file]
#
# FENCELINE_CUDA=real makes the tests use the installed driver (never the
# simulator) and fail, rather than skip, when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
summary=${1:-gpu-check-summary.txt}
logs=$(mktemp -d)
export FENCELINE_CUDA=real CARGO_TERM_COLOR=never
offline=()
if [ -d vendor ] || [ "${CARGO_NET_OFFLINE:-}" = true ]; then offline=(--offline); fi

{
  echo "# fenceline GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  (nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available") | sed 's/^/gpu: /'
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$summary"

echo "==> build"
cargo build "${offline[@]}" --release --features cuda --tests --benches 2>&1 | tail -3

echo "==> CUDA tests (real driver)"
status=0
cargo test "${offline[@]}" --release --features cuda \
  --test cuda_scenarios --test cuda_device --test cuda_allocates_nothing_after_warmup \
  --test cuda_priorities \
  -- --nocapture 2>&1 | tee "$logs/tests.log" || status=$?
{
  echo
  echo "## tests (exit $status)"
  grep -E '^test result:|skipped|panicked|FAILED' "$logs/tests.log" || true
} >> "$summary"

echo "==> Vulkan tests (the machine's driver, where one is installed)"
if command -v vulkaninfo >/dev/null 2>&1 \
  && vulkaninfo --summary 2>/dev/null | grep -q VK_LAYER_KHRONOS_validation; then
  # The device under test: FENCELINE_VULKAN_DEVICE (the loader's order;
  # `vulkaninfo --summary` lists them), default 0. The driver layer's unit
  # tests, the shared scenarios, the device's own tests and the
  # zero-allocation count.
  FENCELINE_VULKAN=gpu cargo test "${offline[@]}" --release --features vulkan --lib vulkan \
    -- --nocapture 2>&1 | tee "$logs/vulkan.log" || status=$?
  FENCELINE_VULKAN=gpu cargo test "${offline[@]}" --release --features vulkan \
    --test vulkan_scenarios --test vulkan_device --test vulkan_allocates_nothing_after_warmup \
    2>&1 | tee -a "$logs/vulkan.log" || status=$?
  {
    echo
    echo "## Vulkan tests"
    vulkaninfo --summary 2>/dev/null | grep -E 'deviceName|driverName|apiVersion' | sed 's/^[[:space:]]*/vulkan: /' || true
    grep -E '^test result:|panicked|FAILED' "$logs/vulkan.log" || true
  } >> "$summary"
else
  echo "no Vulkan driver with the Khronos validation layers (vulkaninfo): skipped" | tee -a "$summary"
fi

echo "==> CUDA benches (quick)"
cargo bench "${offline[@]}" --features cuda --bench cuda -- \
  --warm-up-time 1 --measurement-time 3 --noplot 2>&1 | tee "$logs/bench.log" || status=$?
{
  echo
  echo "## benches (criterion: [low estimate high] per iteration)"
  grep -E '^[a-z_0-9]+/[a-z_0-9]+|time:' "$logs/bench.log" | paste - - || true
} >> "$summary"

echo
cat "$summary"
exit "$status"
