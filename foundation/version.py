"""The host's own version, as runs report it to runners (`ctx.runtime.langbot_version`).

This host speaks LangBot's protocol but is not a LangBot release, so the version says which host it is and
the version of its package, never a LangBot release number a runner could mistake it for.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

HOST_NAME = "langbot-host"


def _package_version() -> str:
    try:
        return version("langbot-sdk")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


HOST_VERSION = f"{HOST_NAME}/{_package_version()}"
