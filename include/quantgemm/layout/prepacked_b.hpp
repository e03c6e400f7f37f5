/*! \file
    \brief The prepacked-B layout of the mixed-input family, defined once.

    A weight W[N, K] of 4- or 8-bit codes is cut into 128(N) x 64(K) blocks, stored block row by
    block row: block (nb, kb) starts at code ((nb * K/64) + kb) * 8192. Inside a block the codes
    follow the thread-value order of the register-sourced A operand of the wgmma tiled MMA that the
    mainloop runs (two warpgroups stacked along N, 64 rows each, k16 steps):

      code e of a block = ((t * 4 + j) * 8 + p)     t: consumer thread 0..255, j: k16 step 0..3,
                                                    p: position among the step's eight codes

    so consumer thread t fetches its whole slice of a block, 16 bytes, with one 128-bit shared-memory
    load; position p is nibble p of the thread's 32-bit word j and holds its value nibble_value(p)
    (numeric/u4.hpp), the order the LOP3 converter wants. 8-bit codes take twice the bytes: thread
    t's steps 0-1 and 2-3 are two 16-byte halves, all threads' first halves first,

      code e of a block = ((j / 2) * 256 + t) * 16 + (j % 2) * 8 + p

    so each of the thread's two 128-bit loads is conflict-free across the warp; position p is byte
    p % 4 of the step's word p / 4 and holds value p, the order the PRMT converters want
    (numeric/u8.hpp). The GPU prepack kernel, the host
    reference and the mainloop all use these structs.
*/
#pragma once

#include <cstdint>

#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cute/layout.hpp"

#include "quantgemm/layout/blocked_codes.hpp"
#include "quantgemm/numeric/u4.hpp"
#include "quantgemm/numeric/u8.hpp"

namespace quantgemm {

/// The layout of Bits-bit codes (4 or 8).
template <int Bits>
struct PrepackedBLayoutOfBits : BlockedCodes<PrepackedBLayoutOfBits<Bits>> {
  static_assert(Bits == 4 || Bits == 8, "quantgemm: 4- or 8-bit codes");
  /// (thread 0..127, value 0..7) -> m + 64 * k inside the 64x16 A tile of one 16-bit wgmma.
  using AtomALayout = cute::SM90::GMMA::ALayout_64x16;

  static constexpr int kBits = Bits;
  static constexpr int kBlockN = 128;
  static constexpr int kBlockK = 64;
  static constexpr int kThreads = 256;        // two consumer warpgroups
  static constexpr int kKSteps = kBlockK / 16;
  static constexpr int kBlockCodes = kBlockN * kBlockK;
  static constexpr int kBlockBytes = kBlockCodes * kBits / 8;
  static constexpr int kThreadBytes = kBlockBytes / kThreads;  // 16 or 32: one or two 128-bit loads
  static constexpr int kLoads = kThreadBytes / 16;
  /// Byte offset in a block of load l (0 .. kLoads - 1) of consumer thread t.
  CUTE_HOST_DEVICE static constexpr int load_offset(int t, int l) { return (l * kThreads + t) * 16; }
  static constexpr int kCodesPerWord = 32 / kBits;
  static constexpr uint32_t kCodeMask = (1u << kBits) - 1;
  static_assert(kThreadBytes % 16 == 0, "a thread's slice of a block must be whole 128-bit loads");

  /// Position p (0..7) of a k16 step's eight codes holds the thread's value slot_value(p): the
  /// nibble interleave of numeric/u4.hpp for 4-bit codes, value order for 8-bit ones.
  CUTE_HOST_DEVICE static constexpr int slot_value(int p) { return kBits == 4 ? nibble_value(p) : p; }
  CUTE_HOST_DEVICE static constexpr int value_slot(int v) { return kBits == 4 ? value_nibble(v) : v; }

  /// The code index in a block of position p of thread t's k16 step j: for 4-bit codes
  /// ((t * 4 + j) * 8 + p), a thread's 16 bytes together; for 8-bit ones each thread's 32 bytes
  /// are two 16-byte halves (steps 0-1 and 2-3), the first halves of all threads first, so that
  /// each of its two 128-bit loads is a warp-contiguous, bank-conflict-free read.
  CUTE_HOST_DEVICE static constexpr int code_index(int t, int j, int p) {
    return kBits == 4 ? (t * kKSteps + j) * 8 + p : ((j / 2) * kThreads + t) * 16 + (j % 2) * 8 + p;
  }

  /// Code e of a block -> (n, k) inside the block.
  CUTE_HOST_DEVICE static void block_coord(int e, int& n, int& k) {
    int const p = e % 8;
    int const j = kBits == 4 ? (e / 8) % kKSteps : 2 * (e / (16 * kThreads)) + (e % 16) / 8;
    int const t = kBits == 4 ? e / (8 * kKSteps) : (e / 16) % kThreads;
    int const mk = AtomALayout{}(t % 128, slot_value(p));
    n = 64 * (t / 128) + mk % 64;
    k = 16 * j + mk / 64;
  }

  /// (n, k) inside the block -> code index e of the block.
  CUTE_HOST_DEVICE static int block_code(int n, int k) {
    auto const inverse = cute::right_inverse(AtomALayout{});  // m + 64 k -> thread + 128 * value
    int const tv = inverse((n % 64) + 64 * (k % 16));
    int const t = (n / 64) * 128 + tv % 128;
    int const v = tv / 128;
    return code_index(t, k / 16, value_slot(v));
  }
};

/// The layout of a weight type's codes: it depends on their width only (with or without zero points
/// per group, only the offset the converter subtracts differs).
template <class Weight>
using PrepackedBLayout = PrepackedBLayoutOfBits<Weight::kBits>;

}  // namespace quantgemm

namespace quantgemm {

/// The layout of 4-bit codes for the W4A8 kernels, whose wgmma takes e4m3 operands 32 deep: the same
/// 128(N) x 64(K) blocks, one 16-byte slice a consumer thread, but in the thread-value order of the
/// 8-bit register-sourced A operand (ALayout_64x32: a thread's 16 values of a k32 step are four
/// registers of four consecutive k each) and without the nibble interleave of the 16-bit layout:
///
///   code e of a block = (t * 2 + j) * 16 + p     t: consumer thread, j: k32 step 0..1, p: value 0..15
///
/// so value p of step j is nibble p % 8 of the thread's word 2 j + p / 8, and the converter
/// (numeric/u4.hpp, Convert4BitE4m3) turns each word's low and high four nibbles into the bytes of
/// the step's registers p / 4.
struct PrepackedBLayoutE4m3 : BlockedCodes<PrepackedBLayoutE4m3> {
  /// (thread 0..127, value 0..15) -> m + 64 * k inside the 64x32 A tile of one 8-bit wgmma.
  using AtomALayout = cute::SM90::GMMA::ALayout_64x32;

  static constexpr int kBits = 4;
  static constexpr int kBlockN = 128;
  static constexpr int kBlockK = 64;
  static constexpr int kThreads = 256;
  static constexpr int kKSteps = kBlockK / 32;
  static constexpr int kBlockCodes = kBlockN * kBlockK;
  static constexpr int kBlockBytes = kBlockCodes / 2;
  static constexpr int kLoads = 1;
  CUTE_HOST_DEVICE static constexpr int load_offset(int t, int) { return t * 16; }
  static constexpr int kCodesPerWord = 8;
  static constexpr uint32_t kCodeMask = 0xf;

  CUTE_HOST_DEVICE static constexpr int code_index(int t, int j, int p) { return (t * kKSteps + j) * 16 + p; }

  CUTE_HOST_DEVICE static void block_coord(int e, int& n, int& k) {
    int const p = e % 16;
    int const j = (e / 16) % kKSteps;
    int const t = e / (16 * kKSteps);
    int const mk = AtomALayout{}(t % 128, p);
    n = 64 * (t / 128) + mk % 64;
    k = 32 * j + mk / 64;
  }

  CUTE_HOST_DEVICE static int block_code(int n, int k) {
    auto const inverse = cute::right_inverse(AtomALayout{});
    int const tv = inverse((n % 64) + 64 * (k % 32));
    return code_index((n / 64) * 128 + tv % 128, k / 32, tv / 128);
  }
};

}  // namespace quantgemm
