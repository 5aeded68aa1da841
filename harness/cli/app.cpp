// kcert's command line (cli/app.hpp): parses it and dispatches to the commands of harness/cli/.
#include "harness/cli/app.hpp"

#include <CLI/CLI.hpp>

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
  int threads = 0;
  app.add_option("--threads", threads,
                 "LibTorch intra-op threads (default: OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else the CPUs this "
                 "process may use: affinity mask and cgroup quota)")
      ->check(kcert::cli::integer_in(0, 4096, "0 <= N <= 4096 (0: automatic)"));
  std::vector<std::string> plugins;
  app.add_option("--plugin", plugins,
                 "load a kernel plugin (.so) before anything else; repeatable; also KCERT_PLUGINS=a.so:b.so "
                 "(docs/plugins.md). A plugin runs code: it must be yours (or root's) and not group/world-writable");
  bool allow_case_plugins = false;
  app.add_flag("--allow-case-plugins", allow_case_plugins,
               "let a case's `plugins:` and `python:` keys load code you did not name with --plugin or --python "
               "(a case file is then code)");
  std::vector<std::string> python_files;
  app.add_option("--python", python_files,
                 "a Python file of kernels (@kcert.variant, docs/python.md); repeatable. Its variants are described "
                 "by a Python with the kcert package (KCERT_WORKER_PYTHON, else the one this build's module is for) and its "
                 "cases run in `python -m kcert` workers. The same trust rule as a plugin");

  std::string isolation = "plugins";
  app.add_option("--isolation", isolation,
                 "which cases run in a forked child process, where a crash, exit(), abort or hang is that case's "
                 "ERROR and the run goes on: plugins (cases whose kernels come from a plugin), all, none (docs/plugins.md)")
      ->check(CLI::IsMember({"plugins", "all", "none"}))
      ->capture_default_str();
  double case_deadline = 3600.0;
  app.add_option("--case-deadline", case_deadline,
                 "seconds a case in a child process may run before its process group is killed and the case is ERROR")
      ->check(number_in(0.001, 1e7, "0.001 <= seconds <= 1e7"))
      ->capture_default_str();

  std::string isolation_process = front_end.default_isolation_process;
  app.add_option("--isolation-process", isolation_process,
                 "how a case's child process is made: fork (a copy of this process) or spawn (a fresh `kcert "
                 "worker` that loads the same plugins and reads the case's text; starts clean, for kernels that "
                 "hold an interpreter or a GPU context)")
      ->check(CLI::IsMember({"fork", "spawn"}))
      ->capture_default_str();

  std::string memory_limit;
  app.add_option("--memory-limit", memory_limit,
                 "refuse, at load, a case whose estimated memory at one replicate per kernel call exceeds this "
                 "(8G, 512MiB, 60%; also KCERT_MEMORY_LIMIT; default: half the physical or cgroup memory)");

  std::vector<std::string> math_modes;
  app.add_option("--math-mode", math_modes,
                 "a GPU math mode for every case, NAME=on|off; repeatable; a case's `math_modes:` still wins "
                 "for that case. NAME: tf32_matmul, tf32_cudnn (pinned off), bf16_reduced_precision_reduction, "
                 "fp16_reduced_precision_reduction (pinned on, PyTorch's defaults), deterministic_algorithms, "
                 "cudnn_benchmark (pinned off); docs/gpu.md")
      ->type_name("NAME=on|off");

  app.fallthrough();  // global options may follow the subcommand: kcert run x.yaml --threads 2

  kcert::kernels::Registry registry;
  kcert::kernels::register_builtin_families(registry);
  // Runs after parsing and before any subcommand's work: threads and plugins first.
  // What a suite run may do, a value the commands that run cases are given (runner/suite.hpp).
  kcert::runner::SuitePolicy policy;
  app.parse_complete_callback([&app, argc, argv, &threads, &plugins, &registry, &allow_case_plugins, &memory_limit,
                              &math_modes, &isolation, &case_deadline, &isolation_process, &policy, &front_end,
                              &python_files]() {
    // Commands that run kernels get the thread policy (process_policy.hpp), which may
    // re-execute kcert once so that libgomp and OpenBLAS read it when they load.
    bool runs_kernels = false;
    for (const char* name : {"run", "suite", "nightly"}) runs_kernels |= app.got_subcommand(name);
    if (runs_kernels) kcert::numerics::apply_process_policy(argc, argv, threads);
    else kcert::numerics::configure_intra_op_threads(kcert::numerics::decide_threads(threads).threads);
    policy.memory = kcert::runner::resolve_memory_limit(memory_limit);
    policy.allow_case_plugins = allow_case_plugins;
    using Mode = kcert::runner::Isolation::Mode;
    policy.isolation.mode = isolation == "all" ? Mode::all : isolation == "none" ? Mode::none : Mode::plugins;
    policy.isolation.deadline_seconds = case_deadline;
    policy.isolation.process = isolation_process == "spawn" ? kcert::runner::Isolation::Process::spawn
                                                            : kcert::runner::Isolation::Process::fork;
    // A Python process that has imported torch is not forked: its threads and the GIL are not
    // in the copy (a kernel that needs either hangs or crashes there).
    if (!front_end.python.empty() && policy.isolation.process == kcert::runner::Isolation::Process::fork &&
        policy.isolation.mode != kcert::runner::Isolation::Mode::none) {
      throw kcert::cli::UsageError(
          "--isolation-process fork: this process is Python and has imported torch, which a fork does not carry "
          "safely (threads, the GIL); its cases run in spawned `python -m kcert` workers (spawn, the default here), "
          "or in process with --isolation none");
    }
    policy.isolation.worker = front_end.worker;
    if (policy.isolation.worker.empty()) {
      std::error_code ec;
      policy.isolation.worker = {std::filesystem::read_symlink("/proc/self/exe", ec).string()};
    }
    // The run's math modes: kcert's pinned values with the command line's on top, in ATen's
    // context before anything reads it (the environment fingerprint records them on a GPU).
    auto modes = kcert::numerics::pinned_math_modes();
    kcert::numerics::MathModes asked;
    for (const auto& m : math_modes) {
      try {
        kcert::numerics::parse_math_mode(asked, m);
      } catch (const std::invalid_argument& e) {
        throw kcert::cli::UsageError(e.what());
      }
    }
    modes = kcert::numerics::merged(modes, asked);
    try {
      modes = kcert::numerics::apply_math_modes(modes, asked.bf16_reduced_precision_reduction.has_value());
    } catch (const std::invalid_argument& e) {
      throw kcert::cli::UsageError(e.what());
    }
    kcert::numerics::set_process_math_modes(modes);
    std::vector<std::string> all;
    if (const char* env = std::getenv("KCERT_PLUGINS")) {
      std::string list = env;
      for (std::size_t start = 0; start <= list.size();) {
        const auto colon = list.find(':', start);
        all.push_back(list.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
        if (colon == std::string::npos) break;
        start = colon + 1;
      }
    }
    all.insert(all.end(), plugins.begin(), plugins.end());
    // A worker loads what its parent loaded, once per case: the parent has said so already.
    const bool worker_process = app.got_subcommand("worker");
    const kcert::runner::Note quiet = [](const std::string&) {};
    kcert::runner::load_plugins(all, registry, worker_process ? quiet : kcert::runner::Note(kcert::cli::print_note));
    // Python variants join after the plugins: a variant of a plugin's family needs the family
    // (issue 33; they joined before parsing and a plugin family was "not registered").
    if (front_end.extend) {
      try {
        front_end.extend(registry);
      } catch (const std::exception& e) {
        throw kcert::cli::InputError(e.what());
      }
    }
    if (front_end.python.empty()) {
      policy.python = kcert::runner::find_python_route();
    } else {
      const auto& py = front_end.python;
      policy.python.command.assign(py.begin(), py.begin() + std::min<std::size_t>(3, py.size()));
      for (std::size_t i = 3; i + 1 < py.size(); i += 2) policy.python.imported.push_back(py[i + 1]);
    }
    for (const auto& f : python_files) kcert::runner::describe_python_file(f, policy.python, registry, kcert::cli::print_note);
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

  try {
    app.parse(argc, argv);
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
    std::cerr << "kcert: error: " << kcert::text::terminal_safe(e.what()) << "\n";
    return kcert::cli::exit_input_error;
  } catch (const kcert::store::WriteError& e) {
    // A full disk, a read-only folder: the OS's reason, not an "internal error".
    std::cerr << "kcert: error: cannot write " << kcert::text::terminal_safe(e.what()) << "\n";
    return kcert::cli::exit_input_error;
  } catch (const kcert::cli::UsageError& e) {
    std::cerr << "kcert: error: " << kcert::text::terminal_safe(e.what()) << "\n";
    return kcert::cli::exit_input_error;
  } catch (const std::exception& e) {
    std::cerr << "kcert: internal error: " << kcert::text::terminal_safe(e.what()) << "\n";
    return kcert::cli::exit_input_error;
  }
  return kcert::cli::exit_ok;
}

}  // namespace kcert::cli
