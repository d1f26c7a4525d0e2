// Empty. This crate's build-dependencies (Cargo.toml) exist only to unify syn's features on
// the host; build-dependencies belong to a build script, so the crate has one, as the
// workspace-hack crates cargo-hakari generates do.
fn main() {}
