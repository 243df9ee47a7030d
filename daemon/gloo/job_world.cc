#include "daemon/gloo/job_world.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace collective::daemon::gloo {
namespace {

// A store's wait of 0 ms waits forever (gloo::kNoTimeout); a deadline that
// has passed still looks once.
std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  // Rounded up, so that a wait that times out ends at or after the deadline.
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// Whether `key` is in `store` now (a wait that looks once).
bool Present(::gloo::rendezvous::Store& store, const std::string& key) {
  try {
    store.wait({key}, std::chrono::milliseconds(1));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string MachineHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

std::string NodeKey(int node) { return absl::StrCat("node/", node); }

// What a node publishes under its key as it arrives: its host, local size
// and settings, as length-prefixed fields (every node of a job runs the
// same build on the same architecture).
struct Arrival {
  std::string host;
  int32_t local_size = 0;
  std::string settings;
};

void AppendField(std::vector<char>& out, const void* data, size_t bytes) {
  const char* begin = static_cast<const char*>(data);
  out.insert(out.end(), begin, begin + bytes);
}

void AppendString(std::vector<char>& out, const std::string& text) {
  const auto bytes = static_cast<uint32_t>(text.size());
  AppendField(out, &bytes, sizeof(bytes));
  AppendField(out, text.data(), text.size());
}

std::vector<char> Encode(const Arrival& arrival) {
  std::vector<char> out;
  AppendString(out, arrival.host);
  AppendField(out, &arrival.local_size, sizeof(arrival.local_size));
  AppendString(out, arrival.settings);
  return out;
}

// Reads fields off the front of an arrival; false once one is cut short.
class Reader {
 public:
  explicit Reader(const std::vector<char>& bytes) : bytes_(bytes) {}

  bool Field(void* out, size_t bytes) {
    if (bytes_.size() - at_ < bytes) return false;
    std::memcpy(out, bytes_.data() + at_, bytes);
    at_ += bytes;
    return true;
  }
  bool String(std::string& out) {
    uint32_t bytes = 0;
    if (!Field(&bytes, sizeof(bytes)) || bytes_.size() - at_ < bytes) return false;
    out.assign(bytes_.data() + at_, bytes);
    at_ += bytes;
    return true;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::vector<char>& bytes_;
  size_t at_ = 0;
};

absl::StatusOr<Arrival> Decode(const std::vector<char>& bytes, int node) {
  Arrival arrival;
  Reader reader(bytes);
  if (!reader.String(arrival.host) || !reader.Field(&arrival.local_size, sizeof(int32_t)) ||
      !reader.String(arrival.settings) || !reader.done()) {
    return absl::DataLossError(
        absl::StrCat("node ", node, " published an unreadable arrival (", bytes.size(),
                     " bytes): is it running another build of collectived?"));
  }
  return arrival;
}

absl::Status CheckOptions(const JobWorldOptions& options) {
  if (options.job_id.empty()) return absl::InvalidArgumentError("a job world needs a job id");
  if (options.nodes < 1 || options.node < 0 || options.node >= options.nodes) {
    return absl::InvalidArgumentError(absl::StrCat("job '", options.job_id, "': node ",
                                                   options.node, " of ", options.nodes,
                                                   " is not a place among the job's nodes"));
  }
  return absl::OkStatus();
}

// Publishes this node's arrival and waits for every other node's: the
// hosts, local sizes and settings by node, or which nodes did not come.
absl::StatusOr<std::vector<Arrival>> Gather(::gloo::rendezvous::Store& store,
                                            const JobWorldOptions& options, const Arrival& mine,
                                            const std::string& what) {
  try {
    store.set(NodeKey(options.node), Encode(mine));
  } catch (const std::exception& error) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": node ", options.node, " (", mine.host,
        ") cannot arrive: its place is taken (another daemon joined as node ", options.node,
        ", or the job formed again without a new generation)? The store says: ", error.what()));
  }
  std::vector<std::string> keys;
  for (int node = 0; node < options.nodes; ++node) keys.push_back(NodeKey(node));
  try {
    store.wait(keys, Remaining(options.deadline));
  } catch (const std::exception& error) {
    std::vector<std::string> absent;
    for (int node = 0; node < options.nodes; ++node) {
      if (!Present(store, NodeKey(node))) absent.push_back(absl::StrCat(node));
    }
    if (absent.empty()) {  // every node came after all: the wait failed otherwise
      return absl::UnavailableError(
          absl::StrCat(what, ": waiting for the other nodes failed: ", error.what()));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": node", absent.size() > 1 ? "s " : " ", absl::StrJoin(absent, ", "),
        absent.size() > 1 ? " have" : " has", " not arrived by the deadline (", options.nodes,
        " nodes expected; this is node ", options.node, ", ", mine.host, ")"));
  }
  std::vector<Arrival> arrivals;
  for (int node = 0; node < options.nodes; ++node) {
    if (node == options.node) {
      arrivals.push_back(mine);
      continue;
    }
    std::vector<char> bytes;
    try {
      bytes = store.get(NodeKey(node));
    } catch (const std::exception& error) {
      return absl::UnavailableError(
          absl::StrCat(what, ": reading node ", node, "'s arrival failed: ", error.what()));
    }
    absl::StatusOr<Arrival> arrival = Decode(bytes, node);
    if (!arrival.ok()) return Annotate(arrival.status(), what);
    arrivals.push_back(*std::move(arrival));
  }
  return arrivals;
}

// Every node checks against node 0, so that all report the same error.
absl::Status CheckAgreement(const std::vector<Arrival>& arrivals, const std::string& what) {
  const Arrival& first = arrivals.front();
  for (size_t node = 1; node < arrivals.size(); ++node) {
    const Arrival& arrival = arrivals[node];
    if (arrival.settings != first.settings) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": node ", node, " (", arrival.host, ") runs with ", arrival.settings,
                       " but node 0 (", first.host, ") with ", first.settings,
                       "; the daemons of a job must agree on them"));
    }
    if (arrival.local_size < 1) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": node ", node, " (", arrival.host,
                                                        ") has ", arrival.local_size, " ranks"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<::gloo::transport::Device>> MakeDevice(
    const JobWorldOptions& options, const std::string& what) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options.bind_address;
  attr.iface = options.iface;
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot listen on ",
                                                   !attr.hostname.empty() ? attr.hostname
                                                   : !attr.iface.empty()
                                                       ? absl::StrCat("interface ", attr.iface)
                                                       : "this machine's host name",
                                                   ": ", error.what()));
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<::gloo::Context>> ConnectMesh(
    ::gloo::rendezvous::Store& store, const std::string& prefix,
    std::shared_ptr<::gloo::transport::Device> device, int node, int nodes,
    const std::vector<std::string>& names, Clock::time_point deadline,
    std::chrono::milliseconds operation_timeout) {
  ::gloo::rendezvous::PrefixStore scoped(prefix, store);
  auto context = std::make_shared<::gloo::rendezvous::Context>(node, nodes);
  // Until connected, the deadline bounds every wait (the store's and the
  // connections'); then each operation waits operation_timeout.
  context->setTimeout(Remaining(deadline));
  try {
    context->connectFullMesh(scoped, device);
  } catch (const std::exception& error) {
    // connectFullMesh publishes a node's addresses under its context rank.
    std::vector<std::string> absent;
    for (int peer = 0; peer < nodes; ++peer) {
      if (peer != node && !Present(scoped, absl::StrCat(peer))) absent.push_back(names[peer]);
    }
    const std::string who =
        absent.empty() ? std::string("the other nodes")
                       : absl::StrCat(absl::StrJoin(absent, ", "), ", which never arrived");
    std::string message = absl::StrCat(names[node], " could not connect to ", who,
                                       " (Gloo says: ", error.what(), ")");
    if (!absent.empty() || Clock::now() >= deadline) {
      return absl::DeadlineExceededError(std::move(message));
    }
    return absl::UnavailableError(std::move(message));
  }
  context->setTimeout(operation_timeout);
  return std::shared_ptr<::gloo::Context>(std::move(context));
}

JobWorld::~JobWorld() = default;

std::string JobWorld::NodeName(int of_node) const {
  if (of_node < 0 || of_node >= nodes()) return absl::StrCat("node ", of_node);
  return absl::StrCat("node ", of_node, " (", layout_.hosts[static_cast<size_t>(of_node)], ")");
}

absl::StatusOr<std::unique_ptr<JobWorld>> JobWorld::Form(::gloo::rendezvous::Store& store,
                                                         const JobWorldOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const std::string what =
      absl::StrCat("job '", options.job_id, "' (generation ", options.generation, ")");
  std::unique_ptr<JobWorld> world(new JobWorld());
  world->job_id_ = options.job_id;
  world->generation_ = options.generation;
  world->operation_timeout_ = options.operation_timeout;
  world->scoped_ = std::make_unique<::gloo::rendezvous::PrefixStore>(
      absl::StrCat("collectived/job/", options.job_id, "/generation/", options.generation), store);

  Arrival mine{options.host.empty() ? MachineHostName() : options.host, options.local_size,
               options.settings};
  ASSIGN_OR_RETURN(std::vector<Arrival> arrivals, Gather(*world->scoped_, options, mine, what));
  RETURN_IF_ERROR(CheckAgreement(arrivals, what));
  job::NodeLayout& layout = world->layout_;
  layout.node = options.node;
  layout.local_sizes.clear();
  for (const Arrival& arrival : arrivals) {
    layout.local_sizes.push_back(arrival.local_size);
    layout.hosts.push_back(arrival.host);
  }
  std::vector<std::string> names;
  for (int node = 0; node < options.nodes; ++node) names.push_back(world->NodeName(node));

  ASSIGN_OR_RETURN(world->device_, MakeDevice(options, what));
  ASSIGN_OR_RETURN_WITH(
      world->data_,
      ConnectMesh(*world->scoped_, "data", world->device_, options.node, options.nodes, names,
                  options.deadline, options.operation_timeout),
      absl::StrCat(what, ", data"));
  // The control link waits on its own terms (gloo_control_link.h); the
  // timeout only bounds what Gloo itself waits for.
  ASSIGN_OR_RETURN_WITH(
      world->control_,
      ConnectMesh(*world->scoped_, "control", world->device_, options.node, options.nodes, names,
                  options.deadline, options.operation_timeout),
      absl::StrCat(what, ", control"));
  log::Coord().info("{}: formed among {} nodes [{}] as {}", what, options.nodes,
                    absl::StrJoin(layout.hosts, ", "), world->NodeName(options.node));
  return world;
}

}  // namespace collective::daemon::gloo
