//! The `quiver` binary.

fn main() -> std::process::ExitCode {
    // As other Unix tools: `quiver steps | head -3` ends quietly when the reader goes,
    // instead of println! panicking on EPIPE (Rust ignores SIGPIPE by default).
    #[cfg(unix)]
    // SAFETY: restoring a signal's default action, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    quiver::columnar::tune_malloc();
    quiver::cli::main_with(std::env::args_os(), &quiver::registry())
}
