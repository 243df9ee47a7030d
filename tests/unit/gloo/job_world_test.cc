// Job worlds over Gloo among daemons as threads on 127.0.0.1: forming
// (hosts, layout, contexts that work), a node that never arrives, worlds of
// other jobs and generations on the same store, disagreeing settings, and
// the groups of process sets on some of the job's nodes.
#include "daemon/gloo/job_world.h"

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/gloo/set_groups.h"
#include "tests/common/temporary_directory.h"
#include "tests/unit/gloo/form_worlds.h"

namespace collective::daemon::gloo {
namespace {

using testing::FormAll;
using testing::FormJob;
using ::testing::HasSubstr;
using testing::HostOf;
using ::testing::Not;
using testing::OptionsFor;
using testing::SumOver;

// Runs fn(node) on a thread per world and waits for all.
template <typename Fn>
void OnEveryNode(int nodes, Fn fn) {
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node) threads.emplace_back([&fn, node] { fn(node); });
  for (std::thread& thread : threads) thread.join();
}

class JobWorldFormTest : public ::testing::TestWithParam<int> {};

TEST_P(JobWorldFormTest, FormsAndRecordsHosts) {
  const int nodes = GetParam();
  ::gloo::rendezvous::HashStore store;
  auto worlds = FormJob(store, "train-1", 0, nodes);
  for (int node = 0; node < nodes; ++node) {
    ASSERT_TRUE(worlds[node].ok()) << worlds[node].status();
    const JobWorld& world = **worlds[node];
    EXPECT_EQ(world.node(), node);
    EXPECT_EQ(world.nodes(), nodes);
    ASSERT_EQ(world.hosts().size(), static_cast<size_t>(nodes));
    for (int other = 0; other < nodes; ++other) {
      EXPECT_EQ(world.hosts()[other], HostOf(other));
      EXPECT_EQ(world.layout().local_sizes[other], other + 1);
    }
    if (nodes > 1) {
      EXPECT_EQ(world.NodeName(1), "node 1 (host-b)");
    }
    EXPECT_EQ(world.context()->rank, node);
    EXPECT_EQ(world.context()->size, nodes);
    EXPECT_EQ(world.control()->size, nodes);
  }
  // Both contexts carry data among all nodes.
  const int expected = nodes * (nodes + 1) / 2;
  OnEveryNode(nodes, [&](int node) {
    EXPECT_EQ(SumOver((*worlds[node])->context(), node + 1), expected);
    EXPECT_EQ(SumOver((*worlds[node])->control(), node + 1), expected);
  });
}

INSTANTIATE_TEST_SUITE_P(Nodes, JobWorldFormTest, ::testing::Values(1, 2, 3));

// A store of files, as daemons sharing a file system could use.
TEST(JobWorldTest, FormsThroughAFileStore) {
  collective::testing::TemporaryDirectory directory("gloo");
  ASSERT_FALSE(directory.path().empty());
  // A store per node, as daemons of their own have: Gloo's FileStore is not
  // safe to share between threads (it keeps its keys in a vector).
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::unique_ptr<::gloo::rendezvous::FileStore>> stores;
  for (int node = 0; node < 2; ++node) {
    stores.push_back(std::make_unique<::gloo::rendezvous::FileStore>(directory.path()));
  }
  std::vector<absl::StatusOr<std::unique_ptr<JobWorld>>> worlds(2);
  std::vector<std::thread> threads;
  for (int node = 0; node < 2; ++node) {
    threads.emplace_back([&, node] {
      worlds[node] = JobWorld::Form(*stores[node],
                                    OptionsFor("train/file", 3, node, 2, std::chrono::seconds(20)));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& world : worlds) ASSERT_TRUE(world.ok()) << world.status();
  OnEveryNode(2, [&](int node) { EXPECT_EQ(SumOver((*worlds[node])->context(), node + 1), 3); });
  EXPECT_EQ((*worlds[1])->hosts(), (std::vector<std::string>{"host-a", "host-b"}));
}

TEST(JobWorldTest, MissingNodeFailsWithinTheDeadlineNamingIt) {
  ::gloo::rendezvous::HashStore store;
  const auto within = std::chrono::milliseconds(1500);
  // Node 2 of 3 never comes.
  std::vector<JobWorldOptions> options = {OptionsFor("train-2", 0, 0, 3, within),
                                          OptionsFor("train-2", 0, 1, 3, within)};
  const Clock::time_point start = Clock::now();
  auto worlds = FormAll(store, options);
  const auto took = Clock::now() - start;
  for (const auto& world : worlds) {
    ASSERT_FALSE(world.ok());
    EXPECT_EQ(world.status().code(), absl::StatusCode::kDeadlineExceeded) << world.status();
    EXPECT_THAT(world.status().message(), HasSubstr("node 2 has not arrived"));
    EXPECT_THAT(world.status().message(), HasSubstr("job 'train-2'"));
    EXPECT_THAT(world.status().message(), Not(HasSubstr("node 0 has")));
  }
  EXPECT_GE(took, within - std::chrono::milliseconds(100));
  EXPECT_LT(took, within + std::chrono::seconds(5));
}

TEST(JobWorldTest, JobsAndGenerationsOnOneStoreDoNotMix) {
  ::gloo::rendezvous::HashStore store;
  // Three worlds of two nodes each form at once on the same store: job a
  // twice (generations 0 and 1), and job b.
  std::vector<JobWorldOptions> options;
  for (const auto& [job, generation] :
       std::vector<std::pair<std::string, uint64_t>>{{"a", 0}, {"a", 1}, {"b", 0}}) {
    for (int node = 0; node < 2; ++node) {
      options.push_back(OptionsFor(job, generation, node, 2, std::chrono::seconds(20)));
      options.back().local_size = static_cast<int32_t>(10 * options.size());
    }
  }
  auto worlds = FormAll(store, options);
  for (size_t i = 0; i < worlds.size(); ++i) {
    ASSERT_TRUE(worlds[i].ok()) << worlds[i].status();
    // Each world met its own partner only.
    const size_t partner = i ^ 1;
    EXPECT_EQ((*worlds[i])->layout().local_sizes[(*worlds[i])->node() == 0 ? 1 : 0],
              options[partner].local_size);
  }
  OnEveryNode(static_cast<int>(worlds.size()), [&](int i) {
    const int partner = i ^ 1;
    EXPECT_EQ(SumOver((*worlds[i])->context(), i), i + partner);
  });

  // Forming job a's generation 0 again finds its places taken.
  auto again = FormJob(store, "a", 0, 2, std::chrono::seconds(2));
  for (const auto& world : again) {
    ASSERT_FALSE(world.ok());
    EXPECT_EQ(world.status().code(), absl::StatusCode::kFailedPrecondition) << world.status();
    EXPECT_THAT(world.status().message(), HasSubstr("place is taken"));
  }
}

TEST(JobWorldTest, DisagreeingSettingsFailOnEveryNodeAlike) {
  ::gloo::rendezvous::HashStore store;
  std::vector<JobWorldOptions> options;
  for (int node = 0; node < 3; ++node) {
    options.push_back(OptionsFor("train-3", 0, node, 3, std::chrono::seconds(20)));
  }
  options[2].settings = "fusion_threshold_bytes 1024";
  auto worlds = FormAll(store, options);
  for (const auto& world : worlds) {
    ASSERT_FALSE(world.ok());
    EXPECT_EQ(world.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(world.status().message(), worlds[0].status().message());
    EXPECT_THAT(world.status().message(),
                HasSubstr("node 2 (host-c) runs with fusion_threshold_bytes 1024 but node 0 "
                          "(host-a) with fusion_threshold_bytes 67108864"));
  }
}

TEST(JobWorldTest, BadPlaceIsRefused) {
  ::gloo::rendezvous::HashStore store;
  JobWorldOptions options = OptionsFor("train-4", 0, 3, 3, std::chrono::seconds(1));
  auto world = JobWorld::Form(store, options);
  EXPECT_EQ(world.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SetGroupsTest, SetsOnSomeNodesGetGroupsOfTheirOwn) {
  constexpr int kNodes = 3;
  ::gloo::rendezvous::HashStore store;
  auto worlds = FormJob(store, "train-5", 0, kNodes);
  std::vector<std::unique_ptr<SetGroups>> groups;
  for (auto& world : worlds) {
    ASSERT_TRUE(world.ok()) << world.status();
    groups.push_back(std::make_unique<SetGroups>(**world));
  }
  // Local sizes 1, 2, 3: ranks 0 | 1 2 | 3 4 5.
  const job::ProcessSet global{0, {0, 1, 2, 3, 4, 5}};
  const job::ProcessSet first{1, {0, 3, 4}};  // nodes 0 and 2
  const job::ProcessSet second{2, {2, 5}};    // nodes 1 and 2
  const job::ProcessSet local{3, {1, 2}};     // node 1 alone
  OnEveryNode(kNodes, [&](int node) {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(20);
    for (const job::ProcessSet* set : {&global, &first, &second, &local}) {
      const absl::Status added = groups[node]->Add(*set, deadline);
      EXPECT_TRUE(added.ok()) << added;
    }
  });
  EXPECT_EQ(groups[1]->Find(1), nullptr);
  EXPECT_EQ(groups[0]->Find(2), nullptr);
  for (int node = 0; node < kNodes; ++node) EXPECT_EQ(groups[node]->Find(3), nullptr);
  auto span = groups[2]->Find(1);
  ASSERT_NE(span, nullptr);
  EXPECT_EQ(span->nodes, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(span->index, 1);
  EXPECT_EQ(span->count, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ContextOf(*span)->size, 2);
  EXPECT_EQ(ContextOf(*span)->rank, 1);
  EXPECT_EQ(ContextOf(*groups[0]->Find(0)), (*worlds[0])->context());

  // Each set's group reduces among its nodes only (node n contributes n+1).
  OnEveryNode(kNodes, [&](int node) {
    EXPECT_EQ(SumOver(ContextOf(*groups[node]->Find(0)), node + 1), 6);
    if (auto in_first = groups[node]->Find(1)) {
      EXPECT_EQ(SumOver(ContextOf(*in_first), node + 1), 4);
    }
    if (auto in_second = groups[node]->Find(2)) {
      EXPECT_EQ(SumOver(ContextOf(*in_second), node + 1), 5);
    }
  });

  // A set removed and created again (same id, other nodes) rendezvous anew.
  const job::ProcessSet again{1, {1, 3}};  // nodes 1 and 2
  OnEveryNode(kNodes, [&](int node) {
    groups[node]->Remove(1);
    const absl::Status added = groups[node]->Add(again, Clock::now() + std::chrono::seconds(20));
    EXPECT_TRUE(added.ok()) << added;
    if (auto span_again = groups[node]->Find(1)) {
      EXPECT_EQ(SumOver(ContextOf(*span_again), node + 1), 5);
    }
  });
  EXPECT_EQ(groups[0]->Find(1), nullptr);
  EXPECT_NE(groups[1]->Find(1), nullptr);
}

TEST(SetGroupsTest, SetWhoseOtherNodeNeverComesFailsNamingIt) {
  constexpr int kNodes = 3;
  ::gloo::rendezvous::HashStore store;
  auto worlds = FormJob(store, "train-6", 0, kNodes);
  for (auto& world : worlds) ASSERT_TRUE(world.ok()) << world.status();
  SetGroups groups(**worlds[0]);
  // Node 2 never creates set 1.
  const absl::Status added =
      groups.Add(job::ProcessSet{1, {0, 3}}, Clock::now() + std::chrono::milliseconds(500));
  EXPECT_EQ(added.code(), absl::StatusCode::kDeadlineExceeded) << added;
  EXPECT_THAT(added.message(), HasSubstr("process set 1"));
  EXPECT_THAT(added.message(), HasSubstr("node 2 (host-c), which never arrived"));
}

}  // namespace
}  // namespace collective::daemon::gloo
