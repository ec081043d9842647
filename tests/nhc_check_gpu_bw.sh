# Azure NHC's check_gpu_bw (its NVIDIA path), ported to bash for tests/test_nvbw_nhc.py.
#
# Source: Azure/azurehpc-health-checks customTests/azure_gpu_bandwidth.nhc (MIT licence), the
# functions check_gpu_bw, check_nvBW_gpu_bw, check_nvlink_enabled, catch_error and
# evaluate_nvBW_result, in two states chosen by NHC_PARSE:
#
#   main   upstream main @0e0a1ac26a64b32ac4dd7632a529638505d3314a (2026-05-01; the file's
#          last change 0c5f89e, 2025-07-16): the newest upstream snapshot that can be read here.
#   pr164  PR #164 ("Add aarch64/Grace NVIDIA image support", merged 2026-08-30) as its
#          author's branch has it: michael-beebe/azurehpc-health-checks
#          @4cfbabbfe01262379aca38fc728c1fb4f162a329. It adds one rule to main's loop: from a
#          line starting SUM, COEFFICIENT_OF_VARIATION or NOTE: to the next Running line,
#          nothing is kept (and no empty line). The merged PR moved this loop into a function
#          parse_nvbandwidth_results whose code is not public here; its bats tests
#          (test/unit-tests/nhc-gpu-agnostic.sh @155699ebc1234ffcc35dae1e8ca6e70e10026b8c)
#          pin what it keeps, which the pr164 state keeps too (tests/test_nvbw_nhc.py).
#
# This is a port, not a copy: the same commands in the same order (bash word splitting on
# newlines, awk, bc), so the same lines are kept, the same cells compared and the same
# messages given. Left out: the AMD path (rocm-bandwidth-test) and NHC's framework. The
# framework functions it calls (die, dbg, log, pass, warning, boost_gpu_clock,
# remove_clock_boost, background_cleanup) are defined at the end as upstream's bats tests
# define them (test/unit-tests/nhc-test-common.sh: die logs "ERROR: ..."); the clock ones,
# which run sudo nvidia-smi, do nothing. nvidia-smi, lspci and timeout are whatever is on
# PATH (the test puts stubs there); nvbandwidth is $AZ_NHC_ROOT/bin/nvbandwidth.

NVBW=$AZ_NHC_ROOT/bin/nvbandwidth
H2D="host_to_device_memcpy_ce"
D2H="device_to_host_memcpy_ce"
P2P="device_to_device_memcpy_read_ce"
declare -gA result_lines_array
declare -gA tests_map=([$H2D]="H2D" [$D2H]="D2H" [$P2P]="P2P")

cleanup() {
    dbg "Unlocking graphics clock  before exit..."
    remove_clock_boost
}

# Run the command line $1 (word split, unquoted, as upstream does); its standard output is
# left in $output. A non-zero exit dies with $2 and the code.
catch_error() {
    declare -g output
    output=$($1)
    local code=$?
    if [ $code -ne 0 ]; then
        die 1 "\t $2 $code" >&2
        return 1
    fi
    return 0
}

check_nvlink_enabled() {
    if ! catch_error "nvidia-smi nvlink --status" \
        "check_gpu_bw: Failed to get NVLINK status with error code"; then
        echo false
        return 0
    fi
    if [ -z "$output" ]; then
        echo false
        return 1
    fi
    echo true
}

# One cell against the figures: dbg from 1.05 x expected, warning from expected, else die.
_nhc_judge_cell() {
    local test=$1 gpu=$2 peer=$3 value=$4 expected=$5 warn_from=$6 name=${tests_map[$1]}
    local where="GPU $gpu" label="${name}_GPU_${gpu}"
    if [ "$test" = "$P2P" ]; then
        where="GPU $gpu to GPU $peer" label="${name}_GPU_${gpu}_${peer}"
    fi
    if (($(echo "$value >= $warn_from" | bc -l))); then
        dbg "$label: $value GB/s"
    elif (($(echo "$value >= $expected" | bc -l))); then
        warning 0 "check_gpu_bw: $name test on $where has a bandwidth of $value GB/s. Expected threshold $expected GB/s."
    else
        dbg "$label: $value GB/s"
        die 1 "check_gpu_bw: $name test on $where failed. Bandwidth $value is less than $expected. FaultCode: NHC2020"
    fi
}

evaluate_nvBW_result() {
    local pcie=$1 p2p=$2 test expected warn_from row value gpu peer i
    for test in "${!result_lines_array[@]}"; do
        case $test in
            "$H2D" | "$D2H") expected=$pcie ;;
            "$P2P") expected=$p2p ;;
            *)
                die 1 "check_gpu_bw: failed to parse results. FaultCode: NHCNA"
                return 1
                ;;
        esac
        warn_from=$(echo "$expected * 1.05" | bc -l)
        IFS=$'\n'
        local rows=(${result_lines_array[$test]})
        IFS=$' \t\n'
        peer=0
        for ((i = 0; i < ${#rows[*]}; i++)); do
            gpu=0
            for value in $(echo "${rows[$i]}" | awk '{for (i=2; i<=NF; i++) print $i}'); do
                if [[ "$value" != *"N/A"* ]]; then
                    _nhc_judge_cell "$test" $gpu $peer "$value" "$expected" "$warn_from"
                fi
                ((gpu++))
            done
            ((peer++))
        done
    done
    return 0
}

# Keep each testcase's lines: a Running line names the testcase (dots and leading blanks
# removed); lines holding "memcpy" are dropped; the first kept line (the column numbers)
# is dropped when the testcase is stored. pr164: nothing kept from SUM/CV/NOTE: on.
_nhc_split_output() {
    local line current="" kept="" trailer=false
    IFS=$'\n'
    local lines=($1)
    IFS=$' \t\n'
    for line in "${lines[@]}"; do
        if [[ $line == Running* ]]; then
            if [ -n "$current" ]; then
                result_lines_array["$current"]="$(echo "$kept" | awk 'NR>1')"
            fi
            current=${line#Running} && current=${current//./}
            current=${current#"${current%%[![:space:]]*}"}
            kept="" trailer=false
        fi
        if [ "$NHC_PARSE" = pr164 ]; then
            if [[ $line == SUM* || $line == COEFFICIENT_OF_VARIATION* || $line == NOTE:* ]]; then
                trailer=true
            fi
            if [ $trailer = true ] || [ -z "$line" ]; then
                continue
            fi
        fi
        if [[ "$line" != *"memcpy"* ]]; then
            kept+="$line"$'\n'
        fi
    done
    if [ -n "$current" ]; then
        result_lines_array["$current"]="$(echo "$kept" | awk 'NR>1')"
    fi
}

check_nvBW_gpu_bw() {
    local pcie=$1 p2p=$2 tests
    if ! boost_gpu_clock >/dev/null 2>&1; then
        die 1 -e "check_gpu_bw: check_gpu_bw: Failed raise GPU clocks with error code. FaultCode: NHCNA"
        return 0
    fi
    trap cleanup EXIT
    if ! catch_error "timeout 3m nvidia-smi --query-gpu=name --format=csv,noheader" \
        "check_gpu_bw: Failed to get GPU Count with error code"; then
        return 0
    fi
    ngpus=$(echo "$output" | wc -l) # counted, and not used after, as upstream
    tests="$H2D $D2H"
    if [[ "$(check_nvlink_enabled)" == true && -n "$p2p" ]]; then
        tests="$tests $P2P"
    fi
    if ! catch_error "$NVBW -t $tests -i 10" \
        "check_gpu_bw: Failed to run NVBandwidth with error code"; then
        return 0
    fi
    _nhc_split_output "$output"
    evaluate_nvBW_result "$pcie" "$p2p"
    pass 0 "check_nvBW_gpu_bw: GPU bandwidth Tests with NVBandwidth passed"
    return 0
}

check_gpu_bw() {
    trap "background_cleanup" RETURN
    if lspci | grep -iq NVIDIA; then
        if [[ -z "$1" ]]; then
            die 1 -e "check_gpu_bw: Expected H2D/D2H bandwidth not set! FaultCode: NHCNA"
            return 0
        fi
        check_nvBW_gpu_bw "$1" "$2"
    else
        die 1 -e "check_gpu_bw: No GPUs found! FaultCode: NHC2009"
    fi
    pass 0 "check_gpu_bw: GPU Bandwidth Tests Passed"
    return 0
}

# -- NHC's framework, as upstream's bats tests give it -------------------------------------
log() { echo $*; }
die() { log "ERROR:  $NAME:  Health check failed:  $*"; }
dbg() { log "dbg: $*"; }
warning() { log "WARNING:  $NAME:  $*"; }
pass() { log "PASS: $*"; }
boost_gpu_clock() { return 0; }
remove_clock_boost() { return 0; }
background_cleanup() { kill $(jobs -p) 2>/dev/null; }
