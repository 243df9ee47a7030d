"""collective.torch.elastic's pieces without a job: ElasticSampler's shares, ObjectState,
hvd.elastic.run's handling of failures and updates, check_host_updates, and the worker's side
of the rendezvous (inotify on a directory this test writes). Needs no daemon: ctest also runs
it alone (python_elastic_state, pytest --noconftest); the elastic jobs themselves are
tests/python/elastic."""

import os
import threading

import pytest

import collective.torch as hvd
from collective.common import elastic
from collective.common import elastic_rendezvous as rendezvous
from collective.torch.elastic import sampler as sampler_module


@pytest.fixture
def job_of(monkeypatch):
    """Makes ElasticSampler see a job of `size` ranks as rank `rank`."""

    def set_job(rank, size):
        monkeypatch.setattr(sampler_module, 'rank', lambda: rank)
        monkeypatch.setattr(sampler_module, 'size', lambda: size)

    return set_job


@pytest.fixture
def rendezvous_dir(tmp_path, monkeypatch):
    """An elastic job's directory, as worker 1 of generation 0 with no failures."""
    for name, value in {'COLLECTIVE_ELASTIC_DIR': str(tmp_path),
                        'COLLECTIVE_ELASTIC_WORKER': '1',
                        'COLLECTIVE_ELASTIC_GENERATION': '0',
                        'COLLECTIVE_ELASTIC_FAILURES': '0'}.items():
        monkeypatch.setenv(name, value)
    # What joining a generation sets: put back after the test, set or not before.
    for name in ('COLLECTIVE_JOB_ID', 'COLLECTIVE_LOCAL_RANK', 'COLLECTIVE_LOCAL_SIZE',
                 'HOROVOD_RANK', 'HOROVOD_SIZE', 'HOROVOD_LOCAL_RANK', 'HOROVOD_LOCAL_SIZE',
                 'HOROVOD_CROSS_RANK', 'HOROVOD_CROSS_SIZE', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK',
                 'LOCAL_SIZE', 'LOCAL_WORLD_SIZE'):
        monkeypatch.setenv(name, 'before the test')
    monkeypatch.setenv('COLLECTIVE_ELASTIC_AWAIT', '')
    monkeypatch.setenv('COLLECTIVE_ELASTIC_TIMEOUT_S', '30')
    # The launcher's first daemons serve.
    (tmp_path / 'daemons-0').touch()
    return tmp_path


def _publish(directory, generation, workers, failures=0, local_sizes=None, daemons=None):
    """Writes the world as collectiverun does; without local_sizes and daemons, as one that
    predates nodes (one node, the first daemons)."""
    text = (f'generation {generation}\njob_id job.{generation}\n'
            f'workers {" ".join(map(str, workers))}\nfailures {failures}\n')
    if local_sizes is not None:
        text += f'local_sizes {" ".join(map(str, local_sizes))}\ndaemons {daemons}\n'
    staging = directory / 'world.new'
    staging.write_text(text)
    os.rename(staging, directory / 'world')


def test_sampler_shares_cover_the_epoch_and_shrink_to_what_is_left(job_of):
    data = list(range(10))
    job_of(0, 3)
    shares = []
    for rank in range(3):
        job_of(rank, 3)
        shares.append(list(hvd.elastic.ElasticSampler(data, shuffle=False)))
    # Equal lengths, every sample, the first ones repeated to fill.
    assert [len(s) for s in shares] == [4, 4, 4]
    assert sorted(sum(shares, [])) == sorted(data + [0, 1])
    job_of(0, 3)
    sampler = hvd.elastic.ElasticSampler(data, shuffle=False)
    sampler.record_batch(0, 2)  # rank 0's first two: 0 and 3
    state = sampler.state_dict()
    job_of(1, 2)
    sampler.load_state_dict(state)
    assert list(sampler) == [2, 5, 7, 9]
    sampler.set_epoch(1)
    assert sampler.processed_indices == set() and len(sampler) == 5


def test_sampler_shuffles_alike_on_every_rank_and_by_epoch(job_of):
    job_of(0, 1)
    first = list(hvd.elastic.ElasticSampler(range(50), seed=4))
    assert first == list(hvd.elastic.ElasticSampler(range(50), seed=4))
    assert sorted(first) == list(range(50)) and first != list(range(50))
    again = hvd.elastic.ElasticSampler(range(50), seed=4)
    again.set_epoch(1)
    assert list(again) != first


def _object_state(**kwargs):
    sent = []

    def bcast(obj):
        sent.append(obj)
        return dict(obj, epoch=7)  # what rank 0 holds

    state = elastic.ObjectState(bcast_object=bcast, get_rank=lambda: 0,
                                agree_generation=max, **kwargs)
    return state, sent


def test_object_state_saves_restores_and_takes_rank_0s():
    state, sent = _object_state(epoch=0, batch=0)
    state.epoch, state.batch = 1, 5
    state.save()
    state.batch = 9
    state.restore()
    assert (state.epoch, state.batch) == (1, 5)
    state.sync()
    assert sent == [{'epoch': 1, 'batch': 5}] and (state.epoch, state.batch) == (7, 5)


class _RecordingState:
    def __init__(self):
        self.events = []

    def sync(self):
        self.events.append('sync')

    def restore(self):
        self.events.append('restore')

    def on_reset(self):
        self.events.append('on_reset')


def test_run_restores_after_a_failure_and_keeps_the_state_after_an_update(rendezvous_dir):
    state = _RecordingState()
    outcomes = [hvd.HorovodInternalError('rank 2 died'), hvd.elastic.HostsUpdatedInterrupt(False),
                'done']

    def reset(after_failure):
        state.events.append(f'reset after_failure={after_failure}')

    def train(state):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert elastic.run_fn(train, reset)(state) == 'done'
    assert state.events == ['sync', 'restore', 'reset after_failure=True', 'on_reset', 'sync',
                            'reset after_failure=False', 'on_reset', 'sync']


def test_run_waits_for_another_generation_when_one_fails_to_form(rendezvous_dir):
    state = _RecordingState()
    failures = [hvd.HorovodInternalError('rank 1 died while the job formed')]
    resets = []

    def reset(after_failure):
        resets.append(after_failure)
        if failures:
            raise failures.pop()

    outcomes = [hvd.elastic.HostsUpdatedInterrupt(False), 'done']

    def train(state):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert elastic.run_fn(train, reset)(state) == 'done'
    assert resets == [False, True]
    assert state.events == ['sync', 'on_reset', 'sync']


def test_run_outside_an_elastic_job_lets_a_failure_through(monkeypatch):
    monkeypatch.delenv('COLLECTIVE_ELASTIC_DIR', raising=False)

    def train(state):
        raise hvd.HorovodInternalError('rank 1 died')

    with pytest.raises(hvd.HorovodInternalError, match='rank 1 died'):
        elastic.run_fn(train, lambda after_failure: None)(_RecordingState())


def test_check_host_updates_raises_when_any_rank_saw_a_newer_generation(rendezvous_dir):
    _publish(rendezvous_dir, 0, [0, 1])
    agreed = []

    def agree(seen, others=0):
        agreed.append(seen)
        return max(seen, others)

    state = elastic.ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 0,
                                agree_generation=agree, epoch=0)
    state.commit()  # nothing new here or anywhere
    state._agree_generation = lambda seen: agree(seen, others=1)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt):
        state.check_host_updates()  # another rank saw generation 1
    _publish(rendezvous_dir, 1, [0, 1, 2])
    state._agree_generation = agree
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt):
        state.commit()
    assert agreed == [0, 0, 1]


def test_without_agree_generation_rank_0s_view_of_the_generation_decides(rendezvous_dir):
    # Horovod's State(bcast_object, get_rank): what rank 0 saw is sent to every rank.
    _publish(rendezvous_dir, 0, [0, 1])
    rank_0_saw = []

    def bcast(obj):
        rank_0_saw.append(obj)
        return obj[:3] + (rank_0_sees,)

    state = elastic.ObjectState(bcast_object=bcast, get_rank=lambda: 1, epoch=0)
    rank_0_sees = 0
    _publish(rendezvous_dir, 1, [0, 1, 2])  # seen here, not yet by rank 0
    state.commit()
    rank_0_sees = 1
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.commit()
    assert raised.value.skip_sync is False
    assert [obj[3] for obj in rank_0_saw] == [1, 1]


class _UserState(elastic.State):
    """A state written for Horovod: State.__init__ with its two arguments."""

    def __init__(self, bcast_object, get_rank):
        self.saved = self.value = 0
        super().__init__(bcast_object, get_rank)

    def save(self):
        self.saved = self.value

    def restore(self):
        self.value = self.saved

    def sync(self):
        self.value = self.saved = self._bcast_object(self.saved)


def test_a_state_subclass_written_for_horovod_commits_and_hears_host_updates(monkeypatch):
    monkeypatch.delenv('COLLECTIVE_ELASTIC_DIR', raising=False)
    sent = []

    def bcast(obj):
        sent.append(obj)
        return obj

    state = _UserState(bcast, lambda: 0)
    state.value = 3
    state.commit()  # nothing notified: no interrupt
    assert state.saved == 3 and sent == [(0, 0, elastic.HostUpdateResult.no_update, 0)]
    state.on_hosts_updated(10, elastic.HostUpdateResult.added)
    state.on_hosts_updated(5, elastic.HostUpdateResult.removed)  # older: ignored
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.commit()
    assert raised.value.skip_sync is False
    state.commit()  # already acted on
    state.on_hosts_updated(11, elastic.HostUpdateResult.removed)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.check_host_updates()
    assert raised.value.skip_sync is True  # only removed: the survivors hold the state
    state.on_hosts_updated(12, elastic.HostUpdateResult.added)
    state.on_reset()  # the job re-formed: what was notified before is moot
    state.check_host_updates()


def test_host_updates_follow_rank_0s_notifications(monkeypatch):
    monkeypatch.delenv('COLLECTIVE_ELASTIC_DIR', raising=False)
    # Rank 0 was notified; this rank not yet: it raises with rank 0.
    state = _UserState(lambda obj: (0, 7, elastic.HostUpdateResult.mixed, 0), lambda: 1)
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as raised:
        state.check_host_updates()
    assert raised.value.skip_sync is False


def test_a_survivor_waits_for_the_generation_after_the_failure(rendezvous_dir):
    _publish(rendezvous_dir, 1, [0, 1, 2, 3])  # an update published before the death
    found = []
    waiter = threading.Thread(target=lambda: found.append(rendezvous.wait_for_next_world(True)))
    waiter.start()
    _publish(rendezvous_dir, 2, [0, 1, 3], failures=1)
    waiter.join(30)
    assert not waiter.is_alive() and [w.generation for w in found] == [2]
    # It asked the launcher to re-form after the failures it knew of (none).
    assert (rendezvous_dir / 'reset-0-1').exists()


def test_an_added_worker_joins_the_latest_generation_once_the_others_left(rendezvous_dir,
                                                                         monkeypatch):
    # Worker 1 was added to generation 1 of [0, 2, 1]; worker 2 died before
    # joining, and generation 2 went ahead without it.
    monkeypatch.setenv('COLLECTIVE_ELASTIC_GENERATION', '1')
    monkeypatch.setenv('COLLECTIVE_ELASTIC_AWAIT', '0 2')
    _publish(rendezvous_dir, 2, [0, 1], failures=1)
    (rendezvous_dir / 'joining-0-0').touch()  # an older generation's marker counts for nothing
    joined = threading.Thread(target=rendezvous.join_latest_generation)
    joined.start()
    (rendezvous_dir / 'exited-2').touch()
    (rendezvous_dir / 'joining-2-0').touch()
    joined.join(30)
    assert not joined.is_alive()
    assert (os.environ['COLLECTIVE_JOB_ID'], os.environ['COLLECTIVE_LOCAL_RANK'],
            os.environ['WORLD_SIZE'], os.environ['COLLECTIVE_ELASTIC_GENERATION']) == (
                'job.2', '1', '2', '2')
    assert (rendezvous_dir / 'joining-2-1').exists()
    assert 'COLLECTIVE_ELASTIC_AWAIT' not in os.environ


def _placement():
    return tuple(os.environ[name] for name in (
        'COLLECTIVE_JOB_ID', 'HOROVOD_RANK', 'HOROVOD_SIZE', 'COLLECTIVE_LOCAL_RANK',
        'COLLECTIVE_LOCAL_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'HOROVOD_CROSS_RANK',
        'HOROVOD_CROSS_SIZE', 'RANK', 'WORLD_SIZE'))


def test_a_worker_registers_once_the_daemons_of_its_generation_serve(rendezvous_dir):
    # Generation 2 runs on a new world of daemons (1), on two nodes: workers
    # 0 and 1 on the first, 2 on the second.
    _publish(rendezvous_dir, 2, [0, 1, 2], failures=1, local_sizes=[2, 1], daemons=1)
    joined = threading.Thread(target=rendezvous.join_latest_generation)
    joined.start()
    # It says it joins (which lets the launcher start the daemons), then
    # waits for them: nothing else ends its wait.
    rendezvous._wait_until(lambda: (rendezvous_dir / 'joining-2-1').exists(), 'joining-2-1')
    assert joined.is_alive()
    assert _placement() == ('job.2', '1', '3', '1', '2', '1', '2', '0', '2', '1', '3')
    # A newer generation meanwhile, on other nodes: it joins that one.
    _publish(rendezvous_dir, 3, [0, 2, 1], failures=1, local_sizes=[1, 2], daemons=2)
    rendezvous._wait_until(lambda: (rendezvous_dir / 'joining-3-1').exists(), 'joining-3-1')
    assert joined.is_alive()
    (rendezvous_dir / 'daemons-2').touch()
    joined.join(30)
    assert not joined.is_alive()
    # Rank 2 of 3: local rank 1 of the 2 on node 1, of 2 nodes.
    assert _placement() == ('job.3', '2', '3', '1', '2', '1', '2', '1', '2', '2', '3')
    assert os.environ['COLLECTIVE_ELASTIC_GENERATION'] == '3'


def test_waiting_gives_up_at_the_deadline(rendezvous_dir, monkeypatch):
    monkeypatch.setenv('COLLECTIVE_ELASTIC_TIMEOUT_S', '0.2')
    _publish(rendezvous_dir, 0, [0, 1])
    with pytest.raises(TimeoutError, match='a generation after the failure did not '
                                           'happen within 0.2 s'):
        rendezvous.wait_for_next_world(True)


class _FakeCancellation:
    """collective._core.ConnectCancellation's surface, over a threading.Event."""

    def __init__(self):
        self.event = threading.Event()

    def cancel(self):
        self.event.set()

    @property
    def cancelled(self):
        return self.event.is_set()


def test_a_registration_that_a_failure_supersedes_is_cancelled(rendezvous_dir):
    _publish(rendezvous_dir, 0, [0, 1, 2])
    cancellation = _FakeCancellation()

    def connect():  # as the daemon: waits until the job forms, or the cancellation
        cancellation.event.wait(30)
        raise RuntimeError('the registration was cancelled while the job formed')

    outcome = []
    waiter = threading.Thread(target=lambda: outcome.append(
        rendezvous.connect_unless_superseded(connect, cancellation)))
    waiter.start()
    _publish(rendezvous_dir, 1, [0, 1, 2, 3])  # a worker added, then one died
    _publish(rendezvous_dir, 2, [0, 1, 3], failures=1)
    waiter.join(30)
    assert not waiter.is_alive() and outcome == [None] and cancellation.cancelled


def test_a_registration_that_forms_returns_its_client_and_its_errors(rendezvous_dir):
    _publish(rendezvous_dir, 0, [0, 1])
    assert rendezvous.connect_unless_superseded(lambda: 'client', _FakeCancellation()) == 'client'

    def refused():
        raise ValueError('refused')

    with pytest.raises(ValueError, match='refused'):
        rendezvous.connect_unless_superseded(refused, _FakeCancellation())


def test_only_a_refusal_naming_an_earlier_generation_is_retried(rendezvous_dir, monkeypatch):
    monkeypatch.setenv('COLLECTIVE_JOB_ID', 'job.2')
    monkeypatch.setenv('COLLECTIVE_ELASTIC_GENERATION', '2')
    assert rendezvous.refused_for_an_earlier_generation(
        "collectived is serving job 'job.1'; job 'job.2' can register when it has ended")
    assert not rendezvous.refused_for_an_earlier_generation(
        "collectived is serving job 'job.2'; job 'job.3' can register when it has ended")
    assert not rendezvous.refused_for_an_earlier_generation(
        "collectived is serving job 'other.1'; job 'job.2' can register when it has ended")
    assert not rendezvous.refused_for_an_earlier_generation('local rank 0 is already registered')
