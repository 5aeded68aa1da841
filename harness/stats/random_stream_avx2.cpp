#define KCERT_RNG_ISA avx2
#define KCERT_RNG_LANES 8
#include "harness/stats/random_stream_impl.hpp"
