#include "harness/report/plots.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "harness/io/process.hpp"
#include "harness/report/control_view.hpp"
#include "harness/stats/gpd.hpp"
#include "harness/store/json.hpp"
#include "harness/text/escape.hpp"

namespace kcert::report {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

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

// Writes the data and the gnuplot script of one control's plots; returns the figures it
// will produce. `dir` is out/plots, `stem` the control's file name.
ControlPlots plan_plots(const ControlView& v, const std::vector<double>& khat, const fs::path& dir, const std::string& stem,
                        std::ostringstream& gp) {
  ControlPlots plots;
  const auto& tail = v.tail;
  const double warn_k = tail.warn_k, fail_k = tail.fail_k, horizon = tail.horizon;
  // U where it is finite (an infinite U has no place on an axis).
  const std::optional<double> finite_u =
      v.variance_u && std::isfinite(*v.variance_u) ? v.variance_u : std::nullopt;
  std::vector<double> positive;
  for (double k : khat)
    if (k > 0 && std::isfinite(k)) positive.push_back(k);
  std::sort(positive.begin(), positive.end());
  const auto R = static_cast<double>(khat.size());
  const auto data = [&](const std::string& name) { return (dir / (stem + "-" + name + ".dat")).string(); };
  const auto svg = [&](const std::string& name) { return stem + "-" + name + ".svg"; };
  gp << "set terminal svg size 720,440 dynamic font 'sans,12' background '#ffffff'\nset grid\nset key top right\n";

  const bool fitted = tail.drawable_fit;
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
      const double u = tail.u, xi = tail.xi, sigma = tail.sigma, zeta = tail.zeta;
      if (finite_u) x_max = std::max(x_max, *finite_u * 1.08);
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
      if (tail.r_t) {
        const double rt = *tail.r_t;
        gp << fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lc rgb '#1f5fbf'\n", rt);
        gp << fmt::format("set label 'r_T' at {},graph 0.90 offset 0.3,0 tc rgb '#1f5fbf' noenhanced\n", rt);
      }
    }
    if (finite_u) {
      const double U = *finite_u;
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
        fitted ? fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead dt 3 lc rgb '#555555'\n", tail.u)
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
    const double u = tail.u, xi = tail.xi, sigma = tail.sigma;
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
  const auto& bias = v.bias;
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
  const auto finite = [](const std::optional<double>& x) { return x && std::isfinite(*x); };
  for (const char* statistic : {"signed", "magnitude"}) {
    std::vector<PointLabel> mine;
    for (const auto& b : bias.flagged) {
      if (b.statistic != statistic || !finite(b.ulp_effect) || !finite(b.effect)) continue;
      const double x = *b.ulp_effect, y = *b.effect;
      if (!(x > 0) || !(y > 0)) continue;
      mine.push_back({x, y, b.z ? std::fabs(*b.z) : 0.0, b.label});
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
    for (const char* verdict : {"PASS", "WARN", "FAIL"}) {
      DataFile d(group_file(group));
      for (const auto& b : bias.kept) {
        // Log axes: a bucket with no difference at all (0, 0) has no place on them, nor one
        // with sd = 0 (an infinite standardized effect).
        if (b.statistic != statistic || b.verdict != verdict || !finite(b.ulp_effect) || !finite(b.effect)) continue;
        const double x = *b.ulp_effect, y = *b.effect;
        if (!(x > 0) || !(y > 0)) continue;
        x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
        d << fmt::format("{:.17g} {:.17g}\n", x, y);
        ++points;
        ++group_points[group];
      }
      d.close();
      ++group;
    }
  }
  if (points > 0) {
    const double c = bias.c.value_or(0.3), cm = bias.c_magnitude.value_or(0.2), s_min = bias.s_min.value_or(0.2);
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

std::string history_plot(const std::vector<runner::HistoryPoint>& h, const fs::path& dir, const std::string& stem,
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

}  // namespace kcert::report
