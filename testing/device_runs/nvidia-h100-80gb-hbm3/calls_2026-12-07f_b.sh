# Twenty-seventh session (2026-12-07), call B, run from main's checkout with .gpu/ carried:
#   bash testing/device_runs/nvidia-h100-80gb-hbm3/calls_2026-12-07f_b.sh
# The PDL chain probe (testing/device_runs/nvidia-h200/pdl_chain_probe.py: the bench's cases through
# the interfaces, PDL forced off and on) in two trees, one process each: rf = main before the
# release moved after the wait (232c5a4), made here first with
#   rm -rf .gpu/trees/rf && mkdir -p .gpu/trees/rf && git archive 232c5a4 | tar -x -C .gpu/trees/rf
# and the checkout (release after the wait). The plain (pdl=False) rows are the same kernels in both:
# they show the drift between the two processes.
set -u
root=$PWD; top=$OUT; t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export TILELANG_CACHE_DIR=/tmp/tl-cache PYTHONUNBUFFERED=1
# The probe's decode cases (its large ones left out to fit the call).
export CASE_IDS=t1_d7168_bf16,t64_d7168_bf16,add_fp8_g128_t1_d7168_bf16,mla_bf16_t1_d576,mla_bf16_t64_d576,mla_fp4_t256_d576,\
decode_b1_k1,decode_b1024_k1,decode_b1_mtp1_w128,decode_b64_mtp1_w4096,decode_b256_mtp1_w4096,decode_b1024_mtp3_w4096,\
slots_decode_b1_t1,fp8_t1_d7168_g128,decode_t64_nb2048_k64
probe=$root/testing/device_runs/nvidia-h200/pdl_chain_probe.py
for t in rf late; do
  dir=$root; [ $t = rf ] && dir=$root/.gpu/trees/rf
  mkdir -p $top/$t
  (cd $dir && OUT=$top/$t PYTHONPATH=/tmp/site:$dir:$dir/platform timeout ${EACH:-260} python3 $probe > $top/$t.log 2>&1)
  echo "$t rc $? $(( $(date +%s) - t0 )) s"
done
paste <(grep " us$" $top/rf.log) <(grep " us$" $top/late.log) | sed 's/  */ /g'
# The tests this session changed (quant's FP8 checks with two poisons, outlier_detection's 64-bit
# offsets, load_paged_kv_cache's non-finite cache content) and the norm suite with the new entry
# (prefetch, wait, release), cut to fit.
left=$(( ${TOTAL:-570} - ($(date +%s) - t0) ))
if [ $left -ge 40 ]; then
  PYTHONPATH=/tmp/site:$root:$root/platform TILELANG_OPS_BACKEND=cuda timeout $(( left - 10 )) python3 -m pytest \
    "kernels/outlier_detection/outlier_detection_test.py::test_device_64bit_offsets" kernels/quant/quant_test.py \
    "kernels/load_paged_kv_cache/load_paged_kv_cache_test.py::test_device_non_finite_records" -k "64bit or fp8 or norm or non_finite" \
    kernels/norm/norm_test.py -p testing.plugin -p no:cacheprovider -p no:benchmark \
    --backend=cuda --tl-suite=device -n 16 -q -rs > $top/tests_late.log 2>&1
  echo "tests late rc $?: $(tail -1 $top/tests_late.log)"; grep -E "^FAILED|^ERROR" $top/tests_late.log | head
fi
echo "total $(( $(date +%s) - t0 )) s"
