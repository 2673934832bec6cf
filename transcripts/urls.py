"""Routes of the transcripts app under `/api/v1/`: conversation transcripts.

A conversation id may contain slashes (it is the client's), hence the `path` converter.
"""

from django.urls import path

from transcripts.api import ConversationTranscriptApi

urlpatterns = [
    path(
        "conversations/<path:conversation_id>/transcript",
        ConversationTranscriptApi.as_view(),
        name="conversation-transcript",
    ),
]
