"""A fake Matrix homeserver speaking the client-server API's wire format (`Authorization: Bearer <access
token>`, errors as `{"errcode", "error"}`; 401 `M_UNKNOWN_TOKEN` for a wrong token, 429
`M_LIMIT_EXCEEDED` with `retry_after_ms` for the next call of a route after `rate_limit_next`):

* `GET /_matrix/client/v3/account/whoami` → `{"user_id"}`;
* `GET /_matrix/client/v3/sync` (`since`, `timeout` ms, `filter` as inline JSON): `next_batch` tokens
  `s<n>` count the events; without `since` the history the filter's `timeline.limit` allows (and every
  pending invitation); with one, the events after it, or — none yet — held up to `timeout` until one comes;
  `hang_up_after_next("sync")` takes the next poll and closes its connection without answering;
* `POST /_matrix/client/v3/join/{room}` joins the bot (`joined`); `GET /rooms/{room}/joined_members`;
* `PUT /_matrix/client/v3/rooms/{room}/send/{type}/{txn}` → `{"event_id"}`, the same event for a
  transaction id used again (as homeservers do), kept in `sent`;
* `GET /_matrix/client/v1/media/download/{server}/{id}` serves `add_media` files.

A test puts events into rooms (`message`, `member`, `reaction`, `redaction`, `invite`, `raw_event`).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

ACCESS_TOKEN = "syt_bGFuZ2JvdA_fakeMatrixToken_0001"
BOT_USER_ID = "@langbot:example.org"
USER_ID = "@ada:example.org"
GROUP_ROOM = "!group:example.org"
DIRECT_ROOM = "!direct:example.org"
CLIENT = "/_matrix/client/v3"


@dataclass
class Sent:
    room_id: str
    event_type: str
    txn: str
    content: dict[str, Any]
    event_id: str
    at: float
    status: int = 200


@dataclass
class Room:
    members: set[str] = field(default_factory=set)


class FakeMatrix(FakePlatformServer):
    def __init__(self, access_token: str = ACCESS_TOKEN) -> None:
        super().__init__(MatrixHandler)
        self.access_token = access_token
        self.lock = threading.Condition()
        self.timeline: list[tuple[str, dict[str, Any]]] = []  # (room, event); position = index + 1
        self.invites: dict[str, str] = {}  # room → inviter, until joined
        self.rooms: dict[str, Room] = {
            GROUP_ROOM: Room({BOT_USER_ID, USER_ID, "@bob:example.org"}),
            DIRECT_ROOM: Room({BOT_USER_ID, USER_ID}),
        }
        self.joined: list[str] = []
        self.sent: list[Sent] = []
        self.by_txn: dict[str, Sent] = {}
        self.syncs: list[dict[str, str]] = []
        self.failures: dict[str, list[float]] = {}
        self.media: dict[str, tuple[str, bytes]] = {}
        self._ids = itertools.count(1)

    @property
    def homeserver_url(self) -> str:
        return self.origin

    # -- what a test does ------------------------------------------------------------------------
    def _add(self, room_id: str, event: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.timeline.append((room_id, event))
            self.lock.notify_all()
        return event

    def raw_event(self, room_id: str, event: Any) -> None:
        self._add(room_id, event)

    def event(
        self, room_id: str, kind: str, content: dict[str, Any], *, sender: str = USER_ID, **more: Any
    ) -> dict[str, Any]:
        event = {
            "type": kind,
            "event_id": f"$ev{next(self._ids)}_aBc+/x",
            "sender": sender,
            "origin_server_ts": int(time.time() * 1000),
            "content": content,
            **more,
        }
        return self._add(room_id, event)

    def message(self, room_id: str, body: str, *, sender: str = USER_ID, **content: Any) -> dict[str, Any]:
        return self.event(room_id, "m.room.message", {"msgtype": "m.text", "body": body, **content}, sender=sender)

    def member(self, room_id: str, user_id: str, membership: str, *, before: str | None = None) -> dict[str, Any]:
        unsigned = {"prev_content": {"membership": before}} if before else {}
        return self.event(
            room_id, "m.room.member", {"membership": membership}, sender=user_id, state_key=user_id, unsigned=unsigned
        )

    def reaction(self, room_id: str, target: str, key: str) -> dict[str, Any]:
        relates = {"rel_type": "m.annotation", "event_id": target, "key": key}
        return self.event(room_id, "m.reaction", {"m.relates_to": relates})

    def redaction(self, room_id: str, target: str) -> dict[str, Any]:
        return self.event(room_id, "m.room.redaction", {"redacts": target}, redacts=target)

    def invite(self, room_id: str, inviter: str = USER_ID) -> None:
        with self.lock:
            self.invites[room_id] = inviter
            self.rooms.setdefault(room_id, Room({inviter}))
            self.lock.notify_all()

    def add_media(self, media_id: str, name: str, data: bytes) -> str:
        self.media[media_id] = (name, data)
        return f"mxc://example.org/{media_id}"

    def rate_limit_next(self, route: str, retry_after_ms: int) -> None:
        self.failures.setdefault(route, []).append(retry_after_ms)

    def wait_syncs(self, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while len(self.syncs) < count:
            assert time.monotonic() < deadline, f"only {len(self.syncs)} syncs"
            time.sleep(0.02)

    def texts(self, room_id: str) -> list[str]:
        """The room's messages as they read now: each message of the bot with its latest edit applied."""
        with self.lock:
            shown: dict[str, str] = {}
            for sent in self.sent:
                if sent.room_id != room_id or sent.event_type != "m.room.message":
                    continue
                relation = sent.content.get("m.relates_to") or {}
                if relation.get("rel_type") == "m.replace":
                    shown[relation["event_id"]] = sent.content["m.new_content"]["body"]
                else:
                    shown.setdefault(sent.event_id, sent.content["body"])
            return list(shown.values())

    def sends(self, event_type: str = "m.room.message") -> list[Sent]:
        with self.lock:
            return [s for s in self.sent if s.event_type == event_type]


class MatrixHandler(PlatformHandler):
    fake: FakeMatrix

    def _error(self, status: int, errcode: str, error: str, **more: Any) -> None:
        self.send_json(status, {"errcode": errcode, "error": error, **more})

    def _authorised(self) -> bool:
        if self.headers.get("authorization") != f"Bearer {self.fake.access_token}":
            self._error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
            return False
        return True

    def _limited(self, route: str) -> bool:
        pending = self.fake.failures.get(route)
        if pending:
            self._error(429, "M_LIMIT_EXCEEDED", "Too Many Requests", retry_after_ms=pending.pop(0))
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        if not self._authorised():
            return
        path = self.path_only
        if path == f"{CLIENT}/account/whoami":
            self.send_json(200, {"user_id": BOT_USER_ID, "device_id": "LANGBOT"})
        elif path == f"{CLIENT}/sync":
            self._sync()
        elif path.startswith(f"{CLIENT}/rooms/") and path.endswith("/joined_members"):
            room = self.fake.rooms.get(unquote(path.split("/")[5]))
            if room is None:
                self._error(403, "M_FORBIDDEN", "not in the room")
            else:
                self.send_json(200, {"joined": {user: {"display_name": user} for user in sorted(room.members)}})
        elif path.startswith("/_matrix/client/v1/media/download/"):
            found = self.fake.media.get(path.rsplit("/", 1)[-1])
            if found is None:
                self._error(404, "M_NOT_FOUND", "no such media")
            else:
                self.send_bytes(200, "application/pdf", found[1])
        else:
            self._error(404, "M_UNRECOGNIZED", "Unrecognized request")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        self.read_body()
        if not self._authorised():
            return
        path = self.path_only
        if path.startswith(f"{CLIENT}/join/"):
            room_id = unquote(path.removeprefix(f"{CLIENT}/join/"))
            with self.fake.lock:
                self.fake.invites.pop(room_id, None)
                self.fake.joined.append(room_id)
                self.fake.rooms.setdefault(room_id, Room()).members.add(BOT_USER_ID)
            self.send_json(200, {"room_id": room_id})
        else:
            self._error(404, "M_UNRECOGNIZED", "Unrecognized request")

    def do_PUT(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        if not self._authorised():
            return
        parts = self.path_only.removeprefix(f"{CLIENT}/rooms/").split("/")
        if len(parts) != 4 or parts[1] != "send":
            self._error(404, "M_UNRECOGNIZED", "Unrecognized request")
            return
        room_id, event_type, txn = unquote(parts[0]), unquote(parts[2]), unquote(parts[3])
        if self._limited(f"send/{event_type}"):
            return
        fake = self.fake
        with fake.lock:
            known = fake.by_txn.get(txn)
            if known is None:
                known = Sent(room_id, event_type, txn, json.loads(raw), f"$sent{next(fake._ids)}", time.monotonic())
                fake.by_txn[txn] = known
                fake.sent.append(known)
        if fake.take_hang_up(f"send/{event_type}"):
            self.hang_up()
            return
        self.send_json(200, {"event_id": known.event_id})

    def _sync(self) -> None:
        fake = self.fake
        query = self.query_params()
        fake.syncs.append(query)
        if fake.take_hang_up("sync"):
            self.hang_up()
            return
        since = query.get("since")
        timeline_limit = json.loads(query.get("filter") or "{}").get("room", {}).get("timeline", {}).get("limit", 10)
        with fake.lock:
            if since is not None:
                start = int(since.removeprefix("s"))
                deadline = time.monotonic() + int(query.get("timeout") or 0) / 1000
                while len(fake.timeline) <= start and not fake.invites and time.monotonic() < deadline:
                    fake.lock.wait(0.05)
                    if fake.released.is_set():
                        break
                events = fake.timeline[start:]
            else:
                events = fake.timeline[len(fake.timeline) - timeline_limit :] if timeline_limit else []
            position = len(fake.timeline)
            invites = dict(fake.invites)
        joined: dict[str, Any] = {}
        for room_id, event in events:
            room = joined.setdefault(room_id, {"timeline": {"events": [], "limited": False}})
            room["timeline"]["events"].append(event)
        invite = {
            room_id: {
                "invite_state": {
                    "events": [
                        {"type": "m.room.member", "state_key": BOT_USER_ID, "sender": inviter,
                         "content": {"membership": "invite"}},
                        {"type": "m.room.name", "state_key": "", "sender": inviter, "content": {"name": "a room"}},
                    ]
                }
            }
            for room_id, inviter in invites.items()
        }  # fmt: skip
        self.send_json(200, {"next_batch": f"s{position}", "rooms": {"join": joined, "invite": invite, "leave": {}}})
