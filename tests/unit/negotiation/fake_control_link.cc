#include "tests/unit/negotiation/fake_control_link.h"

#include "absl/strings/str_cat.h"

namespace collective::daemon::negotiation {

class FakeControlLink : public ControlLink {
 public:
  FakeControlLink(FakeControlNetwork& network, int node)
      : network_(network), node_(node), last_heard_(network.nodes_, Clock::now()) {}

  int node() const override { return node_; }
  int nodes() const override { return network_.nodes_; }

  absl::Status Send(int to, ControlTag tag, const google::protobuf::Message& message) override {
    if (to < 0 || to >= network_.nodes_ || to == node_) {
      return absl::InvalidArgumentError(absl::StrCat("node ", node_, " sent to node ", to));
    }
    ++network_.sent_;
    if (network_.cut_off_[static_cast<size_t>(node_)]) return absl::OkStatus();
    network_.mailboxes_[static_cast<size_t>(to)].push_back(
        {.from = node_, .tag = tag, .bytes = message.SerializeAsString()});
    return absl::OkStatus();
  }

  absl::Status Receive(ControlTag tag, std::vector<Received>& out) override {
    std::deque<FakeControlNetwork::Message>& mailbox =
        network_.mailboxes_[static_cast<size_t>(node_)];
    for (auto it = mailbox.begin(); it != mailbox.end();) {
      if (it->tag != tag) {
        ++it;
        continue;
      }
      last_heard_[static_cast<size_t>(it->from)] = Clock::now();
      out.push_back({.from = it->from, .bytes = std::move(it->bytes)});
      it = mailbox.erase(it);
    }
    return absl::OkStatus();
  }

  absl::Status Progress() override { return absl::OkStatus(); }

  Clock::time_point last_heard(int node) const override {
    return last_heard_[static_cast<size_t>(node)];
  }

 private:
  FakeControlNetwork& network_;
  const int node_;
  std::vector<Clock::time_point> last_heard_;
};

FakeControlNetwork::FakeControlNetwork(int nodes)
    : nodes_(nodes), mailboxes_(static_cast<size_t>(nodes)), cut_off_(static_cast<size_t>(nodes)) {}

std::unique_ptr<ControlLink> FakeControlNetwork::LinkOf(int node) {
  return std::make_unique<FakeControlLink>(*this, node);
}

}  // namespace collective::daemon::negotiation
