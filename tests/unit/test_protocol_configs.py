"""Unit tests for DescribeConfigs (API key 32) on kgroup's wire layer: v1-v3 (classic
encoding) and v4 (flexible), on a GROUP resource (type 32).

Every expected byte string is written out by hand from Kafka's JSON message schemas, as in
``test_protocol_wire.py`` and ``test_protocol_848.py``. Classic versions: STRING is an
int16 length (-1 null), ARRAY an int32 count (-1 null). v4: COMPACT_STRING / COMPACT_ARRAY
are an unsigned varint of length + 1 (0 = null) and every struct ends with a tagged-field
section (``\\x00`` when empty).
"""

from __future__ import annotations

from typing import Any

import pytest

from kgroup._core._messages_configs import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_GROUP,
    RESOURCE_GROUP,
    ConfigQuery,
    ConfigSynonym,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedConfigs,
)
from kgroup._errors import RemoteProtocolError, UnsupportedVersion
from kgroup._protocol import from_wire, to_wire
from kgroup._protocol._schemas import REQUEST_STRUCTS
from kgroup._protocol._versions import ALL_VERSIONS, FLEXIBLE_FROM

KEY = b"consumer.session.timeout.ms"  # 27 bytes
BROKER_KEY = b"group.consumer.session.timeout.ms"  # 33 bytes
assert len(KEY) == 0x1B and len(BROKER_KEY) == 0x21

SESSION = DescribeConfigsRequest(
    resources=(
        ConfigQuery(
            resource_type=RESOURCE_GROUP, resource_name="grp", keys=("consumer.session.timeout.ms",)
        ),
    ),
    include_synonyms=True,
)


def prepare(request: Any, version: int) -> Any:
    wire = to_wire(request)
    struct = wire.prepare({wire.API_KEY: (version, version)})
    assert struct.API_VERSION == version
    return struct


def encode(request: Any, version: int) -> bytes:
    return bytes(prepare(request, version).encode())


def response_type(version: int) -> Any:
    return REQUEST_STRUCTS[32][version].RESPONSE_TYPE


def decode(version: int, raw: bytes) -> Any:
    return from_wire(response_type(version).decode(raw))


def test_versions_and_flexibility() -> None:
    """v1-v4 (Kafka 4.0 removed v0, KIP-896); v4 is the first flexible version."""
    assert ALL_VERSIONS[32] == (1, 4)
    assert FLEXIBLE_FROM[32] == 4
    assert [REQUEST_STRUCTS[32][v].FLEXIBLE_VERSION for v in (1, 2, 3, 4)] == [
        False,
        False,
        False,
        True,
    ]


# --- requests -------------------------------------------------------------------------------

_V1_RESOURCE = (
    b"\x00\x00\x00\x01"  # resources: 1
    b"\x20"  # resource_type: GROUP (32)
    b"\x00\x03grp"  # resource_name
    b"\x00\x00\x00\x01\x00\x1b" + KEY  # configuration_keys: [the key]
)


@pytest.mark.parametrize("version", [1, 2])
def test_request_v1_v2_bytes(version: int) -> None:
    assert encode(SESSION, version) == _V1_RESOURCE + b"\x01"  # include_synonyms


def test_request_v3_adds_include_documentation() -> None:
    request = DescribeConfigsRequest(
        resources=SESSION.resources, include_synonyms=True, include_documentation=True
    )
    assert encode(request, 3) == _V1_RESOURCE + b"\x01\x01"


def test_request_v4_is_flexible() -> None:
    resource = b"\x20\x04grp" + b"\x02\x1c" + KEY + b"\x00"  # GROUP, name, keys, tags
    # resources: 1; include_synonyms, include_documentation, tags
    assert encode(SESSION, 4) == b"\x02" + resource + b"\x01\x00\x00"


def test_request_null_keys_lists_every_config() -> None:
    every = DescribeConfigsRequest(
        resources=(ConfigQuery(resource_type=RESOURCE_GROUP, resource_name="g"),)
    )
    assert encode(every, 1) == b"\x00\x00\x00\x01\x20\x00\x01g\xff\xff\xff\xff\x00"
    assert encode(every, 4) == b"\x02\x20\x02g\x00\x00\x00\x00\x00"


def test_request_negotiates_the_highest_common_version() -> None:
    wire = to_wire(SESSION)
    assert wire.prepare({32: (0, 4)}).API_VERSION == 4
    assert wire.prepare({32: (0, 2)}).API_VERSION == 2


@pytest.mark.parametrize(
    ("versions", "problem"),
    [({32: (0, 0)}, "no version in common"), ({}, "does not offer this API")],
)
def test_request_without_a_common_version(versions: dict[int, Any], problem: str) -> None:
    with pytest.raises(UnsupportedVersion, match=problem) as caught:
        to_wire(SESSION).prepare(versions)
    assert caught.value.api == "DescribeConfigs"


# --- responses ------------------------------------------------------------------------------


def _classic_response(version: int) -> bytes:
    since_v3 = b"\x03\xff\xff" if version >= 3 else b""  # config_type INT, documentation null
    return (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        b"\x00\x00\x00\x01"  # results: 1
        b"\x00\x00"  # error_code
        b"\xff\xff"  # error_message: null
        b"\x20"  # resource_type
        b"\x00\x03grp"
        b"\x00\x00\x00\x01"  # configs: 1
        b"\x00\x1b" + KEY + b"\x00\x047000"  # name, value
        b"\x00"  # read_only
        b"\x08"  # config_source: GROUP_CONFIG
        b"\x00"  # is_sensitive
        b"\x00\x00\x00\x02"  # synonyms: 2
        b"\x00\x1b" + KEY + b"\x00\x047000\x08"
        b"\x00\x21" + BROKER_KEY + b"\x00\x0545000\x05" + since_v3
    )


def _expected(version: int) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(
        results=(
            DescribedConfigs(
                error_code=0,
                resource_type=RESOURCE_GROUP,
                resource_name="grp",
                configs=(
                    DescribedConfig(
                        name="consumer.session.timeout.ms",
                        value="7000",
                        source=CONFIG_SOURCE_GROUP,
                        synonyms=(
                            ConfigSynonym(
                                name="consumer.session.timeout.ms",
                                value="7000",
                                source=CONFIG_SOURCE_GROUP,
                            ),
                            ConfigSynonym(
                                name="group.consumer.session.timeout.ms",
                                value="45000",
                                source=CONFIG_SOURCE_DEFAULT,
                            ),
                        ),
                        config_type=3 if version >= 3 else 0,
                    ),
                ),
            ),
        )
    )


@pytest.mark.parametrize("version", [1, 2, 3])
def test_classic_response(version: int) -> None:
    raw = _classic_response(version)
    answer = decode(version, raw)
    assert answer == _expected(version)
    assert answer.error_code == 0
    assert answer.results[0].get("consumer.session.timeout.ms") is not None
    assert answer.results[0].get("nothing") is None
    assert bytes(response_type(version).decode(raw).encode()) == raw


FLEXIBLE = (
    b"\x00\x00\x00\x00"  # throttle_time_ms
    b"\x02"  # results: 1
    b"\x00\x00"  # error_code
    b"\x00"  # error_message: null
    b"\x20"
    b"\x04grp"
    b"\x02"  # configs: 1
    b"\x1c" + KEY + b"\x057000"
    b"\x00\x08\x00"  # read_only, config_source, is_sensitive
    b"\x03"  # synonyms: 2
    b"\x1c" + KEY + b"\x057000\x08\x00"  # ... and the synonym's tags
    b"\x22" + BROKER_KEY + b"\x0645000\x05\x00"
    b"\x03"  # config_type: INT
    b"\x00"  # documentation: null
    b"\x00"  # config tags
    b"\x00"  # result tags
    b"\x00"
)


def test_flexible_response() -> None:
    assert decode(4, FLEXIBLE) == _expected(4)
    assert bytes(response_type(4).decode(FLEXIBLE).encode()) == FLEXIBLE


def test_authorization_failure_per_resource() -> None:
    """What Kafka 4.4.0 answers a principal without DESCRIBE_CONFIGS on the group."""
    raw = (
        b"\x00\x00\x00\x00\x02"
        b"\x00\x1e"  # GROUP_AUTHORIZATION_FAILED (30)
        b"\x1cGroup authorization failed."
        b"\x20\x04grp"
        b"\x01"  # configs: empty
        b"\x00\x00"
    )
    answer = decode(4, raw)
    assert answer.error_code == 30
    assert answer.results[0].error_message == "Group authorization failed."
    assert answer.results[0].configs == ()


def test_null_config_name_names_the_field() -> None:
    raw = FLEXIBLE.replace(b"\x02\x1c" + KEY, b"\x02\x00", 1)
    with pytest.raises(
        RemoteProtocolError, match=r"^DescribeConfigs v4 .*configs\[0\] response: field 'name'"
    ):
        decode(4, raw)


@pytest.mark.parametrize(("version", "raw"), [(2, _classic_response(2)), (4, FLEXIBLE)])
def test_trailing_bytes_and_truncation(version: int, raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match=rf"DescribeConfigs v{version} response has 1"):
        decode(version, raw + b"\x00")
    for end in range(len(raw)):
        with pytest.raises(RemoteProtocolError, match=rf"^DescribeConfigs v{version} response"):
            decode(version, raw[:end])
