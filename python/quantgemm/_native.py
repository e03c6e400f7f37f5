"""Access to the compiled extension quantgemm._C, with a clear error when it is missing."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def native():
    try:
        from . import _C
    except ImportError as e:  # pragma: no cover - a broken install
        raise ImportError(
            "quantgemm's compiled extension quantgemm._C is missing or failed to load; "
            "reinstall with `pip install .` from the source tree") from e
    return _C


@functools.lru_cache(maxsize=None)
def cuda_architectures() -> tuple[str, ...]:
    """The CUDA architectures the extension was compiled for (CMAKE_CUDA_ARCHITECTURES)."""
    return tuple(native().cuda_architectures.split(","))


@functools.lru_cache(maxsize=None)
def compiled_schedules(family: str) -> tuple[str, ...]:
    """The schedules of `family` (a name the caller has validated) compiled into this build: none
    when a subset build (QUANTGEMM_SCHEDULES) left the whole family out."""
    try:
        return tuple(native().schedules(family))
    except ValueError:
        return ()
