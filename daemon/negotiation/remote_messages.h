// Negotiation of point-to-point messages between ranks of different nodes: a
// rendezvous over the control messages among the daemons (control_link.h).
// The receiver's node, once a receive from a rank of another node is
// posted, tells the sender's node (MessageNotice: the receive's dtype,
// shape, bytes, set, source, destination, tag and this node's id for it).
// The sender's node matches notices with its own sends of the same (set,
// source, destination, tag) in order — the k-th send meets the k-th
// receive, MPI's non-overtaking rule, as message_matcher.h does on one node
// — checks that they agree (mismatch.h's sentence, which both ranks then
// receive), and answers (MessageReply): the disagreement, or the send's
// request and either its bytes (small messages) or word that they follow
// on the set's communicator, tagged by the notice's id. Moving the bytes
// and completing the halves is the job run's (engine/point_to_point.h).
//
// A notice's order is its posting order on the receiver's node, and the
// control messages between two nodes do not overtake each other, so the
// sender's node sees every receive of a (set, source, destination, tag) in
// the receiver's order. Engine thread only, like the negotiator that owns
// the link.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collective/v1/negotiation.pb.h"
#include "daemon/job/node_layout.h"
#include "daemon/job/process_sets.h"
#include "daemon/negotiation/control_link.h"
#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/message_matcher.h"

namespace collective::daemon::negotiation {

class RemoteMessages {
 public:
  // `link` outlives this object (the negotiator owns it).
  RemoteMessages(ControlLink& link, job::NodeLayout layout);

  // A local send met the receive of another node, and they agree: the
  // engine answers it (Answer) and moves the bytes.
  struct MatchedSend {
    Submission send;     // this node's
    Submission receive;  // the other node's (no client), as its notice said
    int node = 0;        // the receiver's
    uint64_t id = 0;     // the receiver's node's id of the receive
  };
  // A local receive's answer from the sender's node: the send's request
  // and its bytes (inline, or to follow), or the disagreement (`status`).
  struct AnsweredReceive {
    Submission receive;  // this node's
    Submission send;     // the other node's (no client)
    int node = 0;        // the sender's
    uint64_t id = 0;
    absl::Status status;
    bool data_follows = false;
    std::string data;
  };
  // What happened since the last Poll.
  struct Polled {
    std::vector<MatchedSend> sends;
    std::vector<AnsweredReceive> receives;
    // Local sends that disagree with their receive: each fails with its
    // status (the receiver's node heard the same).
    std::vector<std::pair<Submission, absl::Status>> refused;
    // Answers whose bytes follow for receives no longer here (the job
    // failed, the set went): the sender's node sends them all the same, so
    // they must be taken (no `receive`; `send` says how many bytes).
    std::vector<AnsweredReceive> orphaned;
  };

  // A local send to (or receive from) `set`'s rank request.peer_rank, which
  // lives on another node. A receive's notice goes out at once; a send
  // meets the notice that waits for it, if one does.
  absl::Status Add(Submission submission, const job::ProcessSet& set);

  // Takes in the other nodes' notices and answers, and returns what
  // matched or was answered since the last call. An error: the link failed.
  absl::StatusOr<Polled> Poll();

  // Answers a matched send: its bytes travel in the answer, or
  // (`data_follows`) on the set's communicator.
  absl::Status Answer(const MatchedSend& send, absl::string_view data, bool data_follows);

  // Every local half still waiting (the job failed), or those of one set
  // (it was removed): the caller fails each. Notices from other nodes of
  // that set are dropped. `announced`, if given, gets the ids of the
  // receives taken whose notice went out: their answer may still come, with
  // bytes that follow on the set's communicator (Polled::orphaned).
  std::vector<Submission> TakeAll();
  std::vector<Submission> TakeSet(int32_t process_set_id,
                                  std::vector<uint64_t>* announced = nullptr);

  // Local halves waiting for their other half, and the other nodes'
  // receives that wait for a send from a rank here, for status.
  std::vector<WaitingMessage> Waiting() const;

  // Something matched or was answered that Poll has not returned yet.
  bool has_news() const {
    return !polled_.sends.empty() || !polled_.receives.empty() || !polled_.refused.empty() ||
           !polled_.orphaned.empty();
  }
  // No local half waits.
  bool idle() const { return sends_.empty() && receives_.empty() && !has_news(); }

  // The MPI tag a message's bytes carry on the set's communicator: distinct
  // for the receives in flight between two nodes (and above the tags the
  // collectives' transfers could use, which have none).
  static int DataTag(uint64_t id);

 private:
  // Process set, source, destination (set ranks), tag.
  using Key = std::tuple<int32_t, int32_t, int32_t, int32_t>;
  struct Half {
    Submission submission;
    int32_t peer = 0;  // global
  };
  struct Notice {
    int node = 0;
    v1::MessageNotice notice;
    Clock::time_point at;  // when it arrived
  };

  // A local send and a notice met: check, then answer or refuse.
  void Meet(Submission send, Notice notice);
  void OnNotice(int from, v1::MessageNotice notice);
  void OnReply(int from, v1::MessageReply reply);

  ControlLink& link_;
  const job::NodeLayout layout_;
  uint64_t next_id_ = 1;
  // Local sends waiting for a notice, and notices waiting for a local send;
  // at most one of the two is non-empty per key.
  std::map<Key, std::deque<Half>> sends_;
  std::map<Key, std::deque<Notice>> notices_;
  // Local receives whose notice went out, by id.
  std::map<uint64_t, Half> receives_;
  Polled polled_;
};

}  // namespace collective::daemon::negotiation
