#include "harness/runner/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <iterator>
#include <stdexcept>

#include "harness/kernels/plugin.hpp"
#include "harness/runner/case_process.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/numerics/torch_api.hpp"
#include "harness/testcase/loader.hpp"

namespace kcert::runner {

namespace {

// What the worker needs to rebuild and run the case: its file's text (the loader's input,
// so the worker validates it as the parent did), the profile and id that pick the case, the
// run's overrides and the plugins its kernels may come from.
nlohmann::json request(const contract::TestCase& tc, const kernels::Registry& registry, const engine::RunOptions& options) {
  nlohmann::json r = {{"source", tc.source}, {"text", tc.text},       {"profile", tc.profile},
                      {"id", tc.id},         {"device", options.device}, {"batch", options.batch},
                      {"plugins", std::vector<std::string>(registry.plugin_paths().begin(), registry.plugin_paths().end())}};
  if (options.replicates) r["replicates"] = *options.replicates;
  if (options.seed) r["seed"] = *options.seed;
  return r;
}

}  // namespace

engine::CaseResult run_case_spawned(const contract::TestCase& tc, const kernels::Registry& registry,
                                    const engine::RunOptions& options, const IsolationOptions& isolation,
                                    const std::vector<std::string>& worker) {
  if (worker.empty()) throw std::runtime_error("cannot start the worker: no worker command is set");
  // Made before anything starts: a request that cannot be written (a text nlohmann refuses)
  // must not leave a worker waiting on its input.
  const std::string request_text = request(tc, registry, options).dump();
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("cannot create a pipe for the worker: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(in[0]);
    ::close(in[1]);
    throw std::runtime_error(std::string("cannot create a pipe for the worker: ") + std::strerror(err));
  }
  const std::string threads = std::to_string(at::get_num_threads());
  // argv[0] stays the program's path: a Python worker finds its venv (and so its torch)
  // from it; named "kcert", a venv's python ran as the system Python and imported another torch.
  std::vector<std::string> args = worker;
  // The plugins on the command line too, not only in the request: a `python -m kcert` worker
  // adds its Python variants once its plugins are loaded, before it reads the request, and a
  // variant of a plugin's family needs the family (issue 33). Loading one twice is a no-op.
  for (const auto& p : registry.plugin_paths()) {
    args.emplace_back("--plugin");
    args.push_back(p);
  }
  for (const char* a : {"--threads", threads.c_str(), "worker"}) args.emplace_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The worker is started in a case process tree (case_process.hpp): its own process group,
  // killed as one past the deadline, and, where a PID namespace can be made, every process
  // its kernels start ends with it. An exec that fails says why on `exec_error`.
  int exec_error[2];
  if (::pipe2(exec_error, O_CLOEXEC) != 0) {
    const int err = errno;
    for (const int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    throw std::runtime_error(std::string("cannot create a pipe for the worker: ") + std::strerror(err));
  }
  CaseProcessDescriptors descriptors;
  // The run's spool too: the worker's tree must not hold it (nor its lock) while the case runs.
  descriptors.parent_only = descriptors_closed_in_cases();
  descriptors.parent_only.insert(descriptors.parent_only.end(), {in[1], out[0], exec_error[0]});
  descriptors.case_only = {in[0], out[1], exec_error[1]};
  const char* program = worker.front().c_str();
  std::cout.flush();
  std::cerr.flush();
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  try {
    pid = start_case_process(descriptors, [&] {
      // The worker's standard input and descriptor 3, without close-on-exec (dup2 clears it
      // on a copy; a descriptor that is already in place is cleared by hand).
      const auto place = [](int fd, int at) { return fd == at ? ::fcntl(fd, F_SETFD, 0) : ::dup2(fd, at); };
      if (place(in[0], STDIN_FILENO) >= 0 && place(out[1], 3) >= 0) ::execv(program, argv.data());
      const int err = errno;  // of the dup2 or the exec
      [[maybe_unused]] const auto n = ::write(exec_error[1], &err, sizeof err);
      ::_exit(127);
    });
  } catch (const std::exception& e) {
    for (const int fd : {in[0], in[1], out[0], out[1], exec_error[0], exec_error[1]}) ::close(fd);
    throw std::runtime_error("cannot start the worker " + worker.front() + ": " + e.what());
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(exec_error[1]);
  // End of file: the worker was exec'd (its copy closed on exec). Bytes: the exec's errno.
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(exec_error[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(exec_error[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error("cannot start the worker " + worker.front() + ": " + std::strerror(exec_errno));
  }
  write_all_ignoring_sigpipe(in[1], request_text);
  ::close(in[1]);
  return collect_case(pid, out[0], start, tc, options, isolation);
}

int serve_worker(std::istream& in, int result_fd, kernels::Registry& registry) {
  // Dies with the process that asked (the fork strategy's child does the same).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  nlohmann::json r;
  contract::TestCase tc;
  engine::RunOptions options;
  try {
    r = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    for (const auto& p : r.at("plugins")) kernels::load_plugin(p.get<std::string>(), registry);
    testcase::FamilySchemas schemas;
    for (const auto& name : registry.family_names()) schemas.emplace(name, registry.family(name).schema());
    const auto id = r.at("id").get<std::string>();
    bool found = false;
    for (auto& c : testcase::parse_testcases(r.at("text").get<std::string>(), r.at("source").get<std::string>(), schemas,
                                             r.at("profile").get<std::string>())) {
      if (c.id == id) {
        tc = std::move(c);
        found = true;
      }
    }
    if (!found) throw std::runtime_error("case " + id + " is not in the text it was sent with");
    options.device = r.at("device").get<std::string>();
    options.batch = r.at("batch").get<std::int64_t>();
    if (r.contains("replicates")) options.replicates = r.at("replicates").get<std::uint64_t>();
    if (r.contains("seed")) options.seed = r.at("seed").get<std::uint64_t>();
  } catch (const std::exception& e) {
    const std::string why = std::string("kcert worker: cannot read its request: ") + e.what();
    return write_message(result_fd, error_message(why)) ? 0 : 2;
  }
  return write_message(result_fd, case_message(tc, registry, options)) ? 0 : 2;
}

}  // namespace kcert::runner
