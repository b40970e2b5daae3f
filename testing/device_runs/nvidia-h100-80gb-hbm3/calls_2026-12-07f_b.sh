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
probe=$root/testing/device_runs/nvidia-h200/pdl_chain_probe.py
for t in rf late; do
  dir=$root; [ $t = rf ] && dir=$root/.gpu/trees/rf
  mkdir -p $top/$t
  (cd $dir && OUT=$top/$t PYTHONPATH=/tmp/site:$dir:$dir/platform timeout ${EACH:-260} python3 $probe > $top/$t.log 2>&1)
  echo "$t rc $? $(( $(date +%s) - t0 )) s"
done
paste <(grep " us$" $top/rf.log) <(grep " us$" $top/late.log) | sed 's/  */ /g'
