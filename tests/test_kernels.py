"""gpubw's CUDA kernels compile with NVRTC (CPU only, no GPU needed) and the cubin cache works."""

from __future__ import annotations

import io
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpubw.backend import nvrtc as compiler
from gpubw.kernels import KERNELS, PATTERN_WORDS, PROTOCOL_KERNELS, source
from gpubw.kernels import cache as kcache
from gpubw.kernels.modules import GPUBW, PROTOCOL
from gpubw.model.errors import KernelCompileError

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")

ARCHS = ("sm_80", "sm_90")
COPY_KERNELS = ("gpubw_copy", "gpubw_copy_flat", "gpubw_copy_split_warp")
#: C parameter types in gpubw.cu that each catalogue type may be written as
C_TYPES = {
    "ptr": re.compile(r"\*"),
    "u64": re.compile(r"^\s*(const\s+)?(u64|unsigned long long|uint64_t|size_t)\s+\w+\s*$"),
    "u32": re.compile(r"^\s*(const\s+)?(u32|unsigned int|unsigned|uint32_t)\s+\w+\s*$"),
    "i32": re.compile(r"^\s*(const\s+)?(int|int32_t)\s+\w+\s*$"),
}


def _nvrtc_works() -> bool:
    try:
        compiler.nvrtc_version()
    except KernelCompileError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _nvrtc_works(), reason="NVRTC is not installed")


def elf_function_symbols(image: bytes) -> set[str]:
    """Names of the STT_FUNC symbols in an ELF64 little-endian image (a cubin)."""
    assert image[:4] == b"\x7fELF" and image[4] == 2 and image[5] == 1
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)
    ]
    names: set[str] = set()
    for _name, sh_type, _f, _a, offset, size, link, _i, _al, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        str_offset = sections[link][4]
        for k in range(size // entsize):
            st_name, st_info = struct.unpack_from("<IB", image, offset + k * entsize)
            if st_info & 0xF == 2:  # STT_FUNC
                end = image.index(b"\0", str_offset + st_name)
                names.add(image[str_offset + st_name : end].decode())
    return names


def kernel_signatures(text: str) -> dict[str, list[str]]:
    """extern "C" __global__ kernels of a CUDA source: name -> parameter declarations."""
    pattern = re.compile(
        r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)',
        re.S,
    )
    return {
        m.group(1): [p.strip() for p in m.group(2).split(",") if p.strip()]
        for m in pattern.finditer(text)
    }


#: gpubw's two compile units: (program name, module)
UNITS = (("gpubw_protocol.cu", PROTOCOL), ("gpubw.cu", GPUBW))


@pytest.fixture(scope="module")
def cubins() -> dict[tuple[str, str], bytes]:
    return {
        (arch, program): compiler.compile_source(
            module.source, compiler.Target("cubin", arch), program
        )
        for arch in ARCHS
        for program, module in UNITS
    }


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("program", "module"), UNITS)
def test_every_kernel_compiles_and_is_exported(
    cubins: dict[tuple[str, str], bytes], arch: str, program: str, module: Any
) -> None:
    """Each unit compiles to a cubin for sm_80 and sm_90 that exports the kernels of its module."""
    symbols = elf_function_symbols(cubins[arch, program])
    missing = sorted(set(module.names) - symbols)
    assert not missing, f"{arch} cubin of {program} lacks {missing}"


def test_units_split_the_catalogue() -> None:
    """The protocol unit holds PROTOCOL_KERNELS, gpubw.cu every other catalogued kernel: no
    kernel is in both, none is left out, and each module's source is its unit's file."""
    assert PROTOCOL.names == PROTOCOL_KERNELS
    assert set(PROTOCOL.names) | set(GPUBW.names) == set(KERNELS)
    assert not set(PROTOCOL.names) & set(GPUBW.names)
    for program, module in UNITS:
        assert module.source == source(program)
        assert set(kernel_signatures(module.source)) == set(module.names), program


def test_source_signatures_match_catalogue() -> None:
    """The two units define exactly the catalogued kernels, with the catalogued parameter
    types."""
    sigs = {
        name: p for program, _ in UNITS for name, p in kernel_signatures(source(program)).items()
    }
    assert set(sigs) == set(KERNELS)
    for name, spec in KERNELS.items():
        params = sigs[name]
        assert len(params) == len(spec.params), name
        for decl, ctype in zip(params, spec.params):
            if ctype == "ptr":
                assert "*" in decl, f"{name}: {decl!r} is not a pointer"
            else:
                assert "*" not in decl and C_TYPES[ctype].match(decl), f"{name}: {decl!r}"


@pytest.mark.parametrize("arch", ARCHS)
def test_copy_kernels_do_not_spill(arch: str) -> None:
    """The copy kernels fit their register budget (launch bounds) without spilling."""
    from cuda.core import Program, ProgramOptions

    logs = io.StringIO()
    options = ProgramOptions(
        arch=arch,
        std="c++17",
        ptxas_options=["-v"],
        define_macro=list(compiler.compile_options()),
    )
    Program(source(), "c++", options).compile("cubin", logs=logs)
    text = logs.getvalue()
    for name in COPY_KERNELS:
        block = text.split(f"Compiling entry function '{name}'", 1)[1].split("Compile time", 1)[0]
        spills = re.search(r"(\d+) bytes spill stores", block)
        assert spills is not None and int(spills.group(1)) == 0, f"{name} spills on {arch}"


def test_flat_copy_moves_one_element_per_thread() -> None:
    """gpubw_copy_flat's default piece is one element per thread, which the launch plan
    (initiators.flat_copy_launches: pieces of FLAT_COPY_BLOCK elements) assumes, and its
    launch bounds admit FLAT_COPY_BLOCK threads."""
    from gpubw.measure.initiators import FLAT_COPY_BLOCK

    text = source()
    assert re.search(r"#define GPUBW_FLAT_UNROLL 1\n", text)
    assert "__launch_bounds__(GPUBW_COPY_BLOCK)\n    gpubw_copy_flat(" in text
    block = re.search(r"#define GPUBW_COPY_BLOCK (\d+)", text)
    assert block is not None and int(block.group(1)) >= FLAT_COPY_BLOCK


def test_pattern_length_is_passed_to_the_compiler() -> None:
    """The pattern length the kernels use comes from gpubw.kernels.PATTERN_WORDS."""
    assert dict(compiler.compile_options())["GPUBW_PATTERN_WORDS"] == f"{PATTERN_WORDS}ULL"


def test_compile_error_carries_the_log() -> None:
    """A source NVRTC rejects raises KernelCompileError with the compiler's message."""
    bad = 'extern "C" __global__ void broken(int *p) { p[0] = undefined_name; }'
    with pytest.raises(KernelCompileError, match="undefined_name") as caught:
        compiler.compile_source(bad, compiler.Target("cubin", "sm_90"), "broken.cu")
    assert str(caught.value).startswith("NVRTC could not compile broken.cu for sm_90:\n")
    assert "NVRTC_ERROR_COMPILATION" in str(caught.value)


def test_the_compile_path_does_not_import_cuda_core(tmp_path: Path) -> None:
    """A cold compile of the protocol unit goes through cuda.bindings.nvrtc alone: importing
    cuda.core costs ~0.3 s of a cold start (issue 36)."""
    code = f"""if True:
        import sys
        from pathlib import Path
        from gpubw.backend.cuda_support import registered_program
        from gpubw.backend.nvrtc import load_or_compile
        from gpubw.kernels.cache import KernelCache
        from gpubw.kernels.modules import own_module
        unit = own_module("gpubw_protocol")
        image, _ = load_or_compile((9, 0), None, cache=KernelCache(Path({str(tmp_path)!r})),
                                   source_text=unit.source, name=registered_program(unit))
        assert image[:4] == b"\\x7fELF", image[:4]
        print(sorted(m for m in sys.modules if m.startswith("cuda.core")))
    """
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, encoding="utf-8", timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
    assert list(tmp_path.glob("*.bin")), "the protocol unit was not compiled into the cache"


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GPUBW_CACHE_DIR wins, then XDG_CACHE_HOME/gpubw/kernels, then ~/.cache/gpubw/kernels."""
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kcache.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("GPUBW_CACHE_DIR")
    assert kcache.cache_dir() == tmp_path / "xdg" / "gpubw" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kcache.cache_dir() == tmp_path / "home" / ".cache" / "gpubw" / "kernels"


@pytest.fixture
def counted_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Route the cache to a temporary directory and count real NVRTC compiles."""
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    real = compiler.compile_source

    def counting(text: str, target: compiler.Target, name: str = compiler.SOURCE_NAME) -> bytes:
        calls.append(target.arch)
        return real(text, target, name)

    monkeypatch.setattr(compiler, "compile_source", counting)
    return calls


def test_cache_stores_and_reuses(counted_compiles: list[str], tmp_path: Path) -> None:
    """The first load compiles and stores; a second load (a second run) compiles nothing."""
    first, target = compiler.load_or_compile((9, 0), 13000)
    assert target == compiler.Target("cubin", "sm_90")
    assert counted_compiles == ["sm_90"]
    assert len(list((tmp_path / "cache").glob("*.bin"))) == 1
    second, _ = compiler.load_or_compile((9, 0), 13000)
    assert second == first
    assert counted_compiles == ["sm_90"]


def test_cache_key_covers_arch_and_driver(counted_compiles: list[str]) -> None:
    """Another architecture or driver version is another entry (compiled again)."""
    compiler.load_or_compile((9, 0), 13000)
    compiler.load_or_compile((8, 0), 13000)
    compiler.load_or_compile((9, 0), 12080)
    assert counted_compiles == ["sm_90", "sm_80", "sm_90"]


def test_corrupt_entry_is_recompiled(counted_compiles: list[str], tmp_path: Path) -> None:
    """A damaged cache entry is ignored and replaced by a fresh compile."""
    good, _ = compiler.load_or_compile((9, 0), 13000)
    (entry,) = (tmp_path / "cache").glob("*.bin")
    blob = bytearray(entry.read_bytes())
    blob[-100] ^= 0xFF
    entry.write_bytes(bytes(blob))
    again, _ = compiler.load_or_compile((9, 0), 13000)
    assert again == good
    assert len(counted_compiles) == 2
    entry.write_bytes(b"")  # truncated
    assert compiler.load_or_compile((9, 0), 13000)[0] == good
    assert len(counted_compiles) == 3


def test_unwritable_cache_is_not_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache directory that cannot be created still yields the compiled kernels."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GPUBW_CACHE_DIR", str(blocker / "kernels"))
    compiles: list[Any] = []
    compile_source = compiler.compile_source
    monkeypatch.setattr(
        compiler, "compile_source", lambda *a: compiles.append(a) or compile_source(*a)
    )
    image, _ = compiler.load_or_compile((8, 0), 13000)
    assert image[:4] == b"\x7fELF"
    assert list(tmp_path.iterdir()) == [blocker]
    # a second load in this process (the backend after the command's kernel helper) finds
    # the binary the first could not store: compiled once
    assert compiler.load_or_compile((8, 0), 13000)[0] == image and len(compiles) == 1


def test_unknown_architecture_falls_back_to_ptx(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device newer than NVRTC knows gets PTX for the newest architecture NVRTC supports."""
    monkeypatch.setattr(compiler, "nvrtc_supported_archs", lambda: (80, 90, 100))
    assert compiler.choose_target((9, 0)) == compiler.Target("cubin", "sm_90")
    assert compiler.choose_target((12, 1)) == compiler.Target("ptx", "compute_100")
    with pytest.raises(KernelCompileError):
        compiler.choose_target((7, 0))
