# Twenty-ninth session (2026-12-07), one call from main's checkout with .gpu/ carried, on whichever
# card comes (H200 or H100):
#   TOTAL=560 bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07h.sh
# First the lanes-per-token A/B of store_kv_cache's record kernels (store_record_lanes_ab.py, at
# most AB_S seconds); then, in the time left, benches of $BENCHES (default: the decode cases of
# norm, quant, outlier_detection and schedule_mtp_varlen, whose H200 baselines predate programmatic
# dependent launch) through tools/gpu/verify.sh, to be folded with
#   python3 -m testing.device_results CALL/results.tar
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
PYTHONPATH=/tmp/site:$PWD:$PWD/platform TILELANG_CACHE_DIR=/tmp/tl-cache OUT=$OUT \
  VARIANTS="${VARIANTS:-l16=16,l32=32,l64=64,l32t256=32:256,l64t256=64:256}" \
  timeout ${AB_S:-200} python3 testing/device_runs/nvidia-h100-80gb-hbm3/store_record_lanes_ab.py > $OUT/ab.log 2>&1
echo "ab rc $? after $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
OUT=$OUT WORKERS=1 TEST_KERNELS="" GPU1_KERNELS="" BUDGET=$(( ${TOTAL:-560} - ($(date +%s) - t0) )) \
  GPU0_KERNELS="${BENCHES:-norm:t(1|8|64|256)_d quant:_t(1|8|64|256)_d outlier_detection:_t(1|8|64|256)_d schedule_mtp_varlen}" \
  bash tools/gpu/verify.sh
