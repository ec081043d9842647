"""gpubw's CUDA kernels: the catalogue both backends implement.

The CUDA C sources live beside this file (``*.cu``, each preceded by ``common.cuh``:
:func:`source`); the real backend compiles them with NVRTC for each device's exact architecture
and caches the cubin on disk. The simulated backend implements the same names in Python. They
are two compile units, two kernel modules cut from the one catalogue :data:`KERNELS`:
:data:`PROTOCOL_KERNELS` (``gpubw_protocol.cu``: the spin gate, fill and verify that every
measurement needs, :data:`gpubw.kernels.modules.PROTOCOL`, small and compiled first) and the
rest (``gpubw.cu``: the copy, one-way, chase and TMA kernels,
:data:`gpubw.kernels.modules.GPUBW`, which testcases that launch kernels declare). A kernel is
launched by name with :class:`gpubw.backend.base.KernelArg` arguments in the order given here.

All sizes are 64-bit; "elements" are 16-byte vectors (``uint4``); "words" are 32-bit.
"""

from __future__ import annotations

from importlib import resources

import attrs

#: Words in the verification pattern (2 MiB of 32-bit words), as nvbandwidth.
PATTERN_WORDS = 524_288
#: Bytes per SM-copy element.
ELEMENT_BYTES = 16


@attrs.frozen
class KernelSpec:
    name: str
    params: tuple[str, ...]  # C types: "ptr", "u64", "u32", "i32"
    doc: str


KERNELS: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        KernelSpec(
            "gpubw_gate_wait",
            ("ptr", "u64", "ptr"),
            "(flag, timeout_ns, status): one thread polls the volatile host int *flag until it is "
            "non-zero; if timeout_ns pass first (globaltimer), writes 1 to the host int *status "
            "and returns, so a stuck gate is reported, not silently ignored.",
        ),
        KernelSpec(
            "gpubw_copy",
            ("ptr", "ptr", "u64", "u32"),
            "(dst, src, elements, loops): copies `elements` 16-byte elements src->dst, `loops` "
            "times, grid-stride with several independent 16-byte loads in flight per thread "
            "(L2-only cache hints, so repeated loops are never served from L1). Any grid is "
            "correct; blocks of at most 512 threads (see initiators.copy_launch_shape).",
        ),
        KernelSpec(
            "gpubw_copy_flat",
            ("ptr", "ptr", "u64", "u32"),
            "(dst, src, elements, loops): the same copy as gpubw_copy, over the pass-major "
            "(pass, piece of blockDim 16-byte elements) space: launched with loops x pieces "
            "blocks, each block copies one piece of one pass and exits (device-local copies "
            "beyond L2: initiators.flat_copy_launches). Any grid is correct; a grid of exactly "
            "`pieces` blocks would re-copy each piece from L2, so use loops x pieces or a "
            "resident grid; blocks of at most 512 threads.",
        ),
        KernelSpec(
            "gpubw_copy_split_warp",
            ("ptr", "ptr", "u64", "u32"),
            "(dst, src, elements, loops): element e belongs to group e / 32; elements of odd "
            "groups move src->dst and those of even groups dst->src (so half the bytes go each "
            "way); each thread copies each of its elements `loops` times in a row (launched "
            "with one thread per element, nvbandwidth's order).",
        ),
        KernelSpec(
            "gpubw_fill",
            ("ptr", "ptr", "u64"),
            "(dst, pattern, words): dst[k] = pattern[k % PATTERN_WORDS] for k < words.",
        ),
        KernelSpec(
            "gpubw_verify",
            ("ptr", "ptr", "u64", "ptr"),
            "(buf, pattern, words, first_bad): atomicMin(first_bad, k) for every k < words "
            "where buf[k] != pattern[k % PATTERN_WORDS]; *first_bad (a u64) starts at ~0.",
        ),
        KernelSpec(
            "gpubw_clear_warp_parity",
            ("ptr", "u64", "u32"),
            "(buf, elements, parity): zero the 16-byte elements whose 32-element group index "
            "has the given parity (0 = even groups, 1 = odd groups).",
        ),
        KernelSpec(
            "gpubw_pointer_chase",
            ("ptr", "u64", "u32", "ptr"),
            "(start, steps, target, sink): launched with grid = SM count, block 1; only block "
            "`target` follows p = *(void**)p `steps` times from `start` and stores the final "
            "pointer to *sink (so the loop cannot be removed).",
        ),
        KernelSpec(
            "gpubw_read",
            ("ptr", "u64", "u32", "ptr"),
            "(src, elements, loops, sink): reads `elements` 16-byte elements, `loops` times, "
            "resident grid-stride like gpubw_copy (L2-only loads that stay loads); each thread "
            "folds what it read and stores the fold to the u32 *sink only if it equals a fixed "
            "sentinel, so nothing is written in practice.",
        ),
        KernelSpec(
            "gpubw_write",
            ("ptr", "u64", "u32", "u32"),
            "(dst, elements, value, loops): every 32-bit word of `elements` 16-byte elements = "
            "value, `loops` times, resident grid-stride; stores only.",
        ),
        KernelSpec(
            "gpubw_read_flat",
            ("ptr", "u64", "u32", "ptr"),
            "(src, elements, loops, sink): gpubw_read over gpubw_copy_flat's pass-major "
            "(pass, piece) space, one element per thread, launched with loops x pieces blocks "
            "(a device's own memory beyond L2). Any grid is correct.",
        ),
        KernelSpec(
            "gpubw_write_flat",
            ("ptr", "u64", "u32", "u32"),
            "(dst, elements, value, loops): gpubw_write over gpubw_copy_flat's pass-major "
            "(pass, piece) space, one element per thread, launched with loops x pieces blocks "
            "(a device's own memory beyond L2). Any grid is correct.",
        ),
        KernelSpec(
            "gpubw_verify_value",
            ("ptr", "u64", "u32", "ptr"),
            "(buf, words, value, first_bad): atomicMin(first_bad, k) for every k < words where "
            "buf[k] != value (the check of gpubw_write).",
        ),
        KernelSpec(
            "gpubw_copy_tma",
            ("ptr", "ptr", "u64", "u32"),
            "(dst, src, elements, loops): the copy of gpubw_copy through shared memory with "
            "TMA bulk copies (cp.async.bulk global->shared with an mbarrier, shared->global as "
            "bulk groups), one issuing thread per 32-thread block, several chunks in flight per "
            "block (initiators.tma_launch_shape); sm_90+, traps on older devices. Any grid.",
        ),
        KernelSpec(
            "gpubw_pointer_chase_tma",
            ("ptr", "u64", "u32", "ptr"),
            "(start, steps, target, sink): gpubw_pointer_chase with each dereference a 16-byte "
            "TMA bulk copy into shared memory (waited for on an mbarrier); nodes must be "
            "16-byte aligned. sm_90+, traps on older devices.",
        ),
        KernelSpec(
            "gpubw_gate_relay",
            ("ptr", "ptr", "u64", "ptr"),
            "(host_flag, device_flag, timeout_ns, status): the cross-rank gate's relay, on the "
            "first rank's first stream: polls the host int *host_flag like gpubw_gate_wait, "
            "then (also after a timeout, which writes 1 to *status) fences system-wide and "
            "stores 1 to the device int *device_flag that every other rank's gate kernels poll.",
        ),
    )
}


#: The kernels of the small compile unit ``gpubw_protocol.cu``: what every measurement launches
#: (the spin gates, the pattern fill and verify, the split-warp clear of a buffer); every other
#: kernel of :data:`KERNELS` is in ``gpubw.cu``.
PROTOCOL_KERNELS: tuple[str, ...] = (
    "gpubw_gate_wait",
    "gpubw_gate_relay",
    "gpubw_fill",
    "gpubw_verify",
    "gpubw_clear_warp_parity",
)
#: The prelude every ``*.cu`` unit is compiled with (types, pattern length, indices).
PRELUDE = "common.cuh"


def source(name: str = "gpubw.cu") -> str:
    """The CUDA C source text of a kernel unit shipped in this package, as it is compiled: a
    ``*.cu`` unit comes after :data:`PRELUDE` (compiler messages still give the unit's own
    line numbers); any other file is returned as it is."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    if not name.endswith(".cu"):
        return text
    return f'{source(PRELUDE)}#line 1 "{name}"\n{text}'
