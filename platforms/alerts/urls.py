"""Routes of the alerts under `/api/v1/`."""

from django.urls import path

from platforms.alerts.api import AlertListApi

urlpatterns = [path("alerts", AlertListApi.as_view(), name="alert-list")]
