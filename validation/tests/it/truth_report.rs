//! Runs the truth report on an existing run and dataset, for measurements by hand, and
//! prints its tables:
//! `QUIVER_RUN=run QUIVER_TRUTH=dataset QUIVER_REPORT=out cargo test -p quiver-validation
//! --test it truth_report -- --ignored --nocapture`.

use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, UInt64Type};
use arrow_schema::DataType;

fn dump(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    println!("== {}", path.file_name().unwrap().to_string_lossy());
    for b in r {
        let b = b.unwrap();
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        println!("{}", names.join("\t"));
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| match c.data_type() {
                    DataType::Utf8 => c.as_string::<i32>().value(i).to_string(),
                    DataType::Float64 => format!("{:.5}", c.as_primitive::<Float64Type>().value(i)),
                    DataType::UInt64 => c.as_primitive::<UInt64Type>().value(i).to_string(),
                    t => format!("{t}"),
                })
                .collect();
            println!("{}", cells.join("\t"));
        }
    }
}

#[test]
#[ignore = "needs QUIVER_RUN, QUIVER_TRUTH and QUIVER_REPORT"]
fn report_from_environment() {
    let var = |k: &str| PathBuf::from(std::env::var(k).unwrap_or_else(|_| panic!("set {k}")));
    let out = var("QUIVER_REPORT");
    let s =
        quiver_validation::truth::report(&var("QUIVER_RUN"), &var("QUIVER_TRUTH"), &out).unwrap();
    for f in [
        "efficiency",
        "resolution",
        "vertex_efficiency",
        "vertex_neighbours",
        "track_composition",
        "hit_residuals",
    ] {
        dump(&out.join(format!("{f}.parquet")));
    }
    println!("{}", s.to_json());
}
