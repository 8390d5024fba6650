"""Serializer fields shared by several apps' APIs."""

from rest_framework import serializers

from common.validators import USER_ID_RE


class UserIdField(serializers.RegexField):
    """An end user's id: 1-128 letters, digits or _ . : @ -, starting with a letter or digit."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 128)
        super().__init__(
            USER_ID_RE,
            error_messages={
                "invalid": "Malformed user id: use 1-128 letters, digits or _ . : @ -, starting with a letter or digit."
            },
            **kwargs,
        )
