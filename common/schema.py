"""Shared OpenAPI pieces."""

from drf_spectacular import openapi
from rest_framework import serializers

from common.fields import StrictSerializer


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


ERROR_RESPONSES = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 429: ErrorSerializer}


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema, saying ``additionalProperties: false`` for every request body (and nested
    object) a ``StrictSerializer`` validates: those refuse unknown fields (the API's one policy)."""

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(serializer, StrictSerializer):
            schema.setdefault("additionalProperties", False)
        return schema
