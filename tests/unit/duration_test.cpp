#include "core/duration.h"

#include <gtest/gtest.h>

namespace tahua {

TEST(Duration, ParsesEachUnit) {
  EXPECT_EQ(parseDuration("250ms"), Millis(250));
  EXPECT_EQ(parseDuration("5s"), Millis(5000));
  EXPECT_EQ(parseDuration("2m"), Millis(120000));
  EXPECT_EQ(parseDuration("1h"), Millis(3600000));
  EXPECT_EQ(parseDuration("0s"), Millis(0));
}

TEST(Duration, RejectsMissingOrUnknownUnitsAndJunk) {
  for (const char* bad : {"5", "", "s", "5 s", "-1s", "5sec", "1.5s", "5S", "ms", "99999999999999999999s"})
    EXPECT_FALSE(parseDuration(bad).has_value()) << bad;
}

}  // namespace tahua
