// What collectiverun and its host agents say to each other (elastic jobs
// across machines): every message comes out as it went in, however the
// stream is cut, and a line that is none is refused rather than guessed at;
// the ssh command lines that start agents and workers quote what they carry.
#include "client/launcher/agent_protocol.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/launcher/remote_hosts.h"

namespace collective::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<AgentMessage> Examples() {
  return {
      {.kind = AgentMessage::Kind::kHello, .name = "/tmp/collectiverun-elastic-ab12-host1"},
      {.kind = AgentMessage::Kind::kFile,
       .name = "world",
       .content = "generation 3\nworkers 0 1 4\n"},
      {.kind = AgentMessage::Kind::kFile, .name = "exited-2", .content = ""},
      {.kind = AgentMessage::Kind::kMarker, .name = "joining-3-4"},
      {.kind = AgentMessage::Kind::kReady, .name = "/tmp/d/daemons/host1.sock", .pid = 4321},
      {.kind = AgentMessage::Kind::kExited, .name = "/tmp/d/daemons/host1.sock", .pid = 4321},
  };
}

void ExpectSame(const AgentMessage& got, const AgentMessage& sent) {
  EXPECT_EQ(got.kind, sent.kind);
  EXPECT_EQ(got.name, sent.name);
  EXPECT_EQ(got.content, sent.content);
  EXPECT_EQ(got.pid, sent.pid);
}

TEST(AgentProtocolTest, EveryMessageComesOutAsItWentInHoweverTheStreamIsCut) {
  std::string stream;
  for (const AgentMessage& message : Examples()) stream += EncodeAgentMessage(message);
  for (size_t piece : {stream.size(), size_t{1}, size_t{7}}) {
    AgentMessageReader reader;
    std::vector<AgentMessage> got;
    for (size_t at = 0; at < stream.size(); at += piece) {
      reader.Append(absl::string_view(stream).substr(at, piece));
      while (std::optional<absl::StatusOr<AgentMessage>> message = reader.Next()) {
        ASSERT_TRUE(message->ok()) << message->status();
        got.push_back(**message);
      }
    }
    ASSERT_EQ(got.size(), Examples().size()) << "pieces of " << piece;
    for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], Examples()[i]);
  }
}

TEST(AgentProtocolTest, AFilesBytesMayHoldWhatLooksLikeMessages) {
  const AgentMessage sneaky{
      .kind = AgentMessage::Kind::kFile, .name = "world", .content = "marker world\nready / 1\n"};
  AgentMessageReader reader;
  reader.Append(EncodeAgentMessage(sneaky));
  auto message = reader.Next();
  ASSERT_TRUE(message.has_value() && message->ok());
  ExpectSame(**message, sneaky);
  EXPECT_FALSE(reader.Next().has_value());
}

TEST(AgentProtocolTest, WhatIsNoMessageIsRefused) {
  for (const std::string& line : std::vector<std::string>{
           "launch rockets\n", "file ../escape 3\nabc", "file world x\n",
           "file world 99999999999\n", "marker a/b\n", "marker\n", "ready relative.sock 12\n",
           "exited /s.sock -4\n", "ready /s.sock 12 13\n", "hello relative\n",
           std::string(5000, 'x')}) {
    AgentMessageReader reader;
    reader.Append(line);
    auto message = reader.Next();
    ASSERT_TRUE(message.has_value()) << line;
    EXPECT_FALSE(message->ok()) << line;
    EXPECT_THAT(message->status().message(), HasSubstr("malformed host agent message")) << line;
  }
}

TEST(AgentProtocolTest, RendezvousNamesArePlainFileNames) {
  EXPECT_TRUE(IsRendezvousName("world"));
  EXPECT_TRUE(IsRendezvousName("joining-12-3"));
  for (const char* name : {"", ".", "..", "a/b", "/abs", "two words", "tab\tname"}) {
    EXPECT_FALSE(IsRendezvousName(name)) << name;
  }
  EXPECT_FALSE(IsRendezvousName(std::string(256, 'n')));
}

TEST(RemoteHostsTest, SshIsMpirunsWithHorovodrunsPortAndKey) {
  EXPECT_THAT(SshCommand({}, 0, ""), ElementsAre("ssh"));
  EXPECT_THAT(SshCommand({{"OMPI_MCA_plm_rsh_agent", "ssh  -F /etc/cluster.conf"}}, 2222, "/k"),
              ElementsAre("ssh", "-F", "/etc/cluster.conf", "-p", "2222", "-i", "/k"));
}

TEST(RemoteHostsTest, AWorkersCommandLineQuotesWhatItCarries) {
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  HostAgents agents("/tmp/hub",
                    {.ssh = {"ssh"}, .self = "/opt/bin/collectiverun", .grace_seconds = 3}, {});
  const std::vector<std::string> argv = agents.WorkerCommand(
      "node-b", {{"A", "x y"}, {"B", "$(reboot)"}}, {"python3", "-c", "print('hi')"});
  ASSERT_EQ(argv.size(), 3u);
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_EQ(argv[1], "node-b");
  EXPECT_THAT(argv[2], HasSubstr("exec env 'A=x y' 'B=$(reboot)' '/opt/bin/collectiverun' "
                                 "--remote-exec 3 -- 'python3' '-c' 'print('\\''hi'\\'')'"));
  EXPECT_EQ(agents.DirectoryOf(2), "/tmp/hub-host2");
}

}  // namespace
}  // namespace collective::launcher
