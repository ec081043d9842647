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
#   tune-MODE    benchmarks/tune_copy.py MODE (local, peer, host, split); tune-kernels: the
#                device-memory kernels through CuPy (benchmarks/tune_kernels.py), TUNE_MIB MiB
#   tune-flat    launch strategies of the device-memory kernels at 4 GiB .. 16 MiB (CuPy;
#                TUNE_SIZES=4096,256 MiB to choose)
#   ncu          Nsight Compute's DRAM counters for the resident and the flat kernels, 4 GiB
#   peers        gpubw's device-memory testcases (device_local_copy[_sm] and the stream
#                plugin's, PEERS_MIB MiB arrays, default 4096) then benchmarks/peers.py (the
#                same work through PyTorch and CuPy) on every GPU, back to back:
#                $OUT/peers-gpubw-<tag>.json, $OUT/peers-<tag>.json (needs `plugin` first)
#   interrupt    SIGINT and SIGTERM sent 12 s into a default run: exit code, report, leftovers
#   nvbandwidth  NVIDIA's nvbandwidth -j (whole suite), if carried in .nvbw/ (never committed);
#                nvbandwidth1 the same on device 0 alone
#   nvbwcompat   issue 20: gpubw-nvbandwidth and NVIDIA's nvbandwidth (carried in .nvbw/, as for
#                `nvbandwidth`) on the same machine, one after the other, each as -j and as plain text
#                (whole suite, default options): $OUT/gpubw-nvbandwidth-<tag>.{json,txt} and
#                $OUT/nvbandwidth-v0.8-<tag>.{json,txt}, their exit codes and wall times; then the
#                consumers' parsers (tests/nvbw_consumers.py: DCGM on the JSON, NHC and superbench
#                on the text) over all four. Copy nvbandwidth-v0.8-<tag>.txt (tag naming the system,
#                e.g. h200x2-2026-12-02) to benchmarks/results/ for tests/test_nvbw_consumers.py
#   accept       gpubw --expect builtin: exit code (0 pass, 3 below expectation), the devices'
#                PCIe/NVLink facts and any failed verdict:                $OUT/accept-<tag>.json
#   safety       issue 13: -o /dev/stdout and -o /dev/null leave the device nodes as they are;
#                a second gpubw during a run warns about the other process on the GPUs
#   mpifaults    tests/mpi_fault_rank.py under mpirun -np 2 on the GPUs: rank 1 fails the SM testcases
#                (sm), is SIGKILLed (kill), hangs past --world-timeout (hang), hangs while mpirun gets
#                SIGINT (int), or hangs mid-handshake on rank 0's POSIX-fd descriptor socket (fdhang):
#                exit codes, the -o report of each, what is left running (and gpubw-fd-* sockets)
#   multinode    mpirun -np 2 (Open MPI + mpi4py of the image): -p multinode -> $OUT/multinode-<tag>.json,
#                the whole default suite -> $OUT/mpi-suite-<tag>.json (multicast variables kept)
#   overhead     issue 36: the default suite with --trace, kernel cache cold then warm, each
#                split by benchmarks/overhead.py (timed copies vs allocation, pinning, fill,
#                warm-up, verification, kernel load, NVML, teardown):
#                $OUT/overhead-{cold,warm}-<tag>.{json,txt}
#   startup      issue 11 item 5: wall of `python3 -c pass`, `gpubw -l` and one testcase as a whole
#                process (warm kernel cache), 5 runs each -> $OUT/times-<tag>.txt; `-X importtime` of
#                `-l` and a cProfile of the one-testcase run -> $OUT/startup-<tag>.txt
#   floor        issue 36: one testcase as a whole process (-t device_local_copy -b 64, warm cache) beside
#                `python3 -c pass`, CUDA's start alone (cuInit + device 0's primary context through
#                cuda.bindings) and NVIDIA's nvbandwidth (carried in .nvbw/) running the same testcase,
#                7 interleaved rounds -> $OUT/floor-<tag>.txt; first how many of the modules a
#                one-testcase run imports have no .pyc (the image's pynvml alone compiles for ~60 ms
#                on the run's main thread: `floor compile-deps floor` shows both), then
#                benchmarks/startup.py (gpubw's own start-up work, phase by phase)
#   probe        benchmarks/startup_probe.py: cuInit and primary contexts sequential vs one thread
#                per device, cuInit overlapping imports, modules without a .pyc
#   trace        benchmarks/startup_trace.py: a wall-clock timeline (every thread) of the one-testcase
#                run, 3 times -> $OUT/trace-<tag>.txt; and startup_probe.py's exit-release /
#                exit-keep (what the process exit costs with and without releasing the contexts),
#                nvml (NVML facts beside cuInit) and pipeline (device 0 working while device 1's
#                context is made)
#   gaps         the one-testcase run after pauses of ${GAPS:-0 0 3 3 8 8} s (a run right after another
#                one vs after the GPUs sat idle), plain and traced -> $OUT/gaps-<tag>.txt; and
#                the devices' persistence mode
#   compile-deps byte-compile the image's packages that gpubw imports (cuda.bindings,
#                cuda.pathfinder, numpy, pynvml, idna, certifi: the image ships them without
#                .pyc files and sets PYTHONDONTWRITEBYTECODE, so every process compiled ~130
#                modules again, ~0.26 s; a pip install compiles them once). Run `startup`
#                before and after it to see both.
#   extras       paths not yet seen on hardware: `gpubw info` (text), `--host-huge-pages` on one
#                testcase (a run, or the refusal naming HugePages_Free), /proc/meminfo's huge pages
#   profile      a cProfile of the whole default suite (top functions)  -> $OUT/profile-<tag>.txt
#   node         issue 21 on the GPUs: `info` with the health counters, --devices by a UUID
#                start (and by PCI bus id), pinned vs pageable judged against the built-ins,
#                --host-numa local/remote, --wait-idle while a second gpubw computes, and a
#                process that comes and goes during a testcase: $OUT/node-*-<tag>.json
#   waitidle     issue 21: only the --wait-idle part of `node`
#   sampler      issue 21: a second gpubw that starts and ends inside a ~40-s testcase
#   soak         issue 21: --soak ${SOAK:-5m} of host and device-memory testcases -> $OUT/soak-<tag>.json
#   example      issue 22: install plugins/gpubw-example and run its testcase on the GPUs
#   cost         issue 23 item 6: benchmarks/multinode_cost.py under mpirun -np COST_NP (default 2;
#                several ranks share a GPU when there are fewer), COST_SEL (default -p multinode)
#                at COST_MIB (default "512 2") MiB: each cell's time outside the copies, the
#                collectives and allocations -> $OUT/cost-<tag>-np<N>-b<MiB>/cost-rank<R>.json
#   sampled4     issue 23: mpirun -np 4 -p multinode --sample-pairs 4 (sampled cells and columns,
#                the ranks other than 0 building no N x N matrix), what each matrix measured
#   nvbwmn       issue 23 item 6: build NVIDIA nvbandwidth's multinode flavour from the source
#                carried in .nvbw-src/ (never committed; needs CMake, Boost and Open MPI on the
#                machine) and run it under mpirun -np 2: what it measures, or why it cannot
#   abtest       issue 34: the default suite of the wheel carried in .whl/before/ (the code before a
#                change) and of this checkout, interleaved twice (before, after, before, after),
#                then `gpubw compare` after vs before at 1 %, and `gpubw -l` of each, 10 runs
#                alternating: $OUT/ab-{before,after}{1,2}-<tag>.json, $OUT/ab-<tag>.txt
#   stdout       issue 33 item 1: -o /dev/stdout, /proc/self/fd/1, /dev/fd/1 and - into a pipe (a
#                JSON parser), a regular file and a FIFO, each checked as a valid report
#   v010         issue 35: the v0.10 testcases one GPU can run (the TMA, read-only and write-only
#                local ones) beside device_local_copy and _sm at ${PEERS_MIB:-4096} MiB, then
#                benchmarks/peers.py (PyTorch's copy_ and the rest) on device 0; gpubw-nvbandwidth's
#                default run as v0.10 and as v0.8: $OUT/v010-<tag>.json, $OUT/nvbw-v0{10,8}-<tag>.txt
#   v08side      issue 35: NVIDIA's nvbandwidth v0.8 (carried in .nvbw/) and gpubw-nvbandwidth's v0.8
#                flavour, default run as plain text, interleaved twice (binary, flavour, binary,
#                flavour), each timed; benchmarks/nvbw_textdiff.py of each pair (numbers and build lines
#                masked); then gpubw-nvbandwidth's v0.10 default run: $OUT/v08side-{nvbw,gpubw}{1,2}-<tag>.txt
#   latency      issue 36 item 3: host_device_latency_sm, NVIDIA's binary and gpubw-nvbandwidth (v0.8
#                flavour), ${LAT_RUNS:-5} interleaved runs each: the SUM lines -> $OUT/latency-<tag>.txt
#   latvar       issue 36 item 3: benchmarks/latency_variants.py (nvbandwidth's recipe, the load compiled
#                four ways, host and device rings, interleaved) -> console
#   oneway       issue 36 item 4: benchmarks/tune_oneway.py (read-only and write-only kernels launched
#                several ways against PyTorch's sum and fill_, 4 GiB) -> console
#   tma          benchmarks/tune_tma.py: the TMA copy's chunk, stages and blocks per SM against the CE
#                and SM local copies, ${PEERS_MIB:-4096} MiB -> console
#   usage: bash benchmarks/gpu_check.sh TAG STEP...
set -uo pipefail
tag=$1; shift
: "${OUT:=/tmp/out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export GPUBW_CACHE_DIR=/tmp/gpubw-cache
pipi() { python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --upgrade --target /tmp/site "$@"; }
# gpubw itself: this checkout, or the wheel carried in .whl/after/ (a committed state, built
# while the working tree holds unfinished edits)
after=.; [ -d .whl/after ] && after=$(ls .whl/after/*.whl)
pipi .whl/*.whl && export PYTHONPATH=/tmp/site && pipi "$after" || exit 3
# byte-compile as a normal pip install does (--no-compile above): without it every process
# compiled ~300 files again, 0.55 s of each start-up measured on 2 x H200
python3 -m compileall -q /tmp/site > /dev/null
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
    cost)  # issue 23 item 6: where a multinode cell's time goes, ranks under the image's Open MPI
      for np in ${COST_NP:-2}; do for mib in ${COST_MIB:-512 2}; do
        s=$(date +%s.%N); name="cost-$tag-np$np-b$mib"
        timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$np" -x NCCL_NVLS_ENABLE \
          -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x GPUBW_CACHE_DIR -x PYTHONPATH \
          -x PYTHONUNBUFFERED python3 benchmarks/multinode_cost.py "$OUT/$name" ${COST_SEL:--p multinode} \
          -b "$mib" -j -o "$OUT/$name.json" 2>> "$OUT/log-$tag.txt" | grep -v '^[{} ]'
        echo "cost -np $np -b $mib rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s"
      done; done ;;
    nvbwmn)  # issue 23 item 6: nvbandwidth's multinode build, where the machine allows it
      for tool in cmake mpicc mpicxx nvcc; do echo " $tool: $(command -v $tool || echo missing)"; done
      echo " boost headers: $(ls -d /usr/include/boost/program_options 2>/dev/null || echo missing)"
      if [ -d .nvbw-src ]; then
        rm -rf /tmp/nvbw-mn && cp -r .nvbw-src /tmp/nvbw-mn && cd /tmp/nvbw-mn && boost=()
        if [ -d po-src ]; then  # Boost.Program_Options built here against the machine's headers
          mkdir -p po && for f in po-src/*.cpp; do g++ -O2 -std=c++17 -c "$f" -o "po/$(basename "$f" .cpp).o"; done
          ar rcs po/libboost_program_options.a po/*.o
          boost=(-DBoost_NO_BOOST_CMAKE=ON -DBOOST_LIBRARYDIR=/tmp/nvbw-mn/po -DBoost_USE_STATIC_LIBS=ON)
        fi
        timeout 300 cmake -DMULTINODE=1 -DCMAKE_CUDA_ARCHITECTURES=90 "${boost[@]}" . > "$OUT/nvbwmn-build-$tag.txt" 2>&1 && \
          timeout 300 make -j 16 >> "$OUT/nvbwmn-build-$tag.txt" 2>&1
        echo " build rc=$?"; tail -5 "$OUT/nvbwmn-build-$tag.txt"
        if [ -x /tmp/nvbw-mn/nvbandwidth ]; then
          timeout 300 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE /tmp/nvbw-mn/nvbandwidth \
            -t multinode_device_to_device_memcpy_read_ce multinode_device_to_device_memcpy_write_ce > "$OUT/nvbwmn-$tag.txt" 2>&1
          # never its broadcast testcases: they create multicast objects (not on a lent machine)
          echo " nvbandwidth multinode rc=$?"; tail -25 "$OUT/nvbwmn-$tag.txt"
        fi
        cd - > /dev/null
      fi ;;
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
    sampled4)  # issue 23: 4 ranks on the GPU(s), --sample-pairs 4: the N x N testcases measure 4 of
      # 12 cells, #43/#44 2 of 4 columns (ceil(4 x 4 / 12)); ranks 1-3 build no N x N matrix
      timeout 900 mpirun --allow-run-as-root --oversubscribe -np 4 -x NCCL_NVLS_ENABLE \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x GPUBW_CACHE_DIR -x PYTHONPATH \
        -x PYTHONUNBUFFERED python3 -m gpubw -p multinode --sample-pairs 4 --seed 1 -b 64MiB -j \
        -o "$OUT/sampled4-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "sampled4 rc=$?"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' ', t['key'], t['status'], [(m['key'][-12:], sum(v is not None for r in m['values'] for v in r), m.get('notes', {}).get('sampled')) for m in t['matrices']], t['message'][:200]) for t in d['testcases']]" "$OUT/sampled4-$tag.json"
      tail -3 "$OUT/log-$tag.txt" ;;
    tests) python3 -m pytest -q -m gpu -p no:cacheprovider -o testpaths="tests $([ -d /tmp/site/gpubw_stream ] && echo plugins/gpubw-stream/tests)" 2>&1 | grep -v -i warn | tail -15 ;;
    full) rm -rf "$GPUBW_CACHE_DIR"; suite full ;;
    warm) suite warm ;;
    overhead)  # issue 36: where the default suite's time goes, cold and warm kernel cache
      rm -rf "$GPUBW_CACHE_DIR"
      for c in cold warm; do
        s=$(date +%s.%N)
        timeout 400 python3 -m gpubw --trace -j -o "$OUT/overhead-$c-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
        echo "overhead-$c rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
        python3 benchmarks/overhead.py "$OUT/overhead-$c-$tag.json" > "$OUT/overhead-$c-$tag.txt"
        tail -3 "$OUT/overhead-$c-$tag.txt"
      done ;;
    full1) rm -rf "$GPUBW_CACHE_DIR"; CUDA_VISIBLE_DEVICES=0 suite full1 ;;
    warm1) CUDA_VISIBLE_DEVICES=0 suite warm1 ;;
    plugin) pipi plugins/gpubw-stream && python3 -m compileall -q /tmp/site > /dev/null || exit 3 ;;
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
    accept)  # node acceptance against the built-in expectations (issue 10)
      s=$(date +%s)
      timeout 400 python3 -m gpubw --expect builtin -j -o "$OUT/accept-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "accept rc=$? (0 pass, 3 below expectation) wall=$(( $(date +%s) - s ))s" | tee -a "$OUT/times-$tag.txt"
      python3 - "$OUT/accept-$tag.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(" nvml:", d.get("nvml"))
for dev in d["devices"]:
    f = dev.get("nvml") or {}
    nv = f.get("nvlink") or {}
    print(f" GPU {dev['ordinal']} {dev.get('pci_bus_id')} {dev.get('uuid')}: pcie {f.get('pcie')}"
          f" nvlink {nv.get('links_active')}/{nv.get('links_total')} at {nv.get('speed_mbps')} MB/s"
          f" peers {nv.get('peers')}; end clocks {(dev.get('nvml_end') or {}).get('clocks')}")
bad = [v for v in d.get("verdicts", []) if v["severity"] != "pass"]
print(" verdicts:", len(bad), "fail/warn;", d.get("expectations"))
for v in bad[:10]:
    print("  ", v["severity"], v["rule"], v["testcase"], v["row"], "->", v["column"], v["measured"], v.get("suspects"))
print(" warnings:", [w for w in d["warnings"] if "WARNING" in w])
PY
      tail -3 "$OUT/log-$tag.txt" ;;
    abtest)  # issue 34: the same suite before and after a change, on the same GPUs
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-before .whl/before/*.whl || exit 3
      python3 -m compileall -q /tmp/site-before > /dev/null
      ab() {  # which round: one suite of one side
        local pp=/tmp/site s e; [ "$1" = before ] && pp=/tmp/site-before:/tmp/site
        s=$(date +%s.%N)
        PYTHONPATH=$pp timeout 400 python3 -m gpubw -j -o "$OUT/ab-$1$2-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
        echo "$1$2 rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s version=$(PYTHONPATH=$pp python3 -c 'import gpubw,os; print(os.path.dirname(gpubw.__file__))')" | tee -a "$OUT/ab-$tag.txt"
      }
      PYTHONPATH=/tmp/site-before:/tmp/site python3 -m gpubw -t 0 -b 64 -q > /dev/null  # both kernel caches warm
      python3 -m gpubw -t 0 -b 64 -q > /dev/null
      ab before 1; ab after 1; ab before 2; ab after 2
      for r in 1 2; do
        python3 -m gpubw compare "$OUT/ab-after$r-$tag.json" "$OUT/ab-before$r-$tag.json" --threshold 1 --fail-on both > "$OUT/ab-compare$r-$tag.txt"
        echo "compare round $r (after vs before, 1 %, both ways) rc=$?" | tee -a "$OUT/ab-$tag.txt"; tail -4 "$OUT/ab-compare$r-$tag.txt"
      done
      for i in 1 2 3 4 5 6 7 8 9 10; do for v in before after; do
        pp=/tmp/site; [ $v = before ] && pp=/tmp/site-before:/tmp/site
        s=$(date +%s.%N); PYTHONPATH=$pp python3 -m gpubw -l > /dev/null
        echo "-l $v $(python3 -c "print(round(($(date +%s.%N)-$s)*1000))") ms"
      done; done | tee -a "$OUT/ab-$tag.txt" | awk '{a[$2]=a[$2]" "$3} END {for (k in a) print "-l", k, "ms:" a[k]}' ;;
    v010)  # issue 35: the v0.10 testcases of one GPU, beside their counterparts and PyTorch
      mib=${PEERS_MIB:-4096}; s=$(date +%s)
      timeout 300 python3 -m gpubw -t device_local_copy device_local_copy_sm device_local_copy_tma \
        device_local_read_sm device_local_write_sm -b "${mib}MiB" -i 5 -j -o "$OUT/v010-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "v010 rc=$? wall=$(( $(date +%s) - s ))s"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' ', t['key'], t['status'], t['message'][:200], *[(m['key'], [round(v/1e9, 1) if v else v for v in m['values'][0]]) for m in t.get('matrices', [])]) for t in d['testcases']]" "$OUT/v010-$tag.json"
      timeout 300 python3 benchmarks/peers.py "$OUT/peers-$tag.json" --size-mib "$mib" --samples 5 --devices 0 --gpubw "$OUT/v010-$tag.json" 2>&1 | tail -12
      for v in 0.10 0.8; do
        s=$(date +%s.%N); GPUBW_NVBANDWIDTH_VERSION=$v timeout 300 /tmp/site/bin/gpubw-nvbandwidth > "$OUT/nvbw-v$v-$tag.txt" 2>> "$OUT/log-$tag.txt"
        echo "gpubw-nvbandwidth v$v rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s Running=$(grep -c '^Running' "$OUT/nvbw-v$v-$tag.txt") Waived=$(grep -c '^Waived' "$OUT/nvbw-v$v-$tag.txt") CV=$(grep -c '^COEFFICIENT_OF_VARIATION' "$OUT/nvbw-v$v-$tag.txt")"
        head -8 "$OUT/nvbw-v$v-$tag.txt"
      done ;;
    v08side)  # issue 35: the v0.8 flavour beside NVIDIA's v0.8 binary, text and time
      [ -x .nvbw/nvbandwidth ] || { echo "no .nvbw/nvbandwidth"; continue; }
      for r in 1 2; do for who in nvbw gpubw; do
        cmd=./.nvbw/nvbandwidth; [ $who = gpubw ] && cmd=/tmp/site/bin/gpubw-nvbandwidth
        s=$(date +%s.%N); GPUBW_NVBANDWIDTH_VERSION=0.8 timeout 300 $cmd > "$OUT/v08side-$who$r-$tag.txt" 2>> "$OUT/log-$tag.txt"
        echo "$who$r rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,2))")s Running=$(grep -c '^Running' "$OUT/v08side-$who$r-$tag.txt")" | tee -a "$OUT/times-$tag.txt"
      done; python3 benchmarks/nvbw_textdiff.py "$OUT/v08side-nvbw$r-$tag.txt" "$OUT/v08side-gpubw$r-$tag.txt" | tail -30; echo "textdiff $r rc=${PIPESTATUS[0]}"; done
      s=$(date +%s.%N); timeout 300 /tmp/site/bin/gpubw-nvbandwidth > "$OUT/v08side-gpubw010-$tag.txt" 2>> "$OUT/log-$tag.txt"
      echo "gpubw v0.10 rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,2))")s Running=$(grep -c '^Running' "$OUT/v08side-gpubw010-$tag.txt")" | tee -a "$OUT/times-$tag.txt"
      python3 tests/nvbw_consumers.py --text "$OUT/v08side-nvbw1-$tag.txt" "$OUT/v08side-gpubw1-$tag.txt" "$OUT/v08side-gpubw010-$tag.txt" 2>&1 | tail -12; echo "consumers rc=$?" ;;
    latency)  # issue 36 item 3: the pointer chase of both tools, interleaved
      for i in $(seq "${LAT_RUNS:-5}"); do for who in nvbw gpubw; do
        cmd=./.nvbw/nvbandwidth; [ $who = gpubw ] && cmd=/tmp/site/bin/gpubw-nvbandwidth
        GPUBW_NVBANDWIDTH_VERSION=0.8 timeout 120 $cmd -t host_device_latency_sm 2>> "$OUT/log-$tag.txt" | grep '^SUM' | sed "s/^/$who $i /"
      done; done | tee "$OUT/latency-$tag.txt"
      awk '{v[$1]=v[$1]" "$5} END {for (k in v) print k, "ns:" v[k]}' "$OUT/latency-$tag.txt" ;;
    latvar) timeout 200 python3 benchmarks/latency_variants.py --rounds "${LAT_RUNS:-5}" 2>&1 | tail -12 ;;
    oneway) timeout 300 python3 benchmarks/tune_oneway.py 2>&1 | tail -25 ;;
    tma) timeout 400 python3 benchmarks/tune_tma.py "${PEERS_MIB:-4096}" 2 2>&1 | tail -14 ;;
    stdout)  # issue 33 item 1: every name of standard output, into a pipe, a file and a FIFO
      for name in /dev/stdout /proc/self/fd/1 /dev/fd/1 -; do
        python3 -m gpubw -t 0 -b 64 -q -j -o "$name" | python3 -c "import json,sys; from gpubw.model.report_check import validate; d=json.load(sys.stdin); validate(d); print(' pipe: valid report, exit_code', d['exit_code'])"
        echo "-o $name | JSON parser: rc=${PIPESTATUS[*]}"
        python3 -m gpubw -t 0 -b 64 -q -j -o "$name" > "$OUT/stdout-file.json"; rc=$?
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' file: rc $rc, valid JSON,', len(d['testcases']), 'testcase(s)')" "$OUT/stdout-file.json"
        rm -f /tmp/gpubw-fifo; mkfifo /tmp/gpubw-fifo || exit 3  # before the reader starts: no race
        (python3 -m json.tool < /tmp/gpubw-fifo > "$OUT/stdout-fifo.json"; echo " fifo reader rc=$?") &
        timeout 120 python3 -m gpubw -t 0 -b 64 -q -j -o "$name" > /tmp/gpubw-fifo; echo " fifo writer rc=$?"; wait
      done
      python3 -m gpubw -t 0 -b 64 -q -o /dev/stdout | head -4; python3 -m gpubw -t 0 -b 64 -q -j -o /dev/stdout >&-; echo "closed stdout: rc=$? (2 expected)" ;;
    safety)  # issue 13: device nodes survive -o; the other-process warning (item 7)
      stat -L -c '%n %F %i %t:%T' /dev/null /dev/stdout
      python3 -m gpubw -t 0 -b 64 -j -o /dev/stdout | python3 -m json.tool > /dev/null; echo "-o /dev/stdout rc=${PIPESTATUS[0]} json.tool rc=${PIPESTATUS[1]}"
      python3 -m gpubw -t 0 -b 64 -j -o /dev/null; echo "-o /dev/null rc=$?"
      stat -L -c '%n %F %i %t:%T' /dev/null /dev/stdout
      # the default suite (about 43 s on 2 x H200) keeps the GPUs busy while a second run starts
      python3 -m gpubw -j -o "$OUT/busy-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" &
      bg=$!; sleep 10
      python3 -m gpubw -t device_local_copy -b 1GiB -j -o "$OUT/safety-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "second run rc=$?"; wait $bg; echo "first run rc=$?"
      for f in safety busy; do
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' $f warnings:', [w for w in d['warnings'] if 'process' in w])" "$OUT/$f-$tag.json"
      done ;;
    peers)
      mib=${PEERS_MIB:-4096}; n=${PEERS_SAMPLES:-5}
      devs=$(python3 -c "import torch; print(','.join(map(str, range(torch.cuda.device_count()))))")
      s=$(date +%s)
      timeout 300 python3 -m gpubw -t device_local_copy device_local_copy_sm stream_copy \
        stream_scale stream_add stream_triad stream_write stream_read -b "${mib}MiB" -i "$n" \
        -j -o "$OUT/peers-gpubw-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
      echo "peers gpubw rc=$? wall=$(( $(date +%s) - s ))s" | tee -a "$OUT/times-$tag.txt"
      timeout 300 python3 benchmarks/peers.py "$OUT/peers-$tag.json" --size-mib "$mib" \
        --samples "$n" --devices "$devs" --gpubw "$OUT/peers-gpubw-$tag.json" 2>&1 | tail -20 ;;
    mpifaults)  # a failing, a killed and a hung rank, and Ctrl-C to mpirun, on the GPUs under the image's Open MPI
      mpi=(timeout 150 mpirun --allow-run-as-root --oversubscribe -np 2 -x FAULT -x NCCL_NVLS_ENABLE -x GPUBW_CACHE_DIR -x PYTHONPATH -x PYTHONUNBUFFERED)
      few=(-b 64MiB -i 1 --loop-count 2 -j)
      for fault in sm kill hang int fdhang; do
        rm -f "$OUT/mpi-$fault-$tag.json"; s=$(date +%s.%N)
        case $fault in
          sm) FAULT=sm "${mpi[@]}" python3 tests/mpi_fault_rank.py "${few[@]}" --world-timeout 5 -t multinode_device_to_device_memcpy_read_ce multinode_device_to_device_memcpy_read_sm multinode_device_to_device_memcpy_write_ce -o "$OUT/mpi-$fault-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" ;;
          int)  # SIGINT to mpirun while rank 0 waits for the hung rank 1 (Open MPI forwards it)
            FAULT=hang "${mpi[@]}" python3 tests/mpi_fault_rank.py "${few[@]}" --world-timeout 60 -t multinode_device_to_device_memcpy_read_ce multinode_device_to_device_memcpy_write_ce multinode_device_to_device_bidirectional_memcpy_read_ce multinode_device_to_device_bidirectional_memcpy_write_ce -o "$OUT/mpi-$fault-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" &
            pid=$!; sleep 15; kill -INT $pid; wait $pid ;;
          *) FAULT=$fault "${mpi[@]}" python3 tests/mpi_fault_rank.py "${few[@]}" --world-timeout 5 -t multinode_device_to_device_memcpy_read_ce multinode_device_to_device_memcpy_write_ce multinode_device_to_device_bidirectional_memcpy_read_ce multinode_device_to_device_bidirectional_memcpy_write_ce -o "$OUT/mpi-$fault-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" ;;
        esac
        echo "$fault rc=$? after $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  interrupted:', d['interrupted'], 'exit_code:', d['exit_code'], [(t['key'][-16:], t['status'], t['message'][:120]) for t in d['testcases']])" "$OUT/mpi-$fault-$tag.json" 2>&1 | tail -1
        sleep 1; echo "  left on the GPUs: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l); gpubw processes: $(pgrep -fc mpi_fault_rank); fd sockets: $(grep -c '@gpubw-fd-' /proc/net/unix)"
      done
      tail -4 "$OUT/log-$tag.txt" ;;
    node)  # issue 21: the operator's node check on real GPUs
      python3 -m gpubw info > "$OUT/node-info-$tag.txt" 2>&1; echo "info rc=$?"
      grep -i -A3 "health counters" "$OUT/node-info-$tag.txt" | head -12
      python3 -m gpubw info -j > "$OUT/node-info-$tag.json" 2>> "$OUT/log-$tag.txt"; echo "info -j rc=$?"
      uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1); bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
      for sel in "${uuid:0:12}" "$bus"; do
        python3 -m gpubw --devices "$sel" -t 0 1 -j -o "$OUT/node-devices-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt"
        echo "--devices $sel rc=$?"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' ', t['key'], t['status'], [m['values'] for m in t['matrices']]) for t in d['testcases']]" "$OUT/node-devices-$tag.json"
      done
      python3 -m gpubw --devices GPU-ffffffff -t 0 > /dev/null 2> "$OUT/node-bad-$tag.txt"; echo "--devices GPU-ffffffff rc=$? $(head -1 "$OUT/node-bad-$tag.txt")"
      python3 -m gpubw -t 0 1 49 50 --expect builtin -j -o "$OUT/node-pageable-$tag.json" 2>> "$OUT/log-$tag.txt" | tail -12; echo "pageable rc=${PIPESTATUS[0]}"
      echo "NUMA nodes: $(ls -d /sys/devices/system/node/node* | wc -l)"
      for numa in local remote; do
        python3 -m gpubw -t 0 49 --host-numa $numa -j -o "$OUT/node-numa-$numa-$tag.json" > /dev/null 2> "$OUT/node-numa-$numa-$tag.txt"
        echo "--host-numa $numa rc=$? $(head -2 "$OUT/node-numa-$numa-$tag.txt" | tr '\n' ' ')"
        [ -s "$OUT/node-numa-$numa-$tag.json" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' ', t['key'], t['status'], [m['values'] for m in t['matrices']], [dict(m.get('notes') or {}).get('host_numa_nodes') for m in t['matrices']]) for t in d['testcases']]" "$OUT/node-numa-$numa-$tag.json"
      done
      timeout 120 python3 -m gpubw --soak 40s -t device_local_copy -q -j -o /dev/null 2>/dev/null & busy=$!
      sleep 8; s=$(date +%s.%N)
      python3 -m gpubw --wait-idle 60 -t 0 1 -j -o "$OUT/node-wait-idle-$tag.json" > /dev/null 2> "$OUT/node-wait-idle-$tag.txt"
      echo "--wait-idle 60 rc=$? after $(python3 -c "print(round($(date +%s.%N)-$s,1))") s; the busy run ended: $(kill -0 $busy 2>/dev/null && echo no || echo yes)"
      cat "$OUT/node-wait-idle-$tag.txt" | head -5; wait $busy
      timeout 200 python3 -m gpubw -t device_local_copy -i 1500 -j -o "$OUT/node-sampled-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" & long=$!
      sleep 10; timeout 60 python3 -m gpubw -t 0 -q -j -o /dev/null 2>/dev/null; wait $long; echo "sampled run rc=$?"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' warnings:', [w[:200] for w in d.get('warnings', [])])" "$OUT/node-sampled-$tag.json" ;;
    waitidle)  # issue 21: --wait-idle while a second gpubw computes on the GPU: 5 s (gives up,
      # warns), then 60 s (waits for the busy run's end)
      timeout 120 python3 -m gpubw --soak 40s -t device_local_copy -q -j -o /dev/null 2>/dev/null & busy=$!
      sleep 8; s=$(date +%s.%N)
      python3 -m gpubw --wait-idle 5 -t 0 -j -o "$OUT/node-wait-idle5-$tag.json" > /dev/null 2> "$OUT/node-wait-idle5-$tag.txt"
      echo "--wait-idle 5 rc=$? after $(python3 -c "print(round($(date +%s.%N)-$s,1))") s"; head -4 "$OUT/node-wait-idle5-$tag.txt"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' warnings:', [w[:220] for w in d.get('warnings', [])])" "$OUT/node-wait-idle5-$tag.json"
      s=$(date +%s.%N)
      python3 -m gpubw --wait-idle 60 -t 0 1 -j -o "$OUT/node-wait-idle-$tag.json" > /dev/null 2> "$OUT/node-wait-idle-$tag.txt"
      echo "--wait-idle 60 rc=$? after $(python3 -c "print(round($(date +%s.%N)-$s,1))") s; the busy run ended: $(kill -0 $busy 2>/dev/null && echo no || echo yes)"
      cat "$OUT/node-wait-idle-$tag.txt" | head -5; wait $busy ;;
    sampler)  # issue 21: a process that comes and goes in the middle of a ~40-s testcase
      timeout 200 python3 -m gpubw -t device_local_copy -i 6000 -j -o "$OUT/node-sampler-$tag.json" > /dev/null 2>> "$OUT/log-$tag.txt" & long=$!
      sleep 12; timeout 60 python3 -m gpubw -t 0 -q -j -o /dev/null 2>/dev/null; echo "short run done at $(date -u +%T)"; wait $long; echo "long run rc=$? ended $(date -u +%T)"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(' testcase', [(t['key'], round(t['duration_s'], 1)) for t in d['testcases']], 'warnings:', [w[:240] for w in d.get('warnings', [])])" "$OUT/node-sampler-$tag.json" ;;
    soak)  # issue 21: a soak; plot it afterwards where matplotlib is (gpubw plot FILE)
      s=$(date +%s)
      python3 -m gpubw --soak "${SOAK:-5m}" -t 0 1 device_local_copy -j -o "$OUT/soak-$tag.json" 2>> "$OUT/log-$tag.txt" | tail -15
      echo "soak rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - s )) s" ;;
    example)  # issue 22: the example plugin package on real GPUs
      pipi plugins/gpubw-example && python3 -m compileall -q /tmp/site > /dev/null || exit 3
      python3 -m gpubw -l | grep -A1 example_local_read_write
      python3 -m gpubw -t example_local_read_write -v 2>> "$OUT/log-$tag.txt" | tail -12; echo "example rc=${PIPESTATUS[0]}" ;;
    startup)  # issue 11 item 5 (one testcase: -t device_local_copy -b 64 -q -j -o /dev/null)
      one="-m gpubw -t device_local_copy -b 64 -q -j -o /dev/null"
      python3 $one  # warm the kernel cache
      wall() { local s; s=$(date +%s.%N); "$@" > /dev/null 2>&1; python3 -c "print(round($(date +%s.%N)-$s,3))"; }
      for what in "python3 -c pass" "python3 -m gpubw -l" "python3 $one"; do
        echo "$what: $(for i in 1 2 3 4 5; do wall $what; done | tr '\n' ' ')s" | tee -a "$OUT/times-$tag.txt"
      done
      { echo "== -X importtime -m gpubw -l (top 30 cumulative, us)"
        python3 -X importtime -m gpubw -l 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -30
        echo "== cProfile $one"
        python3 -m cProfile -s cumtime $one 2>&1 | head -90 | cut -c1-160
        echo "== cProfile $one (tottime)"
        python3 -m cProfile -s tottime $one 2>&1 | head -50 | cut -c1-160
      } > "$OUT/startup-$tag.txt" ;;
    floor)  # issue 36: one testcase as a whole process beside what any tool pays for it
      one="-t device_local_copy -b 64"
      python3 -m gpubw $one -q -j -o /dev/null  # warm the kernel cache
      python3 benchmarks/startup_probe.py --mode modules | sed -n 2,8p | tee -a "$OUT/floor-$tag.txt"
      cudastart="from cuda.bindings import driver as d; d.cuInit(0); _, v = d.cuDeviceGet(0); _, c = d.cuDevicePrimaryCtxRetain(v); d.cuCtxSetCurrent(c)"
      wall() { local s; s=$(date +%s.%N); "$@" > /dev/null 2>&1; python3 -c "print(round($(date +%s.%N)-$s,3))"; }
      for i in 1 2 3 4 5 6 7; do
        echo "round $i: pass $(wall python3 -c pass) cuda-start $(wall python3 -c "$cudastart")" \
          "nvbandwidth $([ -x .nvbw/nvbandwidth ] && wall .nvbw/nvbandwidth $one -j || echo -)" \
          "gpubw $(wall python3 -m gpubw $one -q -j -o /dev/null)"
      done | tee -a "$OUT/floor-$tag.txt"
      python3 benchmarks/startup.py --runs 7 | tee -a "$OUT/floor-$tag.txt" ;;
    trace)  # issue 11 item 5: where the one-testcase second goes, thread by thread
      one="-t device_local_copy -b 64 -q -j -o /dev/null"
      python3 -m gpubw $one  # warm the kernel cache
      ms() { python3 -c "print(round(($2-$1)*1e3,1))"; }
      GPUBW_T0=$(date +%s.%N) python3 benchmarks/startup_trace.py -- ${one% -o *} -o "$OUT/t.json" 2> /dev/null > /dev/null
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(' traced run:', t['key'], t['status'], t['message'][:600]) for t in d['testcases']]" "$OUT/t.json"
      for i in 1 2 3; do
        s=$(date +%s.%N); GPUBW_T0=$s python3 benchmarks/startup_trace.py -- $one 2> "$OUT/t.txt" > /dev/null
        e=$(date +%s.%N); { echo "== run $i"; cat "$OUT/t.txt"; echo "# process ended at $(ms $s $e) ms"; } >> "$OUT/trace-$tag.txt"
      done
      rm -f "$OUT/t.txt" "$OUT/t.json"; grep "^#" "$OUT/trace-$tag.txt"
      for mode in ${TRACE_MODES:-exit-release exit-keep exit-release-os exit-keep-os nvml pipeline}; do
        s=$(date +%s.%N); line=$(GPUBW_T0=$s python3 benchmarks/startup_probe.py --mode $mode)
        e=$(date +%s.%N); echo "$line; process ended at $(ms $s $e) ms"
      done 2>&1 | tee -a "$OUT/trace-$tag.txt" ;;
    gaps)  # is the first run after a pause slower, and in which step?
      one="-t device_local_copy -b 64 -q -j -o /dev/null"
      nvidia-smi --query-gpu=index,persistence_mode,pstate,clocks.sm --format=csv,noheader | tee "$OUT/gaps-$tag.txt"
      python3 -m gpubw $one  # warm the kernel cache
      ms() { python3 -c "print(round(($2-$1)*1e3,1))"; }
      for gap in ${GAPS:-0 0 3 3 8 8}; do
        sleep "$gap"; s=$(date +%s.%N); python3 -m gpubw $one; e=$(date +%s.%N)
        echo "after ${gap} s idle: plain run $(ms $s $e) ms" | tee -a "$OUT/gaps-$tag.txt"
      done
      for gap in ${GAPS:-0 0 3 3 8 8}; do
        sleep "$gap"; s=$(date +%s.%N); GPUBW_T0=$s python3 benchmarks/startup_trace.py --min-ms 8 -- $one 2> "$OUT/t.txt" > /dev/null
        e=$(date +%s.%N); { echo "== after ${gap} s idle"; grep -v "import \|nvml" "$OUT/t.txt"; echo "# process ended at $(ms $s $e) ms"; } >> "$OUT/gaps-$tag.txt"
      done
      rm -f "$OUT/t.txt"; grep "^==\|^#" "$OUT/gaps-$tag.txt" | paste - - - - | cut -c1-200 ;;
    probe)
      { for mode in sequential parallel overlap calls calls; do
          python3 benchmarks/startup_probe.py --mode $mode; done
        python3 benchmarks/startup_probe.py --mode modules; } 2>&1 | tee "$OUT/probe-$tag.txt" | head -12 ;;
    compile-deps)
      python3 - <<'PY' | xargs -r python3 -m compileall -q > /dev/null
import importlib, os
for name in ("cuda.bindings", "cuda.pathfinder", "numpy", "pynvml", "idna", "certifi"):
    try:
        m = importlib.import_module(name)
    except ImportError:
        continue
    f = m.__file__
    print(os.path.dirname(f) if f.endswith("__init__.py") else f)
PY
      python3 benchmarks/startup_probe.py --mode modules | sed -n 2p ;;
    extras)
      grep -i huge /proc/meminfo | head -4
      python3 -m gpubw info > "$OUT/info-$tag.txt" 2>&1; echo "info rc=$? ($(wc -l < "$OUT/info-$tag.txt") lines)"; head -30 "$OUT/info-$tag.txt"
      python3 -m gpubw --host-huge-pages -t host_to_device_memcpy_ce -b 64 -j -o "$OUT/huge-$tag.json" 2>&1 | tail -3
      echo "huge pages rc=${PIPESTATUS[0]}" ;;
    profile)
      s=$(date +%s.%N)
      timeout 400 python3 -m cProfile -s cumtime -m gpubw -j -o "$OUT/profile-$tag.json" 2>&1 | head -150 | cut -c1-170 > "$OUT/profile-$tag.txt"
      echo "profile wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
      python3 -m cProfile -s tottime -m gpubw -t host_to_device_memcpy_ce -j -o /dev/null 2>&1 | head -60 | cut -c1-170 >> "$OUT/profile-$tag.txt" ;;
    tune-flat) timeout 240 python3 benchmarks/tune_copy.py flat "$OUT/tune-flat-$tag.json" ${TUNE_SIZES:-} 2>&1 | tail -45 ;;
    ncu)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 200 "$ncu" --clock-control none -k regex:'stream_|gpubw_' --csv --metrics \
        gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
        python3 benchmarks/tune_copy.py ncu > "$OUT/ncu-$tag.csv" 2>> "$OUT/log-$tag.txt"
      echo "ncu rc=$? lines=$(wc -l < "$OUT/ncu-$tag.csv")" ;;
    tune-kernels) python3 benchmarks/tune_copy.py kernels "${TUNE_OUT:-$OUT}/tune-kernels-$tag.json" "${TUNE_MIB:-4096}" "${TUNE_OPS:-}" 2>&1 | tail -60 ;;
    tune-*) python3 benchmarks/tune_copy.py "${step#tune-}" "${TUNE_OUT:-$OUT}/$step-$tag.json" 2>&1 | tail -14 ;;
    nvbwcompat)  # issue 20: gpubw-nvbandwidth beside NVIDIA's nvbandwidth, both read by the consumers' parsers
      gnvb=/tmp/site/bin/gpubw-nvbandwidth  # pip --target puts the console script there
      [ -x "$gnvb" ] || gnvb="python3 -c 'import sys; from gpubw.cli.nvbandwidth import main; sys.exit(main())'"
      files=()
      for who in gpubw-nvbandwidth nvbandwidth-v0.8; do
        if [ "$who" = gpubw-nvbandwidth ]; then cmd=$gnvb; else
          [ -x .nvbw/nvbandwidth ] || { echo "no .nvbw/nvbandwidth: NVIDIA's side skipped"; continue; }
          cmd=./.nvbw/nvbandwidth
        fi
        for form in json txt; do
          flag=$([ $form = json ] && echo -j); out="$OUT/$who-$tag.$form"
          s=$(date +%s.%N); timeout 900 bash -c "$cmd $flag" > "$out" 2>> "$OUT/log-$tag.txt"
          echo "$who $form rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
          files+=("$out")
        done
      done
      json=(); text=(); for f in "${files[@]}"; do [[ $f == *.json ]] && json+=("$f") || text+=("$f"); done
      python3 tests/nvbw_consumers.py --json "${json[@]}" --text "${text[@]}"; echo "consumers rc=$?"
      tail -3 "$OUT/log-$tag.txt" ;;
    nvbandwidth|nvbandwidth1)  # the whole default suite of NVIDIA's nvbandwidth, if carried
      [ -x .nvbw/nvbandwidth ] || { echo "no .nvbw/nvbandwidth"; continue; }
      [ "$step" = nvbandwidth1 ] && export CUDA_VISIBLE_DEVICES=0
      s=$(date +%s.%N); ./.nvbw/nvbandwidth -j > "$OUT/$step-$tag.json" 2>> "$OUT/log-$tag.txt"
      echo "$step rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")s" | tee -a "$OUT/times-$tag.txt"
      unset CUDA_VISIBLE_DEVICES ;;
  esac
done
