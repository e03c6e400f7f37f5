/*! \file
    \brief Work decomposition of a persistent GEMM over `grid` CTAs: data-parallel whole tiles, then
           stream-K over the rest.

    T output tiles of I k-iterations each. The first dp_tiles tiles (a whole number of waves, or all
    of them where make's `dp_slack` says so) go round-robin to the CTAs, each computed whole by one
    CTA. The remaining sk_tiles * I iterations are cut into sk_ctas contiguous, equal ranges, one per
    CTA; a range may start and end inside a tile, so a tile can be split over several CTAs. A split
    tile's first piece (k from 0) ends its CTA's range; each later piece writes its fp32 partial
    into its CTA's workspace slot (slot 0 for the range's first tile, 1 for its last) and counts
    itself in; the first piece's CTA waits for them and adds them in CTA order (deterministic).
    Every CTA does the same number of iterations, within one.

    Split-K over clusters (make_split): no stream-K; every tile's iterations are cut into `split`
    equal ranges, one per CTA of a cluster of `split` consecutive CTAs (rank r takes the r-th), which
    add up their partials in the cluster's shared memory (the kernel's ClusterK). No scratch.

    Ranges of unequal length (make's `chain` > 0): every CTA's range ends at the same time but for
    the fixup's chain (a later piece stored, published and acquired), so a tile whose later piece
    ends a range waits for it. A range that holds no tile's first piece (a "helper", inside one tile)
    is cut `chain` iterations shorter and the others share what it gives up, so that every later
    piece is published about when the first pieces' mainloops end. When the tiles are fewer than
    the CTAs, some ranges must be helpers (each first piece ends a range of its own).

    Progress: a CTA waits only for higher-numbered CTAs, and only after publishing its own later
    piece, which comes first in its range. CTAs launch in index order, so of the CTAs resident at
    any time all but the highest finish; the wait can stall only while a single SM is free to the
    kernel (the grid is at most the SM count).
*/
#pragma once

#include <cstdint>

// plain C++ for the host (quantgemm._C reads it without CUTLASS), device functions under nvcc
#if defined(__CUDACC__)
#define QUANTGEMM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define QUANTGEMM_HOST_DEVICE inline
#endif

namespace quantgemm {

QUANTGEMM_HOST_DEVICE uint32_t popcount32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__popc(x));
#else
  uint32_t n = 0;
  for (; x != 0; x &= x - 1) {
    ++n;
  }
  return n;
#endif
}

struct StreamKDecomposition {
  int tiles_n = 0;   ///< tiles along the weight's N
  int tiles_m = 0;   ///< tiles along the activation's M
  int iters = 0;     ///< k-iterations per tile
  int dp_tiles = 0;  ///< tiles computed whole, round-robin
  int sk_tiles = 0;  ///< tiles after those, shared out by stream-K
  int sk_ctas = 0;   ///< CTAs taking part in stream-K (the first sk_ctas)
  int grid = 0;      ///< CTAs launched
  int chain = 0;     ///< iterations a helper range gives up (0: ranges of equal length)
  uint32_t sk_span = 0;  ///< sk_units() plus `chain` per helper: what the ranges are cut from
  static constexpr int kMaskWords = 8;
  uint32_t helpers[kMaskWords] = {};        ///< bit c: CTA c's range is a helper's, `chain` shorter
  uint8_t helpers_before[kMaskWords] = {};  ///< helper ranges in the words before each

  static constexpr int64_t kMaxUnitProduct = int64_t(1) << 31;

  /// `min_sk_iters`: the shortest stream-K range worth its fixup; `chain`: the fixup's chain in
  /// k-iterations, by which helper ranges are cut shorter (0: equal ranges); `dp_slack`: what the
  /// fixup of a split tile costs, in k-iterations: where the CTAs that a last, partial wave of whole
  /// tiles leaves idle cost no more ((ctas - rest) * iters <= dp_slack * ctas), every tile runs
  /// whole and the grid is at most the tiles. Returns grid == 0 when the problem is too large for
  /// 32-bit unit arithmetic (K above about 2^31 / 128 / ctas^2 * 64).
  static StreamKDecomposition make(int tiles_n, int tiles_m, int iters, int ctas, int min_sk_iters, int chain = 0,
                                   int dp_slack = 0) {
    StreamKDecomposition d;
    d.tiles_n = tiles_n;
    d.tiles_m = tiles_m;
    d.iters = iters;
    int const tiles = tiles_n * tiles_m;
    if (tiles == 0 || iters == 0 || ctas <= 0) {
      return d;
    }
    d.dp_tiles = (tiles / ctas) * ctas;
    d.sk_tiles = tiles - d.dp_tiles;
    if (d.sk_tiles > 0 && int64_t(ctas - d.sk_tiles) * iters <= int64_t(dp_slack) * ctas) {
      d.dp_tiles = tiles;
      d.sk_tiles = 0;
    }
    int64_t const sk_units = int64_t(d.sk_tiles) * iters;
    int64_t const by_length = (sk_units + min_sk_iters - 1) / min_sk_iters;
    d.sk_ctas = int(by_length < ctas ? by_length : ctas);
    if (d.sk_ctas < d.sk_tiles) {  // never more than one tile's worth of fixup per range end
      d.sk_ctas = d.sk_tiles;
    }
    d.grid = d.dp_tiles > 0 ? (tiles < ctas ? tiles : ctas) : d.sk_ctas;
    if (sk_units * (d.sk_ctas + 1) >= kMaxUnitProduct) {
      d.grid = 0;
      return d;
    }
    d.sk_span = uint32_t(sk_units);
    // helpers make the other ranges longer by their share: worth it where they are few (measured on
    // the H200, docs/kernel.md: 3-9% faster with 112 tiles on 132 CTAs, up to 10% slower with 32-40)
    if (chain > 0 && d.sk_ctas > d.sk_tiles && 4 * d.sk_tiles >= 3 * d.sk_ctas && d.sk_ctas <= 32 * kMaskWords) {
      d.plan_helpers(chain);
    }
    return d;
  }

  /// Split-K over clusters (SplitSegment): tile t's k-iterations in `split` ranges, CTA split * t + r
  /// taking the r-th; no stream-K tiles. grid == 0 when the grid would not fit a launch.
  static StreamKDecomposition make_split(int tiles_n, int tiles_m, int iters, int split) {
    StreamKDecomposition d;
    d.tiles_n = tiles_n;
    d.tiles_m = tiles_m;
    d.iters = iters;
    int64_t const grid = int64_t(tiles_n) * tiles_m * split;
    d.grid = grid < (int64_t(1) << 31) ? int(grid) : 0;
    return d;
  }

  // Unit arithmetic is 32-bit: make() refuses more than kMaxUnitProduct units x CTAs.
  QUANTGEMM_HOST_DEVICE uint32_t sk_units() const { return uint32_t(sk_tiles) * uint32_t(iters); }
  /// Helper ranges among CTAs 0 .. c - 1 (c < 32 kMaskWords).
  QUANTGEMM_HOST_DEVICE uint32_t helpers_below(int c) const {
    return helpers_before[c / 32] + popcount32(helpers[c / 32] & ((1u << (c % 32)) - 1));
  }
  /// First stream-K unit of CTA c (c may equal sk_ctas: the end).
  QUANTGEMM_HOST_DEVICE uint32_t sk_begin(int c) const {
    if (chain == 0) {
      return uint32_t(c) * sk_units() / uint32_t(sk_ctas);
    }
    return c >= sk_ctas ? sk_units() : uint32_t(c) * sk_span / uint32_t(sk_ctas) - uint32_t(chain) * helpers_below(c);
  }
  /// The CTA whose stream-K range holds unit u, searched from CTA `from` (at most the owner) on:
  /// unequal ranges take a step per range (a tile's pieces are few).
  QUANTGEMM_HOST_DEVICE int sk_owner(uint32_t u, int from) const {
    if (chain == 0) {
      return int(((u + 1) * uint32_t(sk_ctas) - 1) / sk_units());
    }
    int c = from;
    while (c + 1 < sk_ctas && sk_begin(c + 1) <= u) {
      ++c;
    }
    return c;
  }
  /// Workspace slot of CTA c's piece of stream-K tile s.
  QUANTGEMM_HOST_DEVICE int sk_slot(int c, int s) const { return 2 * c + (s == sk_begin(c) / iters ? 0 : 1); }
  QUANTGEMM_HOST_DEVICE int sk_slots() const { return 2 * sk_ctas; }

 private:
  /// Marks the helper ranges: sweeping the CTAs in order, a range whose full length would not hold a
  /// tile's first piece of at least `chain` iterations is a helper, `chain` shorter. The span is
  /// sk_units() plus `chain` per helper assumed; the sweep can find fewer than it assumed (the last
  /// range, which ends at sk_units(), then ends that much early), so the assumption starts at the
  /// fewest helpers there can be and grows until the sweep finds no more. Ranges too short for the
  /// chain stay equal.
  void plan_helpers(int c_iters) {
    uint32_t const units = sk_units();
    uint32_t const n = uint32_t(sk_ctas);
    uint32_t const ch = uint32_t(c_iters);
    for (uint32_t assumed = n - uint32_t(sk_tiles); assumed <= n; ++assumed) {
      int64_t const span = int64_t(units) + int64_t(ch) * assumed;
      if (span * (n + 1) >= kMaxUnitProduct || uint32_t(span) / n < 2 * ch) {
        return;
      }
      uint32_t mask[kMaskWords] = {};
      uint32_t const q = uint32_t(span) / n, r = uint32_t(span) % n;
      uint32_t base = 0, rem = 0, found = 0, tile_start = 0, last_begin = 0;  // base = floor(c span / n)
      for (uint32_t c = 0; c < n; ++c) {
        last_begin = base - ch * found;
        base += q;
        rem += r;
        if (rem >= n) {
          rem -= n;
          ++base;
        }
        while (tile_start < last_begin) {
          tile_start += uint32_t(iters);
        }
        if (tile_start + ch > base - ch * found) {  // no first piece of `chain` iterations in reach
          mask[c / 32] |= 1u << (c % 32);
          ++found;
        }
      }
      if (found <= assumed && last_begin < units) {
        chain = c_iters;
        sk_span = uint32_t(span);
        for (uint32_t w = 0, before = 0; w < kMaskWords; before += popcount32(mask[w]), ++w) {
          helpers[w] = mask[w];
          helpers_before[w] = uint8_t(before);
        }
        return;
      }
    }
  }
};

/// One piece of work: k-iterations [k_begin, k_end) of tile `tile`.
struct WorkSegment {
  int tile;     ///< linear tile index, n fastest
  int k_begin;
  int k_end;
  int sk_tile;  ///< index among the stream-K tiles, -1 for a data-parallel tile
  QUANTGEMM_HOST_DEVICE bool whole(int iters) const { return k_begin == 0 && k_end == iters; }
};

/// The pieces of work of one CTA, in order: its data-parallel tiles, then its stream-K range.
class SegmentIterator {
 public:
  QUANTGEMM_HOST_DEVICE SegmentIterator(StreamKDecomposition const& d, int cta)
      : d_(d), tile_(cta), unit_(cta < d.sk_ctas ? d.sk_begin(cta) : 0u), end_(cta < d.sk_ctas ? d.sk_begin(cta + 1) : 0u) {}

  QUANTGEMM_HOST_DEVICE bool next(WorkSegment& seg) {
    if (tile_ < d_.dp_tiles) {
      seg = WorkSegment{tile_, 0, d_.iters, -1};
      tile_ += d_.grid;
      return true;
    }
    if (unit_ >= end_) {
      return false;
    }
    int const s = int(unit_ / uint32_t(d_.iters));
    uint32_t const tile_begin = uint32_t(s) * uint32_t(d_.iters);
    uint32_t const tile_end = tile_begin + uint32_t(d_.iters);
    uint32_t const stop = end_ < tile_end ? end_ : tile_end;
    seg = WorkSegment{d_.dp_tiles + s, int(unit_ - tile_begin), int(stop - tile_begin), s};
    unit_ = stop;
    return true;
  }

 private:
  StreamKDecomposition const& d_;
  int tile_;
  uint32_t unit_;
  uint32_t end_;
};

/// The one piece of work of CTA `cta` under split-K over clusters of Split CTAs (make_split): range
/// cta % Split of tile cta / Split, empty when the tile has fewer k-iterations than Split.
template <int Split>
class SplitSegment {
 public:
  QUANTGEMM_HOST_DEVICE SplitSegment(StreamKDecomposition const& d, int cta)
      : tile_(cta / Split), begin_(cta % Split * d.iters / Split), end_((cta % Split + 1) * d.iters / Split) {}

  QUANTGEMM_HOST_DEVICE bool next(WorkSegment& seg) {
    if (tile_ < 0) {
      return false;
    }
    seg = WorkSegment{tile_, begin_, end_, -1};
    tile_ = -1;
    return true;
  }

 private:
  int tile_;
  int begin_;
  int end_;
};

#if defined(__CUDACC__)
// The stream-K fixup's device side, shared by the kernels (the protocol: the header comment).

/// A split tile's later piece, its partial stored: counts itself in (release: the partial first).
__device__ __forceinline__ void publish_piece(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}

/// The tile's first piece (one thread): waits until `later` pieces have counted themselves in
/// (acquire: their partials are then visible), then resets the counter for the next call.
__device__ __forceinline__ void wait_for_pieces(int* counter, int later) {
  for (int seen = -1;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    if (seen == later) {
      break;
    }
    __nanosleep(32);
  }
  *counter = 0;
}

/// The tile's first piece (each thread that holds accumulators): adds the partials of the later pieces, CTAs
/// c_lo + 1 to c_hi, in CTA order. A thread's share of a partial is Chunks float4s, `stride` apart,
/// from piece(c); Batch pieces' loads are in flight at once (the pieces of a small layer's tile are
/// many). add(i, x) adds chunk i.
template <int Batch, int Chunks, class Piece, class Add>
__device__ __forceinline__ void add_later_pieces(int c_lo, int c_hi, int stride, Piece const& piece,
                                                 Add const& add) {
  for (int c0 = c_lo + 1; c0 <= c_hi; c0 += Batch) {
    float4 x[Batch][Chunks];
#pragma unroll
    for (int b = 0; b < Batch; ++b) {
      if (c0 + b <= c_hi) {
        float4 const* src = piece(c0 + b);
#pragma unroll
        for (int i = 0; i < Chunks; ++i) {
          x[b][i] = __ldcg(src + i * stride);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < Batch; ++b) {
      if (c0 + b <= c_hi) {
#pragma unroll
        for (int i = 0; i < Chunks; ++i) {
          add(i, x[b][i]);
        }
      }
    }
  }
}
#endif

}  // namespace quantgemm
