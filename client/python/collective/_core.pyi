# Type stubs of collective._core, the pybind11 binding of libcollective
# (client/python/src). Tensors cross it as TensorArg, (address, dtype code,
# shape); codes come from DTYPES, REDUCE_OPS, ADASUM_SCOPES and DEVICES.
# tests/python/stubs_check.py holds this file to the built module: the same
# names, methods, properties and parameters, in the same order.
from typing import Dict, List, Optional, Sequence, Tuple

__version__: str

# (data address, DTYPES code, shape)
TensorArg = Tuple[int, int, Sequence[int]]
# A request in flight, for Client.poll and Client.wait.
Handle = int

DTYPES: Dict[str, int]
REDUCE_OPS: Dict[str, int]
ADASUM_SCOPES: Dict[str, int]
DEVICES: Dict[str, int]
GLOBAL_PROCESS_SET: int
# Horovod's text for a tensor name already in use (raised as ValueError).
DUPLICATE_NAME_ERROR: str
# NCCL_VERSION_CODE of the NCCL this build found, or 0 (nccl_built()).
NCCL_VERSION_CODE: int

def cuda_driver_error() -> Optional[str]: ...

class ConnectCancellation:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

class Result:
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def received_splits(self) -> List[int]: ...
    def copy_to(self, address: int, capacity: int) -> None: ...
    def release(self) -> None: ...

# Writable bytes through the buffer protocol (PEP 688): memoryview(buffer),
# torch.frombuffer(buffer, ...).
class Buffer:
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def address(self) -> int: ...

class Client:
    @staticmethod
    def connect(
        static_process_sets: Sequence[Sequence[int]] = ...,
        socket_path: str = ...,
        job_id: str = ...,
        local_rank: int = ...,
        local_size: int = ...,
        arena_bytes: int = ...,
        register_timeout_s: float = ...,
        cancellation: Optional[ConnectCancellation] = ...,
    ) -> Client: ...
    @property
    def address(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def local_size(self) -> int: ...
    @property
    def cross_rank(self) -> int: ...
    @property
    def cross_size(self) -> int: ...
    @property
    def is_homogeneous(self) -> bool: ...
    @property
    def daemon_gpu_path(self) -> bool: ...
    def poll(self, handle: Handle) -> bool: ...
    def wait(self, handle: Handle) -> Result: ...
    def process_sets(self) -> List[Tuple[int, List[int]]]: ...
    def add_process_set(self, ranks: Sequence[int]) -> Tuple[int, List[int]]: ...
    def remove_process_set(self, id: int) -> None: ...
    def process_set_rank(self, id: int) -> int: ...
    def process_set_size(self, id: int) -> int: ...
    def process_set_included(self, id: int) -> bool: ...
    def start_timeline(self, path: str, mark_cycles: bool = ...) -> None: ...
    def stop_timeline(self) -> None: ...
    def close(self) -> None: ...
    # Collectives (collectives_binding.cc)
    def allreduce_async(
        self,
        names: Sequence[str],
        inputs: Sequence[TensorArg],
        outputs: Sequence[int],
        op: int,
        prescale: float,
        postscale: float,
        process_set: int,
        device: int = ...,
        cuda_stream: int = ...,
        adasum_scope: int = ...,
    ) -> List[Handle]: ...
    def allreduce(
        self,
        name: str,
        input: TensorArg,
        output: int,
        op: int,
        prescale: float,
        postscale: float,
        process_set: int,
    ) -> None: ...
    def allgather_async(
        self,
        names: Sequence[str],
        inputs: Sequence[TensorArg],
        process_set: int,
        outputs: Sequence[int] = ...,
        output_bytes: Sequence[int] = ...,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> List[Handle]: ...
    def broadcast_async(
        self,
        name: str,
        input: TensorArg,
        output: int,
        root_rank: int,
        process_set: int,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    def alltoall_async(
        self,
        name: str,
        input: TensorArg,
        splits: Sequence[int],
        process_set: int,
        output: int = ...,
        output_bytes: int = ...,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    def reducescatter_async(
        self,
        names: Sequence[str],
        inputs: Sequence[TensorArg],
        outputs: Sequence[int],
        op: int,
        prescale: float,
        postscale: float,
        process_set: int,
        device: int = ...,
        cuda_stream: int = ...,
        adasum_scope: int = ...,
    ) -> List[Handle]: ...
    def barrier(self, process_set: int) -> None: ...
    def join(self, process_set: int) -> int: ...
    # The arena (buffer_binding.cc)
    def allocate(self, nbytes: int) -> Buffer: ...
    @property
    def arena_bytes(self) -> int: ...
    @property
    def arena_free_bytes(self) -> int: ...
    def in_arena(self, address: int, nbytes: int) -> bool: ...
    @property
    def copied_out_bytes(self) -> int: ...
    # Rooted collectives (rooted_binding.cc)
    def reduce_async(
        self,
        name: str,
        input: TensorArg,
        output: int,
        op: int,
        prescale: float,
        postscale: float,
        root_rank: int,
        process_set: int,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    def gather_async(
        self,
        name: str,
        input: TensorArg,
        root_rank: int,
        process_set: int,
        output: int = ...,
        output_bytes: int = ...,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    def scatter_async(
        self,
        name: str,
        input: TensorArg,
        receive_rows: int,
        root_rank: int,
        process_set: int,
        output: int = ...,
        output_bytes: int = ...,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    # Point-to-point messages (p2p_binding.cc)
    def send_async(
        self,
        input: TensorArg,
        dest: int,
        tag: int,
        process_set: int,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
    def recv_async(
        self,
        like: TensorArg,
        source: int,
        tag: int,
        process_set: int,
        output: int = ...,
        output_bytes: int = ...,
        device: int = ...,
        cuda_stream: int = ...,
    ) -> Handle: ...
