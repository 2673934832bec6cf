"""Top-level URL map: admin (and its usage report), the versioned REST API, its OpenAPI schema and docs,
/healthz and /metrics, the language switch (`/i18n/setlang/`) and the chat's JavaScript catalogue (`/jsi18n/`)."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from langbot_host.health import healthz
from langbot_host.metrics_view import metrics
from runners.conversations_admin import conversation_detail_view, conversation_list_view
from runners.usage_report import usage_report_view
from webchat.chat import chat_urlpatterns, home_page
from webchat.widget_views import widget_urlpatterns

api_v1 = [
    path("", include("gateway.urls")),
    path("", include("runners.urls")),
    path("", include("webchat.urls")),
    path("", include("bindings.urls")),
    path("", include("transcripts.urls")),
    path("", include("artifacts.urls")),
    path("", include("resources.urls")),
    path("", include("platforms.schedules.urls")),
    path("", include("platforms.webhooks.urls")),
    path("", include("platforms.alerts.urls")),
    path("", include("people.urls")),
]

urlpatterns = [
    # Where the admin's "View site" lands; browsers ask for /favicon.ico on pages that name none.
    path("", home_page, name="home"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    # Before the admin site's own catch-all: a page of the admin that belongs to no model.
    path("admin/usage/", admin.site.admin_view(usage_report_view), name="admin-usage"),
    path("admin/conversations/", admin.site.admin_view(conversation_list_view), name="admin-conversations"),
    path(
        "admin/conversations/<int:workspace_id>/<path:conversation_id>",
        admin.site.admin_view(conversation_detail_view),
        name="admin-conversation",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("chat/", include(chat_urlpatterns)),
    # The language switch of the admin and the chat (Django's set_language: a cookie, then back to `next`).
    path("i18n/", include("django.conf.urls.i18n")),
    # The chat's strings in the active language (locale/*/LC_MESSAGES/djangojs.po), as gettext() for chat.js.
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["webchat"]), name="javascript-catalog"),
    # Chat platforms' inbound webhooks (outside /api/v1/: the platforms call them, with their own auth).
    path("platforms/", include("platforms.urls")),
    # The website chat widget: its script and its visitors' sessions (public: any site its bot allows).
    *widget_urlpatterns,
]

# JSON error bodies under /api/ for what no API view handled (docs/architecture.md, "The REST API").
handler404 = "foundation.api_errors.page_not_found"
handler500 = "foundation.api_errors.server_error"
