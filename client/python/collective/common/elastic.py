"""Horovod's elastic training, the part no framework owns: ``State``, ``ObjectState``, ``run_fn``.

A training function decorated by ``hvd.elastic.run`` runs with a ``State``
that it commits from time to time. When a worker of the job dies, the
collective every other rank waits in raises ``HorovodInternalError``: each
survivor rolls its state back to the last commit, leaves the broken job,
joins the one the launcher re-forms without the dead worker, receives rank
0's state and runs the function again. When workers are added, every rank
raises ``HostsUpdatedInterrupt`` at the same ``commit()``/``check_host_updates()``,
keeps its state, re-forms with the newcomers and sends them the state.
A collective that fails on every rank without a death (mismatched tensors)
also raises ``HorovodInternalError``: every rank rolls back, and the
launcher re-forms the job with the same workers once all have asked.
How the job re-forms is ``collective.common.elastic_rendezvous``.
"""

import enum
import functools
import queue

from collective.common import elastic_rendezvous as rendezvous
from collective.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


class HostUpdateResult(enum.IntFlag):
    """What a hosts-updated notification says changed (Horovod's
    ``horovod.runner.elastic.worker.HostUpdateResult``)."""
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class State:
    """The state of a training run that survives the job re-forming.

    Subclass it as Horovod's ``horovod.common.elastic.State``: implement
    ``save``, ``restore`` and ``sync`` (and ``reset`` if needed), and call
    ``State.__init__(self, bcast_object, get_rank)``.

    Arguments:
        bcast_object: sends a picklable object from rank 0 to every rank
            (``hvd.broadcast_object``).
        get_rank: this process's rank (``hvd.rank``).
        agree_generation: (collective.* only; optional) returns the newest
            generation of an elastic job any rank has seen, given this rank's
            (a collective: every rank calls it with its own). Without it, rank
            0's view is sent to every rank, as Horovod sends its host updates.
    """

    def __init__(self, bcast_object, get_rank, agree_generation=None):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._agree_generation = agree_generation
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Calls each of ``callbacks`` (no arguments) after every re-formation, e.g. to scale the
        learning rate by the new ``hvd.size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by ``hvd.elastic.run`` once the job has re-formed: forgets the host updates
        received, then ``reset()`` and the reset callbacks."""
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Records a notification that the hosts changed at ``timestamp`` (``update_res``: a
        ``HostUpdateResult``), as Horovod's worker notification service delivers it: the next
        ``commit()``/``check_host_updates()`` raises ``HostsUpdatedInterrupt`` on every rank.
        (collectiverun's elastic jobs need no notification: the check reads the launcher's
        rendezvous directory.)"""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state (what ``restore()`` returns to after a failure), then raises
        ``HostsUpdatedInterrupt`` if the hosts changed. Commit often enough that redoing the
        steps since the last commit is cheap, rarely enough that saving is."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises ``HostsUpdatedInterrupt`` on every rank at once if the workers of the job
        changed: the launcher published a newer generation of an elastic job, or a host
        update was notified (``on_hosts_updated``) since the last check. A collective: every
        rank calls it at the same step; ``skip_sync`` is True when hosts were only removed.
        """
        prev_timestamp = last_timestamp = self._last_updated_timestamp
        update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, result = self._host_messages.get()
            if timestamp > last_timestamp:
                last_timestamp = timestamp
                update |= result
        elastic = rendezvous.directory() is not None
        current = rendezvous.generation()
        seen = max(current, rendezvous.read_world().generation) if elastic else current
        # Every rank must decide the same: the ranks read the world and receive
        # notifications at slightly different moments.
        if self._agree_generation is None:
            prev_timestamp, last_timestamp, update, newest = self._bcast_object(
                (prev_timestamp, last_timestamp, update, seen))
        else:
            # (Every rank knows alike whether the job is elastic.)
            newest = self._agree_generation(seen) if elastic else current
            prev_timestamp, last_timestamp, update = self._bcast_object(
                (prev_timestamp, last_timestamp, update))
        self._last_updated_timestamp = last_timestamp
        if last_timestamp > prev_timestamp:
            raise HostsUpdatedInterrupt(update == HostUpdateResult.removed)
        if newest > current:
            # A worker that failed makes the others raise HorovodInternalError
            # instead; what remains is workers being added, who need the state.
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """Saves the state in memory (``commit()`` also checks for new workers)."""
        raise NotImplementedError()

    def restore(self):
        """Returns to the state last saved."""
        raise NotImplementedError()

    def sync(self):
        """Sends rank 0's state to every rank."""
        raise NotImplementedError()

    def reset(self):
        """Adapts the state to a re-formed job (after restore() or sync())."""


class ObjectState(State):
    """A state made of picklable objects, kept as attributes: ``state.epoch``, ``state.batch``.

    Arguments:
        bcast_object, get_rank, agree_generation: as for ``State``
            (``agree_generation`` optional).
        kwargs: the attributes and their first values.
    """

    def __init__(self, bcast_object, get_rank, agree_generation=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         agree_generation=agree_generation)

    def save(self):
        """Copies the attributes' current values (what ``restore()`` returns to)."""
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        """Puts back the values last saved."""
        self._set_attrs()

    def sync(self):
        """Takes rank 0's saved values on every rank."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset):
    """Wraps ``func(state, ...)`` so that it outlives workers failing and being added.

    ``reset(after_failure)`` leaves the job and joins the next generation
    (``reset_job``).
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                if rendezvous.directory() is None:
                    raise  # not an elastic job: nothing re-forms it
                state.restore()
                skip_sync = False
                after_failure = True
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                after_failure = False
            while True:
                try:
                    reset(after_failure)
                    break
                except HorovodInternalError:
                    # The new generation failed as it formed (another worker
                    # died): on to the one without that worker.
                    after_failure = True
            state.on_reset()

    return wrapper


def reset_job(shutdown, init, after_failure):
    """Leaves the current generation and joins the latest one, once the launcher has published
    what comes after it (after a failure: a generation published since, without a dead worker)."""
    shutdown()
    rendezvous.wait_for_next_world(after_failure)
    init()  # joins the latest generation (see elastic_rendezvous.join_latest_generation)
