"""Strict primitive types for decoding a broker's bytes, and the vocabulary the group API
schemas (``kgroup._protocol._schemas``) are written in."""

# Responses are decoded by these strict types (subclasses of aiokafka's), not aiokafka's
# lenient ones, because aiokafka reads any negative length as null (an array length of -2
# became an empty array, a bytes length of -2 an empty assignment), never checks that a
# tagged field holds the bytes its size announces, and reports a short buffer as a bare
# ``struct.error``. Here a length below -1 is an error, a length or count is checked against
# the bytes left before anything is read or allocated, a varint is at most 5 bytes and 32
# bits, and every error names the field path it happened in (for example
# ``members[1].metadata: truncated: a 12-byte bytes value needs 12 byte(s), 3 left``).
# Encoding is aiokafka's, unchanged.
#
# Flexible versions (KIP-482): strings, bytes and arrays become compact (an unsigned varint
# holding length + 1, where 0 means null), and every struct, each array element included,
# ends with a tagged-field section. kgroup always sends an empty one: aiokafka's
# ``TaggedFields.encode`` omits the size varint, so anything but ``{}`` would corrupt the
# request. Received tagged fields are decoded correctly and ignored (none is defined for
# these APIs).
#
# Two types aiokafka lacks, for the KIP-848 APIs and Metadata with topic ids: ``Uuid`` (16
# bytes, big-endian, as ``uuid.UUID``) and the nullable struct (``Format.nullable_struct``:
# an int8 marker, -1 for null and 1 before the struct's fields, as Kafka's generated code
# writes it; any other marker is an error here).

from __future__ import annotations

import io
import uuid
from io import BytesIO
from typing import Any, Final

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.types import (
    Array,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Schema,
    String,
    TaggedFields,
)
from aiokafka.protocol.types import Boolean as _AiokafkaBoolean
from aiokafka.protocol.types import Int8 as _AiokafkaInt8
from aiokafka.protocol.types import Int16 as _AiokafkaInt16
from aiokafka.protocol.types import Int32 as _AiokafkaInt32
from aiokafka.protocol.types import Int64 as _AiokafkaInt64

from kgroup._errors import RemoteProtocolError

__all__ = [
    "Boolean",
    "DecodeError",
    "Field",
    "Format",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "Uuid",
    "between",
    "parse_response_header",
    "since",
    "until",
]

Field = tuple[str, Any]


class DecodeError(ValueError):
    """A response field that cannot be decoded. ``path`` is where, outermost first."""

    def __init__(self, problem: str, path: tuple[str, ...] = ()) -> None:
        self.problem = problem
        self.path = path
        super().__init__(self._text())

    def within(self, part: str) -> DecodeError:
        """The same error seen from the enclosing field (``part``: a name or ``[i]``)."""
        return DecodeError(self.problem, (part, *self.path))

    def _text(self) -> str:
        where = ""
        for part in self.path:
            where += part if part.startswith("[") or not where else f".{part}"
        return f"{where}: {self.problem}" if where else self.problem


def _remaining(data: BytesIO) -> int:
    position = data.tell()
    end = data.seek(0, io.SEEK_END)
    data.seek(position)
    return end - position


def _read_exactly(data: BytesIO, size: int, what: str) -> bytes:
    """``size`` bytes, or a DecodeError: ``BytesIO.read`` never reads (nor allocates) more
    than what is left, so a huge ``size`` costs nothing."""
    raw = data.read(size)
    if len(raw) != size:
        raise DecodeError(f"truncated: {what} needs {size} byte(s), {len(raw)} left")
    return raw


def _unsigned_varint(data: BytesIO) -> int:
    """An unsigned varint of at most 5 bytes holding at most 32 bits (KIP-482)."""
    value = 0
    for shift in range(0, 35, 7):
        raw = data.read(1)
        if not raw:
            raise DecodeError("truncated: the buffer ends inside a varint")
        value |= (raw[0] & 0x7F) << shift
        if not raw[0] & 0x80:
            if value > 0xFFFFFFFF:
                raise DecodeError(f"varint {value} does not fit in 32 bits")
            return value
    raise DecodeError("varint longer than 5 bytes")


def _fixed(base: type[Any], size: int, what: str) -> type[Any]:
    """``base`` (an aiokafka fixed-width type) whose decode checks the bytes left first."""
    unpack = base._unpack

    def decode(cls: type[Any], data: BytesIO) -> Any:
        (value,) = unpack(_read_exactly(data, size, what))
        return value

    return type(f"Strict{base.__name__}", (base,), {"decode": classmethod(decode)})


# The fixed-width field types of every group API schema.
Int8: Final = _fixed(_AiokafkaInt8, 1, "an int8")
Int16: Final = _fixed(_AiokafkaInt16, 2, "an int16")
Int32: Final = _fixed(_AiokafkaInt32, 4, "an int32")
Int64: Final = _fixed(_AiokafkaInt64, 8, "an int64")
Boolean: Final = _fixed(_AiokafkaBoolean, 1, "a boolean")


class Uuid(AbstractType[uuid.UUID]):  # type: ignore[misc]  # aiokafka is untyped
    """Kafka's ``uuid``: 16 bytes, most significant first (a topic id)."""

    @classmethod
    def encode(cls, value: uuid.UUID) -> bytes:
        if not isinstance(value, uuid.UUID):
            raise TypeError(f"a uuid field needs a uuid.UUID, got {value!r}")
        return value.bytes

    @classmethod
    def decode(cls, data: BytesIO) -> uuid.UUID:
        return uuid.UUID(bytes=_read_exactly(data, 16, "a uuid"))


def _classic_length(data: BytesIO, width: type[Any], kind: str) -> int | None:
    """A classic length prefix: -1 is null, any other negative value an error."""
    length = int(width.decode(data))
    if length == -1:
        return None
    if length < 0:
        raise DecodeError(f"invalid {kind} length {length}")
    return length


def _compact_length(data: BytesIO) -> int | None:
    """A compact length prefix: varint ``length + 1``, 0 being null."""
    encoded = _unsigned_varint(data)
    return None if encoded == 0 else encoded - 1


def _text(data: BytesIO, length: int | None, encoding: str) -> str | None:
    if length is None:
        return None
    raw = _read_exactly(data, length, f"a {length}-byte string")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid {encoding} in a string ({exc.reason})") from None


def _blob(data: BytesIO, length: int | None) -> bytes | None:
    return None if length is None else _read_exactly(data, length, f"a {length}-byte bytes value")


class _StrictString(String):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> str | None:
        return _text(data, _classic_length(data, Int16, "string"), self.encoding)


class _StrictCompactString(CompactString):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> str | None:
        return _text(data, _compact_length(data), self.encoding)


class _StrictBytes(Bytes):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO) -> bytes | None:
        return _blob(data, _classic_length(data, Int32, "bytes"))


class _StrictCompactBytes(CompactBytes):  # type: ignore[misc]  # aiokafka is untyped
    @classmethod
    def decode(cls, data: BytesIO) -> bytes | None:
        return _blob(data, _compact_length(data))


def _elements(array_of: Any, data: BytesIO, length: int | None) -> list[Any] | None:
    if length is None:
        return None
    left = _remaining(data)
    if length > left:  # every element of every kgroup array takes at least one byte
        raise DecodeError(f"array length {length} is more than the {left} byte(s) left")
    items: list[Any] = []
    for index in range(length):
        try:
            items.append(array_of.decode(data))
        except DecodeError as exc:
            raise exc.within(f"[{index}]") from None
    return items


class _StrictArray(Array):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> list[Any] | None:
        return _elements(self.array_of, data, _classic_length(data, Int32, "array"))


class _StrictCompactArray(CompactArray):  # type: ignore[misc]  # aiokafka is untyped
    def decode(self, data: BytesIO) -> list[Any] | None:
        return _elements(self.array_of, data, _compact_length(data))


class _StrictTaggedFields(TaggedFields):  # type: ignore[misc]  # aiokafka is untyped
    """Decoding checks that tags ascend and that each field holds the bytes it announces;
    encoding stays aiokafka's (kgroup only ever sends ``{}``)."""

    @classmethod
    def decode(cls, data: BytesIO) -> dict[int, bytes]:
        count = _unsigned_varint(data)
        left = _remaining(data)
        if count > left:  # a tagged field takes at least two bytes
            raise DecodeError(f"{count} tagged fields announced, {left} byte(s) left")
        fields: dict[int, bytes] = {}
        previous = -1
        for _ in range(count):
            tag = _unsigned_varint(data)
            if tag <= previous:
                raise DecodeError(f"tagged field {tag} out of order (after tag {previous})")
            size = _unsigned_varint(data)
            fields[tag] = _read_exactly(data, size, f"tagged field {tag}")
            previous = tag
        return fields


class _StrictSchema(Schema):  # type: ignore[misc]  # aiokafka is untyped
    """A struct whose decode names the field an error happened in."""

    def decode(self, data: BytesIO) -> tuple[Any, ...]:
        values: list[Any] = []
        for name, kind in zip(self.names, self.fields, strict=True):
            try:
                values.append(kind.decode(data))
            except DecodeError as exc:
                raise exc.within(name) from None
        return tuple(values)


class _StrictNullableStruct:
    """A nullable struct (JSON ``"nullableVersions"`` on a struct-typed field): an int8
    marker, -1 for null and 1 before the struct's own fields."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.names = schema.names  # what _Fields and _fill look at, as for a struct
        self.fields = schema.fields

    def encode(self, value: Any) -> bytes:
        if value is None:
            return b"\xff"
        return b"\x01" + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> tuple[Any, ...] | None:
        marker = int(Int8.decode(data))
        if marker == -1:
            return None
        if marker != 1:
            raise DecodeError(f"invalid nullable struct marker {marker} (-1 or 1)")
        return tuple(self.schema.decode(data))

    def repr(self, value: Any) -> str:
        return "None" if value is None else str(self.schema.repr(value))


def parse_response_header(data: BytesIO, *, flexible: bool) -> int:
    """The correlation id of a response frame (header v0, or v1 with tagged fields when
    ``flexible``). Raises ``RemoteProtocolError`` naming the problem."""
    try:
        correlation_id = int(Int32.decode(data))
        if flexible:
            _StrictTaggedFields.decode(data)
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable response header: {exc}") from None
    return correlation_id


class Format:
    """The primitive types of one API version: classic or flexible."""

    def __init__(self, *, flexible: bool) -> None:
        self.flexible = flexible
        self.string: Any = _StrictCompactString("utf-8") if flexible else _StrictString("utf-8")
        self.bytes: Any = _StrictCompactBytes if flexible else _StrictBytes

    def struct(self, *fields: Field) -> Any:
        """A struct schema; a flexible one ends with its tagged-field section."""
        if self.flexible:
            fields = (*fields, ("tags", _StrictTaggedFields))
        return _StrictSchema(*fields)

    def nullable_struct(self, *fields: Field) -> Any:
        """A struct-typed field that may be null (flexible versions only in kgroup's APIs)."""
        return _StrictNullableStruct(self.struct(*fields))

    def array(self, *fields: Field) -> Any:
        """An array of structs (each element a tuple in ``fields`` order, plus tags)."""
        element = self.struct(*fields)
        return _StrictCompactArray(element) if self.flexible else _StrictArray(element)

    def array_of(self, item: Any) -> Any:
        """An array of a primitive type."""
        return _StrictCompactArray(item) if self.flexible else _StrictArray(item)


def between(version: int, first: int, last: int, *fields: Field) -> tuple[Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "<first>-<last>"``)."""
    return fields if first <= version <= last else ()


def since(version: int, first: int, *fields: Field) -> tuple[Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "<first>+"``)."""
    return fields if version >= first else ()


def until(version: int, last: int, *fields: Field) -> tuple[Field, ...]:
    """``fields`` if they exist in ``version`` (JSON ``"versions": "0-<last>"``)."""
    return fields if version <= last else ()
