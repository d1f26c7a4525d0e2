//! The `quiver` binary.

fn main() -> std::process::ExitCode {
    quiver::columnar::tune_malloc();
    quiver::cli::main_with(std::env::args_os(), &quiver::registry())
}
