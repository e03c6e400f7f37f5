/*! \file
    \brief The W8A8 epilogues as Sm90EVT trees: scales, bias and zero-point corrections applied to
           the accumulators in registers, before the one store of the output.

    Every formula is a struct with the tree in `EVT` and `arguments(p)` filling its runtime
    arguments from a ScaledEpilogueParams (launch/scaled_mm.hpp). Names follow the math of docs/math.md, in the user's coordinates:

      sa  [M] or one value, fp32   activation scale (per token, or per tensor)
      sb  [N] or one value, fp32   weight scale (per channel, or per tensor)
      bias [N] or none             in the output type
      azp_adj [N] int32            INT8 zero-point adjustment: sum_k b[n, k] (times the activation's
                                   zero point when that is one value per tensor)
      azp [M] int32                INT8 activation zero point per token

    Whether sa and sb are vectors or scalars is chosen at run time (a broadcast stride of 0 or 1),
    so one compiled kernel serves per-tensor, per-token and per-channel scaling. A null bias,
    azp_adj or azp takes its neutral value (0, 0, 1).

    `Swap` says whether the kernel computes D^T = B A^T (the small-M schedules, so that the few
    tokens are the narrow tile dimension): tokens are then the GEMM's columns rather than its rows,
    and every per-token vector broadcasts along the other axis.

    The output type, bf16 or fp16, is chosen at run time too (ScaledEpilogueParams::out_fp16): the
    last node rounds to one or the other and hands the kernel the bits as a 16-bit storage type
    (OutStorage), which the epilogue stores unchanged. The bias, in the output type, is read as raw
    16-bit codes and decoded by the same node. One kernel thus serves both output dtypes.
*/
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/functional.h"

namespace quantgemm::epilogue {

namespace detail {

using cute::_0;
using cute::Stride;
namespace fusion = cutlass::epilogue::fusion;

inline constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

/// Vectors along the GEMM's rows (M) or columns (N), or one value: the broadcast stride is a bool
/// picked at run time.
template <class TileShape, class Element, class Compute>
using ColVector = fusion::Sm90ColBroadcast<0, TileShape, Element, Compute, Stride<bool, _0, int64_t>>;
template <class TileShape, class Element, class Compute>
using RowVector = fusion::Sm90RowBroadcast<0, TileShape, Element, Compute, Stride<_0, bool, int64_t>>;

template <bool Swap, class TileShape, class Element, class Compute = Element>
using PerToken = cute::conditional_t<Swap, RowVector<TileShape, Element, Compute>, ColVector<TileShape, Element, Compute>>;
template <bool Swap, class TileShape, class Element, class Compute = Element>
using PerChannel = cute::conditional_t<Swap, ColVector<TileShape, Element, Compute>, RowVector<TileShape, Element, Compute>>;

/// The runtime arguments of a ColVector or RowVector: `vector` false broadcasts ptr[0].
template <class Vector>
typename Vector::Arguments vector_arguments(typename Vector::ElementInput const* ptr, bool vector,
                                            typename Vector::ElementInput null_default = {}) {
  using StrideMNL = typename Vector::StrideMNL;
  if constexpr (cute::is_same_v<StrideMNL, Stride<bool, _0, int64_t>>) {
    return {ptr, null_default, StrideMNL{vector, _0{}, 0}};
  } else {
    return {ptr, null_default, StrideMNL{_0{}, vector, 0}};
  }
}

template <template <class> class Fn, class Out, class Compute = float>
using Op = fusion::Sm90Compute<Fn, Out, Compute, kRound>;

/// The runtime argument of the output node: the output dtype.
struct OutTypeArguments {
  bool fp16 = false;  ///< fp16 output (and bias); bf16 otherwise
};

/// The 16-bit bits of the rounded output as the kernel's storage type.
using OutStorage = cutlass::half_t;

/// The output node's function: sa * x, plus the bias when there is one, in fp32, rounded once to
/// bf16 or fp16 (the runtime argument). The bias comes as its 16-bit code, converted exactly to
/// fp32 by Sm90Compute's input conversion. (T: Sm90Compute instantiates its function on the compute
/// type; this one is written for fp32 fragments only.)
template <class T>
struct ScaleToOut {
  using Arguments = OutTypeArguments;

  template <int N>
  CUTLASS_DEVICE cutlass::Array<OutStorage, N> round(cutlass::Array<float, N> const& y, Arguments const& args) const {
    if (args.fp16) {
      return cutlass::NumericArrayConverter<cutlass::half_t, float, N, kRound>{}(y);
    }
    auto const bf16 = cutlass::NumericArrayConverter<cutlass::bfloat16_t, float, N, kRound>{}(y);
    return reinterpret_cast<cutlass::Array<OutStorage, N> const&>(bf16);
  }

  template <int N>
  CUTLASS_DEVICE cutlass::Array<OutStorage, N> operator()(cutlass::Array<float, N> const& sa,
                                                          cutlass::Array<float, N> const& x,
                                                          Arguments const& args) const {
    cutlass::Array<float, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      y[i] = sa[i] * x[i];
    }
    return round(y, args);
  }

  template <int N>
  CUTLASS_DEVICE cutlass::Array<OutStorage, N> operator()(cutlass::Array<float, N> const& sa,
                                                          cutlass::Array<float, N> const& x,
                                                          cutlass::Array<float, N> const& bias_code,
                                                          Arguments const& args) const {
    cutlass::Array<float, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      auto const code = static_cast<uint16_t>(bias_code[i]);
      float const bias = args.fp16 ? float(cutlass::half_t::bitcast(code)) : float(cutlass::bfloat16_t::bitcast(code));
      y[i] = __fmaf_rn(sa[i], x[i], bias);
    }
    return round(y, args);
  }
};

/// The scales around an accumulator-side node `Inner`: sa * (sb * Inner), and with a bias
/// sa * (sb * Inner) + bias, rounded once to the output type.
template <bool Swap, class TileShape, class Inner>
struct Scaled {
  using Sa = PerToken<Swap, TileShape, float>;
  using Sb = PerChannel<Swap, TileShape, float>;
  using Bias = PerChannel<Swap, TileShape, uint16_t>;  // the output type's codes
  using SbInner = fusion::Sm90EVT<Op<cutlass::multiplies, float>, Sb, Inner>;
  using ToOut = Op<ScaleToOut, OutStorage>;
  using EVT = fusion::Sm90EVT<ToOut, Sa, SbInner>;
  using EVTBias = fusion::Sm90EVT<ToOut, Sa, SbInner, Bias>;

  template <class Params>
  static typename SbInner::Arguments sb_inner(Params const& p, typename Inner::Arguments const& inner) {
    return {vector_arguments<Sb>(p.scale_b, p.scale_b_per_channel), inner, {}};
  }
  template <class Params>
  static typename EVT::Arguments arguments(Params const& p, typename Inner::Arguments const& inner) {
    return {vector_arguments<Sa>(p.scale_a, p.scale_a_per_token), sb_inner(p, inner), {p.out_fp16}};
  }
  template <class Params>
  static typename EVTBias::Arguments arguments_bias(Params const& p, typename Inner::Arguments const& inner) {
    return {vector_arguments<Sa>(p.scale_a, p.scale_a_per_token), sb_inner(p, inner),
            vector_arguments<Bias>(static_cast<uint16_t const*>(p.bias), p.bias != nullptr), {p.out_fp16}};
  }
};

using Acc = fusion::Sm90AccFetch;

}  // namespace detail

/// D = sa * (sb * acc)
template <bool Swap, class TileShape>
struct ScaledAcc {
  using Tree = detail::Scaled<Swap, TileShape, detail::Acc>;
  using EVT = typename Tree::EVT;

  template <class Params>
  static typename EVT::Arguments arguments(Params const& p) {
    return Tree::arguments(p, {});
  }
};

/// D = sa * (sb * acc) + bias
template <bool Swap, class TileShape>
struct ScaledAccBias {
  using Tree = detail::Scaled<Swap, TileShape, detail::Acc>;
  using EVT = typename Tree::EVTBias;

  template <class Params>
  static typename EVT::Arguments arguments(Params const& p) {
    return Tree::arguments_bias(p, {});
  }
};

/// INT8 with an activation zero point per tensor: D = sa * sb * (acc - azp_adj[N]) + bias, where
/// azp_adj[n] = azp * sum_k b[n, k] (exact in int32).
template <bool Swap, class TileShape>
struct AzpScaledAccBias {
  using AzpAdj = detail::PerChannel<Swap, TileShape, int32_t>;
  using Corrected = detail::fusion::Sm90EVT<detail::Op<cutlass::minus, float, int32_t>, detail::Acc, AzpAdj>;
  using Tree = detail::Scaled<Swap, TileShape, Corrected>;
  using EVT = typename Tree::EVTBias;

  template <class Params>
  static typename EVT::Arguments arguments(Params const& p) {
    return Tree::arguments_bias(p, {{}, detail::vector_arguments<AzpAdj>(p.azp_adj, true), {}});
  }
};

/// INT8 with an activation zero point per token: D = sa * sb * (acc - azp[M] * azp_adj[N]) + bias,
/// where azp_adj[n] = sum_k b[n, k]; the correction is exact in int32. A null azp is 1 (so that
/// azp_adj may carry a per-tensor zero point, the formula above), a null azp_adj 0 (plain INT8).
template <bool Swap, class TileShape>
struct AzpTokenScaledAccBias {
  using Azp = detail::PerToken<Swap, TileShape, int32_t>;
  using AzpAdj = detail::PerChannel<Swap, TileShape, int32_t>;
  using Correction = detail::fusion::Sm90EVT<detail::Op<cutlass::multiplies, int32_t, int32_t>, Azp, AzpAdj>;
  using Corrected = detail::fusion::Sm90EVT<detail::Op<cutlass::minus, float, int32_t>, detail::Acc, Correction>;
  using Tree = detail::Scaled<Swap, TileShape, Corrected>;
  using EVT = typename Tree::EVTBias;

  template <class Params>
  static typename EVT::Arguments arguments(Params const& p) {
    return Tree::arguments_bias(p, {{},
                                    {detail::vector_arguments<Azp>(p.azp, p.azp != nullptr, 1),
                                     detail::vector_arguments<AzpAdj>(p.azp_adj, p.azp_adj != nullptr, 0),
                                     {}},
                                    {}});
  }
};

}  // namespace quantgemm::epilogue
