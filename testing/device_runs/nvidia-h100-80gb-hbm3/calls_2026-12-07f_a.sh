# Twenty-seventh session (2026-12-07), call A, run from main's checkout with .gpu/ carried:
#   bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07f_a.sh
# 1. swa_index PDL-release A/B (pdl_release_ab.py); 2. device suites of schedule_mtp_varlen (the
# 232c5a4 mend, not yet run on a GPU) and swa_index; 3. main's swa_index bench on the anomalous case
# (the timer change of the twenty-sixth session, not yet run on a GPU).
set -u
root=$PWD; top=$OUT; t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
(OUT=$top PYTHONPATH=/tmp/site:$root:$root/platform TILELANG_CACHE_DIR=/tmp/tl-cache PYTHONUNBUFFERED=1 timeout 200 \
  python3 testing/device_runs/nvidia-h100-80gb-hbm3/pdl_release_ab.py > $top/pdl_probe.log 2>&1)
echo "pdl probe rc $? $(( $(date +%s) - t0 )) s"; grep -v "TileLang\|ThreadSync" $top/pdl_probe.log | tail -12
mkdir -p $top/v
OUT=$top/v WORKERS=12 TEST_KERNELS="schedule_mtp_varlen swa_index" GPU0_KERNELS="swa_index:b64_mtp1_w4096" GPU1_KERNELS="" \
  BUDGET=$(( ${TOTAL:-570} - ($(date +%s) - t0) )) bash tools/gpu/verify.sh
echo "total $(( $(date +%s) - t0 )) s"
