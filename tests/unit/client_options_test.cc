// ClientOptions::ResolveFromEnvironment: where a rank finds the rendezvous of
// resident daemons and its node's place (collectiverun's variables first,
// then horovodrun --gloo's), and the refusals that name what is wrong.
#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collective/client.h"

namespace collective {
namespace {

using ::testing::HasSubstr;

// Clears every launcher variable this test sets, before and after each test.
class ClientOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }

  static void Clear() {
    for (const char* name :
         {"COLLECTIVE_RENDEZVOUS", "COLLECTIVE_NODE", "COLLECTIVE_NODES",
          "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_CROSS_RANK",
          "HOROVOD_CROSS_SIZE", "COLLECTIVE_LOCAL_RANK", "COLLECTIVE_LOCAL_SIZE"}) {
      unsetenv(name);
    }
  }
};

TEST_F(ClientOptionsTest, WithoutARendezvousTheJobSpansTheDaemonsOwnWorld) {
  ClientOptions options;
  ASSERT_TRUE(options.ResolveFromEnvironment().ok());
  EXPECT_EQ(options.rendezvous, "");
}

TEST_F(ClientOptionsTest, CollectiverunsVariablesNameTheRendezvousAndTheNode) {
  setenv("COLLECTIVE_RENDEZVOUS", "10.0.0.1:4000", 1);
  setenv("COLLECTIVE_NODE", "1", 1);
  setenv("COLLECTIVE_NODES", "3", 1);
  // horovodrun's are read only when collectiverun's are absent.
  setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.9.9.9", 1);
  ClientOptions options;
  ASSERT_TRUE(options.ResolveFromEnvironment().ok());
  EXPECT_EQ(options.rendezvous, "10.0.0.1:4000");
  EXPECT_EQ(options.node, 1);
  EXPECT_EQ(options.nodes, 3);
}

TEST_F(ClientOptionsTest, HorovodrunsGlooVariablesNameTheRendezvousAndTheNode) {
  setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "host-a", 1);
  setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "29500", 1);
  setenv("HOROVOD_CROSS_RANK", "0", 1);
  setenv("HOROVOD_CROSS_SIZE", "2", 1);
  ClientOptions options;
  ASSERT_TRUE(options.ResolveFromEnvironment().ok());
  EXPECT_EQ(options.rendezvous, "host-a:29500");
  EXPECT_EQ(options.node, 0);
  EXPECT_EQ(options.nodes, 2);
}

TEST_F(ClientOptionsTest, AMissingOrBadVariableIsNamed) {
  setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "host-a", 1);
  ClientOptions no_port;
  EXPECT_THAT(std::string(no_port.ResolveFromEnvironment().message()),
              HasSubstr("HOROVOD_GLOO_RENDEZVOUS_PORT is not"));
  setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "29500", 1);
  setenv("HOROVOD_CROSS_RANK", "x", 1);
  setenv("HOROVOD_CROSS_SIZE", "2", 1);
  ClientOptions bad_rank;
  EXPECT_THAT(std::string(bad_rank.ResolveFromEnvironment().message()),
              HasSubstr("HOROVOD_CROSS_RANK='x' is not a non-negative integer"));
  setenv("HOROVOD_CROSS_RANK", "2", 1);
  ClientOptions outside;
  const absl::Status status = outside.ResolveFromEnvironment();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("node 2 of 2"));
}

TEST_F(ClientOptionsTest, OptionsSetInCodeWin) {
  setenv("COLLECTIVE_RENDEZVOUS", "10.0.0.1:4000", 1);
  setenv("COLLECTIVE_NODE", "1", 1);
  setenv("COLLECTIVE_NODES", "3", 1);
  ClientOptions options;
  options.rendezvous = "127.0.0.1:5000";
  options.node = 0;
  options.nodes = 2;
  ASSERT_TRUE(options.ResolveFromEnvironment().ok());
  EXPECT_EQ(options.rendezvous, "127.0.0.1:5000");
  EXPECT_EQ(options.node, 0);
  EXPECT_EQ(options.nodes, 2);
}

}  // namespace
}  // namespace collective
