"""Dense vectors from a knowledge base's embedding model, through its OpenAI-compatible provider
(`POST {base_url}/embeddings`), in batches; float32 bytes are what chunks store.

Failures become `ProviderCallError`s whose messages carry the provider's status and words, never its key:
ingestion shows them on the document, retrieval logs them and answers from full text alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import openai

from foundation.outbound import AddressRefusedError
from resources.models import Model
from resources.providers.clients import async_openai_client, openai_client
from resources.providers.failures import ProviderCallError, call_failure

# Inputs per request: OpenAI accepts 2,048, many compatible servers far fewer; 64 keeps requests small.
EMBEDDING_BATCH = 64


def _vectors(data: list[object]) -> list[np.ndarray]:
    items = sorted(data, key=lambda item: getattr(item, "index", 0))
    vectors = [np.asarray(getattr(item, "embedding", None), dtype=np.float32) for item in items]
    if any(vector.ndim != 1 or vector.size == 0 for vector in vectors):
        raise ProviderCallError(None, "The embedding answer holds a vector that is not a list of numbers.")
    return vectors


def texts_embed(*, model: Model, texts: list[str], progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """One vector per text, in order; `progress(done)` after each batch."""
    client = openai_client(model.provider)
    vectors: list[np.ndarray] = []
    for start in range(0, len(texts), EMBEDDING_BATCH):
        batch = texts[start : start + EMBEDDING_BATCH]
        try:
            answer = client.embeddings.create(model=model.name, input=batch, encoding_format="float")
        except (openai.APIError, AddressRefusedError) as exc:  # the SDK lets the guard's refusal through as is
            raise call_failure(model.provider, exc) from None
        got = _vectors(list(answer.data))
        if len(got) != len(batch):
            raise ProviderCallError(None, f"The provider returned {len(got)} embeddings for {len(batch)} texts.")
        vectors.extend(got)
        if progress is not None:
            progress(len(vectors))
    return vectors


async def query_embed(*, model: Model, text: str, timeout: float) -> np.ndarray:
    """The vector of one query, within `timeout` seconds (what the run has left)."""
    client = async_openai_client(model.provider, timeout=timeout)
    try:
        answer = await client.embeddings.create(model=model.name, input=[text], encoding_format="float")
    except (openai.APIError, AddressRefusedError) as exc:
        raise call_failure(model.provider, exc) from None
    finally:
        await client.close()
    got = _vectors(list(answer.data))
    if len(got) != 1:
        raise ProviderCallError(None, f"The provider returned {len(got)} embeddings for one query.")
    return got[0]
