#include "harness/kernels/registry.hpp"

#include <stdexcept>

namespace kcert::kernels {

namespace {
std::string join_keys(const auto& map) {
  std::string out;
  for (const auto& [k, v] : map) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "(none)" : out;
}
}  // namespace

const torch::Tensor& KernelInputs::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw std::out_of_range("kernel input '" + name + "' is missing (have: " + join_keys(tensors_) + ")");
  }
  return it->second;
}

FamilySchema Family::schema() const {
  FamilySchema s;
  s.name = name;
  s.description = description;
  s.bucket_axes = bucket_axes;
  s.probe_params = probe_params;
  s.validate_probe = validate_probe;
  for (const auto& g : gradients) s.gradients.push_back(g.schema);
  for (const auto& [n, v] : variants) s.variants[n] = v.schema;
  return s;
}

void Registry::add_family(Family family) {
  if (families_.count(family.name)) {
    throw std::invalid_argument("family '" + family.name + "' is already registered");
  }
  const std::string name = family.name;
  families_.emplace(name, std::move(family));
}

void Registry::add_variant(const std::string& family_name, Variant variant) {
  auto it = families_.find(family_name);
  if (it == families_.end()) {
    throw std::out_of_range("no family '" + family_name + "' to add variant '" + variant.schema.name +
                            "' to (families: " + join_keys(families_) + ")");
  }
  if (it->second.variants.count(variant.schema.name)) {
    throw std::invalid_argument("variant '" + variant.schema.name + "' of family '" + family_name +
                                "' is already registered");
  }
  const std::string name = variant.schema.name;
  it->second.variants.emplace(name, std::move(variant));
}

const Family& Registry::family(const std::string& name) const {
  const auto* f = find_family(name);
  if (!f) throw std::out_of_range("no family '" + name + "' (families: " + join_keys(families_) + ")");
  return *f;
}

const Family* Registry::find_family(const std::string& name) const {
  const auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

const Variant& Registry::variant(const std::string& family_name, const std::string& name) const {
  const auto& f = family(family_name);
  const auto it = f.variants.find(name);
  if (it == f.variants.end()) {
    throw std::out_of_range("family '" + family_name + "' has no variant '" + name +
                            "' (variants: " + join_keys(f.variants) + ")");
  }
  return it->second;
}

std::vector<std::string> Registry::family_names() const {
  std::vector<std::string> names;
  for (const auto& [n, f] : families_) names.push_back(n);
  return names;
}

std::set<std::pair<std::string, std::string>> Registry::variant_keys() const {
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& [f, fam] : families_) {
    for (const auto& [v, var] : fam.variants) keys.emplace(f, v);
  }
  return keys;
}

void Registry::stamp_origin(const std::string& family, const std::string& variant, const std::string& version,
                            const std::string& origin) {
  auto& v = families_.at(family).variants.at(variant);
  v.schema.version = version;
  v.schema.origin = origin;
}

#define KCERT_FAMILY(name) void register_##name##_family(Registry& registry);
#include "harness/kernels/families.def"
#undef KCERT_FAMILY

void register_builtin_families(Registry& registry) {
#define KCERT_FAMILY(name) register_##name##_family(registry);
#include "harness/kernels/families.def"
#undef KCERT_FAMILY
}

}  // namespace kcert::kernels

#include "harness/kernels/builtin_schemas.hpp"

namespace kcert::kernels {

std::map<std::string, FamilySchema> builtin_family_schemas() {
  Registry registry;
  register_builtin_families(registry);
  std::map<std::string, FamilySchema> out;
  for (const auto& name : registry.family_names()) out.emplace(name, registry.family(name).schema());
  return out;
}

}  // namespace kcert::kernels
