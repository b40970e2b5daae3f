#!/usr/bin/env bash
# One device call on a 2-GPU machine: device tests of $TEST_KERNELS over both GPUs (-n $WORKERS),
# then benchmarks of $GPU0_KERNELS on GPU 0 and $GPU1_KERNELS on GPU 1 at the same time (one process
# per kernel, baselines and memory profiles refreshed), each cut off so that the whole run ends
# within $BUDGET seconds; everything comes back as $OUT/results.tar (the tool returns at most 8 files).
#   TEST_KERNELS="sampler fused_sample" GPU0_KERNELS=fused_sample GPU1_KERNELS=sampler BUDGET=540 \
#     bash tools/gpu/verify.sh
# TEST_K (optional) is passed to pytest as -k. A bench entry KERNEL:FILTER runs only the cases whose
# id the regular expression FILTER matches (--cases-filter; norm:'t(1|8)_d' runs the decode sizes 1
# and 8 in one process, which pays its start, the ceiling and empty-kernel measurements and the
# first compiles once: on an H100 a process's first case took 16-35 s, later ones mostly under
# 7 s); the baseline file merges per case, so a kernel whose bench does not fit one process can be
# listed several times (GPU0_KERNELS="swa_index:_w128 swa_index:_w512").
# A GPU with no kernels to bench (GPU1_KERNELS="") makes this a one-GPU run. Back here, fold the
# measured cases of one or more calls into the tree with
#   python3 -m testing.device_results CALL1/results.tar CALL2/results.tar
# (extracting a call's baselines.tar would also put back the cases other calls refreshed). It folds
# the checkout's benches (bench_*.json) only; a branch tree's (tree_*.json) with --trees, once merged.
#
# Several branches in one call: an entry TREE/KERNEL (tests and benches alike) runs in the source
# tree .gpu/trees/TREE instead of the checkout. Make each tree here before the call, e.g.
#   rm -rf .gpu/trees/fs && mkdir -p .gpu/trees/fs && git archive wip/my-branch | tar -x -C .gpu/trees/fs
# The trees' tests run at the same time, one pytest each, sharing the $WORKERS workers; each tree's
# log is tests_TREE.log and its refreshed baselines come back as baselines_TREE.tar.
#   TEST_KERNELS="fs/fused_sample fs/sampler kv/quant" GPU0_KERNELS=fs/fused_sample GPU1_KERNELS=kv/quant \
#     bash tools/gpu/verify.sh
set -u
t0=$(date +%s)
root=$PWD
mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/tilelang-*.tar.xz
export PYTHONUNBUFFERED=1 TILELANG_OPS_BACKEND=cuda TILELANG_CACHE_DIR=/tmp/tl-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpus.txt

tree_of() {  # entry -> its tree's name ("." for the checkout)
    [[ $1 == */* ]] && echo "${1%%/*}" || echo "."
}
in_tree() {  # tree command...: the command in that tree, with the tree's sources on the path
    local dir=$root; [ "$1" != . ] && dir=$root/.gpu/trees/$1
    shift
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir:$dir/platform "$@")
}

declare -A files=()
for e in ${TEST_KERNELS:-}; do k=${e#*/}; files[$(tree_of "$e")]+=" kernels/$k/${k}_test.py"; done
select=(); [ -n "${TEST_K:-}" ] && select=(-k "$TEST_K")
workers=$(( ${WORKERS:-30} / (${#files[@]} > 0 ? ${#files[@]} : 1) ))
for t in "${!files[@]}"; do
    log=$OUT/tests.log; [ "$t" != . ] && log=$OUT/tests_$t.log
    (in_tree "$t" python3 -m pytest ${files[$t]} "${select[@]}" -p testing.plugin -p no:cacheprovider -p no:benchmark \
        --backend=cuda --tl-suite=device -n $(( workers > 0 ? workers : 1 )) -q -rs > $log 2>&1
     echo "tests $t: $(tail -1 $log)"; grep -E "^FAILED|^ERROR" $log | head -20) &
done
wait
echo "tests: $(( $(date +%s) - t0 )) s"
end=$(( t0 + ${BUDGET:-540} ))
bench() {  # gpu [tree/]kernel[:cases-filter]
    local left=$(( end - $(date +%s) )) tree entry=${2#*/} filter=() kind=bench name
    tree=$(tree_of "$2")
    # A branch's bench files are tree_*: testing.device_results folds only bench_* unless told.
    [ "$tree" != . ] && kind=tree
    name=${kind}_${2//[^A-Za-z0-9_.-]/_}
    local kernel=${entry%%:*}
    [ "$kernel" != "$entry" ] && filter=(--cases-filter "${entry#*:}")
    [ $left -lt 20 ] && { echo "gpu$1 $2: no time left"; return; }
    # The bench starts no case it cannot finish 15 s before the cut, so a kernel that does not fit
    # still refreshes the cases it measured (RESULT: INCOMPLETE lists the rest). The cut itself is a
    # backstop: SIGABRT makes faulthandler print where each thread was (a stalled case shows itself).
    local start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$1 in_tree "$tree" timeout -s ABRT $left python3 -X faulthandler -m testing.benchmark --kernels $kernel "${filter[@]}" \
      --time-budget $(( left > 30 ? left - 15 : left / 2 )) \
      --refresh-baselines --refresh-memory --json $OUT/$name.json > $OUT/$name.log 2>&1
    local rc=$?
    echo "gpu$1 $2: rc $rc, $(( $(date +%s) - start )) s $(grep -E '^RESULT' $OUT/$name.log)"
}
(for k in ${GPU0_KERNELS:-}; do bench 0 $k; done) &
(for k in ${GPU1_KERNELS:-}; do bench 1 $k; done)
wait
tar -cf $OUT/baselines.tar testing/benchmark_baselines testing/gpu_mem_profiles
for t in $(for e in ${TEST_KERNELS:-} ${GPU0_KERNELS:-} ${GPU1_KERNELS:-}; do tree_of "$e"; done | sort -u | grep -vx '\.'); do
    tar -C .gpu/trees/$t -cf $OUT/baselines_$t.tar testing/benchmark_baselines testing/gpu_mem_profiles
done
cd $OUT && tar -cf /tmp/results.tar . && find . -mindepth 1 -delete && mv /tmp/results.tar .
