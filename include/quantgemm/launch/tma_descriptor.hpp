/*! \file
    \brief Host-side encoding of 2-D TMA descriptors through the runtime's driver entry point, so
           that nothing links libcuda (the runtime finds it when the first call needs it).
*/
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

namespace quantgemm {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, cuuint64_t const*,
                                   cuuint64_t const*, cuuint32_t const*, cuuint32_t const*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn const fn = [] {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      return EncodeTiledFn(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(pfn);
  }();
  return fn;
}

/// Descriptor of a row-major [rows, cols] matrix (row stride `ld` elements) read or written in
/// boxes of box_rows x box_cols; out-of-bounds rows read as zero and are not written. The encoding
/// is a pure function of the arguments; each thread keeps its last few, since a decode loop passes
/// the same buffers call after call (the caching allocator hands them back) and the encoding is a
/// measurable part of a small call's host time.
inline cudaError_t make_tma_2d(CUtensorMap* map, CUtensorMapDataType type, int element_bytes, void const* ptr,
                               int64_t rows, int64_t cols, int64_t ld, int box_rows, int box_cols,
                               CUtensorMapSwizzle swizzle) {
  struct Key {
    void const* ptr;
    int64_t rows, cols, ld;
    int type, element_bytes, box_rows, box_cols, swizzle;
    bool operator==(Key const& o) const {
      return ptr == o.ptr && rows == o.rows && cols == o.cols && ld == o.ld && type == o.type &&
             element_bytes == o.element_bytes && box_rows == o.box_rows && box_cols == o.box_cols &&
             swizzle == o.swizzle;
    }
  };
  struct Entry {
    Key key;
    CUtensorMap map;
  };
  constexpr int kEntries = 8;
  thread_local Entry cache[kEntries] = {};
  thread_local int next = 0;
  Key const key{ptr, rows, cols, ld, int(type), element_bytes, box_rows, box_cols, int(swizzle)};
  for (Entry const& e : cache) {
    if (e.key == key && ptr != nullptr) {
      *map = e.map;
      return cudaSuccess;
    }
  }
  EncodeTiledFn const encode = encode_tiled_fn();
  if (encode == nullptr) {
    return cudaErrorInitializationError;
  }
  cuuint64_t const dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  cuuint64_t const strides[1] = {cuuint64_t(ld) * element_bytes};
  cuuint32_t const box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  cuuint32_t const element_strides[2] = {1, 1};
  CUresult const r = encode(map, type, 2, const_cast<void*>(ptr), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return cudaErrorInvalidValue;
  }
  cache[next] = {key, *map};
  next = (next + 1) % kEntries;
  return cudaSuccess;
}

}  // namespace quantgemm
