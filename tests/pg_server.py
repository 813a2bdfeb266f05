"""A real, throwaway PostgreSQL server for tests: Debian's postgresql package (scripts/setup
installs it), initdb in a fresh temporary folder, started with pg_ctl on a Unix socket in that
folder (no TCP), fsync off, TimeZone UTC, and stopped and removed at the end.

PostgreSQL refuses to run as root ("root" execution of the PostgreSQL server is not
permitted), and CI runs as root: then the server runs as the unprivileged user `nobody`
(present on every Debian system) through runuser(1), in a folder chowned to it. Any other
user runs it as itself.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inferledger.core.net import free_port

#: The user the server runs as when the tests run as root.
UNPRIVILEGED_USER = "nobody"


def postgres_bin() -> Path | None:
    """The folder of initdb/pg_ctl/postgres: the newest /usr/lib/postgresql/N/bin (Debian's
    layout, not on PATH), else initdb's folder on PATH; None when PostgreSQL is absent."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass(frozen=True)
class PgServer:
    socket_dir: Path
    port: int
    user: str = "postgres"
    dbname: str = "postgres"

    @property
    def conninfo(self) -> str:
        return f"host={self.socket_dir} port={self.port} user={self.user} dbname={self.dbname}"


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", UNPRIVILEGED_USER, "--", *cmd]
    return cmd


@contextmanager
def pg_server(bin_dir: Path, timeout_s: float = 60) -> Iterator[PgServer]:
    """Start a server; yield how to reach it; stop it and remove its folder."""
    folder = Path(tempfile.mkdtemp(prefix="inferledger-pg-"))
    data = folder / "data"
    log = folder / "server.log"
    if os.geteuid() == 0:
        shutil.chown(folder, UNPRIVILEGED_USER)
    port = free_port()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    started = False
    try:
        subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=timeout_s,
            env=env,
            cwd=folder,
        )
        options = (
            f"-k {folder} -p {port} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c TimeZone=UTC"
        )
        proc = subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    str(int(timeout_s)),
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=timeout_s + 10,
            env=env,
            cwd=folder,
        )
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {proc.stdout}{proc.stderr}{tail}")
        started = True
        yield PgServer(folder, port)
    finally:
        if started:
            subprocess.run(
                _as_server_user(
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=timeout_s,
                env=env,
                cwd=folder,
            )
        shutil.rmtree(folder, ignore_errors=True)
