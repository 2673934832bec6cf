"""The LangGraph side of `make bench-peers`: a one-node graph that answers "ok", the counterpart of the
qa-runner's `ok` on this host (no model, no tools: what is measured is the server around the graph)."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    text: str


def answer(state: State) -> State:
    return {"text": "ok"}


builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
