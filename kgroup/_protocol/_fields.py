"""Checked access to a decoded response struct, field by field, for the decoders of
``_responses`` and ``_responses_848``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kgroup._errors import RemoteProtocolError

__all__ = ["Fields"]

_MISSING: Final = object()


class Fields:
    """Checked access to one decoded struct or array element, by field name.

    Each getter raises ``RemoteProtocolError`` naming the API, version and field when the
    field is absent or holds the wrong kind of value, so no ``KeyError``, ``TypeError`` or
    ``AttributeError`` escapes ``from_wire``.
    """

    def __init__(
        self, label: str, schema: Any, values: Mapping[str, object], *, lenient: bool = False
    ) -> None:
        self.label = label
        self._schema = schema
        self._values = values
        # Lenient: a null where the schema forbids one reads as the empty value. Only used
        # to read an error answer whose other fields carry no meaning (see from_wire).
        self._lenient = lenient

    @classmethod
    def of_struct(cls, label: str, struct: Any, *, lenient: bool = False) -> Fields:
        schema = getattr(struct, "SCHEMA", None)
        names = getattr(schema, "names", None)
        if not isinstance(names, tuple):
            raise RemoteProtocolError(f"{label} response: not a protocol struct: {struct!r}")
        values = {name: getattr(struct, name, _MISSING) for name in names}
        return cls(label, schema, values, lenient=lenient)

    def error(self, problem: str) -> RemoteProtocolError:
        return RemoteProtocolError(f"{self.label} response: {problem}")

    def _get(self, name: str) -> object:
        value = self._values.get(name, _MISSING)
        if value is _MISSING:
            raise self.error(f"field {name!r} is missing")
        return value

    def _wrong(self, name: str, expected: str, value: object) -> RemoteProtocolError:
        return self.error(f"field {name!r} should be {expected}, got {value!r}")

    def get_int(self, name: str) -> int:
        value = self._get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong(name, "an integer", value)
        return value

    def get_bool(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "a boolean", value)
        return value

    def get_nullable_str(self, name: str) -> str | None:
        value = self._get(name)
        if value is not None and not isinstance(value, str):
            raise self._wrong(name, "a string or null", value)
        return value

    def get_str(self, name: str) -> str:
        value = self.get_nullable_str(name)
        if value is None and self._lenient:
            return ""
        if value is None:
            raise self._wrong(name, "a string (it is not nullable)", value)
        return value

    def get_bytes(self, name: str, *, null_as_empty: bool = False) -> bytes:
        value = self._get(name)
        if value is None and (null_as_empty or self._lenient):
            return b""
        if not isinstance(value, bytes):
            raise self._wrong(name, "bytes (not nullable)", value)
        return value

    def get_array(self, name: str) -> list[Fields]:
        """The elements of an array of structs, each as ``Fields``."""
        value = self._get(name)
        if value is None and self._lenient:
            return []
        if not isinstance(value, list | tuple):
            raise self._wrong(name, "an array (it is not nullable)", value)
        kind = self._schema.fields[self._schema.names.index(name)]
        element = getattr(kind, "array_of", None)
        names = getattr(element, "names", None)
        if not isinstance(names, tuple):
            raise self.error(f"field {name!r} is not an array of structs")
        items: list[Fields] = []
        for index, item in enumerate(value):
            if not isinstance(item, Sequence) or len(item) != len(names):
                raise self.error(f"{name}[{index}] should have fields {names}, got {item!r}")
            items.append(
                Fields(
                    f"{self.label} {name}[{index}]",
                    element,
                    dict(zip(names, item, strict=True)),
                    lenient=self._lenient,
                )
            )
        return items

    def get_uuid(self, name: str) -> uuid.UUID:
        value = self._get(name)
        if not isinstance(value, uuid.UUID):
            raise self._wrong(name, "a uuid", value)
        return value

    def get_ints(self, name: str) -> tuple[int, ...]:
        """An array of integers (not nullable)."""
        value = self._get(name)
        if value is None and self._lenient:
            return ()
        if not isinstance(value, list | tuple) or not all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            raise self._wrong(name, "an array of integers (it is not nullable)", value)
        return tuple(value)

    def get_strs(self, name: str) -> tuple[str, ...]:
        """An array of strings (neither the array nor its strings nullable)."""
        value = self._get(name)
        if value is None and self._lenient:
            return ()
        if not isinstance(value, list | tuple) or not all(isinstance(s, str) for s in value):
            raise self._wrong(name, "an array of strings (it is not nullable)", value)
        return tuple(value)

    def get_struct(self, name: str) -> Fields:
        """A struct-typed field (not nullable)."""
        fields = self.get_nullable_struct(name)
        if fields is None:
            raise self._wrong(name, "a struct (it is not nullable)", None)
        return fields

    def get_nullable_struct(self, name: str) -> Fields | None:
        """A struct-typed field, or None for a null one (a nullable struct)."""
        value = self._get(name)
        if value is None:
            return None
        kind = self._schema.fields[self._schema.names.index(name)]
        names = getattr(kind, "names", None)
        if not isinstance(names, tuple):
            raise self.error(f"field {name!r} is not a struct")
        if not isinstance(value, Sequence) or len(value) != len(names):
            raise self.error(f"{name} should have fields {names}, got {value!r}")
        return Fields(
            f"{self.label} {name}",
            kind,
            dict(zip(names, value, strict=True)),
            lenient=self._lenient,
        )
