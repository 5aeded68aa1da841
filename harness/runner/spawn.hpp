#pragma once
// The spawn isolation strategy (issue 51): a case run in a fresh `kcert worker` process
// instead of a fork of this one. A fork shares the parent's state, which is what makes it
// cheap and what makes it unsafe for a process that holds an interpreter or a GPU context
// (Python kernels: threads and the GIL across fork); a spawned worker starts clean, loads the
// same plugins, reads the case's text from its standard input and answers over the same
// result wire (engine/result_wire.hpp) on descriptor 3. Deadline, process group and every
// way a child can end are the fork strategy's (collect_case).
#include <istream>
#include <vector>
#include <string>

#include "harness/engine/engine.hpp"
#include "harness/runner/isolated.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::runner {

// Runs `tc` in `worker` (a command line that takes kcert's: `WORKER... --threads N worker`), with the registry's
// plugins loaded there. Returns its result, rethrows a std::exception the case threw as
// std::runtime_error, throws CaseAborted when the worker ended without a result.
engine::CaseResult run_case_spawned(const contract::TestCase& tc, const kernels::Registry& registry,
                                    const engine::RunOptions& options, const IsolationOptions& isolation,
                                    const std::vector<std::string>& worker);

// The worker's side: reads one request from `in`, loads its plugins into `registry`, runs
// the case and writes the framed outcome to `result_fd`. Returns the process's exit status
// (0 when a message was written, an unreadable request's reason included; 2 when none could be).
int serve_worker(std::istream& in, int result_fd, kernels::Registry& registry);

}  // namespace kcert::runner
