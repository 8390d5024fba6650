"""Serializer fields shared by every app's API: one input policy.

* JSON bodies: ``common.parsers.LimitedJSONParser`` refuses NUL bytes, lone surrogates, non-finite numbers,
  integers outside 64 bits and nesting deeper than ``API_MAX_JSON_DEPTH`` before any field sees the body.
* Query strings: ``common.middleware.InputPolicyMiddleware`` refuses NUL bytes and lone surrogates.
* Fields: values of the wrong JSON type are refused, never coerced (``false`` is not ``0.0``); numbers
  are bounded to what the database stores; text is measured as sent, before a field trims it.
* Unknown fields: refused everywhere (``StrictSerializer``), declared ``additionalProperties: false``
  in the schema (``common.schema.AutoSchema``). Query strings: blank values are refused
  unless the field allows blank (``StrictQuerySerializer``).
"""

from django.conf import settings
from rest_framework import serializers

from common.text import visible_text
from common.validators import CONSOLE_USER_PREFIX, USER_ID_RE

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


class StrictTypeMixin:
    """Refuse values of the wrong JSON type instead of coercing them (0 is not "0", "true" is not true)."""

    json_types: tuple = (str,)
    _NAMES = {str: "a string", int: "an integer", bool: "a boolean", float: "a number"}

    def to_internal_value(self, data):
        wrong_bool = isinstance(data, bool) and bool not in self.json_types  # True is an int in Python, not in JSON
        if wrong_bool or not isinstance(data, self.json_types):
            raise serializers.ValidationError(f"Expected {self._NAMES[self.json_types[0]]}.")
        return super().to_internal_value(data)


def json_type_error(field, value) -> str | None:
    """Why ``value`` from a JSON body has the wrong type for ``field``, or None (no coercion: 0 is not "0")."""
    if value is None:
        return None  # allow_null decides
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "Expected a boolean."
    if isinstance(field, (serializers.CharField, serializers.ChoiceField, serializers.UUIDField)):
        return None if isinstance(value, str) else "Expected a string."
    if isinstance(field, serializers.IntegerField):
        return None if isinstance(value, int) and not isinstance(value, bool) else "Expected an integer."
    if isinstance(field, serializers.FloatField):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "Expected a number."
    if isinstance(field, serializers.ListField):
        return None if isinstance(value, list) else "Expected a list."
    if isinstance(field, (serializers.DictField, serializers.Serializer)):
        return None if isinstance(value, dict) else "Expected an object."
    return None


def sent_length_error(field, value) -> str | None:
    """Why text sent for ``field`` is longer than it takes, or None. Measured as sent, before the field trims it:
    the schema's ``maxLength`` counts the value sent, so surrounding whitespace never lets a longer one through."""
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        return next(filter(None, (sent_length_error(field.child, item) for item in value)), None)
    max_length = getattr(field, "max_length", None)
    if isinstance(field, serializers.CharField) and max_length is not None and isinstance(value, str) and len(value) > max_length:
        return field.error_messages["max_length"].format(max_length=max_length)
    return None


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know, naming them, instead of silently dropping them (bodies and query strings),
    text longer than its field takes as sent (before trimming), and, in a JSON body, values of the wrong JSON type
    (query strings and forms carry only text)."""

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            # A form's CSRF token belongs to Django's CSRF check, not to the data.
            transport = {"csrfmiddlewaretoken"} if hasattr(data, "getlist") else set()
            unknown = sorted(set(data.keys()) - set(self.fields) - transport)
            if unknown:
                raise serializers.ValidationError({k: ["Unknown field."] for k in unknown})
            sent = data.lists() if hasattr(data, "getlist") else ((name, [value]) for name, value in data.items())
            too_long = {}
            for name, values in sent:
                field = self.fields.get(name)
                reason = next(filter(None, (sent_length_error(field, v) for v in values)), None) if field else None
                if reason and not field.read_only:
                    too_long[name] = [reason]
            if too_long:
                raise serializers.ValidationError(too_long)
            if not hasattr(data, "getlist"):  # a JSON object, not a QueryDict
                wrong = {}
                for name, field in self.fields.items():
                    reason = None if field.read_only or name not in data else json_type_error(field, data[name])
                    if reason:
                        wrong[name] = [reason]
                if wrong:
                    raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


class StrictQuerySerializer(StrictSerializer):
    """Query parameters: unknown names refused, a parameter given empty (``?status=``) is an error, not "not given", and
    one given twice is an error, not its last value."""

    def to_internal_value(self, data):
        if hasattr(data, "getlist"):
            blank = {
                name: ["This parameter may not be empty."]
                for name, field in self.fields.items()
                if data.get(name, None) == "" and not getattr(field, "allow_blank", False)
            }
            # a parameter given twice (``?status=a&status=b``) is refused: naming one value silently would hide a mistake
            repeated = {
                name: ["Give this parameter once."]
                for name, field in self.fields.items()
                if not isinstance(field, serializers.ListField | serializers.MultipleChoiceField) and len(data.getlist(name)) > 1
            }
            if blank or repeated:
                raise serializers.ValidationError({**blank, **repeated})
        return super().to_internal_value(data)


class NoQuerySerializer(StrictQuerySerializer):
    """An endpoint that takes no query parameters: any given is refused (400 naming it), never ignored."""

    @classmethod
    def check(cls, request) -> None:
        cls(data=request.query_params).is_valid(raise_exception=True)


class NumberField(serializers.FloatField):
    """A finite number; booleans are not numbers (``false`` is refused, not stored as 0.0).

    Query strings give text, which is parsed; JSON bodies must give a number."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float, str)):
            raise serializers.ValidationError("Expected a number.")
        return super().to_internal_value(data)


class ConfidenceField(NumberField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 0.0)
        kwargs.setdefault("max_value", 1.0)
        super().__init__(**kwargs)


class BoundedIntegerField(serializers.IntegerField):
    """An integer the database can store (64-bit unless told); booleans are refused."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", -INT64_MAX)
        kwargs.setdefault("max_value", INT64_MAX)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, str)):
            raise serializers.ValidationError("Expected an integer.")
        return super().to_internal_value(data)


class IdField(BoundedIntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 1)
        super().__init__(**kwargs)


class OffsetField(BoundedIntegerField):
    """A list offset: 0 to ``API_MAX_OFFSET``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", settings.API_MAX_OFFSET)
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)


class VisibleTextField(serializers.CharField):
    """Text a person typed: blank, like whitespace alone, when nothing in it is visible (only zero-width, format or
    control characters)."""

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and data and not self.allow_blank and not visible_text(data).strip():
            self.fail("blank")
        return super().run_validation(data)


class UserIdField(serializers.RegexField):
    """An end user's id: 1-128 letters, digits or _ . : @ -, starting with a letter or digit. Ids starting with
    ``console:`` are the console's signed-in people: refused unless ``console=True`` (an agent acting as one would
    read and teach what a person taught on the console)."""

    def __init__(self, *, console: bool = False, **kwargs):
        self.console = console
        kwargs.setdefault("max_length", 128)
        super().__init__(
            USER_ID_RE,
            error_messages={
                "invalid": "Malformed user id: use 1-128 letters, digits or _ . : @ -, starting with a letter or digit."
            },
            **kwargs,
        )

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not self.console and value.startswith(CONSOLE_USER_PREFIX):
            raise serializers.ValidationError(
                f"User ids starting with '{CONSOLE_USER_PREFIX}' belong to the console's signed-in people; an agent cannot act as one."
            )
        return value


class StrictChoiceField(StrictTypeMixin, serializers.ChoiceField):
    """A choice given as a string (query strings and JSON alike)."""


class StrictIntegerField(StrictTypeMixin, BoundedIntegerField):
    json_types = (int,)


class StrictBooleanField(StrictTypeMixin, serializers.BooleanField):
    json_types = (bool,)
