// client/launcher/output_prefixer: every line comes out whole and prefixed,
// however the bytes arrive; an unfinished last line is flushed at the end;
// a line beyond the limit is cut at the limit.
#include "client/launcher/output_prefixer.h"

#include <string>

#include <gtest/gtest.h>

namespace collective::launcher {
namespace {

// Feeds `chunks` one by one, then finishes; returns everything emitted.
std::string FeedAll(LinePrefixer& prefixer, std::initializer_list<std::string> chunks) {
  std::string out;
  for (const std::string& chunk : chunks) prefixer.Feed(chunk, out);
  prefixer.Finish(out);
  return out;
}

TEST(LinePrefixerTest, PrefixesEveryLine) {
  LinePrefixer prefixer("[1] ");
  EXPECT_EQ(FeedAll(prefixer, {"a\nbb\n\nccc\n"}), "[1] a\n[1] bb\n[1] \n[1] ccc\n");
}

TEST(LinePrefixerTest, HoldsALineUntilItsNewlineArrives) {
  LinePrefixer prefixer("[0] ");
  std::string out;
  prefixer.Feed("hel", out);
  EXPECT_EQ(out, "");
  prefixer.Feed("lo wo", out);
  EXPECT_EQ(out, "");
  prefixer.Feed("rld\nnext", out);
  EXPECT_EQ(out, "[0] hello world\n");
  out.clear();
  prefixer.Feed("\n", out);
  EXPECT_EQ(out, "[0] next\n");
}

TEST(LinePrefixerTest, ByteByByteGivesTheSameLines) {
  const std::string text = "first line\nsecond\n\nlast without newline";
  LinePrefixer whole("[3] ");
  LinePrefixer pieces("[3] ");
  std::string expected;
  whole.Feed(text, expected);
  whole.Finish(expected);
  std::string out;
  for (char c : text) pieces.Feed(std::string(1, c), out);
  pieces.Finish(out);
  EXPECT_EQ(out, expected);
  EXPECT_EQ(out, "[3] first line\n[3] second\n[3] \n[3] last without newline\n");
}

TEST(LinePrefixerTest, FinishFlushesAPartialLineOnce) {
  LinePrefixer prefixer("[2] ");
  std::string out;
  prefixer.Feed("done\npartial", out);
  prefixer.Finish(out);
  prefixer.Finish(out);
  EXPECT_EQ(out, "[2] done\n[2] partial\n");
}

TEST(LinePrefixerTest, NothingInNothingOut) {
  LinePrefixer prefixer("[0] ");
  EXPECT_EQ(FeedAll(prefixer, {}), "");
  EXPECT_EQ(FeedAll(prefixer, {"", ""}), "");
}

TEST(LinePrefixerTest, KeepsLongLinesWholeBelowTheLimit) {
  LinePrefixer prefixer("[1] ");
  const std::string line(200000, 'x');
  // In pieces of an odd size, as a pipe might deliver them.
  std::string out;
  for (size_t i = 0; i < line.size(); i += 4093) prefixer.Feed(line.substr(i, 4093), out);
  EXPECT_EQ(out, "");
  prefixer.Feed("\n", out);
  EXPECT_EQ(out, "[1] " + line + "\n");
}

TEST(LinePrefixerTest, CutsALineAtTheLimit) {
  LinePrefixer prefixer("> ", 4);
  EXPECT_EQ(FeedAll(prefixer, {"abcdefghij\nxy"}), "> abcd\n> efgh\n> ij\n> xy\n");
  // The newline does not count: a line of exactly the limit stays whole,
  // whether its newline comes with it or later.
  LinePrefixer exact("> ", 4);
  EXPECT_EQ(FeedAll(exact, {"abcd\n", "abcd", "\n", "abcd", "e\n"}),
            "> abcd\n> abcd\n> abcd\n> e\n");
}

}  // namespace
}  // namespace collective::launcher
