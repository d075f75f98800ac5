// See prefetch_depth.h.
#include "offload/prefetch_depth.h"

#include <algorithm>

#include <c10/util/Exception.h>

namespace qtrain::offload {

void check_prefetch_depth(int64_t depth) {
  TORCH_CHECK(depth >= 1,
              "offload_prefetch_depth is ",
              depth,
              "; use 1 (copy the next offloaded layer during the current one) or more");
}

int64_t slots_for(int64_t streamed, int64_t depth) {
  check_prefetch_depth(depth);
  return std::max<int64_t>(std::min(streamed, depth + 1), 0);
}

}  // namespace qtrain::offload
