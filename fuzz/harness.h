// What every harness shares. A parser of outside input passes a run when it returns or throws an
// exception that carries a message (the clean error a user sees); a crash, a hang, running out of
// memory, an empty message or a sanitizer report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

namespace qtrain::fuzz {

// Runs `parse`; std::bad_alloc escapes (libFuzzer reports the abort: an allocation the parser
// should have refused), any other exception must explain itself.
template <class F>
void expect_clean(F&& parse) {
  try {
    parse();
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    if (std::string_view(e.what()).empty()) std::abort();
  }
}

// A folder of this process's own in /dev/shm (in memory, so that the many small files the
// path-taking parsers need cost no disk I/O), made on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path dir;
    Scratch() {
      const char* shm = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
      dir = std::filesystem::path(shm) / ("qtrain-fuzz-" + std::to_string(::getpid()));
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace qtrain::fuzz
