#pragma once
// docs/controls.md (`kcert controls-doc`, the report room): the catalog of controls generated
// from the control YAML files and the last measured results, so it is never typed by hand.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "eval/falsifiability.hpp"
#include "harness/contract/test_case.hpp"

namespace kcert::report {

// The measured results of the controls, by id, from one or more results documents.
struct MeasuredControls {
  std::map<std::string, eval::ControlOutcome> outcomes;
  std::map<std::string, std::string> profile;  // the profile each was measured at ("" = contract shapes)
  std::vector<std::string> sources;            // the documents' names, in the order given
};

// Adds a results document (`kcert suite --json` or a nightly's results.json) named `source`;
// a later document wins, but a skip never hides another document's measurement. Throws
// std::invalid_argument (or nlohmann's errors) on a document of another shape.
void add_measured(MeasuredControls& measured, const nlohmann::json& document, const std::string& source);

// The Markdown page: counts, the falsifiability of the measured results, a table per kind
// (id, family, mechanism, references, YAML expectation, measured gates, today's checks, note)
// and the backward defects a CPU cannot replay. Texts from case files pass through
// text::markdown_cell; a reference is a link only when it is a plain http(s) URL.
std::string controls_markdown(std::vector<contract::TestCase> cases, const MeasuredControls& measured);

}  // namespace kcert::report
