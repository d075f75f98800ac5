// How far copies (or a sharded base's gathers) run ahead of the compute, and what follows from
// it: the one place that checks a prefetch depth and counts the device slots it takes, read by
// the memory planner, offloaded layers, the sharded base and offloaded activations alike.
#pragma once

#include <cstdint>

namespace qtrain::offload {

// Refuses a depth below 1, naming offload_prefetch_depth and the fix.
void check_prefetch_depth(int64_t depth);

// The device slots `streamed` layers take at `depth`: one for the layer computing and one per
// layer in flight, never more than there are layers (0 for none).
int64_t slots_for(int64_t streamed, int64_t depth);

}  // namespace qtrain::offload
