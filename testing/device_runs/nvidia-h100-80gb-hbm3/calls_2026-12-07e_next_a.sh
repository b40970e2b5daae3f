# Prepared in the twenty-sixth session (2026-12-07) for the next one's device calls; kept as the record
# of what is meant to run (no target runs it). Run from main's checkout with .gpu/ carried:
#   bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07e_next_a.sh
# Next session's call A (prepared in the twenty-sixth): two same-run A/B probes and a branch's
# device suite. Trees first (from main's checkout):
#   rm -rf .gpu/trees/vt && mkdir -p .gpu/trees/vt && git archive wip/lane-vector-tokens | tar -x -C .gpu/trees/vt
set -u
root=$PWD; top=$OUT; t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export TILELANG_CACHE_DIR=/tmp/tl-cache PYTHONUNBUFFERED=1
# 1. swa_index: PDL released before / after the wait, and plain (main's checkout).
(OUT=$top PYTHONPATH=/tmp/site:$root:$root/platform timeout 200 \
  python3 testing/device_runs/nvidia-h100-80gb-hbm3/pdl_release_ab.py > $top/pdl_probe.log 2>&1)
echo "pdl probe rc $? $(( $(date +%s) - t0 )) s"; grep -v "TileLang\|ThreadSync" $top/pdl_probe.log | tail -8
# 2. lane kernel: vector tokens (tree vt) against main's lists.
(cd .gpu/trees/vt && OUT=$top PYTHONPATH=/tmp/site:$PWD:$PWD/platform VARIANTS=main=$root/kernels/schedule_mtp_varlen/cuda.py \
  BATCHES=256,512,1024 timeout 200 python3 testing/device_runs/nvidia-h100-80gb-hbm3/schedule_kernels_ab.py > $top/lane_probe.log 2>&1)
echo "lane probe rc $? $(( $(date +%s) - t0 )) s"; grep -v "TileLang\|ThreadSync" $top/lane_probe.log | tail -8
# 3. device suite of the vector-token branch (after the timings: nothing else on the GPU then).
(cd .gpu/trees/vt && PYTHONPATH=/tmp/site:$PWD:$PWD/platform TILELANG_OPS_BACKEND=cuda timeout 300 python3 -m pytest \
  kernels/schedule_mtp_varlen/schedule_mtp_varlen_test.py -p testing.plugin -p no:cacheprovider -p no:benchmark \
  --backend=cuda --tl-suite=device -n 12 -q -rs > $top/tests_vt.log 2>&1; echo "tests vt: $(tail -1 $top/tests_vt.log)")
grep -E "^FAILED|^ERROR" $top/tests_vt.log | head
echo "total $(( $(date +%s) - t0 )) s"
