#pragma once
// The batch pipeline of one case: replicates through a kernel pair in batches, each batch swept
// into observations (numerics::BatchSweep) and handed to every gate in replicate order. It owns
// the schedule (sweep after the kernels, or beside the next batch), the batch size (automatic
// from the first output), the bucket layout, the algebra gate's fp64 run and the stop at the
// first non-finite value. What the kernels compute is the source's business: a forward pair
// today, a gradient's pair tomorrow; each output a case certifies gets a pipeline of its own.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/engine/case_result.hpp"
#include "harness/engine/engine.hpp"
#include "harness/gates/algebra_gate.hpp"
#include "harness/gates/gate.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/observations.hpp"
#include "harness/numerics/torch_api.hpp"

namespace kcert::engine {

// One batch of replicates first .. first + count - 1 through the pair, stacked along the batch
// dimension: reference and production at the working precision, the fp64 oracle, and for a
// selecting family the oracle with near ties resolved the other way.
struct PairOutputs {
  torch::Tensor ref, prod, oracle;
  torch::Tensor oracle_alt;
};

// What a pipeline evaluates. evaluate() draws and runs a batch; production_fp64(k) runs the
// production under the fp64 policy on the first k replicates of the last batch (the algebra
// gate's run), so it must come before the next evaluate().
class PairSource {
 public:
  virtual ~PairSource() = default;
  virtual PairOutputs evaluate(std::uint64_t first, std::int64_t count) = 0;
  virtual torch::Tensor production_fp64(std::int64_t k) = 0;
  // Bytes of the last batch's per-replicate inputs in fp64, per replicate (batch sizing of a
  // family kcert has no footprint for).
  virtual double last_input_bytes_fp64() const = 0;
  // What the source saw beside the outputs that the algebra gate judges (a gradient's
  // structural defects, its own forward's VJP), handed to it before it decides.
  virtual void report_findings(gates::AlgebraGate& algebra) const {}
};

class BatchPipeline {
 public:
  struct Settings {
    std::int64_t batch = 0;          // replicates per kernel call; 0 = automatic from the first output
    bool beside_next_batch = false;  // the sweep schedule, resolved for the device (engine.hpp)
    std::function<void(const Progress&)> progress;
    std::chrono::steady_clock::time_point started;  // the case's start, for Progress::seconds
    // The bucket of every element of one replicate's output, given its shape; empty = the
    // family's forward layout on the case's bucket axis (a gradient has its own).
    std::function<torch::Tensor(at::IntArrayRef)> bucket_ids;
  };

  BatchPipeline(const contract::TestCase& tc, const kernels::Family& family, stats::FloatFormat out_format,
                PairSource& source, const gates::AlgebraGate& algebra, std::span<gates::Gate* const> observers,
                Settings settings, Runtime& runtime);

  // Replicates first .. first + count - 1 to every observer; stops after the batch that held a
  // non-finite value (a later batch already evaluated is dropped unseen, as a sequential run).
  void observe_range(std::uint64_t first, std::uint64_t count);

  std::uint64_t evaluated() const { return evaluated_; }
  const std::optional<gates::NonFinite>& nonfinite() const { return nonfinite_; }
  const std::vector<std::int64_t>& output_shape() const { return output_shape_; }

 private:
  struct Sweeping;
  void settle(std::optional<Sweeping>& pending, std::uint64_t range_first, std::uint64_t range_count);

  const contract::TestCase& tc_;
  const kernels::Family& family_;
  stats::FloatFormat out_format_;
  PairSource& source_;
  const gates::AlgebraGate& algebra_;
  std::span<gates::Gate* const> observers_;
  Settings settings_;
  Runtime& runtime_;
  std::optional<numerics::BucketLayout> layout_;
  std::int64_t batch_ = 0;
  std::uint64_t evaluated_ = 0;
  std::optional<gates::NonFinite> nonfinite_;
  std::vector<std::int64_t> output_shape_;
};

}  // namespace kcert::engine
