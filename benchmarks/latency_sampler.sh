# issue 36 item 3: the latency with and without the process sampler, beside nvbandwidth, interleaved
export NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site GPUBW_NVBANDWIDTH_VERSION=0.8 GPUBW_CACHE_DIR=/tmp/gpubw-cache
pip() { python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --upgrade --target /tmp/site "$@"; }
pip .whl/*.whl && pip .whl/after/*.whl && python3 -m compileall -q /tmp/site > /dev/null
off="import sys, gpubw.acceptance.processes as p; p.ProcessSampler.start = lambda self: None; from gpubw.cli.nvbandwidth import main; sys.exit(main(sys.argv[1:]))"
python3 -m gpubw -t 0 -b 64 -q > /dev/null  # kernel cache warm
for i in 1 2 3 4 5 6; do
  echo "nvbw $i $(./.nvbw/nvbandwidth -t host_device_latency_sm | grep ^SUM)"
  echo "on $i $(/tmp/site/bin/gpubw-nvbandwidth -t host_device_latency_sm | grep ^SUM)"
  echo "off $i $(python3 -c "$off" -t host_device_latency_sm | grep ^SUM)"
done | tee $OUT/latsampler.txt | awk '{v[$1]=v[$1]" "$5} END {for (k in v) print k, v[k]}'
