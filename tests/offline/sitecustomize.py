"""The suite's offline guard: any Python process started with this folder on PYTHONPATH can
reach loopback addresses only.

tests/conftest.py puts this folder first on PYTHONPATH, so every process the suite starts (the
kernels nbval runs each notebook in, the grader's workers and their kernels) imports it before
anything else. A notebook that tries to download a data set, a model or a font then fails at
once with `OfflineError` instead of quietly depending on the network. The kernels' own traffic
(ZeroMQ over 127.0.0.1) is loopback and passes.

Covered: connecting a socket to a non-loopback address (IPv4, IPv6, or a host name that is not
`localhost`), and resolving a host name other than `localhost` (a DNS query is already traffic).
Not covered: programs that are not Python (a notebook running `curl` in a subprocess), which no
lesson does. `tests/test_offline.py` shows both a refused download and a working loopback.
"""

from __future__ import annotations

import ipaddress
import os
import socket

if os.environ.get("COURSE_OFFLINE_GUARD", "1") != "0":

    class OfflineError(ConnectionRefusedError):
        """Raised instead of opening a connection that would leave this machine."""

    _LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", ""}

    def _is_local(host) -> bool:
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is None:
            return True
        host = str(host).strip("[]").split("%")[0].lower()
        if host in _LOCAL_NAMES:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False  # a host name: only `localhost` is known to be local
        return address.is_loopback or address.is_unspecified

    def _refuse(what: str, host) -> OfflineError:
        return OfflineError(
            f"network access blocked: {what} {host!r}. The course runs offline (its data is "
            "generated in code or shipped inside course_lib), and the test suite enforces it."
        )

    def _target(address):
        if isinstance(address, tuple) and address:
            return address[0]
        return None  # AF_UNIX paths and the like are local by nature

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(_target(address)):
            raise _refuse("connecting to", _target(address))
        return _connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(_target(address)):
            raise _refuse("connecting to", _target(address))
        return _connect_ex(self, address)

    _sendto = socket.socket.sendto

    def sendto(self, data, *args):
        address = args[-1] if args else None
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(_target(address)):
            raise _refuse("sending to", _target(address))
        return _sendto(self, data, *args)

    _getaddrinfo = socket.getaddrinfo

    def _is_address(host) -> bool:
        try:
            ipaddress.ip_address(str(host.decode() if isinstance(host, bytes) else host))
        except ValueError:
            return False
        return True

    def getaddrinfo(host, *args, **kwargs):
        # An address needs no look-up (connecting to it is refused above); a name does.
        if not _is_local(host) and not _is_address(host):
            raise _refuse("looking up", host)
        return _getaddrinfo(host, *args, **kwargs)

    _gethostbyname = socket.gethostbyname

    def gethostbyname(host):
        if not _is_local(host):
            raise _refuse("looking up", host)
        return _gethostbyname(host)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.socket.sendto = sendto
    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.OfflineError = OfflineError  # so a test can name the exception
