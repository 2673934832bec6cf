"""Runners written for LangBot's released plugin SDK (`langbot-plugin`), run by LangBot's own plugin runtime
(`lbp rt`), served by this host as LangBot serves them (opt-in: `LANGBOT_LANGBOT_RUNTIME_URL`).

- `wire`: LangBot's control-connection wire (JSON requests/responses over one WebSocket);
- `translate`: its runner listing, run context, results and host calls ↔ our protocol;
- `bridge`: the handshake, the catalog, runs, cancellation and the runtime's calls back to the host.
"""

from runtimes.langbot.bridge import LangBotRunnerHost, LangBotRuntime, langbot_report, langbot_runner_host

__all__ = ["LangBotRunnerHost", "LangBotRuntime", "langbot_report", "langbot_runner_host"]
