"""The shared-prefix cache's row layers: states written in place, rows removed, room bounded.

The attention's results are proved against uncached decoding in ``tests/test_sampler.py``;
these check the storage alone, on random states.
"""

import os

import pytest
import torch

from swarmnode.train import prefixattn


def _layer(capacity: int) -> prefixattn._RowLayer:
    prefix = torch.randn(2, 3, 5, 8)
    return prefixattn._RowLayer(prefix, prefix + 1, capacity)


def test_steps_are_stored_in_place_in_bf16_and_read_back_whole():
    layer = _layer(capacity=6)
    steps = [(torch.randn(4, 3, 1, 8), torch.randn(4, 3, 1, 8)) for _ in range(3)]
    for i, (k, v) in enumerate(steps):
        keys, values = layer.update(k, v)
        assert keys.shape == values.shape == (4, 3, i + 1, 8) and keys.dtype == torch.bfloat16
    assert keys.data_ptr() == layer.keys.data_ptr()  # a view of the room, not a new tensor
    assert torch.equal(keys, torch.cat([k for k, _ in steps], dim=-2).to(torch.bfloat16))
    assert torch.equal(values, torch.cat([v for _, v in steps], dim=-2).to(torch.bfloat16))
    assert layer.get_seq_length() == 5 + 3


def test_kept_rows_keep_their_states_and_go_on_growing():
    layer = _layer(capacity=4)
    first = torch.randn(4, 3, 2, 8)
    layer.update(first, -first)
    layer.keep_rows(torch.tensor([0, 3]))
    more = torch.randn(2, 3, 1, 8)
    keys, values = layer.update(more, -more)
    expected = torch.cat([first[[0, 3]], more], dim=-2).to(torch.bfloat16)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)


def test_a_step_beyond_the_room_is_refused():
    layer = _layer(capacity=2)
    layer.update(torch.randn(4, 3, 2, 8), torch.randn(4, 3, 2, 8))
    with pytest.raises(ValueError, match="room for 2 generated tokens"):
        layer.update(torch.randn(4, 3, 1, 8), torch.randn(4, 3, 1, 8))


def _resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_room_is_resident_only_where_written_and_dropped_rows_give_it_back():
    before = _resident_bytes()
    room = prefixattn._Room(64, 4096, 1, 256, torch.bfloat16, torch.device("cpu"))  # 128 MiB
    room.states[:, :, :8] = 1.0  # 8 tokens of 4096 in each of 64 rows: 64 pages
    assert _resident_bytes() - before < 8 * 2**20
    room.states[:, :, :2048] = 2.0  # half of every row: 64 MiB
    assert _resident_bytes() - before > 60 * 2**20
    room.keep([5, 63], 2048)
    assert _resident_bytes() - before < 8 * 2**20
    assert room.states.shape == (2, 1, 4096, 256) and float(room.states[:, :, :2048].sum()) == 2 * 2048 * 256 * 2.0


def test_rows_are_kept_in_their_order_only():
    layer = _layer(capacity=2)
    layer.update(torch.randn(4, 3, 1, 8), torch.randn(4, 3, 1, 8))
    with pytest.raises(ValueError, match="ascend"):
        layer.keep_rows(torch.tensor([3, 0]))
