# Twenty-eighth session (2026-12-07), for an H200, run from main's checkout with .gpu/ carried:
#   BENCHES="..." bash testing/device_runs/nvidia-h200/calls_2026-12-07g_h.sh
# The decode-size cases of the H200 baselines were measured before programmatic dependent launch
# (every sm_90+ kernel now starts with kernels/tl_launch.dependent_entry: wait, then release): the
# issues' 1.5x-of-an-empty-kernel bars are defined on this card. Default: norm's and quant's decode
# sizes, one process each. The refreshed cases come back in results.tar, to be folded with
#   python3 -m testing.device_results CALL/results.tar
set -u
OUT=$OUT WORKERS=1 TEST_KERNELS="" GPU1_KERNELS="" BUDGET=${TOTAL:-560} \
  GPU0_KERNELS="${BENCHES:-norm:t(1|8|64|256)_d quant:_t(1|8|64|256)_d outlier_detection:_t(1|8|64|256)_d}" bash tools/gpu/verify.sh
