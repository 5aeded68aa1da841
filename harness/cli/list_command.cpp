#include "harness/cli/list_command.hpp"
#include "harness/text/escape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "harness/cli/exit_codes.hpp"
#include "harness/contract/dy_law.hpp"
#include "harness/cli/suggest.hpp"
#include "harness/store/json.hpp"

namespace kcert::cli {

namespace {

std::string default_text(const kernels::ParamSpec& p) {
  return p.default_value ? kernels::format_value(*p.default_value) : "(required)";
}

nlohmann::json params_json(const std::vector<kernels::ParamSpec>& specs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : specs) {
    out.push_back({{"name", p.name},
                   {"type", std::string(kernels::describe(p.type))},
                   {"default", p.default_value ? nlohmann::json(kernels::format_value(*p.default_value)) : nlohmann::json(nullptr)},
                   {"choices", p.choices},
                   {"description", p.description}});
  }
  return out;
}

// The family's input tensors as its own code draws them at the default probe (a plugin author
// needs the names: `x`, `W_router`, `pos`, `row_bias`): "name [shape] dtype", fixed first.
// Empty when a probe parameter has no default, or drawing fails.
std::vector<std::string> input_tensors(const kernels::Family& f) {
  kernels::ProbeContract probe;
  for (const auto& p : f.probe_params) {
    if (!p.default_value) return {};
    probe.params.set(p.name, *p.default_value);
  }
  std::vector<std::string> out;
  try {
    const auto fixed = f.make_fixed(probe, 1);
    const auto replicate = f.make_replicate(probe, fixed, 2);
    const auto describe = [](const std::string& kind, const std::string& name, const torch::Tensor& t) {
      return fmt::format("{:<10} {:<16} [{}] {}", kind, name, fmt::join(t.sizes(), ", "), c10::toString(t.scalar_type()));
    };
    for (const auto& [name, t] : fixed.tensors()) out.push_back(describe("fixed", name, t));
    for (const auto& [name, t] : replicate.tensors()) out.push_back(describe("replicate", name, t));
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

// One family for `kcert list --json`.
nlohmann::json family_json(const std::string& name, const kernels::Family& f) {
  nlohmann::json variants = nlohmann::json::array();
  for (const auto& [vn, v] : f.variants) {
    variants.push_back({{"name", vn}, {"version", v.schema.version}, {"description", v.schema.description},
                        {"params", params_json(v.schema.params)},
                        {"unavailable", v.unavailable.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.unavailable)}});
  }
  nlohmann::json gradients = nlohmann::json::array();
  for (const auto& g : f.gradients) {
    gradients.push_back({{"name", g.schema.name}, {"input", g.schema.input}, {"bucket_axes", g.schema.bucket_axes},
                         {"reduces", g.schema.reduces}, {"description", g.schema.description}});
  }
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& v = f.variants.at(variants[i]["name"].get<std::string>());
    variants[i]["backward"] = v.backward ? "explicit" : "autograd";
  }
  auto dy_kinds = nlohmann::json::array();
  if (!f.gradients.empty())
    for (const auto& law : contract::kDyLaws) dy_kinds.push_back(std::string(law.name));
  return {{"family", name},         {"description", f.description},
          {"bucket_axes", f.bucket_axes}, {"probe_params", params_json(f.probe_params)},
          {"variants", variants},         {"gradients", gradients},
          {"dy_kinds", dy_kinds}};
}

// A family's name, bucket axes and what its backward certifies (gradients, dy kinds).
void print_family_heading(const std::string& name, const kernels::Family& f) {
  // Names and docs come from plugins too: escaped for the terminal (text/escape.hpp).
  const auto& t = text::terminal_safe;
  std::cout << fmt::format("{}: {}\n  bucket axes: ", t(name), t(f.description));
  for (std::size_t i = 0; i < f.bucket_axes.size(); ++i) {
    std::cout << (i ? ", " : "") << t(f.bucket_axes[i]) << (i == 0 ? " (default)" : "");
  }
  // direction: backward (issue 31): the gradients a case can certify, and the dy kinds.
  if (f.gradients.empty()) {
    std::cout << "\n  backward: none yet (direction: forward only)";
  } else {
    std::cout << "\n  backward: dy kinds " << contract::to_string(contract::DyLaw::shifted) << " (default)";
    for (const auto& law : contract::kDyLaws)
      if (law.law != contract::DyLaw::shifted) std::cout << ", " << law.name;
    std::cout << "; gradients:";
    for (const auto& g : f.gradients) {
      std::cout << fmt::format("\n    {} (of {}; buckets {}{}): {}", t(g.schema.name), t(g.schema.input),
                               t(fmt::format("{}", fmt::join(g.schema.bucket_axes, ", "))),
                               g.schema.reduces.empty() ? std::string() : "; sums over " + t(g.schema.reduces),
                               t(g.schema.description));
    }
  }
}

// A family's probe parameters and variants in columns; with `one_family`, the tensors its
// kernels receive too.
void print_family_parameters(const kernels::Family& f, bool one_family) {
  const auto& t = text::terminal_safe;
  // Columns as wide as their longest entry (a fixed width let `router.correction_bias` and
  // `weights.bias_spread` run into the next column).
  std::size_t name_w = 4, type_w = 4, default_w = 4, variant_w = 4;
  const auto widen = [&](const kernels::ParamSpec& p) {
    name_w = std::max(name_w, p.name.size());
    type_w = std::max(type_w, std::string(kernels::describe(p.type)).size());
    default_w = std::max(default_w, default_text(p).size());
  };
  for (const auto& p : f.probe_params) widen(p);
  for (const auto& [vn, v] : f.variants) {
    variant_w = std::max(variant_w, vn.size());
    for (const auto& p : v.schema.params) widen(p);
  }
  std::cout << "\n  probe parameters:\n";
  for (const auto& p : f.probe_params) {
    std::cout << fmt::format("    {:<{}}  {:<{}}  default {:<{}}  {}\n", t(p.name), name_w, kernels::describe(p.type), type_w,
                             t(default_text(p)), default_w, t(p.description));
  }
  if (one_family) {
    // One family asked for: also what its kernels receive (names a plugin variant reads).
    const auto inputs = input_tensors(f);
    if (!inputs.empty()) {
      std::cout << "  input tensors (at the default probe, bf16; replicate tensors gain a leading batch dimension):\n";
      for (const auto& line : inputs) std::cout << "    " << line << "\n";
    }
  }
  std::cout << "  variants:\n";
  for (const auto& [vn, v] : f.variants) {
    std::cout << fmt::format("    {:<{}}  [{}] {}\n", t(vn), variant_w, t(v.schema.version), t(v.schema.description));
    if (!v.unavailable.empty()) std::cout << fmt::format("      {:<{}}  not in this build: {}\n", "", variant_w, t(v.unavailable));
    for (const auto& p : v.schema.params) {
      std::cout << fmt::format("      param {:<{}}  {:<{}}  default {:<{}}  {}\n", t(p.name), name_w, kernels::describe(p.type),
                               type_w, t(default_text(p)), default_w, t(p.description));
    }
  }
}

}  // namespace

void register_list_command(CLI::App& app, const kernels::Registry& registry) {
  auto json = std::make_shared<bool>(false);
  auto family_filter = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("list", "List the registered operator families, their probe parameters and variants");
  cmd->footer("A test case names a family, one of its bucket axes and two of its variants (docs/testcases.md).");
  cmd->add_option("family", *family_filter, "show only this family");
  cmd->add_flag("--json", *json, "print JSON instead of text");
  cmd->callback([&registry, json, family_filter]() {
    nlohmann::json doc = nlohmann::json::array();
    for (const auto& name : registry.family_names()) {
      if (!family_filter->empty() && name != *family_filter) continue;
      const auto& f = registry.family(name);
      if (*json) {
        doc.push_back(family_json(name, f));
        continue;
      }
      print_family_heading(name, f);
      print_family_parameters(f, !family_filter->empty());
    }
    if (!family_filter->empty() && registry.find_family(*family_filter) == nullptr) {
      const auto names = registry.family_names();
      const auto near = closest(*family_filter, names);
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError("no family '" + *family_filter + "'" +
                       (near.empty() ? std::string() : "; did you mean " + near.front() + "?") + " (families: " + known + ")");
    }
    if (*json) {
      const nlohmann::json out = {{"format", "kcert-families/1"}, {"kcert_version", KCERT_VERSION}, {"families", doc}};
      std::cout << out.dump(2) << "\n";
    }
  });
}

}  // namespace kcert::cli
