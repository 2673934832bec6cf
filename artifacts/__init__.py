"""Artifact metadata and blobs on django-storages, with range reads and the upload/download API."""
