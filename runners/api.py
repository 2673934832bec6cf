"""REST endpoints for runner discovery: `GET /api/v1/runners`, `POST /api/v1/runners/refresh`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from langbot_host.api_errors import ApiError
from langbot_sdk.protocol import AgentAPIException
from runners.models import RunnerDescriptor
from runners.selectors import runner_descriptor_list
from runners.services import runner_descriptors_refresh


class RunnerOutputSerializer(serializers.ModelSerializer[RunnerDescriptor]):
    plugin = serializers.SerializerMethodField()
    context = serializers.JSONField(source="context_policy")  # type: ignore[assignment]

    class Meta:
        model = RunnerDescriptor
        fields = [
            "runner_id", "plugin", "runner_name", "label", "description", "capabilities", "permissions",
            "context", "config_schema", "manifest_sha256", "status", "load_error", "last_seen_at",
        ]

    def get_plugin(self, obj: RunnerDescriptor) -> dict[str, str]:
        return {"author": obj.plugin_author, "name": obj.plugin_name, "version": obj.plugin_version}


class RunnerListQuerySerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=RunnerDescriptor.Status.choices, required=False)


class RunnerListApi(APIView):
    @extend_schema(
        parameters=[RunnerListQuerySerializer],
        responses=inline_serializer("RunnerList", {"items": RunnerOutputSerializer(many=True)}),
    )
    def get(self, request: Request) -> Response:
        query = RunnerListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        runners = runner_descriptor_list(status=query.validated_data.get("status"))
        return Response({"items": RunnerOutputSerializer(runners, many=True).data})


class RunnerRefreshApi(APIView):
    @extend_schema(
        request=None,
        responses=inline_serializer(
            "RunnerRefresh",
            {
                "items": RunnerOutputSerializer(many=True),
                "missing": serializers.ListField(child=serializers.CharField()),
                "plugin_errors": serializers.ListField(child=serializers.DictField()),
            },
        ),
    )
    def post(self, request: Request) -> Response:
        try:
            result = runner_descriptors_refresh()
        except AgentAPIException as exc:
            raise ApiError(503, "runtime.unavailable", exc.error.message) from exc
        return Response(
            {
                "items": RunnerOutputSerializer(runner_descriptor_list(), many=True).data,
                "missing": result.missing,
                "plugin_errors": result.plugin_errors,
            }
        )
