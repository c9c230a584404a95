"""The value encoding of mailbox messages on the wire (the ``body`` of an ``actor.mail``).

Mailbox messages are frozen dataclasses of ids, blocks, specs, states and wire messages
(``actline.actors.turn.mailbox``). ``MailCodec`` turns one into plain msgpack values and back,
exactly: a dataclass becomes a mapping tagged with its name under ``~`` (only the classes
of the modules it was given decode: a tag names no arbitrary class), a ``Block`` its stored
form, a wire message its fields, a tuple, set or enum a tagged list or value, a mapping
whose keys are not all text (or that holds the tag key) a tagged list of pairs. Anything
else is an ``EncodeError`` naming its type; a body that does not decode is a ``DecodeError``
naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from actline import messages
from actline.messages import DecodeError, EncodeError, WireModel
from actline.timeline import Block

TAG = "~"
_PLAIN = (str, int, float, bool, bytes, type(None))


def _short(cls: type) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"


class MailCodec:
    """Encodes and decodes the values of the dataclasses and enums defined in ``modules``
    and of the wire messages' models (``actline.messages``)."""

    def __init__(self, modules: Iterable[ModuleType]) -> None:
        self._classes: dict[str, type] = {}
        for module in modules:
            for value in vars(module).values():
                if not isinstance(value, type) or value.__module__ != module.__name__:
                    continue
                if dataclasses.is_dataclass(value) or issubclass(value, enum.Enum):
                    self._classes[_short(value)] = value
        self._models: dict[str, type[BaseModel]] = {
            name: value
            for name, value in vars(messages).items()
            if isinstance(value, type) and issubclass(value, WireModel)
        }

    # -- encode ------------------------------------------------------------------------------
    def body(self, message: object) -> dict[str, Any]:
        """The ``body`` of a mail: ``message`` encoded (a tagged mapping)."""
        encoded = self.encode(message)
        return encoded if isinstance(encoded, dict) else {TAG: "value", "v": encoded}

    def encode(self, value: object) -> Any:
        if isinstance(value, enum.Enum):
            return {TAG: "enum", "n": self._name(type(value)), "v": value.value}
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, Block):
            return {TAG: "block", "v": value.to_dict()}
        if isinstance(value, BaseModel):
            name = type(value).__name__
            if self._models.get(name) is not type(value):
                raise EncodeError(f"{name} is not a model of actline.messages")
            return {TAG: "model", "n": name, "v": value.model_dump(mode="python")}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out: dict[str, Any] = {TAG: self._name(type(value))}
            for field in dataclasses.fields(value):
                if field.init:
                    out[field.name] = self.encode(getattr(value, field.name))
            return out
        if isinstance(value, list):
            return [self.encode(item) for item in value]
        if isinstance(value, tuple):
            return {TAG: "tuple", "v": [self.encode(item) for item in value]}
        if isinstance(value, frozenset | set):
            kind = "frozenset" if isinstance(value, frozenset) else "set"
            return {TAG: kind, "v": [self.encode(item) for item in value]}
        if isinstance(value, Mapping):
            if all(isinstance(k, str) for k in value) and TAG not in value:
                return {k: self.encode(v) for k, v in value.items()}
            return {TAG: "map", "v": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        raise EncodeError(f"a mailbox value of type {type(value).__name__} has no wire form")

    def _name(self, cls: type) -> str:
        name = _short(cls)
        if self._classes.get(name) is not cls:
            raise EncodeError(f"{name} is not a mailbox type")
        return name

    # -- decode ------------------------------------------------------------------------------
    def message(self, body: Mapping[str, Any]) -> object:
        """The mailbox message a ``body`` holds."""
        if body.get(TAG) == "value":
            return self.decode(body.get("v"))
        return self.decode(dict(body))

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(item) for item in value]
        if not isinstance(value, dict):
            return value
        tag = value.get(TAG)
        if tag is None:
            return {k: self.decode(v) for k, v in value.items()}
        try:
            return self._tagged(str(tag), value)
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"a mailbox value tagged {tag!r}: {exc}") from None

    def _tagged(self, tag: str, value: dict[str, Any]) -> Any:
        match tag:
            case "tuple":
                return tuple(self.decode(item) for item in value["v"])
            case "frozenset":
                return frozenset(self.decode(item) for item in value["v"])
            case "set":
                return {self.decode(item) for item in value["v"]}
            case "map":
                return {self.decode(k): self.decode(v) for k, v in value["v"]}
            case "block":
                return Block.from_dict(value["v"])
            case "model":
                model = self._models.get(str(value["n"]))
                if model is None:
                    raise DecodeError(f"{value['n']!r} is not a model of actline.messages")
                return model.model_validate(value["v"])
            case "enum":
                return self._class(str(value["n"]))(value["v"])
        cls = self._class(tag)
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = set(value) - fields - {TAG}
        if unknown:
            raise DecodeError(f"{tag} has no field {', '.join(sorted(unknown))}")
        return cls(**{k: self.decode(v) for k, v in value.items() if k != TAG})

    def _class(self, name: str) -> Any:
        cls = self._classes.get(name)
        if cls is None:
            raise DecodeError(f"{name!r} is not a mailbox type")
        return cls
