"""Version-free values of DescribeConfigs (API key 32): a resource's configuration as the
broker resolves it, each entry with its value, where that value comes from, and (when asked
for) the synonyms it was resolved from.

kgroup asks for one kind of resource: a GROUP (type 32, KIP-848's group configs), whose
``consumer.session.timeout.ms`` bounds a consumer-protocol member's lease
(``kgroup._runtime._group_configs``). The wire layer (``kgroup._protocol``) speaks
DescribeConfigs v1-v4 for these values (v0 left Kafka 4.0, KIP-896; v4 is flexible); fields
a version cannot carry come back with their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "CONFIG_SOURCE_DEFAULT",
    "CONFIG_SOURCE_DYNAMIC_BROKER",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER",
    "CONFIG_SOURCE_GROUP",
    "CONFIG_SOURCE_STATIC_BROKER",
    "CONFIG_SOURCE_UNKNOWN",
    "RESOURCE_BROKER",
    "RESOURCE_GROUP",
    "RESOURCE_TOPIC",
    "ConfigQuery",
    "ConfigSynonym",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribedConfig",
    "DescribedConfigs",
]

#: Resource types (Kafka's ``ConfigResource.Type``).
RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
RESOURCE_GROUP: Final = 32

#: Where a value comes from (``DescribedConfig.source``, v1+; Kafka's
#: ``DescribeConfigsResponse.ConfigSource``). A GROUP's entry is ``GROUP`` when the group
#: sets it, otherwise whatever the broker-level ``group.*`` config it falls back to is.
CONFIG_SOURCE_UNKNOWN: Final = 0
CONFIG_SOURCE_DYNAMIC_BROKER: Final = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER: Final = 3
CONFIG_SOURCE_STATIC_BROKER: Final = 4
CONFIG_SOURCE_DEFAULT: Final = 5
CONFIG_SOURCE_GROUP: Final = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigQuery:
    """One resource to describe: ``keys`` None lists every config, a tuple only those."""

    resource_type: int
    resource_name: str
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest:
    """DescribeConfigs (key 32). Any broker answers for a GROUP or TOPIC resource (the
    configs live in the cluster's metadata); a BROKER resource must go to that broker.
    ``include_documentation`` needs v3 and is dropped below it."""

    resources: tuple[ConfigQuery, ...]
    include_synonyms: bool = False
    include_documentation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSynonym:
    """One config the value was resolved from, most specific first."""

    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConfig:
    """One config entry. ``value`` is None for a sensitive one; ``source``, ``synonyms``
    (v1+), ``config_type`` and ``documentation`` (v3+) have their defaults below those
    versions."""

    name: str
    value: str | None
    read_only: bool = False
    source: int = -1
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: int = 0
    documentation: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConfigs:
    """One resource's answer: its configs, or an error (``error_code``, with a message)."""

    error_code: int
    resource_type: int
    resource_name: str
    error_message: str | None = None
    configs: tuple[DescribedConfig, ...] = ()

    def get(self, name: str) -> DescribedConfig | None:
        """The entry named ``name``, if the broker listed it."""
        return next((c for c in self.configs if c.name == name), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse:
    results: tuple[DescribedConfigs, ...] = ()
    throttle_time_ms: int = 0

    @property
    def error_code(self) -> int:
        """The first resource's non-zero error code (0 when every resource was described)."""
        return next((r.error_code for r in self.results if r.error_code), 0)
