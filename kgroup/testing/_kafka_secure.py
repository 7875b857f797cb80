"""An Apache Kafka broker with TLS, SASL and ACLs, for security tests.

:class:`SecureKafkaBroker` is a :class:`KafkaBroker` with two more listeners:

- ``SSL`` (TLS, no client certificate): its clients are ``User:ANONYMOUS``;
- ``SASL_SSL`` with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512: PLAIN users come from the
  listener's JAAS configuration, SCRAM credentials (both hashes) are written by
  ``kafka-storage format --add-scram``.

The plaintext listener stays for set-up (topic creation, ACLs) and for the controller.
``StandardAuthorizer`` is on with ``allow.everyone.if.no.acl.found=false``; the super users
are ``admin`` and ``ANONYMOUS`` (the plaintext, controller and SSL-only principal), so that
every ACL test runs over SASL_SSL as ``alice`` or ``bob``.

The certificates are made here with ``openssl``: a CA (:attr:`ca_file`, for clients'
``ssl_cafile``) and a broker certificate for ``localhost`` and ``127.0.0.1`` in a PKCS12
keystore. The passwords are random per broker and available as :attr:`passwords`.
"""

from __future__ import annotations

import secrets
import subprocess
import warnings
from pathlib import Path
from typing import Any

from ._kafka import KafkaBroker
from ._ports import LOOPBACK, BrokerStartError, free_port

__all__ = ["SecureKafkaBroker"]

#: The users every secure broker knows, in both mechanisms.
USERS = ("admin", "alice", "bob")


def _run(args: list[str], cwd: Path) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, timeout=60, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        raise BrokerStartError(f"{args[0]} {args[1]} failed:\n{output[-2000:]}")


def make_certificates(directory: Path, store_password: str) -> tuple[Path, Path]:
    """A CA and a broker certificate (SAN localhost, 127.0.0.1) signed by it. Returns the
    CA certificate (PEM) and the broker keystore (PKCS12, ``store_password``)."""
    d = directory
    _run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=kgroup-test-ca", "-keyout", "ca.key", "-out", "ca.pem",
        ],
        d,
    )  # fmt: skip
    _run(
        [
            "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "broker.key", "-out", "broker.csr",
        ],
        d,
    )  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _run(
        [
            "openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
            "-out", "broker.pem",
        ],
        d,
    )  # fmt: skip
    _run(
        [
            "openssl", "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key",
            "-certfile", "ca.pem", "-name", "broker", "-out", "broker.p12",
            "-passout", f"pass:{store_password}",
        ],
        d,
    )  # fmt: skip
    return d / "ca.pem", d / "broker.p12"


class SecureKafkaBroker(KafkaBroker):
    """Kafka with SSL and SASL_SSL listeners and ACLs enforced (see the module docstring).

    :attr:`ssl_bootstrap` and :attr:`sasl_bootstrap` address the two listeners;
    :attr:`bootstrap` is the plaintext one (super user, for set-up)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ssl_port: int | None = None
        self._sasl_port: int | None = None
        #: Per-user passwords (the same for PLAIN and both SCRAM hashes), random per broker.
        self.passwords = {user: f"{user}-{secrets.token_hex(8)}" for user in USERS}
        self.store_password = secrets.token_hex(12)
        self.ca_file: Path | None = None
        self._keystore: Path | None = None

    @property
    def ssl_bootstrap(self) -> str:
        assert self._ssl_port is not None, "broker not started"
        return f"{LOOPBACK}:{self._ssl_port}"

    @property
    def sasl_bootstrap(self) -> str:
        assert self._sasl_port is not None, "broker not started"
        return f"{LOOPBACK}:{self._sasl_port}"

    def start(self) -> SecureKafkaBroker:
        if self._ssl_port is None:
            self._ssl_port, self._sasl_port = free_port(), free_port()
            certs = self._dir() / "certs"
            certs.mkdir(exist_ok=True)
            self.ca_file, self._keystore = make_certificates(certs, self.store_password)
        super().start()
        return self

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        ssl_listener = f"SSL://{LOOPBACK}:{self._ssl_port}"
        sasl_listener = f"SASL_SSL://{LOOPBACK}:{self._sasl_port}"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.passwords.items())
        props.update(
            {
                "listeners": f"{props['listeners']},{ssl_listener},{sasl_listener}",
                "advertised.listeners": (
                    f"{props['advertised.listeners']},{ssl_listener},{sasl_listener}"
                ),
                "listener.security.protocol.map": (
                    f"{props['listener.security.protocol.map']},SSL:SSL,SASL_SSL:SASL_SSL"
                ),
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(self._keystore),
                "ssl.keystore.password": self.store_password,
                "ssl.key.password": self.store_password,
                "ssl.client.auth": "none",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms": (
                    "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
                ),
                "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="admin" password="{self.passwords["admin"]}" {plain_users};'
                ),
                "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "authorizer.class.name": (
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                ),
                "super.users": "User:admin;User:ANONYMOUS",
                "allow.everyone.if.no.acl.found": "false",
            }
        )
        return props

    def _format_args(self) -> list[str]:
        args: list[str] = []
        for user, password in self.passwords.items():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args

    def allow(
        self,
        principal: str,
        *,
        group_prefix: str | None = None,
        topic_prefix: str | None = None,
        operations: tuple[str, ...] = ("READ", "DESCRIBE"),
    ) -> None:
        """Grant ``User:principal`` ``operations`` on groups and/or topics whose names
        start with the given prefixes (CreateAcls over the plaintext listener)."""
        with warnings.catch_warnings():  # kafka-python loads its schemas with old APIs
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka.admin import (  # kafka-python: aiokafka has no CreateAcls
                ACL,
                ACLOperation,
                ACLPermissionType,
                ACLResourcePatternType,
                KafkaAdminClient,
                ResourcePattern,
                ResourceType,
            )

        acls = []
        for kind, prefix in (
            (ResourceType.GROUP, group_prefix),
            (ResourceType.TOPIC, topic_prefix),
        ):
            if prefix is None:
                continue
            pattern = ResourcePattern(kind, prefix, ACLResourcePatternType.PREFIXED)
            acls += [
                ACL(
                    f"User:{principal}",
                    "*",
                    getattr(ACLOperation, op),
                    ACLPermissionType.ALLOW,
                    pattern,
                )
                for op in operations
            ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="kgroup-acl-setup")
            try:
                result = admin.create_acls(acls)
            finally:
                admin.close()
        failed = result.get("failed") or []
        if failed:
            raise BrokerStartError(f"creating ACLs failed: {failed}")
