"""Benchmarks of LangBot Host (`make bench`); see README.md."""
