# Twenty-eighth session (2026-12-07): one call for whichever card comes, run from main's checkout
# with .gpu/ carried (and .gpu/trees/rf made as calls_2026-12-07f_b.sh says):
#   TOTAL=560 bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07g_one.sh
# 1. The device tests the twenty-seventh session changed and never ran on a GPU (quant's FP8 checks
#    under both byte poisons, outlier_detection's 64-bit offsets over every row, load_paged_kv_cache's
#    non-finite cache content) and norm's graph-replay, special-row and 64-bit tests (its entry is
#    now prefetch, wait, release), cut at TESTS seconds.
# 2. On an H100: calls_2026-12-07f_b.sh's PDL chain probe (release before the wait in rf, after it
#    in the checkout), each tree cut at EACH seconds. On an H200: the decode-size benches of
#    calls_2026-12-07g_h.sh (their H200 baselines predate PDL) in the time left.
set -u
root=$PWD; top=$OUT; t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export TILELANG_CACHE_DIR=/tmp/tl-cache PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"
PYTHONPATH=/tmp/site:$root:$root/platform TILELANG_OPS_BACKEND=cuda timeout ${TESTS:-170} python3 -m pytest \
  "kernels/outlier_detection/outlier_detection_test.py::test_device_64bit_offsets" \
  "kernels/load_paged_kv_cache/load_paged_kv_cache_test.py::test_device_non_finite_records" \
  kernels/quant/quant_test.py kernels/norm/norm_test.py \
  -k "outlier_detection or load_paged or quant_fp8 and not block and not options or norm and (graph_replay or special_rows or 64bit)" \
  -p testing.plugin -p no:cacheprovider -p no:benchmark --backend=cuda --tl-suite=device -n 16 -q -rs > $top/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s: $(tail -1 $top/tests.log)"; grep -E "^FAILED|^ERROR" $top/tests.log | head
left=$(( ${TOTAL:-560} - ($(date +%s) - t0) ))
if [[ $gpu == *H200* ]]; then
  mkdir -p $top/bench && OUT=$top/bench TOTAL=$left bash testing/device_runs/nvidia-h200/calls_2026-12-07g_h.sh
else
  mkdir -p $top/probe && OUT=$top/probe EACH=$(( left / 2 - 5 )) TOTAL=$left bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07f_b.sh
fi
echo "total $(( $(date +%s) - t0 )) s"
