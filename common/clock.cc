#include "common/clock.h"

namespace tandem {
namespace {

class MonotonicClock : public Clock {
 public:
  MonoClock::time_point Now() const override { return MonoNow(); }
};

}  // namespace

const Clock& RealClock() {
  static const MonotonicClock* clock = new MonotonicClock();
  return *clock;
}

}  // namespace tandem
