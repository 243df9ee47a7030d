"""collective._core's point-to-point methods, send_async and recv_async, with CPU torch
tensors (collective.mpi4torch's Isend/Irecv/Send/Recv are built on them): a ring exchange
over dtypes, received as views and into outputs, message order within and across tags,
self-sends, mismatched receives failing on both ranks, and argument errors at the call.
The rings go round every rank of the job, so across nodes (multinode_python_test) their
messages cross from node to node. Every rank runs the same tests in the same order
(conftest.py connected them)."""

import zlib

import pytest
import torch

import collective.torch as hvd
from collective import _core
from collective.common import connection
from collective.torch import tensor_args

GLOBAL = _core.GLOBAL_PROCESS_SET


def _client():
    return connection.current().client


def _ring():
    """(next, previous): this rank's neighbours in the ring of every rank."""
    return (hvd.rank() + 1) % hvd.size(), (hvd.rank() - 1) % hvd.size()


def _data(name, rank, shape, dtype):
    # Not hash(): string hashes differ between processes.
    generator = torch.Generator().manual_seed(zlib.crc32(('%s/%d' % (name, rank)).encode()))
    values = torch.randint(-100, 100, shape, generator=generator)
    return values.to(dtype)


def _received(result, like):
    out = torch.empty(list(result.shape), dtype=like.dtype)
    result.copy_to(out.data_ptr(), out.numel() * out.element_size())
    result.release()
    return out


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int64, torch.uint8,
                                   torch.float16, torch.bool])
@pytest.mark.parametrize('into_output', [False, True])
def test_a_ring_exchange_delivers_the_senders_tensor(dtype, into_output):
    rank = hvd.rank()
    following, previous = _ring()
    name = 'ring.%s.%s' % (dtype, into_output)
    mine = _data(name, rank, (5, 3), dtype)
    like = torch.empty((5, 3), dtype=dtype)
    out = torch.zeros_like(like)
    client = _client()
    send = client.send_async(tensor_args.arg(mine), following, 4, GLOBAL)
    if into_output:
        recv = client.recv_async(tensor_args.arg(like), previous, 4, GLOBAL,
                                 output=out.data_ptr(), output_bytes=out.numel() *
                                 out.element_size())
        result = client.wait(recv)
        assert list(result.shape) == [5, 3]
        got = out
    else:
        recv = client.recv_async(tensor_args.arg(like), previous, 4, GLOBAL)
        got = _received(client.wait(recv), like)
    sent = client.wait(send)
    assert sent.nbytes == 0
    assert torch.equal(got, _data(name, previous, (5, 3), dtype))


def test_messages_of_a_tag_arrive_in_order_and_tags_do_not_overtake():
    rank = hvd.rank()
    following, source = _ring()
    client = _client()
    tags = [1, 2, 1, 2, 1]
    # Held while the calls read them: arg() keeps only the address.
    inputs = [torch.full((3,), float(10 * rank + i)) for i in range(len(tags))]
    sends = [client.send_async(tensor_args.arg(inputs[i]), following, tag, GLOBAL)
             for i, tag in enumerate(tags)]
    like = torch.empty(3)
    # Tag 2 first: the k-th receive of a tag gets the k-th send of that tag.
    order = [i for i, tag in enumerate(tags) if tag == 2] + \
            [i for i, tag in enumerate(tags) if tag == 1]
    receives = [(i, client.recv_async(tensor_args.arg(like), source, tags[i], GLOBAL))
                for i in order]
    for i, handle in receives:
        got = _received(client.wait(handle), like)
        assert got.tolist() == [float(10 * source + i)] * 3
    for handle in sends:
        client.wait(handle)


@pytest.mark.parametrize('receive_first', [True, False])
def test_a_rank_sends_to_itself(receive_first):
    rank = hvd.rank()
    client = _client()
    mine = torch.arange(7, dtype=torch.float64) + rank
    like = torch.empty(7, dtype=torch.float64)
    if receive_first:
        recv = client.recv_async(tensor_args.arg(like), rank, 9, GLOBAL)
        send = client.send_async(tensor_args.arg(mine), rank, 9, GLOBAL)
    else:
        send = client.send_async(tensor_args.arg(mine), rank, 9, GLOBAL)
        recv = client.recv_async(tensor_args.arg(like), rank, 9, GLOBAL)
    assert torch.equal(_received(client.wait(recv), like), mine)
    client.wait(send)


@pytest.mark.parametrize('kind', ['bytes', 'dtype'])
def test_a_mismatched_receive_fails_on_both_ranks(kind):
    following, previous = _ring()
    client = _client()
    wrong = torch.empty(8) if kind == 'bytes' else torch.empty(4, dtype=torch.int32)
    ones = torch.ones(4)
    send = client.send_async(tensor_args.arg(ones), following, 11, GLOBAL)
    recv = client.recv_async(tensor_args.arg(wrong), previous, 11, GLOBAL)
    for handle in (send, recv):
        with pytest.raises(hvd.HorovodInternalError, match='Mismatched send and receive'):
            client.wait(handle)
    # The job goes on.
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


def test_arguments_are_refused_at_the_call():
    client = _client()
    t = torch.ones(2)
    with pytest.raises(ValueError, match='not a rank of process set 0'):
        client.send_async(tensor_args.arg(t), hvd.size(), 0, GLOBAL)
    with pytest.raises(ValueError, match='not a rank of process set 0'):
        client.recv_async(tensor_args.arg(t), -1, 0, GLOBAL)
    with pytest.raises(ValueError, match='tag -3 is negative'):
        client.send_async(tensor_args.arg(t), 0, -3, GLOBAL)
    with pytest.raises(ValueError, match='the output holds 4 bytes'):
        client.recv_async(tensor_args.arg(t), 0, 0, GLOBAL, output=t.data_ptr(), output_bytes=4)


def test_a_message_to_and_from_another_node_arrives():
    if hvd.size() == hvd.local_size():
        pytest.skip('one node: every rank is local (multinode_python_test runs this across nodes)')
    client = _client()
    first = hvd.rank() - hvd.local_rank()
    # The first rank after this node's, or the last before it: on another node.
    other = first + hvd.local_size() if first + hvd.local_size() < hvd.size() else first - 1
    # Every rank sends to its `other` and receives from each rank whose
    # `other` it is.
    others = hvd.allgather(torch.tensor([other])).tolist()
    sent = _data('across', hvd.rank(), (3, 5), torch.float64)
    send = client.send_async(tensor_args.arg(sent), other, 21, GLOBAL)
    received = []
    for source in [r for r in range(hvd.size()) if others[r] == hvd.rank()]:
        out = torch.empty(3, 5, dtype=torch.float64)
        handle = client.recv_async(tensor_args.arg(out), source, 21, GLOBAL,
                                   output=out.data_ptr(), output_bytes=out.numel() * 8)
        received.append((source, handle, out))
    for source, handle, out in received:
        client.wait(handle)
        assert torch.equal(out, _data('across', source, (3, 5), torch.float64)), source
    client.wait(send)
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2
