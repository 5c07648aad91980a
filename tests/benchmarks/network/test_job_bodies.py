"""The job calls' bodies as the protocol reads them (benchmarks/network/host_bodies.py) and as
their DRF serializers describe them to the API schema (benchmarks/network/host_api.py): the
same values accepted, the same errors, word for word, for any body."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.network import host_api, host_bodies

_ANY_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4),
    st.sampled_from(["", "  ", "yes", "0", "1.5", "x" * 191, str(uuid.UUID(int=7)),
                     str(uuid.UUID(int=7)).upper(), "{" + str(uuid.UUID(int=7)) + "}"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _body(fields: list[str]) -> st.SearchStrategy:
    return st.one_of(_ANY_JSON, st.fixed_dictionaries({}, optional=dict.fromkeys(
        [*fields, "extra"], _ANY_JSON)))


_FIGURES = ["ttft_ms", "completion_tokens", "elapsed_ms", "result"]
_COMPLETION = st.one_of(_ANY_JSON, st.fixed_dictionaries(
    {"ttft_ms": _ANY_JSON, "completion_tokens": _ANY_JSON, "elapsed_ms": _ANY_JSON},
    optional={"id": _ANY_JSON, "result": _ANY_JSON}))
_BODIES = {
    "lease": (host_bodies.LEASE, host_api.LeaseSerializer, _body(["start", "wait_s"])),
    "complete": (host_bodies.COMPLETE, host_api.CompleteSerializer,
                 _body([*_FIGURES, "lease_next", "wait_s"])),
    "complete several": (host_bodies.COMPLETE_MANY, host_api.CompleteManySerializer,
                         st.one_of(_body(["jobs", "lease_next"]), st.fixed_dictionaries(
                             {"jobs": st.lists(_COMPLETION, max_size=3)},
                             optional={"lease_next": _ANY_JSON}))),
    "fail": (host_bodies.FAIL, host_api.FailSerializer, _body(["reason"])),
}


def _plain(value):
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("call", list(_BODIES))
@given(data=st.data())
def test_a_body_is_read_as_its_serializer_reads_it(call, data):
    fields, serializer_class, bodies = _BODIES[call]
    body = data.draw(bodies)
    serializer = serializer_class(data=body)
    try:
        values = host_bodies.read(fields, body)
    except host_bodies.Malformed as exc:
        assert not serializer.is_valid(), body
        assert _plain(exc.detail) == _plain(serializer.errors), body
    else:
        assert serializer.is_valid(), (body, serializer.errors)
        assert _plain(values) == _plain(serializer.validated_data), body


def test_a_result_over_its_limit_is_refused_in_its_place():
    body = {"ttft_ms": 1, "completion_tokens": 2, "elapsed_ms": 3,
            "result": "x" * host_bodies.MAX_RESULT_BYTES}
    with pytest.raises(host_bodies.Malformed) as refused:
        host_bodies.read(host_bodies.COMPLETE, body)
    assert refused.value.detail == {"result": [f"at most {host_bodies.MAX_RESULT_BYTES} bytes"]}
