// collective-hostile-worker: a client of another uid, in a job of its own,
// that reaches for another job of the same daemon (several_jobs_test). It
// speaks the wire API itself (raw_client.h), so it can send what
// libcollective never would:
//   - shm_open of the other job's segments (--segments A,B,...);
//   - requests whose input or output lies outside its own arena, where
//     the daemon's mappings of other clients' memory could be;
//   - releases of request ids it never held (--release-ids FIRST,LAST:
//     the other job's);
//   - allreduces under the other job's tensor names (--names A,B,...),
//     which must combine its own data only.
// It prints one line per attempt ("LABEL: CODE: TEXT" for a refusal) and
// exits 0 when each was refused or kept to itself; else 1, saying why on
// stderr.
//
//   collective-hostile-worker --uid UID [--groups G,...] --segments S,...
//                             --release-ids F,L --names N,...
// with COLLECTIVE_SOCKET and COLLECTIVE_JOB_ID set.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_status.h"
#include "tests/common/worker_args.h"
#include "tests/integration/raw_client.h"

namespace collective::testing {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "hostile-worker: %s\n", message.c_str());
  std::exit(1);
}

std::vector<std::string> List(const Args& args, const std::string& name) {
  return absl::StrSplit(Flag(args, name), ',', absl::SkipEmpty());
}

// Becomes `uid` with primary gid `uid` and the supplementary `groups` only
// (the socket's group, say): a stranger to the other job's uid and gid.
void BecomeUid(uid_t uid, const std::vector<std::string>& group_names) {
  std::vector<gid_t> groups;
  for (const std::string& group : group_names) groups.push_back(std::stoul(group));
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
    Die(absl::StrCat("cannot become uid ", uid, ": ", std::strerror(errno)));
  }
}

void TryOpenSegments(const std::vector<std::string>& segments) {
  for (const std::string& name : segments) {
    const int fd = ::shm_open(("/" + name).c_str(), O_RDONLY, 0);
    if (fd >= 0) Die(absl::StrCat("opened the other job's segment ", name));
    std::printf("open %s: %s\n", name.c_str(), std::strerror(errno));
  }
}

// Submits `request` alone and expects the daemon to refuse it.
void ExpectRefused(RawClient& client, const std::string& label, const v1::TensorRequest& request) {
  if (!client.Submit({request})) Die(absl::StrCat(label, ": cannot submit"));
  const std::optional<shm::Completion> completion = client.NextCompletion();
  if (!completion.has_value()) Die(absl::StrCat(label, ": no completion"));
  if (completion->record.request_id != request.request_id()) {
    Die(absl::StrCat(label, ": completion of request ", completion->record.request_id));
  }
  if (completion->record.status_code == 0) Die(absl::StrCat(label, ": the daemon accepted it"));
  const absl::StatusCode code = StatusCodeFromInt(completion->record.status_code);
  std::printf("%s: %s: %s\n", label.c_str(), absl::StatusCodeToString(code).c_str(),
              completion->text.c_str());
}

// Outside its arena of `arena` bytes, from just past its end to where the
// sum wraps around.
void TryOutsideTheArena(RawClient& client, const std::string& name, uint64_t& id) {
  const uint64_t arena = client.segment().arena_bytes();
  constexpr uint64_t kFar = uint64_t{1} << 40;
  constexpr uint64_t kLast = std::numeric_limits<uint64_t>::max() - 7;
  ExpectRefused(client, "input past the arena", FloatAllreduce(id++, name, arena, 4));
  ExpectRefused(client, "input far past the arena", FloatAllreduce(id++, name, kFar, 4));
  ExpectRefused(client, "input wrapping around", FloatAllreduce(id++, name, kLast, 4));
  ExpectRefused(client, "input longer than the arena",
                FloatAllreduce(id++, name, 0, static_cast<int64_t>(arena / sizeof(float) + 1)));
  for (const auto& [label, output] : std::vector<std::pair<std::string, uint64_t>>{
           {"output past the arena", arena - 8}, {"output far past the arena", kFar}}) {
    v1::TensorRequest request = FloatAllreduce(id++, name, 0, 4);
    request.set_output_offset(output);
    ExpectRefused(client, label, request);
  }
}

// An allreduce of this job's only rank under `name`: its result is its own
// input, whatever another job reduces under the same name meanwhile.
void AllreduceAlone(RawClient& client, const std::string& name, uint64_t id) {
  constexpr int64_t kCount = 64;
  auto* input = reinterpret_cast<float*>(client.segment().arena());
  for (int64_t i = 0; i < kCount; ++i) input[i] = -1.0f - static_cast<float>(i);
  if (!client.Submit({FloatAllreduce(id, name, 0, kCount)})) Die(name + ": cannot submit");
  const std::optional<shm::Completion> completion = client.NextCompletion();
  if (!completion.has_value()) Die(name + ": no completion");
  if (completion->record.request_id != id || completion->record.status_code != 0) {
    Die(absl::StrCat(name, ": request ", completion->record.request_id, " ended with status ",
                     completion->record.status_code, " (", completion->text, ")"));
  }
  const std::vector<std::byte> bytes = client.TakeResult(completion->record);
  if (bytes.size() != kCount * sizeof(float)) Die(name + ": result outside the segment");
  std::vector<float> result(kCount);
  std::memcpy(result.data(), bytes.data(), bytes.size());
  for (int64_t i = 0; i < kCount; ++i) {
    if (result[i] != -1.0f - static_cast<float>(i)) {
      Die(absl::StrCat(name, ": element ", i, " is ", result[i], ", not this job's own"));
    }
  }
  std::printf("%s: its own result\n", name.c_str());
}

int Run(const Args& args) {
  BecomeUid(static_cast<uid_t>(std::stoul(Flag(args, "--uid", "65534"))), List(args, "--groups"));
  const char* socket = std::getenv("COLLECTIVE_SOCKET");
  const char* job = std::getenv("COLLECTIVE_JOB_ID");
  if (socket == nullptr || job == nullptr)
    Die("COLLECTIVE_SOCKET and COLLECTIVE_JOB_ID are needed");
  TryOpenSegments(List(args, "--segments"));

  auto joined = RawClient::JoinJob(socket, 1, 1 << 20, job);
  if (!joined.ok()) Die(absl::StrCat("join: ", joined.status().ToString()));
  RawClient& client = *joined->front();
  const std::vector<std::string> names = List(args, "--names");
  if (names.empty()) Die("--names is needed");
  // Ids far from the other job's, so that its ids are ones this client
  // never held.
  uint64_t id = uint64_t{1} << 32;
  TryOutsideTheArena(client, names.front(), id);

  const std::vector<std::string> range = List(args, "--release-ids");
  if (range.size() != 2) Die("--release-ids takes FIRST,LAST");
  v1::ClientMessage releases;
  for (uint64_t victim = std::stoull(range[0]); victim <= std::stoull(range[1]); ++victim) {
    releases.add_released(victim);
  }
  // Releases ride with a submission: once it completes, they were taken.
  *releases.mutable_submit()->add_requests() = FloatAllreduce(id, names.front(), 0, 64);
  if (!client.Send(releases)) Die("cannot send the releases");
  const std::optional<shm::Completion> carrier = client.NextCompletion();
  if (!carrier.has_value() || carrier->record.request_id != id ||
      carrier->record.status_code != 0) {
    Die("the submission that carried the releases did not complete");
  }
  std::printf("released the other job's request ids %s to %s\n", range[0].c_str(),
              range[1].c_str());
  ++id;

  for (const std::string& name : names) AllreduceAlone(client, name, id++);
  if (absl::Status left = client.Leave(); !left.ok()) Die(left.ToString());
  return 0;
}

}  // namespace
}  // namespace collective::testing

int main(int argc, char** argv) {
  return collective::testing::Run(collective::testing::Args(argv + 1, argv + argc));
}
