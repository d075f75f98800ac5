// See regular_file.h.
#include "engine/text/regular_file.h"

namespace qtrain::engine::text {
namespace fs = std::filesystem;

namespace {

std::string kind_name(fs::file_type type) {
  switch (type) {
    case fs::file_type::fifo:
      return "a FIFO (named pipe)";
    case fs::file_type::character:
    case fs::file_type::block:
      return "a device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

}  // namespace

std::string regular_file_problem(const fs::path& path, uint64_t max_bytes) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || status.type() == fs::file_type::not_found) return {};
  if (status.type() == fs::file_type::directory) return "is a folder, not a file; give the path of the file itself";
  if (status.type() != fs::file_type::regular) {
    return "is " + kind_name(status.type()) +
           ", not a regular file; qtrain reads only regular files, since a pipe or device could block or never "
           "end: give the path of the file itself";
  }
  const auto bytes = fs::file_size(path, ec);
  if (!ec && bytes > max_bytes) {
    return "is " + std::to_string(bytes) + " bytes, more than the " + std::to_string(max_bytes) +
           " this kind of file can be; is it the right file?";
  }
  return {};
}

}  // namespace qtrain::engine::text
