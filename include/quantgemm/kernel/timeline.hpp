/*! \file
    \brief The diagnostic timeline's region (a build with -DQUANTGEMM_TIMELINE): the last
           kTimelineRegionBytes of the stream-K workspace hold a record count per CTA (uint32,
           kTimelineCtas of them), then per CTA a ring of kTimelineRecords records of
           kTimelineRecordWords uint64 (kernel/sm90_gemm_mixed_input_stream_k.hpp writes them,
           quantgemm.bench.timeline reads them through quantgemm._C.TIMELINE_LAYOUT).
*/
#pragma once

#include <cstddef>

namespace quantgemm {

inline constexpr int kTimelineCtas = 1024;
inline constexpr int kTimelineRecords = 64;
inline constexpr int kTimelineRecordWords = 8;
inline constexpr size_t kTimelineRegionBytes =
    kTimelineCtas * 4 + size_t(kTimelineCtas) * kTimelineRecords * kTimelineRecordWords * 8;

}  // namespace quantgemm
