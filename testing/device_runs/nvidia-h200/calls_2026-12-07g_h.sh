# Twenty-eighth session (2026-12-07), for an H200, run from main's checkout with .gpu/ carried:
#   BENCHES="..." bash testing/device_runs/nvidia-h200/calls_2026-12-07g_h.sh
# The decode-size cases of the H200 baselines were measured before programmatic dependent launch
# (every sm_90+ kernel now starts with kernels/tl_launch.dependent_entry: wait, then release): the
# issues' 1.5x-of-an-empty-kernel bars are defined on this card. One bench process per kernel: on
# an H100 a process's first case took 16-35 s and later ones mostly under 7 s (calls_2026-12-07g.md
# of nvidia-h100-80gb-hbm3), so the default list (43 cases) should fit one call, and
# BENCHES="swa_index get_kv_index candidate_blocks:decode load_paged_kv_cache:_b(1|8)_" (68) a second.
# The refreshed cases come back in results.tar, to be folded with
#   python3 -m testing.device_results CALL/results.tar
set -u
OUT=$OUT WORKERS=1 TEST_KERNELS="" GPU1_KERNELS="" BUDGET=${TOTAL:-560} GPU0_KERNELS="${BENCHES:-norm:t(1|8|64|256)_d \
quant:_t(1|8|64|256)_d outlier_detection:_t(1|8|64|256)_d store_kv_cache:_t(1|8|64|256)_ schedule_mtp_varlen}" \
  bash tools/gpu/verify.sh
