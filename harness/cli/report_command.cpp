#include "harness/cli/report_command.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "harness/cli/exit_codes.hpp"
#include "harness/report/html.hpp"

namespace kcert::cli {

namespace fs = std::filesystem;

void register_report_command(CLI::App& app) {
  struct Options {
    std::string folder, out;
    bool no_db = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("report", "Write the HTML report of a nightly report folder (index.html, one page per control, plots)");
  cmd->footer(
      "Reads FOLDER/results.json and FOLDER/tails/*.csv, as `kcert nightly` leaves them (it writes this\n"
      "report itself into FOLDER/html), and writes a static site that opens from disk: the falsifiability\n"
      "table, what changed since the last run, every control with its verdicts, and per control the K-hat\n"
      "tail with the fitted GPD, a mean residual life plot, a threshold-stability plot, a QQ plot, the bias\n"
      "plane, and its history from the database (KCERT_DB; --no-db to skip). Plots need gnuplot.\n\n"
      "Example:\n  kcert report .kcert/reports/nightly-20261201T023000Z-1 && xdg-open .kcert/reports/.../html/index.html");
  cmd->add_option("folder", o->folder, "a nightly report folder (holds results.json)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--out", o->out, "where to write the site (default: FOLDER/html)");
  cmd->add_flag("--no-db", o->no_db, "do not read history from the database");
  cmd->callback([o]() {
    const fs::path folder(o->folder);
    const auto input = report::read_report_folder(folder, !o->no_db);
    const auto out = o->out.empty() ? folder / "html" : fs::path(o->out);
    report::HtmlReportSummary s;
    try {
      s = report::write_html_report(input, out);
    } catch (const report::ReportFormatError& e) {
      throw InputError((folder / "results.json").string() + ": " + e.what());
    }
    std::cout << fmt::format("report: {}/index.html ({} pages, {} plots)\n", fs::absolute(out).string(), s.pages, s.plots);
    if (!s.plot_note.empty()) std::cerr << "kcert: warning: " << s.plot_note << "\n";
  });
}


}  // namespace kcert::cli
