#include "harness/store/json.hpp"

#include "harness/store/described_json.hpp"
#include "harness/store/json_text.hpp"

#include "harness/numerics/process_policy.hpp"
#include "harness/stats/random_stream.hpp"
#include "harness/store/sha256.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace kcert::store {

nlohmann::json json_number(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json to_json(const stats::GpdFit& fit) { return described_json(fit); }

nlohmann::json to_json(const gates::VarianceEvidence& e) {
  auto j = described_json(e);
  j["sample"] = "stopped";  // the sample the stopping rule ended on (documents always said so)
  return j;
}

nlohmann::json to_json(const stats::TailAnalysis& a) {
  const auto& s = a.settings;
  nlohmann::json j;
  j["verdict"] = std::string(stats::to_string(a.verdict));
  j["mode"] = std::string(stats::to_string(a.mode));
  j["reason"] = a.reason;
  j["replicates"] = a.khat.count;
  j["khat"] = {{"zeros", a.khat.zeros},
               {"zero_fraction", a.khat.zero_fraction},
               {"infinite", a.khat.infinite},
               {"q50", json_number(a.khat.q50)},
               {"q90", json_number(a.khat.q90)},
               {"q99", json_number(a.khat.q99)},
               {"max", json_number(a.khat.max)}};
  j["u"] = json_number(a.u);
  j["n_exc"] = a.n_exc;
  j["zeta"] = json_number(a.zeta);
  j["xi_raw"] = a.free_fit ? json_number(a.free_fit->xi) : nlohmann::json(nullptr);
  j["xi_clipped"] = a.clipped_fit ? json_number(a.clipped_fit->xi) : nlohmann::json(nullptr);
  j["sigma"] = a.clipped_fit ? json_number(a.clipped_fit->sigma) : nlohmann::json(nullptr);
  j["fit_free"] = a.free_fit ? to_json(*a.free_fit) : nlohmann::json(nullptr);
  j["fit_clipped"] = a.clipped_fit ? to_json(*a.clipped_fit) : nlohmann::json(nullptr);
  const bool fitted = a.mode == stats::TailMode::fitted;
  j["r_T"] = fitted ? json_number(a.r_t) : nlohmann::json(nullptr);
  j["r_T_lower"] = fitted ? json_number(a.lower) : nlohmann::json(nullptr);
  j["se"] = fitted ? json_number(a.se) : nlohmann::json(nullptr);
  j["U"] = json_number(a.U);
  // What U is: a one-sided bound on r_T at `level` (fitted), else the rule that set it.
  j["U_kind"] = fitted ? "profile_likelihood_upper_bound" : a.thin ? "exponential_upper_bound" : "rule";
  j["thin_bound"] = a.thin ? described_json(*a.thin) : nlohmann::json(nullptr);
  j["boundary_fit"] = a.boundary_fit;
  j["tail_q"] = fitted ? json_number(a.tail_q) : nlohmann::json(nullptr);
  if (a.heavy.tested) {
    const auto& h = a.heavy;
    j["heavy_tail"] = {{"xi_free", json_number(h.xi_free)}, {"lr", json_number(h.lr)}, {"cut", json_number(h.cut)},
                       {"level", s.heavy_tail_level}, {"rejected", h.rejected},
                       {"U_clipped", json_number(h.U_clipped)},
                       {"U_unclipped", h.U_unclipped ? json_number(*h.U_unclipped) : nlohmann::json(nullptr)},
                       {"model_matters", h.model_matters},
                       {"bounded_above", h.bounded_q ? nlohmann::json{{"tail_q", *h.bounded_q}, {"xi", json_number(h.bounded_xi)},
                                                                        {"lr", json_number(h.bounded_lr)}, {"cut", json_number(h.bounded_cut)}}
                                                     : nlohmann::json(nullptr)},
                       {"endpoint", h.endpoint ? described_json(*h.endpoint) : nlohmann::json(nullptr)},
                       {"tied_at_maximum", h.tied_at_maximum},
                       {"atom", h.atom}};
  } else {
    j["heavy_tail"] = nullptr;
  }
  j["bootstrap_used"] = a.bootstrap_used;
  j["settings"] = {{"tail_q", s.tail_q},
                   {"horizon", s.horizon},
                   {"warn_K", s.warn_k},
                   {"fail_K", s.fail_k},
                   {"bootstrap", s.bootstrap},
                   {"bootstrap_kind", std::string(stats::to_string(s.bootstrap_kind))},
                   {"seed", s.seed},
                   {"min_exceedances", s.min_exceedances},
                   {"min_replicates", s.min_replicates},
                   {"level", s.level},
                   {"profile_level", s.profile_level},
                   {"heavy_tail_level", s.heavy_tail_level},
                   {"heavy_tail_xi_max", s.heavy_tail_xi_max}};
  return j;
}

nlohmann::json to_json(const kernels::ParamMap& params) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : params.values()) {
    std::visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, double>) j[name] = json_number(v);
      else j[name] = v;
    }, value);
  }
  return j;
}

namespace {

std::string verdict(stats::Verdict v) { return std::string(stats::to_string(v)); }

nlohmann::json to_json(const gates::Location& l) {
  if (l.replicate < 0) return nullptr;
  return {{"replicate", l.replicate}, {"element", l.element}, {"index", l.index}, {"bucket", l.bucket}};
}

nlohmann::json to_json(const gates::BucketReport::SideBias& e) { return described_json(e); }

nlohmann::json to_json(const gates::BucketReport& b) {
  nlohmann::json j = {{"bucket", b.bucket}, {"direction", b.direction}, {"z", json_number(b.z)},
                      {"effect", json_number(b.effect)}, {"ulp_effect", json_number(b.ulp_effect)},
                      {"mean", json_number(b.mean)}, {"sd", json_number(b.sd)}, {"scale", json_number(b.scale)},
                      {"ulp", json_number(b.ulp)}, {"verdict", verdict(b.verdict)}};
  if (b.has_sides) {
    j["ref_error"] = to_json(b.ref_error);
    j["prod_error"] = to_json(b.prod_error);
    j["attributed"] = b.attributed;
  }
  return j;
}

nlohmann::json to_json(const gates::BiasStatisticResult& s) {
  nlohmann::json flagged = nlohmann::json::array(), top = nlohmann::json::array(), frontier = nlohmann::json::array();
  for (const auto& b : s.flagged) flagged.push_back(to_json(b));
  for (const auto& b : s.top) top.push_back(to_json(b));
  for (const auto& [e, u] : s.frontier) frontier.push_back({json_number(e), json_number(u)});
  return {{"verdict", verdict(s.verdict)}, {"deciding", s.deciding}, {"fail_buckets", s.fail_buckets},
          {"warn_buckets", s.warn_buckets}, {"attributed_buckets", s.attributed_buckets},
          {"max_abs_z", json_number(s.max_abs_z)},
          {"max_ulp_effect", json_number(s.max_ulp_effect)}, {"flagged", flagged}, {"top", top},
          {"frontier", frontier},
          {"equivalence", {{"equivalent", s.equivalent}, {"bound_ulp", json_number(s.equivalence_bound_ulp)},
                           {"widest_ulp", json_number(s.widest_ulp)}, {"widest_bucket", s.widest_bucket},
                           {"equivalent_buckets", s.equivalent_buckets}, {"lattice_buckets", s.lattice_buckets},
                           {"replicates_needed", s.equivalent ? nlohmann::json(nullptr) : nlohmann::json(s.replicates_needed)}}},
          {"floor_visibility", {{"typical_half_width_ulp", json_number(s.typical_half_width_ulp)},
                                {"blind", s.blind_at_floor},
                                {"replicates_to_see", s.blind_at_floor ? nlohmann::json(s.replicates_to_see_floor) : nlohmann::json(nullptr)}}}};
}

nlohmann::json expectation_json(const contract::Expectation& e) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [gate, verdicts] : e.gates) {
    nlohmann::json list = nlohmann::json::array();
    for (auto v : verdicts) list.push_back(verdict(v));
    j[gate] = list;
  }
  if (!e.gradients.empty()) {
    nlohmann::json per = nlohmann::json::object();
    for (const auto& [name, gates] : e.gradients) {
      per[name] = nlohmann::json::object();
      for (const auto& [gate, verdicts] : gates) {
        nlohmann::json list = nlohmann::json::array();
        for (auto v : verdicts) list.push_back(verdict(v));
        per[name][gate] = list;
      }
    }
    j["gradients"] = per;
  }
  if (!e.note.empty()) j["note"] = e.note;
  if (!e.condition.empty()) j["condition"] = e.condition;
  return j;
}

}  // namespace

nlohmann::json to_json(const engine::CaseResult& r) {
  const auto& tc = r.testcase;
  nlohmann::json j;
  j["id"] = tc.id;
  j["kind"] = std::string(contract::to_string(tc.kind));
  j["family"] = tc.family;
  j["source"] = tc.source;
  // The text that ran, so the report (and anyone reading the database) shows it without
  // reopening `source`, a path on the machine that ran the case.
  j["case_text"] = tc.text;
  j["profile"] = tc.profile;
  j["verdict"] = !r.error.empty() ? "ERROR" : !r.skipped.empty() ? "SKIP" : verdict(r.verdict);
  j["replicates"] = r.replicates;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.skipped.empty()) j["skipped"] = r.skipped;
  j["mechanism"] = tc.mechanism;
  j["references"] = tc.references;
  j["reference"] = {{"variant", tc.reference.variant}, {"version", tc.reference.version}, {"params", to_json(tc.reference.params)}};
  j["production"] = {{"variant", tc.production.variant}, {"version", tc.production.version}, {"params", to_json(tc.production.params)}};

  const auto& a = r.algebra;
  nlohmann::json gates;
  gates["algebra"] = {{"verdict", verdict(a.verdict)}, {"replicates", a.replicates}, {"tolerance", a.tolerance},
                      {"worst_discrepancy", json_number(a.worst_discrepancy)}, {"worst", to_json(a.worst)},
                      {"reason", a.reason}, {"applicable", a.applicable}};
  const auto& b = r.bias;
  nlohmann::json deciding = nlohmann::json::array();
  for (auto s : tc.gates.bias_deciding) deciding.push_back(std::string(stats::to_string(s)));
  gates["bias"] = {{"verdict", verdict(b.verdict)}, {"axis", b.axis}, {"buckets", b.buckets},
                   {"replicates", b.replicates},
                   {"thresholds", {{"z_star", b.thresholds.z_star}, {"z_cut", json_number(b.z_cut)}, {"s_min", b.thresholds.s_min}, {"c", b.thresholds.c}, {"c_magnitude", b.thresholds.c_magnitude}}},
                   {"deciding", deciding}, {"union_bound", json_number(b.union_bound)},
                   {"attribution", b.attribution}, {"equivalent", b.equivalent},
                   {"rho_min", json_number(b.horizon.rho_min)}, {"T_cert", json_number(b.horizon.t_cert)},
                   {"reason", b.reason}, {"signed", to_json(b.signed_statistic)},
                   {"magnitude", to_json(b.magnitude_statistic)}};
  const auto& v = r.variance;
  gates["variance"] = {{"verdict", verdict(v.verdict)}, {"U", json_number(v.tail.U)}, {"reason", v.reason},
                       {"looks", v.looks}, {"stop", std::string(stats::to_string(v.stop))},
                       {"unstable", v.unstable}, {"tail", to_json(v.tail)}};
  gates["variance"]["evidence"] = to_json(v.evidence);
  if (v.selection) {
    const auto& t = *v.selection;
    gates["variance"]["selection"] = {{"decisions", t.counts.decisions},
                                      {"near_ties", t.counts.near_ties},
                                      {"flips_prod", t.counts.flips_prod},
                                      {"flips_ref", t.counts.flips_ref},
                                      {"flips_prod_only", t.counts.flips_prod_only},
                                      {"flips_ref_only", t.counts.flips_ref_only},
                                      {"ratio", json_number(t.ratio)},
                                      {"p_value", json_number(t.p_value)},
                                      {"p_cut", json_number(t.p_cut)},
                                      {"verdict", verdict(t.verdict)}};
  } else {
    gates["variance"]["selection"] = nullptr;
  }
  // A case the harness could not finish has no gate verdicts: say ERROR, not the defaults.
  if (!r.error.empty()) {
    for (const char* g : {"algebra", "bias", "variance"}) gates[g]["verdict"] = "ERROR";
  }
  // Nor has a skipped case, which never ran (a kernel this LibTorch lacks).
  if (!r.skipped.empty()) {
    for (const char* g : {"algebra", "bias", "variance"}) gates[g]["verdict"] = "SKIP";
  }
  j["gates"] = gates;
  if (r.nonfinite) {
    j["nonfinite"] = {{"side", r.nonfinite->side}, {"value", r.nonfinite->value}, {"where", to_json(r.nonfinite->where)}};
  } else {
    j["nonfinite"] = nullptr;
  }
  j["baselines"] = {{"assert_close", described_json(r.baselines.assert_close)},
                    {"flash_attention", described_json(r.baselines.flash_attention)},
                    {"dynamo_fp64", described_json(r.baselines.dynamo_fp64)}};
  j["expected"] = expectation_json(tc.expected);
  j["unexpected"] = r.unexpected;
  // A swept case: every probe setting's verdicts and which setting decided each gate; the
  // gate results above are those of the deciding settings, `probe` below is the contract's.
  if (!r.sweep.empty()) {
    nlohmann::json settings = nlohmann::json::array();
    for (const auto& pt : r.sweep) {
      settings.push_back({{"name", pt.name}, {"probe", pt.probe_text}, {"verdict", verdict(pt.verdict)},
                          {"algebra", verdict(pt.algebra)}, {"bias", verdict(pt.bias)}, {"variance", verdict(pt.variance)},
                          {"U", json_number(pt.U)}, {"max_abs_z", json_number(pt.max_abs_z)},
                          {"max_ulp_effect", json_number(pt.max_ulp_effect)}, {"replicates", pt.replicates},
                          {"bias_reason", pt.bias_reason}, {"variance_reason", pt.variance_reason}});
      // Only where false, so the documents of exact productions keep their bits.
      if (!pt.algebra_applicable) settings.back()["algebra_applicable"] = false;
    }
    j["sweep"] = {{"settings", settings}, {"decided_by", r.decided_by}};
  } else {
    j["sweep"] = nullptr;
  }
  // What the case certifies (issue 31). A backward case: the dy probe, every gradient's
  // outcome and which gradient decided each gate; the gate results above are the deciding
  // gradients'.
  j["direction"] = std::string(contract::to_string(tc.direction));
  // A `direction: both` file's two results name the file's id: the case PASSes only when both do.
  if (tc.both_directions) j["case"] = {{"id", tc.case_id}, {"directions", {"forward", "backward"}}};
  if (tc.direction == contract::Direction::backward) {
    nlohmann::json grads = nlohmann::json::array();
    for (const auto& g : r.gradients) {
      grads.push_back({{"name", g.name}, {"input", g.input}, {"verdict", verdict(g.verdict)},
                       {"algebra", verdict(g.algebra)}, {"bias", verdict(g.bias)}, {"variance", verdict(g.variance)},
                       {"bucket_axis", g.bucket_axis}, {"reduces", g.reduces}, {"reduction_size", g.reduction_size},
                       {"shape", g.shape}, {"dtype", std::string(stats::traits(g.output_format).name)},
                       {"U", json_number(g.U)}, {"max_abs_z", json_number(g.max_abs_z)},
                       {"max_ulp_effect", json_number(g.max_ulp_effect)}, {"replicates", g.replicates},
                       {"algebra_discrepancy", json_number(g.algebra_discrepancy)},
                       {"own_forward_discrepancy", g.own_forward_discrepancy < 0 ? nlohmann::json(nullptr)
                                                                                 : json_number(g.own_forward_discrepancy)},
                       {"algebra_reason", g.algebra_reason}, {"bias_reason", g.bias_reason},
                       {"variance_reason", g.variance_reason}});
      if (!g.algebra_applicable) grads.back()["algebra_applicable"] = false;
    }
    const auto& bw = tc.backward;
    nlohmann::json dy = {{"kind", std::string(contract::to_string(bw.dy_law))}, {"shift", json_number(bw.dy_shift)}, {"scale", json_number(bw.dy_scale)}};
    // Written only where used, so the documents of cases without them keep their bits.
    if (contract::dy_law_info(bw.dy_law).has_margin) dy["margin"] = json_number(bw.dy_margin);
    if (bw.dy_zero_rows > 0) dy["zero_rows"] = bw.dy_zero_rows;
    if (bw.dy_huge_row != 1.0) dy["huge_row"] = json_number(bw.dy_huge_row);
    j["backward"] = {{"dy", dy},
                     {"gradients", grads},
                     {"decided_by", r.gradient_decided_by}};
  } else {
    j["backward"] = nullptr;
  }
  const auto& p = tc.probe;
  j["probe"] = {{"dtype", std::string(stats::traits(p.dtype).name)}, {"seed", p.seed}, {"shift", json_number(p.shift)},
                {"scale", json_number(p.scale)},
                {"outliers", {{"count", p.outlier_count}, {"magnitude", json_number(p.outlier_magnitude)}}},
                {"row_offsets", json_number(p.row_offset_sd)}, {"params", to_json(p.params)}};
  j["settings"] = {{"replicates", tc.gates.replicates}, {"max_replicates", tc.gates.max_replicates},
                   {"algebra_replicates", tc.gates.algebra_replicates}};
  j["output_shape"] = r.output_shape;
  j["calibration"] = tc.calibration.empty() ? nlohmann::json(nullptr) : nlohmann::json(tc.calibration);
  j["output_dtype"] = std::string(stats::traits(r.output_format).name);
  if (tc.attestation) {
    j["attestation"] = {{"path", tc.attestation->path}, {"theorem", tc.attestation->theorem}, {"status", tc.attestation->status}};
  }
  j["provenance"] = {{"torch_version", r.torch_version}, {"device", r.runtime.device},
                     {"input_stream", stats::kRandomStreamName}};
  // The GPU math modes in ATen's context while the case ran (docs/gpu.md); on a CPU run
  // they are recorded too, and change nothing there.
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& [name, value] : numerics::math_mode_fields(r.math_modes))
    if (value) modes[name] = *value;
  j["provenance"]["math_modes"] = modes;
  j["runtime"] = {{"threads", r.runtime.threads}, {"batch", r.runtime.batch}, {"seconds", r.runtime.seconds},
                  {"kernel_seconds", r.runtime.kernel_seconds}, {"draw_seconds", r.runtime.draw_seconds},
                  {"observe_seconds", r.runtime.observe_seconds}, {"stats_seconds", r.runtime.stats_seconds}};
  // Each gradient's wall time is runtime, not outcome: the rest of the document is the same
  // bits at any --threads and --batch (without_runtime).
  if (tc.direction == contract::Direction::backward) {
    nlohmann::json per_gradient = nlohmann::json::object();
    for (const auto& g : r.gradients) per_gradient[g.name] = g.seconds;
    j["runtime"]["gradient_seconds"] = per_gradient;
  }
  if (!r.sweep.empty()) {
    nlohmann::json per_setting = nlohmann::json::object();
    for (const auto& pt : r.sweep) per_setting[pt.name] = pt.seconds;
    j["runtime"]["setting_seconds"] = per_setting;
  }
  const auto& policy = numerics::process_policy();
  j["runtime"]["policy"] = {{"threads_source", policy.threads_source}, {"omp_wait_policy", policy.omp_wait_policy},
                            {"openblas_threads", policy.openblas_threads}, {"openblas_core", policy.openblas_core}};
  return j;
}

nlohmann::json results_document(const std::vector<engine::CaseResult>& results, const std::string& kcert_version) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : results) list.push_back(to_json(r));
  return {{"format", "kcert-results/1"}, {"kcert_version", kcert_version}, {"results", list}};
}

nlohmann::json without_runtime(nlohmann::json document) {
  for (auto& r : document["results"]) r.erase("runtime");
  return document;
}

namespace {
// "-", /dev/stdout, a FIFO: written in place. The temporary-and-rename below would replace
// the device node itself (as root, /dev/stdout became a regular file holding a results
// document).
bool is_stream_target(const std::string& path) {
  if (path == "-" || path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0) return true;
  // lstat: a link at PATH is replaced by the rename, never written through (a link to a
  // device or FIFO planted by another user would otherwise be opened and written).
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode);
}

void write_all(int fd, const std::string& content, const std::function<void(const std::string&)>& fail) {
  for (std::size_t done = 0; done < content.size();) {
    const auto n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("write failed after " + std::to_string(done) + " of " + std::to_string(content.size()) + " bytes");
    }
    done += static_cast<std::size_t>(n);
  }
}
}  // namespace

void write_text_file(const std::string& path, const std::string& content) {
  if (is_stream_target(path)) {
    const auto fail = [&](const std::string& what) { throw WriteError(path + ": " + what + ": " + std::strerror(errno)); };
    const int fd = path == "-" ? ::dup(STDOUT_FILENO) : ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open");
    write_all(fd, content, fail);
    if (::close(fd) != 0) fail("cannot close");
    return;
  }
  // Checked at every step: an ofstream reports a full disk only when its buffer is flushed
  // at close, which nobody checks (a tail CSV kept 4096 of 13,423 bytes and the nightly
  // exited 0). Written to a temporary and renamed, so a failure leaves the old file or none.
  // mkostemp creates the temporary with O_EXCL under a fresh name: a link planted at a
  // predictable PATH.tmp is never opened (O_EXCL does not follow a final link).
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw WriteError(path + ": cannot create a temporary beside it: " + std::strerror(errno));
  const auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());  // ours: created by mkostemp above
    throw WriteError(path + ": " + what + ": " + reason);
  };
  // mkostemp makes it 0600; kcert's files are as readable as the umask lets them be, as they
  // were with open(0644). The umask can only be read by setting it: done once, on the first
  // write (before any thread of a run creates files).
  static const mode_t mask = [] {
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  if (::fchmod(fd, 0644 & ~mask) != 0) {
    ::close(fd);
    fail("cannot set the mode of " + tmp);
  }
  write_all(fd, content, fail);
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("cannot sync");
  }
  if (::close(fd) != 0) fail("cannot close");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp);
}

std::string safe_file_name(const std::string& id) {
  std::string s;
  for (char c : id) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (!s.empty() && s[0] == '.') s[0] = '_';  // no hidden files, no "." or ".."
  // "index" (any case) is the report's own page: a control with that id overwrote it, and on a
  // case-insensitive file system "Index" would too.
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.empty() || s != id || s.size() > 100 || lower == "index") s = s.substr(0, 100) + "-" + sha256_hex(id).substr(0, 12);
  return s;
}

namespace {
// Every folder above DIR must be root's or this user's, and writable by nobody else unless
// sticky (issue 53). The owner of a parent, or anyone who may write to it, can rename DIR
// away after kcert's checks and put a folder of their own (or links) in its place; every
// later write by path then lands where they chose (run as root: a .dat file truncated a
// root-only file, a swapped gnuplot script ran as root). The lexical path and the one links
// resolve to are both checked: a link's own folder is the parent before it.
void check_parents(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path lexical = fs::absolute(dir, ec).lexically_normal();
  if (ec) throw WriteError(dir + ": cannot resolve the folder: " + ec.message());
  std::vector<fs::path> parents;
  for (const fs::path& start : {lexical, fs::weakly_canonical(lexical, ec)}) {
    fs::path p = start;
    while (p.has_relative_path() && p.filename().empty()) p = p.parent_path();  // a trailing '/'
    for (p = p.parent_path(); !p.empty(); p = p.parent_path()) {
      parents.push_back(p);
      if (p == p.root_path()) break;
    }
  }
  const uid_t me = ::geteuid();
  for (const auto& p : parents) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;  // not there yet: create_directories makes it, as ours
    if (S_ISLNK(st.st_mode)) continue;           // its own folder is checked as the next parent
    if (st.st_uid != 0 && st.st_uid != me) {
      throw WriteError(dir + ": its parent folder " + p.string() + " is owned by uid " + std::to_string(st.st_uid) +
                       ", neither root nor this user (uid " + std::to_string(me) +
                       "): its owner could replace the folder with their own after kcert checks it; "
                       "use a folder whose every parent is yours or root's");
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw WriteError(dir + ": its parent folder " + p.string() + " is writable by " +
                       ((st.st_mode & S_IWOTH) ? "every user" : "its group") + " (mode " + mode +
                       ") without the sticky bit: anyone who may write there could replace the folder after kcert "
                       "checks it; chmod go-w it or use another folder");
    }
  }
}
}  // namespace

void make_private_directories(const std::string& dir) {
  check_parents(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw WriteError(dir + ": cannot create folder: " + ec.message());
  // The folder itself, not what a trailing '/' would resolve it to.
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  struct stat st {};
  if (::lstat(name.c_str(), &st) != 0) throw WriteError(dir + ": cannot inspect folder: " + std::strerror(errno));
  if (S_ISLNK(st.st_mode))
    throw WriteError(dir + ": is a symbolic link; kcert writes its files only into a real folder (name the folder itself)");
  if (!S_ISDIR(st.st_mode)) throw WriteError(dir + ": is not a folder");
  if (st.st_uid != ::geteuid())
    throw WriteError(dir + ": owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                     std::to_string(::geteuid()) + "): its owner could replace kcert's files with links; use a folder of your own");
  // A sticky folder (/tmp) is allowed: others may add names there but not replace kcert's,
  // and kcert creates its files there only with O_EXCL or O_NOFOLLOW (a name taken by a
  // link is an error, not a write through it).
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    throw WriteError(dir + ": writable by every user: anyone could replace kcert's files with links; chmod o-w it or use another folder");
}

void write_json_file(const std::string& path, const nlohmann::json& document) {
  // Invalid UTF-8 (refused at load; a plugin's message may still carry some) becomes U+FFFD
  // instead of an exception after the case has run.
  write_text_file(path, document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

bool json_nested_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace kcert::store
