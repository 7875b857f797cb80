"""Security settings: GroupConfig validation and the aiokafka arguments built from them."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kgroup import ConfigError, GroupConfig, GroupMember
from kgroup._runtime._security import connection_kwargs

SECRET = "s3cret-Pa55word"
KEY_SECRET = "k3y-Pa55word"


def make(**security: Any) -> GroupConfig:
    return GroupConfig(bootstrap_servers="localhost:9093", group_id="g", **security)


def test_plaintext_is_the_default() -> None:
    assert connection_kwargs(make()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_plaintext_arguments() -> None:
    kwargs = connection_kwargs(
        make(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="alice",
            sasl_password=SECRET,
        )
    )
    assert kwargs == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
    }


def test_ssl_context_is_used_as_given() -> None:
    context = ssl.create_default_context()
    kwargs = connection_kwargs(make(security_protocol="SSL", ssl_context=context))
    assert kwargs == {"security_protocol": "SSL", "ssl_context": context}


def test_ssl_without_files_verifies_against_system_cas() -> None:
    kwargs = connection_kwargs(
        make(
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="u",
            sasl_password=SECRET,
        )
    )
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


@pytest.fixture(scope="module")
def encrypted_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key, encrypted with KEY_SECRET."""
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=c",
            "-keyout", "key.pem", "-out", "cert.pem", "-passout", f"pass:{KEY_SECRET}",
        ],
        cwd=d, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return d / "cert.pem", d / "key.pem"


def test_context_built_from_files(encrypted_key: tuple[Path, Path]) -> None:
    cert, key = encrypted_key
    kwargs = connection_kwargs(
        make(
            security_protocol="SSL",
            ssl_cafile=str(cert),
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
            ssl_key_password=KEY_SECRET,
        )
    )
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.get_ca_certs()  # the CA file was loaded


def test_wrong_key_password_is_a_config_error_without_the_secret(
    encrypted_key: tuple[Path, Path],
) -> None:
    cert, key = encrypted_key
    wrong = "not-the-" + KEY_SECRET
    cfg = make(
        security_protocol="SSL",
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
        ssl_key_password=wrong,
    )
    with pytest.raises(ConfigError) as info:
        GroupMember(cfg)
    assert info.value.field == "ssl_certfile/ssl_keyfile"
    assert wrong not in str(info.value) and KEY_SECRET not in str(info.value)


def test_missing_cafile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"ssl_cafile: cannot load: .*No such file"):
        connection_kwargs(make(security_protocol="SSL", ssl_cafile="/nonexistent/ca.pem"))


@pytest.mark.parametrize(
    ("security", "field", "rule"),
    [
        ({"security_protocol": "TLS"}, "security_protocol", "not one of PLAINTEXT"),
        ({"security_protocol": "PLAINTEXT", "ssl_cafile": "ca.pem"}, "security_protocol", "SSL"),
        (
            {"security_protocol": "SSL", "ssl_context": "ctx"},
            "ssl_context",
            "must be an ssl.SSLContext",
        ),
        (
            {
                "security_protocol": "SSL",
                "ssl_context": ssl.create_default_context(),
                "ssl_cafile": "ca.pem",
            },
            "ssl_context",
            "either",
        ),
        ({"security_protocol": "SSL", "ssl_keyfile": "k.pem"}, "ssl_keyfile", "ssl_certfile"),
        (
            {"security_protocol": "SSL", "ssl_key_password": SECRET},
            "ssl_key_password",
            "ssl_certfile",
        ),
        ({"security_protocol": "SSL", "ssl_cafile": ""}, "ssl_cafile", "non-empty"),
        (
            {"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": SECRET},
            "sasl_mechanism",
            "None is not one of PLAIN",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_username": "u"},
            "sasl_mechanism",
            "'GSSAPI' is not one of",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": SECRET},
            "sasl_username",
            "needs sasl_username and sasl_password",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
            "sasl_password",
            "needs sasl_username and sasl_password",
        ),
        ({"security_protocol": "SSL", "sasl_password": SECRET}, "security_protocol", "SASL"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "u",
                "sasl_password": 42,
            },
            "sasl_password",
            "non-empty string",
        ),
    ],
)
def test_invalid_settings_name_the_field_and_never_the_secret(
    security: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make(**security)
    assert info.value.field == field
    assert rule in str(info.value)
    assert SECRET not in str(info.value)


def test_repr_hides_secrets() -> None:
    cfg = make(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=SECRET,
    )
    for text in (repr(cfg), str(cfg), repr(GroupMember(cfg))):
        assert SECRET not in text
    assert "alice" in repr(cfg)
