"""The host's only reaches into libraries' internals, one module per library.

Each module says exactly which private attribute or undocumented behaviour it relies on, at which version
(`TESTED_VERSION`, equal to the pin in requirements.txt), and why no public API does it. tests/compat/
checks, for each, that the installed version is the pinned one and that what the module relies on still
exists and works: an upgrade fails there, naming the module to re-check, instead of somewhere downstream.
Callers use these modules only, never the private names themselves.
"""
