// collective._core.Client: the connection to collectived, its topology,
// process sets, timeline, and waiting for requests. Every call that can block
// (registering, waiting, process-set changes, the timeline's round trip to
// the daemon) releases the GIL, so that other Python threads, the data
// loader's among them, run meanwhile.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "absl/time/time.h"
#include "bindings.h"
#include "collective/client.h"
#include "errors.h"

namespace collective::python {
namespace {

namespace py = pybind11;

std::unique_ptr<Client> Connect(std::vector<std::vector<int>> static_process_sets,
                                std::string socket_path, std::string job_id, int local_rank,
                                int local_size, uint64_t arena_bytes, double register_timeout_s,
                                std::shared_ptr<ConnectCancellation> cancellation) {
  ClientOptions options;
  options.cancellation = std::move(cancellation);
  options.static_process_sets = std::move(static_process_sets);
  options.socket_path = std::move(socket_path);
  options.job_id = std::move(job_id);
  options.local_rank = local_rank;
  options.local_size = local_size;
  options.arena_bytes = arena_bytes;
  options.register_timeout = absl::Seconds(register_timeout_s);
  py::gil_scoped_release release;
  return ValueOrThrow(Client::Connect(std::move(options)), ErrorPhase::kCall);
}

std::unique_ptr<Result> Wait(Client& client, Client::Handle handle) {
  absl::StatusOr<Result> result;
  {
    py::gil_scoped_release release;
    result = client.Wait(handle);
  }
  return std::make_unique<Result>(ValueOrThrow(std::move(result), ErrorPhase::kWait));
}

std::pair<int32_t, std::vector<int>> AddProcessSet(Client& client, std::vector<int> ranks) {
  py::gil_scoped_release release;
  ProcessSet set = ValueOrThrow(client.AddProcessSet(std::move(ranks)), ErrorPhase::kCall);
  return {set.id, std::move(set.ranks)};
}

// A question about one process set, answered by the client without the daemon.
template <typename T>
auto SetQuery(absl::StatusOr<T> (Client::*query)(int32_t) const) {
  return [query](const Client& client, int32_t id) {
    return ValueOrThrow((client.*query)(id), ErrorPhase::kCall);
  };
}

std::vector<std::pair<int32_t, std::vector<int>>> ProcessSets(const Client& client) {
  std::vector<std::pair<int32_t, std::vector<int>>> sets;
  for (ProcessSet& set : client.ProcessSets()) sets.emplace_back(set.id, std::move(set.ranks));
  return sets;
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<ConnectCancellation, std::shared_ptr<ConnectCancellation>>(
      m, "ConnectCancellation",
      "Cancels a Client.connect that waits for its job to form, from another thread: that "
      "connect raises, and the daemon forgets the registration.")
      .def(py::init<>())
      .def("cancel", &ConnectCancellation::Cancel, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("cancelled", &ConnectCancellation::cancelled);
  py::class_<Client, std::unique_ptr<Client>>(m, "Client", "A trainer's connection to collectived.")
      .def_static("connect", &Connect,
                  py::arg("static_process_sets") = std::vector<std::vector<int>>{},
                  py::arg("socket_path") = "", py::arg("job_id") = "", py::arg("local_rank") = -1,
                  py::arg("local_size") = -1, py::arg("arena_bytes") = 0,
                  py::arg("register_timeout_s") = 300.0, py::arg("cancellation") = nullptr,
                  "Registers with the daemon and waits until the whole job has formed. Unset "
                  "arguments come from the environment (COLLECTIVE_SOCKET, COLLECTIVE_JOB_ID, "
                  "COLLECTIVE_LOCAL_RANK/SIZE, ...).")
      .def_property_readonly(
          "address", [](Client& self) { return reinterpret_cast<std::uintptr_t>(&self); },
          "The collective::Client* itself, which a plugin sharing this connection through the "
          "C ABI passes to collective_borrow (collective.tensorflow's ops do).")
      .def_property_readonly("rank", &Client::rank)
      .def_property_readonly("size", &Client::size)
      .def_property_readonly("local_rank", &Client::local_rank)
      .def_property_readonly("local_size", &Client::local_size)
      .def_property_readonly("cross_rank", &Client::cross_rank)
      .def_property_readonly("cross_size", &Client::cross_size)
      .def_property_readonly("is_homogeneous", &Client::is_homogeneous)
      .def_property_readonly("daemon_gpu_path", &Client::daemon_gpu_path,
                             "Whether the daemon takes CUDA tensors (built with CUDA and NCCL).")
      .def("poll", &Client::Poll, py::arg("handle"), py::call_guard<py::gil_scoped_release>(),
           "True when wait(handle) would not block.")
      .def("wait", &Wait, py::arg("handle"),
           "Waits for a request; returns its Result or raises the error every rank received.")
      .def("process_sets", &ProcessSets, "The (id, ranks) of every process set this client knows.")
      .def("add_process_set", &AddProcessSet, py::arg("ranks"),
           "Adds a process set (every rank must call it); returns its (id, ranks).")
      .def(
          "remove_process_set",
          [](Client& client, int32_t id) {
            py::gil_scoped_release release;
            ThrowIfError(client.RemoveProcessSet(id), ErrorPhase::kCall);
          },
          py::arg("id"))
      .def("process_set_rank", SetQuery(&Client::ProcessSetRank), py::arg("id"))
      .def("process_set_size", SetQuery(&Client::ProcessSetSize), py::arg("id"))
      .def("process_set_included", SetQuery(&Client::ProcessSetIncluded), py::arg("id"))
      .def(
          "start_timeline",
          [](Client& client, const std::string& path, bool mark_cycles) {
            py::gil_scoped_release release;
            ThrowIfError(client.StartTimeline(path, mark_cycles), ErrorPhase::kCall);
          },
          py::arg("path"), py::arg("mark_cycles") = false)
      .def("stop_timeline",
           [](Client& client) {
             py::gil_scoped_release release;
             ThrowIfError(client.StopTimeline(), ErrorPhase::kCall);
           })
      .def(
          "close",
          [](Client& client) {
            py::gil_scoped_release release;
            ThrowIfError(client.Close(), ErrorPhase::kCall);
          },
          "Leaves the job. Idempotent.");
}

}  // namespace collective::python
