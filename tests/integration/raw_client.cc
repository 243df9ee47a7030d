#include "tests/integration/raw_client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "shm/segment_layout.h"

namespace collective::testing {
namespace {

// No stream of a test lives longer than this, whatever goes wrong.
constexpr absl::Duration kStreamLifetime = absl::Seconds(120);
// Where CheckAllreduce puts its input, clear of what tests place at 0.
constexpr uint64_t kCheckOffset = 64 << 10;

}  // namespace

std::unique_ptr<v1::CollectiveService::Stub> NewRawStub(const std::string& socket) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::CollectiveService::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), arguments));
}

v1::RegisterRequest RawRegisterRequest(int32_t local_rank, int32_t local_size, uint64_t arena_bytes,
                                       const std::string& job_id) {
  v1::RegisterRequest request;
  request.set_job_id(job_id);
  request.set_local_rank(local_rank);
  request.set_local_size(local_size);
  request.set_arena_bytes(arena_bytes);
  request.set_pid(::getpid());
  request.set_layout_version(shm::kLayoutVersion);
  request.set_client_version("raw-client");
  return request;
}

absl::StatusOr<v1::RegisterResponse> CallRegister(const std::string& socket,
                                                  const v1::RegisterRequest& request,
                                                  absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::RegisterResponse response;
  const grpc::Status status = NewRawStub(socket)->Register(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

RawSession::RawSession(const std::string& socket) : stub_(NewRawStub(socket)) {
  context_.set_deadline(absl::ToChronoTime(absl::Now() + kStreamLifetime));
  stream_ = stub_->Session(&context_);
  reader_ = std::thread([this] { ReadLoop(); });
}

RawSession::~RawSession() {
  // Harmless once the daemon has ended the call; otherwise ends it, so that
  // neither the reader nor Finish waits for the daemon.
  if (!final_status_.has_value()) context_.TryCancel();
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
    changed_.notify_all();
  }
  reader_.join();
  if (!final_status_.has_value()) final_status_ = stream_->Finish();
}

void RawSession::ReadLoop() {
  v1::DaemonMessage message;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return !paused_ || closing_; });
    }
    if (!stream_->Read(&message)) break;
    std::lock_guard lock(mutex_);
    messages_.push_back(std::move(message));
    ++read_;
    message.Clear();
    changed_.notify_all();
  }
  std::lock_guard lock(mutex_);
  ended_ = true;
  changed_.notify_all();
}

bool RawSession::Write(const v1::ClientMessage& message) { return stream_->Write(message); }

bool RawSession::SendAttach(uint64_t client_id, const std::string& token) {
  v1::ClientMessage message;
  message.mutable_attach()->set_client_id(client_id);
  message.mutable_attach()->set_session_token(token);
  return Write(message);
}

void RawSession::WritesDone() { stream_->WritesDone(); }

void RawSession::Cancel() { context_.TryCancel(); }

void RawSession::PauseReading() {
  std::lock_guard lock(mutex_);
  paused_ = true;
}

void RawSession::ResumeReading() {
  std::lock_guard lock(mutex_);
  paused_ = false;
  changed_.notify_all();
}

size_t RawSession::MessagesRead() {
  std::lock_guard lock(mutex_);
  return read_;
}

std::optional<v1::DaemonMessage> RawSession::Next(absl::Duration timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                      [this] { return !messages_.empty() || ended_; });
  if (messages_.empty()) return std::nullopt;
  v1::DaemonMessage message = std::move(messages_.front());
  messages_.pop_front();
  return message;
}

std::optional<v1::DaemonMessage> RawSession::NextOf(v1::DaemonMessage::BodyCase kind,
                                                    absl::Duration timeout) {
  std::unique_lock lock(mutex_);
  auto first = messages_.end();
  changed_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout), [&] {
    first = std::find_if(messages_.begin(), messages_.end(),
                         [kind](const v1::DaemonMessage& m) { return m.body_case() == kind; });
    return first != messages_.end() || ended_;
  });
  if (first == messages_.end()) return std::nullopt;
  v1::DaemonMessage message = std::move(*first);
  messages_.erase(first);
  return message;
}

absl::StatusOr<grpc::Status> RawSession::AwaitEnd(absl::Duration timeout) {
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, deadline, [this] { return ended_; })) {
      return absl::DeadlineExceededError("the daemon did not end the session stream");
    }
  }
  if (!final_status_.has_value()) {
    // Reads also stop when a message from the daemon cannot be parsed; the
    // call is still open then, and Finish would wait for the daemon: cancel
    // it at the deadline.
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    std::thread watchdog([&] {
      std::unique_lock lock(mutex);
      if (!done.wait_until(lock, deadline, [&] { return finished; })) {
        unparsed_ = true;
        context_.TryCancel();
      }
    });
    final_status_ = stream_->Finish();
    {
      std::lock_guard lock(mutex);
      finished = true;
    }
    done.notify_all();
    watchdog.join();
  }
  return *final_status_;
}

std::string RawSession::DescribeEnd(absl::Duration timeout) {
  const auto end = AwaitEnd(timeout);
  if (!end.ok()) return "the session is still open";
  if (unparsed_) {
    return "reads stopped while the daemon kept the call open: a message from it could not be "
           "parsed";
  }
  return absl::StrCat("the session ended with code ", end->error_code(), ": ",
                      end->error_message());
}

RawClient::RawClient(v1::RegisterResponse registration, std::unique_ptr<shm::ClientSegment> segment,
                     std::unique_ptr<shm::ResultSegment> results,
                     std::unique_ptr<shm::DoorbellSegment> doorbell,
                     std::unique_ptr<RawSession> session)
    : registration_(std::move(registration)),
      segment_(std::move(segment)),
      results_(std::move(results)),
      doorbell_(std::move(doorbell)),
      session_(std::move(session)),
      ring_(*segment_),
      submissions_(segment_->header(), segment_->submit_ring(), segment_->submit_bytes(),
                   doorbell_->word()) {}

absl::StatusOr<std::unique_ptr<RawClient>> RawClient::Attach(const std::string& socket,
                                                             v1::RegisterResponse response) {
  auto segment = shm::ClientSegment::Open(response.arena().name(), response.arena().size_bytes(),
                                          response.epoch(), response.client_id());
  if (!segment.ok()) return segment.status();
  auto results = shm::ResultSegment::OpenReadOnly(
      response.results().name(), response.results().size_bytes(), response.epoch());
  if (!results.ok()) return results.status();
  auto doorbell = shm::DoorbellSegment::Open(response.doorbell().name(),
                                             response.doorbell().size_bytes(), response.epoch());
  if (!doorbell.ok()) return doorbell.status();
  auto session = std::make_unique<RawSession>(socket);
  session->SendAttach(response.client_id(), response.session_token());
  const auto attached = session->Next();
  if (!attached.has_value() || !attached->has_attached()) {
    auto end = session->AwaitEnd(absl::Seconds(1));
    return absl::InternalError(absl::StrCat(
        "attach failed: ", attached.has_value() ? attached->DebugString() : "no answer",
        end.ok() ? absl::StrCat("; stream ended: ", end->error_message()) : ""));
  }
  return std::unique_ptr<RawClient>(new RawClient(std::move(response), std::move(*segment),
                                                  std::move(*results), std::move(*doorbell),
                                                  std::move(session)));
}

absl::StatusOr<std::vector<v1::RegisterResponse>> RegisterJob(const std::string& socket,
                                                              int32_t local_size,
                                                              uint64_t arena_bytes,
                                                              const std::string& job_id) {
  std::vector<absl::StatusOr<v1::RegisterResponse>> results(local_size,
                                                            absl::UnknownError("not registered"));
  {
    std::vector<std::jthread> threads;
    for (int32_t rank = 0; rank < local_size; ++rank) {
      threads.emplace_back([&, rank] {
        results[rank] =
            CallRegister(socket, RawRegisterRequest(rank, local_size, arena_bytes, job_id));
      });
    }
  }
  std::vector<v1::RegisterResponse> responses;
  for (auto& result : results) {
    if (!result.ok()) return result.status();
    responses.push_back(std::move(*result));
  }
  return responses;
}

absl::StatusOr<std::vector<std::unique_ptr<RawClient>>> RawClient::JoinJob(
    const std::string& socket, int32_t local_size, uint64_t arena_bytes,
    const std::string& job_id) {
  auto responses = RegisterJob(socket, local_size, arena_bytes, job_id);
  if (!responses.ok()) return responses.status();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (auto& response : *responses) {
    auto client = Attach(socket, std::move(response));
    if (!client.ok()) return client.status();
    clients.push_back(std::move(*client));
  }
  return clients;
}

bool RawClient::Submit(const std::vector<v1::TensorRequest>& requests) {
  v1::ClientMessage message;
  for (const v1::TensorRequest& request : requests)
    *message.mutable_submit()->add_requests() = request;
  return Send(std::move(message));
}

bool RawClient::Send(v1::ClientMessage message) {
  for (uint64_t id : releases_) message.add_released(id);
  const std::string payload = message.SerializeAsString();
  if (!submissions_.TryPush(payload.data(), payload.size())) return false;
  releases_.clear();
  submissions_.Ring();
  return true;
}

std::optional<shm::CompletionRecord> RawClient::NextRecord(absl::Duration timeout) {
  std::optional<shm::Completion> completion = NextCompletion(timeout);
  if (!completion.has_value()) return std::nullopt;
  return completion->record;
}

std::optional<shm::Completion> RawClient::NextCompletion(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const uint32_t word = ring_.WakeWord();
    if (auto completion = ring_.TryPop()) return completion;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    ring_.BeginSleep();
    ring_.Sleep(word, left);
    ring_.EndSleep();
  }
}

std::vector<std::byte> RawClient::TakeResult(const shm::CompletionRecord& record) {
  releases_.push_back(record.request_id);
  if (record.result_offset > results_->data_bytes() ||
      record.result_bytes > results_->data_bytes() - record.result_offset) {
    return {};
  }
  const std::byte* begin = results_->data() + record.result_offset;
  return std::vector<std::byte>(begin, begin + record.result_bytes);
}

absl::Status RawClient::Leave(absl::Duration timeout) {
  // Pending releases stay unsent: the daemon releases everything at leave
  // (and the segment may be gone, truncated by a test).
  v1::ClientMessage message;
  message.mutable_leave();
  session_->Write(message);
  session_->WritesDone();
  auto end = session_->AwaitEnd(timeout);
  if (!end.ok()) return end.status();
  return FromGrpcStatus(*end);
}

v1::TensorRequest FloatAllreduce(uint64_t request_id, const std::string& name, uint64_t offset,
                                 int64_t count) {
  v1::TensorRequest request;
  request.set_request_id(request_id);
  request.set_name(name);
  request.set_collective(v1::COLLECTIVE_ALLREDUCE);
  request.set_op(v1::REDUCE_OP_SUM);
  request.set_dtype(v1::DATA_TYPE_FLOAT32);
  request.add_shape(count);
  request.set_offset(offset);
  request.set_length(static_cast<uint64_t>(count) * sizeof(float));
  return request;
}

std::string CheckAllreduce(const std::vector<RawClient*>& clients, uint64_t request_id,
                           const std::string& name, int64_t count) {
  for (RawClient* client : clients) {
    auto* input = reinterpret_cast<float*>(client->segment().arena() + kCheckOffset);
    for (int64_t i = 0; i < count; ++i) {
      input[i] = static_cast<float>((client->rank() + 1) * 1000 + i);
    }
    const v1::TensorRequest request = FloatAllreduce(request_id, name, kCheckOffset, count);
    if (!client->Submit({request})) {
      return absl::StrCat("rank ", client->rank(), ": cannot submit");
    }
  }
  std::string problems;
  for (RawClient* client : clients) {
    const auto completion = client->NextCompletion();
    if (!completion.has_value()) {
      absl::StrAppend(&problems, "rank ", client->rank(), ": no completion of '", name, "'\n");
      continue;
    }
    const shm::CompletionRecord* record = &completion->record;
    if (record->request_id != request_id || record->status_code != 0) {
      absl::StrAppend(&problems, "rank ", client->rank(), ": record for request ",
                      record->request_id, " with status ", record->status_code, " (",
                      completion->text, ")\n");
      continue;
    }
    if (record->result_bytes != static_cast<uint64_t>(count) * sizeof(float) ||
        record->result_dim0 != count) {
      absl::StrAppend(&problems, "rank ", client->rank(), ": result of ", record->result_bytes,
                      " bytes, dim0 ", record->result_dim0, "\n");
      continue;
    }
    const std::vector<std::byte> bytes = client->TakeResult(*record);
    std::vector<float> result(static_cast<size_t>(count));
    if (bytes.size() != result.size() * sizeof(float)) {
      absl::StrAppend(&problems, "rank ", client->rank(), ": result outside the segment\n");
      continue;
    }
    std::memcpy(result.data(), bytes.data(), bytes.size());
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0;
      for (const RawClient* other : clients) {
        expected += static_cast<float>((other->rank() + 1) * 1000 + i);
      }
      if (result[static_cast<size_t>(i)] != expected) {
        absl::StrAppend(&problems, "rank ", client->rank(), ": element ", i, " is ",
                        result[static_cast<size_t>(i)], ", expected ", expected, "\n");
        break;
      }
    }
  }
  return problems;
}

std::string StopAndCheck(DaemonProcess& daemon) {
  std::string problems;
  const auto status = daemon.Status();
  if (!status.ok()) absl::StrAppend(&problems, "Status failed: ", status.status().message(), "\n");
  const std::optional<int> exit = daemon.Stop();
  const std::string stderr_text = daemon.process().Stderr();
  if (!ExitedCleanly(exit)) {
    absl::StrAppend(&problems, "collectived did not exit cleanly: ",
                    exit.has_value() ? daemon.process().Describe(*exit) : "still running", "\n");
  }
  for (const char* crash :
       {"critical", "Segmentation", "terminate called", "Aborted", "core dumped", "Sanitizer"}) {
    if (absl::StrContains(stderr_text, crash)) {
      absl::StrAppend(&problems, "stderr mentions '", crash, "':\n", stderr_text, "\n");
    }
  }
  for (const std::string& segment : daemon.Segments()) {
    absl::StrAppend(&problems, "segment left behind: /dev/shm/", segment, "\n");
    // Reported; removed all the same, so that a failure leaves nothing behind.
    ::shm_unlink(("/" + segment).c_str());
  }
  return problems;
}

}  // namespace collective::testing
