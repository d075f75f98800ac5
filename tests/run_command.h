// Running a command line from a test (the qtrain binary, a reference script): its exit status
// and what it printed.
#pragma once

#include <array>
#include <cstdio>
#include <string>

namespace qtrain::test {

struct CommandResult {
  int status;       // pclose's: 0 on success
  std::string out;  // stdout, and stderr too with `with_stderr`
};

inline CommandResult run_command(const std::string& cmd, bool with_stderr = false) {
  CommandResult r{0, ""};
  FILE* p = popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) r.out += buf.data();
  r.status = pclose(p);
  return r;
}

}  // namespace qtrain::test
