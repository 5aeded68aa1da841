#include "harness/numerics/observations.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>

namespace kcert::numerics {

std::vector<std::int64_t> unravel(std::int64_t flat, at::IntArrayRef shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

BucketLayout make_bucket_layout(const torch::Tensor& ids_tensor, at::IntArrayRef output_shape) {
  if (ids_tensor.sizes() != output_shape) {
    throw std::invalid_argument("bucket ids have shape " + c10::str(ids_tensor.sizes()) + " but the output has " +
                                c10::str(output_shape));
  }
  const auto flat = ids_tensor.to(torch::kInt64).contiguous().view(-1);
  BucketLayout layout;
  layout.ids.assign(flat.data_ptr<std::int64_t>(), flat.data_ptr<std::int64_t>() + flat.numel());
  for (auto id : layout.ids) {
    if (id < 0) throw std::invalid_argument("bucket ids must be >= 0, got " + std::to_string(id));
    layout.buckets = std::max(layout.buckets, id + 1);
  }
  layout.counts.assign(static_cast<std::size_t>(layout.buckets), 0);
  for (auto id : layout.ids) ++layout.counts[static_cast<std::size_t>(id)];
  for (std::size_t g = 0; g < layout.counts.size(); ++g) {
    if (layout.counts[g] == 0) throw std::invalid_argument("bucket " + std::to_string(g) + " has no elements");
  }
  // Recognize the two regular layouts so the sweep can run without an id table.
  const auto n = static_cast<std::int64_t>(layout.ids.size());
  const auto G = layout.buckets;
  if (n % G == 0) {
    bool periodic = true, blocked = true;
    for (std::int64_t i = 0; i < n && (periodic || blocked); ++i) {
      periodic &= layout.ids[static_cast<std::size_t>(i)] == i % G;
      blocked &= layout.ids[static_cast<std::size_t>(i)] == i / (n / G);
    }
    layout.pattern = periodic ? detail::BucketPattern::periodic
                   : blocked  ? detail::BucketPattern::blocked
                              : detail::BucketPattern::general;
  }
  return layout;
}

namespace {
std::string describe_nonfinite(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "+inf" : "-inf";
}
}  // namespace

std::pair<double, double> assert_close_tolerances(stats::FloatFormat working) {
  // torch.testing.assert_close defaults (PyTorch docs, "Default tolerances").
  switch (working) {
    case stats::FloatFormat::bf16: return {1.6e-2, 1e-5};
    case stats::FloatFormat::fp16: return {1e-3, 1e-5};
    case stats::FloatFormat::fp32: return {1.3e-6, 1e-5};
    case stats::FloatFormat::fp64: return {1e-7, 1e-7};
  }
  return {0.0, 0.0};
}

namespace {

// Each side's oracle when a selecting family has a second one (see observe()), and the
// per-replicate selection counts. All [B, rows..., E] in fp64 on the CPU.
struct SideOracles {
  torch::Tensor ref, prod;
  std::vector<gates::SelectionCounts> counts;
};

SideOracles resolve_near_ties(const torch::Tensor& ref, const torch::Tensor& prod, const torch::Tensor& oracle,
                              const torch::Tensor& alt) {
  const auto near = (alt != oracle).any(-1);
  const auto closer = [&](const torch::Tensor& side) {
    const auto use_alt = near & ((side - alt).abs().amax(-1) < (side - oracle).abs().amax(-1));
    return torch::where(use_alt.unsqueeze(-1), alt, oracle).contiguous();
  };
  SideOracles out{closer(ref), closer(prod), {}};
  // A flip: the selected set (the nonzero entries) differs from that of the side's oracle.
  const auto flipped = [](const torch::Tensor& side, const torch::Tensor& o) { return ((side != 0) != (o != 0)).any(-1); };
  const auto batch = ref.size(0);
  const auto fp = flipped(prod, out.prod).reshape({batch, -1}), fr = flipped(ref, out.ref).reshape({batch, -1});
  // Per replicate: near ties, flips per side, discordant flips per side, as one [B, 5] table.
  const auto counts = torch::stack({near.reshape({batch, -1}), fp, fr, fp & fr.logical_not(), fr & fp.logical_not()}, 1)
                          .sum(2)
                          .to(torch::kInt64)
                          .contiguous();
  const auto* c = counts.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < batch; ++b, c += 5) out.counts.push_back({fp.size(1), c[0], c[1], c[2], c[3], c[4]});
  return out;
}

}  // namespace

struct BatchSweep::Prepared {
  torch::Tensor ref, prod, oracle;  // contiguous on the CPU; ref and prod as stored or fp64
  std::optional<SideOracles> sides;
  detail::ElementType type = detail::ElementType::f64;
  const double* oracle_ref = nullptr;
  const double* oracle_prod = nullptr;
  const BucketLayout* layout = nullptr;
  std::vector<std::int64_t> shape;
  std::int64_t first = 0, batch = 0, n = 0;
  double rtol = 0.0, atol = 0.0;
  BatchObservations out;
  std::atomic<std::int64_t> next{0};  // the first replicate no thread has taken
  std::atomic<bool> all_finite{true};
  std::mutex mutex;
  std::condition_variable all_done;
  std::int64_t done = 0;  // replicates swept (under mutex)
};

BatchSweep::BatchSweep(const torch::Tensor& ref_t, const torch::Tensor& prod_t, const torch::Tensor& oracle_t,
                       const torch::Tensor& oracle_alt, const BucketLayout& layout, std::int64_t first_replicate,
                       at::IntArrayRef output_shape, stats::FloatFormat working)
    : p_(std::make_unique<Prepared>()) {
  auto& p = *p_;
  std::tie(p.rtol, p.atol) = assert_close_tolerances(working);
  // ref and prod are swept as stored (bf16, fp32) and widened in the sweep: W values are
  // exact in fp64, and fp64 copies of both cost more memory traffic than the sweep itself.
  p.ref = ref_t.to(torch::kCPU).contiguous();
  p.prod = prod_t.to(torch::kCPU).contiguous();
  if (p.ref.scalar_type() == p.prod.scalar_type() && p.ref.scalar_type() == torch::kBFloat16) {
    p.type = detail::ElementType::bf16;
  } else if (p.ref.scalar_type() == p.prod.scalar_type() && p.ref.scalar_type() == torch::kFloat32) {
    p.type = detail::ElementType::f32;
  } else {
    p.ref = p.ref.to(torch::kFloat64);
    p.prod = p.prod.to(torch::kFloat64);
  }
  p.oracle = oracle_t.to(torch::kCPU).to(torch::kFloat64).contiguous();
  if (oracle_alt.defined()) {
    p.sides = resolve_near_ties(p.ref.to(torch::kFloat64), p.prod.to(torch::kFloat64), p.oracle,
                                oracle_alt.to(torch::kCPU).to(torch::kFloat64).contiguous());
  }
  p.oracle_ref = p.sides ? p.sides->ref.data_ptr<double>() : p.oracle.data_ptr<double>();
  p.oracle_prod = p.sides ? p.sides->prod.data_ptr<double>() : p.oracle.data_ptr<double>();
  p.layout = &layout;
  p.shape.assign(output_shape.begin(), output_shape.end());
  p.first = first_replicate;
  p.batch = p.ref.size(0);
  p.n = static_cast<std::int64_t>(layout.ids.size());
  p.out.replicates.resize(static_cast<std::size_t>(p.batch));
}

BatchSweep::~BatchSweep() = default;

void BatchSweep::sweep_one(std::int64_t b) {
  auto& p = *p_;
  const auto& layout = *p.layout;
  const auto G = static_cast<std::size_t>(layout.buckets);
  const auto n = p.n;
  auto& o = p.out.replicates[static_cast<std::size_t>(b)];
  o.delta.assign(G, 0.0);
  o.magnitude.assign(G, 0.0);
  o.abs_oracle.assign(G, 0.0);
  for (auto* v : {&o.ref_error, &o.ref_error_magnitude, &o.prod_error, &o.prod_error_magnitude}) v->assign(G, 0.0);
  detail::SweepOutput sweep_out{o.delta.data(),     o.magnitude.data(),           o.abs_oracle.data(),
                                o.ref_error.data(), o.ref_error_magnitude.data(), o.prod_error.data(),
                                o.prod_error_magnitude.data()};
  // This replicate's rows of both sides (one stored type: BatchSweep's constructor checks it).
  const auto row_bytes = static_cast<std::size_t>(n) * p.ref.element_size();
  const char* ref_row = static_cast<const char*>(p.ref.data_ptr()) + static_cast<std::size_t>(b) * row_bytes;
  const char* prod_row = static_cast<const char*>(p.prod.data_ptr()) + static_cast<std::size_t>(b) * row_bytes;
  detail::sweep(ref_row, prod_row, p.type, p.oracle.data_ptr<double>() + b * n, p.oracle_ref + b * n, p.oracle_prod + b * n, n,
                layout.ids.data(), layout.buckets, layout.pattern, p.rtol, p.atol, sweep_out);
  if (p.sides) o.selection = p.sides->counts[static_cast<std::size_t>(b)];
  if (!sweep_out.finite) p.all_finite = false;
  o.e_prod = sweep_out.e_prod;
  o.rmse_prod = std::sqrt(sweep_out.sse_prod / static_cast<double>(n));
  o.rmse_ref = std::sqrt(sweep_out.sse_ref / static_cast<double>(n));
  o.close_violations = sweep_out.close_violations;
  // Bit-identical sides (same stored type, same bytes): a byte compare, cheaper than the sweep.
  o.same_as_reference = std::memcmp(ref_row, prod_row, row_bytes) == 0;
  o.e_ref = sweep_out.e_ref;
  o.peak = sweep_out.peak;
  for (std::size_t g = 0; g < G; ++g) {
    const auto c = static_cast<double>(layout.counts[g]);
    o.delta[g] /= c;
    o.magnitude[g] /= c;
    o.abs_oracle[g] /= c;
    o.ref_error[g] /= c;
    o.ref_error_magnitude[g] /= c;
    o.prod_error[g] /= c;
    o.prod_error_magnitude[g] /= c;
  }
}

void BatchSweep::help() {
  auto& p = *p_;
  for (auto b = p.next.fetch_add(1); b < p.batch; b = p.next.fetch_add(1)) {
    sweep_one(b);
    const std::lock_guard lock(p.mutex);
    if (++p.done == p.batch) p.all_done.notify_all();
  }
}

BatchObservations BatchSweep::finish(bool parallel) {
  auto& p = *p_;
  swept_at_finish_ = std::max<std::int64_t>(0, p.batch - p.next.load());
  if (swept_at_finish_ > 0) {
    // One help() per intra-op thread: each takes replicates until none is left, so a thread
    // that drew short replicates (or started late) does not leave the others waiting.
    if (parallel) {
      at::parallel_for(0, at::get_num_threads(), 1, [&](std::int64_t, std::int64_t) { help(); });
    } else {
      help();
    }
  }
  {
    std::unique_lock lock(p.mutex);
    p.all_done.wait(lock, [&] { return p.done == p.batch; });
  }
  auto& out = p.out;
  if (!p.all_finite) {
    // Rare path: find the first offending element, in replicate and element order.
    const auto ref64 = p.ref.to(torch::kFloat64), prod64 = p.prod.to(torch::kFloat64);
    const double* pr = ref64.data_ptr<double>();
    const double* pp = prod64.data_ptr<double>();
    const double* po = p.oracle.data_ptr<double>();
    out.replicates.clear();
    const auto n = p.n;
    for (std::int64_t k = 0; k < p.batch * n; ++k) {
      const bool fr = std::isfinite(pr[k]), fp = std::isfinite(pp[k]), fo = std::isfinite(po[k]);
      if (fr && fp && fo) continue;
      const double bad = !fp ? pp[k] : !fr ? pr[k] : po[k];
      const char* side = !fp ? "production" : !fr ? "reference" : "oracle";
      const std::int64_t i = k % n;
      out.nonfinite = gates::NonFinite{side, describe_nonfinite(bad),
                                       gates::Location{p.first + k / n, i, unravel(i, p.shape),
                                                       p.layout->ids[static_cast<std::size_t>(i)]}};
      break;
    }
  }
  return std::move(out);
}

BatchObservations observe(const torch::Tensor& ref, const torch::Tensor& prod, const torch::Tensor& oracle,
                          const torch::Tensor& oracle_alt, const BucketLayout& layout, std::int64_t first_replicate,
                          at::IntArrayRef output_shape, stats::FloatFormat working, bool parallel) {
  return BatchSweep(ref, prod, oracle, oracle_alt, layout, first_replicate, output_shape, working).finish(parallel);
}

std::vector<gates::AlgebraObservation> compare_fp64(const torch::Tensor& ref64_t, const torch::Tensor& prod64_t,
                                                    std::int64_t first, const BucketLayout& layout,
                                                    at::IntArrayRef shape) {
  const auto ref64 = ref64_t.to(torch::kCPU).contiguous();
  const auto prod64 = prod64_t.to(torch::kCPU).contiguous();
  const auto n = static_cast<std::int64_t>(layout.ids.size());
  const double* r = ref64.data_ptr<double>();
  const double* p = prod64.data_ptr<double>();
  const auto location = [&](std::int64_t b, std::int64_t i) {
    return gates::Location{first + b, i, unravel(i, shape), layout.ids[static_cast<std::size_t>(i)]};
  };
  // Replicates are independent, so they are compared on the intra-op threads (this runs on
  // the engine's thread between kernels, when nothing else is).
  std::vector<gates::AlgebraObservation> out(static_cast<std::size_t>(ref64.size(0)));
  at::parallel_for(0, ref64.size(0), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const double* rb = r + b * n;
      const double* pb = p + b * n;
      auto& o = out[static_cast<std::size_t>(b)];
      double max_ref = 0.0, max_diff = 0.0;
      std::int64_t arg = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const bool fr = std::isfinite(rb[i]), fp = std::isfinite(pb[i]);
        if (!fr || !fp) {
          const bool same = (std::isnan(rb[i]) && std::isnan(pb[i])) || (!fr && !fp && rb[i] == pb[i]);
          if (!same && !o.mismatch) o.mismatch = location(b, i);
          continue;
        }
        max_ref = std::max(max_ref, std::fabs(rb[i]));
        const double d = std::fabs(pb[i] - rb[i]);
        if (d > max_diff) {
          max_diff = d;
          arg = i;
        }
      }
      o.discrepancy = max_diff / std::max(max_ref, std::numeric_limits<double>::min());
      o.worst = location(b, arg);
    }
  });
  return out;
}

}  // namespace kcert::numerics
