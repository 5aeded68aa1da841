#include "harness/runner/suite.hpp"
#include "harness/text/suggest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "harness/runner/isolated.hpp"
#include "harness/kernels/plugin.hpp"
#include "harness/numerics/runtime.hpp"
#include "harness/runner/errors.hpp"
#include "harness/runner/spawn.hpp"
#include "harness/testcase/loader.hpp"

namespace kcert::runner {

void load_plugins(const std::vector<std::string>& paths, kernels::Registry& registry, const Note& note) {
  for (const auto& p : paths) {
    if (p.empty()) continue;
    try {
      const auto loaded = kernels::load_plugin(p, registry);
      if (!loaded.name.empty() && note) {
        note(fmt::format("plugin {} {} loaded from {} ({} variant(s), {} family(ies))", loaded.name, loaded.version,
                         loaded.path, loaded.variants_added, loaded.families_added));
      }
    } catch (const kernels::PluginError& e) {
      throw InputError(e.what());
    }
  }
}

namespace {
// The default folder `testcases` when the command runs outside a checkout: the controls
// installed beside the binary (cmake --install puts them in DATADIR/kcert/testcases).
std::vector<std::string> with_installed_controls(std::vector<std::string> paths, const Note& note) {
  if (paths.size() != 1 || paths.front() != "testcases" || std::filesystem::exists("testcases")) return paths;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return paths;
  const auto installed = (exe.parent_path() / KCERT_BIN_TO_CONTROLS).lexically_normal();
  if (!std::filesystem::is_directory(installed)) return paths;
  if (note) note("no ./testcases here; using the installed controls in " + installed.string());
  return {installed.string()};
}

// The reason a case cannot run in this build: a variant it names is registered but
// unavailable (a kernel of a newer LibTorch). Empty when both run.
std::string unavailable_reason(const contract::TestCase& tc, const kernels::Registry& registry) {
  const auto* family = registry.find_family(tc.family);
  if (!family) return {};
  std::string why;
  for (const auto* side : {&tc.reference, &tc.production}) {
    const auto it = family->variants.find(side->variant);
    if (it != family->variants.end() && !it->second.unavailable.empty()) {
      why += (why.empty() ? "" : "; ") + side->variant + ": " + it->second.unavailable;
    }
  }
  return why;
}
// Whether a case's kernels come from Python (`python -m kcert --python FILE`, whose variants'
// origin is "python:FILE"): its reasons then say "Python kernel", not "plugin kernel".
bool python_kernels(const contract::TestCase& tc, const kernels::Registry& registry) {
  return any_kernel_from(tc, registry, [](const std::string& origin) { return origin.rfind("python:", 0) == 0; });
}

}  // namespace

std::vector<contract::TestCase> load_cases(const std::vector<std::string>& given_paths, kernels::Registry& registry,
                                           const std::string& profile, const SuitePolicy& policy, const Note& note,
                                           std::vector<LoadFailure>* failures) {
  const auto paths = with_installed_controls(given_paths, note);
  std::vector<std::string> files;
  try {
    files = testcase::collect_testcase_files(paths);
  } catch (const testcase::LoadError& e) {
    throw InputError(e.what());
  }
  std::string errors;
  std::set<std::string> failed;  // files already refused
  const auto refuse = [&](const std::string& file, std::string why) {
    failed.insert(file);
    if (failures) failures->push_back({file, std::move(why)});
    else errors += why + "\n";
  };
  // A case file naming a plugin would run that library's code on `kcert run x.yaml`; it loads
  // only what the user already named (--plugin, KCERT_PLUGINS) unless they trust case files.
  for (const auto& f : files) {
    try {
      const auto plugins = testcase::plugin_paths(f);
      for (const auto& p : plugins) {
        std::error_code ec;
        const auto canonical = std::filesystem::weakly_canonical(p, ec).string();
        if (!policy.allow_case_plugins && !registry.has_plugin(canonical)) {
          throw InputError(f + ": plugins: names " + p +
                           ", and a case file does not load code on its own; name it yourself with --plugin " + p +
                           " (or KCERT_PLUGINS), or pass --allow-case-plugins to trust every case's plugins (docs/plugins.md)");
        }
      }
      load_plugins(plugins, registry, note);
      // Python kernel files: described (and so run) only when the user named them or trusts
      // case files; otherwise the case loads and is skipped with the remedy (a controls folder
      // may ship such cases, and nothing of theirs ran).
      for (const auto& p : testcase::python_paths(f)) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(p, ec)) throw InputError(f + ": python: " + p + ": no such file");
        if (policy.allow_case_plugins && !policy.python.command.empty()) describe_python_file(p, policy.python, registry, note);
      }
    } catch (const InputError& e) {
      if (!failures) throw;
      refuse(f, e.what());
    } catch (const testcase::LoadError& e) {
      if (!failures) throw InputError(e.what());
      refuse(f, e.what());
    }
  }
  if (policy.after_case_plugins) {
    try {
      policy.after_case_plugins(registry);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError(e.what());
    }
  }
  testcase::FamilySchemas schemas;
  for (const auto& name : registry.family_names()) schemas.emplace(name, registry.family(name).schema());
  if (files.empty()) throw InputError("no test cases found (looked for *.yaml and *.yml in the given paths)");
  std::vector<contract::TestCase> cases;
  std::map<std::string, std::string> seen;
  for (const auto& f : files) {
    if (failed.count(f)) continue;
    try {
      // One case per direction the file certifies (`direction: both`: two), refused together.
      auto loaded = testcase::load_testcases(f, schemas, profile);
      std::string why;
      for (const auto& tc : loaded) {
        if (const auto it = seen.find(tc.id); it != seen.end()) {
          why = f + ": id: '" + tc.id + "' is already used by " + it->second;
          break;
        }
        if (const auto unknown = python_unknown_variant(tc, registry); !unknown.empty()) {
          why = f + ": " + unknown;
          break;
        }
        // Refused before anything is allocated: a shape typo must not take the machine down.
        if (const auto refusal = memory_refusal(tc, registry, policy.memory)) {
          why = f + ": " + *refusal;
          break;
        }
      }
      if (!why.empty()) {
        refuse(f, why);
        continue;
      }
      for (auto& tc : loaded) {
        seen.emplace(tc.id, f);
        cases.push_back(std::move(tc));
      }
    } catch (const testcase::LoadError& e) {
      refuse(f, e.what());
    }
  }
  if (!errors.empty()) {
    errors.pop_back();
    throw InputError(errors);
  }
  // A profile no case defines is a typo, not a request for contract shapes under a new name.
  if (!profile.empty() && !cases.empty()) {
    std::set<std::string> defined;
    for (const auto& tc : cases) defined.insert(tc.profiles.begin(), tc.profiles.end());
    if (!defined.count(profile)) {
      std::string names;
      for (const auto& d : defined) names += (names.empty() ? "" : ", ") + d;
      const auto hint = text::did_you_mean(profile, std::vector<std::string>(defined.begin(), defined.end()));
      throw UsageError("--profile " + profile + ": no case defines this profile" + (hint.empty() ? "" : ";" + hint) +
                       " (defined: " + (names.empty() ? std::string("none") : names) + ")");
    }
  }
  return cases;
}

namespace {
std::vector<std::regex> compiled(const std::vector<std::string>& filters) {
  std::vector<std::regex> res;
  for (const auto& f : filters) {
    try {
      res.emplace_back(f);
    } catch (const std::regex_error& e) {
      throw UsageError("--filter: '" + f + "' is not a regular expression: " + e.what());
    }
  }
  return res;
}
}  // namespace

std::vector<contract::TestCase> filter_cases(std::vector<contract::TestCase> cases, const std::vector<std::string>& filters) {
  if (filters.empty()) return cases;
  const auto res = compiled(filters);
  std::vector<contract::TestCase> kept;
  for (auto& c : cases) {
    const bool match = std::any_of(res.begin(), res.end(), [&](const std::regex& r) {
      return std::regex_search(c.id, r) || std::regex_search(c.family, r);
    });
    if (match) kept.push_back(std::move(c));
  }
  return kept;
}

bool any_filter_matches(const std::vector<std::string>& filters, const std::string& text) {
  const auto res = compiled(filters);
  return res.empty() || std::any_of(res.begin(), res.end(), [&](const std::regex& r) { return std::regex_search(text, r); });
}

engine::CaseResult load_failure_result(const LoadFailure& failure) {
  engine::CaseResult r;
  r.testcase.id = failure.file;
  r.testcase.source = failure.file;
  r.error = "cannot load the case file: " + failure.reason;
  r.verdict = stats::Verdict::fail;
  r.torch_version = numerics::torch_version();
  return r;
}

std::vector<engine::CaseResult> run_cases(const std::vector<contract::TestCase>& cases, const kernels::Registry& registry,
                                          engine::RunOptions options, const SuitePolicy& policy, const Sinks& sinks) {
  if (!sinks.empty()) {
    options.progress = [&sinks, caller = std::move(options.progress)](const engine::Progress& p) {
      if (caller) caller(p);
      for (auto* sink : sinks) sink->progress(p);
    };
  }
  for (auto* sink : sinks) sink->run_started(cases);
  std::vector<engine::CaseResult> results;
  const auto finished = [&] {
    for (auto* sink : sinks) sink->case_finished(results);
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    for (auto* sink : sinks) sink->case_started(i, cases.size());
    auto why = python_skip_reason(cases[i], registry, policy.python);
    if (why.empty()) why = unavailable_reason(cases[i], registry);
    if (!why.empty()) {
      engine::CaseResult skipped;
      skipped.testcase = cases[i];
      skipped.skipped = std::move(why);
      skipped.torch_version = numerics::torch_version();
      results.push_back(std::move(skipped));
      finished();
      continue;
    }
    const auto failed = [&](std::string why) {
      engine::CaseResult r;
      r.testcase = cases[i];
      r.error = std::move(why);
      r.verdict = stats::Verdict::fail;
      return r;
    };
    // Plugin kernels run in a child process: a crash, exit(), abort or hang there ends this
    // case as ERROR, not the run (runner/isolated.hpp).
    const bool from_plugin = kernels_from_plugin(cases[i], registry);
    const bool isolate = policy.isolation.mode == Isolation::Mode::all ||
                         (policy.isolation.mode == Isolation::Mode::plugins && from_plugin);
    // Stand-ins for Python kernels run only where the kernels are: a `python -m kcert` worker,
    // whatever --isolation says.
    const auto python_worker = python_worker_for(cases[i], registry, policy.python);
    try {
      if (!python_worker.empty()) {
        IsolationOptions io;
        io.deadline_seconds = policy.isolation.deadline_seconds;
        io.who = "Python kernel";
        results.push_back(run_case_spawned(cases[i], registry, options, io, python_worker));
      } else if (isolate) {
        IsolationOptions io;
        io.deadline_seconds = policy.isolation.deadline_seconds;
        io.who = !from_plugin ? "case" : python_kernels(cases[i], registry) ? "Python kernel" : "plugin kernel";
        results.push_back(policy.isolation.process == Isolation::Process::spawn
                              ? run_case_spawned(cases[i], registry, options, io, policy.isolation.worker)
                              : run_case_isolated(cases[i], registry, options, io));
      } else {
        results.push_back(engine::run_case(cases[i], registry, options));
      }
    } catch (const std::exception& e) {
      if (options.device == "cuda" && std::string(e.what()).find("--device cuda") != std::string::npos) throw UsageError(e.what());
      results.push_back(failed(e.what()));
    } catch (...) {
      results.push_back(failed("the case threw an exception that is not a std::exception"));
    }
    finished();
  }
  for (auto* sink : sinks) sink->run_finished(results);
  return results;
}

}  // namespace kcert::runner
