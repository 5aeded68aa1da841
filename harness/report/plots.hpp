#pragma once
// The report's plots apart from its pages (issue 51): for one control, the data files and the
// gnuplot script of its K-hat tail (with the fitted GPD), mean residual life, threshold
// stability, QQ plot and bias plane; a control's history over runs; and gnuplot run on a
// script inside the plots folder. The pages (html.cpp) only place the figures these name.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/report/control_view.hpp"
#include "harness/runner/nightly.hpp"

namespace kcert::report {

struct ControlPlots {
  std::vector<std::pair<std::string, std::string>> figures;  // file, caption
};

// Writes the data and the gnuplot script of one control's plots; returns the figures it
// will produce. `v` is the control's typed view (control_view.hpp), `dir` is out/plots, `stem`
// the control's file name (store::safe_file_name).
ControlPlots plan_plots(const ControlView& v, const std::vector<double>& khat, const std::filesystem::path& dir,
                        const std::string& stem, std::ostringstream& gp);

// The history plot's data and script (U and max |z| over runs); its SVG's file name, or ""
// when fewer than two runs can be placed.
std::string history_plot(const std::vector<runner::HistoryPoint>& h, const std::filesystem::path& dir, const std::string& stem,
                         std::ostringstream& gp);

// Runs gnuplot on `script` inside `dir`, its output in the file `log` there; false, with the
// reason in `why`, when it cannot start or fails.
bool run_gnuplot(const std::filesystem::path& dir, const std::string& script, const std::string& log, std::string& why);

}  // namespace kcert::report
