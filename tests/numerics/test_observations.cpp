#include "tests/catch_torch.hpp"

#include <array>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "harness/numerics/observations.hpp"

TEST_CASE("bucket layouts recognize channel and row patterns", "[numerics]") {
  const std::vector<int64_t> shape{3, 4};
  const auto channel = kcert::numerics::make_bucket_layout(torch::arange(4).expand({3, 4}).contiguous(), shape);
  CHECK(channel.buckets == 4);
  CHECK(channel.pattern == kcert::numerics::detail::BucketPattern::periodic);
  CHECK(channel.counts == std::vector<int64_t>({3, 3, 3, 3}));
  const auto row = kcert::numerics::make_bucket_layout(torch::arange(3).unsqueeze(1).expand({3, 4}).contiguous(), shape);
  CHECK(row.pattern == kcert::numerics::detail::BucketPattern::blocked);
  const auto odd = kcert::numerics::make_bucket_layout(torch::tensor({0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0}).view({3, 4}), shape);
  CHECK(odd.pattern == kcert::numerics::detail::BucketPattern::general);
  CHECK_THROWS_WITH(kcert::numerics::make_bucket_layout(torch::tensor({0, 2, 0, 2}).view({2, 2}), std::vector<int64_t>{2, 2}),
                    Catch::Contains("bucket 1 has no elements"));
}

TEST_CASE("observations are exact bucket means of prod - ref and sign(ref)·(prod - ref)", "[numerics]") {
  const std::vector<int64_t> shape{2, 2};
  const auto layout = kcert::numerics::make_bucket_layout(torch::arange(2).expand({2, 2}).contiguous(), shape);
  const auto ref = torch::tensor({1.0, -2.0, -1.0, 4.0}, torch::kFloat64).view({1, 2, 2}).to(torch::kBFloat16);
  const auto prod = torch::tensor({1.5, -2.0, -1.25, 3.0}, torch::kFloat64).view({1, 2, 2}).to(torch::kBFloat16);
  const auto oracle = torch::tensor({1.25, -2.0, -1.0, 3.5}, torch::kFloat64).view({1, 2, 2});
  const auto obs = kcert::numerics::observe(ref, prod, oracle, torch::Tensor(), layout, 0, shape, kcert::stats::FloatFormat::bf16);
  REQUIRE(obs.replicates.size() == 1);
  const auto& o = obs.replicates[0];
  CHECK(o.delta == std::vector<double>({(0.5 - 0.25) / 2, (0.0 - 1.0) / 2}));
  CHECK(o.magnitude == std::vector<double>({(0.5 + 0.25) / 2, (0.0 - 1.0) / 2}));
  CHECK(o.abs_oracle == std::vector<double>({(1.25 + 1.0) / 2, (2.0 + 3.5) / 2}));
  // Each side against the oracle (bias attribution): bucket 0 holds 1 -> (1.5, q 1.25) and
  // -1 -> (-1.25, q -1); bucket 1 holds -2 -> (-2, q -2) and 4 -> (3, q 3.5).
  CHECK(o.ref_error == std::vector<double>({(-0.25 + 0.0) / 2, (0.0 + 0.5) / 2}));
  CHECK(o.ref_error_magnitude == std::vector<double>({(-0.25 - 0.0) / 2, (-0.0 + 0.5) / 2}));
  CHECK(o.prod_error == std::vector<double>({(0.25 - 0.25) / 2, (0.0 - 0.5) / 2}));
  CHECK(o.prod_error_magnitude == std::vector<double>({(0.25 + 0.25) / 2, (-0.0 - 0.5) / 2}));
  CHECK(o.e_prod == 0.5);
  CHECK(o.e_ref == 0.5);
  CHECK(o.peak == 3.5);
  // Baseline inputs: RMSE against the oracle, and assert_close violations (bf16: rtol 1.6e-2,
  // atol 1e-5): 1 -> 1.5, -1 -> -1.25 and 4 -> 3 differ by more than that; -2 -> -2 does not.
  CHECK(o.rmse_prod == Approx(std::sqrt((0.25 * 0.25 + 0 + 0.25 * 0.25 + 0.5 * 0.5) / 4)));
  CHECK(o.rmse_ref == Approx(std::sqrt((0.25 * 0.25 + 0 + 0 + 0.5 * 0.5) / 4)));
  CHECK(o.close_violations == 3.0);
  CHECK_FALSE(o.same_as_reference);
  // The reference against itself is bit-identical in each replicate; one element apart is not.
  const auto two = torch::cat({ref, ref}).contiguous();
  auto other = two.clone();
  other[1][1][1] = 4.03125;  // the next bf16 after 4
  const auto same = kcert::numerics::observe(two, other, torch::cat({oracle, oracle}), torch::Tensor(), layout, 0, shape,
                                             kcert::stats::FloatFormat::bf16);
  REQUIRE(same.replicates.size() == 2);
  CHECK(same.replicates[0].same_as_reference);
  CHECK_FALSE(same.replicates[1].same_as_reference);
}

TEST_CASE("the fp64 comparison finds the worst relative discrepancy and the first NaN/Inf mismatch", "[numerics]") {
  const std::vector<int64_t> shape{2, 2};
  const auto layout = kcert::numerics::make_bucket_layout(torch::arange(2).expand({2, 2}).contiguous(), shape);
  const double nan = std::nan("");
  // Two replicates: the first differs by 1e-3 at element 2 (relative to max |ref| = 4), the
  // second has a NaN in production where the reference is finite.
  const auto ref = torch::tensor({1.0, -2.0, -1.0, 4.0, 1.0, 1.0, 1.0, 1.0}, torch::kFloat64).view({2, 2, 2});
  const auto prod = torch::tensor({1.0, -2.0, -1.001, 4.0, 1.0, nan, 1.0, 1.0}, torch::kFloat64).view({2, 2, 2});
  const auto obs = kcert::numerics::compare_fp64(ref, prod, 10, layout, shape);
  REQUIRE(obs.size() == 2);
  CHECK(obs[0].discrepancy == Approx(1e-3 / 4.0));
  CHECK(obs[0].worst.replicate == 10);
  CHECK(obs[0].worst.element == 2);
  CHECK(obs[0].worst.index == std::vector<int64_t>({1, 0}));
  CHECK_FALSE(obs[0].mismatch.has_value());
  REQUIRE(obs[1].mismatch.has_value());
  CHECK(obs[1].mismatch->replicate == 11);
  CHECK(obs[1].mismatch->element == 1);
  CHECK(obs[1].mismatch->bucket == 1);
}

TEST_CASE("a near tie accepts either oracle per side, and a real flip is counted", "[numerics][selection]") {
  // Three decisions (rows) over 4 experts, top-2 weights. Row 0: the oracle picks {0, 1},
  // the near-tie oracle {0, 2}. Row 1: no near tie. Row 2: no near tie either.
  const std::vector<int64_t> shape{3, 4};
  const auto layout = kcert::numerics::make_bucket_layout(torch::arange(4).expand({3, 4}).contiguous(), shape);
  const auto t = [](std::vector<double> v) { return torch::tensor(v, torch::kFloat64).view({1, 3, 4}); };
  const auto oracle = t({0.5, 0.5, 0, 0, /**/ 0.75, 0, 0.25, 0, /**/ 0, 0, 0.5, 0.5});
  const auto alt = t({0.5, 0, 0.5, 0, /**/ 0.75, 0, 0.25, 0, /**/ 0, 0, 0.5, 0.5});
  // The reference follows the oracle, production the other side of the tie in row 0 and a
  // real flip in row 2 ({1, 3} instead of {2, 3}).
  const auto ref = t({0.5, 0.5, 0, 0, /**/ 0.75, 0, 0.25, 0, /**/ 0, 0, 0.5, 0.5}).to(torch::kBFloat16);
  const auto prod = t({0.5, 0, 0.5, 0, /**/ 0.75, 0, 0.25, 0, /**/ 0, 0.5, 0, 0.5}).to(torch::kBFloat16);
  const auto obs = kcert::numerics::observe(ref, prod, oracle, alt, layout, 0, shape, kcert::stats::FloatFormat::bf16);
  REQUIRE(obs.replicates.size() == 1);
  const auto& o = obs.replicates[0];
  CHECK(o.e_ref == 0.0);
  CHECK(o.e_prod == 0.5);  // row 2 only: row 0 is measured against the near-tie oracle
  CHECK(o.selection.decisions == 3);
  CHECK(o.selection.near_ties == 1);
  CHECK(o.selection.flips_prod == 1);
  CHECK(o.selection.flips_ref == 0);
  CHECK(o.selection.flips_prod_only == 1);
  CHECK(o.selection.flips_ref_only == 0);
  // Without the second oracle, row 0 is an error of 0.5 as well and no selection is counted.
  const auto plain = kcert::numerics::observe(ref, prod, oracle, torch::Tensor(), layout, 0, shape,
                                              kcert::stats::FloatFormat::bf16);
  CHECK(plain.replicates[0].e_prod == 0.5);
  CHECK(plain.replicates[0].selection.decisions == 0);
}

namespace {
// Bit-for-bit equality of doubles (NaN payloads and signed zeros included).
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_v(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

// One sweep's outputs, every number as bits.
struct SweepBits {
  std::vector<double> delta, magnitude, abs_oracle, err_ref, err_ref_m, err_prod, err_prod_m;
  double e_prod, e_ref, peak, sse_prod, sse_ref, violations;
  bool finite;
  // Zeroed outputs for G buckets, and the sweep's view of them.
  kcert::numerics::detail::SweepOutput output(std::int64_t G) {
    for (auto* v : {&delta, &magnitude, &abs_oracle, &err_ref, &err_ref_m, &err_prod, &err_prod_m})
      v->assign(static_cast<std::size_t>(G), 0.0);
    return {delta.data(), magnitude.data(), abs_oracle.data(), err_ref.data(), err_ref_m.data(), err_prod.data(),
            err_prod_m.data()};
  }
  bool operator==(const SweepBits& o) const {
    return same_v(delta, o.delta) && same_v(magnitude, o.magnitude) && same_v(abs_oracle, o.abs_oracle) &&
           same_v(err_ref, o.err_ref) && same_v(err_ref_m, o.err_ref_m) && same_v(err_prod, o.err_prod) &&
           same_v(err_prod_m, o.err_prod_m) &&
           same(e_prod, o.e_prod) && same(e_ref, o.e_ref) && same(peak, o.peak) && same(sse_prod, o.sse_prod) &&
           same(sse_ref, o.sse_ref) && same(violations, o.violations) && finite == o.finite;
  }
};

// The sweep copies this CPU can run, the baseline first.
std::vector<std::string> sweep_isas() {
  std::vector<std::string> isas{"generic"};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) isas.push_back("avx2");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    isas.push_back("avx512");
  return isas;
}

// Bucket ids of rows x buckets elements in each pattern: periodic (i % buckets), blocked
// (i / rows) and an arbitrary table.
std::array<std::vector<std::int64_t>, 3> bucket_ids(std::int64_t rows, std::int64_t buckets) {
  const std::int64_t n = rows * buckets;
  std::array<std::vector<std::int64_t>, 3> ids{std::vector<std::int64_t>(n), std::vector<std::int64_t>(n),
                                              std::vector<std::int64_t>(n)};
  for (std::int64_t i = 0; i < n; ++i) {
    ids[0][i] = i % buckets;
    ids[1][i] = i / rows;
    ids[2][i] = (i * 7 + i / 5) % buckets;
  }
  return ids;
}
}  // namespace

// The sweep reads bf16 and fp32 as stored and is compiled once per instruction set: every
// combination must give the bits of the all-fp64 baseline copy (issue 17).
TEST_CASE("the sweep gives the same bits for every storage type and instruction set", "[numerics][sweep]") {
  using kcert::numerics::detail::BucketPattern;
  using kcert::numerics::detail::ElementType;
  // 37 rows x 27 buckets: register blocks of 2, 4 or 8 buckets and a tail, nine 4-row passes
  // and one single row; 5 rows x 4500 buckets: one of the periodic sweep's 4096-bucket
  // chunks and a partial second, one 4-row pass and one single row.
  for (const auto& [rows, buckets] : {std::pair<std::int64_t, std::int64_t>{37, 27}, {5, 4500}}) {
    const std::int64_t n = rows * buckets;
    INFO(rows << " rows, " << buckets << " buckets");
    torch::manual_seed(11);
    const auto oracle_t = torch::randn({n}, torch::kFloat64) * 3 + 0.25;
    const auto ref_t = oracle_t.to(torch::kBFloat16);
    const auto prod_t = (oracle_t * (1 + 1e-3 * torch::randn({n}, torch::kFloat64))).to(torch::kBFloat16);
    const auto alt_t = oracle_t + 1e-4 * torch::randn({n}, torch::kFloat64);
    const auto ref64 = ref_t.to(torch::kFloat64).contiguous(), prod64 = prod_t.to(torch::kFloat64).contiguous();
    const auto ref32 = ref_t.to(torch::kFloat32).contiguous(), prod32 = prod_t.to(torch::kFloat32).contiguous();
    const auto [periodic, blocked, general] = bucket_ids(rows, buckets);
    const auto isas = sweep_isas();
    INFO("sweep() runs " << kcert::numerics::detail::sweep_isa());
    const double* q = oracle_t.data_ptr<double>();
    for (const auto& [pattern, ids] : {std::pair{BucketPattern::periodic, &periodic}, std::pair{BucketPattern::blocked, &blocked},
                                       std::pair{BucketPattern::general, &general}}) {
      for (const bool sides : {false, true}) {
        const double* qr = sides ? alt_t.data_ptr<double>() : q;
        const auto run = [&](const std::string& isa, const void* r, const void* p, ElementType type) {
          SweepBits b;
          auto out = b.output(buckets);
          kcert::numerics::detail::sweep_with(isa.c_str(), r, p, type, q, qr, q, n, ids->data(), buckets, pattern, 1.6e-2,
                                              1e-5, out);
          b.e_prod = out.e_prod, b.e_ref = out.e_ref, b.peak = out.peak, b.sse_prod = out.sse_prod;
          b.sse_ref = out.sse_ref, b.violations = out.close_violations, b.finite = out.finite;
          return b;
        };
        const auto baseline = run("generic", ref64.data_ptr<double>(), prod64.data_ptr<double>(), ElementType::f64);
        CHECK(baseline.finite);
        if (pattern == BucketPattern::periodic) {
          // The tiled periodic sweep against the plain element-order loop of the general layout
          // on the same ids: an independent path to the same bits.
          SweepBits plain;
          auto out = plain.output(buckets);
          kcert::numerics::detail::sweep_with("generic", ref64.data_ptr<double>(), prod64.data_ptr<double>(), ElementType::f64,
                                              q, qr, q, n, periodic.data(), buckets, BucketPattern::general, 1.6e-2, 1e-5, out);
          plain.e_prod = out.e_prod, plain.e_ref = out.e_ref, plain.peak = out.peak, plain.sse_prod = out.sse_prod;
          plain.sse_ref = out.sse_ref, plain.violations = out.close_violations, plain.finite = out.finite;
          INFO("side oracles " << sides);
          CHECK(plain.delta == baseline.delta);
          CHECK(plain.magnitude == baseline.magnitude);
          CHECK(plain.abs_oracle == baseline.abs_oracle);
          CHECK(plain.err_ref == baseline.err_ref);
          CHECK(plain.err_ref_m == baseline.err_ref_m);
          CHECK(plain.err_prod == baseline.err_prod);
          CHECK(plain.err_prod_m == baseline.err_prod_m);
          CHECK(plain.e_prod == baseline.e_prod);
          CHECK(plain.e_ref == baseline.e_ref);
          CHECK(plain.peak == baseline.peak);
          CHECK(plain.violations == baseline.violations);
          // The squared errors sum per bucket in the tiled sweep and in one scalar in the
          // plain loop: the same sums in another order, so equal to rounding only.
          CHECK(plain.sse_prod == Approx(baseline.sse_prod).epsilon(1e-12));
          CHECK(plain.sse_ref == Approx(baseline.sse_ref).epsilon(1e-12));
        }
        CHECK(baseline.e_prod > 0);
        for (const auto& isa : isas) {
          INFO("pattern " << static_cast<int>(pattern) << ", side oracles " << sides << ", " << isa);
          CHECK(run(isa, ref64.data_ptr<double>(), prod64.data_ptr<double>(), ElementType::f64) == baseline);
          CHECK(run(isa, ref32.data_ptr<float>(), prod32.data_ptr<float>(), ElementType::f32) == baseline);
          CHECK(run(isa, ref_t.data_ptr(), prod_t.data_ptr(), ElementType::bf16) == baseline);
        }
      }
    }
  }
}

// The periodic sweep has no per-element NaN sentinel: it reads non-finite inputs off its
// sums, and a sum that overflowed on finite values is settled by an exact scan. Every input
// array, every position class (first, middle, last row; first and last bucket), NaN and both
// infinities, every pattern, storage type and instruction set.
TEST_CASE("the sweep reports a non-finite input wherever it is, and an overflowing sum as finite", "[numerics][sweep]") {
  using kcert::numerics::detail::BucketPattern;
  using kcert::numerics::detail::ElementType;
  const std::int64_t rows = 9, buckets = 13, n = rows * buckets;
  const auto [periodic, blocked, general] = bucket_ids(rows, buckets);
  const auto isas = sweep_isas();
  // Runs one sweep; ref/prod are given in fp64 and stored as `type` (values chosen exact in it).
  // With `sides`, qr is the reference's own oracle (the selecting families' path); without,
  // the sweep gets the one oracle array, as every other family gives it.
  const auto finite_of = [&](const std::string& isa, ElementType type, BucketPattern pattern, const std::vector<std::int64_t>& ids,
                             const std::vector<double>& r, const std::vector<double>& p, const std::vector<double>& q,
                             const std::vector<double>& qr, bool sides) {
    auto r64 = torch::tensor(r, torch::kFloat64), p64 = torch::tensor(p, torch::kFloat64);
    const auto dtype = type == ElementType::bf16 ? torch::kBFloat16 : type == ElementType::f32 ? torch::kFloat32 : torch::kFloat64;
    const auto rs = r64.to(dtype).contiguous(), ps = p64.to(dtype).contiguous();
    SweepBits bits;
    auto out = bits.output(buckets);
    kcert::numerics::detail::sweep_with(isa.c_str(), rs.data_ptr(), ps.data_ptr(), type, q.data(), sides ? qr.data() : q.data(), q.data(), n,
                                        ids.data(), buckets, pattern, 1.6e-2, 1e-5, out);
    return out.finite;
  };
  std::vector<double> base(n);
  for (std::int64_t i = 0; i < n; ++i) base[i] = 0.25 * static_cast<double>((i % 11) - 5);  // exact in bf16
  const double bad_values[] = {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  for (const auto& [pattern, ids] : {std::pair{BucketPattern::periodic, &periodic}, std::pair{BucketPattern::blocked, &blocked},
                                     std::pair{BucketPattern::general, &general}}) {
    for (const auto& isa : isas) {
      for (const auto type : {ElementType::f64, ElementType::f32, ElementType::bf16}) {
        for (const bool sides : {false, true}) {
          INFO("pattern " << static_cast<int>(pattern) << ", " << isa << ", type " << static_cast<int>(type)
                          << ", side oracles " << sides);
          CHECK(finite_of(isa, type, pattern, *ids, base, base, base, base, sides));
          for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1, buckets - 1, (rows - 1) * buckets}) {
            for (const double bad : bad_values) {
              // ref, prod, oracle, and with side oracles the reference's own oracle
              for (int which = 0; which < (sides ? 4 : 3); ++which) {
                INFO("element " << at << " = " << bad << " in input " << which);
                auto r = base, p = base, q = base, qr = base;
                (which == 0 ? r : which == 1 ? p : which == 2 ? q : qr)[static_cast<std::size_t>(at)] = bad;
                CHECK_FALSE(finite_of(isa, type, pattern, *ids, r, p, q, qr, sides));
              }
            }
          }
          // Both infinities of ref and prod in one element (inf - inf is NaN, -inf - inf is -inf).
          for (const double second : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
            auto r = base, p = base;
            r[3] = std::numeric_limits<double>::infinity();
            p[3] = second;
            CHECK_FALSE(finite_of(isa, type, pattern, *ids, r, p, base, base, sides));
          }
          // Finite oracles whose sums overflow within a bucket (9 rows of 1e308): finite.
          const std::vector<double> big(static_cast<std::size_t>(n), 1e308);
          CHECK(finite_of(isa, type, pattern, *ids, base, base, big, big, sides));
        }
      }
      // fp64 operands whose difference overflows: ref 1e308, prod -1e308 (d = -inf): finite.
      const std::vector<double> hi(static_cast<std::size_t>(n), 1e308), lo(static_cast<std::size_t>(n), -1e308);
      CHECK(finite_of(isa, ElementType::f64, pattern, *ids, hi, lo, base, base, false));
    }
  }
}

namespace {
// Every number of a replicate's observation, as bits.
bool same_bits(const kcert::gates::ReplicateObservation& a, const kcert::gates::ReplicateObservation& b) {
  return same_v(a.delta, b.delta) && same_v(a.magnitude, b.magnitude) && same_v(a.abs_oracle, b.abs_oracle) &&
         same_v(a.ref_error, b.ref_error) && same_v(a.ref_error_magnitude, b.ref_error_magnitude) &&
         same_v(a.prod_error, b.prod_error) && same_v(a.prod_error_magnitude, b.prod_error_magnitude) &&
         same(a.e_prod, b.e_prod) && same(a.e_ref, b.e_ref) && same(a.peak, b.peak) && same(a.rmse_prod, b.rmse_prod) &&
         same(a.rmse_ref, b.rmse_ref) && same(a.close_violations, b.close_violations);
}
}  // namespace

// The engine shares a batch's sweep out by replicate between a background thread and the
// intra-op threads; whoever sweeps which replicate, the observations must be those of one
// thread sweeping them all in order.
TEST_CASE("a batch shared out among threads gives the observations of one thread", "[numerics][sweep]") {
  // Replicates large enough (0.2-0.5 ms each) that helpers are mid-replicate when finish() runs out.
  const std::vector<int64_t> shape{257, 600};
  const auto layout = kcert::numerics::make_bucket_layout(torch::arange(600).expand({257, 600}).contiguous(), shape);
  constexpr std::int64_t kBatch = 23;
  torch::manual_seed(5);
  const auto oracle = torch::randn({kBatch, 257, 600}, torch::kFloat64) * 2 - 0.5;
  const auto ref = oracle.to(torch::kBFloat16);
  const auto prod = (oracle * (1 + 2e-3 * torch::randn({kBatch, 257, 600}, torch::kFloat64))).to(torch::kBFloat16);
  const auto bf16 = kcert::stats::FloatFormat::bf16;
  const auto one = kcert::numerics::observe(ref, prod, oracle, torch::Tensor(), layout, 40, shape, bf16, false);
  REQUIRE(one.replicates.size() == kBatch);
  const auto check_same = [&](const kcert::numerics::BatchObservations& got) {
    REQUIRE(got.replicates.size() == kBatch);
    CHECK_FALSE(got.nonfinite.has_value());
    for (std::int64_t b = 0; b < kBatch; ++b) {
      INFO("replicate " << b);
      CHECK(same_bits(got.replicates[b], one.replicates[b]));
    }
  };
  SECTION("three helpers racing finish() on the intra-op threads") {
    kcert::numerics::BatchSweep job(ref, prod, oracle, torch::Tensor(), layout, 40, shape, bf16);
    std::vector<std::thread> helpers;
    for (int t = 0; t < 3; ++t) helpers.emplace_back([&job] { job.help(); });
    // Checked before the helpers are joined: finish() itself must wait for the replicates
    // they are still sweeping.
    const auto got = job.finish();
    check_same(got);
    for (auto& h : helpers) h.join();
  }
  SECTION("a helper that swept everything leaves finish() nothing") {
    kcert::numerics::BatchSweep job(ref, prod, oracle, torch::Tensor(), layout, 40, shape, bf16);
    std::thread helper([&job] { job.help(); });
    helper.join();
    const auto got = job.finish();
    CHECK(job.swept_at_finish() == 0);
    check_same(got);
  }
  SECTION("without a helper finish() sweeps every replicate") {
    kcert::numerics::BatchSweep job(ref, prod, oracle, torch::Tensor(), layout, 40, shape, bf16);
    const auto got = job.finish(true);
    CHECK(job.swept_at_finish() == kBatch);
    check_same(got);
  }
  SECTION("a non-finite value is located the same way, whichever thread found it") {
    auto bad = prod.clone();
    bad[17][4][123] = std::numeric_limits<double>::infinity();
    const auto alone = kcert::numerics::observe(ref, bad, oracle, torch::Tensor(), layout, 40, shape, bf16, false);
    kcert::numerics::BatchSweep job(ref, bad, oracle, torch::Tensor(), layout, 40, shape, bf16);
    std::thread helper([&job] { job.help(); });
    const auto got = job.finish();
    helper.join();
    REQUIRE(alone.nonfinite.has_value());
    REQUIRE(got.nonfinite.has_value());
    CHECK(got.replicates.empty());
    CHECK(got.nonfinite->side == "production");
    CHECK(got.nonfinite->value == "+inf");
    CHECK(got.nonfinite->where.replicate == 40 + 17);
    CHECK(got.nonfinite->where.element == 4 * 600 + 123);
    CHECK(got.nonfinite->where.replicate == alone.nonfinite->where.replicate);
  }
}

TEST_CASE("the attribution sums take both sides against the primary oracle, the maxima against the side oracles",
          "[numerics]") {
  // Three oracles that all differ (a selecting family's near-tie rows): each side's error sum
  // must use the primary oracle q, so that err_prod - err_ref sums prod - ref, while the
  // maxima e_ref, e_prod use the side oracles qr, qp. Every path and copy must agree.
  using kcert::numerics::detail::BucketPattern;
  using kcert::numerics::detail::ElementType;
  const std::int64_t G = 3, rows = 5, n = G * rows;
  std::vector<double> r(n), p(n), q(n), qr(n), qp(n);
  std::vector<std::int64_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) {
    r[i] = 0.25 * static_cast<double>((i * 7) % 11) - 1.0;
    p[i] = r[i] + 0.125 * static_cast<double>((i % 3) - 1);
    q[i] = r[i] + 0.0625;
    qr[i] = r[i] - 0.03125;
    qp[i] = p[i] + 0.5;
    ids[i] = i % G;
  }
  std::vector<double> er(G, 0.0), emr(G, 0.0), ep(G, 0.0), emp(G, 0.0);
  double max_r = 0.0, max_p = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double s = r[i] > 0 ? 1.0 : r[i] < 0 ? -1.0 : 0.0;
    er[ids[i]] += r[i] - q[i];
    emr[ids[i]] += s * (r[i] - q[i]);
    ep[ids[i]] += p[i] - q[i];
    emp[ids[i]] += s * (p[i] - q[i]);
    max_r = std::max(max_r, std::fabs(r[i] - qr[i]));
    max_p = std::max(max_p, std::fabs(p[i] - qp[i]));
  }
  for (const auto& isa : sweep_isas()) {
    for (const auto pattern : {BucketPattern::periodic, BucketPattern::general}) {
      INFO(isa << (pattern == BucketPattern::periodic ? " periodic" : " general"));
      SweepBits b;
      auto out = b.output(G);
      kcert::numerics::detail::sweep_with(isa.c_str(), r.data(), p.data(), ElementType::f64, q.data(), qr.data(), qp.data(),
                                          n, ids.data(), G, pattern, 1.6e-2, 1e-5, out);
      for (std::int64_t g = 0; g < G; ++g) {
        CHECK(b.err_ref[g] == Approx(er[g]).margin(1e-12));
        CHECK(b.err_ref_m[g] == Approx(emr[g]).margin(1e-12));
        CHECK(b.err_prod[g] == Approx(ep[g]).margin(1e-12));
        CHECK(b.err_prod_m[g] == Approx(emp[g]).margin(1e-12));
        CHECK(b.err_prod[g] - b.err_ref[g] == Approx(b.delta[g]).margin(1e-12));
      }
      CHECK(out.e_ref == max_r);
      CHECK(out.e_prod == max_p);
    }
  }
}
