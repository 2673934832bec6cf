"""The HTTP API that WeCom's and WeChat's servers share (`/cgi-bin/...`): an access token bought with the
app's id and secret and kept until shortly before it expires, errors answered as HTTP 200 with an `errcode`,
a token the server calls stale bought again once. `WeChatApiAdapter` holds that client; `wecom` and
`wechat_oa` say only where their token comes from and which codes mean what.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import httpx

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.tokens import AccessTokens, TokenKey
from platforms.interface import PlatformAdapter, PlatformAPIError, transport_failure

REQUEST_TIMEOUT = 30.0
SYSTEM_BUSY = -1
"""Both platforms' transient answer, given before anything was done: safe to try again."""

_access_tokens = AccessTokens(early_seconds=300)


def errcode(body: dict[str, Any]) -> int:
    try:
        return int(body.get("errcode") or 0)
    except (TypeError, ValueError):
        return SYSTEM_BUSY


class WeChatApiAdapter(PlatformAdapter):
    """A platform adapter speaking the shared API; subclasses fill in the class attributes below."""

    api_label: ClassVar[str]
    """How messages name the platform ("WeCom", "WeChat")."""
    default_api_base_url: ClassVar[str]
    app_id_key: ClassVar[str]
    """The credential holding the app's id (`corp_id`, `app_id`)."""
    app_secret_key: ClassVar[str]
    token_path: ClassVar[str]
    token_stale: ClassVar[frozenset[int]]
    """errcodes that mean the access token is stale or wrong: it is bought again once."""
    rate_limited: ClassVar[frozenset[int]]

    _http: httpx.AsyncClient | None = None

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    @property
    def base_url(self) -> str:
        return self.api_base_url or self.default_api_base_url

    def token_params(self) -> dict[str, str]:
        """The query of `token_path` that buys a token."""
        raise NotImplementedError

    def answer_is_file(self, response: httpx.Response) -> bool:
        """Whether an API answer is a file (`media/get`) rather than JSON with an errcode."""
        raise NotImplementedError

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self._secret(self.app_id_key) or not self._secret(self.app_secret_key):
                raise PlatformAPIError(f"the bot has no {self.api_label} {self.app_id_key} / {self.app_secret_key}")
            # Through the outbound address guard (api_base_url is the workspace's to set); no proxy from the
            # environment.
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    def json_object(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            message = f"{self.api_label} answered something other than JSON (HTTP {response.status_code})"
            raise PlatformAPIError(message) from None
        return body if isinstance(body, dict) else {}

    async def send_raw(self, what: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http().request(method, path, **kwargs)
        except AddressRefusedError as exc:  # api_base_url's address, refused by the outbound guard: final
            raise PlatformAPIError(f"{self.api_label} {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"{self.api_label} {what}: {exc}", exc) from exc
        if response.status_code >= 400:
            # The platform answers its own errors with 200 and an errcode; an HTTP error is a proxy's, and a
            # 5xx does not say whether a write was carried out.
            raise PlatformAPIError(
                f"{self.api_label} {what}: HTTP {response.status_code}",
                retryable=response.status_code >= 500 or response.status_code == 429,
                outcome_unknown=response.status_code >= 500 and method == "POST",
            )
        return response

    def refuse(self, what: str, body: dict[str, Any]) -> NoReturn:
        code = errcode(body)
        message = f"{self.api_label} {what}: {str(body.get('errmsg') or 'error')[:200]} (errcode {code})"
        if code in self.rate_limited:
            raise PlatformAPIError(message, retry_after=2.0)
        raise PlatformAPIError(message, retryable=code == SYSTEM_BUSY)

    def _token_key(self) -> TokenKey:
        return AccessTokens.key(self.base_url, self._secret(self.app_id_key), self._secret(self.app_secret_key))

    async def access_token(self) -> str:
        """The app's access token, kept until shortly before `expires_in` ends."""
        key = self._token_key()
        if (cached := _access_tokens.get(key)) is not None:
            return cached
        what = self.token_path.rsplit("/", 1)[-1]
        body = self.json_object(await self.send_raw(what, "GET", self.token_path, params=self.token_params()))
        if errcode(body) != 0 or not body.get("access_token"):
            self.refuse(what, body)
        token = str(body["access_token"])
        _access_tokens.put(key, token, float(body.get("expires_in") or 7200))
        return token

    async def call(
        self, what: str, method: str, path: str, *, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> httpx.Response:
        """One API call with `access_token`; a token the platform calls stale is bought again once. Returns the
        response: a JSON answer checked for its errcode, or a file as it is."""
        for attempt in (1, 2):
            query = {**(params or {}), "access_token": await self.access_token()}
            response = await self.send_raw(what, method, path, params=query, **kwargs)
            if self.answer_is_file(response):
                return response
            body = self.json_object(response)
            code = errcode(body)
            if code in self.token_stale and attempt == 1:
                _access_tokens.drop(self._token_key())
                continue
            if code != 0:
                self.refuse(what, body)
            return response
        raise PlatformAPIError(f"{self.api_label} {what}: the access token is refused")  # pragma: no cover
