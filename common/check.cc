#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace tandem {

void CheckFailure(const char* file, int line, std::string_view condition,
                  std::string_view message) {
  // stderr directly: the logger may not be set up yet, or may be what failed.
  std::fprintf(stderr, "%s:%d: check failed: %.*s: %.*s\n", file, line,
               static_cast<int>(condition.size()), condition.data(),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tandem
