"""A small, exactly checkable elastic training run for the elastic tests.

Least squares on 96 fixed samples for 2 epochs, with SGD and momentum (so the
optimizer has state to keep), in global batches of 12 samples whatever the
number of ranks: each rank takes every size-th sample of the batch, the
gradients are summed across ranks and divided by 12. The result is therefore
the same for any sequence of job sizes, and equals ``reference_weights()``,
computed in one process, up to rounding. Every committed step records, in the
state, the samples the whole job processed in it.
"""

import os
import signal
import sys
import tempfile
import time

import torch

import collective.torch as hvd
from collective.common import elastic_rendezvous

SAMPLES = 96
BATCH = 12
EPOCHS = 2
STEPS = EPOCHS * SAMPLES // BATCH


def data():
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 4, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], dtype=torch.float64) + 0.25
    return x, y


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def reference_weights():
    """The weights after STEPS steps in one process."""
    x, y = data()
    model, optimizer = make_model()
    for step in range(STEPS):
        start = (step * BATCH) % SAMPLES
        optimizer.zero_grad()
        (((model(x[start:start + BATCH]) - y[start:start + BATCH]) ** 2).sum() / BATCH).backward()
        optimizer.step()
    return flat_weights(model)


def flat_weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def worker():
    return elastic_rendezvous.worker()


def node_names():
    """The hosts the discovery tests list as their first, second and third node: stand-in
    nodes of this machine, unless COLLECTIVE_TEST_NODES names others (machines reached over
    ssh, as machines_test runs these tests)."""
    return os.environ.get('COLLECTIVE_TEST_NODES', 'localhost 127.0.0.1 127.0.0.2').split()


def train_losing_the_second_node(cut_off):
    """Trains on two nodes, the second running worker 2 alone, which calls ``cut_off()`` (its
    node is to be lost: its daemon killed, say) in step 3 of generation 0 after the weights
    changed, and waits to be stopped with its node. Checks what the survivors see: the job
    re-formed once, on the first node alone, with every sample processed once per epoch and
    one process's weights. Returns ``facts``."""
    def hook(state, step, phase):
        if (os.environ['COLLECTIVE_ELASTIC_GENERATION'], step, phase) == ('0', 3, 'updated') \
                and worker() == 2:
            assert hvd.cross_rank() == 1 and hvd.local_size() == 1
            cut_off()
            signal.pause()  # until collectiverun stops this worker with its node

    state, model, facts = train(hook)
    assert worker() != 2
    assert (hvd.rank(), hvd.size()) == (worker(), 2)
    assert (hvd.cross_size(), hvd.local_size()) == (1, 2)
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    assert facts['resets'] == 1
    check_result(state, model)
    return facts


def death_file():
    """Where a worker about to die writes the time, for the survivors to measure the recovery."""
    job = os.environ['COLLECTIVE_JOB_ID'].rsplit('.', 1)[0]
    return os.path.join(tempfile.gettempdir(), f'{job}.death')


def die():
    with open(death_file(), 'w') as f:
        f.write(repr(time.time()))
    os.kill(os.getpid(), 9)


def train(hook=None, distributed_optimizer=False):
    """Trains under hvd.elastic.run; returns (state, model, facts about the run).

    ``hook(state, step, phase)`` runs at the start of each step (phase
    'start') and after the weights changed but before the step's last
    collective ('updated'); it may kill this worker or ask the launcher
    for another. With ``distributed_optimizer`` the gradients are summed by
    hvd.DistributedOptimizer (made once, at the job's first size) instead
    of one allreduce each.
    """
    hvd.init()
    x, y = data()
    model, optimizer = make_model()
    if distributed_optimizer:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             op=hvd.Sum)
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, cursor=0, processed=[])
    facts = {'resets': 0, 'first_step': None, 'recovery_s': None}

    def on_reset():
        facts['resets'] += 1
        facts['reformed'] = True

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def loop(state):
        while state.epoch < EPOCHS:
            step = state.epoch * (SAMPLES // BATCH) + state.cursor // BATCH
            if facts['first_step'] is None:
                facts['first_step'] = step
            if hook is not None:
                hook(state, step, 'start')
            mine = list(range(state.cursor, state.cursor + BATCH))[hvd.rank()::hvd.size()]
            optimizer.zero_grad()
            if distributed_optimizer:
                (((model(x[mine]) - y[mine]) ** 2).sum() / BATCH).backward()
            else:
                ((model(x[mine]) - y[mine]) ** 2).sum().backward()
                for i, p in enumerate(model.parameters()):
                    p.grad = hvd.allreduce(p.grad, op=hvd.Sum, name=f'grad.{i}') / BATCH
            optimizer.step()
            if hook is not None:
                hook(state, step, 'updated')
            done = hvd.allgather(torch.tensor(mine, dtype=torch.int64), name='samples')
            if facts.pop('reformed', False) and os.path.exists(death_file()):
                with open(death_file()) as f:
                    facts['recovery_s'] = time.time() - float(f.read())
            state.processed = state.processed + done.tolist()
            state.cursor += BATCH
            if state.cursor == SAMPLES:
                state.epoch, state.cursor = state.epoch + 1, 0
            state.commit()

    loop(state)
    return state, model, facts


def report(facts):
    if facts['recovery_s'] is not None and hvd.rank() == 0:
        print(f'elastic: {facts["recovery_s"]:.3f} s from the death of a worker to the end of the '
              f'first step of the re-formed job ({hvd.size()} ranks)', file=sys.__stdout__,
              flush=True)


def check_result(state, model):
    """What every rank must see at the end: every sample processed once per epoch in the
    committed steps, and the same weights everywhere, equal to one process's."""
    assert sorted(state.processed) == sorted(list(range(SAMPLES)) * EPOCHS)
    weights = flat_weights(model)
    everyone = hvd.allgather_object(weights.tolist(), name='final.weights')
    assert all(w == everyone[0] for w in everyone), everyone
    assert torch.allclose(weights, reference_weights(), rtol=0, atol=1e-9), (
        weights, reference_weights())


def check_grown_job(state, model, facts, added):
    """What every rank must see after worker ``added`` joined a job of ``added`` workers at its
    next commit: generation 1 of ``added + 1`` ranks, the newcomer started from rank 0's state
    (not from scratch) as the last rank, the others re-formed once; and check_result."""
    assert hvd.size() == added + 1
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '1'
    if worker() == added:
        assert hvd.rank() == added and facts['first_step'] > 3 and facts['resets'] == 0
    else:
        assert hvd.rank() == worker() and facts['resets'] == 1
    check_result(state, model)
