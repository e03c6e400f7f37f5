"""Argument checks shared by the ops: each failure names the argument and what was expected."""

from __future__ import annotations

import torch

from ._native import cuda_architectures


def tensor(name: str, x, *, dtype: torch.dtype | None = None, ndim: int | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    return x


def shape(name: str, x: torch.Tensor, expected: tuple[int, ...]) -> None:
    if x.shape != expected:
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(x.shape)}")


def weight_operand(a: torch.Tensor, b) -> tuple[int, int, int]:
    """b, the [N, K] weight of an 8-bit GEMM, in a's dtype and with a's K (a checked already):
    returns (M, N, K)."""
    tensor("b", b, dtype=a.dtype, ndim=2)
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"b must be the [N, K] weight with K={k} columns to match a, got shape {tuple(b.shape)}")
    if n == 0 or k == 0:
        raise ValueError(f"b must have N > 0 and K > 0, got shape {tuple(b.shape)}")
    return m, n, k


def dense(name: str, x, dtype: torch.dtype, expected: tuple[int, ...]) -> None:
    """A contiguous tensor of `dtype` and shape `expected` (the checks of the per-call operands that
    the kernels read whole, in one pass: they run on every call)."""
    tensor(name, x, dtype=dtype)
    if x.shape != expected:
        if x.dim() != len(expected):
            raise ValueError(f"{name} must be {len(expected)}-D, got shape {tuple(x.shape)}")
        shape(name, x, expected)
    contiguous(name, x)


def row_major(name: str, x: torch.Tensor) -> None:
    """Unit stride along the last dimension, a row stride of whole 16-byte units, a 16-byte aligned base."""
    rows, cols = x.shape
    row_stride, col_stride = x.stride()
    elem = x.element_size()
    if ((col_stride == 1 or cols <= 1) and (rows <= 1 or (row_stride >= cols and row_stride * elem % 16 == 0))
            and x.data_ptr() % 16 == 0):
        return
    if x.stride(1) != 1 and cols > 1:
        raise ValueError(f"{name} must have unit stride along its last dimension, got strides {x.stride()}")
    if rows > 1 and (x.stride(0) < cols or (x.stride(0) * elem) % 16 != 0):
        raise ValueError(f"{name} must have a row stride >= {cols} that is a multiple of {16 // elem} elements "
                         f"(16 bytes), got strides {x.stride()}")
    aligned16(name, x)


def aligned16(name: str, x: torch.Tensor) -> None:
    if x.data_ptr() % 16 != 0:
        raise ValueError(f"{name} must start on a 16-byte boundary, got data_ptr {x.data_ptr():#x}")


def contiguous(name: str, x: torch.Tensor) -> None:
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {x.stride()} for shape {tuple(x.shape)}")


def cuda_index(name: str, x: torch.Tensor) -> int:
    """The index of the CUDA device that x is on."""
    index = x.get_device()
    if index < 0 or not x.is_cuda:
        raise ValueError(f"{name} must be a CUDA tensor, got device {x.device}")
    return index


def same_device(name: str, x: torch.Tensor, index: int) -> None:
    if x.get_device() != index or not x.is_cuda:
        raise ValueError(f"{name} must be on cuda:{index} (where the other operands are), got {x.device}")


_HOPPERS: set[int] = set()  # device indices that passed hopper()


def hopper(name: str, index: int) -> None:
    """The device is an sm_90 GPU and the extension carries sm_90a code."""
    if index in _HOPPERS:
        return
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) != (9, 0):
        raise RuntimeError(f"{name}: quantgemm's kernels need an sm_90 (Hopper) GPU; "
                           f"cuda:{index} is sm_{major}{minor}")
    built = cuda_architectures()
    if "90a" not in built:
        raise RuntimeError(f"{name}: this quantgemm build has no sm_90a code (built for {list(built)}); "
                           f"reinstall with CMAKE_CUDA_ARCHITECTURES including 90a")
    _HOPPERS.add(index)


_SM80S: set[int] = set()  # device indices that passed architecture(..., "sm80")


def architecture(name: str, index: int, layout: str) -> None:
    """The device runs the kernels of a weight prepacked in `layout`: "sm90" needs an sm_90 GPU and
    sm_90a code (hopper()); "sm80" an sm_80 or later GPU and code this build holds for it."""
    if layout != "sm80":
        hopper(name, index)
        return
    if index in _SM80S:
        return
    major, minor = torch.cuda.get_device_capability(index)
    if major < 8:
        raise RuntimeError(f"{name}: the sm80 kernels need an sm_80 or later GPU; cuda:{index} is sm_{major}{minor}")
    built = cuda_architectures()
    runs = [a for a in built if int(a.rstrip("a")) // 10 == major and int(a.rstrip("a")) % 10 <= minor
            and (not a.endswith("a") or int(a[:-1]) == 10 * major + minor)]
    if not runs:
        raise RuntimeError(f"{name}: this quantgemm build has no code for sm_{major}{minor} (built for {list(built)}); "
                           f"reinstall with CMAKE_CUDA_ARCHITECTURES including {major}{minor}")
    _SM80S.add(index)
