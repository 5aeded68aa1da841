// kcert's command line (cli/app.hpp): parses it and dispatches to the commands of harness/cli/.
#include "harness/cli/app.hpp"

#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "harness/cli/db_commands.hpp"
#include "harness/cli/environment_command.hpp"
#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/cli/list_command.hpp"
#include "harness/cli/report_command.hpp"
#include "harness/runner/isolated.hpp"
#include "harness/runner/resources.hpp"
#include "harness/runner/spawn.hpp"
#include "harness/runner/suite.hpp"
#include "harness/text/escape.hpp"
#include "harness/cli/unknown_word.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/cli/suite_command.hpp"
#include "harness/cli/nightly_command.hpp"
#include "harness/store/json.hpp"
#include "harness/cli/tail_fit_command.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/math_modes.hpp"
#include "harness/numerics/process_policy.hpp"
#include "harness/numerics/runtime.hpp"

namespace kcert::cli {

namespace {

// The options every command takes (they may follow the subcommand: kcert run x.yaml --threads 2).
struct GlobalOptions {
  int threads = 0;
  std::vector<std::string> plugins;
  bool allow_case_plugins = false;
  std::vector<std::string> python_files;
  std::string isolation = "plugins";
  double case_deadline = 3600.0;
  std::string isolation_process;
  std::string memory_limit;
  std::vector<std::string> math_modes;
};

void add_global_options(CLI::App& app, GlobalOptions& o) {
  app.add_option("--threads", o.threads,
                 "LibTorch intra-op threads (default: OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else the CPUs this "
                 "process may use: affinity mask and cgroup quota)")
      ->check(kcert::cli::integer_in(0, 4096, "0 <= N <= 4096 (0: automatic)"));
  app.add_option("--plugin", o.plugins,
                 "load a kernel plugin (.so) before anything else; repeatable; also KCERT_PLUGINS=a.so:b.so "
                 "(docs/plugins.md). A plugin runs code: it must be yours (or root's) and not group/world-writable");
  app.add_flag("--allow-case-plugins", o.allow_case_plugins,
               "let a case's `plugins:` and `python:` keys load code you did not name with --plugin or --python "
               "(a case file is then code)");
  app.add_option("--python", o.python_files,
                 "a Python file of kernels (@kcert.variant, docs/python.md); repeatable. Its variants are described "
                 "by a Python with the kcert package (KCERT_WORKER_PYTHON, else the one this build's module is for) and its "
                 "cases run in `python -m kcert` workers. The same trust rule as a plugin");
  app.add_option("--isolation", o.isolation,
                 "which cases run in a forked child process, where a crash, exit(), abort or hang is that case's "
                 "ERROR and the run goes on: plugins (cases whose kernels come from a plugin), all, none (docs/plugins.md)")
      ->check(CLI::IsMember({"plugins", "all", "none"}))
      ->capture_default_str();
  app.add_option("--case-deadline", o.case_deadline,
                 "seconds a case in a child process may run before its process group is killed and the case is ERROR")
      ->check(number_in(0.001, 1e7, "0.001 <= seconds <= 1e7"))
      ->capture_default_str();
  app.add_option("--isolation-process", o.isolation_process,
                 "how a case's child process is made: fork (a copy of this process) or spawn (a fresh `kcert "
                 "worker` that loads the same plugins and reads the case's text; starts clean, for kernels that "
                 "hold an interpreter or a GPU context)")
      ->check(CLI::IsMember({"fork", "spawn"}))
      ->capture_default_str();
  app.add_option("--memory-limit", o.memory_limit,
                 "refuse, at load, a case whose estimated memory at one replicate per kernel call exceeds this "
                 "(8G, 512MiB, 60%; also KCERT_MEMORY_LIMIT; default: half the physical or cgroup memory)");
  app.add_option("--math-mode", o.math_modes,
                 "a GPU math mode for every case, NAME=on|off; repeatable; a case's `math_modes:` still wins "
                 "for that case. NAME: tf32_matmul, tf32_cudnn (pinned off), bf16_reduced_precision_reduction, "
                 "fp16_reduced_precision_reduction (pinned on, PyTorch's defaults), deterministic_algorithms, "
                 "cudnn_benchmark (pinned off); docs/gpu.md")
      ->type_name("NAME=on|off");
  app.fallthrough();
}

// The isolation a suite run gets from the options, and the worker a spawned case runs.
kcert::runner::Isolation isolation_policy(const GlobalOptions& o, const FrontEnd& front_end) {
  kcert::runner::Isolation isolation;
  using Mode = kcert::runner::Isolation::Mode;
  isolation.mode = o.isolation == "all" ? Mode::all : o.isolation == "none" ? Mode::none : Mode::plugins;
  isolation.deadline_seconds = o.case_deadline;
  isolation.process = o.isolation_process == "spawn" ? kcert::runner::Isolation::Process::spawn
                                                     : kcert::runner::Isolation::Process::fork;
  // A Python process that has imported torch is not forked: its threads and the GIL are not
  // in the copy (a kernel that needs either hangs or crashes there).
  if (!front_end.python.empty() && isolation.process == kcert::runner::Isolation::Process::fork &&
      isolation.mode != Mode::none) {
    throw kcert::cli::UsageError(
        "--isolation-process fork: this process is Python and has imported torch, which a fork does not carry "
        "safely (threads, the GIL); its cases run in spawned `python -m kcert` workers (spawn, the default here), "
        "or in process with --isolation none");
  }
  isolation.worker = front_end.worker;
  if (isolation.worker.empty()) {
    std::error_code ec;
    isolation.worker = {std::filesystem::read_symlink("/proc/self/exe", ec).string()};
  }
  return isolation;
}

// The run's math modes: kcert's pinned values with the command line's on top, in ATen's
// context before anything reads it (the environment fingerprint records them on a GPU).
void set_math_modes(const std::vector<std::string>& asked_modes) {
  auto modes = kcert::numerics::pinned_math_modes();
  kcert::numerics::MathModes asked;
  try {
    for (const auto& m : asked_modes) kcert::numerics::parse_math_mode(asked, m);
    modes = kcert::numerics::apply_math_modes(kcert::numerics::merged(modes, asked),
                                              asked.bf16_reduced_precision_reduction.has_value());
  } catch (const std::invalid_argument& e) {
    throw kcert::cli::UsageError(e.what());
  }
  kcert::numerics::set_process_math_modes(modes);
}

// KCERT_PLUGINS (colon-separated) first, then each --plugin.
std::vector<std::string> plugin_paths(const std::vector<std::string>& named) {
  std::vector<std::string> all;
  if (const char* env = std::getenv("KCERT_PLUGINS")) {
    const std::string list = env;
    for (std::size_t start = 0; start <= list.size();) {
      const auto colon = list.find(':', start);
      all.push_back(list.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  all.insert(all.end(), named.begin(), named.end());
  return all;
}

// After parsing, before any command's work: threads, the suite policy, math modes, then the
// kernels (plugins, the front end's own variants, Python files) into the registry.
void prepare_process(const CLI::App& app, int argc, char** argv, const GlobalOptions& o, const FrontEnd& front_end,
                     kcert::kernels::Registry& registry, kcert::runner::SuitePolicy& policy) {
  // Commands that run kernels get the thread policy (process_policy.hpp), which may
  // re-execute kcert once so that libgomp and OpenBLAS read it when they load.
  bool runs_kernels = false;
  for (const char* name : {"run", "suite", "nightly"}) runs_kernels |= app.got_subcommand(name);
  if (runs_kernels) kcert::numerics::apply_process_policy(argc, argv, o.threads);
  else kcert::numerics::configure_intra_op_threads(kcert::numerics::decide_threads(o.threads).threads);
  policy.memory = kcert::runner::resolve_memory_limit(o.memory_limit);
  policy.allow_case_plugins = o.allow_case_plugins;
  policy.isolation = isolation_policy(o, front_end);
  set_math_modes(o.math_modes);
  // A worker loads what its parent loaded, once per case: the parent has said so already.
  const bool worker_process = app.got_subcommand("worker");
  const kcert::runner::Note quiet = [](const std::string&) {};
  kcert::runner::load_plugins(plugin_paths(o.plugins), registry, worker_process ? quiet : kcert::runner::Note(kcert::cli::print_note));
  // Python variants join after the plugins: a variant of a plugin's family needs the family
  // (issue 33; they joined before parsing and a plugin family was "not registered").
  if (front_end.extend) {
    bool loads_case_plugins = false;
    for (const char* name : {"run", "suite", "nightly", "controls-doc"}) loads_case_plugins |= app.got_subcommand(name);
    try {
      front_end.extend(registry, !loads_case_plugins);
    } catch (const std::exception& e) {
      throw kcert::cli::InputError(e.what());
    }
    // A variant of a family a case file's `plugins:` brings joins once those are loaded.
    if (loads_case_plugins) policy.after_case_plugins = [&front_end](kcert::kernels::Registry& r) { front_end.extend(r, true); };
  }
  if (front_end.python.empty()) {
    policy.python = kcert::runner::find_python_route();
  } else {
    const auto& py = front_end.python;
    policy.python.command.assign(py.begin(), py.begin() + std::min<std::size_t>(3, py.size()));
    for (std::size_t i = 3; i + 1 < py.size(); i += 2) policy.python.imported.push_back(py[i + 1]);
  }
  for (const auto& f : o.python_files) kcert::runner::describe_python_file(f, policy.python, registry, kcert::cli::print_note);
}

// A spawned worker that fails before it reads its case (a plugin or a Python file that does
// not load in the worker) answers its parent over the result wire with the reason, so that the
// case's ERROR says why instead of "exited with status 2 before returning a result"; it then
// exits 0, as serve_worker does after an error it could send. Returns whether it was told.
bool told_parent(const CLI::App& app, const std::string& what) {
  if (!app.got_subcommand("worker")) return false;
  // Only into the result pipe a spawner gave it, not into whatever a hand-run worker has as 3.
  struct stat st {};
  if (::fstat(3, &st) != 0 || !S_ISFIFO(st.st_mode)) return false;
  return kcert::runner::write_message(3, kcert::runner::error_message("kcert worker: " + what));
}

// Parses and runs; every error becomes one `kcert: error:` line and exit status 2.
int parse_and_run(CLI::App& app, int argc, char** argv) {
  std::string error;
  try {
    app.parse(argc, argv);
    return kcert::cli::exit_ok;
  } catch (const CLI::ParseError& e) {
    // A mistyped subcommand or option gets the closest real ones ("did you mean"), instead of
    // CLI11's "A subcommand is required" or "argument was not expected".
    if (e.get_exit_code() != 0) {
      if (const auto hint = kcert::cli::unknown_word_hint(app, argc, argv); !hint.empty()) {
        std::cerr << "kcert: error: " << hint << "\nRun with --help for more information.\n";
        return kcert::cli::exit_input_error;
      }
    }
    // CLI11 maps --help/--version to success and parse errors to its own non-zero codes;
    // kcert keeps one code for every kind of bad input.
    const int code = app.exit(e);
    return code == 0 ? kcert::cli::exit_ok : kcert::cli::exit_input_error;
  } catch (const kcert::cli::ExitWith& e) {
    return e.code;
  } catch (const kcert::cli::InputError& e) {
    error = std::string("error: ") + e.what();
  } catch (const kcert::store::WriteError& e) {
    // A full disk, a read-only folder: the OS's reason, not an "internal error".
    error = std::string("error: cannot write ") + e.what();
  } catch (const kcert::cli::UsageError& e) {
    error = std::string("error: ") + e.what();
  } catch (const std::exception& e) {
    error = std::string("internal error: ") + e.what();
  }
  std::cerr << "kcert: " << kcert::text::terminal_safe(error) << "\n";
  return told_parent(app, error) ? kcert::cli::exit_ok : kcert::cli::exit_input_error;
}

}  // namespace

int run_command_line(int argc, char** argv, const FrontEnd& front_end) {
  kcert::numerics::configure_allocator();
  // Past a file-size limit (ulimit -f, a Slurm or systemd LimitFSIZE) the kernel sends
  // SIGXFSZ, which killed a nightly with no message; ignored, the write fails with EFBIG and
  // the checked writes say which file and why.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "kcert " KCERT_VERSION " - certifies kernel migrations numerically.\n"
      "For each operator it asks three questions of a (reference, production) kernel pair:\n"
      "  algebra   do both compute the same real function (fp64 run)?\n"
      "  bias      is there a coherent directional difference per bucket (z-test)?\n"
      "  variance  does production amplify error against an fp64 oracle (GPD tail)?\n"
      "See README.md and docs/ for the method and the file formats.",
      "kcert"};
  app.require_subcommand(1);
  // A parse error reads like every other bad input: one `kcert: error:` line, then the hint.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "kcert: error: " + kcert::text::terminal_safe(e.what()) + "\nRun with --help for more information.\n";
  });
  app.set_version_flag("--version", "kcert " KCERT_VERSION);
  GlobalOptions options;
  options.isolation_process = front_end.default_isolation_process;
  add_global_options(app, options);

  kcert::kernels::Registry registry;
  kcert::kernels::register_builtin_families(registry);
  // What a suite run may do, a value the commands that run cases are given (runner/suite.hpp),
  // filled in after parsing and before any subcommand's work.
  kcert::runner::SuitePolicy policy;
  app.parse_complete_callback([&app, argc, argv, &options, &registry, &policy, &front_end]() {
    prepare_process(app, argc, argv, options, front_end, registry, policy);
  });
  kcert::cli::register_run_command(app, registry, policy);
  kcert::cli::register_suite_command(app, registry, policy);
  kcert::cli::register_nightly_command(app, registry, policy);
  kcert::cli::register_calibrate_command(app);
  kcert::cli::register_controls_doc_command(app, registry, policy);
  kcert::cli::register_list_command(app, registry);
  kcert::cli::register_environment_command(app);
  kcert::cli::register_db_commands(app);
  kcert::cli::register_tail_fit_command(app);
  kcert::cli::register_report_command(app);
  // The spawn strategy's child (runner/spawn.hpp): not for people, so not in --help.
  auto* worker = app.add_subcommand("worker", "")->group("");
  worker->callback([&registry]() { throw kcert::cli::ExitWith{kcert::runner::serve_worker(std::cin, 3, registry)}; });

  return parse_and_run(app, argc, argv);
}

}  // namespace kcert::cli
