// collective::Client: point-to-point messages (send and receive). The daemon
// matches them (daemon/negotiation/message_matcher.h) and copies the send's
// bytes once into the receiver's result: its arena or result segment, or for
// CUDA tensors its device memory (a copy on one device, NCCL between two).
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_core.h"
#include "client/request_builder.h"
#include "collective/client.h"
#include "common/status_macros.h"

namespace collective {
namespace {

using internal::PreparedRequest;

// The daemon names a message by its ranks and tag (timeline, errors); the
// request's name only labels it in logs.
constexpr char kSendName[] = "__collective__.send";
constexpr char kRecvName[] = "__collective__.recv";

// What the client can judge itself, so that argument errors surface at the
// call: the peer is a rank of the set and the tag is not negative.
absl::Status CheckMessage(internal::ClientCore& core, absl::string_view what, int peer, int tag,
                          int32_t process_set) {
  ASSIGN_OR_RETURN(const ProcessSet set, core.FindProcessSet(process_set));
  if (peer < 0 || peer >= set.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " rank ", peer,
                                                   ": not a rank of process set ", process_set,
                                                   " (size ", set.size(), ")"));
  }
  if (tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " rank ", peer, ": tag ", tag, " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Client::Handle> SubmitMessage(internal::ClientCore& core, PreparedRequest prepared) {
  std::vector<PreparedRequest> requests;
  requests.push_back(std::move(prepared));
  ASSIGN_OR_RETURN(std::vector<Client::Handle> handles, core.Submit(std::move(requests), false));
  return handles.front();
}

}  // namespace

absl::StatusOr<Client::Handle> Client::SendAsync(const TensorView& input, int dest, int tag,
                                                 int32_t process_set) {
  RETURN_IF_ERROR(CheckMessage(*core_, "send to", dest, tag, process_set));
  ASSIGN_OR_RETURN(PreparedRequest prepared, internal::PrepareData(*core_, v1::COLLECTIVE_SEND,
                                                                   kSendName, input, process_set));
  prepared.request.set_peer_rank(dest);
  prepared.request.set_tag(tag);
  return SubmitMessage(*core_, std::move(prepared));
}

absl::StatusOr<Client::Handle> Client::RecvAsync(const TensorView& like, int source, int tag,
                                                 int32_t process_set, void* output,
                                                 size_t output_bytes) {
  RETURN_IF_ERROR(CheckMessage(*core_, "receive from", source, tag, process_set));
  ASSIGN_OR_RETURN(
      PreparedRequest prepared,
      internal::PrepareDescription(*core_, v1::COLLECTIVE_RECV, kRecvName, like, process_set));
  const uint64_t bytes = prepared.request.length();
  if (like.device == Device::kCuda) {
    // The message lands in device memory: `output`, else `like`'s own.
    if (output == nullptr) {
      if (like.data == nullptr && bytes > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "receive from rank ", source, ": a CUDA receive needs an output, or `like`'s data"));
      }
      output = const_cast<void*>(like.data);  // the caller's own buffer, written in place
      output_bytes = bytes;
    }
    prepared.request.set_memory(v1::MEMORY_KIND_CUDA);
    prepared.cuda = internal::CudaTensor{.input = output, .stream = like.cuda_stream};
  }
  if (output != nullptr && output_bytes < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("receive from rank ", source,
                                                   ": the output holds ", output_bytes,
                                                   " bytes; the message has ", bytes));
  }
  prepared.request.set_peer_rank(source);
  prepared.request.set_tag(tag);
  internal::SetOutput(prepared, output, output_bytes);
  internal::SetOutputInArena(*core_, prepared);
  return SubmitMessage(*core_, std::move(prepared));
}

absl::Status Client::Send(const TensorView& input, int dest, int tag, int32_t process_set) {
  ASSIGN_OR_RETURN(const Handle handle, SendAsync(input, dest, tag, process_set));
  return Wait(handle).status();
}

absl::StatusOr<Result> Client::Recv(const TensorView& like, int source, int tag,
                                    int32_t process_set, void* output, size_t output_bytes) {
  ASSIGN_OR_RETURN(const Handle handle,
                   RecvAsync(like, source, tag, process_set, output, output_bytes));
  return Wait(handle);
}

}  // namespace collective
