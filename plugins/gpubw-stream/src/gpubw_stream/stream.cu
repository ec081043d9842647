// gpubw-stream's kernels: the STREAM operations (copy, scale, add, triad), a read-only
// reduction, a fill, a strided read, and the two checks that verify their results. Compiled
// at run time by gpubw's backend (NVRTC, cached on disk) as the kernel module "gpubw_stream";
// the catalogue (names, parameter order, semantics) is gpubw_stream/kernels.py.
//
// No header is included, so the source compiles with NVRTC alone: fp16 arithmetic is done with
// PTX's f16/f16x2 instructions on raw bits, never with cuda_fp16.h.
//
// Every array is accessed as 16-byte vectors (uint4): `vecs` is the number of vectors. One
// 16-byte vector is 4 fp32, 8 fp16 or 2 fp64 elements, so the bytes moved per vector, and the
// memory access pattern, are the same whatever the element type. Loads are volatile asm, so
// the compiler cannot drop, merge or hoist a repeated load. Two kinds of kernel, both correct
// for any grid and running `loops` passes in one launch: the resident grid-stride ones keep
// STREAM_UNROLL independent 16-byte loads in flight per thread and are launched with a few
// blocks per SM; the "_flat" ones (copy, scale, add, triad, write; the read with
// STREAM_READ_FLAT_V vectors per thread) do one vector per thread and are launched with one
// block per (pass, piece), a one-shot grid (see unary_flat). The host's choice is
// gpubw_stream/kernels.py (FLAT, flat_launches); benchmarks/tune_copy.py measured the
// choices below on an H200 (benchmarks/README.md).

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#ifndef STREAM_UNROLL
#define STREAM_UNROLL 4
#endif
#ifndef STREAM_BLOCK
#define STREAM_BLOCK 256
#endif
// Minimum resident blocks per SM the register budget is sized for (__launch_bounds__).
#ifndef STREAM_MIN_BLOCKS
#define STREAM_MIN_BLOCKS 1
#endif
// Which vectors a thread touches: 0 = grid-stride (thread t of T: t, t + T, ...); 1 = block
// tiles (a block handles STREAM_BLOCK x STREAM_UNROLL consecutive vectors, thread t the
// vectors t, t + STREAM_BLOCK, ...; the tiles b, b + grid, ...: one tile per block when the
// grid covers the array, as in PyTorch's vectorized element-wise kernel).
#ifndef STREAM_LAYOUT
#define STREAM_LAYOUT 0
#endif
// Cache operators of the vector loads: 0 = ld.global.cg (L2 only); 1 = ld.global (L1 and L2);
// 2 = ld.global.nc (non-coherent/texture path); 3 = ld.global.cs (streaming);
// 4 = ld.global.nc.L1::no_allocate; 5 = ld.global.cg.L2::256B (256-byte L2 prefetch);
// 6 = ld.global.L1::no_allocate with an L2 evict-first policy.
// 0 is the default. 1, 2 and 3 may allocate in L1, so a resident grid re-reading a small
// array `loops` times could be served from L1: tuning only.
#ifndef STREAM_LD
#define STREAM_LD 0
#endif
// Cache operators of the vector stores: 0 = st.global (write-back); 1 = st.global.cs
// (streaming, evict-first); 2 = st.global.cg; 3 = st.global.L1::no_allocate; 4 = st.global
// with an L2 evict-first policy; 5 = st.global with an L2 evict-last policy. STREAM_ST is the
// resident grid-stride kernels' (0, as measured on 2026-11-29), STREAM_FLAT_ST the flat
// kernels': 4 measured best or equal on every one-shot shape (4 GiB on an H200: copy 4,291 vs
// 4,282 GB/s for 0, triad 4,405 vs 4,399, write 4,704 vs 4,704 and 4,686 for .cs;
// benchmarks/results/tune-kernels-h200-2026-11-30.json).
#ifndef STREAM_ST
#define STREAM_ST 0
#endif
#ifndef STREAM_FLAT_ST
#define STREAM_FLAT_ST 4
#endif
// L2 cache policies and prefetch sizes need sm_80: older devices get the plain operators.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#if STREAM_LD == 5 || STREAM_LD == 6
#undef STREAM_LD
#define STREAM_LD 0
#endif
#endif

static_assert(sizeof(void *) == 8, "gpubw-stream needs 64-bit device pointers");

// The STREAM scalar s = 3.0, as fp32, fp16x2 and fp64 bits.
#define S_F32 3.0f
#define S_F16X2 0x42004200u
#define S_F64 3.0
// 1.0 as fp16 bits (the strided kernel's y = x + 1).
#define ONE_F16 ((u16)0x3C00u)

__device__ __forceinline__ u64 first_index() {
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * (u64)blockDim.x; }

// The checks read with .cg whatever STREAM_LD is.
__device__ __forceinline__ uint4 ld16_cg(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

#if STREAM_LD == 0
#define STREAM_LD_OP "ld.global.cg.v4.u32"
#elif STREAM_LD == 1
#define STREAM_LD_OP "ld.global.v4.u32"
#elif STREAM_LD == 2
#define STREAM_LD_OP "ld.global.nc.v4.u32"
#elif STREAM_LD == 3
#define STREAM_LD_OP "ld.global.cs.v4.u32"
#elif STREAM_LD == 4
#define STREAM_LD_OP "ld.global.nc.L1::no_allocate.v4.u32"
#elif STREAM_LD == 5
#define STREAM_LD_OP "ld.global.cg.L2::256B.v4.u32"
#endif

__device__ __forceinline__ uint4 ld16(const uint4 *p) {
    uint4 v;
#if STREAM_LD == 6
    asm volatile("{ .reg .b64 pol;\n\t"
                 "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                 "ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], pol; }"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#else
    asm volatile(STREAM_LD_OP " {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#endif
    return v;
}

// One store function per operator (st16_0 .. st16_5, numbered as STREAM_ST); st16 is the
// resident kernels' one, st16_flat the flat kernels'.
#define STREAM_ST_PLAIN(N, OP)                                                                  \
    __device__ __forceinline__ void st16_##N(uint4 *p, uint4 v) {                              \
        asm volatile(OP " [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),    \
                     "r"(v.w)                                                                  \
                     : "memory");                                                              \
    }
STREAM_ST_PLAIN(0, "st.global.v4.u32")
STREAM_ST_PLAIN(1, "st.global.cs.v4.u32")
STREAM_ST_PLAIN(2, "st.global.cg.v4.u32")
STREAM_ST_PLAIN(3, "st.global.L1::no_allocate.v4.u32")
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// L2 cache policies need sm_80: older devices store plainly.
__device__ __forceinline__ void st16_4(uint4 *p, uint4 v) { st16_0(p, v); }
__device__ __forceinline__ void st16_5(uint4 *p, uint4 v) { st16_0(p, v); }
#else
#define STREAM_ST_POLICY(N, POLICY)                                                             \
    __device__ __forceinline__ void st16_##N(uint4 *p, uint4 v) {                              \
        asm volatile("{ .reg .b64 pol;\n\t"                                                     \
                     "createpolicy.fractional.L2::" POLICY ".b64 pol, 1.0;\n\t"                \
                     "st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, pol; }" ::"l"(p), \
                     "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)                                    \
                     : "memory");                                                              \
    }
STREAM_ST_POLICY(4, "evict_first")
STREAM_ST_POLICY(5, "evict_last")
#endif
#define STREAM_ST_FN_(N) st16_##N
#define STREAM_ST_FN(N) STREAM_ST_FN_(N)
#define st16 STREAM_ST_FN(STREAM_ST)
#define st16_flat STREAM_ST_FN(STREAM_FLAT_ST)

// -- element types: the arithmetic on one 16-byte vector ------------------------------------

__device__ __forceinline__ float f(u32 x) { return __uint_as_float(x); }
__device__ __forceinline__ u32 b(float x) { return __float_as_uint(x); }

struct F32 {
    typedef float acc;
    static __device__ __forceinline__ uint4 scale(uint4 c) {
        return make_uint4(b(S_F32 * f(c.x)), b(S_F32 * f(c.y)), b(S_F32 * f(c.z)),
                          b(S_F32 * f(c.w)));
    }
    static __device__ __forceinline__ uint4 add(uint4 a, uint4 c) {
        return make_uint4(b(f(a.x) + f(c.x)), b(f(a.y) + f(c.y)), b(f(a.z) + f(c.z)),
                          b(f(a.w) + f(c.w)));
    }
    // b + s * c
    static __device__ __forceinline__ uint4 triad(uint4 bb, uint4 c) {
        return make_uint4(b(fmaf(S_F32, f(c.x), f(bb.x))), b(fmaf(S_F32, f(c.y), f(bb.y))),
                          b(fmaf(S_F32, f(c.z), f(bb.z))), b(fmaf(S_F32, f(c.w), f(bb.w))));
    }
    static __device__ __forceinline__ acc sum(uint4 v) {
        return (f(v.x) + f(v.y)) + (f(v.z) + f(v.w));
    }
};

__device__ __forceinline__ u32 h2_add(u32 x, u32 y) {
    u32 d;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
    return d;
}
__device__ __forceinline__ u32 h2_mul(u32 x, u32 y) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
    return d;
}
__device__ __forceinline__ u32 h2_fma(u32 x, u32 y, u32 z) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(z));
    return d;
}
__device__ __forceinline__ float h2_sum(u32 x) {
    float lo, hi;
    asm("{ .reg .b16 l, h;\n\t"
        "mov.b32 {l, h}, %2;\n\t"
        "cvt.f32.f16 %0, l;\n\t"
        "cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi)
        : "r"(x));
    return lo + hi;
}

struct F16 {
    typedef float acc;
    static __device__ __forceinline__ uint4 scale(uint4 c) {
        return make_uint4(h2_mul(S_F16X2, c.x), h2_mul(S_F16X2, c.y), h2_mul(S_F16X2, c.z),
                          h2_mul(S_F16X2, c.w));
    }
    static __device__ __forceinline__ uint4 add(uint4 a, uint4 c) {
        return make_uint4(h2_add(a.x, c.x), h2_add(a.y, c.y), h2_add(a.z, c.z), h2_add(a.w, c.w));
    }
    static __device__ __forceinline__ uint4 triad(uint4 bb, uint4 c) {
        return make_uint4(h2_fma(S_F16X2, c.x, bb.x), h2_fma(S_F16X2, c.y, bb.y),
                          h2_fma(S_F16X2, c.z, bb.z), h2_fma(S_F16X2, c.w, bb.w));
    }
    static __device__ __forceinline__ acc sum(uint4 v) {
        return (h2_sum(v.x) + h2_sum(v.y)) + (h2_sum(v.z) + h2_sum(v.w));
    }
};

__device__ __forceinline__ double d_of(u32 lo, u32 hi) {
    return __longlong_as_double((long long)(((u64)hi << 32) | (u64)lo));
}
__device__ __forceinline__ void d_to(double x, u32 &lo, u32 &hi) {
    u64 v = (u64)__double_as_longlong(x);
    lo = (u32)v;
    hi = (u32)(v >> 32);
}

struct F64 {
    typedef double acc;
    static __device__ __forceinline__ uint4 scale(uint4 c) {
        uint4 r;
        d_to(S_F64 * d_of(c.x, c.y), r.x, r.y);
        d_to(S_F64 * d_of(c.z, c.w), r.z, r.w);
        return r;
    }
    static __device__ __forceinline__ uint4 add(uint4 a, uint4 c) {
        uint4 r;
        d_to(d_of(a.x, a.y) + d_of(c.x, c.y), r.x, r.y);
        d_to(d_of(a.z, a.w) + d_of(c.z, c.w), r.z, r.w);
        return r;
    }
    static __device__ __forceinline__ uint4 triad(uint4 bb, uint4 c) {
        uint4 r;
        d_to(fma(S_F64, d_of(c.x, c.y), d_of(bb.x, bb.y)), r.x, r.y);
        d_to(fma(S_F64, d_of(c.z, c.w), d_of(bb.z, bb.w)), r.z, r.w);
        return r;
    }
    static __device__ __forceinline__ acc sum(uint4 v) { return d_of(v.x, v.y) + d_of(v.z, v.w); }
};

// -- the skeletons ----------------------------------------------------------------------------

// The vectors of one thread: start, start + su, ..., start + (UNROLL - 1) su in one step, then
// the next step at + step (see STREAM_LAYOUT). Every vector < n is visited exactly once.
struct Walk {
    u64 start, su, step;
};
template <int Layout> __device__ __forceinline__ Walk walk() {
    if (Layout == 1) {
        const u64 bd = (u64)blockDim.x, tile = bd * (u64)STREAM_UNROLL;
        return {(u64)blockIdx.x * tile + (u64)threadIdx.x, bd, (u64)gridDim.x * tile};
    }
    const u64 T = grid_threads();
    return {first_index(), T, T * (u64)STREAM_UNROLL};
}

// dst[i] = OP(src[i]) for i < n vectors, `loops` times.
template <class Op>
__device__ __forceinline__ void unary(uint4 *dst, const uint4 *src, u64 n, u32 loops, Op op) {
    const Walk w = walk<STREAM_LAYOUT>();
    for (u32 l = 0; l < loops; ++l) {
        u64 i = w.start;
        for (; i + (STREAM_UNROLL - 1) * w.su < n; i += w.step) {
            uint4 v[STREAM_UNROLL];
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) v[u] = ld16(src + i + u * w.su);
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) st16(dst + i + u * w.su, op(v[u]));
        }
        for (; i < n; i += w.su) st16(dst + i, op(ld16(src + i)));
    }
}

// dst[i] = OP(x[i], y[i]) for i < n vectors, `loops` times.
template <class Op>
__device__ __forceinline__ void binary(uint4 *dst, const uint4 *x, const uint4 *y, u64 n,
                                       u32 loops, Op op) {
    const Walk w = walk<STREAM_LAYOUT>();
    for (u32 l = 0; l < loops; ++l) {
        u64 i = w.start;
        for (; i + (STREAM_UNROLL - 1) * w.su < n; i += w.step) {
            uint4 p[STREAM_UNROLL], q[STREAM_UNROLL];
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) {
                p[u] = ld16(x + i + u * w.su);
                q[u] = ld16(y + i + u * w.su);
            }
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) st16(dst + i + u * w.su, op(p[u], q[u]));
        }
        for (; i < n; i += w.su) st16(dst + i, op(ld16(x + i), ld16(y + i)));
    }
}

// The "flat" skeletons: one vector per thread per step over the (pass, block-sized piece)
// space, pass-major: step k covers pass k / pieces, vectors (k % pieces) x blockDim + thread.
// Launched with a grid of loops x pieces blocks (kernels.py: launch_plan), every block does
// one piece of one pass and exits, and blocks start in index order, so at any moment the
// vectors in flight are one compact window moving through the arrays -- what a one-shot grid
// of small blocks (PyTorch's element-wise kernels) does. With a smaller grid it is a
// grid-stride loop that still visits every vector of every pass once.
template <class Op>
__device__ __forceinline__ void unary_flat(uint4 *dst, const uint4 *src, u64 n, u32 loops, Op op) {
    const u64 bd = (u64)blockDim.x, pieces = (n + bd - 1) / bd, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 i = (k % pieces) * bd + (u64)threadIdx.x;
        if (i < n) st16_flat(dst + i, op(ld16(src + i)));
    }
}
template <class Op>
__device__ __forceinline__ void binary_flat(uint4 *dst, const uint4 *x, const uint4 *y, u64 n,
                                            u32 loops, Op op) {
    const u64 bd = (u64)blockDim.x, pieces = (n + bd - 1) / bd, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 i = (k % pieces) * bd + (u64)threadIdx.x;
        if (i < n) {
            const uint4 p = ld16(x + i), q = ld16(y + i);
            st16_flat(dst + i, op(p, q));
        }
    }
}

struct Identity {
    __device__ __forceinline__ uint4 operator()(uint4 v) const { return v; }
};
template <class T> struct Scale {
    __device__ __forceinline__ uint4 operator()(uint4 v) const { return T::scale(v); }
};
template <class T> struct Add {
    __device__ __forceinline__ uint4 operator()(uint4 p, uint4 q) const { return T::add(p, q); }
};
template <class T> struct Triad {
    __device__ __forceinline__ uint4 operator()(uint4 p, uint4 q) const { return T::triad(p, q); }
};

// Sum of a block's values (every thread passes one; the result is valid in thread 0).
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double warp_sums[STREAM_BLOCK / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    double total = 0.0;
    if (threadIdx.x == 0)
        for (u32 w = 0; w < (blockDim.x + 31u) / 32u; ++w) total += warp_sums[w];
    __syncthreads();  // warp_sums is reused by the next pass
    return total;
}

// Layout of the read (its partial sums are per block, so the layout decides which block sums
// which vectors; only their total is checked). 0 = grid-stride, as the simulation models it.
#ifndef STREAM_READ_LAYOUT
#define STREAM_READ_LAYOUT 0
#endif

// partials[blockIdx.x] = this block's sum of the elements it read, every pass.
template <class T>
__device__ __forceinline__ void reduce(const uint4 *src, u64 n, double *partials, u32 loops) {
    const Walk w = walk<STREAM_READ_LAYOUT>();
    for (u32 l = 0; l < loops; ++l) {
        typename T::acc s[STREAM_UNROLL];
#pragma unroll
        for (int u = 0; u < STREAM_UNROLL; ++u) s[u] = 0;
        u64 i = w.start;
        for (; i + (STREAM_UNROLL - 1) * w.su < n; i += w.step) {
            uint4 v[STREAM_UNROLL];
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) v[u] = ld16(src + i + u * w.su);
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) s[u] += T::sum(v[u]);
        }
        for (; i < n; i += w.su) s[0] += T::sum(ld16(src + i));
        double mine = 0.0;
#pragma unroll
        for (int u = 0; u < STREAM_UNROLL; ++u) mine += (double)s[u];
        const double total = block_sum(mine);
        if (threadIdx.x == 0) partials[blockIdx.x] = total;
    }
}

// Vectors per thread of the flat read (stream_read_*_flat): a piece is blockDim x
// STREAM_READ_FLAT_V vectors, thread t's are t, t + blockDim, ... (all loaded before they are
// summed). The host reads the same define from GPUBW_KERNEL_DEFINES to size its grid and the
// partial sums (kernels.py: read_flat_vectors), so set it there only.
#ifndef STREAM_READ_FLAT_V
#define STREAM_READ_FLAT_V 2
#endif
static_assert(STREAM_READ_FLAT_V == 1 || STREAM_READ_FLAT_V == 2 || STREAM_READ_FLAT_V == 4,
              "STREAM_READ_FLAT_V must be 1, 2 or 4");

// The flat read over the pass-major (pass, piece) space, as unary_flat: the block of step k
// sums piece k % pieces and writes partials[k % pieces] (every pass writes the same value to
// the same slot), so partials holds `pieces` doubles. Correct for any grid; k depends on the
// block only, so every thread of a block reaches block_sum's barriers together.
template <class T>
__device__ __forceinline__ void reduce_flat(const uint4 *src, u64 n, double *partials, u32 loops) {
    const u64 bd = (u64)blockDim.x, piece = bd * (u64)STREAM_READ_FLAT_V;
    const u64 pieces = (n + piece - 1) / piece, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 p = k % pieces, i = p * piece + (u64)threadIdx.x;
        typename T::acc s = 0;
        if (i + (STREAM_READ_FLAT_V - 1) * bd < n) {
            uint4 v[STREAM_READ_FLAT_V];
#pragma unroll
            for (int u = 0; u < STREAM_READ_FLAT_V; ++u) v[u] = ld16(src + i + u * bd);
#pragma unroll
            for (int u = 0; u < STREAM_READ_FLAT_V; ++u) s += T::sum(v[u]);
        } else {
            for (u64 j = i; j < n; j += bd) s += T::sum(ld16(src + j));  // the last piece
        }
        const double sum = block_sum((double)s);
        if (threadIdx.x == 0) partials[p] = sum;
    }
}

// dst[i] = src[i * stride] + 1 for i < m elements of T, `loops` times (scalar accesses).
__device__ __forceinline__ float ld_f32(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ u16 ld_f16(const u16 *p) {
    u16 v;
    asm volatile("ld.global.cg.b16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ double ld_f64(const double *p) {
    double v;
    asm volatile("ld.global.cg.f64 %0, [%1];" : "=d"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ float plus1(float x) { return x + 1.0f; }
__device__ __forceinline__ double plus1(double x) { return x + 1.0; }
__device__ __forceinline__ u16 plus1(u16 x) {
    u16 d;
    asm("add.rn.f16 %0, %1, %2;" : "=h"(d) : "h"(x), "h"(ONE_F16));
    return d;
}
__device__ __forceinline__ float ld_elem(const float *p) { return ld_f32(p); }
__device__ __forceinline__ u16 ld_elem(const u16 *p) { return ld_f16(p); }
__device__ __forceinline__ double ld_elem(const double *p) { return ld_f64(p); }

template <class E>
__device__ __forceinline__ void strided(E *dst, const E *src, u64 m, u32 stride, u32 loops) {
    const u64 t = first_index(), T = grid_threads(), k = (u64)stride;
    for (u32 l = 0; l < loops; ++l) {
        u64 i = t;
        for (; i + (STREAM_UNROLL - 1) * T < m; i += STREAM_UNROLL * T) {
            E v[STREAM_UNROLL];
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) v[u] = ld_elem(src + (i + u * T) * k);
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) dst[i + u * T] = plus1(v[u]);
        }
        for (; i < m; i += T) dst[i] = plus1(ld_elem(src + i * k));
    }
}

// -- the kernels ------------------------------------------------------------------------------

#define STREAM_KERNEL extern "C" __global__ void __launch_bounds__(STREAM_BLOCK, STREAM_MIN_BLOCKS)

// c = a (16-byte vectors; the element type does not enter)
STREAM_KERNEL stream_copy(uint4 *c, const uint4 *a, u64 vecs, u32 loops) {
    unary(c, a, vecs, loops, Identity());
}

// dst = pattern (16 bytes, lo then hi), `loops` times (the write test and every fill): stores
// only, nothing is read.
STREAM_KERNEL stream_write(uint4 *dst, u64 vecs, u64 lo, u64 hi, u32 loops) {
    const uint4 v = make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
    const Walk w = walk<STREAM_LAYOUT>();
    for (u32 l = 0; l < loops; ++l) {
        u64 i = w.start;
        for (; i + (STREAM_UNROLL - 1) * w.su < vecs; i += w.step) {
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) st16(dst + i + u * w.su, v);
        }
        for (; i < vecs; i += w.su) st16(dst + i, v);
    }
}

// The same operations over the flat space (see unary_flat), same parameters.
STREAM_KERNEL stream_copy_flat(uint4 *c, const uint4 *a, u64 vecs, u32 loops) {
    unary_flat(c, a, vecs, loops, Identity());
}
STREAM_KERNEL stream_write_flat(uint4 *dst, u64 vecs, u64 lo, u64 hi, u32 loops) {
    const uint4 v = make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
    const u64 bd = (u64)blockDim.x, pieces = (vecs + bd - 1) / bd, total = pieces * (u64)loops;
    for (u64 k = blockIdx.x; k < total; k += gridDim.x) {
        const u64 i = (k % pieces) * bd + (u64)threadIdx.x;
        if (i < vecs) st16_flat(dst + i, v);
    }
}

// atomicMin(first_bad, 4 * i) for every vector i < vecs that differs from the pattern
// (first_bad counts 32-bit words, as gpubw's verification slots do)
STREAM_KERNEL stream_check(const uint4 *buf, u64 vecs, u64 lo, u64 hi, u64 *first_bad) {
    const uint4 v = make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
    const u64 t = first_index(), T = grid_threads();
    for (u64 i = t; i < vecs; i += T) {
        const uint4 x = ld16_cg(buf + i);
        if (x.x != v.x || x.y != v.y || x.z != v.z || x.w != v.w) {
            atomicMin(first_bad, 4ULL * i);
            return;
        }
    }
}

// *first_bad = 0 unless the `count` partial sums add up to `expected` (one thread)
STREAM_KERNEL stream_check_sum(const double *partials, u64 count, u64 expected, u64 *first_bad) {
    if (first_index() != 0) return;
    double total = 0.0;
    for (u64 i = 0; i < count; ++i) total += partials[i];
    if (total != (double)expected) *first_bad = 0ULL;
}

#define STREAM_TYPED(T, E, sfx)                                                                 \
    STREAM_KERNEL stream_scale_##sfx(uint4 *b, const uint4 *c, u64 vecs, u32 loops) {          \
        unary(b, c, vecs, loops, Scale<T>());                                                  \
    }                                                                                          \
    STREAM_KERNEL stream_add_##sfx(uint4 *c, const uint4 *a, const uint4 *b, u64 vecs,         \
                                   u32 loops) {                                                \
        binary(c, a, b, vecs, loops, Add<T>());                                                \
    }                                                                                          \
    STREAM_KERNEL stream_triad_##sfx(uint4 *a, const uint4 *b, const uint4 *c, u64 vecs,       \
                                     u32 loops) {                                              \
        binary(a, b, c, vecs, loops, Triad<T>());                                              \
    }                                                                                          \
    STREAM_KERNEL stream_scale_##sfx##_flat(uint4 *b, const uint4 *c, u64 vecs, u32 loops) {     \
        unary_flat(b, c, vecs, loops, Scale<T>());                                             \
    }                                                                                          \
    STREAM_KERNEL stream_add_##sfx##_flat(uint4 *c, const uint4 *a, const uint4 *b, u64 vecs,    \
                                        u32 loops) {                                           \
        binary_flat(c, a, b, vecs, loops, Add<T>());                                           \
    }                                                                                          \
    STREAM_KERNEL stream_triad_##sfx##_flat(uint4 *a, const uint4 *b, const uint4 *c, u64 vecs,  \
                                          u32 loops) {                                         \
        binary_flat(a, b, c, vecs, loops, Triad<T>());                                         \
    }                                                                                          \
    STREAM_KERNEL stream_read_##sfx(const uint4 *a, u64 vecs, double *partials, u32 loops) {   \
        reduce<T>(a, vecs, partials, loops);                                                   \
    }                                                                                          \
    STREAM_KERNEL stream_read_##sfx##_flat(const uint4 *a, u64 vecs, double *partials,          \
                                           u32 loops) {                                        \
        reduce_flat<T>(a, vecs, partials, loops);                                              \
    }                                                                                          \
    STREAM_KERNEL stream_strided_##sfx(E *y, const E *x, u64 m, u32 stride, u32 loops) {       \
        strided<E>(y, x, m, stride, loops);                                                    \
    }

STREAM_TYPED(F32, float, f32)
STREAM_TYPED(F16, u16, f16)
STREAM_TYPED(F64, double, f64)
