#define KCERT_RNG_ISA generic
#define KCERT_RNG_LANES 4
#include "harness/stats/random_stream_impl.hpp"
