#pragma once
// The body of the observation sweep, compiled once per instruction set
// (observation_sweep_{generic,avx2,avx512}.cpp define KCERT_SWEEP_ISA and include this file;
// observation_sweep.cpp picks one at run time). Every copy computes the same bits: sums run
// in element order within each bucket, vector lanes run across buckets, and the files are
// compiled with -ffp-contract=off so that no copy fuses a multiply-add the others round
// twice. Only builtins and internal-linkage code here: an inline library function emitted
// from the AVX-512 copy could otherwise be the one the linker keeps for the whole program,
// and crash a CPU without AVX-512. Scratch memory comes from the caller for that reason.
#include <immintrin.h>

#include <cstdint>

#include "harness/numerics/observation_sweep.hpp"

namespace kcert::numerics::detail::KCERT_SWEEP_ISA {

namespace {

inline double max_of(double a, double b) { return a < b ? b : a; }  // std::max's order
inline double sign_of(double v) { return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0); }

// W values widen to fp64 exactly; reading them as stored saves the sweep the fp64 copies of
// ref and prod (issue 17: 44-60 bytes per element, most of the memory bandwidth).
inline double load(const double* p) { return *p; }
inline double load(const float* p) { return static_cast<double>(*p); }
inline double load(const Bf16* p) {
  const std::uint32_t bits = static_cast<std::uint32_t>(p->bits) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return static_cast<double>(f);
}

// One row of a channel-periodic layout: every statistic is per bucket g, so the loop has
// no cross-lane dependency and vectorizes. The __restrict parameters tell GCC that no
// output aliases an input (it gives up on run-time alias checks over nine arrays), and
// running maxima replace scalar reductions that would block vectorization. No accumulator
// watches for non-finite inputs: the sums show them (sweep_typed). kSideOracles: errors
// against per-side oracles (a selecting family's near ties); without them the loop reads
// one oracle array, as every other family needs (two more loads per element cost the sweep
// 3-8 %, measured).
template <bool kSideOracles, class W>
void accumulate_row(const W* __restrict r, const W* __restrict p, const double* __restrict q,
                    const double* __restrict qr, const double* __restrict qp,
                    double* __restrict sum_d, double* __restrict sum_m, double* __restrict sum_a,
                    double* __restrict sum_er, double* __restrict sum_emr, double* __restrict sum_ep,
                    double* __restrict sum_emp,
                    double* __restrict mp, double* __restrict mr, double* __restrict mk,
                    double* __restrict ssp, double* __restrict ssr, double* __restrict vio, double rtol, double atol,
                    std::int64_t buckets) {
  for (std::int64_t g = 0; g < buckets; ++g) {
    const double rv = load(r + g), pv = load(p + g), qv = q[g];
    const double qrv = kSideOracles ? qr[g] : qv, qpv = kSideOracles ? qp[g] : qv;
    const double d = pv - rv;
    sum_d[g] += d;
    sum_m[g] += rv > 0.0 ? d : (rv < 0.0 ? -d : 0.0);
    const double aq = __builtin_fabs(qv);
    sum_a[g] += aq;
    // Bias attribution: each side's signed error against the primary oracle, so that
    // e_p - e_r is prod - ref exactly (the side oracles of a selecting family's near ties
    // pull each side's error towards 0 by construction; they serve the maxima only).
    const double ar = rv - qv, ap = pv - qv;
    sum_er[g] += ar;
    sum_emr[g] += rv > 0.0 ? ar : (rv < 0.0 ? -ar : 0.0);
    sum_ep[g] += ap;
    sum_emp[g] += rv > 0.0 ? ap : (rv < 0.0 ? -ap : 0.0);
    const double ep = __builtin_fabs(pv - qpv), er = __builtin_fabs(rv - qrv);
    mp[g] = mp[g] < ep ? ep : mp[g];
    mr[g] = mr[g] < er ? er : mr[g];
    mk[g] = mk[g] < aq ? aq : mk[g];
    ssp[g] += (pv - qpv) * (pv - qpv);
    ssr[g] += (rv - qrv) * (rv - qrv);
    vio[g] += __builtin_fabs(d) > atol + rtol * __builtin_fabs(rv) ? 1.0 : 0.0;
  }
}

// Four consecutive rows of the same buckets in one pass: each accumulator is loaded and
// stored once per four elements instead of once per element (ten stores per element were
// the loop's bottleneck). Each bucket still adds its rows in order t, t+1, t+2, t+3, so the
// bits are those of accumulate_row. One core, 512 x 4096 bf16: AVX2 copy 2.63-2.75 -> 2.19-2.27
// ns per element, AVX-512 1.77-1.80 -> 1.70-1.72 (interleaved, two rounds).
template <bool kSideOracles, class W>
void accumulate_rows4(const W* __restrict r, const W* __restrict p, const double* __restrict q,
                      const double* __restrict qr, const double* __restrict qp, std::int64_t ld,
                      double* __restrict sum_d, double* __restrict sum_m, double* __restrict sum_a,
                    double* __restrict sum_er, double* __restrict sum_emr, double* __restrict sum_ep,
                    double* __restrict sum_emp,
                      double* __restrict mp, double* __restrict mr, double* __restrict mk,
                      double* __restrict ssp, double* __restrict ssr, double* __restrict vio, double rtol,
                      double atol, std::int64_t buckets) {
  for (std::int64_t g = 0; g < buckets; ++g) {
    double a_d = sum_d[g], a_m = sum_m[g], a_a = sum_a[g], a_er = sum_er[g], a_emr = sum_emr[g], a_ep = sum_ep[g],
           a_emp = sum_emp[g], a_mp = mp[g], a_mr = mr[g], a_mk = mk[g], a_sp = ssp[g], a_sr = ssr[g], a_v = vio[g];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const std::int64_t i = g + t * ld;  // ld: the row stride (all buckets)
      const double rv = load(r + i), pv = load(p + i), qv = q[i];
      const double qrv = kSideOracles ? qr[i] : qv, qpv = kSideOracles ? qp[i] : qv;
      const double d = pv - rv;
      a_d += d;
      a_m += rv > 0.0 ? d : (rv < 0.0 ? -d : 0.0);
      const double aq = __builtin_fabs(qv);
      a_a += aq;
      const double ar = rv - qv, ap = pv - qv;
      a_er += ar;
      a_emr += rv > 0.0 ? ar : (rv < 0.0 ? -ar : 0.0);
      a_ep += ap;
      a_emp += rv > 0.0 ? ap : (rv < 0.0 ? -ap : 0.0);
      const double ep = __builtin_fabs(pv - qpv), er = __builtin_fabs(rv - qrv);
      a_mp = a_mp < ep ? ep : a_mp;
      a_mr = a_mr < er ? er : a_mr;
      a_mk = a_mk < aq ? aq : a_mk;
      a_sp += (pv - qpv) * (pv - qpv);
      a_sr += (rv - qrv) * (rv - qrv);
      a_v += __builtin_fabs(d) > atol + rtol * __builtin_fabs(rv) ? 1.0 : 0.0;
    }
    sum_d[g] = a_d;
    sum_m[g] = a_m;
    sum_a[g] = a_a;
    sum_er[g] = a_er;
    sum_emr[g] = a_emr;
    sum_ep[g] = a_ep;
    sum_emp[g] = a_emp;
    mp[g] = a_mp;
    mr[g] = a_mr;
    mk[g] = a_mk;
    ssp[g] = a_sp;
    ssr[g] = a_sr;
    vio[g] = a_v;
  }
}

// accumulate_rows4 written with GCC's vector types, KCERT_SWEEP_LANES doubles per vector
// (8 for the AVX-512 copy, 4 for AVX2, 2 for the baseline). GCC vectorized the plain loop
// at the width of its narrowest type: 32 bf16 lanes, so four vectors per accumulator and
// 36 live accumulator registers, and a third of the AVX-512 loop's instructions were
// spills to the stack. Here one register holds each accumulator. Every lane does exactly
// the scalar loop's operations in its order (and -ffp-contract=off reaches vector code
// too), so the bits are those of accumulate_rows4; the buckets past the last full vector
// go to it.
constexpr int kLanes = KCERT_SWEEP_LANES;
typedef double VecD __attribute__((vector_size(kLanes * 8)));
typedef long long VecL __attribute__((vector_size(kLanes * 8)));
typedef float VecF __attribute__((vector_size(kLanes * 4)));

inline VecD vload(const double* p) {
  VecD v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
// The bf16 and fp32 loads, and the running maximum, in the instructions each copy has: GCC
// lowered their generic forms badly (the float-to-double conversion of the AVX2 copy
// through the stack, the bf16 widening in 128-bit pieces, the maximum as a compare and a
// masked move).
#if KCERT_SWEEP_LANES == 8
inline VecD widen(__m256 f) { return __builtin_convertvector((VecF)f, VecD); }
inline VecD vload(const float* p) { return widen(_mm256_loadu_ps(p)); }
inline VecD vload(const Bf16* p) {
  const __m256i words = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return widen(_mm256_castsi256_ps(_mm256_slli_epi32(words, 16)));
}
#elif KCERT_SWEEP_LANES == 4
inline VecD widen(__m128 f) { return _mm256_cvtps_pd(f); }
inline VecD vload(const float* p) { return widen(_mm_loadu_ps(p)); }
inline VecD vload(const Bf16* p) {
  const __m128i words = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return widen(_mm_castsi128_ps(_mm_slli_epi32(words, 16)));
}
#else
inline VecD widen(__m128 f) { return _mm_cvtps_pd(f); }  // the low two
inline VecD vload(const float* p) { return widen(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))); }
inline VecD vload(const Bf16* p) {
  // Each 16-bit word into the high half of a 32-bit lane: the float with those top bits.
  std::int32_t two;
  __builtin_memcpy(&two, p, sizeof two);
  return widen(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_cvtsi32_si128(two))));
}
#endif
// a < b ? b : a, as the scalar loop's running maxima: MAXPD(b, a) returns its first
// operand when it is the greater and its second otherwise (a NaN included).
inline VecD vmax_keep(VecD a, VecD b) {
#if KCERT_SWEEP_LANES == 8
  return _mm512_mask_max_pd(a, 0xFF, b, a);  // all lanes (_mm512_max_pd trips a false GCC 12 warning)
#elif KCERT_SWEEP_LANES == 4
  return _mm256_max_pd(b, a);
#else
  return _mm_max_pd(b, a);
#endif
}
inline void vstore(double* p, VecD v) { __builtin_memcpy(p, &v, sizeof v); }
// A cast between GCC vector types of one size reinterprets the bits.
inline VecD vabs(VecD v) { return (VecD)((VecL)v & 0x7FFFFFFFFFFFFFFFLL); }  // fabs: clears the sign bit

template <bool kSideOracles, class W>
void accumulate_rows4_vec(const W* __restrict r, const W* __restrict p, const double* __restrict q,
                          const double* __restrict qr, const double* __restrict qp, std::int64_t ld,
                          double* __restrict sum_d, double* __restrict sum_m, double* __restrict sum_a,
                    double* __restrict sum_er, double* __restrict sum_emr, double* __restrict sum_ep,
                    double* __restrict sum_emp,
                          double* __restrict mp, double* __restrict mr, double* __restrict mk,
                          double* __restrict ssp, double* __restrict ssr, double* __restrict vio, double rtol,
                          double atol, std::int64_t buckets) {
  const VecD zero{}, one = zero + 1.0;
  std::int64_t g = 0;
  for (; g + kLanes <= buckets; g += kLanes) {
    VecD a_d = vload(sum_d + g), a_m = vload(sum_m + g), a_a = vload(sum_a + g), a_er = vload(sum_er + g),
         a_emr = vload(sum_emr + g), a_ep = vload(sum_ep + g), a_emp = vload(sum_emp + g), a_mp = vload(mp + g),
         a_mr = vload(mr + g), a_mk = vload(mk + g), a_sp = vload(ssp + g), a_sr = vload(ssr + g),
         a_v = vload(vio + g);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const std::int64_t i = g + t * ld;
      const VecD rv = vload(r + i), pv = vload(p + i), qv = vload(q + i);
      const VecD qrv = kSideOracles ? vload(qr + i) : qv, qpv = kSideOracles ? vload(qp + i) : qv;
      const VecD d = pv - rv;
      a_d += d;
      a_m += rv > 0.0 ? d : (rv < 0.0 ? -d : zero);
      const VecD aq = vabs(qv);
      a_a += aq;
      const VecD ar = rv - qv, ap = pv - qv;
      a_er += ar;
      a_emr += rv > 0.0 ? ar : (rv < 0.0 ? -ar : zero);
      a_ep += ap;
      a_emp += rv > 0.0 ? ap : (rv < 0.0 ? -ap : zero);
      const VecD ep = vabs(pv - qpv), er = vabs(rv - qrv);
      a_mp = vmax_keep(a_mp, ep);
      a_mr = vmax_keep(a_mr, er);
      a_mk = vmax_keep(a_mk, aq);
      a_sp += (pv - qpv) * (pv - qpv);
      a_sr += (rv - qrv) * (rv - qrv);
      a_v += vabs(d) > atol + rtol * vabs(rv) ? one : zero;
    }
    vstore(sum_d + g, a_d);
    vstore(sum_m + g, a_m);
    vstore(sum_a + g, a_a);
    vstore(sum_er + g, a_er);
    vstore(sum_emr + g, a_emr);
    vstore(sum_ep + g, a_ep);
    vstore(sum_emp + g, a_emp);
    vstore(mp + g, a_mp);
    vstore(mr + g, a_mr);
    vstore(mk + g, a_mk);
    vstore(ssp + g, a_sp);
    vstore(ssr + g, a_sr);
    vstore(vio + g, a_v);
  }
  if (g < buckets) {
    accumulate_rows4<kSideOracles>(r + g, p + g, q + g, qr + g, qp + g, ld, sum_d + g, sum_m + g, sum_a + g,
                                   sum_er + g, sum_emr + g, sum_ep + g, sum_emp + g, mp + g,
                                   mr + g, mk + g, ssp + g, ssr + g, vio + g, rtol, atol, buckets - g);
  }
}

// The exact test behind each pattern's cheap one: every input element is finite.
template <class W>
bool all_finite(const W* ref, const W* prod, const double* oracle, const double* oracle_ref, const double* oracle_prod,
                std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v[5] = {load(ref + i), load(prod + i), oracle[i], oracle_ref[i], oracle_prod[i]};
    for (const double x : v)
      if (!__builtin_isfinite(x)) return false;
  }
  return true;
}

template <class W>
void sweep_typed(const W* ref, const W* prod, const double* oracle, const double* oracle_ref,
           const double* oracle_prod, std::int64_t n, const std::int64_t* ids, std::int64_t buckets,
           BucketPattern pattern, double rtol, double atol, double* scratch, SweepOutput& out) {
  double sse_p = 0.0, sse_r = 0.0, violations = 0.0;
  double e_prod = 0.0, e_ref = 0.0, peak = 0.0;
  // Sums accumulate in element order within each bucket whatever the pattern, so every
  // path gives the same bits.
  if (pattern == BucketPattern::periodic) {
    // The maxima are folded after the sweep (max is exact in any order).
    for (std::int64_t k = 0; k < kScratchPerBucket * buckets; ++k) scratch[k] = 0.0;
    double* max_prod = scratch;
    double* max_ref = scratch + buckets;
    double* max_peak = scratch + 2 * buckets;
    double* ssp = scratch + 3 * buckets;
    double* ssr = scratch + 4 * buckets;
    double* vio = scratch + 5 * buckets;
    const std::int64_t rows = n / buckets;
    const auto row = oracle_ref == oracle && oracle_prod == oracle ? accumulate_row<false, W> : accumulate_row<true, W>;
    const auto rows4 = oracle_ref == oracle && oracle_prod == oracle ? accumulate_rows4_vec<false, W>
                                                                     : accumulate_rows4_vec<true, W>;
    // The buckets in chunks of 4096, each run down every row before the next starts, so the
    // nine accumulators (9 x 4096 x 8 bytes = 288 KiB) stay in L2 when a layout has more
    // buckets than that. Chunks of 512 kept them in L1 (they were 25-28 % faster than whole
    // rows before the four-row pass), but once each accumulator is touched once per four
    // elements the reads dominate: a 512-bucket chunk reads each row in 1-4 KiB pieces 8-32
    // KiB apart, which the hardware prefetchers lose at every page, while 4096 buckets read
    // #16's rows whole, in address order. AVX-512 EPYC (family 26), 512 x 4096 bf16, cold
    // data, one core, five interleaved rounds: 1.9-2.8 ns per element with chunks of 512,
    // 1.4-2.1 with 4096. Each bucket still sums its rows in order: the bits are unchanged.
    constexpr std::int64_t kChunk = 4096;
    for (std::int64_t g0 = 0; g0 < buckets; g0 += kChunk) {
      const std::int64_t width = buckets - g0 < kChunk ? buckets - g0 : kChunk;
      std::int64_t t = 0;
      for (; t + 4 <= rows; t += 4) {
        const std::int64_t at = t * buckets + g0;
        rows4(ref + at, prod + at, oracle + at, oracle_ref + at, oracle_prod + at, buckets, out.delta + g0,
              out.magnitude + g0, out.abs_oracle + g0, out.err_ref + g0, out.err_ref_magnitude + g0,
              out.err_prod + g0, out.err_prod_magnitude + g0, max_prod + g0, max_ref + g0, max_peak + g0, ssp + g0,
              ssr + g0, vio + g0, rtol, atol, width);
      }
      for (; t < rows; ++t) {  // the last rows % 4
        const std::int64_t at = t * buckets + g0;
        row(ref + at, prod + at, oracle + at, oracle_ref + at, oracle_prod + at, out.delta + g0, out.magnitude + g0,
            out.abs_oracle + g0, out.err_ref + g0, out.err_ref_magnitude + g0, out.err_prod + g0,
            out.err_prod_magnitude + g0, max_prod + g0, max_ref + g0, max_peak + g0, ssp + g0, ssr + g0, vio + g0, rtol,
            atol, width);
      }
    }
    // Non-finite inputs show in the sums, so no per-element sentinel is needed (it was a
    // tenth accumulator, and dropping it made the sweep 10-20 % faster, measured beside the
    // chunk change above): a NaN or infinite ref or prod makes its d = prod - ref NaN or
    // infinite, the oracle does the same to sum |oracle|, the side oracles to the squared
    // errors, and a NaN or an infinity never leaves a sum it entered (inf - inf is NaN).
    // The converse can fail: large finite values can overflow a sum (fp64 operands near
    // 1e308), so a non-finite sum only sends the replicate to the exact scan below.
    double check = 0.0;
    for (std::int64_t g = 0; g < buckets; ++g) {
      e_prod = max_of(e_prod, max_prod[g]);
      e_ref = max_of(e_ref, max_ref[g]);
      peak = max_of(peak, max_peak[g]);
      check += 0.0 * (out.delta[g] + out.abs_oracle[g] + ssp[g] + ssr[g]);
      sse_p += ssp[g];
      sse_r += ssr[g];
      violations += vio[g];
    }
    out.finite = check == 0.0;
  } else if (pattern == BucketPattern::blocked) {
    const std::int64_t block = n / buckets;
    for (std::int64_t g = 0; g < buckets; ++g) {
      double sd = 0.0, sm = 0.0, sa = 0.0, ser = 0.0, semr = 0.0, sep = 0.0, semp = 0.0, check = 0.0;
      for (std::int64_t i = g * block; i < (g + 1) * block; ++i) {
        const double rv = load(ref + i), pv = load(prod + i), qv = oracle[i], qrv = oracle_ref[i], qpv = oracle_prod[i];
        const double d = pv - rv;
        sd += d;
        sm += sign_of(rv) * d;
        sa += __builtin_fabs(qv);
        ser += rv - qv;
        semr += sign_of(rv) * (rv - qv);
        sep += pv - qv;
        semp += sign_of(rv) * (pv - qv);
        e_prod = max_of(e_prod, __builtin_fabs(pv - qpv));
        e_ref = max_of(e_ref, __builtin_fabs(rv - qrv));
        peak = max_of(peak, __builtin_fabs(qv));
        check += 0.0 * (d + qv + qrv + qpv);
        sse_p += (pv - qpv) * (pv - qpv);
        sse_r += (rv - qrv) * (rv - qrv);
        violations += __builtin_fabs(d) > atol + rtol * __builtin_fabs(rv) ? 1.0 : 0.0;
      }
      if (check != 0.0 || __builtin_isnan(check)) out.finite = false;
      out.delta[g] += sd;
      out.magnitude[g] += sm;
      out.abs_oracle[g] += sa;
      out.err_ref[g] += ser;
      out.err_ref_magnitude[g] += semr;
      out.err_prod[g] += sep;
      out.err_prod_magnitude[g] += semp;
    }
  } else {
    double check = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double rv = load(ref + i), pv = load(prod + i), qv = oracle[i], qrv = oracle_ref[i], qpv = oracle_prod[i];
      const double d = pv - rv;
      const auto g = ids[i];
      out.delta[g] += d;
      out.magnitude[g] += sign_of(rv) * d;
      out.abs_oracle[g] += __builtin_fabs(qv);
      out.err_ref[g] += rv - qv;
      out.err_ref_magnitude[g] += sign_of(rv) * (rv - qv);
      out.err_prod[g] += pv - qv;
      out.err_prod_magnitude[g] += sign_of(rv) * (pv - qv);
      e_prod = max_of(e_prod, __builtin_fabs(pv - qpv));
      e_ref = max_of(e_ref, __builtin_fabs(rv - qrv));
      peak = max_of(peak, __builtin_fabs(qv));
      check += 0.0 * (d + qv + qrv + qpv);
      sse_p += (pv - qpv) * (pv - qpv);
      sse_r += (rv - qrv) * (rv - qrv);
      violations += __builtin_fabs(d) > atol + rtol * __builtin_fabs(rv) ? 1.0 : 0.0;
    }
    out.finite = check == 0.0;
  }
  // Every pattern's cheap test can only err towards "non-finite" (a sum of large finite
  // values that overflows); the exact scan settles those, so `finite` means what it says.
  if (!out.finite) out.finite = all_finite(ref, prod, oracle, oracle_ref, oracle_prod, n);
  out.sse_prod = sse_p;
  out.sse_ref = sse_r;
  out.close_violations = violations;
  out.e_prod = e_prod;
  out.e_ref = e_ref;
  out.peak = peak;
}

}  // namespace

void sweep(const void* ref, const void* prod, ElementType type, const double* oracle, const double* oracle_ref,
           const double* oracle_prod, std::int64_t n, const std::int64_t* ids, std::int64_t buckets,
           BucketPattern pattern, double rtol, double atol, double* scratch, SweepOutput& out) {
  switch (type) {
    case ElementType::f64:
      return sweep_typed(static_cast<const double*>(ref), static_cast<const double*>(prod), oracle, oracle_ref,
                         oracle_prod, n, ids, buckets, pattern, rtol, atol, scratch, out);
    case ElementType::f32:
      return sweep_typed(static_cast<const float*>(ref), static_cast<const float*>(prod), oracle, oracle_ref,
                         oracle_prod, n, ids, buckets, pattern, rtol, atol, scratch, out);
    case ElementType::bf16:
      return sweep_typed(static_cast<const Bf16*>(ref), static_cast<const Bf16*>(prod), oracle, oracle_ref,
                         oracle_prod, n, ids, buckets, pattern, rtol, atol, scratch, out);
  }
}

}  // namespace kcert::numerics::detail::KCERT_SWEEP_ISA
