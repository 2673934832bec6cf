"""Host resources a run may be allowed to use, per workspace: OpenAI-compatible model providers and the
models they serve.

`provider_id` and `model_id` are the public ids (REST paths, `resource_policy.allowed_model_ids`,
`ctx.resources.models[].model_id`). Validation lives in `resources.services`; secrets (the API key and the
extra headers, which may carry auth) are encrypted at rest and never shown unmasked.
"""

from __future__ import annotations

from django.db import models

from bindings.models import Workspace
from langbot_host.core.crypto import EncryptedJSONField


class ModelProvider(models.Model):
    """An endpoint speaking the OpenAI-compatible API (`{base_url}/models`, `/chat/completions`, ...)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="model_providers")
    provider_id = models.SlugField(max_length=64)
    name = models.CharField(max_length=200)
    base_url = models.CharField(max_length=500)
    # A JSON string; "" when the endpoint needs no key (a local server).
    api_key = EncryptedJSONField(default=str)
    headers = EncryptedJSONField(default=dict)
    timeout_seconds = models.PositiveIntegerField(default=60)
    max_retries = models.PositiveSmallIntegerField(default=2)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "provider_id"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "provider_id"], name="uniq_model_provider_per_workspace")
        ]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.provider_id}"


class Model(models.Model):
    """One model of a provider, as runners may call it."""

    class Kind(models.TextChoices):
        LLM = "llm", "LLM"
        EMBEDDING = "embedding", "embedding"
        RERANK = "rerank", "rerank"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="models")
    model_id = models.SlugField(max_length=64)
    # PROTECT: deleting a provider its models still use is refused (the API answers 409).
    provider = models.ForeignKey(ModelProvider, on_delete=models.PROTECT, related_name="models")
    name = models.CharField(max_length=200, help_text="The provider's name for the model, e.g. gpt-4o-mini.")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LLM)
    supports_tools = models.BooleanField(default=False)
    supports_vision = models.BooleanField(default=False)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "model_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "model_id"], name="uniq_model_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.model_id}"
