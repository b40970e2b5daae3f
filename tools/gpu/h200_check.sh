#!/usr/bin/env bash
# Runs on the lent H200 (no Bazel there): TileLang from the carried bundle, then the step named by $1.
#   tests      gather device tests (pytest-xdist, one GPU shared by the workers) + compute-sanitizer
#   bench      benchmarks twice (spread), refresh baselines/memory profiles, then the gate self-check
#   all        both
#   verify     committed baselines gate a fresh run; the profiler timer; two xdist workers on one GPU
#   sweep      the sweep on the GPU; everything it writes comes back as $OUT/sweep.tar
#   norm       norm device tests, benchmark (baselines/memory refreshed), as $OUT/norm.tar
#   basic-tests  device tests of $KERNELS (default: the basic-ops family), then memcheck
#   basic-bench  their benchmarks, baselines/memory refreshed (as $OUT/baselines.tar)
#   bench-split  benchmarks of $GPU0_KERNELS on GPU 0 and of $GPU1_KERNELS on GPU 1 at the same time, one
#                process per kernel in turn (each refreshes its baselines as it ends, as $OUT/baselines_<k>.tar)
#   multi-gpu    issue #9: device tests of $DEMO_KERNELS under xdist (-n 2 x GPUs) on every GPU, then
#                on GPU 0 alone, fresh per-worker TileLang caches each; bindings, GPU use sampled by
#                nvidia-smi, wall times, a test-by-test comparison; the benchmark refusal under xdist
# Knobs of the basic steps: KERNELS="quant norm" (the packages), TESTS_K (a pytest -k filter of the
# device tests), MEMCHECK=0 (skip compute-sanitizer), BENCH_FILTER (a --cases-filter regular expression),
# WORKERS (pytest-xdist workers of the device tests, default 15).
# Results go to $OUT.
set -uo pipefail
mkdir -p /tmp/site /tmp/sweep && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export PYTHONPATH=/tmp/site:$PWD:$PWD/platform PYTHONUNBUFFERED=1 TILELANG_OPS_BACKEND=cuda
export TILELANG_CACHE_DIR=/tmp/tl-cache
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, tilelang; print('torch', torch.__version__, 'tilelang', tilelang.__version__)"
step=${1:-tests}
pytest_args=(-p testing.plugin -p no:cacheprovider -p no:benchmark --backend=cuda)
run_tests() {
    python3 -m pytest kernels/gather/gather_test.py "${pytest_args[@]}" --tl-suite=device -n 8 -q -rs 2>&1 | tee "$OUT/gather_device_tests.log" | tail -25
    # memcheck over the device tests (the kernels are compiled by now); gather uses no shared memory,
    # so racecheck has nothing to check.
    compute-sanitizer --tool memcheck --target-processes all --print-limit 20 \
      python3 -m pytest kernels/gather/gather_test.py "${pytest_args[@]}" --tl-suite=device -q \
        -k "not 64bit and not 65536" 2>&1 | tee "$OUT/gather_memcheck.log" | tail -6
}
run_bench() {
    python3 -m testing.benchmark --kernels gather --repeat-runs 2 --refresh-baselines --refresh-memory \
      --json "$OUT/gather_bench.json" 2>&1 | tee "$OUT/gather_bench.log"
    python3 -m testing.benchmark --kernels gather --inject-extra-pass --cases-filter m32768 2>&1 | tee "$OUT/gather_gate_selfcheck.log" | tail -20
    cp -r testing/benchmark_baselines testing/gpu_mem_profiles "$OUT/" 2>/dev/null
}
run_verify() {
    python3 -m testing.benchmark --kernels gather 2>&1 | tee "$OUT/gather_vs_committed.log" | tail -16
    python3 -m testing.benchmark --kernels gather --method profiler --cases-filter d7168 --missing report \
      2>&1 | tee "$OUT/gather_profiler.log" | tail -9
    python3 -m pytest kernels/gather/gather_test.py "${pytest_args[@]}" --tl-suite=device -n 2 -q \
      -k "every_dtype" 2>&1 | tail -4 | tee "$OUT/xdist_binding.log"
}
run_sweep() {
    python3 tools/sweep.py --out /tmp/sweep 2>&1 | grep -v "TileLang:tilelang" | tee /tmp/sweep/sweep.log | tail -40
    tar -C /tmp -cf "$OUT/sweep.tar" sweep
}
run_norm() {
    mkdir -p /tmp/norm
    python3 -m pytest kernels/norm/norm_test.py "${pytest_args[@]}" --tl-suite=device -n 8 -q 2>&1 \
      | tee /tmp/norm/norm_device_tests.log | tail -15
    python3 -m testing.benchmark --kernels norm --refresh-baselines --refresh-memory --repeat-runs 2 2>&1 \
      | grep -v "TileLang:tilelang" | tee /tmp/norm/norm_bench.log | tail -30
    cp -r testing/benchmark_baselines testing/gpu_mem_profiles /tmp/norm/
    tar -C /tmp -cf "$OUT/norm.tar" norm
}
# The basic-ops family (norm, quant, outlier_detection) by default, any packages with KERNELS. Logs
# go straight into $OUT, so they come back even when a call runs out of time; each step fits one
# 10-minute device call on a cold cache (a cold benchmark of many kernels may not: narrow KERNELS).
read -r -a BASIC <<< "${KERNELS:-norm quant outlier_detection}"
run_basic_tests() {
    local files=() tag
    for k in "${BASIC[@]}"; do files+=("kernels/$k/${k}_test.py"); done
    tag=$(IFS=-; echo "${BASIC[*]}")
    python3 -m pytest "${files[@]}" "${pytest_args[@]}" --tl-suite=device -n "${WORKERS:-15}" -q -rs ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
      | grep --line-buffered -v "device binding" > "$OUT/device_tests_$tag.log"
    tail -4 "$OUT/device_tests_$tag.log"
    [ "${MEMCHECK:-1}" = 0 ] && return
    compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest "${files[@]}" "${pytest_args[@]}" \
      --tl-suite=device -q -k "(fp8 or fp4 or quant) and not 64bit and not 65537 and not 16384 and not 4096" \
      > "$OUT/memcheck_$tag.log" 2>&1
    tail -3 "$OUT/memcheck_$tag.log"
}
run_basic_bench() {
    local tag
    tag=$(IFS=-; echo "${BASIC[*]}")${BENCH_FILTER:+-$BENCH_FILTER}
    python3 -m testing.benchmark --kernels "$(IFS=,; echo "${BASIC[*]}")" --refresh-baselines --refresh-memory \
      ${BENCH_FILTER:+--cases-filter "$BENCH_FILTER"} --json "$OUT/bench_$tag.json" > "$OUT/bench_$tag.log" 2>&1
    grep -v "TileLang:tilelang" "$OUT/bench_$tag.log" | tail -60
    tar -cf "$OUT/baselines.tar" testing/benchmark_baselines testing/gpu_mem_profiles
}
bench_in_turn() {  # GPU index, then kernel names: one benchmark process per kernel, in turn
    local gpu=$1 k
    shift
    for k in "$@"; do
        CUDA_VISIBLE_DEVICES=$gpu python3 -m testing.benchmark --kernels "$k" --refresh-baselines --refresh-memory \
          --json "$OUT/bench_$k.json" > "$OUT/bench_$k.log" 2>&1
        grep -E "^RESULT|copy ceiling" "$OUT/bench_$k.log" | sed "s/^/gpu$gpu $k: /"
        tar -cf "$OUT/baselines_$k.tar" testing/benchmark_baselines/*/"$k".jsonl testing/gpu_mem_profiles/*/"$k".jsonl
    done
}
run_bench_split() {
    local g0 g1
    read -r -a g0 <<< "${GPU0_KERNELS:-}"
    read -r -a g1 <<< "${GPU1_KERNELS:-}"
    bench_in_turn 0 "${g0[@]}" &
    bench_in_turn 1 "${g1[@]}"
    wait
}
read -r -a DEMO <<< "${DEMO_KERNELS:-schedule_mtp_varlen swa_index candidate_blocks}"
run_multi_gpu() {
    local files=() gpus run vis t0 sampler
    for k in "${DEMO[@]}"; do files+=("kernels/$k/${k}_test.py"); done
    gpus=$(nvidia-smi -L | grep -c '^GPU')
    nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader | tee "$OUT/gpus.csv"
    for run in ${RUNS:-all-gpus gpu0-only}; do
        vis=; [ "$run" = gpu0-only ] && vis=0
        (while :; do nvidia-smi --query-compute-apps=gpu_bus_id,pid --format=csv,noheader; sleep 1; done) \
          > "$OUT/apps_$run.log" 2>&1 &
        sampler=$!
        t0=$(date +%s)
        env ${vis:+CUDA_VISIBLE_DEVICES=$vis} TILELANG_OPS_PER_WORKER_CACHE=1 TILELANG_OPS_CACHE_BASE="/tmp/tlc-$run" \
          python3 -m pytest "${files[@]}" "${pytest_args[@]}" --tl-suite=device -n $((2 * gpus)) -q -rs \
          --junitxml="$OUT/junit_$run.xml" > "$OUT/xdist_$run.log" 2>&1
        echo "$run: CUDA_VISIBLE_DEVICES=${vis:-unset}, -n $((2 * gpus)), wall $(( $(date +%s) - t0 )) s" \
          | tee -a "$OUT/multi_gpu.txt"
        kill "$sampler"
        { tail -1 "$OUT/xdist_$run.log"; grep "device binding:" "$OUT/xdist_$run.log"
          echo "processes seen per GPU (bus id: distinct pids):"
          grep -v "No running" "$OUT/apps_$run.log" | sort -u | awk -F', ' '{n[$1]++} END {for (b in n) print "  " b ": " n[b]}'
          echo "TileLang cache dirs: $(ls -d /tmp/tlc-$run/* | tr '\n' ' ')"; } | tee -a "$OUT/multi_gpu.txt"
    done
    python3 tools/gpu/compare_junit.py "$OUT/junit_all-gpus.xml" "$OUT/junit_gpu0-only.xml" | tee -a "$OUT/multi_gpu.txt"
    for n in $((2 * gpus)) "$gpus"; do
        echo "benchmark with PYTEST_XDIST_WORKER_COUNT=$n on $gpus GPUs:" | tee -a "$OUT/multi_gpu.txt"
        PYTEST_XDIST_WORKER_COUNT=$n python3 -m testing.benchmark --kernels "${DEMO[0]}" --cases-filter b1_ \
          2>&1 | grep -E "refused|device:|copy ceiling" | head -3 | tee -a "$OUT/multi_gpu.txt"
    done
}
case "$step" in
  basic-tests) run_basic_tests ;;
  multi-gpu) run_multi_gpu ;;
  bench-split) run_bench_split ;;
  basic-bench) run_basic_bench ;;
  sweep) run_sweep ;;
  norm) run_norm ;;
  final) run_norm; run_sweep ;;
  tests) run_tests ;;
  verify) run_verify ;;
  bench) run_bench ;;
  all) run_tests; run_bench ;;
esac
# The device tool brings back at most 8 files: when a step wrote more, they travel as one tar.
if [ "$(ls -A "$OUT" | wc -l)" -gt 8 ]; then
    (cd "$OUT" && tar -cf /tmp/results.tar . && find . -mindepth 1 -delete && mv /tmp/results.tar .)
fi
