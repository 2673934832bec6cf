"""Routes of the artifacts app under `/api/v1/` (included from `transcripts.urls`)."""

from django.urls import path

from artifacts.api import ArtifactContentApi, ArtifactDetailApi, ArtifactUploadApi

urlpatterns = [
    path("artifacts", ArtifactUploadApi.as_view(), name="artifact-upload"),
    path("artifacts/<str:artifact_id>", ArtifactDetailApi.as_view(), name="artifact-detail"),
    path("artifacts/<str:artifact_id>/content", ArtifactContentApi.as_view(), name="artifact-content"),
]
