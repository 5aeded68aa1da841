// Each gate alone on synthetic replicate batches: no kernels, no LibTorch.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "harness/gates/algebra_gate.hpp"
#include "harness/gates/baseline_checks.hpp"
#include "harness/gates/bias_gate.hpp"
#include "harness/gates/variance_gate.hpp"

using kcert::gates::AlgebraObservation;
using kcert::gates::ReplicateBatch;
using kcert::gates::ReplicateObservation;
using kcert::stats::FloatFormat;
using kcert::stats::Verdict;

namespace {

// G buckets at scale 1 (bf16 ULP 2^-7), Δ = bias[g] + noise, M the same.
std::vector<ReplicateObservation> draw(std::size_t R, const std::vector<double>& bias, double sd, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> noise(0.0, sd);
  std::vector<ReplicateObservation> out(R);
  for (auto& o : out) {
    for (double b : bias) {
      const double d = b + noise(gen);
      o.delta.push_back(d);
      o.magnitude.push_back(d);
      o.abs_oracle.push_back(1.0);
    }
    o.peak = 1.0;
  }
  return out;
}

ReplicateBatch batch(const std::vector<ReplicateObservation>& obs, std::uint64_t first = 0) {
  return ReplicateBatch{first, obs, {}, nullptr};
}

kcert::gates::BiasGate bias_gate(std::uint64_t R) {
  return kcert::gates::BiasGate({R, {}, {kcert::stats::BiasStatistic::signed_difference}, "channel"}, FloatFormat::bf16);
}

}  // namespace

TEST_CASE("bias gate fails a coherent half-ULP bias and passes pure noise", "[gates][bias]") {
  const double ulp = 0x1p-7;
  auto gate = bias_gate(256);
  const auto obs = draw(256, {0.0, 0.0, 0.5 * ulp, 0.0}, 0.5 * ulp, 1);
  gate.observe(batch(obs));
  CHECK(gate.wants_more(256) == 0);
  const auto r = gate.decide();
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.signed_statistic.fail_buckets == 1);
  REQUIRE_FALSE(r.signed_statistic.flagged.empty());
  CHECK(r.signed_statistic.flagged[0].bucket == 2);
  CHECK(r.signed_statistic.flagged[0].direction == 1);

  auto quiet = bias_gate(256);
  quiet.observe(batch(draw(256, {0.0, 0.0, 0.0, 0.0}, 0.5 * ulp, 2)));
  CHECK(quiet.decide().verdict == Verdict::pass);
}

TEST_CASE("bias gate keeps its pre-declared R when the run grows", "[gates][bias]") {
  auto gate = bias_gate(64);
  CHECK(gate.wants_more(0) == 64);
  CHECK(gate.wants_more(40) == 24);
  // Replicates 0..127 arrive in two batches; only the first 64 count.
  const auto obs = draw(128, {0.0, 0.0}, 0.01, 3);
  gate.observe(batch({obs.begin(), obs.begin() + 100}, 0));
  gate.observe(batch({obs.begin() + 100, obs.end()}, 100));
  CHECK(gate.decide().replicates == 64);
}

TEST_CASE("bias gate turns a non-finite batch into a FAIL with the location", "[gates][bias]") {
  auto gate = bias_gate(8);
  const kcert::gates::NonFinite nf{"production", "nan", {3, 5, {0, 5}, 5}};
  gate.observe(ReplicateBatch{0, {}, {}, &nf});
  const auto r = gate.decide();
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.reason == "non-finite output (nan) from the production at replicate 3, element [0,5], bucket 5");
}

TEST_CASE("K-hat follows the degenerate rules of method.md section 4", "[gates][variance]") {
  ReplicateObservation o;
  o.peak = 1.5;  // bf16 ULP at 1.5 is 2^-7
  o.e_prod = 0x1p-7;
  o.e_ref = 0.01;
  CHECK(kcert::gates::k_hat(o, FloatFormat::bf16) == 0.0);  // within one ULP
  o.e_prod = 3 * 0x1p-7;
  CHECK(kcert::gates::k_hat(o, FloatFormat::bf16) == Approx(2 * 0x1p-7 / 0.01));
  o.e_ref = 0.0;
  CHECK(std::isinf(kcert::gates::k_hat(o, FloatFormat::bf16)));
}

TEST_CASE("variance gate stops at once when every replicate is trivially aligned", "[gates][variance]") {
  kcert::gates::VarianceGate gate({}, 32, 256, FloatFormat::bf16);
  CHECK(gate.wants_more(0) == 32);
  std::vector<ReplicateObservation> obs(32);
  for (auto& o : obs) o.peak = 1.0;  // E_prod = 0: K̂ = 0
  gate.observe(batch(obs));
  CHECK(gate.wants_more(32) == 0);
  const auto r = gate.decide();
  CHECK(r.verdict == Verdict::pass);
  CHECK(r.looks == std::vector<std::uint64_t>{32});
  CHECK(r.khat.size() == 32);
  CHECK(r.tail.mode == kcert::stats::TailMode::trivially_aligned);
}

TEST_CASE("variance gate doubles R while a thin tail sits near a threshold, up to R_max", "[gates][variance]") {
  // K̂ = 1.5 on one replicate in 16 (a thin tail whose max is within 2x of warn_K = 2).
  kcert::gates::VarianceGate gate({}, 16, 64, FloatFormat::bf16);
  std::uint64_t done = 0;
  std::vector<std::uint64_t> targets;
  for (auto more = gate.wants_more(done); more > 0; more = gate.wants_more(done)) {
    std::vector<ReplicateObservation> obs(more);
    for (std::size_t i = 0; i < obs.size(); ++i) {
      obs[i].peak = 1.0;
      obs[i].e_ref = 0x1p-7;
      obs[i].e_prod = (done + i) % 16 == 0 ? 2.5 * 0x1p-7 : 0.0;  // (2.5 - 1)·ULP / ULP = 1.5
    }
    gate.observe(batch(obs, done));
    done += more;
    targets.push_back(done);
  }
  CHECK(targets == std::vector<std::uint64_t>({16, 32, 64}));
  const auto r = gate.decide();
  CHECK(r.looks == std::vector<std::uint64_t>({16, 32, 64}));
  CHECK(r.unstable);
  CHECK(r.verdict == Verdict::pass);
}

TEST_CASE("algebra gate reports the worst discrepancy, and a pattern mismatch before it", "[gates][algebra]") {
  kcert::gates::AlgebraGate gate(4, 1e-9);
  CHECK(gate.fp64_replicates(0, 10) == 4);
  CHECK(gate.fp64_replicates(3, 10) == 1);
  CHECK(gate.fp64_replicates(4, 10) == 0);
  std::vector<AlgebraObservation> a(2);
  a[0].discrepancy = 1e-12;
  a[0].worst = {0, 1, {1}, 1};
  a[1].discrepancy = 1e-15;
  gate.observe(ReplicateBatch{0, {}, a, nullptr});
  auto r = gate.decide();
  CHECK(r.verdict == Verdict::pass);
  CHECK(r.replicates == 2);
  CHECK(r.worst_discrepancy == 1e-12);
  CHECK(r.worst.element == 1);

  std::vector<AlgebraObservation> b(1);
  b[0].discrepancy = 0.5;
  b[0].worst = {2, 7, {7}, 3};
  gate.observe(ReplicateBatch{2, {}, b, nullptr});
  r = gate.decide();
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.worst.replicate == 2);

  kcert::gates::AlgebraGate nan_gate(4, 1e-9);
  std::vector<AlgebraObservation> c(2);
  c[0].mismatch = kcert::gates::Location{0, 3, {3}, 0};
  c[1].discrepancy = 1.0;  // larger, but the mismatch is what the reason names
  c[1].worst = {1, 0, {0}, 0};
  nan_gate.observe(ReplicateBatch{0, {}, c, nullptr});
  r = nan_gate.decide();
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.worst.element == 3);
  CHECK(r.reason == "NaN/Inf patterns differ under the fp64 policy at replicate 0, element [3], bucket 0");
}

TEST_CASE("baseline checks flag on replicate 0 and count fractions over the bias gate's R", "[gates][baselines]") {
  kcert::gates::BaselineChecks checks(4, FloatFormat::bf16);
  std::vector<ReplicateObservation> obs(6);
  for (std::size_t i = 0; i < obs.size(); ++i) {
    obs[i].peak = 1.0;
    obs[i].e_ref = 0x1p-7;
    obs[i].rmse_ref = 1e-3;
    // Replicates 0 and 1 exceed FlashAttention's 2x + 1 ULP and dynamo's 3x RMSE rules.
    obs[i].e_prod = i < 2 ? 4 * 0x1p-7 : 0x1p-7;
    obs[i].rmse_prod = i < 2 ? 1e-2 : 1e-3;
    obs[i].close_violations = i == 0 ? 2.0 : 0.0;
  }
  checks.observe(batch(obs));
  const auto b = checks.decide();
  CHECK(b.assert_close.flagged);
  CHECK(b.assert_close.first_value == 2.0);
  CHECK(b.assert_close.fraction == 0.25);
  CHECK(b.flash_attention.flagged);
  CHECK(b.flash_attention.fraction == 0.5);  // 2 of the first 4; replicates 4, 5 are beyond R
  CHECK(b.dynamo_fp64.fraction == 0.5);
  CHECK(checks.wants_more(0) == 0);  // never asks for replicates of its own
}
