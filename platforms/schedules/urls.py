"""Routes of the schedules under `/api/v1/`."""

from django.urls import path

from platforms.schedules.api import ScheduleDetailApi, ScheduleListApi

urlpatterns = [
    path("schedules", ScheduleListApi.as_view(), name="schedule-list"),
    path("schedules/<slug:schedule_id>", ScheduleDetailApi.as_view(), name="schedule-detail"),
]
