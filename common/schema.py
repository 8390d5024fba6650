"""Shared OpenAPI pieces."""

import re

from drf_spectacular import openapi
from drf_spectacular.utils import OpenApiParameter
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

    def _takes_idempotency_key(self) -> bool:
        # agents.api.TenantApiView: every write of an agent may carry a key that a retry repeats (not a view only a
        # reviewer's token may call: a reviewer cannot send one).
        writes = self.method not in ("GET", "HEAD", "OPTIONS") and getattr(self.view, "idempotent_writes", False)
        return writes and not getattr(self.view, "human_only", False)

    def get_override_parameters(self):
        parameters = list(super().get_override_parameters())
        if self._takes_idempotency_key():
            parameters.append(
                OpenApiParameter(
                    "Idempotency-Key",
                    str,
                    OpenApiParameter.HEADER,
                    required=False,
                    description=(
                        "Agents' keys only; 1 to 255 printable ASCII characters. The request is applied once: sent "
                        "again with the same key (within API_IDEMPOTENCY_TTL_S, default a day) it answers what it "
                        "answered the first time, with the header Idempotent-Replayed: true. A failed request stores "
                        "nothing. The same key on another request is a 409 idempotency_key_reused."
                    ),
                )
            )
        return parameters

    def _get_response_bodies(self, direction="response"):
        """The answers every such operation can give whatever its view declares: 409 ``idempotency_key_reused``
        where it takes an Idempotency-Key; where it takes a body, 413 (over the limit of
        ``common.parsers.LimitedJSONParser``) and 415 (a content type no parser of the view reads)."""
        responses = super()._get_response_bodies(direction)
        if direction != "response" or not isinstance(responses, dict):
            return responses
        implied = []
        if self._takes_idempotency_key():
            implied.append("409")
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            implied += ["413", "415"]
        for code in implied:
            responses.setdefault(code, self._get_response_for_code(ErrorSerializer, code, direction=direction))
        return dict(sorted(responses.items()))

    def _insert_field_validators(self, field, schema):
        """drf-spectacular writes a blank-allowed text field with a pattern as ``oneOf: [<pattern>, maxLength 0]``;
        where the pattern matches the empty string too, "" matches both and ``oneOf`` refuses it, though the API
        takes it (``?action=``, ``"review_notes": ""``): such a field is its pattern alone."""
        super()._insert_field_validators(field, schema)
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and len(one_of) == 2 and one_of[1] == {"type": "string", "maxLength": 0}:
            inner = one_of[0]
            if "format" not in inner and not inner.get("minLength") and re.search(inner.get("pattern", ""), ""):
                del schema["oneOf"]
                schema.update(inner)

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(serializer, StrictSerializer):
            schema.setdefault("additionalProperties", False)
        return schema
