"""A steppable wall clock for test servers: libfaketime preloaded into every server process,
reading its offset from a file the test rewrites.

libfaketime blocks its faking while a process waits in select()/poll()/epoll_wait(); a
postmaster forks background workers (the lease keeper among them) from signal handlers that run
inside such a wait, and those children would then read the real clock forever. A tiny preloaded
shim hands those calls straight to libc, so every process sees the fake clock.
"""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lib.cluster import Cluster, as_owner, pg_config, write_server_file

LIBFAKETIME = pathlib.Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/select.h>

static void *libc_symbol(const char *name)
{
    static void *libc;
    if (libc == NULL)
        libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    return dlsym(libc, name);
}

#define PASS_THROUGH(ret, name, params, args)           \
    ret name params                                     \
    {                                                   \
        static ret (*real) params;                      \
        if (real == NULL)                               \
            real = (ret (*) params) libc_symbol(#name); \
        return real args;                               \
    }

PASS_THROUGH(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t), (n, r, w, e, t))
PASS_THROUGH(int, pselect, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *m), (n, r, w, e, t, m))
PASS_THROUGH(int, poll, (struct pollfd *f, nfds_t n, int t), (f, n, t))
PASS_THROUGH(int, ppoll, (struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m), (f, n, t, m))
PASS_THROUGH(int, epoll_wait, (int fd, struct epoll_event *e, int n, int t), (fd, e, n, t))
PASS_THROUGH(int, epoll_pwait, (int fd, struct epoll_event *e, int n, int t, const sigset_t *m), (fd, e, n, t, m))
"""



def build_preload(shim: pathlib.Path) -> str | None:
    """Builds the shim at `shim` and returns the LD_PRELOAD value for a faked server, or None if
    libfaketime or a C compiler is missing."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not LIBFAKETIME.exists() or compiler is None:
        return None
    with tempfile.TemporaryDirectory() as build:
        source = pathlib.Path(build, "shim.c")
        source.write_text(SHIM_SOURCE)
        built = pathlib.Path(build, "shim.so")
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", built, source, "-ldl"], check=True)
        shutil.copyfile(built, shim)
        shim.chmod(0o755)
    return f"{shim} {LIBFAKETIME}"


def preload_for_tests(label: str) -> Iterator[str]:
    """For a pytest fixture: LD_PRELOAD for faked servers, the shim built once, readable by the
    server's user, and removed afterwards; the test is skipped where it cannot be built."""
    prefix = os.environ.get("RANDFLAKE_TEST_DIR_PREFIX", "/tmp/randflake_pg-it-")
    shim = pathlib.Path(f"{prefix}{label}-faketime-shim-{os.getpid()}.so")
    preload = build_preload(shim)
    if preload is None:
        pytest.skip(f"libfaketime ({LIBFAKETIME}) or a C compiler is missing; make deps installs them")
    yield preload
    shim.unlink()


class FakeClock:
    """The wall clock of one server: real time plus an offset in seconds, changeable at any time."""

    def __init__(self, cluster: Cluster, preload: str, offset: int = 0):
        self.file = cluster.dir / "faketime.rc"
        self.preload = preload
        self.set(offset)

    def set(self, offset: int) -> None:
        """Steps every process's clock."""
        self._write(f"{offset:+d}")
        self.offset = offset

    def _write(self, setting: str) -> None:
        """Replaces the file atomically; every process reads it on every clock reading."""
        staged = self.file.with_name("faketime.rc.new")
        write_server_file(staged, f"{setting}\n", 0o644)
        os.replace(staged, self.file)

    def freeze(self, second: int | None = None) -> int:
        """Stops every process's clock at `second` (by default the start of the next one, a step
        forward) until the next set() or run_from(); returns the second."""
        if second is None:
            second = math.floor(self.now()) + 1
        # A timestamp without '@' is a frozen absolute time to libfaketime, read in local time
        # as the server's processes, started from this one, read it.
        self._write(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second)))
        return second

    def run_from(self, second: int) -> None:
        """Sets every process's clock running again within `second` (at real time's fraction of
        a second), whatever second real time has reached meanwhile."""
        self.set(second - math.floor(time.time()))

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Stops every process's clock at the start of the next second (a step forward), and
        sets it running again only once real time plus the offset has passed that second, so
        that it never steps back. Inside, work of any speed falls into one second."""
        second = self.freeze()
        try:
            yield
        finally:
            # Not a wait for an event: until real time passes the frozen second, running the
            # clock again would step it back.
            time.sleep(max(0.0, second + 0.05 - self.now()))
            self.set(self.offset)

    def now(self) -> float:
        """What the server's clock reads now."""
        return time.time() + self.offset

    def environment(self) -> list[str]:
        return [
            f"LD_PRELOAD={self.preload}",
            f"FAKETIME_TIMESTAMP_FILE={self.file}",
            "FAKETIME_NO_CACHE=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            "NO_FAKE_STAT=1",
        ]


def start_under_fake_clock(cluster: Cluster, clock: FakeClock) -> None:
    """Starts the server with libfaketime in every process (pg_ctl too, so that its check of the
    postmaster's start time agrees with the postmaster's clock)."""
    bindir = pg_config("--bindir")
    command = ["env", *clock.environment(), f"{bindir}/pg_ctl", "-D", str(cluster.dir)]
    command += ["-l", str(cluster.dir / "server.log"), "-w", "-t", "60", "start"]
    result = subprocess.run(as_owner(command), capture_output=True, text=True)
    assert result.returncode == 0, f"{result.stdout}{result.stderr}{cluster.log()[-3000:]}"
