#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <map>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness/testcase/loader.hpp"
#include "harness/text/suggest.hpp"
#include "harness/text/utf8.hpp"

#include "harness/contract/release_threshold.hpp"
#include "harness/io/regular_file.hpp"
#include "harness/stats/format.hpp"

namespace kcert::testcase {

using contract::Attestation;
using contract::Expectation;
using contract::GateSettings;
using contract::KernelChoice;
using contract::Direction;
using contract::Kind;


namespace {

using kernels::ParamSpec;
using kernels::ParamType;
using kernels::ParamValue;

// What a load error may quote of a file (issue 53): a word that could be a key or a value
// (letters, digits, _ . + -, at most 40), and nothing of anything else, which may be the
// content of a file the case's author should not have made kcert read (a link to a secret).
bool plausible_token(const std::string& s) {
  if (s.empty() || s.size() > 40) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '+' || c == '-';
  });
}
std::string text_of_size(const std::string& s) { return "<a text of " + std::to_string(s.size()) + " bytes, not shown>"; }

// Walks a YAML document, remembering the source so every error names file:line:col.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& field, const std::string& message) const {
    std::ostringstream os;
    os << source_;
    if (node.IsDefined() && node.Mark().line >= 0) os << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    os << ": " << field << ": " << message;
    throw LoadError(os.str());
  }

  static std::string shown(const YAML::Node& node) {
    if (node.IsScalar()) return plausible_token(node.Scalar()) ? "'" + node.Scalar() + "'" : text_of_size(node.Scalar());
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "a mapping";
    return "nothing";
  }

  void require_map(const YAML::Node& node, const std::string& field) const {
    if (!node.IsMap()) fail(node, field, "expected a mapping, got " + shown(node));
  }

  // Rejects keys outside `allowed`, naming the key and the allowed ones.
  void check_keys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& allowed) const {
    require_map(map, field);
    for (const auto& kv : map) {
      const auto key = kv.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, plausible_token(key) ? join(field, key) : join(field, text_of_size(key)),
             "unknown key (expected one of: " + list + ")");
      }
    }
  }

  static std::string join(const std::string& field, const std::string& key) {
    return field.empty() ? key : field + "." + key;
  }

  std::string string(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, field, "expected a string, got " + shown(node));
    // A NUL (YAML's "\0") is no text a report or the database can hold: PostgreSQL refused
    // the row, and the nightly stopped storing (issue 53).
    if (node.Scalar().find('\0') != std::string::npos) fail(node, field, "a NUL character (\"\\0\") is not allowed in a string");
    return node.Scalar();
  }

  std::string nonempty_string(const YAML::Node& node, const std::string& field) const {
    auto s = string(node, field);
    if (s.empty()) fail(node, field, "expected a non-empty string");
    return s;
  }

  std::int64_t integer(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, field, "expected an integer, got " + shown(node));
    const auto& s = node.Scalar();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) fail(node, field, "expected an integer, got '" + s + "'");
    return v;
  }

  std::int64_t positive_integer(const YAML::Node& node, const std::string& field) const {
    const auto v = integer(node, field);
    if (v <= 0) fail(node, field, "expected a positive integer, got " + std::to_string(v));
    return v;
  }

  double number(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, field, "expected a number, got " + shown(node));
    std::string s = node.Scalar();
    if (!s.empty() && s.front() == '+') s.erase(0, 1);
    double v = 0.0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
      fail(node, field, "expected a finite number, got '" + node.Scalar() + "'");
    }
    return v;
  }

  double positive_number(const YAML::Node& node, const std::string& field) const {
    const double v = number(node, field);
    if (!(v > 0.0)) fail(node, field, "expected a positive number, got " + node.Scalar());
    return v;
  }

  bool boolean(const YAML::Node& node, const std::string& field) const {
    const auto s = node.IsScalar() ? node.Scalar() : std::string();
    if (s == "true") return true;
    if (s == "false") return false;
    fail(node, field, "expected true or false, got " + shown(node));
  }

  std::vector<std::string> string_list(const YAML::Node& node, const std::string& field) const {
    if (!node.IsSequence()) fail(node, field, "expected a list of strings, got " + shown(node));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < node.size(); ++i) out.push_back(string(node[i], field + "[" + std::to_string(i) + "]"));
    return out;
  }

  stats::Verdict verdict(const YAML::Node& node, const std::string& field) const {
    const auto s = string(node, field);
    if (const auto v = stats::parse_verdict(s)) return *v;
    fail(node, field, "expected PASS, INCONCLUSIVE, WARN or FAIL, got '" + s + "'");
  }

  ParamValue param(const YAML::Node& node, const std::string& field, const ParamSpec& spec) const {
    ParamValue value;
    switch (spec.type) {
      case ParamType::integer: value = integer(node, field); break;
      case ParamType::number: value = number(node, field); break;
      case ParamType::boolean: value = boolean(node, field); break;
      case ParamType::string: value = string(node, field); break;
      case ParamType::number_list: {
        if (!node.IsSequence()) fail(node, field, "expected a list of numbers, got " + shown(node));
        std::vector<double> list;
        for (std::size_t i = 0; i < node.size(); ++i) list.push_back(number(node[i], field + "[" + std::to_string(i) + "]"));
        value = list;
        break;
      }
    }
    const double as_number = spec.type == ParamType::integer ? static_cast<double>(std::get<std::int64_t>(value))
                             : spec.type == ParamType::number ? std::get<double>(value)
                                                              : 0.0;
    if (spec.min && (spec.type == ParamType::integer || spec.type == ParamType::number) && as_number < *spec.min) {
      fail(node, field, "expected " + std::string(kernels::describe(spec.type)) + " >= " +
                            kernels::format_value(spec.type == ParamType::integer ? ParamValue{static_cast<std::int64_t>(*spec.min)}
                                                                                   : ParamValue{*spec.min}) +
                            ", got " + node.Scalar());
    }
    if (spec.max && (spec.type == ParamType::integer || spec.type == ParamType::number) && as_number > *spec.max) {
      fail(node, field, "expected " + std::string(kernels::describe(spec.type)) + " <= " +
                            kernels::format_value(ParamValue{*spec.max}) + ", got " + node.Scalar());
    }
    if (!spec.choices.empty()) {
      const auto& s = std::get<std::string>(value);
      if (std::find(spec.choices.begin(), spec.choices.end(), s) == spec.choices.end()) {
        std::string list;
        for (const auto& c : spec.choices) list += (list.empty() ? "" : ", ") + c;
        fail(node, field, "expected one of " + list + ", got '" + s + "'");
      }
    }
    return value;
  }

  // Reads declared parameters from a (possibly nested) mapping; dotted spec names address
  // nested keys. Unknown keys are errors; missing keys take their defaults or are errors.
  kernels::ParamMap params(const YAML::Node& map, const std::string& field, const std::vector<ParamSpec>& specs,
                           const std::string& prefix, const YAML::Node& owner) const {
    kernels::ParamMap out;
    std::set<std::string> known;
    for (const auto& spec : specs) {
      known.insert(spec.name);
      // yaml-cpp: a missing key yields an invalid node whose Type() throws; test
      // IsDefined() before anything else.
      const bool usable = map.IsDefined() && map.IsMap();
      YAML::Node node = usable ? lookup(map, spec.name) : YAML::Node(YAML::NodeType::Undefined);
      if (node.IsDefined() && !node.IsNull()) {
        out.set(spec.name, param(node, join(field, spec.name), spec));
      } else if (spec.default_value) {
        out.set(spec.name, *spec.default_value);
      } else {
        fail(owner, join(field, spec.name), "required " + std::string(kernels::describe(spec.type)) + " is missing (" +
                                                spec.description + ")");
      }
    }
    if (map.IsDefined() && !map.IsNull()) check_unknown(map, field, prefix, known);
    return out;
  }

  const std::string& source() const { return source_; }

 private:
  static YAML::Node lookup(const YAML::Node& map, const std::string& dotted) {
    YAML::Node node = map;
    std::size_t start = 0;
    while (true) {
      const auto dot = dotted.find('.', start);
      const auto key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!node.IsDefined() || !node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node& parent = node;  // const access never inserts keys
      YAML::Node child = parent[key];
      if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      node.reset(child);
      if (dot == std::string::npos) return node;
      start = dot + 1;
    }
  }

  void check_unknown(const YAML::Node& map, const std::string& field, const std::string& prefix,
                     const std::set<std::string>& known) const {
    require_map(map, field);
    for (const auto& kv : map) {
      const auto key = kv.first.as<std::string>();
      const auto name = prefix.empty() ? key : prefix + "." + key;
      if (known.count(name)) continue;
      const bool is_group = std::any_of(known.begin(), known.end(), [&](const std::string& k) { return k.rfind(name + ".", 0) == 0; });
      if (is_group && kv.second.IsMap()) {
        check_unknown(kv.second, join(field, key), name, known);
        continue;
      }
      std::string list;
      for (const auto& k : known) {
        if (prefix.empty() || k.rfind(prefix + ".", 0) == 0) list += (list.empty() ? "" : ", ") + k.substr(prefix.empty() ? 0 : prefix.size() + 1);
      }
      fail(kv.first, join(field, key), is_group ? "expected a mapping" : "unknown key (expected one of: " + list + ")");
    }
  }

  std::string source_;
};

// Overrides `base` in place with `over` (mappings merge key by key; anything else
// replaces). The override's nodes keep their own file positions.
void merge_into(YAML::Node base, const YAML::Node& over) {
  for (const auto& kv : over) {
    const auto key = kv.first.as<std::string>();
    YAML::Node target = base[key];
    if (target.IsMap() && kv.second.IsMap()) {
      merge_into(target, kv.second);
    } else {
      base[key] = kv.second;
    }
  }
}

// python_case: the file names `python:` kernel files, whose variants this process may not
// know (the kcert binary without --python, or without a Python to describe them): such a
// variant loads with its parameters unread, and the runner skips the case with the reason or,
// where the files were described after all, refuses the name (runner/python_route.hpp).
KernelChoice kernel_choice(const Reader& r, const YAML::Node& node, const std::string& field,
                           const kernels::FamilySchema& family, bool python_case) {
  r.check_keys(node, field, {"variant", "version", "params"});
  KernelChoice k;
  if (!node["variant"]) r.fail(node, field + ".variant", "required: the name of a registered variant");
  k.variant = r.nonempty_string(node["variant"], field + ".variant");
  const auto it = family.variants.find(k.variant);
  if (it == family.variants.end() && python_case) {
    if (node["params"]) r.require_map(node["params"], field + ".params");
    return k;
  }
  if (it == family.variants.end()) {
    std::string list;
    std::vector<std::string> names;
    for (const auto& [n, v] : family.variants) {
      list += (list.empty() ? "" : ", ") + n;
      names.push_back(n);
    }
    const auto hint = text::did_you_mean(k.variant, names);
    r.fail(node["variant"], field + ".variant",
           "family '" + family.name + "' has no variant '" + k.variant + "'" + (hint.empty() ? "" : ";" + hint) +
               " (available: " + list + ")");
  }
  // The oracle is the reference's run under the exact policy: an opaque kernel cannot be it.
  if (field == "reference" && !it->second.exact) {
    r.fail(node["variant"], field + ".variant",
           "variant '" + k.variant + "' is opaque (exact=False: no fp64 mode), and the reference's exact run is the "
           "oracle; name an exact reference (the eager code it replaces) and this variant as the production");
  }
  if (node["version"] && it->second.origin != "builtin") {
    r.fail(node["version"], field + ".version",
           "variant '" + k.variant + "' comes from plugin " + it->second.version +
               ", whose version every result records; remove this key");
  }
  k.version = node["version"] ? r.nonempty_string(node["version"], field + ".version") : it->second.version;
  k.params = r.params(node["params"], field + ".params", it->second.params, "", node);
  return k;
}

void read_gates(const Reader& r, const YAML::Node& node, GateSettings& g) {
  if (!node.IsDefined() || node.IsNull()) return;
  r.check_keys(node, "gates", {"replicates", "max_replicates", "algebra", "bias", "variance"});
  if (node["replicates"]) g.replicates = static_cast<std::uint64_t>(r.positive_integer(node["replicates"], "gates.replicates"));
  if (node["max_replicates"]) {
    g.max_replicates = static_cast<std::uint64_t>(r.positive_integer(node["max_replicates"], "gates.max_replicates"));
  }
  // R = 2 leaves the bias gate's t test one degree of freedom; its cut at the union-bound level
  // (about 6e11) is beyond what the t quantile computes, and every gate ERRORed.
  if (g.replicates < 3) {
    r.fail(node["replicates"], "gates.replicates",
           "expected at least 3 replicates (at 2 the bias gate's t test has one degree of freedom, too few to decide)");
  }
  // Resource bounds: 2^20 replicates is 128x the default R_max (8192) and hours per control;
  // 1e9 replicates ran for an estimated 68 days.
  constexpr std::uint64_t kMaxReplicates = std::uint64_t{1} << 20;
  for (const char* key : {"replicates", "max_replicates"}) {
    const auto value = std::string(key) == "replicates" ? g.replicates : g.max_replicates;
    if (node[key] && value > kMaxReplicates) {
      r.fail(node[key], std::string("gates.") + key,
             "expected at most " + std::to_string(kMaxReplicates) + " (2^20), got " + std::to_string(value));
    }
  }
  if (g.max_replicates < g.replicates) {
    r.fail(node["max_replicates"] ? node["max_replicates"] : node, "gates.max_replicates",
           "expected at least gates.replicates = " + std::to_string(g.replicates) + ", got " + std::to_string(g.max_replicates));
  }
  // N_alg defaults to 16 but never to more than the pre-declared R.
  g.algebra_replicates = static_cast<int>(std::min<std::uint64_t>(16, g.replicates));
  if (const auto a = node["algebra"]) {
    r.check_keys(a, "gates.algebra", {"replicates", "tolerance"});
    if (a["replicates"]) {
      g.algebra_replicates = static_cast<int>(r.positive_integer(a["replicates"], "gates.algebra.replicates"));
      if (static_cast<std::uint64_t>(g.algebra_replicates) > g.replicates) {
        r.fail(a["replicates"], "gates.algebra.replicates", "expected at most gates.replicates = " + std::to_string(g.replicates));
      }
    }
    if (a["tolerance"]) g.algebra_tolerance = r.positive_number(a["tolerance"], "gates.algebra.tolerance");
  }
  if (const auto b = node["bias"]) {
    r.check_keys(b, "gates.bias", {"z_star", "s_min", "c", "c_magnitude", "statistics", "attribution"});
    if (b["attribution"]) g.bias_attribution = r.boolean(b["attribution"], "gates.bias.attribution");
    if (b["z_star"]) g.bias.z_star = r.positive_number(b["z_star"], "gates.bias.z_star");
    if (b["s_min"]) g.bias.s_min = r.positive_number(b["s_min"], "gates.bias.s_min");
    if (b["c"]) g.bias.c = r.positive_number(b["c"], "gates.bias.c");
    if (b["c_magnitude"]) g.bias.c_magnitude = r.positive_number(b["c_magnitude"], "gates.bias.c_magnitude");
    if (const auto st = b["statistics"]) {
      g.bias_deciding.clear();
      const auto names = r.string_list(st, "gates.bias.statistics");
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == "signed") g.bias_deciding.push_back(stats::BiasStatistic::signed_difference);
        else if (names[i] == "magnitude") g.bias_deciding.push_back(stats::BiasStatistic::magnitude);
        else r.fail(st[i], "gates.bias.statistics[" + std::to_string(i) + "]", "expected signed or magnitude, got '" + names[i] + "'");
      }
      if (g.bias_deciding.empty()) r.fail(st, "gates.bias.statistics", "expected at least one of signed, magnitude");
    }
  }
  if (const auto v = node["variance"]) {
    r.check_keys(v, "gates.variance", {"tail_q", "horizon", "warn_K", "fail_K", "bootstrap", "bootstrap_kind"});
    auto& s = g.variance;
    if (v["tail_q"]) {
      s.tail_q = r.number(v["tail_q"], "gates.variance.tail_q");
      if (!(s.tail_q > 0.0 && s.tail_q < 1.0)) r.fail(v["tail_q"], "gates.variance.tail_q", "expected a number in (0, 1), got " + v["tail_q"].Scalar());
    }
    if (v["horizon"]) {
      s.horizon = r.number(v["horizon"], "gates.variance.horizon");
      if (!(s.horizon > 1.0)) r.fail(v["horizon"], "gates.variance.horizon", "expected a number > 1 (replicates), got " + v["horizon"].Scalar());
    }
    if (v["warn_K"]) s.warn_k = r.positive_number(v["warn_K"], "gates.variance.warn_K");
    if (v["fail_K"]) s.fail_k = r.positive_number(v["fail_K"], "gates.variance.fail_K");
    if (s.fail_k < s.warn_k) {
      r.fail(v["fail_K"] ? v["fail_K"] : v, "gates.variance.fail_K", "expected at least warn_K");
    }
    if (v["bootstrap"]) {
      const auto b = r.integer(v["bootstrap"], "gates.variance.bootstrap");
      if (b < 0) r.fail(v["bootstrap"], "gates.variance.bootstrap", "expected an integer >= 0, got " + std::to_string(b));
      // 1e9 refits grew to 8.7 GB; the bound's coverage needs none (docs/statistics.md).
      if (b > 100000) r.fail(v["bootstrap"], "gates.variance.bootstrap", "expected at most 100000, got " + std::to_string(b));
      s.bootstrap = static_cast<int>(b);
    }
    if (v["bootstrap_kind"]) {
      const auto k = r.string(v["bootstrap_kind"], "gates.variance.bootstrap_kind");
      if (k == "exceedances") s.bootstrap_kind = stats::BootstrapKind::exceedances;
      else if (k == "full") s.bootstrap_kind = stats::BootstrapKind::full;
      else r.fail(v["bootstrap_kind"], "gates.variance.bootstrap_kind", "expected exceedances or full, got '" + k + "'");
    }
  }
}

void read_probe(const Reader& r, const YAML::Node& node, const kernels::FamilySchema& family, TestCase& tc) {
  if (!node) r.fail(node, "probe", "required mapping is missing");
  r.require_map(node, "probe");
  auto& p = tc.probe;
  std::set<std::string> generic = {"dtype", "seed", "shift", "scale", "outliers", "row_offsets"};
  if (!node["dtype"]) r.fail(node, "probe.dtype", "required: bf16, fp16, fp32 or fp64");
  const auto dtype = r.string(node["dtype"], "probe.dtype");
  const auto format = stats::parse_format(dtype);
  if (!format) r.fail(node["dtype"], "probe.dtype", "expected bf16, fp16, fp32 or fp64, got '" + dtype + "'");
  p.dtype = *format;
  if (!node["seed"]) r.fail(node, "probe.seed", "required integer is missing (every case is reproducible from its seed)");
  const auto seed = r.integer(node["seed"], "probe.seed");
  if (seed < 0) r.fail(node["seed"], "probe.seed", "expected an integer >= 0, got " + std::to_string(seed));
  p.seed = static_cast<std::uint64_t>(seed);
  if (node["shift"]) p.shift = r.number(node["shift"], "probe.shift");
  if (node["scale"]) p.scale = r.positive_number(node["scale"], "probe.scale");
  // A shift so large that N(shift, scale²) rounds to a handful of W values is a degenerate
  // probe: shift 1e30 made N1 PASS every gate. At |shift| >= 2^p · scale (p the W
  // significand bits: 256 for bf16) one W spacing at the shift exceeds the spread.
  if (const double limit = std::ldexp(p.scale, stats::traits(p.dtype).precision); std::fabs(p.shift) >= limit) {
    r.fail(node["shift"], "probe.shift",
           "expected |shift| < 2^" + std::to_string(stats::traits(p.dtype).precision) + " x scale = " + stats::format_number(limit) +
               " for " + std::string(stats::traits(p.dtype).name) + ": the inputs would round to a few values around the shift");
  }
  if (const auto o = node["outliers"]) {
    r.check_keys(o, "probe.outliers", {"count", "magnitude"});
    if (o["count"]) {
      p.outlier_count = r.integer(o["count"], "probe.outliers.count");
      if (p.outlier_count < 0) r.fail(o["count"], "probe.outliers.count", "expected an integer >= 0, got " + o["count"].Scalar());
    }
    if (o["magnitude"]) p.outlier_magnitude = r.positive_number(o["magnitude"], "probe.outliers.magnitude");
  }
  if (node["row_offsets"]) {
    p.row_offset_sd = r.number(node["row_offsets"], "probe.row_offsets");
    if (p.row_offset_sd < 0) r.fail(node["row_offsets"], "probe.row_offsets", "expected a number >= 0 (sd of a per-row offset)");
  }
  // Family-declared parameters: everything else under probe.
  YAML::Node rest(YAML::NodeType::Map);
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (!generic.count(key)) rest[kv.first] = kv.second;
  }
  std::vector<std::string> family_keys;
  for (const auto& spec : family.probe_params) family_keys.push_back(spec.name.substr(0, spec.name.find('.')));
  for (const auto& kv : rest) {
    const auto key = kv.first.as<std::string>();
    if (std::find(family_keys.begin(), family_keys.end(), key) == family_keys.end()) {
      std::string list = "dtype, seed, shift, scale, outliers, row_offsets";
      std::set<std::string> uniq(family_keys.begin(), family_keys.end());
      for (const auto& k : uniq) list += ", " + k;
      r.fail(kv.first, "probe." + key, "unknown key (expected one of: " + list + ")");
    }
  }
  p.params = r.params(rest, "probe", family.probe_params, "", node);
  if (family.validate_probe) {
    if (auto err = family.validate_probe(p)) {
      // Point at the offending field when it exists in the document, else at probe.
      YAML::Node where = node;
      std::string path = err->field.rfind("probe.", 0) == 0 ? err->field.substr(6) : err->field;
      YAML::Node walk = node;
      std::size_t start = 0;
      while (walk.IsMap()) {
        const auto dot = path.find('.', start);
        walk = walk[path.substr(start, dot == std::string::npos ? std::string::npos : dot - start)];
        if (!walk.IsDefined()) break;
        where = walk;
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
      r.fail(where, err->field, err->message);
    }
  }
}

// `direction:` and `backward:` (issue 31): what the case certifies, and for the backward the
// upstream-gradient probe dy and the gradients with their bucket axes.
// `half`: which of a `direction: both` file's two cases is read (ignored for any other file).
void read_direction(const Reader& r, const YAML::Node& doc, const kernels::FamilySchema& family, Direction half,
                    TestCase& tc) {
  if (const auto d = doc["direction"]) {
    const auto s = r.string(d, "direction");
    if (s == "forward") tc.direction = Direction::forward;
    else if (s == "backward") tc.direction = Direction::backward;
    else if (s == "both") tc.both_directions = true, tc.direction = half;
    else r.fail(d, "direction", "expected forward (the outputs), backward (the gradients) or both (one result each), got '" + s + "'");
  }
  const auto b = doc["backward"];
  if (tc.direction == Direction::forward && !tc.both_directions) {
    if (b) r.fail(b, "backward", "only a case with `direction: backward` or `both` has a backward probe");
    return;
  }
  if (family.gradients.empty()) {
    r.fail(doc["direction"], "direction", "family '" + family.name + "' has no backward yet (kcert list shows which families have one)");
  }
  std::string names;
  for (const auto& g : family.gradients) names += (names.empty() ? "" : ", ") + g.name;
  const auto find = [&](const std::string& name) -> const kernels::GradientSchema* {
    for (const auto& g : family.gradients)
      if (g.name == name) return &g;
    return nullptr;
  };
  if (!b) return;
  r.check_keys(b, "backward", {"dy", "gradients", "buckets"});
  if (const auto dy = b["dy"]) {
    r.check_keys(dy, "backward.dy", {"kind", "shift", "scale", "margin", "zero_rows", "huge_row"});
    if (dy["kind"]) {
      const auto k = r.string(dy["kind"], "backward.dy.kind");
      const auto law = contract::parse_dy_law(k);
      if (!law)
        r.fail(dy["kind"], "backward.dy.kind",
               "expected " + contract::dy_law_names() + ", got '" + k + "' (dy = ones is not offered: it hides per-row scaling defects)");
      tc.backward.dy_law = *law;
    }
    if (dy["margin"]) {
      if (!contract::dy_law_info(tc.backward.dy_law).has_margin)
        r.fail(dy["margin"], "backward.dy.margin", "only the loss_shaped kind has a margin");
      tc.backward.dy_margin = r.number(dy["margin"], "backward.dy.margin");
      if (std::abs(tc.backward.dy_margin) > 1e3) r.fail(dy["margin"], "backward.dy.margin", "expected |margin| <= 1000");
    }
    if (dy["zero_rows"]) {
      tc.backward.dy_zero_rows = r.integer(dy["zero_rows"], "backward.dy.zero_rows");
      if (tc.backward.dy_zero_rows < 0) r.fail(dy["zero_rows"], "backward.dy.zero_rows", "expected an integer >= 0");
    }
    if (dy["huge_row"]) {
      tc.backward.dy_huge_row = r.positive_number(dy["huge_row"], "backward.dy.huge_row");
      if (tc.backward.dy_huge_row > 65536.0) r.fail(dy["huge_row"], "backward.dy.huge_row", "expected a factor <= 65536 (2^16)");
    }
    if (dy["shift"]) {
      if (!contract::dy_law_info(tc.backward.dy_law).has_shift)
        r.fail(dy["shift"], "backward.dy.shift", "only the shifted and heavy_tailed kinds have a shift");
      tc.backward.dy_shift = r.number(dy["shift"], "backward.dy.shift");
      if (std::abs(tc.backward.dy_shift) > 1e6) r.fail(dy["shift"], "backward.dy.shift", "expected |shift| <= 1e6");
    }
    if (tc.backward.dy_law == contract::DyLaw::zero_mean || tc.backward.dy_law == contract::DyLaw::loss_shaped)
      tc.backward.dy_shift = 0.0;
    if (dy["scale"]) {
      tc.backward.dy_scale = r.positive_number(dy["scale"], "backward.dy.scale");
      if (tc.backward.dy_scale > 1e6) r.fail(dy["scale"], "backward.dy.scale", "expected a scale <= 1e6");
    }
  }
  if (const auto g = b["gradients"]) {
    tc.backward.gradients = r.string_list(g, "backward.gradients");
    if (tc.backward.gradients.empty()) r.fail(g, "backward.gradients", "expected at least one gradient (" + names + ")");
    for (std::size_t i = 0; i < tc.backward.gradients.size(); ++i) {
      const auto& n = tc.backward.gradients[i];
      const auto field = "backward.gradients[" + std::to_string(i) + "]";
      if (!find(n)) r.fail(g[i], field, "family '" + family.name + "' has no gradient '" + n + "' (available: " + names + ")");
      if (std::count(tc.backward.gradients.begin(), tc.backward.gradients.end(), n) > 1)
        r.fail(g[i], field, "'" + n + "' is listed twice");
    }
  }
  if (const auto bk = b["buckets"]) {
    r.require_map(bk, "backward.buckets");
    for (const auto& kv : bk) {
      const auto name = kv.first.as<std::string>();
      const auto field = "backward.buckets." + name;
      const auto* gs = find(name);
      if (!gs) r.fail(kv.first, field, "family '" + family.name + "' has no gradient '" + name + "' (available: " + names + ")");
      const auto axis = r.string(kv.second, field);
      if (std::find(gs->bucket_axes.begin(), gs->bucket_axes.end(), axis) == gs->bucket_axes.end()) {
        std::string list;
        for (const auto& a : gs->bucket_axes) list += (list.empty() ? "" : ", ") + a;
        r.fail(kv.second, field, "gradient '" + name + "' has no bucket axis '" + axis + "' (available: " + list + ")");
      }
      tc.backward.buckets[name] = axis;
    }
  }
}

TestCase read_document(const Reader& r, YAML::Node doc, const FamilySchemas& families, const std::string& profile,
                       Direction half = Direction::forward) {
  r.check_keys(doc, "", {"schema", "id", "kind", "family", "mechanism", "references", "reference", "production", "probe",
                          "buckets", "gates", "expected", "expected_on", "attestation", "profiles", "plugins", "python", "math_modes",
                          "sweep", "direction", "backward"});
  TestCase tc;
  tc.source = r.source();
  if (!doc["schema"]) r.fail(doc, "schema", "required: the schema version, 1");
  if (r.integer(doc["schema"], "schema") != 1) r.fail(doc["schema"], "schema", "expected 1 (the only schema version), got " + doc["schema"].Scalar());

  if (const auto profiles = doc["profiles"]) {
    r.require_map(profiles, "profiles");
    for (const auto& kv : profiles) {
      const auto name = kv.first.as<std::string>();
      r.check_keys(kv.second, "profiles." + name, {"probe", "gates"});
      tc.profiles.push_back(name);
    }
    if (!profile.empty() && profiles[profile]) {
      merge_into(doc, profiles[profile]);
      tc.profile = profile;
    }
  }

  auto required = [&](const char* key) {
    if (!doc[key]) r.fail(doc, key, "required field is missing");
    return doc[key];
  };
  tc.id = r.nonempty_string(required("id"), "id");
  // Ids key the database's unique index (a btree row holds at most ~2.7 KB: a longer id was
  // refused there), file names and report pages.
  constexpr std::size_t kMaxIdBytes = 200;
  if (tc.id.size() > kMaxIdBytes) {
    r.fail(doc["id"], "id", "at most " + std::to_string(kMaxIdBytes) + " bytes, got " + std::to_string(tc.id.size()));
  }
  for (char c : tc.id) {
    if (static_cast<unsigned char>(c) < 0x20) r.fail(doc["id"], "id", "control characters are not allowed in an id");
  }
  const auto kind = r.string(required("kind"), "kind");
  if (kind == "negative") tc.kind = Kind::negative;
  else if (kind == "positive") tc.kind = Kind::positive;
  else r.fail(doc["kind"], "kind", "expected negative (a real defect) or positive (a known-correct variant), got '" + kind + "'");
  tc.family = r.nonempty_string(required("family"), "family");
  const auto fam = families.find(tc.family);
  if (fam == families.end()) {
    std::string list;
    std::vector<std::string> names;
    for (const auto& [n, f] : families) {
      list += (list.empty() ? "" : ", ") + n;
      names.push_back(n);
    }
    const auto hint = text::did_you_mean(tc.family, names);
    r.fail(doc["family"], "family",
           "no family '" + tc.family + "' is registered" + (hint.empty() ? "" : ";" + hint) + " (available: " + list + ")");
  }
  const auto& family = fam->second;
  tc.mechanism = r.nonempty_string(required("mechanism"), "mechanism");
  tc.references = r.string_list(required("references"), "references");
  const bool python_case = doc["python"].IsSequence() && doc["python"].size() > 0;
  tc.reference = kernel_choice(r, required("reference"), "reference", family, python_case);
  tc.production = kernel_choice(r, required("production"), "production", family, python_case);
  read_probe(r, doc["probe"], family, tc);
  tc.bucket_axis = family.bucket_axes.front();
  if (doc["buckets"]) {
    tc.bucket_axis = r.string(doc["buckets"], "buckets");
    if (std::find(family.bucket_axes.begin(), family.bucket_axes.end(), tc.bucket_axis) == family.bucket_axes.end()) {
      std::string list;
      for (const auto& a : family.bucket_axes) list += (list.empty() ? "" : ", ") + a;
      r.fail(doc["buckets"], "buckets", "family '" + family.name + "' has no bucket axis '" + tc.bucket_axis + "' (available: " + list + ")");
    }
  }
  read_direction(r, doc, family, half, tc);
  read_gates(r, doc["gates"], tc.gates);
  // The gradients a backward case certifies: an expectation may name only these.
  std::vector<std::string> certified = tc.backward.gradients;
  if (certified.empty())
    for (const auto& g : family.gradients) certified.push_back(g.name);
  const auto read_gates = [&](const YAML::Node& e, const std::string& at, std::map<std::string, std::vector<stats::Verdict>>& into) {
    for (const char* gate : {"algebra", "bias", "variance"}) {
      const auto g = e[gate];
      if (!g) continue;
      const std::string field = at + "." + gate;
      std::vector<stats::Verdict> ok;
      if (g.IsSequence()) {
        for (std::size_t i = 0; i < g.size(); ++i) ok.push_back(r.verdict(g[i], field + "[" + std::to_string(i) + "]"));
        if (ok.empty()) r.fail(g, field, "expected at least one verdict");
      } else {
        ok.push_back(r.verdict(g, field));
      }
      into[gate] = ok;
    }
  };
  // One direction's expectation: the gates (the worst over a backward case's gradients) and,
  // for a backward case, per gradient.
  const auto read_one = [&](const YAML::Node& e, const std::string& at, Direction d) {
    Expectation x;
    if (d == Direction::backward) r.check_keys(e, at, {"algebra", "bias", "variance", "gradients", "note"});
    else r.check_keys(e, at, {"algebra", "bias", "variance", "note"});
    read_gates(e, at, x.gates);
    if (const auto g = e["gradients"]) {
      r.require_map(g, at + ".gradients");
      std::string names;
      for (const auto& n : certified) names += (names.empty() ? "" : ", ") + n;
      for (const auto& kv : g) {
        const auto name = kv.first.as<std::string>();
        const auto field = at + ".gradients." + name;
        if (std::find(certified.begin(), certified.end(), name) == certified.end())
          r.fail(kv.first, field, "the case certifies no gradient '" + name + "' (it certifies: " + names + ")");
        r.check_keys(kv.second, field, {"algebra", "bias", "variance"});
        read_gates(kv.second, field, x.gradients[name]);
      }
    }
    if (e["note"]) x.note = r.string(e["note"], at + ".note");
    return x;
  };
  // A `direction: both` file gives each direction its own expectation
  // (`expected.forward`, `expected.backward`); this half reads its own.
  const auto read_expectation = [&](const YAML::Node& e, const std::string& at) {
    if (!tc.both_directions) return read_one(e, at, tc.direction);
    r.check_keys(e, at, {"forward", "backward"});
    const auto name = std::string(contract::to_string(tc.direction));
    const auto mine = e[name];
    if (!mine) return Expectation{};
    // The other half is validated when it is read.
    return read_one(mine, at + "." + name, tc.direction);
  };
  if (const auto e = doc["expected"]) tc.expected = read_expectation(e, "expected");
  if (const auto on = doc["expected_on"]) {
    // Per environment condition, where the catalog predicts another verdict there
    // (numerics::expectation_conditions lists the ones that hold in a run).
    r.require_map(on, "expected_on");
    for (const auto& kv : on) {
      const auto release = kv.first.as<std::string>();
      // libtorch>=MAJOR.MINOR: from that release on (contract::parse_release_threshold).
      if (release != "libtorch1" && release != "libtorch2" && release != "cpu_bf16_gemm_in_bf16" &&
          !contract::parse_release_threshold(release))
        r.fail(kv.first, "expected_on." + release,
               "unknown condition (expected one of: libtorch1, libtorch2, libtorch>=MAJOR.MINOR, cpu_bf16_gemm_in_bf16)");
      if (!doc["expected"]) r.fail(kv.first, "expected_on", "needs an `expected` for the other environments");
      tc.expected_on[release] = read_expectation(kv.second, "expected_on." + release);
    }
  }
  if (const auto pl = doc["plugins"]) {
    // Loaded by the command before validation (see plugin_paths); recorded here as given.
    tc.plugins = r.string_list(pl, "plugins");
  }
  if (const auto py = doc["python"]) {
    // Described by the command before validation (see python_paths); recorded resolved.
    for (const auto& f : r.string_list(py, "python")) tc.python.push_back(resolved_against(tc.source, f));
  }
  if (const auto m = doc["math_modes"]) {
    r.check_keys(m, "math_modes", numerics::math_mode_names());
    for (const auto& kv : m) {
      const auto name = kv.first.as<std::string>();
      numerics::set_math_mode(tc.math_modes, name, r.boolean(kv.second, "math_modes." + name));
    }
  }
  if (const auto a = doc["attestation"]) {
    r.check_keys(a, "attestation", {"path", "theorem", "status"});
    Attestation at;
    if (a["path"]) at.path = r.string(a["path"], "attestation.path");
    if (a["theorem"]) at.theorem = r.string(a["theorem"], "attestation.theorem");
    if (a["status"]) at.status = r.string(a["status"], "attestation.status");
    tc.attestation = at;
  }
  if (const auto sw = doc["sweep"]) {
    // Probe settings the case is certified on besides its contract (issue 30): each merges
    // into `probe` as a profile does (after the profile), and is validated as a whole case.
    if (!sw.IsSequence() || sw.size() == 0) r.fail(sw, "sweep", "expected a non-empty list of {name, probe} settings, got " + Reader::shown(sw));
    if (sw.size() > 16) r.fail(sw, "sweep", "at most 16 settings, got " + std::to_string(sw.size()));
    std::set<std::string> names{"contract"};
    for (std::size_t i = 0; i < sw.size(); ++i) {
      const auto item = sw[i];
      const auto field = "sweep[" + std::to_string(i) + "]";
      r.check_keys(item, field, {"name", "probe"});
      if (!item["name"]) r.fail(item, field + ".name", "required: a short name for the setting ([a-z0-9_-], e.g. negatives)");
      const auto name = r.nonempty_string(item["name"], field + ".name");
      if (name.size() > 40 || !std::all_of(name.begin(), name.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
          })) {
        r.fail(item["name"], field + ".name", "expected at most 40 characters of [a-z0-9_-], got '" + name + "'");
      }
      if (!names.insert(name).second) r.fail(item["name"], field + ".name", "'" + name + "' is used twice (or is 'contract', the case's own probe)");
      if (!item["probe"]) r.fail(item, field + ".probe", "required: the probe fields this setting changes");
      r.require_map(item["probe"], field + ".probe");
      if (item["probe"].size() == 0) r.fail(item["probe"], field + ".probe", "expected at least one probe field to change");
      // The whole case under this setting is built and validated by expand_sweep, from a
      // fresh parse of the text (YAML::Clone drops the nodes' positions).
      contract::SweepSetting setting;
      setting.name = name;
      YAML::Emitter shown;
      shown << YAML::Flow << item["probe"];
      setting.probe_text = shown.c_str();
      tc.sweep.push_back(std::move(setting));
    }
  }
  return tc;
}

std::string position(const std::string& source, const YAML::Mark& m) {
  return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Limits on the document as yaml-cpp's node graph presents it, aliases expanded: whatever
// reads the document later (the readers below, merge_into, the emitter of a sweep setting)
// walks that expanded tree, so it must be small. A case file is a few hundred nodes, 8 deep.
constexpr std::size_t kMaxExpandedNodes = 100000;
constexpr std::size_t kMaxDepth = 64;

// Checks a document from the parser's event stream before any node graph exists. yaml-cpp
// keeps the first of two equal keys and converts any key to a string on request: a
// duplicated `replicates:` silently lost the second value, and a list used as a key ended in
// "internal error ... bad conversion" with no file name. Both are errors here, with the
// position and the dotted path. The events are the text's own, so every node is seen once
// and an alias is one event: the previous check walked the node graph, which follows
// aliases, so `a: &a {b: *a}` recursed until the stack overflowed and a fan-out of aliases
// (each level listing the previous one twice) took minutes at depth 8. Here an alias to a
// node that is still open is refused (it would make the graph a cycle), and an alias counts
// the expanded size and depth of its anchor's node, so a bomb stops at the limit above.
class DocumentChecker : public YAML::EventHandler {
 public:
  explicit DocumentChecker(std::string source) : source_(std::move(source)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnAnchor(const YAML::Mark&, const std::string& name) override { pending_anchor_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (expecting_key()) fail(mark, here(), "keys must be plain strings, got an empty key");
    leaf(mark, anchor);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    if (expecting_key()) {
      auto& map = stack_.back();
      const auto field = map.path.empty() ? value : map.path + "." + value;
      if (const auto it = map.keys.find(value); it != map.keys.end()) {
        fail(mark, field, "duplicate key (first at line " + std::to_string(it->second + 1) + "); YAML keeps only one of them");
      }
      map.keys.emplace(value, mark.line);
      map.key = value;
      map.expecting_key = false;
      remember_name(anchor);
      if (anchor != YAML::NullAnchor) anchors_[anchor] = {1, 1, false};
      count(mark, 1);
      return;
    }
    leaf(mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (expecting_key()) fail(mark, here(), "keys must be plain strings, got an alias");
    const auto it = anchors_.find(anchor);
    const auto name = "*" + (anchor_names_.count(anchor) ? anchor_names_[anchor] : std::string("?"));
    if (it == anchors_.end() || it->second.open) {
      fail(mark, child_path(), "alias " + name + " refers to a node that contains it; a recursive alias would make the document endless");
    }
    if (depth() + it->second.height > kMaxDepth) {
      fail(mark, child_path(), "alias " + name + " nests the document deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    count(mark, it->second.nodes, name);
    finish_child(it->second.nodes, it->second.height);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor, false);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    open(mark, anchor, true);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Anchored {
    std::size_t nodes = 0;   // nodes in the anchored subtree, its own aliases expanded
    std::size_t height = 0;  // levels of that subtree (a scalar is 1)
    bool open = true;        // still being read: an alias to it would be a cycle
  };
  struct Frame {
    bool is_map = false;
    std::string path;       // dotted path of this collection
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::size_t nodes = 1;  // this collection and everything in it, expanded
    std::size_t height = 1;
    std::size_t index = 0;  // next item of a sequence
    bool expecting_key = true;
    std::string key;        // the key whose value comes next (maps)
    std::map<std::string, int> keys;  // key -> 0-based line
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& field, const std::string& message) const {
    throw LoadError(position(source_, mark) + ": " + (field.empty() ? "(document)" : field) + ": " + message);
  }
  static std::string position(const std::string& source, const YAML::Mark& m) {
    return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }

  bool expecting_key() const { return !stack_.empty() && stack_.back().is_map && stack_.back().expecting_key; }
  std::size_t depth() const { return stack_.size(); }
  std::string here() const { return stack_.empty() ? "" : stack_.back().path; }
  // The dotted path of the value being read now.
  std::string child_path() const {
    if (stack_.empty()) return "";
    const auto& top = stack_.back();
    if (top.is_map) return top.path.empty() ? top.key : top.path + "." + top.key;
    return top.path + "[" + std::to_string(top.index) + "]";
  }

  void count(const YAML::Mark& mark, std::size_t nodes, const std::string& alias = "") {
    expanded_ += nodes;
    if (expanded_ > kMaxExpandedNodes) {
      fail(mark, child_path(),
           (alias.empty() ? std::string("the document") : "alias " + alias) + " makes the document larger than " +
               std::to_string(kMaxExpandedNodes) + " nodes with its aliases expanded (an alias bomb?)");
    }
  }

  void remember_name(YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor && !pending_anchor_name_.empty()) anchor_names_[anchor] = pending_anchor_name_;
    pending_anchor_name_.clear();
  }

  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor) {
    remember_name(anchor);
    if (anchor != YAML::NullAnchor) anchors_[anchor] = {1, 1, false};
    count(mark, 1);
    finish_child(1, 1);
  }

  // A value of the enclosing collection is complete: add its size, and step the
  // collection on to its next key or item.
  void finish_child(std::size_t nodes, std::size_t height) {
    if (stack_.empty()) return;
    auto& top = stack_.back();
    top.nodes += nodes;
    top.height = std::max(top.height, height + 1);
    if (top.is_map) {
      top.nodes += 1;  // the key
      top.expecting_key = true;
    } else {
      ++top.index;
    }
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map) {
    if (expecting_key()) fail(mark, here(), std::string("keys must be plain strings, got a ") + (is_map ? "mapping" : "sequence"));
    remember_name(anchor);
    if (depth() + 1 > kMaxDepth) {
      // The path of 64 levels is mostly "[0]"; its start and end say where.
      auto path = child_path();
      if (path.size() > 40) path = path.substr(0, path.find('[') == std::string::npos ? 20 : path.find('[') + 9) + "..." + path.substr(path.size() - 3);
      fail(mark, path, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    count(mark, 1);
    Frame f;
    f.is_map = is_map;
    f.path = child_path();
    f.anchor = anchor;
    if (anchor != YAML::NullAnchor) anchors_[anchor] = Anchored{};
    stack_.push_back(std::move(f));
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.anchor != YAML::NullAnchor) anchors_[f.anchor] = {f.nodes, f.height, false};
    finish_child(f.nodes, f.height);
  }

  std::string source_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  std::map<YAML::anchor_t, std::string> anchor_names_;
  std::string pending_anchor_name_;
  std::size_t expanded_ = 0;
};

// YAML text is Unicode (UTF-8 here), and every text of a case ends up in JSON, HTML, JUnit
// XML and on terminals, where an invalid byte is at best replaced and at worst (JSON) an
// exception after the case has run. Refused here with its line and column instead; so are
// the C0 control characters YAML excludes from a stream (a tab, CR and LF are text).
void check_text_is_utf8(const std::string& text, const std::string& source) {
  int line = 1;
  int column = 1;
  for (std::size_t i = 0; i < text.size();) {
    const auto ch = kcert::text::decode_utf8(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    const auto cp = ch.code_point;
    const bool ok = ch.valid;
    const auto where = source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw LoadError(where + "byte " + hex + " is not valid UTF-8 (a case file is UTF-8 text)");
    }
    if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(cp));
      throw LoadError(where + "control character " + hex + " is not allowed in a case file");
    }
    if (cp == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += ch.length;
  }
}

void check_document(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentChecker checker(source);
  try {
    parser.HandleNextDocument(checker);
  } catch (const YAML::ParserException& e) {
    throw LoadError(position(source, e.mark) + ": YAML syntax error: " + e.msg);
  }
}

// The 0-based line of a document marker (`---` or `...` at column 0) that starts a second
// document, or -1. Scanned by hand: yaml-cpp 0.7's LoadAll, which used to find it, allocates
// without bound on a file that starts with a stray ',' (",\na: 1" exhausted memory; found by
// the loader's fuzzer, bench/fuzz-loader.sh). A marker at column 0 ends a document even
// inside a block scalar, so a line scan is exact.
int second_document_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  bool content = false;
  int marker = -1;
  for (int n = 0; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool is_marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                           (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
    // What follows a marker on its line ("--- {a: 1}") is content of the next document.
    const std::string rest = is_marker ? line.substr(3) : line;
    const auto first = rest.find_first_not_of(" \t");
    const bool has_content = first != std::string::npos && rest[first] != '#' && !(rest[first] == '%' && !content);
    if (is_marker && content && marker < 0) marker = n;
    if (has_content) {
      if (marker >= 0) return marker;
      content = true;
    }
  }
  return -1;
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  if (const int line = second_document_line(text); line >= 0) {
    throw LoadError(source + ":" + std::to_string(line + 1) +
                    ":1: a second YAML document (after ---) would be ignored: one test case per file");
  }
  check_text_is_utf8(text, source);
  // Before the node graph is built: that graph shares aliased nodes, and walking it (as
  // every reader below does) is only bounded once the checker has bounded the expansion.
  check_document(text, source);
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw LoadError(position(source, e.mark) + ": YAML syntax error: " + e.msg);
  }
  return doc;
}

}  // namespace

// Builds each sweep setting's whole case (contract::SweepSetting::testcase): the text parsed
// afresh, the profile merged into it, then the setting's probe fields (so a setting wins over
// the profile), and read as a case without a sweep. An error names its position in the file
// and the setting.
void expand_sweep(const Reader& reader, const std::string& text, const std::string& source, const FamilySchemas& families,
                  TestCase& tc) {
  for (std::size_t i = 0; i < tc.sweep.size(); ++i) {
    auto& setting = tc.sweep[i];
    YAML::Node doc = parse_yaml(text, source);
    const YAML::Node probe = doc["sweep"][i]["probe"];
    if (!tc.profile.empty()) merge_into(doc, doc["profiles"][tc.profile]);
    doc.remove("sweep");
    YAML::Node over;
    over["probe"] = probe;
    merge_into(doc, over);
    try {
      setting.testcase = std::make_shared<TestCase>(read_document(reader, doc, families, "", tc.direction));
    } catch (const LoadError& e) {
      throw LoadError(std::string(e.what()) + " (in sweep setting '" + setting.name + "')");
    }
    setting.testcase->profile = tc.profile;
  }
}

namespace {

// One case of the file: the whole file for a single-direction case, one half of a
// `direction: both` file.
TestCase parse_half(const std::string& text, const std::string& source, const FamilySchemas& families,
                    const std::string& profile, Direction half) {
  const Reader reader(source);
  YAML::Node doc = parse_yaml(text, source);
  if (!doc.IsMap()) reader.fail(doc, "(document)", "expected a mapping of test-case fields");
  TestCase tc = read_document(reader, doc, families, profile, half);
  tc.text = text;
  expand_sweep(reader, text, source, families, tc);
  // Validate every other profile now: a typo in the CI profile must not wait for CI. And
  // the base contract under a profile: a smoke run whose profile overrides a broken field
  // would otherwise pass CI and stop the nightly at contract shapes.
  if (!tc.profile.empty()) {
    auto base = read_document(reader, parse_yaml(text, source), families, "", half);
    expand_sweep(reader, text, source, families, base);
  }
  for (const auto& name : tc.profiles) {
    if (name == tc.profile) continue;
    auto other = read_document(reader, parse_yaml(text, source), families, name, half);
    expand_sweep(reader, text, source, families, other);
  }
  return tc;
}

}  // namespace

std::vector<TestCase> parse_testcases(const std::string& text, const std::string& source, const FamilySchemas& families,
                                      const std::string& profile) {
  std::vector<TestCase> out;
  out.push_back(parse_half(text, source, families, profile, Direction::forward));
  out.front().case_id = out.front().id;
  if (!out.front().both_directions) return out;
  auto backward = parse_half(text, source, families, profile, Direction::backward);
  backward.case_id = backward.id;
  backward.id += "@backward";
  for (auto& s : backward.sweep) s.testcase->id = backward.id;
  out.push_back(std::move(backward));
  return out;
}

TestCase parse_testcase(const std::string& text, const std::string& source, const FamilySchemas& families,
                        const std::string& profile) {
  return parse_testcases(text, source, families, profile).front();
}

std::string read_case_file(const std::string& path) {
  // A link as the last component is refused (collect_testcase_files resolves the ones a user
  // names, never one met in a folder); a FIFO must not block the open.
  try {
    return io::read_regular_file(path, kMaxCaseFileBytes, io::Links::refuse, "a case file");
  } catch (const io::FileRefused& e) {
    if (e.why() == io::FileRefused::Why::link) {
      throw LoadError(std::string(e.what()) + ": kcert reads only regular files in a controls folder "
                                              "(name the link's target on the command line to run it)");
    }
    throw LoadError(e.what());
  }
}

std::vector<TestCase> load_testcases(const std::string& path, const FamilySchemas& families, const std::string& profile) {
  return parse_testcases(read_case_file(path), path, families, profile);
}

TestCase load_testcase(const std::string& path, const FamilySchemas& families, const std::string& profile) {
  return load_testcases(path, families, profile).front();
}

std::string resolved_against(const std::string& case_path, const std::string& named) {
  namespace fs = std::filesystem;
  const fs::path p(named);
  return (p.is_absolute() ? p : fs::path(case_path).parent_path() / p).lexically_normal().string();
}

namespace {
// The files a case names under `key` (plugins:, python:), resolved against its folder.
std::vector<std::string> code_paths(const std::string& path, const char* key) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  try {
    // Through the checks of a full load: a cyclic or deeply nested file, a link or a FIFO must
    // not crash or block here either, before the full load reports it.
    const YAML::Node doc = parse_yaml(read_case_file(path), path);
    if (!doc.IsMap() || !doc[key] || !doc[key].IsSequence()) return out;
    for (const auto& n : doc[key]) {
      if (!n.IsScalar()) continue;  // the full load reports the type error with its position
      out.push_back(resolved_against(path, n.Scalar()));
    }
  } catch (const std::exception&) {
    // Syntax errors are reported by the full load, with file:line:col.
  }
  return out;
}
}  // namespace

std::vector<std::string> plugin_paths(const std::string& path) { return code_paths(path, "plugins"); }
std::vector<std::string> python_paths(const std::string& path) { return code_paths(path, "python"); }

std::vector<std::string> collect_testcase_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      // A controls folder is often a checkout others write to (issue 53): a link in it is not
      // followed but listed, so that loading it reports an ERROR that names it instead of
      // reading what it points at (a secret) or skipping it without a word. That covers links
      // to files, dangling links and links to folders; a FIFO or device named *.yaml is
      // listed too and refused by read_case_file.
      std::vector<std::string> found;
      for (const auto& entry : fs::recursive_directory_iterator(p)) {
        const auto ext = entry.path().extension().string();
        const bool yaml = ext == ".yaml" || ext == ".yml";
        const auto type = entry.symlink_status(ec).type();
        if (type == fs::file_type::symlink) {
          if (yaml || fs::is_directory(entry.path(), ec)) found.push_back(entry.path().string());
        } else if (yaml && type != fs::file_type::directory) {
          found.push_back(entry.path().string());
        }
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_symlink(p, ec) && fs::exists(p, ec)) {
      // Named by the user: the link is what they asked for; its target is read.
      files.push_back(fs::canonical(p, ec).string());
    } else if (fs::exists(p, ec)) {
      files.push_back(p);
    } else {
      throw LoadError(p + ": no such file or directory");
    }
  }
  return files;
}

}  // namespace kcert::testcase
