// The random stream's vector code, compiled once per instruction set: random_stream_generic.cpp,
// random_stream_avx2.cpp and random_stream_avx512.cpp define KCERT_RNG_ISA (the namespace) and
// KCERT_RNG_LANES (blocks computed side by side: 4, 8, 16) and include this file. Every copy
// computes the stream random_stream.hpp specifies, to the bit: the integer rounds are exact,
// and the floating-point steps are correctly rounded operations in the order written here,
// compiled with -ffp-contract=off (no fused multiply-add in one copy only). The lane count
// changes how many blocks one pass computes, never which value lands where.
#include <cstdint>
#include <cstring>

#include "harness/stats/philox.hpp"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kcert::stats::detail::KCERT_RNG_ISA {

namespace {

constexpr int W = KCERT_RNG_LANES;
constexpr int kBlocks = 16;  // Philox blocks per group (random_stream.hpp)
static_assert(kBlocks % W == 0, "a pass covers a whole number of lanes of a group");

typedef std::uint32_t u32v __attribute__((vector_size(4 * W)));
typedef std::int32_t i32v __attribute__((vector_size(4 * W)));
typedef float f32v __attribute__((vector_size(4 * W)));
typedef std::uint64_t u64v __attribute__((vector_size(4 * W)));  // the same bits as W/2 64-bit lanes

// The 64-bit products of the low halves of a's lanes with m (< 2^32): one pmuludq where the
// instruction set has it. GCC would otherwise multiply by the constant with shifts and adds
// (AVX2 has no 64-bit vector multiply), 1.7x slower end to end.
inline u64v mul_low_halves(u64v a, std::uint64_t m) {
  const u64v mv = u64v{} + m;
#if KCERT_RNG_LANES == 16 && defined(__AVX512F__)
  // The zero-masked form: GCC 12 warns that the plain one's undefined pass-through is unset.
  return (u64v)_mm512_maskz_mul_epu32(static_cast<__mmask8>(0xFF), (__m512i)a, (__m512i)mv);
#elif KCERT_RNG_LANES == 8 && defined(__AVX2__)
  return (u64v)_mm256_mul_epu32((__m256i)a, (__m256i)mv);
#elif KCERT_RNG_LANES == 4 && defined(__SSE2__)
  return (u64v)_mm_mul_epu32((__m128i)a, (__m128i)mv);
#else
  return (a & 0xFFFFFFFFull) * mv;
#endif
}

// hi and lo words of a * m per 32-bit lane.
inline void mulhilo(u32v a, std::uint32_t m, u32v& hi, u32v& lo) {
  const u64v a64 = (u64v)a;
  const u64v even = mul_low_halves(a64, m), odd = mul_low_halves(a64 >> 32, m);
  lo = (u32v)((even & 0xFFFFFFFFull) | (odd << 32));
  hi = (u32v)((even >> 32) | (odd & 0xFFFFFFFF00000000ull));
}

u32v lane_index() {
  u32v v{};
  for (int i = 0; i < W; ++i) v[i] = static_cast<std::uint32_t>(i);
  return v;
}

// Blocks n, n + 1, .., n + W - 1 (n a multiple of W, so the low word never carries).
inline void philox(std::uint64_t n, std::uint32_t k0, std::uint32_t k1, u32v (&c)[4]) {
  c[0] = static_cast<std::uint32_t>(n) + lane_index();
  c[1] = u32v{} + static_cast<std::uint32_t>(n >> 32);
  c[2] = u32v{};
  c[3] = u32v{};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    u32v hi0, lo0, hi1, lo1;
    mulhilo(c[0], kPhiloxM0, hi0, lo0);
    mulhilo(c[2], kPhiloxM1, hi1, lo1);
    const u32v next0 = hi1 ^ c[1] ^ k0, next2 = hi0 ^ c[3] ^ k1;
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
  }
}

inline f32v to_float(u32v v) { return __builtin_convertvector((i32v)v, f32v); }  // v < 2^24: exact

// The constants are written as the binary32 values they are (hex), so that another
// implementation (tests/stats/fixtures/generate_random_stream.py) can use the same ones.
// -2 ln u for u = ((a >> 9) + 1/2) 2^-23. u = m 2^e with m in [sqrt(1/2), sqrt(2)); ln m =
// 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, as 2s (1 + s^2/3 + s^4/5 + s^6/7 + s^8/9);
// e ln 2 with ln 2 split so that e * hi is exact (|e| <= 24).
inline f32v minus_two_ln(u32v a) {
  const f32v u = to_float(a >> 9) * 0x1p-23f + 0x1p-24f;
  const u32v bits = (u32v)u;
  i32v e = (i32v)(bits >> 23) - 127;
  f32v m = (f32v)((bits & 0x7FFFFFu) | 0x3F800000u);
  const i32v above = m > 0x1.6a09e6p+0f;
  m = above ? m * 0.5f : m;
  e = above ? e + 1 : e;
  const f32v s = (m - 1.0f) / (m + 1.0f);
  const f32v s2 = s * s;
  const f32v p = 0x1.555556p-2f + s2 * (0x1.99999ap-3f + s2 * (0x1.24924ap-3f + s2 * 0x1.c71c72p-4f));
  const f32v ln_m = (s + s) + (s + s) * (s2 * p);
  const f32v fe = __builtin_convertvector(e, f32v);
  return -2.0f * (fe * 0x1.62e4p-1f + (ln_m + fe * 0x1.7f7d1cp-20f));
}

inline f32v square_root(f32v x) {
  f32v r;
  for (int i = 0; i < W; ++i) r[i] = __builtin_sqrtf(x[i]);  // -fno-math-errno: one vsqrtps
  return r;
}

// cos and sin of the angle b / 2^32 turns (to 25 bits): quarter turns from the top two bits,
// Taylor polynomials on the rest of the quarter turn, x in [0, pi/2).
inline void cos_sin(u32v b, f32v& c, f32v& s) {
  const u32v quarter = b >> 30;
  const f32v x = to_float((b >> 7) & 0x7FFFFFu) * 0x1p-23f * 0x1.921fb6p+0f;
  const f32v x2 = x * x;
  const f32v sn =
      x * (1.0f + x2 * (-0x1.555556p-3f +
                        x2 * (0x1.111112p-7f +
                              x2 * (-0x1.a01a02p-13f + x2 * (0x1.71de3ap-19f + x2 * (-0x1.ae6456p-26f + x2 * 0x1.612462p-33f))))));
  const f32v cs =
      1.0f + x2 * (-0.5f + x2 * (0x1.555556p-5f +
                                 x2 * (-0x1.6c16c2p-10f +
                                       x2 * (0x1.a01a02p-16f +
                                             x2 * (-0x1.27e4fcp-22f + x2 * (0x1.1eed8ep-29f + x2 * -0x1.93974ap-37f))))));
  const i32v odd = (i32v)((quarter & 1u) != 0u), half = (i32v)((quarter & 2u) != 0u);
  const f32v c1 = odd ? -sn : cs, s1 = odd ? cs : sn;
  c = half ? -c1 : c1;
  s = half ? -s1 : s1;
}

template <class V>
inline void store(V v, void* to) {
  std::memcpy(to, &v, sizeof v);
}

}  // namespace

void words(std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups, std::uint32_t* out) {
  for (std::uint64_t g = 0; g < groups; ++g, out += 4 * kBlocks) {
    for (int h = 0; h < kBlocks; h += W) {
      u32v c[4];
      philox(kBlocks * (first + g) + static_cast<std::uint64_t>(h), k0, k1, c);
      for (int j = 0; j < 4; ++j) store(c[j], out + kBlocks * j + h);
    }
  }
}

void normals(std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t groups, float* out) {
  for (std::uint64_t g = 0; g < groups; ++g, out += 4 * kBlocks) {
    for (int h = 0; h < kBlocks; h += W) {
      u32v c[4];
      philox(kBlocks * (first + g) + static_cast<std::uint64_t>(h), k0, k1, c);
      const f32v r0 = square_root(minus_two_ln(c[0])), r1 = square_root(minus_two_ln(c[2]));
      f32v cos0, sin0, cos1, sin1;
      cos_sin(c[1], cos0, sin0);
      cos_sin(c[3], cos1, sin1);
      store(r0 * cos0, out + h);
      store(r0 * sin0, out + kBlocks + h);
      store(r1 * cos1, out + 2 * kBlocks + h);
      store(r1 * sin1, out + 3 * kBlocks + h);
    }
  }
}

}  // namespace kcert::stats::detail::KCERT_RNG_ISA
