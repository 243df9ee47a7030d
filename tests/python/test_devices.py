"""collective.torch.devices with stand-in tensors: which device a call runs on, the errors
for tensors on several devices, the stream and device guard it hands the binding, and the
output sizes of CUDA allgathers and alltoalls. Needs no GPU, and no daemon: ctest also runs
it alone (python_devices, pytest --noconftest)."""

import pytest

from collective import _core
from collective.torch import devices


class _Device:
    def __init__(self, kind, index=None):
        self.type = kind
        self.index = index


class _Tensor:
    """What devices.place reads of a torch.Tensor."""

    def __init__(self, kind='cpu', index=None):
        self.device = _Device(kind, index)
        self.is_cuda = kind == 'cuda'


def _cuda(index=0):
    return _Tensor('cuda', index)


class _Connection:
    cuda_device = None


class _Driver:
    """The stream and device guard torch would give, recorded."""

    def __init__(self):
        self.events = []

    def current_stream(self, index):
        self.events.append(('stream', index))
        return 0x5000 + index

    def guard(self, index):
        driver = self

        class Guard:
            def __enter__(self):
                driver.events.append(('enter', index))

            def __exit__(self, *exc):
                driver.events.append(('exit', index))
                return False

        return Guard()


def _place(tensors, connection=None, driver=None):
    driver = driver or _Driver()
    return devices.place('grouped_allreduce', tensors, connection, driver.current_stream,
                         driver.guard)


def test_cpu_tensors_run_on_the_cpu_with_the_binding_arguments_unchanged():
    driver = _Driver()
    placement = _place([_Tensor(), _Tensor()], _Connection(), driver)
    assert placement is devices.CPU
    assert not placement.is_cuda
    assert placement.device is None  # torch.empty's default: the CPU
    submit = object()
    # The binding's own functions, unwrapped: a CPU call costs what it did.
    assert placement.submitter(submit) is submit
    assert placement.guarded(submit) is submit
    assert driver.events == []  # no stream asked for, no device made current
    assert _place([]) is devices.CPU


def test_cuda_tensors_carry_their_device_and_the_callers_current_stream():
    driver = _Driver()
    connection = _Connection()
    placement = _place([_cuda(1), _cuda(1)], connection, driver)
    assert placement.is_cuda
    assert placement.index == 1
    assert placement.device == 'cuda:1'
    assert placement.cuda_stream == 0x5001
    assert driver.events == [('stream', 1)]
    calls = []

    def submit(*args, **kwargs):
        calls.append((args, kwargs, list(driver.events)))
        return ['handle']

    assert placement.submitter(submit)('names', 'inputs', outputs=[7]) == ['handle']
    args, kwargs, events_during_call = calls[0]
    assert args == ('names', 'inputs')
    assert kwargs == {'outputs': [7], 'device': _core.DEVICES['cuda'], 'cuda_stream': 0x5001}
    # The binding runs with the tensors' device current, and only then.
    assert events_during_call[-1] == ('enter', 1)
    assert driver.events[-1] == ('exit', 1)

    def wait(handle):
        assert driver.events[-1] == ('enter', 1)
        return f'result of {handle}'

    assert placement.guarded(wait)(3) == 'result of 3'
    assert driver.events[-1] == ('exit', 1)


@pytest.mark.parametrize('tensors, first, second', [
    ([_Tensor(), _cuda(0)], 'cpu', 'cuda:0'),
    ([_cuda(0), _Tensor(), _cuda(0)], 'cuda:0', 'cpu'),
    ([_cuda(0), _cuda(1)], 'cuda:0', 'cuda:1'),
])
def test_tensors_on_several_devices_raise_horovods_runtime_error(tensors, first, second):
    connection = _Connection()
    with pytest.raises(RuntimeError) as raised:
        _place(tensors, connection)
    assert not isinstance(raised.value, ValueError)
    assert str(raised.value) == (
        f'grouped_allreduce mixes tensors on {first} and {second}: every tensor of one '
        'collective must lie on the same device')
    assert connection.cuda_device is None  # a refused call claims no device


def test_a_process_keeps_to_the_first_gpu_it_used():
    connection = _Connection()
    _place([_Tensor()], connection)
    assert connection.cuda_device is None  # CPU calls claim nothing
    assert _place([_cuda(2)], connection).index == 2
    assert connection.cuda_device == 2
    assert _place([_cuda(2)], connection).index == 2
    with pytest.raises(ValueError, match=r'lies on cuda:0, but this process handed tensors of '
                                         r'cuda:2 to collectived already'):
        _place([_cuda(0)], connection)
    assert connection.cuda_device == 2
    assert _place([_Tensor()], connection) is devices.CPU  # the CPU stays open


def test_allgather_output_rows_add_up_every_ranks_rows():
    # rows_by_rank[r][i]: tensor i's first dimension on rank r.
    assert devices.gathered_rows([[3, 0], [1, 5], [0, 2]]) == [4, 7]
    assert devices.gathered_rows([[4]]) == [4]
    assert devices.gathered_rows([]) == []


def test_alltoall_receives_what_each_rank_sends_this_one():
    # splits_by_rank[r][j]: rows rank r sends to rank j.
    splits = [[1, 2, 3], [4, 5, 6], [0, 0, 7]]
    assert devices.received_rows(splits, 0) == [1, 4, 0]
    assert devices.received_rows(splits, 2) == [3, 6, 7]
    assert devices.even_splits(6, 3) == [2, 2, 2]
    assert devices.even_splits(0, 4) == [0, 0, 0, 0]


@pytest.mark.parametrize('splits, shape, acceptable', [
    ([], (6, 2), True),
    ([], (0,), True),
    ([], (7, 2), False),  # does not divide among 3
    ([], (), False),  # no rows at all
    ([1, 0, 5], (6,), True),
    ([1, 5], (6,), False),  # not one per rank
    ([1, -1, 6], (6,), False),
    ([1, 1, 1], (6,), False),  # adds up to 3, not 6
])
def test_alltoall_splits_that_libcollective_would_refuse_are_told_apart(splits, shape,
                                                                          acceptable):
    assert devices.alltoall_splits_acceptable(splits, shape, 3) is acceptable
