"""quantgemm: quantized GEMMs for Hopper GPUs."""

from . import ops  # registers the torch.library operators
from .block_scaled import block_scaled_mm
from ._native import cuda_architectures
from .mixed_input import Explanation, PrepackedWeight, explain, mm, prepack_b, select_schedule, supported_schedules, unpack_b
from .nn import quantize_model
from .quantize import (quantize_fp8, quantize_fp8_blocks, quantize_fp8_groups, quantize_int8, quantize_u4,
                       quantize_u4b8, quantize_u8, quantize_u8b128)
from .scaled import azp_adjust, scaled_mm, scaled_mm_azp

__version__ = "0.1.0"

__all__ = [
    "Explanation",
    "PrepackedWeight",
    "azp_adjust",
    "block_scaled_mm",
    "cuda_architectures",
    "explain",
    "mm",
    "prepack_b",
    "quantize_fp8",
    "quantize_fp8_blocks",
    "quantize_fp8_groups",
    "quantize_int8",
    "quantize_model",
    "quantize_u4",
    "quantize_u4b8",
    "quantize_u8",
    "quantize_u8b128",
    "scaled_mm",
    "scaled_mm_azp",
    "select_schedule",
    "supported_schedules",
    "unpack_b",
]
