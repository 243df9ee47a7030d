"""The binding's device arguments reach libcollective: on a machine without the NVIDIA
driver (this one's CI), a CUDA request is refused at the call with the driver's reason and
the job goes on; the device-output forms of allgather and alltoall that CUDA tensors use
deliver into the output (exercised here with CPU memory); the GPU flags say what the daemon
and the driver offer. tests/python/test_torch_cuda.py covers CUDA tensors on a GPU."""

import os

import pytest
import torch

import collective.torch as hvd
from collective import _core
from collective.common import basics, connection
from collective.torch import tensor_args

_NO_DRIVER = _core.cuda_driver_error() is not None


def _client():
    return connection.current().client


def _job_goes_on():
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [hvd.size()] * 3


def test_gpu_flags_say_what_the_daemon_and_the_driver_offer():
    gpu_path = os.environ.get('COLLECTIVE_TEST_GPU_PATH')
    if gpu_path is None:
        pytest.skip('COLLECTIVE_TEST_GPU_PATH (whether this build has the GPU path) is set by '
                    'ctest (tests/python/CMakeLists.txt)')
    assert (hvd.nccl_built() > 0) is (gpu_path == '1')
    assert hvd.cuda_built() is (gpu_path == '1' and not _NO_DRIVER)
    if _NO_DRIVER:
        assert 'libcuda.so.1' in basics.cuda_driver_error()


def test_an_unknown_device_code_is_refused():
    t = torch.ones(4)
    with pytest.raises(ValueError, match='unknown device code 7'):
        _client().allreduce_async(['device.unknown'], [tensor_args.arg(t)], [t.data_ptr()],
                                  _core.REDUCE_OPS['sum'], 1.0, 1.0, 0, device=7)
    _job_goes_on()


@pytest.mark.skipif(not _NO_DRIVER, reason='the NVIDIA driver is present: test_torch_cuda.py '
                                           'runs CUDA tensors instead')
def test_a_cuda_request_without_the_driver_is_refused_at_the_call():
    t = torch.ones(4)  # host memory: the request never gets as far as reading it
    for _ in range(2):  # refused alike again: nothing of the first one stays behind
        with pytest.raises(hvd.HorovodInternalError, match='libcuda.so.1 cannot be loaded'):
            _client().allreduce_async(['device.nodriver'], [tensor_args.arg(t)],
                                      [t.data_ptr()], _core.REDUCE_OPS['sum'], 1.0, 1.0, 0,
                                      device=_core.DEVICES['cuda'], cuda_stream=0)
    with pytest.raises(hvd.HorovodInternalError, match='libcuda.so.1 cannot be loaded'):
        _client().allgather_async(['device.nodriver.gather'], [tensor_args.arg(t)], 0,
                                  outputs=[t.data_ptr()], output_bytes=[16],
                                  device=_core.DEVICES['cuda'], cuda_stream=0)
    _job_goes_on()


def test_allgather_into_named_outputs():
    size, rank = hvd.size(), hvd.rank()
    inputs = [torch.full((rank + 1, 2), float(rank)), torch.arange(3, dtype=torch.int32) + rank]
    rows = [sum(r + 1 for r in range(size)), 3 * size]
    outputs = [torch.empty(rows[0], 2), torch.empty(rows[1], dtype=torch.int32)]
    handles = _client().allgather_async(
        ['device.gather.a', 'device.gather.b'], [tensor_args.arg(t) for t in inputs], 0,
        outputs=[o.data_ptr() for o in outputs],
        output_bytes=[o.numel() * o.element_size() for o in outputs])
    for handle in handles:
        _client().wait(handle).release()
    expected_a = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)])
    expected_b = torch.cat([torch.arange(3, dtype=torch.int32) + r for r in range(size)])
    assert torch.equal(outputs[0], expected_a)
    assert torch.equal(outputs[1], expected_b)


def test_allgather_outputs_must_come_with_their_sizes():
    t = torch.ones(2)
    with pytest.raises(ValueError, match='one output with its size'):
        _client().allgather_async(['device.gather.unsized'], [tensor_args.arg(t)], 0,
                                  outputs=[t.data_ptr()])
    _job_goes_on()


def test_alltoall_into_a_named_output():
    size, rank = hvd.size(), hvd.rank()
    # Rank r sends r + j + 1 rows of value 10 r + j to rank j.
    splits = [rank + j + 1 for j in range(size)]
    source = torch.cat([torch.full((n,), float(10 * rank + j)) for j, n in enumerate(splits)])
    received = [r + rank + 1 for r in range(size)]
    output = torch.empty(sum(received))
    handle = _client().alltoall_async('device.alltoall', tensor_args.arg(source), splits, 0,
                                      output=output.data_ptr(),
                                      output_bytes=output.numel() * output.element_size())
    result = _client().wait(handle)
    assert list(result.received_splits) == received
    result.release()
    expected = torch.cat([torch.full((n,), float(10 * r + rank)) for r, n in enumerate(received)])
    assert torch.equal(output, expected)


def test_a_cuda_alltoall_hears_about_bad_splits_before_it_needs_an_output(two_ranks):
    # collective.torch submits splits it cannot size an output for without
    # one, so that libcollective says what is wrong with them.
    size = hvd.size()
    t = torch.ones(size + 1)
    cuda = dict(device=_core.DEVICES['cuda'], cuda_stream=0)
    with pytest.raises(ValueError, match=f'{size + 1} splits for a process set of {size} ranks'):
        _client().alltoall_async('device.alltoall.splits', tensor_args.arg(t), [1] * (size + 1),
                                 0, **cuda)
    with pytest.raises(ValueError, match='does not divide evenly'):
        _client().alltoall_async('device.alltoall.even', tensor_args.arg(t), [], 0, **cuda)
    # Good splits without an output are the daemon's to refuse, on every rank,
    # if the result is not empty (test_torch_cuda.py): a null output of no
    # bytes is how an empty CUDA result is named.
    _job_goes_on()
