#pragma once
// Runs one test case: draws replicates, evaluates reference, production and oracle,
// feeds the three gates, grows R under the verdict-stable rule, and returns the result.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "harness/engine/case_result.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/contract/test_case.hpp"

namespace kcert::engine {

struct Progress {
  const std::string* case_id = nullptr;
  std::uint64_t done = 0;    // replicates evaluated
  std::uint64_t target = 0;  // replicates planned at this look
  double seconds = 0.0;
};

// Where a batch's observation sweep runs. The results are the same bits either way: each
// replicate is swept whole by one thread, and the gates see the batches in replicate order.
enum class SweepSchedule {
  automatic,          // after_kernels where the kernels run on the CPU, else beside_next_batch
  after_kernels,      // on the intra-op threads, once the batch's kernels are done
  beside_next_batch,  // on an idle-class thread while the next batch is drawn and evaluated
};

struct RunOptions {
  std::optional<std::uint64_t> replicates;  // overrides gates.replicates (R)
  std::optional<std::uint64_t> seed;        // overrides probe.seed
  std::string device = "cpu";               // "cpu" or "cuda"
  std::int64_t batch = 0;                   // replicates per kernel call; 0 = automatic
  SweepSchedule sweep = SweepSchedule::automatic;
  std::function<void(const Progress&)> progress;
};

// Throws std::invalid_argument for an unusable device or a kernel that breaks its contract
// (wrong dtype or shape); a NaN or Inf from a kernel is a FAIL verdict, not an exception.
CaseResult run_case(const contract::TestCase& tc, const kernels::Registry& registry, const RunOptions& options);

// The test case as run_case records it in its result (`testcase`): the run's overrides
// (replicates, seed) and the expectation of this environment applied. A case run in a child
// process (runner/isolated.hpp) gets its test case from here, not over the pipe.
contract::TestCase as_run(const contract::TestCase& tc, const RunOptions& options);

// Compares the gate verdicts with the case's expectation; returns one line per mismatch.
std::vector<std::string> check_expectation(const CaseResult& result);

}  // namespace kcert::engine
