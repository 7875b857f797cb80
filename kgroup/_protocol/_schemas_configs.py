"""The wire schemas of DescribeConfigs (API key 32), written as in ``_schemas`` (one function
per direction, fields in wire order, each guarded by its JSON version range), and its
decoder, as in ``_responses_848``."""

# Checked against Kafka 4.4.0: the JSON message schemas
# (``clients/src/main/resources/common/message/DescribeConfigs{Request,Response}.json``) and
# the ``DescribeConfigs{Request,Response}Data.SCHEMAS`` of the 4.4.0 kafka-clients jar.
# 4.4.0 offers v1-v4 (v0, whose entries had ``is_default`` instead of a source and no
# synonyms, was removed in 4.0 by KIP-896); v4 is the first flexible version. v1 adds
# ``include_synonyms`` to the request and each entry's ``config_source`` and ``synonyms``;
# v2 is v1 (throttling before answering); v3 adds ``include_documentation`` and each entry's
# ``config_type`` and ``documentation``. ``_schemas`` and ``_responses`` register these
# functions with the other APIs'.

from __future__ import annotations

from typing import Any

from kgroup._core._messages_configs import (
    ConfigSynonym,
    DescribeConfigsResponse,
    DescribedConfig,
    DescribedConfigs,
)
from kgroup._protocol._fields import Fields
from kgroup._protocol._primitives import Boolean, Format, Int8, Int16, Int32, since

__all__ = ["describe_configs", "describe_configs_request", "describe_configs_response"]

#: The first flexible version (KIP-482).
_FLEXIBLE_FROM = 4


def describe_configs_request(v: int) -> Any:
    f = Format(flexible=v >= _FLEXIBLE_FROM)
    return f.struct(
        (
            "resources",
            f.array(
                ("resource_type", Int8),
                ("resource_name", f.string),
                ("configuration_keys", f.array_of(f.string)),
            ),
        ),
        *since(v, 1, ("include_synonyms", Boolean)),
        *since(v, 3, ("include_documentation", Boolean)),
    )


def describe_configs_response(v: int) -> Any:
    f = Format(flexible=v >= _FLEXIBLE_FROM)
    return f.struct(
        ("throttle_time_ms", Int32),
        (
            "results",
            f.array(
                ("error_code", Int16),
                ("error_message", f.string),
                ("resource_type", Int8),
                ("resource_name", f.string),
                (
                    "configs",
                    f.array(
                        ("name", f.string),
                        ("value", f.string),
                        ("read_only", Boolean),
                        *since(v, 1, ("config_source", Int8)),
                        ("is_sensitive", Boolean),
                        *since(
                            v,
                            1,
                            (
                                "synonyms",
                                f.array(("name", f.string), ("value", f.string), ("source", Int8)),
                            ),
                        ),
                        *since(v, 3, ("config_type", Int8), ("documentation", f.string)),
                    ),
                ),
            ),
        ),
    )


def _config(entry: Fields, version: int) -> DescribedConfig:
    return DescribedConfig(
        name=entry.get_str("name"),
        value=entry.get_nullable_str("value"),
        read_only=entry.get_bool("read_only"),
        source=entry.get_int("config_source") if version >= 1 else -1,
        is_sensitive=entry.get_bool("is_sensitive"),
        synonyms=(
            tuple(
                ConfigSynonym(
                    name=s.get_str("name"),
                    value=s.get_nullable_str("value"),
                    source=s.get_int("source"),
                )
                for s in entry.get_array("synonyms")
            )
            if version >= 1
            else ()
        ),
        config_type=entry.get_int("config_type") if version >= 3 else 0,
        documentation=entry.get_nullable_str("documentation") if version >= 3 else None,
    )


def describe_configs(fields: Fields, version: int) -> DescribeConfigsResponse:
    """v1 adds each entry's source and synonyms, v3 its type and documentation."""
    return DescribeConfigsResponse(
        results=tuple(
            DescribedConfigs(
                error_code=result.get_int("error_code"),
                error_message=result.get_nullable_str("error_message"),
                resource_type=result.get_int("resource_type"),
                resource_name=result.get_str("resource_name"),
                configs=tuple(_config(c, version) for c in result.get_array("configs")),
            )
            for result in fields.get_array("results")
        ),
        throttle_time_ms=fields.get_int("throttle_time_ms"),
    )
