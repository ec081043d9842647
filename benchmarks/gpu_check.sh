#!/usr/bin/env bash
# One batched hardware check on a lent GPU machine (the lead's device runs; see
# benchmarks/README.md): install gpubw (+ the stream plugin) from the wheels carried in .whl/
# into /tmp/site, then run the steps named on the command line, writing results to $OUT.
#   steps: tests  (the gpu-marked tests)
#          full   (the default suite, JSON to $OUT/full-<tag>.json, wall time in $OUT/time-<tag>)
#          tune   (benchmarks/tune_copy.py)
#          stream (the stream plugin sweep 1 MiB..4 GiB)
#   usage: bash benchmarks/gpu_check.sh TAG STEP...
set -uo pipefail
tag=$1; shift
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GPUBW_CACHE_DIR=/tmp/gpubw-cache
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --upgrade --target /tmp/site "$@"; }
pipi .whl/*.whl && export PYTHONPATH=/tmp/site && pipi . || exit 3
[ -d plugins/gpubw-stream ] && { pipi plugins/gpubw-stream || exit 3; }
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,clocks.sm,clocks.mem --format=csv,noheader
for step in "$@"; do
  echo "== $step $(date -u +%T)"
  case $step in
    tests) python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -30 ;;
    full)
      s=$(date +%s.%N)
      timeout 400 python3 -m gpubw -j -o "$OUT/full-$tag.json" > /dev/null 2> "$OUT/stderr-$tag.txt"
      rc=$?; e=$(date +%s.%N)
      echo "rc=$rc wall=$(python3 -c "print(round($e-$s,1))")s" | tee "$OUT/time-$tag.txt"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(t['key'], t['status'], t['message'][:300]) for t in d['testcases'] if t['status']!='Passed']" "$OUT/full-$tag.json"
      tail -5 "$OUT/stderr-$tag.txt"
      python3 benchmarks/compare.py "$OUT/full-$tag.json" benchmarks/reference/h200x2-nvbandwidth-v0.8.json ;;
    tune-*) python3 benchmarks/tune_copy.py ${step#tune-} "$OUT/$step-$tag.json" 2>&1 | tail -14 ;;
    stream) timeout 400 python3 -m gpubw -p stream -b 1MiB:4GiB:x2 -j -o "$OUT/stream-$tag.json" > /dev/null; echo "rc=$?" ;;
  esac
done
