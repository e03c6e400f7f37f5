// quantgemm from C++: quantize a random weight to u4b8 with group scales, prepack it on the GPU, run
// the mixed-input GEMM through the heuristic; then an FP8 W8A8 GEMM with per-token and per-channel
// scales; check both against host references.
// Exit status 0 when every element is within the tolerance, 1 when not, 2 on a CUDA or launch error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "quantgemm/launch/dispatch.hpp"
#include "quantgemm/launch/prepack_b.hpp"

namespace {

// bf16 <-> float on the host (round to nearest even)
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

bool check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  }
  return e == cudaSuccess;
}

// an e4m3 byte as a float (sign, 4 exponent bits biased by 7, 3 mantissa bits; 0x7F/0xFF are NaN)
float from_e4m3(uint8_t v) {
  int const e = (v >> 3) & 15, m = v & 7;
  float const x = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.f + m / 8.f, e - 7);
  return (v & 0x80) ? -x : x;
}

/// out = sa[m] * sb[n] * (a @ b^T) with a [M, K] and b [N, K] FP8 e4m3 (random finite bytes),
/// fp32 scales per token and per channel, bf16 out; 0 when within the tolerance of tests/.
int run_scaled_mm() {
  int const M = 16, N = 4096, K = 4096;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> unit(0.5f, 1.5f);
  auto random_e4m3 = [&] {
    uint8_t v = uint8_t(rng() & 0xFF);
    return (v & 0x7F) == 0x7F ? uint8_t(v ^ 1) : v;
  };
  std::vector<uint8_t> a(size_t(M) * K), b(size_t(N) * K);
  std::vector<float> sa(M), sb(N);
  for (auto& x : a) x = random_e4m3();
  for (auto& x : b) x = random_e4m3();
  for (auto& x : sa) x = unit(rng) * 1e-3f;
  for (auto& x : sb) x = unit(rng) * 1e-3f;

  uint8_t *d_a = nullptr, *d_b = nullptr;
  float *d_sa = nullptr, *d_sb = nullptr;
  uint16_t* d_out = nullptr;
  bool ok = check(cudaMalloc(&d_a, a.size()), "cudaMalloc") && check(cudaMalloc(&d_b, b.size()), "cudaMalloc") &&
            check(cudaMalloc(&d_sa, M * 4), "cudaMalloc") && check(cudaMalloc(&d_sb, N * 4), "cudaMalloc") &&
            check(cudaMalloc(&d_out, size_t(M) * N * 2), "cudaMalloc") &&
            check(cudaMemcpy(d_a, a.data(), a.size(), cudaMemcpyHostToDevice), "copy") &&
            check(cudaMemcpy(d_b, b.data(), b.size(), cudaMemcpyHostToDevice), "copy") &&
            check(cudaMemcpy(d_sa, sa.data(), M * 4, cudaMemcpyHostToDevice), "copy") &&
            check(cudaMemcpy(d_sb, sb.data(), N * 4, cudaMemcpyHostToDevice), "copy");
  if (!ok) {
    return 2;
  }
  quantgemm::ScaledMmArgs args;
  args.a = d_a;
  args.lda = K;
  args.b = d_b;
  args.ldb = K;
  args.epilogue.scale_a = d_sa;
  args.epilogue.scale_a_per_token = true;
  args.epilogue.scale_b = d_sb;
  args.epilogue.scale_b_per_channel = true;
  args.out = d_out;
  args.ldo = N;
  args.M = M;
  args.N = N;
  args.K = K;
  // "fp8": accumulators promoted into fp32 every 128 of K; small M splits K (stream-K scratch)
  quantgemm::LaunchResult r = quantgemm::scaled_mm("fp8", nullptr, args);
  if (r.status == quantgemm::Status::kWorkspaceTooSmall) {
    ok = check(cudaMalloc(&args.workspace, r.workspace_bytes_needed), "cudaMalloc");
    args.workspace_bytes = r.workspace_bytes_needed;
    r = quantgemm::scaled_mm("fp8", nullptr, args);
  }
  if (!ok || r.status != quantgemm::Status::kSuccess) {
    std::fprintf(stderr, "scaled_mm: status %d (%s)\n", int(r.status), cudaGetErrorString(r.cuda));
    return 2;
  }
  std::vector<uint16_t> out(size_t(M) * N);
  if (!check(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), "copy")) {
    return 2;
  }
  // tolerance as tests/ for FP8 promoted every 128 of K (python/quantgemm/testing.py)
  float amax = 0.f, bmax = 0.f, sa_max = 0.f, sb_max = 0.f;
  for (auto x : a) amax = std::fmax(amax, std::fabs(from_e4m3(x)));
  for (auto x : b) bmax = std::fmax(bmax, std::fabs(from_e4m3(x)));
  for (auto x : sa) sa_max = std::fmax(sa_max, x);
  for (auto x : sb) sb_max = std::fmax(sb_max, x);
  double const atol = std::ldexp(1.0, -13) * 128 * std::sqrt(K / 128.0) * amax * sa_max * bmax * sb_max;
  int bad = 0;
  double worst = 0;
  for (int n = 0; n < N; ++n) {
    for (int m = 0; m < M; ++m) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        acc += double(from_e4m3(a[size_t(m) * K + k])) * from_e4m3(b[size_t(n) * K + k]);
      }
      double const ref = double(sa[m]) * (double(sb[n]) * acc);
      double const got = from_bf16(out[size_t(m) * N + n]);
      double const limit = 2 * std::ldexp(1.0, -8) * std::fabs(ref) + atol;
      worst = std::fmax(worst, std::fabs(got - ref) / limit);
      bad += !(std::fabs(got - ref) <= limit);
    }
  }
  std::printf("%d x %d x %d fp8 e4m3, per-token x per-channel scales: %d of %d elements out of tolerance "
              "(worst error %.2f of the limit)\n", M, N, K, bad, M * N, worst);
  return bad == 0 ? 0 : 1;
}

/// The u4b8 mixed-input GEMM; 0 when within the tolerance of tests/.
int run_mixed_input() {
  int const M = 16, N = 4096, K = 4096, group = 128, groups = K / group;

  // a Gaussian weight, quantized symmetric round-to-nearest: codes q in 0..15, value (q - 8) * s
  std::mt19937 rng(0);
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::vector<uint8_t> codes(size_t(N) * K);
  std::vector<uint16_t> scales(size_t(groups) * N);  // [groups, N] bf16
  for (int n = 0; n < N; ++n) {
    for (int g = 0; g < groups; ++g) {
      float w[128];
      float amax = 0.f;
      for (int i = 0; i < group; ++i) {
        w[i] = gauss(rng) / 64.f;
        amax = std::fmax(amax, std::fabs(w[i]));
      }
      uint16_t const s = to_bf16(amax / 7.5f);
      scales[size_t(g) * N + n] = s;
      for (int i = 0; i < group; ++i) {
        float const q = std::nearbyint(w[i] / from_bf16(s)) + 8.f;
        codes[size_t(n) * K + g * group + i] = uint8_t(std::fmin(15.f, std::fmax(0.f, q)));
      }
    }
  }
  std::vector<uint16_t> a(size_t(M) * K);
  for (auto& x : a) {
    x = to_bf16(gauss(rng));
  }

  uint8_t *d_codes = nullptr, *d_packed = nullptr;
  uint16_t *d_a = nullptr, *d_scales = nullptr, *d_out = nullptr;
  bool ok = check(cudaMalloc(&d_codes, codes.size()), "cudaMalloc") &&
            check(cudaMalloc(&d_packed, codes.size() / 2), "cudaMalloc") &&
            check(cudaMalloc(&d_a, a.size() * 2), "cudaMalloc") &&
            check(cudaMalloc(&d_scales, scales.size() * 2), "cudaMalloc") &&
            check(cudaMalloc(&d_out, size_t(M) * N * 2), "cudaMalloc") &&
            check(cudaMemcpy(d_codes, codes.data(), codes.size(), cudaMemcpyHostToDevice), "copy") &&
            check(cudaMemcpy(d_a, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "copy") &&
            check(cudaMemcpy(d_scales, scales.data(), scales.size() * 2, cudaMemcpyHostToDevice), "copy") &&
            check(quantgemm::prepack_b_u4b8(d_codes, N, K, d_packed, nullptr), "prepack_b_u4b8");
  if (!ok) {
    return 2;
  }

  quantgemm::MixedInputMmArgs args;
  args.a = d_a;
  args.lda = K;
  args.b = d_packed;
  args.group_scales = d_scales;
  args.out = d_out;
  args.ldo = N;
  args.M = M;
  args.N = N;
  args.K = K;
  args.group_size = group;
  // the first call reports the stream-K scratch it needs; the counters must start at zero
  quantgemm::LaunchResult r = quantgemm::mixed_input_mm("u4b8_bf16", nullptr, args);
  if (r.status == quantgemm::Status::kWorkspaceTooSmall) {
    ok = check(cudaMalloc(&args.workspace, r.workspace_bytes_needed), "cudaMalloc") &&
         check(cudaMalloc(&args.counters, r.counters_needed * sizeof(int)), "cudaMalloc") &&
         check(cudaMemset(args.counters, 0, r.counters_needed * sizeof(int)), "cudaMemset");
    args.workspace_bytes = r.workspace_bytes_needed;
    args.counters_len = r.counters_needed;
    r = quantgemm::mixed_input_mm("u4b8_bf16", nullptr, args);
  }
  if (!ok || r.status != quantgemm::Status::kSuccess) {
    std::fprintf(stderr, "mixed_input_mm: status %d (%s)\n", int(r.status), cudaGetErrorString(r.cuda));
    return 2;
  }
  std::vector<uint16_t> out(size_t(M) * N);
  if (!check(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), "copy")) {
    return 2;
  }

  // host reference: w = bf16((q - 8) * s), fp64 sums; tolerance as tests/ (docs/testing.md)
  int bad = 0;
  double worst = 0;
  for (int n = 0; n < N; ++n) {
    std::vector<float> w(K);
    float wmax = 0.f;
    for (int k = 0; k < K; ++k) {
      float const s = from_bf16(scales[size_t(k / group) * N + n]);
      w[k] = from_bf16(to_bf16((float(codes[size_t(n) * K + k]) - 8.f) * s));
      wmax = std::fmax(wmax, std::fabs(w[k]));
    }
    for (int m = 0; m < M; ++m) {
      double ref = 0, amax = 0;
      for (int k = 0; k < K; ++k) {
        double const x = from_bf16(a[size_t(m) * K + k]);
        ref += x * w[k];
        amax = std::fmax(amax, std::fabs(x));
      }
      double const got = from_bf16(out[size_t(m) * N + n]);
      double const limit = 2 * std::ldexp(1.0, -8) * std::fabs(ref) + std::ldexp(1.0, -16) * std::sqrt(double(K)) * amax * wmax;
      worst = std::fmax(worst, std::fabs(got - ref) / limit);
      bad += !(std::fabs(got - ref) <= limit);
    }
  }
  std::printf("%d x %d x %d u4b8 g%d: %d of %d elements out of tolerance (worst error %.2f of the limit)\n", M, N, K,
              group, bad, M * N, worst);
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main() {
  std::printf("quantgemm kernels built for %s\n", quantgemm::built_cuda_architectures());
  int const mixed = run_mixed_input();
  int const w8a8 = run_scaled_mm();
  return mixed > w8a8 ? mixed : w8a8;
}
