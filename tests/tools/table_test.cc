#include "tools/tandemctl/table.h"

#include <gtest/gtest.h>

namespace tandem::ctl {
namespace {

TEST(TableTest, AlignsColumnsAndRightAlignsNumbers) {
  Table t({"URL", "TYPE", "INFLIGHT"});
  t.AddRow({"http://127.0.0.1:8000", "prefill", "3"});
  t.AddRow({"http://h:1", "decode", "120"});
  EXPECT_EQ(t.Render(),
            "URL                    TYPE     INFLIGHT\n"
            "http://127.0.0.1:8000  prefill         3\n"
            "http://h:1             decode        120\n");
}

TEST(TableTest, PlaceholdersInNumericColumnsAlignRight) {
  Table t({"NAME", "P50", "NOTE"});
  t.AddRow({"ttft", "12.50ms", "-"});
  t.AddRow({"e2e", "-", "x"});
  EXPECT_EQ(t.Render(),
            "NAME  P50      NOTE\n"
            "ttft  12.50ms  -\n"
            "e2e         -  x\n");
}

TEST(TableTest, ShortRowsArePaddedAndLongRowsAddColumns) {
  Table t({"A", "B"});
  t.AddRow({"x"});
  t.AddRow({"y", "z", "extra"});
  EXPECT_EQ(t.Render(),
            "A  B\n"
            "x\n"
            "y  z  extra\n");
}

TEST(TableTest, WidthCountsCodePointsNotBytes) {
  Table t({"NAME", "V"});
  t.AddRow({"é", "1"});  // two bytes, one column
  t.AddRow({"abc", "2"});
  EXPECT_EQ(t.Render(),
            "NAME  V\n"
            "é     1\n"
            "abc   2\n");
  EXPECT_EQ(DisplayWidth("é"), 1u);
}

TEST(TableTest, HeaderOnlyTable) {
  Table t({"URL", "TYPE"});
  EXPECT_EQ(t.rows(), 0u);
  EXPECT_EQ(t.Render(), "URL  TYPE\n");
}

TEST(TableTest, WhatCountsAsNumeric) {
  EXPECT_TRUE(LooksNumeric("12"));
  EXPECT_TRUE(LooksNumeric("-3.5"));
  EXPECT_TRUE(LooksNumeric("0.25s"));
  EXPECT_TRUE(LooksNumeric("12.50ms"));
  EXPECT_TRUE(LooksNumeric("97%"));
  EXPECT_FALSE(LooksNumeric(""));
  EXPECT_FALSE(LooksNumeric("-"));
  EXPECT_FALSE(LooksNumeric("1.2.3"));
  EXPECT_FALSE(LooksNumeric("ms"));
  EXPECT_FALSE(LooksNumeric("8192/8192"));
  EXPECT_FALSE(LooksNumeric("yes"));
}

}  // namespace
}  // namespace tandem::ctl
