"""The local-agent runner's code: config, context fences and budgets, history and compaction, model
calls with fallback, the tool loop, retrieval, multimodal input, and the runner that ties them together.
Imports `langbot_sdk` only."""
