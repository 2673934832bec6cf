"""Routes of the runners app under `/api/v1/`: runners, runs and their streams, platform action requests and
their approval, budgets and costs, human takeover. (Events in are the gateway's, `gateway.urls`; WebSocket tickets the
chat's, `webchat.urls`.)

Run ids are matched as plain strings and parsed in the view, so a malformed id answers the API's JSON 404
rather than the URL resolver's HTML one.
"""

from django.urls import path

from runners.actions.api import ActionApproveApi, ActionDetailApi, ActionListApi, ActionRejectApi
from runners.actions.takeover_api import (
    ConversationOperatorMessageApi,
    ConversationReleaseApi,
    ConversationTakeoverApi,
    HandoffListApi,
)
from runners.costs_api import BudgetDetailApi, BudgetListApi, CostListApi
from runners.lifecycle.api import (
    RunCancelApi,
    RunDetailApi,
    RunEventListApi,
    RunListApi,
    RunnerListApi,
    RunnerRefreshApi,
)
from runners.lifecycle.sse import run_stream

urlpatterns = [
    path("runners", RunnerListApi.as_view(), name="runner-list"),
    path("runners/refresh", RunnerRefreshApi.as_view(), name="runner-refresh"),
    path("runs", RunListApi.as_view(), name="run-list"),
    path("runs/<str:run_id>", RunDetailApi.as_view(), name="run-detail"),
    path("runs/<str:run_id>/events", RunEventListApi.as_view(), name="run-event-list"),
    path("runs/<str:run_id>/cancel", RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/stream", run_stream, name="run-stream"),
    path("budgets", BudgetListApi.as_view(), name="budget-list"),
    path("budgets/<str:budget_id>", BudgetDetailApi.as_view(), name="budget-detail"),
    path("costs", CostListApi.as_view(), name="cost-list"),
    path("actions", ActionListApi.as_view(), name="action-list"),
    path("actions/<str:action_id>", ActionDetailApi.as_view(), name="action-detail"),
    path("actions/<str:action_id>/approve", ActionApproveApi.as_view(), name="action-approve"),
    path("actions/<str:action_id>/reject", ActionRejectApi.as_view(), name="action-reject"),
    # Human takeover (a conversation id may contain slashes, hence `path`).
    path(
        "conversations/<path:conversation_id>/takeover", ConversationTakeoverApi.as_view(), name="conversation-takeover"
    ),
    path("conversations/<path:conversation_id>/release", ConversationReleaseApi.as_view(), name="conversation-release"),
    path(
        "conversations/<path:conversation_id>/messages",
        ConversationOperatorMessageApi.as_view(),
        name="conversation-operator-message",
    ),
    path("handoffs", HandoffListApi.as_view(), name="handoff-list"),
]
