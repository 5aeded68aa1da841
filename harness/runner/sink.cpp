#include "harness/runner/sink.hpp"

#include "harness/store/json.hpp"

namespace kcert::runner {

void JsonFileSink::case_finished(const std::vector<engine::CaseResult>& done) { store::write_json_file(path_, document_(done)); }

}  // namespace kcert::runner
