"""Routes of the bindings app under `/api/v1/`."""

from django.urls import path

from bindings.api import BindingDetailApi, BindingListApi, BotDetailApi, BotListApi
from bindings.members_api import MemberDetailApi, MemberListApi, MembershipApi

urlpatterns = [
    path("bindings", BindingListApi.as_view(), name="binding-list"),
    path("bindings/<slug:binding_id>", BindingDetailApi.as_view(), name="binding-detail"),
    path("bots", BotListApi.as_view(), name="bot-list"),
    path("bots/<slug:bot_id>", BotDetailApi.as_view(), name="bot-detail"),
    path("members", MemberListApi.as_view(), name="member-list"),
    path("members/<str:username>", MemberDetailApi.as_view(), name="member-detail"),
    path("membership", MembershipApi.as_view(), name="membership"),
]
