// Catch2 2's main. Under Catch2 3 the tests link Catch2::Catch2WithMain instead and this file
// is not compiled (tests/CMakeLists.txt).
#define CATCH_CONFIG_MAIN
#include "kcert_catch.hpp"
