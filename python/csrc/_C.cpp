// quantgemm._C: thin nanobind bindings over the raw-pointer launchers. Tensors arrive as data
// pointers, already validated by the Python layer (python/quantgemm/); nothing here links torch.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "quantgemm/kernel/stream_k.hpp"
#include "quantgemm/kernel/timeline.hpp"
#include "quantgemm/launch/dispatch.hpp"
#include "quantgemm/launch/prepack_b.hpp"
#include "quantgemm/launch/gather_columns.hpp"
#include "quantgemm/launch/quantize_fp8.hpp"
#include "quantgemm/launch/stream_read.hpp"

namespace nb = nanobind;
using namespace quantgemm;

namespace {

template <class T>
T* ptr(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

cudaStream_t stream_of(uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

/// Makes `device` current for the scope of a call, as torch's device guard would.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (device != previous_) {
      check(cudaSetDevice(device), "cudaSetDevice");
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) {
      cudaSetDevice(previous_);
    }
  }
  static void check(cudaError_t err, char const* what) {
    if (err != cudaSuccess) {
      throw std::runtime_error(std::string("quantgemm: ") + what + " failed: " + cudaGetErrorString(err));
    }
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

/// The names of the schedules compiled for `family`, of either kind; throws for an unknown family.
std::vector<std::string> schedules(std::string const& family) {
  std::vector<std::string> names;
  auto collect = [&](auto const& table) {
    for (int i = 0; i < table.size; ++i) {
      names.emplace_back(table.entries[i].name);
    }
    return table.entries != nullptr;
  };
  if (!collect(mixed_input_family(family.c_str())) && !collect(scaled_mm_family(family.c_str())) &&
      !collect(block_scaled_mm_family(family.c_str()))) {
    throw std::invalid_argument("quantgemm: unknown family '" + family + "'");
  }
  return names;
}

/// The dispatch chain: (condition, schedule) in the order it is tested; "" is the catch-all.
std::vector<std::pair<std::string, std::string>> rules(std::string const& family) {
  schedules(family);
  RuleTable const table = dispatch_rules(family.c_str());
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < table.size; ++i) {
    out.emplace_back(table.entries[i].condition, table.entries[i].schedule);
  }
  return out;
}

std::string pick_schedule(std::string const& family, int M, int N, int K) {
  char const* const name = select_schedule(family.c_str(), M, N, K);
  if (name == nullptr) {
    throw std::invalid_argument("quantgemm: unknown family '" + family + "'");
  }
  return name;
}

template <class LaunchFn>
LaunchFn launcher(LaunchFn fn, std::string const& family, std::string const& name) {
  if (fn == nullptr) {
    throw std::invalid_argument("quantgemm: schedule '" + name + "' is not compiled for " + family);
  }
  return fn;
}

void check_launch(LaunchResult const& r, std::string const& name, int M, int N, int K) {
  if (r.status == Status::kInvalidArgument) {
    throw std::invalid_argument("quantgemm: the " + name + " launcher rejected M=" + std::to_string(M) +
                                " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  if (r.status == Status::kCudaError) {
    DeviceGuard::check(r.cuda, name.c_str());
  }
}

/// Returns (status, workspace bytes needed, counters needed): status 0 launched,
/// 2 the workspace or counters are too small (nothing launched; grow them and call again).
std::tuple<int, size_t, int> mm_mixed_input(
    std::string const& family, std::string const& schedule, uintptr_t a, int64_t lda, uintptr_t b,
    uintptr_t group_scales, uintptr_t group_zeros, uintptr_t channel_scales, uintptr_t token_scales, uintptr_t out,
    int64_t ldo, int M, int N, int K, int group_size, uintptr_t workspace, size_t workspace_bytes, uintptr_t counters,
    int counters_len, int device, uintptr_t stream) {
  std::string const name = schedule.empty() ? pick_schedule(family, M, N, K) : schedule;
  MixedInputMmLaunchFn const launch = launcher(mixed_input_launcher(family.c_str(), name.c_str()), family, name);
  DeviceGuard guard(device);
  MixedInputMmArgs args;
  args.a = ptr<void const>(a);
  args.lda = lda;
  args.b = ptr<void const>(b);
  args.group_scales = ptr<void const>(group_scales);
  args.group_zeros = ptr<void const>(group_zeros);
  args.channel_scales = ptr<float const>(channel_scales);
  args.token_scales = ptr<float const>(token_scales);
  args.out = ptr<void>(out);
  args.ldo = ldo;
  args.M = M;
  args.N = N;
  args.K = K;
  args.group_size = group_size;
  args.workspace = ptr<void>(workspace);
  args.workspace_bytes = workspace_bytes;
  args.counters = ptr<int>(counters);
  args.counters_len = counters_len;
  args.stream = stream_of(stream);
  LaunchResult const r = launch(args);
  check_launch(r, name, M, N, K);
  return {int(r.status), r.workspace_bytes_needed, r.counters_needed};
}

/// The fields every 8-bit GEMM's arguments share (ScaledMmArgs, BlockScaledMmArgs).
template <class Args>
Args operands(uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t out, int64_t ldo, int M, int N, int K,
              uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
  Args args;
  args.a = ptr<void const>(a);
  args.lda = lda;
  args.b = ptr<void const>(b);
  args.ldb = ldb;
  args.out = ptr<void>(out);
  args.ldo = ldo;
  args.M = M;
  args.N = N;
  args.K = K;
  args.workspace = ptr<void>(workspace);
  args.workspace_bytes = workspace_bytes;
  args.stream = stream_of(stream);
  return args;
}

/// Launches `schedule` (the heuristic's pick when empty) of an 8-bit family, found by `lookup`.
/// Returns (status, workspace bytes needed), as mm_mixed_input.
template <class LaunchFn, class Args>
std::tuple<int, size_t> launch_8bit(LaunchFn (*lookup)(char const*, char const*), std::string const& family,
                                    std::string const& schedule, Args const& args, int device) {
  std::string const name = schedule.empty() ? pick_schedule(family, args.M, args.N, args.K) : schedule;
  LaunchFn const launch = launcher(lookup(family.c_str(), name.c_str()), family, name);
  DeviceGuard guard(device);
  LaunchResult const r = launch(args);
  check_launch(r, name, args.M, args.N, args.K);
  return {int(r.status), r.workspace_bytes_needed};
}

std::tuple<int, size_t> mm_scaled(std::string const& family, std::string const& schedule, uintptr_t a, int64_t lda,
                                  uintptr_t b, int64_t ldb, uintptr_t scale_a, bool scale_a_per_token,
                                  uintptr_t scale_b, bool scale_b_per_channel, uintptr_t bias, uintptr_t azp_adj,
                                  uintptr_t azp, bool out_fp16, uintptr_t out, int64_t ldo, int M, int N, int K,
                                  uintptr_t workspace, size_t workspace_bytes, int device, uintptr_t stream) {
  auto args = operands<ScaledMmArgs>(a, lda, b, ldb, out, ldo, M, N, K, workspace, workspace_bytes, stream);
  args.epilogue.scale_a = ptr<float const>(scale_a);
  args.epilogue.scale_a_per_token = scale_a_per_token;
  args.epilogue.scale_b = ptr<float const>(scale_b);
  args.epilogue.scale_b_per_channel = scale_b_per_channel;
  args.epilogue.bias = ptr<void const>(bias);
  args.epilogue.azp_adj = ptr<int32_t const>(azp_adj);
  args.epilogue.azp = ptr<int32_t const>(azp);
  args.epilogue.out_fp16 = out_fp16;
  return launch_8bit(&scaled_mm_launcher, family, schedule, args, device);
}

std::tuple<int, size_t> mm_block_scaled(std::string const& family, std::string const& schedule, uintptr_t a,
                                        int64_t lda, uintptr_t a_scales, uintptr_t b, int64_t ldb, uintptr_t b_scales,
                                        uintptr_t out, int64_t ldo, int M, int N, int K, uintptr_t workspace,
                                        size_t workspace_bytes, int device, uintptr_t stream) {
  auto args = operands<BlockScaledMmArgs>(a, lda, b, ldb, out, ldo, M, N, K, workspace, workspace_bytes, stream);
  args.a_scales = ptr<float const>(a_scales);
  args.b_scales = ptr<float const>(b_scales);
  return launch_8bit(&block_scaled_mm_launcher, family, schedule, args, device);
}

/// GPU prepack of `bits`-bit codes (4: u4b8 and u4; 8: u8b128 and u8) into `layout` ("sm90", "sm80",
/// or "sm90_e4m3": 4-bit codes for the W4A8 kernels).
void prepack(std::string const& layout, int bits, uintptr_t codes, int N, int K, uintptr_t packed, int device,
             uintptr_t stream) {
  DeviceGuard guard(device);
  auto const* c = ptr<uint8_t const>(codes);
  cudaError_t const err = layout == "sm80"        ? prepack_b_sm80(bits, c, N, K, ptr<uint8_t>(packed), stream_of(stream))
                          : layout == "sm90_e4m3" ? prepack_b_e4m3(c, N, K, ptr<uint8_t>(packed), stream_of(stream))
                          : bits == 8      ? prepack_b_u8(c, N, K, ptr<uint8_t>(packed), stream_of(stream))
                                           : prepack_b_u4b8(c, N, K, ptr<uint8_t>(packed), stream_of(stream));
  DeviceGuard::check(err, "prepack_b");
}

void prepack_host(std::string const& layout, int bits, uintptr_t codes, int N, int K, uintptr_t packed) {
  if (layout == "sm80") {
    prepack_b_sm80_host(bits, ptr<uint8_t const>(codes), N, K, ptr<uint8_t>(packed));
  } else if (layout == "sm90_e4m3") {
    prepack_b_e4m3_host(ptr<uint8_t const>(codes), N, K, ptr<uint8_t>(packed));
  } else {
    (bits == 8 ? &prepack_b_u8_host : &prepack_b_u4b8_host)(ptr<uint8_t const>(codes), N, K, ptr<uint8_t>(packed));
  }
}

void unpack_host(std::string const& layout, int bits, uintptr_t packed, int N, int K, uintptr_t codes) {
  if (layout == "sm80") {
    unpack_b_sm80_host(bits, ptr<uint8_t const>(packed), N, K, ptr<uint8_t>(codes));
  } else if (layout == "sm90_e4m3") {
    unpack_b_e4m3_host(ptr<uint8_t const>(packed), N, K, ptr<uint8_t>(codes));
  } else {
    (bits == 8 ? &unpack_b_u8_host : &unpack_b_u4b8_host)(ptr<uint8_t const>(packed), N, K, ptr<uint8_t>(codes));
  }
}

void quantize_fp8_rows(uintptr_t x, bool x_is_fp16, int64_t ldx, int M, int K, uintptr_t q, int64_t ldq,
                       uintptr_t scales, int device, uintptr_t stream) {
  DeviceGuard guard(device);
  DeviceGuard::check(quantize_fp8_per_token(ptr<void const>(x), x_is_fp16, ldx, M, K, ptr<uint8_t>(q), ldq,
                                            ptr<float>(scales), stream_of(stream)),
                     "quantize_fp8");
}

void gather_columns_rows(uintptr_t x, int element_bytes, int64_t ldx, int M, int K, uintptr_t perm, uintptr_t out,
                         int64_t ldo, int device, uintptr_t stream) {
  DeviceGuard guard(device);
  DeviceGuard::check(gather_columns(ptr<void const>(x), element_bytes, ldx, M, K, ptr<int64_t const>(perm),
                                    ptr<void>(out), ldo, stream_of(stream)),
                     "gather_columns");
}

void stream_read_probe(uintptr_t src, int64_t bytes, uintptr_t sink, int device, uintptr_t stream) {
  DeviceGuard guard(device);
  DeviceGuard::check(stream_read(ptr<void const>(src), bytes, ptr<uint32_t>(sink), stream_of(stream)), "stream_read");
}

/// The stream-K decomposition of a launch (kernel/stream_k.hpp), for tests: (grid, dp_tiles,
/// sk_tiles, chain, the sk_ctas + 1 range bounds, which ranges are helpers, and for each stream-K
/// tile the CTA of its last unit as the kernels find it from the first piece's CTA).
std::tuple<int, int, int, int, std::vector<uint32_t>, std::vector<int>, std::vector<int>> stream_k_ranges(
    int tiles_n, int tiles_m, int iters, int ctas, int min_sk_iters, int chain, int dp_slack) {
  StreamKDecomposition const d =
      StreamKDecomposition::make(tiles_n, tiles_m, iters, ctas, min_sk_iters, chain, dp_slack);
  if (d.grid == 0) {
    throw std::invalid_argument("stream_k_ranges: no decomposition");
  }
  std::vector<uint32_t> bounds;
  std::vector<int> helper;
  for (int c = 0; c <= d.sk_ctas; ++c) {
    bounds.push_back(c == d.sk_ctas ? d.sk_units() : d.sk_begin(c));  // sk_begin divides by sk_ctas
    if (c < d.sk_ctas) {
      helper.push_back(int((d.helpers[c / 32] >> (c % 32)) & 1u));
    }
  }
  std::vector<int> last;
  for (int t = 0; t < d.sk_tiles; ++t) {
    uint32_t const u0 = uint32_t(t) * uint32_t(iters);
    int first = 0;
    while (d.sk_begin(first + 1) <= u0) {
      ++first;
    }
    last.push_back(d.sk_owner(u0 + uint32_t(iters) - 1, first));
  }
  return {d.grid, d.dp_tiles, d.sk_tiles, d.chain, bounds, helper, last};
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "quantgemm native kernels (raw-pointer bindings; use the quantgemm package)";
  m.attr("cuda_architectures") = built_cuda_architectures();
  m.def("schedules", &schedules, nb::arg("family"));
  m.def("select", &pick_schedule, nb::arg("family"), nb::arg("M"), nb::arg("N"), nb::arg("K"));
  m.def("rules", &rules, nb::arg("family"));
  m.def("mm_mixed_input", &mm_mixed_input);
  m.def("mm_scaled", &mm_scaled);
  m.def("mm_block_scaled", &mm_block_scaled);
  m.def("prepack", &prepack);
  m.def("prepack_host", &prepack_host);
  m.def("unpack_host", &unpack_host);
  m.def("stream_read", &stream_read_probe);
  // the timeline region of a -DQUANTGEMM_TIMELINE build: (CTAs, records a CTA, uint64 a record, bytes)
  m.attr("TIMELINE_LAYOUT") = nb::make_tuple(quantgemm::kTimelineCtas, quantgemm::kTimelineRecords,
                                             quantgemm::kTimelineRecordWords, quantgemm::kTimelineRegionBytes);
  m.def("stream_k_ranges", &stream_k_ranges, nb::arg("tiles_n"), nb::arg("tiles_m"), nb::arg("iters"), nb::arg("ctas"),
        nb::arg("min_sk_iters"), nb::arg("chain"), nb::arg("dp_slack") = 0);
  m.def("quantize_fp8", &quantize_fp8_rows);
  m.def("gather_columns", &gather_columns_rows);
  m.def("block_scaled_splits", &quantgemm::block_scaled_splits, nb::arg("tiles"), nb::arg("K"), nb::arg("sms"));
}
