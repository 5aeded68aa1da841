#pragma once
// The random stream every kernel input is drawn from: the same seed gives the same bits on
// every machine, instruction set, thread count and LibTorch release.
//
// ATen's CPU generator does not promise that: its fp32 normal sampler has one code path for
// CPUs with AVX2 and another without (measured: the same seed gives other values under
// ATEN_CPU_CAPABILITY=default), and it costs 4.4-5 ns per value on one core, a quarter of
// the full suite's wall time (issue 17). This stream costs 0.7 ns per value with AVX-512 and
// 1.7 ns with AVX2 on the development machine (bench/bench_random_stream.cpp).
//
// The stream, exactly (docs/testcases.md repeats it):
// - The key is the seed: k = (seed mod 2^32, seed div 2^32).
// - Values come in groups of 64. Group g is the 16 Philox4x32-10 blocks with counters
//   (n mod 2^32, n div 2^32, 0, 0), n = 16g + i for i = 0..15; word 16j + i of the group is
//   word j of block i. A draw starts at the stream's next group and takes whole groups, so
//   a draw of n values advances the stream by ceil(n / 64) groups.
// - uniform: word w gives (w >> 8) * 2^-24, in [0, 1) on a 2^-24 grid.
// - normal: Box-Muller on the word pairs (w0, w1) and (w2, w3) of each block. For the pair
//   (a, b): u = ((a >> 9) + 1/2) * 2^-23 in (0, 1), r = sqrt(-2 ln u); b is a fraction of a
//   turn, b >> 30 quarter turns plus ((b >> 7) mod 2^23) * 2^-23 of a quarter turn, the
//   angle t. Word 16j + i of the group is r cos t (j even) or r sin t (j odd) of block i's
//   pair j / 2. |value| < 5.77 (u >= 2^-24), as with ATen's sampler.
// - ln, cos and sin are kcert's own polynomials (random_stream_impl.hpp) evaluated in fp32
//   with correctly rounded operations only (+ - * / sqrt and exact int-to-float
//   conversions), in a fixed order and without fused multiply-adds, so their results are the
//   same bits wherever IEEE-754 binary32 arithmetic is. Relative error of ln under 2e-7,
//   absolute error of cos and sin under 2e-7.
// - below(b): word pair (w_2m, w_2m+1) of the group's words gives x = w_2m + 2^32 w_2m+1 and
//   the value floor(x * b / 2^64), in [0, b); no rejection, so each value's probability is
//   off by less than b / 2^64.
#include <cstddef>
#include <cstdint>

namespace kcert::stats {

// The stream's name and version, recorded with every result: inputs drawn under another
// name are other inputs.
inline constexpr const char* kRandomStreamName = "philox4x32-10+box-muller-f32/1";

class RandomStream {
 public:
  static constexpr std::size_t kGroup = 64;  // values per group

  explicit RandomStream(std::uint64_t seed)
      : k0_(static_cast<std::uint32_t>(seed)), k1_(static_cast<std::uint32_t>(seed >> 32)) {}

  void normal(float* out, std::size_t n);
  void uniform(float* out, std::size_t n);
  void below(std::uint64_t bound, std::int64_t* out, std::size_t n);

  // The next group a draw starts at.
  std::uint64_t position() const { return group_; }

 private:
  std::uint32_t k0_, k1_;
  std::uint64_t group_ = 0;
};

namespace detail {
// The 64 words (normal: values) of groups first .. first + groups - 1 under key (k0, k1),
// with one instruction set's code, for the tests that hold every copy to the same bits.
void words_with(const char* isa, std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups,
                std::uint32_t* out);
void normals_with(const char* isa, std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups,
                  float* out);
}  // namespace detail

}  // namespace kcert::stats
