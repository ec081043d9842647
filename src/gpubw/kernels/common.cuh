// The prelude of every gpubw kernel unit (gpubw_protocol.cu, gpubw.cu): gpubw.kernels.source()
// puts it before each unit's own text, so that both compile units share one definition of the
// types, the pattern length and the grid-stride indices.
//
// The host passes GPUBW_PATTERN_WORDS (gpubw.kernels.PATTERN_WORDS) as a macro so that the
// pattern length has one source of truth.

#ifndef GPUBW_PATTERN_WORDS
#define GPUBW_PATTERN_WORDS 524288ULL
#endif

typedef unsigned long long u64;
typedef unsigned int u32;

static_assert((GPUBW_PATTERN_WORDS & (GPUBW_PATTERN_WORDS - 1)) == 0,
              "the pattern length must be a power of two");
static_assert(sizeof(void *) == 8, "gpubw needs 64-bit device pointers");

#define GPUBW_PATTERN_MASK ((u64)(GPUBW_PATTERN_WORDS) - 1ULL)

__device__ __forceinline__ u64 first_index() {
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * (u64)blockDim.x; }
