# Prepared in the twenty-sixth session (2026-12-07) for the next one's device calls; kept as the record
# of what is meant to run (no target runs it). Run from main's checkout with .gpu/ carried:
#   bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07e_next_b.sh
# Next session's call B: benches of wip/pdl-late (tree pl) beside main's on decode cases (same
# machine, one process each), then ncu of the lane kernel at B 1024. Tree first:
#   rm -rf .gpu/trees/pl && mkdir -p .gpu/trees/pl && git archive wip/pdl-late | tar -x -C .gpu/trees/pl
set -u
root=$PWD; top=$OUT; t0=$(date +%s)
mkdir -p $top/v $top/ncu
OUT=$top/v TEST_KERNELS="" GPU0_KERNELS="swa_index:b64_mtp1_w4096 pl/swa_index:b64_mtp1_w4096 norm:t64_d7168 pl/norm:t64_d7168 store_kv_cache:_t1_ pl/store_kv_cache:_t1_ schedule_mtp_varlen:b1024 pl/schedule_mtp_varlen:b1024" GPU1_KERNELS="" BUDGET=$(( ${TOTAL:-560} - 60 )) bash tools/gpu/verify.sh
export PYTHONPATH=/tmp/site:$root:$root/platform TILELANG_CACHE_DIR=/tmp/tl-cache TILELANG_OPS_BACKEND=cuda
c=decode_b1024_k3
left=$(( ${TOTAL:-560} - ($(date +%s) - t0) ))
if [ $left -ge 25 ]; then
  timeout $(( left < 45 ? left : 45 )) ncu --profile-from-start off --clock-control none \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section InstructionStats --section SourceCounters \
    -o $top/ncu/$c python3 testing/device_runs/nvidia-h200/ncu_case.py schedule_mtp_varlen $c > $top/ncu/$c.log 2>&1
  echo "ncu $c rc $?"
  ncu -i $top/ncu/$c.ncu-rep --page details --csv > $top/ncu/${c}_details.csv 2>> $top/ncu/$c.log
  ncu -i $top/ncu/$c.ncu-rep --page source --csv --print-source sass > $top/ncu/${c}_sass.csv 2>> $top/ncu/$c.log
fi
cd $top/ncu && tar -cf $top/ncu.tar . && cd $top && rm -rf ncu
echo "total $(( $(date +%s) - t0 )) s"; ls $top $top/v
