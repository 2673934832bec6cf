"""Routes of the Event Gateway under `/api/v1/`: `POST /events[?wait=]` and `GET /events/{id}`."""

from django.urls import path

from gateway.api import EventDetailApi, EventIngestApi

urlpatterns = [
    path("events", EventIngestApi.as_view(), name="event-ingest"),
    path("events/<str:event_id>", EventDetailApi.as_view(), name="event-detail"),
]
