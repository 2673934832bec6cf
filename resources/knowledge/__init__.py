"""Knowledge bases: documents, parsing, chunking, indexing (full text and vectors), ingestion task,
retrieval, REST endpoints and admin."""
