#include "tests/catch_torch.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/engine/draw.hpp"
#include "harness/engine/row_blocks.hpp"
#include "harness/kernels/registry.hpp"
#include "tests/kernels/builtin_registry.hpp"

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::numerics::Precision;

namespace {

const kcert::kernels::Registry& registry() { return kcert::test::builtin_registry(); }

kcert::kernels::ProbeContract probe_of(const kcert::kernels::Family& f, kcert::stats::FloatFormat dtype) {
  kcert::kernels::ProbeContract p;
  p.dtype = dtype;
  p.shift = 0.25;
  p.scale = 2.0;
  for (const auto& spec : f.probe_params) {
    if (spec.default_value) p.params.set(spec.name, *spec.default_value);
  }
  // Large enough that ATen splits the whole batch's operators across threads, with a row count
  // that no block size below divides.
  if (p.params.has("shape.tokens")) p.params.set("shape.tokens", std::int64_t{401});
  return p;
}

}  // namespace

TEST_CASE("a row-separable family's variants give the same bits block by block as over the whole batch",
          "[engine][row_blocks]") {
  // The engine evaluates these families in blocks of rows (issue 37); this is the claim that
  // makes it a pure speed change, checked for every built-in variant, at W and under fp64, with
  // blocks of a few rows and of many, the last one short, run across the intra-op threads.
  torch::NoGradGuard no_grad;
  int families = 0;
  for (const auto& name : registry().family_names()) {
    const auto& f = registry().family(name);
    if (!f.row_separable) continue;
    ++families;
    for (const auto dtype : {kcert::stats::FloatFormat::bf16, kcert::stats::FloatFormat::fp32}) {
      const auto probe = probe_of(f, dtype);
      const auto fixed_cpu = f.make_fixed(probe, 11);
      const auto batch = kcert::engine::draw_replicates(f, probe, fixed_cpu, 12, 0, 3);
      for (const auto& [variant_name, v] : f.variants) {
        if (!v.unavailable.empty()) continue;
        const auto params = kcert::test::default_params(v);
        for (const auto& policy : {Precision::working(dtype), Precision::exact()}) {
          const std::optional<torch::Dtype> as =
              policy.is_exact() ? std::optional<torch::Dtype>(torch::kFloat64) : std::nullopt;
          const auto fixed = kcert::engine::to_inputs(fixed_cpu, torch::kCPU, as);
          const auto inputs = kcert::engine::to_inputs(batch, torch::kCPU, as);
          // The reference is the whole batch on one thread: on several, ATen ends each thread's
          // chunk of an elementwise operator with its scalar function, and where a chunk does
          // not end on a multiple of 64 elements an exp or erf there may differ in the last bit
          // with the thread count (row_blocks.hpp); the blocks never do.
          const int threads = at::get_num_threads();
          at::set_num_threads(1);
          const auto whole = v.fn(kcert::engine::merge(fixed, inputs), policy, params);
          at::set_num_threads(threads);
          const auto width = inputs.tensors().begin()->second.size(-1);
          for (const std::int64_t rows_per_block : {7, 64, 500}) {
            INFO(name << " / " << variant_name << " / " << policy.name() << " / rows per block " << rows_per_block);
            const auto blocked =
                kcert::engine::evaluate_in_row_blocks(v.fn, fixed, inputs, policy, params, rows_per_block * width);
            REQUIRE(blocked.defined());
            CHECK(blocked.sizes() == whole.sizes());
            CHECK(blocked.scalar_type() == whole.scalar_type());
            CHECK(torch::equal(blocked, whole));
          }
        }
      }
    }
  }
  CHECK(families >= 4);  // rmsnorm, residual_rmsnorm, layernorm, activation
}

TEST_CASE("row blocks are declined where they would not be row for row", "[engine][row_blocks]") {
  torch::NoGradGuard no_grad;
  const auto p = Precision::working(kcert::stats::FloatFormat::fp32);
  KernelInputs batch;
  batch.set("x", torch::randn({2, 8, 64}));
  const kcert::kernels::KernelFn identity = [](const KernelInputs& in, const Precision&, const ParamMap&) {
    return in.at("x");
  };
  // One block would hold every row: nothing to gain.
  CHECK_FALSE(kcert::engine::evaluate_in_row_blocks(identity, {}, batch, p, {}, 16 * 64).defined());
  // Blocks of 4 rows: the identity comes back whole.
  const auto y = kcert::engine::evaluate_in_row_blocks(identity, {}, batch, p, {}, 4 * 64);
  REQUIRE(y.defined());
  CHECK(torch::equal(y, batch.at("x")));
  // A block holds two rows at least, however wide a row (but the last, which may hold one).
  std::mutex seen_mutex;
  std::vector<std::int64_t> seen;
  const kcert::kernels::KernelFn recording = [&](const KernelInputs& in, const Precision&, const ParamMap&) {
    std::lock_guard<std::mutex> lock(seen_mutex);
    seen.push_back(in.at("x").size(0));
    return in.at("x");
  };
  KernelInputs odd;
  odd.set("x", torch::randn({3, 5, 64}));  // 15 rows: blocks of 2, the last of 1
  const auto two = kcert::engine::evaluate_in_row_blocks(recording, {}, odd, p, {}, 1);
  REQUIRE(two.defined());
  CHECK(torch::equal(two, odd.at("x")));
  CHECK(seen.size() == 8);
  CHECK(std::count(seen.begin(), seen.end(), 2) == 7);
  CHECK(std::count(seen.begin(), seen.end(), 1) == 1);
  // Inputs whose rows differ cannot be blocked together.
  auto uneven = batch;
  uneven.set("r", torch::randn({2, 7, 64}));
  CHECK_FALSE(kcert::engine::evaluate_in_row_blocks(identity, {}, uneven, p, {}, 4 * 64).defined());
  // A width that is not a multiple of 64 would put ATen's scalar tail of a vectorized loop
  // at every block's end: evaluated whole.
  KernelInputs narrow;
  narrow.set("x", torch::randn({2, 8, 250}));
  CHECK_FALSE(kcert::engine::evaluate_in_row_blocks(identity, {}, narrow, p, {}, 4 * 250).defined());
  // A kernel that reduces over rows (one output row per block) is not row-separable.
  const kcert::kernels::KernelFn row_sum = [](const KernelInputs& in, const Precision&, const ParamMap&) {
    return in.at("x").sum(0, true);
  };
  CHECK_FALSE(kcert::engine::evaluate_in_row_blocks(row_sum, {}, batch, p, {}, 4 * 64).defined());
  // A kernel that throws in a block: the exception reaches the caller (the case's error).
  const kcert::kernels::KernelFn throws = [](const KernelInputs&, const Precision&, const ParamMap&) -> torch::Tensor {
    throw std::invalid_argument("a kernel's own error");
  };
  CHECK_THROWS_WITH(kcert::engine::evaluate_in_row_blocks(throws, {}, batch, p, {}, 4 * 64),
                    Catch::Contains("a kernel's own error"));
}

TEST_CASE("only a family's own row-for-row variants are blocked", "[engine][row_blocks]") {
  // Opt-in (Variant::in_row_blocks): the built-in variants of the row-separable families, but
  // not N4's sequential accumulator, nor a variant a test or a plugin adds.
  const auto& r = registry();
  CHECK(r.variant("rmsnorm", "llama").in_row_blocks);
  CHECK(r.variant("activation", "silu_fp32").in_row_blocks);
  CHECK_FALSE(r.variant("rmsnorm", "llama_bf16_sequential_sumsq").in_row_blocks);
  auto added = r.variant("rmsnorm", "llama");
  kcert::kernels::Variant fresh{added.schema, added.fn, {}, {}};
  CHECK_FALSE(fresh.in_row_blocks);
  CHECK_FALSE(r.family("router").row_separable);
}
