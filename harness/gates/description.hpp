#pragma once
// One description of a result's parts (issue 51, item 3): a struct's fields with the names a
// result document gives them, in the order the result wire sends them. The wire
// (engine/result_wire.cpp) visits the values in this order; the JSON writer and the typed JSON
// reader (store/described_json.hpp) visit them by name. A field added to a described struct
// costs the struct and one line here (and its line in docs/results.md): the wire, the document
// and the reader follow. Structs whose document is shaped otherwise (a field renamed, written
// only sometimes, derived) keep their own writers until they are described too.
#include <cstddef>
#include <type_traits>
#include <utility>

#include "harness/gates/results.hpp"
#include "harness/stats/gpd.hpp"
#include "harness/stats/tail.hpp"

namespace kcert::gates {

// A field as a description hands it to its visitor: the document's name and the member.
template <class T>
struct Named {
  const char* name;
  T& value;
};
template <class T>
constexpr Named<T> named(const char* name, T& value) {
  return {name, value};
}

// describe(visitor, value) calls visitor(named(...), ...) once with every field, in wire order.
template <class V>
constexpr void describe(V& v, stats::GpdFit& f) {
  v(named("xi", f.xi), named("sigma", f.sigma), named("log_likelihood", f.log_likelihood),
    named("at_lower_bound", f.at_lower_bound), named("at_upper_bound", f.at_upper_bound), named("n", f.n));
}
template <class V>
constexpr void describe(V& v, stats::ThinTailBound& b) {
  v(named("u", b.u), named("exceedances", b.exceedances), named("mean_excess", b.mean_excess),
    named("sigma_upper", b.sigma_upper), named("zeta_upper", b.zeta_upper), named("U", b.U),
    named("supported_horizon", b.supported_horizon), named("unseen_event_horizon", b.unseen_event_horizon));
}
template <class V>
constexpr void describe(V& v, stats::EndpointEvidence& e) {
  v(named("top", e.top), named("ratio", e.ratio), named("cut", e.cut), named("level", e.level));
}
template <class V>
constexpr void describe(V& v, VarianceEvidence& e) {
  v(named("replicates", e.replicates), named("events", e.events), named("exceedances", e.exceedances),
    named("horizon", e.horizon), named("reaches_horizon", e.reaches_horizon),
    named("unseen_event_horizon", e.unseen_event_horizon));
}
template <class V>
constexpr void describe(V& v, BucketReport::SideBias& s) {
  v(named("mean", s.mean), named("z", s.z), named("ulp_effect", s.ulp_effect), named("verdict", s.verdict));
}
template <class V>
constexpr void describe(V& v, BaselineCheck& b) {
  v(named("flagged", b.flagged), named("fraction", b.fraction), named("first_value", b.first_value),
    named("replicates", b.replicates));
}

// Whether T has a description.
namespace detail {
struct AnyVisitor {
  template <class... F>
  void operator()(F&&...) {}
};
}  // namespace detail
template <class T, class = void>
struct is_described : std::false_type {};
template <class T>
struct is_described<T, std::void_t<decltype(describe(std::declval<detail::AnyVisitor&>(), std::declval<T&>()))>>
    : std::true_type {};
template <class T>
inline constexpr bool is_described_v = is_described<T>::value;

// Every member described: a field added to a described struct and not to its description
// breaks the build (the struct's member count against its description's).
namespace detail {
struct AnyMember {
  template <class T>
  operator T() const;  // only in unevaluated contexts: converts to any member's type
};
template <class T, class... A>
constexpr std::size_t member_count() {
  if constexpr (requires { T{std::declval<A>()..., AnyMember{}}; }) return member_count<T, A..., AnyMember>();
  else return sizeof...(A);
}
struct CountVisitor {
  std::size_t n = 0;
  template <class... F>
  constexpr void operator()(F&&...) {
    n = sizeof...(F);
  }
};
template <class T>
constexpr std::size_t described_count() {
  CountVisitor v;
  T value{};
  describe(v, value);
  return v.n;
}
}  // namespace detail
template <class T>
inline constexpr bool fully_described_v = detail::described_count<T>() == detail::member_count<T>();

static_assert(fully_described_v<stats::GpdFit>, "stats::GpdFit: a member is not in its description");
static_assert(fully_described_v<stats::ThinTailBound>, "stats::ThinTailBound: a member is not in its description");
static_assert(fully_described_v<stats::EndpointEvidence>, "stats::EndpointEvidence: a member is not in its description");
static_assert(fully_described_v<VarianceEvidence>, "gates::VarianceEvidence: a member is not in its description");
static_assert(fully_described_v<BucketReport::SideBias>, "BucketReport::SideBias: a member is not in its description");
static_assert(fully_described_v<BaselineCheck>, "gates::BaselineCheck: a member is not in its description");

}  // namespace kcert::gates
