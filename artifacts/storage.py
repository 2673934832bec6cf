"""The storage backend that holds artifact bytes, chosen by `settings.ARTIFACT_STORAGE_URL` (docs/operations.md,
"Settings").

- `file:///abs/path` → `FileSystemStorage` rooted at that path.
- `s3://bucket/prefix?endpoint_url=...&region=...` → django-storages' `S3Storage` (needs `boto3`);
  credentials come from the usual AWS environment variables or instance profile, never from the URL.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import parse_qs, unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import FileSystemStorage, Storage


def artifact_storage() -> Storage:
    """The storage for the current setting (built once per distinct URL)."""
    return storage_from_url(settings.ARTIFACT_STORAGE_URL)


@lru_cache(maxsize=4)
def storage_from_url(url: str) -> Storage:
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc or not path.startswith("/"):
            raise ImproperlyConfigured(f"ARTIFACT_STORAGE_URL must be file:///absolute/path, not {url!r}")
        # No base_url: artifacts are served through the API, which checks the workspace, never directly.
        return FileSystemStorage(location=path, base_url=None)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ImproperlyConfigured(f"ARTIFACT_STORAGE_URL needs a bucket: s3://bucket/prefix, not {url!r}")
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        options: dict[str, object] = {
            "bucket_name": parts.netloc,
            "location": parts.path.strip("/"),
            "default_acl": None,
            "querystring_auth": True,
            "file_overwrite": False,
        }
        if "endpoint_url" in query:
            options["endpoint_url"] = query["endpoint_url"]
        if "region" in query:
            options["region_name"] = query["region"]
        try:
            from storages.backends.s3 import S3Storage
        except ImportError as exc:  # boto3 is what is usually missing
            raise ImproperlyConfigured(f"s3:// artifact storage needs boto3 (pip install boto3): {exc}") from exc
        storage: Storage = S3Storage(**options)
        return storage
    raise ImproperlyConfigured(f"ARTIFACT_STORAGE_URL scheme must be file:// or s3://, not {url!r}")
