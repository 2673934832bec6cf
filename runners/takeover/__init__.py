"""Human takeover: an operator holds a conversation (its bindings start no run while held), replies in it,
and hands it back; a runner may ask for a human (a `handoff` action), which puts the conversation in the
operators' inbox. The hold model, its writes and reads, and the context fact a run gets after a release."""
