//! Stopping a job on request (Ctrl-C, SIGTERM, a `KeyboardInterrupt` in Python).
//!
//! The executor checks for a request between batches and the job driver
//! ([`crate::rundir::run_job`]) before it commits: an interrupted job stops within a batch,
//! commits nothing and removes its staging directory, so the previous run in the output
//! directory stays as it was.
//!
//! Two sources of requests: a [`Token`] that the thread driving a job sets with
//! [`with_token`] (the Python package cancels it from the thread that sees the
//! `KeyboardInterrupt`), and the process-wide flag set by the signal handlers of
//! [`SignalGuard`] (the `quiver` command).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// The signal that asked to stop (0: none). Set from a signal handler: an atomic store is
/// all a handler may do.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);
/// The signal of the last [`SignalGuard`], kept for [`take_signal`] once jobs no longer see it.
static LAST: AtomicI32 = AtomicI32::new(0);

thread_local! {
    static CURRENT: RefCell<Option<Token>> = const { RefCell::new(None) };
}

/// A request to stop one job, shared between the thread that asks and the job.
#[derive(Clone, Debug, Default)]
pub struct Token(Arc<AtomicBool>);

impl Token {
    pub fn new() -> Self {
        Token::default()
    }
    /// Asks the job to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs `f` (which runs a job on this thread) with `token` as its stop request.
pub fn with_token<T>(token: Token, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Token>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
        }
    }
    let _reset = Reset(CURRENT.with(|c| c.borrow_mut().replace(token)));
    f()
}

/// What a job checks: the token of the thread that started it, and the signal flag.
#[derive(Clone, Debug)]
pub struct Check(Option<Token>);

impl Check {
    /// The stop requests of a job started on this thread.
    pub fn current() -> Check {
        Check(CURRENT.with(|c| c.borrow().clone()))
    }
    /// Whether the job should stop.
    pub fn requested(&self) -> bool {
        SIGNALLED.load(Ordering::Relaxed) != 0 || self.0.as_ref().is_some_and(Token::is_cancelled)
    }
}

/// The signal that asked the job of the last [`SignalGuard`] to stop, if any (SIGINT,
/// SIGTERM), and clears it.
pub fn take_signal() -> Option<i32> {
    match LAST.swap(0, Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// While alive, SIGINT and SIGTERM ask the running job to stop instead of killing the
/// process; a second one kills it as before (the handlers reset themselves). A signal the
/// process ignores (SIGINT of a job a script started in the background) stays ignored.
/// Dropping it restores the previous handlers (those of Python, inside the Python package).
pub struct SignalGuard {
    #[cfg(unix)]
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::Relaxed);
}

impl SignalGuard {
    /// Installs the handlers (nothing on platforms without POSIX signals).
    pub fn install() -> SignalGuard {
        SIGNALLED.store(0, Ordering::Relaxed);
        LAST.store(0, Ordering::Relaxed);
        #[cfg(unix)]
        {
            let mut previous = Vec::new();
            for sig in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: plain sigaction calls on zeroed structs; the handler only stores
                // into an atomic, which is async-signal-safe.
                unsafe {
                    let mut current: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, std::ptr::null(), &mut current) != 0
                        || current.sa_sigaction == libc::SIG_IGN
                    {
                        continue;
                    }
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction =
                        on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                    new.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
                    libc::sigemptyset(&mut new.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, &new, &mut old) == 0 {
                        previous.push((sig, old));
                    }
                }
            }
            SignalGuard { previous }
        }
        #[cfg(not(unix))]
        SignalGuard {}
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        for (sig, old) in &self.previous {
            // SAFETY: restores the action saved by `install`.
            unsafe {
                libc::sigaction(*sig, old, std::ptr::null_mut());
            }
        }
        // Later jobs of this process (Plan.run after `quiver run` in Python) must not see it.
        LAST.store(SIGNALLED.swap(0, Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reaches_only_jobs_started_under_it() {
        let t = Token::new();
        assert!(!Check::current().requested());
        with_token(t.clone(), || {
            let check = Check::current();
            assert!(!check.requested());
            t.cancel();
            assert!(check.requested());
        });
        assert!(!Check::current().requested());
    }
}
