// gpubw's protocol kernels, the small compile unit that every measurement needs: the spin gate
// (gpubw_gate_wait and the cross-rank relay), the pattern fill and verify of buffers, and the
// split-warp clear. Compiled first, apart from the copy kernels of gpubw.cu, so that a run on a
// cold kernel cache starts its copy-engine testcases while gpubw.cu still compiles (see
// gpubw.kernels.modules.PROTOCOL). common.cuh comes before this text.

// Nanoseconds from the GPU's global timer (independent of the SM clock).
__device__ __forceinline__ u64 global_timer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// (flag, timeout_ns, status): the spin gate. One thread polls the host flag until it becomes
// non-zero. If timeout_ns pass first it writes 1 to the host *status and returns, so the host
// can tell that the sample's copies started before it released the gate.
// gate_poll: the polling both gate kernels do. Returns once *flag is non-zero (true) or, after
// timeout_ns, with 1 written to *status (false).
__device__ __forceinline__ bool gate_poll(const volatile int *flag, u64 timeout_ns,
                                          volatile int *status) {
    const u64 start = global_timer_ns();
    while (*flag == 0) {
        if (global_timer_ns() - start >= timeout_ns) {
            *status = 1;
            return false;
        }
#if __CUDA_ARCH__ >= 700
        __nanosleep(128);
#endif
    }
    return true;
}

extern "C" __global__ void gpubw_gate_wait(const volatile int *flag, u64 timeout_ns,
                                           volatile int *status) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    if (!gate_poll(flag, timeout_ns, status)) {
        __threadfence_system();
    }
}

// (dst, pattern, words): dst[k] = pattern[k % PATTERN_WORDS] for k < words.
extern "C" __global__ void gpubw_fill(u32 *__restrict__ dst, const u32 *__restrict__ pattern,
                                      u64 words) {
    const u64 stride = grid_threads();
    for (u64 k = first_index(); k < words; k += stride) {
        dst[k] = pattern[k & GPUBW_PATTERN_MASK];
    }
}

// (buf, pattern, words, first_bad): atomicMin(first_bad, k) for the words k that differ from
// the pattern. Each thread walks its indices in increasing order, so its first mismatch is its
// smallest one and one atomic per thread suffices.
extern "C" __global__ void gpubw_verify(const u32 *__restrict__ buf,
                                        const u32 *__restrict__ pattern, u64 words,
                                        u64 *first_bad) {
    const u64 stride = grid_threads();
    for (u64 k = first_index(); k < words; k += stride) {
        if (__ldcg(buf + k) != pattern[k & GPUBW_PATTERN_MASK]) {
            atomicMin(first_bad, k);
            return;
        }
    }
}

// (buf, elements, parity): zero the 16-byte elements whose 32-element group has `parity`.
extern "C" __global__ void gpubw_clear_warp_parity(uint4 *buf, u64 elements, u32 parity) {
    const u64 stride = grid_threads();
    const u64 want = (u64)(parity & 1U);
    for (u64 e = first_index(); e < elements; e += stride) {
        if (((e >> 5) & 1ULL) == want) {
            buf[e] = make_uint4(0U, 0U, 0U, 0U);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cross-rank spin gate (multinode testcases).
// (host_flag, device_flag, timeout_ns, status): on the first rank's first stream, one thread
// polls the host int *host_flag as gpubw_gate_wait does (gate_poll); when it becomes non-zero
// it makes everything before visible system-wide and stores 1 to *device_flag, a device int (in
// memory shared by every rank) that every other rank's gpubw_gate_wait polls. On a timeout it
// writes 1 to *status and still sets the device flag, so no rank's streams stay held.
extern "C" __global__ void gpubw_gate_relay(const volatile int *host_flag,
                                            volatile int *device_flag, u64 timeout_ns,
                                            volatile int *status) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    gate_poll(host_flag, timeout_ns, status);
    __threadfence_system();
    *device_flag = 1;
    __threadfence_system();
}
