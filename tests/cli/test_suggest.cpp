// "Did you mean" (harness/cli/suggest.hpp): what it offers for the typos people make, and
// nothing for a word far from every candidate.
#include "kcert_catch.hpp"

#include "harness/cli/suggest.hpp"

using kcert::cli::closest;
using kcert::cli::edit_distance;

TEST_CASE("edit distance counts a swapped pair of letters as one edit", "[cli]") {
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("rmsnrom", "rmsnorm") == 1);  // transposition
  CHECK(edit_distance("same", "same") == 0);
}

TEST_CASE("closest suggests near ids, truncated ids, and nothing far away", "[cli]") {
  const std::vector<std::string> ids{"n1_gemma_rmsnorm_offset_bf16", "n1_gemma_rmsnorm_offset_bf16_transformers",
                                     "n3_llama_rmsnorm_fp32_cast", "rw_rope_complex_vs_rotate_half"};
  CHECK(closest("n1_gemma_rmsnorm_ofset_bf16", ids) == std::vector<std::string>{"n1_gemma_rmsnorm_offset_bf16"});
  // A prefix of several ids offers them all, in the candidates' order.
  CHECK(closest("n1_gemma_rmsnorm", ids) ==
        std::vector<std::string>{"n1_gemma_rmsnorm_offset_bf16", "n1_gemma_rmsnorm_offset_bf16_transformers"});
  CHECK(closest("softmax_online", ids).empty());
  CHECK(closest("x", ids).empty());
  CHECK(closest("n3_llama_rmsnorm_fp32_cats", ids, 1) == std::vector<std::string>{"n3_llama_rmsnorm_fp32_cast"});
}
