#include "harness/engine/batch_pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <memory>

#include "harness/kernels/footprint.hpp"
#include "harness/numerics/process_policy.hpp"

namespace kcert::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes one kernel call may hold. Measured on the loss family (2 M logits per replicate):
// 256 replicates per call held 10.9 GB and spent 48 % of the CPU in page faults; 8 per call
// (664 MB) ran 2.2x faster (issue 17). A few hundred MiB keeps every family far from both.
constexpr double kBatchBytes = 256.0 * 1024 * 1024;
constexpr std::int64_t kMaxBatch = 256;

std::int64_t batch_for(const kernels::MemoryEstimate& m) {
  const double fit = std::floor(std::max(0.0, kBatchBytes - m.per_call) / std::max(1.0, m.per_replicate()));
  return static_cast<std::int64_t>(std::clamp(fit, 1.0, static_cast<double>(kMaxBatch)));
}

// Replicates per kernel call: from the family's footprint (kernels/footprint.hpp) when kcert
// knows the family, else from the bytes of the first replicate's own tensors (a plugin's),
// counted with the same copy factors.
std::int64_t automatic_batch(const contract::TestCase& tc, const kernels::Family& family, int output_bytes,
                             double measured_input_bytes_fp64, double measured_output_elements) {
  if (const auto f = kernels::builtin_footprint(tc.family, tc.probe)) {
    // A backward case's outputs are its gradient's elements (measured_output_elements).
    if (tc.direction == contract::Direction::backward)
      return batch_for(kernels::estimate_backward_memory(*f, output_bytes, family.selects, measured_output_elements));
    return batch_for(kernels::estimate_memory(*f, output_bytes, family.selects));
  }
  kernels::Footprint measured;
  measured.input = measured_input_bytes_fp64 / 8;
  measured.output = measured_output_elements;
  measured.work = 2 * std::max(measured.input, measured.output);
  return batch_for(kernels::estimate_memory(measured, output_bytes, family.selects));
}

}  // namespace

// A batch whose kernels are done, on its way to the gates.
struct BatchPipeline::Sweeping {
  std::uint64_t first = 0;
  std::int64_t count = 0;
  std::vector<gates::AlgebraObservation> fp64;
  std::shared_ptr<numerics::BatchSweep> sweep;
  std::future<void> background;  // the idle-class thread sweeping beside the next batch, if any
};

BatchPipeline::BatchPipeline(const contract::TestCase& tc, const kernels::Family& family, stats::FloatFormat out_format,
                             PairSource& source, const gates::AlgebraGate& algebra,
                             std::span<gates::Gate* const> observers, Settings settings, Runtime& runtime)
    : tc_(tc),
      family_(family),
      out_format_(out_format),
      source_(source),
      algebra_(algebra),
      observers_(observers),
      settings_(std::move(settings)),
      runtime_(runtime),
      batch_(settings_.batch) {}

// Sweeps the pending batch (what no other thread has), waits for it and gives it to the gates.
// observe_seconds counts this and the gates: the part of the sweep the kernels did not hide (on
// the CPU, all of it).
void BatchPipeline::settle(std::optional<Sweeping>& pending, std::uint64_t range_first, std::uint64_t range_count) {
  auto batch_done = std::move(*pending);
  pending.reset();
  const auto to = Clock::now();
  const auto obs = batch_done.sweep->finish();
  if (batch_done.background.valid()) batch_done.background.get();  // it has run out of replicates
  const gates::ReplicateBatch seen_batch{batch_done.first, obs.replicates, batch_done.fp64,
                                         obs.nonfinite ? &*obs.nonfinite : nullptr};
  for (auto* o : observers_) o->observe(seen_batch);
  evaluated_ += static_cast<std::uint64_t>(batch_done.count);
  runtime_.observe_seconds += seconds_since(to);
  nonfinite_ = obs.nonfinite;
  const auto reached = batch_done.first + static_cast<std::uint64_t>(batch_done.count);
  if (settings_.progress && !nonfinite_) {
    // A confirmation range counts from its own start.
    settings_.progress(Progress{&tc_.id, reached < gates::kConfirmationBase ? reached : reached - range_first,
                                range_first < gates::kConfirmationBase ? range_first + range_count : range_count,
                                seconds_since(settings_.started)});
  }
}

// On the CPU a batch is swept as soon as its kernels are done, on the intra-op threads. The
// sweep reads 12 bytes per element (bf16 ref and prod, the fp64 oracle) that are no longer in
// cache, and the RMSNorm-like kernels are themselves bound by memory bandwidth, so there is
// little idle core time for it to hide in: swept beside the next batch by a thread in the idle
// scheduling class, it took the bandwidth the next batch's draw and kernels needed
// (real_rms_norm_kernel's draw took 0.38-0.41 s against 0.23-0.27 s bare) and cost more than
// sweeping after. Interleaved on a 2-core AMD EPYC (issue 17, two rounds, harness/bare,
// docs/benchmarks.md): n2 2.05-2.17 -> 1.09-1.20, n7 1.40-1.50 -> 1.15-1.24, mean-as-sum
// 1.30-1.32 -> 1.18-1.24, #16 1.22-1.25 -> 1.07-1.13, real_matmul_long_k 1.08-1.12 -> 1.07,
// the router controls level.
//
// Where the kernels run on a GPU the CPU mostly waits for them, and there the idle-class
// thread sweeps a batch while the next is drawn and evaluated; settle() sweeps what it did not
// reach on the intra-op threads, so a starved thread holds the run up by at most the replicate
// it is in.
void BatchPipeline::observe_range(std::uint64_t first, std::uint64_t count) {
  std::optional<Sweeping> pending;
  for (std::uint64_t seen = 0; seen < count && !nonfinite_;) {
    // Until the output size is known, one replicate per call; then the automatic size.
    const auto b = static_cast<std::int64_t>(std::min<std::uint64_t>(count - seen, batch_ > 0 ? batch_ : 1));
    const auto r = first + seen;
    PairOutputs out;
    try {
      out = source_.evaluate(r, b);
    } catch (...) {
      // A batch evaluated ahead of a pending one that held a non-finite value is one a
      // sequential run never evaluates: its error is not this run's.
      if (pending) settle(pending, first, count);
      if (nonfinite_) break;
      throw;
    }
    // Beside the next batch: the previous batch goes to the gates before this one, once this
    // batch's kernels (the time its sweep hides in) are done; if it held a non-finite value
    // the run stops there and this batch is dropped unseen, before any more work on it, as
    // a sequential run.
    if (pending) settle(pending, first, count);
    if (nonfinite_) break;
    if (!layout_) {
      output_shape_.assign(out.ref.sizes().begin() + 1, out.ref.sizes().end());
      layout_ = numerics::make_bucket_layout(settings_.bucket_ids ? settings_.bucket_ids(output_shape_)
                                                                  : family_.bucket_ids(tc_.bucket_axis, tc_.probe, output_shape_),
                                             output_shape_);
      if (batch_ <= 0) {
        batch_ = automatic_batch(tc_, family_, static_cast<int>(out.ref.element_size()),
                                 source_.last_input_bytes_fp64(), static_cast<double>(layout_->ids.size()));
      }
      runtime_.batch = batch_;
    }
    // The algebra gate's fp64 run needs this batch's inputs, which the next evaluate replaces,
    // so it runs now. It is kernel time (production_fp64 counts it).
    torch::Tensor prod64;
    const auto k = static_cast<std::int64_t>(algebra_.fp64_replicates(r, static_cast<std::uint64_t>(b)));
    if (k > 0) prod64 = source_.production_fp64(k);
    Sweeping next;
    next.first = r;
    next.count = b;
    if (k > 0) {
      const auto tc0 = Clock::now();
      next.fp64 = numerics::compare_fp64(out.oracle.narrow(0, 0, k), prod64, static_cast<std::int64_t>(r), *layout_,
                                         output_shape_);
      runtime_.observe_seconds += seconds_since(tc0);
    }
    // Beside the next batch: the range's last batch has no next batch to hide its sweep behind,
    // and settle() sweeps it all on the intra-op threads. With few batches per range (n3: 1 +
    // 128 + 127 replicates) a last batch swept on one thread was a quarter of the run.
    next.sweep = std::make_shared<numerics::BatchSweep>(out.ref, out.prod, out.oracle, out.oracle_alt, *layout_,
                                                        static_cast<std::int64_t>(r), output_shape_, out_format_);
    if (settings_.beside_next_batch && seen + static_cast<std::uint64_t>(b) < count) {
      next.background = std::async(std::launch::async, [sweep = next.sweep] {
        numerics::run_this_thread_when_idle();
        sweep->help();
      });
    }
    pending = std::move(next);
    seen += static_cast<std::uint64_t>(b);
    if (!settings_.beside_next_batch) settle(pending, first, count);
  }
  if (pending) settle(pending, first, count);
}

}  // namespace kcert::engine
