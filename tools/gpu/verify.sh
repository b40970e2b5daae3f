#!/usr/bin/env bash
# One device call on a 2-GPU machine: device tests of $TEST_KERNELS over both GPUs (-n $WORKERS),
# then benchmarks of $GPU0_KERNELS on GPU 0 and $GPU1_KERNELS on GPU 1 at the same time (one process
# per kernel, baselines and memory profiles refreshed), each cut off so that the whole run ends
# within $BUDGET seconds; everything comes back as $OUT/results.tar (the tool returns at most 8 files).
#   TEST_KERNELS="sampler fused_sample" GPU0_KERNELS=fused_sample GPU1_KERNELS=sampler BUDGET=540 \
#     bash tools/gpu/verify.sh
# TEST_K (optional) is passed to pytest as -k. A bench entry KERNEL:FILTER runs only the cases whose
# id contains FILTER (--cases-filter); the baseline file merges per case, so a kernel whose bench
# does not fit one process can be listed several times (GPU0_KERNELS="swa_index:_w128 swa_index:_w512").
# A GPU with no kernels to bench (GPU1_KERNELS="") makes this a one-GPU run.
set -u
t0=$(date +%s)
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export PYTHONPATH=/tmp/site:$PWD:$PWD/platform PYTHONUNBUFFERED=1 TILELANG_OPS_BACKEND=cuda TILELANG_CACHE_DIR=/tmp/tl-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpus.txt
files=(); for k in ${TEST_KERNELS:-}; do files+=("kernels/$k/${k}_test.py"); done
select=(); [ -n "${TEST_K:-}" ] && select=(-k "$TEST_K")
[ ${#files[@]} -gt 0 ] && python3 -m pytest "${files[@]}" "${select[@]}" -p testing.plugin -p no:cacheprovider -p no:benchmark \
  --backend=cuda --tl-suite=device -n ${WORKERS:-30} -q -rs > $OUT/tests.log 2>&1
[ ${#files[@]} -gt 0 ] && { tail -2 $OUT/tests.log; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20; }
echo "tests: $(( $(date +%s) - t0 )) s"
end=$(( t0 + ${BUDGET:-540} ))
bench() {  # gpu kernel[:cases-filter]
    local left=$(( end - $(date +%s) )) kernel=${2%%:*} filter=() name=${2//:/_}
    [ "$kernel" != "$2" ] && filter=(--cases-filter "${2#*:}")
    [ $left -lt 20 ] && { echo "gpu$1 $2: no time left"; return; }
    # SIGABRT at the cut makes faulthandler print where each thread was (a stalled case shows itself).
    CUDA_VISIBLE_DEVICES=$1 timeout -s ABRT $left python3 -X faulthandler -m testing.benchmark --kernels $kernel "${filter[@]}" \
      --refresh-baselines --refresh-memory --json $OUT/bench_$name.json > $OUT/bench_$name.log 2>&1
    echo "gpu$1 $2: rc $? $(grep -E '^RESULT' $OUT/bench_$name.log)"
}
(for k in ${GPU0_KERNELS:-}; do bench 0 $k; done) &
(for k in ${GPU1_KERNELS:-}; do bench 1 $k; done)
wait
tar -cf $OUT/baselines.tar testing/benchmark_baselines testing/gpu_mem_profiles
cd $OUT && tar -cf /tmp/results.tar . && find . -mindepth 1 -delete && mv /tmp/results.tar .
