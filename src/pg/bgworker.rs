//! What a background worker of this library needs from PostgreSQL: an entry point, signal
//! handlers, a way to idle between transactions, and its transactions themselves.
//!
//! Every worker enters through one exported function, [`randflake_worker_main`], with its Rust
//! main function as the argument: the postmaster forks workers from a process that has this
//! library loaded at the same address, so the pointer means the same in the worker.

use std::ffi::c_int;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorkerBuilder, DynamicBackgroundWorker};
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::{backend, guc, unguarded};

/// A background worker of this library: its name (also its type in pg_stat_activity) and the
/// function it runs.
pub struct Worker {
    pub name: &'static str,
    pub main: fn(),
}

impl Worker {
    fn builder(&self) -> BackgroundWorkerBuilder {
        BackgroundWorkerBuilder::new(self.name)
            .set_type(self.name)
            .set_library("randflake_pg")
            .set_function("randflake_worker_main")
            .set_argument(Some(pg_sys::Datum::from(self.main as usize)))
            .enable_spi_access()
    }

    /// Registers the worker with the postmaster, to start once recovery has finished and again
    /// `restart` after it stops with a failure. Only while preloading.
    pub fn register(&self, restart: Duration) {
        self.builder().set_restart_time(Some(restart)).load();
    }

    /// Starts the worker now, from another worker that is told when it stops; `None` when no
    /// background worker slot is free.
    pub fn start(&self) -> Option<DynamicBackgroundWorker> {
        self.builder().set_notify_pid(backend::pid()).load_dynamic().ok()
    }
}

/// The entry point of every background worker of this library.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn randflake_worker_main(main: pg_sys::Datum) {
    // SAFETY: the argument is the `fn()` that `Worker::builder` passed; see the module's
    // documentation for why it is valid in this process.
    let main: fn() = unsafe { std::mem::transmute::<usize, fn()>(main.value()) };
    main();
}

/// The worker's signal handlers: reload on SIGHUP; SIGINT cancels the statement, as
/// PostgreSQL's handler for backends does (a statement timeout needs it); on SIGTERM, shut down
/// every stream socket (see [`shut_down_stream_sockets`]) and then terminate as PostgreSQL's
/// backends do, at the next interrupt check, with a FATAL.
pub fn install_signal_handlers() {
    // SAFETY: installing handlers from the worker's only thread before anything else runs; the
    // handlers only set flags, set the latch and make async-signal-safe system calls.
    unsafe {
        set_handler(pg_sys::SIGHUP as c_int, reload);
        set_handler(pg_sys::SIGINT as c_int, cancel);
        set_handler(pg_sys::SIGTERM as c_int, terminate);
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// # Safety
///
/// From the worker's main thread; `handler` must be async-signal-safe.
unsafe fn set_handler(signal: c_int, handler: unsafe extern "C-unwind" fn(c_int)) {
    // SAFETY: the caller's; pqsignal is PostgreSQL's portable sigaction wrapper.
    #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
    unsafe {
        pg_sys::pqsignal(signal, Some(handler));
    }
    // SAFETY: as above; 18 renamed the backend's variant (the newest majors come last here, so
    // that a new one starts from the latest behaviour).
    #[cfg(not(any(feature = "pg15", feature = "pg16", feature = "pg17")))]
    unsafe {
        pg_sys::pqsignal_be(signal, Some(handler));
    }
}

/// # Safety
///
/// Only the kernel calls this, as the SIGHUP handler.
unsafe extern "C-unwind" fn reload(_signal: c_int) {
    // SAFETY: what PostgreSQL's SignalHandlerForConfigReload does: a flag and the latch.
    unsafe {
        std::ptr::write_volatile(&raw mut pg_sys::ConfigReloadPending, 1);
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

/// # Safety
///
/// Only the kernel calls this, as the SIGINT handler.
unsafe extern "C-unwind" fn cancel(signal: c_int) {
    // SAFETY: PostgreSQL's own SIGINT handler for backends, called as a signal handler.
    unsafe { unguarded::statement_cancel_handler(signal) };
}

/// # Safety
///
/// Only the kernel calls this, as the SIGTERM handler.
unsafe extern "C-unwind" fn terminate(signal: c_int) {
    shut_down_stream_sockets();
    // SAFETY: PostgreSQL's own SIGTERM handler for backends, called as a signal handler.
    unsafe { unguarded::die(signal) };
}

/// Waits up to `duration` on the latch, then serves interrupts between transactions: a
/// reload, or the termination SIGTERM asked for. A cancel (pg_cancel_backend) between
/// transactions has nothing to cancel and is dropped, so that it raises no ERROR here.
pub fn idle(duration: Duration) {
    backend::wait_on_latch(duration);
    // SAFETY: plain writes and reads of this process's interrupt flags, from its only thread.
    unsafe { std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0) };
    check_for_interrupts!();
    // SAFETY: as above.
    let reload = unsafe { std::ptr::read_volatile(&raw const pg_sys::ConfigReloadPending) != 0 };
    if reload {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&raw mut pg_sys::ConfigReloadPending, 0) };
        guc::reload_configuration_file();
    }
}

/// Forgets a cancel that arrived after the statement it was meant for had finished, so that it
/// does not cancel the next one.
pub fn forget_pending_cancel() {
    // SAFETY: a plain write of this process's interrupt flag, from its only thread.
    unsafe { std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0) };
}

/// Shuts down every stream socket of this process: for a worker whose only stream sockets are
/// its connections to remote servers (postgres_fdw), every wait on them then ends at once, as
/// on a dropped connection, where libpq would otherwise wait with no limit (a connection attempt
/// before PostgreSQL 17, a cancel request on abort). The descriptors stay open (libpq closes
/// them), so no number is reused under anyone. Async-signal-safe: system calls only.
pub fn shut_down_stream_sockets() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit, fstat, getsockopt and shutdown are async-signal-safe and only read or
    // change the descriptors named; out-parameters point at locals.
    unsafe {
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536) as c_int
        } else {
            1024
        };
        for fd in 0..highest {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                continue;
            }
            let mut kind: c_int = 0;
            let mut length = std::mem::size_of::<c_int>() as libc::socklen_t;
            let read = libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut kind).cast(), &mut length);
            if read == 0 && kind == libc::SOCK_STREAM {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}
