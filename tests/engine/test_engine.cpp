#include <torch/cuda.h>

#include "tests/catch_torch.hpp"

#include <cmath>
#include <memory>
#include <mutex>
#include <set>

#include "harness/engine/draw.hpp"
#include "harness/engine/engine.hpp"
#include "harness/engine/gradient_pair.hpp"
#include "harness/gates/bias_gate.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/math_modes.hpp"
#include "harness/stats/random.hpp"
#include "harness/store/json.hpp"
#include "harness/testcase/loader.hpp"

using kcert::stats::Verdict;

namespace {

kcert::kernels::Registry builtin_registry() {
  kcert::kernels::Registry r;
  kcert::kernels::register_builtin_families(r);
  return r;
}

kcert::contract::TestCase rmsnorm_case(const kcert::kernels::Registry& registry, const std::string& ref,
                                       const std::string& prod, const std::string& weights = "zero_centred") {
  kcert::testcase::FamilySchemas schemas;
  schemas.emplace("rmsnorm", registry.family("rmsnorm").schema());
  const std::string yaml = "schema: 1\nid: t\nkind: negative\nfamily: rmsnorm\nmechanism: m\nreferences: []\n"
                           "reference: {variant: " + ref + "}\nproduction: {variant: " + prod + "}\n"
                           "probe: {dtype: bf16, seed: 5, shift: 0.5, shape: {tokens: 16, hidden: 32}, "
                           "weights: {kind: " + weights + ", spread: 0.5}}\n"
                           "gates: {replicates: 64, max_replicates: 256}\n";
  return kcert::testcase::parse_testcase(yaml, "t.yaml", schemas);
}

// A case that runs in a moment: what it computes does not matter, only what the engine does
// around it.
kcert::contract::TestCase tiny_case(const kcert::kernels::Registry& registry) {
  auto tc = rmsnorm_case(registry, "gemma", "gemma_offset_in_w");
  tc.gates.replicates = 8;
  tc.gates.max_replicates = 8;
  tc.gates.algebra_replicates = 2;
  return tc;
}

}  // namespace

TEST_CASE("a NaN from a kernel is a FAIL with its location, not a crash", "[engine]") {
  auto registry = builtin_registry();
  // A production variant that poisons element (3, 5) whenever that input is large.
  kcert::kernels::Variant poisoned{{"poisoned", "test/1", "NaN at (3, 5) when x > 1.5", {{"eps", kcert::kernels::ParamType::number, kcert::kernels::ParamValue{1e-6}}}},
                                   [](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                      const kcert::kernels::ParamMap&) {
                                     const auto u = p.up(in.at("x"));
                                     auto y = u * torch::rsqrt(u.pow(2).mean(-1, true) + 1e-6) * (1.0 + p.up(in.at("w")));
                                     auto bad = u.select(1, 3).select(1, 5) > 1.5;
                                     y.select(1, 3).select(1, 5).masked_fill_(bad, std::nan(""));
                                     return p.round_w(y);
                                   }};
  registry.add_variant("rmsnorm", poisoned);
  const auto result = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "poisoned"), registry, {});
  CHECK(result.verdict == Verdict::fail);
  REQUIRE(result.nonfinite);
  CHECK(result.nonfinite->side == "production");
  CHECK(result.nonfinite->value == "nan");
  CHECK(result.nonfinite->where.index == std::vector<int64_t>({3, 5}));
  CHECK(result.nonfinite->where.bucket == 5);
  CHECK(result.bias.verdict == Verdict::fail);
  CHECK_THAT(result.variance.reason, Catch::Contains("non-finite output (nan) from the production"));
  CHECK(result.error.empty());
}

// Beside the next batch (the schedule where kernels run on a GPU, engine.cpp), a batch is
// swept while the next one is evaluated. A run that meets a non-finite value must still stop
// where a sequential run stops: the batch evaluated ahead is neither counted nor allowed to
// fail the run. After the kernels (the CPU's schedule) nothing is evaluated ahead.
TEST_CASE("a non-finite batch ends the run where a sequential run ends it, whatever was evaluated ahead", "[engine]") {
  using kcert::engine::SweepSchedule;
  // automatic: after the kernels, since these run on the CPU.
  for (const auto schedule : {SweepSchedule::beside_next_batch, SweepSchedule::after_kernels, SweepSchedule::automatic}) {
    auto registry = builtin_registry();
    const auto gemma = registry.variant("rmsnorm", "gemma").fn;
    // NaN in the first working-precision call (the first batch); the second call, which only
    // the look-ahead makes, throws.
    auto calls = std::make_shared<int>(0);
    registry.add_variant("rmsnorm", {{"nan_then_throw", "test/1", "", {{"eps", kcert::kernels::ParamType::number, kcert::kernels::ParamValue{1e-6}}}},
                                     [gemma, calls](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                                    const kcert::kernels::ParamMap& prm) {
                                       auto y = gemma(in, p, prm);
                                       if (p.is_exact()) return y;
                                       if (++*calls == 2) throw std::runtime_error("evaluated past a non-finite batch");
                                       return y.fill_(std::nan(""));
                                     }});
    kcert::engine::RunOptions options;
    options.sweep = schedule;
    const auto result = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "nan_then_throw"), registry, options);
    CHECK(*calls == (schedule == SweepSchedule::beside_next_batch ? 2 : 1));  // the look-ahead, where there is one, ran it
    REQUIRE(result.nonfinite);
    CHECK(result.nonfinite->where.replicate == 0);
    CHECK(result.replicates == 1);  // only the first batch (one replicate) counts
    CHECK(result.verdict == Verdict::fail);
    CHECK(result.error.empty());
  }

  auto registry = builtin_registry();
  const auto gemma = registry.variant("rmsnorm", "gemma").fn;
  // A NaN further in: the same stop (the location and the replicate count) with one
  // replicate per batch as with four.
  kcert::kernels::Variant late{{"late_nan", "test/1", "", {{"eps", kcert::kernels::ParamType::number, kcert::kernels::ParamValue{1e-6}}}},
                               [gemma](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                       const kcert::kernels::ParamMap& prm) {
                                 auto y = gemma(in, p, prm);
                                 auto bad = p.up(in.at("x")).select(1, 2).select(1, 7) > 1.9;
                                 y.select(1, 2).select(1, 7).masked_fill_(bad, std::nan(""));
                                 return y;
                               }};
  registry.add_variant("rmsnorm", late);
  for (const auto schedule : {kcert::engine::SweepSchedule::beside_next_batch, kcert::engine::SweepSchedule::after_kernels}) {
    kcert::engine::RunOptions one, four;
    one.batch = 1;
    four.batch = 4;
    one.sweep = four.sweep = schedule;
    const auto a = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "late_nan"), registry, one);
    const auto b = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "late_nan"), registry, four);
    REQUIRE(a.nonfinite);
    REQUIRE(b.nonfinite);
    const auto first = a.nonfinite->where.replicate;
    CHECK(first > 0);  // the probe makes x > 1.9 at one element rare enough to need a few replicates
    CHECK(b.nonfinite->where.replicate == first);
    CHECK(a.replicates == static_cast<std::uint64_t>(first) + 1);
    // Batches of four from replicate 0 (a given batch size applies from the first call): the
    // run ends with the batch that holds `first`.
    CHECK(b.replicates == static_cast<std::uint64_t>(4 * (first / 4 + 1)));
  }
}

TEST_CASE("a variant that returns the wrong dtype is a clear harness error", "[engine]") {
  auto registry = builtin_registry();
  registry.add_variant("rmsnorm", {{"forgot_round", "test/1", "", {}},
                                   [](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                      const kcert::kernels::ParamMap&) { return p.up(in.at("x")); }});
  CHECK_THROWS_WITH(kcert::engine::run_case(rmsnorm_case(registry, "gemma", "forgot_round"), registry, {}),
                    Catch::Contains("production variant 'forgot_round' returned Float, expected BFloat16"));
  CHECK_THROWS_WITH(registry.add_variant("rmsnorm", {{"gemma", "x", "", {}}, nullptr}), Catch::Contains("already registered"));
}

// at::parallel_for is a LibTorch header template whose OpenMP region is compiled into the
// caller: built without -fopenmp, kcert's draw ran every replicate on one thread while
// docs and comments said it was parallel (found 2026-12-02). A family that records the
// intra-op thread of each draw shows which it is.
TEST_CASE("a batch's replicates are drawn on every intra-op thread", "[engine][threads]") {
  std::mutex m;
  std::set<int> threads_seen;
  kcert::kernels::Family family;
  family.name = "threads";
  family.make_replicate = [&](const kcert::kernels::ProbeContract&, const kcert::kernels::KernelInputs&,
                              std::uint64_t seed) {
    {
      const std::lock_guard<std::mutex> lock(m);
      threads_seen.insert(at::get_thread_num());
    }
    kcert::kernels::KernelInputs in;
    in.set("x", torch::full({2}, static_cast<double>(seed % 1000)));
    return in;
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const auto drawn = kcert::engine::draw_replicates(family, kcert::kernels::ProbeContract{}, {}, 7, 0, 8);
  at::set_num_threads(threads);
  CHECK(threads_seen == std::set<int>{0, 1});
  // Each replicate comes from its own seed and lands in its own row, whichever thread drew it.
  REQUIRE(drawn.at("x").sizes() == at::IntArrayRef({8, 2}));
  for (std::uint64_t r = 0; r < 8; ++r) {
    CHECK(drawn.at("x")[static_cast<std::int64_t>(r)][0].item<double>() ==
          static_cast<double>(kcert::stats::derive_seed(7, r) % 1000));
  }
}

TEST_CASE("the same case and seed give identical results across batch sizes and threads", "[engine][determinism]") {
  const auto registry = builtin_registry();
  const auto tc = rmsnorm_case(registry, "gemma", "gemma_offset_in_w");
  kcert::engine::RunOptions one, seven;
  one.batch = 1;
  seven.batch = 7;
  // One run sweeps each batch after its kernels, the other beside the next batch.
  one.sweep = kcert::engine::SweepSchedule::after_kernels;
  seven.sweep = kcert::engine::SweepSchedule::beside_next_batch;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto a = kcert::engine::run_case(tc, registry, one);
  at::set_num_threads(std::max(2, threads));
  const auto b = kcert::engine::run_case(tc, registry, seven);
  at::set_num_threads(threads);
  const auto ja = kcert::store::without_runtime(kcert::store::results_document({a}, "x")).dump();
  const auto jb = kcert::store::without_runtime(kcert::store::results_document({b}, "x")).dump();
  CHECK(ja == jb);
  CHECK(a.bias.verdict == Verdict::fail);  // N1's defect at this small shape is still caught
  // A different seed gives different numbers.
  kcert::engine::RunOptions other;
  other.seed = 6;
  const auto c = kcert::engine::run_case(tc, registry, other);
  CHECK(kcert::store::without_runtime(kcert::store::results_document({c}, "x")).dump() != ja);
}

TEST_CASE("the algebra gate reports a different function with its worst location", "[engine]") {
  const auto registry = builtin_registry();
  const auto r = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "fused_weight_fp32"), registry, {});
  CHECK(r.algebra.verdict == Verdict::fail);
  CHECK(r.algebra.replicates == 16);
  CHECK(r.algebra.worst_discrepancy > 0.1);
  CHECK(r.algebra.worst.index.size() == 2);
  CHECK_THAT(r.algebra.reason, Catch::Contains("different real functions"));
  const auto same = kcert::engine::run_case(rmsnorm_case(registry, "gemma", "gemma_offset_in_w"), registry, {});
  CHECK(same.algebra.verdict == Verdict::pass);
  CHECK(same.algebra.worst_discrepancy == 0.0);
}

TEST_CASE("a case runs under its own math modes and leaves the run's in ATen's context", "[engine][math_modes]") {
  const auto registry = builtin_registry();
  auto tc = tiny_case(registry);
  tc.math_modes.tf32_matmul = true;
  tc.math_modes.cudnn_benchmark = true;
  const auto r = kcert::engine::run_case(tc, registry, {});
  CHECK(r.math_modes.tf32_matmul == true);
  CHECK(r.math_modes.cudnn_benchmark == true);
  CHECK(r.math_modes.tf32_cudnn == false);  // the run's pinned value
  const auto now = kcert::numerics::current_math_modes();
  CHECK(now.tf32_matmul == false);
  CHECK(now.cudnn_benchmark == false);
  const auto doc = kcert::store::results_document({r}, "x");
  CHECK(doc["results"][0]["provenance"]["math_modes"]["tf32_matmul"] == true);
}

TEST_CASE("a release threshold's expectation applies from that release on, the newest one that holds", "[engine]") {
  const auto registry = builtin_registry();
  auto tc = tiny_case(registry);
  tc.expected.gates["algebra"] = {Verdict::pass};
  kcert::contract::Expectation old_release, any_release, future;
  old_release.gates["algebra"] = {Verdict::warn};
  any_release.gates["algebra"] = {Verdict::fail};
  future.gates["algebra"] = {Verdict::pass, Verdict::warn};
  tc.expected_on["libtorch>=0.1"] = old_release;
  tc.expected_on["libtorch>=1.0"] = any_release;
  tc.expected_on["libtorch>=99.0"] = future;
  const auto r = kcert::engine::run_case(tc, registry, {});
  CHECK(r.testcase.expected.condition == "libtorch>=1.0");
  const auto& algebra = r.testcase.expected.gates.at("algebra");
  REQUIRE(algebra.size() == 1);
  CHECK(algebra.front() == Verdict::fail);
}

TEST_CASE("the cuda device is refused clearly on a CPU-only LibTorch", "[engine]") {
  if (torch::cuda::is_available()) return;  // on a GPU machine the device exists
  const auto registry = builtin_registry();
  kcert::engine::RunOptions o;
  o.device = "cuda";
  CHECK_THROWS_WITH(kcert::engine::run_case(rmsnorm_case(registry, "gemma", "gemma"), registry, o),
                    Catch::Contains("no usable CUDA device"));
}


TEST_CASE("a swept case shows each gate's worst setting and names it", "[engine][sweep]") {
  // A production identical to the reference except on rows whose mean is negative, where it
  // scales the output by 1 + 2^-5: the contract's probe (shift +0.5) never reaches that
  // region, the setting `negatives` (shift -3) always does.
  auto registry = builtin_registry();
  kcert::kernels::Variant regional{{"gain_when_negative", "test/1", "gemma, times 1 + 2^-5 on rows of negative mean",
                                    {{"eps", kcert::kernels::ParamType::number, kcert::kernels::ParamValue{1e-6}}}},
                                   [](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                      const kcert::kernels::ParamMap&) {
                                     const auto u = p.up(in.at("x"));
                                     auto y = p.round_w(u * torch::rsqrt(u.pow(2).mean(-1, true) + 1e-6)) * (1.0 + p.up(in.at("w")));
                                     const auto negative = u.mean(-1, true) < 0;
                                     y = torch::where(negative, y * (1.0 + std::ldexp(1.0, -5)), y);
                                     return p.round_w(y);
                                   }};
  registry.add_variant("rmsnorm", regional);
  kcert::testcase::FamilySchemas schemas;
  schemas.emplace("rmsnorm", registry.family("rmsnorm").schema());
  const std::string yaml =
      "schema: 1\nid: swept\nkind: negative\nfamily: rmsnorm\nmechanism: m\nreferences: []\n"
      "reference: {variant: gemma}\nproduction: {variant: gain_when_negative}\n"
      "probe: {dtype: bf16, seed: 5, shift: 0.5, shape: {tokens: 16, hidden: 32}, weights: {kind: zero_centred, spread: 0.5}}\n"
      "gates: {replicates: 32, max_replicates: 32, algebra: {replicates: 2}}\n"
      "sweep:\n  - {name: negatives, probe: {shift: -3.0}}\n"
      "expected: {bias: FAIL}\n";
  const auto tc = kcert::testcase::parse_testcase(yaml, "swept.yaml", schemas);
  REQUIRE(tc.sweep.size() == 1);
  const auto r = kcert::engine::run_case(tc, registry, {});
  REQUIRE(r.sweep.size() == 2);
  CHECK(r.sweep[0].name == "contract");
  CHECK(r.sweep[0].bias == Verdict::pass);  // bit-identical on rows of positive mean
  CHECK(r.sweep[1].name == "negatives");
  CHECK(r.sweep[1].bias == Verdict::fail);
  CHECK(r.sweep[1].probe_text == "{shift: -3.0}");
  CHECK(r.bias.verdict == Verdict::fail);  // the worst setting's result
  CHECK(r.decided_by.at("bias") == "negatives");
  CHECK(r.decided_by.at("overall") == "negatives");
  CHECK(r.verdict == Verdict::fail);
  CHECK(r.unexpected.empty());  // the expectation holds for the worst verdicts
  CHECK(r.replicates == r.sweep[0].replicates + r.sweep[1].replicates);
  CHECK(r.testcase.probe.shift == 0.5);  // the contract's probe, as loaded
}

namespace {

kcert::contract::TestCase backward_case(const kcert::kernels::Registry& registry, const std::string& ref,
                                        const std::string& prod, const std::string& backward) {
  kcert::testcase::FamilySchemas schemas;
  schemas.emplace("rmsnorm", registry.family("rmsnorm").schema());
  const std::string yaml = "schema: 1\nid: bw\nkind: negative\nfamily: rmsnorm\nmechanism: m\nreferences: []\n"
                           "direction: backward\n"
                           "reference: {variant: " + ref + "}\nproduction: {variant: " + prod + "}\n"
                           "probe: {dtype: bf16, seed: 5, shape: {tokens: 64, hidden: 32}}\n" + backward +
                           // 64: the fewest replicates a PASS rests on (VarianceSettings::min_replicates).
                           "gates: {replicates: 64, max_replicates: 64, algebra: {replicates: 2}}\n";
  return kcert::testcase::parse_testcase(yaml, "bw.yaml", schemas);
}

}  // namespace

TEST_CASE("a backward case runs the gates on every gradient and names the one that decided", "[engine][backward]") {
  const auto registry = builtin_registry();
  SECTION("a missing dW is a structural algebra FAIL on dw; dx passes") {
    const auto tc = backward_case(registry, "llama", "missing_dw", "");
    const auto r = kcert::engine::run_case(tc, registry, {});
    REQUIRE(r.gradients.size() == 2);
    CHECK(r.gradients[0].name == "dx");
    CHECK(r.gradients[0].algebra == Verdict::pass);
    CHECK(r.gradients[1].name == "dw");
    CHECK(r.gradients[1].algebra == Verdict::fail);
    CHECK(r.gradients[1].reduction_size == 64);
    CHECK(r.gradients[1].bucket_axis == "element");
    CHECK(r.gradients[1].shape == std::vector<std::int64_t>{32});
    CHECK(r.algebra.verdict == Verdict::fail);
    CHECK_THAT(r.algebra.reason, Catch::Contains("no gradient for w (dw)"));
    CHECK(r.gradient_decided_by.at("algebra") == "dw");
    const auto j = kcert::store::to_json(r);
    CHECK(j.at("direction") == "backward");
    CHECK(j.at("backward").at("gradients").size() == 2);
    CHECK(j.at("backward").at("decided_by").at("algebra") == "dw");
    // Per-gradient expectations are checked beside the case's worst-over-gradients ones.
    auto judged = r;
    judged.testcase.expected.gates = {{"algebra", {Verdict::fail}}};
    judged.testcase.expected.gradients = {{"dx", {{"algebra", {Verdict::fail}}}}, {"dw", {{"algebra", {Verdict::fail}}}}};
    const auto missed = kcert::engine::check_expectation(judged);
    REQUIRE(missed.size() == 1);
    CHECK(missed[0] == "dx: algebra: expected FAIL, got PASS");
    judged.testcase.expected.gradients = {{"dx", {{"algebra", {Verdict::pass}}}}, {"dw", {{"algebra", {Verdict::fail}}}}};
    CHECK(kcert::engine::check_expectation(judged).empty());
  }
  SECTION("the same pair on one gradient only; a production identical to the reference passes bit for bit") {
    const auto tc = backward_case(registry, "llama", "llama", "backward: {gradients: [dw]}\n");
    const auto r = kcert::engine::run_case(tc, registry, {});
    REQUIRE(r.gradients.size() == 1);
    CHECK(r.verdict == Verdict::pass);
    CHECK(r.bias.verdict == Verdict::pass);
    CHECK(r.gradients[0].max_abs_z == 0.0);
  }
  SECTION("the dy probe is the same bits for any batch size") {
    const auto tc = backward_case(registry, "llama", "liger_block_dw_bf16", "backward: {gradients: [dw]}\n");
    kcert::engine::RunOptions a, b;
    a.batch = 1;
    b.batch = 7;
    const auto ra = kcert::engine::run_case(tc, registry, a), rb = kcert::engine::run_case(tc, registry, b);
    CHECK(ra.gradients[0].max_abs_z == rb.gradients[0].max_abs_z);
    CHECK(ra.variance.tail.U == rb.variance.tail.U);
  }
}

TEST_CASE("a case in both directions runs as two results, forward and backward, each judged by its own expectation",
          "[engine][backward]") {
  const auto registry = builtin_registry();
  kcert::testcase::FamilySchemas schemas;
  schemas.emplace("rmsnorm", registry.family("rmsnorm").schema());
  const std::string yaml = "schema: 1\nid: two\nkind: negative\nfamily: rmsnorm\nmechanism: m\nreferences: []\n"
                           "direction: both\nreference: {variant: llama}\nproduction: {variant: missing_dw}\n"
                           "probe: {dtype: bf16, seed: 5, shape: {tokens: 64, hidden: 32}}\n"
                           "gates: {replicates: 32, max_replicates: 32, algebra: {replicates: 2}}\n"
                           "expected:\n  forward: {algebra: PASS}\n  backward: {algebra: FAIL, gradients: {dw: {algebra: FAIL}}}\n";
  const auto cases = kcert::testcase::parse_testcases(yaml, "two.yaml", schemas);
  REQUIRE(cases.size() == 2);
  // missing_dw's forward is llama's: the forward passes algebra, the backward has no dW.
  const auto f = kcert::engine::run_case(cases[0], registry, {});
  const auto b = kcert::engine::run_case(cases[1], registry, {});
  CHECK(f.algebra.verdict == Verdict::pass);
  CHECK(f.gradients.empty());
  CHECK(f.unexpected.empty());
  CHECK(b.algebra.verdict == Verdict::fail);
  CHECK(b.unexpected.empty());
  const auto jf = kcert::store::to_json(f), jb = kcert::store::to_json(b);
  CHECK(jf.at("id") == "two");
  CHECK(jb.at("id") == "two@backward");
  CHECK(jf.at("case").at("id") == "two");
  CHECK(jb.at("case").at("id") == "two");
  CHECK(jb.at("expected").at("gradients").at("dw").at("algebra")[0] == "FAIL");
}

TEST_CASE("the dy probe's kinds and stress rows", "[engine][backward]") {
  const auto y = torch::zeros({64, 32}, torch::kFloat64);
  kcert::contract::BackwardProbe p;
  const auto draw = [&](std::uint64_t seed) {
    kcert::kernels::InputStream s(seed);
    return kcert::engine::draw_dy(s, y, p);
  };
  SECTION("loss_shaped: each row a cross-entropy gradient, summing to 0 with one confident target") {
    p.dy_law = kcert::contract::DyLaw::loss_shaped;
    p.dy_margin = 8.0;
    const auto dy = draw(3);
    CHECK(dy.sizes() == y.sizes());
    CHECK(dy.sum(1).abs().max().item<double>() < 1e-12);
    // One negative entry per row (the target), -(1 - p_t) with p_t ~ 0.98 at margin 8 over 32
    // lanes: a confident row's gradient is small everywhere, the regime of BN16/BN17.
    CHECK((dy < 0).sum(1).eq(1).all().item<bool>());
    const double target = std::get<0>(dy.min(1)).mean().item<double>();
    CHECK(target < -0.005);
    CHECK(target > -0.1);
  }
  SECTION("heavy_tailed: Student t with 3 df, far heavier tails than the Gaussian") {
    p.dy_law = kcert::contract::DyLaw::heavy_tailed;
    p.dy_shift = 0.0;
    const auto dy = draw(4);
    const auto big = (dy.abs() > 6.0).sum().item<double>() / static_cast<double>(dy.numel());
    CHECK(big > 1e-3);  // P(|t3| > 6) = 0.0093; a Gaussian's is 2e-9
    CHECK(big < 3e-2);
  }
  SECTION("stress rows: evenly spaced zero rows and one huge last row, on any kind") {
    p.dy_law = kcert::contract::DyLaw::zero_mean;
    p.dy_shift = 0.0;
    p.dy_zero_rows = 4;
    p.dy_huge_row = 256.0;
    const auto dy = draw(5);
    for (int r : {0, 16, 32, 48}) CHECK(dy[r].abs().max().item<double>() == 0.0);
    CHECK(dy[1].abs().max().item<double>() > 0.0);
    CHECK(dy[63].abs().max().item<double>() > 100.0);
    p.dy_zero_rows = 0;
    p.dy_huge_row = 1.0;
    const auto plain = draw(5);
    CHECK(torch::equal(dy[1], plain[1]));  // the same stream: the other rows are unchanged
    CHECK(torch::allclose(dy[63], plain[63] * 256.0));
  }
  SECTION("the same seed gives the same bits") {
    p.dy_law = kcert::contract::DyLaw::heavy_tailed;
    CHECK(torch::equal(draw(9), draw(9)));
  }
}

TEST_CASE("a selecting family's second oracle, computed only where the reference noted a near tie, is the whole "
          "flipped run's", "[engine][router][selection]") {
  // The built-in router notes its near ties (numerics::Precision::NearTieNotes) and the engine
  // evaluates the flipped oracle only for the replicates and rows that hold one (issue 37). The
  // same kernel behind a wrapper that hides the notes is evaluated whole under the flipping
  // policy, as a Python or plugin kernel is: both runs must give the same document.
  auto registry = builtin_registry();
  const auto& configurable = registry.variant("router", "configurable");
  auto unnoted = configurable;
  unnoted.schema.name = "configurable_unnoted";
  unnoted.fn = [fn = configurable.fn](const kcert::kernels::KernelInputs& in, const kcert::numerics::Precision& p,
                                      const kcert::kernels::ParamMap& prm) {
    return fn(in, p.near_tie_notes() ? kcert::numerics::Precision::exact() : p, prm);
  };
  registry.add_variant("router", unnoted);
  kcert::testcase::FamilySchemas schemas;
  schemas.emplace("router", registry.family("router").schema());
  // bf16 logits over four experts, top 1: a near tie in a few decisions in a hundred, so a
  // batch holds replicates with one and without.
  const auto yaml = [](const std::string& ref) {
    return "schema: 1\nid: near\nkind: positive\nfamily: router\nmechanism: m\nreferences: []\ndirection: both\n"
           "reference: {variant: " + ref + ", params: {logits: w}}\n"
           "production: {variant: configurable, params: {logits: w, softmax: fused_dtype}}\n"
           "probe: {dtype: bf16, seed: 6, scale: 8.0, shape: {tokens: 8, hidden: 64, experts: 4}, "
           "router: {top_k: 1, weight_dtype: w}}\n"
           "gates: {replicates: 64, max_replicates: 64, algebra: {replicates: 2}}\n";
  };
  const auto noted = kcert::testcase::parse_testcases(yaml("configurable"), "near.yaml", schemas);
  const auto whole = kcert::testcase::parse_testcases(yaml("configurable_unnoted"), "near.yaml", schemas);
  REQUIRE(noted.size() == 2);
  for (std::size_t i = 0; i < noted.size(); ++i) {
    INFO(noted[i].id);
    kcert::engine::RunOptions options;
    options.batch = 8;
    const auto a = kcert::engine::run_case(noted[i], registry, options);
    const auto b = kcert::engine::run_case(whole[i], registry, options);
    REQUIRE(a.variance.selection);
    const auto& counts = a.variance.selection->counts;
    CHECK(counts.near_ties > 0);
    CHECK(counts.near_ties < counts.decisions / 16);  // most replicates are taken from the oracle
    auto ja = kcert::store::without_runtime(kcert::store::results_document({a}, "x")).dump();
    auto jb = kcert::store::without_runtime(kcert::store::results_document({b}, "x")).dump();
    for (std::size_t at = jb.find("configurable_unnoted"); at != std::string::npos; at = jb.find("configurable_unnoted"))
      jb.replace(at, std::string("configurable_unnoted").size(), "configurable");
    CHECK(ja == jb);
  }
}
