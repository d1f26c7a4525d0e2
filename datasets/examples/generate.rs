//! Writes a dataset and prints the summary (the numbers of `docs/datasets.md`).
//! Usage: `cargo run --release -p quiver-datasets --example generate -- OUT [events] [pileup] [threads]`
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let opts = quiver_datasets::GenerateOptions {
        output: a.get(1).map(Into::into).unwrap_or_else(|| "dataset".into()),
        events: a.get(2).and_then(|s| s.parse().ok()).unwrap_or(100),
        pileup: a.get(3).and_then(|s| s.parse().ok()).unwrap_or(50.0),
        threads: a.get(4).and_then(|s| s.parse().ok()),
        ..Default::default()
    };
    match quiver_datasets::generate(&opts) {
        Ok(s) => println!("{s:#?}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
