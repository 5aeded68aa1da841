#pragma once
// Counter-based seeding: every random stream is derived from (seed, index) alone, so a
// replicate's or a bootstrap resample's draws never depend on batch size, thread count,
// shard or evaluation order (method.md §0).
#include <cstdint>

namespace kcert::stats {

// One step of Steele, Lea & Flood's SplitMix64 finalizer: a bijective 64-bit mix.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The seed of stream `index` under `seed` (e.g. replicate r of a case, resample b).
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t index) {
  return splitmix64_mix(splitmix64_mix(seed) ^ splitmix64_mix(index + 0x632be59bd9b4e019ULL));
}

// SplitMix64 generator: small state, full period 2^64, good enough for resampling.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
  constexpr std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform index in [0, n) by Lemire's multiply-shift; the bias is below n/2^64.
  std::uint64_t below(std::uint64_t n) {
    __extension__ using uint128 = unsigned __int128;  // GCC/Clang; -Wpedantic-clean
    return static_cast<std::uint64_t>((static_cast<uint128>(next()) * n) >> 64);
  }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace kcert::stats
