"""Errors: mismatches reach every rank as HorovodInternalError and the job goes on; a call's
own argument errors are ValueError on the calling rank."""

import os
import subprocess
import sys

import pytest
import torch

import collective.torch as hvd
from collective.common.exceptions import HorovodInternalError


def _job_goes_on():
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [hvd.size()] * 3


def test_horovod_internal_error_is_exported():
    assert hvd.HorovodInternalError is HorovodInternalError
    assert issubclass(HorovodInternalError, RuntimeError)
    from collective.torch import mpi_ops
    assert mpi_ops.HorovodInternalError is HorovodInternalError


def test_mismatched_shapes_fail_on_every_rank(two_ranks):
    tensor = torch.ones(3 if hvd.rank() == 0 else 4)
    with pytest.raises(HorovodInternalError, match="Mismatched allreduce tensor shapes for "
                                                    "'allreduce.shape.mismatch'"):
        hvd.allreduce(tensor, name='shape.mismatch')
    _job_goes_on()


def test_mismatched_dtypes_fail_on_every_rank(two_ranks):
    tensor = torch.ones(2, 3, dtype=torch.int32 if hvd.rank() == 0 else torch.float32)
    with pytest.raises(HorovodInternalError, match='Mismatched data types'):
        hvd.allgather(tensor)
    _job_goes_on()


def test_mismatched_ops_and_roots_fail_on_every_rank(two_ranks):
    with pytest.raises(HorovodInternalError, match='Mismatched reduce ops'):
        hvd.allreduce(torch.ones(2), op=hvd.Sum if hvd.rank() == 0 else hvd.Max)
    with pytest.raises(HorovodInternalError, match='Mismatched broadcast root ranks'):
        hvd.broadcast(torch.ones(2), root_rank=hvd.rank())
    handle = hvd.allgather_async(torch.ones(2, 1 + hvd.rank()))
    with pytest.raises(HorovodInternalError, match='Mismatched'):
        hvd.synchronize(handle)
    _job_goes_on()


def test_failed_group_leaves_no_name_outstanding(two_ranks):
    tensors = [torch.ones(2), torch.ones(3 + (hvd.rank() == 0))]
    with pytest.raises(HorovodInternalError, match='Mismatched'):
        hvd.grouped_allreduce(tensors, name='group.retry')
    result = hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name='group.retry', op=hvd.Sum)
    assert [r.tolist() for r in result] == [[hvd.size()] * 2, [hvd.size()] * 3]


def test_bad_alltoall_splits_are_refused():
    size = hvd.size()
    with pytest.raises(ValueError, match='add up to'):
        hvd.alltoall(torch.ones(size + 1), splits=[1] * size)
    with pytest.raises(ValueError, match='splits for a process set'):
        hvd.alltoall(torch.ones(size), splits=[1] * (size + 1))
    with pytest.raises(ValueError, match='negative'):
        hvd.alltoall(torch.ones(size), splits=[-1] + [1] * (size - 1))
    if size > 1:
        with pytest.raises(ValueError, match='does not divide evenly'):
            hvd.alltoall(torch.ones(size + 1))


# Horovod's own words (EnqueueTensorAlltoall), raised as ValueError by its
# binding: the same on every rank, at the call, whatever values the tensor holds.
_SPLITS_NOT_INT32 = 'alltoall expects splits to contain 32-bit integer elements.'


@pytest.mark.parametrize('splits', [
    lambda size: torch.ones(size),  # values that would do, in the wrong type
    lambda size: torch.full((size,), 1e30),  # values no integer type holds
    lambda size: torch.full((size,), float('nan')),
    lambda size: torch.ones(size, dtype=torch.int64),
    lambda size: torch.ones(size, dtype=torch.int16),
], ids=['float32', 'float32-huge', 'float32-nan', 'int64', 'int16'])
def test_alltoall_splits_must_be_int32(splits):
    size = hvd.size()
    with pytest.raises(ValueError) as raised:
        hvd.alltoall(torch.ones(size), splits=splits(size))
    assert str(raised.value) == _SPLITS_NOT_INT32
    with pytest.raises(ValueError) as raised:
        hvd.alltoall_async(torch.ones(size), splits=splits(size))
    assert str(raised.value) == _SPLITS_NOT_INT32
    _job_goes_on()


def test_alltoall_splits_must_be_one_dimensional():
    size = hvd.size()
    with pytest.raises(ValueError) as raised:
        hvd.alltoall(torch.ones(size), splits=torch.ones(size, 1, dtype=torch.int32))
    assert str(raised.value) == 'alltoall expects a 1D splits tensor'
    # Horovod checks the shape first.
    with pytest.raises(ValueError) as raised:
        hvd.alltoall(torch.ones(size), splits=torch.ones(1, size))
    assert str(raised.value) == 'alltoall expects a 1D splits tensor'
    _job_goes_on()


def test_unsupported_tensors_are_refused():
    with pytest.raises(ValueError, match='not supported'):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match='CPU and CUDA tensors only'):
        hvd.allreduce(torch.ones(2, device='meta'))
    with pytest.raises(ValueError, match='dense tensors only'):
        hvd.allgather(torch.ones(2, 2).to_sparse())
    with pytest.raises(ValueError, match='torch.Tensor'):
        hvd.broadcast([1, 2], 0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match='at least one dimension'):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match='min and max'):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum)
    with pytest.raises(ValueError, match='Unknown reduce op'):
        hvd.allreduce(torch.ones(2), op=42)
    with pytest.raises(ValueError, match='not registered'):
        hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match='not a rank of the job'):
        hvd.broadcast(torch.ones(2), root_rank=hvd.size())
    with pytest.raises(NotImplementedError, match='comm must list every rank'):
        hvd.init(comm=[1])  # not the job: rank 0 is missing
    _job_goes_on()


def test_calls_before_init_raise_value_error():
    if hvd.rank() != 0:
        return  # one subprocess is enough, and the cores are few
    environment = {k: v for k, v in os.environ.items() if not k.startswith('COLLECTIVE_')}
    script = ('import collective.torch as hvd\n'
              'assert not hvd.is_initialized()\n'
              'try:\n'
              '    hvd.allreduce(__import__("torch").ones(1))\n'
              'except ValueError as e:\n'
              '    print(e)\n')
    completed = subprocess.run([sys.executable, '-c', script], env=environment, timeout=120,
                               capture_output=True, text=True, check=True)
    assert 'has not been initialized' in completed.stdout
