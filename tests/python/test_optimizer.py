"""DistributedOptimizer: gradient averaging, its options and its error cases."""

import warnings

import pytest
import torch

import collective.torch as ct
from collective import _core
from collective.common import connection
from collective.common.exceptions import HorovodInternalError
from collective.torch import grad_buckets
from _helpers import assert_same_on_all_ranks, rank_batch


class _Net(torch.nn.Module):
    """A small net whose branch `b` is used only when the input asks for it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.a = torch.nn.Linear(6, 5)
        self.b = torch.nn.Linear(5, 5)
        self.unused = torch.nn.Linear(5, 5)
        self.head = torch.nn.Linear(5, 3)
        self.double()

    def forward(self, x, use_b=True):
        x = torch.tanh(self.a(x))
        if use_b:
            x = torch.tanh(self.b(x))
        return self.head(x)


def _loss(model, rank, seed=0, use_b=True):
    x = rank_batch(rank, (4, 6), seed=seed)
    return model(x, use_b=use_b).square().mean()


def _local_grads(rank, seed=0, use_b=True):
    """The gradient that `rank` computes alone, by parameter name."""
    model = _Net()
    _loss(model, rank, seed, use_b).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _expected_grads(op=ct.Average, seeds=(0,), use_b=lambda rank: True, ranks=None):
    """What each rank of `ranks` (default: all) holds after the allreduce, recomputed locally."""
    ranks = range(ct.size()) if ranks is None else ranks
    total = {name: torch.zeros_like(p) for name, p in _Net().named_parameters()}
    for rank in ranks:
        for seed in seeds:
            for name, grad in _local_grads(rank, seed, use_b(rank)).items():
                total[name] += grad
    if op == ct.Average:
        total = {name: grad / len(ranks) for name, grad in total.items()}
    return total


def _assert_grads(model, expected, atol=1e-12):
    for name, p in model.named_parameters():
        # A single process reduces nothing, so unused parameters keep no gradient.
        grad = torch.zeros_like(p) if p.grad is None else p.grad
        torch.testing.assert_close(grad, expected[name], atol=atol, rtol=0, msg=name)


def _distributed(model, **kwargs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return ct.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), **kwargs)


@pytest.mark.parametrize('op', [ct.Average, ct.Sum])
def test_gradients_are_reduced(op):
    model = _Net()
    optimizer = _distributed(model, op=op)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    # The never-used layer was zero-filled and reduced like the others.
    _assert_grads(model, _expected_grads(op))


@pytest.mark.usefixtures('two_ranks')
def test_allreduces_start_during_backward():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    # Every parameter that got a gradient was submitted by its hook; only
    # the unused layer waits for synchronize().
    submitted = {p for group in optimizer._handles for p in group}
    assert submitted == {p for name, p in model.named_parameters() if 'unused' not in name}
    optimizer.synchronize()


def test_wraps_the_optimizer_class():
    model = _Net()
    optimizer = _distributed(model)
    assert isinstance(optimizer, torch.optim.SGD)
    assert type(optimizer).__name__ == 'SGD'
    assert optimizer.defaults['lr'] == 0.1


def test_fp16_compression():
    model = _Net()
    optimizer = _distributed(model, compression=ct.Compression.fp16)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    assert all(p.grad.dtype == torch.float64 for p in model.parameters() if p.grad is not None)
    _assert_grads(model, _expected_grads(), atol=2e-3)


def test_compressors_round_trip():
    tensor = torch.linspace(-2, 2, 9, dtype=torch.float32)
    compressed, ctx = ct.Compression.fp16.compress(tensor)
    assert compressed.dtype == torch.float16
    restored = ct.Compression.fp16.decompress(compressed, ctx)
    assert restored.dtype == torch.float32 and torch.equal(restored, tensor)

    integers = torch.arange(4)
    compressed, ctx = ct.Compression.fp16.compress(integers)
    assert compressed is integers and ct.Compression.fp16.decompress(compressed, ctx) is integers

    compressed, ctx = ct.Compression.none.compress(tensor)
    assert compressed is tensor and ct.Compression.none.decompress(compressed, ctx) is tensor


def test_gradient_predivide_factor():
    model = _Net()
    optimizer = _distributed(model, gradient_predivide_factor=4.0)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads())


def test_gradient_predivide_factor_needs_average():
    with pytest.raises(ValueError, match='gradient_predivide_factor'):
        _distributed(_Net(), op=ct.Sum, gradient_predivide_factor=2.0)


def test_backward_passes_per_step_must_be_positive():
    with pytest.raises(ValueError, match='backward_passes_per_step must be > 0'):
        _distributed(_Net(), backward_passes_per_step=0)


@pytest.mark.usefixtures('two_ranks')
def test_backward_passes_per_step():
    model = _Net()
    optimizer = _distributed(model, backward_passes_per_step=2)
    _loss(model, ct.rank(), seed=0).backward()
    _loss(model, ct.rank(), seed=1).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads(seeds=(0, 1)))


@pytest.mark.usefixtures('two_ranks')
def test_too_many_backward_passes():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    with pytest.raises(AssertionError, match='backward_passes_per_step'):
        _loss(model, ct.rank(), seed=1).backward()
    optimizer.synchronize()  # finishes the first pass's allreduces everywhere


@pytest.mark.parametrize('groups', [1, 2, 3, 'list'])
def test_groups(groups):
    model = _Net()
    if groups == 'list':
        groups = [[model.a.weight, model.head.bias], [model.b.weight, model.b.bias]]
    optimizer = _distributed(model, groups=groups)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads())


def test_num_groups_is_deprecated():
    model = _Net()
    with pytest.warns(DeprecationWarning, match='num_groups'):
        optimizer = _distributed(model, num_groups=2)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads())


@pytest.mark.parametrize('groups', [0, -1, 'two', [['not a tensor']]])
def test_invalid_groups(groups):
    with pytest.raises(ValueError, match='groups'):
        _distributed(_Net(), groups=groups)


def test_parameter_in_two_groups():
    model = _Net()
    with pytest.raises(ValueError, match='only appear once'):
        _distributed(model, groups=[[model.a.weight], [model.a.weight]])


@pytest.mark.usefixtures('two_ranks')
@pytest.mark.parametrize('groups', [None, 2])
def test_parameter_without_gradient_on_some_ranks(groups):
    # Odd ranks skip branch b: their hooks for b never fire, and synchronize()
    # must submit zeros for it or the even ranks would wait forever.
    model = _Net()
    optimizer = _distributed(model, groups=groups)
    use_b = ct.rank() % 2 == 0
    _loss(model, ct.rank(), use_b=use_b).backward()
    optimizer.step()
    expected = _expected_grads(use_b=lambda rank: rank % 2 == 0)
    _assert_grads(model, expected)


def test_skip_synchronize():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(2)  # e.g. clipping between synchronize() and step()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        with optimizer.skip_synchronize():
            optimizer.step()
    assert not [w for w in caught if 'skip_synchronize' in str(w.message)]

    # A second allreduce would have averaged the doubled gradients again;
    # equal on every rank, so the check must look at the update itself.
    expected = _expected_grads()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[name] - 0.1 * 2 * expected[name],
                                   atol=1e-12, rtol=0, msg=name)


def test_step_after_synchronize_warns():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    with pytest.warns(UserWarning, match='skip_synchronize'):
        optimizer.step()


@pytest.mark.usefixtures('two_ranks')
def test_zero_grad_before_step_is_refused():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    with pytest.raises(AssertionError, match='zero_grad'):
        optimizer.zero_grad()
    optimizer.step()
    optimizer.zero_grad()


def test_named_parameters_must_be_unique():
    model = _Net()
    named = [('w', model.a.weight), ('w', model.a.bias)]
    with pytest.raises(ValueError, match='Found duplicates: w'):
        ct.DistributedOptimizer(torch.optim.SGD([model.a.weight, model.a.bias], lr=0.1),
                                named_parameters=named)


def test_named_parameters_must_name_every_parameter():
    model = _Net()
    with pytest.raises(ValueError, match='not named'):
        ct.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                named_parameters=list(model.a.named_parameters()))


def test_named_parameters_must_be_tuples():
    model = _Net()
    with pytest.raises(ValueError, match='tuples'):
        ct.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                named_parameters=[list(t) for t in model.named_parameters()])


def test_unnamed_parameters_get_default_names():
    model = _Net()
    optimizer = ct.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    _loss(model, ct.rank()).backward()
    optimizer.step()
    assert model.a.weight.grad is not None


@pytest.mark.parametrize('groups', [None, 2])
def test_process_set(static_process_sets, groups):
    # Only the even ranks reduce; the odd ones are outside the set and step
    # on their own gradients.
    evens, _ = static_process_sets
    model = _Net()
    optimizer = _distributed(model, process_set=evens, groups=groups)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    if ct.rank() % 2 == 0:
        _assert_grads(model, _expected_grads(ranks=evens.ranks))
    else:
        _assert_grads(model, _expected_grads(ranks=[ct.rank()]))


def _embedding_loss(embedding, rank):
    # Each rank looks up different rows, some shared with other ranks.
    rows = torch.tensor([rank % 5, (rank + 2) % 5, 4])
    return embedding(rows).sum() * (rank + 1)


@pytest.mark.parametrize('sparse_as_dense', [False, True])
def test_sparse_gradients(sparse_as_dense):
    torch.manual_seed(3)
    embedding = torch.nn.Embedding(5, 3, sparse=True).double()
    optimizer = ct.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.1),
                                        named_parameters=embedding.named_parameters(),
                                        sparse_as_dense=sparse_as_dense)
    _embedding_loss(embedding, ct.rank()).backward()
    optimizer.synchronize()

    expected = torch.zeros(5, 3, dtype=torch.float64)
    for rank in range(ct.size()):
        reference = torch.nn.Embedding(5, 3).double()
        _embedding_loss(reference, rank).backward()
        expected += reference.weight.grad / ct.size()
    assert embedding.weight.grad.is_sparse
    torch.testing.assert_close(embedding.weight.grad.to_dense(), expected, atol=1e-12, rtol=0)


def test_load_state_dict_keeps_working():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    optimizer.step()
    optimizer.load_state_dict(optimizer.state_dict())
    optimizer.zero_grad()
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    # Reduced: the ranks' different local gradients became one average.
    assert_same_on_all_ranks([p.grad for p in model.parameters() if p.grad is not None],
                             'test.load_state_dict')


# Gradients in the client's shared-memory arena (collective.torch.grad_buckets).

def _in_arena(tensor, optimizer):
    """Whether `tensor`'s data lies in one of the optimizer's arena buckets."""
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    return any(b.address <= start and end <= b.address + b.nbytes
               for b in optimizer._buckets.buffers)


@pytest.mark.usefixtures('two_ranks')
def test_gradients_accumulate_in_the_arena():
    model = _Net()
    optimizer = _distributed(model)
    params = list(model.parameters())
    # Nothing is placed in p.grad before the first backward.
    assert all(p.grad is None for p in params)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    # Moved into the arena when submitted, the unused layer's zeros included.
    assert all(_in_arena(p.grad, optimizer) for p in params)
    addresses = [p.grad.data_ptr() for p in params]

    optimizer.zero_grad(set_to_none=False)  # torch 2.x defaults to True
    _loss(model, ct.rank(), seed=1).backward()
    # Autograd added into the arena views, which the hooks then submitted.
    assert [p.grad.data_ptr() for p in params] == addresses
    copied = connection.current().client.copied_out_bytes
    optimizer.synchronize()
    assert [p.grad.data_ptr() for p in params] == addresses
    # The daemon wrote the averages into the views, on one node and across
    # nodes alike: nothing was copied out of the result segment.
    assert connection.current().client.copied_out_bytes == copied
    _assert_grads(model, _expected_grads(seeds=(1,)))


@pytest.mark.usefixtures('two_ranks')
def test_gradients_set_to_none_return_to_the_arena():
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    optimizer.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())
    _loss(model, ct.rank(), seed=1).backward()  # fresh gradients, outside the arena
    optimizer.synchronize()
    assert all(_in_arena(p.grad, optimizer) for p in model.parameters())
    _assert_grads(model, _expected_grads(seeds=(1,)))


@pytest.mark.usefixtures('two_ranks')
@pytest.mark.parametrize('options', [dict(compression=ct.Compression.fp16),
                                     dict(zero_copy_gradients=False)], ids=['fp16', 'disabled'])
def test_no_arena_buckets_with_compression_or_when_disabled(options):
    model = _Net()
    optimizer = _distributed(model, **options)
    assert optimizer._buckets is None
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads(), atol=2e-3 if 'compression' in options else 1e-12)


@pytest.mark.usefixtures('two_ranks')
def test_gradients_that_do_not_fit_take_the_copy_path(monkeypatch):
    # Room for a.weight alone (30 float64 = 240 bytes, 256 with alignment).
    monkeypatch.setattr(grad_buckets, 'arena_budget', lambda client: 256)
    model = _Net()
    optimizer = _distributed(model)
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    assert [name for name, p in model.named_parameters() if _in_arena(p.grad, optimizer)] \
        == ['a.weight']
    _assert_grads(model, _expected_grads())


@pytest.mark.usefixtures('two_ranks')
def test_an_arena_that_refuses_the_buckets_means_copies(monkeypatch):
    def refuse(client, nbytes):
        raise HorovodInternalError(f'{nbytes} bytes do not fit')

    monkeypatch.setattr(_core.Client, 'allocate', refuse)
    model = _Net()
    optimizer = _distributed(model)
    assert optimizer._buckets.buffers == []
    _loss(model, ct.rank()).backward()
    optimizer.synchronize()
    _assert_grads(model, _expected_grads())
