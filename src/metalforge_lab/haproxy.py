"""HAProxy (Debian's) in front of several API processes, as operators run it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from metalforge_lab.ports import free_port
from metalforge_lab.running import terminate


class HaProxy:
    """Round-robin TCP-level HTTP proxying: one frontend port per named backend set."""

    def __init__(self, workdir: Path, backends: dict[str, list[int]]) -> None:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(binary).exists():
            raise RuntimeError("haproxy is not installed (make test installs it from apt)")
        self.binary = binary
        self.workdir = workdir
        self.ports = {name: free_port() for name in backends}
        self.backends = backends
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def _config(self) -> str:
        lines = [
            "global",
            "  maxconn 2000",
            "defaults",
            "  mode http",
            "  timeout connect 2s",
            "  timeout client 60s",
            "  timeout server 60s",
            "  retries 3",
            "  option redispatch",
        ]
        for name, ports in self.backends.items():
            lines += [
                f"frontend {name}_in",
                f"  bind 127.0.0.1:{self.ports[name]}",
                f"  default_backend {name}_out",
                f"backend {name}_out",
                "  balance roundrobin",
            ]
            lines += [
                f"  server {name}{i} 127.0.0.1:{port} check inter 500ms"
                for i, port in enumerate(ports)
            ]
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        config = self.workdir / "haproxy.cfg"
        config.write_text(self._config())
        log = (self.workdir / "haproxy.log").open("wb")
        self.process = subprocess.Popen(
            [self.binary, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        for port in self.ports.values():
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "haproxy did not start"
                    time.sleep(0.05)

    def stop(self) -> None:
        terminate(self.process)
