"""Which ``Host`` headers `winnow serve` answers: its defence against DNS rebinding.

A web page on ``evil.example`` can re-point its own name at 127.0.0.1 and then read, as
same-origin, whatever a server on the visitor's loopback answers, which matters most when the
server has no API key (the default). The browser still sends ``Host: evil.example``, so a server
that answers only to the names it is known by is safe. Accepted without being told:

- any IP address (``127.0.0.1``, ``[::1]``, ``10.0.0.5``): a rebinding page's origin is a name,
  never an address;
- ``localhost``, the name given to ``--host``, and the machine's own name when listening on every
  interface (``--host 0.0.0.0``);
- a request with no ``Host`` at all (HTTP/1.0 tools; browsers always send one).

The port is not compared: a container reached through a forwarded port sees another one, and a
rebinding page must use the server's real port anyway. Behind a proxy that passes its public name
on, list the name with ``--allowed-host`` (``*.example.com`` allows subdomains) or turn the check
off with ``--allow-any-host``.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Iterable

WILDCARD_BINDS = {"", "0.0.0.0", "::"}


def host_name(header: str) -> str:
    """The name or address in a ``Host`` header, without port, brackets or trailing dot, lowercased:
    ``[::1]:8080`` -> ``::1``, ``Example.COM.:80`` -> ``example.com``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, colon, port = header.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        header = name
    return header.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostPolicy:
    """The names a server answers to; IP addresses are always accepted (see the module docstring)."""

    names: frozenset[str]
    any_host: bool = False

    @classmethod
    def for_bind(cls, bind_host: str, allowed: Iterable[str] = (), *, any_host: bool = False) -> HostPolicy:
        """The policy of a server listening on ``bind_host``, with the ``--allowed-host`` names added."""
        names = {"localhost", host_name(bind_host)} | {host_name(name) for name in allowed}
        if bind_host in WILDCARD_BINDS:
            names.add(socket.gethostname().lower())
        return cls(frozenset(name for name in names if name and not _is_address(name)), any_host)

    def allows(self, header: str | None) -> bool:
        if self.any_host or header is None:
            return True
        name = host_name(header)
        if _is_address(name) or name in self.names:
            return True
        return any(pattern.startswith("*.") and name.endswith(pattern[1:]) for pattern in self.names)

    def refusal(self, header: str) -> str:
        """The message for a refused ``Host``: what was sent, what is accepted, and what to do."""
        known = ", ".join(sorted(self.names))
        return (f"Host {header!r} is not a name this server answers to (it accepts IP addresses and {known}); "
                f"this guards against DNS rebinding. Use one of those, or start the server with "
                f"--allowed-host NAME (repeatable) or --allow-any-host when a proxy in front of it checks names")
