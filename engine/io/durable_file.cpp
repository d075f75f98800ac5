// See durable_file.h.
#include "engine/io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <c10/util/Exception.h>

namespace qtrain::engine::io {

void write_file_synced(const std::filesystem::path& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(fd >= 0, "cannot create ", path.string(), ": ", std::strerror(errno));
  const char* p = data.data();
  size_t left = data.size();
  int err = 0;
  while (left > 0 && err == 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = errno;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  TORCH_CHECK(err == 0, "cannot write ", path.string(), ": ", std::strerror(err), " (is the disk full?)");
}

void fsync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "cannot open folder ", dir.string(), " to flush it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TORCH_CHECK(rc == 0, "cannot flush folder ", dir.string(), ": ", std::strerror(err));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view data) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  try {
    write_file_synced(tmp, data);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TORCH_CHECK(false, "cannot rename ", tmp.string(), " to ", path.string(), ": ", std::strerror(err));
  }
  fsync_dir(path.has_parent_path() ? path.parent_path() : std::filesystem::path("."));
}

}  // namespace qtrain::engine::io
