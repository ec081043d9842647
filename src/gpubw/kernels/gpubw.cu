// gpubw's CUDA kernels, compiled at run time by NVRTC for each device's exact architecture
// (see gpubw/kernels/__init__.py for the catalogue: names, parameter order and semantics, and
// gpubw/kernels/cache.py for the compiler and the on-disk cubin cache).
//
// Every index and size is 64-bit, so buffers above 16 GiB (2^30 16-byte elements, 2^32 words)
// are handled; every kernel is grid-stride, so it is correct for any grid the host chooses.
//
// The copy, one-way, chase and TMA kernels: the large compile unit. The spin gate, fill and
// verify are the small unit gpubw_protocol.cu, compiled first; common.cuh (the types, the
// pattern length, the grid-stride indices) comes before the text of both.

// Copy kernels: 16-byte elements in flight per thread before the first store, and the block
// size / minimum resident blocks per SM that the register budget is sized for. The launch
// shape (gpubw.initiators.copy_launch_shape) must use a block of at most GPUBW_COPY_BLOCK.
#ifndef GPUBW_COPY_UNROLL
#define GPUBW_COPY_UNROLL 8
#endif
#ifndef GPUBW_COPY_BLOCK
#define GPUBW_COPY_BLOCK 512
#endif
#ifndef GPUBW_COPY_MIN_BLOCKS
#define GPUBW_COPY_MIN_BLOCKS 2
#endif
// Layout of a copy pass: 0 = grid-stride (thread t: t, t+T, ...), 1 = block tiles (each block
// copies contiguous tiles of blockDim x UNROLL elements; better DRAM page locality).
// Tiled + streaming hints measured best on 2 x H200 (benchmarks/README.md, tune_copy.py):
// device-local 3975 vs 3946 GB/s read+write, NVLink peer read 378.6 vs 376.2 GB/s.
#ifndef GPUBW_COPY_TILED
#define GPUBW_COPY_TILED 1
#endif
// Cache operators of the copy's loads and stores (benchmarks/tune_copy.py measures them).
// Loads: 0 = ld.global.cg (L2 only); 3 = ld.global.cs (streaming; may allocate in L1, so a
// tiny buffer copied `loops` times by the same block could be served from L1: tuning only);
// 4 = ld.global.nc.L1::no_allocate; 5 = ld.global.cg.L2::256B (256-byte L2 prefetch);
// 6 = ld.global.L1::no_allocate with an L2 evict-first policy.
// Stores: 0 = st.global; 1 = st.global.cs (evict-first in L2, so copied data does not push out
// what is still to be read); 2 = st.global.cg; 3 = st.global.L1::no_allocate; 4 = st.global
// with an L2 evict-first policy.
// GPUBW_COPY_HINT (earlier tuning runs) sets both: 0 = cg/cg, 1 = cs/cs, 2 = cg/cs.
#ifndef GPUBW_COPY_HINT
#define GPUBW_COPY_HINT 2
#endif
#ifndef GPUBW_COPY_LD
#if GPUBW_COPY_HINT == 1
#define GPUBW_COPY_LD 3
#else
#define GPUBW_COPY_LD 0
#endif
#endif
#ifndef GPUBW_COPY_ST
#if GPUBW_COPY_HINT == 0
#define GPUBW_COPY_ST 2
#else
#define GPUBW_COPY_ST 1
#endif
#endif

#if GPUBW_COPY_LD == 0
#define GPUBW_LD_OP "ld.global.cg.v4.u32"
#elif GPUBW_COPY_LD == 3
#define GPUBW_LD_OP "ld.global.cs.v4.u32"
#elif GPUBW_COPY_LD == 4
#define GPUBW_LD_OP "ld.global.nc.L1::no_allocate.v4.u32"
#elif GPUBW_COPY_LD == 5
#define GPUBW_LD_OP "ld.global.cg.L2::256B.v4.u32"
#elif GPUBW_COPY_LD != 6
#error "GPUBW_COPY_LD must be 0, 3, 4, 5 or 6"
#endif

// The copy's 16-byte load (not volatile: each element is loaded once per pass, and the pass
// loop's stores keep every pass's loads alive).
__device__ __forceinline__ uint4 copy_ld(const uint4 *p) {
    uint4 v;
#if GPUBW_COPY_LD == 6
    asm("{ .reg .b64 pol;\n\t"
        "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
        "ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], pol; }"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p)
        : "memory");
#else
    asm(GPUBW_LD_OP " {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p)
        : "memory");
#endif
    return v;
}

#if GPUBW_COPY_ST == 0
#define GPUBW_ST_OP "st.global.v4.u32"
#elif GPUBW_COPY_ST == 1
#define GPUBW_ST_OP "st.global.cs.v4.u32"
#elif GPUBW_COPY_ST == 2
#define GPUBW_ST_OP "st.global.cg.v4.u32"
#elif GPUBW_COPY_ST == 3
#define GPUBW_ST_OP "st.global.L1::no_allocate.v4.u32"
#elif GPUBW_COPY_ST != 4
#error "GPUBW_COPY_ST must be 0 to 4"
#endif

__device__ __forceinline__ void copy_st(uint4 *p, uint4 v) {
#if GPUBW_COPY_ST == 4
    asm volatile("{ .reg .b64 pol;\n\t"
                 "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                 "st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, pol; }" ::"l"(p),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
#else
    asm volatile(GPUBW_ST_OP " [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
#endif
}
#define GPUBW_LD(p) copy_ld(p)
#define GPUBW_ST(p, v) copy_st((p), (v))

// Element e belongs to the 32-element group e / 32.
__device__ __forceinline__ bool group_is_odd(u64 e) { return ((e >> 5) & 1ULL) != 0ULL; }

// One pass of a grid-stride copy of `elements` 16-byte elements. Thread t handles the elements
// t, t + T, t + 2T, ... (T = threads in the grid), so every warp access is 512 contiguous bytes.
// GPUBW_COPY_UNROLL loads are issued before their stores, so each thread keeps that many
// independent 16-byte reads in flight (what covers NVLink and PCIe latency). Loads and stores
// use the .cg hint (cache in L2 only, never in L1): a small buffer copied `loops` times must
// not be served from the SM's L1 after the first pass. Addresses advance by pointer increments
// so that the unrolled body needs registers for its data, not for 2 x UNROLL 64-bit addresses.
__device__ __forceinline__ void copy_pass(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                                          u64 elements) {
#if GPUBW_COPY_TILED
    const u64 bd = (u64)blockDim.x;
    const u64 tile = bd * (u64)GPUBW_COPY_UNROLL;
    for (u64 base = (u64)blockIdx.x * tile; base < elements; base += (u64)gridDim.x * tile) {
        const u64 t = base + (u64)threadIdx.x;
        if (base + tile <= elements) {
            uint4 v[GPUBW_COPY_UNROLL];
#pragma unroll
            for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                v[k] = GPUBW_LD(src + t + (u64)k * bd);
            }
#pragma unroll
            for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                GPUBW_ST(dst + t + (u64)k * bd, v[k]);
            }
        } else {
            for (u64 i = t; i < elements; i += bd) {
                GPUBW_ST(dst + i, GPUBW_LD(src + i));
            }
        }
    }
    return;
#endif
    const u64 stride = grid_threads();
    const u64 chunk = stride * (u64)GPUBW_COPY_UNROLL;
    u64 i = first_index();
    // Whole chunks: every one of the UNROLL indices is in range, no predicates needed.
    if (elements > (u64)(GPUBW_COPY_UNROLL - 1) * stride) {
        const u64 limit = elements - (u64)(GPUBW_COPY_UNROLL - 1) * stride;
#pragma unroll 1
        for (; i < limit; i += chunk) {
            uint4 v[GPUBW_COPY_UNROLL];
            const uint4 *s = src + i;
#pragma unroll
            for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                v[k] = GPUBW_LD(s);
                s += stride;
            }
            uint4 *d = dst + i;
#pragma unroll
            for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                GPUBW_ST(d, v[k]);
                d += stride;
            }
        }
    }
    // The last partial chunk (fewer than UNROLL elements left for this thread).
#pragma unroll 1
    for (; i < elements; i += stride) {
        GPUBW_ST(dst + i, GPUBW_LD(src + i));
    }
}

// (dst, src, elements, loops): copy `elements` 16-byte elements src -> dst, `loops` times.
extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK, GPUBW_COPY_MIN_BLOCKS)
    gpubw_copy(uint4 *__restrict__ dst, const uint4 *__restrict__ src, u64 elements, u32 loops) {
    for (u32 l = 0; l < loops; ++l) {
        copy_pass(dst, src, elements);
    }
}

// Elements per thread of gpubw_copy_flat (benchmarks/tune_copy.py flat, H200, 4 GiB
// device-local, launched with loops x pieces blocks: one element per thread in 128-thread
// blocks 4,294-4,318 GB/s read + write, 256-thread blocks 4,233-4,274, two per thread in
// 128-thread blocks 4,257-4,266; gpubw_copy's resident grid 3,940-3,947).
#ifndef GPUBW_FLAT_UNROLL
#define GPUBW_FLAT_UNROLL 1
#endif

// (dst, src, elements, loops): the same copy as gpubw_copy, `loops` times, over the
// pass-major (pass, piece) space: step k copies piece k % pieces (blockDim x FLAT_UNROLL
// consecutive elements) of pass k / pieces. Launched with loops x pieces blocks (gpubw's
// device-local SM copies beyond L2: initiators.flat_copy_launches), every block copies one
// piece of one pass and exits; blocks start in index order, so the elements in flight stay
// one compact window moving through the buffers (what makes a one-shot grid of small blocks
// faster on HBM than a resident grid whose blocks drift apart). Any grid is correct; a grid
// of exactly `pieces` blocks would copy each piece `loops` times in a row (served from L2):
// launch loops x pieces, or a resident grid.
extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK)
    gpubw_copy_flat(uint4 *__restrict__ dst, const uint4 *__restrict__ src, u64 elements,
                    u32 loops) {
    const u64 bd = (u64)blockDim.x, piece = bd * (u64)GPUBW_FLAT_UNROLL;
    const u64 pieces = (elements + piece - 1) / piece, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 base = (k % pieces) * piece, t = base + (u64)threadIdx.x;
        if (base + piece <= elements) {
            uint4 v[GPUBW_FLAT_UNROLL];
#pragma unroll
            for (int u = 0; u < GPUBW_FLAT_UNROLL; ++u) v[u] = GPUBW_LD(src + t + (u64)u * bd);
#pragma unroll
            for (int u = 0; u < GPUBW_FLAT_UNROLL; ++u) GPUBW_ST(dst + t + (u64)u * bd, v[u]);
        } else {
            for (u64 i = t; i < elements; i += bd) GPUBW_ST(dst + i, GPUBW_LD(src + i));
        }
    }
}

// A 16-byte load that stays a load: `volatile`, so repeating it on one address is never merged.
__device__ __forceinline__ uint4 load_cg_volatile(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// (dst, src, elements, loops): element e moves src -> dst when its 32-element group e / 32 is
// odd and dst -> src when it is even; no element is both read and written. Each thread copies
// each of its elements `loops` times in a row before the next (launched with one thread per
// element: gpubw.initiators.split_warp_launch_shape), the order of nvbandwidth's split-warp
// copy. Measured on 2 x H200 (benchmarks/tune_copy.py split): 42.1 GB/s each way on one GPU
// and 42.0 with both GPUs at once, as nvbandwidth (42.3 / 42.1); a pass-by-pass order over the
// whole buffer gave 40.9 and 33-37, because under two GPUs it streams all of host memory where
// this order keeps the host-side working set to the resident threads' elements. Loads bypass
// L1 (.cg): with an L1-cached load the repeats are served from L1 and the figure doubles
// (85 GB/s measured), which is not a transfer over the link.
extern "C" __global__ void __launch_bounds__(1024)
    gpubw_copy_split_warp(uint4 *dst, uint4 *src, u64 elements, u32 loops) {
    const u64 stride = grid_threads();
    for (u64 e = first_index(); e < elements; e += stride) {
        const bool forward = group_is_odd(e);
        uint4 *to = forward ? dst + e : src + e;
        const uint4 *from = forward ? src + e : dst + e;
        for (u32 l = 0; l < loops; ++l) {
            __stcs(to, load_cg_volatile(from));
        }
    }
}

// (start, steps, target, sink): only block `target` (thread 0) follows p = *(void **)p `steps`
// times from `start`, each a global load (each address depends on the load before, so none
// is hoisted or merged; a 2 MB ring walked at a 128-byte stride misses L1 anyway), and stores
// the final pointer to *sink so the chain cannot be removed.
extern "C" __global__ void gpubw_pointer_chase(const void *start, u64 steps, u32 target,
                                               u64 *sink) {
    if (blockIdx.x != target || threadIdx.x != 0) {
        return;
    }
    u64 p = (u64)start;
    for (u64 s = 0; s < steps; ++s) {
        u64 next;
        // ld.global, not a generic load: the ring is in the global window (device memory, or
        // host memory mapped there); on an H100 the generic ld.volatile read ~3 ns more of
        // ~1,180 ns on host memory (benchmarks/latency_variants.py), what put gpubw above
        // nvbandwidth. Each address comes from the load before, so nothing can be merged.
        asm volatile("ld.global.u64 %0, [%1];" : "=l"(next) : "l"(p) : "memory");
        p = next;
    }
    *sink = p;
}

// ---------------------------------------------------------------------------------------------
// Device-local read-only and write-only kernels (nvbandwidth v0.10's device_local_read_sm and
// device_local_write_sm): resident grid-stride passes over one buffer, GPUBW_COPY_UNROLL
// independent 16-byte accesses in flight per thread, the copy kernels' cache operators.

// (src, elements, loops, sink): read `elements` 16-byte elements, `loops` times. Each thread
// folds what it reads (xor), and stores the fold to *sink only if it equals *sink's sentinel
// argument `never`: the compiler cannot drop a load, and nothing is written in practice.
extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK, GPUBW_COPY_MIN_BLOCKS)
    gpubw_read(const uint4 *__restrict__ src, u64 elements, u32 loops, u32 *sink) {
    const u64 stride = grid_threads();
    u32 fold = 0U;
    for (u32 l = 0; l < loops; ++l) {
        u64 i = first_index();
        if (elements > (u64)(GPUBW_COPY_UNROLL - 1) * stride) {
            const u64 limit = elements - (u64)(GPUBW_COPY_UNROLL - 1) * stride;
#pragma unroll 1
            for (; i < limit; i += stride * (u64)GPUBW_COPY_UNROLL) {
                uint4 v[GPUBW_COPY_UNROLL];
#pragma unroll
                for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                    v[k] = load_cg_volatile(src + i + k * stride);
                }
#pragma unroll
                for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) {
                    fold ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
                }
            }
        }
#pragma unroll 1
        for (; i < elements; i += stride) {
            const uint4 v = load_cg_volatile(src + i);
            fold ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        fold = (fold << 1) | (fold >> 31);  // passes do not cancel each other
    }
    if (fold == 0x5EEDF00DU && sink != nullptr) {
        *sink = fold;
    }
}

// (dst, elements, value, loops): every 32-bit word of `elements` 16-byte elements = value,
// `loops` times; stores only, nothing is read.
extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK, GPUBW_COPY_MIN_BLOCKS)
    gpubw_write(uint4 *__restrict__ dst, u64 elements, u32 value, u32 loops) {
    const uint4 v = make_uint4(value, value, value, value);
    const u64 stride = grid_threads();
    for (u32 l = 0; l < loops; ++l) {
        u64 i = first_index();
        if (elements > (u64)(GPUBW_COPY_UNROLL - 1) * stride) {
            const u64 limit = elements - (u64)(GPUBW_COPY_UNROLL - 1) * stride;
#pragma unroll 1
            for (; i < limit; i += stride * (u64)GPUBW_COPY_UNROLL) {
#pragma unroll
                for (int k = 0; k < GPUBW_COPY_UNROLL; ++k) GPUBW_ST(dst + i + k * stride, v);
            }
        }
#pragma unroll 1
        for (; i < elements; i += stride) GPUBW_ST(dst + i, v);
    }
}

// The same read and write over gpubw_copy_flat's pass-major (pass, piece) space, one 16-byte
// element per thread: launched with loops x pieces blocks (initiators.flat_copy_launches), for
// a buffer in the executing device's memory beyond its L2. On an H100 at 4 GiB
// (benchmarks/tune_oneway.py, call c): flat one-element reads 3,216 GB/s against the resident
// kernel's 3,105 and PyTorch's sum 3,111; flat writes 3,302 against 3,210 and PyTorch's
// fill_ 3,295. Any grid is correct (a block-stride loop covers what the grid does not).
extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK)
    gpubw_read_flat(const uint4 *__restrict__ src, u64 elements, u32 loops, u32 *sink) {
    const u64 bd = (u64)blockDim.x;
    const u64 pieces = (elements + bd - 1) / bd, total = pieces * (u64)loops;
    u32 fold = 0U;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 i = (k % pieces) * bd + (u64)threadIdx.x;
        if (i < elements) {
            const uint4 v = load_cg_volatile(src + i);
            fold ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        fold = (fold << 1) | (fold >> 31);  // passes do not cancel each other
    }
    if (fold == 0x5EEDF00DU && sink != nullptr) {
        *sink = fold;
    }
}

extern "C" __global__ void __launch_bounds__(GPUBW_COPY_BLOCK)
    gpubw_write_flat(uint4 *__restrict__ dst, u64 elements, u32 value, u32 loops) {
    const uint4 v = make_uint4(value, value, value, value);
    const u64 bd = (u64)blockDim.x;
    const u64 pieces = (elements + bd - 1) / bd, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 i = (k % pieces) * bd + (u64)threadIdx.x;
        if (i < elements) GPUBW_ST(dst + i, v);
    }
}

// (buf, words, value, first_bad): atomicMin(first_bad, k) for the words k that differ from
// value (the check of gpubw_write, as gpubw_verify is the check of a copy).
extern "C" __global__ void gpubw_verify_value(const u32 *__restrict__ buf, u64 words, u32 value,
                                              u64 *first_bad) {
    const u64 stride = grid_threads();
    for (u64 k = first_index(); k < words; k += stride) {
        if (__ldcg(buf + k) != value) {
            atomicMin(first_bad, k);
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// TMA copies (nvbandwidth v0.10's *_tma testcases): the Tensor Memory Accelerator's bulk
// asynchronous copies, global -> shared (cp.async.bulk with an mbarrier counting the bytes)
// and shared -> global (cp.async.bulk ... bulk_group), sm_90 and newer. One thread per block
// issues them; each block has GPUBW_TMA_STAGES shared buffers of GPUBW_TMA_CHUNK bytes, so
// that many loads are in flight while the previous chunk is stored. Built for older
// architectures too (so the module loads everywhere), where they trap: the testcases that
// launch them are waived below compute capability 9.0.
#ifndef GPUBW_TMA_CHUNK
#define GPUBW_TMA_CHUNK 8192
#endif
#ifndef GPUBW_TMA_STAGES
#define GPUBW_TMA_STAGES 4
#endif
static_assert(GPUBW_TMA_CHUNK % 16 == 0, "bulk copies move multiples of 16 bytes");

__device__ __forceinline__ u32 shared_address(const void *p) {
    u32 a;
    asm volatile("{ .reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t; }"
                 : "=r"(a)
                 : "l"(p));
    return a;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void tma_barrier_init(u32 bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Load `bytes` from global `src` into shared `dst`; the barrier completes when they arrived.
__device__ __forceinline__ void tma_load(u32 dst, const void *src, u32 bytes, u32 bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void tma_wait(u32 bar, u32 phase) {
    u32 done = 0U;
    while (!done) {
        asm volatile("{ .reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(bar), "r"(phase)
                     : "memory");
    }
}

// Store `bytes` from shared `src` to global `dst`, as one more bulk group.
__device__ __forceinline__ void tma_store(void *dst, u32 src, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
#endif

// (dst, src, elements, loops): copy `elements` 16-byte elements src -> dst, `loops` times,
// through shared memory with bulk copies. Block b copies the chunks b, b + grid, ... of every
// pass (item n of its sequence is pass n / mine, chunk b + (n % mine) x grid). Thread 0 issues
// everything: the first STAGES loads, then per item wait for its load, store it, and once the
// store before it has read its buffer, load the item STAGES - 1 ahead into that buffer.
extern "C" __global__ void __launch_bounds__(32)
    gpubw_copy_tma(uint4 *__restrict__ dst, const uint4 *__restrict__ src, u64 elements,
                   u32 loops) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) unsigned char stage[GPUBW_TMA_STAGES][GPUBW_TMA_CHUNK];
    __shared__ __align__(8) u64 full[GPUBW_TMA_STAGES];
    if (threadIdx.x != 0) {
        return;
    }
    const u64 per_chunk = GPUBW_TMA_CHUNK / 16;
    const u64 chunks = (elements + per_chunk - 1) / per_chunk;
    if (blockIdx.x >= chunks) {
        return;
    }
    const u64 mine = (chunks - 1 - blockIdx.x) / gridDim.x + 1;
    const u64 items = mine * (u64)loops;
    for (int s = 0; s < GPUBW_TMA_STAGES; ++s) {
        tma_barrier_init(shared_address(&full[s]));
    }
    // item n: its chunk's first element and its byte count
    auto chunk_of = [&](u64 n, u64 *first) -> u32 {
        const u64 c = blockIdx.x + (n % mine) * gridDim.x;
        *first = c * per_chunk;
        const u64 left = elements - *first;
        return (u32)((left < per_chunk ? left : per_chunk) * 16ULL);
    };
    u64 first;
    for (u64 n = 0; n < items && n < GPUBW_TMA_STAGES; ++n) {
        const u32 bytes = chunk_of(n, &first);
        tma_load(shared_address(stage[n]), src + first, bytes, shared_address(&full[n]));
    }
    for (u64 n = 0; n < items; ++n) {
        const int s = (int)(n % GPUBW_TMA_STAGES);
        const u32 bytes = chunk_of(n, &first);
        tma_wait(shared_address(&full[s]), (u32)((n / GPUBW_TMA_STAGES) & 1ULL));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        tma_store(dst + first, shared_address(stage[s]), bytes);
        const u64 next = n - 1 + GPUBW_TMA_STAGES;
        if (n >= 1 && next < items) {
            // the store of item n - 1 has read its buffer: load item n - 1 + STAGES into it
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
            const int r = (int)((n - 1) % GPUBW_TMA_STAGES);
            const u32 nbytes = chunk_of(next, &first);
            tma_load(shared_address(stage[r]), src + first, nbytes, shared_address(&full[r]));
        }
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
    __trap();
#endif
}

// (start, steps, target, sink): gpubw_pointer_chase with every dereference a TMA bulk copy:
// only block `target` (thread 0) copies the 16 bytes at p into shared memory
// (cp.async.bulk, an mbarrier counting them), waits for them and takes the next pointer from
// there, `steps` times from `start` (whose nodes are 16-byte aligned: the ring's stride is
// 128 bytes), and stores the final pointer to *sink.
extern "C" __global__ void gpubw_pointer_chase_tma(const void *start, u64 steps, u32 target,
                                                   u64 *sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(16) u64 node[2];
    __shared__ __align__(8) u64 full;
    if (blockIdx.x != target || threadIdx.x != 0) {
        return;
    }
    const u32 bar = shared_address(&full), box = shared_address(node);
    tma_barrier_init(bar);
    u64 p = (u64)start;
    for (u64 s = 0; s < steps; ++s) {
        tma_load(box, (const void *)p, 16U, bar);
        tma_wait(bar, (u32)(s & 1ULL));
        asm volatile("ld.volatile.shared.u64 %0, [%1];" : "=l"(p) : "r"(box) : "memory");
    }
    *sink = p;
#else
    __trap();
#endif
}
