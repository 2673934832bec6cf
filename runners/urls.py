"""Routes of the runners app under `/api/v1/`."""

from django.urls import path

from runners.api import RunnerListApi, RunnerRefreshApi

urlpatterns = [
    path("runners", RunnerListApi.as_view(), name="runner-list"),
    path("runners/refresh", RunnerRefreshApi.as_view(), name="runner-refresh"),
]
