"""TLS and SASL settings, turned from a :class:`GroupConfig` into aiokafka's connection
arguments (one place, used by kgroup's own connections and by the aiokafka clients kgroup
creates: the records consumer's fetcher and the inspection commands).

Secrets (``sasl_password``, ``ssl_key_password``) are handed to aiokafka here and nowhere
else; no kgroup log event or error message contains them.
"""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka.helpers import create_ssl_context

from .._config import GroupConfig
from .._errors import ConfigError

__all__ = ["connection_kwargs", "ssl_context_for"]


def ssl_context_for(config: GroupConfig) -> ssl.SSLContext | None:
    """The TLS context of ``config``: its own ``ssl_context``, one built from the
    ``ssl_*`` files (verifying the broker against ``ssl_cafile``, or the system's CAs),
    or None for PLAINTEXT / SASL_PLAINTEXT."""
    if config.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    if config.ssl_context is not None:
        return config.ssl_context
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=config.ssl_cafile,
            certfile=config.ssl_certfile,
            keyfile=config.ssl_keyfile,
            password=config.ssl_key_password,
        )
    except (OSError, ssl.SSLError) as exc:
        # Name the file and the problem, never the key password.
        which = "ssl_certfile/ssl_keyfile" if config.ssl_certfile else "ssl_cafile"
        detail = exc.strerror or str(exc)
        raise ConfigError(which, f"cannot load: {type(exc).__name__}: {detail}") from None
    return context


def connection_kwargs(config: GroupConfig) -> dict[str, Any]:
    """Keyword arguments for ``AIOKafkaConnection`` / ``AIOKafkaConsumer`` /
    ``AIOKafkaAdminClient`` carrying ``config``'s security settings."""
    kwargs: dict[str, Any] = {"security_protocol": config.security_protocol}
    context = ssl_context_for(config)
    if context is not None:
        kwargs["ssl_context"] = context
    if config.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        kwargs["sasl_mechanism"] = config.sasl_mechanism
        kwargs["sasl_plain_username"] = config.sasl_username
        kwargs["sasl_plain_password"] = config.sasl_password
    return kwargs
