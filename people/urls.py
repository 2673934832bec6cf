"""Routes of the people app under `/api/v1/` (README "People"). Person ids are matched as plain strings and
parsed in the view, so a malformed id answers the API's JSON 404."""

from django.urls import path

from people.api import PersonDetailApi, PersonEraseApi, PersonExportApi, PersonListApi

urlpatterns = [
    path("persons", PersonListApi.as_view(), name="person-list"),
    path("persons/<str:person_id>", PersonDetailApi.as_view(), name="person-detail"),
    path("persons/<str:person_id>/export", PersonExportApi.as_view(), name="person-export"),
    path("persons/<str:person_id>/erase", PersonEraseApi.as_view(), name="person-erase"),
]
