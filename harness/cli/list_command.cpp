#include "harness/cli/list_command.hpp"

#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "harness/cli/exit_codes.hpp"
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
        nlohmann::json variants = nlohmann::json::array();
        for (const auto& [vn, v] : f.variants) {
          variants.push_back({{"name", vn}, {"version", v.schema.version}, {"description", v.schema.description},
                              {"params", params_json(v.schema.params)}});
        }
        doc.push_back({{"family", name}, {"description", f.description}, {"bucket_axes", f.bucket_axes},
                       {"probe_params", params_json(f.probe_params)}, {"variants", variants}});
        continue;
      }
      std::cout << fmt::format("{}: {}\n  bucket axes: ", name, f.description);
      for (std::size_t i = 0; i < f.bucket_axes.size(); ++i) {
        std::cout << (i ? ", " : "") << f.bucket_axes[i] << (i == 0 ? " (default)" : "");
      }
      std::cout << "\n  probe parameters:\n";
      for (const auto& p : f.probe_params) {
        std::cout << fmt::format("    {:<16} {:<18} default {:<12} {}\n", p.name, kernels::describe(p.type),
                                 default_text(p), p.description);
      }
      std::cout << "  variants:\n";
      for (const auto& [vn, v] : f.variants) {
        std::cout << fmt::format("    {:<20} [{}] {}\n", vn, v.schema.version, v.schema.description);
      }
    }
    if (!family_filter->empty() && registry.find_family(*family_filter) == nullptr) {
      throw UsageError("no family '" + *family_filter + "'");
    }
    if (*json) std::cout << doc.dump(2) << "\n";
  });
}

}  // namespace kcert::cli
