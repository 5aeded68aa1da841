#pragma once
// The git revision kcert was built from, in one generated translation unit
// (build/generated/build_info.cpp): a commit changes that one file, not the compile
// definitions of every command (which rebuilt all of kcert_cli after each commit).
namespace kcert::cli {
extern const char* const kGitRevision;
}  // namespace kcert::cli
