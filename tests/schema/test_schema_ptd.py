"""The external tensor data format (.ptd): official files, round trips, layout."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from pyexecutorch.schema import (
    FormatError,
    PtdEntry,
    PtdFile,
    ScalarType,
    TensorLayout,
    decode_ptd,
    encode_ptd,
)
from pyexecutorch.schema.flat_tensor import HEADER_MAGIC
from pyexecutorch.schema.flat_tensor_schema import FlatTensor
from pyexecutorch.schema.flatbuffer import decode_root


def _external(official):
    if "external" not in official:
        pytest.fail("no official external-constants export")
    return official["external"]


def test_official_ptd_decodes_to_the_weights(official):
    case = _external(official)
    ptd = decode_ptd(case.ptd.read_bytes())
    assert ptd.version == 0
    assert set(ptd.entries) == {"weight", "bias"}
    for key, tensor in case.module.state_dict().items():
        layout, data = ptd.entries[key]
        assert isinstance(data, memoryview)
        assert layout.scalar_type == ScalarType.FLOAT
        assert layout.sizes == list(tensor.shape)
        assert layout.dim_order == list(range(tensor.dim()))
        assert bytes(data) == tensor.detach().numpy().tobytes()
        np.testing.assert_array_equal(ptd.array(key), tensor.detach().numpy())
    h = ptd.header
    assert (h.flatbuffer_offset, h.segment_base_offset % 128) == (48, 0)


def test_reencoded_ptd_loads_in_official_runtime(official, official_runtime, tmp_path):
    case = _external(official)
    ours = tmp_path / "ours.ptd"
    ours.write_bytes(encode_ptd(decode_ptd(case.ptd.read_bytes())))
    (x,) = case.inputs["forward"]
    expected = official_runtime._load_for_executorch(
        str(case.pte), data_path=str(case.ptd)
    ).forward((x,))
    got = official_runtime._load_for_executorch(str(case.pte), data_path=str(ours)).forward((x,))
    assert torch.equal(expected[0], got[0])
    torch.testing.assert_close(got[0], case.module(x).detach())
    # The buffer variant takes the same bytes.
    got = official_runtime._load_for_executorch_from_buffer(
        case.pte.read_bytes(), ours.read_bytes()
    ).forward((x,))
    assert torch.equal(expected[0], got[0])


def test_official_ptd_round_trip(official):
    case = _external(official)
    once = encode_ptd(decode_ptd(case.ptd.read_bytes()))
    assert encode_ptd(decode_ptd(once)) == once
    # Same layout as the official file: same size, same segment placement.
    assert len(once) == len(case.ptd.read_bytes())


def _sample() -> PtdFile:
    rng = np.random.default_rng(0)
    nhwc = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)  # physical N, H, W, C
    return PtdFile(
        {
            "a.weight": PtdEntry(
                TensorLayout(ScalarType.FLOAT, [3, 7], [0, 1]),
                rng.standard_normal((3, 7)).astype(np.float32).tobytes(),
            ),
            "a.bias": PtdEntry(
                TensorLayout(ScalarType.HALF, [7], [0]), np.arange(7, dtype=np.float16).tobytes()
            ),
            # channels last: logical N, C, H, W stored as N, H, W, C
            "conv": PtdEntry(
                TensorLayout(ScalarType.FLOAT, [2, 3, 5, 4], [0, 2, 3, 1]), nhwc.tobytes()
            ),
            "ids": PtdEntry(TensorLayout(ScalarType.LONG, [], []), np.int64(42).tobytes()),
            "blob": PtdEntry(None, b"opaque delegate bytes"),
        }
    )


def _with_shared(ptd: PtdFile) -> PtdFile:
    # "same" has the bytes of "a.weight": the two keys share one segment.
    w = ptd.entries["a.weight"]
    ptd.entries["same"] = PtdEntry(w.layout, w.data)
    return ptd


@pytest.mark.parametrize(
    "segment_alignment,tensor_alignment", [(128, 16), (16, 64), (1, 1), (4096, 32)]
)
def test_round_trip_and_alignment(segment_alignment, tensor_alignment):
    ptd = _with_shared(_sample())
    data = encode_ptd(ptd, segment_alignment=segment_alignment, tensor_alignment=tensor_alignment)
    back = decode_ptd(data)
    assert list(back.entries) == list(ptd.entries)
    for key, (layout, raw) in ptd.entries.items():
        assert back.entries[key].layout == layout
        assert bytes(back.entries[key].data) == bytes(raw)
    again = encode_ptd(back, segment_alignment=segment_alignment, tensor_alignment=tensor_alignment)
    assert again == data
    # The segment table: shared bytes stored once, every segment aligned in the file.
    h = back.header
    flat = decode_root(
        memoryview(data)[: h.flatbuffer_offset + h.flatbuffer_size], FlatTensor, b"FT01"
    )
    assert len(flat.segments) == len(ptd.entries) - 1
    align = max(segment_alignment, tensor_alignment)
    assert h.segment_base_offset % align == 0
    for seg in flat.segments:
        assert (h.segment_base_offset + seg.offset) % align == 0
    assert h.segment_base_offset + h.segment_data_size == len(data)
    assert data[8:12] == HEADER_MAGIC and data[4:8] == b"FT01"


def test_array_views_follow_dim_order():
    data = encode_ptd(_sample())
    back = decode_ptd(data)
    conv = back.array("conv")
    assert conv.shape == (2, 3, 5, 4)
    raw = np.frombuffer(bytes(back.entries["conv"].data), np.float32).reshape(2, 5, 4, 3)
    np.testing.assert_array_equal(conv, raw.transpose(0, 3, 1, 2))
    assert back.array("ids").shape == () and int(back.array("ids")) == 42
    with pytest.raises(TypeError, match="blob"):
        back.array("blob")


def test_empty_ptd():
    data = encode_ptd(PtdFile())
    assert decode_ptd(data).entries == {}
    assert encode_ptd(decode_ptd(data)) == data


def test_bad_alignment():
    with pytest.raises(ValueError, match="power of 2"):
        encode_ptd(_sample(), segment_alignment=24)
    with pytest.raises(ValueError, match="power of 2"):
        encode_ptd(_sample(), tensor_alignment=0)


def test_ptd_errors():
    data = bytearray(encode_ptd(_sample()))
    with pytest.raises(FormatError, match=r"file identifier b'ET12' at offset 4"):
        decode_ptd(bytes(data[:4]) + b"ET12" + bytes(data[8:]))
    with pytest.raises(
        FormatError, match=r"unsupported data file version: file identifier b'FT02'"
    ):
        decode_ptd(bytes(data[:4]) + b"FT02" + bytes(data[8:]))
    with pytest.raises(
        FormatError, match=r"flat tensor header magic at offset 8 is b'XH01', expected b'FH01'"
    ):
        decode_ptd(bytes(data[:8]) + b"XH01" + bytes(data[12:]))
    cut = len(data) - 3
    with pytest.raises(
        FormatError,
        match=rf"segment \d+ extends past the end of the file: offset \d+ \+ size \d+ > {cut}",
    ):
        decode_ptd(bytes(data[:cut]))
    with pytest.raises(FormatError, match="flatbuffer offset 48 \\+ size \\d+ > file size 100"):
        decode_ptd(bytes(data[:100]))
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 16 + 8, 10**12)  # flatbuffer size
    with pytest.raises(FormatError, match="> file size"):
        decode_ptd(bytes(bad))
    with pytest.raises(FormatError, match="too short"):
        decode_ptd(b"\0\0\0\0FT")


def test_layout_checks():
    ptd = PtdFile({"w": PtdEntry(TensorLayout(ScalarType.FLOAT, [4, 4], [0, 1]), bytes(60))})
    with pytest.raises(
        FormatError,
        match=r"named_data\[0\] \('w'\): a FLOAT tensor of sizes \[4, 4\] needs 64 bytes, but its segment holds 60",
    ):
        decode_ptd(encode_ptd(ptd))
    ptd = PtdFile({"w": PtdEntry(TensorLayout(ScalarType.FLOAT, [2, 2], [0, 0]), bytes(16))})
    with pytest.raises(FormatError, match="not a permutation"):
        decode_ptd(encode_ptd(ptd))
    ptd = PtdFile({"w": PtdEntry(TensorLayout(ScalarType.FLOAT, [-1, 2], [0, 1]), bytes(16))})
    with pytest.raises(FormatError, match="negative size"):
        decode_ptd(encode_ptd(ptd))
