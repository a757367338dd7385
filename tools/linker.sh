#!/bin/sh
# The linker cargo runs on x86-64 Linux (.cargo/config.toml): the C compiler, as rustc would run
# it, but linking with mold when mold is installed. The last -fuse-ld wins, so this one overrides
# rustc's choice (its own lld).
if command -v mold >/dev/null 2>&1; then
    exec cc "$@" -fuse-ld=mold
fi
exec cc "$@"
