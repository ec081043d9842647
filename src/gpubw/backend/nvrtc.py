"""The NVRTC compile of CUDA C kernel sources: which target a device gets, the options every
compile gets, the compile itself, and the binary of a source for a device, from the disk
cache or compiled now (:func:`load_or_compile`).

Cut from the kernel cache along the layers: the backend is the only code that talks to CUDA,
so the NVRTC calls are here, and :mod:`gpubw.kernels.cache` keeps only the disk cache (keyed
storage of compiled images) that this module reads and fills. The CUDA libraries are
imported on first use (``gpubw -l`` never loads them). Nothing here needs a GPU: NVRTC runs
on the CPU, which is how CI compiles every kernel.
"""

from __future__ import annotations

import os

import attrs

from gpubw.kernels import PATTERN_WORDS, source
from gpubw.kernels.cache import KernelCache, cache_key
from gpubw.model.errors import KernelCompileError

#: File name of gpubw's own kernel source (in :mod:`gpubw.kernels`), its program's name.
SOURCE_NAME = "gpubw.cu"


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library; KernelCompileError if it cannot be loaded."""
    try:
        from cuda.bindings import nvrtc

        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # library missing, or an incompatible binding
        raise KernelCompileError(
            f"NVRTC (the CUDA runtime compiler) could not be loaded: {exc}. "
            "Install it with: pip install 'cuda-toolkit[nvrtc]'"
        ) from exc
    if int(result) != 0:
        raise KernelCompileError(f"nvrtcVersion failed: {result!r}")
    return int(major), int(minor)


def nvrtc_supported_archs() -> tuple[int, ...]:
    """Architectures (as 10 x major + minor) this NVRTC can emit SASS for."""
    from cuda.bindings import nvrtc

    result, archs = nvrtc.nvrtcGetSupportedArchs()
    if int(result) != 0:
        raise KernelCompileError(f"nvrtcGetSupportedArchs failed: {result!r}")
    return tuple(int(a) for a in archs)


@attrs.frozen
class Target:
    """What to compile for: ``cubin`` for ``sm_XY``, or ``ptx`` for ``compute_XY`` (JIT by
    the driver, used only when NVRTC does not know the device's architecture)."""

    kind: str  # "cubin" or "ptx"
    arch: str  # "sm_90" or "compute_90"


def choose_target(compute_capability: tuple[int, int]) -> Target:
    """SASS for the device's exact architecture when NVRTC supports it; otherwise PTX for the
    newest architecture NVRTC knows that is not newer than the device."""
    major, minor = compute_capability
    cc = 10 * major + minor
    try:
        supported = nvrtc_supported_archs()
    except Exception:  # an old NVRTC without the query: try the exact architecture
        supported = (cc,)
    if cc in supported:
        return Target("cubin", f"sm_{major}{minor}")
    older = [a for a in supported if a <= cc]
    if not older:
        raise KernelCompileError(
            f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for compute capability "
            f"{major}.{minor} (it supports {', '.join(str(a) for a in supported)})"
        )
    best = max(older)
    return Target("ptx", f"compute_{best}")


def compile_options() -> tuple[tuple[str, str], ...]:
    """The macros every compile of gpubw.cu gets (part of the cache key).

    ``GPUBW_KERNEL_DEFINES="NAME=VALUE,..."`` adds macros (for tuning the copy kernel, e.g.
    ``GPUBW_COPY_UNROLL=4``; see benchmarks/tune_copy.py)."""
    extra = []
    for item in os.environ.get("GPUBW_KERNEL_DEFINES", "").split(","):
        if item.strip():
            name, _, value = item.strip().partition("=")
            extra.append((name, value or "1"))
    return (("GPUBW_PATTERN_WORDS", f"{PATTERN_WORDS}ULL"), *extra)


def nvrtc_options(target: Target) -> list[bytes]:
    """The NVRTC command line of every compile (the one ``cuda.core.ProgramOptions(arch=...,
    std="c++17", define_macro=compile_options())`` made before issue 36)."""
    macros = [f"--define-macro={name}={value}".encode() for name, value in compile_options()]
    return [f"-arch={target.arch}".encode(), *macros, b"--std=c++17"]


def compile_source(source_text: str, target: Target, name: str = SOURCE_NAME) -> bytes:
    """Compile with NVRTC through ``cuda.bindings.nvrtc`` (not ``cuda.core``, whose import
    alone costs ~0.3 s of a cold start: issue 36); KernelCompileError with the log on
    failure. ``name`` is the program's name in compiler messages."""
    try:
        from cuda.bindings import nvrtc
    except Exception as exc:
        raise KernelCompileError(f"cuda.bindings.nvrtc could not be imported: {exc}") from exc
    result, program = nvrtc.nvrtcCreateProgram(source_text.encode(), name.encode(), 0, [], [])
    _check(result, "nvrtcCreateProgram", name, target)
    try:
        options = nvrtc_options(target)
        (result,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if int(result) != 0:
            detail = f"{_result_name(result)}, compilation log:\n\n{_program_log(program)}"
            raise KernelCompileError(f"NVRTC could not compile {name} for {target.arch}:\n{detail}")
        return _program_code(program, target, name)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _program_code(program: object, target: Target, name: str) -> bytes:
    """The compiled image of ``program``: its cubin, or its PTX (NUL-terminated)."""
    from cuda.bindings import nvrtc

    if target.kind == "cubin":
        size_call, get_call = nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN
    else:
        size_call, get_call = nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX
    result, size = size_call(program)
    _check(result, size_call.__name__, name, target)
    image = b" " * int(size)
    (result,) = get_call(program, image)
    _check(result, get_call.__name__, name, target)
    return image


def _program_log(program: object) -> str:
    """NVRTC's log of compiling ``program`` (empty when it cannot be read)."""
    from cuda.bindings import nvrtc

    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    if int(result) != 0 or size <= 1:
        return ""
    log = b" " * int(size)
    (result,) = nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\0").decode("utf-8", "replace") if int(result) == 0 else ""


def _result_name(result: object) -> str:
    """``6: NVRTC_ERROR_COMPILATION`` for an nvrtcResult."""
    return f"{int(result)}: {getattr(result, 'name', result)}"  # type: ignore[call-overload]


def _check(result: object, call: str, name: str, target: Target) -> None:
    """KernelCompileError naming the unit and the call when an NVRTC call failed."""
    if int(result) != 0:  # type: ignore[call-overload]
        raise KernelCompileError(
            f"NVRTC could not compile {name} for {target.arch}:\n{call} failed: "
            f"{_result_name(result)}"
        )


def load_or_compile(
    compute_capability: tuple[int, int],
    driver_version: int | None,
    *,
    cache: KernelCache | None = None,
    source_text: str | None = None,
    name: str = SOURCE_NAME,
) -> tuple[bytes, Target]:
    """The binary of a kernel source (gpubw.cu unless ``source_text`` is given, e.g. a
    plugin's module, then ``name`` names it) for a device of ``compute_capability``: from the
    cache, or compiled now (and stored). Returns the image for cuModuleLoadData and what it
    is."""
    text = source_text if source_text is not None else source(SOURCE_NAME)
    target = choose_target(compute_capability)
    store = cache if cache is not None else KernelCache()
    key = cache_key(
        text,
        (target.kind, target.arch),
        driver_version,
        nvrtc_version(),
        (("name", name), *compile_options()),
    )
    image = store.get(key)
    if image is None:
        image = compile_source(text, target, name)
        store.put(key, image)
    if target.kind == "ptx" and not image.endswith(b"\0"):
        image += b"\0"  # cuModuleLoadData reads PTX as a NUL-terminated string
    return image, target
