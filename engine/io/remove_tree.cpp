// See remove_tree.h and Note [libtorch exports std::filesystem] there.
#include "engine/io/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace qtrain::engine::io {

namespace {

// nftw's callback has no user pointer; one walk runs per thread at a time.
thread_local std::uintmax_t removed;
thread_local std::string failed_path;

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (std::remove(path) != 0 && errno != ENOENT) {
    failed_path = path;
    return errno;
  }
  ++removed;
  return 0;
}

}  // namespace

std::uintmax_t remove_tree(const std::filesystem::path& p, std::error_code& ec) noexcept {
  ec.clear();
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0) {
    if (errno != ENOENT) ec.assign(errno, std::generic_category());
    return 0;
  }
  removed = 0;
  failed_path.clear();
  const int rc = ::nftw(p.c_str(), remove_entry, 64, FTW_DEPTH | FTW_PHYS);
  if (rc > 0)
    ec.assign(rc, std::generic_category());
  else if (rc < 0)
    ec.assign(errno, std::generic_category());
  return removed;
}

std::uintmax_t remove_tree(const std::filesystem::path& p) {
  std::error_code ec;
  const auto n = remove_tree(p, ec);
  if (ec) {
    throw std::filesystem::filesystem_error("cannot delete " + (failed_path.empty() ? p.string() : failed_path), p, ec);
  }
  return n;
}

}  // namespace qtrain::engine::io
