"""Top-level URL map: admin (and its usage report), the versioned REST API, its OpenAPI schema and docs,
/healthz and /metrics."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from langbot_host.health import healthz
from langbot_host.metrics_view import metrics
from runners.usage_report import usage_report_view
from webchat.chat import chat_urlpatterns, home_page

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
]

urlpatterns = [
    # Where the admin's "View site" lands; browsers ask for /favicon.ico on pages that name none.
    path("", home_page, name="home"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    # Before the admin site's own catch-all: a page of the admin that belongs to no model.
    path("admin/usage/", admin.site.admin_view(usage_report_view), name="admin-usage"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("chat/", include(chat_urlpatterns)),
    # Chat platforms' inbound webhooks (outside /api/v1/: the platforms call them, with their own auth).
    path("platforms/", include("platforms.urls")),
]

# JSON error bodies under /api/ for what no API view handled (docs/architecture.md, "The REST API").
handler404 = "foundation.api_errors.page_not_found"
handler500 = "foundation.api_errors.server_error"

admin.site.site_header = "LangBot Host"
admin.site.site_title = "LangBot Host admin"
