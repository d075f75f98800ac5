// The host-to-device bandwidth a copy engine reaches on layer-sized blobs, measured the way
// offload uses it (host buffer of the engine, one copy per blob). The trainer prints it and plans
// with it; the offload benchmark divides bytes moved by it for the transfer bound.
#pragma once

#include <cstdint>

#include "offload/copy_engine.h"

namespace qtrain::offload {

// Bytes per second of `repeats` copies of `bytes` each, after one warm-up copy.
double measure_copy_bandwidth(CopyEngine& engine, int64_t bytes, int repeats = 4);

}  // namespace qtrain::offload
