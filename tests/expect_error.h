// expect_error: the call throws a c10::Error whose message contains a fragment. Error messages
// are part of qtrain's interface (they name the value and the fix), so tests pin them.
#pragma once

#include <functional>
#include <string>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace qtrain::test {

inline void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(fragment), std::string::npos)
        << "message: " << e.what_without_backtrace() << "\nexpected fragment: " << fragment;
  }
}

}  // namespace qtrain::test
