"""Reads for runner descriptors."""

from __future__ import annotations

from django.db.models import QuerySet

from runners.models import RunnerDescriptor


def runner_descriptor_list(*, status: str | None = None) -> QuerySet[RunnerDescriptor]:
    queryset = RunnerDescriptor.objects.all()
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def runner_descriptor_get(*, runner_id: str) -> RunnerDescriptor | None:
    return RunnerDescriptor.objects.filter(runner_id=runner_id).first()
