#include "harness/stats/random_stream.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kcert::stats {

namespace detail {
#define KCERT_RNG_DECLARE(isa)                                                                                  \
  namespace isa {                                                                                              \
  void words(std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups, std::uint32_t* out); \
  void normals(std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups, float* out);       \
  }
KCERT_RNG_DECLARE(generic)
KCERT_RNG_DECLARE(avx2)
KCERT_RNG_DECLARE(avx512)
#undef KCERT_RNG_DECLARE

namespace {
struct Code {
  const char* isa;
  decltype(&generic::words) words;
  decltype(&generic::normals) normals;
};
constexpr Code kGeneric{"generic", &generic::words, &generic::normals};
constexpr Code kAvx2{"avx2", &avx2::words, &avx2::normals};
constexpr Code kAvx512{"avx512", &avx512::words, &avx512::normals};

const Code& best() {
  static const Code& code = []() -> const Code& {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return kAvx512;
    if (__builtin_cpu_supports("avx2")) return kAvx2;
#endif
    return kGeneric;
  }();
  return code;
}

const Code& named(const char* isa) {
  const std::string_view want = isa;
  for (const Code* c : {&kGeneric, &kAvx2, &kAvx512}) {
    if (want == c->isa) return *c;
  }
  throw std::invalid_argument("random stream: no code for instruction set '" + std::string(want) + "'");
}
}  // namespace

void words_with(const char* isa, std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups,
                std::uint32_t* out) {
  named(isa).words(k0, k1, first, groups, out);
}
void normals_with(const char* isa, std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups,
                  float* out) {
  named(isa).normals(k0, k1, first, groups, out);
}
}  // namespace detail

namespace {
constexpr std::size_t kGroup = RandomStream::kGroup;

// Whole groups straight into out, the last partial one through a buffer; returns the groups used.
template <class T, class Fill>
std::uint64_t in_groups(T* out, std::size_t n, std::uint64_t first, Fill fill) {
  const std::uint64_t whole = n / kGroup;
  if (whole > 0) fill(first, whole, out);
  if (const std::size_t rest = n % kGroup; rest > 0) {
    std::array<T, kGroup> last;
    fill(first + whole, 1, last.data());
    std::copy(last.begin(), last.begin() + static_cast<std::ptrdiff_t>(rest), out + whole * kGroup);
    return whole + 1;
  }
  return whole;
}
}  // namespace

void RandomStream::normal(float* out, std::size_t n) {
  const auto& code = detail::best();
  group_ += in_groups(out, n, group_, [&](std::uint64_t first, std::uint64_t groups, float* to) {
    code.normals(k0_, k1_, first, groups, to);
  });
}

void RandomStream::uniform(float* out, std::size_t n) {
  const auto& code = detail::best();
  std::array<std::uint32_t, kGroup> w;
  std::size_t done = 0;
  for (; done < n; done += kGroup, ++group_) {
    code.words(k0_, k1_, group_, 1, w.data());
    const std::size_t take = std::min(kGroup, n - done);
    for (std::size_t i = 0; i < take; ++i) out[done + i] = static_cast<float>(w[i] >> 8) * 0x1p-24f;
  }
}

void RandomStream::below(std::uint64_t bound, std::int64_t* out, std::size_t n) {
  if (bound == 0 || bound > static_cast<std::uint64_t>(INT64_MAX)) {
    throw std::invalid_argument("random stream: below() needs a bound in [1, 2^63), got " + std::to_string(bound));
  }
  const auto& code = detail::best();
  std::array<std::uint32_t, kGroup> w;
  constexpr std::size_t kPerGroup = kGroup / 2;
  for (std::size_t done = 0; done < n; done += kPerGroup, ++group_) {
    code.words(k0_, k1_, group_, 1, w.data());
    const std::size_t take = std::min(kPerGroup, n - done);
    for (std::size_t m = 0; m < take; ++m) {
      const std::uint64_t x = w[2 * m] | (std::uint64_t{w[2 * m + 1]} << 32);
      __extension__ using uint128 = unsigned __int128;
      out[done + m] = static_cast<std::int64_t>((static_cast<uint128>(x) * bound) >> 64);
    }
  }
}

}  // namespace kcert::stats
