#include "tests/catch_torch.hpp"

#include <cmath>

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
  CHECK(o.e_prod == 0.5);
  CHECK(o.e_ref == 0.5);
  CHECK(o.peak == 3.5);
  // Baseline inputs: RMSE against the oracle, and assert_close violations (bf16: rtol 1.6e-2,
  // atol 1e-5): 1 -> 1.5, -1 -> -1.25 and 4 -> 3 differ by more than that; -2 -> -2 does not.
  CHECK(o.rmse_prod == Approx(std::sqrt((0.25 * 0.25 + 0 + 0.25 * 0.25 + 0.5 * 0.5) / 4)));
  CHECK(o.rmse_ref == Approx(std::sqrt((0.25 * 0.25 + 0 + 0 + 0.5 * 0.5) / 4)));
  CHECK(o.close_violations == 3.0);
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

TEST_CASE("a near tie accepts either oracle per side; a real flip is counted", "[numerics][selection]") {
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
