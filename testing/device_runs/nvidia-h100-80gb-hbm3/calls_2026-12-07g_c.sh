# Twenty-eighth session (2026-12-07), call C, run from main's checkout with .gpu/ carried, right
# after call B (calls_2026-12-07f_b.sh) on the same warm machine:
#   bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07g_c.sh
# Benches of $BENCHES (default: swa_index's, every case) with the release after the wait (e59e7da):
# their H100 baselines were measured with the release first, their H200 ones before PDL (on an
# H200: BENCHES="schedule_mtp_varlen swa_index:_mtp1_"). The refreshed cases come back in
# results.tar, to be folded with
#   python3 -m testing.device_results CALL/results.tar
# only where call B's probe shows the new order no slower.
set -u
OUT=$OUT WORKERS=1 TEST_KERNELS="" GPU0_KERNELS="${BENCHES:-swa_index:_mtp1_ swa_index:_mtp3_}" GPU1_KERNELS="" \
  BUDGET=${TOTAL:-560} bash tools/gpu/verify.sh
