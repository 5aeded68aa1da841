#pragma once
// Include this instead of <catch2/catch.hpp> in tests that see LibTorch. LibTorch's logging
// header (glog's, or c10's fallback) defines CHECK as a fatal assertion that aborts the
// process without a report and is not counted by Catch; undefining it after LibTorch and
// before Catch makes CHECK the Catch assertion the tests mean.
#include "harness/numerics/torch_api.hpp"
#undef CHECK
#include "kcert_catch.hpp"
