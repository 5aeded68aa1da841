// kcert: numerical certification of kernel migrations. Thin entry point: the command line
// lives in harness/cli/app.cpp, shared with the Python module.
#include "harness/cli/app.hpp"

int main(int argc, char** argv) { return kcert::cli::run_command_line(argc, argv); }
