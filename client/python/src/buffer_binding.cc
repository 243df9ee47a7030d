// collective._core.Buffer: a block of the client's shared-memory arena,
// exposed through the Python buffer protocol as writable bytes, so that
//   torch.frombuffer(buffer, dtype=torch.float32, count=n, offset=k)
// is a tensor over arena memory with no copy. A tensor whose data lies in the
// arena is handed to the daemon where it is (no copy into shared memory).
// torch.frombuffer keeps a reference to the Buffer for as long as the tensor
// lives, and the Buffer keeps the client's mapping alive, so the memory stays
// valid even after hvd.shutdown(); it returns to the arena when the last
// tensor over it is gone.
#include <cstdint>
#include <memory>

#include <pybind11/pybind11.h>

#include "bindings.h"
#include "collective/client.h"
#include "errors.h"

namespace collective::python {
namespace {

namespace py = pybind11;

std::unique_ptr<Buffer> Allocate(Client& client, size_t bytes) {
  absl::StatusOr<Buffer> buffer;
  {
    // Waits while inputs in flight fill the arena.
    py::gil_scoped_release release;
    buffer = client.Allocate(bytes);
  }
  return std::make_unique<Buffer>(ValueOrThrow(std::move(buffer), ErrorPhase::kCall));
}

}  // namespace

void BindBuffer(py::module_& m) {
  py::class_<Buffer, std::unique_ptr<Buffer>>(
      m, "Buffer", py::buffer_protocol(),
      "A block of the client's shared-memory arena (writable bytes; see Client.allocate).")
      .def_buffer([](Buffer& buffer) {
        return py::buffer_info(buffer.data(), 1, py::format_descriptor<uint8_t>::format(),
                               static_cast<py::ssize_t>(buffer.size()), /*readonly=*/false);
      })
      .def_property_readonly("nbytes", &Buffer::size)
      .def_property_readonly(
          "address",
          [](const Buffer& buffer) { return reinterpret_cast<uintptr_t>(buffer.data()); },
          "Where the block starts in this process's memory.");

  auto client =
      py::reinterpret_borrow<py::class_<Client, std::unique_ptr<Client>>>(m.attr("Client"));
  client
      .def("allocate", &Allocate, py::arg("nbytes"),
           "A Buffer of `nbytes` in this client's arena, whose tensors reach the daemon without "
           "a copy. Waits while inputs in flight fill the arena; raises when `nbytes` cannot fit "
           "(the arena is arena_bytes in all, shared with the copies of other inputs).")
      .def_property_readonly("arena_bytes", &Client::arena_bytes,
                             "The size of this client's shared-memory arena.")
      .def_property_readonly("arena_free_bytes", &Client::arena_free_bytes,
                             "The bytes of the arena that no Buffer or input in flight holds.")
      .def(
          "in_arena",
          [](const Client& self, std::uintptr_t address, size_t nbytes) {
            return self.InArena(reinterpret_cast<const void*>(address), nbytes);
          },
          py::arg("address"), py::arg("nbytes"),
          "Whether the `nbytes` at `address` lie in this client's arena (a collective reads "
          "them where they are).")
      .def_property_readonly("copied_out_bytes", &Client::copied_out_bytes,
                             "Bytes wait() has copied from the daemon's results into outputs; an "
                             "allreduce into an arena output adds none (the daemon writes it).");
}

}  // namespace collective::python
