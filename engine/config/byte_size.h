// Sizes and bandwidths as people write them, shared by the config key gpu_memory_limit and the
// command line's --gpu-memory and --h2d-bandwidth: "24GiB", "24 GiB", "20GB", "512MiB",
// "1.5GiB", and a bare number meaning GiB (axolotl's convention for gpu_memory_limit). Binary
// units (KiB, MiB, GiB, TiB) are powers of 1024 and decimal ones (KB, MB, GB, TB) powers of 1000,
// as accelerate reads axolotl's max_memory; the case of the unit does not matter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace qtrain::engine::config {

// Bytes, rounded to a whole byte; nullopt for text that is not a non-negative size.
std::optional<int64_t> parse_byte_size(const std::string& text);

// The shortest text parse_byte_size reads back to exactly `bytes` ("24GiB", "20GB", "0").
std::string format_byte_size(int64_t bytes);

// Bytes per second from "25GB/s", "12.5GiB/s" or a bare number meaning GB/s; nullopt for text
// that is not a positive bandwidth.
std::optional<double> parse_bandwidth(const std::string& text);

}  // namespace qtrain::engine::config
