"""DRF authentication by workspace API key: `Authorization: Bearer lbk_<prefix>_<secret>`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from bindings.models import ApiKey, Workspace
from bindings.selectors import api_key_by_plaintext


@dataclass(frozen=True)
class ApiKeyPrincipal:
    """The caller behind an API key: a workspace, not a person."""

    api_key: ApiKey

    is_authenticated = True
    is_active = True
    is_staff = False

    @property
    def workspace(self) -> Workspace:
        return self.api_key.workspace

    def __str__(self) -> str:
        return f"api-key:{self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be `Bearer <api key>`.")
        api_key = api_key_by_plaintext(key=header[1].decode(errors="replace"))
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        # Touch at most once a minute: a hot key must not turn every request into a write.
        now = timezone.now()
        if api_key.last_used_at is None or (now - api_key.last_used_at).total_seconds() > 60:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        return ApiKeyPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'
