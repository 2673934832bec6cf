"""`make bench-peers`: this host beside LangBot's released host and the LangGraph dev server, driven by the
same client under the same load (not part of `make bench` or CI: it installs the peers first).

- `__main__.py` starts each system, drives it and prints the side-by-side table;
- `langgraph_echo/` is the graph the LangGraph dev server serves (it answers "ok").

The LangBot side runs the LangBot-SDK echo runner of `tests/langbot_plugin/plugins/lbp-echo`, packaged with
LangBot's own `lbp build` and installed through LangBot's plugin API, as a LangBot user installs a plugin.
"""
