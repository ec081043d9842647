"""The first NVRTC compile of a process against a second one (issue 36): no GPU needed.

    python benchmarks/cold_compile.py [--nvrtc-module PATH] [--arch 9.0]

In this (fresh) process it imports gpubw's compile path, compiles the protocol unit
(``gpubw_protocol.cu``) into an empty kernel cache, then again into a second empty cache, and
prints one line: the import time, the cold compile, the second ("warm") compile, cold - warm,
the image's size and whether ``cuda.core`` got imported. ``--nvrtc-module`` loads another
``gpubw/backend/nvrtc.py`` (e.g. ``git show HEAD~1:src/gpubw/backend/nvrtc.py > old.py``) in
its place, to compare two versions in interleaved runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path


def _load_module(path: str) -> None:
    """Put the file at ``path`` in sys.modules as gpubw.backend.nvrtc."""
    spec = importlib.util.spec_from_file_location("gpubw.backend.nvrtc", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


def _compile_once(cc: tuple[int, int]) -> int:
    """Compile the protocol unit into an empty cache; the image's size."""
    from gpubw.backend.cuda_support import registered_program
    from gpubw.backend.nvrtc import load_or_compile
    from gpubw.kernels.cache import KernelCache
    from gpubw.kernels.modules import own_module

    unit = own_module("gpubw_protocol")
    with tempfile.TemporaryDirectory() as directory:
        image, _ = load_or_compile(
            cc,
            None,
            cache=KernelCache(Path(directory)),
            source_text=unit.source,
            name=registered_program(unit),
        )
    return len(image)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvrtc-module", help="another gpubw/backend/nvrtc.py to time")
    parser.add_argument("--arch", default="9.0", help="compute capability (default 9.0)")
    args = parser.parse_args()
    major, minor = (int(x) for x in args.arch.split("."))
    t0 = time.perf_counter()
    if args.nvrtc_module:
        _load_module(args.nvrtc_module)
    import gpubw.backend.cuda_support  # noqa: F401  (the compile path's imports)
    import gpubw.backend.nvrtc  # noqa: F401

    t1 = time.perf_counter()
    size = _compile_once((major, minor))
    t2 = time.perf_counter()
    _compile_once((major, minor))
    t3 = time.perf_counter()
    print(
        f"{args.nvrtc_module or 'this tree'}: import={t1 - t0:.3f} cold={t2 - t1:.3f} "
        f"warm={t3 - t2:.3f} cold-warm={(t2 - t1) - (t3 - t2):.3f} bytes={size} "
        f"cuda.core={'cuda.core' in sys.modules}"
    )


if __name__ == "__main__":
    main()
