#include "harness/engine/result_wire.hpp"

#include "harness/gates/description.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace kcert::engine {

namespace {

constexpr std::uint32_t kMagic = 0x6b637277;  // "kcrw"

// Writer and Reader share one interface: a(x, y, ...) visits each field in order.
class Writer {
 public:
  template <class... T>
  void operator()(T&&... fields) {
    (item(fields), ...);
  }
  std::string out;

 private:
  template <class T>
  void item(T& v);
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class... T>
  void operator()(T&&... fields) {
    (item(fields), ...);
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  template <class T>
  void item(T& v);
  void take(void* dst, std::size_t n) {
    if (in_.size() - pos_ < n) throw std::runtime_error("truncated result (" + std::to_string(in_.size()) + " bytes)");
    std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  std::uint64_t count(std::size_t min_element_bytes) {
    std::uint64_t n = 0;
    take(&n, sizeof n);
    if (min_element_bytes && n > (in_.size() - pos_) / min_element_bytes) throw std::runtime_error("malformed result: a length runs past the end");
    return n;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
};

// The field lists. Every struct a CaseResult holds (its test case aside) has one: here, or its
// description (gates/description.hpp), which the result document's writer and reader share.
template <class A> void fields(A& a, gates::Location& l) { a(l.replicate, l.element, l.index, l.bucket); }
template <class A> void fields(A& a, gates::NonFinite& n) { a(n.side, n.value, n.where); }
template <class A> void fields(A& a, gates::AlgebraResult& r) {
  a(r.verdict, r.replicates, r.tolerance, r.worst_discrepancy, r.worst, r.reason, r.applicable);
}
template <class A> void fields(A& a, gates::BucketReport& b) {
  a(b.bucket, b.direction, b.z, b.effect, b.ulp_effect, b.mean, b.sd, b.scale, b.ulp, b.verdict, b.has_sides, b.ref_error,
    b.prod_error, b.attributed);
}
template <class A> void fields(A& a, gates::BiasStatisticResult& s) {
  a(s.statistic, s.deciding, s.verdict, s.fail_buckets, s.warn_buckets, s.attributed_buckets, s.max_abs_z, s.max_ulp_effect,
    s.flagged, s.top, s.frontier, s.equivalent, s.equivalence_bound_ulp, s.widest_ulp, s.widest_bucket, s.equivalent_buckets,
    s.lattice_buckets, s.replicates_needed, s.typical_half_width_ulp, s.blind_at_floor, s.replicates_to_see_floor);
}
template <class A> void fields(A& a, stats::BiasThresholds& t) { a(t.z_star, t.s_min, t.c, t.c_magnitude); }
template <class A> void fields(A& a, stats::CertifiedHorizon& h) { a(h.rho_min, h.t_cert); }
template <class A> void fields(A& a, gates::BiasResult& b) {
  a(b.verdict, b.axis, b.buckets, b.replicates, b.thresholds, b.z_cut, b.union_bound, b.horizon, b.signed_statistic,
    b.magnitude_statistic, b.attribution, b.equivalent, b.reason);
}
template <class A> void fields(A& a, stats::VarianceSettings& s) {
  a(s.tail_q, s.horizon, s.warn_k, s.fail_k, s.bootstrap, s.seed, s.bootstrap_kind, s.min_exceedances, s.min_replicates, s.level,
    s.profile_level, s.selection_z, s.heavy_tail_level, s.heavy_tail_xi_max);
}
template <class A> void fields(A& a, stats::KhatSummary& k) {
  a(k.count, k.zeros, k.infinite, k.zero_fraction, k.q50, k.q90, k.q99, k.max);
}
template <class A> void fields(A& a, stats::HeavyTailCheck& h) {
  a(h.tested, h.xi_free, h.lr, h.cut, h.rejected, h.U_clipped, h.U_unclipped, h.model_matters, h.bounded_q, h.bounded_xi,
    h.bounded_lr, h.bounded_cut, h.endpoint, h.tied_at_maximum, h.atom);
}
template <class A> void fields(A& a, stats::TailAnalysis& t) {
  a(t.settings, t.khat, t.mode, t.u, t.n_exc, t.zeta, t.free_fit, t.clipped_fit, t.r_t, t.lower, t.se, t.bootstrap_used, t.U,
    t.thin, t.boundary_fit, t.tail_q, t.heavy, t.verdict, t.reason);
}
template <class A> void fields(A& a, stats::SelectionCounts& c) {
  a(c.decisions, c.near_ties, c.flips_prod, c.flips_ref, c.flips_prod_only, c.flips_ref_only);
}
template <class A> void fields(A& a, stats::SelectionTest& t) {
  a(t.counts, t.p_value, t.p_cut, t.ratio, t.significant, t.verdict, t.reason);
}
template <class A> void fields(A& a, gates::VarianceResult& v) {
  a(v.verdict, v.tail, v.looks, v.stop, v.unstable, v.evidence, v.selection, v.reason, v.khat);
}
template <class A> void fields(A& a, gates::Baselines& b) { a(b.assert_close, b.flash_attention, b.dynamo_fp64); }
template <class A> void fields(A& a, numerics::MathModes& m) {
  a(m.tf32_matmul, m.tf32_cudnn, m.bf16_reduced_precision_reduction, m.fp16_reduced_precision_reduction,
    m.deterministic_algorithms, m.cudnn_benchmark);
}
template <class A> void fields(A& a, Runtime& r) {
  a(r.device, r.threads, r.batch, r.seconds, r.kernel_seconds, r.draw_seconds, r.observe_seconds, r.stats_seconds);
}
template <class A> void fields(A& a, SweepPoint& p) {
  a(p.name, p.probe_text, p.verdict, p.algebra, p.bias, p.variance, p.U, p.max_abs_z, p.max_ulp_effect, p.replicates,
    p.seconds, p.bias_reason, p.variance_reason, p.algebra_applicable);
}
template <class A> void fields(A& a, GradientPoint& p) {
  fields(a, static_cast<SweepPoint&>(p));
  a(p.input, p.bucket_axis, p.reduces, p.reduction_size, p.shape, p.algebra_discrepancy, p.algebra_reason,
    p.own_forward_discrepancy, p.output_format);
}
template <class A> void outcome_fields(A& a, CaseResult& r) {
  a(r.verdict, r.algebra, r.bias, r.variance, r.replicates, r.nonfinite, r.baselines, r.torch_version, r.math_modes,
    r.output_shape, r.output_format, r.runtime, r.unexpected, r.error, r.skipped, r.sweep, r.decided_by, r.gradients,
    r.gradient_decided_by);
}

// The largest value of each enum a result holds: a value past it is refused, not cast.
template <class E> constexpr int enum_max();
template <> constexpr int enum_max<stats::Verdict>() { return 3; }
template <> constexpr int enum_max<stats::FloatFormat>() { return 3; }
template <> constexpr int enum_max<stats::BiasStatistic>() { return 1; }
template <> constexpr int enum_max<stats::BootstrapKind>() { return 1; }
template <> constexpr int enum_max<stats::TailMode>() { return 3; }
template <> constexpr int enum_max<stats::StopReason>() { return 5; }

template <class T> struct is_vector : std::false_type {};
template <class T> struct is_vector<std::vector<T>> : std::true_type {};
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_pair : std::false_type {};
template <class A, class B> struct is_pair<std::pair<A, B>> : std::true_type {};
template <class T> struct is_map : std::false_type {};
template <class K, class V> struct is_map<std::map<K, V>> : std::true_type {};
template <class T> struct is_named : std::false_type {};
template <class T> struct is_named<gates::Named<T>> : std::true_type {};

template <class T>
void Writer::item(T& v) {
  if constexpr (is_named<T>::value) {
    item(v.value);  // the wire sends values in description order; names are the document's
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    std::uint64_t n = v.size();
    item(n);
    out.append(v);
  } else if constexpr (is_vector<T>::value || is_map<T>::value) {
    std::uint64_t n = v.size();
    item(n);
    for (auto& e : v) {
      if constexpr (is_map<T>::value) {
        auto key = e.first;
        item(key);
        item(e.second);
      } else {
        item(e);
      }
    }
  } else if constexpr (is_optional<T>::value) {
    bool has = v.has_value();
    item(has);
    if (has) item(*v);
  } else if constexpr (is_pair<T>::value) {
    item(v.first);
    item(v.second);
  } else if constexpr (gates::is_described_v<T>) {
    gates::describe(*this, v);
  } else {
    fields(*this, v);
  }
}

template <class T>
void Reader::item(T& v) {
  if constexpr (is_named<T>::value) {
    item(v.value);
  } else if constexpr (std::is_same_v<T, bool>) {
    unsigned char b = 0;
    take(&b, 1);
    if (b > 1) throw std::runtime_error("malformed result: a flag is neither 0 nor 1");
    v = b != 0;
  } else if constexpr (std::is_enum_v<T>) {
    std::underlying_type_t<T> raw{};
    take(&raw, sizeof raw);
    if (raw < 0 || raw > enum_max<T>()) throw std::runtime_error("malformed result: an enum value out of range");
    v = static_cast<T>(raw);
  } else if constexpr (std::is_arithmetic_v<T>) {
    take(&v, sizeof v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    const auto n = count(1);
    v.assign(in_.data() + pos_, n);
    pos_ += n;
  } else if constexpr (is_vector<T>::value) {
    // Grown as elements arrive, not sized from the count: a count is what the child sent, and
    // resize(n) of a struct vector allocated (and zeroed) n times its size before the first
    // element was read (a 12 MB message cost 4.5 GB: issue 53, item 9). Every element takes at
    // least a byte of the message, so memory stays proportional to it.
    const auto n = count(1);
    v.clear();
    v.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1024)));
    for (std::uint64_t i = 0; i < n; ++i) {
      typename T::value_type e{};
      item(e);
      v.push_back(std::move(e));
    }
  } else if constexpr (is_map<T>::value) {
    const auto n = count(2);
    v.clear();
    for (std::uint64_t i = 0; i < n; ++i) {
      typename T::key_type key{};
      typename T::mapped_type value{};
      item(key);
      item(value);
      v.emplace(std::move(key), std::move(value));
    }
  } else if constexpr (is_optional<T>::value) {
    bool has = false;
    item(has);
    if (has) {
      typename T::value_type value{};
      item(value);
      v = std::move(value);
    } else {
      v.reset();
    }
  } else if constexpr (is_pair<T>::value) {
    item(v.first);
    item(v.second);
  } else if constexpr (gates::is_described_v<T>) {
    gates::describe(*this, v);
  } else {
    fields(*this, v);
  }
}

}  // namespace

std::string encode_outcome(const CaseResult& result) {
  Writer w;
  auto magic = kMagic;
  w(magic);
  // The writer reads only; the field lists take non-const references to serve the reader too.
  outcome_fields(w, const_cast<CaseResult&>(result));
  return std::move(w.out);
}

void decode_outcome(std::string_view bytes, CaseResult& result) {
  Reader r(bytes);
  std::uint32_t magic = 0;
  r(magic);
  if (magic != kMagic) throw std::runtime_error("malformed result: not a kcert case result");
  outcome_fields(r, result);
  if (!r.at_end()) throw std::runtime_error("malformed result: bytes after its end");
}

}  // namespace kcert::engine
