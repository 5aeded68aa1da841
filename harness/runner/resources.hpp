#pragma once
// The memory a run may use, and the load-time check that a case fits in it.
#include <limits>
#include <optional>
#include <string>

#include "harness/contract/test_case.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::runner {

// Physical memory, or the cgroup's limit when lower (a container or a Slurm job sees its
// share, not the node's).
double available_memory_bytes();

// "8G", "512MiB", "1.5 GB", "60%" (of available_memory_bytes()), a plain byte count;
// throws UsageError naming the flag and the accepted forms.
double parse_memory_limit(const std::string& text);

// The limit every case must fit in at one replicate per kernel call, and where it came from
// (said in a refusal).
struct MemoryLimit {
  // A default policy refuses nothing: the command line's default (half the memory) comes
  // from resolve_memory_limit.
  double bytes = std::numeric_limits<double>::infinity();
  std::string source = "no limit";
};
// --memory-limit (`flag`, when not empty), else KCERT_MEMORY_LIMIT, else half the available
// memory. Throws UsageError for a value parse_memory_limit refuses.
MemoryLimit resolve_memory_limit(const std::string& flag);

// Why `tc` cannot run within `limit` (its estimate at one replicate per call, and what
// dominates it), or nullopt when it fits or its family's footprint is unknown.
std::optional<std::string> memory_refusal(const contract::TestCase& tc, const kernels::Registry& registry,
                                          const MemoryLimit& limit);

}  // namespace kcert::runner
