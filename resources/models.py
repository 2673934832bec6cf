"""Host resources a run may be allowed to use, per workspace: OpenAI-compatible model providers and the
models they serve, MCP servers and their tools, knowledge bases with their documents and chunks.

`provider_id`, `model_id`, `server_id`, `tool_name` and `kb_id` are the public ids (REST paths, binding
resource policies, `ctx.resources`). Validation lives in the services; secrets (API keys, headers and
environments, which may carry auth) are encrypted at rest and never shown unmasked.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from artifacts.models import Artifact
from bindings.models import Workspace
from foundation.crypto import EncryptedJSONField


class ModelProvider(models.Model):
    """An endpoint speaking the OpenAI-compatible API (`{base_url}/models`, `/chat/completions`, ...)."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="model_providers", verbose_name=_("workspace")
    )
    provider_id = models.SlugField(max_length=64, verbose_name=_("provider id"))
    name = models.CharField(max_length=200, verbose_name=_("name"))
    base_url = models.CharField(max_length=500, verbose_name=_("base url"))
    # A JSON string; "" when the endpoint needs no key (a local server).
    api_key = EncryptedJSONField(default=str, verbose_name=_("api key"))
    headers = EncryptedJSONField(default=dict, verbose_name=_("headers"))
    timeout_seconds = models.PositiveIntegerField(default=60, verbose_name=_("timeout seconds"))
    max_retries = models.PositiveSmallIntegerField(default=2, verbose_name=_("max retries"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("model provider")
        verbose_name_plural = _("model providers")
        ordering = ["workspace", "provider_id"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "provider_id"], name="uniq_model_provider_per_workspace")
        ]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.provider_id}"


class Model(models.Model):
    """One model of a provider, as runners may call it."""

    class Kind(models.TextChoices):
        LLM = "llm", _("LLM")
        EMBEDDING = "embedding", _("embedding")
        RERANK = "rerank", _("rerank")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="models", verbose_name=_("workspace")
    )
    model_id = models.SlugField(max_length=64, verbose_name=_("model id"))
    # PROTECT: deleting a provider its models still use is refused (the API answers 409).
    provider = models.ForeignKey(
        ModelProvider, on_delete=models.PROTECT, related_name="models", verbose_name=_("provider")
    )
    name = models.CharField(
        max_length=200, help_text=_("The provider's name for the model, e.g. gpt-4o-mini."), verbose_name=_("name")
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LLM, verbose_name=_("kind"))
    supports_tools = models.BooleanField(default=False, verbose_name=_("supports tools"))
    supports_vision = models.BooleanField(default=False, verbose_name=_("supports vision"))
    context_window = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("context window"))
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("max output tokens"))
    # What the provider charges, in the host's cost currency (settings.LANGBOT_COST_CURRENCY) per million
    # tokens. Read at each model call, so a run's cost is what the prices were when it called; a model
    # without a price costs nothing and counts towards no budget.
    input_price_per_million = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Price of one million input (prompt) tokens, in the host's cost currency; empty: not priced."),
        verbose_name=_("input price per million"),
    )
    output_price_per_million = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Price of one million output (completion) tokens, in the host's cost currency; empty: not priced."),
        verbose_name=_("output price per million"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("model")
        verbose_name_plural = _("models")
        ordering = ["workspace", "model_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "model_id"], name="uniq_model_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.model_id}"


class MCPServer(models.Model):
    """A Model Context Protocol server whose tools runs may call: a local process spoken to over stdio, or
    a streamable-HTTP endpoint. Its tools are cached as `MCPTool` rows, refreshed on demand and on
    reconnect and, in the background, after a save that changes how it connects; `status` and `last_error`
    say how the last connection went (or that one is under way)."""

    class Transport(models.TextChoices):
        STDIO = "stdio", _("stdio (local process)")
        HTTP = "http", _("streamable HTTP")

    class Status(models.TextChoices):
        UNKNOWN = "unknown", _("not connected yet")
        # Set by a save that changes how the server connects; a worker then connects in the background.
        CONNECTING = "connecting", _("connecting")
        OK = "ok", _("connected")
        ERROR = "error", _("failing")

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="mcp_servers", verbose_name=_("workspace")
    )
    server_id = models.SlugField(max_length=64, verbose_name=_("server id"))
    name = models.CharField(max_length=200, verbose_name=_("name"))
    transport = models.CharField(
        max_length=8, choices=Transport.choices, default=Transport.STDIO, verbose_name=_("transport")
    )
    command = models.CharField(max_length=500, blank=True, verbose_name=_("command"))
    args = models.JSONField(default=list, blank=True, verbose_name=_("args"))
    # Environment and headers may carry credentials: encrypted, shown masked.
    env = EncryptedJSONField(default=dict, verbose_name=_("env"))
    url = models.CharField(max_length=500, blank=True, verbose_name=_("url"))
    headers = EncryptedJSONField(default=dict, verbose_name=_("headers"))
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    timeout_seconds = models.PositiveIntegerField(default=30, verbose_name=_("timeout seconds"))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.UNKNOWN, verbose_name=_("status"))
    last_error = models.TextField(blank=True, verbose_name=_("last error"))
    tools_refreshed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("tools refreshed at"))
    metadata = models.JSONField(default=dict, blank=True, verbose_name=_("metadata"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        ordering = ["workspace", "server_id"]
        verbose_name = _("MCP server")
        verbose_name_plural = _("MCP servers")
        constraints = [models.UniqueConstraint(fields=["workspace", "server_id"], name="uniq_mcp_server_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.server_id}"


class MCPTool(models.Model):
    """One tool of an MCP server as runs see it. `tool_name` is the public, workspace-unique name
    (`allowed_tool_names`, `ctx.resources.tools`); `remote_name` is the server's own name for it."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="mcp_tools", verbose_name=_("workspace")
    )
    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="tools", verbose_name=_("server"))
    tool_name = models.CharField(max_length=128, verbose_name=_("tool name"))
    remote_name = models.CharField(max_length=128, verbose_name=_("remote name"))
    description = models.TextField(blank=True, verbose_name=_("description"))
    parameters = models.JSONField(default=dict, blank=True, verbose_name=_("parameters"))
    position = models.PositiveIntegerField(default=0, verbose_name=_("position"))

    class Meta:
        ordering = ["workspace", "tool_name"]
        verbose_name = _("MCP tool")
        verbose_name_plural = _("MCP tools")
        constraints = [models.UniqueConstraint(fields=["workspace", "tool_name"], name="uniq_tool_name_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.tool_name}"


class KnowledgeBase(models.Model):
    """A searchable set of documents. With an embedding model its chunks also carry dense vectors and
    retrieval ranks by both (hybrid); without one, by full-text search alone."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="knowledge_bases", verbose_name=_("workspace")
    )
    kb_id = models.SlugField(max_length=64, verbose_name=_("kb id"))
    name = models.CharField(max_length=200, verbose_name=_("name"))
    description = models.TextField(blank=True, verbose_name=_("description"))
    # PROTECT: a model a knowledge base embeds with cannot be deleted under it (the API answers 409).
    embedding_model = models.ForeignKey(
        Model,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="knowledge_bases",
        verbose_name=_("embedding model"),
    )
    # Bumped whenever the KB's searchable chunks change (a document ready or deleted, the embedding model
    # changed): processes that cache the KB's vectors compare it to know their copy is stale.
    index_version = models.PositiveBigIntegerField(default=0, verbose_name=_("index version"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")
        ordering = ["workspace", "kb_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "kb_id"], name="uniq_knowledge_base_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.kb_id}"


class KnowledgeDocument(models.Model):
    """An uploaded document of a knowledge base; its bytes are an artifact, its text lives in chunks.
    Ingestion (a Celery task) moves it queued → processing → ready | failed, with `progress` and `error`."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")
        PROCESSING = "processing", _("processing")
        READY = "ready", _("ready")
        FAILED = "failed", _("failed")

    document_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False, verbose_name=_("document id"))
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="knowledge_documents", verbose_name=_("workspace")
    )
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="documents", verbose_name=_("knowledge base")
    )
    artifact = models.ForeignKey(
        Artifact, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("artifact")
    )
    name = models.CharField(max_length=255, verbose_name=_("name"))
    mime_type = models.CharField(max_length=255, default="application/octet-stream", verbose_name=_("mime type"))
    size = models.PositiveBigIntegerField(default=0, verbose_name=_("size"))
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED, verbose_name=_("status"))
    # 0–100, what the ingestion task has done so far.
    progress = models.PositiveSmallIntegerField(default=0, verbose_name=_("progress"))
    error = models.TextField(blank=True, verbose_name=_("error"))
    page_count = models.PositiveIntegerField(default=0, verbose_name=_("page count"))
    chunk_count = models.PositiveIntegerField(default=0, verbose_name=_("chunk count"))
    metadata = models.JSONField(default=dict, blank=True, verbose_name=_("metadata"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))
    processed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("processed at"))

    class Meta:
        verbose_name = _("knowledge document")
        verbose_name_plural = _("knowledge documents")
        ordering = ["knowledge_base", "-created_at"]
        indexes = [models.Index(fields=["knowledge_base", "status"], name="kb_document_status_idx")]

    def __str__(self) -> str:
        return f"{self.knowledge_base}/{self.name}"


class KnowledgeChunk(models.Model):
    """A passage of a document as retrieval returns it: its text, its position in the document and where
    it came from (`metadata`: page, heading...). The full-text indexes (a PostgreSQL GIN index, a SQLite
    FTS5 table) are created by migrations per database; `embedding` holds the dense vector as float32 bytes
    when the knowledge base has an embedding model."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", verbose_name=_("workspace"))
    knowledge_base = models.ForeignKey(
        KnowledgeBase, on_delete=models.CASCADE, related_name="chunks", verbose_name=_("knowledge base")
    )
    document = models.ForeignKey(
        KnowledgeDocument, on_delete=models.CASCADE, related_name="chunks", verbose_name=_("document")
    )
    position = models.PositiveIntegerField(verbose_name=_("position"))
    text = models.TextField(verbose_name=_("text"))
    metadata = models.JSONField(default=dict, blank=True, verbose_name=_("metadata"))
    token_count = models.PositiveIntegerField(default=0, verbose_name=_("token count"))
    embedding = models.BinaryField(null=True, blank=True, verbose_name=_("embedding"))
    # Extra words for the full-text index only: the overlapping character bigrams (and single characters)
    # of CJK runs, which neither PostgreSQL's `simple` parser nor FTS5's unicode61 tokenizer split into
    # words (resources/knowledge/terms.py). Empty for text without CJK.
    search_terms = models.TextField(blank=True, default="", verbose_name=_("search terms"))

    class Meta:
        verbose_name = _("knowledge chunk")
        verbose_name_plural = _("knowledge chunks")
        ordering = ["document", "position"]
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="uniq_chunk_position")]
        indexes = [models.Index(fields=["knowledge_base", "id"], name="kb_chunk_kb_idx")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"
