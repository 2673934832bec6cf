"""Routes of the transcripts app under `/api/v1/`: the Event Gateway and conversation transcripts (and the
artifacts API, whose bytes back event attachments).

A conversation id may contain slashes (it is the client's), hence the `path` converter.
"""

from django.urls import include, path

from transcripts.api import ConversationTranscriptApi, EventDetailApi, EventIngestApi

urlpatterns = [
    path("events", EventIngestApi.as_view(), name="event-ingest"),
    path("events/<str:event_id>", EventDetailApi.as_view(), name="event-detail"),
    path(
        "conversations/<path:conversation_id>/transcript",
        ConversationTranscriptApi.as_view(),
        name="conversation-transcript",
    ),
    path("", include("artifacts.urls")),
]
