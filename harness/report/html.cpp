#include "harness/report/html.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "harness/runner/errors.hpp"
#include "harness/report/control_view.hpp"
#include "harness/report/khat_csv.hpp"
#include "harness/report/tables.hpp"
#include "harness/stats/verdict.hpp"
#include "harness/text/escape.hpp"
#include "eval/falsifiability.hpp"
#include "harness/stats/format.hpp"
#include "harness/stats/gpd.hpp"
#include "harness/store/environment.hpp"
#include "harness/store/json.hpp"
#include "harness/store/json_text.hpp"
#include "harness/io/process.hpp"
#include "harness/io/regular_file.hpp"
#include "harness/store/postgres.hpp"


namespace kcert::report {

using runner::InputError;
using runner::UsageError;

namespace fs = std::filesystem;

namespace {

// Every text on a page goes through esc.
std::string esc(std::string_view s) { return text::html_escape(s); }

// An http(s) URL with a host, case-insensitive in the scheme as browsers read it.
bool is_web_link(const std::string& s) {
  std::string head;
  for (char c : s.substr(0, 8)) head += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto rest = head.rfind("https://", 0) == 0 ? 8u : head.rfind("http://", 0) == 0 ? 7u : 0u;
  return rest > 0 && s.size() > rest && s.find_first_of(" \t\r\n\"<>\\") == std::string::npos;
}

std::string num(const nlohmann::json& j) {
  if (j.is_number()) return stats::format_number(j.get<double>());
  if (j.is_string()) return j.get<std::string>();
  return "-";
}

std::string text(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

// A finite number from a result field: documents built in memory carry ±inf (an infinite U),
// which the JSON file stores as null; neither may reach a plot coordinate.
bool finite(const nlohmann::json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

// Beside a variance PASS whose evidence does not reach the declared horizon (issue 32): the
// chip says so where the verdict is read, not only in a footnote.
std::string short_of_horizon(const std::optional<double>& h) {
  if (!h) return "";
  return " <span class=\"badge short\" title=\"PASS short of the horizon: the evidence supports " +
         (std::isnan(*h) ? std::string("fewer") : stats::format_number(*h)) + " replicates\">short</span>";
}

std::string badge(const std::string& verdict) {
  const std::string cls = verdict == "PASS"   ? "pass"
                          : verdict == "INCONCLUSIVE" ? "inconclusive"
                          : verdict == "WARN" ? "warn"
                          : verdict == "FAIL" ? "fail"
                          : verdict == "SKIP" ? "skip"
                                              : "error";
  return "<span class=\"badge " + cls + "\">" + esc(verdict.empty() ? "-" : verdict) + "</span>";
}

// The algebra gate of an opaque production did not run (issue 33): "n/a", not the PASS its
// default verdict reads.
const std::string kNotApplicableBadge = "<span class=\"badge skip\" title=\"not applicable: opaque production\">n/a</span>";

// A probe setting's or gradient's algebra badge: n/a where `algebra_applicable` is false.
std::string point_algebra_badge(const nlohmann::json& point) {
  const auto it = point.find("algebra_applicable");
  if (it != point.end() && it->is_boolean() && !it->get<bool>()) return kNotApplicableBadge;
  return badge(text(point, "algebra"));
}

// A FAIL or WARN that is what the control is for (a negative detected as expected).
std::string designed_badge(const std::string& verdict) {
  if (verdict != "FAIL" && verdict != "WARN") return badge(verdict);
  return "<span class=\"badge designed\" title=\"detected, as the control is designed to be\">" + esc(verdict) + "</span>";
}

// A file of the plots folder, named in a gnuplot script. Only its name goes into the script
// (gnuplot runs in that folder, run_gnuplot): the folder's path is the user's, or derived
// from a run id, and a newline in it ended the quoted string and ran the next line as a
// gnuplot command (`!touch FILE`). The names are control stems (store::safe_file_name) with
// fixed suffixes, so nothing but [A-Za-z0-9._-] reaches the script; anything else is a bug.
std::string gp_file(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const bool plain = !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!plain) throw std::logic_error("html_report: plot file name '" + name + "' is not a plain file name");
  return "'" + name + "'";
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 78em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0.05em 0.5em; border-radius: 0.6em; font-weight: bold; font-size: 0.9em; }
.pass { background: #d7f0d7; color: #155a15; } .warn { background: #fff0c2; color: #7a5a00; }
.short { background: #e8e8f4; color: #3a3a6a; font-weight: normal; }
.fail { background: #f8d0d0; color: #8a1010; } .error { background: #ddd; color: #333; }
.skip { background: #fff; color: #555; border: 1px dashed #999; }
.designed { background: #dde6f5; color: #1f3f7f; }
th.sortable { cursor: pointer; } th.sortable::after { content: " \2195"; color: #999; }
input.filter { margin: 0.3em 0; padding: 0.2em 0.4em; width: 24em; }
.inconclusive { background: #fff; color: #6a4a00; border: 1px dashed #c09000; }
.attention { background: #fff4e5; border-left: 4px solid #e08a00; padding: 0.5em 1em; }
figure { display: inline-block; margin: 0.5em 1em 1em 0; max-width: 46em; vertical-align: top; }
figure img { width: 44em; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; }
)";

// The index's controls table: a filter box (every word must occur in the row) and headers
// that sort (numbers as numbers, "-" last). The page stays complete without scripts.
constexpr const char* kIndexScript = R"(<script>
(function () {
  const table = document.getElementById("controls");
  const box = document.getElementById("filter");
  const rows = () => Array.from(table.tBodies[0].rows);
  box.addEventListener("input", () => {
    const words = box.value.toLowerCase().split(/\s+/).filter((w) => w);
    for (const row of rows()) {
      const text = row.textContent.toLowerCase();
      row.style.display = words.every((w) => text.includes(w)) ? "" : "none";
    }
  });
  Array.from(table.tHead.rows[0].cells).forEach((th, column) => {
    th.addEventListener("click", () => {
      const down = th.dataset.order !== "up";
      th.dataset.order = down ? "up" : "down";
      const key = (row) => {
        const t = row.cells[column].textContent.trim();
        const n = parseFloat(t);
        return t === "-" ? null : isNaN(n) ? t : n;
      };
      const sorted = rows().sort((a, b) => {
        const x = key(a), y = key(b);
        if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
        const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return down ? c : -c;
      });
      for (const row of sorted) table.tBodies[0].appendChild(row);
    });
  });
})();
</script>
)";

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + esc(title) +
         "</title><style>" + kStyle + "</style></head><body>\n" + body + "\n</body></html>\n";
}

// A plot's data file, written by close() through store::write_text_file: a fresh file renamed
// into place, so a name planted in the plots folder (a link to a root-only file) is replaced,
// never written through (issue 53; std::ofstream followed it and truncated the target). Every
// one is closed where its data ends, so a write error surfaces there.
class DataFile {
 public:
  explicit DataFile(std::string path) : path_(std::move(path)) {}
  template <class T>
  DataFile& operator<<(const T& v) {
    text_ << v;
    return *this;
  }
  void close() { store::write_text_file(path_, text_.str()); }

 private:
  std::string path_;
  std::ostringstream text_;
};

// Runs gnuplot on a script, from inside the plots folder (the script names its files relative
// to it, gp_file); false (with the reason) when it cannot. The script goes to gnuplot's
// standard input and the folder is entered through a descriptor opened without following a
// link: the .gp file beside the plots is for people to rerun, and what gnuplot runs is the
// text kcert made, whoever renames files in the folder meanwhile (issue 53: a swapped .gp ran
// its system() as root).
// `log` names the file in that folder that takes gnuplot's output (one per control, beside its
// .gp script).
bool run_gnuplot(const fs::path& dir, const std::string& script, const std::string& log, std::string& why) {
  const std::string folder = dir.empty() ? "." : dir.string();
  const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) {
    why = "gnuplot could not be started in " + folder + ": " + std::strerror(errno);
    return false;
  }
  // gnuplot's own words (warnings about a series, its errors) go to the log in the plots
  // folder, not to the console of a nightly (issue 32); an empty log is removed.
  // Read and write: its last line is read back for the reason of a failure.
  const int log_fd = ::openat(dir_fd, log.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    why = "gnuplot could not be started in " + folder + ": " + log + ": " + std::strerror(errno);
    ::close(dir_fd);
    return false;
  }
  // After the run: the log's last line for a failure, and an empty log removed.
  auto finish_log = [&]() {
    std::string last;
    struct stat st {};
    if (::fstat(log_fd, &st) == 0 && st.st_size > 0) {
      const off_t from = st.st_size > 4096 ? st.st_size - 4096 : 0;
      std::string tail(static_cast<std::size_t>(st.st_size - from), '\0');
      const ssize_t n = ::pread(log_fd, tail.data(), tail.size(), from);
      tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
      last = tail.substr(tail.find_last_of('\n') == std::string::npos ? 0 : tail.find_last_of('\n') + 1);
    } else {
      ::unlinkat(dir_fd, log.c_str(), 0);
    }
    ::close(log_fd);
    ::close(dir_fd);
    return last;
  };
  io::ProcessSpec spec;
  spec.argv = {"gnuplot"};
  spec.search_path = true;
  spec.input = script + "\nexit\n";
  spec.output_fd = log_fd;
  spec.directory_fd = dir_fd;
  io::ProcessOutcome o;
  try {
    o = io::run_process(spec);
  } catch (const std::runtime_error& e) {
    finish_log();
    why = std::string("gnuplot could not be started: ") + e.what();
    return false;
  }
  const std::string last = finish_log();
  if (o.start_error != 0) {
    why = o.start_error == ENOENT
              ? "gnuplot is not installed (apt-get install gnuplot-nox); the pages carry the numbers without plots"
              : "gnuplot could not be started in " + folder + ": " + std::strerror(o.start_error);
    return false;
  }
  if (o.exit_status != 0) {
    why = "gnuplot failed on the plots of " + folder;
    if (!last.empty()) why += " (" + text::terminal_safe(last) + "; the whole of it in " + log + ")";
    return false;
  }
  return true;
}

struct ControlPlots {
  std::vector<std::pair<std::string, std::string>> figures;  // file, caption
};

}  // namespace

// Below, beside the flagged-bucket table that also names buckets.
std::string bucket_label(const std::string& axis, std::int64_t bucket, const nlohmann::json& probe_params);

namespace {

// Writes the data and the gnuplot script of one control's plots; returns the figures it
// will produce. `dir` is out/plots, `stem` the control's file name.
ControlPlots plan_plots(const nlohmann::json& r, const std::vector<double>& khat, const fs::path& dir,
                        const std::string& stem, std::ostringstream& gp) {
  ControlPlots plots;
  const auto& variance = r.at("gates").at("variance");
  const auto& tail = variance.value("tail", nlohmann::json::object());
  const auto& settings = tail.value("settings", nlohmann::json::object());
  const double warn_k = settings.value("warn_K", 2.0), fail_k = settings.value("fail_K", 10.0);
  const double horizon = settings.value("horizon", 6.25e5);
  std::vector<double> positive;
  for (double k : khat)
    if (k > 0 && std::isfinite(k)) positive.push_back(k);
  std::sort(positive.begin(), positive.end());
  const auto R = static_cast<double>(khat.size());
  const auto data = [&](const std::string& name) { return (dir / (stem + "-" + name + ".dat")).string(); };
  const auto svg = [&](const std::string& name) { return stem + "-" + name + ".svg"; };
  gp << "set terminal svg size 720,440 dynamic font 'sans,12' background '#ffffff'\nset grid\nset key top right\n";

  // A fitted tail whose curve can be drawn (a document edited by hand may hold a sigma of 0).
  const bool fitted = text(tail, "mode") == "fitted" && finite(tail.at("xi_clipped")) && finite(tail.at("sigma")) &&
                      tail.at("sigma").get<double>() > 0 && finite(tail.at("u")) && finite(tail.at("zeta"));
  if (positive.size() >= 2) {
    // 1. The K-hat tail: empirical exceedance probability, the fitted GPD, u, r_T, U, thresholds.
    {
      DataFile d(data("tail"));
      for (std::size_t i = 0; i < positive.size(); ++i)
        d << fmt::format("{:.17g} {:.17g}\n", positive[i], static_cast<double>(positive.size() - i) / R);
      d.close();
    }
    std::string curve;
    double x_max = std::max(positive.back(), fail_k) * 1.08;
    if (fitted) {
      const double u = tail.at("u"), xi = tail.at("xi_clipped"), sigma = tail.at("sigma"), zeta = tail.at("zeta");
      if (finite(variance.value("U", nlohmann::json()))) x_max = std::max(x_max, variance.at("U").get<double>() * 1.08);
      DataFile d(data("gpd"));
      for (int i = 0; i <= 200; ++i) {
        const double x = u + (x_max - u) * i / 200.0;
        const double p = zeta * stats::gpd_survival(x - u, xi, sigma);
        if (p > 0) d << fmt::format("{:.17g} {:.17g}\n", x, p);
      }
      d.close();
      curve = ", " + gp_file(data("gpd")) + " using 1:2 with lines lw 2 lc rgb '#1f5fbf' title 'fitted GPD above u'";
      gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#555555'\n", u);
      gp << fmt::format("set label 'u' at {},graph 0.96 offset 0.3,0 noenhanced\n", u);
      if (finite(tail.at("r_T"))) {
        const double rt = tail.at("r_T");
        gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lc rgb '#1f5fbf'\n", rt);
        gp << fmt::format("set label 'r_T' at {},graph 0.90 offset 0.3,0 tc rgb '#1f5fbf' noenhanced\n", rt);
      }
    }
    if (finite(variance.value("U", nlohmann::json()))) {
      const double U = variance.at("U");
      gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lw 2 lc rgb '#000000'\n", U);
      gp << fmt::format("set label 'U' at {},graph 0.84 offset 0.3,0 noenhanced\n", U);
    }
    gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lw 2 dt 2 lc rgb '#d09000'\n", warn_k);
    gp << fmt::format("set label 'warn_K' at {},graph 0.06 offset 0.3,0 tc rgb '#d09000' noenhanced\n", warn_k);
    gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lw 2 dt 2 lc rgb '#c02020'\n", fail_k);
    gp << fmt::format("set label 'fail_K' at {},graph 0.12 offset 0.3,0 tc rgb '#c02020' noenhanced\n", fail_k);
    gp << fmt::format("set arrow from graph 0,first {0} to graph 1,first {0} nohead dt 4 lc rgb '#777777'\n", 1.0 / horizon);
    gp << "set output " << gp_file((dir / svg("tail")).string()) << "\nset logscale y\nset format y '10^{%L}'\n"
       << "set xlabel 'K-hat  (production error minus 1 ULP, over reference error)'\nset ylabel 'P(K-hat > x)'\n"
       << fmt::format("set xrange [0:{}]\nset yrange [{}:1.2]\n", x_max, std::min(0.5 / R, 0.2 / horizon))
       << "plot " << gp_file(data("tail")) << " using 1:2 with points pt 7 ps 0.45 lc rgb '#444444' title 'replicates'"
       << curve << "\nunset arrow\nunset label\nunset logscale y\nunset format y\nset format y '% g'\nset autoscale\n";
    plots.figures.push_back(
        {svg("tail"),
         "The K-hat tail. Points: each replicate's K-hat against the share of replicates above it. Blue: the GPD "
         "fitted above the threshold u; r_T is where it crosses the horizon's probability 1/T (dotted line), U the "
         "0.99 upper bound the verdict judges against warn_K and fail_K. Points bending away from the curve above u "
         "mean the fit does not describe the tail: check the two plots below before trusting U."});
  }
  if (positive.size() >= 20) {
    // 2-3. Mean residual life and threshold stability over thresholds from the median to the 98 % quantile.
    DataFile mrl(data("mrl")), stab(data("stability"));
    int mrl_rows = 0, stab_rows = 0;
    for (int j = 0; j <= 24; ++j) {
      const double q = 0.5 + 0.02 * j;
      const double v = positive[static_cast<std::size_t>(q * static_cast<double>(positive.size() - 1))];
      std::vector<double> y;
      for (double k : positive)
        if (k > v) y.push_back(k - v);
      if (y.size() < 5) continue;
      double mean = 0, sq = 0;
      for (double e : y) mean += e;
      mean /= static_cast<double>(y.size());
      for (double e : y) sq += (e - mean) * (e - mean);
      const double se = std::sqrt(sq / static_cast<double>(y.size() - 1) / static_cast<double>(y.size()));
      mrl << fmt::format("{:.17g} {:.17g} {:.17g} {:.17g}\n", v, mean, mean - 1.96 * se, mean + 1.96 * se);
      ++mrl_rows;
      if (y.size() >= 20) {
        try {
          const auto f = stats::fit_gpd(y);
          stab << fmt::format("{:.17g} {:.17g} {:.17g}\n", v, f.xi, f.sigma - f.xi * v);
          ++stab_rows;
        } catch (const std::exception&) {
        }
      }
    }
    mrl.close();
    stab.close();
    const std::string u_line =
        fitted ? fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#555555'\n", tail.at("u").get<double>())
               : std::string();
    if (mrl_rows >= 2) {
    gp << u_line << "set output " << gp_file((dir / svg("mrl")).string()) << "\n"
       << "set xlabel 'threshold v (K-hat)'\nset ylabel 'mean excess  E[K-hat - v | K-hat > v]'\n"
       << "plot " << gp_file(data("mrl")) << " using 1:3:4 with filledcurves lc rgb '#cfe0f5' title '95 % band', "
       << gp_file(data("mrl")) << " using 1:2 with linespoints pt 7 ps 0.5 lc rgb '#1f5fbf' title 'mean excess'\nunset arrow\n";
    plots.figures.push_back(
        {svg("mrl"),
         "Mean residual life. Above a threshold where a GPD fits, the mean excess is linear in v (slope ξ/(1-ξ); "
         "falling for the bounded tails the gate assumes). The dotted line is the threshold u the fit used: the curve "
         "should be close to a straight line from there on."});
    }
    if (stab_rows >= 2) {
    gp << u_line << "set output " << gp_file((dir / svg("stability")).string()) << "\n"
       << "set multiplot layout 2,1\nset xlabel ''\nset ylabel 'shape ξ (free fit)'\n"
       << "plot " << gp_file(data("stability")) << " using 1:2 with linespoints pt 7 ps 0.5 lc rgb '#1f5fbf' notitle, 0 dt 2 lc rgb '#999999' notitle\n"
       << "set xlabel 'threshold v (K-hat)'\nset ylabel 'modified scale σ - ξv'\n"
       << "plot " << gp_file(data("stability")) << " using 1:3 with linespoints pt 7 ps 0.5 lc rgb '#1f5fbf' notitle\n"
       << "unset multiplot\nunset arrow\n";
    plots.figures.push_back(
        {svg("stability"),
         "Threshold stability. A GPD fitted (without the ξ ≤ 0 clip) above each threshold with at least 20 "
         "exceedances. Where the model holds, ξ and the modified scale stay flat as v rises. A shape above 0 (dashed "
         "line) contradicts the bounded-tail assumption the gate clips to."});
    }
  }
  if (fitted) {
    // 4. QQ plot of the exceedances against the fitted GPD.
    const double u = tail.at("u"), xi = tail.at("xi_clipped"), sigma = tail.at("sigma");
    std::vector<double> exc;
    for (double k : positive)
      if (k > u) exc.push_back(k - u);
    DataFile d(data("qq"));
    const auto n = static_cast<double>(exc.size());
    double hi = 0;
    for (std::size_t i = 0; i < exc.size(); ++i) {
      const double model = stats::gpd_quantile((static_cast<double>(i) + 1) / (n + 1), xi, sigma);
      d << fmt::format("{:.17g} {:.17g}\n", model, exc[i]);
      hi = std::max({hi, model, exc[i]});
    }
    d.close();
    gp << "set output " << gp_file((dir / svg("qq")).string()) << "\n"
       << "set xlabel 'fitted GPD quantile of K-hat - u'\nset ylabel 'observed K-hat - u'\n"
       << fmt::format("set xrange [0:{0}]\nset yrange [0:{0}]\n", hi * 1.05)
       << "plot " << gp_file(data("qq")) << " using 1:2 with points pt 7 ps 0.5 lc rgb '#444444' title 'exceedances', "
       << "x dt 2 lc rgb '#1f5fbf' title 'y = x'\nset autoscale\n";
    plots.figures.push_back(
        {svg("qq"),
         "QQ plot of the exceedances over u against the fitted (clipped) GPD. Points on the diagonal: the fit "
         "describes the tail. Points above it at the right end: the tail is heavier than fitted, and U may be "
         "too low."});
  }
  // 5. The bias plane: every bucket the result keeps (flagged ones and the top ones by |z|).
  const auto& bias = r.at("gates").at("bias");
  const auto& th = bias.value("thresholds", nlohmann::json::object());
  int points = 0;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = 0, y_lo = x_lo, y_hi = 0;
  int group_points[6] = {0, 0, 0, 0, 0, 0};  // (statistic, verdict), one data file each
  int group = 0;
  const auto group_file = [&](int g) { return data("bias-" + std::to_string(g)); };
  // The flagged buckets are named beside their points in the family's terms ("channel 29"),
  // up to 5 per statistic by |z|, so the plane and the flagged-bucket table meet.
  struct PointLabel {
    double x, y, abs_z;
    std::string text;
  };
  std::vector<PointLabel> labels;
  const std::string axis = text(bias, "axis");
  const auto probe_params = r.value("probe", nlohmann::json::object()).value("params", nlohmann::json::object());
  for (const char* statistic : {"signed", "magnitude"}) {
    std::vector<PointLabel> mine;
    for (const auto& b : bias.value(statistic, nlohmann::json::object()).value("flagged", nlohmann::json::array())) {
      if (!b.is_object() || !b.contains("bucket") || !b.at("bucket").is_number_integer() || !b.contains("ulp_effect") ||
          !finite(b.at("ulp_effect")) || !b.contains("effect") || !finite(b.at("effect")))
        continue;
      const double x = b.at("ulp_effect").get<double>(), y = b.at("effect").get<double>();
      if (!(x > 0) || !(y > 0)) continue;
      const double z = b.contains("z") && b.at("z").is_number() ? std::fabs(b.at("z").get<double>()) : 0.0;
      mine.push_back({x, y, z, bucket_label(axis, b.at("bucket").get<std::int64_t>(), probe_params)});
    }
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.abs_z > b.abs_z; });
    // Flagged buckets cluster: a label is placed only where it does not cover one already
    // placed (about a line's height and a label's width apart on the log axes).
    int placed = 0;
    for (const auto& l : mine) {
      const bool covers = std::any_of(labels.begin(), labels.end(), [&](const PointLabel& o) {
        return std::fabs(std::log10(l.y / o.y)) < 0.08 && std::fabs(std::log10(l.x / o.x)) < 0.2;
      });
      if (covers) continue;
      labels.push_back(l);
      if (++placed == 5) break;
    }
  }
  for (const char* statistic : {"signed", "magnitude"}) {
    const auto& s = bias.value(statistic, nlohmann::json::object());
    for (const char* verdict : {"PASS", "WARN", "FAIL"}) {
      DataFile d(group_file(group));
      for (const char* list : {"flagged", "top"}) {
        for (const auto& b : s.value(list, nlohmann::json::array())) {
          // Log axes: a bucket with no difference at all (0, 0) has no place on them, nor one
          // with sd = 0 (an infinite standardized effect).
          if (b.value("verdict", "") != verdict || !finite(b.at("ulp_effect")) || !finite(b.at("effect"))) continue;
          const double x = b.at("ulp_effect").get<double>(), y = b.at("effect").get<double>();
          if (!(x > 0) || !(y > 0)) continue;
          x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
          d << fmt::format("{:.17g} {:.17g}\n", x, y);
          ++points;
          ++group_points[group];
        }
      }
      d.close();
      ++group;
    }
  }
  if (points > 0) {
    const double c = th.value("c", 0.3), cm = th.value("c_magnitude", 0.2), s_min = th.value("s_min", 0.2);
    // The key goes bottom right, where a bias plane has the fewest points (large ULP effects
    // with small standardized ones), away from the flagged buckets' names.
    gp << "set output " << gp_file((dir / svg("bias")).string()) << "\nset logscale xy\nset key bottom right\n"
       << fmt::format("set xrange [{}:{}]\nset yrange [{}:{}]\n", std::min(x_lo, cm) / 3, std::max(x_hi, c) * 3,
                      std::min(y_lo, s_min) / 3, std::max(y_hi, s_min) * 3)
       << "set xlabel '|mean difference| in ULPs of the bucket (ULP effect)'\nset ylabel '|mean| / sd (standardized effect)'\n"
       << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 2 lc rgb '#c02020'\n", c)
       << fmt::format("set label 'c (signed)' at {},graph 0.95 offset 0.3,0 tc rgb '#c02020' noenhanced\n", c)
       << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#8040a0'\n", cm)
       << fmt::format("set label 'c (magnitude)' at {},graph 0.88 offset 0.3,0 tc rgb '#8040a0' noenhanced\n", cm)
       << fmt::format("set arrow from graph 0,first {0} to graph 1,first {0} nohead dt 2 lc rgb '#555555'\n", s_min)
       << fmt::format("set label 's_min' at graph 0.01,first {} offset 0,0.6 noenhanced\n", s_min) << "plot ";
    const char* colours[] = {"#2a8a2a", "#d09000", "#c02020"};
    const char* names[] = {"PASS", "WARN", "FAIL"};
    bool first = true;
    for (int stat = 0; stat < 2; ++stat) {
      for (int v = 0; v < 3; ++v) {
        if (group_points[stat * 3 + v] == 0) continue;  // an empty series only makes gnuplot warn
        gp << (first ? "" : ", ") << gp_file(group_file(stat * 3 + v)) << " using 1:2 with points pt "
           << (stat == 0 ? 7 : 6) << " ps 0.7 lc rgb '" << colours[v] << "' title '" << (stat == 0 ? "signed " : "magnitude ")
           << names[v] << "'";
        first = false;
      }
    }
    if (!labels.empty()) {
      // A label is data gnuplot reads between double quotes: only letters, digits, spaces and
      // "._-" pass (the axis name comes from the results document, which anyone may craft).
      DataFile d(data("bias-labels"));
      for (const auto& l : labels) {
        std::string safe;
        for (char ch : l.text)
          if (std::isalnum(static_cast<unsigned char>(ch)) || ch == ' ' || ch == '.' || ch == '_' || ch == '-') safe += ch;
        d << fmt::format("{:.17g} {:.17g} \"{}\"\n", l.x, l.y, safe.substr(0, 48));
      }
      d.close();
      gp << (first ? "" : ", ") << gp_file(data("bias-labels"))
         << " using 1:2:3 with labels left offset 0.6,0.4 font ',9' tc rgb '#333333' noenhanced notitle";
    }
    gp << "\nunset arrow\nunset label\nunset logscale\nset autoscale\nset key top right\n";
    plots.figures.push_back(
        {svg("bias"),
         "The bias plane: each kept bucket's ULP effect against its standardized effect (filled: signed statistic, "
         "open: magnitude). A significant bucket FAILs only to the right of its statistic's ULP floor c and above "
         "s_min; significant buckets inside either floor are WARN. The strongest flagged buckets (up to 5 per "
         "statistic by |z|, where their names do not overlap) are named. The result keeps every flagged bucket and the top buckets by |z|, not all of them."});
  }
  return plots;
}

std::string history_plot(const std::vector<HistoryPoint>& h, const fs::path& dir, const std::string& stem,
                         std::ostringstream& gp) {
  // The x axis is the run's start (UTC), as the database gives it: 2026-12-05T01:00:00Z. A
  // point without such a time (it cannot be placed) is left out.
  const auto is_time = [](const std::string& t) {
    return t.size() == 20 && std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == 'T' || c == 'Z'; });
  };
  DataFile d((dir / (stem + "-history.dat")).string());
  std::size_t points = 0;
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (!is_time(h[i].started_at)) continue;
    ++points;
    d << fmt::format("{} {} {} \"{}\"\n", h[i].started_at, h[i].u >= 0 ? fmt::format("{:.17g}", h[i].u) : "NaN",
                     h[i].max_abs_z >= 0 ? fmt::format("{:.17g}", h[i].max_abs_z) : "NaN", h[i].verdict);
  }
  d.close();
  if (points < 2) return "";
  const std::string file = stem + "-history.svg";
  gp << "set output " << gp_file((dir / file).string()) << "\nset xdata time\nset timefmt '%Y-%m-%dT%H:%M:%SZ'\n"
     << "set format x \"%Y-%m-%d\\n%H:%M\"\nset xlabel 'run start (UTC)'\nset ylabel 'U'\nset y2label 'max |z|'\n"
     << "set ytics nomirror\nset y2tics\nplot " << gp_file((dir / (stem + "-history.dat")).string())
     << " using 1:2 with linespoints pt 7 lc rgb '#1f5fbf' title 'U (variance)' axes x1y1, '' using 1:3 with linespoints pt 6 "
        "lc rgb '#c02020' title 'max |z| (bias)' axes x1y2\nunset y2tics\nunset y2label\nset ytics mirror\n"
        "set xdata\nset format x '% h'\n";
  return file;
}

std::string falsifiability_table(const nlohmann::json& f) {
  if (!f.is_object() || !f.contains("gates")) return "<p>No falsifiability table in these results.</p>";
  std::string out = fmt::format(
      "<table><tr><th></th><th>negatives detected (of {})</th><th>positives FAIL (of {})</th><th>positives WARN</th></tr>",
      num(f.value("negatives", nlohmann::json())), num(f.value("positives", nlohmann::json())));
  const std::pair<const char*, const char*> rows[] = {
      {"algebra", "algebra gate"}, {"bias", "bias gate (deciding statistics)"}, {"variance", "variance gate"},
      {"combined", "combined"}, {"bias_signed_only", "bias gate, signed alone (notes)"},
      {"combined_signed_only", "combined, signed alone (notes)"}};
  for (const auto& [key, label] : rows) {
    if (!f.at("gates").contains(key)) continue;
    const auto& g = f.at("gates").at(key);
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>", label,
                       num(g.value("negatives_detected", nlohmann::json())), num(g.value("positives_fail", nlohmann::json())),
                       num(g.value("positives_warn", nlohmann::json())));
  }
  // INCONCLUSIVE on its own row (issue 32): neither a detection nor an escape.
  if (f.at("gates").contains("combined") && f.at("gates").at("combined").contains("negatives_inconclusive")) {
    const auto& g = f.at("gates").at("combined");
    out += fmt::format("<tr><td>combined INCONCLUSIVE (could not see the floor)</td><td class=\"num\">{}</td><td class=\"num\" "
                       "colspan=\"2\">{} positives</td></tr>",
                       num(g.value("negatives_inconclusive", nlohmann::json())), num(g.value("positives_inconclusive", nlohmann::json())));
  }
  const std::pair<const char*, const char*> checks[] = {{"assert_close", "today: assert_close (first replicate)"},
                                                        {"flash_attention", "today: FlashAttention 2x + 1 ULP rule"},
                                                        {"dynamo_fp64", "today: dynamo fp64 RMSE 3x rule"}};
  for (const auto& [key, label] : checks) {
    if (!f.contains("baselines") || !f.at("baselines").contains(key)) continue;
    const auto& g = f.at("baselines").at(key);
    out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">-</td></tr>", label,
                       num(g.value("negatives_detected", nlohmann::json())), num(g.value("positives_fail", nlohmann::json())));
  }
  out += "</table>";
  if (f.contains("torch") && f.at("torch").is_string() && !f.at("torch").get<std::string>().empty())
    out += "<p>On LibTorch " + esc(f.at("torch").get<std::string>()) + ".</p>";
  for (const auto& c : f.value("expected_under_condition", nlohmann::json::array()))
    out += "<p><code>" + esc(text(c, "id")) + "</code> was judged by its expectation " +
           esc(condition_in_words(text(c, "condition"))) + ".</p>";
  for (const auto& sk : f.value("skipped", nlohmann::json::array()))
    out += "<p>" + badge("SKIP") + " <code>" + esc(text(sk, "id")) + "</code>: " + esc(text(sk, "reason")) +
           " (counted nowhere above)</p>";
  return out;
}

}  // namespace

std::string environment_words_if_here(const std::vector<std::string>& fingerprints) {
  if (fingerprints.size() != 1) return "";
  const auto here = store::detect_environment();
  return fingerprints.front() == here.fingerprint ? store::describe_environment(here) : "";
}

// A bucket in the family's own terms: "channel 29", "position 17 x pair 5", "head 3 x
// position 40". The composite axes are decoded with the probe's shape (the kernels' bucket_ids:
// rotary.cpp t·(head_dim/2) + pair, attention.cpp head·tokens + position); without it the
// bare index is shown.
std::string bucket_label(const std::string& axis, std::int64_t bucket, const nlohmann::json& probe_params) {
  const auto size = [&](const char* key) -> std::int64_t {
    if (!probe_params.is_object() || !probe_params.contains(key) || !probe_params.at(key).is_number_integer()) return 0;
    return probe_params.at(key).get<std::int64_t>();
  };
  if (axis == "position_frequency" && size("shape.head_dim") >= 2) {
    const auto half = size("shape.head_dim") / 2;
    return fmt::format("position {} x pair {}", bucket / half, bucket % half);
  }
  // Attention's key-side gradients (dk, dv) bucket over kv_tokens: decoded only where the two agree.
  const bool kv_differs = size("shape.kv_tokens") > 0 && size("shape.kv_tokens") != size("shape.tokens");
  if (axis == "head_position" && size("shape.tokens") >= 1 && !kv_differs) {
    const auto tokens = size("shape.tokens");
    return fmt::format("head {} x position {}", bucket / tokens, bucket % tokens);
  }
  return (axis.empty() ? std::string("bucket") : axis) + " " + std::to_string(bucket);
}

// What a control page shows first (issue 32, item 4): the buckets the bias gate flagged, in
// the family's terms, with their signed ULP effect, z and verdict, and the floors they were
// judged against; or, when none was flagged, how far the largest |z| was from the cut.
std::string flagged_bucket_section(const nlohmann::json& r) {
  const auto& bias = r.at("gates").at("bias");
  if (!bias.is_object() || !bias.contains("signed")) return "";
  const auto th = bias.value("thresholds", nlohmann::json::object());
  const std::string axis = text(bias, "axis");
  const auto params = r.value("probe", nlohmann::json::object()).value("params", nlohmann::json::object());
  std::string out = "<h2>Flagged buckets</h2>\n";
  out += "<p>Bias gate over " + esc(num(bias.value("buckets", nlohmann::json()))) + " " + esc(axis) +
         " bucket(s) at R = " + esc(num(bias.value("replicates", nlohmann::json()))) + ": a bucket FAILs when |z| &gt; " +
         esc(num(th.value("z_cut", nlohmann::json()))) + ", its standardized effect &gt; s_min " +
         esc(num(th.value("s_min", nlohmann::json()))) + " and its ULP effect &gt; c (signed " +
         esc(num(th.value("c", nlohmann::json()))) + ", magnitude " + esc(num(th.value("c_magnitude", nlohmann::json()))) +
         " ULP); |z| past the cut alone is a WARN.</p>\n";
  std::string rows;
  int shown = 0;
  std::int64_t flagged = 0;
  std::string per_statistic;
  for (const char* statistic : {"signed", "magnitude"}) {
    const auto& st = bias.value(statistic, nlohmann::json::object());
    const auto n = st.value("fail_buckets", std::int64_t{0}) + st.value("warn_buckets", std::int64_t{0});
    flagged += n;
    per_statistic += (per_statistic.empty() ? "" : ", ") + std::to_string(n) + " " + statistic;
    int here = 0;
    for (const auto& b : st.value("flagged", nlohmann::json::array())) {
      if (!b.is_object() || !b.contains("bucket") || !b.at("bucket").is_number_integer() || here++ >= 10) continue;
      const double sign = b.value("direction", 0) < 0 ? -1.0 : 1.0;
      const auto ulp = b.value("ulp_effect", nlohmann::json());
      rows += "<tr><td>" + std::string(statistic) + "</td><td>" + esc(bucket_label(axis, b.at("bucket").get<std::int64_t>(), params)) +
              "</td><td class=\"num\">" + (ulp.is_number() ? esc(fmt::format("{:+.3g}", sign * ulp.get<double>())) : "-") +
              "</td><td class=\"num\">" + esc(num(b.value("z", nlohmann::json()))) + "</td><td class=\"num\">" +
              esc(num(b.value("effect", nlohmann::json()))) + "</td><td>" + badge(text(b, "verdict")) +
              (b.value("attributed", false) ? " attributed to the reference" : "") + "</td></tr>\n";
      ++shown;
    }
  }
  if (shown == 0) {
    double max_z = -1;
    for (const char* statistic : {"signed", "magnitude"}) {
      const auto& st = bias.value(statistic, nlohmann::json::object());
      if (st.contains("max_abs_z") && st.at("max_abs_z").is_number()) max_z = std::max(max_z, st.at("max_abs_z").get<double>());
    }
    return out + "<p>No bucket flagged" + (max_z >= 0 ? ": the largest |z| is " + esc(stats::format_number(max_z)) : std::string()) +
           ".</p>\n";
  }
  return out + "<table><tr><th>statistic</th><th>bucket</th><th>ULP effect (+: production above)</th><th>z</th>"
               "<th>effect (sd)</th><th>verdict</th></tr>\n" + rows + "</table>\n" +
         (flagged > shown ? "<p>Flagged in all: " + per_statistic + "; the strongest 10 per statistic are shown, "
                            "results.json keeps up to 64 per statistic.</p>\n"
                          : std::string());
}

// The case's expectation, as the YAML states it: the verdicts each gate may take, and its note.
std::string expectation_line(const nlohmann::json& r) {
  const auto e = r.value("expected", nlohmann::json());
  if (!e.is_object()) return "";
  std::string out = "<p><b>Expected:</b> ";
  bool first = true;
  for (const char* gate : {"algebra", "bias", "variance"}) {
    if (!e.contains(gate) || !e.at(gate).is_array()) continue;
    std::string allowed;
    for (const auto& v : e.at(gate)) allowed += (allowed.empty() ? "" : " or ") + (v.is_string() ? v.get<std::string>() : v.dump());
    out += (first ? "" : "; ") + std::string(gate) + " " + esc(allowed);
    first = false;
  }
  if (e.contains("note") && e.at("note").is_string()) out += " (" + esc(e.at("note").get<std::string>()) + ")";
  return out + "</p>\n";
}

HtmlReportSummary write_html_report(const HtmlReportInput& input, const fs::path& out) {
  HtmlReportSummary summary;
  const auto& doc = input.results;
  // Refused when another user owns or may write them: the plot data and gnuplot's SVGs are
  // opened by name inside, and only a folder of kcert's own user keeps links out of them.
  store::make_private_directories(out.string());
  store::make_private_directories((out / "plots").string());
  store::make_private_directories((out / "yaml").string());
  const auto results = doc.value("results", nlohmann::json::array());
  bool plots_ok = true;

  std::string rows;
  std::size_t index = 0;
  for (const auto& r : results) {
    const std::size_t i = index++;
    // A field of the wrong type or missing deep in a crafted result: a clear error naming the
    // result, not nlohmann's internal message (check_report_document checks what it can first).
    try {
    const std::string id = text(r, "id");
    const std::string stem = store::safe_file_name(id);
    const auto& gates = r.at("gates");
    // The index row and the page's verdict header read the control's typed view (issue 51); the
    // page's sections still read r.
    const ControlView v = control_view(r);
    // A skipped control measured nothing: no U, no z, no expectation met or missed.
    const bool skipped = v.verdict == "SKIP";
    // A negative detected as its YAML expects is not red (pytest's xfail idea): its FAIL and
    // WARN badges are drawn "as designed"; an escape or an unexpected verdict keeps its colour.
    const bool as_designed = v.detected_as_designed();
    const auto mark = [&](const std::string& verdict) { return as_designed ? designed_badge(verdict) : badge(verdict); };
    rows += fmt::format(
        "<tr><td><a href=\"{}.html\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        esc(stem), esc(id), esc(v.kind), esc(v.family),
        // An opaque production's algebra gate did not run (issue 33): "n/a", not a PASS badge.
        v.algebra_applicable ? mark(v.gate_verdict("algebra")) : kNotApplicableBadge, mark(v.gate_verdict("bias")),
        mark(v.gate_verdict("variance")) + short_of_horizon(v.variance_short_of_horizon), mark(v.verdict),
        skipped || !v.variance_u ? "-" : stats::format_number(*v.variance_u),
        v.max_abs_z && *v.max_abs_z >= 0 && !skipped ? stats::format_number(*v.max_abs_z) : "-",
        skipped ? "not run" : v.unexpected.empty() ? (as_designed ? "met (detected as designed)" : "met")
                                                   : "<span class=\"badge fail\">missed</span>");

    // The control's own page.
    std::ostringstream gp;
    const auto found = input.khat.find(id);
    const std::vector<double> khat = found == input.khat.end() ? std::vector<double>() : found->second;
    const auto plots = plan_plots(r, khat, out / "plots", stem, gp);
    std::string history_file;
    if (const auto it = input.history.find(id); it != input.history.end()) history_file = history_plot(it->second, out / "plots", stem, gp);
    const fs::path script = out / "plots" / (stem + ".gp");
    store::write_text_file(script.string(), gp.str());
    std::string why;
    bool drawn = plots_ok && run_gnuplot(out / "plots", gp.str(), stem + "-gnuplot.log", why);
    if (!drawn && plots_ok) {
      if (why.rfind("gnuplot is not installed", 0) == 0) {
        plots_ok = false;  // no point trying again for every control
        summary.plot_note = why;
      } else if (summary.plot_note.empty()) {
        summary.plot_note = why;
      }
    }

    std::ostringstream body;
    body << "<p><a href=\"index.html\">&larr; all controls</a></p>\n<h1>" << esc(id) << "</h1>\n";
    body << "<p>" << esc(text(r, "kind")) << " control, family <b>" << esc(text(r, "family")) << "</b>: reference <code>"
         << esc(text(r.at("reference"), "variant")) << "</code> (" << esc(text(r.at("reference"), "version"))
         << "), production <code>" << esc(text(r.at("production"), "variant")) << "</code> ("
         << esc(text(r.at("production"), "version")) << ")</p>\n";
    body << "<table><tr><th>algebra</th><th>bias</th><th>variance</th><th>overall</th><th>replicates</th></tr><tr><td>"
         << (v.algebra_applicable ? badge(v.gate_verdict("algebra")) : kNotApplicableBadge) << "</td><td>" << badge(v.gate_verdict("bias"))
         << "</td><td>" << badge(v.gate_verdict("variance")) << "</td><td>" << badge(v.verdict)
         << "</td><td class=\"num\">" << num(r.value("replicates", nlohmann::json())) << "</td></tr></table>\n";
    body << expectation_line(r);
    if (!skipped && !v.error) body << flagged_bucket_section(r);
    if (!v.unexpected.empty()) {
      body << "<div class=\"attention\"><b>Differs from its YAML expectation:</b><ul>";
      for (const auto& u : v.unexpected) body << "<li>" << esc(u) << "</li>";
      body << "</ul></div>\n";
    }
    body << "<h2>Mechanism</h2><p>" << esc(text(r, "mechanism")) << "</p>\n";
    body << "<h2>References</h2><ul>";
    for (const auto& ref : r.value("references", nlohmann::json::array())) {
      const std::string link = ref.is_string() ? ref.get<std::string>() : ref.dump();
      // Only web references become links: a `javascript:` or `data:` reference in a case
      // file (or a crafted result) would otherwise run in whoever opens the published site.
      if (is_web_link(link)) body << "<li><a href=\"" << esc(link) << "\">" << esc(link) << "</a></li>";
      else body << "<li>" << esc(link) << "</li>";
    }
    body << "</ul>\n<h2>Gates</h2><table>";
    for (const char* g : {"algebra", "bias", "variance"})
      body << "<tr><th>" << g << "</th><td>" << badge(text(gates.at(g), "verdict")) << "</td><td>"
           << esc(text(gates.at(g), "reason")) << "</td></tr>";
    body << "</table>\n";
    // A swept case: each probe setting's verdicts, and which setting decided each gate.
    if (r.contains("sweep") && r.at("sweep").is_object()) {
      const auto& sw = r.at("sweep");
      const auto decided = sw.value("decided_by", nlohmann::json::object());
      body << "<h2>Probe settings</h2><p>Certified on each setting; each gate shows the worst (decided by: algebra "
           << esc(text(decided, "algebra")) << ", bias " << esc(text(decided, "bias")) << ", variance "
           << esc(text(decided, "variance")) << ").</p><table><tr><th>setting</th><th>probe</th><th>overall</th>"
              "<th>algebra</th><th>bias</th><th>variance</th><th>U</th><th>max |z|</th></tr>";
      for (const auto& pt : sw.value("settings", nlohmann::json::array())) {
        if (!pt.is_object()) continue;
        body << "<tr><td>" << esc(text(pt, "name")) << "</td><td><code>" << esc(text(pt, "probe")) << "</code></td><td>"
             << badge(text(pt, "verdict")) << "</td><td>" << point_algebra_badge(pt) << "</td><td>"
             << badge(text(pt, "bias")) << "</td><td>" << badge(text(pt, "variance")) << "</td><td class=\"num\">"
             << esc(num(pt.value("U", nlohmann::json()))) << "</td><td class=\"num\">" << esc(num(pt.value("max_abs_z", nlohmann::json())))
             << "</td></tr>";
      }
      body << "</table>\n";
    }
    // A backward case (issue 31): each gradient's verdicts, buckets and reduction size N, and
    // which gradient decided each gate.
    if (r.contains("backward") && r.at("backward").is_object()) {
      const auto& bw = r.at("backward");
      const auto decided = bw.value("decided_by", nlohmann::json::object());
      const auto dy = bw.value("dy", nlohmann::json::object());
      body << "<h2>Gradients</h2><p>Backward, upstream gradient dy " << esc(text(dy, "kind")) << " (shift "
           << esc(num(dy.value("shift", nlohmann::json()))) << ", scale " << esc(num(dy.value("scale", nlohmann::json())))
           << "); each gate shows the worst gradient (decided by: algebra " << esc(text(decided, "algebra")) << ", bias "
           << esc(text(decided, "bias")) << ", variance " << esc(text(decided, "variance"))
           << ").</p><table><tr><th>gradient</th><th>of</th><th>buckets</th><th>N</th><th>overall</th>"
              "<th>algebra</th><th>bias</th><th>variance</th><th>U</th><th>max |z|</th></tr>";
      for (const auto& g : bw.value("gradients", nlohmann::json::array())) {
        if (!g.is_object()) continue;
        const auto n = g.value("reduction_size", nlohmann::json());
        body << "<tr><td>" << esc(text(g, "name")) << "</td><td>" << esc(text(g, "input")) << "</td><td>"
             << esc(text(g, "bucket_axis")) << "</td><td class=\"num\">"
             << (n.is_number_integer() && n.get<std::int64_t>() > 0 ? esc(num(n)) + " " + esc(text(g, "reduces")) : std::string("-"))
             << "</td><td>" << badge(text(g, "verdict")) << "</td><td>" << point_algebra_badge(g) << "</td><td>"
             << badge(text(g, "bias")) << "</td><td>" << badge(text(g, "variance")) << "</td><td class=\"num\">"
             << esc(num(g.value("U", nlohmann::json()))) << "</td><td class=\"num\">"
             << esc(num(g.value("max_abs_z", nlohmann::json()))) << "</td></tr>";
      }
      body << "</table>\n";
    }
    if (r.contains("error") && r.at("error").is_string())
      body << "<div class=\"attention\"><b>Harness error:</b> " << esc(text(r, "error")) << "</div>\n";
    if (r.contains("skipped") && r.at("skipped").is_string())
      body << "<div class=\"attention\"><b>Skipped, not run in this environment:</b> " << esc(text(r, "skipped"))
           << "</div>\n";
    body << "<h2>Plots</h2>\n";
    if (!drawn) body << "<p>" << esc(why) << "</p>\n";
    if (plots.figures.empty()) body << "<p>No K-hat above 0 and no kept bias bucket: nothing to plot (every replicate within one ULP of the oracle).</p>\n";
    if (found == input.khat.end()) body << "<p>No K-hat sample for this control.</p>\n";
    // The deciding gate's plots first: the bias planes when the bias gate is the worse one.
    auto figures = plots.figures;
    const auto bias_verdict = stats::parse_verdict(v.gate_verdict("bias")), variance_verdict = stats::parse_verdict(v.gate_verdict("variance"));
    if (bias_verdict && variance_verdict && *bias_verdict > *variance_verdict) {
      std::stable_partition(figures.begin(), figures.end(),
                            [](const auto& f) { return f.first.find("-bias-") != std::string::npos; });
    }
    for (const auto& [file, caption] : figures) {
      if (!drawn) break;
      body << "<figure><img src=\"plots/" << esc(file) << "\" alt=\"" << esc(file) << "\"><figcaption>" << esc(caption)
           << "</figcaption></figure>\n";
      ++summary.plots;
    }
    body << "<h2>History</h2>\n";
    if (!input.history_note.empty()) body << "<p>" << esc(input.history_note) << "</p>\n";
    else if (!history_file.empty() && drawn) {
      body << "<figure><img src=\"plots/" << esc(history_file) << "\" alt=\"history\"><figcaption>U and max |z| of this "
           << "control over the runs the database holds in the same environment (every profile, oldest first); "
           << "the table marks verdict changes.</figcaption></figure>\n";
      ++summary.plots;
    }
    if (const auto it = input.history.find(id); it != input.history.end() && !it->second.empty()) {
      body << "<table><tr><th>started (UTC)</th><th>run</th><th>verdict</th><th>U</th><th>max |z|</th></tr>";
      std::string last;
      for (const auto& h : it->second) {
        body << "<tr><td>" << esc(h.started_at) << "</td><td>" << esc(h.run_id) << "</td><td>" << badge(h.verdict)
             << (last.empty() || last == h.verdict ? "" : " &larr; changed") << "</td><td class=\"num\">"
             << (h.u >= 0 ? stats::format_number(h.u) : "-") << "</td><td class=\"num\">"
             << (h.max_abs_z >= 0 ? stats::format_number(h.max_abs_z) : "-") << "</td></tr>";
        last = h.verdict;
      }
      body << "</table>\n";
    }
    body << "<h2>Environment</h2><p>"
         << esc(input.environment_words.empty() ? "not known to this report (see the run in the database)" : input.environment_words)
         << "; LibTorch " << esc(text(r.value("provenance", nlohmann::json::object()), "torch_version")) << " on "
         << esc(text(r.value("provenance", nlohmann::json::object()), "device")) << "</p>\n";
    body << "<h2>Case file</h2>\n";
    // From the text the result carries, never from the file `source` names: a result comes
    // from a report folder or the database, which anyone who can write either can craft, and
    // opening its path published that file (`source: /etc/shadow` as root, /proc/self/environ
    // with KCERT_DB's password) or blocked on a FIFO forever.
    const std::string source = text(r, "source");
    if (r.contains("case_text") && r.at("case_text").is_string()) {
      const std::string yaml = r.at("case_text").get<std::string>();
      store::write_text_file((out / "yaml" / (stem + ".yaml")).string(), yaml);
      body << "<p><a href=\"yaml/" << esc(stem) << ".yaml\">" << esc(source) << "</a></p><pre>" << esc(yaml) << "</pre>\n";
    } else {
      body << "<p>" << esc(source.empty() ? std::string("no case file recorded") : source)
           << ": the result carries no case text (written by a kcert before case_text was stored)</p>\n";
    }
    store::write_text_file((out / (stem + ".html")).string(), page("kcert: " + id, body.str()));
    ++summary.pages;
    } catch (const nlohmann::json::exception& e) {
      throw ReportFormatError(fmt::format("results[{}] (id '{}'): {}", i, text(r, "id"), json_problem(e)));
    }
  }

  // The index: attention first, then what changed, the falsifiability table, every control.
  try {
  std::ostringstream body;
  body << "<h1>kcert nightly " << esc(text(doc, "run_id")) << "</h1>\n<p>profile: "
       << esc(text(doc, "profile").empty() ? "contract shapes" : text(doc, "profile")) << "; results from the "
       << esc(text(doc, "source")) << "; environment(s): ";
  for (const auto& e : doc.value("environments", nlohmann::json::array())) body << "<code>" << esc(e.get<std::string>()) << "</code> ";
  body << (input.environment_words.empty() ? "" : "(" + esc(input.environment_words) + ")") << "</p>\n";
  // When it ran, for how long, and the run's other files (beside html/ in a nightly's folder).
  {
    std::string when;
    if (doc.contains("started_at") && doc.at("started_at").is_string()) when = "started " + esc(text(doc, "started_at"));
    if (doc.contains("seconds") && doc.at("seconds").is_number() && doc.at("seconds").get<double>() >= 0) {
      when += (when.empty() ? "ran " : ", ran ") + duration_text(doc.at("seconds").get<double>());
    }
    if (!when.empty()) body << "<p>" << when << "</p>\n";
    if (!input.run_folder_link.empty()) {
      const auto& up = input.run_folder_link;
      body << "<p>Files: <a href=\"" << esc(up) << "results.json\">results.json</a> &middot; <a href=\"" << esc(up)
           << "summary.md\">summary.md</a> &middot; <a href=\"" << esc(up) << "tails/\">tails/</a> (K-hat samples, CSV)";
      if (!input.junit_link.empty()) body << " &middot; <a href=\"" << esc(input.junit_link) << "\">JUnit XML</a>";
      body << "</p>\n";
    }
  }
  const auto reasons = doc.value("reasons", nlohmann::json::array());
  if (!reasons.empty()) {
    body << "<div class=\"attention\"><b>Attention</b> (exit " << num(doc.value("exit_status", nlohmann::json())) << ")<ul>";
    for (const auto& r : reasons) body << "<li>" << esc(r.get<std::string>()) << "</li>";
    body << "</ul></div>\n";
  } else {
    body << "<p>" << badge("PASS") << " every control behaved as expected.</p>\n";
  }
  body << "<h2>Since the last run</h2>\n<p>" << esc(text(doc, "previous")) << "</p>";
  const auto baselines = doc.value("baselines", nlohmann::json::array());
  if (!baselines.empty()) {
    body << "<p>Compared against:</p><ul>";
    for (const auto& b : baselines) body << "<li>" << esc(b.get<std::string>()) << "</li>";
    body << "</ul>";
  }
  const auto changes = doc.value("changes", nlohmann::json::array());
  body << "<ul>";
  for (const auto& c : changes)
    body << "<li>" << (c.value("alarming", false) ? "<b>" : "") << esc(text(c, "id")) << ": " << esc(text(c, "change"))
         << (c.value("alarming", false) ? "</b>" : "") << "</li>";
  if (changes.empty() && !baselines.empty()) body << "<li>No changes.</li>";
  body << "</ul>\n<h2>Falsifiability</h2>\n" << falsifiability_table(doc.value("falsifiability", nlohmann::json()));
  body << "\n<h2>Controls</h2>\n<input class=\"filter\" id=\"filter\" type=\"search\" "
          "placeholder=\"filter: id, family, kind, verdict\" aria-label=\"filter the controls\">\n"
          "<table id=\"controls\"><thead><tr><th class=\"sortable\">control</th><th class=\"sortable\">kind</th>"
          "<th class=\"sortable\">family</th><th class=\"sortable\">algebra</th><th class=\"sortable\">bias</th>"
          "<th class=\"sortable\">variance</th><th class=\"sortable\">overall</th><th class=\"sortable\">U</th>"
          "<th class=\"sortable\">max |z|</th><th class=\"sortable\">expectation</th></tr></thead><tbody>\n"
       << rows << "</tbody></table>\n" << kIndexScript;
  if (!plots_ok) body << "<p>" << esc(summary.plot_note) << "</p>\n";
  store::write_text_file((out / "index.html").string(), page("kcert nightly " + text(doc, "run_id"), body.str()));
  ++summary.pages;
  } catch (const nlohmann::json::exception& e) {
    throw ReportFormatError("the run's fields (run_id, environments, reasons, changes, falsifiability): " + json_problem(e));
  }
  return summary;
}

namespace {

// The fields the report reads before it looks inside one result, with their types: a
// crafted results.json is refused with the field's path. Throws ReportFormatError.
void check_report_document(const nlohmann::json& doc) {
  using J = nlohmann::json;
  const auto fail = [](const std::string& field, const std::string& what) {
    throw ReportFormatError(field + ": expected " + what);
  };
  const auto strings = [&](const J& o, const std::string& path, const char* key) {
    if (!o.contains(key)) return;
    const auto& v = o.at(key);
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const J& x) { return x.is_string(); }))
      fail(path + key, "a list of strings");
  };
  const auto optional = [&](const J& o, const std::string& path, const char* key, bool (J::*is)() const noexcept, const char* what) {
    if (o.contains(key) && !o.at(key).is_null() && !(o.at(key).*is)()) fail(path + key, what);
  };
  if (doc.contains("format") && doc.at("format") != "kcert-nightly/1") fail("format", "kcert-nightly/1");
  for (const char* k : {"run_id", "profile", "source", "previous"}) optional(doc, "", k, &J::is_string, "a string");
  optional(doc, "", "exit_status", &J::is_number, "a number");
  optional(doc, "", "falsifiability", &J::is_object, "an object");
  strings(doc, "", "environments");
  strings(doc, "", "reasons");
  strings(doc, "", "baselines");
  if (doc.contains("changes")) {
    const auto& c = doc.at("changes");
    if (!c.is_array()) fail("changes", "a list");
    for (std::size_t i = 0; i < c.size(); ++i) {
      const std::string p = "changes[" + std::to_string(i) + "].";
      if (!c[i].is_object()) fail(p.substr(0, p.size() - 1), "an object");
      optional(c[i], p, "alarming", &J::is_boolean, "true or false");
    }
  }
  if (!doc.contains("results") || !doc.at("results").is_array()) fail("results", "a list of results");
  const auto& results = doc.at("results");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string p = "results[" + std::to_string(i) + "]";
    if (!r.is_object()) fail(p, "an object");
    if (!r.contains("id") || !r.at("id").is_string()) fail(p + ".id", "a string");
    const std::string q = p + " (id '" + r.at("id").get<std::string>() + "').";
    for (const char* k : {"verdict", "kind", "family", "mechanism", "source", "case_text", "error", "skipped"})
      optional(r, q, k, &J::is_string, "a string");
    for (const char* side : {"reference", "production"}) {
      if (!r.contains(side) || !r.at(side).is_object()) fail(q + side, "an object");
    }
    if (!r.contains("gates") || !r.at("gates").is_object()) fail(q + "gates", "an object");
    for (const char* g : {"algebra", "bias", "variance"}) {
      if (!r.at("gates").contains(g) || !r.at("gates").at(g).is_object()) fail(q + "gates." + g, "an object");
    }
    for (const char* k : {"unexpected", "references"}) optional(r, q, k, &J::is_array, "a list");
    for (const char* k : {"provenance", "probe", "sweep", "backward"}) optional(r, q, k, &J::is_object, "an object");
  }
}

}  // namespace

std::string json_problem(const nlohmann::json::exception& e) {
  // nlohmann's text after its "[json.exception.type_error.302] " tag.
  std::string what = e.what();
  if (const auto end = what.find("] "); what.rfind("[json.exception.", 0) == 0 && end != std::string::npos) what.erase(0, end + 2);
  const bool missing = dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr;
  return (missing ? "a field is missing or out of range (" : "a field has the wrong type (") + what +
         "); not a results.json as kcert nightly writes it (docs/schema/kcert-nightly-1.schema.json)";
}

HtmlReportInput read_report_folder(const fs::path& folder, bool with_history) {
  const std::string file = (folder / "results.json").string();
  if (!fs::exists(folder / "results.json")) throw InputError(file + ": no such file (is this a nightly report folder?)");
  std::string json_text;
  try {
    json_text = io::read_regular_file(file, std::uint64_t{1} << 30, io::Links::follow, "a results.json");
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
  // A crafted folder (anyone who can write the report folder or the database can make one):
  // 100,000-deep nesting segfaulted the parse, a field of another type printed nlohmann's
  // internal error. Both are refused here with the file and the field.
  constexpr int kMaxDepth = 64;
  if (store::json_nested_deeper_than(json_text, kMaxDepth))
    throw InputError(fmt::format("{}: nested deeper than {} levels: not a results.json as kcert nightly writes it", file, kMaxDepth));
  HtmlReportInput input;
  try {
    input.results = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON (at byte {}; invalid UTF-8, a syntax error or a truncated file)", file, e.byte));
  }
  if (!input.results.is_object()) throw InputError(file + ": not a JSON object");
  try {
    check_report_document(input.results);
  } catch (const ReportFormatError& e) {
    throw InputError(file + ": " + e.what() + " (docs/schema/kcert-nightly-1.schema.json)");
  }
  for (const auto& r : input.results.value("results", nlohmann::json::array())) {
    // The samples the nightly wrote beside its results (khat_reader reads their CSV form).
    const auto csv = folder / "tails" / (store::safe_file_name(text(r, "id")) + ".csv");
    // Found in the folder, not named by the user: a link there is not followed (issue 53).
    std::error_code ec;
    if (fs::exists(fs::symlink_status(csv, ec))) input.khat[text(r, "id")] = read_khat_file(csv.string(), FollowLinks::no);
  }
  const auto envs = input.results.value("environments", std::vector<std::string>());
  input.environment_words = environment_words_if_here(envs);
  if (!with_history) {
    input.history_note = "History needs the results database (not read: --no-db).";
  } else {
    try {
      store::ResultStore db(store::conninfo_from_environment());
      for (const auto& r : input.results.value("results", nlohmann::json::array())) {
        store::HistoryQuery q;
        q.case_id = text(r, "id");
        q.environment = envs.size() == 1 ? envs[0] : "";
        auto& points = input.history[q.case_id];
        for (const auto& h : db.history(q))
          points.push_back({h.started_at, h.run_id, h.verdict, h.variance_u.value_or(-1), h.max_abs_z.value_or(-1)});
      }
    } catch (const std::exception& e) {
      input.history_note = std::string("History needs the results database, which is unavailable: ") + e.what();
      input.history.clear();
    }
  }
  return input;
}

}  // namespace kcert::report
