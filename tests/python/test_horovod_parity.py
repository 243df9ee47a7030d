"""collective.torch as Horovod 0.28.1's suite and users' scripts find it (issue 48, items 1-6).

The build functions' types and when they may be called, the error type of a refused
reducescatter op, DistributedOptimizer's zero_grad and find_duplicates, cloudpickle in the
object collectives, broadcast_parameters' accepted types and broadcast_optimizer_state's
model, and the elastic states and handlers a user-written Horovod script relies on.
"""

import os
import subprocess
import sys

import pytest
import torch

import collective.torch as hvd
from collective.common import elastic as common_elastic
from collective.torch.elastic import state as torch_state


# --- Item 1: the build functions ----------------------------------------------------------------

def _expected_nccl_code():
    code = os.environ.get('COLLECTIVE_TEST_NCCL_VERSION_CODE')
    if code is None:
        pytest.skip('COLLECTIVE_TEST_NCCL_VERSION_CODE (the NCCL_VERSION_CODE of this build, 0 '
                    'without the GPU path) is set by ctest (tests/python/CMakeLists.txt)')
    return int(code)


_BUILD_FUNCTIONS = ('mpi_built', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
                    'cuda_built', 'rocm_built', 'mpi_enabled', 'gloo_enabled')


def test_build_functions_answer_before_init_with_horovods_types():
    # A process that never calls init(): Horovod answers all of these from its build.
    script = ('import collective.torch as hvd\n'
              f'for name in {_BUILD_FUNCTIONS!r}:\n'
              '    value = getattr(hvd, name)()\n'
              '    print(name, type(value).__name__, int(value))\n'
              'print("initialized", hvd.is_initialized())\n')
    done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answers = {name: (kind, int(value)) for name, kind, value in
               (line.split() for line in done.stdout.splitlines() if not
                line.startswith('initialized'))}
    assert answers['nccl_built'] == ('int', _expected_nccl_code())
    for name in _BUILD_FUNCTIONS:
        if name != 'nccl_built':
            assert answers[name][0] == 'bool', name
    for name in ('mpi_built', 'gloo_built', 'ddl_built', 'ccl_built', 'rocm_built',
                 'mpi_enabled', 'gloo_enabled'):
        assert answers[name][1] == 0, name
    assert 'initialized False' in done.stdout


def test_nccl_built_is_the_version_code_after_init():
    code = _expected_nccl_code()
    assert type(hvd.nccl_built()) is int
    assert hvd.nccl_built() == code
    # As Horovod's suite compares it (test_torch.py's alltoall tests): no alltoall test
    # skips itself as "NCCL-based Alltoall requires NCCL version >= 2.7.0" with NCCL >= 2.7.
    if code:
        assert not hvd.nccl_built() < 2700


# --- Item 2: refused reducescatter ops ----------------------------------------------------------

_REFUSED_OPS = [hvd.Adasum, hvd.Min, hvd.Max, hvd.Product]


@pytest.mark.parametrize('op', _REFUSED_OPS)
def test_reducescatter_refuses_ops_but_average_and_sum_as_horovod(op):
    tensor = torch.ones(2 * hvd.size(), 3)
    # Horovod's suite catches (torch.FatalError, RuntimeError); HorovodInternalError is one.
    for call in (lambda: hvd.reducescatter(tensor, op=op),
                 lambda: hvd.reducescatter_async(tensor, op=op),
                 lambda: hvd.grouped_reducescatter([tensor, tensor], op=op),
                 lambda: hvd.grouped_reducescatter_async([tensor], op=op),
                 lambda: hvd.reducescatter(tensor, name='refused.reducescatter', op=op)):
        with pytest.raises(hvd.HorovodInternalError,
                           match='Reducescatter currently only supports AVERAGE and SUM.'):
            call()
    # Nothing was submitted: the name is free and the job goes on.
    summed = hvd.reducescatter(tensor, name='refused.reducescatter', op=hvd.Sum)
    assert torch.equal(summed, torch.full((2, 3), float(hvd.size())))


def test_reducescatter_of_a_scalar_is_a_value_error_first():
    # Horovod checks a scalar input before the op, and raises ValueError for it.
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.tensor(1.0), op=hvd.Adasum)


# --- Item 3: DistributedOptimizer's zero_grad and find_duplicates --------------------------------

def _model():
    torch.manual_seed(7)
    return torch.nn.Linear(3, 1, bias=False).double()


def _batch(rank, step):
    return torch.full((2, 3), float(rank + 1 + 10 * step), dtype=torch.float64)


def test_zero_grad_between_accumulated_passes_is_allowed(two_ranks):
    model = _model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         backward_passes_per_step=2)
    before = model.weight.detach().clone()
    model(_batch(hvd.rank(), 0)).sum().backward()
    optimizer.zero_grad()  # Horovod refuses only while allreduces are in flight
    model(_batch(hvd.rank(), 1)).sum().backward()
    with pytest.raises(AssertionError, match='optimizer.zero_grad\\(\\) was called after'):
        optimizer.zero_grad()  # the second pass started the allreduce
    optimizer.step()
    # What remained of the accumulation (the second pass), averaged over the ranks.
    mean_grad = sum(_batch(r, 1).sum(0) for r in range(hvd.size())) / hvd.size()
    assert torch.allclose(model.weight.detach(), before - 0.1 * mean_grad)


def test_the_returned_optimizer_has_find_duplicates():
    model = _model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    assert optimizer.find_duplicates(['a', 'b', 'a', 'c', 'b']) == {'a', 'b'}
    assert type(optimizer).find_duplicates([]) == set()


# --- Item 4: cloudpickle -----------------------------------------------------------------------

def test_object_collectives_carry_lambdas_and_local_classes(two_ranks):
    class Local:
        def __init__(self, value):
            self.value = value

    offset = 5 + hvd.rank()
    sent = hvd.broadcast_object((lambda x: x + offset, Local(offset)) if hvd.rank() == 0
                                else None, root_rank=0)
    function, local = sent
    assert function(1) == 6 and local.value == 5 and type(local).__name__ == 'Local'
    gathered = hvd.allgather_object(lambda: offset)
    assert [f() for f in gathered] == [5 + r for r in range(hvd.size())]


# --- Item 5: broadcast_parameters and broadcast_optimizer_state ---------------------------------

@pytest.mark.parametrize('params', [lambda m: m.parameters(), lambda m: m.named_parameters(),
                                    lambda m: tuple(m.parameters()), lambda m: None])
def test_broadcast_parameters_takes_a_list_or_a_dict_only(params):
    with pytest.raises(ValueError, match='invalid params of type'):
        hvd.broadcast_parameters(params(_model()), root_rank=0)


def _sparse_model():
    torch.manual_seed(3)
    return torch.nn.ModuleDict({'embedding': torch.nn.Embedding(6, 2, sparse=True),
                                'linear': torch.nn.Linear(2, 1)})


@pytest.mark.parametrize('with_model', [True, False])
def test_broadcast_optimizer_state_finds_sparse_parameters_from_the_model(with_model):
    model = _sparse_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0, model=model if with_model else None)
    # The state was created as Horovod creates it: by a step on zero gradients, sparse
    # ones for the parameters of a sparse embedding when the model says which they are.
    assert model['embedding'].weight.grad.is_sparse is with_model
    assert not model['linear'].weight.grad.is_sparse
    # Its next backward accumulates into that gradient, sparse with the model.
    model['embedding'](torch.tensor([1, 2])).sum().backward()
    assert model['embedding'].weight.grad.is_sparse is with_model


# --- Item 6: elastic states and handlers --------------------------------------------------------

class _Counter:
    def __init__(self):
        self.count = 0


class _CounterHandler(torch_state.StateHandler):
    """A user's handler, as Horovod's documentation shows them."""

    def __init__(self, counter):
        super().__init__(counter)
        self._saved = counter.count

    def save(self):
        self._saved = self.value.count

    def restore(self):
        self.value.count = self._saved

    def sync(self):
        self.value.count = hvd.broadcast_object(self.value.count, root_rank=0,
                                                name='counter_handler')
        self._saved = self.value.count


@pytest.fixture
def counter_registry():
    previous = torch_state.get_handler_registry()
    torch_state.set_handler_registry(previous + [(_Counter, _CounterHandler)])
    yield
    torch_state.set_handler_registry(previous)


def test_handler_registry_and_public_handlers(counter_registry):
    registry = torch_state.get_handler_registry()
    assert (torch.nn.Module, torch_state.ModelStateHandler) in registry
    assert (torch.optim.Optimizer, torch_state.OptimizerStateHandler) in registry
    assert (hvd.elastic.ElasticSampler, torch_state.SamplerStateHandler) in registry
    counter = _Counter()
    state = hvd.elastic.TorchState(model=_model(), counter=counter, epoch=0)
    assert isinstance(state._handlers['counter'], _CounterHandler)
    assert isinstance(state._handlers['model'], torch_state.ModelStateHandler)
    counter.count = 4 + hvd.rank()
    state.commit()
    counter.count = 40
    state.restore()
    assert counter.count == 4 + hvd.rank()
    state.sync()
    assert counter.count == 4


def test_states_hear_host_updates_as_horovods_notification_manager_delivers_them():
    state = hvd.elastic.ObjectState(epoch=1)
    state.on_hosts_updated(100, common_elastic.HostUpdateResult.removed)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.commit()
    assert raised.value.skip_sync is True
    state.commit()  # acted on already
    torch_state_obj = hvd.elastic.TorchState(_model(), epoch=2)
    torch_state_obj.on_hosts_updated(5, common_elastic.HostUpdateResult.added)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        torch_state_obj.check_host_updates()
    assert raised.value.skip_sync is False


def test_a_state_written_for_horovod_takes_two_arguments():
    class Mine(common_elastic.ObjectState):
        def __init__(self, **kwargs):
            super().__init__(hvd.broadcast_object, hvd.rank, **kwargs)

    state = Mine(step=hvd.rank())
    state.sync()
    assert state.step == 0
    state.commit()
