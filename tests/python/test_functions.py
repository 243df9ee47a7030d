"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object."""

import pytest
import torch

import collective.torch as ct
from _helpers import assert_same_on_all_ranks, rank_batch


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4),
                               torch.nn.Linear(4, 2)).double()


def _roots():
    return sorted({0, ct.size() - 1})


@pytest.mark.parametrize('root', _roots())
@pytest.mark.parametrize('form', ['state_dict', 'named_parameters', 'parameters'])
def test_broadcast_parameters(root, form):
    model = _model(seed=ct.rank())
    model[1].running_mean.fill_(ct.rank())
    expected = _model(seed=root)
    expected[1].running_mean.fill_(root)

    params = {'state_dict': lambda: model.state_dict(),
              'named_parameters': lambda: list(model.named_parameters()),
              'parameters': lambda: list(model.parameters())}[form]()
    ct.broadcast_parameters(params, root_rank=root)

    for (name, got), want in zip(model.named_parameters(), expected.parameters()):
        assert torch.equal(got, want), name
    # Buffers travel only with the state_dict.
    want_mean = root if form == 'state_dict' else ct.rank()
    assert torch.equal(model[1].running_mean, torch.full((4,), want_mean, dtype=torch.float64))


def test_broadcast_parameters_refuses_other_types():
    with pytest.raises(ValueError, match='invalid params'):
        ct.broadcast_parameters(3, root_rank=0)


def _parameter_with_grad(rank):
    p = torch.nn.Parameter(rank_batch(0, (3, 2)))
    p.grad = rank_batch(rank, (3, 2), seed=1)
    return p


@pytest.mark.parametrize('root', _roots())
def test_broadcast_optimizer_state_existing_state(root):
    p = _parameter_with_grad(ct.rank())
    optimizer = torch.optim.SGD([p], lr=0.1 * (ct.rank() + 1), momentum=0.5 + 0.1 * ct.rank())
    optimizer.step()
    expected_p = _parameter_with_grad(root)
    expected = torch.optim.SGD([expected_p], lr=0.1 * (root + 1), momentum=0.5 + 0.1 * root)
    expected.step()

    ct.broadcast_optimizer_state(optimizer, root_rank=root)

    assert optimizer.param_groups[0]['lr'] == pytest.approx(0.1 * (root + 1))
    assert optimizer.param_groups[0]['momentum'] == pytest.approx(0.5 + 0.1 * root)
    assert torch.equal(optimizer.state[p]['momentum_buffer'],
                       expected.state[expected_p]['momentum_buffer'])


def test_broadcast_optimizer_state_creates_missing_state():
    model = _model(seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (ct.rank() + 1),
                                 betas=(0.8 + 0.01 * ct.rank(), 0.99), weight_decay=0.1)

    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    group = optimizer.param_groups[0]
    assert group['lr'] == pytest.approx(0.01)
    assert group['betas'] == pytest.approx((0.8, 0.99))
    assert isinstance(group['betas'], tuple)
    for p in model.parameters():
        assert set(optimizer.state[p]) >= {'step', 'exp_avg', 'exp_avg_sq'}
        # As in Horovod, the state-creating step leaves its zero gradients.
        assert torch.equal(p.grad, torch.zeros_like(p))
    # It must leave the weights alone (weight_decay would move them).
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_broadcast_optimizer_state_of_distributed_optimizer():
    model = _model(seed=ct.rank())
    ct.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = ct.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 - 0.1 * ct.rank()),
        named_parameters=model.named_parameters())

    # Would hang if the state-creating step allreduced on some ranks only.
    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    assert_same_on_all_ranks(list(model.parameters()), 'test.distributed_optimizer_state')
    assert optimizer.param_groups[0]['momentum'] == pytest.approx(0.9)
    buffers = [optimizer.state[p]['momentum_buffer'] for p in model.parameters()]
    assert all(torch.count_nonzero(b) == 0 for b in buffers)


class _CountingSGD(torch.optim.SGD):
    """Keeps a Python int in its state, as some third-party optimizers do."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group['params']:
                self.state[p]['updates'] = self.state[p].get('updates', 0) + 1
        return super().step(closure)


def test_broadcast_optimizer_state_scalar_state():
    p = _parameter_with_grad(ct.rank())
    optimizer = _CountingSGD([p], lr=0.1, momentum=0.9)
    for _ in range(ct.rank() + 1):
        optimizer.step()

    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    assert_same_on_all_ranks([optimizer.state[p]['momentum_buffer']], 'test.scalar_state')
    assert optimizer.state[p]['updates'] == 1


def test_broadcast_optimizer_state_plain_sgd():
    # Plain SGD keeps no tensors (depending on the torch version, no state at
    # all): every rank must still agree on whether anything is sent.
    p = _parameter_with_grad(ct.rank())
    before = p.detach().clone()
    optimizer = torch.optim.SGD([p], lr=0.5)
    ct.broadcast_optimizer_state(optimizer, root_rank=0)
    assert torch.equal(p, before)
    # Horovod's state-creating step replaces every gradient with zeros.
    assert torch.equal(p.grad, torch.zeros(3, 2, dtype=torch.float64))


class _Lookup(torch.nn.Module):
    """Rows of a trained table picked by a frozen integer index (no gradient)."""

    def __init__(self):
        super().__init__()
        self.index = torch.nn.Parameter(torch.tensor([2, 0]), requires_grad=False)
        self.table = torch.nn.Parameter(rank_batch(ct.rank(), (5,), seed=3))

    def forward(self, x):
        return self.table[self.index] * x


def test_broadcast_optimizer_state_leaves_zero_gradients_where_grad_is_required():
    model = _Lookup()
    optimizer = ct.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                        weight_decay=1e-3),
        named_parameters=model.named_parameters())
    ct.broadcast_parameters(model.state_dict(), root_rank=0)
    table = model.table.detach().clone()

    ct.broadcast_optimizer_state(optimizer, root_rank=0)

    index, trained = optimizer.param_groups[0]['params']
    assert index.grad is None
    assert trained.grad is not None
    assert torch.equal(trained.grad, torch.zeros(5, dtype=torch.float64))
    # The same zeros everywhere: what the root broadcasts is what every rank holds.
    assert torch.equal(ct.broadcast(trained.grad, root_rank=0, name='test.zero_grads'),
                       trained.grad)
    assert torch.equal(model.table, table)  # the step on zeros did not move the weights
    # Training goes on from there.
    optimizer.zero_grad()
    model(torch.ones(2, dtype=torch.float64)).sum().backward()
    optimizer.step()
    assert_same_on_all_ranks([model.table], 'test.lookup_after_step')


def test_broadcast_optimizer_state_refuses_lbfgs():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match='LBFGS'):
        ct.broadcast_optimizer_state(torch.optim.LBFGS([p]), root_rank=0)


@pytest.mark.parametrize('root', _roots())
def test_broadcast_object(root):
    obj = {'epoch': 7, 'name': 'root', 'weights': torch.arange(5), 'nested': [1.5, (2, 'x')]}
    got = ct.broadcast_object(obj if ct.rank() == root else None, root_rank=root)
    assert got['epoch'] == 7 and got['name'] == 'root' and got['nested'] == [1.5, (2, 'x')]
    assert torch.equal(got['weights'], torch.arange(5))


def test_broadcast_object_named():
    got = ct.broadcast_object('value-%d' % ct.rank(), root_rank=0, name='test.named_object')
    assert got == 'value-0'


@pytest.mark.usefixtures('two_ranks')
def test_allgather_object():
    # Different sizes per rank exercise the uneven allgather.
    obj = {'rank': ct.rank(), 'payload': 'x' * (10 * ct.rank())}
    got = ct.allgather_object(obj)
    assert got == [{'rank': r, 'payload': 'x' * (10 * r)} for r in range(ct.size())]


def test_process_set(static_process_sets):
    evens, odds = static_process_sets
    mine = evens if ct.rank() % 2 == 0 else odds
    root = mine.ranks[-1]

    got = ct.broadcast_object('from %d' % ct.rank(), root_rank=root, process_set=mine)
    gathered = ct.allgather_object(ct.rank(), process_set=mine)
    model = _model(seed=ct.rank())
    ct.broadcast_parameters(model.state_dict(), root_rank=root, process_set=mine)

    assert got == 'from %d' % root
    assert gathered == mine.ranks
    for got, want in zip(model.parameters(), _model(seed=root).parameters()):
        assert torch.equal(got, want)
