"""What the host API (host_api.py) and the buyer API (buyer_api.py) share: JSON numbers read
strictly (never a string or a boolean, as the host calls' own readers in host_bodies.py read
them) and the 429 answer with its Retry-After."""

from __future__ import annotations

import math

from rest_framework import serializers, status
from rest_framework.response import Response


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        try:
            finite = math.isfinite(data)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            self.fail("invalid")
        return super().to_internal_value(data)


def too_many(detail: str, code: str, retry_after: int, **extra) -> Response:
    return Response({"detail": detail, "code": code, **extra},
                    status=status.HTTP_429_TOO_MANY_REQUESTS,
                    headers={"Retry-After": str(retry_after)})
