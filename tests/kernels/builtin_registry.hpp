#pragma once
// What the kernel and engine tests share: kcert's built-in families, registered once, and a
// variant's declared parameter defaults.
#include "harness/kernels/registry.hpp"

namespace kcert::test {

inline const kernels::Registry& builtin_registry() {
  static const auto r = [] {
    kernels::Registry reg;
    kernels::register_builtin_families(reg);
    return reg;
  }();
  return r;
}

inline kernels::ParamMap default_params(const kernels::Variant& v) {
  kernels::ParamMap params;
  for (const auto& spec : v.schema.params)
    if (spec.default_value) params.set(spec.name, *spec.default_value);
  return params;
}

}  // namespace kcert::test
