#pragma once
// Python kernels for a process that is not Python (issue 33): the kcert binary runs a case
// whose kernels are Python (a case's `python:` key, `kcert --python FILE`) by asking a Python
// interpreter with the kcert package to describe the file (`python -m kcert --python FILE
// describe-python`: each variant's name, parameters, version and why it cannot run here), by
// registering a stand-in for each variant so the case loads and validates as any other, and by
// running the case in a spawned `python -m kcert --python FILE` worker, where the real kernels
// are (runner/spawn.hpp). The rest of the run (C++ controls, database, reports) stays in the
// binary, with its own thread policy. Under `python -m kcert` the same route describes files
// the front end did not import.
#include <functional>
#include <string>
#include <vector>

#include "harness/contract/test_case.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::runner {

// The command that starts `python -m kcert` (program first), or why this process has none.
struct PythonRoute {
  std::vector<std::string> command;
  std::string missing;  // set when command is empty
  // Files the process imported itself (the Python front end's --python): a worker that runs a
  // stand-in imports them too, for a case that mixes their variants with described ones.
  std::vector<std::string> imported;
};

// The kcert binary's route: $KCERT_WORKER_PYTHON (an interpreter whose `import kcert` works), else the
// interpreter the build's module was made for (<binary's folder>/python/interpreter, run with
// that folder on PYTHONPATH), else the installed one (<binary's folder>/../share/kcert/
// python-interpreter, written by `cmake --install`).
PythonRoute find_python_route();

// Describes `path` with `route` and registers its variants as stand-ins (origin
// "python:CANONICAL"), its environment merged into the front-end description
// (store/environment.hpp). A file already described or imported in process is left as it is.
// Throws InputError with the interpreter's own words when the file cannot be imported.
void describe_python_file(const std::string& path, const PythonRoute& route, kernels::Registry& registry,
                          const std::function<void(const std::string&)>& note);

// The case's `python:` files (the loader resolved them against its file's folder), canonical.
std::vector<std::string> python_files_of(const contract::TestCase& tc);

// Whether this process knows the file's variants: described (stand-ins) or imported in
// process by the Python front end.
bool python_file_known(const std::string& canonical_path, const kernels::Registry& registry);

// The worker command that runs the case's stand-in kernels ({python, -m, kcert, --python FILE,
// ...}); empty when none of its kernels is a stand-in.
std::vector<std::string> python_worker_for(const contract::TestCase& tc, const kernels::Registry& registry,
                                           const PythonRoute& route);

// Why the case cannot run here: it names Python files this process did not describe (not
// named with --python, nor trusted with --allow-case-plugins; or no Python route), so its
// variants are unknown. Empty when every variant it names is registered.
std::string python_skip_reason(const contract::TestCase& tc, const kernels::Registry& registry, const PythonRoute& route);

// A name the case uses that none of its described files defines, as a load error's text; empty when none.
std::string python_unknown_variant(const contract::TestCase& tc, const kernels::Registry& registry);

}  // namespace kcert::runner
