"""The job's shape, init/is_initialized, build flags, the timeline, handles."""

import json
import os
import sys
import tempfile
import threading
import time

import pytest
import torch

import collective.torch as hvd


# What horovod.torch 0.28.1 exports (horovod/torch/__init__.py).
_HOROVOD_TORCH_NAMES = [
    'Compression', 'allgather_object', 'broadcast_object', 'broadcast_optimizer_state',
    'broadcast_parameters', 'allreduce', 'allreduce_async', 'allreduce_', 'allreduce_async_',
    'grouped_allreduce', 'grouped_allreduce_async', 'grouped_allreduce_',
    'grouped_allreduce_async_', 'sparse_allreduce_async', 'allgather', 'allgather_async',
    'grouped_allgather', 'grouped_allgather_async', 'broadcast', 'broadcast_async',
    'broadcast_', 'broadcast_async_', 'alltoall', 'alltoall_async', 'reducescatter',
    'reducescatter_async', 'grouped_reducescatter', 'grouped_reducescatter_async', 'join',
    'barrier', 'poll', 'synchronize', 'init', 'shutdown', 'is_initialized', 'start_timeline',
    'stop_timeline', 'size', 'local_size', 'cross_size', 'rank', 'local_rank', 'cross_rank',
    'mpi_threads_supported', 'mpi_enabled', 'mpi_built', 'gloo_enabled', 'gloo_built',
    'nccl_built', 'ddl_built', 'ccl_built', 'cuda_built', 'rocm_built', 'ProcessSet',
    'global_process_set', 'add_process_set', 'remove_process_set', 'Average', 'Sum', 'Adasum',
    'Min', 'Max', 'Product', 'HorovodInternalError', 'DistributedOptimizer', 'SyncBatchNorm',
    'elastic', 'gpu_available', 'num_rank_is_power_2', 'split_list']


def test_exports_horovods_names():
    assert [name for name in _HOROVOD_TORCH_NAMES if not hasattr(hvd, name)] == []
    # The submodules scripts reach through hvd, as with horovod.torch.
    for module in ('mpi_ops', 'compression', 'functions', 'optimizer', 'sync_batch_norm',
                   'elastic'):
        assert getattr(hvd, module).__name__ == f'collective.torch.{module}'
    for name in ('none', 'fp16'):
        assert hasattr(hvd.Compression, name)
    assert hvd.mpi_ops.HorovodInternalError is hvd.HorovodInternalError


def test_horovods_helpers():
    assert [hvd.num_rank_is_power_2(n) for n in (0, 1, 2, 3, 4, 6, 8)] == \
        [False, True, True, False, True, False, True]
    assert hvd.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert hvd.split_list([], 2) == [[], []]
    assert hvd.gpu_available('torch') == (hvd.cuda_built() and torch.cuda.is_available())
    assert hvd.gpu_available('mxnet') is False


def test_topology_matches_the_launcher():
    local_size = int(os.environ.get('COLLECTIVE_LOCAL_SIZE', '1'))
    local_rank = int(os.environ.get('COLLECTIVE_LOCAL_RANK', '0'))
    # Across stand-in nodes (tests/integration/multinode), the harness says
    # where this rank is; otherwise the job is one node.
    local_sizes = [int(n) for n in
                   os.environ.get('COLLECTIVE_TEST_LOCAL_SIZES', str(local_size)).split(',')]
    node = int(os.environ.get('COLLECTIVE_TEST_NODE', '0'))
    offset = sum(local_sizes[:node])
    assert (hvd.size(), hvd.rank()) == (sum(local_sizes), offset + local_rank)
    assert (hvd.local_size(), hvd.local_rank()) == (local_size, local_rank)
    assert (hvd.cross_size(), hvd.cross_rank()) == (len(local_sizes), node)
    assert hvd.is_homogeneous() == (len(set(local_sizes)) == 1)
    assert hvd.allgather(torch.tensor([hvd.rank()])).tolist() == list(range(hvd.size()))


def test_init_again_changes_nothing():
    assert hvd.is_initialized()
    handle = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name='reinit')
    hvd.init()
    assert hvd.is_initialized()
    assert hvd.synchronize(handle).tolist() == [hvd.size()] * 2
    with pytest.raises(ValueError, match='does not exist'):
        hvd.init(process_sets=[hvd.ProcessSet([0])] if hvd.size() > 2 else [[0, 0]])
    # Horovod's comm as a list of ranks: every rank of the job (or none) is the job.
    hvd.init(comm=[])
    hvd.init(comm=list(reversed(range(hvd.size()))))
    with pytest.raises(NotImplementedError, match='MPI communicator'):
        hvd.init(comm=object())
    assert hvd.is_initialized()


def test_build_flags():
    # nccl_built and cuda_built depend on the daemon and the driver:
    # test_device_binding.py.
    for flag in (hvd.mpi_enabled, hvd.mpi_built, hvd.gloo_enabled, hvd.gloo_built,
                 hvd.ddl_built, hvd.ccl_built, hvd.rocm_built):
        assert flag() is False, flag.__name__
    # Horovod's words for a process without MPI.
    with pytest.raises(ValueError, match="^Horovod MPI is not enabled; Please make sure it's "
                                         "installed and enabled.$"):
        hvd.mpi_threads_supported()


def test_reduce_op_constants_are_horovods():
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


def test_timeline_records_named_tensors():
    path = os.path.join(tempfile.gettempdir(), f'cpy-timeline-{os.getpid()}.json')
    if hvd.rank() == 0:
        hvd.start_timeline(path, mark_cycles=True)
    hvd.barrier()
    hvd.allreduce(torch.ones(16), name='timeline.tensor')
    hvd.barrier()
    if hvd.rank() == 0:
        hvd.stop_timeline()
        with open(path) as f:
            text = f.read()
        os.unlink(path)
        events = json.loads(text if text.rstrip().endswith(']') else text.rstrip().rstrip(',') + ']')
        assert any('allreduce.timeline.tensor' in json.dumps(e) for e in events)
    hvd.barrier()


def test_poll_and_synchronize_unknown_handles():
    assert hvd.synchronize(10 ** 9) is None
    with pytest.raises(ValueError, match='not created or has been cleared'):
        hvd.poll(10 ** 9)


def test_waiting_releases_the_gil(two_ranks):
    # Rank 0's allreduce completes only after the others pass a barrier that
    # rank 0's main thread reaches while another thread waits for it: if the
    # wait held the GIL, the main thread could not get there.
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(torch.ones(2), name='gil', op=hvd.Sum)
        results = []
        waiter = threading.Thread(target=lambda: results.append(hvd.synchronize(handle)))
        waiter.start()
        deadline = time.monotonic() + 60
        while getattr(sys._current_frames().get(waiter.ident), 'f_code', None) is None or \
                sys._current_frames()[waiter.ident].f_code.co_name != 'synchronize':
            assert time.monotonic() < deadline, 'the waiter never reached synchronize'
            time.sleep(0.001)  # polling back-off; the frame decides
        sum(range(3_000_000))  # Python work, which needs the GIL back from the waiter
        hvd.barrier()
        waiter.join(timeout=60)
        assert not waiter.is_alive() and results[0].tolist() == [hvd.size()] * 2
    else:
        hvd.barrier()
        assert hvd.allreduce(torch.ones(2), name='gil', op=hvd.Sum).tolist() == [hvd.size()] * 2
