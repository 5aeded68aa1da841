#include "kcert_catch.hpp"

#include <algorithm>
#include <bit>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/stats/philox.hpp"
#include "harness/stats/random_stream.hpp"
#include "reference.hpp"

using kcert::stats::RandomStream;

namespace {

std::uint64_t seed_of(const nlohmann::json& s) { return std::stoull(s.at("seed").get<std::string>()); }

// The instruction sets whose code this CPU can run; generic always.
std::vector<const char*> runnable_isas() {
  std::vector<const char*> out{"generic"};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) out.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) out.push_back("avx512");
#endif
  return out;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float x : v) out.push_back(std::bit_cast<std::uint32_t>(x));
  return out;
}

std::vector<std::uint32_t> json_u32(const nlohmann::json& a) { return a.get<std::vector<std::uint32_t>>(); }

}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[random]") {
  using kcert::stats::philox4x32_10;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == std::array<std::uint32_t, 4>{0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8});
  CHECK(philox4x32_10({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {0xFFFFFFFF, 0xFFFFFFFF}) ==
        std::array<std::uint32_t, 4>{0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD});
  CHECK(philox4x32_10({0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344}, {0xA4093822, 0x299F31D0}) ==
        std::array<std::uint32_t, 4>{0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1});
}

TEST_CASE("every instruction set's code gives the NumPy implementation's words and normals, bit for bit", "[random]") {
  const auto& ref = kcert::test::random_stream_reference();
  for (const char* isa : runnable_isas()) {
    for (const auto& s : ref.at("streams")) {
      const auto seed = seed_of(s);
      INFO("isa " << isa << ", seed " << seed);
      const auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
      std::vector<std::uint32_t> w(128);
      kcert::stats::detail::words_with(isa, k0, k1, 0, 2, w.data());
      CHECK(w == json_u32(s.at("words_g0")));
      kcert::stats::detail::words_with(isa, k0, k1, (1ull << 28) + 3, 2, w.data());  // counter's high word set
      CHECK(w == json_u32(s.at("words_far")));
      std::vector<float> z(128);
      kcert::stats::detail::normals_with(isa, k0, k1, 0, 2, z.data());
      CHECK(bits_of(z) == json_u32(s.at("normal_bits_g0")));
      kcert::stats::detail::normals_with(isa, k0, k1, (1ull << 28) + 3, 2, z.data());
      CHECK(bits_of(z) == json_u32(s.at("normal_bits_far")));
    }
  }
}

TEST_CASE("the scalar Philox is the vector code's block function", "[random]") {
  // Block n = 16 g + i is word j at position 16 j + i of group g (random_stream.hpp).
  const std::uint64_t g = 0x123456789ull;
  std::vector<std::uint32_t> w(64);
  for (const char* isa : runnable_isas()) {
    kcert::stats::detail::words_with(isa, 0xDEADBEEF, 0x01234567, g, 1, w.data());
    for (std::uint64_t i = 0; i < 16; ++i) {
      const std::uint64_t n = 16 * g + i;
      const auto block = kcert::stats::philox4x32_10(
          {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32), 0, 0}, {0xDEADBEEF, 0x01234567});
      for (int j = 0; j < 4; ++j) CHECK(w[16 * j + i] == block[j]);
    }
  }
}

TEST_CASE("draws take whole groups: a stream's values depend only on the sizes of the draws before", "[random]") {
  const auto& s = kcert::test::random_stream_reference().at("streams").at(1);
  const auto want = json_u32(s.at("normal_bits_g0"));
  RandomStream stream(seed_of(s));
  std::vector<float> a(10), b(70);
  stream.normal(a.data(), a.size());
  CHECK(stream.position() == 1);
  stream.normal(b.data(), b.size());  // starts at group 1: values 64.. of the stream
  CHECK(stream.position() == 3);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::bit_cast<std::uint32_t>(a[i]) == want[i]);
  for (std::size_t i = 0; i < 64; ++i) CHECK(std::bit_cast<std::uint32_t>(b[i]) == want[64 + i]);

  RandomStream whole(seed_of(s));
  std::vector<float> all(128);
  whole.normal(all.data(), all.size());
  CHECK(bits_of(all) == want);

  RandomStream u(seed_of(s));
  std::vector<float> uni(64);
  u.uniform(uni.data(), uni.size());
  CHECK(bits_of(uni) == json_u32(s.at("uniform_bits_g0")));
  CHECK(*std::max_element(uni.begin(), uni.end()) < 1.0f);
  CHECK(*std::min_element(uni.begin(), uni.end()) >= 0.0f);

  RandomStream i1(seed_of(s));
  std::vector<std::int64_t> ints(40);
  i1.below(1000, ints.data(), ints.size());
  CHECK(ints == s.at("below_1000_g0").get<std::vector<std::int64_t>>());
  CHECK(i1.position() == 2);  // 32 values per group
  RandomStream i2(seed_of(s));
  std::vector<std::int64_t> wide(8);
  i2.below(1ull << 40, wide.data(), wide.size());
  CHECK(wide == s.at("below_2pow40_g0").get<std::vector<std::int64_t>>());
  CHECK_THROWS_AS(i2.below(0, wide.data(), 1), std::invalid_argument);
}

TEST_CASE("2^20 normals: the bits SciPy judged, and its Kolmogorov-Smirnov statistic recomputed", "[random]") {
  const auto& sample = kcert::test::random_stream_reference().at("sample");
  const auto groups = sample.at("groups").get<std::size_t>();
  std::vector<float> z(groups * RandomStream::kGroup);
  RandomStream stream(std::stoull(sample.at("seed").get<std::string>()));
  stream.normal(z.data(), z.size());
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (float x : z) h = (h ^ std::bit_cast<std::uint32_t>(x)) * 0x100000001B3ull;
  CHECK(std::to_string(h) == sample.at("normal_fnv1a").get<std::string>());

  std::vector<double> sorted(z.begin(), z.end());
  std::sort(sorted.begin(), sorted.end());
  const boost::math::normal_distribution<double> n01;
  double d = 0;
  const double n = static_cast<double>(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const double f = boost::math::cdf(n01, sorted[i]);
    d = std::max({d, static_cast<double>(i + 1) / n - f, f - static_cast<double>(i) / n});
  }
  CHECK(d == Approx(sample.at("normal_ks_statistic").get<double>()).epsilon(1e-9));
  // SciPy's p-value for that statistic: a normal law is not rejected.
  CHECK(sample.at("normal_ks_pvalue").get<double>() > 0.01);
  CHECK(sample.at("uniform_ks_pvalue").get<double>() > 0.01);
  CHECK(std::abs(sample.at("normal_excess_kurtosis").get<double>()) < 5 * std::sqrt(24.0 / n));
  // Tails: u >= 2^-24 bounds every value by sqrt(-2 ln 2^-24) = 5.77.
  CHECK(std::abs(sorted.front()) < 5.78);
  CHECK(std::abs(sorted.back()) < 5.78);
}
