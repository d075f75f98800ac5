// Deleting a folder and everything below it, without std::filesystem::remove_all.
//
// Note [libtorch exports std::filesystem]
// The torch wheel's libtorch.so and libtorch_cpu.so export their own, statically linked copy of
// std::filesystem (142 symbols, as unversioned definitions). The dynamic linker binds a binary's
// versioned references (GLIBCXX_3.4.26) to the first library in its search order that defines
// them, unversioned definitions included, so a binary that lists libtorch before libstdc++ runs
// libtorch's copy. Its remove_all crashes (a null call inside it): on the first GPU run (H100,
// Ubuntu 24.04, g++ 13.3, CMake 4.4) every test that deleted a folder ended in a segfault there,
// although the top-level CMakeLists.txt names libstdc++ first on every link line and that order
// holds on the CI machine. qtrain therefore deletes folders with nftw, which is in libc and no
// library can shadow; the link order stays, for the other std::filesystem calls, and the test
// `LinkOrder.FilesystemResolvesToLibstdcxx` says which copy a binary runs.
#pragma once

#include <filesystem>
#include <system_error>

namespace qtrain::engine::io {

// Deletes `p` (a file, a symlink, or a folder with all it holds; symlinks are deleted, not
// followed) and returns how many entries went. A missing `p` is not an error: nothing goes.
// Throws std::filesystem::filesystem_error naming the entry that could not be deleted.
std::uintmax_t remove_tree(const std::filesystem::path& p);

// The same, reporting a failure in `ec` (and returning what went before it) instead of throwing.
std::uintmax_t remove_tree(const std::filesystem::path& p, std::error_code& ec) noexcept;

}  // namespace qtrain::engine::io
