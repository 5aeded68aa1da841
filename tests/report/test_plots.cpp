// The report's plots apart from its pages (report/plots.hpp): bucket names in the family's
// terms (control_view.hpp, shared with the pages), one control's plot data and script planned
// from a document made here, and gnuplot's failure to start said, not thrown. The pages with
// real gnuplot are tests/report/test_report.sh.
#include "tests/catch_torch.hpp"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "harness/report/control_view.hpp"
#include "harness/report/plots.hpp"

namespace fs = std::filesystem;

TEST_CASE("bucket_label names a bucket in the family's terms, decoding composite axes with the probe's shape", "[report]") {
  using kcert::report::bucket_label;
  const nlohmann::json none = nlohmann::json::object();
  CHECK(bucket_label("channel", 29, none) == "channel 29");
  CHECK(bucket_label("", 3, none) == "bucket 3");
  // RoPE: t * (head_dim / 2) + pair.
  CHECK(bucket_label("position_frequency", 21, {{"shape.head_dim", 8}}) == "position 5 x pair 1");
  CHECK(bucket_label("position_frequency", 21, none) == "position_frequency 21");
  // Attention: head * tokens + position, only where the key side has as many tokens.
  CHECK(bucket_label("head_position", 40, {{"shape.tokens", 16}}) == "head 2 x position 8");
  CHECK(bucket_label("head_position", 40, {{"shape.tokens", 16}, {"shape.kv_tokens", 32}}) == "head_position 40");
}

TEST_CASE("plan_plots writes a control's plot data and a script that names its files by plain names", "[report]") {
  const fs::path dir = fs::temp_directory_path() / ("kcert-plots-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A thin-tail variance result (no fit) and one flagged bias bucket.
  const auto r = nlohmann::json::parse(R"({
    "id": "c",
    "probe": {"params": {"shape.head_dim": 8}},
    "gates": {
      "variance": {"U": 1.5, "tail": {"mode": "thin_tail", "settings": {"warn_K": 2.0, "fail_K": 10.0, "horizon": 1e5}}},
      "bias": {
        "axis": "position_frequency",
        "thresholds": {"c": 0.3, "c_magnitude": 0.2, "s_min": 0.2},
        "signed": {"flagged": [{"bucket": 21, "ulp_effect": 0.8, "effect": 0.9, "z": 7.0, "verdict": "FAIL"}], "top": []},
        "magnitude": {}
      }
    }
  })");
  std::vector<double> khat;
  for (int i = 0; i < 64; ++i) khat.push_back(i % 4 == 0 ? 0.0 : 0.01 * i);
  std::ostringstream gp;
  const auto plots = kcert::report::plan_plots(kcert::report::control_view(r), khat, dir, "c", gp);
  std::vector<std::string> files;
  for (const auto& [file, caption] : plots.figures) {
    files.push_back(file);
    CHECK_FALSE(caption.empty());
  }
  // No fit: no QQ plot; the tail, mean residual life and stability need 2 and 20 positive K-hat.
  CHECK(files == std::vector<std::string>{"c-tail.svg", "c-mrl.svg", "c-stability.svg", "c-bias.svg"});
  CHECK(fs::exists(dir / "c-tail.dat"));
  CHECK(fs::exists(dir / "c-bias-labels.dat"));
  std::ifstream labels(dir / "c-bias-labels.dat");
  std::string line;
  std::getline(labels, line);
  CHECK_THAT(line, Catch::Contains("\"position 5 x pair 1\""));
  // Every file the script names is quoted as a plain name: gnuplot runs inside the folder.
  const std::string script = gp.str();
  const std::regex quoted("'([^']*\\.(dat|svg))'");
  int named = 0;
  for (auto it = std::sregex_iterator(script.begin(), script.end(), quoted); it != std::sregex_iterator(); ++it, ++named)
    CHECK((*it)[1].str().find('/') == std::string::npos);
  CHECK(named >= 8);
  fs::remove_all(dir);
}

TEST_CASE("run_gnuplot says why it cannot start in a folder that is not there", "[report]") {
  std::string why;
  CHECK_FALSE(kcert::report::run_gnuplot("/nonexistent/kcert-plots", "set output 'x.svg'\n", "x.log", why));
  CHECK_THAT(why, Catch::Contains("gnuplot could not be started in /nonexistent/kcert-plots"));
}
