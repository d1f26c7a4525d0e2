// Empty: cargo resolves a package's build-dependencies (and so their features) only when the
// package has a build script. See Cargo.toml for why this crate exists.
fn main() {}
