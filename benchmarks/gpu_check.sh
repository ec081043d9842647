#!/usr/bin/env bash
# One batched hardware check on a lent GPU machine (how the figures in benchmarks/README.md were
# made): install gpubw from the wheels carried in .whl/ into /tmp/site, then run the steps named
# on the command line, in order, writing results to $OUT.
#   tests        the gpu-marked tests of gpubw (and of the stream plugin once installed)
#   full         the default suite, kernel cache cold (emptied first): $OUT/full-<tag>.json
#   warm         the default suite again, cache warm:                  $OUT/warm-<tag>.json
#   full1/warm1  the same on device 0 alone (CUDA_VISIBLE_DEVICES=0):  $OUT/full1-<tag>.json
#   plugin       install plugins/gpubw-stream
#   stream       the stream plugin's sweep 1 MiB .. 4 GiB:              $OUT/stream-<tag>.json
#   tune-MODE    benchmarks/tune_copy.py MODE (local, peer, host)
#   interrupt    SIGINT and SIGTERM sent 12 s into a default run: exit code, report, leftovers
#   nvbandwidth  NVIDIA's nvbandwidth -j (whole suite), if carried in .nvbw/ (never committed);
#                nvbandwidth1 the same on device 0 alone
#   multinode    mpirun -np 2 (Open MPI + mpi4py of the image): -p multinode -> $OUT/multinode-<tag>.json,
#                the whole default suite -> $OUT/mpi-suite-<tag>.json (multicast variables kept)
#   usage: bash benchmarks/gpu_check.sh TAG STEP...
set -uo pipefail
tag=$1; shift
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GPUBW_CACHE_DIR=/tmp/gpubw-cache
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --upgrade --target /tmp/site "$@"; }
pipi .whl/*.whl && export PYTHONPATH=/tmp/site && pipi . || exit 3
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.used,clocks.sm,clocks.mem --format=csv,noheader
suite() {  # name: run the default suite, time the whole process
  local s e rc
  s=$(date +%s.%N)
  timeout 400 python3 -m gpubw -j -o "$OUT/$1-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
  rc=$?; e=$(date +%s.%N)
  echo "$1 rc=$rc wall=$(python3 -c "print(round($e-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' ', t['key'], t['status'], t['message'][:300]) for t in d['testcases'] if t['status']!='Passed']" "$OUT/$1-$tag.json"
  tail -3 "$OUT/log-$tag.txt"
}
for step in "$@"; do
  echo "== $step $(date -u +%T)"
  case $step in
    multinode)  # (mn-testcases) 2 ranks under the image's Open MPI + mpi4py, multicast variables kept
      python3 -c "from mpi4py import MPI; print(' mpi4py uses', MPI.Get_library_version().splitlines()[0])"
      for run in "multinode -p multinode" "mpi-suite"; do
        name=${run%% *}; sel=${run#"$name"}
        timeout 900 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
          -x NVSHMEM_DISABLE_NVLS -x GPUBW_CACHE_DIR -x PYTHONPATH -x PYTHONUNBUFFERED \
          python3 -m gpubw $sel -j -o "$OUT/$name-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
        echo "$name rc=$?"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' world:', {k: d.get('world', {}).get(k) for k in ('size', 'handle_type', 'mpi_library')}); [print(' ', t['key'], t['status'], t['message'][:300]) for t in d['testcases'] if t['status']!='Passed']" "$OUT/$name-$tag.json"
      done
      tail -3 "$OUT/log-$tag.txt" ;;
    tests) python3 -m pytest -q -m gpu -p no:cacheprovider -o testpaths="tests $([ -d /tmp/site/gpubw_stream ] && echo plugins/gpubw-stream/tests)" 2>&1 | grep -v -i warn | tail -15 ;;
    full) rm -rf "$GPUBW_CACHE_DIR"; suite full ;;
    warm) suite warm ;;
    full1) rm -rf "$GPUBW_CACHE_DIR"; CUDA_VISIBLE_DEVICES=0 suite full1 ;;
    warm1) CUDA_VISIBLE_DEVICES=0 suite warm1 ;;
    plugin) pipi plugins/gpubw-stream || exit 3 ;;
    stream)
      s=$(date +%s)
      timeout 400 python3 -m gpubw -p stream -b 1MiB:4GiB:x2 -j -o "$OUT/stream-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "stream rc=$? wall=$(( $(date +%s) - s ))s" | tee -a "$OUT/times-$tag.txt"; tail -3 "$OUT/log-$tag.txt" ;;
    interrupt)  # SIGINT, then SIGTERM, mid-run: exit 130/143, a valid interrupted report, no hang
      for sig in INT TERM; do
        s=$(date +%s); python3 -m gpubw -j -o "$OUT/interrupt-$sig-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" &
        pid=$!; sleep 12; kill -$sig $pid; wait $pid; rc=$?
        echo "SIG$sig rc=$rc after $(( $(date +%s) - s ))s"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' interrupted:', d['interrupted'], '; statuses:', [t['status'] for t in d['testcases']])" "$OUT/interrupt-$sig-$tag.json"
      done
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv ;;
    tune-*) python3 benchmarks/tune_copy.py "${step#tune-}" "${TUNE_OUT:-$OUT}/$step-$tag.json" 2>&1 | tail -14 ;;
    nvbandwidth|nvbandwidth1)  # the whole default suite of NVIDIA's nvbandwidth, if carried
      [ -x .nvbw/nvbandwidth ] || { echo "no .nvbw/nvbandwidth"; continue; }
      [ "$step" = nvbandwidth1 ] && export CUDA_VISIBLE_DEVICES=0
      s=$(date +%s.%N); ./.nvbw/nvbandwidth -j > "$OUT/$step-$tag.json" 2>> "$OUT/log-$tag.txt"
      echo "$step rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
      unset CUDA_VISIBLE_DEVICES ;;
  esac
done
