// `kcert controls-doc`: docs/controls.md from the control YAML files and the last measured
// results (rendered by report/controls_doc.hpp).

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/nightly_command.hpp"
#include "harness/report/controls_doc.hpp"
#include "harness/cli/run_cases_command.hpp"
#include "harness/store/json.hpp"

namespace kcert::cli {

namespace {

struct DocOptions {
  std::vector<std::string> paths{"testcases"};
  std::vector<std::string> results;
  std::string output;
};

// The measured results of each file given (--results), read in order.
report::MeasuredControls read_measured(const std::vector<std::string>& paths) {
  report::MeasuredControls measured;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) throw InputError(path + ": cannot open results file");
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(path + ": not JSON: " + e.what());
    }
    try {
      report::add_measured(measured, doc, std::filesystem::path(path).filename().string());
    } catch (const std::exception& e) {
      throw InputError(path + ": " + e.what());
    }
  }
  return measured;
}

}  // namespace

void register_controls_doc_command(CLI::App& app, kernels::Registry& registry, const runner::SuitePolicy& policy) {
  auto o = std::make_shared<DocOptions>();
  auto* cmd = app.add_subcommand("controls-doc", "Write docs/controls.md from the control YAML files and measured results");
  cmd->footer(
      "The catalog of controls as Markdown: per control its id, family, kind, mechanism,\n"
      "references, YAML expectation (with the catalog's prediction and any written reason in\n"
      "the note) and, from the given results (kcert suite --json or a nightly's results.json),\n"
      "the last measured verdict of each gate and of today's three checks.\n\n"
      "Example:\n"
      "  kcert suite testcases --json suite.json && kcert controls-doc --results suite.json -o docs/controls.md");
  cmd->add_option("dirs", o->paths, "control folders or files")->capture_default_str();
  cmd->add_option("--results", o->results, "results JSON (repeatable; later files win)")->allow_extra_args(false);
  cmd->add_option("-o,--output", o->output, "write here instead of stdout");
  cmd->callback([o, &registry, &policy]() {
    const auto cases = load_cases(o->paths, registry, "", policy);
    const auto md = report::controls_markdown(cases, read_measured(o->results));
    if (o->output.empty()) {
      std::cout << md;
    } else {
      std::ofstream out(o->output);
      if (!out) throw InputError(o->output + ": cannot write");
      out << md;
      std::cerr << "kcert: wrote " << o->output << " (" << cases.size() << " controls)\n";
    }
  });
}

}  // namespace kcert::cli
